//! The multi-process contended run: N child processes (this bench binary
//! re-executed in the [`ROLE`] role), T threads each, loop on one lock:
//! take it, `GET` + `SET` a counter on a plain connection, release it.
//!
//! Each child stamps every hold (when `lock()` returned, when it began
//! `unlock()`) with the wall clock, which all processes on the machine
//! share, and reports them when the run is over; the parent merges them
//! in time order to find each handoff to another process (or thread) and
//! each same-thread re-take. The server's `INFO commandstats` before and after
//! gives the commands per acquisition; the children's [`Counted`] backends
//! give the failed acquire attempts.

use std::io::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::TestServer;
use crate::common::child::{
    CHILD_MAX_LIFETIME, ChildProcess, LOCK_ENV, READY, READY_TIMEOUT, URL_ENV, env, parent_lines,
    raw_connection,
};
use crate::common::commandstats::CommandStats;
use crate::counted::{Counted, Counts, ScriptCount};
use crate::pinning::taskset;
use crate::redisson_scripts::{REDISSON_LOCK, REDISSON_UNLOCK};

/// The child role (`REDISYNC_CHILD_ROLE`) of a fleet member.
pub(crate) const ROLE: &str = "bench_fleet";
/// Which lock a child loops on: a [`Kind`]'s name.
const KIND_ENV: &str = "REDISYNC_FLEET_KIND";
/// The counter key a child reads and writes while it holds the lock.
const COUNTER_ENV: &str = "REDISYNC_FLEET_COUNTER";
/// How many threads each child runs, each its own loop (and connections;
/// a library kind's threads share the process's one client).
const THREADS_ENV: &str = "REDISYNC_FLEET_THREADS";
/// The parent's start line: `go <start ns> <deadline ns>` (wall clock).
const GO: &str = "go";
/// A child's report line, after the marker: `key=value` fields.
const DONE: &str = "REDISYNC-FLEET-DONE";

/// The compare-and-delete release every polling peer uses (as
/// `support/barging.rs`, the in-process baseline).
const BARGING_RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('del', KEYS[1]) else return 0 end";
/// The peers' default retry delay: a failed take sleeps a random time below this.
const BARGING_RETRY_MS: u64 = 200;
/// The polling peer's sleep between failed tries (rs-redisson's).
const POLLING_RETRY: Duration = Duration::from_millis(100);
/// The lease of the polling peer's holds and of the `lock_with_lease` kind.
const LEASE_MS: u64 = 30_000;
/// How long the polling peer's unlock latch lives (Redisson's default).
const POLLING_LATCH_MS: u64 = 15_000;

/// The locks a fleet can loop on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `SET NX PX` + compare-and-delete + a random 0-200 ms retry sleep
    /// (rslock, redlock-rs): the polling peers' lock, no library around it.
    Barging,
    /// The polling peer (rs-redisson's loop): Redisson 4.7's lock script by
    /// EVALSHA, a fixed 100 ms sleep after a failed try, Redisson's unlock
    /// script to release (a fresh unlock latch each). What a Rust user of
    /// a Redisson-compatible lock picks today; no subscription, no queue.
    Polling,
    /// `client.lock(name)`: the reentrant lock (watchdog).
    Lock,
    /// `client.lock(name).lock_with_lease(30 s)`: the reentrant lock with
    /// a fixed lease (no watchdog).
    LockWithLease,
    /// `client.fair_lock(name)`.
    FairLock,
    /// A token ring, no lock at all: the token is the one element of a
    /// list, each waiter blocks in `BLPOP` on it and the holder gives it
    /// back with `LPUSH`, which the server hands to the longest waiter
    /// at once. The floor of any handoff between processes on this
    /// machine (one command hands over, one wake-up delivers it, FIFO by
    /// the server): no lease, no fault handling, no second client kind.
    Ring,
    /// The barest fair lock that hands over between processes, the floor
    /// of any such lock on this machine (issue 33): one script takes the
    /// lock (`SET NX PX`) or queues the caller (`RPUSH`), a queued waiter
    /// blocks in `BLPOP` on its own list, and the release script pops the
    /// queue's head, makes it the holder and wakes it with `LPUSH`. No
    /// window, no record, no Redisson channel, no streak, no fault
    /// handling: what the ring costs plus the lock itself.
    BareQueue,
}

impl Kind {
    pub(crate) const ALL: [Kind; 7] = [
        Kind::Barging,
        Kind::Polling,
        Kind::Lock,
        Kind::LockWithLease,
        Kind::FairLock,
        Kind::Ring,
        Kind::BareQueue,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Barging => "barging",
            Kind::Polling => "polling",
            Kind::Lock => "lock",
            Kind::LockWithLease => "lock_with_lease",
            Kind::FairLock => "fair_lock",
            Kind::Ring => "ring",
            Kind::BareQueue => "bare_queue",
        }
    }

    /// Whether redisync runs it (its scripts counted by the children).
    pub(crate) fn is_library(self) -> bool {
        matches!(self, Kind::Lock | Kind::LockWithLease | Kind::FairLock)
    }

    fn from_name(name: &str) -> Kind {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .unwrap_or_else(|| panic!("child: unknown {KIND_ENV}={name:?}"))
    }
}

