//! The fair lock (Redisson's `RFairLock`): the reentrant lock's hash, a
//! FIFO queue of waiter ids and each waiter's slot deadline. An unlock
//! wakes only the head of the queue, on its own channel. Renewal and state
//! are the reentrant lock's ([`super::lock::renew`], [`super::lock::state`]).
//!
//! # Direct handoffs (redisync only)
//!
//! A redisync waiter whose watchdog will renew its hold marks itself when
//! it joins the queue: `{name}:redisync_fair_direct:<holder id>`, a string
//! `<wait id>:<allowance ms>:<live until>` (the live-until in server ms,
//! see below; TTL its slot plus its live time, 2 × lease at least;
//! rewritten by its later attempts, deleted when it takes the lock or
//! gives up, left when a release hands it the lock: the holder's next join
//! rewrites it). A release
//! of the last hold whose queue head has a mark, and whose head's channel
//! `redisson_lock__channel:{name}:<holder id>` has a listener (PUBLISH
//! counts them), hands it the lock outright: the hash holds the head once,
//! with the claim window as TTL (its watchdog renews it within the window),
//! the head leaves the queue and those behind move up a slot (as
//! Redisson's acquire moves them), and the head's channel carries
//! `h:<server ms>:<claim ms>:<wait id>:<holder id>` instead of the unlock
//! message `0`. The waiter holds the lock without an attempt of its own.
//! A marked head nobody hears (its client gone, or between two
//! subscriptions) is not handed the lock. While its mark says it is alive
//! (the mark carries a live-until, server ms, that each of its attempts
//! pushes on: it tries at least once per claim window) it keeps its place
//! and takes the lock with its own attempt once it listens again: passing
//! it over would let a live waiter lose its turn to those behind it. Once
//! the mark is past its live-until, the waiter is gone: the next release
//! (a few per release), or the next redisync waiter's attempt on the free
//! lock, takes it off the queue rather than letting it hold up
//! everyone behind it until its slot runs out. A head without a mark (a
//! Redisson waiter, or a redisync one with a fixed lease) is told `0` and
//! tries, as in Redisson,
//! so a Redisson waiter is never handed a hold it does not know it has, and
//! FIFO order holds across both. A wait that gives up just as it is handed
//! the lock gives it back at once; a handed waiter that froze keeps it at
//! most the claim window: the hold runs out, and every queued redisync
//! waiter retries at least once per claim window, so the next head takes
//! it; a hold handed to an earlier wait of a holder that no guard has is
//! given back by the holder's next wait, never re-entered past the queue
//! (`lua/fair_lock_acquire.lua`). Redisson's scripts never read
//! the marks.
//!
//! | key / channel | type | contents | TTL |
//! |---|---|---|---|
//! | `{name}:redisync_fair_direct:<holder id>` | string | `<wait id>:<allowance ms>:<live until, server ms>` | slot + live time, ≥ 2 × lease |
//! | `redisson_lock__channel:{name}:<holder id>` | channel | Redisson's `0`, or `h:<server ms>:<claim ms>:<wait id>:<holder id>` = the lock is yours | |

use super::lock::{Acquire, Release, Undo, acquire_outcome, release_outcome, undo_outcome};
use super::{
    ROLLBACK_LATCH_MS, acquire_call, is_one, is_some, record_keep_ms, rollback_latch, run_as,
    scripts, sent_lease, undo_script_call,
};
use crate::Result;
use crate::backend::{Effect, LockBackend, Reply, Resend, ScriptCall};
use crate::error::{check_ms, check_time_ms};
use crate::keys::UNLOCK_MESSAGE;

/// The keys of one fair lock, in Redisson's format; built by the library.
///
/// ```
/// let keys = redisync::internal::fair_lock::FairLockKeys {
///     name: "jobs",
///     queue: "redisson_lock_queue:{jobs}",
///     timeouts: "redisson_lock_timeout:{jobs}",
///     channel_prefix: "redisson_lock__channel:{jobs}",
/// };
/// assert_eq!(keys.name, "jobs");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct FairLockKeys<'a> {
    /// The lock hash: `name`.
    pub name: &'a str,
    /// The waiter queue: `redisson_lock_queue:{name}`.
    pub queue: &'a str,
    /// The slot deadlines: `redisson_lock_timeout:{name}`.
    pub timeouts: &'a str,
    /// Waiter channels are `<channel_prefix>:<waiter id>`:
    /// `redisson_lock__channel:{name}`.
    pub channel_prefix: &'a str,
}

