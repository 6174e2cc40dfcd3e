//! The read-write lock (Redisson's `RReadWriteLock`): one hash with a
//! `mode` field, each reader's holds (and one expiring key per read hold)
//! and the writer's `:write` field. The write half renews with
//! [`super::lock::renew`] on its `:write` field.

use std::time::Duration;

use super::inspect::RwMode;
use super::lock::{Acquire, Release, Undo, acquire_outcome, release_outcome, undo_outcome};
use super::{
    ROLLBACK_LATCH_MS, acquire_call, any_one, is_one, is_some, part, record_keep_ms,
    rollback_latch, run, run_as, scripts, sent_lease, undo_script_call,
};
use crate::backend::{Effect, LockBackend, Reply, Resend, ScriptCall};
use crate::error::check_ms;
use crate::keys::{READ_UNLOCK_MESSAGE, UNLOCK_MESSAGE};
use crate::{Error, Result};

/// The keys and fields of one holder on one read-write lock, in Redisson's
/// format; built by the library.
///
/// ```
/// let keys = redisync::internal::rw_lock::RwLockKeys {
///     name: "doc",
///     channel: "redisson_rwlock:{doc}",
///     holder: "c1:7",
///     write_field: "c1:7:write",
///     timeout_prefix: "{doc}:c1:7:rwlock_timeout",
///     key_prefix: "{doc}",
/// };
/// assert_eq!(keys.write_field, "c1:7:write");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RwLockKeys<'a> {
    /// The lock hash: `name`.
    pub name: &'a str,
    /// The channel of both halves: `redisson_rwlock:{name}`.
    pub channel: &'a str,
    /// The holder's read field: `<client uuid>:<thread>`.
    pub holder: &'a str,
    /// The holder's write field: `<client uuid>:<thread>:write`.
    pub write_field: &'a str,
    /// This holder's read-hold keys are `<timeout_prefix>:<n>`:
    /// `{name}:<holder>:rwlock_timeout`.
    pub timeout_prefix: &'a str,
    /// Any holder's read-hold keys are
    /// `<key_prefix>:<field>:rwlock_timeout:<n>`: `{name}`.
    pub key_prefix: &'a str,
}

/// A snapshot of a read-write lock, read in one round trip.
///
/// ```
/// let state = redisync::internal::rw_lock::RwLockState::default();
/// assert!(state.mode.is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RwLockState {
    /// The mode it is held in; `None` when free.
    pub mode: Option<RwMode>,
    /// The asked field's hold count (0 if none).
    pub hold_count: u64,
    /// The remaining time to live; `None` when free or without expiry.
    pub ttl: Option<Duration>,
}

impl RwLockState {
    /// A snapshot.
    ///
    /// ```
    /// use redisync::RwMode;
    /// use redisync::internal::rw_lock::RwLockState;
    /// let state = RwLockState::new(Some(RwMode::Read), 1, None);
    /// assert_eq!(state.mode, Some(RwMode::Read));
    /// ```
    pub fn new(mode: Option<RwMode>, hold_count: u64, ttl: Option<Duration>) -> Self {
        RwLockState {
            mode,
            hold_count,
            ttl,
        }
    }
}