/// The wall clock in ns since the epoch: the clock every process on the
/// machine reads alike (a vDSO read, tens of ns).
pub(crate) fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Sleeps until the wall clock reads `at_ns`.
fn sleep_until(at_ns: u64) {
    let now = wall_ns();
    if at_ns > now {
        std::thread::sleep(Duration::from_nanos(at_ns - now));
    }
}

/// A process's CPU time and context switches (all its threads), from
/// `/proc`: where the time of an acquisition goes on a pinned CPU, where
/// every process's work and every wake-up come one after another.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Usage {
    /// User plus system CPU time, in ns (10 ms ticks).
    pub(crate) cpu_ns: u64,
    /// Voluntary and involuntary context switches, summed over threads.
    pub(crate) switches: u64,
}

impl Usage {
    /// `pid`'s usage now; zeros if `/proc` cannot tell.
    pub(crate) fn of(pid: u32) -> Usage {
        let cpu_ns = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let rest = &stat[stat.rfind(')')? + 2..];
                let fields: Vec<&str> = rest.split_whitespace().collect();
                let ticks =
                    fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
                // USER_HZ is 100 on every Linux this runs on.
                Some(ticks * 10_000_000)
            })
            .unwrap_or(0);
        let switches = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks
                    .filter_map(|task| {
                        std::fs::read_to_string(task.ok()?.path().join("status")).ok()
                    })
                    .flat_map(|status| {
                        status
                            .lines()
                            .filter(|l| l.contains("ctxt_switches:"))
                            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                            .collect::<Vec<_>>()
                    })
                    .sum()
            })
            .unwrap_or(0);
        Usage { cpu_ns, switches }
    }

    pub(crate) fn since(self, before: Usage) -> Usage {
        Usage {
            cpu_ns: self.cpu_ns.saturating_sub(before.cpu_ns),
            switches: self.switches.saturating_sub(before.switches),
        }
    }
}

// ------------------------------------------------------------------ child --

/// What one child did in the run.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChildReport {
    pub(crate) pid: u32,
    /// Which of the process's threads ran it.
    pub(crate) thread: usize,
    /// Acquisitions that began before the deadline (each did its GET+SET).
    pub(crate) counted: u64,
    /// Every acquisition, the last one after the deadline included.
    pub(crate) acquisitions: u64,
    /// Attempts that did not take the lock (the barging `SET NX` that
    /// answered nil; the library's acquire scripts that did not answer nil).
    pub(crate) failed: u64,
    /// The child's own commands of kinds scripts call too (its GET and
    /// SET, and the barging `SET NX`), which `INFO commandstats` cannot
    /// tell from a script's.
    pub(crate) own_commands: u64,
    /// Plain `PUBLISH`es the library sent (not from a script).
    pub(crate) publishes: u64,
    /// Scripts the library ran, by id.
    pub(crate) scripts: Vec<(String, ScriptCount)>,
    /// The longest `lock()` (or barging take), in ns.
    pub(crate) longest_ns: u64,
    /// (lock() returned, unlock() began), wall-clock ns, counted holds only.
    pub(crate) holds: Vec<(u64, u64)>,
    /// The child's CPU time and context switches from its start to its end.
    pub(crate) usage: Usage,
}

impl ChildReport {
    fn encode(&self, script_counts: &str) -> String {
        let holds: Vec<String> = self.holds.iter().map(|(a, u)| format!("{a}:{u}")).collect();
        format!(
            "{DONE} pid={} thread={} counted={} acquisitions={} failed={} own={} publishes={} \
             longest={} cpu={} switches={} scripts={} holds={}",
            self.pid,
            self.thread,
            self.counted,
            self.acquisitions,
            self.failed,
            self.own_commands,
            self.publishes,
            self.longest_ns,
            self.usage.cpu_ns,
            self.usage.switches,
            if script_counts.is_empty() {
                "-"
            } else {
                script_counts
            },
            if holds.is_empty() {
                "-".to_owned()
            } else {
                holds.join(",")
            }
        )
    }

