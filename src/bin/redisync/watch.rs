//! `redisync watch NAME [--for DURATION]`: prints each unlock message,
//! acquisition, release and queue change under NAME as it happens.
//!
//! Unlock messages come from a plain pub/sub connection (the `redis`
//! crate's) subscribed to NAME's channels: the lock's (and the fair lock's
//! per-waiter channels), the read-write lock's, the semaphore's and the
//! latch's. Acquisitions, releases and queue changes come from diffing
//! [`Client::inspect`](redisync::Client::inspect) snapshots taken every
//! [`POLL`]. On a cluster or through Sentinel only the snapshots are used.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use redisync::{Inspection, ObjectKind};
use serde_json::json;

use crate::inspect::{kind_id, mode_name};
use crate::{Failure, Outcome, Target, clock_time, now_ms, ttl_text};

/// How often NAME is inspected (and how long a pub/sub read waits).
const POLL: Duration = Duration::from_millis(50);

/// Runs `watch`.
pub(crate) fn run(target: &Target, name: &str, duration: Option<Duration>) -> Outcome {
    let client = target.client()?;
    let until = duration.map(|duration| Instant::now() + duration);
    let mut pubsub_connection = match target.single_url() {
        Some(url) => Some(subscribe_connection(&url)?),
        None => None,
    };
    let mut pubsub = match pubsub_connection.as_mut() {
        Some(connection) => {
            let mut pubsub = connection.as_pubsub();
            for pattern in channel_patterns(name) {
                pubsub
                    .psubscribe(&pattern)
                    .map_err(|e| Failure(format!("cannot subscribe: {e}")))?;
            }
            pubsub
                .set_read_timeout(Some(POLL))
                .map_err(|e| Failure(format!("cannot set a read timeout: {e}")))?;
            Some(pubsub)
        }
        None => None,
    };
    let mut last = client.inspect(name)?;
    report(target.json, "state", &describe(&last));
    loop {
        if until.is_some_and(|until| Instant::now() >= until) {
            return Ok(ExitCode::SUCCESS);
        }
        match pubsub.as_mut() {
            Some(pubsub) => match pubsub.get_message() {
                Ok(message) => {
                    let payload: String = message.get_payload().unwrap_or_default();
                    report(
                        target.json,
                        "message",
                        &format!(
                            "{} (payload {payload:?}) on {}",
                            message_meaning(message.get_channel_name(), &payload),
                            message.get_channel_name()
                        ),
                    );
                }
                Err(error) if error.is_timeout() => {}
                Err(error) => return Err(Failure(format!("pub/sub connection lost: {error}"))),
            },
            None => std::thread::sleep(POLL),
        }
        let now = client.inspect(name)?;
        for (event, detail) in changes(&last, &now) {
            report(target.json, event, &detail);
        }
        last = now;
    }
}

/// A plain connection for pub/sub.
fn subscribe_connection(url: &str) -> Result<redis::Connection, Failure> {
    redis::Client::open(url)
        .and_then(|client| client.get_connection())
        .map_err(|e| Failure(format!("cannot open a pub/sub connection: {e}")))
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

/// `p:{name}` (or `p:name` when the name has its own hash tag), as Redisson
/// names channels.
fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `text` with Redis glob characters escaped.
fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The PSUBSCRIBE patterns for every channel of NAME.
fn channel_patterns(name: &str) -> Vec<String> {
    vec![
        // The lock's channel and a fair lock's per-waiter channels.
        format!(
            "{}*",
            escape_glob(&prefixed("redisson_lock__channel", name))
        ),
        escape_glob(&prefixed("redisson_rwlock", name)),
        escape_glob(&prefixed("redisson_sc", name)),
        escape_glob(&format!("redisson_countdownlatch__channel__{{{name}}}")),
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
    fn patterns_cover_every_channel_of_the_name() {
        assert_eq!(
            channel_patterns("a*b"),
            vec![
                "redisson_lock__channel:{a\\*b}*",
                "redisson_rwlock:{a\\*b}",
                "redisson_sc:{a\\*b}",
                "redisson_countdownlatch__channel__{a\\*b}",
            ]
        );
        assert_eq!(
            prefixed("redisson_lock__channel", "{o}:1"),
            "redisson_lock__channel:{o}:1"
        );
    }
}
