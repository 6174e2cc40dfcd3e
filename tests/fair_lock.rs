//! Conformance suite for the fair lock ([`Client::fair_lock`], Redisson's
//! `RFairLock`): every behaviour is written once, as a function of an
//! [`Env`], and run on both backends by `backend_tests!`.
//!
//! Two `Client`s on one store stand for two processes. Timings use generous
//! upper bounds (the CI VM has two vCPUs and heavy steal). The queue's exact
//! Redis layout is checked in `tests/wire.rs`; a waiter killed in the middle
//! of the queue is in `tests/processes.rs`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::keys;
use common::timing::{LONG_LEASE, PROMPT, SETTLE, STUCK};
use common::{CountingBackend, Env, backend_tests, unique_name, wait_until};
use redisync::{Client, Error, Lock};
use redisync::{LockBackend, Message};

backend_tests!(
    acquire_in_arrival_order,
    try_lock_for_timeout_leaves_the_queue,
    reentrant_and_api_parity,
    unlock_wakes_only_the_head,
    watchdog_renews_a_fair_hold,
    a_queued_waiter_parks_instead_of_polling,
    bad_input_is_a_clear_error,
    a_waiter_in_another_client_is_handed_the_lock_outright,
    fifo_across_four_clients,
);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A thread blocked in `lock()` on a fair lock.
struct Waiter {
    /// The waiter's holder id, `<client uuid>:<thread>`.
    id: String,
    acquired: mpsc::Receiver<Instant>,
    /// Dropping it lets a holding waiter unlock.
    release: Option<mpsc::Sender<()>>,
    /// Returns the waiter's unlock result.
    handle: Option<thread::JoinHandle<redisync::Result<()>>>,
}

impl Waiter {
    /// Spawns a thread that calls `lock.lock()`, runs `on_acquired` while
    /// holding, reports the instant it got the lock, then (if `hold`) keeps
    /// holding until [`release`](Self::release) and unlocks. Returns once the
    /// thread is about to call `lock()`.
    fn spawn(lock: Lock, hold: bool, on_acquired: impl FnOnce() + Send + 'static) -> Waiter {
        let (id_tx, id_rx) = mpsc::channel();
        let (acquired_tx, acquired) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let handle = thread::spawn(move || {
            id_tx
                .send(lock.client().current_holder_id())
                .expect("send id");
            let guard = lock.lock().expect("waiter: lock()");
            on_acquired();
            let _ = acquired_tx.send(Instant::now());
            if hold {
                // Hold until released (or the test is over), bounded.
                let _ = release_rx.recv_timeout(Duration::from_secs(60));
            }
            guard.unlock()
        });
        let id = id_rx
            .recv_timeout(STUCK)
            .expect("the waiter thread started");
        Waiter {
            id,
            acquired,
            release: Some(release),
            handle: Some(handle),
        }
    }

    /// The instant the waiter got the lock; panics if it does not within
    /// [`STUCK`].
    fn acquired_at(&self, what: &str) -> Instant {
        self.acquired.recv_timeout(STUCK).unwrap_or_else(|e| {
            panic!(
                "{what}: waiter {} did not get the lock within {STUCK:?} ({e})",
                self.id
            )
        })
    }

    /// Whether the waiter has got the lock, without waiting (consumes the
    /// report: use it only where none is expected).
    fn has_acquired(&self) -> bool {
        !matches!(self.acquired.try_recv(), Err(mpsc::TryRecvError::Empty))
    }

    /// Lets a holding waiter unlock.
    fn release(&mut self) {
        self.release.take();
    }

    /// Releases and joins the waiter; returns its unlock result.
    fn join(mut self) -> redisync::Result<()> {
        self.release();
        self.handle
            .take()
            .expect("joined once")
            .join()
            .expect("waiter thread panicked")
    }
}

/// The lock's own channel, `redisson_lock__channel:{name}` (name without
/// braces), and a waiter's channel below it.
fn waiter_channel(name: &str, waiter: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}:{waiter}")
}

/// Waits until `count` waiters are queued on the fair lock `name`. On Redis
/// it watches the queue's length; the memory backend has no way to look, so
/// it pauses instead (a waiter thread that has started reaches its first,
/// enqueueing attempt within microseconds there).
fn wait_queued(env: &Env, name: &str, count: usize) {
    match env.redis_connection() {
        Some(mut conn) => {
            let queue = keys::fair_queue(name);
            wait_until(&format!("{count} waiters queued on {name}"), STUCK, || {
                let len: usize = ::redis::cmd("LLEN").arg(&queue).query(&mut conn).unwrap();
                len == count
            });
        }
        None => thread::sleep(Duration::from_millis(150)),
    }
}

/// The length of the fair lock's queue on Redis; `None` on memory.
fn queue_len(env: &Env, name: &str) -> Option<usize> {
    let mut conn = env.redis_connection()?;
    let queue = keys::fair_queue(name);
    let slots = keys::fair_timeouts(name);
    let len: usize = ::redis::cmd("LLEN").arg(&queue).query(&mut conn).unwrap();
    let card: usize = ::redis::cmd("ZCARD").arg(&slots).query(&mut conn).unwrap();
    assert_eq!(len, card, "queue list and slot zset disagree on {name}");
    Some(len)
}

