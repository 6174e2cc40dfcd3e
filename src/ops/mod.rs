//! Every operation of every primitive, written once: one function per
//! script of `lua/`, next to the script it runs, building its KEYS and ARGV
//! and reading its reply. They run on any [`LockBackend`]: a store only
//! runs scripts (see [`LockBackend::run_script`]).
//!
//! The primitives (`Lock`, `Semaphore`, ...) call these; so can a tool that
//! needs one atomic step without the blocking, retry and renewal logic the
//! primitives add on top. Key and channel names are Redisson's (see the
//! schema table below): the caller builds them and passes them in, as the
//! primitives do. Each primitive's module also holds the types its
//! operations take and return ([`lock::Acquire`], [`lock::Release`],
//! [`fair_lock::FairLockKeys`], [`rw_lock::RwLockKeys`], ...), so that a
//! new primitive is added here and above, never in [`crate::backend`].
//!
//! ```
//! use redisync::internal::lock::{self, Acquire, Release};
//!
//! let store = redisync::MemoryBackend::new();
//! assert_eq!(lock::acquire(&store, "doc:ops", "c1:1", 30_000)?, Acquire::Acquired);
//! let release = lock::release(
//!     &store, "doc:ops", "redisson_lock__channel:{doc:ops}", "c1:1", 30_000,
//!     "redisson_unlock_latch:{doc:ops}:r1", 5_000,
//! )?;
//! assert_eq!(release, Release::Released);
//! # Ok::<(), redisync::Error>(())
//! ```
//!
//! # Schema (Redisson 3.x wire format)
//!
//! | object | key | type | contents | TTL | channel | messages |
//! |---|---|---|---|---|---|---|
//! | reentrant lock | `name` | hash | field `<client uuid>:<thread>` = hold count | the lease; reset on every acquire and renewal | `redisson_lock__channel:{name}` | `0` = unlocked |
//! | fenced-lock tokens | `redisson_lock_token:{name}` | string | the last fencing token handed out (`INCR` on every acquisition of the lock `name`, then raised to the server clock in µs if below it) | none | as the reentrant lock | as the reentrant lock |
//! | unlock latch | `redisson_unlock_latch:{name}:<request id>` | string | `0` still held, `1` released | a few seconds | | |
//! | fair lock | `name` | hash | as the reentrant lock | the lease | per waiter: `redisson_lock__channel:{name}:<waiter id>` | `0` = your turn; (redisync only) `h:<server ms>:<claim ms>:<wait id>:<waiter id>` = the lock is yours (see [`fair_lock`]) |
//! | fair-lock direct mark (redisync only) | `{name}:redisync_fair_direct:<waiter id>` | string | `<wait id>:<allowance ms>`: a release may hand this queued waiter the lock outright | 2 × lease (refreshed while it waits) | | |
//! | fair-lock queue | `redisson_lock_queue:{name}` | list | waiter ids, FIFO | none | | |
//! | fair-lock slots | `redisson_lock_timeout:{name}` | zset | waiter id, score = slot deadline (ms, client clock) | none | | |
//! | read-write lock | `name` | hash | `mode` = `read`/`write`; `<holder>` = read holds; `<holder>:write` = write holds | longest hold | `redisson_rwlock:{name}` | `0` = unlocked (wakes one), `1` = read-unlock (wakes all) |
//! | read hold n | `{name}:<holder>:rwlock_timeout:<n>` | string | `1` | the hold's lease | | |
//! | semaphore | `name` | string | available permits (absent = 0, may go negative) | none | `redisson_sc:{name}` | the new permit count (wakes up to that many) |
//! | permit-expirable semaphore | `name`; `{name}:timeout` | string; zset | available permits; permit id → lease end (ms, client clock) | none | `redisson_sc:{name}` | the new permit count |
//! | count-down latch | `name` | string | the count (deleted at zero) | none | `redisson_countdownlatch__channel__{name}` | `0` = opened (wakes all), `1` = new count |
//! | op record (redisync only) | `{name}:redisync_op:<op id>` | string | one call's record: a counting call's `1`; a write that acts once ([`once`]: force release, delete, drain, set permits or count) its outcome (`i<int>`, `s<text>`, `n`), or `u` once settled as not done | a minute, or longer than every copy's window | | |
//!
//! Every auxiliary key and channel carries the `{name}` hash tag, so one
//! primitive's keys share a Redis Cluster slot (see `keys.rs`). The
//! barrier (redisync only) has its own table, in [`barrier`].

