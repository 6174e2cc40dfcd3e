//! Conformance suite for the rest of [`PermitExpirableSemaphore`]: permits
//! without a lease, several permits in one call, the [`PermitGuard`],
//! `acquired_permits`, `set_permits`, `update_lease_time`, and the wake-ups
//! of parked waiters, on both backends (`backend_tests!`). The id-based
//! basics are in `tests/semaphore.rs`.
//!
//! Two `Client`s on one store stand for two processes. Leases are short
//! (hundreds of ms) and bounds generous.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::collections::HashSet;
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::keys;
use common::timing::{PROMPT, SETTLE, STUCK};
use common::{CountingBackend, Env, Store, backend_tests, unique_name};
use redisync::DumpedValue;
use redisync::{Client, Error, PermitExpirableSemaphore, PermitGuard, PermitId};

backend_tests!(
    permits_without_a_lease_are_held_until_released,
    several_permits_are_taken_all_or_none,
    guard_release_forget_and_drop,
    acquired_permits_counts_live_leases,
    set_permits_sets_the_total_whatever_is_taken,
    update_lease_time_extends_or_reports_gone,
    releases_additions_and_totals_wake_parked_waiters,
    try_release_says_whether_the_id_was_known,
    permit_ids_are_stored_as_redisson_stores_them,
    a_failed_guard_release_goes_on_in_the_background,
    bad_input_is_a_clear_error,
);

const LONG: Duration = Duration::from_secs(30);
/// Redisson's `nonExpirableTimeout`: the lease end of a permit without one.
const NON_EXPIRABLE: i64 = 922_337_203_685_477;

fn invalid_argument(err: &Error) -> &'static str {
    match err {
        Error::InvalidArgument { what, .. } => what,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// A client whose backend counts its calls, on the same store as `other`.
fn counting_client(env: &Env, other: &Client) -> (Client, CountingBackend) {
    let counting = CountingBackend::new(Arc::clone(other.backend()));
    let client = env
        .builder()
        .shared_backend(Arc::new(counting.clone()))
        .build()
        .unwrap();
    (client, counting)
}

/// A thread blocked in `acquire_many(permits, None)`: reports when it got
/// them, then keeps them (`forget`) and returns their ids.
fn spawn_waiter(
    semaphore: PermitExpirableSemaphore,
    permits: u64,
) -> (thread::JoinHandle<Vec<PermitId>>, mpsc::Receiver<Instant>) {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let guard = semaphore
            .acquire_many(permits, None)
            .expect("waiter: acquire_many");
        let _ = tx.send(Instant::now());
        guard.forget()
    });
    (handle, rx)
}

fn woken_at(rx: &mpsc::Receiver<Instant>, what: &str) -> Instant {
    rx.recv_timeout(STUCK)
        .unwrap_or_else(|e| panic!("{what}: the waiter got nothing within {STUCK:?} ({e})"))
}

/// The bytes a permit id's hex digits spell: how Redisson stores an id.
fn id_bytes(id: &PermitId) -> Vec<u8> {
    common::permit_id_bytes(id.as_str())
}

/// The leases zset of semaphore `name` as stored: (member bytes, score).
fn stored_leases(env: &Env, name: &str) -> Vec<(Vec<u8>, f64)> {
    let key = keys::permit_timeouts(name);
    match &env.store {
        Store::Memory(backend) => backend
            .dump()
            .into_iter()
            .find(|dumped| dumped.key == key)
            .map_or_else(Vec::new, |dumped| match dumped.value {
                DumpedValue::ZSet(members) => members,
                other => panic!("{key} holds {other:?}"),
            }),
        _ => {
            let mut conn = env.redis_connection().unwrap();
            ::redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(&mut conn)
                .unwrap()
        }
    }
}

/// The lease end stored for `id` (found by its bytes, as Redisson would).
fn stored_lease_end(env: &Env, name: &str, id: &PermitId) -> i64 {
    let member = id_bytes(id);
    let leases = stored_leases(env, name);
    let (_, score) = leases
        .iter()
        .find(|(stored, _)| *stored == member)
        .unwrap_or_else(|| panic!("permit {id} is not stored as its 16 bytes: {leases:?}"));
    #[allow(clippy::cast_possible_truncation)]
    let end = *score as i64;
    end
}