    fn decode(line: &str) -> ChildReport {
        let mut report = ChildReport::default();
        for field in line.split_whitespace() {
            let Some((key, value)) = field.split_once('=') else {
                continue;
            };
            let num = || -> u64 {
                value
                    .parse()
                    .unwrap_or_else(|_| panic!("fleet: bad {key}={value:?} in a child's report"))
            };
            match key {
                "pid" => report.pid = u32::try_from(num()).unwrap_or(0),
                "thread" => report.thread = usize::try_from(num()).unwrap_or(0),
                "counted" => report.counted = num(),
                "acquisitions" => report.acquisitions = num(),
                "failed" => report.failed = num(),
                "own" => report.own_commands = num(),
                "publishes" => report.publishes = num(),
                "longest" => report.longest_ns = num(),
                "cpu" => report.usage.cpu_ns = num(),
                "switches" => report.usage.switches = num(),
                "scripts" if value != "-" => {
                    report.scripts = value
                        .split(';')
                        .map(|s| {
                            let parts: Vec<&str> = s.split(':').collect();
                            let n = |i: usize| parts.get(i).and_then(|p| p.parse().ok());
                            let count = ScriptCount {
                                calls: n(1).unwrap_or(0),
                                nil: n(2).unwrap_or(0),
                                errors: n(3).unwrap_or(0),
                            };
                            (parts[0].to_owned(), count)
                        })
                        .collect();
                }
                "holds" if value != "-" => {
                    report.holds = value
                        .split(',')
                        .map(|h| {
                            let (a, u) = h.split_once(':').expect("fleet: a hold a:u");
                            (a.parse().expect("hold start"), u.parse().expect("hold end"))
                        })
                        .collect();
                }
                _ => {}
            }
        }
        report
    }
}

/// One thread's loop of a fleet member, its connections opened and its
/// scripts loaded: run from `go` (start, deadline in wall-clock ns).
type Member<'a> = Box<dyn FnOnce(u64, u64) -> ChildReport + Send + 'a>;

/// The child role: connects, warms up, says it is ready, waits for the
/// parent's `go <start> <deadline>`, runs its threads (`THREADS_ENV`, one
/// loop each) until the deadline, reports one line per thread (the first
/// carries the process's CPU time and the library's script counts), then
/// waits for the parent to close stdin (or [`CHILD_MAX_LIFETIME`]).
pub(crate) fn child_main() {
    let url = env(URL_ENV);
    let name = env(LOCK_ENV);
    let counter = env(COUNTER_ENV);
    let kind = Kind::from_name(&env(KIND_ENV));
    let threads: usize = env(THREADS_ENV)
        .parse()
        .expect("child: REDISYNC_FLEET_THREADS is a number");
    let from_parent = parent_lines();
    // The library's client (with its subscriber) and its counting backend,
    // kept until the end: the process's threads share them.
    let library = kind.is_library().then(|| {
        let backend = Counted::new(
            redisync::RedisBackend::open_with(&url, redisync::RedisOptions::default())
                .expect("child: connect"),
        );
        let client = redisync::Client::builder()
            .backend(backend.clone())
            .build()
            .expect("child: client");
        (client, backend)
    });
    let members: Vec<Member<'_>> = (0..threads)
        .map(|thread| {
            member(
                kind,
                &url,
                &name,
                &counter,
                thread,
                library.as_ref().map(|l| &l.0),
            )
        })
        .collect();
    let before = library.as_ref().map(|(_, backend)| backend.counts());
    let (start, deadline) = ready_and_go(&from_parent);
    let used = Usage::of(std::process::id());
    let mut reports: Vec<ChildReport> = std::thread::scope(|scope| {
        let running: Vec<_> = members
            .into_iter()
            .map(|run| {
                scope.spawn(move || {
                    // A thread's switches leave /proc/<pid>/task with it.
                    let before = own_switches();
                    let mut report = run(start, deadline);
                    report.usage.switches = own_switches().saturating_sub(before);
                    report
                })
            })
            .collect();
        running
            .into_iter()
            .map(|t| t.join().expect("child: a member thread panicked"))
            .collect()
    });
    let usage = Usage::of(std::process::id()).since(used);
    let mut scripts = String::new();
    for (thread, report) in reports.iter_mut().enumerate() {
        report.thread = thread;
    }
    if let (Some(first), Some((_, backend)), Some(before)) =
        (reports.first_mut(), library.as_ref(), before)
    {
        let run = since(&backend.counts(), &before);
        first.failed = run.failed_acquires();
        first.publishes = run.publishes;
        scripts = run.encode();
    }
    // The process's: its CPU time (exited threads' included) and the
    // switches of the threads still there (the client's) and the members'.
    let members: u64 = reports.iter().map(|r| r.usage.switches).sum();
    for report in &mut reports {
        report.usage = Usage::default();
    }
    if let Some(first) = reports.first_mut() {
        first.usage = Usage {
            cpu_ns: usage.cpu_ns,
            switches: usage.switches + members,
        };
    }
    for (thread, report) in reports.iter().enumerate() {
        announce_line(&report.encode(if thread == 0 { &scripts } else { "" }));
    }
    // Every child's client stays up until all are done and the parent has
    // read the server's counters: no teardown inside the measured window.
    crate::common::child::until_parent_done(&from_parent);
    drop(library);
}

/// The calling thread's voluntary and involuntary context switches so far.
fn own_switches() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

