//! [`MemoryBackend`]: an in-process [`LockBackend`] with the semantics of the
//! Redis scripts.
//!
//! Every method does, atomically under one mutex, exactly what the matching
//! Lua script in `lua/` does on Redis (Redisson's `RLock`, `RFairLock`,
//! `RReadWriteLock`, `RSemaphore`, `RPermitExpirableSemaphore` and
//! `RCountDownLatch` scripts), ported statement by statement over a small set
//! of Redis commands (`Db`): the same hashes, queues, slot sets, read-hold
//! keys, counters and lease sets, the same TTL resets, the same unlock latch
//! and the same messages. Two `Client`s sharing one `MemoryBackend` (clones share
//! state) therefore behave like two processes sharing one Redis server, which
//! makes it the backend for tests, examples and single-process use.
//!
//! - **Real clock.** TTLs are measured with [`std::time::Instant`]; a lease of
//!   50 ms really ends 50 ms later.
//! - **Active expiry.** An expired key is treated as absent by every access,
//!   and every operation first drops all keys whose TTL has run out (an
//!   index by deadline makes that cost O(expired), like Redis' active
//!   expiry), so unlock latches and lapsed leases do not pile up in a
//!   long-running process. A store nobody calls is swept too, every 0.5 s,
//!   by one thread shared by all stores of the process (it ends when the
//!   last store is dropped).
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
//! assert_eq!(redisync::ops::lock::acquire(&backend, "doc:memory", "c1:1", 30_000)?, Acquire::Acquired);
//! assert!(!redisync::ops::lock::acquire(&other_process, "doc:memory", "c2:1", 30_000)?.is_acquired());
//! let released = redisync::ops::lock::release(&backend,
//!     "doc:memory",
//!     "redisson_lock__channel:{doc:memory}",
//!     "c1:1",
//!     30_000,
//!     "redisson_unlock_latch:{doc:memory}:r1",
//!     5_000,
//! )?;
//! assert_eq!(released, Release::Released);
//! assert!(redisync::ops::lock::acquire(&other_process, "doc:memory", "c2:1", 30_000)?.is_acquired());
//! # Ok::<(), redisync::Error>(())
//! ```

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;

use super::{
    Acquire, ExpirableKeys, FairLockKeys, FencedAcquire, LockBackend, LockState, Message,
    PubSubConnection, Release, Reply, RwLockKeys, RwLockState, RwMode, ScriptCall,
};
use crate::error::{MAX_LEASE_MS, check_ms, check_time_ms};
use crate::keys::{
    LATCH_NEW_COUNT_MESSAGE, LATCH_ZERO_MESSAGE, READ_UNLOCK_MESSAGE, UNLOCK_MESSAGE,
};
use crate::{Error, Result};

/// An in-process [`LockBackend`] with exactly the semantics of the Redis
/// scripts, so two `Client`s sharing one `MemoryBackend` behave like two
/// processes sharing one Redis server.
///
/// A cheap handle: clones share one keyspace and one set of pub/sub
/// connections, like clients of one Redis server.
///
/// - TTLs run on the real clock ([`std::time::Instant`]).
/// - Expired keys are absent to every access and dropped by the next
///   operation, touched or not, or within 0.5 s by a sweeper thread shared
///   by every store of the process when nobody calls.
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
/// assert_eq!(redisync::ops::lock::acquire(&backend, "doc:backend", "c1:1", 30_000)?, Acquire::Acquired);
/// assert_eq!(shared.len(), 1);
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

impl Default for MemoryBackend {
    /// As [`MemoryBackend::new`].
    ///
    /// ```
    /// assert!(redisync::MemoryBackend::default().is_empty());
    /// ```
    fn default() -> Self {
        Self::new()
    }
}

/// How often the sweeper thread drops the expired keys of stores nobody
/// calls (a called store drops them on every call).
const IDLE_SWEEP: Duration = Duration::from_millis(500);

/// Every live store, for the process's one sweeper thread; `running` says
/// whether that thread exists.
struct IdleSweep {
    stores: Vec<Weak<Inner>>,
    running: bool,
}

static IDLE_STORES: Mutex<IdleSweep> = Mutex::new(IdleSweep {
    stores: Vec::new(),
    running: false,
});

/// Adds a new store to the sweep, starting the sweeper thread if none runs.
/// One thread for all stores, holding only weak references: it ends once
/// every store is dropped. If it cannot be spawned, expiry still runs on
/// every call.
fn register_for_idle_sweep(inner: &Arc<Inner>) {
    let mut sweep = IDLE_STORES.lock();
    sweep.stores.push(Arc::downgrade(inner));
    if !sweep.running {
        sweep.running = std::thread::Builder::new()
            .name("redisync-memory-expiry".to_owned())
            .spawn(sweep_idle_stores)
            .is_ok();
    }
}

/// The sweeper thread: every [`IDLE_SWEEP`], drops the expired keys of every
/// live store; ends when no store is left.
fn sweep_idle_stores() {
    loop {
        std::thread::sleep(IDLE_SWEEP);
        let live: Vec<Arc<Inner>> = {
            let mut sweep = IDLE_STORES.lock();
            sweep.stores.retain(|store| store.strong_count() > 0);
            if sweep.stores.is_empty() {
                sweep.running = false;
                return;
            }
            sweep.stores.iter().filter_map(Weak::upgrade).collect()
        };
        for inner in live {
            inner.keys.lock().expire_due(Instant::now());
        }
    }
}

/// The shared state behind every clone of a [`MemoryBackend`].
///
/// Lock order: `keys` before `subscribers`, never the other way round.
#[derive(Default)]
struct Inner {
    keys: Mutex<Keyspace>,
    subscribers: Mutex<Subscribers>,
}

/// One key of the keyspace.
struct Entry {
    value: Value,
    /// `None`: no expiry (`PTTL` = -1).
    expires_at: Option<Instant>,
}

/// The keys, and an index of those with an expiry by deadline, so expired
/// keys are dropped in O(expired × log keys) by the next script (Redis'
/// active expiry), not only when touched again: every unlock writes an
/// unlock latch with a TTL, and a long-running process would otherwise keep
/// them all.
#[derive(Default)]
struct Keyspace {
    map: HashMap<String, Entry>,
    /// `(deadline, key)` for exactly the entries whose `expires_at` is
    /// `Some(deadline)`: kept in step by every method below, so change an
    /// expiry only through [`set_expiry`](Self::set_expiry).
    expiries: BTreeSet<(Instant, String)>,
}

impl Keyspace {
    fn get(&self, key: &str) -> Option<&Entry> {
        self.map.get(key)
    }

    /// The entry at `key`; its `expires_at` must not be changed through it.
    fn get_mut(&mut self, key: &str) -> Option<&mut Entry> {
        self.map.get_mut(key)
    }

    /// Forgets `entry`'s place in the expiry index.
    fn unindex(&mut self, key: &str, entry: &Entry) {
        if let Some(at) = entry.expires_at {
            self.expiries.remove(&(at, key.to_owned()));
        }
    }

    fn insert(&mut self, key: &str, entry: Entry) {
        if let Some(old) = self.map.remove(key) {
            self.unindex(key, &old);
        }
        if let Some(at) = entry.expires_at {
            self.expiries.insert((at, key.to_owned()));
        }
        self.map.insert(key.to_owned(), entry);
    }

    fn remove(&mut self, key: &str) -> Option<Entry> {
        let entry = self.map.remove(key)?;
        self.unindex(key, &entry);
        Some(entry)
    }

    /// The entry at `key`, created empty and without expiry when absent.
    fn get_or_insert(&mut self, key: &str, empty: fn() -> Value) -> &mut Entry {
        self.map.entry(key.to_owned()).or_insert_with(|| Entry {
            value: empty(),
            expires_at: None,
        })
    }

    /// Sets the expiry of `key` if it exists (`PEXPIRE`).
    fn set_expiry(&mut self, key: &str, at: Option<Instant>) {
        let Some(entry) = self.map.get_mut(key) else {
            return;
        };
        let old = std::mem::replace(&mut entry.expires_at, at);
        if let Some(old) = old {
            self.expiries.remove(&(old, key.to_owned()));
        }
        if let Some(at) = at {
            self.expiries.insert((at, key.to_owned()));
        }
    }

    /// Drops every key whose deadline is at or before `now`; the index is
    /// ordered by deadline, so this touches only those keys.
    fn expire_due(&mut self, now: Instant) {
        while self.expiries.first().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, key)) = self.expiries.pop_first() {
                self.map.remove(&key);
            }
        }
    }
}

