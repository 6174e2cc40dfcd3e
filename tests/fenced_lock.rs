//! Conformance suite for the fenced lock ([`Client::fenced_lock`]): every
//! behaviour is written once, as a function of an [`Env`], and run on both
//! backends by `backend_tests!` (a `memory` and a `redis` module with one
//! `#[test]` per behaviour).
//!
//! A fenced lock is the reentrant lock (same hash, channel and wake-ups)
//! whose every successful acquisition, reentry included, also takes the next
//! value of the counter `redisson_lock_token:{name}`, raised to at least the
//! server's clock in µs. Most cases first set the counter to [`BASE`], far
//! above the clock, so the tokens are exactly `BASE + 1`, `BASE + 2`... in
//! acquisition order: the cases assert exact values, which also proves that
//! failed attempts consume nothing. Others check the clock floor itself: a
//! fresh or lost counter starts at the clock.
//!
//! Two `Client`s on one store stand for two processes. Timings use short
//! leases and generous upper bounds (the CI VM has two vCPUs and heavy
//! steal).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::keys;
use common::timing::{LONG_LEASE, PROMPT, SETTLE, STUCK};
use common::{Env, Store, backend_tests, unique_name};
use redisync::{Lock, LockGuard};

/// A counter value the clock floor (µs since the epoch; 4e15 µs is the year
/// 2096) stays below: set first, it makes each token exactly one more than
/// the last, so the cases can assert exact values.
const BASE: u64 = 4_000_000_000_000_000;

backend_tests!(
    tokens_increase_across_acquisitions_and_clients,
    fresh_counter_starts_at_the_clock,
    tokens_increase_after_the_counter_is_lost,
    negative_counter_is_raised_to_the_clock,
    reentrant_acquisition_gets_a_new_higher_token,
    plain_and_fenced_handles_exclude_each_other,
    plain_unlock_wakes_a_fenced_waiter_and_back,
    plain_and_fenced_holders_never_overlap_under_contention,
    failed_attempts_do_not_consume_tokens,
    non_integer_counter_is_a_protocol_error_and_leaves_the_lock_free,
    tokens_continue_after_lease_expiry_and_force_unlock,
    other_kinds_of_lock_have_no_token,
    tokens_are_unique_and_increasing_under_contention,
);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// The token counter of the lock `name` (a name without a hash tag).
fn token_key(name: &str) -> String {
    keys::fence_counter(name)
}

/// Sets the token counter of `name` to [`BASE`]; returns it.
fn start_counter(env: &Env, name: &str) -> u64 {
    env.set_string(&token_key(name), &BASE.to_string());
    BASE
}

/// This machine's clock in µs since the epoch (the test servers run here,
/// so it is also the clock Redis' `TIME` reads).
fn clock_micros() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

/// The token of a fenced lock's guard; panics if it has none.
fn token_of(guard: &LockGuard) -> u64 {
    guard
        .token()
        .unwrap_or_else(|| panic!("a fenced lock's guard has no token: {guard:?}"))
}

/// On Redis, the raw value at the token counter (`None` when absent); on
/// memory, `None` without looking.
fn raw_counter(env: &Env, name: &str) -> Option<Option<String>> {
    let mut conn = env.redis_connection()?;
    Some(
        ::redis::cmd("GET")
            .arg(token_key(name))
            .query(&mut conn)
            .unwrap(),
    )
}

/// Asserts the counter holds `expected` when the store can be inspected.
fn assert_raw_counter(env: &Env, name: &str, expected: u64) {
    if let Some(value) = raw_counter(env, name) {
        assert_eq!(
            value,
            Some(expected.to_string()),
            "raw value at {}",
            token_key(name)
        );
    }
}

/// Runs `f` on a fresh thread (a different holder of the same client) and
/// returns its result.
fn on_other_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    thread::spawn(f).join().expect("helper thread panicked")
}

/// Spawns a thread that blocks in `lock.lock()`, reports when it got the
/// lock and its token, and unlocks.
fn spawn_waiter(
    lock: Lock,
) -> (
    thread::JoinHandle<()>,
    mpsc::Receiver<(Instant, Option<u64>)>,
) {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let guard = lock.lock().expect("waiter: lock()");
        let _ = tx.send((Instant::now(), guard.token()));
        guard.unlock().expect("waiter: unlock()");
    });
    (handle, rx)
}

