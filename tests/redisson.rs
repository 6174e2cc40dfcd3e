//! The real Redisson beside redisync on one Redis (and, for the lock and
//! the fair lock, on a 3-master cluster with sharded pub/sub): every
//! primitive, both ways. The Java side is Redisson itself (the pinned
//! release of interop/java/pom.xml), driven over stdin/stdout by
//! tests/common/redisson.rs; each scenario is written once, here.
//!
//! Every wake is measured from the releaser's call to the waiter's return
//! (same machine, same wall clock) and printed (`--nocapture`); it is
//! asserted against [`PROMPT`], far under the 30 s lease, so it can only
//! have come from the release's message, not from the lease running out.
//!
//! Run alone: `cargo test --all-features --test redisson -- --nocapture`
//! (needs a JDK 17+ and Maven; interop/java/build.sh is run when the
//! driver's jar is missing or stale).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::child::{
    ChildProcess, LOCK_ENV, READY, READY_TIMEOUT, ROLE_ENV, URL_ENV, WATCHDOG_MS_ENV,
    child_client_with_watchdog, env, ready_until_parent_done,
};
use common::delay_proxy::DelayProxy;
use common::redisson::{Actor, JavaClient, Redisson, ms_between, now_us};
use common::{TestServer, numsub, pttl, unique_name, wait_until};
use redisync::{Client, Lock, PermitId};

/// The bound on a wake across the two: the target is 100 ms; this is what
/// a loaded 2-core machine is held to, a sixth of the 30 s lease.
const PROMPT: Duration = Duration::from_secs(5);
/// How long a waiter is watched to still wait.
const STILL_WAITING: Duration = Duration::from_millis(300);
/// How long a waiter gets to show up (subscribed or queued).
const SHOW_UP: Duration = Duration::from_secs(20);
/// The watchdog timeout of the kill and watchdog scenarios.
const SHORT_WATCHDOG: Duration = Duration::from_millis(1500);

// ---------------------------------------------------------------------------
// Child side (the Rust holder that the reverse kill scenario kills)
// ---------------------------------------------------------------------------