/// A fair lock's direct handoffs (see the module doc): where its waiters'
/// marks are and how long a handed hold waits for its waiter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Direct<'a> {
    /// `{name}:redisync_fair_direct:`: a waiter's mark is this and its id.
    pub(crate) mark_prefix: &'a str,
    /// The claim window in ms: a handed hold's TTL until its watchdog
    /// renews it.
    pub(crate) claim_ms: i64,
}

/// Which attempt of a wait with direct handoffs an attempt is (the acquire
/// script's ARGV[7]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitAttempt {
    /// Any other: the holder may hold the lock already (a re-entry).
    Other,
    /// The first attempt of a wait whose holder has no guard of the lock:
    /// a hold the store gives that holder was handed to an earlier wait of
    /// it that ended just then (and whose give-back was lost), so it is
    /// given back (the head, if another, told to try), not re-entered past
    /// the queue.
    Fresh,
    /// A later attempt of the wait: a hold the store gives its holder while
    /// the holder is out of the queue was handed to this wait outright
    /// while the attempt was on its way, and is taken as it is (one hold).
    Retry,
}

impl WaitAttempt {
    fn arg(self) -> i64 {
        match self {
            WaitAttempt::Other => 0,
            WaitAttempt::Fresh => 1,
            WaitAttempt::Retry => 2,
        }
    }
}

/// A waiter's direct mark as its acquire attempt writes it (see the
/// module doc).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Marked<'a> {
    /// `{name}:redisync_fair_direct:<holder id>`.
    pub(crate) key: &'a str,
    /// The wait a release may hand the lock to (none: the mark is deleted,
    /// the waiter is told to try).
    pub(crate) wait: Option<u64>,
    /// Which attempt of its wait this is.
    pub(crate) attempt: WaitAttempt,
    /// How long the mark counts its waiter as alive without a refresh, in
    /// ms: a release passes over an unheard head only once this has run
    /// out.
    pub(crate) live_ms: i64,
}

/// The four keys the release, undo, force-release and delete scripts take
/// first (KEYS lock, queue, slots, channel prefix), added to a call.
trait Keyed<'a> {
    fn keyed(self, keys: &FairLockKeys<'a>) -> Self;
}

impl<'a> Keyed<'a> for ScriptCall<'a> {
    fn keyed(self, keys: &FairLockKeys<'a>) -> Self {
        self.key(keys.name)
            .key(keys.queue)
            .key(keys.timeouts)
            .key(keys.channel_prefix)
    }
}

scripts! {
    /// KEYS lock, queue, slots [, record [, mark]]; ARGV lease ms, holder,
    /// allowance ms, now ms, enqueue [, wait id, fresh, channel prefix,
    /// mark live ms [, record keep ms]]. nil = acquired, else ms to wait.
    ACQUIRE = "fair_lock_acquire", "fair lock acquire", writes, after "window_prelude", after "args_prelude", after "fair_lock_prelude";
    /// KEYS lock, queue, slots, channel prefix, latch (or the hold's
    /// attempt record); ARGV message, lease ms, holder, now ms, latch ms [,
    /// mark prefix, claim ms]. nil/0/1/3.
    RELEASE = "fair_lock_release", "fair lock release", writes, after "window_prelude", after "args_prelude", after "fair_lock_prelude";
    /// KEYS lock, queue, slots, channel prefix, attempt record; ARGV
    /// message, holder, lease ms, now ms [, 1 = forget the record]. 0 =
    /// nothing to undo, 1 = undone (still held), 2 = undone and released.
    UNDO_ACQUIRE = "fair_lock_undo_acquire", "fair lock undo acquire", writes, after "window_prelude", after "args_prelude", after "fair_lock_prelude", after "undo_prelude";
    /// KEYS queue, slots [, mark]; ARGV waiter, allowance ms. 1 = was queued.
    CANCEL = "fair_lock_cancel", "fair lock cancel", writes, after "window_prelude", after "args_prelude", after "op_record_prelude";
    /// KEYS lock, queue, slots, channel prefix; ARGV message, now ms. 1 =
    /// existed.
    FORCE_RELEASE = "fair_lock_force_release", "fair lock force release", writes, after "window_prelude", after "args_prelude", after "op_record_prelude", after "fair_lock_prelude";
    /// KEYS lock, queue, slots, channel prefix; ARGV message. 1 = any
    /// existed.
    DELETE = "fair_lock_delete", "fair lock delete", writes, after "window_prelude", after "args_prelude", after "op_record_prelude";
}

