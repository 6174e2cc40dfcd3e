//! Inspection: what lives under one object name, read in one round trip by
//! one read-only script (`lua/inspect.lua`), for operators and tools
//! ([`Client::inspect`](crate::Client::inspect) calls [`inspect`]).
//!
//! How kinds are told apart: see [`ObjectKind`] (exported at the crate
//! root, with its table).
//!
//! Nothing is written: a waiter whose queue slot ran out and a permit whose
//! lease ended are reported as found (with a negative remaining time); the
//! next operation on the object removes them.
//!
//! ```
//! use redisync::{HoldMode, ObjectKind};
//!
//! let store = redisync::MemoryBackend::new();
//! redisync::internal::lock::acquire(&store, "doc:inspect", "6f1c0e4e-0000-4000-8000-000000000001:7", 30_000)?;
//! let found = redisync::internal::inspect::inspect(&store, "doc:inspect")?;
//! assert_eq!(found.kind, ObjectKind::Lock);
//! assert_eq!(found.holders[0].thread, Some(7));
//! assert_eq!(found.holders[0].mode, HoldMode::Exclusive);
//! assert!(found.ttl.is_some());
//! # Ok::<(), redisync::Error>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use super::{part, run, scripts, ttl_from_pttl};
use crate::backend::{Effect, LockBackend, Reply, Resend, ScriptCall};
use crate::{Error, Result, keys};

scripts! {
    /// KEYS name, fair queue, fair slot deadlines, token counter, leases,
    /// read-hold key prefix. {type, PTTL, contents, queue, deadlines, token,
    /// leases}; writes nothing.
    INSPECT = "inspect", "inspect", reads;
}

/// What kind of object lives under a name, as far as the stored data tells
/// (how each is recognised: the table below), as
/// [`Client::inspect`](crate::Client::inspect) reports it.
///
/// # How kinds are told apart
///
/// The script reads the name's key (its Redis `TYPE`, `PTTL` and contents)
/// and the auxiliary keys of every primitive that could own the name (see
/// README, Redisson wire format): the fair lock's queue and slot
/// deadlines, the fenced lock's token counter, the permit-expirable
/// semaphore's leases and the read-write lock's read-hold keys. All of
/// them share the name's hash slot, so one script reads them on a cluster
/// too. Then:
///
/// | the name's key | auxiliary keys | [`ObjectKind`] |
/// |---|---|---|
/// | hash with a `generation` or `parties` field (no lock holder is named so) | | [`Barrier`](ObjectKind::Barrier) |
/// | hash with a `mode` field (`read`/`write`) | | [`ReadWriteLock`](ObjectKind::ReadWriteLock) |
/// | hash of holder → hold count | a fair queue or slot deadlines | [`FairLock`](ObjectKind::FairLock) |
/// | hash of holder → hold count | a token counter | [`FencedLock`](ObjectKind::FencedLock) |
/// | hash of holder → hold count | neither | [`Lock`](ObjectKind::Lock) (also a fair lock nobody waits for: the data is the same) |
/// | integer string | leases | [`PermitExpirableSemaphore`](ObjectKind::PermitExpirableSemaphore) |
/// | integer string | no leases | [`Counter`](ObjectKind::Counter): a semaphore, a latch, or a permit-expirable semaphore with no permit leased (the data is the same) |
/// | absent | a fair queue or slot deadlines | [`FairLock`](ObjectKind::FairLock), free, with waiters |
/// | absent | leases | [`PermitExpirableSemaphore`](ObjectKind::PermitExpirableSemaphore), no permit available |
/// | absent | a token counter | [`FencedLock`](ObjectKind::FencedLock), free |
/// | absent | none | [`Absent`](ObjectKind::Absent) (also a free lock, an unset semaphore or an open latch) |
/// | anything else (a list, a set, a non-integer string, a hash of other values) | | [`Unknown`](ObjectKind::Unknown), with its Redis type |
///
/// ```
/// use redisync::ObjectKind;
/// assert_eq!(ObjectKind::Counter.to_string(), "counter (semaphore or latch)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObjectKind {
    /// Nothing under the name: no key, and no fair queue, token counter or
    /// leases. A free lock, an unset semaphore and an open latch all look
    /// like this.
    Absent,
    /// A reentrant lock (Redisson's `RLock`), held. A fair lock that is held
    /// with nobody queued is the same data and is reported as this.
    Lock,
    /// A fair lock (`RFairLock`): its queue or slot deadlines exist (held or
    /// not).
    FairLock,
    /// A fenced lock (`RFencedLock`): its token counter exists (held or not).
    FencedLock,
    /// A read-write lock (`RReadWriteLock`), held.
    ReadWriteLock,
    /// A barrier (redisync's [`Barrier`](crate::Barrier)) that has seen an
    /// arrival: see [`Inspection::barrier`].
    Barrier,
    /// A leader election (redisync's
    /// [`LeaderElection`](crate::LeaderElection)) that has had a leader:
    /// see [`Inspection::election`]. Nothing is stored under the name
    /// itself; its keys are `{name}:redisync_*`.
    Election,
    /// A permit-expirable semaphore (`RPermitExpirableSemaphore`) with at
    /// least one permit leased (its `{name}:timeout` leases exist).
    PermitExpirableSemaphore,
    /// An integer string: a semaphore's available permits (`RSemaphore`),
    /// a count-down latch's count (`RCountDownLatch`), or a
    /// permit-expirable semaphore's available permits while none is leased.
    /// The data does not tell them apart; a value of 0 or less is not a
    /// latch (a latch is deleted at zero).
    Counter,
    /// Something no primitive stores: another Redis type, a string that is
    /// not an integer, or a hash whose values are not hold counts.
    Unknown {
        /// The key's Redis type (`TYPE`): `list`, `set`, `string`, ...
        redis_type: String,
    },
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectKind::Absent => f.write_str("nothing"),
            ObjectKind::Lock => f.write_str("lock"),
            ObjectKind::FairLock => f.write_str("fair lock"),
            ObjectKind::FencedLock => f.write_str("fenced lock"),
            ObjectKind::ReadWriteLock => f.write_str("read-write lock"),
            ObjectKind::Barrier => f.write_str("barrier"),
            ObjectKind::Election => f.write_str("election"),
            ObjectKind::PermitExpirableSemaphore => f.write_str("permit-expirable semaphore"),
            ObjectKind::Counter => f.write_str("counter (semaphore or latch)"),
            ObjectKind::Unknown { redis_type } => {
                write!(f, "unknown (a Redis {redis_type} no primitive stores)")
            }
        }
    }
}

