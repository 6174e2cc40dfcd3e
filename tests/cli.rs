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
    assert_eq!(holders[0]["client_id"], client.id());
    // The connected client's address (its connection named after it).
    let address = holders[0]["client"].as_str().expect("the holder's address");
    assert!(address.starts_with("127.0.0.1:"), "{address}");
    assert!(!holders[0]["connections"].as_array().unwrap().is_empty());
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

/// Holds `name` for 30 s from one client, parks a waiter in another, runs
/// `force-unlock --yes` and returns how long after it the waiter got the
/// lock.
fn waiter_wakes_after_force_unlock(
    server: &TestServer,
    make: fn(&Client, &str) -> redisync::Lock,
) -> (Duration, Output) {
    let name = unique_name("cli-force");
    let holder = Client::open(&server.url()).unwrap();
    let guard = make(&holder, &name)
        .lock_with_lease(Duration::from_secs(30))
        .unwrap();
    let waiter = Client::open(&server.url()).unwrap();
    let (tx, rx) = mpsc::channel();
    let waiting_name = name.clone();
    let thread = thread::spawn(move || {
        let lock = make(&waiter, &waiting_name);
        let got = lock
            .try_lock_for_with_lease(Duration::from_secs(20), Duration::from_secs(30))
            .unwrap();
        tx.send(Instant::now()).unwrap();
        drop(got);
    });
    // Let the waiter subscribe and park.
    thread::sleep(Duration::from_millis(500));
    assert!(rx.try_recv().is_err(), "the waiter got a held lock");
    let output = redisync(&server.url(), &["force-unlock", "--yes", &name]);
    let done = Instant::now();
    let woke = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the waiter was not woken");
    thread.join().unwrap();
    // (A fair lock's release of a free lock succeeds, as in Redisson.)
    let _ = guard.unlock();
    (woke.saturating_duration_since(done), output)
}

#[test]
fn force_unlock_wakes_a_lock_waiter_within_a_second() {
    let server = TestServer::start();
    let (after, output) = waiter_wakes_after_force_unlock(&server, |c, n| c.lock(n));
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("freed"), "{}", stdout(&output));
    assert!(after < Duration::from_secs(1), "woke {after:?} after");
}

#[test]
fn force_unlock_wakes_a_fair_lock_waiter_within_a_second() {
    let server = TestServer::start();
    let (after, output) = waiter_wakes_after_force_unlock(&server, |c, n| c.fair_lock(n));
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(after < Duration::from_secs(1), "woke {after:?} after");
}

#[test]
fn force_unlock_wakes_a_write_lock_waiter_within_a_second() {
    let server = TestServer::start();
    let (after, output) =
        waiter_wakes_after_force_unlock(&server, |c, n| c.read_write_lock(n).write_lock());
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(after < Duration::from_secs(1), "woke {after:?} after");
}

#[test]
fn force_unlock_frees_leased_permits_and_wakes_a_waiter_within_a_second() {
    let server = TestServer::start();
    let name = unique_name("cli-force-permits");
    let holder = Client::open(&server.url()).unwrap();
    let semaphore = holder.permit_expirable_semaphore(name.as_str());
    assert!(semaphore.try_set_permits(2).unwrap());
    let leased = [
        semaphore.acquire(Duration::from_secs(30)).unwrap(),
        semaphore.acquire(Duration::from_secs(30)).unwrap(),
    ];
    let waiter = Client::open(&server.url()).unwrap();
    let (tx, rx) = mpsc::channel();
    let waiting_name = name.clone();
    let thread = thread::spawn(move || {
        let semaphore = waiter.permit_expirable_semaphore(waiting_name.as_str());
        let got = semaphore
            .try_acquire_for(Duration::from_secs(20), Duration::from_secs(30))
            .unwrap();
        tx.send(Instant::now()).unwrap();
        got
    });
    thread::sleep(Duration::from_millis(500));
    assert!(
        rx.try_recv().is_err(),
        "the waiter got a permit none was free"
    );
    let output = redisync(&server.url(), &["--json", "force-unlock", "--yes", &name]);
    let done = Instant::now();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(json(&output)["freed"], true);
    let woke = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the waiter was not woken");
    assert!(thread.join().unwrap().is_some());
    let after = woke.saturating_duration_since(done);
    assert!(after < Duration::from_secs(1), "woke {after:?} after");
    // The holder's ids are gone: releasing them again says so.
    for id in &leased {
        assert!(!semaphore.try_release(id).unwrap());
    }
}

