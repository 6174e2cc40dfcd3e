//! Issue 21, "undo exactly what the failed attempt did", for the fair lock,
//! both halves of the read-write lock and the fenced lock (the reentrant
//! lock's versions are in `late_commands.rs`): the cleanup of an acquire
//! whose outcome is unknown removes that attempt's hold and nothing else,
//! not the hold another thread of the same `LockOwner` took meanwhile; a
//! late copy of the undone attempt changes nothing; and, at the operation
//! level on both stores, the undo is exact, idempotent, leaves a read-write
//! lock as a release of that hold would, and refuses an attempt undone
//! before it arrived.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::delay_proxy::DelayProxy;
use common::keys;
use common::late::{client_for, two_threads_on_a_frozen_server, warm};
use common::{TestServer, unique_name};
use redisync::{Client, Lock};

/// The lock flavors whose undo this file checks.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Fair,
    Read,
    Write,
    Fenced,
}

impl Kind {
    fn lock(self, client: &Client, name: &str) -> Lock {
        match self {
            Kind::Fair => client.fair_lock(name),
            Kind::Read => client.read_write_lock(name).read_lock(),
            Kind::Write => client.read_write_lock(name).write_lock(),
            Kind::Fenced => client.fenced_lock(name),
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

/// The holder fields of lock `name` (the read-write lock's `mode` left out)
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

/// The store holds exactly one hold of `kind` on `name`: one holder field
/// at 1 (the write half's `:write` field), and for a read hold exactly one
/// read-hold key, number 1.
fn assert_one_hold(conn: &mut redis::Connection, kind: Kind, name: &str) {
    let counts = holds(conn, name);
    assert_eq!(counts.len(), 1, "{kind:?}: {counts:?}");
    let (field, count) = counts.iter().next().unwrap();
    assert_eq!(count, "1", "{kind:?}: {counts:?}");
    assert_eq!(
        field.ends_with(":write"),
        matches!(kind, Kind::Write),
        "{kind:?}: {counts:?}"
    );
    if matches!(kind, Kind::Read) {
        let timeouts = keys(conn, &format!("{{{name}}}:*:rwlock_timeout:*"));
        assert_eq!(timeouts.len(), 1, "{timeouts:?}");
        assert!(timeouts[0].ends_with(":rwlock_timeout:1"), "{timeouts:?}");
    }
}

/// Fault 1 of issue 21 for `kind`: two threads acquire for one `LockOwner`
/// while the server is frozen. The timed-out `try_lock_for`'s attempt runs
/// once the server thaws (it takes a hold), then the other thread's `lock()`
/// re-enters; the cleanup must undo the first attempt's hold only, so the
/// second thread's hold is intact and no other client gets the lock while
/// its guard lives. (Before the exact undo, the cleanup released every hold
/// the owner had, since no guard existed when the attempt failed.)
fn shared_owner_keeps_the_fresh_hold(kind: Kind) {
    let server = TestServer::start();
    let client = client_for(&server.url(), Duration::from_secs(2));
    let observer = client_for(&server.url(), Duration::from_secs(2));
    let mut direct = server.connection();
    let name = unique_name("exact-owner");
    let owner = redisync::LockOwner::new();
    let lock = kind.lock(&client, &name).owned_by(&owner);
    warm(&name, |name| {
        kind.lock(&client, name).lock().unwrap().unlock().unwrap()
    });
    // A generous freeze: the 100 ms attempt must fail while it lasts, also
    // on a loaded machine.
    let other_thread = two_threads_on_a_frozen_server(
        &server,
        &lock,
        Duration::from_millis(500),
        &format!("{kind:?}: "),
    );
    let guard = other_thread.join().unwrap().unwrap();
    // Long enough for every cleanup task and re-send to have run.
    std::thread::sleep(Duration::from_millis(1500));
    let stolen = kind.probe(&observer, &name).try_lock().unwrap();
    assert!(
        stolen.is_none(),
        "{kind:?}: another client took the lock while the owner's guard lives (store: {:?})",
        holds(&mut direct, &name)
    );
    assert!(!guard.is_lost(), "{kind:?}");
    assert_one_hold(&mut direct, kind, &name);
    guard.unlock().unwrap();
    assert!(!lock.is_held().unwrap(), "{kind:?}");
    assert!(
        holds(&mut direct, &name).is_empty(),
        "{kind:?}: {:?}",
        holds(&mut direct, &name)
    );
    assert!(
        kind.probe(&observer, &name).try_lock().unwrap().is_some(),
        "{kind:?}: the released lock cannot be taken"
    );
}

#[test]
fn fair_lock_undo_spares_the_shared_owners_fresh_hold() {
    shared_owner_keeps_the_fresh_hold(Kind::Fair);
}

#[test]
fn read_lock_undo_spares_the_shared_owners_fresh_hold() {
    shared_owner_keeps_the_fresh_hold(Kind::Read);
}

#[test]
fn write_lock_undo_spares_the_shared_owners_fresh_hold() {
    shared_owner_keeps_the_fresh_hold(Kind::Write);
}

#[test]
fn fenced_lock_undo_spares_the_shared_owners_fresh_hold() {
    shared_owner_keeps_the_fresh_hold(Kind::Fenced);
}

/// For `kind`: an acquire held by the network (the delaying proxy) fails
/// its caller; the cleanup marks that attempt undone; another thread of the
/// same `LockOwner` then takes the lock; the held request, delivered at
/// last, changes nothing: the fresh hold is still the only one, no other
/// client can take the lock while its guard lives, and once it is released
/// the lock is free (no orphan hold).
fn late_copy_of_an_undone_attempt_changes_nothing(kind: Kind) {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let client = client_for(&proxy.url(), Duration::from_millis(200));
    let observer = client_for(&server.url(), Duration::from_secs(2));
    let mut direct = server.connection();
    let name = unique_name("exact-late");
    let owner = redisync::LockOwner::new();
    let lock = kind.lock(&client, &name).owned_by(&owner);
    lock.lock().unwrap().unlock().unwrap(); // scripts loaded

    proxy.hold_next(name.as_bytes());
    let failed = lock.try_lock_for(Duration::from_millis(100));
    assert!(
        failed.is_err(),
        "{kind:?}: the held acquire returned {failed:?}"
    );
    let held = proxy.wait_held(Duration::from_secs(5));
    // The cleanup's undo lands: the attempt's record says so ("undone",
    // every kind).
    let records = format!("{{{name}}}:redisync_attempt:*");
    common::wait_until("the undo to land", Duration::from_secs(10), || {
        keys(&mut direct, &records).iter().any(|key| {
            redis::cmd("GET")
                .arg(key)
                .query::<Option<String>>(&mut direct)
                .unwrap()
                .as_deref()
                .is_some_and(|record| record == "undone")
        })
    });
    // The same thread, retrying, takes the lock.
    let fresh = lock.lock().unwrap();
    let before = holds(&mut direct, &name);
    assert_eq!(
        proxy.deliver(),
        held,
        "{kind:?}: the held acquire was delivered whole"
    );
    assert_eq!(
        holds(&mut direct, &name),
        before,
        "{kind:?}: the late acquire changed the holds"
    );
    assert!(
        kind.probe(&observer, &name).try_lock().unwrap().is_none(),
        "{kind:?}: another client took the lock while the owner's guard lives"
    );
    assert!(!fresh.is_lost(), "{kind:?}");
    fresh.unlock().unwrap();
    assert!(
        holds(&mut direct, &name).is_empty(),
        "{kind:?}: an orphan hold: {:?}",
        holds(&mut direct, &name)
    );
    assert!(
        kind.probe(&observer, &name).try_lock().unwrap().is_some(),
        "{kind:?}: another client cannot take the free lock"
    );
}

#[test]
fn fair_lock_late_copy_of_an_undone_attempt_changes_nothing() {
    late_copy_of_an_undone_attempt_changes_nothing(Kind::Fair);
}

#[test]
fn read_lock_late_copy_of_an_undone_attempt_changes_nothing() {
    late_copy_of_an_undone_attempt_changes_nothing(Kind::Read);
}

#[test]
fn write_lock_late_copy_of_an_undone_attempt_changes_nothing() {
    late_copy_of_an_undone_attempt_changes_nothing(Kind::Write);
}

#[test]
fn fenced_lock_late_copy_of_an_undone_attempt_changes_nothing() {
    late_copy_of_an_undone_attempt_changes_nothing(Kind::Fenced);
}

/// Names of one lock's keys, as Redisson spells them.
struct Names {
    name: String,
    channel: String,
    holder: String,
    write_field: String,
    timeout_prefix: String,
    key_prefix: String,
}

impl Names {
    fn new(prefix: &str, channel: impl Fn(&str) -> String) -> Names {
        let name = unique_name(prefix);
        let holder = "c1:1".to_owned();
        Names {
            channel: channel(&name),
            write_field: format!("{holder}:write"),
            timeout_prefix: format!("{{{name}}}:{holder}:rwlock_timeout"),
            key_prefix: format!("{{{name}}}"),
            holder,
            name,
        }
    }

    fn attempt(&self, id: &str) -> String {
        format!("{{{}}}:redisync_attempt:{id}", self.name)
    }

    fn rw(&self) -> redisync::internal::rw_lock::RwLockKeys<'_> {
        redisync::internal::rw_lock::RwLockKeys {
            name: &self.name,
            channel: &self.channel,
            holder: &self.holder,
            write_field: &self.write_field,
            timeout_prefix: &self.timeout_prefix,
            key_prefix: &self.key_prefix,
        }
    }
}

const NOW: i64 = 1_700_000_000_000;

/// The fair lock's exact undo on one store: a resend takes no second hold,
/// the undo removes only its attempt's hold and is idempotent, an attempt
/// undone before it arrived is refused and writes nothing (not even a queue
/// entry), and a queued attempt records nothing to undo.
fn fair_undo_is_exact(store: &dyn redisync::LockBackend) {
    use redisync::internal::fair_lock::FairLockKeys;
    use redisync::internal::lock::Acquire;
    use redisync::internal::{fair_lock, lock, lock::Undo};
    let n = Names::new("exact-fair", keys::lock_channel);
    let queue = format!("redisson_lock_queue:{{{}}}", n.name);
    let timeouts = format!("redisson_lock_timeout:{{{}}}", n.name);
    let keys = FairLockKeys {
        name: &n.name,
        queue: &queue,
        timeouts: &timeouts,
        channel_prefix: &n.channel,
    };
    let (a1, a2, a3, a4) = (
        n.attempt("a1"),
        n.attempt("a2"),
        n.attempt("a3"),
        n.attempt("a4"),
    );
    let acquire = |holder: &str, attempt: &str| {
        fair_lock::acquire_recorded(
            store,
            &keys,
            holder,
            30_000,
            5_000,
            NOW,
            true,
            Some(attempt),
        )
    };
    assert_eq!(acquire(&n.holder, &a1).unwrap(), Acquire::Acquired);
    assert_eq!(acquire(&n.holder, &a1).unwrap(), Acquire::Acquired);
    assert_eq!(acquire(&n.holder, &a2).unwrap(), Acquire::Acquired);
    assert_eq!(
        lock::state(store, &n.name, &n.holder).unwrap().hold_count,
        2
    );
    // Another holder queues: nothing recorded, nothing to undo.
    assert!(matches!(
        acquire("c2:1", &a4).unwrap(),
        Acquire::Held { .. }
    ));
    assert_eq!(
        fair_lock::undo_acquire(store, &keys, "c2:1", 30_000, NOW, &a4).unwrap(),
        Undo::Nothing
    );
    assert_eq!(
        fair_lock::undo_acquire(store, &keys, &n.holder, 30_000, NOW, &a1).unwrap(),
        Undo::Removed
    );
    assert_eq!(
        fair_lock::undo_acquire(store, &keys, &n.holder, 30_000, NOW, &a1).unwrap(),
        Undo::Nothing
    );
    assert_eq!(
        lock::state(store, &n.name, &n.holder).unwrap().hold_count,
        1
    );
    // Undone before it ran: refused when it arrives, for the holder as for
    // a waiter (which then does not queue).
    fair_lock::undo_acquire(store, &keys, "c3:1", 30_000, NOW, &a3).unwrap();
    let late = acquire("c3:1", &a3).unwrap_err();
    assert!(late.is_connection_error(), "{late}");
    fair_lock::cancel(store, &keys, "c2:1", 5_000).unwrap();
    assert_eq!(
        fair_lock::undo_acquire(store, &keys, &n.holder, 30_000, NOW, &a2).unwrap(),
        Undo::Released
    );
    assert!(!lock::state(store, &n.name, &n.holder).unwrap().locked);
    // Free, and nobody queued (the late attempt did not join the queue): a
    // newcomer that does not queue takes it at once.
    assert_eq!(
        fair_lock::acquire(store, &keys, "c4:1", 30_000, 5_000, NOW, false).unwrap(),
        Acquire::Acquired
    );
}

/// The read half's exact undo on one store: it removes its own hold's
/// read-hold key (the others keep theirs, renumbered 1..count, with their
/// own expiries), the hash lives as long as the longest remaining hold, a
/// resend takes no second hold, a late attempt is refused, and the last
/// undo frees the lock.
fn read_undo_is_exact(store: &dyn redisync::LockBackend) {
    use redisync::internal::lock::Acquire;
    use redisync::internal::{lock::Undo, rw_lock};
    let n = Names::new("exact-read", keys::rw_channel);
    let keys = n.rw();
    let (a1, a2, a3) = (n.attempt("a1"), n.attempt("a2"), n.attempt("a3"));
    // Hold 1 with a short lease (the attempt undone), hold 2 with a long one.
    assert_eq!(
        rw_lock::read_acquire_recorded(store, &keys, 20_000, Some(&a1)).unwrap(),
        Acquire::Acquired
    );
    assert_eq!(
        rw_lock::read_acquire_recorded(store, &keys, 20_000, Some(&a1)).unwrap(),
        Acquire::Acquired
    );
    assert_eq!(
        rw_lock::read_acquire_recorded(store, &keys, 90_000, Some(&a2)).unwrap(),
        Acquire::Acquired
    );
    assert_eq!(
        rw_lock::state(store, &n.name, &n.holder)
            .unwrap()
            .hold_count,
        2
    );
    assert_eq!(
        rw_lock::read_undo_acquire(store, &keys, 20_000, &a1).unwrap(),
        Undo::Removed
    );
    assert_eq!(
        rw_lock::read_undo_acquire(store, &keys, 20_000, &a1).unwrap(),
        Undo::Nothing
    );
    let state = rw_lock::state(store, &n.name, &n.holder).unwrap();
    assert_eq!(state.hold_count, 1);
    // The remaining hold is number 1 (no key 2) and keeps its own 90 s
    // lease: the hash, living as long as its longest hold, says so.
    let exists = |i: u32| {
        redisync::internal::counter::get(store, &format!("{}:{i}", n.timeout_prefix)).unwrap() == 1
    };
    assert!(exists(1) && !exists(2));
    assert!(
        state.ttl.is_some_and(|t| t > Duration::from_secs(60)),
        "{state:?}"
    );
    // Undone before it ran: refused when it arrives.
    rw_lock::read_undo_acquire(store, &keys, 20_000, &a3).unwrap();
    let late = rw_lock::read_acquire_recorded(store, &keys, 20_000, Some(&a3)).unwrap_err();
    assert!(late.is_connection_error(), "{late}");
    assert_eq!(
        rw_lock::state(store, &n.name, &n.holder)
            .unwrap()
            .hold_count,
        1
    );
    assert_eq!(
        rw_lock::read_undo_acquire(store, &keys, 90_000, &a2).unwrap(),
        Undo::Released
    );
    assert_eq!(
        rw_lock::state(store, &n.name, &n.holder).unwrap().mode,
        None
    );
    assert!(!exists(1));
}

/// The write half's exact undo on one store, and a downgraded writer: the
/// undo of its last write hold leaves its read hold, in read mode.
fn write_undo_is_exact(store: &dyn redisync::LockBackend) {
    use redisync::RwMode;
    use redisync::internal::lock::Acquire;
    use redisync::internal::{lock::Undo, rw_lock};
    let n = Names::new("exact-write", keys::rw_channel);
    let keys = n.rw();
    let (a1, a2, a3, r1) = (
        n.attempt("a1"),
        n.attempt("a2"),
        n.attempt("a3"),
        n.attempt("r1"),
    );
    for attempt in [&a1, &a1, &a2] {
        assert_eq!(
            rw_lock::write_acquire_recorded(store, &keys, 30_000, Some(attempt)).unwrap(),
            Acquire::Acquired
        );
    }
    assert_eq!(
        rw_lock::state(store, &n.name, &n.write_field)
            .unwrap()
            .hold_count,
        2
    );
    assert_eq!(
        rw_lock::write_undo_acquire(store, &keys, 30_000, &a1).unwrap(),
        Undo::Removed
    );
    assert_eq!(
        rw_lock::write_undo_acquire(store, &keys, 30_000, &a1).unwrap(),
        Undo::Nothing
    );
    assert_eq!(
        rw_lock::state(store, &n.name, &n.write_field)
            .unwrap()
            .hold_count,
        1
    );
    rw_lock::write_undo_acquire(store, &keys, 30_000, &a3).unwrap();
    let late = rw_lock::write_acquire_recorded(store, &keys, 30_000, Some(&a3)).unwrap_err();
    assert!(late.is_connection_error(), "{late}");
    // The writer also reads; undoing its last write hold downgrades.
    assert_eq!(
        rw_lock::read_acquire_recorded(store, &keys, 30_000, Some(&r1)).unwrap(),
        Acquire::Acquired
    );
    assert_eq!(
        rw_lock::write_undo_acquire(store, &keys, 30_000, &a2).unwrap(),
        Undo::Released
    );
    let state = rw_lock::state(store, &n.name, &n.holder).unwrap();
    assert_eq!((state.mode, state.hold_count), (Some(RwMode::Read), 1));
    assert_eq!(
        rw_lock::read_undo_acquire(store, &keys, 30_000, &r1).unwrap(),
        Undo::Released
    );
    assert_eq!(
        rw_lock::state(store, &n.name, &n.holder).unwrap().mode,
        None
    );
}

/// The fenced lock's exact undo on one store: a resend returns the same
/// token and no second hold; the undo removes its hold only; later tokens
/// keep growing.
fn fenced_undo_is_exact(store: &dyn redisync::LockBackend) {
    use redisync::internal::lock::{self, Undo};
    let n = Names::new("exact-fenced", keys::lock_channel);
    let counter = format!("redisson_lock_token:{{{}}}", n.name);
    let (a1, a2, a3, a4) = (
        n.attempt("a1"),
        n.attempt("a2"),
        n.attempt("a3"),
        n.attempt("a4"),
    );
    let acquire = |attempt: &str| {
        lock::fenced_acquire_recorded(store, &n.name, &counter, &n.holder, 30_000, Some(attempt))
    };
    let first = acquire(&a1).unwrap().token().unwrap();
    assert_eq!(
        acquire(&a1).unwrap().token(),
        Some(first),
        "a resend took a new token"
    );
    let second = acquire(&a2).unwrap().token().unwrap();
    assert!(second > first);
    assert_eq!(
        lock::state(store, &n.name, &n.holder).unwrap().hold_count,
        2
    );
    assert_eq!(
        lock::undo_acquire(store, &n.name, &n.channel, &n.holder, 30_000, &a1).unwrap(),
        Undo::Removed
    );
    assert_eq!(
        lock::undo_acquire(store, &n.name, &n.channel, &n.holder, 30_000, &a1).unwrap(),
        Undo::Nothing
    );
    assert_eq!(
        lock::state(store, &n.name, &n.holder).unwrap().hold_count,
        1
    );
    lock::undo_acquire(store, &n.name, &n.channel, &n.holder, 30_000, &a3).unwrap();
    assert!(acquire(&a3).unwrap_err().is_connection_error());
    assert_eq!(
        lock::state(store, &n.name, &n.holder).unwrap().hold_count,
        1
    );
    let third = acquire(&a4).unwrap().token().unwrap();
    assert!(third > second);
    for attempt in [&a4, &a2] {
        lock::undo_acquire(store, &n.name, &n.channel, &n.holder, 30_000, attempt).unwrap();
    }
    assert!(!lock::state(store, &n.name, &n.holder).unwrap().locked);
}

fn redis_store(server: &TestServer) -> redisync::RedisBackend {
    redisync::RedisBackend::open(&server.url()).unwrap()
}

#[test]
fn memory_fair_undo_is_exact() {
    fair_undo_is_exact(&redisync::MemoryBackend::new());
}

#[test]
fn redis_fair_undo_is_exact() {
    let server = TestServer::start();
    fair_undo_is_exact(&redis_store(&server));
}

#[test]
fn memory_read_undo_is_exact() {
    read_undo_is_exact(&redisync::MemoryBackend::new());
}

#[test]
fn redis_read_undo_is_exact() {
    let server = TestServer::start();
    read_undo_is_exact(&redis_store(&server));
}

#[test]
fn memory_write_undo_is_exact() {
    write_undo_is_exact(&redisync::MemoryBackend::new());
}

#[test]
fn redis_write_undo_is_exact() {
    let server = TestServer::start();
    write_undo_is_exact(&redis_store(&server));
}

#[test]
fn memory_fenced_undo_is_exact() {
    fenced_undo_is_exact(&redisync::MemoryBackend::new());
}

#[test]
fn redis_fenced_undo_is_exact() {
    let server = TestServer::start();
    fenced_undo_is_exact(&redis_store(&server));
}
