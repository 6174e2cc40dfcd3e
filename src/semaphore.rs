//! [`Semaphore`]: Redisson's `RSemaphore`, a counting semaphore in one Redis
//! string, and its RAII [`SemaphorePermit`].
//!
//! Permits have no owner and no lease: any thread or process may release
//! them, and the permits of a holder that crashes are not returned (use the
//! [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore) when that
//! matters). Waiters park until a release announces the new count, which
//! wakes up to that many of them.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::counting::{RESEND_HORIZON, exactly_once, permit_count};
use crate::event::UnlockFailedEvent;
use crate::handle::HandleCore;
use crate::ops;
use crate::pubsub::Wake;
use crate::telemetry::Primitive;
use crate::wait::{Attempt, Wait};
use crate::{Client, Error, Result, keys};

/// A handle on one distributed counting semaphore; created by
/// [`Client::semaphore`]. Cheap to clone, `Send + Sync`.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let slots = client.semaphore("downloads");
/// slots.try_set_permits(2)?;                 // only the first caller sets it
/// let first = slots.acquire(1)?;             // blocks until a permit is free
/// let second = slots.try_acquire(1)?;        // never waits
/// assert!(second.is_some());
/// assert!(slots.try_acquire(1)?.is_none());  // both taken
/// drop(first);                               // released on drop
/// assert_eq!(slots.available_permits()?, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
#[doc(alias = "RSemaphore")]
#[must_use = "a semaphore handle takes nothing by itself: call .acquire(n) or .try_acquire(n) on it"]
#[derive(Clone)]
pub struct Semaphore {
    core: HandleCore,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.debug(f, "Semaphore").finish()
    }
}