fn permits_without_a_lease_are_held_until_released(env: &Env) {
    let (a, b) = (env.client(), env.client());
    let name = unique_name("pes:no-lease");
    let pa = a.permit_expirable_semaphore(name.as_str());
    let pb = b.permit_expirable_semaphore(name.as_str());
    assert!(pa.try_set_permits(1).unwrap());
    let guard = pa.acquire_many(1, None).unwrap();
    assert_eq!(guard.ids().len(), 1);
    let end = stored_lease_end(env, &name, &guard.ids()[0]);
    assert_eq!(end, NON_EXPIRABLE, "not Redisson's non-expirable lease end");
    // It does not come back by itself: a bounded wait times out on time,
    // not polling past it.
    let started = Instant::now();
    assert!(pb.try_acquire_id_for(SETTLE, LONG).unwrap().is_none());
    let waited = started.elapsed();
    assert!(
        waited >= SETTLE && waited < SETTLE + PROMPT,
        "waited {waited:?}"
    );
    assert_eq!(pb.acquired_permits().unwrap(), 1);
    assert_eq!(pb.available_permits().unwrap(), 0);

    // A waiter without a lease either, parked, is woken by the drop.
    let (waiter, rx) = spawn_waiter(pb, 1);
    thread::sleep(SETTLE);
    assert!(rx.try_recv().is_err(), "the waiter got a held permit");
    let dropped = Instant::now();
    drop(guard);
    let latency = woken_at(&rx, "no-lease drop").duration_since(dropped);
    assert!(
        latency < PROMPT,
        "the drop woke the waiter after {latency:?}"
    );
    let ids = waiter.join().unwrap();
    assert_eq!(pa.acquired_permits().unwrap(), 1);
    pa.release(&ids[0]).unwrap();
    assert_eq!(pa.available_permits().unwrap(), 1);
    assert_eq!(pa.acquired_permits().unwrap(), 0);
}

fn several_permits_are_taken_all_or_none(env: &Env) {
    let (a, b) = (env.client(), env.client());
    let name = unique_name("pes:many");
    let pa = a.permit_expirable_semaphore(name.as_str());
    let pb = b.permit_expirable_semaphore(name.as_str());
    pa.try_set_permits(3).unwrap();
    assert!(pa.try_acquire_many(4, Some(LONG)).unwrap().is_none());
    assert_eq!(
        pa.available_permits().unwrap(),
        3,
        "a refused call took some"
    );

    let two = pa.acquire_many(2, Some(LONG)).unwrap();
    let ids: HashSet<_> = two.ids().iter().cloned().collect();
    assert_eq!(ids.len(), 2, "ids not distinct: {:?}", two.ids());
    assert!(two.ids().iter().all(|id| id.as_str().len() == 32));
    assert_eq!(pb.available_permits().unwrap(), 1);
    assert_eq!(pb.acquired_permits().unwrap(), 2);
    assert!(pb.try_acquire_many(2, None).unwrap().is_none());
    assert_eq!(pb.available_permits().unwrap(), 1, "all or none");

    // A waiter for 2 of them parks until the release of the two.
    let (waiter, rx) = spawn_waiter(pb.clone(), 2);
    thread::sleep(SETTLE);
    assert!(rx.try_recv().is_err(), "the waiter got 2 of 1 available");
    let released = Instant::now();
    assert_eq!(two.release().unwrap(), 2);
    let latency = woken_at(&rx, "release of 2").duration_since(released);
    assert!(latency < PROMPT, "woken after {latency:?}");
    let got = waiter.join().unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(pa.available_permits().unwrap(), 1);
    // Each id is a permit of its own.
    pa.release(&got[0]).unwrap();
    assert_eq!(pa.available_permits().unwrap(), 2);
    assert!(pa.try_release(&got[1]).unwrap());
    assert_eq!(pa.available_permits().unwrap(), 3);

    // A bounded wait for more than are available times out.
    assert!(
        pb.try_acquire_many_for(4, Duration::from_millis(200), Some(LONG))
            .unwrap()
            .is_none()
    );
}

