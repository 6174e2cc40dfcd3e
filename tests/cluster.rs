//! Redis Cluster (feature `cluster`): every primitive on a 3-master,
//! 3-replica cluster of private `redis-server --cluster-enabled yes`
//! processes, wake-ups across nodes (sharded pub/sub), a slot migration
//! under a client's feet, and a forced failover during a contended run.
//!
//! Starting a cluster takes seconds, so one cluster serves every case of
//! [`cluster_suite`] (run one after another, each on its own names); the
//! failover test, which changes the topology, has its own. The servers are
//! stopped by PID when their `TestCluster` drops.
#![cfg(feature = "cluster")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::cluster::TestCluster;
use common::cluster_cases::{self as cases, LONG_LEASE, WAKE_WITHIN};
use common::keys;
use common::{all_error_text, unique_name, wait_until};

#[test]
fn cluster_suite() {
    let cluster = TestCluster::start();
    cases::run("cluster", &cluster, cases::EVERY_PRIMITIVE);
    cases::run(
        "cluster",
        &cluster,
        &[
            ("seed_not_owning_the_slot", seed_not_owning_the_slot),
            ("slot_migrates_under_a_waiter", slot_migrates_under_a_waiter),
            (
                "scripts_follow_ask_mid_migration",
                scripts_follow_ask_mid_migration,
            ),
            (
                "replica_acknowledgement_counts_the_slot_masters_replicas",
                replica_acknowledgement_counts_the_slot_masters_replicas,
            ),
            (
                "a_timed_out_script_is_not_sent_twice",
                a_timed_out_script_is_not_sent_twice,
            ),
            ("credentials_are_never_shown", credentials_are_never_shown),
            cases::LAST,
        ],
    );
}

fn seed_not_owning_the_slot(cluster: &TestCluster) {
    // Every client is seeded with one node only; each name lives on another
    // master than some of those seeds, so the first call follows MOVED.
    for seed in 0..6 {
        let client = cluster.client_seeded(seed);
        for name in cluster.names_on_every_master("cl-seed") {
            let lock = client.lock(name.as_str());
            let guard = lock.try_lock().unwrap().expect("free lock");
            guard.unlock().unwrap();
        }
    }
}

/// Moves `slot` (and its keys) from master `from` to master `to`, the way
/// `redis-cli --cluster reshard` does.
fn migrate_slot(cluster: &TestCluster, slot: i64, from: usize, to: usize) {
    cluster.begin_migration(slot, from, to);
    cluster.move_slot_keys(slot, from, to);
    cluster.give_slot(slot, to);
}

