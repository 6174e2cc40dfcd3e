//! Security: Redis ACL users (`redis://user:password@...`), credentials kept
//! out of `Debug`, errors and logs, and TLS (`rediss://`, feature `tls`)
//! against a redis-server whose CA and certificates this file generates at
//! run time (pure Rust, with `rcgen`: no openssl CLI needed).
//!
//! The ACL user is created from the `ACL SETUSER` line of docs/deployments.md's
//! Security section, so the docs cannot drift from what the tests prove:
//! every primitive works as that user, `ACL LOG` records no refusal, and the
//! line lists exactly the commands the library sends (checked against the
//! Lua scripts).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::timing::{LONG_LEASE, SETTLE, STUCK};
use common::{TestServer, all_error_text, free_port, unique_name};
use redisync::{Client, NopEventHandler};

/// The ACL user of every test (each test has its own server).
const ACL_USER: &str = "redisync";
/// Passwords that must never show up anywhere; distinct per use so a leak
/// points at its source.
const ACL_PASSWORD: &str = "acl-pw-3f9c2e71-must-not-leak";
const WRONG_PASSWORD: &str = "wrong-pw-b84d07aa-must-not-leak";
const CHANGED_PASSWORD: &str = "changed-pw-5e1a6c09-must-not-leak";
const UNREACHABLE_PASSWORD: &str = "unreachable-pw-0d7e4b12-must-not-leak";
const ALL_PASSWORDS: [&str; 4] = [
    ACL_PASSWORD,
    WRONG_PASSWORD,
    CHANGED_PASSWORD,
    UNREACHABLE_PASSWORD,
];

/// A woken waiter must be back well before [`LONG_LEASE`].
const WOKEN_WITHIN: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// The `ACL SETUSER` line of docs/deployments.md's Security section, as arguments
/// (without `ACL SETUSER`).
fn readme_acl_rule() -> Vec<String> {
    let readme = include_str!("../docs/deployments.md");
    let security = readme
        .split("\n## ")
        .find(|section| section.starts_with("Security"))
        .expect("docs/deployments.md has a `## Security` section");
    let line = security
        .lines()
        .find_map(|line| line.trim().strip_prefix("ACL SETUSER "))
        .expect("docs/deployments.md's Security section shows an `ACL SETUSER` line");
    line.split_whitespace().map(str::to_owned).collect()
}

/// The documented rule with our user name and password and, when given,
/// other key and channel patterns.
fn acl_rule(patterns: Option<&[&str]>) -> Vec<String> {
    let mut rule = readme_acl_rule();
    assert_eq!(
        rule[0], ACL_USER,
        "the documented rule names the user {ACL_USER:?}"
    );
    for arg in &mut rule {
        if arg.starts_with('>') {
            *arg = format!(">{ACL_PASSWORD}");
        }
    }
    if let Some(patterns) = patterns {
        rule.retain(|arg| !(arg.starts_with('~') || arg.starts_with('&')));
        rule.extend(patterns.iter().map(|p| (*p).to_owned()));
    }
    rule
}

/// Creates the documented ACL user on the server behind `admin`.
fn create_acl_user(admin: &mut redis::Connection, patterns: Option<&[&str]>) {
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg(acl_rule(patterns))
        .query::<()>(admin)
        .unwrap();
    redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query::<()>(admin)
        .unwrap();
}

/// The refusals `ACL LOG` recorded for [`ACL_USER`], as `context:object`,
/// leaving out the two the `redis` crate sends and tolerates a refusal of
/// (`CLIENT SETINFO` on connect, `PUNSUBSCRIBE` when leaving pub/sub).
fn acl_refusals(admin: &mut redis::Connection) -> Vec<String> {
    let entries: Vec<std::collections::HashMap<String, redis::Value>> =
        redis::cmd("ACL").arg("LOG").query(admin).unwrap();
    let text = |value: Option<&redis::Value>| -> String {
        match value {
            Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            Some(redis::Value::SimpleString(s)) => s.clone(),
            Some(other) => format!("{other:?}"),
            None => String::new(),
        }
    };
    entries
        .iter()
        .filter(|entry| text(entry.get("username")) == ACL_USER)
        .map(|entry| {
            format!(
                "{} {}: {}",
                text(entry.get("reason")),
                text(entry.get("context")),
                text(entry.get("object"))
            )
        })
        .filter(|refusal| {
            let object = refusal.rsplit(": ").next().unwrap_or("");
            !(object.starts_with("client") || object == "punsubscribe")
        })
        .collect()
}

fn assert_no_password(what: &str, text: &str) {
    for password in ALL_PASSWORDS {
        assert!(
            !text.contains(password),
            "{what} shows a password ({password}): {text}"
        );
    }
}

