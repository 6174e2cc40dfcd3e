//! The seam between the primitives and the store: [`LockBackend`].
//!
//! A backend knows nothing about threads, guards, watchdogs, waiting or
//! even locks: it runs a script of `lua/` ([`ScriptCall`]) atomically and
//! returns its [`Reply`], publishes, and opens pub/sub connections. Which
//! script an operation runs, with which keys and arguments, and what its
//! reply means is written once, in [`crate::ops`]. [`RedisBackend`] runs the
//! scripts on Redis and [`MemoryBackend`] runs the very same scripts in an
//! embedded Lua 5.1, so the two cannot diverge in an operation's semantics.
//! The primitives (`Lock`, ...) hold all blocking, retry and renewal logic
//! once, above the operations.
//!
//! # Schema (Redisson 3.x wire format)
//!
//! | object | key | type | contents | TTL | channel | messages |
//! |---|---|---|---|---|---|---|
//! | reentrant lock | `name` | hash | field `<client uuid>:<thread>` = hold count | the lease; reset on every acquire and renewal | `redisson_lock__channel:{name}` | `0` = unlocked |
//! | fenced-lock tokens | `redisson_lock_token:{name}` | string | the last fencing token handed out (`INCR` on every acquisition of the lock `name`, then raised to the server clock in µs if below it) | none | as the reentrant lock | as the reentrant lock |
//! | unlock latch | `redisson_unlock_latch:{name}:<request id>` | string | `0` still held, `1` released | a few seconds | | |
//! | fair lock | `name` | hash | as the reentrant lock | the lease | per waiter: `redisson_lock__channel:{name}:<waiter id>` | `0` = your turn |
//! | fair-lock queue | `redisson_lock_queue:{name}` | list | waiter ids, FIFO | none | | |
//! | fair-lock slots | `redisson_lock_timeout:{name}` | zset | waiter id, score = slot deadline (ms, client clock) | none | | |
//! | read-write lock | `name` | hash | `mode` = `read`/`write`; `<holder>` = read holds; `<holder>:write` = write holds | longest hold | `redisson_rwlock:{name}` | `0` = unlocked (wakes one), `1` = read-unlock (wakes all) |
//! | read hold n | `{name}:<holder>:rwlock_timeout:<n>` | string | `1` | the hold's lease | | |
//! | semaphore | `name` | string | available permits (absent = 0, may go negative) | none | `redisson_sc:{name}` | the new permit count (wakes up to that many) |
//! | permit-expirable semaphore | `name`; `{name}:timeout` | string; zset | available permits; permit id → lease end (ms, client clock) | none | `redisson_sc:{name}` | the new permit count |
//! | count-down latch | `name` | string | the count (deleted at zero) | none | `redisson_countdownlatch__channel__{name}` | `0` = opened (wakes all), `1` = new count |
//!
//! Every auxiliary key and channel carries the `{name}` hash tag, so one
//! primitive's keys share a Redis Cluster slot (see `keys.rs`).

use std::time::Duration;

use crate::Result;

mod memory;
pub(crate) mod redis;
mod script;

pub use self::memory::{DumpedKey, DumpedValue, MemoryBackend};
#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub use self::redis::SentinelConfig;
pub use self::redis::{
    Deployment, RedisBackend, RedisOptions, ReplicaAcknowledgement, ReplicaShortfall,
};
pub use self::script::{Arg, Effect, Reply, Resend, Script, ScriptCall};

/// What an acquire attempt found.
///
/// ```
/// use redisync::backend::Acquire;
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
    /// assert!(redisync::backend::Acquire::Acquired.is_acquired());
    /// ```
    pub fn is_acquired(&self) -> bool {
        matches!(self, Acquire::Acquired)
    }
}

/// What a fenced acquire attempt found: [`Acquire`] plus the fencing token
/// of a successful acquisition.
///
/// ```
/// use redisync::backend::FencedAcquire;
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
    /// use redisync::backend::FencedAcquire;
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
/// use redisync::backend::Release;
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
}

/// A snapshot of a lock, read in one round trip.
///
/// ```
/// let state = redisync::backend::LockState::default();
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

/// The keys of one fair lock, in Redisson's format; built by the library.
///
/// ```
/// let keys = redisync::backend::FairLockKeys {
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

/// The keys and fields of one holder on one read-write lock, in Redisson's
/// format; built by the library.
///
/// ```
/// let keys = redisync::backend::RwLockKeys {
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

/// The keys of one permit-expirable semaphore, in Redisson's format; built by
/// the library.
///
/// ```
/// let keys = redisync::backend::ExpirableKeys {
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

/// Which half of a read-write lock.
///
/// ```
/// assert_eq!(redisync::backend::RwMode::Read.as_str(), "read");
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
    /// assert_eq!(redisync::backend::RwMode::Write.as_str(), "write");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
        }
    }
}

/// A snapshot of a read-write lock, read in one round trip.
///
/// ```
/// let state = redisync::backend::RwLockState::default();
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

