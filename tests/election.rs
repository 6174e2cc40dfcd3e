//! Leader election (issue 35): every behaviour written once, as a function
//! of an [`Env`], and run on both stores (and the cluster) by
//! `backend_tests!`. Two or three `Client`s on one store stand for the
//! candidates' processes; `tests/election_processes.rs` has real ones.
//!
//! Bounds come from what the election promises: a resigning leader's
//! successor within a handoff (milliseconds; the median's figure is
//! printed, the bound generous for a loaded machine), a dead one's within
//! its lease, and a leader's "lost" before any other candidate wins.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::timing::{PROMPT, STUCK};
use common::wrap::{Hook, Store, Wrapped, assert_forwards_every_method};
use common::{Env, backend_tests, unique_name};
use redisync::{Client, LeaderEvent};
use redisync::{Reply, ScriptCall};

backend_tests!(
    candidates_lead_in_arrival_order_with_growing_terms,
    a_resigning_leader_hands_over_at_once,
    current_names_the_leader_and_nobody_after_it_resigns,
    an_observer_sees_every_term_once_and_in_order,
    a_leader_whose_renewals_fail_knows_it_lost_before_another_wins,
    a_dead_leader_is_replaced_within_its_lease,
    run_leads_for_the_job_and_resigns,
    a_resent_or_lost_proclamation_issues_one_term,
    bad_identity,
);

/// Waits until `election`'s queue has `n` candidates (the fair lock's
/// queue) or panics after `STUCK`.
fn wait_queued(client: &Client, name: &str, n: usize) {
    let lock = format!("{{{name}}}:redisync_election");
    let until = Instant::now() + STUCK;
    loop {
        let inspection = client.inspect(&lock).unwrap();
        if inspection.queue.len() >= n {
            return;
        }
        assert!(Instant::now() < until, "{n} candidates never queued");
        thread::sleep(Duration::from_millis(5));
    }
}

fn candidates_lead_in_arrival_order_with_growing_terms(env: &Env) {
    let name = unique_name("election:order");
    let (a, b, c) = (env.client(), env.client(), env.client());
    let first = a.leader_election(name.as_str()).campaign("a").unwrap();
    let (led_tx, led) = mpsc::channel::<(String, u64)>();
    let mut candidates = Vec::new();
    for (i, (client, identity)) in [(b, "b"), (c, "c")].into_iter().enumerate() {
        let election = client.leader_election(name.as_str());
        let led_tx = led_tx.clone();
        candidates.push(thread::spawn(move || {
            let leadership = election.campaign(identity).unwrap();
            // Handed over by the release: its lease runs a whole lease from
            // the proclamation, not the handoff's claim window.
            assert!(
                !leadership.is_lost(),
                "{identity}: a leadership handed over is lost at once"
            );
            led_tx
                .send((identity.to_owned(), leadership.term()))
                .unwrap();
            thread::sleep(Duration::from_millis(20));
            leadership.resign().unwrap();
        }));
        // B queues before C does.
        wait_queued(&a, &name, i + 1);
    }
    let first_term = first.term();
    first.resign().unwrap();
    let (who, second) = led.recv_timeout(STUCK).unwrap();
    assert_eq!(who, "b", "the first in line did not lead next");
    let (who, third) = led.recv_timeout(STUCK).unwrap();
    assert_eq!(who, "c");
    assert!(
        first_term < second && second < third,
        "terms {first_term}, {second}, {third} do not grow"
    );
    for candidate in candidates {
        candidate.join().unwrap();
    }
}

fn a_resigning_leader_hands_over_at_once(env: &Env) {
    let name = unique_name("election:handover");
    let (a, b) = (env.client(), env.client());
    let mut handovers = Vec::new();
    for _ in 0..15 {
        let leadership = a.leader_election(name.as_str()).campaign("a").unwrap();
        let election = b.leader_election(name.as_str());
        let (led_tx, led) = mpsc::channel::<Instant>();
        let next = thread::spawn(move || {
            let leadership = election.campaign("b").unwrap();
            led_tx.send(Instant::now()).unwrap();
            leadership.resign().unwrap();
        });
        wait_queued(&a, &name, 1);
        let resigned = Instant::now();
        leadership.resign().unwrap();
        let led_at = led.recv_timeout(STUCK).unwrap();
        handovers.push(led_at.saturating_duration_since(resigned));
        next.join().unwrap();
    }
    handovers.sort();
    let median = handovers[handovers.len() / 2];
    println!("handover to the next candidate: median {median:?}, all {handovers:?}");
    // A handoff, not a lease or a retry interval (the claim window is 6 s).
    assert!(median < PROMPT / 4, "median handover {median:?}");
}

