//! The blocking loop every primitive shares: try; if that fails, register
//! on the primitive's channel with the subscriber, then alternate "park until
//! a permit or the hint the failed attempt gave" and "try again", until the
//! attempt succeeds or the wait runs out.
//!
//! The wake contract itself (permits, lost messages) lives in `pubsub::wake`.
//! A primitive supplies only its attempt, its channel and its wake policy.

use std::time::{Duration, Instant};

use crate::pubsub::{Baton, HANDOFF_WINDOW, Seat, Subscriber, Wake, Woken};
use crate::{CancellationToken, Error, Result};

/// How long an acquire may wait.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// Never give up (`lock`).
    Forever,
    /// Try once (`try_lock`).
    Never,
    /// Give up at the deadline; the duration is a fair waiter's allowance.
    Until(Instant, Duration),
}

impl Wait {
    pub(crate) fn for_duration(wait: Duration) -> Wait {
        // A wait too long to represent is a wait forever.
        Instant::now()
            .checked_add(wait)
            .map_or(Wait::Forever, |deadline| Wait::Until(deadline, wait))
    }

    /// The instant this wait gives up, if it ever does (`Never` has none:
    /// its single attempt is bounded by the response timeout alone).
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Wait::Until(deadline, _) => Some(deadline),
            Wait::Forever | Wait::Never => None,
        }
    }

    pub(crate) fn passed(self) -> bool {
        match self {
            Wait::Forever => false,
            Wait::Never => true,
            Wait::Until(deadline, _) => Instant::now() >= deadline,
        }
    }

    /// The park deadline: the holder's TTL from now, capped by this wait.
    pub(crate) fn park_until(self, ttl: Option<Duration>, fallback: Duration) -> Option<Instant> {
        let ttl_end = Instant::now().checked_add(ttl.unwrap_or(fallback));
        match (self, ttl_end) {
            (Wait::Never, _) => Some(Instant::now()),
            (Wait::Until(t, _), Some(e)) => Some(t.min(e)),
            (Wait::Until(t, _), None) => Some(t),
            (Wait::Forever, e) => e,
        }
    }
}

/// What one attempt found.
pub(crate) enum Attempt<T> {
    /// Done: stop waiting.
    Done(T),
    /// Not yet: park at most this long (`None`: until a message, or the
    /// fallback) and try again.
    Retry(Option<Duration>),
}

/// Where and how a waiter waits.
pub(crate) struct Waiting<'a> {
    /// The channel whose messages wake it.
    pub(crate) channel: &'a str,
    /// How those messages wake waiters.
    pub(crate) wake: Wake,
    /// How long it may wait in all.
    pub(crate) wait: Wait,
    /// The longest park when the attempt gave no hint (a safety net: a
    /// message lost anyway costs one retry after this, never a hang).
    pub(crate) fallback: Duration,
    /// Whether a new attempt should let a waiter an unlock just woke in this
    /// client go first (exclusive locks).
    pub(crate) defer_to_woken: bool,
    /// Which primitive waits (the metrics' label).
    pub(crate) primitive: crate::telemetry::Primitive,
    /// Whether to attempt before the first park: asked right after the
    /// snapshot, so that whatever it trusts (a sibling's hold) was still
    /// true when the snapshot was taken and the release that ends it
    /// publishes after it.
    pub(crate) first: &'a dyn Fn() -> First,
    /// The object's name (for [`Error::Cancelled`]).
    pub(crate) name: &'a str,
    /// The token that may end the wait from another thread.
    pub(crate) cancel: Option<&'a CancellationToken>,
    /// A lock waiter a releasing thread of this client may hand the lock to
    /// directly (see `Subscriber::offer`); `None` for the other primitives.
    pub(crate) seat: Option<Seat>,
    /// A reentrant lock's channel for this client, on which a release in
    /// any client says it reserved the lock for this waiter (see
    /// `ops::handoff`); subscribed with `channel`.
    pub(crate) direct: Option<&'a str>,
}

impl<'a> Waiting<'a> {
    /// A waiter of a primitive without local owners or handoffs (a
    /// semaphore, a latch, a barrier): it attempts first, never defers to
    /// a woken sibling, has no seat, and no cancellation token (see
    /// [`cancellable`](Self::cancellable)). Built by `Client::waiting`,
    /// which passes the client's watchdog timeout as the `fallback`.
    pub(crate) fn new(
        channel: &'a str,
        wake: Wake,
        wait: Wait,
        fallback: Duration,
        primitive: crate::telemetry::Primitive,
        name: &'a str,
    ) -> Waiting<'a> {
        Waiting {
            channel,
            wake,
            wait,
            fallback,
            defer_to_woken: false,
            primitive,
            first: &attempt_first,
            name,
            cancel: None,
            seat: None,
            direct: None,
        }
    }

    /// This waiter, ended by `cancel` (if any) from another thread.
    pub(crate) fn cancellable(self, cancel: Option<&'a CancellationToken>) -> Waiting<'a> {
        Waiting { cancel, ..self }
    }
}

/// Every wait that trusts no local owner begins with an attempt.
fn attempt_first() -> First {
    First::Attempt
}

