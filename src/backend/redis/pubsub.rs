//! A dedicated subscribed connection, lent to one pub/sub session.

use std::time::Duration;

use super::RedisBackend;
use super::errors::io_kind;
use crate::backend::{Message, PubSubConnection};
use crate::{Error, Result};

/// A subscribed connection; lives only inside [`RedisBackend::with_pubsub`].
pub(super) struct RedisPubSub<'a> {
    pub(super) backend: &'a RedisBackend,
    pub(super) pubsub: redis::PubSub<'a>,
    /// The read timeout currently set on the socket (a syscall to change).
    pub(super) read_timeout: Option<Duration>,
    /// The Sentinel epoch of the connection: once a failover moves the
    /// master, the session ends so the subscriber reconnects to the new one
    /// (the old master may keep this connection open for a while).
    pub(super) epoch: u64,
}

impl RedisPubSub<'_> {
    fn set_read_timeout(&mut self, timeout: Duration) -> Result<()> {
        let timeout = timeout.max(Duration::from_millis(1));
        if self.read_timeout != Some(timeout) {
            self.pubsub.set_read_timeout(Some(timeout)).map_err(|err| {
                self.backend
                    .redis_error("configuring pub/sub", err, timeout)
            })?;
            self.read_timeout = Some(timeout);
        }
        Ok(())
    }
}

impl PubSubConnection for RedisPubSub<'_> {
    fn subscribe(&mut self, channels: &[String]) -> Result<()> {
        if channels.is_empty() {
            return Ok(());
        }
        // A timed-out confirmation would desynchronise the reply stream, so
        // give it the full response timeout and treat a timeout as a broken
        // connection (the subscriber then reconnects).
        self.set_read_timeout(self.backend.options.response_timeout)?;
        self.pubsub.subscribe(channels).map_err(|err| {
            self.backend
                .redis_error("SUBSCRIBE", err, self.backend.options.response_timeout)
        })
    }

    fn unsubscribe(&mut self, channels: &[String]) -> Result<()> {
        if channels.is_empty() {
            return Ok(());
        }
        self.set_read_timeout(self.backend.options.response_timeout)?;
        self.pubsub.unsubscribe(channels).map_err(|err| {
            self.backend
                .redis_error("UNSUBSCRIBE", err, self.backend.options.response_timeout)
        })
    }

    fn next_message(&mut self, timeout: Duration) -> Result<Option<Message>> {
        if self.backend.target.is_stale(self.epoch) {
            return Err(Error::backend(
                format!(
                    "reading pub/sub on Redis at {}: a failover moved the master; reconnecting",
                    self.backend.address
                ),
                true,
            ));
        }
        self.set_read_timeout(timeout)?;
        match self.pubsub.get_message() {
            Ok(msg) => {
                let payload = String::from_utf8_lossy(msg.get_payload_bytes()).into_owned();
                Ok(Some(Message::new(msg.get_channel_name(), payload)))
            }
            Err(err) if err.is_timeout() => Ok(None),
            // A signal (SIGSTOP/SIGCONT of this process) interrupted the
            // read: the connection is fine; the subscriber reads again.
            Err(err) if io_kind(&err) == Some(std::io::ErrorKind::Interrupted) => Ok(None),
            Err(err) => Err(self.backend.redis_error("reading pub/sub", err, timeout)),
        }
    }
}
