//! Connecting: credentials and database index in the URL, a wrong password,
//! an exhausted pool. Each test starts its own redis-server.

// Helpers outside #[test] fns unwrap too: a failed setup should fail the test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{TestServer, unique_name};
use redisync::{Client, NopEventHandler};

const PASSWORD: &str = "s3cret-redisync-pw";

/// Starts a server, then sets a password (the harness's readiness check
/// cannot authenticate); the harness's own connection stays authenticated.
fn server_with_password() -> (TestServer, redis::Connection) {
    let server = TestServer::start();
    let mut admin = server.connection();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(PASSWORD)
        .query::<()>(&mut admin)
        .unwrap();
    (server, admin)
}

#[test]
fn password_and_database_index_come_from_the_url() {
    let (server, mut admin) = server_with_password();
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}/3", server.port());
    let client = Client::open(&url).unwrap();
    let name = unique_name("connect:db");
    let lock = client.lock(name.as_str());
    let guard = lock.lock().unwrap();
    assert!(lock.is_held_by_current_thread().unwrap());

    // The hash is in database 3, not 0.
    let in_db0: i64 = redis::cmd("EXISTS").arg(&name).query(&mut admin).unwrap();
    assert_eq!(in_db0, 0, "the lock landed in database 0");
    redis::cmd("SELECT").arg(3).query::<()>(&mut admin).unwrap();
    let field: Option<String> = redis::cmd("HGET")
        .arg(&name)
        .arg(client.current_holder_id())
        .query(&mut admin)
        .unwrap();
    assert_eq!(field.as_deref(), Some("1"));

    // Waiting works too: the pub/sub connection authenticates as well.
    let other = Client::open(&url).unwrap();
    let waiter_lock = other.lock(name.as_str());
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let guard = waiter_lock.lock().unwrap();
        let waited = started.elapsed();
        guard.unlock().unwrap();
        waited
    });
    std::thread::sleep(Duration::from_millis(200));
    guard.unlock().unwrap();
    let waited = waiter.join().unwrap();
    assert!(
        waited < Duration::from_secs(5),
        "the waiter was not woken by pub/sub: waited {waited:?} (lease 30 s)"
    );
}

#[test]
fn wrong_password_is_a_clear_error_that_does_not_leak_it() {
    let (server, _admin) = server_with_password();
    let wrong = "not-the-password-xyz";
    let url = format!("redis://:{wrong}@127.0.0.1:{}/", server.port());
    let err = Client::builder()
        .redis_url(url)
        .connection_timeout(Duration::from_secs(2))
        .build()
        .unwrap_err();
    let shown = format!("{err} / {err:?}");
    assert!(!shown.contains(wrong), "the password leaked: {shown}");
    assert!(
        shown.contains(&format!("127.0.0.1:{}", server.port())),
        "the error should name the server: {shown}"
    );
    assert!(
        shown.to_lowercase().contains("pass") || shown.contains("AUTH"),
        "the error should say authentication failed: {shown}"
    );
}

#[test]
fn builder_debug_does_not_show_the_url() {
    let builder = Client::builder().redis_url(format!("redis://:{PASSWORD}@127.0.0.1:1/"));
    let shown = format!("{builder:?}");
    assert!(!shown.contains(PASSWORD), "{shown}");
}

#[test]
fn exhausted_pool_is_a_clear_error_not_a_hang() {
    let server = TestServer::start();
    let client = Client::builder()
        .redis_url(server.url())
        .pool_size(1)
        .connection_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_secs(2))
        .event_handler(std::sync::Arc::new(NopEventHandler))
        .build()
        .unwrap();
    let name = unique_name("connect:pool");
    // Freeze the server: the one pooled connection stays busy waiting for a reply.
    server.pause();
    let busy_lock = client.lock(name.as_str());
    let busy = std::thread::spawn(move || busy_lock.try_lock().map(|g| g.is_some()));
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    let err = client.lock(name.as_str()).is_locked().unwrap_err();
    let took = started.elapsed();
    server.resume();
    assert!(err.is_connection_error(), "{err}");
    assert!(
        err.to_string().contains("pooled connections busy"),
        "the error should say the pool is exhausted: {err}"
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // The frozen call ends one way or the other (reply or response timeout).
    let _ = busy.join().unwrap();
    // And the client works again (on a fresh name: the frozen attempt may
    // have taken `name` once the server resumed).
    let fresh = client.lock(unique_name("connect:pool-after"));
    assert!(fresh.try_lock().unwrap().is_some());
}
