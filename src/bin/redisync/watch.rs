//! `redisync watch NAME [--for DURATION]`: prints each unlock message,
//! acquisition, release and queue change under NAME as it happens.
//!
//! Unlock messages come from the client's own kind of pub/sub connection
//! ([`LockBackend::with_pubsub`](redisync::LockBackend::with_pubsub):
//! one server, the Sentinel master, or a cluster's sharded pub/sub on the
//! name's slot master), subscribed to NAME's channels: the lock's, each
//! queued fair-lock waiter's own (followed as the queue changes), the
//! read-write lock's, the semaphore's and the latch's. Acquisitions,
//! releases and queue changes come from diffing
//! [`Client::inspect`](redisync::Client::inspect) snapshots taken every
//! [`POLL`].

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use redisync::PubSubConnection;
use redisync::{Client, Inspection, ObjectKind};
use serde_json::json;

use crate::inspect::{kind_id, mode_name};
use crate::{Failure, Outcome, Target, clock_time, now_ms, prefixed, ttl_text};

/// How often NAME is inspected (and how long a pub/sub read waits).
const POLL: Duration = Duration::from_millis(50);

/// Runs `watch`.
pub(crate) fn run(target: &Target, name: &str, duration: Option<Duration>) -> Outcome {
    let client = target.client()?;
    let until = duration.map(|duration| Instant::now() + duration);
    let mut failure = None;
    let session = client.backend().with_pubsub(&mut |conn| match watch(
        conn,
        &client,
        target.json,
        name,
        until,
    ) {
        Ok(()) => Ok(()),
        Err(watch_failure) => {
            failure = Some(watch_failure);
            Ok(())
        }
    });
    if let Some(failure) = failure {
        return Err(failure);
    }
    session.map_err(|e| Failure::server(format!("pub/sub connection lost: {e}")))?;
    Ok(ExitCode::SUCCESS)
}

/// The watch loop on one pub/sub connection, until `until`.
fn watch(
    conn: &mut dyn PubSubConnection,
    client: &Client,
    json: bool,
    name: &str,
    until: Option<Instant>,
) -> Result<(), Failure> {
    let subscribe_error = |e: redisync::Error| Failure::server(format!("cannot subscribe: {e}"));
    // Channels are derived from the store's name: with the name prefix.
    let key = format!("{}{name}", client.name_prefix());
    let mut subscribed: BTreeSet<String> = channels(&key).into_iter().collect();
    conn.subscribe(&subscribed.iter().cloned().collect::<Vec<_>>())
        .map_err(subscribe_error)?;
    let mut last = client.inspect(name)?;
    report(json, "state", &describe(&last));
    loop {
        // A fair lock's waiters each listen on a channel of their own.
        let waiter_channels: Vec<String> = last
            .queue
            .iter()
            .map(|waiter| format!("{}:{}", prefixed("redisson_lock__channel", &key), waiter.id))
            .filter(|channel| !subscribed.contains(channel))
            .collect();
        if !waiter_channels.is_empty() {
            conn.subscribe(&waiter_channels).map_err(subscribe_error)?;
            subscribed.extend(waiter_channels);
        }
        if until.is_some_and(|until| Instant::now() >= until) {
            return Ok(());
        }
        if let Some(message) = conn
            .next_message(POLL)
            .map_err(|e| Failure::server(format!("pub/sub connection lost: {e}")))?
        {
            report(
                json,
                "message",
                &format!(
                    "{} (payload {:?}) on {}",
                    message_meaning(&message.channel, &message.payload),
                    message.payload,
                    message.channel
                ),
            );
        }
        let now = client.inspect(name)?;
        for (event, detail) in changes(&last, &now) {
            report(json, event, &detail);
        }
        last = now;
    }
}

/// Prints one event with the time.
fn report(json: bool, event: &str, detail: &str) {
    let at = now_ms();
    if json {
        println!(
            "{}",
            json!({ "time_ms": at, "event": event, "detail": detail })
        );
    } else {
        println!("{}  {event:<9} {detail}", clock_time(at));
    }
}

