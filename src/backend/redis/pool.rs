//! The connection pool's side: where connections go ([`Target`]: one
//! server, a Sentinel group's master, a cluster), what one is ([`Conn`]),
//! and how r2d2 opens and checks them ([`Manager`]).

#[cfg(any(feature = "sentinel", feature = "cluster"))]
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{ConnectionLike, RedisError, RedisResult};

use super::errors::is_read_only;
use crate::backend::RedisOptions;
use crate::backend::redis::connect::connect_within;
use crate::clock::ServerClock;
use crate::event::{EventHandler, LoggingEventHandler, ServerClockStepEvent};

/// Where connections go: one fixed server, (feature `sentinel`) the
/// current master of a Sentinel-monitored group, or (feature `cluster`) a
/// Redis Cluster.
#[derive(Clone)]
// Cloned once per connection, never moved in a hot path: boxing the client
// would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Target {
    Direct(redis::Client),
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<crate::backend::redis::sentinel::SentinelTarget>),
    #[cfg(feature = "cluster")]
    Cluster(Arc<crate::backend::redis::cluster::ClusterTarget>),
}

impl Target {
    /// Whether this is one server reached over plain TCP (`redis://`).
    pub(super) fn is_plain_tcp(&self) -> bool {
        match self {
            Target::Direct(client) => {
                matches!(
                    client.get_connection_info().addr(),
                    redis::ConnectionAddr::Tcp(..)
                )
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Whether a connection made under `epoch` may go to a master that a
    /// failover has replaced since (always false for a fixed server).
    pub(super) fn is_stale(&self, epoch: u64) -> bool {
        let _ = epoch;
        match self {
            Target::Direct(_) => false,
            #[cfg(feature = "sentinel")]
            Target::Sentinel(target) => target.epoch() != epoch,
            // The cluster connection follows MOVED and failovers itself.
            #[cfg(feature = "cluster")]
            Target::Cluster(_) => false,
        }
    }

    /// Whether a connection that just failed with `err` must not go back
    /// to the pool. A READONLY reply: the server was demoted. On a cluster,
    /// also every error that is not a plain server reply (I/O, refused,
    /// timeout, a failed slot refresh): the `redis` crate's cluster
    /// connection keeps its slot map until it is replaced, so after a master
    /// is killed it would keep asking the dead address; a fresh one reads
    /// the slot map again and, once a replica is promoted, reaches it (and
    /// after a timeout, the old socket may still deliver a late reply).
    pub(super) fn discards_after(&self, err: &RedisError) -> bool {
        if is_read_only(err) {
            return true;
        }
        #[cfg(feature = "cluster")]
        if let Target::Cluster(_) = self {
            return !matches!(err.kind(), redis::ErrorKind::Server(_));
        }
        false
    }

    /// A Redis Cluster: scripts publish with SPUBLISH, waiters SSUBSCRIBE.
    /// The server a new single connection goes to, without credentials
    /// (for messages).
    pub(super) fn server_address(&self) -> String {
        match self {
            Target::Direct(client) => super::errors::redacted_address(client.get_connection_info()),
            #[cfg(feature = "sentinel")]
            Target::Sentinel(target) => target.description().to_owned(),
            #[cfg(feature = "cluster")]
            Target::Cluster(target) => target.description().to_owned(),
        }
    }

    pub(super) fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        if let Target::Cluster(_) = self {
            return true;
        }
        false
    }
}

/// A plain connection, or (feature `cluster`) a cluster connection that
/// routes each script by its first key's slot and follows redirections.
pub(super) enum Link {
    Single(redis::Connection),
    #[cfg(feature = "cluster")]
    Cluster(Box<crate::backend::redis::cluster::RoutedConnection>),
}

impl Link {
    pub(super) fn as_connection(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Link::Single(conn) => conn,
            #[cfg(feature = "cluster")]
            Link::Cluster(conn) => conn,
        }
    }

    pub(super) fn set_read_timeout(&mut self, timeout: Duration) -> RedisResult<()> {
        match self {
            Link::Single(conn) => conn.set_read_timeout(Some(timeout)),
            // Every node socket of the routed connection, and the ones
            // it opens later in this call (a redirection's).
            #[cfg(feature = "cluster")]
            Link::Cluster(conn) => conn.set_timeout(timeout),
        }
    }

    pub(super) fn is_open(&self) -> bool {
        match self {
            Link::Single(conn) => conn.is_open(),
            #[cfg(feature = "cluster")]
            Link::Cluster(conn) => conn.is_open(),
        }
    }

    /// `WAIT replicas timeout_ms` on the server that ran the last script:
    /// on a cluster, that script's slot master.
    pub(super) fn wait_for_replicas(&mut self, replicas: u32, timeout_ms: u64) -> RedisResult<i64> {
        match self {
            Link::Single(conn) => redis::cmd("WAIT").arg(replicas).arg(timeout_ms).query(conn),
            #[cfg(feature = "cluster")]
            Link::Cluster(conn) => conn.wait_for_replicas(replicas, timeout_ms),
        }
    }
}

/// A connection with what the pool needs to know to discard it.
pub(super) struct Conn {
    pub(super) conn: Link,
    /// The Sentinel epoch it was made under (0 for a fixed server).
    pub(super) epoch: u64,
    /// Set when a reply showed the server cannot serve us any more (a
    /// READONLY replica), or a round trip failed on the socket (it may
    /// still deliver a late reply): the pool drops it instead of reusing it.
    pub(super) broken: bool,
    /// When it last answered (or was made): a connection idle longer than
    /// [`IDLE_VALIDATION`], or idle since a fault was seen, is checked with
    /// a PING before it carries a script.
    pub(super) last_used: Instant,
    /// The read timeout now set on the socket (a syscall to change).
    pub(super) read_timeout: Duration,
    /// How far the server's clock is ahead of this process's monotonic
    /// clock, in ms (see `clock::server_offset`), read with `TIME` when the
    /// connection was made and again every [`CLOCK_RECHECK`] or after any
    /// connection found the clock stepped: a writing script's window is
    /// sent in the server's clock (see `Script::is_windowed`). `None` when
    /// the server refused `TIME` (those scripts then carry no window), and
    /// on a cluster, whose routed connection keeps one offset per node.
    pub(super) clock_offset_ms: Option<i64>,
    /// When the offset was read, and in which epoch of the shared
    /// [`ServerClock`].
    pub(super) clock_read: (Instant, u64),
    /// Whether that reading's round trip was too long to trust its
    /// midpoint (see `clock::Reading::offset`): it is then read again
    /// before the next request.
    pub(super) clock_coarse: bool,
}

/// A connection reads the server's clock again before a request when its
/// last reading is this old: a server clock stepped back (which would let
/// windows sent in the old clock run long) is found within this on every
/// connection in use, and its step reported.
pub(super) const CLOCK_RECHECK: Duration = Duration::from_secs(5);

impl Conn {
    pub(super) fn new(conn: Link, epoch: u64, read_timeout: Duration) -> Conn {
        Conn {
            conn,
            epoch,
            broken: false,
            last_used: Instant::now(),
            read_timeout,
            clock_offset_ms: None,
            clock_read: (Instant::now(), 0),
            clock_coarse: false,
        }
    }

