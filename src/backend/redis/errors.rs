//! Reading what the `redis` crate reports: a script's own error reply
//! (a [`Reply::Error`]), or an [`Error`] that says what happened and where,
//! decided by the crate's error kinds and codes, never by their text.

use std::sync::Arc;
use std::time::Duration;

use redis::RedisError;

use crate::Error;
use crate::backend::Reply;

/// A `READONLY You can't write against a read only replica` reply: the
/// server was a master and a failover demoted it.
pub(super) fn is_read_only(err: &RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}

/// A script's reply as the seam carries it.
pub(super) fn reply_from_value(value: redis::Value) -> Reply {
    use redis::Value;
    match value {
        Value::Nil => Reply::Nil,
        Value::Int(value) => Reply::Int(value),
        Value::BulkString(bytes) => Reply::Bulk(bytes),
        Value::Array(items) | Value::Set(items) => {
            Reply::Array(items.into_iter().map(reply_from_value).collect())
        }
        Value::SimpleString(text) => Reply::Status(text),
        Value::Okay => Reply::Status("OK".to_owned()),
        Value::Boolean(flag) => Reply::Int(i64::from(flag)),
        Value::ServerError(err) => Reply::Error(format!(
            "{} {}",
            err.code(),
            err.details().unwrap_or_default()
        )),
        other => Reply::Status(format!("{other:?}")),
    }
}

/// The error codes a script's own failure carries: `ERR` (a refused
/// argument, a runtime error, a command's `ERR` reply) and `WRONGTYPE`.
/// Every other code is the server's state (READONLY, NOPERM, LOADING,
/// MISCONF, ...), not the script's answer.
pub(super) const SCRIPT_ERROR_CODES: [&str; 2] = ["ERR", "WRONGTYPE"];

/// The script's own error reply in `err`, if that is what it is.
pub(super) fn script_error_reply(err: &RedisError) -> Option<Reply> {
    let code = err.code()?;
    if !SCRIPT_ERROR_CODES.contains(&code) || is_acl_refusal(err) {
        return None;
    }
    Some(Reply::Error(format!(
        "{code} {}",
        err.detail().unwrap_or_default()
    )))
}

/// A server's error reply to a plain command (an unknown command, an ACL
/// refusal) as a [`Reply::Error`]; `None` for every other failure, and for
/// a read-only replica's (the connection must be dropped).
pub(super) fn server_error_reply(err: &RedisError) -> Option<Reply> {
    let code = err.code()?;
    if is_read_only(err) {
        return None;
    }
    Some(Reply::Error(format!(
        "{code} {}",
        err.detail().unwrap_or_default()
    )))
}

/// An ACL refusal: the `NOPERM` code where the server gives one (a
/// command refused at top level), else the `ERR` a command refused inside
/// a script gets, worded by Redis 7 ("The user executing the script can't
/// run this command or subcommand") or by Valkey 8 ("ACL failure in
/// script: User ... has no permissions to run the 'hincrby' command").
pub(super) fn is_acl_refusal(err: &RedisError) -> bool {
    /// The ERR wordings of a refusal inside a script (no code of its own).
    const IN_SCRIPT: [&str; 2] = [
        "The user executing the script can't",
        "ACL failure in script",
    ];
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
        || err.code() == Some("NOPERM")
        || (err.code() == Some("ERR")
            && err
                .detail()
                .is_some_and(|detail| IN_SCRIPT.iter().any(|text| detail.contains(text))))
}

/// Converts a `redis` error: WRONGTYPE is a protocol error; I/O, refusal
/// and timeouts are connection errors, said in words with the address and
/// the operation (`timeout` is the read timeout the round trip had).
pub(super) fn redis_error(address: &str, op: &str, err: RedisError, timeout: Duration) -> Error {
    if let Some(error) = connection_failure(address, op, &err, timeout) {
        return error;
    }
    // A demoted master: the connection is useless (the pool drops it, see
    // `Conn::broken`) and a retry on a new one reaches the new master.
    if is_read_only(&err) {
        return Error::backend_caused_by(
            format!("{op} on Redis at {address}: the server is a read-only replica (failover?)"),
            err,
            true,
        );
    }
    // A cluster that is not ready for the slot now (a migration that
    // outlasted the routing's retries, a failover): the script did not run,
    // and a later retry can land, as on a lost connection (a counting call
    // is resent in the background, a failed acquire undone).
    if matches!(
        err.kind(),
        redis::ErrorKind::Server(
            redis::ServerErrorKind::TryAgain
                | redis::ServerErrorKind::ClusterDown
                | redis::ServerErrorKind::MasterDown
        )
    ) {
        return Error::backend_caused_by(
            format!(
                "{op} on Redis at {address}: the cluster kept answering {} for {timeout:?} \
                 (slot migrating, or cluster down): not run, try again",
                err.code().unwrap_or("TRYAGAIN")
            ),
            err,
            true,
        );
    }
    // Say it in words: the crate's own text for a refused AUTH is terse.
    // Neither text carries the password (the server never echoes it).
    if err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("WRONGPASS" | "NOAUTH"))
    {
        return Error::backend_caused_by(
            format!(
                "{op} on Redis at {address}: authentication failed \
                 (wrong user name or password, or the user is disabled)"
            ),
            err,
            false,
        );
    }
    if is_acl_refusal(&err) {
        return Error::backend_caused_by(
            format!(
                "{op} on Redis at {address}: permission denied by the server's ACL \
                 (see README, Security, for the commands the user needs)"
            ),
            err,
            false,
        );
    }
    let connection = err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout();
    Error::backend_caused_by(format!("{op} on Redis at {address}"), err, connection)
}

