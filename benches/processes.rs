//! Many processes on one lock: N child processes × T threads, each thread
//! looping `lock()`, a `GET` + `SET` of a counter key on a plain
//! connection, and `unlock()`, against a private `redis-server` this bench
//! starts itself. Three shapes by default, issue 33's W4, W3 and W2: 8
//! processes × 1 thread, 2 × 4 and 1 × 8 (a library kind's threads share
//! their process's one client, as a service's do).
//!
//! Run: `cargo bench --bench processes` (about 100 s). Per shape seven runs
//! of 2 s each, in this order: the barging baseline (`SET NX PX`, a
//! compare-and-delete release and a random 0-200 ms sleep after a failed
//! take, as rslock and redlock-rs do; no library around it), the polling
//! peer (rs-redisson's loop: Redisson 4.7's lock script by EVALSHA, a
//! fixed 100 ms sleep after a failed try, Redisson's unlock script to
//! release; `support/redisson_scripts.rs`), the reentrant lock
//! (`client.lock(name)`, watchdog), the same with a fixed lease
//! (`lock_with_lease(30 s)`), the fair lock (`client.fair_lock(name)`)
//! and a token ring (no lock: a one-element list passed on by `LPUSH` to
//! the longest `BLPOP` waiter), the floor of any handoff between
//! processes on the machine, and the bare queue lock (one script takes the
//! lock or queues the caller, a queued waiter blocks in `BLPOP` on its own
//! list, the release script hands the lock to the queue's head and wakes
//! it with `LPUSH`: no window, no record, no Redisson channel), the floor
//! of any fair lock that hands over between processes. Each child is this
//! binary re-executed with `REDISYNC_CHILD_ROLE=bench_fleet`; it connects, warms up on another lock
//! name (scripts loaded, a pooled connection open), says it is ready, and
//! starts at a wall-clock instant the parent sends to all; it stops at the
//! deadline (its last acquisition after the deadline is released without
//! the counter work and not counted), reports, and exits once the parent
//! closes its stdin (a child that overruns is killed by the parent, by its
//! own handle; every child also exits by itself after 120 s).
//!
//! Printed to stderr, per run: acquisitions per second (counted ones, over
//! the run's wall time) and its ratios to the polling peer and to the
//! barging baseline of the same round (the polling peer is what a user
//! would pick: issue 33 asks every redisync row to reach 1.0 × it in W4,
//! 1.2 × in W3 and W2); per-thread (and per-process) min/max of
//! acquisition counts; the handoff to another process (to another thread
//! in a one-process shape), median and p99, in µs and as a multiple of
//! one PING round trip
//! measured by the parent in the same run (from the previous holder's
//! `unlock()` call to this holder's return from `lock()`, both stamped with
//! the wall clock every process shares, holds merged in time order); the
//! share of acquisitions by the process that made the previous one
//! (re-takes); failed acquire attempts per acquisition (barging: `SET NX`
//! that answered nil; polling: lock scripts that answered a PTTL; the library: acquire scripts that did not answer nil,
//! counted by a `LockBackend` wrapper in each child, `support/counted.rs`);
//! and server commands per acquisition from `INFO commandstats` deltas, two
//! ways: every command the server ran (inside scripts too: a script's
//! `redis.call`s are counted under their own kinds) and the commands
//! clients sent (the kinds scripts never call, `EVALSHA`, `SUBSCRIBE`,
//! `PING`, `CLIENT`, ..., plus the children's own `GET`/`SET`/`SET NX`
//! and the library's plain `PUBLISH`es, which they count themselves). The
//! counter must end equal to the counted acquisitions (a lost update means
//! two holders at once), and no two holds may overlap in time: the bench
//! says so loudly if either fails.
//!
//! Settings (environment): `REDISYNC_FLEET_SHAPES` (default
//! `8x1,2x4,1x8`: processes x threads, comma-separated),
//! `REDISYNC_FLEET_SECONDS` (per run, default 2), `REDISYNC_FLEET_ROUNDS`
//! (default 1: each round runs every kind once), `REDISYNC_FLEET_KINDS`
//! (comma-separated subset of
//! `barging,polling,lock,lock_with_lease,fair_lock,ring,bare_queue`). Pinning as in
//! `benches/lock.rs`: the bench pins itself to CPU 0 with `taskset` before
//! it starts anything, then starts redis-server and pins it by its PID; the
//! children inherit the mask and are pinned again by their PIDs.
//! `REDISYNC_BENCH_NO_PIN=1` runs unpinned. Without `--bench` (`cargo test
//! --benches`) every run is cut to 300 ms, as a smoke test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::panic,
    missing_docs
)]

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/counted.rs"]
mod counted;
#[path = "support/fleet.rs"]
mod fleet;
// Its cluster helper is for benches/lock.rs.
#[allow(dead_code)]
#[path = "support/pinning.rs"]
mod pinning;
#[path = "support/redisson_scripts.rs"]
mod redisson_scripts;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::TestServer;
use fleet::{FleetRun, Kind};
use pinning::{cpus_allowed, pin_self, pin_server};

