//! Kept true (issue 36's requirement 5): each modelled transition tied to
//! the file it models, by tokens the model assumes (its guard, its record,
//! its write). A script change the model does not follow removes a token
//! and fails `model_is_tied_to_the_scripts`.
//!
//! Every part of the new protocol is in `lua/` and `src/` now, so every tie
//! is checked (the list of pending ties, for the parts being built while
//! the model was written, is gone: a new part of the protocol goes into the
//! model and into `SCRIPT_TIES` together). The old protocol's variants
//! (`Protocol::OLD`: fixed TTLs, fair/read/write releases deleting the
//! record, no op records) model main at c89745d and are tied to nothing in
//! the tree.

/// One modelled transition and the tokens its source must contain.
#[derive(Debug)]
pub(crate) struct Tie {
    /// The model's transition (`Req` variant or client rule).
    pub(crate) transition: &'static str,
    /// The file, relative to the crate root.
    pub(crate) file: &'static str,
    /// The file's text, read at compile time.
    pub(crate) text: &'static str,
    /// Strings that must occur in it, each with what the model assumes.
    pub(crate) tokens: &'static [(&'static str, &'static str)],
}

/// Every transition the model has (`model::Req`, the client rules).
pub(crate) const TRANSITIONS: &[&str] = &[
    "window check",
    "Acquire",
    "Release",
    "Force",
    "Drain",
    "Add",
    "Renew",
    "Undo",
    "Settle",
    "client: tried at most twice",
    "client: window end",
    "client: record TTLs",
];