/// A pub/sub session on the store itself (through [`LockBackend`]), so the
/// test can count the messages an unlock sends, on either backend.
struct Listener {
    messages: mpsc::Receiver<Message>,
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Listener {
    /// Subscribes to `channels`; returns once the subscription is confirmed.
    fn start(backend: Arc<dyn LockBackend>, channels: Vec<String>) -> Listener {
        let (tx, messages) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let handle = thread::spawn(move || {
            backend
                .with_pubsub(&mut |conn| {
                    conn.subscribe(&channels)?;
                    let _ = ready_tx.send(());
                    while !stopped.load(Ordering::SeqCst) {
                        if let Some(message) = conn.next_message(Duration::from_millis(50))? {
                            let _ = tx.send(message);
                        }
                    }
                    Ok(())
                })
                .expect("listener session");
        });
        ready_rx
            .recv_timeout(STUCK)
            .expect("the listener subscribed");
        Listener {
            messages,
            stop,
            handle: Some(handle),
        }
    }

    /// Every message received within `window`.
    fn collect(&self, window: Duration) -> Vec<(String, String)> {
        let deadline = Instant::now() + window;
        let mut got = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.messages.recv_timeout(left) {
                Ok(message) => got.push((message.channel, message.payload)),
                Err(_) => break,
            }
        }
        got
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

// ---------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------

/// Five waiters over two clients queue one after another behind a holder;
/// they get the lock in exactly that order.
fn acquire_in_arrival_order(env: &Env) {
    let clients = [env.client(), env.client()];
    // Each holds briefly, so the next one really has to wait.
    assert_served_in_arrival_order(env, "fair:order", &clients[0], &clients, 5, 20);
}

/// Queues `waiters` waiters of `clients` in turn (waiter i in client i mod
/// the number of clients) behind a hold of `holder_client`, then unlocks:
/// each gets the lock, holds it `hold_ms`, and they got it in exactly the
/// order they queued; the lock and its queue are empty afterwards.
fn assert_served_in_arrival_order(
    env: &Env,
    prefix: &str,
    holder_client: &Client,
    clients: &[Client],
    waiters: usize,
    hold_ms: u64,
) {
    let name = unique_name(prefix);
    let holder = holder_client.fair_lock(name.as_str()).lock().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut spawned = Vec::new();
    for i in 0..waiters {
        let lock = clients[i % clients.len()].fair_lock(name.as_str());
        let order = Arc::clone(&order);
        spawned.push(Waiter::spawn(lock, false, move || {
            order.lock().unwrap().push(i);
            thread::sleep(Duration::from_millis(hold_ms));
        }));
        wait_queued(env, &name, i + 1);
    }
    thread::sleep(SETTLE);
    assert!(order.lock().unwrap().is_empty(), "a waiter got a held lock");

    holder.unlock().unwrap();
    for waiter in &spawned {
        waiter.acquired_at("after the holder's unlock");
    }
    for waiter in spawned {
        waiter.join().unwrap();
    }
    assert_eq!(
        *order.lock().unwrap(),
        (0..waiters).collect::<Vec<_>>(),
        "waiters in {} clients did not get the lock in arrival order",
        clients.len()
    );
    assert!(!holder_client.fair_lock(name.as_str()).is_locked().unwrap());
    assert_eq!(queue_len(env, &name).unwrap_or(0), 0);
}

/// Issue 22, item 5: a waiter in another client queued behind the holder
/// is handed the lock by the holder's unlock: it holds it without an
/// acquire attempt of its own after the wake (its only attempt is the one
/// that queued it), its watchdog keeps the handed hold (whose TTL is the
/// claim window) past that window, and its unlock frees the lock. On a
/// cluster (no direct handoffs) it is woken and takes it with one attempt.
fn a_waiter_in_another_client_is_handed_the_lock_outright(env: &Env) {
    // The claim window is at most half the watchdog timeout: 3 s here, so
    // the queued waiter's once-per-claim-window retry does not fall between
    // the count before the unlock and the wake, even on a loaded machine.
    const WATCHDOG: Duration = Duration::from_secs(6);
    let name = unique_name("fair:handed");
    let a = env.client();
    let direct = a.backend().slot_of("redisync").is_none();
    // Counts the scripts by id and forwards every method (the server
    // clock's offset included: a fair waiter is handed the lock outright
    // only where a handoff's age can be read).
    let scripts = Arc::new(CountingBackend::new(Arc::clone(a.backend())));
    let b = env
        .builder()
        .shared_backend(scripts.clone())
        .watchdog_timeout(WATCHDOG)
        .build()
        .unwrap();
    let held = a.fair_lock(name.as_str()).lock().unwrap();
    let waiter = Waiter::spawn(b.fair_lock(name.as_str()), true, || {});
    wait_queued(env, &name, 1);
    thread::sleep(SETTLE);
    let before = scripts.calls("fair_lock_acquire");
    assert!(before >= 1, "the waiter queued with an attempt");
    let unlocked = Instant::now();
    held.unlock().unwrap();
    let woke = waiter
        .acquired_at("after the unlock")
        .duration_since(unlocked);
    assert!(
        woke < PROMPT,
        "the waiter got the lock {woke:?} after the unlock"
    );
    let after = scripts.calls("fair_lock_acquire");
    if direct {
        assert_eq!(
            after, before,
            "handed the lock outright, the waiter sent no attempt of its own after the wake"
        );
    } else {
        assert_eq!(
            after,
            before + 1,
            "woken, the waiter took it with one attempt"
        );
    }
    // Past the claim window (3 s) the waiter still holds it: its watchdog
    // renewed the handed hold.
    thread::sleep(WATCHDOG / 2 + Duration::from_secs(1));
    assert!(
        a.fair_lock(name.as_str()).is_locked().unwrap(),
        "the handed hold ran out under its holder"
    );
    assert!(
        a.fair_lock(name.as_str()).try_lock().unwrap().is_none(),
        "another client took a lock the waiter holds"
    );
    waiter.join().unwrap();
    assert!(!a.fair_lock(name.as_str()).is_locked().unwrap());
    assert_eq!(queue_len(env, &name).unwrap_or(0), 0);
}

/// Eight waiters over four clients, queued one after another behind a
/// holder in a fifth, get the lock in exactly that order, each handed it by
/// the previous holder's unlock.
fn fifo_across_four_clients(env: &Env) {
    let holder_client = env.client();
    let clients: Vec<Client> = (0..4).map(|_| env.client()).collect();
    assert_served_in_arrival_order(env, "fair:fifo4", &holder_client, &clients, 8, 10);
}

/// A `try_lock_for` that times out leaves the queue at once: alone in it, or
/// in the middle of it, it delays nobody behind it.
fn try_lock_for_timeout_leaves_the_queue(env: &Env) {
    const SHORT: Duration = Duration::from_millis(200);
    const MIDDLE: Duration = Duration::from_secs(2);
    let name = unique_name("fair:give-up");
    let a = env.client();
    let b = env.client();
    let c = env.client();
    let held = a
        .fair_lock(name.as_str())
        .lock_with_lease(LONG_LEASE)
        .unwrap();

    // Alone in the queue.
    let lock_b = b.fair_lock(name.as_str());
    let started = Instant::now();
    assert!(lock_b.try_lock_for(SHORT).unwrap().is_none());
    let elapsed = started.elapsed();
    assert!(
        elapsed >= SHORT,
        "try_lock_for({SHORT:?}) gave up after {elapsed:?}"
    );
    assert!(
        elapsed < SHORT + PROMPT,
        "try_lock_for({SHORT:?}) returned after {elapsed:?}"
    );
    assert_eq!(
        queue_len(env, &name).unwrap_or(0),
        0,
        "the timed-out waiter is still queued"
    );
    // The next waiter is at the head: the unlock wakes it at once (had the
    // timed-out waiter stayed, it would wait out that waiter's slot: the
    // holder's 30 s lease plus 200 ms).
    let next = Waiter::spawn(c.fair_lock(name.as_str()), false, || {});
    wait_queued(env, &name, 1);
    let unlocked = Instant::now();
    held.unlock().unwrap();
    let woke = next.acquired_at("alone").duration_since(unlocked);
    assert!(
        woke < PROMPT,
        "the next waiter got the lock {woke:?} after the unlock"
    );
    next.join().unwrap();

    // In the middle: first (lock), then B (try_lock_for, gives up), then last
    // (lock). After the holder and the first are done, the last is not held
    // up by B's slot.
    let held = a
        .fair_lock(name.as_str())
        .lock_with_lease(LONG_LEASE)
        .unwrap();
    let mut first = Waiter::spawn(c.fair_lock(name.as_str()), true, || {});
    wait_queued(env, &name, 1);
    let (started_tx, started_rx) = mpsc::channel();
    let b_done = Arc::new(AtomicBool::new(false));
    let middle = {
        let lock_b = lock_b.clone();
        let b_done = Arc::clone(&b_done);
        thread::spawn(move || {
            started_tx.send(()).unwrap();
            let started = Instant::now();
            let got = lock_b.try_lock_for(MIDDLE).unwrap().is_some();
            b_done.store(true, Ordering::SeqCst);
            (got, started.elapsed())
        })
    };
    started_rx.recv_timeout(STUCK).unwrap();
    wait_queued(env, &name, 2);
    let last = Waiter::spawn(b.fair_lock(name.as_str()), false, || {});
    wait_queued(env, &name, 3);
    assert!(
        !b_done.load(Ordering::SeqCst),
        "setup too slow: the middle waiter gave up before the last one queued"
    );
    let (got, elapsed) = middle.join().unwrap();
    assert!(!got, "the middle waiter got a held lock");
    assert!(
        elapsed >= MIDDLE,
        "try_lock_for({MIDDLE:?}) gave up after {elapsed:?}"
    );
    assert!(
        elapsed < MIDDLE + PROMPT,
        "try_lock_for({MIDDLE:?}) returned after {elapsed:?}"
    );
    if let Some(len) = queue_len(env, &name) {
        assert_eq!(len, 2, "the timed-out middle waiter is still queued");
    }

    let unlocked = Instant::now();
    held.unlock().unwrap();
    let woke = first.acquired_at("first").duration_since(unlocked);
    assert!(
        woke < PROMPT,
        "the first waiter got the lock {woke:?} after the unlock"
    );
    assert!(!last.has_acquired(), "the last waiter overtook the first");
    first.release();
    let released = Instant::now();
    first.join().unwrap();
    // Had B's entry stayed, the last waiter would wait out B's slot (30 s
    // lease + 2 s); it is woken by the first waiter's unlock instead.
    let woke = last.acquired_at("last").duration_since(released);
    assert!(
        woke < PROMPT,
        "the waiter behind the timed-out one got the lock only {woke:?} after the unlock"
    );
    last.join().unwrap();
    assert_eq!(queue_len(env, &name).unwrap_or(0), 0);
    assert!(!lock_b.is_locked().unwrap());
}

/// The fair lock has the reentrant lock's API: reentry and hold counts,
/// state queries, leases, `try_lock` (which never queues), `force_unlock`
/// (which wakes the head waiter) and `NotHeld` for a foreign unlock.
fn reentrant_and_api_parity(env: &Env) {
    const LEASE: Duration = Duration::from_millis(300);
    let name = unique_name("fair:api");
    let a = env.client();
    let b = env.client();
    let c = env.client();
    let lock = a.fair_lock(name.as_str());
    let lock_b = b.fair_lock(name.as_str());
    assert_eq!(lock.name(), name);
    assert!(!lock.is_locked().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert!(lock.remaining_ttl().unwrap().is_none());

    // Reentry.
    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert!(lock.is_held_by_current_thread().unwrap());
    assert!(lock.is_locked().unwrap());
    let ttl = lock.remaining_ttl().unwrap().expect("a TTL");
    assert!(
        ttl <= common::DEFAULT_WATCHDOG && ttl > common::DEFAULT_WATCHDOG - PROMPT,
        "remaining_ttl {ttl:?} of a watchdog hold"
    );
    assert!(lock_b.is_locked().unwrap());
    assert_eq!(lock_b.hold_count().unwrap(), 0);
    assert!(!lock_b.is_held_by_current_thread().unwrap());
    let other = lock.clone();
    assert!(
        thread::spawn(move || other.try_lock().unwrap().is_none())
            .join()
            .unwrap(),
        "another thread of the holder's client took the lock"
    );

    // try_lock by another client: None at once, and it does not queue.
    let started = Instant::now();
    assert!(lock_b.try_lock().unwrap().is_none());
    assert!(
        started.elapsed() < PROMPT,
        "try_lock waited {:?}",
        started.elapsed()
    );
    assert_eq!(queue_len(env, &name).unwrap_or(0), 0, "try_lock queued");
    // A waiter that queues now is the head: had the try_lock queued, the
    // unlock would go to it and this waiter would wait out its slot.
    let mut waiter = Waiter::spawn(c.fair_lock(name.as_str()), true, || {});
    wait_queued(env, &name, 1);
    inner.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(lock.is_locked().unwrap());
    thread::sleep(SETTLE);
    assert!(
        !waiter.has_acquired(),
        "the waiter got a lock still held once"
    );
    let unlocked = Instant::now();
    outer.unlock().unwrap();
    let woke = waiter
        .acquired_at("after the unlock")
        .duration_since(unlocked);
    assert!(
        woke < PROMPT,
        "the head waiter got the lock {woke:?} after the unlock"
    );
    assert!(lock.is_locked().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 0);

    // force_unlock wakes the head waiter; the old holder's unlock is NotHeld
    // (the lock is the new holder's now) and leaves it alone.
    let second = Waiter::spawn(lock_b.clone(), true, || {});
    wait_queued(env, &name, 1);
    thread::sleep(SETTLE);
    assert!(!second.has_acquired());
    let forced = Instant::now();
    assert!(lock.force_unlock().unwrap(), "force_unlock of a held lock");
    let woke = second
        .acquired_at("after force_unlock")
        .duration_since(forced);
    assert!(
        woke < PROMPT,
        "force_unlock woke the head waiter only after {woke:?}"
    );
    waiter.release();
    let err = waiter.join().unwrap_err();
    assert!(err.is_not_held(), "expected NotHeld, got {err:?}");
    assert!(err.to_string().contains(&name), "{err}");
    assert!(
        lock.is_locked().unwrap(),
        "a foreign unlock released the new holder"
    );
    second.join().unwrap();
    assert!(!lock.is_locked().unwrap());
    assert!(!lock.force_unlock().unwrap(), "force_unlock of a free lock");
    // Unlike the reentrant lock's, a fair guard whose lock is gone (forced
    // out, and nobody took it since) unlocks without error: Redisson's
    // RFairLock counts a lock that no longer exists as released.
    let guard = lock.lock().unwrap();
    assert!(lock_b.force_unlock().unwrap());
    guard
        .unlock()
        .expect("a fair lock that no longer exists counts as released");
    assert!(!lock.is_locked().unwrap());

    // A fixed lease frees the lock by itself; a waiter gets it then.
    let started = Instant::now();
    let leased = lock.lock_with_lease(LEASE).unwrap();
    let ttl = lock.remaining_ttl().unwrap().expect("a TTL");
    assert!(ttl <= LEASE, "TTL {ttl:?} exceeds the lease");
    let next = Waiter::spawn(lock_b, true, || {});
    let got = next.acquired_at("after the lease").duration_since(started);
    assert!(
        got >= LEASE - Duration::from_millis(10),
        "a {LEASE:?} lease freed the fair lock after only {got:?}"
    );
    assert!(
        got < LEASE + PROMPT,
        "a {LEASE:?} lease freed it only after {got:?}"
    );
    assert!(leased.is_lost());
    let err = leased.unlock().unwrap_err();
    assert!(err.is_not_held(), "expected NotHeld, got {err:?}");
    assert!(
        lock.is_locked().unwrap(),
        "the expired holder's unlock freed the lock"
    );
    next.join().unwrap();
    assert!(!lock.is_locked().unwrap());

    // try_lock_for_with_lease on a free lock.
    let guard = lock
        .try_lock_for_with_lease(Duration::from_millis(100), LONG_LEASE)
        .unwrap()
        .expect("a free fair lock");
    assert!(lock.remaining_ttl().unwrap().expect("a TTL") > LONG_LEASE - PROMPT);
    guard.unlock().unwrap();
    assert_eq!(queue_len(env, &name).unwrap_or(0), 0);
}

/// With three waiters in three clients queued, an unlock sends exactly one
/// message, on the head waiter's own channel, and only the head gets the
/// lock (handed to it outright); each later unlock hands it to exactly the
/// next one.
fn unlock_wakes_only_the_head(env: &Env) {
    const WAITERS: usize = 3;
    let name = unique_name("fair:herd");
    let holder_client = env.client();
    let direct = holder_client.backend().slot_of("redisync").is_none();
    let clients: Vec<Client> = (0..WAITERS).map(|_| env.client()).collect();
    let held = holder_client
        .fair_lock(name.as_str())
        .lock_with_lease(LONG_LEASE)
        .unwrap();
    let mut waiters: Vec<Waiter> = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        waiters.push(Waiter::spawn(client.fair_lock(name.as_str()), true, || {}));
        wait_queued(env, &name, i + 1);
    }
    let mut channels: Vec<String> = waiters
        .iter()
        .map(|w| waiter_channel(&name, &w.id))
        .collect();
    // The non-fair lock's channel must stay silent too.
    channels.push(keys::lock_channel(&name));
    let listener = Listener::start(Arc::clone(holder_client.backend()), channels.clone());
    thread::sleep(SETTLE);

    let mut release_previous = Some(held);
    let mut previous_waiter: Option<Waiter> = None;
    for (i, channel) in channels.iter().take(WAITERS).enumerate() {
        let unlocked = Instant::now();
        if let Some(guard) = release_previous.take() {
            guard.unlock().unwrap();
        }
        if let Some(previous) = previous_waiter.take() {
            previous.join().unwrap();
        }
        let head = &waiters[0];
        let woke = head.acquired_at("head").duration_since(unlocked);
        assert!(
            woke < PROMPT,
            "round {i}: the head got the lock {woke:?} after the unlock"
        );
        // The new holder keeps holding: nobody else returns from lock().
        thread::sleep(Duration::from_millis(300));
        let also = waiters[1..].iter().filter(|w| w.has_acquired()).count();
        assert_eq!(
            also, 0,
            "round {i}: {also} more waiters returned while the head holds"
        );
        // One message, on the head's own channel: the lock handed to it
        // outright, `h:<server ms>:<claim ms>:<wait id>:<its id>` (a
        // redisync waiter whose watchdog renews it; see `ops::fair_lock`),
        // or on a cluster (no direct handoffs) Redisson's "0".
        let messages = listener.collect(Duration::from_millis(200));
        assert_eq!(
            messages.len(),
            1,
            "round {i}: one message, got {messages:?}"
        );
        assert_eq!(&messages[0].0, channel, "round {i}: on the head's channel");
        let payload = &messages[0].1;
        if direct {
            assert!(
                payload.starts_with("h:") && payload.ends_with(&format!(":{}", head.id)),
                "round {i}: the head is handed the lock, got {payload:?}"
            );
        } else {
            assert_eq!(payload, "0", "round {i}: the unlock message");
        }
        previous_waiter = Some(waiters.remove(0));
    }
    // The last waiter unlocks with nobody queued: no message at all.
    previous_waiter.take().unwrap().join().unwrap();
    assert_eq!(listener.collect(Duration::from_millis(300)), []);
    assert!(!holder_client.fair_lock(name.as_str()).is_locked().unwrap());
}

/// The watchdog renews a fair hold like a reentrant one.
fn watchdog_renews_a_fair_hold(env: &Env) {
    // Renewed every 500 ms: only a stall over ~1 s could lose it (600 ms
    // lost a hold on a loaded two-vCPU machine: a 400 ms stall).
    const TIMEOUT: Duration = Duration::from_millis(1500);
    let name = unique_name("fair:watchdog");
    let a = env.client_with_watchdog(TIMEOUT);
    let b = env.client_with_watchdog(TIMEOUT);
    let lock = a.fair_lock(name.as_str());
    let lock_b = b.fair_lock(name.as_str());
    let guard = lock.lock().unwrap();
    let started = Instant::now();
    while started.elapsed() < TIMEOUT * 2 + Duration::from_millis(200) {
        thread::sleep(Duration::from_millis(100));
        assert!(
            lock_b.try_lock().unwrap().is_none(),
            "another client took a watchdog-held fair lock {:?} in",
            started.elapsed()
        );
    }
    assert!(lock.is_held_by_current_thread().unwrap());
    assert!(!guard.is_lost());
    guard.unlock().unwrap();
    assert!(lock_b.try_lock().unwrap().is_some());
}

/// A queued waiter parks until it is woken or the time the store gave it
/// runs out; it does not poll. Here the holder keeps a watchdog hold (TTL
/// 1 s, renewed every third of it: only a stall over 667 ms could lose it)
/// for 4 s, far past the TTL the waiter saw when it queued; the waiter's
/// slot (the default 300 s wait timeout) stays valid throughout. A parked
/// waiter retries about once per lock TTL (~5 times); a polling one
/// hundreds of times.
fn a_queued_waiter_parks_instead_of_polling(env: &Env) {
    const WATCHDOG: Duration = Duration::from_secs(1);
    const HOLD: Duration = Duration::from_secs(4);
    const MAX_ATTEMPTS: u64 = 20;
    let name = unique_name("fair:no-poll");
    let a = env.client_with_watchdog(WATCHDOG);
    let counting = CountingBackend::new(Arc::clone(a.backend()));
    let b = env
        .builder()
        .shared_backend(Arc::new(counting.clone()))
        .build()
        .unwrap();
    let held = a.fair_lock(name.as_str()).lock().unwrap();
    let waiter = Waiter::spawn(b.fair_lock(name.as_str()), false, || {});
    wait_queued(env, &name, 1);
    thread::sleep(HOLD);
    let attempts = counting.calls("fair_lock_acquire");
    assert!(!waiter.has_acquired(), "the waiter got a held lock");
    let unlocked = Instant::now();
    held.unlock().unwrap();
    let woke = waiter
        .acquired_at("after the unlock")
        .duration_since(unlocked);
    waiter.join().unwrap();
    assert!(
        woke < PROMPT,
        "the waiter got the lock {woke:?} after the unlock"
    );
    assert!(
        attempts <= MAX_ATTEMPTS,
        "a waiter queued behind a {HOLD:?} watchdog hold (TTL {WATCHDOG:?}) made {attempts} \
         acquire attempts: it polls instead of parking"
    );
}

fn bad_input_is_a_clear_error(env: &Env) {
    let client = env.client();
    let empty = client.fair_lock("");
    let errors = [
        empty.lock().map(drop).unwrap_err(),
        empty.try_lock().map(drop).unwrap_err(),
        empty
            .try_lock_for(Duration::from_millis(10))
            .map(drop)
            .unwrap_err(),
        empty.lock_with_lease(LONG_LEASE).map(drop).unwrap_err(),
        empty.is_locked().map(drop).unwrap_err(),
        empty.hold_count().map(drop).unwrap_err(),
        empty.remaining_ttl().map(drop).unwrap_err(),
        empty.force_unlock().map(drop).unwrap_err(),
    ];
    for err in &errors {
        assert!(
            matches!(err, Error::InvalidArgument { what: "name", .. }),
            "expected InvalidArgument(name), got {err:?}"
        );
    }
    let lock = client.fair_lock(unique_name("fair:bad-lease"));
    let err = lock.lock_with_lease(Duration::ZERO).map(drop).unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { what: "lease", .. }),
        "{err:?}"
    );
    assert!(!lock.is_locked().unwrap());
    assert_eq!(queue_len(env, lock.name()).unwrap_or(0), 0);

