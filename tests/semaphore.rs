//! Conformance suite for [`Semaphore`] and [`PermitExpirableSemaphore`]:
//! every behaviour is written once, as a function of an [`Env`], and run on
//! both backends by `backend_tests!` (a `memory` and a `redis` module with
//! one `#[test]` per behaviour).
//!
//! Two `Client`s on one store stand for two processes. Timings use generous
//! upper bounds (the CI VM has two vCPUs and heavy steal); lower bounds are
//! tight only where they prove something.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::keys;
use common::timing::{LONG_LEASE, PROMPT, SETTLE, STUCK};
use common::{CountingBackend, Env, backend_tests, unique_name};
use redisync::{Client, Error, PermitId, Semaphore, SemaphorePermit};

backend_tests!(
    permits_are_never_over_granted,
    try_set_permits_only_once,
    add_permits_may_go_negative,
    drain_permits,
    try_acquire_never_waits,
    try_acquire_for_waits_about_the_given_time,
    waiters_are_woken_by_release_not_polling,
    release_of_n_wakes_enough_waiters,
    killed_pubsub_connection_does_not_strand_waiters,
    permit_guard_release_forget_and_drop,
    bad_input_is_a_clear_error,
    expired_permit_returns_to_the_pool,
    release_returns_a_live_permit_and_rejects_unknown_or_expired_ids,
    release_wakes_a_waiter_for_a_leased_permit,
    never_over_granted_with_leases,
    expirable_bad_input_is_a_clear_error,
);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A client whose backend counts its calls (a second "process" on the same
/// store as `other`).
fn counting_client(env: &Env, other: &Client) -> (Client, CountingBackend) {
    let counting = CountingBackend::new(Arc::clone(other.backend()));
    let client = env
        .builder()
        .shared_backend(Arc::new(counting.clone()))
        .build()
        .unwrap();
    (client, counting)
}

/// A thread blocked in `acquire(1)`: reports the instant it got the permit,
/// then keeps it (`forget`), so no later release can be its own.
fn spawn_acquirer(semaphore: Semaphore) -> (thread::JoinHandle<()>, mpsc::Receiver<Instant>) {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let permit = semaphore.acquire(1).expect("waiter: acquire(1)");
        let _ = tx.send(Instant::now());
        permit.forget();
    });
    (handle, rx)
}

/// Waits for a waiter's report; panics (rather than hangs) if it never comes.
fn acquired_at(rx: &mpsc::Receiver<Instant>, what: &str) -> Instant {
    rx.recv_timeout(STUCK).unwrap_or_else(|e| {
        panic!("{what}: the waiter did not get a permit within {STUCK:?} ({e})")
    })
}

