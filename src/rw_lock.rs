//! [`ReadWriteLock`]: Redisson's `RReadWriteLock`, a pair of [`Lock`]
//! handles on one Redis hash: many readers or one writer, both reentrant.
//!
//! A writer may also take the read lock (downgrade: take read while holding
//! write, then release write). The reverse, read → write, is refused at
//! once with `Error::InvalidArgument` rather than waiting: Redisson would
//! wait for its own read hold forever. Each read hold has its own timeout
//! key, and the watchdog renews only the calling client's holds, so a dead
//! reader's share expires while live readers keep theirs. A write lock's
//! final release wakes every waiter (read-unlock message `1`); a read lock's
//! final release wakes one waiter per client (`0`).

use std::fmt;

use crate::flavor::Flavor;
use crate::{Client, Lock};

/// A handle on one distributed read-write lock; created by
/// [`Client::read_write_lock`]. Cheap to clone, `Send + Sync`.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let rw = client.read_write_lock("config");
/// {
///     let _a = rw.read().lock()?;   // readers share
///     let (reader, writer) = (rw.read(), rw.write());
///     let other = std::thread::spawn(move || {
///         let reads = reader.try_lock().unwrap().is_some();
///         let writes = writer.try_lock().unwrap().is_some();
///         (reads, writes)
///     });
///     assert_eq!(other.join().unwrap(), (true, false)); // no writer while reading
///     // Read -> write would wait for itself: refused at once.
///     assert!(rw.write().try_lock().unwrap_err().is_invalid_argument());
/// }
/// let _w = rw.write().lock()?;     // exclusive
/// let _r = rw.read().lock()?;      // a writer may also read (downgrade)
/// # Ok::<(), redisync::Error>(())
/// ```
#[doc(alias = "RReadWriteLock")]
#[derive(Clone)]
pub struct ReadWriteLock {
    read: Lock,
    write: Lock,
}

impl fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.read.name())
            .finish()
    }
}

impl ReadWriteLock {
    pub(crate) fn new(client: &Client, name: String) -> ReadWriteLock {
        ReadWriteLock {
            read: Lock::new(client.clone(), Flavor::Read, name.clone()),
            write: Lock::new(client.clone(), Flavor::Write, name),
        }
    }

    /// The read half: shared with other readers, excluded by a writer. Its
    /// `is_locked()` is true while the lock is held in read mode.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let guard = client.read_write_lock("config").read().lock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "read_lock")]
    pub fn read(&self) -> Lock {
        self.read.clone()
    }

    /// The write half: exclusive. Its `is_locked()` is true while the lock
    /// is held in write mode.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let guard = client.read_write_lock("config").write().lock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "write_lock")]
    pub fn write(&self) -> Lock {
        self.write.clone()
    }

    /// The lock's name: the Redis key of its hash.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.read_write_lock("config").name(), "config");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.read.name()
    }
}
