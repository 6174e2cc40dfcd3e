//! Faults injected into a real `redis-server`: flushed script cache, a server
//! restart, killed pub/sub connections; plus a check that the scripts' hashes
//! are the ones the server computes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::keys;
use common::{TestServer, numsub, pttl, unique_name, wait_until};
use redisync::{Client, Error, NopEventHandler};

const LUA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");

/// The SHA-1 the client sends with EVALSHA for `lua/<file>`: the file,
/// after `lua/renew_prelude.lua` when it checks attempt records (the
/// renewals) or `lua/op_record_prelude.lua` when it acts once by its op
/// record (force releases, deletes), after `lua/args_prelude.lua` (the argument checks) when it
/// takes numbers in ARGV, and after `lua/window_prelude.lua` when it writes, as
/// `src/ops/` defines it.
fn sha(file: &str) -> String {
    let read = |file: &str| {
        let path = Path::new(LUA_DIR).join(file);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    };
    let mut source = read(file);
    // The renewals' record check (issue 32) comes after the argument checks.
    if source.contains("record_taken(") {
        source = read("renew_prelude.lua") + &source;
    }
    // A write that acts once by its op record (issue 32): its helpers come
    // after the argument checks, which they use.
    if source.contains("op_replay(") {
        source = read("op_record_prelude.lua") + &source;
    }
    // A count's exact checks (their own prelude) after the durations'.
    if source.contains("count_checks()") {
        source = read("count_prelude.lua") + &source;
    }
    if source.contains("bad_bounded(") || source.contains("count_checks()") {
        source = read("args_prelude.lua") + &source;
    }
    // Every script that writes starts with its window check (issue 21).
    const READS: [&str; 6] = [
        "counter_get.lua",
        "expirable_available.lua",
        "expirable_acquired.lua",
        "inspect.lua",
        "lock_state.lua",
        "rw_lock_state.lua",
    ];
    if !READS.contains(&file) {
        source = read("window_prelude.lua") + &source;
    }
    redis::Script::new(&source).get_hash().to_owned()
}

fn script_flush(conn: &mut redis::Connection) {
    redis::cmd("SCRIPT").arg("FLUSH").query::<()>(conn).unwrap();
}

/// Whether the server's script cache holds `sha`.
fn cached(conn: &mut redis::Connection, sha: &str) -> bool {
    let found: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(sha)
        .query(conn)
        .unwrap();
    found == [1]
}

