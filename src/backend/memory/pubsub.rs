//! Pub/sub: the open [`with_pubsub`](LockBackend::with_pubsub) connections
//! of a store and the delivery of published messages to them.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;

#[cfg(doc)]
use crate::backend::LockBackend;
use crate::backend::{Message, PubSubConnection};
use crate::{Error, Result};

/// The registry of open pub/sub connections.
#[derive(Debug, Default)]
pub(super) struct Subscribers {
    next_id: u64,
    connections: HashMap<u64, Subscriber>,
}

/// The store's side of one open pub/sub connection.
#[derive(Debug)]
struct Subscriber {
    channels: HashSet<String>,
    sender: Sender<Message>,
    killed: Arc<AtomicBool>,
}

impl Subscribers {
    /// Delivers `payload` to every live connection subscribed to `channel`;
    /// returns how many received it (Redis' `PUBLISH` reply).
    pub(super) fn publish(&self, channel: &str, payload: &str) -> usize {
        let mut delivered = 0;
        for subscriber in self.connections.values() {
            // Acquire: pairs with `kill_all`'s Release (the subscribers'
            // lock orders them here too; every load of the flag is alike).
            if subscriber.channels.contains(channel) && !subscriber.killed.load(Ordering::Acquire) {
                // Unbounded: never blocks. Fails only if the receiver is
                // gone, which is fire and forget like Redis.
                if subscriber
                    .sender
                    .send(Message::new(channel, payload))
                    .is_ok()
                {
                    delivered += 1;
                }
            }
        }
        delivered
    }

    /// How many connections are subscribed to `channel` (Redis' `PUBSUB
    /// NUMSUB`).
    pub(super) fn numsub(&self, channel: &str) -> usize {
        self.connections
            .values()
            // Acquire: as in `publish`.
            .filter(|s| s.channels.contains(channel) && !s.killed.load(Ordering::Acquire))
            .count()
    }

    /// How many connections are open.
    pub(super) fn len(&self) -> usize {
        self.connections.len()
    }

    /// Fails every open connection (`CLIENT KILL TYPE pubsub`): dropping
    /// the senders wakes every blocked receiver with `Disconnected`; the
    /// flag fails the next call even if messages are still queued.
    pub(super) fn kill_all(&mut self) {
        for (_, subscriber) in self.connections.drain() {
            // Release: the connection's thread reads the flag without the
            // subscribers' lock (`next_message`), after it sees its
            // channel's sender dropped; Acquire there pairs with this.
            subscriber.killed.store(true, Ordering::Release);
        }
    }
}

/// Opens a connection on `subscribers` (deregistered when dropped, even if
/// the session unwinds).
pub(super) fn open(subscribers: &Arc<Mutex<Subscribers>>) -> MemoryPubSub {
    let (sender, receiver) = crossbeam_channel::unbounded();
    let killed = Arc::new(AtomicBool::new(false));
    let id = {
        let mut registry = subscribers.lock();
        let id = registry.next_id;
        registry.next_id = registry.next_id.wrapping_add(1);
        registry.connections.insert(
            id,
            Subscriber {
                channels: HashSet::new(),
                sender,
                killed: Arc::clone(&killed),
            },
        );
        id
    };
    MemoryPubSub {
        subscribers: Arc::clone(subscribers),
        id,
        receiver,
        killed,
    }
}

/// One open pub/sub connection of a `MemoryBackend`, lent to a
/// [`with_pubsub`](LockBackend::with_pubsub) session. Subscribing is
/// confirmed at once: a message published after `subscribe` returns is
/// delivered.
pub(super) struct MemoryPubSub {
    subscribers: Arc<Mutex<Subscribers>>,
    id: u64,
    receiver: Receiver<Message>,
    killed: Arc<AtomicBool>,
}

impl fmt::Debug for MemoryPubSub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryPubSub")
            .field("id", &self.id)
            // Relaxed: a snapshot for a debug print, ordered with nothing.
            .field("killed", &self.killed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl MemoryPubSub {
    fn killed_error() -> Error {
        Error::backend("memory pub/sub connection killed", true)
    }

    /// Applies `change` to this connection's channel set, or fails if the
    /// connection was killed.
    fn update_channels(&self, change: impl FnOnce(&mut HashSet<String>)) -> Result<()> {
        let mut subscribers = self.subscribers.lock();
        match subscribers.connections.get_mut(&self.id) {
            // Acquire: pairs with `kill_all`'s Release.
            Some(subscriber) if !self.killed.load(Ordering::Acquire) => {
                change(&mut subscriber.channels);
                Ok(())
            }
            _ => Err(Self::killed_error()),
        }
    }
}

impl PubSubConnection for MemoryPubSub {
    fn subscribe(&mut self, channels: &[String]) -> Result<()> {
        self.update_channels(|set| set.extend(channels.iter().cloned()))
    }

    fn unsubscribe(&mut self, channels: &[String]) -> Result<()> {
        self.update_channels(|set| {
            for channel in channels {
                set.remove(channel);
            }
        })
    }

    fn next_message(&mut self, timeout: Duration) -> Result<Option<Message>> {
        // Acquire: pairs with `kill_all`'s Release, so a killed connection
        // fails even with messages still queued.
        if self.killed.load(Ordering::Acquire) {
            return Err(Self::killed_error());
        }
        match self.receiver.recv_timeout(timeout) {
            Ok(message) => Ok(Some(message)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(Self::killed_error()),
        }
    }
}

impl Drop for MemoryPubSub {
    fn drop(&mut self) {
        self.subscribers.lock().connections.remove(&self.id);
    }
}
