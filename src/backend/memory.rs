//! [`MemoryBackend`]: an in-process [`LockBackend`] with the semantics of the
//! Redis scripts.
//!
//! Every method does, atomically under one mutex, exactly what the matching
//! Lua script does on Redis (Redisson's `RLock` scripts): the same hash of
//! hold counts per holder, the same TTL resets, the same unlock latch and the
//! same unlock message. Two `Client`s sharing one `MemoryBackend` (clones share
//! state) therefore behave like two processes sharing one Redis server, which
//! makes it the backend for tests, examples and single-process use.
//!
//! - **Real clock.** TTLs are measured with [`std::time::Instant`]; a lease of
//!   50 ms really ends 50 ms later.
//! - **Lazy expiry.** There is no background thread: an expired key is treated
//!   as absent by every access and removed when it is next touched.
//! - **Pub/sub fan-out.** [`publish`](LockBackend::publish) (and the unlock
//!   message of a release) is delivered to every open
//!   [`with_pubsub`](LockBackend::with_pubsub) connection subscribed to the
//!   channel, fire and forget like Redis `PUBLISH`. Subscribing is confirmed
//!   immediately.
//! - **Test hooks.** [`MemoryBackend::kill_pubsub_connections`] drops every
//!   open pub/sub connection (like `CLIENT KILL TYPE pubsub`) and
//!   [`MemoryBackend::set_string`] stores a plain string (like `SET`), so tests
//!   can provoke reconnects and `WRONGTYPE` errors.
//!
//! ```
//! use redisync::backend::{Acquire, LockBackend, Release};
//! let backend = redisync::MemoryBackend::new();
//! let other_process = backend.clone();
//! assert_eq!(backend.lock_acquire("doc:memory", "c1:1", 30_000)?, Acquire::Acquired);
//! assert!(!other_process.lock_acquire("doc:memory", "c2:1", 30_000)?.is_acquired());
//! let released = backend.lock_release(
//!     "doc:memory",
//!     "redisson_lock__channel:{doc:memory}",
//!     "c1:1",
//!     30_000,
//!     "redisson_unlock_latch:{doc:memory}:r1",
//!     5_000,
//! )?;
//! assert_eq!(released, Release::Released);
//! assert!(other_process.lock_acquire("doc:memory", "c2:1", 30_000)?.is_acquired());
//! # Ok::<(), redisync::Error>(())
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;

use super::{Acquire, LockBackend, LockState, Message, PubSubConnection, Release};
use crate::{Error, Result};

/// The unlock message published when a lock is deleted.
const UNLOCK_MESSAGE: &str = "0";

/// An in-process [`LockBackend`] with exactly the semantics of the Redis
/// scripts, so two `Client`s sharing one `MemoryBackend` behave like two
/// processes sharing one Redis server.
///
/// A cheap handle: clones share one keyspace and one set of pub/sub
/// connections, like clients of one Redis server.
///
/// - TTLs run on the real clock ([`std::time::Instant`]).
/// - Expiry is lazy: there is no background thread; an expired key is treated
///   as absent by every access and removed when next touched.
/// - Published messages (including the unlock message of a release) fan out
///   to every open [`with_pubsub`](LockBackend::with_pubsub) connection
///   subscribed to the channel, fire and forget like Redis `PUBLISH`.
/// - Two test hooks: [`kill_pubsub_connections`](Self::kill_pubsub_connections)
///   (like `CLIENT KILL TYPE pubsub`) and [`set_string`](Self::set_string)
///   (like `SET`, to provoke `WRONGTYPE`).
///
/// ```
/// use redisync::backend::{Acquire, LockBackend};
/// let backend = redisync::MemoryBackend::new();
/// let shared = backend.clone();
/// assert_eq!(backend.lock_acquire("doc:backend", "c1:1", 30_000)?, Acquire::Acquired);
/// assert_eq!(shared.len(), 1);
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

