//! Connection faults under a contended workload ("Keep the lock through
//! connection faults").
//!
//! Every fault runs on the same workload ([`Workload`]): several `Client`s,
//! several threads each, incrementing a counter in a fenced downstream store
//! non-atomically (read, pause, write) inside one (usually fenced) lock,
//! with short watchdog timeouts so leases matter. Every critical section is
//! recorded in a [`History`] and checked by its one checker
//! (tests/common/history.rs): no overlap a fault does not explain, no token
//! going backwards, no stale write accepted. Every call is recorded with its
//! duration and outcome ([`Calls`]) so a test can ask "did any call fail
//! after the fault healed?" and "did every call keep to its bound?".
//!
//! Children (a fenced holder process, the client side of a network
//! partition) are this binary re-executed as `child_role_entrypoint`
//! (tests/common/child.rs).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::child::{
    self, ChildProcess, LOCK_ENV, READY, READY_TIMEOUT, ROLE_ENV, URL_ENV, WATCHDOG_MS_ENV, WRITE,
    WRITE_RESULT, announce, env, env_ms, ms, parent_lines, raw_connection, spawn_fenced_holder,
    store_data_key, store_write,
};
use common::history::{self, Excuse, FencedStore, History, Section, Verdict, mono_ns, ms_between};
use common::netns::{NetnsServer, Partition, SERVER_ADDR};
use common::{TestServer, hgetall, unique_name, wait_until};
use redisync::{Client, EventHandler, LockLostEvent};

/// Connection timeout of the workload's clients.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Response timeout of the workload's clients.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// What a call may take beyond its own bound on a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(1);
/// The bound of an `unlock()` (it has no wait of its own): a response
/// timeout and one retry, plus [`SLACK`].
const UNLOCK_BOUND: Duration = Duration::from_secs(3);
/// How long the workload's `try_lock_for` waits.
const WAIT: Duration = Duration::from_secs(2);
/// How long a section lasts (between the store's read and its write).
const HOLD: Duration = Duration::from_millis(2);

// ---------------------------------------------------------------------------
// Child roles
// ---------------------------------------------------------------------------

/// NOT A TEST OF ITS OWN: the entry point of the child processes the tests
/// below spawn (see tests/common/child.rs). Without `REDISYNC_CHILD_ROLE` it
/// returns at once.
#[test]
fn child_role_entrypoint() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    match role.as_str() {
        "fenced_holder" => child::child_fenced_holder(),
        "partition_workload" => child_partition_workload(),
        other => panic!("unknown {ROLE_ENV}={other:?}"),
    }
}

// ---------------------------------------------------------------------------
// What the clients report: lost-lock events, calls
// ---------------------------------------------------------------------------

/// Records every `on_lock_lost` event (when, which lock, why).
#[derive(Debug, Default)]
struct Events {
    lost: Mutex<Vec<(u64, String, String)>>,
}

impl EventHandler for Events {
    fn on_lock_lost(&self, event: &LockLostEvent) {
        self.lost.lock().unwrap().push((
            mono_ns(),
            event.name().to_owned(),
            event.reason().to_owned(),
        ));
    }
}

impl Events {
    fn lost(&self) -> Vec<(u64, String, String)> {
        self.lost.lock().unwrap().clone()
    }

    fn lost_of(&self, name: &str) -> usize {
        self.lost().iter().filter(|(_, n, _)| n == name).count()
    }
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ok,
    /// `try_lock_for` timed out (`Ok(None)`).
    NotAcquired,
    Err(String),
}

/// One call of the workload (or a probe).
#[derive(Debug, Clone)]
struct Call {
    op: String,
    client: String,
    start_ns: u64,
    end_ns: u64,
    bound: Duration,
    outcome: Outcome,
}

impl Call {
    fn took(&self) -> Duration {
        Duration::from_nanos(self.end_ns.saturating_sub(self.start_ns))
    }

    fn is_err(&self) -> bool {
        matches!(self.outcome, Outcome::Err(_))
    }

    fn to_line(&self) -> String {
        let (kind, message) = match &self.outcome {
            Outcome::Ok => ("ok", String::new()),
            Outcome::NotAcquired => ("none", String::new()),
            Outcome::Err(m) => ("err", m.replace('\n', " | ")),
        };
        format!(
            "{} {} {} {} {} {kind} {message}",
            self.op,
            self.client,
            self.start_ns,
            self.end_ns,
            self.bound.as_millis()
        )
    }

    fn from_line(line: &str) -> Call {
        let words: Vec<&str> = line.splitn(7, ' ').collect();
        assert!(words.len() >= 6, "bad call line {line:?}");
        let num = |w: &str| -> u64 {
            w.parse()
                .unwrap_or_else(|_| panic!("bad call line {line:?}"))
        };
        Call {
            op: words[0].to_owned(),
            client: words[1].to_owned(),
            start_ns: num(words[2]),
            end_ns: num(words[3]),
            bound: Duration::from_millis(num(words[4])),
            outcome: match words[5] {
                "ok" => Outcome::Ok,
                "none" => Outcome::NotAcquired,
                _ => Outcome::Err(words.get(6).copied().unwrap_or("").to_owned()),
            },
        }
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} by {} at {} took {:?} (bound {:?}): {:?}",
            self.op,
            self.client,
            self.start_ns,
            self.took(),
            self.bound,
            self.outcome
        )
    }
}

#[derive(Debug, Default)]
struct Calls {
    calls: Mutex<Vec<Call>>,
}

impl Calls {
    /// Runs `call` and records how long it took and how it ended.
    fn run<T>(
        &self,
        op: &str,
        client: &str,
        bound: Duration,
        call: impl FnOnce() -> redisync::Result<Option<T>>,
    ) -> redisync::Result<Option<T>> {
        let start_ns = mono_ns();
        let result = call();
        let end_ns = mono_ns();
        let outcome = match &result {
            Ok(Some(_)) => Outcome::Ok,
            Ok(None) => Outcome::NotAcquired,
            Err(e) => Outcome::Err(e.to_string()),
        };
        self.calls.lock().unwrap().push(Call {
            op: op.to_owned(),
            client: client.to_owned(),
            start_ns,
            end_ns,
            bound,
            outcome,
        });
        result
    }

