//! Releases that must land although the call that needed them has returned:
//! an unlock whose round trip failed, and the undoing of an acquire whose
//! outcome is unknown (the request left, no reply came: the script may have
//! run and made this thread a holder that no guard knows of). Semaphore
//! releases, latch count-downs and semaphore undos come here too, keyed by
//! their call's record (each is exact however often it is sent).
//!
//! One background thread per client (started on first use) retries each
//! pending release with a growing pause until it lands or the hold it
//! releases would have expired anyway. Pending releases are keyed by
//! (lock name, holder field): the holder's next acquire of that lock first
//! runs the pending release itself (see [`Cleanup::settle`]), so a release
//! meant for an old hold can never land on a new one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::Result;

/// One try of a pending release: `Ok(true)` when it landed (or found
/// nothing to release), `Ok(false)` to be called again at once (it made
/// progress, e.g. drained one phantom hold), `Err` to retry later.
pub(crate) type Task = Box<dyn FnMut() -> Result<bool> + Send>;

/// The first pause after a failed try; doubled up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// Tries of one task that return `Ok(false)` in a row before it waits: a
/// bound on the phantom holds one pass drains.
const PROGRESS_STEPS: usize = 32;
/// How often a release that landed is sent again while its attempt could
/// still land late (see [`Cleanup::push`]).
const RECHECK_EVERY: Duration = Duration::from_millis(250);

struct Pending {
    /// Oldest first; the front one runs, the next runs once it landed.
    tasks: std::collections::VecDeque<Task>,
    /// After this the hold has expired on its own: the task is dropped.
    give_up_at: Instant,
    next_try: Instant,
    pause: Duration,
    /// Taken out by the worker or a settling caller right now.
    running: bool,
    /// Until then the worker sends the release again after it landed (see
    /// [`Cleanup::push`]).
    recheck_until: Option<Instant>,
    /// What made the release necessary (the failed call's error), for the
    /// error of an acquire that cannot wait for it.
    cause: String,
}

#[derive(Default)]
struct State {
    pending: HashMap<(String, String), Pending>,
    started: bool,
    shutdown: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the worker (new task, shutdown) and settling callers (a task
    /// finished running).
    changed: Condvar,
}

/// A client's pending releases and their worker thread.
#[derive(Clone, Default)]
pub(crate) struct Cleanup {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Cleanup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cleanup")
            .field("pending", &self.shared.state.lock().pending.len())
            .finish()
    }
}

impl Cleanup {
    /// Queues `task` for (name, field), to be retried until it lands or
    /// `give_up_at`. A task already pending for the same key runs first.
    /// Never blocks on the network.
    ///
    /// With `recheck`, the worker keeps sending the release every
    /// [`RECHECK_EVERY`] after it landed, until `give_up_at`: it undoes an
    /// acquire whose request may still be waiting in a frozen server's
    /// socket buffer and land after a first release found nothing. The
    /// holder's next acquire ends that ([`settle`](Self::settle)).
    pub(crate) fn push(
        &self,
        name: &str,
        field: &str,
        task: Task,
        give_up_at: Instant,
        recheck: bool,
        cause: &crate::Error,
    ) {
        let recheck_until = recheck.then_some(give_up_at);
        let cause = cause.to_string();
        let mut state = self.shared.state.lock();
        let key = (name.to_owned(), field.to_owned());
        match state.pending.get_mut(&key) {
            // An older release of the same holder is still pending: it runs
            // first, then this one; the later give-up covers both.
            Some(pending) => {
                pending.give_up_at = pending.give_up_at.max(give_up_at);
                pending.recheck_until = pending.recheck_until.max(recheck_until);
                pending.tasks.push_back(task);
                pending.cause = cause;
            }
            None => {
                state.pending.insert(
                    key,
                    Pending {
                        tasks: std::collections::VecDeque::from([task]),
                        give_up_at,
                        next_try: Instant::now(),
                        pause: FIRST_PAUSE,
                        running: false,
                        recheck_until,
                        cause,
                    },
                );
            }
        }
        if !state.started {
            // A strong reference: what is pending keeps being retried after
            // the client is dropped, until it lands or gives up.
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("redisync-cleanup".into())
                .spawn(move || run(&shared));
            // Without the thread, pending releases still run when their
            // holder next acquires the lock (`settle`), and expire with
            // their lease otherwise.
            state.started = spawned.is_ok();
        }
        self.shared.changed.notify_all();
    }

