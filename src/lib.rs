//! Distributed locks and synchronizers on Redis for threaded (non-async)
//! Rust, wire-compatible with Java's [Redisson](https://redisson.org): a Rust
//! service and a Java service on the same Redis exclude each other on the same
//! lock name and wake each other's waiters.
//!
//! # Quick start
//!
//! ```
//! use std::time::Duration;
//!
//! // In production: redisync::Client::open("redis://127.0.0.1:6379/")?
//! let client = redisync::Client::builder()
//!     .backend(redisync::MemoryBackend::new())
//!     .build()?;
//!
//! let lock = client.lock("orders:42");
//! {
//!     let _guard = lock.lock()?; // one thread in the whole fleet gets past here
//!     // ... critical section; the watchdog keeps the lease alive ...
//! } // guard dropped: unlocked, waiters woken by pub/sub
//!
//! match lock.try_lock_for(Duration::from_millis(200))? {
//!     Some(guard) => guard.unlock()?,
//!     None => println!("busy"),
//! }
//! # Ok::<(), redisync::Error>(())
//! ```
//!
//! # Primitives
//!
//! - [`Lock`] ([`Client::lock`]): Redisson's `RLock`, reentrant per (client,
//!   thread), non-fair, with a lease watchdog.
//! - Fair lock ([`Client::fair_lock`], a [`Lock`] too): Redisson's
//!   `RFairLock`, first come first served across all clients; an unlock wakes
//!   only the head of the queue.
//! - Spin lock ([`Client::spin_lock`], a [`Lock`] too): Redisson's
//!   `RSpinLock`, the reentrant lock whose waiters sleep with [`Backoff`]
//!   between attempts instead of subscribing (no pub/sub needed).
//! - [`ReadWriteLock`] ([`Client::read_write_lock`]): Redisson's
//!   `RReadWriteLock`, many readers or one writer, both halves [`Lock`]s.
//!
//! - [`Semaphore`] ([`Client::semaphore`]): Redisson's `RSemaphore`, counting
//!   permits with no owner; a release wakes up to as many waiters as it frees.
//! - [`PermitExpirableSemaphore`] ([`Client::permit_expirable_semaphore`]):
//!   Redisson's `RPermitExpirableSemaphore`, permits with an id and a lease,
//!   so a crashed holder's permit comes back (or no lease; several at once
//!   in a [`PermitGuard`]).
//! - [`CountDownLatch`] ([`Client::count_down_latch`]): Redisson's
//!   `RCountDownLatch`; reaching zero wakes every waiter in every client.
//! - [`Barrier`] ([`Client::barrier`]): redisync only (Redisson has none), a
//!   cyclic barrier across processes: `parties` waiters meet, all go on
//!   together, and the next `parties` form the next generation.
//!
//! - Fenced lock ([`Client::fenced_lock`], a [`Lock`] too): Redisson's
//!   `RFencedLock`; every acquisition returns a fencing token
//!   ([`LockGuard::token`]) greater than all earlier ones, so a downstream
//!   store can reject a stale holder. Tokens are at least the Redis
//!   server's clock in µs, so they keep increasing even when Redis loses
//!   the counter, provided the answering server's clock has moved past the
//!   old one's last token (README, fenced lock).
//! - [`MultiLock`]: Redisson's `RedissonMultiLock`, several locks (any kind,
//!   any client or server) taken all or none, without deadlock between
//!   multi-locks that list the same locks in different orders.
//! - [`RedLock`]: Redisson's `RedissonRedLock`, one lock on a majority of
//!   independent Redis masters. Read its
//!   [safety model](RedLock#safety-model) before relying on it.
//!
//! ## Which primitive do I need?
//!
//! | you want | take | Redisson |
//! |---|---|---|
//! | one holder at a time, per name | [`Client::lock`] | `getLock` |
//! | the same, served in arrival order | [`Client::fair_lock`] | `getFairLock` |
//! | the same, and a store that refuses a stale holder's writes | [`Client::fenced_lock`] ([`LockGuard::token`]) | `getFencedLock` |
//! | many readers or one writer | [`Client::read_write_lock`] (`.read_lock()` / `.write_lock()`) | `getReadWriteLock` |
//! | several names at once, all or none | [`MultiLock`] | `getMultiLock` |
//! | one lock that survives the loss of a minority of independent masters | [`RedLock`] (read its safety model) | `getRedLock` |
//! | at most N at a time, released by anyone | [`Client::semaphore`] | `getSemaphore` |
//! | at most N at a time, returned by themselves if a holder dies | [`Client::permit_expirable_semaphore`] | `getPermitExpirableSemaphore` |
//! | wait until N things have happened | [`Client::count_down_latch`] | `getCountDownLatch` |
//! | N threads (any process) meet, then go on together, again and again | [`Client::barrier`] | none (redisync only) |
//! | a lock whose waiters poll instead of subscribing | [`Client::spin_lock`] | `getSpinLock` |
//! | a lock whose guard moves between threads | [`Lock::owned_by`] with a [`LockOwner`] | `lock(threadId)` |
//! | a wait another thread can end | `cancellable(&`[`CancellationToken`]`)` on the handle | `lockInterruptibly` |
//!
//! Locks are held by a thread (their guards are `!Send`, see
//! [`HolderIsTheThread`]) unless taken for a [`LockOwner`]; semaphore
//! permits and latches belong to no one.
//! Handles ([`Lock`], [`Semaphore`], ...) take nothing until you call a
//! method, and a guard that is not kept releases at once: the compiler
//! warns about both (`#[must_use]`), but not about `lock.try_lock()?;`,
//! whose guard is inside an `Option`.
//!
//! # Backends
//!
//! Every atomic operation of every primitive is one Lua script of `lua/`,
//! written once in `ops` (the script, its keys and arguments, how its
//! reply reads). A [`Client`] runs them on its store through the narrow
//! [`LockBackend`] seam: run a script, publish, open a pub/sub connection.
//! - [`RedisBackend`]: an r2d2 pool of `redis` connections to a single
//!   server, a Sentinel-managed master or a Cluster; scripts run with
//!   EVALSHA (loaded on NOSCRIPT).
//! - [`MemoryBackend`]: in-process, same semantics (TTLs, reentrancy, pub/sub).
//!   Two clients on one `MemoryBackend` behave like two processes on one Redis.
//! - A store of your own: implement [`LockBackend`], keeping the
//!   obligations written on the trait (atomic scripts, request windows
//!   with [`request_window_end`], resends, the caller's bound with
//!   [`round_trip_timeout`], pub/sub delivery), with the crate root's items
//!   alone.
//!
//! # TLS and ACL users
//!
//! `redis://user:password@host:port/db` authenticates as a Redis ACL user
//! (docs/deployments.md, Security, lists the commands it needs); the password never
//! appears in `Debug` output, errors or logs. With the `tls` feature,
//! `rediss://` URLs connect over TLS (rustls), and
//! `ClientBuilder::tls_root_certificate` / `tls_client_certificate` trust
//! your own CA and present a client certificate. With Sentinel,
//! `rediss://` sentinel URLs (or those settings) put the sentinels and the
//! master on TLS with the same certificates.
//!
//! # Leases and the watchdog
//!
//! A lock taken without a lease ([`Lock::lock`], [`Lock::try_lock_for`]) gets
//! the watchdog timeout as its lease (30 s by default) and the client renews
//! it every third of that while the guard lives: if the process dies, the
//! lock frees itself within the watchdog timeout. A lock taken with a lease
//! ([`Lock::lock_with_lease`]) is never renewed, unless its holder extends
//! it ([`LockGuard::extend`]). If a renewal finds the lock
//! gone, or cannot reach Redis before the lease runs out,
//! [`LockGuard::is_lost`] turns true and the [`EventHandler`] hears of it.
//!
//! # Waking and fairness
//!
//! Waiters park, they do not poll (a spin lock's excepted: they sleep
//! with [`Backoff`] and retry). Each client has one pub/sub connection and
//! one subscriber thread. A waiter subscribes to the lock's channel, waits for
//! the subscription to be confirmed, retries, and then parks until an unlock
//! message gives it a permit or the holder's TTL runs out. An unlock wakes
//! one waiter per client, not all of them. A message that arrives between a
//! failed attempt and the park is kept as a permit, so it is not lost. A
//! message that is lost anyway costs one retry when the TTL runs out, never a
//! hang. If the pub/sub connection drops, every waiter retries and the
//! subscriber reconnects and resubscribes. Within one client, a thread
//! arriving just after an unlock lets the waiter the unlock woke go first.
//! Across clients [`Lock`] is not fair; the fair lock ([`Client::fair_lock`])
//! is: waiters queue in Redis and each unlock wakes only the head of the
//! queue, on its own channel. Its queue slots are computed from each client's
//! wall clock (as in Redisson), so clients' clocks should agree to within a
//! small fraction of the fair-lock wait timeout. A write unlock of a
//! [`ReadWriteLock`] wakes every waiter, so all waiting readers get in
//! together.
//!
//! # Failure model
//!
//! A lock lives on one Redis master. If that master loses the key (failover
//! to a replica that had not received it, restart without persistence), two
//! holders can coexist: check [`LockGuard::is_lost`] and use fencing
//! ([`Client::fenced_lock`]) where that matters. A holder paused longer than its lease (GC-like stall, SIGSTOP)
//! loses the lock without knowing until its next check. Calls fail with
//! [`Error::Backend`] while Redis is unreachable, and work again once it is
//! back. An unlock whose reply is lost is retried idempotently (Redisson's
//! unlock latch).
//!
//! # Testing your code
//!
//! Build your client on [`MemoryBackend`] in unit tests: no server needed.
// docs.rs (`--cfg docsrs`, nightly): a badge on every item that needs a
// feature ("Available on crate feature `cluster` only"); `doc_cfg` also
// derives them from the items' `#[cfg]`s.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod backend;
mod barrier;
mod cancel;
mod cleanup;
mod client;
mod clock;
mod config;
mod counting;
mod deadline;
mod election;
mod error;
mod event;
mod fast_map;
mod flavor;
mod handle;
mod health;
mod holder;
mod keys;
mod latch;
mod local_owner;
mod lock;
mod multi_lock;
mod names;
mod ops;
mod owned_lock;
mod permit_semaphore;
mod pubsub;
mod rw_lock;
mod semaphore;
mod spell;
mod spin_lock;
mod telemetry;
mod wait;
mod watchdog;

