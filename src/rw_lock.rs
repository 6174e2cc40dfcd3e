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
use crate::{Client, Lock, Result};

/// A handle on one distributed read-write lock; created by
/// [`Client::read_write_lock`]. Cheap to clone, `Send + Sync`.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let rw = client.read_write_lock("config");
/// {
///     let _a = rw.read_lock().lock()?; // readers share
///     let (reader, writer) = (rw.read_lock(), rw.write_lock());
///     let other = std::thread::spawn(move || {
///         let reads = reader.try_lock().unwrap().is_some();
///         let writes = writer.try_lock().unwrap().is_some();
///         (reads, writes)
///     });
///     assert_eq!(other.join().unwrap(), (true, false)); // no writer while reading
///     // Read -> write would wait for itself: refused at once.
///     assert!(rw.write_lock().try_lock().unwrap_err().is_invalid_argument());
/// }
/// let _w = rw.write_lock().lock()?; // exclusive
/// let _r = rw.read_lock().lock()?;  // a writer may also read (downgrade)
/// # Ok::<(), redisync::Error>(())
/// ```
#[doc(alias = "RReadWriteLock")]
#[must_use = "a read-write lock handle takes nothing by itself: call .read_lock().lock() or .write_lock().lock()"]
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

    /// The read half's handle (Redisson's `readLock()`): shared with other
    /// readers, excluded by a writer. It takes nothing by itself: call
    /// [`lock`](Lock::lock) or [`try_lock`](Lock::try_lock) on it and keep
    /// the guard. Its `is_locked()` is true while the lock is held in read
    /// mode.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let guard = client.read_write_lock("config").read_lock().lock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    ///
    /// The handle alone takes nothing, and the compiler says so:
    ///
    /// ```compile_fail
    /// #![deny(unused_must_use)]
    /// # fn main() -> redisync::Result<()> {
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// client.read_write_lock("config").read_lock(); // error: unused return value ... must be used
    /// # Ok(())
    /// # }
    /// ```
    #[doc(alias = "readLock")]
    #[doc(alias = "read")]
    #[must_use = "read_lock() returns the read half's handle and takes nothing: call .lock() on it and keep the guard"]
    pub fn read_lock(&self) -> Lock {
        self.read.clone()
    }

    /// The write half's handle (Redisson's `writeLock()`): exclusive. It
    /// takes nothing by itself: call [`lock`](Lock::lock) or
    /// [`try_lock`](Lock::try_lock) on it and keep the guard. Its
    /// `is_locked()` is true while the lock is held in write mode.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let guard = client.read_write_lock("config").write_lock().lock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "writeLock")]
    #[doc(alias = "write")]
    #[must_use = "write_lock() returns the write half's handle and takes nothing: call .lock() on it and keep the guard"]
    pub fn write_lock(&self) -> Lock {
        self.write.clone()
    }

    /// The read half's handle: the old name of
    /// [`read_lock`](Self::read_lock), which says that it returns a handle
    /// and not a guard (`let _r = rw.read();` took nothing).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # #[allow(deprecated)]
    /// let guard = client.read_write_lock("config").read().lock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[deprecated(note = "renamed `read_lock()`: it returns the read half's handle, not a guard")]
    #[must_use = "read() returns the read half's handle and takes nothing: call .lock() on it and keep the guard"]
    pub fn read(&self) -> Lock {
        self.read_lock()
    }

    /// The write half's handle: the old name of
    /// [`write_lock`](Self::write_lock), which says that it returns a
    /// handle and not a guard.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// # #[allow(deprecated)]
    /// let guard = client.read_write_lock("config").write().lock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[deprecated(note = "renamed `write_lock()`: it returns the write half's handle, not a guard")]
    #[must_use = "write() returns the write half's handle and takes nothing: call .lock() on it and keep the guard"]
    pub fn write(&self) -> Lock {
        self.write_lock()
    }

    /// Deletes the lock whatever its mode and whoever holds it, with every
    /// holder's read-hold keys, and wakes every waiter (Redisson's
    /// `RReadWriteLock.delete()`, which deletes the hash alone and wakes no
    /// one: its waiters sleep until the deleted holds' TTL would have run
    /// out). Returns whether the lock existed. Holders' guards then report
    /// `NotHeld` on `unlock()`.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name; `Backend` if Redis fails;
    /// `Protocol` if the key holds another type.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let rw = client.read_write_lock("config");
    /// let reading = rw.read_lock().lock()?;
    /// assert!(rw.delete()?);
    /// assert!(rw.write_lock().try_lock()?.is_some()); // nothing left to wait for
    /// assert!(!rw.delete()?);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn delete(&self) -> Result<bool> {
        self.write.delete_rw()
    }

    /// The lock's name, as given to the client: the Redis key of its hash,
    /// less the client's [name prefix](crate::ClientBuilder::name_prefix).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.read_write_lock("config").name(), "config");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "getName")]
    pub fn name(&self) -> &str {
        self.read.name()
    }
}