    // The builder's fair-lock wait timeout.
    assert_eq!(client.fair_lock_wait_timeout(), Duration::from_secs(300));
    let err = env
        .builder()
        .fair_lock_wait_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                what: "fair_lock_wait_timeout",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("fair_lock_wait_timeout"), "{err}");
    let short = env
        .builder()
        .fair_lock_wait_timeout(Duration::from_millis(1500))
        .build()
        .unwrap();
    assert_eq!(short.fair_lock_wait_timeout(), Duration::from_millis(1500));

    // A key of another type: a protocol error, no panic.
    let name = unique_name("fair:wrongtype");
    env.set_string(&name, "x");
    let lock = client.fair_lock(name.as_str());
    for err in [
        lock.lock().map(drop).unwrap_err(),
        lock.try_lock().map(drop).unwrap_err(),
        lock.is_locked().map(drop).unwrap_err(),
    ] {
        assert!(
            err.is_protocol_error(),
            "expected a protocol error, got {err:?}"
        );
    }
}

/// Issue 22, items 3 and 5: a queued waiter that listens on its channel but
/// never acts (a frozen process: its connection still subscribed, a direct
/// mark of its own) is handed the lock outright by the holder's unlock. It
/// keeps it no longer than the claim window (two response timeouts: 2 s
/// here): the hold's TTL runs out, and the next waiter, in another client,
/// which retries at least once per claim window, takes the lock; never
/// while the handed hold is in force.
#[test]
fn a_handed_waiter_that_never_takes_it_holds_it_at_most_the_claim_window() {
    const RESPONSE: Duration = Duration::from_secs(1);
    const CLAIM: Duration = Duration::from_secs(2);
    let server = common::TestServer::start();
    let build = || {
        Client::builder()
            .event_handler(Arc::new(redisync::NopEventHandler))
            .redis_url(server.url())
            .response_timeout(RESPONSE)
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    let name = unique_name("fair:ghost");
    let held = a.fair_lock(name.as_str()).lock().unwrap();
    // The frozen waiter: first in the queue, marked for outright handoffs
    // (wait id 7, allowance 300 s), subscribed to its own channel.
    let ghost = "0f0f0f0f-frozen:1";
    let mut raw = server.connection();
    let mut listening = server.client().get_connection().unwrap();
    let mut pubsub = listening.as_pubsub();
    pubsub.subscribe(waiter_channel(&name, ghost)).unwrap();
    pubsub.set_read_timeout(Some(STUCK)).unwrap();
    let frozen = Ghost {
        id: ghost,
        slot: Duration::from_secs(300),
        live_ms: None,
    };
    let (waiter, _, _) = queue_behind_ghost(&mut raw, &name, &frozen, &b);

    let unlocked = Instant::now();
    held.unlock().unwrap();
    let message = pubsub.get_message().unwrap();
    let payload: String = message.get_payload().unwrap();
    assert!(
        payload.starts_with("h:") && payload.ends_with(&format!(":2000:7:{ghost}")),
        "the frozen head is handed the lock outright, got {payload:?}"
    );
    let hash: std::collections::HashMap<String, i64> =
        ::redis::cmd("HGETALL").arg(&name).query(&mut raw).unwrap();
    let ttl: i64 = ::redis::cmd("PTTL").arg(&name).query(&mut raw).unwrap();
    assert_eq!(hash, [(ghost.to_owned(), 1)].into_iter().collect());
    assert!(
        ttl > 0 && ttl <= 2_000,
        "the handed hold's TTL is the claim window, got {ttl} ms"
    );
    let got = waiter
        .acquired_at("after the frozen waiter's claim window")
        .duration_since(unlocked);
    assert!(
        got >= CLAIM,
        "the next waiter got the lock {got:?} after the unlock, while the handed hold was in force"
    );
    assert!(
        got <= 2 * CLAIM + PROMPT,
        "the lock was stranded {got:?} with a frozen waiter (claim window {CLAIM:?})"
    );
    waiter.join().unwrap();
    assert!(!a.fair_lock(name.as_str()).is_locked().unwrap());
}

/// The queue head a test puts in place: a redisync waiter that froze, died
/// or is between two subscriptions.
struct Ghost<'a> {
    id: &'a str,
    /// Its slot runs out this long from now.
    slot: Duration,
    /// Its direct mark's live-until, this long from now (negative: past);
    /// `None`: a mark without one, as an older redisync wrote it.
    live_ms: Option<i64>,
}