#[test]
fn script_flush_mid_run_is_harmless() {
    // Renewed every second: only a stall over 2 s could lose the hold (a
    // 1.2 s watchdog, renewed every 400 ms, lost another test's hold on a
    // loaded two-vCPU machine).
    const WATCHDOG: Duration = Duration::from_secs(3);
    let server = TestServer::start();
    let mut raw = server.connection();
    let name = unique_name("faults:flush");
    let client = Client::builder()
        .redis_url(server.url())
        .watchdog_timeout(WATCHDOG)
        .build()
        .unwrap();
    let lock = client.lock(name.as_str());
    let [acquire, renew, release, force_release, state] = [
        "lock_acquire.lua",
        // One hold with its attempt's record: the single renewal script.
        "lock_renew.lua",
        "lock_release.lua",
        "lock_force_release.lua",
        "lock_state.lua",
    ]
    .map(sha);

    lock.lock().unwrap().unlock().unwrap();
    assert!(cached(&mut raw, &acquire) && cached(&mut raw, &release));

    // Each operation after a flush gets NOSCRIPT, reloads its script and
    // still answers correctly.
    script_flush(&mut raw);
    assert!(!cached(&mut raw, &acquire), "SCRIPT FLUSH did not flush");
    let outer = lock.lock().unwrap();
    assert!(
        cached(&mut raw, &acquire),
        "lock() did not reload its script"
    );

    script_flush(&mut raw);
    let inner = lock.try_lock().unwrap().expect("reentrant try_lock");
    assert!(cached(&mut raw, &acquire));

    script_flush(&mut raw);
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert!(cached(&mut raw, &state), "hold_count() did not reload");

    script_flush(&mut raw);
    assert!(lock.is_locked().unwrap());
    assert!(cached(&mut raw, &state), "is_locked() did not reload");

    script_flush(&mut raw);
    let ttl = lock.remaining_ttl().unwrap().expect("a TTL");
    assert!(ttl <= WATCHDOG, "TTL {ttl:?} above the watchdog timeout");
    assert!(cached(&mut raw, &state), "remaining_ttl() did not reload");

    script_flush(&mut raw);
    inner.unlock().unwrap();
    assert!(cached(&mut raw, &release), "unlock() did not reload");
    assert_eq!(lock.hold_count().unwrap(), 1);

    // The watchdog: flush before each renewal; each renewal reloads its
    // script and keeps the lock alive, well past the watchdog timeout.
    let held_since = Instant::now();
    let mut renewals_after_flush = 0;
    while renewals_after_flush < 3 || held_since.elapsed() < WATCHDOG * 2 {
        assert!(
            renewals_after_flush < 30,
            "watchdog loop did not finish in {:?}",
            held_since.elapsed()
        );
        script_flush(&mut raw);
        wait_until(
            "a watchdog renewal after SCRIPT FLUSH",
            Duration::from_secs(10),
            || cached(&mut raw, &renew),
        );
        renewals_after_flush += 1;
        let ttl = pttl(&mut raw, &name);
        assert!(
            ttl > 0,
            "lock gone or without TTL after {renewals_after_flush} renewals: PTTL {ttl}"
        );
        assert!(!outer.is_lost(), "watchdog reported the lock lost");
    }
    assert_eq!(lock.hold_count().unwrap(), 1, "still held after renewals");

    script_flush(&mut raw);
    outer.unlock().unwrap();
    assert!(cached(&mut raw, &release));
    assert!(!lock.is_locked().unwrap());

    // force_unlock after a flush.
    let guard = lock.lock().unwrap();
    script_flush(&mut raw);
    assert!(lock.force_unlock().unwrap(), "force_unlock of a held lock");
    assert!(
        cached(&mut raw, &force_release),
        "force_unlock() did not reload"
    );
    assert!(guard.unlock().unwrap_err().is_not_held());
    script_flush(&mut raw);
    assert!(!lock.force_unlock().unwrap(), "force_unlock of a free lock");

    // A waiter on another client, with flushes on both sides of its wait.
    let other = Client::builder().redis_url(server.url()).build().unwrap();
    let held = lock.lock_with_lease(Duration::from_secs(30)).unwrap();
    script_flush(&mut raw);
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let lock = other.lock(name.as_str());
        thread::spawn(move || {
            let got = lock.try_lock_for(Duration::from_secs(20)).unwrap();
            tx.send(Instant::now()).unwrap();
            got.expect("the waiter timed out").unlock().unwrap();
        })
    };
    let channel = keys::lock_channel(&name);
    wait_until("the waiter subscribed", Duration::from_secs(10), || {
        numsub(&mut raw, &channel) == 1
    });
    script_flush(&mut raw);
    let released = Instant::now();
    held.unlock().unwrap();
    let woke = rx
        .recv_timeout(Duration::from_secs(25))
        .expect("waiter never returned");
    waiter.join().unwrap();
    let latency = woke.duration_since(released);
    assert!(
        latency < Duration::from_secs(5),
        "waiter took {latency:?} (lease 30 s): the unlock did not wake it"
    );
}

/// What a waiter thread's `lock()` returned (a guard cannot leave its thread).
#[derive(Debug)]
struct Outcome {
    acquired: bool,
    connection_error: bool,
    message: String,
    returned_at: Instant,
}