/// Acquires or re-enters fair lock `keys.name` for `holder`, in queue
/// order: granted only when the lock is free and the queue is empty or
/// `holder` is at its head. Waiters whose slot deadline is before `now_ms`
/// are evicted first. If it cannot be granted and `enqueue` is true,
/// `holder` joins the tail with a slot lasting `wait_ms` past the slot
/// ahead. `Held { ttl }` is how long to wait before trying again.
///
/// # Errors
/// A store failure, an argument out of range, or `Protocol` if a key holds
/// another type.
///
/// ```
/// use redisync::internal::fair_lock::FairLockKeys;
/// use redisync::internal::lock::Acquire;
/// let keys = FairLockKeys {
///     name: "doc:fair",
///     queue: "redisson_lock_queue:{doc:fair}",
///     timeouts: "redisson_lock_timeout:{doc:fair}",
///     channel_prefix: "redisson_lock__channel:{doc:fair}",
/// };
/// let store = redisync::MemoryBackend::new();
/// let now = 1_700_000_000_000;
/// let first = redisync::internal::fair_lock::acquire(&store, &keys, "c1:1", 30_000, 5_000, now, true)?;
/// assert_eq!(first, Acquire::Acquired);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn acquire<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &FairLockKeys<'_>,
    holder: &str,
    lease_ms: i64,
    wait_ms: i64,
    now_ms: i64,
    enqueue: bool,
) -> Result<Acquire> {
    acquire_recorded(
        backend, keys, holder, lease_ms, wait_ms, now_ms, enqueue, None,
    )
}

/// As [`acquire`] (which is this with no record), and with `attempt_key`
/// records the attempt under it (`{name}:redisync_attempt:<id>`, one fresh id per attempt, kept the lease or,
/// if longer, until every copy of the request is past its window) when it takes a hold (a queued attempt records nothing: its queue
/// entry is what [`cancel`] removes). [`undo_acquire`] with the same key
/// then removes exactly that hold. The same call sent again (its reply
/// lost) takes no second hold; once undone, or once its hold was released
/// behind the record (the record as [`release`]'s `latch_key`), it is
/// refused and writes nothing, not even a queue entry.
///
/// # Errors
/// As [`acquire`]; a connection error (a late request) for an attempt
/// already undone.
///
/// ```
/// use redisync::internal::fair_lock::FairLockKeys;
/// use redisync::internal::lock::Acquire;
/// let keys = FairLockKeys {
///     name: "doc:fair-rec",
///     queue: "redisson_lock_queue:{doc:fair-rec}",
///     timeouts: "redisson_lock_timeout:{doc:fair-rec}",
///     channel_prefix: "redisson_lock__channel:{doc:fair-rec}",
/// };
/// let store = redisync::MemoryBackend::new();
/// let now = 1_700_000_000_000;
/// let attempt = "{doc:fair-rec}:redisync_attempt:a1";
/// let acquire = |store: &redisync::MemoryBackend| {
///     redisync::internal::fair_lock::acquire_recorded(store, &keys, "c1:1", 30_000, 5_000, now, true, Some(attempt))
/// };
/// assert_eq!(acquire(&store)?, Acquire::Acquired);
/// // Sent again: still one hold.
/// assert_eq!(acquire(&store)?, Acquire::Acquired);
/// assert_eq!(redisync::internal::lock::state(&store, "doc:fair-rec", "c1:1")?.hold_count, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn acquire_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &FairLockKeys<'_>,
    holder: &str,
    lease_ms: i64,
    wait_ms: i64,
    now_ms: i64,
    enqueue: bool,
    attempt_key: Option<&str>,
) -> Result<Acquire> {
    acquire_with(
        backend,
        keys,
        holder,
        [lease_ms, wait_ms, now_ms],
        enqueue,
        attempt_key,
        None,
    )
}

