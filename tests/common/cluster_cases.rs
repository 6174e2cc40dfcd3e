//! Cluster cases shared by tests/cluster.rs (a plain cluster) and
//! tests/cluster_tls.rs (the same over TLS): each takes a running
//! [`TestCluster`], works on names of its own, and panics on a failure.
//! Clients come from the cluster's own builders, so the same case runs
//! over `redis://` or `rediss://`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::cluster::TestCluster;
use super::{TestServer, send_signal, unique_name, wait_until};

/// A named case of a suite.
pub type Case = (&'static str, fn(&TestCluster));

/// The cases every cluster suite runs, plain or TLS: each primitive
/// across nodes, with wake-ups through sharded pub/sub.
pub const EVERY_PRIMITIVE: &[Case] = &[
    ("lock_unlock_on_every_master", lock_unlock_on_every_master),
    ("waiter_woken_across_nodes", waiter_woken_across_nodes),
    (
        "fair_lock_hands_over_in_order",
        fair_lock_hands_over_in_order,
    ),
    ("read_write_lock", read_write_lock),
    ("semaphore_wakes_a_waiter", semaphore_wakes_a_waiter),
    ("latch_opens_for_every_waiter", latch_opens_for_every_waiter),
    ("fenced_tokens_grow", fenced_tokens_grow),
    ("contended_counter", contended_counter),
];

/// The case a suite runs last, as it stops a node for good.
pub const LAST: Case = ("the_only_seed_dies", survives_the_death_of_its_only_seed);

/// Runs the named cases one after another on one cluster, logging each
/// with its time under `label`.
pub fn run(label: &str, cluster: &TestCluster, cases: &[Case]) {
    for (name, case) in cases {
        let started = Instant::now();
        eprintln!("{label} case {name} ...");
        case(cluster);
        eprintln!("{label} case {name} ok ({:?})", started.elapsed());
    }
}

pub use super::timing::LONG_LEASE;
/// A wake-up through pub/sub arrives well within this; the leases are far
/// longer, so meeting it proves the message came.
pub const WAKE_WITHIN: Duration = Duration::from_secs(3);

pub fn lock_unlock_on_every_master(cluster: &TestCluster) {
    let client = cluster.client();
    for name in cluster.names_on_every_master("cl-lock") {
        let lock = client.lock(name.as_str());
        let guard = lock.lock().unwrap();
        assert!(lock.is_locked().unwrap());
        assert!(lock.is_held_by_current_thread().unwrap());
        // The hash sits at `name` on the master of its slot.
        let port = cluster.owner_port(&name);
        let mut conn = cluster.nodes[cluster.index_of_port(port)].connection();
        let exists: i64 = redis::cmd("EXISTS").arg(&name).query(&mut conn).unwrap();
        assert_eq!(exists, 1, "{name} on its slot's master");
        guard.unlock().unwrap();
        assert!(!lock.is_locked().unwrap());
    }
}

pub fn waiter_woken_across_nodes(cluster: &TestCluster) {
    // The holder and the waiter know different nodes; each name lives on a
    // different master, so the unlock's SPUBLISH runs on a node the waiter
    // has no command connection to.
    let holder = cluster.client_seeded(0);
    let waiter = cluster.client_seeded(2);
    for name in cluster.names_on_every_master("cl-wake") {
        let lock = holder.lock(name.as_str());
        let guard = lock.lock_with_lease(LONG_LEASE).unwrap();
        let waiting = waiter.lock(name.as_str());
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = thread::spawn(move || {
            let guard = waiting.lock_with_lease(LONG_LEASE).unwrap();
            tx.send(Instant::now()).unwrap();
            guard.unlock().unwrap();
        });
        thread::sleep(Duration::from_millis(300));
        assert!(rx.try_recv().is_err(), "the waiter must wait");
        let released = Instant::now();
        guard.unlock().unwrap();
        let acquired = rx
            .recv_timeout(WAKE_WITHIN)
            .expect("the waiter was not woken by the unlock");
        assert!(acquired.duration_since(released) < WAKE_WITHIN);
        handle.join().unwrap();
    }
}

pub fn fair_lock_hands_over_in_order(cluster: &TestCluster) {
    let holder = cluster.client_seeded(1);
    let name = unique_name("cl-fair");
    let lock = holder.fair_lock(name.as_str());
    let guard = lock.lock_with_lease(LONG_LEASE).unwrap();
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for i in 0..3 {
        let client = cluster.client_seeded(3 + i);
        let name = name.clone();
        let order = Arc::clone(&order);
        handles.push(thread::spawn(move || {
            let guard = client
                .fair_lock(name.as_str())
                .lock_with_lease(LONG_LEASE)
                .unwrap();
            order.lock().push(i);
            thread::sleep(Duration::from_millis(20));
            guard.unlock().unwrap();
        }));
        // Queue them in order.
        thread::sleep(Duration::from_millis(300));
    }
    let started = Instant::now();
    guard.unlock().unwrap();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(*order.lock(), vec![0, 1, 2]);
    assert!(
        started.elapsed() < WAKE_WITHIN * 3,
        "{:?}",
        started.elapsed()
    );
}

pub fn read_write_lock(cluster: &TestCluster) {
    let a = cluster.client_seeded(0);
    let b = cluster.client_seeded(4);
    let name = unique_name("cl-rw");
    let write = a.read_write_lock(name.as_str()).write_lock();
    let guard = write.lock_with_lease(LONG_LEASE).unwrap();
    let mut readers = Vec::new();
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..2 {
        let read = b.read_write_lock(name.as_str()).read_lock();
        let tx = tx.clone();
        readers.push(thread::spawn(move || {
            let guard = read.lock_with_lease(LONG_LEASE).unwrap();
            tx.send(()).unwrap();
            // Both readers hold at once.
            thread::sleep(Duration::from_millis(200));
            guard.unlock().unwrap();
        }));
    }
    thread::sleep(Duration::from_millis(300));
    assert!(rx.try_recv().is_err(), "readers wait for the writer");
    guard.unlock().unwrap();
    rx.recv_timeout(WAKE_WITHIN).expect("first reader woken");
    rx.recv_timeout(WAKE_WITHIN).expect("second reader woken");
    for reader in readers {
        reader.join().unwrap();
    }
    // A writer waits for readers' release in turn.
    let guard = write
        .try_lock_for(WAKE_WITHIN)
        .unwrap()
        .expect("write after reads");
    guard.unlock().unwrap();
}

pub fn semaphore_wakes_a_waiter(cluster: &TestCluster) {
    let a = cluster.client_seeded(2);
    let b = cluster.client_seeded(5);
    let name = unique_name("cl-sem");
    let sem = a.semaphore(name.as_str());
    assert!(sem.try_set_permits(1).unwrap());
    let permit = sem.acquire(1).unwrap();
    assert_eq!(sem.available_permits().unwrap(), 0);
    let other = b.semaphore(name.as_str());
    let handle = thread::spawn(move || {
        let started = Instant::now();
        let permit = other
            .try_acquire_for(1, LONG_LEASE)
            .unwrap()
            .expect("woken");
        let waited = started.elapsed();
        permit.release().unwrap();
        waited
    });
    thread::sleep(Duration::from_millis(300));
    permit.release().unwrap();
    let waited = handle.join().unwrap();
    assert!(
        waited < Duration::from_millis(300) + WAKE_WITHIN,
        "{waited:?}"
    );
    assert_eq!(sem.available_permits().unwrap(), 1);
}

pub fn latch_opens_for_every_waiter(cluster: &TestCluster) {
    let name = unique_name("cl-latch");
    let opener = cluster.client_seeded(0);
    let latch = opener.count_down_latch(name.as_str());
    assert!(latch.try_set_count(2).unwrap());
    let mut waiters = Vec::new();
    for seed in [1, 2, 3] {
        let latch = cluster.client_seeded(seed).count_down_latch(name.as_str());
        waiters.push(thread::spawn(move || latch.wait_for(LONG_LEASE).unwrap()));
    }
    thread::sleep(Duration::from_millis(300));
    latch.count_down().unwrap();
    assert_eq!(latch.count().unwrap(), 1);
    let started = Instant::now();
    latch.count_down().unwrap();
    for waiter in waiters {
        assert!(waiter.join().unwrap(), "latch opened");
    }
    assert!(started.elapsed() < WAKE_WITHIN, "{:?}", started.elapsed());
}

pub fn fenced_tokens_grow(cluster: &TestCluster) {
    let a = cluster.client_seeded(0);
    let b = cluster.client_seeded(3);
    let name = unique_name("cl-fenced");
    let first = a.fenced_lock(name.as_str()).lock().unwrap();
    let t1 = first.token().unwrap();
    first.unlock().unwrap();
    let second = b.fenced_lock(name.as_str()).lock().unwrap();
    let t2 = second.token().unwrap();
    second.unlock().unwrap();
    assert!(t2 > t1, "{t1} then {t2}");
}

/// Two clients on different seeds, four threads each, a non-atomic counter
/// on every master's lock: mutual exclusion holds and nothing is lost.
pub fn contended_counter(cluster: &TestCluster) {
    let names = cluster.names_on_every_master("cl-count");
    let clients = [cluster.client_seeded(0), cluster.client_seeded(5)];
    let counters: Vec<Arc<AtomicU64>> = names.iter().map(|_| Arc::default()).collect();
    let mut handles = Vec::new();
    for client in &clients {
        for t in 0..4 {
            let client = client.clone();
            let names = names.clone();
            let counters = counters.clone();
            handles.push(thread::spawn(move || {
                for i in 0..25 {
                    let k = (t + i) % names.len();
                    let guard = client.lock(names[k].as_str()).lock().unwrap();
                    let value = counters[k].load(Ordering::Relaxed);
                    thread::yield_now();
                    counters[k].store(value + 1, Ordering::Relaxed);
                    guard.unlock().unwrap();
                }
            }));
        }
    }
    for handle in handles {
        handle.join().unwrap();
    }
    let total: u64 = counters.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    assert_eq!(total, 2 * 4 * 25);
}

/// A client whose only seed dies keeps working: new pooled connections
/// and the pub/sub subscriber find the cluster through the nodes it saw.
pub fn survives_the_death_of_its_only_seed(cluster: &TestCluster) {
    // A replica, so that the cluster itself does not change.
    let seed = 4;
    let client = cluster
        .builder([cluster.url(seed)])
        .pool_size(4)
        .build()
        .unwrap();
    let names = cluster.names_on_every_master("cl-seed");
    for name in &names {
        client.lock(name.as_str()).lock().unwrap().unlock().unwrap();
    }
    // Killed by its own PID (the cluster's drop stops the rest).
    let mut nodes: Vec<&TestServer> = cluster.nodes.iter().collect();
    let seed_pid = nodes[seed].pid();
    send_signal(seed_pid, "KILL");
    wait_until("the seed is gone", Duration::from_secs(10), || {
        !nodes[seed].is_running()
    });
    nodes.remove(seed);
    // Every connection the client had is dropped: each pooled one and the
    // subscriber must be made again, and the seed refuses.
    for node in &nodes {
        for kind in ["normal", "pubsub"] {
            let _: redis::RedisResult<i64> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg(kind)
                .query(&mut node.connection());
        }
    }
    // Calls that meet a dropped connection fail and are retried; a bounded
    // number of them, and then every lock works.
    let deadline = Instant::now() + Duration::from_secs(20);
    for name in &names {
        loop {
            match client.lock(name.as_str()).lock_with_lease(LONG_LEASE) {
                Ok(guard) => {
                    guard.unlock().unwrap();
                    break;
                }
                Err(err) => {
                    assert!(err.is_backend(), "{err:?}");
                    assert!(
                        Instant::now() < deadline,
                        "no connection to the cluster after its only seed died: {err}"
                    );
                    thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
    // Concurrent calls need more pooled connections than were left. An
    // idle pooled connection that was dropped fails its next call (a
    // script is never sent twice), so a few connection errors are retried.
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let client = client.clone();
            let name = names[i % names.len()].clone();
            thread::spawn(move || {
                let mut errors = 0;
                let mut rounds = 0;
                while rounds < 20 {
                    match client.lock(name.as_str()).lock() {
                        Ok(guard) => {
                            guard.unlock().unwrap();
                            rounds += 1;
                        }
                        Err(err) => {
                            assert!(err.is_connection_error(), "{err:?}");
                            errors += 1;
                            assert!(errors <= 8, "too many failed calls: {err}");
                        }
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    // The subscriber, reconnected through the discovered nodes, wakes a
    // waiter.
    let other = cluster.client_seeded(0);
    let name = &names[0];
    let guard = other
        .lock(name.as_str())
        .lock_with_lease(LONG_LEASE)
        .unwrap();
    let waiter = {
        let name = name.clone();
        thread::spawn(move || {
            let guard = client
                .lock(name.as_str())
                .try_lock_for(LONG_LEASE)
                .unwrap()
                .expect("woken before the lease ends");
            let woken = Instant::now();
            guard.unlock().unwrap();
            woken
        })
    };
    // The waiter's subscriber reached the channel's master (it found the
    // slot map through the discovered nodes: the seed refuses).
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let owner = cluster.index_of_port(cluster.owner_port(name));
    wait_until("the waiter subscribed", Duration::from_secs(10), || {
        let reply: (String, i64) = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(&channel)
            .query(&mut cluster.nodes[owner].connection())
            .unwrap();
        reply.1 >= 1
    });
    let released = Instant::now();
    guard.unlock().unwrap();
    let woken = waiter.join().unwrap();
    assert!(
        woken.duration_since(released) < WAKE_WITHIN,
        "woken {:?} after the unlock",
        woken.duration_since(released)
    );
}
