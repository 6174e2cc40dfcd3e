//! The spin lock: Redisson's `RSpinLock` (`getSpinLock(name)`), a
//! reentrant [`Lock`] whose waiters sleep with exponential [`Backoff`]
//! between attempts instead of parking on a pub/sub channel.
//!
//! It is the reentrant lock itself, with another wait strategy: the same
//! hash, holder fields, scripts, watchdog and [`LockGuard`](crate::LockGuard)
//! (so a spin lock and a [`Client::lock`](crate::Client::lock) of the same name exclude each
//! other, as Redisson's `RSpinLock` and `RLock` do). Only the wait differs:
//! it never subscribes to anything, so it works where pub/sub does not (a
//! proxy without it) and costs the server no subscription per waiting
//! client. Its release is the shared one, which still publishes the unlock
//! message, so pub/sub waiters of a plain [`Lock`] of the same name wake at
//! once; a spin waiter notices a release at its next attempt.
//!
//! The backoff mirrors Redisson's `LockOptions.ExponentialBackOff`: the
//! first pause is the initial delay; each next one is the last times the
//! multiplier plus a jitter of `0..n` ms after the `n`th growth, capped at
//! the maximum delay, which is then kept. Every pause is also capped by what
//! is left of the caller's wait, so a bounded wait ends on time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::telemetry::{Parked, Primitive};
use crate::wait::{Attempt, Done, Wait};
use crate::{Error, Lock, Result};

/// How a spin lock's waiter paces its attempts: Redisson's
/// `LockOptions.ExponentialBackOff`. Pass it to
/// [`Client::spin_lock_with_backoff`](crate::Client::spin_lock_with_backoff); [`Client::spin_lock`](crate::Client::spin_lock) uses
/// [`Backoff::default`] (Redisson's defaults: 1 ms, growing ×2 up to
/// 128 ms).
///
/// Built only through [`exponential`](Self::exponential) and
/// [`constant`](Self::constant), which check their arguments, so every
/// `Backoff` is valid.
///
/// ```
/// use std::time::Duration;
/// use redisync::Backoff;
/// let backoff = Backoff::exponential(Duration::from_millis(5), Duration::from_millis(200), 3)?;
/// assert_eq!(backoff.max_delay(), Duration::from_millis(200));
/// assert_eq!(Backoff::default().initial_delay(), Duration::from_millis(1));
/// # Ok::<(), redisync::Error>(())
/// ```
#[doc(alias = "BackOff")]
#[doc(alias = "ExponentialBackOff")]
#[doc(alias = "LockOptions")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Backoff {
    initial_delay: Duration,
    max_delay: Duration,
    multiplier: u32,
}

impl Default for Backoff {
    /// Redisson's defaults: 1 ms, ×2, at most 128 ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// let backoff = redisync::Backoff::default();
    /// assert_eq!(backoff.max_delay(), Duration::from_millis(128));
    /// assert_eq!(backoff.multiplier(), 2);
    /// ```
    fn default() -> Self {
        Backoff {
            initial_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(128),
            multiplier: 2,
        }
    }
}

