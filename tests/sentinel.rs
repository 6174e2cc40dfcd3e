//! Redis Sentinel (feature `sentinel`): a master, one replica and three
//! sentinels, all private processes on free loopback ports, stopped by PID.
//!
//! The failover tests run a contended workload (2 clients x 4 threads, a
//! non-atomic counter guarded by one lock) while the master fails over,
//! forced with `SENTINEL FAILOVER` or by freezing the master (SIGSTOP). They
//! assert that every thread keeps completing iterations after the switch
//! (no waiter stranded), that later calls and the subscriber's pub/sub
//! connection go to the new master, and that the clients keep working.
//!
//! Errors during the failover window are expected (connections to the old
//! master drop, time out, or meet READONLY): the workload retries them, and
//! only `Backend` errors are allowed. Mutual exclusion is not asserted
//! inside the window: Redis replication is asynchronous, and until a client
//! notices the switch it may still take the lock on the old master (as with
//! Redisson), and a lock taken there just before the switch may be lost
//! (its `unlock()` then fails with `NotHeld`, also allowed only inside the
//! window). Exclusion is asserted before the failover and from a second
//! after every thread has recovered on.
//!
//! With the `tls` feature, `mod tls` runs the same group with TLS on every
//! data path ([`Transport::Tls`]): clients given only `rediss://` URLs to
//! the sentinels' TLS ports, sentinels and replication on TLS.
#![cfg(feature = "sentinel")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::keys;
use common::{TestServer, free_port, numsub, unique_name, wait_until};
use redisync::{Client, ClientBuilder, NopEventHandler};
use redisync::{ReplicaAcknowledgement, ReplicaShortfall};

const MASTER_NAME: &str = "mymaster";
/// Generous bounds: this machine has 2 slow vCPUs.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// The test clients' response timeout.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

