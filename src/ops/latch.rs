//! The count-down latch (Redisson's `RCountDownLatch`): the count in a
//! string, deleted at zero, when `0` on the latch's channel wakes every
//! waiter. Setting and reading the count are [`super::counter`]'s.

use super::{always, int, is_one, run, script};
use crate::Result;
use crate::backend::{Effect, LockBackend, Resend, ScriptCall};
use crate::keys::{LATCH_NEW_COUNT_MESSAGE, LATCH_ZERO_MESSAGE};

script!(
    /// KEYS latch, channel; ARGV zero message. The new count.
    COUNT_DOWN = "latch_count_down", "latch count down", after "window_prelude"
);
script!(
    /// KEYS latch, channel; ARGV new-count message. 1 = existed.
    DELETE = "latch_delete", "latch delete", after "window_prelude"
);

/// Counts latch `name` down by one; at zero or below deletes it, and at
/// exactly zero publishes `0` on `channel`. Returns the new count.
///
/// # Errors
/// A store failure, or `Protocol` on a wrong type.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// let channel = "redisson_countdownlatch__channel__{doc:latch}";
/// redisync::ops::counter::set_if_absent(&store, "doc:latch", channel, 2, "1")?;
/// assert_eq!(redisync::ops::latch::count_down(&store, "doc:latch", channel)?, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn count_down<B: LockBackend + ?Sized>(backend: &B, name: &str, channel: &str) -> Result<i64> {
    // It counts: sent again only if it provably never left.
    let call = ScriptCall::new(&COUNT_DOWN, Resend::IfUnsent, Effect::Change(always))
        .key(name)
        .key(channel)
        .arg(LATCH_ZERO_MESSAGE);
    int(&run(backend, &call)?, COUNT_DOWN.operation())
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
/// assert!(!redisync::ops::latch::delete(&store, "doc:latch-del", channel)?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn delete<B: LockBackend + ?Sized>(backend: &B, name: &str, channel: &str) -> Result<bool> {
    let call = ScriptCall::new(&DELETE, Resend::Harmless, Effect::Change(is_one))
        .key(name)
        .key(channel)
        .arg(LATCH_NEW_COUNT_MESSAGE);
    super::flag(&run(backend, &call)?, DELETE.operation())
}
