//! Operations: named connections (`CLIENT SETNAME redisync:<client uuid>`),
//! `Client::ping` and `Client::check_server`, against real redis-servers
//! started with good and bad settings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{TestServer, hgetall, start_replicated, unique_name, wait_until};
use redisync::{Client, ConnectionNameRefusedEvent, EventHandler, Severity};

/// Counts connection-name refusals and keeps the last one's text.
#[derive(Debug, Default)]
struct Refusals {
    count: AtomicUsize,
    last: Mutex<String>,
}

impl EventHandler for Refusals {
    fn on_connection_name_refused(&self, event: &ConnectionNameRefusedEvent) {
        self.count.fetch_add(1, Ordering::SeqCst);
        *self.last.lock().unwrap() = event.to_string();
    }
}

/// The `name=` of every connection in `CLIENT LIST`.
fn connection_names(server: &TestServer) -> Vec<String> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.connection())
        .unwrap();
    list.lines()
        .filter_map(|line| {
            line.split(' ')
                .find_map(|field| field.strip_prefix("name="))
                .map(str::to_owned)
        })
        .collect()
}

/// A client's pooled and pub/sub connections are named after the uuid of
/// the holder ids the lock hash shows.
#[test]
fn connections_are_named_after_the_holder_id() {
    let server = TestServer::start();
    let client = Client::builder()
        .redis_url(server.url())
        .pool_size(2)
        .build()
        .unwrap();
    let name = unique_name("health:named");
    let lock = client.lock(&name);
    let guard = lock.lock().unwrap();
    // A waiter, so that the pub/sub connection is open.
    let other = client.lock(&name);
    let waiter = std::thread::spawn(move || {
        other
            .try_lock_for(Duration::from_millis(300))
            .map(|guard| guard.is_some())
    });
    let holders = hgetall(&mut server.connection(), &name);
    let holder = holders.keys().next().expect("the lock hash has a holder");
    let (uuid, _thread) = holder.rsplit_once(':').unwrap();
    assert_eq!(uuid, client.id());
    let expected = format!("redisync:{uuid}");
    wait_until(
        "the pub/sub connection is up",
        Duration::from_secs(5),
        || {
            connection_names(&server)
                .iter()
                .filter(|n| **n == expected)
                .count()
                >= 2
        },
    );
    // Every connection the client opened carries the name: the others in
    // the list are the test's own (unnamed).
    let names = connection_names(&server);
    assert!(
        names.iter().all(|n| n.is_empty() || *n == expected),
        "{names:?}"
    );
    assert!(!waiter.join().unwrap().unwrap());
    guard.unlock().unwrap();
}

/// A backend opened by hand names its connections with a name of its own.
#[test]
fn a_backend_opened_by_hand_keeps_its_own_name() {
    let server = TestServer::start();
    let backend = redisync::RedisBackend::open(&server.url()).unwrap();
    let name = backend.connection_name().to_owned();
    assert!(name.starts_with("redisync:backend:"), "{name}");
    let client = Client::builder().backend(backend).build().unwrap();
    client
        .lock(unique_name("health:own"))
        .lock()
        .unwrap()
        .unlock()
        .unwrap();
    assert!(connection_names(&server).contains(&name));
}

/// An ACL user without `+client|setname` still locks (and is woken); the
/// refusal is reported once.
#[test]
fn a_refused_name_costs_only_the_name_and_is_reported_once() {
    let server = TestServer::start();
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("noname")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-client|setname")
        .query::<()>(&mut server.connection())
        .unwrap();
    let refusals = Arc::new(Refusals::default());
    let url = format!("redis://noname:pw@127.0.0.1:{}/", server.port());
    let client = Client::builder()
        .redis_url(&url)
        .pool_size(3)
        .event_handler(refusals.clone())
        .build()
        .unwrap();
    let name = unique_name("health:refused");
    let guard = client.lock(&name).lock().unwrap();
    let other = client.lock(&name);
    let waiter = std::thread::spawn(move || {
        let guard = other.try_lock_for(Duration::from_secs(5));
        guard.map(|guard| guard.map(|guard| guard.unlock()).is_some())
    });
    std::thread::sleep(Duration::from_millis(200));
    drop(guard);
    assert!(waiter.join().unwrap().unwrap(), "the waiter got the lock");
    // Several connections were opened (pool, pub/sub): one report.
    for _ in 0..3 {
        client.ping().unwrap();
    }
    assert_eq!(refusals.count.load(Ordering::SeqCst), 1);
    let text = refusals.last.lock().unwrap().clone();
    assert!(text.contains("client|setname"), "{text}");
    assert!(!text.contains("pw@"), "{text}");
    assert!(connection_names(&server).iter().all(String::is_empty));
}

#[test]
fn ping_measures_a_round_trip() {
    let server = TestServer::start();
    let client = Client::open(&server.url()).unwrap();
    let round_trip = client.ping().unwrap();
    assert!(round_trip > Duration::ZERO && round_trip < Duration::from_secs(1));
    let memory = Client::builder()
        .backend(redisync::MemoryBackend::new())
        .build()
        .unwrap();
    assert!(memory.ping().unwrap() < Duration::from_secs(1));
}

