//! [`RedisBackend`]: the [`LockBackend`] on a real Redis server.
//!
//! Commands go through an r2d2 pool of plain connections; every operation is
//! exactly one Lua script (EVALSHA, reloaded on NOSCRIPT). Pub/sub gets a
//! dedicated connection per session, outside the pool, because a subscribed
//! connection cannot run other commands.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::{ConnectionLike, RedisError, RedisResult};

use super::{
    Effect, LockBackend, Message, PubSubConnection, ReplicaAcknowledgement, ReplicaShortfall,
    Reply, Resend, ScriptCall,
};
use crate::event::{EventHandler, LoggingEventHandler, ReplicaShortfallEvent};
use crate::{Error, Result};

/// Tunables of a [`RedisBackend`].
///
/// ```
/// use std::time::Duration;
/// let options = redisync::backend::RedisOptions::default()
///     .pool_size(8)
///     .connection_timeout(Duration::from_secs(2));
/// assert_eq!(options.get_pool_size(), 8);
/// ```
#[derive(Debug, Clone)]
pub struct RedisOptions {
    pool_size: u32,
    connection_timeout: Duration,
    response_timeout: Duration,
    /// Certificates for `rediss://` (see `super::tls`).
    pub(super) tls: super::tls::TlsSettings,
    /// `WAIT` for replicas after every lock-changing script.
    replica_ack: Option<ReplicaAcknowledgement>,
    /// Hears of writes kept despite a replica shortfall (the client's).
    pub(crate) events: Option<Arc<dyn EventHandler>>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            pool_size: 16,
            connection_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(3),
            tls: super::tls::TlsSettings::default(),
            replica_ack: None,
            events: None,
        }
    }
}

impl RedisOptions {
    /// The most pooled command connections. Defaults to 16; must be at least 1.
    ///
    /// ```
    /// let options = redisync::backend::RedisOptions::default().pool_size(4);
    /// assert_eq!(options.get_pool_size(), 4);
    /// ```
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// How long to wait for a connection (to connect, or for a free pooled
    /// one). Defaults to 10 seconds; must be positive.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let options = redisync::backend::RedisOptions::default().connection_timeout(Duration::from_secs(1));
    /// assert_eq!(options.get_connection_timeout(), Duration::from_secs(1));
    /// ```
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long to wait for a reply before the call fails (Redisson's
    /// `timeout`). Defaults to 3 seconds; must be positive.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let options = redisync::backend::RedisOptions::default().response_timeout(Duration::from_secs(1));
    /// assert_eq!(options.get_response_timeout(), Duration::from_secs(1));
    /// ```
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The pool size.
    ///
    /// ```
    /// assert_eq!(redisync::backend::RedisOptions::default().get_pool_size(), 16);
    /// ```
    pub fn get_pool_size(&self) -> u32 {
        self.pool_size
    }

    /// The connection timeout.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(redisync::backend::RedisOptions::default().get_connection_timeout(), Duration::from_secs(10));
    /// ```
    pub fn get_connection_timeout(&self) -> Duration {
        self.connection_timeout
    }

    /// The response timeout.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(redisync::backend::RedisOptions::default().get_response_timeout(), Duration::from_secs(3));
    /// ```
    pub fn get_response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// For a `rediss://` URL: trusts the certificate authorities in `pem`
    /// (one or more PEM `CERTIFICATE` blocks) instead of the system's trust
    /// store, e.g. your own CA for a self-signed Redis server certificate.
    /// Calling it again adds more. The server certificate must name the host
    /// of the URL (a DNS name, or an IP address for `rediss://127.0.0.1`).
    /// Only with the `tls` feature; `open_with` rejects it with a `redis://`
    /// URL, or when `pem` holds no certificate. With Sentinel it applies to
    /// the sentinels and the master, and makes the master TLS (see
    /// [`SentinelConfig`](super::SentinelConfig)).
    ///
    /// ```no_run
    /// let ca = std::fs::read("/etc/redis/tls/ca.crt")?;
    /// let options = redisync::backend::RedisOptions::default().tls_root_certificate(ca);
    /// let backend = redisync::RedisBackend::open_with("rediss://redis.internal:6380/", options)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.add_root_certificates(pem.into());
        self
    }

