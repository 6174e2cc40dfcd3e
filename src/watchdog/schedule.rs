//! The watchdog's bookkeeping, with no thread and no clock of its own: the
//! time is always an argument, so renewal timing, retries and losses are
//! unit-tested without sleeping.
//!
//! Watches are ordered by due time (a `BTreeMap` keyed by `(due, id)`): the
//! scheduler looks only at the front, never walks every watch. A renewal
//! taken out of the queue is pending until its outcome is recorded, which
//! puts it back (renewed or retried) or marks the hold lost; from when its
//! batch is sent ([`Schedule::sending`]) it is in flight: the last release
//! of its hold then waits for its answer (see `Watchdog::stop`).

use std::collections::BTreeMap;

use crate::fast_map::FastMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lease::Lease;
use crate::flavor::Renewal;
use crate::lock::AttemptId;

/// How often a failed renewal is retried (capped by the renewal interval).
pub(super) const RETRY: Duration = Duration::from_millis(500);

/// A hold as the watchdog keys it: (lock name, holder field). The read and
/// write halves of one thread on one read-write lock are separate holds.
#[derive(Debug, Clone)]
pub(super) struct Hold(pub(super) Arc<Renewal>);

impl PartialEq for Hold {
    fn eq(&self, other: &Hold) -> bool {
        self.0.name() == other.0.name() && self.0.field() == other.0.field()
    }
}

impl Eq for Hold {}

impl Hash for Hold {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name().hash(state);
        self.0.field().hash(state);
    }
}

/// One hold being renewed.
#[derive(Debug)]
struct Watch {
    /// Distinguishes a watch from a later one for the same hold.
    id: u64,
    /// Number of watchdog guards (reentrant acquisitions) still alive.
    holds: u32,
    /// Its renewal's batch has been sent and not answered yet (a flag in
    /// the padding after `holds`: no more memory per watch).
    in_flight: bool,
    lease: Arc<Lease>,
    /// When the next renewal is due; `None` while one is pending (taken out
    /// of the queue, sent or about to be) or once the hold is lost (never
    /// renewed again).
    due: Option<Instant>,
    /// The acquire attempt of a live guard of this hold that renewals name
    /// (its record, `{name}:redisync_attempt:<id>`), so that one sent for a
    /// hold since released, resent or held up on the way, renews nothing
    /// (see `lua/lock_renew.lua`): the first guard's, then, once that one is
    /// released, another live guard's (see [`Schedule::others`]). `None`
    /// when no live guard has a record (a hold handed over by another
    /// client's release): the holder check alone, as Redisson's. 8 bytes, no
    /// allocation (a client may hold 100,000 locks).
    attempt: Option<AttemptId>,
}

/// A renewal taken from the queue, to be sent.
#[derive(Debug)]
pub(super) struct Due {
    pub(super) hold: Hold,
    pub(super) id: u64,
    /// The attempt whose record the renewal names (see [`Watch::attempt`]).
    pub(super) attempt: Option<AttemptId>,
}

/// What the store answered to one renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    Renewed,
    /// The holder no longer holds the lock.
    NotHeld,
    /// The renewal failed (connection, timeout, error reply).
    Failed,
}

/// What an answer meant for its hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The lease runs again from the renewal's send time.
    Renewed,
    /// Released (or superseded) while the renewal was in flight: ignored.
    Gone,
    /// Not renewed, but the guard whose attempt it named was released
    /// meanwhile while others live: sent again at once, naming another's.
    Moved,
    /// The lock is no longer this holder's.
    NotHeld,
    /// A failure, and the lease has run out meanwhile: lost.
    RanOut,
    /// A failure; retried after [`RETRY`].
    Retry,
}

