//! The release path of a hold: the release script under an unlock latch
//! (the hold's attempt record, or a fresh one), in-line retries of a
//! release whose reply was lost, the direct handoff to a parked waiter of
//! this client and its settling, phantom holds drained by an outermost
//! release, and what is handed to the cleanup worker to finish in the
//! background (releases and undone attempts).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Lock;
use crate::flavor::{Holder, Renewal};
use crate::holder::GuardHolder;
use crate::ops;
use crate::ops::lock::Release;
use crate::pubsub::{Handoff, Offer};
use crate::watchdog::Lease;
use crate::{Error, Result, keys};

/// How long an unlock latch remembers its outcome, so a retried release
/// whose first reply was lost is not applied twice: at least this, and
/// longer when the store's response timeout makes a request's window longer
/// (see [`latch_ms`]).
const UNLOCK_LATCH_MS: i64 = 10_000;

/// How long an unlock latch (or an attempt record turned latch) is kept on
/// `backend`: past the window of every copy of the release, and of the
/// acquire whose record it is ([`ops::record_keep_ms`]).
fn latch_ms(backend: &dyn crate::backend::LockBackend) -> i64 {
    ops::record_keep_ms(backend, UNLOCK_LATCH_MS)
}

/// Pauses between the in-line retries of a release whose reply was lost
/// (each retry is idempotent: same unlock latch); no retry starts after
/// [`RELEASE_RETRY_BUDGET`]. What is still not released then is retried in
/// the background (see `cleanup`), and the unlock returns the error.
const RELEASE_RETRIES: [Duration; 3] = [
    Duration::from_millis(10),
    Duration::from_millis(100),
    Duration::from_millis(100),
];
/// In-line retrying stops after this long, so an unlock (or a guard's
/// `Drop`) takes at most about one response timeout plus this.
const RELEASE_RETRY_BUDGET: Duration = Duration::from_millis(300);

/// Cap on the extra releases of an outermost unlock that found the store
/// still counting holds this thread no longer has (see [`Lock::release`]).
const PHANTOM_RELEASES: usize = 16;

/// A fresh unlock latch key for one release of `name`: the request id is
/// this process's random prefix and a counter, unique across clients and
/// runs, with no random draw (a `getrandom` system call) per release. A
/// hold handed over has no attempt record to serve as its latch, so under
/// contention every release needs one.
fn new_latch(name: &str) -> String {
    static PREFIX: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| uuid::Uuid::new_v4().simple().to_string());
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // Relaxed: only uniqueness matters; fetch_add is atomic in any order.
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // `<unlock latch prefix>:<PREFIX><n in hex>`, written into one string
    // (no `format!`: a release of a handed hold builds one every time).
    let mut latch = String::with_capacity(name.len() + PREFIX.len() + 44);
    keys::push_prefixed(&mut latch, keys::UNLOCK_LATCH, name);
    latch.push(':');
    latch.push_str(PREFIX.as_str());
    crate::spell::push_hex(&mut latch, n);
    latch
}

/// A release's outcome where the store keeps no count of holders in a row.
fn uncounted(outcome: Release) -> ops::handoff::Counted {
    ops::handoff::Counted {
        outcome,
        streak: None,
    }
}

impl<H: GuardHolder> Lock<H> {
    /// Hands `task` to the cleanup worker, to be retried until it lands or
    /// the hold it releases would have expired on its own (`lease_ms` after
    /// `from`, when the hold was last set).
    pub(super) fn release_later(
        &self,
        holder: &Holder,
        task: crate::cleanup::Task,
        from: Instant,
        lease_ms: i64,
        recheck: bool,
        cause: &Error,
    ) {
        let lease = Duration::from_millis(u64::try_from(lease_ms).unwrap_or(0));
        if let Some(give_up_at) = from.checked_add(lease) {
            self.client.cleanup().push(
                &self.keys.name,
                holder.field(),
                task,
                give_up_at,
                recheck,
                cause,
            );
        }
    }
}

// The rest acts on a guard's handle: a hold's release is the same whoever
// holds it (the holder is in `holder`).
impl Lock {
    /// A cleanup task: the release under `latch` (a repeat of one whose
    /// reply was lost returns that first outcome), then, when `drain` is
    /// set, further releases while the store still counts holds.
    fn release_task(
        &self,
        holder: &Holder,
        lease_ms: i64,
        latch: String,
        drain: bool,
    ) -> crate::cleanup::Task {
        let backend = Arc::clone(self.client.backend());
        let keys = Arc::clone(&self.keys);
        let holder = holder.clone();
        let mut latch = latch;
        Box::new(move || {
            let latch_ms = latch_ms(backend.as_ref());
            match keys.release(backend.as_ref(), &holder, lease_ms, &latch, latch_ms)? {
                Release::StillHeld if drain => {
                    latch = new_latch(&keys.name);
                    Ok(false)
                }
                Release::StillHeld
                | Release::NotHeld
                | Release::Released
                | Release::Yielded
                | Release::Transferred => {
                    // A recheck (see `Cleanup::push`) is a new release.
                    latch = new_latch(&keys.name);
                    Ok(true)
                }
            }
        })
    }

