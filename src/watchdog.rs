//! The lease watchdog: while a lock taken without an explicit lease is held,
//! renew it every `watchdog_timeout / 3`.
//!
//! One watch per held (key, holder) per client, shared by that holder's
//! reentrant holds, and one scheduler thread per client that renews every
//! watch when it falls due (Redisson's design: one timer, not a thread per
//! lock). Keying watches by holder means a thread that takes a lock another
//! thread of the client lost (lease expired, force-unlocked) while that
//! thread's guard still lives gets a fresh watch, not the lost one.
//!
//! The hot path wakes no thread. A new watch is first due one interval after
//! it is registered, and the scheduler never sleeps longer than one interval,
//! so it is always awake in time without being told. The last release removes
//! the watch under the mutex: the renewal is cancelled at once, and the
//! scheduler finds nothing to renew. A renewal answered after its watch was
//! removed is ignored (and harmless: the script only renews a holder that
//! still holds the lock).
//!
//! Each hold's [`Lease`] records, by the local clock, when the lease ends:
//! the send time of the acquisition or of the last successful renewal plus
//! the lease (the server's TTL starts after the request left). A renewal
//! that finds the lock no longer ours marks it lost; a renewal that fails is
//! retried every [`RETRY`], and the lease counts as lost once its end has
//! passed, even while a retry is still blocked on the network. Guards read it
//! (`is_lost()`), and the event handler hears of every loss and failure.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::backend::LockBackend;
use crate::event::{EventHandler, LockLostEvent, RenewFailedEvent};
use crate::flavor::Renewal;

/// How often a failed renewal is retried (capped by the renewal interval).
const RETRY: Duration = Duration::from_millis(500);

/// What a guard knows of its hold's lease, by the local clock.
#[derive(Debug)]
pub(crate) struct Lease {
    lost: AtomicBool,
    /// When the lease ends if not renewed; `None` = unknown (too far away).
    ends: Mutex<Option<Instant>>,
}

impl Lease {
    /// A lease that ends `length` after `sent` (when its request was sent).
    pub(crate) fn new(sent: Instant, length: Duration) -> Arc<Lease> {
        Arc::new(Lease {
            lost: AtomicBool::new(false),
            ends: Mutex::new(sent.checked_add(length)),
        })
    }

    /// True once the lock was found gone or the lease's end has passed.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst) || self.ends.lock().is_some_and(|e| Instant::now() >= e)
    }

    /// True when the hold is not known lost and its lease still has more
    /// than `margin` to run at `at` (a lease too long to represent always
    /// has).
    pub(crate) fn holds_beyond(&self, at: Instant, margin: Duration) -> bool {
        if self.lost.load(Ordering::SeqCst) {
            return false;
        }
        match *self.ends.lock() {
            None => true,
            Some(end) => at.checked_add(margin).is_some_and(|t| t < end),
        }
    }

    fn mark_lost(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }

    fn renewed(&self, sent: Instant, length: Duration) {
        *self.ends.lock() = sent.checked_add(length);
    }
}

/// One (key, holder) being renewed.
struct Watch {
    /// Distinguishes a watch from a later one for the same (key, holder).
    id: u64,
    /// Number of watchdog holds (reentrant acquisitions) still alive.
    holds: u32,
    lease: Arc<Lease>,
    /// How to renew it (which script, which keys).
    renewal: Renewal,
    /// When the next renewal is due; `None` once lost (never renewed again).
    due: Option<Instant>,
}

#[derive(Default)]
struct State {
    watches: HashMap<(String, String), Watch>,
    next_id: u64,
    /// When the sleeping scheduler will wake on its own; `None` while it is
    /// renewing (it recomputes its next wake afterwards) or not started.
    sleeping_until: Option<Instant>,
    started: bool,
    shutdown: bool,
}

struct Shared {
    backend: Arc<dyn LockBackend>,
    timeout: Duration,
    timeout_ms: i64,
    interval: Duration,
    events: Arc<dyn EventHandler>,
    state: Mutex<State>,
    wake: Condvar,
}

/// A client's watchdog: its watches and its scheduler thread.
#[derive(Clone)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchdog")
            .field("timeout", &self.shared.timeout)
            .field("watches", &self.shared.state.lock().watches.len())
            .finish()
    }
}

impl Watchdog {
    /// `timeout_ms` must be at least 3 (validated by the config).
    pub(crate) fn new(
        backend: Arc<dyn LockBackend>,
        timeout: Duration,
        timeout_ms: i64,
        events: Arc<dyn EventHandler>,
    ) -> Self {
        Watchdog {
            shared: Arc::new(Shared {
                backend,
                timeout,
                timeout_ms,
                interval: timeout / 3,
                events,
                state: Mutex::new(State::default()),
                wake: Condvar::new(),
            }),
        }
    }

