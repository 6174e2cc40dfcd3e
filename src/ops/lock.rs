//! The reentrant lock (Redisson's `RLock`) and the fenced lock
//! (`RFencedLock`): a hash of holder id → hold count under the lock's name,
//! whose TTL is the lease. The fair lock and the read-write lock's write
//! half renew and read their state with [`renew`] and [`state`] (the hash is
//! the same).

use std::time::Duration;

use super::{
    ROLLBACK_LATCH_MS, acquire_call, any_one, flags, int, is_one, is_some, optional_int,
    record_keep_ms, rollback_latch, run, run_as, scripts, sent_lease, ttl_from_pttl,
    undo_script_call,
};
use crate::backend::{Effect, LockBackend, Reply, Resend, ScriptCall};
use crate::error::check_ms;
use crate::keys::UNLOCK_MESSAGE;
use crate::{Error, Result};

/// What an acquire attempt found.
///
/// ```
/// use redisync::internal::lock::Acquire;
/// let outcome = Acquire::Held { ttl: Some(std::time::Duration::from_millis(250)) };
/// assert!(!outcome.is_acquired());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Acquire {
    /// The caller now holds it (Redisson's script returned `nil`).
    Acquired,
    /// Someone else holds it; `ttl` is its remaining time to live (`None`
    /// when the key has no expiry), the longest a waiter should park before
    /// trying again.
    Held {
        /// The holder's remaining lease.
        ttl: Option<Duration>,
    },
}

impl Acquire {
    /// True for [`Acquire::Acquired`].
    ///
    /// ```
    /// assert!(redisync::internal::lock::Acquire::Acquired.is_acquired());
    /// ```
    pub fn is_acquired(&self) -> bool {
        matches!(self, Acquire::Acquired)
    }
}

/// What a fenced acquire attempt found: [`Acquire`] plus the fencing token
/// of a successful acquisition.
///
/// ```
/// use redisync::internal::lock::FencedAcquire;
/// let outcome = FencedAcquire::Acquired { token: 7 };
/// assert_eq!(outcome.token(), Some(7));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencedAcquire {
    /// The caller now holds it; `token` is greater than every token handed
    /// out before for this lock name, and at least the store's clock in µs
    /// since the epoch (so it stays greater after the counter is lost, if
    /// that clock has moved past the last token).
    Acquired {
        /// The value of the lock's token counter after this acquisition.
        token: u64,
    },
    /// Someone else holds it, as [`Acquire::Held`].
    Held {
        /// The holder's remaining lease.
        ttl: Option<Duration>,
    },
}

impl FencedAcquire {
    /// The token of a successful acquisition.
    ///
    /// ```
    /// use redisync::internal::lock::FencedAcquire;
    /// assert_eq!(FencedAcquire::Held { ttl: None }.token(), None);
    /// ```
    pub fn token(&self) -> Option<u64> {
        match self {
            FencedAcquire::Acquired { token } => Some(*token),
            FencedAcquire::Held { .. } => None,
        }
    }
}

/// A fencing-token counter's value as a token: a positive integer.
pub(crate) fn parse_fence_token(text: &str) -> Option<u64> {
    text.parse::<u64>().ok().filter(|token| *token > 0)
}

/// What a release found.
///
/// ```
/// use redisync::internal::lock::Release;
/// assert_ne!(Release::StillHeld, Release::Released);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// The caller did not hold it (Redisson's `nil`).
    NotHeld,
    /// One reentrant hold was released; the caller still holds it and its
    /// TTL was reset to the lease (Redisson's `0`).
    StillHeld,
    /// The last hold was released and the unlock message published
    /// (Redisson's `1`).
    Released,
    /// The last hold was released and the lock handed straight to a waiter
    /// of the same client ([`ops::lock::release_to`](crate::ops::lock::release_to)):
    /// it was never free, so no unlock message was published.
    Transferred,
    /// As [`Released`](Self::Released), by a release that ended a streak of
    /// handoffs among redisync's queued waiters for a waiter outside the
    /// queue (Redisson's): the queue keeps off the free lock for a moment
    /// (see [`ops::handoff`](crate::ops::handoff)).
    Yielded,
}

/// A snapshot of a lock, read in one round trip.
///
/// ```
/// let state = redisync::internal::lock::LockState::default();
/// assert!(!state.locked && state.hold_count == 0 && state.ttl.is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockState {
    /// Whether anyone holds the lock.
    pub locked: bool,
    /// How many times the asking holder holds it (0 if not at all).
    pub hold_count: u64,
    /// The lock's remaining time to live; `None` when it is free or has no expiry.
    pub ttl: Option<Duration>,
}

