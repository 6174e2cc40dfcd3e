//! Issue 32, "exactly once": a resent acquire and its held original. A
//! middlebox holds the acquire's request and the client's side of that
//! connection drops; the client sends the request again at once on another
//! connection (the store resends a harmless call once) and the resend takes
//! the hold; the held original is delivered later, still inside its window.
//! It must take nothing: every lock kind's release keeps the acquire's
//! record as its unlock latch (holding the outcome), and every record and
//! latch outlives the longest window of any copy of its request, whatever
//! `response_timeout` the user sets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::delay_proxy::DelayProxy;
use common::keys;
use common::late::client_for;
use common::{TestServer, unique_name};
use redisync::{Client, Lock};
use redisync::{LockBackend, RedisOptions};

/// The lock kinds.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Reentrant,
    Fenced,
    Fair,
    Read,
    Write,
}

const KINDS: [Kind; 5] = [
    Kind::Reentrant,
    Kind::Fenced,
    Kind::Fair,
    Kind::Read,
    Kind::Write,
];

impl Kind {
    fn lock(self, client: &Client, name: &str) -> Lock {
        match self {
            Kind::Reentrant => client.lock(name),
            Kind::Fenced => client.fenced_lock(name),
            Kind::Fair => client.fair_lock(name),
            Kind::Read => client.read_write_lock(name).read_lock(),
            Kind::Write => client.read_write_lock(name).write_lock(),
        }
    }

    /// A lock another client cannot take while this kind's hold lives
    /// (readers share: a writer probes a read hold).
    fn probe(self, client: &Client, name: &str) -> Lock {
        match self {
            Kind::Read => client.read_write_lock(name).write_lock(),
            _ => self.lock(client, name),
        }
    }
}

/// The holder fields of lock `name` (a read-write lock's `mode` left out)
/// with their hold counts, read directly.
fn holds(conn: &mut redis::Connection, name: &str) -> HashMap<String, String> {
    let mut counts = common::hgetall(conn, name);
    counts.remove("mode");
    counts
}

/// Keys matching `pattern`, read directly (a test server of its own).
fn keys(conn: &mut redis::Connection, pattern: &str) -> Vec<String> {
    let mut found: Vec<String> = redis::cmd("KEYS").arg(pattern).query(conn).unwrap();
    found.sort();
    found
}

/// The attempt records of lock `name`.
fn records(conn: &mut redis::Connection, name: &str) -> Vec<String> {
    keys(conn, &format!("{{{name}}}:redisync_attempt:*"))
}

/// Holds the next request naming `name` and cuts the client's side, runs
/// `take` (whose acquire is that request: the client resends it at once on
/// another connection, and the resend takes the hold), and checks that what
/// the proxy holds is that acquire: an EVALSHA naming the lock, not a
/// SUBSCRIBE or another call. Returns what `take` returned.
fn resend_the_acquire<T>(
    proxy: &DelayProxy,
    name: &str,
    what: &str,
    take: impl FnOnce() -> redisync::Result<T>,
) -> T {
    proxy.hold_next_and_cut(name.as_bytes());
    let taken = take().unwrap_or_else(|e| panic!("{what}: the resent acquire failed: {e}"));
    proxy.wait_held(Duration::from_secs(5));
    let held = String::from_utf8_lossy(&proxy.held_request()).into_owned();
    assert!(
        held.contains("EVALSHA") && held.contains(name),
        "{what}: the proxy held another request than the acquire: {held:?}"
    );
    taken
}

/// Delivers the held acquire and checks that the server refused it by its
/// record (the window was still open: not the window's refusal, and not an
/// acquisition).
fn deliver_and_expect_refusal(proxy: &DelayProxy, name: &str, what: &str) {
    proxy.deliver();
    let (sent, reply) = proxy.last_delivery();
    assert!(
        sent.contains("EVALSHA") && sent.contains(name),
        "{what}: delivered {sent:?}"
    );
    assert!(
        reply.contains("undone or released already"),
        "{what}: the late acquire was not refused by its record; the server answered {reply:?}"
    );
}

/// No hold of any kind is left on `name`, and another client takes it at
/// once.
fn assert_free(direct: &mut redis::Connection, observer: &Client, kind: Kind, name: &str) {
    assert_eq!(
        common::pttl(direct, name),
        -2,
        "{kind:?}: an orphan hold: {:?}",
        holds(direct, name)
    );
    let taken = kind.probe(observer, name).try_lock().unwrap();
    assert!(
        taken.is_some(),
        "{kind:?}: another client cannot take the free lock"
    );
    taken.unwrap().unlock().unwrap();
}