use std::time::Duration;

use crate::backend::{Effect, LockBackend, Reply, Resend, Script, ScriptCall};
use crate::{Error, Result};

pub mod barrier;
pub mod counter;
pub mod election;
pub mod expirable;
pub mod fair_lock;
pub mod handoff;
pub(crate) mod inspect;
pub mod latch;
pub mod lock;
pub mod once;
#[cfg(test)]
mod queue_model;
pub mod rw_lock;
pub mod semaphore;

/// Defines each [`Script`](crate::backend::Script) `static` of a module
/// from `lua/<id>.lua`, after the shared preludes it needs
/// (`lua/<prelude>.lua`, in order), with whether it only `reads` (a read
/// needs no window: see [`Script::is_windowed`]) or `writes`; and (for
/// tests) the module's list of them, `SCRIPTS`: a script is declared
/// once, and so listed.
macro_rules! scripts {
    ($($(#[$doc:meta])* $static:ident = $id:literal, $operation:literal, $access:ident $(, after $prelude:literal)*;)+) => {
        $(
            $(#[$doc])*
            pub(crate) static $static: $crate::backend::Script = $crate::backend::Script::new(
                $id,
                $operation,
                concat!(
                    $(include_str!(concat!("../../lua/", $prelude, ".lua")),)*
                    include_str!(concat!("../../lua/", $id, ".lua"))
                ),
            );
        )+
        /// This module's scripts, as declared above, each with whether it
        /// only reads (see `ops::registered`).
        #[cfg(test)]
        pub(crate) static SCRIPTS: &[(&$crate::backend::Script, bool)] =
            &[$((&$static, $crate::ops::scripts!(@reads $access))),+];
    };
    (@reads reads) => { true };
    (@reads writes) => { false };
}
pub(crate) use scripts;

/// Every script of every operation, with whether it only reads: each
/// module's `SCRIPTS`, which its `scripts!` declaration makes. A module
/// left out here fails `every_lua_file_is_one_script_with_a_distinct_id`.
#[cfg(test)]
pub(crate) fn registered() -> Vec<(&'static crate::backend::Script, bool)> {
    [
        SCRIPTS,
        barrier::SCRIPTS,
        counter::SCRIPTS,
        election::SCRIPTS,
        expirable::SCRIPTS,
        fair_lock::SCRIPTS,
        handoff::SCRIPTS,
        inspect::SCRIPTS,
        latch::SCRIPTS,
        lock::SCRIPTS,
        once::SCRIPTS,
        rw_lock::SCRIPTS,
        semaphore::SCRIPTS,
    ]
    .concat()
}

/// Every script of every operation (tests check them all).
#[cfg(test)]
pub(crate) fn all_scripts() -> Vec<&'static crate::backend::Script> {
    registered().into_iter().map(|(script, _)| script).collect()
}

/// Runs `call` on `backend` and turns a script's error reply into an
/// [`Error`]: an argument the script refused is `InvalidArgument` (which
/// argument, why); data of another type or shape is `Protocol`.
pub(crate) fn run<B: LockBackend + ?Sized>(backend: &B, call: &ScriptCall<'_>) -> Result<Reply> {
    match backend.run_script(call)? {
        Reply::Error(text) if text.starts_with("WRONGTYPE") => Err(wrong_type(backend, call)),
        Reply::Error(text) => Err(script_error(call.script().operation(), &text)),
        reply => Ok(reply),
    }
}

scripts! {
    /// KEYS the keys of a call that got WRONGTYPE. {type of each}; writes
    /// nothing.
    KEY_TYPES = "key_types", "key type lookup", reads;
}

/// The error for a WRONGTYPE reply to `call`, naming its keys that exist
/// and the Redis type each holds (looked up after the fact: Redis' reply
/// names neither). Without the lookup (it failed too), the bare fact.
fn wrong_type<B: LockBackend + ?Sized>(backend: &B, call: &ScriptCall<'_>) -> Error {
    let operation = call.script().operation();
    let lookup = call.keys().iter().fold(
        ScriptCall::new(&KEY_TYPES, Resend::Harmless, Effect::Read),
        |lookup, key| lookup.key(key.as_ref()),
    );
    let found: Vec<String> = match backend.run_script(&lookup) {
        Ok(Reply::Array(types)) => call
            .keys()
            .iter()
            .zip(
                types
                    .iter()
                    .map(|found| found.as_text().unwrap_or("?").to_owned()),
            )
            .filter(|(_, found)| found != "none")
            .map(|(key, found)| format!("{key:?} holds a Redis {found}"))
            .collect(),
        _ => Vec::new(),
    };
    if found.is_empty() {
        return Error::protocol(format!(
            "{operation}: a key holds another Redis type than this primitive uses (WRONGTYPE)"
        ));
    }
    Error::protocol(format!(
        "{operation}: {}, another type than this primitive uses (WRONGTYPE): \
         delete it or pick another name",
        found.join(", ")
    ))
}

/// The arguments the scripts check (`lua/args_prelude.lua`), by the name
/// their error reply gives; longer names first, so "lease end" is not read
/// as "lease".
const SCRIPT_ARGUMENTS: [&str; 11] = [
    "lease end",
    "permit id",
    "record",
    "latch timeout",
    "wait allowance",
    "lease",
    "now",
    "value",
    "delta",
    "permits",
    "parties",
];

/// What a script's error reply `text` means for `operation`.
fn script_error(operation: &str, text: &str) -> Error {
    let (code, detail) = text.split_once(' ').unwrap_or((text, ""));
    match code {
        // `lua/window_prelude.lua`: it arrived after its caller gave up on
        // it and wrote nothing; or `lua/op_record_prelude.lua`: its call was
        // settled as not done. A failed round trip, as a timeout is.
        "ERR" if detail.starts_with("late request") => Error::backend(
            format!("{operation}: the server refused the request as late: {detail}"),
            true,
        ),
        // `ERR invalid lease: ...`: the scripts' own refusal of an argument,
        // before any write.
        "ERR" if detail.starts_with("invalid ") => {
            let detail = &detail["invalid ".len()..];
            let (what, why) = SCRIPT_ARGUMENTS
                .iter()
                .find_map(|what| {
                    detail
                        .strip_prefix(what)
                        .and_then(|rest| rest.strip_prefix(':'))
                        .map(|why| (*what, why.trim()))
                })
                .unwrap_or(("script argument", detail));
            Error::invalid(what, why.to_owned())
        }
        "WRONGTYPE" => Error::protocol(format!(
            "{operation}: the key holds another Redis type than this primitive uses (WRONGTYPE)"
        )),
        // A non-integer count, an overflow, a script failing on data it
        // cannot use: the key was changed behind the scripts' back.
        _ => Error::protocol(format!("{operation}: {text}")),
    }
}

/// Runs `call` and reads its reply with `read`, which names the call's
/// operation in an error.
fn run_as<B: LockBackend + ?Sized, T>(
    backend: &B,
    call: &ScriptCall<'_>,
    read: fn(&Reply, &str) -> Result<T>,
) -> Result<T> {
    read(&run(backend, call)?, call.script().operation())
}

/// The hold count and the remaining TTL of a state script's reply
/// (`{<lock or mode>, hold count, PTTL}`): a negative count reads as 0.
fn hold_count_and_ttl(reply: &Reply, operation: &str) -> Result<(u64, Option<Duration>)> {
    let hold_count = int(part(reply, 1, operation)?, operation)?;
    let pttl = int(part(reply, 2, operation)?, operation)?;
    Ok((u64::try_from(hold_count).unwrap_or(0), ttl_from_pttl(pttl)))
}

/// One of a reply's parts (an array's item `index`).
fn part<'r>(reply: &'r Reply, index: usize, operation: &str) -> Result<&'r Reply> {
    reply
        .as_array()
        .and_then(|items| items.get(index))
        .ok_or_else(|| {
            reply.unexpected(
                operation,
                &format!("an array of at least {} items", index + 1),
            )
        })
}