impl Backoff {
    /// Pauses that start at `initial_delay` and grow `multiplier` times (plus
    /// a few ms of jitter, as Redisson's) up to `max_delay`.
    ///
    /// # Errors
    /// `InvalidArgument` naming the argument when `initial_delay` or
    /// `max_delay` is under 1 ms or over [`MAX_LEASE`](crate::MAX_LEASE),
    /// when `max_delay` is less than `initial_delay`, or when `multiplier`
    /// is 0.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redisync::Backoff;
    /// let patient = Backoff::exponential(Duration::from_millis(10), Duration::from_secs(1), 2)?;
    /// let err = Backoff::exponential(Duration::ZERO, Duration::from_secs(1), 2).unwrap_err();
    /// assert!(err.to_string().contains("initial_delay"));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn exponential(
        initial_delay: Duration,
        max_delay: Duration,
        multiplier: u32,
    ) -> Result<Backoff> {
        crate::error::millis("initial_delay", initial_delay)?;
        crate::error::millis("max_delay", max_delay)?;
        if max_delay < initial_delay {
            return Err(Error::invalid(
                "max_delay",
                format!(
                    "must not be less than initial_delay ({initial_delay:?}), got {max_delay:?}"
                ),
            ));
        }
        if multiplier == 0 {
            return Err(Error::invalid(
                "multiplier",
                "must be at least 1 (1 keeps the delay constant but for the jitter), got 0",
            ));
        }
        Ok(Backoff {
            initial_delay,
            max_delay,
            multiplier,
        })
    }

    /// The same pause every time: Redisson's `LockOptions.ConstantBackOff`
    /// (whose default is 64 ms).
    ///
    /// # Errors
    /// `InvalidArgument` naming `delay` when it is under 1 ms or over
    /// [`MAX_LEASE`](crate::MAX_LEASE).
    ///
    /// ```
    /// use std::time::Duration;
    /// let steady = redisync::Backoff::constant(Duration::from_millis(64))?;
    /// assert_eq!(steady.initial_delay(), steady.max_delay());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "ConstantBackOff")]
    pub fn constant(delay: Duration) -> Result<Backoff> {
        crate::error::millis("delay", delay)?;
        Ok(Backoff {
            initial_delay: delay,
            max_delay: delay,
            multiplier: 1,
        })
    }

    /// The first pause.
    ///
    /// ```
    /// assert_eq!(redisync::Backoff::default().initial_delay().as_millis(), 1);
    /// ```
    pub fn initial_delay(&self) -> Duration {
        self.initial_delay
    }

    /// The longest pause.
    ///
    /// ```
    /// assert_eq!(redisync::Backoff::default().max_delay().as_millis(), 128);
    /// ```
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// How many times longer each pause is than the last (before the cap).
    ///
    /// ```
    /// assert_eq!(redisync::Backoff::default().multiplier(), 2);
    /// ```
    pub fn multiplier(&self) -> u32 {
        self.multiplier
    }

    /// The pauses of one wait.
    fn pauses(self) -> Pauses {
        Pauses {
            next: self.initial_delay,
            max: self.max_delay,
            multiplier: self.multiplier,
            grown: 0,
        }
    }
}

/// The pauses of one wait (Redisson's `ExponentialBackOffPolicy`).
#[derive(Debug)]
struct Pauses {
    next: Duration,
    max: Duration,
    multiplier: u32,
    /// How many times the pause grew: the jitter's bound in ms.
    grown: u32,
}

impl Pauses {
    fn next(&mut self) -> Duration {
        if self.next >= self.max {
            return self.max;
        }
        let pause = self.next;
        self.grown = self.grown.saturating_add(1);
        // Jitter keeps waiters that started together from retrying together.
        let jitter = Duration::from_millis(random_below(self.grown));
        self.next = pause
            .checked_mul(self.multiplier)
            .and_then(|grown| grown.checked_add(jitter))
            .map_or(self.max, |grown| grown.min(self.max));
        pause
    }
}

/// A random number in `0..bound` (0 for a bound of 0 or 1).
fn random_below(bound: u32) -> u64 {
    if bound <= 1 {
        return 0;
    }
    let draw = uuid::Uuid::new_v4().as_u128() % u128::from(bound);
    u64::try_from(draw).unwrap_or(0)
}

/// The spin lock's wait: attempt; if the lock is held, sleep the next
/// pause (never past the wait's deadline) and attempt again, until the
/// attempt succeeds or the wait runs out (`Ok(None)`). Subscribes to
/// nothing. Errors from `attempt` end the wait.
pub(crate) fn until_done<T>(
    backoff: Backoff,
    wait: Wait,
    primitive: Primitive,
    cancel: Option<(&crate::CancellationToken, &str)>,
    attempt: impl FnMut() -> Result<Attempt<T>>,
) -> Result<Option<Done<T>>> {
    let started = Instant::now();
    let outcome = crate::deadline::within(wait.deadline(), || {
        spin(backoff, wait, primitive, cancel, attempt)
    });
    crate::telemetry::finished(primitive, started.elapsed(), &outcome);
    outcome
}

