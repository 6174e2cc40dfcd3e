//! One channel's wake state as a pure state machine: every transition the
//! subscriber performs on a channel under its mutex, with no lock, condvar or
//! clock of its own. Each method says what the caller must then do with the
//! channel's condvar ([`Notify`]); the caller passes the time in. Keeping the
//! logic here lets `model_tests` explore every interleaving of exactly the
//! transitions the real code runs (see `pubsub::wake` for the wake
//! contract these transitions implement).

use std::time::Instant;

use super::wake::{HANDOFF_WINDOW, LINGER};

/// How a message on a channel wakes that channel's waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Wake {
    /// A lock channel (Redisson's `LockPubSub`): `1` (read-unlock) wakes
    /// every waiter, anything else (`0`, unlock) one.
    Lock,
    /// A semaphore channel (`SemaphorePubSub`): the message is the new
    /// permit count n, which wakes up to n waiters.
    Semaphore,
    /// A count-down latch channel (`CountDownLatchPubSub`): `0` (the count
    /// reached zero) wakes every waiter; `1` (new count) wakes none.
    Latch,
}

/// What the caller must do with the channel's condvar after a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notify {
    /// `notify_one` this many times (fewer wakes than waiters; `0`: none).
    Some(usize),
    /// `notify_all`.
    All,
}

/// A channel's state seen before a waiter's first attempt; see
/// `Subscriber::snapshot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Snapshot {
    pub(super) handoff: bool,
    pub(super) delivered: Option<u64>,
}

impl Snapshot {
    /// The snapshot of a channel that has no entry yet: no handoff, and a
    /// delivered count that matches nothing (so a subscribed channel found at
    /// registration gives a permit).
    pub(crate) fn absent() -> Snapshot {
        Snapshot {
            handoff: false,
            delivered: None,
        }
    }

    /// True while a woken local waiter is retrying: a new local attempt
    /// should queue behind it rather than barge.
    pub(crate) fn handoff_pending(&self) -> bool {
        self.handoff
    }
}

/// One waiter's own part of the wake state: kept beside its channel's
/// [`ChannelState`] under the same mutex and passed to the transitions that
/// concern that waiter. The reconnect rule is per waiter (see
/// [`ChannelState::confirm`]), so it cannot be a count in the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct WaiterState {
    /// The message count when it last passed a wake on: it takes no stored
    /// permit again until a newer message arrives.
    passed: Option<u64>,
    /// What its current retry was woken by: a message's stored permit (the
    /// message count at the take) or, `None`, its own retry of a round
    /// (which is nobody else's, so it is never passed on).
    woken_at: Option<u64>,
    /// The round it has had its retry for (or registered in; one behind
    /// when it registered owed a retry).
    round: u64,
}

/// What the subscriber thread's periodic sweep decides for one channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sweep {
    /// Nothing to do.
    Keep,
    /// Waiters want it and it is not subscribed on this connection.
    Subscribe,
    /// Idle past the linger: forget it (and UNSUBSCRIBE if subscribed).
    Remove {
        /// Subscribed on the current connection.
        unsubscribe: bool,
    },
}

/// One channel's waiters, permits and bookkeeping (the mutex-protected part
/// of an entry, without its condvar).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ChannelState {
    /// Registered waiters (live `Subscription`s).
    pub(super) waiters: usize,
    /// Stored wakes, at most `waiters`.
    pub(super) permits: usize,
    /// Subscribed on the current connection.
    pub(super) confirmed: bool,
    wake: Wake,
    /// When the last waiter left (for the linger).
    idle_since: Option<Instant>,
    /// Until when new local attempts defer to a woken waiter.
    handoff_until: Option<Instant>,
    /// Messages delivered on this channel so far, plus confirmations (see
    /// [`Snapshot`] and [`confirm`](Self::confirm)).
    pub(super) delivered: u64,
    /// How many more times a woken waiter that cannot use its wake may pass
    /// it on (semaphores: a waiter for 2 permits woken by a release of 1
    /// hands the wake to one that needs 1).
    passes: usize,
    /// Rounds opened so far (subscription confirmations and refused
    /// reconnects): each owes every waiter registered before it one retry of
    /// its own (see [`confirm`](Self::confirm)).
    round: u64,
}

impl ChannelState {
    /// A fresh, unsubscribed channel.
    pub(crate) fn new(wake: Wake) -> ChannelState {
        ChannelState {
            waiters: 0,
            permits: 0,
            confirmed: false,
            wake,
            idle_since: None,
            handoff_until: None,
            delivered: 0,
            passes: 0,
            round: 0,
        }
    }

