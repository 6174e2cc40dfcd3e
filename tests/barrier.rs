//! Conformance suite for [`Barrier`] (redisync only): every behaviour is
//! written once, as a function of an [`Env`], and run on both backends by
//! `backend_tests!`.
//!
//! Two `Client`s on one store stand for two processes. Timings use
//! generous upper bounds (two busy vCPUs); the lower bounds (nobody
//! released before the last arrival) come from the order of events, not
//! from a clock.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::keys;
use common::timing::{PROMPT, SETTLE, STUCK};
use common::wrap::{Hook, Store, Wrapped, assert_forwards_every_method};
use common::{Env, backend_tests, unique_name};
use redisync::{Barrier, CancellationToken, Client};
use redisync::{Reply, ScriptCall};

backend_tests!(
    parties_across_two_clients_meet_and_none_leaves_early,
    reusable_over_several_generations,
    a_timed_out_waiter_withdraws_and_a_later_full_set_meets,
    a_resent_arrival_counts_once,
    a_lost_reply_is_withdrawn_and_its_late_copy_refused,
    a_cancelled_waiter_withdraws,
    waiters_park_on_pub_sub_instead_of_polling,
    bad_input,
);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// What a store does to the barrier's arrivals (the rest is forwarded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// Every arrival is sent twice (the store sent it again: a lost
    /// reply, a copy delayed in the network); the second reply is returned.
    Resend,
    /// The next arrival is applied, then its reply is lost.
    LoseNextReply,
}

/// What a store in front of the test's store does: counts script calls
/// and plays [`Fault`]s on `barrier_arrive` (everything else is forwarded,
/// by [`Wrapped`]). Clones share the counts and the fault.
#[derive(Clone)]
struct Faulty {
    fault: Arc<Mutex<Fault>>,
    calls: Arc<Mutex<HashMap<String, u64>>>,
    /// The record key of the last arrival whose reply was lost.
    lost_record: Arc<Mutex<Option<String>>>,
}

impl Faulty {
    fn new(fault: Fault) -> Faulty {
        Faulty {
            fault: Arc::new(Mutex::new(fault)),
            calls: Arc::default(),
            lost_record: Arc::default(),
        }
    }

    fn client(env: &Env, other: &Client, fault: Fault) -> (Client, Wrapped<Faulty>) {
        let faulty = Wrapped::around(Arc::clone(other.backend()), Faulty::new(fault));
        let client = env
            .builder()
            .shared_backend(Arc::new(faulty.clone()))
            .build()
            .unwrap();
        (client, faulty)
    }

    fn calls(&self, script: &str) -> u64 {
        self.calls.lock().unwrap().get(script).copied().unwrap_or(0)
    }
}

impl Hook for Faulty {
    fn run_script(&self, inner: &Store, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        let id = call.script().id();
        *self.calls.lock().unwrap().entry(id.to_owned()).or_insert(0) += 1;
        if id != "barrier_arrive" {
            return inner.run_script(call);
        }
        let fault = *self.fault.lock().unwrap();
        match fault {
            Fault::None => inner.run_script(call),
            Fault::Resend => {
                let first = inner.run_script(call)?;
                let second = inner.run_script(call)?;
                assert_eq!(first, second, "a resent arrival replied otherwise");
                Ok(second)
            }
            Fault::LoseNextReply => {
                *self.fault.lock().unwrap() = Fault::None;
                inner.run_script(call)?;
                *self.lost_record.lock().unwrap() = Some(call.keys()[2].to_string());
                Err(redisync::Error::backend(
                    "connection reset before the reply (test)",
                    true,
                ))
            }
        }
    }
}

#[test]
fn the_faulty_store_forwards_every_method() {
    for fault in [Fault::None, Fault::Resend, Fault::LoseNextReply] {
        assert_forwards_every_method(Faulty::new(fault));
    }
}

/// A thread blocked in `wait()`: the instant just before it called it, and
/// what it returned with the instant it did.
struct Waiter {
    arrived_at: Instant,
    returned: mpsc::Receiver<(Instant, redisync::Result<u64>)>,
    done: Arc<AtomicUsize>,
    handle: thread::JoinHandle<()>,
}