    /// Releases one hold. When `outermost` (this thread has no other guard
    /// of this lock) and the store still counts holds of this holder, those
    /// are phantoms: holds the store gained or kept without a guard, e.g. a
    /// release that went to an old master during a failover while the
    /// promoted replica kept the hold. Left alone, a thread that keeps
    /// re-taking the lock would keep them alive for ever (each re-take is a
    /// reentry that resets the lease) and starve every other holder; so
    /// they are released too. `passes`: how many times the hold was passed
    /// between threads of this client since the store last counted it
    /// (see `cohort`), which its count of holders in a row takes in.
    pub(super) fn release(
        &self,
        holder: &Holder,
        lease_ms: i64,
        outermost: bool,
        record: Option<String>,
        passes: u32,
    ) -> Result<()> {
        let mut passes = passes;
        let backend = self.client.store();
        // Spelled once per thread and lock (see `names`).
        let names = super::names::of(&self.keys, self.client.claim_window_ms());
        let wait_channel = super::names::wait_channel(names.as_deref(), &self.keys, holder);
        // A direct handoff to a parked waiter of this client, if one is
        // seated: the release script then hands it the lock (one round
        // trip for the whole handoff, instead of a release, a pub/sub
        // message, a wake and an acquire).
        let mut offer = if outermost && self.keys.hands_over() {
            self.client.subscriber().offer(&wait_channel)
        } else {
            None
        };
        // Also when a handoff was sent: the waiter's lease runs from it.
        let started = Instant::now();
        let mut phantoms = 0;
        // The hold's attempt record, when it has one, is this release's
        // unlock latch: the release script turns it into the outcome (one
        // key written instead of the record deleted and a latch created, and
        // no random id drawn), so a late copy of the acquire that took the
        // hold is refused. Every lock kind. Phantoms get fresh latches.
        let mut latch = record.unwrap_or_else(|| new_latch(&self.keys.name));
        let latch_ms = latch_ms(backend);
        let mut retries = RELEASE_RETRIES.iter();
        // One deadline over the in-line attempts: each round trip and each
        // connection opening gets what is left of one response timeout
        // plus the retry budget (a partition that drops packets would
        // otherwise cost a whole connection timeout per opening). The
        // steps after it share one round-trip floor: hence the floor less.
        // (A guard whose unlock waited for a renewal in flight entered its
        // own, earlier, from the unlock's start: see `LockGuard::release`.)
        let _deadline = crate::deadline::enter(self.unlock_deadline(started));
        // The reentrant lock's last hold goes to a parked thread of this
        // client if one is offered, or else to the head of the lock's queue
        // in the store: one waiter of the whole fleet, told on its client's
        // channel (see `ops::handoff`).
        let queue = names
            .as_deref()
            .filter(|_| self.keys.hands_over() && self.client.queues_waiters())
            .map(super::names::Names::queue);
        // The offered waiter's entry in the store's queue, which it leaves.
        let offer_entry = offer
            .as_ref()
            .filter(|offer| offer.seat.queued)
            .map(|offer| offer.seat.queue_entry());
        loop {
            let result = match (&offer, queue) {
                (offer, Some(queue)) => ops::handoff::release(
                    backend,
                    &self.keys.name,
                    &wait_channel,
                    &holder.id,
                    lease_ms,
                    &latch,
                    latch_ms,
                    offer.as_ref().map(|offer| {
                        (
                            offer.seat.field.as_str(),
                            offer.seat.lease_ms,
                            match &offer_entry {
                                None => ops::handoff::QueuePlace::Unqueued,
                                Some(None) => ops::handoff::QueuePlace::Holder,
                                Some(Some(entry)) => ops::handoff::QueuePlace::Entry(entry),
                            },
                        )
                    }),
                    queue,
                    passes,
                ),
                (Some(offer), None) => ops::lock::release_to(
                    backend,
                    &self.keys.name,
                    offer.channel(),
                    &holder.id,
                    lease_ms,
                    &latch,
                    latch_ms,
                    &offer.seat.field,
                    offer.seat.lease_ms,
                )
                .map(uncounted),
                (None, None) => self
                    .keys
                    .release(backend, holder, lease_ms, &latch, latch_ms)
                    .map(uncounted),
            };
            match result {
                Err(err) if err.is_connection_error() => match retries.next() {
                    // The reply may be lost after the release happened: the
                    // latch makes the retry return that outcome, not release twice.
                    Some(pause) if started.elapsed() < RELEASE_RETRY_BUDGET => {
                        std::thread::sleep(*pause)
                    }
                    _ => {
                        if let Some(offer) = offer.take() {
                            self.settle(offer, Handoff::Unknown);
                        }
                        // The lease runs out on its own at the latest (the
                        // watchdog no longer renews it); until then the
                        // release keeps being sent in the background, so
                        // waiters do not wait out a whole lease.
                        let task = self.release_task(holder, lease_ms, latch, outermost);
                        self.release_later(holder, task, Instant::now(), lease_ms, false, &err);
                        return Err(err);
                    }
                },
                Err(err) => {
                    // Refused before any write (the scripts check first).
                    if let Some(offer) = offer.take() {
                        self.settle(offer, Handoff::Refused);
                    }
                    return Err(err);
                }
                Ok(ops::handoff::Counted {
                    outcome: Release::Transferred,
                    streak,
                }) => {
                    if let Some(offer) = offer.take() {
                        // The waiter holds it from now: record that before
                        // this thread (about to ask again, typically) can
                        // look, or it would send an attempt that must fail.
                        // The waiter's guard replaces this with its lease.
                        let lease = Lease::new(
                            started,
                            Duration::from_millis(u64::try_from(offer.seat.lease_ms).unwrap_or(0)),
                        );
                        let hold = Arc::new(Renewal {
                            keys: Arc::clone(&self.keys),
                            holder: self.keys.holder(offer.seat.field.clone()),
                        });
                        self.client.local_owners().taken(&hold, &lease);
                        // The streak's count came back: the waiter may pass
                        // the hold on inside the client up to its end.
                        let passes_left = match (streak, queue) {
                            (Some(streak), Some(queue)) => queue
                                .streak_limit()
                                .saturating_sub(streak.saturating_add(1)),
                            _ => 0,
                        };
                        self.settle(offer, Handoff::Granted(started, passes_left));
                    } else {
                        // Handed to a waiter of the queue: this client's
                        // streak of handoffs among its own threads ends.
                        self.client.subscriber().end_streak(&wait_channel);
                    }
                    return Ok(());
                }
                Ok(ops::handoff::Counted { outcome, .. }) => {
                    // Counted by the first release that landed.
                    passes = 0;
                    // Not handed over: the waiter goes back to waiting.
                    if let Some(offer) = offer.take() {
                        self.settle(offer, Handoff::Refused);
                    }
                    match outcome {
                        Release::StillHeld if outermost && phantoms < PHANTOM_RELEASES => {
                            phantoms += 1;
                            latch = new_latch(&self.keys.name);
                        }
                        Release::NotHeld if phantoms > 0 => return Ok(()),
                        outcome => return self.released(outcome, &wait_channel),
                    }
                }
            }
        }
    }