/// The Redis types the scripts use.
enum Value {
    /// A hash (a lock: holder -> hold count; a read-write lock also has
    /// `mode`). Values are strings, as in Redis.
    Hash(HashMap<String, String>),
    /// A list (a fair lock's waiter queue).
    List(VecDeque<String>),
    /// A sorted set (a fair lock's slot deadlines, a permit-expirable
    /// semaphore's lease ends). Redis scores are
    /// doubles; the scripts only store integer milliseconds.
    ZSet(HashMap<String, i64>),
    /// A plain string (an unlock latch, a read hold, a semaphore's permits,
    /// a latch's count, or a test's
    /// [`MemoryBackend::set_string`]).
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

impl Value {
    /// An empty hash, list or sorted set, which Redis never keeps.
    fn is_empty_container(&self) -> bool {
        match self {
            Value::Hash(fields) => fields.is_empty(),
            Value::List(items) => items.is_empty(),
            Value::ZSet(members) => members.is_empty(),
            Value::Str(_) => false,
        }
    }
}

/// `now + ms`; `None` (no expiry) if the instant would overflow.
fn deadline(now: Instant, ms: i64) -> Option<Instant> {
    now.checked_add(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// The clock in µs since the epoch (the fenced token floor; Redis' `TIME`).
fn clock_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Redis' reply to a command against a key of another type.
fn wrong_type(key: &str) -> Error {
    Error::protocol(format!(
        "WRONGTYPE Operation against a key holding the wrong kind of value (key {key:?})"
    ))
}

/// A script's runtime error (Redis: `ERR user_script:...`), reachable only
/// when the keys were changed behind the scripts' back.
fn script_error(detail: String) -> Error {
    Error::protocol(format!("script error: {detail}"))
}

/// Removes `key` if it has expired, so that afterwards a present key is live.
fn purge(keys: &mut Keyspace, key: &str, now: Instant) {
    if keys.get(key).is_some_and(|entry| entry.is_expired(now)) {
        keys.remove(key);
    }
}

/// `SET key value` (`expires_at` `None`) or `SET key value PX ms`: replaces
/// whatever `key` held, and its expiry.
fn store_string(keys: &mut Keyspace, key: &str, value: &str, expires_at: Option<Instant>) {
    keys.insert(
        key,
        Entry {
            value: Value::Str(value.to_owned()),
            expires_at,
        },
    );
}

/// Lua's `tonumber` on a stored integer (hold counts); `None` for anything else.
fn lua_integer(value: &str) -> Option<i64> {
    value.parse().ok()
}

/// `tonumber(value)` on a counter read with `GET` (a semaphore's permits, a
/// latch's count): a script error when it is not a number (the script would
/// fail comparing `nil`, or reply `nil` where an integer is expected).
fn counter_number(key: &str, value: &str) -> Result<i64> {
    lua_integer(value)
        .ok_or_else(|| script_error(format!("counter {key:?} holds {value:?}, not a number")))
}

/// Redis' strict parse of a string as a 64-bit integer (`string2ll`, used by
/// `INCRBY`): an optional `-`, then digits without a leading zero (or a lone
/// `0`); no sign `+`, no spaces, no `-0`.
fn redis_integer(value: &str) -> Option<i64> {
    if value == "0" {
        return Some(0);
    }
    let digits = value.strip_prefix('-').unwrap_or(value);
    let mut bytes = digits.bytes();
    if !bytes
        .next()
        .is_some_and(|first| matches!(first, b'1'..=b'9'))
        || !bytes.all(|byte| byte.is_ascii_digit())
    {
        return None;
    }
    value.parse().ok()
}

/// Redis' reply to `INCRBY` on a string that is not an integer.
fn not_an_integer(key: &str) -> Error {
    Error::protocol(format!(
        "ERR value is not an integer or out of range (key {key:?})"
    ))
}

/// Redis' reply to `INCRBY` or `DECRBY` past the 64-bit range.
fn increment_overflow(key: &str) -> Error {
    Error::protocol(format!(
        "ERR increment or decrement would overflow (key {key:?})"
    ))
}

/// A sorted set's members in `ZRANGE` order: by score, then by member.
fn by_score(members: &HashMap<String, i64>) -> Vec<(i64, String)> {
    let mut sorted: Vec<(i64, String)> = members
        .iter()
        .map(|(member, score)| (*score, member.clone()))
        .collect();
    sorted.sort();
    sorted
}

/// An acquire script's "wait this long" reply: a negative PTTL (no expiry,
/// or no key) means no known wait, as in `RedisBackend`.
fn held(pttl: i64) -> Acquire {
    Acquire::Held {
        ttl: ttl_from_pttl(pttl),
    }
}

/// A PTTL reply as a TTL: `None` for -1 (no expiry) and -2 (no key).
fn ttl_from_pttl(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// A hold-count field as a state reply: `tonumber(count) or 0`.
fn hold_count(name: &str, count: Option<&str>) -> Result<u64> {
    match count.and_then(lua_integer) {
        None => Ok(0),
        Some(count) => u64::try_from(count).map_err(|_| {
            Error::protocol(format!("lock {name:?} has a negative hold count {count}"))
        }),
    }
}

/// Read hold `n` of the holder whose hold keys start with `prefix`
/// (`<timeout_prefix>:<n>`).
fn read_hold_key(prefix: &str, n: i64) -> String {
    format!("{prefix}:{n}")
}

/// Selects one Redis type out of a [`Value`].
type Pick<T> = fn(&mut Value) -> Option<&mut T>;

fn as_hash(value: &mut Value) -> Option<&mut HashMap<String, String>> {
    match value {
        Value::Hash(fields) => Some(fields),
        _ => None,
    }
}

fn as_list(value: &mut Value) -> Option<&mut VecDeque<String>> {
    match value {
        Value::List(items) => Some(items),
        _ => None,
    }
}

fn as_zset(value: &mut Value) -> Option<&mut HashMap<String, i64>> {
    match value {
        Value::ZSet(members) => Some(members),
        _ => None,
    }
}

/// `HINCRBY` on a hash that exists.
fn increment(fields: &mut HashMap<String, String>, key: &str, field: &str, by: i64) -> Result<i64> {
    let current = match fields.get(field) {
        None => 0,
        Some(value) => lua_integer(value).ok_or_else(|| {
            Error::protocol(format!(
                "HINCRBY {key:?} {field:?}: hash value is not an integer"
            ))
        })?,
    };
    let next = current.checked_add(by).ok_or_else(|| {
        Error::protocol(format!(
            "HINCRBY {key:?} {field:?}: hold count would overflow"
        ))
    })?;
    fields.insert(field.to_owned(), next.to_string());
    Ok(next)
}

/// The position of Redis list index `index` (negative: from the tail) in a
/// list of `len` items; `None` when out of range.
fn list_position(len: usize, index: i64) -> Option<usize> {
    let position = if index >= 0 {
        usize::try_from(index).ok()?
    } else {
        len.checked_sub(usize::try_from(index.checked_neg()?).ok()?)?
    };
    (position < len).then_some(position)
}

/// One script's view of the keyspace, under the keyspace mutex: the Redis
/// commands the scripts call, with Redis' semantics. An expired key is
/// absent; a command on a key of another type fails with `WRONGTYPE` (`DEL`,
/// `EXISTS`, `PTTL`, `PEXPIRE` and `SET` take any type); a hash, list or
/// sorted set that becomes empty ceases to exist.
struct Db<'a> {
    keys: &'a mut Keyspace,
    now: Instant,
}

impl<'a> Db<'a> {
    /// A script's view; first drops every key that has expired (active
    /// expiry), so the keyspace never holds more than the live keys plus
    /// those that expired since the last script ran.
    fn new(keys: &'a mut Keyspace) -> Self {
        let now = Instant::now();
        keys.expire_due(now);
        Db { keys, now }
    }

    /// The live entry at `key`.
    fn entry(&mut self, key: &str) -> Option<&mut Entry> {
        purge(self.keys, key, self.now);
        self.keys.get_mut(key)
    }

    /// The live value at `key` if it has the type `pick` selects: `Ok(None)`
    /// when absent, `WRONGTYPE` when of another type.
    fn typed<T>(&mut self, key: &str, pick: Pick<T>) -> Result<Option<&mut T>> {
        match self.entry(key) {
            None => Ok(None),
            Some(entry) => pick(&mut entry.value)
                .map(Some)
                .ok_or_else(|| wrong_type(key)),
        }
    }

    /// As [`typed`](Self::typed), creating `empty` (without expiry) when
    /// absent: a write command. Callers end with
    /// [`drop_if_empty`](Self::drop_if_empty).
    fn typed_or_insert<T>(
        &mut self,
        key: &str,
        pick: Pick<T>,
        empty: fn() -> Value,
    ) -> Result<&mut T> {
        purge(self.keys, key, self.now);
        let entry = self.keys.get_or_insert(key, empty);
        pick(&mut entry.value).ok_or_else(|| wrong_type(key))
    }

    /// Deletes `key` if it is an empty hash, list or sorted set.
    fn drop_if_empty(&mut self, key: &str) {
        if self
            .keys
            .get(key)
            .is_some_and(|entry| entry.value.is_empty_container())
        {
            self.keys.remove(key);
        }
    }

    /// `EXISTS key`.
    fn exists(&mut self, key: &str) -> bool {
        self.entry(key).is_some()
    }

    /// `DEL key`: whether it existed.
    fn del(&mut self, key: &str) -> bool {
        purge(self.keys, key, self.now);
        self.keys.remove(key).is_some()
    }

    /// `PTTL key`: -2 when absent, -1 without expiry.
    fn pttl(&mut self, key: &str) -> i64 {
        let now = self.now;
        match self.entry(key).map(|entry| entry.ttl(now)) {
            None => -2,
            Some(None) => -1,
            Some(Some(ttl)) => i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
        }
    }

    /// `PEXPIRE key ms`: nothing when absent; a non-positive `ms` expires
    /// the key at once (Redis deletes it).
    fn pexpire(&mut self, key: &str, ms: i64) {
        purge(self.keys, key, self.now);
        self.keys.set_expiry(key, deadline(self.now, ms));
    }

    /// `GET key`.
    fn get(&mut self, key: &str) -> Result<Option<String>> {
        match self.entry(key) {
            None => Ok(None),
            Some(Entry {
                value: Value::Str(value),
                ..
            }) => Ok(Some(value.clone())),
            Some(_) => Err(wrong_type(key)),
        }
    }

    /// `SET key value`: replaces any type and clears the expiry.
    fn set(&mut self, key: &str, value: &str) {
        store_string(self.keys, key, value, None);
    }

    /// `SET key value PX ms`.
    fn set_px(&mut self, key: &str, value: &str, ms: i64) {
        store_string(self.keys, key, value, deadline(self.now, ms));
    }

    /// `HGET key field`.
    fn hget(&mut self, key: &str, field: &str) -> Result<Option<String>> {
        Ok(self
            .typed(key, as_hash)?
            .and_then(|fields| fields.get(field).cloned()))
    }

    /// `HEXISTS key field`.
    fn hexists(&mut self, key: &str, field: &str) -> Result<bool> {
        Ok(self
            .typed(key, as_hash)?
            .is_some_and(|fields| fields.contains_key(field)))
    }

    /// `HSET key field value`.
    fn hset(&mut self, key: &str, field: &str, value: &str) -> Result<()> {
        self.typed_or_insert(key, as_hash, || Value::Hash(HashMap::new()))?
            .insert(field.to_owned(), value.to_owned());
        Ok(())
    }

    /// `HINCRBY key field by`: the new value.
    fn hincrby(&mut self, key: &str, field: &str, by: i64) -> Result<i64> {
        let fields = self.typed_or_insert(key, as_hash, || Value::Hash(HashMap::new()))?;
        let outcome = increment(fields, key, field, by);
        self.drop_if_empty(key);
        outcome
    }

    /// `HDEL key field`.
    fn hdel(&mut self, key: &str, field: &str) -> Result<bool> {
        let removed = self
            .typed(key, as_hash)?
            .is_some_and(|fields| fields.remove(field).is_some());
        self.drop_if_empty(key);
        Ok(removed)
    }

    /// `HLEN key`.
    fn hlen(&mut self, key: &str) -> Result<usize> {
        Ok(self.typed(key, as_hash)?.map_or(0, |fields| fields.len()))
    }

    /// `HKEYS key`.
    fn hkeys(&mut self, key: &str) -> Result<Vec<String>> {
        Ok(self
            .typed(key, as_hash)?
            .map(|fields| fields.keys().cloned().collect())
            .unwrap_or_default())
    }

    /// `LINDEX key index`.
    fn lindex(&mut self, key: &str, index: i64) -> Result<Option<String>> {
        Ok(self.typed(key, as_list)?.and_then(|items| {
            list_position(items.len(), index).and_then(|position| items.get(position).cloned())
        }))
    }

    /// `LPOP key`.
    fn lpop(&mut self, key: &str) -> Result<Option<String>> {
        let popped = self.typed(key, as_list)?.and_then(VecDeque::pop_front);
        self.drop_if_empty(key);
        Ok(popped)
    }

    /// `RPUSH key value`: the new length.
    fn rpush(&mut self, key: &str, value: &str) -> Result<usize> {
        let items = self.typed_or_insert(key, as_list, || Value::List(VecDeque::new()))?;
        items.push_back(value.to_owned());
        Ok(items.len())
    }

    /// `LRANGE key 0 -1`.
    fn lrange_all(&mut self, key: &str) -> Result<Vec<String>> {
        Ok(self
            .typed(key, as_list)?
            .map(|items| items.iter().cloned().collect())
            .unwrap_or_default())
    }

    /// `LREM key 0 value`: how many were removed.
    fn lrem_all(&mut self, key: &str, value: &str) -> Result<usize> {
        let removed = self.typed(key, as_list)?.map_or(0, |items| {
            let before = items.len();
            items.retain(|item| item != value);
            before.saturating_sub(items.len())
        });
        self.drop_if_empty(key);
        Ok(removed)
    }

    /// `ZSCORE key member`.
    fn zscore(&mut self, key: &str, member: &str) -> Result<Option<i64>> {
        Ok(self
            .typed(key, as_zset)?
            .and_then(|members| members.get(member).copied()))
    }

    /// `ZADD key score member`: whether `member` is new.
    fn zadd(&mut self, key: &str, score: i64, member: &str) -> Result<bool> {
        let members = self.typed_or_insert(key, as_zset, || Value::ZSet(HashMap::new()))?;
        Ok(members.insert(member.to_owned(), score).is_none())
    }

    /// `ZREM key member`.
    fn zrem(&mut self, key: &str, member: &str) -> Result<bool> {
        let removed = self
            .typed(key, as_zset)?
            .is_some_and(|members| members.remove(member).is_some());
        self.drop_if_empty(key);
        Ok(removed)
    }

    /// `ZINCRBY key by member`: creates `member` (score `by`) if absent.
    /// Saturates where Redis' double scores would not overflow.
    fn zincrby(&mut self, key: &str, by: i64, member: &str) -> Result<i64> {
        let members = self.typed_or_insert(key, as_zset, || Value::ZSet(HashMap::new()))?;
        let score = members.entry(member.to_owned()).or_insert(0);
        *score = score.saturating_add(by);
        Ok(*score)
    }

    /// `ZRANGE key 0 -1`: members by score, then by member.
    fn zrange_all(&mut self, key: &str) -> Result<Vec<String>> {
        Ok(self
            .zrange_with_scores(key, 0, -1)?
            .into_iter()
            .map(|(member, _)| member)
            .collect())
    }

    /// `ZRANGE key start stop WITHSCORES`: (member, score) pairs by score,
    /// then by member; negative indices count from the end, out-of-range
    /// indices are clamped.
    fn zrange_with_scores(
        &mut self,
        key: &str,
        start: i64,
        stop: i64,
    ) -> Result<Vec<(String, i64)>> {
        let sorted = self.typed(key, as_zset)?.map(|members| by_score(members));
        let Some(sorted) = sorted else {
            return Ok(Vec::new());
        };
        let len = i64::try_from(sorted.len()).unwrap_or(i64::MAX);
        let resolve = |index: i64| {
            if index < 0 {
                index.saturating_add(len)
            } else {
                index
            }
        };
        let start = resolve(start).max(0);
        let stop = resolve(stop).min(len.saturating_sub(1));
        let (Ok(start), Ok(stop)) = (usize::try_from(start), usize::try_from(stop)) else {
            return Ok(Vec::new());
        };
        Ok(sorted
            .get(start..=stop)
            .unwrap_or_default()
            .iter()
            .map(|(score, member)| (member.clone(), *score))
            .collect())
    }

    /// `ZRANGEBYSCORE key -inf max`: the members scored at most `max`, by
    /// score, then by member.
    fn zrangebyscore(&mut self, key: &str, max: i64) -> Result<Vec<String>> {
        Ok(self
            .typed(key, as_zset)?
            .map(|members| by_score(members))
            .unwrap_or_default()
            .into_iter()
            .take_while(|(score, _)| *score <= max)
            .map(|(_, member)| member)
            .collect())
    }

    /// `INCRBY key by`: the new value. A missing key counts as 0 and is
    /// created without expiry; an existing key keeps its expiry. Fails like
    /// Redis on a non-integer string and on overflow.
    fn incrby(&mut self, key: &str, by: i64) -> Result<i64> {
        match self.entry(key) {
            None => {
                store_string(self.keys, key, &by.to_string(), None);
                Ok(by)
            }
            Some(Entry {
                value: Value::Str(value),
                ..
            }) => {
                let current = redis_integer(value).ok_or_else(|| not_an_integer(key))?;
                let next = current
                    .checked_add(by)
                    .ok_or_else(|| increment_overflow(key))?;
                *value = next.to_string();
                Ok(next)
            }
            Some(_) => Err(wrong_type(key)),
        }
    }

    /// `INCR key`.
    fn incr(&mut self, key: &str) -> Result<i64> {
        self.incrby(key, 1)
    }

    /// `DECRBY key by`.
    fn decrby(&mut self, key: &str, by: i64) -> Result<i64> {
        let by = by.checked_neg().ok_or_else(|| increment_overflow(key))?;
        self.incrby(key, by)
    }

    /// `DECR key`.
    fn decr(&mut self, key: &str) -> Result<i64> {
        self.decrby(key, 1)
    }
}

/// The release scripts' prologue: `local done = redis.call('get', latch); if
/// done then return tonumber(done) end`. `Some` is the stored outcome of a
/// release that already ran.
fn replay_latch(db: &mut Db<'_>, latch_key: &str) -> Result<Option<Release>> {
    match db.get(latch_key)?.as_deref() {
        None => Ok(None),
        Some("0") => Ok(Some(Release::StillHeld)),
        Some("1") => Ok(Some(Release::Released)),
        Some(outcome) => Err(Error::protocol(format!(
            "unlock latch {latch_key:?} holds {outcome:?}, expected \"0\" or \"1\""
        ))),
    }
}

/// `SET latch 0|1 PX latch_ms; return 0|1`: `Released` if `released`, else
/// `StillHeld`.
fn record_release(db: &mut Db<'_>, latch_key: &str, latch_ms: i64, released: bool) -> Release {
    let (value, outcome) = if released {
        ("1", Release::Released)
    } else {
        ("0", Release::StillHeld)
    };
    db.set_px(latch_key, value, latch_ms);
    outcome
}

/// The fair-lock scripts' prologue: evicts head waiters whose slot deadline
/// is at or before `now_ms` (or that have no slot), until the head is live.
fn evict_stale_waiters(db: &mut Db<'_>, keys: &FairLockKeys<'_>, now_ms: i64) -> Result<()> {
    while let Some(first) = db.lindex(keys.queue, 0)? {
        match db.zscore(keys.timeouts, &first)? {
            Some(slot_deadline) if slot_deadline > now_ms => break,
            _ => {
                db.zrem(keys.timeouts, &first)?;
                db.lpop(keys.queue)?;
            }
        }
    }
    Ok(())
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
        let backend = MemoryBackend {
            inner: Arc::new(Inner::default()),
        };
        register_for_idle_sweep(&backend.inner);
        backend
    }

    /// The number of live (unexpired) keys: locks, fair-lock queues and slot
    /// sets, read holds and unlock latches alike.
    ///
    /// ```
    /// use redisync::backend::LockBackend;
    /// let backend = redisync::MemoryBackend::new();
    /// redisync::ops::lock::acquire(&backend, "doc:len", "c1:1", 30_000)?;
    /// assert_eq!(backend.len(), 1);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        let mut keys = self.inner.keys.lock();
        keys.expire_due(Instant::now());
        keys.map.len()
    }

    /// True when no live key is stored.
    ///
    /// ```
    /// use redisync::backend::LockBackend;
    /// let backend = redisync::MemoryBackend::new();
    /// assert!(backend.is_empty());
    /// redisync::ops::lock::acquire(&backend, "doc:is_empty", "c1:1", 30_000)?;
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
    /// let err = redisync::ops::lock::acquire(&backend, "doc:string", "c1:1", 30_000).unwrap_err();
    /// assert!(err.is_protocol_error());
    /// assert!(err.to_string().contains("WRONGTYPE"));
    /// ```
    pub fn set_string(&self, key: &str, value: &str) {
        store_string(&mut self.inner.keys.lock(), key, value, None);
    }

    /// Runs one script: `script` sees the keyspace under the keyspace mutex,
    /// so it is atomic like a Lua script on Redis.
    fn run<T>(&self, script: impl FnOnce(&mut Db<'_>) -> Result<T>) -> Result<T> {
        let mut keys = self.inner.keys.lock();
        script(&mut Db::new(&mut keys))
    }

    /// Publishes while the caller holds the keyspace lock, so the message is
    /// atomic with the script's writes, as on Redis.
    fn publish_locked(&self, channel: &str, payload: &str) {
        self.inner.subscribers.lock().publish(channel, payload);
    }

    /// Tells a fair lock's head waiter, if any, that it is its turn: publishes
    /// the unlock message on `<channel_prefix>:<head>`.
    fn notify_head(&self, db: &mut Db<'_>, keys: &FairLockKeys<'_>) -> Result<()> {
        if let Some(head) = db.lindex(keys.queue, 0)? {
            self.publish_locked(&format!("{}:{}", keys.channel_prefix, head), UNLOCK_MESSAGE);
        }
        Ok(())
    }

    /// The permit-expirable semaphore scripts' prelude (`reclaim_expired`):
    /// returns every permit whose lease ended at or before `now_ms` to the
    /// pool and, if the count is then positive, publishes it.
    fn reclaim_expired(
        &self,
        db: &mut Db<'_>,
        keys: &ExpirableKeys<'_>,
        now_ms: i64,
    ) -> Result<()> {
        let expired = db.zrangebyscore(keys.leases, now_ms)?;
        if expired.is_empty() {
            return Ok(());
        }
        // The count first, as the script does: a failed INCRBY loses no
        // lease. The script removes them in batches only to stay within
        // Lua's `unpack` limit; one `ZREM` each is the same.
        let reclaimed = i64::try_from(expired.len()).map_err(|_| increment_overflow(keys.name))?;
        let value = db.incrby(keys.name, reclaimed)?;
        for permit in &expired {
            db.zrem(keys.leases, permit)?;
        }
        if value > 0 {
            self.publish_locked(keys.channel, &value.to_string());
        }
        Ok(())
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let now = Instant::now();
        let keys = self
            .inner
            .keys
            .lock()
            .map
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

/// The Rust port of the scripts, reached through [`LockBackend::run_script`]
/// by script id until the embedded Lua interpreter runs the scripts
/// themselves.
impl MemoryBackend {
    // Each method ports its script in `lua/` statement by statement.

    fn lock_acquire(&self, name: &str, holder: &str, lease_ms: i64) -> Result<Acquire> {
        check_ms("lease", lease_ms)?;
        self.run(|db| {
            if !db.exists(name) || db.hexists(name, holder)? {
                db.hincrby(name, holder, 1)?;
                db.pexpire(name, lease_ms);
                return Ok(Acquire::Acquired);
            }
            Ok(held(db.pttl(name)))
        })
    }

    fn fenced_lock_acquire(
        &self,
        name: &str,
        token_key: &str,
        holder: &str,
        lease_ms: i64,
    ) -> Result<FencedAcquire> {
        check_ms("lease", lease_ms)?;
        self.run(|db| {
            if !db.exists(name) || db.hexists(name, holder)? {
                let mut token = db.incr(token_key)?;
                // At least the clock in µs, so tokens keep increasing after
                // the counter is lost (see lua/fenced_lock_acquire.lua).
                let floor = clock_micros();
                if token < floor {
                    db.set(token_key, &floor.to_string());
                    token = floor;
                }
                let Some(token) = u64::try_from(token).ok().filter(|token| *token > 0) else {
                    return Err(Error::protocol(format!(
                        "fenced lock acquire: token counter {token_key:?} holds {token}, not a positive integer"
                    )));
                };
                db.hincrby(name, holder, 1)?;
                db.pexpire(name, lease_ms);
                return Ok(FencedAcquire::Acquired { token });
            }
            Ok(FencedAcquire::Held {
                ttl: ttl_from_pttl(db.pttl(name)),
            })
        })
    }

    fn lock_renew(&self, name: &str, holder: &str, lease_ms: i64) -> Result<bool> {
        check_ms("lease", lease_ms)?;
        self.run(|db| {
            if db.hexists(name, holder)? {
                db.pexpire(name, lease_ms);
                return Ok(true);
            }
            Ok(false)
        })
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
        check_ms("lease", lease_ms)?;
        check_ms("latch timeout", latch_ms)?;
        self.run(|db| {
            if let Some(outcome) = replay_latch(db, latch_key)? {
                return Ok(outcome);
            }
            if !db.hexists(name, holder)? {
                return Ok(Release::NotHeld);
            }
            if db.hincrby(name, holder, -1)? > 0 {
                db.pexpire(name, lease_ms);
                return Ok(record_release(db, latch_key, latch_ms, false));
            }
            db.del(name);
            self.publish_locked(channel, UNLOCK_MESSAGE);
            Ok(record_release(db, latch_key, latch_ms, true))
        })
    }

    fn lock_force_release(&self, name: &str, channel: &str) -> Result<bool> {
        self.run(|db| {
            // `DEL` deletes whatever the key holds.
            if db.del(name) {
                self.publish_locked(channel, UNLOCK_MESSAGE);
                return Ok(true);
            }
            Ok(false)
        })
    }

    fn lock_state(&self, name: &str, holder: &str) -> Result<LockState> {
        self.run(|db| {
            let count = db.hget(name, holder)?;
            Ok(LockState::new(
                db.exists(name),
                hold_count(name, count.as_deref())?,
                ttl_from_pttl(db.pttl(name)),
            ))
        })
    }

    fn fair_lock_acquire(
        &self,
        keys: &FairLockKeys<'_>,
        holder: &str,
        lease_ms: i64,
        wait_ms: i64,
        now_ms: i64,
        enqueue: bool,
    ) -> Result<Acquire> {
        check_ms("lease", lease_ms)?;
        check_ms("wait allowance", wait_ms)?;
        check_time_ms("now", now_ms)?;
        self.run(|db| {
            evict_stale_waiters(db, keys, now_ms)?;
            // Free, and nobody queued or the caller is first: take it.
            if !db.exists(keys.name)
                && (!db.exists(keys.queue) || db.lindex(keys.queue, 0)?.as_deref() == Some(holder))
            {
                db.lpop(keys.queue)?;
                db.zrem(keys.timeouts, holder)?;
                // Everyone behind moves up one slot.
                let move_up = 0_i64.saturating_sub(wait_ms);
                for waiter in db.zrange_all(keys.timeouts)? {
                    db.zincrby(keys.timeouts, move_up, &waiter)?;
                }
                db.hset(keys.name, holder, "1")?;
                db.pexpire(keys.name, lease_ms);
                return Ok(Acquire::Acquired);
            }
            // Re-entry.
            if db.hexists(keys.name, holder)? {
                db.hincrby(keys.name, holder, 1)?;
                db.pexpire(keys.name, lease_ms);
                return Ok(Acquire::Acquired);
            }
            if !enqueue {
                return Ok(held(db.pttl(keys.name).max(1)));
            }
            // Already queued: wait until the slot ahead runs out.
            if let Some(mine) = db.zscore(keys.timeouts, holder)? {
                let ahead = mine.saturating_sub(wait_ms).saturating_sub(now_ms);
                if ahead > 0 {
                    return Ok(held(ahead));
                }
                // The slot ahead ran out while its owner still holds the
                // lock: wait for the lock's TTL (-1: for the message).
                let ttl = db.pttl(keys.name);
                if ttl != -2 {
                    return Ok(held(ttl));
                }
                // Free, and a live head has not taken it yet: its slot.
                let head_slot = match db.lindex(keys.queue, 0)? {
                    Some(head) => db.zscore(keys.timeouts, &head)?,
                    None => None,
                };
                let Some(head_slot) = head_slot else {
                    return Err(script_error(format!(
                        "fair lock {:?}: a queued waiter but no head slot in {:?}",
                        keys.name, keys.timeouts
                    )));
                };
                return Ok(held(head_slot.saturating_sub(now_ms).max(1)));
            }
            // Join the tail; the slot lasts the allowance past the slot ahead
            // (or the lock's TTL).
            let ttl = match db.lindex(keys.queue, -1)? {
                Some(last) if last != holder => {
                    let Some(slot) = db.zscore(keys.timeouts, &last)? else {
                        return Err(script_error(format!(
                            "fair lock {:?}: queued waiter {last:?} has no slot in {:?}",
                            keys.name, keys.timeouts
                        )));
                    };
                    slot.saturating_sub(now_ms)
                }
                _ => db.pttl(keys.name),
            };
            let slot = ttl.saturating_add(wait_ms).saturating_add(now_ms);
            if db.zadd(keys.timeouts, slot, holder)? {
                db.rpush(keys.queue, holder)?;
            }
            Ok(held(ttl.max(1)))
        })
    }

    fn fair_lock_release(
        &self,
        keys: &FairLockKeys<'_>,
        holder: &str,
        lease_ms: i64,
        now_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release> {
        check_ms("lease", lease_ms)?;
        check_time_ms("now", now_ms)?;
        check_ms("latch timeout", latch_ms)?;
        self.run(|db| {
            if let Some(outcome) = replay_latch(db, latch_key)? {
                return Ok(outcome);
            }
            evict_stale_waiters(db, keys, now_ms)?;
            // A lock that no longer exists counts as released.
            if db.exists(keys.name) {
                if !db.hexists(keys.name, holder)? {
                    return Ok(Release::NotHeld);
                }
                if db.hincrby(keys.name, holder, -1)? > 0 {
                    db.pexpire(keys.name, lease_ms);
                    return Ok(record_release(db, latch_key, latch_ms, false));
                }
                db.del(keys.name);
            }
            self.notify_head(db, keys)?;
            Ok(record_release(db, latch_key, latch_ms, true))
        })
    }

    fn fair_lock_cancel(&self, keys: &FairLockKeys<'_>, holder: &str, wait_ms: i64) -> Result<()> {
        check_ms("wait allowance", wait_ms)?;
        self.run(|db| {
            let queue = db.lrange_all(keys.queue)?;
            let Some(position) = queue.iter().position(|waiter| waiter == holder) else {
                db.zrem(keys.timeouts, holder)?;
                return Ok(());
            };
            // Later waiters' slots move up by the leaver's allowance.
            let move_up = 0_i64.saturating_sub(wait_ms);
            for waiter in queue.iter().skip(position.saturating_add(1)) {
                db.zincrby(keys.timeouts, move_up, waiter)?;
            }
            db.zrem(keys.timeouts, holder)?;
            db.lrem_all(keys.queue, holder)?;
            Ok(())
        })
    }

    fn fair_lock_force_release(&self, keys: &FairLockKeys<'_>, now_ms: i64) -> Result<bool> {
        check_time_ms("now", now_ms)?;
        self.run(|db| {
            evict_stale_waiters(db, keys, now_ms)?;
            if db.del(keys.name) {
                self.notify_head(db, keys)?;
                return Ok(true);
            }
            Ok(false)
        })
    }

    fn read_lock_acquire(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<Acquire> {
        check_ms("lease", lease_ms)?;
        self.run(|db| {
            let Some(mode) = db.hget(keys.name, "mode")? else {
                db.hset(keys.name, "mode", RwMode::Read.as_str())?;
                db.hset(keys.name, keys.holder, "1")?;
                let first = read_hold_key(keys.timeout_prefix, 1);
                db.set(&first, "1");
                db.pexpire(&first, lease_ms);
                db.pexpire(keys.name, lease_ms);
                return Ok(Acquire::Acquired);
            };
            if mode == RwMode::Read.as_str()
                || (mode == RwMode::Write.as_str() && db.hexists(keys.name, keys.write_field)?)
            {
                let n = db.hincrby(keys.name, keys.holder, 1)?;
                let hold = read_hold_key(keys.timeout_prefix, n);
                db.set(&hold, "1");
                db.pexpire(&hold, lease_ms);
                let pttl = db.pttl(keys.name);
                db.pexpire(keys.name, pttl.max(lease_ms));
                return Ok(Acquire::Acquired);
            }
            Ok(held(db.pttl(keys.name)))
        })
    }

    fn write_lock_acquire(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<Acquire> {
        check_ms("lease", lease_ms)?;
        self.run(|db| {
            let Some(mode) = db.hget(keys.name, "mode")? else {
                db.hset(keys.name, "mode", RwMode::Write.as_str())?;
                db.hset(keys.name, keys.write_field, "1")?;
                db.pexpire(keys.name, lease_ms);
                return Ok(Acquire::Acquired);
            };
            if mode == RwMode::Write.as_str() && db.hexists(keys.name, keys.write_field)? {
                // Re-entry adds the lease to the remaining TTL, as Redisson
                // does, up to the longest lease (as the script caps it).
                let ttl = db
                    .pttl(keys.name)
                    .saturating_add(lease_ms)
                    .min(MAX_LEASE_MS);
                db.hincrby(keys.name, keys.write_field, 1)?;
                db.pexpire(keys.name, ttl);
                return Ok(Acquire::Acquired);
            }
            if mode == RwMode::Read.as_str() && db.hexists(keys.name, keys.holder)? {
                // The script's -3.
                return Err(crate::error::read_to_write_upgrade(keys.name));
            }
            Ok(held(db.pttl(keys.name)))
        })
    }

    fn read_lock_release(
        &self,
        keys: &RwLockKeys<'_>,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release> {
        check_ms("latch timeout", latch_ms)?;
        self.run(|db| {
            if let Some(outcome) = replay_latch(db, latch_key)? {
                return Ok(outcome);
            }
            let Some(mode) = db.hget(keys.name, "mode")? else {
                return Ok(Release::NotHeld);
            };
            if !db.hexists(keys.name, keys.holder)? {
                return Ok(Release::NotHeld);
            }
            let counter = db.hincrby(keys.name, keys.holder, -1)?;
            if counter == 0 {
                db.hdel(keys.name, keys.holder)?;
            }
            db.del(&read_hold_key(
                keys.timeout_prefix,
                counter.saturating_add(1),
            ));
            if db.hlen(keys.name)? > 1 {
                // The lock lives as long as its longest remaining hold.
                let mut longest: i64 = -3;
                for field in db.hkeys(keys.name)? {
                    let holds = db.hget(keys.name, &field)?;
                    let Some(holds) = holds.as_deref().and_then(lua_integer) else {
                        continue;
                    };
                    let prefix = format!("{}:{field}:rwlock_timeout", keys.key_prefix);
                    for i in (1..=holds).rev() {
                        longest = longest.max(db.pttl(&read_hold_key(&prefix, i)));
                    }
                }
                if longest > 0 {
                    db.pexpire(keys.name, longest);
                    return Ok(record_release(db, latch_key, latch_ms, false));
                }
                if mode == RwMode::Write.as_str() {
                    return Ok(record_release(db, latch_key, latch_ms, false));
                }
            }
            db.del(keys.name);
            self.publish_locked(keys.channel, UNLOCK_MESSAGE);
            Ok(record_release(db, latch_key, latch_ms, true))
        })
    }

    fn write_lock_release(
        &self,
        keys: &RwLockKeys<'_>,
        lease_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release> {
        check_ms("lease", lease_ms)?;
        check_ms("latch timeout", latch_ms)?;
        self.run(|db| {
            if let Some(outcome) = replay_latch(db, latch_key)? {
                return Ok(outcome);
            }
            if db.hget(keys.name, "mode")?.as_deref() != Some(RwMode::Write.as_str())
                || !db.hexists(keys.name, keys.write_field)?
            {
                return Ok(Release::NotHeld);
            }
            if db.hincrby(keys.name, keys.write_field, -1)? > 0 {
                db.pexpire(keys.name, lease_ms);
                return Ok(record_release(db, latch_key, latch_ms, false));
            }
            db.hdel(keys.name, keys.write_field)?;
            if db.hlen(keys.name)? == 1 {
                db.del(keys.name);
            } else {
                // Downgraded: the holder's read holds remain; other readers
                // may join now.
                db.hset(keys.name, "mode", RwMode::Read.as_str())?;
            }
            self.publish_locked(keys.channel, READ_UNLOCK_MESSAGE);
            Ok(record_release(db, latch_key, latch_ms, true))
        })
    }

    fn read_lock_renew(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<bool> {
        check_ms("lease", lease_ms)?;
        self.run(|db| {
            let Some(holds) = db.hget(keys.name, keys.holder)? else {
                return Ok(false);
            };
            let holds = lua_integer(&holds).ok_or_else(|| {
                script_error(format!(
                    "read-write lock {:?}: hold count {holds:?} of {:?} is not a number",
                    keys.name, keys.holder
                ))
            })?;
            // Only this holder's hold keys: a dead reader's holds still expire.
            for i in (1..=holds).rev() {
                db.pexpire(&read_hold_key(keys.timeout_prefix, i), lease_ms);
            }
            let pttl = db.pttl(keys.name);
            db.pexpire(keys.name, pttl.max(lease_ms));
            Ok(true)
        })
    }

    fn rw_lock_force_release(&self, keys: &RwLockKeys<'_>, mode: RwMode) -> Result<bool> {
        let message = match mode {
            RwMode::Read => UNLOCK_MESSAGE,
            RwMode::Write => READ_UNLOCK_MESSAGE,
        };
        self.run(|db| {
            if db.hget(keys.name, "mode")?.as_deref() == Some(mode.as_str()) {
                db.del(keys.name);
                self.publish_locked(keys.channel, message);
                return Ok(true);
            }
            Ok(false)
        })
    }

    fn rw_lock_state(&self, name: &str, field: &str) -> Result<RwLockState> {
        self.run(|db| {
            let mode = db.hget(name, "mode")?;
            let count = db.hget(name, field)?;
            let pttl = db.pttl(name);
            let mode = match mode.as_deref() {
                None | Some("") => None,
                Some("read") => Some(RwMode::Read),
                Some("write") => Some(RwMode::Write),
                Some(other) => {
                    return Err(Error::protocol(format!(
                        "read-write lock {name:?} has mode {other:?}, expected read or write"
                    )));
                }
            };
            Ok(RwLockState::new(
                mode,
                hold_count(name, count.as_deref())?,
                ttl_from_pttl(pttl),
            ))
        })
    }

    fn counter_set_if_absent(
        &self,
        name: &str,
        channel: &str,
        value: i64,
        message: &str,
    ) -> Result<bool> {
        self.run(|db| {
            if db.get(name)?.is_none() {
                db.set(name, &value.to_string());
                self.publish_locked(channel, message);
                return Ok(true);
            }
            Ok(false)
        })
    }

    fn counter_get(&self, name: &str) -> Result<i64> {
        self.run(|db| counter_number(name, db.get(name)?.as_deref().unwrap_or("0")))
    }

    fn semaphore_add(&self, name: &str, channel: &str, delta: i64) -> Result<i64> {
        self.run(|db| {
            let value = db.incrby(name, delta)?;
            if delta > 0 {
                self.publish_locked(channel, &value.to_string());
            }
            Ok(value)
        })
    }

    fn semaphore_try_acquire(&self, name: &str, permits: i64) -> Result<bool> {
        if permits < 1 {
            return Err(Error::invalid(
                "permits",
                format!("must be at least 1, got {permits}"),
            ));
        }
        self.run(|db| {
            let available = match db.get(name)? {
                Some(value) => Some(counter_number(name, &value)?),
                None => None,
            };
            if available.is_some_and(|available| available >= permits) {
                db.decrby(name, permits)?;
                return Ok(true);
            }
            Ok(false)
        })
    }

    fn semaphore_drain(&self, name: &str) -> Result<i64> {
        self.run(|db| {
            let Some(value) = db.get(name)? else {
                return Ok(0);
            };
            // Checked before zeroing: a non-integer is left as it is.
            let count = counter_number(name, &value)?;
            db.set(name, "0");
            Ok(count)
        })
    }

    fn expirable_acquire(
        &self,
        keys: &ExpirableKeys<'_>,
        permit_id: &str,
        lease_end_ms: i64,
        now_ms: i64,
    ) -> Result<Acquire> {
        check_time_ms("lease end", lease_end_ms)?;
        check_time_ms("now", now_ms)?;
        self.run(|db| {
            self.reclaim_expired(db, keys, now_ms)?;
            let available = match db.get(keys.name)? {
                Some(value) => Some(counter_number(keys.name, &value)?),
                None => None,
            };
            if available.is_some_and(|available| available >= 1) {
                db.decr(keys.name)?;
                db.zadd(keys.leases, lease_end_ms, permit_id)?;
                return Ok(Acquire::Acquired);
            }
            // None available: wait until the earliest lease ends.
            let first = db.zrange_with_scores(keys.leases, 0, 0)?;
            let Some((_, lease_end)) = first.first() else {
                return Ok(held(-1));
            };
            Ok(held(lease_end.saturating_sub(now_ms).max(1)))
        })
    }

    fn expirable_release(
        &self,
        keys: &ExpirableKeys<'_>,
        permit_id: &str,
        now_ms: i64,
    ) -> Result<bool> {
        check_time_ms("now", now_ms)?;
        self.run(|db| {
            let lease_end = db.zscore(keys.leases, permit_id)?;
            if lease_end.is_none_or(|lease_end| lease_end <= now_ms) {
                // Unknown, or expired: reclaimed, not released by its holder.
                self.reclaim_expired(db, keys, now_ms)?;
                return Ok(false);
            }
            // The count first, as the script does: a failed INCR keeps the lease.
            let value = db.incr(keys.name)?;
            db.zrem(keys.leases, permit_id)?;
            self.publish_locked(keys.channel, &value.to_string());
            Ok(true)
        })
    }

    fn expirable_available(&self, keys: &ExpirableKeys<'_>, now_ms: i64) -> Result<i64> {
        check_time_ms("now", now_ms)?;
        self.run(|db| {
            self.reclaim_expired(db, keys, now_ms)?;
            counter_number(keys.name, db.get(keys.name)?.as_deref().unwrap_or("0"))
        })
    }

    fn latch_count_down(&self, name: &str, channel: &str) -> Result<i64> {
        self.run(|db| {
            let value = db.decr(name)?;
            if value <= 0 {
                db.del(name);
            }
            if value == 0 {
                self.publish_locked(channel, LATCH_ZERO_MESSAGE);
            }
            Ok(value)
        })
    }

    fn latch_delete(&self, name: &str, channel: &str) -> Result<bool> {
        self.run(|db| {
            // `DEL` deletes whatever the key holds.
            if db.del(name) {
                self.publish_locked(channel, LATCH_NEW_COUNT_MESSAGE);
                return Ok(true);
            }
            Ok(false)
        })
    }
}

impl MemoryBackend {
    /// Runs the Rust port of `call`'s script.
    fn dispatch(&self, call: &ScriptCall<'_>) -> Result<Reply> {
        let key = |i: usize| call.keys().get(i).map_or("", |key| key.as_ref());
        let arg = |i: usize| call.args().get(i).map_or("", |arg| arg.as_ref());
        let num = |i: usize| -> Result<i64> {
            arg(i).parse().map_err(|_| {
                Error::invalid("script argument", format!("{:?} is not an integer", arg(i)))
            })
        };
        let acquired = |outcome: Acquire| match outcome {
            Acquire::Acquired => Reply::Nil,
            Acquire::Held { ttl } => Reply::Int(pttl_of(ttl)),
        };
        let released = |outcome: Release| match outcome {
            Release::NotHeld => Reply::Nil,
            Release::StillHeld => Reply::Int(0),
            Release::Released => Reply::Int(1),
        };
        let flag = |value: bool| Reply::Int(i64::from(value));
        let name = key(0);
        let fair = || FairLockKeys {
            name,
            queue: key(1),
            timeouts: key(2),
            channel_prefix: key(3),
        };
        let rw_channel = crate::keys::rw_channel(name);
        let rw_key_prefix = crate::keys::rw_key_prefix(name);
        let expirable = || ExpirableKeys {
            name,
            leases: key(1),
            channel: key(2),
        };
        Ok(match call.script().id() {
            "lock_acquire" => acquired(self.lock_acquire(name, arg(1), num(0)?)?),
            "fenced_lock_acquire" => {
                match self.fenced_lock_acquire(name, key(1), arg(1), num(0)?)? {
                    FencedAcquire::Acquired { token } => Reply::Array(vec![
                        Reply::Int(-1),
                        Reply::Bulk(token.to_string().into_bytes()),
                    ]),
                    FencedAcquire::Held { ttl } => {
                        Reply::Array(vec![Reply::Int(pttl_of(ttl)), Reply::Int(-1)])
                    }
                }
            }
            "lock_renew" => flag(self.lock_renew(name, arg(1), num(0)?)?),
            "lock_release" => {
                released(self.lock_release(name, key(1), arg(2), num(1)?, key(2), num(3)?)?)
            }
            "lock_force_release" => flag(self.lock_force_release(name, key(1))?),
            "lock_state" => {
                let state = self.lock_state(name, arg(0))?;
                Reply::Array(vec![
                    Reply::Int(i64::from(state.locked)),
                    Reply::Int(i64::try_from(state.hold_count).unwrap_or(i64::MAX)),
                    Reply::Int(pttl_of(state.ttl)),
                ])
            }
            "fair_lock_acquire" => {
                let channel_prefix = crate::keys::lock_channel(name);
                let keys = FairLockKeys {
                    channel_prefix: &channel_prefix,
                    ..fair()
                };
                acquired(self.fair_lock_acquire(
                    &keys,
                    arg(1),
                    num(0)?,
                    num(2)?,
                    num(3)?,
                    arg(4) == "1",
                )?)
            }
            "fair_lock_release" => released(self.fair_lock_release(
                &fair(),
                arg(2),
                num(1)?,
                num(3)?,
                key(4),
                num(4)?,
            )?),
            "fair_lock_cancel" => {
                let keys = FairLockKeys {
                    name: "",
                    queue: key(0),
                    timeouts: key(1),
                    channel_prefix: "",
                };
                self.fair_lock_cancel(&keys, arg(0), num(1)?)?;
                Reply::Int(0)
            }
            "fair_lock_force_release" => flag(self.fair_lock_force_release(&fair(), num(1)?)?),
            "read_lock_acquire" | "read_lock_renew" | "read_lock_release" => {
                let holder = arg(1);
                let write_field = format!("{holder}:write");
                let timeout_prefix = if call.script().id() == "read_lock_release" {
                    key(2)
                } else {
                    key(1)
                };
                let keys = RwLockKeys {
                    name,
                    channel: &rw_channel,
                    holder,
                    write_field: &write_field,
                    timeout_prefix,
                    key_prefix: &rw_key_prefix,
                };
                match call.script().id() {
                    "read_lock_acquire" => acquired(self.read_lock_acquire(&keys, num(0)?)?),
                    "read_lock_renew" => flag(self.read_lock_renew(&keys, num(0)?)?),
                    _ => released(self.read_lock_release(&keys, key(4), num(2)?)?),
                }
            }
            "write_lock_acquire" | "write_lock_release" => {
                let write_field = if call.script().id() == "write_lock_acquire" {
                    arg(1)
                } else {
                    arg(2)
                };
                let holder = write_field.strip_suffix(":write").unwrap_or(write_field);
                let timeout_prefix = crate::keys::rw_timeout_prefix(name, holder);
                let keys = RwLockKeys {
                    name,
                    channel: &rw_channel,
                    holder,
                    write_field,
                    timeout_prefix: &timeout_prefix,
                    key_prefix: &rw_key_prefix,
                };
                if call.script().id() == "write_lock_acquire" {
                    acquired(self.write_lock_acquire(&keys, num(0)?)?)
                } else {
                    released(self.write_lock_release(&keys, num(1)?, key(2), num(3)?)?)
                }
            }
            "rw_lock_force_release" => {
                let mode = if arg(0) == "read" {
                    RwMode::Read
                } else {
                    RwMode::Write
                };
                let keys = RwLockKeys {
                    name,
                    channel: key(1),
                    holder: "",
                    write_field: ":write",
                    timeout_prefix: "",
                    key_prefix: &rw_key_prefix,
                };
                flag(self.rw_lock_force_release(&keys, mode)?)
            }
            "rw_lock_state" => {
                let state = self.rw_lock_state(name, arg(0))?;
                Reply::Array(vec![
                    Reply::Bulk(state.mode.map_or("", RwMode::as_str).as_bytes().to_vec()),
                    Reply::Int(i64::try_from(state.hold_count).unwrap_or(i64::MAX)),
                    Reply::Int(pttl_of(state.ttl)),
                ])
            }
            "counter_set_if_absent" => {
                flag(self.counter_set_if_absent(name, key(1), num(0)?, arg(1))?)
            }
            "counter_get" => Reply::Int(self.counter_get(name)?),
            "semaphore_add" => Reply::Int(self.semaphore_add(name, key(1), num(0)?)?),
            "semaphore_try_acquire" => flag(self.semaphore_try_acquire(name, num(0)?)?),
            "semaphore_drain" => Reply::Int(self.semaphore_drain(name)?),
            "expirable_acquire" => {
                acquired(self.expirable_acquire(&expirable(), arg(0), num(1)?, num(2)?)?)
            }
            "expirable_release" => flag(self.expirable_release(&expirable(), arg(0), num(1)?)?),
            "expirable_available" => Reply::Int(self.expirable_available(&expirable(), num(0)?)?),
            "latch_count_down" => Reply::Int(self.latch_count_down(name, key(1))?),
            "latch_delete" => flag(self.latch_delete(name, key(1))?),
            other => Reply::Error(format!("ERR unknown script {other:?}")),
        })
    }
}

/// A TTL as PTTL reports it (-1: no expiry).
fn pttl_of(ttl: Option<Duration>) -> i64 {
    ttl.map_or(-1, |ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

impl LockBackend for MemoryBackend {
    fn run_script(&self, call: &ScriptCall<'_>) -> Result<Reply> {
        match self.dispatch(call) {
            Ok(reply) => Ok(reply),
            Err(Error::InvalidArgument { what, why }) => {
                if call.script().id() == "write_lock_acquire" {
                    return Ok(Reply::Int(-3));
                }
                Ok(Reply::Error(format!("ERR invalid {what}: {why}")))
            }
            Err(Error::Protocol { detail }) if detail.contains("WRONGTYPE") => {
                Ok(Reply::Error(format!("WRONGTYPE {detail}")))
            }
            Err(Error::Protocol { detail }) => Ok(Reply::Error(format!("ERR {detail}"))),
            Err(other) => Err(other),
        }
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

    /// Keys stored, expired or not (what the process holds in memory).
    fn stored(backend: &MemoryBackend) -> usize {
        backend.inner.keys.lock().map.len()
    }

    /// The expiry index lists exactly the keys that have an expiry.
    fn assert_index_exact(backend: &MemoryBackend) {
        let keys = backend.inner.keys.lock();
        let expected: BTreeSet<(Instant, String)> = keys
            .map
            .iter()
            .filter_map(|(key, entry)| entry.expires_at.map(|at| (at, key.clone())))
            .collect();
        assert_eq!(keys.expiries, expected);
    }

    #[test]
    fn expired_keys_are_dropped_without_being_touched_again() {
        const CYCLES: usize = 10_000;
        // Long enough that the loop ends before the first latch expires,
        // even on a loaded machine (a debug build runs it in well under 1 s).
        const LATCH_MS: i64 = 3_000;
        let backend = MemoryBackend::new();
        for i in 0..CYCLES {
            let name = format!("l{}", i % 10);
            assert!(
                backend
                    .lock_acquire(&name, "a:1", LEASE)
                    .unwrap()
                    .is_acquired()
            );
            let latch = format!("redisson_unlock_latch:{{{name}}}:{i}");
            let released = backend
                .lock_release(&name, CHANNEL, "a:1", LEASE, &latch, LATCH_MS)
                .unwrap();
            assert_eq!(released, Release::Released);
        }
        // Every unlock left its latch (most of the 3 s have not passed
        // yet), so the test below measures something.
        let before = stored(&backend);
        assert!(before > CYCLES / 2, "only {before} latches stored");
        assert_index_exact(&backend);
        thread::sleep(Duration::from_millis(3_100));
        // No latch is touched again; any script runs the active expiry.
        backend.lock_state("elsewhere", "a:1").unwrap();
        let after = stored(&backend);
        assert!(after < 100, "{after} keys stored after the latches expired");
        assert_eq!(after, 0);
        assert_index_exact(&backend);
    }

    #[test]
    fn an_idle_store_shrinks_too() {
        let backend = MemoryBackend::new();
        for i in 0..100 {
            let latch = format!("redisson_unlock_latch:{{l}}:{i}");
            backend.lock_acquire("l", "a:1", LEASE).unwrap();
            backend
                .lock_release("l", CHANNEL, "a:1", LEASE, &latch, 100)
                .unwrap();
        }
        backend.lock_acquire("kept", "a:1", LEASE).unwrap();
        assert!(stored(&backend) > 50);
        // No call from here on: only the sweeper thread can drop them.
        let deadline = Instant::now() + Duration::from_secs(10);
        while stored(&backend) > 1 {
            assert!(Instant::now() < deadline, "{} keys", stored(&backend));
            thread::sleep(Duration::from_millis(50));
        }
        assert_index_exact(&backend);
        assert!(backend.lock_state("kept", "a:1").unwrap().locked);
    }

    #[test]
    fn expiry_index_follows_every_change_of_expiry() {
        let backend = MemoryBackend::new();
        backend.lock_acquire("l", "a:1", LEASE).unwrap();
        // Renewals replace the deadline: the index keeps one entry per key.
        for _ in 0..1_000 {
            assert!(backend.lock_renew("l", "a:1", LEASE).unwrap());
        }
        assert_eq!(backend.inner.keys.lock().expiries.len(), 1);
        // SET without PX clears it; a deleted key leaves the index.
        backend.set_string("l", "x");
        assert_index_exact(&backend);
        assert!(backend.inner.keys.lock().expiries.is_empty());
        backend.lock_acquire("m", "a:1", 30).unwrap();
        assert!(backend.lock_force_release("m", CHANNEL).unwrap());
        assert_index_exact(&backend);
        backend.lock_acquire("n", "a:1", 30).unwrap();
        assert_eq!(backend.inner.keys.lock().expiries.len(), 1);
        thread::sleep(Duration::from_millis(60));
        // len() expires too (and counts only live keys).
        assert_eq!(backend.len(), 1);
        assert_index_exact(&backend);
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
            fields.insert("a:1".to_owned(), i64::MAX.to_string());
        }
        assert!(
            backend
                .lock_acquire("l", "a:1", LEASE)
                .unwrap_err()
                .is_protocol_error()
        );
    }

    #[test]
    fn leases_past_the_longest_are_refused_before_any_write() {
        let backend = MemoryBackend::new();
        for lease in [i64::MAX, MAX_LEASE_MS + 1, 0, -1] {
            let err = backend.lock_acquire("l", "a:1", lease).unwrap_err();
            assert!(err.is_invalid_argument(), "{lease}: {err}");
            assert!(backend.is_empty(), "{lease}");
        }
        assert!(
            backend
                .lock_acquire("l", "a:1", MAX_LEASE_MS)
                .unwrap()
                .is_acquired()
        );
        let state = backend.lock_state("l", "a:1").unwrap();
        assert!(state.locked && state.ttl.is_some_and(|ttl| ttl > Duration::ZERO));
    }

    // ---- Redis command semantics (`Db`) ----

    #[test]
    fn db_follows_redis_command_semantics() {
        let backend = MemoryBackend::new();
        backend
            .run(|db| {
                assert_eq!(db.pttl("k"), -2);
                db.pexpire("k", 1_000); // a missing key: nothing
                assert!(!db.exists("k"));
                db.set_px("k", "v", 30_000);
                assert!(db.pttl("k") > 29_000);
                db.set("k", "w"); // SET clears the expiry
                assert_eq!(db.pttl("k"), -1);
                assert_eq!(db.get("k")?.as_deref(), Some("w"));

                assert_eq!(db.rpush("q", "a")?, 1);
                assert_eq!(db.rpush("q", "b")?, 2);
                db.rpush("q", "a")?;
                assert_eq!(db.lindex("q", -1)?.as_deref(), Some("a"));
                assert_eq!(db.lindex("q", -3)?.as_deref(), Some("a"));
                assert_eq!(db.lindex("q", -4)?, None);
                assert_eq!(db.lindex("q", 3)?, None);
                assert_eq!(db.lindex("q", i64::MIN)?, None);
                assert_eq!(db.lrem_all("q", "a")?, 2);
                assert_eq!(db.lpop("q")?.as_deref(), Some("b"));
                assert!(!db.exists("q"), "an emptied list ceases to exist");
                assert_eq!(db.lpop("q")?, None);

                assert_eq!(db.zincrby("z", -5, "m")?, -5); // created if absent
                assert!(db.zadd("z", 7, "n")?);
                assert!(!db.zadd("z", 3, "n")?);
                assert_eq!(db.zrange_all("z")?, ["m", "n"]);
                assert!(db.zrem("z", "m")? && db.zrem("z", "n")?);
                assert!(!db.exists("z"), "an emptied sorted set ceases to exist");

                assert_eq!(db.hincrby("h", "f", 1)?, 1);
                db.hset("h", "mode", "read")?;
                assert!(db.hincrby("h", "mode", 1).unwrap_err().is_protocol_error());
                assert_eq!(db.hlen("h")?, 2);
                assert!(db.hdel("h", "f")? && db.hdel("h", "mode")?);
                assert!(!db.exists("h"), "an emptied hash ceases to exist");
                assert_eq!(db.hlen("h")?, 0);

                // A fresh container left empty by a failed command is not kept.
                db.set("s", "x");
                assert!(db.hset("s", "f", "1").is_err());
                assert_eq!(db.get("s")?.as_deref(), Some("x"));
                Ok(())
            })
            .unwrap();
        assert_eq!(backend.len(), 2); // "k" and "s"
    }

    // ---- Fair lock ----

    const FAIR: FairLockKeys<'static> = FairLockKeys {
        name: "f",
        queue: "redisson_lock_queue:{f}",
        timeouts: "redisson_lock_timeout:{f}",
        channel_prefix: "redisson_lock__channel:{f}",
    };
    /// The callers' wall clock (any value: slots are relative to it).
    const NOW: i64 = 1_000_000;
    const WAIT: i64 = 5_000;

    fn fair_acquire(backend: &MemoryBackend, holder: &str, now_ms: i64) -> Acquire {
        backend
            .fair_lock_acquire(&FAIR, holder, LEASE, WAIT, now_ms, true)
            .unwrap()
    }

    fn fair_release(backend: &MemoryBackend, holder: &str, latch: &str) -> Release {
        backend
            .fair_lock_release(&FAIR, holder, LEASE, NOW, latch, 5_000)
            .unwrap()
    }

    fn queue(backend: &MemoryBackend) -> Vec<String> {
        backend.run(|db| db.lrange_all(FAIR.queue)).unwrap()
    }

    fn slot(backend: &MemoryBackend, waiter: &str) -> Option<i64> {
        backend.run(|db| db.zscore(FAIR.timeouts, waiter)).unwrap()
    }

    fn live(backend: &MemoryBackend, key: &str) -> bool {
        backend.run(|db| Ok(db.exists(key))).unwrap()
    }

    fn millis(ms: i64) -> Duration {
        Duration::from_millis(u64::try_from(ms).unwrap())
    }

    fn three_waiters_behind_an_owner(backend: &MemoryBackend) -> [i64; 3] {
        assert_eq!(fair_acquire(backend, "o:1", NOW), Acquire::Acquired);
        for waiter in ["a:1", "b:1", "c:1"] {
            match fair_acquire(backend, waiter, NOW) {
                Acquire::Held { ttl: Some(ttl) } => assert!(ttl > Duration::from_millis(29_000)),
                other => panic!("{waiter}: expected Held with a wait, got {other:?}"),
            }
        }
        assert_eq!(queue(backend), ["a:1", "b:1", "c:1"]);
        ["a:1", "b:1", "c:1"].map(|waiter| slot(backend, waiter).unwrap())
    }

    #[test]
    fn fair_lock_grants_three_waiters_in_fifo_order() {
        let backend = MemoryBackend::new();
        let [a, b, c] = three_waiters_behind_an_owner(&backend);
        // Each slot lasts the allowance past the slot ahead.
        assert!(a > NOW + 29_000 && a <= NOW + LEASE + WAIT);
        assert_eq!((b - a, c - b), (WAIT, WAIT));
        // Polling again waits for the slot ahead, without joining twice.
        assert_eq!(
            fair_acquire(&backend, "b:1", NOW),
            Acquire::Held {
                ttl: Some(millis(b - WAIT - NOW))
            }
        );
        assert_eq!(queue(&backend).len(), 3);
        // The owner re-enters.
        assert_eq!(fair_acquire(&backend, "o:1", NOW), Acquire::Acquired);
        assert_eq!(fair_release(&backend, "o:1", "l1"), Release::StillHeld);
        assert_eq!(fair_release(&backend, "o:1", "l2"), Release::Released);

        // Free, but only the head may take it.
        assert!(!fair_acquire(&backend, "c:1", NOW).is_acquired());
        assert!(!fair_acquire(&backend, "b:1", NOW).is_acquired());
        assert_eq!(fair_acquire(&backend, "a:1", NOW), Acquire::Acquired);
        assert_eq!(queue(&backend), ["b:1", "c:1"]);
        // Everyone behind moved up one slot.
        assert_eq!(slot(&backend, "a:1"), None);
        assert_eq!(slot(&backend, "b:1"), Some(b - WAIT));
        assert_eq!(slot(&backend, "c:1"), Some(c - WAIT));
        assert_eq!(backend.lock_state("f", "a:1").unwrap().hold_count, 1);

        assert_eq!(fair_release(&backend, "a:1", "l3"), Release::Released);
        assert!(!fair_acquire(&backend, "c:1", NOW).is_acquired());
        assert_eq!(fair_acquire(&backend, "b:1", NOW), Acquire::Acquired);
        assert_eq!(fair_release(&backend, "b:1", "l4"), Release::Released);
        assert_eq!(fair_acquire(&backend, "c:1", NOW), Acquire::Acquired);
        // The queue and the slots are gone with their last member.
        assert!(!live(&backend, FAIR.queue));
        assert!(!live(&backend, FAIR.timeouts));
    }

    #[test]
    fn fair_lock_evicts_waiters_whose_slot_passed() {
        let backend = MemoryBackend::new();
        assert_eq!(fair_acquire(&backend, "o:1", NOW), Acquire::Acquired);
        assert!(!fair_acquire(&backend, "a:1", NOW).is_acquired());
        assert!(
            !backend
                .fair_lock_acquire(&FAIR, "b:1", LEASE, 60_000, NOW, true)
                .unwrap()
                .is_acquired()
        );
        let a = slot(&backend, "a:1").unwrap();
        assert_eq!(slot(&backend, "b:1"), Some(a + 60_000));
        assert_eq!(fair_release(&backend, "o:1", "l1"), Release::Released);
        // Just before a's deadline, a is still the head.
        assert!(!fair_acquire(&backend, "b:1", a - 1).is_acquired());
        assert_eq!(queue(&backend), ["a:1", "b:1"]);
        // At its deadline a is evicted (it never came back), and b is first.
        assert_eq!(fair_acquire(&backend, "b:1", a), Acquire::Acquired);
        assert_eq!(slot(&backend, "a:1"), None);
        assert!(!live(&backend, FAIR.queue));
        // The evicted waiter queues again at the tail when it returns.
        assert!(!fair_acquire(&backend, "a:1", a).is_acquired());
        assert_eq!(queue(&backend), ["a:1"]);
        // Force release evicts too: a's new slot has passed far later.
        assert!(
            backend
                .fair_lock_force_release(&FAIR, crate::error::MAX_TIME_MS)
                .unwrap()
        );
        assert!(!live(&backend, FAIR.queue));
        assert_eq!(backend.len(), 1); // the latch
    }

    #[test]
    fn fair_lock_cancel_moves_later_slots_up() {
        let backend = MemoryBackend::new();
        let [a, _, c] = three_waiters_behind_an_owner(&backend);
        backend.fair_lock_cancel(&FAIR, "b:1", WAIT).unwrap();
        assert_eq!(queue(&backend), ["a:1", "c:1"]);
        assert_eq!(slot(&backend, "a:1"), Some(a));
        assert_eq!(slot(&backend, "b:1"), None);
        assert_eq!(slot(&backend, "c:1"), Some(c - WAIT));
        // Someone not queued: nothing moves.
        backend.fair_lock_cancel(&FAIR, "x:1", WAIT).unwrap();
        assert_eq!(slot(&backend, "c:1"), Some(c - WAIT));
        backend.fair_lock_cancel(&FAIR, "a:1", WAIT).unwrap();
        backend.fair_lock_cancel(&FAIR, "c:1", WAIT).unwrap();
        assert!(!live(&backend, FAIR.queue));
        assert!(!live(&backend, FAIR.timeouts));
        assert_eq!(backend.len(), 1); // the lock
    }

    #[test]
    fn fair_try_lock_does_not_join_the_queue() {
        let backend = MemoryBackend::new();
        assert_eq!(fair_acquire(&backend, "o:1", NOW), Acquire::Acquired);
        let tried = backend
            .fair_lock_acquire(&FAIR, "x:1", LEASE, WAIT, NOW, false)
            .unwrap();
        match tried {
            Acquire::Held { ttl: Some(ttl) } => assert!(ttl > Duration::from_millis(29_000)),
            other => panic!("expected Held with the lock's TTL, got {other:?}"),
        }
        assert!(!live(&backend, FAIR.queue));
        assert!(!live(&backend, FAIR.timeouts));
        // Free, but someone else is first: refused, try again in 1 ms.
        assert!(!fair_acquire(&backend, "a:1", NOW).is_acquired());
        assert_eq!(fair_release(&backend, "o:1", "l1"), Release::Released);
        let tried = backend
            .fair_lock_acquire(&FAIR, "x:1", LEASE, WAIT, NOW, false)
            .unwrap();
        assert_eq!(
            tried,
            Acquire::Held {
                ttl: Some(Duration::from_millis(1))
            }
        );
        assert_eq!(queue(&backend), ["a:1"]);
    }

    #[test]
    fn fair_release_tells_the_head_waiter() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        let channel = |waiter: &str| format!("{}:{waiter}", FAIR.channel_prefix);
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&[channel("a:1"), channel("b:1")])?;
                three_waiters_behind_an_owner(&other);
                assert_eq!(fair_acquire(&other, "o:1", NOW), Acquire::Acquired);
                assert_eq!(fair_release(&other, "o:1", "l1"), Release::StillHeld);
                assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
                assert_eq!(fair_release(&other, "o:1", "l2"), Release::Released);
                assert_eq!(
                    conn.next_message(Duration::from_secs(5))?,
                    Some(Message::new(channel("a:1"), "0"))
                );
                // A replay is answered by the latch, without a second message.
                assert_eq!(fair_release(&other, "o:1", "l2"), Release::Released);
                assert_eq!(fair_release(&other, "x:1", "l3"), Release::Released);
                assert_eq!(
                    conn.next_message(Duration::from_secs(5))?,
                    Some(Message::new(channel("a:1"), "0"))
                );
                assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
                // Force release tells the new head.
                assert_eq!(fair_acquire(&other, "a:1", NOW), Acquire::Acquired);
                assert!(other.fair_lock_force_release(&FAIR, NOW)?);
                assert_eq!(
                    conn.next_message(Duration::from_secs(5))?,
                    Some(Message::new(channel("b:1"), "0"))
                );
                assert!(!other.fair_lock_force_release(&FAIR, NOW)?);
                assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn fair_release_of_an_absent_lock_is_released() {
        let backend = MemoryBackend::new();
        assert_eq!(fair_release(&backend, "x:1", "l1"), Release::Released);
        assert_eq!(backend.len(), 1); // the latch
        assert_eq!(fair_acquire(&backend, "o:1", NOW), Acquire::Acquired);
        assert_eq!(fair_release(&backend, "x:1", "l2"), Release::NotHeld);
        assert_eq!(fair_release(&backend, "o:1", "l3"), Release::Released);
    }

    // ---- Read-write lock ----

    const RW_CHANNEL: &str = "redisson_rwlock:{rw}";

    /// One holder's keys on the read-write lock `rw`.
    struct Rw {
        holder: String,
        write_field: String,
        timeout_prefix: String,
    }

    impl Rw {
        fn new(holder: &str) -> Self {
            Rw {
                holder: holder.to_owned(),
                write_field: format!("{holder}:write"),
                timeout_prefix: format!("{{rw}}:{holder}:rwlock_timeout"),
            }
        }

        fn keys(&self) -> RwLockKeys<'_> {
            RwLockKeys {
                name: "rw",
                channel: RW_CHANNEL,
                holder: &self.holder,
                write_field: &self.write_field,
                timeout_prefix: &self.timeout_prefix,
                key_prefix: "{rw}",
            }
        }

        fn hold_key(&self, n: i64) -> String {
            read_hold_key(&self.timeout_prefix, n)
        }

        fn read(&self, backend: &MemoryBackend, lease_ms: i64) -> Acquire {
            backend.read_lock_acquire(&self.keys(), lease_ms).unwrap()
        }

        fn write(&self, backend: &MemoryBackend, lease_ms: i64) -> Acquire {
            backend.write_lock_acquire(&self.keys(), lease_ms).unwrap()
        }

        fn unread(&self, backend: &MemoryBackend, latch: &str) -> Release {
            backend
                .read_lock_release(&self.keys(), latch, 5_000)
                .unwrap()
        }

        fn unwrite(&self, backend: &MemoryBackend, latch: &str) -> Release {
            backend
                .write_lock_release(&self.keys(), LEASE, latch, 5_000)
                .unwrap()
        }

        fn state(&self, backend: &MemoryBackend, field: &str) -> RwLockState {
            backend.rw_lock_state("rw", field).unwrap()
        }
    }

    #[test]
    fn read_holds_are_shared() {
        let backend = MemoryBackend::new();
        let (a, b) = (Rw::new("a:1"), Rw::new("b:1"));
        assert_eq!(a.read(&backend, LEASE), Acquire::Acquired);
        assert_eq!(b.read(&backend, LEASE), Acquire::Acquired);
        assert_eq!(a.read(&backend, LEASE), Acquire::Acquired);
        let state = a.state(&backend, &a.holder);
        assert_eq!((state.mode, state.hold_count), (Some(RwMode::Read), 2));
        assert!(state.ttl.unwrap() > Duration::from_millis(29_000));
        assert_eq!(b.state(&backend, &b.holder).hold_count, 1);
        // Each hold is its own key.
        for key in [a.hold_key(1), a.hold_key(2), b.hold_key(1)] {
            assert!(live(&backend, &key), "{key}");
        }
        assert_eq!(a.hold_key(2), "{rw}:a:1:rwlock_timeout:2");
        assert_eq!(backend.len(), 4);
        assert_eq!(
            backend.rw_lock_state("free", "a:1").unwrap(),
            RwLockState::default()
        );
    }

    #[test]
    fn writer_waits_for_readers_and_readers_for_a_writer() {
        let backend = MemoryBackend::new();
        let (a, b, w) = (Rw::new("a:1"), Rw::new("b:1"), Rw::new("w:1"));
        assert_eq!(a.read(&backend, LEASE), Acquire::Acquired);
        match w.write(&backend, LEASE) {
            Acquire::Held { ttl: Some(ttl) } => assert!(ttl > Duration::from_millis(29_000)),
            other => panic!("expected Held with the TTL, got {other:?}"),
        }
        assert_eq!(a.unread(&backend, "l1"), Release::Released);
        assert_eq!(w.write(&backend, LEASE), Acquire::Acquired);
        assert!(!b.read(&backend, LEASE).is_acquired());
        assert!(!a.write(&backend, LEASE).is_acquired());
        assert_eq!(b.unwrite(&backend, "l2"), Release::NotHeld);
        assert_eq!(b.unread(&backend, "l3"), Release::NotHeld);
    }

    #[test]
    fn write_reentry_adds_the_lease() {
        let backend = MemoryBackend::new();
        let w = Rw::new("w:1");
        assert_eq!(w.write(&backend, 10_000), Acquire::Acquired);
        let first = w.state(&backend, &w.write_field).ttl.unwrap();
        assert!(first <= Duration::from_millis(10_000) && first > Duration::from_millis(9_000));
        assert_eq!(w.write(&backend, 10_000), Acquire::Acquired);
        let state = w.state(&backend, &w.write_field);
        assert_eq!((state.mode, state.hold_count), (Some(RwMode::Write), 2));
        assert!(state.ttl.unwrap() > Duration::from_millis(19_000));
        assert!(state.ttl.unwrap() <= Duration::from_millis(20_000));
        // One release resets the TTL to the lease.
        assert_eq!(w.unwrite(&backend, "l1"), Release::StillHeld);
        assert!(w.state(&backend, &w.write_field).ttl.unwrap() > Duration::from_millis(29_000));
    }

    #[test]
    fn writer_may_read_and_write_release_downgrades() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        let (w, b) = (Rw::new("w:1"), Rw::new("b:1"));
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to(RW_CHANNEL))?;
                assert_eq!(w.write(&other, LEASE), Acquire::Acquired);
                assert_eq!(w.read(&other, LEASE), Acquire::Acquired);
                assert_eq!(w.read(&other, LEASE), Acquire::Acquired);
                assert_eq!(w.state(&other, &w.write_field).mode, Some(RwMode::Write));
                assert_eq!(w.state(&other, &w.holder).hold_count, 2);
                assert!(!b.read(&other, LEASE).is_acquired());
                // A read release while the holder writes: still held.
                assert_eq!(w.unread(&other, "l1"), Release::StillHeld);
                assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
                assert_eq!(w.unwrite(&other, "l2"), Release::Released);
                assert_eq!(
                    conn.next_message(Duration::from_secs(5))?,
                    Some(Message::new(RW_CHANNEL, "1"))
                );
                let state = w.state(&other, &w.holder);
                assert_eq!((state.mode, state.hold_count), (Some(RwMode::Read), 1));
                assert_eq!(w.state(&other, &w.write_field).hold_count, 0);
                assert_eq!(b.read(&other, LEASE), Acquire::Acquired);
                assert_eq!(w.unwrite(&other, "l3"), Release::NotHeld);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn read_to_write_upgrade_is_an_invalid_argument() {
        let backend = MemoryBackend::new();
        let a = Rw::new("a:1");
        assert_eq!(a.read(&backend, LEASE), Acquire::Acquired);
        let err = backend.write_lock_acquire(&a.keys(), LEASE).unwrap_err();
        assert!(err.is_invalid_argument(), "{err}");
        let state = a.state(&backend, &a.holder);
        assert_eq!((state.mode, state.hold_count), (Some(RwMode::Read), 1));
    }

    #[test]
    fn last_read_release_publishes_and_deletes_the_hold_keys() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        let a = Rw::new("a:1");
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to(RW_CHANNEL))?;
                assert_eq!(a.read(&other, LEASE), Acquire::Acquired);
                assert_eq!(a.read(&other, LEASE), Acquire::Acquired);
                assert_eq!(a.unread(&other, "l1"), Release::StillHeld);
                assert!(live(&other, &a.hold_key(1)) && !live(&other, &a.hold_key(2)));
                assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
                assert_eq!(a.unread(&other, "l2"), Release::Released);
                assert_eq!(
                    conn.next_message(Duration::from_secs(5))?,
                    Some(Message::new(RW_CHANNEL, "0"))
                );
                assert!(!live(&other, &a.hold_key(1)) && !live(&other, "rw"));
                assert_eq!(other.len(), 2); // the two latches
                assert_eq!(a.unread(&other, "l2"), Release::Released);
                assert_eq!(a.unread(&other, "l3"), Release::NotHeld);
                assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_dead_readers_hold_expires_while_another_renews() {
        let backend = MemoryBackend::new();
        let (dead, alive) = (Rw::new("dead:1"), Rw::new("alive:1"));
        assert_eq!(dead.read(&backend, 40), Acquire::Acquired);
        assert_eq!(alive.read(&backend, 40), Acquire::Acquired);
        assert!(backend.read_lock_renew(&alive.keys(), LEASE).unwrap());
        assert!(
            !backend
                .read_lock_renew(&Rw::new("x:1").keys(), LEASE)
                .unwrap()
        );
        thread::sleep(Duration::from_millis(80));
        assert!(!live(&backend, &dead.hold_key(1)));
        assert!(live(&backend, &alive.hold_key(1)));
        let state = alive.state(&backend, &alive.holder);
        assert_eq!(state.mode, Some(RwMode::Read));
        assert!(state.ttl.unwrap() > Duration::from_millis(29_000));
        // The dead reader's field remains, but its expired hold does not keep
        // the lock: the live reader's release frees it.
        assert_eq!(dead.state(&backend, &dead.holder).hold_count, 1);
        assert_eq!(alive.unread(&backend, "l1"), Release::Released);
        assert!(!live(&backend, "rw"));
    }

    #[test]
    fn rw_force_release_only_in_the_held_mode() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        let (a, w) = (Rw::new("a:1"), Rw::new("w:1"));
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to(RW_CHANNEL))?;
                assert!(!other.rw_lock_force_release(&a.keys(), RwMode::Read)?);
                assert_eq!(a.read(&other, LEASE), Acquire::Acquired);
                assert!(!other.rw_lock_force_release(&a.keys(), RwMode::Write)?);
                assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
                assert!(other.rw_lock_force_release(&a.keys(), RwMode::Read)?);
                assert_eq!(
                    conn.next_message(Duration::from_secs(5))?,
                    Some(Message::new(RW_CHANNEL, "0"))
                );
                assert_eq!(a.state(&other, &a.holder).mode, None);
                assert_eq!(w.write(&other, LEASE), Acquire::Acquired);
                assert!(!other.rw_lock_force_release(&a.keys(), RwMode::Read)?);
                assert!(other.rw_lock_force_release(&a.keys(), RwMode::Write)?);
                assert_eq!(
                    conn.next_message(Duration::from_secs(5))?,
                    Some(Message::new(RW_CHANNEL, "1"))
                );
                assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn wrongtype_on_every_type_mismatch() {
        let backend = MemoryBackend::new();
        three_waiters_behind_an_owner(&backend);
        let reader = Rw::new("a:1");
        assert_eq!(reader.read(&backend, LEASE), Acquire::Acquired);
        let before = backend.len();
        let queue_is_a_hash = FairLockKeys {
            queue: FAIR.name,
            ..FAIR
        };
        let slots_are_a_list = FairLockKeys {
            timeouts: FAIR.queue,
            ..FAIR
        };
        let hold_key = reader.hold_key(1);
        let queue_is_a_string = FairLockKeys {
            queue: &hold_key,
            ..FAIR
        };
        let name_is_a_zset = RwLockKeys {
            name: FAIR.timeouts,
            ..reader.keys()
        };
        let errors = [
            (
                FAIR.queue,
                backend.lock_acquire(FAIR.queue, "o:1", LEASE).unwrap_err(),
            ),
            (
                FAIR.timeouts,
                backend.lock_state(FAIR.timeouts, "o:1").unwrap_err(),
            ),
            (
                FAIR.queue,
                backend.rw_lock_state(FAIR.queue, "o:1").unwrap_err(),
            ),
            (
                FAIR.timeouts,
                backend
                    .read_lock_acquire(&name_is_a_zset, LEASE)
                    .unwrap_err(),
            ),
            (
                FAIR.timeouts,
                backend
                    .write_lock_acquire(&name_is_a_zset, LEASE)
                    .unwrap_err(),
            ),
            (
                FAIR.name,
                backend
                    .fair_lock_acquire(&queue_is_a_hash, "x:1", LEASE, WAIT, NOW, true)
                    .unwrap_err(),
            ),
            (
                FAIR.queue,
                backend
                    .fair_lock_acquire(&slots_are_a_list, "x:1", LEASE, WAIT, NOW, true)
                    .unwrap_err(),
            ),
            (
                hold_key.as_str(),
                backend
                    .fair_lock_cancel(&queue_is_a_string, "a:1", WAIT)
                    .unwrap_err(),
            ),
            (
                hold_key.as_str(),
                backend
                    .fair_lock_release(
                        &FairLockKeys {
                            name: &hold_key,
                            ..FAIR
                        },
                        "o:1",
                        LEASE,
                        NOW,
                        "l",
                        5_000,
                    )
                    .unwrap_err(),
            ),
            (
                FAIR.queue,
                backend
                    .lock_release("x", CHANNEL, "a:1", LEASE, FAIR.queue, 5_000)
                    .unwrap_err(),
            ),
        ];
        for (key, err) in errors {
            assert!(err.is_protocol_error(), "{err}");
            assert!(err.to_string().contains("WRONGTYPE"), "{err}");
            assert!(err.to_string().contains(&format!("{key:?}")), "{err}");
        }
        // Nothing was changed on the way.
        assert_eq!(backend.len(), before);
        assert_eq!(queue(&backend), ["a:1", "b:1", "c:1"]);
    }

    // ---- Counters: semaphore and count-down latch ----

    const SEMAPHORE_CHANNEL: &str = "redisson_sc:{s}";
    const LATCH_CHANNEL: &str = "redisson_countdownlatch__channel__{l}";

    /// The next message, or `None` after a short wait.
    fn next(conn: &mut dyn PubSubConnection) -> Option<Message> {
        conn.next_message(Duration::from_millis(20)).unwrap()
    }

    fn pttl(backend: &MemoryBackend, key: &str) -> i64 {
        backend.run(|db| Ok(db.pttl(key))).unwrap()
    }

    #[test]
    fn counter_set_if_absent_sets_once_and_publishes() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to(SEMAPHORE_CHANNEL))?;
                assert_eq!(other.counter_get("s")?, 0);
                assert!(!live(&other, "s"), "reading creates nothing");
                assert!(other.counter_set_if_absent("s", SEMAPHORE_CHANNEL, 3, "3")?);
                assert_eq!(next(conn), Some(Message::new(SEMAPHORE_CHANNEL, "3")));
                assert!(!other.counter_set_if_absent("s", SEMAPHORE_CHANNEL, 5, "5")?);
                assert_eq!(next(conn), None);
                assert_eq!(other.counter_get("s")?, 3);
                assert_eq!(pttl(&other, "s"), -1);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn semaphore_add_publishes_the_new_count_only_when_positive() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to(SEMAPHORE_CHANNEL))?;
                assert_eq!(other.semaphore_add("s", SEMAPHORE_CHANNEL, 2)?, 2);
                assert_eq!(next(conn), Some(Message::new(SEMAPHORE_CHANNEL, "2")));
                assert_eq!(other.semaphore_add("s", SEMAPHORE_CHANNEL, -5)?, -3);
                assert_eq!(next(conn), None);
                assert_eq!(other.counter_get("s")?, -3);
                assert_eq!(other.semaphore_add("s", SEMAPHORE_CHANNEL, 14)?, 11);
                assert_eq!(next(conn), Some(Message::new(SEMAPHORE_CHANNEL, "11")));
                assert_eq!(other.semaphore_add("s", SEMAPHORE_CHANNEL, 0)?, 11);
                assert_eq!(next(conn), None);
                assert_eq!(pttl(&other, "s"), -1);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn semaphore_add_fails_like_incrby_on_overflow_and_non_integers() {
        let backend = MemoryBackend::new();
        backend.set_string("s", &i64::MAX.to_string());
        let err = backend
            .semaphore_add("s", SEMAPHORE_CHANNEL, 1)
            .unwrap_err();
        assert!(err.is_protocol_error(), "{err}");
        assert!(err.to_string().contains("overflow"), "{err}");
        assert_eq!(backend.counter_get("s").unwrap(), i64::MAX);
        backend.set_string("s", &i64::MIN.to_string());
        assert!(backend.semaphore_add("s", SEMAPHORE_CHANNEL, -1).is_err());
        for bad in ["x", "1.5", "+1", "01", " 1", "-0", ""] {
            backend.set_string("s", bad);
            let err = backend
                .semaphore_add("s", SEMAPHORE_CHANNEL, 1)
                .unwrap_err();
            assert!(err.is_protocol_error(), "{bad:?}: {err}");
            assert!(err.to_string().contains("not an integer"), "{bad:?}: {err}");
        }
        // Lua's `tonumber` of a non-number is a script error, not a panic.
        backend.set_string("s", "x");
        assert!(backend.counter_get("s").unwrap_err().is_protocol_error());
        assert!(
            backend
                .semaphore_try_acquire("s", 1)
                .unwrap_err()
                .is_protocol_error()
        );
    }

    #[test]
    fn semaphore_try_acquire_takes_only_when_enough() {
        let backend = MemoryBackend::new();
        assert!(!backend.semaphore_try_acquire("s", 1).unwrap());
        assert!(!live(&backend, "s"));
        backend.semaphore_add("s", SEMAPHORE_CHANNEL, 3).unwrap();
        assert!(backend.semaphore_try_acquire("s", 2).unwrap());
        assert_eq!(backend.counter_get("s").unwrap(), 1);
        assert!(!backend.semaphore_try_acquire("s", 2).unwrap());
        assert_eq!(backend.counter_get("s").unwrap(), 1);
        assert!(backend.semaphore_try_acquire("s", 1).unwrap());
        assert!(!backend.semaphore_try_acquire("s", 1).unwrap());
        assert_eq!(backend.counter_get("s").unwrap(), 0);
        backend.semaphore_add("s", SEMAPHORE_CHANNEL, -2).unwrap();
        assert!(!backend.semaphore_try_acquire("s", 1).unwrap());
        assert_eq!(backend.counter_get("s").unwrap(), -2);
    }

    #[test]
    fn semaphore_drain_returns_and_zeroes() {
        let backend = MemoryBackend::new();
        assert_eq!(backend.semaphore_drain("s").unwrap(), 0);
        assert!(!live(&backend, "s"), "draining nothing creates nothing");
        backend.semaphore_add("s", SEMAPHORE_CHANNEL, 5).unwrap();
        assert_eq!(backend.semaphore_drain("s").unwrap(), 5);
        assert_eq!(backend.counter_get("s").unwrap(), 0);
        assert!(live(&backend, "s"), "the count stays, at 0");
        assert_eq!(backend.semaphore_drain("s").unwrap(), 0);
        backend.semaphore_add("s", SEMAPHORE_CHANNEL, -2).unwrap();
        assert_eq!(backend.semaphore_drain("s").unwrap(), -2);
        assert_eq!(backend.counter_get("s").unwrap(), 0);
    }

    // ---- Permit-expirable semaphore ----

    const EXPIRABLE: ExpirableKeys<'static> = ExpirableKeys {
        name: "e",
        leases: "{e}:timeout",
        channel: "redisson_sc:{e}",
    };

    fn lease_end(backend: &MemoryBackend, permit: &str) -> Option<i64> {
        backend
            .run(|db| db.zscore(EXPIRABLE.leases, permit))
            .unwrap()
    }

    #[test]
    fn expirable_acquire_records_the_lease_and_waits_for_the_earliest() {
        let backend = MemoryBackend::new();
        assert_eq!(
            backend
                .expirable_acquire(&EXPIRABLE, "p0", NOW + 100, NOW)
                .unwrap(),
            Acquire::Held { ttl: None },
            "no permits and no leases: no known wait"
        );
        assert!(
            backend
                .counter_set_if_absent(EXPIRABLE.name, EXPIRABLE.channel, 2, "2")
                .unwrap()
        );
        assert_eq!(
            backend
                .expirable_acquire(&EXPIRABLE, "p1", NOW + 1_000, NOW)
                .unwrap(),
            Acquire::Acquired
        );
        assert_eq!(
            backend
                .expirable_acquire(&EXPIRABLE, "p2", NOW + 500, NOW)
                .unwrap(),
            Acquire::Acquired
        );
        assert_eq!(lease_end(&backend, "p1"), Some(NOW + 1_000));
        assert_eq!(lease_end(&backend, "p2"), Some(NOW + 500));
        assert_eq!(backend.expirable_available(&EXPIRABLE, NOW).unwrap(), 0);
        assert_eq!(
            backend
                .expirable_acquire(&EXPIRABLE, "p3", NOW + 1_000, NOW)
                .unwrap(),
            Acquire::Held {
                ttl: Some(millis(500))
            }
        );
        assert_eq!(lease_end(&backend, "p3"), None);
        // Just before the earliest lease ends: at least 1 ms.
        assert_eq!(
            backend
                .expirable_acquire(&EXPIRABLE, "p3", NOW + 1_000, NOW + 499)
                .unwrap(),
            Acquire::Held {
                ttl: Some(millis(1))
            }
        );
        assert_eq!(pttl(&backend, EXPIRABLE.leases), -1);
    }

    #[test]
    fn expired_leases_are_reclaimed_and_announced() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to(EXPIRABLE.channel))?;
                other.semaphore_add(EXPIRABLE.name, EXPIRABLE.channel, 2)?;
                assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "2")));
                assert!(
                    other
                        .expirable_acquire(&EXPIRABLE, "p1", NOW + 1_000, NOW)?
                        .is_acquired()
                );
                assert!(
                    other
                        .expirable_acquire(&EXPIRABLE, "p2", NOW + 500, NOW)?
                        .is_acquired()
                );
                // Nothing expired yet: nothing published.
                assert_eq!(other.expirable_available(&EXPIRABLE, NOW + 499)?, 0);
                assert_eq!(next(conn), None);
                // A lease ending exactly now is over.
                assert_eq!(other.expirable_available(&EXPIRABLE, NOW + 500)?, 1);
                assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "1")));
                assert_eq!(lease_end(&other, "p2"), None);
                // The next acquire reclaims p1 (count 2, announced), then
                // takes one.
                assert!(
                    other
                        .expirable_acquire(&EXPIRABLE, "p3", NOW + 5_000, NOW + 1_000)?
                        .is_acquired()
                );
                assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "2")));
                assert_eq!(next(conn), None);
                assert_eq!(lease_end(&other, "p1"), None);
                assert_eq!(other.counter_get(EXPIRABLE.name)?, 1);
                // Every lease reclaimed: the lease set ceases to exist.
                assert_eq!(other.expirable_available(&EXPIRABLE, NOW + 5_000)?, 2);
                assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "2")));
                assert!(!live(&other, EXPIRABLE.leases));
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn reclaiming_into_a_negative_count_publishes_nothing() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to(EXPIRABLE.channel))?;
                other.run(|db| db.zadd(EXPIRABLE.leases, NOW, "p1"))?;
                other.semaphore_add(EXPIRABLE.name, EXPIRABLE.channel, -3)?;
                assert_eq!(other.expirable_available(&EXPIRABLE, NOW)?, -2);
                assert_eq!(next(conn), None);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn expirable_release_returns_only_a_live_permit() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to(EXPIRABLE.channel))?;
                other.semaphore_add(EXPIRABLE.name, EXPIRABLE.channel, 2)?;
                assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "2")));
                other.expirable_acquire(&EXPIRABLE, "p1", NOW + 1_000, NOW)?;
                other.expirable_acquire(&EXPIRABLE, "p2", NOW + 2_000, NOW)?;
                // A live permit: returned and announced.
                assert!(other.expirable_release(&EXPIRABLE, "p1", NOW + 999)?);
                assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "1")));
                assert_eq!(lease_end(&other, "p1"), None);
                // Unknown (or released already): false, nothing published.
                assert!(!other.expirable_release(&EXPIRABLE, "p1", NOW + 999)?);
                assert!(!other.expirable_release(&EXPIRABLE, "nobody", NOW + 999)?);
                assert_eq!(next(conn), None);
                assert_eq!(other.counter_get(EXPIRABLE.name)?, 1);
                // Expired: false, but reclaimed (and announced) all the same.
                assert!(!other.expirable_release(&EXPIRABLE, "p2", NOW + 2_000)?);
                assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "2")));
                assert_eq!(next(conn), None);
                assert_eq!(other.counter_get(EXPIRABLE.name)?, 2);
                assert!(!live(&other, EXPIRABLE.leases));
                Ok(())
            })
            .unwrap();
    }

    // ---- Count-down latch ----

    #[test]
    fn latch_count_down_opens_at_zero_and_deletes() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to(LATCH_CHANNEL))?;
                assert!(other.counter_set_if_absent(
                    "l",
                    LATCH_CHANNEL,
                    2,
                    LATCH_NEW_COUNT_MESSAGE
                )?);
                assert_eq!(next(conn), Some(Message::new(LATCH_CHANNEL, "1")));
                assert_eq!(other.latch_count_down("l", LATCH_CHANNEL)?, 1);
                assert_eq!(next(conn), None);
                assert_eq!(other.counter_get("l")?, 1);
                assert_eq!(other.latch_count_down("l", LATCH_CHANNEL)?, 0);
                assert_eq!(next(conn), Some(Message::new(LATCH_CHANNEL, "0")));
                assert!(!live(&other, "l"));
                // An absent latch: -1, nothing kept, nothing published.
                assert_eq!(other.latch_count_down("l", LATCH_CHANNEL)?, -1);
                assert!(!live(&other, "l"));
                assert_eq!(next(conn), None);
                assert!(other.is_empty());
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn latch_delete_announces_a_new_count() {
        let backend = MemoryBackend::new();
        let other = backend.clone();
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(&subscribed_to(LATCH_CHANNEL))?;
                assert!(!other.latch_delete("l", LATCH_CHANNEL)?);
                assert_eq!(next(conn), None);
                other.counter_set_if_absent("l", LATCH_CHANNEL, 3, LATCH_NEW_COUNT_MESSAGE)?;
                assert_eq!(next(conn), Some(Message::new(LATCH_CHANNEL, "1")));
                assert!(other.latch_delete("l", LATCH_CHANNEL)?);
                assert_eq!(next(conn), Some(Message::new(LATCH_CHANNEL, "1")));
                assert!(!live(&other, "l"));
                assert!(!other.latch_delete("l", LATCH_CHANNEL)?);
                assert_eq!(next(conn), None);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn counters_fail_with_wrongtype_on_a_hash() {
        let backend = MemoryBackend::new();
        backend.lock_acquire("h", "a:1", LEASE).unwrap();
        backend.run(|db| db.zadd("z", NOW, "p")).unwrap();
        backend.set_string("str", "1");
        let hash_named = ExpirableKeys {
            name: "h",
            leases: "{h}:timeout",
            channel: "redisson_sc:{h}",
        };
        let leases_a_string = ExpirableKeys {
            name: "e",
            leases: "str",
            channel: "redisson_sc:{e}",
        };
        let errors = [
            ("h", backend.counter_get("h").unwrap_err()),
            (
                "h",
                backend
                    .counter_set_if_absent("h", SEMAPHORE_CHANNEL, 1, "1")
                    .unwrap_err(),
            ),
            (
                "h",
                backend
                    .semaphore_add("h", SEMAPHORE_CHANNEL, 1)
                    .unwrap_err(),
            ),
            ("h", backend.semaphore_try_acquire("h", 1).unwrap_err()),
            ("h", backend.semaphore_drain("h").unwrap_err()),
            (
                "h",
                backend
                    .expirable_acquire(&hash_named, "p", NOW + 1, NOW)
                    .unwrap_err(),
            ),
            (
                "h",
                backend.expirable_available(&hash_named, NOW).unwrap_err(),
            ),
            (
                "str",
                backend
                    .expirable_acquire(&leases_a_string, "p", NOW + 1, NOW)
                    .unwrap_err(),
            ),
            (
                "str",
                backend
                    .expirable_release(&leases_a_string, "p", NOW)
                    .unwrap_err(),
            ),
            (
                "str",
                backend
                    .expirable_available(&leases_a_string, NOW)
                    .unwrap_err(),
            ),
            (
                "h",
                backend.latch_count_down("h", LATCH_CHANNEL).unwrap_err(),
            ),
            (
                "z",
                backend.latch_count_down("z", LATCH_CHANNEL).unwrap_err(),
            ),
        ];
        for (key, err) in errors {
            assert!(err.is_protocol_error(), "{err}");
            assert!(err.to_string().contains("WRONGTYPE"), "{err}");
            assert!(err.to_string().contains(&format!("{key:?}")), "{err}");
        }
        // Nothing was changed on the way.
        assert_eq!(backend.len(), 3);
        assert_eq!(backend.lock_state("h", "a:1").unwrap().hold_count, 1);
        // `DEL` takes any type.
        assert!(backend.latch_delete("h", LATCH_CHANNEL).unwrap());
    }

    #[test]
    fn db_counter_and_sorted_set_commands() {
        let backend = MemoryBackend::new();
        backend
            .run(|db| {
                // INCRBY on a missing key starts from 0, without expiry.
                assert_eq!(db.incrby("n", 5)?, 5);
                assert_eq!(db.pttl("n"), -1);
                // On an existing key it keeps the expiry.
                db.set_px("n", "-7", 30_000);
                assert_eq!(db.incr("n")?, -6);
                assert!(db.pttl("n") > 29_000);
                assert_eq!(db.decrby("n", 4)?, -10);
                assert_eq!(db.decr("n")?, -11);
                assert_eq!(db.get("n")?.as_deref(), Some("-11"));
                assert!(db.decrby("n", i64::MIN).unwrap_err().is_protocol_error());
                db.set("n", &i64::MIN.to_string());
                assert!(db.decr("n").is_err());
                assert_eq!(db.get("n")?.as_deref(), Some(i64::MIN.to_string().as_str()));
                assert_eq!(db.incrby("n", i64::MAX)?, -1);
                db.rpush("q", "a")?;
                assert!(
                    db.incrby("q", 1)
                        .unwrap_err()
                        .to_string()
                        .contains("WRONGTYPE")
                );

                for (score, member) in [(30, "c"), (10, "b"), (10, "a"), (20, "d")] {
                    db.zadd("z", score, member)?;
                }
                let pairs = |pairs: &[(&str, i64)]| -> Vec<(String, i64)> {
                    pairs.iter().map(|(m, s)| ((*m).to_owned(), *s)).collect()
                };
                assert_eq!(db.zrange_with_scores("z", 0, 0)?, pairs(&[("a", 10)]));
                assert_eq!(
                    db.zrange_with_scores("z", -2, -1)?,
                    pairs(&[("d", 20), ("c", 30)])
                );
                assert_eq!(db.zrange_with_scores("z", 1, 100)?.len(), 3);
                assert_eq!(db.zrange_with_scores("z", -100, 0)?.len(), 1);
                assert!(db.zrange_with_scores("z", 2, 1)?.is_empty());
                assert!(db.zrange_with_scores("z", 4, 10)?.is_empty());
                assert!(db.zrange_with_scores("z", i64::MIN, i64::MIN)?.is_empty());
                assert_eq!(db.zrange_with_scores("z", 0, i64::MAX)?.len(), 4);
                assert!(db.zrange_with_scores("none", 0, 0)?.is_empty());
                assert_eq!(db.zrangebyscore("z", 20)?, ["a", "b", "d"]);
                assert_eq!(db.zrangebyscore("z", 9)?, Vec::<String>::new());
                assert_eq!(db.zrangebyscore("none", 9)?, Vec::<String>::new());
                assert!(db.zrangebyscore("q", 9).is_err());
                Ok(())
            })
            .unwrap();
    }
}
