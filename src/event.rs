//! Hooks that report what background threads and guard drops cannot return:
//! a renewal that failed, a lease that was lost, an unlock in `Drop` that
//! failed, a pub/sub connection that broke (r2d2's `HandleEvent` shape).

use std::fmt;

use crate::Error;

/// Receives events from redisync's background work. Every method has a
/// no-op default; implement the ones you care about.
///
/// Set it with [`ClientBuilder::event_handler`](crate::ClientBuilder::event_handler).
/// The default is [`LoggingEventHandler`].
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
///
/// #[derive(Debug, Default)]
/// struct CountLost(AtomicUsize);
/// impl redisync::EventHandler for CountLost {
///     fn on_lock_lost(&self, _event: &redisync::LockLostEvent) {
///         self.0.fetch_add(1, Ordering::Relaxed); // a count read on its own
///     }
/// }
/// let client = redisync::Client::builder()
///     .backend(redisync::MemoryBackend::new())
///     .event_handler(Arc::new(CountLost::default()))
///     .build()?;
/// # Ok::<(), redisync::Error>(())
/// ```
pub trait EventHandler: fmt::Debug + Send + Sync + 'static {
    /// A watchdog found its lock no longer held, or could not renew it before
    /// the lease ran out. Guards of that lock now report `is_lost()`.
    fn on_lock_lost(&self, event: &LockLostEvent) {
        let _ = event;
    }

    /// A watchdog renewal failed; it will be retried until the lease runs out.
    fn on_renew_failed(&self, event: &RenewFailedEvent) {
        let _ = event;
    }

    /// Unlocking in a guard's `Drop` failed (use `unlock()` to get the error
    /// instead). The lock frees itself when its lease runs out.
    fn on_unlock_failed(&self, event: &UnlockFailedEvent) {
        let _ = event;
    }

    /// The pub/sub connection failed or could not be opened; the subscriber
    /// reconnects and wakes every waiter to retry.
    fn on_subscriber_error(&self, event: &SubscriberEvent) {
        let _ = event;
    }

    /// The pub/sub connection is (again) up and subscribed.
    fn on_subscriber_connected(&self) {}

    /// A write was applied on the master but fewer replicas than the
    /// [replica acknowledgement](crate::backend::ReplicaAcknowledgement)
    /// asks for confirmed it in time, and the policy is to keep it
    /// ([`ReplicaShortfall::Keep`](crate::backend::ReplicaShortfall::Keep)).
    fn on_replica_shortfall(&self, event: &ReplicaShortfallEvent) {
        let _ = event;
    }

    /// A Redis server refused `CLIENT SETNAME` (an ACL user without
    /// `+client|setname`): the connections work, but carry no
    /// `redisync:<client uuid>` name in `CLIENT LIST`. Reported once per
    /// backend, at the first refusal.
    fn on_connection_name_refused(&self, event: &ConnectionNameRefusedEvent) {
        let _ = event;
    }

    /// A new reading of a server's clock (`TIME`, read by every connection
    /// when it opens and every few seconds after) is off the estimate by
    /// more than a second: the server's clock was stepped (NTP, a restored
    /// VM). Every connection reads it again before its next request. A
    /// step back is the one case README names where a request sent before
    /// it may act later than its window meant, by at most the step.
    fn on_server_clock_step(&self, event: &ServerClockStepEvent) {
        let _ = event;
    }
}

/// An [`EventHandler`] that ignores everything.
///
/// ```
/// let client = redisync::Client::builder()
///     .backend(redisync::MemoryBackend::new())
///     .event_handler(std::sync::Arc::new(redisync::NopEventHandler))
///     .build()?;
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct NopEventHandler;

impl EventHandler for NopEventHandler {}

/// An [`EventHandler`] that writes every event to the `log` facade
/// (lost locks and failures at `warn`, reconnects at `info`). The default.
///
/// ```
/// let client = redisync::Client::builder()
///     .backend(redisync::MemoryBackend::new())
///     .event_handler(std::sync::Arc::new(redisync::LoggingEventHandler))
///     .build()?;
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct LoggingEventHandler;

