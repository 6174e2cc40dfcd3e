//! The semaphore (Redisson's `RSemaphore`): the available permits in a
//! string (absent = 0, may go negative). A release announces the new count
//! on the semaphore's channel. Setting and reading the count are
//! [`super::counter`]'s.

use super::{always, counter_value, int, is_one, run, run_as, scripts};
use crate::backend::{Effect, LockBackend, Reply, Resend, ScriptCall};
use crate::{Error, Result};

scripts! {
    /// KEYS semaphore, channel; ARGV delta. The new count.
    ADD = "semaphore_add", "semaphore add", writes, after "window_prelude", after "args_prelude", after "count_prelude";
    /// KEYS semaphore; ARGV permits. 1 = taken.
    TRY_ACQUIRE = "semaphore_try_acquire", "semaphore acquire", writes, after "window_prelude", after "args_prelude", after "count_prelude";
    /// KEYS semaphore, channel, record; ARGV permits, record ms [, 1 =
    /// forget the record]. 1 = given back, 0 = nothing taken.
    UNDO_ACQUIRE = "semaphore_undo_acquire", "semaphore undo acquire", writes, after "window_prelude", after "args_prelude", after "count_prelude", after "undo_prelude";
    /// KEYS semaphore[, op record]; ARGV [record ms]. How many were
    /// available.
    DRAIN = "semaphore_drain", "semaphore drain", writes, after "window_prelude", after "args_prelude", after "op_record_prelude";
    /// KEYS semaphore[, leases][, op record]; ARGV [record ms]. 1 =
    /// existed.
    DELETE = "semaphore_delete", "semaphore delete", writes, after "window_prelude", after "args_prelude", after "op_record_prelude";
}

/// Adds `delta` (may be negative) to semaphore `name`; when `delta` is
/// positive, publishes the new count on `channel`. Returns the new count.
///
/// # Errors
/// A store failure, or `Protocol` on a wrong type or an overflow.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// assert_eq!(redisync::internal::semaphore::add(&store, "doc:sem", "redisson_sc:{doc:sem}", 2)?, 2);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn add<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    delta: i64,
) -> Result<i64> {
    add_with(backend, name, channel, delta, None)
}

/// As [`add`], and records the call under `record` (a key of its own,
/// `{name}:redisync_op:<op id>`, one fresh id per call, kept
/// [`RECORD_MS`]): the same call sent again (its reply lost, or its
/// outcome unknown) counts nothing more and returns the count as it is
/// then. So it may be sent again after any connection fault, until the
/// record expires.
///
/// # Errors
/// As [`add`].
///
/// ```
/// use redisync::internal::semaphore::{add_recorded, add};
/// let store = redisync::MemoryBackend::new();
/// let (channel, op) = ("redisson_sc:{doc:sem-rec}", "{doc:sem-rec}:redisync_op:r1");
/// assert_eq!(add_recorded(&store, "doc:sem-rec", channel, 2, op)?, 2);
/// assert_eq!(add_recorded(&store, "doc:sem-rec", channel, 2, op)?, 2); // sent again: no count
/// assert_eq!(add(&store, "doc:sem-rec", channel, 0)?, 2);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn add_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    delta: i64,
    record: &str,
) -> Result<i64> {
    add_with(backend, name, channel, delta, Some(record))
}

fn add_with<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    delta: i64,
    record: Option<&str>,
) -> Result<i64> {
    let call = add_call(name, channel, delta, record, counting_record_ms(backend));
    run_as(backend, &call, int)
}

/// How long a counting call's record (`{name}:redisync_op:<op id>`) is
/// kept, in ms: a minute, twice as long as the primitives send a call
/// again in the background ([`crate::Semaphore`]'s releases and undos, the
/// latch's count-downs), so that every repeat finds the first's record.
///
/// ```
/// assert_eq!(redisync::internal::semaphore::RECORD_MS, 60_000);
/// ```
pub use super::RECORD_MS;