    /// The deadline of the in-line attempts of an unlock that began at
    /// `started`: what is left of one response timeout plus the retry
    /// budget, less the floor the steps after it share (`None` when the
    /// store has no response timeout).
    pub(super) fn unlock_deadline(&self, started: Instant) -> Option<Instant> {
        self.client.store().response_timeout().and_then(|timeout| {
            started.checked_add(
                (timeout + RELEASE_RETRY_BUDGET).saturating_sub(crate::deadline::ROUND_TRIP_FLOOR),
            )
        })
    }

    /// Tells the offered waiter how its handoff went. If the lock was handed
    /// over after the waiter stopped waiting, releases the waiter's hold
    /// (which publishes the unlock its other waiters need), in the
    /// background if Redis does not answer.
    fn settle(&self, offer: Offer, outcome: Handoff) {
        let waiter = self.keys.holder(offer.seat.field.clone());
        let lease_ms = offer.seat.lease_ms;
        if !self.client.subscriber().resolve(offer, outcome) {
            return;
        }
        // The waiter had left: it holds nothing, whatever was recorded.
        self.client
            .local_owners()
            .released(&self.keys.name, waiter.field());
        let backend = self.client.store();
        let latch = new_latch(&self.keys.name);
        if let Err(err) = self
            .keys
            .release(backend, &waiter, lease_ms, &latch, latch_ms(backend))
        {
            let task = self.release_task(&waiter, lease_ms, latch, false);
            self.release_later(&waiter, task, Instant::now(), lease_ms, false, &err);
        }
    }

    /// `channel`: the releasing holder's wait channel.
    fn released(&self, outcome: Release, channel: &str) -> Result<()> {
        let client = &self.client;
        match outcome {
            Release::NotHeld => Err(Error::NotHeld {
                name: self.keys.name.to_string(),
            }),
            Release::StillHeld | Release::Transferred => Ok(()),
            Release::Released | Release::Yielded => {
                if self.keys.defers_to_woken_waiter() {
                    client.subscriber().note_release(channel);
                }
                if outcome == Release::Yielded {
                    // Freed for a waiter outside the queue: this client's
                    // next attempts keep off it for a moment, as the queue's do.
                    client.subscriber().note_yield(channel);
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn latches_are_named_under_the_lock_and_never_repeat() {
        let first = super::new_latch("jobs");
        let second = super::new_latch("jobs");
        assert!(
            first.starts_with("redisson_unlock_latch:{jobs}:"),
            "{first}"
        );
        assert!(super::new_latch("a{b}").starts_with("redisson_unlock_latch:a{b}:"));
        assert_ne!(first, second);
    }
}
