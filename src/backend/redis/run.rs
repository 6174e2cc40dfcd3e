//! The run path: one request on a checked connection under the caller's
//! deadline, sent once more when the connection was found closed and its
//! [`Resend`] allows; a script's `EVALSHA` and plain commands ride on it.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis::{ConnectionLike, RedisError, RedisResult};

use super::RedisBackend;
use super::errors::{
    io_kind, redis_error, reply_from_value, script_error_reply, server_error_reply,
};
use super::evalsha::{evalsha, evalsha_packed};
#[cfg(feature = "cluster")]
use super::pool::{self, Target};
use super::pool::{Conn, Manager};
use crate::backend::{Reply, Resend, ScriptCall, ServerReply};
use crate::{Error, Result};

/// Whether `err`, met on a connection that was then discarded, allows one
/// more try on another connection under `resend`. Timeouts never do: the
/// server may be frozen with the request in hand, and the caller's bound is
/// spent.
fn resend_allows(resend: Resend, err: &RedisError) -> bool {
    if err.is_timeout() {
        return false;
    }
    let write_failed = io_kind(err) == Some(std::io::ErrorKind::BrokenPipe);
    match resend {
        Resend::IfUnsent => write_failed,
        _ => err.is_connection_dropped() || write_failed,
    }
}

impl RedisBackend {
    pub(super) fn redis_error(&self, op: &str, err: RedisError, timeout: Duration) -> Error {
        let error = redis_error(&self.address, op, err, timeout);
        if error.is_connection_error() {
            // Relaxed: a hint on its own (see `checkout::note_dead_connection`).
            self.unreachable.store(true, Ordering::Relaxed);
        }
        error
    }