/// NOT A TEST OF ITS OWN: the entry point of this binary re-executed as a
/// child process ([`ROLE_ENV`] set, see tests/common/child.rs); in a normal
/// run it returns at once.
#[test]
fn child_role_entrypoint() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    match role.as_str() {
        "holder" => {
            let client = child_client_with_watchdog();
            let guard = client.lock(env(LOCK_ENV)).lock().expect("child: lock");
            ready_until_parent_done(&client.current_holder_id());
            drop(guard);
        }
        other => panic!("unknown {ROLE_ENV}={other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Plumbing
// ---------------------------------------------------------------------------

/// Where the two sides meet: a private redis-server or the shared cluster.
enum Store {
    Single(TestServer),
    #[cfg(feature = "cluster")]
    Cluster(std::sync::Arc<common::cluster::TestCluster>),
}

impl Store {
    /// The server of a single-server side.
    fn server(&self) -> &TestServer {
        match self {
            Store::Single(server) => server,
            #[cfg(feature = "cluster")]
            Store::Cluster(_) => panic!("a single server, not a cluster"),
        }
    }

    /// A plain connection to the master that holds `key`.
    fn connection(&self, key: &str) -> redis::Connection {
        match self {
            Store::Single(server) => {
                let _ = key; // one server holds every key
                server.connection()
            }
            #[cfg(feature = "cluster")]
            Store::Cluster(cluster) => {
                let port = cluster.owner_port(key);
                cluster.nodes[cluster.index_of_port(port)].connection()
            }
        }
    }

    /// Subscribers of `channel` (sharded ones on a cluster).
    fn subscribers(&self, channel: &str) -> i64 {
        match self {
            Store::Single(server) => numsub(&mut server.connection(), channel),
            #[cfg(feature = "cluster")]
            Store::Cluster(_) => {
                let reply: (String, i64) = redis::cmd("PUBSUB")
                    .arg("SHARDNUMSUB")
                    .arg(channel)
                    .query(&mut self.connection(channel))
                    .unwrap();
                reply.1
            }
        }
    }
}

/// A Redisson client and a redisync client on one store.
struct Sides {
    store: Store,
    java: JavaClient,
    rust: Client,
    label: &'static str,
}

/// Both sides on a fresh redis-server, Redisson's and redisync's defaults.
fn single() -> Sides {
    let server = TestServer::start();
    let java = Redisson::shared().single(&server.url(), &[]);
    let rust = Client::open(&server.url()).unwrap();
    Sides {
        store: Store::Single(server),
        java,
        rust,
        label: "redis",
    }
}

/// Both sides on the shared 3-master cluster (sharded pub/sub).
#[cfg(feature = "cluster")]
fn cluster() -> Sides {
    let cluster = common::cluster::shared();
    let java = Redisson::shared().cluster(&cluster.urls(), &[]);
    let rust = cluster.client();
    Sides {
        store: Store::Cluster(cluster),
        java,
        rust,
        label: "cluster",
    }
}

/// redisync's handle of lock kind `kind`, named as the driver names them.
fn rust_lock(client: &Client, kind: &str, name: &str) -> Lock {
    match kind {
        "lock" => client.lock(name),
        "fair" => client.fair_lock(name),
        "read" => client.read_write_lock(name).read_lock(),
        "write" => client.read_write_lock(name).write_lock(),
        "fenced" => client.fenced_lock(name),
        "spin" => client.spin_lock(name),
        other => panic!("no lock kind {other}"),
    }
}

impl Sides {
    /// A second redisync client on the same store (another process, as
    /// far as the locks can tell).
    fn another_rust_client(&self) -> Client {
        match &self.store {
            Store::Single(server) => Client::open(&server.url()).unwrap(),
            #[cfg(feature = "cluster")]
            Store::Cluster(cluster) => cluster.client(),
        }
    }

    /// How many waiters `kind` `name` has that the store can see: pub/sub
    /// subscribers of its channel, or, for the fair lock, its queue.
    fn waiters(&self, kind: &str, name: &str) -> i64 {
        match kind {
            "fair" => {
                let queue = format!("redisson_lock_queue:{{{name}}}");
                redis::cmd("LLEN")
                    .arg(&queue)
                    .query(&mut self.store.connection(&queue))
                    .unwrap()
            }
            "read" | "write" => self
                .store
                .subscribers(&format!("redisson_rwlock:{{{name}}}")),
            _ => self
                .store
                .subscribers(&format!("redisson_lock__channel:{{{name}}}")),
        }
    }

    fn await_waiters(&self, kind: &str, name: &str, n: i64) {
        wait_until(&format!("{n} waiter(s) on {kind} {name}"), SHOW_UP, || {
            self.waiters(kind, name) >= n
        });
    }
}

/// A Rust thread that takes `lock`, says when (µs), holds until told, and
/// unlocks.
struct RustWaiter {
    acquired: mpsc::Receiver<u64>,
    release: mpsc::Sender<()>,
    handle: thread::JoinHandle<()>,
}

impl RustWaiter {
    fn start(lock: Lock) -> RustWaiter {
        let (acquired_tx, acquired) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let handle = thread::spawn(move || {
            let guard = lock.lock().unwrap();
            acquired_tx.send(now_us()).unwrap();
            let _ = release_rx.recv();
            guard.unlock().unwrap();
        });
        RustWaiter {
            acquired,
            release,
            handle,
        }
    }

    fn assert_waiting(&self, what: &str) {
        assert!(
            self.acquired.recv_timeout(STILL_WAITING).is_err(),
            "{what} should still wait"
        );
    }

    fn acquired_within(&self, timeout: Duration, what: &str) -> u64 {
        self.acquired
            .recv_timeout(timeout)
            .unwrap_or_else(|_| panic!("{what} was not woken within {timeout:?}"))
    }

    fn finish(self) {
        self.release.send(()).unwrap();
        self.handle.join().unwrap();
    }
}

fn report(label: &str, what: &str, ms: f64) {
    eprintln!("[redisson interop] {label}: {what}: {ms:.1} ms");
    assert!(
        ms >= 0.0 && ms < PROMPT.as_secs_f64() * 1000.0,
        "{label}: {what} took {ms:.1} ms (bound {PROMPT:?}, lease 30 s)"
    );
}

/// Rust holds `kind` `name` (watchdog, 30 s lease), a Redisson thread
/// waits; Rust's release must wake it. Returns the wake latency in ms.
fn rust_release_wakes_java(sides: &Sides, kind: &str, name: &str) -> f64 {
    let lock = rust_lock(&sides.rust, kind, name);
    let guard = lock.lock().unwrap();
    let waiter = sides.java.actor("waiter");
    let before = sides.waiters(kind, name);
    waiter.send(&format!("lock {kind} {name}"));
    sides.await_waiters(kind, name, before + 1);
    waiter.assert_waiting(STILL_WAITING, "Redisson's lock()");
    assert!(lock.remaining_ttl().unwrap().unwrap() > Duration::from_secs(20));
    let released = now_us();
    guard.unlock().unwrap();
    let acquired = waiter.reply_within(PROMPT * 2);
    waiter.call(&format!("unlock {kind} {name}"));
    let ms = ms_between(released, acquired.end_us);
    report(
        sides.label,
        &format!("{kind}: Rust release -> Java waiter"),
        ms,
    );
    ms
}

/// A Redisson thread holds `kind` `name` (watchdog, 30 s lease), a Rust
/// thread waits; Redisson's release must wake it.
fn java_release_wakes_rust(sides: &Sides, kind: &str, name: &str) -> f64 {
    let holder = sides.java.actor("holder");
    holder.call(&format!("lock {kind} {name}"));
    let before = sides.waiters(kind, name);
    let waiter = RustWaiter::start(rust_lock(&sides.rust, kind, name));
    sides.await_waiters(kind, name, before + 1);
    waiter.assert_waiting("redisync's lock()");
    assert!(holder.call(&format!("ttl {kind} {name}")).int() > 20_000);
    let released = holder.call(&format!("unlock {kind} {name}"));
    let acquired = waiter.acquired_within(PROMPT * 2, "redisync's lock()");
    waiter.finish();
    let ms = ms_between(released.start_us, acquired);
    report(
        sides.label,
        &format!("{kind}: Java release -> Rust waiter"),
        ms,
    );
    ms
}

/// Two Redisson threads and two Rust threads each increment one counter
/// `rounds` times under `kind` `name` with a plain GET then SET (a second
/// holder inside would lose an update), and count entries that found
/// someone inside. Returns the final counter.
fn contended_counter(sides: &Sides, kind: &str, name: &str, rounds: u64) -> u64 {
    let counter = format!("{{{name}}}:counter");
    let inside = format!("{{{name}}}:inside");
    let javas: Vec<Actor> = (0..2)
        .map(|i| sides.java.actor(&format!("incr{i}")))
        .collect();
    for java in &javas {
        java.send(&format!("incr {kind} {name} {counter} {inside} {rounds}"));
    }
    let rusts: Vec<_> = (0..2)
        .map(|_| {
            let lock = rust_lock(&sides.rust, kind, name);
            let mut conn = sides.store.connection(&counter);
            let (counter, inside) = (counter.clone(), inside.clone());
            thread::spawn(move || {
                let mut overlaps = 0;
                for _ in 0..rounds {
                    let guard = lock.lock().unwrap();
                    let entered: i64 = redis::cmd("INCR").arg(&inside).query(&mut conn).unwrap();
                    if entered != 1 {
                        overlaps += 1;
                    }
                    let value: Option<u64> =
                        redis::cmd("GET").arg(&counter).query(&mut conn).unwrap();
                    let () = redis::cmd("SET")
                        .arg(&counter)
                        .arg(value.unwrap_or(0) + 1)
                        .query(&mut conn)
                        .unwrap();
                    let _: i64 = redis::cmd("DECR").arg(&inside).query(&mut conn).unwrap();
                    guard.unlock().unwrap();
                }
                overlaps
            })
        })
        .collect();
    let rust_overlaps: u64 = rusts.into_iter().map(|h| h.join().unwrap()).sum();
    let java_overlaps: i64 = javas
        .iter()
        .map(|java| java.reply_within(Duration::from_secs(120)).int())
        .sum();
    assert_eq!(rust_overlaps, 0, "Rust threads found someone inside");
    assert_eq!(java_overlaps, 0, "Redisson threads found someone inside");
    let total: u64 = redis::cmd("GET")
        .arg(&counter)
        .query(&mut sides.store.connection(&counter))
        .unwrap();
    eprintln!(
        "[redisson interop] {}: {kind}: counter {total} after 2 Java x {rounds} + 2 Rust x {rounds}",
        sides.label
    );
    assert_eq!(total, 4 * rounds, "a lost update under {kind}");
    total
}

// ---------------------------------------------------------------------------
// The lock
// ---------------------------------------------------------------------------

#[test]
fn lock_release_wakes_the_other_side() {
    let sides = single();
    let name = unique_name("interop-wake");
    rust_release_wakes_java(&sides, "lock", &name);
    java_release_wakes_rust(&sides, "lock", &name);
}

#[test]
fn lock_excludes_under_contention() {
    let sides = single();
    contended_counter(&sides, "lock", &unique_name("interop-count"), 100);
}

#[test]
fn reentrancy_counts_stay_per_holder() {
    reentrancy_across(&single());
}

/// Java's and Rust's reentrant holds of one lock are counted per holder.
fn reentrancy_across(sides: &Sides) {
    let name = unique_name("interop-reentrant");
    let java = sides.java.actor("a");
    let lock = sides.rust.lock(name.as_str());

    java.call(&format!("lock lock {name}"));
    java.call(&format!("lock lock {name}"));
    assert_eq!(java.call(&format!("hold_count lock {name}")).int(), 2);
    assert_eq!(lock.hold_count().unwrap(), 0, "Java's holds are not Rust's");
    assert!(lock.is_locked().unwrap());
    assert!(lock.try_lock().unwrap().is_none());
    java.call(&format!("unlock lock {name}"));
    assert_eq!(java.call(&format!("hold_count lock {name}")).int(), 1);
    assert!(lock.try_lock().unwrap().is_none(), "one Java hold is left");
    java.call(&format!("unlock lock {name}"));

    let first = lock
        .try_lock()
        .unwrap()
        .expect("free after Java's last unlock");
    let second = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert_eq!(java.call(&format!("hold_count lock {name}")).int(), 0);
    assert!(java.call(&format!("is_locked lock {name}")).bool());
    assert!(!java.call(&format!("held lock {name}")).bool());
    assert!(!java.call(&format!("try_lock lock {name} 0")).bool());
    let refused = java.call_err(&format!("unlock lock {name}"));
    assert!(
        refused.contains("IllegalMonitorStateException"),
        "Redisson refuses to unlock Rust's hold: {refused}"
    );
    second.unlock().unwrap();
    assert!(
        !java.call(&format!("try_lock lock {name} 0")).bool(),
        "one Rust hold is left"
    );
    first.unlock().unwrap();
    assert!(java.call(&format!("try_lock lock {name} 0")).bool());
    // Redisson's field in the hash: `<its id>:<its thread id>` = 1.
    let holder = java.call("holder").value;
    assert!(holder.starts_with(&sides.java.id));
    let hash = common::hgetall(&mut sides.store.connection(&name), &name);
    assert_eq!(hash.get(&holder).map(String::as_str), Some("1"), "{hash:?}");
    java.call(&format!("unlock lock {name}"));
}

/// Either side's force-unlock frees the other side's hold (reentrant
/// twice) of `kind` and wakes a waiter.
fn force_unlock_across(sides: &Sides, kind: &str) {
    let name = unique_name("interop-force");
    // Java holds (twice); Rust force-unlocks; a Rust waiter is woken.
    let java = sides.java.actor("a");
    java.call(&format!("lock {kind} {name}"));
    java.call(&format!("lock {kind} {name}"));
    let lock = rust_lock(&sides.rust, kind, &name);
    let waiter = RustWaiter::start(lock.clone());
    sides.await_waiters(kind, &name, 1);
    waiter.assert_waiting("redisync's lock()");
    let forced = now_us();
    assert!(lock.force_unlock().unwrap());
    let acquired = waiter.acquired_within(PROMPT * 2, "the Rust waiter");
    report(
        sides.label,
        &format!("{kind}: Rust force_unlock -> Rust waiter (Java's hold)"),
        ms_between(forced, acquired),
    );
    assert_eq!(java.call(&format!("hold_count {kind} {name}")).int(), 0);
    let refused = java.call_err(&format!("unlock {kind} {name}"));
    assert!(
        refused.contains("IllegalMonitorStateException"),
        "{refused}"
    );
    waiter.finish();

    // Rust holds; Java force-unlocks; a Java waiter is woken.
    let guard = lock.lock().unwrap();
    let java_waiter = sides.java.actor("waiter");
    java_waiter.send(&format!("lock {kind} {name}"));
    sides.await_waiters(kind, &name, 1);
    java_waiter.assert_waiting(STILL_WAITING, "Redisson's lock()");
    let forced = sides
        .java
        .actor("admin")
        .call(&format!("force_unlock {kind} {name}"));
    assert!(forced.bool());
    let acquired = java_waiter.reply_within(PROMPT * 2);
    report(
        sides.label,
        &format!("{kind}: Java forceUnlock -> Java waiter (Rust's hold)"),
        ms_between(forced.start_us, acquired.end_us),
    );
    let err = guard.unlock().expect_err("Rust's hold was taken away");
    assert!(err.is_not_held(), "{err}");
    eprintln!(
        "[redisson interop] {}: {kind}: unlock after the other side's force-unlock: Redisson: {refused}; redisync: {err}",
        sides.label
    );
    java_waiter.call(&format!("unlock {kind} {name}"));
}

#[test]
fn force_unlock_frees_the_other_sides_hold_and_wakes_its_waiters() {
    let sides = single();
    force_unlock_across(&sides, "lock");
    force_unlock_across(&sides, "fair");
}

#[test]
fn defaults_are_redissons() {
    let sides = single();
    let defaults = sides.java.actor("a").call("defaults").value;
    let expected = format!(
        "watchdog_ms={},fair_wait_ms={}",
        sides.rust.watchdog_timeout().as_millis(),
        sides.rust.fair_lock_wait_timeout().as_millis()
    );
    eprintln!("[redisson interop] defaults: Redisson {defaults}; redisync {expected}");
    assert_eq!(defaults, expected, "Redisson's defaults and redisync's");
}

/// Rust threads of two clients hand `kind` `name` among themselves (a
/// holder and two waiters, each taking it once) while a Redisson thread
/// waits: the Java waiter must still be woken when the last Rust holder
/// releases, and, for the fair lock, not before (it queued last).
fn java_waiter_woken_after_rust_handoffs(sides: &Sides, kind: &str) {
    let name = unique_name("interop-handoff");
    let lock = rust_lock(&sides.rust, kind, &name);
    let guard = lock.lock().unwrap();
    let first = RustWaiter::start(lock.clone());
    sides.await_waiters(kind, &name, 1);
    // The second Rust waiter is of another client: a handoff across
    // clients, as between two Rust processes.
    let other = sides.another_rust_client();
    let second = RustWaiter::start(rust_lock(&other, kind, &name));
    if kind == "fair" {
        sides.await_waiters(kind, &name, 2);
    } else {
        thread::sleep(STILL_WAITING);
    }
    let java = sides.java.actor("waiter");
    java.send(&format!("lock {kind} {name}"));
    if kind == "fair" {
        sides.await_waiters(kind, &name, 3);
    }
    java.assert_waiting(STILL_WAITING, "the Java waiter");
    guard.unlock().unwrap();
    // The two Rust waiters get it one after the other, in either order for
    // the plain lock (where the Java waiter may also come between them).
    let mut rust_waiters = vec![first, second];
    let mut java_between = false;
    let mut last_release = now_us();
    let deadline = Instant::now() + PROMPT * 4;
    while !rust_waiters.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the Rust waiters were not all served"
        );
        if let Some(i) = rust_waiters
            .iter()
            .position(|waiter| waiter.acquired.try_recv().is_ok())
        {
            last_release = now_us();
            rust_waiters.remove(i).finish();
        } else if !java_between {
            if let Some(reply) = java.try_reply(Duration::from_millis(5)) {
                reply.unwrap();
                assert_ne!(kind, "fair", "the Java waiter queued last but got in first");
                java_between = true;
                java.call(&format!("unlock {kind} {name}"));
            }
        } else {
            thread::sleep(Duration::from_millis(5));
        }
    }
    if java_between {
        eprintln!(
            "[redisson interop] {}: {kind}: the Java waiter got in between the Rust handoffs",
            sides.label
        );
    } else {
        let got = java.reply_within(PROMPT * 2);
        report(
            sides.label,
            &format!("{kind}: last of 3 Rust handoffs -> Java waiter"),
            ms_between(last_release, got.end_us),
        );
        java.call(&format!("unlock {kind} {name}"));
    }
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn java_waiter_woken_when_rust_threads_hand_the_lock_among_themselves() {
    java_waiter_woken_after_rust_handoffs(&single(), "lock");
}

#[test]
fn java_waiter_woken_when_rust_threads_hand_the_fair_lock_among_themselves() {
    java_waiter_woken_after_rust_handoffs(&single(), "fair");
}

// ---------------------------------------------------------------------------
// Beside redisync's cross-process handoffs (issue 22, item 4)
// ---------------------------------------------------------------------------

/// How long the Redisson waiter may wait for its turn while redisync
/// clients hand the lock around: well under its 30 s lease, so a turn that
/// passes did not come from waiting a lease out. The streak limit frees
/// the lock the usual way at least every [`STREAK`] + 1 releases, and the
/// queue and the releasing client keep off it for 100 ms, so Redisson,
/// which hears the unlock message, takes it (measured: 2-12 ms across
/// clients, 76-354 ms beside threads of one client; before the 100 ms
/// yield the releasing client and the queue won the race nearly every
/// time: up to 13 s). Generous for a loaded machine.
const TURN: Duration = Duration::from_secs(10);
/// redisync's handoffs in a row before a release frees the lock the usual
/// way (`MAX_HANDOFF_STREAK` of src/pubsub/handoff.rs).
const STREAK: u64 = 16;
/// How long a loop of redisync clients may run at most (a stuck loop fails
/// the test rather than hanging it).
const LOOP_LIMIT: Duration = Duration::from_secs(240);
/// The `waiters` set of redisync's cross-process queue of lock `name`.
fn waiter_queue(name: &str) -> String {
    format!("{{{name}}}:redisync_waiters")
}

/// Members of `name`'s redisync waiter queue.
fn queued(sides: &Sides, name: &str) -> i64 {
    let queue = waiter_queue(name);
    redis::cmd("ZCARD")
        .arg(&queue)
        .query(&mut sides.store.connection(&queue))
        .unwrap()
}

/// A thread of redisync `client` that takes lock `name` again and again
/// until `stop`: GET+SET of `counter` inside, `inside` counting who is in,
/// `acquired` counting every acquisition, `stamps` (if given) noting when
/// each began (µs, taken while holding). With `watchdog` its waits may be
/// handed the lock outright, without it (a 30 s lease) only reserved.
/// Returns (acquisitions, overlaps seen).
fn handoff_looper(
    sides: &Sides,
    client: Client,
    name: &str,
    watchdog: bool,
    acquired: &Arc<AtomicU64>,
    stop: &Arc<AtomicBool>,
    stamps: Option<&Arc<Mutex<Vec<u64>>>>,
) -> thread::JoinHandle<(u64, u64)> {
    let stamps = stamps.map(Arc::clone);
    let lock = client.lock(name);
    let counter = format!("{{{name}}}:counter");
    let inside = format!("{{{name}}}:inside");
    let mut conn = sides.store.connection(&counter);
    let (acquired, stop) = (Arc::clone(acquired), Arc::clone(stop));
    thread::spawn(move || {
        let _client = client; // its subscriber lives as long as the loop
        let deadline = Instant::now() + LOOP_LIMIT;
        let (mut mine, mut overlaps) = (0, 0);
        while !stop.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the handoff loop ran too long");
            let guard = if watchdog {
                lock.lock().unwrap()
            } else {
                lock.lock_with_lease(Duration::from_secs(30)).unwrap()
            };
            if let Some(stamps) = &stamps {
                stamps.lock().unwrap().push(now_us());
            }
            let entered: i64 = redis::cmd("INCR").arg(&inside).query(&mut conn).unwrap();
            if entered != 1 {
                overlaps += 1;
            }
            let value: Option<u64> = redis::cmd("GET").arg(&counter).query(&mut conn).unwrap();
            let () = redis::cmd("SET")
                .arg(&counter)
                .arg(value.unwrap_or(0) + 1)
                .query(&mut conn)
                .unwrap();
            let _: i64 = redis::cmd("DECR").arg(&inside).query(&mut conn).unwrap();
            acquired.fetch_add(1, Ordering::SeqCst);
            mine += 1;
            guard.unlock().unwrap();
        }
        (mine, overlaps)
    })
}

