//! The limits of every duration and count redisync sends to its scripts.
//!
//! A Lua runtime error inside a Redis script does not undo the writes made
//! before it: a lease Redis refuses (`PEXPIRE` "invalid expire time") used
//! to leave the lock hash behind with no TTL at all. Now:
//!
//! - the API refuses, with `InvalidArgument` and before anything is sent,
//!   every duration past [`MAX_LEASE`] (2^47 ms) or under 1 ms, and every
//!   count past `i64::MAX`; the largest and smallest accepted values work
//!   and leave keys with a positive TTL where the operation sets one;
//! - counts that only the stored value can show to overflow fail with a
//!   protocol error and change nothing;
//! - the backends refuse such arguments too (MemoryBackend: `InvalidArgument`);
//! - the scripts themselves, called directly with EVALSHA, reply with an
//!   error before their first write (the Redis-only cases at the end).
//!
//! Cases written once run on both backends (`backend_tests!`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use common::keys;
use common::timing::STUCK;
use common::{Env, Store, backend_tests, unique_name};
use redisync::internal::expirable::ExpirableKeys;
use redisync::internal::fair_lock::FairLockKeys;
use redisync::{Client, Lock, MAX_LEASE, MultiLock};

backend_tests!(
    lock_leases_at_the_limits,
    watchdog_timeout_at_the_limits,
    fair_lock_wait_timeout_at_the_limits,
    fair_waits_of_any_length_are_accepted,
    permit_leases_at_the_limits,
    semaphore_counts_at_the_limits,
    latch_counts_at_the_limits,
    multi_lock_lease_at_the_limits,
    backends_refuse_out_of_range_arguments,
);

/// One millisecond.
const MS: Duration = Duration::from_millis(1);
/// [`MAX_LEASE`] in ms.
const MAX_MS: i64 = 1 << 47;

/// The first durations past the limit, up to what users have actually sent
/// (`Duration::from_millis(i64::MAX as u64)`) and `Duration::MAX`.
fn too_long() -> [Duration; 4] {
    [
        MAX_LEASE + MS,
        Duration::from_millis(u64::try_from(MAX_MS).unwrap() * 2),
        Duration::from_millis(u64::try_from(i64::MAX).unwrap()),
        Duration::MAX,
    ]
}

/// Durations under the limit at the short end: under 1 ms.
fn too_short() -> [Duration; 2] {
    [Duration::ZERO, Duration::from_micros(999)]
}

fn assert_invalid(result: redisync::Result<()>, what: &str) {
    match result {
        Err(err) => assert!(
            err.is_invalid_argument(),
            "{what}: expected InvalidArgument, got {err:?}"
        ),
        Ok(()) => panic!("{what}: accepted"),
    }
}

/// The keys the store holds (memory: live keys; Redis: KEYS *); `None` on
/// the shared cluster, where other cases' keys come and go.
fn stored_keys(env: &Env) -> Option<std::collections::BTreeSet<String>> {
    match &env.store {
        Store::Memory(backend) => Some(backend.dump().into_iter().map(|k| k.key).collect()),
        Store::Redis(server) => Some(
            ::redis::cmd("KEYS")
                .arg("*")
                .query(&mut server.connection())
                .unwrap(),
        ),
        #[cfg(feature = "cluster")]
        Store::Cluster(_) => None,
    }
}

/// The keys stored since `before` was read: none may be, after refused
/// calls. (Keys that expired meanwhile, e.g. an earlier unlock's 10 s
/// latch on a slow machine, do not count.)
fn new_keys(env: &Env, before: &Option<std::collections::BTreeSet<String>>) -> Vec<String> {
    match (before, stored_keys(env)) {
        (Some(before), Some(after)) => after.difference(before).cloned().collect(),
        _ => Vec::new(),
    }
}

/// `PTTL key` where the store is Redis; `None` on memory.
fn raw_pttl(env: &Env, key: &str) -> Option<i64> {
    env.redis_connection()
        .map(|mut conn| common::pttl(&mut conn, key))
}

