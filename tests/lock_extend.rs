//! Conformance suite for [`LockGuard::extend`](redisync::LockGuard::extend):
//! a lock taken with a fixed lease gets a new lease from now, on every lock
//! kind (reentrant, fenced, fair, read, write), on both backends.
//!
//! Two `Client`s on one store stand for two processes. Leases are short
//! (hundreds of ms) and bounds generous.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::thread;
use std::time::Duration;

use std::sync::Arc;

use common::{CountingBackend, Env, backend_tests, unique_name};
use redisync::{Client, Error, Lock};

backend_tests!(
    extend_keeps_the_lock_past_its_first_lease,
    extend_can_shorten_the_lease,
    extend_after_the_lease_ran_out_is_not_held,
    extend_after_a_force_unlock_is_not_held,
    extend_refuses_bad_leases_and_watchdog_guards,
    extend_of_one_reader_keeps_only_its_share,
    extend_that_fails_trusts_the_earlier_end,
);

const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(5);

/// Every lock kind on `name`: (label, the holder's lock, a contender's lock
/// from `other` that the hold excludes).
fn kinds(holder: &Client, other: &Client, name: &str) -> Vec<(&'static str, Lock, Lock)> {
    let (r, f, fr, rw, w) = (
        format!("{name}:reentrant"),
        format!("{name}:fenced"),
        format!("{name}:fair"),
        format!("{name}:read"),
        format!("{name}:write"),
    );
    vec![
        ("reentrant", holder.lock(r.as_str()), other.lock(r.as_str())),
        (
            "fenced",
            holder.fenced_lock(f.as_str()),
            other.fenced_lock(f.as_str()),
        ),
        (
            "fair",
            holder.fair_lock(fr.as_str()),
            other.fair_lock(fr.as_str()),
        ),
        (
            "read",
            holder.read_write_lock(rw.as_str()).read_lock(),
            other.read_write_lock(rw.as_str()).write_lock(),
        ),
        (
            "write",
            holder.read_write_lock(w.as_str()).write_lock(),
            other.read_write_lock(w.as_str()).read_lock(),
        ),
    ]
}

