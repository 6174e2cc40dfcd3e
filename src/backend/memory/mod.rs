//! [`MemoryBackend`]: an in-process [`LockBackend`] that runs the very
//! scripts of `lua/` in an embedded Lua 5.1 (the version Redis embeds) over
//! an in-memory keyspace.
//!
//! There is no second implementation of the operations to keep in step
//! with the scripts: a [`ScriptCall`] runs its script's code with `KEYS`
//! and `ARGV` set as Redis sets them, and `redis.call` reaches a keyspace
//! that implements, with Redis 7 semantics, exactly the commands the
//! scripts use. Two `Client`s sharing one `MemoryBackend` (clones share
//! state) therefore behave like two processes sharing one Redis server,
//! which makes it the backend for tests, examples and single-process use.
//!
//! - **Atomic.** One mutex covers the interpreter and the keyspace for a
//!   whole script run, as Redis runs one script at a time.
//! - **Real clock, frozen per run.** TTLs are measured with
//!   [`std::time::Instant`] (a lease of 50 ms really ends 50 ms later);
//!   while a script runs, expiry and `TIME` use the instant it started, as
//!   on Redis.
//! - **Active expiry.** An expired key is absent to every access; every
//!   run first drops all keys whose TTL has run out (an index by deadline
//!   makes that cost O(expired)), so unlock latches and lapsed leases do
//!   not pile up. A store nobody calls is swept every 0.5 s by one thread
//!   shared by all stores of the process (it ends when the last store is
//!   dropped).
//! - **Pub/sub fan-out.** `PUBLISH` from a script (atomic with the
//!   script's writes) and [`publish`](LockBackend::publish) deliver to
//!   every open [`with_pubsub`](LockBackend::with_pubsub) connection
//!   subscribed to the channel, fire and forget like Redis. Subscribing is
//!   confirmed at once.
//! - **Loud about the rest.** A command the scripts do not use is an error
//!   reply (`ERR unknown command '...' (MemoryBackend implements only the
//!   commands redisync's scripts use)`), never a silent divergence.
//! - **Errors as Redis words them.** A script's error is
//!   `Ok(Reply::Error(text))`, `text` starting with Redis' code
//!   (`WRONGTYPE Operation against a key holding the wrong kind of value`,
//!   `ERR user_script:12: ...`); Redis 7 appends ` script: <sha1>, on
//!   @user_script:<line>.` to an error raised out of a script, which this
//!   store leaves out.
//! - **Test hooks.** [`MemoryBackend::kill_pubsub_connections`] (like
//!   `CLIENT KILL TYPE pubsub`), [`MemoryBackend::set_string`] (like `SET`)
//!   and [`MemoryBackend::dump`] (every live key with its value and TTL).
//!
//! ```
//! use redisync::internal::lock::{self, Acquire, Release};
//! let backend = redisync::MemoryBackend::new();
//! let other_process = backend.clone();
//! assert_eq!(lock::acquire(&backend, "doc:memory", "c1:1", 30_000)?, Acquire::Acquired);
//! assert!(!lock::acquire(&other_process, "doc:memory", "c2:1", 30_000)?.is_acquired());
//! let released = lock::release(
//!     &backend,
//!     "doc:memory",
//!     "redisson_lock__channel:{doc:memory}",
//!     "c1:1",
//!     30_000,
//!     "redisson_unlock_latch:{doc:memory}:r1",
//!     5_000,
//! )?;
//! assert_eq!(released, Release::Released);
//! assert!(lock::acquire(&other_process, "doc:memory", "c2:1", 30_000)?.is_acquired());
//! # Ok::<(), redisync::Error>(())
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use self::commands::Store;
use self::keyspace::Value;
use self::lua::Engine;
use self::pubsub::Subscribers;
use super::{LockBackend, PubSubConnection, Reply, ScriptCall, ServerReply};
use crate::{Error, Result};

mod commands;
mod keyspace;
mod lua;
mod pubsub;