fn guard_release_forget_and_drop(env: &Env) {
    let client = env.client();
    let p = client.permit_expirable_semaphore(unique_name("pes:guard"));
    p.try_set_permits(3).unwrap();

    // Dropped: released.
    {
        let _guard: PermitGuard = p.acquire_many(3, Some(LONG)).unwrap();
        assert_eq!(p.available_permits().unwrap(), 0);
    }
    assert_eq!(p.available_permits().unwrap(), 3);

    // Forgotten: kept, and its ids release later.
    let ids = p.acquire_many(2, None).unwrap().forget();
    assert_eq!(p.available_permits().unwrap(), 1);
    for id in &ids {
        p.release(id).unwrap();
    }
    assert_eq!(p.available_permits().unwrap(), 3);

    // One of its permits released by id, another expired: release()
    // counts what it still released, and nothing is counted twice.
    let short = p.acquire_many(1, Some(Duration::from_millis(200))).unwrap();
    let two = p.acquire_many(2, Some(LONG)).unwrap();
    p.release(&two.ids()[0]).unwrap();
    assert_eq!(two.release().unwrap(), 1);
    thread::sleep(Duration::from_millis(500));
    assert_eq!(short.release().unwrap(), 0, "released an expired permit");
    assert_eq!(p.available_permits().unwrap(), 3);
    assert_eq!(p.acquired_permits().unwrap(), 0);

    // A guard outliving its lease drops without error or double count.
    let expired = p.acquire_many(2, Some(Duration::from_millis(100))).unwrap();
    thread::sleep(Duration::from_millis(300));
    drop(expired);
    assert_eq!(p.available_permits().unwrap(), 3);
    let debug = format!("{:?}", p.acquire_many(1, None).unwrap());
    assert!(debug.contains("PermitGuard"), "{debug}");
}

fn acquired_permits_counts_live_leases(env: &Env) {
    let (a, b) = (env.client(), env.client());
    let name = unique_name("pes:acquired");
    let pa = a.permit_expirable_semaphore(name.as_str());
    let pb = b.permit_expirable_semaphore(name.as_str());
    assert_eq!(pb.acquired_permits().unwrap(), 0, "never set");
    pa.try_set_permits(4).unwrap();
    assert_eq!(pb.acquired_permits().unwrap(), 0);
    let _short = pa
        .acquire_many(2, Some(Duration::from_millis(200)))
        .unwrap();
    let kept = pa.acquire_many(1, None).unwrap();
    let id = pa.acquire_id(LONG).unwrap();
    assert_eq!(pb.acquired_permits().unwrap(), 4);
    assert_eq!(pb.available_permits().unwrap(), 0);
    thread::sleep(Duration::from_millis(500));
    // The expired two are not counted, and are back.
    assert_eq!(pb.acquired_permits().unwrap(), 2);
    assert_eq!(pb.available_permits().unwrap(), 2);
    pb.release(&id).unwrap();
    drop(kept);
    assert_eq!(pb.acquired_permits().unwrap(), 0);
    assert_eq!(pb.available_permits().unwrap(), 4);
}

fn set_permits_sets_the_total_whatever_is_taken(env: &Env) {
    let (a, b) = (env.client(), env.client());
    let name = unique_name("pes:set");
    let pa = a.permit_expirable_semaphore(name.as_str());
    let pb = b.permit_expirable_semaphore(name.as_str());
    // Never set: becomes the total.
    pa.set_permits(3).unwrap();
    assert_eq!(pb.available_permits().unwrap(), 3);
    assert!(
        !pb.try_set_permits(7).unwrap(),
        "set_permits did not set it"
    );
    let taken = pa.acquire_many(2, Some(LONG)).unwrap();
    // Raised with 2 taken: 5 in all, 3 available.
    pb.set_permits(5).unwrap();
    assert_eq!(pb.available_permits().unwrap(), 3);
    assert_eq!(pb.acquired_permits().unwrap(), 2);
    // The same total again changes nothing.
    pb.set_permits(5).unwrap();
    assert_eq!(pb.available_permits().unwrap(), 3);
    // Lowered below what is taken: negative, nothing revoked.
    pb.set_permits(1).unwrap();
    assert_eq!(pb.available_permits().unwrap(), -1);
    assert_eq!(pb.acquired_permits().unwrap(), 2);
    assert!(pb.try_acquire_id(LONG).unwrap().is_none());
    assert_eq!(taken.release().unwrap(), 2);
    assert_eq!(pb.available_permits().unwrap(), 1, "the total is 1");
    pb.set_permits(0).unwrap();
    assert_eq!(pb.available_permits().unwrap(), 0);

    // An expired lease counts as returned, not as taken.
    pa.set_permits(2).unwrap();
    let _expired = pa.acquire_id(Duration::from_millis(100)).unwrap();
    thread::sleep(Duration::from_millis(300));
    pb.set_permits(4).unwrap();
    assert_eq!(pb.available_permits().unwrap(), 4);

    // Raising the total wakes a parked waiter.
    pb.set_permits(0).unwrap();
    let (waiter, rx) = spawn_waiter(pa, 1);
    thread::sleep(SETTLE);
    assert!(rx.try_recv().is_err(), "the waiter got one of 0");
    let raised = Instant::now();
    pb.set_permits(1).unwrap();
    let latency = woken_at(&rx, "set_permits").duration_since(raised);
    assert!(
        latency < PROMPT,
        "set_permits woke the waiter after {latency:?}"
    );
    let ids = waiter.join().unwrap();
    assert_eq!(pb.available_permits().unwrap(), 0);
    pb.release(&ids[0]).unwrap();
}

