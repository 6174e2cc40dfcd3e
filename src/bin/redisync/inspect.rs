//! `redisync inspect NAME`: one object's snapshot, as a table or JSON.

use std::process::ExitCode;

use redisync::Reply;
use redisync::{Client, HoldMode, Inspection, ObjectKind};
use serde_json::{Value, json};

use crate::{Failure, Outcome, Target, prefixed, print_json, ttl_ms, ttl_text};

/// Runs `inspect`.
pub(crate) fn run(target: &Target, name: &str) -> Outcome {
    let client = target.client()?;
    let found = client.inspect(name)?;
    // Nothing stored, yet threads wait on the name's semaphore channel: a
    // semaphore whose permits were never set (or were deleted).
    let unset_waiters = if found.kind == ObjectKind::Absent {
        semaphore_waiters(&client, name)?
    } else {
        0
    };
    if target.json {
        let mut doc = to_json(&found);
        doc["unset_semaphore_waiters"] = json!(unset_waiters);
        print_json(&doc);
    } else {
        print!("{}", table(&found));
        if unset_waiters > 0 {
            println!("{}", unset_semaphore_note(name, unset_waiters));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The warning for a semaphore nobody set that `waiters` wait on.
pub(crate) fn unset_semaphore_note(name: &str, waiters: i64) -> String {
    format!(
        "warning: {waiters} connection(s) wait on semaphore {name:?}, whose permits were never \
         set (or were deleted): they wait forever until someone calls try_set_permits or \
         add_permits (Redisson's trySetPermits / addPermits)"
    )
}

/// How many connections listen on `name`'s semaphore channel (plain and
/// sharded pub/sub, summed over every master): its parked waiters.
pub(crate) fn semaphore_waiters(client: &Client, name: &str) -> Result<i64, Failure> {
    let channel = prefixed("redisson_sc", &format!("{}{name}", client.name_prefix()));
    let mut waiters = 0;
    for command in ["NUMSUB", "SHARDNUMSUB"] {
        for answer in client
            .backend()
            .server_command(&["PUBSUB", command, &channel])?
        {
            // {channel, count}; an error reply (a server without sharded
            // pub/sub) counts nothing.
            if let Reply::Array(parts) = &answer.reply {
                waiters += parts.get(1).and_then(Reply::as_int).unwrap_or(0);
            }
        }
    }
    Ok(waiters)
}

/// A short machine name for a kind (`lock`, `fair_lock`, ...).
pub(crate) fn kind_id(kind: &ObjectKind) -> &'static str {
    match kind {
        ObjectKind::Absent => "absent",
        ObjectKind::Lock => "lock",
        ObjectKind::FairLock => "fair_lock",
        ObjectKind::FencedLock => "fenced_lock",
        ObjectKind::ReadWriteLock => "read_write_lock",
        ObjectKind::Barrier => "barrier",
        ObjectKind::Election => "election",
        ObjectKind::PermitExpirableSemaphore => "permit_expirable_semaphore",
        ObjectKind::Counter => "counter",
        _ => "unknown",
    }
}

/// A hold mode's name.
pub(crate) fn mode_name(mode: HoldMode) -> &'static str {
    match mode {
        HoldMode::Exclusive => "exclusive",
        HoldMode::Read => "read",
        HoldMode::Write => "write",
        _ => "other",
    }
}

/// The snapshot as one JSON object.
pub(crate) fn to_json(found: &Inspection) -> Value {
    let holders: Vec<Value> = found
        .holders
        .iter()
        .map(|holder| {
            let mut value = json!({
                "id": holder.id,
                "count": holder.holds,
                "mode": mode_name(holder.mode),
                "thread": holder.thread,
                "ttl_ms": ttl_ms(holder.ttl),
            });
            if !holder.client_id.is_empty() {
                value["client_id"] = json!(holder.client_id);
            }
            // The connected client's address, when its connections are
            // named and the server lists them (CLIENT LIST).
            if let Some(first) = holder.connections.first() {
                value["client"] = json!(first.address);
            }
            value["connections"] = holder
                .connections
                .iter()
                .map(|c| {
                    json!({
                        "address": c.address,
                        "server": c.server,
                        "idle_s": c.idle.as_secs(),
                    })
                })
                .collect::<Vec<Value>>()
                .into();
            value
        })
        .collect();
    let queue: Vec<Value> = found
        .queue
        .iter()
        .map(|waiter| {
            json!({
                "id": waiter.id,
                "client": waiter.client_id,
                "thread": waiter.thread,
                "deadline_ms": waiter.deadline_ms,
                "remaining_ms": waiter.remaining_ms,
            })
        })
        .collect();
    let leases: Vec<Value> = found
        .leases
        .iter()
        .map(|lease| {
            json!({
                "permit_id": lease.permit_id,
                "lease_end_ms": lease.lease_end_ms,
                "remaining_ms": lease.remaining_ms,
            })
        })
        .collect();
    let redis_type = match &found.kind {
        ObjectKind::Unknown { redis_type } => Some(redis_type.clone()),
        _ => None,
    };
    json!({
        "name": found.name,
        "kind": kind_id(&found.kind),
        "description": found.kind.to_string(),
        "redis_type": redis_type,
        "ttl_ms": ttl_ms(found.ttl),
        "rw_mode": found.rw_mode.map(|mode| mode.as_str()),
        "holders": holders,
        "queue": queue,
        "fencing_token": found.fencing_token,
        "counter": found.counter,
        "available_permits": found.available_permits(),
        "latch_count": found.latch_count(),
        "leases": leases,
        "barrier": found.barrier.map(|barrier| json!({
            "generation": barrier.generation,
            "arrived": barrier.arrived,
            "parties": barrier.parties,
        })),
        "election": found.election.as_ref().map(|election| json!({
            "leader": election.leader.as_ref().map(|leader| json!({
                "identity": leader.identity,
                "term": leader.term,
                "since_ms": leader.since_ms,
            })),
            "lease_left_ms": ttl_ms(election.lease_left),
            "last_term": election.last_term,
            "candidates": election
                .candidates
                .iter()
                .map(|candidate| candidate.id.clone())
                .collect::<Vec<_>>(),
        })),
        "read_at_ms": found.read_at_ms,
    })
}

/// The snapshot as a table for a terminal.
pub(crate) fn table(found: &Inspection) -> String {
    let mut out = String::new();
    let mut row = |label: &str, value: String| {
        out.push_str(&format!("{label:<14}{value}\n"));
    };
    row("name", found.name.clone());
    row("kind", found.kind.to_string());
    if let Some(mode) = found.rw_mode {
        row("mode", mode.as_str().to_owned());
    }
    row("ttl", ttl_text(found.ttl));
    if let Some(token) = found.fencing_token {
        row("fencing token", token.to_string());
    }
    if let Some(permits) = found.available_permits() {
        row("permits", permits.to_string());
    }
    if let Some(count) = found.latch_count() {
        row("latch count", count.to_string());
    }
    if let Some(barrier) = found.barrier {
        row("generation", barrier.generation.to_string());
        row(
            "arrived",
            match barrier.parties {
                Some(parties) => format!("{} of {parties} parties", barrier.arrived),
                None => "none yet".to_owned(),
            },
        );
        return out;
    }
    if let Some(election) = &found.election {
        match &election.leader {
            Some(leader) => {
                row("leader", leader.identity.clone());
                row("term", leader.term.to_string());
                row("since", format!("{} ms (store clock)", leader.since_ms));
                row("lease left", ttl_text(election.lease_left));
            }
            None => row("leader", "none".to_owned()),
        }
        if let Some(term) = election.last_term {
            row("last term", term.to_string());
        }
        row("candidates", election.candidates.len().to_string());
        for (place, candidate) in election.candidates.iter().enumerate() {
            row(&format!("  #{}", place + 1), candidate.id.clone());
        }
        return out;
    }
    row("holders", found.holders.len().to_string());
    if !found.holders.is_empty() {
        let width = found
            .holders
            .iter()
            .map(|h| h.id.len())
            .max()
            .unwrap_or(0)
            .max(2);
        out.push_str(&format!(
            "  {:<width$}  {:>5}  {:<9}  {:<12}  CLIENT\n",
            "ID", "COUNT", "MODE", "TTL"
        ));
        for holder in &found.holders {
            // The holder's connected address(es), when known.
            let clients: Vec<String> = holder
                .connections
                .iter()
                .map(|c| format!("{} (idle {} s)", c.address, c.idle.as_secs()))
                .collect();
            let clients = if clients.is_empty() {
                "-".to_owned()
            } else {
                clients.join(", ")
            };
            out.push_str(&format!(
                "  {:<width$}  {:>5}  {:<9}  {:<12}  {}\n",
                holder.id,
                holder.holds,
                mode_name(holder.mode),
                ttl_text(holder.ttl),
                clients
            ));
        }
    }
    if !found.queue.is_empty() {
        out.push_str(&format!("{:<14}{}\n", "queue", found.queue.len()));
        for (place, waiter) in found.queue.iter().enumerate() {
            let left = waiter
                .remaining_ms
                .map_or_else(|| "no slot".to_owned(), |ms| format!("slot {ms} ms left"));
            out.push_str(&format!("  #{} {}  ({left})\n", place + 1, waiter.id));
        }
    }
    if !found.leases.is_empty() {
        out.push_str(&format!("{:<14}{}\n", "leases", found.leases.len()));
        for lease in &found.leases {
            out.push_str(&format!(
                "  {}  {} ms left\n",
                lease.permit_id, lease.remaining_ms
            ));
        }
    }
    out
}