/// How long a counting call's record is kept on `backend`: [`RECORD_MS`],
/// or, with a response timeout long enough to need it, the background
/// resends' horizon (half of it) plus the longest window of the last
/// resend (see [`record_keep_ms`](super::record_keep_ms)), so that every
/// copy of the call finds the first one's record inside its window.
pub(crate) fn counting_record_ms<B: LockBackend + ?Sized>(backend: &B) -> i64 {
    super::record_keep_ms(backend, RECORD_MS)
        .max((RECORD_MS / 2).saturating_add(super::record_keep_ms(backend, 0)))
}

/// The add script's call. It counts: sent again only if it provably
/// never left, unless `record` makes a repeat return the first outcome.
fn add_call<'a>(
    name: &'a str,
    channel: &'a str,
    delta: i64,
    record: Option<&'a str>,
    record_ms: i64,
) -> ScriptCall<'a> {
    let call = ScriptCall::new(&ADD, resend(record), Effect::Change(always))
        .key(name)
        .key(channel)
        .arg(delta);
    match record {
        Some(record) => call.key(record).arg(record_ms),
        None => call,
    }
}

/// How a counting call may be sent again: with a record, freely (a repeat
/// returns the first outcome); without, only if it provably never left.
fn resend(record: Option<&str>) -> Resend {
    match record {
        Some(_) => Resend::Harmless,
        None => Resend::IfUnsent,
    }
}

/// Checks the permits an acquire asks for: at least 1.
fn check_permits(permits: i64) -> Result<()> {
    if permits < 1 {
        return Err(Error::invalid(
            "permits",
            format!("must be at least 1, got {permits}"),
        ));
    }
    Ok(())
}

/// Takes `permits` (positive) from semaphore `name` if that many are
/// available. Returns whether it did.
///
/// # Errors
/// `InvalidArgument` for fewer than 1 permit; a store failure; `Protocol`
/// on a wrong type.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::semaphore::add(&store, "doc:sem-take", "redisson_sc:{doc:sem-take}", 1)?;
/// assert!(redisync::internal::semaphore::try_acquire(&store, "doc:sem-take", 1)?);
/// assert!(!redisync::internal::semaphore::try_acquire(&store, "doc:sem-take", 1)?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn try_acquire<B: LockBackend + ?Sized>(backend: &B, name: &str, permits: i64) -> Result<bool> {
    try_acquire_with(backend, name, permits, None)
}

/// As [`try_acquire`], and records the call under `record`
/// (`{name}:redisync_op:<op id>`, one fresh id per call, kept
/// [`RECORD_MS`]) with its outcome: the same call sent again (its
/// reply lost, or a copy delayed in the network) acts no more and returns
/// that first outcome; [`undo_acquire`] with
/// the same record gives back exactly what it took, and once undone the
/// call is refused if it arrives later still.
///
/// # Errors
/// As [`try_acquire`]; a connection error (a late request) for a call
/// already undone.
///
/// ```
/// use redisync::internal::semaphore::{add, try_acquire_recorded};
/// let store = redisync::MemoryBackend::new();
/// add(&store, "doc:sem-acq", "redisson_sc:{doc:sem-acq}", 2)?;
/// let op = "{doc:sem-acq}:redisync_op:a1";
/// assert!(try_acquire_recorded(&store, "doc:sem-acq", 1, op)?);
/// assert!(try_acquire_recorded(&store, "doc:sem-acq", 1, op)?); // sent again: no second take
/// assert_eq!(redisync::internal::counter::get(&store, "doc:sem-acq")?, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn try_acquire_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    permits: i64,
    record: &str,
) -> Result<bool> {
    try_acquire_with(backend, name, permits, Some(record))
}

