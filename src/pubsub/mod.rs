//! The subscriber: one thread and one pub/sub connection per `Client`, which
//! turns Redis messages into wake-ups for parked waiters.
//!
//! # Wake contract (per client, per channel)
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
//!
//! # Direct handoffs
//!
//! A reentrant-lock waiter registers with a seat (its hash field and
//! lease). A thread of the same client that releases the lock takes the
//! longest-parked seated waiter ([`Subscriber::offer`]) and releases with
//! `lua/lock_release.lua` given the waiter, which hands the lock straight to it: one round
//! trip for the whole handoff, no message, no acquire of the waiter's own.
//! An offered waiter attempts nothing until [`Subscriber::resolve`] tells it
//! the outcome: it holds the lock, it goes back to waiting, or (a lost
//! reply) it retries, re-entering if the handoff landed (its outermost
//! unlock drains that extra hold). A waiter whose wait ends while offered
//! withdraws, and a handoff that lands after that is released by the
//! releasing thread. After [`MAX_HANDOFF_STREAK`] handoffs in a row, a
//! client frees the lock the usual way, publishing its unlock, so other
//! clients' waiters (and Redisson's, which hear only published unlocks) get
//! their turn. Where the store keeps the lock's waiter queue, it counts
//! these handoffs with its own and frees the lock for Redisson's waiters
//! once [`MAX_HANDOFF_STREAK`] redisync holders in a row had it (see
//! `ops::handoff`); for a moment then, an attempt of a client that freed
//! it so or waited for it lately keeps off it ([`Subscriber::yielding`]).
//!
//! The per-channel transitions themselves live in [`channel`], a pure state
//! machine the code here runs under its mutex; `model_tests` checks them
//! against every interleaving of waiters, releases, messages and reconnects.

mod channel;
#[cfg(test)]
mod model_tests;

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::backend::{LockBackend, PubSubConnection};
use crate::event::{EventHandler, SubscriberEvent};
use crate::{Error, Result};

use self::channel::{ChannelState, Notify, Sweep, WaiterState};
pub(crate) use self::channel::{Snapshot, Wake};

/// How long the subscriber blocks on the socket before it checks for new
/// wishes and shutdown (a liveness tick, not a poll of Redis).
const TICK: Duration = Duration::from_millis(200);
/// How long a channel with no waiters stays subscribed.
const LINGER: Duration = Duration::from_secs(2);
/// How long a new local attempt defers to a woken local waiter.
pub(crate) const HANDOFF_WINDOW: Duration = Duration::from_millis(100);
/// Reconnect back-off bounds.
const RECONNECT_MIN: Duration = Duration::from_millis(20);
const RECONNECT_MAX: Duration = Duration::from_secs(1);

/// How long a release that freed a reentrant lock for a waiter outside the
/// store's queue keeps this client's attempts off it (the store keeps the
/// queue's off it as long: `YIELD_MS` in `lua/lock_release.lua`).
const YIELD_WINDOW: Duration = Duration::from_millis(100);

/// How many direct handoffs in a row one client makes on a lock before it
/// frees it the usual way (publishing its unlock), so that other clients'
/// waiters get their turn.
pub(crate) const MAX_HANDOFF_STREAK: u32 = 16;

/// A channel's state and its registered waiters, each with a condvar of its
/// own, so that a wake reaches the longest-parked waiter and a direct
/// handoff reaches exactly the waiter it chose.
#[derive(Debug)]
struct Entry {
    state: ChannelState,
    waiters: HashMap<u64, Waiter>,
    /// Orders parked waiters: the next park's number.
    next_park: u64,
    /// Direct handoffs made in a row on this channel (see `offer`).
    streak: u32,
    /// A reentrant lock's channel for this client
    /// (`redisson_lock__channel:{name}:redisync:<client id>`), subscribed beside
    /// the entry's own: a release in any client that hands the lock to one
    /// of this entry's waiters says so there (see `ops::handoff`).
    direct: Option<String>,
    /// Direct messages for waiters not registered here (yet): a waiter
    /// whose failed attempt queued it may be handed the lock before it
    /// registers. Its registration picks the message up; stale ones go.
    unclaimed: Vec<Unclaimed>,
}

