//! The permit-expirable semaphore (Redisson's `RPermitExpirableSemaphore`):
//! the available permits in a string and the leased permit ids in a sorted
//! set scored by lease end ([`NON_EXPIRABLE`] for a permit taken without a
//! lease). Expired leases are reclaimed before every operation. Trying to
//! set and adding permits are [`super::counter`]'s and [`super::semaphore`]'s
//! (the count is the same string).

use super::lock::{Acquire, acquire_outcome};
use super::{counter_value, int, run, run_as, scripts};
use crate::backend::{Effect, LockBackend, Reply, Resend, ScriptCall};
use crate::error::check_time_ms;
use crate::{Error, Result};

/// The keys of one permit-expirable semaphore, in Redisson's format; built by
/// the library.
///
/// ```
/// let keys = redisync::internal::expirable::ExpirableKeys {
///     name: "slots",
///     leases: "{slots}:timeout",
///     channel: "redisson_sc:{slots}",
/// };
/// assert_eq!(keys.leases, "{slots}:timeout");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ExpirableKeys<'a> {
    /// The available permits: `name`.
    pub name: &'a str,
    /// Leased permits, id → lease end: `{name}:timeout`.
    pub leases: &'a str,
    /// The channel: `redisson_sc:{name}`.
    pub channel: &'a str,
}

scripts! {
    /// KEYS available, leases, channel; ARGV lease end ms, now ms, ids...
    /// nil = taken, else ms to wait.
    ACQUIRE = "expirable_acquire", "expirable semaphore acquire", writes, after "window_prelude", after "args_prelude", after "expirable_prelude";
    /// KEYS available, leases, channel; ARGV now ms, ids... The number released.
    RELEASE = "expirable_release", "expirable semaphore release", writes, after "window_prelude", after "args_prelude", after "expirable_prelude";
    /// KEYS available, leases, channel, record; ARGV now ms, record ms,
    /// ids... The number returned.
    UNDO_ACQUIRE = "expirable_undo_acquire", "expirable semaphore undo acquire", writes, after "window_prelude", after "args_prelude", after "expirable_prelude";
    /// KEYS available, leases, channel; ARGV now ms. The available permits.
    AVAILABLE = "expirable_available", "expirable semaphore available", reads, after "args_prelude", after "expirable_prelude";
    /// KEYS available, leases, channel; ARGV now ms. The leased permits.
    ACQUIRED = "expirable_acquired", "expirable semaphore acquired", reads, after "args_prelude", after "expirable_prelude";
    /// KEYS available, leases, channel; ARGV lease end ms, now ms, ids...
    /// The number updated.
    UPDATE_LEASE = "expirable_update_lease", "expirable semaphore update lease", writes, after "window_prelude", after "args_prelude", after "expirable_prelude";
    /// KEYS available, leases, channel[, op record]; ARGV total, now ms[,
    /// record ms]. The available permits.
    SET_PERMITS = "expirable_set_permits", "expirable semaphore set permits", writes, after "window_prelude", after "args_prelude", after "count_prelude", after "op_record_prelude", after "expirable_prelude";
}

/// The lease end recorded for a permit taken without a lease: Redisson's
/// `nonExpirableTimeout` (922,337,203,685,477 ms, the year 31,197), so a
/// Java service sees such a permit as Redisson's own `acquire()` leaves it.
/// Such a permit is never reclaimed: only a release returns it.
///
/// ```
/// assert_eq!(redisync::internal::expirable::NON_EXPIRABLE, 922_337_203_685_477);
/// ```
pub const NON_EXPIRABLE: i64 = 922_337_203_685_477;

/// The most permit ids one call takes, releases or updates.
///
/// ```
/// assert_eq!(redisync::internal::expirable::MAX_IDS_PER_CALL, 10_000);
/// ```
pub const MAX_IDS_PER_CALL: usize = 10_000;

/// Checks a lease end: a time from 0 to 2^48 ms, or [`NON_EXPIRABLE`].
fn check_lease_end(lease_end_ms: i64) -> Result<()> {
    if lease_end_ms == NON_EXPIRABLE {
        return Ok(());
    }
    check_time_ms("lease end", lease_end_ms)
}