fn try_acquire_with<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    permits: i64,
    record: Option<&str>,
) -> Result<bool> {
    check_permits(permits)?;
    let call = ScriptCall::new(
        &TRY_ACQUIRE,
        resend(record),
        Effect::Acquire {
            acquired: is_one,
            undo: undo_sent,
        },
    )
    .key(name)
    .arg(permits);
    let call = match record {
        Some(record) => call.key(record).arg(counting_record_ms(backend)),
        None => call,
    };
    run_as(backend, &call, super::flag)
}

/// Undoes exactly the [`try_acquire_recorded`] call with `record`: gives
/// back the `permits` it took, if it took them, and nothing else; marks it
/// undone (for [`RECORD_MS`]), so that if its request arrives later still
/// it is refused. Returns whether it gave permits back. Idempotent.
///
/// # Errors
/// A store failure; `InvalidArgument` for fewer than 1 permit.
///
/// ```
/// use redisync::internal::semaphore::{add, try_acquire_recorded, undo_acquire};
/// let store = redisync::MemoryBackend::new();
/// let channel = "redisson_sc:{doc:sem-undo}";
/// add(&store, "doc:sem-undo", channel, 1)?;
/// let op = "{doc:sem-undo}:redisync_op:a1";
/// assert!(try_acquire_recorded(&store, "doc:sem-undo", 1, op)?);
/// assert!(undo_acquire(&store, "doc:sem-undo", channel, 1, op)?);
/// assert!(!undo_acquire(&store, "doc:sem-undo", channel, 1, op)?); // once
/// assert!(try_acquire_recorded(&store, "doc:sem-undo", 1, op).is_err()); // refused now
/// assert_eq!(redisync::internal::counter::get(&store, "doc:sem-undo")?, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn undo_acquire<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    permits: i64,
    record: &str,
) -> Result<bool> {
    check_permits(permits)?;
    let call = undo_call(name, channel, permits, record, counting_record_ms(backend));
    run_as(backend, &call, super::flag)
}

fn undo_call<'a>(
    name: &'a str,
    channel: &'a str,
    permits: i64,
    record: &'a str,
    record_ms: i64,
) -> ScriptCall<'a> {
    ScriptCall::new(&UNDO_ACQUIRE, Resend::Harmless, Effect::Change(is_one))
        .key(name)
        .key(channel)
        .key(record)
        .arg(permits)
        .arg(record_ms)
}

/// The replica-acknowledgement undo of a [`try_acquire`] or
/// [`try_acquire_recorded`] call (KEYS semaphore[, record]; ARGV permits[,
/// record ms]): recorded, exactly what it took, and the record forgotten,
/// since the store sends the same call again at once (its reply came:
/// nothing of it is still on the way); unrecorded, the permits it took
/// added back.
fn undo_sent(call: &ScriptCall<'_>, _: &Reply) -> ScriptCall<'static> {
    let name = call.keys()[0].as_ref();
    let channel = crate::keys::semaphore_channel(name);
    match call.keys().get(1) {
        Some(record) => undo_call(
            name,
            &channel,
            call.args()[0].parse().unwrap_or(1),
            record.as_ref(),
            // Forgotten at once ('1'): a replica rollback, sent again.
            RECORD_MS,
        )
        .arg("1")
        .into_owned(),
        None => add_call(
            name,
            &channel,
            call.args()[0].parse().unwrap_or(0),
            None,
            RECORD_MS,
        )
        .into_owned(),
    }
}

/// Takes every available permit of semaphore `name`; returns how many.
///
/// # Errors
/// A store failure, or `Protocol` on a wrong type.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::semaphore::add(&store, "doc:sem-drain", "redisson_sc:{doc:sem-drain}", 3)?;
/// assert_eq!(redisync::internal::semaphore::drain(&store, "doc:sem-drain")?, 3);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn drain<B: LockBackend + ?Sized>(backend: &B, name: &str) -> Result<i64> {
    let call = ScriptCall::new(&DRAIN, Resend::IfUnsent, Effect::Change(always)).key(name);
    counter_value(name, &run(backend, &call)?, DRAIN.operation())
}

