//! Lock benchmarks against a private `redis-server` this bench starts itself.
//!
//! Run: `cargo bench --bench lock` (about 2 minutes), or `cargo bench
//! --bench lock --features cluster` to add the `cluster` group (needs
//! `redis-cli`, package redis-tools). Criterion's reports
//! go to `target/criterion/`; the lines that matter are printed to stderr:
//! one per contended run, then a summary of medians timed by this file
//! (interleaved, in the same run) with the ratios the issue asks for.
//!
//! Pinning: on this 2-vCPU machine a reply that
//! wakes a process on the other vCPU costs 100-500 µs, very unevenly. So, at
//! start, the bench process pins itself to CPU 0 (`taskset -a -cp 0 <own
//! pid>`, before it starts any thread), then starts redis-server (which
//! inherits the mask) and pins it again explicitly by its PID (`taskset -a
//! -cp 0 <server pid>`); the extra redis-servers of the `multi` group are
//! started and pinned the same way, each by its own PID, and so are the
//! master and the replica of the `replica_ack` group, and the 6 nodes (3
//! masters, 3 replicas) of the `cluster` group. Nothing else is pinned. If `taskset` is missing or
//! fails, the bench says so and runs unpinned; set `REDISYNC_BENCH_NO_PIN=1`
//! to run unpinned on purpose.
//!
//! Groups:
//! - `floor`: `ping` (one PING) and `evalsha_pair` (the lock's two Lua
//!   scripts, acquire then release, run by the `redis` crate alone on one
//!   connection: the pair with zero library overhead).
//! - `uncontended`: `lock()` + `unlock()` (watchdog) and `lock_with_lease()` +
//!   `unlock()`, on Redis and on `MemoryBackend` (the library's own cost);
//!   the same `lock()` + `unlock()` pair on a fair lock (`fair_lock_unlock`)
//!   and on each half of a read-write lock (`read_lock_unlock`,
//!   `write_lock_unlock`). Every ratio is to the one floor above (the
//!   reentrant lock's scripts), so it includes the heavier scripts' own cost.
//!   Semaphores: `semaphore_acquire_release` (`acquire(1)` + the permit
//!   guard's `release()`, on a semaphore of 4 permits) and
//!   `expirable_acquire_release` (a permit-expirable semaphore's
//!   `acquire(lease)` + `release(&id)`), against the same floor.
//! - `multi`: uncontended `lock()` + `unlock()` pairs of a `RedLock` over 3
//!   and over 5 independent redis-servers (the bench server and
//!   [`MASTERS`] - 1 more, one `Client` each; all parts granted, so all N are
//!   taken and released, one after another), with the watchdog and with a
//!   fixed lease (`lock_with_lease`); and a `MultiLock` over 3 locks on the
//!   bench server through one client (`multilock3_one_server`) and over one
//!   lock on each of 3 servers (`multilock3_three_servers`). The summary
//!   shows each against the floors and against the single-lock pair of the
//!   same kind (`uncontended/redis/lock_unlock` or `lock_with_lease_unlock`),
//!   and that ratio divided by the number of parts (the cost per part).
//! - `replica_ack`: the uncontended `lock()` + `unlock()` pair on a master
//!   that has one replica (both private redis-servers, pinned like the
//!   others; the master syncs it once, at start, with a disk RDB), through a
//!   client without replica acknowledgement (`without`) and one with
//!   `ReplicaAcknowledgement::new(1, 500 ms)` (`with`: a `WAIT 1 500` after
//!   each of the two scripts, on the same connection). The summary shows
//!   each against the floor pair and the two against each other: the `WAIT`
//!   overhead.
//! - `cluster` (feature `cluster` only): a private 6-node Redis Cluster, 3
//!   masters with one replica each, started by the tests' starter
//!   (`common::cluster::TestCluster::start`: `--cluster-enabled yes`, joined
//!   by `redis-cli --cluster create --cluster-replicas 1`, then waited for
//!   until every node sees the cluster ok with 6 known nodes and every
//!   replica's `master_link_status:up`); every node pinned by its PID.
//!   `evalsha_pair`: the floor pair's two scripts (the release in its
//!   `SPUBLISH` form, as the library loads it for a cluster) through the
//!   `redis` crate's `ClusterConnection`, which routes both to the slot's
//!   master; `lock_unlock`: the uncontended `lock()` + `unlock()` pair
//!   through a `Client::open_cluster` client, on the same lock name (so the
//!   same master); `lock_unlock_ack`: the same pair, same name, through a
//!   cluster client with `ReplicaAcknowledgement::new(1, 500 ms)` (a `WAIT 1
//!   500` on the master that ran each of the two scripts, which waits for
//!   that master's replica); `standalone_lock_unlock`: the same pair on the
//!   bench server, for criterion's side-by-side view. The summary shows the
//!   cluster pair against the cluster floor and against the standalone
//!   pairs (the bench server's, and `replica_ack/without`: every write of a
//!   master with a replica is also sent to it, which costs a wake-up of the
//!   replica on the shared CPU even without `WAIT`), and `lock_unlock_ack` against the cluster pair (the `WAIT`
//!   overhead on a cluster) and against `replica_ack/with` (the same on a
//!   standalone master and replica). The pair without acknowledgement never
//!   talks to the replicas.
//! - `handoff`: from one thread's `unlock()` to another thread's return from
//!   `lock()` on the same lock, with both threads on one client or on two;
//!   `fair_*`: the same on a fair lock, where the waiter is queued in Redis
//!   and the unlock wakes it on its own channel; `semaphore_*`: the same on
//!   a semaphore of one permit (the holder's permit `release()` → the other
//!   thread's `acquire(1)` returns); `latch_open_two_clients`: a latch set to
//!   1, from `count_down()` to the return of a `wait()` on the other client
//!   (own timing adds `latch_open_same_client`).
//!   The releasing thread first waits until the other is parked in `lock()`
//!   (`acquire(1)`, `wait()`):
//!   it polls the waiter's `/proc/self/task/<tid>/wchan` for a futex wait,
//!   yielding in between, rather than sleeping, because an idle vCPU makes
//!   the next wake-ups 2-3× slower here; without procfs it sleeps 2 ms.
//! - `contended`: 8 threads on one client, and 2 clients × 4 threads, each
//!   looping `lock()` + `unlock()` for a fixed wall time.
//!
//! With `cargo test --benches` (criterion's test mode) every bench runs once
//! and the own measurements are cut to a smoke test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::panic,
    missing_docs
)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::{TestServer, unique_name};
use criterion::{Criterion, SamplingMode};
use redisync::backend::ReplicaAcknowledgement;
use redisync::{
    Client, CountDownLatch, Lock, MemoryBackend, MultiLock, PermitExpirableSemaphore, RedLock,
    Semaphore, SemaphorePermit,
};