    /// A fresh channel whose message count starts at `delivered` (a range of
    /// its own per entry: see `Subscriber::subscribe`).
    pub(crate) fn starting_at(wake: Wake, delivered: u64) -> ChannelState {
        ChannelState {
            delivered,
            ..ChannelState::new(wake)
        }
    }

    /// What a waiter sees before its first attempt.
    pub(crate) fn snapshot(&self, now: Instant) -> Snapshot {
        Snapshot {
            handoff: self.waiters > 0 && self.handoff_until.is_some_and(|t| t > now),
            delivered: Some(self.delivered),
        }
    }

    /// Registers a waiter whose failed attempt followed `seen`. If the
    /// channel is subscribed and a message arrived since (or `seen` cannot
    /// tell), the waiter is owed one retry of its own: that message found
    /// no waiter to keep it for. (Not a stored permit: another waiter that
    /// cannot use it, a semaphore waiter for more permits, could take it.)
    /// Otherwise it joins the current round. Returns the waiter's own state,
    /// and true when the thread must be asked to SUBSCRIBE (first waiter of
    /// an unsubscribed channel). The registering waiter is not parked, so
    /// nobody needs a notify.
    pub(crate) fn register(&mut self, seen: Snapshot) -> (WaiterState, bool) {
        self.waiters += 1;
        self.idle_since = None;
        let missed = self.confirmed && seen.delivered != Some(self.delivered);
        let waiter = WaiterState {
            passed: None,
            woken_at: None,
            // A round behind: `take_permit` gives it its retry.
            round: if missed {
                self.round.wrapping_sub(1)
            } else {
                self.round
            },
        };
        (waiter, !self.confirmed && self.waiters == 1)
    }

    /// A waiter leaves (its `Subscription` dropped); permits stay capped.
    pub(crate) fn deregister(&mut self, now: Instant) {
        self.waiters = self.waiters.saturating_sub(1);
        self.permits = self.permits.min(self.waiters);
        if self.waiters == 0 {
            self.idle_since = Some(now);
            self.handoff_until = None;
        }
    }

    /// Whether `waiter` may retry now, taking what lets it: first its own
    /// retry of the latest round, if it has not had it (no other
    /// waiter can use that up); else a stored permit, if one is there and
    /// the waiter has not passed on a wake of the latest message (see
    /// [`pass_on`](Self::pass_on)).
    pub(crate) fn take_permit(&mut self, waiter: &mut WaiterState) -> bool {
        if waiter.round != self.round {
            waiter.round = self.round;
            waiter.woken_at = None;
            return true;
        }
        if self.permits > 0 && waiter.passed != Some(self.delivered) {
            self.permits -= 1;
            waiter.woken_at = Some(self.delivered);
            return true;
        }
        false
    }

    /// A woken waiter could not use its wake: if it was a message's stored
    /// permit, hand it to another waiter when the last message still allows
    /// (bounded, so two waiters that both cannot use it do not pass it back
    /// and forth). The passer then takes no permit again until a message
    /// newer than the one it woke on (one that arrived during its retry still
    /// wakes it, since the retry may have run before that message's
    /// release). A confirmation retry is the waiter's own: nothing to pass.
    /// Returns the notify, or `None` when nothing was passed.
    pub(crate) fn pass_on(&mut self, waiter: &mut WaiterState) -> Option<Notify> {
        let woken_at = waiter.woken_at?;
        if self.passes == 0 {
            return None;
        }
        self.passes -= 1;
        self.permits = (self.permits + 1).min(self.waiters);
        waiter.passed = Some(woken_at);
        // Every parked waiter looks; the passer itself will not take it
        // unless a newer message came.
        Some(Notify::All)
    }

    /// The woken waiter finished its retry: close the handoff window.
    pub(crate) fn handoff_done(&mut self) {
        self.handoff_until = None;
    }

    /// This client released the channel's lock: if local waiters exist, the
    /// unlock message will wake one; open the handoff window.
    pub(crate) fn note_release(&mut self, now: Instant) {
        if self.waiters > 0 {
            self.handoff_until = now.checked_add(HANDOFF_WINDOW);
        }
    }

    /// The sweep's decision: unsubscribe a channel idle past the linger,
    /// subscribe one that waiters want.
    pub(crate) fn sweep(&self, now: Instant) -> Sweep {
        let expired = self.waiters == 0
            && self
                .idle_since
                .is_some_and(|t| now.duration_since(t) >= LINGER);
        if expired {
            Sweep::Remove {
                unsubscribe: self.confirmed,
            }
        } else if !self.confirmed && self.waiters > 0 {
            Sweep::Subscribe
        } else {
            Sweep::Keep
        }
    }