/// How a holder holds a lock.
///
/// ```
/// use redisync::HoldMode;
/// assert_ne!(HoldMode::Read, HoldMode::Write);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldMode {
    /// A reentrant, fair or fenced lock's hold.
    Exclusive,
    /// A read-write lock's read half.
    Read,
    /// A read-write lock's write half.
    Write,
}

/// Which half of a read-write lock: an [`Inspection`]'s `rw_mode` (the
/// hash's `mode` field).
///
/// ```
/// assert_eq!(redisync::RwMode::Read.as_str(), "read");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RwMode {
    /// Shared: many holders.
    Read,
    /// Exclusive: one holder.
    Write,
}

impl RwMode {
    /// The value of the hash's `mode` field.
    ///
    /// ```
    /// assert_eq!(redisync::RwMode::Write.as_str(), "write");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
        }
    }
}

/// One holder of a lock.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let _guard = client.lock("doc:holder").lock()?;
/// let found = client.inspect("doc:holder")?;
/// let holder = &found.holders[0];
/// assert_eq!((holder.id.as_str(), holder.holds), (client.current_holder_id().as_str(), 1));
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder id, `<client uuid>:<thread number>` (without a write
    /// half's `:write` suffix).
    pub id: String,
    /// The client part of the id: [`Client::id`](crate::Client::id) of the
    /// holding client (a Redisson client's UUID for a Java holder).
    pub client_id: String,
    /// The thread part of the id (a Java thread id for a Redisson holder);
    /// `None` when the id does not end in a number.
    pub thread: Option<u64>,
    /// How many times it holds the lock (reentrant acquisitions).
    pub holds: u64,
    /// How it holds it.
    pub mode: HoldMode,
    /// The remaining lease of its hold: the lock's TTL for an exclusive or
    /// write hold, the longest of its read-hold keys' TTLs for a read hold;
    /// `None` without an expiry.
    pub ttl: Option<Duration>,
    /// The holding client's connections to the store, found by their
    /// name `redisync:<client id>` in `CLIENT LIST`: filled by
    /// [`Client::inspect`](crate::Client::inspect), empty when none is
    /// connected (a holder that died, a Redisson holder), when the server
    /// refuses `CLIENT LIST`, or for [`inspect`] alone.
    pub connections: Vec<HolderConnection>,
}

