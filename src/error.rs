//! The crate's one error type.
//!
//! Contention is not an error: `try_lock` and `try_lock_for` return `Ok(None)`
//! when they time out. An [`Error`] means the caller misused the API, the
//! backend failed, or Redis answered something the protocol does not allow.

use std::fmt;

/// The result type of every fallible redisync operation.
///
/// ```
/// fn take(lock: &redisync::Lock) -> redisync::Result<bool> {
///     Ok(lock.try_lock()?.is_some())
/// }
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build().unwrap();
/// # assert!(take(&client.lock("doc:result")).unwrap());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in redisync.
///
/// Use the predicates ([`is_not_held`](Error::is_not_held),
/// [`is_connection_error`](Error::is_connection_error), ...) rather than
/// matching, so new variants do not break your code.
///
/// ```
/// let client = redisync::Client::builder()
///     .backend(redisync::MemoryBackend::new())
///     .build()?;
/// let err = client
///     .lock("doc:error")
///     .lock_with_lease(std::time::Duration::ZERO)
///     .unwrap_err();
/// assert!(err.is_invalid_argument());
/// assert_eq!(err.to_string(), "invalid lease: must be at least 1ms, got 0ns");
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The calling thread does not hold the lock it tried to release
    /// (Redisson's `IllegalMonitorStateException`).
    NotHeld {
        /// The lock's name.
        name: String,
    },
    /// An argument was rejected before anything was sent.
    InvalidArgument {
        /// Which argument.
        what: &'static str,
        /// Why it was rejected.
        why: String,
    },
    /// Redis answered something the protocol does not allow: a key holding
    /// another type (`WRONGTYPE`), a script returning an unexpected value.
    Protocol {
        /// What was expected and what came instead.
        detail: String,
    },
    /// The backend could not be reached or failed: connection refused or
    /// dropped, pool exhausted, server error.
    Backend {
        /// What the library was doing and what failed.
        context: String,
        /// The underlying error, if any.
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
        /// Whether the failure is a lost or refused connection (retrying later may succeed).
        connection: bool,
    },
    /// The wait was cancelled through its handle's
    /// [`CancellationToken`](crate::CancellationToken) (Redisson's
    /// `InterruptedException`); nothing was acquired.
    Cancelled {
        /// The name of the object whose wait was cancelled.
        name: String,
    },
}

impl Error {
    /// Builds an [`Error::InvalidArgument`].
    pub(crate) fn invalid(what: &'static str, why: impl Into<String>) -> Self {
        Error::InvalidArgument {
            what,
            why: why.into(),
        }
    }

    /// An [`Error::Protocol`]: the store answered something the protocol
    /// does not allow. For [`LockBackend`](crate::LockBackend) implementations.
    ///
    /// ```
    /// let err = redisync::Error::protocol("script returned 7, expected 0 or 1");
    /// assert!(err.is_protocol_error());
    /// ```
    #[must_use = "an error does nothing unless it is returned"]
    pub fn protocol(detail: impl Into<String>) -> Self {
        Error::Protocol {
            detail: detail.into(),
        }
    }

    /// An [`Error::Backend`] with no underlying error; `connection` says
    /// whether it is a lost or refused connection (which makes redisync
    /// retry idempotent calls such as a release). For
    /// [`LockBackend`](crate::LockBackend) implementations.
    ///
    /// ```
    /// let err = redisync::Error::backend("reply lost", true);
    /// assert!(err.is_connection_error());
    /// ```
    #[must_use = "an error does nothing unless it is returned"]
    pub fn backend(context: impl Into<String>, connection: bool) -> Self {
        Error::Backend {
            context: context.into(),
            source: None,
            connection,
        }
    }

    /// An [`Error::Backend`] caused by `source`. For
    /// [`LockBackend`](crate::LockBackend) implementations.
    ///
    /// ```
    /// let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
    /// let err = redisync::Error::backend_caused_by("lock acquire", io, true);
    /// assert!(std::error::Error::source(&err).is_some());
    /// ```
    #[must_use = "an error does nothing unless it is returned"]
    pub fn backend_caused_by(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
        connection: bool,
    ) -> Self {
        Error::Backend {
            context: context.into(),
            source: Some(Box::new(source)),
            connection,
        }
    }

