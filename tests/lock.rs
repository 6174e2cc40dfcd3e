//! Conformance suite for [`Lock`]: every behaviour is written once, as a
//! function of an [`Env`], and run on both backends by `backend_tests!` (a
//! `memory` and a `redis` module with one `#[test]` per behaviour).
//!
//! Two `Client`s on one store stand for two processes. Timings use short
//! leases and generous upper bounds (the CI VM has two vCPUs and heavy
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

use common::timing::{LONG_LEASE, PROMPT, SETTLE, STUCK};
use common::wrap::{Hook, Store, Wrapped};
use common::{Env, backend_tests, unique_name};
use redisync::{Client, Error, Lock, LockGuard, MemoryBackend, NopEventHandler};

backend_tests!(
    mutual_exclusion_across_threads_and_two_clients,
    reentrant_hold_count,
    try_lock_never_waits,
    try_lock_for_waits_about_the_given_time,
    fixed_lease_expires_and_frees_the_lock,
    watchdog_keeps_lock_alive_past_three_timeouts,
    drop_unlocks,
    foreign_unlock_is_not_held,
    force_unlock_wakes_waiters,
    waiter_is_woken_by_pubsub_well_before_the_ttl,
    killed_pubsub_connection_does_not_strand_waiters,
    bad_input_is_a_clear_error,
    two_clients_are_two_holders,
    a_lost_lock_retaken_by_another_thread_is_renewed,
    a_renewal_in_flight_at_unlock_does_not_renew_the_next_hold,
);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Runs `f` on a fresh thread (a different holder of the same client) and
/// returns its result.
fn on_other_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    thread::spawn(f).join().expect("helper thread panicked")
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