scripts! {
    /// KEYS lock, timeout prefix [, record]; ARGV lease ms, holder, write
    /// field [, record keep ms]. nil = acquired, else PTTL.
    READ_ACQUIRE = "read_lock_acquire", "read lock acquire", writes, after "window_prelude", after "args_prelude";
    /// KEYS lock [, record]; ARGV lease ms, write field, read field [,
    /// record keep ms]. nil = acquired, -3 = the caller reads, else PTTL.
    WRITE_ACQUIRE = "write_lock_acquire", "write lock acquire", writes, after "window_prelude", after "args_prelude";
    /// KEYS lock, channel, timeout prefix, key prefix, latch (or the hold's
    /// attempt record); ARGV message, holder, latch ms. nil/0/1.
    READ_RELEASE = "read_lock_release", "read lock release", writes, after "window_prelude", after "args_prelude", after "read_lock_prelude";
    /// KEYS lock, channel, latch (or the hold's attempt record); ARGV
    /// message, lease ms, write field, latch ms. nil/0/1.
    WRITE_RELEASE = "write_lock_release", "write lock release", writes, after "window_prelude", after "args_prelude", after "write_lock_prelude";
    /// KEYS lock, channel, timeout prefix, key prefix, attempt record; ARGV
    /// message, holder, lease ms [, 1 = forget the record]. 0/1/2 as
    /// [`super::lock::Undo`].
    READ_UNDO_ACQUIRE = "read_lock_undo_acquire", "read lock undo acquire", writes, after "window_prelude", after "args_prelude", after "undo_prelude", after "read_lock_prelude";
    /// KEYS lock, channel, attempt record; ARGV message, write field, lease
    /// ms [, 1 = forget the record]. 0/1/2 as [`super::lock::Undo`].
    WRITE_UNDO_ACQUIRE = "write_lock_undo_acquire", "write lock undo acquire", writes, after "window_prelude", after "args_prelude", after "undo_prelude", after "write_lock_prelude";
    /// KEYS lock, timeout prefix, key prefix [, attempt record]; ARGV lease
    /// ms, holder. 1 = renewed.
    READ_RENEW = "read_lock_renew", "read lock renew", writes, after "window_prelude", after "args_prelude", after "renew_prelude";
    /// KEYS (lock, timeout prefix) per hold [, one attempt record per hold];
    /// ARGV lease ms, one holder per hold. {1 = renewed, 0 = no read hold, ...}.
    READ_RENEW_BATCH = "read_lock_renew_batch", "read lock renew batch", writes, after "window_prelude", after "args_prelude", after "renew_prelude";
    /// KEYS lock, channel; ARGV mode, message. 1 = deleted.
    FORCE_RELEASE = "rw_lock_force_release", "read-write lock force release", writes, after "window_prelude", after "args_prelude", after "op_record_prelude";
    /// KEYS lock, channel, key prefix; ARGV message. 1 = existed.
    DELETE = "rw_lock_delete", "read-write lock delete", writes, after "window_prelude", after "args_prelude", after "op_record_prelude";
    /// KEYS lock; ARGV field. {mode, hold count, PTTL}.
    STATE = "rw_lock_state", "read-write lock state", reads;
}

/// The reply of a write acquire by a holder that holds the read half.
const CALLER_READS: i64 = -3;

/// Acquires or re-enters the read half for `keys.holder`: granted when the
/// lock is free, in read mode, or write-held by the same holder. Each read
/// hold n gets its own key `<keys.timeout_prefix>:<n>` expiring after
/// `lease_ms`; the hash lives as long as its longest hold.
///
/// # Errors
/// A store failure, a bad lease, or `Protocol` if the key holds another
/// type.
///
/// ```
/// use redisync::internal::lock::Acquire;
/// use redisync::internal::rw_lock::RwLockKeys;
/// let keys = RwLockKeys {
///     name: "doc:rw", channel: "redisson_rwlock:{doc:rw}", holder: "c1:1",
///     write_field: "c1:1:write", timeout_prefix: "{doc:rw}:c1:1:rwlock_timeout",
///     key_prefix: "{doc:rw}",
/// };
/// let store = redisync::MemoryBackend::new();
/// assert_eq!(redisync::internal::rw_lock::read_acquire(&store, &keys, 30_000)?, Acquire::Acquired);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn read_acquire<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    lease_ms: i64,
) -> Result<Acquire> {
    read_acquire_recorded(backend, keys, lease_ms, None)
}

/// As [`read_acquire`] (which is this with no record), and with
/// `attempt_key` records the attempt under it (`{name}:redisync_attempt:<id>`, one fresh id per attempt, kept the lease
/// or, if longer, until every copy of the request is past its window) when it takes a hold: the number of the read hold it took.
/// [`read_undo_acquire`] with the same key then removes exactly that hold.
/// The same call sent again (its reply lost) takes no second hold; once
/// undone, it is refused.
///
/// # Errors
/// As [`read_acquire`]; a connection error (a late request) for an attempt
/// already undone.
///
/// ```
/// use redisync::internal::lock::Acquire;
/// use redisync::internal::rw_lock::RwLockKeys;
/// let keys = RwLockKeys {
///     name: "doc:rw-rec", channel: "redisson_rwlock:{doc:rw-rec}", holder: "c1:1",
///     write_field: "c1:1:write", timeout_prefix: "{doc:rw-rec}:c1:1:rwlock_timeout",
///     key_prefix: "{doc:rw-rec}",
/// };
/// let store = redisync::MemoryBackend::new();
/// let attempt = "{doc:rw-rec}:redisync_attempt:a1";
/// assert_eq!(redisync::internal::rw_lock::read_acquire_recorded(&store, &keys, 30_000, Some(attempt))?, Acquire::Acquired);
/// // Sent again: still one hold.
/// redisync::internal::rw_lock::read_acquire_recorded(&store, &keys, 30_000, Some(attempt))?;
/// assert_eq!(redisync::internal::rw_lock::state(&store, "doc:rw-rec", "c1:1")?.hold_count, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn read_acquire_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    lease_ms: i64,
    attempt_key: Option<&str>,
) -> Result<Acquire> {
    check_ms("lease", lease_ms)?;
    let call = acquire_call(
        &READ_ACQUIRE,
        Reply::is_nil,
        undo_read_sent,
        &[keys.name, keys.timeout_prefix],
        attempt_key,
    )
    .arg(lease_ms)
    .arg(keys.holder)
    .arg(keys.write_field);
    let call = with_record_keep(backend, call, lease_ms, attempt_key);
    run_as(backend, &call, acquire_outcome)
}

