//! Direct handoffs: a thread releasing a reentrant lock hands it straight
//! to a parked waiter of the same client, in the release script
//! (`lua/lock_release.lua` given the waiter), so the waiter holds it without an acquire
//! of its own. Also what happens when that script's reply is lost, when it
//! is slow and the waiter gives up meanwhile, and that a client frees the
//! lock the usual way after a streak of handoffs. On every store.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::wrap::{Hook, Store, Wrapped, assert_forwards_every_method};
use common::{Env, backend_tests, unique_name, wait_until};
use redisync::{Client, NopEventHandler};
use redisync::{LockBackend, Reply, ScriptCall};

backend_tests!(
    a_release_hands_the_lock_to_a_parked_waiter_of_the_same_client,
    a_lost_handoff_reply_is_replayed_from_the_latch,
    a_handoff_reply_never_seen_leaves_the_waiter_holding_once,
    a_waiter_that_gave_up_during_a_slow_handoff_leaves_nothing_held,
    after_a_streak_of_handoffs_the_lock_is_freed_the_usual_way,
    a_thread_whose_sibling_holds_the_lock_waits_without_attempting,
    a_sibling_lease_that_ran_out_is_no_reason_to_wait,
    a_hold_the_store_lost_wakes_the_sibling_that_waited_on_it,
    threads_that_skip_their_attempt_are_never_left_parked,
    holds_passed_between_threads_stay_exclusive_and_reentrant,
    a_fixed_lease_passed_to_another_thread_restarts_for_it,
    fixed_leases_passed_around_quickly_cost_the_store_no_restart,
    a_holder_re_enters_while_a_woken_waiter_retries,
    a_fair_waiter_whose_retry_lands_after_its_handoff_holds_once,
    a_waiter_whose_wait_ends_while_handed_the_lock_sends_no_attempt,
);

// Not on a Redis Cluster, where waiters are not queued in the store.
#[test]
fn a_fixed_lease_waiter_of_another_client_is_handed_the_lock_outright_memory() {
    a_fixed_lease_waiter_of_another_client_is_handed_the_lock_outright(&Env::memory());
}

#[test]
fn a_fixed_lease_waiter_of_another_client_is_handed_the_lock_outright_redis() {
    a_fixed_lease_waiter_of_another_client_is_handed_the_lock_outright(&Env::redis());
}

#[test]
fn a_queued_sibling_handed_the_lock_leaves_the_queue_memory() {
    a_queued_sibling_handed_the_lock_leaves_the_queue(&Env::memory());
}

#[test]
fn a_queued_sibling_handed_the_lock_leaves_the_queue_redis() {
    a_queued_sibling_handed_the_lock_leaves_the_queue(&Env::redis());
}

/// Deletes a key behind every client's back (a hold the store lost).
static DELETE_KEY: redisync::Script = redisync::Script::new(
    "test_delete_key",
    "delete a key (test)",
    "return redis.call('del', KEYS[1])",
);

/// Counts a sorted set's members (the lock's waiter queue).
static COUNT_MEMBERS: redisync::Script = redisync::Script::new(
    "test_count_members",
    "count a sorted set's members (test)",
    "return redis.call('zcard', KEYS[1])",
);

/// Runs a test script on `key` with `args`, behind every client's back.
fn run_on_key(
    client: &Client,
    script: &'static redisync::Script,
    key: &str,
    args: &[&str],
) -> Reply {
    let mut call = ScriptCall::new(
        script,
        redisync::Resend::Harmless,
        redisync::Effect::Change(|_| true),
    )
    .key(key);
    for arg in args {
        call = call.arg(*arg);
    }
    client.backend().run_script(&call).unwrap()
}

/// How many entries the store's waiter queue of lock `name` holds.
fn queued_entries(client: &Client, name: &str) -> i64 {
    let queue = format!("{{{name}}}:redisync_waiters");
    run_on_key(client, &COUNT_MEMBERS, &queue, &[])
        .as_int()
        .unwrap()
}

fn delete_behind_the_clients_back(client: &Client, key: &str) {
    let deleted = run_on_key(client, &DELETE_KEY, key, &[]);
    assert_eq!(deleted.as_int(), Some(1), "the lock's hash existed");
}

/// Counts scripts by id, and the distinct unlock latches of release
/// scripts (a release resent after a late reply runs again with its
/// latch); can delay the handoff script and lose its replies after
/// applying it (a dropped connection). Everything else is forwarded, by
/// [`Wrapped`].
#[derive(Default)]
struct Hooked {
    calls: Mutex<HashMap<&'static str, u64>>,
    release_latches: Mutex<std::collections::HashSet<String>>,
    delay_handoff: Mutex<Duration>,
    lose_handoff_replies: AtomicU64,
    /// A delay after a handoff script ran, before its reply is returned.
    delay_handoff_reply: Mutex<Duration>,
    /// A delay before the next `lock_acquire` only (then cleared).
    delay_next_acquire: Mutex<Option<Duration>>,
}

