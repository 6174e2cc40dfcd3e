//! Replica acknowledgement (`ClientBuilder::replica_acknowledgement`): every
//! lock-changing write is confirmed by replicas (Redis `WAIT`) before the
//! call reports it. A real master and a real replica, both started here; a
//! replica "falls behind" by being stopped with SIGSTOP (by PID), or lags
//! behind a loopback proxy that delays the master's stream (the failover
//! measurement at the end).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::{TestServer, start_replicated, unique_name};
use redisync::{Client, EventHandler, NopEventHandler, ReplicaShortfallEvent};
use redisync::{ReplicaAcknowledgement, ReplicaShortfall};

/// Each write waits at most this long for its replica (generous: a loaded
/// CI machine may take a while to schedule the replica's acknowledgement).
const ACK_TIMEOUT: Duration = Duration::from_millis(500);
/// A failed acquisition takes three attempts of [`ACK_TIMEOUT`] each.
const FAILS_WITHIN: Duration = Duration::from_secs(6);

/// A master and one replica of it, ready (see `common::start_replicated`).
struct Pair {
    master: TestServer,
    replica: TestServer,
}

impl Pair {
    fn start() -> Pair {
        let (master, replica) = start_replicated();
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

/// A lock handle of one flavor, by name.
type LockOf = fn(&Client, &str) -> redisync::Lock;

/// The replica-acknowledgement rollback of every lock flavor whose attempts
/// are recorded (fair, read, write, fenced): each unacknowledged attempt
/// undoes exactly its own hold and forgets its record, so the resends are
/// rollbacks too (not refused as late requests), and nothing is left held.
#[test]
fn a_lagging_replica_rolls_every_lock_flavor_back_exactly() {
    let pair = Pair::start();
    let client = pair.client(ReplicaShortfall::Fail);
    let mut master = pair.master.connection();
    let flavors: [(&str, LockOf); 4] = [
        ("fair", |c, n| c.fair_lock(n)),
        ("read", |c, n| c.read_write_lock(n).read_lock()),
        ("write", |c, n| c.read_write_lock(n).write_lock()),
        ("fenced", |c, n| c.fenced_lock(n)),
    ];
    for (flavor, lock) in flavors {
        let name = unique_name(&format!("replication:rollback-{flavor}"));
        pair.replica.pause();
        let err = lock(&client, &name).try_lock().map(drop).unwrap_err();
        pair.replica.resume();
        let text = err.to_string();
        assert!(
            text.contains("0 of 1 replicas") && text.contains("rolled back"),
            "{flavor}: {text}"
        );
        assert!(
            !exists(&mut master, &name),
            "{flavor}: the failed acquisition left a hold on the master"
        );
        let guard = lock(&client, &name).try_lock().unwrap();
        assert!(
            guard.is_some(),
            "{flavor}: not acquirable once the replica caught up"
        );
        drop(guard);
        assert!(
            !exists(&mut master, &name),
            "{flavor}: the release left a hold"
        );
    }
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

// ---------------------------------------------------------------------------
// What it buys: double holders after a failover forced right after an
// acquisition, with and without replica acknowledgement.
// ---------------------------------------------------------------------------

/// How late the master's replication stream reaches the replica during a
/// trial: far longer than the failover below takes (well under 1 ms here).
const LAG: Duration = Duration::from_millis(20);
/// Trials per mode.
const TRIALS: usize = 50;
/// Every trial (re-attach included) must finish within this.
const TRIAL_LIMIT: Duration = Duration::from_secs(5);

/// A loopback TCP proxy in front of one upstream address that delays the
/// upstream → client bytes by a settable lag (each chunk is timestamped
/// when read and written out when due, in order); client → upstream bytes
/// pass at once. Threads only; everything stops (sockets shut down,
/// threads joined) when it is dropped.
struct LagProxy {
    port: u16,
    lag_us: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    shared: Arc<ProxyShared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

#[derive(Default)]
struct ProxyShared {
    /// A clone of every socket, to shut them down on drop.
    sockets: Mutex<Vec<TcpStream>>,
    threads: Mutex<Vec<thread::JoinHandle<()>>>,
}

impl ProxyShared {
    fn spawn(&self, f: impl FnOnce() + Send + 'static) {
        let mut threads = self.threads.lock().unwrap();
        threads.retain(|t| !t.is_finished());
        threads.push(thread::spawn(f));
    }

    fn register(&self, stream: &TcpStream) {
        let mut sockets = self.sockets.lock().unwrap();
        sockets.push(stream.try_clone().unwrap());
    }
}

impl LagProxy {
    /// Listens on a free loopback port, forwarding to `127.0.0.1:upstream`.
    fn start(upstream: u16) -> LagProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let lag_us = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(ProxyShared::default());
        let acceptor = {
            let (lag_us, stop, shared) = (lag_us.clone(), stop.clone(), shared.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            Self::connect(client, upstream, &lag_us, &shared);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            thread::sleep(Duration::from_millis(2));
                        }
                        Err(e) => panic!("proxy accept: {e}"),
                    }
                }
            })
        };
        LagProxy {
            port,
            lag_us,
            stop,
            shared,
            acceptor: Some(acceptor),
        }
    }

    fn port(&self) -> u16 {
        self.port
    }

    /// The lag of the upstream → client bytes read from now on (bytes
    /// already queued keep their time, and order is kept).
    fn set_lag(&self, lag: Duration) {
        let micros = u64::try_from(lag.as_micros()).unwrap();
        self.lag_us.store(micros, Ordering::SeqCst);
    }

    fn connect(
        client: TcpStream,
        upstream: u16,
        lag_us: &Arc<AtomicU64>,
        shared: &Arc<ProxyShared>,
    ) {
        client.set_nonblocking(false).unwrap();
        let address = SocketAddr::from(([127, 0, 0, 1], upstream));
        let Ok(server) = TcpStream::connect_timeout(&address, Duration::from_secs(1)) else {
            return; // Dropping `client` closes it: the replica retries.
        };
        for stream in [&client, &server] {
            stream.set_nodelay(true).unwrap();
            shared.register(stream);
        }
        // Client → upstream: at once.
        let (mut from, mut to) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        shared.spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        });
        // Upstream → client: read and timestamp here...
        let (sender, receiver) = mpsc::channel::<(Instant, Vec<u8>)>();
        let mut from = server.try_clone().unwrap();
        let lag_us = lag_us.clone();
        shared.spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            let mut last_due = Instant::now();
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let lag = Duration::from_micros(lag_us.load(Ordering::SeqCst));
                        last_due = last_due.max(Instant::now() + lag);
                        if sender.send((last_due, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        // ... and write out when due. Ends when the reader does (closed
        // channel) or the client is gone; what is still queued is lost.
        let (mut to, upstream_side) = (client, server);
        shared.spawn(move || {
            while let Ok((due, chunk)) = receiver.recv() {
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    thread::sleep(wait);
                }
                if to.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Both);
            let _ = upstream_side.shutdown(Shutdown::Both);
        });
    }
}

