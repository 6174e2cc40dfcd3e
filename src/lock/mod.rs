//! [`Lock`]: Redisson's `RLock`, a reentrant, non-fair distributed lock, and
//! its RAII [`LockGuard`]; the same handle also drives the fair lock, the
//! fenced lock, the spin lock and both halves of the read-write lock (see
//! `flavor.rs` for what differs), and, as [`OwnedLock`](crate::OwnedLock)
//! (`Lock<LockOwner>`), a lock taken for an explicit owner.
//!
//! This file owns the handle and its public methods, each written once for
//! both holder kinds. The rest, by concern:
//! - `acquire.rs`: the acquire loop. One script attempt; if another holder
//!   has it, register on the lock's channel with the subscriber, then
//!   alternate "park until an unlock permit or the holder's TTL" and
//!   "retry" (a spin lock, `spin_lock.rs`, sleeps with backoff instead and
//!   subscribes to nothing). Leases given explicitly are fixed; without one
//!   the lease is the watchdog timeout and the client's watchdog renews it
//!   while the guard lives.
//! - `release.rs`: the release path (unlock latches, attempt records,
//!   handoffs, phantom holds, retries, background release).
//! - `holds.rs`: the hold counts kept in this process.
//! - `cohort.rs`: a hold passed between threads of the client with no call
//!   to the store (`cohort_model.rs`: its exhaustive interleaving check).
//! - `guard.rs`: the guard.

mod acquire;
mod cohort;
#[cfg(test)]
mod cohort_model;
mod guard;
mod holds;
mod names;
mod release;

pub(crate) use self::acquire::AttemptId;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::flavor::{Flavor, Holder, LockKeys};
use crate::holder::{GuardHolder, HolderIsTheThread, LockOwner};
use crate::wait::Wait;
use crate::{Client, Error, Result, holder};

pub use guard::LockGuard;

/// A handle on one reentrant distributed lock; created by
/// [`Client::lock`]. Cheap to clone, `Send + Sync`; no round trip until you
/// call a method.
///
/// Reentrant per (client, thread): a thread that holds it may take it again,
/// and must release it as many times. Non-fair: a waiter woken by an unlock
/// competes with new arrivals from other clients (within one client, new
/// arrivals let a woken waiter go first).
///
/// `H` is who takes it: the calling thread ([`HolderIsTheThread`], the
/// default; its guards are `!Send`), or an explicit [`LockOwner`] for a
/// handle made by [`owned_by`](Lock::owned_by), an
/// [`OwnedLock`](crate::OwnedLock) (`Lock<LockOwner>`, whose guards are
/// `Send`). Both have the same acquire methods and guard type.
///
/// ```
/// use std::time::Duration;
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let lock = client.lock("orders:42");
/// {
///     let _guard = lock.lock()?;               // blocks; the watchdog renews the lease
///     assert!(lock.is_held_by_current_thread()?);
/// }                                            // dropped: unlocked
/// if let Some(guard) = lock.try_lock_for(Duration::from_millis(100))? {
///     guard.unlock()?;                         // explicit unlock returns the error, if any
/// }
/// # Ok::<(), redisync::Error>(())
/// ```
#[doc(alias = "RLock")]
#[doc(alias = "RFairLock")]
#[must_use = "a lock handle takes nothing by itself: call .lock() or .try_lock() on it and keep the guard"]
pub struct Lock<H: GuardHolder = HolderIsTheThread> {
    client: Client,
    keys: Arc<LockKeys>,
    /// Ends this handle's waits from another thread (see `cancellable`).
    cancel: Option<crate::CancellationToken>,
    /// A spin lock's backoff: its waiters sleep and retry instead of
    /// parking on pub/sub (see `spin_lock`).
    /// (Behind an `Arc`: every guard holds a clone of its handle, and a
    /// client may hold 100,000 locks.)
    pub(crate) spin: Option<Arc<crate::Backoff>>,
    /// For whom it takes the lock: nothing for the calling thread (so this
    /// handle stays `Send + Sync` although its guard is not), the
    /// [`LockOwner`] for an [`OwnedLock`](crate::OwnedLock).
    pub(crate) who: H::Who,
}