    /// The SUBSCRIBE took effect (first subscription or after a reconnect):
    /// every waiter registered now retries exactly once, because a message
    /// published before the subscription took effect was not seen. The
    /// retry is each waiter's own (a new round, see
    /// [`take_permit`](Self::take_permit)), not a count of permits: with a
    /// count, one waiter that cannot use its wakes (a semaphore waiter for
    /// more permits than are free) could take them all while another that
    /// could proceed sleeps its fallback; and it comes once per
    /// confirmation, so a reconnect makes no herd of repeated retries.
    ///
    /// It also counts as a delivery: a waiter whose snapshot predates it
    /// missed that window too (say a reconnect between its attempt and its
    /// registration, with the unlock published while unsubscribed), so it
    /// is owed a retry when it registers.
    pub(crate) fn confirm(&mut self) -> Notify {
        self.confirmed = true;
        self.delivered = self.delivered.wrapping_add(1);
        self.round = self.round.wrapping_add(1);
        Notify::All
    }

    /// A message arrived: count it, and add permits by the wake policy
    /// (capped at the waiters).
    pub(crate) fn deliver(&mut self, payload: &str) -> Notify {
        self.delivered = self.delivered.wrapping_add(1);
        let woken = match self.wake {
            Wake::Lock if payload == crate::keys::READ_UNLOCK_MESSAGE => self.waiters,
            Wake::Lock => 1,
            // A count of zero or less wakes nobody; an unreadable one lets
            // everyone look.
            Wake::Semaphore => match payload.parse::<i64>() {
                Ok(count) => usize::try_from(count).unwrap_or(0),
                Err(_) => self.waiters,
            },
            Wake::Latch if payload == crate::keys::LATCH_ZERO_MESSAGE => self.waiters,
            Wake::Latch => 0,
        };
        self.permits = self.permits.saturating_add(woken).min(self.waiters);
        // Only a semaphore's wake may be passed on: a failed lock retry
        // means someone else holds it.
        self.passes = if self.wake == Wake::Semaphore {
            self.waiters
        } else {
            0
        };
        if woken >= self.waiters {
            Notify::All
        } else {
            Notify::Some(woken)
        }
    }

    /// The connection was lost: not subscribed any more. Nobody retries
    /// yet: a message published until the resubscription takes effect would
    /// be missed by a retry now, so the retry every waiter is owed comes
    /// with that [`confirm`](Self::confirm), once.
    pub(crate) fn disconnected(&mut self) {
        self.confirmed = false;
    }

    /// A new pub/sub connection could not be opened (the server is down or
    /// refusing): every waiter retries once now, in a round of its own as at
    /// a confirmation, so that a waiting caller learns of the outage from
    /// its attempt's error instead of sleeping its fallback (or, if only
    /// pub/sub fails, gets one retry per reconnect attempt: at most one a
    /// second, the reconnect back-off's cap).
    pub(crate) fn reconnect_failed(&mut self) -> Notify {
        self.round = self.round.wrapping_add(1);
        Notify::All
    }

    /// The rule before per-waiter rounds, kept so `model_tests` can show the
    /// checker catches it: a confirmation (and a disconnect) stored one
    /// permit per waiter, a count any waiter could use up.
    #[cfg(test)]
    pub(crate) fn confirm_counted(&mut self) -> Notify {
        self.confirmed = true;
        self.delivered = self.delivered.wrapping_add(1);
        self.permits = self.waiters;
        Notify::All
    }

    /// The old rule's registration (see
    /// [`confirm_counted`](Self::confirm_counted)): a waiter whose snapshot
    /// predates a message stored a permit, a count any waiter could use up.
    #[cfg(test)]
    pub(crate) fn register_counted(&mut self, seen: Snapshot) -> (WaiterState, bool) {
        self.waiters += 1;
        self.idle_since = None;
        if self.confirmed && seen.delivered != Some(self.delivered) {
            self.permits = (self.permits + 1).min(self.waiters);
        }
        let waiter = WaiterState {
            passed: None,
            woken_at: None,
            round: self.round,
        };
        (waiter, !self.confirmed && self.waiters == 1)
    }

