//! [`Barrier`]: a distributed cyclic barrier (redisync only: Redisson has
//! none). Threads in any process wait until `parties` of them have
//! arrived, then all go on together; the next `parties` arrivals form the
//! next generation. Its operations (and its keys) are `ops::barrier`'s.

use std::fmt;
use std::time::{Duration, Instant};

use crate::handle::HandleCore;
use crate::ops;
use crate::ops::barrier::Withdrawal;
use crate::pubsub::Wake;
use crate::telemetry::Primitive;
use crate::wait::{Attempt, Wait};
use crate::{Client, Error, Result, keys};

/// A handle on one distributed barrier for `parties` parties; created by
/// [`Client::barrier`]. Cheap to clone, `Send + Sync`. Like Java's
/// `CyclicBarrier`, across processes.
///
/// [`wait`](Self::wait) arrives and blocks until the `parties`-th arrival
/// of the same generation, in any client; then every waiter of that
/// generation returns, woken by one pub/sub message on
/// `redisync_barrier:{name}` (no polling). The barrier is then ready for
/// the next generation. A waiter that gives up
/// ([`wait_for`](Self::wait_for) timing out, a cancel, a connection error)
/// withdraws its own arrival, exactly, unless its generation completed
/// first (then it reports the completion instead). Every arrival carries a
/// record (`{name}:redisync_op:<id>`), so that the store may send it again
/// after a connection fault without counting it twice.
///
/// A party that dies while it waits still counts as arrived, as a
/// count-down a process made before it died counts for a latch: its
/// generation completes with one party fewer.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let start = client.barrier("batch:start", 3);
/// let workers: Vec<_> = (0..3)
///     .map(|_| {
///         let start = start.clone();
///         std::thread::spawn(move || start.wait())
///     })
///     .collect();
/// for worker in workers {
///     assert_eq!(worker.join().unwrap()?, 0); // all three met in generation 0
/// }
/// assert_eq!(start.generation()?, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
#[doc(alias = "CyclicBarrier")]
#[must_use = "a barrier handle does nothing by itself: call .wait() on it"]
#[derive(Clone)]
pub struct Barrier {
    core: HandleCore,
    parties: u32,
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core
            .debug(f, "Barrier")
            .field("parties", &self.parties)
            .finish()
    }
}

impl Barrier {
    pub(crate) fn new(client: Client, name: String, parties: u32) -> Barrier {
        let channel = ops::barrier::channel(&name);
        Barrier {
            core: HandleCore::new(client, name, channel),
            parties,
        }
    }

    /// This handle, with its waits ended by `token`: a blocked
    /// [`wait`](Self::wait) then withdraws its arrival and returns
    /// [`Error::Cancelled`](crate::Error::Cancelled) promptly. The
    /// handle's other clones are unaffected.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let token = redisync::CancellationToken::new();
    /// let barrier = client.barrier("b", 2).cancellable(&token);
    /// token.cancel();
    /// assert!(barrier.wait().unwrap_err().is_cancelled());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[must_use = "the cancellable handle is a new value; call .wait() on it"]
    pub fn cancellable(&self, token: &crate::CancellationToken) -> Barrier {
        Barrier {
            core: self.core.cancellable(token),
            ..self.clone()
        }
    }