#[test]
fn force_unlock_refuses_without_a_terminal_or_yes() {
    let server = TestServer::start();
    let client = Client::open(&server.url()).unwrap();
    let name = unique_name("cli-refuse");
    let guard = client.lock(name.clone()).lock().unwrap();
    let output = redisync(&server.url(), &["force-unlock", &name]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--yes"), "{}", stderr(&output));
    assert!(client.lock(name.clone()).is_locked().unwrap());
    guard.unlock().unwrap();

    let output = redisync(&server.url(), &["--json", "force-unlock", "--yes", &name]);
    assert!(output.status.success());
    assert_eq!(json(&output)["freed"], false);
}

#[test]
fn list_finds_locks_semaphores_and_latches_and_skips_auxiliary_keys() {
    let server = TestServer::start();
    let client = Client::open(&server.url()).unwrap();
    let prefix = unique_name("cli-list");
    let lock = client.lock(format!("{prefix}:lock"));
    let held = lock.lock().unwrap();
    let fenced = client.fenced_lock(format!("{prefix}:fenced"));
    fenced.lock().unwrap().unlock().unwrap();
    let rw = client.read_write_lock(format!("{prefix}:rw"));
    let read = rw.read_lock().lock().unwrap();
    client
        .semaphore(format!("{prefix}:sem"))
        .try_set_permits(3)
        .unwrap();
    client
        .count_down_latch(format!("{prefix}:latch"))
        .try_set_count(2)
        .unwrap();
    client
        .lock("someone-else")
        .lock()
        .unwrap()
        .unlock()
        .unwrap();

    let output = redisync(&server.url(), &["list", &format!("{prefix}:*")]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    println!("{text}");
    assert_eq!(text.lines().count(), 1 + 5, "{text}");
    assert!(text.starts_with("NAME"));
    assert!(
        !text.contains("redisson_") && !text.contains("rwlock_timeout"),
        "{text}"
    );

    let output = redisync(&server.url(), &["--json", "list", &format!("{prefix}:*")]);
    let doc = json(&output);
    let kinds: Vec<(String, String)> = doc["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["name"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches(&prefix)
                    .to_owned(),
                o["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        (":fenced", "fenced_lock"),
        (":latch", "counter"),
        (":lock", "lock"),
        (":rw", "read_write_lock"),
        (":sem", "counter"),
    ]
    .iter()
    .map(|(n, k)| ((*n).to_owned(), (*k).to_owned()))
    .collect();
    assert_eq!(kinds, expected);
    held.unlock().unwrap();
    read.unlock().unwrap();
}

#[test]
fn watch_reports_acquisitions_unlocks_and_queue_changes() {
    let server = TestServer::start();
    let url = server.url();
    watch_case(&["--url", &url], || Client::open(&url).unwrap());
}

#[test]
fn watch_with_a_name_prefix_hears_the_prefixed_objects_channels() {
    let server = TestServer::start();
    let url = server.url();
    let prefix = format!("{}:", unique_name("cli-watch-ns"));
    watch_case(&["--url", &url, "--name-prefix", &prefix], || {
        Client::builder()
            .redis_url(url.clone())
            .name_prefix(prefix.clone())
            .build()
            .unwrap()
    });
}

/// `redisync <target> watch NAME --for 3s` while a fair lock is taken, a
/// second client queues, and the first unlocks (its message goes to the
/// queued waiter's own channel, which watch subscribes when the queue shows
/// the waiter): every kind of event is reported, each with a time.
fn watch_case(target: &[&str], client: impl Fn() -> Client) {
    let name = unique_name("cli-watch");
    let child = Command::new(env!("CARGO_BIN_EXE_redisync"))
        .args(target)
        .args(["watch", &name, "--for", "3s"])
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(700));
    let holder = client();
    let lock = holder.fair_lock(name.clone());
    let guard = lock.lock().unwrap();
    thread::sleep(Duration::from_millis(300));
    let waiter = client();
    let waiting_name = name;
    let thread = thread::spawn(move || {
        let got = waiter
            .fair_lock(waiting_name)
            .try_lock_for(Duration::from_secs(5))
            .unwrap();
        thread::sleep(Duration::from_millis(300));
        drop(got);
    });
    thread::sleep(Duration::from_millis(400));
    guard.unlock().unwrap();
    thread.join().unwrap();
    let started = Instant::now();
    let output = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(3), "--for ignored");
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    println!("{text}");
    for event in [
        "acquired", "queued", "dequeued", "message", "unlock", "released",
    ] {
        assert!(text.contains(event), "no {event}: {text}");
    }
    // Every line starts with a time.
    for line in text.lines() {
        assert_eq!(line.as_bytes()[2], b':', "{line}");
    }
}

#[cfg(feature = "cluster")]
#[test]
fn watch_on_a_cluster_hears_the_sharded_unlock_messages() {
    let cluster = common::cluster::TestCluster::start();
    let seed = cluster.url(0);
    watch_case(&["--cluster-node", &seed], || cluster.client());
}

#[cfg(feature = "cluster")]
#[test]
fn list_scans_every_master_of_a_cluster() {
    let cluster = common::cluster::TestCluster::start();
    let client = cluster.client();
    let names = cluster.names_on_every_master("cli-list-cluster");
    let guards: Vec<_> = names
        .iter()
        .map(|name| client.lock(name.as_str()).lock().unwrap())
        .collect();
    let output = Command::new(env!("CARGO_BIN_EXE_redisync"))
        .args(["--cluster-node", &cluster.url(0), "--json", "list"])
        .arg("cli-list-cluster*")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run redisync");
    assert!(output.status.success(), "{}", stderr(&output));
    let listed = json(&output);
    let found: Vec<&str> = listed["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|object| object["name"].as_str().unwrap())
        .collect();
    for name in &names {
        assert!(
            found.contains(&name.as_str()),
            "{name} missing from {found:?}"
        );
    }
    drop(guards);
}

#[test]
fn name_prefix_scopes_list_and_inspect_to_one_namespace() {
    let server = TestServer::start();
    let base = unique_name("cli-ns");
    let (app1, app2) = (format!("{base}:app1:"), format!("{base}:app2:"));
    let one = Client::builder()
        .redis_url(server.url())
        .name_prefix(app1.clone())
        .build()
        .unwrap();
    let two = Client::builder()
        .redis_url(server.url())
        .name_prefix(app2.clone())
        .build()
        .unwrap();
    let _a = one.lock("orders").lock().unwrap();
    let _b = two.lock("invoices").lock().unwrap();

    let output = redisync(&server.url(), &["--name-prefix", &app1, "--json", "list"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let listed = json(&output);
    let names: Vec<&str> = listed["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|object| object["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["orders"],
        "only app1's objects, unprefixed: {listed}"
    );

    let output = redisync(
        &server.url(),
        &["--name-prefix", &app1, "inspect", "orders"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains(one.id()), "{}", stdout(&output));

    // Without the prefix, the full key is the name.
    let output = redisync(
        &server.url(),
        &["--json", "inspect", &format!("{app2}invoices")],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(json(&output)["kind"], "lock", "{}", stdout(&output));

    let output = redisync(&server.url(), &["--name-prefix", "{bad}", "list"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("name_prefix"),
        "{}",
        stderr(&output)
    );
}