    /// Whether no release is pending (an uncontended mutex, on every
    /// acquire: [`settle`](Self::settle) runs only when something is).
    pub(crate) fn is_empty(&self) -> bool {
        self.shared.state.lock().pending.is_empty()
    }

    /// Runs the release pending for (name, field), if any, in the calling
    /// thread, before that holder acquires the lock again; waits (up to
    /// `wait`) for the worker if it is running it now.
    ///
    /// # Errors
    /// The release's own error when it could not land now (the acquire
    /// would fail the same way); the task stays pending.
    pub(crate) fn settle(&self, name: &str, field: &str, wait: Duration) -> Result<()> {
        let key = (name.to_owned(), field.to_owned());
        let deadline = Instant::now().checked_add(wait);
        let mut state = self.shared.state.lock();
        loop {
            match state.pending.get_mut(&key) {
                None => return Ok(()),
                Some(pending) if pending.running => {
                    let cause = pending.cause.clone();
                    let timed_out = match deadline {
                        Some(deadline) => self
                            .shared
                            .changed
                            .wait_until(&mut state, deadline)
                            .timed_out(),
                        None => {
                            self.shared.changed.wait(&mut state);
                            false
                        }
                    };
                    if timed_out {
                        return Err(crate::error::pending_release_timed_out(wait, name, &cause));
                    }
                }
                Some(pending) => {
                    let Some(mut task) = pending.tasks.pop_front() else {
                        state.pending.remove(&key);
                        return Ok(());
                    };
                    pending.running = true;
                    drop(state);
                    let outcome = run_to_completion(&mut task);
                    state = self.shared.state.lock();
                    finish(&mut state, &key, task, &outcome, false);
                    self.shared.changed.notify_all();
                    // Landed: settle the next one too, if any.
                    outcome?;
                }
            }
        }
    }

    /// Stops the worker once nothing is pending (client dropped): it keeps
    /// retrying what is pending until each lands or gives up.
    pub(crate) fn shutdown(&self) {
        self.shared.state.lock().shutdown = true;
        self.shared.changed.notify_all();
    }
}