impl Hooked {
    fn new(inner: Arc<dyn LockBackend>) -> Arc<Wrapped<Hooked>> {
        Arc::new(Wrapped::around(inner, Hooked::default()))
    }

    fn calls(&self, id: &str) -> u64 {
        self.calls.lock().unwrap().get(id).copied().unwrap_or(0)
    }
}

impl Hook for Hooked {
    fn run_script(&self, inner: &Store, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        // A release given a waiter of this client is a handoff: its
        // ARGV[5] without the queue's keys, ARGV[7] (the waiter's three
        // last, only when there is one) with them.
        let waiter_at = if call.keys().len() > 3 { 6 } else { 4 };
        let id = match call.script().id() {
            "lock_release"
                if call
                    .args()
                    .get(waiter_at)
                    .is_some_and(|a| !a.as_ref().is_empty()) =>
            {
                "handoff"
            }
            id => id,
        };
        *self.calls.lock().unwrap().entry(id).or_insert(0) += 1;
        if call.script().id() == "lock_release"
            && let Some(latch) = call.keys().get(2)
        {
            self.release_latches
                .lock()
                .unwrap()
                .insert(latch.as_ref().to_owned());
        }
        if id == "lock_acquire" || id == "fair_lock_acquire" {
            let delay = self.delay_next_acquire.lock().unwrap().take();
            if let Some(delay) = delay {
                thread::sleep(delay);
            }
        }
        if id == "handoff" {
            let delay = *self.delay_handoff.lock().unwrap();
            thread::sleep(delay);
            let reply = inner.run_script(call)?;
            let delay = *self.delay_handoff_reply.lock().unwrap();
            thread::sleep(delay);
            let lost = self
                .lose_handoff_replies
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if lost {
                return Err(redisync::Error::backend("reply lost (test)", true));
            }
            return Ok(reply);
        }
        inner.run_script(call)
    }
}

#[test]
fn the_hooked_store_forwards_every_method() {
    assert_forwards_every_method(Hooked::default());
}

/// The harness's `CountingBackend` (used by most conformance suites) too.
#[test]
fn the_counting_store_forwards_every_method() {
    let counting = common::Counting::default();
    assert_forwards_every_method(counting.clone());
    for method in [
        "test_forward_check",
        "publish",
        "with_pubsub",
        "server_command",
    ] {
        assert_eq!(counting.calls(method), 1, "{method} counted once");
    }
}

/// What the waiter thread sends: its holder id if it got the lock, and when.
type WaiterResult = mpsc::Receiver<(Option<String>, Instant)>;

/// A client on `env`'s store through a [`Hooked`] backend.
fn hooked_client(env: &Env) -> (Client, Arc<Wrapped<Hooked>>) {
    let base = env.client();
    let hooked = Hooked::new(Arc::clone(base.backend()));
    let client = Client::builder()
        .backend(Arc::clone(&hooked) as Arc<dyn LockBackend>)
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .unwrap();
    (client, hooked)
}

/// Takes `name` on this thread, starts a waiter thread on it (`lock()`, or
/// `try_lock_for(wait)`), and waits until that waiter has attempted once
/// and parked. Returns the holder's guard and the waiter's result channel.
/// The waiter checks that the store counts one hold for it when
/// `one_hold` (not after an unknown handoff: its retry then re-entered).
fn hold_with_a_parked_waiter(
    client: &Client,
    hooked: &Hooked,
    name: &str,
    wait: Option<Duration>,
    one_hold: bool,
) -> (redisync::LockGuard, WaiterResult, thread::JoinHandle<()>) {
    let guard = client.lock(name).lock().unwrap();
    let acquires_before = hooked.calls("lock_acquire");
    let (tx, rx) = mpsc::channel();
    let waiter = client.lock(name);
    let handle = thread::spawn(move || {
        let got = match wait {
            None => Some(waiter.lock().unwrap()),
            Some(wait) => waiter.try_lock_for(wait).unwrap(),
        };
        let id = got.as_ref().map(|_| waiter.client().current_holder_id());
        let at = Instant::now();
        tx.send((id, at)).unwrap();
        if let Some(guard) = got {
            if one_hold {
                assert_eq!(waiter.hold_count().unwrap(), 1, "one hold, as acquired");
            }
            guard.unlock().unwrap();
        }
    });
    // No first attempt: a thread of its own client holds the lock, so it
    // parks at once. Then the retry every waiter makes once its new
    // channel's subscription is confirmed; after that it stays parked until
    // a release (the name is fresh, so the channel is new).
    wait_until("the waiter attempted once", Duration::from_secs(10), || {
        hooked.calls("lock_acquire") > acquires_before
    });
    // Time to park after that failed attempt.
    thread::sleep(Duration::from_millis(200));
    (guard, rx, handle)
}

