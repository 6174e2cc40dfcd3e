//! Direct handoffs: a releasing thread hands a reentrant lock straight to a
//! parked waiter of its own client, and a release in any client hands it to
//! a queued waiter by a message on the waiter's direct channel.
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

use std::time::{Duration, Instant};

use super::{Entry, Subscriber, Waiter, Woken};

/// How long a release that freed a reentrant lock for a waiter outside the
/// store's queue keeps this client's attempts off it (the store keeps the
/// queue's off it as long: `YIELD_MS` in `lua/lock_release.lua`).
const YIELD_WINDOW: Duration = Duration::from_millis(100);

/// How many direct handoffs in a row one client makes on a lock before it
/// frees it the usual way (publishing its unlock), so that other clients'
/// waiters get their turn.
pub(crate) const MAX_HANDOFF_STREAK: u32 = 16;

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
    /// An attempt of this wait was sent, so it may be in the store's queue:
    /// a release that hands it the lock takes its entry out. A waiter that
    /// parked at once (a sibling held the lock) sent none, and its handoff
    /// skips that call (see `Subscription::attempting`).
    pub(crate) queued: bool,
    /// Its hold would be its thread's, renewed by the watchdog: a releasing
    /// thread of its client may pass it a hold as it is (see
    /// [`Subscriber::offer_to_adopt`]).
    pub(crate) adopts: bool,
}

/// A hold passed between two threads of one client (see
/// [`Subscriber::offer_to_adopt`]): what the lock needs to take it over, opaque here.
/// Its owner releases the hold when it is dropped untaken (its waiter gone).
pub(crate) struct Baton(pub(crate) Box<dyn std::any::Any + Send>);

impl std::fmt::Debug for Baton {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Baton")
    }
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
pub(super) enum Grant {
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
    /// another client: the claim window, until its watchdog renews it);
    /// and how many times it may pass the hold on inside the client (see
    /// [`Subscriber::offer_to_adopt`]).
    Granted(Instant, Option<Duration>, u32),
    /// A releasing thread of its client passed it its hold, with no call to
    /// the store: the hold is in the waiter's [`Baton`].
    Adopted,
    /// The handoff's outcome is unknown (a connection error): it attempts
    /// again (a reentrant acquisition if the handoff landed, whose extra
    /// hold its outermost unlock drains).
    Unknown,
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
    /// The lock is the waiter's; the handoff was sent at this instant, and
    /// the waiter may pass it on inside the client this many times.
    Granted(Instant, u32),
    /// The lock was not handed over (the releaser still holds it, or never
    /// did).
    Refused,
    /// Unknown (a connection error).
    Unknown,
}

/// A direct message that found no registered waiter (see
/// [`Entry::unclaimed`]).
#[derive(Debug)]
pub(super) struct Unclaimed {
    pub(super) field: String,
    /// When it came: only a waiter whose wait began earlier takes it (one
    /// that began later is not the one it was for).
    pub(super) at: Instant,
    pub(super) direct: Direct,
}

