//! A release whose reply is lost (the connection drops after Redis ran the
//! script) is retried with the same unlock latch, so it is applied once:
//! a reentrant hold is not released twice, and a final release is not
//! reported as `NotHeld`. Run on both backends through `CountingBackend`,
//! which applies each release and then, when told to, "loses" its reply.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{CountingBackend, TestServer, unique_name};
use redisync::LockBackend;
use redisync::{Client, MemoryBackend, RedisBackend};

fn released_once_despite_lost_replies(inner: Arc<dyn LockBackend>) {
    let backend = CountingBackend::new(Arc::clone(&inner));
    let client = Client::builder().backend(backend.clone()).build().unwrap();
    let other = Client::builder().shared_backend(inner).build().unwrap();
    let name = unique_name("unlock-retry");
    let lock = client.lock(name.as_str());

    let outer = lock.lock().unwrap();
    let inner_guard = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);

    // The reentrant release is applied, its reply lost, and retried: the
    // retry must find the latch and not release the outer hold too.
    backend.lose_release_replies(1);
    inner_guard.unlock().unwrap();
    assert_eq!(backend.calls("lock_release"), 2, "one retry expected");
    assert_eq!(lock.hold_count().unwrap(), 1, "the retry released twice");
    assert!(other.lock(name.as_str()).try_lock().unwrap().is_none());

    // The final release is applied, its reply lost twice, and retried: the
    // retries report it released (not NotHeld), and the lock is free.
    backend.lose_release_replies(2);
    outer.unlock().unwrap();
    assert_eq!(backend.calls("lock_release"), 5, "two retries expected");
    assert!(!lock.is_locked().unwrap());
    let taken = other
        .lock(name.as_str())
        .try_lock_for(Duration::from_secs(1))
        .unwrap();
    assert!(taken.is_some());
}

#[test]
fn memory_lost_release_reply_is_retried_once_applied() {
    released_once_despite_lost_replies(Arc::new(MemoryBackend::new()));
}

#[test]
fn redis_lost_release_reply_is_retried_once_applied() {
    let server = TestServer::start();
    released_once_despite_lost_replies(Arc::new(RedisBackend::open(&server.url()).unwrap()));
}