/// An integer reply.
fn int(reply: &Reply, operation: &str) -> Result<i64> {
    reply
        .as_int()
        .ok_or_else(|| reply.unexpected(operation, "an integer"))
}

/// A 0/1 reply as a flag.
fn flag(reply: &Reply, operation: &str) -> Result<bool> {
    match reply.as_int() {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => Err(reply.unexpected(operation, "0 or 1")),
    }
}

/// Whether a 0/1 reply is 1 (an [`Effect`](crate::backend::Effect) test).
fn is_one(reply: &Reply) -> bool {
    reply.as_int() == Some(1)
}

/// An array of `len` 0/1 flags (a batch's per-item outcomes).
fn flags(reply: &Reply, len: usize, operation: &str) -> Result<Vec<bool>> {
    let expected = || reply.unexpected(operation, &format!("an array of {len} flags (0 or 1)"));
    let items = reply
        .as_array()
        .filter(|items| items.len() == len)
        .ok_or_else(expected)?;
    items
        .iter()
        .map(|item| match item.as_int() {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            _ => Err(expected()),
        })
        .collect()
}

/// Whether any flag of a batch's reply is 1 (an [`Effect`](crate::backend::Effect) test).
fn any_one(reply: &Reply) -> bool {
    reply
        .as_array()
        .is_some_and(|items| items.iter().any(|item| item.as_int() == Some(1)))
}