    /// True for [`Error::NotHeld`]: the thread released a lock it does not hold.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build().unwrap();
    /// let err = redisync::Error::InvalidArgument { what: "name", why: "empty".into() };
    /// assert!(!err.is_not_held());
    /// ```
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// True when the backend could not be reached or the connection dropped;
    /// the operation may succeed if retried later.
    ///
    /// ```
    /// let err = redisync::Error::InvalidArgument { what: "name", why: "empty".into() };
    /// assert!(!err.is_connection_error());
    /// ```
    pub fn is_connection_error(&self) -> bool {
        matches!(
            self,
            Error::Backend {
                connection: true,
                ..
            }
        )
    }

    /// True for [`Error::InvalidArgument`].
    ///
    /// ```
    /// let err = redisync::Error::InvalidArgument { what: "name", why: "empty".into() };
    /// assert!(err.is_invalid_argument());
    /// ```
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, Error::InvalidArgument { .. })
    }

    /// True for [`Error::Protocol`], e.g. a key that holds another Redis type.
    ///
    /// ```
    /// let err = redisync::Error::InvalidArgument { what: "name", why: "empty".into() };
    /// assert!(!err.is_protocol_error());
    /// ```
    pub fn is_protocol_error(&self) -> bool {
        matches!(self, Error::Protocol { .. })
    }

    /// True for [`Error::Backend`]: the store failed or could not be
    /// reached, or refused the client (e.g. a wrong password, or a command
    /// the server's ACL denies). [`is_connection_error`](Self::is_connection_error)
    /// is the subset worth retrying later.
    ///
    /// ```
    /// let err = redisync::Error::backend("authentication failed", false);
    /// assert!(err.is_backend() && !err.is_connection_error());
    /// ```
    pub fn is_backend(&self) -> bool {
        matches!(self, Error::Backend { .. })
    }

    /// True for [`Error::Cancelled`]: a
    /// [`CancellationToken`](crate::CancellationToken) ended the wait, and
    /// nothing was acquired.
    ///
    /// ```
    /// let err = redisync::Error::Cancelled { name: "jobs".into() };
    /// assert!(err.is_cancelled());
    /// assert_eq!(err.to_string(), "the wait for \"jobs\" was cancelled");
    /// ```
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotHeld { name } => {
                write!(f, "lock {name:?} is not held by the current thread")
            }
            Error::InvalidArgument { what, why } => write!(f, "invalid {what}: {why}"),
            Error::Cancelled { name } => write!(f, "the wait for {name:?} was cancelled"),
            Error::Protocol { detail } => write!(f, "protocol error: {detail}"),
            Error::Backend {
                context, source, ..
            } => match source {
                Some(source) => write!(f, "{context}: {source}"),
                None => f.write_str(context),
            },
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Backend {
                source: Some(source),
                ..
            } => Some(source.as_ref()),
            _ => None,
        }
    }
}

/// The error for asking a write lock while holding the read lock: Redisson
/// would wait for itself forever; we refuse at once.
pub(crate) fn read_to_write_upgrade(name: &str) -> Error {
    Error::invalid(
        "write lock",
        format!(
            "this thread holds the read lock of {name:?}; a read lock cannot be upgraded \
             to a write lock (it would wait for itself): release the read lock first"
        ),
    )
}

/// The URL forms redisync accepts (those of the `redis` crate), for an
/// error about a URL.
pub(crate) const URL_FORMS: &str = "redis://[user:password@]host[:port][/db], \
     rediss://... (TLS), valkey://..., valkeys://... (TLS), or a Unix socket as \
     redis+unix:///path, valkey+unix:///path or unix:///path";

/// The error for a URL given as `what` that cannot be used: its scheme if
/// that is the problem, else `problem` (what the URL parser found), and the
/// accepted forms either way. Never quotes the URL itself (it may hold a
/// password), only its scheme.
pub(crate) fn bad_url(what: &'static str, url: &str, problem: &str) -> Error {
    const SCHEMES: [&str; 7] = [
        "redis",
        "rediss",
        "valkey",
        "valkeys",
        "redis+unix",
        "valkey+unix",
        "unix",
    ];
    let scheme = url.trim_start().split_once("://").map(|(scheme, _)| scheme);
    let why = match scheme {
        None => format!("not a URL (no scheme://); expected {URL_FORMS}"),
        Some(scheme) if !SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) => {
            // A scheme is letters, digits, `+`, `-`, `.`: quoted only then
            // (anything else may be part of a password), and short.
            let plain = scheme.len() <= 20
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
            if plain {
                format!("the scheme {scheme}:// is not one Redis uses; expected {URL_FORMS}")
            } else {
                format!("not a Redis URL scheme; expected {URL_FORMS}")
            }
        }
        Some(_) => format!("{problem}; expected {URL_FORMS}"),
    };
    Error::invalid(what, why)
}

