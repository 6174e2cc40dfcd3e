//! The Redis commands the scripts of `lua/` call, with Redis 7 semantics:
//! the same replies, the same error texts, the same argument parsing, and
//! the same order of checks (an argument error before a type error where
//! Redis parses first).
//!
//! Only the commands and forms the scripts use are here; anything else is
//! an error reply that says so, so a script that starts using a new
//! command fails loudly instead of silently diverging from Redis.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use super::keyspace::{FastMap, Keyspace, Value, format_score, parse_integer, parse_score};
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
        b"decr" => (2, |s, a| incr_by(s, a[0], -1)),
        b"decrby" => (3, decrby),
        b"del" => (-2, del),
        b"exists" => (-2, exists),
        b"get" => (2, get),
        b"hdel" => (-3, hdel),
        b"hexists" => (3, hexists),
        b"hget" => (3, hget),
        b"hincrby" => (4, hincrby),
        b"hkeys" => (2, hkeys),
        b"hlen" => (2, hlen),
        b"hset" => (-4, hset),
        b"incr" => (2, |s, a| incr_by(s, a[0], 1)),
        b"incrby" => (3, incrby),
        b"lindex" => (3, lindex),
        b"lpop" => (-2, lpop),
        b"lrange" => (4, lrange),
        b"lrem" => (4, lrem),
        b"pexpire" => (-3, pexpire),
        b"pttl" => (2, pttl),
        b"publish" => (3, publish),
        b"pubsub" => (-2, pubsub),
        b"rpush" => (-3, rpush),
        b"set" => (-3, set),
        b"time" => (1, time),
        b"type" => (2, type_of),
        b"zadd" => (-4, zadd),
        b"zcard" => (2, zcard),
        b"zincrby" => (4, zincrby),
        b"zrange" => (-4, zrange),
        b"zrangebyscore" => (-4, zrangebyscore),
        b"zrem" => (-3, zrem),
        b"zscore" => (3, zscore),
        _ => {
            return Reply::Error(format!(
                "ERR unknown command '{}' (MemoryBackend implements only the commands redisync's scripts use)",
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

// ---- Keys ----

fn del(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let mut deleted = 0;
    for key in args {
        if store.keys.exists(key, store.now) {
            store.keys.remove(key);
            deleted += 1;
        }
    }
    Ok(count(deleted))
}

fn exists(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let now = store.now;
    Ok(count(
        args.iter()
            .filter(|key| store.keys.exists(key, now))
            .count(),
    ))
}

fn pttl(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let now = store.now;
    Ok(Reply::Int(match store.keys.live(args[0], now) {
        None => -2,
        Some(entry) => entry.expires_at().map_or(-1, |at| {
            i64::try_from(at.saturating_duration_since(now).as_millis()).unwrap_or(i64::MAX)
        }),
    }))
}

/// TYPE: a status reply (`+hash`, which Lua sees as `{ok='hash'}`), `none`
/// when absent.
fn type_of(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let name = match store.keys.live(args[0], store.now) {
        None => "none",
        Some(entry) => match entry.value {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::ZSet(_) => "zset",
        },
    };
    Ok(Reply::Status(name.to_owned()))
}

fn pexpire(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let ms = integer_arg(args[1])?;
    if expiry_overflows(store, ms) {
        return Err(error("ERR invalid expire time in 'pexpire' command"));
    }
    if let Some(option) = args.get(2) {
        // NX, XX, GT and LT: no script uses them.
        return Err(Reply::Error(format!(
            "ERR Unsupported option {} (MemoryBackend implements PEXPIRE key milliseconds only)",
            String::from_utf8_lossy(option)
        )));
    }
    let key = args[0];
    if !store.keys.exists(key, store.now) {
        return Ok(Reply::Int(0));
    }
    if ms <= 0 {
        // A deadline already past deletes the key, as Redis does.
        store.keys.remove(key);
    } else {
        let at = deadline(store.now, ms);
        store.keys.set_expiry(key, at);
    }
    Ok(Reply::Int(1))
}

fn publish(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let channel = String::from_utf8_lossy(args[0]);
    let payload = String::from_utf8_lossy(args[1]);
    Ok(count(store.subscribers.lock().publish(&channel, &payload)))
}

/// `PUBSUB NUMSUB channel...` (the only form a script uses): each channel
/// and its count of subscribed connections.
fn pubsub(store: &mut Store, args: &[&[u8]]) -> Outcome {
    if !args[0].eq_ignore_ascii_case(b"numsub") {
        return Err(error(
            "ERR unknown PUBSUB subcommand (MemoryBackend implements only NUMSUB)",
        ));
    }
    let subscribers = store.subscribers.lock();
    let mut reply = Vec::with_capacity(2 * (args.len() - 1));
    for channel in &args[1..] {
        reply.push(Reply::Bulk(channel.to_vec()));
        reply.push(count(subscribers.numsub(&String::from_utf8_lossy(channel))));
    }
    Ok(Reply::Array(reply))
}

fn time(store: &mut Store, _: &[&[u8]]) -> Outcome {
    Ok(Reply::Array(vec![
        Reply::Bulk(store.wall.as_secs().to_string().into_bytes()),
        Reply::Bulk(store.wall.subsec_micros().to_string().into_bytes()),
    ]))
}

// ---- Strings ----

fn get(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(typed(store, args[0], as_str)?.map_or(Reply::Nil, |value| bulk(value)))
}

fn set(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let mut expires_at = None;
    let mut only_if_absent = false;
    let mut options = args[2..].iter();
    while let Some(option) = options.next() {
        if option.eq_ignore_ascii_case(b"px") {
            let ms = integer_arg(options.next().ok_or_else(|| error(SYNTAX))?)?;
            if ms <= 0 || expiry_overflows(store, ms) {
                return Err(error("ERR invalid expire time in 'set' command"));
            }
            expires_at = deadline(store.now, ms);
        } else if option.eq_ignore_ascii_case(b"nx") {
            only_if_absent = true;
        } else {
            // EX, XX, KEEPTTL, GET...: no script uses them.
            return Err(error(SYNTAX));
        }
    }
    // NX: a key that exists (of any type) is left alone; the reply is nil.
    if only_if_absent && store.keys.exists(args[0], store.now) {
        return Ok(Reply::Nil);
    }
    store
        .keys
        .insert(args[0], Value::Str(args[1].to_vec()), expires_at);
    Ok(ok())
}

fn incrby(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let by = integer_arg(args[1])?;
    incr_by(store, args[0], by)
}

fn decrby(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let by = integer_arg(args[1])?;
    let by = by
        .checked_neg()
        .ok_or_else(|| error("ERR decrement would overflow"))?;
    incr_by(store, args[0], by)
}

/// INCRBY: the string at `key` (absent = 0) plus `by`, stored as decimal
/// text; the key keeps its expiry.
fn incr_by(store: &mut Store, key: &[u8], by: i64) -> Outcome {
    let now = store.now;
    match store.keys.live(key, now) {
        None => {
            store
                .keys
                .insert(key, Value::Str(by.to_string().into_bytes()), None);
            Ok(Reply::Int(by))
        }
        Some(entry) => {
            let value = as_str(&mut entry.value).ok_or_else(|| error(WRONGTYPE))?;
            let old = parse_integer(value).ok_or_else(|| error(NOT_INTEGER))?;
            let new = old.checked_add(by).ok_or_else(|| error(OVERFLOW))?;
            *value = new.to_string().into_bytes();
            Ok(Reply::Int(new))
        }
    }
}

// ---- Hashes ----

fn hget(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(typed(store, args[0], as_hash)?
        .and_then(|fields| fields.get(args[1]))
        .map_or(Reply::Nil, |value| bulk(value)))
}

fn hexists(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let found = typed(store, args[0], as_hash)?.is_some_and(|fields| fields.contains_key(args[1]));
    Ok(Reply::Int(i64::from(found)))
}

fn hset(store: &mut Store, args: &[&[u8]]) -> Outcome {
    if args.len().is_multiple_of(2) {
        return Err(error("ERR wrong number of arguments for 'hset' command"));
    }
    let fields = typed_or_insert(store, args[0], new_hash, as_hash)?;
    let mut created = 0;
    for pair in args[1..].chunks_exact(2) {
        if fields.insert(pair[0].to_vec(), pair[1].to_vec()).is_none() {
            created += 1;
        }
    }
    Ok(count(created))
}

fn hdel(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let Some(fields) = typed(store, args[0], as_hash)? else {
        return Ok(Reply::Int(0));
    };
    let deleted = args[1..]
        .iter()
        .filter(|field| fields.remove(**field).is_some())
        .count();
    store.keys.drop_if_empty(args[0]);
    Ok(count(deleted))
}

fn hlen(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(count(
        typed(store, args[0], as_hash)?.map_or(0, |fields| fields.len()),
    ))
}

fn hkeys(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let fields = typed(store, args[0], as_hash)?;
    let mut keys: Vec<&Vec<u8>> = fields
        .map(|fields| fields.keys().collect())
        .unwrap_or_default();
    // A HashMap has no order; Redis' is insertion order. Sorted at least
    // makes a run reproducible.
    keys.sort();
    Ok(Reply::Array(
        keys.into_iter().map(|key| bulk(key)).collect(),
    ))
}

fn hincrby(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let by = integer_arg(args[2])?;
    let key = args[0];
    let fields = typed_or_insert(store, key, new_hash, as_hash)?;
    let outcome = match fields.get_mut(args[1]) {
        None => {
            fields.insert(args[1].to_vec(), by.to_string().into_bytes());
            Ok(Reply::Int(by))
        }
        Some(value) => parse_integer(value)
            .ok_or_else(|| error(HASH_NOT_INTEGER))
            .and_then(|old| old.checked_add(by).ok_or_else(|| error(OVERFLOW)))
            .map(|new| {
                *value = new.to_string().into_bytes();
                Reply::Int(new)
            }),
    };
    store.keys.drop_if_empty(key);
    outcome
}

// ---- Lists ----

/// The position of `index` (negative: from the end) in a list of `len`.
fn list_position(len: usize, index: i64) -> Option<usize> {
    let len = i64::try_from(len).ok()?;
    let index = if index < 0 {
        index.checked_add(len)?
    } else {
        index
    };
    if (0..len).contains(&index) {
        usize::try_from(index).ok()
    } else {
        None
    }
}

/// `start..=stop` (negative: from the end) clamped to a list of `len`, as
/// LRANGE and ZRANGE read it; `None` when empty.
fn range(len: usize, start: i64, stop: i64) -> Option<(usize, usize)> {
    let len = i64::try_from(len).ok()?;
    let start = if start < 0 {
        start.saturating_add(len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        stop.saturating_add(len)
    } else {
        stop
    };
    if start > stop || start >= len {
        return None;
    }
    let stop = stop.min(len - 1);
    Some((usize::try_from(start).ok()?, usize::try_from(stop).ok()?))
}

fn lindex(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let Some(items) = typed(store, args[0], as_list)? else {
        return Ok(Reply::Nil);
    };
    let index = integer_arg(args[1])?;
    Ok(list_position(items.len(), index)
        .and_then(|at| items.get(at))
        .map_or(Reply::Nil, |item| bulk(item)))
}

fn lpop(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let wanted = match args.get(1) {
        None => None,
        Some(arg) => Some(
            usize::try_from(integer_arg(arg)?)
                .map_err(|_| error("ERR value is out of range, must be positive"))?,
        ),
    };
    if args.len() > 2 {
        return Err(error(SYNTAX));
    }
    let key = args[0];
    let Some(items) = typed(store, key, as_list)? else {
        return Ok(Reply::Nil);
    };
    let reply = match wanted {
        None => items.pop_front().map_or(Reply::Nil, Reply::Bulk),
        Some(n) => {
            let n = n.min(items.len());
            Reply::Array(items.drain(..n).map(Reply::Bulk).collect())
        }
    };
    store.keys.drop_if_empty(key);
    Ok(reply)
}

fn rpush(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let items = typed_or_insert(store, args[0], new_list, as_list)?;
    items.extend(args[1..].iter().map(|item| item.to_vec()));
    Ok(count(items.len()))
}

fn lrange(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let start = integer_arg(args[1])?;
    let stop = integer_arg(args[2])?;
    let Some(items) = typed(store, args[0], as_list)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    Ok(Reply::Array(match range(items.len(), start, stop) {
        None => Vec::new(),
        Some((from, to)) => items.range(from..=to).map(|item| bulk(item)).collect(),
    }))
}

fn lrem(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let limit = integer_arg(args[1])?;
    let key = args[0];
    let Some(items) = typed(store, key, as_list)? else {
        return Ok(Reply::Int(0));
    };
    let wanted = args[2];
    let most = if limit == 0 {
        usize::MAX
    } else {
        usize::try_from(limit.unsigned_abs()).unwrap_or(usize::MAX)
    };
    let mut removed = 0;
    if limit >= 0 {
        let mut i = 0;
        while i < items.len() && removed < most {
            if items[i] == wanted {
                items.remove(i);
                removed += 1;
            } else {
                i += 1;
            }
        }
    } else {
        let mut i = items.len();
        while i > 0 && removed < most {
            i -= 1;
            if items[i] == wanted {
                items.remove(i);
                removed += 1;
            }
        }
    }
    store.keys.drop_if_empty(key);
    Ok(count(removed))
}

// ---- Sorted sets ----

fn score_arg(arg: &[u8]) -> Result<f64, Reply> {
    parse_score(arg).ok_or_else(|| error(NOT_FLOAT))
}

fn score_reply(score: f64) -> Reply {
    Reply::Bulk(format_score(score).into_bytes())
}

/// The members in Redis' order: by score, then by member bytes.
fn ordered(members: &FastMap<Vec<u8>, f64>) -> Vec<(&[u8], f64)> {
    let mut sorted: Vec<(&[u8], f64)> = members
        .iter()
        .map(|(member, score)| (member.as_slice(), *score))
        .collect();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    sorted
}

fn with_scores(members: &[(&[u8], f64)], scores: bool) -> Reply {
    let mut items = Vec::with_capacity(members.len() * if scores { 2 } else { 1 });
    for (member, score) in members {
        items.push(bulk(member));
        if scores {
            items.push(score_reply(*score));
        }
    }
    Reply::Array(items)
}

fn zadd(store: &mut Store, args: &[&[u8]]) -> Outcome {
    // NX (only add new members) is the one flag a script uses.
    let only_new = args
        .get(1)
        .is_some_and(|flag| flag.eq_ignore_ascii_case(b"nx"));
    let pairs = &args[if only_new { 2 } else { 1 }..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        // Also where XX, GT, LT, CH or INCR would be: no script uses them.
        return Err(error(SYNTAX));
    }
    let scores = pairs
        .chunks_exact(2)
        .map(|pair| score_arg(pair[0]))
        .collect::<Result<Vec<f64>, Reply>>()?;
    let members = typed_or_insert(store, args[0], new_zset, as_zset)?;
    let mut added = 0;
    for (pair, score) in pairs.chunks_exact(2).zip(scores) {
        if only_new && members.contains_key(pair[1]) {
            continue;
        }
        if members.insert(pair[1].to_vec(), score).is_none() {
            added += 1;
        }
    }
    Ok(count(added))
}

fn zincrby(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let by = score_arg(args[1])?;
    let key = args[0];
    let members = typed_or_insert(store, key, new_zset, as_zset)?;
    let score = members.get(args[2]).copied().unwrap_or(0.0) + by;
    let outcome = if score.is_nan() {
        Err(error("ERR resulting score is not a number (NaN)"))
    } else {
        members.insert(args[2].to_vec(), score);
        Ok(score_reply(score))
    };
    store.keys.drop_if_empty(key);
    outcome
}

fn zrem(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let Some(members) = typed(store, args[0], as_zset)? else {
        return Ok(Reply::Int(0));
    };
    let removed = args[1..]
        .iter()
        .filter(|member| members.remove(**member).is_some())
        .count();
    store.keys.drop_if_empty(args[0]);
    Ok(count(removed))
}

fn zcard(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(count(
        typed(store, args[0], as_zset)?.map_or(0, |members| members.len()),
    ))
}

fn zscore(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(typed(store, args[0], as_zset)?
        .and_then(|members| members.get(args[1]).copied())
        .map_or(Reply::Nil, score_reply))
}

fn zrange(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let start = integer_arg(args[1])?;
    let stop = integer_arg(args[2])?;
    let scores = match &args[3..] {
        [] => false,
        [option] if option.eq_ignore_ascii_case(b"withscores") => true,
        // BYSCORE, BYLEX, REV, LIMIT: no script uses them.
        _ => return Err(error(SYNTAX)),
    };
    let Some(members) = typed(store, args[0], as_zset)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let sorted = ordered(members);
    Ok(match range(sorted.len(), start, stop) {
        None => Reply::Array(Vec::new()),
        Some((from, to)) => with_scores(&sorted[from..=to], scores),
    })
}

/// A ZRANGEBYSCORE bound: the score, and whether it is exclusive (`(`).
fn score_bound(arg: &[u8]) -> Result<(f64, bool), Reply> {
    let (exclusive, number) = match arg.split_first() {
        Some((b'(', rest)) => (true, rest),
        _ => (false, arg),
    };
    parse_score(number)
        .map(|score| (score, exclusive))
        .ok_or_else(|| error(MIN_MAX))
}

fn zrangebyscore(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let (min, min_exclusive) = score_bound(args[1])?;
    let (max, max_exclusive) = score_bound(args[2])?;
    let mut scores = false;
    let mut limit: Option<(i64, i64)> = None;
    let mut options = args[3..].iter();
    while let Some(option) = options.next() {
        if option.eq_ignore_ascii_case(b"withscores") {
            scores = true;
        } else if option.eq_ignore_ascii_case(b"limit") {
            let (Some(offset), Some(n)) = (options.next(), options.next()) else {
                return Err(error(SYNTAX));
            };
            limit = Some((integer_arg(offset)?, integer_arg(n)?));
        } else {
            return Err(error(SYNTAX));
        }
    }
    let Some(members) = typed(store, args[0], as_zset)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let in_range = |score: f64| {
        (if min_exclusive {
            score > min
        } else {
            score >= min
        }) && (if max_exclusive {
            score < max
        } else {
            score <= max
        })
    };
    let mut sorted: Vec<(&[u8], f64)> = ordered(members)
        .into_iter()
        .filter(|(_, score)| in_range(*score))
        .collect();
    if let Some((offset, n)) = limit {
        let Ok(offset) = usize::try_from(offset) else {
            return Ok(Reply::Array(Vec::new()));
        };
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        sorted = sorted.into_iter().skip(offset).take(n).collect();
    }
    Ok(with_scores(&sorted, scores))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn store() -> Store {
        Store::new(Arc::default())
    }

    fn run(store: &mut Store, command: &str) -> Reply {
        let args: Vec<&[u8]> = command.split(' ').map(str::as_bytes).collect();
        execute(store, &args)
    }

    fn bulk_of(text: &str) -> Reply {
        Reply::Bulk(text.as_bytes().to_vec())
    }

    fn bulks(items: &[&str]) -> Reply {
        Reply::Array(items.iter().map(|item| bulk_of(item)).collect())
    }

    fn err(text: &str) -> Reply {
        Reply::Error(text.to_owned())
    }

    #[test]
    fn strings_counters_and_expiry() {
        let mut s = store();
        assert_eq!(run(&mut s, "pttl k"), Reply::Int(-2));
        assert_eq!(run(&mut s, "pexpire k 1000"), Reply::Int(0));
        assert_eq!(run(&mut s, "SET k v PX 30000"), ok());
        let Reply::Int(ttl) = run(&mut s, "pttl k") else {
            panic!()
        };
        assert!((29_000..=30_000).contains(&ttl), "{ttl}");
        assert_eq!(run(&mut s, "set k w"), ok());
        assert_eq!(run(&mut s, "pttl k"), Reply::Int(-1), "SET clears the TTL");
        assert_eq!(run(&mut s, "get k"), bulk_of("w"));
        assert_eq!(run(&mut s, "incr k"), err(NOT_INTEGER));
        assert_eq!(run(&mut s, "incr n"), Reply::Int(1));
        assert_eq!(run(&mut s, "pexpire n 5000"), Reply::Int(1));
        assert_eq!(run(&mut s, "incrby n 41"), Reply::Int(42));
        assert!(
            matches!(run(&mut s, "pttl n"), Reply::Int(ttl) if ttl > 0),
            "INCR keeps the TTL"
        );
        assert_eq!(run(&mut s, "decrby n 2"), Reply::Int(40));
        assert_eq!(run(&mut s, "decr n"), Reply::Int(39));
        assert_eq!(run(&mut s, "incrby n 1.5"), err(NOT_INTEGER));
        assert_eq!(
            run(&mut s, "decrby n -9223372036854775808"),
            err("ERR decrement would overflow")
        );
        assert_eq!(run(&mut s, "set n 9223372036854775807"), ok());
        assert_eq!(run(&mut s, "incr n"), err(OVERFLOW));
        assert_eq!(run(&mut s, "set n 05"), ok());
        assert_eq!(run(&mut s, "incr n"), err(NOT_INTEGER), "strict integers");
        assert_eq!(run(&mut s, "pexpire n 0"), Reply::Int(1));
        assert_eq!(
            run(&mut s, "exists n k k"),
            Reply::Int(2),
            "a past deadline deletes"
        );
        assert_eq!(run(&mut s, "pexpire k x"), err(NOT_INTEGER));
        assert_eq!(
            run(&mut s, "pexpire k 9223372036854775807"),
            err("ERR invalid expire time in 'pexpire' command")
        );
        assert_eq!(
            run(&mut s, "set a b px 0"),
            err("ERR invalid expire time in 'set' command")
        );
        assert_eq!(run(&mut s, "set a b px"), err(SYNTAX));
        assert_eq!(run(&mut s, "set a b px x"), err(NOT_INTEGER));
        assert_eq!(run(&mut s, "set a b xx"), err(SYNTAX));
        // NX: set only when absent (whatever the existing key's type).
        assert_eq!(run(&mut s, "set a c px 1000 nx"), ok());
        assert_eq!(run(&mut s, "set a d nx"), Reply::Nil);
        assert_eq!(run(&mut s, "get a"), bulk_of("c"));
        assert_eq!(run(&mut s, "set k d nx"), Reply::Nil);
        assert_eq!(run(&mut s, "del k a k"), Reply::Int(2));
        assert_eq!(run(&mut s, "get"), err(ARITY));
    }

    #[test]
    fn type_is_a_status_reply() {
        let mut s = store();
        let status = |text: &str| Reply::Status(text.to_owned());
        assert_eq!(run(&mut s, "type k"), status("none"));
        run(&mut s, "set k v");
        run(&mut s, "hset h f 1");
        run(&mut s, "rpush l a");
        run(&mut s, "zadd z 1 m");
        assert_eq!(run(&mut s, "TYPE k"), status("string"));
        assert_eq!(run(&mut s, "type h"), status("hash"));
        assert_eq!(run(&mut s, "type l"), status("list"));
        assert_eq!(run(&mut s, "type z"), status("zset"));
        assert_eq!(run(&mut s, "type"), err(ARITY));
        assert_eq!(run(&mut s, "type k h"), err(ARITY));
        run(&mut s, "pexpire k 10");
        s.now += Duration::from_millis(10);
        assert_eq!(run(&mut s, "type k"), status("none"), "an expired key");
    }

    #[test]
    fn expired_keys_are_absent() {
        let mut s = store();
        assert_eq!(run(&mut s, "set k v px 10"), ok());
        s.now += Duration::from_millis(10);
        assert_eq!(run(&mut s, "get k"), Reply::Nil);
        assert_eq!(run(&mut s, "exists k"), Reply::Int(0));
        assert_eq!(s.keys.stored(), 0);
        assert!(s.keys.index_is_exact());
    }

    #[test]
    fn wrongtype_on_every_command_of_another_type() {
        let mut s = store();
        run(&mut s, "set str x");
        run(&mut s, "hset hash f 1");
        for command in [
            "hget str f",
            "hexists str f",
            "hset str f 1",
            "hincrby str f 1",
            "hdel str f",
            "hlen str",
            "hkeys str",
            "lindex str 0",
            "lpop str",
            "rpush str a",
            "lrange str 0 -1",
            "lrem str 0 a",
            "zadd str 1 m",
            "zincrby str 1 m",
            "zrange str 0 -1",
            "zrangebyscore str -inf +inf",
            "zrem str m",
            "zscore str m",
            "get hash",
            "incr hash",
            "decr hash",
            "incrby hash 1",
            "decrby hash 1",
        ] {
            assert_eq!(run(&mut s, command), err(WRONGTYPE), "{command}");
        }
        // Nothing was created or changed by the failures.
        assert_eq!(run(&mut s, "get str"), bulk_of("x"));
        assert_eq!(s.keys.stored(), 2);
    }

    #[test]
    fn hashes() {
        let mut s = store();
        assert_eq!(run(&mut s, "hincrby h f 1"), Reply::Int(1));
        assert_eq!(run(&mut s, "hset h mode read n 7"), Reply::Int(2));
        assert_eq!(run(&mut s, "hset h mode write"), Reply::Int(0));
        assert_eq!(run(&mut s, "hincrby h mode 1"), err(HASH_NOT_INTEGER));
        assert_eq!(run(&mut s, "hincrby h f x"), err(NOT_INTEGER));
        assert_eq!(run(&mut s, "hset h f"), err(ARITY));
        assert_eq!(
            run(&mut s, "hset h f 1 g"),
            err("ERR wrong number of arguments for 'hset' command")
        );
        assert_eq!(run(&mut s, "hlen h"), Reply::Int(3));
        assert_eq!(run(&mut s, "hkeys h"), bulks(&["f", "mode", "n"]));
        assert_eq!(run(&mut s, "hget h mode"), bulk_of("write"));
        assert_eq!(run(&mut s, "hexists h n"), Reply::Int(1));
        assert_eq!(run(&mut s, "hdel h f mode n x"), Reply::Int(3));
        assert_eq!(
            run(&mut s, "exists h"),
            Reply::Int(0),
            "an emptied hash ceases to exist"
        );
        assert_eq!(run(&mut s, "hincrby h f x"), err(NOT_INTEGER));
        assert_eq!(s.keys.stored(), 0, "a failed HINCRBY leaves no empty hash");
    }

    #[test]
    fn lists() {
        let mut s = store();
        assert_eq!(run(&mut s, "rpush q a"), Reply::Int(1));
        assert_eq!(run(&mut s, "rpush q b a c"), Reply::Int(4));
        assert_eq!(run(&mut s, "lindex q -1"), bulk_of("c"));
        assert_eq!(run(&mut s, "lindex q -4"), bulk_of("a"));
        assert_eq!(run(&mut s, "lindex q -5"), Reply::Nil);
        assert_eq!(run(&mut s, "lindex q 4"), Reply::Nil);
        assert_eq!(run(&mut s, "lindex q x"), err(NOT_INTEGER));
        assert_eq!(
            run(&mut s, "lindex missing x"),
            Reply::Nil,
            "the key first, as Redis"
        );
        assert_eq!(run(&mut s, "lrange q 0 -1"), bulks(&["a", "b", "a", "c"]));
        assert_eq!(run(&mut s, "lrange q -2 10"), bulks(&["a", "c"]));
        assert_eq!(run(&mut s, "lrange q 3 1"), bulks(&[]));
        assert_eq!(run(&mut s, "lrem q -1 a"), Reply::Int(1));
        assert_eq!(run(&mut s, "lrange q 0 -1"), bulks(&["a", "b", "c"]));
        assert_eq!(run(&mut s, "lrem q 0 a"), Reply::Int(1));
        assert_eq!(run(&mut s, "lpop q"), bulk_of("b"));
        assert_eq!(
            run(&mut s, "lpop q -1"),
            err("ERR value is out of range, must be positive")
        );
        assert_eq!(run(&mut s, "lpop q 5"), bulks(&["c"]));
        assert_eq!(
            run(&mut s, "exists q"),
            Reply::Int(0),
            "an emptied list ceases to exist"
        );
        assert_eq!(run(&mut s, "lpop q"), Reply::Nil);
    }

    #[test]
    fn sorted_sets() {
        let mut s = store();
        assert_eq!(run(&mut s, "zincrby z -5 m"), bulk_of("-5"));
        assert_eq!(run(&mut s, "zadd z 7 n 0.1 o"), Reply::Int(2));
        assert_eq!(run(&mut s, "zadd z 3 n"), Reply::Int(0));
        assert_eq!(run(&mut s, "zadd z NX 9 n 4 p"), Reply::Int(1));
        assert_eq!(
            run(&mut s, "zscore z n"),
            bulk_of("3"),
            "NX keeps a member's score"
        );
        assert_eq!(run(&mut s, "zrem z p"), Reply::Int(1));
        assert_eq!(run(&mut s, "zadd z 1 a 2"), err(SYNTAX));
        assert_eq!(run(&mut s, "zadd z nan a"), err(NOT_FLOAT));
        assert_eq!(run(&mut s, "zadd z 1e400 a"), err(NOT_FLOAT));
        assert_eq!(run(&mut s, "zscore z o"), bulk_of("0.10000000000000001"));
        assert_eq!(run(&mut s, "zscore z x"), Reply::Nil);
        assert_eq!(run(&mut s, "zincrby z 1.5 n"), bulk_of("4.5"));
        assert_eq!(run(&mut s, "zrange z 0 -1"), bulks(&["m", "o", "n"]));
        assert_eq!(run(&mut s, "zrange z 0 0 WITHSCORES"), bulks(&["m", "-5"]));
        assert_eq!(run(&mut s, "zrange z 0 -1 rev"), err(SYNTAX));
        assert_eq!(run(&mut s, "zrangebyscore z -inf 0.1"), bulks(&["m", "o"]));
        assert_eq!(
            run(&mut s, "zrangebyscore z (-5 +inf withscores"),
            bulks(&["o", "0.10000000000000001", "n", "4.5"])
        );
        assert_eq!(
            run(&mut s, "zrangebyscore z -inf +inf LIMIT 1 1"),
            bulks(&["o"])
        );
        assert_eq!(run(&mut s, "zrangebyscore z x 1"), err(MIN_MAX));
        assert_eq!(run(&mut s, "zadd z inf i"), Reply::Int(1));
        assert_eq!(
            run(&mut s, "zincrby z -inf i"),
            err("ERR resulting score is not a number (NaN)")
        );
        assert_eq!(run(&mut s, "zscore z i"), bulk_of("inf"));
        // Ties are ordered by member.
        assert_eq!(run(&mut s, "zadd t 1 b 1 a 0 c"), Reply::Int(3));
        assert_eq!(run(&mut s, "zrange t 0 -1"), bulks(&["c", "a", "b"]));
        assert_eq!(run(&mut s, "zrem z m n o i x"), Reply::Int(4));
        assert_eq!(
            run(&mut s, "exists z"),
            Reply::Int(0),
            "an emptied sorted set ceases to exist"
        );
    }

    #[test]
    fn unknown_commands_fail_loudly() {
        let mut s = store();
        assert_eq!(
            run(&mut s, "HGETALL h"),
            err(
                "ERR unknown command 'HGETALL' (MemoryBackend implements only the commands redisync's scripts use)"
            )
        );
        assert!(
            matches!(run(&mut s, "averyveryverylongcommandname"), Reply::Error(text) if text.starts_with("ERR unknown command"))
        );
        assert_eq!(
            execute(&mut s, &[]),
            err("ERR Please specify at least one argument for this redis lib call")
        );
    }

    #[test]
    fn time_is_the_frozen_wall_clock() {
        let mut s = store();
        s.wall = Duration::new(1_700_000_000, 123_456_789);
        assert_eq!(run(&mut s, "time"), bulks(&["1700000000", "123456"]));
    }
}