/// The kinds of lock that take a lease, by name.
fn lock_kinds(client: &Client, name: &str) -> [(&'static str, Lock); 5] {
    let rw = client.read_write_lock(format!("{name}:rw"));
    [
        ("lock", client.lock(format!("{name}:plain"))),
        ("fenced lock", client.fenced_lock(format!("{name}:fenced"))),
        ("fair lock", client.fair_lock(format!("{name}:fair"))),
        ("read lock", rw.read_lock()),
        ("write lock", rw.write_lock()),
    ]
}

/// A held lock's remaining TTL is positive and at most `at_most`, by the
/// API and (on Redis) by PTTL of its hash.
fn assert_ttl(env: &Env, lock: &Lock, what: &str, at_least: Duration, at_most: Duration) {
    let ttl = lock
        .remaining_ttl()
        .unwrap()
        .unwrap_or_else(|| panic!("{what}: held without a TTL"));
    assert!(
        ttl >= at_least && ttl <= at_most,
        "{what}: TTL {ttl:?} not within {at_least:?}..={at_most:?}"
    );
    if let Some(pttl) = raw_pttl(env, lock.name()) {
        let pttl = u64::try_from(pttl).unwrap_or_else(|_| panic!("{what}: PTTL {pttl}"));
        assert!(pttl > 0, "{what}: PTTL {pttl}");
        assert!(
            Duration::from_millis(pttl) <= at_most,
            "{what}: PTTL {pttl}"
        );
    }
}

// ---------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------

/// Every lock kind: leases past the limit or under 1 ms are refused, free
/// or held (reentry), and change nothing; MAX_LEASE and 1 ms work.
fn lock_leases_at_the_limits(env: &Env) {
    let client = env.client();
    let name = unique_name("limits:lease");
    for (what, lock) in lock_kinds(&client, &name) {
        let before = stored_keys(env);
        for lease in too_long().into_iter().chain(too_short()) {
            let case = format!("{what}, lease {lease:?}");
            assert_invalid(lock.lock_with_lease(lease).map(drop), &case);
            assert_invalid(
                lock.try_lock_for_with_lease(MS * 10, lease).map(drop),
                &case,
            );
            assert!(!lock.is_locked().unwrap(), "{case}: locked");
        }
        let stored = new_keys(env, &before);
        assert!(
            stored.is_empty(),
            "{what}: a refused lease stored keys {stored:?}"
        );

        // The largest lease: held, with a positive TTL of about 2^47 ms.
        let guard = lock.lock_with_lease(MAX_LEASE).unwrap();
        let year = Duration::from_secs(365 * 24 * 3600);
        assert_ttl(env, &lock, what, MAX_LEASE - year, MAX_LEASE);
        // A refused reentry leaves the hold as it was.
        for lease in too_long() {
            assert_invalid(lock.lock_with_lease(lease).map(drop), what);
            assert_eq!(
                lock.hold_count().unwrap(),
                1,
                "{what}: a refused reentry counted"
            );
        }
        // Reentry with the largest lease again: the write lock adds it to
        // the remaining TTL, capped at MAX_LEASE; the others reset to it.
        let inner = lock.lock_with_lease(MAX_LEASE).unwrap();
        assert_eq!(lock.hold_count().unwrap(), 2, "{what}");
        assert_ttl(env, &lock, what, MAX_LEASE - year, MAX_LEASE);
        inner.unlock().unwrap();
        guard.unlock().unwrap();
        assert!(!lock.is_locked().unwrap(), "{what}");

        // The smallest lease: held, and gone by itself soon after (so it
        // had a TTL, not none).
        let guard = lock.lock_with_lease(MS).unwrap();
        common::wait_until(&format!("{what}: a 1 ms lease expired"), STUCK, || {
            !lock.is_locked().unwrap()
        });
        assert!(guard.is_lost(), "{what}");
    }
}

/// The watchdog timeout becomes every watched lease: MAX_LEASE and 3 ms
/// (renewed every third) build, one more or one less does not.
fn watchdog_timeout_at_the_limits(env: &Env) {
    for timeout in too_long().into_iter().chain([MS * 2, MS, Duration::ZERO]) {
        let built = env.builder().watchdog_timeout(timeout).build();
        assert_invalid(built.map(drop), &format!("watchdog_timeout {timeout:?}"));
    }
    let client = env.client_with_watchdog(MAX_LEASE);
    let lock = client.lock(unique_name("limits:watchdog"));
    let guard = lock.lock().unwrap();
    let year = Duration::from_secs(365 * 24 * 3600);
    assert_ttl(
        env,
        &lock,
        "watchdog MAX_LEASE",
        MAX_LEASE - year,
        MAX_LEASE,
    );
    guard.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());

    let client = env.client_with_watchdog(MS * 3);
    assert_eq!(client.watchdog_timeout(), MS * 3);
}

/// The fair-lock wait timeout is each queued waiter's allowance (added to
/// the clock in the queue's scores): MAX_LEASE and 1 ms work, a waiter
/// with the largest one queues and gets the lock, longer ones are refused.
fn fair_lock_wait_timeout_at_the_limits(env: &Env) {
    for timeout in too_long().into_iter().chain(too_short()) {
        let built = env.builder().fair_lock_wait_timeout(timeout).build();
        assert_invalid(
            built.map(drop),
            &format!("fair_lock_wait_timeout {timeout:?}"),
        );
    }
    let name = unique_name("limits:fair-wait");
    let holder = env.client();
    let waiter = env
        .builder()
        .fair_lock_wait_timeout(MAX_LEASE)
        .build()
        .unwrap();
    let held = holder.fair_lock(name.as_str()).lock().unwrap();
    assert!(
        waiter
            .fair_lock(name.as_str())
            .try_lock()
            .unwrap()
            .is_none()
    );
    let queued = waiter.fair_lock(name.as_str());
    let waiting = thread::spawn(move || {
        let guard = queued.lock().unwrap();
        guard.unlock().unwrap();
    });
    thread::sleep(Duration::from_millis(200));
    held.unlock().unwrap();
    join_within(waiting, "the waiter with the largest allowance");
    assert!(!holder.fair_lock(name.as_str()).is_locked().unwrap());

    let short = env.builder().fair_lock_wait_timeout(MS).build().unwrap();
    assert_eq!(short.fair_lock_wait_timeout(), MS);
    drop(short.fair_lock(name.as_str()).lock().unwrap());
}

/// A `try_lock_for` wait sets a fair waiter's allowance; a wait of any
/// length is a valid wait, so the allowance is capped at MAX_LEASE rather
/// than refused.
fn fair_waits_of_any_length_are_accepted(env: &Env) {
    let name = unique_name("limits:fair-any-wait");
    let a = env.client();
    let b = env.client();
    let lock = a.fair_lock(name.as_str());
    drop(lock.try_lock_for(Duration::MAX).unwrap().expect("free"));
    let held = lock.lock().unwrap();
    let other = b.fair_lock(name.as_str());
    let waiting = thread::spawn(move || {
        let guard = other
            .try_lock_for_with_lease(Duration::MAX, MAX_LEASE)
            .unwrap()
            .expect("the lock after its unlock");
        guard.unlock().unwrap();
    });
    thread::sleep(Duration::from_millis(200));
    held.unlock().unwrap();
    join_within(waiting, "the waiter with Duration::MAX");
}

