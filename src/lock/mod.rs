//! [`Lock`]: Redisson's `RLock`, a reentrant, non-fair distributed lock, and
//! its RAII [`LockGuard`]; the same handle also drives the fair lock and both
//! halves of the read-write lock (see `flavor.rs` for what differs).
//!
//! Acquire loop: one script attempt; if another
//! holder has it, register on the lock's channel with the subscriber, then
//! alternate "park until an unlock permit or the holder's TTL" and "retry".
//! A spin lock (`spin_lock.rs`) sleeps with backoff between attempts
//! instead, and subscribes to nothing. Leases given explicitly are fixed;
//! without one the lease is the watchdog timeout and the client's watchdog
//! renews it while the guard lives.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{Acquire, Release};
use crate::event::UnlockFailedEvent;
use crate::flavor::{Flavor, Holder, LockKeys, Renewal};
use crate::holder::{GuardHolder, HolderIsTheThread};
use crate::local_owner::Sibling;
use crate::ops;
use crate::pubsub::{Handoff, Offer, Wake};
use crate::wait::{Attempt, First, Wait};
use crate::watchdog::Lease;
use crate::{Client, Error, Result, holder, keys};

/// How long an unlock latch remembers its outcome, so a retried release
/// whose first reply was lost is not applied twice.
const UNLOCK_LATCH_MS: i64 = 10_000;
/// Pauses between the in-line retries of a release whose reply was lost
/// (each retry is idempotent: same unlock latch); no retry starts after
/// [`RELEASE_RETRY_BUDGET`]. What is still not released then is retried in
/// the background (see `cleanup`), and the unlock returns the error.
const RELEASE_RETRIES: [Duration; 3] = [
    Duration::from_millis(10),
    Duration::from_millis(100),
    Duration::from_millis(100),
];
/// In-line retrying stops after this long, so an unlock (or a guard's
/// `Drop`) takes at most about one response timeout plus this.
const RELEASE_RETRY_BUDGET: Duration = Duration::from_millis(300);
/// How long an acquire waits for an earlier release of the same holder
/// that the cleanup worker is sending right now (capped by its deadline).
const SETTLE_WAIT: Duration = Duration::from_secs(3);

/// Cap on the extra releases of an outermost unlock that found the store
/// still counting holds this thread no longer has (see [`Lock::release`]).
const PHANTOM_RELEASES: usize = 16;

thread_local! {
    /// How many live guards this thread has per `field@name` (the holder
    /// field starts with the client's uuid, so it names the client too):
    /// the hold count the store *should* have for it. Guards are `!Send`,
    /// so a thread-local count is exact.
    static LOCAL_HOLDS: std::cell::RefCell<std::collections::HashMap<String, u32>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Live guards per `field@name` of explicit owners ([`LockOwner`]): their
/// guards move between threads, so their counts are process-wide.
static OWNED_HOLDS: std::sync::LazyLock<
    parking_lot::Mutex<std::collections::HashMap<String, u32>>,
> = std::sync::LazyLock::new(Default::default);

/// Runs `f` on the hold counts of a holder kind: the explicit owners'
/// (`explicit`), else the calling thread's. `None` during thread teardown,
/// when the thread's map may be gone; then no count is kept and no release
/// drains phantoms (the safe side).
fn with_holds<R>(
    explicit: bool,
    f: impl FnOnce(&mut std::collections::HashMap<String, u32>) -> R,
) -> Option<R> {
    if explicit {
        return Some(f(&mut OWNED_HOLDS.lock()));
    }
    LOCAL_HOLDS
        .try_with(|holds| f(&mut holds.borrow_mut()))
        .ok()
}

/// Counts a new guard under `key` (`field@name`); true when it is the
/// holder's outermost one.
fn hold_taken(key: String, explicit: bool) -> bool {
    with_holds(explicit, |holds| {
        let count = holds.entry(key).or_insert(0);
        *count += 1;
        *count == 1
    })
    .unwrap_or(false)
}

/// Uncounts a guard; true when it was the holder's last one.
fn hold_released(key: &str, explicit: bool) -> bool {
    with_holds(explicit, |holds| match holds.get_mut(key) {
        Some(count) if *count > 1 => {
            *count -= 1;
            false
        }
        Some(_) => {
            holds.remove(key);
            true
        }
        None => false,
    })
    .unwrap_or(false)
}

/// An acquire attempt's id: this process's random prefix and a counter
/// (cheap: no random draw per attempt), unique across clients and runs.
/// A guard keeps only the counter (8 bytes, no allocation: a client may hold
/// 100,000 locks) and spells the record's key when it releases.
#[derive(Clone, Copy, Debug)]
struct AttemptId(u64);

impl AttemptId {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        AttemptId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// The record's key for an attempt on the lock whose key is `name`
    /// (`{name}:redisync_attempt:<id>`).
    fn key(self, name: &str) -> String {
        static PREFIX: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| uuid::Uuid::new_v4().simple().to_string());
        keys::acquire_attempt(name, format_args!("{}{:x}", PREFIX.as_str(), self.0))
    }
}