/// Counts Redisson's unlock messages (`0`) on `redisson_lock__channel:{name}`
/// (the releases that freed the lock the usual way) until a message on
/// `end`, which the server delivers after every earlier one.
fn unlock_messages(
    sides: &Sides,
    name: &str,
    end: &str,
) -> (Arc<AtomicU64>, thread::JoinHandle<()>) {
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let mut conn = sides.store.connection(&channel);
    let count = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&count);
    let end = end.to_owned();
    let (subscribed, ready) = mpsc::channel();
    let handle = thread::spawn(move || {
        let mut pubsub = conn.as_pubsub();
        pubsub.subscribe(&[&channel, &end]).unwrap();
        pubsub.set_read_timeout(Some(LOOP_LIMIT)).unwrap();
        subscribed.send(()).unwrap();
        loop {
            let msg = pubsub.get_message().expect("unlock listener");
            if msg.get_channel_name() == end {
                break;
            }
            if msg.get_payload_bytes() == b"0" {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    ready.recv_timeout(SHOW_UP).unwrap();
    (count, handle)
}

/// Sets its flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One turn of the Redisson waiter in the loop.
struct Turn {
    waited_ms: f64,
    rust_acquisitions: u64,
    unlock_messages: u64,
}

/// Three threads of the redisync `clients` (one each; two with a
/// watchdog, so handed the lock outright, one with a lease, so only
/// reserved) hand lock `name` around in a tight loop while a Redisson
/// thread, five times over, waits for it (`lock()` or `tryLock(wait,
/// lease)`), increments the shared counter inside, checks what it holds
/// and unlocks; then it increments 10 more times in Redisson's own
/// contended loop. `across`: the clients are three (else one, whose threads
/// hand over in-process). Returns the turns.
fn java_turns_beside_rust_handoffs(
    sides: &Sides,
    name: &str,
    clients: [Client; 3],
    across: bool,
) -> Vec<Turn> {
    let counter = format!("{{{name}}}:counter");
    let inside = format!("{{{name}}}:inside");
    let end = format!("{{{name}}}:listener_end");
    let stop = Arc::new(AtomicBool::new(false));
    // A failing check stops the loop too, rather than leaving it running.
    let _stop_on_exit = StopOnDrop(Arc::clone(&stop));
    let acquired = Arc::new(AtomicU64::new(0));
    let (messages, listener) = unlock_messages(sides, name, &end);
    let loopers: Vec<_> = clients
        .into_iter()
        .zip([true, true, false])
        .map(|(client, watchdog)| {
            handoff_looper(sides, client, name, watchdog, &acquired, &stop, None)
        })
        .collect();
    wait_until("the redisync loop running", SHOW_UP, || {
        acquired.load(Ordering::SeqCst) >= 50
    });

    let java = sides.java.actor("turns");
    let holder = java.call("holder").value;
    let mut turns = Vec::new();
    for round in 0..5 {
        let command = if round % 2 == 0 {
            format!("lock lock {name}")
        } else {
            format!("try_lock lock {name} {} 30000", TURN.as_millis() * 2)
        };
        let (acquisitions, unlocks) = (
            acquired.load(Ordering::SeqCst),
            messages.load(Ordering::SeqCst),
        );
        java.send(&command);
        let got = java.reply_within(TURN * 2);
        let turn = Turn {
            waited_ms: ms_between(got.start_us, got.end_us),
            rust_acquisitions: acquired.load(Ordering::SeqCst) - acquisitions,
            unlock_messages: messages.load(Ordering::SeqCst) - unlocks,
        };
        if round % 2 == 1 {
            assert!(got.bool(), "tryLock gave up after {:.1} ms", turn.waited_ms);
        }
        eprintln!(
            "[redisson interop] {}: Redisson `{}` got the lock after {:.1} ms, \
             {} redisync acquisitions and {} unlock messages",
            sides.label,
            command.split(' ').next().unwrap(),
            turn.waited_ms,
            turn.rust_acquisitions,
            turn.unlock_messages
        );
        assert!(
            turn.waited_ms < TURN.as_secs_f64() * 1000.0,
            "Redisson waited {:.1} ms for its turn (bound {TURN:?}, lease 30 s)",
            turn.waited_ms
        );
        // It holds exactly what it took, alone: no handed or reserved
        // redisync hold beside it.
        assert!(java.call(&format!("held lock {name}")).bool());
        assert_eq!(java.call(&format!("hold_count lock {name}")).int(), 1);
        let ttl = java.call(&format!("ttl lock {name}")).int();
        assert!(ttl > 0 && ttl <= 30_000, "Redisson's own TTL: {ttl}");
        let hash = common::hgetall(&mut sides.store.connection(name), name);
        assert_eq!(hash.len(), 1, "Redisson alone holds it: {hash:?}");
        assert_eq!(hash.get(&holder).map(String::as_str), Some("1"), "{hash:?}");
        // Only redisync waiters are queued: Redisson's never is.
        let queue = waiter_queue(name);
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(&queue)
            .arg(0)
            .arg(-1)
            .query(&mut sides.store.connection(&queue))
            .unwrap();
        assert!(
            !members.iter().any(|m| m.contains(&sides.java.id)),
            "{members:?}"
        );
        assert_eq!(
            java.call(&format!("incr_held {counter} {inside}")).int(),
            0,
            "Redisson found a redisync holder inside"
        );
        java.call(&format!("unlock lock {name}"));
        assert!(!java.call(&format!("held lock {name}")).bool());
        assert_eq!(java.call(&format!("hold_count lock {name}")).int(), 0);
        let hash = common::hgetall(&mut sides.store.connection(name), name);
        assert!(
            !hash.keys().any(|field| field.starts_with(&sides.java.id)),
            "a Redisson hold left behind: {hash:?}"
        );
        turns.push(turn);
        // More than a streak of redisync acquisitions before the next turn.
        let now = acquired.load(Ordering::SeqCst);
        wait_until("the redisync loop going on", SHOW_UP, || {
            acquired.load(Ordering::SeqCst) >= now + 20
        });
    }

    // Redisson's own contended loop beside redisync's, on another thread.
    let java_rounds = 10;
    let contender = sides.java.actor("contender");
    contender.send(&format!(
        "incr lock {name} {counter} {inside} {java_rounds}"
    ));
    let java_overlaps = contender
        .reply_within(TURN * u32::try_from(java_rounds).unwrap())
        .int();
    assert!(!contender.call(&format!("held lock {name}")).bool());

    stop.store(true, Ordering::SeqCst);
    let (mut rust_total, mut rust_overlaps) = (0, 0);
    for looper in loopers {
        let (mine, overlaps) = looper.join().unwrap();
        assert!(mine > 0, "a redisync client never got the lock");
        rust_total += mine;
        rust_overlaps += overlaps;
    }
    let _: i64 = redis::cmd("PUBLISH")
        .arg(&end)
        .arg("end")
        .query(&mut sides.store.connection(&end))
        .unwrap();
    listener.join().unwrap();
    let unlocks = messages.load(Ordering::SeqCst);
    assert_eq!(rust_overlaps, 0, "redisync clients found someone inside");
    assert_eq!(java_overlaps, 0, "Redisson found someone inside");
    assert_eq!(rust_total, acquired.load(Ordering::SeqCst));
    let total: u64 = redis::cmd("GET")
        .arg(&counter)
        .query(&mut sides.store.connection(&counter))
        .unwrap();
    let java_total = turns.len() as u64 + java_rounds as u64;
    eprintln!(
        "[redisson interop] {}: counter {total} = {rust_total} redisync + {java_total} Redisson \
         increments; {unlocks} unlock messages in all ({} releases handed over or more)",
        sides.label,
        (rust_total + java_total).saturating_sub(unlocks)
    );
    assert_eq!(total, rust_total + java_total, "a lost update");
    // Across clients the loop handed the lock over through the queue (else
    // it proved nothing): most releases sent no unlock message; and the
    // streak limit freed it the usual way at least once every STREAK + 1
    // releases (5 % spare: a streak count whose key outlived its claim
    // window in a stall starts over).
    let releases = rust_total + java_total;
    assert!(
        !across || unlocks < releases / 2,
        "few handoffs: {unlocks} unlock messages for {releases} releases"
    );
    assert!(
        releases * 100 <= (STREAK + 1) * (unlocks + 1) * 105,
        "the streak limit: {releases} releases but only {unlocks} unlock messages"
    );
    // Everything is let go: no hold of either side, nobody queued.
    assert!(!java.call(&format!("is_locked lock {name}")).bool());
    assert_eq!(java.call(&format!("ttl lock {name}")).int(), -2);
    assert_eq!(queued(sides, name), 0);
    turns
}

/// Prints the turns' waits and redisync acquisitions.
fn report_turns(label: &str, what: &str, turns: &[Turn]) {
    let mut waits: Vec<f64> = turns.iter().map(|turn| turn.waited_ms).collect();
    waits.sort_by(f64::total_cmp);
    let acquisitions: Vec<u64> = turns.iter().map(|turn| turn.rust_acquisitions).collect();
    eprintln!(
        "[redisson interop] {label}: {what}: Redisson's {} turns: waited {:.1} / {:.1} / {:.1} ms \
         (min / median / max); redisync acquisitions before each: {acquisitions:?}",
        waits.len(),
        waits[0],
        waits[waits.len() / 2],
        waits[waits.len() - 1]
    );
}

/// Issue 22, item 4: redisync's cross-process handoffs (three clients, as
/// three processes: each its own subscriber, each in the waiter queue)
/// leave Redisson its turn.
#[test]
fn java_waiter_gets_its_turn_while_rust_clients_hand_the_lock_around() {
    let sides = single();
    let name = unique_name("interop-turns");
    let clients = [(); 3].map(|()| sides.another_rust_client());
    let turns = java_turns_beside_rust_handoffs(&sides, &name, clients, true);
    report_turns(sides.label, "3 redisync clients", &turns);
}

/// The model of item 4, for comparison: three threads of one redisync
/// client, handing the lock among themselves in-process.
#[test]
fn java_waiter_gets_its_turn_while_rust_threads_of_one_client_hand_the_lock_around() {
    let sides = single();
    let name = unique_name("interop-turns-1");
    let client = sides.another_rust_client();
    let clients = [client.clone(), client.clone(), client];
    let turns = java_turns_beside_rust_handoffs(&sides, &name, clients, false);
    report_turns(sides.label, "3 threads of 1 redisync client", &turns);
}

// ---------------------------------------------------------------------------
// Redisson's turn within one streak (issue 33, item 4)
// ---------------------------------------------------------------------------

/// Redisson's threads in its contended loop: while one holds the lock the
/// others wait, so the client waits continuously (subscribed throughout:
/// a lone thread unsubscribes as it acquires).
const JAVA_THREADS: usize = 3;
/// How many times each of them takes the lock.
const JAVA_TURNS: usize = 15;
/// How late the slow Redisson client hears its unlock messages (and every
/// other reply): the wake-up the 100 ms yield must hold against.
const SLOW_WAKER: Duration = Duration::from_millis(20);

/// Redisson's turns among redisync's acquisitions, as the lock's holders
/// followed one another.
struct Streaks {
    /// Redisson's turns counted (see [`assert_turn_within_a_streak`]).
    java_turns: usize,
    /// redisync's acquisitions counted.
    rust_acquisitions: usize,
    /// redisync's acquisitions in a row before each of those turns.
    runs: Vec<usize>,
    /// Redisson's longest time between two of its turns counted.
    longest_wait_ms: f64,
}

/// One looping thread per entry of `clients` (clones of one client share
/// its subscriber: in-process handoffs; distinct clients hand over through
/// the store's queue; every third thread with a 30 s lease, so only
/// reserved the lock, the others with the watchdog, so handed it outright)
/// takes lock `name` again and again while [`JAVA_THREADS`] Redisson
/// threads of `java` take it [`JAVA_TURNS`] times each in Redisson's own
/// contended loop (`lock()`, increment, `unlock()`, at once again: the
/// Redisson client waits continuously). Every acquisition on either side
/// is stamped inside its hold, so the stamps order the holders exactly.
fn streaks_beside_rust_loops(
    sides: &Sides,
    java: &JavaClient,
    name: &str,
    clients: Vec<Client>,
) -> Streaks {
    let counter = format!("{{{name}}}:counter");
    let inside = format!("{{{name}}}:inside");
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_exit = StopOnDrop(Arc::clone(&stop));
    let acquired = Arc::new(AtomicU64::new(0));
    let stamps = Arc::new(Mutex::new(Vec::new()));
    let loopers: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| {
            handoff_looper(
                sides,
                client,
                name,
                i % 3 != 2,
                &acquired,
                &stop,
                Some(&stamps),
            )
        })
        .collect();
    wait_until("the redisync loop running", SHOW_UP, || {
        acquired.load(Ordering::SeqCst) >= 50
    });

    let contenders: Vec<_> = (0..JAVA_THREADS)
        .map(|i| java.actor(&format!("streaks-{i}")))
        .collect();
    for contender in &contenders {
        contender.send(&format!(
            "stamped lock {name} {counter} {inside} {JAVA_TURNS}"
        ));
    }
    let replies: Vec<_> = contenders
        .iter()
        .map(|contender| contender.reply_within(TURN * 6))
        .collect();
    stop.store(true, Ordering::SeqCst);
    let (mut rust_total, mut rust_overlaps) = (0, 0);
    for looper in loopers {
        let (mine, overlaps) = looper.join().unwrap();
        rust_total += mine;
        rust_overlaps += overlaps;
    }
    let mut java_stamps = Vec::new();
    for reply in &replies {
        let (overlaps, stamps) = reply.value.split_once(':').unwrap();
        assert_eq!(overlaps, "0", "Redisson found someone inside");
        java_stamps.extend(stamps.split(',').map(|s| s.parse::<u64>().unwrap()));
    }
    java_stamps.sort_unstable();
    assert_eq!(rust_overlaps, 0, "redisync clients found someone inside");
    assert_eq!(java_stamps.len(), JAVA_THREADS * JAVA_TURNS);
    let total: u64 = redis::cmd("GET")
        .arg(&counter)
        .query(&mut sides.store.connection(&counter))
        .unwrap();
    assert_eq!(
        total,
        rust_total + java_stamps.len() as u64,
        "a lost update"
    );
    assert!(!contenders[0].call(&format!("is_locked lock {name}")).bool());
    assert_eq!(queued(sides, name), 0);

    let rust_stamps = std::mem::take(&mut *stamps.lock().unwrap());
    // Counted from Redisson's first turn (before it, its client was still
    // starting to wait: a first partial streak) to the first of its
    // threads' last turns (after it, fewer threads wait, and a lone one is
    // not subscribed between its turns: a last partial streak).
    let first = java_stamps[0];
    let end = replies
        .iter()
        .map(|reply| {
            let stamps = reply.value.split_once(':').unwrap().1;
            stamps.rsplit(',').next().unwrap().parse::<u64>().unwrap()
        })
        .min()
        .unwrap();
    let mut runs = Vec::new();
    let mut longest_wait_ms: f64 = 0.0;
    let mut since = first;
    for &turn in java_stamps
        .iter()
        .filter(|&&turn| turn > first && turn <= end)
    {
        runs.push(
            rust_stamps
                .iter()
                .filter(|&&s| s > since && s < turn)
                .count(),
        );
        longest_wait_ms = longest_wait_ms.max(ms_between(since, turn));
        since = turn;
    }
    eprintln!(
        "[redisson interop] {} redisync acquisitions before Redisson's first turn, {} after \
         the end of the count",
        rust_stamps.iter().filter(|&&s| s < first).count(),
        rust_stamps.iter().filter(|&&s| s > end).count()
    );
    Streaks {
        java_turns: runs.len(),
        rust_acquisitions: runs.iter().sum(),
        runs,
        longest_wait_ms,
    }
}

/// The rule of issue 33, item 4: while Redisson waits continuously, it
/// gets the lock at least once in every [`STREAK`] redisync acquisitions.
/// Counting from Redisson's first turn to the first of its threads' last
/// turns (while all of them loop, so its client waits throughout), with N
/// redisync acquisitions and J Redisson turns after the first in that
/// span: J >= floor(N / STREAK). (Before the first turn, a first partial
/// streak, and after the end, a last one, are not counted.)
fn assert_turn_within_a_streak(label: &str, what: &str, streaks: &Streaks) {
    let max_run = streaks.runs.iter().max().copied().unwrap_or(0);
    eprintln!(
        "[redisson interop] {label}: {what}: Redisson {} turns, redisync {} acquisitions \
         (floor(N / {STREAK}) = {}); redisync runs between Redisson's turns: max {max_run}, {:?}; \
         Redisson's longest wait {:.1} ms",
        streaks.java_turns,
        streaks.rust_acquisitions,
        streaks.rust_acquisitions / STREAK as usize,
        streaks.runs,
        streaks.longest_wait_ms
    );
    assert!(
        streaks.java_turns >= streaks.rust_acquisitions / STREAK as usize,
        "{what}: Redisson got {} turns in {} redisync acquisitions (needs floor(N / {STREAK}) = {}); \
         runs {:?}",
        streaks.java_turns,
        streaks.rust_acquisitions,
        streaks.rust_acquisitions / STREAK as usize,
        streaks.runs
    );
}

/// Issue 33, item 4: four threads of one redisync client hand the lock
/// among themselves (in-process handoffs, and through the store's queue
/// when a streak ends) while Redisson waits.
#[test]
fn java_turn_within_a_streak_beside_threads_of_one_client() {
    let sides = single();
    let name = unique_name("interop-streak-1");
    let client = sides.another_rust_client();
    let streaks = streaks_beside_rust_loops(&sides, &sides.java, &name, vec![client; 4]);
    assert_turn_within_a_streak(sides.label, "4 threads of 1 redisync client", &streaks);
}

/// Issue 33, item 4: four redisync clients (as four processes) hand the
/// lock around through the store's queue while Redisson waits.
#[test]
fn java_turn_within_a_streak_beside_rust_clients() {
    let sides = single();
    let name = unique_name("interop-streak-n");
    let clients = (0..4).map(|_| sides.another_rust_client()).collect();
    let streaks = streaks_beside_rust_loops(&sides, &sides.java, &name, clients);
    assert_turn_within_a_streak(sides.label, "4 redisync clients", &streaks);
}

/// A Redisson client behind a proxy that delivers everything the server
/// sends it [`SLOW_WAKER`] late (its unlock messages too), on `sides`'
/// server.
fn slow_java(sides: &Sides) -> (DelayProxy, JavaClient) {
    let server = sides.store.server();
    let proxy = DelayProxy::start(server.port());
    proxy.delay_replies(SLOW_WAKER);
    let java = Redisson::shared().single(&proxy.url(), &[]);
    (proxy, java)
}

/// As [`java_turn_within_a_streak_beside_threads_of_one_client`], with a
/// Redisson client that hears its unlock messages 20 ms late: the 100 ms
/// yield must hold that long.
#[test]
fn slow_java_turn_within_a_streak_beside_threads_of_one_client() {
    let sides = single();
    let (_proxy, java) = slow_java(&sides);
    let name = unique_name("interop-streak-slow-1");
    let client = sides.another_rust_client();
    let streaks = streaks_beside_rust_loops(&sides, &java, &name, vec![client; 4]);
    assert_turn_within_a_streak(
        sides.label,
        "4 threads of 1 client, slow Redisson",
        &streaks,
    );
}

/// As [`java_turn_within_a_streak_beside_rust_clients`], with a Redisson
/// client that hears its unlock messages 20 ms late, beside two clients
/// of two threads each (in-process handoffs and the store's queue).
#[test]
fn slow_java_turn_within_a_streak_beside_rust_clients() {
    let sides = single();
    let (_proxy, java) = slow_java(&sides);
    let name = unique_name("interop-streak-slow-n");
    let (a, b) = (sides.another_rust_client(), sides.another_rust_client());
    let clients = vec![a.clone(), b.clone(), a, b];
    let streaks = streaks_beside_rust_loops(&sides, &java, &name, clients);
    assert_turn_within_a_streak(
        sides.label,
        "2 clients x 2 threads, slow Redisson",
        &streaks,
    );
}

/// Redisson's `isLocked`, `remainTimeToLive` and `forceUnlock` on a lock
/// that redisync holds while a redisync waiter of another client is in the
/// queue: the queue does not disturb them, and the force-unlock's message
/// wakes the queued waiter, which takes the lock.
#[test]
fn java_force_unlock_wakes_a_queued_rust_waiter() {
    let sides = single();
    let name = unique_name("interop-queued-force");
    let holder = sides.another_rust_client();
    let guard = holder.lock(name.as_str()).lock().unwrap();
    let queued_client = sides.another_rust_client();
    let waiter = RustWaiter::start(queued_client.lock(name.as_str()));
    wait_until("the redisync waiter queued", SHOW_UP, || {
        queued(&sides, &name) == 1
    });
    waiter.assert_waiting("the queued redisync waiter");
    let java = sides.java.actor("admin");
    assert!(java.call(&format!("is_locked lock {name}")).bool());
    assert!(!java.call(&format!("held lock {name}")).bool());
    assert_eq!(java.call(&format!("hold_count lock {name}")).int(), 0);
    assert!(java.call(&format!("ttl lock {name}")).int() > 20_000);
    assert!(!java.call(&format!("try_lock lock {name} 0")).bool());
    let forced = java.call(&format!("force_unlock lock {name}"));
    assert!(forced.bool());
    let acquired = waiter.acquired_within(PROMPT * 2, "the queued redisync waiter");
    report(
        sides.label,
        "lock: Java forceUnlock -> queued Rust waiter of another client",
        ms_between(forced.start_us, acquired),
    );
    assert_eq!(queued(&sides, &name), 0, "the waiter left the queue");
    let err = guard.unlock().expect_err("the hold was forced away");
    assert!(err.is_not_held(), "{err}");
    // The waiter's hold is a plain one to Redisson.
    assert!(java.call(&format!("is_locked lock {name}")).bool());
    assert!(java.call(&format!("ttl lock {name}")).int() > 20_000);
    assert_eq!(
        common::hgetall(&mut sides.store.connection(&name), &name).len(),
        1
    );
    waiter.finish();
    assert!(!java.call(&format!("is_locked lock {name}")).bool());
    assert_eq!(java.call(&format!("ttl lock {name}")).int(), -2);
}

/// A Redisson holder's unlock wakes redisync waiters of two clients that
/// sit in the queue (they hear Redisson's `0`); the first one's release
/// then hands the lock to the other.
#[test]
fn java_unlock_wakes_rust_waiters_queued_from_two_clients() {
    let sides = single();
    let name = unique_name("interop-queued-wake");
    let java = sides.java.actor("holder");
    java.call(&format!("lock lock {name}"));
    let clients = [sides.another_rust_client(), sides.another_rust_client()];
    let mut waiters: Vec<RustWaiter> = clients
        .iter()
        .map(|client| RustWaiter::start(client.lock(name.as_str())))
        .collect();
    wait_until("both redisync waiters queued", SHOW_UP, || {
        queued(&sides, &name) == 2
    });
    for waiter in &waiters {
        waiter.assert_waiting("a queued redisync waiter");
    }
    assert!(java.call(&format!("ttl lock {name}")).int() > 20_000);
    let released = java.call(&format!("unlock lock {name}"));
    let mut from = released.start_us;
    for what in [
        "Java unlock -> first queued Rust waiter",
        "its release -> the other",
    ] {
        let deadline = Instant::now() + PROMPT * 2;
        let (i, acquired) = loop {
            if let Some(found) = waiters
                .iter()
                .enumerate()
                .find_map(|(i, waiter)| waiter.acquired.try_recv().ok().map(|at| (i, at)))
            {
                break found;
            }
            assert!(Instant::now() < deadline, "{what}: nobody woken");
            thread::sleep(Duration::from_millis(2));
        };
        report(
            sides.label,
            &format!("lock: {what}"),
            ms_between(from, acquired),
        );
        let waiter = waiters.remove(i);
        if let Some(other) = waiters.first() {
            other.assert_waiting("the other redisync waiter");
        }
        from = now_us();
        waiter.finish();
    }
    assert_eq!(queued(&sides, &name), 0);
    assert!(!java.call(&format!("is_locked lock {name}")).bool());
}

// ---------------------------------------------------------------------------
// The lease and the watchdog when a holder dies
// ---------------------------------------------------------------------------

#[test]
fn killed_java_holder_lease_runs_out_and_rust_takes_over() {
    let server = TestServer::start();
    // A driver of its own: it is killed.
    let driver = Redisson::spawn();
    let java = driver.single(
        &server.url(),
        &[&format!("watchdog_ms={}", SHORT_WATCHDOG.as_millis())],
    );
    let rust = Client::open(&server.url()).unwrap();
    killed_java_holder(&driver, &java, &rust, &Store::Single(server), "lock");
}

/// A Redisson holder of `kind` (watchdog [`SHORT_WATCHDOG`]) keeps its hold
/// past three of its timeouts while a Rust thread waits; its JVM killed,
/// the lease runs out and the Rust waiter takes over.
fn killed_java_holder(
    driver: &Redisson,
    java: &JavaClient,
    rust: &Client,
    store: &Store,
    kind: &str,
) {
    let name = unique_name("interop-kill-java");
    java.actor("holder").call(&format!("lock {kind} {name}"));
    let lock = rust_lock(rust, kind, &name);
    let started = Instant::now();
    assert!(lock.try_lock_for(SHORT_WATCHDOG * 3).unwrap().is_none());
    assert!(started.elapsed() >= SHORT_WATCHDOG * 3);
    assert!(pttl(&mut store.connection(&name), &name) > 0);
    // Killed, it renews no more: the lease runs out and Rust takes over.
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let guard = lock.try_lock_for(Duration::from_secs(20)).unwrap();
        tx.send(Instant::now()).unwrap();
        drop(guard.expect("the lease of the killed Java holder ran out"));
    });
    thread::sleep(STILL_WAITING);
    let killed = Instant::now();
    driver.kill();
    let taken = rx
        .recv_timeout(Duration::from_secs(25))
        .expect("Rust took over");
    handle.join().unwrap();
    let after = taken.duration_since(killed);
    let label = match store {
        Store::Single(_) => "redis",
        #[cfg(feature = "cluster")]
        Store::Cluster(_) => "cluster",
    };
    eprintln!(
        "[redisson interop] {label}: {kind}: Java holder killed -> Rust took over after {after:?} (watchdog {SHORT_WATCHDOG:?})"
    );
    assert!(
        after <= SHORT_WATCHDOG + Duration::from_secs(5),
        "{after:?}"
    );
}

