//! The reentrant lock's waiter queue (redisync only): how a release hands
//! the lock to one waiter in the whole fleet instead of waking one in every
//! client.
//!
//! A failed attempt that will wait joins `{name}:redisync_waiters`, a sorted
//! set of holder ids by arrival ([`acquire`]). A release of the last hold
//! with no waiter of its own client to hand to takes the head of that queue
//! whose client still listens ([`release`]): it hands the lock to it
//! outright (one hold, the claim window as TTL, which the waiter's watchdog
//! renews; a waiter with a fixed lease is handed one hold with its lease
//! as TTL) or, for a waiter queued otherwise, reserves it (hold count 0
//! for the claim window, taken by the waiter's next attempt); tells its
//! client on `redisson_lock__channel:{name}:redisync:<client id>`
//! (`h:<server ms>:<TTL ms>:<wait id>:<holder id>` or `g:<holder id>`).
//! A hold handed to a waiter that froze or died runs out after the claim
//! window; every queued waiter retries at least once per claim window, so
//! the queue moves on. Once `streak` redisync holders in a row had it (the
//! first took it free, the others were handed it: through the queue or
//! between threads of one client, [`release`] with a waiter, all counted
//! in the store) the lock is freed the usual way (unlock message on
//! Redisson's channel) if anyone but the queued redisync clients listens
//! there (`PUBSUB NUMSUB`): a Redisson waiter, which is not in the queue,
//! so gets its turn; else the handoff goes on, counted afresh. Freed so,
//! the lock is kept off by the queue for a moment (`y` in the streak key),
//! and by the client that freed it and any client that waited for it
//! lately, since either would win the race for it every time. A waiter
//! that gives up leaves the queue ([`leave`]).
//!
//! | key / channel | type | contents | TTL |
//! |---|---|---|---|
//! | `{name}:redisync_waiters` | zset | holder id, or `d\|<wait id>\|<holder id>` (`d\|<wait id>+<lease ms>\|<holder id>` with a fixed lease) for a wait that may be handed the lock outright → arrival (server µs) | 2 × lease + 60 s, renewed by each failed attempt |
//! | `{name}:redisync_handoffs` | string | redisync holders in a row less one (handoffs, and free takes after a release that found nobody to hand to), or `y` for 100 ms after a release freed the lock for a waiter outside the queue | 2 × lease + 60 s from the streak's start (`y`: 100 ms) |
//! | `{name}:redisync_clients` | zset | client id → when it last waited or was handed the lock (server ms): the redisync clients that may still listen, as a release counts them, pruned to 10 s | 2 × lease + 60 s from when a client joins it |
//! | `redisson_lock__channel:{name}:redisync:<client id>` | channel | `h:<server ms>:<TTL ms>:<wait id>:<holder id>` = yours (TTL: the claim window, or a fixed lease); `g:<holder id>` = reserved for you | |
//!
//! Redisson ignores all four: its scripts never read them, and a reserved
//! hold looks to it like any held lock.
//!
//! ```
//! use redisync::internal::handoff::{self, Queue};
//! use redisync::internal::lock::{Acquire, Release};
//! let store = redisync::MemoryBackend::new();
//! let queue = Queue::new("doc:q", 2_000, 16);
//! let attempt = |holder: &str, id: &str, retry| {
//!     handoff::acquire(&store, "doc:q", holder, 30_000, &format!("{{doc:q}}:redisync_attempt:{id}"), &queue, retry, None)
//! };
//! assert_eq!(attempt("a:1", "1", false)?, Acquire::Acquired);
//! assert!(!attempt("b:1", "2", false)?.is_acquired()); // queued
//! let released = handoff::release(&store, "doc:q", "redisson_lock__channel:{doc:q}", "a:1", 30_000,
//!     "redisson_unlock_latch:{doc:q}:r1", 5_000, None, &queue, 0)?.outcome;
//! // Nobody listens on b's channel here: b counts as gone, the lock is freed.
//! assert_eq!(released, Release::Released);
//! # Ok::<(), redisync::Error>(())
//! ```

use super::lock::{ACQUIRE, RELEASE, acquire_outcome, release_outcome};
use super::{always, is_some, run, scripts};
use crate::Result;
use crate::backend::{Effect, LockBackend, Reply, Resend, ScriptCall};
use crate::error::check_ms;
use crate::ops::lock::{Acquire, Release};

scripts! {
    /// KEYS queue, lock, channel[, record]; ARGV holder, message, entry[,
    /// record ms]. 1 = a reserved hold was given up.
    LEAVE = "lock_leave_queue", "lock leave queue", writes, after "window_prelude", after "args_prelude", after "op_record_prelude";
}