    /// The old rule's disconnect (see [`confirm_counted`](Self::confirm_counted)).
    #[cfg(test)]
    pub(crate) fn disconnected_counted(&mut self) -> Notify {
        self.confirmed = false;
        self.permits = self.waiters;
        Notify::All
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two semaphore waiters' threads, one permit: waiter A is woken by
    /// release 1, but its retry runs before that release lands in Redis
    /// order (the other thread re-took the permit); release 2 arrives while
    /// A is still retrying. A's failed retry passes on the wake of release
    /// 1 only: release 2's wake must still be A's to take, or A parks with
    /// the permit free in Redis until its fallback (the 30 s stall that
    /// `tests/semaphore_wakes.rs` caught).
    #[test]
    fn a_message_during_a_failed_retry_still_wakes_the_waiter() {
        let mut channel = ChannelState::new(Wake::Semaphore);
        let (mut a, _) = channel.register(Snapshot::absent());
        assert_eq!(channel.confirm(), Notify::All);
        assert!(channel.take_permit(&mut a), "the confirmation's retry");
        assert_eq!(channel.pass_on(&mut a), None, "a retry of its own");
        assert!(!channel.take_permit(&mut a));
        // Release 1 and its wake; A takes it.
        channel.deliver("1");
        assert!(channel.take_permit(&mut a), "release 1 wakes A");
        // Release 2 arrives while A retries; A's retry (sent before) fails.
        channel.deliver("1");
        assert!(
            channel.pass_on(&mut a).is_some(),
            "a semaphore wake is passed on"
        );
        assert!(
            channel.take_permit(&mut a),
            "release 2's wake was lost: the waiter would park with the permit free"
        );
    }

    #[test]
    fn a_waiter_does_not_retake_the_wake_it_passed_on() {
        let mut channel = ChannelState::new(Wake::Semaphore);
        let (mut a, _) = channel.register(Snapshot::absent());
        let (mut b, _) = channel.register(Snapshot::absent());
        channel.confirm();
        assert!(channel.take_permit(&mut a));
        assert!(channel.take_permit(&mut b));
        channel.deliver("1");
        assert!(channel.take_permit(&mut a), "the release wakes one");
        assert_eq!(channel.pass_on(&mut a), Some(Notify::All));
        // The passer cannot take it back; the other waiter can.
        assert!(!channel.take_permit(&mut a));
        assert!(channel.take_permit(&mut b));
    }

    /// The seventh fault of issue 21: after a reconnect, a semaphore waiter
    /// for 2 permits (A) fails its retry with 1 free, and must not take the
    /// retry of the waiter for 1 (B), which would then park with the permit
    /// free until its fallback. Each has exactly one retry per confirmation.
    #[test]
    fn a_confirmation_owes_each_waiter_one_retry_of_its_own() {
        let mut channel = ChannelState::new(Wake::Semaphore);
        let (mut a, _) = channel.register(Snapshot::absent());
        let (mut b, _) = channel.register(Snapshot::absent());
        channel.confirm();
        assert!(channel.take_permit(&mut a) && channel.take_permit(&mut b));
        // The reconnect: nobody retries before the resubscription.
        channel.disconnected();
        assert!(!channel.take_permit(&mut a) && !channel.take_permit(&mut b));
        assert_eq!(channel.confirm(), Notify::All);
        assert!(channel.take_permit(&mut a), "A's retry");
        assert_eq!(channel.pass_on(&mut a), None);
        assert!(!channel.take_permit(&mut a), "A retried twice");
        assert!(channel.take_permit(&mut b), "A used up B's retry");
        assert!(!channel.take_permit(&mut b), "B retried twice");
        // A waiter that registers after the confirmation (its attempt
        // followed it) is owed nothing.
        let seen = channel.snapshot(Instant::now());
        let (mut c, _) = channel.register(seen);
        assert!(!channel.take_permit(&mut c));
    }

    /// A waiter whose snapshot predates the last message is owed a retry of
    /// its own at registration: the semaphore waiter for 2 (A), failing its
    /// retry with 1 free, cannot take it from the waiter for 1 (B).
    #[test]
    fn a_missed_message_owes_the_registering_waiter_its_own_retry() {
        let mut channel = ChannelState::new(Wake::Semaphore);
        let (mut a, _) = channel.register(Snapshot::absent());
        let b_seen = channel.snapshot(Instant::now());
        channel.confirm();
        // B's attempt failed before the confirmation; it registers after.
        let (mut b, _) = channel.register(b_seen);
        assert!(channel.take_permit(&mut a), "A's confirmation retry");
        assert_eq!(channel.pass_on(&mut a), None);
        assert!(!channel.take_permit(&mut a), "A took B's retry");
        assert!(channel.take_permit(&mut b), "B's retry of its own");
        assert!(!channel.take_permit(&mut b));
    }

    /// The old counted rule fails the same scenario (what the model checker
    /// shows for every interleaving, see `model_tests`).
    #[test]
    fn the_counted_rule_lets_one_waiter_take_every_retry() {
        let mut channel = ChannelState::new(Wake::Semaphore);
        let (mut a, _) = channel.register(Snapshot::absent());
        let (mut b, _) = channel.register(Snapshot::absent());
        channel.confirm_counted();
        assert!(channel.take_permit(&mut a) && channel.take_permit(&mut a));
        assert!(!channel.take_permit(&mut b));
    }
}