/// The shared state behind every clone of a [`MemoryBackend`].
///
/// Lock order: `keys` before `subscribers`, never the other way round.
#[derive(Default)]
struct Inner {
    keys: Mutex<HashMap<String, Entry>>,
    subscribers: Mutex<Subscribers>,
}

/// One key of the keyspace.
struct Entry {
    value: Value,
    /// `None`: no expiry (`PTTL` = -1).
    expires_at: Option<Instant>,
}

/// The Redis types the scripts use.
enum Value {
    /// A hash of integer fields (a lock: holder -> hold count).
    Hash(HashMap<String, i64>),
    /// A plain string (an unlock latch, or a test's [`MemoryBackend::set_string`]).
    Str(String),
}

/// The registry of open pub/sub connections.
#[derive(Default)]
struct Subscribers {
    next_id: u64,
    connections: HashMap<u64, Subscriber>,
}

/// The backend's side of one open pub/sub connection.
struct Subscriber {
    channels: HashSet<String>,
    sender: Sender<Message>,
    killed: Arc<AtomicBool>,
}

impl Entry {
    fn is_expired(&self, now: Instant) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }

    /// The remaining time to live (`PTTL`); `None` when there is no expiry.
    fn ttl(&self, now: Instant) -> Option<Duration> {
        self.expires_at.map(|at| at.saturating_duration_since(now))
    }
}

/// `now + ms`; `None` (no expiry) if the instant would overflow.
fn deadline(now: Instant, ms: i64) -> Option<Instant> {
    now.checked_add(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// Redis' reply to a command against a key of another type.
fn wrong_type(key: &str) -> Error {
    Error::protocol(format!(
        "WRONGTYPE Operation against a key holding the wrong kind of value (key {key:?})"
    ))
}

/// Removes `key` if it has expired, so that afterwards a present key is live.
fn purge(keys: &mut HashMap<String, Entry>, key: &str, now: Instant) {
    if keys.get(key).is_some_and(|entry| entry.is_expired(now)) {
        keys.remove(key);
    }
}

/// The live lock hash at `name`: `Ok(None)` if absent, `WRONGTYPE` if `name`
/// holds a string.
fn lock_hash<'a>(
    keys: &'a mut HashMap<String, Entry>,
    name: &str,
    now: Instant,
) -> Result<Option<&'a mut Entry>> {
    purge(keys, name, now);
    match keys.get_mut(name) {
        None => Ok(None),
        Some(entry) => match entry.value {
            Value::Hash(_) => Ok(Some(entry)),
            Value::Str(_) => Err(wrong_type(name)),
        },
    }
}

/// The holder's field in a lock entry (which [`lock_hash`] checked is a hash).
fn field<'a>(entry: &'a mut Entry, holder: &str) -> Option<&'a mut i64> {
    match &mut entry.value {
        Value::Hash(fields) => fields.get_mut(holder),
        Value::Str(_) => None,
    }
}

/// `SET key value PX ms`.
fn set_latch(keys: &mut HashMap<String, Entry>, key: &str, value: &str, now: Instant, ms: i64) {
    keys.insert(
        key.to_owned(),
        Entry {
            value: Value::Str(value.to_owned()),
            expires_at: deadline(now, ms),
        },
    );
}

impl Subscribers {
    /// Delivers `payload` to every live connection subscribed to `channel`;
    /// returns how many received it (Redis' `PUBLISH` reply).
    fn publish(&self, channel: &str, payload: &str) -> usize {
        let mut delivered = 0;
        for subscriber in self.connections.values() {
            if subscriber.channels.contains(channel) && !subscriber.killed.load(Ordering::SeqCst) {
                // Unbounded: never blocks. Fails only if the receiver is gone,
                // which is fire and forget like Redis.
                if subscriber
                    .sender
                    .send(Message::new(channel, payload))
                    .is_ok()
                {
                    delivered += 1;
                }
            }
        }
        delivered
    }
}

