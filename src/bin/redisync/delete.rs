//! `redisync delete NAME [--waiter ID]...`: deletes the object under NAME,
//! whatever its kind, through the library's own delete (which wakes its
//! waiters, never a bare `DEL`); or removes only the given queued waiters
//! of a fair lock, the entries a dead process leaves behind.

use std::process::ExitCode;

use redisync::LockBackend;
use redisync::internal::fair_lock::FairLockKeys;
use redisync::{Client, Inspection, ObjectKind};
use serde_json::json;

use crate::inspect::kind_id;
use crate::{EXIT_FINDING, Failure, Outcome, Target, confirm, prefixed, print_json};

/// The unlock message a fair-lock waiter's channel carries (Redisson's 0).
const UNLOCK_MESSAGE: &str = "0";

/// Runs `delete`: exit status 0 when something was deleted or removed, 1
/// when nothing is under NAME or it holds data no redisync object stores.
pub(crate) fn run(target: &Target, name: &str, waiters: &[String], yes: bool) -> Outcome {
    let client = target.client()?;
    let found = client.inspect(name)?;
    if let ObjectKind::Unknown { redis_type } = &found.kind {
        return Err(Failure::finding(format!(
            "{name:?} holds a Redis {redis_type} that no redisync object stores: not deleted \
             (delete it with redis-cli if that is what you mean)"
        )));
    }
    if !waiters.is_empty() {
        return remove_waiters(target, &client, &found, waiters, yes);
    }
    if found.kind == ObjectKind::Absent {
        return nothing(target, name);
    }
    if found.kind == ObjectKind::FencedLock && !found.is_held() {
        // Only the token counter is left, and it stays (tokens never
        // restart, as `FencedLock::delete` keeps it).
        return Err(Failure::finding(format!(
            "fenced lock {name:?} is free: only its token counter is stored, which delete \
             keeps so that tokens never restart"
        )));
    }
    confirm(&format!("delete {}", summary(&found)), yes)?;
    let deleted = delete(&client, &found)?;
    if target.json {
        print_json(&json!({
            "name": name,
            "kind": kind_id(&found.kind),
            "deleted": deleted,
            "waiters_removed": found.queue.iter().map(|w| w.id.clone()).collect::<Vec<_>>(),
        }));
    } else if deleted {
        println!("deleted {}; its waiters were notified", summary(&found));
    } else {
        println!("{name:?} was already gone");
    }
    Ok(if deleted {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FINDING)
    })
}

/// Nothing under the name: exit status 1.
fn nothing(target: &Target, name: &str) -> Outcome {
    if target.json {
        print_json(&json!({ "name": name, "kind": "absent", "deleted": false }));
    } else {
        println!("nothing under {name:?}");
    }
    Ok(ExitCode::from(EXIT_FINDING))
}

/// `fair lock "x" (held by a, b; 2 queued; 1 leased permit)`.
fn summary(found: &Inspection) -> String {
    let mut parts = Vec::new();
    if !found.holders.is_empty() {
        let ids: Vec<&str> = found.holders.iter().map(|h| h.id.as_str()).collect();
        parts.push(format!("held by {}", ids.join(", ")));
    }
    if !found.queue.is_empty() {
        parts.push(format!("{} queued", found.queue.len()));
    }
    if !found.leases.is_empty() {
        parts.push(format!("{} leased permit(s)", found.leases.len()));
    }
    if let Some(counter) = found.counter {
        parts.push(format!("counter {counter}"));
    }
    if parts.is_empty() {
        format!("{} {:?}", found.kind, found.name)
    } else {
        format!("{} {:?} ({})", found.kind, found.name, parts.join("; "))
    }
}

