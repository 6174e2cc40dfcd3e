//! Replica acknowledgement (Redisson's synced-replica check): after every
//! script that changed something, the Redis backend sends `WAIT <replicas>
//! <timeout>` on the same connection, so success is reported only once
//! enough replicas hold the change, and a shortfall is handled by policy.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::RedisBackend;
use super::run::call_name;
use crate::backend::{Effect, Reply, ScriptCall};
use crate::event::{EventHandler, LoggingEventHandler, ReplicaShortfallEvent};
use crate::{Error, Result};

/// How many replicas must confirm each lock-changing write, how long to
/// wait for them, and what a shortfall does. Set it with
/// [`ClientBuilder::replica_acknowledgement`](crate::ClientBuilder::replica_acknowledgement)
/// or [`RedisOptions::replica_acknowledgement`](super::RedisOptions::replica_acknowledgement).
///
/// Without it, a lock acquired on a master that fails over before
/// replicating the write is lost, and a second holder can take it on the
/// promoted replica. With it, every acquisition the call reports has reached
/// the required replicas. It costs one `WAIT` round trip per write (the
/// replication delay, typically well under a millisecond on a LAN).
///
/// ```
/// use std::time::Duration;
/// use redisync::{ReplicaAcknowledgement, ReplicaShortfall};
/// let ack = ReplicaAcknowledgement::new(1, Duration::from_millis(500))
///     .on_shortfall(ReplicaShortfall::Fail);
/// assert_eq!(ack.replicas(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaAcknowledgement {
    replicas: u32,
    timeout: Duration,
    shortfall: ReplicaShortfall,
}

/// What a write that too few replicas confirmed does.
///
/// ```
/// assert_eq!(redisync::ReplicaShortfall::default(), redisync::ReplicaShortfall::Fail);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReplicaShortfall {
    /// An acquisition is rolled back and retried (three attempts in all, as
    /// Redisson does four); if it still falls short, the call returns a
    /// `Backend` error and holds nothing. Any other write (a release, a
    /// renewal, a count-down) cannot be undone: the call returns a
    /// `Backend` error saying it was applied on the master only.
    #[default]
    Fail,
    /// The write is kept and reported as a success;
    /// [`EventHandler::on_replica_shortfall`](crate::EventHandler::on_replica_shortfall)
    /// hears of it.
    Keep,
}

/// Attempts of an acquisition that falls short under [`ReplicaShortfall::Fail`].
pub(crate) const ACQUIRE_ATTEMPTS: u32 = 3;

impl ReplicaAcknowledgement {
    /// Waits for `replicas` replicas, at most `timeout` per write, and fails
    /// on a shortfall (see [`on_shortfall`](Self::on_shortfall)). Checked
    /// when the client is built: `replicas` ≥ 1, `timeout` ≥ 1 ms.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let ack = redisync::ReplicaAcknowledgement::new(2, Duration::from_secs(1));
    /// assert_eq!(ack.timeout(), Duration::from_secs(1));
    /// ```
    pub fn new(replicas: u32, timeout: Duration) -> Self {
        ReplicaAcknowledgement {
            replicas,
            timeout,
            shortfall: ReplicaShortfall::Fail,
        }
    }

    /// Sets what a shortfall does.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redisync::{ReplicaAcknowledgement, ReplicaShortfall};
    /// let ack = ReplicaAcknowledgement::new(1, Duration::from_secs(1)).on_shortfall(ReplicaShortfall::Keep);
    /// assert_eq!(ack.shortfall(), ReplicaShortfall::Keep);
    /// ```
    pub fn on_shortfall(mut self, shortfall: ReplicaShortfall) -> Self {
        self.shortfall = shortfall;
        self
    }

    /// How many replicas must confirm each write.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(redisync::ReplicaAcknowledgement::new(2, Duration::from_secs(1)).replicas(), 2);
    /// ```
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// The longest wait for them, per write.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let ack = redisync::ReplicaAcknowledgement::new(1, Duration::from_millis(250));
    /// assert_eq!(ack.timeout(), Duration::from_millis(250));
    /// ```
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// What a shortfall does.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redisync::{ReplicaAcknowledgement, ReplicaShortfall};
    /// assert_eq!(ReplicaAcknowledgement::new(1, Duration::from_secs(1)).shortfall(), ReplicaShortfall::Fail);
    /// ```
    pub fn shortfall(&self) -> ReplicaShortfall {
        self.shortfall
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.replicas == 0 {
            return Err(Error::invalid(
                "replica_acknowledgement",
                "must require at least 1 replica, got 0 (leave the option unset instead)",
            ));
        }
        crate::error::millis("replica_acknowledgement timeout", self.timeout)?;
        Ok(())
    }

    /// The timeout in ms for `WAIT` (validated: fits, ≥ 1).
    pub(crate) fn timeout_ms(&self) -> u64 {
        u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX)
    }
}