fn update_lease_time_extends_or_reports_gone(env: &Env) {
    let (a, b) = (env.client(), env.client());
    let name = unique_name("pes:update");
    let pa = a.permit_expirable_semaphore(name.as_str());
    let pb = b.permit_expirable_semaphore(name.as_str());
    pa.try_set_permits(2).unwrap();

    // Lengthened: it outlives its first lease.
    let id = pa.acquire_id(Duration::from_millis(300)).unwrap();
    assert!(pb.update_lease_time(&id, LONG).unwrap());
    let end = stored_lease_end(env, &name, &id);
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    assert!(end > now + 25_000 && end <= now + 31_000, "lease end {end}");
    thread::sleep(Duration::from_millis(600));
    assert_eq!(
        pb.acquired_permits().unwrap(),
        1,
        "the lengthened lease ran out"
    );

    // Shortened: it comes back early.
    assert!(
        pa.update_lease_time(&id, Duration::from_millis(100))
            .unwrap()
    );
    thread::sleep(Duration::from_millis(400));
    assert_eq!(pb.acquired_permits().unwrap(), 0);
    assert!(
        !pa.update_lease_time(&id, LONG).unwrap(),
        "revived an expired permit"
    );
    assert_eq!(pb.acquired_permits().unwrap(), 0);
    assert!(!pa.try_release(&id).unwrap());

    // Released or unknown: false.
    let id = pa.acquire_id(LONG).unwrap();
    pa.release(&id).unwrap();
    assert!(!pa.update_lease_time(&id, LONG).unwrap());
    let unknown = PermitId::from("0123456789abcdef0123456789abcdef".to_owned());
    assert!(!pa.update_lease_time(&unknown, LONG).unwrap());
    assert_eq!(pb.available_permits().unwrap(), 2);

    // A permit without a lease gets one.
    let ids = pa.acquire_many(1, None).unwrap().forget();
    assert!(
        pa.update_lease_time(&ids[0], Duration::from_millis(100))
            .unwrap()
    );
    thread::sleep(Duration::from_millis(400));
    assert_eq!(pb.available_permits().unwrap(), 2);

    // The guard's form: how many of its permits got the new lease.
    let guard = pa
        .acquire_many(2, Some(Duration::from_millis(300)))
        .unwrap();
    pa.release(&guard.ids()[1]).unwrap();
    assert_eq!(guard.update_lease_time(LONG).unwrap(), 1);
    thread::sleep(Duration::from_millis(600));
    assert_eq!(pb.acquired_permits().unwrap(), 1);
    assert_eq!(guard.release().unwrap(), 1);
    assert_eq!(pb.available_permits().unwrap(), 2);
}

fn releases_additions_and_totals_wake_parked_waiters(env: &Env) {
    let a = env.client();
    let (b, counting) = counting_client(env, &a);
    for what in ["add_permits", "set_permits", "release", "guard drop"] {
        let name = unique_name("pes:wakes");
        let pa = a.permit_expirable_semaphore(name.as_str());
        let pb = b.permit_expirable_semaphore(name.as_str());
        // None available; for the last two, the one permit is held.
        let (mut id, mut guard) = (None, None);
        match what {
            "add_permits" | "set_permits" => assert!(pa.try_set_permits(0).unwrap()),
            "release" => {
                pa.try_set_permits(1).unwrap();
                id = Some(pa.acquire_id(LONG).unwrap());
            }
            _ => {
                pa.try_set_permits(1).unwrap();
                guard = Some(pa.acquire_many(1, None).unwrap());
            }
        }
        let before = counting.calls("expirable_acquire");
        let (waiter, rx) = spawn_waiter(pb, 1);
        thread::sleep(SETTLE);
        assert!(
            rx.try_recv().is_err(),
            "{what}: the waiter got a permit early"
        );
        let woke = Instant::now();
        match what {
            "add_permits" => pa.add_permits(1).unwrap(),
            "set_permits" => pa.set_permits(1).unwrap(),
            "release" => pa.release(&id.take().unwrap()).unwrap(),
            _ => drop(guard.take()),
        }
        let latency = woken_at(&rx, what).duration_since(woke);
        assert!(latency < PROMPT, "{what} woke the waiter after {latency:?}");
        let attempts = counting.calls("expirable_acquire") - before;
        assert!(
            attempts <= 4,
            "{what}: {attempts} attempts, the waiter polls instead of parking"
        );
        for id in waiter.join().unwrap() {
            pa.release(&id).unwrap();
        }
        assert_eq!(pa.available_permits().unwrap(), 1, "{what}");
    }
}

