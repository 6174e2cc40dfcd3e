//! The lease watchdog: while a lock taken without an explicit lease is held,
//! renew it every `watchdog_timeout / 3`.
//!
//! One renewal thread per held key per client, shared by that key's reentrant
//! holds. Watches are keyed by (key, holder): a thread that takes a lock
//! another thread of the client lost (lease expired, force-unlocked) while
//! that thread's guard still lives gets a fresh watch, not the lost one. When the last hold is released the thread is cancelled at once (its
//! crossbeam channel disconnects; it never sleeps out the interval). Finished
//! threads wait a short while for the next key before they exit, so a lock
//! taken and released in a loop does not spawn a thread per acquisition.
//!
//! A renewal that finds the lock no longer ours marks it lost. A renewal that
//! fails is retried every [`RETRY`] until the lease would have run out; then
//! the lock is marked lost too. Guards read the flag (`is_lost()`), and the
//! event handler hears about both.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use parking_lot::Mutex;

use crate::backend::LockBackend;
use crate::event::{EventHandler, LockLostEvent, RenewFailedEvent};

/// How often a failed renewal is retried (capped by the renewal interval).
const RETRY: Duration = Duration::from_millis(500);
/// How long a finished renewal thread waits for another key before exiting.
const IDLE_LINGER: Duration = Duration::from_secs(5);

/// A (key, holder) being renewed: its hold count and the cancel handle of
/// its thread.
struct KeyWatch {
    /// Number of watchdog holds (reentrant acquisitions) still alive.
    holds: u32,
    lost: Arc<AtomicBool>,
    /// Dropping it cancels the renewal thread at once.
    _cancel: Sender<()>,
}

struct Job {
    name: String,
    holder: String,
    cancel: Receiver<()>,
    lost: Arc<AtomicBool>,
}

struct Shared {
    backend: Arc<dyn LockBackend>,
    timeout: Duration,
    timeout_ms: i64,
    events: Arc<dyn EventHandler>,
    keys: Mutex<HashMap<(String, String), KeyWatch>>,
    /// Rendezvous channel: a send succeeds only if an idle thread waits.
    idle_tx: Sender<Job>,
    idle_rx: Receiver<Job>,
}

/// A client's watchdog registry.
#[derive(Clone)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchdog")
            .field("timeout", &self.shared.timeout)
            .field("keys", &self.shared.keys.lock().len())
            .finish()
    }
}

impl Watchdog {
    /// `timeout_ms` must be positive (validated by the config).
    pub(crate) fn new(
        backend: Arc<dyn LockBackend>,
        timeout: Duration,
        timeout_ms: i64,
        events: Arc<dyn EventHandler>,
    ) -> Self {
        let (idle_tx, idle_rx) = crossbeam_channel::bounded(0);
        Watchdog {
            shared: Arc::new(Shared {
                backend,
                timeout,
                timeout_ms,
                events,
                keys: Mutex::new(HashMap::new()),
                idle_tx,
                idle_rx,
            }),
        }
    }

    /// Registers one watchdog hold of `holder` on `name`, starting the key's
    /// renewal thread if it is the first. Returns the key's lost flag.
    ///
    /// # Errors
    /// Only if no thread could be started; the hold is then not registered.
    pub(crate) fn start(&self, name: &str, holder: &str) -> crate::Result<Arc<AtomicBool>> {
        let key = (name.to_owned(), holder.to_owned());
        let mut keys = self.shared.keys.lock();
        if let Some(watch) = keys.get_mut(&key) {
            watch.holds = watch.holds.saturating_add(1);
            return Ok(Arc::clone(&watch.lost));
        }
        let (cancel_tx, cancel_rx) = crossbeam_channel::bounded(0);
        let lost = Arc::new(AtomicBool::new(false));
        let job = Job {
            name: name.to_owned(),
            holder: holder.to_owned(),
            cancel: cancel_rx,
            lost: Arc::clone(&lost),
        };
        let job = match self.shared.idle_tx.try_send(job) {
            Ok(()) => None,
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => Some(job),
        };
        if let Some(job) = job {
            let weak = Arc::downgrade(&self.shared);
            let idle = self.shared.idle_rx.clone();
            std::thread::Builder::new()
                .name("redisync-watchdog".into())
                .spawn(move || worker(weak, idle, job))
                .map_err(|err| crate::Error::Backend {
                    context: "cannot start a watchdog thread".into(),
                    source: Some(Box::new(err)),
                    connection: false,
                })?;
        }
        keys.insert(
            key,
            KeyWatch {
                holds: 1,
                lost: Arc::clone(&lost),
                _cancel: cancel_tx,
            },
        );
        Ok(lost)
    }

    /// Forgets one watchdog hold of `holder` on `name`; cancels the key's
    /// renewal when no hold is left.
    pub(crate) fn stop(&self, name: &str, holder: &str) {
        let key = (name.to_owned(), holder.to_owned());
        let removed = {
            let mut keys = self.shared.keys.lock();
            let Some(watch) = keys.get_mut(&key) else {
                return;
            };
            watch.holds = watch.holds.saturating_sub(1);
            if watch.holds == 0 {
                keys.remove(&key)
            } else {
                None
            }
        };
        // Dropped outside the mutex: disconnecting wakes the thread.
        drop(removed);
    }

    /// Cancels every renewal (client shutdown).
    pub(crate) fn shutdown(&self) {
        let all: Vec<KeyWatch> = self.shared.keys.lock().drain().map(|(_, w)| w).collect();
        drop(all);
    }
}

/// A renewal thread: renews one key until cancelled, then idles for the next.
fn worker(weak: Weak<Shared>, idle: Receiver<Job>, first: Job) {
    let mut job = first;
    loop {
        renew_until_cancelled(&weak, &job);
        drop(job);
        match idle.recv_timeout(IDLE_LINGER) {
            Ok(next) => job = next,
            Err(_) => return,
        }
    }
}

fn renew_until_cancelled(weak: &Weak<Shared>, job: &Job) {
    let Some(shared) = weak.upgrade() else { return };
    let interval = shared.timeout / 3;
    let retry = RETRY.min(interval);
    let mut last_renewed = Instant::now();
    let mut wait = interval;
    drop(shared);
    loop {
        match job.cancel.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            // Cancelled (sender dropped) or told to stop.
            _ => return,
        }
        let Some(shared) = weak.upgrade() else { return };
        match shared
            .backend
            .lock_renew(&job.name, &job.holder, shared.timeout_ms)
        {
            Ok(true) => {
                last_renewed = Instant::now();
                wait = interval;
            }
            Ok(false) => {
                mark_lost(
                    &shared,
                    job,
                    "the lock is no longer held by this client (its lease expired or it was force-unlocked)",
                );
                return;
            }
            Err(error) => {
                if last_renewed.elapsed() >= shared.timeout {
                    mark_lost(
                        &shared,
                        job,
                        &format!("could not renew before the lease ran out: {error}"),
                    );
                    return;
                }
                shared.events.on_renew_failed(&RenewFailedEvent {
                    name: job.name.clone(),
                    error,
                });
                wait = retry;
            }
        }
    }
}

fn mark_lost(shared: &Shared, job: &Job, reason: &str) {
    job.lost.store(true, Ordering::SeqCst);
    shared.events.on_lock_lost(&LockLostEvent {
        name: job.name.clone(),
        reason: reason.to_owned(),
    });
}