    /// Registers one watchdog hold, acquired by a request sent at `sent`.
    /// Returns the hold's lease.
    ///
    /// # Errors
    /// Only if the scheduler thread could not be started; the hold is then
    /// not registered.
    pub(crate) fn start(&self, renewal: &Renewal, sent: Instant) -> crate::Result<Arc<Lease>> {
        let mut state = self.shared.state.lock();
        if !state.started {
            let shared = Arc::clone(&self.shared);
            std::thread::Builder::new()
                .name("redisync-watchdog".into())
                .spawn(move || run(&shared))
                .map_err(|err| {
                    crate::Error::backend_caused_by("cannot start the watchdog thread", err, false)
                })?;
            state.started = true;
        }
        let key = watch_key(renewal);
        let mut holds = 1;
        if let Some(watch) = state.watches.get_mut(&key) {
            if !watch.lease.is_lost() {
                // A reentrant hold: the acquisition reset the TTL too.
                watch.holds = watch.holds.saturating_add(1);
                watch.lease.renewed(sent, self.shared.timeout);
                return Ok(Arc::clone(&watch.lease));
            }
            // The thread lost the lock and took it again while an old guard
            // lives: a fresh watch, keeping the old guards' holds counted.
            holds = watch.holds.saturating_add(1);
        }
        let due = sent.checked_add(self.shared.interval);
        // Only if the scheduler sleeps past this watch's first renewal (it
        // never does once it has slept a full interval) must it be woken.
        if let (Some(sleeping), Some(due)) = (state.sleeping_until, due)
            && sleeping > due
        {
            self.shared.wake.notify_one();
        }
        let lease = Lease::new(sent, self.shared.timeout);
        let id = state.next_id;
        state.next_id = state.next_id.wrapping_add(1);
        state.watches.insert(
            key,
            Watch {
                id,
                holds,
                lease: Arc::clone(&lease),
                renewal: renewal.clone(),
                due,
            },
        );
        Ok(lease)
    }

    /// Forgets one watchdog hold; the last one cancels the renewal at once.
    pub(crate) fn stop(&self, renewal: &Renewal) {
        let key = watch_key(renewal);
        let mut state = self.shared.state.lock();
        if let Some(watch) = state.watches.get_mut(&key) {
            watch.holds = watch.holds.saturating_sub(1);
            if watch.holds == 0 {
                state.watches.remove(&key);
            }
        }
    }

    /// Cancels every renewal and stops the scheduler (client shutdown).
    pub(crate) fn shutdown(&self) {
        let mut state = self.shared.state.lock();
        state.shutdown = true;
        state.watches.clear();
        self.shared.wake.notify_all();
    }
}

/// The scheduler thread: sleep until the earliest due renewal (at most one
/// interval), renew what is due, repeat until shutdown.
fn run(shared: &Shared) {
    loop {
        let due_now = {
            let mut state = shared.state.lock();
            loop {
                if state.shutdown {
                    return;
                }
                let now = Instant::now();
                let due_now: Vec<_> = state
                    .watches
                    .iter()
                    .filter(|(_, w)| w.due.is_some_and(|d| d <= now))
                    .map(|(key, w)| (key.clone(), w.id, w.renewal.clone()))
                    .collect();
                if !due_now.is_empty() {
                    state.sleeping_until = None;
                    break due_now;
                }
                let earliest = state.watches.values().filter_map(|w| w.due).min();
                let cap = now.checked_add(shared.interval);
                let until = match (earliest, cap) {
                    (Some(e), Some(c)) => e.min(c),
                    (e, c) => e.or(c).unwrap_or(now),
                };
                state.sleeping_until = Some(until);
                shared.wake.wait_until(&mut state, until);
                state.sleeping_until = None;
            }
        };
        // Round trips happen outside the mutex, so holders never wait on them.
        for (key, id, renewal) in due_now {
            let sent = Instant::now();
            let result = renewal.renew(shared.backend.as_ref(), shared.timeout_ms);
            record(shared, key, id, sent, result);
        }
    }
}

/// Applies one renewal's outcome to its watch, if the watch still exists,
/// and reports losses and failures (outside the mutex).
fn record(
    shared: &Shared,
    key: (String, String),
    id: u64,
    sent: Instant,
    result: crate::Result<bool>,
) {
    let lost_reason = {
        let mut state = shared.state.lock();
        let Some(watch) = state.watches.get_mut(&key).filter(|w| w.id == id) else {
            return; // released meanwhile: the outcome does not matter
        };
        match &result {
            Ok(true) => {
                crate::telemetry::renewed();
                watch.lease.renewed(sent, shared.timeout);
                watch.due = sent.checked_add(shared.interval);
                None
            }
            Ok(false) => Some("the lock is no longer held by this holder (its lease expired or it was force-unlocked)".to_owned()),
            Err(err) if watch.lease.is_lost() => Some(format!("could not renew before the lease ran out: {err}")),
            Err(_) => {
                watch.due = Instant::now().checked_add(RETRY.min(shared.interval));
                None
            }
        }
        .inspect(|_| {
            watch.due = None;
            watch.lease.mark_lost();
        })
    };
    let (name, _) = key;
    match (lost_reason, result) {
        (Some(reason), _) => {
            crate::telemetry::lease_lost();
            shared.events.on_lock_lost(&LockLostEvent { name, reason });
        }
        (None, Err(error)) => {
            crate::telemetry::renewal_failed();
            shared
                .events
                .on_renew_failed(&RenewFailedEvent { name, error });
        }
        (None, Ok(_)) => {}
    }
}

/// Watches are per (lock name, holder field): the read and write halves of
/// one thread on one read-write lock are separate holds.
fn watch_key(renewal: &Renewal) -> (String, String) {
    (renewal.keys.name.clone(), renewal.holder.field.clone())
}
