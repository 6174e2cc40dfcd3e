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
//! With the `tls` feature, the sentinels and the master may be reached over
//! TLS (see [`SentinelConfig`] for the rule); the certificates go through
//! the same `super::tls` code as a direct `rediss://` URL.
//!
//! The `redis` crate's own `sentinel` module is not used: its blocking
//! lookup connects and runs `ROLE` without any timeout, so a frozen master
//! would hang every new connection for good.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ErrorKind, IntoConnectionInfo, RedisError};

use crate::{Error, Result};

/// How often the watcher asks the sentinels where the master is.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// Where to find a Sentinel-monitored master, and how to log in to it.
///
/// The sentinel URLs are `redis://[:password@]host:port`, or
/// `rediss://[:password@]host:port` for TLS (feature `tls`); a password
/// there is the sentinels' own, `requirepass` in sentinel.conf. The
/// master's credentials and database are set separately. Neither password
/// ever appears in `Debug` output or errors.
///
/// # TLS
///
/// As with Redisson's one `rediss` scheme, TLS covers the whole group:
/// - the sentinels are reached over TLS when their URLs are `rediss://`
///   (all of them or none: a mix is an `InvalidArgument`);
/// - the master, and any replica a failover promotes later, is reached over
///   TLS when the sentinels are `rediss://` **or** TLS settings were given
///   ([`RedisOptions::tls_root_certificate`](super::RedisOptions::tls_root_certificate),
///   [`tls_client_certificate`](super::RedisOptions::tls_client_certificate),
///   or the same on [`ClientBuilder`](crate::ClientBuilder)); so plain
///   sentinels in front of TLS-only data nodes work too;
/// - the same settings (trusted CAs, client certificate) apply to the
///   sentinels and to the master; without them, the system's roots.
///
/// The master is dialled at the address the sentinels report
/// (`SENTINEL MASTER`, usually an IP address), so its certificate must name
/// that address, and the sentinels must monitor the master's TLS port (with
/// `tls-replication yes` in sentinel.conf, so that they talk TLS to it and
/// report its replicas' TLS ports). Certificates are always verified:
/// `#insecure` is refused.
///
/// ```
/// let config = redisync::SentinelConfig::new(
///     "mymaster",
///     ["redis://127.0.0.1:26379", "redis://127.0.0.1:26380"],
/// )
/// .master_password("s3cret")
/// .database(2);
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
///
/// TLS to the sentinels and the master (feature `tls`), trusting your CA:
///
/// ```no_run
/// # #[cfg(feature = "tls")] {
/// let config = redisync::SentinelConfig::new(
///     "mymaster",
///     ["rediss://10.0.0.5:26380", "rediss://10.0.0.6:26380"],
/// );
/// let options = redisync::RedisOptions::default()
///     .tls_root_certificate(std::fs::read("/etc/redis/tls/ca.crt")?);
/// let backend = redisync::RedisBackend::open_sentinel_with(&config, options)?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
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
    /// let config = redisync::SentinelConfig::new("mymaster", ["redis://10.0.0.5:26379"]);
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
    /// let config = redisync::SentinelConfig::new("mymaster", ["redis://127.0.0.1:26379"])
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
    /// let config = redisync::SentinelConfig::new("mymaster", ["redis://127.0.0.1:26379"])
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
    /// let config = redisync::SentinelConfig::new("mymaster", ["redis://127.0.0.1:26379"])
    ///     .database(3);
    /// ```
    pub fn database(mut self, db: i64) -> Self {
        self.database = db;
        self
    }

    /// The master's name.
    ///
    /// ```
    /// let config = redisync::SentinelConfig::new("mymaster", ["redis://127.0.0.1:26379"]);
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
    /// Whether the master is reached over TLS (see [`SentinelConfig`]).
    master_tls: bool,
    /// The certificates for the sentinels and the master, checked once.
    tls: super::tls::PreparedTls,
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
    /// Validates `config` and the TLS settings `tls` (used for the
    /// sentinels and the master) and starts the watcher thread. Connects to
    /// nothing.
    pub(crate) fn new(
        config: &SentinelConfig,
        tls: &super::tls::TlsSettings,
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
        let mut infos = Vec::with_capacity(config.sentinels.len());
        for url in &config.sentinels {
            // No error quotes the URL: it may hold a password.
            let info = super::tls::parse_url(url, "sentinel url")?;
            if matches!(info.addr(), redis::ConnectionAddr::Unix(..)) {
                return Err(Error::invalid(
                    "sentinel url",
                    "a Unix socket is not supported with Sentinel: use redis://host:port \
                     or rediss://host:port",
                ));
            }
            infos.push(info);
        }
        let tls_sentinels = infos
            .iter()
            .filter(|info| matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }))
            .count();
        if tls_sentinels != 0 && tls_sentinels != infos.len() {
            return Err(Error::invalid(
                "sentinel urls",
                format!(
                    "{tls_sentinels} of the {} sentinel URLs are rediss:// and the others \
                     redis://: use one scheme for all of them",
                    infos.len()
                ),
            ));
        }
        // The rule: TLS to the master (and every replica promoted later)
        // when the sentinels are reached over TLS or TLS settings were
        // given; the same certificates for sentinels and master.
        let master_tls = tls_sentinels != 0 || tls.is_set();
        let prepared = tls.prepare()?;
        let mut sentinels = Vec::with_capacity(infos.len());
        let mut addresses = Vec::with_capacity(infos.len());
        for info in infos {
            addresses.push(info.addr().to_string());
            sentinels.push(super::tls::client_for(info, &prepared).map_err(|err| {
                Error::invalid(
                    "sentinel url",
                    format!("rejected by the redis crate ({:?})", err.kind()),
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
                "master {:?} via Sentinel {} (db {}{})",
                config.master_name,
                addresses.join(","),
                config.database,
                match (tls_sentinels != 0, master_tls) {
                    (true, _) => "; TLS to the sentinels and the master",
                    (false, true) => "; TLS to the master",
                    (false, false) => "",
                }
            ),
            master_name: config.master_name.clone(),
            sentinels,
            master_settings,
            master_tls,
            tls: prepared,
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
        // Acquire: pairs with `observe`'s AcqRel bump. The address itself
        // is read under its own lock; the epoch only says "stale".
        self.epoch.load(Ordering::Acquire)
    }

    /// Records where the master is; bumps the epoch if it moved.
    fn observe(&self, address: &MasterAddress) -> u64 {
        let mut current = self.current.lock();
        if current.as_ref() != Some(address) {
            if current.is_some() {
                // AcqRel: one bump per move, made under `current`'s lock;
                // the epoch carries no data of its own (the address is read
                // under that lock), so this is stronger than needed, and
                // cheap (a failover is rare).
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
        let mut timeouts = 0;
        for sentinel in &self.sentinels {
            // Past the caller's deadline, a sentinel that did not answer
            // is not followed by another (each would get a round trip's
            // floor on top of the bound).
            if last_error.is_some() && crate::deadline::passed() {
                break;
            }
            match self.ask(sentinel) {
                Ok(Some((epoch, address))) => {
                    if best.as_ref().is_none_or(|(best, _)| epoch > *best) {
                        best = Some((epoch, address));
                    }
                }
                Ok(None) => unknown += 1,
                Err(err) => {
                    if err.is_timeout() {
                        timeouts += 1;
                    }
                    last_error = Some(err);
                }
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
        if timeouts > 0 && last_error.as_ref().is_some_and(RedisError::is_timeout) {
            // Kept a timeout, so that it reads "timed out" (not the
            // socket's "os error 11").
            return Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no answer from the sentinels to SENTINEL MASTER in time                      ({timeouts} of {} timed out)",
                    self.sentinels.len()
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
        let mut conn = super::connect::connect_within(sentinel, self.connection_timeout)?;
        // Under the caller's deadline when a call opens the connection.
        let respond = crate::deadline::cap(self.response_timeout);
        conn.set_read_timeout(Some(respond))?;
        conn.set_write_timeout(Some(respond))?;
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
        let addr = if self.master_tls {
            redis::ConnectionAddr::TcpTls {
                host: address.host.clone(),
                port: address.port,
                insecure: false,
                tls_params: None,
            }
        } else {
            redis::ConnectionAddr::Tcp(address.host.clone(), address.port)
        };
        let info = addr
            .into_connection_info()?
            .set_redis_settings(self.master_settings.clone());
        let client = super::tls::client_for(info, &self.tls)
            .map_err(|err| master_error(&address, "connecting", &err))?;
        let mut conn = super::connect::connect_within(&client, self.connection_timeout)
            .map_err(|err| master_error(&address, "connecting", &err))?;
        // ROLE keeps to the caller's deadline; the connection then gets
        // the response timeout back for the pool.
        let respond = crate::deadline::cap(self.response_timeout);
        conn.set_read_timeout(Some(respond))?;
        conn.set_write_timeout(Some(respond))?;
        let role: redis::Role = redis::cmd("ROLE")
            .query(&mut conn)
            .map_err(|err| master_error(&address, "ROLE", &err))?;
        conn.set_read_timeout(Some(self.response_timeout))?;
        conn.set_write_timeout(Some(self.response_timeout))?;
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
    if err.is_timeout() {
        // Still a timeout, so that it reads "timed out", not the socket's
        // "Resource temporarily unavailable (os error 11)".
        return RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{op} on the master at {address}, named by Sentinel: timed out"),
        ));
    }
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

/// How often the watcher checks, between two lookups, whether its target
/// is gone, so that it ends soon after its client is dropped.
const WATCH_STEP: Duration = Duration::from_millis(100);

/// The watcher thread: asks the sentinels every [`WATCH_INTERVAL`] until
/// the target is dropped (noticed within [`WATCH_STEP`], or when the
/// lookup in flight ends).
fn watch(weak: Weak<SentinelTarget>) {
    loop {
        let next = Instant::now() + WATCH_INTERVAL;
        while let Some(left) = next.checked_duration_since(Instant::now()) {
            if weak.strong_count() == 0 {
                return;
            }
            std::thread::sleep(left.min(WATCH_STEP));
        }
        let Some(target) = weak.upgrade() else { return };
        if let Ok(address) = target.lookup() {
            target.observe(&address);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::redis::tls::TlsSettings;

    fn target(urls: &[&str], tls: &TlsSettings) -> Result<Arc<SentinelTarget>> {
        let config = SentinelConfig::new("mymaster", urls);
        SentinelTarget::new(&config, tls, Duration::from_secs(1), Duration::from_secs(1))
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn rediss_sentinel_without_the_tls_feature_names_the_feature() {
        let err = target(
            &["rediss://:pw-xyz@127.0.0.1:26379"],
            &TlsSettings::default(),
        )
        .unwrap_err();
        assert!(err.is_invalid_argument(), "{err:?}");
        let shown = format!("{err} {err:?}");
        assert!(shown.contains("`tls` feature"), "{shown}");
        assert!(shown.contains("sentinel url"), "{shown}");
        assert!(!shown.contains("pw-xyz"), "{shown}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn rediss_sentinels_put_the_master_on_tls() {
        let plain = target(&["redis://127.0.0.1:26379"], &TlsSettings::default()).unwrap();
        assert!(!plain.master_tls);
        assert!(!plain.description().contains("TLS"));
        let tls = target(
            &[
                "rediss://:pw-xyz@127.0.0.1:26379",
                "rediss://127.0.0.1:26380",
            ],
            &TlsSettings::default(),
        )
        .unwrap();
        assert!(tls.master_tls);
        assert!(
            tls.description()
                .ends_with("; TLS to the sentinels and the master)"),
            "{tls:?}"
        );
        assert!(!format!("{tls:?}").contains("pw-xyz"));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_settings_put_the_master_on_tls_and_are_checked() {
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let mut good = TlsSettings::default();
        good.add_root_certificates(ca.cert.pem().into_bytes());
        // Plain sentinels, TLS data nodes.
        let plain_sentinels = target(&["redis://127.0.0.1:26379"], &good).unwrap();
        assert!(plain_sentinels.master_tls);
        assert!(
            plain_sentinels
                .description()
                .ends_with("; TLS to the master)"),
            "{plain_sentinels:?}"
        );

        let mut bad = TlsSettings::default();
        bad.add_root_certificates(b"not a pem".to_vec());
        let err = target(&["redis://127.0.0.1:26379"], &bad).unwrap_err();
        assert!(err.is_invalid_argument(), "{err:?}");
        assert!(err.to_string().contains("tls_root_certificate"), "{err}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn insecure_and_mixed_schemes_are_refused() {
        let err = target(
            &["rediss://:pw-xyz@127.0.0.1:26379/#insecure"],
            &TlsSettings::default(),
        )
        .unwrap_err();
        assert!(err.is_invalid_argument(), "{err:?}");
        assert!(err.to_string().contains("#insecure"), "{err}");
        assert!(!format!("{err} {err:?}").contains("pw-xyz"));

        let err = target(
            &[
                "rediss://127.0.0.1:26379",
                "redis://:pw-xyz@127.0.0.1:26380",
            ],
            &TlsSettings::default(),
        )
        .unwrap_err();
        assert!(err.is_invalid_argument(), "{err:?}");
        assert!(err.to_string().contains("one scheme"), "{err}");
        assert!(!format!("{err} {err:?}").contains("pw-xyz"));
    }

    #[test]
    fn unix_socket_sentinel_is_refused() {
        let err = target(
            &["redis+unix:///tmp/sentinel.sock"],
            &TlsSettings::default(),
        )
        .unwrap_err();
        assert!(err.is_invalid_argument(), "{err:?}");
        assert!(err.to_string().contains("Unix socket"), "{err}");
    }
}