impl EventHandler for LoggingEventHandler {
    fn on_lock_lost(&self, event: &LockLostEvent) {
        log::warn!("redisync: {event}");
    }
    fn on_renew_failed(&self, event: &RenewFailedEvent) {
        log::warn!("redisync: {event}");
    }
    fn on_unlock_failed(&self, event: &UnlockFailedEvent) {
        log::warn!("redisync: {event}");
    }
    fn on_subscriber_error(&self, event: &SubscriberEvent) {
        log::warn!("redisync: {event}");
    }
    fn on_subscriber_connected(&self) {
        log::info!("redisync: pub/sub connection up");
    }
    fn on_replica_shortfall(&self, event: &ReplicaShortfallEvent) {
        log::warn!("redisync: {event}");
    }
    fn on_connection_name_refused(&self, event: &ConnectionNameRefusedEvent) {
        log::warn!("redisync: {event}");
    }
    fn on_server_clock_step(&self, event: &ServerClockStepEvent) {
        log::warn!("redisync: {event}");
    }
}

/// A lock's lease was lost; see [`EventHandler::on_lock_lost`].
///
/// ```
/// fn report(event: &redisync::LockLostEvent) -> String {
///     format!("{} lost: {}", event.name(), event.reason())
/// }
/// ```
#[derive(Debug)]
pub struct LockLostEvent {
    pub(crate) name: String,
    pub(crate) reason: String,
}

impl LockLostEvent {
    /// The lock's name.
    ///
    /// ```
    /// fn name(event: &redisync::LockLostEvent) -> &str { event.name() }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Why it was lost.
    ///
    /// ```
    /// fn reason(event: &redisync::LockLostEvent) -> &str { event.reason() }
    /// ```
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for LockLostEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lock {:?} lost: {}", self.name, self.reason)
    }
}

/// A renewal failed and will be retried; see [`EventHandler::on_renew_failed`].
///
/// ```
/// fn report(event: &redisync::RenewFailedEvent) -> String {
///     format!("{}: {}", event.name(), event.error())
/// }
/// ```
#[derive(Debug)]
pub struct RenewFailedEvent {
    pub(crate) name: String,
    pub(crate) error: Error,
}

impl RenewFailedEvent {
    /// The lock's name.
    ///
    /// ```
    /// fn name(event: &redisync::RenewFailedEvent) -> &str { event.name() }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The failure.
    ///
    /// ```
    /// fn error(event: &redisync::RenewFailedEvent) -> &redisync::Error { event.error() }
    /// ```
    pub fn error(&self) -> &Error {
        &self.error
    }
}

impl fmt::Display for RenewFailedEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "renewing lock {:?} failed (will retry): {}",
            self.name, self.error
        )
    }
}

/// An unlock in `Drop` failed; see [`EventHandler::on_unlock_failed`].
///
/// ```
/// fn report(event: &redisync::UnlockFailedEvent) -> String {
///     format!("{}: {}", event.name(), event.error())
/// }
/// ```
#[derive(Debug)]
pub struct UnlockFailedEvent {
    pub(crate) name: String,
    pub(crate) error: Error,
}

impl UnlockFailedEvent {
    /// The lock's name.
    ///
    /// ```
    /// fn name(event: &redisync::UnlockFailedEvent) -> &str { event.name() }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The failure.
    ///
    /// ```
    /// fn error(event: &redisync::UnlockFailedEvent) -> &redisync::Error { event.error() }
    /// ```
    pub fn error(&self) -> &Error {
        &self.error
    }
}

impl fmt::Display for UnlockFailedEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unlocking {:?} on drop failed: {}",
            self.name, self.error
        )
    }
}

/// The pub/sub connection failed; see [`EventHandler::on_subscriber_error`].
///
/// ```
/// fn report(event: &redisync::SubscriberEvent) -> String { event.error().to_string() }
/// ```
#[derive(Debug)]
pub struct SubscriberEvent {
    pub(crate) error: Error,
}

impl SubscriberEvent {
    pub(crate) fn new(error: Error) -> Self {
        SubscriberEvent { error }
    }
    /// The failure.
    ///
    /// ```
    /// fn error(event: &redisync::SubscriberEvent) -> &redisync::Error { event.error() }
    /// ```
    pub fn error(&self) -> &Error {
        &self.error
    }
}

impl fmt::Display for SubscriberEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pub/sub connection failed (reconnecting, waiters retry): {}",
            self.error
        )
    }
}

/// A write that fewer replicas acknowledged than required; see
/// [`EventHandler::on_replica_shortfall`].
///
/// ```
/// fn report(event: &redisync::ReplicaShortfallEvent) -> String {
///     format!("{} on {}: {} of {}", event.operation(), event.name(), event.acknowledged(), event.required())
/// }
/// ```
#[derive(Debug)]
pub struct ReplicaShortfallEvent {
    pub(crate) operation: &'static str,
    pub(crate) name: String,
    pub(crate) acknowledged: u32,
    pub(crate) required: u32,
}

