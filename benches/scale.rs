//! Scale of the lease watchdog: one client holding many locks with a 3 s
//! watchdog (a renewal due every second per lock), against a private
//! `redis-server` this bench starts itself.
//!
//! Run: `cargo bench --bench scale` (about a minute and a half). Not a
//! criterion bench: each figure is one long run (locks held for three
//! watchdog timeouts), not a micro-timing. Printed to stderr:
//!
//! 1. 100,000 locks with the default batch size (100): the process's RSS,
//!    the share of a core the process used while holding them, renewal
//!    scripts per second, and leases lost (targets: under 100 MB, under
//!    25 %, at most one script per 50 renewals due, none lost).
//! 2. The baseline measured in the same run: 20,000 locks renewed one per
//!    script (`watchdog_batch_size(1)`, the pre-batching design) against
//!    20,000 renewed in batches of 100: the ratio of CPU used and of scripts
//!    sent.
//!
//! `REDISYNC_SCALE_LOCKS` sets the count of run 1.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use common::process::{cpu_time, evalsha_calls, rss_bytes};
use redisync::Client;

const WATCHDOG: Duration = Duration::from_secs(3);

/// What one run measured.
struct Figures {
    locks: usize,
    acquiring: Duration,
    rss_mb: f64,
    cpu_share: f64,
    scripts_per_s: f64,
    lost: usize,
}

/// Holds `locks` locks through one client for three watchdog timeouts.
fn hold(server: &TestServer, locks: usize, batch_size: usize, prefix: &str) -> Figures {
    let mut raw = server.connection();
    let client = Client::builder()
        .redis_url(server.url())
        .watchdog_timeout(WATCHDOG)
        .watchdog_batch_size(batch_size)
        .build()
        .unwrap();
    let started = Instant::now();
    let mut guards = Vec::with_capacity(locks);
    for i in 0..locks {
        guards.push(client.lock(format!("{prefix}:{i}")).lock().unwrap());
    }
    let acquiring = started.elapsed();
    let (cpu_before, scripts_before, held_from) =
        (cpu_time(), evalsha_calls(&mut raw), Instant::now());
    std::thread::sleep(WATCHDOG * 3);
    let (cpu, scripts, held) = (
        cpu_time() - cpu_before,
        evalsha_calls(&mut raw) - scripts_before,
        held_from.elapsed(),
    );
    let rss_mb = rss_bytes() as f64 / 1e6;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    drop(guards);
    Figures {
        locks,
        acquiring,
        rss_mb,
        cpu_share: cpu.as_secs_f64() / held.as_secs_f64(),
        scripts_per_s: scripts as f64 / held.as_secs_f64(),
        lost,
    }
}

fn print(label: &str, f: &Figures) {
    let due_per_s = f.locks as f64 / (WATCHDOG / 3).as_secs_f64();
    eprintln!(
        "scale: {label}: {} locks (acquired in {:.1?}): RSS {:.1} MB ({:.0} B per lock), \
         CPU {:.1} % of a core, {:.0} renewal scripts/s = 1 per {:.0} renewals due, {} lost",
        f.locks,
        f.acquiring,
        f.rss_mb,
        f.rss_mb * 1e6 / f.locks as f64,
        f.cpu_share * 100.0,
        f.scripts_per_s,
        due_per_s / f.scripts_per_s.max(1e-9),
        f.lost,
    );
}

fn main() {
    // `cargo test --benches` runs every bench once in test mode: keep it short.
    let test_mode = std::env::args().any(|a| a == "--test");
    let big = std::env::var("REDISYNC_SCALE_LOCKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if test_mode { 2_000 } else { 100_000 });
    let small = if test_mode { 1_000 } else { 20_000 };
    let server = TestServer::start();

    // First, while the process is small: its RSS is this run's.
    let batched_big = hold(&server, big, 100, "scale:big");
    print("batches of 100", &batched_big);

    let one_per_script = hold(&server, small, 1, "scale:one");
    print("baseline, 1 per script", &one_per_script);
    let batched_small = hold(&server, small, 100, "scale:small");
    print("batches of 100", &batched_small);
    eprintln!(
        "scale: {small} locks, batches of 100 vs 1 per script: CPU {:.2}x, scripts {:.3}x",
        batched_small.cpu_share / one_per_script.cpu_share.max(1e-9),
        batched_small.scripts_per_s / one_per_script.scripts_per_s.max(1e-9),
    );
}