impl MemoryBackend {
    /// An empty keyspace with no pub/sub connections.
    ///
    /// ```
    /// let backend = redisync::MemoryBackend::new();
    /// assert!(backend.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of live (unexpired) keys: locks and unlock latches alike.
    ///
    /// ```
    /// use redisync::backend::LockBackend;
    /// let backend = redisync::MemoryBackend::new();
    /// backend.lock_acquire("doc:len", "c1:1", 30_000)?;
    /// assert_eq!(backend.len(), 1);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        let now = Instant::now();
        let mut keys = self.inner.keys.lock();
        keys.retain(|_, entry| !entry.is_expired(now));
        keys.len()
    }

    /// True when no live key is stored.
    ///
    /// ```
    /// use redisync::backend::LockBackend;
    /// let backend = redisync::MemoryBackend::new();
    /// assert!(backend.is_empty());
    /// backend.lock_acquire("doc:is_empty", "c1:1", 30_000)?;
    /// assert!(!backend.is_empty());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// **Test hook**, like Redis `CLIENT KILL TYPE pubsub`: every open pub/sub
    /// connection fails its next [`next_message`](PubSubConnection::next_message)
    /// (and one that is blocked right now) with a connection error, and
    /// messages published afterwards are not delivered to it. Connections
    /// opened later are unaffected.
    ///
    /// ```
    /// use redisync::backend::LockBackend;
    /// use std::time::Duration;
    /// let backend = redisync::MemoryBackend::new();
    /// let admin = backend.clone();
    /// backend.with_pubsub(&mut |conn| {
    ///     conn.subscribe(&["doc:kill".to_string()])?;
    ///     admin.kill_pubsub_connections();
    ///     let err = conn.next_message(Duration::from_secs(5)).unwrap_err();
    ///     assert!(err.is_connection_error());
    ///     Ok(())
    /// })?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn kill_pubsub_connections(&self) {
        let mut subscribers = self.inner.subscribers.lock();
        // Dropping the senders wakes every blocked receiver with
        // `Disconnected`; the flag fails the next call even if messages are
        // still queued.
        for (_, subscriber) in subscribers.connections.drain() {
            subscriber.killed.store(true, Ordering::SeqCst);
        }
    }

    /// **Test hook**, like Redis `SET key value`: stores a plain string with no
    /// expiry, replacing whatever `key` held. Lock operations on it then fail
    /// with a `WRONGTYPE` protocol error.
    ///
    /// ```
    /// use redisync::backend::LockBackend;
    /// let backend = redisync::MemoryBackend::new();
    /// backend.set_string("doc:string", "hello");
    /// let err = backend.lock_acquire("doc:string", "c1:1", 30_000).unwrap_err();
    /// assert!(err.is_protocol_error());
    /// assert!(err.to_string().contains("WRONGTYPE"));
    /// ```
    pub fn set_string(&self, key: &str, value: &str) {
        self.inner.keys.lock().insert(
            key.to_owned(),
            Entry {
                value: Value::Str(value.to_owned()),
                expires_at: None,
            },
        );
    }

    /// Publishes while the caller holds the keyspace lock, so the message is
    /// atomic with the script's writes, as on Redis.
    fn publish_locked(&self, channel: &str, payload: &str) {
        self.inner.subscribers.lock().publish(channel, payload);
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let now = Instant::now();
        let keys = self
            .inner
            .keys
            .lock()
            .values()
            .filter(|entry| !entry.is_expired(now))
            .count();
        let connections = self.inner.subscribers.lock().connections.len();
        f.debug_struct("MemoryBackend")
            .field("keys", &keys)
            .field("pubsub_connections", &connections)
            .finish()
    }
}

