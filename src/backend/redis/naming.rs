//! Connection names: every connection a [`RedisBackend`](super::RedisBackend)
//! opens is named with `CLIENT SETNAME`, so that an operator can find a
//! holder id's client in `CLIENT LIST`.
//!
//! A client built from a URL or a [`Deployment`](super::Deployment) names
//! its connections `redisync:<client uuid>`, the first half of its holder
//! ids. A backend opened by hand (and perhaps shared by several clients)
//! names them `redisync:backend:<uuid>` (see
//! [`RedisBackend::connection_name`](super::RedisBackend::connection_name)).
//!
//! A server that refuses `CLIENT SETNAME` (an ACL user without
//! `+client|setname`) costs only the name: the connection is used all the
//! same, and the refusal is reported once per backend through the event
//! handler ([`EventHandler::on_connection_name_refused`]).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::{ConnectionLike, RedisError, RedisResult, Value};

use crate::event::{ConnectionNameRefusedEvent, EventHandler, LoggingEventHandler};

/// The name of one backend's connections, and whether its refusal was
/// reported already.
pub(crate) struct ConnectionName {
    name: String,
    refusal_reported: AtomicBool,
    /// The client's handler; `None` for a backend opened by hand (then
    /// [`LoggingEventHandler`]).
    events: Option<Arc<dyn EventHandler>>,
}

impl fmt::Debug for ConnectionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl ConnectionName {
    /// The name of a client's connections: `redisync:<client uuid>`.
    pub(crate) fn for_client(
        client_id: &str,
        events: Option<Arc<dyn EventHandler>>,
    ) -> Arc<ConnectionName> {
        Arc::new(ConnectionName {
            name: format!("redisync:{client_id}"),
            refusal_reported: AtomicBool::new(false),
            events,
        })
    }

    /// The name of a backend opened by hand: `redisync:backend:<uuid>`.
    pub(crate) fn for_backend(events: Option<Arc<dyn EventHandler>>) -> Arc<ConnectionName> {
        Arc::new(ConnectionName {
            name: format!("redisync:backend:{}", uuid::Uuid::new_v4()),
            refusal_reported: AtomicBool::new(false),
            events,
        })
    }

    /// The name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The `CLIENT SETNAME` command for this name.
    pub(crate) fn command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("SETNAME").arg(&self.name);
        cmd
    }

    /// Names `conn` (on the server at `address`). A refusal by the server
    /// is reported (once per backend) and otherwise ignored; a failure of
    /// the connection itself is returned.
    pub(crate) fn apply(&self, conn: &mut dyn ConnectionLike, address: &str) -> RedisResult<()> {
        match conn.req_command(&self.command()) {
            Ok(value) => self.check_reply(value, address),
            Err(err) => self.check_error(err, address),
        }
    }

    /// What a server answered to `CLIENT SETNAME`: an error reply is a
    /// refusal, reported once.
    pub(crate) fn check_reply(&self, value: Value, address: &str) -> RedisResult<()> {
        match value.extract_error() {
            Ok(_) => Ok(()),
            Err(err) => self.check_error(err, address),
        }
    }

    /// A refusal (the server answered an error) is reported once and is no
    /// error; anything else is.
    pub(crate) fn check_error(&self, err: RedisError, address: &str) -> RedisResult<()> {
        if err.code().is_none() && !matches!(err.kind(), redis::ErrorKind::Server(_)) {
            return Err(err);
        }
        let detail = match (err.code(), err.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            (Some(code), None) => code.to_owned(),
            _ => err.to_string(),
        };
        self.refused(address, &detail);
        Ok(())
    }

    /// Reports a refusal, the first time only.
    pub(crate) fn refused(&self, address: &str, reply: &str) {
        // Relaxed: a report-once flag; the swap is atomic whatever the
        // order, and nothing is published with it.
        if self.refusal_reported.swap(true, Ordering::Relaxed) {
            return;
        }
        let event = ConnectionNameRefusedEvent {
            name: self.name.clone(),
            address: address.to_owned(),
            reply: reply.to_owned(),
        };
        match &self.events {
            Some(events) => events.on_connection_name_refused(&event),
            None => LoggingEventHandler.on_connection_name_refused(&event),
        }
    }
}