/// A named own-timing case only some builds have (the `cluster` pairs),
/// interleaved with the others.
type ExtraCase = (&'static str, Box<dyn FnMut()>);

/// The fixed lease of the `lock_with_lease` benches.
const LEASE: Duration = Duration::from_secs(30);
const LEASE_MS: i64 = 30_000;
/// Independent redis-servers of the `multi` group (the bench server and
/// `MASTERS - 1` more); the RedLocks take the first 3 and all 5.
const MASTERS: usize = 5;
/// Parts of the MultiLock benches.
const MULTI_PARTS: usize = 3;
/// Permits of the uncontended semaphore benches (one `acquire(1)` at a time).
const SEMAPHORE_PERMITS: u64 = 4;
/// How long the latch of a floor release lives (as the library's).
const LATCH_MS: i64 = 10_000;
/// Fallback when a waiter's kernel wait channel cannot be read: how long a
/// handoff holder sleeps, after its peer said it is about to call `lock()`,
/// before it unlocks (the peer's failed attempt is one round trip, ≈ 20-60
/// µs pinned). Sleeping idles the vCPU, which makes the next wake-ups slower
/// (a PING right after a 2 ms sleep costs 2-3× a PING back to back), so
/// polling the wait channel is preferred.
const PARK_DELAY: Duration = Duration::from_millis(2);
/// Polling a waiter's wait channel gives up after this and unlocks anyway.
const PARK_POLL_LIMIT: Duration = Duration::from_millis(100);
/// Wall time of each contended run.
const CONTENDED_FOR: Duration = Duration::from_secs(2);
/// A handoff slower than this is a stall: the waiter was not woken by the
/// unlock and slept until the holder's TTL (or a handoff window) ran out.
const STALL: Duration = Duration::from_millis(50);
/// A contended run whose threads take longer than this to finish after the
/// deadline had a waiter sleep out a TTL instead of being woken.
const DRAIN_WARN: Duration = Duration::from_millis(500);

/// The replica acknowledgement of the `replica_ack/with` client.
const ACK_TIMEOUT: Duration = Duration::from_millis(500);

/// When this run started (to tell this run's criterion files from older ones).
static RUN_START: std::sync::OnceLock<std::time::SystemTime> = std::sync::OnceLock::new();

fn main() {
    RUN_START.get_or_init(std::time::SystemTime::now);
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    // Criterion's rule: without --bench, or with --test, it only smoke-tests.
    let test_mode = !has("--bench") || has("--test");
    let list_mode = has("--list");

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
    let ack_without = Client::open(&repl_master.url()).expect("client on the replicated master");
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
    let masters: Vec<&Client> = std::iter::once(&redis_client)
        .chain(extra_clients.iter())
        .collect();
    let memory_client = Client::builder()
        .backend(MemoryBackend::new())
        .build()
        .expect("memory client");

    let mut c = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();

    // --- floor ---
    {
        let mut floor = Floor::new(&server);
        let mut group = c.benchmark_group("floor");
        group.bench_function("ping", |b| b.iter(|| floor.ping()));
        group.bench_function("evalsha_pair", |b| b.iter(|| floor.pair()));
        group.finish();
    }

    // --- uncontended ---
    {
        let mut group = c.benchmark_group("uncontended");
        for (backend, client) in [("redis", &redis_client), ("memory", &memory_client)] {
            let lock = client.lock(unique_name("bench:uncontended"));
            group.bench_function(format!("{backend}/lock_unlock"), |b| {
                b.iter(|| lock_unlock(&lock));
            });
            group.bench_function(format!("{backend}/lock_with_lease_unlock"), |b| {
                b.iter(|| lock_with_lease_unlock(&lock));
            });
        }
        // The fair, read-write and semaphore pairs: shorter runs (the
        // settings apply to the benches added after them), to keep the
        // whole bench near 100 s.
        group
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for (backend, client) in [("redis", &redis_client), ("memory", &memory_client)] {
            let fair = client.fair_lock(unique_name("bench:uncontended:fair"));
            let rw = client.read_write_lock(unique_name("bench:uncontended:rw"));
            let (read, write) = (rw.read(), rw.write());
            group.bench_function(format!("{backend}/fair_lock_unlock"), |b| {
                b.iter(|| lock_unlock(&fair));
            });
            group.bench_function(format!("{backend}/read_lock_unlock"), |b| {
                b.iter(|| lock_unlock(&read));
            });
            group.bench_function(format!("{backend}/write_lock_unlock"), |b| {
                b.iter(|| lock_unlock(&write));
            });
        }
        for (backend, client) in [("redis", &redis_client), ("memory", &memory_client)] {
            let semaphore = permits(client, "bench:uncontended:semaphore");
            let expirable = expirable_permits(client, "bench:uncontended:expirable");
            group.bench_function(format!("{backend}/semaphore_acquire_release"), |b| {
                b.iter(|| semaphore_acquire_release(&semaphore));
            });
            group.bench_function(format!("{backend}/expirable_acquire_release"), |b| {
                b.iter(|| expirable_acquire_release(&expirable));
            });
        }
        group.finish();
    }

    // --- multi: RedLock and MultiLock, uncontended ---
    {
        let mut group = c.benchmark_group("multi");
        group
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for n in [3, MASTERS] {
            let redlock = redlock(&masters[..n], "bench:multi:redlock");
            group.bench_function(format!("redlock{n}/lock_unlock"), |b| {
                b.iter(|| redlock_unlock(&redlock));
            });
            group.bench_function(format!("redlock{n}/lock_with_lease_unlock"), |b| {
                b.iter(|| redlock_with_lease_unlock(&redlock));
            });
        }
        let one_server = multilock_one_server(&redis_client, "bench:multi:multilock");
        let spread = multilock_spread(&masters[..MULTI_PARTS], "bench:multi:multilock");
        group.bench_function("multilock3_one_server/lock_unlock", |b| {
            b.iter(|| multilock_unlock(&one_server));
        });
        group.bench_function("multilock3_three_servers/lock_unlock", |b| {
            b.iter(|| multilock_unlock(&spread));
        });
        group.finish();
    }

    // --- replica_ack: the WAIT overhead ---
    {
        let mut group = c.benchmark_group("replica_ack");
        group
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for (mode, client) in [("without", &ack_without), ("with", &ack_with)] {
            let lock = client.lock(unique_name("bench:replica_ack"));
            group.bench_function(format!("{mode}/lock_unlock"), |b| {
                b.iter(|| lock_unlock(&lock));
            });
        }
        group.finish();
    }

    // --- cluster: the pair on a Redis Cluster vs standalone ---
    #[cfg(feature = "cluster")]
    {
        let mut group = c.benchmark_group("cluster");
        group
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        let name = unique_name("bench:cluster");
        let lock = cluster_client.lock(&name);
        // The same name (so the same master): each pair ends with it free.
        let ack_lock = cluster_ack_client.lock(&name);
        let mut floor = cluster::cluster_floor(&bench_cluster, &name);
        let standalone = redis_client.lock(unique_name("bench:cluster:standalone"));
        group.bench_function("evalsha_pair", |b| b.iter(|| floor.pair()));
        group.bench_function("lock_unlock", |b| b.iter(|| lock_unlock(&lock)));
        group.bench_function("lock_unlock_ack", |b| b.iter(|| lock_unlock(&ack_lock)));
        group.bench_function("standalone_lock_unlock", |b| {
            b.iter(|| lock_unlock(&standalone));
        });
        group.finish();
    }

    // --- handoff ---
    {
        let mut group = c.benchmark_group("handoff");
        // Each iteration also waits for the peer to park (outside the
        // measured time), and criterion plans iterations by wall time.
        group
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
        let name = unique_name("bench:handoff:same");
        let (a, b) = (redis_client.lock(&name), redis_client.lock(&name));
        take_waits();
        group.bench_function("redis/same_client", |bencher| {
            bencher.iter_custom(|iters| note_waits(&handoff(&a, &b, iters)));
        });
        report_slow_locks("handoff/redis/same_client (criterion)");
        let name = unique_name("bench:handoff:two");
        let (a, b) = (redis_client.lock(&name), redis_client_b.lock(&name));
        group.bench_function("redis/two_clients", |bencher| {
            bencher.iter_custom(|iters| note_waits(&handoff(&a, &b, iters)));
        });
        report_slow_locks("handoff/redis/two_clients (criterion)");
        let name = unique_name("bench:handoff:fair:same");
        let (a, b) = (redis_client.fair_lock(&name), redis_client.fair_lock(&name));
        group.bench_function("redis/fair_same_client", |bencher| {
            bencher.iter_custom(|iters| note_waits(&handoff(&a, &b, iters)));
        });
        report_slow_locks("handoff/redis/fair_same_client (criterion)");
        let name = unique_name("bench:handoff:fair:two");
        let (a, b) = (
            redis_client.fair_lock(&name),
            redis_client_b.fair_lock(&name),
        );
        group.bench_function("redis/fair_two_clients", |bencher| {
            bencher.iter_custom(|iters| note_waits(&handoff(&a, &b, iters)));
        });
        report_slow_locks("handoff/redis/fair_two_clients (criterion)");
        // A semaphore of one permit: release → a blocked `acquire(1)` returns.
        let name = unique_name("bench:handoff:semaphore:same");
        let (a, b) = (
            one_permit(&redis_client, &name),
            redis_client.semaphore(&name),
        );
        group.bench_function("redis/semaphore_same_client", |bencher| {
            bencher.iter_custom(|iters| note_waits(&handoff(&a, &b, iters)));
        });
        report_slow_locks("handoff/redis/semaphore_same_client (criterion)");
        let name = unique_name("bench:handoff:semaphore:two");
        let (a, b) = (
            one_permit(&redis_client, &name),
            redis_client_b.semaphore(&name),
        );
        group.bench_function("redis/semaphore_two_clients", |bencher| {
            bencher.iter_custom(|iters| note_waits(&handoff(&a, &b, iters)));
        });
        report_slow_locks("handoff/redis/semaphore_two_clients (criterion)");
        // A latch at 1: `count_down()` → a `wait()` on the other client returns.
        let name = unique_name("bench:handoff:latch:two");
        let (a, b) = (
            redis_client.count_down_latch(&name),
            redis_client_b.count_down_latch(&name),
        );
        group.bench_function("redis/latch_open_two_clients", |bencher| {
            bencher.iter_custom(|iters| note_waits(&latch_open(&a, &b, iters)));
        });
        report_slow_locks("handoff/redis/latch_open_two_clients (criterion)");
        group.finish();
    }

    // --- contended (criterion's view: wall time per acquisition) ---
    {
        let mut group = c.benchmark_group("contended");
        group
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
        let name = unique_name("bench:contended:one");
        let locks: Vec<Lock> = (0..8).map(|_| redis_client.lock(&name)).collect();
        take_waits();
        group.bench_function("redis/8threads", |bencher| {
            bencher.iter_custom(|iters| contended_fixed(&locks, iters));
        });
        report_slow_locks("contended/redis/8threads (criterion)");
        let name = unique_name("bench:contended:two");
        let locks: Vec<Lock> = (0..8)
            .map(|i| {
                if i % 2 == 0 {
                    redis_client.lock(&name)
                } else {
                    redis_client_b.lock(&name)
                }
            })
            .collect();
        group.bench_function("redis/2clients_x_4threads", |bencher| {
            bencher.iter_custom(|iters| contended_fixed(&locks, iters));
        });
        report_slow_locks("contended/redis/2clients_x_4threads (criterion)");
        group.finish();
    }

    c.final_summary();

    if list_mode {
        return;
    }
    // Cases only some builds have, interleaved with the others.
    #[allow(unused_mut)]
    let mut extra_cases: Vec<ExtraCase> = Vec::new();
    #[cfg(feature = "cluster")]
    {
        let name = unique_name("bench:own:cluster");
        let lock = cluster_client.lock(&name);
        let ack_lock = cluster_ack_client.lock(&name);
        let mut floor = cluster::cluster_floor(&bench_cluster, &name);
        extra_cases.push(("cluster/evalsha_pair", Box::new(move || floor.pair())));
        extra_cases.push(("cluster/lock_unlock", Box::new(move || lock_unlock(&lock))));
        extra_cases.push((
            "cluster/lock_unlock_ack",
            Box::new(move || lock_unlock(&ack_lock)),
        ));
    }
    own_measurements(
        &server,
        [&redis_client, &redis_client_b, &memory_client],
        &masters,
        [&ack_without, &ack_with],
        extra_cases,
        test_mode,
        pinned && server_pinned && extras_pinned && repl_pinned && cluster_pinned,
        !test_mode,
    );
}

fn report_slow_locks(label: &str) {
    let (slow, longest) = take_waits();
    if slow > 0 {
        eprintln!(
            "{label}: WARNING: {slow} lock() calls waited > {STALL:?} (longest {longest:?}): \
             missed wake-ups (the waiter slept until the holder's TTL)"
        );
    }
}

// ---------------------------------------------------------------- pinning --

fn pin_self() -> bool {
    if std::env::var_os("REDISYNC_BENCH_NO_PIN").is_some_and(|v| v != "0") {
        eprintln!("bench: REDISYNC_BENCH_NO_PIN set: not pinning");
        return false;
    }
    // -a: every thread of the process; threads started later inherit it.
    taskset(std::process::id(), "bench process")
}

/// A node's `role:` from `INFO replication` (`master` or `slave`), for the
/// log line.
#[cfg(feature = "cluster")]
fn node_role(node: &TestServer) -> String {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut node.connection())
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("role:"))
        .map_or_else(|| "?".to_owned(), |r| r.trim().to_owned())
}

