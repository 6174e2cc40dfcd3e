//! Counting calls stay exact under connection faults (issue 21: "an undo
//! must undo exactly its own attempt", and nothing a user holds is lost by
//! a fault we could have handled).
//!
//! A semaphore release, a latch count-down and an acquire each carry a
//! record (`{name}:redisync_op:<id>`): sent again after its reply was lost,
//! a call counts nothing more; one whose request was lost is sent again
//! until it lands; the undo of an acquire whose outcome is unknown gives
//! back exactly what that call took, and a call that arrives after its
//! undo is refused.
//!
//! Faults: a wrapper store that runs a script and then reports a
//! connection error (the reply lost), or reports one without running it
//! (the request lost); and, on a real server, `CLIENT KILL` while the
//! server is busy with a slow script, so that the requests queued behind it
//! are in flight when their connections close (as `tests/fault_suite.rs`
//! does).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::keys;
use common::wrap::{Hook, Store, Wrapped, assert_forwards_every_method};
use common::{TestServer, unique_name, wait_until};
use redisync::internal::expirable::ExpirableKeys;
use redisync::{Reply, ScriptCall};

/// What a planned fault does to one call of a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The script runs; its reply is replaced by a connection error.
    LoseReply,
    /// A connection error; the script never runs.
    LoseRequest,
}

/// Applies planned faults to the next calls of given scripts; everything
/// else is forwarded (by [`Wrapped`]). Clones share the plan.
#[derive(Clone, Default)]
struct Lossy {
    plan: Arc<Mutex<Vec<(&'static str, Fault)>>>,
    /// Calls per script id, faulted ones included.
    calls: Arc<Mutex<Vec<&'static str>>>,
}

impl Lossy {
    /// The next call of script `id` meets `fault` (in the order planned).
    fn plan(&self, id: &'static str, fault: Fault) {
        self.plan.lock().unwrap().push((id, fault));
    }

    fn calls_of(&self, id: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| **c == id)
            .count()
    }

    fn planned(&self) -> usize {
        self.plan.lock().unwrap().len()
    }
}

impl Hook for Lossy {
    fn run_script(&self, inner: &Store, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        let id = call.script().id();
        self.calls.lock().unwrap().push(id);
        let fault = {
            let mut plan = self.plan.lock().unwrap();
            plan.iter()
                .position(|(planned, _)| *planned == id)
                .map(|i| plan.remove(i).1)
        };
        let lost = || redisync::Error::backend(format!("{id}: connection reset (test)"), true);
        match fault {
            Some(Fault::LoseRequest) => Err(lost()),
            Some(Fault::LoseReply) => {
                inner.run_script(call)?;
                Err(lost())
            }
            None => inner.run_script(call),
        }
    }
}

#[test]
fn the_lossy_store_forwards_every_method() {
    // With faults planned for other scripts: they stay planned.
    let lossy = Lossy::default();
    lossy.plan("semaphore_add", Fault::LoseReply);
    assert_forwards_every_method(lossy.clone());
    assert_eq!(lossy.planned(), 1);
}

/// A client on `server` through a [`Lossy`] store.
fn lossy_client(server: &TestServer) -> (redisync::Client, Wrapped<Lossy>) {
    let backend = redisync::RedisBackend::open(&server.url()).unwrap();
    let lossy = Wrapped::around(Arc::new(backend), Lossy::default());
    let client = redisync::Client::builder()
        .backend(lossy.clone())
        .build()
        .unwrap();
    (client, lossy)
}

/// Waits (bounded) until semaphore `name` has `expected` permits; panics
/// with what it has otherwise.
fn settles_at(semaphore: &redisync::Semaphore, expected: i64, what: &str) {
    let mut last = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let now = semaphore.available_permits().unwrap();
        if now == expected {
            // And it stays there: nothing lands twice later.
            thread::sleep(Duration::from_millis(500));
            assert_eq!(semaphore.available_permits().unwrap(), expected, "{what}");
            return;
        }
        last = Some(now);
        thread::sleep(Duration::from_millis(20));
    }
    panic!("{what}: {last:?} permits available, expected {expected}");
}

#[test]
fn a_release_whose_reply_was_lost_counts_once_and_succeeds() {
    let server = TestServer::start();
    let (client, lossy) = lossy_client(&server);
    let semaphore = client.semaphore(unique_name("exact:release-reply").as_str());
    assert!(semaphore.try_set_permits(2).unwrap());
    let permit = semaphore.acquire(1).unwrap();
    lossy.plan("semaphore_add", Fault::LoseReply);
    // Sent again with the same record: the repeat finds it and counts
    // nothing more, so the release succeeds.
    permit.release().unwrap();
    assert_eq!(lossy.calls_of("semaphore_add"), 2, "sent once more");
    settles_at(&semaphore, 2, "a release whose reply was lost");
}