/// The argument an `InvalidArgument` error names; panics on other errors.
fn invalid_argument(err: &Error) -> &'static str {
    match err {
        Error::InvalidArgument { what, .. } => what,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// An error about the stored data (an overflow, a non-number): `Protocol`
/// on both backends, as the docs of `Semaphore::add_permits` promise.
fn assert_data_error(err: &Error, what: &str) {
    assert!(
        err.is_protocol_error(),
        "{what}: expected a protocol error (the key holds data the semaphore cannot use), got {err:?}"
    );
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Raises `max` to at least `value`.
fn raise(max: &AtomicUsize, value: usize) {
    max.fetch_max(value, Ordering::SeqCst);
}

// ---------------------------------------------------------------------------
// Semaphore
// ---------------------------------------------------------------------------

fn permits_are_never_over_granted(env: &Env) {
    const PERMITS: usize = 3;
    const THREADS_PER_CLIENT: usize = 4;
    const ITERATIONS: usize = 30;
    let name = unique_name("sem:over-grant");
    let clients = [env.client(), env.client()];
    assert!(
        clients[0]
            .semaphore(name.as_str())
            .try_set_permits(3)
            .unwrap()
    );
    let live = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(clients.len() * THREADS_PER_CLIENT));
    let mut threads = Vec::new();
    for client in &clients {
        for t in 0..THREADS_PER_CLIENT {
            let semaphore = client.semaphore(name.as_str());
            let (live, max, start) = (live.clone(), max.clone(), start.clone());
            threads.push(thread::spawn(move || {
                start.wait();
                for i in 0..ITERATIONS {
                    let permit = semaphore.acquire(1).expect("acquire(1)");
                    let now = live.fetch_add(1, Ordering::SeqCst) + 1;
                    raise(&max, now);
                    assert!(now <= PERMITS, "{now} holders of {PERMITS} permits");
                    thread::sleep(Duration::from_millis(1));
                    live.fetch_sub(1, Ordering::SeqCst);
                    // Both ways of giving the permit back.
                    if (t + i) % 2 == 0 {
                        permit.release().expect("release()");
                    } else {
                        drop(permit);
                    }
                }
            }));
        }
    }
    for thread in threads {
        thread.join().expect("worker panicked");
    }
    let max = max.load(Ordering::SeqCst);
    assert!(max <= PERMITS, "{max} holders of {PERMITS} permits");
    // It is a semaphore, not a mutex: 8 threads sharing 3 permits overlap.
    assert!(max >= 2, "never more than {max} holder at once");
    let available = clients[1].semaphore(name.as_str()).available_permits();
    assert_eq!(available.unwrap(), 3, "permits lost or created");
}

fn try_set_permits_only_once(env: &Env) {
    let a = env.client();
    let b = env.client();
    let name = unique_name("sem:set-once");
    let sa = a.semaphore(name.as_str());
    let sb = b.semaphore(name.as_str());
    assert_eq!(sa.name(), name);
    assert_eq!(sa.available_permits().unwrap(), 0, "unset: no permits");
    assert!(sa.try_set_permits(5).unwrap());
    assert!(!sa.try_set_permits(7).unwrap(), "set twice");
    assert!(
        !sb.try_set_permits(1).unwrap(),
        "set again by another client"
    );
    assert_eq!(sb.available_permits().unwrap(), 5);

    // Taking permits does not make it settable again, even at zero.
    sb.acquire(5).unwrap().forget();
    assert_eq!(sa.available_permits().unwrap(), 0);
    assert!(!sa.try_set_permits(2).unwrap(), "set again at zero permits");
    assert_eq!(sa.available_permits().unwrap(), 0);

    // Zero is a valid setting, and then counts as set.
    let zero = a.semaphore(unique_name("sem:set-zero"));
    assert!(zero.try_set_permits(0).unwrap());
    assert!(!zero.try_set_permits(3).unwrap());
    assert_eq!(zero.available_permits().unwrap(), 0);

    // Setting the count wakes a waiter on an unset semaphore.
    let name = unique_name("sem:set-wakes");
    let (waiter, rx) = spawn_acquirer(b.semaphore(name.as_str()));
    thread::sleep(SETTLE);
    assert!(
        rx.try_recv().is_err(),
        "the waiter got a permit of an unset semaphore"
    );
    let set = Instant::now();
    assert!(a.semaphore(name.as_str()).try_set_permits(1).unwrap());
    let woke = acquired_at(&rx, "try_set_permits").duration_since(set);
    assert!(
        woke < PROMPT,
        "try_set_permits woke the waiter after {woke:?}"
    );
    waiter.join().unwrap();

    // The largest count is accepted and can be taken whole. (The count is
    // read back only up to 2^53: Redis' Lua reads it as a double.)
    let max = a.semaphore(unique_name("sem:set-max"));
    assert!(max.try_set_permits(i64::MAX as u64).unwrap());
    let all = max
        .try_acquire(i64::MAX as u64)
        .unwrap()
        .expect("every permit");
    assert_eq!(all.forget(), i64::MAX as u64);
    assert_eq!(max.available_permits().unwrap(), 0);
    let big = a.semaphore(unique_name("sem:set-big"));
    assert!(big.try_set_permits(1 << 53).unwrap());
    assert_eq!(big.available_permits().unwrap(), 1 << 53);
}

fn add_permits_may_go_negative(env: &Env) {
    let a = env.client();
    let b = env.client();
    let name = unique_name("sem:add");
    let sa = a.semaphore(name.as_str());
    let sb = b.semaphore(name.as_str());
    // Adding to an unset semaphore starts from zero.
    sa.add_permits(2).unwrap();
    assert_eq!(sb.available_permits().unwrap(), 2);
    sb.add_permits(-5).unwrap();
    assert_eq!(sa.available_permits().unwrap(), -3);
    assert!(
        sa.try_acquire(1).unwrap().is_none(),
        "acquired at -3 permits"
    );
    assert!(
        sa.try_acquire_for(1, Duration::from_millis(50))
            .unwrap()
            .is_none()
    );
    // Releases (permits have no owner) bring it back up.
    sb.release(4).unwrap();
    assert_eq!(sa.available_permits().unwrap(), 1);
    let permit = sa.try_acquire(1).unwrap().expect("one permit");
    assert_eq!(sa.available_permits().unwrap(), 0);
    drop(permit);
    assert_eq!(sa.available_permits().unwrap(), 1);
    sa.add_permits(0).unwrap();
    assert_eq!(sa.available_permits().unwrap(), 1);

    // A negative add on a semaphore whose count was never set.
    let fresh = b.semaphore(unique_name("sem:add-negative"));
    fresh.add_permits(-1).unwrap();
    assert_eq!(fresh.available_permits().unwrap(), -1);
    assert!(
        !fresh.try_set_permits(4).unwrap(),
        "add_permits set the count"
    );

    // Adding wakes a waiter, like a release.
    assert_eq!(sa.drain_permits().unwrap(), 1);
    let (waiter, rx) = spawn_acquirer(sb);
    thread::sleep(SETTLE);
    assert!(rx.try_recv().is_err(), "the waiter got a missing permit");
    sa.add_permits(-1).unwrap();
    let added = Instant::now();
    sa.add_permits(2).unwrap();
    let woke = acquired_at(&rx, "add_permits").duration_since(added);
    assert!(woke < PROMPT, "add_permits woke the waiter after {woke:?}");
    waiter.join().unwrap();
    assert_eq!(sa.available_permits().unwrap(), 0);
}

fn drain_permits(env: &Env) {
    let a = env.client();
    let b = env.client();
    let name = unique_name("sem:drain");
    let sa = a.semaphore(name.as_str());
    let sb = b.semaphore(name.as_str());
    assert_eq!(
        sa.drain_permits().unwrap(),
        0,
        "draining an unset semaphore"
    );
    assert!(
        sa.try_set_permits(2).unwrap(),
        "draining an unset semaphore set it"
    );
    sa.add_permits(3).unwrap();
    let held = sb.acquire(1).unwrap();
    assert_eq!(sa.drain_permits().unwrap(), 4);
    assert_eq!(sb.available_permits().unwrap(), 0);
    assert!(sb.try_acquire(1).unwrap().is_none());
    assert_eq!(sa.drain_permits().unwrap(), 0);
    // The drained permits are not given back by anyone; a held one is.
    drop(held);
    assert_eq!(sa.available_permits().unwrap(), 1);
    // A negative count drains to zero and reports what it was.
    sa.add_permits(-3).unwrap();
    assert_eq!(sa.drain_permits().unwrap(), -2);
    assert_eq!(sa.available_permits().unwrap(), 0);
}

fn try_acquire_never_waits(env: &Env) {
    let a = env.client();
    let b = env.client();
    let name = unique_name("sem:try");
    let sa = a.semaphore(name.as_str());
    let sb = b.semaphore(name.as_str());
    sa.try_set_permits(2).unwrap();

    let started = Instant::now();
    let first = sb.try_acquire(2).unwrap().expect("two free permits");
    assert!(started.elapsed() < PROMPT);
    assert_eq!(first.permits(), 2);
    for (who, semaphore) in [("another client", &sa), ("the holder's client", &sb)] {
        let started = Instant::now();
        let got = semaphore.try_acquire(1).unwrap();
        let elapsed = started.elapsed();
        assert!(got.is_none(), "{who}: try_acquire took a taken permit");
        assert!(elapsed < PROMPT, "{who}: try_acquire waited {elapsed:?}");
    }
    drop(first);
    // More than available: nothing is taken (all or nothing).
    assert!(sa.try_acquire(3).unwrap().is_none());
    assert_eq!(sa.available_permits().unwrap(), 2);
    let one = sa.try_acquire(1).unwrap().expect("a free permit");
    assert!(sb.try_acquire(2).unwrap().is_none());
    assert_eq!(sb.available_permits().unwrap(), 1);
    drop(one);

    // An unset semaphore has no permits.
    let unset = b.semaphore(unique_name("sem:try-unset"));
    let started = Instant::now();
    assert!(unset.try_acquire(1).unwrap().is_none());
    assert!(started.elapsed() < PROMPT);
    assert_eq!(unset.available_permits().unwrap(), 0);
}

fn try_acquire_for_waits_about_the_given_time(env: &Env) {
    let a = env.client();
    let b = env.client();
    let name = unique_name("sem:try-for");
    let sa = a.semaphore(name.as_str());
    let sb = b.semaphore(name.as_str());
    sa.try_set_permits(1).unwrap();
    let _held = sa.acquire(1).unwrap();

    for (permits, wait) in [
        (1, Duration::from_millis(100)),
        (1, Duration::from_millis(400)),
        (2, Duration::from_millis(200)),
    ] {
        let started = Instant::now();
        let got = sb.try_acquire_for(permits, wait).unwrap();
        let elapsed = started.elapsed();
        assert!(got.is_none(), "try_acquire_for took a taken permit");
        assert!(
            elapsed >= wait,
            "try_acquire_for({permits}, {wait:?}) gave up after {elapsed:?}"
        );
        assert!(
            elapsed < wait + PROMPT,
            "try_acquire_for({permits}, {wait:?}) returned after {elapsed:?}"
        );
    }
    assert_eq!(sb.available_permits().unwrap(), 0);

    // A release during the wait ends it early with the permit.
    let releaser = {
        let sa = sa.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            sa.release(1).unwrap();
        })
    };
    let started = Instant::now();
    let got = sb.try_acquire_for(1, Duration::from_secs(5)).unwrap();
    let elapsed = started.elapsed();
    releaser.join().unwrap();
    assert!(got.is_some(), "no permit after a release within the wait");
    assert!(
        elapsed < Duration::from_millis(200) + PROMPT,
        "got the released permit only after {elapsed:?}"
    );
    // An unbounded wait is not an error.
    sa.release(1).unwrap();
    drop(sb.try_acquire_for(1, Duration::MAX).unwrap().expect("free"));
}

