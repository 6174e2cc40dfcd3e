//! Feature `metrics`: what the library records through the `metrics`
//! facade, read back with `metrics-util`'s debugging recorder installed as
//! this test process's global recorder.
//!
//! One `#[test]` runs every scenario in turn: the recorder is global and
//! the metrics are labelled by primitive, not by lock name, so scenarios
//! running in parallel would count each other's calls.
#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redisync::{Client, MemoryBackend, NopEventHandler};

/// The recorder's values, accumulated: its snapshots reset counters and
/// gauges to zero (so a gauge's value is the sum of its snapshots) and
/// drain histograms (we keep how many values each had).
struct Recorded {
    snapshotter: Snapshotter,
    values: HashMap<(String, String), f64>,
}

impl Recorded {
    fn install() -> Recorded {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("installing the recorder");
        Recorded {
            snapshotter,
            values: HashMap::new(),
        }
    }

    /// The current value of `name` with label `primitive` (`""` for the
    /// client-wide metrics); a histogram's value is how many it recorded.
    fn get(&mut self, name: &str, primitive: &str) -> f64 {
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let label = key
                .key()
                .labels()
                .find(|label| label.key() == "primitive")
                .map_or(String::new(), |label| label.value().to_owned());
            let slot = self
                .values
                .entry((key.key().name().to_owned(), label))
                .or_insert(0.0);
            *slot += match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(values) => values.len() as f64,
            };
        }
        self.values
            .get(&(name.to_owned(), primitive.to_owned()))
            .copied()
            .unwrap_or(0.0)
    }

    /// Waits (bounded) until `name`/`primitive` reads `want`.
    fn wait_for(&mut self, name: &str, primitive: &str, want: f64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let value = self.get(name, primitive);
            if value == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name}{{primitive={primitive}}} is {value}, expected {want}"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

fn new_client(backend: &MemoryBackend, watchdog: Duration) -> Client {
    Client::builder()
        .backend(backend.clone())
        .watchdog_timeout(watchdog)
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .unwrap()
}

#[test]
fn the_library_records_what_operators_need() {
    let mut recorded = Recorded::install();
    let backend = MemoryBackend::new();
    let client = new_client(&backend, Duration::from_secs(30));

    // An uncontended acquisition: counted, its wait and hold timed, and
    // held while the guard lives.
    let guard = client.lock("m:plain").lock().unwrap();
    assert_eq!(recorded.get("redisync_acquisitions_total", "lock"), 1.0);
    assert_eq!(recorded.get("redisync_wait_seconds", "lock"), 1.0);
    assert_eq!(recorded.get("redisync_locks_held", "lock"), 1.0);
    guard.unlock().unwrap();
    assert_eq!(recorded.get("redisync_locks_held", "lock"), 0.0);
    assert_eq!(recorded.get("redisync_hold_seconds", "lock"), 1.0);

    // A waiter parks (counted while it waits), then gets the lock when the
    // holder unlocks.
    let held = client.fair_lock("m:contended").lock().unwrap();
    let waiter = {
        let client = client.clone();
        thread::spawn(move || {
            let guard = client
                .fair_lock("m:contended")
                .try_lock_for(Duration::from_secs(10))
                .unwrap()
                .expect("the lock once its holder unlocked");
            drop(guard);
        })
    };
    recorded.wait_for("redisync_waiters_parked", "fair_lock", 1.0);
    drop(held);
    waiter.join().unwrap();
    recorded.wait_for("redisync_waiters_parked", "fair_lock", 0.0);
    assert_eq!(
        recorded.get("redisync_acquisitions_total", "fair_lock"),
        2.0
    );
    assert_eq!(recorded.get("redisync_locks_held", "fair_lock"), 0.0);

    // A bounded wait that runs out is a timeout, not an acquisition.
    let other = Client::builder().backend(backend.clone()).build().unwrap();
    let blocker = other
        .lock("m:timeout")
        .lock_with_lease(Duration::from_secs(30))
        .unwrap();
    let none = client
        .lock("m:timeout")
        .try_lock_for(Duration::from_millis(50))
        .unwrap();
    assert!(none.is_none());
    assert_eq!(recorded.get("redisync_timeouts_total", "lock"), 1.0);
    drop(blocker);

    // An error (the key holds another type) is counted as one.
    backend.set_string("m:string", "not a lock");
    assert!(client.lock("m:string").lock().is_err());
    assert_eq!(recorded.get("redisync_errors_total", "lock"), 1.0);

    // Semaphores and latches count their waits too.
    let slots = client.semaphore("m:slots");
    slots.try_set_permits(1).unwrap();
    drop(slots.acquire(1).unwrap());
    assert_eq!(
        recorded.get("redisync_acquisitions_total", "semaphore"),
        1.0
    );
    let latch = client.count_down_latch("m:latch");
    latch.try_set_count(1).unwrap();
    latch.count_down().unwrap();
    latch.wait_for(Duration::from_secs(1)).unwrap();
    assert_eq!(
        recorded.get("redisync_acquisitions_total", "count_down_latch"),
        1.0
    );

    // The watchdog's renewals, and a lease lost to a force-unlock.
    let short = new_client(&backend, Duration::from_millis(300));
    let renewed = short.lock("m:watched").lock().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while recorded.get("redisync_renewals_total", "") < 2.0 {
        assert!(Instant::now() < deadline, "no renewals");
        thread::sleep(Duration::from_millis(20));
    }
    assert!(client.lock("m:watched").force_unlock().unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while recorded.get("redisync_leases_lost_total", "") < 1.0 {
        assert!(Instant::now() < deadline, "the lost lease was not counted");
        thread::sleep(Duration::from_millis(20));
    }
    assert!(renewed.is_lost());
    drop(renewed);

    // The subscriber reconnects after its connection is killed.
    backend.kill_pubsub_connections();
    let deadline = Instant::now() + Duration::from_secs(10);
    while recorded.get("redisync_subscriber_reconnects_total", "") < 1.0 {
        assert!(Instant::now() < deadline, "no reconnect counted");
        thread::sleep(Duration::from_millis(20));
    }
}
