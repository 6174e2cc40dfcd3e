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

/// How long the next round trip may take: `limit` (the response or
/// connection timeout), capped by what is left of this thread's deadline,
/// but never less than [`ROUND_TRIP_FLOOR`] (nor more than `limit`).
pub(crate) fn cap(limit: Duration) -> Duration {
    match DEADLINE.with(Cell::get) {
        None => limit,
        Some(deadline) => deadline
            .saturating_duration_since(Instant::now())
            .max(ROUND_TRIP_FLOOR)
            .min(limit),
    }
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
            assert_eq!(cap(Duration::from_secs(3)), ROUND_TRIP_FLOOR)
        });
        // Restored afterwards.
        assert_eq!(cap(Duration::from_secs(3)), Duration::from_secs(3));
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
