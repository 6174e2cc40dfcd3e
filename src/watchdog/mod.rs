//! The lease watchdog: while a lock taken without an explicit lease is held,
//! renew it every `watchdog_timeout / 3`.
//!
//! One watch per held (key, holder) per client, shared by that holder's
//! reentrant holds, and one scheduler thread per client (Redisson's design:
//! one timer, not a thread per lock). Keying watches by holder means a thread
//! that takes a lock another thread of the client lost (lease expired,
//! force-unlocked) while that thread's guard still lives gets a fresh watch,
//! not the lost one.
//!
//! | module | job |
//! |---|---|
//! | `schedule` | the watches, ordered by due time; what an answer means (no thread, no clock) |
//! | `batch` | due renewals to batch scripts, by kind and cluster slot; one outcome per hold |
//! | `lease` | what a guard knows of its lease |
//! | here | the scheduler thread, the clock, the events |
//!
//! Renewals go in batches of up to `watchdog_batch_size` holds per script;
//! renewals falling due within a quarter interval of each other share one.
//!
//! The hot path wakes no thread. A new watch is first due one interval after
//! it is registered, and the scheduler never sleeps longer than one interval,
//! so it is always awake in time without being told. The last release removes
//! the watch under the mutex: the renewal is cancelled at once, and the
//! scheduler finds nothing to renew. A renewal answered after its watch was
//! removed is ignored.
//!
//! Each renewal names the acquire attempt of one live guard of its hold
//! (its record, `{name}:redisync_attempt:<id>`; the watch keeps the ids of
//! its live guards' attempts, see `schedule::Attempts`), and the script
//! renews only while that record says taken: a renewal sent before the
//! release, resent or held up on the way, renews nothing once the hold is
//! released, not the holder's next hold (see `lua/lock_renew.lua`).
//! A hold with no record (handed over outright by another client's
//! release) is renewed on the holder check alone: its script renews
//! whatever hold the holder has when it runs, and landing after the release
//! and after the same holder took the lock again with a fixed lease, it
//! would stretch that lease to the watchdog's. So the last release of a
//! hold whose renewal is in flight waits for its answer ([`Watchdog::stop`];
//! no wait, and no round trip, when none is: the common case). The wait is
//! bounded: each batch's round trips run under a deadline of one response
//! timeout from its send, and a renewal that was not answered in time is
//! refused by the server once its window has passed (every writing script
//! carries one, see `lua/window_prelude.lua`), which the wait covers too.
//!
//! Each hold's [`Lease`] records, by the local clock, when the lease ends:
//! the send time of the acquisition or of the last successful renewal plus
//! the lease (the server's TTL starts after the request left). A renewal
//! that finds the lock no longer ours marks it lost; a renewal that fails is
//! retried every 500 ms, and the lease counts as lost once its end has
//! passed, even while a retry is still blocked on the network. Guards read it
//! (`is_lost()`), and the event handler hears of every loss and failure.

mod batch;
mod lease;
mod restart;
#[cfg(test)]
mod restart_model;
mod schedule;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

pub(crate) use self::lease::Lease;
use self::restart::Restarts;
use self::schedule::{Answer, Hold, Outcome, Schedule};
use crate::backend::LockBackend;
use crate::event::{EventHandler, LockLostEvent, RenewFailedEvent};
use crate::flavor::Renewal;
use crate::lock::AttemptId;

/// The most renewals one pass of the scheduler takes out of the queue
/// before it records their answers (a bound on how stale its view gets).
const PASS_BATCHES: usize = 16;

/// Where the watchdog reads the time: the system's monotonic clock, or a
/// test's hand-moved one.
pub(crate) trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// [`Instant::now`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// How a client's watchdog renews.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// The lease each renewal sets (and each watchdog acquisition).
    pub(crate) timeout: Duration,
    /// The same in ms, as the scripts take it (at least 3: the config checks).
    pub(crate) timeout_ms: i64,
    /// The most holds one renewal script renews.
    pub(crate) batch_size: usize,
}

struct State {
    schedule: Schedule,
    restarts: Restarts,
    /// The batch on its way (its number, and when it was sent by the
    /// system clock), if any: one at a time, sent by the scheduler.
    sending: Option<(u64, Instant)>,
    /// Batches sent so far (the next one's number).
    batches: u64,
    /// The last batch that failed and until when a copy of it may still
    /// land (the end of its window by the local clock).
    late: Option<(u64, Instant)>,
    /// When the sleeping scheduler will wake on its own; `None` while it is
    /// renewing (it recomputes its next wake afterwards) or not started.
    sleeping_until: Option<Instant>,
    started: bool,
    shutdown: bool,
}

