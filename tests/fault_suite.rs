//! Connection faults under a contended workload, with a checker that is
//! shown to catch every violation it claims to look for.
//!
//! Run: `cargo test --all-features --test fault_suite`. The default is the
//! short mix CI runs (each nemesis once, a few seconds of work around each
//! fault: about 1-3 minutes on a loaded 2-core machine).
//! `REDISYNC_FAULT_SUITE=long` runs the long mix: every nemesis three times
//! over, the third time holding a request past the 10 s unlock latch and
//! delivering a cut request's original past every latch and record (65 s;
//! about 6 minutes; run it locally). `REDISYNC_FAULT_SUITE=long-timeout`
//! gives the nemesis clients a 12 s response timeout, above the unlock
//! latch, and delivers a cut request's original 11 s late, inside its
//! window (run it with the filter `under_the_nemesis`).
//! `REDISYNC_FAULT_SUITE_FAULTS=kill,late` (any of `kill`, `freeze`,
//! `late`, `long-freeze`, `cut`) limits the nemesis to those faults, to
//! find which one a failure needs.
//!
//! Needs: `redis-server`, root with `ip` (iproute2) and `nft` (nftables:
//! `apt-get install -y nftables`) for the partition test.
//!
//! The workload ([`Workload`]): several `Client`s, several threads each,
//! incrementing a counter in a downstream store non-atomically (read,
//! pause, `is_lost()`, write) inside one lock; besides those short sections,
//! one holder per client keeps the lock for about a lease and writes every
//! [`LONG_STEP`], asking `is_lost()` immediately before every write and
//! recording the answer before it writes. The store logs every write; in
//! the nemesis run it accepts every token (`Store::Redis` `accept_any`) so
//! that the checker, not the store, judges a write with a lower token
//! ("stale write": a store with production fencing semantics refuses it
//! itself, and the check could never fire); the fenced-holder tests use
//! production semantics (it accepts a token at least the last, refuses a
//! lower one). Every hold is a `Section`, every write a `Write`, and
//! the checkers (tests/common/history.rs, tests/common/primitive_history.rs)
//! find overlaps, backwards tokens, stale writes, lost updates, over-granted
//! permits, writers beside readers, FIFO breaks and latches opened early.
//! An election runs beside them ([`Candidates`]): candidates of three
//! clients campaign over and over, each leadership recorded as a
//! `Section` with its term as the token, and
//! tests/common/election_history.rs finds overlapping leaderships (a
//! leader counts as ended when its lost signal fired), terms that do not
//! increase in order of winning, and no leader within a lease after a
//! fault.
//! An excuse is exactly a fault's own window (a pause of the holder, data
//! loss; a held request's from when the proxy held it to the server's
//! answer to its delivery), never a lease wider, and it never turns the
//! lost-update check off; a FIFO break is excused only by a fault that hit
//! the waiter that lost its turn (its own request held, or a fault of the
//! server or of every connection).
//!
//! Faults delay instead of refusing: a server frozen (SIGSTOP, the process
//! state confirmed `T`), a partition that drops every packet (nftables in
//! the test's own namespaces; TCP retransmits and delivers late when
//! healed), a proxy that holds a connection's bytes and delivers them after
//! the client gave up (tests/common/delay_proxy.rs), a proxy that holds a
//! request and cuts its client's side at once, so the client sends it again
//! on another connection while the original is delivered later (inside its
//! window, or past every latch and record), `CLIENT KILL` while the
//! server is busy with a slow script so that requests in flight run and
//! lose their replies. Every fault confirms it happened: the process state
//! `T`; the held bytes are a script call on the object (`EVAL` and its
//! name, not a `SUBSCRIBE`), the server answered their delivery (the
//! answer is logged, and a writing call's answer matches its window: run
//! inside it, refused as late past it); a kill counts only if CLIENT LIST
//! shows every connection closed and the proxy saw the server close at
//! least one with a request of its client unanswered (a round tries three
//! times; a minimum of confirmed kills is asserted).
//!
//! "The checker can fail": unit tests feed each checker a synthetic history
//! with each violation, and `mutation_*` tests run the real system with a
//! deliberately broken workload or store and require the checker to catch
//! it.
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

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::child::{
    self, ChildProcess, LOCK_ENV, READY, READY_TIMEOUT, ROLE_ENV, STORE_ENV, URL_ENV,
    WATCHDOG_MS_ENV, WRITE, WRITE_RESULT, announce, env, env_ms, ms, parent_lines, raw_connection,
    store_data_key, store_highest_key,
};
use common::delay_proxy::DelayProxy;
use common::election_history::{Tenure, check_election, led};
use common::history::{
    self, Excuse, FencedStore, History, Mode, Section, Verdict, Write, mono_ns, ms_between,
};
use common::netns::{NetnsServer, Partition, SERVER_ADDR};
use common::primitive_history::{
    FairWait, LatchCall, PermitHold, QueuePoll, check_fifo, check_latch, check_permits,
};
use common::{TestServer, hgetall, unique_name, wait_until};
use redisync::{Client, EventHandler, LockLostEvent};

/// Connection timeout of the workload's clients.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Response timeout of the workload's clients.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// What a call may take beyond its own bound on a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(1);
/// The bound of an `unlock()` (it has no wait of its own): a response
/// timeout and one retry, plus [`SLACK`] (3 s with [`RESPONSE_TIMEOUT`]).
fn unlock_bound() -> Duration {
    nemesis_response_timeout() * 2 + SLACK
}
/// How long the workload's `try_lock_for` waits.
const WAIT: Duration = Duration::from_secs(2);
/// How long a short section lasts (between the store's read and its write).
const HOLD: Duration = Duration::from_millis(2);
/// A long holder's pause between its read and its write.
const LONG_STEP: Duration = Duration::from_millis(25);
/// The environment variable that selects the long mix (`long`).
const MIX_ENV: &str = "REDISYNC_FAULT_SUITE";

/// Whether `REDISYNC_FAULT_SUITE=long` asks for the long mix.
fn long_mix() -> bool {
    std::env::var(MIX_ENV).is_ok_and(|v| v == "long")
}

/// Whether `REDISYNC_FAULT_SUITE=long-timeout` asks for the mix whose
/// nemesis clients wait [`LONG_RESPONSE_TIMEOUT`] for a reply, longer than
/// the 10 s unlock latch: a copy delivered inside its window can arrive
/// after the latch is gone.
fn long_timeout_mix() -> bool {
    std::env::var(MIX_ENV).is_ok_and(|v| v == "long-timeout")
}

/// The nemesis clients' response timeout in the `long-timeout` mix: above
/// the reentrant lock's 10 s unlock latch (`DEFAULT_UNLOCK_LATCH`).
const LONG_RESPONSE_TIMEOUT: Duration = Duration::from_secs(12);

/// The response timeout of the nemesis runs' clients: [`RESPONSE_TIMEOUT`],
/// or [`LONG_RESPONSE_TIMEOUT`] in the `long-timeout` mix.
fn nemesis_response_timeout() -> Duration {
    if long_timeout_mix() {
        LONG_RESPONSE_TIMEOUT
    } else {
        RESPONSE_TIMEOUT
    }
}

/// The environment variable that limits the nemesis to some of its faults
/// (a comma-separated list of `kill`, `freeze`, `late`, `long-freeze`,
/// `cut`; when unset, all of them, but `late` in the `long-timeout` mix,
/// where a request held past its client's timeout would hold a call 12 s),
/// to find which fault a failure needs.
const FAULTS_ENV: &str = "REDISYNC_FAULT_SUITE_FAULTS";

/// Whether the nemesis runs `fault` (see [`FAULTS_ENV`]).
fn fault_enabled(fault: &str) -> bool {
    std::env::var(FAULTS_ENV).map_or(!(long_timeout_mix() && fault == "late"), |list| {
        list.split(',').any(|f| f.trim() == fault)
    })
}

/// How many times each nemesis runs: once in the short mix, three times in
/// the long one.
fn rounds() -> usize {
    if long_mix() { 3 } else { 1 }
}

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
        "production_holder" => child_production_holder(),
        "partition_workload" => child_partition_workload(),
        other => panic!("unknown {ROLE_ENV}={other:?}"),
    }
}

/// The checked line a production holder prints after `check`.
const CHECKED: &str = "FS-CHECKED";

/// A fenced holder that writes to the production store ([`Store::Redis`]):
/// it takes the lock, writes once, says `READY <token>`; on `check` it reads
/// the counter and asks `is_lost()` (prints `FS-CHECKED lost=<bool>`); on
/// `write` it writes what it read plus one with its token, as a holder does
/// right after its check (prints the store's answer). The parent can freeze
/// it between the two: the zombie fencing exists for.
fn child_production_holder() {
    let url = env(URL_ENV);
    let store = Store::Redis {
        url,
        store: env(STORE_ENV),
        accept_any: false,
    };
    let client = child::child_client_with_watchdog();
    let guard = client
        .fenced_lock(env(LOCK_ENV))
        .lock()
        .expect("child: fenced lock");
    let token = guard
        .token()
        .expect("child: a fenced guard without a token");
    let who = format!("child-{}", std::process::id());
    let mut conn = None;
    let write = |conn: &mut Option<redis::Connection>, read: u64| {
        store.write(
            conn,
            Write {
                client: who.clone(),
                thread: 0,
                token: Some(token),
                sent_ns: mono_ns(),
                read,
                value: read + 1,
                accepted: false,
            },
        )
    };
    let read = store.read(&mut conn);
    assert!(
        write(&mut conn, read),
        "child: the store refused the holder's first write (token {token})"
    );
    let from_parent = parent_lines();
    announce(&format!("{READY} {token} {}", mono_ns()));
    let deadline = Instant::now() + child::CHILD_MAX_LIFETIME;
    let mut read = 0;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = from_parent.recv_timeout(left) else {
            break;
        };
        match line.trim() {
            "check" => {
                read = store.read(&mut conn);
                announce(&format!("{CHECKED} lost={} {}", guard.is_lost(), mono_ns()));
            }
            w if w == WRITE => {
                let accepted = write(&mut conn, read);
                announce(&format!(
                    "{WRITE_RESULT} {} lost={}",
                    if accepted { "accepted" } else { "refused" },
                    guard.is_lost()
                ));
            }
            _ => {}
        }
    }
    drop(guard);
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
    /// Calls started and not finished yet.
    running: AtomicUsize,
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
        self.running.fetch_add(1, Ordering::SeqCst);
        let result = call();
        self.running.fetch_sub(1, Ordering::SeqCst);
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

