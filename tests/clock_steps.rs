//! Clock steps (issue 32, "windows must not move with a clock"), with
//! Debian's libfaketime (`faketime` package) preloaded into a process:
//! `FAKETIME_TIMESTAMP_FILE` with `FAKETIME_NO_CACHE=1` steps that running
//! process's wall clock when the test rewrites the file, and
//! `FAKETIME_DONT_FAKE_MONOTONIC=1` leaves its monotonic clock alone.
//!
//! - The client's wall clock stepped +30 s (NTP, a resumed VM): a release
//!   held back 13 s by a middlebox, its client side dropped and the
//!   release resent at once, must still be refused by its window, and the
//!   thread's next hold kept. Before, the window was the wall clock plus an
//!   offset read against the wall clock: it ran 30 s long, the latch had
//!   expired, and the late copy freed the next hold (two holders).
//! - The server's clock stepped back 30 s (as its clients read it: see the
//!   test for why not with libfaketime): found by the next reading of
//!   `TIME` (every connection reads it every few seconds), reported through
//!   the event handler with its size, reported by `check_server`, and the
//!   estimate read again.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::TestServer;
use common::child::{ChildProcess, LOCK_ENV, ROLE_ENV, URL_ENV, announce, env};
use common::delay_proxy::DelayProxy;
use redisync::LockBackend;
use redisync::{Client, EventHandler, ServerClockStepEvent};

/// libfaketime, as Debian's `faketime` package installs it.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// The child's file of its wall clock's offset.
const CLOCK_FILE_ENV: &str = "REDISYNC_CLOCK_FILE";
/// Printed by the child with the outcome of its scene.
const OUTCOME: &str = "REDISYNC-CLOCK-OUTCOME";

/// The path of libfaketime; panics (never skips) when it is missing.
fn libfaketime() -> &'static str {
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: install Debian's faketime package \
         (apt-get install -y faketime), as .ci/run does"
    );
    LIBFAKETIME
}

/// A fresh clock file holding `offset` (libfaketime's relative form, `+30`
/// = 30 s ahead).
fn clock_file(what: &str, offset: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "redisync-clock-{what}-{}-{}",
        std::process::id(),
        common::unique_name("f")
    ));
    set_clock(&path, offset);
    path
}

/// Steps the clock of every process reading `path` to `offset`.
fn set_clock(path: &Path, offset: &str) {
    // Written whole, then renamed: a reader never sees half a line.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{offset}\n")).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// libfaketime's environment for a process whose wall clock follows `file`.
fn faketime_env(file: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("LD_PRELOAD", libfaketime().to_owned()),
        ("FAKETIME_TIMESTAMP_FILE", file.display().to_string()),
        ("FAKETIME_NO_CACHE", "1".to_owned()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
    ]
}

/// Re-executed as a child (see tests/common/child.rs): runs the role in
/// `REDISYNC_CHILD_ROLE`; returns at once in a normal test run.
#[test]
fn child_role_entrypoint() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    match role.as_str() {
        "stepped_client" => child_stepped_client(),
        other => panic!("unknown child role {other}"),
    }
}

/// How long the middlebox holds the original release: past the unlock
/// latch (10 s, or the record's kept time derived from a 3 s response
/// timeout: 11.05 s), far past its 3.025 s window.
const HELD_FOR: Duration = Duration::from_secs(13);

/// The child's scene, under a wall clock it steps itself: take the lock,
/// step the wall clock +30 s, unlock while a middlebox holds the release
/// and drops the client's side (the store resends it at once), take the
/// lock again, and let the held release land [`HELD_FOR`] later. Prints
/// the delivered request's reply and the hold count after it.
fn child_stepped_client() {
    let url = env(URL_ENV);
    let name = env(LOCK_ENV);
    let clock = PathBuf::from(env(CLOCK_FILE_ENV));
    let port: u16 = url
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let proxy = DelayProxy::start(port);
    let client = Client::builder()
        .redis_url(proxy.url())
        .pool_size(2)
        .response_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let lock = client.lock(&name);
    drop(lock.lock().unwrap()); // scripts loaded, connections open
    let guard = lock.lock().unwrap();
    set_clock(&clock, "+30");
    let wall_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    announce(&format!("stepped wall clock now {} s", wall_now.as_secs()));
    proxy.hold_next_and_cut(name.as_bytes());
    guard.unlock().unwrap();
    proxy.wait_held(Duration::from_secs(5));
    let held = String::from_utf8_lossy(&proxy.held_request()).into_owned();
    assert!(
        held.contains("EVALSHA") && held.contains("redisson_lock__channel"),
        "the held bytes are not the release: {held:?}"
    );
    let _again = lock.lock().unwrap();
    std::thread::sleep(HELD_FOR);
    proxy.deliver();
    let (_, reply) = proxy.last_delivery();
    let mut raw = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let holds: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg(&name).query(&mut raw).unwrap();
    announce(&format!(
        "{OUTCOME} holds={} reply={}",
        holds.len(),
        reply.lines().next().unwrap_or("")
    ));
}