/// Waits for a waiter's report; panics (rather than hangs) if it never comes.
fn acquired(rx: &mpsc::Receiver<(Instant, Option<u64>)>, what: &str) -> (Instant, Option<u64>) {
    rx.recv_timeout(STUCK).unwrap_or_else(|e| {
        panic!("{what}: the waiter did not get the lock within {STUCK:?} ({e})")
    })
}

// ---------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------

/// Every acquire method hands out the next token, whichever client asks:
/// exactly one more than the last (the counter starts absent).
fn tokens_increase_across_acquisitions_and_clients(env: &Env) {
    let name = unique_name("fenced:increase");
    let a = env.client();
    let b = env.client();
    let lock_a = a.fenced_lock(name.as_str());
    let lock_b = b.fenced_lock(name.as_str());
    assert_eq!(raw_counter(env, &name).flatten(), None);
    let base = start_counter(env, &name);

    let mut tokens = Vec::new();
    for round in 0..2 {
        for (who, lock) in [("a", &lock_a), ("b", &lock_b)] {
            let guards = [
                lock.lock().unwrap(),
                lock.lock_with_lease(LONG_LEASE).unwrap(),
                lock.try_lock().unwrap().expect("try_lock on a free lock"),
                lock.try_lock_for(PROMPT)
                    .unwrap()
                    .expect("try_lock_for on a free lock"),
                lock.try_lock_for_with_lease(PROMPT, LONG_LEASE)
                    .unwrap()
                    .expect("try_lock_for_with_lease on a free lock"),
            ];
            // The last four were reentrant acquisitions of the first.
            assert_eq!(lock.hold_count().unwrap(), 5);
            for guard in guards {
                let token = token_of(&guard);
                guard.unlock().unwrap();
                tokens.push((round, who, token));
            }
            assert!(!lock.is_locked().unwrap());
        }
    }
    for (index, (round, who, token)) in tokens.iter().enumerate() {
        assert_eq!(
            *token,
            base + index as u64 + 1,
            "acquisition {index} (round {round}, client {who}): tokens {tokens:?}"
        );
    }
    assert_raw_counter(env, &name, base + tokens.len() as u64);

    // Each name has its own counter (starting at the clock).
    let other = unique_name("fenced:increase-other");
    let guard = a.fenced_lock(other.as_str()).lock().unwrap();
    assert!(token_of(&guard) < base, "a new name starts its own count");
    guard.unlock().unwrap();
    let guard = lock_b.lock().unwrap();
    assert_eq!(token_of(&guard), base + tokens.len() as u64 + 1);
}

/// A reentrant acquisition is an acquisition: it gets the next token, and
/// each guard keeps its own.
fn reentrant_acquisition_gets_a_new_higher_token(env: &Env) {
    let name = unique_name("fenced:reentrant");
    let a = env.client();
    let b = env.client();
    let lock = a.fenced_lock(name.as_str());
    let base = start_counter(env, &name);

    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    assert_eq!((token_of(&outer), token_of(&inner)), (base + 1, base + 2));
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert_raw_counter(env, &name, base + 2);

    inner.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert_eq!(
        token_of(&outer),
        base + 1,
        "the outer guard's token changed"
    );
    // Still held: the other client cannot get in (and takes no token).
    assert!(b.fenced_lock(name.as_str()).try_lock().unwrap().is_none());

    let again = lock.lock_with_lease(LONG_LEASE).unwrap();
    assert_eq!(token_of(&again), base + 3, "a second reentry");
    drop(again);
    outer.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());

    let next = b.fenced_lock(name.as_str()).lock().unwrap();
    assert_eq!(
        token_of(&next),
        base + 4,
        "the next holder continues the count"
    );
    next.unlock().unwrap();
    assert_raw_counter(env, &name, base + 4);
}