    /// For a `rediss://` URL: presents this client certificate (a PEM
    /// certificate chain, leaf first) and its PEM private key (PKCS#8, PKCS#1
    /// or SEC1) to a server that requires mutual TLS (`tls-auth-clients yes`).
    /// The key is never shown by `Debug` or in an error. Only with the `tls`
    /// feature. With Sentinel it is presented to the sentinels and the
    /// master alike.
    ///
    /// ```no_run
    /// let options = redisync::backend::RedisOptions::default()
    ///     .tls_root_certificate(std::fs::read("ca.crt")?)
    ///     .tls_client_certificate(std::fs::read("client.crt")?, std::fs::read("client.key")?);
    /// let backend = redisync::RedisBackend::open_with("rediss://redis.internal:6380/", options)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_client_certificate(
        mut self,
        certificate_chain_pem: impl Into<Vec<u8>>,
        private_key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls
            .set_client_identity(certificate_chain_pem.into(), private_key_pem.into());
        self
    }

    /// Waits for replicas after every lock-changing script (Redisson's
    /// synced-replica check): success is reported only once
    /// `ack.replicas()` replicas confirmed the write. Unset by default.
    /// Its timeout must be shorter than the response timeout.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redisync::backend::{RedisOptions, ReplicaAcknowledgement};
    /// let options = RedisOptions::default()
    ///     .replica_acknowledgement(ReplicaAcknowledgement::new(1, Duration::from_millis(500)));
    /// assert_eq!(options.get_replica_acknowledgement().unwrap().replicas(), 1);
    /// ```
    pub fn replica_acknowledgement(mut self, ack: ReplicaAcknowledgement) -> Self {
        self.replica_ack = Some(ack);
        self
    }

    /// The replica acknowledgement, if set.
    ///
    /// ```
    /// assert!(redisync::backend::RedisOptions::default().get_replica_acknowledgement().is_none());
    /// ```
    pub fn get_replica_acknowledgement(&self) -> Option<ReplicaAcknowledgement> {
        self.replica_ack
    }

    fn validate(&self) -> Result<()> {
        if let Some(ack) = &self.replica_ack {
            ack.validate()?;
            if ack.timeout() >= self.response_timeout {
                return Err(Error::invalid(
                    "replica_acknowledgement",
                    format!(
                        "its timeout ({:?}) must be shorter than the response timeout ({:?}), \
                         or every WAIT that runs out would fail as a lost reply",
                        ack.timeout(),
                        self.response_timeout
                    ),
                ));
            }
        }
        if self.pool_size == 0 {
            return Err(Error::invalid("pool_size", "must be at least 1, got 0"));
        }
        for (what, value) in [
            ("connection_timeout", self.connection_timeout),
            ("response_timeout", self.response_timeout),
        ] {
            if value.is_zero() {
                return Err(Error::invalid(what, "must be positive, got 0s"));
            }
        }
        Ok(())
    }
}

/// Where connections go: one fixed server, (feature `sentinel`) the
/// current master of a Sentinel-monitored group, or (feature `cluster`) a
/// Redis Cluster.
#[derive(Clone)]
// Cloned once per connection, never moved in a hot path: boxing the client
// would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Target {
    Direct(redis::Client),
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<super::sentinel::SentinelTarget>),
    #[cfg(feature = "cluster")]
    Cluster(Arc<super::cluster::ClusterTarget>),
}