/// Checks a list of permit ids: 1 to [`MAX_IDS_PER_CALL`], none empty.
fn check_ids(ids: &[&str]) -> Result<()> {
    if ids.is_empty() || ids.len() > MAX_IDS_PER_CALL {
        return Err(Error::invalid(
            "permits",
            format!("{} permit ids, expected 1 to {MAX_IDS_PER_CALL}", ids.len()),
        ));
    }
    if let Some(bad) = ids.iter().find(|id| !is_permit_id(id)) {
        return Err(Error::invalid(
            "permit id",
            format!("{bad:?} is not an even number of hex digits"),
        ));
    }
    Ok(())
}

/// Whether `id` can be a permit id: a non-empty, even number of hex digits
/// (Redisson stores the bytes they spell, and so do the scripts).
pub(crate) fn is_permit_id(id: &str) -> bool {
    !id.is_empty() && id.len().is_multiple_of(2) && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Reclaims expired leases, then takes one permit as `permit_id` with a
/// lease ending at `lease_end_ms`: [`acquire_many`] with one id.
///
/// # Errors
/// As [`acquire_many`].
///
/// ```
/// use redisync::internal::expirable::ExpirableKeys;
/// use redisync::internal::lock::Acquire;
/// let keys = ExpirableKeys { name: "doc:pes", leases: "{doc:pes}:timeout", channel: "redisson_sc:{doc:pes}" };
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::semaphore::add(&store, keys.name, keys.channel, 1)?;
/// let now = 1_700_000_000_000;
/// assert_eq!(redisync::internal::expirable::acquire(&store, &keys, "01", now + 60_000, now)?, Acquire::Acquired);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn acquire<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    permit_id: &str,
    lease_end_ms: i64,
    now_ms: i64,
) -> Result<Acquire> {
    acquire_many(backend, keys, &[permit_id], lease_end_ms, now_ms)
}

/// Reclaims expired leases, then takes one permit per id in `permit_ids`,
/// all or none, each with a lease ending at `lease_end_ms` (or
/// [`NON_EXPIRABLE`]). Ids are hex digits (a [`PermitId`](crate::PermitId)'s);
/// the zset holds the bytes they spell, as Redisson's does. `Held { ttl }`:
/// not enough available; `ttl` is the
/// time until the earliest lease ends (`None` when no leased permit will
/// expire: only a release frees one).
///
/// # Errors
/// A store failure; `InvalidArgument` for a time out of range or for no,
/// more than [`MAX_IDS_PER_CALL`] ids or one that is not hex; `Protocol` on
/// a wrong type.
///
/// ```
/// use redisync::internal::expirable::ExpirableKeys;
/// use redisync::internal::lock::Acquire;
/// use redisync::internal::expirable::{acquire_many, NON_EXPIRABLE};
/// let keys = ExpirableKeys { name: "doc:pes-m", leases: "{doc:pes-m}:timeout", channel: "redisson_sc:{doc:pes-m}" };
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::semaphore::add(&store, keys.name, keys.channel, 2)?;
/// let now = 1_700_000_000_000;
/// assert_eq!(acquire_many(&store, &keys, &["0a", "0b"], NON_EXPIRABLE, now)?, Acquire::Acquired);
/// assert_eq!(acquire_many(&store, &keys, &["0c"], NON_EXPIRABLE, now)?, Acquire::Held { ttl: None });
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn acquire_many<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    permit_ids: &[&str],
    lease_end_ms: i64,
    now_ms: i64,
) -> Result<Acquire> {
    acquire_many_recorded(backend, keys, permit_ids, lease_end_ms, now_ms, None)
}

