//! An integer kept in a string: the count of a semaphore (Redisson's
//! `RSemaphore`, `RPermitExpirableSemaphore`) and of a count-down latch
//! (`RCountDownLatch`). Setting it once and reading it are the same for
//! both.

use super::{counter_value, is_one, run, scripts};
use crate::Result;
use crate::backend::{Effect, LockBackend, Resend, ScriptCall};

scripts! {
    /// KEYS counter, channel[, op record]; ARGV value, message[, record
    /// ms]. 1 = set.
    SET_IF_ABSENT = "counter_set_if_absent", "counter set", writes, after "window_prelude", after "args_prelude", after "count_prelude", after "op_record_prelude";
    /// KEYS counter. Its value, nil when absent.
    GET = "counter_get", "counter get", reads;
}

/// Sets counter `name` to `value` only if it is absent, and then publishes
/// `message` on `channel`. Returns whether it was set.
///
/// # Errors
/// A store failure, a value the script refuses, or `Protocol` if the key
/// holds another type.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// assert!(redisync::internal::counter::set_if_absent(&store, "doc:count", "redisson_sc:{doc:count}", 3, "3")?);
/// assert!(!redisync::internal::counter::set_if_absent(&store, "doc:count", "redisson_sc:{doc:count}", 5, "5")?);
/// assert_eq!(redisync::internal::counter::get(&store, "doc:count")?, 3);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn set_if_absent<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    value: i64,
    message: &str,
) -> Result<bool> {
    set_if_absent_with(backend, name, channel, value, message, None)
}

/// As [`set_if_absent`], once (see [`super::once`]): with `record`
/// (`{name}:redisync_op:<op id>`, one fresh id per call) a copy arriving
/// after the call acted returns its first outcome and sets nothing (not after a delete); a call
/// that fails with its outcome unknown is settled, so its error means it
/// did not and will not act.
/// # Errors
/// As [`set_if_absent`]; a connection error for a call settled as not done, or
/// whose outcome stays unknown (the message says so).
///
/// ```
/// use redisync::internal::counter::{get, set_if_absent_recorded};
/// let (store, channel) = (redisync::MemoryBackend::new(), "redisson_sc:{doc:count-rec}");
/// let op = "{doc:count-rec}:redisync_op:s1";
/// assert!(set_if_absent_recorded(&store, "doc:count-rec", channel, 3, "3", op)?);
/// redisync::internal::semaphore::delete(&store, "doc:count-rec")?;
/// assert!(set_if_absent_recorded(&store, "doc:count-rec", channel, 3, "3", op)?); // sent again
/// assert_eq!(get(&store, "doc:count-rec")?, 0); // not set again after the delete
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn set_if_absent_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    value: i64,
    message: &str,
    record: &str,
) -> Result<bool> {
    set_if_absent_with(backend, name, channel, value, message, Some(record))
}

fn set_if_absent_with<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    value: i64,
    message: &str,
    record: Option<&str>,
) -> Result<bool> {
    let call = ScriptCall::new(&SET_IF_ABSENT, Resend::Harmless, Effect::Change(is_one))
        .key(name)
        .key(channel)
        .arg(value)
        .arg(message);
    super::once::run_once(backend, call, record, super::flag)
}

/// Reads counter `name` (0 when absent).
///
/// # Errors
/// A store failure, or `Protocol` if the key holds another type or a
/// non-integer.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// assert_eq!(redisync::internal::counter::get(&store, "doc:absent")?, 0);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn get<B: LockBackend + ?Sized>(backend: &B, name: &str) -> Result<i64> {
    let call = ScriptCall::new(&GET, Resend::Harmless, Effect::Read).key(name);
    counter_value(name, &run(backend, &call)?, GET.operation())
}
