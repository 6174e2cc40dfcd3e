//! `Client::inspect` on every kind of object, after real operations through
//! the public API, on every store: `memory`, `redis` and, with the
//! `cluster` feature, `cluster` (one `#[test]` per case and store, from
//! `backend_tests!`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::keys;
use common::timing::STUCK;
use common::{Env, backend_tests, unique_name, wait_until};
use redisync::RwMode;
use redisync::{Client, HoldMode, Inspection, ObjectKind};
use redisync::{Effect, LockBackend, Resend, Script, ScriptCall};

/// The watchdog lease of the test clients (common::DEFAULT_WATCHDOG).
const WATCHDOG_MS: u128 = 30_000;

backend_tests!(
    lock_held_reentrantly_twice,
    read_lock_by_two_threads_then_write_with_a_read,
    fair_lock_with_a_holder_and_two_queued_waiters,
    fenced_lock_reports_the_guards_token,
    semaphore_after_acquiring_two_of_five,
    expirable_semaphore_with_two_leased_permits,
    latch_at_three,
    barrier_with_one_arrival_waiting,
    election_with_a_leader_and_a_candidate,
    nothing_under_the_name,
    unrelated_types_are_unknown,
);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// The client's holder id for the calling thread, split.
fn me(client: &Client) -> (String, u64) {
    let id = client.current_holder_id();
    let (uuid, thread) = id.rsplit_once(':').unwrap();
    (uuid.to_owned(), thread.parse().unwrap())
}

fn ms(duration: Option<Duration>) -> u128 {
    duration.expect("a TTL").as_millis()
}

/// Checks what every inspection of `name` shares, prints it.
fn inspect(client: &Client, name: &str) -> Inspection {
    let found = client.inspect(name).unwrap();
    assert_eq!(found.name, name);
    let text = found.to_string();
    assert!(text.contains(&found.kind.to_string()), "{text}");
    println!("{text}");
    found
}

/// Runs `code` (KEYS[1] = `key`) on the client's store: writes data no
/// primitive stores.
fn raw(client: &Client, key: &str, code: &'static str) {
    let script: &'static Script = Box::leak(Box::new(Script::new("test_raw", "test raw", code)));
    let call = ScriptCall::new(script, Resend::Harmless, Effect::Read).key(key);
    let reply = client.backend().run_script(&call).unwrap();
    assert!(reply.error_code().is_none(), "{reply:?}");
}

// ---------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------

fn lock_held_reentrantly_twice(env: &Env) {
    let client = env.client();
    let name = unique_name("inspect:lock");
    let lock = client.lock(&name);
    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();

    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::Lock);
    assert!(found.is_held());
    assert_eq!(found.holders.len(), 1);
    let holder = &found.holders[0];
    let (uuid, thread) = me(&client);
    assert_eq!(holder.id, client.current_holder_id());
    assert_eq!(holder.client_id, uuid);
    assert_eq!(holder.client_id, client.id());
    assert_eq!(holder.thread, Some(thread));
    assert_eq!(holder.holds, 2);
    assert_eq!(holder.mode, HoldMode::Exclusive);
    let ttl = ms(found.ttl);
    assert!(ttl > WATCHDOG_MS - 5_000 && ttl <= WATCHDOG_MS, "{ttl}");
    assert_eq!(holder.ttl, found.ttl);
    assert_eq!(found.fencing_token, None);
    assert!(found.queue.is_empty() && found.leases.is_empty());
    assert_eq!((found.counter, found.rw_mode), (None, None));
    assert_eq!(found.available_permits(), None);
    // The holder's connections, found by their name in CLIENT LIST (the
    // pooled one that took the lock at least); a MemoryBackend has none,
    // and neither has a store of one's own that names no connection.
    if env.redis_connection().is_some() && env.outside.is_none() {
        assert!(!holder.connections.is_empty(), "{found}");
        for connection in &holder.connections {
            assert!(connection.address.contains(':'), "{connection:?}");
            assert!(connection.idle < Duration::from_secs(60), "{connection:?}");
        }
        assert!(found.to_string().contains("connected from"), "{found}");
    } else {
        assert!(holder.connections.is_empty());
    }

    inner.unlock().unwrap();
    assert_eq!(inspect(&client, &name).holders[0].holds, 1);
    outer.unlock().unwrap();
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::Absent, "a free lock leaves nothing");
    assert!(!found.is_held() && found.ttl.is_none());

    // A lease of its own is the TTL.
    let _guard = lock.lock_with_lease(Duration::from_secs(5)).unwrap();
    let ttl = ms(inspect(&client, &name).ttl);
    assert!(ttl > 0 && ttl <= 5_000, "{ttl}");
}

