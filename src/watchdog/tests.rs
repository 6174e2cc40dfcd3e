//! The watchdog's renewal timing, batching, retries and losses, on
//! `MemoryBackend` with a hand-moved clock: no test here sleeps.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::schedule::RETRY;
use super::{Clock, Settings, Watchdog};
use crate::Result;
use crate::backend::{LockBackend, MemoryBackend, PubSubConnection, Reply, ScriptCall};
use crate::event::{EventHandler, LockLostEvent, RenewFailedEvent};
use crate::flavor::{Flavor, LockKeys, Renewal};
use crate::lock::AttemptId;

const TIMEOUT: Duration = Duration::from_secs(30);
const INTERVAL: Duration = Duration::from_secs(10);

/// A clock the test moves by hand.
struct HandClock(Mutex<Instant>);

impl HandClock {
    fn advance(&self, by: Duration) {
        *self.0.lock() += by;
    }
}

impl Clock for HandClock {
    fn now(&self) -> Instant {
        *self.0.lock()
    }
}

/// A `MemoryBackend` that records each script it runs (id, number of
/// keys), can fail every call, can split keys into fake cluster slots, can
/// hold renewals back at a gate, and can claim a response timeout.
#[derive(Default)]
struct Recording {
    inner: MemoryBackend,
    scripts: Mutex<Vec<(&'static str, usize)>>,
    down: std::sync::atomic::AtomicBool,
    slots: Option<u16>,
    gate: Gate,
    response_timeout: Option<Duration>,
}

impl Recording {
    fn taken(&self) -> Vec<(&'static str, usize)> {
        std::mem::take(&mut *self.scripts.lock())
    }
}

/// Where a [`Recording`] holds renewal scripts while closed, and what
/// happened in which order (renewals answered, releases returned).
#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
    changed: parking_lot::Condvar,
}

#[derive(Default)]
struct GateState {
    closed: bool,
    /// Renewals that reached the gate.
    arrived: usize,
    log: Vec<&'static str>,
}

impl Gate {
    fn close(&self) {
        self.state.lock().closed = true;
    }

    fn open(&self) {
        self.state.lock().closed = false;
        self.changed.notify_all();
    }

    fn note(&self, what: &'static str) {
        self.state.lock().log.push(what);
        self.changed.notify_all();
    }

    fn log(&self) -> Vec<&'static str> {
        self.state.lock().log.clone()
    }

    /// Waits (bounded) until `n` renewals reached the gate.
    fn until_arrived(&self, n: usize) {
        let mut state = self.state.lock();
        let until = Instant::now() + Duration::from_secs(10);
        while state.arrived < n {
            assert!(
                !self.changed.wait_until(&mut state, until).timed_out(),
                "no renewal reached the gate"
            );
        }
    }

    /// Holds a renewal while closed (bounded, so a broken test cannot hang).
    fn pass(&self) {
        let mut state = self.state.lock();
        state.arrived += 1;
        self.changed.notify_all();
        let until = Instant::now() + Duration::from_secs(30);
        while state.closed {
            assert!(
                !self.changed.wait_until(&mut state, until).timed_out(),
                "the gate was never opened"
            );
        }
    }
}

impl LockBackend for Recording {
    fn run_script(&self, call: &ScriptCall<'_>) -> Result<Reply> {
        // SeqCst: a test switch read across threads (any order would do;
        // the strongest needs no argument). So for its stores below.
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(crate::Error::backend("connection refused", true));
        }
        if let Some(slots) = self.slots {
            let first = self.slot_of(&call.keys()[0]);
            assert!(
                call.keys().iter().all(|k| self.slot_of(k) == first),
                "a script mixes slots"
            );
            assert!(slots > 0);
        }
        self.scripts
            .lock()
            .push((call.script().id(), call.keys().len()));
        let renewal = call.script().id().contains("renew");
        if renewal {
            self.gate.pass();
        }
        let reply = self.inner.run_script(call);
        if renewal {
            self.gate.note("renewed");
        }
        reply
    }

    fn response_timeout(&self) -> Option<Duration> {
        self.response_timeout
    }

    fn publish(&self, channel: &str, payload: &str) -> Result<()> {
        self.inner.publish(channel, payload)
    }

    fn with_pubsub(
        &self,
        session: &mut dyn FnMut(&mut dyn PubSubConnection) -> Result<()>,
    ) -> Result<()> {
        self.inner.with_pubsub(session)
    }

    fn slot_of(&self, key: &str) -> Option<u16> {
        // The lock name's hash tag decides, as on a cluster: "{a}..." and "a".
        let tag = key
            .split_once('{')
            .and_then(|(_, rest)| rest.split_once('}'))
            .map_or(key, |(tag, _)| tag);
        self.slots
            .map(|n| (tag.bytes().map(u16::from).sum::<u16>()) % n)
    }
}

