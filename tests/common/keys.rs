//! The keys and channels of the store, built once for every test, from
//! Redisson's rules as `WIRE.md` states them (and redisync's own records
//! as `src/ops/mod.rs` tables them) — never from the library's own
//! builders, so that a test comparing the two checks something.
//!
//! `prefixed("p", name)` is `p:{name}` and `suffixed(name, "s")` is
//! `{name}:s`; a name that already holds a `{` gets no braces (its own hash
//! tag decides the slot): `lock_channel("a")` is
//! `redisson_lock__channel:{a}`, `lock_channel("{t}:1")` is
//! `redisson_lock__channel:{t}:1`.

/// `p:{name}`, or `p:name` when `name` has its own hash tag.
pub fn prefixed(p: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{p}:{name}")
    } else {
        format!("{p}:{{{name}}}")
    }
}

/// `{name}:s`, or `name:s` when `name` has its own hash tag.
pub fn suffixed(name: &str, s: &str) -> String {
    if name.contains('{') {
        format!("{name}:{s}")
    } else {
        format!("{{{name}}}:{s}")
    }
}

/// A lock's (and a fenced lock's) unlock channel.
pub fn lock_channel(name: &str) -> String {
    prefixed("redisson_lock__channel", name)
}

/// One unlock request's latch key (`request`: its id).
pub fn unlock_latch(name: &str, request: &str) -> String {
    format!("{}:{request}", prefixed("redisson_unlock_latch", name))
}

/// A fair lock's queue of waiter ids (a list, head first).
pub fn fair_queue(name: &str) -> String {
    prefixed("redisson_lock_queue", name)
}

/// A fair lock's slot deadlines (a sorted set, waiter id → server ms).
pub fn fair_timeouts(name: &str) -> String {
    prefixed("redisson_lock_timeout", name)
}

/// A fenced lock's token counter.
pub fn fence_counter(name: &str) -> String {
    prefixed("redisson_lock_token", name)
}

/// A read-write lock's channel (both halves).
pub fn rw_channel(name: &str) -> String {
    prefixed("redisson_rwlock", name)
}

/// A semaphore's (and a permit-expirable semaphore's) channel.
pub fn semaphore_channel(name: &str) -> String {
    prefixed("redisson_sc", name)
}

/// A permit-expirable semaphore's permit expiries.
pub fn permit_timeouts(name: &str) -> String {
    suffixed(name, "timeout")
}

/// An acquire attempt's record (redisync only).
pub fn attempt_record(name: &str, id: &str) -> String {
    suffixed(name, &format!("redisync_attempt:{id}"))
}

/// A counting or force call's op record (redisync only).
pub fn op_record(name: &str, id: &str) -> String {
    suffixed(name, &format!("redisync_op:{id}"))
}

/// A reentrant lock's waiter queue (redisync only).
pub fn waiter_queue(name: &str) -> String {
    suffixed(name, "redisync_waiters")
}

/// A count-down latch's channel: Redisson braces the whole name, its own
/// hash tag included (`redisson_countdownlatch__channel__{{t}:1}`).
pub fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// A read-write lock's read hold `n` of `holder` (a string, TTL its lease).
pub fn read_hold(name: &str, holder: &str, n: u32) -> String {
    suffixed(name, &format!("{holder}:rwlock_timeout:{n}"))
}

/// A queued fair-lock waiter's direct-handoff mark (redisync only).
pub fn fair_direct(name: &str, waiter: &str) -> String {
    suffixed(name, &format!("redisync_fair_direct:{waiter}"))
}