/// An acquire call with `attempt_key` and its record's keep time (ARGV[4])
/// when that is longer than the lease: the record outlives every copy's
/// window (see [`super::lock::record_keep_beyond_lease`]).
fn with_record_keep<'a, B: LockBackend + ?Sized>(
    backend: &B,
    call: ScriptCall<'a>,
    lease_ms: i64,
    attempt_key: Option<&str>,
) -> ScriptCall<'a> {
    match attempt_key.and(super::lock::record_keep_beyond_lease(backend, lease_ms)) {
        Some(keep_ms) => call.arg(keep_ms),
        None => call,
    }
}

/// Undoes exactly the read hold that the [`read_acquire_recorded`] call
/// with `attempt_key` took, if it took one, and nothing else, leaving the
/// lock as a release of that hold would (its read-hold key gone, the
/// others keeping their own expiries, the unlock published if the lock is
/// now free); marks the attempt undone (for `lease_ms`, or longer: until
/// every copy of its request is past its window), so that if its request
/// arrives later still it is refused. Idempotent.
///
/// # Errors
/// A store failure; `InvalidArgument` for a bad lease.
///
/// ```
/// use redisync::internal::rw_lock::RwLockKeys;
/// use redisync::internal::{lock::Undo, rw_lock};
/// let keys = RwLockKeys {
///     name: "doc:rw-undo", channel: "redisson_rwlock:{doc:rw-undo}", holder: "c1:1",
///     write_field: "c1:1:write", timeout_prefix: "{doc:rw-undo}:c1:1:rwlock_timeout",
///     key_prefix: "{doc:rw-undo}",
/// };
/// let store = redisync::MemoryBackend::new();
/// let (a1, a2) = ("{doc:rw-undo}:redisync_attempt:a1", "{doc:rw-undo}:redisync_attempt:a2");
/// rw_lock::read_acquire_recorded(&store, &keys, 30_000, Some(a1))?;
/// rw_lock::read_acquire_recorded(&store, &keys, 30_000, Some(a2))?;
/// assert_eq!(rw_lock::read_undo_acquire(&store, &keys, 30_000, a1)?, Undo::Removed);
/// assert_eq!(rw_lock::read_undo_acquire(&store, &keys, 30_000, a1)?, Undo::Nothing);
/// assert_eq!(rw_lock::state(&store, "doc:rw-undo", "c1:1")?.hold_count, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn read_undo_acquire<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    lease_ms: i64,
    attempt_key: &str,
) -> Result<Undo> {
    check_ms("lease", lease_ms)?;
    let call = read_undo_call(keys, record_keep_ms(backend, lease_ms), attempt_key);
    run_as(backend, &call, undo_outcome)
}

fn read_undo_call<'a>(
    keys: &RwLockKeys<'a>,
    lease_ms: i64,
    attempt_key: &'a str,
) -> ScriptCall<'a> {
    undo_script_call(&READ_UNDO_ACQUIRE)
        .key(keys.name)
        .key(keys.channel)
        .key(keys.timeout_prefix)
        .key(keys.key_prefix)
        .key(attempt_key)
        .arg(UNLOCK_MESSAGE)
        .arg(keys.holder)
        .arg(lease_ms)
}