#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub use backend::SentinelConfig;
pub use backend::{
    Arg, Deployment, DumpedKey, DumpedValue, Effect, LockBackend, MemoryBackend, Message,
    PubSubConnection, RedisBackend, RedisOptions, ReplicaAcknowledgement, ReplicaShortfall, Reply,
    Resend, Script, ScriptCall, ServerReply, WINDOW_MARGIN, request_window_end,
};
pub use barrier::Barrier;
pub use cancel::CancellationToken;
pub use client::Client;
pub use config::ClientBuilder;
pub use deadline::{note_round_trip_timeout, round_trip_timeout};
pub use election::{Leader, LeaderElection, LeaderEvent, Leadership, Observer};
pub use error::{Error, MAX_LEASE, Result};
pub use event::{
    ConnectionNameRefusedEvent, EventHandler, LockLostEvent, LoggingEventHandler, NopEventHandler,
    RenewFailedEvent, ReplicaShortfallEvent, ServerClockStepEvent, SubscriberEvent,
    UnlockFailedEvent,
};
pub use health::{Finding, ServerReport, Severity};
pub use holder::{GuardHolder, HolderIsTheThread, LockOwner};
pub use latch::CountDownLatch;
pub use lock::{Lock, LockGuard};
pub use multi_lock::{MultiLock, MultiLockGuard, RedLock, RedLockGuard};
pub use ops::inspect::{
    BarrierState, ElectionInspection, HoldMode, Holder, HolderConnection, Inspection, ObjectKind,
    PermitLease, QueuedWaiter, RwMode,
};
pub use owned_lock::{OwnedLock, OwnedLockGuard};
pub use permit_semaphore::{PermitExpirableSemaphore, PermitGuard, PermitId};
pub use rw_lock::ReadWriteLock;
pub use semaphore::{Semaphore, SemaphorePermit};
pub use spin_lock::Backoff;