fn try_release_says_whether_the_id_was_known(env: &Env) {
    let (a, b) = (env.client(), env.client());
    let name = unique_name("pes:try-release");
    let pa = a.permit_expirable_semaphore(name.as_str());
    let pb = b.permit_expirable_semaphore(name.as_str());
    pa.try_set_permits(1).unwrap();
    let ids = pa.acquire_many(1, None).unwrap().forget();
    assert!(pb.try_release(&ids[0]).unwrap(), "a held id is known");
    assert!(!pb.try_release(&ids[0]).unwrap(), "released twice");
    let err = pb.release(&ids[0]).unwrap_err();
    assert_eq!(invalid_argument(&err), "permit id", "{err}");
    assert_eq!(pa.available_permits().unwrap(), 1);
}

/// Redisson sends a permit id's bytes (`ByteBufUtil.decodeHexDump`), not
/// its hex text: so do the scripts, so either side releases the other's
/// permits by the same 32-digit string.
fn permit_ids_are_stored_as_redisson_stores_them(env: &Env) {
    let client = env.client();
    let name = unique_name("pes:wire");
    let p = client.permit_expirable_semaphore(name.as_str());
    p.try_set_permits(3).unwrap();
    let guard = p.acquire_many(2, Some(LONG)).unwrap();
    let id = p.acquire_id(LONG).unwrap();
    let mut stored: Vec<Vec<u8>> = stored_leases(env, &name)
        .into_iter()
        .map(|(member, _)| member)
        .collect();
    let mut expected: Vec<Vec<u8>> = guard.ids().iter().chain([&id]).map(id_bytes).collect();
    stored.sort();
    expected.sort();
    assert_eq!(stored, expected);
    assert!(stored.iter().all(|member| member.len() == 16));
    // Upper-case digits spell the same bytes (Java's decoder takes both).
    let upper = PermitId::from(id.as_str().to_uppercase());
    assert!(p.update_lease_time(&upper, LONG).unwrap());
    assert!(p.try_release(&upper).unwrap());
    assert!(!p.try_release(&id).unwrap(), "released twice");
    // Ids that spell no bytes are never permits.
    for bad in ["abc", "zz", "not-an-id", ""] {
        assert!(
            !p.try_release(&PermitId::from(bad.to_owned())).unwrap(),
            "{bad}"
        );
        let err = p
            .update_lease_time(&PermitId::from(bad.to_owned()), LONG)
            .unwrap_err();
        assert_eq!(invalid_argument(&err), "permit id", "{bad}: {err}");
    }
    assert_eq!(guard.release().unwrap(), 2);
    assert!(stored_leases(env, &name).is_empty());
}

/// Permits without a lease never come back by themselves: a guard whose
/// release meets a dead connection hands it to the client's cleanup
/// thread, which sends it once the store answers again.
fn a_failed_guard_release_goes_on_in_the_background(env: &Env) {
    let a = env.client();
    let (b, counting) = counting_client(env, &a);
    let name = unique_name("pes:release-later");
    let pa = a.permit_expirable_semaphore(name.as_str());
    let pb = b.permit_expirable_semaphore(name.as_str());
    pa.try_set_permits(3).unwrap();
    let guard = pb.acquire_many(2, None).unwrap();
    let dropped = pb.acquire_many(1, None).unwrap();
    counting.set_down(true);
    let err = guard.release().unwrap_err();
    assert!(err.is_connection_error(), "{err:?}");
    drop(dropped);
    assert_eq!(pa.available_permits().unwrap(), 0, "released while down");
    counting.set_down(false);
    common::wait_until(
        "the failed releases landed",
        Duration::from_secs(10),
        || pa.available_permits().unwrap() == 3,
    );
    assert_eq!(pa.acquired_permits().unwrap(), 0);
}

