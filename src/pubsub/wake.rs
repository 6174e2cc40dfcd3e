//! The wake contract (per client, per channel): how a parked waiter learns
//! that its retry may succeed.
//!
//! Each subscribed channel has an entry: a count of the waiters that want it,
//! a count of stored permits, and each registered waiter with a condvar of
//! its own, all under one mutex. A wake reaches the longest-parked waiters.
//!
//! 1. A waiter registers ([`Subscriber::subscribe`]); the first one for a
//!    channel asks the subscriber thread to SUBSCRIBE (it pushes the wish into
//!    the shared state and nudges the thread with a message on the client's
//!    control channel). The confirmation gives every waiter of the channel a
//!    retry of its own, so each retries once the subscription is live and an
//!    unlock published in between cannot be missed.
//! 2. After a failed retry it parks ([`Subscription::wait_permit`]) until a
//!    permit is available or the TTL the failed attempt returned has passed,
//!    and takes one permit.
//! 3. A message adds permits by the channel's [`Wake`] policy: one for an
//!    unlock (one waiter per client retries, not a herd), all for a broadcast.
//!    A reconnect makes every waiter retry exactly once, when the
//!    resubscription takes effect (messages may have been lost meanwhile):
//!    each confirmation opens a round, and each waiter registered before it
//!    has one retry of its own in that round, which no other waiter can use
//!    up (stored permits are a count; a count let one semaphore waiter that
//!    could not use its wakes take every one while another that could
//!    proceed slept its fallback). An attempt to reconnect that cannot open
//!    a connection also opens a round, so a waiting caller learns of an
//!    outage from its retry's error rather than sleeping its fallback.
//! 4. Permits are stored, capped at the number of waiters, so a message that
//!    arrives between a failed attempt and the park is not lost (tokio's
//!    `Notify` idea). A message that arrives between a waiter's first failed
//!    attempt and its registration, when no other waiter could keep it, is
//!    caught by the channel's delivered-message count: the waiter compares
//!    the count it saw before the attempt ([`Subscriber::snapshot`]) and, if
//!    it moved, is owed a retry of its own (as at a confirmation: a stored
//!    permit could be taken by a waiter that cannot use it, a semaphore
//!    waiter for more permits). A subscription confirmation counts as a
//!    delivery, so a reconnect between the attempt and the registration (an
//!    unlock lost while unsubscribed) moves the count too. The TTL bound
//!    means a message lost anyway costs one retry, never a hang.
//!
//! A channel whose last waiter left stays subscribed for a short linger, so a
//! lock contended again and again does not pay SUBSCRIBE every time; the
//! thread unsubscribes it on a later tick.
//!
//! To stop one client's threads from barging past its own parked waiters, a
//! release that wakes a local waiter marks the channel for a short handoff
//! window; during it, a new local attempt queues instead of racing the woken
//! waiter ([`Snapshot::handoff_pending`]).

use crate::fast_map::FastMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Condvar;

use super::channel::{ChannelState, Notify, Snapshot, Wake};
use super::handoff::{Baton, Grant, Seat, UNCLAIMED_FOR, granted};
use super::{Entry, Shared, State, Subscriber, Waiter};
use crate::{Error, Result};

/// Why [`Subscription::wait_permit`] returned.
#[derive(Debug)]
pub(crate) enum Woken {
    /// It took a permit: retry.
    Permit,
    /// A release handed it the lock, in a script sent at this instant: it
    /// holds it (with a TTL of this length, when it is not the waiter's
    /// lease: see [`Grant::Granted`]).
    /// And how many times it may pass the hold on inside the client.
    Granted(Instant, Option<Duration>, u32),
    /// A releasing thread of this client passed it its hold (see
    /// [`Subscriber::resolve_pass`](super::Subscriber::resolve_pass)).
    Adopted(Baton),
    /// A handoff's outcome is unknown: retry (see [`Grant::Unknown`]).
    Retry,
    /// A release reserved the lock for it (see `ops::handoff`): its next
    /// attempt takes it.
    Reserved,
    /// Its park ended without either (the deadline, or shutdown).
    TimedOut,
    /// Its park ended while a releasing thread of this client was handing
    /// it the lock (the offer is withdrawn; the releaser gives back what it
    /// handed): it sends no attempt until that is resolved, or the attempt
    /// could take the handed hold that the releaser then gives back.
    Withdrawn,
    /// Its cancellation token was cancelled (an offer it had is withdrawn).
    Cancelled,
}

