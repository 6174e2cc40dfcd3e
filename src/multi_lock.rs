//! [`MultiLock`] (Redisson's `RedissonMultiLock`): several locks taken as
//! one, all or none; and [`RedLock`] (Redisson's `RedissonRedLock`, the
//! Redlock algorithm): one lock held on a majority of independent Redis
//! masters.
//!
//! How the parts are taken is told on [`MultiLock`]; what a `RedLock`
//! guarantees, on [`RedLock`]'s safety model.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::wait::Wait;
use crate::{Error, Lock, LockGuard, Result};

/// Redisson's per-part wait of a multi-lock round when no wait is given.
const ROUND_WAIT_PER_PART: Duration = Duration::from_millis(1500);
/// Longest pause before the next round when no part was contended (a round
/// that reached the quorum too late to be valid).
const MAX_RETRY_JITTER_MS: u64 = 20;

/// Several [`Lock`]s taken as one: all or none (Redisson's
/// `RedissonMultiLock`). Parts may be of any kind (reentrant, fenced, fair,
/// read, write) and on different clients and servers. Cheap to clone,
/// `Send + Sync`.
///
/// # How parts are taken
///
/// Both run one loop over their parts, each a [`Lock`] of any kind, on any
/// client. A round tries every part without waiting. When a part is held
/// elsewhere and the round falls short of the quorum (every part for a
/// `MultiLock`, a majority for a `RedLock`), the round releases every part it
/// took and the next round starts by *waiting* on that contended part, with
/// pub/sub wake-ups as for a single lock, while holding nothing. A thread
/// therefore never waits while it holds a part: two multi-locks over the same
/// locks in different orders cannot deadlock, and a waiting multi-lock does
/// not keep single-lock users out (the algorithm of C++'s `std::lock`).
/// Without a wait, a round's wait is capped at Redisson's 1.5 s × the number
/// of parts, after which the loop starts again.
///
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// use redisync::MultiLock;
/// let transfer = MultiLock::new([client.lock("account:1"), client.lock("account:2")])?;
/// let guard = transfer.lock()?;               // both held
/// assert!(client.lock("account:2").is_locked()?);
/// guard.unlock()?;                            // both released
/// # Ok::<(), redisync::Error>(())
/// ```
#[doc(alias = "RedissonMultiLock")]
#[doc(alias = "getMultiLock")]
#[must_use = "a multi-lock takes nothing by itself: call .lock() or .try_lock() on it and keep the guard"]
#[derive(Clone)]
pub struct MultiLock {
    parts: Parts,
}