/// A `redis-server --sentinel` child process, killed by its own handle.
struct Sentinel {
    child: Option<Child>,
    /// The plain port: the tests' admin connections.
    port: u16,
    /// With [`Transport::Tls`], the TLS port: the clients' connections.
    tls_port: Option<u16>,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How the sentinels, the nodes and the clients talk to each other.
#[derive(Clone, Copy)]
enum Transport {
    Plain,
    /// TLS on every data path: clients to sentinels and master, sentinels
    /// to each other and to the nodes, replication. Every process keeps a
    /// plain port for the harness and the tests' admin connections only;
    /// the clients are given TLS ports. With `mutual`, every TLS port
    /// requires a client certificate.
    #[cfg(feature = "tls")]
    Tls {
        mutual: bool,
    },
}

/// Master + replica + 3 sentinels.
struct Cluster {
    // Sentinels first: dropped before the servers they watch.
    sentinels: Vec<Sentinel>,
    /// `master.port()` and `replica.port()` are the plain (admin) ports.
    master: TestServer,
    replica: TestServer,
    /// The ports the sentinels monitor and report, and the clients use:
    /// the plain ones, or the TLS ones with [`Transport::Tls`].
    master_data_port: u16,
    replica_data_port: u16,
    dir: PathBuf,
    /// The certificates, with [`Transport::Tls`] (removed after the
    /// servers stop), and whether client certificates are required.
    #[cfg(feature = "tls")]
    tls: Option<(common::tls::Pki, bool)>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.sentinels.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn server_binary() -> PathBuf {
    if let Some(path) = std::env::var_os(common::SERVER_BIN_ENV) {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .chain(["/usr/bin/redis-server", "/usr/local/bin/redis-server"].map(PathBuf::from))
        .find(|p| p.is_file())
        .expect("redis-server not found (TestServer would have installed or found it)")
}

fn connect(port: u16) -> redis::RedisResult<redis::Connection> {
    let conn = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?
        .get_connection_with_timeout(Duration::from_secs(1))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    conn.set_write_timeout(Some(Duration::from_secs(2)))?;
    Ok(conn)
}

fn info_field(port: u16, section: &str, field: &str) -> Option<String> {
    let mut conn = connect(port).ok()?;
    let info: String = redis::cmd("INFO").arg(section).query(&mut conn).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_owned())
}

/// `ROLE` of the server on `port`: "master", "slave" or "sentinel".
fn role(port: u16) -> Option<String> {
    let mut conn = connect(port).ok()?;
    let reply: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn).ok()?;
    match reply.first() {
        Some(redis::Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into()),
        _ => None,
    }
}

fn sentinel_master(port: u16) -> Option<std::collections::HashMap<String, String>> {
    let mut conn = connect(port).ok()?;
    redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg(MASTER_NAME)
        .query(&mut conn)
        .ok()
}

/// Starts a sentinel monitoring the master at `master_port`; with
/// `tls_conf` (sentinel.conf lines: certificates and `tls-replication yes`),
/// also on a TLS port, and talking TLS to the nodes and other sentinels.
fn start_sentinel(bin: &Path, dir: &Path, master_port: u16, tls_conf: Option<&str>) -> Sentinel {
    for _ in 0..5 {
        let port = free_port();
        let tls_port = tls_conf.map(|_| free_port());
        let tls = match (tls_port, tls_conf) {
            (Some(tls_port), Some(conf)) => format!("tls-port {tls_port}\n{conf}"),
            _ => String::new(),
        };
        let conf = dir.join(format!("sentinel-{port}.conf"));
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel-{port}.log\n{tls}\
                 sentinel announce-ip 127.0.0.1\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                 sentinel failover-timeout {MASTER_NAME} 5000\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                dir = dir.display()
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut sentinel = Sentinel {
            child: Some(child),
            port,
            tls_port,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if role(port).as_deref() == Some("sentinel") {
                return sentinel;
            }
            if let Some(child) = sentinel.child.as_mut()
                && matches!(child.try_wait(), Ok(Some(_)))
            {
                break; // port taken: try another
            }
            assert!(Instant::now() < deadline, "sentinel on {port} not ready");
            thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("could not start a sentinel");
}

impl Cluster {
    fn start() -> Cluster {
        Cluster::start_with(Transport::Plain)
    }

    fn start_with(transport: Transport) -> Cluster {
        let (master, master_data_port, replica, replica_data_port);
        let sentinel_tls: Option<String>;
        #[cfg(feature = "tls")]
        let mut tls = None;
        match transport {
            Transport::Plain => {
                master = TestServer::start();
                master_data_port = master.port();
                replica = TestServer::start_with(&[
                    "--replicaof",
                    "127.0.0.1",
                    &master.port().to_string(),
                ]);
                replica_data_port = replica.port();
                sentinel_tls = None;
            }
            #[cfg(feature = "tls")]
            Transport::Tls { mutual } => {
                use common::tls::TlsServer;
                let pki = common::tls::pki();
                let tls_master = TlsServer::start(&pki, mutual, &["--tls-replication", "yes"]);
                let tls_replica = TlsServer::start(
                    &pki,
                    mutual,
                    &[
                        "--tls-replication",
                        "yes",
                        "--replicaof",
                        "127.0.0.1",
                        &tls_master.tls_port.to_string(),
                    ],
                );
                // The same directives as the servers', as sentinel.conf lines.
                let mut conf = String::from("tls-replication yes\n");
                for pair in pki.server_args(mutual).chunks(2) {
                    conf.push_str(&format!(
                        "{} {}\n",
                        pair[0].trim_start_matches("--"),
                        pair[1]
                    ));
                }
                sentinel_tls = Some(conf);
                (master, master_data_port) = (tls_master.server, tls_master.tls_port);
                (replica, replica_data_port) = (tls_replica.server, tls_replica.tls_port);
                tls = Some((pki, mutual));
            }
        }
        wait_until("the replica synced", SETUP_TIMEOUT, || {
            info_field(replica.port(), "replication", "master_link_status").as_deref() == Some("up")
        });
        let dir = std::env::temp_dir().join(unique_name("redisync-sentinel").replace(':', "-"));
        std::fs::create_dir_all(&dir).unwrap();
        let bin = server_binary();
        let sentinels = (0..3)
            .map(|_| start_sentinel(&bin, &dir, master_data_port, sentinel_tls.as_deref()))
            .collect();
        let cluster = Cluster {
            sentinels,
            master,
            replica,
            master_data_port,
            replica_data_port,
            dir,
            #[cfg(feature = "tls")]
            tls,
        };
        // Ready for a failover: every sentinel knows the replica and the
        // other two sentinels.
        for s in &cluster.sentinels {
            wait_until(
                "the sentinels see each other and the replica",
                SETUP_TIMEOUT,
                || {
                    sentinel_master(s.port).is_some_and(|m| {
                        m.get("num-other-sentinels").map(String::as_str) == Some("2")
                            && m.get("num-slaves").map(String::as_str) == Some("1")
                    })
                },
            );
        }
        cluster
    }

    /// The URLs the clients use: `rediss://` to the TLS ports with
    /// [`Transport::Tls`].
    fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| match s.tls_port {
                Some(tls_port) => format!("rediss://127.0.0.1:{tls_port}/"),
                None => format!("redis://127.0.0.1:{}/", s.port),
            })
            .collect()
    }

    /// `redis://` URLs to the sentinels' plain (admin) ports.
    #[cfg(feature = "tls")]
    fn plain_sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}/", s.port))
            .collect()
    }

    /// The master port the first sentinel that answers reports.
    fn reported_master(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            sentinel_master(s.port).and_then(|m| m.get("port").and_then(|p| p.parse().ok()))
        })
    }

    fn client(&self) -> Client {
        self.client_with(None)
    }

    /// The test clients' settings with `urls`, without certificates.
    fn bare_builder(&self, urls: Vec<String>) -> ClientBuilder {
        Client::builder()
            .sentinel(MASTER_NAME, urls)
            .connection_timeout(Duration::from_secs(1))
            .response_timeout(RESPONSE_TIMEOUT)
            .watchdog_timeout(Duration::from_secs(2))
            .event_handler(Arc::new(NopEventHandler))
    }

    /// The test clients' settings with `urls`, trusting the test CA and
    /// presenting the client certificate where one is required.
    fn builder(&self, urls: Vec<String>) -> ClientBuilder {
        let builder = self.bare_builder(urls);
        #[cfg(feature = "tls")]
        if let Some((pki, mutual)) = &self.tls {
            let builder = builder.tls_root_certificate(pki.ca.as_bytes());
            return if *mutual {
                builder
                    .tls_client_certificate(pki.client_cert.as_bytes(), pki.client_key.as_bytes())
            } else {
                builder
            };
        }
        builder
    }

    /// A client, with `ack` as its replica acknowledgement if given.
    fn client_with(&self, ack: Option<ReplicaAcknowledgement>) -> Client {
        let mut builder = self.builder(self.sentinel_urls());
        if let Some(ack) = ack {
            builder = builder.replica_acknowledgement(ack);
        }
        builder.build().unwrap()
    }

    fn force_failover(&self) {
        let mut conn = connect(self.sentinels[0].port).unwrap();
        redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER_NAME)
            .query::<()>(&mut conn)
            .unwrap();
    }

    /// Waits until every sentinel reports the replica as master and it
    /// says so itself.
    fn wait_for_switch(&self) {
        let new = self.replica_data_port;
        wait_until(
            "the sentinels switched to the replica",
            FAILOVER_TIMEOUT,
            || {
                self.sentinels.iter().all(|s| {
                    sentinel_master(s.port)
                        .and_then(|m| m.get("port").and_then(|p| p.parse::<u16>().ok()))
                        == Some(new)
                }) && role(self.replica.port()).as_deref() == Some("master")
            },
        );
    }
}

