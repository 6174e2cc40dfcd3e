//! Redis Cluster harness (feature `cluster`): a 3-master, 3-replica
//! cluster of private `redis-server --cluster-enabled yes` processes.
//!
//! Used by tests/cluster.rs (its own clusters, whose topology it changes)
//! and by [`Env::cluster`](super::Env::cluster), which shares one cluster
//! between the conformance cases of a test binary through [`shared`]. The
//! servers are `TestServer`s: each is killed by its own PID when the
//! `TestCluster` drops.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::thread;
use std::time::{Duration, Instant};

use redisync::Client;

use super::{TestServer, free_port, unique_name, wait_until};

/// Six cluster nodes: after `start`, nodes 0-2 are masters, 3-5 replicas.
pub struct TestCluster {
    pub nodes: Vec<TestServer>,
    /// With [`start_tls`](Self::start_tls): each node's TLS port (in the
    /// order of `nodes`), the only port it announces to clients.
    pub tls_ports: Vec<u16>,
    /// The PKI of the TLS nodes' certificates (its files are removed when
    /// it drops, after the servers).
    #[cfg(feature = "tls")]
    pub pki: Option<super::tls::Pki>,
}

/// A TLS cluster's node arguments (without the TLS port) and `redis-cli`'s
/// TLS arguments.
struct TlsArgs {
    server_args: Vec<String>,
    cli_args: Vec<String>,
}

impl TestCluster {
    /// Starts six nodes (in parallel), joins them with
    /// `redis-cli --cluster create --cluster-replicas 1`, and waits until
    /// every node sees all 16384 slots served and every replica is linked.
    pub fn start() -> TestCluster {
        Self::start_with_node_timeout(2000)
    }

    /// As [`start`](Self::start); `node_timeout_ms` is how long a master
    /// may be unreachable before the others mark it failed and its replica
    /// starts an election.
    pub fn start_with_node_timeout(node_timeout_ms: u32) -> TestCluster {
        Self::launch(node_timeout_ms, None)
    }

    /// As [`start`](Self::start), every node with TLS for clients, the
    /// cluster bus and replication (`--tls-cluster yes --tls-replication
    /// yes`), its certificate from a fresh [`pki`](super::tls::pki): the
    /// nodes announce their TLS ports, so a client discovers only those.
    /// The plain ports stay open for the harness's admin connections. With
    /// `require_client_certificates`, a client must present a certificate
    /// of the PKI on the TLS ports (`--tls-auth-clients yes`).
    #[cfg(feature = "tls")]
    pub fn start_tls(require_client_certificates: bool) -> TestCluster {
        let pki = super::tls::pki();
        let mut server_args: Vec<String> = ["--tls-cluster", "yes", "--tls-replication", "yes"]
            .iter()
            .map(|arg| (*arg).to_owned())
            .collect();
        server_args.extend(pki.server_args(require_client_certificates));
        let path = |file: &str| pki.dir.join(file).to_str().unwrap().to_owned();
        // redis-cli presents the node certificate (it allows client use).
        let cli_args = vec![
            "--tls".to_owned(),
            "--cacert".to_owned(),
            path("ca.crt"),
            "--cert".to_owned(),
            path("server.crt"),
            "--key".to_owned(),
            path("server.key"),
        ];
        let mut cluster = Self::launch(
            2000,
            Some(TlsArgs {
                server_args,
                cli_args,
            }),
        );
        cluster.pki = Some(pki);
        cluster
    }

