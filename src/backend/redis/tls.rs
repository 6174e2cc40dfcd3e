//! Opening the `redis::Client` of a [`RedisBackend`](super::RedisBackend):
//! the URL, and with the `tls` feature the certificates of a `rediss://`
//! connection.
//!
//! TLS goes through the `redis` crate's rustls support. Every connection the
//! backend opens (the pooled ones and the pub/sub one) comes from a client
//! built here, so all of them use the same TLS settings: for a URL, the one
//! client of [`open_client`]; with Sentinel, one client per sentinel and
//! one per master address the sentinels name, all from [`client_for`] with
//! the same [`PreparedTls`].
//!
//! rustls needs a process-level crypto provider, and the `redis` crate asks
//! for it with `rustls::ClientConfig::builder()`, which panics when none is
//! installed and rustls was compiled with more than one provider (as happens
//! when another crate of the program enables `aws-lc-rs`). So before the
//! first TLS connection we install `ring`'s provider, unless the program
//! already installed one (then that one is used).

use std::fmt;
#[cfg(feature = "tls")]
use std::sync::Arc;

use redis::IntoConnectionInfo;

use crate::{Error, Result};

/// The TLS part of [`RedisOptions`](super::RedisOptions): which certificate
/// authorities to trust and, for mutual TLS, the client's certificate and
/// key. `Debug` shows only whether each is set: never a key.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    /// PEM certificates to trust instead of the system's roots.
    #[cfg(feature = "tls")]
    root_certificates: Option<Vec<u8>>,
    /// PEM certificate chain and private key presented to the server.
    #[cfg(feature = "tls")]
    client_identity: Option<ClientIdentity>,
}

#[cfg(feature = "tls")]
#[derive(Clone)]
struct ClientIdentity {
    certificate_chain: Vec<u8>,
    private_key: Vec<u8>,
}

impl fmt::Debug for TlsSettings {
    #[cfg(feature = "tls")]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let roots = if self.root_certificates.is_some() {
            "custom"
        } else {
            "system"
        };
        let identity = if self.client_identity.is_some() {
            "set"
        } else {
            "not set"
        };
        f.debug_struct("TlsSettings")
            .field("root_certificates", &roots)
            .field("client_certificate", &identity)
            .finish()
    }

    #[cfg(not(feature = "tls"))]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsSettings(built without the `tls` feature)")
    }
}

#[cfg(feature = "tls")]
impl TlsSettings {
    /// Trusts the certificates in `pem` too (and no longer the system's).
    pub(crate) fn add_root_certificates(&mut self, pem: Vec<u8>) {
        match &mut self.root_certificates {
            Some(all) => {
                all.push(b'\n');
                all.extend_from_slice(&pem);
            }
            None => self.root_certificates = Some(pem),
        }
    }

    /// Presents this certificate chain and key to the server.
    pub(crate) fn set_client_identity(&mut self, certificate_chain: Vec<u8>, private_key: Vec<u8>) {
        self.client_identity = Some(ClientIdentity {
            certificate_chain,
            private_key,
        });
    }