/// Mid-migration (the slot MIGRATING on its master and IMPORTING on
/// another, the lock's key already moved) the old master answers a script
/// whose keys it lacks with ASK, and the library sends `ASKING` and the
/// script to the importing master, as a user with exactly the documented
/// cluster rules (which is what `+asking` is for): the lock is found there
/// by the holder and by another client. A script with a key the slot lacks
/// on both sides (the unlock's latch; an acquire's attempt record) gets
/// TRYAGAIN, which Redis gives multi-key commands until a migration ends:
/// the unlock is retried until the slot is handed over, then lands.
fn scripts_follow_ask_mid_migration(cluster: &TestCluster) {
    const USER: &str = "cl-ask-user";
    const PASSWORD: &str = "cl-ask-pw";
    /// How long the migration stays open while the unlock waits.
    const OPEN: Duration = Duration::from_millis(400);
    let _: Vec<()> = cluster.on_every_node(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(readme_cluster_acl_rule(USER, PASSWORD)),
    );
    let url = |index: usize| {
        format!(
            "redis://{USER}:{PASSWORD}@127.0.0.1:{}",
            cluster.nodes[index].port()
        )
    };
    let client = redisync::Client::builder()
        .cluster([url(0), url(4)])
        .event_handler(Arc::new(redisync::NopEventHandler))
        .build()
        .unwrap();
    let other = cluster.client();
    let name = cluster.names_on_every_master("cl-ask").remove(0);
    let slot = cluster.slot_of(&name);
    let from = cluster.index_of_port(cluster.owner_port(&name));
    let to = (from + 1) % 3;
    let lock = client.lock(name.as_str());

    let taken = lock.try_lock().unwrap().expect("a free lock");
    cluster.begin_migration(slot, from, to);
    cluster.move_slot_keys(slot, from, to);
    // The lock is on the importing master, which answers after ASKING;
    // the migrating one lacks it, and so redirects.
    let on_to = || -> i64 {
        let mut conn = cluster.nodes[to].connection();
        redis::cmd("ASKING").query::<()>(&mut conn).unwrap();
        redis::cmd("EXISTS").arg(&name).query(&mut conn).unwrap()
    };
    assert_eq!(on_to(), 1, "the lock is on the importing master");
    let refused = redis::cmd("EXISTS")
        .arg(&name)
        .query::<i64>(&mut cluster.nodes[from].connection())
        .expect_err("the migrating master lacks the lock");
    assert_eq!(refused.code(), Some("ASK"), "{refused}");
    assert!(
        lock.is_held_by_current_thread().unwrap(),
        "read through ASK"
    );
    assert!(
        other.lock(name.as_str()).is_locked().unwrap(),
        "another client finds the lock through ASK"
    );

    let unlocked = thread::scope(|scope| {
        scope.spawn(|| {
            thread::sleep(OPEN);
            cluster.give_slot(slot, to);
        });
        let started = Instant::now();
        taken
            .unlock()
            .expect("the unlock lands once the migration ends");
        started.elapsed()
    });
    assert!(
        unlocked >= OPEN / 2,
        "the unlock returned after {unlocked:?}, before the migration ended"
    );
    assert_eq!(on_to(), 0, "released on the new owner");
    let again = other
        .lock(name.as_str())
        .try_lock()
        .unwrap()
        .expect("free after the unlock");
    again.unlock().unwrap();
    // `+asking` among the documented rules: no node refused the user anything.
    let refusals = acl_refusals(cluster, USER);
    assert!(refusals.is_empty(), "refused: {refusals:?}");
}

/// A lock's slot moves to another master while a waiter (of another
/// client) is parked on it: the holder's unlock follows MOVED, and the
/// waiter still gets the lock promptly (woken on the new owner, or by the
/// subscriber's resubscription after the old owner dropped its channel).
fn slot_migrates_under_a_waiter(cluster: &TestCluster) {
    let holder = cluster.client_seeded(0);
    let waiter = cluster.client_seeded(1);
    let name = cluster.names_on_every_master("cl-migrate").remove(0);
    let from = cluster.index_of_port(cluster.owner_port(&name));
    let to = (from + 1) % 3;
    let guard = holder
        .lock(name.as_str())
        .lock_with_lease(LONG_LEASE)
        .unwrap();
    let waiting = waiter.lock(name.as_str());
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = thread::spawn(move || {
        let guard = waiting.lock_with_lease(LONG_LEASE).unwrap();
        tx.send(()).unwrap();
        guard.unlock().unwrap();
    });
    thread::sleep(Duration::from_millis(300));
    migrate_slot(cluster, cluster.slot_of(&name), from, to);
    assert!(rx.try_recv().is_err(), "the waiter must still wait");
    assert_eq!(cluster.owner_port(&name), cluster.nodes[to].port());
    guard.unlock().unwrap();
    rx.recv_timeout(WAKE_WITHIN)
        .expect("the waiter was not woken after the migration");
    handle.join().unwrap();
    // And the lock works on its new master.
    let guard = holder
        .lock(name.as_str())
        .try_lock()
        .unwrap()
        .expect("free");
    guard.unlock().unwrap();
}

