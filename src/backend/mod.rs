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
//! This module knows nothing of any primitive: no lock, semaphore or latch
//! type, key or reply is named here or below. Each primitive's reply and
//! key types and the key schema (Redisson's wire format) live with its
//! operations in [`crate::ops`], so adding a primitive touches no file
//! under `backend/`.
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | [`LockBackend`], [`PubSubConnection`] and [`Message`], [`ServerReply`] |
//! | `script.rs` | [`Script`], [`ScriptCall`], [`Arg`], [`Reply`], [`Effect`], [`Resend`]: what a store is asked to run |
//! | `memory/` | [`MemoryBackend`]: the scripts in an embedded Lua 5.1 over an in-memory keyspace |
//! | `redis/` | [`RedisBackend`] and everything only Redis needs: its options ([`RedisOptions`]), [`Deployment`], connection setup and naming, TLS, Sentinel, replica acknowledgement ([`ReplicaAcknowledgement`]) and `cluster/` |

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
pub use self::script::{
    Arg, Effect, Reply, Resend, Script, ScriptCall, WINDOW_MARGIN, request_window_end,
};

/// One pub/sub message.
///
/// ```
/// let msg = redisync::Message::new("redisson_lock__channel:{a}", "0");
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
    /// let msg = redisync::Message::new("c", "1");
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
/// use redisync::{LockBackend, Message};
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
/// pub/sub connection. Every operation of every primitive builds a
/// [`ScriptCall`] (one script of `lua/`) and reads its [`Reply`]; a store
/// only runs it.
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
/// use redisync::{Effect, LockBackend, Reply, Resend, Script, ScriptCall};
///
/// static INCR: Script = Script::new("doc_incr", "doc increment", "return redis.call('incr', KEYS[1])");
/// let backend = redisync::MemoryBackend::new();
/// let call = ScriptCall::new(&INCR, Resend::IfUnsent, Effect::Change(|_| true)).key("doc:n");
/// assert_eq!(backend.run_script(&call)?, Reply::Int(1));
/// assert_eq!(backend.run_script(&call)?, Reply::Int(2));
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
    /// operations (the watchdog's renewal of many locks in one call) group
    /// their keys by it, and a client whose store answers `Some` does not
    /// queue a lock's waiters in the store (a cluster's `PUBLISH` counts the
    /// receivers of one node only).
    ///
    /// ```
    /// use redisync::LockBackend;
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
    /// use redisync::LockBackend;
    /// assert_eq!(redisync::MemoryBackend::new().response_timeout(), None);
    /// ```
    fn response_timeout(&self) -> Option<Duration> {
        None
    }

    /// The server's clock now, in ms since the epoch, as last estimated
    /// (`None`, the default: unknown): a reading of its `TIME` plus the
    /// time since on this process's monotonic clock, so that stepping the
    /// local wall clock does not move it. A message that carries a time by
    /// the server's clock is dated with it: a waiter handed a lock by a
    /// release in another client reads how old the handoff is; without it,
    /// the waiter takes the lock with an attempt of its own.
    ///
    /// ```
    /// use redisync::LockBackend;
    /// // The in-memory store's clock is this machine's.
    /// assert!(redisync::MemoryBackend::new().server_now_ms().is_some());
    /// ```
    fn server_now_ms(&self) -> Option<i64> {
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
    /// use redisync::{LockBackend, Reply};
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
/// use redisync::{Reply, ServerReply};
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
    /// use redisync::{Reply, ServerReply};
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
/// [`Client::backend`](crate::Client::backend) returns) runs scripts as the
/// store it shares, and a store that wraps another can hold it so.
///
/// ```
/// use std::sync::Arc;
/// use redisync::LockBackend;
/// let shared: Arc<dyn LockBackend> = Arc::new(redisync::MemoryBackend::new());
/// assert_eq!(shared.slot_of("orders:42"), None);
/// shared.publish("news", "0")?;
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

    fn response_timeout(&self) -> Option<Duration> {
        (**self).response_timeout()
    }

    fn server_now_ms(&self) -> Option<i64> {
        (**self).server_now_ms()
    }
}