/// Every watch of one client, ordered by due time.
#[derive(Debug)]
pub(super) struct Schedule {
    timeout: Duration,
    interval: Duration,
    /// How early a renewal may be sent, so that renewals falling due close
    /// together share a batch (a lease renewed a quarter interval early still
    /// runs a full timeout from then).
    coalesce: Duration,
    watches: FastMap<Hold, Watch>,
    /// The attempts of the live guards with a record of a watch with more
    /// than one, but the one its renewals name (reentrant holds; most
    /// watches have none here), in no order.
    others: FastMap<Hold, Vec<AttemptId>>,
    queue: BTreeMap<(Instant, u64), Hold>,
    next_id: u64,
}

impl Schedule {
    /// Renewals every `timeout / 3`, each setting a lease of `timeout`.
    pub(super) fn new(timeout: Duration) -> Schedule {
        let interval = timeout / 3;
        Schedule {
            timeout,
            interval,
            coalesce: interval / 4,
            watches: FastMap::default(),
            others: FastMap::default(),
            queue: BTreeMap::new(),
            next_id: 0,
        }
    }

    pub(super) fn interval(&self) -> Duration {
        self.interval
    }

    /// Number of watched holds.
    pub(super) fn len(&self) -> usize {
        self.watches.len()
    }

    /// Registers one watchdog guard of `renewal`, acquired by a request sent
    /// at `sent`. Returns the hold's lease and, for a new watch, when it is
    /// first due. `ttl`: the hold's TTL when it is not the watchdog timeout
    /// (a hold handed over by another client: see `ops::handoff`); its
    /// lease is that long, and its first renewal due within a third of it.
    /// `attempt`: the acquire attempt that took it, if it has a record.
    pub(super) fn start_within(
        &mut self,
        renewal: &Arc<Renewal>,
        sent: Instant,
        ttl: Option<Duration>,
        attempt: Option<AttemptId>,
    ) -> (Arc<Lease>, Option<Instant>) {
        let hold = Hold(Arc::clone(renewal));
        let mut holds = 1;
        let length = ttl.unwrap_or(self.timeout);
        if let Some(watch) = self.watches.get_mut(&hold) {
            if !watch.lease.is_lost_at(sent) {
                // A reentrant hold: the acquisition reset the TTL too.
                watch.holds = watch.holds.saturating_add(1);
                match (watch.attempt, attempt) {
                    (None, attempt) => watch.attempt = attempt,
                    (Some(_), Some(attempt)) => self.others.entry(hold).or_default().push(attempt),
                    (Some(_), None) => {}
                }
                match ttl {
                    None => watch.lease.renewed(sent, self.timeout),
                    Some(ttl) => watch.lease.maybe_changed(sent, ttl),
                }
                return (Arc::clone(&watch.lease), None);
            }
            // The thread lost the lock and took it again while an old guard
            // lives: a fresh watch, keeping the old guards' holds counted.
            holds = watch.holds.saturating_add(1);
        }
        self.unqueue(&hold);
        // The lost hold's guards' attempts are not this hold's.
        self.others.remove(&hold);
        let lease = Lease::new(sent, length);
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let due = sent.checked_add(self.interval.min(length / 3));
        if let Some(due) = due {
            self.queue.insert((due, id), hold.clone());
        }
        self.watches.insert(
            hold,
            Watch {
                id,
                holds,
                in_flight: false,
                lease: Arc::clone(&lease),
                due,
                attempt,
            },
        );
        (lease, due)
    }

    /// Forgets one watchdog guard of `renewal`, taken by `attempt`; the
    /// last one removes the watch, so its renewal is cancelled at once.
    /// Returns true when the watch it removed had a renewal in flight (sent,
    /// not answered): that one can no longer be cancelled.
    pub(super) fn stop(&mut self, renewal: &Arc<Renewal>, attempt: Option<AttemptId>) -> bool {
        let hold = Hold(Arc::clone(renewal));
        let Some(watch) = self.watches.get_mut(&hold) else {
            return false;
        };
        // Renewals name another live guard's attempt from now.
        if let Some(attempt) = attempt
            && let Some(others) = self.others.get_mut(&hold)
        {
            if watch.attempt == Some(attempt) {
                watch.attempt = others.pop();
            } else if let Some(at) = others.iter().position(|a| *a == attempt) {
                others.swap_remove(at);
            }
            if others.is_empty() {
                self.others.remove(&hold);
            }
        } else if watch.attempt == attempt {
            watch.attempt = None;
        }
        watch.holds = watch.holds.saturating_sub(1);
        if watch.holds > 0 {
            return false;
        }
        self.others.remove(&hold);
        self.unqueue(&hold);
        self.watches
            .remove(&hold)
            .is_some_and(|watch| watch.in_flight)
    }