    /// The barrier's name, as given to the client (less the client's
    /// [name prefix](crate::ClientBuilder::name_prefix)).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.barrier("b", 2).name(), "b");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.core.unmapped_name()
    }

    /// How many arrivals complete a generation, as given to
    /// [`Client::barrier`].
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.barrier("b", 4).parties(), 4);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "getParties")]
    pub fn parties(&self) -> u32 {
        self.parties
    }

    /// Arrives and blocks until `parties` arrivals (this one included) have
    /// met in this generation; returns the generation (0 for the first).
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name, 0 parties, or other parties
    /// than the waiting arrivals of the current generation gave;
    /// `Cancelled` (see [`cancellable`](Self::cancellable)); `Backend` if
    /// the store fails; `Protocol` if the key holds another type. On any
    /// error the arrival is withdrawn (in the background if the store is
    /// unreachable), unless its generation completed.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let solo = client.barrier("solo", 1);
    /// assert_eq!(solo.wait()?, 0);                    // one party: at once
    /// assert_eq!(solo.wait()?, 1);                    // the next generation
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "await")]
    pub fn wait(&self) -> Result<u64> {
        self.wait_within(Wait::Forever)?
            .ok_or_else(|| Error::protocol("an unbounded barrier wait ended before its generation"))
    }

    /// As [`wait`](Self::wait), for up to `timeout`: `Ok(None)` when the
    /// generation did not complete in time, with this arrival withdrawn
    /// (the parties still to come are as many as before the call). When it
    /// completed at the last moment, the completion wins:
    /// `Ok(Some(generation))`.
    ///
    /// # Errors
    /// As [`wait`](Self::wait).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let pair = client.barrier("pair", 2);
    /// assert_eq!(pair.wait_for(Duration::from_millis(20))?, None); // no one came
    /// assert_eq!(pair.arrived()?, 0);                             // withdrawn
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "await")]
    pub fn wait_for(&self, timeout: Duration) -> Result<Option<u64>> {
        self.wait_within(Wait::for_duration(timeout))
    }

    /// The arrivals waiting in the current generation now.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name; `Backend` if the store fails;
    /// `Protocol` if the key holds another type.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.barrier("b", 2).arrived()?, 0);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "getNumberWaiting")]
    pub fn arrived(&self) -> Result<u64> {
        self.core.check_name()?;
        Ok(ops::barrier::state(self.core.store(), &self.core.name)?.arrived)
    }

    /// How many generations have completed (the next to complete has this
    /// number).
    ///
    /// # Errors
    /// As [`arrived`](Self::arrived).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let b = client.barrier("b", 1);
    /// b.wait()?;
    /// assert_eq!(b.generation()?, 1);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn generation(&self) -> Result<u64> {
        self.core.check_name()?;
        Ok(ops::barrier::state(self.core.store(), &self.core.name)?.generation)
    }

    /// Deletes the barrier if no arrival waits at it, so that its
    /// generations start again at 0 (and its key is gone); returns whether
    /// it deleted it. With arrivals waiting it changes nothing and returns
    /// `false`: they keep waiting for their parties.
    ///
    /// # Errors
    /// As [`arrived`](Self::arrived).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let b = client.barrier("b", 1);
    /// b.wait()?;
    /// assert!(b.delete()?);
    /// assert_eq!(b.generation()?, 0);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn delete(&self) -> Result<bool> {
        self.core.check_name()?;
        ops::barrier::delete_recorded(
            self.core.store(),
            &self.core.name,
            &keys::new_op_record(&self.core.name),
        )
    }

    fn wait_within(&self, wait: Wait) -> Result<Option<u64>> {
        self.core.check_name()?;
        if self.parties == 0 {
            return Err(Error::invalid("parties", "must be at least 1, got 0"));
        }
        let record = keys::new_op_record(&self.core.name);
        // The generation this call joined, once its arrival is answered;
        // whether it was sent at all (then a failure withdraws it).
        let joined = std::cell::Cell::new(None::<u64>);
        let sent = std::cell::Cell::new(false);
        // The first attempt arrives (after the wait has noted the channel's
        // state, so a completion published before the subscription is not
        // missed); every later one reads whether the generation completed.
        let outcome = self
            .core
            .wait_on(Wake::Latch, wait, Primitive::Barrier, || {
                let store = self.core.store();
                let (generation, completed) = match joined.get() {
                    None => {
                        sent.set(true);
                        let arrival = ops::barrier::arrive(
                            store,
                            &self.core.name,
                            &self.core.channel,
                            self.parties,
                            &record,
                        )?;
                        joined.set(Some(arrival.generation));
                        (arrival.generation, arrival.completed)
                    }
                    // Its field goes only when its generation completes (or
                    // it withdraws, which it has not): gone = released.
                    Some(generation) => (
                        generation,
                        !ops::barrier::still_waiting(store, &self.core.name, &record)?,
                    ),
                };
                Ok(if completed {
                    Attempt::Done(generation)
                } else {
                    Attempt::Retry(None)
                })
            });
        match outcome {
            Ok(Some(generation)) => Ok(Some(generation)),
            Ok(None) => self.withdraw(record, joined.get(), None),
            Err(err) if sent.get() => self.withdraw(record, joined.get(), Some(err)),
            Err(err) => Err(err),
        }
    }

    /// Withdraws this call's arrival (recorded under `record`; `joined`:
    /// its generation, if the arrival was answered) after its wait ended
    /// without the completion, for `cause` (`None`: it timed out). A
    /// completion found now wins; a withdrawal that cannot reach the store
    /// goes on in the background.
    fn withdraw(
        &self,
        record: String,
        joined: Option<u64>,
        cause: Option<Error>,
    ) -> Result<Option<u64>> {
        let finish = |cause: Option<Error>| cause.map_or(Ok(None), Err);
        match ops::barrier::withdraw(self.core.store(), &self.core.name, &record) {
            Ok(Withdrawal::Completed { generation }) => Ok(Some(generation)),
            // Answered, but its record gone: only a completed generation
            // drops an arrival that was not withdrawn (and a record lives
            // longer than any request that could still arrive).
            Ok(Withdrawal::NotFound) => match joined {
                Some(generation) => Ok(Some(generation)),
                None => finish(cause),
            },
            Ok(_) => finish(cause),
            Err(err) => {
                if err.is_connection_error()
                    && let Some(give_up_at) =
                        Instant::now().checked_add(crate::counting::RESEND_HORIZON)
                {
                    let backend = std::sync::Arc::clone(self.core.client.backend());
                    let (name, op) = (self.core.name.clone(), record.clone());
                    let task: crate::cleanup::Task = Box::new(move || {
                        match ops::barrier::withdraw(backend.as_ref(), &name, &op) {
                            Ok(_) => Ok(true),
                            Err(err) if err.is_connection_error() => Err(err),
                            // Answered: sending it again changes nothing.
                            Err(_) => Ok(true),
                        }
                    });
                    self.core.client.release_later(
                        &self.core.name,
                        &record,
                        task,
                        give_up_at,
                        &err,
                    );
                }
                Err(cause.unwrap_or(err))
            }
        }
    }
}