impl LockBackend for MemoryBackend {
    fn lock_acquire(&self, name: &str, holder: &str, lease_ms: i64) -> Result<Acquire> {
        let now = Instant::now();
        let mut keys = self.inner.keys.lock();
        if lock_hash(&mut keys, name, now)?.is_none() {
            keys.insert(
                name.to_owned(),
                Entry {
                    value: Value::Hash(HashMap::new()),
                    expires_at: None,
                },
            );
        }
        let Some(entry) = keys.get_mut(name) else {
            return Err(Error::protocol(format!("lock {name:?} vanished")));
        };
        let Value::Hash(fields) = &mut entry.value else {
            return Err(wrong_type(name));
        };
        // A new key is an empty hash here; Redis never keeps one, so an empty
        // hash means "absent".
        if !fields.is_empty() && !fields.contains_key(holder) {
            return Ok(Acquire::Held {
                ttl: entry.ttl(now),
            });
        }
        let count = fields.entry(holder.to_owned()).or_insert(0);
        *count = count.checked_add(1).ok_or_else(|| {
            Error::protocol(format!("hold count of lock {name:?} would overflow"))
        })?;
        entry.expires_at = deadline(now, lease_ms);
        Ok(Acquire::Acquired)
    }

    fn lock_renew(&self, name: &str, holder: &str, lease_ms: i64) -> Result<bool> {
        let now = Instant::now();
        let mut keys = self.inner.keys.lock();
        let Some(entry) = lock_hash(&mut keys, name, now)? else {
            return Ok(false);
        };
        if field(entry, holder).is_none() {
            return Ok(false);
        }
        entry.expires_at = deadline(now, lease_ms);
        Ok(true)
    }

    fn lock_release(
        &self,
        name: &str,
        channel: &str,
        holder: &str,
        lease_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release> {
        let now = Instant::now();
        let mut keys = self.inner.keys.lock();

        // A retry of a release that already ran returns the stored outcome.
        purge(&mut keys, latch_key, now);
        if let Some(latch) = keys.get(latch_key) {
            return match &latch.value {
                Value::Str(outcome) if outcome == "0" => Ok(Release::StillHeld),
                Value::Str(outcome) if outcome == "1" => Ok(Release::Released),
                Value::Str(outcome) => Err(Error::protocol(format!(
                    "unlock latch {latch_key:?} holds {outcome:?}, expected \"0\" or \"1\""
                ))),
                Value::Hash(_) => Err(wrong_type(latch_key)),
            };
        }

        let Some(entry) = lock_hash(&mut keys, name, now)? else {
            return Ok(Release::NotHeld);
        };
        let Some(count) = field(entry, holder) else {
            return Ok(Release::NotHeld);
        };
        *count = count.checked_sub(1).ok_or_else(|| {
            Error::protocol(format!("hold count of lock {name:?} would overflow"))
        })?;
        if *count > 0 {
            entry.expires_at = deadline(now, lease_ms);
            set_latch(&mut keys, latch_key, "0", now, latch_ms);
            Ok(Release::StillHeld)
        } else {
            keys.remove(name);
            self.publish_locked(channel, UNLOCK_MESSAGE);
            set_latch(&mut keys, latch_key, "1", now, latch_ms);
            Ok(Release::Released)
        }
    }

    fn lock_force_release(&self, name: &str, channel: &str) -> Result<bool> {
        let now = Instant::now();
        let mut keys = self.inner.keys.lock();
        purge(&mut keys, name, now);
        // `DEL` deletes whatever the key holds.
        if keys.remove(name).is_some() {
            self.publish_locked(channel, UNLOCK_MESSAGE);
            Ok(true)
        } else {
            Ok(false)
        }
    }

    fn lock_state(&self, name: &str, holder: &str) -> Result<LockState> {
        let now = Instant::now();
        let mut keys = self.inner.keys.lock();
        let Some(entry) = lock_hash(&mut keys, name, now)? else {
            return Ok(LockState::default());
        };
        let ttl = entry.ttl(now);
        let hold_count = match field(entry, holder) {
            Some(count) => u64::try_from(*count).map_err(|_| {
                Error::protocol(format!("lock {name:?} has a negative hold count {count}"))
            })?,
            None => 0,
        };
        Ok(LockState {
            locked: true,
            hold_count,
            ttl,
        })
    }

    fn publish(&self, channel: &str, payload: &str) -> Result<()> {
        self.inner.subscribers.lock().publish(channel, payload);
        Ok(())
    }

    fn with_pubsub(
        &self,
        session: &mut dyn FnMut(&mut dyn PubSubConnection) -> Result<()>,
    ) -> Result<()> {
        let (sender, receiver) = crossbeam_channel::unbounded();
        let killed = Arc::new(AtomicBool::new(false));
        let id = {
            let mut subscribers = self.inner.subscribers.lock();
            let id = subscribers.next_id;
            subscribers.next_id = subscribers.next_id.wrapping_add(1);
            subscribers.connections.insert(
                id,
                Subscriber {
                    channels: HashSet::new(),
                    sender,
                    killed: Arc::clone(&killed),
                },
            );
            id
        };
        // Deregistered on drop, even if `session` unwinds.
        let mut conn = MemoryPubSub {
            inner: &self.inner,
            id,
            receiver,
            killed,
        };
        session(&mut conn)
    }
}

/// One open pub/sub connection of a [`MemoryBackend`], lent to a
/// [`with_pubsub`](LockBackend::with_pubsub) session.
struct MemoryPubSub<'a> {
    inner: &'a Inner,
    id: u64,
    receiver: Receiver<Message>,
    killed: Arc<AtomicBool>,
}

