//! Writes that act once: every write that is not an acquire, a release or
//! a renewal (a force release, a delete, a drain, a set of permits or of a
//! count) carries its call's op record, `{name}:redisync_op:<op id>` (one
//! fresh id per call, the same for every copy and resend of it; see
//! `lua/op_record_prelude.lua`):
//!
//! * a copy of a call that already acted returns the first copy's outcome
//!   and writes nothing, so the store may resend it freely
//!   ([`Resend::Harmless`](crate::backend::Resend::Harmless));
//! * when the call fails with its outcome unknown (a dropped connection,
//!   a timeout, a late refusal of one copy while another may be in
//!   flight), the client settles it ([`settle`], `lua/op_settle.lua`):
//!   the record becomes `u` unless the call already acted, and every copy
//!   of it arriving later is refused (`ERR late request`). If it had
//!   acted, the call returns its outcome instead of the error. So an error
//!   means the call did not act and will not.
//!
//! The record is kept [`RECORD_MS`](super::semaphore::RECORD_MS), or
//! longer when the store's response timeout makes a copy's window longer. The settle is retried within [`SETTLE_BUDGET`] plus one
//! response timeout; when it cannot reach the server either, the call's
//! error says that its outcome is unknown (it may have acted, or may still
//! act until its window ends).
//!
//! ```
//! use redisync::internal::{lock, once};
//! let store = redisync::MemoryBackend::new();
//! let (channel, op) = ("redisson_lock__channel:{doc:once}", "{doc:once}:redisync_op:f1");
//! // Settled before it ran: it never will.
//! assert_eq!(once::settle(&store, op)?, None);
//! assert!(lock::force_release_recorded(&store, "doc:once", channel, op).is_err());
//! # Ok::<(), redisync::Error>(())
//! ```

use std::time::{Duration, Instant};

use super::{record_keep_ms, run, scripts};
use crate::backend::{Effect, LockBackend, Reply, Resend, ScriptCall};
use crate::{Error, Result};

scripts! {
    /// KEYS record; ARGV keep ms. The record: `u` = settled as not done,
    /// else the call's stored outcome.
    SETTLE = "op_settle", "op settle", writes, after "window_prelude", after "args_prelude";
}

/// How long the settle of a call whose outcome is unknown is retried,
/// beyond one response timeout (as a release's in-line retries).
pub const SETTLE_BUDGET: Duration = Duration::from_millis(300);

/// Pauses between settle tries (none starts past the budget).
const SETTLE_PAUSES: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_millis(10),
    Duration::from_millis(50),
    Duration::from_millis(100),
];

/// How long a recorded write's op record is kept on `backend`, in ms.
pub(crate) fn keep_ms<B: LockBackend + ?Sized>(backend: &B) -> i64 {
    record_keep_ms(backend, super::semaphore::RECORD_MS)
}

/// How a write may be resent: recorded, freely (a repeat returns the first
/// outcome); otherwise as `unrecorded` says.
pub(crate) fn resend(record: Option<&str>, unrecorded: Resend) -> Resend {
    match record {
        Some(_) => Resend::Harmless,
        None => unrecorded,
    }
}

/// Runs `call` (its own KEYS and ARGV) once: with `record`, appends the
/// record's key and keep time and settles the call if it fails with its
/// outcome unknown (see the module); without, runs it as it is. Reads the
/// reply with `read`.
pub(crate) fn run_once<'a, B: LockBackend + ?Sized, T>(
    backend: &B,
    call: ScriptCall<'a>,
    record: Option<&'a str>,
    read: fn(&Reply, &str) -> Result<T>,
) -> Result<T> {
    let operation = call.script().operation();
    let Some(record) = record else {
        return read(&run(backend, &call)?, operation);
    };
    let keep = keep_ms(backend);
    let call = call.key(record).arg(keep);
    let outcome = run(backend, &call).and_then(|reply| read(&reply, operation));
    settled(backend, record, keep, operation, outcome, read)
}