impl LockState {
    /// A snapshot.
    ///
    /// ```
    /// let state = redisync::internal::lock::LockState::new(true, 2, None);
    /// assert_eq!(state.hold_count, 2);
    /// ```
    pub fn new(locked: bool, hold_count: u64, ttl: Option<Duration>) -> Self {
        LockState {
            locked,
            hold_count,
            ttl,
        }
    }
}

scripts! {
    /// KEYS lock [, record [, queue, clients [, streak]]]; ARGV lease ms,
    /// holder [, retry, entry [, record keep ms]]. nil = acquired, else PTTL.
    ACQUIRE = "lock_acquire", "lock acquire", writes, after "window_prelude", after "args_prelude";
    /// KEYS lock, channel, attempt record; ARGV message, holder, lease ms
    /// [, 1 = forget the record instead of marking it undone].
    /// 0 = nothing to undo, 1 = undone (still held), 2 = undone and released.
    UNDO_ACQUIRE = "lock_undo_acquire", "lock undo acquire", writes, after "window_prelude", after "args_prelude", after "undo_prelude";
    /// KEYS lock, token counter [, record]; ARGV lease ms, holder [, record
    /// keep ms]. {-1, token} = acquired, else {PTTL, -1}.
    FENCED_ACQUIRE = "fenced_lock_acquire", "fenced lock acquire", writes, after "window_prelude", after "args_prelude";
    /// KEYS lock [, attempt record]; ARGV lease ms, holder [, record kind].
    /// 1 = renewed, 0 = not ours (or not by that attempt).
    RENEW = "lock_renew", "lock renew", writes, after "window_prelude", after "args_prelude", after "renew_prelude";
    /// KEYS locks [, one attempt record per lock]; ARGV lease ms, one holder
    /// per lock [, record kind]. {1 = renewed, 0 = not ours, ...}.
    RENEW_BATCH = "lock_renew_batch", "lock renew batch", writes, after "window_prelude", after "args_prelude", after "renew_prelude";
    /// KEYS lock, channel, latch (or the hold's attempt record); ARGV
    /// message, lease ms, holder, latch ms
    /// [, waiter, waiter lease ms]. nil = not held, 0 = still held, 1 =
    /// released, 2 = handed to the waiter.
    RELEASE = "lock_release", "lock release", writes, after "window_prelude", after "args_prelude";
    /// KEYS lock, channel[, op record]; ARGV message[, record ms]. 1 = existed.
    FORCE_RELEASE = "lock_force_release", "lock force release", writes, after "window_prelude", after "args_prelude", after "op_record_prelude";
    /// KEYS lock; ARGV holder. {exists, hold count, PTTL}.
    STATE = "lock_state", "lock state", reads;
}

/// Acquires lock `name` for `holder`, or re-enters it if `holder` already
/// holds it (hold count + 1); either way the TTL becomes `lease_ms`.
///
/// # Errors
/// A store failure; `InvalidArgument` for a lease outside 1 ms to
/// [`MAX_LEASE`](crate::MAX_LEASE); `Protocol` if `name` holds another type.
///
/// ```
/// use redisync::internal::lock::Acquire;
/// let store = redisync::MemoryBackend::new();
/// assert_eq!(redisync::internal::lock::acquire(&store, "doc:acq", "c1:1", 30_000)?, Acquire::Acquired);
/// assert!(redisync::internal::lock::acquire(&store, "doc:acq", "c1:1", 0).unwrap_err().is_invalid_argument());
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn acquire<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    holder: &str,
    lease_ms: i64,
) -> Result<Acquire> {
    acquire_recorded(backend, name, holder, lease_ms, None)
}

/// As [`acquire`] (which is this with no record), and with `attempt_key`
/// records the attempt under it (a key of its own, `{name}:redisync_attempt:<id>`,
/// one fresh id per attempt, kept the lease or, if longer, until every copy
/// of the request is past its window) when it takes a hold: [`undo_acquire`] with
/// the same key then removes exactly that hold, whatever else the holder
/// took meanwhile. The same call sent again (its reply lost) does not take
/// a second hold; once undone, it is refused.
///
/// # Errors
/// As [`acquire`]; a connection error (a late request) for an attempt
/// already undone.
///
/// ```
/// use redisync::internal::lock::Acquire;
/// let store = redisync::MemoryBackend::new();
/// let attempt = "{doc:rec}:redisync_attempt:a1";
/// assert_eq!(redisync::internal::lock::acquire_recorded(&store, "doc:rec", "c1:1", 30_000, Some(attempt))?, Acquire::Acquired);
/// // Sent again: still one hold.
/// redisync::internal::lock::acquire_recorded(&store, "doc:rec", "c1:1", 30_000, Some(attempt))?;
/// assert_eq!(redisync::internal::lock::state(&store, "doc:rec", "c1:1")?.hold_count, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn acquire_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    holder: &str,
    lease_ms: i64,
    attempt_key: Option<&str>,
) -> Result<Acquire> {
    check_ms("lease", lease_ms)?;
    let call = acquire_call(&ACQUIRE, Reply::is_nil, undo_sent, &[name], attempt_key)
        .arg(lease_ms)
        .arg(holder);
    // ARGV[3] and ARGV[4] (the queue's) come before the record's keep time.
    let call = match attempt_key.and(record_keep_beyond_lease(backend, lease_ms)) {
        Some(keep_ms) => call.arg("first").arg("").arg(keep_ms),
        None => call,
    };
    run_as(backend, &call, acquire_outcome)
}

