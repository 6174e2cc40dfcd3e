//! The servers and clients every group uses, started and pinned once.

#[allow(unused_imports)]
use crate::*;

/// What the groups run on: the bench server, the other independent masters
/// of the `multi` group, the replicated pair of `replica_ack`, (feature
/// `cluster`) the cluster, and the clients on them.
pub(crate) struct Env {
    pub(crate) server: TestServer,
    /// Kept alive for `extra_clients`.
    _extra_servers: Vec<TestServer>,
    /// Kept alive for the `replica_ack` clients.
    _repl: (TestServer, TestServer),
    pub(crate) ack_without: Client,
    pub(crate) ack_with: Client,
    #[cfg(feature = "cluster")]
    pub(crate) bench_cluster: common::cluster::TestCluster,
    #[cfg(feature = "cluster")]
    pub(crate) cluster_client: Client,
    #[cfg(feature = "cluster")]
    pub(crate) cluster_ack_client: Client,
    pub(crate) redis_client: Client,
    pub(crate) redis_client_b: Client,
    extra_clients: Vec<Client>,
    pub(crate) memory_client: Client,
    /// Whether the bench and every server it started are pinned.
    pub(crate) all_pinned: bool,
}

impl Env {
    /// Starts and pins every server (reporting the pinning on stderr) and
    /// opens the clients.
    pub(crate) fn start() -> Env {
        let pinned = pin_self();
        let server = TestServer::start();
        let server_pinned = pinned && pin_server(server.pid());
        eprintln!(
            "bench: redis-server pid {} at {}; pinning: {}",
            server.pid(),
            server.url(),
            if pinned && server_pinned {
                format!(
                    "bench pid {} and redis-server pid {} both on CPU 0 (bench Cpus_allowed_list: {}, server: {})",
                    std::process::id(),
                    server.pid(),
                    cpus_allowed("self"),
                    cpus_allowed(&server.pid().to_string())
                )
            } else {
                "NONE (numbers will swing with cross-CPU wake-ups)".to_owned()
            }
        );

        // The other independent masters of the `multi` group, pinned like the
        // bench server: each inherits the mask and is pinned again by its PID.
        let extra_servers: Vec<TestServer> = (1..MASTERS).map(|_| TestServer::start()).collect();
        let extra_pinned: Vec<bool> = extra_servers
            .iter()
            .map(|s| pinned && pin_server(s.pid()))
            .collect();
        let extras_pinned = extra_pinned.iter().all(|p| *p);
        eprintln!(
            "bench: {} more redis-servers for RedLock/MultiLock: {}; pinning: {}",
            extra_servers.len(),
            extra_servers
                .iter()
                .map(|s| format!("pid {} at {}", s.pid(), s.url()))
                .collect::<Vec<_>>()
                .join(", "),
            if pinned && extras_pinned {
                format!(
                    "all on CPU 0 (Cpus_allowed_list: {})",
                    extra_servers
                        .iter()
                        .map(|s| cpus_allowed(&s.pid().to_string()))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                "NOT all pinned (numbers will swing with cross-CPU wake-ups)".to_owned()
            }
        );

        // The master and replica of the `replica_ack` group, pinned the same way.
        let (repl_master, repl_replica) = replicated_pair();
        let repl_pinned = pinned && pin_server(repl_master.pid()) && pin_server(repl_replica.pid());
        eprintln!(
            "bench: replica_ack master pid {} at {}, replica pid {} at {}; pinning: {}",
            repl_master.pid(),
            repl_master.url(),
            repl_replica.pid(),
            repl_replica.url(),
            if repl_pinned {
                format!(
                    "both on CPU 0 (Cpus_allowed_list: {}, {})",
                    cpus_allowed(&repl_master.pid().to_string()),
                    cpus_allowed(&repl_replica.pid().to_string())
                )
            } else {
                "NOT pinned (numbers will swing with cross-CPU wake-ups)".to_owned()
            }
        );
        let ack_without =
            Client::open(&repl_master.url()).expect("client on the replicated master");
        let ack_with = Client::builder()
            .redis_url(repl_master.url())
            .replica_acknowledgement(ReplicaAcknowledgement::new(1, ACK_TIMEOUT))
            .build()
            .expect("client with replica acknowledgement");

        // The cluster of the `cluster` group (the tests' starter: 3 masters, one
        // replica each, every replica linked): every node pinned by its PID.
        #[cfg(feature = "cluster")]
        let bench_cluster = common::cluster::TestCluster::start();
        #[cfg(feature = "cluster")]
        let cluster_pinned = {
            let each: Vec<bool> = bench_cluster
                .nodes
                .iter()
                .map(|n| pinned && pin_server(n.pid()))
                .collect();
            let all = each.iter().all(|p| *p);
            eprintln!(
                "bench: cluster of {} nodes: {}; pinning: {}",
                bench_cluster.nodes.len(),
                bench_cluster
                    .nodes
                    .iter()
                    .map(|n| format!("{} pid {} at {}", node_role(n), n.pid(), n.url()))
                    .collect::<Vec<_>>()
                    .join(", "),
                if all {
                    format!(
                        "all on CPU 0 (Cpus_allowed_list: {})",
                        bench_cluster
                            .nodes
                            .iter()
                            .map(|n| cpus_allowed(&n.pid().to_string()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                } else {
                    "NOT all pinned (numbers will swing with cross-CPU wake-ups)".to_owned()
                }
            );
            all
        };
        #[cfg(not(feature = "cluster"))]
        let cluster_pinned = true;
        #[cfg(feature = "cluster")]
        let cluster_client =
            Client::open_cluster(bench_cluster.urls()).expect("redisync client on the cluster");
        // The same, with a `WAIT 1` on the script's master after each script.
        #[cfg(feature = "cluster")]
        let cluster_ack_client = Client::builder()
            .cluster(bench_cluster.urls())
            .replica_acknowledgement(ReplicaAcknowledgement::new(1, ACK_TIMEOUT))
            .build()
            .expect("redisync client on the cluster with replica acknowledgement");

        let url = server.url();
        let redis_client = Client::open(&url).expect("redisync client on the bench server");
        let redis_client_b = Client::open(&url).expect("second redisync client");
        // One client per master: the bench server's is `redis_client`.
        let extra_clients: Vec<Client> = extra_servers
            .iter()
            .map(|s| Client::open(&s.url()).expect("redisync client on an extra server"))
            .collect();
        let memory_client = Client::builder()
            .backend(MemoryBackend::new())
            .build()
            .expect("memory client");

        Env {
            all_pinned: pinned && server_pinned && extras_pinned && repl_pinned && cluster_pinned,
            server,
            _extra_servers: extra_servers,
            _repl: (repl_master, repl_replica),
            ack_without,
            ack_with,
            #[cfg(feature = "cluster")]
            bench_cluster,
            #[cfg(feature = "cluster")]
            cluster_client,
            #[cfg(feature = "cluster")]
            cluster_ack_client,
            redis_client,
            redis_client_b,
            extra_clients,
            memory_client,
        }
    }

    /// One client per independent master, the bench server's first.
    pub(crate) fn masters(&self) -> Vec<&Client> {
        std::iter::once(&self.redis_client)
            .chain(self.extra_clients.iter())
            .collect()
    }
}