fn waiters_are_woken_by_release_not_polling(env: &Env) {
    const MAX_ATTEMPTS: u64 = 6;
    let a = env.client();
    let (b, counting) = counting_client(env, &a);
    // The waiter in another client ("process"), then in another thread of
    // the releaser's client. The first round waits long enough (1.5 s) that
    // a polling waiter would show up in the call count.
    for (who, waiter_client, counted) in [
        ("another client", &b, true),
        ("the releaser's client", &a, false),
    ] {
        let mut latencies = Vec::new();
        for hold in [1500, 300, 300, 300, 300].map(Duration::from_millis) {
            let name = unique_name("sem:wake");
            a.semaphore(name.as_str()).try_set_permits(0).unwrap();
            let before = counting.calls("semaphore_try_acquire");
            let (waiter, rx) = spawn_acquirer(waiter_client.semaphore(name.as_str()));
            thread::sleep(hold);
            assert!(rx.try_recv().is_err(), "the waiter got a missing permit");
            let attempts = counting.calls("semaphore_try_acquire") - before;
            let released = Instant::now();
            a.semaphore(name.as_str()).release(1).unwrap();
            latencies.push(acquired_at(&rx, "release").duration_since(released));
            waiter.join().unwrap();
            if counted {
                eprintln!("semaphore waiter in {who}: {attempts} attempts over {hold:?}");
                assert!(
                    attempts <= MAX_ATTEMPTS,
                    "a waiter on an empty semaphore made {attempts} attempts in {hold:?}: \
                     it polls instead of parking"
                );
            }
        }
        let worst = *latencies.iter().max().unwrap();
        let median = median(&mut latencies);
        assert!(
            median < Duration::from_millis(100),
            "waiter in {who}: median wake-up {median:?} after release (all: {latencies:?})"
        );
        assert!(
            worst < PROMPT,
            "waiter in {who}: a wake-up took {worst:?} (all: {latencies:?})"
        );
    }
}