/// A lock's waiter queue and how its releases hand over.
#[derive(Debug, Clone)]
pub struct Queue {
    key: String,
    streak_key: String,
    clients_key: String,
    channel_prefix: String,
    claim_ms: i64,
    streak: u32,
}

impl Queue {
    /// The queue of lock `name`: a handed hold waits `claim_ms` for its
    /// waiter; once `streak` holders in a row had it (the first took it
    /// free, the others were handed it) a release frees the lock.
    ///
    /// ```
    /// let queue = redisync::internal::handoff::Queue::new("orders", 6_000, 16);
    /// assert_eq!(queue.key(), "{orders}:redisync_waiters");
    /// assert_eq!(queue.channel("c1"), "redisson_lock__channel:{orders}:redisync:c1");
    /// ```
    pub fn new(name: &str, claim_ms: i64, streak: u32) -> Queue {
        Queue {
            key: crate::keys::waiter_queue(name),
            streak_key: crate::keys::handoff_streak(name),
            clients_key: crate::keys::waiting_clients(name),
            channel_prefix: crate::keys::client_channel_prefix(name),
            claim_ms,
            streak,
        }
    }

    /// How many redisync holders in a row may have the lock before a
    /// release frees it for the waiters outside the queue.
    ///
    /// ```
    /// assert_eq!(redisync::internal::handoff::Queue::new("orders", 6_000, 16).streak_limit(), 16);
    /// ```
    pub fn streak_limit(&self) -> u32 {
        self.streak
    }

    /// The queue's key.
    ///
    /// ```
    /// assert_eq!(redisync::internal::handoff::Queue::new("a", 1, 1).key(), "{a}:redisync_waiters");
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How long a handed or reserved hold waits for its waiter.
    ///
    /// ```
    /// let queue = redisync::internal::handoff::Queue::new("a", 6_000, 16);
    /// assert_eq!(queue.claim_window(), std::time::Duration::from_secs(6));
    /// ```
    pub fn claim_window(&self) -> std::time::Duration {
        std::time::Duration::from_millis(u64::try_from(self.claim_ms).unwrap_or(0))
    }

    /// The channel on which the client `client_id` hears that one of its
    /// waiters was handed the lock.
    ///
    /// ```
    /// let queue = redisync::internal::handoff::Queue::new("{a}:b", 1, 1);
    /// assert_eq!(queue.channel("c9"), "redisson_lock__channel:{a}:b:redisync:c9");
    /// ```
    pub fn channel(&self, client_id: &str) -> String {
        format!("{}{client_id}", self.channel_prefix)
    }
}

/// One acquire attempt of `holder` on the reentrant lock `name`, recorded
/// under `attempt_key` (as [`lock::acquire_recorded`](super::lock::acquire_recorded)),
/// that joins `queue` if it fails and takes a hold reserved for it by a
/// release. `retry`: the holder may be queued already (an acquisition then
/// leaves the queue). `outright`: this wait's entry when a release may hand
/// it the lock outright (one hold with the claim window as TTL, `h:` on its
/// channel), for a thread whose watchdog will renew it (see
/// [`outright_entry`]), or with its fixed lease as TTL (see
/// [`leased_entry`]); `None`: only reserve it.
///
/// # Errors
/// As [`lock::acquire_recorded`](super::lock::acquire_recorded).
///
/// ```
/// use redisync::internal::handoff::{self, Queue};
/// let store = redisync::MemoryBackend::new();
/// let queue = Queue::new("doc:qa", 2_000, 16);
/// let outcome = handoff::acquire(&store, "doc:qa", "a:1", 30_000, "{doc:qa}:redisync_attempt:1", &queue, false, Some("d|7|a:1"))?;
/// assert!(outcome.is_acquired());
/// # Ok::<(), redisync::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn acquire<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    holder: &str,
    lease_ms: i64,
    attempt_key: &str,
    queue: &Queue,
    retry: bool,
    outright: Option<&str>,
) -> Result<Acquire> {
    // A retry, or an attempt of a client that just freed the lock for a
    // waiter outside the queue, keeps off it while it is yielded.
    acquire_keeping_off(
        backend,
        name,
        holder,
        lease_ms,
        attempt_key,
        queue,
        retry,
        outright,
        retry,
    )
}