/// One lock held on a majority of independent Redis masters (Redisson's
/// `RedissonRedLock`, the Redlock algorithm). Read the
/// [safety model](RedLock#safety-model) first. Cheap to
/// clone, `Send + Sync`.
///
/// ```
/// use redisync::{Client, MemoryBackend, RedLock};
/// // One client per independent master (here, three in-memory stores).
/// let clients = (0..3)
///     .map(|_| Client::builder().backend(MemoryBackend::new()).build())
///     .collect::<Result<Vec<_>, _>>()?;
/// let redlock = RedLock::new(clients.iter().map(|c| c.lock("leader")))?;
/// assert_eq!(redlock.quorum(), 2);
/// let guard = redlock.lock()?;
/// assert!(!guard.is_lost());
/// guard.unlock()?;
/// # Ok::<(), redisync::Error>(())
/// ```
///
/// # Safety model
///
/// A `RedLock` is acquired when a majority (N/2 + 1) of its N parts, each on
/// an independent master, grant it, and each granted part's lease still has
/// more than a clock-drift allowance (1 % of the lease + 2 ms) to run, timed
/// from when its request was sent. A round that falls short releases what it
/// took. The watchdog renews every part; the guard reports
/// [`is_lost`](RedLockGuard::is_lost) once fewer than a majority of parts are
/// still renewed and valid.
///
/// What that does **not** give you (Martin Kleppmann's critique of Redlock,
/// which Redisson itself accepted when it deprecated `RedissonRedLock`):
///
/// - **Pauses.** A holder that stops (a GC-like pause, swapping, a stopped
///   VM) for longer than its lease wakes up believing it holds a lock that
///   has expired and been granted to someone else. `is_lost` narrows the
///   window but cannot close it: the pause can fall between the check and
///   the write.
/// - **Clock jumps.** Leases expire by each master's clock. A master whose
///   clock jumps forward expires a part early; one that restarts without
///   persistence forgets it. Either can let a second holder reach a majority
///   while the first still believes it holds the lock.
/// - **Network delays** longer than the drift allowance have the same effect.
///
/// Under those faults RedLock stays an efficiency lock (rarely doing work
/// twice), not a correctness one. A resource that must never accept a stale
/// holder's write needs fencing: take a [`fenced lock`](crate::Client::fenced_lock)
/// and have the resource reject any [`token`](crate::LockGuard::token)
/// lower than the highest it has seen.
///
/// A part whose acquire reply is lost (a timeout after the master applied
/// it) is not released by the failed round; it frees itself when its lease
/// runs out. A master that refuses connections (stopped, restarting) fails
/// its part at once. With a wait (`try_lock_for(w)`), every part's round
/// trips keep to the caller's deadline and no part is tried once it has
/// passed: the call returns within `w` plus one round trip's floor (100 ms)
/// however many masters are frozen, and a round that took longer than a
/// part's lease (a slow master among them) counts that part as expired and
/// releases the round. Without a wait (`lock()`, `try_lock()`), a master that
/// does not answer at all (frozen, a network partition) holds a round up to
/// its client's
/// [`connection_timeout`](crate::ClientBuilder::connection_timeout) or
/// [`response_timeout`](crate::ClientBuilder::response_timeout), so give
/// RedLock clients short ones.
#[doc(alias = "RedissonRedLock")]
#[doc(alias = "Redlock")]
#[doc(alias = "getRedLock")]
#[must_use = "a RedLock takes nothing by itself: call .lock() or .try_lock() on it and keep the guard"]
#[derive(Clone)]
pub struct RedLock {
    parts: Parts,
}

/// The parts and the rule both kinds share.
#[derive(Clone)]
struct Parts {
    locks: Arc<[Lock]>,
    /// How many parts must be held.
    quorum: usize,
    /// Whether parts' clocks may drift apart (RedLock): each held part must
    /// then outlive a drift allowance.
    drift: bool,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("locks", &self.parts.locks)
            .finish()
    }
}

impl fmt::Debug for RedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLock")
            .field("locks", &self.parts.locks)
            .field("quorum", &self.parts.quorum)
            .finish()
    }
}

/// The clock-drift allowance of a lease (Redlock's 1 % + 2 ms).
fn drift_allowance(lease_ms: i64) -> Duration {
    let ms = u64::try_from(lease_ms / 100).unwrap_or(0);
    Duration::from_millis(ms.saturating_add(2))
}

fn collect(locks: impl IntoIterator<Item = Lock>, kind: &str) -> Result<Arc<[Lock]>> {
    let locks: Arc<[Lock]> = locks.into_iter().collect();
    if locks.is_empty() {
        return Err(Error::invalid(
            "locks",
            format!("a {kind} needs at least one lock"),
        ));
    }
    Ok(locks)
}

impl Parts {
    fn round_wait(&self) -> Duration {
        let parts = u32::try_from(self.locks.len()).unwrap_or(u32::MAX);
        ROUND_WAIT_PER_PART.saturating_mul(parts)
    }

    /// The wait of a round that starts by waiting on one part.
    fn round(&self, wait: Wait) -> Wait {
        let cap = self.round_wait();
        match wait {
            Wait::Never => Wait::Never,
            Wait::Forever => Wait::for_duration(cap),
            Wait::Until(deadline, allowance) => {
                let capped = Instant::now()
                    .checked_add(cap)
                    .map_or(deadline, |c| c.min(deadline));
                Wait::Until(capped, allowance)
            }
        }
    }

