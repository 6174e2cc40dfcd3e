//! The `redisync` binary (feature `cli`) run as a process against real
//! redis-servers: `inspect`, `doctor`, `force-unlock`, `list`, `watch`.
#![cfg(feature = "cli")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{TestServer, unique_name};
use redisync::Client;

/// Runs the binary with `args` against `url` (no `REDIS_URL` inherited).
fn redisync(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redisync"))
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run redisync")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(output)))
}

#[test]
fn inspect_shows_a_held_lock_as_a_table_and_as_json() {
    let server = TestServer::start();
    let client = Client::open(&server.url()).unwrap();
    let name = unique_name("cli-inspect");
    let lock = client.lock(name.clone());
    let guard = lock.lock_with_lease(Duration::from_secs(30)).unwrap();

    let table = redisync(&server.url(), &["inspect", &name]);
    assert!(table.status.success(), "{}", stderr(&table));
    let text = stdout(&table);
    assert!(text.contains("lock"), "{text}");
    assert!(text.contains(client.id()), "{text}");

    let output = redisync(&server.url(), &["--json", "inspect", &name]);
    assert!(output.status.success(), "{}", stderr(&output));
    let doc = json(&output);
    assert_eq!(doc["name"], name.as_str());
    assert_eq!(doc["kind"], "lock");
    let ttl = doc["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 25_000 && ttl <= 30_000, "{doc}");
    let holders = doc["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0]["count"], 1);
    assert_eq!(holders[0]["client"], client.id());
    assert!(holders[0]["id"].as_str().unwrap().starts_with(client.id()));
    guard.unlock().unwrap();

    let output = redisync(&server.url(), &["--json", "inspect", &name]);
    assert_eq!(json(&output)["kind"], "absent");
}

#[test]
fn errors_are_one_line_without_the_password() {
    // The server has no password: AUTH fails.
    let server = TestServer::start();
    let url = format!("redis://:wr0ngSecret@127.0.0.1:{}/", server.port());
    let output = redisync(&url, &["inspect", "x"]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("redisync: error: "), "{err}");
    assert!(!err.contains("wr0ngSecret"), "{err}");
    assert!(stdout(&output).is_empty());

    // Nothing listening at all.
    let output = redisync("redis://:wr0ngSecret@127.0.0.1:1/", &["doctor"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(!stderr(&output).contains("wr0ngSecret"));
}

#[test]
fn doctor_exits_1_on_a_danger_and_0_when_settings_are_safe() {
    // The test servers run without persistence: a danger.
    let server = TestServer::start();
    let output = redisync(&server.url(), &["doctor"]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let text = stdout(&output);
    assert!(text.contains("ping"), "{text}");
    assert!(
        text.contains("Redis 7") || text.contains("Redis "),
        "{text}"
    );
    assert!(text.contains("persistence") && text.contains("why:") && text.contains("fix:"));

    let safe = TestServer::start_with(&["--appendonly", "yes"]);
    let output = redisync(&safe.url(), &["--json", "doctor"]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    let doc = json(&output);
    assert_eq!(doc["danger"], false);
    assert!(doc["servers"][0].as_str().unwrap().contains("Redis"));

    let risky =
        TestServer::start_with(&["--appendonly", "yes", "--maxmemory-policy", "allkeys-lru"]);
    let output = redisync(&risky.url(), &["doctor"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stdout(&output).contains("maxmemory-policy"));
}

#[test]
fn the_url_comes_from_redis_url_when_not_given() {
    let server = TestServer::start();
    let output = Command::new(env!("CARGO_BIN_EXE_redisync"))
        .args(["--json", "inspect", "nothing-here"])
        .env("REDIS_URL", server.url())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(json(&output)["kind"], "absent");
}