/// How long an acquire's attempt record must be kept on `backend` when
/// that is longer than the lease `lease_ms` (the record's TTL otherwise):
/// until every copy of the acquire's request is past its window (see
/// [`record_keep_ms`]), so that a copy the network held back finds the
/// record (and is refused, or sees its own hold) instead of taking a hold
/// nobody knows of. `None` (the common case: a watchdog's 30 s lease) adds
/// no argument to the call.
///
/// A hold that lasts longer than its record (a watchdog's, renewed) needs
/// none by then: every copy of its acquire is past its window and refused
/// there, and its release writes the outcome under the record's key anew.
pub(crate) fn record_keep_beyond_lease<B: LockBackend + ?Sized>(
    backend: &B,
    lease_ms: i64,
) -> Option<i64> {
    Some(record_keep_ms(backend, lease_ms)).filter(|keep_ms| *keep_ms > lease_ms)
}

/// What [`undo_acquire`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Undo {
    /// The attempt took no hold (or it has expired), and now never will.
    Nothing,
    /// Its hold was removed; the lock is still held (the holder's other
    /// holds; for a read hold, other readers too).
    Removed,
    /// Its hold was the last: the lock was released (unlock published; a
    /// fair lock tells its head waiter, a write half publishes the
    /// read-unlock, leaving the writer's own read holds if any).
    Released,
}

/// Undoes exactly the hold that the [`acquire_recorded`] (or
/// [`fenced_acquire_recorded`]) call with `attempt_key` took, if it took one, and nothing else; marks the attempt
/// undone (for `lease_ms`, or longer: until every copy of its request is
/// past its window), so that if its request arrives later still it is
/// refused. Idempotent.
///
/// # Errors
/// A store failure; `InvalidArgument` for a bad lease.
///
/// ```
/// use redisync::internal::lock::{self, Undo};
/// let store = redisync::MemoryBackend::new();
/// let (a1, a2) = ("{doc:undo}:redisync_attempt:a1", "{doc:undo}:redisync_attempt:a2");
/// lock::acquire_recorded(&store, "doc:undo", "c1:1", 30_000, Some(a1))?;
/// lock::acquire_recorded(&store, "doc:undo", "c1:1", 30_000, Some(a2))?;
/// let channel = "redisson_lock__channel:{doc:undo}";
/// assert_eq!(lock::undo_acquire(&store, "doc:undo", channel, "c1:1", 30_000, a1)?, Undo::Removed);
/// assert_eq!(lock::undo_acquire(&store, "doc:undo", channel, "c1:1", 30_000, a1)?, Undo::Nothing);
/// assert_eq!(lock::state(&store, "doc:undo", "c1:1")?.hold_count, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn undo_acquire<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    holder: &str,
    lease_ms: i64,
    attempt_key: &str,
) -> Result<Undo> {
    check_ms("lease", lease_ms)?;
    let keep_ms = record_keep_ms(backend, lease_ms);
    let call = undo_call(name, channel, holder, keep_ms, attempt_key);
    run_as(backend, &call, undo_outcome)
}

/// An undo script's reply: 0 = nothing to undo, 1 = removed (still held),
/// 2 = removed and released.
pub(crate) fn undo_outcome(reply: &Reply, operation: &str) -> Result<Undo> {
    match int(reply, operation)? {
        0 => Ok(Undo::Nothing),
        1 => Ok(Undo::Removed),
        2 => Ok(Undo::Released),
        other => Err(Reply::Int(other).unexpected(operation, "0, 1 or 2")),
    }
}

fn undo_call<'a>(
    name: &'a str,
    channel: &'a str,
    holder: &'a str,
    lease_ms: i64,
    attempt_key: &'a str,
) -> ScriptCall<'a> {
    undo_script_call(&UNDO_ACQUIRE)
        .key(name)
        .key(channel)
        .key(attempt_key)
        .arg(UNLOCK_MESSAGE)
        .arg(holder)
        .arg(lease_ms)
}

