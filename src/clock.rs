//! The clocks the library reads: the caller's wall clock, for the values
//! Redisson computes from it (fair lock queue slots, permit lease ends),
//! and this process's monotonic clock, on which every request window and
//! every estimate of the server's clock is measured.
//!
//! A request's window is written in the server's clock (see
//! `backend::Script::is_windowed`), estimated as a reading of the server's
//! `TIME` plus the monotonic time since that reading ([`ServerClock`]).
//! NTP stepping this machine's wall clock, or a VM resuming, then moves no
//! window: the estimate never reads the wall clock.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

/// Milliseconds since the Unix epoch (Redisson's `System.currentTimeMillis()`).
pub(crate) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Milliseconds on this process's monotonic clock, since its first reading.
/// Never steps: only differences between two readings mean anything.
pub(crate) fn monotonic_ms() -> i64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = START.get_or_init(Instant::now);
    i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX / 4)
}

/// How far a new reading of the server's clock may fall from the estimate
/// before it counts as a step: the error of two readings (half a round trip
/// each) and the drift of two clocks over the time between them.
pub(crate) const STEP_TOLERANCE_MS: i64 = 1_000;

/// The offset of a server's clock, `TIME` read at `server_ms` by the
/// server while this process's monotonic clock read `local_ms` (the
/// midpoint of the readings around the request): the server's clock is
/// then `offset + monotonic_ms()`, off by at most half that round trip.
pub(crate) fn server_offset(server_ms: i64, before_ms: i64, after_ms: i64) -> i64 {
    server_ms.saturating_sub(before_ms + (after_ms - before_ms) / 2)
}

/// The server's clock now, by an offset from [`server_offset`].
pub(crate) fn server_now(offset_ms: i64) -> i64 {
    monotonic_ms().saturating_add(offset_ms)
}

/// One server's clock as this process last read it, shared by the
/// connections to it: the offset of its `TIME` to [`monotonic_ms`], and an
/// epoch that moves each time a reading found the clock stepped (so every
/// connection reads it again before its next request).
#[derive(Debug)]
pub(crate) struct ServerClock {
    offset_ms: AtomicI64,
    epoch: AtomicU64,
}

/// A step of a server's clock, found by a new reading: how far it moved
/// against the previous estimate (negative: back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) step_ms: i64,
}

/// [`ServerClock::offset_ms`] before any reading.
const UNREAD: i64 = i64::MIN;

impl Default for ServerClock {
    fn default() -> Self {
        ServerClock {
            offset_ms: AtomicI64::new(UNREAD),
            epoch: AtomicU64::new(0),
        }
    }
}

impl ServerClock {
    /// The offset last read (`None`: not read yet).
    pub(crate) fn offset_ms(&self) -> Option<i64> {
        // Relaxed: one value on its own; nothing else is published with it.
        Some(self.offset_ms.load(Ordering::Relaxed)).filter(|&offset| offset != UNREAD)
    }

    /// The server's clock now, as estimated from the last reading.
    pub(crate) fn now_ms(&self) -> Option<i64> {
        self.offset_ms().map(server_now)
    }

    /// The epoch: a connection that read the clock in an earlier one reads
    /// it again.
    pub(crate) fn epoch(&self) -> u64 {
        // Relaxed: a connection that misses a bump by a moment re-reads at
        // its next request; the bump carries no other data.
        self.epoch.load(Ordering::Relaxed)
    }

    /// Records a new reading `offset_ms` and returns the step it shows
    /// against the previous one, if it moved more than
    /// [`STEP_TOLERANCE_MS`] (the epoch then moves on).
    pub(crate) fn observe(&self, offset_ms: i64) -> Option<Step> {
        // Relaxed: one value on its own (as in `offset_ms`).
        let previous = self.offset_ms.swap(offset_ms, Ordering::Relaxed);
        if previous == UNREAD {
            return None;
        }
        let step_ms = offset_ms.saturating_sub(previous);
        if step_ms.abs() <= STEP_TOLERANCE_MS {
            return None;
        }
        // Relaxed: as in `epoch`; the bump carries no other data.
        self.epoch.fetch_add(1, Ordering::Relaxed);
        Some(Step { step_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_clock_is_estimated_on_the_monotonic_clock() {
        let clock = ServerClock::default();
        assert_eq!(clock.now_ms(), None);
        // A server 1,000,000 ms ahead of the monotonic clock.
        let before = monotonic_ms();
        assert_eq!(
            clock.observe(server_offset(before + 1_000_000, before, before)),
            None
        );
        let now = clock.now_ms().unwrap_or(0);
        assert!(
            (before + 1_000_000..before + 1_000_000 + 5_000).contains(&now),
            "{now}"
        );
    }

    #[test]
    fn a_reading_off_the_estimate_by_more_than_the_tolerance_is_a_step() {
        let clock = ServerClock::default();
        assert_eq!(clock.observe(50_000), None);
        // Within the tolerance: the reading's own error, no step.
        assert_eq!(clock.observe(50_000 - STEP_TOLERANCE_MS), None);
        assert_eq!(clock.epoch(), 0);
        // Stepped back 30 s.
        assert_eq!(
            clock.observe(20_000 - STEP_TOLERANCE_MS),
            Some(Step { step_ms: -30_000 })
        );
        assert_eq!(clock.epoch(), 1);
        assert_eq!(clock.offset_ms(), Some(20_000 - STEP_TOLERANCE_MS));
        // And forward again.
        assert_eq!(clock.observe(60_000), Some(Step { step_ms: 41_000 }));
        assert_eq!(clock.epoch(), 2);
    }
}
