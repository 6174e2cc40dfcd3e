//! Conformance suite for the spin lock ([`Client::spin_lock`], Redisson's
//! `RSpinLock`): a reentrant [`Lock`] whose waiters sleep with backoff
//! instead of subscribing. Every behaviour is written once, as a function of
//! an [`Env`], and run on every backend by `backend_tests!`.
//!
//! Timings use generous upper bounds (the CI VM has two vCPUs and heavy
//! steal); lower bounds are tight where they prove something.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::keys;
use common::timing::{LONG_LEASE, PROMPT, SETTLE, STUCK};
use common::{CountingBackend, Env, backend_tests, unique_name, wait_until};
use redisync::{Backoff, Error, Lock};

backend_tests!(
    mutual_exclusion_across_threads_and_two_clients,
    excludes_a_plain_lock_of_the_same_name_both_ways,
    plain_waiter_wakes_promptly_when_the_spin_holder_unlocks,
    spin_waiter_takes_the_lock_soon_after_an_unlock,
    reentrant_hold_count_shared_with_the_plain_lock,
    try_lock_for_keeps_to_its_bound,
    watchdog_keeps_the_lock_past_its_timeout,
    fixed_lease_and_force_unlock,
    spin_waiter_never_opens_a_pubsub_connection,
    empty_name_is_a_clear_error,
);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A quick backoff for the contended tests (1 ms ×2 up to 8 ms), so many
/// waiters do not spend the test asleep.
fn quick() -> Backoff {
    Backoff::exponential(Duration::from_millis(1), Duration::from_millis(8), 2).unwrap()
}

/// Spawns a thread that blocks in `lock.lock()`, reports the instant it got
/// the lock, and unlocks.
fn spawn_waiter(lock: Lock) -> (thread::JoinHandle<()>, mpsc::Receiver<Instant>) {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let guard = lock.lock().expect("waiter: lock()");
        let _ = tx.send(Instant::now());
        guard.unlock().expect("waiter: unlock()");
    });
    (handle, rx)
}

/// Waits for a waiter's report; panics (rather than hangs) if it never comes.
fn acquired_at(rx: &mpsc::Receiver<Instant>, what: &str) -> Instant {
    rx.recv_timeout(STUCK).unwrap_or_else(|e| {
        panic!("{what}: the waiter did not get the lock within {STUCK:?} ({e})")
    })
}

/// Runs `f` on a fresh thread (another holder of the same client).
fn on_other_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    thread::spawn(f).join().expect("helper thread panicked")
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

// ---------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------