/// The replica-acknowledgement undo of an [`acquire`] or
/// [`acquire_recorded`] call (KEYS lock[, attempt record]; ARGV lease,
/// holder): see [`undo_sent_at`].
pub(crate) fn undo_sent(call: &ScriptCall<'_>, _: &Reply) -> ScriptCall<'static> {
    undo_sent_at(call, 1)
}

/// The replica-acknowledgement undo of a [`fenced_acquire`] or
/// [`fenced_acquire_recorded`] call (KEYS lock, token counter[, attempt
/// record]; ARGV lease, holder): see [`undo_sent_at`] (the token stays
/// spent: tokens only grow).
fn undo_fenced_sent(call: &ScriptCall<'_>, _: &Reply) -> ScriptCall<'static> {
    undo_sent_at(call, 2)
}

/// The undo of an acquire call whose attempt record, if it has one, is
/// KEYS[`record`]: recorded, exactly its hold, and the record forgotten,
/// since the store sends the same call again at once (its reply came:
/// nothing of it is still on the way); unrecorded, one hold given back by a
/// release behind a fresh unlock latch.
fn undo_sent_at(call: &ScriptCall<'_>, record: usize) -> ScriptCall<'static> {
    let name = call.keys()[0].as_ref();
    let channel = crate::keys::lock_channel(name);
    let holder = call.args()[1].as_ref();
    match call.keys().get(record) {
        Some(record) => undo_call(name, &channel, holder, sent_lease(call), record.as_ref())
            .arg("1")
            .into_owned(),
        None => release_call(
            name,
            &channel,
            holder,
            sent_lease(call),
            &rollback_latch(name),
            ROLLBACK_LATCH_MS,
        )
        .into_owned(),
    }
}

/// As [`acquire`], and on success increments the fencing-token counter
/// `token_key` (never expiring), raises it to the server clock in µs if
/// below it, and returns it: every acquisition, reentry included, takes a
/// new token.
///
/// # Errors
/// As [`acquire`]; `Protocol` if `token_key` does not hold a positive
/// integer.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// let first = redisync::internal::lock::fenced_acquire(&store, "doc:f", "redisson_lock_token:{doc:f}", "c1:1", 30_000)?;
/// let again = redisync::internal::lock::fenced_acquire(&store, "doc:f", "redisson_lock_token:{doc:f}", "c1:1", 30_000)?;
/// assert!(again.token() > first.token());
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn fenced_acquire<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    token_key: &str,
    holder: &str,
    lease_ms: i64,
) -> Result<FencedAcquire> {
    fenced_acquire_recorded(backend, name, token_key, holder, lease_ms, None)
}

/// As [`fenced_acquire`] (which is this with no record), and with
/// `attempt_key` records the attempt under it (`{name}:redisync_attempt:<id>`, one fresh id per attempt, kept as
/// long as [`acquire_recorded`] keeps it) when it takes a hold, as [`acquire_recorded`] does: the record
/// holds the token it took. [`undo_acquire`] with the same key then removes
/// exactly that hold (the token stays spent: tokens only grow). The same
/// call sent again (its reply lost) takes no second hold and returns the
/// same token; once undone, it is refused.
///
/// # Errors
/// As [`fenced_acquire`]; a connection error (a late request) for an
/// attempt already undone.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// let (counter, attempt) = ("redisson_lock_token:{doc:frec}", "{doc:frec}:redisync_attempt:a1");
/// let first = redisync::internal::lock::fenced_acquire_recorded(&store, "doc:frec", counter, "c1:1", 30_000, Some(attempt))?;
/// // Sent again: the same hold and the same token.
/// let again = redisync::internal::lock::fenced_acquire_recorded(&store, "doc:frec", counter, "c1:1", 30_000, Some(attempt))?;
/// assert_eq!(again.token(), first.token());
/// assert_eq!(redisync::internal::lock::state(&store, "doc:frec", "c1:1")?.hold_count, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn fenced_acquire_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    token_key: &str,
    holder: &str,
    lease_ms: i64,
    attempt_key: Option<&str>,
) -> Result<FencedAcquire> {
    check_ms("lease", lease_ms)?;
    let call = acquire_call(
        &FENCED_ACQUIRE,
        fenced_acquired,
        undo_fenced_sent,
        &[name, token_key],
        attempt_key,
    )
    .arg(lease_ms)
    .arg(holder);
    let call = match attempt_key.and(record_keep_beyond_lease(backend, lease_ms)) {
        Some(keep_ms) => call.arg(keep_ms),
        None => call,
    };
    let reply = run(backend, &call)?;
    let operation = FENCED_ACQUIRE.operation();
    let pttl = int(super::part(&reply, 0, operation)?, operation)?;
    // A held lock's reply carries the integer -1 where a token would be (its
    // PTTL may itself be -1: a hash without expiry).
    let counter = match super::part(&reply, 1, operation)? {
        Reply::Int(-1) => {
            return Ok(FencedAcquire::Held {
                ttl: ttl_from_pttl(pttl),
            });
        }
        token => token.as_text().map(str::to_owned),
    };
    let token = counter.as_deref().and_then(parse_fence_token);
    match token {
        Some(token) if pttl == -1 => Ok(FencedAcquire::Acquired { token }),
        _ => Err(Error::protocol(format!(
            "fenced lock acquire: token counter {token_key:?} holds {counter:?}, not a positive integer"
        ))),
    }
}

/// Whether a fenced acquire's reply is an acquisition: `{-1, "<token>"}`.
fn fenced_acquired(reply: &Reply) -> bool {
    reply.as_array().is_some_and(|items| {
        items.first() == Some(&Reply::Int(-1)) && matches!(items.get(1), Some(Reply::Bulk(_)))
    })
}

/// Resets the TTL of `name` to `lease_ms` if the hash field `holder` still
/// holds it. `false` when the lock is no longer `holder`'s.
///
/// # Errors
/// A store failure, a bad lease, or `Protocol` if `name` holds another type.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// assert!(!redisync::internal::lock::renew(&store, "doc:renew", "c1:1", 30_000)?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn renew<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    holder: &str,
    lease_ms: i64,
) -> Result<bool> {
    check_ms("lease", lease_ms)?;
    let call = ScriptCall::new(&RENEW, Resend::Harmless, Effect::Change(is_one))
        .key(name)
        .arg(lease_ms)
        .arg(holder);
    run_as(backend, &call, super::flag)
}