#[test]
fn a_release_whose_request_was_lost_is_sent_again() {
    let server = TestServer::start();
    let (client, lossy) = lossy_client(&server);
    let semaphore = client.semaphore(unique_name("exact:release-request").as_str());
    assert!(semaphore.try_set_permits(2).unwrap());
    let permit = semaphore.acquire(1).unwrap();
    lossy.plan("semaphore_add", Fault::LoseRequest);
    drop(permit);
    settles_at(
        &semaphore,
        2,
        "a dropped permit whose release request was lost",
    );
    // Semaphore::release, not through a guard, alike.
    let _taken = semaphore.acquire(2).unwrap().forget();
    lossy.plan("semaphore_add", Fault::LoseRequest);
    semaphore.release(2).unwrap();
    settles_at(&semaphore, 2, "Semaphore::release whose request was lost");
}

#[test]
fn a_release_that_keeps_failing_lands_once_in_the_background() {
    let server = TestServer::start();
    let (client, lossy) = lossy_client(&server);
    let semaphore = client.semaphore(unique_name("exact:release-bg").as_str());
    assert!(semaphore.try_set_permits(1).unwrap());
    let permit = semaphore.acquire(1).unwrap();
    // Every in-line try loses its reply (each ran: the first counted), and
    // so does the first background try.
    for _ in 0..5 {
        lossy.plan("semaphore_add", Fault::LoseReply);
    }
    let err = permit.release().unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    wait_until(
        "the planned faults were used",
        Duration::from_secs(10),
        || lossy.planned() == 0,
    );
    settles_at(&semaphore, 1, "a release repeated in the background");
}

#[test]
fn a_try_acquire_whose_reply_was_lost_is_undone_exactly() {
    let server = TestServer::start();
    let (client, lossy) = lossy_client(&server);
    let semaphore = client.semaphore(unique_name("exact:acquire-reply").as_str());
    assert!(semaphore.try_set_permits(3).unwrap());
    // Another holder's permit, taken before: the undo must not return it.
    let held = semaphore.acquire(1).unwrap();
    lossy.plan("semaphore_try_acquire", Fault::LoseReply);
    let err = semaphore.try_acquire(1).unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    // The failed call took one; its undo gives exactly that one back.
    settles_at(&semaphore, 2, "the undo of an acquire whose reply was lost");
    assert_eq!(lossy.calls_of("semaphore_undo_acquire"), 1);
    drop(held);
    settles_at(&semaphore, 3, "after the other holder released");
}

#[test]
fn a_try_acquire_whose_request_was_lost_gives_back_nothing() {
    let server = TestServer::start();
    let (client, lossy) = lossy_client(&server);
    let semaphore = client.semaphore(unique_name("exact:acquire-request").as_str());
    assert!(semaphore.try_set_permits(2).unwrap());
    let held = semaphore.acquire(1).unwrap();
    lossy.plan("semaphore_try_acquire", Fault::LoseRequest);
    assert!(semaphore.try_acquire(1).is_err());
    wait_until("the undo ran", Duration::from_secs(10), || {
        lossy.calls_of("semaphore_undo_acquire") == 1
    });
    // Nothing was taken, so nothing is given back: still one held.
    settles_at(&semaphore, 1, "the undo of an acquire that never ran");
    drop(held);
    settles_at(&semaphore, 2, "after the holder released");
}

#[test]
fn an_acquire_that_arrives_after_its_undo_is_refused() {
    let server = TestServer::start();
    let backend = redisync::RedisBackend::open(&server.url()).unwrap();
    let name = unique_name("exact:late-acquire");
    let channel = keys::semaphore_channel(&name);
    let op = keys::op_record(&name, "late1");
    redisync::internal::semaphore::add(&backend, &name, &channel, 1).unwrap();
    // The undo lands first (the request still on its way): it gave nothing
    // back, and marks the call undone.
    assert!(
        !redisync::internal::semaphore::undo_acquire(&backend, &name, &channel, 1, &op).unwrap()
    );
    let late = redisync::internal::semaphore::try_acquire_recorded(&backend, &name, 1, &op);
    let err = late.unwrap_err();
    assert!(err.is_connection_error(), "read as a late request: {err}");
    assert_eq!(
        redisync::internal::counter::get(&backend, &name).unwrap(),
        1
    );
    // The record is redisync's own key in the object's slot, with a TTL.
    let mut conn = server.connection();
    let ttl = common::pttl(&mut conn, &op);
    assert!(
        ttl > 0 && ttl <= redisync::internal::semaphore::RECORD_MS,
        "{ttl}"
    );
}

