//! What one client meets when its connections fail under it, each fault on a
//! real `redis-server` this file starts: connections the server closed
//! (`CLIENT KILL`, idle `timeout`, a restart) cost no call that could have
//! succeeded; a frozen server (SIGSTOP) cannot hold a call past its bound;
//! an acquire that failed leaves no hold behind; a normal unlock never
//! reports a lost lock; errors name what happened and where. The contended,
//! multi-client histories of these faults are in `tests/fault_suite.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{TestServer, all_error_text, hgetall, unique_name, wait_until};
use redisync::{Client, EventHandler, LockLostEvent, NopEventHandler};

/// Counts lost-lock events.
#[derive(Debug, Default)]
struct LostCounter(AtomicUsize);

impl EventHandler for LostCounter {
    fn on_lock_lost(&self, _event: &LockLostEvent) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn client(server: &TestServer) -> Client {
    Client::builder()
        .redis_url(server.url())
        .pool_size(4)
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .unwrap()
}

/// Puts every pooled connection of `client` to use at once, so the pool
/// holds several connections when the fault strikes.
fn fill_pool(client: &Client) {
    std::thread::scope(|scope| {
        for i in 0..4 {
            let client = client.clone();
            scope.spawn(move || {
                let lock = client.lock(unique_name(&format!("fill-{i}")).as_str());
                for _ in 0..20 {
                    lock.lock().unwrap().unlock().unwrap();
                }
            });
        }
    });
}

/// Runs lock/unlock, a state read and a semaphore round `rounds` times and
/// returns every error.
fn workload(client: &Client, rounds: usize) -> Vec<String> {
    let lock = client.lock(unique_name("conn-faults").as_str());
    let mut errors = Vec::new();
    for _ in 0..rounds {
        match lock.lock() {
            Ok(guard) => {
                if let Err(err) = guard.unlock() {
                    errors.push(format!("unlock: {err}"));
                }
            }
            Err(err) => errors.push(format!("lock: {err}")),
        }
        if let Err(err) = lock.is_locked() {
            errors.push(format!("is_locked: {err}"));
        }
    }
    errors
}

#[test]
fn client_kill_type_normal_costs_no_lock_call() {
    let server = TestServer::start();
    let client = client(&server);
    fill_pool(&client);
    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal"])
        .query(&mut server.connection())
        .unwrap();
    assert!(
        killed >= 2,
        "expected pooled connections to kill, killed {killed}"
    );
    let errors = workload(&client, 30);
    assert!(
        errors.is_empty(),
        "calls failed after CLIENT KILL: {errors:?}"
    );
}

#[test]
fn idle_connections_reaped_by_the_server_cost_no_call() {
    let server = TestServer::start();
    let client = client(&server);
    fill_pool(&client);
    let semaphore = client.semaphore(unique_name("reaped-sem").as_str());
    semaphore.try_set_permits(1).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "timeout", "1"])
        .query(&mut server.connection())
        .unwrap();
    // The server reaps connections idle for more than a second on its
    // next cron pass (10 per second).
    std::thread::sleep(Duration::from_millis(2_500));
    let mut errors = workload(&client, 10);
    // Permit-counting calls are never sent twice, yet cost nothing here:
    // an idle connection is checked before it carries a script.
    for _ in 0..10 {
        match semaphore.try_acquire(1) {
            Ok(Some(permit)) => drop(permit),
            Ok(None) => errors.push("semaphore: no permit".into()),
            Err(err) => errors.push(format!("semaphore: {err}")),
        }
    }
    assert!(
        errors.is_empty(),
        "calls failed after idle reaping: {errors:?}"
    );
    assert_eq!(semaphore.available_permits().unwrap(), 1);
}

#[test]
fn a_restart_costs_no_lock_call_once_the_server_answers() {
    let mut server = TestServer::start();
    let client = client(&server);
    fill_pool(&client);
    server.restart();
    let errors = workload(&client, 30);
    assert!(
        errors.is_empty(),
        "calls failed after the restart: {errors:?}"
    );
}

#[test]
fn a_count_changing_call_on_a_killed_connection_says_the_server_closed_it() {
    let server = TestServer::start();
    let client = Client::builder()
        .redis_url(server.url())
        .pool_size(1)
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .unwrap();
    let latch = client.count_down_latch(unique_name("killed-latch").as_str());
    latch.try_set_count(5).unwrap();
    let _: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal"])
        .query(&mut server.connection())
        .unwrap();
    // A count-down must not run twice, so it is not sent again after the
    // server closed its connection; the error says so, with the address.
    match latch.count_down() {
        Ok(()) => {
            // The kill may land before the request is written (a failed
            // write is provably unsent and retried): then it counted once.
            assert_eq!(latch.count().unwrap(), 4);
        }
        Err(err) => {
            let text = all_error_text(&err);
            assert!(err.is_connection_error(), "{err:?}");
            assert!(text.contains("closed the connection"), "{text}");
            assert!(
                text.contains(&format!("127.0.0.1:{}", server.port())),
                "{text}"
            );
            assert!(text.contains("latch count down"), "{text}");
            assert!(latch.count().unwrap() >= 4, "counted twice");
        }
    }
    // The next call is fine.
    latch.count_down().unwrap();
}

