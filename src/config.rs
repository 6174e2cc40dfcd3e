//! [`ClientBuilder`]: the tunables, with Redisson's defaults, validated in
//! [`build`](ClientBuilder::build).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Deployment, LockBackend, RedisBackend, RedisOptions};
use crate::event::{EventHandler, LoggingEventHandler};
use crate::{Client, Error, Result};

/// Where the builder gets its backend from.
enum BackendChoice {
    None,
    Given(Arc<dyn LockBackend>),
    Redis(Deployment),
}

/// Holds per renewal script unless set (Redisson's `lockWatchdogBatchSize`).
const DEFAULT_WATCHDOG_BATCH_SIZE: usize = 100;
/// The largest batch `build()` accepts.
const MAX_WATCHDOG_BATCH_SIZE: usize = 10_000;

/// Builds a [`Client`]; created by [`Client::builder`].
///
/// ```
/// use std::time::Duration;
/// let client = redisync::Client::builder()
///     .backend(redisync::MemoryBackend::new())
///     .watchdog_timeout(Duration::from_secs(10))
///     .build()?;
/// assert_eq!(client.watchdog_timeout(), Duration::from_secs(10));
/// # Ok::<(), redisync::Error>(())
/// ```
#[must_use = "a builder does nothing until .build() is called"]
pub struct ClientBuilder {
    backend: BackendChoice,
    watchdog_timeout: Duration,
    watchdog_batch_size: usize,
    fair_lock_wait_timeout: Duration,
    redis: RedisOptions,
    events: Arc<dyn EventHandler>,
    name_prefix: String,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = match &self.backend {
            BackendChoice::None => "none",
            BackendChoice::Given(_) => "given",
            // Never print the URL: it may carry a password.
            BackendChoice::Redis(Deployment::Single { .. }) => "redis url",
            #[cfg(feature = "sentinel")]
            BackendChoice::Redis(Deployment::Sentinel(_)) => "redis sentinel",
            #[cfg(feature = "cluster")]
            BackendChoice::Redis(Deployment::Cluster { .. }) => "redis cluster",
        };
        f.debug_struct("ClientBuilder")
            .field("backend", &backend)
            .field("watchdog_timeout", &self.watchdog_timeout)
            .field("watchdog_batch_size", &self.watchdog_batch_size)
            .field("fair_lock_wait_timeout", &self.fair_lock_wait_timeout)
            .field("redis", &self.redis)
            .field("events", &self.events)
            .field("name_prefix", &self.name_prefix)
            .finish()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            backend: BackendChoice::None,
            watchdog_timeout: Duration::from_secs(30),
            watchdog_batch_size: DEFAULT_WATCHDOG_BATCH_SIZE,
            fair_lock_wait_timeout: Duration::from_secs(300),
            redis: RedisOptions::default(),
            events: Arc::new(LoggingEventHandler),
            name_prefix: String::new(),
        }
    }
}

