//! The caller's wall clock, for the values Redisson computes from it (fair
//! lock queue slots, permit lease ends).

/// Milliseconds since the Unix epoch (Redisson's `System.currentTimeMillis()`).
pub(crate) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
