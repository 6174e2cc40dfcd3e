//! Object lifecycle: `delete()` on every primitive handle (what it removes,
//! whom it wakes, what it keeps), and a multi-lock's `is_locked()` /
//! `force_unlock()`. Every case runs on both backends (and a cluster under
//! the `cluster` feature) through `backend_tests!`.
//!
//! Timings: waiters that a delete must wake are given a wait far longer
//! than the bound the test asserts, so a waiter that was not woken (and
//! only retried when its wait or its holder's lease ran out) fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::keys;
use common::timing::SETTLE;
use common::{CountingBackend, Env, backend_tests, unique_name};
use redisync::{Client, MultiLock, RedLock};

/// Upper bound for a woken waiter to get in (it would otherwise wait
/// [`LONG_WAIT`] or a 30 s watchdog lease).
const WOKEN: Duration = Duration::from_secs(5);
/// A waiter's wait: far past [`WOKEN`].
const LONG_WAIT: Duration = Duration::from_secs(25);

backend_tests!(
    lock_delete_wakes_a_waiter_at_once,
    fenced_lock_delete_keeps_the_token_counter,
    fair_lock_delete_drops_the_queue_and_wakes_every_waiter,
    read_write_lock_delete_removes_every_hold_whatever_the_mode,
    read_half_delete_is_its_force_unlock,
    semaphore_delete_lets_the_count_be_set_again,
    expirable_semaphore_delete_drops_count_and_leases,
    multi_lock_is_locked_when_every_part_is,
    red_lock_is_locked_when_a_majority_is,
    red_lock_is_locked_outvotes_a_failed_part_only_when_it_can,
    multi_lock_force_unlock_releases_every_part_and_wakes_waiters,
    multi_lock_force_unlock_tries_every_part_and_names_the_failed_one,
);

/// Runs `take` on a new thread and reports (how long it took, its result)
/// on the returned channel once it returns.
fn waiter<T: Send + 'static>(
    take: impl FnOnce() -> T + Send + 'static,
) -> mpsc::Receiver<(Duration, T)> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let start = Instant::now();
        let outcome = take();
        let _ = tx.send((start.elapsed(), outcome));
    });
    rx
}

/// The value of a counter-like string key (0 when absent), through the
/// public ops API, so it works on every store.
fn counter(client: &Client, key: &str) -> i64 {
    redisync::internal::counter::get(&**client.backend(), key).unwrap()
}

fn lock_delete_wakes_a_waiter_at_once(env: &Env) {
    let name = unique_name("life:lock");
    let (a, b) = (env.client(), env.client());
    let lock = a.lock(&name);
    let guard = lock.lock().unwrap(); // 30 s watchdog lease
    let other = b.lock(&name);
    let got = waiter(move || {
        other
            .try_lock_for(LONG_WAIT)
            .unwrap()
            .map(|g| g.unlock().unwrap())
            .is_some()
    });
    thread::sleep(SETTLE);
    assert!(lock.delete().unwrap(), "the lock existed");
    let (took, acquired) = got.recv_timeout(LONG_WAIT).unwrap();
    assert!(acquired, "the waiter must get the deleted lock");
    assert!(
        took < WOKEN + SETTLE,
        "woken by the delete, not by a timeout: {took:?}"
    );
    assert!(guard.unlock().unwrap_err().is_not_held());
    assert!(!lock.delete().unwrap(), "nothing left to delete");
}

fn fenced_lock_delete_keeps_the_token_counter(env: &Env) {
    let name = unique_name("life:fenced");
    let client = env.client();
    let lock = client.fenced_lock(&name);
    let first = lock.lock().unwrap();
    let token = first.token().unwrap();
    assert!(lock.delete().unwrap());
    assert!(!lock.is_locked().unwrap());
    assert!(first.unlock().unwrap_err().is_not_held());
    let counter_key = keys::fence_counter(&name);
    assert_eq!(
        u64::try_from(counter(&client, &counter_key)).unwrap(),
        token,
        "the token counter must survive the delete"
    );
    let second = lock.lock().unwrap();
    assert!(second.token().unwrap() > token);
    second.unlock().unwrap();
}

fn fair_lock_delete_drops_the_queue_and_wakes_every_waiter(env: &Env) {
    let name = unique_name("life:fair");
    let holder = env.client();
    let lock = holder.fair_lock(&name);
    let guard = lock.lock().unwrap();
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let other = env.client().fair_lock(&name);
            let rx = waiter(move || {
                other
                    .try_lock_for(LONG_WAIT)
                    .unwrap()
                    .map(|g| g.unlock().unwrap())
                    .is_some()
            });
            thread::sleep(SETTLE);
            rx
        })
        .collect();
    let queued = holder.inspect(&name).unwrap();
    assert_eq!(queued.queue.len(), 2, "both waiters queued: {queued}");
    assert!(lock.delete().unwrap());
    for rx in waiters {
        let (took, acquired) = rx.recv_timeout(LONG_WAIT).unwrap();
        assert!(acquired, "every queued waiter gets the lock in turn");
        assert!(took < WOKEN + 2 * SETTLE, "woken by the delete: {took:?}");
    }
    // A fair lock's unlock of a hold that is gone is quiet (as Redisson's).
    drop(guard);
    let after = holder.inspect(&name).unwrap();
    assert!(after.queue.is_empty() && !after.is_held(), "{after}");
    assert!(!lock.delete().unwrap(), "nothing left to delete");
}