/// Losses and failures the watchdog reported, by lock name.
#[derive(Debug, Default)]
struct Events {
    lost: Mutex<HashMap<String, String>>,
    failed: Mutex<Vec<String>>,
}

impl EventHandler for Events {
    fn on_lock_lost(&self, event: &LockLostEvent) {
        self.lost
            .lock()
            .insert(event.name().to_owned(), event.reason().to_owned());
    }
    fn on_renew_failed(&self, event: &RenewFailedEvent) {
        self.failed.lock().push(event.name().to_owned());
    }
}

struct Fixture {
    backend: Arc<Recording>,
    events: Arc<Events>,
    clock: Arc<HandClock>,
    watchdog: Watchdog,
    t0: Instant,
}

impl Fixture {
    fn new(batch_size: usize, slots: Option<u16>) -> Fixture {
        Fixture::with_backend(
            batch_size,
            Recording {
                slots,
                ..Recording::default()
            },
        )
    }

    fn with_backend(batch_size: usize, backend: Recording) -> Fixture {
        let backend = Arc::new(backend);
        let events = Arc::new(Events::default());
        let t0 = Instant::now();
        let clock = Arc::new(HandClock(Mutex::new(t0)));
        let watchdog = Watchdog::with_clock(
            Arc::clone(&backend) as Arc<dyn LockBackend>,
            Settings {
                timeout: TIMEOUT,
                timeout_ms: 30_000,
                batch_size,
            },
            Arc::clone(&events) as Arc<dyn EventHandler>,
            Arc::clone(&clock) as Arc<dyn Clock>,
        );
        // No scheduler thread: the test runs each pass itself.
        watchdog.shared.state.lock().started = true;
        Fixture {
            backend,
            events,
            clock,
            watchdog,
            t0,
        }
    }

    /// Takes `name` (of `flavor`) in the store for holder `c:1` and
    /// registers it with the watchdog as acquired at the clock's time.
    fn hold(&self, flavor: Flavor, name: &str) -> (Arc<Renewal>, Arc<super::Lease>) {
        let keys = Arc::new(LockKeys::new(flavor, name.to_owned()));
        let holder = keys.holder("c:1".to_owned());
        let renewal = Arc::new(Renewal { keys, holder });
        let acquired = match flavor {
            Flavor::Read => crate::ops::rw_lock::read_acquire(
                &self.backend.inner,
                &renewal.keys.rw(&renewal.holder),
                30_000,
            )
            .unwrap(),
            _ => crate::ops::lock::acquire(&self.backend.inner, name, renewal.field(), 30_000)
                .unwrap(),
        };
        assert!(acquired.is_acquired(), "{name}");
        let lease = self.watchdog.start(&renewal, self.clock.now()).unwrap();
        (renewal, lease)
    }

    /// Takes `name` (reentrant) for holder `c:1` with a recorded attempt
    /// (a first hold or a reentrant one) and registers that guard with the
    /// watchdog. Returns the attempt.
    fn hold_recorded(&self, renewal: &Arc<Renewal>) -> AttemptId {
        let attempt = AttemptId::new();
        let record = attempt.key(renewal.name());
        let acquired = crate::ops::lock::acquire_recorded(
            &self.backend.inner,
            renewal.name(),
            renewal.field(),
            30_000,
            Some(&record),
        )
        .unwrap();
        assert!(acquired.is_acquired());
        self.watchdog
            .start_within(renewal, self.clock.now(), None, Some(attempt))
            .unwrap();
        attempt
    }

    /// Releases one guard of `renewal` taken by `attempt`: the watch
    /// forgets it, and the store's release turns its record into the latch.
    fn release_recorded(&self, renewal: &Arc<Renewal>, attempt: AttemptId) {
        self.watchdog.stop(renewal, Some(attempt));
        let channel = format!("redisson_lock__channel:{{{}}}", renewal.name());
        crate::ops::lock::release(
            &self.backend.inner,
            renewal.name(),
            &channel,
            renewal.field(),
            30_000,
            &attempt.key(renewal.name()),
            10_000,
        )
        .unwrap();
    }

