//! [`Client`]: one backend, one subscriber thread, one watchdog registry and
//! one holder identity, shared by every handle created from it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::LockBackend;
use crate::config::ClientBuilder;
use crate::event::EventHandler;
use crate::flavor::Flavor;
use crate::pubsub::Subscriber;
use crate::watchdog::Watchdog;
use crate::{
    Backoff, CountDownLatch, Lock, PermitExpirableSemaphore, ReadWriteLock, Result, Semaphore,
};

struct Inner {
    /// This client's uuid: the first half of every holder id.
    id: String,
    backend: Arc<dyn LockBackend>,
    subscriber: Subscriber,
    watchdog: Watchdog,
    events: Arc<dyn EventHandler>,
    watchdog_timeout: Duration,
    watchdog_ms: i64,
    /// A fair waiter's queue slot when it waits without a bound.
    fair_wait_timeout: Duration,
    fair_wait_ms: i64,
    /// Releases still being retried after their call returned (see `cleanup`).
    cleanup: crate::cleanup::Cleanup,
    /// Which thread of this client holds each reentrant lock (a thread that
    /// asks for one a sibling holds parks without a doomed attempt).
    local_owners: crate::local_owner::LocalOwners,
    /// The name prefix (see `names`).
    names: crate::names::Names,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Guards hold a clone of the client, so nothing is held any more:
        // stop renewing and stop the subscriber thread.
        self.watchdog.shutdown();
        self.subscriber.shutdown();
        self.cleanup.shutdown();
    }
}