fn acl_url(port: u16, password: &str) -> String {
    format!("redis://{ACL_USER}:{password}@127.0.0.1:{port}/")
}

/// A silent builder with short timeouts.
fn quiet(builder: redisync::ClientBuilder) -> redisync::ClientBuilder {
    builder
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .event_handler(Arc::new(NopEventHandler))
}

/// Spawns a thread that blocks in `lock()` and reports when it got the lock.
fn spawn_waiter(lock: redisync::Lock) -> (thread::JoinHandle<()>, mpsc::Receiver<Instant>) {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let guard = lock.lock().expect("waiter: lock()");
        let _ = tx.send(Instant::now());
        guard.unlock().expect("waiter: unlock()");
    });
    (handle, rx)
}

/// `a` holds `name` with a long lease and a waiter of `b` parks on it; the
/// unlock must wake the waiter by pub/sub, long before the lease ends.
fn assert_woken_by_pubsub(a: &Client, b: &Client, name: &str) {
    let guard = a.lock(name).lock_with_lease(LONG_LEASE).unwrap();
    let (waiter, rx) = spawn_waiter(b.lock(name));
    thread::sleep(SETTLE);
    assert!(rx.try_recv().is_err(), "the waiter got a held lock");
    let released = Instant::now();
    guard.unlock().unwrap();
    let acquired = rx.recv_timeout(STUCK).expect("the waiter was never woken");
    waiter.join().unwrap();
    let waited = acquired.saturating_duration_since(released);
    assert!(
        waited < WOKEN_WITHIN,
        "the waiter took {waited:?}: not woken by pub/sub (lease {LONG_LEASE:?})"
    );
}

/// Mutual exclusion between two clients, three threads each, checked with
/// a counter incremented non-atomically inside the lock.
fn assert_mutual_exclusion(clients: &[Client; 2], name: &str) {
    const THREADS_PER_CLIENT: usize = 3;
    const ITERATIONS: u64 = 25;
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(2 * THREADS_PER_CLIENT));
    let mut threads = Vec::new();
    for client in clients {
        for _ in 0..THREADS_PER_CLIENT {
            let lock = client.lock(name);
            let (counter, inside, start) = (counter.clone(), inside.clone(), start.clone());
            threads.push(thread::spawn(move || {
                start.wait();
                for _ in 0..ITERATIONS {
                    let guard = lock.lock().expect("lock()");
                    assert!(
                        !inside.swap(true, Ordering::SeqCst),
                        "two holders inside the critical section"
                    );
                    let value = counter.load(Ordering::SeqCst);
                    thread::yield_now();
                    counter.store(value + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    guard.unlock().expect("unlock()");
                }
            }));
        }
    }
    for thread in threads {
        thread.join().expect("worker panicked");
    }
    assert_eq!(
        counter.load(Ordering::SeqCst),
        2 * THREADS_PER_CLIENT as u64 * ITERATIONS
    );
}

/// A watchdog-renewed lock outlives three watchdog timeouts.
fn assert_watchdog_renews(holder: &Client, other: &Client, name: &str) {
    let timeout = holder.watchdog_timeout();
    let guard = holder.lock(name).lock().unwrap();
    thread::sleep(timeout * 3 + timeout / 2);
    assert!(!guard.is_lost(), "the watchdog lost the lock");
    assert!(other.lock(name).try_lock().unwrap().is_none());
    let ttl = holder.lock(name).remaining_ttl().unwrap().unwrap();
    assert!(ttl > Duration::ZERO && ttl <= timeout, "ttl {ttl:?}");
    guard.unlock().unwrap();
    assert!(!other.lock(name).is_locked().unwrap());
}

// ---------------------------------------------------------------------------
// ACL users
// ---------------------------------------------------------------------------