/// NAME's channels (a fair lock's per-waiter channels are added as its
/// queue shows them).
fn channels(name: &str) -> Vec<String> {
    vec![
        prefixed("redisson_lock__channel", name),
        prefixed("redisson_rwlock", name),
        prefixed("redisson_sc", name),
        format!("redisson_countdownlatch__channel__{{{name}}}"),
    ]
}

/// What a message on `channel` means.
fn message_meaning(channel: &str, payload: &str) -> &'static str {
    if channel.starts_with("redisson_countdownlatch__channel__") {
        if payload == "0" {
            "latch opened"
        } else {
            "latch count set or deleted"
        }
    } else if channel.starts_with("redisson_sc:") {
        "permits released"
    } else if payload == "1" {
        "unlock (write lock released: every waiter)"
    } else {
        "unlock"
    }
}

/// One line for a snapshot.
fn describe(found: &Inspection) -> String {
    let mut text = format!("{} ({})", kind_id(&found.kind), ttl_text(found.ttl));
    for holder in &found.holders {
        text.push_str(&format!(
            ", held by {} ({} x{})",
            holder.id,
            mode_name(holder.mode),
            holder.holds
        ));
    }
    if !found.queue.is_empty() {
        text.push_str(&format!(", {} queued", found.queue.len()));
    }
    if let Some(counter) = found.counter {
        text.push_str(&format!(", counter {counter}"));
    }
    text
}

/// The events between two snapshots.
fn changes(before: &Inspection, after: &Inspection) -> Vec<(&'static str, String)> {
    let mut events = Vec::new();
    let holds = |found: &Inspection| -> BTreeMap<(String, &'static str), u64> {
        found
            .holders
            .iter()
            .map(|holder| ((holder.id.clone(), mode_name(holder.mode)), holder.holds))
            .collect()
    };
    let (old, new) = (holds(before), holds(after));
    for ((id, mode), count) in &new {
        match old.get(&(id.clone(), mode)) {
            None => events.push(("acquired", format!("by {id} ({mode}, x{count})"))),
            Some(was) if was != count => {
                events.push((
                    "reentry",
                    format!("{id} ({mode}) holds x{count} (was x{was})"),
                ));
            }
            Some(_) => {}
        }
    }
    for (id, mode) in old.keys() {
        if !new.contains_key(&(id.clone(), mode)) {
            events.push(("released", format!("by {id} ({mode})")));
        }
    }
    let queued = |found: &Inspection| -> Vec<String> {
        found.queue.iter().map(|waiter| waiter.id.clone()).collect()
    };
    let (old_queue, new_queue) = (queued(before), queued(after));
    for (place, id) in new_queue.iter().enumerate() {
        if !old_queue.contains(id) {
            events.push(("queued", format!("{id} at #{}", place + 1)));
        }
    }
    for id in &old_queue {
        if !new_queue.contains(id) {
            events.push(("dequeued", id.clone()));
        }
    }
    if before.kind != after.kind && after.kind != ObjectKind::Absent {
        events.push(("kind", format!("now {}", after.kind)));
    }
    if before.counter != after.counter {
        let show = |counter: Option<i64>| counter.map_or("none".to_owned(), |c| c.to_string());
        events.push((
            "counter",
            format!("{} -> {}", show(before.counter), show(after.counter)),
        ));
    }
    if before.leases.len() != after.leases.len() {
        events.push((
            "leases",
            format!(
                "{} -> {} leased permits",
                before.leases.len(),
                after.leases.len()
            ),
        ));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_cover_every_primitive_of_the_name() {
        assert_eq!(
            channels("a*b"),
            vec![
                "redisson_lock__channel:{a*b}",
                "redisson_rwlock:{a*b}",
                "redisson_sc:{a*b}",
                "redisson_countdownlatch__channel__{a*b}",
            ]
        );
        assert_eq!(
            prefixed("redisson_lock__channel", "{o}:1"),
            "redisson_lock__channel:{o}:1"
        );
    }
}
