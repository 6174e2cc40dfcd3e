//! Differential test of the in-memory store's command table: each case runs
//! a few commands through one Lua script on a real redis-server and on
//! `MemoryBackend`, and compares every command's reply and, after the last,
//! the state of every key the cases use (type, contents, whether it has a
//! TTL).
//!
//! The cases cover every command of `src/backend/memory/commands/` that
//! `tests/differential.rs` (random operations of the primitives) does not
//! reach, each with its edge cases: a missing key, a key of another type,
//! argument errors, score bounds with `(`, `-inf` and `+inf`, `LIMIT`, and
//! what a command does to the key's TTL. Replies whose order Redis leaves to
//! its hash table (HKEYS, HVALS, HGETALL, SMEMBERS) are sorted by the script
//! on both sides.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::TestServer;
use redisync::{Effect, LockBackend, Reply, Resend, Script, ScriptCall};
use redisync::{MemoryBackend, RedisBackend};

/// The keys the cases use; their state is compared after each case.
const KEYS: [&str; 7] = ["k", "k2", "h", "l", "s", "z", "x"];

/// Runs the commands in ARGV (each: its word count, then its words) with
/// `redis.pcall`, then reads the state of every key in KEYS; returns one
/// line per command and per key.
static PROBE: Script = Script::new(
    "differential_probe",
    "command probe",
    r#"
local function show(r)
    if r == nil or r == false then return 'nil' end
    if type(r) == 'number' then return 'i:' .. tostring(r) end
    if type(r) == 'string' then return 's:' .. r end
    if r.err then return 'err:' .. r.err end
    if r.ok then return 'ok:' .. r.ok end
    local items = {}
    for i = 1, #r do items[i] = show(r[i]) end
    return '[' .. table.concat(items, ',') .. ']'
end
local lines = {}
local i = 1
while i <= #ARGV do
    local n = tonumber(ARGV[i])
    local args = {}
    for j = 1, n do args[j] = ARGV[i + j] end
    i = i + n + 1
    local r = redis.pcall(unpack(args))
    local name = string.lower(args[1])
    if type(r) == 'table' and not r.err and not r.ok then
        if name == 'hgetall' then
            local pairs = {}
            for p = 1, #r, 2 do pairs[#pairs + 1] = r[p] .. '=' .. r[p + 1] end
            r = pairs
            table.sort(r)
        elseif name == 'hkeys' or name == 'hvals' or name == 'smembers' then
            table.sort(r)
        end
    end
    lines[#lines + 1] = table.concat(args, ' ') .. ' -> ' .. show(r)
end
for _, key in ipairs(KEYS) do
    local t = redis.call('type', key).ok
    local v = ''
    if t == 'string' then
        v = redis.call('get', key)
    elseif t == 'hash' then
        local h = redis.call('hgetall', key)
        local pairs = {}
        for p = 1, #h, 2 do pairs[#pairs + 1] = h[p] .. '=' .. h[p + 1] end
        table.sort(pairs)
        v = table.concat(pairs, ',')
    elseif t == 'list' then
        v = table.concat(redis.call('lrange', key, 0, -1), ',')
    elseif t == 'set' then
        local m = redis.call('smembers', key)
        table.sort(m)
        v = table.concat(m, ',')
    elseif t == 'zset' then
        v = table.concat(redis.call('zrange', key, 0, -1, 'withscores'), ',')
    end
    local ttl = redis.call('pttl', key)
    if ttl > 0 then ttl = 'ttl' end
    lines[#lines + 1] = key .. ': ' .. t .. ' [' .. v .. '] ' .. tostring(ttl)
end
return lines
"#,
);

/// Each case: commands separated by ` ; `, words by spaces.
const CASES: &[&str] = &[
    // ---- Keys ----
    "set k v ; set k2 w ; unlink k x k2",
    "unlink x",
    "sadd s a ; type s ; type x",
    "set k v ; expire k 100 ; ttl k",
    "set k v ; expire k 0",
    "set k v ; expire k -5",
    "expire x 100",
    "set k v ; expire k abc",
    "set k v ; expire k 9223372036854775807",
    "set k v ; expire k 9223372036854775",
    "set k v ; pexpireat k 1",
    "set k v ; expireat k 1",
    "set k v ; pexpireat k 99999999999999",
    "set k v ; expireat k 99999999999",
    "set k v ; expireat k 9223372036854775807",
    "pexpireat x 99999999999999",
    "set k v ; pexpireat k abc",
    "set k v px 100000 ; persist k",
    "set k v ; persist k ; persist x",
    "ttl x",
    "set k v ; ttl k",
    "hset h f v ; expire h 100 ; persist h ; ttl h",
    // ---- Strings ----
    "setnx k v",
    "set k v ; setnx k w",
    "hset h f v ; setnx h w",
    "setnx k",
    "getset k v",
    "set k a px 100000 ; getset k b",
    "hset h f v ; getset h x",
    "getdel x",
    "set k v ; getdel k",
    "hset h f v ; getdel h",
    "strlen x",
    "set k hello ; strlen k",
    "hset h f v ; strlen h",
    "append k ab ; append k cd",
    "set k a px 100000 ; append k b",
    "hset h f v ; append h x",
    "set k 1 ; hset h f v ; mget k x h k",
    "mget",
    "mset k 1 k2 2",
    "mset k 1 k2",
    "hset h f v ; mset h x",
    "set k a px 100000 ; mset k b",
    "incrbyfloat k 0.1",
    "set k 10.50 ; incrbyfloat k 0.1",
    "set k 5.0e3 ; incrbyfloat k 2.0e2",
    "incrbyfloat k 0.1 ; incrbyfloat k 0.2",
    "incrbyfloat k -0",
    "set k -0 ; incrbyfloat k -0",
    "set k abc ; incrbyfloat k 1",
    "incrbyfloat k abc",
    "set k abc ; incrbyfloat k abc",
    "incrbyfloat k inf",
    "incrbyfloat k 1e",
    "hset h f v ; incrbyfloat h 1",
    "hset h f v ; incrbyfloat h abc",
    "set k 3 px 100000 ; incrbyfloat k 1.5",
    "incrbyfloat k 1e2",
    "incrbyfloat k -1.25 ; incrbyfloat k 0.25",
    "set k 7 ; incrbyfloat k 1e-17",
    "set k 1 ; incrbyfloat k 1.",
    "set k .5 ; incrbyfloat k +.5",
    "set k 100 ; incrbyfloat k 0.5",
    "set k 1000000 ; incrbyfloat k 0.25",
    "set k 12.345 ; incrbyfloat k -12.345",
    "set k 0.00000000000000001 ; incrbyfloat k 0.00000000000000002",
    // ---- Hashes ----
    "hsetnx h f v ; hsetnx h f w",
    "set k v ; hsetnx k f v",
    "hset h a 1 b 2 ; hvals h ; hkeys h ; hlen h",
    "hvals x",
    "set k v ; hvals k",
    "hset h a 1 b 2 ; hgetall h",
    "hgetall x",
    "set k v ; hgetall k",
    "hset h a 1 ; hmget h a b",
    "hmget x a",
    "set k v ; hmget k a",
    "hset h a hello ; hstrlen h a ; hstrlen h b",
    "hstrlen x a",
    "set k v ; hstrlen k a",
    "hincrbyfloat h f 0.5 ; hincrbyfloat h f 0.25",
    "hset h f x ; hincrbyfloat h f 1",
    "hincrbyfloat h f abc",
    "set k v ; hincrbyfloat k f 1",
    "set k v ; hincrbyfloat k f abc",
    "hset h f 1 ; hincrbyfloat h f inf",
    "hincrbyfloat h f inf",
    "set k 5 ; decr k ; decrby k 3 ; decr x",
    "set k abc ; decr k ; hset h f v ; decr h",
    "hset h f 2.5 ; hincrbyfloat h f -2.5",
    "hset h f 10.5 ; expire h 100 ; hincrbyfloat h f 0.1",
    // ---- Lists ----
    "lpush l a b c ; lrange l 0 -1",
    "set k v ; lpush k a",
    "rpush l a b c ; rpop l ; rpop l 5 ; rpop l",
    "rpop x ; rpop x 2",
    "rpush l a ; rpop l 0",
    "rpush l a ; rpop l -1",
    "rpush l a ; rpop l 1 2",
    "rpush l a ; lpop l 1 2",
    "rpush l a ; lpop l x 2",
    "set k v ; rpop k",
    "llen x",
    "rpush l a b ; llen l",
    "set k v ; llen k",
    "lset x 0 a",
    "lset x y a",
    "rpush l a b ; lset l -1 z ; lset l 5 z ; lset l -3 z",
    "rpush l a ; lset l x z",
    "set k v ; lset k 0 a",
    "rpush l a b c d ; ltrim l 1 -2",
    "rpush l a b ; ltrim l 5 10",
    "rpush l a b ; ltrim l -100 100",
    "ltrim x 0 1",
    "set k v ; ltrim k 0 1",
    "rpush l a ; ltrim l a 1",
    "rpush l a b a c a ; lrem l 2 a ; lrem l -1 a ; lindex l 1 ; lindex l -5",
    "rpush l a b c ; lrange l -100 100 ; lrange l 2 1",
    // ---- Sets ----
    "sadd s a b a ; scard s ; smembers s ; sismember s a ; sismember s z ; smismember s a z",
    "sadd s a ; srem s a b",
    "srem x a",
    "sadd s a b c ; srem s a z",
    "set k v ; sadd k a",
    "set k v ; srem k a",
    "set k v ; smembers k",
    "set k v ; scard k",
    "set k v ; sismember k a",
    "set k v ; smismember k a",
    "smembers x ; scard x ; sismember x a ; smismember x a b",
    "sadd s",
    "sadd s a ; expire s 100 ; sadd s b",
    // ---- Sorted sets ----
    "zadd z 1 a 2 b 3 c ; zremrangebyscore z (1 2",
    "zadd z 1 a 2 b ; zremrangebyscore z -inf +inf",
    "zadd z 1 a 2 b ; zremrangebyscore z (1 (2",
    "zremrangebyscore x 0 1",
    "zadd z 1 a ; zremrangebyscore z x 1",
    "set k v ; zremrangebyscore k 0 1",
    "set k v ; zremrangebyscore k x 1",
    "zadd z 1 a 2 b 3 c ; zcount z (1 +inf ; zcount z -inf (3 ; zcount z 3 1 ; zcount z -inf +inf",
    "zcount x 0 1",
    "zadd z 1 a ; zcount z a 1 ; zcount z 1 (",
    "zadd z 0 a 1 b ; zcount z ( 1 ; zcount z  1 ; zcount z 1e400 +inf ; zcount z -1e400 (1e400",
    "zadd z 0 a 1 b ; zrangebyscore z (0 1e999 ; zcount z nan 1 ; zcount z 0 ((1",
    "set k v ; zcount k 0 1",
    "zadd z 1 a 2 b 2 c ; zrangebyscore z (1 +inf withscores limit 1 1",
    "zadd z 1 a 2 b 2 c ; zrangebyscore z -inf +inf limit 0 -1",
    "zadd z 1 a 2 b ; zrangebyscore z -inf +inf limit -1 2",
    "zadd z 1 a 2 b ; zrangebyscore z -inf +inf limit 5 2",
    "zadd z 1 a ; zrangebyscore z 0 1 limit 1",
    "zadd z 1 a ; zrangebyscore z x 1 foo",
    "zadd z 1 a ; zrangebyscore z 0 1 limit x 1",
    "zadd z 1 a 2 b 3 c ; zrevrange z 0 -1 withscores ; zrevrange z 0 0 ; zrevrange z -2 -1",
    "zadd z 1 b 1 a 1 c ; zrevrange z 0 -1 ; zrange z 0 -1",
    "zrevrange x 0 1",
    "set k v ; zrevrange k 0 1",
    "zadd z 1 a ; zrevrange z a 1 foo",
    "zadd z 1 a ; zrevrange z a 1",
    "zadd z 1 a 2 b 3 c ; zrevrangebyscore z +inf (1 withscores",
    "zadd z 1 a 2 b 2 c ; zrevrangebyscore z 2 2 limit 0 1",
    "zadd z 1 a 2 b ; zrevrangebyscore z 1 2",
    "zadd z 1 a 2 b 3 c ; zrevrangebyscore z (3 -inf limit 1 5",
    "zrevrangebyscore x 1 0",
    "set k v ; zrevrangebyscore k 1 0",
    "zadd z 1 a 2 b 3 c ; zrank z b ; zrank z x ; zrevrank z a ; zrevrank z c",
    "zadd z 1 b 1 a ; zrank z b ; zrevrank z b",
    "zrank x a ; zrevrank x a",
    "set k v ; zrank k a",
    "set k v ; zrevrank k a",
    "zadd z 1 a 2 b 3 c ; zremrangebyrank z 0 1",
    "zadd z 1 a 2 b 3 c ; zremrangebyrank z -1 -1",
    "zadd z 1 a 2 b ; zremrangebyrank z 5 6",
    "zadd z 1 a 2 b ; zremrangebyrank z 0 -1",
    "zremrangebyrank x 0 1",
    "zadd z 1 a ; zremrangebyrank z a 1",
    "set k v ; zremrangebyrank k 0 1",
    "zadd z 1 a ; zscore z a ; zincrby z 2.5 a ; zscore z x",
    "zadd z 0.1 a -inf b +inf c ; zrange z 0 -1 withscores ; zrangebyscore z -inf -inf",
    "zadd z 1 a ; expire z 100 ; zremrangebyscore z 5 6",
];

fn probe(case: &str) -> ScriptCall<'static> {
    let mut call = ScriptCall::new(&PROBE, Resend::IfUnsent, Effect::Read);
    for key in KEYS {
        call = call.key(key);
    }
    for command in case.split(" ; ") {
        let words: Vec<&str> = command.split(' ').collect();
        call = call.arg(words.len().to_string());
        for word in words {
            call = call.arg(word.to_owned());
        }
    }
    call
}

fn lines(reply: Reply) -> Vec<String> {
    let Reply::Array(items) = reply else {
        panic!("the probe answers an array: {reply:?}")
    };
    items
        .into_iter()
        .map(|item| item.as_text().expect("a line of text").to_owned())
        .collect()
}

#[test]
fn memory_commands_reply_and_store_as_redis_does() {
    let server = TestServer::start();
    let redis = RedisBackend::open(&server.url()).unwrap();
    let mut admin = server.connection();
    let mut differences = Vec::new();
    for case in CASES {
        redis::cmd("FLUSHALL").query::<()>(&mut admin).unwrap();
        let memory = MemoryBackend::new();
        let call = probe(case);
        let on_memory = lines(memory.run_script(&call).unwrap());
        let on_redis = lines(redis.run_script(&call).unwrap());
        assert_eq!(
            on_redis.len(),
            case.split(" ; ").count() + KEYS.len(),
            "{case}: {on_redis:?}"
        );
        if on_memory != on_redis {
            let diff: Vec<String> = on_memory
                .iter()
                .zip(&on_redis)
                .filter(|(memory, redis)| memory != redis)
                .map(|(memory, redis)| format!("    memory: {memory}\n    redis:  {redis}"))
                .collect();
            differences.push(format!("{case}\n{}", diff.join("\n")));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} cases differ:\n{}",
        differences.len(),
        CASES.len(),
        differences.join("\n")
    );
}

/// Every command of the table has a case here or in `tests/differential.rs`
/// (whose primitives' scripts call the rest): a command added to the table
/// without a case fails here.
#[test]
fn every_command_of_the_table_has_a_case() {
    let table = include_str!("../src/backend/memory/commands/mod.rs");
    let scripts: String = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/lua"))
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
        .to_ascii_lowercase();
    let mut missing = Vec::new();
    let mut commands = 0;
    for line in table.lines() {
        let Some(name) = line
            .trim()
            .strip_prefix("b\"")
            .and_then(|rest| rest.split_once("\" =>"))
            .map(|(name, _)| name)
        else {
            continue;
        };
        commands += 1;
        let in_cases = CASES.iter().any(|case| {
            case.split(" ; ")
                .any(|command| command.split(' ').next() == Some(name))
        });
        let in_scripts = scripts.contains(&format!("redis.call('{name}'"));
        if !in_cases && !in_scripts {
            missing.push(name);
        }
    }
    assert!(
        commands >= 70,
        "the table was not read: {commands} commands"
    );
    assert!(missing.is_empty(), "commands without a case: {missing:?}");
}