#[test]
fn killed_rust_holder_lease_runs_out_and_java_takes_over() {
    let server = TestServer::start();
    let name = unique_name("interop-kill-rust");
    let mut child = ChildProcess::spawn(
        "holder",
        &[
            (URL_ENV, server.url()),
            (LOCK_ENV, name.clone()),
            (WATCHDOG_MS_ENV, SHORT_WATCHDOG.as_millis().to_string()),
        ],
    );
    child.expect_line(READY, READY_TIMEOUT);
    let java = Redisson::shared().single(&server.url(), &[]);
    let waiter = java.actor("waiter");
    // redisync's watchdog keeps its hold past three of its timeouts while
    // Redisson waits.
    let refused = waiter.call(&format!(
        "try_lock lock {name} {}",
        (SHORT_WATCHDOG * 3).as_millis()
    ));
    assert!(!refused.bool(), "the Rust child's watchdog kept its hold");
    // Redisson's tryLock may give up a few ms before its wait by its own
    // clock arithmetic (seen under load); what matters is that the hold
    // outlived its 1.5 s lease more than twice over while Redisson waited.
    let waited_us = refused.end_us - refused.start_us;
    assert!(
        waited_us >= (SHORT_WATCHDOG * 3 - Duration::from_millis(250)).as_micros() as u64,
        "Redisson gave up after {waited_us} µs"
    );
    waiter.send(&format!("try_lock lock {name} 20000"));
    waiter.assert_waiting(STILL_WAITING, "Redisson's tryLock");
    let killed = now_us();
    child.kill();
    let taken = waiter.reply_within(Duration::from_secs(25));
    assert!(taken.bool(), "the lease of the killed Rust holder ran out");
    let after = ms_between(killed, taken.end_us);
    eprintln!(
        "[redisson interop] redis: Rust holder killed -> Java took over after {after:.0} ms (watchdog {SHORT_WATCHDOG:?})"
    );
    assert!(after <= (SHORT_WATCHDOG + Duration::from_secs(5)).as_millis() as f64);
    waiter.call(&format!("unlock lock {name}"));
}

