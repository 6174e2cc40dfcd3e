//! Leader election (redisync only: Redisson has none). Candidates queue on
//! a fair lock of the election's own (`{name}:redisync_election`: FIFO,
//! a release hands it to the next candidate directly, a dead candidate's
//! hold runs out with its lease); the one that holds it proclaims itself
//! leader with a new **term**, a fencing token greater than every earlier
//! term (the counter's `INCR` raised to the server's clock in µs, as a
//! fenced lock's token), writes the leader record and publishes the change
//! on the election's channel. A leader that resigns deletes its record
//! (only its own term's) and says so on the channel before the lock is
//! released.
//!
//! | key | type | contents | expiry |
//! |---|---|---|---|
//! | `{name}:redisync_election` | hash (a fair lock, with its queue and timeout keys) | holder id → hold count | the lease |
//! | `{name}:redisync_term` | string | the last term | none |
//! | `{name}:redisync_leader` | hash | `holder`, `identity`, `term`, `since` (server ms) | none (valid while `holder` holds the lock) |
//! | `{name}:redisync_terms` | list | the last 64 terms, `<term>:<since>:<identity>` | none |
//! | channel `redisync_election:{name}` | pub/sub | `e:<term>:<since>:<identity>` (elected), `r:<term>` (resigned) | |

use super::{run, scripts};
use crate::backend::{Effect, LockBackend, Reply, Resend, ScriptCall};
use crate::{Error, Result};

scripts! {
    /// KEYS lock, term counter, leader, recent terms, channel [, record];
    /// ARGV holder, identity, lease ms [, record ms]. The term (digits) or
    /// nil.
    PROCLAIM = "election_proclaim", "election proclaim", writes, after "window_prelude", after "args_prelude", after "op_record_prelude";
    /// KEYS leader, channel [, record]; ARGV holder, term [, record ms].
    /// 1 = resigned, 0 = not that term's record.
    RESIGN = "election_resign", "election resign", writes, after "window_prelude", after "args_prelude", after "op_record_prelude";
    /// KEYS lock, leader, recent terms; ARGV [recent]. {identity, term,
    /// since, pttl} or {} [, then the recent terms]; writes nothing.
    CURRENT = "election_current", "election current", reads;
}

/// `{name}:<suffix>` (or `name:<suffix>` when `name` has a hash tag of its
/// own), as every auxiliary key of a primitive.
fn suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// An election's keys and channel, built from its name.
///
/// ```
/// let keys = redisync::internal::election::ElectionKeys::new("jobs");
/// assert_eq!(keys.lock, "{jobs}:redisync_election");
/// assert_eq!(keys.channel, "redisync_election:{jobs}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionKeys {
    /// The fair lock the candidates queue on.
    pub lock: String,
    /// The term counter.
    pub term: String,
    /// The leader record.
    pub leader: String,
    /// The recent terms.
    pub terms: String,
    /// The channel of leader changes.
    pub channel: String,
}

impl ElectionKeys {
    /// The keys of election `name`.
    pub fn new(name: &str) -> ElectionKeys {
        ElectionKeys {
            lock: suffixed(name, "redisync_election"),
            term: suffixed(name, "redisync_term"),
            leader: suffixed(name, "redisync_leader"),
            terms: suffixed(name, "redisync_terms"),
            channel: crate::keys::prefix("redisync_election", name),
        }
    }
}

/// A leader as the store records it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderRecord {
    /// The identity it campaigned with.
    pub identity: String,
    /// Its term.
    pub term: u64,
    /// When it was proclaimed, in ms by the server's clock.
    pub since_ms: i64,
}

impl LeaderRecord {
    /// Reads `<term>:<since>:<identity>` (a recent term, or a message's
    /// body after `e:`).
    pub(crate) fn parse(text: &str) -> Option<LeaderRecord> {
        let mut parts = text.splitn(3, ':');
        let term = parts.next()?.parse().ok()?;
        let since_ms = parts.next()?.parse().ok()?;
        let identity = parts.next()?.to_owned();
        Some(LeaderRecord {
            identity,
            term,
            since_ms,
        })
    }
}

/// What [`current`] read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ElectionState {
    /// The leader (`None`: nobody leads), with its lease left in ms.
    pub leader: Option<(LeaderRecord, i64)>,
    /// With `recent`: the last terms proclaimed, oldest first.
    pub recent: Vec<LeaderRecord>,
}

