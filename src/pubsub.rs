//! The subscriber: one thread and one pub/sub connection per `Client`, which
//! turns Redis messages into wake-ups for parked waiters.
//!
//! # Wake contract (per client, per channel)
//!
//! Each subscribed channel has an entry: a count of the waiters that want it,
//! a count of stored permits, and a condvar, all under one mutex.
//!
//! 1. A waiter registers ([`Subscriber::subscribe`]); the first one for a
//!    channel asks the subscriber thread to SUBSCRIBE (it pushes the wish into
//!    the shared state and nudges the thread with a message on the client's
//!    control channel). The confirmation gives every waiter of the channel a
//!    permit, so each retries once the subscription is live and an unlock
//!    published in between cannot be missed.
//! 2. After a failed retry it parks ([`Subscription::wait_permit`]) until a
//!    permit is available or the TTL the failed attempt returned has passed,
//!    and takes one permit.
//! 3. A message adds permits by the channel's [`Wake`] policy: one for an
//!    unlock (one waiter per client retries, not a herd), all for a broadcast.
//!    A reconnect wakes everyone: messages may have been lost meanwhile.
//! 4. Permits are stored, capped at the number of waiters, so a message that
//!    arrives between a failed attempt and the park is not lost (tokio's
//!    `Notify` idea). A message that arrives between a waiter's first failed
//!    attempt and its registration, when no other waiter could keep it, is
//!    caught by the channel's delivered-message count: the waiter compares
//!    the count it saw before the attempt ([`Subscriber::snapshot`]) and takes
//!    a permit if it moved. The TTL bound means a message lost anyway costs
//!    one retry, never a hang.
//!
//! A channel whose last waiter left stays subscribed for a short linger, so a
//! lock contended again and again does not pay SUBSCRIBE every time; the
//! thread unsubscribes it on a later tick.
//!
//! To stop one client's threads from barging past its own parked waiters, a
//! release that wakes a local waiter marks the channel for a short handoff
//! window; during it, a new local attempt queues instead of racing the woken
//! waiter ([`Snapshot::handoff_pending`]).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::backend::{LockBackend, PubSubConnection};
use crate::event::{EventHandler, SubscriberEvent};
use crate::{Error, Result};

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

/// How a message on a channel wakes that channel's waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

#[derive(Debug)]
struct Entry {
    waiters: usize,
    permits: usize,
    /// Subscribed on the current connection.
    confirmed: bool,
    wake: Wake,
    cond: Arc<Condvar>,
    /// When the last waiter left (for the linger).
    idle_since: Option<Instant>,
    /// Until when new local attempts defer to a woken waiter.
    handoff_until: Option<Instant>,
    /// Messages delivered on this channel so far (see [`Snapshot`]).
    delivered: u64,
    /// How many more times a woken waiter that cannot use its wake may pass
    /// it on (semaphores: a waiter for 2 permits woken by a release of 1
    /// hands the wake to one that needs 1).
    passes: usize,
}

/// A channel's state seen before a waiter's first attempt; see
/// [`Subscriber::snapshot`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot {
    handoff: bool,
    delivered: Option<u64>,
}

impl Snapshot {
    /// True while a woken local waiter is retrying: a new local attempt
    /// should queue behind it rather than barge.
    pub(crate) fn handoff_pending(&self) -> bool {
        self.handoff
    }
}

#[derive(Debug, Default)]
struct State {
    channels: HashMap<String, Entry>,
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
            Some(entry) => Snapshot {
                handoff: entry.waiters > 0
                    && entry.handoff_until.is_some_and(|t| t > Instant::now()),
                delivered: Some(entry.delivered),
            },
            None => Snapshot {
                handoff: false,
                delivered: None,
            },
        }
    }

    /// Registers a waiter on `channel`, starting the thread and asking for a
    /// SUBSCRIBE if it is the first. `seen` is the snapshot taken before the
    /// waiter's failed attempt: if the channel was already subscribed and a
    /// message arrived since (or `seen` cannot tell), the waiter gets a permit,
    /// because that message found no waiter to keep it for.
    pub(crate) fn subscribe(
        &self,
        channel: &str,
        wake: Wake,
        seen: Snapshot,
    ) -> Result<Subscription> {
        let mut state = self.shared.state.lock();
        if state.shutdown {
            return Err(Error::backend("the client is shutting down", false));
        }
        let start = !state.thread_started;
        state.thread_started = true;
        let entry = state
            .channels
            .entry(channel.to_owned())
            .or_insert_with(|| Entry {
                waiters: 0,
                permits: 0,
                confirmed: false,
                wake,
                cond: Arc::new(Condvar::new()),
                idle_since: None,
                handoff_until: None,
                delivered: 0,
                passes: 0,
            });
        entry.waiters += 1;
        entry.idle_since = None;
        if entry.confirmed && seen.delivered != Some(entry.delivered) {
            entry.permits = (entry.permits + 1).min(entry.waiters);
        }
        let nudge = !entry.confirmed && entry.waiters == 1 && !start;
        // From here on, dropping the subscription undoes the registration.
        let subscription = Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            cond: Arc::clone(&entry.cond),
            passed: std::cell::Cell::new(None),
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
        if let Some(entry) = state.channels.get_mut(channel)
            && entry.waiters > 0
        {
            entry.handoff_until = Instant::now().checked_add(HANDOFF_WINDOW);
        }
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

/// One waiter's registration on a channel; dropping it deregisters.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    cond: Arc<Condvar>,
    /// The message count when this waiter last passed a wake on: it takes
    /// no permit again until a newer message arrives.
    passed: std::cell::Cell<Option<u64>>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("channel", &self.channel)
            .finish()
    }
}