fn bad_input_is_a_clear_error(env: &Env) {
    let client = env.client();
    let empty = client.permit_expirable_semaphore("");
    let some_id = PermitId::from("0123456789abcdef0123456789abcdef".to_owned());
    let errors = [
        empty.acquire_many(1, None).map(drop).unwrap_err(),
        empty.try_acquire_many(1, Some(LONG)).map(drop).unwrap_err(),
        empty
            .try_acquire_many_for(1, Duration::from_millis(10), None)
            .map(drop)
            .unwrap_err(),
        empty.acquired_permits().map(drop).unwrap_err(),
        empty.set_permits(1).map(drop).unwrap_err(),
        empty
            .update_lease_time(&some_id, LONG)
            .map(drop)
            .unwrap_err(),
    ];
    for err in &errors {
        assert_eq!(invalid_argument(err), "name", "{err}");
    }

    let p = client.permit_expirable_semaphore(unique_name("pes:bad"));
    p.try_set_permits(2).unwrap();
    for permits in [0, 10_001, u64::MAX] {
        let err = p.try_acquire_many(permits, None).map(drop).unwrap_err();
        assert_eq!(invalid_argument(&err), "permits", "{permits}: {err}");
    }
    assert_eq!(
        p.try_acquire_many(0, None)
            .map(drop)
            .unwrap_err()
            .to_string(),
        "invalid permits: must be at least 1, got 0"
    );
    let err = p.set_permits(u64::MAX).unwrap_err();
    assert_eq!(invalid_argument(&err), "permits", "{err}");
    for lease in [Duration::ZERO, Duration::from_micros(999), Duration::MAX] {
        let err = p.try_acquire_many(1, Some(lease)).map(drop).unwrap_err();
        assert_eq!(invalid_argument(&err), "lease", "{lease:?}: {err}");
        let err = p.update_lease_time(&some_id, lease).unwrap_err();
        assert_eq!(invalid_argument(&err), "lease", "{lease:?}: {err}");
    }
    let err = p
        .update_lease_time(&PermitId::from(String::new()), LONG)
        .unwrap_err();
    assert_eq!(invalid_argument(&err), "permit id", "{err}");
    assert_eq!(
        p.available_permits().unwrap(),
        2,
        "a refused call took some"
    );

    // A key of another type: a lock's hash.
    let name = unique_name("pes:wrongtype");
    let guard = client.lock(name.as_str()).lock().unwrap();
    let p = client.permit_expirable_semaphore(name.as_str());
    let errors = [
        p.acquire_many(1, None).map(drop).unwrap_err(),
        p.set_permits(1).map(drop).unwrap_err(),
    ];
    for err in &errors {
        assert!(err.is_protocol_error(), "expected Protocol, got {err:?}");
    }
    guard.unlock().unwrap();

    // The leases key holding another type.
    let name = unique_name("pes:wrongtype-leases");
    env.set_string(&keys::permit_timeouts(&name), "x");
    let p = client.permit_expirable_semaphore(name.as_str());
    p.try_set_permits(1).unwrap();
    let errors = [
        p.acquire_many(1, None).map(drop).unwrap_err(),
        p.acquired_permits().map(drop).unwrap_err(),
        p.set_permits(1).map(drop).unwrap_err(),
        p.update_lease_time(&some_id, LONG).map(drop).unwrap_err(),
    ];
    for err in &errors {
        assert!(err.is_protocol_error(), "expected Protocol, got {err:?}");
    }
    assert!(p.available_permits().unwrap_err().is_protocol_error());
}

fn assert_send<T: Send>() {}

/// Permits have no owner: a guard may be handed to another thread.
#[test]
fn permit_guard_is_send() {
    assert_send::<PermitGuard>();
    let client = Env::memory().client();
    let p = client.permit_expirable_semaphore(unique_name("pes:send"));
    p.try_set_permits(1).unwrap();
    let guard = p.acquire_many(1, None).unwrap();
    let released = thread::spawn(move || guard.release().unwrap())
        .join()
        .unwrap();
    assert_eq!(released, 1);
    assert_eq!(p.available_permits().unwrap(), 1);
}
