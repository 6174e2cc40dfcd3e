//! Restarts of fixed leases passed between threads of one client (see
//! `lock::cohort`), with no thread and no clock of their own, as
//! `schedule.rs`: the time is always an argument.
//!
//! A fixed lease passed to another thread restarts for it: its new holder
//! asked for `lease` from when it got the hold. Until a call raises the
//! store's TTL, the new holder holds on the rest of the old lease, which the
//! store's TTL covers. The call is needed only if the hold outlives that
//! rest: it is due a third of the rest before the rest runs out (as the
//! watchdog renews a third of a lease early), and cancelled when the hold is
//! released or passed on first. Holds passed around quickly (the usual
//! case: many threads taking turns) cost the store nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lease::Lease;
use super::schedule::Hold;
use crate::fast_map::FastMap;
use crate::lock::AttemptId;

/// One hold's pending restart.
#[derive(Debug)]
pub(super) struct Restart {
    /// Distinguishes it from a later restart of the same hold.
    pub(super) id: u64,
    due: Instant,
    /// The attempt whose record the call names (see `lua/lock_renew.lua`);
    /// `None`: the holder check alone.
    pub(super) attempt: Option<AttemptId>,
    /// The new holder's lease, which ends at `expected` until the raise.
    pub(super) lease: Arc<Lease>,
    pub(super) expected: Instant,
    /// When the new holder's lease ends once restarted.
    pub(super) until: Instant,
}

/// Every pending restart of one client, ordered by due time.
#[derive(Debug, Default)]
pub(super) struct Restarts {
    pending: FastMap<Hold, Restart>,
    queue: BTreeMap<(Instant, u64), Hold>,
    /// The restart taken out to be sent, until its answer is recorded;
    /// cleared if its hold is released or passed on meanwhile (its answer
    /// then says nothing about the hold's holder).
    in_flight: Option<(Hold, u64)>,
    next_id: u64,
}

impl Restarts {
    /// Registers the restart of `hold` (replacing any earlier one) for a
    /// new holder whose lease, now `lease`, should end at `until`. Returns
    /// when it is due, or `None` when none is needed: the lease runs at
    /// least that long already (or too long to tell), or has run out.
    pub(super) fn add(
        &mut self,
        hold: Hold,
        attempt: Option<AttemptId>,
        lease: &Arc<Lease>,
        until: Instant,
        now: Instant,
    ) -> Option<Instant> {
        self.cancel(&hold);
        let expected = lease.ends()?;
        if until <= expected || expected <= now {
            return None;
        }
        let due = now.checked_add((expected - now) * 2 / 3)?;
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.queue.insert((due, id), hold.clone());
        let restart = Restart {
            id,
            due,
            attempt,
            lease: Arc::clone(lease),
            expected,
            until,
        };
        self.pending.insert(hold, restart);
        Some(due)
    }

    /// Puts back a restart whose call failed, to be tried again at `at` if
    /// that is before its lease's end and no later restart took its place.
    pub(super) fn retry(&mut self, hold: Hold, restart: Restart, at: Instant) -> Option<Instant> {
        if at >= restart.expected || self.pending.contains_key(&hold) {
            return None;
        }
        self.queue.insert((at, restart.id), hold.clone());
        self.pending.insert(hold, Restart { due: at, ..restart });
        Some(at)
    }

    /// Forgets `hold`'s pending restart, if any (its holder released it or
    /// passed it on). One already taken out to be sent is not waited for:
    /// it never shortens a TTL, names its attempt's record, and raises at
    /// most to its own holder's lease.
    pub(super) fn cancel(&mut self, hold: &Hold) {
        if let Some(restart) = self.pending.remove(hold) {
            self.queue.remove(&(restart.due, restart.id));
        }
        if self.in_flight.as_ref().is_some_and(|(h, _)| h == hold) {
            self.in_flight = None;
        }
    }

    /// When the earliest restart is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.queue.first_key_value().map(|((due, _), _)| *due)
    }

    /// Takes out the earliest restart if it is due at `now`; it is in
    /// flight until [`answered`](Self::answered).
    pub(super) fn take_due(&mut self, now: Instant) -> Option<(Hold, Restart)> {
        loop {
            let entry = self.queue.first_entry()?;
            if entry.key().0 > now {
                return None;
            }
            let hold = entry.remove();
            if let Some(restart) = self.pending.remove(&hold) {
                self.in_flight = Some((hold.clone(), restart.id));
                return Some((hold, restart));
            }
        }
    }

    /// The answer to restart `id` of `hold` came: true when it still
    /// speaks for the hold's holder (not released or passed on meanwhile).
    pub(super) fn answered(&mut self, hold: &Hold, id: u64) -> bool {
        let current = self
            .in_flight
            .as_ref()
            .is_some_and(|(h, i)| h == hold && *i == id);
        self.in_flight = None;
        current
    }

    pub(super) fn clear(&mut self) {
        self.pending.clear();
        self.queue.clear();
        self.in_flight = None;
    }
}

