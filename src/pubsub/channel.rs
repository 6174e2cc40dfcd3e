//! One channel's wake state as a pure state machine: every transition the
//! subscriber performs on a channel under its mutex, with no lock, condvar or
//! clock of its own. Each method says what the caller must then do with the
//! channel's condvar ([`Notify`]); the caller passes the time in. Keeping the
//! logic here lets `model_tests` explore every interleaving of exactly the
//! transitions the real code runs (see the module doc of `pubsub` for the
//! wake contract these transitions implement).

use std::time::Instant;

use super::{HANDOFF_WINDOW, LINGER};

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
    /// tell), the waiter gets a permit: that message found no waiter to keep
    /// it for. Returns true when the thread must be asked to SUBSCRIBE (first
    /// waiter of an unsubscribed channel). The registering waiter is not
    /// parked, so nobody needs a notify.
    pub(crate) fn register(&mut self, seen: Snapshot) -> bool {
        self.waiters += 1;
        self.idle_since = None;
        if self.confirmed && seen.delivered != Some(self.delivered) {
            self.permits = (self.permits + 1).min(self.waiters);
        }
        !self.confirmed && self.waiters == 1
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

    /// Takes a permit if one is stored and the waiter has not passed on a
    /// wake of the latest message (`passed`, see [`pass_on`](Self::pass_on)).
    /// Returns the message count at the take (the wake's message), which the
    /// waiter hands to `pass_on` if its retry fails.
    pub(crate) fn take_permit(&mut self, passed: Option<u64>) -> Option<u64> {
        if self.permits > 0 && passed != Some(self.delivered) {
            self.permits -= 1;
            return Some(self.delivered);
        }
        None
    }

    /// A woken waiter could not use the wake it took when the message count
    /// was `woken_at`: hand it to another waiter if the last message still
    /// allows (bounded, so two waiters that both cannot use it do not pass it
    /// back and forth). Returns the marker the passer must remember (it takes
    /// no permit again until a message newer than the one it woke on: one
    /// that arrived during its retry still wakes it, since the retry may
    /// have run before that message's release) and the notify, or `None`
    /// when nothing was passed.
    pub(crate) fn pass_on(&mut self, woken_at: u64) -> Option<(u64, Notify)> {
        if self.passes == 0 {
            return None;
        }
        self.passes -= 1;
        self.permits = (self.permits + 1).min(self.waiters);
        // Every parked waiter looks; the passer itself will not take it
        // unless a newer message came.
        Some((woken_at, Notify::All))
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

    /// The SUBSCRIBE took effect: every waiter retries once now, because an
    /// unlock published before the subscription took effect was not seen.
    /// It counts as a delivery: a waiter whose snapshot predates it missed
    /// that window too (say a reconnect between its attempt and its
    /// registration, with the unlock published while unsubscribed), so it
    /// gets a permit when it registers; and a waiter that passed on the last
    /// message's wake takes this one.
    pub(crate) fn confirm(&mut self) -> Notify {
        self.confirmed = true;
        self.delivered = self.delivered.wrapping_add(1);
        self.permits = self.waiters;
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

    /// The connection was lost: not subscribed any more, and everyone
    /// retries, because messages may have been lost meanwhile.
    pub(crate) fn disconnected(&mut self) -> Notify {
        self.confirmed = false;
        self.wake_all()
    }

    /// Gives every waiter a permit and wakes it (reconnect, shutdown).
    pub(crate) fn wake_all(&mut self) -> Notify {
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
    /// `tests/semaphore_wake_probe.rs` caught).
    #[test]
    fn a_message_during_a_failed_retry_still_wakes_the_waiter() {
        let mut channel = ChannelState::new(Wake::Semaphore);
        channel.register(Snapshot::absent());
        assert_eq!(channel.confirm(), Notify::All);
        let confirmed = channel
            .take_permit(None)
            .expect("the confirmation's permit");
        // Release 1 and its wake; A takes it.
        channel.pass_on(confirmed);
        let _ = channel.take_permit(Some(confirmed));
        channel.deliver("1");
        let woken_at = channel
            .take_permit(Some(confirmed))
            .expect("release 1 wakes A");
        // Release 2 arrives while A retries; A's retry (sent before) fails.
        channel.deliver("1");
        let (passed, _) = channel
            .pass_on(woken_at)
            .expect("a semaphore wake is passed on");
        assert_eq!(passed, woken_at);
        assert!(
            channel.take_permit(Some(passed)).is_some(),
            "release 2's wake was lost: the waiter would park with the permit free"
        );
    }

    #[test]
    fn a_waiter_does_not_retake_the_wake_it_passed_on() {
        let mut channel = ChannelState::new(Wake::Semaphore);
        channel.register(Snapshot::absent());
        channel.register(Snapshot::absent());
        channel.confirm();
        let _ = channel.take_permit(None);
        let _ = channel.take_permit(None);
        channel.deliver("1");
        let woken_at = channel.take_permit(None).expect("the release wakes one");
        let (passed, notify) = channel.pass_on(woken_at).expect("passed on");
        assert_eq!(notify, Notify::All);
        // The passer cannot take it back; the other waiter can.
        assert_eq!(channel.take_permit(Some(passed)), None);
        assert!(channel.take_permit(None).is_some());
    }
}