    /// Whether its clock reading is due again: older than
    /// [`CLOCK_RECHECK`], from before the shared clock's last step, or
    /// coarse (its round trip too long to trust).
    /// Never on a cluster (each node's offset is kept by the routed
    /// connection) or a server that refused `TIME`.
    pub(super) fn clock_due(&self, shared: &ServerClock) -> bool {
        self.clock_offset_ms.is_some()
            && (self.clock_coarse
                || self.clock_read.0.elapsed() >= CLOCK_RECHECK
                || self.clock_read.1 != shared.epoch())
    }

    /// Reads the server's clock again on this connection (see
    /// [`read_clock`]).
    pub(super) fn reread_clock(
        &mut self,
        shared: &ServerClock,
        events: Option<&dyn EventHandler>,
        server: &str,
    ) -> RedisResult<()> {
        // A cluster's routed connection keeps one offset per node.
        #[allow(irrefutable_let_patterns)] // without the `cluster` feature
        if let Link::Single(conn) = &mut self.conn {
            let epoch = shared.epoch();
            let (offset, coarse) = read_clock(conn, shared, events, server)?;
            self.clock_offset_ms = offset;
            self.clock_read = (Instant::now(), epoch.max(shared.epoch()));
            self.clock_coarse = coarse;
        }
        Ok(())
    }

