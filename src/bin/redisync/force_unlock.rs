//! `redisync force-unlock NAME`: frees whatever is held under NAME through
//! the library's scripts, which publish the messages its waiters need
//! (never a bare `DEL`): a lock of any kind through its force release, a
//! permit-expirable semaphore's leased permits by releasing each. A plain
//! semaphore or a latch records no holder, so there is nothing to free.

use std::process::ExitCode;

use redisync::RwMode;
use redisync::{Client, Inspection, ObjectKind};
use serde_json::json;

use crate::inspect::kind_id;
use crate::{EXIT_FINDING, Failure, Outcome, Target, confirm, print_json};

/// Runs `force-unlock`: exit status 0 when something was freed, 1 when
/// nothing was held (a fair lock's queued waiters are listed then: they
/// are not holders, and `delete` removes them).
pub(crate) fn run(target: &Target, name: &str, yes: bool) -> Outcome {
    let client = target.client()?;
    let found = client.inspect(name)?;
    let freed = match found.kind {
        ObjectKind::Absent => false,
        ObjectKind::Lock
        | ObjectKind::FairLock
        | ObjectKind::FencedLock
        | ObjectKind::ReadWriteLock => {
            if !found.is_held() {
                false
            } else {
                confirm(&question(&found), yes)?;
                release(&client, &found)?
            }
        }
        ObjectKind::PermitExpirableSemaphore => {
            if found.leases.is_empty() {
                false
            } else {
                confirm(&question(&found), yes)?;
                release_leases(&client, &found)?
            }
        }
        ObjectKind::Counter => {
            return Err(Failure::finding(format!(
                "{name:?} is a counter (a semaphore's permits or a latch's count): it records no \
                 holder, so there is nothing to force-unlock (`redisync delete` removes it)"
            )));
        }
        _ => {
            return Err(Failure::finding(format!(
                "{name:?} is a {}: force-unlock frees locks and leased permits only",
                found.kind
            )));
        }
    };
    if target.json {
        print_json(&json!({
            "name": name,
            "kind": kind_id(&found.kind),
            "freed": freed,
            "holders": found.holders.iter().map(|holder| holder.id.clone()).collect::<Vec<_>>(),
            "queue": found.queue.iter().map(|waiter| waiter.id.clone()).collect::<Vec<_>>(),
        }));
    } else if freed {
        println!(
            "freed {} {name:?} (was held by {}); its waiters were notified",
            found.kind,
            holder_list(&found)
        );
    } else if !found.queue.is_empty() {
        println!(
            "nothing held under {name:?}, but its fair-lock queue has {} waiter(s):",
            found.queue.len()
        );
        for (place, waiter) in found.queue.iter().enumerate() {
            let left = waiter
                .remaining_ms
                .map_or_else(|| "no slot".to_owned(), |ms| format!("slot {ms} ms left"));
            println!("  #{} {}  ({left})", place + 1, waiter.id);
        }
        println!(
            "a waiter whose process died keeps the others out until its slot runs out: \
             remove it with `redisync delete {name} --waiter ID`, or the whole lock with \
             `redisync delete {name}`"
        );
    } else {
        println!("nothing held under {name:?}");
    }
    Ok(if freed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FINDING)
    })
}

/// The confirmation question for freeing `found`.
fn question(found: &Inspection) -> String {
    format!(
        "force-unlock {} {:?} held by {}",
        found.kind,
        found.name,
        holder_list(found)
    )
}

/// The holders' ids (or the leased permits' ids), comma-separated.
fn holder_list(found: &Inspection) -> String {
    let ids: Vec<&str> = found
        .holders
        .iter()
        .map(|holder| holder.id.as_str())
        .chain(found.leases.iter().map(|lease| lease.permit_id.as_str()))
        .collect();
    ids.join(", ")
}

/// Releases every leased permit of a permit-expirable semaphore; each
/// release publishes the new permit count, which wakes its waiters. True
/// when at least one was still leased.
fn release_leases(client: &Client, found: &Inspection) -> Result<bool, Failure> {
    let semaphore = client.permit_expirable_semaphore(found.name.as_str());
    let mut freed = false;
    for lease in &found.leases {
        let id = redisync::PermitId::from(lease.permit_id.clone());
        freed |= semaphore.try_release(&id)?;
    }
    Ok(freed)
}

/// Frees the lock with the force release of its kind.
fn release(client: &Client, found: &Inspection) -> Result<bool, Failure> {
    let name = found.name.as_str();
    let freed = match found.kind {
        ObjectKind::FairLock => client.fair_lock(name).force_unlock()?,
        ObjectKind::FencedLock => client.fenced_lock(name).force_unlock()?,
        ObjectKind::ReadWriteLock => {
            let lock = client.read_write_lock(name);
            match found.rw_mode {
                Some(RwMode::Read) => lock.read_lock().force_unlock()?,
                _ => lock.write_lock().force_unlock()?,
            }
        }
        _ => client.lock(name).force_unlock()?,
    };
    Ok(freed)
}