/// A fresh unlock latch key for one release of `name`.
fn new_latch(name: &str) -> String {
    format!(
        "{}:{}",
        keys::unlock_latch_prefix(name),
        uuid::Uuid::new_v4().simple()
    )
}

/// A handle on one reentrant distributed lock; created by
/// [`Client::lock`]. Cheap to clone, `Send + Sync`; no round trip until you
/// call a method.
///
/// Reentrant per (client, thread): a thread that holds it may take it again,
/// and must release it as many times. Non-fair: a waiter woken by an unlock
/// competes with new arrivals from other clients (within one client, new
/// arrivals let a woken waiter go first).
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
#[derive(Clone)]
pub struct Lock {
    client: Client,
    keys: Arc<LockKeys>,
    /// Ends this handle's waits from another thread (see `cancellable`).
    cancel: Option<crate::CancellationToken>,
    /// A spin lock's backoff: its waiters sleep and retry instead of
    /// parking on pub/sub (see `spin_lock`).
    /// (Behind an `Arc`: every guard holds a clone of its handle, and a
    /// client may hold 100,000 locks.)
    pub(crate) spin: Option<Arc<crate::Backoff>>,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.keys.name)
            .field("flavor", &self.keys.flavor)
            .field("spin", &self.spin)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(client: Client, flavor: Flavor, name: String) -> Lock {
        Lock {
            client,
            keys: Arc::new(LockKeys::new(flavor, name)),
            cancel: None,
            spin: None,
        }
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
    pub fn cancellable(&self, token: &crate::CancellationToken) -> Lock {
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

    /// Blocks until the lock is acquired; the watchdog keeps the lease alive
    /// until the guard is dropped or unlocked.
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
    pub fn lock(&self) -> Result<LockGuard> {
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
    pub fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(Wait::Forever, Some(lease))?
            .ok_or_else(|| Error::protocol("an unbounded wait ended without the lock"))
    }

    /// Takes the lock if it is free (or already held by this thread); never
    /// waits. `Ok(None)` when another holder has it.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs");
    /// let first = lock.try_lock()?;
    /// assert!(first.is_some());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "tryLock")]
    #[must_use = "a guard that is not bound is released at once: `if let Some(guard) = lock.try_lock()? { ... }`"]
    pub fn try_lock(&self) -> Result<Option<LockGuard>> {
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
    /// As [`lock`](Self::lock). After an error the thread does not hold the
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
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
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
    ) -> Result<Option<LockGuard>> {
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
        Ok(self.state()?.hold_count > 0)
    }

    /// How many times the calling thread holds the lock (0 if not at all).
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
        self.keys.force_release(self.client.inner.backend.as_ref())
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
        self.keys.delete(self.client.inner.backend.as_ref())
    }

    /// Deletes the read-write lock this half belongs to, whatever its mode.
    pub(crate) fn delete_rw(&self) -> Result<bool> {
        self.check_name()?;
        self.keys.delete_rw(self.client.inner.backend.as_ref())
    }

    fn check_name(&self) -> Result<()> {
        if self.keys.name.is_empty() {
            return Err(Error::invalid("name", "a lock name must not be empty"));
        }
        Ok(())
    }

    fn holder(&self, thread: u64) -> Holder {
        self.keys
            .holder(holder::holder_id(&self.client.inner.id, thread))
    }

    fn state(&self) -> Result<crate::backend::LockState> {
        self.state_of(holder::current_thread_number())
    }

    /// The lock's state as holder `number` (a thread's or an owner's) sees it.
    pub(crate) fn state_of(&self, number: u64) -> Result<crate::backend::LockState> {
        self.check_name()?;
        let holder = self.holder(number);
        self.keys.state(self.client.inner.backend.as_ref(), &holder)
    }

    /// The acquire loop behind every public acquire method (and the
    /// multi-lock's parts).
    pub(crate) fn acquire(&self, wait: Wait, lease: Option<Duration>) -> Result<Option<LockGuard>> {
        self.acquire_by(wait, lease, HolderIsTheThread::new())
    }

    /// [`acquire`](Self::acquire) for holder `by`: the calling thread or an
    /// explicit owner.
    pub(crate) fn acquire_by<H: GuardHolder>(
        &self,
        wait: Wait,
        lease: Option<Duration>,
        by: H,
    ) -> Result<Option<LockGuard<H>>> {
        // Every round trip of this call, the fair waiter's leaving
        // included, keeps to the caller's bound.
        crate::deadline::within(wait.deadline(), || self.acquire_within(wait, lease, by))
    }

    fn acquire_within<H: GuardHolder>(
        &self,
        wait: Wait,
        lease: Option<Duration>,
        by: H,
    ) -> Result<Option<LockGuard<H>>> {
        self.check_name()?;
        let lease_ms = match lease {
            Some(lease) => crate::error::millis("lease", lease)?,
            None => self.client.inner.watchdog_ms,
        };
        let inner = &self.client.inner;
        let backend = inner.backend.as_ref();
        let keys = &self.keys;
        let holder = self.holder(by.number());
        // A fair waiter's queue slot: the wait it asked for, or the default.
        let (allowance_ms, enqueue) = match wait {
            Wait::Forever => (inner.fair_wait_ms, true),
            Wait::Never => (inner.fair_wait_ms, false),
            Wait::Until(_, wait) => (crate::flavor::saturating_ms(wait).max(1), true),
        };
        // When the latest attempt was sent: the store's lease starts after it.
        let sent = std::cell::Cell::new(Instant::now());
        // The latest attempt's record: only the latest can have an unknown
        // outcome (each earlier one was answered).
        // On a Redis Cluster too: while the slot migrates, the recorded
        // script is refused (TRYAGAIN) and retried within the call's bound.
        let attempt_key = std::cell::Cell::new(None::<AttemptId>);
        let attempt = || {
            sent.set(Instant::now());
            let id = AttemptId::new();
            let key = id.key(&keys.name);
            let outcome =
                keys.attempt_recorded(backend, &holder, lease_ms, allowance_ms, enqueue, &key);
            attempt_key.set(Some(id));
            outcome
        };
        // Called once, in whichever arm acquired.
        let acquired =
            |token, sent, attempt| self.guard(&holder, lease, lease_ms, sent, token, attempt, by);
        // An earlier release of this holder's hold that has not landed yet
        // goes first, or it could land on the hold about to be taken.
        if !inner.cleanup.is_empty() {
            inner.cleanup.settle(
                &keys.name,
                holder.field(),
                crate::deadline::cap(SETTLE_WAIT),
            )?;
        }

        let step = || {
            Ok(match attempt()? {
                (Acquire::Acquired, token) => Attempt::Done(token),
                (Acquire::Held { ttl }, _) => Attempt::Retry(keys.park_for(ttl, allowance_ms)),
            })
        };
        let channel = keys.wait_channel(&holder);
        let waited = match self.spin.as_deref() {
            // A spin lock's waiter sleeps and retries: no subscription.
            Some(backoff) => crate::spin_lock::until_done(
                *backoff,
                wait,
                keys.primitive(),
                self.cancel
                    .as_ref()
                    .map(|token| (token, keys.name.as_str())),
                step,
            ),
            None => crate::wait::until_done(
                &inner.subscriber,
                crate::wait::Waiting {
                    channel: &channel,
                    wake: Wake::Lock,
                    wait,
                    fallback: inner.watchdog_timeout,
                    defer_to_woken: keys.defers_to_woken_waiter(),
                    primitive: keys.primitive(),
                    // Another thread of this client holds it: the attempt
                    // would fail.
                    first: &|| match keys.hands_over().then(|| {
                        inner
                            .local_owners
                            .sibling_of(&keys.name, holder.field(), Instant::now())
                    }) {
                        Some(Sibling::Holds(left)) => First::Park(left),
                        _ => First::Attempt,
                    },
                    name: &keys.name,
                    cancel: self.cancel.as_ref(),
                    // A releasing thread of this client may hand it the lock.
                    seat: keys.hands_over().then(|| crate::pubsub::Seat {
                        field: holder.field().to_owned(),
                        lease_ms,
                    }),
                },
                step,
            ),
        };
        match waited {
            Ok(Some(crate::wait::Done::Attempted(token))) => {
                acquired(token, sent.get(), attempt_key.take()).map(Some)
            }
            // The lease runs from the handoff script's send.
            Ok(Some(crate::wait::Done::HandedOver(handed_at))) => {
                acquired(None, handed_at, None).map(Some)
            }
            Ok(None) => {
                // try_lock never queued; a fair waiter that gave up leaves now.
                if enqueue {
                    keys.give_up(backend, &holder, allowance_ms)?;
                }
                Ok(None)
            }
            Err(err) => {
                // Best effort: do not leave a fair waiter queued after an error.
                if enqueue {
                    let _ = keys.give_up(backend, &holder, allowance_ms);
                }
                if let Some(id) = attempt_key.take().filter(|_| err.is_connection_error()) {
                    let key = id.key(&keys.name);
                    self.undo_attempt(&holder, lease_ms, sent.get(), key, &err);
                }
                Err(err)
            }
        }
    }

    /// Builds the guard of a successful acquisition, registering the hold
    /// with the watchdog when no lease was given.
    #[allow(clippy::too_many_arguments)]
    fn guard<H: GuardHolder>(
        &self,
        holder: &Holder,
        lease: Option<Duration>,
        lease_ms: i64,
        sent: Instant,
        token: Option<u64>,
        attempt: Option<AttemptId>,
        by: H,
    ) -> Result<LockGuard<H>> {
        let renewal = Arc::new(Renewal {
            keys: Arc::clone(&self.keys),
            holder: holder.clone(),
        });
        let (lease, watchdog) = match lease {
            None => (self.client.inner.watchdog.start(&renewal, sent)?, true),
            Some(length) => (Lease::new(sent, length), false),
        };
        if hold_taken(self.local_key(holder), H::EXPLICIT) && self.keys.hands_over() {
            self.client.inner.local_owners.taken(&renewal, &lease);
        }
        crate::telemetry::hold_started(self.keys.primitive());
        Ok(LockGuard {
            lock: self.clone(),
            renewal,
            lease_ms: std::cell::Cell::new(lease_ms),
            lease,
            watchdog,
            token,
            attempt,
            released: false,
            acquired_at: Instant::now(),
            holder: by,
        })
    }

    /// The key of this thread's local hold count for `holder` on this lock.
    fn local_key(&self, holder: &Holder) -> String {
        format!("{}@{}", holder.field(), self.keys.name)
    }

    /// After an acquire failed with a connection error, its latest
    /// attempt (recorded under `attempt_key`) may still have run, or run
    /// later: the cleanup worker undoes exactly that attempt's hold, or
    /// marks it undone so that it is refused if it arrives later still (see
    /// `ops::lock::undo_acquire`). One landing is final: no re-sends, and
    /// the holder's next acquire, which runs it first
    /// ([`Cleanup::settle`](crate::cleanup::Cleanup::settle)), cancels
    /// nothing. Holds of the same holder taken by other threads (a shared
    /// `LockOwner`) or by a retry are not touched.
    fn undo_attempt(
        &self,
        holder: &Holder,
        lease_ms: i64,
        sent: Instant,
        attempt_key: String,
        cause: &Error,
    ) {
        let backend = Arc::clone(&self.client.inner.backend);
        let keys = Arc::clone(&self.keys);
        let undo_holder = holder.clone();
        let task: crate::cleanup::Task = Box::new(move || {
            keys.undo_attempt(backend.as_ref(), &undo_holder, lease_ms, &attempt_key)
                .map(|_| true)
        });
        self.release_later(holder, task, sent, lease_ms, false, cause);
    }

    /// Hands `task` to the cleanup worker, to be retried until it lands or
    /// the hold it releases would have expired on its own (`lease_ms` after
    /// `from`, when the hold was last set).
    fn release_later(
        &self,
        holder: &Holder,
        task: crate::cleanup::Task,
        from: Instant,
        lease_ms: i64,
        recheck: bool,
        cause: &Error,
    ) {
        let lease = Duration::from_millis(u64::try_from(lease_ms).unwrap_or(0));
        if let Some(give_up_at) = from.checked_add(lease) {
            self.client.inner.cleanup.push(
                &self.keys.name,
                holder.field(),
                task,
                give_up_at,
                recheck,
                cause,
            );
        }
    }

    /// A cleanup task: the release under `latch` (a repeat of one whose
    /// reply was lost returns that first outcome), then, when `drain` is
    /// set, further releases while the store still counts holds.
    fn release_task(
        &self,
        holder: &Holder,
        lease_ms: i64,
        latch: String,
        drain: bool,
    ) -> crate::cleanup::Task {
        let backend = Arc::clone(&self.client.inner.backend);
        let keys = Arc::clone(&self.keys);
        let holder = holder.clone();
        let mut latch = latch;
        Box::new(move || {
            match keys.release(backend.as_ref(), &holder, lease_ms, &latch, UNLOCK_LATCH_MS)? {
                Release::StillHeld if drain => {
                    latch = new_latch(&keys.name);
                    Ok(false)
                }
                Release::StillHeld
                | Release::NotHeld
                | Release::Released
                | Release::Transferred => {
                    // A recheck (see `Cleanup::push`) is a new release.
                    latch = new_latch(&keys.name);
                    Ok(true)
                }
            }
        })
    }

    /// Releases one hold. When `outermost` (this thread has no other guard
    /// of this lock) and the store still counts holds of this holder, those
    /// are phantoms: holds the store gained or kept without a guard, e.g. a
    /// release that went to an old master during a failover while the
    /// promoted replica kept the hold. Left alone, a thread that keeps
    /// re-taking the lock would keep them alive for ever (each re-take is a
    /// reentry that resets the lease) and starve every other holder; so
    /// they are released too.
    fn release(
        &self,
        holder: &Holder,
        lease_ms: i64,
        outermost: bool,
        record: Option<String>,
    ) -> Result<()> {
        let backend = self.client.inner.backend.as_ref();
        // A direct handoff to a parked waiter of this client, if one is
        // seated: the release script then hands it the lock (one round
        // trip for the whole handoff, instead of a release, a pub/sub
        // message, a wake and an acquire).
        let mut offer = if outermost && self.keys.hands_over() {
            self.client
                .inner
                .subscriber
                .offer(&self.keys.wait_channel(holder))
        } else {
            None
        };
        // Also when a handoff was sent: the waiter's lease runs from it.
        let started = Instant::now();
        let mut phantoms = 0;
        // The hold's attempt record, when it has one, is this release's
        // unlock latch: the release script turns it into the outcome (one
        // key written instead of the record deleted and a latch created, and
        // no random id drawn). Phantoms get fresh latches.
        // The reentrant and fenced locks only: the other kinds' release
        // scripts take a fresh latch and delete the record beside it.
        let (latch_record, apart) = match record {
            Some(record) if self.keys.record_is_latch() => (Some(record), None),
            record => (None, record),
        };
        let mut latch = latch_record.unwrap_or_else(|| new_latch(&self.keys.name));
        let mut retries = RELEASE_RETRIES.iter();
        // One deadline over the in-line attempts: each round trip and each
        // connection opening gets what is left of one response timeout
        // plus the retry budget (a partition that drops packets would
        // otherwise cost a whole connection timeout per opening). The
        // steps after it share one round-trip floor: hence the floor less.
        let _deadline = crate::deadline::enter(backend.response_timeout().and_then(|timeout| {
            started.checked_add(
                (timeout + RELEASE_RETRY_BUDGET).saturating_sub(crate::deadline::ROUND_TRIP_FLOOR),
            )
        }));
        loop {
            let result = match &offer {
                Some(offer) => ops::lock::release_to(
                    backend,
                    &self.keys.name,
                    offer.channel(),
                    &holder.id,
                    lease_ms,
                    &latch,
                    UNLOCK_LATCH_MS,
                    &offer.seat.field,
                    offer.seat.lease_ms,
                ),
                // The record goes with the first release (a retry behind
                // the same latch repeats it harmlessly; phantoms have none).
                None => match apart.as_deref().filter(|_| phantoms == 0) {
                    Some(record) => self.keys.release_recorded(
                        backend,
                        holder,
                        lease_ms,
                        &latch,
                        UNLOCK_LATCH_MS,
                        record,
                    ),
                    None => self
                        .keys
                        .release(backend, holder, lease_ms, &latch, UNLOCK_LATCH_MS),
                },
            };
            match result {
                Err(err) if err.is_connection_error() => match retries.next() {
                    // The reply may be lost after the release happened: the
                    // latch makes the retry return that outcome, not release twice.
                    Some(pause) if started.elapsed() < RELEASE_RETRY_BUDGET => {
                        std::thread::sleep(*pause)
                    }
                    _ => {
                        if let Some(offer) = offer.take() {
                            self.settle(offer, Handoff::Unknown);
                        }
                        // The lease runs out on its own at the latest (the
                        // watchdog no longer renews it); until then the
                        // release keeps being sent in the background, so
                        // waiters do not wait out a whole lease.
                        let task = self.release_task(holder, lease_ms, latch, outermost);
                        self.release_later(holder, task, Instant::now(), lease_ms, false, &err);
                        return Err(err);
                    }
                },
                Err(err) => {
                    // Refused before any write (the scripts check first).
                    if let Some(offer) = offer.take() {
                        self.settle(offer, Handoff::Refused);
                    }
                    return Err(err);
                }
                Ok(Release::Transferred) => {
                    if let Some(offer) = offer.take() {
                        // The waiter holds it from now: record that before
                        // this thread (about to ask again, typically) can
                        // look, or it would send an attempt that must fail.
                        // The waiter's guard replaces this with its lease.
                        let lease = Lease::new(
                            started,
                            Duration::from_millis(u64::try_from(offer.seat.lease_ms).unwrap_or(0)),
                        );
                        let hold = Arc::new(Renewal {
                            keys: Arc::clone(&self.keys),
                            holder: self.keys.holder(offer.seat.field.clone()),
                        });
                        self.client.inner.local_owners.taken(&hold, &lease);
                        self.settle(offer, Handoff::Granted(started));
                    }
                    return Ok(());
                }
                Ok(outcome) => {
                    // Not handed over: the waiter goes back to waiting.
                    if let Some(offer) = offer.take() {
                        self.settle(offer, Handoff::Refused);
                    }
                    match outcome {
                        Release::StillHeld if outermost && phantoms < PHANTOM_RELEASES => {
                            phantoms += 1;
                            latch = new_latch(&self.keys.name);
                        }
                        Release::NotHeld if phantoms > 0 => return Ok(()),
                        outcome => return self.released(holder, outcome),
                    }
                }
            }
        }
    }

    /// Tells the offered waiter how its handoff went. If the lock was handed
    /// over after the waiter stopped waiting, releases the waiter's hold
    /// (which publishes the unlock its other waiters need), in the
    /// background if Redis does not answer.
    fn settle(&self, offer: Offer, outcome: Handoff) {
        let waiter = self.keys.holder(offer.seat.field.clone());
        let lease_ms = offer.seat.lease_ms;
        if !self.client.inner.subscriber.resolve(offer, outcome) {
            return;
        }
        // The waiter had left: it holds nothing, whatever was recorded.
        self.client
            .inner
            .local_owners
            .released(&self.keys.name, waiter.field());
        let backend = self.client.inner.backend.as_ref();
        let latch = new_latch(&self.keys.name);
        if let Err(err) = self
            .keys
            .release(backend, &waiter, lease_ms, &latch, UNLOCK_LATCH_MS)
        {
            let task = self.release_task(&waiter, lease_ms, latch, false);
            self.release_later(&waiter, task, Instant::now(), lease_ms, false, &err);
        }
    }

    fn released(&self, holder: &Holder, outcome: Release) -> Result<()> {
        let inner = &self.client.inner;
        match outcome {
            Release::NotHeld => Err(Error::NotHeld {
                name: self.keys.name.clone(),
            }),
            Release::StillHeld | Release::Transferred => Ok(()),
            Release::Released => {
                if self.keys.defers_to_woken_waiter() {
                    inner
                        .subscriber
                        .note_release(&self.keys.wait_channel(holder));
                }
                Ok(())
            }
        }
    }
}