#[test]
fn calls_keep_their_bound_while_the_server_is_frozen() {
    let server = TestServer::start();
    let holder = client(&server);
    let waiter = client(&server);
    let name = unique_name("frozen");
    let guard = holder.lock(name.as_str()).lock().unwrap();
    server.pause();
    let frozen = Instant::now();

    let started = Instant::now();
    let result = waiter
        .lock(name.as_str())
        .try_lock_for(Duration::from_millis(100))
        .map(|guard| guard.is_some());
    let took = started.elapsed();
    let err = result.expect_err("a frozen server cannot grant the lock");
    let text = all_error_text(&err);
    assert!(err.is_connection_error(), "{err:?}");
    assert!(text.contains("timed out after"), "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{}", server.port())),
        "{text}"
    );
    assert!(text.contains("lock acquire"), "{text}");
    assert!(
        !text.contains("os error"),
        "the crate's text leaked: {text}"
    );
    // 100 ms asked; each round trip gets at least 100 ms: generous bound.
    assert!(
        took < Duration::from_millis(900),
        "try_lock_for(100ms) took {took:?}"
    );

    // Dropping a guard takes about one response timeout (3 s), then the
    // release goes on in the background.
    let started = Instant::now();
    drop(guard);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "dropping the guard took {took:?}"
    );

    // Building a client keeps to its connection timeout.
    let started = Instant::now();
    let built = Client::builder()
        .redis_url(server.url())
        .connection_timeout(Duration::from_secs(1))
        .event_handler(Arc::new(NopEventHandler))
        .build();
    let took = started.elapsed();
    assert!(built.is_err(), "a frozen server cannot answer PING");
    assert!(took < Duration::from_millis(1_800), "opening took {took:?}");
    assert!(frozen.elapsed() < Duration::from_secs(15));

    server.resume();
    // The background release lands once the server answers: the lock is
    // free well before its 30 s lease would have run out.
    let mut raw = server.connection();
    wait_until(
        "the dropped guard's release lands",
        Duration::from_secs(10),
        || hgetall(&mut raw, &name).is_empty(),
    );
    assert!(waiter.lock(name.as_str()).try_lock().unwrap().is_some());
}

#[test]
fn an_acquire_that_failed_leaves_no_hold_behind() {
    let server = TestServer::start();
    let client = client(&server);
    let name = unique_name("unknown-outcome");
    // Loads the script: an EVALSHA the server does not know would not run.
    client
        .lock(unique_name("warm-up").as_str())
        .lock()
        .unwrap()
        .unlock()
        .unwrap();
    server.pause();
    // The request reaches the frozen server's socket and times out here;
    // the script runs once the server resumes.
    let err = client
        .lock(name.as_str())
        .try_lock_for(Duration::from_millis(150))
        .map(|guard| guard.is_some())
        .expect_err("a frozen server cannot answer");
    assert!(err.is_connection_error(), "{err:?}");
    std::thread::sleep(Duration::from_millis(300));
    server.resume();
    // Whatever order the server runs the late acquire and the background
    // release in, the holder's field is gone soon after, not after the
    // 30 s lease.
    let mut raw = server.connection();
    wait_until(
        "the failed acquire is undone",
        Duration::from_secs(8),
        || hgetall(&mut raw, &name).is_empty(),
    );
    // Still gone a moment later (a late acquire is rechecked too).
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        hgetall(&mut raw, &name).is_empty(),
        "{:?}",
        hgetall(&mut raw, &name)
    );
    // And the thread takes it normally now.
    let guard = client.lock(name.as_str()).try_lock().unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(client.lock(name.as_str()).hold_count().unwrap(), 1);
    guard.unlock().unwrap();
}