/// A direct message that found no registered waiter (see
/// [`Entry::unclaimed`]).
#[derive(Debug)]
struct Unclaimed {
    field: String,
    /// When it came: only a waiter whose wait began earlier takes it (one
    /// that began later is not the one it was for).
    at: Instant,
    direct: Direct,
}

/// What a direct message tells its waiter (see [`Entry::direct_message`]).
#[derive(Debug, Clone, Copy)]
enum Direct {
    /// The lock is its own, from this instant, for this long unless
    /// renewed, if it is the wait with this id.
    Handed(Instant, Duration, u64),
    /// The lock is reserved for it: it tries at once.
    Reserved,
}

/// A handoff dated older than this part of its claim window is not trusted
/// to be still in force (the clock offset's error, a frozen process): the
/// waiter tries instead, which takes the hold if it is still there.
const HANDED_TRUSTED_FOR: u32 = 2;
/// Taken off a handed hold's TTL: the error of the server clock's estimate.
const HANDED_MARGIN: Duration = Duration::from_millis(50);

impl Direct {
    /// The holder id a direct message is for, and what it says. A handoff
    /// is dated by the server's clock (`server_now_ms`, its estimate now):
    /// without it, or when it is too old to trust, it counts as a
    /// reservation.
    fn parse(payload: &str, now: Instant, server_now_ms: Option<i64>) -> Option<(&str, Direct)> {
        if let Some(field) = payload.strip_prefix("g:") {
            return Some((field, Direct::Reserved));
        }
        let (handed_ms, rest) = payload.strip_prefix("h:")?.split_once(':')?;
        let (claim_ms, rest) = rest.split_once(':')?;
        let (wait, field) = rest.split_once(':')?;
        // A fixed-lease wait's id as a release that reads no lease in its
        // entry sends it ('<id>+<lease>', the claim window as TTL).
        let wait = wait.split_once('+').map_or(wait, |(id, _)| id);
        let (handed_ms, claim, wait) = (
            handed_ms.parse::<i64>().ok()?,
            Duration::from_millis(claim_ms.parse().ok()?),
            wait.parse::<u64>().ok()?,
        );
        let Some(server_now) = server_now_ms else {
            return Some((field, Direct::Reserved));
        };
        let age =
            Duration::from_millis(u64::try_from(server_now.saturating_sub(handed_ms)).unwrap_or(0));
        match now.checked_sub(age) {
            Some(at) if age < claim / HANDED_TRUSTED_FOR => Some((
                field,
                Direct::Handed(at, claim.saturating_sub(HANDED_MARGIN), wait),
            )),
            _ => Some((field, Direct::Reserved)),
        }
    }

    /// Tells `waiter`. A handoff meant for another wait of the same holder
    /// (an earlier one that ended otherwise), or to a waiter being offered
    /// the lock by a thread of its own client (which cannot be: the lock has
    /// one holder), counts as a reservation: the waiter's attempt takes the
    /// hold if it is there.
    fn apply(self, waiter: &mut Waiter) {
        match self {
            Direct::Handed(at, ttl, wait)
                if waiter.grant == Grant::Open
                    && waiter.seat.as_ref().and_then(|seat| seat.wait) == Some(wait) =>
            {
                waiter.grant = Grant::Granted(at, Some(ttl));
            }
            Direct::Handed(..) | Direct::Reserved => waiter.reserved = true,
        }
    }
}

/// What a grant means when its waiter's thread finds it: a hold another
/// client handed it (with that TTL) is trusted, as a handoff message is,
/// only for the first part of its window; found later (the waiter's retry
/// answered late, its process starved or frozen meanwhile), it may have run
/// out and the lock moved on, so it counts as a reservation: the waiter's
/// attempt takes the hold if it is still there. A sibling's handoff (no
/// TTL: the waiter's own lease) stands.
fn granted(sent: Instant, ttl: Option<Duration>) -> Woken {
    match ttl {
        Some(ttl) if sent.elapsed() >= ttl / HANDED_TRUSTED_FOR => Woken::Reserved,
        _ => Woken::Granted(sent, ttl),
    }
}

/// How long an unclaimed direct message waits for its waiter to register
/// (a failed attempt's registration follows it at once).
const UNCLAIMED_FOR: Duration = Duration::from_secs(10);