    fn launch(node_timeout_ms: u32, tls: Option<TlsArgs>) -> TestCluster {
        let tls = tls.map(Arc::new);
        let starting: Vec<_> = (0..6)
            .map(|_| {
                let node_timeout = node_timeout_ms.to_string();
                let tls = tls.clone();
                thread::spawn(move || {
                    let mut args: Vec<String> = [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        &node_timeout,
                        // Keep serving the slots of other masters while one
                        // fails.
                        "--cluster-require-full-coverage",
                        "no",
                    ]
                    .iter()
                    .map(|arg| (*arg).to_owned())
                    .collect();
                    let Some(tls) = tls else {
                        let args: Vec<&str> = args.iter().map(String::as_str).collect();
                        return (TestServer::start_with(&args), None);
                    };
                    args.extend(tls.server_args.iter().cloned());
                    // The harness retries a taken plain port, not a taken
                    // TLS port: retry that here, on a fresh TLS port.
                    let mut last = None;
                    for _ in 0..3 {
                        let tls_port = free_port();
                        let mut args = args.clone();
                        args.extend(["--tls-port".to_owned(), tls_port.to_string()]);
                        let args: Vec<&str> = args.iter().map(String::as_str).collect();
                        match std::panic::catch_unwind(|| TestServer::start_with(&args)) {
                            Ok(server) => return (server, Some(tls_port)),
                            Err(panic) => last = Some(panic),
                        }
                    }
                    std::panic::resume_unwind(last.unwrap())
                })
            })
            .collect();
        let (nodes, tls_ports): (Vec<TestServer>, Vec<Option<u16>>) = starting
            .into_iter()
            .map(|handle| handle.join().expect("starting a cluster node"))
            .unzip();
        let tls_ports: Vec<u16> = tls_ports.into_iter().flatten().collect();
        // With TLS, the nodes meet on their TLS ports (the ports they
        // announce), through a TLS redis-cli.
        let ports: Vec<u16> = if tls_ports.is_empty() {
            nodes.iter().map(|node| node.port()).collect()
        } else {
            tls_ports.clone()
        };
        let addresses: Vec<String> = ports
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        let mut command = Command::new("redis-cli");
        if let Some(tls) = &tls {
            command.args(&tls.cli_args);
        }
        let mut child = command
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("running redis-cli --cluster create (package redis-tools)");
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("redis-cli --cluster create did not finish within 60 s");
            }
            thread::sleep(Duration::from_millis(50));
        };
        assert!(status.success(), "redis-cli --cluster create: {status}");
        let cluster = TestCluster {
            nodes,
            tls_ports,
            #[cfg(feature = "tls")]
            pki: None,
        };
        for node in &cluster.nodes {
            let mut conn = node.connection();
            wait_until(
                "every node sees the cluster ok with all six nodes",
                Duration::from_secs(30),
                || {
                    let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn).unwrap();
                    info.contains("cluster_state:ok")
                        && info.contains("cluster_known_nodes:6")
                        && info.contains("cluster_slots_ok:16384")
                },
            );
        }
        for index in 0..6 {
            wait_until("every replica is linked", Duration::from_secs(30), || {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut cluster.nodes[index].connection())
                    .unwrap();
                info.contains("role:master") || info.contains("master_link_status:up")
            });
        }
        cluster
    }

    /// Node `index`'s URL: `rediss://` and its TLS port on a TLS cluster.
    pub fn url(&self, index: usize) -> String {
        match self.tls_ports.get(index) {
            Some(port) => format!("rediss://127.0.0.1:{port}"),
            None => format!("redis://127.0.0.1:{}", self.nodes[index].port()),
        }
    }

    pub fn urls(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|i| self.url(i)).collect()
    }

    /// A client that knows only node `seed` at start.
    pub fn client_seeded(&self, seed: usize) -> Client {
        self.builder([self.url(seed)])
            .build()
            .expect("a client on the cluster")
    }

    /// A client seeded with every node.
    pub fn client(&self) -> Client {
        self.builder(self.urls())
            .build()
            .expect("a client on the cluster")
    }

    /// A quiet client builder on `urls`, trusting the cluster's CA if it
    /// has one.
    pub fn builder<I>(&self, urls: I) -> redisync::ClientBuilder
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let builder = Client::builder()
            .cluster(urls)
            .event_handler(Arc::new(redisync::NopEventHandler));
        #[cfg(feature = "tls")]
        if let Some(pki) = &self.pki {
            return builder.tls_root_certificate(pki.ca.as_bytes());
        }
        builder
    }

    /// A cluster-routed raw connection (the `redis` crate's): each keyed
    /// command goes to the master of its key's slot. Plain clusters only.
    pub fn connection(&self) -> redis::cluster::ClusterConnection {
        redis::cluster::ClusterClient::new(self.urls())
            .expect("a cluster client")
            .get_connection()
            .expect("a cluster connection")
    }

    /// Runs `command` on every node (masters and replicas), one plain
    /// connection each, and returns the replies in node order.
    pub fn on_every_node<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> Vec<T> {
        self.nodes
            .iter()
            .map(|node| command.query(&mut node.connection()).unwrap())
            .collect()
    }

    /// Slot → master port, as node `via` sees it.
    pub fn slot_owners(&self, via: usize) -> Vec<(i64, i64, u16)> {
        let reply: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut self.nodes[via].connection())
            .unwrap();
        reply
            .into_iter()
            .map(|range| {
                let (start, end, master): (i64, i64, (String, u16)) =
                    redis::FromRedisValue::from_redis_value(range_head(range)).unwrap();
                (start, end, master.1)
            })
            .collect()
    }

    pub fn slot_of(&self, key: &str) -> i64 {
        self.slot_of_via(key, 0)
    }

    /// The slot of `key`, asked of node `via`.
    pub fn slot_of_via(&self, key: &str, via: usize) -> i64 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[via].connection())
            .unwrap()
    }

    /// The port of the master serving `key`.
    pub fn owner_port(&self, key: &str) -> u16 {
        self.owner_port_via(key, 0)
    }

    /// The port of the master serving `key`, as node `via` sees it.
    pub fn owner_port_via(&self, key: &str, via: usize) -> u16 {
        self.try_owner_port_via(key, via)
            .unwrap_or_else(|| panic!("node {via} names no master for {key:?}'s slot"))
    }

    /// The port of the master serving `key`, as node `via` sees it, or
    /// `None` while that node lists no master for the slot: during a
    /// failover a node can briefly leave the slot out of `CLUSTER SLOTS`,
    /// so loops that wait for a failover poll this one.
    pub fn try_owner_port_via(&self, key: &str, via: usize) -> Option<u16> {
        let slot = self.slot_of_via(key, via);
        self.slot_owners(via)
            .into_iter()
            .find(|(start, end, _)| *start <= slot && slot <= *end)
            .map(|(_, _, port)| port)
    }

    /// The node whose plain or TLS port is `port`.
    pub fn index_of_port(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .or_else(|| self.tls_ports.iter().position(|&p| p == port))
            .unwrap()
    }

    /// One fresh name per master, each served by a different one.
    pub fn names_on_every_master(&self, prefix: &str) -> Vec<String> {
        let mut by_owner: HashMap<u16, String> = HashMap::new();
        let owners = self.slot_owners(0);
        while by_owner.len() < 3 {
            let name = unique_name(prefix);
            let slot = self.slot_of(&name);
            let owner = owners
                .iter()
                .find(|(start, end, _)| *start <= slot && slot <= *end)
                .unwrap()
                .2;
            by_owner.entry(owner).or_insert(name);
        }
        by_owner.into_values().collect()
    }

    /// Node id of node `index`.
    pub fn node_id(&self, index: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[index].connection())
            .unwrap()
    }

    /// `CLUSTER SETSLOT slot how id` on node `index`.
    pub fn setslot(&self, index: usize, slot: i64, how: &str, id: &str) {
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .arg(id)
            .query::<()>(&mut self.nodes[index].connection())
            .unwrap();
    }

    /// Marks `slot` IMPORTING on master `to` and MIGRATING on master
    /// `from`: from here on, `from` answers a command whose keys it lacks
    /// with ASK.
    pub fn begin_migration(&self, slot: i64, from: usize, to: usize) {
        self.setslot(to, slot, "IMPORTING", &self.node_id(from));
        self.setslot(from, slot, "MIGRATING", &self.node_id(to));
    }

    /// Moves every key of `slot` from master `from` to master `to`
    /// (`MIGRATE`, 100 keys at a time, at most 100 rounds).
    pub fn move_slot_keys(&self, slot: i64, from: usize, to: usize) {
        let mut source = self.nodes[from].connection();
        for _ in 0..100 {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut source)
                .unwrap();
            if keys.is_empty() {
                break;
            }
            redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.nodes[to].port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query::<()>(&mut source)
                .unwrap();
        }
    }

    /// Gives `slot` to master `to` on every master, and waits until every
    /// node sees it there.
    pub fn give_slot(&self, slot: i64, to: usize) {
        let to_id = self.node_id(to);
        for index in 0..3 {
            self.setslot(index, slot, "NODE", &to_id);
        }
        wait_until(
            "every node sees the new owner",
            Duration::from_secs(10),
            || {
                (0..6).all(|via| {
                    self.slot_owners(via).iter().any(|(start, end, port)| {
                        *start <= slot && slot <= *end && *port == self.nodes[to].port()
                    })
                })
            },
        );
    }
}

/// The first three items of a `CLUSTER SLOTS` range (start, end, master).
fn range_head(range: redis::Value) -> redis::Value {
    match range {
        redis::Value::Array(mut items) => {
            items.truncate(3);
            if let Some(redis::Value::Array(master)) = items.get_mut(2) {
                master.truncate(2);
            }
            redis::Value::Array(items)
        }
        other => other,
    }
}

/// The cluster of this test binary's conformance cases, if one is running.
/// Statics are not dropped when the process exits, so this holds no strong
/// reference: every [`Env`](super::Env) on the cluster holds one, and the
/// last of them to drop stops the six servers (by PID, `TestServer`'s
/// drop). libtest runs tests in name order, so the `cluster::*` cases of a
/// binary run back to back on one cluster.
static SHARED: Mutex<Weak<TestCluster>> = Mutex::new(Weak::new());

/// The running shared cluster, or a new one (started while the other
/// callers wait) if none is.
pub fn shared() -> Arc<TestCluster> {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(cluster) = shared.upgrade() {
        return cluster;
    }
    let started = Instant::now();
    let cluster = Arc::new(TestCluster::start());
    eprintln!("shared test cluster started in {:?}", started.elapsed());
    *shared = Arc::downgrade(&cluster);
    cluster
}