fn current_names_the_leader_and_nobody_after_it_resigns(env: &Env) {
    let name = unique_name("election:current");
    let (a, observer) = (env.client(), env.client());
    let election = observer.leader_election(name.as_str());
    assert_eq!(election.current().unwrap(), None);
    let leadership = a.leader_election(name.as_str()).campaign("host-a").unwrap();
    let leader = election.current().unwrap().expect("a leader");
    assert_eq!(leader.identity, "host-a");
    assert_eq!(leader.term, leadership.term());
    let now_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    assert!(
        (now_ms - leader.since_ms).abs() < 60_000,
        "since {} is not near now {now_ms}",
        leader.since_ms
    );
    leadership.resign().unwrap();
    assert_eq!(election.current().unwrap(), None);
}

fn an_observer_sees_every_term_once_and_in_order(env: &Env) {
    let name = unique_name("election:observe");
    let (a, b, watcher) = (env.client(), env.client(), env.client());
    let observer = watcher.leader_election(name.as_str()).observe().unwrap();
    let mut terms = Vec::new();
    for round in 0..6 {
        let client = if round % 2 == 0 { &a } else { &b };
        let leadership = client
            .leader_election(name.as_str())
            .campaign(&format!("candidate-{round}"))
            .unwrap();
        terms.push(leadership.term());
        leadership.resign().unwrap();
    }
    let mut seen = Vec::new();
    while seen.len() < terms.len() * 2 {
        let event = observer
            .recv_timeout(STUCK)
            .unwrap_or_else(|| panic!("the observer saw only {seen:?} of terms {terms:?}"));
        seen.push(event);
    }
    let expected: Vec<LeaderEvent> = terms
        .iter()
        .enumerate()
        .flat_map(|(round, &term)| {
            let Some(LeaderEvent::Elected(leader)) = seen.get(round * 2) else {
                panic!("event {} is not an election: {seen:?}", round * 2);
            };
            assert_eq!(leader.identity, format!("candidate-{round}"));
            [
                LeaderEvent::Elected(leader.clone()),
                LeaderEvent::Resigned { term },
            ]
        })
        .collect();
    assert_eq!(seen, expected, "terms {terms:?}");
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
    assert_eq!(observer.recv_timeout(Duration::from_millis(200)), None);
}

/// A store whose renewals (the watchdog's) fail while `down` is set, and
/// everything else too once `dead` is set (a process that died).
#[derive(Default)]
struct Failing {
    renewals_down: AtomicBool,
    dead: AtomicBool,
}

impl Hook for Failing {
    fn run_script(&self, inner: &Store, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        if self.dead.load(Ordering::SeqCst)
            || (self.renewals_down.load(Ordering::SeqCst) && call.script().id().contains("renew"))
        {
            return Err(redisync::Error::backend("timed out (test)", true));
        }
        inner.run_script(call)
    }

    fn publish(&self, inner: &Store, channel: &str, payload: &str) -> redisync::Result<()> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(redisync::Error::backend("timed out (test)", true));
        }
        inner.publish(channel, payload)
    }
}

/// The lease of the leaders whose store fails here.
const LEASE: Duration = Duration::from_millis(1_500);

fn failing_client(env: &Env) -> (Client, Arc<Wrapped<Failing>>) {
    assert_forwards_every_method(Failing::default());
    let base = env.client();
    let failing = Arc::new(Wrapped::around(
        Arc::clone(base.backend()),
        Failing::default(),
    ));
    let client = Client::builder()
        .shared_backend(Arc::clone(&failing) as Arc<dyn redisync::LockBackend>)
        .watchdog_timeout(LEASE)
        .build()
        .unwrap();
    (client, failing)
}

fn a_leader_whose_renewals_fail_knows_it_lost_before_another_wins(env: &Env) {
    let name = unique_name("election:lost-first");
    let (leader_client, failing) = failing_client(env);
    let other = env.client();
    let leadership = leader_client
        .leader_election(name.as_str())
        .campaign("frozen")
        .unwrap();
    let election = other.leader_election(name.as_str());
    let (won_tx, won) = mpsc::channel::<(Instant, u64)>();
    let next = thread::spawn(move || {
        let leadership = election.campaign("next").unwrap();
        won_tx.send((Instant::now(), leadership.term())).unwrap();
        leadership.resign().unwrap();
    });
    wait_queued(&other, &name, 1);
    failing.renewals_down.store(true, Ordering::SeqCst);
    assert!(
        leadership.wait_lost(LEASE * 4),
        "the leader never found its leadership lost"
    );
    let lost_at = Instant::now();
    let (won_at, term) = won.recv_timeout(STUCK).unwrap();
    assert!(
        lost_at < won_at,
        "another candidate won {:?} before the leader knew it lost",
        lost_at.saturating_duration_since(won_at)
    );
    assert!(term > leadership.term());
    next.join().unwrap();
    failing.renewals_down.store(false, Ordering::SeqCst);
    drop(leadership);
}