/// The error of a write that fell short of its replicas.
pub(crate) fn shortfall_error(
    operation: &str,
    name: &str,
    address: &str,
    acknowledged: u32,
    ack: &ReplicaAcknowledgement,
    rolled_back: bool,
) -> Error {
    let outcome = if rolled_back {
        format!("rolled back after {ACQUIRE_ATTEMPTS} attempts: nothing is held")
    } else {
        "it was applied on the master only and cannot be undone".to_owned()
    };
    Error::backend(
        format!(
            "{operation} on {name:?} at {address}: acknowledged by {acknowledged} of {} replicas within {:?}; {outcome}",
            ack.replicas, ack.timeout
        ),
        false,
    )
}

impl RedisBackend {
    /// Runs `call` as its [`Effect`] asks: an acquisition that too few
    /// replicas confirm is undone and retried (or kept and reported); a
    /// change that too few confirm fails the call (or is reported).
    pub(super) fn run_call(&self, call: &ScriptCall<'_>) -> Result<Reply> {
        if let Effect::Acquire { undo, .. } = call.effect() {
            return self.run_acquiring(call, undo);
        }
        let (reply, shortfall) = self.run_acknowledged(call)?;
        match (shortfall, &self.options.replica_ack) {
            (Some(acknowledged), Some(ack)) if ack.shortfall() != ReplicaShortfall::Keep => {
                Err(shortfall_error(
                    call.script().operation(),
                    call_name(call),
                    &self.address,
                    acknowledged,
                    ack,
                    false,
                ))
            }
            (Some(acknowledged), Some(ack)) => {
                self.report_shortfall(call, acknowledged, ack);
                Ok(reply)
            }
            _ => Ok(reply),
        }
    }

    /// Runs an acquisition. With replica acknowledgement, an acquisition
    /// that too few replicas confirm is given back by `undo` and retried,
    /// or kept and reported, as the policy says.
    fn run_acquiring(
        &self,
        call: &ScriptCall<'_>,
        undo: fn(&ScriptCall<'_>, &Reply) -> ScriptCall<'static>,
    ) -> Result<Reply> {
        let mut attempt = 1;
        loop {
            let (reply, shortfall) = self.run_acknowledged(call)?;
            let (Some(acknowledged), Some(ack)) = (shortfall, &self.options.replica_ack) else {
                return Ok(reply);
            };
            if ack.shortfall() == ReplicaShortfall::Keep {
                self.report_shortfall(call, acknowledged, ack);
                return Ok(reply);
            }
            // The undo is not acknowledged itself: it only gives back.
            let undo = undo(call, &reply);
            self.invoke(&undo)?;
            if attempt >= ACQUIRE_ATTEMPTS {
                return Err(shortfall_error(
                    call.script().operation(),
                    call_name(call),
                    &self.address,
                    acknowledged,
                    ack,
                    true,
                ));
            }
            attempt += 1;
        }
    }

    /// Runs `call` and, if its reply reports a change and replica
    /// acknowledgement is on, `WAIT`s on the same connection. Returns the
    /// reply and, on a shortfall, how many replicas confirmed it.
    fn run_acknowledged(&self, call: &ScriptCall<'_>) -> Result<(Reply, Option<u32>)> {
        let (reply, mut conn) = self.invoke(call)?;
        // Relaxed: a hint on its own (see `checkout::note_dead_connection`);
        // loaded first so a healthy store's calls do not write the line.
        if self.unreachable.load(Ordering::Relaxed) {
            self.unreachable.store(false, Ordering::Relaxed);
        }
        let Some(ack) = &self.options.replica_ack else {
            return Ok((reply, None));
        };
        if matches!(reply, Reply::Error(_)) || !call.effect().changed(&reply) {
            return Ok((reply, None));
        }
        let acknowledged = conn
            .conn
            .wait_for_replicas(ack.replicas(), ack.timeout_ms())
            .map_err(|err| {
                self.discard_after(&mut conn, &err);
                self.redis_error(call.script().operation(), err, conn.read_timeout)
            })?;
        let acknowledged = u32::try_from(acknowledged).unwrap_or(0);
        Ok((
            reply,
            (acknowledged < ack.replicas()).then_some(acknowledged),
        ))
    }

    fn report_shortfall(
        &self,
        call: &ScriptCall<'_>,
        acknowledged: u32,
        ack: &ReplicaAcknowledgement,
    ) {
        let event = ReplicaShortfallEvent {
            operation: call.script().operation(),
            name: call_name(call).to_owned(),
            acknowledged,
            required: ack.replicas(),
        };
        match &self.options.events {
            Some(events) => events.on_replica_shortfall(&event),
            None => LoggingEventHandler.on_replica_shortfall(&event),
        }
    }
}