    /// The end of the window of a request sent now on this connection
    /// with its current read timeout (0: no window). On a cluster,
    /// `NODE_WINDOW`: the routed connection writes each try's window in
    /// the clock of the node it goes to (see `cluster::routing`).
    pub(super) fn window_end(&self) -> i64 {
        #[cfg(feature = "cluster")]
        if let Link::Cluster(_) = self.conn {
            return crate::backend::redis::cluster::NODE_WINDOW;
        }
        self.clock_offset_ms.map_or(0, |offset| {
            crate::backend::script::window_end(offset, self.read_timeout)
        })
    }

    /// Sets the socket's read timeout to `timeout` unless it is set already.
    pub(super) fn set_read_timeout(&mut self, timeout: Duration) -> RedisResult<()> {
        let timeout = timeout.max(Duration::from_millis(1));
        if timeout != self.read_timeout {
            self.conn.set_read_timeout(timeout)?;
            self.read_timeout = timeout;
        }
        Ok(())
    }
}

/// A pooled connection unused for this long is checked with a PING before it
/// carries a script: the server may have closed it meanwhile (an idle
/// `timeout`, a restart, `CLIENT KILL`), and a script sent on a dead socket
/// has an unknown outcome. A busy connection costs no extra round trip.
pub(super) const IDLE_VALIDATION: Duration = Duration::from_secs(1);

/// Opens connections with a bound and sets read/write timeouts on each, so a
/// hung server fails a call instead of blocking it forever.
pub(super) struct Manager {
    pub(super) target: Target,
    pub(super) options: RedisOptions,
    /// The server's clock as its connections last read it, shared with
    /// the backend.
    pub(super) clock: std::sync::Arc<ServerClock>,
}

impl Manager {
    /// A plain connection to the one server (with Sentinel, the current
    /// master), and its epoch. Not for a cluster.
    pub(super) fn connect_single(
        &self,
    ) -> std::result::Result<(redis::Connection, u64), RedisError> {
        let started = std::time::Instant::now();
        // One budget for the whole opening (connect, naming, the clock
        // read), fixed now: after the caller's deadline each step would
        // otherwise get the round trip's floor anew, and the floors add up.
        let budget = crate::deadline::cap(self.options.connection_timeout);
        let (mut conn, epoch) = match &self.target {
            Target::Direct(client) => (connect_within(client, budget)?, 0),
            #[cfg(feature = "sentinel")]
            Target::Sentinel(target) => target.connect()?,
            #[cfg(feature = "cluster")]
            Target::Cluster(_) => {
                return Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "a cluster has no single server to connect to",
                )));
            }
        };
        if let Some(name) = &self.options.connection_name {
            // Naming is part of opening: it keeps to what is left of the
            // connection timeout (a frozen server must not hold `build()`
            // for a response timeout on top), and to the caller's deadline
            // when a call opens the connection itself.
            let left = budget
                .saturating_sub(started.elapsed())
                .max(std::time::Duration::from_millis(1));
            conn.set_read_timeout(Some(left))?;
            conn.set_write_timeout(Some(left))?;
            name.apply(&mut conn, &self.target.server_address())?;
        }
        conn.set_read_timeout(Some(self.options.response_timeout))?;
        conn.set_write_timeout(Some(self.options.response_timeout))?;
        Ok((conn, epoch))
    }

    pub(super) fn connect(&self) -> std::result::Result<Conn, RedisError> {
        let timeout = self.options.response_timeout;
        #[cfg(feature = "cluster")]
        if let Target::Cluster(target) = &self.target {
            return Ok(Conn::new(
                Link::Cluster(Box::new(target.connect()?)),
                0,
                timeout,
            ));
        }
        let started = Instant::now();
        // The same budget as `connect_single` fixes (the deadline module's
        // cap, taken at the same moment): the clock read is part of it.
        let budget = crate::deadline::cap(self.options.connection_timeout);
        let (mut conn, epoch) = self.connect_single()?;
        // Part of opening: within what is left of the opening's budget, as
        // naming is.
        let left = budget
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
        conn.set_read_timeout(Some(left.min(self.options.response_timeout)))?;
        let clock_epoch = self.clock.epoch();
        let (offset, coarse) = read_clock(
            &mut conn,
            &self.clock,
            self.options.events.as_deref(),
            &self.target.server_address(),
        )?;
        conn.set_read_timeout(Some(self.options.response_timeout))?;
        let mut conn = Conn::new(Link::Single(conn), epoch, timeout);
        conn.clock_offset_ms = offset;
        conn.clock_read = (Instant::now(), clock_epoch.max(self.clock.epoch()));
        conn.clock_coarse = coarse;
        Ok(conn)
    }
}

