//! Redis Sentinel (feature `sentinel`): finding the current master of a
//! monitored group, and noticing when a failover moves it.
//!
//! Every connection a Sentinel-backed [`RedisBackend`](super::RedisBackend)
//! opens (pooled or pub/sub) first asks the sentinels where the master is,
//! then connects there and checks with `ROLE` that the node is a master (the
//! Sentinel client protocol). Every sentinel is asked and the answer with
//! the highest `config-epoch` wins, so a sentinel that has not yet heard of
//! a failover cannot send us back to the demoted master.
//!
//! A failover must also end the use of connections that are still open to
//! the old master: Sentinel demotes it (and kills its clients) only when it
//! next looks at it, about ten seconds later, and not at all while it is
//! down or frozen; meanwhile it would still accept writes. So a watcher
//! thread per backend asks the sentinels every [`WATCH_INTERVAL`]; when the
//! master's address changes it bumps an epoch, and every connection made
//! under an older epoch is discarded (pooled: on its next checkout; the
//! subscriber's: on its next tick, after which it reconnects to the new
//! master and resubscribes).
//!
//! The `redis` crate's own `sentinel` module is not used: its blocking
//! lookup connects and runs `ROLE` without any timeout, so a frozen master
//! would hang every new connection for good.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use redis::{ErrorKind, IntoConnectionInfo, RedisError};

use crate::{Error, Result};

/// How often the watcher asks the sentinels where the master is.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// Where to find a Sentinel-monitored master, and how to log in to it.
///
/// The sentinel URLs are `redis://[:password@]host:port` (a password there
/// is the sentinels' own, `requirepass` in sentinel.conf); the master's
/// credentials and database are set separately. Neither password ever
/// appears in `Debug` output or errors. TLS (`rediss://`) is not supported
/// with Sentinel yet.
///
/// ```
/// let config = redisync::backend::SentinelConfig::new(
///     "mymaster",
///     ["redis://127.0.0.1:26379", "redis://127.0.0.1:26380"],
/// )
/// .master_password("s3cret")
/// .database(2);
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
#[derive(Clone)]
pub struct SentinelConfig {
    master_name: String,
    sentinels: Vec<String>,
    master_username: Option<String>,
    master_password: Option<String>,
    database: i64,
}

impl fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelConfig")
            .field("master_name", &self.master_name)
            // The URLs may carry the sentinels' password.
            .field("sentinels", &self.sentinels.len())
            .field("master_username", &self.master_username)
            .field(
                "master_password",
                &self.master_password.as_ref().map(|_| "<redacted>"),
            )
            .field("database", &self.database)
            .finish()
    }
}

impl SentinelConfig {
    /// The master named `master_name` (as in `sentinel monitor <name> ...`),
    /// found through the sentinels at `sentinel_urls`.
    ///
    /// ```
    /// let config = redisync::backend::SentinelConfig::new("mymaster", ["redis://10.0.0.5:26379"]);
    /// assert_eq!(config.get_master_name(), "mymaster");
    /// ```
    pub fn new<I>(master_name: impl Into<String>, sentinel_urls: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        SentinelConfig {
            master_name: master_name.into(),
            sentinels: sentinel_urls
                .into_iter()
                .map(|url| url.as_ref().to_owned())
                .collect(),
            master_username: None,
            master_password: None,
            database: 0,
        }
    }

    /// The password for the master (and, after a failover, the replica
    /// that replaces it): its `requirepass`, or the ACL user's password.
    ///
    /// ```
    /// let config = redisync::backend::SentinelConfig::new("mymaster", ["redis://127.0.0.1:26379"])
    ///     .master_password("s3cret");
    /// ```
    pub fn master_password(mut self, password: impl Into<String>) -> Self {
        self.master_password = Some(password.into());
        self
    }

    /// The ACL user name for the master (Redis 6+), with
    /// [`master_password`](Self::master_password).
    ///
    /// ```
    /// let config = redisync::backend::SentinelConfig::new("mymaster", ["redis://127.0.0.1:26379"])
    ///     .master_username("locks")
    ///     .master_password("s3cret");
    /// ```
    pub fn master_username(mut self, username: impl Into<String>) -> Self {
        self.master_username = Some(username.into());
        self
    }

    /// The database number on the master. Defaults to 0.
    ///
    /// ```
    /// let config = redisync::backend::SentinelConfig::new("mymaster", ["redis://127.0.0.1:26379"])
    ///     .database(3);
    /// ```
    pub fn database(mut self, db: i64) -> Self {
        self.database = db;
        self
    }

