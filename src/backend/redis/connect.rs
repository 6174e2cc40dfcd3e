//! Opening one connection within a bound: shared by the pool, Sentinel
//! discovery and cluster nodes.

use std::time::Duration;

use redis::RedisResult;

/// Opens a connection through `client` within `timeout` in all (capped by
/// the caller's deadline). The `redis` crate waits what is left of the
/// timeout after the connect (and TLS handshake) once for each reply of
/// its setup pipeline, so a frozen server would cost it once per setup
/// command: with AUTH and SELECT both, it is split in two. (Clients made
/// by `tls::client_for` send no `CLIENT SETINFO`, so there are at most
/// these two.)
pub(super) fn connect_within(
    client: &redis::Client,
    timeout: Duration,
) -> RedisResult<redis::Connection> {
    let settings = client.get_connection_info().redis_settings();
    let steps = u32::from(settings.password().is_some()) + u32::from(settings.db() != 0);
    client.get_connection_with_timeout(crate::deadline::cap(timeout) / steps.max(1))
}

/// Runs `open` (a connection's opening, through steps of the `redis` crate
/// that do not all keep to a timeout of ours: a cluster connection's PINGs
/// and slot-map read on every node, which a frozen node can hold for a
/// minute) on a helper thread, under this thread's deadline, and gives up
/// on it after `limit`: the caller gets a timeout, and the thread ends when
/// the crate's steps do (dropping what they opened). Only for the rare
/// openings a call makes itself (after a failure, a MOVED reply): the
/// pool's own openings run on its thread.
#[cfg(feature = "cluster")]
pub(super) fn open_within<T: Send + 'static>(
    limit: Duration,
    open: impl FnOnce() -> RedisResult<T> + Send + 'static,
) -> RedisResult<T> {
    let deadline = crate::deadline::current();
    let (sender, receiver) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("redisync-connect".into())
        .spawn(move || {
            let opened = crate::deadline::within(deadline, open);
            let _ = sender.send(opened);
        });
    if let Err(err) = spawned {
        return Err(redis::RedisError::from(err));
    }
    receiver.recv_timeout(limit).unwrap_or_else(|_| {
        Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no cluster connection within {limit:?}"),
        )))
    })
}