impl Semaphore {
    pub(crate) fn new(client: Client, name: String) -> Semaphore {
        let channel = keys::semaphore_channel(&name);
        Semaphore {
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
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let token = redisync::CancellationToken::new();
    /// let slots = client.semaphore("slots").cancellable(&token);
    /// token.cancel();
    /// assert!(slots.acquire(1).unwrap_err().is_cancelled());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "lockInterruptibly")]
    #[doc(alias = "acquireInterruptibly")]
    #[must_use = "the cancellable handle is a new value; call the blocking method on it"]
    pub fn cancellable(&self, token: &crate::CancellationToken) -> Semaphore {
        Semaphore {
            core: self.core.cancellable(token),
        }
    }

    /// The semaphore's name, as given to the client: the Redis key of its
    /// count, less the client's [name prefix](crate::ClientBuilder::name_prefix).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.semaphore("s").name(), "s");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "getName")]
    pub fn name(&self) -> &str {
        self.core.unmapped_name()
    }

    /// Sets the number of permits if it has not been set yet; returns
    /// whether this call set it. Zero is allowed.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name or more than `i64::MAX` permits;
    /// `Backend` if Redis fails; `Protocol` if the key holds another type.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let s = client.semaphore("s");
    /// assert!(s.try_set_permits(3)?);
    /// assert!(!s.try_set_permits(5)?);
    /// assert_eq!(s.available_permits()?, 3);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "trySetPermits")]
    pub fn try_set_permits(&self, permits: u64) -> Result<bool> {
        self.core.check_name()?;
        let permits = i64::try_from(permits).map_err(|_| {
            Error::invalid(
                "permits",
                format!("must be at most i64::MAX, got {permits}"),
            )
        })?;
        ops::counter::set_if_absent_recorded(
            self.core.store(),
            &self.core.name,
            &self.core.channel,
            permits,
            &permits.to_string(),
            &keys::new_op_record(&self.core.name),
        )
    }

    /// Adds `delta` permits (negative to remove some; the count may go
    /// negative, as in Redisson). Adding wakes waiters.
    ///
    /// The call carries a record (`{name}:redisync_op:<id>`, kept a
    /// minute), so the store may send it again after a connection fault
    /// without counting twice. Unlike
    /// [`release`](Self::release), a failed add is not sent again in the
    /// background: it is settled (it carries an op record; see README,
    /// Failure model), so its error means it did not count and will not
    /// (or, when the server cannot be reached to settle it, the error says
    /// its outcome is unknown).
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits), and `Protocol` if the
    /// count would overflow.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let s = client.semaphore("s");
    /// s.add_permits(2)?;
    /// s.add_permits(-5)?;
    /// assert_eq!(s.available_permits()?, -3);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "addPermits")]
    pub fn add_permits(&self, delta: i64) -> Result<()> {
        self.core.check_name()?;
        let backend = self.core.store();
        // Recorded (`{name}:redisync_op:<id>`): sent again after a
        // connection fault, it counts once. On a Redis Cluster too: while
        // the slot migrates, the recorded script is refused (TRYAGAIN) and
        // retried within the call's bound.
        // An error settles it (`ops::once`): it did not count, and will not.
        let record = keys::new_op_record(&self.core.name);
        let outcome = ops::semaphore::add_recorded(
            backend,
            &self.core.name,
            &self.core.channel,
            delta,
            &record,
        )
        .map(drop);
        ops::once::settled(
            backend,
            &record,
            ops::once::keep_ms(backend),
            ops::semaphore::ADD.operation(),
            outcome,
            |_, _| Ok(()),
        )
    }

    /// Gives back `permits` (a release): exactly once, also when the
    /// connection fails with the request in flight (see [`exactly_once`]).
    fn give_back(&self, permits: i64) -> Result<()> {
        self.core.check_name()?;
        let record = keys::new_op_record(&self.core.name);
        let (name, channel, op) = (
            self.core.name.clone(),
            self.core.channel.clone(),
            record.clone(),
        );
        exactly_once(&self.core.client, &self.core.name, record, move |backend| {
            ops::semaphore::add_recorded(backend, &name, &channel, permits, &op).map(drop)
        })
    }

    /// After an acquire failed with a connection error, its latest call
    /// (recorded under `record`) may have taken the permits, or take them
    /// later still: the undo gives back exactly what that call took, or
    /// marks it undone so that it is refused if it arrives later (see
    /// `ops::semaphore::undo_acquire`), in the background until it lands.
    fn undo_acquire(&self, permits: i64, record: String, cause: &Error) {
        let backend = Arc::clone(self.core.client.backend());
        let (name, channel, op) = (
            self.core.name.clone(),
            self.core.channel.clone(),
            record.clone(),
        );
        let task: crate::cleanup::Task = Box::new(move || {
            match ops::semaphore::undo_acquire(backend.as_ref(), &name, &channel, permits, &op) {
                Ok(_) => Ok(true),
                Err(err) if err.is_connection_error() => Err(err),
                Err(_) => Ok(true),
            }
        });
        if let Some(give_up_at) = Instant::now().checked_add(RESEND_HORIZON) {
            self.core
                .client
                .release_later(&self.core.name, &record, task, give_up_at, cause);
        }
    }

    /// Deletes the semaphore's count (Redisson's `RSemaphore.delete()`), so
    /// [`try_set_permits`](Self::try_set_permits) can set it again; returns
    /// whether it existed. Waiters are not woken (as in Redisson): a deleted
    /// semaphore has no permits to give them. Permits held then are still
    /// released into the new count when their guards drop.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name; `Backend` if Redis fails.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let s = client.semaphore("s");
    /// s.try_set_permits(3)?;
    /// assert!(s.delete()?);
    /// assert_eq!(s.available_permits()?, 0);
    /// assert!(s.try_set_permits(5)?);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn delete(&self) -> Result<bool> {
        self.core.check_name()?;
        ops::semaphore::delete_keys_recorded(
            self.core.store(),
            &self.core.name,
            None,
            &keys::new_op_record(&self.core.name),
        )
    }

