//! What is owner-specific about a lock taken on behalf of an explicit
//! [`LockOwner`] rather than the calling thread (Redisson's
//! `lock(threadId)` / `unlockAsync(threadId)`), so that its guard can move
//! between threads: the type names [`OwnedLock`] and [`OwnedLockGuard`],
//! and the owner's own queries.
//!
//! Everything else is the [`Lock`]'s (`src/lock/`): the same handle type,
//! keys, scripts, watchdog, waits, acquire methods and guard type; only the
//! holder id's second half is the owner's number instead of the thread's,
//! and the guard's hold counts are kept per owner instead of per thread.

use crate::Result;
use crate::holder::LockOwner;
use crate::lock::{Lock, LockGuard};

/// A guard held by an explicit [`LockOwner`]: `Send`, so any thread may
/// unlock it, extend it or drop it. Its methods are [`LockGuard`]'s.
///
/// ```
/// fn assert_send<T: Send>(_: &T) {}
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let guard: redisync::OwnedLockGuard =
///     client.lock("jobs").owned_by(&redisync::LockOwner::new()).lock()?;
/// assert_send(&guard);
/// # Ok::<(), redisync::Error>(())
/// ```
pub type OwnedLockGuard = LockGuard<LockOwner>;

/// A [`Lock`] handle that takes the lock for an explicit [`LockOwner`];
/// made by [`Lock::owned_by`]. Cheap to clone, `Send + Sync`. Its acquire
/// methods are [`Lock`]'s, and return an [`OwnedLockGuard`].
///
/// Reentrancy is per owner: taking it again for an owner that holds it
/// re-enters, from whichever thread, and each hold needs its own release.
/// The owner and the threads of the same client are different holders:
/// they exclude each other. Cancellation (`cancellable`) and a spin lock's
/// backoff carry over from the handle it was made from.
///
/// ```
/// use std::time::Duration;
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let request = redisync::LockOwner::new();
/// let lock = client.lock("orders:42").owned_by(&request);
/// let guard = lock.lock()?;
/// // Another thread finishes the request and releases the lock.
/// let worker = std::thread::spawn(move || -> redisync::Result<()> {
///     // ... work ...
///     guard.unlock()
/// });
/// worker.join().unwrap()?;
/// assert!(!lock.is_held()?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub type OwnedLock = Lock<LockOwner>;

impl Lock<LockOwner> {
    /// The owner the lock is taken for.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let owner = redisync::LockOwner::new();
    /// assert_eq!(client.lock("jobs").owned_by(&owner).owner(), &owner);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn owner(&self) -> &LockOwner {
        &self.who
    }

    /// The plain handle (whose calls act for the calling thread).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs").owned_by(&redisync::LockOwner::new());
    /// assert_eq!(lock.lock_handle().name(), "jobs");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn lock_handle(&self) -> Lock {
        self.plain()
    }

    /// Whether the owner holds the lock (Redisson's `isHeldByThread`).
    ///
    /// # Errors
    /// As [`Lock::is_locked`].
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs").owned_by(&redisync::LockOwner::new());
    /// let guard = lock.lock()?;
    /// assert!(lock.is_held()?);
    /// guard.unlock()?;
    /// assert!(!lock.is_held()?);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "isHeldByThread")]
    pub fn is_held(&self) -> Result<bool> {
        Ok(self.hold_count()? > 0)
    }
}

impl LockGuard<LockOwner> {
    /// The owner that holds this guard's lock.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let owner = redisync::LockOwner::new();
    /// let guard = client.lock("jobs").owned_by(&owner).lock()?;
    /// assert_eq!(guard.owner(), &owner);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn owner(&self) -> &LockOwner {
        self.holder()
    }
}