#[test]
fn normal_unlocks_never_report_a_lost_lock_and_a_real_loss_does() {
    let server = TestServer::start();
    let lost = Arc::new(LostCounter::default());
    let client = Client::builder()
        .redis_url(server.url())
        .watchdog_timeout(Duration::from_millis(1500))
        .event_handler(Arc::clone(&lost) as Arc<dyn EventHandler>)
        .build()
        .unwrap();
    let lock = client.lock(unique_name("no-false-loss").as_str());
    // A 1.5 s watchdog renews every 500 ms: holds just under that make
    // unlocks race renewals often. (A shorter lease would be lost for real
    // on a loaded machine whose watchdog thread waits longer than the lease
    // for a CPU: that is no false loss.)
    for _ in 0..30 {
        let guard = lock.lock().unwrap();
        std::thread::sleep(Duration::from_millis(499));
        guard.unlock().unwrap();
    }
    assert_eq!(
        lost.0.load(Ordering::SeqCst),
        0,
        "a normal unlock reported a loss"
    );

    let guard = lock.lock().unwrap();
    assert!(lock.force_unlock().unwrap());
    wait_until("the loss is reported", Duration::from_secs(5), || {
        lost.0.load(Ordering::SeqCst) == 1
    });
    assert!(guard.is_lost());
}

#[test]
fn errors_name_a_refusing_server_and_never_show_a_password() {
    let mut server = TestServer::start();
    let port = server.port();
    server.stop();
    let err = Client::builder()
        .redis_url(format!("redis://127.0.0.1:{port}/"))
        .connection_timeout(Duration::from_secs(1))
        .build()
        .unwrap_err();
    let text = all_error_text(&err);
    assert!(
        text.contains(&format!("connection refused by Redis at 127.0.0.1:{port}")),
        "{text}"
    );
    assert!(
        !text.contains("rediss://"),
        "no TLS hint for a refusal: {text}"
    );

    // Passwords with characters a URL reserves, unencoded: whatever the
    // parser makes of them, no error shows any part of them.
    for url in [
        format!("redis://:p@ssw0rd-xyz@127.0.0.1:{port}/"),
        format!("redis://user:pa/ss-xyz@127.0.0.1:{port}/"),
        format!("redis://user:pa?ss-xyz@127.0.0.1:{port}/"),
        format!("redis://user:pa#ss-xyz@127.0.0.1:{port}/"),
    ] {
        let err = Client::builder()
            .redis_url(url.as_str())
            .connection_timeout(Duration::from_millis(500))
            .build()
            .unwrap_err();
        let shown = format!("{} {err:?}", all_error_text(&err));
        for fragment in ["ss-xyz", "ssw0rd", "pa/ss", "pa?ss", "pa#ss"] {
            assert!(!shown.contains(fragment), "{url}: {shown}");
        }
    }
}

#[test]
fn a_script_that_refuses_an_argument_is_an_invalid_argument_error() {
    let server = TestServer::start();
    let backend = redisync::RedisBackend::open(&server.url()).unwrap();
    // Through the backend, the check before sending answers.
    let err = redisync::internal::lock::acquire(&backend, "refused", "holder:1", 0).unwrap_err();
    assert!(err.is_invalid_argument(), "{err:?}");
    // The script's own guard: the same answer, and nothing written.
    let script = format!(
        "{}{}",
        include_str!("../lua/args_prelude.lua"),
        include_str!("../lua/lock_acquire.lua")
    );
    let mut raw = server.connection();
    let reply: redis::RedisResult<Option<i64>> = redis::Script::new(&script)
        .key("refused")
        .arg("140737488355329")
        .arg("holder:1")
        .invoke(&mut raw);
    let text = reply.unwrap_err().to_string();
    assert!(text.contains("invalid lease"), "{text}");
    assert!(hgetall(&mut raw, "refused").is_empty());
}

#[test]
fn an_expirable_permit_acquire_that_failed_leaves_no_lease_behind() {
    let server = TestServer::start();
    let client = client(&server);
    let semaphore = client.permit_expirable_semaphore(unique_name("unknown-permit").as_str());
    assert!(semaphore.try_set_permits(1).unwrap());
    // Loads the scripts, so the frozen server holds a request it can run.
    let warm = semaphore.acquire_id(Duration::from_secs(30)).unwrap();
    semaphore.release(&warm).unwrap();
    server.pause();
    let err = semaphore
        .try_acquire_id_for(Duration::from_millis(150), Duration::from_secs(30))
        .map(|id| id.is_some())
        .expect_err("a frozen server cannot answer");
    assert!(err.is_connection_error(), "{err:?}");
    std::thread::sleep(Duration::from_millis(300));
    server.resume();
    // The permit the late request leased (if it ran) is released by id
    // well before its 30 s lease ends.
    wait_until(
        "the failed acquire's permit is back",
        Duration::from_secs(8),
        || semaphore.available_permits().unwrap() == 1,
    );
    let mut raw = server.connection();
    let leased: i64 = redis::cmd("ZCARD")
        .arg(format!("{{{}}}:timeout", semaphore.name()))
        .query(&mut raw)
        .unwrap();
    assert_eq!(leased, 0);
}