fn pin_server(pid: u32) -> bool {
    taskset(pid, "redis-server")
}

/// `taskset -a -cp 0 <pid>`: pins one process we started (or ourselves).
fn taskset(pid: u32, what: &str) -> bool {
    match Command::new("taskset")
        .args(["-a", "-cp", "0", &pid.to_string()])
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            eprintln!(
                "bench: pinning skipped: `taskset -a -cp 0 {pid}` ({what}) failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
            false
        }
        Err(e) => {
            eprintln!("bench: pinning skipped: cannot run taskset (util-linux) for {what}: {e}");
            false
        }
    }
}

/// `Cpus_allowed_list` from `/proc/<pid>/status`, for the log line.
fn cpus_allowed(pid: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_else(|| "?".to_owned())
}

// ---------------------------------------------------------------- cluster --

/// The `cluster` group (feature `cluster`): the tests' 6-node cluster
/// (`common::cluster::TestCluster`: 3 masters, one replica each), every node
/// pinned to CPU 0 like the other servers, redisync clients on it (one with
/// replica acknowledgement), and the floor pair through the `redis` crate's
/// `ClusterConnection`.
#[cfg(feature = "cluster")]
mod cluster {
    use super::common::cluster::TestCluster;

    /// The cluster floor: `super::Floor::pair`'s two scripts (the release
    /// in its sharded form, `SPUBLISH`, as the library loads it for a
    /// cluster) by EVALSHA through a `ClusterConnection`, which routes both
    /// to the master of `name`'s slot.
    pub(super) type ClusterFloor = super::Floor<redis::cluster::ClusterConnection>;

    /// On lock `name` (the cluster lock's own name, so the same master;
    /// the two never overlap: each call ends with the lock free).
    pub(super) fn cluster_floor(cluster: &TestCluster, name: &str) -> ClusterFloor {
        let release = super::with_prelude(include_str!("../lua/lock_release.lua"))
            .replace("redis.call('publish',", "redis.call('spublish',");
        assert!(release.contains("spublish"), "no sharded publish");
        super::Floor {
            conn: cluster.connection(),
            acquire: redis::Script::new(&super::with_prelude(include_str!(
                "../lua/lock_acquire.lua"
            ))),
            release: redis::Script::new(&release),
            channel: format!("redisson_lock__channel:{{{name}}}"),
            latch_prefix: format!("redisson_unlock_latch:{{{name}}}:floor"),
            holder: format!("{}:1", uuid::Uuid::new_v4()),
            name: name.to_owned(),
            releases: 0,
        }
    }
}

// ------------------------------------------------------------ replica_ack --

/// A master and one replica of it (disk-RDB sync, once), linked.
fn replicated_pair() -> (TestServer, TestServer) {
    common::start_replicated()
}

// ------------------------------------------------------------------ floor --

/// `script` as the library loads it: after `lua/args_prelude.lua`, the
/// argument checks every script with numbers in ARGV starts with.
fn with_prelude(script: &str) -> String {
    format!("{}{script}", include_str!("../lua/args_prelude.lua"))
}

/// The lock pair with the `redis` crate alone: the same two scripts the
/// library runs, on one plain connection, with a unique latch key per release
/// (as the library's) so the release really releases.
struct Floor<C = redis::Connection> {
    conn: C,
    acquire: redis::Script,
    release: redis::Script,
    name: String,
    channel: String,
    holder: String,
    latch_prefix: String,
    releases: u64,
}