/// As [`drain`], once (see [`super::once`]): with `record`
/// (`{name}:redisync_op:<op id>`, one fresh id per call) a copy arriving
/// after the call acted returns its first outcome and takes nothing (not permits released since); a call
/// that fails with its outcome unknown is settled, so its error means it
/// did not and will not act.
/// # Errors
/// As [`drain`]; a connection error for a call settled as not done, or
/// whose outcome stays unknown (the message says so).
///
/// ```
/// use redisync::internal::semaphore::{add, drain_recorded};
/// let (store, channel) = (redisync::MemoryBackend::new(), "redisson_sc:{doc:drain-rec}");
/// let op = "{doc:drain-rec}:redisync_op:d1";
/// add(&store, "doc:drain-rec", channel, 5)?;
/// assert_eq!(drain_recorded(&store, "doc:drain-rec", op)?, 5);
/// add(&store, "doc:drain-rec", channel, 2)?;
/// assert_eq!(drain_recorded(&store, "doc:drain-rec", op)?, 5); // sent again: the first outcome
/// assert_eq!(redisync::internal::counter::get(&store, "doc:drain-rec")?, 2);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn drain_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    record: &str,
) -> Result<i64> {
    let call = ScriptCall::new(&DRAIN, Resend::Harmless, Effect::Change(always)).key(name);
    let reply = super::once::run_once(backend, call, Some(record), |reply, _| Ok(reply.clone()))?;
    counter_value(name, &reply, DRAIN.operation())
}

/// Deletes semaphore `name` (Redisson's `RSemaphore.delete`), so its
/// permits can be set again; publishes nothing (no permits, nothing to
/// wake for). Returns whether it existed.
///
/// # Errors
/// A store failure.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::semaphore::add(&store, "doc:sem-del", "redisson_sc:{doc:sem-del}", 2)?;
/// assert!(redisync::internal::semaphore::delete(&store, "doc:sem-del")?);
/// assert!(!redisync::internal::semaphore::delete(&store, "doc:sem-del")?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn delete<B: LockBackend + ?Sized>(backend: &B, name: &str) -> Result<bool> {
    delete_keys(backend, name, None)
}

/// Deletes semaphore `name` and, for a permit-expirable one, its `leases`
/// zset (Redisson's `RPermitExpirableSemaphore.delete`); publishes nothing.
/// Returns whether any of them existed.
///
/// # Errors
/// A store failure.
///
/// ```
/// use redisync::internal::semaphore::{add, delete_keys};
/// let store = redisync::MemoryBackend::new();
/// add(&store, "doc:exp-del", "redisson_sc:{doc:exp-del}", 2)?;
/// assert!(delete_keys(&store, "doc:exp-del", Some("{doc:exp-del}:timeout"))?);
/// assert!(!delete_keys(&store, "doc:exp-del", Some("{doc:exp-del}:timeout"))?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn delete_keys<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    leases: Option<&str>,
) -> Result<bool> {
    delete_keys_with(backend, name, leases, None)
}

/// As [`delete_keys`], once (see [`super::once`]): with `record`
/// (`{name}:redisync_op:<op id>`, one fresh id per call) a copy arriving
/// after the call acted returns its first outcome and deletes nothing (not permits set since); a call
/// that fails with its outcome unknown is settled, so its error means it
/// did not and will not act.
/// # Errors
/// As [`delete_keys`]; a connection error for a call settled as not done, or
/// whose outcome stays unknown (the message says so).
pub fn delete_keys_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    leases: Option<&str>,
    record: &str,
) -> Result<bool> {
    delete_keys_with(backend, name, leases, Some(record))
}

fn delete_keys_with<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    leases: Option<&str>,
    record: Option<&str>,
) -> Result<bool> {
    let mut call = ScriptCall::new(&DELETE, Resend::Harmless, Effect::Change(is_one)).key(name);
    if let Some(leases) = leases {
        call = call.key(leases);
    }
    super::once::run_once(backend, call, record, super::flag)
}
