//! Issue 21 on a Redis Cluster (feature `cluster`): a script that reaches
//! its node after its caller gave up writes nothing (each node's window
//! in that node's clock), a failed acquire is undone exactly (attempt
//! records), a release that fails in flight lands exactly once (op records
//! and resends), and a recorded acquire during a slot migration succeeds
//! or fails cleanly within its bound.
//!
//! One cluster serves every case (run one after another, each on its own
//! names). Its node timeout is long, so freezing a master for a second
//! starts no failover.
#![cfg(feature = "cluster")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::cluster::TestCluster;
use common::late::{two_threads_on_a_frozen_server, warm};
use common::{unique_name, wait_until};

/// On a cluster of its own: `CLIENT KILL` of requests queued behind a busy
/// script needs a server that queues them (Redis does; Valkey 8.1 answers
/// each at once with BUSY, so CI's Valkey run skips this test by name).
#[test]
fn cluster_releases_and_count_downs_killed_in_flight_keep_the_count_exact() {
    let cluster = TestCluster::start_with_node_timeout(15_000);
    releases_and_count_downs_killed_in_flight_land_exactly_once(&cluster);
}

#[test]
fn cluster_late_suite() {
    let cluster = TestCluster::start_with_node_timeout(15_000);
    common::cluster_cases::run(
        "cluster_late",
        &cluster,
        &[
            (
                "a_late_script_writes_nothing_on_its_node",
                a_late_script_writes_nothing_on_its_node,
            ),
            (
                "a_timed_out_attempt_of_a_shared_owner_undoes_only_itself",
                a_timed_out_attempt_of_a_shared_owner_undoes_only_itself,
            ),
            (
                "a_recorded_acquire_waits_out_a_short_migration",
                a_recorded_acquire_waits_out_a_short_migration,
            ),
            (
                "a_recorded_acquire_fails_cleanly_during_a_long_migration",
                a_recorded_acquire_fails_cleanly_during_a_long_migration,
            ),
        ],
    );
}

/// A quiet client on every seed with `response_timeout`.
fn client_with(cluster: &TestCluster, response_timeout: Duration) -> redisync::Client {
    cluster
        .builder(cluster.urls())
        .pool_size(4)
        .response_timeout(response_timeout)
        .build()
        .unwrap()
}

/// The index of the master that owns `key`'s slot.
fn master_of(cluster: &TestCluster, key: &str) -> usize {
    cluster.index_of_port(cluster.owner_port(key))
}

/// A plain connection to node `index`.
fn node(cluster: &TestCluster, index: usize) -> redis::Connection {
    cluster.nodes[index].connection()
}

/// `EVALSHA`'s `calls` and `failed_calls` on node `index` (`INFO
/// commandstats`): a script that ran counts in the first, one that
/// replied with an error (a late one's refusal) in the second too.
fn evalsha_stats(cluster: &TestCluster, index: usize) -> (i64, i64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut node(cluster, index))
        .unwrap();
    let stats = info
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:"))
        .unwrap_or_default();
    let field = |name: &str| -> i64 {
        stats
            .split(',')
            .find_map(|field| field.strip_prefix(name))
            .map_or(0, |n| n.trim().parse().unwrap())
    };
    (field("calls="), field("failed_calls="))
}

/// Every key of `name`'s hash tag on its master (the primitive's own keys
/// and its records).
fn keys_of(cluster: &TestCluster, index: usize, name: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*{name}*"))
        .query(&mut node(cluster, index))
        .unwrap();
    keys.sort();
    keys
}