fn release_of_n_wakes_enough_waiters(env: &Env) {
    let a = env.client();
    let b = env.client();
    // Three waiters in one client (one message must wake all three there),
    // then two in each client.
    let rounds: [&[&Client]; 2] = [&[&b, &b, &b], &[&a, &a, &b, &b]];
    for waiters_at in rounds {
        let name = unique_name("sem:release-n");
        let n = waiters_at.len();
        a.semaphore(name.as_str()).try_set_permits(0).unwrap();
        let waiters: Vec<_> = waiters_at
            .iter()
            .map(|client| spawn_acquirer(client.semaphore(name.as_str())))
            .collect();
        thread::sleep(SETTLE);
        for (_, rx) in &waiters {
            assert!(rx.try_recv().is_err(), "a waiter got a missing permit");
        }
        let released = Instant::now();
        a.semaphore(name.as_str())
            .release(u64::try_from(n).unwrap())
            .unwrap();
        let mut latencies: Vec<Duration> = waiters
            .iter()
            .map(|(_, rx)| acquired_at(rx, "release(n)").duration_since(released))
            .collect();
        for (handle, _) in waiters {
            handle.join().unwrap();
        }
        latencies.sort();
        let worst = latencies[n - 1];
        assert!(
            worst < PROMPT,
            "release({n}) woke its {n} waiters after {latencies:?}"
        );
        // Each waiter kept its permit: none was handed on.
        assert_eq!(b.semaphore(name.as_str()).available_permits().unwrap(), 0);
    }
}

fn killed_pubsub_connection_does_not_strand_waiters(env: &Env) {
    const BOUND: Duration = Duration::from_secs(2);
    let a = env.client();
    let b = env.client();
    // Released after the subscriber had time to reconnect, then right after
    // the kill, while it is reconnecting.
    for pause in [Duration::from_millis(300), Duration::ZERO] {
        let name = unique_name("sem:killed-pubsub");
        a.semaphore(name.as_str()).try_set_permits(0).unwrap();
        let (waiter, rx) = spawn_acquirer(b.semaphore(name.as_str()));
        thread::sleep(SETTLE);
        env.kill_pubsub();
        thread::sleep(pause);
        assert!(rx.try_recv().is_err(), "the waiter got a missing permit");
        let released = Instant::now();
        a.semaphore(name.as_str()).release(1).unwrap();
        let woke = acquired_at(&rx, "release after a pub/sub kill").duration_since(released);
        assert!(
            woke < BOUND,
            "after a pub/sub kill (then {pause:?}), the waiter took {woke:?} to get the permit"
        );
        waiter.join().unwrap();
    }
}

fn permit_guard_release_forget_and_drop(env: &Env) {
    let a = env.client();
    let b = env.client();
    let name = unique_name("sem:guard");
    let sa = a.semaphore(name.as_str());
    let sb = b.semaphore(name.as_str());
    sa.try_set_permits(3).unwrap();

    // Explicit release.
    let two = sa.acquire(2).unwrap();
    assert_eq!(two.permits(), 2);
    assert!(format!("{two:?}").contains(name.as_str()));
    assert_eq!(sb.available_permits().unwrap(), 1);
    two.release().unwrap();
    assert_eq!(sb.available_permits().unwrap(), 3);

    // Forget keeps them taken.
    let one = sa.try_acquire(1).unwrap().unwrap();
    assert_eq!(one.forget(), 1);
    assert_eq!(sb.available_permits().unwrap(), 2);
    // ... until anyone releases them (permits have no owner).
    sb.release(1).unwrap();
    assert_eq!(sa.available_permits().unwrap(), 3);

    // Drop releases, once.
    {
        let _scoped = sa.try_acquire_for(3, PROMPT).unwrap().unwrap();
        assert_eq!(sb.available_permits().unwrap(), 0);
    }
    assert_eq!(sb.available_permits().unwrap(), 3);

    // The guard is Send: taken here, released by a drop on another thread,
    // which wakes a waiter of another client.
    let all: SemaphorePermit = sa.acquire(3).unwrap();
    let (waiter, rx) = spawn_acquirer(sb);
    thread::sleep(SETTLE);
    assert!(rx.try_recv().is_err());
    let released = Instant::now();
    thread::spawn(move || drop(all)).join().unwrap();
    let woke = acquired_at(&rx, "a dropped guard").duration_since(released);
    assert!(
        woke < PROMPT,
        "a dropped guard woke the waiter after {woke:?}"
    );
    waiter.join().unwrap();
    assert_eq!(sa.available_permits().unwrap(), 2);
}