    /// The master's name.
    ///
    /// ```
    /// let config = redisync::backend::SentinelConfig::new("mymaster", ["redis://127.0.0.1:26379"]);
    /// assert_eq!(config.get_master_name(), "mymaster");
    /// ```
    pub fn get_master_name(&self) -> &str {
        &self.master_name
    }
}

/// A master found by asking the sentinels.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MasterAddress {
    host: String,
    port: u16,
}

impl fmt::Display for MasterAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// The connections target of a Sentinel-backed backend.
pub(crate) struct SentinelTarget {
    master_name: String,
    sentinels: Vec<redis::Client>,
    master_settings: redis::RedisConnectionInfo,
    connection_timeout: Duration,
    response_timeout: Duration,
    /// Bumped whenever the master is found at another address.
    epoch: AtomicU64,
    /// The last master address seen.
    current: Mutex<Option<MasterAddress>>,
    /// For messages: `master "name" via Sentinel host:port,...`.
    description: String,
}

impl fmt::Debug for SentinelTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.description)
    }
}

impl SentinelTarget {
    /// Validates `config` and starts the watcher thread. Connects to nothing.
    pub(crate) fn new(
        config: &SentinelConfig,
        connection_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Arc<Self>> {
        if config.master_name.is_empty() {
            return Err(Error::invalid("sentinel master name", "must not be empty"));
        }
        if config.sentinels.is_empty() {
            return Err(Error::invalid(
                "sentinel urls",
                "at least one sentinel is required",
            ));
        }
        let mut sentinels = Vec::with_capacity(config.sentinels.len());
        let mut addresses = Vec::with_capacity(config.sentinels.len());
        for url in &config.sentinels {
            // No error quotes the URL: it may hold a password.
            let info = url.as_str().into_connection_info().map_err(|err| {
                Error::invalid(
                    "sentinel url",
                    format!("not a valid redis:// URL ({:?})", err.kind()),
                )
            })?;
            if !matches!(info.addr(), redis::ConnectionAddr::Tcp(..)) {
                return Err(Error::invalid(
                    "sentinel url",
                    "only redis://host:port is supported with Sentinel (no TLS or Unix sockets yet)",
                ));
            }
            addresses.push(info.addr().to_string());
            sentinels.push(redis::Client::open(info).map_err(|err| {
                Error::invalid(
                    "sentinel url",
                    format!("not a valid redis:// URL ({:?})", err.kind()),
                )
            })?);
        }
        let mut master_settings = redis::RedisConnectionInfo::default().set_db(config.database);
        if let Some(user) = &config.master_username {
            master_settings = master_settings.set_username(user);
        }
        if let Some(password) = &config.master_password {
            master_settings = master_settings.set_password(password);
        }
        let target = Arc::new(SentinelTarget {
            description: format!(
                "master {:?} via Sentinel {} (db {})",
                config.master_name,
                addresses.join(","),
                config.database
            ),
            master_name: config.master_name.clone(),
            sentinels,
            master_settings,
            connection_timeout,
            response_timeout,
            epoch: AtomicU64::new(0),
            current: Mutex::new(None),
        });
        let weak = Arc::downgrade(&target);
        std::thread::Builder::new()
            .name("redisync-sentinel".into())
            .spawn(move || watch(weak))
            .map_err(|err| {
                Error::backend_caused_by("cannot start the Sentinel watcher thread", err, false)
            })?;
        Ok(target)
    }

    /// What errors and `Debug` call this target (no credentials).
    pub(crate) fn description(&self) -> &str {
        &self.description
    }

    /// The current epoch; connections made under an older one are stale.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Records where the master is; bumps the epoch if it moved.
    fn observe(&self, address: &MasterAddress) -> u64 {
        let mut current = self.current.lock();
        if current.as_ref() != Some(address) {
            if current.is_some() {
                self.epoch.fetch_add(1, Ordering::AcqRel);
            }
            *current = Some(address.clone());
        }
        self.epoch()
    }

    /// Asks every sentinel for the master; the answer with the highest
    /// `config-epoch` wins.
    fn lookup(&self) -> std::result::Result<MasterAddress, RedisError> {
        let mut best: Option<(u64, MasterAddress)> = None;
        let mut last_error = None;
        let mut unknown = 0;
        for sentinel in &self.sentinels {
            match self.ask(sentinel) {
                Ok(Some((epoch, address))) => {
                    if best.as_ref().is_none_or(|(best, _)| epoch > *best) {
                        best = Some((epoch, address));
                    }
                }
                Ok(None) => unknown += 1,
                Err(err) => last_error = Some(err),
            }
        }
        if let Some((_, address)) = best {
            return Ok(address);
        }
        if unknown > 0 {
            return Err(RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "unknown master name",
                format!(
                    "{unknown} of {} sentinels answered and none monitors a master named {:?}",
                    self.sentinels.len(),
                    self.master_name
                ),
            )));
        }
        Err(RedisError::from((
            ErrorKind::Io,
            "no Sentinel reachable",
            format!(
                "none of the {} sentinels answered (last error: {})",
                self.sentinels.len(),
                last_error.map_or_else(String::new, |err| err.to_string())
            ),
        )))
    }

    /// One sentinel's view: `None` if it does not know the name.
    fn ask(
        &self,
        sentinel: &redis::Client,
    ) -> std::result::Result<Option<(u64, MasterAddress)>, RedisError> {
        let mut conn = sentinel.get_connection_with_timeout(self.connection_timeout)?;
        conn.set_read_timeout(Some(self.response_timeout))?;
        conn.set_write_timeout(Some(self.response_timeout))?;
        let reply: redis::RedisResult<HashMap<String, String>> = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(&self.master_name)
            .query(&mut conn);
        let info = match reply {
            Ok(info) => info,
            Err(err) if err.to_string().contains("No such master") => return Ok(None),
            Err(err) => return Err(err),
        };
        let host = info.get("ip").cloned();
        let port = info.get("port").and_then(|p| p.parse().ok());
        let epoch = info
            .get("config-epoch")
            .and_then(|e| e.parse().ok())
            .unwrap_or(0);
        match (host, port) {
            (Some(host), Some(port)) => Ok(Some((epoch, MasterAddress { host, port }))),
            _ => Err(RedisError::from((
                ErrorKind::Io,
                "unexpected SENTINEL MASTER reply",
                "no ip or port".to_owned(),
            ))),
        }
    }

    /// Opens a connection to the current master, with the given timeouts
    /// set, after checking with `ROLE` that it is one. Returns it with the
    /// epoch it belongs to.
    pub(crate) fn connect(&self) -> std::result::Result<(redis::Connection, u64), RedisError> {
        let address = self.lookup()?;
        let epoch = self.observe(&address);
        let info = redis::ConnectionAddr::Tcp(address.host.clone(), address.port)
            .into_connection_info()?
            .set_redis_settings(self.master_settings.clone());
        let client = redis::Client::open(info)?;
        let mut conn = client
            .get_connection_with_timeout(self.connection_timeout)
            .map_err(|err| master_error(&address, "connecting", &err))?;
        conn.set_read_timeout(Some(self.response_timeout))?;
        conn.set_write_timeout(Some(self.response_timeout))?;
        let role: redis::Role = redis::cmd("ROLE")
            .query(&mut conn)
            .map_err(|err| master_error(&address, "ROLE", &err))?;
        match role {
            redis::Role::Primary { .. } => Ok((conn, epoch)),
            _ => Err(RedisError::from((
                ErrorKind::Io,
                "not a master",
                format!(
                    "the sentinels name {address} as the master, but it is not one \
                     (a failover in progress?)"
                ),
            ))),
        }
    }
}

/// An error on the master a sentinel named, kept a connection error when it
/// was one, with the address added.
fn master_error(address: &MasterAddress, op: &str, err: &RedisError) -> RedisError {
    let connection = err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout();
    if connection {
        RedisError::from((
            ErrorKind::Io,
            "master unreachable",
            format!("{op} on the master at {address}, named by Sentinel: {err}"),
        ))
    } else {
        RedisError::from((
            err.kind(),
            "master refused",
            format!("{op} on the master at {address}, named by Sentinel: {err}"),
        ))
    }
}

/// The watcher thread: asks the sentinels every [`WATCH_INTERVAL`] until
/// the target is dropped.
fn watch(weak: Weak<SentinelTarget>) {
    loop {
        std::thread::sleep(WATCH_INTERVAL);
        let Some(target) = weak.upgrade() else { return };
        if let Ok(address) = target.lookup() {
            target.observe(&address);
        }
    }
}