/// `lock(name)` and `fenced_lock(name)` are one lock: each excludes the
/// other's holders, and the same thread re-enters across the two handles.
fn plain_and_fenced_handles_exclude_each_other(env: &Env) {
    let name = unique_name("fenced:plain-vs-fenced");
    let a = env.client();
    let b = env.client();
    let plain_a = a.lock(name.as_str());
    let fenced_a = a.fenced_lock(name.as_str());
    let plain_b = b.lock(name.as_str());
    let fenced_b = b.fenced_lock(name.as_str());
    let base = start_counter(env, &name);

    // A plain hold keeps fenced acquirers out (other client, other thread).
    let held = plain_a.lock_with_lease(LONG_LEASE).unwrap();
    assert_eq!(held.token(), None);
    assert!(fenced_b.is_locked().unwrap());
    assert!(fenced_b.try_lock().unwrap().is_none());
    assert!(
        fenced_b
            .try_lock_for(Duration::from_millis(100))
            .unwrap()
            .is_none()
    );
    let other = fenced_a.clone();
    assert!(on_other_thread(move || other.try_lock().unwrap().is_none()));
    // The holder's own thread re-enters through the fenced handle, with a
    // token, and the hold count covers both.
    let reentered = fenced_a.lock().unwrap();
    assert_eq!(token_of(&reentered), base + 1);
    assert_eq!(plain_a.hold_count().unwrap(), 2);
    assert!(fenced_a.is_held_by_current_thread().unwrap());
    reentered.unlock().unwrap();
    held.unlock().unwrap();
    assert!(!fenced_a.is_locked().unwrap());

    // A fenced hold keeps plain acquirers out.
    let held = fenced_b.lock_with_lease(LONG_LEASE).unwrap();
    assert_eq!(token_of(&held), base + 2);
    assert!(plain_a.is_locked().unwrap());
    assert!(plain_a.try_lock().unwrap().is_none());
    // A wait long enough for a round trip on a loaded machine (100 ms
    // timed out there): the fenced hold outlasts it.
    assert!(
        plain_a
            .try_lock_for(Duration::from_millis(500))
            .unwrap()
            .is_none()
    );
    let other = plain_b.clone();
    assert!(on_other_thread(move || other.try_lock().unwrap().is_none()));
    assert_eq!(plain_b.hold_count().unwrap(), 1);
    held.unlock().unwrap();
    assert!(!plain_a.is_locked().unwrap());

    // A plain acquisition in between took no token.
    drop(plain_a.lock().unwrap());
    let guard = fenced_a.lock().unwrap();
    assert_eq!(
        token_of(&guard),
        base + 3,
        "a plain acquisition consumed a token"
    );
    guard.unlock().unwrap();
    assert_raw_counter(env, &name, base + 3);
}

/// The two handles share the channel: a plain unlock wakes a fenced waiter
/// and a fenced unlock wakes a plain one, long before the 30 s lease ends.
fn plain_unlock_wakes_a_fenced_waiter_and_back(env: &Env) {
    let name = unique_name("fenced:wake");
    let a = env.client();
    let b = env.client();
    let base = start_counter(env, &name);

    let held = a.lock(name.as_str()).lock_with_lease(LONG_LEASE).unwrap();
    let (waiter, rx) = spawn_waiter(b.fenced_lock(name.as_str()));
    thread::sleep(SETTLE);
    assert!(
        rx.try_recv().is_err(),
        "the fenced waiter got a held plain lock"
    );
    let released = Instant::now();
    held.unlock().unwrap();
    let (at, token) = acquired(&rx, "fenced waiter after a plain unlock");
    let delay = at.duration_since(released);
    assert!(
        delay < PROMPT,
        "the fenced waiter got the lock {delay:?} after the plain unlock \
         (lease {LONG_LEASE:?}: the unlock message did not wake it)"
    );
    assert_eq!(token, Some(base + 1));
    waiter.join().unwrap();

    let held = a
        .fenced_lock(name.as_str())
        .lock_with_lease(LONG_LEASE)
        .unwrap();
    assert_eq!(token_of(&held), base + 2);
    let (waiter, rx) = spawn_waiter(b.lock(name.as_str()));
    thread::sleep(SETTLE);
    assert!(
        rx.try_recv().is_err(),
        "the plain waiter got a held fenced lock"
    );
    let released = Instant::now();
    held.unlock().unwrap();
    let (at, token) = acquired(&rx, "plain waiter after a fenced unlock");
    let delay = at.duration_since(released);
    assert!(
        delay < PROMPT,
        "the plain waiter got the lock {delay:?} after the fenced unlock"
    );
    assert_eq!(token, None, "a plain waiter's guard has a token");
    waiter.join().unwrap();
    assert!(!a.lock(name.as_str()).is_locked().unwrap());
}