fn read_lock_by_two_threads_then_write_with_a_read(env: &Env) {
    let client = env.client();
    let other = env.client();
    let name = unique_name("inspect:rw");
    let mine = client.read_write_lock(&name).read_lock().lock().unwrap();
    // A second thread (of another client) reads too.
    let (took, taken) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let theirs = {
        let lock = other.read_write_lock(&name).read_lock();
        let other = other.clone();
        thread::spawn(move || {
            let guard = lock.lock_with_lease(Duration::from_secs(10)).unwrap();
            took.send(other.current_holder_id()).unwrap();
            released.recv().unwrap();
            guard.unlock().unwrap();
        })
    };
    let their_id = taken.recv_timeout(STUCK).unwrap();

    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::ReadWriteLock);
    assert_eq!(found.rw_mode, Some(RwMode::Read));
    assert_eq!(found.holders.len(), 2, "{found:?}");
    for holder in &found.holders {
        assert_eq!((holder.holds, holder.mode), (1, HoldMode::Read));
    }
    let mine_found = found
        .holders
        .iter()
        .find(|holder| holder.id == client.current_holder_id())
        .expect("this thread's read hold");
    let (uuid, thread) = me(&client);
    assert_eq!(
        (mine_found.client_id.as_str(), mine_found.thread),
        (uuid.as_str(), Some(thread))
    );
    // Each read hold has its own lease: the watchdog's here, 10 s there.
    let mine_ttl = ms(mine_found.ttl);
    assert!(
        mine_ttl > WATCHDOG_MS - 5_000 && mine_ttl <= WATCHDOG_MS,
        "{mine_ttl}"
    );
    let theirs_found = found
        .holders
        .iter()
        .find(|holder| holder.id == their_id)
        .unwrap();
    assert_eq!(theirs_found.client_id, other.id());
    let their_ttl = ms(theirs_found.ttl);
    assert!(their_ttl > 0 && their_ttl <= 10_000, "{their_ttl}");
    // The lock lives as long as its longest hold.
    assert!(ms(found.ttl) >= mine_ttl.min(their_ttl));

    release.send(()).unwrap();
    theirs.join().unwrap();
    mine.unlock().unwrap();
    assert_eq!(inspect(&client, &name).kind, ObjectKind::Absent);

    // The write half, and a read the writer takes under it.
    let rw = client.read_write_lock(&name);
    let write = rw.write_lock().lock().unwrap();
    let read = rw.read_lock().lock().unwrap();
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::ReadWriteLock);
    assert_eq!(found.rw_mode, Some(RwMode::Write));
    let modes: Vec<_> = found
        .holders
        .iter()
        .map(|holder| (holder.id.clone(), holder.holds, holder.mode))
        .collect();
    let id = client.current_holder_id();
    assert_eq!(
        modes,
        [(id.clone(), 1, HoldMode::Read), (id, 1, HoldMode::Write)]
    );
    assert!(found.holders.iter().all(|holder| holder.ttl.is_some()));
    read.unlock().unwrap();
    write.unlock().unwrap();
}

fn fair_lock_with_a_holder_and_two_queued_waiters(env: &Env) {
    let client = env.client();
    let name = unique_name("inspect:fair");
    let lock = client.fair_lock(&name);
    let guard = lock.lock().unwrap();
    let holder_id = client.current_holder_id();
    let wait = Duration::from_secs(20);

    // Two waiters, one after the other, each blocked in try_lock_for.
    let mut waiters = Vec::new();
    let mut ids = Vec::new();
    for place in 1..=2 {
        let lock = client.fair_lock(&name);
        let waiting = client.clone();
        let (tx, rx) = mpsc::channel();
        waiters.push(thread::spawn(move || {
            tx.send(waiting.current_holder_id()).unwrap();
            let guard = lock.try_lock_for(wait).unwrap().expect("its turn came");
            guard.unlock().unwrap();
        }));
        ids.push(rx.recv_timeout(STUCK).unwrap());
        wait_until("the waiter is queued", STUCK, || {
            client.inspect(&name).unwrap().queue.len() == place
        });
    }

    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::FairLock);
    assert_eq!(found.holders.len(), 1);
    assert_eq!(found.holders[0].id, holder_id);
    assert_eq!(found.holders[0].holds, 1);
    let queued: Vec<_> = found.queue.iter().map(|waiter| waiter.id.clone()).collect();
    assert_eq!(queued, ids, "head first");
    let wait_ms = i64::try_from(wait.as_millis()).unwrap();
    let lease_ms = i64::try_from(WATCHDOG_MS).unwrap();
    let mut previous = found.read_at_ms;
    for waiter in &found.queue {
        assert_eq!(waiter.client_id, client.id());
        assert!(waiter.thread.is_some());
        let deadline = waiter.deadline_ms.expect("a slot");
        let remaining = waiter.remaining_ms.unwrap();
        assert_eq!(deadline - found.read_at_ms, remaining);
        // Each slot ends one wait allowance after the one ahead (the first
        // after the holder's lease).
        assert!(deadline > previous, "{found:?}");
        assert!(
            remaining > 0 && remaining <= lease_ms + 2 * wait_ms,
            "{remaining}"
        );
        previous = deadline;
    }
    let gap = found.queue[1].deadline_ms.unwrap() - found.queue[0].deadline_ms.unwrap();
    assert!((wait_ms - 5_000..=wait_ms + 5_000).contains(&gap), "{gap}");

    guard.unlock().unwrap();
    for waiter in waiters {
        waiter.join().unwrap();
    }
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::Absent, "{found:?}");
}