/// The entry point: a connection to one backend from which lock handles are
/// made. Cheap to clone (an `Arc`); clones share the same holder identity,
/// pub/sub connection and watchdog. Separate `Client`s are separate holders,
/// like two processes.
///
/// Created by [`Client::open`] or [`Client::builder`]. When the last clone
/// (and the last guard) is dropped, its background threads stop.
///
/// ```
/// let client = redisync::Client::builder()
///     .backend(redisync::MemoryBackend::new())
///     .build()?;
/// let guard = client.lock("orders:42").lock()?;
/// // ... critical section ...
/// guard.unlock()?;
/// # Ok::<(), redisync::Error>(())
/// ```
#[must_use = "a client does nothing by itself: make handles with .lock(name), .semaphore(name), ..."]
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner.id)
            .field("watchdog_timeout", &self.inner.watchdog_timeout)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to the Redis server at `url`
    /// (`redis://[user:password@]host:port/db`) with default settings.
    ///
    /// # Errors
    /// `InvalidArgument` for a malformed URL, `Backend` if Redis is unreachable.
    ///
    /// ```no_run
    /// let client = redisync::Client::open("redis://127.0.0.1:6379/")?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn open(url: &str) -> Result<Client> {
        Client::builder().redis_url(url).build()
    }

    /// Connects to the current master of the Sentinel-monitored group
    /// `master_name` through the sentinels at `sentinel_urls`
    /// (`redis://[:password@]host:port`, or `rediss://` for TLS to the
    /// sentinels and the master, feature `tls`), with default settings. After a
    /// failover, the client's pooled connections and its pub/sub connection
    /// move to the new master (see [`RedisBackend::open_sentinel`](crate::RedisBackend::open_sentinel));
    /// calls in flight during the switch may fail with a connection error.
    /// For the master's password, use
    /// [`ClientBuilder::sentinel_config`]. Only with the `sentinel` feature.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name or list or a malformed URL;
    /// `Backend` if no sentinel answers, none knows `master_name`, or the
    /// master is unreachable.
    ///
    /// ```no_run
    /// let client = redisync::Client::open_sentinel(
    ///     "mymaster",
    ///     &["redis://10.0.0.5:26379", "redis://10.0.0.6:26379", "redis://10.0.0.7:26379"],
    /// )?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn open_sentinel<I>(master_name: &str, sentinel_urls: I) -> Result<Client>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Client::builder()
            .sentinel(master_name, sentinel_urls)
            .build()
    }

    /// Connects to the Redis Cluster whose nodes include `node_urls`
    /// (`redis://[user:password@]host:port`, or `rediss://` for TLS with
    /// the `tls` feature; one reachable node is enough),
    /// with default settings. Scripts run on their object's slot master,
    /// redirections and failovers are followed, and waiters are woken
    /// through sharded pub/sub, as with Redisson on Redis 7+ (see
    /// [`RedisBackend::open_cluster`](crate::RedisBackend::open_cluster)).
    /// Only with the `cluster` feature.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty list or a malformed URL; `Backend` if
    /// no node can be reached.
    ///
    /// ```no_run
    /// let client = redisync::Client::open_cluster([
    ///     "redis://10.0.0.5:7000",
    ///     "redis://10.0.0.6:7000",
    ///     "redis://10.0.0.7:7000",
    /// ])?;
    /// let guard = client.lock("orders:42").lock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn open_cluster<I>(node_urls: I) -> Result<Client>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Client::builder().cluster(node_urls).build()
    }

    /// A builder for any backend and the tunables.
    ///
    /// ```
    /// let client = redisync::Client::builder()
    ///     .backend(redisync::MemoryBackend::new())
    ///     .build()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    pub(crate) fn from_parts(
        id: String,
        backend: Arc<dyn LockBackend>,
        watchdog: crate::watchdog::Settings,
        (fair_wait_timeout, fair_wait_ms): (Duration, i64),
        events: Arc<dyn EventHandler>,
        names: crate::names::Names,
    ) -> Client {
        let subscriber = Subscriber::new(Arc::clone(&backend), &id, Arc::clone(&events));
        let (watchdog_timeout, watchdog_ms) = (watchdog.timeout, watchdog.timeout_ms);
        let watchdog = Watchdog::new(Arc::clone(&backend), watchdog, Arc::clone(&events));
        Client {
            inner: Arc::new(Inner {
                id,
                backend,
                subscriber,
                watchdog,
                events,
                watchdog_timeout,
                watchdog_ms,
                fair_wait_timeout,
                fair_wait_ms,
                cleanup: crate::cleanup::Cleanup::default(),
                local_owners: crate::local_owner::LocalOwners::default(),
                names,
            }),
        }
    }

    /// A handle on the reentrant lock `name` (Redisson's `RLock`). Cheap; no
    /// round trip. An empty name is reported by the first operation.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.lock("orders:42");
    /// assert_eq!(lock.name(), "orders:42");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "RLock")]
    #[doc(alias = "get_lock")]
    #[doc(alias = "getLock")]
    #[must_use = "a handle takes nothing by itself: call a method on it (e.g. .lock()) and keep what it returns"]
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.clone(), Flavor::Reentrant, self.map(name))
    }

    /// A handle on the fenced lock `name` (Redisson's `RFencedLock`): a
    /// reentrant lock, sharing keys and wake-ups with [`lock`](Self::lock)
    /// of the same name, whose every acquisition also takes a fencing token
    /// from the counter `redisson_lock_token:{name}` in the same script.
    /// Read it with [`LockGuard::token`](crate::LockGuard::token): it is
    /// greater than every token handed out before for `name`, so a
    /// downstream store that remembers the highest token it has accepted can
    /// reject a stale holder (one that paused past its lease). Tokens are at
    /// least the server's clock in microseconds, so they keep increasing
    /// when Redis loses the counter (see `LockGuard::token` for the clock
    /// assumption this rests on).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.fenced_lock("ledger");
    /// let guard = lock.lock()?;
    /// let token = guard.token().unwrap(); // send it with every write
    /// assert!(token >= 1);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "RFencedLock")]
    #[doc(alias = "get_fenced_lock")]
    #[doc(alias = "getFencedLock")]
    #[must_use = "a handle takes nothing by itself: call a method on it (e.g. .lock()) and keep what it returns"]
    pub fn fenced_lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.clone(), Flavor::Fenced, self.map(name))
    }

    /// A handle on the fair lock `name` (Redisson's `RFairLock`): the same
    /// API as [`lock`](Self::lock), but granted first come, first served
    /// across all clients. Waiters queue in Redis; an unlock wakes only the
    /// head of the queue, on its own channel. A waiter that dies or gives up
    /// leaves the queue: at once when `try_lock_for` times out, otherwise
    /// when its queue slot (the
    /// [fair-lock wait timeout](crate::ClientBuilder::fair_lock_wait_timeout),
    /// or the `try_lock_for` wait) runs out.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.fair_lock("tickets");
    /// let guard = lock.lock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "RFairLock")]
    #[doc(alias = "get_fair_lock")]
    #[doc(alias = "getFairLock")]
    #[must_use = "a handle takes nothing by itself: call a method on it (e.g. .lock()) and keep what it returns"]
    pub fn fair_lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.clone(), Flavor::Fair, self.map(name))
    }

    /// A handle on the spin lock `name` (Redisson's `RSpinLock`,
    /// `getSpinLock(name)`), waiting with [`Backoff::default`].
    ///
    /// It is a [`Lock`] (reentrant, watchdog, [`LockGuard`](crate::LockGuard))
    /// on the same keys as [`lock`](Self::lock): the two exclude each other
    /// on one name, and Redisson's `RSpinLock`/`RLock` too. Its waiters
    /// never subscribe to anything: they retry after each backoff pause. Use
    /// it where pub/sub is unavailable (a proxy that does not support it) or
    /// where thousands of waiting clients would each hold a subscription.
    /// The price: a waiter notices a release up to one pause late and sends
    /// one attempt per pause. Cheap; no round trip.
    ///
    /// ```
    /// use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let lock = client.spin_lock("reports");
    /// let guard = lock.lock()?;                       // watchdog keeps the lease alive
    /// let plain = client.lock("reports");             // same lock, pub/sub waits
    /// assert!(plain.is_locked()?);
    /// let other = lock.clone();
    /// let waited = std::thread::spawn(move || {
    ///     // Retries after 1, 2, 4, ... ms; gives up after 50 ms.
    ///     other.try_lock_for(Duration::from_millis(50)).unwrap().is_none()
    /// });
    /// assert!(waited.join().unwrap());
    /// guard.unlock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "RSpinLock")]
    #[doc(alias = "get_spin_lock")]
    pub fn spin_lock(&self, name: impl Into<String>) -> Lock {
        self.spin_lock_with_backoff(name, Backoff::default())
    }

    /// A handle on the spin lock `name` whose waiters pace their attempts
    /// by `backoff` (Redisson's `getSpinLock(name, backOff)`); see
    /// [`spin_lock`](Self::spin_lock).
    ///
    /// ```
    /// use std::time::Duration;
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let backoff = redisync::Backoff::exponential(Duration::from_millis(5), Duration::from_millis(500), 2)?;
    /// let lock = client.spin_lock_with_backoff("reports", backoff);
    /// assert_eq!(lock.spin_backoff(), Some(backoff));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "RSpinLock")]
    pub fn spin_lock_with_backoff(&self, name: impl Into<String>, backoff: Backoff) -> Lock {
        Lock::new(self.clone(), Flavor::Reentrant, self.map(name)).spinning(backoff)
    }

    /// A handle on the read-write lock `name` (Redisson's
    /// `RReadWriteLock`): take `.read_lock()` or `.write_lock()`.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let rw = client.read_write_lock("config");
    /// let reading = rw.read_lock().lock()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "RReadWriteLock")]
    #[doc(alias = "get_read_write_lock")]
    #[doc(alias = "getReadWriteLock")]
    #[must_use = "a handle takes nothing by itself: call a method on it (e.g. .lock()) and keep what it returns"]
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self, self.map(name))
    }

    /// A handle on the counting semaphore `name` (Redisson's `RSemaphore`).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let slots = client.semaphore("downloads");
    /// slots.try_set_permits(4)?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "RSemaphore")]
    #[doc(alias = "get_semaphore")]
    #[doc(alias = "getSemaphore")]
    #[must_use = "a handle takes nothing by itself: call a method on it (e.g. .lock()) and keep what it returns"]
    pub fn semaphore(&self, name: impl Into<String>) -> Semaphore {
        Semaphore::new(self.clone(), self.map(name))
    }

    /// A handle on the semaphore with leased permits `name` (Redisson's
    /// `RPermitExpirableSemaphore`): a crashed holder's permit returns when
    /// its lease runs out.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let workers = client.permit_expirable_semaphore("workers");
    /// workers.try_set_permits(2)?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "RPermitExpirableSemaphore")]
    #[doc(alias = "getPermitExpirableSemaphore")]
    #[must_use = "a handle takes nothing by itself: call a method on it (e.g. .lock()) and keep what it returns"]
    pub fn permit_expirable_semaphore(&self, name: impl Into<String>) -> PermitExpirableSemaphore {
        PermitExpirableSemaphore::new(self.clone(), self.map(name))
    }

    /// A handle on the count-down latch `name` (Redisson's `RCountDownLatch`).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let ready = client.count_down_latch("ready");
    /// ready.try_set_count(3)?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "RCountDownLatch")]
    #[doc(alias = "get_count_down_latch")]
    #[doc(alias = "getCountDownLatch")]
    #[must_use = "a handle takes nothing by itself: call a method on it (e.g. .lock()) and keep what it returns"]
    pub fn count_down_latch(&self, name: impl Into<String>) -> CountDownLatch {
        CountDownLatch::new(self.clone(), self.map(name))
    }

    /// A handle on the barrier `name` for `parties` parties (redisync
    /// only: Redisson has no distributed barrier): [`wait`](crate::Barrier::wait)
    /// blocks until `parties` threads, in any client, have arrived, then
    /// releases them all; the next `parties` arrivals form the next
    /// generation. Cheap; no round trip. An empty name or 0 parties is
    /// reported by the first operation.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let start = client.barrier("race:start", 2);
    /// let other = start.clone();
    /// let runner = std::thread::spawn(move || other.wait());
    /// assert_eq!(start.wait()?, 0);                   // both arrived: generation 0
    /// assert_eq!(runner.join().unwrap()?, 0);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "CyclicBarrier")]
    #[must_use = "a handle does nothing by itself: call .wait() on it"]
    pub fn barrier(&self, name: impl Into<String>, parties: u32) -> crate::Barrier {
        crate::Barrier::new(self.clone(), self.map(name), parties)
    }

    /// A handle on the leader election `name` (redisync only): campaign
    /// with an identity, lead with a term (a fencing token), resign, run a
    /// job while leading, or observe who leads. See
    /// [`LeaderElection`](crate::LeaderElection).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let leadership = client.leader_election("scheduler").campaign("host-a")?;
    /// assert!(leadership.term() > 0);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn leader_election(&self, name: impl Into<String>) -> crate::LeaderElection {
        crate::LeaderElection::new(self.clone(), self.map(name))
    }

    /// A snapshot of whatever lives under `name`, read in one round trip
    /// by one read-only script: its kind (lock, fair lock, fenced lock,
    /// read-write lock, permit-expirable semaphore, a counter that is a
    /// semaphore or a latch, nothing, or an unknown Redis type), its
    /// holders (client id, thread, hold count, mode, lease, and the
    /// holding client's connections to the store with their address and
    /// idle time, found by name in `CLIENT LIST`), its TTL, the
    /// last fencing token, a fair lock's queue with each waiter's slot
    /// deadline, a semaphore's available permits, a permit-expirable
    /// semaphore's leases, a latch's count. `docs/operations.md` tells how
    /// kinds are told apart where the data alone is ambiguous.
    ///
    /// Works on any store (on a cluster, every key read shares the name's
    /// hash slot) and on objects written by Redisson. It writes nothing,
    /// and holds nothing: by the time it returns, the object may have
    /// changed.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty name; `Backend` if the store fails.
    /// Data of another type under `name` is an answer
    /// ([`ObjectKind::Unknown`](crate::ObjectKind::Unknown)), not an error.
    ///
    /// ```
    /// use redisync::{HoldMode, ObjectKind};
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let guard = client.lock("orders:42").lock()?;
    /// let found = client.inspect("orders:42")?;
    /// assert_eq!(found.kind, ObjectKind::Lock);
    /// assert_eq!(found.holders[0].id, client.current_holder_id());
    /// assert_eq!((found.holders[0].holds, found.holders[0].mode), (1, HoldMode::Exclusive));
    /// println!("{found}"); // "orders:42": lock, ttl 29999 ms
    ///                      //   holder 3f0c...:1 (exclusive) x1
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "status")]
    #[doc(alias = "describe")]
    pub fn inspect(&self, name: &str) -> Result<crate::Inspection> {
        let key = self.inner.names.map(name.to_owned());
        let mut found = crate::ops::inspect::inspect(&*self.inner.backend, &key)?;
        // The name as the caller gave it (Redisson's `getName()` unmaps).
        found.name = name.to_owned();
        if found.is_held() {
            // A second round trip, best effort: which connections the
            // holders have (by their names). A server that refuses CLIENT
            // LIST, or a store without it, leaves them empty.
            if let Ok(replies) = self.inner.backend.server_command(&["CLIENT", "LIST"]) {
                crate::ops::inspect::attach_connections(&mut found, &replies);
            }
        }
        Ok(found)
    }

    /// The store's name of object `name`: with the client's
    /// [name prefix](crate::ClientBuilder::name_prefix).
    pub(crate) fn map(&self, name: impl Into<String>) -> String {
        self.inner.names.map(name.into())
    }

    /// The object name of the store's name `key` (`key` without this
    /// client's [name prefix](crate::ClientBuilder::name_prefix)).
    pub(crate) fn unmap<'a>(&self, key: &'a str) -> &'a str {
        self.inner.names.unmap(key)
    }

    /// The prefix this client puts before every object name (empty:
    /// none); set with [`ClientBuilder::name_prefix`](crate::ClientBuilder::name_prefix).
    ///
    /// ```
    /// let client = redisync::Client::builder()
    ///     .backend(redisync::MemoryBackend::new())
    ///     .name_prefix("app1:")
    ///     .build()?;
    /// assert_eq!(client.name_prefix(), "app1:");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn name_prefix(&self) -> &str {
        self.inner.names.prefix()
    }

    /// This client's id: the `<uuid>` part of its holder ids
    /// (`<uuid>:<thread number>`).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.id().len(), 36);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "getId")]
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The watchdog timeout: the lease of locks taken without one.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.watchdog_timeout(), std::time::Duration::from_secs(30));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "getLockWatchdogTimeout")]
    pub fn watchdog_timeout(&self) -> Duration {
        self.inner.watchdog_timeout
    }

    /// The fair-lock wait timeout: a fair waiter's queue slot when it waits
    /// without a bound.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.fair_lock_wait_timeout(), std::time::Duration::from_secs(300));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn fair_lock_wait_timeout(&self) -> Duration {
        self.inner.fair_wait_timeout
    }

    /// The backend this client uses.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let backend = client.backend();
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.inner.backend
    }

    /// One `PING` round trip to the store: the time from sending it to
    /// reading `PONG`, on a pooled connection (not counting the wait for
    /// one). With Sentinel, to the current master; on a cluster, to every
    /// master in turn, returning the slowest one's; on a
    /// [`MemoryBackend`](crate::MemoryBackend), the time to take the
    /// store's lock.
    ///
    /// # Errors
    /// The store is unreachable or did not answer within the response
    /// timeout (`Backend`, a connection error), refused `PING` (`Backend`),
    /// or the backend does not support plain commands (see
    /// [`LockBackend::server_command`]).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let round_trip = client.ping()?;
    /// assert!(round_trip < std::time::Duration::from_secs(1));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn ping(&self) -> Result<Duration> {
        crate::health::ping(&*self.inner.backend)
    }

    /// Reads the store's settings (`INFO`, and `CONFIG GET save` and
    /// `min-replicas-to-write`) and reports those that put locks at risk,
    /// each with its severity, why it matters and what to change:
    ///
    /// | finding | severity |
    /// |---|---|
    /// | `maxmemory-policy` `allkeys-*`: lock keys can be evicted | danger |
    /// | `maxmemory-policy` `volatile-*`: keys with a TTL (every held lock) can be evicted | warning |
    /// | no RDB `save`, `appendonly no`, and no replica: a restart loses every lock and fencing counter | danger |
    /// | replicas, but `min-replicas-to-write 0` | warning |
    /// | Redis older than 6.2 (7.0 on a cluster, for sharded pub/sub) | danger |
    /// | a setting that could not be read (`CONFIG` refused by the ACL) | info |
    ///
    /// With Sentinel it checks the current master; on a cluster, every
    /// master. A [`MemoryBackend`](crate::MemoryBackend) has no settings:
    /// its report holds one info finding saying so. Nothing is changed.
    ///
    /// # Errors
    /// The store is unreachable, or the backend does not support plain
    /// commands (see [`LockBackend::server_command`]). A refused `CONFIG`
    /// is no error but an info finding.
    ///
    /// ```no_run
    /// let client = redisync::Client::open("redis://127.0.0.1:6379/")?;
    /// let report = client.check_server()?;
    /// if !report.is_ok() {
    ///     eprintln!("{report}");
    /// }
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn check_server(&self) -> Result<crate::ServerReport> {
        crate::health::check(&*self.inner.backend)
    }

    /// The store, as the primitives' operations take it.
    pub(crate) fn store(&self) -> &dyn LockBackend {
        &*self.inner.backend
    }

    /// How a primitive without local owners or handoffs waits on `channel`
    /// (see [`Waiting::new`](crate::wait::Waiting::new)): it parks at most
    /// the watchdog timeout when an attempt gives no hint.
    pub(crate) fn waiting<'a>(
        &self,
        channel: &'a str,
        wake: crate::pubsub::Wake,
        wait: crate::wait::Wait,
        primitive: crate::telemetry::Primitive,
        name: &'a str,
    ) -> crate::wait::Waiting<'a> {
        crate::wait::Waiting::new(
            channel,
            wake,
            wait,
            self.inner.watchdog_timeout,
            primitive,
            name,
        )
    }

    /// Runs `attempt` until it is done or `waiting` runs out, woken by this
    /// client's subscriber (see [`crate::wait::until_done`]). For waiters
    /// without a seat: nothing is handed over to them.
    pub(crate) fn wait_on<T>(
        &self,
        waiting: crate::wait::Waiting<'_>,
        attempt: impl FnMut() -> Result<crate::wait::Attempt<T>>,
    ) -> Result<Option<T>> {
        crate::wait::until_done(&self.inner.subscriber, waiting, attempt)
            .map(|done| done.and_then(crate::wait::Done::attempted))
    }

    /// Hands `task`, a call on `name` whose outcome is unknown (a release,
    /// an undo), to this client's cleanup worker, which runs it again until
    /// it lands or `give_up_at` (see `cleanup`); `record` tells it apart
    /// from the object's other pending calls, `cause` is why it is pending.
    pub(crate) fn release_later(
        &self,
        name: &str,
        record: &str,
        task: crate::cleanup::Task,
        give_up_at: std::time::Instant,
        cause: &crate::Error,
    ) {
        self.inner
            .cleanup
            .push(name, record, task, give_up_at, false, cause);
    }

    /// Where this client reports what fails in the background.
    pub(crate) fn events(&self) -> &dyn EventHandler {
        &*self.inner.events
    }

    // What the lock, the one primitive with watches, local owners and
    // direct handoffs, asks of its client beyond the calls above.

    /// The watchdog that renews holds taken without a lease.
    pub(crate) fn watchdog(&self) -> &Watchdog {
        &self.inner.watchdog
    }

    /// The lease of a hold the watchdog renews, in ms.
    pub(crate) fn watchdog_ms(&self) -> i64 {
        self.inner.watchdog_ms
    }

    /// How long a waiter parks when an attempt gives no hint (the
    /// watchdog timeout).
    pub(crate) fn park_fallback(&self) -> Duration {
        self.inner.watchdog_timeout
    }

    /// A fair waiter's queue slot when it waits without a bound, in ms.
    pub(crate) fn fair_wait_ms(&self) -> i64 {
        self.inner.fair_wait_ms
    }

    /// Whether a reentrant lock's waiters join its queue in the store (see
    /// `ops::handoff`): not on a Redis Cluster, whose PUBLISH counts only
    /// the receivers on one node (a release could not tell a waiter that
    /// listens elsewhere from one that is gone).
    pub(crate) fn queues_waiters(&self) -> bool {
        self.store().slot_of("redisync").is_none()
    }

    /// How long a hold that a release reserved for a waiter of a reentrant
    /// lock waits for that waiter to take it (see `ops::handoff`), in ms:
    /// two response timeouts (its attempt may be sent twice), 2 s without
    /// one, at most half the watchdog timeout.
    pub(crate) fn claim_window_ms(&self) -> i64 {
        let window = self
            .store()
            .response_timeout()
            .map_or(2_000, |timeout| crate::flavor::saturating_ms(timeout * 2));
        window.min(self.inner.watchdog_ms / 2).max(1)
    }

    /// The pending releases and undos (see `cleanup`).
    pub(crate) fn cleanup(&self) -> &crate::cleanup::Cleanup {
        &self.inner.cleanup
    }

    /// Which thread of this client holds each reentrant lock (see
    /// `local_owner`).
    pub(crate) fn local_owners(&self) -> &crate::local_owner::LocalOwners {
        &self.inner.local_owners
    }

    /// The pub/sub subscriber waiters park on.
    pub(crate) fn subscriber(&self) -> &Subscriber {
        &self.inner.subscriber
    }

    /// The holder id of the calling thread in this client,
    /// `<client uuid>:<thread number>`: the hash field Redis stores for its
    /// holds. On a reentrant lock whose hold passed between threads of this
    /// client with no call to Redis, the two threads swapped fields for
    /// that lock: the thread then holds (and asks) under the other's.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert!(client.current_holder_id().starts_with(client.id()));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn current_holder_id(&self) -> String {
        crate::holder::holder_id(&self.inner.id, crate::holder::current_thread_number())
    }
}