    /// Whether a held part still counts: not lost, and (RedLock) its lease
    /// outlives the drift allowance.
    fn counts(&self, guard: &LockGuard, now: Instant) -> bool {
        let margin = if self.drift {
            drift_allowance(guard.lease_ms())
        } else {
            Duration::ZERO
        };
        guard.holds_beyond(now, margin)
    }

    /// Takes the parts as the kind's rule says, within `wait`: every
    /// part's round trips keep to the caller's deadline (see `deadline`),
    /// and no part is tried after it has passed, so `try_lock_for(w)`
    /// returns within `w` plus one round trip's floor.
    fn acquire(&self, wait: Wait, lease: Option<Duration>) -> Result<Option<Vec<LockGuard>>> {
        if let Some(lease) = lease {
            crate::error::millis("lease", lease)?;
        }
        crate::deadline::within(wait.deadline(), || self.acquire_within(wait, lease))
    }

    fn acquire_within(
        &self,
        wait: Wait,
        lease: Option<Duration>,
    ) -> Result<Option<Vec<LockGuard>>> {
        let total = self.locks.len();
        let spare = total - self.quorum;
        // The part the next round waits on, holding nothing.
        let mut first: Option<usize> = None;
        loop {
            let mut held: Vec<(usize, LockGuard)> = Vec::with_capacity(total);
            let mut errors: Vec<(usize, Error)> = Vec::new();
            let mut contended: Option<usize> = None;
            let mut refused = 0usize;
            if let Some(part) = first {
                match self.locks[part].acquire(self.round(wait), lease) {
                    Ok(Some(guard)) => held.push((part, guard)),
                    Ok(None) => {
                        if wait.passed() {
                            return Ok(None);
                        }
                        // The round's cap ran out: wait on it again.
                        continue;
                    }
                    Err(err) => {
                        refused += 1;
                        errors.push((part, Self::store_failure(err)?));
                    }
                }
            }
            for (index, lock) in self.locks.iter().enumerate() {
                if Some(index) == first {
                    continue;
                }
                // Stop as soon as the quorum is out of reach, or the
                // caller's deadline has passed: a part tried now would
                // still get a round trip's floor, one per part.
                if refused > spare || crate::deadline::passed() {
                    break;
                }
                match lock.acquire(Wait::Never, lease) {
                    Ok(Some(guard)) => held.push((index, guard)),
                    Ok(None) => {
                        refused += 1;
                        contended.get_or_insert(index);
                    }
                    Err(err) => {
                        refused += 1;
                        errors.push((index, Self::store_failure(err)?));
                    }
                }
            }
            let now = Instant::now();
            let valid = held
                .iter()
                .filter(|(_, guard)| self.counts(guard, now))
                .count();
            if valid >= self.quorum {
                held.sort_by_key(|(index, _)| *index);
                return Ok(Some(held.into_iter().map(|(_, guard)| guard).collect()));
            }
            // Short of the quorum: release what this round took (a failed
            // release is reported to the part's client's event handler).
            drop(held);
            if errors.len() > spare {
                return Err(self.unreachable(errors));
            }
            if matches!(wait, Wait::Never) || wait.passed() {
                return Ok(None);
            }
            first = contended;
            if first.is_none() {
                // Quorum reached but not valid in time, or parts failed:
                // pause a little, at random, so competitors spread out.
                std::thread::sleep(jitter());
                if wait.passed() {
                    return Ok(None);
                }
            }
        }
    }

    /// A part's error that a quorum may outvote: a store failure. Any
    /// other error (an invalid part, a key of another type) is the caller's
    /// to see as it is; returning it drops, so releases, the round's parts.
    fn store_failure(err: Error) -> Result<Error> {
        match err {
            Error::Backend { .. } => Ok(err),
            other => Err(other),
        }
    }