/// The replica-acknowledgement undo of a [`read_acquire`] or
/// [`read_acquire_recorded`] call (KEYS lock, timeout prefix[, attempt
/// record]; ARGV lease, holder, write field): recorded, exactly its hold,
/// and the record forgotten, since the store sends the same call again at
/// once; unrecorded, the read hold given back by a release behind a fresh
/// latch.
fn undo_read_sent(call: &ScriptCall<'_>, _: &Reply) -> ScriptCall<'static> {
    let name = call.keys()[0].as_ref();
    let channel = crate::keys::rw_channel(name);
    let key_prefix = crate::keys::rw_key_prefix(name);
    let keys = RwLockKeys {
        name,
        channel: &channel,
        holder: call.args()[1].as_ref(),
        write_field: call.args()[2].as_ref(),
        timeout_prefix: call.keys()[1].as_ref(),
        key_prefix: &key_prefix,
    };
    match call.keys().get(2) {
        Some(record) => read_undo_call(&keys, sent_lease(call), record.as_ref())
            .arg("1")
            .into_owned(),
        None => read_release_call(&keys, &rollback_latch(name), ROLLBACK_LATCH_MS).into_owned(),
    }
}

/// Acquires or re-enters the write half for `keys.holder` (field
/// `keys.write_field`). Re-entry adds `lease_ms` to the remaining TTL.
///
/// # Errors
/// `InvalidArgument` when the holder holds the read half (read to write
/// would wait for itself) or for a bad lease; a store failure; `Protocol`
/// on a wrong type.
///
/// ```
/// use redisync::internal::lock::Acquire;
/// use redisync::internal::rw_lock::RwLockKeys;
/// let keys = RwLockKeys {
///     name: "doc:rw-w", channel: "redisson_rwlock:{doc:rw-w}", holder: "c1:1",
///     write_field: "c1:1:write", timeout_prefix: "{doc:rw-w}:c1:1:rwlock_timeout",
///     key_prefix: "{doc:rw-w}",
/// };
/// let store = redisync::MemoryBackend::new();
/// assert_eq!(redisync::internal::rw_lock::write_acquire(&store, &keys, 30_000)?, Acquire::Acquired);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn write_acquire<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    lease_ms: i64,
) -> Result<Acquire> {
    write_acquire_recorded(backend, keys, lease_ms, None)
}

/// As [`write_acquire`] (which is this with no record), and with
/// `attempt_key` records the attempt under it (`{name}:redisync_attempt:<id>`, one fresh id per attempt, kept the lease
/// or, if longer, until every copy of the request is past its window) when it takes a hold. [`write_undo_acquire`] with the same key then
/// removes exactly that hold. The same call sent again (its reply lost)
/// takes no second hold; once undone, it is refused.
///
/// # Errors
/// As [`write_acquire`]; a connection error (a late request) for an
/// attempt already undone.
///
/// ```
/// use redisync::internal::lock::Acquire;
/// use redisync::internal::rw_lock::RwLockKeys;
/// let keys = RwLockKeys {
///     name: "doc:rw-wrec", channel: "redisson_rwlock:{doc:rw-wrec}", holder: "c1:1",
///     write_field: "c1:1:write", timeout_prefix: "{doc:rw-wrec}:c1:1:rwlock_timeout",
///     key_prefix: "{doc:rw-wrec}",
/// };
/// let store = redisync::MemoryBackend::new();
/// let attempt = "{doc:rw-wrec}:redisync_attempt:a1";
/// assert_eq!(redisync::internal::rw_lock::write_acquire_recorded(&store, &keys, 30_000, Some(attempt))?, Acquire::Acquired);
/// // Sent again: still one hold.
/// redisync::internal::rw_lock::write_acquire_recorded(&store, &keys, 30_000, Some(attempt))?;
/// assert_eq!(redisync::internal::rw_lock::state(&store, "doc:rw-wrec", "c1:1:write")?.hold_count, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn write_acquire_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    lease_ms: i64,
    attempt_key: Option<&str>,
) -> Result<Acquire> {
    check_ms("lease", lease_ms)?;
    let call = acquire_call(
        &WRITE_ACQUIRE,
        Reply::is_nil,
        undo_write_sent,
        &[keys.name],
        attempt_key,
    )
    .arg(lease_ms)
    .arg(keys.write_field)
    .arg(keys.holder);
    let call = with_record_keep(backend, call, lease_ms, attempt_key);
    let reply = run(backend, &call)?;
    if reply.as_int() == Some(CALLER_READS) {
        return Err(crate::error::read_to_write_upgrade(keys.name));
    }
    acquire_outcome(&reply, WRITE_ACQUIRE.operation())
}