/// One connection of a holding client, as `CLIENT LIST` shows it.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let found = client.inspect("doc:conn")?;
/// assert!(found.holders.iter().all(|h| h.connections.is_empty()));
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderConnection {
    /// The server it is connected to (`host:port`).
    pub server: String,
    /// The client's address as the server sees it (`host:port`).
    pub address: String,
    /// How long the connection has been idle.
    pub idle: Duration,
}

/// Fills each holder's connections from `CLIENT LIST` replies (one per
/// server), matching the connection name `redisync:<client id>`.
pub(crate) fn attach_connections(
    inspection: &mut Inspection,
    replies: &[crate::backend::ServerReply],
) {
    for holder in &mut inspection.holders {
        let wanted = format!("redisync:{}", holder.client_id);
        for reply in replies {
            let Some(list) = reply.reply.as_text() else {
                continue;
            };
            for line in list.lines() {
                let field = |key: &str| {
                    line.split(' ')
                        .find_map(|pair| pair.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
                };
                if field("name") != Some(wanted.as_str()) {
                    continue;
                }
                let (Some(address), Some(idle)) = (field("addr"), field("idle")) else {
                    continue;
                };
                holder.connections.push(HolderConnection {
                    server: reply.server.clone(),
                    address: address.to_owned(),
                    idle: Duration::from_secs(idle.parse().unwrap_or(0)),
                });
            }
        }
    }
}

/// A leader election as [`Client::inspect`](crate::Client::inspect) reads
/// it (see [`ObjectKind::Election`]).
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let leadership = client.leader_election("doc:jobs").campaign("host-a")?;
/// let election = client.inspect("doc:jobs")?.election.expect("an election");
/// assert_eq!(election.leader.map(|leader| leader.term), Some(leadership.term()));
/// assert!(election.candidates.is_empty());
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionInspection {
    /// The leader in office (`None`: nobody leads now).
    pub leader: Option<crate::Leader>,
    /// The leader's lease left, as the store counts it.
    pub lease_left: Option<Duration>,
    /// The last term proclaimed (the leader's, or a past one's).
    pub last_term: Option<u64>,
    /// The candidates waiting, first in line first (the election's fair
    /// lock's queue).
    pub candidates: Vec<QueuedWaiter>,
}

/// One fair-lock waiter in the queue.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let found = client.inspect("doc:queue")?;
/// assert!(found.queue.is_empty());
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuedWaiter {
    /// The waiter's holder id, `<client uuid>:<thread number>`.
    pub id: String,
    /// The client part of the id.
    pub client_id: String,
    /// The thread part of the id; `None` when it is not a number.
    pub thread: Option<u64>,
    /// Its slot deadline, in ms since the epoch (by the waiters' clocks,
    /// as Redisson computes it): by then it must have taken the lock, or it
    /// is evicted. `None` when the queue names a waiter without a slot.
    pub deadline_ms: Option<i64>,
    /// `deadline_ms` minus this client's clock when the inspection was
    /// sent; negative when the slot has run out (the next acquire evicts it).
    pub remaining_ms: Option<i64>,
}

/// One leased permit of a permit-expirable semaphore.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let found = client.inspect("doc:leases")?;
/// assert!(found.leases.is_empty());
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitLease {
    /// The permit's id ([`PermitId`](crate::PermitId)).
    pub permit_id: String,
    /// When its lease ends, in ms since the epoch (by its holder's clock).
    pub lease_end_ms: i64,
    /// `lease_end_ms` minus this client's clock when the inspection was
    /// sent; 0 or less when the lease has ended (the next operation on the
    /// semaphore returns the permit to the pool).
    pub remaining_ms: i64,
}

/// A snapshot of whatever lives under one name ([`inspect`]).
///
/// Fields that do not apply to the [`kind`](Self::kind) are empty or
/// `None`.
///
/// ```
/// let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// client.semaphore("doc:slots").try_set_permits(5)?;
/// let found = client.inspect("doc:slots")?;
/// assert_eq!(found.available_permits(), Some(5));
/// println!("{found}");
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// The inspected name.
    pub name: String,
    /// What it is.
    pub kind: ObjectKind,
    /// The remaining TTL of the name's key (a lock's lease); `None` when it
    /// is absent or has no expiry.
    pub ttl: Option<Duration>,
    /// A lock's holders, sorted by id; a read-write lock lists a holder
    /// twice if it holds both halves.
    pub holders: Vec<Holder>,
    /// A read-write lock's mode (the hash's `mode` field).
    pub rw_mode: Option<RwMode>,
    /// The last fencing token handed out for this name (the token counter,
    /// `redisson_lock_token:{name}`), if it exists.
    pub fencing_token: Option<u64>,
    /// A fair lock's waiters, head first.
    pub queue: Vec<QueuedWaiter>,
    /// The integer stored under the name: a semaphore's (or a
    /// permit-expirable semaphore's) available permits, or a latch's count.
    /// See [`available_permits`](Self::available_permits) and
    /// [`latch_count`](Self::latch_count).
    pub counter: Option<i64>,
    /// A permit-expirable semaphore's leased permits, soonest end first.
    pub leases: Vec<PermitLease>,
    /// A [`Barrier`](ObjectKind::Barrier)'s state.
    pub barrier: Option<BarrierState>,
    /// An [`Election`](ObjectKind::Election)'s state.
    pub election: Option<ElectionInspection>,
    /// This client's clock when the inspection was sent, in ms since the
    /// epoch: the `remaining_ms` fields count from it.
    pub read_at_ms: i64,
}