/// How an acquire attempt's record says that its hold is taken, as that
/// kind's acquire writes it (see `lua/renew_prelude.lua`).
///
/// ```
/// use redisync::internal::lock::RecordKind;
/// assert_ne!(RecordKind::Taken, RecordKind::Numbered);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum RecordKind {
    /// `taken`, or `taken:<...>`: what every lock kind's acquire writes
    /// ([`acquire_recorded`], [`fenced_acquire_recorded`], the fair, read
    /// and write acquires).
    Taken,
    /// Read as [`Taken`](Self::Taken): the fair, read and write records
    /// once said `1` or the read hold's number, and now begin with `taken`
    /// too (their releases keep them as the unlock latch, whose outcome is
    /// a number). The scripts still take the kind's argument, which also
    /// tells a batch with records from one without.
    Numbered,
}

impl RecordKind {
    /// The scripts' name for it.
    fn arg(self) -> &'static str {
        match self {
            RecordKind::Taken => "taken",
            RecordKind::Numbered => "n",
        }
    }
}

/// As [`renew`], for the hold the acquire attempt recorded under `record`
/// took (its key, `{name}:redisync_attempt:<id>`, and how it says taken):
/// renewed only while the holder holds `name` and that record still says
/// taken, so a renewal sent for a hold since released (resent, or held up
/// on the way) renews nothing, not even the holder's next hold. The
/// record's TTL is made at least `lease_ms`. `None`: as [`renew`] (the
/// holder check alone).
///
/// # Errors
/// As [`renew`].
///
/// ```
/// use redisync::internal::lock::RecordKind;
/// let store = redisync::MemoryBackend::new();
/// let record = "{doc:renew-rec}:redisync_attempt:a1";
/// redisync::internal::lock::acquire_recorded(&store, "doc:renew-rec", "c1:1", 30_000, Some(record))?;
/// let taken = Some((record, RecordKind::Taken));
/// assert!(redisync::internal::lock::renew_recorded(&store, "doc:renew-rec", "c1:1", 30_000, taken)?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn renew_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    holder: &str,
    lease_ms: i64,
    record: Option<(&str, RecordKind)>,
) -> Result<bool> {
    renew_with(backend, name, holder, lease_ms, record, false)
}