impl Target {
    /// Whether this is one server reached over plain TCP (`redis://`).
    fn is_plain_tcp(&self) -> bool {
        match self {
            Target::Direct(client) => {
                matches!(
                    client.get_connection_info().addr(),
                    redis::ConnectionAddr::Tcp(..)
                )
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Whether a connection made under `epoch` may go to a master that a
    /// failover has replaced since (always false for a fixed server).
    fn is_stale(&self, epoch: u64) -> bool {
        let _ = epoch;
        match self {
            Target::Direct(_) => false,
            #[cfg(feature = "sentinel")]
            Target::Sentinel(target) => target.epoch() != epoch,
            // The cluster connection follows MOVED and failovers itself.
            #[cfg(feature = "cluster")]
            Target::Cluster(_) => false,
        }
    }

    /// Whether a connection that just failed with `err` must not go back
    /// to the pool. A READONLY reply: the server was demoted. On a cluster,
    /// also every error that is not a plain server reply (I/O, refused,
    /// timeout, a failed slot refresh): the `redis` crate's cluster
    /// connection keeps its slot map until it is replaced, so after a master
    /// is killed it would keep asking the dead address; a fresh one reads
    /// the slot map again and, once a replica is promoted, reaches it (and
    /// after a timeout, the old socket may still deliver a late reply).
    fn discards_after(&self, err: &RedisError) -> bool {
        if is_read_only(err) {
            return true;
        }
        #[cfg(feature = "cluster")]
        if let Target::Cluster(_) = self {
            return !matches!(err.kind(), redis::ErrorKind::Server(_));
        }
        false
    }

    /// A Redis Cluster: scripts publish with SPUBLISH, waiters SSUBSCRIBE.
    fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        if let Target::Cluster(_) = self {
            return true;
        }
        false
    }
}

/// A plain connection, or (feature `cluster`) a cluster connection that
/// routes each script by its first key's slot and follows redirections.
enum Link {
    Single(redis::Connection),
    #[cfg(feature = "cluster")]
    Cluster(Box<super::cluster_routing::RoutedConnection>),
}

impl Link {
    fn as_connection(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Link::Single(conn) => conn,
            #[cfg(feature = "cluster")]
            Link::Cluster(conn) => conn,
        }
    }

    fn set_read_timeout(&self, timeout: Duration) -> RedisResult<()> {
        match self {
            Link::Single(conn) => conn.set_read_timeout(Some(timeout)),
            // The routed connection's sockets keep the response timeout
            // they were made with (see `cluster.rs`).
            #[cfg(feature = "cluster")]
            Link::Cluster(_) => Ok(()),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            Link::Single(conn) => conn.is_open(),
            #[cfg(feature = "cluster")]
            Link::Cluster(conn) => conn.is_open(),
        }
    }

    /// `WAIT replicas timeout_ms` on the server that ran the last script:
    /// on a cluster, that script's slot master.
    fn wait_for_replicas(&mut self, replicas: u32, timeout_ms: u64) -> RedisResult<i64> {
        match self {
            Link::Single(conn) => redis::cmd("WAIT").arg(replicas).arg(timeout_ms).query(conn),
            #[cfg(feature = "cluster")]
            Link::Cluster(conn) => conn.wait_for_replicas(replicas, timeout_ms),
        }
    }
}

/// A connection with what the pool needs to know to discard it.
struct Conn {
    conn: Link,
    /// The Sentinel epoch it was made under (0 for a fixed server).
    epoch: u64,
    /// Set when a reply showed the server cannot serve us any more (a
    /// READONLY replica), or a round trip failed on the socket (it may
    /// still deliver a late reply): the pool drops it instead of reusing it.
    broken: bool,
    /// When it last answered (or was made): a connection idle longer than
    /// [`IDLE_VALIDATION`], or idle since a fault was seen, is checked with
    /// a PING before it carries a script.
    last_used: Instant,
    /// The read timeout now set on the socket (a syscall to change).
    read_timeout: Duration,
}

impl Conn {
    fn new(conn: Link, epoch: u64, read_timeout: Duration) -> Conn {
        Conn {
            conn,
            epoch,
            broken: false,
            last_used: Instant::now(),
            read_timeout,
        }
    }