    /// Blocks until `permits` permits are available and takes them.
    ///
    /// A semaphore starts with no permits: on one whose permits were never
    /// set (nor added, or that was deleted) this waits until someone calls
    /// [`try_set_permits`](Self::try_set_permits),
    /// [`add_permits`](Self::add_permits) or [`release`](Self::release),
    /// which may be never, as Redisson's `acquire()` does. Set the permits
    /// where the semaphore is created, or bound the wait with
    /// [`try_acquire_for`](Self::try_acquire_for); `redisync inspect NAME`
    /// and `redisync doctor` report threads waiting on such a semaphore.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name, 0 permits or more than
    /// `i64::MAX`; `Backend` if Redis fails; `Protocol` on a wrong type.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let s = client.semaphore("s");
    /// assert!(s.try_acquire_for(1, Duration::from_millis(20))?.is_none()); // never set
    /// s.try_set_permits(1)?;
    /// let permit = s.acquire(1)?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn acquire(&self, permits: u64) -> Result<SemaphorePermit> {
        self.acquire_within(permits, Wait::Forever)?
            .ok_or_else(|| Error::protocol("an unbounded wait ended without the permits"))
    }

    /// Takes `permits` permits if they are available now; never waits.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let s = client.semaphore("s");
    /// assert!(s.try_acquire(1)?.is_none()); // no permits set yet
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "tryAcquire")]
    #[must_use = "permits that are not bound are released at once: `if let Some(permit) = semaphore.try_acquire(1)? { ... }`"]
    pub fn try_acquire(&self, permits: u64) -> Result<Option<SemaphorePermit>> {
        self.acquire_within(permits, Wait::Never)
    }

    /// Waits up to `wait` for `permits` permits. `Ok(None)` on timeout.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let s = client.semaphore("s");
    /// assert!(s.try_acquire_for(2, Duration::from_millis(10))?.is_none());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "tryAcquire")]
    #[must_use = "permits that are not bound are released at once: `if let Some(permit) = semaphore.try_acquire(1)? { ... }`"]
    pub fn try_acquire_for(&self, permits: u64, wait: Duration) -> Result<Option<SemaphorePermit>> {
        self.acquire_within(permits, Wait::for_duration(wait))
    }

    /// Returns `permits` permits (taken by anyone: permits have no owner)
    /// and wakes waiters.
    ///
    /// Exactly once, also when the connection fails with the request in
    /// flight: the call carries a record (`{name}:redisync_op:<id>`, kept
    /// a minute), so sending it again never counts twice, and a request
    /// that arrives after its window writes nothing. A release that fails
    /// is sent again in line for up to 300 ms, then in the background for
    /// up to 30 s (on a Redis Cluster, also after a migrating slot kept
    /// refusing it with TRYAGAIN).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire); a `Backend` error after the in-line
    /// repeats means the release goes on in the background until it lands
    /// (once): do not release these permits again.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let s = client.semaphore("s");
    /// s.release(2)?;
    /// assert_eq!(s.available_permits()?, 2);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn release(&self, permits: u64) -> Result<()> {
        self.core.check_name()?;
        let permits = permit_count("permits", permits)?;
        self.give_back(permits)
    }

    /// The number of permits available now (negative after removing more
    /// than there were).
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.semaphore("s").available_permits()?, 0);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "availablePermits")]
    pub fn available_permits(&self) -> Result<i64> {
        self.core.check_name()?;
        ops::counter::get(self.core.store(), &self.core.name)
    }

    /// Takes every available permit and returns how many there were. They
    /// are not returned by any guard.
    ///
    /// Once, whatever the connection does (the call carries an op record;
    /// see README, Failure model): a copy of the call resent or
    /// delivered late drains nothing more, and its error means it drained
    /// nothing and will not.
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let s = client.semaphore("s");
    /// s.try_set_permits(4)?;
    /// assert_eq!(s.drain_permits()?, 4);
    /// assert_eq!(s.available_permits()?, 0);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "drainPermits")]
    pub fn drain_permits(&self) -> Result<i64> {
        self.core.check_name()?;
        ops::semaphore::drain_recorded(
            self.core.store(),
            &self.core.name,
            &keys::new_op_record(&self.core.name),
        )
    }

    fn acquire_within(&self, permits: u64, wait: Wait) -> Result<Option<SemaphorePermit>> {
        self.core.check_name()?;
        let count = permit_count("permits", permits)?;
        // The latest attempt's record: only the latest can have an unknown
        // outcome (each earlier one was answered).
        let record = std::cell::RefCell::new(None::<String>);
        let taken = self
            .core
            .wait_on(Wake::Semaphore, wait, Primitive::Semaphore, || {
                let op = keys::new_op_record(&self.core.name);
                let taken = ops::semaphore::try_acquire_recorded(
                    self.core.store(),
                    &self.core.name,
                    count,
                    &op,
                );
                *record.borrow_mut() = Some(op);
                Ok(if taken? {
                    Attempt::Done(())
                } else {
                    Attempt::Retry(None)
                })
            });
        let taken = match taken {
            Ok(taken) => taken,
            Err(err) => {
                if err.is_connection_error()
                    && let Some(op) = record.take()
                {
                    self.undo_acquire(count, op, &err);
                }
                return Err(err);
            }
        };
        Ok(taken.map(|()| SemaphorePermit {
            semaphore: self.clone(),
            permits: count,
            released: false,
        }))
    }
}