/// Permit leases end at the caller's clock plus the lease (a zset score):
/// refused past MAX_LEASE or under 1 ms without taking a permit; the
/// largest and smallest work, and the 1 ms one returns by itself.
fn permit_leases_at_the_limits(env: &Env) {
    let client = env.client();
    let name = unique_name("limits:permits");
    let permits = client.permit_expirable_semaphore(name.as_str());
    assert!(permits.try_set_permits(2).unwrap());
    for lease in too_long().into_iter().chain(too_short()) {
        let case = format!("permit lease {lease:?}");
        assert_invalid(permits.try_acquire_id(lease).map(drop), &case);
        assert_invalid(permits.acquire_id(lease).map(drop), &case);
        assert_invalid(permits.try_acquire_id_for(MS, lease).map(drop), &case);
        assert_eq!(permits.available_permits().unwrap(), 2, "{case}");
    }
    let start_ms = epoch_ms();
    let long = permits
        .try_acquire_id(MAX_LEASE)
        .unwrap()
        .expect("a permit");
    assert_eq!(permits.available_permits().unwrap(), 1);
    if let Some(mut conn) = env.redis_connection() {
        // Stored as the bytes its hex digits spell, as Redisson stores ids.
        let hex = long.as_str();
        let member: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let score: f64 = ::redis::cmd("ZSCORE")
            .arg(keys::permit_timeouts(&name))
            .arg(member)
            .query(&mut conn)
            .unwrap();
        let expected = (start_ms + MAX_MS) as f64;
        assert!(
            (score - expected).abs() < 60_000.0,
            "lease end {score}, expected about {expected}"
        );
    }
    let short = permits.try_acquire_id(MS).unwrap().expect("a permit");
    common::wait_until("the 1 ms permit returned", STUCK, || {
        permits.available_permits().unwrap() == 1
    });
    assert!(!permits.try_release(&short).unwrap());
    permits.release(&long).unwrap();
    assert_eq!(permits.available_permits().unwrap(), 2);
}

/// Permit counts: past i64::MAX refused before sending; an add that only
/// the stored count shows to overflow is a protocol error that changes
/// nothing; the extremes work.
fn semaphore_counts_at_the_limits(env: &Env) {
    let client = env.client();
    let name = unique_name("limits:semaphore");
    let semaphore = client.semaphore(name.as_str());
    let first_too_many = u64::try_from(i64::MAX).unwrap() + 1;
    let max = u64::try_from(i64::MAX).unwrap();
    let before = stored_keys(env);
    assert_invalid(
        semaphore.try_set_permits(first_too_many).map(drop),
        "try_set_permits",
    );
    assert_invalid(
        semaphore.try_set_permits(u64::MAX).map(drop),
        "try_set_permits",
    );
    let stored = new_keys(env, &before);
    assert!(stored.is_empty(), "a refused count stored keys {stored:?}");
    assert_eq!(semaphore.available_permits().unwrap(), 0);

    assert!(semaphore.try_set_permits(max).unwrap());
    assert_eq!(semaphore.available_permits().unwrap(), i64::MAX);
    for result in [semaphore.add_permits(1), semaphore.release(1)] {
        let err = result.unwrap_err();
        assert!(err.is_protocol_error(), "{err:?}");
        assert_eq!(semaphore.available_permits().unwrap(), i64::MAX);
    }
    assert_invalid(semaphore.release(first_too_many), "release");
    assert_invalid(
        semaphore.try_acquire(first_too_many).map(drop),
        "try_acquire",
    );
    assert_invalid(semaphore.try_acquire(0).map(drop), "try_acquire 0");
    assert_eq!(semaphore.available_permits().unwrap(), i64::MAX);

    // The whole count at once, exactly (beyond 2^53 a double would round).
    let all = semaphore.try_acquire(max).unwrap().expect("every permit");
    assert_eq!(semaphore.available_permits().unwrap(), 0);
    assert_eq!(all.forget(), max);
    assert!(semaphore.try_acquire(1).unwrap().is_none());
    semaphore.add_permits(i64::MIN).unwrap();
    let err = semaphore.add_permits(-1).unwrap_err();
    assert!(err.is_protocol_error(), "{err:?}");
    assert_eq!(semaphore.available_permits().unwrap(), i64::MIN);

    // One permit short of a count just past 2^53 is not enough (as Lua
    // doubles, 2^53 + 3 and 2^53 + 4 are equal: the old script took them).
    let exact = client.semaphore(unique_name("limits:semaphore-exact"));
    let big = (1_u64 << 53) + 3;
    assert!(exact.try_set_permits(big).unwrap());
    assert!(exact.try_acquire(big + 1).unwrap().is_none());
    assert_eq!(exact.available_permits().unwrap(), (1_i64 << 53) + 3);
    let taken = exact.try_acquire(big).unwrap().expect("exactly enough");
    assert_eq!(taken.forget(), big);
    assert_eq!(exact.available_permits().unwrap(), 0);
}

/// A latch count past i64::MAX is refused before sending; i64::MAX works.
fn latch_counts_at_the_limits(env: &Env) {
    let client = env.client();
    let latch = client.count_down_latch(unique_name("limits:latch"));
    let first_too_many = u64::try_from(i64::MAX).unwrap() + 1;
    assert_invalid(
        latch.try_set_count(first_too_many).map(drop),
        "try_set_count",
    );
    assert_invalid(latch.try_set_count(u64::MAX).map(drop), "try_set_count");
    assert_eq!(latch.count().unwrap(), 0);
    assert!(
        latch
            .try_set_count(u64::try_from(i64::MAX).unwrap())
            .unwrap()
    );
    assert_eq!(latch.count().unwrap(), i64::MAX);
    latch.count_down().unwrap();
    assert_eq!(latch.count().unwrap(), i64::MAX - 1);
}

/// A multi-lock checks its lease before taking any part.
fn multi_lock_lease_at_the_limits(env: &Env) {
    let client = env.client();
    let name = unique_name("limits:multi");
    let parts = [
        client.lock(format!("{name}:a")),
        client.fair_lock(format!("{name}:b")),
    ];
    let multi = MultiLock::new(parts.clone()).unwrap();
    for lease in too_long().into_iter().chain(too_short()) {
        assert_invalid(multi.lock_with_lease(lease).map(drop), "multi-lock");
        assert!(parts.iter().all(|p| !p.is_locked().unwrap()));
    }
    let guard = multi.lock_with_lease(MAX_LEASE).unwrap();
    for part in &parts {
        assert_ttl(env, part, "multi-lock part", MAX_LEASE / 2, MAX_LEASE);
    }
    guard.unlock().unwrap();
}

