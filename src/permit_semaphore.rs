//! [`PermitExpirableSemaphore`]: Redisson's `RPermitExpirableSemaphore`, a
//! semaphore whose permits carry an id and a lease, so the permit of a
//! holder that crashes returns to the pool when its lease runs out.
//!
//! The available count is the same string as a [`Semaphore`](crate::Semaphore)'s;
//! leased permits live in the zset `{name}:timeout` (permit id → lease end in
//! ms by the acquiring client's clock; Redisson's non-expirable constant for
//! a permit taken without a lease). Expired leases are reclaimed by the
//! next acquire, release or count, which announces the new count. A waiter
//! parks until a release announces permits or the earliest lease runs out.

use std::fmt;
use std::time::Duration;

use crate::counting::permit_count;
use crate::handle::HandleCore;
use crate::ops;
use crate::ops::expirable::ExpirableKeys;
use crate::ops::lock::Acquire;
use crate::pubsub::Wake;
use crate::telemetry::Primitive;
use crate::wait::{Attempt, Wait};
use crate::{Client, Error, Result, keys};

/// The id of one leased permit; returned by
/// [`PermitExpirableSemaphore::acquire_id`] (and held by the
/// [`PermitGuard`] that [`acquire`](PermitExpirableSemaphore::acquire)
/// returns: [`PermitGuard::id`]). Not tied to a thread or a process:
/// store it, send it, release it anywhere.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// # let s = client.permit_expirable_semaphore("p"); s.try_set_permits(1)?;
/// let id = s.acquire_id(std::time::Duration::from_secs(60))?;
/// assert_eq!(id.as_str().len(), 32);
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PermitId(String);

impl PermitId {
    /// The id: 32 hex digits, as Redisson's. Redis holds the 16 bytes they
    /// spell (as Redisson stores its ids), so a Java service can release a
    /// permit taken here by this string, and the reverse.
    ///
    /// ```
    /// let id = redisync::PermitId::from("0123456789abcdef0123456789abcdef".to_owned());
    /// assert_eq!(id.as_str(), "0123456789abcdef0123456789abcdef");
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for PermitId {
    /// Rebuilds an id kept elsewhere (e.g. stored with the work it guards).
    fn from(id: String) -> Self {
        PermitId(id)
    }
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A handle on one distributed semaphore with leased permits; created by
/// [`Client::permit_expirable_semaphore`]. Cheap to clone, `Send + Sync`.
///
/// ```
/// use std::time::Duration;
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let workers = client.permit_expirable_semaphore("workers");
/// workers.try_set_permits(1)?;
/// let permit = workers.acquire(Duration::from_millis(50))?;   // a 50 ms lease
/// assert!(workers.try_acquire(Duration::from_secs(1))?.is_none());
/// std::thread::sleep(Duration::from_millis(80));             // the holder "crashed"
/// assert_eq!(workers.available_permits()?, 1);               // its permit came back
/// assert_eq!(permit.release()?, 0);                          // too late to release it
/// # Ok::<(), redisync::Error>(())
/// ```
#[doc(alias = "RPermitExpirableSemaphore")]
#[derive(Clone)]
pub struct PermitExpirableSemaphore {
    core: HandleCore,
    leases: String,
}

impl fmt::Debug for PermitExpirableSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.debug(f, "PermitExpirableSemaphore").finish()
    }
}

impl PermitExpirableSemaphore {
    pub(crate) fn new(client: Client, name: String) -> PermitExpirableSemaphore {
        let channel = keys::semaphore_channel(&name);
        PermitExpirableSemaphore {
            leases: keys::expirable_leases(&name),
            core: HandleCore::new(client, name, channel),
        }
    }