fn exists(port: u16, key: &str) -> bool {
    let mut conn = connect(port).unwrap();
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut conn)
        .unwrap()
        == 1
}

#[test]
fn every_primitive_works_through_sentinel() {
    let cluster = Cluster::start();
    assert_eq!(cluster.reported_master(), Some(cluster.master_data_port));
    let client = Client::open_sentinel(MASTER_NAME, cluster.sentinel_urls()).unwrap();
    let other = cluster.client();
    let master = cluster.master.port();

    let name = unique_name("sentinel:lock");
    let lock = client.lock(name.as_str());
    let guard = lock.lock().unwrap();
    assert!(exists(master, &name), "the lock key is on the master");
    assert!(other.lock(name.as_str()).try_lock().unwrap().is_none());
    guard.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());

    let fenced = client.fenced_lock(unique_name("sentinel:fenced"));
    let guard = fenced.lock().unwrap();
    assert!(guard.token().unwrap() >= 1);
    guard.unlock().unwrap();

    let fair = client.fair_lock(unique_name("sentinel:fair"));
    fair.lock().unwrap().unlock().unwrap();

    let rw = client.read_write_lock(unique_name("sentinel:rw"));
    let reading = rw.read_lock().lock().unwrap();
    let other_rw = other.read_write_lock(rw.name());
    assert!(other_rw.write_lock().try_lock().unwrap().is_none());
    reading.unlock().unwrap();
    rw.write_lock().lock().unwrap().unlock().unwrap();

    let semaphore = client.semaphore(unique_name("sentinel:sem"));
    assert!(semaphore.try_set_permits(2).unwrap());
    let permit = semaphore.acquire(2).unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 0);
    permit.release().unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 2);

    let expirable = client.permit_expirable_semaphore(unique_name("sentinel:pes"));
    assert!(expirable.try_set_permits(1).unwrap());
    let id = expirable.acquire_id(Duration::from_secs(10)).unwrap();
    expirable.release(&id).unwrap();

    let latch = client.count_down_latch(unique_name("sentinel:latch"));
    assert!(latch.try_set_count(1).unwrap());
    let waiter = {
        let latch = other.count_down_latch(latch.name());
        thread::spawn(move || latch.wait_for(Duration::from_secs(10)).unwrap())
    };
    thread::sleep(Duration::from_millis(100));
    latch.count_down().unwrap();
    assert!(waiter.join().unwrap(), "the latch waiter was woken");

    // A waiter on another client is woken by pub/sub, not by the lease.
    assert_handoff(&client, &other, master);
}

/// `holder` takes a lock with a 30 s lease, `waiter` waits for it on its
/// own thread; the unlock must wake it within 5 s (through the pub/sub
/// connection on the master at `master_port`, where its subscription must
/// be).
fn assert_handoff(holder: &Client, waiter: &Client, master_port: u16) {
    let name = unique_name("sentinel:handoff");
    let held = holder
        .lock(name.as_str())
        .lock_with_lease(Duration::from_secs(30))
        .unwrap();
    let lock = waiter.lock(name.as_str());
    let handle = thread::spawn(move || {
        let got = lock.try_lock_for(Duration::from_secs(25)).unwrap();
        let at = Instant::now();
        got.expect("the waiter timed out").unlock().unwrap();
        at
    });
    let channel = keys::lock_channel(&name);
    let mut conn = connect(master_port).unwrap();
    wait_until(
        "the waiter subscribed on the (new) master",
        Duration::from_secs(10),
        || numsub(&mut conn, &channel) == 1,
    );
    let released = Instant::now();
    held.unlock().unwrap();
    let woke = handle.join().unwrap();
    let latency = woke.duration_since(released);
    assert!(
        latency < Duration::from_secs(5),
        "handoff took {latency:?}: the unlock message did not wake the waiter"
    );
}

/// The shared state of the contended workload.
struct Workload {
    stop: AtomicBool,
    /// Non-atomic read-modify-write under the lock.
    counter: AtomicU64,
    /// Threads inside the critical section right now.
    inside: AtomicUsize,
    /// When two were inside at once (since the test started).
    overlaps: Mutex<Vec<Instant>>,
    /// Completed iterations per thread, and when the last one completed.
    done: Vec<AtomicU64>,
    last_done: Vec<Mutex<Option<Instant>>>,
    errors: Mutex<Vec<String>>,
    /// When an unlock found the lock gone (lost in the failover).
    lost: Mutex<Vec<Instant>>,
}

const CLIENTS: usize = 2;
const THREADS: usize = 4;