    fn at(&self, offset: Duration) {
        *self.clock.0.lock() = self.t0 + offset;
    }
}

#[test]
fn a_hold_is_renewed_one_interval_after_it_was_taken_and_not_before() {
    let f = Fixture::new(100, None);
    let (_renewal, lease) = f.hold(Flavor::Reentrant, "wd:timing");
    f.backend.taken();

    f.at(INTERVAL / 2);
    assert_eq!(f.watchdog.renew_due(), 0);
    assert!(f.backend.taken().is_empty(), "renewed before it was due");

    f.at(INTERVAL);
    assert_eq!(f.watchdog.renew_due(), 1);
    assert_eq!(f.backend.taken(), [("lock_renew_batch", 1)]);
    // The lease now runs a full timeout from the renewal's send time.
    assert_eq!(lease.ends(), Some(f.t0 + INTERVAL + TIMEOUT));
    assert!(!lease.is_lost_at(f.t0 + INTERVAL + TIMEOUT - Duration::from_millis(1)));

    // Next due one interval after the renewal.
    f.at(INTERVAL * 2 - Duration::from_secs(3));
    assert_eq!(f.watchdog.renew_due(), 0);
    f.at(INTERVAL * 2);
    assert_eq!(f.watchdog.renew_due(), 1);
    assert!(f.events.lost.lock().is_empty());
}

#[test]
fn due_holds_go_in_batches_of_the_configured_size_one_script_per_kind() {
    let f = Fixture::new(100, None);
    let leases: Vec<_> = (0..250)
        .map(|i| f.hold(Flavor::Reentrant, &format!("wd:batch:{i}")))
        .collect();
    let (_read, read_lease) = f.hold(Flavor::Read, "wd:batch:rw");
    f.backend.taken();

    f.at(INTERVAL);
    assert_eq!(f.watchdog.renew_due(), 251);
    let mut scripts = f.backend.taken();
    scripts.sort_unstable();
    assert_eq!(
        scripts,
        [
            ("lock_renew_batch", 50),
            ("lock_renew_batch", 100),
            ("lock_renew_batch", 100),
            ("read_lock_renew_batch", 2),
        ]
    );
    for (_, lease) in leases.iter().chain([&(_read, read_lease)]) {
        assert_eq!(lease.ends(), Some(f.t0 + INTERVAL + TIMEOUT));
    }
}

#[test]
fn renewals_falling_due_close_together_share_a_batch_later_ones_wait() {
    let f = Fixture::new(100, None);
    let (_a, _) = f.hold(Flavor::Reentrant, "wd:close:a");
    f.clock.advance(INTERVAL / 8); // within the quarter-interval margin
    let (_b, _) = f.hold(Flavor::Reentrant, "wd:close:b");
    f.clock.advance(INTERVAL / 2); // well past it
    let (_c, c_lease) = f.hold(Flavor::Reentrant, "wd:close:c");
    f.backend.taken();

    f.at(INTERVAL);
    assert_eq!(f.watchdog.renew_due(), 2);
    assert_eq!(f.backend.taken(), [("lock_renew_batch", 2)]);
    assert_eq!(c_lease.ends(), Some(f.t0 + INTERVAL * 5 / 8 + TIMEOUT));

    f.at(INTERVAL * 5 / 8 + INTERVAL);
    assert_eq!(f.watchdog.renew_due(), 1);
    assert_eq!(f.backend.taken(), [("lock_renew_batch", 1)]);
}

#[test]
fn one_lost_lock_in_a_batch_does_not_fail_the_others() {
    let f = Fixture::new(100, None);
    let holds: Vec<_> = (0..10)
        .map(|i| f.hold(Flavor::Reentrant, &format!("wd:one-lost:{i}")))
        .collect();
    // An operator frees lock 3 behind the holder's back.
    assert!(
        crate::ops::lock::force_release(
            &f.backend.inner,
            "wd:one-lost:3",
            "redisson_lock__channel:{wd:one-lost:3}"
        )
        .unwrap()
    );
    f.at(INTERVAL);
    assert_eq!(f.watchdog.renew_due(), 10);
    for (i, (_, lease)) in holds.iter().enumerate() {
        assert_eq!(lease.is_lost_at(f.t0 + INTERVAL), i == 3, "lock {i}");
    }
    let lost = f.events.lost.lock();
    assert_eq!(lost.len(), 1);
    assert!(lost["wd:one-lost:3"].contains("no longer held"), "{lost:?}");
    drop(lost);
    // The lost one is never renewed again; the others are.
    f.backend.taken();
    f.at(INTERVAL * 2);
    assert_eq!(f.watchdog.renew_due(), 9);
}

