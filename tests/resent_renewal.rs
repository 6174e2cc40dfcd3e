//! Issue 32, item 4: a renewal renews only the hold it was sent for (the
//! acquire attempt whose record it names), so a late or resent renewal
//! never extends a later hold of the same holder.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::delay_proxy::DelayProxy;
use common::{TestServer, unique_name};
use redisync::Client;

const LUA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");

/// The watchdog's lease: longer than the fixed lease the thread takes next
/// (2 s), so that a renewal landing on that hold would stretch it.
const WATCHDOG: Duration = Duration::from_secs(3);

/// The source the client loads for `lua/<file>.lua`: the renewal's
/// preludes (those that exist: the window, the argument checks, the record
/// check) and the script, as `src/ops/` defines it.
fn renewal_source(file: &str) -> String {
    let mut source = String::new();
    for part in ["window_prelude", "args_prelude", "renew_prelude", file] {
        let path = Path::new(LUA_DIR).join(format!("{part}.lua"));
        if let Ok(text) = std::fs::read_to_string(&path) {
            source.push_str(&text);
        } else {
            assert_ne!(part, file, "cannot read {}", path.display());
        }
    }
    source
}

/// The SHA-1 the client sends with EVALSHA for `lua/<file>.lua`.
fn renewal_sha(file: &str) -> String {
    redis::Script::new(&renewal_source(file))
        .get_hash()
        .to_owned()
}

fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(conn).unwrap()
}

/// The renewal scripts (as the watchdog may send them: one hold with its
/// record, or a batch).
const RENEWALS: [&str; 4] = [
    "lock_renew",
    "lock_renew_batch",
    "read_lock_renew",
    "read_lock_renew_batch",
];

