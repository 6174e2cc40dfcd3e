//! Many clients in one process: dropping a `Client` ends the threads it
//! started (pool workers, subscriber, watchdog) promptly, with Redis up and
//! with Redis down.
//!
//! Threads are counted from `/proc/self/task`, so this binary holds a single
//! `#[test]` that runs its cases one after the other: no other test of the
//! same binary creates threads while it counts.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use common::keys;
use common::timing::PROMPT;
use common::{TestServer, unique_name};
use redisync::Client;

/// How many clients each case creates and drops.
const CLIENTS: usize = 50;

/// Threads allowed above the baseline once every client is gone. Zero: no
/// client shares a thread with another (each pool has its own worker, which
/// ends with its pool; see `src/backend/redis/open.rs`), so nothing a client
/// started outlives it.
const SLACK: usize = 0;

/// This process's threads, by name (`/proc/self/task/<tid>/comm`).
fn threads() -> BTreeMap<String, usize> {
    let mut names = BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task").expect("read /proc/self/task") {
        let Ok(task) = task else { continue };
        // A thread that ended between the listing and the read still counted.
        let name = std::fs::read_to_string(task.path().join("comm"))
            .map(|name| name.trim().to_owned())
            .unwrap_or_else(|_| "<gone>".to_owned());
        *names.entry(name).or_default() += 1;
    }
    names
}

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("read /proc/self/task")
        .count()
}

/// Polls every 20 ms, up to `within`, until at most `limit` threads are
/// left; returns how long that took, or panics naming the threads left.
fn await_threads_at_most(limit: usize, within: Duration, case: &str) -> Duration {
    let start = Instant::now();
    loop {
        if thread_count() <= limit {
            return start.elapsed();
        }
        if start.elapsed() >= within {
            panic!(
                "{case}: {} threads {within:?} after every client was dropped, expected at most \
                 {limit}; by name: {:?}",
                thread_count(),
                threads()
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Polls (up to 10 s) until `channel` has `subscribers` subscribers.
fn await_subscribers(server: &TestServer, channel: &str, subscribers: i64) {
    let mut conn = server.connection();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query(&mut conn)
            .expect("PUBSUB NUMSUB");
        if counts.first().map(|(_, n)| *n) == Some(subscribers) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{channel}: {counts:?} subscribers after 10 s, expected {subscribers}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Creates `CLIENTS` clients on `server`, and with each: takes a lock with
/// the watchdog (`lock()`), makes another thread wait for it (so the
/// subscriber subscribes), releases it, lets the waiter take and release it.
/// Every pool, subscriber and watchdog thread has then started. Returns the
/// clients (all waiters joined, no guard left).
fn busy_clients(server: &TestServer) -> Vec<Client> {
    let clients: Vec<Client> = (0..CLIENTS)
        .map(|_| {
            Client::builder()
                .redis_url(server.url())
                .connection_timeout(Duration::from_secs(2))
                .response_timeout(Duration::from_secs(2))
                .build()
                .expect("connect")
        })
        .collect();
    let names: Vec<String> = (0..CLIENTS).map(|_| unique_name("threads")).collect();
    let guards: Vec<_> = clients
        .iter()
        .zip(&names)
        .map(|(client, name)| client.lock(name.as_str()).lock().expect("lock"))
        .collect();
    let waiters: Vec<_> = clients
        .iter()
        .zip(&names)
        .map(|(client, name)| {
            let lock = client.lock(name.as_str());
            thread::spawn(move || {
                let guard = lock
                    .try_lock_for(Duration::from_secs(20))
                    .expect("waiter")
                    .expect("the waiter got the lock within 20 s");
                guard.unlock().expect("waiter unlock");
            })
        })
        .collect();
    for name in &names {
        await_subscribers(server, &keys::lock_channel(name), 1);
    }
    for guard in guards {
        guard.unlock().expect("unlock");
    }
    for waiter in waiters {
        waiter.join().expect("waiter thread");
    }
    clients
}

#[test]
fn dropped_clients_end_their_threads() {
    // Case 1: Redis up.
    let mut server = TestServer::start();
    let baseline = thread_count();
    let clients = busy_clients(&server);
    let busy = thread_count();
    let start = Instant::now();
    drop(clients);
    let dropped = start.elapsed();
    let took = await_threads_at_most(baseline + SLACK, PROMPT, "Redis up");
    println!(
        "Redis up: {baseline} threads before, {busy} with {CLIENTS} clients, back to \
         {} {took:?} after the drop (the drop itself took {dropped:?})",
        thread_count()
    );

    // Case 2: Redis killed (by the PID this test started) before the drop,
    // and every client has noticed: one failed call each (its pool drops
    // the dead connection and keeps trying to open one) and the subscribers
    // are in their reconnect back-off. The failed call is a read: a failed
    // acquire would leave a release pending (case 3).
    let baseline = thread_count();
    let clients = busy_clients(&server);
    let busy = thread_count();
    let pid = server.pid();
    server.stop();
    assert!(
        !server.is_running(),
        "redis-server (pid {pid}) still running"
    );
    for client in &clients {
        let read = client.lock(unique_name("threads-down")).is_locked();
        assert!(read.is_err(), "is_locked with Redis down: {read:?}");
    }
    // Long enough for the subscribers' backoff to reach its cap (1 s).
    thread::sleep(Duration::from_millis(1500));
    let start = Instant::now();
    drop(clients);
    let dropped = start.elapsed();
    let took = await_threads_at_most(baseline + SLACK, PROMPT, "Redis down");
    println!(
        "Redis down: {baseline} threads before, {busy} with {CLIENTS} clients, back to \
         {} {took:?} after the drop (the drop itself took {dropped:?})",
        thread_count()
    );

    // Case 3: an acquire that failed with Redis down may have taken the
    // lock (the request may have left before the connection broke), so a
    // release of it stays pending in the client's cleanup thread, which
    // retries it after the client is dropped, by design, until it lands
    // or the attempt's lease would have run out: only then do that thread
    // and the pool it uses end. A short watchdog timeout (the lease of a
    // `try_lock`) bounds that here.
    let lease = Duration::from_secs(1);
    let mut server = TestServer::start();
    let baseline = thread_count();
    let clients: Vec<Client> = (0..5)
        .map(|_| {
            Client::builder()
                .redis_url(server.url())
                .connection_timeout(Duration::from_secs(2))
                .response_timeout(Duration::from_secs(2))
                .watchdog_timeout(lease)
                .build()
                .expect("connect")
        })
        .collect();
    server.stop();
    let start = Instant::now();
    for client in &clients {
        let attempt = client.lock(unique_name("threads-cleanup")).try_lock();
        assert!(attempt.is_err(), "try_lock with Redis down: {attempt:?}");
    }
    let attempts = start.elapsed();
    drop(clients);
    // Each release gives up at most `lease` after its attempt, so before
    // `lease` after the drop; then its thread and pool end within PROMPT.
    let took = await_threads_at_most(baseline + SLACK, lease + PROMPT, "release pending");
    println!(
        "Release pending: {baseline} threads before, back to {} {took:?} after the drop \
         (the failed attempts took {attempts:?})",
        thread_count()
    );
}