#[test]
fn a_failed_renewal_is_retried_and_the_hold_is_lost_once_its_lease_ran_out() {
    let f = Fixture::new(100, None);
    let (_renewal, lease) = f.hold(Flavor::Reentrant, "wd:retry");
    f.backend
        .down
        .store(true, std::sync::atomic::Ordering::SeqCst);

    f.at(INTERVAL);
    assert_eq!(f.watchdog.renew_due(), 1);
    assert_eq!(f.events.failed.lock().len(), 1);
    assert!(!lease.is_lost_at(f.t0 + INTERVAL));
    // Retried after RETRY, not before.
    f.at(INTERVAL + RETRY - Duration::from_millis(1) - INTERVAL / 4);
    assert_eq!(f.watchdog.renew_due(), 0);
    f.at(INTERVAL + RETRY);
    assert_eq!(f.watchdog.renew_due(), 1);
    assert_eq!(f.events.failed.lock().len(), 2);

    // Failing until the lease (30 s from the acquisition) has run out.
    let mut passes = 0;
    while f.events.lost.lock().is_empty() {
        f.clock.advance(RETRY);
        f.watchdog.renew_due();
        passes += 1;
        assert!(passes < 100, "never reported lost");
    }
    assert!(lease.is_lost_at(f.clock.now()));
    assert!(f.clock.now() >= f.t0 + TIMEOUT);
    assert!(f.clock.now() < f.t0 + TIMEOUT + RETRY * 2);
    assert!(f.events.lost.lock()["wd:retry"].contains("before the lease ran out"));

    // Recovering before the end keeps it: a fresh hold, one failure, then up.
    let (_other, other_lease) = f.hold(Flavor::Reentrant, "wd:retry:recovers");
    let taken_at = f.clock.now();
    f.clock.advance(INTERVAL);
    f.watchdog.renew_due();
    f.backend
        .down
        .store(false, std::sync::atomic::Ordering::SeqCst);
    f.clock.advance(RETRY);
    assert_eq!(f.watchdog.renew_due(), 1);
    assert_eq!(
        other_lease.ends(),
        Some(taken_at + INTERVAL + RETRY + TIMEOUT)
    );
    assert!(!other_lease.is_lost_at(f.clock.now()));
}

#[test]
fn a_released_hold_is_not_renewed_and_reentrant_holds_share_one_watch() {
    let f = Fixture::new(100, None);
    let (renewal, _) = f.hold(Flavor::Reentrant, "wd:stop");
    let again = f.watchdog.start(&renewal, f.clock.now()).unwrap();
    f.watchdog.stop(&renewal, None); // the inner guard
    f.backend.taken();
    f.at(INTERVAL);
    assert_eq!(f.watchdog.renew_due(), 1);
    assert!(!again.is_lost_at(f.clock.now()));

    f.watchdog.stop(&renewal, None); // the outer guard
    f.backend.taken();
    f.at(INTERVAL * 3);
    assert_eq!(f.watchdog.renew_due(), 0);
    assert!(f.backend.taken().is_empty());
}

#[test]
fn on_a_cluster_a_batch_holds_keys_of_one_slot_only() {
    let f = Fixture::new(100, Some(4));
    let holds: Vec<_> = (0..40)
        .map(|i| f.hold(Flavor::Reentrant, &format!("wd:slots:{i}")))
        .collect();
    let reads: Vec<_> = (0..8)
        .map(|i| f.hold(Flavor::Read, &format!("wd:slots:rw:{i}")))
        .collect();
    f.backend.taken();
    f.at(INTERVAL);
    // The backend asserts each script's keys share a slot.
    assert_eq!(f.watchdog.renew_due(), 48);
    let scripts = f.backend.taken();
    assert!(scripts.len() <= 8, "{scripts:?}");
    for (_, lease) in holds.iter().chain(&reads) {
        assert_eq!(lease.ends(), Some(f.t0 + INTERVAL + TIMEOUT));
    }
}

