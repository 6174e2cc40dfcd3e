//! [`PermitExpirableSemaphore`]: Redisson's `RPermitExpirableSemaphore`, a
//! semaphore whose permits carry an id and a lease, so the permit of a
//! holder that crashes returns to the pool when its lease runs out.
//!
//! The available count is the same string as a [`Semaphore`](crate::Semaphore)'s;
//! leased permits live in the zset `{name}:timeout` (permit id → lease end in
//! ms by the acquiring client's clock). Expired leases are reclaimed by the
//! next acquire, release or count, which announces the new count. A waiter
//! parks until a release announces permits or the earliest lease runs out.

use std::fmt;
use std::time::Duration;

use crate::backend::{Acquire, ExpirableKeys};
use crate::ops;
use crate::pubsub::Wake;
use crate::semaphore::check_name;
use crate::wait::{Attempt, Wait, Waiting};
use crate::{Client, Error, Result, keys};

/// The id of one leased permit; returned by
/// [`PermitExpirableSemaphore::acquire`]. Not tied to a thread or a process:
/// store it, send it, release it anywhere.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// # let s = client.permit_expirable_semaphore("p"); s.try_set_permits(1)?;
/// let id = s.acquire(std::time::Duration::from_secs(60))?;
/// assert_eq!(id.as_str().len(), 32);
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PermitId(String);

impl PermitId {
    /// The id as stored in Redis (32 hex digits, as Redisson's).
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
/// let id = workers.acquire(Duration::from_millis(50))?;   // a 50 ms lease
/// assert!(workers.try_acquire(Duration::from_secs(1))?.is_none());
/// std::thread::sleep(Duration::from_millis(80));         // the holder "crashed"
/// assert_eq!(workers.available_permits()?, 1);           // its permit came back
/// assert!(!workers.try_release(&id)?);                   // too late to release it
/// # Ok::<(), redisync::Error>(())
/// ```
#[doc(alias = "RPermitExpirableSemaphore")]
#[derive(Clone)]
pub struct PermitExpirableSemaphore {
    client: Client,
    name: String,
    leases: String,
    channel: String,
    /// Ends this handle's waits from another thread (see `cancellable`).
    cancel: Option<crate::CancellationToken>,
}

impl fmt::Debug for PermitExpirableSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitExpirableSemaphore")
            .field("name", &self.name)
            .finish()
    }
}

impl PermitExpirableSemaphore {
    pub(crate) fn new(client: Client, name: String) -> PermitExpirableSemaphore {
        PermitExpirableSemaphore {
            leases: keys::expirable_leases(&name),
            channel: keys::semaphore_channel(&name),
            client,
            name,
            cancel: None,
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
            cancel: Some(token.clone()),
            ..self.clone()
        }
    }

    fn keys(&self) -> ExpirableKeys<'_> {
        ExpirableKeys {
            name: &self.name,
            leases: &self.leases,
            channel: &self.channel,
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
        &self.name
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
        check_name(&self.name)?;
        ops::expirable::available(
            &*self.client.inner.backend,
            &self.keys(),
            crate::clock::wall_clock_ms(),
        )
    }