    /// Sets the socket's read timeout to `timeout` unless it is set already.
    fn set_read_timeout(&mut self, timeout: Duration) -> RedisResult<()> {
        let timeout = timeout.max(Duration::from_millis(1));
        if timeout != self.read_timeout {
            self.conn.set_read_timeout(timeout)?;
            self.read_timeout = timeout;
        }
        Ok(())
    }
}

/// Opens a connection through `client` within `timeout` in all (capped by
/// the caller's deadline). The `redis` crate waits what is left of the
/// timeout after the connect (and TLS handshake) once for each reply of
/// its setup pipeline, so a frozen server would cost it once per setup
/// command: with AUTH and SELECT both, it is split in two. (Clients made
/// by `tls::client_for` send no `CLIENT SETINFO`, so there are at most
/// these two.)
pub(super) fn connect_within(
    client: &redis::Client,
    timeout: Duration,
) -> RedisResult<redis::Connection> {
    let settings = client.get_connection_info().redis_settings();
    let steps = u32::from(settings.password().is_some()) + u32::from(settings.db() != 0);
    client.get_connection_with_timeout(crate::deadline::cap(timeout) / steps.max(1))
}

/// A pooled connection unused for this long is checked with a PING before it
/// carries a script: the server may have closed it meanwhile (an idle
/// `timeout`, a restart, `CLIENT KILL`), and a script sent on a dead socket
/// has an unknown outcome. A busy connection costs no extra round trip.
const IDLE_VALIDATION: Duration = Duration::from_secs(1);

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

/// Opens connections with a bound and sets read/write timeouts on each, so a
/// hung server fails a call instead of blocking it forever.
struct Manager {
    target: Target,
    options: RedisOptions,
}

impl Manager {
    /// A plain connection to the one server (with Sentinel, the current
    /// master), and its epoch. Not for a cluster.
    fn connect_single(&self) -> std::result::Result<(redis::Connection, u64), RedisError> {
        let (conn, epoch) = match &self.target {
            Target::Direct(client) => (connect_within(client, self.options.connection_timeout)?, 0),
            #[cfg(feature = "sentinel")]
            Target::Sentinel(target) => target.connect()?,
            #[cfg(feature = "cluster")]
            Target::Cluster(_) => {
                return Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "a cluster has no single server to connect to",
                )));
            }
        };
        conn.set_read_timeout(Some(self.options.response_timeout))?;
        conn.set_write_timeout(Some(self.options.response_timeout))?;
        Ok((conn, epoch))
    }

    fn connect(&self) -> std::result::Result<Conn, RedisError> {
        let timeout = self.options.response_timeout;
        #[cfg(feature = "cluster")]
        if let Target::Cluster(target) = &self.target {
            return Ok(Conn::new(
                Link::Cluster(Box::new(target.connect()?)),
                0,
                timeout,
            ));
        }
        let (conn, epoch) = self.connect_single()?;
        Ok(Conn::new(Link::Single(conn), epoch, timeout))
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = RedisError;

    fn connect(&self) -> std::result::Result<Conn, RedisError> {
        Manager::connect(self)
    }

    fn is_valid(&self, conn: &mut Conn) -> std::result::Result<(), RedisError> {
        redis::cmd("PING").query::<()>(conn.conn.as_connection())
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || !conn.conn.is_open() || self.target.is_stale(conn.epoch)
    }
}