impl Floor {
    fn new(server: &TestServer) -> Floor {
        let name = unique_name("bench:floor");
        Floor {
            conn: server.connection(),
            acquire: redis::Script::new(&with_prelude(include_str!("../lua/lock_acquire.lua"))),
            release: redis::Script::new(&with_prelude(include_str!("../lua/lock_release.lua"))),
            channel: format!("redisson_lock__channel:{{{name}}}"),
            latch_prefix: format!("redisson_unlock_latch:{{{name}}}"),
            holder: format!("{}:1", uuid::Uuid::new_v4()),
            name,
            releases: 0,
        }
    }

    fn ping(&mut self) {
        let pong: String = redis::cmd("PING").query(&mut self.conn).unwrap();
        black_box(pong);
    }
}

impl<C: redis::ConnectionLike> Floor<C> {
    /// Acquire + release by EVALSHA, as the library's pair does, with the
    /// `redis` crate alone (on a plain or a cluster connection).
    fn pair(&mut self) {
        let acquired: Option<i64> = self
            .acquire
            .key(&self.name)
            .arg(LEASE_MS)
            .arg(&self.holder)
            .invoke(&mut self.conn)
            .unwrap();
        assert_eq!(acquired, None, "floor acquire found the lock held");
        self.releases += 1;
        let latch = format!("{}:{}", self.latch_prefix, self.releases);
        let released: Option<i64> = self
            .release
            .key(&self.name)
            .key(&self.channel)
            .key(&latch)
            .arg("0")
            .arg(LEASE_MS)
            .arg(&self.holder)
            .arg(LATCH_MS)
            .invoke(&mut self.conn)
            .unwrap();
        assert_eq!(released, Some(1), "floor release did not release");
        black_box(released);
    }
}

// ------------------------------------------------------------ uncontended --

fn lock_unlock(lock: &Lock) {
    lock.lock().unwrap().unlock().unwrap();
}

fn lock_with_lease_unlock(lock: &Lock) {
    lock.lock_with_lease(LEASE).unwrap().unlock().unwrap();
}

/// A semaphore with [`SEMAPHORE_PERMITS`] permits, under a fresh name.
fn permits(client: &Client, prefix: &str) -> Semaphore {
    let semaphore = client.semaphore(unique_name(prefix));
    assert!(semaphore.try_set_permits(SEMAPHORE_PERMITS).unwrap());
    semaphore
}

/// A permit-expirable semaphore with [`SEMAPHORE_PERMITS`] permits.
fn expirable_permits(client: &Client, prefix: &str) -> PermitExpirableSemaphore {
    let semaphore = client.permit_expirable_semaphore(unique_name(prefix));
    assert!(semaphore.try_set_permits(SEMAPHORE_PERMITS).unwrap());
    semaphore
}

fn semaphore_acquire_release(semaphore: &Semaphore) {
    semaphore.acquire(1).unwrap().release().unwrap();
}

fn expirable_acquire_release(semaphore: &PermitExpirableSemaphore) {
    let id = semaphore.acquire(LEASE).unwrap();
    semaphore.release(&id).unwrap();
}

// ------------------------------------------------------- multi (uncontended) --

/// A RedLock over one lock (same name) on each of `masters`, checked to take
/// every part when uncontended.
fn redlock(masters: &[&Client], prefix: &str) -> RedLock {
    let name = unique_name(prefix);
    let redlock = RedLock::new(masters.iter().map(|c| c.lock(&name))).unwrap();
    let guard = redlock.lock().unwrap();
    assert_eq!(guard.guards().len(), masters.len(), "a part was not taken");
    guard.unlock().unwrap();
    redlock
}

/// A MultiLock over [`MULTI_PARTS`] locks on one server, through one client.
fn multilock_one_server(client: &Client, prefix: &str) -> MultiLock {
    MultiLock::new((0..MULTI_PARTS).map(|_| client.lock(unique_name(prefix)))).unwrap()
}

/// A MultiLock over one lock on each of `masters` (one client each).
fn multilock_spread(masters: &[&Client], prefix: &str) -> MultiLock {
    let name = unique_name(prefix);
    MultiLock::new(masters.iter().map(|c| c.lock(&name))).unwrap()
}

fn redlock_unlock(redlock: &RedLock) {
    redlock.lock().unwrap().unlock().unwrap();
}

fn redlock_with_lease_unlock(redlock: &RedLock) {
    redlock.lock_with_lease(LEASE).unwrap().unlock().unwrap();
}

fn multilock_unlock(multilock: &MultiLock) {
    multilock.lock().unwrap().unlock().unwrap();
}

// ---------------------------------------------------------------- handoff --

/// What [`handoff`] passes between two threads: a lock (taken with `lock()`
/// or, through [`Leased`], `lock_with_lease()`) or a one-permit semaphore.
trait Handoff: Sync {
    type Guard;
    /// Blocks until this side holds it.
    fn take(&self) -> Self::Guard;
    /// Gives it back (`unlock()`, or the permit guard's `release()`).
    fn give(&self, guard: Self::Guard);
}

impl Handoff for Lock {
    type Guard = redisync::LockGuard;
    fn take(&self) -> redisync::LockGuard {
        self.lock().unwrap()
    }
    fn give(&self, guard: redisync::LockGuard) {
        guard.unlock().unwrap();
    }
}

/// A lock taken with `lock_with_lease(lease)`.
struct Leased<'a>(&'a Lock, Duration);

impl Handoff for Leased<'_> {
    type Guard = redisync::LockGuard;
    fn take(&self) -> redisync::LockGuard {
        self.0.lock_with_lease(self.1).unwrap()
    }
    fn give(&self, guard: redisync::LockGuard) {
        guard.unlock().unwrap();
    }
}

/// One permit of a semaphore set to one permit: `acquire(1)`, and the
/// guard's `release()`.
impl Handoff for Semaphore {
    type Guard = SemaphorePermit;
    fn take(&self) -> SemaphorePermit {
        self.acquire(1).unwrap()
    }
    fn give(&self, permit: SemaphorePermit) {
        permit.release().unwrap();
    }
}

/// A semaphore named `name` holding exactly one permit, through `client`.
fn one_permit(client: &Client, name: &str) -> Semaphore {
    let semaphore = client.semaphore(name);
    assert!(
        semaphore.try_set_permits(1).unwrap(),
        "{name} was set already"
    );
    semaphore
}

/// `rounds` handoffs between two threads, one taking through `a`, the other
/// through `b` (same lock or semaphore name). Returns each handoff's
/// latency: from just before the holder's `unlock()` (or permit release) to
/// the waiter's return from `lock()` (or `acquire(1)`).
///
/// Ping-pong: the holder waits for its peer's "about to lock", waits until
/// the peer is parked in `lock()` (its wait channel), stamps t0 and unlocks; the peer stamps
/// t1 when `lock()` returns and becomes the holder; then the roles swap. The
/// ex-holder only calls `lock()` after the peer has the lock, so it never
/// races the handoff it measures.
fn handoff<H: Handoff>(a: &H, b: &H, rounds: u64) -> Vec<Duration> {
    let base = Instant::now();
    let t0 = AtomicU64::new(0);
    let tids = [AtomicU64::new(0), AtomicU64::new(0)];
    let (a_tx, b_rx) = mpsc::channel::<()>();
    let (b_tx, a_rx) = mpsc::channel::<()>();
    let (out_tx, out_rx) = mpsc::channel::<Duration>();
    thread::scope(|s| {
        let t0 = &t0;
        let [tid_a, tid_b] = &tids;
        let side_a = Side {
            me: tid_a,
            peer: tid_b,
        };
        let side_b = Side {
            me: tid_b,
            peer: tid_a,
        };
        let out_b = out_tx.clone();
        s.spawn(move || handoff_player(a, true, rounds, base, t0, side_a, a_tx, a_rx, out_tx));
        s.spawn(move || handoff_player(b, false, rounds, base, t0, side_b, b_tx, b_rx, out_b));
    });
    out_rx.try_iter().collect()
}