/// A replica takes over (`CLUSTER FAILOVER`) a master while two clients'
/// threads contend for locks on every master with non-atomic counters.
/// The run lasts until the failover is done and every thread has finished
/// rounds after it (calls that fail during the switch are retried): no
/// increment is lost, no two holders overlap and no unlock fails.
#[test]
fn failover_during_a_contended_run() {
    let cluster = TestCluster::start();
    let names = cluster.names_on_every_master("cl-failover");
    let clients = [cluster.client_seeded(0), cluster.client_seeded(4)];
    let counters: Vec<Arc<AtomicU64>> = names.iter().map(|_| Arc::default()).collect();
    let overlaps = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let failed_unlocks = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // Rounds finished, per thread.
    let rounds: Vec<Arc<AtomicU64>> = (0..2 * 3).map(|_| Arc::default()).collect();
    let mut handles = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..3 {
            let client = client.clone();
            let names = names.clone();
            let counters = counters.clone();
            let overlaps = Arc::clone(&overlaps);
            let errors = Arc::clone(&errors);
            let failed_unlocks = Arc::clone(&failed_unlocks);
            let stop = Arc::clone(&stop);
            let rounds = Arc::clone(&rounds[c * 3 + t]);
            handles.push(thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(90);
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let k = (t + i) % names.len();
                    i += 1;
                    let lock = client.lock(names[k].as_str());
                    let guard = loop {
                        assert!(Instant::now() < deadline, "a thread stopped progressing");
                        match lock.lock_with_lease(Duration::from_secs(10)) {
                            Ok(guard) => break guard,
                            Err(_) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                                thread::sleep(Duration::from_millis(50));
                            }
                        }
                    };
                    let value = counters[k].load(Ordering::Relaxed);
                    thread::sleep(Duration::from_millis(5));
                    if counters[k].load(Ordering::Relaxed) != value {
                        overlaps.fetch_add(1, Ordering::Relaxed);
                    }
                    counters[k].store(value + 1, Ordering::Relaxed);
                    // The library retries an unlock through the switch
                    // (idempotently); none may be lost.
                    if let Err(err) = guard.unlock() {
                        failed_unlocks.fetch_add(1, Ordering::Relaxed);
                        eprintln!("unlock failed: {err}");
                    }
                    rounds.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    // Let the run get going, then fail over the master of names[0].
    thread::sleep(Duration::from_millis(500));
    let master = cluster.index_of_port(cluster.owner_port(&names[0]));
    let replica = replica_of(&cluster, master);
    redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query::<()>(&mut cluster.nodes[replica].connection())
        .unwrap();
    wait_until("the replica took over", Duration::from_secs(20), || {
        cluster.try_owner_port_via(&names[0], 0) == Some(cluster.nodes[replica].port())
    });
    // Every thread keeps progressing after the switch.
    let at_failover: Vec<u64> = rounds.iter().map(|r| r.load(Ordering::Relaxed)).collect();
    wait_until(
        "every thread finished rounds after the failover",
        Duration::from_secs(30),
        || {
            rounds
                .iter()
                .zip(&at_failover)
                .all(|(r, &then)| r.load(Ordering::Relaxed) >= then + 20)
        },
    );
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.join().unwrap();
    }
    let total: u64 = counters.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    let finished: u64 = rounds.iter().map(|r| r.load(Ordering::Relaxed)).sum();
    eprintln!(
        "failover run: {total} increments in {finished} rounds, {} overlaps, {} retried errors",
        overlaps.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed)
    );
    assert_eq!(total, finished, "an increment was lost");
    assert_eq!(overlaps.load(Ordering::Relaxed), 0);
    assert_eq!(failed_unlocks.load(Ordering::Relaxed), 0);
}

/// The replica (among nodes 3-5) of master `master`.
fn replica_of(cluster: &TestCluster, master: usize) -> usize {
    let master_id = cluster.node_id(master);
    (3..6)
        .find(|&r| {
            let nodes: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query(&mut cluster.nodes[r].connection())
                .unwrap();
            nodes
                .lines()
                .any(|line| line.contains("myself") && line.contains(&master_id))
        })
        .expect("the master's replica")
}

/// What one thread of [`master_killed_during_a_contended_run`] saw.
#[derive(Default)]
struct KillStats {
    /// Rounds completed (lock, increment, unlock attempted).
    rounds: u64,
    /// Rounds completed after the promotion was observed.
    rounds_after_promotion: u64,
    /// Calls (lock or unlock) that failed with a `Backend` error and, for a
    /// lock, were retried by the thread.
    retried_errors: u64,
    /// Unlocks that failed, by when they started (relative to the window).
    failed_unlocks_in_window: u64,
    failed_unlocks_after_recovery: u64,
    /// When the thread first completed a round on the killed master's lock
    /// that it had started after the kill.
    first_dead_round_after_kill: Option<Instant>,
    /// Overlaps seen (another holder's increment during ours), with when.
    overlaps: Vec<Instant>,
}

