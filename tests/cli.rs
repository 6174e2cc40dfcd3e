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

use common::keys;
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
    assert_eq!(output.status.code(), Some(3), "a server refusal");
    let err = stderr(&output);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("redisync: error: "), "{err}");
    assert!(!err.contains("wr0ngSecret"), "{err}");
    assert!(stdout(&output).is_empty());

    // Nothing listening at all.
    let output = redisync("redis://:wr0ngSecret@127.0.0.1:1/", &["doctor"]);
    assert_eq!(output.status.code(), Some(3), "a connection error");
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
        semaphore.acquire_id(Duration::from_secs(30)).unwrap(),
        semaphore.acquire_id(Duration::from_secs(30)).unwrap(),
    ];
    let waiter = Client::open(&server.url()).unwrap();
    let (tx, rx) = mpsc::channel();
    let waiting_name = name.clone();
    let thread = thread::spawn(move || {
        let semaphore = waiter.permit_expirable_semaphore(waiting_name.as_str());
        let got = semaphore
            .try_acquire_id_for(Duration::from_secs(20), Duration::from_secs(30))
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
    assert_eq!(output.status.code(), Some(4), "declined");
    assert!(stderr(&output).contains("--yes"), "{}", stderr(&output));
    assert!(client.lock(name.clone()).is_locked().unwrap());
    guard.unlock().unwrap();

    // Nothing held: said, with exit status 1.
    let output = redisync(&server.url(), &["--json", "force-unlock", "--yes", &name]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
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
    assert_eq!(
        client
            .barrier(format!("{prefix}:barrier"), 1)
            .wait()
            .unwrap(),
        0
    );
    let leadership = client
        .leader_election(format!("{prefix}:election"))
        .campaign("host-a")
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
    // The election is one object (its lock, term, leader and recent terms
    // are its keys), with its leader and term.
    assert_eq!(text.lines().count(), 1 + 7, "{text}");
    assert!(
        text.contains(&format!("leader host-a, term {}", leadership.term())),
        "{text}"
    );
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
        (":barrier", "barrier"),
        (":election", "election"),
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
    leadership.resign().unwrap();
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

/// Runs the binary with `args` only (no `--url`), stdin closed.
fn redisync_bare(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redisync"))
        .args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run redisync")
}

#[test]
fn exit_codes_tell_usage_server_and_declined_apart_and_help_lists_them() {
    let help = redisync_bare(&["--help"]);
    assert!(help.status.success());
    let text = stdout(&help);
    for line in [
        "Exit status:",
        "  1  ",
        "  2  ",
        "  3  ",
        "  4  ",
        "--timeout",
    ] {
        assert!(text.contains(line), "{line:?} missing from --help:\n{text}");
    }
    // Usage: an unknown option, a bad URL (its accepted schemes named).
    assert_eq!(redisync_bare(&["--nope", "list"]).status.code(), Some(2));
    let output = redisync("http://127.0.0.1:7400", &["inspect", "x"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("redis://"), "{}", stderr(&output));
    assert!(!stderr(&output).contains("InvalidClientConfig"));
    assert_eq!(
        redisync_bare(&["--timeout", "0", "list"]).status.code(),
        Some(2)
    );
    // Connection: nothing listens.
    let output = redisync(
        &format!("redis://127.0.0.1:{}/", common::free_port()),
        &["list"],
    );
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    // Declined: no terminal and no --yes, for delete as for force-unlock.
    let server = TestServer::start();
    let client = Client::open(&server.url()).unwrap();
    let name = unique_name("cli-declined");
    let guard = client.lock(name.as_str()).lock().unwrap();
    let output = redisync(&server.url(), &["delete", &name]);
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    assert!(client.lock(name.as_str()).is_locked().unwrap());
    guard.unlock().unwrap();
    // Not found.
    let output = redisync(&server.url(), &["delete", "--yes", &name]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("nothing under"),
        "{}",
        stdout(&output)
    );
    // Data no redisync object stores is left alone, and said.
    let mut raw = server.connection();
    redis::cmd("RPUSH")
        .arg(&name)
        .arg("x")
        .query::<()>(&mut raw)
        .unwrap();
    let output = redisync(&server.url(), &["delete", "--yes", &name]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("Redis list"),
        "{}",
        stderr(&output)
    );
    let kept: i64 = redis::cmd("LLEN").arg(&name).query(&mut raw).unwrap();
    assert_eq!(kept, 1);
}

#[test]
fn timeout_bounds_every_command_on_a_frozen_server() {
    let server = TestServer::start();
    server.pause();
    for args in [
        &["--timeout", "500ms", "list"][..],
        &["--timeout", "500ms", "inspect", "x"],
        &["--timeout", "500ms", "doctor"],
    ] {
        let started = Instant::now();
        let output = redisync(&server.url(), args);
        let took = started.elapsed();
        assert_eq!(
            output.status.code(),
            Some(3),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(stderr(&output).contains("timed out"), "{}", stderr(&output));
        // The default (5 s) is not waited, nor the library's 10 s: 500 ms
        // per connection attempt and reply, with room for a loaded machine.
        assert!(took < Duration::from_secs(4), "{args:?} took {took:?}");
    }
    server.resume();
    let output = redisync(&server.url(), &["--timeout", "2s", "inspect", "x"]);
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn delete_removes_an_object_of_every_kind_and_wakes_its_waiter() {
    let server = TestServer::start();
    let client = Client::open(&server.url()).unwrap();
    let prefix = unique_name("cli-delete");
    let lock = format!("{prefix}:lock");
    let held = client.lock(lock.as_str()).lock().unwrap();
    let fair = format!("{prefix}:fair");
    let fair_held = client.fair_lock(fair.as_str()).lock().unwrap();
    let rw = format!("{prefix}:rw");
    let read = client
        .read_write_lock(rw.as_str())
        .read_lock()
        .lock()
        .unwrap();
    let permits = format!("{prefix}:permits");
    let semaphore = client.permit_expirable_semaphore(permits.as_str());
    assert!(semaphore.try_set_permits(1).unwrap());
    let lease = semaphore.acquire(Duration::from_secs(60)).unwrap();
    let counter = format!("{prefix}:counter");
    assert!(
        client
            .semaphore(counter.as_str())
            .try_set_permits(3)
            .unwrap()
    );

    // A waiter for the held lock wakes when it is deleted.
    let waiter = Client::open(&server.url()).unwrap();
    let waiter_id = waiter.id().to_owned();
    let (tx, rx) = mpsc::channel();
    let waiting = lock.clone();
    let thread = thread::spawn(move || {
        let got = waiter
            .lock(waiting.as_str())
            .try_lock_for_with_lease(Duration::from_secs(20), Duration::from_secs(30))
            .unwrap();
        tx.send(Instant::now()).unwrap();
        drop(got);
    });
    thread::sleep(Duration::from_millis(500));
    for name in [&lock, &fair, &rw, &permits, &counter] {
        let output = redisync(&server.url(), &["--json", "delete", "--yes", name]);
        assert!(output.status.success(), "{name}: {}", stderr(&output));
        assert_eq!(json(&output)["deleted"], true, "{name}");
        let after = json(&redisync(&server.url(), &["--json", "inspect", name]));
        if name == &lock && after["kind"] != "absent" {
            // Its waiter, woken by the delete, may have taken it already:
            // then it holds it, and nobody else.
            assert_eq!(after["kind"], "lock", "{name}: {after}");
            let holders = after["holders"].as_array().expect("the lock's holders");
            assert!(
                !holders.is_empty()
                    && holders
                        .iter()
                        .all(|holder| holder["client_id"] == waiter_id.as_str()),
                "{name}: held by someone but its waiter after the delete: {after}"
            );
        } else {
            assert_eq!(after["kind"], "absent", "{name}");
        }
    }
    rx.recv_timeout(Duration::from_secs(5))
        .expect("the lock's waiter was not woken by delete");
    thread.join().unwrap();
    // The holders lost what they held.
    assert!(held.unlock().is_err());
    assert!(!client.fair_lock(fair.as_str()).is_locked().unwrap());
    // (A fair lock's release of a free lock succeeds, as in Redisson.)
    let _ = fair_held.unlock();
    assert!(read.unlock().is_err());
    assert_eq!(lease.release().unwrap(), 0, "the deleted lease was gone");
}

#[test]
fn a_dead_fair_lock_waiter_is_shown_by_force_unlock_and_removed_by_delete() {
    use redisync::internal::fair_lock::FairLockKeys;

    let server = TestServer::start();
    let client = Client::open(&server.url()).unwrap();
    let name = unique_name("cli-dead-waiter");
    let holder = client.fair_lock(name.as_str()).lock().unwrap();
    // A waiter of a process that then died: queued, with a 5-minute slot,
    // and never coming back.
    let (queue, timeouts, channel_prefix) = (
        keys::fair_queue(&name),
        keys::fair_timeouts(&name),
        keys::lock_channel(&name),
    );
    let keys = FairLockKeys {
        name: &name,
        queue: &queue,
        timeouts: &timeouts,
        channel_prefix: &channel_prefix,
    };
    let dead = "6f1c0e4e-dead-4000-8000-000000000001:2";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let backend = client.backend();
    redisync::internal::fair_lock::acquire(
        backend.as_ref(),
        &keys,
        dead,
        30_000,
        300_000,
        now,
        true,
    )
    .unwrap();
    holder.unlock().unwrap();

    // A live waiter queues behind it and stays out though the lock is free.
    let live = Client::open(&server.url()).unwrap();
    let (tx, rx) = mpsc::channel();
    let waiting = name.clone();
    let thread = thread::spawn(move || {
        let got = live
            .fair_lock(waiting.as_str())
            .try_lock_for_with_lease(Duration::from_secs(20), Duration::from_secs(30))
            .unwrap();
        tx.send(Instant::now()).unwrap();
        got.is_some()
    });
    thread::sleep(Duration::from_millis(700));
    assert!(
        rx.try_recv().is_err(),
        "the live waiter passed the dead one"
    );

    // force-unlock: nothing is held, but it says what is queued.
    let output = redisync(&server.url(), &["force-unlock", "--yes", &name]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("nothing held") && text.contains(dead),
        "{text}"
    );
    assert!(text.contains("redisync delete"), "{text}");

    // delete --waiter removes the dead entry only, and the live waiter
    // gets the lock at once.
    let output = redisync(
        &server.url(),
        &["--json", "delete", "--yes", "--waiter", dead, &name],
    );
    let done = Instant::now();
    assert!(output.status.success(), "{}", stderr(&output));
    let doc = json(&output);
    assert_eq!(doc["waiters_removed"][0], dead);
    let woke = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the live waiter was not woken");
    assert!(thread.join().unwrap());
    let after = woke.saturating_duration_since(done);
    assert!(after < Duration::from_secs(2), "woke {after:?} after");

    // An id that is not queued is a finding, not a change.
    let output = redisync(&server.url(), &["delete", "--yes", "--waiter", dead, &name]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
}

#[test]
fn list_shows_one_wording_per_kind_and_leased_permits_as_holders() {
    let server = TestServer::start();
    let client = Client::open(&server.url()).unwrap();
    let prefix = unique_name("cli-kinds");
    client
        .semaphore(format!("{prefix}:empty"))
        .try_set_permits(0)
        .unwrap();
    client
        .count_down_latch(format!("{prefix}:latch"))
        .try_set_count(1)
        .unwrap();
    let leased = client.permit_expirable_semaphore(format!("{prefix}:leased"));
    assert!(leased.try_set_permits(2).unwrap());
    let _permit = leased.acquire(Duration::from_secs(60)).unwrap();

    let output = redisync(&server.url(), &["list", &format!("{prefix}:*")]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let row = |suffix: &str| -> Vec<String> {
        text.lines()
            .find(|line| line.starts_with(&format!("{prefix}:{suffix} ")))
            .unwrap_or_else(|| panic!("no {suffix} row:\n{text}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    // NAME KIND HOLDERS WAITERS TTL... VALUE
    let empty = row("empty");
    assert_eq!(empty[1], "counter");
    assert!(text.contains("counter 0"), "{text}");
    let latch = row("latch");
    assert_eq!(latch[1], "counter");
    assert!(
        latch.ends_with(&["counter".to_owned(), "1".to_owned()]),
        "{latch:?}"
    );
    assert!(
        !text.contains("count 1") && !text.contains("permits 0"),
        "{text}"
    );
    let pes = row("leased");
    assert_eq!(pes[1], "permit_expirable_semaphore");
    assert_eq!(pes[2], "1", "a leased permit is a holder: {pes:?}");
    assert!(
        pes.ends_with(&["permits".to_owned(), "1".to_owned()]),
        "{pes:?}"
    );
}

#[test]
fn doctor_json_rounds_milliseconds() {
    let server = TestServer::start();
    let output = redisync(&server.url(), &["--json", "doctor"]);
    let doc = json(&output);
    let text = doc["ping_ms"].to_string();
    let decimals = text.split_once('.').map_or(0, |(_, d)| d.len());
    assert!(decimals <= 3, "ping_ms {text}");
    assert!(doc["ping_ms"].as_f64().unwrap() > 0.0);
}

#[test]
fn inspect_and_doctor_report_waiters_on_a_semaphore_nobody_set() {
    let server = TestServer::start();
    let name = unique_name("cli-unset");
    let waiter = Client::open(&server.url()).unwrap();
    let waiting = name.clone();
    let thread = thread::spawn(move || {
        waiter
            .semaphore(waiting.as_str())
            .try_acquire_for(1, Duration::from_secs(20))
            .unwrap()
            .is_some()
    });
    let client = Client::open(&server.url()).unwrap();
    common::wait_until("the waiter subscribes", Duration::from_secs(10), || {
        let output = redisync(&server.url(), &["--json", "inspect", &name]);
        json(&output)["unset_semaphore_waiters"].as_i64() == Some(1)
    });
    let output = redisync(&server.url(), &["inspect", &name]);
    let text = stdout(&output);
    assert!(
        text.contains("never") && text.contains("try_set_permits"),
        "{text}"
    );

    let output = redisync(&server.url(), &["--json", "doctor"]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let doc = json(&output);
    assert_eq!(doc["unset_semaphores"][0]["name"], name.as_str(), "{doc}");
    assert_eq!(doc["unset_semaphores"][0]["waiters"], 1, "{doc}");

    // Setting the permits lets the waiter through.
    assert!(client.semaphore(name.as_str()).try_set_permits(1).unwrap());
    assert!(thread.join().unwrap());
    let output = redisync(&server.url(), &["--json", "inspect", &name]);
    assert_eq!(json(&output)["unset_semaphore_waiters"], 0);
}