/// Undoes exactly the write hold that the [`write_acquire_recorded`] call
/// with `attempt_key` took, if it took one, and nothing else; on the last
/// write hold the lock is released (or left to the holder's own read holds)
/// and the read-unlock published, as [`write_release`] does. Marks the
/// attempt undone (for `lease_ms`, or longer: until every copy of its
/// request is past its window), so that if its request arrives later still
/// it is refused. Idempotent.
///
/// # Errors
/// A store failure; `InvalidArgument` for a bad lease.
///
/// ```
/// use redisync::internal::rw_lock::RwLockKeys;
/// use redisync::internal::{lock::Undo, rw_lock};
/// let keys = RwLockKeys {
///     name: "doc:rw-wundo", channel: "redisson_rwlock:{doc:rw-wundo}", holder: "c1:1",
///     write_field: "c1:1:write", timeout_prefix: "{doc:rw-wundo}:c1:1:rwlock_timeout",
///     key_prefix: "{doc:rw-wundo}",
/// };
/// let store = redisync::MemoryBackend::new();
/// let attempt = "{doc:rw-wundo}:redisync_attempt:a1";
/// rw_lock::write_acquire_recorded(&store, &keys, 30_000, Some(attempt))?;
/// assert_eq!(rw_lock::write_undo_acquire(&store, &keys, 30_000, attempt)?, Undo::Released);
/// assert_eq!(rw_lock::state(&store, "doc:rw-wundo", "c1:1:write")?.mode, None);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn write_undo_acquire<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    lease_ms: i64,
    attempt_key: &str,
) -> Result<Undo> {
    check_ms("lease", lease_ms)?;
    let call = write_undo_call(
        keys.name,
        keys.channel,
        keys.write_field,
        record_keep_ms(backend, lease_ms),
        attempt_key,
    );
    run_as(backend, &call, undo_outcome)
}

fn write_undo_call<'a>(
    name: &'a str,
    channel: &'a str,
    write_field: &'a str,
    lease_ms: i64,
    attempt_key: &'a str,
) -> ScriptCall<'a> {
    undo_script_call(&WRITE_UNDO_ACQUIRE)
        .key(name)
        .key(channel)
        .key(attempt_key)
        .arg(READ_UNLOCK_MESSAGE)
        .arg(write_field)
        .arg(lease_ms)
}

/// The replica-acknowledgement undo of a [`write_acquire`] or
/// [`write_acquire_recorded`] call (KEYS lock[, attempt record]; ARGV
/// lease, write field, holder): recorded, exactly its hold, and the record
/// forgotten, since the store sends the same call again at once;
/// unrecorded, the write hold given back by a release behind a fresh latch.
fn undo_write_sent(call: &ScriptCall<'_>, _: &Reply) -> ScriptCall<'static> {
    let name = call.keys()[0].as_ref();
    let channel = crate::keys::rw_channel(name);
    let write_field = call.args()[1].as_ref();
    match call.keys().get(1) {
        Some(record) => write_undo_call(
            name,
            &channel,
            write_field,
            sent_lease(call),
            record.as_ref(),
        )
        .arg("1")
        .into_owned(),
        None => write_release_call(
            name,
            &channel,
            write_field,
            sent_lease(call),
            &rollback_latch(name),
            ROLLBACK_LATCH_MS,
        )
        .into_owned(),
    }
}

/// Releases one read hold of `keys.holder`. `Released` when the lock is
/// now free (and `0` was published on `keys.channel`), `StillHeld` when
/// other holds remain. `latch_key`/`latch_ms` as in
/// [`super::lock::release`]: a fresh key, or the record of the
/// [`read_acquire_recorded`] call that took the hold, which then keeps the
/// outcome, so that a late copy of that acquire is refused.
///
/// # Errors
/// A store failure, a bad latch time, or `Protocol` if the key holds
/// another type.
///
/// ```
/// use redisync::internal::lock::Release;
/// use redisync::internal::rw_lock::RwLockKeys;
/// let keys = RwLockKeys {
///     name: "doc:rw-r", channel: "redisson_rwlock:{doc:rw-r}", holder: "c1:1",
///     write_field: "c1:1:write", timeout_prefix: "{doc:rw-r}:c1:1:rwlock_timeout",
///     key_prefix: "{doc:rw-r}",
/// };
/// let store = redisync::MemoryBackend::new();
/// let latch = "redisson_unlock_latch:{doc:rw-r}:1";
/// assert_eq!(redisync::internal::rw_lock::read_release(&store, &keys, latch, 5_000)?, Release::NotHeld);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn read_release<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    latch_key: &str,
    latch_ms: i64,
) -> Result<Release> {
    check_ms("latch timeout", latch_ms)?;
    let call = read_release_call(keys, latch_key, latch_ms);
    run_as(backend, &call, release_outcome)
}

fn read_release_call<'a>(
    keys: &RwLockKeys<'a>,
    latch_key: &'a str,
    latch_ms: i64,
) -> ScriptCall<'a> {
    ScriptCall::new(&READ_RELEASE, Resend::Harmless, Effect::Change(is_some))
        .key(keys.name)
        .key(keys.channel)
        .key(keys.timeout_prefix)
        .key(keys.key_prefix)
        .key(latch_key)
        .arg(UNLOCK_MESSAGE)
        .arg(keys.holder)
        .arg(latch_ms)
}