struct Shared {
    backend: Arc<dyn LockBackend>,
    settings: Settings,
    events: Arc<dyn EventHandler>,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    wake: Condvar,
    /// Tells the releases waiting for an in-flight renewal that its batch
    /// was answered.
    answered: Condvar,
}

/// A client's watchdog: its watches and its scheduler thread.
#[derive(Clone)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchdog")
            .field("settings", &self.shared.settings)
            .field("watches", &self.shared.state.lock().schedule.len())
            .finish()
    }
}

impl Watchdog {
    pub(crate) fn new(
        backend: Arc<dyn LockBackend>,
        settings: Settings,
        events: Arc<dyn EventHandler>,
    ) -> Self {
        Watchdog::with_clock(backend, settings, events, Arc::new(SystemClock))
    }

    /// A watchdog reading the time from `clock`.
    pub(crate) fn with_clock(
        backend: Arc<dyn LockBackend>,
        settings: Settings,
        events: Arc<dyn EventHandler>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Watchdog {
            shared: Arc::new(Shared {
                backend,
                settings,
                events,
                clock,
                state: Mutex::new(State {
                    schedule: Schedule::new(settings.timeout),
                    restarts: Restarts::default(),
                    sending: None,
                    batches: 0,
                    late: None,
                    sleeping_until: None,
                    started: false,
                    shutdown: false,
                }),
                wake: Condvar::new(),
                answered: Condvar::new(),
            }),
        }
    }

    /// Registers one watchdog hold, acquired by a request sent at `sent`.
    /// Returns the hold's lease.
    ///
    /// # Errors
    /// Only if the scheduler thread could not be started; the hold is then
    /// not registered.
    #[cfg(test)]
    pub(crate) fn start(&self, renewal: &Arc<Renewal>, sent: Instant) -> crate::Result<Arc<Lease>> {
        self.start_within(renewal, sent, None, None)
    }

    /// As [`start`](Self::start), for a hold whose TTL in the store is `ttl`
    /// rather than the watchdog timeout (see `Schedule::start_within`),
    /// taken by `attempt` (its record: renewals name it, see
    /// `lua/lock_renew.lua`; `None`: a hold with no record).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub(crate) fn start_within(
        &self,
        renewal: &Arc<Renewal>,
        sent: Instant,
        ttl: Option<Duration>,
        attempt: Option<AttemptId>,
    ) -> crate::Result<Arc<Lease>> {
        let mut state = self.shared.state.lock();
        self.start_thread(&mut state)?;
        let (lease, due) = state.schedule.start_within(renewal, sent, ttl, attempt);
        self.wake_for(&state, due);
        Ok(lease)
    }

    /// Starts the scheduler thread if it is not running yet.
    fn start_thread(&self, state: &mut State) -> crate::Result<()> {
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
        Ok(())
    }

    /// Wakes the scheduler if it sleeps past `due` (it never does once it
    /// has slept a full interval).
    fn wake_for(&self, state: &State, due: Option<Instant>) {
        if let (Some(sleeping), Some(due)) = (state.sleeping_until, due)
            && sleeping > due
        {
            self.shared.wake.notify_one();
        }
    }

    /// Restarts the fixed lease `lease` of `renewal`'s hold, just passed to
    /// another thread of this client, to run `lease_ms` from now: if the
    /// hold outlives a third of the rest of its lease, one call (that never
    /// shortens the TTL, naming `attempt`'s record) raises the store's TTL,
    /// and `lease` with it (see `restart.rs`). Replaces the hold's earlier
    /// restart, if any.
    ///
    /// # Errors
    /// As [`start`](Self::start); or the new lease's end is too far away
    /// to represent (the caller then does not pass the hold).
    pub(crate) fn restart_later(
        &self,
        renewal: &Arc<Renewal>,
        attempt: Option<AttemptId>,
        lease: &Arc<Lease>,
        lease_ms: i64,
    ) -> crate::Result<()> {
        let now = self.shared.clock.now();
        let Some(until) = now.checked_add(restart::length(lease_ms)) else {
            // Its end cannot be told: the hold goes through the store.
            return Err(crate::Error::backend(
                format!(
                    "lock {:?}: a lease of {lease_ms} ms ends too far away to restart for \
                     another thread (the hold is released through the store instead)",
                    renewal.name()
                ),
                false,
            ));
        };
        let mut state = self.shared.state.lock();
        self.start_thread(&mut state)?;
        let hold = Hold(Arc::clone(renewal));
        let due = state.restarts.add(hold, attempt, lease, until, now);
        self.wake_for(&state, due);
        Ok(())
    }

    /// Cancels the pending restart of `renewal`'s hold (released, or its
    /// pass undone), if any. Cheap: no call to the store, no wait.
    pub(crate) fn cancel_restart(&self, renewal: &Arc<Renewal>) {
        let hold = Hold(Arc::clone(renewal));
        self.shared.state.lock().restarts.cancel(&hold);
    }

    /// Forgets one watchdog hold, taken by `attempt`; the last one cancels
    /// the renewal at once (another one's attempt takes its place in the
    /// renewals: see `Schedule::stop`).
    ///
    /// If that renewal was sent already and is not answered yet, waits until
    /// it is (or can no longer land: see the module doc), so that it cannot
    /// renew the holder's next hold of the lock: at most one response
    /// timeout from its send plus 125 ms (the watchdog timeout when the
    /// store has no response timeout). No wait otherwise. Returns when it
    /// began to wait, if it did.
    pub(crate) fn stop(
        &self,
        renewal: &Arc<Renewal>,
        attempt: Option<AttemptId>,
    ) -> Option<Instant> {
        let mut state = self.shared.state.lock();
        if !state.schedule.stop(renewal, attempt) {
            return None;
        }
        let (batch, sent) = state.sending?;
        let began = Instant::now();
        let until = sent.checked_add(self.shared.lands_within())?;
        while state.sending.is_some_and(|(number, _)| number == batch) {
            if self
                .shared
                .answered
                .wait_until(&mut state, until)
                .timed_out()
            {
                return Some(began);
            }
        }
        // Failed: a copy held up on the way may still land in its window.
        if let Some((_, late)) = state.late.filter(|(number, _)| *number == batch) {
            let late = late.min(until);
            while Instant::now() < late {
                if self
                    .shared
                    .answered
                    .wait_until(&mut state, late)
                    .timed_out()
                {
                    break;
                }
            }
        }
        Some(began)
    }

    /// Cancels every renewal and stops the scheduler (client shutdown).
    pub(crate) fn shutdown(&self) {
        let mut state = self.shared.state.lock();
        state.shutdown = true;
        state.schedule.clear();
        state.restarts.clear();
        self.shared.wake.notify_all();
    }

    /// One pass of the scheduler at the clock's time: renews what is due (in
    /// batches), records the answers and reports losses and failures.
    /// Returns how many holds it renewed or tried to.
    #[cfg(test)]
    fn renew_due(&self) -> usize {
        renew_due(&self.shared)
    }

    /// One pass of the scheduler's restarts at the clock's time.
    #[cfg(test)]
    fn restart_due(&self) {
        restart_due(&self.shared);
    }
}