/// A lock waiter that may be handed the lock directly by a thread of its
/// client that releases it: the hash field it would hold it under and the
/// lease its acquisition asks for.
#[derive(Debug, Clone)]
pub(crate) struct Seat {
    pub(crate) field: String,
    pub(crate) lease_ms: i64,
    /// This wait's id, when it is queued in the store to be handed the
    /// lock outright (see `ops::handoff::outright_entry`): a handoff naming
    /// another wait of the same holder is not this one's.
    pub(crate) wait: Option<u64>,
    /// Its hold has a fixed lease (no watchdog): its queue entry carries
    /// the lease, which a release in another client gives the handed hold.
    pub(crate) leased: bool,
}

impl Seat {
    /// Its entry in the store's waiter queue when it was queued to be
    /// handed the lock outright (see `ops::handoff::outright_entry` and
    /// `leased_entry`).
    pub(crate) fn queue_entry(&self) -> Option<String> {
        self.wait.map(|wait| {
            if self.leased {
                crate::ops::handoff::leased_entry(wait, self.lease_ms, &self.field)
            } else {
                crate::ops::handoff::outright_entry(wait, &self.field)
            }
        })
    }
}

/// Where a seated waiter's direct handoff stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grant {
    /// None offered.
    Open,
    /// A releasing thread chose it and is sending the handoff: it must not
    /// attempt the lock itself until the outcome is known.
    Offered,
    /// It stopped waiting while offered; a handoff that lands is undone by
    /// the releasing thread.
    Withdrawn,
    /// It holds the lock: the handoff was sent at this instant; with a
    /// TTL when the store's is not the waiter's lease (a handoff from
    /// another client: the claim window, until its watchdog renews it).
    Granted(Instant, Option<Duration>),
    /// The handoff's outcome is unknown (a connection error): it attempts
    /// again (a reentrant acquisition if the handoff landed, whose extra
    /// hold its outermost unlock drains).
    Unknown,
}

#[derive(Debug)]
struct Waiter {
    cond: Arc<Condvar>,
    /// The number of its current park, while parked.
    parked: Option<u64>,
    seat: Option<Seat>,
    grant: Grant,
    /// A release (in any client) reserved the lock for it: its next attempt
    /// takes it.
    reserved: bool,
    /// Its part of the wake state (see [`WaiterState`]).
    own: WaiterState,
}

impl Entry {
    /// A message on the entry's direct channel (see `ops::handoff`), for
    /// the waiter whose holder id it names: `h:<server ms>:<claim ms>:<wait
    /// id>:<id>`, the lock is its own (handed at that time by the server's
    /// clock, for that long unless renewed); `g:<id>`, the lock is reserved
    /// for it and it tries at once. A message for a waiter that is not registered is kept
    /// for it a while (see [`Entry::unclaimed`]); if it left, the hold runs
    /// out after its claim window.
    fn direct_message(&mut self, payload: &str, now: Instant, server_now_ms: Option<i64>) {
        let Some((field, direct)) = Direct::parse(payload, now, server_now_ms) else {
            return;
        };
        let Some(waiter) = self
            .waiters
            .values_mut()
            .find(|w| w.seat.as_ref().is_some_and(|seat| seat.field == field))
        else {
            self.unclaimed.retain(|m| {
                m.field != field && now.saturating_duration_since(m.at) < UNCLAIMED_FOR
            });
            self.unclaimed.push(Unclaimed {
                field: field.to_owned(),
                at: now,
                direct,
            });
            return;
        };
        direct.apply(waiter);
        // Parked or not, it re-checks (a recheck moves its park's end).
        waiter.parked = None;
        waiter.cond.notify_one();
    }