impl Subscription {
    /// Parks until a permit is available (and takes it) or `until` passes.
    /// Returns whether a permit was taken.
    pub(crate) fn wait_permit(&self, until: Option<Instant>) -> bool {
        let mut state = self.shared.state.lock();
        loop {
            if state.shutdown {
                return false;
            }
            let Some(entry) = state.channels.get_mut(&self.channel) else {
                return false;
            };
            if entry.permits > 0 && self.passed.get() != Some(entry.delivered) {
                entry.permits -= 1;
                return true;
            }
            if wait(&self.cond, &mut state, until) {
                return false;
            }
        }
    }

    /// A woken waiter could not use its wake: hand it to another waiter, if
    /// the last message still allows (bounded, so two waiters that both
    /// cannot use it do not pass it back and forth).
    pub(crate) fn pass_on(&self) {
        let mut state = self.shared.state.lock();
        if let Some(entry) = state.channels.get_mut(&self.channel)
            && entry.passes > 0
        {
            entry.passes -= 1;
            entry.permits = (entry.permits + 1).min(entry.waiters);
            self.passed.set(Some(entry.delivered));
            // Every parked waiter looks; the passer itself will not take it.
            entry.cond.notify_all();
        }
    }

    /// The woken waiter finished its retry: close the handoff window.
    pub(crate) fn handoff_done(&self) {
        let mut state = self.shared.state.lock();
        if let Some(entry) = state.channels.get_mut(&self.channel) {
            entry.handoff_until = None;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        if let Some(entry) = state.channels.get_mut(&self.channel) {
            entry.waiters = entry.waiters.saturating_sub(1);
            entry.permits = entry.permits.min(entry.waiters);
            if entry.waiters == 0 {
                entry.idle_since = Some(Instant::now());
                entry.handoff_until = None;
            }
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

/// Gives every waiter a permit and wakes it (reconnect, shutdown).
fn wake_all(state: &mut State) {
    for entry in state.channels.values_mut() {
        entry.permits = entry.waiters;
        entry.cond.notify_all();
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
            for entry in state.channels.values_mut() {
                entry.confirmed = false;
            }
            // Messages may have been lost while disconnected: everyone retries.
            wake_all(&mut state);
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
            let mut subscribe = Vec::new();
            let mut unsubscribe = Vec::new();
            state.channels.retain(|channel, entry| {
                let expired = entry.waiters == 0
                    && entry
                        .idle_since
                        .is_some_and(|t| now.duration_since(t) >= LINGER);
                if expired {
                    if entry.confirmed {
                        unsubscribe.push(channel.clone());
                    }
                    return false;
                }
                if !entry.confirmed && entry.waiters > 0 {
                    subscribe.push(channel.clone());
                }
                true
            });
            (subscribe, unsubscribe)
        };
        if !subscribe.is_empty() {
            conn.subscribe(&subscribe)?;
            let mut state = shared.state.lock();
            for channel in &subscribe {
                if let Some(entry) = state.channels.get_mut(channel) {
                    // Every waiter retries once now: an unlock published
                    // before the subscription took effect was not seen.
                    entry.confirmed = true;
                    entry.permits = entry.waiters;
                    entry.cond.notify_all();
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
                entry.delivered = entry.delivered.wrapping_add(1);
                let woken = match entry.wake {
                    Wake::Lock if message.payload == crate::keys::READ_UNLOCK_MESSAGE => {
                        entry.waiters
                    }
                    Wake::Lock => 1,
                    // A count of zero or less wakes nobody; an unreadable
                    // one lets everyone look.
                    Wake::Semaphore => match message.payload.parse::<i64>() {
                        Ok(count) => usize::try_from(count).unwrap_or(0),
                        Err(_) => entry.waiters,
                    },
                    Wake::Latch if message.payload == crate::keys::LATCH_ZERO_MESSAGE => {
                        entry.waiters
                    }
                    Wake::Latch => 0,
                };
                entry.permits = entry.permits.saturating_add(woken).min(entry.waiters);
                // Only a semaphore's wake may be passed on: a failed lock
                // retry means someone else holds it.
                entry.passes = if entry.wake == Wake::Semaphore {
                    entry.waiters
                } else {
                    0
                };
                if woken >= entry.waiters {
                    entry.cond.notify_all();
                } else {
                    for _ in 0..woken {
                        entry.cond.notify_one();
                    }
                }
            }
        }
    }
}