/// The wall clock in ms (the clock the server's `TIME` reads too).
fn wall_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Puts `ghost` first in the fair queue of `name`, marked for outright
/// handoffs (wait id 7, a 300 s allowance), then queues a real waiter of
/// `client` behind it (holding the lock once it gets it, until joined);
/// returns that waiter, when the ghost's slot runs out
/// and when its mark's live-until passes (if it has one).
fn queue_behind_ghost(
    raw: &mut ::redis::Connection,
    name: &str,
    ghost: &Ghost<'_>,
    client: &Client,
) -> (Waiter, Instant, Option<Instant>) {
    let queue = keys::fair_queue(name);
    let (now, now_ms) = (Instant::now(), wall_ms());
    let mark = match ghost.live_ms {
        Some(live_ms) => format!("7:300000:{}", now_ms + live_ms),
        None => "7:300000".to_owned(),
    };
    let live_ends = ghost
        .live_ms
        .map(|live_ms| now + Duration::from_millis(u64::try_from(live_ms).unwrap_or(0)));
    let _: () = ::redis::pipe()
        .cmd("RPUSH")
        .arg(&queue)
        .arg(ghost.id)
        .ignore()
        .cmd("ZADD")
        .arg(keys::fair_timeouts(name))
        .arg(now_ms + i64::try_from(ghost.slot.as_millis()).unwrap())
        .arg(ghost.id)
        .ignore()
        .cmd("SET")
        .arg(format!("{{{name}}}:redisync_fair_direct:{}", ghost.id))
        .arg(mark)
        .arg("PX")
        .arg(600_000)
        .ignore()
        .query(raw)
        .unwrap();
    // It holds what it gets until the test joins it: a test may look at
    // the lock's holder after the unlock (CI saw an unlocked waiter gone by
    // then, on a loaded machine).
    let waiter = Waiter::spawn(client.fair_lock(name), true, || {});
    wait_until("the waiter queued behind the ghost", STUCK, || {
        let len: usize = ::redis::cmd("LLEN").arg(&queue).query(raw).unwrap();
        len == 2
    });
    // And listening on its channel: a release hands the lock only to a
    // waiter that hears it (on a loaded machine its subscription can lag
    // its first attempt).
    let channel = waiter_channel(name, &waiter.id);
    wait_until("the waiter listens on its channel", STUCK, || {
        let counts: (String, u64) = ::redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(raw)
            .unwrap();
        counts.1 > 0
    });
    thread::sleep(SETTLE);
    (waiter, now + ghost.slot, live_ends)
}