/// The text of a wait for a pending release that ran out: the release
/// undoes an earlier call on lock `name` that failed with `cause`. Only
/// that first failure is named: when `cause` is itself such a wait's text,
/// its own first cause is named instead, so one freeze does not nest a
/// clause per call made during it.
pub(crate) fn pending_release_timed_out(
    wait: std::time::Duration,
    name: &str,
    cause: &str,
) -> Error {
    Error::backend(
        format!(
            "timed out after {wait:?} waiting for the release that undoes an earlier call on \
             lock {name:?} by this thread ({EARLIER_FAILED}{}); it is still being retried",
            first_cause(cause)
        ),
        true,
    )
}

/// What introduces the earlier call's failure in [`pending_release_timed_out`].
const EARLIER_FAILED: &str = "that call failed: ";

/// The failure a [`pending_release_timed_out`] text names first (the
/// innermost), or `cause` itself when it is no such text.
fn first_cause(cause: &str) -> &str {
    let marker = format!("({EARLIER_FAILED}");
    let Some(at) = cause.rfind(&marker) else {
        return cause;
    };
    let mut inner = &cause[at + marker.len()..];
    while let Some(rest) = inner.strip_suffix("); it is still being retried") {
        inner = rest;
    }
    inner
}

/// The longest lease, watchdog timeout, wait allowance or timeout redisync
/// sends to Redis: 2^47 ms, about 4,459 years.
///
/// Redis itself refuses an expiry (`PEXPIRE`, `SET ... PX`) once the server's
/// clock in ms plus the value passes `i64::MAX` ("invalid expire time"); that
/// bound moves with the server's clock, which the client does not know, and
/// the scripts also add durations to each other and to the clock in Lua,
/// whose numbers are doubles (exact only below 2^53). 2^47 ms keeps the
/// clock (about 2^41 ms today) plus dozens of such durations exact and far
/// from both limits, while no real lease comes near it. Longer values are
/// rejected with [`Error::InvalidArgument`] before anything is sent, and the
/// scripts refuse them too, before their first write.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(redisync::MAX_LEASE, Duration::from_millis(1 << 47));
/// let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let lock = client.lock("doc:max_lease");
/// drop(lock.lock_with_lease(redisync::MAX_LEASE)?);
/// let err = lock.lock_with_lease(redisync::MAX_LEASE + Duration::from_millis(1)).unwrap_err();
/// assert!(err.is_invalid_argument());
/// # Ok::<(), redisync::Error>(())
/// ```
pub const MAX_LEASE: std::time::Duration = std::time::Duration::from_millis(1 << 47);

/// [`MAX_LEASE`] in ms, as the scripts check it (`lua/args_prelude.lua`).
pub(crate) const MAX_LEASE_MS: i64 = 1 << 47;

/// The latest absolute time in ms since the epoch a script accepts (a
/// caller's clock, a permit's lease end): 2^48 ms, the year 10889, so a
/// clock plus [`MAX_LEASE`] always fits.
pub(crate) const MAX_TIME_MS: i64 = 1 << 48;

/// Checks a duration the user passed and converts it to whole milliseconds
/// for Redis: at least 1 ms and at most [`MAX_LEASE`].
pub(crate) fn millis(what: &'static str, value: std::time::Duration) -> Result<i64> {
    let ms = value.as_millis();
    if ms == 0 {
        return Err(Error::invalid(
            what,
            format!("must be at least 1ms, got {value:?}"),
        ));
    }
    match i64::try_from(ms) {
        Ok(ms) if ms <= MAX_LEASE_MS => Ok(ms),
        _ => Err(beyond_max(what, ms)),
    }
}

/// The error for `ms` past [`MAX_LEASE`].
fn beyond_max(what: &'static str, ms: impl fmt::Display) -> Error {
    Error::invalid(
        what,
        format!(
            "{ms}ms is beyond the longest expiry redisync sends to Redis \
             ({MAX_LEASE_MS}ms = 2^47 ms, about 4459 years)"
        ),
    )
}

/// A backend's check of a duration in ms it was given (the scripts' own
/// guard, for backends that do not run them): 1 to [`MAX_LEASE_MS`].
pub(crate) fn check_ms(what: &'static str, ms: i64) -> Result<()> {
    if ms < 1 {
        return Err(Error::invalid(
            what,
            format!("must be at least 1ms, got {ms}ms"),
        ));
    }
    if ms > MAX_LEASE_MS {
        return Err(beyond_max(what, ms));
    }
    Ok(())
}