/// Threads taking the plain and the fenced handle of one name, on two
/// clients, never share the critical section; the fenced ones see their
/// tokens rise in the order they got in.
fn plain_and_fenced_holders_never_overlap_under_contention(env: &Env) {
    const THREADS_PER_KIND_AND_CLIENT: usize = 2;
    const ITERATIONS: u64 = 40;
    let name = unique_name("fenced:mixed-mutex");
    let clients = [env.client(), env.client()];
    let base = start_counter(env, &name);
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let highest = Arc::new(AtomicU64::new(0));
    let threads_total = clients.len() * 2 * THREADS_PER_KIND_AND_CLIENT;
    let start = Arc::new(Barrier::new(threads_total));
    let mut threads = Vec::new();
    for client in &clients {
        for fenced in [false, true] {
            for _ in 0..THREADS_PER_KIND_AND_CLIENT {
                let lock = if fenced {
                    client.fenced_lock(name.as_str())
                } else {
                    client.lock(name.as_str())
                };
                let (counter, inside, highest, start) = (
                    counter.clone(),
                    inside.clone(),
                    highest.clone(),
                    start.clone(),
                );
                threads.push(thread::spawn(move || {
                    start.wait();
                    for _ in 0..ITERATIONS {
                        let guard = lock.lock().expect("lock()");
                        assert!(
                            !inside.swap(true, Ordering::SeqCst),
                            "a plain and a fenced holder inside together"
                        );
                        assert_eq!(guard.token().is_some(), fenced);
                        if let Some(token) = guard.token() {
                            let before = highest.swap(token, Ordering::SeqCst);
                            assert!(token > before, "token {token} after {before}");
                        }
                        let value = counter.load(Ordering::SeqCst);
                        thread::yield_now();
                        counter.store(value + 1, Ordering::SeqCst);
                        inside.store(false, Ordering::SeqCst);
                        guard.unlock().expect("unlock()");
                    }
                }));
            }
        }
    }
    for thread in threads {
        thread.join().expect("worker panicked");
    }
    let total = threads_total as u64 * ITERATIONS;
    assert_eq!(counter.load(Ordering::SeqCst), total, "lost updates");
    // Half the acquisitions were fenced, each took exactly one token.
    assert_eq!(highest.load(Ordering::SeqCst), base + total / 2);
    assert_raw_counter(env, &name, base + total / 2);
    assert!(!clients[0].lock(name.as_str()).is_locked().unwrap());
}