/// Deletes the object with its kind's own delete: a fair lock with its
/// queue and slot deadlines (waking every queued waiter), a read-write
/// lock with its read holds, a permit-expirable semaphore with its leases,
/// a counter (semaphore or latch) as a latch (its waiters hear "open").
fn delete(client: &Client, found: &Inspection) -> Result<bool, Failure> {
    let name = found.name.as_str();
    Ok(match found.kind {
        ObjectKind::FairLock => client.fair_lock(name).delete()?,
        // The token counter stays (tokens never restart).
        ObjectKind::FencedLock => client.fenced_lock(name).delete()?,
        ObjectKind::ReadWriteLock => client.read_write_lock(name).delete()?,
        ObjectKind::PermitExpirableSemaphore => client.permit_expirable_semaphore(name).delete()?,
        ObjectKind::Counter => client.count_down_latch(name).delete()?,
        // Only without arrivals waiting (they keep waiting for their
        // parties); the parties given here are not checked by a delete.
        ObjectKind::Barrier => client.barrier(name, 1).delete()?,
        // Its keys are the leader's and the candidates': resign or stop
        // them; a forced release of its lock is `force-unlock` on
        // `{name}:redisync_election`.
        ObjectKind::Election => {
            return Err(Failure::usage(format!(
                "{name:?} is a leader election: it is not deleted (its leader resigns, or its \
                 lease runs out); force-unlock its lock {:?} to end the term",
                format!("{{{name}}}:redisync_election")
            )));
        }
        _ => client.lock(name).delete()?,
    })
}

/// Removes `waiters` from fair lock `found`'s queue (each must be queued),
/// then wakes the new head waiter so it takes a free lock at once.
fn remove_waiters(
    target: &Target,
    client: &Client,
    found: &Inspection,
    waiters: &[String],
    yes: bool,
) -> Outcome {
    let name = found.name.as_str();
    if found.kind == ObjectKind::Absent {
        return Err(Failure::finding(format!(
            "nothing under {name:?}: no queued waiter to remove"
        )));
    }
    if found.kind != ObjectKind::FairLock {
        return Err(Failure::usage(format!(
            "--waiter removes a fair lock's queued waiters, but {name:?} is {}",
            if found.kind == ObjectKind::Absent {
                "absent".to_owned()
            } else {
                format!("a {}", found.kind)
            }
        )));
    }
    let queued: Vec<&str> = found.queue.iter().map(|w| w.id.as_str()).collect();
    if let Some(missing) = waiters.iter().find(|id| !queued.contains(&id.as_str())) {
        return Err(Failure::finding(format!(
            "{missing:?} is not queued for {name:?} (queued: {})",
            if queued.is_empty() {
                "nobody".to_owned()
            } else {
                queued.join(", ")
            }
        )));
    }
    confirm(
        &format!(
            "remove waiter(s) {} from the queue of fair lock {name:?}",
            waiters.join(", ")
        ),
        yes,
    )?;
    // The store's names carry the name prefix.
    let store_name = format!("{}{name}", client.name_prefix());
    let queue = prefixed("redisson_lock_queue", &store_name);
    let timeouts = prefixed("redisson_lock_timeout", &store_name);
    let channel_prefix = prefixed("redisson_lock__channel", &store_name);
    let keys = FairLockKeys {
        name: &store_name,
        queue: &queue,
        timeouts: &timeouts,
        channel_prefix: &channel_prefix,
    };
    let backend = client.backend();
    // Each later waiter's slot moves up by the allowance the removed one
    // had, as when a waiter gives up.
    let allowance = i64::try_from(client.fair_lock_wait_timeout().as_millis()).unwrap_or(i64::MAX);
    for waiter in waiters {
        redisync::internal::fair_lock::cancel(backend.as_ref(), &keys, waiter, allowance)?;
    }
    let after = client.inspect(name)?;
    if let Some(head) = after.queue.first()
        && !after.is_held()
    {
        backend.publish(&format!("{channel_prefix}:{}", head.id), UNLOCK_MESSAGE)?;
    }
    if target.json {
        print_json(&json!({
            "name": name,
            "kind": kind_id(&found.kind),
            "deleted": false,
            "waiters_removed": waiters,
            "queue": after.queue.iter().map(|w| w.id.clone()).collect::<Vec<_>>(),
        }));
    } else {
        println!(
            "removed {} from the queue of {name:?}; {} waiter(s) left{}",
            waiters.join(", "),
            after.queue.len(),
            after
                .queue
                .first()
                .map_or_else(String::new, |head| format!(", {} notified", head.id))
        );
    }
    Ok(ExitCode::SUCCESS)
}