fn bad_input_is_a_clear_error(env: &Env) {
    let client = env.client();

    // Empty name: named, on every operation.
    let empty = client.semaphore("");
    let errors = [
        empty.try_set_permits(1).map(drop).unwrap_err(),
        empty.add_permits(1).map(drop).unwrap_err(),
        empty.acquire(1).map(drop).unwrap_err(),
        empty.try_acquire(1).map(drop).unwrap_err(),
        empty
            .try_acquire_for(1, Duration::from_millis(10))
            .map(drop)
            .unwrap_err(),
        empty.release(1).map(drop).unwrap_err(),
        empty.available_permits().map(drop).unwrap_err(),
        empty.drain_permits().map(drop).unwrap_err(),
    ];
    for err in &errors {
        assert_eq!(invalid_argument(err), "name", "{err}");
        assert!(err.to_string().contains("name"), "{err}");
    }

    // Zero permits, or more than i64 can count.
    let name = unique_name("sem:bad-permits");
    let semaphore = client.semaphore(name.as_str());
    semaphore.try_set_permits(2).unwrap();
    for permits in [0, i64::MAX as u64 + 1, u64::MAX] {
        let mut errors = vec![
            semaphore.acquire(permits).map(drop).unwrap_err(),
            semaphore.try_acquire(permits).map(drop).unwrap_err(),
            semaphore
                .try_acquire_for(permits, Duration::from_millis(10))
                .map(drop)
                .unwrap_err(),
            semaphore.release(permits).map(drop).unwrap_err(),
        ];
        if permits > 0 {
            errors.push(
                client
                    .semaphore(unique_name("sem:bad-set"))
                    .try_set_permits(permits)
                    .map(drop)
                    .unwrap_err(),
            );
        }
        for err in &errors {
            assert_eq!(invalid_argument(err), "permits", "{permits}: {err}");
            assert!(err.to_string().contains("permits"), "{err}");
        }
    }
    assert_eq!(
        semaphore.available_permits().unwrap(),
        2,
        "a rejected call changed the count"
    );

    // Overflowing the count: an error, no panic, the count unchanged.
    semaphore.add_permits(i64::MAX - 2).unwrap();
    for err in [
        semaphore.add_permits(1).unwrap_err(),
        semaphore.release(1).unwrap_err(),
    ] {
        assert_data_error(&err, "an overflowing count");
    }
    let all = semaphore.try_acquire(i64::MAX as u64).unwrap();
    assert_eq!(all.expect("every permit").forget(), i64::MAX as u64);
    assert_eq!(semaphore.available_permits().unwrap(), 0);

    // A key of another type: a lock's hash (WRONGTYPE).
    let name = unique_name("sem:wrongtype");
    let lock = client.lock(name.as_str());
    let guard = lock.lock().unwrap();
    let semaphore = client.semaphore(name.as_str());
    let errors = [
        semaphore.try_set_permits(1).map(drop).unwrap_err(),
        semaphore.add_permits(1).map(drop).unwrap_err(),
        semaphore.acquire(1).map(drop).unwrap_err(),
        semaphore.try_acquire(1).map(drop).unwrap_err(),
        semaphore
            .try_acquire_for(1, Duration::from_millis(50))
            .map(drop)
            .unwrap_err(),
        semaphore.release(1).map(drop).unwrap_err(),
        semaphore.available_permits().map(drop).unwrap_err(),
        semaphore.drain_permits().map(drop).unwrap_err(),
    ];
    for err in &errors {
        assert!(
            err.is_protocol_error(),
            "expected a protocol error, got {err:?}"
        );
        assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    }
    assert!(lock.is_locked().unwrap(), "the lock was disturbed");
    guard.unlock().unwrap();

    // A string that is not a number: an error, no panic.
    let name = unique_name("sem:not-a-number");
    env.set_string(&name, "many");
    let semaphore = client.semaphore(name.as_str());
    let errors = [
        semaphore.add_permits(1).map(drop).unwrap_err(),
        semaphore.acquire(1).map(drop).unwrap_err(),
        semaphore.try_acquire(1).map(drop).unwrap_err(),
        semaphore.release(1).map(drop).unwrap_err(),
        semaphore.available_permits().map(drop).unwrap_err(),
        semaphore.drain_permits().map(drop).unwrap_err(),
    ];
    for err in &errors {
        assert_data_error(err, "a count that is not a number");
    }
    assert!(!semaphore.try_set_permits(1).unwrap(), "the key is set");
}

// ---------------------------------------------------------------------------
// Permit-expirable semaphore
// ---------------------------------------------------------------------------

