//! Conformance suite for [`CountDownLatch`]: every behaviour is written
//! once, as a function of an [`Env`], and run on both backends by
//! `backend_tests!` (a `memory` and a `redis` module with one `#[test]` per
//! behaviour).
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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::timing::{PROMPT, SETTLE, STUCK};
use common::{CountingBackend, Env, backend_tests, unique_name};
use redisync::{Client, CountDownLatch, Error};

backend_tests!(
    latch_releases_every_waiter_across_two_clients_at_zero,
    waiters_park_until_zero_instead_of_polling,
    killed_pubsub_connection_does_not_strand_waiters,
    wait_for_times_out_while_closed,
    try_set_count_only_once_and_after_delete,
    count_down_below_zero_is_harmless,
    unset_latch_is_open,
    bad_input,
);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A thread blocked in `wait()`; it reports the instant `wait` returned and
/// what it saw then: the flag the counting thread sets just before the last
/// `count_down`, and the count.
struct Waiter {
    returned: mpsc::Receiver<(Instant, bool, i64)>,
    done: Arc<AtomicBool>,
    handle: thread::JoinHandle<()>,
}

impl Waiter {
    fn spawn(latch: CountDownLatch, opening: Arc<AtomicBool>) -> Waiter {
        let (tx, returned) = mpsc::channel();
        let done = Arc::new(AtomicBool::new(false));
        let done_in_thread = Arc::clone(&done);
        let handle = thread::spawn(move || {
            latch.wait().expect("waiter: wait()");
            let at = Instant::now();
            done_in_thread.store(true, Ordering::SeqCst);
            let flag = opening.load(Ordering::SeqCst);
            let count = latch.count().expect("waiter: count()");
            let _ = tx.send((at, flag, count));
        });
        Waiter {
            returned,
            done,
            handle,
        }
    }

    fn has_returned(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    fn returned(&self, what: &str) -> (Instant, bool, i64) {
        self.returned
            .recv_timeout(STUCK)
            .unwrap_or_else(|e| panic!("{what}: a waiter did not return within {STUCK:?} ({e})"))
    }
}

/// The argument an `InvalidArgument` error names; panics on other errors.
fn invalid_argument(err: &Error) -> &'static str {
    match err {
        Error::InvalidArgument { what, .. } => what,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

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

// ---------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------

fn latch_releases_every_waiter_across_two_clients_at_zero(env: &Env) {
    const WAITERS_PER_CLIENT: usize = 2;
    let a = env.client();
    let b = env.client();
    let counter = env.client();
    // Counted down from a third client, then from one of the waiters'.
    for (who, counting_client) in [("a third client", &counter), ("a waiter's client", &a)] {
        let name = unique_name("latch:all");
        assert!(a.count_down_latch(name.as_str()).try_set_count(3).unwrap());
        let opening = Arc::new(AtomicBool::new(false));
        let waiters: Vec<Waiter> = [&a, &b]
            .iter()
            .flat_map(|client| (0..WAITERS_PER_CLIENT).map(move |_| *client))
            .map(|client| Waiter::spawn(client.count_down_latch(name.as_str()), opening.clone()))
            .collect();
        let latch = counting_client.count_down_latch(name.as_str());
        let opened = {
            let opening = opening.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(200));
                latch.count_down().unwrap();
                thread::sleep(Duration::from_millis(100));
                latch.count_down().unwrap();
                assert_eq!(latch.count().unwrap(), 1);
                thread::sleep(Duration::from_millis(200));
                opening.store(true, Ordering::SeqCst);
                let opened = Instant::now();
                latch.count_down().unwrap();
                opened
            })
        };
        // Not before the last count_down.
        thread::sleep(Duration::from_millis(400));
        for waiter in &waiters {
            assert!(
                !waiter.has_returned() || opening.load(Ordering::SeqCst),
                "{who}: a waiter returned from a closed latch"
            );
        }
        let opened = opened.join().unwrap();
        for waiter in waiters {
            let (at, flag, count) = waiter.returned(who);
            assert!(flag, "{who}: a waiter returned before the last count_down");
            assert_eq!(count, 0, "{who}: a waiter returned at count {count}");
            let after = at.saturating_duration_since(opened);
            assert!(
                after < PROMPT,
                "{who}: a waiter returned {after:?} after the last count_down"
            );
            waiter.handle.join().unwrap();
        }
    }
}