fn fenced_lock_reports_the_guards_token(env: &Env) {
    let client = env.client();
    let name = unique_name("inspect:fenced");
    let lock = client.fenced_lock(&name);
    let guard = lock.lock().unwrap();
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::FencedLock);
    assert_eq!(found.fencing_token, guard.token());
    assert!(found.fencing_token.is_some());
    assert_eq!(found.holders.len(), 1);
    assert_eq!(found.holders[0].id, client.current_holder_id());
    assert!(found.ttl.is_some());
    let token = guard.token();
    guard.unlock().unwrap();

    // Free, its counter stays: still a fenced lock, with the last token.
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::FencedLock);
    assert!(!found.is_held());
    assert_eq!(found.fencing_token, token);
    assert_eq!(found.ttl, None);
}

fn semaphore_after_acquiring_two_of_five(env: &Env) {
    let client = env.client();
    let name = unique_name("inspect:semaphore");
    let semaphore = client.semaphore(&name);
    assert!(semaphore.try_set_permits(5).unwrap());
    let permits = semaphore.acquire(2).unwrap();
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::Counter);
    assert_eq!(found.counter, Some(3));
    assert_eq!(found.available_permits(), Some(3));
    assert_eq!(found.ttl, None);
    assert!(found.holders.is_empty() && found.leases.is_empty());
    permits.release().unwrap();
    assert_eq!(inspect(&client, &name).available_permits(), Some(5));
    // Drained: 0 cannot be a latch (a latch is deleted at zero).
    semaphore.drain_permits().unwrap();
    let found = inspect(&client, &name);
    assert_eq!(
        (found.kind.clone(), found.counter),
        (ObjectKind::Counter, Some(0))
    );
    assert_eq!(found.latch_count(), None);
}

fn expirable_semaphore_with_two_leased_permits(env: &Env) {
    let client = env.client();
    let name = unique_name("inspect:expirable");
    let semaphore = client.permit_expirable_semaphore(&name);
    assert!(semaphore.try_set_permits(3).unwrap());
    // No permit leased yet: only the count, as a semaphore's.
    assert_eq!(inspect(&client, &name).kind, ObjectKind::Counter);
    let first = semaphore.acquire_id(Duration::from_secs(10)).unwrap();
    let second = semaphore.acquire_id(Duration::from_secs(20)).unwrap();

    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::PermitExpirableSemaphore);
    assert_eq!(found.available_permits(), Some(1));
    let leased: Vec<_> = found.leases.iter().map(|l| l.permit_id.as_str()).collect();
    assert_eq!(
        leased,
        [first.as_str(), second.as_str()],
        "soonest end first"
    );
    for (lease, ms) in found.leases.iter().zip([10_000, 20_000]) {
        assert_eq!(lease.lease_end_ms - found.read_at_ms, lease.remaining_ms);
        assert!(
            lease.remaining_ms > ms - 5_000 && lease.remaining_ms <= ms,
            "{lease:?}"
        );
    }

    // All taken: the count is 0 and the leases tell what it is.
    let third = semaphore.acquire_id(Duration::from_secs(10)).unwrap();
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::PermitExpirableSemaphore);
    assert_eq!(
        (found.available_permits(), found.leases.len()),
        (Some(0), 3)
    );
    for id in [first, second, third] {
        semaphore.release(&id).unwrap();
    }
    let found = inspect(&client, &name);
    assert_eq!(
        (found.kind.clone(), found.counter),
        (ObjectKind::Counter, Some(3))
    );
}

fn latch_at_three(env: &Env) {
    let client = env.client();
    let name = unique_name("inspect:latch");
    let latch = client.count_down_latch(&name);
    assert!(latch.try_set_count(3).unwrap());
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::Counter);
    assert_eq!(found.latch_count(), Some(3));
    assert_eq!(found.counter, Some(3));
    assert_eq!(found.ttl, None);
    for _ in 0..3 {
        latch.count_down().unwrap();
    }
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::Absent, "an open latch is deleted");
    assert_eq!(found.latch_count(), None);
}