/// As [`renew_recorded`], but never shortening: the TTL of `name` becomes
/// `lease_ms` only if that is longer than what is left of it (`true` either
/// way while the holder holds it). A fixed lease passed between threads of
/// one client is restarted for its new holder this way, after the pass: a
/// copy of an earlier holder's call may land after a later holder's, and
/// must not cut the later holder's lease.
///
/// # Errors
/// As [`renew`].
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::lock::acquire(&store, "doc:raise", "c1:1", 30_000)?;
/// assert!(redisync::internal::lock::raise_recorded(&store, "doc:raise", "c1:1", 1_000, None)?);
/// let ttl = redisync::internal::lock::state(&store, "doc:raise", "c1:1")?.ttl;
/// assert!(ttl > Some(std::time::Duration::from_secs(20)), "not shortened");
/// assert!(redisync::internal::lock::raise_recorded(&store, "doc:raise", "c1:1", 60_000, None)?);
/// let ttl = redisync::internal::lock::state(&store, "doc:raise", "c1:1")?.ttl;
/// assert!(ttl > Some(std::time::Duration::from_secs(50)), "raised");
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn raise_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    holder: &str,
    lease_ms: i64,
    record: Option<(&str, RecordKind)>,
) -> Result<bool> {
    renew_with(backend, name, holder, lease_ms, record, true)
}

/// [`renew_recorded`], or with `raise` [`raise_recorded`].
fn renew_with<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    holder: &str,
    lease_ms: i64,
    record: Option<(&str, RecordKind)>,
    raise: bool,
) -> Result<bool> {
    check_ms("lease", lease_ms)?;
    let mut call = ScriptCall::new(&RENEW, Resend::Harmless, Effect::Change(is_one))
        .key(name)
        .arg(lease_ms)
        .arg(holder);
    match record {
        Some((record, kind)) => call = call.key(record).arg(kind.arg()),
        // `ARGV[3]` stands for the missing record's kind.
        None if raise => call = call.arg("-"),
        None => {}
    }
    if raise {
        call = call.arg("raise");
    }
    run_as(backend, &call, super::flag)
}

/// As [`renew_many`], each hold with the record of the acquire attempt that
/// took it (`None`: the holder check alone), all of one `kind`: as
/// [`renew_recorded`] for each. One round trip; none when `holds` is empty.
///
/// # Errors
/// As [`renew_many`].
///
/// ```
/// use redisync::internal::lock::RecordKind;
/// let store = redisync::MemoryBackend::new();
/// let record = "{doc:batch-rec:a}:redisync_attempt:a1";
/// redisync::internal::lock::acquire_recorded(&store, "doc:batch-rec:a", "c1:1", 30_000, Some(record))?;
/// let renewed = redisync::internal::lock::renew_many_recorded(
///     &store,
///     &[("doc:batch-rec:a", "c1:1", Some(record)), ("doc:batch-rec:b", "c1:1", None)],
///     RecordKind::Taken,
///     30_000,
/// )?;
/// assert_eq!(renewed, [true, false]);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn renew_many_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    holds: &[(&str, &str, Option<&str>)],
    kind: RecordKind,
    lease_ms: i64,
) -> Result<Vec<bool>> {
    check_ms("lease", lease_ms)?;
    match holds {
        [] => return Ok(Vec::new()),
        // One lock with a record: its own script (the batch's form with
        // records needs two locks, or it would read as Redisson's).
        [(name, holder, Some(record))] => {
            let record = Some((*record, kind));
            return renew_recorded(backend, name, holder, lease_ms, record).map(|r| vec![r]);
        }
        _ => {}
    }
    if holds.iter().all(|(_, _, record)| record.is_none()) {
        let pairs: Vec<(&str, &str)> = holds.iter().map(|(n, h, _)| (*n, *h)).collect();
        return renew_many(backend, &pairs, lease_ms);
    }
    let mut call =
        ScriptCall::new(&RENEW_BATCH, Resend::Harmless, Effect::Change(any_one)).arg(lease_ms);
    for (name, holder, _) in holds {
        call = call.key(*name).arg(*holder);
    }
    // A lock without a record: its own key in the record's place.
    for (name, _, record) in holds {
        call = call.key(record.unwrap_or(name));
    }
    call = call.arg(kind.arg());
    flags(&run(backend, &call)?, holds.len(), RENEW_BATCH.operation())
}