    /// One request (`call`) on a checked connection, under the caller's
    /// deadline; sent once more, on another connection, when the first was
    /// found closed by the server and `resend` allows it. Returns the reply
    /// and the connection (replica acknowledgement `WAIT`s on it).
    pub(super) fn round_trip<T>(
        &self,
        op: &str,
        resend: Resend,
        mut call: impl FnMut(&mut dyn ConnectionLike, i64) -> RedisResult<T>,
    ) -> Result<(T, r2d2::PooledConnection<Manager>)> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut conn = self.connection(op)?;
            let timeout = crate::deadline::cap(self.options.response_timeout);
            let reply = conn.set_read_timeout(timeout).and_then(|()| {
                // A reading of the server's clock that is due (see
                // `pool::CLOCK_RECHECK`) goes first: the window below is
                // written in that clock.
                if conn.clock_due(&self.clock) {
                    conn.reread_clock(&self.clock, self.options.events.as_deref(), &self.address)?;
                }
                let window_end = conn.window_end();
                call(conn.conn.as_connection(), window_end)
            });
            match reply {
                Ok(reply) => {
                    conn.last_used = Instant::now();
                    return Ok((reply, conn));
                }
                Err(err) => {
                    self.discard_after(&mut conn, &err);
                    if tries > 1 || !resend_allows(resend, &err) {
                        return Err(self.redis_error(op, err, timeout));
                    }
                }
            }
        }
    }

    /// Marks `conn` for dropping after `err` when it can no longer be
    /// trusted: a demoted master, or any failure on the socket (a timed-out
    /// request may still be answered late; a reset socket is dead).
    pub(super) fn discard_after(&self, conn: &mut Conn, err: &RedisError) {
        if self.target.discards_after(err) || err.is_io_error() || err.is_timeout() {
            conn.broken = true;
        }
        if err.is_connection_dropped() && !err.is_timeout() {
            self.note_dead_connection();
        }
    }

    /// Runs `call`'s script (EVALSHA, loaded on NOSCRIPT) on a checked
    /// connection (see [`round_trip`](Self::round_trip)). The script's own
    /// error reply is a [`Reply::Error`]; everything else that failed is an
    /// [`Error`].
    pub(super) fn invoke(
        &self,
        call: &ScriptCall<'_>,
    ) -> Result<(Reply, r2d2::PooledConnection<Manager>)> {
        let sharded = self.sharded();
        let script = self.loaded.get(call.script(), sharded);
        let operation = call.script().operation();
        let (reply, mut conn) = self.round_trip(operation, call.resend(), |conn, window_end| {
            // A writing script's window, per try: each has its own timeout.
            let window = call.window_end(window_end);
            // A cluster's routed connection reads the command to route it.
            let result = if sharded {
                evalsha(&script, call, window, conn)
            } else {
                evalsha_packed(&script, call, window, conn)
            };
            match result {
                Ok(value) => Ok(reply_from_value(value)),
                Err(err) => script_error_reply(&err).ok_or(err),
            }
        })?;
        if let Reply::Error(text) = &reply {
            // Refused as late although the reply came in time: our reading
            // of the server's clock is off (it was stepped). The connection
            // goes; the next one reads it again.
            if text.starts_with("ERR late request") {
                conn.broken = true;
            }
        }
        Ok((reply, conn))
    }

    /// `args` as one plain command to the server (a single server, the
    /// Sentinel group's master) or to every master (a cluster); see
    /// [`LockBackend::server_command`].
    pub(super) fn plain_command(&self, args: &[&str]) -> Result<Vec<ServerReply>> {
        let Some((name, rest)) = args.split_first() else {
            return Err(Error::invalid("server_command", "no command given"));
        };
        let mut cmd = redis::cmd(name);
        for arg in rest {
            cmd.arg(*arg);
        }
        #[cfg(feature = "cluster")]
        if let Target::Cluster(target) = &self.target {
            return self.command_on_every_master(target, name, &cmd);
        }
        let ((reply, round_trip), _conn) = self.round_trip(name, Resend::IfUnsent, |conn, _| {
            let started = Instant::now();
            let reply = match conn.req_command(&cmd).and_then(redis::Value::extract_error) {
                Ok(value) => reply_from_value(value),
                Err(err) => server_error_reply(&err).ok_or(err)?,
            };
            Ok((reply, started.elapsed()))
        })?;
        // Relaxed: a hint, as above.
        self.unreachable.store(false, Ordering::Relaxed);
        Ok(vec![ServerReply::new(
            self.target.server_address(),
            reply,
            round_trip,
        )])
    }

    /// `cmd` on every master of the cluster, through one pooled routed
    /// connection.
    #[cfg(feature = "cluster")]
    fn command_on_every_master(
        &self,
        target: &super::cluster::ClusterTarget,
        op: &str,
        cmd: &redis::Cmd,
    ) -> Result<Vec<ServerReply>> {
        let mut conn = self.connection(op)?;
        let timeout = crate::deadline::cap(self.options.response_timeout);
        if let Err(err) = conn.set_read_timeout(timeout) {
            self.discard_after(&mut conn, &err);
            return Err(self.redis_error(op, err, timeout));
        }
        let pool::Link::Cluster(routed) = &mut conn.conn else {
            return Err(Error::protocol(
                "a cluster backend without a cluster connection",
            ));
        };
        let answers = match routed.on_every_master(cmd, &target.seed_host()) {
            Ok(answers) => answers,
            Err(err) => {
                self.discard_after(&mut conn, &err);
                return Err(self.redis_error("CLUSTER SLOTS", err, timeout));
            }
        };
        let mut replies = Vec::with_capacity(answers.len());
        for (node, answer, round_trip) in answers {
            let reply = match answer {
                Ok(value) => reply_from_value(value),
                Err(err) => match server_error_reply(&err) {
                    Some(reply) => reply,
                    None => {
                        self.discard_after(&mut conn, &err);
                        return Err(self.redis_error(&format!("{op} on {node}"), err, timeout));
                    }
                },
            };
            replies.push(ServerReply::new(node, reply, round_trip));
        }
        Ok(replies)
    }

    /// Whether scripts publish through sharded pub/sub (a cluster).
    pub(super) fn sharded(&self) -> bool {
        self.target.is_cluster()
    }
}

/// The name a call is about (its first key), for messages and events.
pub(super) fn call_name<'c>(call: &'c ScriptCall<'_>) -> &'c str {
    call.keys().first().map_or("", |key| key.as_ref())
}
