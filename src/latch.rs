//! [`CountDownLatch`]: Redisson's `RCountDownLatch`, a count in one Redis
//! string that waiters in any process wait on until it reaches zero.

use std::fmt;
use std::time::Duration;

use crate::handle::HandleCore;
use crate::ops;
use crate::pubsub::Wake;
use crate::telemetry::Primitive;
use crate::wait::{Attempt, Wait};
use crate::{Client, Error, Result, keys};

/// A handle on one distributed count-down latch; created by
/// [`Client::count_down_latch`]. Cheap to clone, `Send + Sync`.
///
/// The count is set once ([`try_set_count`](Self::try_set_count)); each
/// [`count_down`](Self::count_down) lowers it, and when it reaches zero the
/// key is deleted and every waiter, in every client, is woken together.
/// [`delete`](Self::delete) resets it so it can be set again.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let ready = client.count_down_latch("workers-ready");
/// ready.try_set_count(2)?;
/// let waiter = {
///     let ready = ready.clone();
///     std::thread::spawn(move || ready.wait())
/// };
/// ready.count_down()?;
/// ready.count_down()?;               // zero: the waiter wakes
/// waiter.join().unwrap()?;
/// assert_eq!(ready.count()?, 0);
/// # Ok::<(), redisync::Error>(())
/// ```
#[doc(alias = "RCountDownLatch")]
#[must_use = "a latch handle does nothing by itself: call .wait() or .count_down() on it"]
#[derive(Clone)]
pub struct CountDownLatch {
    core: HandleCore,
}

impl fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.debug(f, "CountDownLatch").finish()
    }
}