// By hand: a derive would ask `H: Clone`, and the thread marker is not.
impl<H: GuardHolder> Clone for Lock<H> {
    fn clone(&self) -> Self {
        Lock {
            client: self.client.clone(),
            keys: Arc::clone(&self.keys),
            cancel: self.cancel.clone(),
            spin: self.spin.clone(),
            who: self.who.clone(),
        }
    }
}

impl<H: GuardHolder> fmt::Debug for Lock<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct(if H::EXPLICIT { "OwnedLock" } else { "Lock" });
        out.field("name", &self.keys.name)
            .field("flavor", &self.keys.flavor)
            .field("spin", &self.spin);
        if let Some(owner) = H::owner(&self.who) {
            out.field("owner", &owner.number());
        }
        out.finish()
    }
}

impl Lock {
    pub(crate) fn new(client: Client, flavor: Flavor, name: String) -> Lock {
        let keys = LockKeys::new(flavor, name);
        // A fair lock's releases hand it outright to a queued redisync
        // waiter (not on a Redis Cluster: see `Client::queues_waiters`).
        let keys = if client.queues_waiters() {
            keys.with_direct_handoffs(client.claim_window_ms())
        } else {
            keys
        };
        Lock {
            client,
            keys: Arc::new(keys),
            cancel: None,
            spin: None,
            who: (),
        }
    }

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
    pub fn owned_by(&self, owner: &LockOwner) -> Lock<LockOwner> {
        self.for_holder(owner.clone())
    }

    /// Whether the calling thread (of this client) holds the lock.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs");
    /// let _guard = lock.lock()?;
    /// assert!(lock.is_held_by_current_thread()?);
    /// let other = lock.clone();
    /// assert!(!std::thread::spawn(move || other.is_held_by_current_thread().unwrap()).join().unwrap());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "isHeldByCurrentThread")]
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        Ok(self.hold_count()? > 0)
    }
}

impl<H: GuardHolder> Lock<H> {
    /// This handle with its holder `who`'s kind (the calling thread's plain
    /// handle, or an owner's): everything else carries over.
    fn for_holder<K: GuardHolder>(&self, who: K::Who) -> Lock<K> {
        Lock {
            client: self.client.clone(),
            keys: Arc::clone(&self.keys),
            cancel: self.cancel.clone(),
            spin: self.spin.clone(),
            who,
        }
    }

    /// The plain handle, whose calls act for the calling thread (what a
    /// guard keeps).
    pub(crate) fn plain(&self) -> Lock {
        self.for_holder(())
    }

    /// This handle, with its waits ended by `token`: a blocked call then
    /// returns [`Error::Cancelled`](crate::Error::Cancelled) promptly and
    /// leaves nothing behind (Redisson's `*Interruptibly`). Guards and the
    /// handle's other clones are unaffected; a cancelled token fails every
    /// later wait of this handle at once.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let token = redisync::CancellationToken::new();
    /// let lock = client.lock("jobs").cancellable(&token);
    /// token.cancel();
    /// assert!(lock.lock().unwrap_err().is_cancelled());
    /// assert!(client.lock("jobs").try_lock()?.is_some(), "nothing was left held");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "lockInterruptibly")]
    #[doc(alias = "acquireInterruptibly")]
    #[must_use = "the cancellable handle is a new value; call the blocking method on it"]
    pub fn cancellable(&self, token: &crate::CancellationToken) -> Lock<H> {
        Lock {
            cancel: Some(token.clone()),
            ..self.clone()
        }
    }

    /// The lock's name, as given to the client: the Redis key of its hash,
    /// less the client's [name prefix](crate::ClientBuilder::name_prefix).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.lock("a").name(), "a");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "getName")]
    pub fn name(&self) -> &str {
        self.client.unmap(&self.keys.name)
    }