    /// Does what a transition asked of the condvars: `Some(n)` wakes the n
    /// longest-parked waiters that are not being handed the lock, `All`
    /// every parked one.
    fn notify(&mut self, notify: Notify) {
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

#[derive(Debug, Default)]
struct State {
    channels: HashMap<String, Entry>,
    /// Each entry's direct channel (see [`Entry::direct`]) to the entry's
    /// own.
    directs: HashMap<String, String>,
    /// Direct channels added to an entry that was subscribed already.
    pending_directs: Vec<String>,
    /// Until when this client's attempts keep off each channel's free lock
    /// (see [`Subscriber::note_yield`]): apart from the entries, as the
    /// client that freed it need not have waited for it.
    yields: HashMap<String, Instant>,
    /// Entries created so far: each new entry's message count starts in a
    /// range of its own, so a snapshot taken from an entry that lingered out
    /// never matches the count of the entry that replaced it.
    entries_created: u64,
    /// Subscriptions made so far (their ids).
    subscriptions_made: u64,
    thread_started: bool,
    shutdown: bool,
}

struct Shared {
    backend: Arc<dyn LockBackend>,
    control_channel: String,
    events: Arc<dyn EventHandler>,
    state: Mutex<State>,
    /// Notified on shutdown: ends the thread's reconnect back-off at once.
    stopped: Condvar,
}

/// A client's subscriber; see the module doc for the wake contract.
#[derive(Clone)]
pub(crate) struct Subscriber {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("Subscriber")
            .field("channels", &state.channels.len())
            .field("running", &state.thread_started)
            .finish()
    }
}

impl Subscriber {
    pub(crate) fn new(
        backend: Arc<dyn LockBackend>,
        client_id: &str,
        events: Arc<dyn EventHandler>,
    ) -> Self {
        Subscriber {
            shared: Arc::new(Shared {
                backend,
                control_channel: format!("redisync__control:{{{client_id}}}"),
                events,
                state: Mutex::new(State::default()),
                stopped: Condvar::new(),
            }),
        }
    }

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
                waiters: HashMap::new(),
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

    /// This client freed the lock for a waiter outside the store's queue
    /// (see `ops::handoff`): for [`YIELD_WINDOW`], its attempts on it keep
    /// off a free lock, as the queue's own do, so that waiter can take it.
    pub(crate) fn note_yield(&self, channel: &str) {
        let now = Instant::now();
        let mut state = self.shared.state.lock();
        state.yields.retain(|_, until| *until > now);
        if let Some(until) = now.checked_add(YIELD_WINDOW) {
            state.yields.insert(channel.to_owned(), until);
        }
    }

    /// Whether an attempt of this client on the lock of `channel` keeps off
    /// it while the store says it was freed for a waiter outside the queue
    /// (see `ops::handoff`): when this client freed it so within the last
    /// [`YIELD_WINDOW`] (see [`note_yield`](Self::note_yield)), and when it
    /// waited for it lately (the channel's entry lingers [`LINGER`] after
    /// the last wait): a first attempt after a wait, or after a sibling's
    /// release that freed it so, its message heard before that release
    /// could note it; and a free take that goes on a streak (the store
    /// counts it: see `lua/lock_acquire.lua`). An uncontended lock has no
    /// entry: its attempts skip the check.
    pub(crate) fn yielding(&self, channel: &str) -> bool {
        let state = self.shared.state.lock();
        state.channels.contains_key(channel)
            || state
                .yields
                .get(channel)
                .is_some_and(|until| Instant::now() < *until)
    }