fn expired_permit_returns_to_the_pool(env: &Env) {
    const LEASE: Duration = Duration::from_millis(200);
    const MAX_ATTEMPTS: u64 = 8;
    let a = env.client();
    let (b, counting) = counting_client(env, &a);
    let name = unique_name("pes:expire");
    let pa = a.permit_expirable_semaphore(name.as_str());
    let pb = b.permit_expirable_semaphore(name.as_str());
    assert_eq!(pa.name(), name);
    assert!(pa.try_set_permits(1).unwrap());

    // a takes the only permit with a short lease and "crashes" (never
    // releases it).
    let taken = Instant::now();
    let crashed = pa.acquire_id(LEASE).unwrap();
    let started = Instant::now();
    assert!(pb.try_acquire_id(LONG_LEASE).unwrap().is_none());
    assert!(started.elapsed() < PROMPT, "try_acquire waited");

    // b waits: it parks until the lease ends and then takes the permit.
    let before = counting.calls("expirable_acquire");
    let got = pb
        .try_acquire_id_for(Duration::from_secs(2), LONG_LEASE)
        .unwrap();
    let after = taken.elapsed();
    let attempts = counting.calls("expirable_acquire") - before;
    eprintln!("expirable waiter: {attempts} attempts, permit back after {after:?}");
    let id = got.expect("the expired permit did not come back within 2 s");
    assert_ne!(id, crashed);
    assert!(
        after >= Duration::from_millis(150),
        "the permit came back {after:?} after a {LEASE:?} lease was taken"
    );
    assert!(
        after < Duration::from_millis(1500),
        "the permit came back only {after:?} after a {LEASE:?} lease was taken"
    );
    assert!(
        attempts <= MAX_ATTEMPTS,
        "the waiter made {attempts} attempts in {after:?}: it polls instead of parking \
         until the lease ends"
    );
    assert_eq!(pa.available_permits().unwrap(), 0);
    assert!(
        !pa.try_release(&crashed).unwrap(),
        "released an expired permit"
    );
    pb.release(&id).unwrap();
    assert_eq!(pa.available_permits().unwrap(), 1);

    // available_permits reclaims by itself, too.
    let crashed = pa.acquire_id(Duration::from_millis(300)).unwrap();
    assert_eq!(pb.available_permits().unwrap(), 0);
    thread::sleep(Duration::from_millis(600));
    assert_eq!(pb.available_permits().unwrap(), 1);
    assert!(!pa.try_release(&crashed).unwrap());

    // A waiter blocked in acquire() (no bound) is woken the same way.
    let _crashed = pa.acquire_id(LEASE).unwrap();
    let taken = Instant::now();
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let pb = pb.clone();
        thread::spawn(move || {
            let id = pb.acquire_id(LONG_LEASE).expect("acquire(lease)");
            let _ = tx.send(Instant::now());
            id
        })
    };
    let got_at = rx
        .recv_timeout(STUCK)
        .expect("the expired permit never reached a waiter in acquire()");
    let after = got_at.duration_since(taken);
    assert!(
        after < Duration::from_millis(1500),
        "acquire() got the expired permit only after {after:?}"
    );
    let id = waiter.join().unwrap();
    pb.release(&id).unwrap();
}

fn release_returns_a_live_permit_and_rejects_unknown_or_expired_ids(env: &Env) {
    let a = env.client();
    let b = env.client();
    let name = unique_name("pes:release");
    let pa = a.permit_expirable_semaphore(name.as_str());
    let pb = b.permit_expirable_semaphore(name.as_str());
    pa.try_set_permits(2).unwrap();
    assert!(!pb.try_set_permits(5).unwrap());

    let id = pa.acquire_id(LONG_LEASE).unwrap();
    assert_eq!(id.as_str().len(), 32, "{id}");
    assert!(
        id.as_str()
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)),
        "permit id {id} is not lowercase hex"
    );
    assert_eq!(id.to_string(), id.as_str());
    assert_eq!(pb.available_permits().unwrap(), 1);
    pa.release(&id).unwrap();
    assert_eq!(pb.available_permits().unwrap(), 2);

    // A second release of the same id.
    let err = pa.release(&id).unwrap_err();
    assert!(err.is_invalid_argument(), "{err:?}");
    assert_eq!(invalid_argument(&err), "permit id");
    assert!(err.to_string().contains(id.as_str()), "{err}");
    assert!(!pa.try_release(&id).unwrap());
    assert_eq!(pb.available_permits().unwrap(), 2, "a double release added");

    // An id is not tied to its client or thread: another client releases
    // it, rebuilt from its string.
    let id = pa.acquire_id(LONG_LEASE).unwrap();
    let copy = PermitId::from(id.as_str().to_owned());
    assert_eq!(copy, id);
    thread::spawn(move || pb.release(&copy))
        .join()
        .unwrap()
        .unwrap();
    let pb = b.permit_expirable_semaphore(name.as_str());
    assert_eq!(pb.available_permits().unwrap(), 2);

    // Unknown ids.
    for unknown in ["0123456789abcdef0123456789abcdef", "", "not-an-id"] {
        let unknown = PermitId::from(unknown.to_owned());
        assert!(!pa.try_release(&unknown).unwrap(), "{unknown}");
        let err = pa.release(&unknown).unwrap_err();
        assert_eq!(invalid_argument(&err), "permit id", "{err}");
    }
    assert_eq!(pb.available_permits().unwrap(), 2);

    // An expired id: reclaimed, not released (no double count).
    let short = pa.acquire_id(Duration::from_millis(300)).unwrap();
    let live = pa.acquire_id(LONG_LEASE).unwrap();
    assert_eq!(pb.available_permits().unwrap(), 0);
    thread::sleep(Duration::from_millis(600));
    assert!(
        !pa.try_release(&short).unwrap(),
        "released an expired permit"
    );
    assert!(pa.release(&short).unwrap_err().is_invalid_argument());
    assert_eq!(pb.available_permits().unwrap(), 1);
    // The live one still releases after the expired one was reclaimed.
    assert!(pb.try_release(&live).unwrap());
    assert_eq!(pb.available_permits().unwrap(), 2);
}