/// A master is SIGKILLed (by PID) in the middle of a contended run: two
/// clients, three threads each, locks on every master (one of them the
/// killed master's) with non-atomic counters, and waiters parked on the
/// killed master's lock at the moment of the kill (the main thread holds
/// it). With `--cluster-node-timeout 1000` its replica is promoted within
/// seconds; after that every thread must keep progressing, the main
/// thread's unlock (of the lock taken before the kill, replicated to the
/// promoted replica) must succeed, and no unlock started after the
/// recovery may fail.
///
/// What the failover window (from the kill until the promotion plus
/// `GRACE`) allows, and what is counted rather than forbidden:
/// - lock calls fail with `Backend` errors (anything else fails the test);
///   the thread retries them after 20 ms;
/// - unlocks started in the window may fail (the master is dead; the
///   library's own retries give up before the promotion): the lock then
///   stays held until its lease (3 s here) expires on the promoted replica;
/// - a lock taken on the dead master and not yet replicated when it died
///   is lost (replication is asynchronous), so another client may take it
///   on the promoted replica while the first still believes it holds it:
///   such an overlap can only happen right at the kill, so overlaps are
///   counted by when they happen and only those outside the window fail
///   the test (in practice none: a critical section lasts 5 ms, the
///   promotion seconds).
///
/// The clients are seeded with replicas (nodes 3 and 5), which all
/// survive: a client whose only seed is the killed node cannot build a new
/// connection (the `redis` crate starts each cluster connection from its
/// seeds), which is a known limitation.
#[test]
fn master_killed_during_a_contended_run() {
    /// How long after the promotion the window stays open: the other
    /// masters and the clients learn the new topology.
    const GRACE: Duration = Duration::from_secs(2);
    /// Rounds each thread must complete after the promotion.
    const ROUNDS_AFTER: u64 = 20;
    /// Everything must be done this long after the kill.
    const BOUND: Duration = Duration::from_secs(60);
    let lease = Duration::from_secs(3);

    let mut cluster = TestCluster::start_with_node_timeout(1000);
    let names = cluster.names_on_every_master("cl-kill");
    let dead_name = names[0].clone();
    let master = cluster.index_of_port(cluster.owner_port(&dead_name));
    let replica = replica_of(&cluster, master);
    let clients = [cluster.client_seeded(3), cluster.client_seeded(5)];
    let counters: Vec<Arc<AtomicU64>> = names.iter().map(|_| Arc::default()).collect();
    // Set by the main thread, read by the workers.
    let killed_at: Arc<parking_lot::Mutex<Option<Instant>>> = Arc::default();
    let promoted_at: Arc<parking_lot::Mutex<Option<Instant>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for client in &clients {
        for t in 0..3 {
            let client = client.clone();
            let names = names.clone();
            let counters = counters.clone();
            let killed_at = Arc::clone(&killed_at);
            let promoted_at = Arc::clone(&promoted_at);
            let stop = Arc::clone(&stop);
            handles.push(thread::spawn(move || {
                let mut stats = KillStats::default();
                let in_window = |at: Instant| {
                    let killed = *killed_at.lock();
                    let promoted = *promoted_at.lock();
                    killed.is_some_and(|k| at >= k) && promoted.is_none_or(|p| at <= p + GRACE)
                };
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let k = (t + i) % names.len();
                    i += 1;
                    let lock = client.lock(names[k].as_str());
                    let started = Instant::now();
                    let guard = loop {
                        match lock.lock_with_lease(lease) {
                            Ok(guard) => break guard,
                            Err(err) => {
                                assert!(err.is_backend(), "lock failed with {err}");
                                stats.retried_errors += 1;
                                thread::sleep(Duration::from_millis(20));
                            }
                        }
                    };
                    let value = counters[k].load(Ordering::Relaxed);
                    thread::sleep(Duration::from_millis(5));
                    if counters[k].load(Ordering::Relaxed) != value {
                        stats.overlaps.push(Instant::now());
                    }
                    counters[k].store(value + 1, Ordering::Relaxed);
                    let unlocking = Instant::now();
                    if let Err(err) = guard.unlock() {
                        assert!(err.is_backend(), "unlock failed with {err}");
                        stats.retried_errors += 1;
                        if in_window(unlocking) {
                            stats.failed_unlocks_in_window += 1;
                        } else {
                            stats.failed_unlocks_after_recovery += 1;
                            eprintln!("unlock after the recovery failed: {err}");
                        }
                    }
                    stats.rounds += 1;
                    if promoted_at.lock().is_some_and(|p| started >= p) {
                        stats.rounds_after_promotion += 1;
                    }
                    if k == 0
                        && stats.first_dead_round_after_kill.is_none()
                        && killed_at.lock().is_some_and(|at| started >= at)
                    {
                        stats.first_dead_round_after_kill = Some(Instant::now());
                    }
                }
                stats
            }));
        }
    }
    // Let the run get going, then hold the doomed master's lock so that
    // waiters of both clients are parked on it when it dies.
    thread::sleep(Duration::from_millis(700));
    let parker = cluster.client_seeded(4);
    let parked = parker.lock(dead_name.as_str());
    let parked_guard = parked
        .lock_with_lease(Duration::from_secs(10))
        .expect("the main thread's lock before the kill");
    thread::sleep(Duration::from_millis(500));
    let rounds_before: u64 = counters.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    // SIGKILL, by the child's own handle (its PID), never by name.
    eprintln!(
        "killing master node {master} (pid {}, port {}), replica node {replica}",
        cluster.nodes[master].pid(),
        cluster.nodes[master].port()
    );
    let kill = Instant::now();
    cluster.nodes[master].stop();
    *killed_at.lock() = Some(kill);
    let dead_port = cluster.nodes[master].port();
    let promoted_port = cluster.nodes[replica].port();
    loop {
        assert!(kill.elapsed() < BOUND, "the replica was never promoted");
        if cluster.try_owner_port_via(&dead_name, replica) == Some(promoted_port) {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    let promotion = Instant::now();
    *promoted_at.lock() = Some(promotion);
    eprintln!(
        "promoted node {replica} (was replica of port {dead_port}) {:?} after the kill",
        promotion - kill
    );
    // The lock held across the kill was replicated before it (half a
    // second earlier): its unlock reaches the promoted replica (the
    // library retries it while the client's connections and slot map
    // catch up) and wakes the waiters parked on it.
    let unlocking = Instant::now();
    parked_guard
        .unlock()
        .expect("the unlock of the lock held across the kill, after the promotion");
    let main_unlock_took = unlocking.elapsed();
    // Every thread must keep progressing after the promotion: let them run
    // well past the window, then check each one's rounds (below).
    let recovered = promotion + GRACE + Duration::from_secs(4);
    assert!(recovered < kill + BOUND, "the promotion took too long");
    thread::sleep(recovered.saturating_duration_since(Instant::now()));
    stop.store(true, Ordering::Relaxed);
    let stats: Vec<KillStats> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let window_end = promotion + GRACE;
    let total: u64 = counters.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    let rounds: u64 = stats.iter().map(|s| s.rounds).sum();
    let retried: u64 = stats.iter().map(|s| s.retried_errors).sum();
    let overlaps: Vec<Instant> = stats.iter().flat_map(|s| s.overlaps.clone()).collect();
    let overlaps_in_window = overlaps
        .iter()
        .filter(|&&at| at >= kill && at <= window_end)
        .count();
    let failed_in_window: u64 = stats.iter().map(|s| s.failed_unlocks_in_window).sum();
    let failed_after: u64 = stats.iter().map(|s| s.failed_unlocks_after_recovery).sum();
    let all_progressing = stats
        .iter()
        .map(|s| s.first_dead_round_after_kill.map(|at| at - kill))
        .collect::<Option<Vec<Duration>>>()
        .map(|each| each.into_iter().max().unwrap_or_default());
    eprintln!(
        "master kill: promoted after {:?}; main unlock took {:?}; every thread \
         completed a round on the killed master's lock {:?} after the kill; \
         {rounds} rounds ({rounds_before} before the kill), {total} increments, \
         {retried} retried errors, {} overlaps ({overlaps_in_window} in the window), \
         {failed_in_window} failed unlocks in the window, {failed_after} after; \
         rounds after the promotion per thread: {:?}; checked at {:?} after the kill",
        promotion - kill,
        main_unlock_took,
        all_progressing,
        overlaps.len(),
        stats
            .iter()
            .map(|s| s.rounds_after_promotion)
            .collect::<Vec<_>>(),
        recovered - kill,
    );
    for (index, s) in stats.iter().enumerate() {
        assert!(
            s.rounds_after_promotion >= ROUNDS_AFTER,
            "thread {index} did only {} rounds after the promotion",
            s.rounds_after_promotion
        );
    }
    assert!(
        all_progressing.is_some(),
        "a thread never got the killed master's lock after the kill"
    );
    assert_eq!(
        overlaps.len(),
        overlaps_in_window,
        "overlaps outside the failover window"
    );
    assert_eq!(failed_after, 0, "unlocks after the recovery failed");
    // An increment is lost only to an (allowed, in-window) overlap.
    assert!(
        total + overlaps_in_window as u64 >= rounds && total <= rounds,
        "{total} increments for {rounds} rounds"
    );
}

/// Counts shortfalls reported under `ReplicaShortfall::Keep`.
#[derive(Default, Debug)]
struct Shortfalls(AtomicU64);

impl redisync::EventHandler for Shortfalls {
    fn on_replica_shortfall(&self, _: &redisync::ReplicaShortfallEvent) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// With replica acknowledgement, `WAIT` runs on the master that ran the
/// script: with one master's replica frozen, locks on that master fall
/// short (rolled back under `Fail`, kept and reported under `Keep`) while
/// locks on the other masters are acknowledged at once. (The `redis`
/// crate would send a plain `WAIT` to every master and keep the smallest
/// count, failing them all.)
fn replica_acknowledgement_counts_the_slot_masters_replicas(cluster: &TestCluster) {
    use redisync::{ReplicaAcknowledgement, ReplicaShortfall};
    // A WAIT that asked the frozen replica's master would take the whole
    // timeout; the bound below sits well under it and well over a loaded
    // machine's round trip.
    const ACK_TIMEOUT: Duration = Duration::from_millis(1000);
    let ack = ReplicaAcknowledgement::new(1, ACK_TIMEOUT);
    let strict = redisync::Client::builder()
        .cluster(cluster.urls())
        .replica_acknowledgement(ack)
        .event_handler(Arc::new(redisync::NopEventHandler))
        .build()
        .unwrap();
    let shortfalls = Arc::new(Shortfalls::default());
    let lenient = redisync::Client::builder()
        .cluster(cluster.urls())
        .replica_acknowledgement(ack.on_shortfall(ReplicaShortfall::Keep))
        .event_handler(Arc::clone(&shortfalls) as Arc<dyn redisync::EventHandler>)
        .build()
        .unwrap();
    let names = cluster.names_on_every_master("cl-ack");
    // Every master's replica is up: every lock is acknowledged, and is on
    // the replica the moment lock() returns.
    for name in &names {
        let guard = strict
            .lock(name.as_str())
            .lock_with_lease(LONG_LEASE)
            .unwrap();
        let master = cluster.index_of_port(cluster.owner_port(name));
        let mut replica = cluster.nodes[replica_of(cluster, master)].connection();
        redis::cmd("READONLY").query::<()>(&mut replica).unwrap();
        let exists: i64 = redis::cmd("EXISTS").arg(name).query(&mut replica).unwrap();
        assert_eq!(exists, 1, "{name} acknowledged but not on the replica");
        guard.unlock().unwrap();
    }
    assert_eq!(shortfalls.0.load(Ordering::Relaxed), 0);

    let frozen_name = &names[0];
    let master = cluster.index_of_port(cluster.owner_port(frozen_name));
    let replica = replica_of(cluster, master);
    cluster.nodes[replica].pause();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let err = strict
            .lock(frozen_name.as_str())
            .try_lock()
            .expect_err("a lock no replica confirmed must fail under Fail");
        assert!(err.is_backend(), "{err:?}");
        assert!(err.to_string().contains("replicas"), "{err}");
        let exists: i64 = redis::cmd("EXISTS")
            .arg(frozen_name)
            .query(&mut cluster.nodes[master].connection())
            .unwrap();
        assert_eq!(exists, 0, "a rolled-back acquisition left a hold");
        // The other masters' replicas answer: no shortfall there.
        for name in &names[1..] {
            let started = Instant::now();
            let guard = strict
                .lock(name.as_str())
                .lock_with_lease(LONG_LEASE)
                .unwrap();
            assert!(
                started.elapsed() < ACK_TIMEOUT * 7 / 10,
                "{name}: {:?}, as if WAIT had asked the frozen replica's master",
                started.elapsed()
            );
            guard.unlock().unwrap();
        }
        let kept = lenient
            .lock(frozen_name.as_str())
            .lock_with_lease(LONG_LEASE)
            .expect("Keep keeps the acquisition");
        assert!(shortfalls.0.load(Ordering::Relaxed) >= 1);
        kept
    }));
    cluster.nodes[replica].resume();
    let kept = outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    kept.unlock().unwrap();
    wait_until(
        "the replica is linked again",
        Duration::from_secs(30),
        || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut cluster.nodes[replica].connection())
                .unwrap();
            info.contains("master_link_status:up")
        },
    );
    let guard = strict
        .lock(frozen_name.as_str())
        .lock_with_lease(LONG_LEASE)
        .unwrap();
    guard.unlock().unwrap();
}

