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
/// keys), can fail every call, and can split keys into fake cluster slots.
#[derive(Default)]
struct Recording {
    inner: MemoryBackend,
    scripts: Mutex<Vec<(&'static str, usize)>>,
    down: std::sync::atomic::AtomicBool,
    slots: Option<u16>,
}

impl Recording {
    fn taken(&self) -> Vec<(&'static str, usize)> {
        std::mem::take(&mut *self.scripts.lock())
    }
}

impl LockBackend for Recording {
    fn run_script(&self, call: &ScriptCall<'_>) -> Result<Reply> {
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
        self.inner.run_script(call)
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
        let backend = Arc::new(Recording {
            slots,
            ..Recording::default()
        });
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
    f.watchdog.stop(&renewal); // the inner guard
    f.backend.taken();
    f.at(INTERVAL);
    assert_eq!(f.watchdog.renew_due(), 1);
    assert!(!again.is_lost_at(f.clock.now()));

    f.watchdog.stop(&renewal); // the outer guard
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