fn a_release_hands_the_lock_to_a_parked_waiter_of_the_same_client(env: &Env) {
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:basic");
    let (guard, rx, handle) = hold_with_a_parked_waiter(&client, &hooked, &name, None, true);
    let acquires = hooked.calls("lock_acquire");
    guard.unlock().unwrap();
    let (id, _) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("handed over");
    handle.join().unwrap();
    assert!(id.is_some());
    assert_eq!(hooked.calls("handoff"), 1, "one handoff script");
    assert_eq!(
        hooked.calls("lock_acquire"),
        acquires,
        "the waiter holds it without an acquire of its own"
    );
    assert!(
        !client.lock(&name).is_locked().unwrap(),
        "released in the end"
    );
}

fn a_lost_handoff_reply_is_replayed_from_the_latch(env: &Env) {
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:lost-reply");
    let (guard, rx, handle) = hold_with_a_parked_waiter(&client, &hooked, &name, None, true);
    hooked.lose_handoff_replies.store(1, Ordering::SeqCst);
    guard.unlock().unwrap();
    let (id, _) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("handed over");
    handle.join().unwrap();
    assert!(id.is_some());
    // Sent again under the same latch, which answered "handed over".
    assert_eq!(hooked.calls("handoff"), 2);
    assert!(!client.lock(&name).is_locked().unwrap());
}

fn a_handoff_reply_never_seen_leaves_the_waiter_holding_once(env: &Env) {
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:unknown");
    let (guard, rx, handle) = hold_with_a_parked_waiter(&client, &hooked, &name, None, false);
    // Every try of the release loses its reply: the outcome stays unknown,
    // the releaser gets the connection error, the waiter retries.
    hooked.lose_handoff_replies.store(100, Ordering::SeqCst);
    assert!(guard.unlock().unwrap_err().is_connection_error());
    hooked.lose_handoff_replies.store(0, Ordering::SeqCst);
    // The handoff landed: the waiter's retry is a reentrant acquisition (two
    // holds in the store for one guard), and its outermost unlock drains
    // the extra hold.
    let (id, _) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter got it");
    handle.join().unwrap();
    assert!(id.is_some());
    let lock = client.lock(&name);
    wait_until("the lock is free", Duration::from_secs(10), || {
        !lock.is_locked().unwrap()
    });
}

fn a_waiter_that_gave_up_during_a_slow_handoff_leaves_nothing_held(env: &Env) {
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:withdrawn");
    let wait = Duration::from_millis(600);
    let started = Instant::now();
    let (guard, rx, handle) = hold_with_a_parked_waiter(&client, &hooked, &name, Some(wait), false);
    // The handoff script takes longer than the waiter still waits.
    *hooked.delay_handoff.lock().unwrap() = Duration::from_millis(800);
    guard.unlock().unwrap();
    let (id, at) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the waiter returned");
    handle.join().unwrap();
    // It kept its bound (wait + a generous allowance) and got nothing...
    assert!(
        at.duration_since(started) < wait + Duration::from_millis(700),
        "{:?}",
        at.duration_since(started)
    );
    // ...or, if its last attempt came after the handoff landed, got it and
    // released it. Either way nothing is held now: the releaser released
    // the hold it handed to a waiter that had left.
    let _ = id;
    assert!(
        !client.lock(&name).is_locked().unwrap(),
        "a hold was left behind"
    );
    assert_eq!(hooked.calls("handoff"), 1);
}

fn after_a_streak_of_handoffs_the_lock_is_freed_the_usual_way(env: &Env) {
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:streak");
    const ROUNDS: usize = 60;
    // Two threads of one client take turns: every release finds the other
    // parked (or about to park).
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let lock = client.lock(&name);
            thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let guard = lock.lock().unwrap();
                    thread::sleep(Duration::from_millis(2));
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let handoffs = hooked.calls("handoff");
    let plain = hooked.calls("lock_release");
    // Every unlock ran a release (handoff or plain), each with a latch of
    // its own, or passed its hold to the other thread with no call at all
    // (see `lock::cohort`). On a loaded machine a few more scripts may run
    // (seen once in CI: 121 for 120): a release whose reply came late is
    // sent again with the same latch, and an unlock that finds the store
    // counting a hold its thread no longer has (a retry that re-entered a
    // hold just handed to it) releases that one too, with a fresh latch.
    let unlocks = 2 * ROUNDS;
    let scripts = usize::try_from(handoffs + plain).unwrap();
    let latches = hooked.release_latches.lock().unwrap().len();
    let passes = unlocks.saturating_sub(latches);
    eprintln!(
        "{unlocks} unlocks ran {scripts} release scripts ({handoffs} handoffs) with {latches} \
         latches; {passes} passed the hold inside the client"
    );
    assert!(
        latches <= unlocks && scripts >= latches,
        "{scripts} release scripts with {latches} latches for {unlocks} unlocks"
    );
    assert!(
        scripts <= latches + latches / 10,
        "{scripts} release scripts for {latches} releases"
    );
    assert!(handoffs > 0, "no handoff in {unlocks} releases");
    // The hold handed by a script learns the streak's count with it and is
    // passed on between the two threads from then on.
    // (Not on a Redis Cluster, which keeps no count of holders in a row.)
    let counts = client.backend().slot_of("redisync").is_none();
    assert!(
        passes > 0 || !counts,
        "no hold passed inside the client in {unlocks} unlocks"
    );
    // At most 16 handoffs or passes in a row: a plain release at least
    // every 17th unlock while the two threads alternate.
    assert!(
        usize::try_from(plain).unwrap() >= unlocks / 17,
        "{handoffs} handoffs and {passes} passes, only {plain} plain releases"
    );
    assert!(!client.lock(&name).is_locked().unwrap());
}