// ---------------------------------------------------------------------------
// The fair lock
// ---------------------------------------------------------------------------

/// Rust holds the fair lock; Java, Rust, Java, Rust queue in that order;
/// each release hands it to the next in the queue, across the two.
fn fair_lock_keeps_fifo(sides: &Sides) {
    let name = unique_name("interop-fair");
    let lock = sides.rust.fair_lock(name.as_str());
    let guard = lock.lock().unwrap();
    let java1 = sides.java.actor("fair1");
    java1.send(&format!("lock fair {name}"));
    sides.await_waiters("fair", &name, 1);
    let rust1 = RustWaiter::start(lock.clone());
    sides.await_waiters("fair", &name, 2);
    let java2 = sides.java.actor("fair2");
    java2.send(&format!("lock fair {name}"));
    sides.await_waiters("fair", &name, 3);
    let rust2 = RustWaiter::start(lock);
    sides.await_waiters("fair", &name, 4);

    let released = now_us();
    guard.unlock().unwrap();
    let got = java1.reply_within(PROMPT * 2);
    report(
        sides.label,
        "fair: Rust release -> first queued (Java)",
        ms_between(released, got.end_us),
    );
    rust1.assert_waiting("the second in the queue");
    java2.assert_waiting(Duration::ZERO, "the third in the queue");

    let released = java1.call(&format!("unlock fair {name}"));
    let got = rust1.acquired_within(PROMPT * 2, "the second in the queue (Rust)");
    report(
        sides.label,
        "fair: Java release -> next queued (Rust)",
        ms_between(released.start_us, got),
    );
    java2.assert_waiting(STILL_WAITING, "the third in the queue");

    let released = now_us();
    rust1.finish();
    let got = java2.reply_within(PROMPT * 2);
    report(
        sides.label,
        "fair: Rust release -> next queued (Java)",
        ms_between(released, got.end_us),
    );
    rust2.assert_waiting("the fourth in the queue");

    let released = java2.call(&format!("unlock fair {name}"));
    let got = rust2.acquired_within(PROMPT * 2, "the fourth in the queue (Rust)");
    report(
        sides.label,
        "fair: Java release -> next queued (Rust)",
        ms_between(released.start_us, got),
    );
    rust2.finish();
    assert_eq!(sides.waiters("fair", &name), 0, "the queue is empty");
}