/// A connection failure said in words: what happened, where, during what.
/// `None` for any other error. The `redis` crate's own text ("Resource
/// temporarily unavailable (os error 11)") stays out of the message: it
/// says neither what happened nor where.
pub(super) fn connection_failure(
    address: &str,
    op: &str,
    err: &RedisError,
    timeout: Duration,
) -> Option<Error> {
    use std::io::ErrorKind as Io;
    let what = if err.is_timeout() {
        // Whether the caller's wait, not the response timeout, cut it.
        crate::deadline::note_timeout();
        format!("timed out after {timeout:?} waiting for a reply from Redis at {address} ({op})")
    } else {
        match io_kind(err) {
            Some(Io::ConnectionRefused) => {
                format!("connection refused by Redis at {address} ({op})")
            }
            Some(
                Io::UnexpectedEof | Io::ConnectionReset | Io::ConnectionAborted | Io::BrokenPipe,
            ) => {
                format!("Redis at {address} closed the connection ({op})")
            }
            Some(Io::HostUnreachable | Io::NetworkUnreachable) => {
                format!("no route to Redis at {address} ({op})")
            }
            _ => return None,
        }
    };
    Some(Error::backend(what, true))
}

/// The kind of the I/O error behind `err`, if it is one.
pub(super) fn io_kind(err: &RedisError) -> Option<std::io::ErrorKind> {
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    // The crate keeps its I/O errors behind an `Arc<dyn Error>`.
    let source = std::error::Error::source(err)?;
    let io = match source.downcast_ref::<Shared>() {
        Some(shared) => shared.downcast_ref::<std::io::Error>(),
        None => source.downcast_ref::<std::io::Error>(),
    };
    match io {
        Some(io) => Some(io.kind()),
        // Errors the crate makes up itself (its parser's "unexpected end
        // of file") carry no `io::Error`; its predicates still know them.
        None if err.is_timeout() => Some(std::io::ErrorKind::TimedOut),
        None if err.is_connection_refusal() => Some(std::io::ErrorKind::ConnectionRefused),
        None if err.is_connection_dropped() => Some(std::io::ErrorKind::UnexpectedEof),
        None => None,
    }
}

pub(super) fn redacted_address(info: &redis::ConnectionInfo) -> String {
    format!("{}/{}", info.addr(), info.redis_settings().db())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error the `redis` crate makes of a server's error reply `line`.
    fn server_error(line: &str) -> RedisError {
        let value = redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).unwrap();
        value.extract_error().unwrap_err()
    }

    #[test]
    fn acl_refusals_are_recognised_in_redis_and_valkey_wording() {
        for line in [
            "NOPERM User redisync has no permissions to run the 'hincrby' command",
            "ERR The user executing the script can't run this command or subcommand script: \
             b228be47, on @user_script:104.",
            "ERR ACL failure in script: User redisync has no permissions to run the 'hincrby' \
             command script: b228be47, on @user_script:104.",
        ] {
            let err = server_error(line);
            assert!(is_acl_refusal(&err), "{line}");
            assert!(script_error_reply(&err).is_none(), "{line}");
            let text = redis_error("h:1", "lock acquire", err, Duration::from_secs(1)).to_string();
            assert!(
                text.contains("permission denied by the server's ACL"),
                "{text}"
            );
        }
        for line in ["ERR invalid lease: 0", "WRONGTYPE Operation against a key"] {
            let err = server_error(line);
            assert!(!is_acl_refusal(&err), "{line}");
            assert!(script_error_reply(&err).is_some(), "{line}");
        }
    }
}