fn a_thread_whose_sibling_holds_the_lock_waits_without_attempting(env: &Env) {
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:sibling");
    let guard = client.lock(&name).lock().unwrap();
    let before = hooked.calls("lock_acquire");
    let lock = client.lock(&name);
    let (tries, bounded) = thread::spawn(move || {
        // A sibling holds it: no round trip can change that.
        let tried = lock.try_lock().unwrap().is_some();
        let started = Instant::now();
        let bounded = lock.try_lock_for(Duration::from_millis(300)).unwrap();
        (tried, (bounded.is_some(), started.elapsed()))
    })
    .join()
    .unwrap();
    assert!(!tries, "try_lock while a sibling holds it");
    assert!(!bounded.0, "try_lock_for while a sibling holds it");
    assert!(
        bounded.1 >= Duration::from_millis(250) && bounded.1 < Duration::from_secs(3),
        "kept its bound: {:?}",
        bounded.1
    );
    // try_lock sent nothing; the bounded wait at most the retry its new
    // subscription's confirmation gives and the one at its deadline.
    let attempts = hooked.calls("lock_acquire") - before;
    assert!(attempts <= 2, "{attempts} acquire scripts");
    // Another client knows nothing of the holder: it attempts, and fails.
    let other = env.client();
    assert!(other.lock(&name).try_lock().unwrap().is_none());
    // The waiter that parked without an attempt gets it on the unlock.
    let lock = client.lock(&name);
    let waiter = thread::spawn(move || {
        let guard = lock.lock().unwrap();
        let at = Instant::now();
        guard.unlock().unwrap();
        at
    });
    thread::sleep(Duration::from_millis(200));
    let released = Instant::now();
    guard.unlock().unwrap();
    let got = waiter.join().unwrap();
    assert!(
        got.duration_since(released) < Duration::from_secs(2),
        "woken by the unlock: {:?}",
        got.duration_since(released)
    );
    assert!(!client.lock(&name).is_locked().unwrap());
}

fn a_sibling_lease_that_ran_out_is_no_reason_to_wait(env: &Env) {
    let (client, _hooked) = hooked_client(env);
    let name = unique_name("handoff:sibling-lease");
    let lease = Duration::from_millis(300);
    let started = Instant::now();
    // Held with a fixed lease and never unlocked in time.
    let guard = client.lock(&name).lock_with_lease(lease).unwrap();
    let lock = client.lock(&name);
    let waited = thread::spawn(move || {
        let guard = lock.lock().unwrap();
        let at = Instant::now();
        guard.unlock().unwrap();
        at
    })
    .join()
    .unwrap();
    // It parked for what the lease had left, then took the expired lock:
    // well before the 30 s watchdog timeout it would otherwise fall back on.
    let after = waited.duration_since(started);
    assert!(
        after >= Duration::from_millis(250) && after < Duration::from_secs(3),
        "{after:?}"
    );
    assert!(guard.is_lost());
    assert!(matches!(
        guard.unlock(),
        Err(redisync::Error::NotHeld { .. })
    ));
}

fn a_hold_the_store_lost_wakes_the_sibling_that_waited_on_it(env: &Env) {
    let (client, _hooked) = hooked_client(env);
    let name = unique_name("handoff:sibling-lost");
    let guard = client.lock(&name).lock().unwrap();
    let lock = client.lock(&name);
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let guard = lock.lock().unwrap();
        tx.send(Instant::now()).unwrap();
        guard.unlock().unwrap();
    });
    // Parked (on the sibling's hold), then the store loses the hold: no
    // unlock is published, and the waiter's park is bounded only by the
    // 30 s watchdog timeout.
    thread::sleep(Duration::from_millis(300));
    delete_behind_the_clients_back(&client, &name);
    thread::sleep(Duration::from_millis(100));
    assert!(rx.try_recv().is_err(), "nothing woke it yet");
    let unlocked = Instant::now();
    assert!(matches!(
        guard.unlock(),
        Err(redisync::Error::NotHeld { .. })
    ));
    // The unlock that found the hold gone wakes it.
    let got = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
    waiter.join().unwrap();
    assert!(
        got.duration_since(unlocked) < Duration::from_secs(2),
        "{:?}",
        got.duration_since(unlocked)
    );
}