    /// The error of a round in which too many parts failed to answer.
    fn unreachable(&self, mut errors: Vec<(usize, Error)>) -> Error {
        let failed = errors.len();
        let (index, first) = errors.swap_remove(0);
        let name = self.locks[index].name().to_owned();
        let connection = first.is_connection_error();
        let context = if self.drift {
            format!(
                "RedLock: {failed} of {} masters failed, so no majority of {} can be reached \
                 (first failure: part {index}, lock {name:?})",
                self.locks.len(),
                self.quorum,
            )
        } else {
            format!("MultiLock: part {index} (lock {name:?}) failed")
        };
        Error::backend_caused_by(context, first, connection)
    }
}

impl Parts {
    /// Whether at least a quorum of parts is locked, by anyone. Parts that
    /// fail are an error only when they could change the answer.
    fn is_locked(&self) -> Result<bool> {
        let mut locked = 0usize;
        let mut failed: Vec<(usize, Error)> = Vec::new();
        for (index, lock) in self.locks.iter().enumerate() {
            match lock.is_locked() {
                Ok(true) => locked += 1,
                Ok(false) => {}
                Err(err) => failed.push((index, err)),
            }
        }
        if locked >= self.quorum {
            return Ok(true);
        }
        if locked + failed.len() < self.quorum {
            return Ok(false);
        }
        let (index, err) = failed.swap_remove(0);
        Err(self.part_error(index, "is_locked", err))
    }

    /// Force-unlocks every part (each one round trip, bounded by its
    /// client's response timeout); whether any was held. After trying all,
    /// the first failure, naming its part.
    fn force_unlock(&self) -> Result<bool> {
        let mut held = false;
        let mut first_failure: Option<(usize, Error)> = None;
        for (index, lock) in self.locks.iter().enumerate() {
            match lock.force_unlock() {
                Ok(was_held) => held |= was_held,
                Err(err) => {
                    first_failure.get_or_insert((index, err));
                }
            }
        }
        match first_failure {
            None => Ok(held),
            Some((index, err)) => Err(self.part_error(index, "force_unlock", err)),
        }
    }

    /// `err` of part `index` in `operation`, with the part named.
    fn part_error(&self, index: usize, operation: &str, err: Error) -> Error {
        let kind = if self.drift { "RedLock" } else { "MultiLock" };
        let name = self.locks[index].name();
        let part = format!("{kind} {operation}: part {index} (lock {name:?})");
        match err {
            Error::Backend { connection, .. } => {
                Error::backend_caused_by(format!("{part} failed"), err, connection)
            }
            Error::Protocol { detail } => Error::protocol(format!("{part}: {detail}")),
            Error::InvalidArgument { what, why } => Error::invalid(what, format!("{part}: {why}")),
            other => other,
        }
    }
}

/// A random pause of up to [`MAX_RETRY_JITTER_MS`].
fn jitter() -> Duration {
    let random = uuid::Uuid::new_v4().as_u128();
    let ms = u64::try_from(random % u128::from(MAX_RETRY_JITTER_MS)).unwrap_or(0);
    Duration::from_millis(ms + 1)
}

/// Releases every part; returns the first error (all are attempted).
fn release_all(parts: Vec<LockGuard>) -> Vec<Result<()>> {
    parts.into_iter().map(LockGuard::unlock).collect()
}