#[test]
fn a_client_wall_clock_stepped_forward_moves_no_window() {
    let server = TestServer::start();
    let name = common::unique_name("clock:client");
    let file = clock_file("client", "+0");
    let mut envs = faketime_env(&file);
    envs.push((URL_ENV, server.url()));
    envs.push((LOCK_ENV, name));
    envs.push((CLOCK_FILE_ENV, file.display().to_string()));
    let envs: Vec<(&str, String)> = envs.iter().map(|(k, v)| (*k, v.clone())).collect();
    let mut child = ChildProcess::spawn("stepped_client", &envs);
    let outcome = child.expect_line(OUTCOME, HELD_FOR + Duration::from_secs(60));
    let status = child.wait_exit(Duration::from_secs(30));
    let _ = std::fs::remove_file(&file);
    let transcript = child.transcript();
    // The child's wall clock really was 30 s ahead of ours.
    let stepped: u64 = transcript
        .split("stepped wall clock now ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no step reported: {transcript}"));
    let ours = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        stepped >= ours + 10,
        "libfaketime did not step the child's clock ({stepped} vs ours {ours}): {transcript}"
    );
    assert!(status.success(), "the child failed: {transcript}");
    assert!(
        outcome.contains("reply=-ERR late request"),
        "the release held {HELD_FOR:?} was not refused by its window: {outcome}\n{transcript}"
    );
    assert!(
        outcome.contains("holds=1"),
        "the thread's next hold is gone (a late release freed it): {outcome}\n{transcript}"
    );
}

/// Records every clock step reported.
#[derive(Debug, Default)]
struct Steps(Mutex<Vec<(String, i64)>>);

impl EventHandler for Steps {
    fn on_server_clock_step(&self, event: &ServerClockStepEvent) {
        self.0
            .lock()
            .unwrap()
            .push((event.address().to_owned(), event.step_ms()));
    }
}

/// The server's clock stepped back 30 s, as its clients see it: libfaketime
/// cannot be preloaded into redis-server (Redis links jemalloc, which calls
/// `clock_gettime` while libfaketime initialises: libfaketime issue #130),
/// so a proxy in front of it shifts every `TIME` reply from the moment of
/// the step; that is what a client reads of a stepped clock.
#[test]
fn a_server_clock_stepped_back_is_found_reported_and_read_again() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let steps = Arc::new(Steps::default());
    let client = Client::builder()
        .redis_url(proxy.url())
        .pool_size(1)
        .event_handler(Arc::clone(&steps) as Arc<dyn EventHandler>)
        .build()
        .unwrap();
    let lock = client.lock(common::unique_name("clock:server"));
    drop(lock.lock().unwrap());
    assert!(steps.0.lock().unwrap().is_empty(), "a step before any");
    proxy.shift_time_replies(-30);
    // Right away, before the connection reads the clock again: the
    // estimate is 30 s ahead of the server. (If a reading came first, the
    // step is reported already; either way one of them must say so.)
    let report = client.check_server().unwrap();
    let found_by_check = report.about("clock").any(|finding| {
        finding
            .found
            .contains("behind the time this client's connections expect")
    });
    // A reading within the recheck interval (5 s) of the next request.
    let deadline = Instant::now() + Duration::from_secs(30);
    // Reads only: the proxy shifts what the client reads of the server's
    // clock, not the clock the server's scripts read, so writes windowed by
    // the shifted clock would be refused.
    while steps.0.lock().unwrap().is_empty() && Instant::now() < deadline {
        lock.is_locked().unwrap();
        std::thread::sleep(Duration::from_millis(200));
    }
    let seen = steps.0.lock().unwrap().clone();
    assert!(
        found_by_check || !seen.is_empty(),
        "check_server found no step: {report}"
    );
    let (address, step_ms) = seen
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("no clock step reported within 30 s: {report}"));
    assert!(address.contains(&proxy.port().to_string()), "{address}");
    assert!(
        (-32_000..=-28_000).contains(&step_ms),
        "the step's size: {step_ms} ms"
    );
    // Read again: the estimate now matches the clock the client sees.
    let mut raw = redis::Client::open(proxy.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(&mut raw).unwrap();
    let server_ms = seconds * 1000 + micros / 1000;
    let estimate = client.backend().server_now_ms().unwrap();
    assert!(
        (estimate - server_ms).abs() < 2_000,
        "the estimate {estimate} is not the server's clock {server_ms} again"
    );
    // And this machine's clock is 30 s ahead of the server's: said too.
    let report = client.check_server().unwrap();
    assert!(
        report
            .about("clock")
            .any(|finding| finding.found.contains("behind this machine's wall clock")),
        "{report}"
    );
}

/// A reading of the server's clock whose round trip is long (here a
/// middlebox holds a connection's `TIME` 900 ms; a server frozen
/// mid-reading does the same) cannot tell where in that round trip the
/// server read its clock: the estimate taken from it must never be ahead
/// of the server's clock, or every window sent on it ends late. Before, the
/// midpoint was taken: about 450 ms ahead here.
#[test]
fn a_clock_reading_with_a_long_round_trip_is_never_taken_ahead() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let client = Client::builder()
        .redis_url(proxy.url())
        .pool_size(1)
        .build()
        .unwrap();
    let lock = client.lock(common::unique_name("clock:long-reading"));
    // A first, prompt reading.
    lock.is_locked().unwrap();
    // The connection reads the clock again before its first request 5 s
    // (its recheck interval) after the last reading: that reading is held.
    proxy.hold_next(b"TIME");
    std::thread::sleep(Duration::from_millis(5_200));
    std::thread::scope(|scope| {
        scope.spawn(|| {
            proxy.wait_held(Duration::from_secs(20));
            std::thread::sleep(Duration::from_millis(900));
            proxy.deliver();
        });
        lock.is_locked().unwrap();
    });
    let (held, _) = proxy.last_delivery();
    assert!(held.contains("TIME"), "held something else: {held:?}");
    let estimate = client.backend().server_now_ms().unwrap();
    let mut direct = server.connection();
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(&mut direct).unwrap();
    let server_ms = seconds * 1000 + micros / 1000;
    assert!(
        estimate <= server_ms + 25,
        "the estimate runs {} ms ahead of the server's clock",
        estimate - server_ms
    );
    assert!(
        estimate >= server_ms - 1_000,
        "the estimate runs {} ms behind the server's clock",
        server_ms - estimate
    );
}