/// The documented list is exactly what the library sends: the connection-level
/// commands plus every command the Lua scripts call (Redis checks a
/// script's calls against the caller's ACL too).
#[test]
fn readme_acl_rule_lists_exactly_the_commands_sent() {
    let rule = readme_acl_rule();
    let listed: BTreeSet<String> = rule
        .iter()
        .filter_map(|arg| arg.strip_prefix('+'))
        .map(str::to_lowercase)
        .collect();
    let mut needed: BTreeSet<String> = [
        "ping",           // connection check
        "client|setname", // every connection's name, redisync:<client uuid>
        "evalsha",        // every operation
        "script|load",    // on NOSCRIPT
        "publish",        // the subscriber's nudges
        "subscribe",      // waiters
        "unsubscribe",    // waiters leaving
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let lua_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
    for entry in std::fs::read_dir(&lua_dir).unwrap() {
        let script = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for call in script.split("redis.").skip(1) {
            let Some(rest) = call
                .strip_prefix("call(")
                .or_else(|| call.strip_prefix("pcall("))
            else {
                continue;
            };
            let rest = rest.trim_start();
            let quote = rest.chars().next().unwrap();
            assert!(
                quote == '\'' || quote == '"',
                "a script calls a command by variable: {rest:.40}"
            );
            let mut parts = rest[1..].split(quote);
            let command = parts.next().unwrap().to_lowercase();
            // A command with subcommands: its subcommand too (`pubsub|numsub`).
            let command = match command.as_str() {
                "pubsub" => format!("{command}|{}", parts.nth(1).unwrap().to_lowercase()),
                _ => command,
            };
            needed.insert(command);
        }
    }
    assert_eq!(
        listed, needed,
        "docs/deployments.md's ACL rule (left) differs from the commands the library sends (right)"
    );
    assert!(rule.contains(&"-@all".to_owned()) || rule.contains(&"reset".to_owned()));
}

/// Every primitive works as the documented ACL user, with key and channel
/// patterns narrower than `~*` / `&*`, and the server refuses nothing.
#[test]
fn acl_user_runs_every_primitive() {
    let server = TestServer::start();
    let mut admin = server.connection();
    // Lock names below all start with "acl:".
    create_acl_user(
        &mut admin,
        Some(&[
            "~acl:*",
            "~{acl:*",
            "~redisson_*",
            "&redisson_*",
            "&redisync__control:*",
            // A barrier's channel is also a key of its scripts.
            "~redisync_barrier:*",
            "&redisync_barrier:*",
        ]),
    );
    let url = acl_url(server.port(), ACL_PASSWORD);
    let a = quiet(Client::builder().redis_url(&url)).build().unwrap();
    let b = quiet(Client::builder().redis_url(&url)).build().unwrap();
    // Renewed every third of a second: only a stall over 667 ms loses a
    // hold (300 ms watchdogs are too short for a loaded machine).
    let fast = quiet(Client::builder().redis_url(&url))
        .watchdog_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    // The user really is restricted.
    let mut as_user = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let no_perm = redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm);
    let denied = redis::cmd("FLUSHALL")
        .query::<()>(&mut as_user)
        .unwrap_err();
    assert_eq!(denied.kind(), no_perm, "{denied}");
    let denied = redis::cmd("HSET")
        .arg("elsewhere")
        .arg("f")
        .arg("v")
        .query::<()>(&mut as_user)
        .unwrap_err();
    assert_eq!(denied.kind(), no_perm, "{denied}");
    redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query::<()>(&mut admin)
        .unwrap();
    // Scripts are (re)loaded as this user too.
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query::<()>(&mut admin)
        .unwrap();

    // Reentrant lock: state, reentrancy, pub/sub wake-up, exclusion,
    // watchdog, force unlock.
    let name = unique_name("acl:lock");
    let lock = a.lock(name.as_str());
    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert_eq!(a.inspect(&name).unwrap().holders[0].holds, 2);
    assert!(lock.is_held_by_current_thread().unwrap());
    assert!(lock.remaining_ttl().unwrap().is_some());
    drop(inner);
    outer.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
    assert_woken_by_pubsub(&a, &b, &name);
    assert_mutual_exclusion(&[a.clone(), b.clone()], &unique_name("acl:mutex"));
    assert_watchdog_renews(&fast, &b, &unique_name("acl:watchdog"));
    let forced = a.lock(name.as_str()).lock_with_lease(LONG_LEASE).unwrap();
    assert!(b.lock(name.as_str()).force_unlock().unwrap());
    assert!(forced.unlock().unwrap_err().is_not_held());

    // Fenced lock.
    let fenced = unique_name("acl:fenced");
    let first = a.fenced_lock(fenced.as_str()).lock().unwrap();
    let token = first.token().unwrap();
    first.unlock().unwrap();
    let second = b.fenced_lock(fenced.as_str()).lock().unwrap();
    assert!(second.token().unwrap() > token);
    assert_eq!(a.inspect(&fenced).unwrap().fencing_token, second.token());
    second.unlock().unwrap();

    // Fair lock: three waiters queue; the first gives up (leaving the
    // queue moves the others' slots up), the unlock wakes the next, whose
    // acquisition moves the last one up, and whose unlock wakes the last.
    let fair = unique_name("acl:fair");
    let held = a
        .fair_lock(fair.as_str())
        .lock_with_lease(LONG_LEASE)
        .unwrap();
    let quitter_lock = b.fair_lock(fair.as_str());
    let quitter = thread::spawn(move || {
        quitter_lock
            .try_lock_for(Duration::from_millis(600))
            .map(drop)
    });
    thread::sleep(Duration::from_millis(100));
    let (second, second_rx) = spawn_waiter(b.fair_lock(fair.as_str()));
    thread::sleep(Duration::from_millis(100));
    let (third, third_rx) = spawn_waiter(a.fair_lock(fair.as_str()));
    quitter.join().unwrap().unwrap();
    assert!(second_rx.try_recv().is_err() && third_rx.try_recv().is_err());
    assert_eq!(a.inspect(&fair).unwrap().queue.len(), 2);
    let released = Instant::now();
    held.unlock().unwrap();
    for (waiter, rx) in [(second, second_rx), (third, third_rx)] {
        let acquired = rx.recv_timeout(STUCK).expect("fair waiter never woken");
        waiter.join().unwrap();
        assert!(acquired.saturating_duration_since(released) < WOKEN_WITHIN);
    }
    let fair_held = a.fair_lock(fair.as_str()).lock().unwrap();
    assert!(b.fair_lock(fair.as_str()).force_unlock().unwrap());
    assert!(!b.fair_lock(fair.as_str()).is_locked().unwrap());
    drop(fair_held);

    // Read-write lock: readers share, a writer waits for the read unlock,
    // the watchdog renews a read hold.
    let rw = unique_name("acl:rw");
    let read_a = a.read_write_lock(rw.as_str()).read_lock().lock().unwrap();
    let read_b = b.read_write_lock(rw.as_str()).read_lock().lock().unwrap();
    // Inspection reads the read-hold keys too.
    let found = a.inspect(&rw).unwrap();
    assert_eq!(found.holders.len(), 2);
    assert!(found.holders.iter().all(|holder| holder.ttl.is_some()));
    read_b.unlock().unwrap();
    let (writer, rx) = spawn_waiter(b.read_write_lock(rw.as_str()).write_lock());
    thread::sleep(SETTLE);
    assert!(rx.try_recv().is_err(), "the writer got a read-held lock");
    read_a.unlock().unwrap();
    rx.recv_timeout(STUCK).expect("writer never woken");
    writer.join().unwrap();
    let renewed = fast
        .read_write_lock(rw.as_str())
        .read_lock()
        .lock()
        .unwrap();
    thread::sleep(fast.watchdog_timeout() * 2);
    assert!(!renewed.is_lost());
    assert!(
        fast.read_write_lock(rw.as_str())
            .read_lock()
            .is_locked()
            .unwrap()
    );
    assert!(
        a.read_write_lock(rw.as_str())
            .read_lock()
            .force_unlock()
            .unwrap()
    );
    let write = a.read_write_lock(rw.as_str()).write_lock().lock().unwrap();
    write.unlock().unwrap();
    drop(renewed);
    // Extending fixed leases: a reader's (its keys, the longest of all
    // readers) and a writer's.
    let leased = a
        .read_write_lock(rw.as_str())
        .read_lock()
        .lock_with_lease(LONG_LEASE)
        .unwrap();
    leased.extend(LONG_LEASE).unwrap();
    leased.unlock().unwrap();
    let leased = a
        .read_write_lock(rw.as_str())
        .write_lock()
        .lock_with_lease(LONG_LEASE)
        .unwrap();
    leased.extend(LONG_LEASE).unwrap();
    leased.unlock().unwrap();

    // Semaphore: a release wakes a blocked acquirer.
    let sem = unique_name("acl:semaphore");
    assert!(a.semaphore(sem.as_str()).try_set_permits(1).unwrap());
    let permit = a.semaphore(sem.as_str()).acquire(1).unwrap();
    let waiting = b.semaphore(sem.as_str());
    let (tx, rx) = mpsc::channel();
    let acquirer = thread::spawn(move || {
        let permit = waiting.acquire(1).unwrap();
        tx.send(()).unwrap();
        permit.release().unwrap();
    });
    thread::sleep(SETTLE);
    assert!(rx.try_recv().is_err());
    permit.release().unwrap();
    rx.recv_timeout(STUCK)
        .expect("semaphore waiter never woken");
    acquirer.join().unwrap();
    a.semaphore(sem.as_str()).add_permits(2).unwrap();
    assert_eq!(a.semaphore(sem.as_str()).available_permits().unwrap(), 3);
    assert_eq!(a.semaphore(sem.as_str()).drain_permits().unwrap(), 3);

    // Permit-expirable semaphore.
    let exp = unique_name("acl:expirable");
    let workers = a.permit_expirable_semaphore(exp.as_str());
    assert!(workers.try_set_permits(1).unwrap());
    let id = workers.acquire_id(LONG_LEASE).unwrap();
    assert_eq!(workers.available_permits().unwrap(), 0);
    assert!(
        b.permit_expirable_semaphore(exp.as_str())
            .try_acquire_id(LONG_LEASE)
            .unwrap()
            .is_none()
    );
    workers.release(&id).unwrap();
    assert_eq!(workers.available_permits().unwrap(), 1);
    let held = workers.acquire_many(1, None).unwrap();
    assert!(
        workers
            .update_lease_time(&held.ids()[0], LONG_LEASE)
            .unwrap()
    );
    assert_eq!(workers.acquired_permits().unwrap(), 1);
    workers.set_permits(2).unwrap();
    assert_eq!(held.release().unwrap(), 1);
    assert_eq!(workers.available_permits().unwrap(), 2);

    // Count-down latch: reaching zero wakes a waiter in another client.
    let latch = unique_name("acl:latch");
    assert!(a.count_down_latch(latch.as_str()).try_set_count(1).unwrap());
    let waiting = b.count_down_latch(latch.as_str());
    let opener = thread::spawn(move || waiting.wait_for(STUCK).unwrap());
    thread::sleep(SETTLE);
    a.count_down_latch(latch.as_str()).count_down().unwrap();
    assert!(opener.join().unwrap(), "the latch waiter was not woken");
    assert_eq!(a.count_down_latch(latch.as_str()).count().unwrap(), 0);
    assert!(a.count_down_latch(latch.as_str()).try_set_count(2).unwrap());
    assert!(a.count_down_latch(latch.as_str()).delete().unwrap());

    // Barrier (redisync only): the second arrival releases the first, in
    // another client, on the barrier's own channel.
    let barrier = unique_name("acl:barrier");
    let waiting = b.barrier(barrier.as_str(), 2);
    let meeting = thread::spawn(move || waiting.wait_for(STUCK).unwrap());
    thread::sleep(SETTLE);
    assert_eq!(a.barrier(barrier.as_str(), 2).wait().unwrap(), 0);
    assert_eq!(
        meeting.join().unwrap(),
        Some(0),
        "the barrier waiter was not woken"
    );

    drop((a, b, fast));
    let refusals = acl_refusals(&mut admin);
    assert!(
        refusals.is_empty(),
        "the server refused the library's commands: {refusals:#?}"
    );
}

