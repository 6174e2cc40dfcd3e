//! Which pooled connection a call gets: checkout (at once when the server
//! refuses), never one from before a failover, and a PING for one idle
//! too long or suspect since a connection was found closed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis::RedisError;

use super::RedisBackend;
use super::pool::{Conn, IDLE_VALIDATION, Manager};
use crate::{Error, Result};

impl RedisBackend {
    /// A pooled connection, never one made before the last failover, nor
    /// one the server has closed as far as a PING can tell (see
    /// [`IDLE_VALIDATION`] and `suspect_since`), for `op` (named in errors).
    ///
    /// At most one PING per call: a PING that times out means the server
    /// answers no connection now, so the call fails at once (its bound is
    /// spent; asking the next idle connection would cost one more round
    /// trip each, floors included, after the caller's deadline). A PING
    /// that finds its connection closed makes every connection last used
    /// before it suspect: those are dropped unchecked (the fault that closed
    /// one, a restart or `CLIENT KILL`, likely closed them all), and the
    /// pool opens fresh ones.
    pub(super) fn connection(&self, op: &str) -> Result<r2d2::PooledConnection<Manager>> {
        let mut pinged = false;
        // Each stale or dead one is dropped for good: at most the pool's
        // worth, then the pool makes new ones.
        for _ in 0..self.options.pool_size {
            let mut conn = self.checkout()?;
            if self.target.is_stale(conn.epoch) {
                conn.broken = true;
                continue;
            }
            if !self.needs_validation(&conn) {
                return Ok(conn);
            }
            if pinged {
                conn.broken = true;
                continue;
            }
            pinged = true;
            let timeout = crate::deadline::cap(self.options.response_timeout);
            let checked = conn
                .set_read_timeout(timeout)
                .and_then(|()| redis::cmd("PING").query::<()>(conn.conn.as_connection()));
            match checked {
                Ok(()) => {
                    conn.last_used = Instant::now();
                    return Ok(conn);
                }
                Err(err) => {
                    conn.broken = true;
                    self.note_dead_connection();
                    if err.is_timeout() || crate::deadline::passed() {
                        return Err(self.redis_error(
                            &format!("PING of an idle connection before {op}"),
                            err,
                            timeout,
                        ));
                    }
                }
            }
        }
        self.checkout()
    }

    /// Whether `conn` must answer a PING before it carries a script.
    fn needs_validation(&self, conn: &Conn) -> bool {
        if conn.last_used.elapsed() >= IDLE_VALIDATION {
            return true;
        }
        // Relaxed: a hint on its own; a check that misses a fresh mark by a
        // moment validates at the next idle check, and the mark carries no
        // other data.
        match self.suspect_since.load(Ordering::Relaxed) {
            0 => false,
            since => {
                let used = conn.last_used.saturating_duration_since(self.created);
                u64::try_from(used.as_nanos()).unwrap_or(u64::MAX) < since
            }
        }
    }

    /// A connection was found closed by the server: every connection last
    /// used before now is checked before its next script.
    pub(super) fn note_dead_connection(&self) {
        let now = u64::try_from(self.created.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Relaxed: as the load in `needs_validation`.
        self.suspect_since.store(now.max(1), Ordering::Relaxed);
        // Until a call gets through again, a call without an idle pooled
        // connection asks the server directly: a refusing server fails it at
        // once instead of after the pool's whole connection timeout.
        // Relaxed: `unreachable` is a hint on its own (at worst one call
        // waits for the pool instead of probing, or probes once more).
        self.unreachable.store(true, Ordering::Relaxed);
    }

    fn checkout(&self) -> Result<r2d2::PooledConnection<Manager>> {
        // Relaxed: a hint, as in `note_dead_connection`.
        if self.unreachable.load(Ordering::Relaxed) {
            if let Some(conn) = self.pool.try_get() {
                return Ok(conn);
            }
            // A refused connection fails here at once; r2d2 would retry it
            // for the whole connection timeout (RedLock rounds, for one,
            // must not stall on a dead master).
            let timeout = crate::deadline::cap(self.options.connection_timeout);
            self.probe(timeout)
                .map_err(|err| self.redis_error("connecting", err, timeout))?;
            // Relaxed: a hint, as in `note_dead_connection`.
            self.unreachable.store(false, Ordering::Relaxed);
            if crate::deadline::passed() {
                // The probe spent the caller's wait: a connection the pool
                // has ready, or none (waiting for one would add a floor).
                return self.pool.try_get().ok_or_else(|| {
                    Error::backend(
                        format!(
                            "timed out after {timeout:?} waiting for a Redis connection to {} \
                             (the server answered, but no pooled connection was ready in time)",
                            self.address
                        ),
                        true,
                    )
                });
            }
        }
        // An idle connection at once, without `get_timeout`'s clock reads
        // (it would take the same one first, too).
        if let Some(conn) = self.pool.try_get() {
            return Ok(conn);
        }
        let timeout = crate::deadline::cap(self.options.connection_timeout);
        self.pool.get_timeout(timeout).map_err(|err| {
            // Relaxed: a hint, as in `note_dead_connection`.
            self.unreachable.store(true, Ordering::Relaxed);
            Error::backend_caused_by(
                format!(
                    "no Redis connection to {} within {timeout:?} (server unreachable, or all {} pooled connections busy)",
                    self.address, self.options.pool_size
                ),
                err,
                true,
            )
        })
    }

    /// Opens (and drops) one connection, to tell a refusing server at once;
    /// within `timeout`. A cluster connection is opened on a helper thread
    /// and given up on after `timeout` (see `connect::open_within`): the
    /// `redis` crate's steps do not all keep to a timeout of ours.
    fn probe(&self, timeout: Duration) -> std::result::Result<(), RedisError> {
        let manager = Manager {
            target: self.target.clone(),
            options: self.options.clone(),
            clock: Arc::clone(&self.clock),
        };
        #[cfg(feature = "cluster")]
        if self.target.is_cluster() {
            return super::connect::open_within(timeout, move || manager.connect().map(drop));
        }
        let _ = timeout;
        manager.connect().map(drop)
    }
}
