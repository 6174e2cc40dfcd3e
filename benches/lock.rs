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
mod support;

use std::hint::black_box;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::{TestServer, unique_name};
use criterion::{Criterion, SamplingMode};
use redisync::ReplicaAcknowledgement;
use redisync::{
    Client, CountDownLatch, Lock, MemoryBackend, MultiLock, PermitExpirableSemaphore, RedLock,
    Semaphore, SemaphorePermit,
};
use support::env::Env;
#[allow(unused_imports)]
use support::{floor::*, pinning::*, summary::*, work::*};

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

    let env = Env::start();
    let mut c = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    support::groups::floor_group(&mut c, &env);
    support::groups::uncontended_group(&mut c, &env);
    support::groups::multi_group(&mut c, &env);
    support::groups::replica_ack_group(&mut c, &env);
    #[cfg(feature = "cluster")]
    support::groups::cluster_group(&mut c, &env);
    support::groups::handoff_group(&mut c, &env);
    support::groups::contended_group(&mut c, &env);
    c.final_summary();

    if list_mode {
        return;
    }
    // Cases only some builds have, interleaved with the others.
    #[allow(unused_mut)]
    let mut extra_cases: Vec<ExtraCase> = Vec::new();
    // Redisson's own two scripts sent raw: the floor a user compares the
    // pair against (issue 33), printed last.
    let mut redisson_floor = RedissonFloor::new(&env.server);
    extra_cases.push((
        "floor/redisson_pair",
        Box::new(move || redisson_floor.pair()),
    ));
    // The same two scripts with only what exactly-once adds to them: what
    // the guarantees alone cost (issue 33).
    let mut guarded_floor = RedissonFloor::guarded(&env.server);
    extra_cases.push((
        "floor/redisson_guarded_pair",
        Box::new(move || guarded_floor.pair()),
    ));
    #[cfg(feature = "cluster")]
    {
        let name = unique_name("bench:own:cluster");
        let lock = env.cluster_client.lock(&name);
        let ack_lock = env.cluster_ack_client.lock(&name);
        let mut floor = cluster::cluster_floor(&env.bench_cluster, &name);
        extra_cases.push(("cluster/evalsha_pair", Box::new(move || floor.pair())));
        extra_cases.push(("cluster/lock_unlock", Box::new(move || lock_unlock(&lock))));
        extra_cases.push((
            "cluster/lock_unlock_ack",
            Box::new(move || lock_unlock(&ack_lock)),
        ));
    }
    own_measurements(
        &env.server,
        [&env.redis_client, &env.redis_client_b, &env.memory_client],
        &env.masters(),
        [&env.ack_without, &env.ack_with],
        extra_cases,
        test_mode,
        env.all_pinned,
        !test_mode,
    );
}