/// Spin locks (and, beside them, plain locks of the same name) in two
/// clients and several threads each: one holder at a time.
fn mutual_exclusion_across_threads_and_two_clients(env: &Env) {
    const SPIN_THREADS_PER_CLIENT: usize = 3;
    const PLAIN_THREADS_PER_CLIENT: usize = 1;
    const ITERATIONS: u64 = 50;
    let name = unique_name("spin:mutex");
    let clients = [env.client(), env.client()];
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let threads_per_client = SPIN_THREADS_PER_CLIENT + PLAIN_THREADS_PER_CLIENT;
    let start = Arc::new(Barrier::new(clients.len() * threads_per_client));
    let mut threads = Vec::new();
    for client in &clients {
        for i in 0..threads_per_client {
            let lock = if i < SPIN_THREADS_PER_CLIENT {
                client.spin_lock_with_backoff(name.as_str(), quick())
            } else {
                client.lock(name.as_str())
            };
            let (counter, inside, start) = (counter.clone(), inside.clone(), start.clone());
            threads.push(thread::spawn(move || {
                start.wait();
                for _ in 0..ITERATIONS {
                    let guard = lock.lock().expect("lock()");
                    assert!(
                        !inside.swap(true, Ordering::SeqCst),
                        "two holders inside the critical section"
                    );
                    // A non-atomic increment: a lost update shows a second
                    // holder inside.
                    let value = counter.load(Ordering::SeqCst);
                    thread::yield_now();
                    counter.store(value + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    guard.unlock().expect("unlock()");
                }
            }));
        }
    }
    for thread in threads {
        thread.join().expect("worker panicked");
    }
    let expected = (clients.len() * threads_per_client) as u64 * ITERATIONS;
    assert_eq!(counter.load(Ordering::SeqCst), expected);
    assert!(!clients[0].spin_lock(name.as_str()).is_locked().unwrap());
}

/// A spin holder keeps out a plain `Lock` of the same name and the other
/// way round, in another client and in another thread of the holder's.
fn excludes_a_plain_lock_of_the_same_name_both_ways(env: &Env) {
    const WAIT: Duration = Duration::from_millis(100);
    let a = env.client();
    let b = env.client();
    for spin_holds in [true, false] {
        let name = unique_name("spin:exclusion");
        let (holder, waiter_kind) = if spin_holds {
            (a.spin_lock(name.as_str()), "plain")
        } else {
            (a.lock(name.as_str()), "spin")
        };
        let guard = holder.lock().unwrap();
        let other = |client: &redisync::Client| {
            if spin_holds {
                client.lock(name.as_str())
            } else {
                client.spin_lock(name.as_str())
            }
        };
        let theirs = other(&b);
        assert!(theirs.is_locked().unwrap());
        assert!(!theirs.is_held_by_current_thread().unwrap());
        assert!(
            theirs.try_lock().unwrap().is_none(),
            "a {waiter_kind} lock of another client took a held lock"
        );
        assert!(
            theirs.try_lock_for(WAIT).unwrap().is_none(),
            "a {waiter_kind} lock of another client waited its way into a held lock"
        );
        let ours = other(&a);
        assert!(
            on_other_thread(move || ours.try_lock_for(WAIT).unwrap().is_none()),
            "a {waiter_kind} lock of another thread took a held lock"
        );
        guard.unlock().unwrap();
        let taken = theirs.try_lock().unwrap();
        assert!(taken.is_some(), "the lock is not free after the unlock");
        assert!(holder.is_locked().unwrap());
    }
}

/// The spin lock's release is the shared one, which publishes the unlock:
/// a plain waiter (parked for up to the holder's 30 s TTL) wakes at once,
/// in another client and in the holder's own client.
fn plain_waiter_wakes_promptly_when_the_spin_holder_unlocks(env: &Env) {
    const ROUNDS: usize = 3;
    let a = env.client();
    let b = env.client();
    for (who, waiter_client) in [("another client", &b), ("the holder's client", &a)] {
        let mut latencies = Vec::new();
        for round in 0..ROUNDS {
            let name = unique_name("spin:wakes-plain");
            let spin = a.spin_lock(name.as_str());
            let guard = if round % 2 == 0 {
                spin.lock_with_lease(LONG_LEASE).unwrap()
            } else {
                spin.lock().unwrap()
            };
            let (waiter, rx) = spawn_waiter(waiter_client.lock(name.as_str()));
            thread::sleep(SETTLE);
            assert!(rx.try_recv().is_err(), "the plain waiter got a held lock");
            let unlocked = Instant::now();
            guard.unlock().unwrap();
            latencies.push(acquired_at(&rx, "spin unlock").duration_since(unlocked));
            waiter.join().unwrap();
        }
        let worst = *latencies.iter().max().unwrap();
        let median = median(&mut latencies);
        assert!(
            median < Duration::from_millis(100),
            "plain waiter in {who}: median wake-up {median:?} after a spin unlock \
             (all: {latencies:?})"
        );
        assert!(
            worst < PROMPT,
            "plain waiter in {who}: a wake-up took {worst:?} (all: {latencies:?})"
        );
    }
}

/// A spin waiter (default backoff: pauses up to 128 ms) gets the lock
/// within about one pause after a plain holder unlocks, whether it has
/// waited briefly or long enough to reach the longest pause.
fn spin_waiter_takes_the_lock_soon_after_an_unlock(env: &Env) {
    let a = env.client();
    let b = env.client();
    for hold in [Duration::from_millis(50), Duration::from_millis(1500)] {
        let name = unique_name("spin:wakes-spin");
        let guard = a.lock(name.as_str()).lock_with_lease(LONG_LEASE).unwrap();
        let (waiter, rx) = spawn_waiter(b.spin_lock(name.as_str()));
        thread::sleep(hold);
        assert!(rx.try_recv().is_err(), "the spin waiter got a held lock");
        let unlocked = Instant::now();
        guard.unlock().unwrap();
        let took = acquired_at(&rx, "unlock").duration_since(unlocked);
        assert!(
            took < Duration::from_millis(128) + PROMPT,
            "after a {hold:?} hold the spin waiter took {took:?} to get the lock"
        );
        waiter.join().unwrap();
    }
}

/// Reentrant per (client, thread), and the count is the plain lock's: the
/// same hash field, so a thread holding the spin lock re-enters through a
/// plain handle too.
fn reentrant_hold_count_shared_with_the_plain_lock(env: &Env) {
    let name = unique_name("spin:reentrant");
    let a = env.client();
    let b = env.client();
    let spin = a.spin_lock(name.as_str());
    let plain = a.lock(name.as_str());
    assert_eq!(spin.hold_count().unwrap(), 0);

    let outer = spin.lock().unwrap();
    let inner = spin.try_lock().unwrap().expect("a re-entry never waits");
    assert_eq!(spin.hold_count().unwrap(), 2);
    let third = plain.lock().unwrap();
    assert_eq!(spin.hold_count().unwrap(), 3);
    assert_eq!(plain.hold_count().unwrap(), 3);
    assert!(spin.is_held_by_current_thread().unwrap());
    assert_eq!(outer.lock().spin_backoff(), Some(Backoff::default()));

    // Another thread of the same client is another holder, as is another
    // client.
    let other = spin.clone();
    let (taken, count) = on_other_thread(move || {
        (
            other.try_lock().unwrap().is_some(),
            other.hold_count().unwrap(),
        )
    });
    assert!(
        !taken,
        "another thread of the holder's client took the lock"
    );
    assert_eq!(count, 0);
    assert!(b.spin_lock(name.as_str()).try_lock().unwrap().is_none());

    third.unlock().unwrap();
    inner.unlock().unwrap();
    assert_eq!(spin.hold_count().unwrap(), 1);
    assert!(b.spin_lock(name.as_str()).try_lock().unwrap().is_none());
    outer.unlock().unwrap();
    assert_eq!(spin.hold_count().unwrap(), 0);
    assert!(!spin.is_locked().unwrap());
    assert!(spin.remaining_ttl().unwrap().is_none());
    assert!(b.spin_lock(name.as_str()).try_lock().unwrap().is_some());
}

/// `try_lock_for(wait)` returns after about `wait`: not before, and not a
/// pause later, even when the backoff's pauses are far longer than the wait
/// (a constant 10 s backoff here; the bound leaves a second of slack for a
/// loaded machine). `try_lock` never sleeps.
fn try_lock_for_keeps_to_its_bound(env: &Env) {
    let name = unique_name("spin:bound");
    let a = env.client();
    let b = env.client();
    let _held = a.lock(name.as_str()).lock_with_lease(LONG_LEASE).unwrap();
    let slow = Backoff::constant(Duration::from_secs(10)).unwrap();
    for lock in [
        b.spin_lock(name.as_str()),
        b.spin_lock_with_backoff(name.as_str(), slow),
    ] {
        for wait in [Duration::from_millis(100), Duration::from_millis(400)] {
            let started = Instant::now();
            let got = lock.try_lock_for(wait).unwrap();
            let elapsed = started.elapsed();
            assert!(got.is_none(), "try_lock_for took a held lock");
            assert!(
                elapsed >= wait,
                "try_lock_for({wait:?}) with {:?} gave up after {elapsed:?}",
                lock.spin_backoff()
            );
            assert!(
                elapsed < wait + PROMPT,
                "try_lock_for({wait:?}) with {:?} returned after {elapsed:?}",
                lock.spin_backoff()
            );
        }
        let started = Instant::now();
        let got = lock
            .try_lock_for_with_lease(Duration::from_millis(200), Duration::from_secs(5))
            .unwrap();
        let elapsed = started.elapsed();
        assert!(got.is_none());
        assert!(
            (Duration::from_millis(200)..Duration::from_millis(200) + PROMPT).contains(&elapsed),
            "try_lock_for_with_lease(200ms, _) returned after {elapsed:?}"
        );
        let started = Instant::now();
        assert!(lock.try_lock().unwrap().is_none());
        assert!(
            started.elapsed() < PROMPT,
            "try_lock waited {:?}",
            started.elapsed()
        );
    }
}

/// Without a lease the watchdog renews the spin lock's hold past the
/// watchdog timeout, as a plain lock's; the unlock stops it.
fn watchdog_keeps_the_lock_past_its_timeout(env: &Env) {
    // Renewed every ~333 ms: only a stall over ~667 ms could lose it.
    const TIMEOUT: Duration = Duration::from_secs(1);
    let name = unique_name("spin:watchdog");
    let a = env.client_with_watchdog(TIMEOUT);
    let b = env.client_with_watchdog(TIMEOUT);
    let lock = a.spin_lock(name.as_str());
    let rival = b.spin_lock(name.as_str());

    let guard = lock.lock().unwrap();
    let ttl = lock.remaining_ttl().unwrap().expect("a TTL");
    assert!(ttl <= TIMEOUT, "lease {ttl:?} > the watchdog timeout");
    let started = Instant::now();
    while started.elapsed() < TIMEOUT * 3 {
        thread::sleep(Duration::from_millis(100));
        assert!(
            rival.try_lock().unwrap().is_none(),
            "another client took the spin lock {:?} after it was taken",
            started.elapsed()
        );
    }
    assert!(lock.is_held_by_current_thread().unwrap());
    assert!(!guard.is_lost(), "a kept lock reported lost");
    assert!(lock.remaining_ttl().unwrap().expect("a TTL") <= TIMEOUT);
    guard.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());

    // A spin waiter that gets it by waiting is renewed too.
    let held = lock.lock_with_lease(Duration::from_millis(100)).unwrap();
    let got = rival
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("the 100 ms lease did not free the lock");
    thread::sleep(TIMEOUT * 2);
    assert!(rival.is_held_by_current_thread().unwrap());
    assert!(!got.is_lost());
    assert!(held.unlock().unwrap_err().is_not_held());
    got.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

/// A fixed lease frees the lock by itself (no watchdog), and
/// `force_unlock` frees it whoever holds it.
fn fixed_lease_and_force_unlock(env: &Env) {
    const LEASE: Duration = Duration::from_millis(200);
    let name = unique_name("spin:lease");
    let a = env.client();
    let b = env.client();
    let lock = a.spin_lock(name.as_str());
    let started = Instant::now();
    let guard = lock.lock_with_lease(LEASE).unwrap();
    assert!(lock.remaining_ttl().unwrap().expect("a TTL") <= LEASE);
    let got = b
        .spin_lock(name.as_str())
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("the lease did not free the lock");
    let freed_after = started.elapsed();
    assert!(
        freed_after >= LEASE - Duration::from_millis(10),
        "a {LEASE:?} lease freed the lock after only {freed_after:?}"
    );
    assert!(guard.unlock().unwrap_err().is_not_held());

    assert!(lock.force_unlock().unwrap());
    assert!(!lock.is_locked().unwrap());
    assert!(got.unlock().unwrap_err().is_not_held());
    assert!(!lock.force_unlock().unwrap());
}

/// The point of it: a spin waiter never subscribes. Its client is built
/// on a `CountingBackend`, which counts the pub/sub connections the
/// client opens (the subscriber opens one when its first waiter
/// subscribes); after blocking and timed spin waits, none was opened, and
/// the waiter polled instead. A plain waiter on the same client then opens
/// one (the check can fail).
fn spin_waiter_never_opens_a_pubsub_connection(env: &Env) {
    let name = unique_name("spin:no-pubsub");
    let a = env.client();
    let counting = CountingBackend::new(Arc::clone(a.backend()));
    let b = env
        .builder()
        .shared_backend(Arc::new(counting.clone()))
        .build()
        .unwrap();
    let held = a.lock(name.as_str()).lock_with_lease(LONG_LEASE).unwrap();
    let spin = b.spin_lock(name.as_str());
    assert!(
        spin.try_lock_for(Duration::from_millis(300))
            .unwrap()
            .is_none()
    );
    let (waiter, rx) = spawn_waiter(spin);
    thread::sleep(Duration::from_millis(500));
    held.unlock().unwrap();
    acquired_at(&rx, "unlock");
    waiter.join().unwrap();
    assert_eq!(
        counting.calls("with_pubsub"),
        0,
        "a spin waiter opened a pub/sub connection"
    );
    let attempts = counting.calls("lock_acquire");
    assert!(
        attempts >= 6,
        "spin waits of 300 ms and 500 ms made only {attempts} attempts"
    );

    let held = a.lock(name.as_str()).lock_with_lease(LONG_LEASE).unwrap();
    assert!(
        b.lock(name.as_str())
            .try_lock_for(Duration::from_millis(300))
            .unwrap()
            .is_none()
    );
    wait_until(
        "a plain waiter's client opens a pub/sub connection",
        STUCK,
        || counting.calls("with_pubsub") >= 1,
    );
    held.unlock().unwrap();
}

fn empty_name_is_a_clear_error(env: &Env) {
    let client = env.client();
    let empty = client.spin_lock("");
    let errors = [
        empty.lock().map(drop).unwrap_err(),
        empty.try_lock().map(drop).unwrap_err(),
        empty
            .try_lock_for(Duration::from_millis(10))
            .map(drop)
            .unwrap_err(),
        empty.lock_with_lease(LONG_LEASE).map(drop).unwrap_err(),
        empty.is_locked().map(drop).unwrap_err(),
        empty.force_unlock().map(drop).unwrap_err(),
    ];
    for err in errors {
        assert!(
            matches!(err, Error::InvalidArgument { what: "name", .. }),
            "expected InvalidArgument(name), got {err:?}"
        );
    }
    let lease = client
        .spin_lock(unique_name("spin:bad-lease"))
        .lock_with_lease(Duration::ZERO)
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(lease, Error::InvalidArgument { what: "lease", .. }),
        "expected InvalidArgument(lease), got {lease:?}"
    );
}