/// A fair lock held by one client, `ghost` at the head of its queue and a
/// real waiter of a second client behind it (both clients with a 1 s
/// response timeout: a 2 s claim window).
struct GhostScene {
    _server: common::TestServer,
    name: String,
    holder: Client,
    held: Option<redisync::LockGuard>,
    raw: ::redis::Connection,
    waiter: Waiter,
    /// When the ghost's slot runs out.
    slot_ends: Instant,
    /// When the ghost's mark's live-until passes (if it has one).
    live_ends: Option<Instant>,
}

impl GhostScene {
    fn start(what: &str, ghost: &Ghost<'_>) -> GhostScene {
        let server = common::TestServer::start();
        let build = || {
            Client::builder()
                .event_handler(Arc::new(redisync::NopEventHandler))
                .redis_url(server.url())
                .response_timeout(Duration::from_secs(1))
                .build()
                .unwrap()
        };
        let (holder, other) = (build(), build());
        let name = unique_name(what);
        let held = holder.fair_lock(name.as_str()).lock().unwrap();
        let mut raw = server.connection();
        let (waiter, slot_ends, live_ends) = queue_behind_ghost(&mut raw, &name, ghost, &other);
        GhostScene {
            _server: server,
            name,
            holder,
            held: Some(held),
            raw,
            waiter,
            slot_ends,
            live_ends,
        }
    }

