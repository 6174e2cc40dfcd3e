//! Sends due renewals in batches: one script renews up to `batch_size`
//! holds of one kind (Redisson's `lockWatchdogBatchSize`), and on a cluster
//! of one hash slot, since a script may touch only one slot's keys. Each
//! hold gets its own outcome: one lost lock does not fail the others.

use std::collections::BTreeMap;
use std::time::Instant;

use super::schedule::Due;
use crate::backend::LockBackend;
use crate::flavor::{RenewKind, Renewal, renew_batch};
use crate::{Error, Result};

/// One renewal's answer: when its script was sent and what it returned.
#[derive(Debug)]
pub(super) struct Renewed {
    pub(super) due: Due,
    pub(super) sent: Instant,
    pub(super) result: Result<bool>,
}

/// Groups due renewals into batches: one kind and (on a cluster) one hash
/// slot each, at most `batch_size` holds each.
pub(super) fn plan(
    backend: &dyn LockBackend,
    due: Vec<Due>,
    batch_size: usize,
) -> Vec<(RenewKind, Vec<Due>)> {
    let mut groups: BTreeMap<(RenewKind, Option<u16>), Vec<Due>> = BTreeMap::new();
    for item in due {
        let renewal = &item.hold.0;
        groups
            .entry((renewal.kind(), backend.slot_of(renewal.name())))
            .or_default()
            .push(item);
    }
    let mut batches = Vec::new();
    for ((kind, _), mut group) in groups {
        while !group.is_empty() {
            let rest = group.split_off(group.len().min(batch_size.max(1)));
            batches.push((kind, std::mem::replace(&mut group, rest)));
        }
    }
    batches
}

/// Renews the holds of one batch of `kind` in one script sent at `sent`.
pub(super) fn send(
    backend: &dyn LockBackend,
    kind: RenewKind,
    batch: Vec<Due>,
    lease_ms: i64,
    sent: Instant,
) -> Vec<Renewed> {
    // Each names its attempt's record (spelled here, off the hot path: a
    // watch keeps only the attempt's number).
    let holds: Vec<(&Renewal, Option<String>)> = batch
        .iter()
        .map(|d| {
            let renewal = d.hold.0.as_ref();
            (renewal, d.attempt.map(|id| id.key(renewal.name())))
        })
        .collect();
    let result = renew_batch(backend, kind, &holds, lease_ms);
    drop(holds);
    split(batch, sent, result)
}

/// One outcome per hold of a batch: its flag, or a copy of the batch's
/// error (each hold's event reports it).
fn split(batch: Vec<Due>, sent: Instant, result: Result<Vec<bool>>) -> Vec<Renewed> {
    match result {
        Ok(flags) => batch
            .into_iter()
            .zip(flags)
            .map(|(due, renewed)| Renewed {
                due,
                sent,
                result: Ok(renewed),
            })
            .collect(),
        Err(err) => {
            let size = batch.len();
            batch
                .into_iter()
                .map(|due| Renewed {
                    due,
                    sent,
                    result: Err(copy(&err, size)),
                })
                .collect()
        }
    }
}

/// `err`, once per hold of a failed batch of `size` (errors are not `Clone`:
/// a backend error's source becomes part of its text).
fn copy(err: &Error, size: usize) -> Error {
    match err {
        Error::NotHeld { name } => Error::NotHeld { name: name.clone() },
        Error::Cancelled { name } => Error::Cancelled { name: name.clone() },
        Error::InvalidArgument { what, why } => Error::invalid(what, why.clone()),
        Error::Protocol { detail } => Error::protocol(detail.clone()),
        Error::Backend {
            context,
            source,
            connection,
        } => {
            let cause = source
                .as_ref()
                .map(|s| format!(": {s}"))
                .unwrap_or_default();
            Error::backend(
                format!("{context}{cause} (a batch renewing {size} locks)"),
                *connection,
            )
        }
    }
}