impl LockState {
    /// A snapshot (for [`LockBackend`] implementations).
    ///
    /// ```
    /// let state = redisync::backend::LockState::new(true, 2, None);
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

impl RwLockState {
    /// A snapshot (for [`LockBackend`] implementations).
    ///
    /// ```
    /// use redisync::backend::{RwLockState, RwMode};
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

/// One pub/sub message.
///
/// ```
/// let msg = redisync::backend::Message::new("redisson_lock__channel:{a}", "0");
/// assert_eq!(msg.payload, "0");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Message {
    /// The channel it was published on.
    pub channel: String,
    /// Its payload.
    pub payload: String,
}

impl Message {
    /// A message on `channel` carrying `payload`.
    ///
    /// ```
    /// let msg = redisync::backend::Message::new("c", "1");
    /// assert_eq!(msg.channel, "c");
    /// ```
    pub fn new(channel: impl Into<String>, payload: impl Into<String>) -> Self {
        Message {
            channel: channel.into(),
            payload: payload.into(),
        }
    }
}

/// A live pub/sub connection, lent to the subscriber thread by
/// [`LockBackend::with_pubsub`].
///
/// It is used by one thread only, so it need not be `Send`.
///
/// ```
/// use std::time::Duration;
/// use redisync::backend::{LockBackend, Message};
///
/// let backend = redisync::MemoryBackend::new();
/// let publisher = backend.clone();
/// backend.with_pubsub(&mut |conn| {
///     conn.subscribe(&["news".to_owned()])?;
///     publisher.publish("news", "0")?;
///     assert_eq!(conn.next_message(Duration::from_secs(1))?, Some(Message::new("news", "0")));
///     assert_eq!(conn.next_message(Duration::from_millis(10))?, None);
///     Ok(())
/// })?;
/// # Ok::<(), redisync::Error>(())
/// ```
pub trait PubSubConnection {
    /// Subscribes to `channels`; returns once the server confirmed every one,
    /// so a message published after this returns is delivered.
    ///
    /// # Errors
    /// A connection error ends the session; the subscriber reconnects.
    fn subscribe(&mut self, channels: &[String]) -> Result<()>;

    /// Unsubscribes from `channels`.
    ///
    /// # Errors
    /// A connection error ends the session; the subscriber reconnects.
    fn unsubscribe(&mut self, channels: &[String]) -> Result<()>;

    /// Waits up to `timeout` for the next message; `Ok(None)` when none came.
    ///
    /// # Errors
    /// A dropped connection is an error; the subscriber reconnects.
    fn next_message(&mut self, timeout: Duration) -> Result<Option<Message>>;
}

/// The seam between redisync and a store: run a script, publish, open a
/// pub/sub connection. Every operation of every primitive is a function of
/// [`crate::ops`] that builds a [`ScriptCall`] (one script of `lua/`) and
/// reads its [`Reply`]; a store only runs it.
///
/// Object safe (`Arc<dyn LockBackend>`), `Send + Sync`. Every method may
/// block for one round trip and must not wait for a lock: waiting is done
/// above this trait. [`RedisBackend`] (a single server, Sentinel or
/// Cluster) runs scripts with `EVALSHA` (loading them on `NOSCRIPT`);
/// [`MemoryBackend`] runs the very same scripts in an embedded Lua 5.1
/// over an in-memory keyspace.
///
/// A script that fails on the data it finds (`WRONGTYPE`, a non-integer)
/// or refuses an argument (`ERR invalid lease: ...`) answers
/// `Ok(Reply::Error(..))`: the operations say what that means. `Err` is
/// for the store itself: a connection, a timeout, a refused command.
///
/// ```
/// use redisync::backend::{Acquire, LockBackend};
/// let backend = redisync::MemoryBackend::new();
/// assert_eq!(redisync::ops::lock::acquire(&backend, "doc:trait", "c1:1", 30_000)?, Acquire::Acquired);
/// assert!(!redisync::ops::lock::acquire(&backend, "doc:trait", "c2:1", 30_000)?.is_acquired());
/// # Ok::<(), redisync::Error>(())
/// ```
pub trait LockBackend: Send + Sync + 'static {
    /// Runs `call`'s script with its KEYS and ARGV, atomically, and returns
    /// the script's reply.
    ///
    /// # Errors
    /// The store failed (a connection error, a timeout, a refusal); a
    /// script's own error reply is `Ok(Reply::Error(..))`.
    fn run_script(&self, call: &ScriptCall<'_>) -> Result<Reply>;

    /// Publishes `payload` on `channel` (used to nudge a subscriber).
    ///
    /// # Errors
    /// A backend failure.
    fn publish(&self, channel: &str, payload: &str) -> Result<()>;

    /// Opens a dedicated pub/sub connection and lends it to `session` until
    /// `session` returns; the connection is closed afterwards.
    ///
    /// # Errors
    /// The connection could not be opened, or `session`'s own error.
    fn with_pubsub(
        &self,
        session: &mut dyn FnMut(&mut dyn PubSubConnection) -> Result<()>,
    ) -> Result<()>;

    /// The hash slot `key` lives in, when the store splits its keys across
    /// slots and one script may only touch keys of one slot (Redis Cluster);
    /// `None` (the default) when any keys may share a script. Batched
    /// operations ([`ops::lock::renew_many`](crate::ops::lock::renew_many))
    /// group their keys by it.
    ///
    /// ```
    /// use redisync::backend::LockBackend;
    /// assert_eq!(redisync::MemoryBackend::new().slot_of("orders:42"), None);
    /// ```
    fn slot_of(&self, key: &str) -> Option<u16> {
        let _ = key;
        None
    }

    /// How long one round trip may wait for its reply, when the store has
    /// such a bound (`None`, the default: it answers at once or fails). An
    /// unlock keeps its in-line attempts, connection openings included,
    /// within this plus 300 ms of retries, then hands the release to the
    /// background.
    ///
    /// ```
    /// use redisync::backend::LockBackend;
    /// assert_eq!(redisync::MemoryBackend::new().response_timeout(), None);
    /// ```
    fn response_timeout(&self) -> Option<Duration> {
        None
    }

    /// Sends one plain command (`args[0]` and its arguments; no script, no
    /// keys) to every server the scripts run on, and returns each server's
    /// reply, for health checks ([`Client::ping`](crate::Client::ping),
    /// [`Client::check_server`](crate::Client::check_server)). A server's
    /// error reply (an unknown command, an ACL refusal) is
    /// `Ok(Reply::Error(..))` in its [`ServerReply`]; `Err` is for the store
    /// itself (a connection, a timeout). The command is sent at most once.
    ///
    /// [`RedisBackend`]: one server alone, or the current master with
    /// Sentinel, or every master of a cluster (in the order of their slot
    /// ranges), each on a pooled connection. [`MemoryBackend`] answers
    /// `PING` only (`PONG`), every other command with an error reply. The
    /// default answers `Err` (a backend error saying it does not support
    /// plain commands).
    ///
    /// # Errors
    /// The backend does not support plain commands, or the store failed.
    ///
    /// ```
    /// use redisync::backend::{LockBackend, Reply};
    /// let replies = redisync::MemoryBackend::new().server_command(&["PING"])?;
    /// assert_eq!(replies[0].reply, Reply::Status("PONG".into()));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    fn server_command(&self, args: &[&str]) -> Result<Vec<ServerReply>> {
        let _ = args;
        Err(crate::Error::backend(
            "this LockBackend does not send plain server commands \
             (LockBackend::server_command is not implemented)",
            false,
        ))
    }
}

