//! Replica acknowledgement (`ClientBuilder::replica_acknowledgement`): every
//! lock-changing write is confirmed by replicas (Redis `WAIT`) before the
//! call reports it. A real master and a real replica, both started here; a
//! replica "falls behind" by being stopped with SIGSTOP (by PID).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::{TestServer, unique_name, wait_until};
use redisync::backend::{ReplicaAcknowledgement, ReplicaShortfall};
use redisync::{Client, EventHandler, NopEventHandler, ReplicaShortfallEvent};

/// Each write waits at most this long for its replica (generous: a loaded
/// CI machine may take a while to schedule the replica's acknowledgement).
const ACK_TIMEOUT: Duration = Duration::from_millis(500);
/// A failed acquisition takes three attempts of [`ACK_TIMEOUT`] each.
const FAILS_WITHIN: Duration = Duration::from_secs(6);

/// A master and one replica of it, linked.
struct Pair {
    master: TestServer,
    replica: TestServer,
}

impl Pair {
    fn start() -> Pair {
        let master = TestServer::start();
        let port = master.port().to_string();
        let replica = TestServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let mut conn = master.connection();
        wait_until(
            "the replica is linked to the master",
            Duration::from_secs(10),
            || {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut conn)
                    .unwrap();
                info.contains("connected_slaves:1") && info.contains("state=online")
            },
        );
        // Online is not yet acknowledging: wait until a write is confirmed.
        wait_until(
            "the replica acknowledges writes",
            Duration::from_secs(10),
            || {
                redis::cmd("SET")
                    .arg("replication:probe")
                    .arg("1")
                    .query::<()>(&mut conn)
                    .unwrap();
                redis::cmd("WAIT")
                    .arg(1)
                    .arg(1000)
                    .query::<i64>(&mut conn)
                    .unwrap()
                    == 1
            },
        );
        Pair { master, replica }
    }

    fn client(&self, shortfall: ReplicaShortfall) -> Client {
        client_on(&self.master, shortfall, Arc::new(NopEventHandler))
    }
}

fn client_on(
    server: &TestServer,
    shortfall: ReplicaShortfall,
    events: Arc<dyn EventHandler>,
) -> Client {
    Client::builder()
        .redis_url(server.url())
        .replica_acknowledgement(
            ReplicaAcknowledgement::new(1, ACK_TIMEOUT).on_shortfall(shortfall),
        )
        .event_handler(events)
        .build()
        .unwrap()
}

fn exists(conn: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(conn).unwrap() == 1
}

#[derive(Debug, Default)]
struct Shortfalls {
    count: AtomicU32,
    last_acknowledged: AtomicU32,
}