/// A script that times out is not sent again: the `redis` crate's cluster
/// connection would resend it on the same socket, and both copies would
/// run. With writes paused on the slot's master for longer than the
/// response timeout, a permit acquisition fails, and once the pause ends
/// at most one permit is gone.
fn a_timed_out_script_is_not_sent_twice(cluster: &TestCluster) {
    let client = redisync::Client::builder()
        .cluster(cluster.urls())
        .response_timeout(Duration::from_millis(200))
        .event_handler(Arc::new(redisync::NopEventHandler))
        .build()
        .unwrap();
    let name = unique_name("cl-once");
    let semaphore = client.semaphore(name.as_str());
    assert!(semaphore.try_set_permits(10).unwrap());
    let master = cluster.index_of_port(cluster.owner_port(&name));
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("WRITE")
        .query(&mut cluster.nodes[master].connection())
        .unwrap();
    let started = Instant::now();
    let outcome = semaphore.try_acquire(1);
    let elapsed = started.elapsed();
    wait_until("the pause ended", Duration::from_secs(5), || {
        started.elapsed() > Duration::from_millis(1200)
    });
    // 10 if the server dropped the command with its closed connection, 9
    // if it ran once; fewer means it ran again.
    let available = semaphore.available_permits().unwrap();
    assert!(
        available == 9 || available == 10,
        "{} permits taken by one acquisition",
        10 - available
    );
    assert!(
        outcome.is_err(),
        "no reply within the response timeout: {outcome:?}"
    );
    assert!(elapsed < Duration::from_millis(900), "{elapsed:?}");
}