/// Runs one scheduler pass on its own thread (a renewal it sends may be
/// held at the gate).
fn pass_in_background(f: &Fixture) -> std::thread::JoinHandle<usize> {
    let watchdog = f.watchdog.clone();
    std::thread::spawn(move || watchdog.renew_due())
}

/// Releases the last guard of `renewal` on its own thread, noting in the
/// gate's log when the release returned; the thread returns how long it
/// took and whether it says it waited.
fn stop_in_background(
    f: &Fixture,
    renewal: &Arc<Renewal>,
) -> std::thread::JoinHandle<(Duration, bool)> {
    let (watchdog, renewal, backend) = (
        f.watchdog.clone(),
        Arc::clone(renewal),
        Arc::clone(&f.backend),
    );
    std::thread::spawn(move || {
        let started = Instant::now();
        let waited = watchdog.stop(&renewal, None).is_some();
        backend.gate.note("stopped");
        (started.elapsed(), waited)
    })
}

/// A renewal already sent cannot be cancelled, and would renew whatever
/// hold the holder has when it lands (the same thread's next, fixed-lease
/// hold): the last release waits for its answer.
#[test]
fn the_last_release_waits_for_a_renewal_in_flight() {
    let f = Fixture::new(100, None);
    let (renewal, _) = f.hold(Flavor::Reentrant, "wd:in-flight");
    f.backend.gate.close();
    f.at(INTERVAL);
    let pass = pass_in_background(&f);
    f.backend.gate.until_arrived(1);

    let stop = stop_in_background(&f, &renewal);
    // The renewal is held: the release cannot have returned.
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        f.backend.gate.log().is_empty(),
        "{:?}",
        f.backend.gate.log()
    );
    f.backend.gate.open();
    let (_, waited) = stop.join().unwrap();
    assert!(waited, "the release says it did not wait");
    assert_eq!(pass.join().unwrap(), 1);
    assert_eq!(f.backend.gate.log(), ["renewed", "stopped"]);
    // And the hold is not renewed again.
    f.backend.taken();
    f.at(INTERVAL * 3);
    assert_eq!(f.watchdog.renew_due(), 0);
    assert!(f.events.lost.lock().is_empty(), "a release reported a loss");
}

/// The wait is bounded: one response timeout from the renewal's send (the
/// round trips' deadline) plus the slack and the window's margin; a
/// renewal held longer would be refused by the server as late.
#[test]
fn the_wait_for_a_renewal_in_flight_ends_with_its_window() {
    const RESPONSE: Duration = Duration::from_millis(200);
    let f = Fixture::with_backend(
        100,
        Recording {
            response_timeout: Some(RESPONSE),
            ..Recording::default()
        },
    );
    let (renewal, _) = f.hold(Flavor::Reentrant, "wd:in-flight:bound");
    f.backend.gate.close();
    f.at(INTERVAL);
    let sent = Instant::now();
    let pass = pass_in_background(&f);
    f.backend.gate.until_arrived(1);

    let (took, waited) = stop_in_background(&f, &renewal).join().unwrap();
    assert!(waited);
    let bound = RESPONSE + crate::deadline::ROUND_TRIP_FLOOR + crate::backend::WINDOW_MARGIN;
    assert_eq!(
        f.backend.gate.log(),
        ["stopped"],
        "it waited past the bound"
    );
    assert!(
        sent.elapsed() >= bound,
        "it gave up {:?} after the send, before the renewal's window ended ({bound:?})",
        sent.elapsed()
    );
    assert!(took < Duration::from_secs(5), "it waited {took:?}");
    f.backend.gate.open();
    pass.join().unwrap();
}

/// A hold released after its renewal was taken out of the queue but
/// before its batch left is not sent at all, and its release does not wait.
#[test]
fn a_hold_released_before_its_batch_is_sent_is_not_renewed() {
    let f = Fixture::new(1, None);
    let (first, first_lease) = f.hold(Flavor::Reentrant, "wd:in-flight:a");
    let (second, _) = f.hold(Flavor::Reentrant, "wd:in-flight:b");
    f.backend.taken();
    f.backend.gate.close();
    f.at(INTERVAL);
    // Both are due; batches of one: the first is held at the gate, the
    // second waits its turn.
    let pass = pass_in_background(&f);
    f.backend.gate.until_arrived(1);
    let (stopped, waited) = stop_in_background(&f, &second).join().unwrap();
    assert_eq!(f.backend.gate.log(), ["stopped"]);
    assert!(!waited, "it waited for a renewal that was not sent");
    assert!(stopped < Duration::from_secs(5));
    f.backend.gate.open();
    assert_eq!(pass.join().unwrap(), 1);
    assert_eq!(f.backend.taken(), [("lock_renew_batch", 1)]);
    assert_eq!(first_lease.ends(), Some(f.t0 + INTERVAL + TIMEOUT));
    drop(first);
}