fn read_write_lock_delete_removes_every_hold_whatever_the_mode(env: &Env) {
    let name = unique_name("life:rw");
    let (a, b) = (env.client(), env.client());
    let rw = a.read_write_lock(&name);
    let reading = rw.read_lock().lock().unwrap();
    let reentered = rw.read_lock().lock().unwrap();
    let hold_keys: Vec<String> = (1..=2)
        .map(|n| format!("{{{name}}}:{}:rwlock_timeout:{n}", a.current_holder_id()))
        .collect();
    for key in &hold_keys {
        assert_eq!(counter(&a, key), 1, "read hold key {key} exists");
    }
    let writer = b.read_write_lock(&name).write_lock();
    let got = waiter(move || {
        writer
            .try_lock_for(LONG_WAIT)
            .unwrap()
            .map(|g| g.unlock().unwrap())
            .is_some()
    });
    thread::sleep(SETTLE);
    assert!(rw.delete().unwrap(), "the lock existed");
    for key in &hold_keys {
        assert_eq!(counter(&a, key), 0, "read hold key {key} deleted");
    }
    let (took, acquired) = got.recv_timeout(LONG_WAIT).unwrap();
    assert!(acquired);
    assert!(took < WOKEN + SETTLE, "woken by the delete: {took:?}");
    assert!(reentered.unlock().unwrap_err().is_not_held());
    drop(reading);
    // In write mode too.
    let writing = rw.write_lock().lock().unwrap();
    assert!(rw.delete().unwrap());
    assert!(!rw.write_lock().is_locked().unwrap());
    assert!(writing.unlock().unwrap_err().is_not_held());
    assert!(!rw.delete().unwrap());
}

fn read_half_delete_is_its_force_unlock(env: &Env) {
    let name = unique_name("life:rw-half");
    let client = env.client();
    let rw = client.read_write_lock(&name);
    let writing = rw.write_lock().lock().unwrap();
    // As Redisson's RReadLock.delete(): only in read mode.
    assert!(!rw.read_lock().delete().unwrap());
    assert!(rw.write_lock().is_locked().unwrap());
    assert!(rw.write_lock().delete().unwrap());
    assert!(!rw.write_lock().is_locked().unwrap());
    assert!(writing.unlock().unwrap_err().is_not_held());
}

fn semaphore_delete_lets_the_count_be_set_again(env: &Env) {
    let name = unique_name("life:sem");
    let client = env.client();
    let s = client.semaphore(&name);
    assert!(!s.delete().unwrap(), "never set");
    assert!(s.try_set_permits(3).unwrap());
    assert!(!s.try_set_permits(7).unwrap());
    assert!(s.delete().unwrap());
    assert_eq!(s.available_permits().unwrap(), 0);
    assert!(s.try_set_permits(7).unwrap());
    assert_eq!(s.available_permits().unwrap(), 7);
    assert!(s.delete().unwrap());
}

fn expirable_semaphore_delete_drops_count_and_leases(env: &Env) {
    let name = unique_name("life:pes");
    let client = env.client();
    let s = client.permit_expirable_semaphore(&name);
    assert!(!s.delete().unwrap(), "never set");
    assert!(s.try_set_permits(2).unwrap());
    let id = s.acquire_id(Duration::from_secs(30)).unwrap();
    assert_eq!(s.acquired_permits().unwrap(), 1);
    assert!(s.delete().unwrap());
    assert_eq!(s.available_permits().unwrap(), 0);
    assert_eq!(s.acquired_permits().unwrap(), 0, "the leases went too");
    assert!(
        !s.try_release(&id).unwrap(),
        "a permit of the deleted semaphore"
    );
    assert_eq!(
        client.inspect(&name).unwrap().kind,
        redisync::ObjectKind::Absent
    );
    assert!(s.try_set_permits(4).unwrap(), "set again after delete");
    assert_eq!(s.available_permits().unwrap(), 4);
    assert!(s.delete().unwrap());
}

fn multi_lock_is_locked_when_every_part_is(env: &Env) {
    let (a, b) = (unique_name("life:ml-a"), unique_name("life:ml-b"));
    let client = env.client();
    let multi = MultiLock::new([client.lock(&a), client.lock(&b)]).unwrap();
    assert!(!multi.is_locked().unwrap());
    let other = env.client();
    let one = other.lock(&a).lock().unwrap();
    assert!(
        !multi.is_locked().unwrap(),
        "one part of two: not held as a whole"
    );
    let two = other.lock(&b).lock().unwrap();
    assert!(multi.is_locked().unwrap());
    drop((one, two));
    let guard = multi.lock().unwrap();
    assert!(multi.is_locked().unwrap());
    guard.unlock().unwrap();
    assert!(!multi.is_locked().unwrap());
}