/// A command the ACL refuses, at top level or inside a script, is a clear
/// `Backend` error.
#[test]
fn acl_refusal_is_a_clear_error() {
    let server = TestServer::start();
    let mut admin = server.connection();
    create_acl_user(&mut admin, None);
    let client = quiet(Client::builder().redis_url(acl_url(server.port(), ACL_PASSWORD)))
        .build()
        .unwrap();
    let lock = client.lock(unique_name("acl:refused"));
    // hincrby is called by the acquire script; evalsha runs every script.
    for revoked in ["-hincrby", "-evalsha"] {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(ACL_USER)
            .arg(revoked)
            .query::<()>(&mut admin)
            .unwrap();
        let err = lock.try_lock().unwrap_err();
        assert!(err.is_backend() && !err.is_connection_error(), "{err:?}");
        assert!(
            err.to_string()
                .contains("permission denied by the server's ACL"),
            "{revoked}: {err}"
        );
        assert_no_password("the error", &all_error_text(&err));
    }
}

#[test]
fn wrong_acl_password_is_a_clear_error_without_the_password() {
    let server = TestServer::start();
    create_acl_user(&mut server.connection(), None);
    for url in [
        acl_url(server.port(), WRONG_PASSWORD),
        format!(
            "redis://nobody:{WRONG_PASSWORD}@127.0.0.1:{}/",
            server.port()
        ),
    ] {
        let started = Instant::now();
        let err = quiet(Client::builder().redis_url(url)).build().unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(err.is_backend(), "{err:?}");
        assert!(!err.is_connection_error(), "retrying cannot help: {err:?}");
        let text = all_error_text(&err);
        assert!(
            err.to_string().contains("authentication failed"),
            "the message should say so: {err}"
        );
        assert!(
            err.to_string()
                .contains(&format!("127.0.0.1:{}", server.port())),
            "the message should name the server: {err}"
        );
        assert_no_password("the error", &text);
    }
}

