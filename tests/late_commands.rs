//! Issue 21: nothing late can break a hold. Requests that reach Redis after
//! their caller gave up (held by a delaying proxy, or queued behind a frozen
//! server) change nothing, and the undo of a failed acquire removes exactly
//! that attempt's hold.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::delay_proxy::DelayProxy;
use common::keys;
use common::late::{client_for, two_threads_on_a_frozen_server, warm};
use common::{TestServer, unique_name};

/// The proxy itself: a held request runs only when delivered, also after
/// its client closed the connection, and the proxy says how much it held.
#[test]
fn delay_proxy_holds_and_delivers_after_the_client_closed() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let mut direct = server.connection();
    proxy.hold_next(b"late-key");
    let mut sock = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
    let request = b"*3\r\n$3\r\nSET\r\n$8\r\nlate-key\r\n$1\r\nv\r\n";
    sock.write_all(request).unwrap();
    let held = proxy.wait_held(Duration::from_secs(5));
    assert_eq!(held, request.len());
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 16];
    assert!(sock.read(&mut buf).is_err(), "a held request got a reply");
    let exists: bool = redis::cmd("EXISTS")
        .arg("late-key")
        .query(&mut direct)
        .unwrap();
    assert!(!exists, "the held SET ran before it was delivered");
    drop(sock);
    common::wait_until(
        "the proxy sees the client gone",
        Duration::from_secs(5),
        || proxy.held_client_closed(),
    );
    assert_eq!(proxy.deliver(), request.len());
    let value: Option<String> = redis::cmd("GET")
        .arg("late-key")
        .query(&mut direct)
        .unwrap();
    assert_eq!(value.as_deref(), Some("v"));
    assert_eq!(proxy.held_bytes(), 0);
    assert_eq!(proxy.connections(), 1);
}

/// The hold counts of lock `name`, read directly.
fn holds(conn: &mut redis::Connection, name: &str) -> std::collections::HashMap<String, String> {
    common::hgetall(conn, name)
}

/// Fault 1 of issue 21: two threads acquire for one `LockOwner` while the
/// server is frozen. The timed-out `try_lock_for`'s cleanup must undo that
/// attempt only, never the hold the other thread's `lock()` then took.
#[test]
fn a_timed_out_attempt_of_a_shared_owner_does_not_undo_the_other_threads_hold() {
    let server = TestServer::start();
    let client = client_for(&server.url(), Duration::from_secs(2));
    let observer = client_for(&server.url(), Duration::from_secs(2));
    let mut direct = server.connection();
    let name = unique_name("late-owner");
    let owner = redisync::LockOwner::new();
    let lock = client.lock(name.as_str()).owned_by(&owner);
    warm(&name, |name| {
        client.lock(name).lock().unwrap().unlock().unwrap()
    });

    // Both threads' requests wait in the frozen server: the first one's
    // caller gives up after 100 ms, the second one's waits.
    let other_thread =
        two_threads_on_a_frozen_server(&server, &lock, Duration::from_millis(250), "");
    let guard = other_thread.join().unwrap().unwrap();
    // Long enough for every cleanup task and re-send to have run.
    std::thread::sleep(Duration::from_millis(1500));
    let stolen = observer.lock(name.as_str()).try_lock().unwrap();
    assert!(
        stolen.is_none(),
        "another client took the lock while the owner's guard lives (store: {:?})",
        holds(&mut direct, &name)
    );
    assert!(!guard.is_lost());
    let counts = holds(&mut direct, &name);
    assert_eq!(counts.len(), 1, "{counts:?}");
    assert_eq!(
        counts.values().next().map(String::as_str),
        Some("1"),
        "{counts:?}"
    );
    guard.unlock().unwrap();
    assert!(!lock.is_held().unwrap());
}