/// Asserts `result` is a clear connection error that came back in time.
fn assert_clear_connection_error<T>(
    what: &str,
    result: Result<T, Error>,
    took: Duration,
    port: u16,
) {
    const BOUND: Duration = Duration::from_secs(15);
    let Err(err) = result else {
        panic!("{what} succeeded while redis-server was stopped")
    };
    let message = err.to_string();
    assert!(
        err.is_connection_error(),
        "{what}: expected a connection error, got {err:?}"
    );
    assert!(
        message.contains("Redis") && message.contains(&format!("127.0.0.1:{port}")),
        "{what}: the message should name Redis and its address: {message:?}"
    );
    assert!(
        took < BOUND,
        "{what} took {took:?} to fail (bound {BOUND:?})"
    );
    eprintln!("restart: {what} failed in {took:?}: {message}");
}

#[test]
fn restarting_redis_fails_calls_clearly_then_recovers() {
    const WATCHDOG: Duration = Duration::from_secs(2);
    let mut server = TestServer::start();
    let port = server.port();
    let name = unique_name("faults:restart");
    let build = || {
        Client::builder()
            .redis_url(server.url())
            .connection_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_secs(1))
            .watchdog_timeout(WATCHDOG)
            // Lost locks and failed unlocks are expected here.
            .event_handler(Arc::new(NopEventHandler))
            .build()
            .unwrap()
    };
    let client = build();
    let other = build();
    let lock = client.lock(name.as_str());
    lock.try_lock()
        .unwrap()
        .expect("free lock")
        .unlock()
        .unwrap();

    // A holder (watchdog) and a waiter in lock() on another client, both
    // across the stop.
    let held = lock.lock().unwrap();
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let lock = other.lock(name.as_str());
        thread::spawn(move || {
            let result = lock.lock();
            let outcome = match &result {
                Ok(_) => Outcome {
                    acquired: true,
                    connection_error: false,
                    message: String::new(),
                    returned_at: Instant::now(),
                },
                Err(err) => Outcome {
                    acquired: false,
                    connection_error: err.is_connection_error(),
                    message: err.to_string(),
                    returned_at: Instant::now(),
                },
            };
            tx.send(outcome).unwrap();
            drop(result);
        })
    };
    {
        let mut raw = server.connection();
        let channel = keys::lock_channel(&name);
        wait_until("the waiter subscribed", Duration::from_secs(10), || {
            numsub(&mut raw, &channel) == 1
        });
    }
    thread::sleep(Duration::from_millis(100));
    assert!(
        rx.try_recv().is_err(),
        "the waiter returned while the lock was held"
    );

    server.stop();
    let stopped_at = Instant::now();

    // Every call fails promptly with a clear connection error; none panics
    // or hangs.
    let start = Instant::now();
    let result = lock.try_lock();
    assert_clear_connection_error("try_lock()", result.map(drop), start.elapsed(), port);
    let start = Instant::now();
    let result = lock.try_lock();
    assert_clear_connection_error(
        "a second try_lock()",
        result.map(drop),
        start.elapsed(),
        port,
    );
    let start = Instant::now();
    let result = lock.is_locked();
    assert_clear_connection_error("is_locked()", result, start.elapsed(), port);
    let start = Instant::now();
    let result = other.lock(name.as_str()).lock();
    assert_clear_connection_error("lock()", result.map(drop), start.elapsed(), port);
    let start = Instant::now();
    let result = lock.force_unlock();
    assert_clear_connection_error("force_unlock()", result, start.elapsed(), port);

    // The waiter parked in lock() is woken by the pub/sub failure and gets
    // the same kind of error instead of sleeping out the lease.
    let outcome = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("the waiter in lock() hung while redis-server was stopped");
    waiter.join().unwrap();
    assert!(
        !outcome.acquired && outcome.connection_error,
        "waiter: expected a connection error, got {outcome:?}"
    );
    assert!(
        outcome.message.contains(&format!("127.0.0.1:{port}")),
        "waiter: unclear message {outcome:?}"
    );
    let waiter_failed_after = outcome.returned_at.saturating_duration_since(stopped_at);
    assert!(
        waiter_failed_after < Duration::from_secs(15),
        "the waiter took {waiter_failed_after:?} to fail after the stop"
    );
    eprintln!(
        "restart: waiter failed {waiter_failed_after:?} after the stop: {}",
        outcome.message
    );

    server.restart();

    // Recovery: within a bounded time calls work again.
    let deadline = Instant::now() + Duration::from_secs(10);
    let guard = loop {
        match other.lock(name.as_str()).try_lock() {
            Ok(Some(guard)) => break guard,
            Ok(None) => panic!("the restarted (empty) server reports the lock held"),
            Err(err) => {
                assert!(
                    Instant::now() < deadline,
                    "still failing 10 s after the restart: {err}"
                );
                assert!(err.is_connection_error(), "unexpected error {err:?}");
                thread::sleep(Duration::from_millis(50));
            }
        }
    };
    // The restart lost the old holder's key: its watchdog finds out.
    wait_until(
        "the pre-restart guard reports the lock lost",
        Duration::from_secs(10),
        || held.is_lost(),
    );
    assert!(held.unlock().unwrap_err().is_not_held());

    // Pub/sub recovered too: a waiter on the first client is woken by the
    // other client's unlock, well before the holder's 30 s TTL.
    guard.unlock().unwrap();
    let held = other
        .lock(name.as_str())
        .lock_with_lease(Duration::from_secs(30))
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let lock = lock.clone();
        thread::spawn(move || {
            let got = lock.try_lock_for(Duration::from_secs(20));
            let acquired_at = Instant::now();
            let ok = matches!(&got, Ok(Some(_)));
            tx.send((ok, acquired_at, format!("{got:?}"))).unwrap();
        })
    };
    {
        let mut raw = server.connection();
        let channel = keys::lock_channel(&name);
        wait_until(
            "the waiter subscribed after the restart",
            Duration::from_secs(10),
            || numsub(&mut raw, &channel) >= 1,
        );
    }
    let released = Instant::now();
    held.unlock().unwrap();
    let (ok, acquired_at, got) = rx
        .recv_timeout(Duration::from_secs(25))
        .expect("waiter never returned");
    waiter.join().unwrap();
    assert!(ok, "waiter after the restart: {got}");
    let latency = acquired_at.duration_since(released);
    assert!(
        latency < Duration::from_secs(5),
        "waiter took {latency:?} after the unlock (lease 30 s)"
    );
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn waiter_recovers_after_pubsub_connection_killed_repeatedly() {
    const LEASE: Duration = Duration::from_secs(30);
    const CLIENTS: usize = 2;
    const THREADS_PER_CLIENT: usize = 2;
    const KILLS: usize = 3;
    let server = TestServer::start();
    let mut raw = server.connection();
    let name = unique_name("faults:pubsub");
    let channel = keys::lock_channel(&name);
    let holder = Client::open(&server.url()).unwrap();
    let held = holder.lock(name.as_str()).lock_with_lease(LEASE).unwrap();

    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    for c in 0..CLIENTS {
        let client = Client::open(&server.url()).unwrap();
        for t in 0..THREADS_PER_CLIENT {
            let lock = client.lock(name.as_str());
            let tx = tx.clone();
            threads.push(thread::spawn(move || {
                let got = lock.try_lock_for(LEASE - Duration::from_secs(5));
                let at = Instant::now();
                let ok = matches!(&got, Ok(Some(_)));
                let text = format!("{got:?}");
                if let Ok(Some(guard)) = got {
                    thread::sleep(Duration::from_millis(10));
                    guard.unlock().unwrap();
                }
                tx.send((c, t, ok, at, text)).unwrap();
            }));
        }
    }
    drop(tx);
    wait_until(
        "both waiting clients subscribed",
        Duration::from_secs(10),
        || numsub(&mut raw, &channel) == i64::try_from(CLIENTS).unwrap(),
    );

    for round in 0..KILLS {
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut raw)
            .unwrap();
        assert!(
            killed >= i64::try_from(CLIENTS).unwrap(),
            "round {round}: killed {killed} pub/sub connections"
        );
        wait_until(
            "the waiting clients resubscribed",
            Duration::from_secs(10),
            || numsub(&mut raw, &channel) == i64::try_from(CLIENTS).unwrap(),
        );
        thread::sleep(Duration::from_millis(50));
        assert!(
            rx.try_recv().is_err(),
            "round {round}: a waiter returned while the lock was held"
        );
    }

    // Kill once more and unlock at once: the unlock message is likely lost
    // with the connection, so the reconnect itself must make them retry.
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query::<i64>(&mut raw)
        .unwrap();
    let released = Instant::now();
    held.unlock().unwrap();

    let mut acquired = 0;
    for _ in 0..CLIENTS * THREADS_PER_CLIENT {
        let (c, t, ok, at, text) = rx.recv_timeout(LEASE).expect("a waiter never returned");
        assert!(ok, "waiter {c}/{t} did not get the lock: {text}");
        let after = at.duration_since(released);
        assert!(
            after < Duration::from_secs(10),
            "waiter {c}/{t} got the lock {after:?} after the unlock (lease {LEASE:?})"
        );
        acquired += 1;
    }
    for handle in threads {
        handle.join().unwrap();
    }
    assert_eq!(acquired, CLIENTS * THREADS_PER_CLIENT);
    assert!(!holder.lock(name.as_str()).is_locked().unwrap());
}