/// Proclaims `holder`, which holds the election's lock, leader as
/// `identity` (and sets the lock's TTL to `lease_ms`), under the call's op `record` (`{name}:redisync_op:<id>`,
/// one fresh id per call): a copy of the call acts no more and returns the
/// first outcome, and a call whose outcome is unknown is settled (see
/// [`once`](super::once)). `Ok(None)`: `holder` does not hold the lock.
///
/// # Errors
/// A store failure, or `Protocol` on a wrong type.
///
/// ```
/// use redisync::internal::election::{proclaim, ElectionKeys};
/// let store = redisync::MemoryBackend::new();
/// let keys = ElectionKeys::new("doc:e");
/// assert_eq!(proclaim(&store, &keys, "c1:1", "host-a", 30_000, "{doc:e}:redisync_op:1")?, None);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn proclaim<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ElectionKeys,
    holder: &str,
    identity: &str,
    lease_ms: i64,
    record: &str,
) -> Result<Option<u64>> {
    crate::error::check_ms("lease", lease_ms)?;
    let call = ScriptCall::new(&PROCLAIM, Resend::Harmless, Effect::Change(is_term))
        .key(&keys.lock)
        .key(&keys.term)
        .key(&keys.leader)
        .key(&keys.terms)
        .key(&keys.channel)
        .arg(holder)
        .arg(identity)
        .arg(lease_ms);
    super::once::run_once(backend, call, Some(record), read_term)
}

/// Whether a proclaim's reply is a term.
fn is_term(reply: &Reply) -> bool {
    !reply.is_nil()
}

/// A proclaim's reply: the term, or nil.
fn read_term(reply: &Reply, operation: &str) -> Result<Option<u64>> {
    match reply {
        Reply::Nil => Ok(None),
        other => other
            .as_text()
            .and_then(|text| text.parse().ok())
            .map(Some)
            .ok_or_else(|| other.unexpected(operation, "a term or nil")),
    }
}

/// Resigns `holder`'s leadership of `term`: its leader record goes and
/// `r:<term>` is published, unless the record is another term's. Under
/// the op `record`, as [`proclaim`]. Returns whether the record was that
/// term's.
///
/// # Errors
/// A store failure, or `Protocol` on a wrong type.
///
/// ```
/// use redisync::internal::election::{resign, ElectionKeys};
/// let store = redisync::MemoryBackend::new();
/// let keys = ElectionKeys::new("doc:r");
/// assert!(!resign(&store, &keys, "c1:1", 7, "{doc:r}:redisync_op:1")?);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn resign<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ElectionKeys,
    holder: &str,
    term: u64,
    record: &str,
) -> Result<bool> {
    let call = ScriptCall::new(&RESIGN, Resend::Harmless, Effect::Change(is_one))
        .key(&keys.leader)
        .key(&keys.channel)
        .arg(holder)
        .arg(term.to_string());
    super::once::run_once(backend, call, Some(record), |reply, op| {
        match reply.as_int() {
            Some(n) => Ok(n == 1),
            None => Err(reply.unexpected(op, "0 or 1")),
        }
    })
}

/// Whether a reply is 1.
fn is_one(reply: &Reply) -> bool {
    reply.as_int() == Some(1)
}

/// The election's current leader (a record whose holder still holds the
/// lock) and, with `recent`, its last terms.
///
/// # Errors
/// A store failure, or `Protocol` on a wrong type.
///
/// ```
/// use redisync::internal::election::{current, ElectionKeys};
/// let store = redisync::MemoryBackend::new();
/// assert_eq!(current(&store, &ElectionKeys::new("doc:c"), false)?.leader, None);
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn current<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &ElectionKeys,
    recent: bool,
) -> Result<ElectionState> {
    let mut call = ScriptCall::new(&CURRENT, Resend::Harmless, Effect::Read)
        .key(&keys.lock)
        .key(&keys.leader)
        .key(&keys.terms);
    if recent {
        call = call.arg(1);
    }
    let reply = run(backend, &call)?;
    let operation = CURRENT.operation();
    let bad = || reply.unexpected(operation, "the leader and the recent terms");
    let (leader, rest): (&Reply, &[Reply]) = if recent {
        let items = reply.as_array().ok_or_else(bad)?;
        let (first, rest) = items.split_first().ok_or_else(bad)?;
        (first, rest)
    } else {
        (&reply, &[])
    };
    let leader = match leader.as_array() {
        Some([]) => None,
        Some([identity, term, since, pttl]) => {
            let text = |r: &Reply| r.as_text().map(str::to_owned);
            let record = LeaderRecord {
                identity: text(identity).ok_or_else(bad)?,
                term: text(term).and_then(|t| t.parse().ok()).ok_or_else(bad)?,
                since_ms: text(since).and_then(|t| t.parse().ok()).ok_or_else(bad)?,
            };
            Some((record, pttl.as_int().ok_or_else(bad)?))
        }
        _ => return Err(bad()),
    };
    let recent = rest
        .iter()
        .map(|item| item.as_text().and_then(LeaderRecord::parse).ok_or_else(bad))
        .collect::<Result<Vec<_>>>()?;
    Ok(ElectionState { leader, recent })
}

/// Checks an identity: not empty, no newline, at most 256 bytes.
pub(crate) fn check_identity(identity: &str) -> Result<()> {
    if identity.is_empty() {
        return Err(Error::invalid("identity", "must not be empty"));
    }
    if identity.len() > 256 {
        return Err(Error::invalid(
            "identity",
            format!("must be at most 256 bytes, got {}", identity.len()),
        ));
    }
    if identity.contains(['\n', '\r']) {
        return Err(Error::invalid("identity", "must not contain a line break"));
    }
    Ok(())
}