#[test]
fn fair_lock_keeps_fifo_across_both() {
    fair_lock_keeps_fifo(&single());
}

/// Issue 22, item 5: redisync hands the fair lock outright among its own
/// clients, and a Redisson waiter queued among them still gets it in FIFO
/// order. A holder in one redisync client; queued after it a waiter in a
/// second client, then Java, then a waiter in a third client. The first
/// unlock hands the lock to the second client's waiter (outright: its own
/// channel carries `h:...`, which Java never sees); that waiter's unlock
/// finds Java at the head, which is never handed a hold, only told `0` on
/// its channel, and takes the lock itself; Java's unlock then wakes the
/// third client's waiter.
#[test]
fn fair_fifo_with_a_java_waiter_behind_a_handed_redisync_waiter() {
    let sides = single();
    let url = match &sides.store {
        Store::Single(server) => server.url(),
        #[cfg(feature = "cluster")]
        Store::Cluster(_) => unreachable!("single() is one server"),
    };
    let name = unique_name("interop-fair-handed");
    let (b, c) = (Client::open(&url).unwrap(), Client::open(&url).unwrap());
    let guard = sides.rust.fair_lock(name.as_str()).lock().unwrap();
    let rust_b = RustWaiter::start(b.fair_lock(name.as_str()));
    sides.await_waiters("fair", &name, 1);
    let java = sides.java.actor("fair-handed");
    java.send(&format!("lock fair {name}"));
    sides.await_waiters("fair", &name, 2);
    let rust_c = RustWaiter::start(c.fair_lock(name.as_str()));
    sides.await_waiters("fair", &name, 3);

    let released = now_us();
    guard.unlock().unwrap();
    let got = rust_b.acquired_within(PROMPT * 2, "the first in the queue (Rust, another client)");
    report(
        sides.label,
        "fair: Rust release -> first queued (Rust, another client, handed)",
        ms_between(released, got),
    );
    java.assert_waiting(STILL_WAITING, "Java, second in the queue");
    rust_c.assert_waiting("the third in the queue");
    // The handed hold is the waiter's alone: Java is still queued, not holding.
    assert_eq!(
        sides.waiters("fair", &name),
        2,
        "Java and the third still queued"
    );

    let released = now_us();
    rust_b.finish();
    let got = java.reply_within(PROMPT * 2);
    report(
        sides.label,
        "fair: Rust release (handed hold) -> next queued (Java)",
        ms_between(released, got.end_us),
    );
    rust_c.assert_waiting("the third in the queue");

    let released = java.call(&format!("unlock fair {name}"));
    let got = rust_c.acquired_within(PROMPT * 2, "the third in the queue (Rust)");
    report(
        sides.label,
        "fair: Java release -> next queued (Rust, third client)",
        ms_between(released.start_us, got),
    );
    rust_c.finish();
    assert_eq!(sides.waiters("fair", &name), 0, "the queue is empty");
    assert!(!b.fair_lock(name.as_str()).is_locked().unwrap());
}

#[test]
fn fair_lock_excludes_under_contention() {
    let sides = single();
    contended_counter(&sides, "fair", &unique_name("interop-fair-count"), 50);
}

// ---------------------------------------------------------------------------
// The read-write lock
// ---------------------------------------------------------------------------