/// A waiter parks until the zero message: count-downs that leave the count
/// positive, and a delete and a new count ("1" messages), do not make it
/// poll or retry much.
fn waiters_park_until_zero_instead_of_polling(env: &Env) {
    const MAX_ATTEMPTS: u64 = 6;
    let a = env.client();
    let (b, counting) = counting_client(env, &a);
    let name = unique_name("latch:no-poll");
    let la = a.count_down_latch(name.as_str());
    la.try_set_count(5).unwrap();
    let opening = Arc::new(AtomicBool::new(false));
    let before = counting.calls("counter_get");
    let waiter = Waiter::spawn(b.count_down_latch(name.as_str()), opening.clone());
    thread::sleep(SETTLE);
    for _ in 0..3 {
        la.count_down().unwrap();
        thread::sleep(Duration::from_millis(100));
    }
    // A delete does not open the latch for those already waiting.
    assert!(la.delete().unwrap());
    thread::sleep(Duration::from_millis(300));
    assert!(!waiter.has_returned(), "a delete released a waiter");
    assert!(la.try_set_count(2).unwrap());
    thread::sleep(Duration::from_millis(600));
    assert!(
        !waiter.has_returned(),
        "the waiter returned from a closed latch"
    );
    // The waiter's own count() after returning is one more call.
    let attempts = counting.calls("counter_get") - before;
    eprintln!("latch waiter: {attempts} count reads over 1.8 s");
    assert!(
        attempts <= MAX_ATTEMPTS,
        "a waiter on a closed latch read the count {attempts} times in 1.8 s: it polls"
    );
    la.count_down().unwrap();
    opening.store(true, Ordering::SeqCst);
    let opened = Instant::now();
    la.count_down().unwrap();
    let (at, flag, count) = waiter.returned("count_down to zero");
    assert!(flag && count == 0);
    let after = at.saturating_duration_since(opened);
    assert!(after < PROMPT, "the waiter returned {after:?} after zero");
    waiter.handle.join().unwrap();
}

fn killed_pubsub_connection_does_not_strand_waiters(env: &Env) {
    const BOUND: Duration = Duration::from_secs(2);
    let a = env.client();
    let b = env.client();
    // Opened after the subscriber had time to reconnect, then right after
    // the kill, while it is reconnecting.
    for pause in [Duration::from_millis(300), Duration::ZERO] {
        let name = unique_name("latch:killed-pubsub");
        let latch = a.count_down_latch(name.as_str());
        latch.try_set_count(1).unwrap();
        let opening = Arc::new(AtomicBool::new(false));
        let waiter = Waiter::spawn(b.count_down_latch(name.as_str()), opening.clone());
        thread::sleep(SETTLE);
        env.kill_pubsub();
        thread::sleep(pause);
        assert!(
            !waiter.has_returned(),
            "the waiter returned from a closed latch"
        );
        opening.store(true, Ordering::SeqCst);
        let opened = Instant::now();
        latch.count_down().unwrap();
        let (at, flag, count) = waiter.returned("count_down after a pub/sub kill");
        assert!(flag && count == 0);
        let after = at.saturating_duration_since(opened);
        assert!(
            after < BOUND,
            "after a pub/sub kill (then {pause:?}), the waiter returned {after:?} after zero"
        );
        waiter.handle.join().unwrap();
    }
}

