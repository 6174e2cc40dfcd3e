//! An integer kept in a string: the count of a semaphore (Redisson's
//! `RSemaphore`, `RPermitExpirableSemaphore`) and of a count-down latch
//! (`RCountDownLatch`). Setting it once and reading it are the same for
//! both.

use super::{counter_value, is_one, run, run_as, script};
use crate::Result;
use crate::backend::{Effect, LockBackend, Resend, ScriptCall};

script!(
    /// KEYS counter, channel; ARGV value, message. 1 = set.
    SET_IF_ABSENT = "counter_set_if_absent", "counter set", after "window_prelude", after "args_prelude"
);
script!(
    /// KEYS counter. Its value, nil when absent.
    GET = "counter_get", "counter get"
);

/// Sets counter `name` to `value` only if it is absent, and then publishes
/// `message` on `channel`. Returns whether it was set.
///
/// # Errors
/// A store failure, a value the script refuses, or `Protocol` if the key
/// holds another type.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// assert!(redisync::ops::counter::set_if_absent(&store, "doc:count", "redisson_sc:{doc:count}", 3, "3")?);
/// assert!(!redisync::ops::counter::set_if_absent(&store, "doc:count", "redisson_sc:{doc:count}", 5, "5")?);
/// assert_eq!(redisync::ops::counter::get(&store, "doc:count")?, 3);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn set_if_absent<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    value: i64,
    message: &str,
) -> Result<bool> {
    let call = ScriptCall::new(&SET_IF_ABSENT, Resend::Harmless, Effect::Change(is_one))
        .key(name)
        .key(channel)
        .arg(value)
        .arg(message);
    run_as(backend, &call, super::flag)
}

/// Reads counter `name` (0 when absent).
///
/// # Errors
/// A store failure, or `Protocol` if the key holds another type or a
/// non-integer.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// assert_eq!(redisync::ops::counter::get(&store, "doc:absent")?, 0);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn get<B: LockBackend + ?Sized>(backend: &B, name: &str) -> Result<i64> {
    let call = ScriptCall::new(&GET, Resend::Harmless, Effect::Read).key(name);
    counter_value(name, &run(backend, &call)?, GET.operation())
}
