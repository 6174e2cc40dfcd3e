//! The Redis commands the scripts of `lua/` call, with Redis 7 semantics:
//! the same replies, the same error texts, the same argument parsing, and
//! the same order of checks (an argument error before a type error where
//! Redis parses first). This file holds the table (name, arity, function),
//! the run's clock and typed access to values; each family of commands
//! has its own file:
//!
//! | file | commands |
//! |---|---|
//! | `keys.rs` | any key: DEL, UNLINK, EXISTS, TYPE, PTTL, TTL, PEXPIRE, EXPIRE, PEXPIREAT, EXPIREAT, PERSIST |
//! | `server.rs` | PUBLISH, PUBSUB NUMSUB, TIME |
//! | `strings.rs` | GET, SET (PX, NX), SETNX, GETSET, GETDEL, MGET, MSET, STRLEN, APPEND, INCR, INCRBY, DECR, DECRBY, INCRBYFLOAT |
//! | `hashes.rs` | HGET, HMGET, HSET, HSETNX, HDEL, HEXISTS, HLEN, HSTRLEN, HKEYS, HVALS, HGETALL, HINCRBY, HINCRBYFLOAT |
//! | `lists.rs` | LPUSH, RPUSH, LPOP, RPOP, LLEN, LINDEX, LRANGE, LREM, LSET, LTRIM |
//! | `sets.rs` | SADD, SREM, SMEMBERS, SCARD, SISMEMBER, SMISMEMBER |
//! | `zsets.rs` | ZADD (NX), ZINCRBY, ZREM, ZCARD, ZSCORE, ZRANK, ZREVRANK, ZCOUNT, ZPOPMIN, ZRANGE, ZREVRANGE, ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZREMRANGEBYSCORE, ZREMRANGEBYRANK |
//! | `tests.rs` | the table's own checks |
//!
//! Only the commands and forms listed in the table are here; anything else
//! is an error reply that says so, so a script that starts using a new
//! command fails loudly instead of silently diverging from Redis.

mod hashes;
mod keys;
mod lists;
mod server;
mod sets;
mod strings;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests;
mod zsets;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use super::keyspace::{
    FastMap, FastSet, Keyspace, Value, format_score, parse_integer, parse_score,
};
use super::pubsub::Subscribers;
use crate::backend::Reply;

/// What a script's commands see: the keyspace, the clock of the run (frozen
/// while a script runs, as Redis does) and the pub/sub connections.
#[derive(Debug)]
pub(super) struct Store {
    pub(super) keys: Keyspace,
    /// The instant expiry is judged against.
    pub(super) now: Instant,
    /// The wall clock `TIME` reports, since the epoch.
    pub(super) wall: Duration,
    pub(super) subscribers: Arc<Mutex<Subscribers>>,
}

impl Store {
    /// An empty keyspace publishing to `subscribers`.
    pub(super) fn new(subscribers: Arc<Mutex<Subscribers>>) -> Self {
        Store {
            keys: Keyspace::default(),
            now: Instant::now(),
            wall: wall_clock(),
            subscribers,
        }
    }

    /// Reads the clocks for the next run and drops what has expired by
    /// then (active expiry: O(expired)).
    pub(super) fn start_run(&mut self) {
        self.now = Instant::now();
        self.wall = wall_clock();
        self.keys.expire_due(self.now);
    }
}

