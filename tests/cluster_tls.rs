//! Redis Cluster over TLS (features `cluster` and `tls`): a 3-master,
//! 3-replica cluster whose nodes speak TLS to clients, to each other and to
//! their replicas (`--tls-cluster yes --tls-replication yes`), so that
//! `CLUSTER SLOTS` and MOVED name only TLS ports. A client opened with
//! `rediss://` seeds and the test CA runs its scripts through the `redis`
//! crate's TLS cluster connections and is woken through sharded pub/sub on
//! redisync's own TLS sockets.
//!
//! Starting a cluster takes seconds, so one cluster serves every case of
//! [`cluster_tls_suite`], run one after another, each on its own names. The
//! servers are stopped by PID when the `TestCluster` drops. Mutual TLS
//! (`--tls-auth-clients yes`) has its own cluster, in [`mutual_tls`].
#![cfg(all(feature = "cluster", feature = "tls"))]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::cluster::TestCluster;
use common::cluster_cases::{self as cases, LONG_LEASE, WAKE_WITHIN};
use common::unique_name;

/// A failure to connect must be reported within this (no hang).
const QUICK_FAILURE: Duration = Duration::from_secs(8);

#[test]
fn cluster_tls_suite() {
    let started = Instant::now();
    let cluster = TestCluster::start_tls(false);
    eprintln!("TLS cluster started in {:?}", started.elapsed());
    cases::run("cluster TLS", &cluster, cases::EVERY_PRIMITIVE);
    cases::run(
        "cluster TLS",
        &cluster,
        &[
            ("locks_exclude_across_masters", locks_exclude_across_masters),
            ("connections_are_tls", connections_are_tls),
            ("untrusted_ca_is_refused", untrusted_ca_is_refused),
            (
                "plain_seed_at_a_tls_port_fails",
                plain_seed_at_a_tls_port_fails,
            ),
            // Over TLS, the discovered nodes must be reached over TLS too.
            cases::LAST,
        ],
    );
}

/// On every master: a lock taken by one client excludes another client
/// (seeded with another node) until it is released.
fn locks_exclude_across_masters(cluster: &TestCluster) {
    let a = cluster.client();
    let b = cluster.client_seeded(4);
    for name in cluster.names_on_every_master("tls-cl-lock") {
        let guard = a.lock(name.as_str()).lock().unwrap();
        let other = b.lock(name.as_str());
        assert!(other.is_locked().unwrap());
        assert!(other.try_lock().unwrap().is_none(), "{name} is held by a");
        guard.unlock().unwrap();
        let guard = other.try_lock().unwrap().expect("free after the unlock");
        assert!(a.lock(name.as_str()).try_lock().unwrap().is_none());
        guard.unlock().unwrap();
        assert!(!a.lock(name.as_str()).is_locked().unwrap());
    }
}

/// The clients' connections, the pub/sub ones included, are on the nodes'
/// TLS ports (`CLIENT LIST` on the plain admin port shows each
/// connection's local address).
fn connections_are_tls(cluster: &TestCluster) {
    let client = cluster.client_seeded(1);
    let name = unique_name("tls-cl-conn");
    let guard = client
        .lock(name.as_str())
        .lock_with_lease(LONG_LEASE)
        .unwrap();
    // A waiter subscribes on the name's master.
    let waiting = cluster.client_seeded(3).lock(name.as_str());
    let handle = thread::spawn(move || {
        waiting
            .try_lock_for_with_lease(Duration::from_secs(5), LONG_LEASE)
            .unwrap()
            .map(|guard| guard.unlock().unwrap())
            .is_some()
    });
    let owner = cluster.index_of_port(cluster.owner_port(&name));
    let mut admin = cluster.nodes[owner].connection();
    let tls_addr = format!("laddr=127.0.0.1:{}", cluster.tls_ports[owner]);
    let plain_addr = format!("laddr=127.0.0.1:{}", cluster.nodes[owner].port());
    common::wait_until(
        "the waiter's sharded subscription on the TLS port",
        WAKE_WITHIN,
        || {
            let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
            clients.lines().any(|line| {
                line.contains(&tls_addr)
                    && line
                        .split_whitespace()
                        .any(|field| field.starts_with("ssub=") && field != "ssub=0")
            })
        },
    );
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    let over_plain = clients
        .lines()
        .filter(|line| line.contains(&plain_addr) && !line.contains("cmd=client|list"))
        .count();
    assert_eq!(over_plain, 0, "no client on the plain port:\n{clients}");
    guard.unlock().unwrap();
    assert!(handle.join().unwrap(), "the waiter got the lock");
}

