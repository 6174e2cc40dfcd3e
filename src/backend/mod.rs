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
//! | `script.rs` | [`Script`], [`ScriptCall`], [`Arg`], [`Reply`], [`Effect`], [`Resend`]: what a store is asked to run; [`request_window_end`] and [`WINDOW_MARGIN`]: a request's window |
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
/// Object safe (`Arc<dyn LockBackend>`), `Send + Sync`. [`RedisBackend`]
/// (a single server, Sentinel or Cluster) runs scripts with `EVALSHA`
/// (loading them on `NOSCRIPT`); [`MemoryBackend`] runs the very same
/// scripts in an embedded Lua 5.1 over an in-memory keyspace. A store of
/// your own ([`ClientBuilder::backend`](crate::ClientBuilder::backend))
/// needs nothing but the items of the crate root, and keeps the
/// obligations below; the crate's tests run their shared behaviours on one
/// written so (`tests/outside_store.rs`).
///
/// # Obligations of a store
///
/// ## Atomic scripts, as Redis runs them
/// [`run_script`](Self::run_script) runs the call's script, with
/// [`keys`](ScriptCall::keys) as `KEYS` and [`args`](ScriptCall::args) as
/// `ARGV` (plus the window, below), as one atomic step: nothing else
/// touches the store between its first and last command, and `PUBLISH`es
/// inside it reach every subscriber of the store, in every client. Lua
/// 5.1 with Redis's `redis.call`, `redis.pcall`, `redis.error_reply` and
/// `redis.status_reply`, the commands the scripts use (`TIME` included),
/// and Redis's conversions of the script's value ([`Reply`]). Run
/// [`Script::code`], or [`Script::sharded_code`] where `PUBLISH` does not
/// reach sharded subscribers (a Redis Cluster, whose subscribers use
/// `SSUBSCRIBE`).
///
/// ## Replies and errors
/// A script that fails on the data it finds (`WRONGTYPE`, a non-integer)
/// or refuses an argument (`ERR invalid lease: ...`) answers
/// `Ok(Reply::Error(..))`, its whole text, code first: the operations say
/// what that means. `Err` is for the store itself: build it with
/// [`Error::backend`](crate::Error::backend) or
/// [`Error::backend_caused_by`](crate::Error::backend_caused_by), with
/// `connection = true` whenever the call may or may not have run (a lost
/// or refused connection, a timeout, a reply that never came): the
/// operations then send a harmless call again, or settle or undo the
/// others exactly. `false` is for a refusal a retry cannot mend (an ACL,
/// a misconfigured server).
///
/// ## Windows: a late copy writes nothing
/// A script that writes is windowed ([`Script::is_windowed`]) and takes
/// one more `ARGV`, last: the end of its request's window, which the store
/// appends ([`ScriptCall::window_arg`], or [`ScriptCall::window_end`] as a
/// number). Compute it for each try, when it is sent, with
/// [`request_window_end`](crate::request_window_end)`(server_now_ms,
/// timeout)`: the server's clock now as the store estimates it (a reading
/// of its `TIME` plus the time since on a monotonic clock, never this
/// machine's wall clock) and the time this try waits for its reply. A
/// copy that reaches the server later (held in a frozen server's buffer,
/// delayed by the network, sent again) writes nothing and replies
/// `ERR late request: ...`, which the operations read as a failed round
/// trip. So a store:
/// - waits for a reply no longer than the `timeout` the window was made
///   with, then answers `Err` (a connection error);
/// - takes an `ERR late request` reply that came back in time as a sign
///   that its estimate of the server's clock is off, and reads `TIME`
///   again before the next call;
/// - passes `0` (no window) only if no copy of a request can ever be
///   delayed (an in-process store), since that gives the guarantee up.
///
/// ## Resends ([`Resend`])
/// At most two tries per call, each with a window of its own:
/// [`Resend::Harmless`] may be sent again after a connection the server
/// had closed (it may have run once already), [`Resend::IfUnsent`] only
/// when the request provably never left (the write to the socket failed).
/// The records that make a second copy harmless are kept for two tries'
/// windows; a third try could outlive them.
///
/// ## Replicas ([`Effect`])
/// A store without replicas ignores it. One that waits for replicas after
/// a write (`WAIT`) does so only when [`Effect::changed`] says the reply
/// reports a change; an [`Effect::Acquire`] that too few replicas confirm
/// is given back with its `undo` call before the store fails it or tries
/// again.
///
/// ## Never wait for a lock; the caller's bound
/// Every method may block for one round trip (and one resend), never
/// longer: waiting for a lock, retrying and renewing are done above this
/// trait. A bounded call (`try_lock_for`, `acquire_for`, ...) bounds its
/// round trips too: cap each wait (a reply, a connection's opening) with
/// [`round_trip_timeout`](crate::round_trip_timeout), and call
/// [`note_round_trip_timeout`](crate::note_round_trip_timeout) when one
/// timed out, so the caller tells its wait running out from the store
/// failing.
///
/// ## [`response_timeout`](Self::response_timeout)
/// `Some(t)` when a try waits at most `t` for its reply (say so: the
/// default, `None`, is for a store that answers at once or fails). It
/// sizes what the late-command guarantee rests on: unlock latches,
/// attempt and op records are kept at least two windows of `t` (plus a
/// slack), so that they outlive every copy of their request; and an
/// unlock keeps its in-line tries within `t` plus 300 ms.
///
/// ## Pub/sub
/// [`with_pubsub`](Self::with_pubsub) lends one dedicated connection to
/// one thread for a session. [`PubSubConnection::subscribe`] returns only
/// once every channel is confirmed, so that a message published after it
/// (by [`publish`](Self::publish) or by a script, from any client of the
/// store) is delivered; a channel's messages arrive in publish order;
/// [`PubSubConnection::next_message`] waits at most its timeout. A lost
/// connection is an `Err`: the subscriber opens a new session and
/// resubscribes, and every parked waiter retries, so a message lost on the
/// way costs a retry, never a hang.
///
/// ## Wrapping another store
/// A store that wraps another forwards every method, the provided ones
/// too ([`slot_of`](Self::slot_of), [`response_timeout`](Self::response_timeout),
/// [`server_now_ms`](Self::server_now_ms), [`server_command`](Self::server_command)):
/// left out, the default answers, and a client on the wrapper behaves
/// unlike one on the store (records kept too briefly, handoffs never
/// dated, waiters queued on a cluster).
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