    fn all(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

/// The failed calls of `calls` that started at or after `ns`.
fn errors_since(calls: &[Call], ns: u64) -> Vec<Call> {
    calls
        .iter()
        .filter(|c| c.start_ns >= ns && c.is_err())
        .cloned()
        .collect()
}

/// The failed expectations of one test, collected so that a failing test
/// reports every one of them, not only the first (the library's engineer
/// sees everything there is to fix). `finish` panics if there is any.
#[derive(Debug)]
struct Checks {
    what: String,
    failed: Vec<String>,
}

impl Checks {
    fn new(what: &str) -> Checks {
        Checks {
            what: what.to_owned(),
            failed: Vec::new(),
        }
    }

    fn check(&mut self, ok: bool, message: impl FnOnce() -> String) {
        if !ok {
            let message = message();
            eprintln!("{}: FAILED: {message}", self.what);
            self.failed.push(message);
        }
    }

    /// Every call kept to its bound; returns the slowest.
    fn bounded(&mut self, calls: &[Call]) -> Duration {
        let over: Vec<String> = calls
            .iter()
            .filter(|c| c.took() > c.bound)
            .map(ToString::to_string)
            .collect();
        let slowest = calls.iter().map(Call::took).max().unwrap_or_default();
        self.check(over.is_empty(), || {
            format!(
                "{} call(s) out of their bound (slowest {slowest:?}):\n{}",
                over.len(),
                over.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
            )
        });
        slowest
    }

    /// None of `errors` (calls that failed) exists.
    fn no_errors(&mut self, when: &str, errors: &[Call]) {
        self.check(errors.is_empty(), || {
            format!(
                "{when}: {} failed call(s):\n{}",
                errors.len(),
                errors
                    .iter()
                    .take(10)
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        });
    }

    /// The history's verdict has no violation.
    fn clean(&mut self, verdict: &Verdict) {
        self.check(verdict.violations.is_empty(), || {
            format!(
                "{} violation(s) in the history:\n{}",
                verdict.violations.len(),
                verdict
                    .violations
                    .iter()
                    .take(10)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        });
    }

    fn finish(self) {
        assert!(
            self.failed.is_empty(),
            "{}: {} failed check(s):\n- {}",
            self.what,
            self.failed.len(),
            self.failed.join("\n- ")
        );
    }
}

// ---------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------

/// Where the workload's counter lives.
enum Store {
    /// In this process.
    Local(FencedStore),
    /// On Redis, as tests/common/child.rs's `store_write` keeps it (shared
    /// with a fenced-holder child process).
    Redis { url: String, store: String },
}

impl Store {
    /// Reads the counter; `conn` is the thread's own connection (Redis).
    fn read(&self, conn: &mut Option<redis::Connection>) -> u64 {
        match self {
            Store::Local(store) => store.read(),
            Store::Redis { url, store } => {
                let conn = conn.get_or_insert_with(|| raw_connection(url));
                let value: Option<String> = redis::cmd("GET")
                    .arg(store_data_key(store))
                    .query(conn)
                    .expect("downstream store read");
                value.and_then(|v| v.parse().ok()).unwrap_or(0)
            }
        }
    }

    fn write(&self, conn: &mut Option<redis::Connection>, token: Option<u64>, value: u64) -> bool {
        match self {
            Store::Local(store) => store.write(token, value),
            Store::Redis { url, store } => {
                let conn = conn.get_or_insert_with(|| raw_connection(url));
                store_write(
                    conn,
                    store,
                    token.expect("a fenced lock"),
                    &value.to_string(),
                )
            }
        }
    }
}

/// Threads taking one lock over and over, recording every section and call.
struct Workload {
    stop: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    history: Arc<History>,
    calls: Arc<Calls>,
    store: Arc<Store>,
    threads: Vec<JoinHandle<()>>,
}

impl Workload {
    /// Starts `threads` threads on each of `clients`, on the lock `name`
    /// (fenced or not).
    fn start(
        clients: &[Client],
        threads: usize,
        name: &str,
        fenced: bool,
        store: Store,
    ) -> Workload {
        let mut workload = Workload {
            stop: Arc::default(),
            paused: Arc::default(),
            history: Arc::default(),
            calls: Arc::default(),
            store: Arc::new(store),
            threads: Vec::new(),
        };
        for (c, client) in clients.iter().enumerate() {
            for t in 0..threads {
                let lock = if fenced {
                    client.fenced_lock(name)
                } else {
                    client.lock(name)
                };
                let (stop, paused) = (Arc::clone(&workload.stop), Arc::clone(&workload.paused));
                let (history, calls) = (Arc::clone(&workload.history), Arc::clone(&workload.calls));
                let store = Arc::clone(&workload.store);
                let who = format!("c{c}");
                workload.threads.push(thread::spawn(move || {
                    let mut conn = None;
                    while !stop.load(Ordering::SeqCst) {
                        if paused.load(Ordering::SeqCst) {
                            thread::sleep(Duration::from_millis(10));
                            continue;
                        }
                        let got = calls.run("try_lock_for", &who, WAIT + SLACK, || {
                            lock.try_lock_for(WAIT)
                        });
                        let guard = match got {
                            Ok(Some(guard)) => guard,
                            Ok(None) => continue,
                            Err(_) => {
                                thread::sleep(Duration::from_millis(20));
                                continue;
                            }
                        };
                        let enter_ns = mono_ns();
                        let value = store.read(&mut conn);
                        thread::sleep(HOLD);
                        let accepted = store.write(&mut conn, guard.token(), value + 1);
                        let lost = guard.is_lost();
                        history.record(Section {
                            client: who.clone(),
                            thread: t,
                            token: guard.token(),
                            enter_ns,
                            exit_ns: mono_ns(),
                            lost,
                            write_accepted: Some(accepted),
                        });
                        let _ =
                            calls.run("unlock", &who, UNLOCK_BOUND, || guard.unlock().map(Some));
                    }
                }));
            }
        }
        workload
    }

    /// Waits (bounded) until `n` sections entered at or after `since`;
    /// returns when the first of them entered.
    fn await_sections(&self, what: &str, since: u64, n: usize, timeout: Duration) -> u64 {
        wait_until(what, timeout, || self.history.entered_since(since) >= n);
        self.history.first_entered_since(since).unwrap().enter_ns
    }

    /// Stops every thread (each finishes its current call) and joins them.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for handle in self.threads.drain(..) {
            handle.join().expect("a workload thread panicked");
        }
    }

    /// The local store's (writes accepted, writes refused, final value).
    fn local_counts(&self) -> (u64, u64, u64) {
        match &*self.store {
            Store::Local(store) => {
                let (accepted, refused) = store.counts();
                (accepted, refused, store.read())
            }
            Store::Redis { .. } => panic!("not a local store"),
        }
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}

/// A client of the workload on `url`.
fn client(url: &str, watchdog: Duration, events: &Arc<Events>) -> Client {
    Client::builder()
        .redis_url(url)
        .watchdog_timeout(watchdog)
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .event_handler(Arc::clone(events) as Arc<dyn EventHandler>)
        .build()
        .unwrap_or_else(|e| panic!("building a client on {url}: {e}"))
}

/// `n` clients on `url`, sharing one event recorder.
fn clients(url: &str, n: usize, watchdog: Duration) -> (Vec<Client>, Arc<Events>) {
    let events = Arc::new(Events::default());
    let clients = (0..n).map(|_| client(url, watchdog, &events)).collect();
    (clients, events)
}

/// Checks the history (with `excuses`) and prints a summary; with no
/// excused overlap the local counter lost no update.
fn check_history(checks: &mut Checks, workload: &Workload, excuses: &[Excuse]) -> Verdict {
    let what = checks.what.clone();
    let verdict = workload.history.check(excuses);
    let sections = workload.history.sections();
    let lost = sections.iter().filter(|s| s.lost).count();
    eprintln!(
        "{what}: {} sections, {lost} lost at exit, {} excused overlap(s), {} violation(s)",
        sections.len(),
        verdict.excused.len(),
        verdict.violations.len()
    );
    for text in verdict.excused.iter().take(3) {
        eprintln!("{what}: excused {text}");
    }
    checks.clean(&verdict);
    if verdict.excused.is_empty()
        && let Store::Local(_) = &*workload.store
    {
        let (accepted, refused, value) = workload.local_counts();
        checks.check(value == accepted, || {
            format!(
                "lost updates: counter {value} after {accepted} accepted writes \
                 (no overlap, {refused} refused writes)"
            )
        });
    }
    verdict
}

/// An excuse for the window `[from, to]` widened by `lease` on both sides
/// (a section that entered up to a lease before the fault may be overtaken).
fn excuse(why: &str, from_ns: u64, to_ns: u64, lease: Duration) -> Excuse {
    let lease = u64::try_from(lease.as_nanos()).unwrap();
    Excuse {
        from_ns: from_ns.saturating_sub(lease),
        to_ns: to_ns + lease,
        why: why.to_owned(),
    }
}

/// The lock hash's fields (holders) left after the run.
fn fields(server: &TestServer, name: &str) -> Vec<String> {
    hgetall(&mut server.connection(), name)
        .into_keys()
        .collect()
}

fn redis_cmd(server: &TestServer, args: &[&str]) -> redis::Value {
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command
        .query(&mut server.connection())
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

// ---------------------------------------------------------------------------
// The checker can fail
// ---------------------------------------------------------------------------

fn section(client: &str, token: u64, enter_ns: u64, exit_ns: u64, accepted: bool) -> Section {
    Section {
        client: client.to_owned(),
        thread: 0,
        token: Some(token),
        enter_ns,
        exit_ns,
        lost: false,
        write_accepted: Some(accepted),
    }
}

#[test]
fn history_checker_catches_an_overlap_unless_a_fault_explains_it() {
    let sections = [
        section("a", 1, 100, 200, true),
        section("b", 2, 150, 250, true),
    ];
    let verdict = history::check(&sections, &[]);
    assert_eq!(verdict.violations.len(), 1, "{verdict:?}");
    assert!(verdict.violations[0].contains("overlap"), "{verdict:?}");

    let pause = Excuse {
        from_ns: 120,
        to_ns: 130,
        why: "a pause".to_owned(),
    };
    let verdict = history::check(&sections, &[pause]);
    assert!(verdict.violations.is_empty(), "{verdict:?}");
    assert_eq!(verdict.excused.len(), 1);

    let mut knew = sections;
    knew[0].lost = true;
    assert!(history::check(&knew, &[]).violations.is_empty());

    let apart = [
        section("a", 1, 100, 200, true),
        section("b", 2, 200, 250, true),
    ];
    let verdict = history::check(&apart, &[]);
    assert!(
        verdict.violations.is_empty() && verdict.excused.is_empty(),
        "{verdict:?}"
    );
}

#[test]
fn history_checker_catches_a_backwards_token_and_a_stale_write() {
    let backwards = [
        section("a", 5, 100, 200, true),
        section("b", 3, 300, 400, false),
    ];
    let verdict = history::check(&backwards, &[]);
    assert_eq!(verdict.violations.len(), 1, "{verdict:?}");
    assert!(verdict.violations[0].contains("backwards"), "{verdict:?}");

    // Same token twice is backwards too (tokens are unique per acquisition).
    let repeated = [
        section("a", 5, 100, 200, true),
        section("b", 5, 300, 400, false),
    ];
    assert_eq!(history::check(&repeated, &[]).violations.len(), 1);

    // A stale write accepted after a newer one: flagged even when excused.
    let stale = [
        section("old", 1, 0, 500, true),
        section("new", 2, 100, 200, true),
        section("new", 3, 300, 400, true),
    ];
    let pause = Excuse {
        from_ns: 0,
        to_ns: 500,
        why: "a pause".to_owned(),
    };
    let verdict = history::check(&stale, std::slice::from_ref(&pause));
    assert!(
        verdict.violations.iter().any(|v| v.contains("stale write")),
        "{verdict:?}"
    );
    let mut refused = stale.clone();
    refused[0].write_accepted = Some(false);
    let verdict = history::check(&refused, &[pause]);
    assert!(verdict.violations.is_empty(), "{verdict:?}");

    let line = stale[0].to_line();
    assert_eq!(Section::from_line(&line), stale[0]);
}

#[test]
fn fenced_store_refuses_a_token_below_the_highest() {
    let store = FencedStore::new();
    assert!(store.write(Some(3), 1));
    assert!(store.write(Some(3), 2), "the same holder writes again");
    assert!(!store.write(Some(2), 3));
    assert_eq!((store.read(), store.counts()), (2, (2, 1)));
}

// ---------------------------------------------------------------------------
// 1. SIGSTOP shorter than the lease
// ---------------------------------------------------------------------------

#[test]
fn sigstop_shorter_than_the_lease_loses_nothing() {
    const WATCHDOG: Duration = Duration::from_millis(1500);
    const PAUSE: Duration = Duration::from_millis(300);
    let server = TestServer::start();
    let name = unique_name("fault-suite:short-stop");
    let (clients, events) = clients(&server.url(), 2, WATCHDOG);
    let mut workload = Workload::start(&clients, 3, &name, true, Store::Local(FencedStore::new()));
    workload.await_sections("warm-up", 0, 20, Duration::from_secs(20));

    server.pause();
    let paused_ns = mono_ns();
    thread::sleep(PAUSE);
    server.resume();
    let resumed_ns = mono_ns();
    workload.await_sections(
        "work after the pause",
        resumed_ns,
        30,
        Duration::from_secs(20),
    );
    thread::sleep(WATCHDOG);
    workload.stop();

    eprintln!(
        "short stop: paused {:.0} ms",
        ms_between(paused_ns, resumed_ns)
    );
    let mut checks = Checks::new("short stop");
    check_history(&mut checks, &workload, &[]);
    let calls = workload.calls.all();
    let slowest = checks.bounded(&calls);
    eprintln!("short stop: slowest call {slowest:?}");
    checks.no_errors(
        "the server paused shorter than a response timeout",
        &errors_since(&calls, 0),
    );
    let lost: Vec<_> = workload
        .history
        .sections()
        .into_iter()
        .filter(|s| s.lost)
        .collect();
    checks.check(lost.is_empty(), || format!("sections lost: {lost:?}"));
    let events = events.lost();
    checks.check(events.is_empty(), || {
        format!("lock-lost events: {events:?}")
    });
    let left = fields(&server, &name);
    checks.check(left.is_empty(), || format!("holds left: {left:?}"));
    checks.finish();
}

// ---------------------------------------------------------------------------
// 2. SIGSTOP longer than the lease
// ---------------------------------------------------------------------------

/// What a `try_lock_for(100 ms)` probe saw while the server was frozen.
#[derive(Debug)]
struct Probe {
    took: Duration,
    outcome: Outcome,
}

#[test]
fn sigstop_longer_than_the_lease_bounds_every_call_and_undoes_unknown_acquires() {
    const WATCHDOG: Duration = Duration::from_millis(900);
    const PAUSE: Duration = Duration::from_secs(3);
    const PROBE_WAIT: Duration = Duration::from_millis(100);
    let server = TestServer::start();
    let url = server.url();
    let port = server.port();
    let name = unique_name("fault-suite:long-stop");
    let long_name = format!("{name}:long");
    let probe_name = format!("{name}:probe");
    let (clients, events) = clients(&url, 2, WATCHDOG);
    let mut workload = Workload::start(&clients, 3, &name, true, Store::Local(FencedStore::new()));

    // A holder that keeps its own lock across the freeze.
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let long_holder = {
        let lock = clients[0].fenced_lock(long_name.as_str());
        thread::spawn(move || {
            let guard = lock.lock().expect("the long holder's lock");
            held_tx.send(()).unwrap();
            let mut lost_at = None;
            let deadline = Instant::now() + Duration::from_secs(60);
            while done_rx.try_recv().is_err() && Instant::now() < deadline {
                if lost_at.is_none() && guard.is_lost() {
                    lost_at = Some(mono_ns());
                }
                thread::sleep(Duration::from_millis(10));
            }
            let unlocked = guard.unlock();
            (lost_at, unlocked.map_err(|e| e.to_string()))
        })
    };
    held_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    workload.await_sections("warm-up", 0, 20, Duration::from_secs(20));

    // A probe client with the library's default timeouts: the bound must
    // hold whatever the response timeout.
    let probe_client = Client::builder()
        .redis_url(url.as_str())
        .event_handler(Arc::clone(&events) as Arc<dyn EventHandler>)
        .build()
        .unwrap();

    server.pause();
    let paused_ns = mono_ns();
    let paused = Instant::now();
    let mut probes = Vec::new();
    let probe_lock = probe_client.fenced_lock(probe_name.as_str());
    while paused.elapsed() + PROBE_WAIT + SLACK < PAUSE {
        let start = Instant::now();
        let got = probe_lock.try_lock_for(PROBE_WAIT);
        let took = start.elapsed();
        let outcome = match &got {
            Ok(Some(_)) => Outcome::Ok,
            Ok(None) => Outcome::NotAcquired,
            Err(e) => Outcome::Err(e.to_string()),
        };
        drop(got);
        probes.push(Probe { took, outcome });
    }
    // Client::open with a connection timeout, against the frozen server.
    let open_start = Instant::now();
    let opened = Client::builder()
        .redis_url(url.as_str())
        .connection_timeout(Duration::from_secs(1))
        .event_handler(Arc::new(redisync::NopEventHandler))
        .build();
    let open_took = open_start.elapsed();
    let left = PAUSE.saturating_sub(paused.elapsed());
    thread::sleep(left);
    server.resume();
    let resumed_ns = mono_ns();

    // The workload recovers; after a short settle no call fails.
    let settle_ns = resumed_ns + 1_500_000_000;
    workload.await_sections(
        "work after the freeze",
        settle_ns,
        30,
        Duration::from_secs(30),
    );
    let (lost_at, unlocked) = {
        done_tx.send(()).unwrap();
        long_holder.join().unwrap()
    };
    workload.stop();
    // An acquire whose outcome was unknown is undone in the background.
    thread::sleep(Duration::from_secs(2));

    let slowest_probe = probes.iter().map(|p| p.took).max().unwrap_or_default();
    eprintln!(
        "long stop: {} probes of try_lock_for({PROBE_WAIT:?}) during a {PAUSE:?} freeze, \
         slowest {slowest_probe:?}; Client::open(connection_timeout 1 s) took {open_took:?}: {:?}",
        probes.len(),
        opened.as_ref().map(|_| "ok").map_err(ToString::to_string)
    );
    for probe in probes.iter().take(3) {
        eprintln!("long stop: probe {probe:?}");
    }
    let calls = workload.calls.all();
    let failed = calls.iter().filter(|c| c.is_err()).count();
    eprintln!(
        "long stop: {} calls, {failed} failed; long holder lost at {:?} ms after the stop; \
         events {:?}",
        calls.len(),
        lost_at.map(|at| ms_between(paused_ns, at)),
        events.lost()
    );

    let mut checks = Checks::new("long stop");
    // Bounds.
    checks.check(!probes.is_empty(), || {
        "no probe ran during the freeze".to_owned()
    });
    let late: Vec<_> = probes
        .iter()
        .filter(|p| p.took > PROBE_WAIT + SLACK)
        .collect();
    checks.check(late.is_empty(), || {
        format!(
            "try_lock_for({PROBE_WAIT:?}) during the freeze took longer than {:?}: {late:?}",
            PROBE_WAIT + SLACK
        )
    });
    checks.check(open_took <= Duration::from_secs(1) + SLACK, || {
        format!(
            "Client::open with a 1 s connection timeout took {open_took:?} against a frozen \
             server (bound {:?})",
            Duration::from_secs(1) + SLACK
        )
    });
    let slowest = checks.bounded(&calls);
    eprintln!("long stop: slowest workload call {slowest:?}");
    // Errors say what happened and where.
    let address = format!("127.0.0.1:{port}");
    let messages: Vec<String> = probes
        .iter()
        .filter_map(|p| match &p.outcome {
            Outcome::Err(m) => Some(m.clone()),
            _ => None,
        })
        .chain(opened.err().map(|e| e.to_string()))
        .chain(calls.iter().filter_map(|c| match &c.outcome {
            Outcome::Err(m) => Some(m.clone()),
            _ => None,
        }))
        .collect();
    let unclear: Vec<&String> = messages
        .iter()
        .filter(|m| !(m.contains(&address) && m.to_lowercase().contains("timed out")))
        .collect();
    checks.check(unclear.is_empty(), || {
        format!(
            "{} of {} errors do not say they timed out and name {address}, e.g. {:?}",
            unclear.len(),
            messages.len(),
            unclear.iter().take(3).collect::<Vec<_>>()
        )
    });
    // The holder across the freeze knows, and was told.
    checks.check(lost_at.is_some(), || {
        format!("the holder across a {PAUSE:?} freeze (lease {WATCHDOG:?}) never saw is_lost()")
    });
    checks.check(events.lost_of(&long_name) >= 1, || {
        format!(
            "no on_lock_lost event for the lost {long_name}: {:?}",
            events.lost()
        )
    });
    match &unlocked {
        Ok(()) => checks.check(false, || "unlocking the lost hold succeeded".to_owned()),
        Err(e) => eprintln!("long stop: the lost hold's unlock: {e}"),
    }
    // Overlaps only around the freeze.
    check_history(
        &mut checks,
        &workload,
        &[excuse("the freeze", paused_ns, resumed_ns, WATCHDOG)],
    );
    checks.no_errors(
        "calls after the server answered again (+1.5 s)",
        &errors_since(&calls, settle_ns),
    );
    // No acquire that returned an error left its hold behind.
    for lock in [&name, &long_name, &probe_name] {
        let left = fields(&server, lock);
        checks.check(left.is_empty(), || {
            format!("holds left on {lock} 2 s after every holder finished: {left:?}")
        });
    }
    checks.finish();
}

// ---------------------------------------------------------------------------
// 3. SIGKILL and restart without persistence
// ---------------------------------------------------------------------------

#[test]
fn restart_without_persistence_keeps_tokens_increasing() {
    const WATCHDOG: Duration = Duration::from_millis(1000);
    let mut server = TestServer::start();
    let config: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query::<Vec<String>>(&mut server.connection())
        .unwrap();
    assert_eq!(
        config.get(1).map(String::as_str),
        Some(""),
        "persistence is on: {config:?}"
    );
    let name = unique_name("fault-suite:restart");
    let (clients, events) = clients(&server.url(), 2, WATCHDOG);
    let mut workload = Workload::start(&clients, 2, &name, true, Store::Local(FencedStore::new()));
    workload.await_sections("warm-up", 0, 30, Duration::from_secs(20));

    let killed_ns = mono_ns();
    server.restart();
    let back_ns = mono_ns();
    let first = workload.await_sections(
        "work after the restart",
        back_ns,
        30,
        Duration::from_secs(30),
    );
    thread::sleep(WATCHDOG);
    workload.stop();

    let sections = workload.history.sections();
    let before = sections
        .iter()
        .filter(|s| s.enter_ns < killed_ns)
        .filter_map(|s| s.token)
        .max()
        .unwrap();
    let after: Vec<&Section> = sections.iter().filter(|s| s.enter_ns >= back_ns).collect();
    let calls = workload.calls.all();
    eprintln!(
        "restart: down {:.0} ms; first section {:.0} ms after the server was back; \
         highest token before {before}, tokens after start at {:?}; {} failed calls after",
        ms_between(killed_ns, back_ns),
        ms_between(back_ns, first),
        after.iter().filter_map(|s| s.token).min(),
        errors_since(&calls, back_ns).len()
    );
    let backwards: Vec<String> = after
        .iter()
        .filter(|s| s.token.is_some_and(|t| t <= before))
        .map(|s| s.to_string())
        .take(5)
        .collect();
    let mut checks = Checks::new("restart");
    checks.check(backwards.is_empty(), || {
        format!(
            "tokens after the restart not above {before} (the highest before):\n{}",
            backwards.join("\n")
        )
    });
    check_history(
        &mut checks,
        &workload,
        &[excuse("the restart", killed_ns, back_ns, WATCHDOG)],
    );
    checks.bounded(&calls);
    checks.no_errors(
        "calls after the server answered again",
        &errors_since(&calls, back_ns),
    );
    eprintln!("restart: lost events {:?}", events.lost());
    checks.finish();
}

// ---------------------------------------------------------------------------
// 4-7. Dead or reset connections, flushed scripts
// ---------------------------------------------------------------------------

/// Runs the workload, applies `fault` (which returns when it is over) once
/// it has warmed up, and checks that it cost nothing: no failed call, no
/// lost lock, no lost-lock event, no overlap, no hold left behind.
fn harmless_fault(
    what: &str,
    watchdog: Duration,
    threads: usize,
    fenced: bool,
    fault: impl FnOnce(&TestServer, &Workload),
) -> (TestServer, Workload, Checks) {
    let server = TestServer::start();
    let name = unique_name(&format!("fault-suite:{what}"));
    let (clients, events) = clients(&server.url(), 2, watchdog);
    let mut workload = Workload::start(
        &clients,
        threads,
        &name,
        fenced,
        Store::Local(FencedStore::new()),
    );
    workload.await_sections("warm-up", 0, 20, Duration::from_secs(20));
    let fault_ns = mono_ns();
    fault(&server, &workload);
    let over_ns = mono_ns();
    let first = workload.await_sections(
        &format!("{what}: work after the fault"),
        over_ns,
        30,
        Duration::from_secs(20),
    );
    thread::sleep(watchdog);
    workload.stop();

    let calls = workload.calls.all();
    let mut checks = Checks::new(what);
    let slowest = checks.bounded(&calls);
    eprintln!(
        "{what}: fault took {:.0} ms; next section {:.0} ms after it; {} calls, slowest {slowest:?}",
        ms_between(fault_ns, over_ns),
        ms_between(over_ns, first),
        calls.len()
    );
    check_history(&mut checks, &workload, &[]);
    checks.no_errors(
        "calls after the fault began",
        &errors_since(&calls, fault_ns),
    );
    let lost: Vec<String> = workload
        .history
        .sections()
        .iter()
        .filter(|s| s.lost)
        .map(ToString::to_string)
        .collect();
    checks.check(lost.is_empty(), || {
        format!("sections lost:\n{}", lost.join("\n"))
    });
    let events = events.lost();
    checks.check(events.is_empty(), || {
        format!("lock-lost events: {events:?}")
    });
    let left = fields(&server, &name);
    checks.check(left.is_empty(), || format!("holds left: {left:?}"));
    (server, workload, checks)
}

#[test]
fn client_kill_type_normal_costs_no_call_and_no_lock() {
    let (_server, _workload, checks) = harmless_fault(
        "client-kill-normal",
        Duration::from_millis(1000),
        3,
        true,
        |server, _| {
            let mut conn = server.connection();
            for round in 0..3 {
                let killed: i64 = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("normal")
                    .query(&mut conn)
                    .unwrap();
                eprintln!("client-kill-normal: round {round}: killed {killed} connections");
                // Later rounds find what the clients reopened since, if anything.
                assert!(round > 0 || killed >= 1, "no connection to kill");
                thread::sleep(Duration::from_millis(300));
            }
        },
    );
    checks.finish();
}

#[test]
fn client_kill_type_pubsub_still_wakes_parked_waiters() {
    // A long lease: a waiter that missed its wake-up would sleep up to the
    // lock's TTL (the watchdog timeout).
    const WATCHDOG: Duration = Duration::from_secs(5);
    let (_server, workload, mut checks) =
        harmless_fault("client-kill-pubsub", WATCHDOG, 3, false, |server, _| {
            let mut conn = server.connection();
            for _ in 0..5 {
                let killed: i64 = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("pubsub")
                    .query(&mut conn)
                    .unwrap();
                assert!(killed >= 1, "no pub/sub connection to kill");
                thread::sleep(Duration::from_millis(200));
            }
        });
    // Work never stalled: the largest gap between one section leaving and
    // the next entering is far below the lease.
    let mut sections = workload.history.sections();
    sections.sort_by_key(|s| s.enter_ns);
    let gap = sections
        .windows(2)
        .map(|w| w[1].enter_ns.saturating_sub(w[0].exit_ns))
        .max()
        .unwrap_or(0);
    let gap = Duration::from_nanos(gap);
    eprintln!("client-kill-pubsub: largest gap between sections {gap:?}");
    checks.check(gap < WATCHDOG / 2, || {
        format!("the lock sat free {gap:?} while threads waited (lease {WATCHDOG:?})")
    });
    let timeouts = workload
        .calls
        .all()
        .into_iter()
        .filter(|c| c.outcome == Outcome::NotAcquired)
        .count();
    checks.check(timeouts == 0, || {
        format!("{timeouts} try_lock_for({WAIT:?}) timed out while the lock was in use")
    });
    checks.finish();
}

#[test]
fn idle_connections_reaped_by_the_server_cost_no_call() {
    let (_server, _workload, checks) = harmless_fault(
        "idle-timeout",
        Duration::from_millis(1000),
        3,
        true,
        |server, workload| {
            redis_cmd(server, &["CONFIG", "SET", "timeout", "1"]);
            workload.paused.store(true, Ordering::SeqCst);
            // Every pooled connection idles past the server's timeout.
            thread::sleep(Duration::from_millis(2500));
            workload.paused.store(false, Ordering::SeqCst);
        },
    );
    checks.finish();
}

#[test]
fn script_flush_mid_run_costs_no_call() {
    let (_server, _workload, checks) = harmless_fault(
        "script-flush",
        Duration::from_millis(1000),
        3,
        true,
        |server, _| {
            for _ in 0..5 {
                redis_cmd(server, &["SCRIPT", "FLUSH"]);
                thread::sleep(Duration::from_millis(200));
            }
        },
    );
    checks.finish();
}

// ---------------------------------------------------------------------------
// 8-9. A holder process paused or killed
// ---------------------------------------------------------------------------

/// A fenced-holder child on `server` holding `name` (token, section start),
/// and a contended in-process workload on the same lock and downstream
/// store, started once the child holds the lock.
fn child_holder_and_workload(
    server: &TestServer,
    name: &str,
    watchdog: Duration,
) -> (ChildProcess, u64, u64, Workload, Arc<Events>) {
    let store = format!("{name}:store");
    let (child, token, _) = spawn_fenced_holder(server, name, &store, watchdog);
    let held_ns = mono_ns();
    let (clients, events) = clients(&server.url(), 2, watchdog);
    let workload = Workload::start(
        &clients,
        2,
        name,
        true,
        Store::Redis {
            url: server.url(),
            store,
        },
    );
    // The child holds the lock: nobody else enters.
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        workload.history.len(),
        0,
        "the workload entered while the child held the lock"
    );
    (child, token, held_ns, workload, events)
}

/// The child holder's section, for the history.
fn child_section(
    child: &ChildProcess,
    token: u64,
    held_ns: u64,
    exit_ns: u64,
    lost: bool,
    accepted: bool,
) -> Section {
    Section {
        client: format!("child-{}", child.pid()),
        thread: 0,
        token: Some(token),
        enter_ns: held_ns,
        exit_ns,
        lost,
        write_accepted: Some(accepted),
    }
}

#[test]
fn a_holder_process_paused_past_its_lease_is_fenced_off() {
    const WATCHDOG: Duration = Duration::from_millis(1000);
    let server = TestServer::start();
    let name = unique_name("fault-suite:child-pause");
    let (mut child, token, held_ns, mut workload, _events) =
        child_holder_and_workload(&server, &name, WATCHDOG);

    common::send_signal(child.pid(), "STOP");
    let stopped_ns = mono_ns();
    let first = workload.await_sections(
        "the workload takes over",
        stopped_ns,
        20,
        Duration::from_secs(20),
    );
    child.send(&format!("{WRITE} zombie"));
    common::send_signal(child.pid(), "CONT");
    let result = child.expect_line(WRITE_RESULT, READY_TIMEOUT);
    let resumed_ns = mono_ns();
    workload.await_sections(
        "work after the child resumed",
        resumed_ns,
        10,
        Duration::from_secs(20),
    );
    workload.stop();
    eprintln!(
        "child pause: the workload took over {:.0} ms after the SIGSTOP; the resumed child: {result}",
        ms_between(stopped_ns, first)
    );

    let lost = result.ends_with("lost=true");
    let accepted = result.starts_with("accepted");
    workload.history.record(child_section(
        &child, token, held_ns, resumed_ns, lost, accepted,
    ));
    let mut checks = Checks::new("child pause");
    checks.check(result == "refused lost=true", || {
        format!(
            "the resumed holder's write: {result:?}, expected \"refused lost=true\"; \
             child output:\n{}",
            child.transcript()
        )
    });
    check_history(
        &mut checks,
        &workload,
        &[excuse(
            "the child's pause",
            stopped_ns,
            resumed_ns,
            Duration::ZERO,
        )],
    );
    let calls = workload.calls.all();
    checks.bounded(&calls);
    checks.no_errors("the workload", &errors_since(&calls, 0));
    checks.finish();
}

#[test]
fn a_killed_holder_process_frees_the_lock_within_a_lease() {
    const WATCHDOG: Duration = Duration::from_millis(1000);
    let server = TestServer::start();
    let name = unique_name("fault-suite:child-kill");
    let (mut child, token, held_ns, mut workload, _events) =
        child_holder_and_workload(&server, &name, WATCHDOG);
    let killed_ns = mono_ns();
    child.kill();
    let first = workload.await_sections(
        "the workload takes over",
        killed_ns,
        20,
        Duration::from_secs(20),
    );
    workload.stop();
    let freed = Duration::from_nanos(first - killed_ns);
    eprintln!(
        "child kill: the workload took over {freed:?} after the SIGKILL (lease {WATCHDOG:?})"
    );
    // Its one write (with its token) was accepted before the kill.
    workload.history.record(child_section(
        &child, token, held_ns, killed_ns, false, true,
    ));
    let mut checks = Checks::new("child kill");
    checks.check(freed < WATCHDOG + SLACK, || {
        format!("the dead holder's lock was taken only {freed:?} after the kill")
    });
    check_history(&mut checks, &workload, &[]);
    let calls = workload.calls.all();
    checks.bounded(&calls);
    checks.no_errors("the workload", &errors_since(&calls, 0));
    checks.finish();
}

// ---------------------------------------------------------------------------
// 10. Network partition
// ---------------------------------------------------------------------------

const SECTION_LINE: &str = "FS-SECTION";
const CALL_LINE: &str = "FS-CALL";
const EVENT_LINE: &str = "FS-EVENT";
const LONG_LOST_LINE: &str = "FS-LONG-LOST";
const PROBE_LINE: &str = "FS-PROBE";
const REPORT_DONE: &str = "FS-REPORT-DONE";

/// The client side of the partition test, in the client namespace: two
/// clients × two threads of the workload on `LOCK` (fenced, local store),
/// and a third thread holding `LOCK:long` throughout. Commands on stdin:
/// `probe` (a `try_lock_for(100 ms)` and a `Client::open` with a 1 s
/// connection timeout, reported as calls), `stop` (stop, report every
/// section, call and lost event, then exit).
fn child_partition_workload() {
    let url = env(URL_ENV);
    let name = env(LOCK_ENV);
    let watchdog = env_ms(WATCHDOG_MS_ENV);
    let (clients, events) = clients(&url, 2, watchdog);
    let mut workload = Workload::start(&clients, 2, &name, true, Store::Local(FencedStore::new()));
    let long_name = format!("{name}:long");
    let stop = Arc::new(AtomicBool::new(false));
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let long_holder = {
        let lock = clients[0].fenced_lock(long_name.as_str());
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let guard = lock.lock().expect("child: the long holder's lock");
            held_tx.send(()).unwrap();
            let mut told = false;
            while !stop.load(Ordering::SeqCst) {
                if !told && guard.is_lost() {
                    announce(&format!("{LONG_LOST_LINE} {}", mono_ns()));
                    told = true;
                }
                thread::sleep(Duration::from_millis(10));
            }
            drop(guard);
        })
    };
    held_rx
        .recv_timeout(READY_TIMEOUT)
        .expect("child: long holder");
    let probe_client = Client::builder()
        .redis_url(url.as_str())
        .event_handler(Arc::clone(&events) as Arc<dyn EventHandler>)
        .build()
        .expect("child: probe client");
    let probe_lock = probe_client.fenced_lock(format!("{name}:probe"));
    let from_parent = parent_lines();
    announce(READY);
    let deadline = Instant::now() + child::CHILD_MAX_LIFETIME;
    while Instant::now() < deadline {
        let Ok(line) = from_parent.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        match line.trim() {
            "probe" => {
                let _ = workload.calls.run(
                    "probe_try_lock_for",
                    "probe",
                    Duration::from_millis(100) + SLACK,
                    || {
                        probe_lock
                            .try_lock_for(Duration::from_millis(100))
                            .map(|g| g.map(drop))
                    },
                );
                let _ = workload.calls.run(
                    "probe_open",
                    "probe",
                    Duration::from_secs(1) + SLACK,
                    || {
                        Client::builder()
                            .redis_url(url.as_str())
                            .connection_timeout(Duration::from_secs(1))
                            .event_handler(Arc::new(redisync::NopEventHandler))
                            .build()
                            .map(Some)
                    },
                );
                announce(PROBE_LINE);
            }
            "stop" => break,
            _ => {}
        }
    }
    workload.stop();
    stop.store(true, Ordering::SeqCst);
    long_holder.join().expect("child: long holder");
    for section in workload.history.sections() {
        announce(&format!("{SECTION_LINE} {}", section.to_line()));
    }
    for call in workload.calls.all() {
        announce(&format!("{CALL_LINE} {}", call.to_line()));
    }
    for (at, lock, reason) in events.lost() {
        announce(&format!(
            "{EVENT_LINE} {at} {lock} {}",
            reason.replace('\n', " ")
        ));
    }
    announce(REPORT_DONE);
}

/// The lines of `child`'s output that carry `marker`, without it.
fn reported(child: &ChildProcess, marker: &str) -> Vec<String> {
    child
        .transcript()
        .lines()
        .filter_map(|l| {
            l.split_once(&format!("{marker} "))
                .map(|(_, rest)| rest.to_owned())
        })
        .collect()
}

#[test]
fn network_partition_longer_than_the_lease() {
    const WATCHDOG: Duration = Duration::from_millis(900);
    const CUT: Duration = Duration::from_secs(3);
    let partition = Partition::create();
    let server = NetnsServer::start(&partition);
    let name = unique_name("fault-suite:partition");
    let address = format!("{SERVER_ADDR}:{}", server.port);
    let envs = [
        (URL_ENV, server.url()),
        (LOCK_ENV, name.clone()),
        (WATCHDOG_MS_ENV, ms(WATCHDOG)),
    ];
    let mut child =
        ChildProcess::spawn_under(&partition.client_prefix(), "partition_workload", &envs);
    child.expect_line(READY, READY_TIMEOUT);
    thread::sleep(Duration::from_secs(1));

    partition.cut();
    let cut_ns = mono_ns();
    let cut_at = Instant::now();
    let mut probes = 0;
    while cut_at.elapsed() + Duration::from_millis(1100) + SLACK < CUT {
        child.send("probe");
        child.expect_line(PROBE_LINE, Duration::from_secs(10));
        probes += 1;
    }
    thread::sleep(CUT.saturating_sub(cut_at.elapsed()));
    partition.heal();
    let healed_ns = mono_ns();
    // "The server answers again": a PING through the link.
    wait_until(
        "the server answers through the restored link",
        Duration::from_secs(10),
        || partition.redis_cli(server.port, &["PING"]).as_deref() == Some("PONG"),
    );
    let answers_ns = mono_ns();
    let settle_ns = answers_ns + 1_000_000_000;
    thread::sleep(Duration::from_secs(3));
    child.send("probe");
    child.expect_line(PROBE_LINE, Duration::from_secs(10));
    child.send("stop");
    child.expect_line(REPORT_DONE, Duration::from_secs(60));

    let sections: Vec<Section> = reported(&child, SECTION_LINE)
        .iter()
        .map(|l| Section::from_line(l))
        .collect();
    let calls: Vec<Call> = reported(&child, CALL_LINE)
        .iter()
        .map(|l| Call::from_line(l))
        .collect();
    let events = reported(&child, EVENT_LINE);
    let long_lost = reported(&child, LONG_LOST_LINE);
    let first_after = sections
        .iter()
        .filter(|s| s.enter_ns >= healed_ns)
        .map(|s| s.enter_ns)
        .min();
    let during: Vec<&Call> = calls
        .iter()
        .filter(|c| c.start_ns >= cut_ns && c.start_ns < healed_ns)
        .collect();
    eprintln!(
        "partition: {} sections ({} after the heal, first {:?} ms after it), {} calls \
         ({} during the cut, {} failed), {probes} probes; long holder lost: {long_lost:?}; \
         events: {events:?}",
        sections.len(),
        sections.iter().filter(|s| s.enter_ns >= healed_ns).count(),
        first_after.map(|at| ms_between(healed_ns, at)),
        calls.len(),
        during.len(),
        during.iter().filter(|c| c.is_err()).count()
    );
    for call in during.iter().filter(|c| c.is_err()).take(4) {
        eprintln!("partition: during the cut: {call}");
    }

    let mut checks = Checks::new("partition");
    let slowest = checks.bounded(&calls);
    eprintln!("partition: slowest call {slowest:?}");
    let unclear: Vec<String> = during
        .iter()
        .filter(|c| match &c.outcome {
            // A cut link either swallows requests (the read times out) or,
            // once the kernel knows the route is gone, refuses at once.
            Outcome::Err(m) => {
                let m = m.to_lowercase();
                !(m.contains(&address) && (m.contains("timed out") || m.contains("no route to")))
            }
            _ => false,
        })
        .map(ToString::to_string)
        .collect();
    checks.check(unclear.is_empty(), || {
        format!(
            "{} error(s) during the cut do not say they timed out (or found no route) and name {address}, e.g.:\n{}",
            unclear.len(),
            unclear
                .iter()
                .take(3)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
    checks.check(
        during
            .iter()
            .any(|c| c.op.starts_with("probe") && c.is_err()),
        || format!("no probe failed during the cut: {during:?}"),
    );
    checks.check(!long_lost.is_empty(), || {
        format!("the holder across a {CUT:?} cut (lease {WATCHDOG:?}) never saw is_lost()")
    });
    checks.check(
        events.iter().any(|e| e.contains(&format!("{name}:long"))),
        || format!("no on_lock_lost event for the long holder: {events:?}"),
    );
    checks.check(first_after.is_some(), || {
        "no work after the heal".to_owned()
    });
    checks.clean(&history::check(
        &sections,
        &[excuse("the partition", cut_ns, healed_ns, WATCHDOG)],
    ));
    checks.no_errors(
        "calls 1 s after the server answered again",
        &errors_since(&calls, settle_ns),
    );
    let status = child.wait_exit(Duration::from_secs(30));
    checks.check(status.success(), || {
        format!(
            "the child failed: {status}; output:\n{}",
            child.transcript()
        )
    });
    checks.finish();
}