/// As [`acquire`]; `keep_off`: while a release has just freed the lock for
/// the waiters outside the queue (Redisson's), keep off it (join the queue
/// and return the time left of that moment).
///
/// # Errors
/// As [`acquire`].
///
/// ```
/// use redisync::internal::handoff::{self, Queue};
/// let store = redisync::MemoryBackend::new();
/// let queue = Queue::new("doc:qk", 2_000, 16);
/// let outcome = handoff::acquire_keeping_off(&store, "doc:qk", "a:1", 30_000, "{doc:qk}:redisync_attempt:1", &queue, false, None, true)?;
/// assert!(outcome.is_acquired());
/// # Ok::<(), redisync::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn acquire_keeping_off<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    holder: &str,
    lease_ms: i64,
    attempt_key: &str,
    queue: &Queue,
    retry: bool,
    outright: Option<&str>,
    keep_off: bool,
) -> Result<Acquire> {
    check_ms("lease", lease_ms)?;
    let call = ScriptCall::new(
        &ACQUIRE,
        Resend::Harmless,
        Effect::Acquire {
            acquired: Reply::is_nil,
            undo: super::lock::undo_sent,
        },
    )
    .key(name)
    .key(attempt_key)
    .key(queue.key.as_str())
    .key(queue.clients_key.as_str());
    let call = if keep_off {
        call.key(queue.streak_key.as_str())
    } else {
        call
    };
    let call = call
        .arg(lease_ms)
        .arg(holder)
        .arg(if retry { "retry" } else { "first" })
        .arg(outright.unwrap_or(""));
    // The record outlives every copy's window, also past a short lease.
    let call = match super::lock::record_keep_beyond_lease(backend, lease_ms) {
        Some(keep_ms) => call.arg(keep_ms),
        None => call,
    };
    acquire_outcome(&run(backend, &call)?, ACQUIRE.operation())
}

/// A parked waiter's place in the lock's queue, which a release that hands
/// it the lock takes out.
///
/// ```
/// use redisync::internal::handoff::QueuePlace;
/// // A thread that parked at once (a sibling held the lock) sent no attempt.
/// assert_ne!(QueuePlace::Unqueued, QueuePlace::Holder);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueuePlace<'a> {
    /// It sent no attempt in this wait, so it has no entry: the release
    /// makes no call for it.
    Unqueued,
    /// Its attempts queue it under its holder id (a waiter the lock is
    /// only reserved for).
    Holder,
    /// Its attempts queue it under this entry (see [`outright_entry`]).
    Entry(&'a str),
}

impl<'a> QueuePlace<'a> {
    /// The release script's argument for it: `-` for none, empty for the
    /// holder id, or the entry.
    fn arg(self) -> &'a str {
        match self {
            QueuePlace::Unqueued => "-",
            QueuePlace::Holder => "",
            QueuePlace::Entry(entry) => entry,
        }
    }
}

/// What [`release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    /// The release's outcome.
    pub outcome: Release,
    /// When it handed the lock to the waiter: the count of redisync holders
    /// in a row after it, less one (what `{name}:redisync_handoffs` holds);
    /// `None` otherwise, and for a repeat under the same latch.
    pub streak: Option<u32>,
}