/// The argument an `InvalidArgument` error names; panics on other errors.
fn invalid_argument(err: &Error) -> &'static str {
    match err {
        Error::InvalidArgument { what, .. } => what,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

// ---------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------

fn mutual_exclusion_across_threads_and_two_clients(env: &Env) {
    const THREADS_PER_CLIENT: usize = 4;
    const ITERATIONS: u64 = 100;
    let name = unique_name("lock:mutex");
    let clients = [env.client(), env.client()];
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(clients.len() * THREADS_PER_CLIENT));
    let mut threads = Vec::new();
    for client in &clients {
        for _ in 0..THREADS_PER_CLIENT {
            let lock = client.lock(name.as_str());
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
    let expected = (clients.len() * THREADS_PER_CLIENT) as u64 * ITERATIONS;
    assert_eq!(counter.load(Ordering::SeqCst), expected);
    assert!(!clients[0].lock(name.as_str()).is_locked().unwrap());
}

fn reentrant_hold_count(env: &Env) {
    let name = unique_name("lock:reentrant");
    let a = env.client();
    let b = env.client();
    let lock = a.lock(name.as_str());
    assert_eq!(lock.hold_count().unwrap(), 0);

    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert!(lock.is_held_by_current_thread().unwrap());

    // Another thread of the same client is another holder.
    let other = lock.clone();
    let (taken, count, held) = on_other_thread(move || {
        (
            other.try_lock().unwrap().is_some(),
            other.hold_count().unwrap(),
            other.is_held_by_current_thread().unwrap(),
        )
    });
    assert!(
        !taken,
        "another thread of the holder's client took the lock"
    );
    assert_eq!((count, held), (0, false));
    // So is another client.
    assert!(b.lock(name.as_str()).try_lock().unwrap().is_none());

    inner.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(lock.is_locked().unwrap());
    assert!(b.lock(name.as_str()).try_lock().unwrap().is_none());
    let other = lock.clone();
    assert!(on_other_thread(move || other.try_lock().unwrap().is_none()));

    outer.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert!(!lock.is_locked().unwrap());
    assert!(lock.remaining_ttl().unwrap().is_none());
    let taken = b.lock(name.as_str()).try_lock().unwrap();
    assert!(
        taken.is_some(),
        "the lock is not free after the last unlock"
    );
}

fn try_lock_never_waits(env: &Env) {
    let name = unique_name("lock:try");
    let a = env.client();
    let b = env.client();
    let _held = a.lock(name.as_str()).lock_with_lease(LONG_LEASE).unwrap();

    let started = Instant::now();
    let got = b.lock(name.as_str()).try_lock().unwrap();
    let elapsed = started.elapsed();
    assert!(got.is_none(), "try_lock took a lock another client holds");
    assert!(elapsed < PROMPT, "try_lock waited {elapsed:?}");

    // A thread of the holder's own client does not wait either.
    let lock = a.lock(name.as_str());
    let (got, elapsed) = on_other_thread(move || {
        let started = Instant::now();
        let got = lock.try_lock().unwrap().is_some();
        (got, started.elapsed())
    });
    assert!(!got);
    assert!(elapsed < PROMPT, "try_lock waited {elapsed:?}");

    // A free lock is taken at once.
    let free = unique_name("lock:try-free");
    let started = Instant::now();
    assert!(b.lock(free.as_str()).try_lock().unwrap().is_some());
    assert!(started.elapsed() < PROMPT);
}

fn try_lock_for_waits_about_the_given_time(env: &Env) {
    let name = unique_name("lock:try-for");
    let a = env.client();
    let b = env.client();
    let _held = a.lock(name.as_str()).lock_with_lease(LONG_LEASE).unwrap();
    let lock = b.lock(name.as_str());

    for wait in [Duration::from_millis(100), Duration::from_millis(400)] {
        let started = Instant::now();
        let got = lock.try_lock_for(wait).unwrap();
        let elapsed = started.elapsed();
        assert!(got.is_none(), "try_lock_for took a held lock");
        assert!(
            elapsed >= wait,
            "try_lock_for({wait:?}) gave up after {elapsed:?}"
        );
        assert!(
            elapsed < wait + PROMPT,
            "try_lock_for({wait:?}) returned after {elapsed:?}"
        );
    }

    let started = Instant::now();
    let got = lock
        .try_lock_for_with_lease(Duration::from_millis(200), Duration::from_secs(5))
        .unwrap();
    assert!(got.is_none());
    assert!(started.elapsed() >= Duration::from_millis(200));
}

fn fixed_lease_expires_and_frees_the_lock(env: &Env) {
    const LEASE: Duration = Duration::from_millis(200);
    let name = unique_name("lock:lease");
    let a = env.client();
    let b = env.client();

    let started = Instant::now();
    let guard = a.lock(name.as_str()).lock_with_lease(LEASE).unwrap();
    let acquired = Instant::now();
    assert!(!guard.is_lost());
    let ttl = a
        .lock(name.as_str())
        .remaining_ttl()
        .unwrap()
        .expect("a TTL");
    assert!(ttl <= LEASE, "TTL {ttl:?} exceeds the lease");

    let lock_b = b.lock(name.as_str());
    assert!(
        lock_b.try_lock().unwrap().is_none(),
        "B took A's fresh lock"
    );

    // B waits for the lease to run out (no unlock message: its park is
    // bounded by the TTL).
    let got = lock_b.try_lock_for(Duration::from_secs(5)).unwrap();
    let freed_after = started.elapsed();
    let guard_b = got.expect("the lock was not freed by its lease within 5 s");
    assert!(
        freed_after >= LEASE - Duration::from_millis(10),
        "a {LEASE:?} lease freed the lock after only {freed_after:?}"
    );
    assert!(
        freed_after < PROMPT,
        "a {LEASE:?} lease freed the lock only after {freed_after:?}"
    );
    // By A's own clock the lease has run out too (its local lease started
    // before `lock_with_lease` returned). That it says so already at the
    // moment B holds is `lost_is_reported_before_another_holder_gets_it`.
    thread::sleep((acquired + LEASE).saturating_duration_since(Instant::now()));
    assert!(
        guard.is_lost(),
        "the guard does not report its expired lease"
    );

    let err = guard.unlock().unwrap_err();
    assert!(err.is_not_held(), "expected NotHeld, got {err:?}");
    assert!(err.to_string().contains(&name), "{err}");
    // A's failed unlock did not touch B's hold.
    assert!(lock_b.is_held_by_current_thread().unwrap());
    guard_b.unlock().unwrap();
    assert!(!lock_b.is_locked().unwrap());
}

fn watchdog_keeps_lock_alive_past_three_timeouts(env: &Env) {
    // Renewed every ~333 ms: only a stall over ~667 ms could lose it, which
    // keeps this reliable on a loaded two-vCPU VM.
    const TIMEOUT: Duration = Duration::from_secs(1);
    const FIXED: Duration = Duration::from_millis(200);
    let name = unique_name("lock:watchdog");
    let a = env.client_with_watchdog(TIMEOUT);
    let b = env.client_with_watchdog(TIMEOUT);
    let lock = a.lock(name.as_str());
    let lock_b = b.lock(name.as_str());

    let guard = lock.lock().unwrap();
    let ttl = lock.remaining_ttl().unwrap().expect("a TTL");
    assert!(ttl <= TIMEOUT, "lease {ttl:?} > the watchdog timeout");
    let started = Instant::now();
    // Diagnostics for a failure: the shortest lease left seen, and this
    // thread's own longest stall (a measure of the machine's load).
    let mut min_ttl = ttl;
    let mut worst_stall = Duration::ZERO;
    let mut last = Instant::now();
    while started.elapsed() < TIMEOUT * 3 + Duration::from_millis(300) {
        thread::sleep(Duration::from_millis(100));
        worst_stall = worst_stall.max(last.elapsed());
        last = Instant::now();
        let taken = lock_b.try_lock().unwrap().is_some();
        assert!(
            !taken,
            "another client took the lock {:?} after it was taken (shortest lease left \
             seen: {min_ttl:?}, longest stall of the test thread: {worst_stall:?})",
            started.elapsed()
        );
        if let Some(ttl) = lock.remaining_ttl().unwrap() {
            min_ttl = min_ttl.min(ttl);
        }
    }
    assert!(lock.is_held_by_current_thread().unwrap());
    assert!(!guard.is_lost(), "a kept lock reported lost");
    let ttl = lock.remaining_ttl().unwrap().expect("a TTL");
    assert!(ttl <= TIMEOUT);

    guard.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
    assert!(lock.remaining_ttl().unwrap().is_none());

    // The watchdog stopped with the unlock: a fixed lease taken afterwards by
    // the very same holder (same client, same thread) is not renewed, not
    // even by a renewal already on its way when the unlock ran (the unlock
    // waits for its answer: see
    // `a_renewal_in_flight_at_unlock_does_not_renew_the_next_hold`)...
    let same = lock.lock_with_lease(FIXED).unwrap();
    thread::sleep(FIXED * 2);
    assert!(
        !lock.is_locked().unwrap(),
        "a {FIXED:?} lease was renewed past its end by a stopped watchdog"
    );
    assert!(same.unlock().unwrap_err().is_not_held());
    // ...nor one taken by another client.
    let other = lock_b.lock_with_lease(FIXED).unwrap();
    thread::sleep(FIXED * 2);
    assert!(!lock.is_locked().unwrap());
    assert!(other.unlock().unwrap_err().is_not_held());
}

fn drop_unlocks(env: &Env) {
    let name = unique_name("lock:drop");
    let a = env.client();
    let b = env.client();
    let lock = a.lock(name.as_str());
    {
        let _guard = lock.lock().unwrap();
        assert!(lock.is_locked().unwrap());
    }
    assert!(!lock.is_locked().unwrap());
    drop(
        b.lock(name.as_str())
            .try_lock()
            .unwrap()
            .expect("free after drop"),
    );

    // Reentrant: each drop releases one hold, in any order.
    let first = lock.lock().unwrap();
    let second = lock.lock_with_lease(LONG_LEASE).unwrap();
    drop(first);
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(b.lock(name.as_str()).try_lock().unwrap().is_none());
    drop(second);
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert!(!lock.is_locked().unwrap());

    // A guard moved out of its scope (it owns its handle) unlocks where it
    // is finally dropped.
    let make = || a.lock(name.as_str()).lock().unwrap();
    let guard: LockGuard = make();
    assert!(lock.is_locked().unwrap());
    drop(guard);
    assert!(!lock.is_locked().unwrap());
}

fn foreign_unlock_is_not_held(env: &Env) {
    let name = unique_name("lock:foreign");
    let a = env.client();
    let b = env.client();
    let lock_a = a.lock(name.as_str());
    let lock_b = b.lock(name.as_str());

    // Force-unlocked by another client: the guard's unlock is NotHeld.
    let guard = lock_a.lock().unwrap();
    assert!(lock_b.force_unlock().unwrap());
    assert!(!lock_a.is_locked().unwrap());
    let err = guard.unlock().unwrap_err();
    assert!(err.is_not_held(), "expected NotHeld, got {err:?}");
    assert!(
        !lock_b.force_unlock().unwrap(),
        "force_unlock of a free lock"
    );

    // Lease expired and re-taken by B: A's unlock is NotHeld and leaves B's
    // hold alone.
    let guard = lock_a.lock_with_lease(Duration::from_millis(50)).unwrap();
    let guard_b = lock_b
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("the 50 ms lease did not free the lock");
    let err = guard.unlock().unwrap_err();
    assert!(err.is_not_held(), "expected NotHeld, got {err:?}");
    assert!(lock_b.is_held_by_current_thread().unwrap());
    assert_eq!(lock_b.hold_count().unwrap(), 1);
    assert!(lock_a.try_lock().unwrap().is_none());

    // Same with a watchdog hold that B force-unlocked and re-took: A's
    // unlock must not release B.
    drop(guard_b);
    let guard = lock_a.lock().unwrap();
    assert!(lock_b.force_unlock().unwrap());
    let guard_b = lock_b.try_lock().unwrap().expect("free after force_unlock");
    assert!(guard.unlock().unwrap_err().is_not_held());
    assert!(lock_b.is_held_by_current_thread().unwrap());
    guard_b.unlock().unwrap();
    assert!(!lock_a.is_locked().unwrap());
}

fn force_unlock_wakes_waiters(env: &Env) {
    let name = unique_name("lock:force");
    let a = env.client();
    let b = env.client();
    let _held = a.lock(name.as_str()).lock_with_lease(LONG_LEASE).unwrap();
    let (waiter, rx) = spawn_waiter(b.lock(name.as_str()));
    thread::sleep(SETTLE);
    assert!(rx.try_recv().is_err(), "the waiter got a held lock");

    let unlocked = Instant::now();
    assert!(a.lock(name.as_str()).force_unlock().unwrap());
    let woke = acquired_at(&rx, "force_unlock").duration_since(unlocked);
    assert!(
        woke < PROMPT,
        "force_unlock woke the waiter only after {woke:?}"
    );
    waiter.join().unwrap();
}

fn waiter_is_woken_by_pubsub_well_before_the_ttl(env: &Env) {
    const ROUNDS: usize = 5;
    let a = env.client();
    let b = env.client();
    // The waiter in another client ("process"), then in another thread of
    // the holder's client (which also exercises the local handoff).
    for (who, waiter_client) in [("another client", &b), ("the holder's client", &a)] {
        let mut latencies = Vec::new();
        for round in 0..ROUNDS {
            let name = unique_name("lock:wake");
            // Alternate a fixed lease and a watchdog lease (both 30 s).
            let guard = if round % 2 == 0 {
                a.lock(name.as_str()).lock_with_lease(LONG_LEASE).unwrap()
            } else {
                a.lock(name.as_str()).lock().unwrap()
            };
            let (waiter, rx) = spawn_waiter(waiter_client.lock(name.as_str()));
            thread::sleep(SETTLE);
            assert!(rx.try_recv().is_err(), "the waiter got a held lock");
            let unlocked = Instant::now();
            guard.unlock().unwrap();
            latencies.push(acquired_at(&rx, "unlock").duration_since(unlocked));
            waiter.join().unwrap();
        }
        let worst = *latencies.iter().max().unwrap();
        let median = median(&mut latencies);
        assert!(
            median < Duration::from_millis(100),
            "waiter in {who}: median wake-up {median:?} after unlock (all: {latencies:?})"
        );
        assert!(
            worst < PROMPT,
            "waiter in {who}: a wake-up took {worst:?} (all: {latencies:?})"
        );
    }
}

fn killed_pubsub_connection_does_not_strand_waiters(env: &Env) {
    const BOUND: Duration = Duration::from_secs(2);
    let a = env.client();
    let b = env.client();
    // Round 0 unlocks after the subscriber had time to reconnect; round 1
    // unlocks right after the kill, while it is reconnecting.
    for pause in [Duration::from_millis(300), Duration::ZERO] {
        let name = unique_name("lock:killed-pubsub");
        let guard = a.lock(name.as_str()).lock_with_lease(LONG_LEASE).unwrap();
        let (waiter, rx) = spawn_waiter(b.lock(name.as_str()));
        thread::sleep(SETTLE);
        env.kill_pubsub();
        thread::sleep(pause);
        assert!(rx.try_recv().is_err(), "the waiter got a held lock");
        let unlocked = Instant::now();
        guard.unlock().unwrap();
        let woke = acquired_at(&rx, "unlock after a pub/sub kill").duration_since(unlocked);
        assert!(
            woke < BOUND,
            "after a pub/sub kill (then {pause:?}), the waiter took {woke:?} to get the lock"
        );
        waiter.join().unwrap();
    }
}

fn bad_input_is_a_clear_error(env: &Env) {
    let client = env.client();

    // Empty name: named, on every operation, before any round trip.
    let empty = client.lock("");
    let errors = [
        empty.lock().map(drop).unwrap_err(),
        empty.try_lock().map(drop).unwrap_err(),
        empty
            .try_lock_for(Duration::from_millis(10))
            .map(drop)
            .unwrap_err(),
        empty.lock_with_lease(LONG_LEASE).map(drop).unwrap_err(),
        empty.is_locked().map(drop).unwrap_err(),
        empty.is_held_by_current_thread().map(drop).unwrap_err(),
        empty.hold_count().map(drop).unwrap_err(),
        empty.remaining_ttl().map(drop).unwrap_err(),
        empty.force_unlock().map(drop).unwrap_err(),
    ];
    for err in &errors {
        assert_eq!(invalid_argument(err), "name", "{err}");
        assert!(err.to_string().contains("name"), "{err}");
    }

    // Leases that are zero, below Redis' millisecond or do not fit.
    let lock = client.lock(unique_name("lock:bad-lease"));
    for lease in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_nanos(1),
        Duration::MAX,
        Duration::from_millis(u64::MAX),
    ] {
        let errors = [
            lock.lock_with_lease(lease).map(drop).unwrap_err(),
            lock.try_lock_for_with_lease(Duration::from_millis(10), lease)
                .map(drop)
                .unwrap_err(),
        ];
        for err in &errors {
            assert_eq!(invalid_argument(err), "lease", "lease {lease:?}: {err}");
            assert!(err.to_string().contains("lease"), "{err}");
        }
    }
    assert!(!lock.is_locked().unwrap(), "a rejected lease took the lock");
    // An unbounded wait is not an error.
    drop(
        lock.try_lock_for(Duration::MAX)
            .unwrap()
            .expect("a free lock"),
    );

    // Builder settings.
    let unused = "redis://127.0.0.1:1/";
    let cases: [(&str, Result<Client, Error>); 6] = [
        (
            "watchdog_timeout",
            env.builder().watchdog_timeout(Duration::ZERO).build(),
        ),
        (
            "watchdog_timeout",
            env.builder()
                .watchdog_timeout(Duration::from_millis(2))
                .build(),
        ),
        (
            "watchdog_timeout",
            env.builder().watchdog_timeout(Duration::MAX).build(),
        ),
        ("backend", Client::builder().build()),
        (
            "pool_size",
            Client::builder().redis_url(unused).pool_size(0).build(),
        ),
        (
            "connection_timeout",
            Client::builder()
                .redis_url(unused)
                .connection_timeout(Duration::ZERO)
                .build(),
        ),
    ];
    for (what, result) in cases {
        let err = result.unwrap_err();
        assert_eq!(invalid_argument(&err), what, "{err}");
        assert!(err.to_string().contains(what), "{err}");
    }
    let err = Client::builder()
        .redis_url("not a url")
        .build()
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err:?}");

    // A key of another type (WRONGTYPE): a protocol error, no panic, and the
    // key is left alone.
    let name = unique_name("lock:wrongtype");
    env.set_string(&name, "x");
    let lock = client.lock(name.as_str());
    let errors = [
        lock.lock().map(drop).unwrap_err(),
        lock.try_lock().map(drop).unwrap_err(),
        lock.lock_with_lease(LONG_LEASE).map(drop).unwrap_err(),
        lock.try_lock_for(Duration::from_millis(50))
            .map(drop)
            .unwrap_err(),
        lock.is_locked().map(drop).unwrap_err(),
        lock.hold_count().map(drop).unwrap_err(),
    ];
    for err in &errors {
        assert!(
            err.is_protocol_error(),
            "expected a protocol error, got {err:?}"
        );
        assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    }
}