impl fmt::Debug for MemoryPubSub<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryPubSub")
            .field("id", &self.id)
            .field("killed", &self.killed.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl MemoryPubSub<'_> {
    fn killed_error() -> Error {
        Error::backend("memory pub/sub connection killed", true)
    }

    /// Applies `change` to this connection's channel set, or fails if the
    /// connection was killed.
    fn update_channels(&self, change: impl FnOnce(&mut HashSet<String>)) -> Result<()> {
        let mut subscribers = self.inner.subscribers.lock();
        match subscribers.connections.get_mut(&self.id) {
            Some(subscriber) if !self.killed.load(Ordering::SeqCst) => {
                change(&mut subscriber.channels);
                Ok(())
            }
            _ => Err(Self::killed_error()),
        }
    }
}

impl PubSubConnection for MemoryPubSub<'_> {
    fn subscribe(&mut self, channels: &[String]) -> Result<()> {
        self.update_channels(|set| set.extend(channels.iter().cloned()))
    }

    fn unsubscribe(&mut self, channels: &[String]) -> Result<()> {
        self.update_channels(|set| {
            for channel in channels {
                set.remove(channel);
            }
        })
    }

    fn next_message(&mut self, timeout: Duration) -> Result<Option<Message>> {
        if self.killed.load(Ordering::SeqCst) {
            return Err(Self::killed_error());
        }
        match self.receiver.recv_timeout(timeout) {
            Ok(message) => Ok(Some(message)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(Self::killed_error()),
        }
    }
}