/// The lease to ask for at `now` so that it ends at `until` (whole
/// milliseconds, rounded up, at least one).
pub(super) fn lease_ms_until(until: Instant, now: Instant) -> i64 {
    let left = until.saturating_duration_since(now);
    let ms = left.as_nanos().div_ceil(1_000_000).max(1);
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// The length of a lease of `lease_ms`.
pub(super) fn length(lease_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(lease_ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flavor::{Flavor, LockKeys, Renewal};

    fn hold(name: &str) -> Hold {
        let keys = Arc::new(LockKeys::new(Flavor::Reentrant, name.to_owned()));
        let holder = keys.holder("c:1".to_owned());
        Hold(Arc::new(Renewal { keys, holder }))
    }

    /// A hold passed at `now` with `rest` seconds of its lease left, to a
    /// holder that asked for 10 s: the restarts, its lease, and the end
    /// the restart aims at.
    fn passed(now: Instant, rest: u64) -> (Restarts, Arc<Lease>, Instant) {
        let lease = Lease::new(now, Duration::from_secs(rest));
        (Restarts::default(), lease, now + Duration::from_secs(10))
    }

    #[test]
    fn a_restart_is_due_a_third_of_the_rest_before_it_runs_out() {
        let now = Instant::now();
        let (mut restarts, lease, until) = passed(now, 3);
        let due = restarts.add(hold("a"), None, &lease, until, now);
        assert_eq!(due, Some(now + Duration::from_secs(2)));
        assert!(
            restarts
                .take_due(now + Duration::from_millis(1999))
                .is_none()
        );
        let (h, taken) = restarts.take_due(now + Duration::from_secs(2)).unwrap();
        assert_eq!(taken.until, until);
        assert_eq!(restarts.next_due(), None);
        assert!(
            restarts.answered(&h, taken.id),
            "nothing released it meanwhile"
        );
    }

    #[test]
    fn no_restart_when_the_rest_covers_the_new_lease() {
        let now = Instant::now();
        let (mut restarts, lease, until) = passed(now, 30);
        assert_eq!(restarts.add(hold("a"), None, &lease, until, now), None);
        assert_eq!(restarts.next_due(), None);
    }

    #[test]
    fn a_released_or_passed_hold_cancels_its_restart() {
        let now = Instant::now();
        let (mut restarts, lease, until) = passed(now, 3);
        restarts.add(hold("a"), None, &lease, until, now);
        restarts.add(hold("b"), None, &lease, until, now);
        restarts.cancel(&hold("a"));
        // Passed on: the new holder's restart replaces the old one.
        let later = now + Duration::from_secs(1);
        assert!(
            restarts
                .add(
                    hold("b"),
                    None,
                    &lease,
                    until + Duration::from_secs(1),
                    later
                )
                .is_some()
        );
        let (h, taken) = restarts.take_due(now + Duration::from_secs(3)).unwrap();
        assert_eq!(taken.until, until + Duration::from_secs(1), "b's second");
        assert!(restarts.take_due(now + Duration::from_secs(3)).is_none());
        // Released while its call is on the way: its answer is not the
        // holder's.
        restarts.cancel(&h);
        assert!(!restarts.answered(&h, taken.id));
    }

    #[test]
    fn a_failed_restart_is_retried_only_before_the_lease_ends() {
        let now = Instant::now();
        let (mut restarts, lease, until) = passed(now, 3);
        restarts.add(hold("a"), None, &lease, until, now);
        let (h, restart) = restarts.take_due(now + Duration::from_secs(2)).unwrap();
        assert_eq!(
            restarts.retry(h, restart, now + Duration::from_secs(3)),
            None,
            "too late: the lease has ended"
        );
        restarts.add(hold("a"), None, &lease, until, now);
        let (h, restart) = restarts.take_due(now + Duration::from_secs(2)).unwrap();
        let at = now + Duration::from_millis(2500);
        assert_eq!(restarts.retry(h, restart, at), Some(at));
        assert_eq!(restarts.next_due(), Some(at));
    }

    #[test]
    fn the_lease_asked_for_ends_no_earlier_than_wanted() {
        let now = Instant::now();
        assert_eq!(lease_ms_until(now + Duration::from_micros(1500), now), 2);
        assert_eq!(lease_ms_until(now, now), 1);
        assert_eq!(length(2), Duration::from_millis(2));
    }
}