#[test]
fn a_late_copy_of_an_acquire_that_found_too_few_takes_nothing() {
    let server = TestServer::start();
    let backend = redisync::RedisBackend::open(&server.url()).unwrap();
    let name = unique_name("exact:late-copy");
    let channel = keys::semaphore_channel(&name);
    let op = keys::op_record(&name, "copy1");
    // The copy that ran first found no permit: the call's outcome is "not
    // taken", which the caller read and acted on.
    assert!(!redisync::internal::semaphore::try_acquire_recorded(&backend, &name, 1, &op).unwrap());
    redisync::internal::semaphore::add(&backend, &name, &channel, 1).unwrap();
    // A copy of the same call delivered late (a delaying network) reports
    // that outcome and takes nothing.
    assert!(!redisync::internal::semaphore::try_acquire_recorded(&backend, &name, 1, &op).unwrap());
    assert_eq!(
        redisync::internal::counter::get(&backend, &name).unwrap(),
        1
    );
}

#[test]
fn a_count_down_whose_reply_was_lost_counts_once() {
    let server = TestServer::start();
    let (client, lossy) = lossy_client(&server);
    let latch = client.count_down_latch(unique_name("exact:latch").as_str());
    assert!(latch.try_set_count(3).unwrap());
    lossy.plan("latch_count_down", Fault::LoseReply);
    latch.count_down().unwrap();
    assert_eq!(latch.count().unwrap(), 2, "counted once");
    lossy.plan("latch_count_down", Fault::LoseRequest);
    latch.count_down().unwrap();
    assert_eq!(latch.count().unwrap(), 1, "a lost request is sent again");
    assert_eq!(lossy.calls_of("latch_count_down"), 4);
}

#[test]
fn an_expirable_acquire_that_arrives_after_its_undo_is_refused() {
    let server = TestServer::start();
    let backend = redisync::RedisBackend::open(&server.url()).unwrap();
    let name = unique_name("exact:late-expirable");
    let (leases, channel) = (keys::permit_timeouts(&name), keys::semaphore_channel(&name));
    let keys = ExpirableKeys {
        name: &name,
        leases: &leases,
        channel: &channel,
    };
    let op = keys::op_record(&name, "late2");
    let now = redisync::internal::expirable::NON_EXPIRABLE - 1;
    let now = now.min(1_700_000_000_000);
    let never = redisync::internal::expirable::NON_EXPIRABLE;
    redisync::internal::semaphore::add(&backend, &name, &channel, 2).unwrap();
    // Sent twice (its reply lost): leased once.
    for _ in 0..2 {
        let taken = redisync::internal::expirable::acquire_many_recorded(
            &backend,
            &keys,
            &["0a"],
            never,
            now,
            Some(&op),
        )
        .unwrap();
        assert!(taken.is_acquired());
    }
    assert_eq!(
        redisync::internal::expirable::available(&backend, &keys, now).unwrap(),
        1
    );
    // Its undo returns exactly its permit; the call, arriving again, is
    // refused.
    assert_eq!(
        redisync::internal::expirable::undo_acquire(&backend, &keys, &["0a"], now, &op).unwrap(),
        1
    );
    let late = redisync::internal::expirable::acquire_many_recorded(
        &backend,
        &keys,
        &["0a"],
        never,
        now,
        Some(&op),
    );
    assert!(late.unwrap_err().is_connection_error());
    assert_eq!(
        redisync::internal::expirable::available(&backend, &keys, now).unwrap(),
        2
    );
}

#[test]
fn an_expirable_acquire_whose_reply_was_lost_is_undone_exactly() {
    let server = TestServer::start();
    let (client, lossy) = lossy_client(&server);
    let semaphore = client.permit_expirable_semaphore(unique_name("exact:expirable").as_str());
    assert!(semaphore.try_set_permits(2).unwrap());
    let held = semaphore.acquire_many(1, None).unwrap();
    lossy.plan("expirable_acquire", Fault::LoseReply);
    assert!(semaphore.try_acquire_many(1, None).is_err());
    wait_until(
        "the undo returned the permit",
        Duration::from_secs(10),
        || semaphore.available_permits().unwrap() == 1,
    );
    assert_eq!(lossy.calls_of("expirable_undo_acquire"), 1);
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        semaphore.available_permits().unwrap(),
        1,
        "the other holder's permit stays taken"
    );
    drop(held);
    assert_eq!(semaphore.available_permits().unwrap(), 2);
}

/// The in-flight kill of tests/fault_suite.rs: a slow script keeps the
/// server busy while requests queue behind it, then `CLIENT KILL TYPE
/// normal` is sent behind them, so they run (or not, if they were still on
/// their way) and their connections close before the replies go out.
const BUSY_SCRIPT: &str = r"
local t = redis.call('time')
local start = t[1] * 1000 + t[2] / 1000
repeat
    t = redis.call('time')
until t[1] * 1000 + t[2] / 1000 - start >= tonumber(ARGV[1])
return 1
";

