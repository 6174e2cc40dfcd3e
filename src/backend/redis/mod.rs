//! [`RedisBackend`]: the [`LockBackend`] on a real Redis server.
//!
//! Commands go through an r2d2 pool of plain connections; every operation is
//! exactly one Lua script (EVALSHA, reloaded on NOSCRIPT). Pub/sub gets a
//! dedicated connection per session, outside the pool, because a subscribed
//! connection cannot run other commands.
//!
//! Everything only Redis needs lives under this module, beside the run
//! path: `pool` (where connections go, the r2d2 manager, validation),
//! `errors` (the `redis` crate's errors to ours), `pubsub`, `options`
//! ([`RedisOptions`]), `deployment` ([`Deployment`]), `connect` (one
//! connection within a bound), `naming` (`CLIENT SETNAME`), `tls`,
//! `sentinel` (feature `sentinel`), `replication` (replica
//! acknowledgement) and `cluster` (feature `cluster`).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::{ConnectionLike, RedisError, RedisResult};

use self::errors::{
    io_kind, redacted_address, redis_error, reply_from_value, script_error_reply,
    server_error_reply,
};
use self::pool::{Conn, IDLE_VALIDATION, Manager, Target};
use self::pubsub::RedisPubSub;
use super::{Effect, LockBackend, PubSubConnection, Reply, Resend, ScriptCall, ServerReply};
use crate::event::{EventHandler, LoggingEventHandler, ReplicaShortfallEvent};
use crate::{Error, Result};

#[cfg(feature = "cluster")]
mod cluster;
mod connect;
mod deployment;
mod errors;
pub(crate) mod naming;
mod options;
mod pool;
mod pubsub;
mod replication;
#[cfg(feature = "sentinel")]
mod sentinel;
mod tls;

pub use self::deployment::Deployment;
pub use self::options::RedisOptions;
pub use self::replication::{ReplicaAcknowledgement, ReplicaShortfall};
#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub use self::sentinel::SentinelConfig;

/// The thread pool in which the r2d2 pool opens connections and reaps
/// idle ones: one thread, owned by this pool alone, that ends as soon as
/// the pool is dropped.
///
/// r2d2's default is three threads per pool that, on drop, still wait for
/// the pending reaper run (every 30 s) before they end: an application that
/// made and dropped 50 clients kept 150 threads for up to 30 s. Here the
/// pending runs are discarded (nothing is lost: they only open connections
/// for, or reap connections of, a pool that no one can use any more), so
/// the thread ends at once, or when the connection attempt it is making
/// ends (at most the connection timeout; at once when the server refuses).
///
/// Not shared between clients, deliberately: `get` waits for a connection
/// that a thread of this pool opens, so a shared thread busy connecting to
/// an unreachable server (for up to the connection timeout, again and
/// again with r2d2's retries) would stall every other client's connection
/// opening in the process. One thread per pool, rather than three, because
/// all its connections go to the same server: a second thread would only
/// open a burst of connections a little faster.
fn pool_workers() -> Arc<scheduled_thread_pool::ScheduledThreadPool> {
    Arc::new(
        scheduled_thread_pool::ScheduledThreadPool::builder()
            .num_threads(1)
            .thread_name_pattern("redisync-pool")
            .on_drop_behavior(scheduled_thread_pool::OnPoolDropBehavior::DiscardPendingScheduled)
            .build(),
    )
}

/// Whether `err`, met on a connection that was then discarded, allows one
/// more try on another connection under `resend`. Timeouts never do: the
/// server may be frozen with the request in hand, and the caller's bound is
/// spent.
fn resend_allows(resend: Resend, err: &RedisError) -> bool {
    if err.is_timeout() {
        return false;
    }
    let write_failed = io_kind(err) == Some(std::io::ErrorKind::BrokenPipe);
    match resend {
        Resend::IfUnsent => write_failed,
        _ => err.is_connection_dropped() || write_failed,
    }
}