/// Many threads of two clients loop `lock()` + `unlock()`: most find a
/// sibling holding the lock and park without an attempt. None may sleep
/// out the 30 s lease for want of a wake (a release that published before
/// a waiter's snapshot while its hold was still recorded would do that).
fn threads_that_skip_their_attempt_are_never_left_parked(env: &Env) {
    let name = unique_name("handoff:skip-stress");
    let clients = [env.client(), env.client()];
    const ROUNDS: usize = 150;
    let started = Instant::now();
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let lock = clients[usize::from(i >= 6)].lock(&name);
            thread::spawn(move || {
                let mut longest = Duration::ZERO;
                for _ in 0..ROUNDS {
                    let asked = Instant::now();
                    let guard = lock.lock().unwrap();
                    longest = longest.max(asked.elapsed());
                    guard.unlock().unwrap();
                }
                longest
            })
        })
        .collect();
    let longest = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .max()
        .unwrap();
    assert!(
        longest < Duration::from_secs(5),
        "a lock() waited {longest:?}: a wake was lost"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(!clients[0].lock(&name).is_locked().unwrap());
}

/// A waiter with a fixed lease in another client (its queue entry carries
/// its lease) is handed the lock outright by the release, as a watchdog
/// waiter is: it holds it without an acquire of its own, once, with its
/// own lease as the hold's TTL (issue 33; before, the release only
/// reserved it the lock and its next attempt took it).
fn a_fixed_lease_waiter_of_another_client_is_handed_the_lock_outright(env: &Env) {
    let holder = env.client();
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:leased");
    let lease = Duration::from_secs(60);
    let guard = holder.lock(&name).lock().unwrap();
    let (tx, rx) = mpsc::channel();
    let waiter = client.lock(&name);
    let handle = thread::spawn(move || {
        let got = waiter.lock_with_lease(lease).unwrap();
        let ttl = waiter.remaining_ttl().unwrap();
        let count = waiter.hold_count().unwrap();
        tx.send((ttl, count)).unwrap();
        got.unlock().unwrap();
    });
    wait_until("the waiter attempted once", Duration::from_secs(10), || {
        hooked.calls("lock_acquire") > 0
    });
    // Time to park (and to retry once its subscription is confirmed).
    thread::sleep(Duration::from_millis(300));
    let acquires = hooked.calls("lock_acquire");
    guard.unlock().unwrap();
    let (ttl, count) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("handed over");
    handle.join().unwrap();
    assert_eq!(
        hooked.calls("lock_acquire"),
        acquires,
        "the waiter holds it without an acquire of its own"
    );
    assert_eq!(count, 1, "one hold");
    let ttl = ttl.expect("the handed hold has a TTL");
    assert!(
        ttl > lease / 2 && ttl <= lease,
        "the handed hold's TTL is the waiter's lease ({lease:?}), not the claim window: {ttl:?}"
    );
    assert!(
        !holder.lock(&name).is_locked().unwrap(),
        "released in the end"
    );
}