/// As [`acquire_many`], for ids fresh to this call (as the primitives'
/// are). Without `record`, a call whose first id is leased already is the
/// same call sent again (its reply lost) and takes nothing more. With
/// `record` (`{name}:redisync_op:<op id>`, one per attempt, kept
/// [`RECORD_MS`](super::semaphore::RECORD_MS)), the attempt's outcome is
/// recorded: sent again (its reply lost, or a copy delayed in the network)
/// it acts no more and replies with that outcome (`Held { ttl: None }` for
/// "too few"), and after [`undo_acquire`] with the same record it is
/// refused. Either way it may be sent again after any connection fault.
///
/// # Errors
/// As [`acquire_many`]; a connection error (a late request) for an
/// attempt already undone.
///
/// ```
/// use redisync::internal::expirable::ExpirableKeys;
/// use redisync::internal::lock::Acquire;
/// use redisync::internal::expirable::{acquire_many_recorded, NON_EXPIRABLE};
/// let keys = ExpirableKeys { name: "doc:pes-r", leases: "{doc:pes-r}:timeout", channel: "redisson_sc:{doc:pes-r}" };
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::semaphore::add(&store, keys.name, keys.channel, 2)?;
/// let (now, op) = (1_700_000_000_000, Some("{doc:pes-r}:redisync_op:a1"));
/// assert_eq!(acquire_many_recorded(&store, &keys, &["0a"], NON_EXPIRABLE, now, op)?, Acquire::Acquired);
/// assert_eq!(acquire_many_recorded(&store, &keys, &["0a"], NON_EXPIRABLE, now, op)?, Acquire::Acquired);
/// assert_eq!(redisync::internal::expirable::available(&store, &keys, now)?, 1); // taken once
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn acquire_many_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    permit_ids: &[&str],
    lease_end_ms: i64,
    now_ms: i64,
    record: Option<&str>,
) -> Result<Acquire> {
    check_lease_end(lease_end_ms)?;
    check_time_ms("now", now_ms)?;
    check_ids(permit_ids)?;
    let mut call = ScriptCall::new(
        &ACQUIRE,
        // A repeat finds its first id leased and takes nothing more.
        Resend::Harmless,
        Effect::Acquire {
            acquired: Reply::is_nil,
            undo: release_taken,
        },
    )
    .key(keys.name)
    .key(keys.leases)
    .key(keys.channel);
    call = call.arg(lease_end_ms).arg(now_ms);
    if let Some(record) = record {
        call = call
            .key(record)
            .arg(super::semaphore::counting_record_ms(backend));
    }
    for id in permit_ids {
        call = call.arg(*id);
    }
    run_as(backend, &call, acquire_outcome)
}

/// Undoes exactly the [`acquire_many_recorded`] call with `record` and
/// `permit_ids`: returns those of its permits still leased, and marks the
/// call undone (for [`RECORD_MS`](super::semaphore::RECORD_MS)), so that
/// if its request arrives later still it is refused. Returns how many
/// permits it returned. Idempotent.
///
/// # Errors
/// As [`release_many`].
///
/// ```
/// use redisync::internal::expirable::ExpirableKeys;
/// use redisync::internal::expirable::{acquire_many_recorded, available, undo_acquire, NON_EXPIRABLE};
/// let keys = ExpirableKeys { name: "doc:pes-u", leases: "{doc:pes-u}:timeout", channel: "redisson_sc:{doc:pes-u}" };
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::semaphore::add(&store, keys.name, keys.channel, 1)?;
/// let (now, op) = (1_700_000_000_000, "{doc:pes-u}:redisync_op:a1");
/// // Undone before it arrived: it is refused, nothing is taken.
/// assert_eq!(undo_acquire(&store, &keys, &["0a"], now, op)?, 0);
/// assert!(acquire_many_recorded(&store, &keys, &["0a"], NON_EXPIRABLE, now, Some(op)).is_err());
/// assert_eq!(available(&store, &keys, now)?, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn undo_acquire<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    permit_ids: &[&str],
    now_ms: i64,
    record: &str,
) -> Result<u64> {
    check_time_ms("now", now_ms)?;
    check_ids(permit_ids)?;
    let mut call = ScriptCall::new(&UNDO_ACQUIRE, Resend::Harmless, Effect::Change(is_positive))
        .key(keys.name)
        .key(keys.leases)
        .key(keys.channel)
        .key(record)
        .arg(now_ms)
        .arg(super::semaphore::counting_record_ms(backend));
    for id in permit_ids {
        call = call.arg(*id);
    }
    run_as(backend, &call, count)
}

/// Returns the permits an acquire call leased (KEYS available, leases,
/// channel[, record]; ARGV lease end, now[, record ms], ids...): by id,
/// exactly its own; its record is forgotten, since the store sends the same
/// call again at once (a replica-acknowledgement retry).
fn release_taken(call: &ScriptCall<'_>, _: &Reply) -> ScriptCall<'static> {
    let keys = ExpirableKeys {
        name: call.keys()[0].as_ref(),
        leases: call.keys()[1].as_ref(),
        channel: call.keys()[2].as_ref(),
    };
    let record = call.keys().get(3);
    let skip = if record.is_some() { 3 } else { 2 };
    let ids: Vec<&str> = call.args().iter().skip(skip).map(AsRef::as_ref).collect();
    let mut release = release_call(&keys, &ids, call.args()[1].parse().unwrap_or(0));
    if let Some(record) = record {
        release = release.key(record.as_ref());
    }
    release.into_owned()
}

/// Returns permit `permit_id` to the pool and publishes the new count.
/// `false` when the permit is unknown or its lease had run out (it is then
/// reclaimed, not released).
///
/// # Errors
/// A store failure, a time out of range, an id that is not hex, or
/// `Protocol` on a wrong type.
///
/// ```
/// use redisync::internal::expirable::ExpirableKeys;
/// let keys = ExpirableKeys { name: "doc:pes-rel", leases: "{doc:pes-rel}:timeout", channel: "redisson_sc:{doc:pes-rel}" };
/// let store = redisync::MemoryBackend::new();
/// assert!(!redisync::internal::expirable::release(&store, &keys, "ffff", 1_700_000_000_000)?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn release<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    permit_id: &str,
    now_ms: i64,
) -> Result<bool> {
    Ok(release_many(backend, keys, &[permit_id], now_ms)? == 1)
}