/// The time since the epoch (zero for a clock before it).
fn wall_clock() -> Duration {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const HASH_NOT_INTEGER: &str = "ERR hash value is not an integer";
const OVERFLOW: &str = "ERR increment or decrement would overflow";
const NOT_FLOAT: &str = "ERR value is not a valid float";
const MIN_MAX: &str = "ERR min or max is not a float";
const SYNTAX: &str = "ERR syntax error";
const ARITY: &str = "ERR Wrong number of args calling Redis command from script";

/// A command's reply, or its error reply.
type Outcome = Result<Reply, Reply>;

/// A command: the store and the arguments after its name.
type Command = fn(&mut Store, &[&[u8]]) -> Outcome;

fn error(text: &str) -> Reply {
    Reply::Error(text.to_owned())
}

/// Runs one command (`args[0]` is its name, in any case) on `store`.
pub(super) fn execute(store: &mut Store, args: &[&[u8]]) -> Reply {
    let Some((name, rest)) = args.split_first() else {
        return error("ERR Please specify at least one argument for this redis lib call");
    };
    let mut lower = [0u8; 16];
    let known = name.len() <= lower.len();
    if known {
        for (to, from) in lower.iter_mut().zip(name.iter()) {
            *to = from.to_ascii_lowercase();
        }
    }
    let command = &lower[..if known { name.len() } else { 0 }];
    // (arity as Redis declares it: n = exactly n, -n = at least n, the
    // name included; the command)
    let (arity, run): (i32, Command) = match command {
        b"append" => (3, strings::append),
        b"decr" => (2, |s, a| strings::incr_by(s, a[0], -1)),
        b"decrby" => (3, strings::decrby),
        b"del" => (-2, keys::del),
        b"exists" => (-2, keys::exists),
        b"expire" => (-3, keys::expire),
        b"expireat" => (-3, keys::expireat),
        b"get" => (2, strings::get),
        b"getdel" => (2, strings::getdel),
        b"getset" => (3, strings::getset),
        b"hdel" => (-3, hashes::hdel),
        b"hexists" => (3, hashes::hexists),
        b"hget" => (3, hashes::hget),
        b"hgetall" => (2, hashes::hgetall),
        b"hincrby" => (4, hashes::hincrby),
        b"hincrbyfloat" => (4, hashes::hincrbyfloat),
        b"hkeys" => (2, hashes::hkeys),
        b"hlen" => (2, hashes::hlen),
        b"hmget" => (-3, hashes::hmget),
        b"hset" => (-4, hashes::hset),
        b"hsetnx" => (4, hashes::hsetnx),
        b"hstrlen" => (3, hashes::hstrlen),
        b"hvals" => (2, hashes::hvals),
        b"incr" => (2, |s, a| strings::incr_by(s, a[0], 1)),
        b"incrby" => (3, strings::incrby),
        b"incrbyfloat" => (3, strings::incrbyfloat),
        b"lindex" => (3, lists::lindex),
        b"llen" => (2, lists::llen),
        b"lpop" => (-2, lists::lpop),
        b"lpush" => (-3, lists::lpush),
        b"lrange" => (4, lists::lrange),
        b"lrem" => (4, lists::lrem),
        b"lset" => (4, lists::lset),
        b"ltrim" => (4, lists::ltrim),
        b"mget" => (-2, strings::mget),
        b"mset" => (-3, strings::mset),
        b"persist" => (2, keys::persist),
        b"pexpire" => (-3, keys::pexpire),
        b"pexpireat" => (-3, keys::pexpireat),
        b"pttl" => (2, keys::pttl),
        b"publish" => (3, server::publish),
        b"pubsub" => (-2, server::pubsub),
        b"rpop" => (-2, lists::rpop),
        b"rpush" => (-3, lists::rpush),
        b"sadd" => (-3, sets::sadd),
        b"scard" => (2, sets::scard),
        b"set" => (-3, strings::set),
        b"setnx" => (3, strings::setnx),
        b"sismember" => (3, sets::sismember),
        b"smembers" => (2, sets::smembers),
        b"smismember" => (-3, sets::smismember),
        b"srem" => (-3, sets::srem),
        b"strlen" => (2, strings::strlen),
        b"time" => (1, server::time),
        b"ttl" => (2, keys::ttl),
        b"type" => (2, keys::type_of),
        b"unlink" => (-2, keys::del),
        b"zadd" => (-4, zsets::zadd),
        b"zcard" => (2, zsets::zcard),
        b"zcount" => (4, zsets::zcount),
        b"zincrby" => (4, zsets::zincrby),
        b"zpopmin" => (2, zsets::zpopmin),
        b"zrange" => (-4, zsets::zrange),
        b"zrangebyscore" => (-4, zsets::zrangebyscore),
        b"zrank" => (3, zsets::zrank),
        b"zrem" => (-3, zsets::zrem),
        b"zremrangebyrank" => (4, zsets::zremrangebyrank),
        b"zremrangebyscore" => (4, zsets::zremrangebyscore),
        b"zrevrange" => (-4, zsets::zrevrange),
        b"zrevrangebyscore" => (-4, zsets::zrevrangebyscore),
        b"zrevrank" => (3, zsets::zrevrank),
        b"zscore" => (3, zsets::zscore),
        _ => {
            return Reply::Error(format!(
                "ERR unknown command '{}' (MemoryBackend implements the basic key, string, hash, list, set and sorted-set commands, not this one)",
                String::from_utf8_lossy(name)
            ));
        }
    };
    let given = i32::try_from(args.len()).unwrap_or(i32::MAX);
    if (arity > 0 && given != arity) || (arity < 0 && given < -arity) {
        return error(ARITY);
    }
    run(store, rest).unwrap_or_else(|reply| reply)
}

// ---- Typed access ----

/// The live value at `key`, `Ok(None)` when absent, `Err(WRONGTYPE)` when
/// it is not what `pick` wants.
fn typed<'s, T>(
    store: &'s mut Store,
    key: &[u8],
    pick: fn(&mut Value) -> Option<&mut T>,
) -> Result<Option<&'s mut T>, Reply> {
    match store.keys.live(key, store.now) {
        None => Ok(None),
        Some(entry) => pick(&mut entry.value)
            .map(Some)
            .ok_or_else(|| error(WRONGTYPE)),
    }
}

