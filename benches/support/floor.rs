//! The floor: the same scripts run by the `redis` crate alone, and the
//! private servers (replicated pair, cluster) the groups need.

#[allow(unused_imports)]
use crate::*;

/// The `cluster` group (feature `cluster`): the tests' 6-node cluster
/// (`common::cluster::TestCluster`: 3 masters, one replica each), every node
/// pinned to CPU 0 like the other servers, redisync clients on it (one with
/// replica acknowledgement), and the floor pair through the `redis` crate's
/// `ClusterConnection`.
#[cfg(feature = "cluster")]
pub(crate) mod cluster {
    use super::common::cluster::TestCluster;

    /// The cluster floor: `super::Floor::pair`'s two scripts (the release
    /// in its sharded form, `SPUBLISH`, as the library loads it for a
    /// cluster) by EVALSHA through a `ClusterConnection`, which routes both
    /// to the master of `name`'s slot.
    pub(crate) type ClusterFloor = super::Floor<redis::cluster::ClusterConnection>;

    /// On lock `name` (the cluster lock's own name, so the same master;
    /// the two never overlap: each call ends with the lock free).
    pub(crate) fn cluster_floor(cluster: &TestCluster, name: &str) -> ClusterFloor {
        let release = super::with_prelude(include_str!("../../lua/lock_release.lua"))
            .replace("redis.call('publish',", "redis.call('spublish',");
        assert!(release.contains("spublish"), "no sharded publish");
        super::Floor {
            conn: cluster.connection(),
            acquire: redis::Script::new(&super::with_prelude(include_str!(
                "../../lua/lock_acquire.lua"
            ))),
            release: redis::Script::new(&release),
            channel: format!("redisson_lock__channel:{{{name}}}"),
            latch_prefix: format!("redisson_unlock_latch:{{{name}}}:floor"),
            holder: format!("{}:1", uuid::Uuid::new_v4()),
            name: name.to_owned(),
            releases: 0,
        }
    }
}

// ------------------------------------------------------------ replica_ack --

/// A master and one replica of it (disk-RDB sync, once), linked.
pub(crate) fn replicated_pair() -> (TestServer, TestServer) {
    common::start_replicated()
}

// ------------------------------------------------------------------ floor --

/// `script` as the library loads it: after `lua/args_prelude.lua`, the
/// argument checks every script with numbers in ARGV starts with.
pub(crate) fn with_prelude(script: &str) -> String {
    format!("{}{script}", include_str!("../../lua/args_prelude.lua"))
}

/// The lock pair with the `redis` crate alone: the same two scripts the
/// library runs, on one plain connection, with a unique latch key per release
/// (as the library's) so the release really releases.
pub(crate) struct Floor<C = redis::Connection> {
    pub(crate) conn: C,
    pub(crate) acquire: redis::Script,
    pub(crate) release: redis::Script,
    pub(crate) name: String,
    pub(crate) channel: String,
    pub(crate) holder: String,
    pub(crate) latch_prefix: String,
    pub(crate) releases: u64,
}

impl Floor {
    pub(crate) fn new(server: &TestServer) -> Floor {
        let name = unique_name("bench:floor");
        Floor {
            conn: server.connection(),
            acquire: redis::Script::new(&with_prelude(include_str!("../../lua/lock_acquire.lua"))),
            release: redis::Script::new(&with_prelude(include_str!("../../lua/lock_release.lua"))),
            channel: format!("redisson_lock__channel:{{{name}}}"),
            latch_prefix: format!("redisson_unlock_latch:{{{name}}}"),
            holder: format!("{}:1", uuid::Uuid::new_v4()),
            name,
            releases: 0,
        }
    }

    pub(crate) fn ping(&mut self) {
        let pong: String = redis::cmd("PING").query(&mut self.conn).unwrap();
        black_box(pong);
    }
}

impl<C: redis::ConnectionLike> Floor<C> {
    /// Acquire + release by EVALSHA, as the library's pair does, with the
    /// `redis` crate alone (on a plain or a cluster connection).
    pub(crate) fn pair(&mut self) {
        let acquired: Option<i64> = self
            .acquire
            .key(&self.name)
            .arg(LEASE_MS)
            .arg(&self.holder)
            .invoke(&mut self.conn)
            .unwrap();
        assert_eq!(acquired, None, "floor acquire found the lock held");
        self.releases += 1;
        let latch = format!("{}:{}", self.latch_prefix, self.releases);
        let released: Option<i64> = self
            .release
            .key(&self.name)
            .key(&self.channel)
            .key(&latch)
            .arg("0")
            .arg(LEASE_MS)
            .arg(&self.holder)
            .arg(LATCH_MS)
            .invoke(&mut self.conn)
            .unwrap();
        assert_eq!(released, Some(1), "floor release did not release");
        black_box(released);
    }
}

