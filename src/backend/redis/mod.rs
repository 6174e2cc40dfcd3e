//! [`RedisBackend`]: the [`LockBackend`] on a real Redis server, its
//! fields and the trait's methods; every other concern has a file of its own:
//!
//! | file | what lives there |
//! |---|---|
//! | `open.rs` | the constructors, one per deployment (a server, a Sentinel group, a cluster), and the pool they share |
//! | `checkout.rs` | which pooled connection a call gets: checkout, idle validation, suspect connections |
//! | `run.rs` | the run path: one request on a checked connection, sent again when its [`Resend`] allows |
//! | `evalsha.rs` | `EVALSHA` written into one buffer, the script loaded on `NOSCRIPT` |
//! | `replication.rs` | replica acknowledgement: `WAIT` after a change, a shortfall by policy |
//! | `pool.rs` | where connections go (a server, a Sentinel group's master, a cluster), what one is, r2d2's manager |
//! | `connect.rs` | one connection opened within a bound |
//! | `errors.rs` | the `redis` crate's errors and replies to ours |
//! | `pubsub.rs` | the pub/sub connection of a session |
//! | `naming.rs` | `CLIENT SETNAME` |
//! | `options.rs` | [`RedisOptions`] |
//! | `deployment.rs` | [`Deployment`] |
//! | `tls.rs` | TLS (feature `tls`) |
//! | `sentinel.rs` | Sentinel (feature `sentinel`) |
//! | `cluster/` | Redis Cluster (feature `cluster`) |
//!
//! Commands go through an r2d2 pool of plain connections; every operation is
//! exactly one Lua script. Pub/sub gets a dedicated connection per session,
//! outside the pool, because a subscribed connection cannot run other
//! commands.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use self::pool::{Manager, Target};
use self::pubsub::RedisPubSub;
use super::{LockBackend, PubSubConnection, Reply, Resend, ScriptCall, ServerReply};
use crate::Result;

mod checkout;
#[cfg(feature = "cluster")]
mod cluster;
mod connect;
mod deployment;
mod errors;
mod evalsha;
pub(crate) mod naming;
mod open;
mod options;
mod pool;
mod pubsub;
mod replication;
mod run;
#[cfg(feature = "sentinel")]
mod sentinel;
mod tls;

pub use self::deployment::Deployment;
pub use self::options::RedisOptions;
pub use self::replication::{ReplicaAcknowledgement, ReplicaShortfall};
#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub use self::sentinel::SentinelConfig;

/// The [`LockBackend`] on a Redis server, reached through a connection pool.
///
/// Created by [`RedisBackend::open`] (or [`Client::open`](crate::Client::open),
/// which uses it). Cheap to share: [`Client`](crate::Client) holds it behind
/// an `Arc`.
///
/// ```no_run
/// let backend = redisync::RedisBackend::open("redis://127.0.0.1:6379/")?;
/// let client = redisync::Client::builder().backend(backend).build()?;
/// # Ok::<(), redisync::Error>(())
/// ```
pub struct RedisBackend {
    pool: r2d2::Pool<Manager>,
    target: Target,
    /// Set when a call found the server unreachable, cleared by the next
    /// call that reaches it. While set, a call without an idle pooled
    /// connection asks the server directly instead of waiting the pool's
    /// whole connection timeout for a server that refuses connections.
    unreachable: AtomicBool,
    /// When a call last found a connection the server had closed, in
    /// nanoseconds since `created` (0: never). Every pooled connection last
    /// used before then is checked with a PING before it carries a script:
    /// the fault that closed one (a restart, `CLIENT KILL`) likely closed
    /// them all.
    suspect_since: AtomicU64,
    created: Instant,
    options: RedisOptions,
    /// The URL without credentials, for messages.
    address: String,
    /// The server's clock, as the pool's connections read it.
    clock: Arc<crate::clock::ServerClock>,
    /// Each script's SHA1, computed once.
    loaded: evalsha::Loaded,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("address", &self.address)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// The name of this backend's connections in `CLIENT LIST` (`CLIENT
    /// SETNAME`): `redisync:<client uuid>` when a [`Client`](crate::Client)
    /// built from a URL or deployment opened it (the uuid is
    /// [`Client::id`](crate::Client::id), the first half of its holder ids),
    /// `redisync:backend:<uuid>` when you opened it yourself (then it may
    /// serve several clients: log this name next to their ids to map them).
    ///
    /// ```no_run
    /// let backend = redisync::RedisBackend::open("redis://127.0.0.1:6379/")?;
    /// assert!(backend.connection_name().starts_with("redisync:backend:"));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn connection_name(&self) -> &str {
        self.options
            .connection_name
            .as_ref()
            .map_or("", |name| name.name())
    }

    /// The server's address, without credentials.
    ///
    /// ```no_run
    /// let backend = redisync::RedisBackend::open("redis://:secret@127.0.0.1:6379/")?;
    /// assert_eq!(backend.address(), "127.0.0.1:6379/0");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl LockBackend for RedisBackend {
    fn run_script(&self, call: &ScriptCall<'_>) -> Result<Reply> {
        self.run_call(call)
    }

    fn response_timeout(&self) -> Option<Duration> {
        Some(self.options.response_timeout)
    }

    fn server_now_ms(&self) -> Option<i64> {
        // A cluster's nodes each have their own clock (see `cluster::routing`).
        if self.target.is_cluster() {
            return None;
        }
        self.clock.now_ms()
    }

    fn publish(&self, channel: &str, payload: &str) -> Result<()> {
        // On a cluster, sharded: the waiters SSUBSCRIBE (see `with_pubsub`).
        let command = if self.sharded() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        };
        let mut cmd = redis::cmd(command);
        cmd.arg(channel).arg(payload);
        // A message sent twice wakes a waiter twice: harmless.
        self.round_trip(command, Resend::Harmless, |conn, _| cmd.query::<i64>(conn))
            .map(drop)
    }

    fn with_pubsub(
        &self,
        session: &mut dyn FnMut(&mut dyn PubSubConnection) -> Result<()>,
    ) -> Result<()> {
        // Through the manager: with Sentinel, to the current master.
        let manager = Manager {
            target: self.target.clone(),
            options: self.options.clone(),
            clock: Arc::clone(&self.clock),
        };
        #[cfg(feature = "cluster")]
        if let Target::Cluster(target) = &self.target {
            let mut pubsub = self::cluster::ClusterPubSub::new(target, &self.address)?;
            return session(&mut pubsub);
        }
        let (mut conn, epoch) = manager.connect_single().map_err(|err| {
            self.redis_error(
                "opening the pub/sub connection",
                err,
                self.options.connection_timeout,
            )
        })?;
        let mut pubsub = RedisPubSub {
            backend: self,
            pubsub: conn.as_pubsub(),
            read_timeout: None,
            epoch,
        };
        session(&mut pubsub)
    }

    fn server_command(&self, args: &[&str]) -> Result<Vec<ServerReply>> {
        self.plain_command(args)
    }

    fn slot_of(&self, key: &str) -> Option<u16> {
        #[cfg(feature = "cluster")]
        if let Target::Cluster(_) = &self.target {
            return Some(self::cluster::slot(key.as_bytes()));
        }
        let _ = key;
        None
    }
}