/// For `kind`: the resend takes the hold, the thread unlocks, the held
/// original lands (inside its window): refused, no hold left.
fn resent_acquire_then_unlock_leaves_no_orphan(kind: Kind) {
    let what = format!("{kind:?}");
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let client = client_for(&proxy.url(), Duration::from_secs(5));
    let observer = client_for(&server.url(), Duration::from_secs(5));
    let mut direct = server.connection();
    let name = unique_name("resent");
    let lock = kind.lock(&client, &name);
    lock.lock().unwrap().unlock().unwrap(); // scripts loaded: EVALSHA from now on

    let guard = resend_the_acquire(&proxy, &name, &what, || lock.lock());
    assert_eq!(holds(&mut direct, &name).len(), 1, "{what}");
    guard.unlock().unwrap();
    assert_eq!(common::pttl(&mut direct, &name), -2, "{what}");
    deliver_and_expect_refusal(&proxy, &name, &what);
    assert_free(&mut direct, &observer, kind, &name);
}

#[test]
fn fair_lock_resent_acquire_then_unlock_leaves_no_orphan() {
    resent_acquire_then_unlock_leaves_no_orphan(Kind::Fair);
}

#[test]
fn read_lock_resent_acquire_then_unlock_leaves_no_orphan() {
    resent_acquire_then_unlock_leaves_no_orphan(Kind::Read);
}

#[test]
fn write_lock_resent_acquire_then_unlock_leaves_no_orphan() {
    resent_acquire_then_unlock_leaves_no_orphan(Kind::Write);
}

/// `lock()` with a 15 s response timeout: the resend takes the hold, the
/// thread unlocks, and the original lands 11.5 s after it was sent (inside
/// its 15 s window, past the old 10 s unlock latch): refused.
#[test]
fn lock_resent_with_a_long_response_timeout_lands_after_the_old_latch() {
    let kind = Kind::Reentrant;
    let what = "lock() with a 15 s response timeout";
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let client = client_for(&proxy.url(), Duration::from_secs(15));
    let observer = client_for(&server.url(), Duration::from_secs(5));
    let mut direct = server.connection();
    let name = unique_name("resent-long");
    let lock = kind.lock(&client, &name);
    lock.lock().unwrap().unlock().unwrap();

    let sent = Instant::now();
    let guard = resend_the_acquire(&proxy, &name, what, || lock.lock());
    guard.unlock().unwrap();
    assert_eq!(common::pttl(&mut direct, &name), -2, "{what}");
    std::thread::sleep(Duration::from_millis(11_500).saturating_sub(sent.elapsed()));
    assert!(
        sent.elapsed() < Duration::from_millis(14_000),
        "{what}: too late to be inside the window"
    );
    deliver_and_expect_refusal(&proxy, &name, what);
    // The record, now the unlock latch, outlives the original's window
    // (ending 15.025 s after it was sent) by far.
    let kept: Vec<i64> = records(&mut direct, &name)
        .iter()
        .map(|key| common::pttl(&mut direct, key))
        .collect();
    assert!(
        kept.iter().any(|ttl| *ttl > 15_000),
        "{what}: no record outlives the window: {kept:?}"
    );
    assert_free(&mut direct, &observer, kind, &name);
}

/// `lock_with_lease(2 s)` with a 15 s response timeout: the resend takes
/// the hold, the lease runs out (the thread's unlock comes after it), and
/// the original lands 3 s after it was sent: refused, where a record that
/// lived only the lease let it take a hold nobody owns.
#[test]
fn lock_with_a_short_lease_resent_lands_after_the_lease() {
    let kind = Kind::Reentrant;
    let what = "lock_with_lease(2 s) with a 15 s response timeout";
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let client = client_for(&proxy.url(), Duration::from_secs(15));
    let observer = client_for(&server.url(), Duration::from_secs(5));
    let mut direct = server.connection();
    let name = unique_name("resent-lease");
    let lock = kind.lock(&client, &name);
    lock.lock().unwrap().unlock().unwrap();

    let sent = Instant::now();
    let guard = resend_the_acquire(&proxy, &name, what, || {
        lock.lock_with_lease(Duration::from_secs(2))
    });
    common::wait_until("the lease to run out", Duration::from_secs(10), || {
        common::pttl(&mut direct, &name) == -2
    });
    // Late: the hold is gone (whatever the unlock answers).
    let _ = guard.unlock();
    std::thread::sleep(Duration::from_millis(3_000).saturating_sub(sent.elapsed()));
    assert!(
        sent.elapsed() < Duration::from_millis(14_000),
        "{what}: too late to be inside the window"
    );
    deliver_and_expect_refusal(&proxy, &name, what);
    assert_free(&mut direct, &observer, kind, &name);
}