/// The acquire methods both kinds share, with one doc each.
macro_rules! acquire_methods {
    ($guard:ident, $setup:literal) => {
        /// Blocks until every part (a `RedLock`: a majority) is held; the
        /// parts' watchdogs keep their leases alive until the guard is
        /// dropped or unlocked.
        ///
        /// # Errors
        /// `InvalidArgument` for a part with an empty name; `Backend` when a
        /// part's store fails (a `RedLock`: more than a minority of them);
        /// `Protocol` if a key holds another type.
        ///
        /// ```
        #[doc = $setup]
        /// let guard = lock.lock()?;
        /// # Ok::<(), redisync::Error>(())
        /// ```
        pub fn lock(&self) -> Result<$guard> {
            self.take(Wait::Forever, None)?
                .ok_or_else(|| Error::protocol("an unbounded wait ended without the lock"))
        }

        /// Blocks until held, with a fixed `lease` on every part (no
        /// watchdog). Each part's lease starts when that part is taken; the
        /// parts of one round are taken one round trip apart.
        ///
        /// # Errors
        /// As [`lock`](Self::lock), and `InvalidArgument` for a lease under
        /// 1 ms or over [`MAX_LEASE`](crate::MAX_LEASE), before any part is taken.
        ///
        /// ```
        /// # use std::time::Duration;
        #[doc = $setup]
        /// let guard = lock.lock_with_lease(Duration::from_secs(10))?;
        /// # Ok::<(), redisync::Error>(())
        /// ```
        pub fn lock_with_lease(&self, lease: Duration) -> Result<$guard> {
            self.take(Wait::Forever, Some(lease))?
                .ok_or_else(|| Error::protocol("an unbounded wait ended without the lock"))
        }

        /// One round that never waits: `Ok(None)` if a part is held
        /// elsewhere (a `RedLock`: too many parts), having released what it
        /// took.
        ///
        /// # Errors
        /// As [`lock`](Self::lock).
        ///
        /// ```
        #[doc = $setup]
        /// let first = lock.try_lock()?;
        /// assert!(first.is_some());
        /// # Ok::<(), redisync::Error>(())
        /// ```
        #[doc(alias = "tryLock")]
        #[must_use = "a guard that is not bound is released at once: `if let Some(guard) = lock.try_lock()? { ... }`"]
        pub fn try_lock(&self) -> Result<Option<$guard>> {
            self.take(Wait::Never, None)
        }

        /// Waits up to `wait` in all; `Ok(None)` on timeout, holding nothing.
        ///
        /// # Errors
        /// As [`lock`](Self::lock).
        ///
        /// ```
        /// # use std::time::Duration;
        #[doc = $setup]
        /// if let Some(guard) = lock.try_lock_for(Duration::from_secs(1))? {
        ///     // ...
        /// }
        /// # Ok::<(), redisync::Error>(())
        /// ```
        #[doc(alias = "tryLock")]
        #[must_use = "a guard that is not bound is released at once: `if let Some(guard) = lock.try_lock()? { ... }`"]
        pub fn try_lock_for(&self, wait: Duration) -> Result<Option<$guard>> {
            self.take(Wait::for_duration(wait), None)
        }

        /// Waits up to `wait` in all, with a fixed `lease` on every part.
        ///
        /// # Errors
        /// As [`lock_with_lease`](Self::lock_with_lease).
        ///
        /// ```
        /// # use std::time::Duration;
        #[doc = $setup]
        /// let guard = lock.try_lock_for_with_lease(Duration::from_secs(1), Duration::from_secs(5))?;
        /// # Ok::<(), redisync::Error>(())
        /// ```
        #[doc(alias = "tryLock")]
        #[must_use = "a guard that is not bound is released at once: `if let Some(guard) = lock.try_lock()? { ... }`"]
        pub fn try_lock_for_with_lease(
            &self,
            wait: Duration,
            lease: Duration,
        ) -> Result<Option<$guard>> {
            self.take(Wait::for_duration(wait), Some(lease))
        }

        /// Whether it is locked: true when at least as many parts are
        /// locked, by anyone, as acquiring it takes (every part for a
        /// `MultiLock`, a majority for a `RedLock`). Redisson's
        /// `RedissonMultiLock.isLocked()` throws `UnsupportedOperationException`;
        /// this is the answer to "is someone holding it?". False does not
        /// mean that [`try_lock`](Self::try_lock) would succeed: a single
        /// part held elsewhere is enough to refuse it.
        ///
        /// One round trip per part, each bounded by its client's response
        /// timeout.
        ///
        /// # Errors
        /// A part's error, naming the part, when the parts that failed could
        /// change the answer; `InvalidArgument` for a part with an empty name.
        ///
        /// ```
        #[doc = $setup]
        /// assert!(!lock.is_locked()?);
        /// let guard = lock.lock()?;
        /// assert!(lock.is_locked()?);
        /// # Ok::<(), redisync::Error>(())
        /// ```
        #[doc(alias = "isLocked")]
        pub fn is_locked(&self) -> Result<bool> {
            self.parts.is_locked()
        }

        /// Force-unlocks every part, whoever holds it, and wakes its
        /// waiters (each part's [`Lock::force_unlock`]); returns whether any
        /// part was held. Holders' guards then report `NotHeld` on
        /// `unlock()`.
        ///
        /// Every part is tried, one round trip each, each bounded by its
        /// client's response timeout, even when an earlier one fails.
        ///
        /// # Errors
        /// The first part's error, naming the part (its index and lock
        /// name), after all parts were tried; the other parts are released.
        ///
        /// ```
        #[doc = $setup]
        /// let guard = lock.lock()?;
        /// assert!(lock.force_unlock()?);
        /// assert!(!lock.is_locked()?);
        /// assert!(!lock.force_unlock()?); // nothing was held
        /// # Ok::<(), redisync::Error>(())
        /// ```
        #[doc(alias = "forceUnlock")]
        pub fn force_unlock(&self) -> Result<bool> {
            self.parts.force_unlock()
        }

        /// The parts, in the order given.
        ///
        /// ```
        #[doc = $setup]
        /// assert_eq!(lock.locks()[0].name(), "a");
        /// # Ok::<(), redisync::Error>(())
        /// ```
        pub fn locks(&self) -> &[Lock] {
            &self.parts.locks
        }

        fn take(&self, wait: Wait, lease: Option<Duration>) -> Result<Option<$guard>> {
            Ok(self
                .parts
                .acquire(wait, lease)?
                .map(|parts| self.guard(parts)))
        }
    };
}

