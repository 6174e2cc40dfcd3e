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
pub(crate) struct RedissonFloor {
    conn: redis::Connection,
    lock: redis::Script,
    unlock: redis::Script,
    name: String,
    channel: String,
    holder: String,
    latch_prefix: String,
    releases: u64,
}

impl RedissonFloor {
    pub(crate) fn new(server: &TestServer) -> RedissonFloor {
        let name = unique_name("bench:redisson_floor");
        RedissonFloor {
            conn: server.connection(),
            lock: redis::Script::new(REDISSON_LOCK),
            unlock: redis::Script::new(REDISSON_UNLOCK),
            channel: format!("redisson_lock__channel:{{{name}}}"),
            latch_prefix: format!("redisson_unlock_latch:{{{name}}}"),
            holder: format!("{}:1", uuid::Uuid::new_v4()),
            name,
            releases: 0,
        }
    }

    /// `tryLockInnerAsync` + `unlockInnerAsync`, two EVALSHA round trips.
    pub(crate) fn pair(&mut self) {
        let acquired: Option<i64> = self
            .lock
            .key(&self.name)
            .arg(LEASE_MS)
            .arg(&self.holder)
            .invoke(&mut self.conn)
            .unwrap();
        assert_eq!(acquired, None, "Redisson floor lock found the lock held");
        self.releases += 1;
        let latch = format!("{}:{}", self.latch_prefix, self.releases);
        let released: Option<i64> = self
            .unlock
            .key(&self.name)
            .key(&self.channel)
            .key(&latch)
            .arg("0")
            .arg(LEASE_MS)
            .arg(&self.holder)
            .arg("publish")
            .arg(LATCH_MS)
            .invoke(&mut self.conn)
            .unwrap();
        assert_eq!(released, Some(1), "Redisson floor unlock did not release");
        black_box(released);
    }
}

// ------------------------------------------------ guarded redisson floor --

/// Redisson's lock script with what exactly-once adds to an uncontended
/// acquire and nothing else (`floor/redisson_guarded_pair`, issue 33): run
/// after `lua/window_prelude.lua` (the window's `TIME`), it writes the
/// attempt's record (`KEYS[2]`, `SET NX PX ARGV[3]`) before it takes the
/// lock. No queue, no streak, no argument checks, no busy record.
const GUARDED_LOCK: &str = "\
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
if not redis.call('set', KEYS[2], 'taken', 'px', ARGV[3], 'nx') then \
return redis.error_reply('ERR the attempt record is there already'); \
end; \
redis.call('hincrby', KEYS[1], ARGV[2], 1); \
redis.call('pexpire', KEYS[1], ARGV[1]); \
return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// Redisson's unlock script with what exactly-once adds to a release, run
/// after `lua/window_prelude.lua`: its latch is the acquire's record
/// (`KEYS[3]`), which still says `taken` until the release writes its
/// outcome there.
const GUARDED_UNLOCK: &str = "\
local val = redis.call('get', KEYS[3]); \
if val ~= false and val ~= 'taken' then return tonumber(val); end; \
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
if (counter > 0) then \
redis.call('pexpire', KEYS[1], ARGV[2]); \
redis.call('set', KEYS[3], 0, 'px', ARGV[5]); \
return 0; \
else \
redis.call('del', KEYS[1]); \
redis.call(ARGV[4], KEYS[2], ARGV[1]); \
redis.call('set', KEYS[3], 1, 'px', ARGV[5]); \
return 1; \
end;";

/// Redisson's two scripts with only what exactly-once needs on an
/// uncontended pair (issue 33): each checks its window first (the
/// library's own `lua/window_prelude.lua`, one `TIME`), the acquire writes
/// a fresh attempt record (`SET NX PX`) and the release writes its outcome
/// over it as its latch. What is left between this and the library's pair
/// is the rest: the waiter queue, the streak that gives Redisson its turn,
/// the argument checks, the client.
pub(crate) struct GuardedRedissonFloor {
    conn: redis::Connection,
    lock: redis::Script,
    unlock: redis::Script,
    name: String,
    channel: String,
    holder: String,
    record_prefix: String,
    attempts: u64,
}

impl GuardedRedissonFloor {
    pub(crate) fn new(server: &TestServer) -> GuardedRedissonFloor {
        let name = unique_name("bench:guarded_floor");
        let window = include_str!("../../lua/window_prelude.lua");
        GuardedRedissonFloor {
            conn: server.connection(),
            lock: redis::Script::new(&format!("{window}{GUARDED_LOCK}")),
            unlock: redis::Script::new(&format!("{window}{GUARDED_UNLOCK}")),
            channel: format!("redisson_lock__channel:{{{name}}}"),
            record_prefix: format!("{{{name}}}:redisync_attempt"),
            holder: format!("{}:1", uuid::Uuid::new_v4()),
            name,
            attempts: 0,
        }
    }

    /// The two scripts, each with a window ending a few seconds from now
    /// (this machine's clock is the server's).
    pub(crate) fn pair(&mut self) {
        let window_end = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            + 5_000;
        self.attempts += 1;
        let record = format!("{}:{}", self.record_prefix, self.attempts);
        let acquired: Option<i64> = self
            .lock
            .key(&self.name)
            .key(&record)
            .arg(LEASE_MS)
            .arg(&self.holder)
            .arg(LATCH_MS)
            .arg(window_end.to_string())
            .invoke(&mut self.conn)
            .unwrap();
        assert_eq!(acquired, None, "guarded floor lock found the lock held");
        let released: Option<i64> = self
            .unlock
            .key(&self.name)
            .key(&self.channel)
            .key(&record)
            .arg("0")
            .arg(LEASE_MS)
            .arg(&self.holder)
            .arg("publish")
            .arg(LATCH_MS)
            .arg(window_end.to_string())
            .invoke(&mut self.conn)
            .unwrap();
        assert_eq!(released, Some(1), "guarded floor unlock did not release");
        black_box(released);
    }
}