/// Proof that the current thread holds a [`Lock`]; created by
/// [`Lock::lock`], [`Lock::try_lock`] and their variants.
///
/// Dropping it unlocks (errors go to the client's
/// [`EventHandler`](crate::EventHandler)); [`unlock`](Self::unlock) is the
/// explicit form that returns the error. It owns a clone of the handle, so it
/// can be stored and returned. It is `!Send` (see [`HolderIsTheThread`](crate::HolderIsTheThread)):
/// the holder is the thread. A lock taken for an explicit
/// [`LockOwner`](crate::LockOwner) ([`Lock::owned_by`]) gives a
/// `LockGuard<LockOwner>`, [`OwnedLockGuard`](crate::OwnedLockGuard), which
/// is `Send` and has the same methods.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let guard = client.lock("jobs").lock()?;
/// assert!(!guard.is_lost());
/// guard.unlock()?;
/// # Ok::<(), redisync::Error>(())
/// ```
#[must_use = "if unused the lock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct LockGuard<H: GuardHolder = HolderIsTheThread> {
    lock: Lock,
    /// The holder and how the watchdog renews it.
    renewal: Arc<Renewal>,
    /// The lease each reentrant release resets (`extend` changes it).
    lease_ms: std::cell::Cell<i64>,
    /// The hold's lease by the local clock (shared with the watchdog).
    lease: Arc<Lease>,
    /// Whether the watchdog renews it.
    watchdog: bool,
    /// A fenced lock's fencing token for this acquisition.
    token: Option<u64>,
    /// The record of the acquire attempt that took this hold
    /// (`{name}:redisync_attempt:<id>`): its release's unlock latch.
    attempt: Option<AttemptId>,
    released: bool,
    /// When it was handed out (the hold time of the metrics).
    acquired_at: Instant,
    /// Who holds it: the thread (then the guard must not move to another)
    /// or an explicit owner.
    holder: H,
}