impl Inspection {
    /// Whether a lock (of any kind) is held.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let found = client.inspect("doc:held")?;
    /// assert!(!found.is_held());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn is_held(&self) -> bool {
        !self.holders.is_empty()
    }

    /// The available permits of a semaphore: the counter of a
    /// [`Counter`](ObjectKind::Counter) or a
    /// [`PermitExpirableSemaphore`](ObjectKind::PermitExpirableSemaphore)
    /// (0 when only leases exist); `None` for any other kind.
    ///
    /// ```
    /// let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// client.semaphore("doc:permits").try_set_permits(2)?;
    /// assert_eq!(client.inspect("doc:permits")?.available_permits(), Some(2));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn available_permits(&self) -> Option<i64> {
        match self.kind {
            ObjectKind::Counter => self.counter,
            ObjectKind::PermitExpirableSemaphore => Some(self.counter.unwrap_or(0)),
            _ => None,
        }
    }

    /// A count-down latch's count: the counter of a
    /// [`Counter`](ObjectKind::Counter) above zero (a latch is deleted at
    /// zero, so 0 or less is a semaphore); `None` otherwise, an open latch
    /// included (it is [`Absent`](ObjectKind::Absent)).
    ///
    /// ```
    /// let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// client.count_down_latch("doc:count").try_set_count(3)?;
    /// assert_eq!(client.inspect("doc:count")?.latch_count(), Some(3));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn latch_count(&self) -> Option<i64> {
        match (&self.kind, self.counter) {
            (ObjectKind::Counter, Some(count)) if count > 0 => Some(count),
            _ => None,
        }
    }
}

/// A multi-line summary for an operator.
impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.name, self.kind)?;
        if let Some(mode) = self.rw_mode {
            write!(f, ", mode {}", mode.as_str())?;
        }
        if let Some(ttl) = self.ttl {
            write!(f, ", ttl {} ms", ttl.as_millis())?;
        }
        for holder in &self.holders {
            let mode = match holder.mode {
                HoldMode::Exclusive => "exclusive",
                HoldMode::Read => "read",
                HoldMode::Write => "write",
            };
            write!(f, "\n  holder {} ({mode}) x{}", holder.id, holder.holds)?;
            if let Some(ttl) = holder.ttl {
                write!(f, ", ttl {} ms", ttl.as_millis())?;
            }
            for connection in &holder.connections {
                write!(
                    f,
                    "\n    connected from {} to {}, idle {} s",
                    connection.address,
                    connection.server,
                    connection.idle.as_secs()
                )?;
            }
        }
        for (place, waiter) in self.queue.iter().enumerate() {
            write!(f, "\n  queued #{} {}", place + 1, waiter.id)?;
            if let (Some(deadline), Some(remaining)) = (waiter.deadline_ms, waiter.remaining_ms) {
                write!(f, ", slot until {deadline} ({remaining} ms left)")?;
            }
        }
        if let Some(token) = self.fencing_token {
            write!(f, "\n  last fencing token {token}")?;
        }
        if let Some(counter) = self.counter {
            write!(f, "\n  counter {counter}")?;
        }
        if let Some(barrier) = &self.barrier {
            write!(f, "\n  generation {}", barrier.generation)?;
            match barrier.parties {
                Some(parties) => write!(f, ", {} of {parties} parties arrived", barrier.arrived)?,
                None => f.write_str(", no arrival yet")?,
            }
        }
        for lease in &self.leases {
            write!(
                f,
                "\n  permit {} leased until {} ({} ms left)",
                lease.permit_id, lease.lease_end_ms, lease.remaining_ms
            )?;
        }
        if let Some(election) = &self.election {
            match &election.leader {
                Some(leader) => write!(
                    f,
                    "\n  leader {:?}, term {}, since {}",
                    leader.identity, leader.term, leader.since_ms
                )?,
                None => f.write_str("\n  no leader")?,
            }
            if let Some(left) = election.lease_left {
                write!(f, ", lease {} ms left", left.as_millis())?;
            }
            if let Some(term) = election.last_term {
                write!(f, "\n  last term {term}")?;
            }
            for (place, candidate) in election.candidates.iter().enumerate() {
                write!(f, "\n  candidate #{} {}", place + 1, candidate.id)?;
            }
        }
        Ok(())
    }
}