    /// The holder unlocks; returns when.
    fn unlock(&mut self) -> Instant {
        let unlocked = Instant::now();
        self.held.take().unwrap().unlock().unwrap();
        unlocked
    }

    fn queue(&mut self) -> Vec<String> {
        fair_queue(&mut self.raw, &self.name)
    }

    /// The waiter unlocks; the lock ends free.
    fn finish(self) {
        self.waiter.join().unwrap();
        assert!(
            !self
                .holder
                .fair_lock(self.name.as_str())
                .is_locked()
                .unwrap()
        );
    }
}

/// The fair queue of `name`, head first.
fn fair_queue(raw: &mut ::redis::Connection, name: &str) -> Vec<String> {
    ::redis::cmd("LRANGE")
        .arg(keys::fair_queue(name))
        .arg(0)
        .arg(-1)
        .query(raw)
        .unwrap()
}

/// FIFO holds even when the head does not listen: a queued redisync waiter
/// whose client is between two subscriptions (a direct mark of its own
/// that says it lives, nobody on its channel) is not handed the lock and
/// not passed over by the holder's unlock; it keeps its place, and the
/// waiter behind it, in another client, gets the lock only once the head's
/// slot has run out, as in Redisson. (Passing it over let a live waiter
/// whose subscription was being remade lose its turn: caught by the fault
/// suite's FIFO check.) The mark here has no live-until, as an older
/// redisync wrote it: it never counts as gone.
#[test]
fn a_head_nobody_hears_keeps_its_place_until_its_slot_runs_out() {
    let ghost = Ghost {
        id: "0d0d0d0d-unheard:1",
        slot: Duration::from_secs(3),
        live_ms: None,
    };
    let mut scene = GhostScene::start("fair:unheard", &ghost);
    scene.unlock();
    let queued = scene.queue();
    assert_eq!(
        queued.first().map(String::as_str),
        Some(ghost.id),
        "the unheard head keeps its place after the unlock, queue {queued:?}"
    );
    let handed: bool = ::redis::cmd("HEXISTS")
        .arg(&scene.name)
        .arg(ghost.id)
        .query(&mut scene.raw)
        .unwrap();
    assert!(!handed, "the unheard head was handed the lock");
    let got = scene
        .waiter
        .acquired_at("once the unheard head's slot ran out");
    // The waiter's clock and the slot's are the same machine's; 50 ms
    // covers the two clock reads around the slot's write.
    let slot_ends = scene.slot_ends;
    assert!(
        got + Duration::from_millis(50) >= slot_ends,
        "the next waiter got the lock {:?} before the head's slot ran out: FIFO broken",
        slot_ends.saturating_duration_since(got)
    );
    assert!(
        got <= slot_ends + PROMPT,
        "the next waiter got the lock {:?} after the head's slot ran out",
        got.duration_since(slot_ends)
    );
    assert_eq!(
        scene.queue(),
        Vec::<String>::new(),
        "the stale head is gone"
    );
    scene.finish();
}