fn two_clients_are_two_holders(env: &Env) {
    let name = unique_name("lock:two-clients");
    let a = env.client();
    let b = env.client();
    assert_ne!(a.id(), b.id());
    assert_ne!(a.current_holder_id(), b.current_holder_id());
    let lock_a = a.lock(name.as_str());
    let lock_b = b.lock(name.as_str());

    let guard = lock_a.lock().unwrap();
    assert_eq!(lock_a.hold_count().unwrap(), 1);
    assert!(lock_a.is_held_by_current_thread().unwrap());
    // Same thread, other client: a different holder.
    assert!(lock_b.is_locked().unwrap());
    assert_eq!(lock_b.hold_count().unwrap(), 0);
    assert!(!lock_b.is_held_by_current_thread().unwrap());
    assert!(lock_b.try_lock().unwrap().is_none());

    // Clones of a client are the same holder.
    let clone = a.clone();
    assert_eq!(clone.current_holder_id(), a.current_holder_id());
    let again = clone
        .lock(name.as_str())
        .try_lock()
        .unwrap()
        .expect("reentry");
    assert_eq!(lock_a.hold_count().unwrap(), 2);
    drop(again);
    guard.unlock().unwrap();
    assert!(!lock_b.is_locked().unwrap());
}

fn a_lost_lock_retaken_by_another_thread_is_renewed(env: &Env) {
    retake_after_loss(env, false);
}