/// A waiter whose attempt queued it in the store and that a sibling then
/// hands the lock leaves the queue in that handoff (a waiter that parked
/// at once sent nothing, and its handoff skips the call): a stale entry
/// would make a later release hand the lock to a wait that ended.
fn a_queued_sibling_handed_the_lock_leaves_the_queue(env: &Env) {
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:queued");
    let guard = client.lock(&name).lock().unwrap();
    let acquires_before = hooked.calls("lock_acquire");
    let (got_tx, got_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let lock = client.lock(&name);
    let waiter = thread::spawn(move || {
        let guard = lock.lock().unwrap();
        got_tx.send(()).unwrap();
        // Held until the test has looked at the queue.
        done_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        guard.unlock().unwrap();
    });
    // It parks at once (its sibling holds the lock), then attempts once
    // when its subscription is confirmed: that attempt queues it.
    wait_until("the waiter attempted once", Duration::from_secs(10), || {
        hooked.calls("lock_acquire") > acquires_before
    });
    wait_until("the waiter queued", Duration::from_secs(10), || {
        queued_entries(&client, &name) == 1
    });
    thread::sleep(Duration::from_millis(200));
    guard.unlock().unwrap();
    got_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("handed over");
    assert_eq!(hooked.calls("handoff"), 1, "one handoff script");
    assert_eq!(
        queued_entries(&client, &name),
        0,
        "the handoff took the waiter's entry out of the queue"
    );
    done_tx.send(()).unwrap();
    waiter.join().unwrap();
    assert!(!client.lock(&name).is_locked().unwrap());
}

/// A waiter outside the queue (a Redisson client, which hears only
/// published unlocks) gets its turn after a streak of redisync holders
/// even when each hold outlasts the claim window: the count of holders in
/// a row must not run out between two handoffs. Three clients (one thread
/// each, so every handoff goes through the store's queue) with a 200 ms
/// watchdog (a 100 ms claim window) hold the lock 150 ms each; a raw
/// connection listening on the lock's channel stands for the Redisson
/// waiter and counts the unlocks published while all three still loop.
#[test]
fn a_streak_of_long_holds_still_frees_the_lock_for_a_waiter_outside_the_queue() {
    const CLIENTS: usize = 3;
    const ROUNDS: usize = 24;
    let server = common::TestServer::start();
    let name = unique_name("handoff:long-streak");
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let mut listener = server.connection();
    let mut listening = listener.as_pubsub();
    listening.subscribe(&channel).unwrap();
    listening
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let first_done = Arc::new(Mutex::new(None::<Instant>));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let client = redisync::Client::builder()
                .event_handler(Arc::new(NopEventHandler))
                .redis_url(server.url())
                .watchdog_timeout(Duration::from_millis(200))
                .build()
                .unwrap();
            let lock = client.lock(&name);
            let first_done = Arc::clone(&first_done);
            thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let guard = lock.lock().unwrap();
                    thread::sleep(Duration::from_millis(150));
                    guard.unlock().unwrap();
                }
                first_done.lock().unwrap().get_or_insert_with(Instant::now);
                drop(client);
            })
        })
        .collect();
    // Unlocks published before the first worker finished: while every
    // release found the other two queued, so each was a yield.
    let mut published = Vec::new();
    let started = Instant::now();
    while workers.iter().any(|w| !w.is_finished()) && started.elapsed() < Duration::from_secs(120) {
        if let Ok(message) = listening.get_message() {
            let _: String = message.get_payload().unwrap();
            published.push(Instant::now());
        }
    }
    for worker in workers {
        worker.join().unwrap();
    }
    let first_done = first_done.lock().unwrap().expect("a worker finished");
    let yields = published.iter().filter(|at| **at < first_done).count();
    // 3 x 24 = 72 holders; at most 16 in a row before a yield. The first
    // worker finishes after about 3 x 24 less the last rounds of the
    // others: at least 48 holders, so at least 2 yields.
    assert!(
        yields >= 2,
        "{yields} unlocks published during {} acquisitions by three clients (all published: {})",
        CLIENTS * ROUNDS,
        published.len()
    );
}

#[test]
fn a_handoff_during_a_yields_mark_counts_afresh_memory() {
    a_handoff_during_a_yields_mark_counts_afresh(&Env::memory());
}

#[test]
fn a_handoff_during_a_yields_mark_counts_afresh_redis() {
    a_handoff_during_a_yields_mark_counts_afresh(&Env::redis());
}

/// Sets a string key, and returns the value it had.
static SET_KEY: redisync::Script = redisync::Script::new(
    "test_set_key",
    "set a string key (test)",
    "local old = redis.call('get', KEYS[1]); redis.call('set', KEYS[1], ARGV[1]); return old",
);

fn set_key(client: &Client, key: &str, value: &str) -> Reply {
    run_on_key(client, &SET_KEY, key, &[value])
}

/// The count of holders in a row is an `INCR`; a handoff that finds the
/// key holding a yield's mark (`y`) instead starts the count over rather
/// than failing half-way (a script error does not undo earlier writes:
/// the lock would be left deleted and nobody told).
fn a_handoff_during_a_yields_mark_counts_afresh(env: &Env) {
    use redisync::internal::handoff::{self, Queue, QueuePlace};
    use redisync::internal::lock::{Acquire, Release};
    let client = env.client();
    let store = client.backend().as_ref();
    let name = unique_name("handoff:mark");
    let queue = Queue::new(&name, 2_000, 16);
    let record = format!("{{{name}}}:redisync_attempt:1");
    let took = handoff::acquire(store, &name, "a:1", 30_000, &record, &queue, false, None);
    assert_eq!(took.unwrap(), Acquire::Acquired);
    let streak_key = format!("{{{name}}}:redisync_handoffs");
    set_key(&client, &streak_key, "y");
    let released = handoff::release(
        store,
        &name,
        &format!("redisson_lock__channel:{{{name}}}"),
        "a:1",
        30_000,
        &format!("redisson_unlock_latch:{{{name}}}:r1"),
        5_000,
        Some(("a:2", 30_000, QueuePlace::Unqueued)),
        &queue,
        0,
    );
    assert_eq!(released.unwrap().outcome, Release::Transferred);
    assert_eq!(
        set_key(&client, &streak_key, "0"),
        Reply::Bulk(b"1".to_vec()),
        "the count started over"
    );
}

