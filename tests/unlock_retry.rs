//! A release whose reply is lost (the connection drops after Redis ran the
//! script) is retried with the same unlock latch, so it is applied once:
//! a reentrant hold is not released twice, and a final release is not
//! reported as `NotHeld`. Run on both backends through a wrapper backend
//! that executes each release and then, when told to, "loses" its reply.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{TestServer, unique_name};
use redisync::backend::{
    Acquire, FairLockKeys, LockBackend, LockState, PubSubConnection, Release, RwLockKeys,
    RwLockState, RwMode,
};
use redisync::{Client, Error, MemoryBackend, RedisBackend, Result};

/// Delegates everything; loses the reply of the next `lose` releases after
/// they were applied, and counts release calls.
struct LosingReplies {
    inner: Arc<dyn LockBackend>,
    lose: AtomicUsize,
    releases: AtomicUsize,
}

impl LockBackend for LosingReplies {
    fn lock_acquire(&self, name: &str, holder: &str, lease_ms: i64) -> Result<Acquire> {
        self.inner.lock_acquire(name, holder, lease_ms)
    }
    fn lock_renew(&self, name: &str, holder: &str, lease_ms: i64) -> Result<bool> {
        self.inner.lock_renew(name, holder, lease_ms)
    }
    fn lock_release(
        &self,
        name: &str,
        channel: &str,
        holder: &str,
        lease_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        let outcome = self
            .inner
            .lock_release(name, channel, holder, lease_ms, latch_key, latch_ms)?;
        let lost = self
            .lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if lost {
            return Err(Error::backend("connection reset before the reply", true));
        }
        Ok(outcome)
    }
    fn lock_force_release(&self, name: &str, channel: &str) -> Result<bool> {
        self.inner.lock_force_release(name, channel)
    }
    fn lock_state(&self, name: &str, holder: &str) -> Result<LockState> {
        self.inner.lock_state(name, holder)
    }
    fn fair_lock_acquire(
        &self,
        keys: &FairLockKeys<'_>,
        holder: &str,
        lease_ms: i64,
        wait_ms: i64,
        now_ms: i64,
        enqueue: bool,
    ) -> Result<Acquire> {
        self.inner
            .fair_lock_acquire(keys, holder, lease_ms, wait_ms, now_ms, enqueue)
    }
    fn fair_lock_release(
        &self,
        keys: &FairLockKeys<'_>,
        holder: &str,
        lease_ms: i64,
        now_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release> {
        self.inner
            .fair_lock_release(keys, holder, lease_ms, now_ms, latch_key, latch_ms)
    }
    fn fair_lock_cancel(&self, keys: &FairLockKeys<'_>, holder: &str, wait_ms: i64) -> Result<()> {
        self.inner.fair_lock_cancel(keys, holder, wait_ms)
    }
    fn fair_lock_force_release(&self, keys: &FairLockKeys<'_>, now_ms: i64) -> Result<bool> {
        self.inner.fair_lock_force_release(keys, now_ms)
    }
    fn read_lock_acquire(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<Acquire> {
        self.inner.read_lock_acquire(keys, lease_ms)
    }
    fn write_lock_acquire(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<Acquire> {
        self.inner.write_lock_acquire(keys, lease_ms)
    }
    fn read_lock_release(
        &self,
        keys: &RwLockKeys<'_>,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release> {
        self.inner.read_lock_release(keys, latch_key, latch_ms)
    }
    fn write_lock_release(
        &self,
        keys: &RwLockKeys<'_>,
        lease_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release> {
        self.inner
            .write_lock_release(keys, lease_ms, latch_key, latch_ms)
    }
    fn read_lock_renew(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<bool> {
        self.inner.read_lock_renew(keys, lease_ms)
    }
    fn rw_lock_force_release(&self, keys: &RwLockKeys<'_>, mode: RwMode) -> Result<bool> {
        self.inner.rw_lock_force_release(keys, mode)
    }
    fn rw_lock_state(&self, name: &str, field: &str) -> Result<RwLockState> {
        self.inner.rw_lock_state(name, field)
    }
    fn publish(&self, channel: &str, payload: &str) -> Result<()> {
        self.inner.publish(channel, payload)
    }
    fn with_pubsub(
        &self,
        session: &mut dyn FnMut(&mut dyn PubSubConnection) -> Result<()>,
    ) -> Result<()> {
        self.inner.with_pubsub(session)
    }
}

fn released_once_despite_lost_replies(inner: Arc<dyn LockBackend>) {
    let backend = Arc::new(LosingReplies {
        inner: Arc::clone(&inner),
        lose: AtomicUsize::new(0),
        releases: AtomicUsize::new(0),
    });
    let client = Client::builder()
        .shared_backend(Arc::clone(&backend) as Arc<dyn LockBackend>)
        .build()
        .unwrap();
    let other = Client::builder().shared_backend(inner).build().unwrap();
    let name = unique_name("unlock-retry");
    let lock = client.lock(name.as_str());

    let outer = lock.lock().unwrap();
    let inner_guard = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);

    // The reentrant release is applied, its reply lost, and retried: the
    // retry must find the latch and not release the outer hold too.
    backend.lose.store(1, Ordering::SeqCst);
    inner_guard.unlock().unwrap();
    assert_eq!(
        backend.releases.load(Ordering::SeqCst),
        2,
        "one retry expected"
    );
    assert_eq!(lock.hold_count().unwrap(), 1, "the retry released twice");
    assert!(other.lock(name.as_str()).try_lock().unwrap().is_none());

    // The final release is applied, its reply lost twice, and retried: the
    // retries report it released (not NotHeld), and the lock is free.
    backend.lose.store(2, Ordering::SeqCst);
    outer.unlock().unwrap();
    assert_eq!(
        backend.releases.load(Ordering::SeqCst),
        5,
        "two retries expected"
    );
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