/// As [`acquire_recorded`] (recorded under `attempt_key`), and for a lock
/// with direct handoffs (see the module doc) `marked`: a waiter that joins
/// the queue (or is queued already) sets its mark (`marked.key`,
/// `{name}:redisync_fair_direct:<holder id>`) to its wait id, allowance and
/// the server time until which it counts as alive (`marked.live_ms` from
/// now), so that a release may hand it the lock outright (no wait id: the
/// mark is deleted, it is told to try); taking the lock deletes the mark.
/// `marked.attempt`: which attempt of its wait (see [`WaitAttempt`]).
/// Without `marked`, exactly [`acquire_recorded`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn acquire_marked<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &FairLockKeys<'_>,
    holder: &str,
    lease_ms: i64,
    wait_ms: i64,
    now_ms: i64,
    enqueue: bool,
    attempt_key: &str,
    marked: Option<Marked<'_>>,
) -> Result<Acquire> {
    acquire_with(
        backend,
        keys,
        holder,
        [lease_ms, wait_ms, now_ms],
        enqueue,
        Some(attempt_key),
        marked,
    )
}

/// The body of [`acquire_recorded`] and [`acquire_marked`]: `times` are
/// the lease, the wait allowance and the caller's clock, in ms; `marked`
/// the mark of a lock with direct handoffs.
fn acquire_with<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &FairLockKeys<'_>,
    holder: &str,
    [lease_ms, wait_ms, now_ms]: [i64; 3],
    enqueue: bool,
    attempt_key: Option<&str>,
    marked: Option<Marked<'_>>,
) -> Result<Acquire> {
    check_ms("lease", lease_ms)?;
    check_ms("wait allowance", wait_ms)?;
    check_time_ms("now", now_ms)?;
    let call = acquire_call(
        &ACQUIRE,
        Reply::is_nil,
        undo_sent,
        &[keys.name, keys.queue, keys.timeouts],
        attempt_key,
    );
    let call = match marked {
        Some(marked) => call.key(marked.key),
        None => call,
    }
    .arg(lease_ms)
    .arg(holder)
    .arg(wait_ms)
    .arg(now_ms)
    .arg(i64::from(enqueue));
    let keep_ms = attempt_key.and(super::lock::record_keep_beyond_lease(backend, lease_ms));
    let call = match (marked, keep_ms) {
        (Some(marked), _) => call
            .arg(marked.wait.map(|wait| wait.to_string()).unwrap_or_default())
            .arg(marked.attempt.arg())
            .arg(keys.channel_prefix)
            .arg(marked.live_ms),
        // ARGV[6] to ARGV[9] (the mark's) come before the record's keep
        // time: placeholders a call without a mark never reads.
        (None, Some(_)) => call.arg("").arg(0).arg("").arg(1),
        (None, None) => call,
    };
    // The record outlives every copy's window, also past a short lease.
    let call = match keep_ms {
        Some(keep_ms) => call.arg(keep_ms),
        None => call,
    };
    run_as(backend, &call, acquire_outcome)
}

/// Undoes exactly the hold that the [`acquire_recorded`] call with
/// `attempt_key` took, if it took one, and nothing else; marks the attempt
/// undone (for `lease_ms`, or longer: until every copy of its request is
/// past its window), so that if its request arrives later still it is
/// refused. On the last hold the lock is released and the head waiter
/// told, as [`release`] does. Idempotent. (A queue entry the attempt left
/// is [`cancel`]'s.)
///
/// # Errors
/// A store failure; `InvalidArgument` for a bad lease or clock.
///
/// ```
/// use redisync::internal::fair_lock::FairLockKeys;
/// use redisync::internal::{fair_lock, lock::Undo};
/// let keys = FairLockKeys {
///     name: "doc:fair-undo",
///     queue: "redisson_lock_queue:{doc:fair-undo}",
///     timeouts: "redisson_lock_timeout:{doc:fair-undo}",
///     channel_prefix: "redisson_lock__channel:{doc:fair-undo}",
/// };
/// let store = redisync::MemoryBackend::new();
/// let now = 1_700_000_000_000;
/// let (a1, a2) = ("{doc:fair-undo}:redisync_attempt:a1", "{doc:fair-undo}:redisync_attempt:a2");
/// fair_lock::acquire_recorded(&store, &keys, "c1:1", 30_000, 5_000, now, true, Some(a1))?;
/// fair_lock::acquire_recorded(&store, &keys, "c1:1", 30_000, 5_000, now, true, Some(a2))?;
/// assert_eq!(fair_lock::undo_acquire(&store, &keys, "c1:1", 30_000, now, a1)?, Undo::Removed);
/// assert_eq!(fair_lock::undo_acquire(&store, &keys, "c1:1", 30_000, now, a1)?, Undo::Nothing);
/// assert_eq!(redisync::internal::lock::state(&store, "doc:fair-undo", "c1:1")?.hold_count, 1);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn undo_acquire<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &FairLockKeys<'_>,
    holder: &str,
    lease_ms: i64,
    now_ms: i64,
    attempt_key: &str,
) -> Result<Undo> {
    check_ms("lease", lease_ms)?;
    check_time_ms("now", now_ms)?;
    let keep_ms = record_keep_ms(backend, lease_ms);
    let call = undo_call(keys, holder, keep_ms, now_ms, attempt_key);
    run_as(backend, &call, undo_outcome)
}