/// An in-process [`LockBackend`] that runs the scripts of `lua/` in an
/// embedded Lua 5.1 over an in-memory keyspace, so two `Client`s sharing
/// one `MemoryBackend` behave like two processes sharing one Redis server.
///
/// A cheap handle: clones share one keyspace, one interpreter and one set
/// of pub/sub connections, like clients of one Redis server.
///
/// - TTLs run on the real clock ([`std::time::Instant`]), frozen for the
///   length of one script as on Redis.
/// - Expired keys are absent to every access and dropped by the next
///   script, touched or not, or within 0.5 s by a sweeper thread shared by
///   every store of the process when nobody calls.
/// - Published messages (a script's `PUBLISH`, such as a release's unlock
///   message, and [`publish`](LockBackend::publish)) fan out to every open
///   [`with_pubsub`](LockBackend::with_pubsub) connection subscribed to the
///   channel.
/// - Test hooks: [`kill_pubsub_connections`](Self::kill_pubsub_connections)
///   (like `CLIENT KILL TYPE pubsub`), [`set_string`](Self::set_string)
///   (like `SET`, to provoke `WRONGTYPE`) and [`dump`](Self::dump).
///
/// ```
/// let backend = redisync::MemoryBackend::new();
/// // Two clients on clones of one store: two processes on one Redis.
/// let one = redisync::Client::builder().backend(backend.clone()).build()?;
/// let other = redisync::Client::builder().backend(backend).build()?;
/// let _guard = one.lock("doc:backend").lock()?;
/// assert!(other.lock("doc:backend").try_lock()?.is_none());
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

/// The shared state behind every clone of a [`MemoryBackend`].
///
/// Lock order: `engine` before `subscribers`, never the other way round.
struct Inner {
    /// The interpreter, with the keyspace in its application data.
    engine: Mutex<Engine>,
    subscribers: Arc<Mutex<Subscribers>>,
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
            let _ = inner.with_store(|store| store.keys.expire_due(Instant::now()));
        }
    }
}

impl Inner {
    /// Runs `f` on the keyspace under the store's mutex.
    fn with_store<T>(&self, f: impl FnOnce(&mut Store) -> T) -> Result<T> {
        let engine = self.engine.lock();
        let mut store = engine.store().map_err(engine_error)?;
        Ok(f(&mut store))
    }
}

/// The interpreter failed itself (out of memory): a store failure.
fn engine_error(err: mlua::Error) -> Error {
    Error::backend_caused_by("memory store: the Lua interpreter failed", err, false)
}

/// One live key, as [`MemoryBackend::dump`] reports it.
///
/// ```
/// let backend = redisync::MemoryBackend::new();
/// backend.set_string("k", "v");
/// let key = &backend.dump()[0];
/// assert_eq!((key.key.as_str(), key.pttl_ms), ("k", None));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DumpedKey {
    /// The key (lossily decoded if it is not UTF-8; the scripts' keys are).
    pub key: String,
    /// Its value.
    pub value: DumpedValue,
    /// Its remaining time to live in ms, as `PTTL` reports it; `None` when
    /// it has no expiry.
    pub pttl_ms: Option<i64>,
}

/// The value of a [`DumpedKey`], by Redis type.
///
/// ```
/// use redisync::DumpedValue;
/// let backend = redisync::MemoryBackend::new();
/// backend.set_string("k", "v");
/// assert_eq!(backend.dump()[0].value, DumpedValue::String(b"v".to_vec()));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum DumpedValue {
    /// A string.
    String(Vec<u8>),
    /// A hash: field → value.
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    /// A list, head first.
    List(Vec<Vec<u8>>),
    /// A sorted set, sorted by score, then member (Redis' order).
    ZSet(Vec<(Vec<u8>, f64)>),
    /// A set, in byte order.
    Set(BTreeSet<Vec<u8>>),
}