/// With a 15 s response timeout, every kind's attempt record lives past
/// the longest window of its acquire (2 × (15 s + 25 ms) + 5 s = 35.05 s),
/// also under a 2 s lease, and so does the unlock latch it becomes (where
/// the old record lived the lease, at most the watchdog's 30 s, and the
/// latch 10 s).
#[test]
fn records_and_latches_outlive_a_long_response_timeout() {
    let server = TestServer::start();
    let client = client_for(&server.url(), Duration::from_secs(15));
    let mut direct = server.connection();
    for kind in KINDS {
        let name = unique_name("resent-keep");
        let lock = kind.lock(&client, &name);
        for lease in [None, Some(Duration::from_secs(2))] {
            let guard = match lease {
                None => lock.lock().unwrap(),
                Some(lease) => lock.lock_with_lease(lease).unwrap(),
            };
            let found = records(&mut direct, &name);
            assert!(!found.is_empty(), "{kind:?}");
            for key in &found {
                let ttl = common::pttl(&mut direct, key);
                assert!(ttl > 30_000, "{kind:?} {lease:?}: record {key} PTTL {ttl}");
            }
            guard.unlock().unwrap();
            for key in &found {
                let ttl = common::pttl(&mut direct, key);
                assert!(ttl > 30_000, "{kind:?} {lease:?}: latch {key} PTTL {ttl}");
            }
        }
    }
}