/// The scheduler thread: sleep until the earliest due renewal (at most one
/// interval), renew what is due, repeat until shutdown.
fn run(shared: &Shared) {
    loop {
        {
            let mut state = shared.state.lock();
            loop {
                if state.shutdown {
                    return;
                }
                let now = shared.clock.now();
                let cap = now.checked_add(state.schedule.interval());
                let next_due = match (state.schedule.next_due(), state.restarts.next_due()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                let until = match (next_due, cap) {
                    (Some(due), _) if due <= now => break,
                    (Some(due), Some(cap)) => due.min(cap),
                    (due, cap) => due.or(cap).unwrap_or(now),
                };
                state.sleeping_until = Some(until);
                shared.wake.wait_until(&mut state, until);
                state.sleeping_until = None;
            }
        }
        renew_due(shared);
        restart_due(shared);
    }
}

/// Sends the restarts that are due, one at a time (they are rare: a hold
/// passed between threads that outlives most of its old lease).
fn restart_due(shared: &Shared) {
    let backend = shared.backend.as_ref();
    loop {
        let Some((hold, restart)) = shared.state.lock().restarts.take_due(shared.clock.now())
        else {
            return;
        };
        let renewal = &hold.0;
        let sent = shared.clock.now();
        let lease_ms = restart::lease_ms_until(restart.until, sent);
        let record = restart.attempt.map(|id| id.key(renewal.name()));
        let deadline = backend
            .response_timeout()
            .and_then(|timeout| Instant::now().checked_add(timeout));
        let result = crate::deadline::within(deadline, || {
            renewal
                .keys
                .raise(backend, &renewal.holder, lease_ms, record.as_deref())
        });
        let outcome = {
            let mut state = shared.state.lock();
            if !state.restarts.answered(&hold, restart.id) {
                // Released or passed on meanwhile: not its holder's news.
                continue;
            }
            match result {
                Ok(true) => {
                    let length = restart::length(lease_ms);
                    restart
                        .lease
                        .raised_from(Some(restart.expected), sent, length);
                    (Outcome::Renewed, None)
                }
                Ok(false) => {
                    restart.lease.mark_lost();
                    (Outcome::NotHeld, None)
                }
                Err(error) => {
                    let now = shared.clock.now();
                    let at = now.checked_add(schedule::RETRY);
                    let retried = at.and_then(|at| state.restarts.retry(hold.clone(), restart, at));
                    if retried.is_some() {
                        (Outcome::Retry, Some(error))
                    } else {
                        // Its lease runs out before a retry could land.
                        (Outcome::RanOut, Some(error))
                    }
                }
            }
        };
        if outcome.0 != Outcome::Gone {
            report(shared, renewal.name(), outcome.0, outcome.1);
        }
    }
}

impl Shared {
    /// How long after its send a renewal may still land: its round trips'
    /// deadline (one response timeout), the slack every bound has
    /// ([`ROUND_TRIP_FLOOR`](crate::deadline::ROUND_TRIP_FLOOR)) and its
    /// window's margin; without a response timeout, the watchdog timeout.
    fn lands_within(&self) -> Duration {
        self.backend
            .response_timeout()
            .map_or(self.settings.timeout, |timeout| {
                timeout + crate::deadline::ROUND_TRIP_FLOOR + crate::backend::WINDOW_MARGIN
            })
    }
}

fn renew_due(shared: &Shared) -> usize {
    let settings = shared.settings;
    let due = {
        let mut state = shared.state.lock();
        let now = shared.clock.now();
        state
            .schedule
            .take_due(now, settings.batch_size.saturating_mul(PASS_BATCHES))
    };
    if due.is_empty() {
        return 0;
    }
    let backend = shared.backend.as_ref();
    let mut count = 0;
    for (kind, batch) in batch::plan(backend, due, settings.batch_size) {
        let (batch, sent, number, started) = {
            let mut state = shared.state.lock();
            // Holds released since they were taken out of the queue are
            // not sent; the rest are in flight from now.
            let batch = state.schedule.sending(batch);
            if batch.is_empty() {
                continue;
            }
            let number = state.batches;
            state.batches = number.wrapping_add(1);
            let started = Instant::now();
            state.sending = Some((number, started));
            (batch, shared.clock.now(), number, started)
        };
        // Round trips happen outside the mutex, so holders never wait on
        // them; and within one response timeout (checkout included), so a
        // release waiting for this answer waits no longer (see `stop`).
        let deadline = backend
            .response_timeout()
            .and_then(|timeout| started.checked_add(timeout));
        let answers = crate::deadline::within(deadline, || {
            batch::send(backend, kind, batch, settings.timeout_ms, sent)
        });
        count += answers.len();
        record(shared, answers, number);
    }
    count
}

/// Records one batch's answers, tells the releases waiting for them, and
/// reports losses and failures.
fn record(shared: &Shared, answers: Vec<batch::Renewed>, number: u64) {
    let mut reports = Vec::new();
    {
        let mut state = shared.state.lock();
        state.sending = None;
        // Unanswered (a connection error): a copy may still be on its way.
        if answers.iter().any(|renewed| {
            renewed
                .result
                .as_ref()
                .is_err_and(crate::Error::is_connection_error)
        }) {
            let late = Instant::now().checked_add(crate::backend::WINDOW_MARGIN);
            state.late = late.map(|late| (number, late));
        }
        shared.answered.notify_all();
        let now = shared.clock.now();
        for renewed in answers {
            let answer = match renewed.result {
                Ok(true) => Answer::Renewed,
                Ok(false) => Answer::NotHeld,
                Err(_) => Answer::Failed,
            };
            let outcome = state
                .schedule
                .record(&renewed.due, renewed.sent, answer, now);
            if outcome != Outcome::Gone {
                reports.push((renewed.due.hold.0, outcome, renewed.result.err()));
            }
        }
    }
    // Events are reported outside the mutex: a handler may take its time.
    for (renewal, outcome, error) in reports {
        report(shared, renewal.name(), outcome, error);
    }
}

fn report(shared: &Shared, name: &str, outcome: Outcome, error: Option<crate::Error>) {
    let name = name.to_owned();
    match (outcome, error) {
        (Outcome::Renewed, _) => crate::telemetry::renewed(),
        (Outcome::NotHeld, _) => {
            crate::telemetry::lease_lost();
            let reason = "the lock is no longer held by this holder (its lease expired or it was force-unlocked)";
            shared.events.on_lock_lost(&LockLostEvent {
                name,
                reason: reason.to_owned(),
            });
        }
        (Outcome::RanOut, error) => {
            crate::telemetry::lease_lost();
            let cause = error.map(|e| e.to_string()).unwrap_or_default();
            shared.events.on_lock_lost(&LockLostEvent {
                name,
                reason: format!("could not renew before the lease ran out: {cause}"),
            });
        }
        (Outcome::Retry, Some(error)) => {
            crate::telemetry::renewal_failed();
            shared
                .events
                .on_renew_failed(&RenewFailedEvent { name, error });
        }
        (Outcome::Retry, None) | (Outcome::Gone | Outcome::Moved, _) => {}
    }
}