fn release_wakes_a_waiter_for_a_leased_permit(env: &Env) {
    let a = env.client();
    let b = env.client();
    let mut latencies = Vec::new();
    for _ in 0..3 {
        let name = unique_name("pes:wake");
        let pa = a.permit_expirable_semaphore(name.as_str());
        pa.try_set_permits(1).unwrap();
        let id = pa.acquire_id(LONG_LEASE).unwrap();
        // A bounded wait behind a long lease times out about on time.
        let pb = b.permit_expirable_semaphore(name.as_str());
        let wait = Duration::from_millis(200);
        let started = Instant::now();
        assert!(pb.try_acquire_id_for(wait, LONG_LEASE).unwrap().is_none());
        let elapsed = started.elapsed();
        assert!(
            elapsed >= wait && elapsed < wait + PROMPT,
            "try_acquire_for({wait:?}) behind a {LONG_LEASE:?} lease returned after {elapsed:?}"
        );
        let (tx, rx) = mpsc::channel();
        let waiter = thread::spawn(move || {
            let got = pb.acquire_id(LONG_LEASE).expect("acquire(lease)");
            let _ = tx.send(Instant::now());
            got
        });
        thread::sleep(SETTLE);
        assert!(rx.try_recv().is_err(), "the waiter got a leased permit");
        let released = Instant::now();
        pa.release(&id).unwrap();
        latencies.push(acquired_at(&rx, "expirable release").duration_since(released));
        let got = waiter.join().unwrap();
        assert_ne!(got, id);
        pa.release(&got).unwrap();
    }
    let worst = *latencies.iter().max().unwrap();
    assert!(
        worst < PROMPT,
        "a release woke the waiter after {worst:?} (all: {latencies:?})"
    );
}

fn never_over_granted_with_leases(env: &Env) {
    const PERMITS: usize = 2;
    const THREADS_PER_CLIENT: usize = 3;
    const ITERATIONS: usize = 20;
    let name = unique_name("pes:over-grant");
    let clients = [env.client(), env.client()];
    clients[0]
        .permit_expirable_semaphore(name.as_str())
        .try_set_permits(2)
        .unwrap();
    let live = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(clients.len() * THREADS_PER_CLIENT));
    let mut threads = Vec::new();
    for client in &clients {
        for _ in 0..THREADS_PER_CLIENT {
            let semaphore = client.permit_expirable_semaphore(name.as_str());
            let (live, max, start) = (live.clone(), max.clone(), start.clone());
            threads.push(thread::spawn(move || {
                start.wait();
                for _ in 0..ITERATIONS {
                    let id = semaphore.acquire_id(LONG_LEASE).expect("acquire(lease)");
                    let now = live.fetch_add(1, Ordering::SeqCst) + 1;
                    raise(&max, now);
                    assert!(now <= PERMITS, "{now} holders of {PERMITS} permits");
                    thread::sleep(Duration::from_millis(1));
                    live.fetch_sub(1, Ordering::SeqCst);
                    semaphore.release(&id).expect("release(id)");
                }
            }));
        }
    }
    for thread in threads {
        thread.join().expect("worker panicked");
    }
    let max = max.load(Ordering::SeqCst);
    assert!(max <= PERMITS, "{max} holders of {PERMITS} permits");
    assert!(max >= 2, "never more than {max} holder at once");
    let semaphore = clients[1].permit_expirable_semaphore(name.as_str());
    assert_eq!(semaphore.available_permits().unwrap(), 2);
    if let Some(mut conn) = env.redis_connection() {
        let leases: i64 = ::redis::cmd("ZCARD")
            .arg(keys::permit_timeouts(&name))
            .query(&mut conn)
            .unwrap();
        assert_eq!(leases, 0, "released leases left in the zset");
    }
}