/// Every kind's release keeps the record as its latch (the outcome, not
/// `taken`): no fresh latch key besides it, no record deleted.
#[test]
fn every_kind_releases_behind_its_record() {
    let server = TestServer::start();
    let client = client_for(&server.url(), Duration::from_secs(5));
    let mut direct = server.connection();
    for kind in KINDS {
        let name = unique_name("resent-latch");
        kind.lock(&client, &name).lock().unwrap().unlock().unwrap();
        let found = records(&mut direct, &name);
        assert_eq!(found.len(), 1, "{kind:?}: {found:?}");
        let value: String = redis::cmd("GET").arg(&found[0]).query(&mut direct).unwrap();
        assert_eq!(value, "1", "{kind:?}: the record does not hold the outcome");
        let latches = keys(&mut direct, &format!("redisson_unlock_latch:{{{name}}}*"));
        assert!(
            latches.is_empty(),
            "{kind:?}: a latch besides the record: {latches:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// The operations, on both stores: release behind the record, then the same
// acquire call again.
// ---------------------------------------------------------------------------

const NOW: i64 = 1_700_000_000_000;

/// For the fair lock and both halves of the read-write lock: an acquire
/// resent before the release takes no second hold; released behind its
/// record (the release's unlock latch), a retry of the release returns the
/// first outcome, and the identical acquire call, sent again, is refused
/// and takes nothing.
fn released_record_refuses_the_same_acquire(store: &dyn LockBackend) {
    use redisync::internal::fair_lock::{self, FairLockKeys};
    use redisync::internal::lock::{Acquire, Release};
    use redisync::internal::rw_lock::{self, RwLockKeys};

    // Fair.
    let name = unique_name("resent-ops-fair");
    let (queue, timeouts, channel) = (
        keys::fair_queue(&name),
        keys::fair_timeouts(&name),
        keys::lock_channel(&name),
    );
    let keys = FairLockKeys {
        name: &name,
        queue: &queue,
        timeouts: &timeouts,
        channel_prefix: &channel,
    };
    let record = keys::attempt_record(&name, "a1");
    let acquire = || {
        fair_lock::acquire_recorded(
            store,
            &keys,
            "c1:1",
            30_000,
            5_000,
            NOW,
            true,
            Some(&record),
        )
    };
    let release = || fair_lock::release(store, &keys, "c1:1", 30_000, NOW, &record, 10_000);
    assert_eq!(acquire().unwrap(), Acquire::Acquired);
    assert_eq!(acquire().unwrap(), Acquire::Acquired, "fair: resent");
    assert_eq!(
        redisync::internal::lock::state(store, &name, "c1:1")
            .unwrap()
            .hold_count,
        1
    );
    assert_eq!(release().unwrap(), Release::Released);
    assert_eq!(
        release().unwrap(),
        Release::Released,
        "fair: retried release"
    );
    assert!(
        !redisync::internal::lock::state(store, &name, "c1:1")
            .unwrap()
            .locked
    );
    let late = acquire().unwrap_err();
    assert!(late.is_connection_error(), "fair: {late}");
    assert!(
        !redisync::internal::lock::state(store, &name, "c1:1")
            .unwrap()
            .locked,
        "fair: orphan"
    );

    // Read and write.
    let name = unique_name("resent-ops-rw");
    let (channel, timeout_prefix, key_prefix) = (
        keys::rw_channel(&name),
        format!("{{{name}}}:c1:1:rwlock_timeout"),
        format!("{{{name}}}"),
    );
    let keys = RwLockKeys {
        name: &name,
        channel: &channel,
        holder: "c1:1",
        write_field: "c1:1:write",
        timeout_prefix: &timeout_prefix,
        key_prefix: &key_prefix,
    };
    let (r1, w1) = (
        keys::attempt_record(&name, "r1"),
        keys::attempt_record(&name, "w1"),
    );
    let read = || rw_lock::read_acquire_recorded(store, &keys, 30_000, Some(&r1));
    let read_release = || rw_lock::read_release(store, &keys, &r1, 10_000);
    assert_eq!(read().unwrap(), Acquire::Acquired);
    assert_eq!(read().unwrap(), Acquire::Acquired, "read: resent");
    assert_eq!(rw_lock::state(store, &name, "c1:1").unwrap().hold_count, 1);
    assert_eq!(read_release().unwrap(), Release::Released);
    assert_eq!(
        read_release().unwrap(),
        Release::Released,
        "read: retried release"
    );
    let late = read().unwrap_err();
    assert!(late.is_connection_error(), "read: {late}");
    assert_eq!(
        rw_lock::state(store, &name, "c1:1").unwrap().mode,
        None,
        "read: orphan"
    );

    let write = || rw_lock::write_acquire_recorded(store, &keys, 30_000, Some(&w1));
    let write_release = || rw_lock::write_release(store, &keys, 30_000, &w1, 10_000);
    assert_eq!(write().unwrap(), Acquire::Acquired);
    assert_eq!(write().unwrap(), Acquire::Acquired, "write: resent");
    assert_eq!(
        rw_lock::state(store, &name, "c1:1:write")
            .unwrap()
            .hold_count,
        1
    );
    assert_eq!(write_release().unwrap(), Release::Released);
    assert_eq!(
        write_release().unwrap(),
        Release::Released,
        "write: retried release"
    );
    let late = write().unwrap_err();
    assert!(late.is_connection_error(), "write: {late}");
    assert_eq!(
        rw_lock::state(store, &name, "c1:1").unwrap().mode,
        None,
        "write: orphan"
    );
}

#[test]
fn memory_released_record_refuses_the_same_acquire() {
    released_record_refuses_the_same_acquire(&redisync::MemoryBackend::new());
}

#[test]
fn redis_released_record_refuses_the_same_acquire() {
    let server = TestServer::start();
    released_record_refuses_the_same_acquire(&redisync::RedisBackend::open(&server.url()).unwrap());
}

/// On a store with a 15 s response timeout, the operations keep every
/// kind's attempt record, and an undone attempt's mark, past the longest
/// window of its request, also under a 2 s lease.
#[test]
fn operations_keep_records_past_the_window_of_a_long_response_timeout() {
    use redisync::internal::fair_lock::{self, FairLockKeys};
    use redisync::internal::handoff::{self, Queue};
    use redisync::internal::lock;
    use redisync::internal::rw_lock::{self, RwLockKeys};

    let server = TestServer::start();
    let store = redisync::RedisBackend::open_with(
        &server.url(),
        RedisOptions::default().response_timeout(Duration::from_secs(15)),
    )
    .unwrap();
    let mut direct = server.connection();
    let lease = 2_000;
    let name = unique_name("resent-ops-keep");
    let record = |id: &str| keys::attempt_record(&name, id);
    let assert_kept = |direct: &mut redis::Connection, key: &str, what: &str| {
        let ttl = common::pttl(direct, key);
        assert!(ttl > 30_000, "{what}: {key} PTTL {ttl}");
    };
    let holder = "c1:1";

    let a1 = record("lock");
    assert!(
        lock::acquire_recorded(&store, &name, holder, lease, Some(&a1))
            .unwrap()
            .is_acquired()
    );
    assert_kept(&mut direct, &a1, "reentrant acquire");
    let queue = Queue::new(&name, 2_000, 16);
    let a2 = record("queued");
    assert!(
        handoff::acquire(&store, &name, holder, lease, &a2, &queue, false, None)
            .unwrap()
            .is_acquired()
    );
    assert_kept(&mut direct, &a2, "queued acquire");
    let a3 = record("fenced");
    let counter = keys::fence_counter(&name);
    assert!(
        lock::fenced_acquire_recorded(&store, &name, &counter, holder, lease, Some(&a3))
            .unwrap()
            .token()
            .is_some()
    );
    assert_kept(&mut direct, &a3, "fenced acquire");
    let channel = keys::lock_channel(&name);
    for attempt in [&a1, &a2, &a3] {
        lock::undo_acquire(&store, &name, &channel, holder, lease, attempt).unwrap();
        assert_kept(&mut direct, attempt, "reentrant undo");
    }

    let fair = unique_name("resent-ops-keep-fair");
    let (queue, timeouts, prefix) = (
        keys::fair_queue(&fair),
        keys::fair_timeouts(&fair),
        keys::lock_channel(&fair),
    );
    let keys = FairLockKeys {
        name: &fair,
        queue: &queue,
        timeouts: &timeouts,
        channel_prefix: &prefix,
    };
    let a4 = keys::attempt_record(&fair, "a4");
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    assert!(
        fair_lock::acquire_recorded(&store, &keys, holder, lease, 5_000, now, true, Some(&a4))
            .unwrap()
            .is_acquired()
    );
    assert_kept(&mut direct, &a4, "fair acquire");
    fair_lock::undo_acquire(&store, &keys, holder, lease, now, &a4).unwrap();
    assert_kept(&mut direct, &a4, "fair undo");

    let rw = unique_name("resent-ops-keep-rw");
    let (channel, timeout_prefix, key_prefix) = (
        keys::rw_channel(&rw),
        format!("{{{rw}}}:c1:1:rwlock_timeout"),
        format!("{{{rw}}}"),
    );
    let keys = RwLockKeys {
        name: &rw,
        channel: &channel,
        holder,
        write_field: "c1:1:write",
        timeout_prefix: &timeout_prefix,
        key_prefix: &key_prefix,
    };
    let (a5, a6) = (
        keys::attempt_record(&rw, "a5"),
        keys::attempt_record(&rw, "a6"),
    );
    assert!(
        rw_lock::write_acquire_recorded(&store, &keys, lease, Some(&a5))
            .unwrap()
            .is_acquired()
    );
    assert_kept(&mut direct, &a5, "write acquire");
    assert!(
        rw_lock::read_acquire_recorded(&store, &keys, lease, Some(&a6))
            .unwrap()
            .is_acquired()
    );
    assert_kept(&mut direct, &a6, "read acquire");
    rw_lock::read_undo_acquire(&store, &keys, lease, &a6).unwrap();
    assert_kept(&mut direct, &a6, "read undo");
    rw_lock::write_undo_acquire(&store, &keys, lease, &a5).unwrap();
    assert_kept(&mut direct, &a5, "write undo");
}

/// The reentrant lock's waiter queue, `{name}:redisync_waiters`, followed
/// by the lock's own name as the next argument: the bytes of a leave's
/// first two KEYS (an acquire names its queue after the lock and its
/// record, then the clients' key).
fn leave_pattern(name: &str) -> Vec<u8> {
    format!(
        "{{{name}}}:redisync_waiters\r\n${}\r\n{name}\r\n",
        name.len()
    )
    .into_bytes()
}

/// A waiter that gives up leaves the lock's queue; the leave is held by a
/// middlebox and resent at once. The same thread then takes the lock with
/// an acquire of its own (same holder id), and the held original leave
/// lands inside its window: it must not free that hold. Before, a leave of
/// a wait queued to be handed the lock outright gave up any hold of its
/// holder id, so the late copy deleted the thread's new hold.
#[test]
fn a_resent_leave_of_the_queue_does_not_free_the_threads_next_hold() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let name = unique_name("resent:leave");
    let waiter_client = client_for(&proxy.url(), Duration::from_secs(3));
    let holder_client = client_for(&server.url(), Duration::from_secs(3));
    let lock = waiter_client.lock(&name);
    drop(lock.lock().unwrap()); // scripts loaded, connections open
    let held_by_other = holder_client.lock(&name).lock().unwrap();
    proxy.hold_next_and_cut(&leave_pattern(&name));
    // A watchdog wait: queued to be handed the lock outright; it gives up.
    assert!(
        lock.try_lock_for(Duration::from_millis(300))
            .unwrap()
            .is_none(),
        "the lock is held by another client"
    );
    proxy.wait_held(Duration::from_secs(5));
    let held = String::from_utf8_lossy(&proxy.held_request()).into_owned();
    assert!(
        held.contains("EVALSHA") && held.contains("redisync_waiters"),
        "the proxy held another request than the leave: {held:?}"
    );
    held_by_other.unlock().unwrap();
    let guard = lock.try_lock_for(Duration::from_secs(5)).unwrap().unwrap();
    let mut direct = server.connection();
    assert_eq!(holds(&mut direct, &name).len(), 1, "the thread holds it");
    proxy.deliver();
    let (sent, reply) = proxy.last_delivery();
    assert!(sent.contains("redisync_waiters"), "delivered {sent:?}");
    assert_eq!(
        holds(&mut direct, &name).len(),
        1,
        "the late leave freed the thread's hold (the server answered {reply:?})"
    );
    assert!(
        holder_client.lock(&name).try_lock().unwrap().is_none(),
        "another client entered while the thread holds the lock"
    );
    assert!(!guard.is_lost());
    guard.unlock().unwrap();
}

/// A fair waiter that gives up leaves the queue (the cancel script); the
/// cancel is held by a middlebox and resent at once. The same thread then
/// queues again, and the held original lands inside its window: the
/// thread must keep its new place. Before, the late copy removed the
/// thread's new entry (the same waiter id) and its direct mark.
#[test]
fn a_resent_fair_cancel_does_not_take_the_threads_new_place() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let name = unique_name("resent:cancel");
    let waiter_client = client_for(&proxy.url(), Duration::from_secs(3));
    let holder_client = client_for(&server.url(), Duration::from_secs(3));
    let fair = waiter_client.fair_lock(&name);
    drop(fair.lock().unwrap()); // scripts loaded, connections open
    let queue = keys::fair_queue(&name);
    let queued = |direct: &mut redis::Connection| -> Vec<String> {
        redis::cmd("LRANGE")
            .arg(&queue)
            .arg(0)
            .arg(-1)
            .query(direct)
            .unwrap()
    };
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        // Another client holds the lock until the late cancel has landed.
        let (holder_client, name) = (&holder_client, &name);
        s.spawn(move || {
            let guard = holder_client.fair_lock(name).lock().unwrap();
            held_tx.send(()).unwrap();
            let _ = release_rx.recv_timeout(Duration::from_secs(30));
            guard.unlock().unwrap();
        });
        held_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        // The cancel's key count (4: the queue, the slots, the waiter's
        // direct mark, the record; 3 without a record) then its first
        // key, the queue; an acquire names the lock first.
        let recorded = format!("\r\n$1\r\n4\r\n${}\r\n{queue}\r\n", queue.len());
        proxy.hold_next_and_cut(recorded.as_bytes());
        assert!(
            fair.try_lock_for(Duration::from_millis(300))
                .unwrap()
                .is_none(),
            "the lock is held by another client"
        );
        proxy.wait_held(Duration::from_secs(5));
        let held = String::from_utf8_lossy(&proxy.held_request()).into_owned();
        assert!(
            held.contains("EVALSHA") && held.contains(&queue),
            "the proxy held another request than the cancel: {held:?}"
        );
        let mut direct = server.connection();
        assert!(
            queued(&mut direct).is_empty(),
            "the resent cancel left the queue"
        );
        // Once this thread has queued again, deliver the held cancel, then
        // let the holder go.
        let (server, proxy, queued) = (&server, &proxy, &queued);
        let deliverer = s.spawn(move || {
            let mut direct = server.connection();
            let deadline = Instant::now() + Duration::from_secs(10);
            while queued(&mut direct).is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let before = queued(&mut direct);
            proxy.deliver();
            let after = queued(&mut direct);
            release_tx.send(()).unwrap();
            (before, after, proxy.last_delivery())
        });
        let taken = fair.try_lock_for(Duration::from_secs(20)).unwrap();
        let (before, after, (sent, reply)) = deliverer.join().unwrap();
        assert_eq!(before.len(), 1, "the thread queued again: {before:?}");
        assert!(sent.contains(&queue), "delivered {sent:?}");
        assert_eq!(
            after, before,
            "the late cancel took the thread's new place (the server answered {reply:?})"
        );
        let guard = taken.expect("the thread, first in the queue, got the lock");
        guard.unlock().unwrap();
    });
}

