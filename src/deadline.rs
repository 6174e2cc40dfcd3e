//! The caller's deadline, seen by the backend: a blocking call with a bound
//! (`try_lock_for(wait)`, `acquire_for`, `wait_for`, ...) runs its round
//! trips inside [`within`], and [`RedisBackend`](crate::RedisBackend) caps
//! each read timeout and pool checkout by what is left of it. A thread-local
//! rather than a parameter: the bound belongs to the whole call, and every
//! backend operation below it must honour it without each of them (and
//! every user's `LockBackend`) taking one more argument.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The least time one round trip is given even when the caller's deadline
/// is closer (or has passed): a reply that is on its way is worth waiting
/// for, and a bound of a few microseconds would turn every busy moment of a
/// loaded machine into a timeout error. This is the slack of every bound.
pub(crate) const ROUND_TRIP_FLOOR: Duration = Duration::from_millis(100);

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Whether this thread's latest [`cap`] gave less than its limit.
    static LAST_CAP_CUT: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread's latest timed-out round trip had been given
    /// less than its limit, for the deadline ([`note_timeout`]).
    static TIMEOUT_CUT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with `deadline` as this thread's deadline (the earlier of it
/// and an enclosing one), restoring the previous one afterwards.
pub(crate) fn within<T>(deadline: Option<Instant>, f: impl FnOnce() -> T) -> T {
    let _scope = enter(deadline);
    f()
}

/// Sets `deadline` as this thread's deadline (the earlier of it and an
/// enclosing one) until the returned scope is dropped, which restores the
/// previous one: [`within`] for a block too long to wrap in a closure.
pub(crate) fn enter(deadline: Option<Instant>) -> Scope {
    let previous = DEADLINE.with(Cell::get);
    let effective = match (previous, deadline) {
        (Some(p), Some(d)) => Some(p.min(d)),
        (p, d) => p.or(d),
    };
    DEADLINE.with(|cell| cell.set(effective));
    Scope(previous)
}

/// Restores, when dropped, the deadline that [`enter`] replaced: on unwind
/// too, so a panic cannot leave a stale deadline behind for the thread's
/// next call.
pub(crate) struct Scope(Option<Instant>);

impl Drop for Scope {
    fn drop(&mut self) {
        let previous = self.0;
        DEADLINE.with(|cell| cell.set(previous));
    }
}

/// What a step started more than [`ROUND_TRIP_FLOOR`] after the deadline
/// still gets: enough to read a reply already in the socket's buffer, and
/// no more, so that steps that are not skipped cannot add up.
pub(crate) const LATE_STEP: Duration = Duration::from_millis(10);

/// How long the next round trip (or connection opening, or pool checkout)
/// may take: `limit` (the response or connection timeout), capped by what
/// is left of this thread's deadline, but never less than
/// [`ROUND_TRIP_FLOOR`] before it (nor more than `limit`). After the
/// deadline, every step shares ONE floor: it gets what is left of the
/// deadline plus [`ROUND_TRIP_FLOOR`] (at least [`LATE_STEP`]), so a call
/// whose last attempt needs several steps (a checkout, a connection's
/// opening with its name and clock read, a resend, a fair waiter's
/// cancel) still returns within its wait plus about 100 ms, instead of
/// 100 ms per step.
pub(crate) fn cap(limit: Duration) -> Duration {
    let capped = capped(limit);
    LAST_CAP_CUT.with(|cell| cell.set(capped < limit));
    capped
}

fn capped(limit: Duration) -> Duration {
    match DEADLINE.with(Cell::get) {
        None => limit,
        Some(deadline) => {
            let now = Instant::now();
            let left = if now < deadline {
                deadline.duration_since(now).max(ROUND_TRIP_FLOOR)
            } else {
                deadline
                    .checked_add(ROUND_TRIP_FLOOR)
                    .map_or(ROUND_TRIP_FLOOR, |end| end.saturating_duration_since(now))
                    .max(LATE_STEP)
            };
            left.min(limit)
        }
    }
}

/// Called by the store when a round trip timed out: remembers whether it
/// had less than its own limit because of this thread's deadline (the
/// latest [`cap`]), so that the call can tell "the caller's wait ran out"
/// from "the server did not answer in its response timeout".
pub(crate) fn note_timeout() {
    let cut = LAST_CAP_CUT.with(Cell::get);
    TIMEOUT_CUT.with(|cell| cell.set(cut));
}

/// How long a store's next round trip (a reply, a connection's opening,
/// a pool checkout) may wait: `limit` (its own response or connection
/// timeout), capped by what is left of the calling thread's bound (a
/// `try_lock_for(wait)`, an `acquire_for`, ...), but never less than
/// 100 ms before it, so a reply on its way is still read. For a
/// [`LockBackend`](crate::LockBackend) of your own (see its obligations,
/// *Never wait for a lock; the caller's bound*).
///
/// ```
/// use std::time::Duration;
/// // No bounded call on this thread: the store's own limit.
/// assert_eq!(redisync::round_trip_timeout(Duration::from_secs(3)), Duration::from_secs(3));
/// ```
pub fn round_trip_timeout(limit: Duration) -> Duration {
    cap(limit)
}