fn wait_for_times_out_while_closed(env: &Env) {
    let a = env.client();
    let b = env.client();
    let name = unique_name("latch:wait-for");
    let la = a.count_down_latch(name.as_str());
    let lb = b.count_down_latch(name.as_str());
    la.try_set_count(2).unwrap();
    for wait in [Duration::from_millis(100), Duration::from_millis(400)] {
        let started = Instant::now();
        let open = lb.wait_for(wait).unwrap();
        let elapsed = started.elapsed();
        assert!(!open, "wait_for saw a closed latch open");
        assert!(
            elapsed >= wait,
            "wait_for({wait:?}) gave up after {elapsed:?}"
        );
        assert!(
            elapsed < wait + PROMPT,
            "wait_for({wait:?}) returned after {elapsed:?}"
        );
    }
    // A count-down that leaves it positive does not open it.
    la.count_down().unwrap();
    let started = Instant::now();
    assert!(!lb.wait_for(Duration::from_millis(200)).unwrap());
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(lb.count().unwrap(), 1);

    // Opened during the wait: it returns true early.
    let opener = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        la.count_down().unwrap();
    });
    let started = Instant::now();
    let open = lb.wait_for(Duration::from_secs(5)).unwrap();
    let elapsed = started.elapsed();
    opener.join().unwrap();
    assert!(open, "wait_for missed the latch opening");
    assert!(
        elapsed < Duration::from_millis(200) + PROMPT,
        "wait_for returned {elapsed:?} after it started (opened at 200 ms)"
    );
    // Open: at once, also with an unbounded wait.
    let started = Instant::now();
    assert!(lb.wait_for(Duration::from_millis(500)).unwrap());
    assert!(lb.wait_for(Duration::MAX).unwrap());
    assert!(started.elapsed() < PROMPT);
}

fn try_set_count_only_once_and_after_delete(env: &Env) {
    let a = env.client();
    let b = env.client();
    let name = unique_name("latch:set");
    let la = a.count_down_latch(name.as_str());
    let lb = b.count_down_latch(name.as_str());
    assert_eq!(la.name(), name);
    assert!(la.try_set_count(3).unwrap());
    assert!(!la.try_set_count(2).unwrap(), "set twice");
    assert!(!lb.try_set_count(5).unwrap(), "set again by another client");
    assert_eq!(lb.count().unwrap(), 3);
    lb.count_down().unwrap();
    assert!(
        !lb.try_set_count(5).unwrap(),
        "set again after a count_down"
    );
    assert_eq!(la.count().unwrap(), 2);

    // Deleted: unset (open), and settable again.
    assert!(lb.delete().unwrap());
    assert_eq!(la.count().unwrap(), 0);
    assert!(la.wait_for(Duration::from_millis(10)).unwrap());
    assert!(!la.delete().unwrap(), "deleted twice");
    assert!(lb.try_set_count(2).unwrap());
    assert_eq!(la.count().unwrap(), 2);

    // Opened by counting down: settable again.
    la.count_down().unwrap();
    lb.count_down().unwrap();
    assert_eq!(la.count().unwrap(), 0);
    assert!(!la.delete().unwrap(), "an opened latch still existed");
    assert!(la.try_set_count(1).unwrap());
    assert!(!la.wait_for(Duration::from_millis(10)).unwrap());
    assert_eq!(lb.count().unwrap(), 1);

    // The largest count.
    let max = a.count_down_latch(unique_name("latch:max"));
    assert!(max.try_set_count(1 << 53).unwrap());
    assert_eq!(max.count().unwrap(), 1 << 53);
    assert!(!max.wait_for(Duration::from_millis(10)).unwrap());
    assert!(max.delete().unwrap());
    // i64::MAX is accepted. (It is not read back: Redis' Lua reads counts
    // as doubles, exact only up to 2^53.)
    assert!(max.try_set_count(i64::MAX as u64).unwrap());
}