/// An attempt that finds the lock held (try_lock, try_lock_for that times
/// out, each retry of a blocked `lock()`) consumes no token.
fn failed_attempts_do_not_consume_tokens(env: &Env) {
    // The holder's lease is the watchdog's 1 s, renewed every ~333 ms: a
    // waiter parks at most for the TTL it saw, so it retries (and fails)
    // about once a second while the lock stays held.
    const WATCHDOG: Duration = Duration::from_secs(1);
    let name = unique_name("fenced:failed-attempts");
    let a = env.client_with_watchdog(WATCHDOG);
    let b = env.client();
    let lock_a = a.fenced_lock(name.as_str());
    let lock_b = b.fenced_lock(name.as_str());
    let base = start_counter(env, &name);

    let held = lock_a.lock().unwrap();
    assert_eq!(token_of(&held), base + 1);
    for _ in 0..5 {
        assert!(lock_b.try_lock().unwrap().is_none());
    }
    assert!(
        lock_b
            .try_lock_for(Duration::from_millis(150))
            .unwrap()
            .is_none()
    );
    assert!(
        lock_b
            .try_lock_for_with_lease(Duration::from_millis(150), LONG_LEASE)
            .unwrap()
            .is_none()
    );
    // Another thread of the holder's own client is refused too.
    let other = lock_a.clone();
    assert!(on_other_thread(move || other.try_lock().unwrap().is_none()));
    assert_raw_counter(env, &name, base + 1);

    // A blocked waiter retries a few times while the lock stays held, then
    // gets it once the holder unlocks, with the very next token.
    let (waiter, rx) = spawn_waiter(lock_b);
    thread::sleep(WATCHDOG * 5 / 2);
    assert!(rx.try_recv().is_err(), "the waiter got a held lock");
    assert!(!held.is_lost(), "the holder's watchdog lost the lock");
    assert_raw_counter(env, &name, base + 1);
    held.unlock().unwrap();
    let (_, token) = acquired(&rx, "waiter after the unlock");
    assert_eq!(token, Some(base + 2), "failed attempts consumed tokens");
    waiter.join().unwrap();

    let guard = lock_a.try_lock().unwrap().expect("free again");
    assert_eq!(guard.token(), Some(base + 3));
    guard.unlock().unwrap();
    assert_raw_counter(env, &name, base + 3);
}

/// A counter that is not an integer fails the acquisition with a protocol
/// error and leaves no hold behind (the script increments the counter before
/// it touches the hash), for a fresh acquisition and for a reentry alike.
fn non_integer_counter_is_a_protocol_error_and_leaves_the_lock_free(env: &Env) {
    let name = unique_name("fenced:bad-counter");
    let a = env.client();
    let b = env.client();
    let lock = a.fenced_lock(name.as_str());
    env.set_string(&token_key(&name), "x");

    let errors = [
        lock.lock().map(drop).unwrap_err(),
        lock.lock_with_lease(LONG_LEASE).map(drop).unwrap_err(),
        lock.try_lock().map(drop).unwrap_err(),
        lock.try_lock_for(Duration::from_millis(50))
            .map(drop)
            .unwrap_err(),
        lock.try_lock_for_with_lease(Duration::from_millis(50), LONG_LEASE)
            .map(drop)
            .unwrap_err(),
    ];
    for err in &errors {
        assert!(
            err.is_protocol_error(),
            "expected a protocol error, got {err:?}"
        );
        assert!(
            !lock.is_locked().unwrap(),
            "a failed fenced acquisition ({err}) left the lock held"
        );
        assert_eq!(lock.hold_count().unwrap(), 0);
    }
    // The plain handle still works (the hash was never touched)...
    let plain = b.lock(name.as_str()).try_lock().unwrap();
    assert!(plain.is_some(), "the lock is not free after the failures");
    drop(plain);

    // ...and a failed reentry leaves the hold count alone.
    let held = a.lock(name.as_str()).lock().unwrap();
    let err = lock.lock().map(drop).unwrap_err();
    assert!(err.is_protocol_error(), "{err:?}");
    assert_eq!(lock.hold_count().unwrap(), 1, "a failed reentry counted");
    held.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
    if let Some(value) = raw_counter(env, &name) {
        assert_eq!(value.as_deref(), Some("x"), "the bad counter was changed");
    }

    // Repaired, the count continues from the stored value.
    env.set_string(&token_key(&name), &(BASE + 41).to_string());
    let guard = lock.lock().unwrap();
    assert_eq!(token_of(&guard), BASE + 42);
    guard.unlock().unwrap();
}