/// Permits taken from a [`Semaphore`]; created by [`Semaphore::acquire`]
/// and its `try_` variants. Dropping it releases them (errors go to the
/// client's [`EventHandler`](crate::EventHandler)); [`release`](Self::release)
/// returns the error instead, and [`forget`](Self::forget) keeps them taken.
/// Either release is exact under connection faults, as
/// [`Semaphore::release`] is: sent again until it lands, never counted
/// twice. Permits have no owner, so the guard is `Send`.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let s = client.semaphore("s");
/// s.try_set_permits(3)?;
/// let permit = s.acquire(2)?;
/// assert_eq!(permit.permits(), 2);
/// permit.release()?;
/// assert_eq!(s.available_permits()?, 3);
/// # Ok::<(), redisync::Error>(())
/// ```
#[must_use = "if unused the permits are released at once"]
#[clippy::has_significant_drop]
pub struct SemaphorePermit {
    semaphore: Semaphore,
    permits: i64,
    released: bool,
}

impl fmt::Debug for SemaphorePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("semaphore", &self.semaphore.core.name)
            .field("permits", &self.permits)
            .finish()
    }
}

impl SemaphorePermit {
    /// How many permits this guard holds.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # let s = client.semaphore("s"); s.try_set_permits(1)?;
    /// assert_eq!(s.acquire(1)?.permits(), 1);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn permits(&self) -> u64 {
        u64::try_from(self.permits).unwrap_or(0)
    }

    /// Releases the permits and returns any error.
    ///
    /// # Errors
    /// `Backend` if Redis failed after the in-line repeats: the release
    /// then goes on in the background until it lands, once, or 30 s
    /// have passed (see [`Semaphore::release`]).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # let s = client.semaphore("s"); s.try_set_permits(1)?;
    /// s.acquire(1)?.release()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.semaphore.give_back(self.permits)
    }

    /// Keeps the permits taken (nothing is released) and returns how many.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let s = client.semaphore("s");
    /// s.try_set_permits(1)?;
    /// assert_eq!(s.acquire(1)?.forget(), 1);
    /// assert_eq!(s.available_permits()?, 0);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn forget(mut self) -> u64 {
        self.released = true;
        self.permits()
    }
}

impl Drop for SemaphorePermit {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        if let Err(error) = self.semaphore.give_back(self.permits) {
            self.semaphore
                .core
                .client
                .events()
                .on_unlock_failed(&UnlockFailedEvent {
                    name: self.semaphore.core.name.clone(),
                    error,
                });
        }
    }
}