fn reentrant(name: &str) -> Arc<Renewal> {
    let keys = Arc::new(LockKeys::new(Flavor::Reentrant, name.to_owned()));
    let holder = keys.holder("c:1".to_owned());
    Arc::new(Renewal { keys, holder })
}

/// Renewals name the first live guard's attempt; released first (before an
/// inner guard), another live guard's takes its place: the hold is still
/// renewed, not reported lost.
#[test]
fn when_the_guard_renewals_name_is_released_first_they_name_another() {
    let f = Fixture::new(100, None);
    let renewal = reentrant("wd:moved");
    let outer = f.hold_recorded(&renewal);
    let inner = f.hold_recorded(&renewal);
    f.release_recorded(&renewal, outer);
    f.backend.taken();
    f.at(INTERVAL);
    assert_eq!(f.watchdog.renew_due(), 1);
    assert_eq!(f.backend.taken(), [("lock_renew", 2)]);
    assert!(
        f.events.lost.lock().is_empty(),
        "{:?}",
        f.events.lost.lock()
    );
    f.release_recorded(&renewal, inner);
    f.at(INTERVAL * 3);
    assert_eq!(f.watchdog.renew_due(), 0);
}

/// A renewal on its way when the guard it names is released (others live)
/// finds that record released and renews nothing; it is sent again at once
/// naming a live guard's attempt, and no loss is reported.
#[test]
fn a_renewal_whose_guard_is_released_on_its_way_is_sent_again_for_another() {
    let f = Fixture::new(100, None);
    let renewal = reentrant("wd:moved:in-flight");
    let outer = f.hold_recorded(&renewal);
    let inner = f.hold_recorded(&renewal);
    f.backend.gate.close();
    f.at(INTERVAL);
    let pass = pass_in_background(&f);
    f.backend.gate.until_arrived(1);
    // Not the last guard: no wait for the renewal in flight.
    f.release_recorded(&renewal, outer);
    f.backend.gate.open();
    assert_eq!(pass.join().unwrap(), 1);
    assert!(
        f.events.lost.lock().is_empty(),
        "{:?}",
        f.events.lost.lock()
    );
    // Due again at once, naming the inner guard's attempt: renewed.
    f.backend.taken();
    assert_eq!(f.watchdog.renew_due(), 1);
    assert_eq!(f.backend.taken(), [("lock_renew", 2)]);
    let state = crate::ops::lock::state(&f.backend.inner, "wd:moved:in-flight", "c:1").unwrap();
    assert!(state.ttl.is_some_and(|ttl| ttl > Duration::from_secs(29)));
    assert!(
        f.events.lost.lock().is_empty(),
        "{:?}",
        f.events.lost.lock()
    );
    f.release_recorded(&renewal, inner);
}

/// Takes `name` (reentrant) in the store for `c:1` with a lease of
/// `lease`, as a fixed-lease hold passed to another thread would have.
fn fixed_hold(f: &Fixture, name: &str, lease: Duration) -> Arc<Renewal> {
    let keys = Arc::new(LockKeys::new(Flavor::Reentrant, name.to_owned()));
    let holder = keys.holder("c:1".to_owned());
    let renewal = Arc::new(Renewal { keys, holder });
    let ms = i64::try_from(lease.as_millis()).unwrap();
    let acquired = crate::ops::lock::acquire(&f.backend.inner, name, renewal.field(), ms).unwrap();
    assert!(acquired.is_acquired());
    renewal
}

/// A hold of `name` with 3 s of its fixed lease left, passed at the clock's
/// time to a thread that asked for 10 s: its restart registered, the
/// scripts recorded so far forgotten.
fn passed_to_another_thread(f: &Fixture, name: &str) -> (Arc<Renewal>, Arc<super::Lease>) {
    let renewal = fixed_hold(f, name, Duration::from_secs(3));
    let lease = super::Lease::new(f.clock.now(), Duration::from_secs(3));
    f.backend.taken();
    f.watchdog
        .restart_later(&renewal, None, &lease, 10_000)
        .unwrap();
    (renewal, lease)
}

