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

#[cfg(feature = "cluster")]
mod cluster;
#[cfg(feature = "cluster")]
mod cluster_routing;
mod memory;
mod redis;
mod replication;
mod scripts;
#[cfg(feature = "sentinel")]
mod sentinel;
mod tls;

pub use self::memory::MemoryBackend;
pub use self::redis::{RedisBackend, RedisOptions};
pub use self::replication::{ReplicaAcknowledgement, ReplicaShortfall};
#[cfg(feature = "sentinel")]
pub use self::sentinel::SentinelConfig;

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
/// # Fair lock
/// [`fair_lock_acquire`](Self::fair_lock_acquire),
/// [`fair_lock_release`](Self::fair_lock_release),
/// [`fair_lock_cancel`](Self::fair_lock_cancel),
/// [`fair_lock_force_release`](Self::fair_lock_force_release); renewal and
/// state are the reentrant lock's ([`lock_renew`](Self::lock_renew),
/// [`lock_state`](Self::lock_state)): the hash is the same.
///
/// # Read-write lock
/// [`read_lock_acquire`](Self::read_lock_acquire),
/// [`write_lock_acquire`](Self::write_lock_acquire),
/// [`read_lock_release`](Self::read_lock_release),
/// [`write_lock_release`](Self::write_lock_release),
/// [`read_lock_renew`](Self::read_lock_renew) (the write half renews with
/// [`lock_renew`](Self::lock_renew) on its `:write` field),
/// [`rw_lock_force_release`](Self::rw_lock_force_release),
/// [`rw_lock_state`](Self::rw_lock_state).
///
/// # Semaphore and count-down latch
/// Both keep an integer in a string:
/// [`counter_set_if_absent`](Self::counter_set_if_absent),
/// [`counter_get`](Self::counter_get); the semaphore adds
/// [`semaphore_add`](Self::semaphore_add),
/// [`semaphore_try_acquire`](Self::semaphore_try_acquire),
/// [`semaphore_drain`](Self::semaphore_drain); the latch adds
/// [`latch_count_down`](Self::latch_count_down),
/// [`latch_delete`](Self::latch_delete).
///
/// # Permit-expirable semaphore
/// [`expirable_acquire`](Self::expirable_acquire),
/// [`expirable_release`](Self::expirable_release),
/// [`expirable_available`](Self::expirable_available); setting and adding
/// permits use the semaphore's methods (the count is the same string).
///
/// # Pub/sub
/// [`publish`](Self::publish), [`with_pubsub`](Self::with_pubsub).
///
/// # Argument ranges
/// Durations (`lease_ms`, `latch_ms`, `wait_ms`) are 1 ms to
/// [`MAX_LEASE`](crate::MAX_LEASE) (2^47 ms); clock readings and lease ends
/// (`now_ms`, `lease_end_ms`) are 0 to 2^48 ms since the epoch; permits
/// taken are at least 1. The clients never pass anything else. A backend
/// must refuse other values without changing anything: the scripts reply
/// with an error before their first write, and [`MemoryBackend`]
/// returns `InvalidArgument`.
///
/// ```
/// use redisync::backend::{Acquire, LockBackend};
/// let backend = redisync::MemoryBackend::new();
/// assert_eq!(backend.lock_acquire("doc:trait", "c1:1", 30_000)?, Acquire::Acquired);
/// assert!(!backend.lock_acquire("doc:trait", "c2:1", 30_000)?.is_acquired());
/// assert!(backend.lock_acquire("doc:trait", "c3:1", 0).unwrap_err().is_invalid_argument());
/// # Ok::<(), redisync::Error>(())
/// ```
pub trait LockBackend: Send + Sync + 'static {
    /// Acquires lock `name` for `holder`, or re-enters it if `holder` already
    /// holds it (hold count + 1); either way the TTL becomes `lease_ms`.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if `name` holds another type.
    fn lock_acquire(&self, name: &str, holder: &str, lease_ms: i64) -> Result<Acquire>;

    /// As [`lock_acquire`](Self::lock_acquire), and on success increments
    /// the fencing-token counter `token_key` (never expiring) and returns its
    /// new value: every acquisition, reentry included, takes a new token.
    ///
    /// # Errors
    /// As [`lock_acquire`](Self::lock_acquire); `Protocol` if `token_key`
    /// does not hold a positive integer.
    fn fenced_lock_acquire(
        &self,
        name: &str,
        token_key: &str,
        holder: &str,
        lease_ms: i64,
    ) -> Result<FencedAcquire>;

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

    /// Acquires or re-enters fair lock `keys.name` for `holder`, in queue
    /// order: the lock is granted only when it is free and the queue is empty
    /// or `holder` is at its head. Waiters whose slot deadline is before
    /// `now_ms` are evicted first. If it cannot be granted and `enqueue` is
    /// true, `holder` joins the tail with a slot lasting `wait_ms` past the
    /// slot ahead. `Held { ttl }` is how long to wait before trying again.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if a key holds another type.
    fn fair_lock_acquire(
        &self,
        keys: &FairLockKeys<'_>,
        holder: &str,
        lease_ms: i64,
        wait_ms: i64,
        now_ms: i64,
        enqueue: bool,
    ) -> Result<Acquire>;

    /// Releases one hold of `holder`; on the last one deletes the lock and
    /// publishes `0` on the head waiter's channel
    /// (`<keys.channel_prefix>:<waiter id>`). A lock that no longer exists
    /// counts as released (Redisson's behaviour). `latch_key`/`latch_ms` as in
    /// [`lock_release`](Self::lock_release).
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if a key holds another type.
    fn fair_lock_release(
        &self,
        keys: &FairLockKeys<'_>,
        holder: &str,
        lease_ms: i64,
        now_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release>;

    /// Removes `holder` from the queue (a waiter that gave up); the slots of
    /// the waiters behind it move up by `wait_ms`.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if a key holds another type.
    fn fair_lock_cancel(&self, keys: &FairLockKeys<'_>, holder: &str, wait_ms: i64) -> Result<()>;

    /// Deletes the fair lock whoever holds it and tells the head waiter.
    /// Returns whether it existed.
    ///
    /// # Errors
    /// A backend failure.
    fn fair_lock_force_release(&self, keys: &FairLockKeys<'_>, now_ms: i64) -> Result<bool>;

    /// Acquires or re-enters the read half for `keys.holder`: granted when the
    /// lock is free, in read mode, or write-held by the same holder. Each read
    /// hold n gets its own key `<keys.timeout_prefix>:<n>` expiring after
    /// `lease_ms`; the hash lives as long as its longest hold.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if the key holds another type.
    fn read_lock_acquire(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<Acquire>;

    /// Acquires or re-enters the write half for `keys.holder` (field
    /// `keys.write_field`). Re-entry adds `lease_ms` to the remaining TTL.
    ///
    /// # Errors
    /// `InvalidArgument` when the holder holds the read half (read to write
    /// would wait for itself); a backend failure; `Protocol` on a wrong type.
    fn write_lock_acquire(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<Acquire>;

    /// Releases one read hold of `keys.holder`. `Released` when the lock is
    /// now free (and `0` was published on `keys.channel`), `StillHeld` when
    /// other holds remain.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if the key holds another type.
    fn read_lock_release(
        &self,
        keys: &RwLockKeys<'_>,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release>;

    /// Releases one write hold of `keys.holder`. On the last one the lock is
    /// deleted (or, if the holder also reads, left in read mode) and `1`
    /// (read-unlock: wakes every waiter) is published on `keys.channel`.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if the key holds another type.
    fn write_lock_release(
        &self,
        keys: &RwLockKeys<'_>,
        lease_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release>;

    /// Renews `keys.holder`'s read holds (its own timeout keys only, so a
    /// dead reader's holds still expire) and the hash. `false` when the
    /// holder holds no read hold any more.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if the key holds another type.
    fn read_lock_renew(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<bool>;

    /// Deletes the lock if it is held in `mode` and publishes that half's
    /// message (`0` for read, `1` for write). Returns whether it was.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if the key holds another type.
    fn rw_lock_force_release(&self, keys: &RwLockKeys<'_>, mode: RwMode) -> Result<bool>;

    /// Reads the lock's mode, the hold count of `field` and the TTL.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if the key holds another type.
    fn rw_lock_state(&self, name: &str, field: &str) -> Result<RwLockState>;

    /// Sets counter `name` to `value` only if it is absent, and then
    /// publishes `message` on `channel`. Returns whether it was set.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if the key holds another type.
    fn counter_set_if_absent(
        &self,
        name: &str,
        channel: &str,
        value: i64,
        message: &str,
    ) -> Result<bool>;

    /// Reads counter `name` (0 when absent).
    ///
    /// # Errors
    /// A backend failure, or `Protocol` if the key holds another type or a
    /// non-integer.
    fn counter_get(&self, name: &str) -> Result<i64>;

    /// Adds `delta` (may be negative) to semaphore `name`; when `delta` is
    /// positive, publishes the new count on `channel`. Returns the new count.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` on a wrong type or an overflow.
    fn semaphore_add(&self, name: &str, channel: &str, delta: i64) -> Result<i64>;

    /// Takes `permits` (positive) from semaphore `name` if that many are
    /// available. Returns whether it did.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` on a wrong type.
    fn semaphore_try_acquire(&self, name: &str, permits: i64) -> Result<bool>;

    /// Takes every available permit of semaphore `name`; returns how many.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` on a wrong type.
    fn semaphore_drain(&self, name: &str) -> Result<i64>;

    /// Reclaims expired leases, then takes one permit as `permit_id` with a
    /// lease ending at `lease_end_ms`. `Held { ttl }`: none available; `ttl`
    /// is the time until the earliest lease ends.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` on a wrong type.
    fn expirable_acquire(
        &self,
        keys: &ExpirableKeys<'_>,
        permit_id: &str,
        lease_end_ms: i64,
        now_ms: i64,
    ) -> Result<Acquire>;

    /// Returns permit `permit_id` to the pool and publishes the new count.
    /// `false` when the permit is unknown or its lease had run out (it is
    /// then reclaimed, not released).
    ///
    /// # Errors
    /// A backend failure, or `Protocol` on a wrong type.
    fn expirable_release(
        &self,
        keys: &ExpirableKeys<'_>,
        permit_id: &str,
        now_ms: i64,
    ) -> Result<bool>;

    /// Reclaims expired leases and returns the available permits.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` on a wrong type.
    fn expirable_available(&self, keys: &ExpirableKeys<'_>, now_ms: i64) -> Result<i64>;

    /// Counts latch `name` down by one; at zero or below deletes it, and at
    /// exactly zero publishes `0` on `channel`. Returns the new count.
    ///
    /// # Errors
    /// A backend failure, or `Protocol` on a wrong type.
    fn latch_count_down(&self, name: &str, channel: &str) -> Result<i64>;

    /// Deletes latch `name`; if it existed publishes `1` (new count) on
    /// `channel` and returns `true`.
    ///
    /// # Errors
    /// A backend failure.
    fn latch_delete(&self, name: &str, channel: &str) -> Result<bool>;

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