// ---------------------------------------------------------------------------
// Redis only: what the server sees
// ---------------------------------------------------------------------------

/// While a spin waiter waits, the server has no subscriber at all: not on
/// the lock's channel (`PUBSUB NUMSUB`) and not on any other
/// (`PUBSUB CHANNELS`), the waiting client's control channel included. A
/// plain waiter beside it shows up at once (the check can fail).
#[test]
fn redis_spin_waiter_is_no_subscriber_on_the_server() {
    let env = Env::redis();
    let Some(common::StoreConnection::Server(mut conn)) = env.redis_connection() else {
        panic!("a redis Env has a server connection");
    };
    let name = unique_name("spin:numsub");
    let channel = keys::lock_channel(&name);
    let a = env.client();
    let b = env.client();
    let held = a.lock(name.as_str()).lock_with_lease(LONG_LEASE).unwrap();
    let (spin_waiter, spin_rx) = spawn_waiter(b.spin_lock(name.as_str()));
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(500) {
        assert_eq!(common::numsub(&mut conn, &channel), 0);
        let channels: Vec<String> = ::redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .query(&mut conn)
            .unwrap();
        assert!(channels.is_empty(), "subscribed channels: {channels:?}");
        thread::sleep(Duration::from_millis(50));
    }
    assert!(
        spin_rx.try_recv().is_err(),
        "the spin waiter got a held lock"
    );

    let c = env.client();
    let (plain_waiter, plain_rx) = spawn_waiter(c.lock(name.as_str()));
    wait_until("the plain waiter subscribes", STUCK, || {
        common::numsub(&mut conn, &channel) == 1
    });
    held.unlock().unwrap();
    acquired_at(&spin_rx, "unlock (spin waiter)");
    acquired_at(&plain_rx, "unlock (plain waiter)");
    spin_waiter.join().unwrap();
    plain_waiter.join().unwrap();
}