/// Issue 22, item 3: a queued redisync waiter that is gone (nobody on its
/// channel, and its mark past its live-until: a live waiter pushes it on at
/// least once per claim window) is passed over by the holder's unlock: it
/// leaves the queue, and the next waiter, in another client, is handed the
/// lock at once, instead of waiting until the gone waiter's slot (300 s
/// here) runs out.
#[test]
fn a_gone_waiter_at_the_head_is_passed_over_by_the_unlock() {
    let ghost = Ghost {
        id: "0d0d0d0d-gone:1",
        slot: Duration::from_secs(300),
        live_ms: Some(-1),
    };
    let mut scene = GhostScene::start("fair:gone", &ghost);
    let unlocked = scene.unlock();
    // The unlock's own script passed the gone head over and handed the
    // lock on (not a later attempt of the waiter's).
    let holders: std::collections::HashMap<String, i64> = ::redis::cmd("HGETALL")
        .arg(&scene.name)
        .query(&mut scene.raw)
        .unwrap();
    assert_eq!(
        holders.keys().collect::<Vec<_>>(),
        [&scene.waiter.id],
        "right after the unlock the next waiter holds the lock"
    );
    let got = scene
        .waiter
        .acquired_at("after the unlock, the gone head passed over")
        .duration_since(unlocked);
    assert!(
        got < PROMPT,
        "the next waiter got the lock {got:?} after the unlock: the gone head held it up"
    );
    assert_eq!(scene.queue(), Vec::<String>::new());
    let mark: Option<String> = ::redis::cmd("GET")
        .arg(format!(
            "{{{}}}:redisync_fair_direct:{}",
            scene.name, ghost.id
        ))
        .query(&mut scene.raw)
        .unwrap();
    assert_eq!(mark, None, "the gone waiter's mark is deleted");
    scene.finish();
}

