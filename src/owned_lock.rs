//! [`OwnedLock`]: a lock taken on behalf of an explicit [`LockOwner`]
//! rather than the calling thread (Redisson's `lock(threadId)` /
//! `unlockAsync(threadId)`), so that its guard can move between threads.
//!
//! Everything else is the [`Lock`]'s: the same keys, scripts, watchdog,
//! waits and guard type; only the holder id's second half is the owner's
//! number instead of the thread's, and the guard's hold counts are kept
//! per owner instead of per thread.

use std::fmt;
use std::time::Duration;

use crate::holder::LockOwner;
use crate::lock::{Lock, LockGuard};
use crate::wait::Wait;
use crate::{Error, Result};

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
/// made by [`Lock::owned_by`]. Cheap to clone, `Send + Sync`.
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
#[derive(Clone)]
#[must_use = "an owned-lock handle does nothing until you call lock() or try_lock() on it"]
pub struct OwnedLock {
    lock: Lock,
    owner: LockOwner,
}

impl fmt::Debug for OwnedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedLock")
            .field("name", &self.lock.name())
            .field("owner", &self.owner.number())
            .finish()
    }
}

impl Lock {
    /// This lock, taken on behalf of `owner` instead of the calling thread
    /// (Redisson's `lock(threadId)`): its guard is `Send`.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let owner = redisync::LockOwner::new();
    /// let guard = client.lock("jobs").owned_by(&owner).lock()?;
    /// assert!(!client.lock("jobs").is_held_by_current_thread()?); // the owner holds it
    /// # drop(guard);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "lockAsync")]
    #[doc(alias = "unlockAsync")]
    pub fn owned_by(&self, owner: &LockOwner) -> OwnedLock {
        OwnedLock {
            lock: self.clone(),
            owner: owner.clone(),
        }
    }
}

impl OwnedLock {
    /// The owner the lock is taken for.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let owner = redisync::LockOwner::new();
    /// assert_eq!(client.lock("jobs").owned_by(&owner).owner(), &owner);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn owner(&self) -> &LockOwner {
        &self.owner
    }

    /// The plain handle (whose calls act for the calling thread).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs").owned_by(&redisync::LockOwner::new());
    /// assert_eq!(lock.lock_handle().name(), "jobs");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn lock_handle(&self) -> &Lock {
        &self.lock
    }

    /// Blocks until the owner holds the lock; the watchdog keeps the lease
    /// alive until the guard is released, by whichever thread.
    ///
    /// # Errors
    /// As [`Lock::lock`].
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let guard = client.lock("jobs").owned_by(&redisync::LockOwner::new()).lock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn lock(&self) -> Result<OwnedLockGuard> {
        self.acquire(Wait::Forever, None)?
            .ok_or_else(|| Error::protocol("an unbounded wait ended without the lock"))
    }

    /// Blocks until the owner holds the lock with a fixed `lease` (no
    /// watchdog).
    ///
    /// # Errors
    /// As [`Lock::lock_with_lease`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs").owned_by(&redisync::LockOwner::new());
    /// let guard = lock.lock_with_lease(Duration::from_secs(10))?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn lock_with_lease(&self, lease: Duration) -> Result<OwnedLockGuard> {
        self.acquire(Wait::Forever, Some(lease))?
            .ok_or_else(|| Error::protocol("an unbounded wait ended without the lock"))
    }

    /// Takes the lock for the owner if it is free (or the owner holds it
    /// already); never waits.
    ///
    /// # Errors
    /// As [`Lock::try_lock`].
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let _mine = client.lock("jobs").lock()?;
    /// let other = client.lock("jobs").owned_by(&redisync::LockOwner::new());
    /// assert!(other.try_lock()?.is_none()); // this thread is another holder
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "tryLock")]
    #[must_use = "a guard that is not bound is released at once: `if let Some(guard) = lock.try_lock()? { ... }`"]
    pub fn try_lock(&self) -> Result<Option<OwnedLockGuard>> {
        self.acquire(Wait::Never, None)
    }

    /// Waits up to `wait` for the lock. `Ok(None)` on timeout.
    ///
    /// # Errors
    /// As [`Lock::try_lock_for`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs").owned_by(&redisync::LockOwner::new());
    /// assert!(lock.try_lock_for(Duration::from_millis(100))?.is_some());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "tryLock")]
    #[must_use = "a guard that is not bound is released at once: `if let Some(guard) = lock.try_lock()? { ... }`"]
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<OwnedLockGuard>> {
        self.acquire(Wait::for_duration(wait), None)
    }

    /// Waits up to `wait` for the lock and takes it with a fixed `lease`.
    ///
    /// # Errors
    /// As [`Lock::try_lock_for_with_lease`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs").owned_by(&redisync::LockOwner::new());
    /// let guard = lock.try_lock_for_with_lease(Duration::from_secs(1), Duration::from_secs(5))?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "tryLock")]
    #[must_use = "a guard that is not bound is released at once: `if let Some(guard) = lock.try_lock()? { ... }`"]
    pub fn try_lock_for_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<OwnedLockGuard>> {
        self.acquire(Wait::for_duration(wait), Some(lease))
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

    /// How many times the owner holds the lock (0 if not at all).
    ///
    /// # Errors
    /// As [`Lock::hold_count`].
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs").owned_by(&redisync::LockOwner::new());
    /// let outer = lock.lock()?;
    /// let inner = std::thread::scope(|s| s.spawn(|| lock.lock()).join().unwrap())?;
    /// assert_eq!(lock.hold_count()?, 2); // reentrant per owner, across threads
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn hold_count(&self) -> Result<u64> {
        Ok(self.lock.state_of(self.owner.number())?.hold_count)
    }

    fn acquire(&self, wait: Wait, lease: Option<Duration>) -> Result<Option<OwnedLockGuard>> {
        self.lock.acquire_by(wait, lease, self.owner.clone())
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