/// docs/deployments.md's `ACL SETUSER` line (Security) for `user` with `password`, plus
/// the rules its Security section adds for a cluster.
fn readme_cluster_acl_rule(user: &str, password: &str) -> Vec<String> {
    let readme = include_str!("../docs/deployments.md");
    let security = readme
        .split("\n## ")
        .find(|section| section.starts_with("Security"))
        .expect("docs/deployments.md has a `## Security` section");
    let base = security
        .lines()
        .find_map(|line| line.trim().strip_prefix("ACL SETUSER "))
        .expect("docs/deployments.md's Security section shows an `ACL SETUSER` line");
    let marker = "On a Redis Cluster, also: `";
    let extra = &security[security
        .find(marker)
        .expect("docs/deployments.md names the cluster's rules")
        + marker.len()..];
    let extra = &extra[..extra.find('`').expect("a closing backtick")];
    let mut rule: Vec<String> = base.split_whitespace().map(str::to_owned).collect();
    rule[0] = user.to_owned();
    for arg in &mut rule {
        if arg.starts_with('>') {
            *arg = format!(">{password}");
        }
    }
    rule.extend(extra.split_whitespace().map(str::to_owned));
    rule
}

/// What any node's `ACL LOG` shows `user` was refused (the `redis` crate's
/// `CLIENT SETINFO` on connect, whose refusal it ignores, aside).
fn acl_refusals(cluster: &TestCluster, user: &str) -> Vec<String> {
    let logs: Vec<Vec<HashMap<String, redis::Value>>> =
        cluster.on_every_node(redis::cmd("ACL").arg("LOG"));
    logs.iter()
        .flatten()
        .filter(|entry| log_text(entry.get("username")) == user)
        .map(|entry| log_text(entry.get("object")))
        .filter(|object| !object.starts_with("client"))
        .collect()
}