/// Renews many locks in one round trip (the watchdog's batched renewal,
/// Redisson's `lockWatchdogBatchSize`): each `(name, holder)` whose holder
/// still holds `name` gets a TTL of `lease_ms`. Returns one flag per hold, in
/// order: `false` for a lock its holder no longer holds (the others are
/// renewed all the same). No round trip when `holds` is empty.
///
/// On a cluster a script may only touch one hash slot: group the holds by
/// [`LockBackend::slot_of`] first (the store refuses a mix with an error).
///
/// # Errors
/// A store failure, a bad lease, or `Protocol` if a name holds another type.
///
/// ```
/// use redisync::internal::lock::Acquire;
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::lock::acquire(&store, "doc:batch:a", "c1:1", 30_000)?;
/// let renewed = redisync::internal::lock::renew_many(
///     &store, &[("doc:batch:a", "c1:1"), ("doc:batch:b", "c1:1")], 30_000,
/// )?;
/// assert_eq!(renewed, [true, false]);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn renew_many<B: LockBackend + ?Sized>(
    backend: &B,
    holds: &[(&str, &str)],
    lease_ms: i64,
) -> Result<Vec<bool>> {
    check_ms("lease", lease_ms)?;
    if holds.is_empty() {
        return Ok(Vec::new());
    }
    let mut call =
        ScriptCall::new(&RENEW_BATCH, Resend::Harmless, Effect::Change(any_one)).arg(lease_ms);
    for (name, holder) in holds {
        call = call.key(*name).arg(*holder);
    }
    flags(&run(backend, &call)?, holds.len(), RENEW_BATCH.operation())
}

/// Releases one hold of `holder` on `name`. On the last hold, deletes the
/// lock and publishes the unlock message `0` on `channel`; otherwise resets
/// the TTL to `lease_ms`.
///
/// `latch_key` makes a retry idempotent: the outcome is stored there for
/// `latch_ms`, and a second call with the same `latch_key` returns it
/// without releasing again (the unlock latch of the schema table). It is a
/// fresh key per release (`redisson_unlock_latch:{name}:<request id>`), or
/// the record of the [`acquire_recorded`] call that took the hold being
/// released: the record then becomes the latch (one key written instead of
/// a record deleted and a latch created), and a late copy of that acquire
/// finds it released and is refused.
///
/// # Errors
/// A store failure, a bad lease or latch time, or `Protocol` if `name`
/// holds another type.
///
/// ```
/// use redisync::internal::lock::Release;
/// let store = redisync::MemoryBackend::new();
/// let outcome = redisync::internal::lock::release(&store, "doc:rel", "redisson_lock__channel:{doc:rel}", "c1:1", 30_000, "redisson_unlock_latch:{doc:rel}:1", 5_000)?;
/// assert_eq!(outcome, Release::NotHeld);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn release<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    holder: &str,
    lease_ms: i64,
    latch_key: &str,
    latch_ms: i64,
) -> Result<Release> {
    release_with(
        backend, name, channel, holder, lease_ms, latch_key, latch_ms, None,
    )
}

/// [`release`], or with `waiter`, [`release_to`].
#[allow(clippy::too_many_arguments)]
fn release_with<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    holder: &str,
    lease_ms: i64,
    latch_key: &str,
    latch_ms: i64,
    waiter: Option<(&str, i64)>,
) -> Result<Release> {
    check_ms("lease", lease_ms)?;
    check_ms("latch timeout", latch_ms)?;
    let mut call = release_call(name, channel, holder, lease_ms, latch_key, latch_ms);
    if let Some((waiter, waiter_lease_ms)) = waiter {
        check_ms("lease", waiter_lease_ms)?;
        call = call.arg(waiter).arg(waiter_lease_ms);
    }
    run_as(backend, &call, release_outcome)
}

/// Releases one hold of `holder` on `name` as [`release`] does, but on the
/// last hold hands the lock straight to `waiter` (one hold, a TTL of
/// `waiter_lease_ms`) instead of freeing it: [`Release::Transferred`], and
/// no unlock message (the lock was never free). The direct handoff between
/// two threads of one client; the waiter must be one that does not attempt
/// the lock itself meanwhile.
///
/// # Errors
/// As [`release`]; `InvalidArgument` for a bad waiter lease.
///
/// ```
/// use redisync::internal::lock::Release;
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::lock::acquire(&store, "doc:to", "c1:1", 30_000)?;
/// let outcome = redisync::internal::lock::release_to(
///     &store, "doc:to", "redisson_lock__channel:{doc:to}", "c1:1", 30_000,
///     "redisson_unlock_latch:{doc:to}:r1", 5_000, "c1:2", 30_000,
/// )?;
/// assert_eq!(outcome, Release::Transferred);
/// assert_eq!(redisync::internal::lock::state(&store, "doc:to", "c1:2")?.hold_count, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn release_to<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    holder: &str,
    lease_ms: i64,
    latch_key: &str,
    latch_ms: i64,
    waiter: &str,
    waiter_lease_ms: i64,
) -> Result<Release> {
    release_with(
        backend,
        name,
        channel,
        holder,
        lease_ms,
        latch_key,
        latch_ms,
        Some((waiter, waiter_lease_ms)),
    )
}

