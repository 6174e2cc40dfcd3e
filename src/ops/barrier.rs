//! The barrier (redisync only: Redisson has no distributed barrier): a
//! hash at the barrier's name counts the arrivals of the current
//! generation; the arrival that makes up the parties completes it, starts
//! the next and publishes `0` on `redisync_barrier:{name}`, which wakes
//! every waiter (as a latch's zero does). Each arrival carries a record
//! (`{name}:redisync_op:<op id>`), so that sending it again never counts
//! twice and a waiter that gives up withdraws exactly its own arrival.
//!
//! | key | type | contents | expiry |
//! |---|---|---|---|
//! | `name` | hash | `generation` (completed so far), `arrived`, `parties`, one field per arrival (its record's name = its generation) | none |
//! | `{name}:redisync_op:<op id>` | string | the generation the arrival joined, `w` once withdrawn | [`RECORD_MS`](super::semaphore::RECORD_MS) |
//! | channel `redisync_barrier:{name}` | pub/sub | `0` when a generation completes | |

use super::{always, int, part, run, scripts};
use crate::backend::{Effect, LockBackend, Reply, Resend, ScriptCall};
use crate::{Error, Result};

scripts! {
    /// KEYS barrier, channel, record; ARGV parties, record ms, open
    /// message. {generation, 1 = completed}.
    ARRIVE = "barrier_arrive", "barrier arrive", writes, after "window_prelude", after "args_prelude";
    /// KEYS barrier, record; ARGV record ms. {1 withdrawn | 2 completed | 0
    /// none, generation}.
    WITHDRAW = "barrier_withdraw", "barrier withdraw", writes, after "window_prelude", after "args_prelude";
    /// KEYS barrier [, record]. {generation, arrived, parties, 1 = the
    /// record's arrival still waits}; writes nothing.
    STATE = "barrier_state", "barrier state", reads;
    /// KEYS barrier. 1 = deleted (no arrival waited).
    DELETE = "barrier_delete", "barrier delete", writes, after "window_prelude", after "args_prelude", after "op_record_prelude";
}

/// The message that opens a generation: the latch's zero, so waiters wake
/// as a latch's do (every one of them).
pub const OPEN_MESSAGE: &str = crate::keys::LATCH_ZERO_MESSAGE;

/// The channel of barrier `name`: `redisync_barrier:{name}` (with the
/// name's own hash tag when it has one, as every key of it).
///
/// ```
/// assert_eq!(redisync::internal::barrier::channel("b"), "redisync_barrier:{b}");
/// ```
pub fn channel(name: &str) -> String {
    crate::keys::prefix("redisync_barrier", name)
}

/// What one arrival found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Arrival {
    /// The generation it joined (0 for the first).
    pub generation: u64,
    /// Whether that generation has completed: this arrival made up the
    /// parties (or, for a repeat, it has completed since).
    pub completed: bool,
}

/// What withdrawing an arrival did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Withdrawal {
    /// The arrival no longer counts (now, or by an earlier withdrawal of
    /// it: `generation` is then `None`).
    Withdrawn {
        /// The generation it had joined.
        generation: Option<u64>,
    },
    /// Its generation had completed: the arrival stands, its waiter was
    /// released.
    Completed {
        /// That generation.
        generation: u64,
    },
    /// No arrival under the record was found (none landed, or its record
    /// expired after its generation completed); one that comes later is
    /// refused.
    NotFound,
}

/// A barrier as read by [`state`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BarrierState {
    /// Generations completed so far.
    pub generation: u64,
    /// Arrivals of the current generation.
    pub arrived: u64,
    /// The parties the current generation waits for (0: no arrival yet).
    pub parties: u64,
}

/// Arrives at barrier `name` that waits for `parties`, under the call's
/// `record` (`{name}:redisync_op:<op id>`, one fresh id per arrival, kept
/// [`RECORD_MS`](super::semaphore::RECORD_MS)): the same call sent again
/// arrives no more and returns the first outcome. The arrival that makes
/// up the parties completes the generation and publishes
/// [`OPEN_MESSAGE`] on `channel`.
///
/// # Errors
/// `InvalidArgument` for 0 parties, or other parties than the current
/// generation's arrivals gave; a connection error (a late request) for an
/// arrival withdrawn already; `Protocol` on a wrong type; a store failure.
///
/// ```
/// use redisync::internal::barrier::{arrive, channel};
/// let store = redisync::MemoryBackend::new();
/// let ch = channel("doc:b");
/// let first = arrive(&store, "doc:b", &ch, 2, "{doc:b}:redisync_op:a")?;
/// assert_eq!((first.generation, first.completed), (0, false));
/// assert_eq!(arrive(&store, "doc:b", &ch, 2, "{doc:b}:redisync_op:a")?, first); // sent again
/// assert!(arrive(&store, "doc:b", &ch, 2, "{doc:b}:redisync_op:b")?.completed);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn arrive<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    parties: u32,
    record: &str,
) -> Result<Arrival> {
    if parties == 0 {
        return Err(Error::invalid("parties", "must be at least 1, got 0"));
    }
    // The record makes a repeat return the first outcome.
    let call = ScriptCall::new(&ARRIVE, Resend::Harmless, Effect::Change(always))
        .key(name)
        .key(channel)
        .key(record)
        .arg(i64::from(parties))
        .arg(super::semaphore::counting_record_ms(backend))
        .arg(OPEN_MESSAGE);
    let reply = run(backend, &call)?;
    let operation = ARRIVE.operation();
    Ok(Arrival {
        generation: generation(part(&reply, 0, operation)?, operation)?,
        completed: super::flag(part(&reply, 1, operation)?, operation)?,
    })
}