/// Reads the server's clock behind `conn` ([`clock_reading`]) into
/// `shared`, and reports a step against the previous reading (a server
/// clock stepped back lets a request sent before the step in its old clock
/// run long: the one limit README states) to `events` (or the log). Also
/// returns whether the reading was coarse (`clock::Reading::is_precise`):
/// its offset is then never ahead of the server, and read again soon.
fn read_clock(
    conn: &mut redis::Connection,
    shared: &ServerClock,
    events: Option<&dyn EventHandler>,
    server: &str,
) -> RedisResult<(Option<i64>, bool)> {
    let Some(reading) = clock_reading(conn)? else {
        return Ok((None, false));
    };
    let (offset, coarse) = shared.offset_from(&reading);
    if let Some(step) = shared.observe(offset) {
        let event = ServerClockStepEvent::new(server, step.step_ms);
        match events {
            Some(events) => events.on_server_clock_step(&event),
            None => LoggingEventHandler.on_server_clock_step(&event),
        }
    }
    Ok((Some(offset), coarse))
}

/// The server's clock behind `conn`, read with `TIME` between two readings
/// of this process's monotonic clock. `None` when the server refuses
/// `TIME` (an ACL without it): writes then carry no window.
fn clock_reading(conn: &mut redis::Connection) -> RedisResult<Option<crate::clock::Reading>> {
    let before = crate::clock::monotonic_ms();
    let time: RedisResult<(i64, i64)> = redis::cmd("TIME").query(conn);
    let after = crate::clock::monotonic_ms();
    match time {
        Ok((seconds, micros)) => {
            let server = seconds.saturating_mul(1000).saturating_add(micros / 1000);
            Ok(Some(crate::clock::Reading {
                server_ms: server,
                before_ms: before,
                after_ms: after,
            }))
        }
        Err(err) if err.code().is_some() => Ok(None),
        Err(err) => Err(err),
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = RedisError;

    fn connect(&self) -> std::result::Result<Conn, RedisError> {
        Manager::connect(self)
    }

    fn is_valid(&self, conn: &mut Conn) -> std::result::Result<(), RedisError> {
        redis::cmd("PING").query::<()>(conn.conn.as_connection())
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || !conn.conn.is_open() || self.target.is_stale(conn.epoch)
    }
}