/// A text field of an `ACL LOG` entry.
fn log_text(value: Option<&redis::Value>) -> String {
    match value {
        Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        Some(redis::Value::SimpleString(text)) => text.clone(),
        _ => String::new(),
    }
}

/// An ACL user's password in the seed URLs never shows in `Debug` output
/// or in an error (wrong password, unreachable seed), and the user, with
/// exactly the documented ACL rules for a cluster, runs locks and wake-ups on
/// every master (the routed connections and the sharded pub/sub sockets
/// both log in) without a refusal.
fn credentials_are_never_shown(cluster: &TestCluster) {
    const USER: &str = "cl-secret-user";
    const PASSWORD: &str = "cl-s3cret-pw";
    const WRONG: &str = "cl-wr0ng-pw";
    let _: Vec<()> = cluster.on_every_node(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(readme_cluster_acl_rule(USER, PASSWORD)),
    );
    let _: Vec<()> = cluster.on_every_node(redis::cmd("ACL").arg("LOG").arg("RESET"));
    let url = |index: usize, password: &str| {
        format!(
            "redis://{USER}:{password}@127.0.0.1:{}",
            cluster.nodes[index].port()
        )
    };
    let builder = redisync::Client::builder()
        .cluster([url(0, PASSWORD), url(4, PASSWORD)])
        .event_handler(Arc::new(redisync::NopEventHandler));
    let shown = format!("{builder:?} {builder:#?}");
    assert!(!shown.contains(PASSWORD), "builder: {shown}");
    let client = builder.build().unwrap();
    let shown = format!("{client:?} {client:#?}");
    assert!(!shown.contains(PASSWORD), "client: {shown}");
    let other = cluster.client();
    let names = cluster.names_on_every_master("cl-acl");
    for name in &names {
        let guard = other
            .lock(name.as_str())
            .lock_with_lease(LONG_LEASE)
            .unwrap();
        let waiter = {
            let lock = client.lock(name.as_str());
            thread::spawn(move || {
                lock.try_lock_for(LONG_LEASE)
                    .unwrap()
                    .expect("woken")
                    .unlock()
                    .unwrap();
                Instant::now()
            })
        };
        thread::sleep(Duration::from_millis(200));
        let released = Instant::now();
        guard.unlock().unwrap();
        let woken = waiter.join().unwrap();
        assert!(woken.duration_since(released) < WAKE_WITHIN, "{name}");
    }

    // Once the waiters are gone (and the subscriber's linger is over), it
    // leaves every channel: SUNSUBSCRIBE is among the user's rules too.
    wait_until(
        "the subscriber left every channel",
        Duration::from_secs(10),
        || {
            names.iter().all(|name| {
                let channel = keys::lock_channel(name);
                let owner = cluster.index_of_port(cluster.owner_port(name));
                let reply: (String, i64) = redis::cmd("PUBSUB")
                    .arg("SHARDNUMSUB")
                    .arg(&channel)
                    .query(&mut cluster.nodes[owner].connection())
                    .unwrap();
                reply.1 == 0
            })
        },
    );
    // The documented rules were enough: no node refused the user anything.
    let refusals = acl_refusals(cluster, USER);
    assert!(refusals.is_empty(), "refused: {refusals:?}");

    let err = redisync::Client::builder()
        .cluster([url(1, WRONG)])
        .event_handler(Arc::new(redisync::NopEventHandler))
        .build()
        .unwrap_err();
    let text = all_error_text(&err);
    assert!(err.is_backend(), "{err:?}");
    assert!(!text.contains(WRONG), "wrong password shown: {text}");
    assert!(
        err.to_string().contains("authentication failed"),
        "not a clear error: {err}"
    );

    let free = common::free_port();
    let err = redisync::Client::builder()
        .cluster([format!("redis://{USER}:{PASSWORD}@127.0.0.1:{free}")])
        .connection_timeout(Duration::from_secs(1))
        .event_handler(Arc::new(redisync::NopEventHandler))
        .build()
        .unwrap_err();
    let text = all_error_text(&err);
    assert!(err.is_connection_error(), "{err:?}");
    assert!(!text.contains(PASSWORD), "password shown: {text}");
    let _: Vec<()> = cluster.on_every_node(redis::cmd("ACL").arg("DELUSER").arg(USER));
}