/// A `READONLY You can't write against a read only replica` reply: the
/// server was a master and a failover demoted it.
fn is_read_only(err: &RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
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
    /// let options = redisync::backend::RedisOptions::default().pool_size(4);
    /// let backend = redisync::RedisBackend::open_with("redis://127.0.0.1:6379/", options)?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn open_with(url: &str, options: RedisOptions) -> Result<Self> {
        options.validate()?;
        // No error quotes the URL: it may hold a password.
        let client = super::tls::open_client(url, &options.tls)?;
        let address = redacted_address(client.get_connection_info());
        Self::open_target(Target::Direct(client), address, options)
    }

    /// Connects to the current master of the Sentinel-monitored group
    /// `master_name`, found through the sentinels at `sentinel_urls`
    /// (`redis://[:password@]host:port`, or `rediss://` for TLS to the
    /// sentinels and the master with the system's roots; see
    /// [`SentinelConfig`](super::SentinelConfig) for the TLS rule), with
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
            &super::SentinelConfig::new(master_name, sentinel_urls),
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
    /// to the master alike. See [`SentinelConfig`](super::SentinelConfig).
    ///
    /// # Errors
    /// As [`open_sentinel`](Self::open_sentinel), plus `InvalidArgument` for
    /// invalid options (including unusable TLS certificates or keys).
    ///
    /// ```no_run
    /// use redisync::backend::{RedisOptions, SentinelConfig};
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
    /// use redisync::backend::{RedisOptions, SentinelConfig};
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
    pub fn open_sentinel_with(
        config: &super::SentinelConfig,
        options: RedisOptions,
    ) -> Result<Self> {
        options.validate()?;
        let target = super::sentinel::SentinelTarget::new(
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
    /// let options = redisync::backend::RedisOptions::default().pool_size(4);
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
        let urls: Vec<String> = node_urls
            .into_iter()
            .map(|url| url.as_ref().to_owned())
            .collect();
        let target = super::cluster::ClusterTarget::new(&urls, &options)?;
        let address = target.description().to_owned();
        Self::open_target(Target::Cluster(target), address, options)
    }

    fn open_target(target: Target, address: String, options: RedisOptions) -> Result<Self> {
        let manager = Manager {
            target: target.clone(),
            options: options.clone(),
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
            .build_unchecked(manager);
        Ok(RedisBackend {
            pool,
            target,
            unreachable: AtomicBool::new(false),
            suspect_since: AtomicU64::new(0),
            created: Instant::now(),
            options,
            address,
        })
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
    /// [`IDLE_VALIDATION`] and `suspect_since`).
    fn connection(&self) -> Result<r2d2::PooledConnection<Manager>> {
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
            let timeout = crate::deadline::cap(self.options.response_timeout);
            let alive = conn.set_read_timeout(timeout).is_ok()
                && redis::cmd("PING")
                    .query::<()>(conn.conn.as_connection())
                    .is_ok();
            if alive {
                conn.last_used = Instant::now();
                return Ok(conn);
            }
            conn.broken = true;
            self.note_dead_connection();
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
            let manager = Manager {
                target: self.target.clone(),
                options: self.options.clone(),
            };
            let timeout = crate::deadline::cap(self.options.connection_timeout);
            manager
                .connect()
                .map_err(|err| self.redis_error("connecting", err, timeout))?;
            self.unreachable.store(false, Ordering::Relaxed);
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
        mut call: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> Result<(T, r2d2::PooledConnection<Manager>)> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut conn = self.connection()?;
            let timeout = crate::deadline::cap(self.options.response_timeout);
            let reply = conn
                .set_read_timeout(timeout)
                .and_then(|()| call(conn.conn.as_connection()));
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
                Err(super::replication::shortfall_error(
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
            if attempt >= super::replication::ACQUIRE_ATTEMPTS {
                return Err(super::replication::shortfall_error(
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
        let script = loaded_script(call.script(), self.sharded());
        let mut invocation = script.prepare_invoke();
        for key in call.keys() {
            invocation.key(key.as_ref());
        }
        for arg in call.args() {
            invocation.arg(arg.as_ref());
        }
        let operation = call.script().operation();
        self.round_trip(operation, call.resend(), |conn| {
            match invocation.invoke::<redis::Value>(conn) {
                Ok(value) => Ok(reply_from_value(value)),
                Err(err) => script_error_reply(&err).ok_or(err),
            }
        })
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

    /// Whether scripts publish through sharded pub/sub (a cluster).
    fn sharded(&self) -> bool {
        self.target.is_cluster()
    }
}

/// The name a call is about (its first key), for messages and events.
fn call_name<'c>(call: &'c ScriptCall<'_>) -> &'c str {
    call.keys().first().map_or("", |key| key.as_ref())
}

/// The `redis` crate's form of a script (its SHA1 computed once per
/// process), plain or sharded.
fn loaded_script(script: &'static super::Script, sharded: bool) -> Arc<redis::Script> {
    type Cache = parking_lot::RwLock<std::collections::HashMap<(usize, bool), Arc<redis::Script>>>;
    static CACHE: std::sync::LazyLock<Cache> = std::sync::LazyLock::new(Cache::default);
    // A `Script` is a `static`: its address identifies it.
    let id = (std::ptr::from_ref(script) as usize, sharded);
    if let Some(loaded) = CACHE.read().get(&id) {
        return Arc::clone(loaded);
    }
    let code = if sharded {
        script.sharded_code()
    } else {
        script.code()
    };
    Arc::clone(
        CACHE
            .write()
            .entry(id)
            .or_insert_with(|| Arc::new(redis::Script::new(code))),
    )
}

/// A script's reply as the seam carries it.
fn reply_from_value(value: redis::Value) -> Reply {
    use redis::Value;
    match value {
        Value::Nil => Reply::Nil,
        Value::Int(value) => Reply::Int(value),
        Value::BulkString(bytes) => Reply::Bulk(bytes),
        Value::Array(items) | Value::Set(items) => {
            Reply::Array(items.into_iter().map(reply_from_value).collect())
        }
        Value::SimpleString(text) => Reply::Status(text),
        Value::Okay => Reply::Status("OK".to_owned()),
        Value::Boolean(flag) => Reply::Int(i64::from(flag)),
        Value::ServerError(err) => Reply::Error(format!(
            "{} {}",
            err.code(),
            err.details().unwrap_or_default()
        )),
        other => Reply::Status(format!("{other:?}")),
    }
}

/// The error codes a script's own failure carries: `ERR` (a refused
/// argument, a runtime error, a command's `ERR` reply) and `WRONGTYPE`.
/// Every other code is the server's state (READONLY, NOPERM, LOADING,
/// MISCONF, ...), not the script's answer.
const SCRIPT_ERROR_CODES: [&str; 2] = ["ERR", "WRONGTYPE"];

/// The script's own error reply in `err`, if that is what it is.
fn script_error_reply(err: &RedisError) -> Option<Reply> {
    let code = err.code()?;
    if !SCRIPT_ERROR_CODES.contains(&code) || is_acl_refusal(err) {
        return None;
    }
    Some(Reply::Error(format!(
        "{code} {}",
        err.detail().unwrap_or_default()
    )))
}

/// An ACL refusal: NOPERM at top level, or a command, key or channel a
/// script used (Redis 7 answers those with `ERR`, naming the user).
fn is_acl_refusal(err: &RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
        || err
            .detail()
            .is_some_and(|detail| detail.contains("The user executing the script can't"))
}

/// Converts a `redis` error: WRONGTYPE is a protocol error; I/O, refusal
/// and timeouts are connection errors, said in words with the address and
/// the operation (`timeout` is the read timeout the round trip had).
fn redis_error(address: &str, op: &str, err: RedisError, timeout: Duration) -> Error {
    if let Some(error) = connection_failure(address, op, &err, timeout) {
        return error;
    }
    // A demoted master: the connection is useless (the pool drops it, see
    // `Conn::broken`) and a retry on a new one reaches the new master.
    if is_read_only(&err) {
        return Error::backend_caused_by(
            format!("{op} on Redis at {address}: the server is a read-only replica (failover?)"),
            err,
            true,
        );
    }
    // Say it in words: the crate's own text for a refused AUTH is terse.
    // Neither text carries the password (the server never echoes it).
    if err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("WRONGPASS" | "NOAUTH"))
    {
        return Error::backend_caused_by(
            format!(
                "{op} on Redis at {address}: authentication failed \
                 (wrong user name or password, or the user is disabled)"
            ),
            err,
            false,
        );
    }
    if is_acl_refusal(&err) {
        return Error::backend_caused_by(
            format!(
                "{op} on Redis at {address}: permission denied by the server's ACL \
                 (see README, Security, for the commands the user needs)"
            ),
            err,
            false,
        );
    }
    let connection = err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout();
    Error::backend_caused_by(format!("{op} on Redis at {address}"), err, connection)
}

/// A connection failure said in words: what happened, where, during what.
/// `None` for any other error. The `redis` crate's own text ("Resource
/// temporarily unavailable (os error 11)") stays out of the message: it
/// says neither what happened nor where.
fn connection_failure(
    address: &str,
    op: &str,
    err: &RedisError,
    timeout: Duration,
) -> Option<Error> {
    use std::io::ErrorKind as Io;
    let what = if err.is_timeout() {
        format!("timed out after {timeout:?} waiting for a reply from Redis at {address} ({op})")
    } else {
        match io_kind(err) {
            Some(Io::ConnectionRefused) => {
                format!("connection refused by Redis at {address} ({op})")
            }
            Some(
                Io::UnexpectedEof | Io::ConnectionReset | Io::ConnectionAborted | Io::BrokenPipe,
            ) => {
                format!("Redis at {address} closed the connection ({op})")
            }
            Some(Io::HostUnreachable | Io::NetworkUnreachable) => {
                format!("no route to Redis at {address} ({op})")
            }
            _ => return None,
        }
    };
    Some(Error::backend(what, true))
}

/// The kind of the I/O error behind `err`, if it is one.
fn io_kind(err: &RedisError) -> Option<std::io::ErrorKind> {
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    // The crate keeps its I/O errors behind an `Arc<dyn Error>`.
    let source = std::error::Error::source(err)?;
    let io = match source.downcast_ref::<Shared>() {
        Some(shared) => shared.downcast_ref::<std::io::Error>(),
        None => source.downcast_ref::<std::io::Error>(),
    };
    match io {
        Some(io) => Some(io.kind()),
        // Errors the crate makes up itself (its parser's "unexpected end
        // of file") carry no `io::Error`; its predicates still know them.
        None if err.is_timeout() => Some(std::io::ErrorKind::TimedOut),
        None if err.is_connection_refusal() => Some(std::io::ErrorKind::ConnectionRefused),
        None if err.is_connection_dropped() => Some(std::io::ErrorKind::UnexpectedEof),
        None => None,
    }
}

fn redacted_address(info: &redis::ConnectionInfo) -> String {
    format!("{}/{}", info.addr(), info.redis_settings().db())
}

impl LockBackend for RedisBackend {
    fn run_script(&self, call: &ScriptCall<'_>) -> Result<Reply> {
        self.run_call(call)
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
        self.round_trip(command, Resend::Harmless, |conn| cmd.query::<i64>(conn))
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
        };
        #[cfg(feature = "cluster")]
        if let Target::Cluster(target) = &self.target {
            let mut pubsub = super::cluster::ClusterPubSub::new(target, &self.address)?;
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
}

/// A subscribed connection; lives only inside [`RedisBackend::with_pubsub`].
struct RedisPubSub<'a> {
    backend: &'a RedisBackend,
    pubsub: redis::PubSub<'a>,
    /// The read timeout currently set on the socket (a syscall to change).
    read_timeout: Option<Duration>,
    /// The Sentinel epoch of the connection: once a failover moves the
    /// master, the session ends so the subscriber reconnects to the new one
    /// (the old master may keep this connection open for a while).
    epoch: u64,
}

impl RedisPubSub<'_> {
    fn set_read_timeout(&mut self, timeout: Duration) -> Result<()> {
        let timeout = timeout.max(Duration::from_millis(1));
        if self.read_timeout != Some(timeout) {
            self.pubsub.set_read_timeout(Some(timeout)).map_err(|err| {
                self.backend
                    .redis_error("configuring pub/sub", err, timeout)
            })?;
            self.read_timeout = Some(timeout);
        }
        Ok(())
    }
}

impl PubSubConnection for RedisPubSub<'_> {
    fn subscribe(&mut self, channels: &[String]) -> Result<()> {
        if channels.is_empty() {
            return Ok(());
        }
        // A timed-out confirmation would desynchronise the reply stream, so
        // give it the full response timeout and treat a timeout as a broken
        // connection (the subscriber then reconnects).
        self.set_read_timeout(self.backend.options.response_timeout)?;
        self.pubsub.subscribe(channels).map_err(|err| {
            self.backend
                .redis_error("SUBSCRIBE", err, self.backend.options.response_timeout)
        })
    }

    fn unsubscribe(&mut self, channels: &[String]) -> Result<()> {
        if channels.is_empty() {
            return Ok(());
        }
        self.set_read_timeout(self.backend.options.response_timeout)?;
        self.pubsub.unsubscribe(channels).map_err(|err| {
            self.backend
                .redis_error("UNSUBSCRIBE", err, self.backend.options.response_timeout)
        })
    }

    fn next_message(&mut self, timeout: Duration) -> Result<Option<Message>> {
        if self.backend.target.is_stale(self.epoch) {
            return Err(Error::backend(
                format!(
                    "reading pub/sub on Redis at {}: a failover moved the master; reconnecting",
                    self.backend.address
                ),
                true,
            ));
        }
        self.set_read_timeout(timeout)?;
        match self.pubsub.get_message() {
            Ok(msg) => {
                let payload = String::from_utf8_lossy(msg.get_payload_bytes()).into_owned();
                Ok(Some(Message::new(msg.get_channel_name(), payload)))
            }
            Err(err) if err.is_timeout() => Ok(None),
            // A signal (SIGSTOP/SIGCONT of this process) interrupted the
            // read: the connection is fine; the subscriber reads again.
            Err(err) if io_kind(&err) == Some(std::io::ErrorKind::Interrupted) => Ok(None),
            Err(err) => Err(self.backend.redis_error("reading pub/sub", err, timeout)),
        }
    }
}