/// One side of [`handoff`]; `first` starts as the holder.
#[allow(clippy::too_many_arguments)]
fn handoff_player<H: Handoff>(
    it: &H,
    first: bool,
    rounds: u64,
    base: Instant,
    t0: &AtomicU64,
    side: Side<'_>,
    tx: mpsc::Sender<()>,
    rx: mpsc::Receiver<()>,
    out: mpsc::Sender<Duration>,
) {
    side.me.store(own_tid().unwrap_or(0), Ordering::Release);
    let mut guard = None;
    if first {
        guard = Some(it.take());
        tx.send(()).unwrap(); // "I hold it"
    } else {
        rx.recv().unwrap();
    }
    for round in 0..rounds {
        let holder = (round % 2 == 0) == first;
        if holder {
            rx.recv().unwrap(); // peer: "about to lock"
            wait_until_parked(side.peer.load(Ordering::Acquire));
            let g = guard.take().expect("the holder holds it");
            t0.store(nanos_since(base), Ordering::Release);
            it.give(g);
            rx.recv().unwrap(); // peer: "I hold it"
        } else {
            tx.send(()).unwrap(); // "about to lock"
            let g = it.take();
            let t1 = nanos_since(base);
            let start = t0.load(Ordering::Acquire);
            out.send(Duration::from_nanos(t1.saturating_sub(start)))
                .unwrap();
            guard = Some(g);
            tx.send(()).unwrap(); // "I hold it"
        }
    }
    if let Some(g) = guard {
        it.give(g);
    }
}

/// `rounds` openings of a latch: each round one thread sets the count to 1
/// through `setter`, another calls `wait()` through `waiter`; once that one
/// is parked, the first stamps t0 and counts down. Returns each opening's
/// latency: from just before `count_down()` to the waiter's return from
/// `wait()`. (At zero the latch deletes its key, so it can be set again.)
fn latch_open(setter: &CountDownLatch, waiter: &CountDownLatch, rounds: u64) -> Vec<Duration> {
    let base = Instant::now();
    let t0 = AtomicU64::new(0);
    let waiter_tid = AtomicU64::new(0);
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (back_tx, back_rx) = mpsc::channel::<Option<Duration>>();
    let mut times = Vec::new();
    thread::scope(|s| {
        let (t0, waiter_tid) = (&t0, &waiter_tid);
        s.spawn(move || {
            waiter_tid.store(own_tid().unwrap_or(0), Ordering::Release);
            while go_rx.recv().is_ok() {
                back_tx.send(None).unwrap(); // "about to wait"
                waiter.wait().unwrap();
                let t1 = nanos_since(base);
                let start = t0.load(Ordering::Acquire);
                back_tx
                    .send(Some(Duration::from_nanos(t1.saturating_sub(start))))
                    .unwrap();
            }
        });
        for _ in 0..rounds {
            assert!(setter.try_set_count(1).unwrap(), "the latch was not open");
            go_tx.send(()).unwrap();
            assert_eq!(back_rx.recv().unwrap(), None);
            wait_until_parked(waiter_tid.load(Ordering::Acquire));
            t0.store(nanos_since(base), Ordering::Release);
            setter.count_down().unwrap();
            times.push(back_rx.recv().unwrap().expect("the waiter's latency"));
        }
        drop(go_tx);
    });
    times
}

/// The two threads' kernel thread ids, for [`wait_until_parked`].
#[derive(Clone, Copy)]
struct Side<'a> {
    me: &'a AtomicU64,
    peer: &'a AtomicU64,
}

/// The calling thread's kernel thread id (Linux), from `/proc/thread-self`.
fn own_tid() -> Option<u64> {
    std::fs::read_link("/proc/thread-self")
        .ok()?
        .file_name()?
        .to_str()?
        .parse()
        .ok()
}

/// Returns once thread `tid` of this process is blocked on a futex (parked
/// in `lock()`: its only futex wait there; its acquire attempt waits on a
/// socket instead), seen twice in a row, yielding the CPU in between so the
/// vCPU never idles. Falls back to sleeping PARK_DELAY without procfs.
fn wait_until_parked(tid: u64) {
    let path = format!("/proc/self/task/{tid}/wchan");
    let start = Instant::now();
    let mut seen = 0;
    while seen < 2 {
        let Ok(wchan) = std::fs::read_to_string(&path) else {
            thread::sleep(PARK_DELAY);
            return;
        };
        if wchan.contains("futex") {
            seen += 1;
        } else {
            seen = 0;
        }
        if start.elapsed() > PARK_POLL_LIMIT {
            return;
        }
        thread::yield_now();
    }
}