/// The backends themselves (as a `LockBackend` user would call them)
/// refuse out-of-range arguments and change nothing: MemoryBackend with
/// `InvalidArgument`; RedisBackend with the scripts' error reply.
fn backends_refuse_out_of_range_arguments(env: &Env) {
    let client = env.client();
    let backend = client.backend();
    let name = unique_name("limits:backend");
    let holder = client.current_holder_id();
    let memory = matches!(env.store, Store::Memory(_));
    let refused = |result: redisync::Result<()>, what: &str| match result {
        Err(err) if memory => assert!(err.is_invalid_argument(), "{what}: {err:?}"),
        Err(err) => {
            assert!(!err.is_connection_error(), "{what}: {err:?}");
            assert!(
                common::all_error_text(&err).contains("invalid"),
                "{what}: {err:?}"
            );
        }
        Ok(()) => panic!("{what}: accepted"),
    };
    for ms in [0, -1, MAX_MS + 1, i64::MAX] {
        refused(
            redisync::internal::lock::acquire(backend, &name, &holder, ms).map(drop),
            &format!("lock_acquire {ms}"),
        );
        refused(
            redisync::internal::lock::fenced_acquire(
                backend,
                &name,
                &keys::fence_counter(&name),
                &holder,
                ms,
            )
            .map(drop),
            &format!("fenced_lock_acquire {ms}"),
        );
        assert!(
            !redisync::internal::lock::state(backend, &name, &holder)
                .unwrap()
                .locked,
            "{ms}"
        );
    }
    if let Some(mut conn) = env.redis_connection() {
        let exists: i64 = ::redis::cmd("EXISTS")
            .arg(keys::fence_counter(&name))
            .query(&mut conn)
            .unwrap();
        assert_eq!(exists, 0, "a refused fenced acquisition took a token");
    }

    // Held twice: a release or renewal with a bad lease or latch changes
    // neither the hold count nor the TTL.
    assert!(
        redisync::internal::lock::acquire(backend, &name, &holder, 60_000)
            .unwrap()
            .is_acquired()
    );
    assert!(
        redisync::internal::lock::acquire(backend, &name, &holder, 60_000)
            .unwrap()
            .is_acquired()
    );
    let channel = keys::lock_channel(&name);
    let latch = format!("redisson_unlock_latch:{{{name}}}:limits");
    for (lease, latch_ms) in [(MAX_MS + 1, 5_000), (60_000, MAX_MS + 1), (60_000, 0)] {
        let what = format!("lock_release lease {lease} latch {latch_ms}");
        refused(
            redisync::internal::lock::release(
                backend, &name, &channel, &holder, lease, &latch, latch_ms,
            )
            .map(drop),
            &what,
        );
        let state = redisync::internal::lock::state(backend, &name, &holder).unwrap();
        assert_eq!(state.hold_count, 2, "{what}");
        assert!(
            state.ttl.is_some_and(|ttl| ttl <= Duration::from_secs(60)),
            "{what}"
        );
    }

    for lease in [MAX_MS + 1, 0, -1] {
        refused(
            redisync::internal::lock::renew(backend, &name, &holder, lease).map(drop),
            &format!("lock_renew {lease}"),
        );
        let state = redisync::internal::lock::state(backend, &name, &holder).unwrap();
        assert!(
            state.ttl.is_some_and(|ttl| ttl <= Duration::from_secs(60)),
            "renew {lease}"
        );
    }

    // The fair lock's allowance and clock, the permit lease end (keys
    // tagged {name}: one cluster slot).
    let queue = format!("redisson_lock_queue:{{{name}}}:f");
    let timeouts = format!("redisson_lock_timeout:{{{name}}}:f");
    let fair_name = format!("{{{name}}}:f");
    let fair = FairLockKeys {
        name: &fair_name,
        queue: &queue,
        timeouts: &timeouts,
        channel_prefix: &channel,
    };
    let now = epoch_ms();
    for (allowance, clock) in [(MAX_MS + 1, now), (0, now), (5_000, -1), (5_000, 1 << 49)] {
        refused(
            redisync::internal::fair_lock::acquire(
                backend, &fair, &holder, 60_000, allowance, clock, true,
            )
            .map(drop),
            &format!("fair_lock_acquire allowance {allowance} now {clock}"),
        );
    }
    assert!(
        !redisync::internal::lock::state(backend, &fair_name, &holder)
            .unwrap()
            .locked
    );
    let permits = format!("{{{name}}}:p");
    let leases = format!("{{{name}}}:p:timeout");
    let sc = format!("redisson_sc:{{{name}}}:p");
    let expirable = ExpirableKeys {
        name: &permits,
        leases: &leases,
        channel: &sc,
    };
    assert!(redisync::internal::counter::set_if_absent(backend, &permits, &sc, 1, "1").unwrap());
    for end in [-1, i64::MAX] {
        refused(
            redisync::internal::expirable::acquire(backend, &expirable, "1d", end, now).map(drop),
            &format!("expirable_acquire end {end}"),
        );
    }
    let non_expirable = redisync::internal::expirable::NON_EXPIRABLE;
    for end in [non_expirable - 1, non_expirable + 1] {
        refused(
            redisync::internal::expirable::acquire(backend, &expirable, "1d", end, now).map(drop),
            &format!("expirable_acquire end {end}"),
        );
    }
    refused(
        redisync::internal::expirable::acquire_many(backend, &expirable, &[], now, now).map(drop),
        "expirable_acquire no ids",
    );
    refused(
        redisync::internal::expirable::update_lease(backend, &expirable, &["1d"], -1, now)
            .map(drop),
        "expirable_update_lease end -1",
    );
    refused(
        redisync::internal::expirable::set_permits(backend, &expirable, -1, now).map(drop),
        "expirable_set_permits -1",
    );
    assert_eq!(
        redisync::internal::expirable::available(backend, &expirable, now).unwrap(),
        1
    );
}

// ---------------------------------------------------------------------------
// Redis only: the scripts themselves
// ---------------------------------------------------------------------------