/// The store's TTL of `name` (its real clock, unlike the hand clock).
fn ttl(f: &Fixture, name: &str) -> Duration {
    crate::ops::lock::state(&f.backend.inner, name, "c:1")
        .unwrap()
        .ttl
        .unwrap()
}

/// A fixed lease passed to another thread (3 s left, the new holder asked
/// for 10 s) restarts a third of the rest before it runs out, and not
/// before: one raise, after which the lease ends 10 s after the pass.
#[test]
fn a_passed_fixed_lease_restarts_a_third_of_the_rest_before_it_runs_out() {
    let f = Fixture::new(100, None);
    let (_renewal, lease) = passed_to_another_thread(&f, "wd:restart");
    f.at(Duration::from_millis(1999));
    f.watchdog.restart_due();
    assert!(f.backend.taken().is_empty(), "restarted before it was due");
    assert!(ttl(&f, "wd:restart") <= Duration::from_secs(3));

    f.at(Duration::from_secs(2));
    f.watchdog.restart_due();
    assert_eq!(f.backend.taken(), [("lock_renew", 1)]);
    assert_eq!(lease.ends(), Some(f.t0 + Duration::from_secs(10)));
    assert!(
        ttl(&f, "wd:restart") > Duration::from_secs(7),
        "raised to 8 s"
    );
    f.at(Duration::from_secs(9));
    f.watchdog.restart_due();
    assert!(f.backend.taken().is_empty(), "restarted once");
    assert!(f.events.lost.lock().is_empty());
}

/// A restart cancelled by the hold's release is never sent.
#[test]
fn a_released_holds_restart_is_never_sent() {
    let f = Fixture::new(100, None);
    let (renewal, lease) = passed_to_another_thread(&f, "wd:restart:released");
    f.watchdog.cancel_restart(&renewal);
    f.at(Duration::from_secs(2));
    f.watchdog.restart_due();
    assert!(f.backend.taken().is_empty());
    assert_eq!(lease.ends(), Some(f.t0 + Duration::from_secs(3)));
}

/// A restart that finds the hold gone marks the lease lost and reports it;
/// one that fails is retried, and reported lost once no retry could land
/// before the rest runs out.
#[test]
fn a_restart_that_finds_the_hold_gone_or_cannot_land_reports_it_lost() {
    let f = Fixture::new(100, None);
    let keys = Arc::new(LockKeys::new(
        Flavor::Reentrant,
        "wd:restart:gone".to_owned(),
    ));
    let holder = keys.holder("c:1".to_owned());
    let gone = Arc::new(Renewal { keys, holder });
    let lease = super::Lease::new(f.t0, Duration::from_secs(3));
    f.watchdog
        .restart_later(&gone, None, &lease, 10_000)
        .unwrap();
    f.at(Duration::from_secs(2));
    f.watchdog.restart_due();
    assert!(lease.is_lost_at(f.t0 + Duration::from_secs(2)));
    assert!(f.events.lost.lock().contains_key("wd:restart:gone"));

    // Passed at 2 s with 3 s left: due at 4 s, retried at 4.5 s, and a
    // retry at 5 s would come as the rest runs out.
    let renewal = fixed_hold(&f, "wd:restart:down", Duration::from_secs(30));
    let lease = super::Lease::new(f.clock.now(), Duration::from_secs(3));
    f.watchdog
        .restart_later(&renewal, None, &lease, 10_000)
        .unwrap();
    f.backend
        .down
        .store(true, std::sync::atomic::Ordering::SeqCst);
    f.at(Duration::from_secs(4));
    f.watchdog.restart_due();
    assert_eq!(f.events.failed.lock().len(), 1, "retried");
    assert!(!f.events.lost.lock().contains_key("wd:restart:down"));
    f.at(Duration::from_secs(4) + RETRY - Duration::from_millis(1));
    f.watchdog.restart_due();
    assert_eq!(f.events.failed.lock().len(), 1, "not retried before RETRY");
    f.at(Duration::from_secs(4) + RETRY);
    f.watchdog.restart_due();
    let lost = f.events.lost.lock();
    assert!(lost["wd:restart:down"].contains("before the lease ran out"));
}