impl Drop for LagProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for socket in self.shared.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
        let threads: Vec<_> = self.shared.threads.lock().unwrap().drain(..).collect();
        for thread in threads {
            let _ = thread.join();
        }
    }
}

fn info_replication(conn: &mut redis::Connection) -> String {
    redis::cmd("INFO").arg("replication").query(conn).unwrap()
}

/// Polls (every 2 ms) until both sides see the replica linked and online.
fn wait_linked(master: &mut redis::Connection, replica: &mut redis::Connection, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let replica_info = info_replication(replica);
        if replica_info.contains("master_link_status:up") {
            let master_info = info_replication(master);
            if master_info.contains("connected_slaves:1") && master_info.contains("state=online") {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the replica did not link within {limit:?}: replica:\n{replica_info}"
        );
        thread::sleep(Duration::from_millis(2));
    }
}

fn replicaof(conn: &mut redis::Connection, target: Option<u16>) {
    let mut cmd = redis::cmd("REPLICAOF");
    match target {
        Some(port) => cmd.arg("127.0.0.1").arg(port),
        None => cmd.arg("NO").arg("ONE"),
    };
    let _: () = cmd.query(conn).unwrap();
}

/// The outcome of the trials of one mode.
#[derive(Debug, Default)]
struct Trials {
    /// A's acquisition was reported successful.
    acquired: usize,
    /// ... and B took the same lock on the promoted replica.
    double_holders: usize,
    /// A's acquisition failed (a shortfall): nothing was reported held.
    failed: usize,
}