fn count_down_below_zero_is_harmless(env: &Env) {
    let a = env.client();
    let b = env.client();
    let name = unique_name("latch:below-zero");
    let la = a.count_down_latch(name.as_str());
    let lb = b.count_down_latch(name.as_str());
    la.try_set_count(1).unwrap();
    la.count_down().unwrap();
    for _ in 0..3 {
        lb.count_down().unwrap();
        assert_eq!(la.count().unwrap(), 0);
    }
    assert!(lb.wait_for(PROMPT).unwrap());
    // Still unset: it can be set again, and nothing was left behind.
    assert!(!la.delete().unwrap(), "count_down below zero left a key");
    assert!(la.try_set_count(2).unwrap());
    assert_eq!(lb.count().unwrap(), 2);

    // Counting down a latch never set is harmless too.
    let unset = b.count_down_latch(unique_name("latch:never-set"));
    unset.count_down().unwrap();
    unset.count_down().unwrap();
    assert_eq!(unset.count().unwrap(), 0);
    assert!(!unset.delete().unwrap(), "count_down created the latch");
    assert!(unset.try_set_count(1).unwrap());
    assert_eq!(unset.count().unwrap(), 1);
}

fn unset_latch_is_open(env: &Env) {
    let a = env.client();
    let latch = a.count_down_latch(unique_name("latch:unset"));
    assert_eq!(latch.count().unwrap(), 0);
    let started = Instant::now();
    latch.wait().unwrap();
    assert!(latch.wait_for(Duration::from_millis(500)).unwrap());
    assert!(latch.wait_for(Duration::ZERO).unwrap());
    let elapsed = started.elapsed();
    assert!(
        elapsed < PROMPT,
        "waiting on an unset latch took {elapsed:?}"
    );
    // From another thread of another client, too.
    let other = env.client().count_down_latch(latch.name());
    thread::spawn(move || other.wait()).join().unwrap().unwrap();
    assert!(format!("{latch:?}").contains(latch.name()));
}

fn bad_input(env: &Env) {
    let client = env.client();

    // Empty name: named, on every operation.
    let empty = client.count_down_latch("");
    let errors = [
        empty.try_set_count(1).map(drop).unwrap_err(),
        empty.count_down().map(drop).unwrap_err(),
        empty.count().map(drop).unwrap_err(),
        empty.wait().map(drop).unwrap_err(),
        empty
            .wait_for(Duration::from_millis(10))
            .map(drop)
            .unwrap_err(),
        empty.delete().map(drop).unwrap_err(),
    ];
    for err in &errors {
        assert_eq!(invalid_argument(err), "name", "{err}");
        assert!(err.to_string().contains("name"), "{err}");
    }

    // A count of zero (it would be open already) or beyond i64.
    let latch = client.count_down_latch(unique_name("latch:bad-count"));
    for count in [0, i64::MAX as u64 + 1, u64::MAX] {
        let err = latch.try_set_count(count).unwrap_err();
        assert_eq!(invalid_argument(&err), "count", "{count}: {err}");
        assert!(err.to_string().contains("count"), "{err}");
    }
    assert!(latch.try_set_count(1).unwrap(), "a rejected count set it");

    // A key of another type (a lock's hash): a protocol error, no panic,
    // and the lock is left alone.
    let name = unique_name("latch:wrongtype");
    let lock = client.lock(name.as_str());
    let guard = lock.lock().unwrap();
    let latch = client.count_down_latch(name.as_str());
    let errors = [
        latch.try_set_count(1).map(drop).unwrap_err(),
        latch.count_down().map(drop).unwrap_err(),
        latch.count().map(drop).unwrap_err(),
        latch.wait().map(drop).unwrap_err(),
        latch
            .wait_for(Duration::from_millis(50))
            .map(drop)
            .unwrap_err(),
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

    // A string that is not a number: an error (not a connection failure).
    let name = unique_name("latch:not-a-number");
    env.set_string(&name, "many");
    let latch = client.count_down_latch(name.as_str());
    for err in [
        latch.count_down().map(drop).unwrap_err(),
        latch.count().map(drop).unwrap_err(),
        latch
            .wait_for(Duration::from_millis(50))
            .map(drop)
            .unwrap_err(),
    ] {
        assert!(!err.is_connection_error(), "{err:?}");
        assert!(!err.is_invalid_argument(), "{err:?}");
    }
    assert!(!latch.try_set_count(1).unwrap(), "the key is set");
}

// ---------------------------------------------------------------------------
// Not per backend
// ---------------------------------------------------------------------------

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn the_handle_is_send_sync() {
    assert_send_sync::<CountDownLatch>();
}