/// Fault 2 of issue 21: a release delivered after its unlock latch expired
/// must not free the hold the thread took after that unlock.
#[test]
fn a_release_delivered_late_does_not_free_a_later_hold() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let client = client_for(&proxy.url(), Duration::from_millis(200));
    let observer = client_for(&server.url(), Duration::from_secs(2));
    let mut direct = server.connection();
    let name = unique_name("late-release");
    let lock = client.lock(name.as_str());
    lock.lock().unwrap().unlock().unwrap(); // scripts loaded

    let guard = lock.lock().unwrap();
    // The release is the one request that names the lock's channel.
    proxy.hold_next(b"redisson_lock__channel");
    // The first release is held; a retry (in line or in the background)
    // goes on another connection and lands.
    let _ = guard.unlock();
    let held = proxy.wait_held(Duration::from_secs(5));
    common::wait_until("the release to land", Duration::from_secs(10), || {
        !lock.is_locked().unwrap()
    });
    let released_at = Instant::now();
    let again = lock.lock().unwrap();
    // The first release's unlock latch (10 s) has expired.
    std::thread::sleep(Duration::from_millis(10_800).saturating_sub(released_at.elapsed()));
    assert_eq!(
        proxy.deliver(),
        held,
        "the held release was delivered whole"
    );
    let stolen = observer.lock(name.as_str()).try_lock().unwrap();
    assert!(
        stolen.is_none(),
        "the late release freed the new hold (store: {:?})",
        holds(&mut direct, &name)
    );
    assert!(!again.is_lost());
    assert_eq!(lock.hold_count().unwrap(), 1);
    again.unlock().unwrap();
}

/// Fault 3 of issue 21: an acquire delivered after its caller failed,
/// retried, took and released the lock must not leave an orphan hold.
#[test]
fn an_acquire_delivered_late_leaves_no_orphan_hold() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let client = client_for(&proxy.url(), Duration::from_millis(200));
    let observer = client_for(&server.url(), Duration::from_secs(2));
    let mut direct = server.connection();
    let name = unique_name("late-acquire");
    let lock = client.lock(name.as_str());
    lock.lock().unwrap().unlock().unwrap(); // scripts loaded

    proxy.hold_next(name.as_bytes());
    let failed = lock.try_lock_for(Duration::from_millis(100));
    assert!(failed.is_err(), "the held acquire returned {failed:?}");
    let held = proxy.wait_held(Duration::from_secs(5));
    // At once: take and release it.
    lock.lock().unwrap().unlock().unwrap();
    assert_eq!(
        proxy.deliver(),
        held,
        "the held acquire was delivered whole"
    );
    let counts = holds(&mut direct, &name);
    assert!(counts.is_empty(), "an orphan hold: {counts:?}");
    let taken = observer.lock(name.as_str()).try_lock().unwrap();
    assert!(taken.is_some(), "another client cannot take the free lock");
}

/// A wait that runs out while the reply to its last attempt is still on
/// its way (a server that answered the wait before, slow for a moment: a
/// loaded machine, a middlebox) ends as a wait that ran out, `Ok(None)`,
/// not as a store failure; the attempt, delivered later, leaves nothing
/// held (it is undone, exactly, as after any lost reply). On the main
/// before this, the call failed with "timed out after 1.8s waiting for a
/// reply".
#[test]
fn a_wait_that_runs_out_with_its_last_reply_late_is_not_acquired_not_an_error() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let client = client_for(&proxy.url(), Duration::from_secs(10));
    let observer = client_for(&server.url(), Duration::from_secs(2));
    let mut direct = server.connection();
    let name = unique_name("late-last-attempt");
    let lock = client.lock(name.as_str());
    lock.lock().unwrap().unlock().unwrap(); // scripts loaded
    let held = observer
        .lock(name.as_str())
        .lock_with_lease(Duration::from_millis(1_500))
        .unwrap();
    let wait = Duration::from_secs(4);
    let waiter = {
        let lock = lock;
        std::thread::spawn(move || {
            let started = Instant::now();
            (
                lock.try_lock_for(wait).map(|g| g.is_some()),
                started.elapsed(),
            )
        })
    };
    // Its first attempt answered (queued); its next, when the lease runs
    // out, is held until after the wait.
    let queue = keys::waiter_queue(&name);
    common::wait_until("the waiter queued", Duration::from_secs(5), || {
        redis::cmd("ZCARD")
            .arg(&queue)
            .query::<i64>(&mut direct)
            .unwrap()
            == 1
    });
    proxy.hold_next(b"EVALSHA");
    proxy.wait_held(Duration::from_secs(5));
    let request = String::from_utf8_lossy(&proxy.held_request()).into_owned();
    assert!(
        request.contains(&name) && request.contains("redisync_attempt"),
        "{request}"
    );
    let (outcome, took) = waiter.join().unwrap();
    assert_eq!(
        outcome.as_ref().ok(),
        Some(&false),
        "the wait ran out: {outcome:?} after {took:?}"
    );
    assert!(
        took < wait + Duration::from_secs(2),
        "returned after {took:?}"
    );
    // Delivered now: refused as undone, or undone since; nothing held.
    proxy.deliver();
    drop(held);
    common::wait_until("no hold left", Duration::from_secs(10), || {
        holds(&mut direct, &name).is_empty()
    });
    assert!(observer.lock(name.as_str()).try_lock().unwrap().is_some());
}