#[test]
fn ping_on_a_dead_server_is_a_connection_error() {
    let mut server = TestServer::start();
    let client = Client::builder()
        .redis_url(server.url())
        .connection_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .event_handler(Arc::new(redisync::NopEventHandler))
        .build()
        .unwrap();
    server.stop();
    let err = client.ping().unwrap_err();
    assert!(err.is_connection_error(), "{err}");
}

fn settings(report: &redisync::ServerReport) -> Vec<(Severity, String)> {
    report
        .findings()
        .iter()
        .map(|finding| (finding.severity, finding.setting.clone()))
        .collect()
}

/// The test servers run with `--save "" --appendonly no` and no replica:
/// the danger of losing everything on a restart.
#[test]
fn no_persistence_and_no_replica_is_a_danger() {
    let server = TestServer::start_with(&["--save", "", "--appendonly", "no"]);
    let client = Client::open(&server.url()).unwrap();
    let report = client.check_server().unwrap();
    eprintln!("{report}");
    assert_eq!(
        settings(&report),
        vec![(Severity::Danger, "persistence".to_owned())]
    );
    assert!(!report.is_ok());
    assert!(report.servers[0].contains("Redis "), "{:?}", report.servers);
}

#[test]
fn allkeys_eviction_is_a_danger() {
    let server =
        TestServer::start_with(&["--maxmemory-policy", "allkeys-lru", "--appendonly", "yes"]);
    let client = Client::open(&server.url()).unwrap();
    let report = client.check_server().unwrap();
    eprintln!("{report}");
    assert_eq!(
        settings(&report),
        vec![(Severity::Danger, "maxmemory-policy".to_owned())]
    );
}

#[test]
fn a_good_server_has_no_findings() {
    let server =
        TestServer::start_with(&["--maxmemory-policy", "noeviction", "--appendonly", "yes"]);
    let client = Client::open(&server.url()).unwrap();
    let report = client.check_server().unwrap();
    eprintln!("{report}");
    assert!(report.findings().is_empty(), "{report}");
    assert!(report.is_ok());
    assert_eq!(report.worst(), None);
}

/// Replicas without `min-replicas-to-write`: a warning, and no
/// persistence danger (the replica holds a copy).
#[test]
fn replicas_without_min_replicas_to_write_is_a_warning() {
    let (master, _replica) = start_replicated();
    let client = Client::open(&master.url()).unwrap();
    let report = client.check_server().unwrap();
    eprintln!("{report}");
    assert_eq!(
        settings(&report),
        vec![(Severity::Warning, "min-replicas-to-write".to_owned())]
    );
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg("1")
        .query::<()>(&mut master.connection())
        .unwrap();
    let report = client.check_server().unwrap();
    assert!(report.findings().is_empty(), "{report}");
}

/// An ACL user that may not run CONFIG: the unread settings are info
/// findings, not errors; INFO still finds the eviction policy.
#[test]
fn a_refused_config_is_an_info_finding() {
    let server = TestServer::start_with(&["--maxmemory-policy", "allkeys-random"]);
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("noconfig")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-config")
        .query::<()>(&mut server.connection())
        .unwrap();
    let url = format!("redis://noconfig:pw@127.0.0.1:{}/", server.port());
    let client = Client::open(&url).unwrap();
    let report = client.check_server().unwrap();
    eprintln!("{report}");
    assert_eq!(
        settings(&report),
        vec![
            (Severity::Danger, "maxmemory-policy".to_owned()),
            (Severity::Info, "save".to_owned()),
        ]
    );
    assert!(report.findings()[1].found.contains("could not read save"));
}

#[test]
fn a_memory_backend_has_nothing_to_check() {
    let client = Client::builder()
        .backend(redisync::MemoryBackend::new())
        .build()
        .unwrap();
    let report = client.check_server().unwrap();
    assert_eq!(settings(&report), vec![(Severity::Info, "INFO".to_owned())]);
    assert!(report.is_ok());
    assert_eq!(report.servers, vec!["memory".to_owned()]);
}

/// On a cluster: the routed connections are named on every master, and
/// `ping` and `check_server` ask every master.
#[cfg(feature = "cluster")]
#[test]
fn on_a_cluster_every_master_is_named_pinged_and_checked() {
    let env = common::Env::cluster();
    let common::Store::Cluster(store) = &env.store else {
        unreachable!()
    };
    let client = env.client();
    // Locks on several slots: every master runs a script.
    let names: Vec<String> = (0..12)
        .map(|i| unique_name(&format!("health:cl{i}")))
        .collect();
    let guards: Vec<_> = names
        .iter()
        .map(|name| client.lock(name).lock().unwrap())
        .collect();
    let expected = format!("name=redisync:{}", client.id());
    let lists: Vec<String> = store
        .cluster
        .on_every_node(redis::cmd("CLIENT").arg("LIST"));
    let named = lists.iter().filter(|list| list.contains(&expected)).count();
    assert!(named >= 3, "masters with a named connection: {named}");
    assert!(client.ping().unwrap() < Duration::from_secs(1));
    let report = client.check_server().unwrap();
    assert_eq!(report.servers.len(), 3, "{report}");
    assert!(
        report
            .findings()
            .iter()
            .all(|f| f.setting != "redis_version"),
        "{report}"
    );
    drop(guards);
}