/// Releases one write hold of `keys.holder`. On the last one the lock is
/// deleted (or, if the holder also reads, left in read mode) and `1`
/// (read-unlock: wakes every waiter) is published on `keys.channel`.
/// `latch_key`/`latch_ms` as in [`read_release`] (the record of the
/// [`write_acquire_recorded`] call that took the hold may be the latch).
///
/// # Errors
/// A store failure, a bad lease or latch time, or `Protocol` if the key
/// holds another type.
///
/// ```
/// use redisync::internal::lock::Release;
/// use redisync::internal::rw_lock::RwLockKeys;
/// let keys = RwLockKeys {
///     name: "doc:rw-wr", channel: "redisson_rwlock:{doc:rw-wr}", holder: "c1:1",
///     write_field: "c1:1:write", timeout_prefix: "{doc:rw-wr}:c1:1:rwlock_timeout",
///     key_prefix: "{doc:rw-wr}",
/// };
/// let store = redisync::MemoryBackend::new();
/// let latch = "redisson_unlock_latch:{doc:rw-wr}:1";
/// assert_eq!(redisync::internal::rw_lock::write_release(&store, &keys, 30_000, latch, 5_000)?, Release::NotHeld);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn write_release<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    lease_ms: i64,
    latch_key: &str,
    latch_ms: i64,
) -> Result<Release> {
    check_ms("lease", lease_ms)?;
    check_ms("latch timeout", latch_ms)?;
    let call = write_release_call(
        keys.name,
        keys.channel,
        keys.write_field,
        lease_ms,
        latch_key,
        latch_ms,
    );
    run_as(backend, &call, release_outcome)
}

fn write_release_call<'a>(
    name: &'a str,
    channel: &'a str,
    write_field: &'a str,
    lease_ms: i64,
    latch_key: &'a str,
    latch_ms: i64,
) -> ScriptCall<'a> {
    ScriptCall::new(&WRITE_RELEASE, Resend::Harmless, Effect::Change(is_some))
        .key(name)
        .key(channel)
        .key(latch_key)
        .arg(READ_UNLOCK_MESSAGE)
        .arg(lease_ms)
        .arg(write_field)
        .arg(latch_ms)
}

/// Sets `keys.holder`'s read holds to `lease_ms` (its own timeout keys
/// only, so a dead reader's holds still expire), and the hash's TTL to the
/// longest read hold's (kept when the hash is a downgraded writer's).
/// `false` when the holder holds no live read hold any more.
///
/// # Errors
/// A store failure, a bad lease, or `Protocol` if the key holds another
/// type.
///
/// ```
/// use redisync::internal::rw_lock::RwLockKeys;
/// let keys = RwLockKeys {
///     name: "doc:rw-renew", channel: "redisson_rwlock:{doc:rw-renew}", holder: "c1:1",
///     write_field: "c1:1:write", timeout_prefix: "{doc:rw-renew}:c1:1:rwlock_timeout",
///     key_prefix: "{doc:rw-renew}",
/// };
/// let store = redisync::MemoryBackend::new();
/// assert!(!redisync::internal::rw_lock::read_renew(&store, &keys, 30_000)?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn read_renew<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    lease_ms: i64,
) -> Result<bool> {
    check_ms("lease", lease_ms)?;
    let call = ScriptCall::new(&READ_RENEW, Resend::Harmless, Effect::Change(is_one))
        .key(keys.name)
        .key(keys.timeout_prefix)
        .key(keys.key_prefix)
        .arg(lease_ms)
        .arg(keys.holder);
    run_as(backend, &call, super::flag)
}

/// As [`read_renew`], for the read hold the acquire attempt recorded under
/// `record` took (`{name}:redisync_attempt:<id>`): renewed only while that
/// record still says taken (any value but `0`), so a renewal sent for a
/// hold since released renews nothing; the record's TTL is made at least
/// `lease_ms`. `None`: as [`read_renew`].
///
/// # Errors
/// As [`read_renew`].
///
/// ```
/// use redisync::internal::rw_lock::RwLockKeys;
/// let keys = RwLockKeys {
///     name: "doc:rw-renew-rec", channel: "redisson_rwlock:{doc:rw-renew-rec}", holder: "c1:1",
///     write_field: "c1:1:write", timeout_prefix: "{doc:rw-renew-rec}:c1:1:rwlock_timeout",
///     key_prefix: "{doc:rw-renew-rec}",
/// };
/// let store = redisync::MemoryBackend::new();
/// let record = "{doc:rw-renew-rec}:redisync_attempt:a1";
/// assert!(!redisync::internal::rw_lock::read_renew_recorded(&store, &keys, 30_000, Some(record))?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn read_renew_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    lease_ms: i64,
    record: Option<&str>,
) -> Result<bool> {
    check_ms("lease", lease_ms)?;
    let call = ScriptCall::new(&READ_RENEW, Resend::Harmless, Effect::Change(is_one))
        .key(keys.name)
        .key(keys.timeout_prefix)
        .key(keys.key_prefix)
        .arg(lease_ms)
        .arg(keys.holder);
    let call = record.into_iter().fold(call, ScriptCall::key);
    run_as(backend, &call, super::flag)
}

