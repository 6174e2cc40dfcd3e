//! Cancellable waits: a [`CancellationToken`] ends the blocking calls of
//! the handles made `cancellable` with it, from another thread, promptly,
//! leaving no hold, no fair-queue entry and no permit behind. Written once
//! and run on every store by `backend_tests!`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::timing::{PROMPT, SETTLE};
use common::{Env, backend_tests, unique_name};
use redisync::{CancellationToken, Client};

/// Waits that only a cancel (or an unlock) may end: far longer than PROMPT.
const LONG: Duration = Duration::from_secs(30);

backend_tests!(
    a_parked_lock_returns_cancelled_and_holds_nothing,
    a_bounded_wait_is_cancelled_too,
    a_cancelled_fair_waiter_leaves_the_queue,
    a_cancelled_token_fails_every_later_wait_at_once,
    one_token_cancels_many_waiters_across_handles,
    a_cancelled_semaphore_acquire_takes_no_permit,
    a_cancelled_expirable_acquire_takes_no_permit,
    a_cancelled_latch_wait_returns,
    a_cancel_leaves_other_handles_and_the_lock_working,
    a_spin_lock_pause_is_cut_short_by_a_cancel,
);

/// Runs `wait` on a new thread, lets it park, cancels `token`, and returns
/// what the call returned and how long after the cancel it did.
fn cancel_after_park<T: Send + 'static>(
    token: &CancellationToken,
    wait: impl FnOnce() -> redisync::Result<T> + Send + 'static,
) -> (redisync::Result<T>, Duration) {
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let outcome = wait();
        tx.send(Instant::now()).unwrap();
        outcome
    });
    thread::sleep(SETTLE);
    assert!(
        rx.try_recv().is_err(),
        "the waiter returned before the cancel"
    );
    let cancelled = Instant::now();
    token.cancel();
    let returned = rx.recv_timeout(LONG).expect("the cancelled wait returned");
    (waiter.join().unwrap(), returned.duration_since(cancelled))
}

fn assert_cancelled<T>(outcome: redisync::Result<T>, took: Duration, name: &str) {
    match outcome {
        Err(err) => {
            assert!(err.is_cancelled(), "{err}");
            assert!(err.to_string().contains(name), "{err}");
        }
        Ok(_) => panic!("the cancelled wait acquired"),
    }
    assert!(took < PROMPT, "returned {took:?} after the cancel");
}

fn a_parked_lock_returns_cancelled_and_holds_nothing(env: &Env) {
    let (holder, waiter) = (env.client(), env.client());
    let name = unique_name("cancel:lock");
    let held = holder.lock(&name).lock().unwrap();
    let token = CancellationToken::new();
    let lock = waiter.lock(&name).cancellable(&token);
    let (outcome, took) = cancel_after_park(&token, move || lock.lock().map(drop));
    assert_cancelled(outcome, took, &name);
    held.unlock().unwrap();
    // The cancelled waiter holds nothing: the lock is free for anyone.
    assert!(!waiter.lock(&name).is_locked().unwrap());
    let other = env.client();
    other
        .lock(&name)
        .try_lock()
        .unwrap()
        .expect("free")
        .unlock()
        .unwrap();
}

fn a_bounded_wait_is_cancelled_too(env: &Env) {
    let (holder, waiter) = (env.client(), env.client());
    let name = unique_name("cancel:bounded");
    let _held = holder.lock(&name).lock().unwrap();
    let token = CancellationToken::new();
    let lock = waiter.lock(&name).cancellable(&token);
    let (outcome, took) = cancel_after_park(&token, move || lock.try_lock_for(LONG).map(drop));
    assert_cancelled(outcome, took, &name);
}

fn a_cancelled_fair_waiter_leaves_the_queue(env: &Env) {
    let (holder, waiter) = (env.client(), env.client());
    let name = unique_name("cancel:fair");
    let held = holder.fair_lock(&name).lock().unwrap();
    let token = CancellationToken::new();
    let lock = waiter.fair_lock(&name).cancellable(&token);
    let queued = {
        let inspect = env.client();
        let name = name.clone();
        move || inspect.inspect(&name).unwrap().queue.len()
    };
    let (outcome, took) = {
        let (tx, rx) = mpsc::channel();
        let waiting = thread::spawn(move || {
            let outcome = lock.lock().map(drop);
            tx.send(Instant::now()).unwrap();
            outcome
        });
        common::wait_until("the fair waiter queued", LONG, || queued() == 1);
        let cancelled = Instant::now();
        token.cancel();
        let returned = rx.recv_timeout(LONG).unwrap();
        (waiting.join().unwrap(), returned.duration_since(cancelled))
    };
    assert_cancelled(outcome, took, &name);
    assert_eq!(queued(), 0, "the cancelled waiter left the queue");
    held.unlock().unwrap();
    // The next waiter does not wait behind a ghost slot.
    let next = env.client();
    let started = Instant::now();
    next.fair_lock(&name)
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("the fair lock is free")
        .unlock()
        .unwrap();
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
}