/// The [`LockBackend`] on a Redis server, reached through a connection pool.
///
/// Created by [`RedisBackend::open`] (or [`Client::open`](crate::Client::open),
/// which uses it). Cheap to share: [`Client`](crate::Client) holds it behind
/// an `Arc`.
///
/// ```no_run
/// let backend = redisync::RedisBackend::open("redis://127.0.0.1:6379/")?;
/// let client = redisync::Client::builder().backend(backend).build()?;
/// # Ok::<(), redisync::Error>(())
/// ```
pub struct RedisBackend {
    pool: r2d2::Pool<Manager>,
    target: Target,
    /// Set when a call found the server unreachable, cleared by the next
    /// call that reaches it. While set, a call without an idle pooled
    /// connection asks the server directly instead of waiting the pool's
    /// whole connection timeout for a server that refuses connections.
    unreachable: AtomicBool,
    /// When a call last found a connection the server had closed, in
    /// nanoseconds since `created` (0: never). Every pooled connection last
    /// used before then is checked with a PING before it carries a script:
    /// the fault that closed one (a restart, `CLIENT KILL`) likely closed
    /// them all.
    suspect_since: AtomicU64,
    created: Instant,
    options: RedisOptions,
    /// The URL without credentials, for messages.
    address: String,
    /// The server's clock, as the pool's connections read it.
    clock: Arc<crate::clock::ServerClock>,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("address", &self.address)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Connects to the Redis server at `url` (`redis://[user:password@]host:port/db`)
    /// with default [`RedisOptions`].
    ///
    /// # Errors
    /// `InvalidArgument` for a malformed URL; `Backend` if the server cannot
    /// be reached within the connection timeout.
    ///
    /// ```no_run
    /// let backend = redisync::RedisBackend::open("redis://127.0.0.1:6379/0")?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn open(url: &str) -> Result<Self> {
        Self::open_with(url, RedisOptions::default())
    }

    /// Connects to `url` with the given options.
    ///
    /// # Errors
    /// `InvalidArgument` for a malformed URL or invalid options (including
    /// a `rediss://` URL without the `tls` feature, and bad TLS
    /// certificates); `Backend` if the server cannot be reached within the
    /// connection timeout, refuses the password, or fails the TLS handshake.
    ///
    /// ```no_run
    /// let options = redisync::RedisOptions::default().pool_size(4);
    /// let backend = redisync::RedisBackend::open_with("redis://127.0.0.1:6379/", options)?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn open_with(url: &str, options: RedisOptions) -> Result<Self> {
        options.validate()?;
        let options = options.named();
        // No error quotes the URL: it may hold a password.
        let client = self::tls::open_client(url, &options.tls)?;
        let address = redacted_address(client.get_connection_info());
        Self::open_target(Target::Direct(client), address, options)
    }

    /// Connects to the current master of the Sentinel-monitored group
    /// `master_name`, found through the sentinels at `sentinel_urls`
    /// (`redis://[:password@]host:port`, or `rediss://` for TLS to the
    /// sentinels and the master with the system's roots; see
    /// [`SentinelConfig`](SentinelConfig) for the TLS rule), with
    /// default [`RedisOptions`].
    /// Every new connection asks the sentinels again, so after a failover
    /// the backend follows the master; connections still open to the old
    /// one are discarded within about a second of the switch. Only with
    /// the `sentinel` feature.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name or list, a malformed URL, a mix
    /// of `redis://` and `rediss://` sentinels, `#insecure`, or `rediss://`
    /// without the `tls` feature; `Backend` if no sentinel answers (a
    /// connection error: also a failed TLS handshake, e.g. an untrusted
    /// certificate), if none knows `master_name`, or if the master cannot
    /// be reached.
    ///
    /// ```no_run
    /// let backend = redisync::RedisBackend::open_sentinel(
    ///     "mymaster",
    ///     &["redis://10.0.0.5:26379", "redis://10.0.0.6:26379", "redis://10.0.0.7:26379"],
    /// )?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[cfg(feature = "sentinel")]
    pub fn open_sentinel<I>(master_name: &str, sentinel_urls: I) -> Result<Self>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::open_sentinel_with(
            &SentinelConfig::new(master_name, sentinel_urls),
            RedisOptions::default(),
        )
    }

    /// Like [`open_sentinel`](Self::open_sentinel), with the master's
    /// credentials and database from `config` and the given options (the
    /// timeouts also bound each exchange with a sentinel). Only with the
    /// `sentinel` feature.
    ///
    /// TLS (feature `tls`): the sentinels are reached over TLS when their
    /// URLs are `rediss://`; the master (and any replica promoted later)
    /// when the sentinels are `rediss://` or TLS options are given. The TLS
    /// options ([`RedisOptions::tls_root_certificate`],
    /// [`RedisOptions::tls_client_certificate`]) apply to the sentinels and
    /// to the master alike. See [`SentinelConfig`](SentinelConfig).
    ///
    /// # Errors
    /// As [`open_sentinel`](Self::open_sentinel), plus `InvalidArgument` for
    /// invalid options (including unusable TLS certificates or keys).
    ///
    /// ```no_run
    /// use redisync::{RedisOptions, SentinelConfig};
    /// let config = SentinelConfig::new("mymaster", ["redis://10.0.0.5:26379"])
    ///     .master_password("s3cret");
    /// let backend = redisync::RedisBackend::open_sentinel_with(&config, RedisOptions::default())?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    ///
    /// Over TLS, trusting your own CA and presenting a client certificate
    /// to sentinels and master that require one:
    ///
    /// ```no_run
    /// # #[cfg(feature = "tls")] {
    /// use redisync::{RedisOptions, SentinelConfig};
    /// let config = SentinelConfig::new(
    ///     "mymaster",
    ///     ["rediss://10.0.0.5:26380", "rediss://10.0.0.6:26380", "rediss://10.0.0.7:26380"],
    /// )
    /// .master_password("s3cret");
    /// let options = RedisOptions::default()
    ///     .tls_root_certificate(std::fs::read("ca.crt")?)
    ///     .tls_client_certificate(std::fs::read("client.crt")?, std::fs::read("client.key")?);
    /// let backend = redisync::RedisBackend::open_sentinel_with(&config, options)?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "sentinel")]
    pub fn open_sentinel_with(config: &SentinelConfig, options: RedisOptions) -> Result<Self> {
        options.validate()?;
        let options = options.named();
        let target = self::sentinel::SentinelTarget::new(
            config,
            &options.tls,
            options.connection_timeout,
            options.response_timeout,
        )?;
        let address = target.description().to_owned();
        Self::open_target(Target::Sentinel(target), address, options)
    }

    /// Connects to the Redis Cluster whose nodes include `node_urls`
    /// (`redis://[user:password@]host:port`; one reachable node is enough,
    /// the rest of the cluster is discovered), with default
    /// [`RedisOptions`]. Every script runs on the master of its object's
    /// slot (all keys of one object share it, through the `{name}` hash
    /// tag); MOVED and ASK redirections are followed and the slot map is
    /// refreshed after a resharding or failover. Waiters are woken through
    /// sharded pub/sub (`SPUBLISH`/`SSUBSCRIBE`, Redis 7 or later), which
    /// is what Redisson uses on a cluster. Only with the `cluster` feature.
    ///
    /// With the `tls` feature, `rediss://` URLs (all of them) connect to
    /// every node over TLS, the discovered ones too, which must announce
    /// their TLS ports (`tls-cluster yes`).
    ///
    /// # Errors
    /// `InvalidArgument` for an empty list or a malformed URL (Unix sockets,
    /// databases other than 0, `redis://` and `rediss://` URLs mixed, and
    /// `rediss://` without the `tls` feature are rejected); `Backend` if no
    /// node can be reached, or (TLS) if a node's certificate is not trusted.
    ///
    /// ```no_run
    /// let backend = redisync::RedisBackend::open_cluster(&[
    ///     "redis://10.0.0.5:7000",
    ///     "redis://10.0.0.6:7000",
    ///     "redis://10.0.0.7:7000",
    /// ])?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[cfg(feature = "cluster")]
    pub fn open_cluster<I>(node_urls: I) -> Result<Self>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::open_cluster_with(node_urls, RedisOptions::default())
    }

    /// Like [`open_cluster`](Self::open_cluster), with the given options.
    /// The pool holds up to `pool_size` cluster connections (each with one
    /// socket per node it talks to). With replica acknowledgement, `WAIT`
    /// runs on the master that ran the script, so it counts that master's
    /// replicas only. TLS options (`tls_root_certificate`,
    /// `tls_client_certificate`) apply to every connection to every node and
    /// need `rediss://` URLs. Only with the `cluster` feature.
    ///
    /// # Errors
    /// As [`open_cluster`](Self::open_cluster), plus `InvalidArgument` for
    /// invalid options (TLS options with `redis://` URLs among them).
    ///
    /// ```no_run
    /// let options = redisync::RedisOptions::default().pool_size(4);
    /// let backend = redisync::RedisBackend::open_cluster_with(["redis://10.0.0.5:7000"], options)?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[cfg(feature = "cluster")]
    pub fn open_cluster_with<I>(node_urls: I, options: RedisOptions) -> Result<Self>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        options.validate()?;
        let options = options.named();
        let urls: Vec<String> = node_urls
            .into_iter()
            .map(|url| url.as_ref().to_owned())
            .collect();
        let target = self::cluster::ClusterTarget::new(&urls, &options)?;
        let address = target.description().to_owned();
        Self::open_target(Target::Cluster(target), address, options)
    }

    fn open_target(target: Target, address: String, options: RedisOptions) -> Result<Self> {
        let clock = Arc::new(crate::clock::ServerClock::default());
        let manager = Manager {
            target: target.clone(),
            options: options.clone(),
            clock: Arc::clone(&clock),
        };
        // Fail now, with the server's own answer (refused, wrong password),
        // rather than after the pool's connection timeout.
        let first_error = |op: &str, err: RedisError| {
            let reset = matches!(
                io_kind(&err),
                Some(std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof)
            );
            if target.is_plain_tcp() && reset {
                // A TLS port drops anything but a TLS handshake.
                Error::backend_caused_by(
                    format!(
                        "{op} on Redis at {address}: the server closed the connection at \
                         once (if it expects TLS, use a rediss:// URL)"
                    ),
                    err,
                    true,
                )
            } else {
                redis_error(&address, op, err, options.connection_timeout)
            }
        };
        // The whole opening (connect, handshake, PING) keeps to the
        // connection timeout: each step gets what is left of it.
        let opening_started = Instant::now();
        let opened = crate::deadline::within(
            Instant::now().checked_add(options.connection_timeout),
            || -> Result<()> {
                let mut probe = manager
                    .connect()
                    .map_err(|err| first_error("connecting", err))?;
                let left = crate::deadline::cap(options.connection_timeout);
                probe
                    .set_read_timeout(left)
                    .map_err(|err| first_error("connecting", err))?;
                redis::cmd("PING")
                    .query::<()>(probe.conn.as_connection())
                    .map_err(|err| first_error("PING", err))
            },
        );
        opened?;
        let pool = r2d2::Pool::builder()
            .max_size(options.pool_size)
            .min_idle(Some(1))
            .connection_timeout(options.connection_timeout)
            // A PING on every checkout would double the round trips; broken
            // connections are dropped on return instead (`has_broken`).
            .test_on_check_out(false)
            .thread_pool(pool_workers())
            .build_unchecked(manager);
        // The pool opens its first connection in the background; wait for
        // it (within what is left of the connection timeout), so that the
        // first call finds a connection ready instead of racing its
        // opening. If it is not there in time, calls open one themselves.
        let ready_by = opening_started.checked_add(options.connection_timeout);
        while pool.state().connections == 0 && ready_by.is_some_and(|t| Instant::now() < t) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(RedisBackend {
            pool,
            target,
            unreachable: AtomicBool::new(false),
            suspect_since: AtomicU64::new(0),
            created: Instant::now(),
            options,
            address,
            clock,
        })
    }

    /// The name of this backend's connections in `CLIENT LIST` (`CLIENT
    /// SETNAME`): `redisync:<client uuid>` when a [`Client`](crate::Client)
    /// built from a URL or deployment opened it (the uuid is
    /// [`Client::id`](crate::Client::id), the first half of its holder ids),
    /// `redisync:backend:<uuid>` when you opened it yourself (then it may
    /// serve several clients: log this name next to their ids to map them).
    ///
    /// ```no_run
    /// let backend = redisync::RedisBackend::open("redis://127.0.0.1:6379/")?;
    /// assert!(backend.connection_name().starts_with("redisync:backend:"));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn connection_name(&self) -> &str {
        self.options
            .connection_name
            .as_ref()
            .map_or("", |name| name.name())
    }

    /// The server's address, without credentials.
    ///
    /// ```no_run
    /// let backend = redisync::RedisBackend::open("redis://:secret@127.0.0.1:6379/")?;
    /// assert_eq!(backend.address(), "127.0.0.1:6379/0");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn address(&self) -> &str {
        &self.address
    }

    /// A pooled connection, never one made before the last failover, nor
    /// one the server has closed as far as a PING can tell (see
    /// [`IDLE_VALIDATION`] and `suspect_since`), for `op` (named in errors).
    ///
    /// At most one PING per call: a PING that times out means the server
    /// answers no connection now, so the call fails at once (its bound is
    /// spent; asking the next idle connection would cost one more round
    /// trip each, floors included, after the caller's deadline). A PING
    /// that finds its connection closed makes every connection last used
    /// before it suspect: those are dropped unchecked (the fault that closed
    /// one, a restart or `CLIENT KILL`, likely closed them all), and the
    /// pool opens fresh ones.
    fn connection(&self, op: &str) -> Result<r2d2::PooledConnection<Manager>> {
        let mut pinged = false;
        // Each stale or dead one is dropped for good: at most the pool's
        // worth, then the pool makes new ones.
        for _ in 0..self.options.pool_size {
            let mut conn = self.checkout()?;
            if self.target.is_stale(conn.epoch) {
                conn.broken = true;
                continue;
            }
            if !self.needs_validation(&conn) {
                return Ok(conn);
            }
            if pinged {
                conn.broken = true;
                continue;
            }
            pinged = true;
            let timeout = crate::deadline::cap(self.options.response_timeout);
            let checked = conn
                .set_read_timeout(timeout)
                .and_then(|()| redis::cmd("PING").query::<()>(conn.conn.as_connection()));
            match checked {
                Ok(()) => {
                    conn.last_used = Instant::now();
                    return Ok(conn);
                }
                Err(err) => {
                    conn.broken = true;
                    self.note_dead_connection();
                    if err.is_timeout() || crate::deadline::passed() {
                        return Err(self.redis_error(
                            &format!("PING of an idle connection before {op}"),
                            err,
                            timeout,
                        ));
                    }
                }
            }
        }
        self.checkout()
    }

    /// Whether `conn` must answer a PING before it carries a script.
    fn needs_validation(&self, conn: &Conn) -> bool {
        if conn.last_used.elapsed() >= IDLE_VALIDATION {
            return true;
        }
        match self.suspect_since.load(Ordering::Relaxed) {
            0 => false,
            since => {
                let used = conn.last_used.saturating_duration_since(self.created);
                u64::try_from(used.as_nanos()).unwrap_or(u64::MAX) < since
            }
        }
    }

    /// A connection was found closed by the server: every connection last
    /// used before now is checked before its next script.
    fn note_dead_connection(&self) {
        let now = u64::try_from(self.created.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.suspect_since.store(now.max(1), Ordering::Relaxed);
        // Until a call gets through again, a call without an idle pooled
        // connection asks the server directly: a refusing server fails it at
        // once instead of after the pool's whole connection timeout.
        self.unreachable.store(true, Ordering::Relaxed);
    }

    fn checkout(&self) -> Result<r2d2::PooledConnection<Manager>> {
        if self.unreachable.load(Ordering::Relaxed) {
            if let Some(conn) = self.pool.try_get() {
                return Ok(conn);
            }
            // A refused connection fails here at once; r2d2 would retry it
            // for the whole connection timeout (RedLock rounds, for one,
            // must not stall on a dead master).
            let timeout = crate::deadline::cap(self.options.connection_timeout);
            self.probe(timeout)
                .map_err(|err| self.redis_error("connecting", err, timeout))?;
            self.unreachable.store(false, Ordering::Relaxed);
            if crate::deadline::passed() {
                // The probe spent the caller's wait: a connection the pool
                // has ready, or none (waiting for one would add a floor).
                return self.pool.try_get().ok_or_else(|| {
                    Error::backend(
                        format!(
                            "timed out after {timeout:?} waiting for a Redis connection to {} \
                             (the server answered, but no pooled connection was ready in time)",
                            self.address
                        ),
                        true,
                    )
                });
            }
        }
        // An idle connection at once, without `get_timeout`'s clock reads
        // (it would take the same one first, too).
        if let Some(conn) = self.pool.try_get() {
            return Ok(conn);
        }
        let timeout = crate::deadline::cap(self.options.connection_timeout);
        self.pool.get_timeout(timeout).map_err(|err| {
            self.unreachable.store(true, Ordering::Relaxed);
            Error::backend_caused_by(
                format!(
                    "no Redis connection to {} within {timeout:?} (server unreachable, or all {} pooled connections busy)",
                    self.address, self.options.pool_size
                ),
                err,
                true,
            )
        })
    }

    /// Opens (and drops) one connection, to tell a refusing server at once;
    /// within `timeout`. A cluster connection is opened on a helper thread
    /// and given up on after `timeout` (see `connect::open_within`): the
    /// `redis` crate's steps do not all keep to a timeout of ours.
    fn probe(&self, timeout: Duration) -> std::result::Result<(), RedisError> {
        let manager = Manager {
            target: self.target.clone(),
            options: self.options.clone(),
            clock: Arc::clone(&self.clock),
        };
        #[cfg(feature = "cluster")]
        if self.target.is_cluster() {
            return self::connect::open_within(timeout, move || manager.connect().map(drop));
        }
        let _ = timeout;
        manager.connect().map(drop)
    }

    fn redis_error(&self, op: &str, err: RedisError, timeout: Duration) -> Error {
        let error = redis_error(&self.address, op, err, timeout);
        if error.is_connection_error() {
            self.unreachable.store(true, Ordering::Relaxed);
        }
        error
    }

    /// One request (`call`) on a checked connection, under the caller's
    /// deadline; sent once more, on another connection, when the first was
    /// found closed by the server and `resend` allows it. Returns the reply
    /// and the connection (replica acknowledgement `WAIT`s on it).
    fn round_trip<T>(
        &self,
        op: &str,
        resend: Resend,
        mut call: impl FnMut(&mut dyn ConnectionLike, i64) -> RedisResult<T>,
    ) -> Result<(T, r2d2::PooledConnection<Manager>)> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut conn = self.connection(op)?;
            let timeout = crate::deadline::cap(self.options.response_timeout);
            let reply = conn.set_read_timeout(timeout).and_then(|()| {
                // A reading of the server's clock that is due (see
                // `pool::CLOCK_RECHECK`) goes first: the window below is
                // written in that clock.
                if conn.clock_due(&self.clock) {
                    conn.reread_clock(&self.clock, self.options.events.as_deref(), &self.address)?;
                }
                let window_end = conn.window_end();
                call(conn.conn.as_connection(), window_end)
            });
            match reply {
                Ok(reply) => {
                    conn.last_used = Instant::now();
                    return Ok((reply, conn));
                }
                Err(err) => {
                    self.discard_after(&mut conn, &err);
                    if tries > 1 || !resend_allows(resend, &err) {
                        return Err(self.redis_error(op, err, timeout));
                    }
                }
            }
        }
    }

    /// Marks `conn` for dropping after `err` when it can no longer be
    /// trusted: a demoted master, or any failure on the socket (a timed-out
    /// request may still be answered late; a reset socket is dead).
    fn discard_after(&self, conn: &mut Conn, err: &RedisError) {
        if self.target.discards_after(err) || err.is_io_error() || err.is_timeout() {
            conn.broken = true;
        }
        if err.is_connection_dropped() && !err.is_timeout() {
            self.note_dead_connection();
        }
    }

    /// Runs `call` as its [`Effect`] asks: an acquisition that too few
    /// replicas confirm is undone and retried (or kept and reported); a
    /// change that too few confirm fails the call (or is reported).
    fn run_call(&self, call: &ScriptCall<'_>) -> Result<Reply> {
        if let Effect::Acquire { undo, .. } = call.effect() {
            return self.run_acquiring(call, undo);
        }
        let (reply, shortfall) = self.run_acknowledged(call)?;
        match (shortfall, &self.options.replica_ack) {
            (Some(acknowledged), Some(ack)) if ack.shortfall() != ReplicaShortfall::Keep => {
                Err(self::replication::shortfall_error(
                    call.script().operation(),
                    call_name(call),
                    &self.address,
                    acknowledged,
                    ack,
                    false,
                ))
            }
            (Some(acknowledged), Some(ack)) => {
                self.report_shortfall(call, acknowledged, ack);
                Ok(reply)
            }
            _ => Ok(reply),
        }
    }

    /// Runs an acquisition. With replica acknowledgement, an acquisition
    /// that too few replicas confirm is given back by `undo` and retried,
    /// or kept and reported, as the policy says.
    fn run_acquiring(
        &self,
        call: &ScriptCall<'_>,
        undo: fn(&ScriptCall<'_>, &Reply) -> ScriptCall<'static>,
    ) -> Result<Reply> {
        let mut attempt = 1;
        loop {
            let (reply, shortfall) = self.run_acknowledged(call)?;
            let (Some(acknowledged), Some(ack)) = (shortfall, &self.options.replica_ack) else {
                return Ok(reply);
            };
            if ack.shortfall() == ReplicaShortfall::Keep {
                self.report_shortfall(call, acknowledged, ack);
                return Ok(reply);
            }
            // The undo is not acknowledged itself: it only gives back.
            let undo = undo(call, &reply);
            self.invoke(&undo)?;
            if attempt >= self::replication::ACQUIRE_ATTEMPTS {
                return Err(self::replication::shortfall_error(
                    call.script().operation(),
                    call_name(call),
                    &self.address,
                    acknowledged,
                    ack,
                    true,
                ));
            }
            attempt += 1;
        }
    }

    /// Runs `call` and, if its reply reports a change and replica
    /// acknowledgement is on, `WAIT`s on the same connection. Returns the
    /// reply and, on a shortfall, how many replicas confirmed it.
    fn run_acknowledged(&self, call: &ScriptCall<'_>) -> Result<(Reply, Option<u32>)> {
        let (reply, mut conn) = self.invoke(call)?;
        if self.unreachable.load(Ordering::Relaxed) {
            self.unreachable.store(false, Ordering::Relaxed);
        }
        let Some(ack) = &self.options.replica_ack else {
            return Ok((reply, None));
        };
        if matches!(reply, Reply::Error(_)) || !call.effect().changed(&reply) {
            return Ok((reply, None));
        }
        let acknowledged = conn
            .conn
            .wait_for_replicas(ack.replicas(), ack.timeout_ms())
            .map_err(|err| {
                self.discard_after(&mut conn, &err);
                self.redis_error(call.script().operation(), err, conn.read_timeout)
            })?;
        let acknowledged = u32::try_from(acknowledged).unwrap_or(0);
        Ok((
            reply,
            (acknowledged < ack.replicas()).then_some(acknowledged),
        ))
    }

    /// Runs `call`'s script (EVALSHA, loaded on NOSCRIPT) on a checked
    /// connection (see [`round_trip`](Self::round_trip)). The script's own
    /// error reply is a [`Reply::Error`]; everything else that failed is an
    /// [`Error`].
    fn invoke(&self, call: &ScriptCall<'_>) -> Result<(Reply, r2d2::PooledConnection<Manager>)> {
        let sharded = self.sharded();
        let script = call.script().loaded(sharded);
        let operation = call.script().operation();
        let (reply, mut conn) = self.round_trip(operation, call.resend(), |conn, window_end| {
            // A writing script's window, per try: each has its own timeout.
            let window = call.window_end(window_end);
            // A cluster's routed connection reads the command to route it.
            let result = if sharded {
                evalsha(script, call, window, conn)
            } else {
                evalsha_packed(script, call, window, conn)
            };
            match result {
                Ok(value) => Ok(reply_from_value(value)),
                Err(err) => script_error_reply(&err).ok_or(err),
            }
        })?;
        if let Reply::Error(text) = &reply {
            // Refused as late although the reply came in time: our reading
            // of the server's clock is off (it was stepped). The connection
            // goes; the next one reads it again.
            if text.starts_with("ERR late request") {
                conn.broken = true;
            }
        }
        Ok((reply, conn))
    }

    fn report_shortfall(
        &self,
        call: &ScriptCall<'_>,
        acknowledged: u32,
        ack: &ReplicaAcknowledgement,
    ) {
        let event = ReplicaShortfallEvent {
            operation: call.script().operation(),
            name: call_name(call).to_owned(),
            acknowledged,
            required: ack.replicas(),
        };
        match &self.options.events {
            Some(events) => events.on_replica_shortfall(&event),
            None => LoggingEventHandler.on_replica_shortfall(&event),
        }
    }

    /// `args` as one plain command to the server (a single server, the
    /// Sentinel group's master) or to every master (a cluster); see
    /// [`LockBackend::server_command`].
    fn plain_command(&self, args: &[&str]) -> Result<Vec<ServerReply>> {
        let Some((name, rest)) = args.split_first() else {
            return Err(Error::invalid("server_command", "no command given"));
        };
        let mut cmd = redis::cmd(name);
        for arg in rest {
            cmd.arg(*arg);
        }
        #[cfg(feature = "cluster")]
        if let Target::Cluster(target) = &self.target {
            return self.command_on_every_master(target, name, &cmd);
        }
        let ((reply, round_trip), _conn) = self.round_trip(name, Resend::IfUnsent, |conn, _| {
            let started = Instant::now();
            let reply = match conn.req_command(&cmd).and_then(redis::Value::extract_error) {
                Ok(value) => reply_from_value(value),
                Err(err) => server_error_reply(&err).ok_or(err)?,
            };
            Ok((reply, started.elapsed()))
        })?;
        self.unreachable.store(false, Ordering::Relaxed);
        Ok(vec![ServerReply::new(
            self.target.server_address(),
            reply,
            round_trip,
        )])
    }

    /// `cmd` on every master of the cluster, through one pooled routed
    /// connection.
    #[cfg(feature = "cluster")]
    fn command_on_every_master(
        &self,
        target: &self::cluster::ClusterTarget,
        op: &str,
        cmd: &redis::Cmd,
    ) -> Result<Vec<ServerReply>> {
        let mut conn = self.connection(op)?;
        let timeout = crate::deadline::cap(self.options.response_timeout);
        if let Err(err) = conn.set_read_timeout(timeout) {
            self.discard_after(&mut conn, &err);
            return Err(self.redis_error(op, err, timeout));
        }
        let pool::Link::Cluster(routed) = &mut conn.conn else {
            return Err(Error::protocol(
                "a cluster backend without a cluster connection",
            ));
        };
        let answers = match routed.on_every_master(cmd, &target.seed_host()) {
            Ok(answers) => answers,
            Err(err) => {
                self.discard_after(&mut conn, &err);
                return Err(self.redis_error("CLUSTER SLOTS", err, timeout));
            }
        };
        let mut replies = Vec::with_capacity(answers.len());
        for (node, answer, round_trip) in answers {
            let reply = match answer {
                Ok(value) => reply_from_value(value),
                Err(err) => match server_error_reply(&err) {
                    Some(reply) => reply,
                    None => {
                        self.discard_after(&mut conn, &err);
                        return Err(self.redis_error(&format!("{op} on {node}"), err, timeout));
                    }
                },
            };
            replies.push(ServerReply::new(node, reply, round_trip));
        }
        Ok(replies)
    }

    /// Whether scripts publish through sharded pub/sub (a cluster).
    fn sharded(&self) -> bool {
        self.target.is_cluster()
    }
}