#[test]
fn script_hashes_match_script_load() {
    let server = TestServer::start();
    let mut raw = server.connection();
    let mut files: Vec<_> = std::fs::read_dir(LUA_DIR)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "lua"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "expected the lock's five scripts in {LUA_DIR}, found {files:?}"
    );
    for path in files {
        let source = std::fs::read_to_string(&path).unwrap();
        let ours = redis::Script::new(&source).get_hash().to_owned();
        let server_sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(&source)
            .query(&mut raw)
            .unwrap_or_else(|e| panic!("SCRIPT LOAD {}: {e}", path.display()));
        assert_eq!(
            server_sha,
            ours,
            "{}: the server's SHA-1 differs from the one EVALSHA sends",
            path.display()
        );
        assert!(cached(&mut raw, &ours));
    }
}

/// Regression: the watchdog once kept one renewal per key per client,
/// renewing only the first registered holder. When a thread's lock was lost
/// (force-unlocked, or expired) while its guard still lived and another
/// thread of the same client then took the free lock, the new holder joined
/// the stale watch: lost at once, or its lease ran out after one watchdog
/// timeout while its guard lived. Watches are now per (key, holder).
#[test]
fn watchdog_renews_a_thread_that_takes_a_lock_another_thread_of_the_client_lost() {
    // Renewed every second: only a stall over 2 s loses it (a 1.2 s
    // watchdog, renewed every 400 ms, lost it on a loaded two-vCPU machine).
    const WATCHDOG: Duration = Duration::from_secs(3);
    let server = TestServer::start();
    let client = Client::builder()
        .redis_url(server.url())
        .watchdog_timeout(WATCHDOG)
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .unwrap();
    // Before and after the first holder's watchdog noticed its loss.
    for wait_for_detection in [true, false] {
        let lock = client.lock(unique_name("faults:stale-watch"));
        let (held_tx, held_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let first = {
            let lock = lock.clone();
            thread::spawn(move || {
                let guard = lock.lock().unwrap();
                held_tx.send(()).unwrap();
                // Keep the (soon lost) guard alive while the other thread works.
                let _ = done_rx.recv_timeout(Duration::from_secs(30));
                drop(guard);
            })
        };
        held_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(lock.force_unlock().unwrap());
        if wait_for_detection {
            thread::sleep(WATCHDOG);
        }

        let guard = lock.lock().unwrap();
        let lost_at_once = guard.is_lost();
        // The old bug let the lease run out after one watchdog timeout.
        thread::sleep(WATCHDOG * 2);
        let still_held = lock.is_held_by_current_thread().unwrap();
        let lost_later = guard.is_lost();
        drop(guard);
        done_tx.send(()).unwrap();
        first.join().unwrap();
        assert!(
            !lost_at_once && still_held && !lost_later,
            "wait_for_detection={wait_for_detection}: new holder's guard lost at once: \
             {lost_at_once}; still held after 2x the watchdog timeout: {still_held}; \
             lost then: {lost_later}"
        );
    }
}

/// A stopped server refuses connections: once a call has found it down,
/// later calls fail at once instead of waiting the pool's (long) connection
/// timeout, and calls work again as soon as the server is back.
#[test]
fn a_refusing_server_fails_calls_fast_despite_a_long_connection_timeout() {
    const LONG: Duration = Duration::from_secs(20);
    let mut server = TestServer::start();
    let client = Client::builder()
        .redis_url(server.url())
        .connection_timeout(LONG)
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .unwrap();
    let lock = client.lock(unique_name("faults:refusing").as_str());
    assert!(!lock.is_locked().unwrap());
    server.stop();

    // The first call may meet a pooled connection that only now turns out
    // dead; every call fails well inside the connection timeout.
    let started = Instant::now();
    for attempt in 0..20 {
        let call = Instant::now();
        let err = lock.try_lock().map(drop).unwrap_err();
        assert!(err.is_connection_error(), "attempt {attempt}: {err:?}");
        assert!(
            call.elapsed() < Duration::from_secs(2),
            "attempt {attempt} took {:?} with the server down",
            call.elapsed()
        );
    }
    assert!(
        started.elapsed() < LONG,
        "20 failing calls took {:?}",
        started.elapsed()
    );

    server.restart();
    wait_until(
        "calls work again after the restart",
        Duration::from_secs(10),
        || lock.try_lock().is_ok_and(|guard| guard.is_some()),
    );
}

/// A hold the store counts but no guard of the thread owns (a release that
/// reached an old master during a failover while the promoted replica kept
/// the hold, simulated with a raw HINCRBY) is released by the thread's
/// outermost unlock. Before, every re-take was a reentry that reset the
/// lease, so a thread that kept using the lock kept it for ever and starved
/// every other client. Inner unlocks leave it alone.
#[test]
fn a_phantom_hold_is_released_by_the_outermost_unlock() {
    let server = TestServer::start();
    let build = || {
        Client::builder()
            .redis_url(server.url())
            .event_handler(Arc::new(NopEventHandler))
            .build()
            .unwrap()
    };
    let (client, other) = (build(), build());
    let name = unique_name("faults:phantom");
    let lock = client.lock(name.as_str());
    let outer = lock.lock().unwrap();
    let mut raw = server.connection();
    let fields = common::hgetall(&mut raw, &name);
    let field = fields.keys().next().expect("the holder's field").clone();
    redis::cmd("HINCRBY")
        .arg(&name)
        .arg(&field)
        .arg(1)
        .query::<i64>(&mut raw)
        .unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);

    // Inner holds come and go without touching the phantom.
    for _ in 0..3 {
        lock.lock().unwrap().unlock().unwrap();
        assert_eq!(lock.hold_count().unwrap(), 2);
    }
    outer.unlock().unwrap();
    assert!(
        !lock.is_locked().unwrap(),
        "the phantom hold survived the outermost unlock"
    );
    let taken = other.lock(name.as_str()).try_lock().unwrap();
    assert!(taken.is_some(), "another client cannot take the freed lock");
}