/// Withdraws the arrival at barrier `name` recorded under `record`, if its
/// generation has not completed; marks the record withdrawn (for
/// [`RECORD_MS`](super::semaphore::RECORD_MS)), so that the arrival, if its
/// request comes later still, is refused. Idempotent.
///
/// # Errors
/// `Protocol` on a wrong type; a store failure.
///
/// ```
/// use redisync::internal::barrier::{Withdrawal, arrive, channel, state, withdraw};
/// let store = redisync::MemoryBackend::new();
/// let op = "{doc:bw}:redisync_op:a";
/// arrive(&store, "doc:bw", &channel("doc:bw"), 2, op)?;
/// assert_eq!(withdraw(&store, "doc:bw", op)?, Withdrawal::Withdrawn { generation: Some(0) });
/// assert_eq!(state(&store, "doc:bw")?.arrived, 0);
/// assert!(arrive(&store, "doc:bw", &channel("doc:bw"), 2, op).is_err()); // refused now
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn withdraw<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    record: &str,
) -> Result<Withdrawal> {
    let call = ScriptCall::new(&WITHDRAW, Resend::Harmless, Effect::Change(always))
        .key(name)
        .key(record)
        .arg(super::semaphore::counting_record_ms(backend));
    let reply = run(backend, &call)?;
    let operation = WITHDRAW.operation();
    let code = int(part(&reply, 0, operation)?, operation)?;
    let joined = int(part(&reply, 1, operation)?, operation)?;
    match (code, u64::try_from(joined)) {
        (1, joined) => Ok(Withdrawal::Withdrawn {
            generation: joined.ok(),
        }),
        (2, Ok(generation)) => Ok(Withdrawal::Completed { generation }),
        (0, _) => Ok(Withdrawal::NotFound),
        _ => Err(reply.unexpected(operation, "{0, 1 or 2, a generation}")),
    }
}

/// Reads barrier `name`: the generations completed, the current one's
/// arrivals and parties. Writes nothing.
///
/// # Errors
/// `Protocol` on a wrong type or a corrupt count; a store failure.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// assert_eq!(redisync::internal::barrier::state(&store, "doc:bs")?.generation, 0);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn state<B: LockBackend + ?Sized>(backend: &B, name: &str) -> Result<BarrierState> {
    let call = ScriptCall::new(&STATE, Resend::Harmless, Effect::Read).key(name);
    let reply = run(backend, &call)?;
    let operation = STATE.operation();
    Ok(BarrierState {
        generation: generation(part(&reply, 0, operation)?, operation)?,
        arrived: generation(part(&reply, 1, operation)?, operation)?,
        parties: generation(part(&reply, 2, operation)?, operation)?,
    })
}

/// Whether the arrival at barrier `name` recorded under `record` still
/// waits: its generation has not completed (and it was not withdrawn).
/// Writes nothing.
///
/// # Errors
/// `Protocol` on a wrong type; a store failure.
///
/// ```
/// use redisync::internal::barrier::{arrive, channel, still_waiting};
/// let store = redisync::MemoryBackend::new();
/// let (a, b) = ("{doc:bsw}:redisync_op:a", "{doc:bsw}:redisync_op:b");
/// arrive(&store, "doc:bsw", &channel("doc:bsw"), 2, a)?;
/// assert!(still_waiting(&store, "doc:bsw", a)?);
/// arrive(&store, "doc:bsw", &channel("doc:bsw"), 2, b)?;   // completes it
/// assert!(!still_waiting(&store, "doc:bsw", a)?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn still_waiting<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    record: &str,
) -> Result<bool> {
    let call = ScriptCall::new(&STATE, Resend::Harmless, Effect::Read)
        .key(name)
        .key(record);
    let reply = run(backend, &call)?;
    super::flag(part(&reply, 3, STATE.operation())?, STATE.operation())
}

/// Deletes barrier `name` if no arrival waits at it (its generations
/// start again at 0); returns whether it deleted it. Arrival records are
/// left to expire.
///
/// # Errors
/// A store failure.
///
/// ```
/// use redisync::internal::barrier::{arrive, channel, delete};
/// let store = redisync::MemoryBackend::new();
/// arrive(&store, "doc:bd", &channel("doc:bd"), 2, "{doc:bd}:redisync_op:a")?;
/// assert!(!delete(&store, "doc:bd")?);                  // an arrival waits
/// arrive(&store, "doc:bd", &channel("doc:bd"), 2, "{doc:bd}:redisync_op:b")?;
/// assert!(delete(&store, "doc:bd")?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn delete<B: LockBackend + ?Sized>(backend: &B, name: &str) -> Result<bool> {
    delete_with(backend, name, None)
}

/// As [`delete`], once (see [`super::once`]): with `record`
/// (`{name}:redisync_op:<op id>`, one fresh id per call) a copy arriving
/// after the call acted returns its first outcome and deletes nothing (not the generations counted since); a call
/// that fails with its outcome unknown is settled, so its error means it
/// did not and will not act.
/// # Errors
/// As [`delete`]; a connection error for a call settled as not done, or
/// whose outcome stays unknown (the message says so).
pub fn delete_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    record: &str,
) -> Result<bool> {
    delete_with(backend, name, Some(record))
}

fn delete_with<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    record: Option<&str>,
) -> Result<bool> {
    let call = ScriptCall::new(&DELETE, Resend::Harmless, Effect::Change(super::is_one)).key(name);
    super::once::run_once(backend, call, record, super::flag)
}

/// A non-negative count of a reply (a script reads a corrupt field as -1).
fn generation(reply: &Reply, operation: &str) -> Result<u64> {
    u64::try_from(int(reply, operation)?)
        .map_err(|_| reply.unexpected(operation, "a non-negative integer"))
}
