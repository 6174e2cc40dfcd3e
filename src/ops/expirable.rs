//! The permit-expirable semaphore (Redisson's `RPermitExpirableSemaphore`):
//! the available permits in a string and the leased permit ids in a sorted
//! set scored by lease end. Expired leases are reclaimed before every
//! operation. Setting and adding permits are [`super::counter`]'s and
//! [`super::semaphore`]'s (the count is the same string).

use super::lock::acquire_outcome;
use super::{counter_value, is_one, run, script};
use crate::Result;
use crate::backend::{Acquire, Effect, ExpirableKeys, LockBackend, Reply, Resend, ScriptCall};
use crate::error::check_time_ms;

script!(
    /// KEYS available, leases, channel; ARGV id, lease end ms, now ms. nil
    /// = taken, else ms to wait.
    ACQUIRE = "expirable_acquire", "expirable semaphore acquire", after "args_prelude", after "expirable_prelude"
);
script!(
    /// KEYS available, leases, channel; ARGV id, now ms. 1 = released.
    RELEASE = "expirable_release", "expirable semaphore release", after "args_prelude", after "expirable_prelude"
);
script!(
    /// KEYS available, leases, channel; ARGV now ms. The available permits.
    AVAILABLE = "expirable_available", "expirable semaphore available", after "args_prelude", after "expirable_prelude"
);

/// Reclaims expired leases, then takes one permit as `permit_id` with a
/// lease ending at `lease_end_ms`. `Held { ttl }`: none available; `ttl`
/// is the time until the earliest lease ends.
///
/// # Errors
/// A store failure, a time out of range, or `Protocol` on a wrong type.
///
/// ```
/// use redisync::backend::{Acquire, ExpirableKeys};
/// let keys = ExpirableKeys { name: "doc:pes", leases: "{doc:pes}:timeout", channel: "redisson_sc:{doc:pes}" };
/// let store = redisync::MemoryBackend::new();
/// redisync::ops::semaphore::add(&store, keys.name, keys.channel, 1)?;
/// let now = 1_700_000_000_000;
/// assert_eq!(redisync::ops::expirable::acquire(&store, &keys, "p1", now + 60_000, now)?, Acquire::Acquired);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn acquire<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    permit_id: &str,
    lease_end_ms: i64,
    now_ms: i64,
) -> Result<Acquire> {
    check_time_ms("lease end", lease_end_ms)?;
    check_time_ms("now", now_ms)?;
    let call = ScriptCall::new(
        &ACQUIRE,
        // It takes a permit: sent again only if it provably never left.
        Resend::IfUnsent,
        Effect::Acquire {
            acquired: Reply::is_nil,
            undo: undo_acquire,
        },
    )
    .key(keys.name)
    .key(keys.leases)
    .key(keys.channel)
    .arg(permit_id)
    .arg(lease_end_ms)
    .arg(now_ms);
    acquire_outcome(&run(backend, &call)?, ACQUIRE.operation())
}

/// Returns the permit an acquire call leased (KEYS available, leases,
/// channel; ARGV id, lease end, now).
fn undo_acquire(call: &ScriptCall<'_>, _: &Reply) -> ScriptCall<'static> {
    let keys = ExpirableKeys {
        name: call.keys()[0].as_ref(),
        leases: call.keys()[1].as_ref(),
        channel: call.keys()[2].as_ref(),
    };
    release_call(
        &keys,
        call.args()[0].as_ref(),
        call.args()[2].parse().unwrap_or(0),
    )
    .into_owned()
}

/// Returns permit `permit_id` to the pool and publishes the new count.
/// `false` when the permit is unknown or its lease had run out (it is then
/// reclaimed, not released).
///
/// # Errors
/// A store failure, a time out of range, or `Protocol` on a wrong type.
///
/// ```
/// use redisync::backend::ExpirableKeys;
/// let keys = ExpirableKeys { name: "doc:pes-rel", leases: "{doc:pes-rel}:timeout", channel: "redisson_sc:{doc:pes-rel}" };
/// let store = redisync::MemoryBackend::new();
/// assert!(!redisync::ops::expirable::release(&store, &keys, "unknown", 1_700_000_000_000)?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn release<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    permit_id: &str,
    now_ms: i64,
) -> Result<bool> {
    check_time_ms("now", now_ms)?;
    let call = release_call(keys, permit_id, now_ms);
    super::flag(&run(backend, &call)?, RELEASE.operation())
}

/// The release script's call, shared with the undo of an acquisition (an
/// id released twice is not found the second time: harmless to repeat).
fn release_call<'a>(keys: &ExpirableKeys<'a>, permit_id: &'a str, now_ms: i64) -> ScriptCall<'a> {
    ScriptCall::new(&RELEASE, Resend::Harmless, Effect::Change(is_one))
        .key(keys.name)
        .key(keys.leases)
        .key(keys.channel)
        .arg(permit_id)
        .arg(now_ms)
}

/// Reclaims expired leases and returns the available permits.
///
/// # Errors
/// A store failure, a time out of range, or `Protocol` on a wrong type.
///
/// ```
/// use redisync::backend::ExpirableKeys;
/// let keys = ExpirableKeys { name: "doc:pes-av", leases: "{doc:pes-av}:timeout", channel: "redisson_sc:{doc:pes-av}" };
/// let store = redisync::MemoryBackend::new();
/// assert_eq!(redisync::ops::expirable::available(&store, &keys, 1_700_000_000_000)?, 0);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn available<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    now_ms: i64,
) -> Result<i64> {
    check_time_ms("now", now_ms)?;
    let call = ScriptCall::new(&AVAILABLE, Resend::Harmless, Effect::Read)
        .key(keys.name)
        .key(keys.leases)
        .key(keys.channel)
        .arg(now_ms);
    counter_value(keys.name, &run(backend, &call)?, AVAILABLE.operation())
}