/// Neither the end of a lease nor a force unlock resets the counter: the
/// next holder's token is still the next one.
fn tokens_continue_after_lease_expiry_and_force_unlock(env: &Env) {
    const LEASE: Duration = Duration::from_millis(150);
    let name = unique_name("fenced:expiry");
    let a = env.client();
    let b = env.client();
    let lock_a = a.fenced_lock(name.as_str());
    let lock_b = b.fenced_lock(name.as_str());
    let base = start_counter(env, &name);

    let expired = lock_a.lock_with_lease(LEASE).unwrap();
    assert_eq!(token_of(&expired), base + 1);
    let started = Instant::now();
    // No unlock: B gets it when the lease runs out.
    let taken = lock_b
        .try_lock_for(STUCK)
        .unwrap()
        .expect("the lease did not free the lock");
    assert!(
        started.elapsed() + Duration::from_millis(20) >= LEASE,
        "B got the lock after {:?}, before A's {LEASE:?} lease ended",
        started.elapsed()
    );
    assert_eq!(token_of(&taken), base + 2, "the token after a lease expiry");
    assert!(expired.is_lost());
    assert!(expired.unlock().unwrap_err().is_not_held());

    // Force unlock frees B's hold; A's next token continues.
    assert!(lock_a.force_unlock().unwrap());
    assert!(!lock_a.is_locked().unwrap());
    let after_force = lock_a.lock().unwrap();
    assert_eq!(
        token_of(&after_force),
        base + 3,
        "the token after a force unlock"
    );
    assert!(taken.unlock().unwrap_err().is_not_held());
    after_force.unlock().unwrap();
    assert!(!lock_a.is_locked().unwrap());
    assert_raw_counter(env, &name, base + 3);

    // Force-unlocking a free lock changes nothing either.
    assert!(!lock_b.force_unlock().unwrap());
    let guard = lock_b.try_lock().unwrap().expect("free");
    assert_eq!(token_of(&guard), base + 4);
    guard.unlock().unwrap();
}

/// Only fenced guards carry a token; the other lock kinds never touch the
/// counter.
fn other_kinds_of_lock_have_no_token(env: &Env) {
    let name = unique_name("fenced:no-token");
    let client = env.client();
    let lock = client.lock(name.as_str());
    let guards = [
        lock.lock().unwrap(),
        lock.lock_with_lease(LONG_LEASE).unwrap(),
        lock.try_lock().unwrap().unwrap(),
        lock.try_lock_for(PROMPT).unwrap().unwrap(),
        lock.try_lock_for_with_lease(PROMPT, LONG_LEASE)
            .unwrap()
            .unwrap(),
    ];
    for guard in guards {
        assert_eq!(guard.token(), None, "a plain lock's guard has a token");
        guard.unlock().unwrap();
    }
    let fair = client.fair_lock(unique_name("fenced:no-token-fair"));
    let guard = fair.lock().unwrap();
    assert_eq!(guard.token(), None, "a fair lock's guard has a token");
    guard.unlock().unwrap();
    let rw = client.read_write_lock(unique_name("fenced:no-token-rw"));
    let guard = rw.read_lock().lock().unwrap();
    assert_eq!(guard.token(), None, "a read lock's guard has a token");
    guard.unlock().unwrap();
    let guard = rw.write_lock().lock().unwrap();
    assert_eq!(guard.token(), None, "a write lock's guard has a token");
    guard.unlock().unwrap();
    // The plain acquisitions created no counter.
    assert_eq!(raw_counter(env, &name).flatten(), None);
    let base = start_counter(env, &name);
    let guard = client.fenced_lock(name.as_str()).lock().unwrap();
    assert_eq!(
        token_of(&guard),
        base + 1,
        "plain acquisitions advanced the counter"
    );
    guard.unlock().unwrap();
}