/// Runs `calls` (each on its own thread) while the server is busy, kills
/// every normal connection behind them, and returns how many it killed.
fn kill_in_flight(server: &TestServer, calls: Vec<Box<dyn FnOnce() + Send>>) -> i64 {
    let mut conn = server.connection();
    let busy = {
        let mut busy_conn = server.connection();
        thread::spawn(move || {
            let _ = redis::Script::new(BUSY_SCRIPT)
                .arg(400)
                .invoke::<i64>(&mut busy_conn);
        })
    };
    thread::sleep(Duration::from_millis(100));
    let threads: Vec<_> = calls.into_iter().map(thread::spawn).collect();
    thread::sleep(Duration::from_millis(150));
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut conn)
        .unwrap();
    let _ = busy.join();
    for handle in threads {
        handle.join().unwrap();
    }
    killed
}

#[test]
fn releases_and_acquires_killed_in_flight_keep_the_count_exact() {
    let server = TestServer::start();
    let client = redisync::Client::builder()
        .redis_url(server.url())
        .build()
        .unwrap();
    let semaphore = client.semaphore(unique_name("exact:in-flight").as_str());
    const SET: i64 = 6;
    assert!(semaphore.try_set_permits(SET as u64).unwrap());
    for round in 0..3 {
        // Three releases and three acquires in flight at once.
        let permits: Vec<_> = (0..3).map(|_| semaphore.acquire(1).unwrap()).collect();
        let kept: Arc<Mutex<Vec<redisync::SemaphorePermit>>> = Arc::default();
        let mut calls: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
        for permit in permits {
            calls.push(Box::new(move || {
                // An error: it goes on in the background.
                let _ = permit.release();
            }));
        }
        for _ in 0..3 {
            let (semaphore, kept) = (semaphore.clone(), Arc::clone(&kept));
            calls.push(Box::new(move || {
                if let Ok(Some(permit)) = semaphore.try_acquire(1) {
                    kept.lock().unwrap().push(permit);
                }
            }));
        }
        let killed = kill_in_flight(&server, calls);
        assert!(killed >= 1, "round {round}: the kill closed no connection");
        let kept = std::mem::take(&mut *kept.lock().unwrap());
        let held = kept.len() as i64;
        settles_at(
            &semaphore,
            SET - held,
            &format!("round {round}: {held} permits held after the kill of {killed} connections"),
        );
        drop(kept);
        settles_at(
            &semaphore,
            SET,
            &format!("round {round}: every permit back"),
        );
    }
}

#[test]
fn an_expirable_release_whose_request_was_lost_goes_on_in_the_background() {
    let server = TestServer::start();
    let (client, lossy) = lossy_client(&server);
    let semaphore = client.permit_expirable_semaphore(unique_name("exact:expirable-rel").as_str());
    assert!(semaphore.try_set_permits(1).unwrap());
    // Without a lease: a lost release would keep it taken for good.
    let id = semaphore.acquire_many(1, None).unwrap().forget().remove(0);
    lossy.plan("expirable_release", Fault::LoseRequest);
    assert!(
        semaphore
            .try_release(&id)
            .unwrap_err()
            .is_connection_error()
    );
    wait_until(
        "the release landed in the background",
        Duration::from_secs(10),
        || semaphore.available_permits().unwrap() == 1,
    );
    assert!(!semaphore.try_release(&id).unwrap(), "released once");
    assert_eq!(semaphore.available_permits().unwrap(), 1);
}

#[test]
fn a_late_copy_of_an_expirable_attempt_that_found_too_few_takes_nothing() {
    let server = TestServer::start();
    let backend = redisync::RedisBackend::open(&server.url()).unwrap();
    let name = unique_name("exact:late-copy-expirable");
    let (leases, channel) = (keys::permit_timeouts(&name), keys::semaphore_channel(&name));
    let keys = ExpirableKeys {
        name: &name,
        leases: &leases,
        channel: &channel,
    };
    let op = keys::op_record(&name, "copy2");
    let (now, never) = (
        1_700_000_000_000,
        redisync::internal::expirable::NON_EXPIRABLE,
    );
    let attempt = || {
        redisync::internal::expirable::acquire_many_recorded(
            &backend,
            &keys,
            &["0c"],
            never,
            now,
            Some(&op),
        )
        .unwrap()
    };
    assert!(!attempt().is_acquired(), "no permits yet");
    redisync::internal::semaphore::add(&backend, &name, &channel, 1).unwrap();
    // A copy of that attempt delivered late takes nothing, even with a
    // permit free now (it would be leased to nobody, for good).
    assert!(!attempt().is_acquired());
    assert_eq!(
        redisync::internal::expirable::available(&backend, &keys, now).unwrap(),
        1
    );
}