    /// This client handed the lock to a waiter of the lock's queue in the
    /// store (see `ops::handoff`): its own streak of handoffs ends.
    pub(crate) fn end_streak(&self, channel: &str) {
        if let Some(entry) = self.shared.state.lock().channels.get_mut(channel) {
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

    /// Chooses a waiter of `channel` to hand the lock to directly: the
    /// longest-parked seated one, unless this client has handed the lock on
    /// [`MAX_HANDOFF_STREAK`] times in a row (then it is freed the usual
    /// way, so other clients' waiters get their turn). The chosen waiter
    /// attempts nothing until [`resolve`](Self::resolve) says how it went.
    pub(crate) fn offer(&self, channel: &str) -> Option<Offer> {
        let mut state = self.shared.state.lock();
        let entry = state.channels.get_mut(channel)?;
        if entry.streak >= MAX_HANDOFF_STREAK {
            return None;
        }
        let (id, waiter) = entry
            .waiters
            .iter_mut()
            .filter(|(_, w)| w.grant == Grant::Open && w.parked.is_some())
            .filter(|(_, w)| w.seat.is_some())
            .min_by_key(|(_, w)| w.parked)?;
        let seat = waiter.seat.clone()?;
        waiter.grant = Grant::Offered;
        Some(Offer {
            channel: channel.to_owned(),
            waiter: *id,
            seat,
        })
    }

    /// Tells an offered waiter how its handoff went and wakes it. Returns
    /// true when the lock was handed over but the waiter had stopped
    /// waiting: the caller must then release the waiter's hold itself.
    pub(crate) fn resolve(&self, offer: Offer, outcome: Handoff) -> bool {
        let mut state = self.shared.state.lock();
        let Some(entry) = state.channels.get_mut(&offer.channel) else {
            return matches!(outcome, Handoff::Granted(_));
        };
        if matches!(outcome, Handoff::Granted(_)) {
            entry.streak = entry.streak.saturating_add(1);
        }
        let Some(waiter) = entry.waiters.get_mut(&offer.waiter) else {
            return matches!(outcome, Handoff::Granted(_));
        };
        let withdrawn = waiter.grant == Grant::Withdrawn;
        waiter.grant = match outcome {
            _ if withdrawn => Grant::Open,
            Handoff::Granted(sent) => Grant::Granted(sent, None),
            Handoff::Refused => Grant::Open,
            Handoff::Unknown => Grant::Unknown,
        };
        // Parked or not, it re-checks: a grant, or permits a message left
        // while it was offered (wakes skip an offered waiter).
        waiter.parked = None;
        waiter.cond.notify_one();
        withdrawn && matches!(outcome, Handoff::Granted(_))
    }

    fn start_thread(&self) -> Result<()> {
        let weak = Arc::downgrade(&self.shared);
        std::thread::Builder::new()
            .name("redisync-subscriber".into())
            .spawn(move || run(weak))
            .map_err(|err| {
                Error::backend_caused_by("cannot start the subscriber thread", err, false)
            })?;
        Ok(())
    }

    /// Tells the thread to stop and wakes every waiter so none sleeps out
    /// its TTL. Does not wait: the thread notices within one tick (or when
    /// its current connection attempt ends), and a nudge or a join here could
    /// block the dropping thread for a connection timeout while Redis is down.
    pub(crate) fn shutdown(&self) {
        let mut state = self.shared.state.lock();
        state.shutdown = true;
        wake_all(&mut state);
        self.shared.stopped.notify_all();
    }
}

/// A direct handoff a releasing thread is making (see [`Subscriber::offer`]).
#[derive(Debug)]
pub(crate) struct Offer {
    channel: String,
    waiter: u64,
    pub(crate) seat: Seat,
}

impl Offer {
    /// The lock's channel (the release script's second key).
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }
}

/// How a direct handoff went.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Handoff {
    /// The lock is the waiter's; the handoff was sent at this instant.
    Granted(Instant),
    /// The lock was not handed over (the releaser still holds it, or never
    /// did).
    Refused,
    /// Unknown (a connection error).
    Unknown,
}

/// Why [`Subscription::wait_permit`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// It took a permit: retry.
    Permit,
    /// A release handed it the lock, in a script sent at this instant: it
    /// holds it (with a TTL of this length, when it is not the waiter's
    /// lease: see [`Grant::Granted`]).
    Granted(Instant, Option<Duration>),
    /// A handoff's outcome is unknown: retry (see [`Grant::Unknown`]).
    Retry,
    /// A release reserved the lock for it (see `ops::handoff`): its next
    /// attempt takes it.
    Reserved,
    /// Its park ended without either (the deadline, or shutdown).
    TimedOut,
    /// Its cancellation token was cancelled (an offer it had is withdrawn).
    Cancelled,
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
            if state.shutdown {
                return Woken::TimedOut;
            }
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
            match waiter.grant {
                Grant::Granted(sent, ttl) => {
                    waiter.grant = Grant::Open;
                    return granted(sent, ttl);
                }
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
                    Grant::Granted(sent, ttl) => {
                        waiter.grant = Grant::Open;
                        return granted(sent, ttl);
                    }
                    Grant::Offered => waiter.grant = Grant::Withdrawn,
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
        if let Some(entry) = state.channels.get_mut(&self.channel) {
            entry.waiters.remove(&self.id);
            entry.state.deregister(Instant::now());
        }
    }
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
fn wake_all(state: &mut State) {
    for entry in state.channels.values_mut() {
        entry.notify(Notify::All);
    }
}

/// The subscriber thread: (re)connects, then serves one session per connection.
fn run(weak: Weak<Shared>) {
    let mut backoff = RECONNECT_MIN;
    loop {
        let Some(shared) = weak.upgrade() else { return };
        if shared.state.lock().shutdown {
            return;
        }
        let backend = Arc::clone(&shared.backend);
        let mut connected = false;
        let result = backend.with_pubsub(&mut |conn| session(&shared, conn, &mut connected));
        {
            let mut state = shared.state.lock();
            // No connection at all (the server is down or refusing).
            let refused = result.is_err() && !connected;
            for entry in state.channels.values_mut() {
                // Messages may be lost until the resubscription: each waiter
                // retries once when it takes effect (`ChannelState::confirm`).
                entry.state.disconnected();
                // Without a connection, each retries once now instead, so a
                // waiting caller learns of the outage from its attempt.
                if refused {
                    let notify = entry.state.reconnect_failed();
                    entry.notify(notify);
                }
            }
            if state.shutdown {
                return;
            }
        }
        if let Err(err) = result {
            crate::telemetry::subscriber_reconnected();
            shared
                .events
                .on_subscriber_error(&SubscriberEvent::new(err));
        }
        if connected {
            backoff = RECONNECT_MIN;
        }
        // Not a plain sleep: with Redis down, a dropped client's thread
        // would live on for up to RECONNECT_MAX.
        {
            let mut state = shared.state.lock();
            if state.shutdown {
                return;
            }
            let _ = shared.stopped.wait_for(&mut state, backoff);
        }
        drop(shared);
        backoff = (backoff * 2).min(RECONNECT_MAX);
    }
}

/// One connection's life: subscribe what is wanted, dispatch messages, and
/// reconcile wishes on every nudge and tick. Returns on shutdown (`Ok`) or a
/// connection error.
fn session(shared: &Shared, conn: &mut dyn PubSubConnection, connected: &mut bool) -> Result<()> {
    conn.subscribe(std::slice::from_ref(&shared.control_channel))?;
    *connected = true;
    let mut first = true;
    loop {
        let (subscribe, unsubscribe) = {
            let mut state = shared.state.lock();
            if state.shutdown {
                return Ok(());
            }
            let now = Instant::now();
            let mut subscribe = std::mem::take(&mut state.pending_directs);
            let mut unsubscribe = Vec::new();
            let State {
                channels, directs, ..
            } = &mut *state;
            channels.retain(|channel, entry| match entry.state.sweep(now) {
                Sweep::Keep => true,
                Sweep::Subscribe => {
                    subscribe.push(channel.clone());
                    // In the same SUBSCRIBE: its confirmation covers both.
                    subscribe.extend(entry.direct.iter().cloned());
                    true
                }
                Sweep::Remove {
                    unsubscribe: subscribed,
                } => {
                    if let Some(direct) = &entry.direct {
                        directs.remove(direct);
                        if subscribed {
                            unsubscribe.push(direct.clone());
                        }
                    }
                    if subscribed {
                        unsubscribe.push(channel.clone());
                    }
                    false
                }
            });
            subscribe.sort_unstable();
            subscribe.dedup();
            (subscribe, unsubscribe)
        };
        if !subscribe.is_empty() {
            conn.subscribe(&subscribe)?;
            let mut state = shared.state.lock();
            for channel in &subscribe {
                if let Some(entry) = state.channels.get_mut(channel) {
                    // Every waiter retries once now, each its own retry: an
                    // unlock published before the subscription took effect
                    // was not seen.
                    let notify = entry.state.confirm();
                    entry.notify(notify);
                }
            }
        }
        if first {
            first = false;
            shared.events.on_subscriber_connected();
        }
        conn.unsubscribe(&unsubscribe)?;
        if let Some(message) = conn.next_message(TICK)? {
            if message.channel == shared.control_channel {
                continue;
            }
            let mut state = shared.state.lock();
            if let Some(entry) = state.channels.get_mut(&message.channel) {
                // A fair lock's release handed the lock outright to a
                // waiter on its own channel (`ops::fair_lock`): no wake.
                if message.payload.starts_with("h:") {
                    let server_now = shared.backend.server_now_ms();
                    entry.direct_message(&message.payload, Instant::now(), server_now);
                    continue;
                }
                let notify = entry.state.deliver(&message.payload);
                entry.notify(notify);
            } else if let Some(channel) = state.directs.get(&message.channel).cloned()
                && let Some(entry) = state.channels.get_mut(&channel)
            {
                let server_now = shared.backend.server_now_ms();
                entry.direct_message(&message.payload, Instant::now(), server_now);
            }
        }
    }
}