/// A head whose mark still says it lives when the lock is released keeps
/// its place; once the mark runs out (the waiter stopped retrying: gone),
/// the next waiter's own attempt (at least one per claim window) takes it
/// off the queue and the lock: nobody waits for the gone waiter's slot.
#[test]
fn a_waiter_behind_a_head_that_stopped_retrying_takes_the_lock_once_its_mark_runs_out() {
    const CLAIM: Duration = Duration::from_secs(2);
    let ghost = Ghost {
        id: "0d0d0d0d-stopped:1",
        slot: Duration::from_secs(300),
        live_ms: Some(2_500),
    };
    let mut scene = GhostScene::start("fair:stopped", &ghost);
    let live_ends = scene.live_ends.unwrap();
    scene.unlock();
    let queued = scene.queue();
    assert_eq!(
        queued.first().map(String::as_str),
        Some(ghost.id),
        "a head whose mark still lives keeps its place, queue {queued:?}"
    );
    let got = scene.waiter.acquired_at("once the head's mark ran out");
    assert!(
        got + Duration::from_millis(50) >= live_ends,
        "the next waiter got the lock {:?} before the head's mark ran out: FIFO broken",
        live_ends.saturating_duration_since(got)
    );
    assert!(
        got <= live_ends + CLAIM + PROMPT,
        "the next waiter got the lock {:?} after the head's mark ran out (it retries at least \
         once per claim window, {CLAIM:?})",
        got.duration_since(live_ends)
    );
    assert_eq!(scene.queue(), Vec::<String>::new());
    scene.finish();
}

/// When the head takes the lock, every waiter behind moves up one slot
/// (Redisson's arithmetic, one ZINCRBY per waiter there): here one ZADD
/// per 1000 waiters rewrites them, so a queue longer than that moves up
/// whole, each slot exactly one allowance.
#[test]
fn the_head_taking_the_lock_moves_a_long_queue_up_one_slot() {
    use redisync::internal::fair_lock::{self, FairLockKeys};
    use redisync::internal::lock::{Acquire, Release};
    const WAITERS: usize = 2_500;
    const WAIT_MS: i64 = 5_000;
    let server = common::TestServer::start();
    let client = Client::open(&server.url()).unwrap();
    let store = client.backend();
    let name = unique_name("fair:long");
    let (queue, timeouts, channel_prefix) = (
        keys::fair_queue(&name),
        keys::fair_timeouts(&name),
        keys::lock_channel(&name),
    );
    let keys = FairLockKeys {
        name: &name,
        queue: &queue,
        timeouts: &timeouts,
        channel_prefix: &channel_prefix,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let acquire = |holder: &str| {
        fair_lock::acquire(store.as_ref(), &keys, holder, 30_000, WAIT_MS, now, true).unwrap()
    };
    assert_eq!(acquire("holder:1"), Acquire::Acquired);
    for i in 0..WAITERS {
        assert!(!acquire(&format!("w:{i}")).is_acquired());
    }
    let mut raw = server.connection();
    let slots = |raw: &mut ::redis::Connection| -> Vec<(String, i64)> {
        ::redis::cmd("ZRANGE")
            .arg(&timeouts)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(raw)
            .unwrap()
    };
    let before = slots(&mut raw);
    assert_eq!(before.len(), WAITERS);
    let latch = format!("redisson_unlock_latch:{{{name}}}:1");
    let released = fair_lock::release(
        store.as_ref(),
        &keys,
        "holder:1",
        30_000,
        now,
        &latch,
        5_000,
    )
    .unwrap();
    assert_eq!(released, Release::Released);
    assert_eq!(acquire("w:0"), Acquire::Acquired);
    let after = slots(&mut raw);
    assert_eq!(after.len(), WAITERS - 1);
    let expected: Vec<(String, i64)> = before[1..]
        .iter()
        .map(|(id, slot)| (id.clone(), slot - WAIT_MS))
        .collect();
    assert_eq!(
        after, expected,
        "every waiter behind moved up exactly one slot"
    );
    let len: usize = ::redis::cmd("LLEN").arg(&queue).query(&mut raw).unwrap();
    assert_eq!(len, WAITERS - 1);
}
