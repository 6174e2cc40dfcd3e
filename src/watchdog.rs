//! The lease watchdog: while a lock taken without an explicit lease is held,
//! renew it every `watchdog_timeout / 3`.
//!
//! One renewal thread per held key per client, shared by that key's reentrant
//! holds. When the last hold is released the thread is cancelled at once (its
//! crossbeam channel disconnects; it never sleeps out the interval). Finished
//! threads wait a short while for the next key before they exit, so a lock
//! taken and released in a loop does not spawn a thread per acquisition.
//!
//! A renewal that finds the lock no longer ours marks it lost. A renewal that
//! fails is retried every [`RETRY`] until the lease would have run out; then
//! the lock is marked lost too. Guards read the flag (`is_lost()`), and the
//! event handler hears about both.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// A key being renewed: its holders and the cancel handle of its thread.
struct KeyWatch {
    id: u64,
    /// Holder id -> number of watchdog holds.
    holders: Vec<(String, u32)>,
    lost: Arc<AtomicBool>,
    /// Dropping it cancels the renewal thread at once.
    _cancel: Sender<()>,
}

struct Job {
    id: u64,
    name: String,
    cancel: Receiver<()>,
    lost: Arc<AtomicBool>,
}

struct Shared {
    backend: Arc<dyn LockBackend>,
    timeout: Duration,
    timeout_ms: i64,
    events: Arc<dyn EventHandler>,
    keys: Mutex<HashMap<String, KeyWatch>>,
    next_id: AtomicU64,
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
                next_id: AtomicU64::new(1),
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
        let mut keys = self.shared.keys.lock();
        if let Some(watch) = keys.get_mut(name) {
            match watch.holders.iter_mut().find(|(h, _)| h == holder) {
                Some((_, count)) => *count = count.saturating_add(1),
                None => watch.holders.push((holder.to_owned(), 1)),
            }
            return Ok(Arc::clone(&watch.lost));
        }
        let (cancel_tx, cancel_rx) = crossbeam_channel::bounded(0);
        let lost = Arc::new(AtomicBool::new(false));
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let job = Job {
            id,
            name: name.to_owned(),
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
            name.to_owned(),
            KeyWatch {
                id,
                holders: vec![(holder.to_owned(), 1)],
                lost: Arc::clone(&lost),
                _cancel: cancel_tx,
            },
        );
        Ok(lost)
    }

    /// Forgets one watchdog hold of `holder` on `name`; cancels the key's
    /// renewal when no hold is left.
    pub(crate) fn stop(&self, name: &str, holder: &str) {
        let removed = {
            let mut keys = self.shared.keys.lock();
            let Some(watch) = keys.get_mut(name) else {
                return;
            };
            if let Some(pos) = watch.holders.iter().position(|(h, _)| h == holder) {
                let count = &mut watch.holders[pos].1;
                *count = count.saturating_sub(1);
                if *count == 0 {
                    watch.holders.swap_remove(pos);
                }
            }
            if watch.holders.is_empty() {
                keys.remove(name)
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
        let holder = {
            let keys = shared.keys.lock();
            match keys.get(&job.name) {
                Some(watch) if watch.id == job.id => watch.holders.first().map(|(h, _)| h.clone()),
                _ => None,
            }
        };
        let Some(holder) = holder else { return };
        match shared
            .backend
            .lock_renew(&job.name, &holder, shared.timeout_ms)
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