/// As [`read_renew_many`], each hold with the record of the acquire attempt
/// that took it (`None`: the holder check alone): as [`read_renew_recorded`]
/// for each, in one round trip (none when `holds` is empty).
///
/// # Errors
/// As [`read_renew_many`].
///
/// ```
/// use redisync::internal::rw_lock::RwLockKeys;
/// let keys = RwLockKeys {
///     name: "doc:rw-batch-rec", channel: "redisson_rwlock:{doc:rw-batch-rec}", holder: "c1:1",
///     write_field: "c1:1:write", timeout_prefix: "{doc:rw-batch-rec}:c1:1:rwlock_timeout",
///     key_prefix: "{doc:rw-batch-rec}",
/// };
/// let store = redisync::MemoryBackend::new();
/// let record = "{doc:rw-batch-rec}:redisync_attempt:a1";
/// let renewed = redisync::internal::rw_lock::read_renew_many_recorded(&store, &[(keys, Some(record))], 30_000)?;
/// assert_eq!(renewed, [false]);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn read_renew_many_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    holds: &[(RwLockKeys<'_>, Option<&str>)],
    lease_ms: i64,
) -> Result<Vec<bool>> {
    check_ms("lease", lease_ms)?;
    if holds.is_empty() {
        return Ok(Vec::new());
    }
    let mut call =
        ScriptCall::new(&READ_RENEW_BATCH, Resend::Harmless, Effect::Change(any_one)).arg(lease_ms);
    for (keys, _) in holds {
        call = call
            .key(keys.name)
            .key(keys.timeout_prefix)
            .arg(keys.holder);
    }
    if holds.iter().any(|(_, record)| record.is_some()) {
        // A hold without a record: its lock's key in the record's place.
        for (keys, record) in holds {
            call = call.key(record.unwrap_or(keys.name));
        }
    }
    super::flags(
        &run(backend, &call)?,
        holds.len(),
        READ_RENEW_BATCH.operation(),
    )
}

/// Renews many holders' read holds in one round trip, as [`read_renew`]
/// does for one (the watchdog's batched renewal). Returns one flag per hold,
/// in order: `false` for a holder that holds no read hold any more. No
/// round trip when `holds` is empty. On a cluster, group the holds by
/// [`LockBackend::slot_of`] first.
///
/// # Errors
/// A store failure, a bad lease, or `Protocol` if a name holds another type.
///
/// ```
/// use redisync::internal::rw_lock::RwLockKeys;
/// let keys = RwLockKeys {
///     name: "doc:rw-batch", channel: "redisson_rwlock:{doc:rw-batch}", holder: "c1:1",
///     write_field: "c1:1:write", timeout_prefix: "{doc:rw-batch}:c1:1:rwlock_timeout",
///     key_prefix: "{doc:rw-batch}",
/// };
/// let store = redisync::MemoryBackend::new();
/// assert_eq!(redisync::internal::rw_lock::read_renew_many(&store, &[keys], 30_000)?, [false]);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn read_renew_many<B: LockBackend + ?Sized>(
    backend: &B,
    holds: &[RwLockKeys<'_>],
    lease_ms: i64,
) -> Result<Vec<bool>> {
    check_ms("lease", lease_ms)?;
    if holds.is_empty() {
        return Ok(Vec::new());
    }
    let mut call =
        ScriptCall::new(&READ_RENEW_BATCH, Resend::Harmless, Effect::Change(any_one)).arg(lease_ms);
    for keys in holds {
        call = call
            .key(keys.name)
            .key(keys.timeout_prefix)
            .arg(keys.holder);
    }
    super::flags(
        &run(backend, &call)?,
        holds.len(),
        READ_RENEW_BATCH.operation(),
    )
}

/// Deletes the lock if it is held in `mode` and publishes that half's
/// message (`0` for read, `1` for write). Returns whether it was.
///
/// # Errors
/// A store failure, or `Protocol` if the key holds another type.
///
/// ```
/// use redisync::RwMode;
/// use redisync::internal::rw_lock::RwLockKeys;
/// let keys = RwLockKeys {
///     name: "doc:rw-force", channel: "redisson_rwlock:{doc:rw-force}", holder: "",
///     write_field: ":write", timeout_prefix: "{doc:rw-force}::rwlock_timeout",
///     key_prefix: "{doc:rw-force}",
/// };
/// let store = redisync::MemoryBackend::new();
/// assert!(!redisync::internal::rw_lock::force_release(&store, &keys, RwMode::Write)?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn force_release<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    mode: RwMode,
) -> Result<bool> {
    force_release_with(backend, keys, mode, None)
}

