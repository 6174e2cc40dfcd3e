//! The semaphore (Redisson's `RSemaphore`): the available permits in a
//! string (absent = 0, may go negative). A release announces the new count
//! on the semaphore's channel. Setting and reading the count are
//! [`super::counter`]'s.

use super::{always, counter_value, int, is_one, run, script};
use crate::backend::{Effect, LockBackend, Reply, Resend, ScriptCall};
use crate::{Error, Result};

script!(
    /// KEYS semaphore, channel; ARGV delta. The new count.
    ADD = "semaphore_add", "semaphore add", after "window_prelude", after "args_prelude"
);
script!(
    /// KEYS semaphore; ARGV permits. 1 = taken.
    TRY_ACQUIRE = "semaphore_try_acquire", "semaphore acquire", after "window_prelude", after "args_prelude"
);
script!(
    /// KEYS semaphore. How many were available.
    DRAIN = "semaphore_drain", "semaphore drain", after "window_prelude"
);
script!(
    /// KEYS semaphore. 1 = existed.
    DELETE = "semaphore_delete", "semaphore delete", after "window_prelude"
);

/// Adds `delta` (may be negative) to semaphore `name`; when `delta` is
/// positive, publishes the new count on `channel`. Returns the new count.
///
/// # Errors
/// A store failure, or `Protocol` on a wrong type or an overflow.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// assert_eq!(redisync::ops::semaphore::add(&store, "doc:sem", "redisson_sc:{doc:sem}", 2)?, 2);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn add<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    delta: i64,
) -> Result<i64> {
    let call = add_call(name, channel, delta);
    int(&run(backend, &call)?, ADD.operation())
}

/// The add script's call, shared with the undo of an acquisition. It
/// counts: sent again only if it provably never left.
fn add_call<'a>(name: &'a str, channel: &'a str, delta: i64) -> ScriptCall<'a> {
    ScriptCall::new(&ADD, Resend::IfUnsent, Effect::Change(always))
        .key(name)
        .key(channel)
        .arg(delta)
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
/// redisync::ops::semaphore::add(&store, "doc:sem-take", "redisson_sc:{doc:sem-take}", 1)?;
/// assert!(redisync::ops::semaphore::try_acquire(&store, "doc:sem-take", 1)?);
/// assert!(!redisync::ops::semaphore::try_acquire(&store, "doc:sem-take", 1)?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn try_acquire<B: LockBackend + ?Sized>(backend: &B, name: &str, permits: i64) -> Result<bool> {
    if permits < 1 {
        return Err(Error::invalid(
            "permits",
            format!("must be at least 1, got {permits}"),
        ));
    }
    let call = ScriptCall::new(
        &TRY_ACQUIRE,
        Resend::IfUnsent,
        Effect::Acquire {
            acquired: is_one,
            undo: undo_try_acquire,
        },
    )
    .key(name)
    .arg(permits);
    super::flag(&run(backend, &call)?, TRY_ACQUIRE.operation())
}

/// Returns the permits an acquire call took (KEYS semaphore; ARGV permits).
fn undo_try_acquire(call: &ScriptCall<'_>, _: &Reply) -> ScriptCall<'static> {
    let name = call.keys()[0].as_ref();
    let channel = crate::keys::semaphore_channel(name);
    add_call(name, &channel, call.args()[0].parse().unwrap_or(0)).into_owned()
}

/// Takes every available permit of semaphore `name`; returns how many.
///
/// # Errors
/// A store failure, or `Protocol` on a wrong type.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// redisync::ops::semaphore::add(&store, "doc:sem-drain", "redisson_sc:{doc:sem-drain}", 3)?;
/// assert_eq!(redisync::ops::semaphore::drain(&store, "doc:sem-drain")?, 3);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn drain<B: LockBackend + ?Sized>(backend: &B, name: &str) -> Result<i64> {
    let call = ScriptCall::new(&DRAIN, Resend::IfUnsent, Effect::Change(always)).key(name);
    counter_value(name, &run(backend, &call)?, DRAIN.operation())
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
/// redisync::ops::semaphore::add(&store, "doc:sem-del", "redisson_sc:{doc:sem-del}", 2)?;
/// assert!(redisync::ops::semaphore::delete(&store, "doc:sem-del")?);
/// assert!(!redisync::ops::semaphore::delete(&store, "doc:sem-del")?);
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
/// use redisync::ops::semaphore::{add, delete_keys};
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
    let mut call = ScriptCall::new(&DELETE, Resend::Harmless, Effect::Change(is_one)).key(name);
    if let Some(leases) = leases {
        call = call.key(leases);
    }
    super::flag(&run(backend, &call)?, DELETE.operation())
}
