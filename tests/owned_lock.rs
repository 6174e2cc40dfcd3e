//! Locks held by an explicit [`LockOwner`] (Redisson's `lock(threadId)`):
//! the guard is `Send`, moves between threads and is released, extended or
//! re-entered from any of them; the owner and the threads are separate
//! holders; the watchdog and waiters' wake-ups work as for a thread's hold.
//! Written once and run on every store by `backend_tests!`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::timing::PROMPT;
use common::{Env, backend_tests, unique_name};
use redisync::{Client, Lock, LockOwner, OwnedLockGuard};

backend_tests!(
    a_guard_moves_to_another_thread_and_unlocks_there,
    reentrancy_is_per_owner_across_threads,
    an_owner_and_the_threads_exclude_each_other,
    the_watchdog_keeps_a_moved_guard_alive,
    a_waiter_wakes_when_a_moved_guard_is_dropped,
    every_lock_kind_can_be_owned,
    a_lease_is_extended_from_another_thread,
);

fn a_guard_moves_to_another_thread_and_unlocks_there(env: &Env) {
    let client = env.client();
    let name = unique_name("owned:move");
    let owner = LockOwner::new();
    let lock = client.lock(&name).owned_by(&owner);
    let guard = lock.lock().unwrap();
    assert!(lock.is_held().unwrap());
    // This thread is not the holder: the owner is.
    assert!(!client.lock(&name).is_held_by_current_thread().unwrap());
    let field = format!("{}:{}", client.id(), owner.number());
    assert_eq!(client.inspect(&name).unwrap().holders[0].id, field);
    thread::spawn(move || {
        assert_eq!(guard.owner().number(), owner.number());
        guard.unlock().unwrap();
    })
    .join()
    .unwrap();
    assert!(!lock.is_held().unwrap());
    let other = env.client();
    assert!(other.lock(&name).try_lock().unwrap().is_some(), "free");
}

fn reentrancy_is_per_owner_across_threads(env: &Env) {
    let client = env.client();
    let name = unique_name("owned:reentry");
    let lock = client.lock(&name).owned_by(&LockOwner::new());
    let outer = lock.lock().unwrap();
    let inner = {
        let lock = lock.clone();
        thread::spawn(move || lock.try_lock().unwrap().expect("the owner re-enters"))
            .join()
            .unwrap()
    };
    assert_eq!(lock.hold_count().unwrap(), 2);
    // Released from two more threads, in any order.
    thread::spawn(move || outer.unlock().unwrap())
        .join()
        .unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1, "still held once");
    assert!(client.lock(&name).is_locked().unwrap());
    thread::spawn(move || inner.unlock().unwrap())
        .join()
        .unwrap();
    assert!(!client.lock(&name).is_locked().unwrap());
}

fn an_owner_and_the_threads_exclude_each_other(env: &Env) {
    let client = env.client();
    let name = unique_name("owned:exclusion");
    let (a, b) = (LockOwner::new(), LockOwner::new());
    let held = client.lock(&name).owned_by(&a).lock().unwrap();
    // The same client's thread, another owner, another client: all refused.
    assert!(client.lock(&name).try_lock().unwrap().is_none());
    assert!(
        client
            .lock(&name)
            .owned_by(&b)
            .try_lock()
            .unwrap()
            .is_none()
    );
    assert!(env.client().lock(&name).try_lock().unwrap().is_none());
    drop(held);
    // The thread's own hold excludes the owner in turn.
    let mine = client.lock(&name).lock().unwrap();
    assert!(
        client
            .lock(&name)
            .owned_by(&a)
            .try_lock()
            .unwrap()
            .is_none()
    );
    mine.unlock().unwrap();
}

fn the_watchdog_keeps_a_moved_guard_alive(env: &Env) {
    let timeout = Duration::from_secs(1);
    let client = env.client_with_watchdog(timeout);
    let name = unique_name("owned:watchdog");
    let guard = client
        .lock(&name)
        .owned_by(&LockOwner::new())
        .lock()
        .unwrap();
    let (tx, rx) = mpsc::channel::<OwnedLockGuard>();
    let keeper = thread::spawn(move || {
        let guard = rx.recv().unwrap();
        // Three watchdog timeouts on a thread that did not take it.
        thread::sleep(timeout * 3);
        assert!(!guard.is_lost());
        guard
    });
    tx.send(guard).unwrap();
    let guard = keeper.join().unwrap();
    assert!(client.lock(&name).is_locked().unwrap(), "renewed all along");
    assert!(env.client().lock(&name).try_lock().unwrap().is_none());
    guard.unlock().unwrap();
}

fn a_waiter_wakes_when_a_moved_guard_is_dropped(env: &Env) {
    let client = env.client();
    let name = unique_name("owned:wake");
    let guard = client
        .lock(&name)
        .owned_by(&LockOwner::new())
        .lock()
        .unwrap();
    let other: Client = env.client();
    let waiting: Lock = other.lock(&name);
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let got = waiting.lock().unwrap();
        tx.send(Instant::now()).unwrap();
        got.unlock().unwrap();
    });
    thread::sleep(Duration::from_millis(300));
    let dropped = Instant::now();
    thread::spawn(move || drop(guard)).join().unwrap();
    let got = rx.recv_timeout(Duration::from_secs(10)).expect("woken");
    assert!(
        got.duration_since(dropped) < PROMPT,
        "{:?}",
        got.duration_since(dropped)
    );
    waiter.join().unwrap();
}

fn every_lock_kind_can_be_owned(env: &Env) {
    let client = env.client();
    let owner = LockOwner::new();
    let name = unique_name("owned:kinds");
    let rw = client.read_write_lock(format!("{name}:rw"));
    let kinds = [
        ("lock", client.lock(format!("{name}:lock"))),
        ("fair", client.fair_lock(format!("{name}:fair"))),
        ("fenced", client.fenced_lock(format!("{name}:fenced"))),
        ("read", rw.read_lock()),
        ("write", rw.write_lock()),
    ];
    for (kind, lock) in kinds {
        let owned = lock.owned_by(&owner);
        let guard = owned.lock().unwrap();
        assert!(owned.is_held().unwrap(), "{kind}");
        if kind == "fenced" {
            assert!(guard.token().is_some());
        }
        thread::spawn(move || guard.unlock().unwrap())
            .join()
            .unwrap();
        assert!(!owned.is_held().unwrap(), "{kind}");
        assert!(!lock.is_locked().unwrap(), "{kind}: released");
    }
}

fn a_lease_is_extended_from_another_thread(env: &Env) {
    let client = env.client();
    let name = unique_name("owned:extend");
    let lock = client.lock(&name).owned_by(&LockOwner::new());
    let guard = lock.lock_with_lease(Duration::from_millis(300)).unwrap();
    let guard = thread::spawn(move || {
        guard.extend(Duration::from_secs(30)).unwrap();
        guard
    })
    .join()
    .unwrap();
    thread::sleep(Duration::from_millis(600));
    assert!(!guard.is_lost());
    assert!(
        lock.is_held().unwrap(),
        "the extended lease outlived the first"
    );
    guard.unlock().unwrap();
}