fn undo_call<'a>(
    keys: &FairLockKeys<'a>,
    holder: &'a str,
    lease_ms: i64,
    now_ms: i64,
    attempt_key: &'a str,
) -> ScriptCall<'a> {
    undo_script_call(&UNDO_ACQUIRE)
        .keyed(keys)
        .key(attempt_key)
        .arg(UNLOCK_MESSAGE)
        .arg(holder)
        .arg(lease_ms)
        .arg(now_ms)
}

/// The replica-acknowledgement undo of an [`acquire`] or
/// [`acquire_recorded`] call (KEYS lock, queue, slots[, attempt record];
/// ARGV lease, holder, ...): recorded, exactly its hold, and the record
/// forgotten, since the store sends the same call again at once;
/// unrecorded, the hold given back by a release behind a fresh latch.
fn undo_sent(call: &ScriptCall<'_>, _: &Reply) -> ScriptCall<'static> {
    let name = call.keys()[0].as_ref();
    let channel_prefix = crate::keys::lock_channel(name);
    let keys = FairLockKeys {
        name,
        queue: call.keys()[1].as_ref(),
        timeouts: call.keys()[2].as_ref(),
        channel_prefix: &channel_prefix,
    };
    let (holder, now_ms) = (call.args()[1].as_ref(), crate::clock::wall_clock_ms());
    match call.keys().get(3) {
        Some(record) => undo_call(&keys, holder, sent_lease(call), now_ms, record.as_ref())
            .arg("1")
            .into_owned(),
        None => release_call(
            &keys,
            holder,
            sent_lease(call),
            now_ms,
            &rollback_latch(name),
            ROLLBACK_LATCH_MS,
        )
        .into_owned(),
    }
}

/// Releases one hold of `holder`; on the last one deletes the lock and
/// publishes `0` on the head waiter's channel
/// (`<keys.channel_prefix>:<waiter id>`). A lock that no longer exists
/// counts as released (Redisson's behaviour). `latch_key`/`latch_ms` as in
/// [`super::lock::release`]: a fresh key, or the record of the
/// [`acquire_recorded`] call that took the hold, which then keeps the
/// outcome, so that a late copy of that acquire is refused.
///
/// # Errors
/// A store failure, an argument out of range, or `Protocol` if a key holds
/// another type.
///
/// ```
/// use redisync::internal::fair_lock::FairLockKeys;
/// use redisync::internal::lock::Release;
/// let keys = FairLockKeys {
///     name: "doc:fair-rel",
///     queue: "redisson_lock_queue:{doc:fair-rel}",
///     timeouts: "redisson_lock_timeout:{doc:fair-rel}",
///     channel_prefix: "redisson_lock__channel:{doc:fair-rel}",
/// };
/// let store = redisync::MemoryBackend::new();
/// let now = 1_700_000_000_000;
/// redisync::internal::fair_lock::acquire(&store, &keys, "c1:1", 30_000, 5_000, now, true)?;
/// let latch = "redisson_unlock_latch:{doc:fair-rel}:1";
/// let outcome = redisync::internal::fair_lock::release(&store, &keys, "c1:1", 30_000, now, latch, 5_000)?;
/// assert_eq!(outcome, Release::Released);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn release<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &FairLockKeys<'_>,
    holder: &str,
    lease_ms: i64,
    now_ms: i64,
    latch_key: &str,
    latch_ms: i64,
) -> Result<Release> {
    release_direct(
        backend, keys, holder, lease_ms, now_ms, latch_key, latch_ms, None,
    )
}