/// Runs `task` until it lands or fails (a bounded number of progress steps).
fn run_to_completion(task: &mut Task) -> Result<bool> {
    for _ in 0..PROGRESS_STEPS {
        if task()? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Puts a task back at the front after a run that did not land (or, run
/// by the worker, landed but is to be sent again: `recheck_until`), or
/// drops it when it landed; drops the whole entry once nothing is left or
/// its holds would have expired anyway.
fn finish(
    state: &mut State,
    key: &(String, String),
    task: Task,
    outcome: &Result<bool>,
    by_worker: bool,
) {
    let Some(pending) = state.pending.get_mut(key) else {
        return;
    };
    pending.running = false;
    let now = Instant::now();
    let landed = matches!(outcome, Ok(true));
    let recheck = landed
        && by_worker
        && pending.tasks.is_empty()
        && pending.recheck_until.is_some_and(|until| now < until);
    if !landed || recheck {
        pending.tasks.push_front(task);
    }
    if recheck {
        pending.next_try = now.checked_add(RECHECK_EVERY).unwrap_or(now);
        return;
    }
    if landed && !by_worker {
        // The holder is about to acquire again: no more rechecks.
        pending.recheck_until = None;
    }
    if pending.tasks.is_empty() || now >= pending.give_up_at {
        if !pending.tasks.is_empty() {
            log::debug!(
                "redisync: gave up a release or undo on {:?}: its hold has run out, or its \
                 resend horizon passed",
                key.0
            );
        }
        state.pending.remove(key);
        return;
    }
    if outcome.is_err() {
        // The last try is at the give-up time, not up to a pause after it:
        // a dropped client's worker (and the pool it holds) ends then.
        pending.next_try = now
            .checked_add(pending.pause)
            .unwrap_or(now)
            .min(pending.give_up_at);
        pending.pause = (pending.pause * 2).min(MAX_PAUSE);
    } else if landed {
        pending.pause = FIRST_PAUSE;
    }
}

/// The worker: run every due task, sleep until the next is due.
fn run(shared: &Shared) {
    loop {
        let mut state = shared.state.lock();
        let now = Instant::now();
        let due = state
            .pending
            .iter_mut()
            .find(|(_, p)| !p.running && p.next_try <= now && !p.tasks.is_empty())
            .and_then(|(key, p)| {
                let task = p.tasks.pop_front()?;
                p.running = true;
                Some((key.clone(), task))
            });
        match due {
            Some((key, mut task)) => {
                drop(state);
                let outcome = run_to_completion(&mut task);
                let mut state = shared.state.lock();
                finish(&mut state, &key, task, &outcome, true);
                shared.changed.notify_all();
            }
            None => {
                if state.pending.is_empty() && state.shutdown {
                    state.started = false;
                    return;
                }
                let next = state
                    .pending
                    .values()
                    .filter(|p| !p.running)
                    .map(|p| p.next_try)
                    .min()
                    .unwrap_or_else(|| now + MAX_PAUSE);
                // Bounded, so a dropped client's worker notices in time.
                let until = next.min(now + MAX_PAUSE);
                shared.changed.wait_until(&mut state, until);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // SeqCst throughout these tests: counters and gates read across
    // threads; the strongest order needs no argument, and costs nothing here.
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counting(fail_first: usize, calls: &Arc<AtomicUsize>) -> Task {
        let calls = Arc::clone(calls);
        Box::new(move || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            if n < fail_first {
                Err(crate::Error::backend("down", true))
            } else {
                Ok(true)
            }
        })
    }

    fn down() -> crate::Error {
        crate::Error::backend("down", true)
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn the_worker_retries_until_the_release_lands() {
        let cleanup = Cleanup::default();
        let calls = Arc::new(AtomicUsize::new(0));
        cleanup.push("lock", "holder", counting(3, &calls), far(), false, &down());
        let start = Instant::now();
        while !cleanup.is_empty() {
            assert!(start.elapsed() < Duration::from_secs(5), "never landed");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn settle_runs_the_pending_release_in_the_caller() {
        let cleanup = Cleanup::default();
        let calls = Arc::new(AtomicUsize::new(0));
        // Fails twice: the worker's first try fails, settle's may too.
        cleanup.push("lock", "holder", counting(1, &calls), far(), false, &down());
        let mut settled = cleanup.settle("lock", "holder", Duration::from_secs(2));
        if settled.is_err() {
            settled = cleanup.settle("lock", "holder", Duration::from_secs(2));
        }
        settled.unwrap();
        assert!(cleanup.is_empty());
        // Nothing pending for another holder: settles at once.
        cleanup.settle("lock", "other", Duration::ZERO).unwrap();
    }

    #[test]
    fn a_task_is_dropped_once_its_hold_would_have_expired() {
        let cleanup = Cleanup::default();
        let calls = Arc::new(AtomicUsize::new(0));
        cleanup.push(
            "lock",
            "holder",
            counting(usize::MAX, &calls),
            Instant::now() + Duration::from_millis(200),
            false,
            &down(),
        );
        let start = Instant::now();
        while !cleanup.is_empty() {
            assert!(start.elapsed() < Duration::from_secs(5), "never gave up");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            calls.load(Ordering::SeqCst) >= 2,
            "retried before giving up"
        );
    }

    #[test]
    fn a_second_release_for_the_same_holder_runs_after_the_first() {
        let cleanup = Cleanup::default();
        let order = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(AtomicUsize::new(0));
        let (o1, g1) = (Arc::clone(&order), Arc::clone(&gate));
        cleanup.push(
            "lock",
            "holder",
            Box::new(move || {
                if g1.load(Ordering::SeqCst) == 0 {
                    return Err(crate::Error::backend("down", true));
                }
                o1.lock().push(1);
                Ok(true)
            }),
            far(),
            false,
            &down(),
        );
        let o2 = Arc::clone(&order);
        cleanup.push(
            "lock",
            "holder",
            Box::new(move || {
                o2.lock().push(2);
                Ok(true)
            }),
            far(),
            false,
            &down(),
        );
        gate.store(1, Ordering::SeqCst);
        let start = Instant::now();
        while !cleanup.is_empty() {
            assert!(start.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(*order.lock(), vec![1, 2]);
    }
}