impl Subscriber {
    /// What `channel` looks like now, taken before a waiter's first attempt
    /// and handed to [`subscribe`](Self::subscribe) afterwards.
    pub(crate) fn snapshot(&self, channel: &str) -> Snapshot {
        let state = self.shared.state.lock();
        match state.channels.get(channel) {
            Some(entry) => entry.state.snapshot(Instant::now()),
            None => Snapshot::absent(),
        }
    }

    /// Registers a waiter on `channel`, starting the thread and asking for a
    /// SUBSCRIBE if it is the first. `seen` is the snapshot taken before the
    /// waiter's failed attempt: if the channel was already subscribed and a
    /// message arrived since (or `seen` cannot tell), the waiter is owed a
    /// retry of its own, because that message found no waiter to keep it for.
    ///
    /// A `seat` makes the waiter one a releasing thread of this client may
    /// hand the lock to directly (see [`offer`](Self::offer)). A `direct`
    /// channel is subscribed with the entry's own (see [`Entry::direct`]);
    /// a direct message for this waiter that came after `since` (when its
    /// wait began) and before this registration is its own.
    pub(crate) fn subscribe(
        &self,
        channel: &str,
        wake: Wake,
        seen: Snapshot,
        seat: Option<Seat>,
        direct: Option<&str>,
        since: Instant,
    ) -> Result<Subscription> {
        let mut state = self.shared.state.lock();
        if state.shutdown {
            return Err(Error::backend("the client is shutting down", false));
        }
        let start = !state.thread_started;
        state.thread_started = true;
        state.subscriptions_made = state.subscriptions_made.wrapping_add(1);
        let id = state.subscriptions_made;
        let State {
            channels,
            entries_created,
            directs,
            pending_directs,
            ..
        } = &mut *state;
        let mut created = false;
        let entry = channels.entry(channel.to_owned()).or_insert_with(|| {
            *entries_created = entries_created.wrapping_add(1);
            created = true;
            Entry {
                state: ChannelState::starting_at(wake, *entries_created << 32),
                waiters: FastMap::default(),
                next_park: 0,
                streak: 0,
                direct: None,
                unclaimed: Vec::new(),
            }
        });
        let mut late_direct = false;
        if let Some(direct) = direct
            && entry.direct.is_none()
        {
            entry.direct = Some(direct.to_owned());
            directs.insert(direct.to_owned(), channel.to_owned());
            // A new entry subscribes both at once; an existing one (a waiter
            // without a direct channel made it) adds it on the next pass.
            if !created {
                pending_directs.push(direct.to_owned());
                late_direct = true;
            }
        }
        let (own, subscribe) = entry.state.register(seen);
        let nudge = (subscribe || late_direct) && !start;
        // A direct message that came before this registration.
        let now = Instant::now();
        entry
            .unclaimed
            .retain(|m| now.saturating_duration_since(m.at) < UNCLAIMED_FOR);
        let mut taken = None;
        if let Some(seat) = &seat {
            entry.unclaimed.retain(|m| {
                if m.field != seat.field || m.at < since {
                    return true;
                }
                taken = Some(m.direct);
                false
            });
        }
        let cond = Arc::new(Condvar::new());
        entry.waiters.insert(
            id,
            Waiter {
                cond: Arc::clone(&cond),
                parked: None,
                seat,
                grant: Grant::Open,
                baton: None,
                reserved: false,
                own,
            },
        );
        if let (Some(direct), Some(waiter)) = (taken, entry.waiters.get_mut(&id)) {
            direct.apply(waiter);
        }
        // From here on, dropping the subscription undoes the registration.
        let subscription = Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            id,
            cond,
        };
        drop(state);
        if start && let Err(err) = self.start_thread() {
            // Let the next waiter try again.
            self.shared.state.lock().thread_started = false;
            return Err(err);
        }
        if nudge {
            // Best effort: if the nudge is lost, the next tick notices the wish.
            let _ = self
                .shared
                .backend
                .publish(&self.shared.control_channel, "");
        }
        Ok(subscription)
    }

    /// Called after this client released `channel`'s lock: if local waiters
    /// exist, the unlock message will wake one; open the handoff window.
    pub(crate) fn note_release(&self, channel: &str) {
        let mut state = self.shared.state.lock();
        if let Some(entry) = state.channels.get_mut(channel) {
            entry.state.note_release(Instant::now());
            entry.streak = 0;
        }
    }

    /// Wakes `channel`'s waiters as an unlock message would, for a release
    /// that frees the lock without publishing one (a hold the store had
    /// lost): a waiter that parked without an attempt, trusting that hold,
    /// then tries.
    pub(crate) fn wake_one(&self, channel: &str) {
        let mut state = self.shared.state.lock();
        if let Some(entry) = state.channels.get_mut(channel) {
            let notify = entry.state.deliver(crate::keys::UNLOCK_MESSAGE);
            entry.notify(notify);
        }
    }
}