/// Thread `thread`'s loop of a `kind` member, connected and warmed up
/// (scripts loaded, a pooled connection open) outside the measured run.
fn member<'a>(
    kind: Kind,
    url: &str,
    name: &'a str,
    counter: &'a str,
    thread: usize,
    client: Option<&'a redisync::Client>,
) -> Member<'a> {
    let mut data = raw_connection(url);
    let warm = format!("{name}:warmup:{}:{thread}", std::process::id());
    match kind {
        Kind::Barging => {
            let mut conn = raw_connection(url);
            let release = redis::Script::new(BARGING_RELEASE);
            let _: Option<String> = redis::cmd("SET")
                .arg(&warm)
                .arg("w")
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query(&mut conn)
                .expect("child: warm-up SET");
            let _: i64 = release
                .key(&warm)
                .arg("w")
                .invoke(&mut conn)
                .expect("child: warm-up release");
            Box::new(move |start, deadline| {
                // Unique per run and thread.
                let token = format!("{}:{start}:{thread}", std::process::id());
                barging_loop(
                    &mut conn, &mut data, &release, name, counter, deadline, &token,
                )
            })
        }
        Kind::Polling => {
            let mut conn = raw_connection(url);
            let scripts = PollingScripts {
                lock: redis::Script::new(REDISSON_LOCK),
                unlock: redis::Script::new(REDISSON_UNLOCK),
            };
            let mut latches = 0;
            assert!(
                polling_try(&mut conn, &scripts, &warm, "w:1").is_none(),
                "child: warm-up lock"
            );
            polling_release(&mut conn, &scripts, &warm, "w:1", &mut latches);
            Box::new(move |start, deadline| {
                // Unique per run; Redisson's `<client>:<thread>`.
                let holder = format!("{}-{start}:{}", std::process::id(), thread + 1);
                polling_loop(
                    &mut conn, &mut data, &scripts, name, counter, deadline, &holder,
                )
            })
        }
        Kind::Ring => {
            let mut conn = raw_connection(url);
            Box::new(move |_, deadline| ring_loop(&mut conn, &mut data, name, counter, deadline))
        }
        Kind::BareQueue => {
            let mut conn = raw_connection(url);
            let scripts = BareQueueScripts {
                join: redis::Script::new(BARE_QUEUE_JOIN),
                release: redis::Script::new(BARE_QUEUE_RELEASE),
            };
            Box::new(move |start, deadline| {
                let holder = format!("{}-{start}:{}", std::process::id(), thread + 1);
                bare_queue_loop(
                    &mut conn, &mut data, &scripts, name, counter, deadline, &holder,
                )
            })
        }
        Kind::Lock | Kind::LockWithLease | Kind::FairLock => {
            let client = client.expect("child: a library kind has a client");
            let lease = (kind == Kind::LockWithLease).then(|| Duration::from_millis(LEASE_MS));
            let (lock, warm) = if kind == Kind::FairLock {
                (client.fair_lock(name), client.fair_lock(warm))
            } else {
                (client.lock(name), client.lock(warm))
            };
            take(&warm, lease)
                .expect("child: warm-up lock")
                .unlock()
                .expect("child: warm-up unlock");
            Box::new(move |_, deadline| library_loop(&lock, lease, &mut data, counter, deadline))
        }
    }
}

/// What a [`Counted`] backend counted since `before`.
fn since(now: &Counts, before: &Counts) -> Counts {
    let mut out = Counts {
        publishes: now.publishes - before.publishes,
        ..Counts::default()
    };
    for (id, c) in &now.scripts {
        let b = before.scripts.get(id).copied().unwrap_or_default();
        let d = ScriptCount {
            calls: c.calls - b.calls,
            nil: c.nil - b.nil,
            errors: c.errors - b.errors,
        };
        if d.calls > 0 {
            out.scripts.insert(id, d);
        }
    }
    out
}

/// Prints one line for the parent and flushes it.
fn announce_line(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("child: stdout");
    out.flush().expect("child: flush stdout");
}

/// Says ready, waits for `go`; returns (start, deadline) in wall-clock ns,
/// having slept until the start.
fn ready_and_go(from_parent: &std::sync::mpsc::Receiver<String>) -> (u64, u64) {
    announce_line(READY);
    let line = from_parent
        .recv_timeout(CHILD_MAX_LIFETIME)
        .expect("child: no go line from the parent");
    let mut parts = line.split_whitespace();
    assert_eq!(
        parts.next(),
        Some(GO),
        "child: expected {GO:?}, got {line:?}"
    );
    let start: u64 = parts
        .next()
        .and_then(|p| p.parse().ok())
        .expect("child: go start");
    let deadline: u64 = parts
        .next()
        .and_then(|p| p.parse().ok())
        .expect("child: go deadline");
    sleep_until(start);
    (start, deadline)
}

/// GET + SET of the counter: the work done under the lock.
fn bump(data: &mut redis::Connection, counter: &str) {
    let value: Option<u64> = redis::cmd("GET")
        .arg(counter)
        .query(data)
        .expect("child: GET");
    let _: () = redis::cmd("SET")
        .arg(counter)
        .arg(value.unwrap_or(0) + 1)
        .query(data)
        .expect("child: SET");
}