/// `outcome` of the recorded call `record` (kept `keep` ms), settled when
/// it is an error with the outcome unknown (a connection error: a dropped
/// connection, a timeout, a late refusal): `Ok` with the call's own outcome
/// if it acted; the error if it did not (and now never will); an error
/// saying the outcome is unknown if the settle could not reach the server.
/// Any other outcome is returned as it is (a script's refusal wrote nothing).
pub(crate) fn settled<B: LockBackend + ?Sized, T>(
    backend: &B,
    record: &str,
    keep: i64,
    operation: &str,
    outcome: Result<T>,
    read: fn(&Reply, &str) -> Result<T>,
) -> Result<T> {
    let err = match outcome {
        Err(err) if err.is_connection_error() => err,
        other => return other,
    };
    let started = Instant::now();
    let budget = SETTLE_BUDGET + backend.response_timeout().unwrap_or_default();
    // Every try keeps to the budget, connection openings included (a
    // frozen server would otherwise hold each for a connection timeout).
    let _scope = crate::deadline::enter(started.checked_add(budget));
    let mut failure = None;
    for pause in SETTLE_PAUSES {
        // No try starts past the budget, or past the caller's own deadline
        // (a give-up's leave or cancel runs when the caller's wait ends).
        if failure.is_some() && (started.elapsed() + pause > budget || crate::deadline::passed()) {
            break;
        }
        std::thread::sleep(pause);
        match settle_kept(backend, record, keep) {
            Ok(None) => {
                return Err(Error::backend_caused_by(
                    format!(
                        "{operation}: failed, and settled: it did not act and will not \
                         (every copy of it still on the way is refused)"
                    ),
                    err,
                    true,
                ));
            }
            Ok(Some(reply)) => return read(&reply, operation),
            Err(settle_err) if settle_err.is_connection_error() => failure = Some(settle_err),
            Err(settle_err) => {
                failure = Some(settle_err);
                break;
            }
        }
    }
    let failure = failure.map_or_else(String::new, |failure| failure.to_string());
    Err(Error::backend_caused_by(
        format!(
            "{operation}: outcome unknown: the call failed, and settling it (its op record \
             {record:?}) failed too ({failure}), so it may have acted, or may still act \
             until its window ends (at most {keep} ms from now)"
        ),
        err,
        true,
    ))
}

/// Settles the recorded call `record` (see the module): if it has not
/// acted yet, marks it so that no copy of it ever will and returns `None`;
/// if it has, returns its outcome (the reply it gave; a counting call's
/// record, `1`, reads as a nil reply). Idempotent. The record is kept
/// [`RECORD_MS`](super::semaphore::RECORD_MS), or longer when the
/// store's response timeout makes a copy's window longer.
///
/// # Errors
/// A store failure.
///
/// ```
/// use redisync::Reply;
/// use redisync::internal::{counter, once};
/// let store = redisync::MemoryBackend::new();
/// let op = "{doc:settle}:redisync_op:s1";
/// assert!(counter::set_if_absent_recorded(&store, "doc:settle", "redisson_sc:{doc:settle}", 3, "3", op)?);
/// assert_eq!(once::settle(&store, op)?, Some(Reply::Int(1))); // it acted: set
/// # Ok::<(), redisync::Error>(())
/// ```
pub fn settle<B: LockBackend + ?Sized>(backend: &B, record: &str) -> Result<Option<Reply>> {
    settle_kept(backend, record, keep_ms(backend))
}

fn settle_kept<B: LockBackend + ?Sized>(
    backend: &B,
    record: &str,
    keep: i64,
) -> Result<Option<Reply>> {
    let call = ScriptCall::new(&SETTLE, Resend::Harmless, Effect::Change(|_| true))
        .key(record)
        .arg(keep);
    let reply = run(backend, &call)?;
    let text = reply
        .as_text()
        .ok_or_else(|| reply.unexpected(SETTLE.operation(), "the op record's text"))?;
    Ok(decode(text))
}

/// A record's text as the outcome it stores (`None`: settled as not done).
fn decode(text: &str) -> Option<Reply> {
    if text == "u" {
        return None;
    }
    Some(match (text.get(..1), text.get(1..)) {
        (Some("i"), Some(body)) => body.parse().map_or(Reply::Nil, Reply::Int),
        (Some("s"), Some(body)) => Reply::Bulk(body.as_bytes().to_vec()),
        _ => Reply::Nil,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn records_decode_to_the_stored_outcome() {
        assert_eq!(decode("u"), None);
        assert_eq!(decode("i-5"), Some(Reply::Int(-5)));
        assert_eq!(decode("s07"), Some(Reply::Bulk(b"07".to_vec())));
        assert_eq!(decode("s"), Some(Reply::Bulk(Vec::new())));
        assert_eq!(decode("n"), Some(Reply::Nil));
        assert_eq!(decode("1"), Some(Reply::Nil));
    }

    #[test]
    fn an_unknown_outcome_that_cannot_be_settled_says_so() {
        struct Down;
        impl LockBackend for Down {
            fn run_script(&self, _: &ScriptCall<'_>) -> Result<Reply> {
                Err(Error::backend("connection refused", true))
            }
            fn publish(&self, _: &str, _: &str) -> Result<()> {
                Ok(())
            }
            fn with_pubsub(
                &self,
                _: &mut dyn FnMut(&mut dyn crate::backend::PubSubConnection) -> Result<()>,
            ) -> Result<()> {
                Ok(())
            }
        }
        let started = Instant::now();
        let err = super::super::lock::force_release_recorded(&Down, "a", "c", "{a}:redisync_op:x")
            .unwrap_err();
        assert!(err.to_string().contains("outcome unknown"), "{err}");
        assert!(err.is_connection_error(), "{err}");
        assert!(started.elapsed() < SETTLE_BUDGET + Duration::from_secs(1));
    }
}