fn run_worker(work: &Workload, client: &Client, name: &str, index: usize) {
    let lock = client.lock(name);
    while !work.stop.load(Ordering::Relaxed) {
        let guard = match lock.lock() {
            Ok(guard) => guard,
            Err(err) => {
                assert!(err.is_backend(), "lock(): not a Backend error: {err:?}");
                work.errors.lock().unwrap().push(err.to_string());
                thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        if work.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            work.overlaps.lock().unwrap().push(Instant::now());
        }
        let value = work.counter.load(Ordering::SeqCst);
        thread::sleep(Duration::from_micros(200));
        work.counter.store(value + 1, Ordering::SeqCst);
        work.inside.fetch_sub(1, Ordering::SeqCst);
        match guard.unlock() {
            Ok(()) => {}
            // Taken on the old master just before the switch and not
            // replicated: the failover lost it, and unlock says so.
            Err(err) if err.is_not_held() => work.lost.lock().unwrap().push(Instant::now()),
            Err(err) => {
                assert!(err.is_backend(), "unlock(): not a Backend error: {err:?}");
                work.errors.lock().unwrap().push(err.to_string());
            }
        }
        work.done[index].fetch_add(1, Ordering::SeqCst);
        *work.last_done[index].lock().unwrap() = Some(Instant::now());
    }
}

enum Fault {
    SentinelFailover,
    FreezeMaster,
}

fn failover_during_contention(fault: Fault, transport: Transport) {
    let mut cluster = Cluster::start_with(transport);
    let old_master = cluster.master.port();
    let new_master = cluster.replica.port();
    let clients: Vec<Client> = (0..CLIENTS).map(|_| cluster.client()).collect();
    let name = unique_name("sentinel:contended");
    let work = Arc::new(Workload {
        stop: AtomicBool::new(false),
        counter: AtomicU64::new(0),
        inside: AtomicUsize::new(0),
        overlaps: Mutex::new(Vec::new()),
        done: (0..CLIENTS * THREADS).map(|_| AtomicU64::new(0)).collect(),
        last_done: (0..CLIENTS * THREADS).map(|_| Mutex::new(None)).collect(),
        errors: Mutex::new(Vec::new()),
        lost: Mutex::new(Vec::new()),
    });
    let handles: Vec<_> = (0..CLIENTS * THREADS)
        .map(|i| {
            let work = Arc::clone(&work);
            let client = clients[i / THREADS].clone();
            let name = name.clone();
            thread::spawn(move || run_worker(&work, &client, &name, i))
        })
        .collect();

    // Before the failover: everyone progresses, exclusively.
    wait_until(
        "every thread progressed before the failover",
        Duration::from_secs(20),
        || work.done.iter().all(|d| d.load(Ordering::SeqCst) >= 5),
    );
    assert!(
        work.overlaps.lock().unwrap().is_empty(),
        "overlap before failover"
    );

    let fault_at = Instant::now();
    match fault {
        Fault::SentinelFailover => cluster.force_failover(),
        Fault::FreezeMaster => cluster.master.pause(),
    }
    cluster.wait_for_switch();
    let switched_at = Instant::now();
    let before: Vec<u64> = work.done.iter().map(|d| d.load(Ordering::SeqCst)).collect();

    // No waiter stranded: every thread completes iterations after the switch.
    let mut first_progress = [None; CLIENTS * THREADS];
    let deadline = switched_at + Duration::from_secs(30);
    loop {
        let now = Instant::now();
        for (i, d) in work.done.iter().enumerate() {
            if first_progress[i].is_none() && d.load(Ordering::SeqCst) > before[i] {
                first_progress[i] = Some(now);
            }
        }
        let all = work
            .done
            .iter()
            .zip(&before)
            .all(|(d, b)| d.load(Ordering::SeqCst) >= b + 10);
        if all {
            break;
        }
        assert!(
            now < deadline,
            "threads stranded after the failover: done before {before:?}, now {:?}; errors: {:?}",
            work.done
                .iter()
                .map(|d| d.load(Ordering::SeqCst))
                .collect::<Vec<_>>(),
            work.errors
                .lock()
                .unwrap()
                .iter()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
        );
        thread::sleep(Duration::from_millis(10));
    }
    let recovered_at = Instant::now();
    // While the old master is still writable (until Sentinel demotes it,
    // seconds later) progress alone does not show that the clients left
    // it: each leaves when its watcher next asks the sentinels, about a
    // second after the switch, later on a loaded machine. A lock taken on
    // the old master until then may be lost, so the failover window ends
    // a second after a probe lock of every client lands on the new master.
    let probe = format!("{name}:probe");
    wait_until(
        "every client locks on the new master",
        FAILOVER_TIMEOUT,
        || {
            clients
                .iter()
                .all(|client| match client.lock(probe.as_str()).lock() {
                    Ok(guard) => {
                        let there = exists(new_master, &probe);
                        // Lost if taken on the old master: fine for a probe.
                        let _ = guard.unlock();
                        there
                    }
                    Err(_) => false,
                })
        },
    );
    let moved_at = Instant::now();
    let settled = recovered_at.max(moved_at) + Duration::from_secs(1);
    // A few more seconds of exclusive work on the new master.
    thread::sleep((settled + Duration::from_secs(1)).saturating_duration_since(Instant::now()));
    work.stop.store(true, Ordering::SeqCst);
    for handle in handles {
        handle.join().unwrap();
    }

    let slowest = first_progress
        .iter()
        .map(|t| t.expect("progress").duration_since(switched_at))
        .max()
        .unwrap();
    let errors = work.errors.lock().unwrap().len();
    let overlaps = work.overlaps.lock().unwrap().clone();
    let lost = work.lost.lock().unwrap().clone();
    eprintln!(
        "failover: fault -> sentinels switched {:?}; switch -> every thread progressed {:?}; \
         switch -> every thread +10 iterations {:?}; switch -> every client on the new \
         master {:?}; {errors} retried Backend errors; {} overlaps and {} lost locks inside \
         the failover window; {} iterations in all",
        switched_at.duration_since(fault_at),
        slowest,
        recovered_at.duration_since(switched_at),
        moved_at.duration_since(switched_at),
        overlaps.len(),
        lost.len(),
        work.counter.load(Ordering::SeqCst)
    );
    assert!(
        overlaps.iter().all(|t| *t < settled),
        "mutual exclusion broken after the failover settled"
    );
    assert!(
        lost.iter().all(|t| *t >= fault_at && *t < settled),
        "a lock was lost outside the failover window"
    );

    // Calls now go to the new master, and the clients keep working.
    assert_eq!(role(new_master).as_deref(), Some("master"));
    let guard = clients[0].lock(name.as_str()).lock().unwrap();
    assert!(
        exists(new_master, &name),
        "the lock key lives on the new master"
    );
    guard.unlock().unwrap();
    assert_handoff(&clients[0], &clients[1], new_master);
    assert_handoff(&clients[1], &clients[0], new_master);
    let fresh = cluster.client();
    fresh.lock(name.as_str()).lock().unwrap().unlock().unwrap();

    if let Fault::FreezeMaster = fault {
        // Thawed, the old master is demoted by the sentinels.
        cluster.master.resume();
        wait_until("the old master was demoted", FAILOVER_TIMEOUT, || {
            role(old_master).as_deref() == Some("slave")
        });
        assert_handoff(&clients[0], &clients[1], new_master);
        cluster.master.stop();
    }
}

#[test]
fn sentinel_failover_during_contention() {
    failover_during_contention(Fault::SentinelFailover, Transport::Plain);
}

#[test]
fn frozen_master_failover_during_contention() {
    failover_during_contention(Fault::FreezeMaster, Transport::Plain);
}

#[test]
fn clear_errors_without_a_reachable_sentinel_or_known_master() {
    // Nothing listens on these ports.
    let ports = [free_port(), free_port()];
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("redis://:topsecret@127.0.0.1:{p}/"))
        .collect();
    let started = Instant::now();
    let err = Client::builder()
        .sentinel(MASTER_NAME, &urls)
        .connection_timeout(Duration::from_secs(1))
        .build()
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    let message = err.to_string();
    assert!(err.is_connection_error(), "{err:?}");
    assert!(message.contains("no Sentinel reachable"), "{message}");
    assert!(
        message.contains(&format!("127.0.0.1:{}", ports[0])),
        "{message}"
    );
    assert!(!message.contains("topsecret") && !format!("{err:?}").contains("topsecret"));

    let cluster = Cluster::start();
    let err = Client::open_sentinel("no-such-master", cluster.sentinel_urls()).unwrap_err();
    let message = err.to_string();
    assert!(err.is_backend() && !err.is_connection_error(), "{err:?}");
    assert!(
        message.contains("no-such-master") && message.contains("none monitors"),
        "{message}"
    );

    let err = Client::open_sentinel(MASTER_NAME, Vec::<String>::new()).unwrap_err();
    assert!(err.is_invalid_argument(), "{err:?}");
    let err = Client::open_sentinel(MASTER_NAME, ["not a url"]).unwrap_err();
    assert!(err.is_invalid_argument(), "{err:?}");

    let config = redisync::SentinelConfig::new(MASTER_NAME, &urls).master_password("hunter2");
    let builder = Client::builder().sentinel_config(config.clone());
    for text in [format!("{config:?}"), format!("{builder:?}")] {
        assert!(
            !text.contains("hunter2") && !text.contains("topsecret"),
            "{text}"
        );
    }
}

