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
