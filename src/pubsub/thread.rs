//! The subscriber thread: one per client, with one pub/sub connection at a
//! time; it (re)connects with a back-off, subscribes and unsubscribes what
//! the waiters want, and turns each message into wakes or a direct handoff.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::channel::Sweep;
use super::{Shared, State};
use crate::Result;
use crate::backend::PubSubConnection;
use crate::event::SubscriberEvent;

/// How long the subscriber blocks on the socket before it checks for new
/// wishes and shutdown (a liveness tick, not a poll of Redis).
const TICK: Duration = Duration::from_millis(200);

/// Reconnect back-off bounds.
const RECONNECT_MIN: Duration = Duration::from_millis(20);
const RECONNECT_MAX: Duration = Duration::from_secs(1);

/// The subscriber thread: (re)connects, then serves one session per connection.
pub(super) fn run(weak: Weak<Shared>) {
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
    // When the wishes were last reconciled (`None`: due now). Only on a
    // nudge (the control channel) and once per tick, not after every lock
    // message: the sweep visits every channel under the state's mutex,
    // which a woken waiter wants at that very moment.
    let mut swept_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        // What is left of the tick since the last sweep, rounded up to a
        // quarter tick (each new read timeout is a system call): the wait
        // for a message ends by then, so sweeps (and a shutdown's notice)
        // stay at most a tick and a quarter apart however messages come.
        let left = swept_at.map_or(Duration::ZERO, |at| {
            TICK.saturating_sub(now.saturating_duration_since(at))
        });
        if !left.is_zero() {
            let quarter = TICK / 4;
            let wait =
                quarter * u32::try_from(left.as_nanos().div_ceil(quarter.as_nanos())).unwrap_or(4);
            if !dispatch(shared, conn, wait)? {
                swept_at = None;
            }
            continue;
        }
        swept_at = Some(now);
        let (subscribe, unsubscribe) = {
            let mut state = shared.state.lock();
            if state.shutdown {
                return Ok(());
            }
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
        if !dispatch(shared, conn, TICK)? {
            swept_at = None;
        }
    }
}

/// Waits up to `timeout` for one message and turns it into wakes or a
/// direct handoff. False for a nudge (a message on the control channel):
/// the wishes are then reconciled at once.
fn dispatch(shared: &Shared, conn: &mut dyn PubSubConnection, timeout: Duration) -> Result<bool> {
    let Some(message) = conn.next_message(timeout)? else {
        return Ok(true);
    };
    if message.channel == shared.control_channel {
        return Ok(false);
    }
    let mut state = shared.state.lock();
    if let Some(entry) = state.channels.get_mut(&message.channel) {
        // A fair lock's release handed the lock outright to a waiter on its
        // own channel (`ops::fair_lock`): no wake.
        if message.payload.starts_with("h:") {
            let server_now = shared.backend.server_now_ms();
            entry.direct_message(&message.payload, Instant::now(), server_now);
            return Ok(true);
        }
        let notify = entry.state.deliver(&message.payload);
        entry.notify(notify);
    } else if let Some(channel) = state.directs.get(&message.channel).cloned()
        && let Some(entry) = state.channels.get_mut(&channel)
    {
        let server_now = shared.backend.server_now_ms();
        entry.direct_message(&message.payload, Instant::now(), server_now);
    }
    Ok(true)
}