/// A client that trusts another CA, or only the system's roots, fails at
/// once with a message about the certificate.
fn untrusted_ca_is_refused(cluster: &TestCluster) {
    let other = common::tls::other_ca();
    let builders = [
        // The system's roots do not include the test CA.
        redisync::Client::builder().cluster(cluster.urls()),
        redisync::Client::builder()
            .cluster(cluster.urls())
            .tls_root_certificate(other.as_bytes()),
    ];
    for builder in builders {
        let started = Instant::now();
        let err = builder
            .event_handler(Arc::new(redisync::NopEventHandler))
            .connection_timeout(Duration::from_secs(2))
            .build()
            .unwrap_err();
        assert!(started.elapsed() < QUICK_FAILURE, "{:?}", started.elapsed());
        assert!(err.is_backend(), "{err:?}");
        let shown = format!("{err}");
        assert!(
            shown.contains("certificate") || shown.contains("UnknownIssuer"),
            "the error should name the certificate: {shown}"
        );
    }
}

/// A `redis://` seed pointed at a TLS port is refused by the server's TLS
/// handshake: a clear connection error, not a hang.
fn plain_seed_at_a_tls_port_fails(cluster: &TestCluster) {
    let started = Instant::now();
    let err = redisync::Client::builder()
        .cluster([format!("redis://127.0.0.1:{}", cluster.tls_ports[0])])
        .event_handler(Arc::new(redisync::NopEventHandler))
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .build()
        .unwrap_err();
    assert!(started.elapsed() < QUICK_FAILURE, "{:?}", started.elapsed());
    assert!(err.is_connection_error(), "{err:?}");
    // And TLS settings with plain seeds are refused before connecting.
    let err = cluster
        .builder([format!("redis://127.0.0.1:{}", cluster.tls_ports[0])])
        .build()
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err:?}");
    assert!(err.to_string().contains("not rediss://"), "{err}");
    // So are mixed seeds.
    let err = cluster
        .builder([
            cluster.url(0),
            format!("redis://127.0.0.1:{}", cluster.nodes[1].port()),
        ])
        .build()
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err:?}");
    assert!(err.to_string().contains("URL #2"), "{err}");
}

/// A cluster that requires client certificates: a client presenting one
/// locks and is woken on every master (its pub/sub sockets present it
/// too); a client without one is refused at once.
#[test]
fn mutual_tls() {
    let started = Instant::now();
    let cluster = TestCluster::start_tls(true);
    eprintln!("mutual TLS cluster started in {:?}", started.elapsed());
    let pki = cluster.pki.as_ref().unwrap();
    let with_certificate = |seed: usize| {
        cluster
            .builder([cluster.url(seed)])
            .tls_client_certificate(pki.client_cert.as_bytes(), pki.client_key.as_bytes())
            .build()
            .unwrap()
    };
    let holder = with_certificate(0);
    let waiter = with_certificate(4);
    for name in cluster.names_on_every_master("mtls-cl-wake") {
        let guard = holder
            .lock(name.as_str())
            .lock_with_lease(LONG_LEASE)
            .unwrap();
        let waiting = waiter.lock(name.as_str());
        assert!(waiting.try_lock().unwrap().is_none());
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = thread::spawn(move || {
            let guard = waiting.lock_with_lease(LONG_LEASE).unwrap();
            tx.send(()).unwrap();
            guard.unlock().unwrap();
        });
        thread::sleep(Duration::from_millis(300));
        assert!(rx.try_recv().is_err(), "the waiter must wait");
        guard.unlock().unwrap();
        rx.recv_timeout(WAKE_WITHIN)
            .expect("the waiter was not woken by the unlock");
        handle.join().unwrap();
    }

    let started = Instant::now();
    let err = cluster
        .builder(cluster.urls())
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .build()
        .unwrap_err();
    assert!(started.elapsed() < QUICK_FAILURE, "{:?}", started.elapsed());
    assert!(err.is_backend(), "{err:?}");
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("CertificateRequired"), "{shown}");
    assert!(
        !shown.contains("PRIVATE KEY"),
        "no key material in errors: {shown}"
    );
}