/// A connection discarded after a timeout is closed abortively (a reset:
/// `SO_LINGER` 0), so its kernel drops whatever it had not sent yet rather
/// than delivering it late.
#[test]
fn a_connection_discarded_after_a_timeout_is_reset() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let client = client_for(&proxy.url(), Duration::from_millis(200));
    let name = unique_name("late-reset");
    let lock = client.lock(name.as_str());
    lock.lock().unwrap().unlock().unwrap();
    proxy.hold_next(name.as_bytes());
    assert!(lock.try_lock_for(Duration::from_millis(100)).is_err());
    proxy.wait_held(Duration::from_secs(5));
    common::wait_until(
        "the timed-out connection closed",
        Duration::from_secs(5),
        || proxy.held_client_closed(),
    );
    assert!(
        proxy.held_client_reset(),
        "the timed-out connection was closed with a FIN, not a reset"
    );
    // Delivered now: whether it runs (inside its window) or not, the
    // cleanup's undo of that attempt leaves nothing held.
    proxy.deliver();
    let mut direct = server.connection();
    common::wait_until("no hold left", Duration::from_secs(5), || {
        holds(&mut direct, &name).is_empty()
    });
}

/// The exact undo, at the operation level, on both stores: it removes the
/// one attempt's hold and no other, is idempotent, and an attempt undone
/// before it ran is refused when it arrives; a resent attempt takes no
/// second hold.
fn undo_is_exact(store: &dyn redisync::LockBackend) {
    use redisync::internal::lock::Acquire;
    use redisync::internal::lock::{self, Undo};
    let name = unique_name("late-undo");
    let channel = keys::lock_channel(&name);
    let attempt = |id: &str| keys::attempt_record(&name, id);
    let (a1, a2, a3) = (attempt("a1"), attempt("a2"), attempt("a3"));
    let holder = "c1:1";
    assert_eq!(
        lock::acquire_recorded(store, &name, holder, 30_000, Some(&a1)).unwrap(),
        Acquire::Acquired
    );
    // Resent (its reply lost): still one hold.
    assert_eq!(
        lock::acquire_recorded(store, &name, holder, 30_000, Some(&a1)).unwrap(),
        Acquire::Acquired
    );
    assert_eq!(
        lock::acquire_recorded(store, &name, holder, 30_000, Some(&a2)).unwrap(),
        Acquire::Acquired
    );
    assert_eq!(lock::state(store, &name, holder).unwrap().hold_count, 2);
    assert_eq!(
        lock::undo_acquire(store, &name, &channel, holder, 30_000, &a1).unwrap(),
        Undo::Removed
    );
    assert_eq!(
        lock::undo_acquire(store, &name, &channel, holder, 30_000, &a1).unwrap(),
        Undo::Nothing
    );
    assert_eq!(lock::state(store, &name, holder).unwrap().hold_count, 1);
    // Undone before it ran: refused when it arrives, nothing taken.
    assert_eq!(
        lock::undo_acquire(store, &name, &channel, holder, 30_000, &a3).unwrap(),
        Undo::Nothing
    );
    let late = lock::acquire_recorded(store, &name, holder, 30_000, Some(&a3)).unwrap_err();
    assert!(late.is_connection_error(), "{late}");
    assert_eq!(lock::state(store, &name, holder).unwrap().hold_count, 1);
    assert_eq!(
        lock::undo_acquire(store, &name, &channel, holder, 30_000, &a2).unwrap(),
        Undo::Released
    );
    assert!(!lock::state(store, &name, holder).unwrap().locked);
}