/// N threads on two clients × M acquisitions: every token is distinct, each
/// thread's tokens rise, the tokens rise in the order the holders got in
/// (a shared "highest seen", checked inside the critical section), and
/// together they are exactly BASE+1..=BASE+N×M.
fn tokens_are_unique_and_increasing_under_contention(env: &Env) {
    const THREADS_PER_CLIENT: usize = 4;
    const ITERATIONS: usize = 50;
    let name = unique_name("fenced:contention");
    let clients = [env.client(), env.client()];
    let base = start_counter(env, &name);
    let highest = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(clients.len() * THREADS_PER_CLIENT));
    let mut threads = Vec::new();
    for client in &clients {
        for _ in 0..THREADS_PER_CLIENT {
            let lock = client.fenced_lock(name.as_str());
            let (highest, inside, start) = (highest.clone(), inside.clone(), start.clone());
            threads.push(thread::spawn(move || {
                start.wait();
                let mut mine = Vec::with_capacity(ITERATIONS);
                for _ in 0..ITERATIONS {
                    let guard = lock.lock().expect("lock()");
                    assert!(
                        !inside.swap(true, Ordering::SeqCst),
                        "two holders inside the critical section"
                    );
                    let token = token_of(&guard);
                    // Non-atomic check-then-set, as a downstream store
                    // would do it: safe only inside the lock.
                    let before = highest.load(Ordering::SeqCst);
                    assert!(
                        token > before,
                        "holder got token {token}, but {before} was seen before it"
                    );
                    thread::yield_now();
                    highest.store(token, Ordering::SeqCst);
                    mine.push(token);
                    inside.store(false, Ordering::SeqCst);
                    guard.unlock().expect("unlock()");
                }
                mine
            }));
        }
    }
    let mut all = HashSet::new();
    let mut count = 0usize;
    for thread in threads {
        let mine = thread.join().expect("worker panicked");
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "a thread's tokens did not rise: {mine:?}"
        );
        count += mine.len();
        all.extend(mine);
    }
    let total = clients.len() * THREADS_PER_CLIENT * ITERATIONS;
    assert_eq!(count, total);
    assert_eq!(all.len(), total, "duplicate tokens");
    let expected: HashSet<u64> = (base + 1..=base + total as u64).collect();
    assert_eq!(
        all, expected,
        "the tokens are not exactly base+1..=base+{total}"
    );
    assert_eq!(highest.load(Ordering::SeqCst), base + total as u64);
    assert_raw_counter(env, &name, base + total as u64);
}

// ---------------------------------------------------------------------------
// Redis only
// ---------------------------------------------------------------------------

/// The counter is a plain string at `redisson_lock_token:{name}` without a
/// TTL, while the lock hash has one; it survives the lock's release and
/// expiry.
#[test]
fn redis_token_counter_key_has_no_ttl() {
    let env = Env::redis();
    let mut conn = env.redis_connection().expect("a Redis store");
    let name = unique_name("fenced:counter-key");
    let key = token_key(&name);
    let client = env.client();
    let lock = client.fenced_lock(name.as_str());

    let before = clock_micros();
    let guard = lock.lock_with_lease(Duration::from_millis(200)).unwrap();
    let first = token_of(&guard);
    assert!(
        first >= before && first <= clock_micros(),
        "a fresh counter's first token {first} is not the server clock in µs"
    );
    let kind: String = ::redis::cmd("TYPE").arg(&key).query(&mut conn).unwrap();
    assert_eq!(kind, "string", "{key}");
    assert_eq!(common::pttl(&mut conn, &key), -1, "{key} has a TTL");
    let lock_ttl = common::pttl(&mut conn, &name);
    assert!(
        lock_ttl > 0 && lock_ttl <= 200,
        "the lock hash's PTTL is {lock_ttl}"
    );
    let hash = common::hgetall(&mut conn, &name);
    assert_eq!(hash.len(), 1, "{hash:?}");
    assert_eq!(
        hash.get(&client.current_holder_id()).map(String::as_str),
        Some("1")
    );

    // After the lease ran out the hash is gone; the counter stays, no TTL.
    common::wait_until("the lease expired", STUCK, || {
        common::pttl(&mut conn, &name) == -2
    });
    assert_eq!(common::pttl(&mut conn, &key), -1);
    assert!(guard.unlock().unwrap_err().is_not_held());
    let guard = lock.lock().unwrap();
    let second = token_of(&guard);
    assert!(second > first, "{second} after {first}");
    guard.unlock().unwrap();
    let exists: i64 = ::redis::cmd("EXISTS").arg(&name).query(&mut conn).unwrap();
    assert_eq!(exists, 0, "the lock outlived its unlock");
    let value: String = ::redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
    assert_eq!(value, second.to_string());
    assert_eq!(common::pttl(&mut conn, &key), -1);

    // Besides the unlock latches (short-lived, PX: Redisson's, and the
    // attempt records a release turns into its latch, kept past every
    // copy's window: 11.05 s with the default 3 s response timeout), the
    // counter is the only key left for the name.
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg(format!("*{name}*"))
        .query(&mut conn)
        .unwrap();
    let mut left = Vec::new();
    for key in &keys {
        if key.starts_with("redisson_unlock_latch:") || key.contains(":redisync_attempt:") {
            let pttl = common::pttl(&mut conn, key);
            assert!(pttl > 0 && pttl <= 11_050, "{key}: PTTL {pttl}");
        } else {
            left.push(key);
        }
    }
    assert_eq!(left, [&key]);
}