/// Reads whatever lives under `name` in one round trip: its
/// [kind](ObjectKind), holders, TTL, fencing token, fair queue, counter and
/// leases (see [`ObjectKind`] for how kinds are told apart). Writes
/// nothing; the auxiliary key names are derived from `name` as Redisson
/// names them.
///
/// # Errors
/// `InvalidArgument` for an empty name; a store failure. Data of any type
/// under the name is an answer ([`ObjectKind::Unknown`]), not an error.
///
/// ```
/// use redisync::ObjectKind;
///
/// let store = redisync::MemoryBackend::new();
/// store.set_string("doc:misc", "hello");
/// let found = redisync::internal::inspect::inspect(&store, "doc:misc")?;
/// assert_eq!(found.kind, ObjectKind::Unknown { redis_type: "string".into() });
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn inspect<B: LockBackend + ?Sized>(backend: &B, name: &str) -> Result<Inspection> {
    crate::names::check_name(name)?;
    let call = ScriptCall::new(&INSPECT, Resend::Harmless, Effect::Read)
        .key(name)
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
        .key(keys::fence_token(name))
        .key(keys::expirable_leases(name))
        .key(keys::rw_key_prefix(name));
    let read_at_ms = crate::clock::wall_clock_ms();
    let reply = run(backend, &call)?;
    let mut found = parse(name, &reply, read_at_ms)?;
    if found.kind == ObjectKind::Absent {
        // Nothing under the name: perhaps an election (its keys are
        // `{name}:redisync_*`); two more reads, only for absent names.
        let keys = super::election::ElectionKeys::new(name);
        let state = super::election::current(backend, &keys, true)?;
        if state.leader.is_some() || !state.recent.is_empty() {
            let lock = parse(
                &keys.lock,
                &run(
                    backend,
                    &ScriptCall::new(&INSPECT, Resend::Harmless, Effect::Read)
                        .key(keys.lock.as_str())
                        .key(keys::fair_queue(&keys.lock))
                        .key(keys::fair_timeouts(&keys.lock))
                        .key(keys::fence_token(&keys.lock))
                        .key(keys::expirable_leases(&keys.lock))
                        .key(keys::rw_key_prefix(&keys.lock)),
                )?,
                read_at_ms,
            )?;
            let last_term = state.recent.last().map(|record| record.term);
            let (leader, lease_left) = match state.leader {
                Some((record, pttl)) => (
                    Some(crate::Leader::from_record(record)),
                    ttl_from_pttl(pttl),
                ),
                None => (None, None),
            };
            found.kind = ObjectKind::Election;
            found.election = Some(ElectionInspection {
                leader,
                lease_left,
                last_term,
                candidates: lock.queue,
            });
        }
    }
    Ok(found)
}