impl Entry {
    /// Does what a transition asked of the condvars: `Some(n)` wakes the n
    /// longest-parked waiters that are not being handed the lock, `All`
    /// every parked one.
    pub(super) fn notify(&mut self, notify: Notify) {
        let mut parked: Vec<(u64, &mut Waiter)> = self
            .waiters
            .values_mut()
            .filter_map(|w| w.parked.map(|number| (number, w)))
            .collect();
        let take = match notify {
            Notify::All => parked.len(),
            Notify::Some(n) => {
                parked.retain(|(_, w)| w.grant == Grant::Open);
                parked.sort_unstable_by_key(|(number, _)| *number);
                n.min(parked.len())
            }
        };
        for (_, waiter) in parked.into_iter().take(take) {
            waiter.parked = None;
            waiter.cond.notify_one();
        }
    }
}

/// One waiter's registration on a channel; dropping it deregisters.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    /// Its key among the entry's waiters.
    id: u64,
    cond: Arc<Condvar>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("channel", &self.channel)
            .finish()
    }
}

impl Subscription {
    /// A wake-up for this waiter alone (a cancellation token's waker).
    pub(crate) fn waker(&self) -> Box<dyn Fn() + Send + Sync> {
        let shared = Arc::downgrade(&self.shared);
        let channel = self.channel.clone();
        let id = self.id;
        Box::new(move || {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let state = shared.state.lock();
            if let Some(waiter) = state
                .channels
                .get(&channel)
                .and_then(|entry| entry.waiters.get(&id))
            {
                waiter.cond.notify_one();
            }
        })
    }

    /// Parks until a permit is available (and takes it), a releasing
    /// thread hands it the lock, `until` passes or `cancel` is cancelled.
    pub(crate) fn wait_permit(
        &self,
        until: Option<Instant>,
        cancel: Option<&crate::CancellationToken>,
    ) -> Woken {
        let cancelled = || cancel.is_some_and(crate::CancellationToken::is_cancelled);
        let mut state = self.shared.state.lock();
        loop {
            let shutdown = state.shutdown;
            let Some(entry) = state.channels.get_mut(&self.channel) else {
                return Woken::TimedOut;
            };
            let Entry {
                state: channel,
                waiters,
                ..
            } = entry;
            let Some(waiter) = waiters.get_mut(&self.id) else {
                return Woken::TimedOut;
            };
            // A hold passed to it is its own even at shutdown (its guard
            // releases it): not left behind in the registration.
            if waiter.grant == Grant::Adopted {
                return adopted(waiter);
            }
            if shutdown {
                return Woken::TimedOut;
            }
            match waiter.grant {
                Grant::Granted(sent, ttl, passes) => {
                    waiter.grant = Grant::Open;
                    return granted(sent, ttl, passes);
                }
                // Taken above.
                Grant::Adopted => return adopted(waiter),
                Grant::Unknown => {
                    waiter.grant = Grant::Open;
                    return Woken::Retry;
                }
                // Cancelled while offered: a handoff that lands after this
                // is released by the releasing thread (see `resolve`).
                Grant::Offered if cancelled() => {
                    waiter.grant = Grant::Withdrawn;
                    return Woken::Cancelled;
                }
                // Offered: wait for the outcome, taking no permit.
                Grant::Offered => {}
                Grant::Open | Grant::Withdrawn if cancelled() => return Woken::Cancelled,
                Grant::Open | Grant::Withdrawn if waiter.reserved => {
                    waiter.reserved = false;
                    return Woken::Reserved;
                }
                Grant::Open | Grant::Withdrawn => {
                    if channel.take_permit(&mut waiter.own) {
                        return Woken::Permit;
                    }
                }
            }
            let number = entry.next_park;
            entry.next_park = entry.next_park.wrapping_add(1);
            if let Some(waiter) = entry.waiters.get_mut(&self.id) {
                waiter.parked = Some(number);
            }
            let timed_out = wait(&self.cond, &mut state, until);
            let Some(waiter) = state
                .channels
                .get_mut(&self.channel)
                .and_then(|entry| entry.waiters.get_mut(&self.id))
            else {
                return Woken::TimedOut;
            };
            waiter.parked = None;
            if timed_out {
                match waiter.grant {
                    Grant::Granted(sent, ttl, passes) => {
                        waiter.grant = Grant::Open;
                        return granted(sent, ttl, passes);
                    }
                    Grant::Adopted => return adopted(waiter),
                    // Withdrawn before and still not resolved: the same.
                    Grant::Offered | Grant::Withdrawn => {
                        waiter.grant = Grant::Withdrawn;
                        return Woken::Withdrawn;
                    }
                    _ => {}
                }
                return Woken::TimedOut;
            }
        }
    }