impl MemoryBackend {
    /// An empty keyspace with no pub/sub connections.
    ///
    /// ```
    /// let backend = redisync::MemoryBackend::new();
    /// assert!(backend.is_empty());
    /// ```
    #[must_use = "a store that is not kept is dropped, with everything in it"]
    pub fn new() -> Self {
        let subscribers = Arc::new(Mutex::new(Subscribers::default()));
        // Creating an interpreter and the few tables and functions of
        // `redis.*` fails only when memory runs out, where Rust aborts
        // anyway.
        #[allow(clippy::expect_used)]
        let engine = Engine::new(Store::new(Arc::clone(&subscribers)))
            .expect("creating the Lua interpreter of a MemoryBackend");
        let backend = MemoryBackend {
            inner: Arc::new(Inner {
                engine: Mutex::new(engine),
                subscribers,
            }),
        };
        register_for_idle_sweep(&backend.inner);
        backend
    }

    /// The number of live (unexpired) keys: locks, fair-lock queues and slot
    /// sets, read holds and unlock latches alike.
    ///
    /// ```
    /// let backend = redisync::MemoryBackend::new();
    /// backend.set_string("doc:len", "1");
    /// assert_eq!(backend.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.inner
            .with_store(|store| {
                store.keys.expire_due(Instant::now());
                store.keys.stored()
            })
            .unwrap_or(0)
    }

    /// True when no live key is stored.
    ///
    /// ```
    /// let backend = redisync::MemoryBackend::new();
    /// assert!(backend.is_empty());
    /// let client = redisync::Client::builder().backend(backend.clone()).build()?;
    /// let _guard = client.lock("doc:is_empty").lock()?;
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
    /// use redisync::LockBackend;
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
        self.inner.subscribers.lock().kill_all();
    }

    /// **Test hook**, like Redis `SET key value`: stores a plain string with no
    /// expiry, replacing whatever `key` held. Lock operations on it then fail
    /// with a `WRONGTYPE` protocol error.
    ///
    /// ```
    /// let backend = redisync::MemoryBackend::new();
    /// backend.set_string("doc:string", "hello");
    /// let client = redisync::Client::builder().backend(backend.clone()).build()?;
    /// let err = client.lock("doc:string").try_lock().unwrap_err();
    /// assert!(err.is_protocol_error());
    /// assert!(err.to_string().contains("WRONGTYPE"));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn set_string(&self, key: &str, value: &str) {
        let _ = self.inner.with_store(|store| {
            store
                .keys
                .insert(key.as_bytes(), Value::Str(value.as_bytes().to_vec()), None);
        });
    }

    /// **Test hook**: every live key, sorted by key, with its value and
    /// remaining TTL (what `PTTL` would report; `None`: no expiry), read
    /// atomically.
    ///
    /// ```
    /// use redisync::DumpedValue;
    /// let backend = redisync::MemoryBackend::new();
    /// let client = redisync::Client::builder().backend(backend.clone()).build()?;
    /// let _guard = client.lock("doc:dump").lock()?;
    /// let keys = backend.dump(); // the lock's hash, and its attempt's record
    /// assert_eq!(keys[0].key, "doc:dump");
    /// let DumpedValue::Hash(fields) = &keys[0].value else { unreachable!() };
    /// assert_eq!(fields[client.current_holder_id().as_bytes()], b"1");
    /// assert!(keys[0].pttl_ms.is_some_and(|ttl| ttl > 29_000));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn dump(&self) -> Vec<DumpedKey> {
        self.inner
            .with_store(|store| {
                let now = Instant::now();
                let mut keys: Vec<DumpedKey> = store
                    .keys
                    .iter_live(now)
                    .map(|(key, entry)| DumpedKey {
                        key: String::from_utf8_lossy(key).into_owned(),
                        value: dumped(&entry.value),
                        pttl_ms: entry.expires_at().map(|at| {
                            i64::try_from(at.saturating_duration_since(now).as_millis())
                                .unwrap_or(i64::MAX)
                        }),
                    })
                    .collect();
                keys.sort_by(|a, b| a.key.cmp(&b.key));
                keys
            })
            .unwrap_or_default()
    }
}