/// A `try_lock()` while another client holds the lock: its acquire is held
/// by a middlebox and resent at once, and the resend finds the lock busy
/// (`None`). The other client unlocks, and the held original lands inside
/// its window: it must not take the lock for a caller told it was busy.
/// Before, it did: a hold nobody owned, every other client waiting out its
/// lease (found by the protocol model, tests/protocol_model.rs).
#[test]
fn a_resent_acquire_told_busy_takes_nothing_when_its_original_lands() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let waiter_client = client_for(&proxy.url(), Duration::from_secs(3));
    let holder_client = client_for(&server.url(), Duration::from_secs(3));
    let mut direct = server.connection();
    for kind in KINDS {
        let name = unique_name(&format!("resent:busy:{kind:?}"));
        let lock = kind.lock(&waiter_client, &name);
        drop(lock.lock().unwrap()); // scripts loaded, connections open
        let held_by_other = kind.probe(&holder_client, &name).lock().unwrap();
        let told_busy = resend_the_acquire(&proxy, &name, &format!("{kind:?}"), || lock.try_lock());
        assert!(
            told_busy.is_none(),
            "{kind:?}: the lock is held by another client"
        );
        held_by_other.unlock().unwrap();
        proxy.deliver();
        let (sent, reply) = proxy.last_delivery();
        assert!(sent.contains(&name), "{kind:?}: delivered {sent:?}");
        assert_eq!(
            common::pttl(&mut direct, &name),
            -2,
            "{kind:?}: the late copy of an attempt told busy took the lock (the server \
             answered {reply:?}): {:?}",
            holds(&mut direct, &name)
        );
    }
}