// ---------------------------------------------------------------------------
// Double holders across a Sentinel failover, with and without replica
// acknowledgement.
//
// The fault is `SENTINEL FAILOVER`: the replica is promoted while the old
// master stays up and writable until Sentinel next looks at it and demotes
// it (about ten seconds later with redis 7.0). Each client's watcher notices
// the switch on its own one-second tick, so for up to a second some clients
// take locks on the new master while others still take them on the old one:
// the realistic split-brain window. (Freezing the master with SIGSTOP opens
// almost none: nothing is written to a frozen master, and by the time it is
// thawed every client has moved on.)
//
// Several clients (each its own watcher) and several lock names (a name
// that is free when the replica is promoted can be taken on both sides at
// once; a held one stays held on the new master until its lease runs out).
// ---------------------------------------------------------------------------

const SPLIT_CLIENTS: usize = 4;
const SPLIT_THREADS: usize = 2;
const SPLIT_LOCKS: usize = 16;
/// Each write waits at most this long for the replica: well under
/// [`RESPONSE_TIMEOUT`], so `WAIT` never trips the response timeout.
const SPLIT_ACK_TIMEOUT: Duration = Duration::from_millis(300);

/// The shared state of the split-brain measurement.
struct SplitWork {
    stop: AtomicBool,
    /// Per lock: threads inside its critical section right now.
    inside: Vec<AtomicUsize>,
    /// Per lock: a non-atomic read-modify-write under the lock ...
    counter: Vec<AtomicU64>,
    /// ... and how many critical sections ran (atomically).
    entered: Vec<AtomicU64>,
    /// Entries into a critical section someone else was inside, and when.
    double_holders: Mutex<Vec<Instant>>,
    /// Failed `lock()` calls (retried), of which shortfalls (rolled back).
    lock_errors: AtomicU64,
    shortfalls: AtomicU64,
    /// Failed `unlock()` calls other than `NotHeld`.
    unlock_errors: AtomicU64,
    /// `unlock()` found the lock gone (lost in the failover).
    lost_unlocks: AtomicU64,
    /// Completed iterations per thread.
    done: Vec<AtomicU64>,
    /// Per thread: the lock it is taking or holding.
    waiting_on: Vec<AtomicUsize>,
}

