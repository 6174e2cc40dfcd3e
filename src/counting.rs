//! Exact counting calls, shared by the counting primitives (the
//! semaphores and the latch): the check of a permit count, and
//! [`exactly_once`], which sends a recorded counting call again after a
//! connection fault until it lands, once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Client, Error, LockBackend, Result, ops};

/// Checks a permit count: at least 1, at most `i64::MAX`.
pub(crate) fn permit_count(what: &'static str, permits: u64) -> Result<i64> {
    if permits == 0 {
        return Err(Error::invalid(what, "must be at least 1, got 0"));
    }
    i64::try_from(permits)
        .map_err(|_| Error::invalid(what, format!("must be at most i64::MAX, got {permits}")))
}

/// How long a counting call whose outcome is unknown (a release, a
/// count-down, the undo of an acquire) is sent again in the background
/// after it failed in line: until it lands or this long after it was
/// first sent. Its record is kept twice as long
/// ([`RECORD_MS`](ops::semaphore::RECORD_MS)), so every repeat finds it.
pub(crate) const RESEND_HORIZON: Duration = Duration::from_secs(30);
const _: () = assert!(RESEND_HORIZON.as_millis() * 2 == ops::semaphore::RECORD_MS as u128);

/// Pauses between the in-line repeats of a recorded counting call that
/// failed with a connection error (each repeat is exact: same record); no
/// repeat starts after [`RETRY_BUDGET`]. What has still not landed then is
/// sent again in the background, and the call returns the error.
const RETRIES: [Duration; 3] = [
    Duration::from_millis(10),
    Duration::from_millis(100),
    Duration::from_millis(100),
];
const RETRY_BUDGET: Duration = Duration::from_millis(300);

/// Runs `call`, a counting call on `name` carrying its record `record`
/// (see `ops::semaphore::add_recorded`), so that it counts exactly once
/// whatever the connection does: a repeat of a call that ran counts
/// nothing more, and one that arrives after its window is refused. On a
/// connection error it is repeated in line (within [`RETRY_BUDGET`]), then
/// handed to the client's cleanup worker, which repeats it until it lands
/// or [`RESEND_HORIZON`] has passed; the error is returned (the call goes
/// on in the background: the caller must not count again).
pub(crate) fn exactly_once<F>(client: &Client, name: &str, record: String, call: F) -> Result<()>
where
    F: Fn(&dyn LockBackend) -> Result<()> + Send + 'static,
{
    let backend = client.backend();
    let started = Instant::now();
    let mut outcome = call(backend.as_ref());
    for pause in RETRIES {
        match &outcome {
            Err(err) if err.is_connection_error() && started.elapsed() + pause < RETRY_BUDGET => {
                std::thread::sleep(pause);
                outcome = call(backend.as_ref());
            }
            _ => break,
        }
    }
    if let Err(err) = &outcome
        && err.is_connection_error()
        && let Some(give_up_at) = started.checked_add(RESEND_HORIZON)
    {
        let backend = Arc::clone(backend);
        let task: crate::cleanup::Task = Box::new(move || match call(backend.as_ref()) {
            Ok(()) => Ok(true),
            Err(err) if err.is_connection_error() => Err(err),
            // Answered: it will not land by being sent again.
            Err(_) => Ok(true),
        });
        client.release_later(name, &record, task, give_up_at, err);
    }
    outcome
}