/// `unlock()` with a 15 s response timeout: the release is held by a
/// middlebox and resent at once (the resend releases, its record now the
/// unlock latch); the thread takes the lock again; the original lands
/// 11.5 s after it was sent, inside its 15.025 s window and after a fixed
/// 10 s latch would have expired. It must find the latch and release
/// nothing: before, it freed the thread's next hold (two holders).
#[test]
fn unlock_resent_with_a_long_response_timeout_lands_after_the_old_latch() {
    let what = "unlock() with a 15 s response timeout";
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let client = client_for(&proxy.url(), Duration::from_secs(15));
    let observer = client_for(&server.url(), Duration::from_secs(5));
    let mut direct = server.connection();
    let name = unique_name("resent-unlock-long");
    let lock = client.lock(&name);
    lock.lock().unwrap().unlock().unwrap();

    let guard = lock.lock().unwrap();
    // The release names the lock's channel; an acquire does not.
    proxy.hold_next_and_cut(keys::lock_channel(&name).as_bytes());
    let sent = Instant::now();
    guard.unlock().unwrap();
    proxy.wait_held(Duration::from_secs(5));
    let held = String::from_utf8_lossy(&proxy.held_request()).into_owned();
    assert!(
        held.contains("EVALSHA") && held.contains(&name),
        "{what}: the proxy held another request than the release: {held:?}"
    );
    let again = lock.lock().unwrap();
    std::thread::sleep(Duration::from_millis(11_500).saturating_sub(sent.elapsed()));
    assert!(
        sent.elapsed() < Duration::from_millis(14_500),
        "{what}: too late to be inside the window"
    );
    proxy.deliver();
    let (sent_text, reply) = proxy.last_delivery();
    assert!(sent_text.contains(&name), "{what}: delivered {sent_text:?}");
    assert_eq!(
        holds(&mut direct, &name).len(),
        1,
        "{what}: the late release freed the thread's next hold (the server answered {reply:?})"
    );
    assert!(
        observer.lock(&name).try_lock().unwrap().is_none(),
        "{what}: another client entered while the thread holds the lock"
    );
    assert!(!again.is_lost());
    again.unlock().unwrap();
}