    /// Checks every PEM now, so that a bad certificate or key is an
    /// `InvalidArgument` from `build()` rather than a failure of every
    /// connection attempt. The messages never quote the key.
    pub(crate) fn certificates(
        &self,
        provider: &Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<redis::TlsCertificates> {
        let roots = self.roots()?;
        let client_tls = match &self.client_identity {
            None => None,
            Some(identity) => {
                // Builds a rustls configuration once: it rejects a key of an
                // unsupported type or one that does not match the certificate.
                self.config_with(provider, roots.unwrap_or_else(rustls::RootCertStore::empty))?;
                Some(redis::ClientTlsConfig {
                    client_cert: identity.certificate_chain.clone(),
                    client_key: identity.private_key.clone(),
                })
            }
        };
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert: self.root_certificates.clone(),
        })
    }

    /// The rustls configuration of a TLS connection we make ourselves (the
    /// cluster's pub/sub sockets), equal to what the `redis` crate builds
    /// from [`certificates`](Self::certificates): the given roots, or else
    /// the system's, and the client identity if one is set.
    #[cfg(feature = "cluster")]
    pub(crate) fn client_config(
        &self,
        provider: &Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Arc<rustls::ClientConfig>> {
        let roots = match self.roots()? {
            Some(roots) => roots,
            None => system_roots()?,
        };
        self.config_with(provider, roots).map(Arc::new)
    }

    /// The custom roots, if any were given.
    fn roots(&self) -> Result<Option<rustls::RootCertStore>> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;

        let Some(pem) = &self.root_certificates else {
            return Ok(None);
        };
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|err| {
                Error::invalid(
                    "tls_root_certificate",
                    format!("not a PEM certificate: {err}"),
                )
            })?;
            roots.add(cert).map_err(|err| {
                Error::invalid(
                    "tls_root_certificate",
                    format!("not a usable CA certificate: {err}"),
                )
            })?;
        }
        if roots.is_empty() {
            return Err(Error::invalid(
                "tls_root_certificate",
                "no certificate found (expected PEM: -----BEGIN CERTIFICATE-----)",
            ));
        }
        Ok(Some(roots))
    }

    /// A rustls configuration trusting `roots`, presenting the client
    /// identity if one is set.
    fn config_with(
        &self,
        provider: &Arc<rustls::crypto::CryptoProvider>,
        roots: rustls::RootCertStore,
    ) -> Result<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(provider))
            .with_safe_default_protocol_versions()
            .map_err(|err| {
                Error::invalid(
                    "tls",
                    format!("the crypto provider offers no TLS version: {err}"),
                )
            })?
            .with_root_certificates(roots);
        let Some(identity) = &self.client_identity else {
            return Ok(builder.with_no_client_auth());
        };
        let chain = CertificateDer::pem_slice_iter(&identity.certificate_chain)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|err| {
                Error::invalid(
                    "tls_client_certificate",
                    format!("the certificate chain is not PEM: {err}"),
                )
            })?;
        if chain.is_empty() {
            return Err(Error::invalid(
                "tls_client_certificate",
                "no certificate found (expected PEM: -----BEGIN CERTIFICATE-----)",
            ));
        }
        // Deliberately without the parser's message: it could quote a line
        // of the key file.
        let key = PrivateKeyDer::from_pem_slice(&identity.private_key).map_err(|_| {
            Error::invalid(
                "tls_client_certificate",
                "the private key is not a PEM PKCS#8, PKCS#1 or SEC1 key",
            )
        })?;
        builder.with_client_auth_cert(chain, key).map_err(|err| {
            Error::invalid(
                "tls_client_certificate",
                format!("unusable certificate and key: {err}"),
            )
        })
    }
}

/// The system's root certificates, as the `redis` crate loads them for a
/// `rediss://` connection without custom roots.
#[cfg(all(feature = "tls", feature = "cluster"))]
fn system_roots() -> Result<rustls::RootCertStore> {
    let loaded = rustls_native_certs::load_native_certs();
    if let Some(err) = loaded.errors.first() {
        return Err(Error::invalid(
            "tls_root_certificate",
            format!("none given, and the system's could not be loaded: {err}"),
        ));
    }
    let mut roots = rustls::RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(loaded.certs);
    if roots.is_empty() {
        return Err(Error::invalid(
            "tls_root_certificate",
            format!(
                "none given, and the system has no usable root certificate ({ignored} unparsable)"
            ),
        ));
    }
    Ok(roots)
}

/// Whether `url` asks for TLS (`rediss://`, or the `valkeys://` alias).
fn is_tls_url(url: &str) -> bool {
    url.trim_start()
        .split_once("://")
        .is_some_and(|(scheme, _)| {
            scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
        })
}

/// `InvalidArgument` for `what` if `url` is `rediss://` and redisync was
/// built without the `tls` feature (whatever the `redis` crate's features).
pub(crate) fn require_tls_feature(what: &'static str, url: &str) -> Result<()> {
    if is_tls_url(url) && cfg!(not(feature = "tls")) {
        return Err(Error::invalid(
            what,
            "rediss:// (TLS) needs redisync's `tls` feature \
             (features = [\"tls\"] on redisync in Cargo.toml)",
        ));
    }
    Ok(())
}

/// [`TlsSettings`] checked once (every PEM parsed, the client key matched
/// to its certificate), ready to open clients for addresses learnt at run
/// time, such as the master a sentinel names.
#[derive(Clone, Default)]
pub(crate) struct PreparedTls {
    /// `None`: the system's roots and no client certificate.
    #[cfg(feature = "tls")]
    certificates: Option<redis::TlsCertificates>,
}