/// The script's reply as an [`Inspection`].
fn parse(name: &str, reply: &Reply, read_at_ms: i64) -> Result<Inspection> {
    let operation = INSPECT.operation();
    let redis_type = text(part(reply, 0, operation)?)
        .ok_or_else(|| reply.unexpected(operation, "a type name first"))?;
    let pttl = super::int(part(reply, 1, operation)?, operation)?;
    let contents = array(part(reply, 2, operation)?, operation)?;
    let queue = array(part(reply, 3, operation)?, operation)?;
    let deadlines = scored(array(part(reply, 4, operation)?, operation)?, operation)?;
    let token = text(part(reply, 5, operation)?)
        .as_deref()
        .and_then(super::lock::parse_fence_token);
    let leases = scored_by(
        array(part(reply, 6, operation)?, operation)?,
        operation,
        hex_member,
    )?;

    let ttl = ttl_from_pttl(pttl);
    let mut found = Inspection {
        name: name.to_owned(),
        kind: ObjectKind::Absent,
        ttl,
        holders: Vec::new(),
        rw_mode: None,
        fencing_token: token,
        queue: Vec::new(),
        counter: None,
        leases: Vec::new(),
        barrier: None,
        election: None,
        read_at_ms,
    };
    let fair = !queue.is_empty() || !deadlines.is_empty();
    let unknown = || ObjectKind::Unknown {
        redis_type: redis_type.clone(),
    };
    found.kind = match redis_type.as_str() {
        "none" if fair => ObjectKind::FairLock,
        "none" if !leases.is_empty() => ObjectKind::PermitExpirableSemaphore,
        "none" if token.is_some() => ObjectKind::FencedLock,
        "none" => ObjectKind::Absent,
        "hash" if is_barrier(contents) => match barrier_hash(contents) {
            Some(state) => {
                found.barrier = Some(state);
                ObjectKind::Barrier
            }
            None => unknown(),
        },
        "hash" => match lock_hash(contents, ttl, operation)? {
            None => unknown(),
            Some((Some(mode), holders)) => {
                found.rw_mode = Some(mode);
                found.holders = holders;
                ObjectKind::ReadWriteLock
            }
            Some((None, holders)) => {
                found.holders = holders;
                if fair {
                    ObjectKind::FairLock
                } else if token.is_some() {
                    ObjectKind::FencedLock
                } else {
                    ObjectKind::Lock
                }
            }
        },
        "string" => match contents
            .first()
            .and_then(text)
            .and_then(|value| value.parse::<i64>().ok())
        {
            None => unknown(),
            Some(value) => {
                found.counter = Some(value);
                if leases.is_empty() {
                    ObjectKind::Counter
                } else {
                    ObjectKind::PermitExpirableSemaphore
                }
            }
        },
        _ => unknown(),
    };
    if found.kind == ObjectKind::FairLock {
        found.queue = fair_queue(queue, &deadlines, read_at_ms);
    }
    if found.kind == ObjectKind::PermitExpirableSemaphore {
        found.leases = leases
            .into_iter()
            .map(|(permit_id, lease_end_ms)| PermitLease {
                permit_id,
                lease_end_ms,
                remaining_ms: lease_end_ms.saturating_sub(read_at_ms),
            })
            .collect();
    }
    Ok(found)
}

/// A barrier's state as stored (`lua/barrier_arrive.lua`).
///
/// ```
/// let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// assert_eq!(client.barrier("doc:barrier", 1).wait()?, 0); // generation 0 met
/// let found = client.inspect("doc:barrier")?;
/// assert_eq!(found.kind, redisync::ObjectKind::Barrier);
/// let state = found.barrier.expect("a barrier's state");
/// // Between generations: the next arrival sets the parties.
/// assert_eq!((state.generation, state.arrived, state.parties), (1, 0, None));
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BarrierState {
    /// The generations completed so far.
    pub generation: u64,
    /// The arrivals of the current generation.
    pub arrived: u64,
    /// How many arrivals complete the current generation; `None` between
    /// generations (no arrival yet: the next one sets it).
    pub parties: Option<u64>,
}

/// Whether a hash's `{field, value, ttl, ...}` is a barrier's: it has a
/// `generation` or `parties` field, names no lock holder
/// (`<client id>:<thread>`) has.
fn is_barrier(contents: &[Reply]) -> bool {
    contents.chunks_exact(3).any(|entry| {
        matches!(
            text(&entry[0]).as_deref(),
            Some("generation") | Some("parties")
        )
    })
}

/// A barrier hash as its state; `None` when a count is not an integer.
fn barrier_hash(contents: &[Reply]) -> Option<BarrierState> {
    // `None`: absent; `Some(None)`: not an integer.
    let field = |name: &str| -> Option<Option<u64>> {
        contents
            .chunks_exact(3)
            .find(|entry| text(&entry[0]).as_deref() == Some(name))
            .map(|entry| text(&entry[1]).and_then(|value| value.parse().ok()))
    };
    // An absent generation or arrival count is 0, as the scripts read it.
    Some(BarrierState {
        generation: field("generation").unwrap_or(Some(0))?,
        arrived: field("arrived").unwrap_or(Some(0))?,
        parties: match field("parties") {
            None => None,
            Some(parties) => Some(parties?),
        },
    })
}