/// PINGs timed for the round-trip unit, after as many to warm up.
const PINGS: usize = 2_000;

fn main() {
    if std::env::var(common::child::ROLE_ENV).as_deref() == Ok(fleet::ROLE) {
        fleet::child_main();
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    // Criterion's rule, kept here: without --bench, or with --test, only smoke-test.
    let test_mode = !has("--bench") || has("--test");
    if has("--list") {
        return;
    }
    let shapes = shapes();
    let duration = if test_mode {
        Duration::from_millis(300)
    } else {
        Duration::from_secs_f64(setting("REDISYNC_FLEET_SECONDS", 2.0))
    };
    let rounds = setting("REDISYNC_FLEET_ROUNDS", 1.0) as usize;
    let kinds: Vec<Kind> = match std::env::var("REDISYNC_FLEET_KINDS") {
        Ok(list) => list
            .split(',')
            .map(|k| {
                Kind::ALL
                    .into_iter()
                    .find(|kind| kind.name() == k.trim())
                    .unwrap_or_else(|| panic!("REDISYNC_FLEET_KINDS: unknown kind {k:?}"))
            })
            .collect(),
        Err(_) => Kind::ALL.to_vec(),
    };

    let pinned = pin_self();
    let server = TestServer::start();
    let server_pinned = pinned && pin_server(server.pid());
    eprintln!(
        "bench: redis-server pid {} at {}; pinning: {}",
        server.pid(),
        server.url(),
        if server_pinned {
            format!(
                "bench pid {} and redis-server pid {} on CPU 0 (Cpus_allowed_list: {}, {}); \
                 children inherit it and are pinned by PID",
                std::process::id(),
                server.pid(),
                cpus_allowed("self"),
                cpus_allowed(&server.pid().to_string())
            )
        } else {
            "NONE (numbers will swing with cross-CPU wake-ups)".to_owned()
        }
    );
    eprintln!(
        "bench: shapes {} (processes x threads), {duration:?} per run, {rounds} round(s) of {}",
        shapes
            .iter()
            .map(|(p, t)| format!("{p}x{t}"))
            .collect::<Vec<_>>()
            .join(", "),
        kinds
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", ")
    );

    let mut conn = server.connection();
    let mut pings = Vec::new();
    let mut runs: Vec<(usize, FleetRun)> = Vec::new();
    for &(processes, threads) in &shapes {
        for round in 0..rounds {
            for &kind in &kinds {
                pings.extend(ping_times(&mut conn));
                let run = fleet::run(&server, kind, processes, threads, duration, server_pinned);
                report_run(&run);
                runs.push((round, run));
            }
        }
    }
    let ping = median(&pings);
    eprintln!(
        "\nbench: PING round trip (parent, {} timed) median {:.1} µs",
        pings.len(),
        us(ping)
    );
    for &shape in &shapes {
        let of_shape: Vec<(usize, FleetRun)> = runs
            .iter()
            .filter(|(_, run)| (run.processes, run.threads) == shape)
            .cloned()
            .collect();
        summary(&of_shape, ping, shape);
    }
}

/// The shapes to run, `REDISYNC_FLEET_SHAPES` (`<processes>x<threads>`,
/// comma-separated; default issue 33's W4, W3 and W2: `8x1,2x4,1x8`).
fn shapes() -> Vec<(usize, usize)> {
    let list = std::env::var("REDISYNC_FLEET_SHAPES").unwrap_or_else(|_| "8x1,2x4,1x8".to_owned());
    list.split(',')
        .map(|shape| {
            let parsed = shape.trim().split_once('x').and_then(|(p, t)| {
                Some((
                    p.trim().parse::<usize>().ok()?,
                    t.trim().parse::<usize>().ok()?,
                ))
            });
            match parsed {
                Some((p, t)) if p >= 1 && t >= 1 && p * t >= 2 => (p, t),
                _ => panic!(
                    "REDISYNC_FLEET_SHAPES: {shape:?} is not <processes>x<threads> with at \
                     least two threads in all"
                ),
            }
        })
        .collect()
}