/// The name a call is about (its first key), for messages and events.
fn call_name<'c>(call: &'c ScriptCall<'_>) -> &'c str {
    call.keys().first().map_or("", |key| key.as_ref())
}

/// `EVALSHA` of `script` with `call`'s KEYS and ARGV (and `window`, last),
/// loading the script on NOSCRIPT and sending it again, as the `redis`
/// crate's `ScriptInvocation::invoke` does; but the command is built in
/// place, in one buffer, where an invocation first copies every key and
/// argument into a vector of its own (two allocations each) and then into
/// the command: a dozen allocations less per script.
fn evalsha(
    script: &redis::Script,
    call: &ScriptCall<'_>,
    window: Option<i64>,
    conn: &mut dyn ConnectionLike,
) -> RedisResult<redis::Value> {
    let (keys, args) = (call.keys(), call.args());
    let items = keys.len() + args.len() + usize::from(window.is_some());
    let data = keys
        .iter()
        .chain(args)
        .map(|item| item.len())
        .sum::<usize>()
        + window.map_or(0, |_| 20)
        + "EVALSHA".len()
        + script.get_hash().len()
        + 4;
    let mut cmd = redis::Cmd::with_capacity(3 + items, data);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
    for item in keys.iter().chain(args) {
        cmd.arg(item.as_ref());
    }
    if let Some(window) = window {
        cmd.arg(window);
    }
    match cmd.query(conn) {
        Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load(conn)?;
            cmd.query(conn)
        }
        result => result,
    }
}