/// A hold released behind its attempt's record (the record is the unlock
/// latch): a retry of that release returns the first outcome, and a late
/// copy of the acquire that took the hold, arriving after the release, is
/// refused instead of taking a hold nobody knows of.
fn released_record_refuses_the_late_acquire(store: &dyn redisync::LockBackend) {
    use redisync::internal::lock;
    use redisync::internal::lock::{Acquire, Release};
    let name = unique_name("late-released");
    let channel = keys::lock_channel(&name);
    let (a1, a2) = (
        keys::attempt_record(&name, "a1"),
        keys::attempt_record(&name, "a2"),
    );
    let holder = "c1:1";
    let release =
        |record: &str| lock::release(store, &name, &channel, holder, 30_000, record, 10_000);
    assert_eq!(
        lock::acquire_recorded(store, &name, holder, 30_000, Some(&a1)).unwrap(),
        Acquire::Acquired
    );
    assert_eq!(
        lock::acquire_recorded(store, &name, holder, 30_000, Some(&a2)).unwrap(),
        Acquire::Acquired
    );
    assert_eq!(release(&a2).unwrap(), Release::StillHeld);
    // Retried (its reply lost): the first outcome, not a second release.
    assert_eq!(release(&a2).unwrap(), Release::StillHeld);
    assert_eq!(lock::state(store, &name, holder).unwrap().hold_count, 1);
    // A late copy of the acquire whose hold was released takes nothing.
    let late = lock::acquire_recorded(store, &name, holder, 30_000, Some(&a2)).unwrap_err();
    assert!(late.is_connection_error(), "{late}");
    assert_eq!(lock::state(store, &name, holder).unwrap().hold_count, 1);
    assert_eq!(release(&a1).unwrap(), Release::Released);
    assert_eq!(release(&a1).unwrap(), Release::Released);
    let late = lock::acquire_recorded(store, &name, holder, 30_000, Some(&a1)).unwrap_err();
    assert!(late.is_connection_error(), "{late}");
    assert!(!lock::state(store, &name, holder).unwrap().locked);
}

#[test]
fn memory_released_record_refuses_the_late_acquire() {
    released_record_refuses_the_late_acquire(&redisync::MemoryBackend::new());
}

#[test]
fn redis_released_record_refuses_the_late_acquire() {
    let server = TestServer::start();
    released_record_refuses_the_late_acquire(&redisync::RedisBackend::open(&server.url()).unwrap());
}

#[test]
fn memory_undo_removes_exactly_its_attempts_hold() {
    undo_is_exact(&redisync::MemoryBackend::new());
}

#[test]
fn redis_undo_removes_exactly_its_attempts_hold() {
    let server = TestServer::start();
    undo_is_exact(&redisync::RedisBackend::open(&server.url()).unwrap());
}

/// The window check on the server's own clock, from either side of its end:
/// refused from its end on (within the end's own second, where it parses
/// the numbers, and seconds later), run while the end is seconds ahead
/// (where it compares the seconds' digits only); a window of `0`, or one
/// that is not a number, is none. Sent raw: the window prelude before a
/// script that says it ran.
#[test]
fn a_window_is_refused_from_its_end_on_by_the_servers_clock() {
    let server = TestServer::start();
    let mut conn = server.connection();
    let script = redis::Script::new(&format!(
        "{}return 'ran'",
        include_str!("../lua/window_prelude.lua")
    ));
    for offset_ms in [
        -60_000i64, -5_000, -1_500, -1_000, -999, -200, -1, 5_000, 60_000,
    ] {
        let (seconds, micros): (String, String) = redis::cmd("TIME").query(&mut conn).unwrap();
        let now_ms = seconds.parse::<i64>().unwrap() * 1000 + micros.parse::<i64>().unwrap() / 1000;
        let reply: redis::RedisResult<String> = script.arg(now_ms + offset_ms).invoke(&mut conn);
        if offset_ms < 0 {
            let err = reply.expect_err("a request after its window ran");
            assert!(
                err.to_string().contains("late request"),
                "{offset_ms}: {err}"
            );
        } else {
            assert_eq!(reply.unwrap(), "ran", "{offset_ms}");
        }
    }
    for none in ["0", "", "not a time"] {
        let reply: String = script.arg(none).invoke(&mut conn).unwrap();
        assert_eq!(reply, "ran", "{none:?}");
    }
}
