//! What the library records through the `metrics` facade crate (feature
//! `metrics`); without the feature every function here is empty and the
//! compiler removes the calls.
//!
//! The names and labels are listed in README (Operations, Metrics). Every
//! metric carries the label `primitive` except the client-wide ones
//! (renewals, lost leases, subscriber reconnects).

use std::time::Duration;

/// Describes every metric to the installed recorder (units and help
/// texts), once per process; called when a client is built.
pub(crate) fn describe() {
    #[cfg(feature = "metrics")]
    {
        static DESCRIBED: std::sync::Once = std::sync::Once::new();
        DESCRIBED.call_once(|| {
            use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
            describe_counter!(
                "redisync_acquisitions_total",
                "Blocking calls that got what they waited for (a lock, permits, an open latch)"
            );
            describe_counter!("redisync_timeouts_total", "Bounded waits that ran out");
            describe_counter!(
                "redisync_cancellations_total",
                "Waits ended through their CancellationToken (nothing was acquired)"
            );
            describe_counter!(
                "redisync_errors_total",
                "Blocking calls that failed with an error"
            );
            describe_histogram!(
                "redisync_wait_seconds",
                Unit::Seconds,
                "Time from the call to the acquisition"
            );
            describe_histogram!(
                "redisync_hold_seconds",
                Unit::Seconds,
                "Time a lock guard was held"
            );
            describe_gauge!("redisync_locks_held", "Lock guards alive in this process");
            describe_gauge!(
                "redisync_waiters_parked",
                "Threads parked waiting for a wake-up"
            );
            describe_counter!("redisync_renewals_total", "Leases the watchdog renewed");
            describe_counter!(
                "redisync_renewal_failures_total",
                "Renewals that failed and are retried"
            );
            describe_counter!(
                "redisync_leases_lost_total",
                "Held locks whose lease was lost"
            );
            describe_counter!(
                "redisync_subscriber_reconnects_total",
                "Pub/sub connections lost and reopened"
            );
            describe_counter!(
                "redisync_election_terms_won_total",
                "Leader election terms this process won"
            );
            describe_counter!(
                "redisync_election_terms_lost_total",
                "Leader election terms this process found lost before resigning"
            );
        });
    }
}

/// The `primitive` label of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Primitive {
    Lock,
    FencedLock,
    FairLock,
    ReadLock,
    WriteLock,
    Semaphore,
    PermitExpirableSemaphore,
    CountDownLatch,
    Barrier,
}

impl Primitive {
    /// The label value.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn label(self) -> &'static str {
        match self {
            Primitive::Lock => "lock",
            Primitive::FencedLock => "fenced_lock",
            Primitive::FairLock => "fair_lock",
            Primitive::ReadLock => "read_lock",
            Primitive::WriteLock => "write_lock",
            Primitive::Semaphore => "semaphore",
            Primitive::PermitExpirableSemaphore => "permit_expirable_semaphore",
            Primitive::CountDownLatch => "count_down_latch",
            Primitive::Barrier => "barrier",
        }
    }
}

/// How a blocking call (an acquire, a latch wait) ended after `waited`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn finished<T>(
    primitive: Primitive,
    waited: Duration,
    outcome: &crate::Result<Option<T>>,
) {
    #[cfg(feature = "metrics")]
    {
        let label = primitive.label();
        match outcome {
            Ok(Some(_)) => {
                metrics::counter!("redisync_acquisitions_total", "primitive" => label).increment(1);
                metrics::histogram!("redisync_wait_seconds", "primitive" => label)
                    .record(waited.as_secs_f64());
            }
            Ok(None) => {
                metrics::counter!("redisync_timeouts_total", "primitive" => label).increment(1);
            }
            Err(err) if err.is_cancelled() => {
                metrics::counter!("redisync_cancellations_total", "primitive" => label)
                    .increment(1);
            }
            Err(_) => {
                metrics::counter!("redisync_errors_total", "primitive" => label).increment(1);
            }
        }
    }
}

/// A hold began (a lock guard was handed out).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn hold_started(primitive: Primitive) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("redisync_locks_held", "primitive" => primitive.label()).increment(1.0);
}

/// A hold that lasted `held` ended (its guard was released or dropped).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn hold_ended(primitive: Primitive, held: Duration) {
    #[cfg(feature = "metrics")]
    {
        let label = primitive.label();
        metrics::gauge!("redisync_locks_held", "primitive" => label).decrement(1.0);
        metrics::histogram!("redisync_hold_seconds", "primitive" => label)
            .record(held.as_secs_f64());
    }
}

/// A waiter parks until dropped: counts in `redisync_waiters_parked`.
#[derive(Debug)]
pub(crate) struct Parked {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    primitive: Primitive,
}

impl Parked {
    /// The waiter of `primitive` parks.
    pub(crate) fn new(primitive: Primitive) -> Parked {
        #[cfg(feature = "metrics")]
        metrics::gauge!("redisync_waiters_parked", "primitive" => primitive.label()).increment(1.0);
        Parked { primitive }
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        metrics::gauge!("redisync_waiters_parked", "primitive" => self.primitive.label())
            .decrement(1.0);
    }
}

/// The watchdog renewed a lease.
pub(crate) fn renewed() {
    #[cfg(feature = "metrics")]
    metrics::counter!("redisync_renewals_total").increment(1);
}

/// A renewal failed and will be retried.
pub(crate) fn renewal_failed() {
    #[cfg(feature = "metrics")]
    metrics::counter!("redisync_renewal_failures_total").increment(1);
}

/// A held lock's lease was lost.
pub(crate) fn lease_lost() {
    #[cfg(feature = "metrics")]
    metrics::counter!("redisync_leases_lost_total").increment(1);
}

/// The pub/sub subscriber connected again after losing its connection.
pub(crate) fn subscriber_reconnected() {
    #[cfg(feature = "metrics")]
    metrics::counter!("redisync_subscriber_reconnects_total").increment(1);
}

/// This process won a leader election's term.
pub(crate) fn election_term_won() {
    #[cfg(feature = "metrics")]
    metrics::counter!("redisync_election_terms_won_total").increment(1);
}

/// A leadership of this process was found lost (its lease within the
/// margin of its end, or its hold gone) before it resigned.
pub(crate) fn election_term_lost() {
    #[cfg(feature = "metrics")]
    metrics::counter!("redisync_election_terms_lost_total").increment(1);
}

#[cfg(test)]
mod tests {
    /// Every metric this file records has a HELP text: its name appears in
    /// a `describe_*!` call (read from the source, so a metric added
    /// without one fails here, with or without the `metrics` feature).
    #[test]
    fn every_metric_recorded_is_described() {
        let source = include_str!("telemetry.rs");
        let (described, recorded): (Vec<&str>, Vec<&str>) = {
            let mut described = Vec::new();
            let mut recorded = Vec::new();
            for (at, _) in source.match_indices("!(") {
                let before = &source[..at];
                let macro_name = before
                    .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or_default();
                let after = source[at + 2..].trim_start();
                let Some(name) = after
                    .strip_prefix('"')
                    .and_then(|rest| rest.split('"').next())
                    .filter(|name| name.starts_with("redisync_"))
                else {
                    continue;
                };
                if macro_name.starts_with("describe_") {
                    described.push(name);
                } else {
                    recorded.push(name);
                }
            }
            (described, recorded)
        };
        assert!(recorded.len() >= 10, "{recorded:?}");
        for name in &recorded {
            assert!(
                described.contains(name),
                "{name} is recorded but never described"
            );
        }
    }
}