impl EventHandler for Shortfalls {
    fn on_replica_shortfall(&self, event: &ReplicaShortfallEvent) {
        assert_eq!(event.required(), 1);
        self.last_acknowledged
            .store(event.acknowledged(), Ordering::SeqCst);
        self.count.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn every_acquisition_and_release_is_on_the_replica_when_the_call_returns() {
    let pair = Pair::start();
    let client = pair.client(ReplicaShortfall::Fail);
    let mut replica = pair.replica.connection();
    for round in 0..30 {
        let name = unique_name("replication:on-replica");
        let lock = client.lock(name.as_str());
        let guard = lock.lock().unwrap();
        assert!(
            exists(&mut replica, &name),
            "round {round}: acquisition not on the replica"
        );
        guard.unlock().unwrap();
        assert!(
            !exists(&mut replica, &name),
            "round {round}: release not on the replica"
        );
    }
    // Semaphores and latches too.
    let name = unique_name("replication:semaphore");
    let semaphore = client.semaphore(name.as_str());
    assert!(semaphore.try_set_permits(2).unwrap());
    let permit = semaphore.acquire(1).unwrap();
    let value: i64 = redis::cmd("GET").arg(&name).query(&mut replica).unwrap();
    assert_eq!(value, 1, "the acquired permit is not on the replica");
    drop(permit);
    let latch_name = unique_name("replication:latch");
    let latch = client.count_down_latch(latch_name.as_str());
    assert!(latch.try_set_count(1).unwrap());
    assert!(exists(&mut replica, &latch_name));
    latch.count_down().unwrap();
    assert!(!exists(&mut replica, &latch_name));
}

#[test]
fn a_lagging_replica_fails_an_acquisition_and_leaves_nothing_held() {
    let pair = Pair::start();
    let client = pair.client(ReplicaShortfall::Fail);
    let name = unique_name("replication:lagging");
    let semaphore_name = unique_name("replication:lagging-semaphore");
    let semaphore = client.semaphore(semaphore_name.as_str());
    assert!(semaphore.try_set_permits(3).unwrap());
    let mut master = pair.master.connection();

    pair.replica.pause();
    let started = Instant::now();
    let err = client.lock(name.as_str()).try_lock().map(drop).unwrap_err();
    let took = started.elapsed();
    assert!(err.is_backend() && !err.is_connection_error(), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("0 of 1 replicas") && text.contains("rolled back"),
        "{text}"
    );
    assert!(
        took >= ACK_TIMEOUT * 3,
        "gave up after {took:?}: fewer than three attempts"
    );
    assert!(took < FAILS_WITHIN, "took {took:?}");
    assert!(
        !exists(&mut master, &name),
        "the failed acquisition left a hold on the master"
    );

    let err = semaphore.try_acquire(2).map(drop).unwrap_err();
    assert!(err.to_string().contains("rolled back"), "{err}");
    let value: i64 = redis::cmd("GET")
        .arg(&semaphore_name)
        .query(&mut master)
        .unwrap();
    assert_eq!(
        value, 3,
        "the failed semaphore acquisition kept its permits"
    );

    pair.replica.resume();
    let guard = client.lock(name.as_str()).try_lock().unwrap();
    assert!(
        guard.is_some(),
        "acquisitions work again once the replica catches up"
    );
}

#[test]
fn a_release_that_cannot_be_confirmed_says_so() {
    let pair = Pair::start();
    let client = pair.client(ReplicaShortfall::Fail);
    let name = unique_name("replication:release");
    let guard = client
        .lock(name.as_str())
        .lock_with_lease(Duration::from_secs(30))
        .unwrap();
    pair.replica.pause();
    let err = guard.unlock().unwrap_err();
    let text = err.to_string();
    assert!(err.is_backend(), "{err:?}");
    assert!(text.contains("applied on the master only"), "{text}");
    // It was applied: the lock is free on the master.
    assert!(!exists(&mut pair.master.connection(), &name));
    pair.replica.resume();
}

#[test]
fn keep_policy_keeps_the_acquisition_and_reports_it() {
    let pair = Pair::start();
    let events = Arc::new(Shortfalls::default());
    let client = client_on(&pair.master, ReplicaShortfall::Keep, events.clone());
    let name = unique_name("replication:keep");
    pair.replica.pause();
    let guard = client
        .lock(name.as_str())
        .try_lock()
        .unwrap()
        .expect("kept despite the shortfall");
    assert_eq!(events.count.load(Ordering::SeqCst), 1);
    assert_eq!(events.last_acknowledged.load(Ordering::SeqCst), 0);
    assert!(exists(&mut pair.master.connection(), &name));
    guard.unlock().unwrap();
    assert_eq!(
        events.count.load(Ordering::SeqCst),
        2,
        "the release is reported too"
    );
    pair.replica.resume();
}

#[test]
fn without_any_replica_an_acquisition_fails_clearly() {
    let server = TestServer::start();
    let client = client_on(&server, ReplicaShortfall::Fail, Arc::new(NopEventHandler));
    let name = unique_name("replication:standalone");
    let err = client.lock(name.as_str()).try_lock().map(drop).unwrap_err();
    assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
    assert!(!exists(&mut server.connection(), &name));
}

#[test]
fn bad_settings_are_invalid_arguments() {
    let server = TestServer::start();
    let build = |ack: ReplicaAcknowledgement| {
        Client::builder()
            .redis_url(server.url())
            .response_timeout(Duration::from_secs(1))
            .replica_acknowledgement(ack)
            .build()
            .map(drop)
            .unwrap_err()
    };
    let err = build(ReplicaAcknowledgement::new(0, ACK_TIMEOUT));
    assert!(
        err.is_invalid_argument() && err.to_string().contains("at least 1 replica"),
        "{err}"
    );
    let err = build(ReplicaAcknowledgement::new(1, Duration::ZERO));
    assert!(err.is_invalid_argument(), "{err}");
    let err = build(ReplicaAcknowledgement::new(1, Duration::from_secs(1)));
    assert!(
        err.is_invalid_argument()
            && err
                .to_string()
                .contains("shorter than the response timeout"),
        "{err}"
    );
    let err = Client::builder()
        .backend(redisync::MemoryBackend::new())
        .replica_acknowledgement(ReplicaAcknowledgement::new(1, ACK_TIMEOUT))
        .build()
        .map(drop)
        .unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("redis_url"),
        "{err}"
    );
}