fn split_worker(work: &SplitWork, client: &Client, names: &[String], index: usize) {
    let locks: Vec<_> = names.iter().map(|n| client.lock(n.as_str())).collect();
    let mut turn = index;
    while !work.stop.load(Ordering::Relaxed) {
        let which = turn % SPLIT_LOCKS;
        turn += 1;
        work.waiting_on[index].store(which, Ordering::SeqCst);
        let guard = match locks[which].lock() {
            Ok(guard) => guard,
            Err(err) => {
                assert!(err.is_backend(), "lock(): not a Backend error: {err:?}");
                work.lock_errors.fetch_add(1, Ordering::SeqCst);
                if err.to_string().contains("rolled back") {
                    work.shortfalls.fetch_add(1, Ordering::SeqCst);
                }
                thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        if work.inside[which].fetch_add(1, Ordering::SeqCst) != 0 {
            work.double_holders.lock().unwrap().push(Instant::now());
        }
        let value = work.counter[which].load(Ordering::SeqCst);
        thread::sleep(Duration::from_micros(500));
        work.counter[which].store(value + 1, Ordering::SeqCst);
        work.entered[which].fetch_add(1, Ordering::SeqCst);
        work.inside[which].fetch_sub(1, Ordering::SeqCst);
        match guard.unlock() {
            Ok(()) => {}
            Err(err) if err.is_not_held() => {
                work.lost_unlocks.fetch_add(1, Ordering::SeqCst);
            }
            Err(err) => {
                assert!(err.is_backend(), "unlock(): not a Backend error: {err:?}");
                work.unlock_errors.fetch_add(1, Ordering::SeqCst);
            }
        }
        work.done[index].fetch_add(1, Ordering::SeqCst);
    }
}

/// What one run of [`split_brain_run`] measured.
#[derive(Debug)]
struct SplitOutcome {
    double_holders: usize,
    /// Critical sections run minus the counters' sum.
    lost_updates: u64,
    critical_sections: u64,
    lock_errors: u64,
    shortfalls: u64,
    unlock_errors: u64,
    lost_unlocks: u64,
    /// Fault → every sentinel reports the replica as master.
    switch: Duration,
    /// Switch → every thread completed 5 more iterations, counted from 2 s
    /// after the switch.
    recovery: Duration,
    /// Switch → the last double holder, if any.
    last_double: Option<Duration>,
}

/// A contended run (SPLIT_CLIENTS x SPLIT_THREADS threads over SPLIT_LOCKS
/// names) across a `SENTINEL FAILOVER`; every client built with `ack`.
fn split_brain_run(ack: Option<ReplicaAcknowledgement>) -> SplitOutcome {
    let cluster = Cluster::start();
    let new_master = cluster.replica.port();
    let clients: Vec<Client> = (0..SPLIT_CLIENTS)
        .map(|_| cluster.client_with(ack))
        .collect();
    let names: Vec<String> = (0..SPLIT_LOCKS)
        .map(|_| unique_name("sentinel:split"))
        .collect();
    let threads = SPLIT_CLIENTS * SPLIT_THREADS;
    let work = Arc::new(SplitWork {
        stop: AtomicBool::new(false),
        inside: (0..SPLIT_LOCKS).map(|_| AtomicUsize::new(0)).collect(),
        counter: (0..SPLIT_LOCKS).map(|_| AtomicU64::new(0)).collect(),
        entered: (0..SPLIT_LOCKS).map(|_| AtomicU64::new(0)).collect(),
        double_holders: Mutex::new(Vec::new()),
        lock_errors: AtomicU64::new(0),
        shortfalls: AtomicU64::new(0),
        unlock_errors: AtomicU64::new(0),
        lost_unlocks: AtomicU64::new(0),
        done: (0..threads).map(|_| AtomicU64::new(0)).collect(),
        waiting_on: (0..threads).map(|_| AtomicUsize::new(0)).collect(),
    });
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let work = Arc::clone(&work);
            let client = clients[i % SPLIT_CLIENTS].clone();
            let names = names.clone();
            thread::spawn(move || split_worker(&work, &client, &names, i))
        })
        .collect();

    wait_until(
        "every thread progressed before the failover",
        Duration::from_secs(20),
        || work.done.iter().all(|d| d.load(Ordering::SeqCst) >= 5),
    );
    assert!(
        work.double_holders.lock().unwrap().is_empty(),
        "double holder before the failover"
    );

    let fault_at = Instant::now();
    cluster.force_failover();
    cluster.wait_for_switch();
    let switched_at = Instant::now();
    // Every client's watcher moves it within a tick (1 s) of the switch;
    // threads may keep going on the old master until then.
    thread::sleep(Duration::from_secs(2));
    let before: Vec<u64> = work.done.iter().map(|d| d.load(Ordering::SeqCst)).collect();
    // Clients keep working: every thread completes iterations on the new
    // master (with acknowledgement, only once the old master has been
    // demoted and has synced from the new one: until then the new master
    // has no replica to acknowledge anything).
    let deadline = Instant::now() + Duration::from_secs(25);
    while !work
        .done
        .iter()
        .zip(&before)
        .all(|(d, b)| d.load(Ordering::SeqCst) >= b + 5)
    {
        if Instant::now() >= deadline {
            let mut conn = connect(new_master).unwrap();
            let keys: Vec<(String, i64, redis::Value)> = names
                .iter()
                .map(|n| {
                    let pttl = redis::cmd("PTTL").arg(n).query(&mut conn).unwrap();
                    let hash = redis::cmd("HGETALL").arg(n).query(&mut conn).unwrap();
                    (n.clone(), pttl, hash)
                })
                .collect();
            panic!(
                "threads stranded after the failover: done at switch + 2 s {before:?}, now                  {:?}, waiting on lock {:?}; lock keys on the new master (name, PTTL, hash):                  {keys:?}",
                work.done
                    .iter()
                    .map(|d| d.load(Ordering::SeqCst))
                    .collect::<Vec<_>>(),
                work.waiting_on
                    .iter()
                    .map(|w| w.load(Ordering::SeqCst))
                    .collect::<Vec<_>>(),
            );
        }
        thread::sleep(Duration::from_millis(10));
    }
    let recovered_at = Instant::now();
    thread::sleep(Duration::from_millis(500));
    work.stop.store(true, Ordering::SeqCst);
    for handle in handles {
        handle.join().unwrap();
    }

    // The locks live on the new master, and every client still works.
    assert_eq!(role(new_master).as_deref(), Some("master"));
    for client in &clients {
        let guard = client.lock(names[0].as_str()).lock().unwrap();
        assert!(
            exists(new_master, &names[0]),
            "the lock is on the new master"
        );
        guard.unlock().unwrap();
    }

    let critical_sections: u64 = work.entered.iter().map(|e| e.load(Ordering::SeqCst)).sum();
    let counted: u64 = work.counter.iter().map(|c| c.load(Ordering::SeqCst)).sum();
    let doubles = work.double_holders.lock().unwrap().clone();
    SplitOutcome {
        double_holders: doubles.len(),
        lost_updates: critical_sections - counted,
        critical_sections,
        lock_errors: work.lock_errors.load(Ordering::SeqCst),
        shortfalls: work.shortfalls.load(Ordering::SeqCst),
        unlock_errors: work.unlock_errors.load(Ordering::SeqCst),
        lost_unlocks: work.lost_unlocks.load(Ordering::SeqCst),
        switch: switched_at.duration_since(fault_at),
        recovery: recovered_at.duration_since(switched_at),
        last_double: doubles
            .iter()
            .max()
            .map(|t| t.saturating_duration_since(switched_at)),
    }
}