/// [`evalsha`] on a connection to one server: the command written in
/// RESP straight into one buffer of its exact size and sent as it is (a
/// `redis::Cmd` copies every key and argument into its own buffer, then
/// packs them into another: three allocations and two copies more per
/// script). The reply is read and checked as `Cmd::query` does.
fn evalsha_packed(
    script: &redis::Script,
    call: &ScriptCall<'_>,
    window: Option<i64>,
    conn: &mut dyn ConnectionLike,
) -> RedisResult<redis::Value> {
    let (keys, args) = (call.keys(), call.args());
    let hash = script.get_hash();
    let mut window_digits = Digits::new();
    let window = window.map(|window| window_digits.of(window));
    let mut key_count = Digits::new();
    let key_count = key_count.of(i64::try_from(keys.len()).unwrap_or(i64::MAX));
    let items = keys
        .iter()
        .chain(args)
        .map(|item| item.as_bytes())
        .chain(window);
    let mut head = Digits::new();
    let head = head.of(
        i64::try_from(3 + keys.len() + args.len() + usize::from(window.is_some()))
            .unwrap_or(i64::MAX),
    );
    // `$<len>\r\n<bytes>\r\n` per item: its length has at most 20 digits.
    let size = 1
        + head.len()
        + 2
        + [b"EVALSHA".as_slice(), hash.as_bytes(), key_count]
            .into_iter()
            .chain(items.clone())
            .map(|item| item.len() + 25)
            .sum::<usize>();
    let mut packed = Vec::with_capacity(size);
    packed.push(b'*');
    packed.extend_from_slice(head);
    packed.extend_from_slice(b"\r\n");
    for item in [b"EVALSHA".as_slice(), hash.as_bytes(), key_count]
        .into_iter()
        .chain(items)
    {
        let mut length = Digits::new();
        packed.push(b'$');
        packed.extend_from_slice(length.of(i64::try_from(item.len()).unwrap_or(i64::MAX)));
        packed.extend_from_slice(b"\r\n");
        packed.extend_from_slice(item);
        packed.extend_from_slice(b"\r\n");
    }
    let send = |conn: &mut dyn ConnectionLike| {
        conn.req_packed_command(&packed)
            .and_then(redis::Value::extract_error)
    };
    match send(conn) {
        Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load(conn)?;
            send(conn)
        }
        result => result,
    }
}