/// A watchdog hold of thread T1 is lost (force-unlocked) while T1's guard
/// lives and the watchdog has noticed; then the lock is taken again, with the
/// watchdog, by another thread of the same client (`same_thread == false`)
/// or by T1 itself (`same_thread == true`). The new hold must be renewed
/// like any other: not reported lost, and not taken by another client after
/// the watchdog timeout.
fn retake_after_loss(env: &Env, same_thread: bool) {
    const TIMEOUT: Duration = Duration::from_secs(1);
    let name = unique_name("lock:retake");
    let a = env.client_with_watchdog(TIMEOUT);
    let b = env.client_with_watchdog(TIMEOUT);
    let lock = a.lock(name.as_str());
    let lock_b = b.lock(name.as_str());

    let old = lock.lock().unwrap();
    assert!(lock.force_unlock().unwrap());
    // Let the watchdog notice (it renews every third of the timeout).
    let started = Instant::now();
    while !old.is_lost() {
        assert!(
            started.elapsed() < TIMEOUT * 3,
            "the watchdog did not notice a force-unlocked hold within {:?}",
            TIMEOUT * 3
        );
        thread::sleep(Duration::from_millis(20));
    }

    let hold = move |lock: Lock, lock_b: Lock| {
        let new = lock.lock().unwrap();
        assert!(!new.is_lost(), "a fresh hold reports lost");
        let started = Instant::now();
        while started.elapsed() < TIMEOUT + TIMEOUT / 2 {
            thread::sleep(Duration::from_millis(100));
            assert!(
                lock_b.try_lock().unwrap().is_none(),
                "another client took the lock {:?} into a watchdog hold (timeout {TIMEOUT:?})",
                started.elapsed()
            );
        }
        assert!(!new.is_lost(), "a renewed hold reports lost");
        new.unlock().unwrap();
    };
    if same_thread {
        hold(lock.clone(), lock_b);
    } else {
        let other = lock.clone();
        on_other_thread(move || hold(other, lock_b));
    }
    assert!(old.unlock().unwrap_err().is_not_held());
    assert!(!lock.is_locked().unwrap());
}