/// Holds passed from thread to thread inside the client (no call to the
/// store, see `lock::cohort`) stay exclusive and reentrant: the thread that
/// passed one asks with another hash field from then on, so its next
/// attempt cannot re-enter the hold it gave away, and the thread that took
/// it re-enters it under the field it holds.
fn holds_passed_between_threads_stay_exclusive_and_reentrant(env: &Env) {
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:passed");
    const THREADS: usize = 4;
    const ROUNDS: usize = 40;
    let inside = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let lock = client.lock(&name);
            let inside = Arc::clone(&inside);
            thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let guard = lock.lock().unwrap();
                    assert!(
                        !inside.swap(true, Ordering::SeqCst),
                        "two threads inside at once"
                    );
                    assert!(lock.is_held_by_current_thread().unwrap());
                    let again = lock.try_lock().unwrap().expect("re-entered at once");
                    assert_eq!(lock.hold_count().unwrap(), 2);
                    drop(again);
                    assert_eq!(lock.hold_count().unwrap(), 1);
                    thread::sleep(Duration::from_millis(1));
                    inside.store(false, Ordering::SeqCst);
                    guard.unlock().unwrap();
                    assert!(!lock.is_held_by_current_thread().unwrap());
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    // The outermost unlocks that sent no release passed their hold on.
    let unlocks = THREADS * ROUNDS;
    let latches = hooked.release_latches.lock().unwrap().len();
    // Each round's inner release and its outermost one: the inner ones
    // always reach the store.
    let outermost_released = latches.saturating_sub(unlocks);
    let counts = client.backend().slot_of("redisync").is_none();
    assert!(
        outermost_released < unlocks || !counts,
        "no hold was passed inside the client: {latches} release latches for {unlocks} rounds"
    );
    assert!(!client.lock(&name).is_locked().unwrap());
}

/// A hold with a fixed lease passed to another thread of the client (see
/// `lock::cohort`) runs for that thread's whole lease from the pass: the
/// store's TTL is set to it first. Two threads take turns, each holding
/// 1.2 s of a 3 s lease; each finds more than 2 s left when it starts
/// (a hold passed as it was would have 1.8 s at most).
fn a_fixed_lease_passed_to_another_thread_restarts_for_it(env: &Env) {
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:passed-lease");
    const LEASE: Duration = Duration::from_secs(3);
    // Each holder holds well past the rest of the lease it was passed
    // (about 1 s): only the restart keeps its hold.
    const HOLD: Duration = Duration::from_secs(2);
    const ROUNDS: usize = 2;
    let first = client.lock(&name).lock_with_lease(LEASE).unwrap();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let lock = client.lock(&name);
            thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let guard = lock.lock_with_lease(LEASE).unwrap();
                    thread::sleep(HOLD);
                    assert!(!guard.is_lost(), "the hold's lease restarted for it");
                    assert_eq!(lock.hold_count().unwrap(), 1, "still held after {HOLD:?}");
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    // Both parked behind this thread's hold.
    thread::sleep(Duration::from_millis(300));
    first.unlock().unwrap();
    for thread in threads {
        thread.join().unwrap();
    }
    let unlocks = 1 + 2 * ROUNDS;
    let counts = assert_some_hold_was_passed(&client, &hooked, unlocks);
    assert!(
        hooked.calls("lock_renew") > 0 || !counts,
        "passed holds outlived their old leases with no restart"
    );
    assert!(!client.lock(&name).is_locked().unwrap());
}

/// Asserts that some of `unlocks` (one release each) passed their hold to
/// another thread with no release script: fewer release latches than
/// unlocks. Returns whether the store keeps the count that allows passes
/// (not on a Redis Cluster, where nothing is asserted).
fn assert_some_hold_was_passed(client: &Client, hooked: &Hooked, unlocks: usize) -> bool {
    let latches = hooked.release_latches.lock().unwrap().len();
    let counts = client.backend().slot_of("redisync").is_none();
    assert!(
        latches < unlocks || !counts,
        "no hold was passed inside the client: {latches} release latches for {unlocks} unlocks"
    );
    counts
}

/// Fixed leases passed around quickly cost the store no restart: each new
/// holder holds on the rest of the lease it was passed, long enough here,
/// and the restart that would raise the TTL is cancelled by its release.
fn fixed_leases_passed_around_quickly_cost_the_store_no_restart(env: &Env) {
    const LEASE: Duration = Duration::from_secs(30);
    const THREADS: usize = 3;
    const ROUNDS: usize = 30;
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:quick-passes");
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let lock = client.lock(&name);
            thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let guard = lock.lock_with_lease(LEASE).unwrap();
                    assert!(!guard.is_lost());
                    thread::sleep(Duration::from_millis(1));
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let unlocks = THREADS * ROUNDS;
    assert_some_hold_was_passed(&client, &hooked, unlocks);
    assert_eq!(
        hooked.calls("lock_renew"),
        0,
        "{} restarts for holds released long before their leases' ends",
        hooked.calls("lock_renew")
    );
    assert!(!client.lock(&name).is_locked().unwrap());
}