/// A backend's check of an absolute time in ms since the epoch: 0 to
/// [`MAX_TIME_MS`].
pub(crate) fn check_time_ms(what: &'static str, ms: i64) -> Result<()> {
    if !(0..=MAX_TIME_MS).contains(&ms) {
        return Err(Error::invalid(
            what,
            format!("{ms} is not a time from 0 to {MAX_TIME_MS} ms since the epoch"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn is_error<T: std::error::Error + Send + Sync + 'static>() {}

    #[test]
    fn error_is_a_std_error_that_crosses_threads() {
        is_error::<Error>();
    }

    #[test]
    fn millis_rejects_zero_sub_millisecond_and_overflow() {
        assert!(
            millis("lease", Duration::ZERO)
                .unwrap_err()
                .is_invalid_argument()
        );
        let msg = millis("lease", Duration::from_micros(500))
            .unwrap_err()
            .to_string();
        assert_eq!(msg, "invalid lease: must be at least 1ms, got 500µs");
        assert!(
            millis("lease", Duration::MAX)
                .unwrap_err()
                .is_invalid_argument()
        );
        assert_eq!(millis("lease", Duration::from_secs(30)).unwrap(), 30_000);
        assert_eq!(millis("lease", MAX_LEASE).unwrap(), MAX_LEASE_MS);
        assert_eq!(
            millis(
                "lease",
                Duration::from_millis(u64::try_from(i64::MAX).unwrap())
            )
            .unwrap_err()
            .to_string(),
            "invalid lease: 9223372036854775807ms is beyond the longest expiry redisync \
             sends to Redis (140737488355328ms = 2^47 ms, about 4459 years)"
        );
        assert!(
            millis("lease", MAX_LEASE + Duration::from_millis(1))
                .unwrap_err()
                .is_invalid_argument()
        );
        // Sub-millisecond parts are dropped, as before.
        assert_eq!(
            millis("lease", MAX_LEASE + Duration::from_micros(999)).unwrap(),
            MAX_LEASE_MS
        );
        assert!(check_ms("lease", 0).is_err() && check_ms("lease", MAX_LEASE_MS + 1).is_err());
        assert!(check_ms("lease", 1).is_ok() && check_ms("lease", MAX_LEASE_MS).is_ok());
        assert!(
            check_time_ms("now", -1).is_err() && check_time_ms("now", MAX_TIME_MS + 1).is_err()
        );
    }

    #[test]
    fn a_bad_url_names_the_accepted_schemes_and_no_foreign_kind() {
        let err = bad_url(
            "url",
            "http://127.0.0.1:7400",
            "URL provided is not a redis URL",
        );
        let text = err.to_string();
        assert!(text.starts_with("invalid url: the scheme http:// is not one Redis uses"));
        for scheme in [
            "redis://",
            "rediss://",
            "valkey://",
            "redis+unix://",
            "unix://",
        ] {
            assert!(text.contains(scheme), "{text}");
        }
        let text = bad_url("url", "redis://h:1/x", "invalid database number").to_string();
        assert!(text.starts_with("invalid url: invalid database number; expected redis://"));
        let text = bad_url("url", "user:s3cret@h", "").to_string();
        assert!(
            text.starts_with("invalid url: not a URL (no scheme://)") && !text.contains("s3cret")
        );
        let text = bad_url("url", "u:s3cret@h://", "").to_string();
        assert!(!text.contains("s3cret"), "{text}");
    }

    #[test]
    fn a_pending_release_names_one_earlier_failure_however_many_calls_failed() {
        let wait = Duration::from_secs(5);
        let first = pending_release_timed_out(
            wait,
            "a",
            "timed out after 1s waiting for a reply from Redis at h:1 (lock release)",
        );
        let second = pending_release_timed_out(wait, "a", &first.to_string());
        let third = pending_release_timed_out(wait, "a", &second.to_string());
        assert_eq!(first.to_string(), third.to_string());
        let text = third.to_string();
        assert_eq!(text.matches("that call failed").count(), 1, "{text}");
        assert!(text.ends_with("(that call failed: timed out after 1s waiting for a reply from Redis at h:1 (lock release)); it is still being retried"), "{text}");
        assert!(third.is_connection_error());
    }

    #[test]
    fn display_names_the_argument() {
        let err = Error::invalid("name", "must not be empty");
        assert_eq!(err.to_string(), "invalid name: must not be empty");
        assert_eq!(
            Error::NotHeld { name: "a".into() }.to_string(),
            "lock \"a\" is not held by the current thread"
        );
    }
}