/// How a wait begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum First {
    /// With an attempt.
    Attempt,
    /// With a park of at most this long (`None`: the fallback), because the
    /// attempt is known to fail: another thread of this client holds the
    /// lock (see `local_owner`).
    Park(Option<Duration>),
}

/// What a wait ended with.
#[derive(Debug)]
pub(crate) enum Done<T> {
    /// The attempt succeeded.
    Attempted(T),
    /// A release handed it the lock, in a script sent at this instant (by a
    /// thread of this client, or by another client: then with the TTL the
    /// store gave it, shorter than the lease, until the watchdog renews it).
    /// And how many times it may pass the hold on inside the client.
    HandedOver(Instant, Option<Duration>, u32),
    /// A releasing thread of this client passed it its hold, with no call
    /// to the store (see `Subscriber::resolve_pass`).
    Adopted(Baton),
}

impl<T> Done<T> {
    /// The attempt's value; `None` for a handoff or a pass, which only a
    /// waiter with a seat receives (the primitives without one call this).
    pub(crate) fn attempted(self) -> Option<T> {
        match self {
            Done::Attempted(value) => Some(value),
            Done::HandedOver(..) | Done::Adopted(_) => None,
        }
    }
}

/// Runs `attempt` until it is done (`Ok(Some)`) or the wait runs out
/// (`Ok(None)`). Errors from `attempt` or the subscriber end the wait.
/// Every round trip inside runs under the wait's deadline (see `deadline`),
/// so a server that stops answering cannot hold the caller past its bound.
pub(crate) fn until_done<T>(
    subscriber: &Subscriber,
    waiting: Waiting<'_>,
    attempt: impl FnMut() -> Result<Attempt<T>>,
) -> Result<Option<Done<T>>> {
    let started = std::time::Instant::now();
    let primitive = waiting.primitive;
    let outcome = crate::deadline::within(waiting.wait.deadline(), || {
        wait_loop(subscriber, waiting, attempt)
    });
    crate::telemetry::finished(primitive, started.elapsed(), &outcome);
    outcome
}

fn wait_loop<T>(
    subscriber: &Subscriber,
    waiting: Waiting<'_>,
    mut attempt: impl FnMut() -> Result<Attempt<T>>,
) -> Result<Option<Done<T>>> {
    let cancelled = || -> Result<()> {
        match waiting.cancel {
            Some(token) if token.is_cancelled() => Err(Error::Cancelled {
                name: waiting.name.to_owned(),
            }),
            _ => Ok(()),
        }
    };
    cancelled()?;
    // Seen before the first attempt, so a message between that attempt and
    // the subscription is not lost (see the pubsub module).
    let seen = subscriber.snapshot(waiting.channel);
    let since = Instant::now();
    // Whether an attempt of this wait was sent (see `Seat::queued`).
    let mut attempted = false;
    let mut hint = if let First::Park(left) = (waiting.first)() {
        left
    } else if waiting.defer_to_woken && seen.handoff_pending() {
        Some(HANDOFF_WINDOW)
    } else {
        attempted = true;
        match attempt()? {
            Attempt::Done(value) => return Ok(Some(Done::Attempted(value))),
            Attempt::Retry(hint) => hint,
        }
    };
    if waiting.wait.passed() {
        return Ok(None);
    }
    let seat = waiting.seat.map(|seat| Seat {
        queued: attempted,
        ..seat
    });
    let subscription = subscriber.subscribe(
        waiting.channel,
        waiting.wake,
        seen,
        seat,
        waiting.direct,
        since,
    )?;
    // A cancel wakes the park; the park checks the token before it sleeps.
    let _on_cancel = waiting
        .cancel
        .map(|token| token.on_cancel(subscription.waker()));
    loop {
        let parked = crate::telemetry::Parked::new(waiting.primitive);
        let woken = match subscription.wait_permit(
            waiting.wait.park_until(hint, waiting.fallback),
            waiting.cancel,
        ) {
            Woken::Granted(sent, ttl, passes) => {
                return Ok(Some(Done::HandedOver(sent, ttl, passes)));
            }
            Woken::Adopted(baton) => return Ok(Some(Done::Adopted(baton))),
            Woken::Cancelled => {
                cancelled()?;
                false
            }
            Woken::Permit => true,
            Woken::Retry | Woken::Reserved | Woken::TimedOut => false,
            // No attempt while this client's release may be handing it
            // the lock (an attempt could take the handed hold, which the
            // releaser gives back: see `Woken::Withdrawn`).
            Woken::Withdrawn => {
                drop(parked);
                if waiting.wait.passed() {
                    return Ok(None);
                }
                continue;
            }
        };
        drop(parked);
        if !attempted {
            // Before the attempt is sent: a release of this client that
            // hands the lock over from now on takes its queue entry out.
            subscription.attempting();
            attempted = true;
        }
        let outcome = attempt();
        if woken {
            subscription.handoff_done();
        }
        match outcome? {
            Attempt::Done(value) => return Ok(Some(Done::Attempted(value))),
            Attempt::Retry(next) => {
                if woken {
                    subscription.pass_on();
                }
                hint = next;
            }
        }
        if waiting.wait.passed() {
            return Ok(None);
        }
    }
}
