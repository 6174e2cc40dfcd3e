//! [`RedisOptions`]: the tunables of every Redis deployment (pool,
//! timeouts, TLS material, replica acknowledgement, event handler).

use std::sync::Arc;
use std::time::Duration;

use super::ReplicaAcknowledgement;
use crate::event::EventHandler;
use crate::{Error, Result};

/// Tunables of a [`RedisBackend`](super::RedisBackend).
///
/// ```
/// use std::time::Duration;
/// let options = redisync::RedisOptions::default()
///     .pool_size(8)
///     .connection_timeout(Duration::from_secs(2));
/// assert_eq!(options.get_pool_size(), 8);
/// ```
#[derive(Debug, Clone)]
pub struct RedisOptions {
    pub(crate) pool_size: u32,
    pub(crate) connection_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// Certificates for `rediss://` (see `super::tls`).
    pub(crate) tls: super::tls::TlsSettings,
    /// `WAIT` for replicas after every lock-changing script.
    pub(crate) replica_ack: Option<ReplicaAcknowledgement>,
    /// Hears of writes kept despite a replica shortfall (the client's).
    pub(crate) events: Option<Arc<dyn EventHandler>>,
    /// The name of every connection (`CLIENT SETNAME`): the client's
    /// (`redisync:<client uuid>`, set by `ClientBuilder::build`), or, for
    /// a backend opened by hand, its own (set when it opens).
    pub(crate) connection_name: Option<Arc<super::naming::ConnectionName>>,
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
            connection_name: None,
        }
    }
}

impl RedisOptions {
    /// The most pooled command connections. Defaults to 16; must be at least 1.
    ///
    /// ```
    /// let options = redisync::RedisOptions::default().pool_size(4);
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
    /// let options = redisync::RedisOptions::default().connection_timeout(Duration::from_secs(1));
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
    /// let options = redisync::RedisOptions::default().response_timeout(Duration::from_secs(1));
    /// assert_eq!(options.get_response_timeout(), Duration::from_secs(1));
    /// ```
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The pool size.
    ///
    /// ```
    /// assert_eq!(redisync::RedisOptions::default().get_pool_size(), 16);
    /// ```
    pub fn get_pool_size(&self) -> u32 {
        self.pool_size
    }

    /// The connection timeout.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(redisync::RedisOptions::default().get_connection_timeout(), Duration::from_secs(10));
    /// ```
    pub fn get_connection_timeout(&self) -> Duration {
        self.connection_timeout
    }

    /// The response timeout.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(redisync::RedisOptions::default().get_response_timeout(), Duration::from_secs(3));
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
    /// let options = redisync::RedisOptions::default().tls_root_certificate(ca);
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
    /// let options = redisync::RedisOptions::default()
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
    /// use redisync::{RedisOptions, ReplicaAcknowledgement};
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
    /// assert!(redisync::RedisOptions::default().get_replica_acknowledgement().is_none());
    /// ```
    pub fn get_replica_acknowledgement(&self) -> Option<ReplicaAcknowledgement> {
        self.replica_ack
    }

    /// These options with a connection name: the client's if it set one,
    /// otherwise a backend-level `redisync:backend:<uuid>`.
    pub(crate) fn named(mut self) -> Self {
        if self.connection_name.is_none() {
            self.connection_name = Some(super::naming::ConnectionName::for_backend(
                self.events.clone(),
            ));
        }
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
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