/// A lock hash's `{field, value, longest read-hold PTTL, ...}` as its mode
/// (a read-write lock's) and holders, sorted by id then mode; `None` when
/// it is not a lock's (a `mode` other than `read`/`write`, a value that is
/// not a hold count).
fn lock_hash(
    contents: &[Reply],
    ttl: Option<Duration>,
    operation: &str,
) -> Result<Option<(Option<RwMode>, Vec<Holder>)>> {
    if !contents.len().is_multiple_of(3) {
        return Err(Error::protocol(format!(
            "{operation}: a hash's contents come in threes, got {} items",
            contents.len()
        )));
    }
    let entries: Vec<(String, String, i64)> = contents
        .chunks_exact(3)
        .map(|entry| {
            (
                text(&entry[0]).unwrap_or_default(),
                text(&entry[1]).unwrap_or_default(),
                entry[2].as_int().unwrap_or(-3),
            )
        })
        .collect();
    let mode = match entries.iter().find(|(field, _, _)| field == "mode") {
        None => None,
        Some((_, value, _)) if value == "read" => Some(RwMode::Read),
        Some((_, value, _)) if value == "write" => Some(RwMode::Write),
        Some(_) => return Ok(None),
    };
    let mut holders = Vec::with_capacity(entries.len());
    for (field, value, read_ttl) in entries {
        if mode.is_some() && field == "mode" {
            continue;
        }
        let Ok(holds) = value.parse::<u64>() else {
            return Ok(None);
        };
        let (id, mode, ttl) = match (mode, field.strip_suffix(":write")) {
            (None, _) => (field, HoldMode::Exclusive, ttl),
            (Some(_), Some(id)) => (id.to_owned(), HoldMode::Write, ttl),
            (Some(_), None) => (field, HoldMode::Read, ttl_from_pttl(read_ttl)),
        };
        let (client_id, thread) = split_holder(&id);
        holders.push(Holder {
            client_id,
            thread,
            id,
            holds,
            mode,
            ttl,
            connections: Vec::new(),
        });
    }
    holders.sort_by(|a, b| {
        a.id.cmp(&b.id)
            .then_with(|| (a.mode as u8).cmp(&(b.mode as u8)))
    });
    Ok(Some((mode, holders)))
}

/// The fair queue, head first, each waiter with its slot (waiters with a
/// slot and no queue entry, which the scripts never leave, follow in slot
/// order).
fn fair_queue(queue: &[Reply], deadlines: &[(String, i64)], now_ms: i64) -> Vec<QueuedWaiter> {
    let slots: HashMap<&str, i64> = deadlines
        .iter()
        .map(|(id, deadline)| (id.as_str(), *deadline))
        .collect();
    let mut ids: Vec<String> = queue.iter().filter_map(text).collect();
    for (id, _) in deadlines {
        if !ids.contains(id) {
            ids.push(id.clone());
        }
    }
    ids.into_iter()
        .map(|id| {
            let deadline_ms = slots.get(id.as_str()).copied();
            let (client_id, thread) = split_holder(&id);
            QueuedWaiter {
                client_id,
                thread,
                deadline_ms,
                remaining_ms: deadline_ms.map(|deadline| deadline.saturating_sub(now_ms)),
                id,
            }
        })
        .collect()
}

/// `<client uuid>:<thread number>` as its two parts (the whole id and no
/// thread when it does not end in `:<number>`).
fn split_holder(id: &str) -> (String, Option<u64>) {
    match id.rsplit_once(':') {
        Some((client, thread)) => match thread.parse() {
            Ok(thread) => (client.to_owned(), Some(thread)),
            Err(_) => (id.to_owned(), None),
        },
        None => (id.to_owned(), None),
    }
}

/// A bulk string's or status's text (invalid UTF-8 replaced).
fn text(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Bulk(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Reply::Status(text) => Some(text.clone()),
        _ => None,
    }
}

fn array<'r>(reply: &'r Reply, operation: &str) -> Result<&'r [Reply]> {
    reply
        .as_array()
        .ok_or_else(|| reply.unexpected(operation, "an array"))
}

/// A `ZRANGE ... WITHSCORES` reply as (member, score in whole ms).
fn scored(items: &[Reply], operation: &str) -> Result<Vec<(String, i64)>> {
    scored_by(items, operation, text)
}

/// A permit id as stored (its bytes, as Redisson stores them) in the hex
/// digits a `PermitId` holds.
fn hex_member(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Bulk(bytes) => Some(bytes.iter().map(|b| format!("{b:02x}")).collect()),
        _ => None,
    }
}