/// The checked ties: true today, and staying true in the new protocol.
pub(crate) const SCRIPT_TIES: &[Tie] = &[
    Tie {
        transition: "window check",
        file: "lua/window_prelude.lua",
        text: include_str!("../../lua/window_prelude.lua"),
        tokens: &[
            (
                "table.remove(ARGV)",
                "the window end rides as the last argument",
            ),
            (
                "redis.call('time')",
                "checked against the server's own clock",
            ),
            ("> window_end", "later than its end: refused"),
            ("late request", "the refusal, nothing written"),
        ],
    },
    Tie {
        transition: "Acquire",
        file: "lua/lock_acquire.lua",
        text: include_str!("../../lua/lock_acquire.lua"),
        tokens: &[
            ("redisync_attempt", "the attempt's record"),
            ("'taken'", "the record's value once the attempt took a hold"),
            ("'nx'", "the record set only if absent"),
            (
                "== 'taken'",
                "a resent copy finding 'taken' while holding: acquired",
            ),
            ("late request", "anything else: refused"),
            ("hincrby", "the hold"),
            (
                "redis.call('set', KEYS[2], 'busy', 'px', keep, 'nx')",
                "told busy: the attempt is spent, its record set 'busy' if absent",
            ),
            (
                "if record == 'busy' then",
                "a copy finding 'busy' answers busy, takes nothing",
            ),
        ],
    },
    Tie {
        transition: "Acquire",
        file: "lua/fenced_lock_acquire.lua",
        text: include_str!("../../lua/fenced_lock_acquire.lua"),
        tokens: &[
            ("redisync_attempt", "the attempt's record"),
            ("late request", "refused"),
            (
                "redis.call('set', KEYS[3], 'busy', 'px', ARGV[3] or ARGV[1], 'nx')",
                "told busy: the attempt is spent",
            ),
            ("if record == 'busy' then", "a copy finding 'busy': busy"),
        ],
    },
    Tie {
        transition: "Acquire",
        file: "lua/fair_lock_acquire.lua",
        text: include_str!("../../lua/fair_lock_acquire.lua"),
        tokens: &[
            ("redisync_attempt", "the attempt's record"),
            ("late request", "refused"),
            (
                "redis.call('set', KEYS[4], value, 'px', keep, 'nx')",
                "the record claimed by the attempt's first write",
            ),
            (
                "local again, reply = claim('busy')",
                "told busy: the attempt is spent",
            ),
            ("if record == 'busy' then", "a copy finding 'busy': busy"),
        ],
    },
    Tie {
        transition: "Acquire",
        file: "lua/read_lock_acquire.lua",
        text: include_str!("../../lua/read_lock_acquire.lua"),
        tokens: &[
            ("redisync_attempt", "the attempt's record"),
            ("late request", "refused"),
            (
                "redis.call('set', KEYS[3], 'busy', 'px', ARGV[4] or ARGV[1], 'nx')",
                "told busy: the attempt is spent",
            ),
            ("if record == 'busy' then", "a copy finding 'busy': busy"),
        ],
    },
    Tie {
        transition: "Acquire",
        file: "lua/write_lock_acquire.lua",
        text: include_str!("../../lua/write_lock_acquire.lua"),
        tokens: &[
            ("redisync_attempt", "the attempt's record"),
            ("late request", "refused"),
            (
                "redis.call('set', KEYS[2], 'busy', 'px', ARGV[4] or ARGV[1], 'nx')",
                "told busy: the attempt is spent",
            ),
            ("if record == 'busy' then", "a copy finding 'busy': busy"),
        ],
    },
    Tie {
        transition: "Release",
        file: "lua/lock_release.lua",
        text: include_str!("../../lua/lock_release.lua"),
        tokens: &[
            ("redis.call('get', KEYS[3])", "the latch read first"),
            ("~= 'taken'", "an outcome there: returned, nothing released"),
            ("return tonumber(done)", "the first outcome"),
            (
                "redis.call('set', KEYS[3]",
                "the latch (the record) set to the outcome",
            ),
            ("redis.call('del', KEYS[1])", "the last hold released"),
        ],
    },
    Tie {
        transition: "Release",
        file: "lua/fair_lock_release.lua",
        text: include_str!("../../lua/fair_lock_release.lua"),
        tokens: &[
            (
                "record of the acquire attempt that took the hold being released",
                "the latch is the acquire's record (gap 5)",
            ),
            (
                "if done and done ~= 'taken' then",
                "an outcome there: returned",
            ),
            ("return tonumber(done)", "the first outcome"),
            (
                "redis.call('set', KEYS[5], 1, 'px', ARGV[5])",
                "the record overwritten with the outcome, kept as the latch",
            ),
        ],
    },
    Tie {
        transition: "Release",
        file: "lua/write_lock_release.lua",
        text: include_str!("../../lua/write_lock_release.lua"),
        tokens: &[
            (
                "record of the acquire attempt that took the hold being released",
                "the latch is the acquire's record (gap 5)",
            ),
            (
                "if done and done ~= 'taken' then",
                "an outcome there: returned",
            ),
            ("return tonumber(done)", "the first outcome"),
            (
                "redis.call('set', KEYS[3], 1, 'px', ARGV[4])",
                "the record overwritten with the outcome, kept as the latch",
            ),
        ],
    },
    Tie {
        transition: "Release",
        file: "lua/read_lock_release.lua",
        text: include_str!("../../lua/read_lock_release.lua"),
        tokens: &[
            (
                "string.sub(done, 1, 5) ~= 'taken'",
                "an outcome there: returned",
            ),
            ("return tonumber(done)", "the first outcome"),
            (
                "redis.call('set', KEYS[5], 1, 'px', ARGV[3])",
                "the record overwritten with the outcome, kept as the latch",
            ),
        ],
    },
    Tie {
        transition: "Force",
        file: "lua/lock_force_release.lua",
        text: include_str!("../../lua/lock_force_release.lua"),
        tokens: &[
            ("{name}:redisync_op:<op id>", "the call's op record (gap 1)"),
            (
                "local replay = op_replay(1)",
                "a copy finding the record: no write",
            ),
            ("redis.call('del', KEYS[1])", "every hold deleted"),
            ("return op_keep(1)", "the outcome recorded"),
            ("return op_keep(0)", "the outcome recorded, lock or none"),
        ],
    },
    Tie {
        transition: "Drain",
        file: "lua/semaphore_drain.lua",
        text: include_str!("../../lua/semaphore_drain.lua"),
        tokens: &[
            ("{name}:redisync_op:<op id>", "the call's op record (gap 7)"),
            (
                "local replay = op_replay(0)",
                "a copy finding the record: no write",
            ),
            ("redis.call('set', KEYS[1], 0)", "every permit taken"),
            ("return op_keep(value)", "the outcome recorded"),
        ],
    },
    Tie {
        transition: "Force",
        file: "lua/op_record_prelude.lua",
        text: include_str!("../../lua/op_record_prelude.lua"),
        tokens: &[
            (
                "local record = redis.call('get', op_key)",
                "the op record read first",
            ),
            (
                "if record == 'u' then",
                "settled as not done: refused (`Reply::Refused`)",
            ),
            (
                "ERR late request: its call was settled as not done",
                "the refusal, nothing written",
            ),
            (
                "return tonumber(string.sub(record, 2))",
                "else the first outcome",
            ),
            (
                "redis.call('set', op_key, text, 'px', op_ms)",
                "op_keep: the outcome stored",
            ),
        ],
    },
    Tie {
        transition: "Add",
        file: "lua/semaphore_add.lua",
        text: include_str!("../../lua/semaphore_add.lua"),
        tokens: &[
            ("redisync_op", "the call's op record"),
            (
                "'nx'",
                "set only if absent: a copy finding it counts no more",
            ),
            ("incrby", "the count"),
        ],
    },
    Tie {
        transition: "Renew",
        file: "lua/lock_renew.lua",
        text: include_str!("../../lua/lock_renew.lua"),
        tokens: &[
            ("hexists", "the holder still holds"),
            (
                "redisync_attempt",
                "the attempt of the hold it renews (gap 8)",
            ),
            (
                "if not record_taken(record, ARGV[3]) then",
                "renewed only while that record says taken",
            ),
            ("pexpire", "the renewal"),
        ],
    },
    Tie {
        transition: "Renew",
        file: "lua/renew_prelude.lua",
        text: include_str!("../../lua/renew_prelude.lua"),
        tokens: &[(
            "string.sub(record, 1, 5) == 'taken'",
            "taken = the record begins 'taken' ('busy', 'undone', an outcome: not)",
        )],
    },
    Tie {
        transition: "Undo",
        file: "lua/lock_undo_acquire.lua",
        text: include_str!("../../lua/lock_undo_acquire.lua"),
        tokens: &[
            (
                "take_record(KEYS[3], 'undone'",
                "the record read and marked 'undone'",
            ),
            ("'taken'", "only a hold that attempt took"),
            ("hincrby', KEYS[1], ARGV[2], -1", "exactly one hold removed"),
        ],
    },
    Tie {
        transition: "Undo",
        file: "lua/undo_prelude.lua",
        text: include_str!("../../lua/undo_prelude.lua"),
        tokens: &[(
            "redis.call('set', key, undone, 'px', keep_ms)",
            "the mark, with a TTL",
        )],
    },
    Tie {
        transition: "Settle",
        file: "lua/op_settle.lua",
        text: include_str!("../../lua/op_settle.lua"),
        tokens: &[
            ("{name}:redisync_op:<op id>", "the call's op record"),
            (
                "local record = redis.call('get', KEYS[1])",
                "the record read first",
            ),
            (
                "return record",
                "there: the outcome (or 'u', settled already)",
            ),
            (
                "redis.call('set', KEYS[1], 'u', 'px', ARGV[1])",
                "absent: marked not done ('undone' in the model), with a TTL",
            ),
        ],
    },
    Tie {
        transition: "client: tried at most twice",
        file: "src/backend/redis/run.rs",
        text: include_str!("../../src/backend/redis/run.rs"),
        tokens: &[("tries > 1", "a call is tried at most twice")],
    },
    Tie {
        transition: "client: window end",
        file: "src/backend/script.rs",
        text: include_str!("../../src/backend/script.rs"),
        tokens: &[
            (
                "Duration::from_millis(25)",
                "a try's window: its read timeout + 25 ms",
            ),
            (
                "crate::clock::server_now(offset_ms).saturating_add(window)",
                "the window end: the server's clock as estimated now + the window",
            ),
        ],
    },
    Tie {
        transition: "client: window end",
        file: "src/clock.rs",
        text: include_str!("../../src/clock.rs"),
        tokens: &[
            (
                "monotonic_ms().saturating_add(offset_ms)",
                "server now = monotonic clock + offset (gaps 3, 4)",
            ),
            ("START.get_or_init(Instant::now)", "the monotonic clock"),
            (
                "_ => earliest,",
                "a long reading's offset is never ahead (the model's offset: exact)",
            ),
        ],
    },
    Tie {
        transition: "client: window end",
        file: "src/backend/redis/pool.rs",
        text: include_str!("../../src/backend/redis/pool.rs"),
        tokens: &[
            (
                "let before = crate::clock::monotonic_ms();",
                "the offset read against the monotonic clock",
            ),
            (
                "let (offset, coarse) = shared.offset_from(&reading);",
                "TIME against the midpoint of a short reading, never ahead of the server after a long one",
            ),
        ],
    },
    Tie {
        transition: "client: record TTLs",
        file: "src/ops/mod.rs",
        text: include_str!("../../src/ops/mod.rs"),
        tokens: &[
            (
                "const RECORD_SLACK_MS: i64 = 5_000;",
                "one tick of slack (`Scenario::derived`: 2 windows + 1 tick)",
            ),
            (
                "let window = timeout.saturating_add(crate::backend::WINDOW_MARGIN);",
                "a try's window",
            ),
            (".saturating_mul(2)", "two tries' windows (gaps 2, 6)"),
            ("floor_ms.max(", "never below the fixed TTL"),
        ],
    },
    Tie {
        transition: "client: record TTLs",
        file: "src/lock/release.rs",
        text: include_str!("../../src/lock/release.rs"),
        tokens: &[
            ("const UNLOCK_LATCH_MS: i64 = 10_000;", "the latch's floor"),
            (
                "ops::record_keep_ms(backend, UNLOCK_LATCH_MS)",
                "the latch TTL derived from the response timeout (gaps 2, 6)",
            ),
        ],
    },
    Tie {
        transition: "client: record TTLs",
        file: "src/ops/lock.rs",
        text: include_str!("../../src/ops/lock.rs"),
        tokens: &[(
            "Some(record_keep_ms(backend, lease_ms)).filter(|keep_ms| *keep_ms > lease_ms)",
            "the attempt record kept the derived TTL when longer than the lease",
        )],
    },
];