impl<H: GuardHolder> fmt::Debug for LockGuard<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.lock.keys.name)
            .field("watchdog", &self.watchdog)
            .field("token", &self.token)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl<H: GuardHolder> LockGuard<H> {
    /// The lock this guard holds.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let guard = client.lock("jobs").lock()?;
    /// assert_eq!(guard.lock().name(), "jobs");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// The fencing token of this acquisition: `Some` for a lock from
    /// [`Client::fenced_lock`], `None` for every other kind.
    ///
    /// Each acquisition of a fenced lock, reentrant ones included, gets a
    /// token greater than every token handed out before for that name, by
    /// any client. Pass it with every write to the protected resource and
    /// have the resource reject a token lower than the highest it has seen:
    /// a holder that lost the lock (a pause longer than its lease) is then
    /// refused instead of overwriting its successor's work.
    ///
    /// Each token is at least the server's clock in microseconds as well as
    /// one more than the last, so tokens keep increasing even when Redis
    /// loses the counter (a restart without persistence, a failover to a
    /// replica that missed it), provided the clock of the server that
    /// answers afterwards reads later than the old one's did at its last
    /// token (clock skew smaller than the outage).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.fenced_lock("ledger");
    /// let first = lock.lock()?.token().unwrap();
    /// let second = lock.lock()?.token().unwrap();
    /// assert!(second > first);
    /// assert_eq!(client.lock("other").lock()?.token(), None);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "getToken")]
    pub fn token(&self) -> Option<u64> {
        self.token
    }

    /// True when this hold can no longer be trusted: the watchdog found the
    /// lock gone or could not renew it in time, or a fixed lease has run out
    /// by the local clock. Check it before acting on the protected resource.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let guard = client.lock("jobs").lock_with_lease(Duration::from_millis(20))?;
    /// std::thread::sleep(Duration::from_millis(40));
    /// assert!(guard.is_lost());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[must_use = "is_lost() only reports: check it before acting on the protected resource"]
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Whether the hold is not known lost and its lease runs more than
    /// `margin` past `at` (RedLock's validity check).
    pub(crate) fn holds_beyond(&self, at: Instant, margin: Duration) -> bool {
        self.lease.holds_beyond(at, margin)
    }

    /// Who holds it.
    pub(crate) fn holder(&self) -> &H {
        &self.holder
    }

    /// The lease each acquisition and renewal sets, in ms.
    pub(crate) fn lease_ms(&self) -> i64 {
        self.lease_ms.get()
    }

    /// Sets this hold's lease to `lease` from now, if this thread still
    /// holds the lock: for a lock taken with a fixed lease
    /// ([`lock_with_lease`](Lock::lock_with_lease),
    /// [`try_lock_for_with_lease`](Lock::try_lock_for_with_lease)), which
    /// Redisson does by locking again with a new `leaseTime`. A shorter
    /// `lease` than what is left shortens it.
    ///
    /// Works for every lock kind: reentrant, fenced, fair, and both halves
    /// of a read-write lock. The lease is per (client, thread), shared by
    /// this thread's reentrant holds of the lock: extending one extends
    /// them all, and a later release of an inner hold resets the lease to
    /// that hold's own lease (Redisson's rule). For a read lock, this
    /// thread's read holds get `lease`, and the lock lives as long as the
    /// longest lease of all its readers. For a write lock, `lease` also
    /// bounds the read holds this thread took while writing (they live in
    /// the same key). A fair lock's queued waiters keep their queue slots.
    ///
    /// The guard's [`is_lost`](Self::is_lost) then counts from this call.
    ///
    /// # Errors
    /// - `InvalidArgument` for a lease under 1 ms or over
    ///   [`MAX_LEASE`](crate::MAX_LEASE), and for a guard the watchdog
    ///   renews ([`Lock::lock`], [`Lock::try_lock`], [`Lock::try_lock_for`]):
    ///   its lease is the watchdog's, which would undo the change at its
    ///   next renewal (take the lock with a lease to choose it yourself).
    /// - `NotHeld` when this thread no longer holds the lock (its lease ran
    ///   out, or it was force-unlocked); the guard is then lost.
    /// - `Backend` if Redis fails: the lease may or may not have changed,
    ///   so [`is_lost`](Self::is_lost) trusts the earlier of the two ends.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("jobs");
    /// let guard = lock.lock_with_lease(Duration::from_millis(100))?;
    /// guard.extend(Duration::from_secs(60))?;          // the work takes longer
    /// assert!(lock.remaining_ttl()?.unwrap() > Duration::from_secs(50));
    ///
    /// let watched = client.lock("other").lock()?;     // the watchdog's lease
    /// assert!(watched.extend(Duration::from_secs(60)).unwrap_err().is_invalid_argument());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn extend(&self, lease: Duration) -> Result<()> {
        let lease_ms = crate::error::millis("lease", lease)?;
        let keys = &self.lock.keys;
        if self.watchdog {
            return Err(Error::invalid(
                "lease",
                format!(
                    "the lease of {:?} is renewed by the watchdog (the lock was taken \
                     without a lease); extend applies to a lock taken with a fixed lease \
                     (lock_with_lease, try_lock_for_with_lease)",
                    keys.name
                ),
            ));
        }
        let backend = self.lock.client.inner.backend.as_ref();
        let sent = Instant::now();
        match keys.extend(backend, &self.renewal.holder, lease_ms) {
            Ok(true) => {
                self.lease.renewed(sent, lease);
                self.lease_ms.set(lease_ms);
                Ok(())
            }
            Ok(false) => {
                self.lease.mark_lost();
                Err(Error::NotHeld {
                    name: keys.name.clone(),
                })
            }
            Err(err) => {
                if err.is_connection_error() {
                    self.lease.maybe_changed(sent, lease);
                    // A later release must cover the longer lease too.
                    self.lease_ms.set(self.lease_ms.get().max(lease_ms));
                }
                Err(err)
            }
        }
    }

    /// Releases this hold and returns any error.
    ///
    /// Takes at most about one response timeout plus 300 ms of retries.
    ///
    /// # Errors
    /// `NotHeld` when the lock was no longer this thread's (lease expired,
    /// force-unlocked); `Backend` if Redis failed after retries: the
    /// release then goes on in the background until it lands or the lease
    /// runs out, whichever comes first.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// client.lock("jobs").lock()?.unlock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn unlock(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        self.released = true;
        crate::telemetry::hold_ended(self.lock.keys.primitive(), self.acquired_at.elapsed());
        let outermost = hold_released(&self.lock.local_key(&self.renewal.holder), H::EXPLICIT);
        // The watch goes first: a renewal answered after the release ran
        // would find the lock gone and report a loss that is none.
        if self.watchdog {
            self.lock.client.inner.watchdog.stop(&self.renewal);
        }
        let records = outermost && self.lock.keys.hands_over();
        if records {
            // Before the release is sent: a thread that still finds this
            // hold recorded took its snapshot before the unlock message.
            let field = self.renewal.holder.field();
            self.lock
                .client
                .inner
                .local_owners
                .released(&self.lock.keys.name, field);
        }
        let result = self.lock.release(
            &self.renewal.holder,
            self.lease_ms.get(),
            outermost,
            self.attempt.map(|id| id.key(&self.lock.keys.name)),
        );
        if records {
            let inner = &self.lock.client.inner;
            // A thread of this client may have parked on this hold without
            // an attempt (see `local_owner`); the store lost it, so no
            // unlock will be published: wake a waiter to try.
            if matches!(result, Err(Error::NotHeld { .. })) {
                inner
                    .subscriber
                    .wake_one(&self.lock.keys.wait_channel(&self.renewal.holder));
            }
        }
        result
    }
}

impl<H: GuardHolder> Drop for LockGuard<H> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Err(error) = self.release() {
            self.lock
                .client
                .inner
                .events
                .on_unlock_failed(&UnlockFailedEvent {
                    name: self.lock.keys.name.clone(),
                    error,
                });
        }
    }
}