/// As [`scored`], reading each member with `member`.
fn scored_by(
    items: &[Reply],
    operation: &str,
    member: fn(&Reply) -> Option<String>,
) -> Result<Vec<(String, i64)>> {
    let bad = || {
        Error::protocol(format!(
            "{operation}: a sorted set read as {items:?}, not member/score pairs"
        ))
    };
    if !items.len().is_multiple_of(2) {
        return Err(bad());
    }
    items
        .chunks_exact(2)
        .map(|pair| {
            let member = member(&pair[0]).ok_or_else(bad)?;
            let score = text(&pair[1])
                .and_then(|score| score.parse::<f64>().ok())
                .ok_or_else(bad)?;
            Ok((member, score_ms(score)))
        })
        .collect()
}

/// A score in ms as whole ms (saturating; the scripts store whole ms).
#[allow(clippy::cast_possible_truncation)]
fn score_ms(score: f64) -> i64 {
    // `as` saturates at the bounds and maps NaN to 0.
    score.round() as i64
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn holder_ids_split_at_the_last_colon() {
        assert_eq!(split_holder("u-1:7"), ("u-1".to_owned(), Some(7)));
        assert_eq!(split_holder("a:b:12"), ("a:b".to_owned(), Some(12)));
        assert_eq!(split_holder("odd"), ("odd".to_owned(), None));
        assert_eq!(split_holder("u:x"), ("u:x".to_owned(), None));
    }

    #[test]
    fn scores_round_to_whole_ms() {
        assert_eq!(score_ms(1_700_000_000_123.0), 1_700_000_000_123);
        assert_eq!(score_ms(f64::INFINITY), i64::MAX);
        assert_eq!(score_ms(f64::NAN), 0);
    }

    fn hash_reply(contents: &[(&str, &str)]) -> Reply {
        let bulk = |text: &str| Reply::Bulk(text.as_bytes().to_vec());
        let mut items = Vec::new();
        for (field, value) in contents {
            items.extend([bulk(field), bulk(value), Reply::Int(-3)]);
        }
        Reply::Array(vec![
            bulk("hash"),
            Reply::Int(-1),
            Reply::Array(items),
            Reply::Array(vec![]),
            Reply::Array(vec![]),
            Reply::Nil,
            Reply::Array(vec![]),
        ])
    }

    #[test]
    fn a_hash_of_other_values_is_unknown() {
        let unknown = ObjectKind::Unknown {
            redis_type: "hash".to_owned(),
        };
        let found = parse("n", &hash_reply(&[("c1:1", "2")]), 0).unwrap();
        assert_eq!(found.kind, ObjectKind::Lock);
        assert_eq!(found.holders[0].holds, 2);
        let found = parse("n", &hash_reply(&[("name", "bob")]), 0).unwrap();
        assert_eq!(found.kind, unknown);
        assert!(found.holders.is_empty());
        let found = parse("n", &hash_reply(&[("mode", "both"), ("c1:1", "1")]), 0).unwrap();
        assert_eq!(found.kind, unknown);
        let found = parse("n", &hash_reply(&[("mode", "read"), ("c1:1", "x")]), 0).unwrap();
        assert_eq!(found.kind, unknown);
        let found = parse(
            "n",
            &hash_reply(&[("mode", "write"), ("c1:1:write", "1")]),
            0,
        )
        .unwrap();
        assert_eq!(found.kind, ObjectKind::ReadWriteLock);
        assert_eq!(found.holders[0].mode, HoldMode::Write);
        assert_eq!(found.holders[0].id, "c1:1");
    }

    #[test]
    fn an_empty_name_is_refused() {
        let store = crate::MemoryBackend::new();
        assert!(inspect(&store, "").unwrap_err().is_invalid_argument());
    }

    #[test]
    fn malformed_replies_are_protocol_errors() {
        let reply = Reply::Array(vec![Reply::Int(1)]);
        assert!(parse("n", &reply, 0).unwrap_err().is_protocol_error());
        let reply = Reply::Array(vec![
            Reply::Bulk(b"hash".to_vec()),
            Reply::Int(-1),
            Reply::Array(vec![Reply::Bulk(b"f".to_vec())]),
            Reply::Array(vec![]),
            Reply::Array(vec![]),
            Reply::Nil,
            Reply::Array(vec![]),
        ]);
        assert!(parse("n", &reply, 0).unwrap_err().is_protocol_error());
    }
}