impl Waiter {
    fn spawn(barrier: Barrier, done: Arc<AtomicUsize>) -> Waiter {
        let (tx, returned) = mpsc::channel();
        let (arrived_tx, arrived_rx) = mpsc::channel();
        let done_in_thread = Arc::clone(&done);
        let handle = thread::spawn(move || {
            arrived_tx.send(Instant::now()).unwrap();
            let outcome = barrier.wait();
            let at = Instant::now();
            done_in_thread.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send((at, outcome));
        });
        let arrived_at = arrived_rx.recv_timeout(STUCK).expect("waiter started");
        Waiter {
            arrived_at,
            returned,
            done,
            handle,
        }
    }

    fn returned(self, what: &str) -> (Instant, u64) {
        let (at, outcome) = self
            .returned
            .recv_timeout(STUCK)
            .unwrap_or_else(|_| panic!("a waiter is stuck: {what}"));
        self.handle.join().unwrap();
        let _ = &self.done;
        (at, outcome.unwrap_or_else(|err| panic!("{what}: {err}")))
    }
}

// ---------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------

/// Four parties, two threads on each of two clients, arriving one by one:
/// none returns before the fourth arrives, all return promptly after, in
/// generation 0.
fn parties_across_two_clients_meet_and_none_leaves_early(env: &Env) {
    const PARTIES: u32 = 4;
    let clients = [env.client(), env.client()];
    let name = unique_name("barrier:meet");
    let done = Arc::new(AtomicUsize::new(0));
    let mut waiters = Vec::new();
    for i in 0..PARTIES as usize - 1 {
        let barrier = clients[i % 2].barrier(name.as_str(), PARTIES);
        waiters.push(Waiter::spawn(barrier, Arc::clone(&done)));
        thread::sleep(Duration::from_millis(150));
    }
    thread::sleep(SETTLE);
    assert_eq!(
        done.load(Ordering::SeqCst),
        0,
        "released before the last arrival"
    );
    assert_eq!(
        clients[0]
            .barrier(name.as_str(), PARTIES)
            .arrived()
            .unwrap(),
        u64::from(PARTIES) - 1
    );
    waiters.push(Waiter::spawn(
        clients[1].barrier(name.as_str(), PARTIES),
        Arc::clone(&done),
    ));
    let last_arrival = waiters.iter().map(|w| w.arrived_at).max().unwrap();
    for waiter in waiters {
        let (at, generation) = waiter.returned("meet");
        assert_eq!(generation, 0);
        assert!(
            at >= last_arrival,
            "a waiter returned before the last arrival"
        );
        let after = at.duration_since(last_arrival);
        assert!(after < PROMPT, "released {after:?} after the last arrival");
    }
    let barrier = clients[0].barrier(name.as_str(), PARTIES);
    assert_eq!(
        (barrier.generation().unwrap(), barrier.arrived().unwrap()),
        (1, 0)
    );
}

/// Three threads on two clients pass the barrier five times in a row:
/// each sees generations 0..5 in order, and none passes a generation
/// before all three have arrived at it.
fn reusable_over_several_generations(env: &Env) {
    const PARTIES: u32 = 3;
    const ROUNDS: u64 = 5;
    let clients = [env.client(), env.client()];
    let name = unique_name("barrier:reuse");
    let arrivals = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..PARTIES as usize)
        .map(|i| {
            let barrier = clients[i % 2].barrier(name.as_str(), PARTIES);
            let arrivals = Arc::clone(&arrivals);
            thread::spawn(move || {
                let mut seen = Vec::new();
                for round in 0..ROUNDS {
                    // Stagger the threads differently in every round.
                    thread::sleep(Duration::from_millis(((i as u64 + round) % 3) * 40));
                    arrivals.fetch_add(1, Ordering::SeqCst);
                    let generation = barrier.wait().unwrap();
                    let counted = arrivals.load(Ordering::SeqCst);
                    assert!(
                        counted >= u64::from(PARTIES) * (round + 1),
                        "passed generation {generation} after {counted} arrivals"
                    );
                    seen.push(generation);
                }
                seen
            })
        })
        .collect();
    for thread in threads {
        assert_eq!(thread.join().unwrap(), (0..ROUNDS).collect::<Vec<_>>());
    }
    let barrier = clients[1].barrier(name.as_str(), PARTIES);
    assert_eq!(barrier.generation().unwrap(), ROUNDS);
    // Idle: it can be deleted, and starts again at generation 0.
    assert!(barrier.delete().unwrap());
    assert!(!barrier.delete().unwrap());
    assert_eq!(barrier.generation().unwrap(), 0);
}

