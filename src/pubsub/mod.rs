//! The subscriber: one thread and one pub/sub connection per `Client`,
//! which turns Redis messages into wake-ups for parked waiters. This file
//! holds its shared state (a channel's entry, its waiters, each with a
//! condvar of its own, under one mutex) and its life (start, shutdown);
//! the rest has a file per concern:
//!
//! | file | what lives there |
//! |---|---|
//! | `wake.rs` | the wake contract: registering, parking, waking waiters |
//! | `handoff.rs` | direct handoffs: a lock handed straight to a waiter |
//! | `thread.rs` | the subscriber thread: (re)connecting, subscribing, dispatching |
//! | `channel.rs` | one channel's transitions, a pure state machine |
//!
//! The per-channel transitions themselves live in [`channel`], a pure state
//! machine the code here runs under its mutex; `model_tests` checks them
//! against every interleaving of waiters, releases, messages and reconnects.
mod channel;
mod handoff;
#[cfg(test)]
mod model_tests;
mod thread;
mod wake;

use crate::fast_map::FastMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::backend::LockBackend;
use crate::event::EventHandler;
use crate::{Error, Result};

pub(crate) use self::channel::HANDOFF_WINDOW;
pub(crate) use self::channel::Wake;
use self::channel::{ChannelState, WaiterState};
pub(crate) use self::handoff::{Baton, Handoff, MAX_HANDOFF_STREAK, Offer, Seat};
use self::handoff::{Grant, Unclaimed};
pub(crate) use self::wake::Woken;
use self::wake::wake_all;

/// A channel's state and its registered waiters, each with a condvar of its
/// own, so that a wake reaches the longest-parked waiter and a direct
/// handoff reaches exactly the waiter it chose.
#[derive(Debug)]
struct Entry {
    state: ChannelState,
    waiters: FastMap<u64, Waiter>,
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

#[derive(Debug)]
struct Waiter {
    cond: Arc<Condvar>,
    /// The number of its current park, while parked.
    parked: Option<u64>,
    seat: Option<Seat>,
    grant: Grant,
    /// The hold a releasing thread passed it ([`Grant::Adopted`]).
    baton: Option<Baton>,
    /// A release (in any client) reserved the lock for it: its next attempt
    /// takes it.
    reserved: bool,
    /// Its part of the wake state (see [`WaiterState`]).
    own: WaiterState,
}

#[derive(Debug, Default)]
struct State {
    channels: FastMap<String, Entry>,
    /// Each entry's direct channel (see [`Entry::direct`]) to the entry's
    /// own.
    directs: FastMap<String, String>,
    /// Direct channels added to an entry that was subscribed already.
    pending_directs: Vec<String>,
    /// Until when this client's attempts keep off each channel's free lock
    /// (see [`Subscriber::note_yield`]): apart from the entries, as the
    /// client that freed it need not have waited for it.
    yields: FastMap<String, Instant>,
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

/// A client's subscriber; see `wake.rs` for the wake contract and
/// `handoff.rs` for direct handoffs.
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

    fn start_thread(&self) -> Result<()> {
        let weak = Arc::downgrade(&self.shared);
        std::thread::Builder::new()
            .name("redisync-subscriber".into())
            .spawn(move || self::thread::run(weak))
            .map_err(|err| {
                Error::backend_caused_by("cannot start the subscriber thread", err, false)
            })?;
        Ok(())
    }

    /// Tells the thread to stop and wakes every waiter so none sleeps out
    /// its TTL. Does not wait: the thread notices within a tick and a
    /// quarter (or when its current connection attempt ends), and a nudge or
    /// a join here could block the dropping thread for a connection timeout
    /// while Redis is down.
    pub(crate) fn shutdown(&self) {
        let mut state = self.shared.state.lock();
        state.shutdown = true;
        wake_all(&mut state);
        self.shared.stopped.notify_all();
    }
}
