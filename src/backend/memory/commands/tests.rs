//! The command table's own checks, one command family each; the
//! differential test (`tests/differential.rs`) checks them against
//! redis-server.

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
    // NX adds new members only: n keeps its score 3.
    assert_eq!(run(&mut s, "zadd y 3 n"), Reply::Int(1));
    assert_eq!(run(&mut s, "zadd y nx 9 n 5 p"), Reply::Int(1));
    assert_eq!(run(&mut s, "zscore y n"), bulk_of("3"));
    assert_eq!(run(&mut s, "zadd y nx 1"), err(SYNTAX));
    // ZPOPMIN: the lowest score first; empty once the set is gone.
    assert_eq!(run(&mut s, "zpopmin y"), bulks(&["n", "3"]));
    assert_eq!(run(&mut s, "zpopmin y"), bulks(&["p", "5"]));
    assert_eq!(run(&mut s, "zpopmin y"), Reply::Array(Vec::new()));
    assert_eq!(run(&mut s, "exists y"), Reply::Int(0));
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
        run(&mut s, "OBJECT h"),
        err(
            "ERR unknown command 'OBJECT' (MemoryBackend implements the basic key, string, hash, list, set and sorted-set commands, not this one)"
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

#[test]
fn incrbyfloat_refuses_what_it_cannot_reproduce() {
    let mut s = store();
    // Exact: small sums, and values exact in binary.
    assert_eq!(run(&mut s, "incrbyfloat k 0.1"), bulk_of("0.1"));
    assert_eq!(run(&mut s, "incrbyfloat k 0.2"), bulk_of("0.3"));
    assert_eq!(run(&mut s, "set k 1000000"), ok());
    assert_eq!(run(&mut s, "incrbyfloat k 0.25"), bulk_of("1000000.25"));
    // Redis' long double shows its binary rounding here: refused, loudly.
    assert_eq!(run(&mut s, "set k 10000000000"), ok());
    let Reply::Error(text) = run(&mut s, "incrbyfloat k 0.1") else {
        panic!("refused")
    };
    assert!(
        text.starts_with("ERR MemoryBackend cannot reproduce"),
        "{text}"
    );
    assert_eq!(run(&mut s, "get k"), bulk_of("10000000000"), "unchanged");
    // More than 17 decimals, a hexadecimal float: refused too.
    for increment in ["0.000000000000000001", "0x1p3"] {
        assert!(
            matches!(run(&mut s, &format!("incrbyfloat n {increment}")), Reply::Error(text) if text.contains("cannot reproduce")),
            "{increment}"
        );
    }
}