fn expirable_bad_input_is_a_clear_error(env: &Env) {
    let client = env.client();
    let empty = client.permit_expirable_semaphore("");
    let some_id = PermitId::from("0123456789abcdef0123456789abcdef".to_owned());
    let errors = [
        empty.try_set_permits(1).map(drop).unwrap_err(),
        empty.add_permits(1).map(drop).unwrap_err(),
        empty.available_permits().map(drop).unwrap_err(),
        empty.acquire_id(LONG_LEASE).map(drop).unwrap_err(),
        empty.try_acquire_id(LONG_LEASE).map(drop).unwrap_err(),
        empty
            .try_acquire_id_for(Duration::from_millis(10), LONG_LEASE)
            .map(drop)
            .unwrap_err(),
        empty.try_release(&some_id).map(drop).unwrap_err(),
        empty.release(&some_id).map(drop).unwrap_err(),
    ];
    for err in &errors {
        assert_eq!(invalid_argument(err), "name", "{err}");
    }

    // Leases that are zero, below a millisecond, or do not fit the clock.
    let semaphore = client.permit_expirable_semaphore(unique_name("pes:bad-lease"));
    semaphore.try_set_permits(1).unwrap();
    for lease in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::MAX,
        Duration::from_millis(i64::MAX as u64),
    ] {
        let errors = [
            semaphore.acquire_id(lease).map(drop).unwrap_err(),
            semaphore.try_acquire_id(lease).map(drop).unwrap_err(),
            semaphore
                .try_acquire_for(Duration::from_millis(10), lease)
                .map(drop)
                .unwrap_err(),
        ];
        for err in &errors {
            assert_eq!(invalid_argument(err), "lease", "lease {lease:?}: {err}");
        }
    }
    assert_eq!(
        semaphore.available_permits().unwrap(),
        1,
        "a rejected lease took a permit"
    );

    // A key of another type: a lock's hash.
    let name = unique_name("pes:wrongtype");
    let guard = client.lock(name.as_str()).lock().unwrap();
    let semaphore = client.permit_expirable_semaphore(name.as_str());
    let errors = [
        semaphore.try_set_permits(1).map(drop).unwrap_err(),
        semaphore.add_permits(1).map(drop).unwrap_err(),
        semaphore.available_permits().map(drop).unwrap_err(),
        semaphore.acquire(LONG_LEASE).map(drop).unwrap_err(),
        semaphore.try_acquire(LONG_LEASE).map(drop).unwrap_err(),
    ];
    for err in &errors {
        assert!(
            err.is_protocol_error(),
            "expected a protocol error, got {err:?}"
        );
    }
    guard.unlock().unwrap();

    // The leases key holding another type.
    let name = unique_name("pes:wrongtype-leases");
    env.set_string(&keys::permit_timeouts(&name), "x");
    let semaphore = client.permit_expirable_semaphore(name.as_str());
    semaphore.try_set_permits(1).unwrap();
    let errors = [
        semaphore.available_permits().map(drop).unwrap_err(),
        semaphore.acquire(LONG_LEASE).map(drop).unwrap_err(),
        semaphore.try_release(&some_id).map(drop).unwrap_err(),
    ];
    for err in &errors {
        assert!(
            err.is_protocol_error(),
            "expected a protocol error, got {err:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Regression: a failed woken waiter swallowed the wake
// ---------------------------------------------------------------------------

/// A waiter for 1 permit behind a waiter for 2 in the same client: a
/// release of 1 must reach the waiter that can use it.
///
/// Regression: the message "1" woke one local waiter, the condvar picked the
/// earlier one (wants 2), its retry failed and it parked again without
/// passing the wake on, so the 1-permit waiter slept until the fallback (the watchdog timeout, 30 s by default; 5 s here) while a
/// permit is free.
fn a_small_waiter_is_not_starved_by_a_large_one(env: &Env) {
    const FALLBACK: Duration = Duration::from_secs(5);
    let a = env.client();
    let b = env.client_with_watchdog(FALLBACK);
    let name = unique_name("sem:mixed");
    a.semaphore(name.as_str()).try_set_permits(0).unwrap();
    let large = {
        let semaphore = b.semaphore(name.as_str());
        thread::spawn(move || {
            let permit = semaphore.try_acquire_for(2, STUCK).unwrap();
            permit.map(SemaphorePermit::forget)
        })
    };
    thread::sleep(SETTLE);
    let (small, small_rx) = spawn_acquirer(b.semaphore(name.as_str()));
    thread::sleep(SETTLE);
    let released = Instant::now();
    a.semaphore(name.as_str()).release(1).unwrap();
    let woke = acquired_at(&small_rx, "release(1)").duration_since(released);
    small.join().unwrap();
    a.semaphore(name.as_str()).release(2).unwrap();
    assert_eq!(large.join().unwrap(), Some(2));
    assert!(
        woke < PROMPT,
        "the 1-permit waiter got the released permit only after {woke:?} \
         (fallback {FALLBACK:?}): the wake went to the 2-permit waiter and was lost"
    );
}

#[test]
fn memory_a_small_waiter_is_not_starved_by_a_large_one() {
    a_small_waiter_is_not_starved_by_a_large_one(&Env::memory());
}

#[test]
fn redis_a_small_waiter_is_not_starved_by_a_large_one() {
    a_small_waiter_is_not_starved_by_a_large_one(&Env::redis());
}

#[cfg(feature = "cluster")]
#[test]
fn cluster_a_small_waiter_is_not_starved_by_a_large_one() {
    a_small_waiter_is_not_starved_by_a_large_one(&Env::cluster());
}

// ---------------------------------------------------------------------------
// Not per backend
// ---------------------------------------------------------------------------

fn assert_send_sync<T: Send + Sync>() {}
fn assert_send<T: Send>() {}

#[test]
fn handles_are_send_sync_and_permits_are_send() {
    assert_send_sync::<Semaphore>();
    assert_send_sync::<redisync::PermitExpirableSemaphore>();
    assert_send_sync::<PermitId>();
    assert_send::<SemaphorePermit>();
}