/// As [`force_release`], once (see [`super::once`]): with `record`
/// (`{name}:redisync_op:<op id>`, one fresh id per call) a copy arriving
/// after the call acted returns its first outcome and deletes nothing; a
/// call that fails with its outcome unknown is settled.
///
/// # Errors
/// As [`force_release`]; a connection error for a call settled as not
/// done, or whose outcome stays unknown (the message says so).
pub fn force_release_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    mode: RwMode,
    record: &str,
) -> Result<bool> {
    force_release_with(backend, keys, mode, Some(record))
}

fn force_release_with<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    mode: RwMode,
    record: Option<&str>,
) -> Result<bool> {
    let message = match mode {
        RwMode::Read => UNLOCK_MESSAGE,
        RwMode::Write => READ_UNLOCK_MESSAGE,
    };
    let call = ScriptCall::new(&FORCE_RELEASE, Resend::Harmless, Effect::Change(is_one))
        .key(keys.name)
        .key(keys.channel)
        .arg(mode.as_str())
        .arg(message);
    super::once::run_once(backend, call, record, super::flag)
}

/// Deletes read-write lock `keys.name` whatever its mode, with every
/// holder's read-hold timeout keys (under `keys.key_prefix`), and publishes
/// the read-unlock message (`1`, which wakes every waiter). Returns whether
/// the lock existed.
///
/// # Errors
/// A store failure, or `Protocol` if the key holds another type.
///
/// ```
/// use redisync::internal::rw_lock::RwLockKeys;
/// let keys = RwLockKeys {
///     name: "doc:rw-del", channel: "redisson_rwlock:{doc:rw-del}", holder: "c1:1",
///     write_field: "c1:1:write", timeout_prefix: "{doc:rw-del}:c1:1:rwlock_timeout",
///     key_prefix: "{doc:rw-del}",
/// };
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::rw_lock::read_acquire(&store, &keys, 30_000)?;
/// assert!(redisync::internal::rw_lock::delete(&store, &keys)?);
/// assert!(store.is_empty()); // the read hold's timeout key went too
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn delete<B: LockBackend + ?Sized>(backend: &B, keys: &RwLockKeys<'_>) -> Result<bool> {
    delete_with(backend, keys, None)
}

/// As [`delete`], once (see [`super::once`]): with `record`
/// (`{name}:redisync_op:<op id>`, one fresh id per call) a copy arriving
/// after the call acted returns its first outcome and deletes nothing; a
/// call that fails with its outcome unknown is settled.
///
/// # Errors
/// As [`delete`]; a connection error for a call settled as not done, or
/// whose outcome stays unknown (the message says so).
pub fn delete_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    record: &str,
) -> Result<bool> {
    delete_with(backend, keys, Some(record))
}

fn delete_with<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &RwLockKeys<'_>,
    record: Option<&str>,
) -> Result<bool> {
    let call = ScriptCall::new(&DELETE, Resend::Harmless, Effect::Change(is_one))
        .key(keys.name)
        .key(keys.channel)
        .key(keys.key_prefix)
        .arg(READ_UNLOCK_MESSAGE);
    super::once::run_once(backend, call, record, super::flag)
}

/// Reads the lock's mode, the hold count of `field` and the TTL.
///
/// # Errors
/// A store failure, or `Protocol` if the key holds another type.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// assert!(redisync::internal::rw_lock::state(&store, "doc:rw-state", "c1:1")?.mode.is_none());
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn state<B: LockBackend + ?Sized>(backend: &B, name: &str, field: &str) -> Result<RwLockState> {
    let call = ScriptCall::new(&STATE, Resend::Harmless, Effect::Read)
        .key(name)
        .arg(field);
    let reply = run(backend, &call)?;
    let operation = STATE.operation();
    let mode = match part(&reply, 0, operation)?.as_text() {
        Some("") => None,
        Some("read") => Some(RwMode::Read),
        Some("write") => Some(RwMode::Write),
        other => {
            return Err(Error::protocol(format!(
                "read-write lock {name:?} has mode {other:?}, expected read or write"
            )));
        }
    };
    let (hold_count, ttl) = super::hold_count_and_ttl(&reply, operation)?;
    Ok(RwLockState::new(mode, hold_count, ttl))
}