    /// This handle, with its waits ended by `token`: a blocked call then
    /// returns [`Error::Cancelled`](crate::Error::Cancelled) promptly and
    /// leaves nothing behind (Redisson's `*Interruptibly`). Guards and the
    /// handle's other clones are unaffected; a cancelled token fails every
    /// later wait of this handle at once.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let token = redisync::CancellationToken::new();
    /// let workers = client.permit_expirable_semaphore("workers").cancellable(&token);
    /// token.cancel();
    /// assert!(workers.acquire(Duration::from_secs(10)).unwrap_err().is_cancelled());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "lockInterruptibly")]
    #[doc(alias = "acquireInterruptibly")]
    #[must_use = "the cancellable handle is a new value; call the blocking method on it"]
    pub fn cancellable(&self, token: &crate::CancellationToken) -> PermitExpirableSemaphore {
        PermitExpirableSemaphore {
            core: self.core.cancellable(token),
            ..self.clone()
        }
    }

    fn keys(&self) -> ExpirableKeys<'_> {
        ExpirableKeys {
            name: &self.core.name,
            leases: &self.leases,
            channel: &self.core.channel,
        }
    }

    /// The semaphore's name: the Redis key of its available count.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.permit_expirable_semaphore("p").name(), "p");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.core.unmapped_name()
    }

    /// Deletes the semaphore's available count and its leases (Redisson's
    /// `RPermitExpirableSemaphore.delete()`), so
    /// [`try_set_permits`](Self::try_set_permits) can set it again; returns
    /// whether anything existed. Waiters are not woken (as in Redisson): a
    /// deleted semaphore has no permits to give them. Permits handed out
    /// before are forgotten: releasing one later returns `false`.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name; `Backend` if Redis fails.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let workers = client.permit_expirable_semaphore("workers");
    /// workers.try_set_permits(2)?;
    /// let id = workers.acquire_id(Duration::from_secs(10))?;
    /// assert!(workers.delete()?);
    /// assert_eq!((workers.available_permits()?, workers.acquired_permits()?), (0, 0));
    /// assert!(!workers.try_release(&id)?);
    /// assert!(workers.try_set_permits(5)?);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn delete(&self) -> Result<bool> {
        self.core.check_name()?;
        ops::semaphore::delete_keys_recorded(
            self.core.store(),
            &self.core.name,
            Some(&self.leases),
            &keys::new_op_record(&self.core.name),
        )
    }

    /// Sets the number of permits if it has not been set yet; returns
    /// whether this call set it.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name or more than `i64::MAX` permits;
    /// `Backend` if Redis fails; `Protocol` on a wrong type.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert!(client.permit_expirable_semaphore("p").try_set_permits(2)?);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn try_set_permits(&self, permits: u64) -> Result<bool> {
        self.as_semaphore().try_set_permits(permits)
    }

    /// Adds `delta` permits (negative to remove); adding wakes waiters.
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let p = client.permit_expirable_semaphore("p");
    /// p.add_permits(3)?;
    /// assert_eq!(p.available_permits()?, 3);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn add_permits(&self, delta: i64) -> Result<()> {
        self.as_semaphore().add_permits(delta)
    }

    /// The permits available now, after reclaiming expired leases.
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.permit_expirable_semaphore("p").available_permits()?, 0);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn available_permits(&self) -> Result<i64> {
        self.core.check_name()?;
        ops::expirable::available(
            self.core.store(),
            &self.keys(),
            crate::clock::wall_clock_ms(),
        )
    }

    /// Blocks until a permit is available and takes it for `lease`; it
    /// returns to the pool when the lease runs out unless released first.
    /// The guard releases it when dropped, as a [`Semaphore`](crate::Semaphore)'s
    /// permit does; [`PermitGuard::forget`] keeps it and hands over its id
    /// ([`acquire_id`](Self::acquire_id) returns the bare id at once, as
    /// Redisson's `acquire(leaseTime, unit)` does).
    ///
    /// On a semaphore whose permits were never set (nor added), no permit
    /// ever becomes available: this waits until someone calls
    /// [`try_set_permits`](Self::try_set_permits) or
    /// [`add_permits`](Self::add_permits), as Redisson's does. Use
    /// [`try_acquire_for`](Self::try_acquire_for) to bound the wait;
    /// `redisync inspect NAME` and `redisync doctor` report the threads
    /// waiting on such a semaphore.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name or a lease under 1 ms or over
    /// [`MAX_LEASE`](crate::MAX_LEASE); `Backend` if Redis fails; `Protocol`
    /// on a wrong type.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # let p = client.permit_expirable_semaphore("p"); p.try_set_permits(1)?;
    /// let permit = p.acquire(Duration::from_secs(30))?;
    /// assert_eq!(p.available_permits()?, 0);
    /// drop(permit);                                   // released
    /// assert_eq!(p.available_permits()?, 1);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn acquire(&self, lease: Duration) -> Result<PermitGuard> {
        self.acquire_guard(1, Wait::Forever, Some(lease))?
            .ok_or_else(|| Error::protocol("an unbounded wait ended without a permit"))
    }

    /// Takes a permit for `lease` if one is available now; never waits.
    /// The guard releases it when dropped.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let p = client.permit_expirable_semaphore("p");
    /// assert!(p.try_acquire(Duration::from_secs(1))?.is_none());   // never set: none
    /// p.try_set_permits(1)?;
    /// assert!(p.try_acquire(Duration::from_secs(1))?.is_some());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn try_acquire(&self, lease: Duration) -> Result<Option<PermitGuard>> {
        self.acquire_guard(1, Wait::Never, Some(lease))
    }

    /// Waits up to `wait` for a permit and takes it for `lease`.
    /// `Ok(None)` on timeout. The guard releases it when dropped.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let p = client.permit_expirable_semaphore("p");
    /// assert!(p.try_acquire_for(Duration::from_millis(10), Duration::from_secs(1))?.is_none());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn try_acquire_for(&self, wait: Duration, lease: Duration) -> Result<Option<PermitGuard>> {
        self.acquire_guard(1, Wait::for_duration(wait), Some(lease))
    }

    /// [`acquire`](Self::acquire) returning the bare permit id, released by
    /// hand with [`release`](Self::release) (or its lease running out), as
    /// Redisson's `acquire(leaseTime, unit)` returns a `String` id: for code
    /// that passes the id on (another thread or process releases it).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # let p = client.permit_expirable_semaphore("p"); p.try_set_permits(1)?;
    /// let id = p.acquire_id(Duration::from_secs(30))?;
    /// p.release(&id)?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn acquire_id(&self, lease: Duration) -> Result<PermitId> {
        self.acquire_within(Wait::Forever, lease)?
            .ok_or_else(|| Error::protocol("an unbounded wait ended without a permit"))
    }

    /// [`try_acquire`](Self::try_acquire) returning the bare permit id
    /// (see [`acquire_id`](Self::acquire_id)).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert!(client.permit_expirable_semaphore("p").try_acquire_id(Duration::from_secs(1))?.is_none());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn try_acquire_id(&self, lease: Duration) -> Result<Option<PermitId>> {
        self.acquire_within(Wait::Never, lease)
    }

    /// [`try_acquire_for`](Self::try_acquire_for) returning the bare permit
    /// id (see [`acquire_id`](Self::acquire_id)); Redisson's
    /// `tryAcquire(waitTime, leaseTime, unit)`.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let p = client.permit_expirable_semaphore("p");
    /// assert!(p.try_acquire_id_for(Duration::from_millis(10), Duration::from_secs(1))?.is_none());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn try_acquire_id_for(&self, wait: Duration, lease: Duration) -> Result<Option<PermitId>> {
        self.acquire_within(Wait::for_duration(wait), lease)
    }

    /// Returns permit `id` to the pool. Returns `false` when the permit is
    /// unknown (an id that is not hex never is one), already released, or
    /// its lease already ran out (it was then reclaimed).
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits); after a connection
    /// error the release goes on in the background (for up to a day; it is
    /// exact: a released id is not found again).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # let p = client.permit_expirable_semaphore("p"); p.try_set_permits(1)?;
    /// let id = p.acquire_id(Duration::from_secs(30))?;
    /// assert!(p.try_release(&id)?);
    /// assert!(!p.try_release(&id)?);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn try_release(&self, id: &PermitId) -> Result<bool> {
        self.core.check_name()?;
        if !ops::expirable::is_permit_id(id.as_str()) {
            return Ok(false); // never an id: nothing to ask
        }
        // As a guard's release: on a connection error it goes on in the
        // background (exact: a released id is not found again).
        Ok(self.release_ids(std::slice::from_ref(id))? == 1)
    }

    /// Returns permit `id` to the pool.
    ///
    /// # Errors
    /// `InvalidArgument` when the permit is unknown, already released or its
    /// lease ran out (Redisson's `IllegalArgumentException`); otherwise as
    /// [`try_set_permits`](Self::try_set_permits).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # let p = client.permit_expirable_semaphore("p"); p.try_set_permits(1)?;
    /// let id = p.acquire_id(Duration::from_secs(30))?;
    /// p.release(&id)?;
    /// assert!(p.release(&id).unwrap_err().is_invalid_argument());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn release(&self, id: &PermitId) -> Result<()> {
        if self.try_release(id)? {
            Ok(())
        } else {
            Err(Error::invalid(
                "permit id",
                format!(
                    "permit {id} of {:?} is unknown, already released, or its lease ran out",
                    self.core.name
                ),
            ))
        }
    }

    /// Blocks until `permits` permits are available and takes them all at
    /// once (never some of them), each with its own id, for `lease`, or
    /// until released when `lease` is `None` (Redisson's `acquire(permits)`
    /// and `acquire(permits, leaseTime, unit)`). The returned guard
    /// releases them when dropped.
    ///
    /// A permit without a lease is recorded with Redisson's non-expirable
    /// lease end (`nonExpirableTimeout`, 922,337,203,685,477 ms): it never returns by
    /// itself, so a holder that dies keeps it (as a plain
    /// [`Semaphore`](crate::Semaphore)'s permit) unless someone releases
    /// its id.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name, 0 or more than 10,000 permits,
    /// or a lease under 1 ms or over [`MAX_LEASE`](crate::MAX_LEASE);
    /// `Backend` if Redis fails; `Protocol` on a wrong type.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let p = client.permit_expirable_semaphore("slots");
    /// p.try_set_permits(3)?;
    /// let two = p.acquire_many(2, Some(Duration::from_secs(30)))?;
    /// assert_eq!(two.ids().len(), 2);
    /// let held = p.acquire_many(1, None)?;                // until released
    /// assert_eq!(p.acquired_permits()?, 3);
    /// drop((two, held));                                  // released
    /// assert_eq!(p.available_permits()?, 3);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn acquire_many(&self, permits: u64, lease: Option<Duration>) -> Result<PermitGuard> {
        self.acquire_guard(permits, Wait::Forever, lease)?
            .ok_or_else(|| Error::protocol("an unbounded wait ended without the permits"))
    }

    /// Takes `permits` permits if that many are available now; never
    /// waits. See [`acquire_many`](Self::acquire_many).
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let p = client.permit_expirable_semaphore("slots");
    /// p.try_set_permits(1)?;
    /// assert!(p.try_acquire_many(2, None)?.is_none());   // all or nothing
    /// assert!(p.try_acquire_many(1, None)?.is_some());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn try_acquire_many(
        &self,
        permits: u64,
        lease: Option<Duration>,
    ) -> Result<Option<PermitGuard>> {
        self.acquire_guard(permits, Wait::Never, lease)
    }

    /// Waits up to `wait` for `permits` permits and takes them all.
    /// `Ok(None)` on timeout. See [`acquire_many`](Self::acquire_many).
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let p = client.permit_expirable_semaphore("slots");
    /// assert!(p.try_acquire_many_for(1, Duration::from_millis(10), None)?.is_none());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn try_acquire_many_for(
        &self,
        permits: u64,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<PermitGuard>> {
        self.acquire_guard(permits, Wait::for_duration(wait), lease)
    }

    /// Gives permit `id` a new lease of `lease` from now (Redisson's
    /// `updateLeaseTime`): `true` when the permit was leased and now ends
    /// then; `false` when it is unknown, released, or its lease already ran
    /// out (an expired permit is back in the pool and stays there). A
    /// permit taken without a lease gets one.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name, an id that is not an even number
    /// of hex digits, or a lease under 1 ms or over
    /// [`MAX_LEASE`](crate::MAX_LEASE); `Backend` if Redis fails;
    /// `Protocol` on a wrong type.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # let p = client.permit_expirable_semaphore("p"); p.try_set_permits(1)?;
    /// let id = p.acquire_id(Duration::from_secs(1))?;
    /// assert!(p.update_lease_time(&id, Duration::from_secs(600))?);   // the work takes longer
    /// p.release(&id)?;
    /// assert!(!p.update_lease_time(&id, Duration::from_secs(600))?);  // gone
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn update_lease_time(&self, id: &PermitId, lease: Duration) -> Result<bool> {
        Ok(self.update_leases(&[id.as_str()], lease)? == 1)
    }

    fn update_leases(&self, ids: &[&str], lease: Duration) -> Result<u64> {
        self.core.check_name()?;
        let lease_ms = crate::error::millis("lease", lease)?;
        if let Some(bad) = ids.iter().find(|id| !ops::expirable::is_permit_id(id)) {
            return Err(Error::invalid(
                "permit id",
                format!("{bad:?} is not a permit id (an even number of hex digits)"),
            ));
        }
        let now = crate::clock::wall_clock_ms();
        let ends = lease_end(now, Some(lease_ms))?;
        ops::expirable::update_lease(self.core.store(), &self.keys(), ids, ends, now)
    }

    /// How many permits are taken now: leased and not expired, or taken
    /// without a lease (Redisson's `acquiredPermits`). Expired leases are
    /// reclaimed first.
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let p = client.permit_expirable_semaphore("p");
    /// p.try_set_permits(2)?;
    /// let _id = p.acquire(Duration::from_secs(30))?;
    /// assert_eq!(p.acquired_permits()?, 1);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn acquired_permits(&self) -> Result<i64> {
        self.core.check_name()?;
        let acquired = ops::expirable::acquired(
            self.core.store(),
            &self.keys(),
            crate::clock::wall_clock_ms(),
        )?;
        // i64 as every count read back (see `CountDownLatch::count`).
        Ok(i64::try_from(acquired).unwrap_or(i64::MAX))
    }

    /// Sets the total number of permits to `permits`, whatever it was
    /// (Redisson's `setPermits`): the available count becomes `permits`
    /// minus the permits taken now, which stay taken. It goes negative when
    /// more are taken than the new total; new acquires then wait until
    /// enough come back. A count never set becomes `permits`. A rise wakes
    /// waiters.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name or more than `i64::MAX` permits;
    /// `Backend` if Redis fails; `Protocol` on a wrong type.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let p = client.permit_expirable_semaphore("p");
    /// p.set_permits(3)?;
    /// let _id = p.acquire(Duration::from_secs(30))?;
    /// p.set_permits(5)?;                         // 5 in all, 1 of them taken
    /// assert_eq!(p.available_permits()?, 4);
    /// p.set_permits(0)?;
    /// assert_eq!(p.available_permits()?, -1);    // the taken one stays taken
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn set_permits(&self, permits: u64) -> Result<()> {
        self.core.check_name()?;
        let total = i64::try_from(permits).map_err(|_| {
            Error::invalid(
                "permits",
                format!("must be at most i64::MAX, got {permits}"),
            )
        })?;
        ops::expirable::set_permits_recorded(
            self.core.store(),
            &self.keys(),
            total,
            crate::clock::wall_clock_ms(),
            &keys::new_op_record(&self.core.name),
        )?;
        Ok(())
    }

    /// Returns every permit of `ids` still taken; how many that was. When
    /// Redis cannot be reached, the client's cleanup thread goes on sending
    /// the release (harmless to repeat: a released id is not found again).
    fn release_ids(&self, ids: &[PermitId]) -> Result<u64> {
        self.core.check_name()?;
        let strs: Vec<&str> = ids.iter().map(PermitId::as_str).collect();
        let released = ops::expirable::release_many(
            self.core.store(),
            &self.keys(),
            &strs,
            crate::clock::wall_clock_ms(),
        );
        if let Err(err) = &released
            && err.is_connection_error()
        {
            self.undo_unknown_attempt(ids, None, None, err);
        }
        released
    }

    fn as_semaphore(&self) -> crate::Semaphore {
        crate::Semaphore::new(self.core.client.clone(), self.core.name.clone())
    }

    fn acquire_within(&self, wait: Wait, lease: Duration) -> Result<Option<PermitId>> {
        let ids = self.acquire_ids(1, wait, Some(lease))?;
        Ok(ids.and_then(|ids| ids.into_iter().next()))
    }

    fn acquire_guard(
        &self,
        permits: u64,
        wait: Wait,
        lease: Option<Duration>,
    ) -> Result<Option<PermitGuard>> {
        Ok(self
            .acquire_ids(permits, wait, lease)?
            .map(|ids| PermitGuard {
                semaphore: self.clone(),
                ids,
                released: false,
            }))
    }

    /// The acquire loop behind every acquire method: `permits` fresh ids,
    /// all taken or none, with `lease` (`None`: until released).
    fn acquire_ids(
        &self,
        permits: u64,
        wait: Wait,
        lease: Option<Duration>,
    ) -> Result<Option<Vec<PermitId>>> {
        self.core.check_name()?;
        let count = permit_count("permits", permits)?;
        if count > MAX_PERMITS_PER_CALL {
            return Err(Error::invalid(
                "permits",
                format!("at most {MAX_PERMITS_PER_CALL} in one call, got {permits}"),
            ));
        }
        let lease_ms = lease
            .map(|lease| crate::error::millis("lease", lease))
            .transpose()?;
        let keys = self.keys();
        let ids: Vec<PermitId> = (0..count)
            .map(|_| PermitId(uuid::Uuid::new_v4().simple().to_string()))
            .collect();
        let id_strs: Vec<&str> = ids.iter().map(PermitId::as_str).collect();
        // Each attempt's record (its outcome; `u` once undone): a copy of
        // an attempt that arrives late acts no more. Only the latest can
        // have an unknown outcome (each earlier one was answered).
        let record = std::cell::RefCell::new(None::<String>);
        let taken = self.core.wait_on(
            Wake::Semaphore,
            wait,
            Primitive::PermitExpirableSemaphore,
            || {
                let now = crate::clock::wall_clock_ms();
                let ends = lease_end(now, lease_ms)?;
                Ok(
                    match ops::expirable::acquire_many_recorded(
                        self.core.store(),
                        &keys,
                        &id_strs,
                        ends,
                        now,
                        Some(
                            record
                                .borrow_mut()
                                .insert(keys::new_op_record(&self.core.name))
                                .as_str(),
                        ),
                    )? {
                        Acquire::Acquired => Attempt::Done(()),
                        Acquire::Held { ttl } => Attempt::Retry(ttl),
                    },
                )
            },
        );
        match taken {
            Ok(Some(())) => Ok(Some(ids)),
            Ok(None) => Ok(None),
            Err(err) => {
                if err.is_connection_error() {
                    self.undo_unknown_attempt(&ids, lease_ms, record.take(), &err);
                }
                Err(err)
            }
        }
    }

    /// After an acquire failed with a connection error, its request may
    /// still have run and leased the permits `ids` to nobody (and a guard's
    /// release that failed so left them taken). Releasing them is exact (an
    /// id never leased is not found), so the client's cleanup thread sends
    /// the release until it lands or the lease would have ended anyway
    /// ([`NO_LEASE_CLEANUP`] for permits without one). With the acquire
    /// call's `record`, the undo also marks the call undone, so that an
    /// attempt of it that arrives after the undo is refused.
    fn undo_unknown_attempt(
        &self,
        ids: &[PermitId],
        lease_ms: Option<i64>,
        record: Option<String>,
        cause: &Error,
    ) {
        let lease = lease_ms.map_or(NO_LEASE_CLEANUP, |ms| {
            Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        });
        let Some(give_up_at) = std::time::Instant::now().checked_add(lease) else {
            return;
        };
        let backend = std::sync::Arc::clone(self.core.client.backend());
        let (name, leases, channel) = (
            self.core.name.clone(),
            self.leases.clone(),
            self.core.channel.clone(),
        );
        let permits: Vec<String> = ids.iter().map(|id| id.as_str().to_owned()).collect();
        let first = permits.first().cloned().unwrap_or_default();
        let task: crate::cleanup::Task = Box::new(move || {
            let keys = ExpirableKeys {
                name: &name,
                leases: &leases,
                channel: &channel,
            };
            let ids: Vec<&str> = permits.iter().map(String::as_str).collect();
            let now = crate::clock::wall_clock_ms();
            match &record {
                Some(record) => ops::expirable::undo_acquire(&*backend, &keys, &ids, now, record)?,
                None => ops::expirable::release_many(&*backend, &keys, &ids, now)?,
            };
            Ok(true)
        });
        self.core
            .client
            .release_later(&self.core.name, &first, task, give_up_at, cause);
    }
}