/// A store that holds back the next watchdog renewal it is asked to run
/// (`lock_renew_batch`, or `lock_renew` for one hold) once armed: it says the renewal has left, and sends
/// it on to the real store only when the test opens the gate. The renewal
/// is then provably in flight for as long as the test wants.
struct HeldRenewal {
    state: std::sync::Mutex<HeldState>,
    changed: std::sync::Condvar,
}

#[derive(Default)]
struct HeldState {
    armed: bool,
    /// The held renewal has reached the store wrapper.
    entered: bool,
    open: bool,
    /// The held renewal has run in the real store and its reply is back.
    answered: bool,
}

impl HeldRenewal {
    fn new(inner: Arc<dyn redisync::LockBackend>) -> Arc<Wrapped<HeldRenewal>> {
        Arc::new(Wrapped::around(
            inner,
            HeldRenewal {
                state: std::sync::Mutex::new(HeldState::default()),
                changed: std::sync::Condvar::new(),
            },
        ))
    }

    fn arm(&self) {
        self.state.lock().unwrap().armed = true;
    }

    fn open(&self) {
        self.state.lock().unwrap().open = true;
        self.changed.notify_all();
    }

    /// Waits (at most `STUCK`) until `what` holds of the state.
    fn wait_for(&self, what: &str, check: impl Fn(&HeldState) -> bool) {
        let state = self.state.lock().unwrap();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, STUCK, |state| !check(state))
            .unwrap();
        assert!(check(&state), "{what} within {STUCK:?}");
    }
}