fn a_dead_leader_is_replaced_within_its_lease(env: &Env) {
    let name = unique_name("election:dead");
    let (leader_client, failing) = failing_client(env);
    let other = env.client();
    let leadership = leader_client
        .leader_election(name.as_str())
        .campaign("doomed")
        .unwrap();
    let old_term = leadership.term();
    let election = other.leader_election(name.as_str());
    let (won_tx, won) = mpsc::channel::<(Instant, u64, String)>();
    let next = thread::spawn(move || {
        let leadership = election.campaign("next").unwrap();
        let current = election.current().unwrap().unwrap();
        won_tx
            .send((Instant::now(), leadership.term(), current.identity))
            .unwrap();
        leadership.resign().unwrap();
    });
    wait_queued(&other, &name, 1);
    let died = Instant::now();
    failing.dead.store(true, Ordering::SeqCst);
    let (won_at, term, identity) = won.recv_timeout(STUCK).unwrap();
    let took = won_at.saturating_duration_since(died);
    assert!(
        took < LEASE + PROMPT,
        "the next leader took {took:?} (the lease is {LEASE:?})"
    );
    assert!(term > old_term);
    assert_eq!(identity, "next");
    next.join().unwrap();
    drop(leadership);
}

fn run_leads_for_the_job_and_resigns(env: &Env) {
    let name = unique_name("election:run");
    let client = env.client();
    let election = client.leader_election(name.as_str());
    let (term, identity) = election
        .run("worker", |leadership| {
            (
                leadership.term(),
                election.current().unwrap().unwrap().identity,
            )
        })
        .unwrap();
    assert!(term > 0);
    assert_eq!(identity, "worker");
    assert_eq!(election.current().unwrap(), None);
}

fn bad_identity(env: &Env) {
    let client = env.client();
    let election = client.leader_election(unique_name("election:bad").as_str());
    for (identity, why) in [
        ("", "empty"),
        ("a\nb", "line break"),
        (&"x".repeat(300)[..], "256 bytes"),
    ] {
        let err = election.campaign(identity).unwrap_err();
        assert!(
            err.to_string().contains("identity") && err.to_string().contains(why),
            "{identity:?}: {err}"
        );
    }
}

/// A store that runs every proclamation twice (a copy sent again after a
/// dropped connection) and, once `lose` is set, loses the next one's reply.
#[derive(Default)]
struct Twice {
    lose: AtomicBool,
    proclaimed: std::sync::Mutex<Vec<Reply>>,
}

impl Hook for Twice {
    fn run_script(&self, inner: &Store, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        if call.script().id() != "election_proclaim" {
            return inner.run_script(call);
        }
        let first = inner.run_script(call)?;
        let second = inner.run_script(call)?;
        self.proclaimed
            .lock()
            .unwrap()
            .extend([first, second.clone()]);
        if self.lose.swap(false, Ordering::SeqCst) {
            return Err(redisync::Error::backend("connection reset (test)", true));
        }
        Ok(second)
    }
}

fn a_resent_or_lost_proclamation_issues_one_term(env: &Env) {
    assert_forwards_every_method(Twice::default());
    let name = unique_name("election:resent");
    let base = env.client();
    let twice = Arc::new(Wrapped::around(
        Arc::clone(base.backend()),
        Twice::default(),
    ));
    let client = Client::builder()
        .shared_backend(Arc::clone(&twice) as Arc<dyn redisync::LockBackend>)
        .build()
        .unwrap();
    let election = client.leader_election(name.as_str());
    for lose in [false, true] {
        twice.lose.store(lose, Ordering::SeqCst);
        twice.proclaimed.lock().unwrap().clear();
        let leadership = election.campaign("twice").unwrap();
        let replies = twice.proclaimed.lock().unwrap().clone();
        let term = Reply::Bulk(leadership.term().to_string().into_bytes());
        // Both copies answer the one term (the second from the op record),
        // also when the reply was lost (the settle found it).
        assert_eq!(replies, [term.clone(), term], "lose {lose}");
        assert_eq!(election.current().unwrap().unwrap().term, leadership.term());
        leadership.resign().unwrap();
    }
}