impl ReplicaShortfallEvent {
    /// The operation, e.g. `"lock acquire"`.
    ///
    /// ```
    /// fn op(event: &redisync::ReplicaShortfallEvent) -> &str { event.operation() }
    /// ```
    pub fn operation(&self) -> &str {
        self.operation
    }
    /// The primitive's name (its Redis key).
    ///
    /// ```
    /// fn name(event: &redisync::ReplicaShortfallEvent) -> &str { event.name() }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
    /// How many replicas confirmed the write in time.
    ///
    /// ```
    /// fn acked(event: &redisync::ReplicaShortfallEvent) -> u32 { event.acknowledged() }
    /// ```
    pub fn acknowledged(&self) -> u32 {
        self.acknowledged
    }
    /// How many were required.
    ///
    /// ```
    /// fn required(event: &redisync::ReplicaShortfallEvent) -> u32 { event.required() }
    /// ```
    pub fn required(&self) -> u32 {
        self.required
    }
}

impl fmt::Display for ReplicaShortfallEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {:?} was acknowledged by {} of {} replicas; kept anyway (a failover now may lose it)",
            self.operation, self.name, self.acknowledged, self.required
        )
    }
}

/// A server refused to name a connection; see
/// [`EventHandler::on_connection_name_refused`].
///
/// ```
/// fn report(event: &redisync::ConnectionNameRefusedEvent) -> String {
///     format!("{} refused {}: {}", event.address(), event.name(), event.reply())
/// }
/// ```
#[derive(Debug)]
pub struct ConnectionNameRefusedEvent {
    pub(crate) name: String,
    pub(crate) address: String,
    pub(crate) reply: String,
}

impl ConnectionNameRefusedEvent {
    /// The name that was refused, `redisync:<client uuid>`.
    ///
    /// ```
    /// fn name(event: &redisync::ConnectionNameRefusedEvent) -> &str { event.name() }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The server that refused it (no credentials).
    ///
    /// ```
    /// fn address(event: &redisync::ConnectionNameRefusedEvent) -> &str { event.address() }
    /// ```
    pub fn address(&self) -> &str {
        &self.address
    }
    /// The server's error reply, e.g. `NOPERM ...`.
    ///
    /// ```
    /// fn reply(event: &redisync::ConnectionNameRefusedEvent) -> &str { event.reply() }
    /// ```
    pub fn reply(&self) -> &str {
        &self.reply
    }
}

impl fmt::Display for ConnectionNameRefusedEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Redis at {} refused to name the connection {:?} ({}); connections work, but \
             CLIENT LIST will not show the name (grant +client|setname to fix; reported once)",
            self.address, self.name, self.reply
        )
    }
}

/// A server's clock found stepped; see
/// [`EventHandler::on_server_clock_step`].
///
/// ```
/// fn report(event: &redisync::ServerClockStepEvent) -> String {
///     format!("{} stepped {} ms", event.address(), event.step_ms())
/// }
/// ```
#[derive(Debug)]
pub struct ServerClockStepEvent {
    pub(crate) address: String,
    pub(crate) step_ms: i64,
}

impl ServerClockStepEvent {
    pub(crate) fn new(address: &str, step_ms: i64) -> Self {
        ServerClockStepEvent {
            address: address.to_owned(),
            step_ms,
        }
    }

    /// The server whose clock stepped (no credentials).
    ///
    /// ```
    /// fn address(event: &redisync::ServerClockStepEvent) -> &str { event.address() }
    /// ```
    pub fn address(&self) -> &str {
        &self.address
    }

    /// How far its clock moved against the estimate, in ms: negative when
    /// stepped back.
    ///
    /// ```
    /// fn back(event: &redisync::ServerClockStepEvent) -> bool { event.step_ms() < 0 }
    /// ```
    pub fn step_ms(&self) -> i64 {
        self.step_ms
    }
}

impl fmt::Display for ServerClockStepEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (direction, size) = if self.step_ms < 0 {
            ("back", self.step_ms.unsigned_abs())
        } else {
            ("forward", self.step_ms.unsigned_abs())
        };
        write!(
            f,
            "the clock of Redis at {} stepped {direction} by {size} ms; every connection reads it \
             again (a step back may let a request sent before it act up to that much later than \
             its window; a step forward expires leases and records early)",
            self.address
        )
    }
}