#[test]
fn unreachable_server_error_does_not_show_the_password() {
    let port = free_port();
    let err = quiet(Client::builder().redis_url(format!(
        "redis://{ACL_USER}:{UNREACHABLE_PASSWORD}@127.0.0.1:{port}/"
    )))
    .build()
    .unwrap_err();
    assert!(err.is_connection_error(), "{err:?}");
    assert_no_password("the error", &all_error_text(&err));
}

#[test]
fn malformed_url_error_does_not_show_the_password() {
    for url in [
        format!("redis://{ACL_USER}:{WRONG_PASSWORD}@127.0.0.1:99999/"),
        format!("redis://{ACL_USER}:{WRONG_PASSWORD}@127.0.0.1:6379/not-a-db"),
        format!("nosuchscheme://{ACL_USER}:{WRONG_PASSWORD}@127.0.0.1/"),
    ] {
        let err = Client::open(&url).unwrap_err();
        assert!(err.is_invalid_argument(), "{err:?}");
        assert_no_password("the error", &all_error_text(&err));
    }
}

#[test]
fn debug_output_never_shows_the_password() {
    let server = TestServer::start();
    create_acl_user(&mut server.connection(), None);
    let url = acl_url(server.port(), ACL_PASSWORD);
    let builder = Client::builder().redis_url(&url);
    assert_no_password(
        "ClientBuilder's Debug",
        &format!("{builder:?} {builder:#?}"),
    );
    let client = builder.build().unwrap();
    assert_no_password("Client's Debug", &format!("{client:?} {client:#?}"));
    let options = redisync::RedisOptions::default().pool_size(2);
    let backend = redisync::RedisBackend::open_with(&url, options.clone()).unwrap();
    assert_no_password(
        "RedisBackend's Debug",
        &format!("{backend:?} {backend:#?} {options:?}"),
    );
    assert_eq!(backend.address(), format!("127.0.0.1:{}/0", server.port()));
    assert!(!backend.address().contains(ACL_USER));
    // And the client works.
    let guard = client.lock(unique_name("acl:debug")).lock().unwrap();
    guard.unlock().unwrap();
}