    /// A woken waiter could not use its wake: hand it to another waiter, if
    /// the last message still allows (bounded, so two waiters that both
    /// cannot use it do not pass it back and forth).
    pub(crate) fn pass_on(&self) {
        let mut state = self.shared.state.lock();
        if let Some(entry) = state.channels.get_mut(&self.channel)
            && let Some(waiter) = entry.waiters.get_mut(&self.id)
            && let Some(notify) = entry.state.pass_on(&mut waiter.own)
        {
            entry.notify(notify);
        }
    }

    /// The waiter is about to send its first attempt: from now on it may
    /// be in the store's queue (see `Seat::queued`). Called while it is not
    /// parked, so no release of this client is handing it the lock.
    pub(crate) fn attempting(&self) {
        let mut state = self.shared.state.lock();
        if let Some(seat) = state
            .channels
            .get_mut(&self.channel)
            .and_then(|entry| entry.waiters.get_mut(&self.id))
            .and_then(|waiter| waiter.seat.as_mut())
        {
            seat.queued = true;
        }
    }

    /// The woken waiter finished its retry: close the handoff window.
    pub(crate) fn handoff_done(&self) {
        let mut state = self.shared.state.lock();
        if let Some(entry) = state.channels.get_mut(&self.channel) {
            entry.state.handoff_done();
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        let mut baton = None;
        if let Some(entry) = state.channels.get_mut(&self.channel) {
            baton = entry
                .waiters
                .remove(&self.id)
                .and_then(|waiter| waiter.baton);
            entry.state.deregister(Instant::now());
        }
        drop(state);
        // A hold passed to it that it never took: its owner releases it,
        // which takes the state's lock (so not under it).
        drop(baton);
    }
}

/// A waiter passed a hold takes it (its baton); with none there, it retries.
fn adopted(waiter: &mut Waiter) -> Woken {
    waiter.grant = Grant::Open;
    waiter.baton.take().map_or(Woken::Retry, Woken::Adopted)
}

/// Waits on `cond` until notified or `until`; true when `until` has passed.
fn wait(
    cond: &Condvar,
    state: &mut parking_lot::MutexGuard<'_, State>,
    until: Option<Instant>,
) -> bool {
    match until {
        Some(until) => {
            if Instant::now() >= until {
                return true;
            }
            cond.wait_until(state, until).timed_out()
        }
        None => {
            cond.wait(state);
            false
        }
    }
}

/// Wakes every parked waiter (shutdown: each finds `shutdown` set and
/// returns).
pub(super) fn wake_all(state: &mut State) {
    for entry in state.channels.values_mut() {
        entry.notify(Notify::All);
    }
}