/// A waiter that times out takes its arrival back: two later arrivals of
/// three parties do not complete the generation; a third does.
fn a_timed_out_waiter_withdraws_and_a_later_full_set_meets(env: &Env) {
    const PARTIES: u32 = 3;
    let (a, b) = (env.client(), env.client());
    let name = unique_name("barrier:timeout");
    let lonely = a.barrier(name.as_str(), PARTIES);
    let started = Instant::now();
    assert_eq!(lonely.wait_for(Duration::from_millis(300)).unwrap(), None);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300),
        "gave up after {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(300) + PROMPT,
        "gave up after {waited:?}"
    );
    assert_eq!(
        lonely.arrived().unwrap(),
        0,
        "the timed-out arrival still counts"
    );
    // Two more: with the withdrawn one still counted they would meet.
    let done = Arc::new(AtomicUsize::new(0));
    let first = Waiter::spawn(b.barrier(name.as_str(), PARTIES), Arc::clone(&done));
    let second = Waiter::spawn(a.barrier(name.as_str(), PARTIES), Arc::clone(&done));
    thread::sleep(SETTLE);
    assert_eq!(done.load(Ordering::SeqCst), 0, "two arrivals of three met");
    assert_eq!(lonely.arrived().unwrap(), 2);
    assert!(
        !lonely.delete().unwrap(),
        "deleted a barrier with arrivals waiting"
    );
    // The third completes generation 0 (the withdrawn arrival made none).
    assert_eq!(b.barrier(name.as_str(), PARTIES).wait().unwrap(), 0);
    assert_eq!(first.returned("first").1, 0);
    assert_eq!(second.returned("second").1, 0);
    assert_eq!(
        (lonely.generation().unwrap(), lonely.arrived().unwrap()),
        (1, 0)
    );
}

/// An arrival the store sends twice (same record) counts once, and so
/// does one sent again by hand after its generation completed.
fn a_resent_arrival_counts_once(env: &Env) {
    const PARTIES: u32 = 3;
    let a = env.client();
    let (resending, faulty) = Faulty::client(env, &a, Fault::Resend);
    let name = unique_name("barrier:resend");
    let done = Arc::new(AtomicUsize::new(0));
    let first = Waiter::spawn(resending.barrier(name.as_str(), PARTIES), Arc::clone(&done));
    let second = Waiter::spawn(resending.barrier(name.as_str(), PARTIES), Arc::clone(&done));
    thread::sleep(SETTLE);
    assert_eq!(faulty.calls("barrier_arrive"), 2);
    assert_eq!(
        done.load(Ordering::SeqCst),
        0,
        "a resent arrival counted twice"
    );
    assert_eq!(a.barrier(name.as_str(), PARTIES).arrived().unwrap(), 2);
    assert_eq!(a.barrier(name.as_str(), PARTIES).wait().unwrap(), 0);
    assert_eq!(first.returned("first").1, 0);
    assert_eq!(second.returned("second").1, 0);
    // A late copy of a completed arrival: answered as the first, counted
    // in no generation.
    let store = a.backend();
    let channel = redisync::internal::barrier::channel(&name);
    let record = keys::op_record(&name, "by-hand");
    let arrival =
        redisync::internal::barrier::arrive(&**store, &name, &channel, 1, &record).unwrap();
    assert_eq!((arrival.generation, arrival.completed), (1, true));
    let again = redisync::internal::barrier::arrive(&**store, &name, &channel, 1, &record).unwrap();
    assert_eq!(again, arrival);
    let barrier = a.barrier(name.as_str(), PARTIES);
    assert_eq!(
        (barrier.generation().unwrap(), barrier.arrived().unwrap()),
        (2, 0)
    );
}

/// An arrival applied whose reply is lost: the waiter returns the
/// connection error with its arrival withdrawn, and the arrival's late
/// copy is refused.
fn a_lost_reply_is_withdrawn_and_its_late_copy_refused(env: &Env) {
    const PARTIES: u32 = 2;
    let a = env.client();
    let (losing, faulty) = Faulty::client(env, &a, Fault::LoseNextReply);
    let name = unique_name("barrier:lost");
    let err = losing.barrier(name.as_str(), PARTIES).wait().unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    let barrier = a.barrier(name.as_str(), PARTIES);
    assert_eq!(
        barrier.arrived().unwrap(),
        0,
        "the lost arrival still counts"
    );
    let record = faulty.lost_record.lock().unwrap().clone().unwrap();
    let channel = redisync::internal::barrier::channel(&name);
    let late =
        redisync::internal::barrier::arrive(&**a.backend(), &name, &channel, PARTIES, &record)
            .unwrap_err();
    assert!(late.to_string().contains("withdrawn"), "{late}");
    assert_eq!(barrier.arrived().unwrap(), 0, "the late copy counted");
    // The barrier still needs two.
    assert_eq!(barrier.wait_for(Duration::from_millis(100)).unwrap(), None);
    let other = losing.barrier(name.as_str(), PARTIES);
    let meeting = thread::spawn(move || other.wait());
    assert_eq!(barrier.wait().unwrap(), 0);
    assert_eq!(meeting.join().unwrap().unwrap(), 0);
}