impl Hook for HeldRenewal {
    fn run_script(
        &self,
        inner: &Store,
        call: &redisync::ScriptCall<'_>,
    ) -> redisync::Result<redisync::Reply> {
        // A batch, or one hold with its attempt's record (issue 32).
        let renewal = matches!(call.script().id(), "lock_renew" | "lock_renew_batch");
        let held = renewal && {
            let mut state = self.state.lock().unwrap();
            std::mem::replace(&mut state.armed, false)
        };
        if !held {
            return inner.run_script(call);
        }
        {
            let mut state = self.state.lock().unwrap();
            state.entered = true;
            self.changed.notify_all();
            let (state, _) = self
                .changed
                .wait_timeout_while(state, STUCK, |state| !state.open)
                .unwrap();
            assert!(state.open, "the test never let the held renewal go");
        }
        let reply = inner.run_script(call);
        self.state.lock().unwrap().answered = true;
        self.changed.notify_all();
        reply
    }
}

/// A watchdog renewal that has left when the hold is unlocked must not
/// renew the same holder's next hold: here the same thread of the same
/// client takes the lock again at once with a fixed lease. The renewal is
/// held back in a store wrapper until the new hold is taken (or, if the
/// unlock waits for it, as it must, for `RELEASE_AFTER`); landing after the
/// new hold it would stretch the fixed lease to the watchdog's (it did:
/// `Watchdog::stop` only took the renewal off the schedule).
fn a_renewal_in_flight_at_unlock_does_not_renew_the_next_hold(env: &Env) {
    // Renewed every second; the held renewal would set a 3 s lease.
    const TIMEOUT: Duration = Duration::from_secs(3);
    const FIXED: Duration = Duration::from_millis(300);
    // Well under the time the unlock may wait for the renewal (the
    // watchdog timeout on memory, one response timeout on Redis: 3 s).
    const RELEASE_AFTER: Duration = Duration::from_millis(500);
    let name = unique_name("lock:renewal-in-flight");
    let store = env.client();
    let held = HeldRenewal::new(Arc::clone(store.backend()));
    let client = Client::builder()
        .event_handler(Arc::new(NopEventHandler))
        .backend(Arc::clone(&held))
        .watchdog_timeout(TIMEOUT)
        .build()
        .unwrap();
    let lock = client.lock(name.as_str());

    let guard = lock.lock().unwrap();
    held.arm();
    held.wait_for("the watchdog's renewal left", |state| state.entered);
    let (relocked, relocked_rx) = mpsc::channel::<()>();
    let gate = Arc::clone(&held);
    let opener = thread::spawn(move || {
        let _ = relocked_rx.recv_timeout(RELEASE_AFTER);
        gate.open();
    });
    let unlocked = Instant::now();
    guard.unlock().unwrap();
    let unlock_took = unlocked.elapsed();
    let same = lock.lock_with_lease(FIXED).unwrap();
    let _ = relocked.send(());
    opener.join().unwrap();
    held.wait_for("the held renewal was answered", |state| state.answered);

    let ttl = lock.remaining_ttl().unwrap();
    assert!(
        ttl.is_none_or(|ttl| ttl <= FIXED),
        "the new hold's {FIXED:?} lease was renewed to {ttl:?} by a renewal of the \
         previous hold that was in flight at its unlock (the unlock took {unlock_took:?})"
    );
    let freed_by = Instant::now() + TIMEOUT / 2;
    while lock.is_locked().unwrap() {
        assert!(
            Instant::now() < freed_by,
            "a {FIXED:?} lease still held {:?} after the renewal landed",
            TIMEOUT / 2
        );
        thread::sleep(Duration::from_millis(20));
    }
    assert!(same.unlock().unwrap_err().is_not_held());
}