/// Not public API: no semver promise, may change in any release.
///
/// The operations below the handles (one function per script of `lua/`,
/// with the key and reply types it takes and returns), for the three
/// users that must reach below the primitives: the `redisync` binary
/// (`src/bin/redisync/`: `force-unlock`, `delete` and `inspect` act on one
/// object without a handle, without blocking or renewing), the integration
/// tests (one atomic step at a time, to pin a script's effect or stage a
/// fault between two steps) and the benches. A program using the library
/// has every item at one path, the crate root; this module adds no item
/// that is also exported there (the inspector's types, `Inspection` and
/// the types of its fields, are the root's).
#[doc(hidden)]
pub mod internal {
    pub use crate::ops::{
        barrier, counter, election, expirable, fair_lock, handoff, latch, lock, once, rw_lock,
        semaphore,
    };

    /// The inspector's read, without its types (the crate root exports
    /// those).
    pub mod inspect {
        pub use crate::ops::inspect::inspect;
    }
}

/// README's Rust examples, compiled (and, where they need no server, run)
/// as doctests, so the front page cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The examples of `docs/deployments.md` (TLS, Sentinel, Cluster, replica
/// acknowledgement), compiled as doctests like README's.
#[cfg(doctest)]
#[doc = include_str!("../docs/deployments.md")]
pub struct DeploymentsDoctests;

/// The examples of `docs/operations.md` (inspect, health), compiled and run
/// as doctests like README's.
#[cfg(doctest)]
#[doc = include_str!("../docs/operations.md")]
pub struct OperationsDoctests;