/// One server's answer to [`LockBackend::server_command`].
///
/// ```
/// use std::time::Duration;
/// use redisync::backend::{Reply, ServerReply};
/// let reply = ServerReply::new("127.0.0.1:6379", Reply::Status("PONG".into()), Duration::from_micros(80));
/// assert_eq!(reply.server, "127.0.0.1:6379");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerReply {
    /// The server that answered, without credentials (`host:port`, or
    /// `memory` for a [`MemoryBackend`]).
    pub server: String,
    /// Its reply; an error reply is [`Reply::Error`].
    pub reply: Reply,
    /// The time from sending the command to reading the reply (not counting
    /// the wait for a pooled connection).
    pub round_trip: Duration,
}

impl ServerReply {
    /// A server's reply (for [`LockBackend`] implementations).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redisync::backend::{Reply, ServerReply};
    /// let reply = ServerReply::new("memory", Reply::Nil, Duration::ZERO);
    /// assert!(reply.reply.is_nil());
    /// ```
    pub fn new(server: impl Into<String>, reply: Reply, round_trip: Duration) -> Self {
        ServerReply {
            server: server.into(),
            reply,
            round_trip,
        }
    }
}

/// A shared backend is a backend: `Arc<dyn LockBackend>` (what
/// [`Client::backend`](crate::Client::backend) returns) can be passed to the
/// [`crate::ops`] functions as it is.
///
/// ```
/// use std::sync::Arc;
/// use redisync::backend::LockBackend;
/// let shared: Arc<dyn LockBackend> = Arc::new(redisync::MemoryBackend::new());
/// assert!(redisync::ops::lock::acquire(&shared, "doc:arc", "c1:1", 30_000)?.is_acquired());
/// # Ok::<(), redisync::Error>(())
/// ```
impl<T: LockBackend + ?Sized> LockBackend for std::sync::Arc<T> {
    fn run_script(&self, call: &ScriptCall<'_>) -> Result<Reply> {
        (**self).run_script(call)
    }

    fn publish(&self, channel: &str, payload: &str) -> Result<()> {
        (**self).publish(channel, payload)
    }

    fn with_pubsub(
        &self,
        session: &mut dyn FnMut(&mut dyn PubSubConnection) -> Result<()>,
    ) -> Result<()> {
        (**self).with_pubsub(session)
    }

    fn slot_of(&self, key: &str) -> Option<u16> {
        (**self).slot_of(key)
    }

    fn server_command(&self, args: &[&str]) -> Result<Vec<ServerReply>> {
        (**self).server_command(args)
    }
}