/// What a direct message tells its waiter (see [`Entry::direct_message`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Direct {
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
    pub(super) fn apply(self, waiter: &mut Waiter) {
        match self {
            Direct::Handed(at, ttl, wait)
                if waiter.grant == Grant::Open
                    && waiter.seat.as_ref().and_then(|seat| seat.wait) == Some(wait) =>
            {
                waiter.grant = Grant::Granted(at, Some(ttl), 0);
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
pub(super) fn granted(sent: Instant, ttl: Option<Duration>, passes: u32) -> Woken {
    match ttl {
        Some(ttl) if sent.elapsed() >= ttl / HANDED_TRUSTED_FOR => Woken::Reserved,
        _ => Woken::Granted(sent, ttl, passes),
    }
}

/// How long an unclaimed direct message waits for its waiter to register
/// (a failed attempt's registration follows it at once).
pub(super) const UNCLAIMED_FOR: Duration = Duration::from_secs(10);

impl Subscriber {
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
    /// waited for it lately (the channel's entry lingers [`LINGER`](super::channel::LINGER) after
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

    /// Chooses a waiter of `channel` to hand the lock to directly: the
    /// longest-parked seated one, unless this client has handed the lock on
    /// [`MAX_HANDOFF_STREAK`] times in a row (then it is freed the usual
    /// way, so other clients' waiters get their turn). The chosen waiter
    /// attempts nothing until [`resolve`](Self::resolve) says how it went.
    pub(crate) fn offer(&self, channel: &str) -> Option<Offer> {
        self.offer_if(channel, |_| true)
    }

    /// [`offer`](Self::offer), if the chosen waiter's seat `fits`.
    fn offer_if(&self, channel: &str, fits: impl Fn(&Seat) -> bool) -> Option<Offer> {
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
        let seat = waiter.seat.clone().filter(|seat| fits(seat))?;
        waiter.grant = Grant::Offered;
        Some(Offer {
            channel: channel.to_owned(),
            waiter: *id,
            seat,
        })
    }

    /// Chooses, as [`offer`](Self::offer) does, the longest-parked waiter
    /// of `channel` to pass the releasing thread's hold to with no call to
    /// the store, if that waiter can take it over as it is: it would hold
    /// its thread's hold of the same kind (`leased`: a fixed lease, else the
    /// watchdog's; its seat `adopts`), and it sent no attempt in this wait,
    /// so it has no entry in the store's queue to leave. Anyone else: `None`
    /// (the release goes to the store, which hands it the lock if it is the
    /// one). The chosen waiter attempts nothing until
    /// [`resolve_pass`](Self::resolve_pass) or [`resolve`](Self::resolve).
    pub(crate) fn offer_to_adopt(&self, channel: &str, leased: bool) -> Option<Offer> {
        self.offer_if(channel, |seat| {
            seat.adopts && !seat.queued && seat.leased == leased
        })
    }

    /// Passes the offered waiter the hold in `baton` and wakes it. Counts in
    /// the client's streak like a handoff (the store's count of redisync
    /// holders in a row takes the passes in at the next release it sees:
    /// see `ops::handoff::release`). Returns the waiter's hash
    /// field, or the baton back when the waiter stopped waiting meanwhile:
    /// the releasing thread still holds it.
    pub(crate) fn resolve_pass(&self, offer: Offer, baton: Baton) -> Result<String, Baton> {
        let mut state = self.shared.state.lock();
        let Some(entry) = state.channels.get_mut(&offer.channel) else {
            return Err(baton);
        };
        let Some(waiter) = entry.waiters.get_mut(&offer.waiter) else {
            return Err(baton);
        };
        if waiter.grant != Grant::Offered {
            // Withdrawn: it goes back to waiting, as after a refused handoff.
            waiter.grant = Grant::Open;
            waiter.parked = None;
            waiter.cond.notify_one();
            return Err(baton);
        }
        waiter.grant = Grant::Adopted;
        waiter.baton = Some(baton);
        waiter.parked = None;
        waiter.cond.notify_one();
        entry.streak = entry.streak.saturating_add(1);
        Ok(offer.seat.field)
    }

    /// Tells an offered waiter how its handoff went and wakes it. Returns
    /// true when the lock was handed over but the waiter had stopped
    /// waiting: the caller must then release the waiter's hold itself.
    pub(crate) fn resolve(&self, offer: Offer, outcome: Handoff) -> bool {
        let mut state = self.shared.state.lock();
        let Some(entry) = state.channels.get_mut(&offer.channel) else {
            return matches!(outcome, Handoff::Granted(..));
        };
        if matches!(outcome, Handoff::Granted(..)) {
            entry.streak = entry.streak.saturating_add(1);
        }
        let Some(waiter) = entry.waiters.get_mut(&offer.waiter) else {
            return matches!(outcome, Handoff::Granted(..));
        };
        let withdrawn = waiter.grant == Grant::Withdrawn;
        waiter.grant = match outcome {
            _ if withdrawn => Grant::Open,
            Handoff::Granted(sent, passes) => Grant::Granted(sent, None, passes),
            Handoff::Refused => Grant::Open,
            Handoff::Unknown => Grant::Unknown,
        };
        // Parked or not, it re-checks: a grant, or permits a message left
        // while it was offered (wakes skip an offered waiter).
        waiter.parked = None;
        waiter.cond.notify_one();
        withdrawn && matches!(outcome, Handoff::Granted(..))
    }
}

impl Entry {
    /// A message on the entry's direct channel (see `ops::handoff`), for
    /// the waiter whose holder id it names: `h:<server ms>:<claim ms>:<wait
    /// id>:<id>`, the lock is its own (handed at that time by the server's
    /// clock, for that long unless renewed); `g:<id>`, the lock is reserved
    /// for it and it tries at once. A message for a waiter that is not registered is kept
    /// for it a while (see [`Entry::unclaimed`]); if it left, the hold runs
    /// out after its claim window.
    pub(super) fn direct_message(
        &mut self,
        payload: &str,
        now: Instant,
        server_now_ms: Option<i64>,
    ) {
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
}