#[test]
fn read_write_lock_readers_share_and_exclude_writers_across_both() {
    let sides = single();
    let name = unique_name("interop-rw");
    let rw = sides.rust.read_write_lock(name.as_str());
    let reader = sides.java.actor("reader");
    let writer = sides.java.actor("writer");

    // A Rust reader and a Java reader share; writers on both sides wait.
    let rust_read = rw.read_lock().lock().unwrap();
    assert!(
        reader.call(&format!("try_lock read {name} 0")).bool(),
        "readers share"
    );
    assert!(!writer.call(&format!("try_lock write {name} 200")).bool());
    let other_rust = sides.another_rust_client();
    assert!(
        other_rust
            .read_write_lock(name.as_str())
            .write_lock()
            .try_lock_for(Duration::from_millis(200))
            .unwrap()
            .is_none()
    );
    writer.send(&format!("lock write {name}"));
    sides.await_waiters("write", &name, 1);
    reader.call(&format!("unlock read {name}"));
    writer.assert_waiting(STILL_WAITING, "the Java writer while Rust reads");
    let released = now_us();
    rust_read.unlock().unwrap();
    let got = writer.reply_within(PROMPT * 2);
    report(
        sides.label,
        "read-write: Rust read release -> Java writer",
        ms_between(released, got.end_us),
    );

    // The Java writer excludes Rust readers and writers; its release wakes
    // a Rust reader, and then readers share again.
    assert!(rw.read_lock().try_lock().unwrap().is_none());
    assert!(rw.write_lock().try_lock().unwrap().is_none());
    let waiter = RustWaiter::start(rw.read_lock());
    sides.await_waiters("read", &name, 1);
    waiter.assert_waiting("the Rust reader while Java writes");
    assert!(
        !reader.call(&format!("try_lock read {name} 0")).bool(),
        "the writer excludes other readers"
    );
    let released = writer.call(&format!("unlock write {name}"));
    let got = waiter.acquired_within(PROMPT * 2, "the Rust reader");
    report(
        sides.label,
        "read-write: Java write release -> Rust reader",
        ms_between(released.start_us, got),
    );
    assert!(
        reader.call(&format!("try_lock read {name} 0")).bool(),
        "readers share"
    );
    assert!(!writer.call(&format!("try_lock write {name} 0")).bool());
    reader.call(&format!("unlock read {name}"));
    waiter.finish();
    assert!(writer.call(&format!("try_lock write {name} 0")).bool());
    writer.call(&format!("unlock write {name}"));
}

#[test]
fn write_lock_excludes_under_contention() {
    let sides = single();
    contended_counter(&sides, "write", &unique_name("interop-write-count"), 50);
}

// ---------------------------------------------------------------------------
// Semaphores
// ---------------------------------------------------------------------------

#[test]
fn semaphore_permits_are_shared_never_over_granted_and_releases_wake() {
    let sides = single();
    let name = unique_name("interop-sem");
    let sem = sides.rust.semaphore(name.as_str());
    let a = sides.java.actor("a");
    let b = sides.java.actor("b");
    assert!(sem.try_set_permits(3).unwrap());
    assert!(
        !a.call(&format!("sem_set {name} 5")).bool(),
        "already set by Rust"
    );
    a.call(&format!("acquire {name} 2"));
    assert!(sem.try_acquire(2).unwrap().is_none(), "only 1 left");
    assert_eq!(sem.available_permits().unwrap(), 1);
    let permit = sem.acquire(1).unwrap();
    assert_eq!(a.call(&format!("available {name}")).int(), 0);
    assert!(!b.call(&format!("try_acquire {name} 1 0")).bool());

    b.send(&format!("acquire {name} 1"));
    wait_until("the Java acquirer subscribed", SHOW_UP, || {
        sides.store.subscribers(&format!("redisson_sc:{{{name}}}")) >= 1
    });
    b.assert_waiting(STILL_WAITING, "Redisson's acquire");
    let released = now_us();
    permit.release().unwrap();
    let got = b.reply_within(PROMPT * 2);
    report(
        sides.label,
        "semaphore: Rust release -> Java acquire",
        ms_between(released, got.end_us),
    );

    a.call(&format!("release {name} 2"));
    // 2 free, Java b holds 1: Rust's acquire(3) waits for b's release.
    let (tx, rx) = mpsc::channel();
    let waiting = sem.clone();
    let handle = thread::spawn(move || {
        let permits = waiting.acquire(3).unwrap();
        tx.send(now_us()).unwrap();
        permits.release().unwrap();
    });
    wait_until("the Rust acquirer subscribed", SHOW_UP, || {
        sides.store.subscribers(&format!("redisson_sc:{{{name}}}")) >= 1
    });
    assert!(
        rx.recv_timeout(STILL_WAITING).is_err(),
        "3 permits are not free"
    );
    let released = b.call(&format!("release {name} 1"));
    let got = rx
        .recv_timeout(PROMPT * 2)
        .expect("the Rust acquire was woken");
    report(
        sides.label,
        "semaphore: Java release -> Rust acquire",
        ms_between(released.start_us, got),
    );
    handle.join().unwrap();
    assert_eq!(sem.available_permits().unwrap(), 3);
    assert_eq!(a.call(&format!("available {name}")).int(), 3);
}

#[test]
fn semaphore_never_over_grants_under_contention() {
    let sides = single();
    let name = unique_name("interop-sem-count");
    let inside = format!("{{{name}}}:inside");
    let permits = 2;
    let rounds = 100;
    assert!(
        sides
            .rust
            .semaphore(name.as_str())
            .try_set_permits(permits)
            .unwrap()
    );
    let javas: Vec<Actor> = (0..2).map(|i| sides.java.actor(&format!("s{i}"))).collect();
    for java in &javas {
        java.send(&format!("sem_incr {name} {inside} {permits} {rounds}"));
    }
    let rusts: Vec<_> = (0..2)
        .map(|_| {
            let sem = sides.rust.semaphore(name.as_str());
            let mut conn = sides.store.connection(&inside);
            let inside = inside.clone();
            thread::spawn(move || {
                let mut over = 0;
                for _ in 0..rounds {
                    let permit = sem.acquire(1).unwrap();
                    let out: u64 = redis::cmd("INCR").arg(&inside).query(&mut conn).unwrap();
                    if out > permits {
                        over += 1;
                    }
                    let _: i64 = redis::cmd("DECR").arg(&inside).query(&mut conn).unwrap();
                    permit.release().unwrap();
                }
                over
            })
        })
        .collect();
    let rust_over: u64 = rusts.into_iter().map(|h| h.join().unwrap()).sum();
    let java_over: i64 = javas
        .iter()
        .map(|java| java.reply_within(Duration::from_secs(120)).int())
        .sum();
    assert_eq!(
        (rust_over, java_over),
        (0, 0),
        "more than {permits} permits out at once"
    );
    assert_eq!(
        sides
            .rust
            .semaphore(name.as_str())
            .available_permits()
            .unwrap(),
        permits as i64
    );
    eprintln!(
        "[redisson interop] redis: semaphore: {} acquisitions (2 Java x {rounds} + 2 Rust x {rounds}) of {permits} permits, none over-granted",
        4 * rounds
    );
}

#[test]
fn expirable_semaphore_leases_return_and_releases_wake_across_both() {
    let sides = single();
    let name = unique_name("interop-psem");
    let sem = sides.rust.permit_expirable_semaphore(name.as_str());
    let a = sides.java.actor("a");
    let b = sides.java.actor("b");
    let long = Duration::from_secs(30);
    assert!(sem.try_set_permits(2).unwrap());
    assert!(
        !a.call(&format!("pset {name} 5")).bool(),
        "already set by Rust"
    );

    // Java takes one with a 1 s lease, Rust the other: none is left.
    let java_permit = a.call(&format!("pacquire {name} 1000"));
    let rust_first = sem.acquire_id(long).unwrap();
    assert!(sem.try_acquire_id(long).unwrap().is_none(), "over-granted");
    assert_eq!(
        a.call(&format!("ptry_acquire {name} 0 30000")).value,
        "-",
        "over-granted"
    );
    assert_eq!(a.call(&format!("pavailable {name}")).int(), 0);
    // Java's leased permit returns when its lease runs out; Rust gets it.
    let rust_second = sem
        .try_acquire_id_for(Duration::from_secs(10), long)
        .unwrap()
        .expect("the Java permit's lease ran out");
    let taken = now_us();
    assert!(
        ms_between(java_permit.end_us, taken) >= 900.0,
        "taken before the Java lease ran out"
    );
    assert!(
        !a.call(&format!("ptry_release {name} {}", java_permit.value))
            .bool(),
        "the expired id is gone"
    );

    // Rust's release wakes a Java acquirer.
    b.send(&format!("pacquire {name} 30000"));
    wait_until("the Java acquirer subscribed", SHOW_UP, || {
        sides.store.subscribers(&format!("redisson_sc:{{{name}}}")) >= 1
    });
    b.assert_waiting(STILL_WAITING, "Redisson's acquire");
    let released = now_us();
    sem.release(&rust_first).unwrap();
    let java_second = b.reply_within(PROMPT * 2);
    report(
        sides.label,
        "permit-expirable: Rust release -> Java acquire",
        ms_between(released, java_second.end_us),
    );

    // Java releases a permit Rust took (ids are not owned) and so wakes a
    // Rust acquirer; Rust releases the one Java took.
    let (tx, rx) = mpsc::channel();
    let waiting = sem.clone();
    let handle = thread::spawn(move || {
        let id = waiting
            .try_acquire_id_for(Duration::from_secs(20), long)
            .unwrap();
        tx.send((now_us(), id)).unwrap();
    });
    wait_until("the Rust acquirer subscribed", SHOW_UP, || {
        sides.store.subscribers(&format!("redisson_sc:{{{name}}}")) >= 1
    });
    assert!(rx.recv_timeout(STILL_WAITING).is_err());
    let released = a.call(&format!("prelease {name} {}", rust_second.as_str()));
    let (got, third) = rx
        .recv_timeout(PROMPT * 2)
        .expect("the Rust acquire was woken");
    let third = third.expect("a permit");
    handle.join().unwrap();
    report(
        sides.label,
        "permit-expirable: Java release -> Rust acquire",
        ms_between(released.start_us, got),
    );
    sem.release(&PermitId::from(java_second.value)).unwrap();
    assert_eq!(a.call(&format!("pavailable {name}")).int(), 1);
    sem.release(&third).unwrap();
    assert_eq!(sem.available_permits().unwrap(), 2);

    // Rust's leased permits return to a waiting Java acquirer.
    let _short1 = sem.acquire_id(Duration::from_millis(1000)).unwrap();
    let _short2 = sem.acquire_id(Duration::from_millis(1000)).unwrap();
    let got = a.call(&format!("ptry_acquire {name} 10000 30000"));
    assert_ne!(got.value, "-", "the Rust permits' leases ran out");
    a.call(&format!("prelease {name} {}", got.value));
}

// ---------------------------------------------------------------------------
// The latch
// ---------------------------------------------------------------------------