/// A master, a replica linked to it through a [`LagProxy`], and `TRIALS`
/// forced failovers: client A (on the master) takes a fresh lock name; as
/// soon as `try_lock()` returns, the replica is promoted (`REPLICAOF NO
/// ONE`, on a connection opened beforehand) and client B (on the replica,
/// now a master) `try_lock()`s the same name. A double holder is B taking
/// it while A's acquisition had been reported successful.
///
/// During the acquisition and the failover the proxy delays the master's
/// stream by [`LAG`]. Between trials the lag is switched off (queued bytes
/// keep their order and time), the replica is re-attached (`REPLICAOF
/// 127.0.0.1 <proxy port>`: a full resync, since the promotion gave it a new
/// replication id) and both sides are polled until linked; only then is A's
/// lock released, so its release (acknowledged in mode (b)) reaches the
/// replica. The master syncs through a disk RDB (`repl-diskless-sync no`):
/// with redis-server 7.0.15's default diskless sync, a replica re-attached
/// this fast now and then never got its command stream started (the
/// master's replica client kept its output buffer with no write handler,
/// though `INFO` said `state=online`), so every later `WAIT` timed out.
fn failover_trials(ack: Option<ReplicaAcknowledgement>) -> Trials {
    let master = TestServer::start_with(&["--repl-diskless-sync", "no"]);
    let proxy = LagProxy::start(master.port());
    let proxy_port = proxy.port().to_string();
    let replica = TestServer::start_with(&["--replicaof", "127.0.0.1", &proxy_port]);
    let mut master_conn = master.connection();
    let mut replica_conn = replica.connection();
    wait_linked(&mut master_conn, &mut replica_conn, Duration::from_secs(10));

    let mut builder = Client::builder()
        .redis_url(master.url())
        .event_handler(Arc::new(NopEventHandler));
    if let Some(ack) = ack {
        builder = builder.replica_acknowledgement(ack);
    }
    let a = builder.build().unwrap();
    let b = Client::builder()
        .redis_url(replica.url())
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .unwrap();

    let mut trials = Trials::default();
    for trial in 0..TRIALS {
        let started = Instant::now();
        let name = unique_name("replication:failover");
        proxy.set_lag(LAG);
        let held_by_a = match a.lock(name.as_str()).try_lock() {
            Ok(Some(guard)) => Some(guard),
            Ok(None) => panic!("trial {trial}: a fresh lock was held"),
            Err(err) => {
                assert!(
                    err.to_string().contains("rolled back"),
                    "trial {trial}: {err}"
                );
                None
            }
        };
        // The failover, right after the call returned.
        replicaof(&mut replica_conn, None);
        let held_by_b = b.lock(name.as_str()).try_lock().unwrap();
        match &held_by_a {
            Some(_) => trials.acquired += 1,
            None => trials.failed += 1,
        }
        if held_by_a.is_some() && held_by_b.is_some() {
            trials.double_holders += 1;
        }
        if let Some(guard) = held_by_b {
            guard.unlock().unwrap();
        }
        // Re-attach, without lag.
        proxy.set_lag(Duration::ZERO);
        replicaof(&mut replica_conn, Some(proxy.port()));
        wait_linked(&mut master_conn, &mut replica_conn, TRIAL_LIMIT);
        if let Some(guard) = held_by_a {
            guard.unlock().unwrap();
        }
        let took = started.elapsed();
        assert!(took < TRIAL_LIMIT, "trial {trial} took {took:?}");
    }
    drop((a, b));
    drop(proxy);
    trials
}

#[test]
fn acknowledgement_prevents_double_holders_after_a_failover() {
    let started = Instant::now();
    let without = failover_trials(None);
    let without_took = started.elapsed();
    let ack = ReplicaAcknowledgement::new(1, Duration::from_millis(500))
        .on_shortfall(ReplicaShortfall::Fail);
    let with = failover_trials(Some(ack));
    let with_took = started.elapsed() - without_took;
    eprintln!(
        "failover right after acquisition ({TRIALS} trials per mode, replication lag {LAG:?}):\n  \
         (a) no replica acknowledgement: {} of {} acquisitions had a second holder after the \
         failover ({} failed) [{without_took:.1?}]\n  \
         (b) ReplicaAcknowledgement::new(1, 500 ms), Fail: {} of {} acquisitions had a second \
         holder ({} failed) [{with_took:.1?}]",
        without.double_holders,
        without.acquired,
        without.failed,
        with.double_holders,
        with.acquired,
        with.failed,
    );
    assert_eq!(without.failed, 0, "{without:?}");
    assert!(
        without.double_holders > 0,
        "no double holder without acknowledgement: the failover was not fast enough \
         for the measurement to mean anything: {without:?}"
    );
    assert_eq!(with.double_holders, 0, "{with:?}");
    assert!(with.acquired > 0, "{with:?}");
}