impl MultiLock {
    /// A multi-lock over `locks`, taken all or none.
    ///
    /// # Errors
    /// `InvalidArgument` when `locks` is empty.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let both = redisync::MultiLock::new([client.lock("a"), client.fair_lock("b")])?;
    /// assert!(redisync::MultiLock::new(Vec::new()).is_err());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> Result<MultiLock> {
        let locks = collect(locks, "MultiLock")?;
        let quorum = locks.len();
        Ok(MultiLock {
            parts: Parts {
                locks,
                quorum,
                drift: false,
            },
        })
    }

    acquire_methods!(
        MultiLockGuard,
        "# let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;\n\
         # let lock = redisync::MultiLock::new([client.lock(\"a\"), client.lock(\"b\")])?;"
    );

    fn guard(&self, parts: Vec<LockGuard>) -> MultiLockGuard {
        MultiLockGuard { parts }
    }
}

impl RedLock {
    /// A RedLock over `locks`, one per independent Redis master (so one per
    /// [`Client`](crate::Client)); held when a majority of them are.
    ///
    /// # Errors
    /// `InvalidArgument` when `locks` is empty or two parts share a client
    /// (they would be one master counted twice).
    ///
    /// ```
    /// use redisync::{Client, MemoryBackend, RedLock};
    /// let a = Client::builder().backend(MemoryBackend::new()).build()?;
    /// let b = Client::builder().backend(MemoryBackend::new()).build()?;
    /// assert!(RedLock::new([a.lock("x"), b.lock("x")]).is_ok());
    /// assert!(RedLock::new([a.lock("x"), a.lock("y")]).is_err());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> Result<RedLock> {
        let locks = collect(locks, "RedLock")?;
        for (index, lock) in locks.iter().enumerate() {
            if let Some(earlier) = locks[..index]
                .iter()
                .position(|other| other.client().id() == lock.client().id())
            {
                return Err(Error::invalid(
                    "locks",
                    format!(
                        "parts {earlier} and {index} use the same client; a RedLock needs \
                         one lock per independent Redis master"
                    ),
                ));
            }
        }
        let quorum = locks.len() / 2 + 1;
        Ok(RedLock {
            parts: Parts {
                locks,
                quorum,
                drift: true,
            },
        })
    }

    /// How many parts must be held: N/2 + 1.
    ///
    /// ```
    /// use redisync::{Client, MemoryBackend, RedLock};
    /// let clients = (0..5)
    ///     .map(|_| Client::builder().backend(MemoryBackend::new()).build())
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// assert_eq!(RedLock::new(clients.iter().map(|c| c.lock("x")))?.quorum(), 3);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn quorum(&self) -> usize {
        self.parts.quorum
    }

    acquire_methods!(
        RedLockGuard,
        "# let clients = (0..3)\n\
         #     .map(|_| redisync::Client::builder().backend(redisync::MemoryBackend::new()).build())\n\
         #     .collect::<Result<Vec<_>, _>>()?;\n\
         # let lock = redisync::RedLock::new(clients.iter().map(|c| c.lock(\"a\")))?;"
    );

    fn guard(&self, parts: Vec<LockGuard>) -> RedLockGuard {
        RedLockGuard {
            parts,
            rule: self.parts.clone(),
        }
    }
}