/// The loop every kind runs: `take` the lock (counting its own failures
/// and commands in the report; `None` = the run is over for this child),
/// do the counter's `GET` + `SET` unless the deadline has passed, stamp
/// the hold, `give` it back. The acquisition that ends after the deadline
/// is given back without the work and not counted.
fn hold_loop<T>(
    data: &mut redis::Connection,
    counter: &str,
    deadline: u64,
    mut take: impl FnMut(&mut ChildReport) -> Option<T>,
    mut give: impl FnMut(&mut ChildReport, T),
) -> ChildReport {
    let mut report = ChildReport {
        pid: std::process::id(),
        ..ChildReport::default()
    };
    loop {
        let asked = wall_ns();
        let Some(held) = take(&mut report) else {
            return report;
        };
        let at = wall_ns();
        report.longest_ns = report.longest_ns.max(at.saturating_sub(asked));
        report.acquisitions += 1;
        let done = at >= deadline;
        if !done {
            bump(data, counter);
            report.own_commands += 2;
            report.counted += 1;
            report.holds.push((at, wall_ns()));
        }
        give(&mut report, held);
        if done {
            return report;
        }
    }
}

/// `lock()`, or `lock_with_lease(lease)` when given.
fn take(lock: &redisync::Lock, lease: Option<Duration>) -> redisync::Result<redisync::LockGuard> {
    match lease {
        Some(lease) => lock.lock_with_lease(lease),
        None => lock.lock(),
    }
}

fn library_loop(
    lock: &redisync::Lock,
    lease: Option<Duration>,
    data: &mut redis::Connection,
    counter: &str,
    deadline: u64,
) -> ChildReport {
    hold_loop(
        data,
        counter,
        deadline,
        |_| Some(take(lock, lease).expect("child: lock()")),
        |_, guard| guard.unlock().expect("child: unlock()"),
    )
}

/// Redisson's two lock scripts, loaded.
struct PollingScripts {
    lock: redis::Script,
    unlock: redis::Script,
}

/// One try of Redisson's lock script: `None` = acquired, else the PTTL.
fn polling_try(
    conn: &mut redis::Connection,
    scripts: &PollingScripts,
    name: &str,
    holder: &str,
) -> Option<i64> {
    scripts
        .lock
        .key(name)
        .arg(LEASE_MS)
        .arg(holder)
        .invoke(conn)
        .expect("child: Redisson lock script")
}

/// Redisson's unlock script, with a fresh unlock latch (as its `unlock()`).
fn polling_release(
    conn: &mut redis::Connection,
    scripts: &PollingScripts,
    name: &str,
    holder: &str,
    latches: &mut u64,
) {
    *latches += 1;
    let released: Option<i64> = scripts
        .unlock
        .key(name)
        .key(format!("redisson_lock__channel:{{{name}}}"))
        .key(format!(
            "redisson_unlock_latch:{{{name}}}:{holder}:{latches}"
        ))
        .arg(0)
        .arg(LEASE_MS)
        .arg(holder)
        .arg("publish")
        .arg(POLLING_LATCH_MS)
        .invoke(conn)
        .expect("child: Redisson unlock script");
    assert_eq!(
        released,
        Some(1),
        "child: the polling lock was not ours at release"
    );
}

/// The polling peer's loop, as `holder`.
fn polling_loop(
    conn: &mut redis::Connection,
    data: &mut redis::Connection,
    scripts: &PollingScripts,
    name: &str,
    counter: &str,
    deadline: u64,
    holder: &str,
) -> ChildReport {
    let mut latches = 0;
    // Both closures use the connection, one after the other.
    let conn = std::cell::RefCell::new(conn);
    hold_loop(
        data,
        counter,
        deadline,
        |report| loop {
            if polling_try(&mut conn.borrow_mut(), scripts, name, holder).is_none() {
                return Some(());
            }
            report.failed += 1;
            std::thread::sleep(POLLING_RETRY);
        },
        |_, ()| polling_release(&mut conn.borrow_mut(), scripts, name, holder, &mut latches),
    )
}

/// The barging loop, with `token` as the lock's value.
fn barging_loop(
    conn: &mut redis::Connection,
    data: &mut redis::Connection,
    release: &redis::Script,
    name: &str,
    counter: &str,
    deadline: u64,
    token: &str,
) -> ChildReport {
    // FNV-1a of the token: each thread's retry delays its own.
    let seed = token.bytes().fold(0xCBF2_9CE4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
    });
    let mut rng = 0x9E37_79B9_7F4A_7C15_u64 ^ seed.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    // Both closures use the connection, one after the other.
    let conn = std::cell::RefCell::new(conn);
    hold_loop(
        data,
        counter,
        deadline,
        |report| loop {
            let taken: Option<String> = redis::cmd("SET")
                .arg(name)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query(&mut **conn.borrow_mut())
                .expect("child: SET NX");
            report.own_commands += 1;
            if taken.is_some() {
                return Some(());
            }
            report.failed += 1;
            // xorshift64: the random part of the retry delay.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            std::thread::sleep(Duration::from_millis(rng % BARGING_RETRY_MS));
        },
        |_, ()| {
            let released: i64 = release
                .key(name)
                .arg(token)
                .invoke(&mut **conn.borrow_mut())
                .expect("child: barging release");
            assert_eq!(
                released, 1,
                "child: the barging lock was not ours at release"
            );
        },
    )
}