fn invalid_argument(err: &Error) -> &'static str {
    match err {
        Error::InvalidArgument { what, .. } => what,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

fn extend_keeps_the_lock_past_its_first_lease(env: &Env) {
    let (a, b) = (env.client(), env.client());
    for (kind, lock, contender) in kinds(&a, &b, &unique_name("extend:keep")) {
        let guard = lock.lock_with_lease(SHORT).unwrap();
        guard.extend(LONG).unwrap();
        let ttl = lock
            .remaining_ttl()
            .unwrap()
            .expect("a held lock has a TTL");
        assert!(ttl > LONG - Duration::from_secs(1), "{kind}: TTL {ttl:?}");
        // Well past the first lease: still held, and the guard knows it.
        thread::sleep(SHORT * 2);
        assert!(!guard.is_lost(), "{kind}: lost after extend");
        assert!(lock.is_held_by_current_thread().unwrap(), "{kind}");
        assert!(
            contender.try_lock().unwrap().is_none(),
            "{kind}: a contender took a lock whose lease was extended"
        );
        // Extending again works, and the unlock is an ordinary one.
        guard.extend(LONG).unwrap();
        guard.unlock().unwrap();
        assert!(
            contender.try_lock().unwrap().is_some(),
            "{kind}: not free after unlock"
        );
    }
}

fn extend_can_shorten_the_lease(env: &Env) {
    let (a, b) = (env.client(), env.client());
    for (kind, lock, contender) in kinds(&a, &b, &unique_name("extend:shorten")) {
        let guard = lock.lock_with_lease(Duration::from_secs(30)).unwrap();
        guard.extend(SHORT).unwrap();
        let got = contender
            .try_lock_for(Duration::from_secs(3))
            .unwrap()
            .is_some();
        assert!(got, "{kind}: the shortened lease did not run out");
        assert!(guard.is_lost(), "{kind}: the guard outlived its new lease");
        // (Unlocking an expired fair lock is no error, as in Redisson.)
        let unlocked = guard.unlock();
        assert!(
            kind == "fair" || unlocked.as_ref().is_err_and(Error::is_not_held),
            "{kind}: unlock after the lease ran out gave {unlocked:?}"
        );
    }
}

fn extend_after_the_lease_ran_out_is_not_held(env: &Env) {
    let (a, b) = (env.client(), env.client());
    for (kind, lock, contender) in kinds(&a, &b, &unique_name("extend:expired")) {
        let guard = lock.lock_with_lease(Duration::from_millis(100)).unwrap();
        thread::sleep(Duration::from_millis(400));
        let err = guard.extend(LONG).unwrap_err();
        assert!(err.is_not_held(), "{kind}: {err:?}");
        assert!(guard.is_lost(), "{kind}");
        // Nothing was revived: the lock is free for others.
        assert!(!lock.is_held_by_current_thread().unwrap(), "{kind}");
        assert!(contender.try_lock().unwrap().is_some(), "{kind}");
        drop(guard);
    }
}

fn extend_after_a_force_unlock_is_not_held(env: &Env) {
    let (a, b) = (env.client(), env.client());
    for (kind, lock, contender) in kinds(&a, &b, &unique_name("extend:forced")) {
        let guard = lock.lock_with_lease(LONG).unwrap();
        assert!(lock.force_unlock().unwrap(), "{kind}");
        let err = guard.extend(LONG).unwrap_err();
        assert!(err.is_not_held(), "{kind}: {err:?}");
        assert!(err.to_string().contains(lock.name()), "{kind}: {err}");
        assert!(guard.is_lost(), "{kind}");
        let taken = contender.try_lock().unwrap();
        assert!(taken.is_some(), "{kind}: extend revived a freed lock");
    }
}

fn extend_refuses_bad_leases_and_watchdog_guards(env: &Env) {
    let (a, b) = (env.client(), env.client());
    for (kind, lock, _) in kinds(&a, &b, &unique_name("extend:bad")) {
        let guard = lock.lock_with_lease(LONG).unwrap();
        let before = lock.remaining_ttl().unwrap().unwrap();
        for lease in [
            Duration::ZERO,
            Duration::from_micros(999),
            redisync::MAX_LEASE + Duration::from_millis(1),
            Duration::MAX,
        ] {
            let err = guard.extend(lease).unwrap_err();
            assert_eq!(invalid_argument(&err), "lease", "{kind} {lease:?}: {err}");
        }
        assert_eq!(
            guard.extend(Duration::ZERO).unwrap_err().to_string(),
            "invalid lease: must be at least 1ms, got 0ns"
        );
        let after = lock.remaining_ttl().unwrap().unwrap();
        assert!(after <= before, "{kind}: a refused extend changed the TTL");
        assert!(!guard.is_lost(), "{kind}");
        guard.unlock().unwrap();

        // The watchdog's guard: refused, and the watchdog goes on.
        let watched = lock.lock().unwrap();
        let err = watched.extend(LONG).unwrap_err();
        assert_eq!(invalid_argument(&err), "lease", "{kind}: {err}");
        assert!(err.to_string().contains("watchdog"), "{kind}: {err}");
        assert!(!watched.is_lost(), "{kind}");
        assert!(lock.is_held_by_current_thread().unwrap(), "{kind}");
        watched.unlock().unwrap();
    }
}

/// A reader's extend lengthens its own read holds only: another reader's
/// share still runs out on time, and the writer waits for the extended one.
fn extend_of_one_reader_keeps_only_its_share(env: &Env) {
    let (a, b, c) = (env.client(), env.client(), env.client());
    let name = unique_name("extend:readers");
    let reader_a = a.read_write_lock(name.as_str()).read_lock();
    let reader_b = b.read_write_lock(name.as_str()).read_lock();
    let writer = c.read_write_lock(name.as_str()).write_lock();
    let held_a = reader_a.lock_with_lease(SHORT).unwrap();
    let held_b = reader_b.lock_with_lease(SHORT).unwrap();
    held_a.extend(Duration::from_millis(1500)).unwrap();
    thread::sleep(SHORT * 2);
    assert!(held_b.is_lost());
    assert!(held_b.extend(LONG).unwrap_err().is_not_held());
    assert!(!held_a.is_lost());
    assert!(
        writer.try_lock().unwrap().is_none(),
        "reader a's share ran out"
    );
    let waited = writer.try_lock_for(Duration::from_secs(4)).unwrap();
    assert!(waited.is_some(), "the extended read lease never ran out");
    drop(held_b);
    assert!(held_a.unlock().unwrap_err().is_not_held());
}

/// An extend whose reply never came may or may not have run: the guard
/// trusts its hold only until the earlier of the old and the new end.
fn extend_that_fails_trusts_the_earlier_end(env: &Env) {
    let a = env.client();
    let counting = CountingBackend::new(Arc::clone(a.backend()));
    let client = env
        .builder()
        .shared_backend(Arc::new(counting.clone()))
        .build()
        .unwrap();
    let lock = client.lock(unique_name("extend:down").as_str());
    let guard = lock.lock_with_lease(LONG).unwrap();
    counting.set_down(true);
    let err = guard.extend(Duration::from_millis(100)).unwrap_err();
    assert!(err.is_connection_error(), "{err:?}");
    thread::sleep(Duration::from_millis(300));
    assert!(
        guard.is_lost(),
        "trusted past the shorter end it may have set"
    );
    counting.set_down(false);
    // It had not run: the hold is still there, and a new extend says so.
    guard.extend(LONG).unwrap();
    assert!(!guard.is_lost());
    guard.unlock().unwrap();

    // A failed lengthening keeps the old end.
    let guard = lock.lock_with_lease(Duration::from_millis(200)).unwrap();
    counting.set_down(true);
    assert!(guard.extend(LONG).unwrap_err().is_connection_error());
    counting.set_down(false);
    thread::sleep(Duration::from_millis(400));
    assert!(guard.is_lost(), "trusted past its old end");
    drop(guard);
}
