//! The count-down latch (Redisson's `RCountDownLatch`): the count in a
//! string, deleted at zero, when `0` on the latch's channel wakes every
//! waiter. Setting and reading the count are [`super::counter`]'s.

use super::{always, int, is_one, run_as, scripts};
use crate::Result;
use crate::backend::{Effect, LockBackend, Resend, ScriptCall};
use crate::keys::{LATCH_NEW_COUNT_MESSAGE, LATCH_ZERO_MESSAGE};

scripts! {
    /// KEYS latch, channel; ARGV zero message. The new count.
    COUNT_DOWN = "latch_count_down", "latch count down", writes, after "window_prelude", after "args_prelude";
    /// KEYS latch, channel[, op record]; ARGV new-count message[, record
    /// ms]. 1 = existed.
    DELETE = "latch_delete", "latch delete", writes, after "window_prelude", after "args_prelude", after "op_record_prelude";
}

/// Counts latch `name` down by one; at zero or below deletes it, and at
/// exactly zero publishes `0` on `channel`. Returns the new count.
///
/// # Errors
/// A store failure, or `Protocol` on a wrong type.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// let channel = "redisson_countdownlatch__channel__{doc:latch}";
/// redisync::internal::counter::set_if_absent(&store, "doc:latch", channel, 2, "1")?;
/// assert_eq!(redisync::internal::latch::count_down(&store, "doc:latch", channel)?, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn count_down<B: LockBackend + ?Sized>(backend: &B, name: &str, channel: &str) -> Result<i64> {
    // It counts: sent again only if it provably never left.
    let call = ScriptCall::new(&COUNT_DOWN, Resend::IfUnsent, Effect::Change(always))
        .key(name)
        .key(channel)
        .arg(LATCH_ZERO_MESSAGE);
    run_as(backend, &call, int)
}

/// As [`count_down`], and records the call under `record` (a key of its
/// own, `{name}:redisync_op:<op id>`, one fresh id per call, kept
/// [`RECORD_MS`](super::semaphore::RECORD_MS)): the same call sent again
/// (its reply lost) counts nothing more and returns the count as it is
/// then.
///
/// # Errors
/// As [`count_down`].
///
/// ```
/// use redisync::internal::latch::count_down_recorded;
/// let store = redisync::MemoryBackend::new();
/// let channel = "redisson_countdownlatch__channel__{doc:latch-rec}";
/// redisync::internal::counter::set_if_absent(&store, "doc:latch-rec", channel, 3, "1")?;
/// let op = "{doc:latch-rec}:redisync_op:c1";
/// assert_eq!(count_down_recorded(&store, "doc:latch-rec", channel, op)?, 2);
/// assert_eq!(count_down_recorded(&store, "doc:latch-rec", channel, op)?, 2); // sent again
/// assert_eq!(redisync::internal::counter::get(&store, "doc:latch-rec")?, 2);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn count_down_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    record: &str,
) -> Result<i64> {
    // The record makes a repeat return the first outcome.
    let call = ScriptCall::new(&COUNT_DOWN, Resend::Harmless, Effect::Change(always))
        .key(name)
        .key(channel)
        .key(record)
        .arg(LATCH_ZERO_MESSAGE)
        .arg(super::semaphore::counting_record_ms(backend));
    run_as(backend, &call, int)
}

/// Deletes latch `name`; if it existed publishes `1` (new count) on
/// `channel` and returns `true`.
///
/// # Errors
/// A store failure.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// let channel = "redisson_countdownlatch__channel__{doc:latch-del}";
/// assert!(!redisync::internal::latch::delete(&store, "doc:latch-del", channel)?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn delete<B: LockBackend + ?Sized>(backend: &B, name: &str, channel: &str) -> Result<bool> {
    delete_with(backend, name, channel, None)
}

/// As [`delete`], once (see [`super::once`]): with `record`
/// (`{name}:redisync_op:<op id>`, one fresh id per call) a copy arriving
/// after the call acted returns its first outcome and deletes nothing (not a count set since); a call
/// that fails with its outcome unknown is settled, so its error means it
/// did not and will not act.
/// # Errors
/// As [`delete`]; a connection error for a call settled as not done, or
/// whose outcome stays unknown (the message says so).
pub fn delete_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    record: &str,
) -> Result<bool> {
    delete_with(backend, name, channel, Some(record))
}

fn delete_with<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    record: Option<&str>,
) -> Result<bool> {
    let call = ScriptCall::new(&DELETE, Resend::Harmless, Effect::Change(is_one))
        .key(name)
        .key(channel)
        .arg(LATCH_NEW_COUNT_MESSAGE);
    super::once::run_once(backend, call, record, super::flag)
}
