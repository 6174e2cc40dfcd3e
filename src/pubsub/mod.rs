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
//!    a permit if it moved. A subscription confirmation counts as a delivery,
//!    so a reconnect between the attempt and the registration (an unlock
//!    lost while unsubscribed) moves the count too. The TTL bound means a
//!    message lost anyway costs one retry, never a hang.
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

use self::channel::{ChannelState, Notify, Sweep};
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

/// A channel's state and the condvar its parked waiters sleep on.
#[derive(Debug)]
struct Entry {
    state: ChannelState,
    cond: Arc<Condvar>,
}

impl Entry {
    /// Does what a transition asked of the condvar.
    fn notify(&self, notify: Notify) {
        match notify {
            Notify::Some(n) => {
                for _ in 0..n {
                    self.cond.notify_one();
                }
            }
            Notify::All => {
                self.cond.notify_all();
            }
        }
    }
}

#[derive(Debug, Default)]
struct State {
    channels: HashMap<String, Entry>,
    /// Entries created so far: each new entry's message count starts in a
    /// range of its own, so a snapshot taken from an entry that lingered out
    /// never matches the count of the entry that replaced it.
    entries_created: u64,
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
        let State {
            channels,
            entries_created,
            ..
        } = &mut *state;
        let entry = channels.entry(channel.to_owned()).or_insert_with(|| {
            *entries_created = entries_created.wrapping_add(1);
            Entry {
                state: ChannelState::starting_at(wake, *entries_created << 32),
                cond: Arc::new(Condvar::new()),
            }
        });
        let nudge = entry.state.register(seen) && !start;
        // From here on, dropping the subscription undoes the registration.
        let subscription = Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            cond: Arc::clone(&entry.cond),
            passed: std::cell::Cell::new(None),
            woken_at: std::cell::Cell::new(0),
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
    /// The message count when it last took a permit (the wake it retries on).
    woken_at: std::cell::Cell<u64>,
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
            if let Some(woken_at) = entry.state.take_permit(self.passed.get()) {
                self.woken_at.set(woken_at);
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
            && let Some((passed, notify)) = entry.state.pass_on(self.woken_at.get())
        {
            self.passed.set(Some(passed));
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

/// Gives every waiter a permit and wakes it (reconnect, shutdown).
fn wake_all(state: &mut State) {
    for entry in state.channels.values_mut() {
        let notify = entry.state.wake_all();
        entry.notify(notify);
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
            // Messages may have been lost while disconnected: everyone retries.
            for entry in state.channels.values_mut() {
                let notify = entry.state.disconnected();
                entry.notify(notify);
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
            let mut subscribe = Vec::new();
            let mut unsubscribe = Vec::new();
            state
                .channels
                .retain(|channel, entry| match entry.state.sweep(now) {
                    Sweep::Keep => true,
                    Sweep::Subscribe => {
                        subscribe.push(channel.clone());
                        true
                    }
                    Sweep::Remove {
                        unsubscribe: subscribed,
                    } => {
                        if subscribed {
                            unsubscribe.push(channel.clone());
                        }
                        false
                    }
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
                let notify = entry.state.deliver(&message.payload);
                entry.notify(notify);
            }
        }
    }
}