/// A woken waiter's retry makes a new attempt of its client defer to it
/// (`Waiting::defer_to_woken`), but never the holder's own re-entry: that
/// cannot take anything from the waiter. The waiter's retry is held back
/// while the holder's `try_lock` runs, which must re-enter at once.
fn a_holder_re_enters_while_a_woken_waiter_retries(env: &Env) {
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:reenter");
    let (guard, rx, handle) = hold_with_a_parked_waiter(&client, &hooked, &name, None, true);
    let acquires = hooked.calls("lock_acquire");
    *hooked.delay_next_acquire.lock().unwrap() = Some(Duration::from_secs(2));
    // An unlock message with nothing released: it wakes the waiter, whose
    // retry is then held back in the store.
    client
        .backend()
        .publish(&format!("redisson_lock__channel:{{{name}}}"), "0")
        .unwrap();
    wait_until("the woken waiter retried", Duration::from_secs(10), || {
        hooked.calls("lock_acquire") > acquires
    });
    let lock = client.lock(&name);
    let again = lock.try_lock().unwrap();
    assert!(
        again.is_some(),
        "the holder re-entered while a woken waiter's retry was on its way"
    );
    assert_eq!(lock.hold_count().unwrap(), 2);
    drop(again);
    guard.unlock().unwrap();
    let (id, _) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the waiter is served once the holder is done");
    handle.join().unwrap();
    assert!(id.is_some());
    assert!(!client.lock(&name).is_locked().unwrap());
}

/// A fair waiter's retry (woken here by a message on its channel) that
/// reaches the store just after a release handed its wait the lock
/// outright takes that hold as it is: counted again, the waiter's one
/// unlock would leave the lock held until its lease ran out.
fn a_fair_waiter_whose_retry_lands_after_its_handoff_holds_once(env: &Env) {
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:fair-retry");
    let guard = client.fair_lock(&name).lock().unwrap();
    let acquires_before = hooked.calls("fair_lock_acquire");
    let (id_tx, id_rx) = mpsc::channel();
    let (tx, rx) = mpsc::channel();
    let waiter = client.fair_lock(&name);
    let handle = thread::spawn(move || {
        id_tx.send(waiter.client().current_holder_id()).unwrap();
        let guard = waiter.lock().unwrap();
        let count = waiter.hold_count().unwrap();
        guard.unlock().unwrap();
        tx.send(count).unwrap();
    });
    let waiter_id = id_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    wait_until("the waiter queued", Duration::from_secs(10), || {
        hooked.calls("fair_lock_acquire") > acquires_before
    });
    thread::sleep(Duration::from_millis(200));
    let acquires = hooked.calls("fair_lock_acquire");
    *hooked.delay_next_acquire.lock().unwrap() = Some(Duration::from_secs(2));
    client
        .backend()
        .publish(
            &format!("redisson_lock__channel:{{{name}}}:{waiter_id}"),
            "0",
        )
        .unwrap();
    wait_until("the woken waiter retried", Duration::from_secs(10), || {
        hooked.calls("fair_lock_acquire") > acquires
    });
    guard.unlock().unwrap();
    let count = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the waiter is handed the lock");
    handle.join().unwrap();
    assert_eq!(count, 1, "the waiter holds the lock once");
    assert!(!client.fair_lock(&name).is_locked().unwrap());
}

/// A waiter whose wait ends while a thread of its client is handing it the
/// lock (the script landed, its reply is slow) withdraws and sends no
/// attempt until the handoff resolves: such an attempt would take the
/// handed hold (its queue entry gone), which the releaser then gives back,
/// leaving the waiter a guard with no hold behind it.
fn a_waiter_whose_wait_ends_while_handed_the_lock_sends_no_attempt(env: &Env) {
    let (client, hooked) = hooked_client(env);
    let name = unique_name("handoff:withdrawn-late");
    let wait = Duration::from_millis(1_500);
    let (guard, rx, handle) = hold_with_a_parked_waiter(&client, &hooked, &name, Some(wait), false);
    // The handoff lands at once; its reply outlasts the waiter's wait.
    *hooked.delay_handoff_reply.lock().unwrap() = Duration::from_secs(3);
    guard.unlock().unwrap();
    let (id, _) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter returned");
    // (A waiter that got a guard unlocks it in its thread: with no hold
    // behind it, that unlock fails and the join below says so.)
    handle.join().expect("the waiter's thread");
    assert!(id.is_none(), "the waiter acquired after its wait ended");
    assert!(
        !client.lock(&name).is_locked().unwrap(),
        "a hold was left behind"
    );
    assert_eq!(hooked.calls("handoff"), 1);
}