/// [`release`]; with `direct`, the last hold goes outright to a marked head
/// that listens ([`Release::Transferred`]; see the module doc).
#[allow(clippy::too_many_arguments)]
pub(crate) fn release_direct<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &FairLockKeys<'_>,
    holder: &str,
    lease_ms: i64,
    now_ms: i64,
    latch_key: &str,
    latch_ms: i64,
    direct: Option<Direct<'_>>,
) -> Result<Release> {
    check_ms("lease", lease_ms)?;
    check_time_ms("now", now_ms)?;
    check_ms("latch timeout", latch_ms)?;
    if let Some(direct) = direct {
        check_ms("claim window", direct.claim_ms)?;
    }
    let call = release_call(keys, holder, lease_ms, now_ms, latch_key, latch_ms);
    let call = match direct {
        Some(direct) => call.arg(direct.mark_prefix).arg(direct.claim_ms),
        None => call,
    };
    run_as(backend, &call, release_outcome)
}

/// The release script's call, shared with the undo of an acquisition.
fn release_call<'a>(
    keys: &FairLockKeys<'a>,
    holder: &'a str,
    lease_ms: i64,
    now_ms: i64,
    latch_key: &'a str,
    latch_ms: i64,
) -> ScriptCall<'a> {
    ScriptCall::new(&RELEASE, Resend::Harmless, Effect::Change(is_some))
        .keyed(keys)
        .key(latch_key)
        .arg(UNLOCK_MESSAGE)
        .arg(lease_ms)
        .arg(holder)
        .arg(now_ms)
        .arg(latch_ms)
}

/// Removes `holder` from the queue (a waiter that gave up); the slots of
/// the waiters behind it move up by `wait_ms`.
///
/// # Errors
/// A store failure, a bad allowance, or `Protocol` if a key holds another
/// type.
///
/// ```
/// use redisync::internal::fair_lock::FairLockKeys;
/// let keys = FairLockKeys {
///     name: "doc:fair-cancel",
///     queue: "redisson_lock_queue:{doc:fair-cancel}",
///     timeouts: "redisson_lock_timeout:{doc:fair-cancel}",
///     channel_prefix: "redisson_lock__channel:{doc:fair-cancel}",
/// };
/// let store = redisync::MemoryBackend::new();
/// redisync::internal::fair_lock::cancel(&store, &keys, "c1:1", 5_000)?;
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn cancel<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &FairLockKeys<'_>,
    holder: &str,
    wait_ms: i64,
) -> Result<()> {
    cancel_marked(backend, keys, holder, wait_ms, None, None).map(drop)
}

/// [`cancel`], and with `mark_key`, the waiter's direct mark deleted too
/// (see the module doc): no release hands it the lock any more; with
/// `record` (`{name}:redisync_op:<op id>`), acting once (a copy held by a
/// middlebox cannot land after the thread queued again and take its new
/// place), settled when its outcome is unknown (see
/// [`once`](super::once)). Returns whether it was queued.
pub(crate) fn cancel_marked<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &FairLockKeys<'_>,
    holder: &str,
    wait_ms: i64,
    mark_key: Option<&str>,
    record: Option<&str>,
) -> Result<bool> {
    check_ms("wait allowance", wait_ms)?;
    let call = ScriptCall::new(&CANCEL, Resend::Harmless, Effect::Read)
        .key(keys.queue)
        .key(keys.timeouts);
    let call = mark_key.into_iter().fold(call, ScriptCall::key);
    let call = call.arg(holder).arg(wait_ms);
    super::once::run_once(backend, call, record, was_queued)
}

/// A cancel's reply: whether the waiter was queued.
fn was_queued(reply: &Reply, operation: &str) -> Result<bool> {
    match reply {
        Reply::Int(n) => Ok(*n == 1),
        other => Err(other.unexpected(operation, "0 or 1")),
    }
}

/// Deletes the fair lock whoever holds it and tells the head waiter.
/// Returns whether it existed.
///
/// # Errors
/// A store failure, or a bad clock reading.
///
/// ```
/// use redisync::internal::fair_lock::FairLockKeys;
/// let keys = FairLockKeys {
///     name: "doc:fair-force",
///     queue: "redisson_lock_queue:{doc:fair-force}",
///     timeouts: "redisson_lock_timeout:{doc:fair-force}",
///     channel_prefix: "redisson_lock__channel:{doc:fair-force}",
/// };
/// let store = redisync::MemoryBackend::new();
/// assert!(!redisync::internal::fair_lock::force_release(&store, &keys, 1_700_000_000_000)?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn force_release<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &FairLockKeys<'_>,
    now_ms: i64,
) -> Result<bool> {
    force_release_with(backend, keys, now_ms, None)
}