/// Releases one hold of `holder` on `name` behind `latch_key` (as
/// [`lock::release`](super::lock::release)); on the last hold, hands the lock
/// to `waiter` (a parked thread of this client: holder id, lease, and its
/// place in the queue, see [`QueuePlace`]) if
/// given, or else to the head of `queue` whose client listens:
/// [`Release::Transferred`] either way, and no unlock message; or, at the
/// end of a streak (see the module doc), to neither:
/// [`Release::Yielded`]. `channel` is the lock's own,
/// `redisson_lock__channel:{name}`: the head's client is told on that
/// channel followed by `:redisync:<client id>` ([`Queue::channel`]).
///
/// `passes`: handoffs the store did not see, counted in the streak with
/// this release's own (the hold was passed that many times between threads
/// of its client since the store last counted it). A handoff to `waiter`
/// also says the streak's count after it, so that the waiter knows how many
/// more such passes the streak allows.
///
/// # Errors
/// As [`lock::release`](super::lock::release); `InvalidArgument` for a
/// `channel` that is not the lock's own.
///
/// ```
/// use redisync::internal::handoff::{self, Queue, QueuePlace};
/// use redisync::internal::lock::Release;
/// let store = redisync::MemoryBackend::new();
/// let queue = Queue::new("doc:qr", 2_000, 16);
/// let wrong = handoff::release(&store, "doc:qr", "redisson_lock__channel:{other}", "a:1", 30_000,
///     "redisson_unlock_latch:{doc:qr}:r0", 5_000, None, &queue, 0);
/// assert!(wrong.unwrap_err().is_invalid_argument());
/// let channel = "redisson_lock__channel:{doc:qr}";
/// handoff::acquire(&store, "doc:qr", "a:1", 30_000, "{doc:qr}:redisync_attempt:1", &queue, false, None)?;
/// let handed = handoff::release(&store, "doc:qr", channel, "a:1", 30_000,
///     "redisson_unlock_latch:{doc:qr}:r1", 5_000, Some(("a:2", 30_000, QueuePlace::Unqueued)), &queue, 0)?;
/// assert_eq!((handed.outcome, handed.streak), (Release::Transferred, Some(1)));
/// // a:2 passed the hold to two more threads of its client, then it comes back.
/// let again = handoff::release(&store, "doc:qr", channel, "a:2", 30_000,
///     "redisson_unlock_latch:{doc:qr}:r2", 5_000, Some(("a:1", 30_000, QueuePlace::Unqueued)), &queue, 2)?;
/// assert_eq!(again.streak, Some(4));
/// # Ok::<(), redisync::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn release<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    holder: &str,
    lease_ms: i64,
    latch_key: &str,
    latch_ms: i64,
    waiter: Option<(&str, i64, QueuePlace<'_>)>,
    queue: &Queue,
    passes: u32,
) -> Result<Counted> {
    check_ms("lease", lease_ms)?;
    check_ms("latch timeout", latch_ms)?;
    check_ms("claim window", queue.claim_ms)?;
    if let Some((_, lease, _)) = waiter {
        check_ms("lease", lease)?;
    }
    // The script tells the head's client on `channel` + `:redisync:<id>`,
    // where the queue's clients listen: another channel would reach none.
    if queue.channel_prefix.strip_prefix(channel) != Some(":redisync:") {
        return Err(crate::Error::invalid(
            "channel",
            format!(
                "must be the lock's own channel (the queue's clients listen on {}<client id>), got {channel:?}",
                queue.channel_prefix
            ),
        ));
    }
    // Behind its unlock latch, a repeat returns the first outcome.
    let call = ScriptCall::new(&RELEASE, Resend::Harmless, Effect::Change(is_some))
        .key(name)
        .key(channel)
        .key(latch_key)
        .key(queue.key.as_str())
        .key(queue.streak_key.as_str())
        .key(queue.clients_key.as_str())
        .arg(crate::keys::UNLOCK_MESSAGE)
        .arg(lease_ms)
        .arg(holder)
        .arg(latch_ms)
        .arg(queue.claim_ms)
        .arg(i64::from(queue.streak));
    // The waiter's three come last, only when there is one (each argument
    // costs the server about as much as a small command's own work).
    let call = match (waiter, passes) {
        (Some((waiter, lease, place)), 0) => call.arg(waiter).arg(lease).arg(place.arg()),
        (None, 0) => call,
        // The passes come last: with no waiter, its three say none.
        (Some((waiter, lease, place)), passes) => call
            .arg(waiter)
            .arg(lease)
            .arg(place.arg())
            .arg(i64::from(passes)),
        (None, passes) => call.arg("").arg("1").arg("").arg(i64::from(passes)),
    };
    let reply = run(backend, &call)?;
    let operation = RELEASE.operation();
    match &reply {
        // Handed to the waiter, with the streak's count.
        Reply::Array(items) => match items.as_slice() {
            [Reply::Int(2), Reply::Int(streak)] => Ok(Counted {
                outcome: Release::Transferred,
                streak: Some(u32::try_from(*streak).unwrap_or(u32::MAX)),
            }),
            _ => Err(reply.unexpected(operation, "nil, 0 to 4, or {2, count}")),
        },
        _ => Ok(Counted {
            outcome: release_outcome(&reply, operation)?,
            streak: None,
        }),
    }
}

/// `holder` stops waiting: it leaves `queue` of lock `name`, and gives up a
/// hold a release reserved for it meanwhile, or (`outright`: its entry,
/// when it was queued so, holding nothing of its own) handed it (the lock
/// is freed, its unlock message published on `channel`). Returns whether it
/// gave one up.
///
/// # Errors
/// A store failure.
///
/// ```
/// use redisync::internal::handoff::{self, Queue};
/// let store = redisync::MemoryBackend::new();
/// let queue = Queue::new("doc:ql", 2_000, 16);
/// assert!(!handoff::leave(&store, "doc:ql", "redisson_lock__channel:{doc:ql}", &queue, "a:1", Some("d|7|a:1"))?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn leave<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    queue: &Queue,
    holder: &str,
    outright: Option<&str>,
) -> Result<bool> {
    let call = leave_call(name, channel, queue, holder, outright);
    Ok(matches!(run(backend, &call)?, Reply::Int(1)))
}