/// The token ring's loop: `BLPOP` takes the token (the lock), `LPUSH`
/// gives it back, to the longest waiter if any.
fn ring_loop(
    conn: &mut redis::Connection,
    data: &mut redis::Connection,
    name: &str,
    counter: &str,
    deadline: u64,
) -> ChildReport {
    // Both closures use the connection, one after the other.
    let conn = std::cell::RefCell::new(conn);
    hold_loop(
        data,
        counter,
        deadline,
        |report| {
            // Every other member gives the token back within a few ms of
            // the deadline; after that nobody will.
            let left = deadline.saturating_sub(wall_ns()) / 1_000_000_000 + 5;
            let taken: Option<(String, String)> = redis::cmd("BLPOP")
                .arg(name)
                .arg(left)
                .query(&mut **conn.borrow_mut())
                .expect("child: BLPOP");
            report.own_commands += 1;
            taken.map(|(_, token)| token)
        },
        |report, token| {
            // A kind scripts call too: counted here.
            report.own_commands += 1;
            let _: i64 = redis::cmd("LPUSH")
                .arg(name)
                .arg(&token)
                .query(&mut **conn.borrow_mut())
                .expect("child: LPUSH");
        },
    )
}

/// The bare queue lock's take: the lock (`KEYS[1]`, a string naming its
/// holder, TTL the lease) if free, else the caller queued (`KEYS[2]`).
/// 1 = taken, 0 = queued.
const BARE_QUEUE_JOIN: &str = "\
if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then return 1 end \
redis.call('rpush', KEYS[2], ARGV[1]) \
return 0";

/// The bare queue lock's release: the queue's head made the holder and
/// woken on its own list (`ARGV[2]` .. its id: a key the script names
/// itself, which a standalone server allows and a cluster would not), or
/// the lock deleted. It trusts its caller to hold the lock: the floor has
/// no fault handling, and the run's counter and overlap checks would say
/// so if two held it at once.
const BARE_QUEUE_RELEASE: &str = "\
local head = redis.call('lpop', KEYS[2]) \
if head then \
redis.call('set', KEYS[1], head, 'px', ARGV[1]) \
redis.call('lpush', ARGV[2] .. head, '1') \
return 1 \
end \
redis.call('del', KEYS[1]) \
return 0";

/// The bare queue lock's two scripts, loaded.
struct BareQueueScripts {
    join: redis::Script,
    release: redis::Script,
}

/// The bare queue lock's loop, as `holder`: join (take or queue), and
/// when queued, `BLPOP` on its own list until a release hands it over.
fn bare_queue_loop(
    conn: &mut redis::Connection,
    data: &mut redis::Connection,
    scripts: &BareQueueScripts,
    name: &str,
    counter: &str,
    deadline: u64,
    holder: &str,
) -> ChildReport {
    let queue = format!("{name}:queue");
    let wake_prefix = format!("{name}:wake:");
    let wake = format!("{wake_prefix}{holder}");
    // Both closures use the connection, one after the other.
    let conn = std::cell::RefCell::new(conn);
    hold_loop(
        data,
        counter,
        deadline,
        |report| {
            let taken: i64 = scripts
                .join
                .key(name)
                .key(&queue)
                .arg(holder)
                .arg(LEASE_MS)
                .invoke(&mut **conn.borrow_mut())
                .expect("child: bare queue join");
            if taken == 1 {
                return Some(());
            }
            report.failed += 1;
            // Every holder releases within a few ms of the deadline, so
            // every queued waiter is handed the lock; the timeout only
            // bounds a broken run.
            let left = deadline.saturating_sub(wall_ns()) / 1_000_000_000 + 5;
            let woken: Option<(String, String)> = redis::cmd("BLPOP")
                .arg(&wake)
                .arg(left)
                .query(&mut **conn.borrow_mut())
                .expect("child: BLPOP");
            report.own_commands += 1;
            woken.map(|_| ())
        },
        |_, ()| {
            // (EVALSHA is a kind only clients send: counted by the server.)
            let _: i64 = scripts
                .release
                .key(name)
                .key(&queue)
                .arg(LEASE_MS)
                .arg(&wake_prefix)
                .invoke(&mut **conn.borrow_mut())
                .expect("child: bare queue release");
        },
    )
}

// ----------------------------------------------------------------- parent --

/// One fleet run's figures.
#[derive(Debug, Clone)]
pub(crate) struct FleetRun {
    pub(crate) kind: Kind,
    pub(crate) processes: usize,
    /// Threads per process.
    pub(crate) threads: usize,
    pub(crate) duration: Duration,
    /// One report per thread of each child.
    pub(crate) children: Vec<ChildReport>,
    /// The server's calls per command kind during the run (the parent's own
    /// `INFO` taken off).
    pub(crate) commands: CommandStats,
    /// The counter at the end: must equal the counted acquisitions.
    pub(crate) counter: u64,
    /// Whether every child was pinned (inherited, then by PID).
    pub(crate) pinned: bool,
    /// The server's CPU time and context switches over the run (from just
    /// before the start to the last child's report).
    pub(crate) server_usage: Usage,
}