/// The value at `key` as `pick` wants it, created empty when absent. A
/// fresh container a command leaves empty must be dropped with
/// [`Keyspace::drop_if_empty`].
fn typed_or_insert<'s, T>(
    store: &'s mut Store,
    key: &[u8],
    empty: fn() -> Value,
    pick: fn(&mut Value) -> Option<&mut T>,
) -> Result<&'s mut T, Reply> {
    let entry = store.keys.live_or_insert(key, store.now, empty);
    pick(&mut entry.value).ok_or_else(|| error(WRONGTYPE))
}

fn as_str(value: &mut Value) -> Option<&mut Vec<u8>> {
    match value {
        Value::Str(bytes) => Some(bytes),
        _ => None,
    }
}

fn as_hash(value: &mut Value) -> Option<&mut FastMap<Vec<u8>, Vec<u8>>> {
    match value {
        Value::Hash(fields) => Some(fields),
        _ => None,
    }
}

fn as_list(value: &mut Value) -> Option<&mut VecDeque<Vec<u8>>> {
    match value {
        Value::List(items) => Some(items),
        _ => None,
    }
}

fn as_zset(value: &mut Value) -> Option<&mut FastMap<Vec<u8>, f64>> {
    match value {
        Value::ZSet(members) => Some(members),
        _ => None,
    }
}

fn new_hash() -> Value {
    Value::Hash(FastMap::default())
}

fn new_list() -> Value {
    Value::List(VecDeque::new())
}

fn new_zset() -> Value {
    Value::ZSet(FastMap::default())
}

fn integer_arg(arg: &[u8]) -> Result<i64, Reply> {
    parse_integer(arg).ok_or_else(|| error(NOT_INTEGER))
}

fn count(n: usize) -> Reply {
    Reply::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

fn bulk(bytes: &[u8]) -> Reply {
    Reply::Bulk(bytes.to_vec())
}

fn ok() -> Reply {
    Reply::Status("OK".to_owned())
}

/// `now + ms` as a deadline; `None` if the instant overflows.
fn deadline(now: Instant, ms: i64) -> Option<Instant> {
    now.checked_add(Duration::from_millis(u64::try_from(ms).ok()?))
}

/// Whether an expiry of `ms` from the wall clock passes what Redis accepts
/// (`when > LLONG_MAX - basetime`).
fn expiry_overflows(store: &Store, ms: i64) -> bool {
    let base = i64::try_from(store.wall.as_millis()).unwrap_or(i64::MAX);
    ms > i64::MAX - base
}