/// A logger that keeps every record of the test binary.
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let line = format!("{} {}: {}", record.level(), record.target(), record.args());
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(line);
    }
    fn flush(&self) {}
}

fn captured_logs() -> &'static Capture {
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        log::set_logger(capture).expect("no other logger in this test binary");
        log::set_max_level(log::LevelFilter::Trace);
        capture
    })
}

/// The password is changed under a client that holds a lock: renewals and
/// the pub/sub reconnect fail to authenticate, and what the library (the
/// default `LoggingEventHandler`) and r2d2 log about it shows no password.
#[test]
fn log_output_never_shows_the_password() {
    let logs = captured_logs();
    let server = TestServer::start();
    let mut admin = server.connection();
    create_acl_user(&mut admin, None);
    let client = Client::builder()
        .redis_url(acl_url(server.port(), ACL_PASSWORD))
        .connection_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(500))
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    let name = unique_name("acl:logs");
    let guard = client.lock(name.as_str()).lock().unwrap();
    // A waiter keeps the pub/sub connection busy.
    let waiting = client.lock(name.as_str());
    let waiter = thread::spawn(move || waiting.try_lock_for(Duration::from_secs(3)).map(drop));
    thread::sleep(SETTLE);
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg(ACL_USER)
        .arg("resetpass")
        .arg(format!(">{CHANGED_PASSWORD}"))
        .query::<()>(&mut admin)
        .unwrap();
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("USER")
        .arg(ACL_USER)
        .query::<i64>(&mut admin)
        .unwrap();
    let deadline = Instant::now() + STUCK;
    let saw_auth_failure =
        loop {
            let seen =
                logs.0.lock().unwrap().iter().any(|line| {
                    line.contains("authentication failed") && line.contains("redisync")
                });
            if seen || Instant::now() > deadline {
                break seen;
            }
            thread::sleep(Duration::from_millis(50));
        };
    let _ = waiter.join().unwrap();
    drop(guard);
    drop(client);
    let lines = logs.0.lock().unwrap().clone();
    assert!(
        saw_auth_failure,
        "expected a logged authentication failure; got:\n{}",
        lines.join("\n")
    );
    for line in &lines {
        assert_no_password("a log record", line);
    }
}

// ---------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------

#[cfg(not(feature = "tls"))]
#[test]
fn rediss_url_needs_the_tls_feature() {
    let err = Client::open(&format!(
        "rediss://{ACL_USER}:{WRONG_PASSWORD}@127.0.0.1:6380/"
    ))
    .unwrap_err();
    assert!(err.is_invalid_argument(), "{err:?}");
    assert!(err.to_string().contains("`tls` feature"), "{err}");
    assert_no_password("the error", &all_error_text(&err));
}

#[cfg(feature = "tls")]
mod tls {
    use super::*;

    use common::tls::{Pki, TlsServer, other_ca, pki};
    use rcgen::KeyPair;