impl Drop for MemoryPubSub<'_> {
    fn drop(&mut self) {
        self.inner.subscribers.lock().connections.remove(&self.id);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::thread;

    const LEASE: i64 = 30_000;
    const CHANNEL: &str = "redisson_lock__channel:{t}";

    fn release(backend: &MemoryBackend, name: &str, holder: &str, latch: &str) -> Release {
        backend
            .lock_release(name, CHANNEL, holder, LEASE, latch, 5_000)
            .unwrap()
    }

    fn subscribed_to(channel: &str) -> Vec<String> {
        vec![channel.to_owned()]
    }

    #[test]
    fn acquire_reenter_and_held_by_other_with_ttl() {
        let backend = MemoryBackend::new();
        assert_eq!(
            backend.lock_acquire("l", "a:1", LEASE).unwrap(),
            Acquire::Acquired
        );
        assert_eq!(
            backend.lock_acquire("l", "a:1", LEASE).unwrap(),
            Acquire::Acquired
        );
        assert_eq!(backend.lock_state("l", "a:1").unwrap().hold_count, 2);
        match backend.lock_acquire("l", "b:1", LEASE).unwrap() {
            Acquire::Held { ttl: Some(ttl) } => {
                assert!(ttl <= Duration::from_millis(30_000));
                assert!(ttl > Duration::from_millis(29_000));
            }
            other => panic!("expected Held with a ttl, got {other:?}"),
        }
        assert_eq!(backend.lock_state("l", "b:1").unwrap().hold_count, 0);
    }

    #[test]
    fn lease_expiry_frees_the_key() {
        let backend = MemoryBackend::new();
        assert!(backend.lock_acquire("l", "a:1", 40).unwrap().is_acquired());
        assert!(
            !backend
                .lock_acquire("l", "b:1", LEASE)
                .unwrap()
                .is_acquired()
        );
        thread::sleep(Duration::from_millis(60));
        assert!(!backend.lock_state("l", "a:1").unwrap().locked);
        assert!(backend.is_empty());
        assert!(
            backend
                .lock_acquire("l", "b:1", LEASE)
                .unwrap()
                .is_acquired()
        );
        // The expired holder's count did not survive.
        assert_eq!(backend.lock_state("l", "a:1").unwrap().hold_count, 0);
        assert_eq!(backend.lock_state("l", "b:1").unwrap().hold_count, 1);
    }

    #[test]
    fn renew_extends_only_the_holders_lease() {
        let backend = MemoryBackend::new();
        assert!(!backend.lock_renew("l", "a:1", LEASE).unwrap());
        backend.lock_acquire("l", "a:1", 40).unwrap();
        assert!(!backend.lock_renew("l", "b:1", LEASE).unwrap());
        assert!(backend.lock_renew("l", "a:1", LEASE).unwrap());
        thread::sleep(Duration::from_millis(60));
        let state = backend.lock_state("l", "a:1").unwrap();
        assert!(state.locked);
        assert!(state.ttl.unwrap() > Duration::from_millis(29_000));
        // After expiry, renewal is refused.
        backend.lock_renew("l", "a:1", 30).unwrap();
        thread::sleep(Duration::from_millis(50));
        assert!(!backend.lock_renew("l", "a:1", LEASE).unwrap());
    }

    #[test]
    fn release_not_held_still_held_released_and_publishes() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to(CHANNEL))?;
                assert_eq!(release(&other, "l", "a:1", "latch:0"), Release::NotHeld);
                other.lock_acquire("l", "a:1", LEASE)?;
                other.lock_acquire("l", "a:1", LEASE)?;
                assert_eq!(release(&other, "l", "b:1", "latch:1"), Release::NotHeld);
                assert_eq!(release(&other, "l", "a:1", "latch:2"), Release::StillHeld);
                assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
                assert_eq!(release(&other, "l", "a:1", "latch:3"), Release::Released);
                assert!(!other.lock_state("l", "a:1")?.locked);
                let msg = conn.next_message(Duration::from_secs(5))?.unwrap();
                assert_eq!(msg, Message::new(CHANNEL, "0"));
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn still_held_resets_the_ttl_to_the_lease() {
        let backend = MemoryBackend::new();
        backend.lock_acquire("l", "a:1", 40).unwrap();
        backend.lock_acquire("l", "a:1", 40).unwrap();
        assert_eq!(release(&backend, "l", "a:1", "latch"), Release::StillHeld);
        let ttl = backend.lock_state("l", "a:1").unwrap().ttl.unwrap();
        assert!(ttl > Duration::from_millis(29_000));
    }

    #[test]
    fn latch_replays_the_outcome_without_decrementing_again() {
        let backend = MemoryBackend::new();
        for _ in 0..3 {
            backend.lock_acquire("l", "a:1", LEASE).unwrap();
        }
        assert_eq!(release(&backend, "l", "a:1", "latch:x"), Release::StillHeld);
        assert_eq!(release(&backend, "l", "a:1", "latch:x"), Release::StillHeld);
        assert_eq!(backend.lock_state("l", "a:1").unwrap().hold_count, 2);
        assert_eq!(release(&backend, "l", "a:1", "latch:y"), Release::StillHeld);
        assert_eq!(release(&backend, "l", "a:1", "latch:z"), Release::Released);
        assert_eq!(release(&backend, "l", "a:1", "latch:z"), Release::Released);
        // A fresh request id sees the truth.
        assert_eq!(release(&backend, "l", "a:1", "latch:w"), Release::NotHeld);
    }

    #[test]
    fn latch_expires() {
        let backend = MemoryBackend::new();
        backend.lock_acquire("l", "a:1", LEASE).unwrap();
        let r = backend
            .lock_release("l", CHANNEL, "a:1", LEASE, "latch", 30)
            .unwrap();
        assert_eq!(r, Release::Released);
        assert_eq!(backend.len(), 1); // the latch
        thread::sleep(Duration::from_millis(50));
        assert!(backend.is_empty());
        assert_eq!(release(&backend, "l", "a:1", "latch"), Release::NotHeld);
    }

    #[test]
    fn force_release_deletes_and_publishes() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to(CHANNEL))?;
                assert!(!other.lock_force_release("l", CHANNEL)?);
                assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
                other.lock_acquire("l", "a:1", LEASE)?;
                assert!(other.lock_force_release("l", CHANNEL)?);
                assert!(!other.lock_state("l", "a:1")?.locked);
                let msg = conn.next_message(Duration::from_secs(5))?.unwrap();
                assert_eq!(msg.payload, "0");
                // A string key is deleted too, as `DEL` would.
                other.set_string("s", "x");
                assert!(other.lock_force_release("s", CHANNEL)?);
                assert!(other.is_empty());
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn wrongtype_after_set_string() {
        let backend = MemoryBackend::new();
        backend.set_string("s", "hello");
        let errors = [
            backend.lock_acquire("s", "a:1", LEASE).unwrap_err(),
            backend.lock_renew("s", "a:1", LEASE).unwrap_err(),
            backend
                .lock_release("s", CHANNEL, "a:1", LEASE, "latch", 5_000)
                .unwrap_err(),
            backend.lock_state("s", "a:1").unwrap_err(),
        ];
        for err in errors {
            assert!(err.is_protocol_error(), "{err}");
            assert!(err.to_string().contains("WRONGTYPE"), "{err}");
            assert!(err.to_string().contains("\"s\""), "{err}");
        }
        // A latch key holding a hash is a WRONGTYPE as well.
        backend.lock_acquire("h", "a:1", LEASE).unwrap();
        let err = backend
            .lock_release("x", CHANNEL, "a:1", LEASE, "h", 5_000)
            .unwrap_err();
        assert!(err.is_protocol_error());
        // set_string replaces a lock.
        backend.set_string("h", "x");
        assert!(backend.lock_acquire("h", "a:1", LEASE).is_err());
    }

    #[test]
    fn kill_fails_next_message_and_stops_delivery() {
        let backend = MemoryBackend::new();
        let admin = backend.clone();
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to("c"))?;
                admin.publish("c", "before")?;
                admin.kill_pubsub_connections();
                admin.publish("c", "after")?;
                let err = conn.next_message(Duration::from_secs(5)).unwrap_err();
                assert!(err.is_connection_error());
                assert!(conn.next_message(Duration::from_secs(5)).is_err());
                assert!(conn.subscribe(&subscribed_to("d")).is_err());
                Ok(())
            })
            .unwrap();
        // A new connection works.
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to("c"))?;
                admin.publish("c", "1")?;
                assert_eq!(
                    conn.next_message(Duration::from_secs(5))?.unwrap().payload,
                    "1"
                );
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn kill_wakes_a_blocked_next_message() {
        let backend = MemoryBackend::new();
        let admin = backend.clone();
        let killer = thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            admin.kill_pubsub_connections();
        });
        let start = Instant::now();
        let result = backend.with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to("c"))?;
            conn.next_message(Duration::from_secs(30))?;
            Ok(())
        });
        killer.join().unwrap();
        assert!(result.unwrap_err().is_connection_error());
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn pubsub_fan_out_unsubscribe_and_deregistration() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        backend
            .with_pubsub(&mut |a| {
                other.with_pubsub(&mut |b| {
                    a.subscribe(&subscribed_to("c"))?;
                    b.subscribe(&["c".to_owned(), "d".to_owned()])?;
                    other.publish("c", "x")?;
                    assert_eq!(
                        a.next_message(Duration::from_secs(5))?.unwrap().payload,
                        "x"
                    );
                    assert_eq!(
                        b.next_message(Duration::from_secs(5))?.unwrap().payload,
                        "x"
                    );
                    other.publish("d", "y")?;
                    assert_eq!(a.next_message(Duration::from_millis(20))?, None);
                    assert_eq!(
                        b.next_message(Duration::from_secs(5))?.unwrap().channel,
                        "d"
                    );
                    b.unsubscribe(&subscribed_to("c"))?;
                    other.publish("c", "z")?;
                    assert_eq!(b.next_message(Duration::from_millis(20))?, None);
                    assert_eq!(
                        a.next_message(Duration::from_secs(5))?.unwrap().payload,
                        "z"
                    );
                    Ok(())
                })
            })
            .unwrap();
        assert_eq!(backend.inner.subscribers.lock().connections.len(), 0);
        // A session's error is returned and the connection still deregistered.
        let err = backend
            .with_pubsub(&mut |_| Err(Error::backend("boom", false)))
            .unwrap_err();
        assert_eq!(err.to_string(), "boom");
        assert_eq!(backend.inner.subscribers.lock().connections.len(), 0);
    }

    #[test]
    fn lock_state_values() {
        let backend = MemoryBackend::new();
        assert_eq!(
            backend.lock_state("l", "a:1").unwrap(),
            LockState::default()
        );
        backend.lock_acquire("l", "a:1", LEASE).unwrap();
        backend.lock_acquire("l", "a:1", LEASE).unwrap();
        let mine = backend.lock_state("l", "a:1").unwrap();
        assert!(mine.locked);
        assert_eq!(mine.hold_count, 2);
        assert!(mine.ttl.unwrap() > Duration::from_millis(29_000));
        let theirs = backend.lock_state("l", "b:1").unwrap();
        assert!(theirs.locked);
        assert_eq!(theirs.hold_count, 0);
        assert!(theirs.ttl.is_some());
    }

    #[test]
    fn debug_shows_counts_not_contents() {
        let backend = MemoryBackend::new();
        backend.lock_acquire("secret-name", "a:1", LEASE).unwrap();
        let debug = format!("{backend:?}");
        assert_eq!(debug, "MemoryBackend { keys: 1, pubsub_connections: 0 }");
    }

    #[test]
    fn hold_count_overflow_is_a_protocol_error() {
        let backend = MemoryBackend::new();
        backend.lock_acquire("l", "a:1", LEASE).unwrap();
        if let Some(Entry {
            value: Value::Hash(fields),
            ..
        }) = backend.inner.keys.lock().get_mut("l")
        {
            fields.insert("a:1".to_owned(), i64::MAX);
        }
        assert!(
            backend
                .lock_acquire("l", "a:1", LEASE)
                .unwrap_err()
                .is_protocol_error()
        );
    }

    #[test]
    fn huge_lease_means_no_expiry_instead_of_overflow() {
        let backend = MemoryBackend::new();
        assert!(
            backend
                .lock_acquire("l", "a:1", i64::MAX)
                .unwrap()
                .is_acquired()
        );
        assert!(backend.lock_state("l", "a:1").unwrap().locked);
    }
}