impl TlsSettings {
    /// Whether any TLS setting was given (always false without the `tls`
    /// feature, which has no way to give one).
    pub(crate) fn is_set(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.root_certificates.is_some() || self.client_identity.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }

    /// Checks every PEM now, so that a bad certificate or key is an
    /// `InvalidArgument` when the backend is opened rather than a failure
    /// of every connection attempt.
    ///
    /// # Errors
    /// `InvalidArgument` naming `tls_root_certificate` or
    /// `tls_client_certificate`; no message quotes the key.
    pub(crate) fn prepare(&self) -> Result<PreparedTls> {
        #[cfg(feature = "tls")]
        {
            if !self.is_set() {
                return Ok(PreparedTls::default());
            }
            let provider = crypto_provider();
            Ok(PreparedTls {
                certificates: Some(self.certificates(&provider)?),
            })
        }
        #[cfg(not(feature = "tls"))]
        Ok(PreparedTls::default())
    }
}

/// Parses a Redis URL given as `what` (`url`, `sentinel url`).
///
/// # Errors
/// `InvalidArgument` naming `what` for a malformed URL, a `rediss://` URL
/// without the `tls` feature, or `#insecure`. No message quotes the URL (it
/// may hold a password).
pub(crate) fn parse_url(url: &str, what: &'static str) -> Result<redis::ConnectionInfo> {
    require_tls_feature(what, url)?;
    let info = url
        .into_connection_info()
        .map_err(|err| crate::error::bad_url(what, url, &url_problem(&err)))?;
    if let redis::ConnectionAddr::TcpTls { insecure: true, .. } = info.addr() {
        return Err(Error::invalid(
            what,
            "#insecure (no certificate verification) is not supported: \
             trust your CA with tls_root_certificate instead",
        ));
    }
    Ok(info)
}

/// What the `redis` crate found wrong with a URL, in its own words but
/// without its error kind (`- InvalidClientConfig`): its descriptions are
/// fixed texts that never quote the URL (which may hold a password).
fn url_problem(err: &redis::RedisError) -> String {
    let text = err.to_string();
    let description = text.split(" - ").next().unwrap_or_default().trim();
    let mut chars = description.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => "not a Redis URL".to_owned(),
    }
}

/// The `redis::Client` for `info`: over TLS with `tls`'s certificates (or
/// the system's roots) when its address is `TcpTls`, plain otherwise. The
/// one place that applies certificates, for a URL the user gave and for a
/// master a sentinel named alike.
///
/// # Errors
/// What the `redis` crate reports, e.g. for a TLS address without the
/// `tls` feature; no error quotes a password or a key.
pub(crate) fn client_for(
    info: redis::ConnectionInfo,
    tls: &PreparedTls,
) -> std::result::Result<redis::Client, redis::RedisError> {
    // No `CLIENT SETINFO` pair on every new connection: one round trip less
    // to connect, and a frozen server would make the crate wait the whole
    // connection timeout again for each of its replies.
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let info = info.set_redis_settings(settings);
    let info = with_socket_bounds(info);
    #[cfg(feature = "tls")]
    if let redis::ConnectionAddr::TcpTls { .. } = info.addr() {
        // The `redis` crate's rustls needs a process-level provider: ours
        // is installed unless the program has one.
        let _ = crypto_provider();
        if let Some(certificates) = &tls.certificates {
            return redis::Client::build_with_tls(info, certificates.clone());
        }
    }
    let _ = tls;
    redis::Client::open(info)
}

/// How long unacknowledged data is retransmitted before the kernel gives
/// up on the connection (`TCP_USER_TIMEOUT`, Linux): a request stuck in a
/// partition is not delivered minutes later on a connection still open.
pub(crate) const TCP_USER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `info` with its sockets' bounds: `SO_LINGER` 0, so closing a connection
/// (the pool drops one after a timeout) resets it and the kernel discards
/// what it has not sent yet, instead of retransmitting a request its caller
/// gave up on; and [`TCP_USER_TIMEOUT`]. The `redis` crate sets both when
/// it connects (`TcpSettings`); TLS connections get them too.
fn with_socket_bounds(info: redis::ConnectionInfo) -> redis::ConnectionInfo {
    let tcp = info
        .tcp_settings()
        .clone()
        .set_linger_time(std::time::Duration::ZERO);
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    let tcp = tcp.set_user_timeout(TCP_USER_TIMEOUT);
    info.set_tcp_settings(tcp)
}