/// A number from the environment, or `default`.
fn setting(name: &str, default: f64) -> f64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// [`PINGS`] PING round trips, after as many untimed.
fn ping_times(conn: &mut redis::Connection) -> Vec<Duration> {
    let mut ping = || {
        let pong: String = redis::cmd("PING").query(conn).unwrap();
        std::hint::black_box(pong);
    };
    for _ in 0..PINGS {
        ping();
    }
    (0..PINGS)
        .map(|_| {
            let t = Instant::now();
            ping();
            t.elapsed()
        })
        .collect()
}

fn median(times: &[Duration]) -> Duration {
    quantile(times, 0.5)
}

fn quantile(times: &[Duration], q: f64) -> Duration {
    if times.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One run's line, and its checks, as soon as it is done.
fn report_run(run: &FleetRun) {
    let handoffs = run.handoffs();
    let overlaps = handoffs.overlaps;
    eprintln!(
        "\nprocesses/{}x{}/{}: {:.0} acq/s, min/max {:.2} per thread, {:.2} per process \
         (counts {:?}), handoff to another process median {:.1} µs p99 {:.1} µs ({} \
         handoffs), to another thread of the same process median {:.1} µs ({}), re-take by \
         the same thread {:.1} %, failed attempts/acq {:.2}, commands/acq {:.1} top-level / \
         {:.1} all ({:.1} all but TIME; {:.2} scripts), longest lock() {:.1} ms{}",
        run.processes,
        run.threads,
        run.kind.name(),
        run.per_sec(),
        run.min_max(),
        run.process_min_max(),
        run.children.iter().map(|c| c.counted).collect::<Vec<_>>(),
        us(median(&handoffs.across)),
        us(quantile(&handoffs.across, 0.99)),
        handoffs.across.len(),
        us(median(&handoffs.within)),
        handoffs.within.len(),
        handoffs.retake * 100.0,
        run.failed_per_acq(),
        run.top_level_per_acq(),
        run.all_per_acq(),
        run.commands
            .total()
            .saturating_sub(run.commands.calls("time")) as f64
            / run.acquisitions().max(1) as f64,
        run.scripts_per_acq(),
        run.longest().as_secs_f64() * 1e3,
        if run.pinned {
            ""
        } else {
            " (children NOT pinned)"
        }
    );
    eprintln!("  server commands: {}", run.commands.describe());
    let (server_cpu, children_cpu, server_switches, children_switches) = run.usage_per_acq();
    eprintln!(
        "  per acquisition: CPU {server_cpu:.1} µs server + {children_cpu:.1} µs clients; \
         context switches {server_switches:.2} server + {children_switches:.2} clients"
    );
    if run.kind.is_library() {
        let by_id: Vec<String> = run
            .scripts_by_id()
            .iter()
            .map(|(id, calls, nil)| format!("{id} {calls:.2} (nil {nil:.2})"))
            .collect();
        eprintln!("  library scripts per acquisition: {}", by_id.join(", "));
        // Every script the library ran went through the counting backend.
        let (counted, server) = (run.scripts_counted(), run.commands.scripts());
        if counted.abs_diff(server) > server / 100 + 2 {
            eprintln!(
                "  WARNING: the children's backends counted {counted} scripts, the server ran \
                 {server}: a script went around the counting backend (support/counted.rs)"
            );
        }
    }
    if overlaps > 0 {
        eprintln!("  ERROR: {overlaps} holds began before the previous holder's unlock()");
    }
    if run.counter != run.counted() {
        eprintln!(
            "  ERROR: the counter reads {} after {} counted acquisitions: lost updates",
            run.counter,
            run.counted()
        );
    }
}

/// The median of `values` (the mean of the middle two for an even count);
/// `None` for none.
fn median_f64(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// One row of the table: a run's figures (or, over rounds, each one's median).
#[derive(Debug, Clone, Copy)]
struct Row {
    per_sec: f64,
    /// Throughput over the barging baseline of the same round.
    vs_barging: Option<f64>,
    /// Throughput over the polling peer of the same round.
    vs_polling: Option<f64>,
    min_max: f64,
    handoff_us: f64,
    p99_us: f64,
    retake: f64,
    failed: f64,
    top_level: f64,
    all: f64,
}

impl Row {
    fn of(run: &FleetRun, barging: Option<f64>, polling: Option<f64>) -> Row {
        let handoffs = run.handoffs();
        Row {
            per_sec: run.per_sec(),
            vs_barging: barging.map(|b| run.per_sec() / b),
            vs_polling: polling.map(|p| run.per_sec() / p),
            min_max: run.min_max(),
            handoff_us: us(median(handoffs.main())),
            p99_us: us(quantile(handoffs.main(), 0.99)),
            retake: handoffs.retake,
            failed: run.failed_per_acq(),
            top_level: run.top_level_per_acq(),
            all: run.all_per_acq(),
        }
    }

    /// Each figure's median over `rows`.
    fn median_of(rows: &[Row]) -> Row {
        let med = |f: &dyn Fn(&Row) -> Option<f64>| median_f64(rows.iter().filter_map(f).collect());
        Row {
            per_sec: med(&|r| Some(r.per_sec)).unwrap_or(0.0),
            vs_barging: med(&|r| r.vs_barging),
            vs_polling: med(&|r| r.vs_polling),
            min_max: med(&|r| Some(r.min_max)).unwrap_or(0.0),
            handoff_us: med(&|r| Some(r.handoff_us)).unwrap_or(0.0),
            p99_us: med(&|r| Some(r.p99_us)).unwrap_or(0.0),
            retake: med(&|r| Some(r.retake)).unwrap_or(0.0),
            failed: med(&|r| Some(r.failed)).unwrap_or(0.0),
            top_level: med(&|r| Some(r.top_level)).unwrap_or(0.0),
            all: med(&|r| Some(r.all)).unwrap_or(0.0),
        }
    }

    fn print(&self, label: &str, ping: Duration) {
        let ping = us(ping);
        eprintln!(
            "| {label} | {:.0} | {} | {} | {:.2} | {:.1} µs = {:.2} × PING | {:.1} µs = {:.1} × PING | \
             {:.1} % | {:.2} | {:.1} / {:.1} |",
            self.per_sec,
            self.vs_polling
                .map_or_else(|| "-".to_owned(), |p| format!("**{p:.2}**")),
            self.vs_barging
                .map_or_else(|| "-".to_owned(), |b| format!("{b:.2}")),
            self.min_max,
            self.handoff_us,
            self.handoff_us / ping,
            self.p99_us,
            self.p99_us / ping,
            self.retake * 100.0,
            self.failed,
            self.top_level,
            self.all,
        );
    }
}

/// The before/after table: one row per run, then (over several rounds)
/// each kind's medians and its throughput range.
fn summary(runs: &[(usize, FleetRun)], ping: Duration, (processes, threads): (usize, usize)) {
    eprintln!(
        "\nbench: {processes} processes x {threads} threads, one lock, GET+SET inside; PING \
         {:.1} µs",
        us(ping)
    );
    let to = if processes > 1 {
        "another process"
    } else {
        "another thread"
    };
    eprintln!(
        "| run | acq/s | × polling | × barging | min/max per thread | handoff to {to}, median | \
         p99 | re-take | failed attempts/acq | commands/acq top-level / all |"
    );
    eprintln!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let rounds = runs.iter().map(|(r, _)| r + 1).max().unwrap_or(0);
    let rows: Vec<(usize, Kind, Row)> = runs
        .iter()
        .map(|(round, run)| {
            let of_round = |kind: Kind| {
                runs.iter()
                    .find(|(r, b)| r == round && b.kind == kind)
                    .map(|(_, b)| b.per_sec())
            };
            let row = Row::of(run, of_round(Kind::Barging), of_round(Kind::Polling));
            (*round, run.kind, row)
        })
        .collect();
    for (round, kind, row) in &rows {
        let label = if rounds > 1 {
            format!("{} (round {})", kind.name(), round + 1)
        } else {
            kind.name().to_owned()
        };
        row.print(&label, ping);
    }
    if rounds > 1 {
        for kind in Kind::ALL {
            let of_kind: Vec<Row> = rows
                .iter()
                .filter(|(_, k, _)| *k == kind)
                .map(|(_, _, r)| *r)
                .collect();
            if of_kind.is_empty() {
                continue;
            }
            let label = format!("**{}: median of {} rounds**", kind.name(), of_kind.len());
            Row::median_of(&of_kind).print(&label, ping);
        }
        for kind in Kind::ALL {
            let rates = rows
                .iter()
                .filter(|(_, k, _)| *k == kind)
                .map(|(_, _, r)| r.per_sec);
            let (lo, hi) = rates.fold((f64::MAX, 0.0_f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
            if hi > 0.0 {
                eprintln!(
                    "bench: {} acq/s over the rounds: {lo:.0}-{hi:.0}",
                    kind.name()
                );
            }
        }
    }
}
