//! Opening a [`RedisBackend`]: one constructor per deployment (a server, a
//! Sentinel group's master, a cluster), each checked with a first
//! connection, and the r2d2 pool they share.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use redis::RedisError;

#[cfg(feature = "sentinel")]
use super::SentinelConfig;
use super::errors::{io_kind, redacted_address, redis_error};
use super::pool::{Manager, Target};
use super::{RedisBackend, RedisOptions};
use crate::{Error, Result};

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
        let client = super::tls::open_client(url, &options.tls)?;
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
        let target = super::cluster::ClusterTarget::new(&urls, &options)?;
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
            loaded: super::evalsha::Loaded::default(),
        })
    }
}
