//! Scale: one client holding 100,000 locks with a 9 s watchdog keeps every
//! lease for three watchdog timeouts, in under 100 MB of RSS, under a
//! quarter of a core, with at most one renewal script per 50 renewals due.
//! (9 s: 33,000 renewals due a second. With a 3 s watchdog, 100,000 a
//! second, the unoptimized build CI runs lost leases on a loaded 2-core
//! machine once each renewal also checks its attempt's record (issue 32:
//! 3.4 µs of server time per lock renewed instead of 1.5); the optimized
//! 3 s case is measured by `cargo bench --bench scale`.)
//!
//! Its own test binary: the process's RSS and CPU time are what it measures.
//! The quarter-core bound is for an optimized build (`cargo test --release
//! --test scale`, and `cargo bench --bench scale`); the unoptimized build
//! CI runs spends about 3.5 times the CPU on the same work (measured: 16 %
//! optimized, 58 % not), so it is held to 80 % of a core, which a watchdog
//! renewing one lock per round trip (100,000 scripts a second) cannot meet.
//! `REDISYNC_SCALE_LOCKS` sets another count (e.g. to try 200,000).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use common::process::{cpu_time, evalsha_calls, rss_bytes};
use redisync::Client;

const WATCHDOG: Duration = Duration::from_secs(9);

fn locks() -> usize {
    std::env::var("REDISYNC_SCALE_LOCKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

#[test]
fn a_hundred_thousand_held_locks_keep_their_leases_in_batches() {
    let n = locks();
    let server = TestServer::start();
    let mut raw = server.connection();
    let client = Client::builder()
        .redis_url(server.url())
        .watchdog_timeout(WATCHDOG)
        .build()
        .unwrap();

    let started = Instant::now();
    let mut guards = Vec::with_capacity(n);
    for i in 0..n {
        guards.push(client.lock(format!("scale:{i}")).lock().unwrap());
    }
    let acquiring = started.elapsed();

    let (cpu_before, scripts_before, hold_started) =
        (cpu_time(), evalsha_calls(&mut raw), Instant::now());
    std::thread::sleep(WATCHDOG * 3);
    let (cpu, scripts, held) = (
        cpu_time() - cpu_before,
        evalsha_calls(&mut raw) - scripts_before,
        hold_started.elapsed(),
    );
    let rss = rss_bytes();

    // Every guard still trusts its hold, and the server agrees: every lock
    // exists with a TTL of at most the watchdog timeout.
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    assert_eq!(lost, 0, "{lost} of {n} guards lost their lease");
    let mut missing = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("PTTL").arg(format!("scale:{i}"));
        }
        let ttls: Vec<i64> = pipe.query(&mut raw).unwrap();
        missing += ttls
            .iter()
            .filter(|&&ttl| ttl <= 0 || ttl > WATCHDOG.as_millis() as i64)
            .count();
    }
    assert_eq!(missing, 0, "{missing} of {n} locks gone or without a lease");

    let cpu_share = cpu.as_secs_f64() / held.as_secs_f64();
    let scripts_per_s = scripts as f64 / held.as_secs_f64();
    let renewals_due_per_s = n as f64 / (WATCHDOG / 3).as_secs_f64();
    eprintln!(
        "scale: {n} locks acquired in {acquiring:.1?}; held {held:.1?}: \
         RSS {:.1} MB ({} B per lock), CPU {:.1} % of a core, \
         {scripts_per_s:.0} renewal scripts/s for {renewals_due_per_s:.0} renewals due/s",
        rss as f64 / 1e6,
        rss / n as u64,
        cpu_share * 100.0,
    );
    assert!(rss < 100_000_000, "RSS {rss} B for {n} held locks");
    let cpu_bound = if cfg!(debug_assertions) { 0.80 } else { 0.25 };
    assert!(
        cpu_share < cpu_bound,
        "{:.1} % of a core for {n} held locks (bound {:.0} %)",
        cpu_share * 100.0,
        cpu_bound * 100.0
    );
    assert!(
        scripts_per_s <= renewals_due_per_s / 50.0,
        "{scripts_per_s:.0} scripts/s for {renewals_due_per_s:.0} renewals due/s"
    );
    // Hand the locks back (each guard's unlock is a round trip).
    drop(guards);
}