/// On the server a spin hold is exactly Redisson's `RLock` hash (which
/// Redisson's `RSpinLock` shares): the key is the name, the field the
/// holder id, the value the hold count, the TTL the watchdog lease.
#[test]
fn redis_spin_hold_is_redissons_lock_hash() {
    let env = Env::redis();
    let Some(common::StoreConnection::Server(mut conn)) = env.redis_connection() else {
        panic!("a redis Env has a server connection");
    };
    let name = unique_name("spin:wire");
    let client = env.client();
    let spin = client.spin_lock(name.as_str());
    let outer = spin.lock().unwrap();
    let inner = spin.lock().unwrap();
    let hash = common::hgetall(&mut conn, &name);
    assert_eq!(hash.len(), 1, "{hash:?}");
    assert_eq!(
        hash.get(&client.current_holder_id()).map(String::as_str),
        Some("2")
    );
    let pttl = common::pttl(&mut conn, &name);
    assert!(
        (1..=30_000).contains(&pttl),
        "a watchdog hold's PTTL is {pttl} ms"
    );
    inner.unlock().unwrap();
    outer.unlock().unwrap();
    assert!(common::hgetall(&mut conn, &name).is_empty());
}

/// Backoffs are checked where they are built, with a message naming the
/// argument.
#[test]
fn backoff_validation_errors_name_the_argument() {
    let ms = Duration::from_millis;
    let cases = [
        (
            Backoff::exponential(Duration::ZERO, ms(10), 2),
            "initial_delay",
            "at least 1ms",
        ),
        (
            Backoff::exponential(Duration::from_micros(999), ms(10), 2),
            "initial_delay",
            "at least 1ms",
        ),
        (
            Backoff::exponential(ms(1), ms(0), 2),
            "max_delay",
            "at least 1ms",
        ),
        (
            Backoff::exponential(ms(50), ms(10), 2),
            "max_delay",
            "must not be less than initial_delay (50ms), got 10ms",
        ),
        (
            Backoff::exponential(ms(1), Duration::MAX, 2),
            "max_delay",
            "",
        ),
        (
            Backoff::exponential(ms(1), ms(10), 0),
            "multiplier",
            "at least 1",
        ),
        (Backoff::constant(Duration::ZERO), "delay", "at least 1ms"),
    ];
    for (result, argument, phrase) in cases {
        match result {
            Err(Error::InvalidArgument { what, why }) => {
                assert_eq!(what, argument, "{why}");
                assert!(why.contains(phrase), "{argument}: {why:?} lacks {phrase:?}");
            }
            other => panic!("expected InvalidArgument({argument}), got {other:?}"),
        }
    }
    let fine = Backoff::exponential(ms(10), ms(10), 1).unwrap();
    assert_eq!(
        (fine.initial_delay(), fine.max_delay(), fine.multiplier()),
        (ms(10), ms(10), 1)
    );
    let default = Backoff::default();
    assert_eq!(
        (
            default.initial_delay(),
            default.max_delay(),
            default.multiplier()
        ),
        (ms(1), ms(128), 2),
        "Redisson's ExponentialBackOff defaults"
    );
}