/// Whether a reply is not nil (a release that found a hold).
fn is_some(reply: &Reply) -> bool {
    !reply.is_nil()
}

/// Any reply (an effect that always changes something).
fn always(_: &Reply) -> bool {
    true
}

/// A nil-or-integer reply (an acquire's nil, or the time to wait).
fn optional_int(reply: &Reply, operation: &str) -> Result<Option<i64>> {
    match reply {
        Reply::Nil => Ok(None),
        Reply::Int(value) => Ok(Some(*value)),
        _ => Err(reply.unexpected(operation, "nil or an integer")),
    }
}

/// A remaining TTL as Redis reports it (negative: no expiry known).
fn ttl_from_pttl(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// A counter returned as stored (a decimal string; nil = 0).
fn counter_value(name: &str, reply: &Reply, operation: &str) -> Result<i64> {
    match reply {
        Reply::Nil => Ok(0),
        Reply::Int(value) => Ok(*value),
        Reply::Bulk(_) => {
            let text = reply.as_text().unwrap_or_default();
            text.parse().map_err(|_| {
                Error::protocol(format!("key {name:?} holds {text:?}, not an integer count"))
            })
        }
        _ => Err(reply.unexpected(operation, "a count")),
    }
}

/// A replica-acknowledgement undo: built from the acquire call it undoes
/// and that call's reply.
type UndoCall = fn(&ScriptCall<'_>, &Reply) -> ScriptCall<'static>;

/// An acquire script's call: `keys`, then the attempt's record when there
/// is one (every acquire script takes it as its last, optional key). Its
/// replica-acknowledgement `undo` tells the two apart by the call's keys.
/// Resent freely: unrecorded, a second acquisition is a phantom hold the
/// outermost unlock drains; recorded, a repeat returns the first outcome.
fn acquire_call<'a>(
    script: &'static Script,
    acquired: fn(&Reply) -> bool,
    undo: UndoCall,
    keys: &[&'a str],
    attempt_key: Option<&'a str>,
) -> ScriptCall<'a> {
    keys.iter().copied().chain(attempt_key).fold(
        ScriptCall::new(script, Resend::Harmless, Effect::Acquire { acquired, undo }),
        ScriptCall::key,
    )
}

/// An undo script's call (`lua/*_undo_acquire.lua`): repeated, it finds its
/// record undone and does nothing; it changed something when it undid a
/// hold (1 or 2).
fn undo_script_call<'a>(script: &'static Script) -> ScriptCall<'a> {
    ScriptCall::new(
        script,
        Resend::Harmless,
        Effect::Change(|reply| reply.as_int().is_some_and(|n| n > 0)),
    )
}

/// What an acquire call sent as its lease (ARGV[1] of every lock acquire
/// script), for the undo of that call.
fn sent_lease(call: &ScriptCall<'_>) -> i64 {
    call.args()[0].parse().unwrap_or(1)
}

/// A latch key for a rollback's release (a fresh request id).
fn rollback_latch(name: &str) -> String {
    format!(
        "{}:rollback-{}",
        crate::keys::unlock_latch_prefix(name),
        uuid::Uuid::new_v4().simple()
    )
}

/// How long a rollback's unlock latch lives (it is never retried).
const ROLLBACK_LATCH_MS: i64 = 1_000;

/// Slack added to the longest window in [`record_keep_ms`]: the in-line
/// retries of one call under the same id (a release's 300 ms, pauses, the
/// time between a try's send and its window's start).
const RECORD_SLACK_MS: i64 = 5_000;

/// How long a counting call's or an op's record is kept at least, in ms
/// (see `semaphore::RECORD_MS`, its public path, and `once`): one
/// definition for both, so neither module imports the other.
pub const RECORD_MS: i64 = 60_000;