impl FleetRun {
    pub(crate) fn counted(&self) -> u64 {
        self.children.iter().map(|c| c.counted).sum()
    }

    pub(crate) fn acquisitions(&self) -> u64 {
        self.children.iter().map(|c| c.acquisitions).sum()
    }

    pub(crate) fn per_sec(&self) -> f64 {
        self.counted() as f64 / self.duration.as_secs_f64()
    }

    /// Fewest / most acquisitions of one thread (of one process when each
    /// runs one thread).
    pub(crate) fn min_max(&self) -> f64 {
        ratio(self.children.iter().map(|c| c.counted))
    }

    /// Fewest / most acquisitions of one process (all its threads).
    pub(crate) fn process_min_max(&self) -> f64 {
        let mut by_pid: std::collections::BTreeMap<u32, u64> = Default::default();
        for c in &self.children {
            *by_pid.entry(c.pid).or_default() += c.counted;
        }
        ratio(by_pid.values().copied())
    }

    /// Per acquisition: (server CPU µs, all children's CPU µs, server
    /// context switches, children's context switches).
    pub(crate) fn usage_per_acq(&self) -> (f64, f64, f64, f64) {
        let acq = self.acquisitions().max(1) as f64;
        let (cpu, switches) = self.children.iter().fold((0, 0), |(c, s), child| {
            (c + child.usage.cpu_ns, s + child.usage.switches)
        });
        (
            self.server_usage.cpu_ns as f64 / 1e3 / acq,
            cpu as f64 / 1e3 / acq,
            self.server_usage.switches as f64 / acq,
            switches as f64 / acq,
        )
    }

    pub(crate) fn failed_per_acq(&self) -> f64 {
        let failed: u64 = self.children.iter().map(|c| c.failed).sum();
        failed as f64 / self.acquisitions().max(1) as f64
    }

    /// Commands clients sent: the kinds only clients send, plus the ones of
    /// script kinds that the children sent themselves (GET, SET, `SET NX`)
    /// or the library sent as plain `PUBLISH`es.
    pub(crate) fn top_level(&self) -> u64 {
        let own: u64 = self
            .children
            .iter()
            .map(|c| c.own_commands + c.publishes)
            .sum();
        self.commands.client_only() + own
    }

    pub(crate) fn top_level_per_acq(&self) -> f64 {
        self.top_level() as f64 / self.acquisitions().max(1) as f64
    }

    pub(crate) fn all_per_acq(&self) -> f64 {
        self.commands.total() as f64 / self.acquisitions().max(1) as f64
    }

    pub(crate) fn scripts_per_acq(&self) -> f64 {
        self.commands.scripts() as f64 / self.acquisitions().max(1) as f64
    }

    /// Scripts the children's backends counted (the library kinds only).
    pub(crate) fn scripts_counted(&self) -> u64 {
        self.children
            .iter()
            .flat_map(|c| c.scripts.iter())
            .map(|(_, s)| s.calls)
            .sum()
    }

    /// Calls per acquisition of each script the library ran, by id, most first.
    pub(crate) fn scripts_by_id(&self) -> Vec<(String, f64, f64)> {
        let mut by: std::collections::BTreeMap<&str, ScriptCount> = Default::default();
        for (id, c) in self.children.iter().flat_map(|c| c.scripts.iter()) {
            let e = by.entry(id).or_default();
            e.calls += c.calls;
            e.nil += c.nil;
            e.errors += c.errors;
        }
        let acq = self.acquisitions().max(1) as f64;
        let mut out: Vec<(String, f64, f64)> = by
            .into_iter()
            .map(|(id, c)| (id.to_owned(), c.calls as f64 / acq, c.nil as f64 / acq))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out
    }

    /// Every counted hold, all threads of all processes, in order of
    /// acquisition: (pid, thread, acquired, unlock began).
    fn merged(&self) -> Vec<(u32, usize, u64, u64)> {
        let mut all: Vec<(u32, usize, u64, u64)> = self
            .children
            .iter()
            .flat_map(|c| c.holds.iter().map(move |(a, u)| (c.pid, c.thread, *a, *u)))
            .collect();
        all.sort_by_key(|h| h.2);
        all
    }

    /// Handoffs (from the previous holder's `unlock()` call to this
    /// holder's return from `lock()`) to a thread of another process and to
    /// another thread of the same process, the share of acquisitions by
    /// the thread that made the previous one, and the holds that began
    /// before the previous one's `unlock()` did (an overlap: two holders
    /// at once, never expected).
    pub(crate) fn handoffs(&self) -> Handoffs {
        let holds = self.merged();
        let mut out = Handoffs::default();
        let mut retakes = 0u64;
        for pair in holds.windows(2) {
            let (prev, next) = (pair[0], pair[1]);
            if next.2 < prev.3 {
                out.overlaps += 1;
            }
            let took = Duration::from_nanos(next.2.saturating_sub(prev.3));
            if next.0 != prev.0 {
                out.across.push(took);
            } else if next.1 != prev.1 {
                out.within.push(took);
            } else {
                retakes += 1;
            }
        }
        let pairs = holds.len().saturating_sub(1).max(1) as f64;
        out.retake = retakes as f64 / pairs;
        out
    }