/// As [`force_release`], once (see [`super::once`]): with `record`
/// (`{name}:redisync_op:<op id>`, one fresh id per call) a copy arriving
/// after the call acted returns its first outcome and deletes nothing; a
/// call that fails with its outcome unknown is settled.
///
/// # Errors
/// As [`force_release`]; a connection error for a call settled as not
/// done, or whose outcome stays unknown (the message says so).
///
/// ```
/// use redisync::internal::fair_lock::{self, FairLockKeys};
/// let keys = FairLockKeys {
///     name: "doc:fair-force-rec",
///     queue: "redisson_lock_queue:{doc:fair-force-rec}",
///     timeouts: "redisson_lock_timeout:{doc:fair-force-rec}",
///     channel_prefix: "redisson_lock__channel:{doc:fair-force-rec}",
/// };
/// let (store, now, op) = (redisync::MemoryBackend::new(), 1_700_000_000_000, "{doc:fair-force-rec}:redisync_op:f1");
/// fair_lock::acquire(&store, &keys, "c1:1", 30_000, 5_000, now, true)?;
/// assert!(fair_lock::force_release_recorded(&store, &keys, now, op)?);
/// fair_lock::acquire(&store, &keys, "c2:1", 30_000, 5_000, now, true)?;
/// assert!(fair_lock::force_release_recorded(&store, &keys, now, op)?); // sent again: c2 keeps it
/// assert!(redisync::internal::lock::state(&store, keys.name, "c2:1")?.locked);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn force_release_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &FairLockKeys<'_>,
    now_ms: i64,
    record: &str,
) -> Result<bool> {
    force_release_with(backend, keys, now_ms, Some(record))
}

fn force_release_with<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &FairLockKeys<'_>,
    now_ms: i64,
    record: Option<&str>,
) -> Result<bool> {
    check_time_ms("now", now_ms)?;
    let call = ScriptCall::new(&FORCE_RELEASE, Resend::Harmless, Effect::Change(is_one))
        .keyed(keys)
        .arg(UNLOCK_MESSAGE)
        .arg(now_ms);
    super::once::run_once(backend, call, record, super::flag)
}

/// Deletes fair lock `keys.name` with its waiter queue and slot deadlines
/// (Redisson's `RFairLock.delete`), whoever holds it, and publishes the
/// unlock message on every queued waiter's own channel, so each retries at
/// once. Returns whether any of the three keys existed.
///
/// # Errors
/// A store failure, or `Protocol` if a key holds another type.
///
/// ```
/// use redisync::internal::fair_lock::FairLockKeys;
/// let keys = FairLockKeys {
///     name: "doc:fair-del",
///     queue: "redisson_lock_queue:{doc:fair-del}",
///     timeouts: "redisson_lock_timeout:{doc:fair-del}",
///     channel_prefix: "redisson_lock__channel:{doc:fair-del}",
/// };
/// let store = redisync::MemoryBackend::new();
/// let now = 1_700_000_000_000;
/// redisync::internal::fair_lock::acquire(&store, &keys, "c1:1", 30_000, 5_000, now, true)?;
/// assert!(redisync::internal::fair_lock::delete(&store, &keys)?);
/// assert!(!redisync::internal::fair_lock::delete(&store, &keys)?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn delete<B: LockBackend + ?Sized>(backend: &B, keys: &FairLockKeys<'_>) -> Result<bool> {
    delete_recorded_with(backend, keys, None)
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
    keys: &FairLockKeys<'_>,
    record: &str,
) -> Result<bool> {
    delete_recorded_with(backend, keys, Some(record))
}

fn delete_recorded_with<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &FairLockKeys<'_>,
    record: Option<&str>,
) -> Result<bool> {
    let call = ScriptCall::new(&DELETE, Resend::Harmless, Effect::Change(is_one))
        .keyed(keys)
        .arg(UNLOCK_MESSAGE);
    super::once::run_once(backend, call, record, super::flag)
}