/// The failed calls of `calls` that started at or after `ns` (an unlock of a
/// hold `is_lost()` had called lost may fail, and says so: not counted).
fn errors_since(calls: &[Call], ns: u64) -> Vec<Call> {
    calls
        .iter()
        .filter(|c| {
            c.start_ns >= ns && c.is_err() && c.op != "unlock(lost)" && c.op != "resign(lost)"
        })
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
// The downstream store
// ---------------------------------------------------------------------------

/// The production store on Redis: KEYS[1] the highest token accepted,
/// KEYS[2] the counter, KEYS[3] the write log; ARGV[1] the token, ARGV[2]
/// the value, ARGV[3] the write's log line without its verdict, ARGV[4]
/// `1` to accept every token (the judging store, see [`Store::Redis`]).
/// Accepts a token at least the highest (the same holder writes again),
/// refuses a lower one; logs every write in the order it applies them.
/// Returns 1 when accepted.
const PRODUCTION_STORE_WRITE: &str = r"
local highest = tonumber(redis.call('get', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
local accepted = token >= highest or ARGV[4] == '1'
if accepted then
    redis.call('set', KEYS[1], tostring(math.max(token, highest)))
    redis.call('set', KEYS[2], ARGV[2])
end
redis.call('rpush', KEYS[3], ARGV[3] .. ' ' .. tostring(accepted))
if accepted then return 1 end
return 0
";

/// Where the workload's counter lives.
enum Store {
    /// In this process.
    Local(FencedStore),
    /// On Redis ([`PRODUCTION_STORE_WRITE`]), shared with child processes.
    /// `accept_any`: a store that accepts every token and logs it, so that
    /// the checker, not the store, judges a write with a token below one
    /// accepted before ("stale write"): a store with production semantics
    /// refuses it itself, and the checker never sees it accepted.
    Redis {
        url: String,
        store: String,
        accept_any: bool,
    },
}

impl Store {
    fn log_key(store: &str) -> String {
        format!("{store}:log")
    }

    /// Reads the counter; `conn` is the thread's own connection (Redis).
    fn read(&self, conn: &mut Option<redis::Connection>) -> u64 {
        match self {
            Store::Local(store) => store.read(),
            Store::Redis { url, store, .. } => {
                let conn = conn.get_or_insert_with(|| raw_connection(url));
                let value: Option<String> = redis::cmd("GET")
                    .arg(store_data_key(store))
                    .query(conn)
                    .expect("downstream store read");
                value.and_then(|v| v.parse().ok()).unwrap_or(0)
            }
        }
    }

    /// Sends `write`; true when the store accepted it.
    fn write(&self, conn: &mut Option<redis::Connection>, write: Write) -> bool {
        match self {
            Store::Local(store) => store.write(write),
            Store::Redis {
                url,
                store,
                accept_any,
            } => {
                let conn = conn.get_or_insert_with(|| raw_connection(url));
                let line = write.to_line();
                let line = line.rsplit_once(' ').unwrap().0.to_owned();
                let accepted: i64 = redis::Script::new(PRODUCTION_STORE_WRITE)
                    .key(store_highest_key(store))
                    .key(store_data_key(store))
                    .key(Store::log_key(store))
                    .arg(write.token.expect("the Redis store needs a fenced lock"))
                    .arg(write.value)
                    .arg(line)
                    .arg(if *accept_any { "1" } else { "0" })
                    .invoke(conn)
                    .expect("downstream store write");
                accepted == 1
            }
        }
    }

    /// Every write it was sent, in the order it applied them.
    fn log(&self) -> Vec<Write> {
        match self {
            Store::Local(store) => store.log(),
            Store::Redis { url, store, .. } => {
                let lines: Vec<String> = redis::cmd("LRANGE")
                    .arg(Store::log_key(store))
                    .arg(0)
                    .arg(-1)
                    .query(&mut raw_connection(url))
                    .expect("downstream store log");
                lines.iter().map(|l| Write::from_line(l)).collect()
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------

/// The lock a workload takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Fenced,
    Fair,
    /// Two of three short sections read (shared), the rest and the long
    /// holders write.
    ReadWrite,
}

/// How a workload runs.
#[derive(Debug, Clone, Copy)]
struct Knobs {
    kind: Kind,
    /// Short-section threads per client.
    threads: usize,
    /// How long a long holder keeps the lock (about a lease); `None`: no
    /// long holders.
    long_hold: Option<Duration>,
    /// MUTATION: treat every `is_lost()` as "held" (a holder that ignores
    /// it), for the mutation runs that the checker must catch.
    ignore_lost: bool,
    /// MUTATION: odd threads take another lock (`<name>:x`): a "lock" that
    /// does not exclude.
    split: bool,
    /// MUTATION (fair lock): odd threads take the same name as a plain
    /// lock, which ignores the queue: a fair lock that lets waiters barge.
    barge: bool,
}

impl Knobs {
    fn new(kind: Kind, threads: usize, long_hold: Option<Duration>) -> Knobs {
        Knobs {
            kind,
            threads,
            long_hold,
            ignore_lost: false,
            split: false,
            barge: false,
        }
    }
}

/// One call of a fair lock's acquire (for the FIFO check).
#[derive(Debug, Clone)]
struct FairCall {
    who: String,
    start_ns: u64,
    end_ns: u64,
    /// `Some(true)`: got the lock; `Some(false)`: timed out; `None`: failed.
    entered: Option<bool>,
}

/// Threads taking one lock over and over, recording every section, write
/// and call.
struct Workload {
    name: String,
    stop: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    history: Arc<History>,
    calls: Arc<Calls>,
    store: Arc<Store>,
    /// How many long holders are inside their section right now.
    long_holding: Arc<AtomicUsize>,
    fair_calls: Arc<Mutex<Vec<FairCall>>>,
    /// Fair lock: every poll of its queue.
    polls: Arc<Mutex<Vec<QueuePoll>>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workload {
    /// Starts the workload on each of `clients`, on the lock `name`.
    /// `url` reaches the server directly (the fair lock's queue monitor).
    fn start(url: &str, clients: &[Client], knobs: Knobs, name: &str, store: Store) -> Workload {
        let mut workload = Workload {
            name: name.to_owned(),
            stop: Arc::default(),
            paused: Arc::default(),
            history: Arc::default(),
            calls: Arc::default(),
            store: Arc::new(store),
            long_holding: Arc::default(),
            fair_calls: Arc::default(),
            polls: Arc::default(),
            threads: Vec::new(),
        };
        for (c, client) in clients.iter().enumerate() {
            let long = usize::from(knobs.long_hold.is_some());
            for t in 0..knobs.threads + long {
                let thread = workload.thread(client, format!("c{c}"), t, knobs, t == knobs.threads);
                workload.threads.push(thread);
            }
        }
        if knobs.kind == Kind::Fair {
            workload
                .threads
                .push(workload.queue_monitor(url.to_owned()));
        }
        workload
    }

    /// One thread of the workload (`long`: a long holder).
    fn thread(
        &self,
        client: &Client,
        who: String,
        t: usize,
        knobs: Knobs,
        long: bool,
    ) -> JoinHandle<()> {
        let name = if knobs.split && t % 2 == 1 {
            format!("{}:x", self.name)
        } else {
            self.name.clone()
        };
        let (exclusive, shared) = match knobs.kind {
            Kind::Plain => (client.lock(name.as_str()), None),
            Kind::Fenced => (client.fenced_lock(name.as_str()), None),
            Kind::Fair if knobs.barge && t % 2 == 1 => (client.lock(name.as_str()), None),
            Kind::Fair => (client.fair_lock(name.as_str()), None),
            Kind::ReadWrite => {
                let rw = client.read_write_lock(name.as_str());
                (rw.write_lock(), Some(rw.read_lock()))
            }
        };
        let client = client.clone();
        let (stop, paused) = (Arc::clone(&self.stop), Arc::clone(&self.paused));
        let (history, calls) = (Arc::clone(&self.history), Arc::clone(&self.calls));
        let store = Arc::clone(&self.store);
        let long_holding = Arc::clone(&self.long_holding);
        let fair_calls = Arc::clone(&self.fair_calls);
        thread::spawn(move || {
            let mut conn = None;
            let mut round = 0u64;
            let holder_id = client.current_holder_id();
            let (writes, step) = match (long, knobs.long_hold) {
                (true, Some(hold)) => {
                    ((hold.as_millis() / LONG_STEP.as_millis()).max(1), LONG_STEP)
                }
                _ => (1, HOLD),
            };
            while !stop.load(Ordering::SeqCst) {
                if paused.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(10));
                    continue;
                }
                round += 1;
                let reads_only = shared.is_some() && !long && !round.is_multiple_of(3);
                let lock = match &shared {
                    Some(read) if reads_only => read,
                    _ => &exclusive,
                };
                let op = if long {
                    "try_lock_for(long)"
                } else {
                    "try_lock_for"
                };
                let start_ns = mono_ns();
                // MUTATION barge: spin on try_lock(), taking the lock the
                // moment it is free, whoever is queued.
                let barging = knobs.barge && t % 2 == 1;
                let got = if barging {
                    calls.run(op, &who, WAIT + SLACK, || lock.try_lock())
                } else if knobs.barge {
                    // A fair waiter with a watchdog is handed the lock
                    // outright (no moment free for a barger); one with a
                    // fixed lease is woken to try, as Redisson's are.
                    calls.run(op, &who, WAIT + SLACK, || {
                        lock.try_lock_for_with_lease(WAIT, BARGE_LEASE)
                    })
                } else {
                    calls.run(op, &who, WAIT + SLACK, || lock.try_lock_for(WAIT))
                };
                let enter_ns = mono_ns();
                if knobs.kind == Kind::Fair {
                    fair_calls.lock().unwrap().push(FairCall {
                        who: holder_id.clone(),
                        start_ns,
                        end_ns: enter_ns,
                        entered: got.as_ref().ok().map(Option::is_some),
                    });
                }
                let guard = match got {
                    Ok(Some(guard)) => guard,
                    Ok(None) => {
                        if barging {
                            thread::sleep(Duration::from_millis(1));
                        }
                        continue;
                    }
                    Err(_) => {
                        thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                };
                if long {
                    long_holding.fetch_add(1, Ordering::SeqCst);
                }
                let mut section = Section {
                    client: who.clone(),
                    thread: t,
                    mode: if reads_only {
                        Mode::Shared
                    } else {
                        Mode::Exclusive
                    },
                    token: guard.token(),
                    enter_ns,
                    last_ok_ns: enter_ns,
                    lost_ns: None,
                    exit_ns: 0,
                };
                // `is_lost()` immediately before every write, and once more
                // before the unlock; the answer is recorded before acting.
                let still_held = |section: &mut Section| -> bool {
                    let lost = !knobs.ignore_lost && guard.is_lost();
                    let now = mono_ns();
                    if lost {
                        section.lost_ns.get_or_insert(now);
                    } else {
                        section.last_ok_ns = now;
                    }
                    !lost
                };
                for _ in 0..writes {
                    let read = store.read(&mut conn);
                    thread::sleep(step);
                    if !still_held(&mut section) {
                        break;
                    }
                    if !reads_only {
                        store.write(
                            &mut conn,
                            Write {
                                client: who.clone(),
                                thread: t,
                                token: section.token,
                                sent_ns: section.last_ok_ns,
                                read,
                                value: read + 1,
                                accepted: false,
                            },
                        );
                    }
                }
                if section.lost_ns.is_none() {
                    still_held(&mut section);
                }
                section.exit_ns = mono_ns();
                if long {
                    long_holding.fetch_sub(1, Ordering::SeqCst);
                }
                let section_lost = section.lost_ns.is_some();
                history.record(section);
                // Unlocking a hold is_lost() called lost may fail ("not
                // held"): that is the truth, not a failed call.
                let op = if section_lost {
                    "unlock(lost)"
                } else {
                    "unlock"
                };
                let _ = calls.run(op, &who, unlock_bound(), || guard.unlock().map(Some));
            }
        })
    }

    /// Polls the fair lock's queue every 5 ms and records when each holder
    /// id appears in it (again), and which of them were gone by then (see
    /// [`QueuePoll::gone`]; one script, so one instant of the server's).
    fn queue_monitor(&self, url: String) -> JoinHandle<()> {
        let keys = [
            format!("redisson_lock_queue:{{{}}}", self.name),
            format!("redisson_lock_timeout:{{{}}}", self.name),
        ];
        let mark_prefix = format!("{{{}}}:redisync_fair_direct:", self.name);
        let stop = Arc::clone(&self.stop);
        let polls = Arc::clone(&self.polls);
        // Gone as lua/fair_lock_prelude.lua's evict_stale_waiters counts it:
        // the slot deadline passed, or the direct mark's live-until did.
        let poll = redis::Script::new(
            r"
            local queue = redis.call('lrange', KEYS[1], 0, -1)
            local time = redis.call('time')
            local now = time[1] * 1000 + math.floor(time[2] / 1000)
            local out = {}
            for _, id in ipairs(queue) do
                local deadline = tonumber(redis.call('zscore', KEYS[2], id))
                local mark = redis.call('get', ARGV[1] .. id)
                local live_until = mark and tonumber(string.match(mark, '^[^:]*:%d+:(%d+)$'))
                local gone = deadline == nil or deadline <= now
                    or (live_until and live_until < now)
                out[#out + 1] = id
                out[#out + 1] = gone and 1 or 0
                out[#out + 1] = string.format('%s(slot %s ms, mark %s ms)', id,
                    deadline and string.format('%d', deadline - now) or 'none',
                    live_until and string.format('%d', live_until - now) or 'none')
            end
            return out
            ",
        );
        thread::spawn(move || {
            let mut conn: Option<redis::Connection> = None;
            while !stop.load(Ordering::SeqCst) {
                let c = conn.get_or_insert_with(|| {
                    let c = raw_connection(&url);
                    c.set_read_timeout(Some(Duration::from_millis(500)))
                        .unwrap();
                    c
                });
                let sent = mono_ns();
                match poll
                    .key(&keys[0])
                    .key(&keys[1])
                    .arg(&mark_prefix)
                    .invoke::<Vec<(String, i64, String)>>(c)
                {
                    Ok(entries) => polls.lock().unwrap().push(QueuePoll {
                        sent_ns: sent,
                        done_ns: mono_ns(),
                        gone: entries
                            .iter()
                            .filter(|(_, gone, _)| *gone == 1)
                            .map(|(id, _, _)| id.clone())
                            .collect(),
                        detail: entries
                            .iter()
                            .map(|(_, _, detail)| detail.as_str())
                            .collect::<Vec<_>>()
                            .join(" "),
                        queue: entries.into_iter().map(|(id, _, _)| id).collect(),
                    }),
                    // The poll itself broken: no poll would count, and the
                    // FIFO check would pass on no evidence.
                    Err(e)
                        if e.kind() == redis::ErrorKind::UnexpectedReturnType
                            || e.to_string().contains("user_script") =>
                    {
                        panic!("the queue poll failed: {e}")
                    }
                    // A frozen or unreachable server: poll again later.
                    Err(_) => conn = None,
                }
                thread::sleep(Duration::from_millis(5));
            }
        })
    }

    /// The fair lock's calls and the polls of its queue.
    fn fair_history(&self) -> (Vec<FairWait>, Vec<QueuePoll>) {
        let waits = self
            .fair_calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| FairWait {
                who: c.who.clone(),
                start_ns: c.start_ns,
                end_ns: c.end_ns,
                enter_ns: (c.entered == Some(true)).then_some(c.end_ns),
            })
            .collect();
        (waits, self.polls.lock().unwrap().clone())
    }

    /// Waits (bounded) until `n` sections entered at or after `since`;
    /// returns when the first of them entered.
    fn await_sections(&self, what: &str, since: u64, n: usize, timeout: Duration) -> u64 {
        wait_until(what, timeout, || self.history.entered_since(since) >= n);
        self.history.first_entered_since(since).unwrap().enter_ns
    }

    /// Waits (bounded) until a long holder is inside its section.
    fn await_long_holder(&self) {
        wait_until(
            "a long holder holds the lock",
            Duration::from_secs(20),
            || self.long_holding.load(Ordering::SeqCst) > 0,
        );
    }

    /// Stops every thread (each finishes its current call) and joins them.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for handle in self.threads.drain(..) {
            handle.join().expect("a workload thread panicked");
        }
    }

    /// Runs the history checker on the sections and the store's log.
    fn check(&self, excuses: &[Excuse]) -> Verdict {
        history::check(&self.history.sections(), &self.store.log(), excuses)
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
    client_with(url, watchdog, events, RESPONSE_TIMEOUT)
}

/// A client of the workload on `url` with `response_timeout`.
fn client_with(
    url: &str,
    watchdog: Duration,
    events: &Arc<Events>,
    response_timeout: Duration,
) -> Client {
    Client::builder()
        .redis_url(url)
        .watchdog_timeout(watchdog)
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(response_timeout)
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

/// Checks the workload's history (with `excuses`: exact fault windows) and
/// prints a summary: the lost-update check runs whatever the excuses.
fn check_history(checks: &mut Checks, workload: &Workload, excuses: &[Excuse]) -> Verdict {
    let what = checks.what.clone();
    let verdict = workload.check(excuses);
    let sections = workload.history.sections();
    let log = workload.store.log();
    let lost = sections.iter().filter(|s| s.lost_ns.is_some()).count();
    let long = sections
        .iter()
        .filter(|s| ms_between(s.enter_ns, s.exit_ns) > 100.0)
        .count();
    eprintln!(
        "{what}: {} sections ({long} long, {lost} saw is_lost()), {} writes ({} accepted), \
         {} excused, {} violation(s)",
        sections.len(),
        log.len(),
        log.iter().filter(|w| w.accepted).count(),
        verdict.excused.len(),
        verdict.violations.len()
    );
    for text in verdict.excused.iter().take(3) {
        eprintln!("{what}: excused {text}");
    }
    checks.clean(&verdict);
    verdict
}

/// The exact window `[from, to]` of a fault, as an excuse.
fn window(why: &str, from_ns: u64, to_ns: u64) -> Excuse {
    Excuse {
        from_ns,
        to_ns,
        why: why.to_owned(),
        faulted: None,
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
// Faults that confirm they happened
// ---------------------------------------------------------------------------

/// The state letter of process `pid` (`T`: stopped), from /proc.
fn process_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/stat: {e}"));
    let after = stat.rsplit_once(") ").expect("a /proc stat line").1;
    after.chars().next().unwrap_or('?')
}

/// Waits (bounded) until process `pid` is stopped: a signal is delivered
/// asynchronously.
fn await_stopped(pid: u32) {
    wait_until(
        &format!("process {pid} stops"),
        Duration::from_secs(5),
        || process_state(pid) == 'T',
    );
}

/// Freezes `server` for `pause` (SIGSTOP, the state confirmed `T`); returns
/// the exact window.
fn freeze(server: &TestServer, pause: Duration) -> (u64, u64) {
    server.pause();
    let from = mono_ns();
    await_stopped(server.pid());
    thread::sleep(pause);
    server.resume();
    let to = mono_ns();
    wait_until("the server runs again", Duration::from_secs(5), || {
        process_state(server.pid()) != 'T'
    });
    (from, to)
}

/// The ids of the server's normal connections (`CLIENT LIST TYPE normal`),
/// without `conn`'s own.
fn normal_ids(conn: &mut redis::Connection) -> Vec<u64> {
    let own: u64 = redis::cmd("CLIENT").arg("ID").query(conn).unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("normal")
        .query(conn)
        .unwrap();
    list.lines()
        .filter_map(|l| l.strip_prefix("id=")?.split(' ').next()?.parse().ok())
        .filter(|id| *id != own)
        .collect()
}

/// A script that keeps the server busy for ARGV[1] ms (it answers nothing
/// else meanwhile, below the busy-reply threshold of 5 s).
const BUSY_SCRIPT: &str = r"
local t = redis.call('time')
local start = t[1] * 1000 + t[2] / 1000
repeat
    t = redis.call('time')
until t[1] * 1000 + t[2] / 1000 - start >= tonumber(ARGV[1])
return 1
";

/// What [`kill_in_flight`] did.
#[derive(Debug)]
struct KillReport {
    killed: i64,
    /// Calls of the workload running when the kill was sent (the server
    /// busy, so each had its request sent or about to be).
    in_flight: usize,
    before: usize,
    survivors: usize,
    /// Through a proxy: how many of the killed connections had a request of
    /// their client in flight (sent, unanswered) when the server closed
    /// them ([`DelayProxy::server_closes_with_a_request_unanswered`]).
    unanswered: Option<u64>,
}

impl KillReport {
    /// CLIENT LIST before and after: every normal connection closed.
    fn closed_every_connection(&self) -> bool {
        self.before > 0 && self.killed >= 1 && self.survivors == 0
    }

    /// At least one killed connection had a request in flight (as seen by
    /// the proxy the clients go through).
    fn confirmed(&self) -> bool {
        self.closed_every_connection() && self.unanswered.is_some_and(|n| n >= 1)
    }
}

/// `CLIENT KILL TYPE normal` of connections with a command in flight: a
/// slow script keeps the server busy 400 ms while the workload's requests
/// queue behind it, and the kill is sent behind them: they run, then their
/// connections close before the replies go out, so the resend path meets
/// requests that ran. Confirms it with CLIENT LIST before and after and the
/// calls that were in flight; with the `proxy` the clients go through, also
/// that the server closed connections with a request of theirs unanswered.
fn kill_in_flight(server: &TestServer, calls: &Calls, proxy: Option<&DelayProxy>) -> KillReport {
    let mut conn = server.connection();
    let unanswered_before = proxy.map(DelayProxy::server_closes_with_a_request_unanswered);
    let before = normal_ids(&mut conn);
    let busy = {
        let mut busy_conn = server.connection();
        thread::spawn(move || {
            redis::Script::new(BUSY_SCRIPT)
                .arg(400)
                .invoke::<i64>(&mut busy_conn)
        })
    };
    thread::sleep(Duration::from_millis(200));
    let in_flight = calls.running.load(Ordering::SeqCst);
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut conn)
        .unwrap();
    let _ = busy.join();
    let after = normal_ids(&mut conn);
    // The proxy's pumps see the closes within a poll or two.
    let unanswered = proxy.zip(unanswered_before).map(|(proxy, before)| {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let n = proxy.server_closes_with_a_request_unanswered() - before;
            if n > 0 || Instant::now() >= deadline {
                break n;
            }
            thread::sleep(Duration::from_millis(20));
        }
    });
    KillReport {
        killed,
        in_flight,
        before: before.len(),
        survivors: before.iter().filter(|id| after.contains(id)).count(),
        unanswered,
    }
}

/// How long [`late_delivery`] holds a request.
#[derive(Debug, Clone, Copy)]
enum Hold {
    /// This long after the proxy held it.
    For(Duration),
    /// At most this long, and so that it lands inside its window when it
    /// has one ([`INSIDE_MARGIN`] before the window's end).
    InsideWindow(Duration),
}

/// How long before its window's end a copy meant to land inside it is
/// delivered (the delivery's own way to the server's window check).
const INSIDE_MARGIN: Duration = Duration::from_millis(150);

/// A request the proxy held and delivered later, confirmed: what was held
/// is a script call on the object, and the server answered it.
#[derive(Debug)]
struct HeldRequest {
    /// Bytes delivered.
    bytes: usize,
    /// When the proxy held its first bytes (the fault begins).
    held_ns: u64,
    /// When the server's reply to the delivered bytes had come.
    delivered_ns: u64,
    /// The request as delivered (lossy text).
    request: String,
    /// The server's reply to it (lossy text, as far as it had come).
    reply: String,
    /// Where the request carries a window (a writing script: its last
    /// argument, the window's end in server ms, see lua/window_prelude.lua),
    /// whether it was delivered inside it (`Some(true)`), past it
    /// (`Some(false)`), or too close to tell (`None`); `None` too for a
    /// request without a window.
    inside_window: Option<bool>,
}

impl HeldRequest {
    /// The reply's first line (`-ERR late request ...`, `:1`, `$-1`, ...).
    fn answer(&self) -> &str {
        self.reply.lines().next().unwrap_or("")
    }

    /// The script's name as the request shows it (its command and the
    /// object's keys), for the log.
    fn what(&self) -> String {
        let args = resp_args(&self.request);
        let keys: Vec<&String> = args.iter().skip(3).take(6).collect();
        format!(
            "{} {}",
            args.first().map_or("?", String::as_str),
            keys.iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        )
    }
}

/// The arguments of the first RESP command in `text` (`*N` then `N` bulk
/// strings), as far as they are there.
fn resp_args(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let line = |at: usize| -> Option<(&str, usize)> {
        let end = at + text.get(at..)?.find("\r\n")?;
        Some((&text[at..end], end + 2))
    };
    let mut args = Vec::new();
    let Some((head, mut at)) = line(0) else {
        return args;
    };
    let Some(n) = head.strip_prefix('*').and_then(|n| n.parse::<usize>().ok()) else {
        return args;
    };
    for _ in 0..n {
        let Some((len, body)) = line(at) else { break };
        let Some(len) = len.strip_prefix('$').and_then(|l| l.parse::<usize>().ok()) else {
            break;
        };
        let Some(arg) = bytes.get(body..body + len) else {
            break;
        };
        args.push(String::from_utf8_lossy(arg).into_owned());
        at = body + len + 2;
    }
    args
}

/// The window end (server ms) a writing script call carries as its last
/// argument (lua/window_prelude.lua), if `request`'s last argument is one: a
/// time in ms within a day of `server_ms`.
fn window_end_of(request: &str, server_ms: u64) -> Option<u64> {
    let args = resp_args(request);
    if !args.first().is_some_and(|c| c.starts_with("EVAL")) {
        return None;
    }
    let end: u64 = args.last()?.parse().ok()?;
    (end.abs_diff(server_ms) < 86_400_000).then_some(end)
}

/// The server's clock in ms (`TIME`), on a connection of its own.
fn server_ms(server: &TestServer) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query(&mut server.connection())
        .expect("TIME");
    secs * 1000 + micros / 1000
}

/// Whether `text` (a request, lossy text) is a script call on the object
/// `name`: `EVAL`/`EVALSHA` naming it, not a `SUBSCRIBE` to one of its
/// channels (which names it too).
fn is_script_call_on(text: &str, name: &str) -> bool {
    text.contains("EVAL") && text.contains(name) && !text.contains("SUBSCRIBE")
}

/// Holds the next script call on the object `name` in `proxy` (with `cut`,
/// its client's side of the connection drops at once, so the client sends
/// it again on another connection while the proxy keeps the original),
/// delivers it `hold` after the proxy held it, and confirms both ends: the
/// bytes held are a script call on `name` ([`is_script_call_on`]), and the
/// server answered the delivered bytes (the answer is returned, to record),
/// inside its window or past it as the request's window says. `patterns`:
/// the object's name first, then anything else the request must contain.
/// `None`: no such request came within 20 s (the proxy is disarmed).
fn late_delivery(
    (server, proxy): (&TestServer, &DelayProxy),
    patterns: &[&str],
    hold: Hold,
    cut: bool,
) -> Option<HeldRequest> {
    let name = patterns[0];
    let patterns: Vec<&[u8]> = [b"EVAL".as_slice()]
        .into_iter()
        .chain(patterns.iter().map(|p| p.as_bytes()))
        .collect();
    if cut {
        proxy.hold_next_request_and_cut(&patterns);
    } else {
        proxy.hold_next_request(&patterns);
    }
    let held = proxy.try_wait_held(Duration::from_secs(20))?;
    let held_at = proxy
        .held_at()
        .expect("the proxy says when it held the bytes");
    let request = String::from_utf8_lossy(&proxy.held_request()).into_owned();
    assert!(
        is_script_call_on(&request, name),
        "the proxy held {request:?}, not a script call on {name}"
    );
    // A copy meant to land inside its window is delivered before the
    // window's end (a waiting call's window is what is left of its wait, at
    // least 100 ms), with a margin for the delivery itself.
    let hold = match hold {
        Hold::For(hold) => hold,
        Hold::InsideWindow(at_most) => {
            let now_ms = server_ms(server);
            window_end_of(&request, now_ms).map_or(at_most, |end| {
                let left = Duration::from_millis(end.saturating_sub(now_ms));
                at_most.min(left.saturating_sub(INSIDE_MARGIN) + held_at.elapsed())
            })
        }
    };
    thread::sleep(hold.saturating_sub(held_at.elapsed()));
    let before_ms = server_ms(server);
    let delivered = proxy_delivered_at_least(held, proxy.deliver());
    let delivered_ns = mono_ns();
    let after_ms = server_ms(server);
    let (request, reply) = proxy.last_delivery();
    assert!(
        is_script_call_on(&request, name) && reply.contains("\r\n"),
        "the delivery of a held script call on {name} was not confirmed: sent {request:?}, \
         answered {reply:?}"
    );
    // The server read the window's end against its clock between the two
    // readings: past it, nothing may run; inside it, the request ran.
    let inside_window = window_end_of(&request, before_ms).and_then(|end| {
        if end < before_ms {
            Some(false)
        } else if end > after_ms {
            Some(true)
        } else {
            None
        }
    });
    let refused_late = reply.contains("late request");
    // (A script the server no longer has, after a SCRIPT FLUSH, runs not
    // at all: nothing to check.)
    let ran_or_refused = !reply.starts_with("-NOSCRIPT");
    assert!(
        !ran_or_refused || inside_window.is_none_or(|inside| inside != refused_late),
        "a held request delivered {} its window was {} the server: {request:?} -> {reply:?}",
        if inside_window == Some(true) {
            "inside"
        } else {
            "past"
        },
        if refused_late {
            "refused as late by"
        } else {
            "run by"
        }
    );
    Some(HeldRequest {
        bytes: delivered,
        held_ns: history::ns_of(held_at),
        delivered_ns,
        request,
        reply,
        inside_window,
    })
}

/// The proxy may hold more than it had when first asked (later chunks of
/// the same connection); it never delivers less.
fn proxy_delivered_at_least(held: usize, delivered: usize) -> usize {
    assert!(
        delivered >= held && held > 0,
        "the proxy held {held} bytes but delivered {delivered}"
    );
    delivered
}

/// How many times a round tries a `CLIENT KILL` until one had a request in
/// flight.
const KILL_TRIES: usize = 3;

/// How many of the [`rounds`] must have had a confirmed `CLIENT KILL`
/// (a request in flight on a killed connection): every round of the short
/// mix, two of the long mix's three.
fn min_confirmed_kills() -> usize {
    rounds().min(2)
}

/// A fault's exact window, and the request it held if it held one (a
/// fault of that request's waiter only, see [`for_waiters`]); `None`: a
/// fault of the server or of every connection.
type Fault = (Excuse, Option<String>);

/// The faults' windows as excuses that name whom each hit: a held request
/// hit the waiters (of `ids`, holder ids) it names, and no other; a fault
/// without a request hit everyone.
fn for_waiters(faults: &[Fault], ids: &[String]) -> Vec<Excuse> {
    faults
        .iter()
        .map(|(excuse, request)| Excuse {
            faulted: request.as_ref().map(|request| {
                ids.iter()
                    .filter(|id| names_id(request, id))
                    .cloned()
                    .collect()
            }),
            ..excuse.clone()
        })
        .collect()
}

/// Whether `request` names the holder id `id` (`<uuid>:<thread>`): an
/// occurrence not followed by a digit (`...:1` is not `...:12`).
fn names_id(request: &str, id: &str) -> bool {
    request
        .match_indices(id)
        .any(|(at, _)| !request[at + id.len()..].starts_with(|c: char| c.is_ascii_digit()))
}

/// How long the nemesis's proxy holds a request in round `round`: past the
/// client's response timeout; in the long mix's third round past the
/// 10 s unlock latch too (a release delivered after it must free nothing).
fn late_hold(round: usize) -> Duration {
    if round == 2 {
        Duration::from_secs(12)
    } else {
        nemesis_response_timeout() * 2 + Duration::from_millis(500)
    }
}

/// Past every latch and record a copy could meet on this branch: the 10 s
/// unlock latch and the 60 s attempt and op records (and the records whose
/// TTL `ops::record_keep_ms` derives from a 1 s response timeout: 7 s, at
/// least their floor), with a margin.
const PAST_RECORDS: Duration = Duration::from_secs(65);

/// How long the nemesis holds a request whose client's side it cut (the
/// client has sent it again on another connection at once) before it
/// delivers the original, in round `round`: inside its window (at most
/// 400 ms, and before the window's end: the copy runs); in the long mix's
/// third round [`PAST_RECORDS`] (past its window: refused, and no latch or
/// record is left to stop it were the window check gone); in the
/// `long-timeout` mix inside its window, at most 11 s (past the 10 s unlock
/// latch when the window, 12 s for a call without a wait, allows it).
fn cut_hold(round: usize) -> Hold {
    if long_timeout_mix() {
        Hold::InsideWindow(LONG_RESPONSE_TIMEOUT - Duration::from_secs(1))
    } else if round == 2 {
        Hold::For(PAST_RECORDS)
    } else {
        Hold::InsideWindow(Duration::from_millis(400))
    }
}

/// What the nemesis's cuts did in one run.
#[derive(Debug, Default)]
struct Cuts {
    /// Writing calls (with a window) delivered inside their window.
    inside: usize,
    /// Writing calls delivered past their window.
    past: usize,
}

/// The nemesis every primitive runs under, [`rounds`] times: requests in
/// flight killed, a short freeze, a request held by the proxy and delivered
/// after its client gave up ([`late_hold`]), a freeze longer than `lease`.
/// Returns what happened, one line per fault (each confirmed), and each
/// fault's exact window.
fn nemesis(
    server: &TestServer,
    proxy: &DelayProxy,
    (pattern, releasing): (&str, &str),
    lease: Duration,
    calls: &Calls,
) -> (Vec<String>, Vec<Fault>) {
    nemesis_with(server, proxy, (pattern, releasing), lease, calls, &|_| {})
}

/// [`nemesis`], calling `before(fault)` before each fault (`kill`,
/// `freeze`, `late`, `long-freeze`, `cut`): a workload waits there until
/// the fault will hit what it means to (a leader in its tenure).
fn nemesis_with(
    server: &TestServer,
    proxy: &DelayProxy,
    (pattern, releasing): (&str, &str),
    lease: Duration,
    calls: &Calls,
    before: &dyn Fn(&str),
) -> (Vec<String>, Vec<Fault>) {
    let mut log = Vec::new();
    let mut windows = Vec::new();
    let mut kills_confirmed = 0;
    let mut cuts = Cuts::default();
    for round in 0..rounds() {
        if fault_enabled("kill") {
            before("kill");
            // A kill counts only if a killed connection had a request in
            // flight; up to KILL_TRIES tries, else the round has no kill.
            for attempt in 1..=KILL_TRIES {
                let from = mono_ns();
                let kill = kill_in_flight(server, calls, Some(proxy));
                let to = mono_ns();
                assert!(kill.closed_every_connection(), "CLIENT KILL: {kill:?}");
                thread::sleep(Duration::from_millis(500));
                if kill.confirmed() {
                    windows.push((window("CLIENT KILL in flight", from, to), None));
                    log.push(format!(
                        "round {round}: {kill:?}, confirmed (try {attempt})"
                    ));
                    kills_confirmed += 1;
                    break;
                }
                log.push(format!(
                    "round {round}: {kill:?}: no request in flight confirmed (try {attempt}): \
                     not counted"
                ));
            }
        }
        if fault_enabled("freeze") {
            before("freeze");
            let (from, to) = freeze(server, Duration::from_millis(300));
            windows.push((window("a short freeze", from, to), None));
            log.push(format!(
                "round {round}: frozen {:.0} ms",
                ms_between(from, to)
            ));
            thread::sleep(Duration::from_millis(500));
        }
        if fault_enabled("late") {
            before("late");
            let hold = Hold::For(late_hold(round));
            let late = late_delivery((server, proxy), &[pattern], hold, false)
                .expect("no script call on the object within 20 s to hold");
            // From when the proxy held it (not when it was armed) to the
            // server's answer to the delivery.
            windows.push((
                window(
                    "a request held by the proxy",
                    late.held_ns,
                    late.delivered_ns,
                ),
                Some(late.request.clone()),
            ));
            log.push(format!(
                "round {round}: {} ({} bytes) held {:.0} ms and delivered late (inside its \
                 window: {:?}), answered {:?}",
                late.what(),
                late.bytes,
                ms_between(late.held_ns, late.delivered_ns),
                late.inside_window,
                late.answer()
            ));
            thread::sleep(Duration::from_millis(500));
        }
        if fault_enabled("long-freeze") {
            before("long-freeze");
            let (from, to) = freeze(server, lease + Duration::from_secs(1));
            windows.push((window("a freeze past the lease", from, to), None));
            log.push(format!(
                "round {round}: frozen {:.0} ms",
                ms_between(from, to)
            ));
            thread::sleep(Duration::from_millis(1000));
        }
        if fault_enabled("cut") {
            before("cut");
            // The next script call on the object, then the next one that
            // names its channel (a release, a count-down: the calls that
            // publish), each cut from its client and delivered later.
            for patterns in [&[pattern][..], &[pattern, releasing][..]] {
                let Some(cut) = late_delivery((server, proxy), patterns, cut_hold(round), true)
                else {
                    log.push(format!(
                        "round {round}: no script call with {patterns:?} within 20 s to cut"
                    ));
                    continue;
                };
                windows.push((
                    window(
                        "a request cut from its client, resent, and delivered later",
                        cut.held_ns,
                        cut.delivered_ns,
                    ),
                    Some(cut.request.clone()),
                ));
                match cut.inside_window {
                    Some(true) => cuts.inside += 1,
                    Some(false) => cuts.past += 1,
                    None => {}
                }
                log.push(format!(
                    "round {round}: {} ({} bytes) cut from its client and delivered {:.0} ms \
                     later (inside its window: {:?}), answered {:?}",
                    cut.what(),
                    cut.bytes,
                    ms_between(cut.held_ns, cut.delivered_ns),
                    cut.inside_window,
                    cut.answer()
                ));
                thread::sleep(Duration::from_millis(500));
            }
        }
    }
    if fault_enabled("cut") {
        // Each run delivers at least one writing call's copy inside its
        // window (the long mix also one past every latch and record).
        assert!(
            cuts.inside >= 1 && (!long_mix() || cuts.past >= 1),
            "the cut fault did not deliver the copies it means to: {cuts:?}\n{}",
            log.join("\n")
        );
    }
    if fault_enabled("kill") {
        assert!(
            kills_confirmed >= min_confirmed_kills(),
            "only {kills_confirmed} of {} rounds had a CLIENT KILL with a request in flight \
             (at least {} needed):\n{}",
            rounds(),
            min_confirmed_kills(),
            log.join("\n")
        );
    }
    (log, windows)
}

// ---------------------------------------------------------------------------
// The checker can fail: each property on a synthetic history with its
// violation (mutation -> property)
// ---------------------------------------------------------------------------

fn sec(client: &str, token: u64, enter_ns: u64, last_ok_ns: u64, exit_ns: u64) -> Section {
    Section {
        client: client.to_owned(),
        thread: 0,
        mode: Mode::Exclusive,
        token: Some(token),
        enter_ns,
        last_ok_ns,
        lost_ns: None,
        exit_ns,
    }
}

fn wr(client: &str, token: u64, sent_ns: u64, read: u64, accepted: bool) -> Write {
    Write {
        client: client.to_owned(),
        thread: 0,
        token: Some(token),
        sent_ns,
        read,
        value: read + 1,
        accepted,
    }
}

#[test]
fn checker_catches_an_overlap_unless_the_holder_knew_or_a_fault_explains_it() {
    // Mutation: a second grant while the first holder's is_lost() says held.
    let sections = [sec("a", 1, 100, 190, 200), sec("b", 2, 150, 240, 250)];
    let verdict = history::check(&sections, &[], &[]);
    assert_eq!(verdict.of("overlap").len(), 1, "{verdict:?}");
    // The first knew it was lost before the second entered: no overlap.
    let mut knew = sections.clone();
    knew[0].last_ok_ns = 140;
    knew[0].lost_ns = Some(145);
    assert!(history::check(&knew, &[], &[]).violations.is_empty());
    // Lost only when it left is no excuse (the old checker's hole).
    let mut late = sections.clone();
    late[0].lost_ns = Some(199);
    assert_eq!(history::check(&late, &[], &[]).of("overlap").len(), 1);
    // Only a window the first held across excuses it, and only exactly.
    let pause = window("a pause", 120, 130);
    let verdict = history::check(&sections, &[], std::slice::from_ref(&pause));
    assert!(
        verdict.violations.is_empty() && verdict.excused.len() == 1,
        "{verdict:?}"
    );
    let before = window("a pause before", 10, 90);
    assert_eq!(
        history::check(&sections, &[], &[before])
            .of("overlap")
            .len(),
        1
    );
    // Readers share; a writer with a reader is an overlap.
    let mut readers = sections;
    readers[0].mode = Mode::Shared;
    readers[1].mode = Mode::Shared;
    assert!(history::check(&readers, &[], &[]).violations.is_empty());
    readers[1].mode = Mode::Exclusive;
    let verdict = history::check(&readers, &[], &[]);
    assert_eq!(
        verdict.of("overlap").len(),
        1,
        "writer with a reader: {verdict:?}"
    );
    // Back to back is fine.
    let apart = [sec("a", 1, 100, 190, 200), sec("b", 2, 200, 240, 250)];
    let verdict = history::check(&apart, &[], &[]);
    assert!(
        verdict.violations.is_empty() && verdict.excused.is_empty(),
        "{verdict:?}"
    );
    let line = late[0].to_line();
    assert_eq!(Section::from_line(&line), late[0]);
}

#[test]
fn checker_catches_a_lost_update_whatever_the_excuses() {
    // Mutation: two holders read 0, both write 1 (lost update).
    let sections = [sec("a", 1, 100, 300, 310), sec("b", 2, 400, 500, 510)];
    let writes = [wr("a", 1, 300, 0, true), wr("b", 2, 500, 0, true)];
    let unrelated = window("an unrelated fault", 350, 360);
    let verdict = history::check(&sections, &writes, std::slice::from_ref(&unrelated));
    assert_eq!(verdict.of("lost update").len(), 1, "{verdict:?}");
    // Excused only when the overwritten write's holder held across a fault.
    let pause = window("a's pause", 200, 250);
    let verdict = history::check(&sections, &writes, &[pause]);
    assert!(verdict.of("lost update").is_empty(), "{verdict:?}");
    assert_eq!(verdict.excused.len(), 1);
    // A clean chain.
    let good = [wr("a", 1, 300, 0, true), wr("b", 2, 500, 1, true)];
    assert!(history::check(&sections, &good, &[]).violations.is_empty());
    let line = good[1].to_line();
    assert_eq!(Write::from_line(&line), good[1]);
}

#[test]
fn checker_catches_a_stale_fenced_write() {
    // Mutation 1: a store that accepts a token below one it accepted.
    let sections = [sec("a", 1, 100, 150, 600), sec("b", 2, 300, 400, 410)];
    let writes = [wr("b", 2, 400, 0, true), wr("a", 1, 500, 1, true)];
    let verdict = history::check(&sections, &writes, &[]);
    assert!(
        verdict
            .of("stale write")
            .iter()
            .any(|v| v.contains("accepted after the store")),
        "{verdict:?}"
    );
    // Mutation 2: a production store (token >= last) accepts the old
    // holder's write because the new one has not written yet: fencing cannot
    // refuse it, the checker sees it (and the lost update it causes).
    let sections = [sec("a", 1, 100, 350, 360), sec("b", 2, 300, 500, 510)];
    let store = FencedStore::default();
    store.write(wr("a", 1, 350, 0, false));
    store.write(wr("b", 2, 500, 0, false));
    let verdict = history::check(&sections, &store.log(), &[]);
    assert!(
        verdict
            .of("stale write")
            .iter()
            .any(|v| v.contains("newer holder")),
        "{verdict:?}"
    );
    assert_eq!(verdict.of("lost update").len(), 1, "{verdict:?}");
}

#[test]
fn fenced_store_has_production_semantics() {
    let store = FencedStore::default();
    assert!(store.write(wr("a", 3, 1, 0, false)));
    assert!(
        store.write(wr("a", 3, 2, 1, false)),
        "the same holder writes again"
    );
    assert!(store.write(wr("b", 4, 3, 2, false)));
    assert!(
        !store.write(wr("a", 3, 4, 3, false)),
        "a lower token is refused"
    );
    assert_eq!(store.read(), 3);
    assert_eq!(store.log().iter().filter(|w| w.accepted).count(), 3);
}

#[test]
fn checker_catches_a_backwards_token() {
    let backwards = [sec("a", 5, 100, 190, 200), sec("b", 3, 300, 390, 400)];
    let verdict = history::check(&backwards, &[], &[]);
    assert_eq!(verdict.of("token went backwards").len(), 1, "{verdict:?}");
    let repeated = [sec("a", 5, 100, 190, 200), sec("b", 5, 300, 390, 400)];
    assert_eq!(history::check(&repeated, &[], &[]).violations.len(), 1);
}

#[test]
fn election_checker_catches_an_overlap_unless_the_old_leader_knew() {
    // Mutation: b won while a's is_lost() still said it led.
    let terms = [sec("a", 10, 100, 190, 200), sec("b", 11, 150, 240, 250)];
    let verdict = check_election(&terms, &[], Duration::from_millis(1));
    assert_eq!(verdict.of("leadership overlap").len(), 1, "{verdict:?}");
    // a's lost signal fired before b won: a counts as ended then.
    let mut knew = terms.clone();
    knew[0].last_ok_ns = 140;
    knew[0].lost_ns = Some(145);
    assert!(
        check_election(&knew, &[], Duration::from_millis(1))
            .violations
            .is_empty()
    );
    // Lost only when it resigned is no excuse; nor is a fault window.
    let mut late = terms;
    late[0].lost_ns = Some(199);
    let pause = window("a pause", 120, 130);
    assert_eq!(
        check_election(&late, &[pause], Duration::from_secs(1))
            .of("leadership overlap")
            .len(),
        1
    );
}

#[test]
fn election_checker_catches_terms_not_increased_or_reused() {
    // Mutation: the later leader fences with a lower term.
    let backwards = [sec("a", 10, 100, 190, 200), sec("b", 9, 300, 390, 400)];
    let verdict = check_election(&backwards, &[], Duration::from_millis(1));
    assert_eq!(verdict.of("term not increased").len(), 1, "{verdict:?}");
    // Mutation: two leaderships with one term.
    let reused = [sec("a", 10, 100, 190, 200), sec("b", 10, 300, 390, 400)];
    let verdict = check_election(&reused, &[], Duration::from_millis(1));
    assert_eq!(verdict.of("term reused").len(), 1, "{verdict:?}");
    assert_eq!(verdict.of("term not increased").len(), 1, "{verdict:?}");
    // A leadership that never led (its first look said lost: a late
    // proclamation's reply) may come back after a newer one won.
    let mut never = [sec("b", 11, 100, 190, 200), sec("a", 10, 150, 150, 160)];
    never[1].lost_ns = Some(151);
    assert!(!led(&never[1]) && led(&never[0]));
    let verdict = check_election(&never, &[], Duration::from_millis(1));
    assert!(verdict.violations.is_empty(), "{verdict:?}");
    // With a greater term it was proclaimed while b still said it led.
    never[1].token = Some(12);
    let verdict = check_election(&never, &[], Duration::from_millis(1));
    assert_eq!(verdict.of("leadership overlap").len(), 1, "{verdict:?}");
}

#[test]
fn election_checker_catches_no_progress_after_a_fault() {
    let terms = [sec("a", 10, 100, 190, 200), sec("b", 11, 500, 590, 600)];
    // The fault ended at 300; b led from 500: within 250, not within 150.
    let fault = window("a freeze", 250, 300);
    let verdict = check_election(
        &terms,
        std::slice::from_ref(&fault),
        Duration::from_nanos(250),
    );
    assert!(verdict.violations.is_empty(), "{verdict:?}");
    let verdict = check_election(
        &terms,
        std::slice::from_ref(&fault),
        Duration::from_nanos(150),
    );
    assert_eq!(verdict.of("no progress").len(), 1, "{verdict:?}");
    // A leader that led on across the fault's end is progress; one that
    // never led is not.
    let across = [sec("a", 10, 100, 310, 320)];
    assert!(
        check_election(&across, std::slice::from_ref(&fault), Duration::ZERO)
            .violations
            .is_empty()
    );
    let mut never = [sec("b", 11, 320, 320, 330)];
    never[0].lost_ns = Some(321);
    assert_eq!(
        check_election(&never, &[fault], Duration::from_secs(1))
            .of("no progress")
            .len(),
        1
    );
}

fn hold(who: &str, enter_ns: u64, until_ns: u64) -> PermitHold {
    PermitHold {
        who: who.to_owned(),
        count: 1,
        enter_ns,
        until_ns,
    }
}

#[test]
fn checker_catches_an_over_granted_permit() {
    // Mutation: a third permit of two granted while two are held.
    let holds = [hold("a", 0, 100), hold("b", 10, 90), hold("c", 50, 60)];
    let verdict = check_permits(&holds, 2, &[]);
    assert_eq!(verdict.of("over-granted").len(), 1, "{verdict:?}");
    assert!(check_permits(&holds, 3, &[]).violations.is_empty());
    // Released at the instant another is granted: not over.
    let handover = [hold("a", 0, 50), hold("b", 10, 90), hold("c", 50, 60)];
    assert!(check_permits(&handover, 2, &[]).violations.is_empty());
}

#[test]
fn checker_catches_a_fifo_break() {
    let wait = |who: &str, start_ns: u64, end_ns: u64, enter: bool| FairWait {
        who: who.into(),
        start_ns,
        end_ns,
        enter_ns: enter.then_some(end_ns),
    };
    let poll = |sent_ns: u64, queue: &[&str]| QueuePoll {
        sent_ns,
        done_ns: sent_ns + 1,
        queue: queue.iter().map(|id| (*id).to_owned()).collect(),
        gone: Vec::new(),
        detail: String::new(),
    };
    // Mutation: b, behind a in the queue, gets the lock while a stays.
    let waits = [wait("a", 90, 500, true), wait("b", 190, 300, true)];
    let polls = [
        poll(100, &["a"]),
        poll(200, &["a", "b"]),
        poll(305, &["a"]),
        poll(505, &[]),
    ];
    let verdict = check_fifo(&waits, &polls, &[]);
    assert_eq!(verdict.of("FIFO broken").len(), 1, "{verdict:?}");
    // In order: a first.
    let in_order = [wait("a", 90, 250, true), wait("b", 190, 300, true)];
    assert!(check_fifo(&in_order, &polls, &[]).violations.is_empty());
    // a left the queue (gave up, evicted) before b entered: no break.
    let left = [
        poll(100, &["a"]),
        poll(200, &["a", "b"]),
        poll(250, &["b"]),
        poll(305, &["a"]),
    ];
    assert!(check_fifo(&waits, &left, &[]).violations.is_empty());
    // b barged in without ever queueing while a waited: a break.
    let barged = [poll(100, &["a"]), poll(305, &["a"])];
    assert_eq!(check_fifo(&waits, &barged, &[]).violations.len(), 1);
    // b absent from a poll that may have run after b's grant proves
    // nothing.
    let unclear = [poll(295, &["a"]), poll(305, &["a"])];
    assert!(check_fifo(&waits, &unclear, &[]).violations.is_empty());
    // a seen ahead only while already gone by the server's clock (its slot
    // ran out in a freeze that ended just before the polls; the next script
    // evicts it, and its retry queues it again, here at the head of a
    // shorter queue): ahead of nobody, no break. Live in those polls: one.
    let gone_a = |sent_ns: u64, queue: &[&str]| QueuePoll {
        gone: vec!["a".to_owned()],
        ..poll(sent_ns, queue)
    };
    let stale = [
        gone_a(100, &["a"]),
        gone_a(200, &["a", "b"]),
        poll(305, &["a"]),
        poll(505, &[]),
    ];
    assert!(check_fifo(&waits, &stale, &[]).violations.is_empty());
    let live_later = [
        gone_a(100, &["a"]),
        poll(200, &["a", "b"]),
        poll(305, &["a"]),
    ];
    assert_eq!(check_fifo(&waits, &live_later, &[]).violations.len(), 1);
    // Gone between being seen ahead and b entering: its place is lost.
    let gone_after = [
        poll(100, &["a"]),
        poll(200, &["a", "b"]),
        gone_a(305, &["a"]),
    ];
    assert!(check_fifo(&waits, &gone_after, &[]).violations.is_empty());
    // A fault between a being seen ahead and b entering explains it.
    let freeze = window("a freeze", 150, 160);
    let verdict = check_fifo(&waits, &polls, &[freeze]);
    assert!(
        verdict.violations.is_empty() && verdict.excused.len() == 1,
        "{verdict:?}"
    );
}

/// A FIFO break is excused by a fault that hit the waiter that lost its
/// turn, never by a fault of another waiter's request in the same moment
/// (the nemesis's held request names the waiter it was for).
#[test]
fn checker_excuses_a_fifo_break_only_by_the_faulted_waiters_own_window() {
    let waits = [
        FairWait {
            who: "a".into(),
            start_ns: 90,
            end_ns: 500,
            enter_ns: Some(500),
        },
        FairWait {
            who: "b".into(),
            start_ns: 190,
            end_ns: 300,
            enter_ns: Some(300),
        },
    ];
    let polls: Vec<QueuePoll> = [(100, vec!["a"]), (200, vec!["a", "b"]), (305, vec!["a"])]
        .into_iter()
        .map(|(sent_ns, queue)| QueuePoll {
            sent_ns,
            done_ns: sent_ns + 1,
            queue: queue.into_iter().map(str::to_owned).collect(),
            gone: Vec::new(),
            detail: String::new(),
        })
        .collect();
    let held_for = |who: &str| Excuse {
        faulted: Some(vec![who.to_owned()]),
        ..window(&format!("{who}'s request held"), 150, 250)
    };
    // b's request held (b is the one that overtook): no excuse for a's
    // lost turn.
    let verdict = check_fifo(&waits, &polls, &[held_for("b")]);
    assert_eq!(verdict.of("FIFO broken").len(), 1, "{verdict:?}");
    // A request of a waiter not in the break at all: none either.
    let verdict = check_fifo(&waits, &polls, &[held_for("c")]);
    assert_eq!(verdict.of("FIFO broken").len(), 1, "{verdict:?}");
    // a's own request held: excused.
    let verdict = check_fifo(&waits, &polls, &[held_for("a")]);
    assert!(
        verdict.violations.is_empty() && verdict.excused.len() == 1,
        "{verdict:?}"
    );
    // A fault of every connection (a kill, a freeze) hit a too.
    let verdict = check_fifo(&waits, &polls, &[window("a freeze", 150, 250)]);
    assert!(verdict.violations.is_empty(), "{verdict:?}");
    // The nemesis names the waiter by the holder id in the held request.
    let faults = [(
        window("a request held by the proxy", 150, 250),
        Some("*5\r\n$7\r\nEVALSHA\r\n...$3\r\nb:7\r\n".to_owned()),
    )];
    let ids = ["a:1".to_owned(), "b:7".to_owned(), "b:71".to_owned()];
    let named = for_waiters(&faults, &ids);
    assert_eq!(named[0].faulted, Some(vec!["b:7".to_owned()]));
}

#[test]
fn checker_catches_a_latch_opened_early() {
    let call = |who: &str, count_down: bool, start_ns: u64, end_ns: u64| LatchCall {
        who: who.into(),
        count_down,
        start_ns,
        end_ns,
    };
    let calls = [
        call("d1", true, 100, 110),
        call("d2", true, 200, 210),
        call("w", false, 0, 150),
    ];
    let verdict = check_latch(&calls, 2);
    assert_eq!(verdict.of("latch opened early").len(), 1, "{verdict:?}");
    let mut fine = calls;
    fine[2].end_ns = 205;
    assert!(check_latch(&fine, 2).violations.is_empty());
}

// 1. SIGSTOP shorter than the lease
// ---------------------------------------------------------------------------

#[test]
fn sigstop_shorter_than_the_lease_loses_nothing() {
    const WATCHDOG: Duration = Duration::from_millis(1500);
    const PAUSE: Duration = Duration::from_millis(300);
    let server = TestServer::start();
    let name = unique_name("fault-suite:short-stop");
    let (clients, events) = clients(&server.url(), 2, WATCHDOG);
    let knobs = Knobs::new(Kind::Fenced, 3, Some(WATCHDOG));
    let mut workload = Workload::start(
        &server.url(),
        &clients,
        knobs,
        &name,
        Store::Local(FencedStore::default()),
    );
    workload.await_sections("warm-up", 0, 20, Duration::from_secs(20));

    // Opened before the pause: it tells when the server answers again.
    let mut probe = server.connection();
    server.pause();
    let paused_ns = mono_ns();
    thread::sleep(PAUSE);
    server.resume();
    let resumed_ns = mono_ns();
    let _: String = redis::cmd("PING").query(&mut probe).unwrap();
    // On a loaded machine the resumed server may take a while over what
    // queued up: it is unavailable until it answers.
    let back_ns = mono_ns();
    workload.await_sections(
        "work after the pause",
        resumed_ns,
        30,
        Duration::from_secs(20),
    );
    thread::sleep(WATCHDOG);
    workload.stop();

    eprintln!(
        "short stop: paused {:.0} ms, answering again {:.0} ms after the SIGCONT",
        ms_between(paused_ns, resumed_ns),
        ms_between(resumed_ns, back_ns)
    );
    let mut checks = Checks::new("short stop");
    check_history(&mut checks, &workload, &[]);
    let calls = workload.calls.all();
    let slowest = checks.bounded(&calls);
    eprintln!("short stop: slowest call {slowest:?}");
    // A call whose own wait ran out while the server did not answer (from
    // the SIGSTOP until it answered again) fails as the library promises
    // (its last round trip is cut at the wait's end, or 100 ms after it was
    // sent, whichever is later): that is the fault's window, not a loss.
    // Every other call must succeed.
    let floor_ns = 100_000_000;
    let errors: Vec<Call> = errors_since(&calls, 0)
        .into_iter()
        .filter(|c| {
            let wait_end_ns = c.start_ns + WAIT.as_nanos() as u64;
            !(c.op.starts_with("try_lock_for")
                && wait_end_ns + floor_ns >= paused_ns
                && wait_end_ns <= back_ns + floor_ns)
        })
        .collect();
    checks.no_errors("the server paused shorter than a response timeout", &errors);
    let lost: Vec<_> = workload
        .history
        .sections()
        .into_iter()
        .filter(|s| s.lost_ns.is_some())
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
    let knobs = Knobs::new(Kind::Fenced, 3, Some(WATCHDOG));
    let mut workload = Workload::start(
        &url,
        &clients,
        knobs,
        &name,
        Store::Local(FencedStore::default()),
    );

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
    workload.await_long_holder();

    // A probe client with the library's default timeouts: the bound must
    // hold whatever the response timeout.
    let probe_client = Client::builder()
        .redis_url(url.as_str())
        .event_handler(Arc::clone(&events) as Arc<dyn EventHandler>)
        .build()
        .unwrap();

    server.pause();
    let paused_ns = mono_ns();
    await_stopped(server.pid());
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
    // No excuse: a frozen server cannot make is_lost() lie (the lease is
    // counted on the client), so nothing overlaps.
    check_history(&mut checks, &workload, &[]);
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
    let knobs = Knobs::new(Kind::Fenced, 2, Some(WATCHDOG));
    let mut workload = Workload::start(
        &server.url(),
        &clients,
        knobs,
        &name,
        Store::Local(FencedStore::default()),
    );
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
        // Data loss: a holder across the restart cannot know it lost the
        // lock; exactly the outage excuses it.
        &[window("the restart (data lost)", killed_ns, back_ns)],
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
/// lost lock, no lost-lock event, no overlap, no hold left behind. With
/// `errors_while_busy`, calls may fail while the fault lasts (it keeps the
/// server busy past their deadlines, or kills requests whose outcome is
/// then unknown: "an error means you do not hold it"), never after.
fn harmless_fault(
    what: &str,
    watchdog: Duration,
    knobs: Knobs,
    errors_while_busy: bool,
    fault: impl FnOnce(&TestServer, &Workload),
) -> (TestServer, Workload, Checks) {
    let server = TestServer::start();
    let name = unique_name(&format!("fault-suite:{what}"));
    let (clients, events) = clients(&server.url(), 2, watchdog);
    let mut workload = Workload::start(
        &server.url(),
        &clients,
        knobs,
        &name,
        Store::Local(FencedStore::default()),
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
    if errors_while_busy {
        let during: Vec<Call> = errors_since(&calls, fault_ns)
            .into_iter()
            .filter(|c| c.start_ns < over_ns)
            .collect();
        eprintln!(
            "{what}: {} call(s) failed while the fault lasted",
            during.len()
        );
        for call in during.iter().take(3) {
            eprintln!("{what}: during the fault: {call}");
        }
        checks.no_errors("calls after the fault", &errors_since(&calls, over_ns));
    } else {
        checks.no_errors(
            "calls after the fault began",
            &errors_since(&calls, fault_ns),
        );
    }
    let lost: Vec<String> = workload
        .history
        .sections()
        .iter()
        .filter(|s| s.lost_ns.is_some())
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
fn client_kill_with_requests_in_flight_costs_no_call_and_no_lock() {
    let (_server, _workload, checks) = harmless_fault(
        "client-kill-in-flight",
        Duration::from_millis(1500),
        Knobs::new(Kind::Fenced, 3, Some(Duration::from_millis(1500))),
        true,
        |server, workload| {
            let mut in_flight = 0;
            for round in 0..2 * rounds() {
                let kill = kill_in_flight(server, &workload.calls, None);
                eprintln!("client-kill-in-flight: round {round}: {kill:?}");
                assert!(
                    kill.before > 0 && kill.killed >= 1 && kill.survivors == 0,
                    "CLIENT KILL did not close every connection: {kill:?}"
                );
                in_flight += kill.in_flight;
                thread::sleep(Duration::from_millis(300));
            }
            assert!(
                in_flight >= 1,
                "no call was in flight when the kills landed"
            );
        },
    );
    checks.finish();
}

/// The late fault holds what it means and confirms it: armed, it lets a
/// `SUBSCRIBE` to the object's channel pass (it names the object too: the
/// old pattern, the name alone, held it), holds the script call that comes
/// a second later, opens its window when it held it (not when armed),
/// and reads the server's answer to the delivery: past the request's
/// window, refused as late.
#[test]
fn the_late_fault_holds_a_script_call_on_the_object_and_reads_its_answer() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let name = unique_name("fault-suite:held");
    const SCRIPT: &str = "if redis.call('time')[1] * 1000 > tonumber(ARGV[1]) then \
                          return redis.error_reply('ERR late request: test') end return 1";
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(SCRIPT)
        .query(&mut server.connection())
        .unwrap();
    let armed_ns = mono_ns();
    let subscriber = {
        let url = proxy.url();
        let channel = format!("redisson_lock__channel:{{{name}}}");
        thread::spawn(move || {
            // After the proxy is armed (at once, below).
            thread::sleep(Duration::from_millis(300));
            let mut conn = raw_connection(&url);
            conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut pubsub = conn.as_pubsub();
            pubsub.subscribe(&channel).map(|()| "subscribed")
        })
    };
    let caller = {
        let (url, name) = (proxy.url(), name.clone());
        thread::spawn(move || {
            thread::sleep(Duration::from_secs(1));
            let mut conn = raw_connection(&url);
            conn.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            // A writing call's shape: KEYS the object, last ARGV a window
            // 200 ms from now by the server's clock.
            let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
            let window_end = secs * 1000 + micros / 1000 + 200;
            redis::Script::new(SCRIPT)
                .key(&name)
                .arg(window_end)
                .invoke::<i64>(&mut conn)
        })
    };
    let held = late_delivery(
        (&server, &proxy),
        &[name.as_str()],
        Hold::For(Duration::from_secs(2)),
        false,
    )
    .expect("the script call was held");
    assert_eq!(
        subscriber.join().unwrap().ok(),
        Some("subscribed"),
        "the SUBSCRIBE naming the object passed"
    );
    assert!(caller.join().unwrap().is_err(), "the caller gave up");
    assert!(
        is_script_call_on(&held.request, &name),
        "held {:?}",
        held.request
    );
    assert!(
        held.held_ns >= armed_ns + 900_000_000,
        "the window opens when the proxy held the request ({:.0} ms after it was armed)",
        ms_between(armed_ns, held.held_ns)
    );
    assert_eq!(held.inside_window, Some(false), "{held:?}");
    assert!(held.answer().contains("late request"), "{held:?}");
    assert!(!is_script_call_on(
        &format!("*2\r\n$9\r\nSUBSCRIBE\r\n$20\r\nredisson_lock__channel:{{{name}}}\r\n"),
        &name
    ));
}

/// The nemesis's kill counts only when a killed connection had a request
/// in flight: an idle connection killed is not confirmed, one whose
/// request waits behind the busy script is.
#[test]
fn a_client_kill_counts_only_with_a_request_in_flight() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let calls = Calls::default();
    let mut idle = raw_connection(&proxy.url());
    let _: String = redis::cmd("PING").query(&mut idle).unwrap();
    let kill = kill_in_flight(&server, &calls, Some(&proxy));
    assert!(
        kill.closed_every_connection() && !kill.confirmed(),
        "an idle connection killed is no request in flight: {kill:?}"
    );
    let mut busy_client = raw_connection(&proxy.url());
    let sender = thread::spawn(move || {
        // Sent while the busy script runs (it starts at once, the kill
        // follows 200 ms later): the request waits behind it.
        thread::sleep(Duration::from_millis(80));
        redis::cmd("GET")
            .arg("fault-suite:in-flight")
            .query::<Option<String>>(&mut busy_client)
    });
    let kill = kill_in_flight(&server, &calls, Some(&proxy));
    assert!(
        sender.join().unwrap().is_err(),
        "the request in flight lost its reply"
    );
    assert!(kill.confirmed(), "a request in flight was killed: {kill:?}");
}

#[test]
fn client_kill_type_pubsub_still_wakes_parked_waiters() {
    // A long lease: a waiter that missed its wake-up would sleep up to the
    // lock's TTL (the watchdog timeout).
    const WATCHDOG: Duration = Duration::from_secs(10);
    let knobs = Knobs::new(Kind::Plain, 3, None);
    let (_server, workload, mut checks) =
        harmless_fault("client-kill-pubsub", WATCHDOG, knobs, false, |server, _| {
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
    // Work never stalled: no gap between one section leaving and the next
    // entering comes near the lease, which a waiter that missed its wake-up
    // would sleep (up to the lock's TTL). The lock is not fair, so one
    // thread's try_lock_for may lose every race for 2 s on a loaded machine:
    // that is no missed wake-up, and is only reported.
    let mut sections = workload.history.sections();
    sections.sort_by_key(|s| s.enter_ns);
    let gap = sections
        .windows(2)
        .map(|w| w[1].enter_ns.saturating_sub(w[0].exit_ns))
        .max()
        .unwrap_or(0);
    let gap = Duration::from_nanos(gap);
    let timeouts = workload
        .calls
        .all()
        .into_iter()
        .filter(|c| c.outcome == Outcome::NotAcquired)
        .count();
    eprintln!(
        "client-kill-pubsub: largest gap between sections {gap:?}; {timeouts} \
         try_lock_for({WAIT:?}) lost every race"
    );
    checks.check(gap < WATCHDOG / 2, || {
        format!("the lock sat free {gap:?} while threads waited (lease {WATCHDOG:?})")
    });
    checks.finish();
}

#[test]
fn idle_connections_reaped_by_the_server_cost_no_call() {
    let (_server, _workload, checks) = harmless_fault(
        "idle-timeout",
        Duration::from_millis(1000),
        Knobs::new(Kind::Fenced, 3, None),
        false,
        |server, workload| {
            workload.paused.store(true, Ordering::SeqCst);
            // Every thread finishes its call; then its connections idle.
            thread::sleep(Duration::from_millis(300));
            let mut conn = server.connection();
            let before = normal_ids(&mut conn);
            drop(conn);
            redis_cmd(server, &["CONFIG", "SET", "timeout", "1"]);
            // Every pooled connection idles past the server's timeout.
            thread::sleep(Duration::from_millis(2500));
            let after = normal_ids(&mut server.connection());
            let kept: Vec<_> = before.iter().filter(|id| after.contains(id)).collect();
            assert!(
                !before.is_empty() && kept.is_empty(),
                "the server reaped no idle connection: before {before:?}, after {after:?}"
            );
            eprintln!(
                "idle-timeout: the server reaped {} idle connections",
                before.len()
            );
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
        Knobs::new(Kind::Fenced, 3, Some(Duration::from_millis(1000))),
        false,
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

// ---------------------------------------------------------------------------
// 8-9. A holder process paused or killed
// ---------------------------------------------------------------------------

/// A production-store holder child on `server` holding `name` (its token and
/// when it entered), and a contended in-process workload on the same lock
/// and store, started once the child holds the lock.
fn child_holder_and_workload(
    server: &TestServer,
    name: &str,
    watchdog: Duration,
) -> (ChildProcess, u64, u64, Workload, Arc<Events>) {
    let store = format!("{name}:store");
    let envs = [
        (URL_ENV, server.url()),
        (LOCK_ENV, name.to_owned()),
        (STORE_ENV, store.clone()),
        (WATCHDOG_MS_ENV, ms(watchdog)),
    ];
    let child = ChildProcess::spawn("production_holder", &envs);
    let ready = child.expect_line(READY, READY_TIMEOUT);
    let mut words = ready.split_whitespace();
    let token: u64 = words.next().unwrap().parse().unwrap();
    let held_ns: u64 = words.next().unwrap().parse().unwrap();
    let (clients, events) = clients(&server.url(), 2, watchdog);
    let workload = Workload::start(
        &server.url(),
        &clients,
        Knobs::new(Kind::Fenced, 2, Some(watchdog)),
        name,
        Store::Redis {
            url: server.url(),
            store,
            accept_any: false,
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
    enter_ns: u64,
    last_ok_ns: u64,
    exit_ns: u64,
) -> Section {
    Section {
        client: format!("child-{}", child.pid()),
        thread: 0,
        mode: Mode::Exclusive,
        token: Some(token),
        enter_ns,
        last_ok_ns,
        lost_ns: None,
        exit_ns,
    }
}

#[test]
fn a_holder_process_paused_between_its_check_and_its_write_is_fenced_off() {
    const WATCHDOG: Duration = Duration::from_millis(1000);
    let server = TestServer::start();
    let name = unique_name("fault-suite:child-pause");
    let (mut child, token, held_ns, mut workload, _events) =
        child_holder_and_workload(&server, &name, WATCHDOG);

    // The zombie: is_lost() says held, then the process freezes before it
    // writes.
    child.send("check");
    let checked = child.expect_line(CHECKED, READY_TIMEOUT);
    assert!(
        checked.starts_with("lost=false"),
        "the child's check: {checked}"
    );
    let checked_ns: u64 = checked.split_whitespace().nth(1).unwrap().parse().unwrap();
    common::send_signal(child.pid(), "STOP");
    let stopped_ns = mono_ns();
    await_stopped(child.pid());
    let first = workload.await_sections(
        "the workload takes over",
        stopped_ns,
        20,
        Duration::from_secs(20),
    );
    child.send(WRITE);
    common::send_signal(child.pid(), "CONT");
    let resumed_ns = mono_ns();
    let result = child.expect_line(WRITE_RESULT, READY_TIMEOUT);
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
    workload.history.record(child_section(
        &child, token, held_ns, checked_ns, resumed_ns,
    ));
    let mut checks = Checks::new("child pause");
    checks.check(result.starts_with("refused"), || {
        format!(
            "the resumed holder's stale write: {result:?}, expected the store to refuse it; \
             child output:\n{}",
            child.transcript()
        )
    });
    check_history(
        &mut checks,
        &workload,
        &[window("the child's pause", stopped_ns, resumed_ns)],
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
    workload
        .history
        .record(child_section(&child, token, held_ns, held_ns, killed_ns));
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

// 10. Network partition
// ---------------------------------------------------------------------------

const SECTION_LINE: &str = "FS-SECTION";
const WRITE_LINE: &str = "FS-WRITE";
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
    let mut workload = Workload::start(
        &url,
        &clients,
        Knobs::new(Kind::Fenced, 2, Some(watchdog)),
        &name,
        Store::Local(FencedStore::default()),
    );
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
    for write in workload.store.log() {
        announce(&format!("{WRITE_LINE} {}", write.to_line()));
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
fn network_partition_dropping_packets_longer_than_the_lease() {
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
    eprintln!(
        "partition: the drop rule is in place: {}",
        partition.is_cut()
    );
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
    let writes: Vec<Write> = reported(&child, WRITE_LINE)
        .iter()
        .map(|l| Write::from_line(l))
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
            // Dropped packets: nothing is refused, every request waits
            // and times out.
            Outcome::Err(m) => {
                let m = m.to_lowercase();
                !(m.contains(&address) && m.contains("timed out"))
            }
            _ => false,
        })
        .map(ToString::to_string)
        .collect();
    checks.check(unclear.is_empty(), || {
        format!(
            "{} error(s) during the cut do not say they timed out and name {address}, e.g.:\n{}",
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
    // No excuse: across a partition the lease is counted on the client, so
    // is_lost() tells the truth; what the cut held back and TCP delivered
    // late after the heal must change nothing.
    let verdict = history::check(&sections, &writes, &[]);
    eprintln!(
        "partition: {} writes ({} accepted), {} violation(s)",
        writes.len(),
        writes.iter().filter(|w| w.accepted).count(),
        verdict.violations.len()
    );
    checks.clean(&verdict);
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

// ---------------------------------------------------------------------------
// 11. Every primitive under the same nemesis
// ---------------------------------------------------------------------------

/// The lease (watchdog timeout) of the nemesis runs.
const NEMESIS_LEASE: Duration = Duration::from_millis(1000);
/// How long after the last fault every call must succeed again.
const SETTLE: Duration = Duration::from_secs(3);

/// A server, a delaying proxy in front of it, and `n` clients through the
/// proxy.
fn nemesis_setup(n: usize) -> (TestServer, DelayProxy, Vec<Client>, Arc<Events>) {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let events = Arc::new(Events::default());
    let clients = (0..n)
        .map(|_| {
            client_with(
                &proxy.url(),
                NEMESIS_LEASE,
                &events,
                nemesis_response_timeout(),
            )
        })
        .collect();
    (server, proxy, clients, events)
}

/// Runs a lock workload of `kind` under the nemesis and checks its history
/// (plus FIFO for the fair lock); `knobs` may carry a mutation.
fn lock_under_nemesis(what: &str, knobs: Knobs) -> (Checks, Verdict, Option<Verdict>) {
    let (server, proxy, clients, _events) = nemesis_setup(2);
    let name = unique_name(&format!("fault-suite:{what}"));
    // The downstream store is another system: a server of its own, out of
    // the nemesis's reach.
    let store_server = TestServer::start();
    let store = match knobs.kind {
        // It accepts every token: the checker judges a stale write.
        Kind::Fenced => Store::Redis {
            url: store_server.url(),
            store: format!("{name}:store"),
            accept_any: true,
        },
        _ => Store::Local(FencedStore::default()),
    };
    let mut workload = Workload::start(&server.url(), &clients, knobs, &name, store);
    workload.await_sections("warm-up", 0, 10, Duration::from_secs(20));
    // The calls that publish on the lock's channel: its releases.
    let releasing = match knobs.kind {
        Kind::ReadWrite => "redisson_rwlock:",
        _ => "redisson_lock__channel:",
    };
    let (faults, windows) = nemesis(
        &server,
        &proxy,
        (&name, releasing),
        NEMESIS_LEASE,
        &workload.calls,
    );
    let over_ns = mono_ns();
    workload.await_sections(
        "work after the faults",
        over_ns,
        10,
        Duration::from_secs(30),
    );
    thread::sleep(SETTLE);
    workload.stop();
    let mut checks = Checks::new(what);
    for fault in &faults {
        eprintln!("{what}: {fault}");
    }
    // No excuse for the lock's safety: none of these faults can make
    // is_lost() lie.
    let verdict = check_history(&mut checks, &workload, &[]);
    let fifo = (knobs.kind == Kind::Fair).then(|| {
        let (waits, polls) = workload.fair_history();
        // A killed, frozen or held request can cost a waiter its turn: the
        // waiter it hit (a held request: the one it names), no other.
        let mut ids: Vec<String> = waits.iter().map(|w| w.who.clone()).collect();
        ids.sort();
        ids.dedup();
        let windows = for_waiters(&windows, &ids);
        for excuse in &windows {
            eprintln!(
                "{what}: fault window [{} .. {}] ({:.0} ms) {}: hit {}",
                excuse.from_ns,
                excuse.to_ns,
                ms_between(excuse.from_ns, excuse.to_ns),
                excuse.why,
                excuse
                    .faulted
                    .as_ref()
                    .map_or_else(|| "every waiter".to_owned(), |ids| format!("{ids:?}"))
            );
        }
        let verdict = check_fifo(&waits, &polls, &windows);
        // What the queue looked like around each violation, for the report.
        for text in verdict.violations.iter().take(2) {
            let Some(at) = text
                .split(" entered at ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .and_then(|ns| ns.parse::<u64>().ok())
            else {
                continue;
            };
            for poll in polls
                .iter()
                .filter(|p| p.sent_ns + 20_000_000 >= at && p.sent_ns <= at + 20_000_000)
            {
                eprintln!(
                    "{what}: poll {:+.1} ms from the entry at {at}: {}",
                    (poll.sent_ns as f64 - at as f64) / 1e6,
                    poll.detail
                );
            }
        }
        eprintln!(
            "{what}: {} fair acquires, {} polls of the queue ({} non-empty, {} with a waiter \
             already gone), {} FIFO break(s) a fault explains, {} FIFO violation(s)",
            waits.len(),
            polls.len(),
            polls.iter().filter(|p| !p.queue.is_empty()).count(),
            polls.iter().filter(|p| !p.gone.is_empty()).count(),
            verdict.excused.len(),
            verdict.violations.len()
        );
        for text in verdict.excused.iter().take(3) {
            eprintln!("{what}: excused {text}");
        }
        checks.clean(&verdict);
        verdict
    });
    let calls = workload.calls.all();
    for call in calls.iter().filter(|c| c.is_err()).take(6) {
        eprintln!("{what}: failed: {call}");
    }
    checks.bounded(&calls);
    checks.no_errors(
        "calls once the faults were over (+3 s)",
        &errors_since(&calls, over_ns + 3_000_000_000),
    );
    (checks, verdict, fifo)
}

#[test]
fn fenced_lock_under_the_nemesis() {
    let knobs = Knobs::new(Kind::Fenced, 2, Some(NEMESIS_LEASE));
    lock_under_nemesis("nemesis-fenced", knobs).0.finish();
}

#[test]
fn read_write_lock_under_the_nemesis() {
    let knobs = Knobs::new(Kind::ReadWrite, 3, Some(NEMESIS_LEASE));
    lock_under_nemesis("nemesis-rwlock", knobs).0.finish();
}

#[test]
fn fair_lock_under_the_nemesis() {
    let knobs = Knobs::new(Kind::Fair, 2, Some(NEMESIS_LEASE));
    lock_under_nemesis("nemesis-fair", knobs).0.finish();
}

/// Which semaphore a permit run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Permits {
    Semaphore,
    /// Permit-expirable, each permit with [`PERMIT_LEASE`].
    Expirable,
}

/// A permit-expirable semaphore's lease.
const PERMIT_LEASE: Duration = Duration::from_secs(2);

/// Threads of two clients acquiring one permit at a time (holding it a
/// short or a longer while) from a semaphore of `set` permits, under the
/// nemesis (or not); checked against `claimed` permits.
fn permits_under_nemesis(
    what: &str,
    which: Permits,
    set: u64,
    claimed: u64,
    faults: bool,
) -> Checks {
    let (server, proxy, clients, _events) = nemesis_setup(2);
    let name = unique_name(&format!("fault-suite:{what}"));
    let set_ok = match which {
        Permits::Semaphore => clients[0].semaphore(name.as_str()).try_set_permits(set),
        Permits::Expirable => clients[0]
            .permit_expirable_semaphore(name.as_str())
            .try_set_permits(set),
    };
    assert!(set_ok.unwrap(), "setting {set} permits");
    let stop = Arc::new(AtomicBool::new(false));
    let holds: Arc<Mutex<Vec<PermitHold>>> = Arc::default();
    let calls: Arc<Calls> = Arc::default();
    let mut threads = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..3 {
            let (stop, holds, calls) = (Arc::clone(&stop), Arc::clone(&holds), Arc::clone(&calls));
            let semaphore = client.semaphore(name.as_str());
            let expirable = client.permit_expirable_semaphore(name.as_str());
            let who = format!("c{c}/{t}");
            threads.push(thread::spawn(move || {
                let mut round = 0u32;
                while !stop.load(Ordering::SeqCst) {
                    round += 1;
                    let hold = if round.is_multiple_of(4) {
                        Duration::from_millis(300)
                    } else {
                        Duration::from_millis(5)
                    };
                    let start_ns = mono_ns();
                    let until_lease = start_ns + PERMIT_LEASE.as_nanos() as u64;
                    match which {
                        Permits::Semaphore => {
                            let got = calls.run("acquire", &who, WAIT + SLACK, || {
                                semaphore.try_acquire_for(1, WAIT)
                            });
                            let Ok(Some(permit)) = got else {
                                thread::sleep(Duration::from_millis(20));
                                continue;
                            };
                            let enter_ns = mono_ns();
                            thread::sleep(hold);
                            let until_ns = mono_ns();
                            let _ = calls.run("release", &who, unlock_bound(), || {
                                permit.release().map(Some)
                            });
                            holds.lock().unwrap().push(PermitHold {
                                who: who.clone(),
                                count: 1,
                                enter_ns,
                                until_ns,
                            });
                        }
                        Permits::Expirable => {
                            let got = calls.run("acquire", &who, WAIT + SLACK, || {
                                expirable.try_acquire_id_for(WAIT, PERMIT_LEASE)
                            });
                            let Ok(Some(id)) = got else {
                                thread::sleep(Duration::from_millis(20));
                                continue;
                            };
                            let enter_ns = mono_ns();
                            thread::sleep(hold);
                            let until_ns = mono_ns().min(until_lease);
                            let _ = calls.run("release", &who, unlock_bound(), || {
                                expirable.try_release(&id).map(Some)
                            });
                            holds.lock().unwrap().push(PermitHold {
                                who: who.clone(),
                                count: 1,
                                enter_ns,
                                until_ns,
                            });
                        }
                    }
                }
            }));
        }
    }
    wait_until("warm-up", Duration::from_secs(20), || {
        holds.lock().unwrap().len() >= 10
    });
    let log = if faults {
        nemesis(
            &server,
            &proxy,
            (&name, "redisson_sc:"),
            NEMESIS_LEASE,
            &calls,
        )
        .0
    } else {
        thread::sleep(Duration::from_secs(2));
        Vec::new()
    };
    let over_ns = mono_ns();
    thread::sleep(SETTLE + Duration::from_secs(1));
    stop.store(true, Ordering::SeqCst);
    for handle in threads {
        handle.join().expect("a permit thread panicked");
    }
    let holds = holds.lock().unwrap().clone();
    let verdict = check_permits(&holds, claimed, &[]);
    let mut checks = Checks::new(what);
    for fault in &log {
        eprintln!("{what}: {fault}");
    }
    eprintln!(
        "{what}: {} holds of {claimed} permits, {} violation(s)",
        holds.len(),
        verdict.violations.len()
    );
    checks.check(holds.iter().any(|h| h.enter_ns > over_ns), || {
        "no permit was acquired after the faults".to_owned()
    });
    // Permits are conserved: once every holder released and every lease ran
    // out (the undo of an acquire whose outcome was unknown may still be
    // landing: wait for it, bounded), all `set` are available again. Fewer:
    // a permit leaked (an acquire that ran and was never undone, e.g. one
    // that landed late); more: one was released twice.
    let available = || match which {
        Permits::Semaphore => clients[0].semaphore(name.as_str()).available_permits(),
        Permits::Expirable => clients[0]
            .permit_expirable_semaphore(name.as_str())
            .available_permits(),
    };
    let conserved_by = Instant::now() + PERMIT_LEASE + Duration::from_secs(8);
    let mut left = available();
    while left.as_ref().ok() != Some(&(set as i64)) && Instant::now() < conserved_by {
        thread::sleep(Duration::from_millis(100));
        left = available();
    }
    eprintln!("{what}: {left:?} of {set} permits available after the run");
    checks.check(left.as_ref().ok() == Some(&(set as i64)), || {
        format!(
            "permits not conserved: {left:?} of {set} available {:?} after every holder \
             released",
            PERMIT_LEASE + Duration::from_secs(8)
        )
    });
    checks.clean(&verdict);
    let calls = calls.all();
    let failed = |op: &str| calls.iter().filter(|c| c.op == op && c.is_err()).count();
    eprintln!(
        "{what}: {} acquires failed (outcome unknown: undone in the background), {} releases \
         failed",
        failed("acquire"),
        failed("release")
    );
    for call in calls.iter().filter(|c| c.is_err()).take(6) {
        eprintln!("{what}: failed: {call}");
    }
    checks.bounded(&calls);
    checks.no_errors(
        "calls once the faults were over (+3 s)",
        &errors_since(&calls, over_ns + 3_000_000_000),
    );
    checks
}

#[test]
fn semaphore_under_the_nemesis() {
    permits_under_nemesis("nemesis-semaphore", Permits::Semaphore, 2, 2, true).finish();
}

#[test]
fn permit_expirable_semaphore_under_the_nemesis() {
    permits_under_nemesis("nemesis-expirable", Permits::Expirable, 2, 2, true).finish();
}

/// Rounds of a latch of [`LATCH_COUNT`] (set to `set`): two waiters on
/// different clients, three count-downs 150 ms apart, under the nemesis
/// (or not). Returns the checks and the latch verdicts.
fn latch_under_nemesis(what: &str, set: u64, faults: bool) -> (Checks, Vec<Verdict>) {
    const LATCH_COUNT: usize = 3;
    let (server, proxy, clients, _events) = nemesis_setup(2);
    let name = unique_name(&format!("fault-suite:{what}"));
    let stop = Arc::new(AtomicBool::new(false));
    let verdicts: Arc<Mutex<Vec<(usize, Verdict)>>> = Arc::default();
    let calls: Arc<Calls> = Arc::default();
    let runner = {
        let (stop, verdicts, calls) =
            (Arc::clone(&stop), Arc::clone(&verdicts), Arc::clone(&calls));
        let clients = clients;
        let name = name.clone();
        thread::spawn(move || {
            let mut round = 0;
            while !stop.load(Ordering::SeqCst) {
                round += 1;
                let latch_name = format!("{name}:{round}");
                if !matches!(
                    clients[0]
                        .count_down_latch(latch_name.as_str())
                        .try_set_count(set),
                    Ok(true)
                ) {
                    thread::sleep(Duration::from_millis(50));
                    continue;
                }
                let record: Arc<Mutex<Vec<LatchCall>>> = Arc::default();
                let mut handles = Vec::new();
                for w in 0..2 {
                    let latch = clients[w % 2].count_down_latch(latch_name.as_str());
                    let record = Arc::clone(&record);
                    let calls = Arc::clone(&calls);
                    handles.push(thread::spawn(move || {
                        let start_ns = mono_ns();
                        let wait = Duration::from_secs(5);
                        let got = calls.run("wait_for", "waiter", wait + SLACK, || {
                            latch.wait_for(wait).map(|open| open.then_some(()))
                        });
                        if matches!(got, Ok(Some(()))) {
                            record.lock().unwrap().push(LatchCall {
                                who: format!("waiter {w}"),
                                count_down: false,
                                start_ns,
                                end_ns: mono_ns(),
                            });
                        }
                    }));
                }
                for d in 0..LATCH_COUNT {
                    thread::sleep(Duration::from_millis(150));
                    let latch = clients[d % 2].count_down_latch(latch_name.as_str());
                    let start_ns = mono_ns();
                    let _ = calls.run("count_down", "counter", unlock_bound(), || {
                        latch.count_down().map(Some)
                    });
                    record.lock().unwrap().push(LatchCall {
                        who: format!("count-down {d}"),
                        count_down: true,
                        start_ns,
                        end_ns: mono_ns(),
                    });
                }
                for handle in handles {
                    handle.join().expect("a latch waiter panicked");
                }
                let record = record.lock().unwrap().clone();
                let opened = record.iter().filter(|c| !c.count_down).count();
                verdicts
                    .lock()
                    .unwrap()
                    .push((opened, check_latch(&record, LATCH_COUNT)));
            }
        })
    };
    wait_until("warm-up", Duration::from_secs(30), || {
        verdicts.lock().unwrap().len() >= 2
    });
    let log = if faults {
        let releasing = "redisson_countdownlatch__channel__";
        nemesis(&server, &proxy, (&name, releasing), NEMESIS_LEASE, &calls).0
    } else {
        thread::sleep(Duration::from_secs(1));
        Vec::new()
    };
    let over_ns = mono_ns();
    thread::sleep(SETTLE + Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    runner.join().expect("the latch runner panicked");
    let mut checks = Checks::new(what);
    for fault in &log {
        eprintln!("{what}: {fault}");
    }
    let results = std::mem::take(&mut *verdicts.lock().unwrap());
    eprintln!(
        "{what}: {} rounds, {} waiters released, {} violation(s)",
        results.len(),
        results.iter().map(|(o, _)| o).sum::<usize>(),
        results
            .iter()
            .map(|(_, v)| v.violations.len())
            .sum::<usize>()
    );
    checks.check(results.iter().any(|(opened, _)| *opened > 0), || {
        "no waiter was ever released".to_owned()
    });
    for (_, verdict) in &results {
        checks.clean(verdict);
    }
    let calls = calls.all();
    checks.bounded(&calls);
    checks.no_errors(
        "calls once the faults were over (+3 s)",
        &errors_since(&calls, over_ns + 3_000_000_000),
    );
    (checks, results.into_iter().map(|(_, v)| v).collect())
}

#[test]
fn latch_under_the_nemesis() {
    latch_under_nemesis("nemesis-latch", 3, true).0.finish();
}

/// How long a short leadership lasts (most terms).
const SHORT_TENURE: Duration = Duration::from_millis(30);
/// How often a leader asks `is_lost()`.
const LOOK: Duration = Duration::from_millis(10);

/// How an election workload runs.
#[derive(Debug, Clone, Copy)]
struct ElectionKnobs {
    /// Candidate threads per client.
    threads: usize,
    /// How long every other leadership of a candidate lasts (the others
    /// [`SHORT_TENURE`]): long enough that a leader is leading when a fault
    /// hits, most of the time.
    long_tenure: Duration,
    /// MUTATION: a leader that ignores its lost signal (every look says
    /// "leads").
    ignore_lost: bool,
    /// MUTATION: a leader that fences with the first term its thread ever
    /// won, not its own.
    stale_term: bool,
}

impl ElectionKnobs {
    fn new(threads: usize, long_tenure: Duration) -> ElectionKnobs {
        ElectionKnobs {
            threads,
            long_tenure,
            ignore_lost: false,
            stale_term: false,
        }
    }
}

/// Candidate threads campaigning in one election over and over, each
/// leadership recorded as a [`Section`] with its term as the token
/// (tests/common/election_history.rs), every call recorded.
struct Candidates {
    stop: Arc<AtomicBool>,
    history: Arc<History>,
    calls: Arc<Calls>,
    /// When the long leadership leading now began (0: none).
    long_since: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Candidates {
    /// Starts `knobs.threads` candidates on each of `clients`, in the
    /// election `name`.
    fn start(clients: &[Client], knobs: ElectionKnobs, name: &str) -> Candidates {
        let mut candidates = Candidates {
            stop: Arc::default(),
            history: Arc::default(),
            calls: Arc::default(),
            long_since: Arc::default(),
            threads: Vec::new(),
        };
        for (c, client) in clients.iter().enumerate() {
            for t in 0..knobs.threads {
                let thread = candidates.candidate(client, format!("c{c}"), t, knobs, name);
                candidates.threads.push(thread);
            }
        }
        candidates
    }

    /// One candidate: campaign (waiting up to [`WAIT`]), look at once and
    /// then every [`LOOK`] while it leads its tenure, resign; again.
    fn candidate(
        &self,
        client: &Client,
        who: String,
        t: usize,
        knobs: ElectionKnobs,
        name: &str,
    ) -> JoinHandle<()> {
        let election = client.leader_election(name);
        let (stop, history, calls) = (
            Arc::clone(&self.stop),
            Arc::clone(&self.history),
            Arc::clone(&self.calls),
        );
        let long_since = Arc::clone(&self.long_since);
        thread::spawn(move || {
            let identity = format!("{who}/{t}");
            let mut won = 0u64;
            let mut first_term = None;
            while !stop.load(Ordering::SeqCst) {
                // The lock's wait, then one proclamation (a response
                // timeout and a retry, as an unlock's).
                let got = calls.run("campaign", &identity, WAIT + unlock_bound(), || {
                    election.try_campaign_for(&identity, WAIT)
                });
                let leadership = match got {
                    Ok(Some(leadership)) => leadership,
                    Ok(None) => continue,
                    Err(_) => {
                        thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                };
                let term = if knobs.stale_term {
                    *first_term.get_or_insert(leadership.term())
                } else {
                    leadership.term()
                };
                let mut tenure = Tenure::won(&who, t, term);
                won += 1;
                let long = won.is_multiple_of(2);
                let lead_for = if long {
                    knobs.long_tenure
                } else {
                    SHORT_TENURE
                };
                if long {
                    long_since.store(tenure.section.enter_ns, Ordering::SeqCst);
                }
                let started = Instant::now();
                // The answer is recorded before the leader acts on it.
                while tenure.look(!knobs.ignore_lost && leadership.is_lost())
                    && started.elapsed() < lead_for
                    && !stop.load(Ordering::SeqCst)
                {
                    thread::sleep(LOOK);
                }
                if long {
                    let _ = long_since.compare_exchange(
                        tenure.section.enter_ns,
                        0,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                }
                let lost = tenure.is_lost();
                history.record(tenure.end());
                // Resigning a leadership found lost may fail ("not held"):
                // the truth, not a failed call.
                let op = if lost { "resign(lost)" } else { "resign" };
                let _ = calls.run(op, &identity, unlock_bound(), || {
                    leadership.resign().map(Some)
                });
            }
        })
    }

    /// Waits (bounded) until `n` leaderships began at or after `since`.
    fn await_terms(&self, what: &str, since: u64, n: usize, timeout: Duration) {
        wait_until(what, timeout, || self.history.entered_since(since) >= n);
    }

    /// Waits (bounded) until a long leadership leads that began at most
    /// `fresh` ago: a fault now hits a leader with most of its tenure left.
    fn await_fresh_long_leader(&self, fresh: Duration) {
        let fresh_ns = u64::try_from(fresh.as_nanos()).unwrap_or(u64::MAX);
        wait_until(
            "a fresh long leadership leads",
            Duration::from_secs(20),
            || {
                let since = self.long_since.load(Ordering::SeqCst);
                since > 0 && mono_ns().saturating_sub(since) < fresh_ns
            },
        );
    }

    /// Stops every candidate (each ends its current leadership or
    /// campaign) and joins them.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for handle in self.threads.drain(..) {
            handle.join().expect("a candidate thread panicked");
        }
    }
}

impl Drop for Candidates {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}

/// Prints what an election's history holds: leaderships, how many led and
/// were lost, and per fault how long until someone led after it.
fn summarize_election(what: &str, sections: &[Section], faults: &[Excuse]) {
    let led_count = sections.iter().filter(|s| led(s)).count();
    let lost = sections.iter().filter(|s| s.lost_ns.is_some()).count();
    let terms: Vec<u64> = sections.iter().filter_map(|s| s.token).collect();
    eprintln!(
        "{what}: {} leaderships ({led_count} led, {lost} saw their lost signal), terms {:?} .. \
         {:?}",
        sections.len(),
        terms.iter().min(),
        terms.iter().max()
    );
    for fault in faults {
        let next = sections
            .iter()
            .filter(|s| led(s) && s.last_ok_ns >= fault.to_ns)
            .map(|s| s.enter_ns.max(fault.to_ns))
            .min();
        eprintln!(
            "{what}: after {} ({:.0} ms): led again {:?} ms after its end",
            fault.why,
            ms_between(fault.from_ns, fault.to_ns),
            next.map(|at| ms_between(fault.to_ns, at))
        );
    }
}

/// Candidates of three clients (two threads each) through the proxy,
/// under the nemesis: checked for overlapping leaderships, terms that do
/// not increase, and progress within a lease after each fault.
fn election_under_nemesis(what: &str, knobs: ElectionKnobs) -> (Checks, Verdict) {
    let (server, proxy, clients, _events) = nemesis_setup(3);
    let name = unique_name(&format!("fault-suite:{what}"));
    let mut candidates = Candidates::start(&clients, knobs, &name);
    candidates.await_terms("warm-up", 0, 10, Duration::from_secs(20));
    // The calls that publish on the election lock's channel: its
    // releases (a resignation's handover).
    // A freeze past the lease begins early in a long leadership: the
    // leader frozen off the store must know it lost.
    let before = |fault: &str| {
        if fault == "long-freeze" {
            candidates.await_fresh_long_leader(Duration::from_millis(300));
        }
    };
    let (log, windows) = nemesis_with(
        &server,
        &proxy,
        (&name, "redisson_lock__channel:"),
        NEMESIS_LEASE,
        &candidates.calls,
        &before,
    );
    let over_ns = mono_ns();
    candidates.await_terms(
        "leaderships after the faults",
        over_ns,
        10,
        Duration::from_secs(30),
    );
    thread::sleep(SETTLE);
    candidates.stop();
    let mut checks = Checks::new(what);
    for fault in &log {
        eprintln!("{what}: {fault}");
    }
    let sections = candidates.history.sections();
    let faults: Vec<Excuse> = windows.into_iter().map(|(excuse, _)| excuse).collect();
    summarize_election(what, &sections, &faults);
    // The leader leading when a freeze past the lease began (early in its
    // long tenure) saw its lost signal.
    for fault in faults.iter().filter(|f| f.why == "a freeze past the lease") {
        let leading: Vec<&Section> = sections
            .iter()
            .filter(|s| led(s) && s.enter_ns < fault.from_ns && s.exit_ns > fault.from_ns)
            .collect();
        checks.check(
            !leading.is_empty() && leading.iter().all(|s| s.lost_ns.is_some()),
            || format!("the leader frozen off the store did not see its lost signal: {leading:?}"),
        );
    }
    // No excuse for safety (the lost signal is counted on the leader's
    // clock: no fault of the store or the network makes it lie); progress
    // within a lease (plus the machine's slack) after each fault.
    let verdict = check_election(&sections, &faults, NEMESIS_LEASE + SLACK);
    for text in verdict.violations.iter().take(3) {
        eprintln!("{what}: {text}");
    }
    checks.clean(&verdict);
    let calls = candidates.calls.all();
    for call in calls.iter().filter(|c| c.is_err()).take(6) {
        eprintln!("{what}: failed: {call}");
    }
    checks.bounded(&calls);
    checks.no_errors(
        "calls once the faults were over (+3 s)",
        &errors_since(&calls, over_ns + 3_000_000_000),
    );
    (checks, verdict)
}

#[test]
fn election_under_the_nemesis() {
    let knobs = ElectionKnobs::new(2, NEMESIS_LEASE * 3 / 2);
    election_under_nemesis("nemesis-election", knobs).0.finish();
}

// ---------------------------------------------------------------------------
// 12. Mutations of the real system the checker must catch
// ---------------------------------------------------------------------------

/// MUTATION: long holders that ignore `is_lost()` across a freeze longer
/// than the lease keep writing after the lock moved on: caught by
/// "overlap" (and the lost updates that follow on a plain lock).
#[test]
fn mutation_a_holder_that_ignores_is_lost_is_caught() {
    let verdict = ignore_lost_across_a_freeze("mutation-ignore-lost", false);
    assert!(
        !verdict.of("overlap").is_empty(),
        "the checker missed a holder that ignored is_lost() across a freeze: {verdict:?}"
    );
}

/// MUTATION: the same zombie holders, and a store that accepts every token
/// ([`Store::Redis`] `accept_any`): the old holder's writes after the new
/// holder wrote are accepted, and the checker (not the store) catches them
/// as "stale write" (a store with production semantics refuses them, so
/// the check could never fire with it).
#[test]
fn mutation_a_stale_write_is_caught_with_a_store_that_accepts_every_token() {
    let verdict = ignore_lost_across_a_freeze("mutation-stale-write", true);
    assert!(
        verdict
            .of("stale write")
            .iter()
            .any(|v| v.contains("accepted after the store accepted")),
        "the checker missed a write with a lower token accepted after a higher one: {verdict:?}"
    );
}

/// Long holders that ignore `is_lost()` (fenced, writing to a store on the
/// server, `accept_any` or with production semantics) across a freeze of
/// three watchdog timeouts; returns the history's verdict.
fn ignore_lost_across_a_freeze(what: &str, accept_any: bool) -> Verdict {
    const WATCHDOG: Duration = Duration::from_millis(900);
    let server = TestServer::start();
    let name = unique_name(&format!("fault-suite:{what}"));
    let (clients, _events) = clients(&server.url(), 2, WATCHDOG);
    let knobs = Knobs {
        ignore_lost: true,
        ..Knobs::new(Kind::Fenced, 2, Some(WATCHDOG * 2))
    };
    let mut workload = Workload::start(
        &server.url(),
        &clients,
        knobs,
        &name,
        Store::Redis {
            url: server.url(),
            store: format!("{name}:store"),
            accept_any,
        },
    );
    workload.await_sections("warm-up", 0, 5, Duration::from_secs(20));
    workload.await_long_holder();
    let (from, to) = freeze(&server, WATCHDOG * 3);
    workload.await_sections("work after the freeze", to, 10, Duration::from_secs(30));
    thread::sleep(WATCHDOG * 2);
    workload.stop();
    let verdict = workload.check(&[]);
    eprintln!(
        "{what}: frozen {:.0} ms; {} violation(s) ({} stale writes): {:?}",
        ms_between(from, to),
        verdict.violations.len(),
        verdict.of("stale write").len(),
        verdict.violations.first()
    );
    verdict
}

/// MUTATION: a "lock" that does not exclude (half the threads take another
/// name): caught by "overlap" and "lost update".
#[test]
fn mutation_a_lock_that_does_not_exclude_is_caught() {
    let server = TestServer::start();
    let name = unique_name("fault-suite:mutation-split");
    let (clients, _events) = clients(&server.url(), 2, Duration::from_secs(5));
    let store = Store::Local(FencedStore::default());
    let knobs = Knobs::new(Kind::Plain, 4, None);
    let knobs = Knobs {
        split: true,
        ..knobs
    };
    let mut a = Workload::start(&server.url(), &clients, knobs, &name, store);
    a.await_sections("both run", 0, 200, Duration::from_secs(30));
    a.stop();
    let verdict = a.check(&[]);
    eprintln!(
        "mutation split: {} overlaps, {} lost updates",
        verdict.of("overlap").len(),
        verdict.of("lost update").len()
    );
    assert!(
        !verdict.of("overlap").is_empty(),
        "missed the overlaps: {verdict:?}"
    );
    assert!(
        !verdict.of("lost update").is_empty(),
        "missed the lost updates: {verdict:?}"
    );
}

/// MUTATION: a semaphore set to 3 permits, checked as 2 (a build that
/// over-grants by one): caught by "over-granted".
#[test]
fn mutation_an_over_granting_semaphore_is_caught() {
    let checks = permits_under_nemesis("mutation-permits", Permits::Semaphore, 3, 2, false);
    assert!(
        checks.failed.iter().any(|f| f.contains("over-granted")),
        "the checker missed a third permit: {:?}",
        checks.failed
    );
}

/// MUTATION: a latch set to 2, checked as 3 (a build that opens one
/// count-down early): caught by "latch opened early".
#[test]
fn mutation_a_latch_that_opens_early_is_caught() {
    let (_checks, verdicts) = latch_under_nemesis("mutation-latch", 2, false);
    assert!(
        verdicts
            .iter()
            .any(|v| !v.of("latch opened early").is_empty()),
        "the checker missed a latch opened one count-down early"
    );
}

/// MUTATION: leaders that ignore their lost signal, one of them leading
/// across a freeze of three leases: a new leader wins while the old one
/// still says it leads, caught by "leadership overlap".
#[test]
fn mutation_a_leader_that_ignores_its_lost_signal_is_caught() {
    const WATCHDOG: Duration = Duration::from_millis(900);
    let server = TestServer::start();
    let name = unique_name("fault-suite:mutation-election-ignore-lost");
    let (clients, _events) = clients(&server.url(), 2, WATCHDOG);
    // Long enough to lead on well past the freeze.
    let knobs = ElectionKnobs {
        ignore_lost: true,
        ..ElectionKnobs::new(2, WATCHDOG * 7)
    };
    let mut candidates = Candidates::start(&clients, knobs, &name);
    candidates.await_terms("warm-up", 0, 3, Duration::from_secs(20));
    // Early in its tenure: it leads on well past the freeze.
    candidates.await_fresh_long_leader(Duration::from_millis(300));
    let (from, to) = freeze(&server, WATCHDOG * 3);
    candidates.await_terms("a leader after the freeze", to, 1, Duration::from_secs(20));
    candidates.stop();
    let sections = candidates.history.sections();
    let fault = window("a freeze past the lease", from, to);
    let verdict = check_election(&sections, std::slice::from_ref(&fault), WATCHDOG + SLACK);
    summarize_election("mutation-election-ignore-lost", &sections, &[fault]);
    eprintln!(
        "mutation-election-ignore-lost: {} violation(s): {:?}",
        verdict.violations.len(),
        verdict.violations.first()
    );
    assert!(
        !verdict.of("leadership overlap").is_empty(),
        "the checker missed a leader that ignored its lost signal across a freeze: {verdict:?}"
    );
}

/// MUTATION: leaders that fence with the first term their thread won,
/// not their own: caught by "term not increased".
#[test]
fn mutation_a_leader_that_fences_with_an_old_term_is_caught() {
    let server = TestServer::start();
    let name = unique_name("fault-suite:mutation-election-stale-term");
    let (clients, _events) = clients(&server.url(), 2, Duration::from_secs(5));
    let knobs = ElectionKnobs {
        stale_term: true,
        ..ElectionKnobs::new(2, SHORT_TENURE)
    };
    let mut candidates = Candidates::start(&clients, knobs, &name);
    candidates.await_terms("leaderships", 0, 20, Duration::from_secs(30));
    candidates.stop();
    let sections = candidates.history.sections();
    let verdict = check_election(&sections, &[], Duration::ZERO);
    eprintln!(
        "mutation-election-stale-term: {} leaderships, {} violation(s): {:?}",
        sections.len(),
        verdict.violations.len(),
        verdict.violations.first()
    );
    assert!(
        !verdict.of("term not increased").is_empty(),
        "the checker missed leaders fencing with an old term: {verdict:?}"
    );
}

/// The fixed lease of the fair waiters beside the barging ones (see
/// [`Knobs::barge`]).
const BARGE_LEASE: Duration = Duration::from_secs(10);

/// MUTATION: a fair lock some of whose waiters barge (they take the same
/// name as a plain lock, which ignores the queue): caught by "FIFO broken".
/// The fair waiters hold fixed leases: they are woken to try, as Redisson's
/// are, and a barger can take the lock in between (a watchdog waiter is
/// handed it outright, which leaves it no free moment).
#[test]
fn mutation_a_fair_lock_that_lets_waiters_barge_is_caught() {
    let server = TestServer::start();
    let name = unique_name("fault-suite:mutation-barge");
    let (clients, _events) = clients(&server.url(), 2, Duration::from_secs(5));
    let knobs = Knobs {
        barge: true,
        ..Knobs::new(Kind::Fair, 4, None)
    };
    let mut workload = Workload::start(
        &server.url(),
        &clients,
        knobs,
        &name,
        Store::Local(FencedStore::default()),
    );
    workload.await_sections("warm-up", 0, 20, Duration::from_secs(30));
    thread::sleep(Duration::from_secs(5));
    workload.stop();
    let (waits, polls) = workload.fair_history();
    let verdict = check_fifo(&waits, &polls, &[]);
    eprintln!(
        "mutation barge: {} acquires, {} polls, {} FIFO violation(s)",
        waits.len(),
        polls.len(),
        verdict.violations.len()
    );
    assert!(
        !verdict.of("FIFO broken").is_empty(),
        "the checker missed waiters barging past the fair queue"
    );
}