fn spin<T>(
    backoff: Backoff,
    wait: Wait,
    primitive: Primitive,
    cancel: Option<(&crate::CancellationToken, &str)>,
    mut attempt: impl FnMut() -> Result<Attempt<T>>,
) -> Result<Option<Done<T>>> {
    let mut pauses = backoff.pauses();
    loop {
        if let Some((token, name)) = cancel
            && token.is_cancelled()
        {
            return Err(crate::Error::Cancelled {
                name: name.to_owned(),
            });
        }
        // The holder's TTL is no hint here: Redisson's spin lock paces by
        // the backoff alone.
        if let Attempt::Done(value) = attempt()? {
            return Ok(Some(Done::Attempted(value)));
        }
        if wait.passed() {
            return Ok(None);
        }
        let pause = match wait.deadline() {
            Some(deadline) => pauses
                .next()
                .min(deadline.saturating_duration_since(Instant::now())),
            None => pauses.next(),
        };
        let _parked = Parked::new(primitive);
        // A cancel ends the pause at once.
        crate::cancel::pause(cancel.map(|(token, _)| token), pause);
    }
}

impl Lock {
    /// This reentrant lock, waiting by `backoff` instead of on pub/sub
    /// (see [`Client::spin_lock_with_backoff`](crate::Client::spin_lock_with_backoff)).
    pub(crate) fn spinning(mut self, backoff: Backoff) -> Lock {
        self.spin = Some(Arc::new(backoff));
        self
    }
}

impl Lock {
    /// The backoff of a spin lock ([`Client::spin_lock`](crate::Client::spin_lock)); `None` for a lock
    /// whose waiters park on pub/sub.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.spin_lock("a").spin_backoff(), Some(redisync::Backoff::default()));
    /// assert_eq!(client.lock("a").spin_backoff(), None);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn spin_backoff(&self) -> Option<Backoff> {
        self.spin.as_deref().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn default_pauses_grow_from_1ms_to_128ms_with_small_jitter() {
        let mut pauses = Backoff::default().pauses();
        let seen: Vec<Duration> = (0..12).map(|_| pauses.next()).collect();
        assert_eq!(seen[0], ms(1));
        // Each pause is the last ×2 plus a jitter below its growth count.
        for (i, pair) in seen.windows(2).enumerate() {
            let (last, next) = (pair[0], pair[1]);
            if last == ms(128) {
                assert_eq!(next, ms(128), "pauses {seen:?}");
                continue;
            }
            let jitter_bound = ms(u64::try_from(i).unwrap() + 1);
            assert!(next >= (last * 2).min(ms(128)), "pauses {seen:?}");
            assert!(next < last * 2 + jitter_bound, "pauses {seen:?}");
        }
        assert_eq!(seen[11], ms(128), "pauses {seen:?}");
    }

    #[test]
    fn constant_pauses_do_not_grow() {
        let mut pauses = Backoff::constant(ms(64)).unwrap().pauses();
        assert!((0..5).all(|_| pauses.next() == ms(64)));
    }

    #[test]
    fn huge_delays_saturate_instead_of_overflowing() {
        let backoff = Backoff::exponential(ms(1 << 46), crate::MAX_LEASE, u32::MAX).unwrap();
        let mut pauses = backoff.pauses();
        assert_eq!(pauses.next(), ms(1 << 46));
        assert_eq!(pauses.next(), crate::MAX_LEASE);
        assert_eq!(pauses.next(), crate::MAX_LEASE);
    }

    #[test]
    fn bad_backoffs_name_their_argument() {
        let what = |result: Result<Backoff>| match result {
            Err(Error::InvalidArgument { what, why }) => (what, why),
            other => panic!("expected InvalidArgument, got {other:?}"),
        };
        let (arg, why) = what(Backoff::exponential(Duration::ZERO, ms(10), 2));
        assert_eq!(arg, "initial_delay");
        assert!(why.contains("at least 1ms"), "{why}");
        assert_eq!(what(Backoff::exponential(ms(1), ms(0), 2)).0, "max_delay");
        let (arg, why) = what(Backoff::exponential(ms(20), ms(10), 2));
        assert_eq!(arg, "max_delay");
        assert!(why.contains("initial_delay (20ms)"), "{why}");
        assert_eq!(what(Backoff::exponential(ms(1), ms(10), 0)).0, "multiplier");
        assert_eq!(
            what(Backoff::exponential(ms(1), Duration::MAX, 2)).0,
            "max_delay"
        );
        assert_eq!(
            what(Backoff::constant(Duration::from_micros(500))).0,
            "delay"
        );
    }

    #[test]
    fn random_below_stays_below() {
        assert_eq!(random_below(0), 0);
        assert_eq!(random_below(1), 0);
        assert!((0..200).all(|_| random_below(3) < 3));
    }
}