/// Three clients on the test store, one part each (distinct names stand
/// for independent masters).
fn red_lock(env: &Env, clients: &[Client], name: &str) -> RedLock {
    let _ = env;
    RedLock::new(
        clients
            .iter()
            .enumerate()
            .map(|(i, c)| c.lock(format!("{name}:{i}"))),
    )
    .unwrap()
}

fn red_lock_is_locked_when_a_majority_is(env: &Env) {
    let name = unique_name("life:rl");
    let clients: Vec<Client> = (0..3).map(|_| env.client()).collect();
    let redlock = red_lock(env, &clients, &name);
    let other = env.client();
    assert!(!redlock.is_locked().unwrap());
    let one = other.lock(format!("{name}:0")).lock().unwrap();
    assert!(!redlock.is_locked().unwrap(), "one of three is no majority");
    let two = other.lock(format!("{name}:2")).lock().unwrap();
    assert!(redlock.is_locked().unwrap(), "two of three are");
    drop((one, two));
    assert!(!redlock.is_locked().unwrap());
}

fn red_lock_is_locked_outvotes_a_failed_part_only_when_it_can(env: &Env) {
    let name = unique_name("life:rl-down");
    let up = env.client();
    let counting = CountingBackend::new(Arc::clone(up.backend()));
    let down = env
        .builder()
        .shared_backend(Arc::new(counting.clone()))
        .build()
        .unwrap();
    let clients = vec![up, env.client(), down];
    let redlock = red_lock(env, &clients, &name);
    counting.set_down(true);
    // Nothing locked, one part unreachable: 0 + 1 < 2, so surely not locked.
    assert!(!redlock.is_locked().unwrap());
    let other = env.client();
    let one = other.lock(format!("{name}:0")).lock().unwrap();
    // One locked, one unknown: the unknown one decides; an error names it.
    let err = redlock.is_locked().unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    assert!(err.to_string().contains("part 2"), "{err}");
    let two = other.lock(format!("{name}:1")).lock().unwrap();
    assert!(
        redlock.is_locked().unwrap(),
        "a majority is locked whatever part 2 says"
    );
    counting.set_down(false);
    drop((one, two));
}

fn multi_lock_force_unlock_releases_every_part_and_wakes_waiters(env: &Env) {
    let (a, b) = (unique_name("life:mlf-a"), unique_name("life:mlf-b"));
    let holder = env.client();
    let multi = MultiLock::new([holder.lock(&a), holder.lock(&b)]).unwrap();
    assert!(!multi.force_unlock().unwrap(), "nothing held");
    let guard = multi.lock().unwrap(); // 30 s watchdog leases
    let waiting = env.client().lock(&b);
    let got = waiter(move || {
        waiting
            .try_lock_for(LONG_WAIT)
            .unwrap()
            .map(|g| g.unlock().unwrap())
            .is_some()
    });
    thread::sleep(SETTLE);
    assert!(multi.force_unlock().unwrap(), "both parts were held");
    let (took, acquired) = got.recv_timeout(LONG_WAIT).unwrap();
    assert!(acquired);
    assert!(took < WOKEN + SETTLE, "woken by the force-unlock: {took:?}");
    assert!(!holder.lock(&a).is_locked().unwrap());
    assert!(guard.unlock().is_err(), "the guard's parts were taken away");
}

fn multi_lock_force_unlock_tries_every_part_and_names_the_failed_one(env: &Env) {
    let (a, c) = (unique_name("life:mlx-a"), unique_name("life:mlx-c"));
    let up = env.client();
    let counting = CountingBackend::new(Arc::clone(up.backend()));
    let flaky = env
        .builder()
        .shared_backend(Arc::new(counting.clone()))
        .build()
        .unwrap();
    let b = unique_name("life:mlx-b");
    let multi = MultiLock::new([up.lock(&a), flaky.lock(&b), up.lock(&c)]).unwrap();
    let other = env.client();
    let ga = other.lock(&a).lock().unwrap();
    let gc = other.lock(&c).lock().unwrap();
    counting.set_down(true);
    let err = multi.force_unlock().unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    let text = err.to_string();
    assert!(text.contains("part 1") && text.contains(&b), "{text}");
    // The parts after the failed one were released too.
    assert!(!up.lock(&a).is_locked().unwrap());
    assert!(!up.lock(&c).is_locked().unwrap());
    counting.set_down(false);
    assert!(ga.unlock().unwrap_err().is_not_held());
    assert!(gc.unlock().unwrap_err().is_not_held());
    // A part refused before any round trip is named the same way.
    let empty = MultiLock::new([up.lock(&a), up.lock("")]).unwrap();
    let err = empty.force_unlock().unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("part 1"),
        "{err}"
    );
}
