//! What a guard knows of its hold's lease, by the local clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A hold's lease: when it ends if not renewed, and whether the hold was
/// found gone. Shared by the guard (which reads it) and the watchdog (which
/// extends it).
#[derive(Debug)]
pub(crate) struct Lease {
    lost: AtomicBool,
    /// When the lease ends if not renewed; `None` = unknown (too far away).
    ends: Mutex<Option<Instant>>,
}

impl Lease {
    /// A lease that ends `length` after `sent` (when its request was sent).
    pub(crate) fn new(sent: Instant, length: Duration) -> Arc<Lease> {
        Arc::new(Lease {
            lost: AtomicBool::new(false),
            ends: Mutex::new(sent.checked_add(length)),
        })
    }

    /// A lease that ends at `ends` (`None`: unknown, too far away).
    pub(crate) fn until(ends: Option<Instant>) -> Arc<Lease> {
        Arc::new(Lease {
            lost: AtomicBool::new(false),
            ends: Mutex::new(ends),
        })
    }

    /// True once the lock was found gone or the lease's end has passed.
    pub(crate) fn is_lost(&self) -> bool {
        self.is_lost_at(Instant::now())
    }

    /// As [`is_lost`](Self::is_lost), with the clock reading `now`.
    pub(crate) fn is_lost_at(&self, now: Instant) -> bool {
        // Acquire: pairs with `mark_lost`'s Release.
        self.lost.load(Ordering::Acquire) || self.ends.lock().is_some_and(|end| now >= end)
    }

    /// True when the hold is not known lost and its lease still has more
    /// than `margin` to run at `at` (a lease too long to represent always
    /// has).
    pub(crate) fn holds_beyond(&self, at: Instant, margin: Duration) -> bool {
        // Acquire: pairs with `mark_lost`'s Release.
        if self.lost.load(Ordering::Acquire) {
            return false;
        }
        match *self.ends.lock() {
            None => true,
            Some(end) => at.checked_add(margin).is_some_and(|t| t < end),
        }
    }

    /// When the lease ends, if representable.
    pub(crate) fn ends(&self) -> Option<Instant> {
        *self.ends.lock()
    }

    pub(crate) fn mark_lost(&self) {
        // Release: a one-way flag (never cleared); a guard that reads it
        // (Acquire) sees what the watchdog did before finding the hold
        // gone. The lease's end is under its own mutex, ordered apart.
        self.lost.store(true, Ordering::Release);
    }

    pub(crate) fn renewed(&self, sent: Instant, length: Duration) {
        *self.ends.lock() = sent.checked_add(length);
    }

    /// The store raised the lease (a call that never shortens it) to end
    /// `length` after `sent`, if that is later: applied only while the end
    /// is still `expected` (what it was when the raise was sent). A change
    /// made meanwhile (the holder's own `extend`, which may shorten)
    /// may have landed after the raise, so it is the one to keep.
    pub(crate) fn raised_from(&self, expected: Option<Instant>, sent: Instant, length: Duration) {
        let mut ends = self.ends.lock();
        if *ends != expected {
            return;
        }
        if let (Some(old), Some(new)) = (expected, sent.checked_add(length)) {
            *ends = Some(old.max(new));
        }
    }

    /// A change of the lease whose outcome is unknown (its reply was lost):
    /// the lease may now end `length` after `sent`, or as before, so it is
    /// trusted only until the earlier of the two.
    pub(crate) fn maybe_changed(&self, sent: Instant, length: Duration) {
        let mut ends = self.ends.lock();
        *ends = match (*ends, sent.checked_add(length)) {
            (Some(old), Some(new)) => Some(old.min(new)),
            (old, new) => old.or(new),
        };
    }
}