impl CountDownLatch {
    pub(crate) fn new(client: Client, name: String) -> CountDownLatch {
        let channel = keys::latch_channel(&name);
        CountDownLatch {
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
    /// let ready = client.count_down_latch("ready");
    /// ready.try_set_count(1)?;
    /// token.cancel();
    /// assert!(ready.cancellable(&token).wait().unwrap_err().is_cancelled());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "lockInterruptibly")]
    #[doc(alias = "acquireInterruptibly")]
    #[must_use = "the cancellable handle is a new value; call the blocking method on it"]
    pub fn cancellable(&self, token: &crate::CancellationToken) -> CountDownLatch {
        CountDownLatch {
            core: self.core.cancellable(token),
        }
    }

    /// The latch's name, as given to the client: the Redis key of its
    /// count, less the client's [name prefix](crate::ClientBuilder::name_prefix).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.count_down_latch("l").name(), "l");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "getName")]
    pub fn name(&self) -> &str {
        self.core.unmapped_name()
    }

    /// Sets the count if the latch is not set (or was opened or deleted);
    /// returns whether this call set it.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name, a count of 0 (it would be open
    /// already) or over `i64::MAX`; `Backend` if Redis fails; `Protocol` on
    /// a wrong type.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let l = client.count_down_latch("l");
    /// assert!(l.try_set_count(3)?);
    /// assert!(!l.try_set_count(1)?);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "trySetCount")]
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        self.core.check_name()?;
        let count = crate::counting::permit_count("count", count)?;
        ops::counter::set_if_absent_recorded(
            self.core.store(),
            &self.core.name,
            &self.core.channel,
            count,
            keys::LATCH_NEW_COUNT_MESSAGE,
            &keys::new_op_record(&self.core.name),
        )
    }

    /// Lowers the count by one; at zero the latch opens and every waiter is
    /// woken. Counting down an open latch does nothing.
    ///
    /// Exactly once, also when the connection fails with the request in
    /// flight: the call carries a record (`{name}:redisync_op:<id>`, kept
    /// a minute) so that sending it again never counts twice, and a
    /// request that arrives after its window writes nothing. One that
    /// fails is sent again in line for up to 300 ms, then in the
    /// background for up to 30 s (on a Redis Cluster, also after a
    /// migrating slot kept refusing it with TRYAGAIN).
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name; `Protocol` on a wrong type;
    /// `Backend` if Redis fails after the in-line repeats: the count-down
    /// then goes on in the background until it lands (once): do not count
    /// down again for it.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let l = client.count_down_latch("l");
    /// l.try_set_count(2)?;
    /// l.count_down()?;
    /// assert_eq!(l.count()?, 1);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "countDown")]
    pub fn count_down(&self) -> Result<()> {
        self.core.check_name()?;
        let record = keys::new_op_record(&self.core.name);
        let (name, channel, op) = (
            self.core.name.clone(),
            self.core.channel.clone(),
            record.clone(),
        );
        crate::counting::exactly_once(&self.core.client, &self.core.name, record, move |backend| {
            ops::latch::count_down_recorded(backend, &name, &channel, &op).map(drop)
        })
    }

    /// The current count (0 when open or never set), as stored.
    ///
    /// An `i64`, as every count redisync reads back
    /// ([`Semaphore::available_permits`](crate::Semaphore::available_permits),
    /// [`PermitExpirableSemaphore::acquired_permits`](crate::PermitExpirableSemaphore::acquired_permits)):
    /// Redis integers and Redisson's `long` `getCount()` are signed, and a
    /// semaphore's count goes negative (`add_permits(-n)`, `set_permits`).
    /// Arguments that cannot be negative (a count to set, permits to take)
    /// stay `u64`.
    ///
    /// # Errors
    /// As [`count_down`](Self::count_down).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let latch = client.count_down_latch("l");
    /// assert_eq!(latch.count()?, 0);
    /// latch.try_set_count(2)?;
    /// let permits: i64 = client.semaphore("s").available_permits()?;
    /// assert_eq!(latch.count()? - permits, 2);        // one type: no casts
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "getCount")]
    pub fn count(&self) -> Result<i64> {
        self.core.check_name()?;
        ops::counter::get(self.core.store(), &self.core.name)
    }

    /// Blocks until the count reaches zero.
    ///
    /// # Errors
    /// As [`count_down`](Self::count_down).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// client.count_down_latch("never-set").wait()?; // an unset latch is open
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "await")]
    pub fn wait(&self) -> Result<()> {
        self.wait_within(Wait::Forever)?
            .ok_or_else(|| Error::protocol("an unbounded wait ended with the latch closed"))
    }

    /// Waits up to `timeout` for the count to reach zero; returns whether it
    /// did.
    ///
    /// # Errors
    /// As [`count_down`](Self::count_down).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let l = client.count_down_latch("l");
    /// l.try_set_count(1)?;
    /// assert!(!l.wait_for(Duration::from_millis(10))?);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "await")]
    pub fn wait_for(&self, timeout: Duration) -> Result<bool> {
        Ok(self.wait_within(Wait::for_duration(timeout))?.is_some())
    }

    /// Deletes the latch, so its count can be set again; returns whether it
    /// existed. A deleted latch counts as open (its count reads 0), so a
    /// waiter that checks before a new count is set returns.
    ///
    /// # Errors
    /// As [`count_down`](Self::count_down).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let l = client.count_down_latch("l");
    /// l.try_set_count(5)?;
    /// assert!(l.delete()?);
    /// assert!(l.try_set_count(1)?);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn delete(&self) -> Result<bool> {
        self.core.check_name()?;
        ops::latch::delete_recorded(
            self.core.store(),
            &self.core.name,
            &self.core.channel,
            &keys::new_op_record(&self.core.name),
        )
    }

    fn wait_within(&self, wait: Wait) -> Result<Option<()>> {
        self.core.check_name()?;
        self.core
            .wait_on(Wake::Latch, wait, Primitive::CountDownLatch, || {
                Ok(
                    if ops::counter::get(self.core.store(), &self.core.name)? <= 0 {
                        Attempt::Done(())
                    } else {
                        Attempt::Retry(None)
                    },
                )
            })
    }
}