    /// Blocks until a permit is available and takes it for `lease`; it
    /// returns to the pool when the lease runs out unless released first.
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
    /// let id = p.acquire(Duration::from_secs(30))?;
    /// p.release(&id)?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn acquire(&self, lease: Duration) -> Result<PermitId> {
        self.acquire_within(Wait::Forever, lease)?
            .ok_or_else(|| Error::protocol("an unbounded wait ended without a permit"))
    }

    /// Takes a permit for `lease` if one is available now; never waits.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert!(client.permit_expirable_semaphore("p").try_acquire(Duration::from_secs(1))?.is_none());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn try_acquire(&self, lease: Duration) -> Result<Option<PermitId>> {
        self.acquire_within(Wait::Never, lease)
    }

    /// Waits up to `wait` for a permit and takes it for `lease`.
    /// `Ok(None)` on timeout.
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
    pub fn try_acquire_for(&self, wait: Duration, lease: Duration) -> Result<Option<PermitId>> {
        self.acquire_within(Wait::for_duration(wait), lease)
    }

    /// Returns permit `id` to the pool. Returns `false` when the permit is
    /// unknown or its lease already ran out (it was then reclaimed).
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # let p = client.permit_expirable_semaphore("p"); p.try_set_permits(1)?;
    /// let id = p.acquire(Duration::from_secs(30))?;
    /// assert!(p.try_release(&id)?);
    /// assert!(!p.try_release(&id)?);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn try_release(&self, id: &PermitId) -> Result<bool> {
        check_name(&self.name)?;
        ops::expirable::release(
            &*self.client.inner.backend,
            &self.keys(),
            id.as_str(),
            crate::clock::wall_clock_ms(),
        )
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
    /// let id = p.acquire(Duration::from_secs(30))?;
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
                    self.name
                ),
            ))
        }
    }

    fn as_semaphore(&self) -> crate::Semaphore {
        crate::Semaphore::new(self.client.clone(), self.name.clone())
    }

    fn acquire_within(&self, wait: Wait, lease: Duration) -> Result<Option<PermitId>> {
        check_name(&self.name)?;
        let lease_ms = crate::error::millis("lease", lease)?;
        let inner = &self.client.inner;
        let keys = self.keys();
        let id = PermitId(uuid::Uuid::new_v4().simple().to_string());
        let taken = crate::wait::until_done(
            &inner.subscriber,
            Waiting {
                channel: &self.channel,
                wake: Wake::Semaphore,
                wait,
                fallback: inner.watchdog_timeout,
                defer_to_woken: false,
                primitive: crate::telemetry::Primitive::PermitExpirableSemaphore,
                first: &|| crate::wait::First::Attempt,
                name: &self.name,
                cancel: self.cancel.as_ref(),
                seat: None,
            },
            || {
                let now = crate::clock::wall_clock_ms();
                let ends = now.checked_add(lease_ms).ok_or_else(|| {
                    Error::invalid("lease", format!("{lease:?} from now overflows the clock"))
                })?;
                Ok(
                    match ops::expirable::acquire(&*inner.backend, &keys, id.as_str(), ends, now)? {
                        Acquire::Acquired => Attempt::Done(()),
                        Acquire::Held { ttl } => Attempt::Retry(ttl),
                    },
                )
            },
        )
        .map(|taken| {
            taken
                .and_then(crate::wait::Done::attempted)
                .map(|()| id.clone())
        });
        if let Err(err) = &taken
            && err.is_connection_error()
        {
            self.undo_unknown_attempt(&id, lease_ms, err);
        }
        taken
    }

    /// After an acquire failed with a connection error, its request may
    /// still have run and leased the permit `id` to nobody. Releasing that
    /// id is exact (an id never leased is not found), so the client's
    /// cleanup thread sends the release until it lands or the lease would
    /// have ended anyway.
    fn undo_unknown_attempt(&self, id: &PermitId, lease_ms: i64, cause: &Error) {
        let lease = Duration::from_millis(u64::try_from(lease_ms).unwrap_or(0));
        let Some(give_up_at) = std::time::Instant::now().checked_add(lease) else {
            return;
        };
        let backend = std::sync::Arc::clone(&self.client.inner.backend);
        let (name, leases, channel) =
            (self.name.clone(), self.leases.clone(), self.channel.clone());
        let permit = id.as_str().to_owned();
        let task: crate::cleanup::Task = Box::new(move || {
            let keys = ExpirableKeys {
                name: &name,
                leases: &leases,
                channel: &channel,
            };
            ops::expirable::release(&*backend, &keys, &permit, crate::clock::wall_clock_ms())?;
            Ok(true)
        });
        self.client
            .inner
            .cleanup
            .push(&self.name, id.as_str(), task, give_up_at, false, cause);
    }
}