/// A script frozen in its master's socket buffer past its window: the
/// caller's call times out; the master, thawed a second later, runs it and
/// it refuses itself (the master counts a failed EVALSHA). Nothing is
/// written: no permit added, no op record. Each case writes on a master
/// of its own, so the window is read in each node's clock.
fn a_late_script_writes_nothing_on_its_node(cluster: &TestCluster) {
    const TIMEOUT: Duration = Duration::from_millis(200);
    // One connection: the one that read each master's clock (on its first
    // script there) carries the add.
    let client = cluster
        .builder(cluster.urls())
        .pool_size(1)
        .response_timeout(TIMEOUT)
        .build()
        .unwrap();
    for name in cluster.names_on_every_master("cl-late") {
        let semaphore = client.semaphore(name.as_str());
        assert!(semaphore.try_set_permits(4).unwrap());
        // The add's script is loaded on the master (a NOSCRIPT reply
        // would refuse the late copy for another reason).
        semaphore.add_permits(1).unwrap();
        let master = master_of(cluster, &name);
        let (calls_before, failed_before) = evalsha_stats(cluster, master);
        let keys_before = keys_of(cluster, master, &name);
        cluster.nodes[master].pause();
        let started = Instant::now();
        // An add is not sent again by the client: only this request can
        // reach the server.
        let outcome = semaphore.add_permits(3);
        let elapsed = started.elapsed();
        // Well past the window (the timeout and a 25 ms margin).
        thread::sleep(Duration::from_millis(1500).saturating_sub(started.elapsed()));
        cluster.nodes[master].resume();
        assert!(outcome.is_err(), "from a frozen master: {outcome:?}");
        // Its bound: the round trip, then the settle of its op record
        // (`ops::once::SETTLE_BUDGET` plus one response timeout), which
        // cannot reach the frozen master either: "outcome unknown".
        let bound =
            TIMEOUT * 2 + redisync::internal::once::SETTLE_BUDGET + Duration::from_millis(400);
        assert!(
            elapsed < bound,
            "the call outlived its bound {bound:?}: {elapsed:?}"
        );
        wait_until(
            "the late script reached the thawed master",
            Duration::from_secs(5),
            || evalsha_stats(cluster, master).0 > calls_before,
        );
        assert!(
            evalsha_stats(cluster, master).1 > failed_before,
            "the late script ran without an error"
        );
        assert_eq!(
            semaphore.available_permits().unwrap(),
            5,
            "the late add wrote on {name}"
        );
        assert_eq!(
            keys_of(cluster, master, &name),
            keys_before,
            "no op record of the late add"
        );
    }
}

/// Fault 1 of issue 21 on a cluster: two threads acquire for one
/// `LockOwner` while the slot's master is frozen. The timed-out
/// `try_lock_for`'s cleanup undoes that attempt only (its attempt record),
/// never the hold the other thread's `lock()` then took.
fn a_timed_out_attempt_of_a_shared_owner_undoes_only_itself(cluster: &TestCluster) {
    let client = client_with(cluster, Duration::from_secs(2));
    let observer = client_with(cluster, Duration::from_secs(2));
    let name = cluster.names_on_every_master("cl-owner").remove(0);
    let master = master_of(cluster, &name);
    let owner = redisync::LockOwner::new();
    let lock = client.lock(name.as_str()).owned_by(&owner);
    // Warm: scripts loaded, a few pooled connections open, each with the
    // master's clock read (names in the lock's slot).
    warm(&format!("{{{name}}}"), |name| {
        client.lock(name).lock().unwrap().unlock().unwrap()
    });
    let other_thread = two_threads_on_a_frozen_server(
        &cluster.nodes[master],
        &lock,
        Duration::from_millis(250),
        "master: ",
    );
    let guard = other_thread.join().unwrap().unwrap();
    // Long enough for every cleanup task and re-send to have run.
    thread::sleep(Duration::from_millis(1500));
    let holds = || common::hgetall(&mut node(cluster, master), &name);
    let stolen = observer.lock(name.as_str()).try_lock().unwrap();
    assert!(
        stolen.is_none(),
        "another client took the lock while the owner's guard lives (store: {:?})",
        holds()
    );
    assert!(!guard.is_lost());
    let counts = holds();
    assert_eq!(counts.len(), 1, "{counts:?}");
    assert_eq!(
        counts.values().next().map(String::as_str),
        Some("1"),
        "{counts:?}"
    );
    guard.unlock().unwrap();
    assert!(!lock.is_held().unwrap());
}

/// A slow script keeps a master busy (as tests/exact_counts.rs does on one
/// server).
const BUSY_SCRIPT: &str = r"
local t = redis.call('time')
local start = t[1] * 1000 + t[2] / 1000
repeat
    t = redis.call('time')
until t[1] * 1000 + t[2] / 1000 - start >= tonumber(ARGV[1])
return 1
";