    /// The slowest `lock()` of any process.
    pub(crate) fn longest(&self) -> Duration {
        Duration::from_nanos(
            self.children
                .iter()
                .map(|c| c.longest_ns)
                .max()
                .unwrap_or(0),
        )
    }
}

/// Fewest over most of `counts` (0 when all are 0).
fn ratio(counts: impl Iterator<Item = u64> + Clone) -> f64 {
    let (min, max) = (counts.clone().min().unwrap_or(0), counts.max().unwrap_or(0));
    if max == 0 {
        0.0
    } else {
        min as f64 / max as f64
    }
}

/// A run's handoffs, from [`FleetRun::handoffs`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Handoffs {
    /// To a thread of another process.
    pub(crate) across: Vec<Duration>,
    /// To another thread of the same process.
    pub(crate) within: Vec<Duration>,
    /// The share of acquisitions by the thread that made the previous one.
    pub(crate) retake: f64,
    /// Holds that began before the previous one's `unlock()` did.
    pub(crate) overlaps: u64,
}

impl Handoffs {
    /// Across processes when the run has any, else within the one process.
    pub(crate) fn main(&self) -> &[Duration] {
        if self.across.is_empty() {
            &self.within
        } else {
            &self.across
        }
    }
}

/// How long the parent waits for the children after the deadline before
/// it gives up on them (then kills them, by their own handles).
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Runs `processes` children of `threads` threads each on a fresh lock
/// of `kind` for `duration`.
pub(crate) fn run(
    server: &TestServer,
    kind: Kind,
    processes: usize,
    threads: usize,
    duration: Duration,
    pin: bool,
) -> FleetRun {
    let name = crate::common::unique_name(&format!("bench:fleet:{}", kind.name()));
    let counter = format!("{name}:counter");
    let name_of_ring = name.clone();
    let envs = vec![
        (URL_ENV, server.url()),
        (LOCK_ENV, name),
        (COUNTER_ENV, counter.clone()),
        (KIND_ENV, kind.name().to_owned()),
        (THREADS_ENV, threads.to_string()),
    ];
    let mut children: Vec<ChildProcess> = (0..processes)
        .map(|_| ChildProcess::spawn(ROLE, &envs))
        .collect();
    // Inherited from the pinned parent already; by PID too, to be sure.
    let pinned = pin && children.iter().all(|c| taskset(c.pid(), "fleet child"));
    for child in &children {
        child.expect_line(READY, READY_TIMEOUT);
    }
    let mut conn = server.connection();
    if kind == Kind::Ring {
        let _: i64 = redis::cmd("RPUSH")
            .arg(&name_of_ring)
            .arg("token")
            .query(&mut conn)
            .expect("RPUSH the ring's token");
    }
    let before = CommandStats::read(&mut conn);
    let server_before = Usage::of(server.pid());
    // A margin for every child to read its line and sleep until the start.
    let start = wall_ns() + 100_000_000;
    let deadline = start + u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    for child in &mut children {
        child.send(&format!("{GO} {start} {deadline}"));
    }
    let wait = duration + Duration::from_millis(100) + DRAIN_LIMIT;
    let reports: Vec<ChildReport> = children
        .iter()
        .flat_map(|c| (0..threads).map(move |_| ChildReport::decode(&c.expect_line(DONE, wait))))
        .collect();
    let after = CommandStats::read(&mut conn);
    let server_usage = Usage::of(server.pid()).since(server_before);
    let counter_value: Option<u64> = redis::cmd("GET")
        .arg(&counter)
        .query(&mut conn)
        .expect("GET the counter");
    // Done: closing stdin lets each child drop its client and exit; one that
    // does not within the limit is killed (SIGKILL by its own handle).
    for child in &mut children {
        drop(child.stdin.take());
    }
    let exit_by = std::time::Instant::now() + Duration::from_secs(10);
    while children.iter_mut().any(|c| c.is_running()) && std::time::Instant::now() < exit_by {
        std::thread::sleep(Duration::from_millis(20));
    }
    let overran: Vec<u32> = children
        .iter_mut()
        .filter_map(|c| c.is_running().then(|| c.pid()))
        .collect();
    if !overran.is_empty() {
        eprintln!("fleet: children {overran:?} did not exit within 10 s of the end: killed");
    }
    drop(children);
    FleetRun {
        kind,
        processes,
        threads,
        duration,
        children: reports,
        // The `INFO` of the first snapshot is counted in the second.
        commands: after.since(&before).minus("info", 1),
        counter: counter_value.unwrap_or(0),
        pinned,
        server_usage,
    }
}