/// A counter set below zero (or below the clock) is raised to the clock
/// floor: the acquisition succeeds with a token at the server's clock in µs,
/// and the next one continues from there.
fn negative_counter_is_raised_to_the_clock(env: &Env) {
    let name = unique_name("fenced:negative-counter");
    let client = env.client();
    let lock = client.fenced_lock(name.as_str());
    for stored in ["-1", "-9223372036854775807", "0", "12345"] {
        env.set_string(&token_key(&name), stored);
        let before = clock_micros();
        let guard = lock.try_lock().unwrap().expect("a free lock");
        let token = token_of(&guard);
        assert!(
            token >= before && token <= clock_micros(),
            "counter {stored}: token {token} is not the clock in µs (from {before})"
        );
        assert_eq!(lock.hold_count().unwrap(), 1);
        assert_raw_counter(env, &name, token);
        let next = lock.lock().unwrap();
        assert!(token_of(&next) > token);
        next.unlock().unwrap();
        guard.unlock().unwrap();
        assert!(!lock.is_locked().unwrap());
    }
}

/// A fresh counter's first token is the clock in µs (the counter's INCR
/// gives 1, below the floor); later ones rise by at least one each.
fn fresh_counter_starts_at_the_clock(env: &Env) {
    let name = unique_name("fenced:fresh");
    let client = env.client();
    let lock = client.fenced_lock(name.as_str());
    let before = clock_micros();
    let guard = lock.lock().unwrap();
    let first = token_of(&guard);
    let after = clock_micros();
    assert!(
        first >= before && first <= after,
        "first token {first} not within the clock {before}..={after} µs"
    );
    assert_raw_counter(env, &name, first);
    guard.unlock().unwrap();
    let mut last = first;
    for _ in 0..20 {
        let guard = lock.lock().unwrap();
        let token = token_of(&guard);
        assert!(token > last, "token {token} after {last}");
        last = token;
        guard.unlock().unwrap();
    }
}

/// The counter is lost (Redis: `FLUSHALL`, as a restart without
/// persistence or a failover to a replica that missed the INCRs would lose
/// it; the shared cluster: `DEL` of the counter; memory: the counter reset
/// to 0, which the script treats as a lost one):
/// the next token is still higher than every earlier one, because the
/// clock has moved on since they were issued.
fn tokens_increase_after_the_counter_is_lost(env: &Env) {
    let name = unique_name("fenced:lost");
    let client = env.client();
    let lock = client.fenced_lock(name.as_str());
    let mut tokens = Vec::new();
    for _ in 0..5 {
        let guard = lock.lock().unwrap();
        tokens.push(token_of(&guard));
        guard.unlock().unwrap();
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    match &env.store {
        Store::Redis(server) => {
            let () = ::redis::cmd("FLUSHALL")
                .query(&mut server.connection())
                .unwrap();
            assert_eq!(raw_counter(env, &name).flatten(), None, "not flushed");
        }
        // The cluster is shared with the cases running beside this one:
        // lose only this counter.
        #[cfg(feature = "cluster")]
        Store::Cluster(_) => {
            let mut conn = env.redis_connection().unwrap();
            let () = ::redis::cmd("DEL")
                .arg(token_key(&name))
                .query(&mut conn)
                .unwrap();
        }
        Store::Memory(_) => env.set_string(&token_key(&name), "0"),
    }
    let guard = lock.lock().unwrap();
    let after = token_of(&guard);
    let highest = tokens.iter().max().copied().unwrap();
    assert!(
        after > highest,
        "token {after} after the loss, but {highest} was issued before it: {tokens:?}"
    );
    guard.unlock().unwrap();
}