/// Returns every permit of `permit_ids` that is still leased to the pool
/// in one step, publishes the new count, and says how many that was
/// (unknown and expired ids do not count; a repeated id counts once).
///
/// # Errors
/// A store failure; `InvalidArgument` for a time out of range or for no,
/// more than [`MAX_IDS_PER_CALL`] ids or one that is not hex; `Protocol` on
/// a wrong type.
///
/// ```
/// use redisync::internal::expirable::ExpirableKeys;
/// use redisync::internal::expirable::{acquire_many, release_many};
/// let keys = ExpirableKeys { name: "doc:pes-rm", leases: "{doc:pes-rm}:timeout", channel: "redisson_sc:{doc:pes-rm}" };
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::semaphore::add(&store, keys.name, keys.channel, 2)?;
/// let now = 1_700_000_000_000;
/// acquire_many(&store, &keys, &["0a", "0b"], now + 60_000, now)?;
/// assert_eq!(release_many(&store, &keys, &["0a", "0b", "ffff"], now)?, 2);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn release_many<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    permit_ids: &[&str],
    now_ms: i64,
) -> Result<u64> {
    check_time_ms("now", now_ms)?;
    check_ids(permit_ids)?;
    let call = release_call(keys, permit_ids, now_ms);
    run_as(backend, &call, count)
}

/// The release script's call, shared with the undo of an acquisition (an
/// id released twice is not found the second time: harmless to repeat).
fn release_call<'a>(
    keys: &ExpirableKeys<'a>,
    permit_ids: &[&'a str],
    now_ms: i64,
) -> ScriptCall<'a> {
    let mut call = ScriptCall::new(&RELEASE, Resend::Harmless, Effect::Change(is_positive))
        .key(keys.name)
        .key(keys.leases)
        .key(keys.channel)
        .arg(now_ms);
    for id in permit_ids {
        call = call.arg(*id);
    }
    call
}

/// Whether a count reply is above zero (an [`Effect`] test).
fn is_positive(reply: &Reply) -> bool {
    reply.as_int().is_some_and(|n| n > 0)
}

/// A count reply (never negative).
fn count(reply: &Reply, operation: &str) -> Result<u64> {
    u64::try_from(int(reply, operation)?)
        .map_err(|_| reply.unexpected(operation, "a count of 0 or more"))
}

/// Reclaims expired leases, then gives every permit of `permit_ids` still
/// leased a lease ending at `lease_end_ms` (or [`NON_EXPIRABLE`]); returns
/// how many it updated (Redisson's `updateLeaseTime`, for many ids).
///
/// # Errors
/// As [`acquire_many`].
///
/// ```
/// use redisync::internal::expirable::ExpirableKeys;
/// use redisync::internal::expirable::{acquire, update_lease};
/// let keys = ExpirableKeys { name: "doc:pes-up", leases: "{doc:pes-up}:timeout", channel: "redisson_sc:{doc:pes-up}" };
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::semaphore::add(&store, keys.name, keys.channel, 1)?;
/// let now = 1_700_000_000_000;
/// acquire(&store, &keys, "0a", now + 1_000, now)?;
/// assert_eq!(update_lease(&store, &keys, &["0a", "0b"], now + 60_000, now)?, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn update_lease<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    permit_ids: &[&str],
    lease_end_ms: i64,
    now_ms: i64,
) -> Result<u64> {
    check_lease_end(lease_end_ms)?;
    check_time_ms("now", now_ms)?;
    check_ids(permit_ids)?;
    let mut call = ScriptCall::new(&UPDATE_LEASE, Resend::Harmless, Effect::Change(is_positive))
        .key(keys.name)
        .key(keys.leases)
        .key(keys.channel)
        .arg(lease_end_ms)
        .arg(now_ms);
    for id in permit_ids {
        call = call.arg(*id);
    }
    run_as(backend, &call, count)
}