impl ClientBuilder {
    /// Uses `backend` (e.g. a [`MemoryBackend`](crate::MemoryBackend) in
    /// tests, or a [`RedisBackend`] you opened yourself).
    ///
    /// ```
    /// let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn backend(mut self, backend: impl LockBackend) -> Self {
        self.backend = BackendChoice::Given(Arc::new(backend));
        self
    }

    /// Uses an already shared backend.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let shared: Arc<dyn redisync::LockBackend> = Arc::new(redisync::MemoryBackend::new());
    /// let client = redisync::Client::builder().shared_backend(shared).build()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn shared_backend(mut self, backend: Arc<dyn LockBackend>) -> Self {
        self.backend = BackendChoice::Given(backend);
        self
    }

    /// Connects to Redis at `url` (`redis://[user:password@]host:port/db`)
    /// when [`build`](Self::build) runs, with the pool settings below.
    /// With a user name the client authenticates with `AUTH user password`
    /// (a Redis 6+ ACL user; see docs/deployments.md, Security, for the commands it
    /// needs). `rediss://` connects over TLS and needs the `tls` feature
    /// (without it, `build()` fails with `InvalidArgument`). The URL, and so
    /// the password, never appears in `Debug` output, errors or logs.
    ///
    /// ```no_run
    /// let client = redisync::Client::builder()
    ///     .redis_url("redis://127.0.0.1:6379/0")
    ///     .pool_size(8)
    ///     .build()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn redis_url(self, url: impl Into<String>) -> Self {
        self.deployment(Deployment::single(url))
    }

    /// Connects, when [`build`](Self::build) runs, to `deployment` (one
    /// server, a Sentinel group's master, a cluster), with the pool
    /// settings below. [`redis_url`](Self::redis_url),
    /// [`sentinel`](Self::sentinel), [`sentinel_config`](Self::sentinel_config)
    /// and [`cluster`](Self::cluster) are shorthands for it.
    ///
    /// ```no_run
    /// use redisync::Deployment;
    /// let client = redisync::Client::builder()
    ///     .deployment(Deployment::single("redis://127.0.0.1:6379/"))
    ///     .build()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn deployment(mut self, deployment: Deployment) -> Self {
        self.backend = BackendChoice::Redis(deployment);
        self
    }

    /// Connects, when [`build`](Self::build) runs, to the current master of
    /// the Sentinel-monitored group `master_name`, found through the
    /// sentinels at `sentinel_urls` (`redis://[:password@]host:port`, or
    /// `rediss://` with the `tls` feature), with the pool settings below.
    /// After a failover the client follows the master (see
    /// [`RedisBackend::open_sentinel`]). For the master's password or
    /// database, use [`sentinel_config`](Self::sentinel_config). TLS:
    /// `rediss://` sentinels, or [`tls_root_certificate`](Self::tls_root_certificate)
    /// / `tls_client_certificate`, make the master TLS too, with the same
    /// certificates (see [`SentinelConfig`](crate::backend::SentinelConfig)).
    /// Only with the `sentinel` feature.
    ///
    /// ```no_run
    /// let client = redisync::Client::builder()
    ///     .sentinel("mymaster", ["redis://10.0.0.5:26379", "redis://10.0.0.6:26379"])
    ///     .response_timeout(std::time::Duration::from_secs(1))
    ///     .build()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn sentinel<I>(self, master_name: impl Into<String>, sentinel_urls: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.sentinel_config(crate::backend::SentinelConfig::new(
            master_name,
            sentinel_urls,
        ))
    }

    /// Like [`sentinel`](Self::sentinel), with the master's credentials and
    /// database. Only with the `sentinel` feature.
    ///
    /// ```no_run
    /// use redisync::SentinelConfig;
    /// let client = redisync::Client::builder()
    ///     .sentinel_config(
    ///         SentinelConfig::new("mymaster", ["redis://10.0.0.5:26379"])
    ///             .master_password("s3cret")
    ///             .database(1),
    ///     )
    ///     .build()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn sentinel_config(self, config: crate::backend::SentinelConfig) -> Self {
        self.deployment(Deployment::Sentinel(config))
    }

    /// Connects, when [`build`](Self::build) runs, to the Redis Cluster
    /// whose nodes include `node_urls` (`redis://[user:password@]host:port`,
    /// or all `rediss://` for TLS, with the `tls` settings below),
    /// with the pool settings below (see [`RedisBackend::open_cluster`]).
    /// Only with the `cluster` feature.
    ///
    /// ```no_run
    /// let client = redisync::Client::builder()
    ///     .cluster(["redis://10.0.0.5:7000", "redis://10.0.0.6:7000"])
    ///     .response_timeout(std::time::Duration::from_secs(1))
    ///     .build()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster<I>(self, node_urls: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.deployment(Deployment::cluster(node_urls))
    }

    /// The lease of a lock taken without an explicit lease; the watchdog
    /// renews it every third of this while the lock is held, so a crashed
    /// holder's lock frees itself within this time.
    ///
    /// Defaults to 30 seconds (Redisson's `lockWatchdogTimeout`). `build()`
    /// rejects less than 3 ms or more than [`MAX_LEASE`](crate::MAX_LEASE)
    /// (2^47 ms).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let client = redisync::Client::builder()
    ///     .backend(redisync::MemoryBackend::new())
    ///     .watchdog_timeout(Duration::from_millis(300))
    ///     .build()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// The most held locks one renewal script renews (Redisson's
    /// `lockWatchdogBatchSize`). The watchdog renews the holds that fall due
    /// together in batches of this size (of one kind, and on a cluster of one
    /// hash slot), so one client keeps about `batch size / round trip` locks
    /// per second alive; each lock's outcome is its own.
    ///
    /// Defaults to 100. `build()` rejects 0 and more than 10,000 (a larger
    /// script blocks the server for longer than a round trip saves).
    ///
    /// ```
    /// let client = redisync::Client::builder()
    ///     .backend(redisync::MemoryBackend::new())
    ///     .watchdog_batch_size(500)
    ///     .build()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn watchdog_batch_size(mut self, holds: usize) -> Self {
        self.watchdog_batch_size = holds;
        self
    }

    /// How long a fair-lock waiter keeps its place in the queue when it
    /// waits without a bound (`lock()`): a waiter that dies is skipped once
    /// its slot, this long past the slot ahead, runs out. `try_lock_for(wait)`
    /// uses `wait` instead.
    ///
    /// Defaults to 300 seconds (Redisson's current `fairLockWaitTimeout`;
    /// 5 s before mid-2020). `build()` rejects less than 1 ms or more than
    /// [`MAX_LEASE`](crate::MAX_LEASE) (2^47 ms: the scripts add it to the
    /// clock). A `try_lock_for` wait longer than that is fine: its queue
    /// slot is capped at `MAX_LEASE`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let client = redisync::Client::builder()
    ///     .backend(redisync::MemoryBackend::new())
    ///     .fair_lock_wait_timeout(Duration::from_secs(5))
    ///     .build()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn fair_lock_wait_timeout(mut self, timeout: Duration) -> Self {
        self.fair_lock_wait_timeout = timeout;
        self
    }

    /// The most pooled Redis connections (with [`redis_url`](Self::redis_url)).
    /// Defaults to 16; `build()` rejects 0.
    ///
    /// ```
    /// let builder = redisync::Client::builder().pool_size(4);
    /// ```
    pub fn pool_size(mut self, size: u32) -> Self {
        self.redis = self.redis.pool_size(size);
        self
    }

    /// How long to wait for a Redis connection (to connect, or for a free
    /// pooled one). Defaults to 10 seconds; `build()` rejects zero.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = redisync::Client::builder().connection_timeout(Duration::from_secs(2));
    /// ```
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.redis = self.redis.connection_timeout(timeout);
        self
    }

    /// How long to wait for a Redis reply. Defaults to 3 seconds; `build()`
    /// rejects zero.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = redisync::Client::builder().response_timeout(Duration::from_secs(1));
    /// ```
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.redis = self.redis.response_timeout(timeout);
        self
    }

    /// Reports every lock-changing write (acquire, release, renewal,
    /// semaphore and latch changes) only once `ack.replicas()` replicas
    /// confirmed it (Redis `WAIT`), so a failover right after an acquisition
    /// cannot hand the lock to a second holder. On a shortfall an
    /// acquisition is rolled back and retried, then fails, or is kept and
    /// reported to the event handler, as
    /// [`ReplicaShortfall`](crate::backend::ReplicaShortfall) says. Only with
    /// [`redis_url`](Self::redis_url); `build()` checks it (timeout under
    /// the response timeout).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redisync::{ReplicaAcknowledgement, ReplicaShortfall};
    /// let builder = redisync::Client::builder()
    ///     .redis_url("redis://127.0.0.1:6379/")
    ///     .replica_acknowledgement(
    ///         ReplicaAcknowledgement::new(1, Duration::from_millis(500)).on_shortfall(ReplicaShortfall::Fail),
    ///     );
    /// ```
    pub fn replica_acknowledgement(mut self, ack: crate::backend::ReplicaAcknowledgement) -> Self {
        self.redis = self.redis.replica_acknowledgement(ack);
        self
    }

    /// For a `rediss://` URL: trusts the certificate authorities in `pem`
    /// (one or more PEM `CERTIFICATE` blocks) instead of the system's trust
    /// store, e.g. the CA that signed a self-signed Redis server certificate.
    /// Calling it again adds more. The server certificate must name the
    /// URL's host (a DNS name, or an IP address for `rediss://127.0.0.1`).
    /// Every connection of the client uses it: the pooled ones and the
    /// pub/sub one (with Sentinel: to the sentinels and to the master, which
    /// it makes TLS; on a cluster, those to every node). Only with the `tls`
    /// feature; `build()` rejects it with a `redis://` URL, or when `pem`
    /// holds no certificate.
    ///
    /// ```no_run
    /// let client = redisync::Client::builder()
    ///     .redis_url("rediss://:password@redis.internal:6380/0")
    ///     .tls_root_certificate(std::fs::read("/etc/redis/tls/ca.crt")?)
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.redis = self.redis.tls_root_certificate(pem);
        self
    }

    /// For a `rediss://` URL: presents this client certificate (a PEM chain,
    /// leaf first) and its PEM private key (PKCS#8, PKCS#1 or SEC1) to a
    /// server that requires mutual TLS (`tls-auth-clients yes`); with
    /// Sentinel, to the sentinels and the master alike. The key never
    /// appears in `Debug` output or errors. Only with the `tls` feature.
    ///
    /// ```no_run
    /// let client = redisync::Client::builder()
    ///     .redis_url("rediss://redis.internal:6380/")
    ///     .tls_root_certificate(std::fs::read("ca.crt")?)
    ///     .tls_client_certificate(std::fs::read("client.crt")?, std::fs::read("client.key")?)
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_certificate(
        mut self,
        certificate_chain_pem: impl Into<Vec<u8>>,
        private_key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.redis = self
            .redis
            .tls_client_certificate(certificate_chain_pem, private_key_pem);
        self
    }

    /// Where background failures are reported. Defaults to
    /// [`LoggingEventHandler`].
    ///
    /// ```
    /// let builder = redisync::Client::builder()
    ///     .event_handler(std::sync::Arc::new(redisync::NopEventHandler));
    /// ```
    pub fn event_handler(mut self, handler: Arc<dyn EventHandler>) -> Self {
        self.events = handler;
        self
    }

    /// Puts `prefix` before every object name this client uses, before the
    /// object's keys and channels are derived (Redisson's `NameMapper`
    /// that prefixes): with prefix `app1:`, `client.lock("orders")` lives at
    /// key `app1:orders` and wakes its waiters on
    /// `redisson_lock__channel:{app1:orders}`, where a Redisson client whose
    /// name mapper adds `app1:` puts the same lock, so the two interoperate.
    /// Clients with different prefixes never see each other's objects.
    ///
    /// Handles' `name()` and [`Client::inspect`] take and give names
    /// without the prefix (Redisson's `getName()` unmaps too); errors and
    /// [events](crate::EventHandler) name the store's key (with the prefix),
    /// which is what an operator finds in Redis. Defaults to none (empty).
    ///
    /// [`build`](Self::build) refuses a prefix that contains `{` or `}`
    /// (`InvalidArgument`): every key and channel of an object must keep one
    /// Redis Cluster hash tag, and a brace in the prefix would give some of
    /// them another one. To pin objects to a slot, put the hash tag in the
    /// object name.
    ///
    /// ```
    /// let store = redisync::MemoryBackend::new();
    /// let app1 = redisync::Client::builder().backend(store.clone()).name_prefix("app1:").build()?;
    /// let plain = redisync::Client::builder().backend(store).build()?;
    /// let lock = app1.lock("orders");
    /// let guard = lock.lock()?;
    /// assert_eq!(lock.name(), "orders");
    /// assert!(plain.lock("app1:orders").is_locked()?); // the store's key
    /// assert!(!plain.lock("orders").is_locked()?);     // another object
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "NameMapper")]
    #[doc(alias = "setNameMapper")]
    #[doc(alias = "key_prefix")]
    #[doc(alias = "namespace")]
    pub fn name_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.name_prefix = prefix.into();
        self
    }

    /// Validates the settings, connects (for a Redis URL) and builds the client.
    ///
    /// # Errors
    /// `InvalidArgument` naming the setting when one is out of range or no
    /// backend was given; `Backend` when Redis cannot be reached.
    ///
    /// ```
    /// let err = redisync::Client::builder().build().unwrap_err();
    /// assert!(err.is_invalid_argument());
    /// ```
    pub fn build(self) -> Result<Client> {
        crate::telemetry::describe();
        let watchdog_ms = crate::error::millis("watchdog_timeout", self.watchdog_timeout)?;
        if watchdog_ms < 3 {
            return Err(Error::invalid(
                "watchdog_timeout",
                format!(
                    "must be at least 3ms (renewed every third), got {:?}",
                    self.watchdog_timeout
                ),
            ));
        }
        if !(1..=MAX_WATCHDOG_BATCH_SIZE).contains(&self.watchdog_batch_size) {
            return Err(Error::invalid(
                "watchdog_batch_size",
                format!(
                    "must be from 1 to {MAX_WATCHDOG_BATCH_SIZE} holds per renewal script, got {}",
                    self.watchdog_batch_size
                ),
            ));
        }
        let fair_wait_ms =
            crate::error::millis("fair_lock_wait_timeout", self.fair_lock_wait_timeout)?;
        let names = crate::names::Names::new(self.name_prefix)?;
        // Known before connecting: a Redis deployment's connections carry it
        // in their name (`redisync:<client uuid>`, see `backend::redis::naming`).
        let id = uuid::Uuid::new_v4().to_string();
        let backend: Arc<dyn LockBackend> = match self.backend {
            BackendChoice::None => {
                return Err(Error::invalid(
                    "backend",
                    "none given: call .backend(..) or .redis_url(..)",
                ));
            }
            BackendChoice::Given(_) if self.redis.get_replica_acknowledgement().is_some() => {
                return Err(Error::invalid(
                    "replica_acknowledgement",
                    "applies to a client built with .redis_url(..); for a backend you open \
                     yourself, set it on its RedisOptions",
                ));
            }
            BackendChoice::Given(backend) => backend,
            BackendChoice::Redis(deployment) => {
                let mut options = self.redis;
                options.events = Some(Arc::clone(&self.events));
                options.connection_name =
                    Some(crate::backend::redis::naming::ConnectionName::for_client(
                        &id,
                        Some(Arc::clone(&self.events)),
                    ));
                Arc::new(RedisBackend::connect(&deployment, options)?)
            }
        };
        Ok(Client::from_parts(
            id,
            backend,
            crate::watchdog::Settings {
                timeout: self.watchdog_timeout,
                timeout_ms: watchdog_ms,
                batch_size: self.watchdog_batch_size,
            },
            (self.fair_lock_wait_timeout, fair_wait_ms),
            self.events,
            names,
        ))
    }
}