/// The release script's call, shared with the undo of an acquisition.
fn release_call<'a>(
    name: &'a str,
    channel: &'a str,
    holder: &'a str,
    lease_ms: i64,
    latch_key: &'a str,
    latch_ms: i64,
) -> ScriptCall<'a> {
    // Behind its unlock latch, a repeat returns the first outcome.
    ScriptCall::new(&RELEASE, Resend::Harmless, Effect::Change(is_some))
        .key(name)
        .key(channel)
        .key(latch_key)
        .arg(UNLOCK_MESSAGE)
        .arg(lease_ms)
        .arg(holder)
        .arg(latch_ms)
}

/// Deletes lock `name` whoever holds it and, if it existed, publishes the
/// unlock message on `channel`. Returns whether it existed.
///
/// # Errors
/// A store failure.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// assert!(!redisync::internal::lock::force_release(&store, "doc:force", "redisson_lock__channel:{doc:force}")?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn force_release<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
) -> Result<bool> {
    force_release_with(backend, name, channel, None)
}

/// As [`force_release`], once (see [`super::once`]): `record`
/// (`{name}:redisync_op:<op id>`, one fresh id per call) makes a copy of
/// the call that arrives after it acted return its first outcome and
/// delete nothing (not the next holder's hold); a call that fails with its
/// outcome unknown is settled, so its error means it did not and will not
/// act.
///
/// # Errors
/// As [`force_release`]; a connection error for a call settled as not
/// done, or whose outcome stays unknown (the message says so).
///
/// ```
/// use redisync::internal::lock;
/// let store = redisync::MemoryBackend::new();
/// let (channel, op) = ("redisson_lock__channel:{doc:force-rec}", "{doc:force-rec}:redisync_op:f1");
/// lock::acquire(&store, "doc:force-rec", "c1:1", 30_000)?;
/// assert!(lock::force_release_recorded(&store, "doc:force-rec", channel, op)?);
/// lock::acquire(&store, "doc:force-rec", "c2:1", 30_000)?;
/// assert!(lock::force_release_recorded(&store, "doc:force-rec", channel, op)?); // sent again
/// assert_eq!(lock::state(&store, "doc:force-rec", "c2:1")?.hold_count, 1); // c2 still holds it
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn force_release_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    record: &str,
) -> Result<bool> {
    force_release_with(backend, name, channel, Some(record))
}

fn force_release_with<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    record: Option<&str>,
) -> Result<bool> {
    let resend = super::once::resend(record, Resend::Harmless);
    let call = ScriptCall::new(&FORCE_RELEASE, resend, Effect::Change(is_one))
        .key(name)
        .key(channel)
        .arg(UNLOCK_MESSAGE);
    super::once::run_once(backend, call, record, super::flag)
}

/// Reads whether `name` is locked, `holder`'s hold count and the TTL.
///
/// # Errors
/// A store failure, or `Protocol` if `name` holds another type.
///
/// ```
/// let store = redisync::MemoryBackend::new();
/// assert!(!redisync::internal::lock::state(&store, "doc:state", "c1:1")?.locked);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn state<B: LockBackend + ?Sized>(backend: &B, name: &str, holder: &str) -> Result<LockState> {
    let call = ScriptCall::new(&STATE, Resend::Harmless, Effect::Read)
        .key(name)
        .arg(holder);
    let reply = run(backend, &call)?;
    let operation = STATE.operation();
    let exists = int(super::part(&reply, 0, operation)?, operation)?;
    let (hold_count, ttl) = super::hold_count_and_ttl(&reply, operation)?;
    Ok(LockState::new(exists == 1, hold_count, ttl))
}

/// An acquire script's reply: nil = acquired, else the time to wait (a
/// negative PTTL: no expiry known).
pub(crate) fn acquire_outcome(reply: &Reply, operation: &str) -> Result<Acquire> {
    Ok(match optional_int(reply, operation)? {
        None => Acquire::Acquired,
        Some(pttl) => Acquire::Held {
            ttl: ttl_from_pttl(pttl),
        },
    })
}

/// A release script's reply: nil = not held, 0 = still held, 1 = released.
pub(crate) fn release_outcome(reply: &Reply, operation: &str) -> Result<Release> {
    match optional_int(reply, operation)? {
        None => Ok(Release::NotHeld),
        Some(0) => Ok(Release::StillHeld),
        Some(1) => Ok(Release::Released),
        // A repeat, under the same unlock latch, of a release that handed
        // the lock to a waiter (`release_to`).
        Some(2) => Ok(Release::Transferred),
        // Handed to the head of the waiter queue (`ops::handoff::release`).
        Some(3) => Ok(Release::Transferred),
        Some(4) => Ok(Release::Yielded),
        Some(_) => Err(reply.unexpected(operation, "nil, 0, 1, 2, 3 or 4")),
    }
}