/// The failing case of issue 32, for the lock `lock_of` makes: the
/// watchdog's renewal is held by a middlebox and the client's side of its
/// connection drops; the client resends it at once (it renews); the thread
/// unlocks and takes the lock again with a fixed 2 s lease; the held
/// original is delivered then, inside its window. It names the released
/// hold's attempt, so the server renews nothing: the 2 s lease is not
/// stretched to the watchdog's 3 s.
fn a_late_renewal_does_not_stretch_the_next_hold(
    what: &str,
    lock_of: impl Fn(&Client, &str) -> redisync::Lock,
) {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let client = Client::builder()
        .redis_url(proxy.url())
        .pool_size(4)
        // The original must still be inside its window when delivered.
        .response_timeout(Duration::from_secs(10))
        .watchdog_timeout(WATCHDOG)
        .build()
        .unwrap();
    let mut direct = server.connection();
    let name = unique_name(&format!("resent-renewal:{what}"));
    let lock = lock_of(&client, &name);
    // The renewal scripts loaded (a renewal's first EVALSHA would be
    // answered NOSCRIPT, and the late copy would find none), as the client
    // sends them.
    for file in RENEWALS {
        let loaded: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(renewal_source(file))
            .query(&mut direct)
            .unwrap();
        assert_eq!(loaded, renewal_sha(file));
    }

    let guard = lock.lock().unwrap();
    // The next request naming the lock is its renewal (due a third of the
    // watchdog timeout after the acquisition).
    proxy.hold_next_and_cut(name.as_bytes());
    proxy.wait_held(Duration::from_secs(10));
    let held = String::from_utf8_lossy(&proxy.held_request()).into_owned();
    assert!(held.contains("EVALSHA"), "{what}: not a script: {held:?}");
    assert!(
        RENEWALS
            .iter()
            .any(|file| held.contains(&renewal_sha(file))),
        "{what}: not a renewal script: {held:?}"
    );
    assert!(
        held.contains(&name),
        "{what}: not this lock's renewal: {held:?}"
    );
    // The resend renews: the lease runs a full watchdog timeout again.
    let until = Instant::now() + Duration::from_secs(5);
    while pttl(&mut direct, &name) < 2_500 {
        assert!(
            Instant::now() < until,
            "{what}: the resent renewal did not renew"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!guard.is_lost());
    guard.unlock().unwrap();
    let next = lock.lock_with_lease(Duration::from_secs(2)).unwrap();

    proxy.deliver();
    let (sent, reply) = proxy.last_delivery();
    assert!(
        sent.contains(&name),
        "{what}: delivered something else: {sent:?}"
    );
    // Answered, not refused as late (it is inside its window): 0, not renewed.
    assert!(
        reply.starts_with(":0\r\n") || reply.starts_with("*1\r\n:0\r\n"),
        "{what}: the late renewal was not answered 'not renewed': {reply:?}"
    );
    let ttl = pttl(&mut direct, &name);
    assert!(
        (1..=2_000).contains(&ttl),
        "{what}: the 2 s lease was stretched to {ttl} ms by the late renewal"
    );
    assert!(!next.is_lost());
    next.unlock().unwrap();
}

#[test]
fn a_resent_watchdog_renewal_delivered_late_does_not_stretch_the_next_hold() {
    a_late_renewal_does_not_stretch_the_next_hold("reentrant", |client, name| client.lock(name));
}

#[test]
fn a_resent_fenced_renewal_delivered_late_does_not_stretch_the_next_hold() {
    a_late_renewal_does_not_stretch_the_next_hold("fenced", |client, name| {
        client.fenced_lock(name)
    });
}

#[test]
fn a_resent_fair_renewal_delivered_late_does_not_stretch_the_next_hold() {
    a_late_renewal_does_not_stretch_the_next_hold("fair", |client, name| client.fair_lock(name));
}

#[test]
fn a_resent_write_renewal_delivered_late_does_not_stretch_the_next_hold() {
    a_late_renewal_does_not_stretch_the_next_hold("write", |client, name| {
        client.read_write_lock(name).write_lock()
    });
}

#[test]
fn a_resent_read_renewal_delivered_late_does_not_stretch_the_next_hold() {
    a_late_renewal_does_not_stretch_the_next_hold("read", |client, name| {
        client.read_write_lock(name).read_lock()
    });
}

/// The scripts themselves, on the in-memory store: a renewal naming a
/// released hold's attempt renews nothing, not the same holder's next hold
/// (alone or in a batch); one naming the live hold's attempt renews it and
/// keeps its record as long as the lease; none named: the holder check.
#[test]
fn a_renewal_naming_a_released_attempt_renews_nothing() {
    use redisync::internal::lock::{self, RecordKind, Release};
    let store = redisync::MemoryBackend::new();
    let name = "resent-renewal:memory";
    let other = "resent-renewal:memory:other";
    let channel = "redisson_lock__channel:{resent-renewal:memory}";
    let holder = "c1:1";
    let first = "{resent-renewal:memory}:redisync_attempt:a1";
    let second = "{resent-renewal:memory}:redisync_attempt:a2";
    let other_record = "{resent-renewal:memory:other}:redisync_attempt:a3";

    assert!(
        lock::acquire_recorded(&store, name, holder, 30_000, Some(first))
            .unwrap()
            .is_acquired()
    );
    // The first attempt's record is its release's latch.
    let released = lock::release(&store, name, channel, holder, 30_000, first, 10_000).unwrap();
    assert_eq!(released, Release::Released);
    assert!(
        lock::acquire_recorded(&store, name, holder, 2_000, Some(second))
            .unwrap()
            .is_acquired()
    );
    let ttl = |name: &str| lock::state(&store, name, holder).unwrap().ttl.unwrap();

    let late = Some((first, RecordKind::Taken));
    assert!(!lock::renew_recorded(&store, name, holder, 30_000, late).unwrap());
    assert!(
        ttl(name) <= Duration::from_secs(2),
        "stretched to {:?}",
        ttl(name)
    );

    assert!(
        lock::acquire_recorded(&store, other, holder, 30_000, Some(other_record))
            .unwrap()
            .is_acquired()
    );
    let renewed = lock::renew_many_recorded(
        &store,
        &[
            (name, holder, Some(first)),
            (other, holder, Some(other_record)),
        ],
        RecordKind::Taken,
        30_000,
    )
    .unwrap();
    assert_eq!(renewed, [false, true]);
    assert!(
        ttl(name) <= Duration::from_secs(2),
        "stretched to {:?}",
        ttl(name)
    );

    // The live hold's own attempt renews it, and its record lives as long.
    let live = Some((second, RecordKind::Taken));
    assert!(lock::renew_recorded(&store, name, holder, 30_000, live).unwrap());
    assert!(ttl(name) > Duration::from_secs(29));
    let record_ttl = store
        .dump()
        .into_iter()
        .find(|key| key.key == second)
        .and_then(|key| key.pttl_ms)
        .expect("the live hold's record with a TTL");
    assert!(
        record_ttl > 29_000,
        "the record expires before the lease: {record_ttl} ms"
    );

    // Without a record (Redisson's call, a hold handed over): the holder.
    assert!(lock::renew_recorded(&store, name, holder, 30_000, None).unwrap());
    assert!(!lock::renew_recorded(&store, name, "c1:2", 30_000, None).unwrap());
}

/// A hold that ended without its release (its lease ran out during a
/// frozen server or a held-up renewal; here, as the scripts see it, freed
/// by a force unlock while its record lives on), then released: the
/// release finds nothing to release and marks the lapsed hold's record, so
/// a renewal of that hold still on its way does not renew the same
/// holder's next hold (reentrant, write and fair locks; the scripts on the
/// in-memory store). Before, the record kept saying `taken` and the
/// renewal stretched the next 2 s hold to 30 s.
#[test]
fn a_renewal_of_a_hold_that_lapsed_does_not_renew_the_next_hold() {
    use redisync::internal::fair_lock::{self, FairLockKeys};
    use redisync::internal::lock::{self, RecordKind, Release};
    use redisync::internal::rw_lock::{self, RwLockKeys};
    let store = redisync::MemoryBackend::new();
    let ttl_ms = |name: &str| {
        store
            .dump()
            .into_iter()
            .find(|key| key.key == name)
            .and_then(|key| key.pttl_ms)
            .expect("the next hold, with a TTL")
    };

    // Reentrant.
    let name = "lapsed-renewal:reentrant";
    let channel = "redisson_lock__channel:{lapsed-renewal:reentrant}";
    let (first, second) = (
        "{lapsed-renewal:reentrant}:redisync_attempt:a1",
        "{lapsed-renewal:reentrant}:redisync_attempt:a2",
    );
    assert!(
        lock::acquire_recorded(&store, name, "c1:1", 30_000, Some(first))
            .unwrap()
            .is_acquired()
    );
    assert!(lock::force_release(&store, name, channel).unwrap());
    let released = lock::release(&store, name, channel, "c1:1", 30_000, first, 10_000).unwrap();
    assert_eq!(released, Release::NotHeld);
    assert!(
        lock::acquire_recorded(&store, name, "c1:1", 2_000, Some(second))
            .unwrap()
            .is_acquired()
    );
    let late = Some((first, RecordKind::Taken));
    assert!(
        !lock::renew_recorded(&store, name, "c1:1", 30_000, late).unwrap(),
        "reentrant: the lapsed hold's renewal renewed the next hold"
    );
    assert!(
        ttl_ms(name) <= 2_000,
        "reentrant: stretched to {} ms",
        ttl_ms(name)
    );
    // A copy of the release reads the same outcome.
    let again = lock::release(&store, name, channel, "c1:1", 30_000, first, 10_000).unwrap();
    assert_eq!(again, Release::NotHeld);
    assert!(ttl_ms(name) > 0, "the copy released the next hold");

    // Write half (renewed by the same script as the reentrant lock).
    let keys = RwLockKeys {
        name: "lapsed-renewal:rw",
        channel: "redisson_rwlock:{lapsed-renewal:rw}",
        holder: "c1:1",
        write_field: "c1:1:write",
        timeout_prefix: "{lapsed-renewal:rw}:c1:1:rwlock_timeout",
        key_prefix: "{lapsed-renewal:rw}",
    };
    let (first, second) = (
        "{lapsed-renewal:rw}:redisync_attempt:w1",
        "{lapsed-renewal:rw}:redisync_attempt:w2",
    );
    rw_lock::write_acquire_recorded(&store, &keys, 30_000, Some(first)).unwrap();
    assert!(rw_lock::force_release(&store, &keys, redisync::RwMode::Write).unwrap());
    assert_eq!(
        rw_lock::write_release(&store, &keys, 30_000, first, 10_000).unwrap(),
        Release::NotHeld
    );
    rw_lock::write_acquire_recorded(&store, &keys, 2_000, Some(second)).unwrap();
    let late = Some((first, RecordKind::Taken));
    assert!(
        !lock::renew_recorded(&store, keys.name, keys.write_field, 30_000, late).unwrap(),
        "write: the lapsed hold's renewal renewed the next hold"
    );
    assert!(
        ttl_ms(keys.name) <= 2_000,
        "write: stretched to {} ms",
        ttl_ms(keys.name)
    );

    // Fair: the lapsed hold's lock taken by another holder meanwhile.
    let keys = FairLockKeys {
        name: "lapsed-renewal:fair",
        queue: "redisson_lock_queue:{lapsed-renewal:fair}",
        timeouts: "redisson_lock_timeout:{lapsed-renewal:fair}",
        channel_prefix: "redisson_lock__channel:{lapsed-renewal:fair}",
    };
    let (first, second, other) = (
        "{lapsed-renewal:fair}:redisync_attempt:f1",
        "{lapsed-renewal:fair}:redisync_attempt:f2",
        "{lapsed-renewal:fair}:redisync_attempt:f3",
    );
    let now = || {
        i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap()
    };
    let taken = |holder: &str, lease: i64, record: &str| {
        fair_lock::acquire_recorded(
            &store,
            &keys,
            holder,
            lease,
            5_000,
            now(),
            false,
            Some(record),
        )
        .unwrap()
        .is_acquired()
    };
    assert!(taken("c1:1", 30_000, first));
    assert!(fair_lock::force_release(&store, &keys, now()).unwrap());
    assert!(taken("c2:1", 30_000, other));
    assert_eq!(
        fair_lock::release(&store, &keys, "c1:1", 30_000, now(), first, 10_000).unwrap(),
        Release::NotHeld
    );
    assert_eq!(
        fair_lock::release(&store, &keys, "c2:1", 30_000, now(), other, 10_000).unwrap(),
        Release::Released
    );
    assert!(taken("c1:1", 2_000, second));
    let late = Some((first, RecordKind::Taken));
    assert!(
        !lock::renew_recorded(&store, keys.name, "c1:1", 30_000, late).unwrap(),
        "fair: the lapsed hold's renewal renewed the next hold"
    );
    assert!(
        ttl_ms(keys.name) <= 2_000,
        "fair: stretched to {} ms",
        ttl_ms(keys.name)
    );
}