/// Without acknowledgement a release can reach the old master while the
/// promoted replica keeps the hold: a phantom hold that a thread re-taking
/// the lock used to keep alive for ever, stranding every other waiter
/// (found by this test). The outermost unlock now releases phantoms.
#[test]
fn double_holders_across_a_failover_with_and_without_acknowledgement() {
    assert!(SPLIT_ACK_TIMEOUT < RESPONSE_TIMEOUT);
    let started = Instant::now();
    let without = split_brain_run(None);
    let ack =
        ReplicaAcknowledgement::new(1, SPLIT_ACK_TIMEOUT).on_shortfall(ReplicaShortfall::Fail);
    let with = split_brain_run(Some(ack));
    for (mode, outcome) in [
        ("no replica acknowledgement", &without),
        ("ReplicaAcknowledgement::new(1, 300 ms), Fail", &with),
    ] {
        eprintln!(
            "SENTINEL FAILOVER, {SPLIT_CLIENTS} clients x {SPLIT_THREADS} threads over \
             {SPLIT_LOCKS} locks, {mode}: {} double holders (last {:?} after the switch), \
             {} lost updates in {} critical sections; {} failed lock() ({} shortfalls), \
             {} failed unlock(), {} lost unlocks (NotHeld); fault -> switch {:.1?}, \
             switch -> every thread +5 iterations after switch + 2 s {:.1?}",
            outcome.double_holders,
            outcome.last_double,
            outcome.lost_updates,
            outcome.critical_sections,
            outcome.lock_errors,
            outcome.shortfalls,
            outcome.unlock_errors,
            outcome.lost_unlocks,
            outcome.switch,
            outcome.recovery,
        );
    }
    eprintln!("both runs took {:.1?}", started.elapsed());
    assert_eq!(with.double_holders, 0, "{with:?}");
    assert_eq!(with.lost_updates, 0, "{with:?}");
}

// ---------------------------------------------------------------------------
// TLS (features `sentinel` + `tls`): `rediss://` sentinels, and the master
// reached over TLS with the same certificates.
// ---------------------------------------------------------------------------

#[cfg(feature = "tls")]
mod tls {
    use super::*;

    /// The clients' pooled and pub/sub connections are on `what`'s TLS
    /// port (its `CLIENT LIST`, read on the plain `port`).
    fn assert_clients_over_tls(what: &str, port: u16, tls_port: u16) {
        let (connections, subscribed) = client_connections_on(port, tls_port);
        assert!(
            connections >= 2 && subscribed >= 1,
            "expected the clients' pooled and pub/sub connections on {what}'s TLS port: \
             {connections} connections, {subscribed} subscribed"
        );
    }

    /// Connections on `tls_port` of the server whose admin port is
    /// `admin_port`, other than its replicas' and sentinels': (all,
    /// subscribed to a channel).
    fn client_connections_on(admin_port: u16, tls_port: u16) -> (usize, usize) {
        let mut admin = connect(admin_port).unwrap();
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
        let laddr = format!("laddr=127.0.0.1:{tls_port}");
        let clients: Vec<&str> = list
            .lines()
            .filter(|line| {
                line.split_whitespace().any(|field| field == laddr)
                    && !line.contains("flags=S")
                    && !line.contains("cmd=replconf")
                    && !line.contains("name=sentinel")
            })
            .collect();
        let subscribed = clients
            .iter()
            .filter(|line| {
                line.split_whitespace()
                    .any(|field| field.starts_with("sub=") && field != "sub=0")
            })
            .count();
        (clients.len(), subscribed)
    }