/// Runs `calls` (each on its own thread) while master `index` is busy,
/// then kills every normal connection of that master behind them, so the
/// queued requests run and lose their replies. Returns how many
/// connections it killed.
fn kill_in_flight(
    cluster: &TestCluster,
    index: usize,
    calls: Vec<Box<dyn FnOnce() + Send>>,
) -> i64 {
    let mut conn = node(cluster, index);
    let busy = {
        let mut busy_conn = node(cluster, index);
        thread::spawn(move || {
            let _ = redis::Script::new(BUSY_SCRIPT)
                .arg(400)
                .invoke::<i64>(&mut busy_conn);
        })
    };
    thread::sleep(Duration::from_millis(100));
    let threads: Vec<_> = calls.into_iter().map(thread::spawn).collect();
    thread::sleep(Duration::from_millis(150));
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut conn)
        .unwrap();
    let _ = busy.join();
    for handle in threads {
        handle.join().unwrap();
    }
    killed
}

/// Releases and count-downs whose replies are lost (their requests ran,
/// then their connections were killed) are sent again and count once: the
/// semaphore settles at exactly what was set every round, and the latch
/// (on the same master) at exactly one count fewer per count-down.
fn releases_and_count_downs_killed_in_flight_land_exactly_once(cluster: &TestCluster) {
    const SET: i64 = 6;
    let client = cluster.client();
    let name = unique_name("cl-exact");
    let semaphore = client.semaphore(name.as_str());
    assert!(semaphore.try_set_permits(SET as u64).unwrap());
    let master = master_of(cluster, &name);
    // On the same master (a name with a hash tag would put the latch's
    // channel, Redisson's plain concatenation, in another slot).
    let latch_name = cluster
        .names_on_every_master("cl-exact-latch")
        .into_iter()
        .find(|latch| master_of(cluster, latch) == master)
        .expect("a latch name on every master");
    let latch = client.count_down_latch(latch_name.as_str());
    const COUNT: i64 = 12;
    assert!(latch.try_set_count(COUNT as u64).unwrap());
    let settles_at = |expected: i64, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let available = semaphore.available_permits().unwrap();
            if available == expected {
                // And stays there: no late copy counts again.
                thread::sleep(Duration::from_millis(500));
                let later = semaphore.available_permits().unwrap();
                assert_eq!(later, expected, "{what}: counted again later");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {available} permits, expected {expected}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    };
    for round in 0..3 {
        let permits: Vec<_> = (0..3).map(|_| semaphore.acquire(1).unwrap()).collect();
        let failed = Arc::new(Mutex::new(0));
        let mut calls: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
        for permit in permits {
            let failed = Arc::clone(&failed);
            calls.push(Box::new(move || {
                // An error: it goes on in the background.
                if permit.release().is_err() {
                    *failed.lock().unwrap() += 1;
                }
            }));
        }
        for _ in 0..3 {
            let latch = latch.clone();
            calls.push(Box::new(move || {
                // An error: it goes on in the background.
                let _ = latch.count_down();
            }));
        }
        let killed = kill_in_flight(cluster, master, calls);
        assert!(killed >= 1, "round {round}: the kill closed no connection");
        settles_at(
            SET,
            &format!(
                "round {round}: every permit back after the kill of {killed} connections \
                 ({} releases failed in line)",
                failed.lock().unwrap()
            ),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while latch.count().unwrap() != COUNT - 9 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_millis(500));
    assert_eq!(
        latch.count().unwrap(),
        COUNT - 9,
        "nine count-downs, each counted once"
    );
}

/// Moves every key of `slot` from `from` to `to` and gives the slot to `to`
/// on every master; waits until every node sees it there.
fn finish_migration(cluster: &TestCluster, slot: i64, from: usize, to: usize) {
    cluster.move_slot_keys(slot, from, to);
    cluster.give_slot(slot, to);
}

/// The hold counts of lock `name` on master `index` (through `ASKING`, so
/// an importing master answers too).
fn holds_on(cluster: &TestCluster, index: usize, name: &str) -> HashMap<String, String> {
    let mut conn = node(cluster, index);
    redis::cmd("ASKING").query::<()>(&mut conn).unwrap();
    common::hgetall(&mut conn, name)
}

/// A recorded acquire (the lock's hash and a new attempt record: two keys)
/// is refused with TRYAGAIN while its slot migrates, on both masters; the
/// routing retries it within the response timeout, so a migration shorter
/// than that only delays it: it lands on the new master, once.
fn a_recorded_acquire_waits_out_a_short_migration(cluster: &TestCluster) {
    const OPEN: Duration = Duration::from_millis(400);
    let client = client_with(cluster, Duration::from_secs(3));
    let name = cluster.names_on_every_master("cl-mig-short").remove(0);
    let slot = cluster.slot_of(&name);
    let from = master_of(cluster, &name);
    let to = (from + 1) % 3;
    let lock = client.lock(name.as_str());
    // Held once before: the hash is on the old master when the migration
    // starts (a mix of present and missing keys).
    let first = lock.try_lock().unwrap().expect("a free lock");
    cluster.begin_migration(slot, from, to);
    let (taken, elapsed) = thread::scope(|scope| {
        scope.spawn(|| {
            thread::sleep(OPEN);
            finish_migration(cluster, slot, from, to);
        });
        let started = Instant::now();
        let taken = lock.try_lock_for(Duration::from_secs(2));
        (taken, started.elapsed())
    });
    let second = taken
        .expect("a reentrant acquire lands once the migration ends")
        .expect("reentrant: held by this thread");
    assert!(
        elapsed >= OPEN / 2,
        "the acquire returned after {elapsed:?}, before the migration ended"
    );
    assert!(
        elapsed < Duration::from_secs(3),
        "past the wait and its bound: {elapsed:?}"
    );
    let counts = holds_on(cluster, to, &name);
    assert_eq!(counts.len(), 1, "{counts:?}");
    assert_eq!(
        counts.values().next().map(String::as_str),
        Some("2"),
        "two holds, counted once each: {counts:?}"
    );
    second.unlock().unwrap();
    first.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

/// A migration that outlasts the response timeout: the recorded acquire
/// fails within its bound with a transient error (the script never ran:
/// TRYAGAIN), takes nothing, and once the migration ends the lock is free
/// and taken at once.
fn a_recorded_acquire_fails_cleanly_during_a_long_migration(cluster: &TestCluster) {
    const TIMEOUT: Duration = Duration::from_millis(300);
    let client = client_with(cluster, TIMEOUT);
    let other = client_with(cluster, Duration::from_secs(3));
    let name = cluster.names_on_every_master("cl-mig-long").remove(0);
    let slot = cluster.slot_of(&name);
    let from = master_of(cluster, &name);
    let to = (from + 1) % 3;
    let lock = client.lock(name.as_str());
    // The lock is free: the old master lacks both keys (ASK), the
    // importing one lacks them too (TRYAGAIN for a multi-key script).
    cluster.begin_migration(slot, from, to);
    let started = Instant::now();
    let outcome = lock.try_lock_for(Duration::from_millis(200));
    let elapsed = started.elapsed();
    let err = match outcome {
        Err(err) => err,
        Ok(guard) => panic!("acquired mid-migration: {:?}", guard.is_some()),
    };
    assert!(
        err.is_connection_error(),
        "a transient error (retry later): {err}"
    );
    assert!(
        common::all_error_text(&err).contains("TRYAGAIN"),
        "says why: {}",
        common::all_error_text(&err)
    );
    // Its bound: the wait and the round trip's floor after it.
    assert!(
        elapsed < Duration::from_millis(200) + TIMEOUT + Duration::from_millis(400),
        "{elapsed:?}"
    );
    thread::sleep(Duration::from_millis(300));
    finish_migration(cluster, slot, from, to);
    // No hold (the old master lost the slot, and MOVEs every ask there).
    assert!(holds_on(cluster, to, &name).is_empty());
    let guard = other
        .lock(name.as_str())
        .try_lock()
        .unwrap()
        .expect("free once the migration ends");
    guard.unlock().unwrap();
    let taken = lock
        .try_lock_for(Duration::from_secs(1))
        .unwrap()
        .expect("and taken by the first client too");
    taken.unlock().unwrap();
}
