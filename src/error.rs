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
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotHeld { name } => {
                write!(f, "lock {name:?} is not held by the current thread")
            }
            Error::InvalidArgument { what, why } => write!(f, "invalid {what}: {why}"),
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

/// Checks a duration the user passed and converts it to whole milliseconds
/// for Redis (which takes `i64`).
pub(crate) fn millis(what: &'static str, value: std::time::Duration) -> Result<i64> {
    let ms = i64::try_from(value.as_millis())
        .map_err(|_| Error::invalid(what, format!("{value:?} does not fit in i64 milliseconds")))?;
    if ms <= 0 {
        return Err(Error::invalid(
            what,
            format!("must be at least 1ms, got {value:?}"),
        ));
    }
    Ok(ms)
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