/// A barrier is its own kind, with its generation, arrivals and parties
/// (it was reported as a lock whose "holders" were `generation`, `arrived`
/// and `parties`).
fn barrier_with_one_arrival_waiting(env: &Env) {
    let client = env.client();
    let name = unique_name("inspect:barrier");
    let waiter = {
        let barrier = client.barrier(name.as_str(), 2);
        thread::spawn(move || barrier.wait_for(STUCK).unwrap())
    };
    wait_until("the first arrival", STUCK, || {
        client.barrier(name.as_str(), 2).arrived().unwrap() == 1
    });
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::Barrier);
    assert!(found.holders.is_empty(), "{:?}", found.holders);
    let state = found.barrier.expect("a barrier's state");
    assert_eq!(
        (state.generation, state.arrived, state.parties),
        (0, 1, Some(2))
    );
    assert!(
        found.to_string().contains("1 of 2 parties arrived"),
        "{found}"
    );
    assert_eq!(client.barrier(name.as_str(), 2).wait().unwrap(), 0);
    assert_eq!(waiter.join().unwrap(), Some(0));
    let state = inspect(&client, &name).barrier.expect("still a barrier");
    assert_eq!(
        (state.generation, state.arrived, state.parties),
        (1, 0, None)
    );
}

fn election_with_a_leader_and_a_candidate(env: &Env) {
    let (client, other) = (env.client(), env.client());
    let name = unique_name("inspect:election");
    let leadership = client
        .leader_election(name.as_str())
        .campaign("host-a")
        .unwrap();
    let (led_tx, led) = mpsc::channel::<u64>();
    let candidate = {
        let election = other.leader_election(name.as_str());
        thread::spawn(move || {
            let leadership = election.campaign("host-b").unwrap();
            led_tx.send(leadership.term()).unwrap();
            leadership.resign().unwrap();
        })
    };
    wait_until("the candidate queued", STUCK, || {
        inspect(&client, &name)
            .election
            .is_some_and(|election| election.candidates.len() == 1)
    });
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::Election);
    let election = found.election.clone().expect("an election's state");
    let leader = election.leader.expect("a leader");
    assert_eq!(
        (leader.identity.as_str(), leader.term),
        ("host-a", leadership.term())
    );
    assert_eq!(election.last_term, Some(leadership.term()));
    assert!(
        election
            .lease_left
            .is_some_and(|left| left > Duration::ZERO)
    );
    assert!(found.to_string().contains("leader \"host-a\""), "{found}");
    leadership.resign().unwrap();
    let second = led.recv_timeout(STUCK).unwrap();
    candidate.join().unwrap();
    // Nobody leads now; the last term is still known.
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::Election);
    let election = found.election.expect("still an election");
    assert_eq!(election.leader, None);
    assert_eq!(election.last_term, Some(second));
    assert!(election.candidates.is_empty());
}

fn nothing_under_the_name(env: &Env) {
    let client = env.client();
    let name = unique_name("inspect:nothing");
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::Absent);
    assert_eq!(found.ttl, None);
    assert!(found.holders.is_empty() && found.queue.is_empty() && found.leases.is_empty());
    assert_eq!(
        (found.counter, found.fencing_token, found.rw_mode),
        (None, None, None)
    );
    assert!(client.inspect("").unwrap_err().is_invalid_argument());
}

fn unrelated_types_are_unknown(env: &Env) {
    let client = env.client();
    let unknown = |redis_type: &str| ObjectKind::Unknown {
        redis_type: redis_type.to_owned(),
    };
    let list = unique_name("inspect:list");
    raw(
        &client,
        &list,
        "return redis.call('rpush', KEYS[1], 'a', 'b')",
    );
    let found = inspect(&client, &list);
    assert_eq!(found.kind, unknown("list"));
    assert!(found.holders.is_empty() && found.counter.is_none());
    assert!(found.to_string().contains("list"), "{found}");

    let set = unique_name("inspect:zset");
    raw(&client, &set, "return redis.call('zadd', KEYS[1], 1, 'm')");
    assert_eq!(inspect(&client, &set).kind, unknown("zset"));

    let text = unique_name("inspect:text");
    env.set_string(&text, "hello");
    assert_eq!(inspect(&client, &text).kind, unknown("string"));

    let hash = unique_name("inspect:hash");
    raw(
        &client,
        &hash,
        "return redis.call('hset', KEYS[1], 'name', 'bob')",
    );
    let found = inspect(&client, &hash);
    assert_eq!(found.kind, unknown("hash"));
    assert!(found.holders.is_empty());

    // A lock's auxiliary key of another type is not an error either.
    let name = unique_name("inspect:aux");
    let guard = client.lock(&name).lock().unwrap();
    raw(
        &client,
        &keys::fair_queue(&name),
        "return redis.call('set', KEYS[1], 'x')",
    );
    let found = inspect(&client, &name);
    assert_eq!(found.kind, ObjectKind::Lock);
    assert!(found.queue.is_empty());
    guard.unlock().unwrap();
}