/// Reclaims expired leases and returns the available permits.
///
/// # Errors
/// A store failure, a time out of range, or `Protocol` on a wrong type.
///
/// ```
/// use redisync::internal::expirable::ExpirableKeys;
/// let keys = ExpirableKeys { name: "doc:pes-av", leases: "{doc:pes-av}:timeout", channel: "redisson_sc:{doc:pes-av}" };
/// let store = redisync::MemoryBackend::new();
/// assert_eq!(redisync::internal::expirable::available(&store, &keys, 1_700_000_000_000)?, 0);
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

/// Reclaims expired leases and returns how many permits are leased
/// (Redisson's `acquiredPermits`; permits without a lease included).
///
/// # Errors
/// A store failure, a time out of range, or `Protocol` on a wrong type.
///
/// ```
/// use redisync::internal::expirable::ExpirableKeys;
/// let keys = ExpirableKeys { name: "doc:pes-aq", leases: "{doc:pes-aq}:timeout", channel: "redisson_sc:{doc:pes-aq}" };
/// let store = redisync::MemoryBackend::new();
/// assert_eq!(redisync::internal::expirable::acquired(&store, &keys, 1_700_000_000_000)?, 0);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn acquired<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    now_ms: i64,
) -> Result<u64> {
    check_time_ms("now", now_ms)?;
    let call = ScriptCall::new(&ACQUIRED, Resend::Harmless, Effect::Read)
        .key(keys.name)
        .key(keys.leases)
        .key(keys.channel)
        .arg(now_ms);
    run_as(backend, &call, count)
}

/// Sets the total permits, leased ones included (Redisson's `setPermits`):
/// the available count becomes `permits` minus the permits leased now
/// (negative when more are leased: none is revoked), or `permits` when
/// the count was never set. Publishes the new count when positive and
/// returns it.
///
/// # Errors
/// A store failure; `InvalidArgument` for a negative total or a time out
/// of range; `Protocol` on a wrong type or a count that is not an integer.
///
/// ```
/// use redisync::internal::expirable::ExpirableKeys;
/// use redisync::internal::expirable::{acquire, set_permits};
/// let keys = ExpirableKeys { name: "doc:pes-set", leases: "{doc:pes-set}:timeout", channel: "redisson_sc:{doc:pes-set}" };
/// let store = redisync::MemoryBackend::new();
/// let now = 1_700_000_000_000;
/// assert_eq!(set_permits(&store, &keys, 2, now)?, 2);
/// acquire(&store, &keys, "0a", now + 60_000, now)?;
/// assert_eq!(set_permits(&store, &keys, 5, now)?, 4);   // 5 in all, 1 leased
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn set_permits<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    permits: i64,
    now_ms: i64,
) -> Result<i64> {
    set_permits_with(backend, keys, permits, now_ms, None)
}

/// As [`set_permits`], once (see [`super::once`]): with `record`
/// (`{name}:redisync_op:<op id>`, one fresh id per call) a copy arriving
/// after the call acted returns its first outcome and sets nothing (not
/// over a count changed since); a call that fails with its outcome
/// unknown is settled, so its error means it did not and will not act.
///
/// # Errors
/// As [`set_permits`]; a connection error for a call settled as not done,
/// or whose outcome stays unknown (the message says so).
pub fn set_permits_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    permits: i64,
    now_ms: i64,
    record: &str,
) -> Result<i64> {
    set_permits_with(backend, keys, permits, now_ms, Some(record))
}

fn set_permits_with<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ExpirableKeys<'_>,
    permits: i64,
    now_ms: i64,
    record: Option<&str>,
) -> Result<i64> {
    if permits < 0 {
        return Err(Error::invalid(
            "permits",
            format!("must be 0 or more, got {permits}"),
        ));
    }
    check_time_ms("now", now_ms)?;
    let call = ScriptCall::new(
        &SET_PERMITS,
        Resend::Harmless,
        Effect::Change(super::always),
    )
    .key(keys.name)
    .key(keys.leases)
    .key(keys.channel)
    .arg(permits)
    .arg(now_ms);
    let reply = super::once::run_once(backend, call, record, |reply, _| Ok(reply.clone()))?;
    counter_value(keys.name, &reply, SET_PERMITS.operation())
}
