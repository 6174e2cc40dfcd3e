//! A store written outside the crate, against the public API only
//! ([`common::outside::OutsideStore`]: the items of the crate root, nothing
//! of `redisync::internal`), keeps what the crate's own stores keep.
//!
//! - Every shared behaviour (`backend_tests!` in `lock.rs`, `semaphore.rs`,
//!   `fair_lock.rs`, ... and the checks below) runs on it too, as
//!   `outside::<name>`, beside `memory::<name>` and `redis::<name>`.
//! - Here: the seam's obligations checked on all three stores, and the
//!   late-command guarantee on the outside store, which sends a copy of
//!   windowed requests again after their window ended: every copy must be
//!   refused, and nothing it carried may count.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::outside::{OUTSIDE_RESPONSE_TIMEOUT, OutsideStore};
use common::timing::{LONG_LEASE, PROMPT, STUCK};
use common::{Env, TestServer, backend_tests, unique_name};
use redisync::{Client, LockBackend, NopEventHandler};

backend_tests!(
    concurrent_counting_is_exact,
    an_unlock_wakes_a_waiter_of_another_client_promptly,
    the_store_reports_its_clock_and_its_timeout,
);

/// Atomic scripts and exactly-once counting: four clients add a permit 25
/// times each, concurrently; the count is exact.
fn concurrent_counting_is_exact(env: &Env) {
    let name = unique_name("outside:count");
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let semaphore = env.client().semaphore(name.clone());
            thread::spawn(move || {
                for _ in 0..25 {
                    semaphore.add_permits(1).unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(
        env.client().semaphore(name).available_permits().unwrap(),
        100
    );
}

/// Pub/sub delivery: a waiter parked in one client is woken by an unlock
/// in another well before the holder's lease would free the lock.
fn an_unlock_wakes_a_waiter_of_another_client_promptly(env: &Env) {
    let name = unique_name("outside:wake");
    let holder = env.client();
    let waiter = env.client();
    let guard = holder
        .lock(name.as_str())
        .lock_with_lease(LONG_LEASE)
        .unwrap();
    let lock = waiter.lock(name.as_str());
    let parked = thread::spawn(move || {
        let started = Instant::now();
        let guard = lock.try_lock_for(STUCK).unwrap();
        (guard.is_some(), started.elapsed())
    });
    thread::sleep(Duration::from_millis(300));
    let released = Instant::now();
    guard.unlock().unwrap();
    let (acquired, _) = parked.join().unwrap();
    assert!(acquired, "the waiter did not get the lock");
    assert!(
        released.elapsed() < PROMPT,
        "the waiter took {:?} after the unlock",
        released.elapsed()
    );
}

/// The provided methods a client relies on: the server's clock (close to
/// this machine's; a cluster's store has none) and the response timeout
/// the records are sized by.
fn the_store_reports_its_clock_and_its_timeout(env: &Env) {
    let client = env.client();
    let store = client.backend();
    let wall = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    match store.server_now_ms() {
        Some(server) => assert!(
            (server - wall).abs() < 5_000,
            "server {server}, wall {wall}"
        ),
        // A cluster's store reads no one server's clock.
        None => assert!(!matches!(
            env.store,
            common::Store::Memory(_) | common::Store::Redis(_)
        )),
    }
    match (&env.outside, &env.store) {
        (Some(_), _) => assert_eq!(store.response_timeout(), Some(OUTSIDE_RESPONSE_TIMEOUT)),
        (None, common::Store::Memory(_)) => assert_eq!(store.response_timeout(), None),
        (None, _) => assert!(store.response_timeout().is_some()),
    }
}

/// Every windowed request of a workload (locks, a semaphore, a latch) is
/// sent again after its window ended: every copy is refused (`ERR late
/// request`), and the state after all of them is the workload's own.
#[test]
fn late_copies_of_every_windowed_request_write_nothing() {
    let server = TestServer::start();
    let store = OutsideStore::new(&server.url(), 1);
    let late = store.late_copies();
    let client = Client::builder()
        .backend(store.clone())
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .unwrap();

    let name = unique_name("outside:late");
    let lock = client.lock(format!("{name}:lock"));
    for _ in 0..3 {
        lock.lock().unwrap().unlock().unwrap();
    }
    let semaphore = client.semaphore(format!("{name}:semaphore"));
    semaphore.add_permits(3).unwrap();
    semaphore
        .try_acquire(1)
        .unwrap()
        .expect("a permit")
        .release()
        .unwrap();
    let taken = semaphore.try_acquire(2).unwrap().expect("two permits");
    let latch = client.count_down_latch(format!("{name}:latch"));
    assert!(latch.try_set_count(5).unwrap());
    latch.count_down().unwrap();
    latch.count_down().unwrap();

    // Every copy is due one window after its request.
    store.wait_for_late_copies(OUTSIDE_RESPONSE_TIMEOUT + STUCK);
    let (sent, refused, answered, undelivered) = late.counts();
    println!(
        "late copies: {sent} sent, {refused} refused, {answered} answered, {undelivered} undelivered"
    );
    assert!(sent >= 10, "only {sent} late copies were sent");
    assert_eq!(
        answered, 0,
        "a late copy was answered: its window did not stop it"
    );
    assert_eq!(refused + undelivered, sent);
    assert!(refused >= 10, "only {refused} late copies were refused");

    // Nothing any copy carried counted.
    assert!(!lock.is_locked().unwrap());
    assert_eq!(semaphore.available_permits().unwrap(), 1);
    assert_eq!(latch.count().unwrap(), 3);
    taken.release().unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 3);
}

/// `Resend::Harmless` means it: with every second harmless call run twice
/// (the first reply lost, as after a connection the server closed), two
/// clients' contended, reentrant, renewed holds of a lock and of a
/// read-write lock exclude each other, and all end free.
#[test]
fn harmless_calls_run_twice_stay_harmless() {
    let server = TestServer::start();
    let store = OutsideStore::new(&server.url(), 0);
    store.resend_harmless_every(2);
    let clients: Vec<Client> = (0..2)
        .map(|_| {
            Client::builder()
                .backend(store.clone())
                .event_handler(Arc::new(NopEventHandler))
                .watchdog_timeout(Duration::from_secs(3))
                .build()
                .unwrap()
        })
        .collect();
    let name = unique_name("outside:resent");
    let inside = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let workers: Vec<_> = clients
        .iter()
        .flat_map(|client| [client.clone(), client.clone()])
        .map(|client| {
            let (name, inside) = (name.clone(), Arc::clone(&inside));
            thread::spawn(move || {
                let lock = client.lock(format!("{name}:lock"));
                let rw = client.read_write_lock(format!("{name}:rw"));
                for round in 0..10 {
                    let outer = lock.lock().unwrap();
                    let inner = lock.lock().unwrap();
                    assert_eq!(inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst), 0);
                    if round == 0 {
                        // Past a renewal (a third of the watchdog timeout).
                        thread::sleep(Duration::from_millis(1_200));
                    }
                    inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    inner.unlock().unwrap();
                    outer.unlock().unwrap();
                    if round % 2 == 0 {
                        rw.write_lock().lock().unwrap().unlock().unwrap();
                    } else {
                        rw.read_lock().lock().unwrap().unlock().unwrap();
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert!(
        store.resent() >= 20,
        "only {} calls were run twice",
        store.resent()
    );
    let observer = &clients[0];
    assert!(!observer.lock(format!("{name}:lock")).is_locked().unwrap());
    let rw = observer.read_write_lock(format!("{name}:rw"));
    let taken = rw.write_lock().try_lock_for(PROMPT).unwrap();
    assert!(taken.is_some(), "the read-write lock was left held");
}