/// Tells the calling thread's bounded call that a round trip of a store
/// timed out (after a wait [`round_trip_timeout`] gave it), so the call
/// can tell "its own wait ran out" from "the server did not answer in its
/// response timeout". For a [`LockBackend`](crate::LockBackend) of your
/// own.
///
/// ```
/// redisync::note_round_trip_timeout(); // no bounded call: nothing to tell
/// ```
pub fn note_round_trip_timeout() {
    note_timeout();
}

/// Whether a round trip timed out since the last call, cut short by this
/// thread's deadline (see [`note_timeout`]); clears it.
pub(crate) fn take_timeout_cut() -> bool {
    TIMEOUT_CUT.with(|cell| cell.replace(false))
}

/// This thread's deadline, to carry it to a helper thread.
#[cfg(feature = "cluster")]
pub(crate) fn current() -> Option<Instant> {
    DEADLINE.with(Cell::get)
}

/// Whether this thread's deadline has passed (false without one): a step
/// that could be skipped (one more idle connection to check, one more
/// sentinel or part to ask) is not started after it, since every round trip
/// started then still gets [`ROUND_TRIP_FLOOR`] and the floors would add up.
pub(crate) fn passed() -> bool {
    DEADLINE
        .with(Cell::get)
        .is_some_and(|deadline| Instant::now() >= deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_deadline_the_limit_stands() {
        assert_eq!(cap(Duration::from_secs(3)), Duration::from_secs(3));
    }

    #[test]
    fn a_deadline_caps_the_limit_down_to_the_floor() {
        let soon = Instant::now() + Duration::from_millis(500);
        within(Some(soon), || {
            let capped = cap(Duration::from_secs(3));
            assert!(capped <= Duration::from_millis(500), "{capped:?}");
            assert!(capped >= ROUND_TRIP_FLOOR, "{capped:?}");
            // The limit still wins when it is shorter.
            assert_eq!(cap(Duration::from_millis(20)), Duration::from_millis(20));
        });
        let past = Instant::now();
        within(Some(past), || {
            let capped = cap(Duration::from_secs(3));
            assert!(capped <= ROUND_TRIP_FLOOR, "{capped:?}");
            assert!(capped >= LATE_STEP, "{capped:?}");
        });
        // Restored afterwards.
        assert_eq!(cap(Duration::from_secs(3)), Duration::from_secs(3));
    }

    #[test]
    fn a_timeout_is_known_as_cut_only_when_the_deadline_cut_its_limit() {
        let soon = Instant::now() + Duration::from_millis(500);
        within(Some(soon), || {
            let _ = cap(Duration::from_secs(3));
            note_timeout();
            assert!(take_timeout_cut());
            assert!(!take_timeout_cut(), "cleared once read");
            // A limit the deadline does not cut: the server's own timeout.
            let _ = cap(Duration::from_millis(20));
            note_timeout();
            assert!(!take_timeout_cut());
        });
        let _ = cap(Duration::from_secs(3));
        note_timeout();
        assert!(!take_timeout_cut(), "no deadline, nothing cut");
    }

    /// After the deadline the steps share one floor: a step started 60 ms
    /// after it gets what is left of the 100 ms, one started after that
    /// gets [`LATE_STEP`] (each used to get a whole floor: ten steps, a
    /// second past the deadline).
    #[test]
    fn after_the_deadline_the_steps_share_one_floor() {
        let deadline = Instant::now()
            .checked_sub(Duration::from_millis(60))
            .expect("the monotonic clock has run for 60 ms");
        within(Some(deadline), || {
            let capped = cap(Duration::from_secs(3));
            assert!(capped <= Duration::from_millis(40), "{capped:?}");
            assert!(capped >= LATE_STEP, "{capped:?}");
        });
        let long_past = Instant::now()
            .checked_sub(Duration::from_secs(1))
            .expect("the monotonic clock has run for a second");
        within(Some(long_past), || {
            assert_eq!(cap(Duration::from_secs(3)), LATE_STEP);
            // A shorter limit still wins.
            assert_eq!(cap(Duration::from_millis(2)), Duration::from_millis(2));
        });
    }

    #[test]
    fn passed_only_after_a_deadline() {
        assert!(!passed());
        within(Some(Instant::now() + Duration::from_secs(60)), || {
            assert!(!passed())
        });
        within(Some(Instant::now()), || assert!(passed()));
        assert!(!passed());
    }

    #[test]
    fn nested_deadlines_keep_the_earlier() {
        let near = Instant::now() + Duration::from_millis(200);
        let far = Instant::now() + Duration::from_secs(60);
        within(Some(near), || {
            within(Some(far), || {
                assert!(cap(Duration::from_secs(3)) <= Duration::from_millis(200))
            });
            within(None, || {
                assert!(cap(Duration::from_secs(3)) <= Duration::from_millis(200))
            });
        });
    }
}