/// The most permits one acquire takes (each is an id sent to Redis).
const MAX_PERMITS_PER_CALL: i64 = 10_000;

/// How long the cleanup thread keeps trying to give back permits without a
/// lease that an acquire with a lost reply may have taken (they would
/// otherwise stay taken for good).
const NO_LEASE_CLEANUP: Duration = Duration::from_secs(24 * 60 * 60);

/// The lease end to record for an attempt at `now`: `now + lease`, or
/// Redisson's non-expirable end for a permit without a lease.
fn lease_end(now: i64, lease_ms: Option<i64>) -> Result<i64> {
    match lease_ms {
        None => Ok(ops::expirable::NON_EXPIRABLE),
        Some(ms) => now
            .checked_add(ms)
            .ok_or_else(|| Error::invalid("lease", format!("{ms}ms from now overflows the clock"))),
    }
}

/// Permits taken from a [`PermitExpirableSemaphore`], each with its id;
/// created by [`PermitExpirableSemaphore::acquire`],
/// [`acquire_many`](PermitExpirableSemaphore::acquire_many) and their `try_`
/// variants. Dropping it releases those still taken (errors go to the
/// client's [`EventHandler`](crate::EventHandler));
/// [`release`](Self::release) returns the outcome instead, and
/// [`forget`](Self::forget) keeps them taken and hands over their ids (to
/// release later, anywhere, with [`PermitExpirableSemaphore::release`]).
/// Permits have no owner, so the guard is `Send`.
///
/// ```
/// # use std::time::Duration;
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let p = client.permit_expirable_semaphore("slots");
/// p.try_set_permits(2)?;
/// let permits = p.acquire_many(2, Some(Duration::from_secs(30)))?;
/// assert_eq!(permits.ids().len(), 2);
/// assert_eq!(permits.release()?, 2);          // both were still taken
/// assert_eq!(p.available_permits()?, 2);
/// # Ok::<(), redisync::Error>(())
/// ```
#[must_use = "if unused the permits are released at once"]
#[clippy::has_significant_drop]
pub struct PermitGuard {
    semaphore: PermitExpirableSemaphore,
    ids: Vec<PermitId>,
    released: bool,
}