/// How long a record (an unlock latch, an attempt record, an op record)
/// must be kept so that it outlives the window of every copy of its
/// request: at least `floor_ms`, and at least the longest window one call
/// can open on `backend` (two tries, each its response timeout plus the
/// window margin, see [`Script::is_windowed`]) plus a slack for the
/// in-line retries that reuse the call's id. A copy that arrives after
/// its record is gone arrives after its window too, and is refused there.
///
/// With a response timeout of 15 s: 2 × 15.025 s + 5 s = 35.05 s, where
/// a fixed 10 s latch would let a copy held 11 s act again.
pub(crate) fn record_keep_ms<B: LockBackend + ?Sized>(backend: &B, floor_ms: i64) -> i64 {
    let Some(timeout) = backend.response_timeout() else {
        return floor_ms;
    };
    let window = timeout.saturating_add(crate::backend::WINDOW_MARGIN);
    let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX / 4);
    floor_ms.max(
        window_ms
            .saturating_mul(2)
            .saturating_add(RECORD_SLACK_MS)
            .min(1 << 47),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A store that answers nothing but its response timeout.
    struct TimedStore(Option<Duration>);

    impl LockBackend for TimedStore {
        fn run_script(&self, _: &ScriptCall<'_>) -> Result<Reply> {
            Ok(Reply::Nil)
        }
        fn publish(&self, _: &str, _: &str) -> Result<()> {
            Ok(())
        }
        fn with_pubsub(
            &self,
            _: &mut dyn FnMut(&mut dyn crate::backend::PubSubConnection) -> Result<()>,
        ) -> Result<()> {
            Ok(())
        }
        fn response_timeout(&self) -> Option<Duration> {
            self.0
        }
    }

    #[test]
    fn a_record_outlives_the_longest_window_of_its_call() {
        // No response timeout (an in-process store): the floor.
        assert_eq!(record_keep_ms(&TimedStore(None), 10_000), 10_000);
        let slow = TimedStore(Some(Duration::from_secs(15)));
        assert_eq!(record_keep_ms(&slow, 10_000), 35_050);
        assert_eq!(record_keep_ms(&slow, 60_000), 60_000);
        // The default response timeout (3 s): 11.05 s.
        let default = TimedStore(Some(Duration::from_secs(3)));
        assert_eq!(record_keep_ms(&default, 10_000), 11_050);
    }

    #[test]
    fn a_counting_record_outlives_the_last_background_resends_window() {
        // Resent in the background for up to 30 s: the record must still be
        // there when the last resend's window ends.
        let default = TimedStore(Some(Duration::from_secs(3)));
        assert_eq!(semaphore::counting_record_ms(&default), 60_000);
        let slow = TimedStore(Some(Duration::from_secs(30)));
        assert_eq!(
            semaphore::counting_record_ms(&slow),
            30_000 + 2 * 30_025 + 5_000
        );
    }

    #[test]
    fn every_lua_file_is_one_script_with_a_distinct_id() {
        let ids: std::collections::HashSet<_> = all_scripts().iter().map(|s| s.id()).collect();
        assert_eq!(ids.len(), all_scripts().len());
        let mut files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/lua"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter_map(|file| file.strip_suffix(".lua").map(str::to_owned))
            // A prelude is code that scripts start with, not a script.
            .filter(|stem| !stem.ends_with("_prelude"))
            .collect::<Vec<_>>();
        files.sort();
        let mut ids = ids.into_iter().map(str::to_owned).collect::<Vec<_>>();
        ids.sort();
        assert_eq!(
            files, ids,
            "a lua/ file without an operation, or the reverse"
        );
    }

    #[test]
    fn scripts_taking_numbers_check_them_first() {
        for script in all_scripts() {
            // The window check comes first (a late request checks nothing).
            let code = script
                .code()
                .strip_prefix(include_str!("../../lua/window_prelude.lua"))
                .unwrap_or(script.code());
            if code.contains("bad_bounded(") || code.contains("count_checks()") {
                assert!(
                    code.starts_with(include_str!("../../lua/args_prelude.lua")),
                    "{}",
                    script.id()
                );
            }
            // The counts' exact checks right after the durations' (their
            // own file: the other scripts build no closure for them).
            let after_args = code
                .strip_prefix(include_str!("../../lua/args_prelude.lua"))
                .unwrap_or(code);
            assert_eq!(
                code.contains("local function count_checks()"),
                after_args.starts_with(include_str!("../../lua/count_prelude.lua")),
                "{}: count_prelude.lua right after args_prelude.lua, or not at all",
                script.id()
            );
            if code.contains("count_checks()") {
                assert!(
                    code.contains("local function count_checks()"),
                    "{}",
                    script.id()
                );
            }
        }
    }

    #[test]
    fn every_writing_script_is_windowed() {
        // A script that calls none of these writes nothing. Redis'
        // commands flagged `write`, and PUBLISH, that a script may call.
        let writes = [
            "set",
            "setnx",
            "setex",
            "psetex",
            "getset",
            "getdel",
            "getex",
            "append",
            "incr",
            "incrby",
            "incrbyfloat",
            "decr",
            "decrby",
            "mset",
            "msetnx",
            "del",
            "unlink",
            "expire",
            "pexpire",
            "expireat",
            "pexpireat",
            "persist",
            "rename",
            "renamenx",
            "copy",
            "hset",
            "hsetnx",
            "hmset",
            "hdel",
            "hincrby",
            "hincrbyfloat",
            "lpush",
            "rpush",
            "lpushx",
            "rpushx",
            "lpop",
            "rpop",
            "lrem",
            "lset",
            "ltrim",
            "linsert",
            "lmove",
            "rpoplpush",
            "sadd",
            "srem",
            "spop",
            "smove",
            "zadd",
            "zrem",
            "zincrby",
            "zpopmin",
            "zpopmax",
            "zremrangebyscore",
            "zremrangebyrank",
            "zremrangebylex",
            "publish",
            "spublish",
        ];
        let mut reads = 0;
        for (script, declared_read) in registered() {
            let code = script.code().to_ascii_lowercase();
            let writing = writes.iter().any(|command| {
                ["redis.call(", "redis.pcall("].iter().any(|call| {
                    ["'", "\""]
                        .iter()
                        .any(|quote| code.contains(&format!("{call}{quote}{command}{quote}")))
                })
            });
            // Declared `reads`: no window. A read may still write what is
            // harmless late (the expirable semaphore's counts reclaim
            // expired leases, as Redisson's do).
            assert_eq!(script.is_windowed(), !declared_read, "{}", script.id());
            // Declared `writes` but calls no writing command: mislabelled.
            assert!(writing || declared_read, "{}", script.id());
            reads += usize::from(declared_read);
        }
        // The reads this check has to tell apart (a state, an inspection).
        assert!(reads >= 8, "{reads}");
    }

    #[test]
    fn a_late_refusal_is_a_failed_round_trip() {
        let err = script_error(
            "lock release",
            "ERR late request: arrived after its window ended at 5 ms (server clock), nothing written",
        );
        assert!(err.is_connection_error(), "{err}");
        assert!(err.to_string().contains("after its window"), "{err}");
    }

    #[test]
    fn sharded_forms_publish_with_spublish_only() {
        let mut publishing = 0;
        for script in all_scripts() {
            let sharded = script.sharded_code();
            assert!(!sharded.contains("'publish'"), "{}", script.id());
            if script.code().contains("'publish'") {
                publishing += 1;
                assert!(
                    sharded.contains("redis.call('spublish',"),
                    "{}",
                    script.id()
                );
            } else {
                assert_eq!(sharded, script.code(), "{}", script.id());
            }
        }
        assert!(publishing >= 12, "{publishing}");
    }

    #[test]
    fn refused_arguments_name_the_argument() {
        let err = script_error(
            "lock acquire",
            "ERR invalid lease end: must be at most 2^48",
        );
        assert!(err.is_invalid_argument(), "{err}");
        assert!(err.to_string().contains("lease end"), "{err}");
        let err = script_error("lock acquire", "ERR invalid lease: 0");
        assert!(err.to_string().contains("lease"), "{err}");
    }

    #[test]
    fn wrong_types_are_protocol_errors_that_say_so() {
        let err = script_error("latch count down", "WRONGTYPE Operation against a key");
        assert!(
            err.is_protocol_error() && err.to_string().contains("WRONGTYPE"),
            "{err}"
        );
        let err = script_error("semaphore add", "ERR increment or decrement would overflow");
        assert!(
            err.is_protocol_error() && err.to_string().contains("overflow"),
            "{err}"
        );
    }
}