/// A cancelled waiter returns `Cancelled` promptly and takes its arrival
/// back.
fn a_cancelled_waiter_withdraws(env: &Env) {
    let a = env.client();
    let name = unique_name("barrier:cancel");
    let token = CancellationToken::new();
    let barrier = a.barrier(name.as_str(), 2).cancellable(&token);
    let waiting = thread::spawn(move || {
        let outcome = barrier.wait();
        (Instant::now(), outcome)
    });
    thread::sleep(SETTLE);
    assert_eq!(a.barrier(name.as_str(), 2).arrived().unwrap(), 1);
    let cancelled = Instant::now();
    token.cancel();
    let (at, outcome) = waiting.join().unwrap();
    assert!(outcome.unwrap_err().is_cancelled());
    assert!(at.duration_since(cancelled) < PROMPT);
    assert_eq!(a.barrier(name.as_str(), 2).arrived().unwrap(), 0);
}

/// A waiter reads the barrier a few times, not once per millisecond: it
/// parks until the completion's message.
fn waiters_park_on_pub_sub_instead_of_polling(env: &Env) {
    const MAX_READS: u64 = 4;
    let a = env.client();
    let (b, faulty) = Faulty::client(env, &a, Fault::None);
    let name = unique_name("barrier:park");
    let done = Arc::new(AtomicUsize::new(0));
    let waiter = Waiter::spawn(b.barrier(name.as_str(), 2), Arc::clone(&done));
    thread::sleep(Duration::from_millis(1_500));
    let reads = faulty.calls("barrier_state");
    assert!(
        reads <= MAX_READS,
        "{reads} reads in 1.5 s: the waiter polls"
    );
    assert_eq!(done.load(Ordering::SeqCst), 0);
    let arrived = Instant::now();
    assert_eq!(a.barrier(name.as_str(), 2).wait().unwrap(), 0);
    let (at, generation) = waiter.returned("parked");
    assert_eq!(generation, 0);
    assert!(at.duration_since(arrived) < PROMPT);
}

fn bad_input(env: &Env) {
    let a = env.client();
    let name = unique_name("barrier:bad");
    for err in [
        a.barrier(name.as_str(), 0).wait().unwrap_err(),
        a.barrier("", 2).wait().unwrap_err(),
        a.barrier("", 2).arrived().unwrap_err(),
    ] {
        assert!(err.is_invalid_argument(), "{err}");
    }
    assert!(
        a.barrier(name.as_str(), 0)
            .wait()
            .unwrap_err()
            .to_string()
            .contains("parties"),
        "the error names the argument"
    );
    // Parties that differ from the waiting arrivals': refused, not counted.
    let waiting = a.barrier(name.as_str(), 3);
    let held = thread::spawn(move || waiting.wait_for(Duration::from_secs(3)));
    thread::sleep(SETTLE);
    let err = a.barrier(name.as_str(), 2).wait().unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("parties"),
        "{err}"
    );
    assert_eq!(a.barrier(name.as_str(), 3).arrived().unwrap(), 1);
    assert_eq!(held.join().unwrap().unwrap(), None);
    assert_eq!(a.barrier(name.as_str(), 3).arrived().unwrap(), 0);
    // Data of another type under the name.
    let other = unique_name("barrier:wrongtype");
    env.set_string(&other, "x");
    let err = a.barrier(other.as_str(), 2).wait().unwrap_err();
    assert!(err.is_protocol_error(), "{err}");
}

fn assert_handle<T: Send + Sync + Clone + std::fmt::Debug>() {}

/// The handle moves between threads and is shared, as every handle is.
#[test]
fn the_handle_is_send_sync_clone_and_debug() {
    assert_handle::<Barrier>();
}
