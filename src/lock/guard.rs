//! [`LockGuard`]: the RAII proof of one hold, for a thread or an explicit
//! owner; its queries, `extend`, and the unlock (explicit or on drop) that
//! hands the release to the release path.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::acquire::AttemptId;
use super::{Lock, holds};
use crate::event::UnlockFailedEvent;
use crate::flavor::Renewal;
use crate::holder::{GuardHolder, HolderIsTheThread};
use crate::watchdog::Lease;
use crate::{Error, Result};

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
    pub(super) lock: Lock,
    /// The holder and how the watchdog renews it.
    pub(super) renewal: Arc<Renewal>,
    /// The lease each reentrant release resets (`extend` changes it).
    pub(super) lease_ms: std::cell::Cell<i64>,
    /// The hold's lease by the local clock (shared with the watchdog).
    pub(super) lease: Arc<Lease>,
    /// Whether the watchdog renews it.
    pub(super) watchdog: bool,
    /// A fenced lock's fencing token for this acquisition.
    pub(super) token: Option<u64>,
    /// The record of the acquire attempt that took this hold
    /// (`{name}:redisync_attempt:<id>`): its release's unlock latch.
    pub(super) attempt: Option<AttemptId>,
    pub(super) released: bool,
    /// When it was handed out (the hold time of the metrics).
    pub(super) acquired_at: Instant,
    /// Who holds it: the thread (then the guard must not move to another)
    /// or an explicit owner.
    pub(super) holder: H,
    /// How many times the hold may still be passed to another thread of
    /// the client with no call to the store (see `cohort`).
    pub(super) passes_left: u32,
    /// How many times it was, since the store last counted it.
    pub(super) passes: u32,
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
    /// [`Client::fenced_lock`](crate::Client::fenced_lock), `None` for every
    /// other kind.
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

    /// The holder id of this hold, `<client uuid>:<thread>` (the lock
    /// hash's field).
    pub(crate) fn holder_id(&self) -> &str {
        &self.renewal.holder.id
    }

    /// The hold's TTL was set to `length` by a request sent at `sent`
    /// (that checked this holder still holds it): the lease runs from
    /// there.
    pub(crate) fn lease_set(&self, sent: std::time::Instant, length: std::time::Duration) {
        self.lease.renewed(sent, length);
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
        let backend = self.lock.client.store();
        if self.passes > 0 {
            // Passed to this thread: the new lease replaces its restart.
            self.lock.client.watchdog().cancel_restart(&self.renewal);
        }
        let sent = Instant::now();
        // Its attempt's record: a copy of this call landing after the
        // release renews nothing (not the holder's next hold).
        let record = self.attempt.map(|id| id.key(&keys.name));
        match keys.extend(backend, &self.renewal.holder, lease_ms, record.as_deref()) {
            Ok(true) => {
                self.lease.renewed(sent, lease);
                self.lease_ms.set(lease_ms);
                Ok(())
            }
            Ok(false) => {
                self.lease.mark_lost();
                Err(Error::NotHeld {
                    name: keys.name.to_string(),
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
        let key = holds::key(&self.renewal.holder, &self.lock.keys.name);
        let outermost = holds::hold_released(&key, H::EXPLICIT);
        // A fixed lease that may be passed: one bound over the release
        // that follows if it is not (the waiter withdrew meanwhile).
        let _unlock_bound = (outermost && !self.watchdog && self.passes_left > 0)
            .then(|| crate::deadline::enter(self.lock.unlock_deadline(Instant::now())));
        // Passed on inside the client: the store sees nothing (a fixed
        // lease's restart comes later from the watchdog, if at all); the
        // watch and the local owner record go with the hold.
        if outermost && self.pass_on() {
            return Ok(());
        }
        // The watch goes first: a renewal answered after the release ran
        // would find the lock gone and report a loss that is none. If its
        // renewal is in flight, this waits for it (it would renew this
        // holder's next hold), and the wait counts against the unlock's
        // own bound.
        let waited = if self.watchdog {
            self.lock
                .client
                .watchdog()
                .stop(&self.renewal, self.attempt)
        } else {
            if outermost && self.passes > 0 {
                // Passed to this thread: its lease's restart is not needed.
                self.lock.client.watchdog().cancel_restart(&self.renewal);
            }
            None
        };
        let _bound = waited.map(|since| crate::deadline::enter(self.lock.unlock_deadline(since)));
        let records = outermost && self.lock.keys.hands_over();
        if records {
            // Before the release is sent: a thread that still finds this
            // hold recorded took its snapshot before the unlock message.
            let field = self.renewal.holder.field();
            self.lock
                .client
                .local_owners()
                .released(&self.lock.keys.name, field);
        }
        let result = self.lock.release(
            &self.renewal.holder,
            self.lease_ms.get(),
            outermost,
            self.attempt.map(|id| id.key(&self.lock.keys.name)),
            self.passes,
        );
        if records {
            let client = &self.lock.client;
            // A thread of this client may have parked on this hold without
            // an attempt (see `local_owner`); the store lost it, so no
            // unlock will be published: wake a waiter to try.
            if matches!(result, Err(Error::NotHeld { .. })) {
                client
                    .subscriber()
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
                .events()
                .on_unlock_failed(&UnlockFailedEvent {
                    name: self.lock.keys.name.to_string(),
                    error,
                });
        }
    }
}
