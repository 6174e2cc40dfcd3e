//! The seam between the primitives and the store: [`LockBackend`].
//!
//! A backend knows nothing about threads, guards, watchdogs or waiting: each
//! method is one atomic operation (on Redis, one Lua script from `lua/`), so
//! [`RedisBackend`] and [`MemoryBackend`] cannot diverge in anything but those
//! operations. The primitives (`Lock`, ...) hold all blocking, retry and
//! renewal logic once, above this trait.
//!
//! # Schema (Redisson 3.x wire format)
//!
//! | object | key | type | contents | TTL | channel | messages |
//! |---|---|---|---|---|---|---|
//! | reentrant lock | `name` | hash | field `<client uuid>:<thread>` = hold count | the lease; reset on every acquire and renewal | `redisson_lock__channel:{name}` | `0` = unlocked |
//! | unlock latch | `redisson_unlock_latch:{name}:<request id>` | string | `0` still held, `1` released | a few seconds | | |
//!
//! Every auxiliary key and channel carries the `{name}` hash tag, so one
//! primitive's keys share a Redis Cluster slot (see `keys.rs`).

use std::time::Duration;

use crate::Result;

mod memory;
mod redis;
mod scripts;

pub use self::memory::MemoryBackend;
pub use self::redis::{RedisBackend, RedisOptions};

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

/// The atomic operations redisync needs from a store, one method each.
///
/// Object safe (`Arc<dyn LockBackend>`), `Send + Sync`. Every method may block
/// for one round trip and must not wait for a lock: waiting is done above this
/// trait. Arguments are already validated (non-empty names, positive
/// milliseconds); key and channel names are built by the caller in Redisson's
/// format, so a backend only stores and publishes them.
///
/// # Reentrant lock
/// [`lock_acquire`](Self::lock_acquire), [`lock_renew`](Self::lock_renew),
/// [`lock_release`](Self::lock_release),
/// [`lock_force_release`](Self::lock_force_release),
/// [`lock_state`](Self::lock_state).
///
/// # Pub/sub
/// [`publish`](Self::publish), [`with_pubsub`](Self::with_pubsub).
///
/// ```
/// use redisync::backend::{Acquire, LockBackend};
/// let backend = redisync::MemoryBackend::new();
/// assert_eq!(backend.lock_acquire("doc:trait", "c1:1", 30_000)?, Acquire::Acquired);
/// assert!(!backend.lock_acquire("doc:trait", "c2:1", 30_000)?.is_acquired());
/// # Ok::<(), redisync::Error>(())
/// ```
pub trait LockBackend: Send + Sync + 'static {
    /// Acquires lock `name` for `holder`, or re-enters it if `holder` already
    /// holds it (hold count + 1); either way the TTL becomes `lease_ms`.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if `name` holds another type.
    fn lock_acquire(&self, name: &str, holder: &str, lease_ms: i64) -> Result<Acquire>;

    /// Resets the TTL of `name` to `lease_ms` if `holder` still holds it.
    /// Returns `false` when the lock is no longer `holder`'s.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if `name` holds another type.
    fn lock_renew(&self, name: &str, holder: &str, lease_ms: i64) -> Result<bool>;

    /// Releases one hold of `holder` on `name`. On the last hold, deletes the
    /// lock and publishes the unlock message `0` on `channel`; otherwise resets
    /// the TTL to `lease_ms`.
    ///
    /// `latch_key` makes a retry idempotent: the outcome is stored there for
    /// `latch_ms`, and a second call with the same `latch_key` returns it
    /// without releasing again (WIRE.md's unlock latch).
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if `name` holds another type.
    fn lock_release(
        &self,
        name: &str,
        channel: &str,
        holder: &str,
        lease_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release>;

    /// Deletes lock `name` whoever holds it and, if it existed, publishes the
    /// unlock message on `channel`. Returns whether it existed.
    ///
    /// # Errors
    /// A backend failure.
    fn lock_force_release(&self, name: &str, channel: &str) -> Result<bool>;

    /// Reads whether `name` is locked, `holder`'s hold count and the TTL.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if `name` holds another type.
    fn lock_state(&self, name: &str, holder: &str) -> Result<LockState>;

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
}