#[test]
fn latch_opens_waiters_on_both_sides() {
    let sides = single();
    let name = unique_name("interop-latch");
    let latch = sides.rust.count_down_latch(name.as_str());
    let java_waiter = sides.java.actor("waiter");
    let java_counter = sides.java.actor("counter");
    let channel = format!("redisson_countdownlatch__channel__{{{name}}}");

    // Round 0: Rust counts down first, Java last; round 1 the reverse.
    for (round, last) in [(0, "Java"), (1, "Rust")] {
        assert!(latch.try_set_count(2).unwrap());
        assert!(
            !java_counter.call(&format!("latch_set {name} 5")).bool(),
            "already set"
        );
        java_waiter.send(&format!("await {name} 20000"));
        let (tx, rx) = mpsc::channel();
        let waiting = latch.clone();
        let handle = thread::spawn(move || {
            let opened = waiting.wait_for(Duration::from_secs(20)).unwrap();
            tx.send((now_us(), opened)).unwrap();
        });
        wait_until("both waiters subscribed", SHOW_UP, || {
            sides.store.subscribers(&channel) >= 2
        });
        // The first count-down, from the other side, opens nothing.
        if last == "Java" {
            latch.count_down().unwrap();
        } else {
            java_counter.call(&format!("count_down {name}"));
        }
        assert_eq!(latch.count().unwrap(), 1);
        assert_eq!(java_counter.call(&format!("count {name}")).int(), 1);
        java_waiter.assert_waiting(STILL_WAITING, "the Java waiter at count 1");
        assert!(rx.try_recv().is_err(), "the Rust waiter at count 1");
        let opened_at = if last == "Java" {
            java_counter.call(&format!("count_down {name}")).start_us
        } else {
            let at = now_us();
            latch.count_down().unwrap();
            at
        };
        let java_open = java_waiter.reply_within(PROMPT * 2);
        assert!(java_open.bool());
        let (rust_open, opened) = rx.recv_timeout(PROMPT * 2).expect("the Rust waiter opened");
        assert!(opened);
        handle.join().unwrap();
        report(
            sides.label,
            &format!("latch (round {round}): {last} count_down -> Java waiter"),
            ms_between(opened_at, java_open.end_us),
        );
        report(
            sides.label,
            &format!("latch (round {round}): {last} count_down -> Rust waiter"),
            ms_between(opened_at, rust_open),
        );
        assert_eq!(latch.count().unwrap(), 0);
    }
}

// ---------------------------------------------------------------------------
// The fenced lock
// ---------------------------------------------------------------------------

#[test]
fn fencing_tokens_increase_across_both() {
    let sides = single();
    let name = unique_name("interop-fenced");
    let lock = sides.rust.fenced_lock(name.as_str());
    let java = sides.java.actor("a");
    let mut tokens = Vec::new();

    let token = java.call(&format!("lock fenced {name}")).int();
    tokens.push(token as u64);
    assert!(lock.try_lock().unwrap().is_none());
    java.call(&format!("unlock fenced {name}"));
    let guard = lock.lock().unwrap();
    tokens.push(guard.token().expect("a fenced guard has a token"));
    // Rust's release wakes a Java fenced waiter, which gets the next token.
    java.send(&format!("lock fenced {name}"));
    sides.await_waiters("fenced", &name, 1);
    java.assert_waiting(STILL_WAITING, "Redisson's lockAndGetToken");
    let released = now_us();
    guard.unlock().unwrap();
    let got = java.reply_within(PROMPT * 2);
    report(
        sides.label,
        "fenced: Rust release -> Java waiter",
        ms_between(released, got.end_us),
    );
    tokens.push(got.int() as u64);
    java.call(&format!("unlock fenced {name}"));
    let guard = lock.lock().unwrap();
    tokens.push(guard.token().unwrap());
    guard.unlock().unwrap();
    let token = java.call(&format!("try_lock fenced {name} 1000")).int();
    tokens.push(token as u64);
    java.call(&format!("unlock fenced {name}"));
    eprintln!("[redisson interop] redis: fenced tokens Java, Rust, Java, Rust, Java: {tokens:?}");
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must increase: {tokens:?}"
    );
    // Where they differ: Redisson's counter starts at 1 and adds 1;
    // redisync's INCR is raised to the server clock in µs, and Redisson's
    // next INCR carries on from there.
    assert_eq!(tokens[0], 1, "Redisson's first token on a fresh counter");
    let clock_us = now_us();
    assert!(
        tokens[1] > clock_us - 600_000_000 && tokens[1] <= clock_us + 600_000_000,
        "redisync's token is the server clock in µs: {tokens:?}"
    );
    assert_eq!(
        tokens[2],
        tokens[1] + 1,
        "Redisson adds 1 to redisync's token"
    );
    java_release_wakes_rust(&sides, "fenced", &name);
}

// ---------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------

#[test]
fn name_mapper_and_name_prefix_that_match_interoperate_and_others_do_not_collide() {
    let server = TestServer::start();
    let driver = Redisson::shared();
    let java = driver.single(&server.url(), &["prefix=app1:"]);
    let same = Client::builder()
        .redis_url(server.url())
        .name_prefix("app1:")
        .build()
        .unwrap();
    let other = Client::builder()
        .redis_url(server.url())
        .name_prefix("app2:")
        .build()
        .unwrap();
    let plain = Client::open(&server.url()).unwrap();
    let holder = java.actor("holder");
    holder.call("lock lock orders");
    let mut conn = server.connection();
    let exists: i64 = redis::cmd("EXISTS")
        .arg("app1:orders")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        exists, 1,
        "Redisson's name mapper put the lock at app1:orders"
    );

    // Same prefix: the same lock, and Java's release wakes the Rust waiter.
    let lock = same.lock("orders");
    assert!(lock.is_locked().unwrap());
    assert!(lock.try_lock().unwrap().is_none());
    let waiter = RustWaiter::start(lock);
    wait_until("the Rust waiter subscribed", SHOW_UP, || {
        numsub(
            &mut server.connection(),
            "redisson_lock__channel:{app1:orders}",
        ) >= 1
    });
    waiter.assert_waiting("redisync's lock() under the same prefix");
    let released = holder.call("unlock lock orders");
    let got = waiter.acquired_within(PROMPT * 2, "the Rust waiter under the same prefix");
    report(
        "redis",
        "lock: Java (NameMapper app1:) release -> Rust (name_prefix app1:)",
        ms_between(released.start_us, got),
    );
    assert!(
        !holder.call("try_lock lock orders 0").bool(),
        "Rust holds app1:orders now"
    );
    waiter.finish();

    // Other prefixes (or none): other objects.
    holder.call("lock lock orders");
    let elsewhere = other
        .lock("orders")
        .try_lock()
        .unwrap()
        .expect("app2:orders is another lock");
    let unprefixed = plain
        .lock("orders")
        .try_lock()
        .unwrap()
        .expect("orders is another lock");
    for key in ["app1:orders", "app2:orders", "orders"] {
        let exists: i64 = redis::cmd("EXISTS").arg(key).query(&mut conn).unwrap();
        assert_eq!(exists, 1, "{key} is held");
    }
    drop((elsewhere, unprefixed));
    // The latch under the same prefix is one latch too.
    let latch = same.count_down_latch("ready");
    assert!(latch.try_set_count(1).unwrap());
    assert_eq!(holder.call("count ready").int(), 1);
    holder.call("count_down ready");
    assert!(latch.wait_for(Duration::from_secs(5)).unwrap());
    holder.call("unlock lock orders");
}

// ---------------------------------------------------------------------------
// The cluster: lock and fair lock with sharded pub/sub
// ---------------------------------------------------------------------------

#[cfg(feature = "cluster")]
#[test]
fn cluster_lock_wakes_and_excludes_across_both() {
    let sides = cluster();
    let Store::Cluster(cluster) = &sides.store else {
        panic!("a cluster store")
    };
    // One name per master, so every node's SPUBLISH is heard on both sides.
    for name in cluster.names_on_every_master("interop-cl-wake") {
        rust_release_wakes_java(&sides, "lock", &name);
        java_release_wakes_rust(&sides, "lock", &name);
    }
    contended_counter(&sides, "lock", &unique_name("interop-cl-count"), 50);
    reentrancy_across(&sides);
    force_unlock_across(&sides, "lock");
}

#[cfg(feature = "cluster")]
#[test]
fn cluster_fair_lock_keeps_fifo_and_excludes_across_both() {
    let sides = cluster();
    fair_lock_keeps_fifo(&sides);
    contended_counter(&sides, "fair", &unique_name("interop-cl-fair-count"), 30);
    force_unlock_across(&sides, "fair");
    java_waiter_woken_after_rust_handoffs(&sides, "fair");
}

#[cfg(feature = "cluster")]
#[test]
fn cluster_killed_java_holders_lease_runs_out_and_rust_takes_over() {
    let cluster = common::cluster::shared();
    let rust = cluster.client();
    for kind in ["lock", "fair"] {
        let driver = Redisson::spawn();
        let java = driver.cluster(
            &cluster.urls(),
            &[&format!("watchdog_ms={}", SHORT_WATCHDOG.as_millis())],
        );
        killed_java_holder(
            &driver,
            &java,
            &rust,
            &Store::Cluster(cluster.clone()),
            kind,
        );
    }
}

// ---------------------------------------------------------------------------
// The spin lock (waiters poll with a backoff, no pub/sub)
// ---------------------------------------------------------------------------

#[test]
fn spin_lock_excludes_under_contention_and_against_the_plain_lock() {
    let sides = single();
    let name = unique_name("interop-spin");
    contended_counter(&sides, "spin", &name, 30);
    // Redisson's RSpinLock and the plain lock are one hash: they exclude
    // each other on both sides.
    let java = sides.java.actor("a");
    java.call(&format!("lock spin {name}"));
    assert!(sides.rust.lock(name.as_str()).try_lock().unwrap().is_none());
    assert!(
        sides
            .rust
            .spin_lock(name.as_str())
            .try_lock()
            .unwrap()
            .is_none()
    );
    java.call(&format!("unlock spin {name}"));
    let guard = sides.rust.spin_lock(name.as_str()).lock().unwrap();
    assert!(!java.call(&format!("try_lock lock {name} 0")).bool());
    assert!(!java.call(&format!("try_lock spin {name} 0")).bool());
    guard.unlock().unwrap();
    assert!(java.call(&format!("try_lock lock {name} 0")).bool());
    java.call(&format!("unlock lock {name}"));
}