/// Proof that every part of a [`MultiLock`] is held by the current thread.
/// Dropping it releases every part (errors go to each part's client's
/// [`EventHandler`](crate::EventHandler)); [`unlock`](Self::unlock) returns
/// them. `!Send`, like [`LockGuard`].
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let guard = redisync::MultiLock::new([client.lock("a"), client.lock("b")])?.lock()?;
/// assert_eq!(guard.guards().len(), 2);
/// # Ok::<(), redisync::Error>(())
/// ```
#[must_use = "if unused the locks will immediately unlock"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct MultiLockGuard {
    parts: Vec<LockGuard>,
}

impl MultiLockGuard {
    /// Each part's guard, in the multi-lock's order (e.g. a fenced part's
    /// [`token`](LockGuard::token)).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let guard = redisync::MultiLock::new([client.fenced_lock("a"), client.lock("b")])?.lock()?;
    /// assert!(guard.guards()[0].token().is_some());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn guards(&self) -> &[LockGuard] {
        &self.parts
    }

    /// True when any part's hold can no longer be trusted (see
    /// [`LockGuard::is_lost`]).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = redisync::MultiLock::new([client.lock("a"), client.lock("b")])?;
    /// let guard = lock.lock_with_lease(Duration::from_millis(20))?;
    /// std::thread::sleep(Duration::from_millis(40));
    /// assert!(guard.is_lost());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[must_use = "is_lost() only reports: check it before acting on the protected resources"]
    pub fn is_lost(&self) -> bool {
        self.parts.iter().any(LockGuard::is_lost)
    }

    /// Releases every part, then returns the first error, if any.
    ///
    /// # Errors
    /// As [`LockGuard::unlock`], for the first part that failed.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// redisync::MultiLock::new([client.lock("a"), client.lock("b")])?.lock()?.unlock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn unlock(self) -> Result<()> {
        release_all(self.parts).into_iter().collect()
    }
}

/// Proof that a majority of a [`RedLock`]'s parts are held by the current
/// thread. Dropping it releases every part it holds; `!Send`.
///
/// ```
/// use redisync::{Client, MemoryBackend, RedLock};
/// let clients = (0..3)
///     .map(|_| Client::builder().backend(MemoryBackend::new()).build())
///     .collect::<Result<Vec<_>, _>>()?;
/// let guard = RedLock::new(clients.iter().map(|c| c.lock("leader")))?.lock()?;
/// assert!(guard.guards().len() >= 2);
/// # Ok::<(), redisync::Error>(())
/// ```
#[must_use = "if unused the lock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct RedLockGuard {
    parts: Vec<LockGuard>,
    rule: Parts,
}