fn nanos_since(base: Instant) -> u64 {
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

// -------------------------------------------------------------- contended --

/// Criterion's view: the locks' threads share `iters` acquisitions; returns
/// the wall time from the start barrier until the last thread is done.
fn contended_fixed(locks: &[Lock], iters: u64) -> Duration {
    let threads = u64::try_from(locks.len()).unwrap();
    let per_thread = iters.div_ceil(threads);
    let barrier = Barrier::new(locks.len() + 1);
    let start = thread::scope(|s| {
        for lock in locks {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for _ in 0..per_thread {
                    lock_waited(lock).unlock().unwrap();
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    // Scale to exactly `iters` acquisitions.
    start
        .elapsed()
        .mul_f64(iters as f64 / (per_thread * threads) as f64)
}

/// Contended `lock()` calls slower than STALL, and the slowest, since the
/// last [`take_waits`].
static SLOW_LOCKS: AtomicU64 = AtomicU64::new(0);
static LONGEST_LOCK_NS: AtomicU64 = AtomicU64::new(0);

/// `lock()`, noting waits long enough to be a missed wake-up (with 8
/// threads a turn normally comes within a few milliseconds).
fn lock_waited(lock: &Lock) -> redisync::LockGuard {
    let start = Instant::now();
    let guard = lock.lock().unwrap();
    let waited = start.elapsed();
    if waited > STALL {
        SLOW_LOCKS.fetch_add(1, Ordering::Relaxed);
    }
    let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
    LONGEST_LOCK_NS.fetch_max(nanos, Ordering::Relaxed);
    guard
}

/// Notes each handoff like [`lock_waited`] does; returns their sum.
fn note_waits(times: &[Duration]) -> Duration {
    for t in times {
        if *t > STALL {
            SLOW_LOCKS.fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
        LONGEST_LOCK_NS.fetch_max(nanos, Ordering::Relaxed);
    }
    times.iter().sum()
}

/// (slow `lock()` calls, longest wait) since the last call; resets both.
fn take_waits() -> (u64, Duration) {
    (
        SLOW_LOCKS.swap(0, Ordering::Relaxed),
        Duration::from_nanos(LONGEST_LOCK_NS.swap(0, Ordering::Relaxed)),
    )
}

struct Contended {
    per_sec: f64,
    min_max: f64,
    counts: Vec<u64>,
    /// Share of acquisitions by the thread that made the previous one.
    same_thread_share: f64,
    drain: Duration,
    /// `lock()` calls slower than STALL, and the longest.
    slow: u64,
    longest: Duration,
}

/// Each thread loops `lock()` + `unlock()` until `duration` has passed;
/// counts acquisitions that began before the deadline.
fn contended_for(locks: &[Lock], duration: Duration) -> Contended {
    let barrier = Barrier::new(locks.len() + 1);
    let deadline_nanos = AtomicU64::new(u64::MAX);
    let base = Instant::now();
    let last_owner = AtomicUsize::new(usize::MAX);
    let repeats = AtomicU64::new(0);
    let mut counts = Vec::new();
    let mut drain = Duration::ZERO;
    take_waits();
    thread::scope(|s| {
        let handles: Vec<_> = locks
            .iter()
            .enumerate()
            .map(|(me, lock)| {
                let (barrier, deadline_nanos, last_owner, repeats) =
                    (&barrier, &deadline_nanos, &last_owner, &repeats);
                s.spawn(move || {
                    barrier.wait();
                    let mut count = 0u64;
                    loop {
                        let guard = lock_waited(lock);
                        let at = nanos_since(base);
                        if at >= deadline_nanos.load(Ordering::Acquire) {
                            guard.unlock().unwrap();
                            return count;
                        }
                        if last_owner.swap(me, Ordering::Relaxed) == me {
                            repeats.fetch_add(1, Ordering::Relaxed);
                        }
                        count += 1;
                        guard.unlock().unwrap();
                    }
                })
            })
            .collect();
        barrier.wait();
        let start = nanos_since(base);
        deadline_nanos.store(
            start + u64::try_from(duration.as_nanos()).unwrap(),
            Ordering::Release,
        );
        thread::sleep(duration);
        let drain_start = Instant::now();
        counts = handles.into_iter().map(|h| h.join().unwrap()).collect();
        drain = drain_start.elapsed();
    });
    let (slow, longest) = take_waits();
    let total: u64 = counts.iter().sum();
    let min = counts.iter().copied().min().unwrap_or(0);
    let max = counts.iter().copied().max().unwrap_or(0);
    Contended {
        per_sec: total as f64 / duration.as_secs_f64(),
        min_max: if max == 0 {
            0.0
        } else {
            min as f64 / max as f64
        },
        same_thread_share: if total == 0 {
            0.0
        } else {
            repeats.load(Ordering::Relaxed) as f64 / total as f64
        },
        counts,
        drain,
        slow,
        longest,
    }
}

// ------------------------------------------------------ own measurements --

/// Runs `cases` in interleaved blocks (so slow drift hits all of them alike)
/// and returns each call's duration per case.
fn interleaved(
    cases: &mut [(&'static str, &mut dyn FnMut())],
    warmup: usize,
    blocks: usize,
    per_block: usize,
) -> Vec<Vec<Duration>> {
    for (_, f) in cases.iter_mut() {
        for _ in 0..warmup {
            f();
        }
    }
    let mut times = vec![Vec::with_capacity(blocks * per_block); cases.len()];
    for _ in 0..blocks {
        for (i, (_, f)) in cases.iter_mut().enumerate() {
            for _ in 0..per_block {
                let t = Instant::now();
                f();
                times[i].push(t.elapsed());
            }
        }
    }
    times
}

#[derive(Clone, Copy)]
struct Stats {
    median: Duration,
    p10: Duration,
    p90: Duration,
    max: Duration,
    /// Calls slower than STALL.
    stalls: usize,
}

fn stats(times: &[Duration]) -> Stats {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let at = |q: f64| {
        let i = ((sorted.len() - 1) as f64 * q).round() as usize;
        sorted[i]
    };
    Stats {
        median: at(0.5),
        p10: at(0.1),
        p90: at(0.9),
        max: at(1.0),
        stalls: sorted.iter().filter(|t| **t > STALL).count(),
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// Criterion's median for `id` ("group/function") from this run's
/// `estimates.json` (median of the per-sample means), if it wrote one.
fn criterion_median(id: &str) -> Option<Duration> {
    let root = std::env::var_os("CRITERION_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map(|d| std::path::PathBuf::from(d).join("criterion"))
        })
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/criterion")
        });
    let (group, function) = id.split_once('/')?;
    let path = root
        .join(group)
        .join(function.replace('/', "_"))
        .join("new/estimates.json");
    // Only this run's: a filtered run leaves older files behind.
    if std::fs::metadata(&path).ok()?.modified().ok()? < *RUN_START.get()? {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    // {"mean":{...},"median":{"confidence_interval":{...},"point_estimate":N,...
    let rest = &text[text.find("\"median\"")?..];
    let rest = &rest[rest.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
    let end = rest.find([',', '}'])?;
    let nanos: f64 = rest[..end].trim().parse().ok()?;
    Some(Duration::from_secs_f64(nanos / 1e9))
}

#[allow(clippy::too_many_arguments)]
fn own_measurements(
    server: &TestServer,
    clients: [&Client; 3],
    masters: &[&Client],
    replicated: [&Client; 2],
    mut extra_cases: Vec<ExtraCase>,
    test_mode: bool,
    pinned: bool,
    ran_criterion: bool,
) {
    let [redis_a, redis_b, memory] = clients;
    let (blocks, per_block, handoffs, contended_time) = if test_mode {
        (2, 5, 10, Duration::from_millis(200))
    } else {
        (20, 100, 1500, CONTENDED_FOR)
    };
    eprintln!(
        "\nbench: own timing ({blocks} blocks of {per_block} calls per case, interleaved; \
         {handoffs} handoffs per variant; contended runs of {contended_time:?})..."
    );

    // Floor and uncontended pairs, interleaved.
    let floor = std::cell::RefCell::new(Floor::new(server));
    let redis_lock = redis_a.lock(unique_name("bench:own:uncontended"));
    let memory_lock = memory.lock(unique_name("bench:own:uncontended"));
    let mut ping = || floor.borrow_mut().ping();
    let mut pair = || floor.borrow_mut().pair();
    let mut redis_wd = || lock_unlock(&redis_lock);
    let mut redis_lease = || lock_with_lease_unlock(&redis_lock);
    let mut mem_wd = || lock_unlock(&memory_lock);
    let mut mem_lease = || lock_with_lease_unlock(&memory_lock);
    // The fair and read-write pairs (`lock()` + `unlock()`, watchdog).
    let redis_fair = redis_a.fair_lock(unique_name("bench:own:uncontended:fair"));
    let redis_rw = redis_a.read_write_lock(unique_name("bench:own:uncontended:rw"));
    let (redis_read, redis_write) = (redis_rw.read(), redis_rw.write());
    let memory_fair = memory.fair_lock(unique_name("bench:own:uncontended:fair"));
    let memory_rw = memory.read_write_lock(unique_name("bench:own:uncontended:rw"));
    let (memory_read, memory_write) = (memory_rw.read(), memory_rw.write());
    let mut redis_fair_pair = || lock_unlock(&redis_fair);
    let mut redis_read_pair = || lock_unlock(&redis_read);
    let mut redis_write_pair = || lock_unlock(&redis_write);
    let mut mem_fair_pair = || lock_unlock(&memory_fair);
    let mut mem_read_pair = || lock_unlock(&memory_read);
    let mut mem_write_pair = || lock_unlock(&memory_write);
    // The semaphore pairs: `acquire(1)` + the guard's `release()`, and a
    // permit-expirable semaphore's `acquire(LEASE)` + `release(&id)`.
    let redis_sem = permits(redis_a, "bench:own:uncontended:semaphore");
    let redis_exp = expirable_permits(redis_a, "bench:own:uncontended:expirable");
    let memory_sem = permits(memory, "bench:own:uncontended:semaphore");
    let memory_exp = expirable_permits(memory, "bench:own:uncontended:expirable");
    let mut redis_sem_pair = || semaphore_acquire_release(&redis_sem);
    let mut redis_exp_pair = || expirable_acquire_release(&redis_exp);
    let mut mem_sem_pair = || semaphore_acquire_release(&memory_sem);
    let mut mem_exp_pair = || expirable_acquire_release(&memory_exp);
    // RedLock over 3 and 5 masters, MultiLock over 3 locks on one server and
    // on three (indices 16..).
    let redlock3 = redlock(&masters[..3], "bench:own:multi:redlock");
    let redlock5 = redlock(&masters[..MASTERS], "bench:own:multi:redlock");
    let multi_one = multilock_one_server(redis_a, "bench:own:multi:multilock");
    let multi_spread = multilock_spread(&masters[..MULTI_PARTS], "bench:own:multi:multilock");
    let mut redlock3_wd = || redlock_unlock(&redlock3);
    let mut redlock3_lease = || redlock_with_lease_unlock(&redlock3);
    let mut redlock5_wd = || redlock_unlock(&redlock5);
    let mut redlock5_lease = || redlock_with_lease_unlock(&redlock5);
    let mut multi_one_pair = || multilock_unlock(&multi_one);
    let mut multi_spread_pair = || multilock_unlock(&multi_spread);
    // The pair on the replicated master, without and with replica
    // acknowledgement (indices 22, 23).
    let [ack_without, ack_with] = replicated;
    let ack_without_lock = ack_without.lock(unique_name("bench:own:replica_ack"));
    let ack_with_lock = ack_with.lock(unique_name("bench:own:replica_ack"));
    let mut ack_without_pair = || lock_unlock(&ack_without_lock);
    let mut ack_with_pair = || lock_unlock(&ack_with_lock);
    let mut cases: Vec<(&'static str, &mut dyn FnMut())> = vec![
        ("floor/ping", &mut ping),
        ("floor/evalsha_pair", &mut pair),
        ("uncontended/redis/lock_unlock", &mut redis_wd),
        ("uncontended/redis/lock_with_lease_unlock", &mut redis_lease),
        ("uncontended/memory/lock_unlock", &mut mem_wd),
        ("uncontended/memory/lock_with_lease_unlock", &mut mem_lease),
        ("uncontended/redis/fair_lock_unlock", &mut redis_fair_pair),
        ("uncontended/redis/read_lock_unlock", &mut redis_read_pair),
        ("uncontended/redis/write_lock_unlock", &mut redis_write_pair),
        ("uncontended/memory/fair_lock_unlock", &mut mem_fair_pair),
        ("uncontended/memory/read_lock_unlock", &mut mem_read_pair),
        ("uncontended/memory/write_lock_unlock", &mut mem_write_pair),
        (
            "uncontended/redis/semaphore_acquire_release",
            &mut redis_sem_pair,
        ),
        (
            "uncontended/redis/expirable_acquire_release",
            &mut redis_exp_pair,
        ),
        (
            "uncontended/memory/semaphore_acquire_release",
            &mut mem_sem_pair,
        ),
        (
            "uncontended/memory/expirable_acquire_release",
            &mut mem_exp_pair,
        ),
        ("multi/redlock3/lock_unlock", &mut redlock3_wd),
        ("multi/redlock3/lock_with_lease_unlock", &mut redlock3_lease),
        ("multi/redlock5/lock_unlock", &mut redlock5_wd),
        ("multi/redlock5/lock_with_lease_unlock", &mut redlock5_lease),
        (
            "multi/multilock3_one_server/lock_unlock",
            &mut multi_one_pair,
        ),
        (
            "multi/multilock3_three_servers/lock_unlock",
            &mut multi_spread_pair,
        ),
        ("replica_ack/without/lock_unlock", &mut ack_without_pair),
        ("replica_ack/with/lock_unlock", &mut ack_with_pair),
    ];
    // Feature-dependent cases (indices 24..), found by name below.
    for (name, case) in &mut extra_cases {
        cases.push((*name, &mut **case));
    }
    let names: Vec<&'static str> = cases.iter().map(|(n, _)| *n).collect();
    let times = interleaved(&mut cases, per_block, blocks, per_block);
    let s: Vec<Stats> = times.iter().map(|t| stats(t)).collect();
    let (ping, pair) = (s[0], s[1]);
    let (redis_wd, redis_lease, mem_wd, mem_lease) = (s[2], s[3], s[4], s[5]);

    // Handoff.
    #[derive(Clone, Copy)]
    enum Kind {
        Lock,
        Lease,
        Fair,
        Semaphore,
        Latch,
    }
    let mut handoff_stats = Vec::new();
    for (label, two_clients, kind) in [
        ("handoff/redis/same_client", false, Kind::Lock),
        ("handoff/redis/two_clients", true, Kind::Lock),
        (
            "handoff/redis/same_client_lease (own only)",
            false,
            Kind::Lease,
        ),
        ("handoff/redis/fair_same_client", false, Kind::Fair),
        ("handoff/redis/fair_two_clients", true, Kind::Fair),
        (
            "handoff/redis/semaphore_same_client",
            false,
            Kind::Semaphore,
        ),
        ("handoff/redis/semaphore_two_clients", true, Kind::Semaphore),
        (
            "handoff/redis/latch_open_same_client (own only)",
            false,
            Kind::Latch,
        ),
        ("handoff/redis/latch_open_two_clients", true, Kind::Latch),
    ] {
        let name = unique_name("bench:own:handoff");
        let b = if two_clients { redis_b } else { redis_a };
        let times = match kind {
            Kind::Lock => handoff(&redis_a.lock(&name), &b.lock(&name), handoffs),
            Kind::Lease => handoff(
                &Leased(&redis_a.lock(&name), LEASE),
                &Leased(&b.lock(&name), LEASE),
                handoffs,
            ),
            Kind::Fair => handoff(&redis_a.fair_lock(&name), &b.fair_lock(&name), handoffs),
            Kind::Semaphore => handoff(&one_permit(redis_a, &name), &b.semaphore(&name), handoffs),
            Kind::Latch => latch_open(
                &redis_a.count_down_latch(&name),
                &b.count_down_latch(&name),
                handoffs,
            ),
        };
        handoff_stats.push((label, stats(&times)));
    }

    // Contended.
    let name = unique_name("bench:own:contended:one");
    let one_client: Vec<Lock> = (0..8).map(|_| redis_a.lock(&name)).collect();
    let name = unique_name("bench:own:contended:two");
    let two_clients: Vec<Lock> = (0..8)
        .map(|i| {
            if i % 2 == 0 {
                redis_a.lock(&name)
            } else {
                redis_b.lock(&name)
            }
        })
        .collect();
    let name = unique_name("bench:own:contended:memory");
    let memory_locks: Vec<Lock> = (0..8).map(|_| memory.lock(&name)).collect();
    let mut contended = Vec::new();
    for (label, locks) in [
        ("contended/redis/8threads", &one_client),
        ("contended/redis/2clients_x_4threads", &two_clients),
        ("contended/memory/8threads", &memory_locks),
    ] {
        let r = contended_for(locks, contended_time);
        eprintln!(
            "{label}: {:.0} acq/s, per-thread min/max = {:.2} (counts {:?}); \
             same thread re-took it {:.0}% of the time; {:.2} acquisitions per floor-pair time",
            r.per_sec,
            r.min_max,
            r.counts,
            r.same_thread_share * 100.0,
            r.per_sec * pair.median.as_secs_f64()
        );
        if r.slow > 0 {
            eprintln!(
                "{label}: WARNING: {} lock() calls waited > {STALL:?} (longest {:?}): missed wake-ups",
                r.slow, r.longest
            );
        }
        if r.drain > DRAIN_WARN {
            eprintln!(
                "{label}: WARNING: threads took {:?} to finish after the deadline \
                 (a waiter slept out a TTL instead of being woken)",
                r.drain
            );
        }
        contended.push((label, r));
    }

    let crit = |id: &str| {
        if !ran_criterion {
            return String::new();
        }
        match criterion_median(id) {
            Some(m) => format!("  [criterion median {:.1} µs]", us(m)),
            None => String::new(),
        }
    };
    let line = |label: &str, s: Stats, extra: String| {
        eprintln!(
            "  {label:<48} median {:>7.1} µs  (p10 {:>6.1}, p90 {:>7.1}){extra}{}",
            us(s.median),
            us(s.p10),
            us(s.p90),
            crit(label)
        );
    };
    eprintln!(
        "\n==== redisync bench summary: own timing, medians; redis-server and bench pinned to CPU 0: {} ====",
        if pinned { "yes" } else { "NO" }
    );
    line(names[0], ping, String::new());
    line(
        names[1],
        pair,
        format!("  = {:.2} × ping", ratio(pair.median, ping.median)),
    );
    for (i, st) in [(2, redis_wd), (3, redis_lease)] {
        line(
            names[i],
            st,
            format!(
                "  = {:.2} × floor pair (target ≤ 1.15)",
                ratio(st.median, pair.median)
            ),
        );
    }
    for (i, st) in [(4, mem_wd), (5, mem_lease)] {
        line(
            names[i],
            st,
            format!("  = {:.3} × floor pair", ratio(st.median, pair.median)),
        );
    }
    // The fair and read-write pairs, against the same floor and against the
    // reentrant lock's pair on the same backend.
    for (i, reentrant) in [
        (6, redis_wd),
        (7, redis_wd),
        (8, redis_wd),
        (12, redis_wd),
        (13, redis_wd),
    ] {
        line(
            names[i],
            s[i],
            format!(
                "  = {:.2} × floor pair, {:.2} × lock_unlock",
                ratio(s[i].median, pair.median),
                ratio(s[i].median, reentrant.median)
            ),
        );
    }
    for (i, reentrant) in [
        (9, mem_wd),
        (10, mem_wd),
        (11, mem_wd),
        (14, mem_wd),
        (15, mem_wd),
    ] {
        line(
            names[i],
            s[i],
            format!(
                "  = {:.3} × floor pair, {:.2} × lock_unlock",
                ratio(s[i].median, pair.median),
                ratio(s[i].median, reentrant.median)
            ),
        );
    }
    eprintln!(
        "  watchdog pair vs lease pair: redis {:+.1} µs ({:.2}×), memory {:+.1} µs ({:.2}×; p90 {:.1} vs {:.1} µs)",
        us(redis_wd.median) - us(redis_lease.median),
        ratio(redis_wd.median, redis_lease.median),
        us(mem_wd.median) - us(mem_lease.median),
        ratio(mem_wd.median, mem_lease.median),
        us(mem_wd.p90),
        us(mem_lease.p90)
    );
    // RedLock and MultiLock: against the floors and the single lock's pair
    // of the same kind (watchdog or lease), whole and per part.
    eprintln!(
        "  RedLock / MultiLock (parts taken one after another; \"single\" = the \
         uncontended/redis pair of the same kind above):"
    );
    for (i, parts, single) in [
        (16, 3, redis_wd),
        (17, 3, redis_lease),
        (18, MASTERS, redis_wd),
        (19, MASTERS, redis_lease),
        (20, MULTI_PARTS, redis_wd),
        (21, MULTI_PARTS, redis_wd),
    ] {
        let vs_single = ratio(s[i].median, single.median);
        line(
            names[i],
            s[i],
            format!(
                "  = {:.2} × floor pair, {:.1} × ping, {vs_single:.2} × single = {:.2} × single per part (N = {parts})",
                ratio(s[i].median, pair.median),
                ratio(s[i].median, ping.median),
                vs_single / parts as f64
            ),
        );
    }
    eprintln!(
        "  RedLock3 / MultiLock3 on three servers (same parts; the RedLock's drift check): {:.2}×; \
         MultiLock3 three servers / one server: {:.2}×; watchdog / lease pair: RedLock3 {:.2}×, RedLock5 {:.2}×",
        ratio(s[16].median, s[21].median),
        ratio(s[21].median, s[20].median),
        ratio(s[16].median, s[17].median),
        ratio(s[18].median, s[19].median)
    );
    // Replica acknowledgement: the same pair on a master with one replica,
    // without and with a WAIT after each script.
    eprintln!(
        "  Replica acknowledgement (a master with one replica; \"with\" = \
         ReplicaAcknowledgement::new(1, {ACK_TIMEOUT:?}): WAIT after each script):"
    );
    for i in [22, 23] {
        line(
            names[i],
            s[i],
            format!(
                "  = {:.2} × floor pair, {:.1} × ping, {:.2} × uncontended/redis/lock_unlock",
                ratio(s[i].median, pair.median),
                ratio(s[i].median, ping.median),
                ratio(s[i].median, redis_wd.median)
            ),
        );
    }
    eprintln!(
        "  WAIT overhead: with / without = {:.2}× ({:+.1} µs per pair, {:+.1} µs per WAIT); \
         with / floor pair = {:.2}×",
        ratio(s[23].median, s[22].median),
        us(s[23].median) - us(s[22].median),
        (us(s[23].median) - us(s[22].median)) / 2.0,
        ratio(s[23].median, pair.median)
    );
    // Redis Cluster: the same pair on a 3-master cluster with one replica
    // per master (the slot's master), against the cluster's floor and the
    // standalone pairs (the bench server's, which has no replica, and
    // `replica_ack/without`, a master with one replica as each cluster
    // master has); and with replica acknowledgement, against the cluster
    // pair (the WAIT overhead) and `replica_ack/with`.
    #[cfg(feature = "cluster")]
    {
        let at = |n: &str| names.iter().position(|x| *x == n).unwrap();
        let (floor_i, pair_i, ack_i) = (
            at("cluster/evalsha_pair"),
            at("cluster/lock_unlock"),
            at("cluster/lock_unlock_ack"),
        );
        let (cl_floor, cl_pair, cl_ack) = (s[floor_i], s[pair_i], s[ack_i]);
        eprintln!(
            "  Redis Cluster (3 masters + 3 replicas, pinned; all on one lock name, so on its \
             slot's master; \"_ack\" = ReplicaAcknowledgement::new(1, {ACK_TIMEOUT:?})):"
        );
        line(
            names[floor_i],
            cl_floor,
            format!(
                "  = {:.2} × standalone floor pair",
                ratio(cl_floor.median, pair.median)
            ),
        );
        line(
            names[pair_i],
            cl_pair,
            format!(
                "  = {:.2} × cluster floor pair, {:.2} × standalone lock_unlock, {:.2} × standalone floor pair, \
                 {:.2} × replica_ack/without",
                ratio(cl_pair.median, cl_floor.median),
                ratio(cl_pair.median, redis_wd.median),
                ratio(cl_pair.median, pair.median),
                ratio(cl_pair.median, s[22].median)
            ),
        );
        line(
            names[ack_i],
            cl_ack,
            format!(
                "  = {:.2} × cluster lock_unlock, {:.2} × cluster floor pair, {:.2} × standalone replica_ack/with",
                ratio(cl_ack.median, cl_pair.median),
                ratio(cl_ack.median, cl_floor.median),
                ratio(cl_ack.median, s[23].median)
            ),
        );
        eprintln!(
            "  cluster WAIT overhead: lock_unlock_ack / lock_unlock = {:.2}× ({:+.1} µs per pair, \
             {:+.1} µs per WAIT); standalone: {:.2}× ({:+.1} µs per pair)",
            ratio(cl_ack.median, cl_pair.median),
            us(cl_ack.median) - us(cl_pair.median),
            (us(cl_ack.median) - us(cl_pair.median)) / 2.0,
            ratio(s[23].median, s[22].median),
            us(s[23].median) - us(s[22].median)
        );
    }
    for (label, st) in &handoff_stats {
        let stalls = if st.stalls > 0 {
            format!(
                "; {} STALLS > {STALL:?} of {handoffs} (max {:?}): lost wake-ups",
                st.stalls, st.max
            )
        } else {
            String::new()
        };
        // The ≤ 4 × PING target is the reentrant lock's; a fair, semaphore
        // or latch handoff is also shown against the reentrant one with the
        // same clients.
        let rest = label.strip_prefix("handoff/redis/").unwrap_or(label);
        let rest = rest.split(' ').next().unwrap_or(rest);
        let other = ["fair_", "semaphore_", "latch_open_"]
            .iter()
            .find_map(|p| rest.strip_prefix(p));
        let extra = match other {
            Some(clients) => {
                let reentrant = handoff_stats
                    .iter()
                    .find(|(l, _)| l.strip_prefix("handoff/redis/") == Some(clients))
                    .map_or(String::new(), |(_, r)| {
                        format!(", {:.2} × reentrant {clients}", ratio(st.median, r.median))
                    });
                format!(
                    "  = {:.2} × ping, {:.2} × floor pair{reentrant}{stalls}",
                    ratio(st.median, ping.median),
                    ratio(st.median, pair.median)
                )
            }
            None => format!(
                "  = {:.2} × ping (target ≤ 4){stalls}",
                ratio(st.median, ping.median)
            ),
        };
        line(label, *st, extra);
    }
    for (label, r) in &contended {
        eprintln!(
            "  {label:<48} {:>7.0} acq/s, per-thread min/max = {:.2} (target ≥ 0.5), same-thread re-take {:.0}%, longest lock() {:.1} ms{}",
            r.per_sec,
            r.min_max,
            r.same_thread_share * 100.0,
            r.longest.as_secs_f64() * 1e3,
            if r.slow > 0 {
                format!("; {} STALLS > {STALL:?}", r.slow)
            } else {
                String::new()
            }
        );
    }
}
