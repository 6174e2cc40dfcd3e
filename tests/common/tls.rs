//! A throwaway PKI for TLS tests (feature `tls`): a CA generated at run
//! time with `rcgen` (pure Rust, no openssl CLI), a server certificate for
//! 127.0.0.1 and localhost, and a client certificate, all signed by it.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::{TestServer, free_port, unique_name};

/// A CA and the certificates it signed, as PEM, plus the files
/// redis-server reads (removed on drop).
pub struct Pki {
    pub ca: String,
    pub client_cert: String,
    pub client_key: String,
    pub dir: std::path::PathBuf,
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ca(name: &str) -> (CertificateParams, KeyPair, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let pem = params.self_signed(&key).unwrap().pem();
    (params, key, pem)
}

/// A fresh CA, a server certificate for 127.0.0.1 and localhost, and a
/// client certificate, signed by it.
pub fn pki() -> Pki {
    let (ca_params, ca_key, ca_pem) = ca("redisync test CA");
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate().unwrap();
    let mut server =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    server
        .distinguished_name
        .push(DnType::CommonName, "redisync test server");
    // ClientAuth too: a TLS cluster's nodes present it to each other on
    // the cluster bus, which always requires a client certificate.
    server.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let server_cert = server.signed_by(&server_key, &issuer).unwrap();

    let client_key = KeyPair::generate().unwrap();
    let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
    client
        .distinguished_name
        .push(DnType::CommonName, "redisync test client");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = client.signed_by(&client_key, &issuer).unwrap();

    let dir = std::env::temp_dir().join(unique_name("redisync-pki").replace(':', "-"));
    std::fs::create_dir_all(&dir).unwrap();
    for (file, contents) in [
        ("ca.crt", ca_pem.clone()),
        ("server.crt", server_cert.pem()),
        ("server.key", server_key.serialize_pem()),
        // What a server presents when it connects out (replication,
        // Sentinel) to a server that requires client certificates.
        ("client.crt", client_cert.pem()),
        ("client.key", client_key.serialize_pem()),
    ] {
        std::fs::write(dir.join(file), contents).unwrap();
    }
    Pki {
        ca: ca_pem,
        client_cert: client_cert.pem(),
        client_key: client_key.serialize_pem(),
        dir,
    }
}

/// A CA nobody uses: a client trusting only it must refuse the server.
pub fn other_ca() -> String {
    ca("some other CA").2
}

impl Pki {
    /// redis-server's TLS arguments for this PKI, without the port
    /// (`--tls-port`): its certificate, key and CA, whether clients must
    /// present a certificate, and the client certificate it presents when
    /// it connects out (to its master, or as a sentinel). The same
    /// directives, without the dashes, go into a sentinel.conf.
    pub fn server_args(&self, require_client_certificates: bool) -> Vec<String> {
        let path = |file: &str| self.dir.join(file).to_str().unwrap().to_owned();
        let auth_clients = if require_client_certificates {
            "yes"
        } else {
            "no"
        };
        [
            "--tls-cert-file",
            &path("server.crt"),
            "--tls-key-file",
            &path("server.key"),
            "--tls-ca-cert-file",
            &path("ca.crt"),
            "--tls-auth-clients",
            auth_clients,
            "--tls-client-cert-file",
            &path("client.crt"),
            "--tls-client-key-file",
            &path("client.key"),
        ]
        .iter()
        .map(|arg| (*arg).to_owned())
        .collect()
    }
}

/// A redis-server with TLS on `tls_port` (the plain port stays for the
/// harness's readiness check and for the tests' admin connections).
pub struct TlsServer {
    pub server: TestServer,
    pub tls_port: u16,
}

impl TlsServer {
    /// Starts a server with TLS on a free port, this PKI's certificates and
    /// `extra_args` (e.g. `--replicaof`). The harness retries a taken plain
    /// port, not a taken TLS port: this retries that, on a fresh TLS port.
    pub fn start(pki: &Pki, require_client_certificates: bool, extra_args: &[&str]) -> TlsServer {
        let mut last = None;
        for _ in 0..3 {
            let tls_port = free_port();
            let mut args = vec!["--tls-port".to_owned(), tls_port.to_string()];
            args.extend(pki.server_args(require_client_certificates));
            args.extend(extra_args.iter().map(|arg| (*arg).to_owned()));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            match std::panic::catch_unwind(|| TestServer::start_with(&args)) {
                Ok(server) => return TlsServer { server, tls_port },
                Err(panic) => last = Some(panic),
            }
        }
        std::panic::resume_unwind(last.unwrap())
    }
}