impl fmt::Debug for RedLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLockGuard")
            .field("parts", &self.parts)
            .field("quorum", &self.rule.quorum)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl RedLockGuard {
    /// The guards of the parts this RedLock holds (a majority or more), in
    /// the RedLock's order.
    ///
    /// ```
    /// use redisync::{Client, MemoryBackend, RedLock};
    /// let clients = (0..3)
    ///     .map(|_| Client::builder().backend(MemoryBackend::new()).build())
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let guard = RedLock::new(clients.iter().map(|c| c.lock("leader")))?.lock()?;
    /// assert_eq!(guard.guards().len(), 3); // all three masters granted it
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn guards(&self) -> &[LockGuard] {
        &self.parts
    }

    /// True once fewer than a majority of the parts are still held with
    /// more than the drift allowance left on their leases: the watchdog
    /// could not renew them, found them gone, or a fixed lease is (nearly)
    /// over. Check it before acting on the protected resource, and see the
    /// [safety model](RedLock#safety-model).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redisync::{Client, MemoryBackend, RedLock};
    /// let clients = (0..3)
    ///     .map(|_| Client::builder().backend(MemoryBackend::new()).build())
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let redlock = RedLock::new(clients.iter().map(|c| c.lock("leader")))?;
    /// let guard = redlock.lock_with_lease(Duration::from_millis(50))?;
    /// assert!(!guard.is_lost());
    /// std::thread::sleep(Duration::from_millis(60));
    /// assert!(guard.is_lost());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[must_use = "is_lost() only reports: check it before acting on the protected resource"]
    pub fn is_lost(&self) -> bool {
        let now = Instant::now();
        let valid = self
            .parts
            .iter()
            .filter(|guard| self.rule.counts(guard, now))
            .count();
        valid < self.rule.quorum
    }

    /// Releases every part it holds. A part whose master cannot be reached
    /// frees itself when its lease runs out, so the release succeeds when a
    /// majority of all parts were released.
    ///
    /// # Errors
    /// `NotHeld` when fewer than a majority were released and the others
    /// were no longer held (the RedLock had been lost); otherwise the first
    /// part's error when fewer than a majority could be released.
    ///
    /// ```
    /// use redisync::{Client, MemoryBackend, RedLock};
    /// let clients = (0..3)
    ///     .map(|_| Client::builder().backend(MemoryBackend::new()).build())
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// RedLock::new(clients.iter().map(|c| c.lock("leader")))?.lock()?.unlock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn unlock(self) -> Result<()> {
        let quorum = self.rule.quorum;
        let outcomes = release_all(self.parts);
        let released = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
        if released >= quorum {
            return Ok(());
        }
        let mut first_other = None;
        let mut first_not_held = None;
        for error in outcomes.into_iter().filter_map(Result::err) {
            if error.is_not_held() {
                first_not_held.get_or_insert(error);
            } else {
                first_other.get_or_insert(error);
            }
        }
        match (first_not_held, first_other) {
            (Some(not_held), _) => Err(not_held),
            (None, Some(other)) => Err(other),
            (None, None) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_allowance_is_one_percent_plus_two_ms() {
        assert_eq!(drift_allowance(30_000), Duration::from_millis(302));
        assert_eq!(drift_allowance(1), Duration::from_millis(2));
        assert_eq!(
            drift_allowance(i64::MAX),
            Duration::from_millis(u64::try_from(i64::MAX / 100).unwrap() + 2)
        );
    }

    #[test]
    fn jitter_stays_within_its_bound() {
        for _ in 0..200 {
            let pause = jitter();
            assert!(pause >= Duration::from_millis(1));
            assert!(pause <= Duration::from_millis(MAX_RETRY_JITTER_MS));
        }
    }

    #[test]
    fn a_round_waits_at_most_redissons_per_part_budget() {
        let client = crate::Client::builder()
            .backend(crate::MemoryBackend::new())
            .build()
            .unwrap();
        let multi = MultiLock::new([client.lock("a"), client.lock("b")]).unwrap();
        assert_eq!(multi.parts.round_wait(), Duration::from_secs(3));
        let Wait::Until(deadline, _) = multi.parts.round(Wait::Forever) else {
            panic!("a forever wait must be capped per round");
        };
        assert!(deadline <= Instant::now() + Duration::from_secs(3));
        let short = Wait::for_duration(Duration::from_millis(10));
        let Wait::Until(capped, _) = multi.parts.round(short) else {
            panic!("a bounded wait stays bounded");
        };
        let Wait::Until(original, _) = short else {
            unreachable!()
        };
        assert_eq!(capped, original);
    }
}