/// A value as [`DumpedValue`].
fn dumped(value: &Value) -> DumpedValue {
    match value {
        Value::Str(bytes) => DumpedValue::String(bytes.clone()),
        Value::Hash(fields) => DumpedValue::Hash(
            fields
                .iter()
                .map(|(field, value)| (field.clone(), value.clone()))
                .collect(),
        ),
        Value::List(items) => DumpedValue::List(items.iter().cloned().collect()),
        Value::ZSet(members) => {
            let mut sorted: Vec<(Vec<u8>, f64)> = members
                .iter()
                .map(|(member, score)| (member.clone(), *score))
                .collect();
            sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
            DumpedValue::ZSet(sorted)
        }
        Value::Set(members) => DumpedValue::Set(members.iter().cloned().collect()),
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self
            .inner
            .with_store(|store| store.keys.iter_live(Instant::now()).count())
            .unwrap_or(0);
        let connections = self.inner.subscribers.lock().len();
        f.debug_struct("MemoryBackend")
            .field("keys", &keys)
            .field("pubsub_connections", &connections)
            .finish()
    }
}

/// The longest a call on the in-memory store may take before its write
/// scripts refuse themselves (a "response timeout"; the caller's bound
/// shortens it, as on Redis).
const MEMORY_ROUND_TRIP: std::time::Duration = std::time::Duration::from_secs(60);

impl LockBackend for MemoryBackend {
    /// `TIME` here reads this machine's wall clock.
    fn server_now_ms(&self) -> Option<i64> {
        Some(crate::clock::wall_clock_ms())
    }

    fn run_script(&self, call: &ScriptCall<'_>) -> Result<Reply> {
        // The plain code: a single server's, whose messages go through
        // PUBLISH. A writing script's window (see `Script::is_windowed`):
        // the caller's bound as a round trip would have it, by the same
        // wall clock `TIME` reads here; in-process nothing is delayed, but
        // a call queued on the store past it is refused as on Redis.
        let window = call.window_arg(super::script::window_end(
            crate::clock::wall_clock_ms().saturating_sub(crate::clock::monotonic_ms()),
            crate::deadline::cap(MEMORY_ROUND_TRIP),
        ));
        let mut engine = self.inner.engine.lock();
        match window {
            None => engine.run(call.script().code(), call.keys(), call.args()),
            Some(window) => {
                let mut args = Vec::with_capacity(call.args().len() + 1);
                args.extend_from_slice(call.args());
                args.push(std::borrow::Cow::Owned(window));
                engine.run(call.script().code(), call.keys(), &args)
            }
        }
        .map_err(engine_error)
    }

    fn publish(&self, channel: &str, payload: &str) -> Result<()> {
        self.inner.subscribers.lock().publish(channel, payload);
        Ok(())
    }

    fn with_pubsub(
        &self,
        session: &mut dyn FnMut(&mut dyn PubSubConnection) -> Result<()>,
    ) -> Result<()> {
        // Deregistered on drop, even if `session` unwinds.
        let mut conn = pubsub::open(&self.inner.subscribers);
        session(&mut conn)
    }

    /// `PING` answers `PONG` (after taking the store's lock, so its round
    /// trip shows contention); every other command an error reply: an
    /// in-process store has no server settings.
    fn server_command(&self, args: &[&str]) -> Result<Vec<ServerReply>> {
        let started = std::time::Instant::now();
        let reply = match args.first() {
            Some(command) if command.eq_ignore_ascii_case("PING") => {
                drop(self.inner.engine.lock());
                Reply::Status("PONG".to_owned())
            }
            Some(command) => Reply::Error(format!(
                "ERR unknown command '{command}': MemoryBackend answers PING only"
            )),
            None => Reply::Error("ERR no command given".to_owned()),
        };
        Ok(vec![ServerReply::new("memory", reply, started.elapsed())])
    }
}

#[cfg(test)]
mod tests;