impl fmt::Debug for PermitGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitGuard")
            .field("semaphore", &self.semaphore.core.name)
            .field("ids", &self.ids)
            .finish()
    }
}

impl PermitGuard {
    /// The ids of the permits this guard holds, one per permit.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # let p = client.permit_expirable_semaphore("p"); p.try_set_permits(3)?;
    /// let permits = p.acquire_many(3, None)?;
    /// assert_eq!(permits.ids().len(), 3);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn ids(&self) -> &[PermitId] {
        &self.ids
    }

    /// The id of this guard's first permit: its only one when it came from
    /// [`acquire`](PermitExpirableSemaphore::acquire) or its `try_` forms.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # let p = client.permit_expirable_semaphore("p"); p.try_set_permits(1)?;
    /// let permit = p.acquire(Duration::from_secs(30))?;
    /// assert_eq!(permit.id(), &permit.ids()[0]);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn id(&self) -> &PermitId {
        // A guard holds at least one permit (0 permits are refused).
        &self.ids[0]
    }

    /// Gives each of this guard's permits a new lease of `lease` from now
    /// (see [`PermitExpirableSemaphore::update_lease_time`]). Returns how
    /// many were still taken and got it: fewer than
    /// [`ids().len()`](Self::ids) means some had run out (or were released
    /// by id) and are back in the pool.
    ///
    /// # Errors
    /// As [`PermitExpirableSemaphore::update_lease_time`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # let p = client.permit_expirable_semaphore("p"); p.try_set_permits(2)?;
    /// let permits = p.acquire_many(2, Some(Duration::from_secs(1)))?;
    /// assert_eq!(permits.update_lease_time(Duration::from_secs(600))?, 2);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn update_lease_time(&self, lease: Duration) -> Result<usize> {
        let ids: Vec<&str> = self.ids.iter().map(PermitId::as_str).collect();
        let updated = self.semaphore.update_leases(&ids, lease)?;
        Ok(usize::try_from(updated).unwrap_or(usize::MAX))
    }

    /// Releases the permits and returns how many were still taken (the
    /// others' leases had run out: they were back in the pool already).
    ///
    /// # Errors
    /// `Backend` if Redis fails: the client's cleanup thread then goes on
    /// sending the release in the background (for up to a day; a lease
    /// that runs out first returns its permit anyway); `Protocol` on a
    /// wrong type.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # let p = client.permit_expirable_semaphore("p"); p.try_set_permits(1)?;
    /// let permit = p.acquire_many(1, Some(Duration::from_millis(20)))?;
    /// std::thread::sleep(Duration::from_millis(50));
    /// assert_eq!(permit.release()?, 0);           // its lease had run out
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn release(mut self) -> Result<usize> {
        self.released = true;
        let released = self.semaphore.release_ids(&self.ids)?;
        Ok(usize::try_from(released).unwrap_or(usize::MAX))
    }

    /// Keeps the permits taken (nothing is released) and returns their ids.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let p = client.permit_expirable_semaphore("p");
    /// p.try_set_permits(1)?;
    /// let ids = p.acquire_many(1, None)?.forget();
    /// assert_eq!(p.available_permits()?, 0);
    /// p.release(&ids[0])?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn forget(mut self) -> Vec<PermitId> {
        self.released = true;
        std::mem::take(&mut self.ids)
    }
}

impl Drop for PermitGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        if let Err(error) = self.semaphore.release_ids(&self.ids) {
            self.semaphore.core.client.events().on_unlock_failed(
                &crate::event::UnlockFailedEvent {
                    name: self.semaphore.core.name.clone(),
                    error,
                },
            );
        }
    }
}