fn a_cancelled_token_fails_every_later_wait_at_once(env: &Env) {
    let client = env.client();
    let name = unique_name("cancel:early");
    let token = CancellationToken::new();
    token.cancel();
    let started = Instant::now();
    let lock = client.lock(&name).cancellable(&token);
    assert!(lock.lock().unwrap_err().is_cancelled());
    assert!(lock.try_lock().unwrap_err().is_cancelled());
    assert!(lock.try_lock_for(LONG).unwrap_err().is_cancelled());
    assert!(started.elapsed() < PROMPT);
    // It never attempted: the lock is free, and the same handle without
    // the token (a clone from before) still works.
    assert!(!client.lock(&name).is_locked().unwrap());
    client.lock(&name).lock().unwrap().unlock().unwrap();
}

fn one_token_cancels_many_waiters_across_handles(env: &Env) {
    let holder = env.client();
    let name = unique_name("cancel:many");
    let held = holder.lock(&name).lock().unwrap();
    let token = CancellationToken::new();
    let clients: Vec<Client> = (0..2).map(|_| env.client()).collect();
    let (tx, rx) = mpsc::channel();
    let waiters: Vec<_> = (0..6)
        .map(|i| {
            let lock = clients[i % 2].lock(&name).cancellable(&token.clone());
            let tx = tx.clone();
            thread::spawn(move || {
                let outcome = lock.lock().map(drop);
                tx.send(Instant::now()).unwrap();
                outcome
            })
        })
        .collect();
    thread::sleep(SETTLE);
    let cancelled = Instant::now();
    token.cancel();
    for _ in 0..6 {
        let returned = rx.recv_timeout(LONG).expect("every waiter returned");
        assert!(returned.duration_since(cancelled) < PROMPT);
    }
    for waiter in waiters {
        assert!(waiter.join().unwrap().unwrap_err().is_cancelled());
    }
    held.unlock().unwrap();
    assert!(
        !holder.lock(&name).is_locked().unwrap(),
        "no waiter took it"
    );
}

fn a_cancelled_semaphore_acquire_takes_no_permit(env: &Env) {
    let client = env.client();
    let name = unique_name("cancel:semaphore");
    let semaphore = client.semaphore(&name);
    assert!(semaphore.try_set_permits(1).unwrap());
    let taken = semaphore.acquire(1).unwrap();
    let token = CancellationToken::new();
    let waiting = semaphore.cancellable(&token);
    let (outcome, took) = cancel_after_park(&token, move || waiting.acquire(1).map(|p| p.forget()));
    assert_cancelled(outcome, took, &name);
    taken.release().unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 1);
}

fn a_cancelled_expirable_acquire_takes_no_permit(env: &Env) {
    let client = env.client();
    let name = unique_name("cancel:expirable");
    let semaphore = client.permit_expirable_semaphore(&name);
    assert!(semaphore.try_set_permits(1).unwrap());
    let id = semaphore.acquire_id(LONG).unwrap();
    let token = CancellationToken::new();
    let waiting = semaphore.cancellable(&token);
    let (outcome, took) = cancel_after_park(&token, move || waiting.acquire_id(LONG));
    assert_cancelled(outcome, took, &name);
    semaphore.release(&id).unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 1);
}

fn a_cancelled_latch_wait_returns(env: &Env) {
    let client = env.client();
    let name = unique_name("cancel:latch");
    let latch = client.count_down_latch(&name);
    assert!(latch.try_set_count(1).unwrap());
    let token = CancellationToken::new();
    let waiting = latch.cancellable(&token);
    let (outcome, took) = cancel_after_park(&token, move || waiting.wait());
    assert_cancelled(outcome, took, &name);
    assert_eq!(latch.count().unwrap(), 1, "a wait changes nothing");
}

fn a_cancel_leaves_other_handles_and_the_lock_working(env: &Env) {
    let (holder, waiter) = (env.client(), env.client());
    let name = unique_name("cancel:others");
    let held = holder.lock(&name).lock().unwrap();
    let token = CancellationToken::new();
    let cancelled = waiter.lock(&name).cancellable(&token);
    // A waiter of the same client without the token.
    let plain = waiter.lock(&name);
    let (tx, rx) = mpsc::channel();
    let patient = thread::spawn(move || {
        let guard = plain.lock().unwrap();
        tx.send(Instant::now()).unwrap();
        guard.unlock().unwrap();
    });
    let (outcome, took) = cancel_after_park(&token, move || cancelled.lock().map(drop));
    assert_cancelled(outcome, took, &name);
    assert!(rx.try_recv().is_err(), "the other waiter still waits");
    let unlocked = Instant::now();
    held.unlock().unwrap();
    let got = rx
        .recv_timeout(LONG)
        .expect("the other waiter got the lock");
    assert!(got.duration_since(unlocked) < PROMPT);
    patient.join().unwrap();
}

fn a_spin_lock_pause_is_cut_short_by_a_cancel(env: &Env) {
    let (holder, waiter) = (env.client(), env.client());
    let name = unique_name("cancel:spin");
    let _held = holder.lock(&name).lock().unwrap();
    let token = CancellationToken::new();
    // Pauses of 10 s: only the cancel can end this wait in time.
    let backoff = redisync::Backoff::constant(Duration::from_secs(10)).unwrap();
    let lock = waiter
        .spin_lock_with_backoff(&name, backoff)
        .cancellable(&token);
    let (outcome, took) = cancel_after_park(&token, move || lock.lock().map(drop));
    assert_cancelled(outcome, took, &name);
}