    /// Forgets every watch (client shutdown).
    pub(super) fn clear(&mut self) {
        self.watches.clear();
        self.others.clear();
        self.queue.clear();
    }

    /// When the earliest renewal is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.queue.first_key_value().map(|((due, _), _)| *due)
    }

    /// Takes up to `max` renewals out of the queue if the earliest is due at
    /// `now`: every one due by `now` plus the coalescing margin, earliest
    /// first. Empty when nothing is due yet.
    pub(super) fn take_due(&mut self, now: Instant, max: usize) -> Vec<Due> {
        if self.next_due().is_none_or(|due| due > now) {
            return Vec::new();
        }
        let horizon = now.checked_add(self.coalesce).unwrap_or(now);
        let mut taken = Vec::new();
        while taken.len() < max {
            let Some(entry) = self.queue.first_entry() else {
                break;
            };
            if entry.key().0 > horizon {
                break;
            }
            let ((_, id), hold) = entry.remove_entry();
            let attempt = self.watches.get_mut(&hold).and_then(|watch| {
                watch.due = None;
                watch.attempt
            });
            taken.push(Due { hold, id, attempt });
        }
        taken
    }

    /// The renewals of `batch` that are still to be sent, marked in flight:
    /// those whose watch was removed (or replaced) since they were taken
    /// out of the queue are dropped; the others name the attempt their
    /// watch names now.
    pub(super) fn sending(&mut self, mut batch: Vec<Due>) -> Vec<Due> {
        batch.retain_mut(
            |due| match self.watches.get_mut(&due.hold).filter(|w| w.id == due.id) {
                Some(watch) => {
                    watch.in_flight = true;
                    due.attempt = watch.attempt;
                    true
                }
                None => false,
            },
        );
        batch
    }

    /// Applies the answer to a renewal sent at `sent`, read at `now`.
    pub(super) fn record(
        &mut self,
        due: &Due,
        sent: Instant,
        answer: Answer,
        now: Instant,
    ) -> Outcome {
        let Some(watch) = self.watches.get_mut(&due.hold).filter(|w| w.id == due.id) else {
            return Outcome::Gone;
        };
        watch.in_flight = false;
        let (outcome, next) = match answer {
            Answer::Renewed => {
                watch.lease.renewed(sent, self.timeout);
                (Outcome::Renewed, sent.checked_add(self.interval))
            }
            // The guard it named was released while it was on its way
            // (its record no longer says taken), and others live.
            Answer::NotHeld if watch.attempt != due.attempt => (Outcome::Moved, Some(now)),
            Answer::NotHeld => (Outcome::NotHeld, None),
            Answer::Failed if watch.lease.is_lost_at(now) => (Outcome::RanOut, None),
            Answer::Failed => (Outcome::Retry, now.checked_add(RETRY.min(self.interval))),
        };
        if matches!(outcome, Outcome::NotHeld | Outcome::RanOut) {
            watch.lease.mark_lost();
        }
        watch.due = next;
        if let Some(next) = next {
            self.queue.insert((next, due.id), due.hold.clone());
        }
        outcome
    }

    /// Removes `hold`'s queued renewal, if any.
    fn unqueue(&mut self, hold: &Hold) {
        if let Some(watch) = self.watches.get(hold)
            && let Some(due) = watch.due
        {
            self.queue.remove(&(due, watch.id));
        }
    }
}