/// An integer's decimal digits, spelled on the stack.
struct Digits([u8; 20]);

impl Digits {
    fn new() -> Digits {
        Digits([0; 20])
    }

    /// `value`'s digits (a negative value is spelled as 0: none is sent).
    fn of(&mut self, value: i64) -> &[u8] {
        let mut rest = u64::try_from(value).unwrap_or(0);
        let mut at = self.0.len();
        loop {
            at -= 1;
            self.0[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        &self.0[at..]
    }
}

impl LockBackend for RedisBackend {
    fn run_script(&self, call: &ScriptCall<'_>) -> Result<Reply> {
        self.run_call(call)
    }

    fn response_timeout(&self) -> Option<Duration> {
        Some(self.options.response_timeout)
    }

    fn server_now_ms(&self) -> Option<i64> {
        // A cluster's nodes each have their own clock (see `cluster::routing`).
        if self.target.is_cluster() {
            return None;
        }
        self.clock.now_ms()
    }

    fn publish(&self, channel: &str, payload: &str) -> Result<()> {
        // On a cluster, sharded: the waiters SSUBSCRIBE (see `with_pubsub`).
        let command = if self.sharded() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        };
        let mut cmd = redis::cmd(command);
        cmd.arg(channel).arg(payload);
        // A message sent twice wakes a waiter twice: harmless.
        self.round_trip(command, Resend::Harmless, |conn, _| cmd.query::<i64>(conn))
            .map(drop)
    }

    fn with_pubsub(
        &self,
        session: &mut dyn FnMut(&mut dyn PubSubConnection) -> Result<()>,
    ) -> Result<()> {
        // Through the manager: with Sentinel, to the current master.
        let manager = Manager {
            target: self.target.clone(),
            options: self.options.clone(),
            clock: Arc::clone(&self.clock),
        };
        #[cfg(feature = "cluster")]
        if let Target::Cluster(target) = &self.target {
            let mut pubsub = self::cluster::ClusterPubSub::new(target, &self.address)?;
            return session(&mut pubsub);
        }
        let (mut conn, epoch) = manager.connect_single().map_err(|err| {
            self.redis_error(
                "opening the pub/sub connection",
                err,
                self.options.connection_timeout,
            )
        })?;
        let mut pubsub = RedisPubSub {
            backend: self,
            pubsub: conn.as_pubsub(),
            read_timeout: None,
            epoch,
        };
        session(&mut pubsub)
    }

    fn server_command(&self, args: &[&str]) -> Result<Vec<ServerReply>> {
        self.plain_command(args)
    }

    fn slot_of(&self, key: &str) -> Option<u16> {
        #[cfg(feature = "cluster")]
        if let Target::Cluster(_) = &self.target {
            return Some(self::cluster::slot(key.as_bytes()));
        }
        let _ = key;
        None
    }
}