/// [`leave`], acting once: `record` (`{name}:redisync_op:<op id>`, one per
/// wait that stops, the same for every copy and retry of its leave) is
/// kept `keep_ms`, so a copy arriving after one acted returns its outcome
/// and writes nothing: a copy held by a middlebox cannot land after the
/// same thread took the lock again and free that hold. An error with the
/// outcome unknown is settled (see [`once`](super::once)).
///
/// # Errors
/// A store failure (settled: the leave did not act and will not), or one
/// whose outcome is unknown.
///
/// ```
/// use redisync::internal::handoff::{self, Queue};
/// let store = redisync::MemoryBackend::new();
/// let queue = Queue::new("doc:qlr", 2_000, 16);
/// let op = "{doc:qlr}:redisync_op:l1";
/// let channel = "redisson_lock__channel:{doc:qlr}";
/// assert!(!handoff::leave_recorded(&store, "doc:qlr", channel, &queue, "a:1", Some("d|7|a:1"), op, 60_000)?);
/// # Ok::<(), redisync::Error>(())
/// ```
#[allow(clippy::too_many_arguments)] // leave's own, and its record
pub fn leave_recorded<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    queue: &Queue,
    holder: &str,
    outright: Option<&str>,
    record: &str,
    keep_ms: i64,
) -> Result<bool> {
    let outcome = leave_unsettled(
        backend, name, channel, queue, holder, outright, record, keep_ms,
    );
    super::once::settled(
        backend,
        record,
        keep_ms,
        LEAVE.operation(),
        outcome,
        given_up,
    )
}

/// [`leave_recorded`] without the settle: for a leave that is retried
/// with the same record until one lands (the cleanup worker's), which a
/// settle would refuse. Every copy acts at most once, together.
#[allow(clippy::too_many_arguments)] // leave's own, and its record
pub(crate) fn leave_unsettled<B: LockBackend + ?Sized>(
    backend: &B,
    name: &str,
    channel: &str,
    queue: &Queue,
    holder: &str,
    outright: Option<&str>,
    record: &str,
    keep_ms: i64,
) -> Result<bool> {
    check_ms("record", keep_ms)?;
    let call = leave_call(name, channel, queue, holder, outright)
        .key(record)
        .arg(keep_ms);
    let operation = LEAVE.operation();
    run(backend, &call).and_then(|reply| given_up(&reply, operation))
}

fn leave_call<'a>(
    name: &'a str,
    channel: &'a str,
    queue: &'a Queue,
    holder: &'a str,
    outright: Option<&'a str>,
) -> ScriptCall<'a> {
    ScriptCall::new(&LEAVE, Resend::Harmless, Effect::Change(always))
        .key(queue.key.as_str())
        .key(name)
        .key(channel)
        .arg(holder)
        .arg(crate::keys::UNLOCK_MESSAGE)
        .arg(outright.unwrap_or(""))
}

/// A leave's reply: whether it gave a hold up.
fn given_up(reply: &Reply, operation: &str) -> Result<bool> {
    match reply {
        Reply::Int(n) => Ok(*n == 1),
        other => Err(other.unexpected(operation, "0 or 1")),
    }
}

/// The queue entry of a wait that may be handed the lock outright:
/// `d|<wait id>|<holder id>`. The wait id tells a handoff meant for this
/// wait from one meant for an earlier wait of the same holder.
///
/// ```
/// assert_eq!(redisync::internal::handoff::outright_entry(7, "c1:3"), "d|7|c1:3");
/// ```
pub fn outright_entry(wait: u64, holder: &str) -> String {
    // Written without formatting: every wait that may be handed the lock
    // spells one.
    let mut entry = String::with_capacity(holder.len() + 24);
    entry.push_str("d|");
    crate::spell::push_unsigned(&mut entry, wait);
    entry.push('|');
    entry.push_str(holder);
    entry
}

/// The queue entry of a wait with a fixed lease (no watchdog) that may be
/// handed the lock outright: `d|<wait id>+<lease ms>|<holder id>`. A
/// release hands it one hold with that lease as TTL, as its own attempt
/// would have taken: it holds the lock without a round trip of its own.
///
/// ```
/// assert_eq!(redisync::internal::handoff::leased_entry(7, 30_000, "c1:3"), "d|7+30000|c1:3");
/// ```
pub fn leased_entry(wait: u64, lease_ms: i64, holder: &str) -> String {
    let mut entry = String::with_capacity(holder.len() + 40);
    entry.push_str("d|");
    crate::spell::push_unsigned(&mut entry, wait);
    entry.push('+');
    crate::spell::push_decimal(&mut entry, lease_ms);
    entry.push('|');
    entry.push_str(holder);
    entry
}