/// The script text as RedisBackend loads it: the argument checks (and a
/// count's, `lua/count_prelude.lua`, for a script that takes counts), the
/// shared prelude if any, the op record's helpers for a write that acts
/// once (`lua/op_record_prelude.lua`), the script.
fn script(prelude: &str, body: &str) -> ::redis::Script {
    let args = include_str!("../lua/args_prelude.lua");
    let counts = if body.contains("count_checks()") {
        include_str!("../lua/count_prelude.lua")
    } else {
        ""
    };
    let once = if body.contains("op_replay(") {
        include_str!("../lua/op_record_prelude.lua")
    } else {
        ""
    };
    ::redis::Script::new(&format!("{args}{counts}{prelude}{once}{body}"))
}

const FAIR: &str = include_str!("../lua/fair_lock_prelude.lua");
const EXPIRABLE: &str = include_str!("../lua/expirable_prelude.lua");
const READ: &str = include_str!("../lua/read_lock_prelude.lua");
const WRITE: &str = include_str!("../lua/write_lock_prelude.lua");

/// Every key with its type, contents and whether it has a TTL (its
/// remaining time shrinks, so only the sign is compared).
fn snapshot(conn: &mut ::redis::Connection) -> BTreeMap<String, (String, String, bool)> {
    let keys: Vec<String> = ::redis::cmd("KEYS").arg("*").query(conn).unwrap();
    keys.into_iter()
        .map(|key| {
            let kind: String = ::redis::cmd("TYPE").arg(&key).query(conn).unwrap();
            let contents = match kind.as_str() {
                "string" => ::redis::cmd("GET").arg(&key).query::<String>(conn).unwrap(),
                "hash" => format!(
                    "{:?}",
                    common::hgetall(conn, &key)
                        .into_iter()
                        .collect::<BTreeMap<_, _>>()
                ),
                "list" => format!(
                    "{:?}",
                    ::redis::cmd("LRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .query::<Vec<String>>(conn)
                        .unwrap()
                ),
                "zset" => format!(
                    "{:?}",
                    ::redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query::<Vec<String>>(conn)
                        .unwrap()
                ),
                other => panic!("unexpected type {other} at {key}"),
            };
            let ttl = common::pttl(conn, &key);
            (key, (kind, contents, ttl > 0))
        })
        .collect()
}

/// Runs `script` with `keys` and each of `bad` as ARGV: every call is an
/// error reply naming the argument, and the keyspace is exactly as before.
fn assert_refused(
    conn: &mut ::redis::Connection,
    what: &str,
    script: &::redis::Script,
    keys: &[&str],
    bad: &[Vec<String>],
) {
    for argv in bad {
        let before = snapshot(conn);
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in argv {
            invocation.arg(arg);
        }
        let err = invocation
            .invoke::<::redis::Value>(conn)
            .expect_err(&format!("{what} {argv:?}: accepted"));
        assert!(
            err.to_string().contains("invalid"),
            "{what} {argv:?}: {err}"
        );
        assert_eq!(
            snapshot(conn),
            before,
            "{what} {argv:?} changed the keyspace"
        );
    }
}

fn run(
    conn: &mut ::redis::Connection,
    script: &::redis::Script,
    keys: &[&str],
    argv: &[&str],
) -> ::redis::Value {
    let mut invocation = script.prepare_invoke();
    for key in keys {
        invocation.key(*key);
    }
    for arg in argv {
        invocation.arg(*arg);
    }
    invocation.invoke(conn).unwrap()
}

/// ARGV lists: `good` with the argument at `index` replaced by each value.
fn variants(good: &[&str], index: usize, values: &[&str]) -> Vec<Vec<String>> {
    values
        .iter()
        .map(|value| {
            let mut argv: Vec<String> = good.iter().map(|s| (*s).to_owned()).collect();
            argv[index] = (*value).to_owned();
            argv
        })
        .collect()
}

/// Bad durations in ms: past 2^47, not positive, not integers.
const BAD_MS: &[&str] = &[
    "140737488355329",
    "9223372036854775807",
    "99999999999999999999999",
    "0",
    "-1",
    "1.5",
    "abc",
    "",
];
/// Bad absolute times in ms: negative, past 2^48, not integers.
const BAD_TIME: &[&str] = &["-1", "281474976710657", "9223372036854775807", "1e3", "x"];

fn epoch_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

/// Each lock script, called directly with an out-of-range ARGV while the
/// lock is free and while it is held twice (the paths that write), replies
/// with an error before its first write: no key changes, none is left
/// without its TTL. The largest and smallest values work.
#[test]
fn redis_lock_scripts_refuse_before_writing() {
    let server = common::TestServer::start();
    let mut conn = server.connection();
    let conn = &mut conn;
    let max = "140737488355328";
    let acquire = script("", include_str!("../lua/lock_acquire.lua"));
    let fenced = script("", include_str!("../lua/fenced_lock_acquire.lua"));
    let renew = script("", include_str!("../lua/lock_renew.lua"));
    let release = script("", include_str!("../lua/lock_release.lua"));
    let read = script("", include_str!("../lua/read_lock_acquire.lua"));
    let read_release = script(READ, include_str!("../lua/read_lock_release.lua"));
    let read_renew = script("", include_str!("../lua/read_lock_renew.lua"));
    let renew_batch = script("", include_str!("../lua/lock_renew_batch.lua"));
    let read_renew_batch = script("", include_str!("../lua/read_lock_renew_batch.lua"));
    let write = script("", include_str!("../lua/write_lock_acquire.lua"));
    let write_release = script(WRITE, include_str!("../lua/write_lock_release.lua"));
    let (l, c, latch) = (
        "l",
        "redisson_lock__channel:{l}",
        "redisson_unlock_latch:{l}:1",
    );
    let (h, hw) = ("u:1", "u:1:write");
    let prefix = "{rw}:u:1:rwlock_timeout";

    for held in [false, true] {
        if held {
            run(conn, &acquire, &[l], &["60000", h]);
            run(conn, &acquire, &[l], &["60000", h]);
            run(conn, &read, &["rw", prefix], &["60000", h, hw]);
            run(conn, &read, &["rw", prefix], &["60000", h, hw]);
            run(conn, &write, &["w"], &["60000", hw, h]);
            run(conn, &write, &["w"], &["60000", hw, h]);
        }
        assert_refused(
            conn,
            "lock_acquire",
            &acquire,
            &[l],
            &variants(&["1", h], 0, BAD_MS),
        );
        assert_refused(
            conn,
            "fenced_lock_acquire",
            &fenced,
            &[l, "t"],
            &variants(&["1", h], 0, BAD_MS),
        );
        assert_refused(
            conn,
            "lock_renew",
            &renew,
            &[l],
            &variants(&["1", h], 0, BAD_MS),
        );
        let good = ["0", "60000", h, "5000"];
        assert_refused(
            conn,
            "lock_release lease",
            &release,
            &[l, c, latch],
            &variants(&good, 1, BAD_MS),
        );
        assert_refused(
            conn,
            "lock_release latch",
            &release,
            &[l, c, latch],
            &variants(&good, 3, BAD_MS),
        );
        // A release given a waiter to hand the lock to checks its lease too.
        let good = ["0", "60000", h, "5000", "w:1", "60000"];
        assert_refused(
            conn,
            "lock_release waiter lease",
            &release,
            &[l, c, latch],
            &variants(&good, 5, BAD_MS),
        );
        assert_refused(
            conn,
            "read_lock_acquire",
            &read,
            &["rw", prefix],
            &variants(&["1", h, hw], 0, BAD_MS),
        );
        assert_refused(
            conn,
            "read_lock_release",
            &read_release,
            &["rw", "redisson_rwlock:{rw}", prefix, "{rw}", latch],
            &variants(&["0", h, "5000"], 2, BAD_MS),
        );
        assert_refused(
            conn,
            "read_lock_renew",
            &read_renew,
            &["rw", prefix, "{rw}"],
            &variants(&["1", h], 0, BAD_MS),
        );
        assert_refused(
            conn,
            "lock_renew_batch",
            &renew_batch,
            &[l],
            &variants(&["1", h], 0, BAD_MS),
        );
        assert_refused(
            conn,
            "read_lock_renew_batch",
            &read_renew_batch,
            &["rw", prefix],
            &variants(&["1", h], 0, BAD_MS),
        );
        assert_refused(
            conn,
            "write_lock_acquire",
            &write,
            &["w"],
            &variants(&["1", hw, h], 0, BAD_MS),
        );
        let good = ["1", "60000", hw, "5000"];
        assert_refused(
            conn,
            "write_lock_release lease",
            &write_release,
            &["w", "redisson_rwlock:{w}", latch],
            &variants(&good, 1, BAD_MS),
        );
        assert_refused(
            conn,
            "write_lock_release latch",
            &write_release,
            &["w", "redisson_rwlock:{w}", latch],
            &variants(&good, 3, BAD_MS),
        );
        // Nothing was taken while free.
        if !held {
            assert!(snapshot(conn).is_empty(), "{:?}", snapshot(conn));
        }
    }

    // The largest lease is accepted everywhere and leaves positive TTLs,
    // including a write reentry that sums past it (capped).
    let _: () = ::redis::cmd("FLUSHALL").query(conn).unwrap();
    run(conn, &acquire, &[l], &[max, h]);
    run(conn, &fenced, &["f", "t"], &[max, h]);
    run(conn, &read, &["rw", prefix], &[max, h, hw]);
    run(conn, &write, &["w"], &[max, hw, h]);
    run(conn, &write, &["w"], &[max, hw, h]);
    run(conn, &renew, &[l], &[max, h]);
    run(conn, &read_renew, &["rw", prefix, "{rw}"], &[max, h]);
    for (key, ttl) in snapshot(conn).iter().map(|(k, v)| (k.clone(), v.2)) {
        // Only the token counter has no TTL, by design.
        assert_eq!(ttl, key != "t", "{key}");
    }
    let pttl = common::pttl(conn, "w");
    assert!(
        pttl > (1 << 47) - 60_000 && pttl <= 1 << 47,
        "write reentry PTTL {pttl}"
    );
    // The smallest lease: 1 ms.
    run(conn, &acquire, &["short"], &["1", h]);
    common::wait_until("a 1 ms lease expired", STUCK, || {
        common::pttl(conn, "short") == -2
    });
}

/// The lock scripts as a client with a waiter queue calls them (after the
/// window's prelude, given no window: '0'): the acquire's record keep
/// time, and the release's every duration and its streak limit, the
/// waiter's lease among them when the waiter's three arguments come last.
/// Each one out of range is refused before the first write, whether the
/// lock is free or held twice; the largest values work.
#[test]
fn redis_queued_lock_scripts_refuse_before_writing() {
    let server = common::TestServer::start();
    let mut conn = server.connection();
    let conn = &mut conn;
    let windowed = |body: &str| {
        ::redis::Script::new(&format!(
            "{}{}{body}",
            include_str!("../lua/window_prelude.lua"),
            include_str!("../lua/args_prelude.lua")
        ))
    };
    let acquire = windowed(include_str!("../lua/lock_acquire.lua"));
    let release = windowed(include_str!("../lua/lock_release.lua"));
    let (l, h) = ("q", "u:1");
    let record = "{q}:redisync_attempt:1";
    let acquire_keys = [l, record, "{q}:redisync_waiters", "{q}:redisync_clients"];
    let release_keys = [
        l,
        "redisson_lock__channel:{q}",
        "redisson_unlock_latch:{q}:1",
        "{q}:redisync_waiters",
        "{q}:redisync_handoffs",
        "{q}:redisync_clients",
    ];
    let bad_streaks = ["-1", "1.5", "abc", ""];
    for held in [false, true] {
        if held {
            for attempt in ["{q}:redisync_attempt:h1", "{q}:redisync_attempt:h2"] {
                let keys = [l, attempt, acquire_keys[2], acquire_keys[3]];
                run(
                    conn,
                    &acquire,
                    &keys,
                    &["60000", h, "first", "", "65000", "0"],
                );
            }
        }
        let good = ["60000", h, "first", "", "65000", "0"];
        assert_refused(
            conn,
            "lock_acquire lease",
            &acquire,
            &acquire_keys,
            &variants(&good, 0, BAD_MS),
        );
        assert_refused(
            conn,
            "lock_acquire record keep",
            &acquire,
            &acquire_keys,
            &variants(&good, 4, BAD_MS),
        );
        let good = ["0", "60000", h, "5000", "15000", "16", "0"];
        for (index, what) in [(1, "lease"), (3, "latch"), (4, "claim window")] {
            let what = format!("lock_release (queued) {what}");
            assert_refused(
                conn,
                &what,
                &release,
                &release_keys,
                &variants(&good, index, BAD_MS),
            );
        }
        assert_refused(
            conn,
            "lock_release (queued) streak",
            &release,
            &release_keys,
            &variants(&good, 5, &bad_streaks),
        );
        let good = [
            "0", "60000", h, "5000", "15000", "16", "w:1", "60000", "-", "0",
        ];
        assert_refused(
            conn,
            "lock_release (queued) waiter lease",
            &release,
            &release_keys,
            &variants(&good, 7, BAD_MS),
        );
        // The passes inside the client since the store's last count, with
        // a waiter and without one.
        let bad_passes = [
            "-1",
            "1.5",
            "abc",
            "",
            "140737488355329",
            "99999999999999999999999",
        ];
        for waiter in ["w:1", ""] {
            let good = [
                "0", "60000", h, "5000", "15000", "16", waiter, "60000", "-", "3", "0",
            ];
            assert_refused(
                conn,
                "lock_release (queued) passes",
                &release,
                &release_keys,
                &variants(&good, 9, &bad_passes),
            );
        }
        if !held {
            assert!(snapshot(conn).is_empty(), "{:?}", snapshot(conn));
        }
    }
    // The largest values work: held twice, one release keeps the lock
    // with the largest lease as its TTL; the last hands it to the waiter
    // with the largest lease.
    let max = "140737488355328";
    let good = [max, h, "5000", "15000", "16"];
    let _: () = ::redis::cmd("FLUSHALL").query(conn).unwrap();
    for attempt in ["{q}:redisync_attempt:m1", "{q}:redisync_attempt:m2"] {
        let keys = [l, attempt, acquire_keys[2], acquire_keys[3]];
        run(conn, &acquire, &keys, &[max, h, "first", "", max, "0"]);
    }
    let once = run(
        conn,
        &release,
        &release_keys,
        &["0", good[0], h, good[2], good[3], good[4], "0"],
    );
    assert_eq!(once, ::redis::Value::Int(0), "one hold of two released");
    let mut keys = release_keys;
    keys[2] = "redisson_unlock_latch:{q}:2";
    let handed = run(
        conn,
        &release,
        &keys,
        &["0", good[0], h, good[2], max, good[4], "w:1", max, "-", "0"],
    );
    // Handed to the waiter, with the streak's count after it.
    assert_eq!(
        handed,
        ::redis::Value::Array(vec![::redis::Value::Int(2), ::redis::Value::Int(1)]),
        "handed to the waiter"
    );
    let pttl = common::pttl(conn, l);
    assert!(
        pttl > (1 << 47) - 60_000 && pttl <= 1 << 47,
        "handed hold PTTL {pttl}"
    );
}

/// The fair-lock, semaphore and permit scripts likewise.
#[test]
fn redis_queue_and_counter_scripts_refuse_before_writing() {
    let server = common::TestServer::start();
    let mut conn = server.connection();
    let conn = &mut conn;
    let now = epoch_ms().to_string();
    let now = now.as_str();
    let fair_acquire = script(FAIR, include_str!("../lua/fair_lock_acquire.lua"));
    let fair_release = script(FAIR, include_str!("../lua/fair_lock_release.lua"));
    let fair_cancel = script("", include_str!("../lua/fair_lock_cancel.lua"));
    let fair_force = script(FAIR, include_str!("../lua/fair_lock_force_release.lua"));
    let fair_keys = ["fl", "q", "z"];
    let fair_release_keys = ["fl", "q", "z", "redisson_lock__channel:{fl}", "latch"];

    // Held by one, two waiters queued: every fair script has work to do.
    run(
        conn,
        &fair_acquire,
        &fair_keys,
        &["60000", "a:1", "5000", now, "1"],
    );
    run(
        conn,
        &fair_acquire,
        &fair_keys,
        &["60000", "b:1", "5000", now, "1"],
    );
    run(
        conn,
        &fair_acquire,
        &fair_keys,
        &["60000", "c:1", "5000", now, "1"],
    );
    run(
        conn,
        &fair_acquire,
        &fair_keys,
        &["60000", "a:1", "5000", now, "1"],
    );
    let acquire_good = ["60000", "b:1", "5000", now, "1"];
    assert_refused(
        conn,
        "fair_lock_acquire lease",
        &fair_acquire,
        &fair_keys,
        &variants(&acquire_good, 0, BAD_MS),
    );
    assert_refused(
        conn,
        "fair_lock_acquire allowance",
        &fair_acquire,
        &fair_keys,
        &variants(&acquire_good, 2, BAD_MS),
    );
    assert_refused(
        conn,
        "fair_lock_acquire now",
        &fair_acquire,
        &fair_keys,
        &variants(&acquire_good, 3, BAD_TIME),
    );
    let release_good = ["0", "60000", "a:1", now, "5000"];
    assert_refused(
        conn,
        "fair_lock_release lease",
        &fair_release,
        &fair_release_keys,
        &variants(&release_good, 1, BAD_MS),
    );
    assert_refused(
        conn,
        "fair_lock_release now",
        &fair_release,
        &fair_release_keys,
        &variants(&release_good, 3, BAD_TIME),
    );
    assert_refused(
        conn,
        "fair_lock_release latch",
        &fair_release,
        &fair_release_keys,
        &variants(&release_good, 4, BAD_MS),
    );
    assert_refused(
        conn,
        "fair_lock_cancel",
        &fair_cancel,
        &["q", "z"],
        &variants(&["b:1", "5000"], 1, BAD_MS),
    );
    assert_refused(
        conn,
        "fair_lock_force_release",
        &fair_force,
        &["fl", "q", "z", "redisson_lock__channel:{fl}"],
        &variants(&["0", now], 1, BAD_TIME),
    );
    // The largest allowance queues (score = the clock + TTL + 2^47).
    run(
        conn,
        &fair_acquire,
        &fair_keys,
        &["60000", "d:1", "140737488355328", now, "1"],
    );
    let score: f64 = ::redis::cmd("ZSCORE")
        .arg("z")
        .arg("d:1")
        .query(conn)
        .unwrap();
    assert!(score > (1_i64 << 47) as f64, "{score}");

    // Counters.
    let set = script("", include_str!("../lua/counter_set_if_absent.lua"));
    let add = script("", include_str!("../lua/semaphore_add.lua"));
    let take = script("", include_str!("../lua/semaphore_try_acquire.lua"));
    let bad_counts = [
        "9223372036854775808",
        "-9223372036854775809",
        "1.5",
        "x",
        "",
    ];
    assert_refused(
        conn,
        "counter_set_if_absent",
        &set,
        &["s", "redisson_sc:{s}"],
        &variants(&["1", "1"], 0, &bad_counts),
    );
    run(
        conn,
        &set,
        &["s", "redisson_sc:{s}"],
        &["9223372036854775807", "1"],
    );
    assert_refused(
        conn,
        "semaphore_add",
        &add,
        &["s", "redisson_sc:{s}"],
        &variants(&["1"], 0, &bad_counts),
    );
    assert_refused(
        conn,
        "semaphore_try_acquire",
        &take,
        &["s"],
        &variants(&["1"], 0, &["0", "-1", "9223372036854775808", "x"]),
    );

    // Permits.
    let acquire = script(EXPIRABLE, include_str!("../lua/expirable_acquire.lua"));
    let release = script(EXPIRABLE, include_str!("../lua/expirable_release.lua"));
    let available = script(EXPIRABLE, include_str!("../lua/expirable_available.lua"));
    let acquired = script(EXPIRABLE, include_str!("../lua/expirable_acquired.lua"));
    let update = script(EXPIRABLE, include_str!("../lua/expirable_update_lease.lua"));
    let set_total = script(EXPIRABLE, include_str!("../lua/expirable_set_permits.lua"));
    let keys = ["p", "{p}:timeout", "redisson_sc:{p}"];
    run(conn, &set, &["p", "redisson_sc:{p}"], &["3", "3"]);
    let end = (epoch_ms() + 60_000).to_string();
    run(conn, &acquire, &keys, &[&end, now, "01"]);
    // Redisson's non-expirable lease end is accepted as is.
    run(conn, &acquire, &keys, &["922337203685477", now, "02"]);
    // An expired lease the next script reclaims (a write the guard precedes).
    run(conn, &acquire, &keys, &[now, now, "03"]);
    let acquire_good = [end.as_str(), now, "04"];
    assert_refused(
        conn,
        "expirable_acquire end",
        &acquire,
        &keys,
        &variants(&acquire_good, 0, &[BAD_TIME, &["922337203685478"]].concat()),
    );
    let later = (epoch_ms() + 1_000).to_string();
    assert_refused(
        conn,
        "expirable_acquire now",
        &acquire,
        &keys,
        &variants(&[&end, &later, "04"], 1, BAD_TIME),
    );
    let too_many: Vec<String> = [end.clone(), later.clone()]
        .into_iter()
        .chain((0..10_001).map(|i| format!("{i:08x}")))
        .collect();
    assert_refused(
        conn,
        "expirable_acquire ids",
        &acquire,
        &keys,
        &[
            vec![end.clone(), later.clone()],
            vec![end.clone(), later.clone(), String::new()],
            vec![end.clone(), later.clone(), "abc".to_owned()],
            vec![end.clone(), later.clone(), "0g".to_owned()],
            too_many,
        ],
    );
    assert_refused(
        conn,
        "expirable_release",
        &release,
        &keys,
        &[
            variants(&[&later, "01"], 0, BAD_TIME),
            vec![vec![later.clone()], vec![later.clone(), String::new()]],
        ]
        .concat(),
    );
    assert_refused(
        conn,
        "expirable_available",
        &available,
        &keys,
        &variants(&[later.as_str()], 0, BAD_TIME),
    );
    assert_refused(
        conn,
        "expirable_acquired",
        &acquired,
        &keys,
        &variants(&[later.as_str()], 0, BAD_TIME),
    );
    assert_refused(
        conn,
        "expirable_update_lease",
        &update,
        &keys,
        &[
            variants(&[&end, &later, "01"], 0, BAD_TIME),
            variants(&[&end, &later, "01"], 1, BAD_TIME),
            vec![vec![end.clone(), later.clone()]],
        ]
        .concat(),
    );
    assert_refused(
        conn,
        "expirable_set_permits",
        &set_total,
        &keys,
        &[
            variants(
                &["5", &later],
                0,
                &["-1", "9223372036854775808", "x", "1.5", ""],
            ),
            variants(&["5", &later], 1, BAD_TIME),
        ]
        .concat(),
    );
    // The good calls still work after all that.
    let acquired_now = run(conn, &acquired, &keys, &[&later]);
    assert_eq!(acquired_now, ::redis::Value::Int(2), "held and kept");
}

/// Waits for a helper thread, failing (not hanging) if it is stuck.
fn join_within(handle: thread::JoinHandle<()>, what: &str) {
    let deadline = Instant::now() + STUCK;
    while !handle.is_finished() {
        assert!(Instant::now() < deadline, "{what}: stuck");
        thread::sleep(Duration::from_millis(10));
    }
    handle.join().unwrap_or_else(|_| panic!("{what}: panicked"));
}