    /// `rediss://` as the documented ACL user with `password`, to the TLS port.
    fn tls_url(tls: &TlsServer, password: &str) -> String {
        format!("rediss://{ACL_USER}:{password}@127.0.0.1:{}/", tls.tls_port)
    }

    fn tls_client(url: &str, pki: &Pki) -> redisync::ClientBuilder {
        quiet(Client::builder().redis_url(url)).tls_root_certificate(pki.ca.as_bytes())
    }

    /// Exclusion, pub/sub wake-up and watchdog renewal over `rediss://`,
    /// as the documented ACL user: every connection (pool and pub/sub) goes
    /// to the TLS port, which speaks nothing but TLS.
    #[test]
    fn locks_work_over_tls() {
        let pki = pki();
        let tls = TlsServer::start(&pki, false, &[]);
        create_acl_user(&mut tls.server.connection(), None);
        let url = tls_url(&tls, ACL_PASSWORD);
        let a = tls_client(&url, &pki).build().unwrap();
        let b = tls_client(&url, &pki).build().unwrap();
        let fast = tls_client(&url, &pki)
            .watchdog_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        assert_no_password("Client's Debug", &format!("{a:?}"));

        assert_mutual_exclusion(&[a.clone(), b.clone()], &unique_name("tls:mutex"));
        assert_woken_by_pubsub(&a, &b, &unique_name("tls:wake"));
        assert_watchdog_renews(&fast, &b, &unique_name("tls:watchdog"));

        // The clients really talk TLS: the server counts their connections
        // on the TLS port (a plain client is refused there).
        let mut admin = tls.server.connection();
        let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
        let tls_port = format!("laddr=127.0.0.1:{}", tls.tls_port);
        let over_tls = clients
            .lines()
            .filter(|line| line.contains(&tls_port) && line.contains(&format!("user={ACL_USER}")))
            .count();
        assert!(
            over_tls >= 3,
            "expected the clients' connections on the TLS port:\n{clients}"
        );
        let subscribed = clients
            .lines()
            .filter(|line| {
                line.contains(&tls_port)
                    && line
                        .split_whitespace()
                        .any(|field| field.starts_with("sub=") && field != "sub=0")
            })
            .count();
        assert!(
            subscribed >= 1,
            "expected a pub/sub connection on the TLS port:\n{clients}"
        );
        let plain = Client::builder()
            .redis_url(format!(
                "redis://{ACL_USER}:{ACL_PASSWORD}@127.0.0.1:{}/",
                tls.tls_port
            ))
            .connection_timeout(Duration::from_secs(2))
            .build()
            .unwrap_err();
        assert!(plain.is_backend(), "{plain:?}");
        assert!(
            plain.to_string().contains("use a rediss:// URL"),
            "a plain URL at a TLS port says what to do: {plain}"
        );
        assert_no_password("the error", &all_error_text(&plain));
    }

    /// A client that does not trust the server's CA fails at once with a
    /// message about the certificate; it never hangs.
    #[test]
    fn untrusted_server_certificate_is_a_clear_error() {
        let pki = pki();
        let tls = TlsServer::start(&pki, false, &[]);
        create_acl_user(&mut tls.server.connection(), None);
        let url = tls_url(&tls, ACL_PASSWORD);
        let other = other_ca();
        let builders = [
            // The system's roots do not include our CA.
            quiet(Client::builder().redis_url(&url)),
            // Nor does another CA.
            quiet(Client::builder().redis_url(&url)).tls_root_certificate(other.as_bytes()),
        ];
        for builder in builders {
            let started = Instant::now();
            let err = builder.build().unwrap_err();
            assert!(started.elapsed() < Duration::from_secs(5), "took too long");
            assert!(err.is_backend(), "{err:?}");
            assert!(
                err.to_string().contains("certificate"),
                "the message should name the certificate: {err}"
            );
            assert_no_password("the error", &all_error_text(&err));
        }
    }

    /// Without its certificate a client is refused by a server that requires
    /// one; with it, it locks.
    #[test]
    fn mutual_tls_client_certificate() {
        let pki = pki();
        let tls = TlsServer::start(&pki, true, &[]);
        create_acl_user(&mut tls.server.connection(), None);
        let url = tls_url(&tls, ACL_PASSWORD);
        let started = Instant::now();
        let refused = tls_client(&url, &pki).build().unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "took too long");
        assert!(refused.is_backend(), "{refused:?}");
        assert_no_password("the error", &all_error_text(&refused));