    /// Locks (excluding another client) and leaves the lock key on the
    /// server at `admin_port`, retried until the client's calls go there.
    fn locks_on(client: &Client, other: &Client, admin_port: u16) {
        wait_until(
            "the client locks on the expected master",
            FAILOVER_TIMEOUT,
            || {
                let name = unique_name("sentinel:tls:lock");
                let Ok(Some(guard)) = client.lock(name.as_str()).try_lock() else {
                    return false;
                };
                let there = exists(admin_port, &name)
                    && matches!(other.lock(name.as_str()).try_lock(), Ok(None));
                let _ = guard.unlock();
                there
            },
        );
    }

    /// Every data path on TLS: the client, given only `rediss://` URLs to
    /// the sentinels' TLS ports and the test CA, locks on the master over
    /// TLS, excludes another client, is woken by pub/sub over TLS, and
    /// after `SENTINEL FAILOVER` does all of it on the promoted replica's
    /// TLS port.
    #[test]
    fn locks_wake_and_follow_a_failover_over_tls() {
        let started = Instant::now();
        let cluster = Cluster::start_with(Transport::Tls { mutual: false });
        let setup = started.elapsed();
        assert_eq!(cluster.reported_master(), Some(cluster.master_data_port));
        assert!(
            cluster
                .sentinel_urls()
                .iter()
                .all(|url| url.starts_with("rediss://")),
            "{:?}",
            cluster.sentinel_urls()
        );
        let client = cluster.client();
        let other = cluster.client();
        let (master, master_tls) = (cluster.master.port(), cluster.master_data_port);

        locks_on(&client, &other, master);
        assert_handoff(&client, &other, master);
        assert_clients_over_tls("the master", master, master_tls);

        let failover = Instant::now();
        cluster.force_failover();
        cluster.wait_for_switch();
        let switched = failover.elapsed();
        let (new_master, new_master_tls) = (cluster.replica.port(), cluster.replica_data_port);
        locks_on(&client, &other, new_master);
        locks_on(&other, &client, new_master);
        let recovered = failover.elapsed();
        assert_handoff(&client, &other, new_master);
        assert_handoff(&other, &client, new_master);
        assert_clients_over_tls("the new master", new_master, new_master_tls);
        let fresh = cluster.client();
        fresh
            .lock(unique_name("sentinel:tls:fresh").as_str())
            .lock()
            .unwrap()
            .unlock()
            .unwrap();
        eprintln!(
            "Sentinel over TLS: setup {setup:.1?}; failover -> sentinels switched {switched:.1?}, \
             -> both clients lock on the new master {recovered:.1?}; whole test {:.1?}",
            started.elapsed()
        );
    }

    /// The contended run of [`sentinel_failover_during_contention`], with
    /// TLS on every data path.
    #[test]
    fn sentinel_failover_during_contention_over_tls() {
        failover_during_contention(Fault::SentinelFailover, Transport::Tls { mutual: false });
    }

    /// Refusals are fast, clear errors: a CA the sentinels' certificates do
    /// not chain to, `redis://` to a TLS port, and (every TLS port requiring
    /// client certificates) no client certificate, at the sentinels or at
    /// the master. With the certificate the client works, also through
    /// plain sentinel URLs: TLS settings alone put the master on TLS.
    #[test]
    fn untrusted_ca_plain_urls_and_client_certificates() {
        let cluster = Cluster::start_with(Transport::Tls { mutual: true });
        let (pki, _) = cluster.tls.as_ref().unwrap();
        let ca = pki.ca.as_bytes();
        let (cert, key) = (pki.client_cert.as_bytes(), pki.client_key.as_bytes());
        let tls_urls = cluster.sentinel_urls();
        let plain_to_tls_ports: Vec<String> = tls_urls
            .iter()
            .map(|url| url.replacen("rediss://", "redis://", 1))
            .collect();

        let refusals = [
            (
                "system roots",
                cluster.bare_builder(tls_urls.clone()),
                "certificate",
            ),
            (
                "another CA",
                cluster
                    .bare_builder(tls_urls.clone())
                    .tls_root_certificate(common::tls::other_ca())
                    .tls_client_certificate(cert, key),
                "certificate",
            ),
            (
                "redis:// to the TLS ports",
                cluster.bare_builder(plain_to_tls_ports),
                "no Sentinel reachable",
            ),
            (
                "no client certificate for the sentinels",
                cluster.bare_builder(tls_urls).tls_root_certificate(ca),
                "no Sentinel reachable",
            ),
            (
                "no client certificate for the master",
                cluster
                    .bare_builder(cluster.plain_sentinel_urls())
                    .tls_root_certificate(ca),
                "master",
            ),
        ];
        for (what, builder, expected) in refusals {
            let at = Instant::now();
            let err = builder.build().unwrap_err();
            let took = at.elapsed();
            eprintln!("{what}: refused in {took:.1?}: {err}");
            assert!(took < Duration::from_secs(10), "{what}: took {took:?}");
            assert!(err.is_backend(), "{what}: {err:?}");
            assert!(err.to_string().contains(expected), "{what}: {err}");
            let text = format!("{err} {err:?}");
            assert!(
                !text.contains("PRIVATE KEY"),
                "{what}: the key leaked: {text}"
            );
        }

        let a = cluster.client();
        let b = cluster
            .bare_builder(cluster.plain_sentinel_urls())
            .tls_root_certificate(ca)
            .tls_client_certificate(cert, key)
            .build()
            .unwrap();
        let master = cluster.master.port();
        locks_on(&a, &b, master);
        locks_on(&b, &a, master);
        assert_handoff(&a, &b, master);
        assert_handoff(&b, &a, master);
        let (connections, subscribed) = client_connections_on(master, cluster.master_data_port);
        assert!(
            connections >= 2 && subscribed >= 2,
            "expected both clients on the master's TLS port: \
             {connections} connections, {subscribed} subscribed"
        );
    }
}
