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

/// A `TIME` reading whose round trip is at most this is trusted at its
/// midpoint: its error (half the round trip) then stays well inside the
/// window margin (`backend::script::WINDOW_MARGIN`, 25 ms). A longer one is
/// trusted only when the link is that slow anyway (at most twice the best
/// round trip seen before, see [`Reading::is_precise`]).
pub(crate) const PRECISE_READING_MS: i64 = 20;

/// One reading of a server's clock: `TIME` answered `server_ms` to a
/// request sent at `before_ms` and answered by `after_ms` on
/// [`monotonic_ms`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    pub(crate) server_ms: i64,
    pub(crate) before_ms: i64,
    pub(crate) after_ms: i64,
}

impl Reading {
    /// Its round trip, in ms.
    pub(crate) fn round_trip_ms(&self) -> i64 {
        self.after_ms.saturating_sub(self.before_ms)
    }

    /// Whether its midpoint is trusted: its round trip is within
    /// [`PRECISE_READING_MS`], or within twice `best_ms`, the best round
    /// trip seen before on the same clock (a slow link, not a reading held
    /// up by a frozen server or network).
    pub(crate) fn is_precise(&self, best_ms: Option<i64>) -> bool {
        let round_trip = self.round_trip_ms();
        round_trip <= PRECISE_READING_MS
            || best_ms.is_some_and(|best| round_trip <= best.saturating_mul(2))
    }

    /// The offset to keep from this reading, `previous` being the one
    /// kept before (if any). A short round trip gives its midpoint. A long
    /// one (the server frozen, the reply held by the network) cannot tell
    /// where in it the server read its clock, and its midpoint may be up to
    /// half of it ahead — windows would then end late, letting a copy act
    /// after its caller was told it failed. So: the previous offset while
    /// it is consistent with this reading (the server read its clock
    /// between `before` and `after`), and otherwise `server − after`,
    /// which is never ahead (windows end early at worst: a late request is
    /// refused, never one acted on too late). The caller reads again soon
    /// after an imprecise reading. `best_ms`: see [`Self::is_precise`].
    pub(crate) fn offset(&self, previous: Option<i64>, best_ms: Option<i64>) -> i64 {
        if self.is_precise(best_ms) {
            return server_offset(self.server_ms, self.before_ms, self.after_ms);
        }
        let earliest = self.server_ms.saturating_sub(self.after_ms);
        let latest = self.server_ms.saturating_sub(self.before_ms);
        match previous {
            Some(previous) if (earliest..=latest).contains(&previous) => previous,
            _ => earliest,
        }
    }
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
    /// The best round trip of a reading so far, ms ([`UNREAD`]: none).
    best_round_trip_ms: AtomicI64,
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
            best_round_trip_ms: AtomicI64::new(UNREAD),
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

    /// The offset to keep from `reading` (see [`Reading::offset`]) against
    /// the last one kept and the best round trip seen, and whether the
    /// reading was coarse (read again soon). Notes its round trip.
    pub(crate) fn offset_from(&self, reading: &Reading) -> (i64, bool) {
        // Relaxed: a hint; a race costs at most one coarse reading more.
        let best = self.best_round_trip_ms.load(Ordering::Relaxed);
        let best = (best != UNREAD).then_some(best);
        let round_trip = reading.round_trip_ms();
        if best.is_none_or(|best| round_trip < best) {
            // Relaxed: a hint, as the load above.
            self.best_round_trip_ms.store(round_trip, Ordering::Relaxed);
        }
        (
            reading.offset(self.offset_ms(), best),
            !reading.is_precise(best),
        )
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

    #[test]
    fn a_slow_link_is_read_at_the_midpoint_after_one_coarse_reading() {
        let clock = ServerClock::default();
        let reading = |at: i64| Reading {
            server_ms: 50_000 + at + 100,
            before_ms: at,
            after_ms: at + 200,
        };
        // First: coarse (no round trip known), never ahead.
        assert_eq!(clock.offset_from(&reading(0)), (50_000 - 100, true));
        // Then the link's own round trip: the midpoint.
        assert_eq!(clock.offset_from(&reading(1_000)), (50_000, false));
    }

    #[test]
    fn a_reading_with_a_long_round_trip_is_never_ahead() {
        // Precise: the midpoint.
        let precise = Reading {
            server_ms: 10_000,
            before_ms: 100,
            after_ms: 110,
        };
        assert!(precise.is_precise(None));
        assert_eq!(precise.offset(Some(1), None), 10_000 - 105);
        // A TIME whose round trip spans a 2 s freeze: the server may have
        // read its clock anywhere in it.
        let frozen = Reading {
            server_ms: 10_000,
            before_ms: 100,
            after_ms: 2_100,
        };
        assert!(!frozen.is_precise(None));
        assert!(!frozen.is_precise(Some(1)));
        // No previous reading: `server - after`, never ahead.
        assert_eq!(frozen.offset(None, Some(1)), 10_000 - 2_100);
        // A previous offset consistent with it is kept.
        assert_eq!(frozen.offset(Some(9_000), Some(1)), 9_000);
        // One it rules out (the clock stepped) is not.
        assert_eq!(frozen.offset(Some(9_950), Some(1)), 10_000 - 2_100);
        assert_eq!(frozen.offset(Some(7_000), Some(1)), 10_000 - 2_100);
        // On a link that slow anyway (its best round trip 1.5 s): the
        // midpoint.
        assert!(frozen.is_precise(Some(1_500)));
        assert_eq!(frozen.offset(Some(7_000), Some(1_500)), 10_000 - 1_100);
        // Whatever the server's true offset in the reading's bounds, the
        // kept one is never ahead of it (the midpoint would be, by up to
        // 1 s).
        for true_offset in [7_900, 8_500, 9_900] {
            assert!(frozen.offset(None, Some(1)) <= true_offset);
        }
    }
}