// ---------------------------------------------------------------------------
// Backend-independent and Redis-only cases
// ---------------------------------------------------------------------------

fn assert_send_sync<T: Send + Sync>() {}

/// Compiles only for a `!Send` type: for a `Send` type both impls apply and
/// `AmbiguousIfSend<_>` cannot be inferred.
trait AmbiguousIfSend<A> {
    fn some_item() {}
}
impl<T: ?Sized> AmbiguousIfSend<()> for T {}
struct Invalid;
impl<T: ?Sized + Send> AmbiguousIfSend<Invalid> for T {}

#[test]
fn guards_are_not_send_and_handles_are_send_sync() {
    assert_send_sync::<Client>();
    assert_send_sync::<Lock>();
    assert_send_sync::<Error>();
    assert_send_sync::<MemoryBackend>();
    assert_send_sync::<redisync::RedisBackend>();
    <LockGuard as AmbiguousIfSend<_>>::some_item();
}

/// A loopback port nobody listens on (bound, read and released).
fn unused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn redis_down_gives_a_clear_connection_error() {
    let port = unused_port();
    let url = format!("redis://127.0.0.1:{port}/");
    let started = Instant::now();
    let err = Client::builder()
        .redis_url(url.as_str())
        .connection_timeout(Duration::from_millis(500))
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .unwrap_err();
    assert!(
        err.is_connection_error(),
        "expected a connection error, got {err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&format!("127.0.0.1:{port}")),
        "the message does not name the address: {message}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    // The default settings (Client::open) fail the same way.
    let err = Client::open(&url).unwrap_err();
    assert!(
        err.is_connection_error(),
        "expected a connection error, got {err:?}"
    );
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
}

// ---------------------------------------------------------------------------
// Regressions: bugs found by this suite, fixed in src/
// ---------------------------------------------------------------------------

/// A guard must report `is_lost()` no later than the store frees its lease:
/// once another holder has the lock, `is_lost()` must be true.
///
/// Regression (failed about 1 attempt in 100): `Lock::guard` started the local
/// lease clock with `Instant::now()` *after* the acquire's reply arrived, so
/// the local deadline was later than the store's by the reply's latency (up
/// to ~1 ms seen on Redis, ~50 µs in memory). In that window another client
/// already holds the lock while `is_lost()` still says false. The fix is to
/// take the instant *before* sending the attempt that succeeded and start
/// the lease from it.
fn lost_is_reported_before_another_holder_gets_it(env: &Env) {
    const LEASE: Duration = Duration::from_millis(2);
    const BUDGET: Duration = Duration::from_secs(4);
    let a = env.client();
    let b = env.client();
    let started = Instant::now();
    let mut attempt = 0;
    while started.elapsed() < BUDGET {
        attempt += 1;
        let name = unique_name("lock:lost-window");
        let guard = a.lock(name.as_str()).lock_with_lease(LEASE).unwrap();
        let lock_b = b.lock(name.as_str());
        // Spin: take the lock the moment the store frees it.
        let taken = loop {
            if let Some(taken) = lock_b.try_lock().unwrap() {
                break taken;
            }
        };
        assert!(
            guard.is_lost(),
            "attempt {attempt}: another client holds the lock, yet the old guard \
             reports is_lost() == false"
        );
        drop(taken);
        drop(guard);
    }
}

#[test]
fn memory_lost_is_reported_before_another_holder_gets_it() {
    lost_is_reported_before_another_holder_gets_it(&Env::memory());
}

#[test]
fn redis_lost_is_reported_before_another_holder_gets_it() {
    lost_is_reported_before_another_holder_gets_it(&Env::redis());
}

#[cfg(feature = "cluster")]
#[test]
fn cluster_lost_is_reported_before_another_holder_gets_it() {
    lost_is_reported_before_another_holder_gets_it(&Env::cluster());
}

/// The same as `a_lost_lock_retaken_by_another_thread_is_renewed`, but the
/// thread that lost its hold takes the lock again itself (e.g. nested code
/// calls `lock()` while the outer guard, lost, still lives).
///
/// Regression: the renewal of the lost hold stopped after marking it
/// lost, but its `(name, holder)` entry stays in the watchdog's map while the
/// old guard lives. `Watchdog::start` for the new hold finds that entry,
/// bumps its count and returns its lost flag: the new guard reports
/// `is_lost()` from the start, nothing renews it, and another client takes
/// the lock one watchdog timeout later (observed: after ~300 ms with a
/// 300 ms timeout) while the new guard is still held. Redisson removes the
/// entry when a renewal finds the lock gone; `start` could likewise replace
/// an entry whose flag is set (keeping its count) with a fresh watch.
fn a_lost_lock_retaken_by_the_same_thread_is_renewed(env: &Env) {
    retake_after_loss(env, true);
}

#[test]
fn memory_a_lost_lock_retaken_by_the_same_thread_is_renewed() {
    a_lost_lock_retaken_by_the_same_thread_is_renewed(&Env::memory());
}

#[test]
fn redis_a_lost_lock_retaken_by_the_same_thread_is_renewed() {
    a_lost_lock_retaken_by_the_same_thread_is_renewed(&Env::redis());
}

#[cfg(feature = "cluster")]
#[test]
fn cluster_a_lost_lock_retaken_by_the_same_thread_is_renewed() {
    a_lost_lock_retaken_by_the_same_thread_is_renewed(&Env::cluster());
}