// ------------------------------------------------------------ uncontended --

// -------------------------------------------------------- redisson floor --

use super::redisson_scripts::{REDISSON_LOCK, REDISSON_UNLOCK};

/// The floor a user compares against (issue 33): Redisson's own two lock
/// scripts sent raw by EVALSHA on one plain connection, a fresh unlock
/// latch per release as Redisson's `unlock()` makes one. No windows, no
/// records, no waiter queue: what a Redisson client costs the server.
///
/// Guarded ([`RedissonFloor::guarded`], `floor/redisson_guarded_pair`):
/// the same two scripts with only what exactly-once adds to an uncontended
/// pair. Each starts with the library's own window check
/// (`lua/window_prelude.lua`, one `TIME`); the acquire writes a fresh
/// attempt record (`SET NX PX`) before it takes the lock, and the release
/// takes that record as its latch (it says `taken` until the release
/// writes its outcome over it). No queue, no streak, no argument checks.
pub(crate) struct RedissonFloor {
    conn: redis::Connection,
    lock: redis::Script,
    unlock: redis::Script,
    /// Guarded: the server's clock at a moment of this process's
    /// monotonic clock, the windows' origin (as the library's, never
    /// this machine's wall clock); `None`: no windows.
    server_clock: Option<(std::time::Instant, u128)>,
    name: String,
    channel: String,
    holder: String,
    latch_prefix: String,
    releases: u64,
}

impl RedissonFloor {
    pub(crate) fn new(server: &TestServer) -> RedissonFloor {
        RedissonFloor::open(server, false)
    }

    pub(crate) fn guarded(server: &TestServer) -> RedissonFloor {
        RedissonFloor::open(server, true)
    }

    fn open(server: &TestServer, guarded: bool) -> RedissonFloor {
        let name = unique_name("bench:redisson_floor");
        let (lock, unlock) = if guarded {
            let window = include_str!("../../lua/window_prelude.lua");
            let record = "redis.call('hincrby', KEYS[1], ARGV[2], 1); ";
            let lock = REDISSON_LOCK.replacen(
                record,
                &format!(
                    "if not redis.call('set', KEYS[2], 'taken', 'px', ARGV[3], 'nx') then \
                     return redis.error_reply('ERR the attempt record is there already'); end; {record}"
                ),
                1,
            );
            let latch = "if val ~= false then";
            let unlock =
                REDISSON_UNLOCK.replacen(latch, "if val ~= false and val ~= 'taken' then", 1);
            assert!(
                lock != REDISSON_LOCK && unlock != REDISSON_UNLOCK,
                "the guarded floor's scripts are Redisson's with a record: Redisson's changed"
            );
            (format!("{window}{lock}"), format!("{window}{unlock}"))
        } else {
            (REDISSON_LOCK.to_owned(), REDISSON_UNLOCK.to_owned())
        };
        let mut conn = server.connection();
        let server_clock = guarded.then(|| {
            let (seconds, micros): (u128, u128) = redis::cmd("TIME").query(&mut conn).unwrap();
            (std::time::Instant::now(), seconds * 1000 + micros / 1000)
        });
        RedissonFloor {
            conn,
            lock: redis::Script::new(&lock),
            unlock: redis::Script::new(&unlock),
            server_clock,
            channel: format!("redisson_lock__channel:{{{name}}}"),
            latch_prefix: format!("redisson_unlock_latch:{{{name}}}"),
            holder: format!("{}:1", uuid::Uuid::new_v4()),
            name,
            releases: 0,
        }
    }

    /// `tryLockInnerAsync` + `unlockInnerAsync`, two EVALSHA round trips
    /// (guarded: the acquire's record is the release's latch, and both
    /// have a window ending 5 s from now by the server's clock).
    pub(crate) fn pair(&mut self) {
        self.releases += 1;
        let latch = format!("{}:{}", self.latch_prefix, self.releases);
        let mut lock = self.lock.key(&self.name);
        let mut unlock = self.unlock.key(&self.name);
        unlock
            .key(&self.channel)
            .key(&latch)
            .arg("0")
            .arg(LEASE_MS)
            .arg(&self.holder)
            .arg("publish")
            .arg(LATCH_MS);
        lock.arg(LEASE_MS).arg(&self.holder);
        if let Some((at, server_ms)) = self.server_clock {
            let window_end = (server_ms + at.elapsed().as_millis() + 5_000).to_string();
            lock.key(&latch).arg(LATCH_MS).arg(&window_end);
            unlock.arg(&window_end);
        }
        let acquired: Option<i64> = lock.invoke(&mut self.conn).unwrap();
        assert_eq!(acquired, None, "Redisson floor lock found the lock held");
        let released: Option<i64> = unlock.invoke(&mut self.conn).unwrap();
        assert_eq!(released, Some(1), "Redisson floor unlock did not release");
        black_box(released);
    }
}