/// The `redis::Client` for `url` with the TLS settings applied.
///
/// # Errors
/// `InvalidArgument` for a malformed URL, a `rediss://` URL without the
/// `tls` feature, `#insecure`, TLS settings with a plain URL, or a bad
/// certificate or key. No message quotes the URL (it may hold a password).
pub(crate) fn open_client(url: &str, tls: &TlsSettings) -> Result<redis::Client> {
    let info = parse_url(url, "url")?;
    #[cfg(feature = "tls")]
    if tls.is_set() && !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
        return Err(Error::invalid(
            "url",
            "TLS certificates were given but the URL is not rediss://",
        ));
    }
    let prepared = tls.prepare()?;
    client_for(info, &prepared).map_err(|err| {
        if tls.is_set() {
            Error::invalid(
                "tls_root_certificate",
                format!("rejected: {}", url_problem(&err)),
            )
        } else {
            crate::error::bad_url("url", url, &url_problem(&err))
        }
    })
}

/// The process's rustls crypto provider, installing `ring`'s first if the
/// program has installed none. Never panics: losing a race to another
/// installer leaves that one's provider in place, which is as good.
#[cfg(feature = "tls")]
pub(crate) fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    use rustls::crypto::CryptoProvider;
    if let Some(provider) = CryptoProvider::get_default() {
        return std::sync::Arc::clone(provider);
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    match CryptoProvider::get_default() {
        Some(provider) => std::sync::Arc::clone(provider),
        // Unreachable (an install either succeeded or lost to another), but
        // a provider is still needed for validation.
        None => std::sync::Arc::new(rustls::crypto::ring::default_provider()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_schemes_are_recognised() {
        assert!(is_tls_url("rediss://127.0.0.1:6380/"));
        assert!(is_tls_url("REDISS://h/"));
        assert!(is_tls_url("valkeys://h/"));
        assert!(!is_tls_url("redis://h/"));
        assert!(!is_tls_url("redis://rediss:x@h/"));
        assert!(!is_tls_url("not a url"));
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn rediss_without_the_feature_names_the_feature() {
        let err =
            open_client("rediss://:pw-xyz@127.0.0.1:6380/", &TlsSettings::default()).unwrap_err();
        assert!(err.is_invalid_argument());
        let shown = format!("{err} {err:?}");
        assert!(shown.contains("`tls` feature"), "{shown}");
        assert!(!shown.contains("pw-xyz"), "{shown}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn certificates_without_rediss_are_rejected() {
        let mut tls = TlsSettings::default();
        tls.add_root_certificates(b"whatever".to_vec());
        let err = open_client("redis://127.0.0.1:6379/", &tls).unwrap_err();
        assert!(err.is_invalid_argument(), "{err}");
        assert!(err.to_string().contains("not rediss://"), "{err}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn garbage_root_certificate_is_an_invalid_argument() {
        let mut tls = TlsSettings::default();
        tls.add_root_certificates(b"not a pem".to_vec());
        let err = open_client("rediss://127.0.0.1:6379/", &tls).unwrap_err();
        assert!(err.is_invalid_argument(), "{err}");
        assert!(err.to_string().contains("tls_root_certificate"), "{err}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn insecure_fragment_is_refused() {
        let err =
            open_client("rediss://127.0.0.1:6379/#insecure", &TlsSettings::default()).unwrap_err();
        assert!(err.is_invalid_argument(), "{err}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn debug_never_shows_the_key() {
        let mut tls = TlsSettings::default();
        tls.set_client_identity(b"CERT-BYTES".to_vec(), b"KEY-BYTES".to_vec());
        let shown = format!("{tls:?}");
        assert!(
            !shown.contains("KEY-BYTES") && !shown.contains("CERT-BYTES"),
            "{shown}"
        );
        assert!(shown.contains("client_certificate: \"set\""), "{shown}");
    }
}