    /// The client this handle belongs to.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.lock("a").client().id(), client.id());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Blocks until the lock is acquired (by the calling thread, or for an
    /// [`OwnedLock`](crate::OwnedLock) by its owner); the watchdog keeps the
    /// lease alive until the guard is dropped or unlocked (for an owner's
    /// guard, by whichever thread).
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name; `Backend` if Redis fails;
    /// `Protocol` if the key holds another type.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let guard = client.lock("jobs").lock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn lock(&self) -> Result<LockGuard<H>> {
        self.acquire(Wait::Forever, None)?
            .ok_or_else(|| Error::protocol("an unbounded wait ended without the lock"))
    }

    /// Blocks until the lock is acquired with a fixed `lease`: no watchdog;
    /// the lock frees itself after `lease` even if the guard still lives.
    ///
    /// # Errors
    /// As [`lock`](Self::lock), and `InvalidArgument` for a lease under 1 ms
    /// or over [`MAX_LEASE`](crate::MAX_LEASE).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let guard = client.lock("jobs").lock_with_lease(Duration::from_secs(10))?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard<H>> {
        self.acquire(Wait::Forever, Some(lease))?
            .ok_or_else(|| Error::protocol("an unbounded wait ended without the lock"))
    }

    /// Takes the lock if it is free (or already held by this holder: the
    /// calling thread, or the owner); never waits. `Ok(None)` when another
    /// holder has it (for an owner, the threads of its own client are other
    /// holders).
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs");
    /// let first = lock.try_lock()?;
    /// assert!(first.is_some());
    /// let other = client.lock("jobs").owned_by(&redisync::LockOwner::new());
    /// assert!(other.try_lock()?.is_none()); // this thread is another holder
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "tryLock")]
    #[must_use = "a guard that is not bound is released at once: `if let Some(guard) = lock.try_lock()? { ... }`"]
    pub fn try_lock(&self) -> Result<Option<LockGuard<H>>> {
        self.acquire(Wait::Never, None)
    }

    /// Waits up to `wait` for the lock. `Ok(None)` on timeout. A `wait` too
    /// long to represent as a deadline (e.g. `Duration::MAX`) waits forever.
    ///
    /// Returns within `wait` plus at most 100 ms even when Redis stops
    /// answering: each round trip gets what is left of `wait` (at least
    /// 100 ms), not the whole response timeout.
    ///
    /// # Errors
    /// As [`lock`](Self::lock). After an error the holder does not hold the
    /// lock: if the failed request may have run, the client releases what
    /// it took in the background (README, Failure model).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// if let Some(guard) = client.lock("jobs").try_lock_for(Duration::from_secs(1))? {
    ///     // ...
    /// }
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "tryLock")]
    #[must_use = "a guard that is not bound is released at once: `if let Some(guard) = lock.try_lock()? { ... }`"]
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard<H>>> {
        self.acquire(Wait::for_duration(wait), None)
    }

    /// Waits up to `wait` for the lock and takes it with a fixed `lease`
    /// (no watchdog). `Ok(None)` on timeout.
    ///
    /// # Errors
    /// As [`lock_with_lease`](Self::lock_with_lease).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let guard = client.lock("jobs").try_lock_for_with_lease(Duration::from_secs(1), Duration::from_secs(5))?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "tryLock")]
    #[must_use = "a guard that is not bound is released at once: `if let Some(guard) = lock.try_lock()? { ... }`"]
    pub fn try_lock_for_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard<H>>> {
        self.acquire(Wait::for_duration(wait), Some(lease))
    }

    /// Whether anyone, in any client, holds the lock.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs");
    /// assert!(!lock.is_locked()?);
    /// let _guard = lock.lock()?;
    /// assert!(lock.is_locked()?);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "isLocked")]
    pub fn is_locked(&self) -> Result<bool> {
        Ok(self.state()?.locked)
    }

    /// How many times the calling thread holds the lock (0 if not at all);
    /// for an [`OwnedLock`](crate::OwnedLock), how many times its owner
    /// does (reentrant per owner, across threads).
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs");
    /// let outer = lock.lock()?;
    /// let inner = lock.lock()?;
    /// assert_eq!(lock.hold_count()?, 2);
    ///
    /// let owned = client.lock("jobs:owned").owned_by(&redisync::LockOwner::new());
    /// let outer = owned.lock()?;
    /// let inner = std::thread::scope(|s| s.spawn(|| owned.lock()).join().unwrap())?;
    /// assert_eq!(owned.hold_count()?, 2);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "getHoldCount")]
    pub fn hold_count(&self) -> Result<u64> {
        Ok(self.state()?.hold_count)
    }

    /// The lock's remaining time to live: `None` when it is free (or has no
    /// expiry).
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs");
    /// let _guard = lock.lock_with_lease(Duration::from_secs(10))?;
    /// assert!(lock.remaining_ttl()?.unwrap() <= Duration::from_secs(10));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "remainTimeToLive")]
    #[doc(alias = "remaining_time_to_live")]
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        Ok(self.state()?.ttl)
    }

    /// Releases the lock whoever holds it and wakes its waiters. Returns
    /// whether it was held. The holder's guard will then report `NotHeld` on
    /// `unlock()`.
    ///
    /// Once, whatever the connection does (the call carries an op record;
    /// see README, Failure model): a copy of the call resent or
    /// delivered late frees nothing more (not the next holder's hold), and
    /// its error means it freed nothing and will not.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs");
    /// let guard = lock.lock()?;
    /// assert!(lock.force_unlock()?);
    /// assert!(guard.unlock().unwrap_err().is_not_held());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "forceUnlock")]
    pub fn force_unlock(&self) -> Result<bool> {
        self.check_name()?;
        self.keys.force_release(self.client.store())
    }

    /// Deletes the lock whoever holds it and wakes its waiters (Redisson's
    /// `RLock.delete()`). Returns whether anything existed. The holder's
    /// guard then reports `NotHeld` on `unlock()` (a fair lock's unlocks
    /// quietly, as Redisson's does), and its watchdog, finding the lock
    /// gone, marks the hold lost.
    ///
    /// What goes, by kind:
    ///
    /// - reentrant lock: the hash, as [`force_unlock`](Self::force_unlock)
    ///   (Redisson's `delete` on an `RLock` is its `forceUnlock`);
    /// - fenced lock: the hash. The token counter
    ///   `redisson_lock_token:{name}` is **kept**, unlike Redisson's
    ///   `RFencedLock.delete`: a deleted counter would restart, and a
    ///   token must never go backwards (a store that remembers the highest
    ///   token it accepted would refuse the next holder, or a Redisson
    ///   client's restarted token could fall below a stale holder's). It is
    ///   one small string per name;
    /// - fair lock: the hash, the waiter queue and the slot deadlines (as
    ///   Redisson); every queued waiter is woken on its own channel and
    ///   queues again, where Redisson's would sleep out its slot;
    /// - a read-write lock's half: as that half's `force_unlock` (only when
    ///   held in its mode), as in Redisson. To delete a read-write lock
    ///   whatever its mode, use [`ReadWriteLock::delete`](crate::ReadWriteLock::delete).
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs");
    /// let guard = lock.lock()?;
    /// assert!(lock.delete()?);
    /// assert!(!lock.is_locked()?);
    /// assert!(guard.unlock().unwrap_err().is_not_held());
    /// assert!(!lock.delete()?); // nothing left
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn delete(&self) -> Result<bool> {
        self.check_name()?;
        self.keys.delete(self.client.store())
    }

    /// Deletes the read-write lock this half belongs to, whatever its mode.
    pub(crate) fn delete_rw(&self) -> Result<bool> {
        self.check_name()?;
        self.keys.delete_rw(self.client.store())
    }

    fn check_name(&self) -> Result<()> {
        if self.keys.name.is_empty() {
            return Err(Error::invalid("name", "a lock name must not be empty"));
        }
        Ok(())
    }

    fn holder(&self, thread: u64) -> Holder {
        let own = holder::shared_holder_id(self.client.id(), thread);
        // A thread's field for a reentrant lock may have been swapped by a
        // hold passed between threads (see `cohort`).
        if H::EXPLICIT || !self.keys.hands_over() {
            return self.keys.holder(own);
        }
        self.keys.holder(cohort::field_of(own, &self.keys.name))
    }

    /// The lock's state as this handle's holder (the calling thread, or
    /// the owner) sees it.
    fn state(&self) -> Result<crate::ops::lock::LockState> {
        self.check_name()?;
        let holder = self.holder(H::of(&self.who).number());
        self.keys.state(self.client.store(), &holder)
    }
}