        let builder = tls_client(&url, &pki)
            .tls_client_certificate(pki.client_cert.as_bytes(), pki.client_key.as_bytes());
        let shown = format!("{builder:?}");
        assert!(!shown.contains("PRIVATE KEY"), "the key leaked: {shown}");
        assert_no_password("ClientBuilder's Debug", &shown);
        let a = builder.build().unwrap();
        let b = tls_client(&url, &pki)
            .tls_client_certificate(pki.client_cert.as_bytes(), pki.client_key.as_bytes())
            .build()
            .unwrap();
        assert_woken_by_pubsub(&a, &b, &unique_name("mtls:wake"));
    }

    #[test]
    fn wrong_password_over_tls_is_a_clear_error() {
        let pki = pki();
        let tls = TlsServer::start(&pki, false, &[]);
        create_acl_user(&mut tls.server.connection(), None);
        let err = tls_client(&tls_url(&tls, WRONG_PASSWORD), &pki)
            .build()
            .unwrap_err();
        assert!(err.is_backend() && !err.is_connection_error(), "{err:?}");
        assert!(err.to_string().contains("authentication failed"), "{err}");
        assert_no_password("the error", &all_error_text(&err));
    }

    #[test]
    fn unreachable_tls_server_error_does_not_show_the_password() {
        let pki = pki();
        let url = format!(
            "rediss://{ACL_USER}:{UNREACHABLE_PASSWORD}@127.0.0.1:{}/",
            free_port()
        );
        let err = tls_client(&url, &pki).build().unwrap_err();
        assert!(err.is_connection_error(), "{err:?}");
        assert_no_password("the error", &all_error_text(&err));
    }

    #[test]
    fn bad_tls_settings_are_invalid_arguments() {
        let pki = pki();
        let key = pki.client_key.as_str();
        let cases: Vec<(redisync::ClientBuilder, &str)> = vec![
            (
                Client::builder()
                    .redis_url("rediss://127.0.0.1:1/")
                    .tls_root_certificate("not a certificate"),
                "tls_root_certificate",
            ),
            (
                Client::builder()
                    .redis_url("redis://127.0.0.1:1/")
                    .tls_root_certificate(pki.ca.as_bytes()),
                "not rediss://",
            ),
            (
                Client::builder()
                    .redis_url("rediss://127.0.0.1:1/")
                    .tls_root_certificate(pki.ca.as_bytes())
                    .tls_client_certificate(pki.client_cert.as_bytes(), "not a key"),
                "private key",
            ),
            (
                // A key that does not belong to the certificate.
                Client::builder()
                    .redis_url("rediss://127.0.0.1:1/")
                    .tls_root_certificate(pki.ca.as_bytes())
                    .tls_client_certificate(
                        pki.client_cert.as_bytes(),
                        KeyPair::generate().unwrap().serialize_pem(),
                    ),
                "tls_client_certificate",
            ),
            (
                Client::builder().redis_url("rediss://127.0.0.1:1/#insecure"),
                "#insecure",
            ),
        ];
        for (builder, expected) in cases {
            let err = builder.build().unwrap_err();
            assert!(err.is_invalid_argument(), "{err:?}");
            assert!(err.to_string().contains(expected), "{expected}: {err}");
            let text = all_error_text(&err);
            assert!(!text.contains("PRIVATE KEY"), "the key leaked: {text}");
            assert!(!text.contains(&key[40..80]), "the key leaked: {text}");
        }
    }
}

/// Data of another type under a primitive's name (a WRONGTYPE reply, which
/// names nothing) is an error naming the key and the Redis type found.
#[test]
fn wrongtype_names_the_key_and_the_type_found() {
    let server = TestServer::start();
    let name = unique_name("wrongtype");
    redis::cmd("RPUSH")
        .arg(&name)
        .arg("x")
        .query::<()>(&mut server.connection())
        .unwrap();
    let client = Client::open(&server.url()).unwrap();
    let err = client.lock(name.as_str()).try_lock().unwrap_err();
    assert!(err.is_protocol_error(), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("WRONGTYPE"), "{text}");
    assert!(
        text.contains(&format!("{name:?} holds a Redis list")),
        "{text}"
    );
}

/// A URL with a scheme Redis does not use names the schemes it accepts,
/// and nothing of the `redis` crate's own error kinds.
#[test]
fn a_bad_url_names_the_accepted_schemes() {
    let err = Client::open("http://127.0.0.1:7400").unwrap_err();
    assert!(err.is_invalid_argument(), "{err:?}");
    let text = err.to_string();
    for scheme in ["redis://", "rediss://", "unix://", "redis+unix://"] {
        assert!(text.contains(scheme), "{text}");
    }
    assert!(text.contains("http://"), "{text}");
    assert!(!text.contains("InvalidClientConfig"), "{text}");
    let err = Client::open("redis://127.0.0.1:7400/not-a-db").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("database"), "{text}");
    assert!(!text.contains("InvalidClientConfig"), "{text}");
}
