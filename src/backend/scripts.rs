//! The Lua scripts, one per atomic operation, loaded once from `lua/`.
//!
//! Each is run with EVALSHA; `redis::Script::invoke` reloads it on NOSCRIPT,
//! so a `SCRIPT FLUSH` or a server restart mid-run costs one extra round trip.
//! The KEYS/ARGV/return contract of each is in its file's header comment.
//! The fair-lock scripts share `lua/fair_lock_prelude.lua`, prepended at
//! compile time: each operation is still one self-contained script.

use std::sync::LazyLock;

use redis::Script;

/// `lua/lock_acquire.lua`: KEYS lock; ARGV lease ms, holder. nil = acquired, else PTTL.
pub(crate) static LOCK_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lock_acquire.lua")));

/// `lua/lock_renew.lua`: KEYS lock; ARGV lease ms, holder. 1 = renewed, 0 = not ours.
pub(crate) static LOCK_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lock_renew.lua")));

/// `lua/lock_release.lua`: KEYS lock, channel, latch; ARGV message, lease ms,
/// holder, latch ms. nil = not held, 0 = still held, 1 = released.
pub(crate) static LOCK_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lock_release.lua")));

/// `lua/lock_force_release.lua`: KEYS lock, channel; ARGV message. 1 = existed.
pub(crate) static LOCK_FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lock_force_release.lua")));

/// `lua/lock_state.lua`: KEYS lock; ARGV holder. {exists, hold count, PTTL}.
pub(crate) static LOCK_STATE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lock_state.lua")));

/// `lua/fair_lock_acquire.lua`: KEYS lock, queue, slots; ARGV lease ms, holder, allowance ms, now ms, enqueue. nil = acquired, else ms to wait.
pub(crate) static FAIR_LOCK_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../../lua/fair_lock_prelude.lua"),
        include_str!("../../lua/fair_lock_acquire.lua")
    ))
});

/// `lua/fair_lock_release.lua`: KEYS lock, queue, slots, channel prefix, latch; ARGV message, lease ms, holder, now ms, latch ms. nil/0/1.
pub(crate) static FAIR_LOCK_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../../lua/fair_lock_prelude.lua"),
        include_str!("../../lua/fair_lock_release.lua")
    ))
});

/// `lua/fair_lock_cancel.lua`: KEYS queue, slots; ARGV waiter, allowance ms. 1 = was queued.
pub(crate) static FAIR_LOCK_CANCEL: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/fair_lock_cancel.lua")));

/// `lua/fair_lock_force_release.lua`: KEYS lock, queue, slots, channel prefix; ARGV message, now ms. 1 = existed.
pub(crate) static FAIR_LOCK_FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../../lua/fair_lock_prelude.lua"),
        include_str!("../../lua/fair_lock_force_release.lua")
    ))
});

/// `lua/read_lock_acquire.lua`: KEYS lock, timeout prefix; ARGV lease ms, holder, write field. nil = acquired, else PTTL.
pub(crate) static READ_LOCK_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/read_lock_acquire.lua")));

/// `lua/write_lock_acquire.lua`: KEYS lock; ARGV lease ms, write field, read field. nil = acquired, -3 = caller reads, else PTTL.
pub(crate) static WRITE_LOCK_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/write_lock_acquire.lua")));

/// `lua/read_lock_release.lua`: KEYS lock, channel, timeout prefix, key prefix, latch; ARGV message, holder, latch ms. nil/0/1.
pub(crate) static READ_LOCK_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/read_lock_release.lua")));

/// `lua/write_lock_release.lua`: KEYS lock, channel, latch; ARGV message, lease ms, write field, latch ms. nil/0/1.
pub(crate) static WRITE_LOCK_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/write_lock_release.lua")));

/// `lua/read_lock_renew.lua`: KEYS lock, timeout prefix; ARGV lease ms, holder. 1 = renewed.
pub(crate) static READ_LOCK_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/read_lock_renew.lua")));

/// `lua/rw_lock_force_release.lua`: KEYS lock, channel; ARGV mode, message. 1 = deleted.
pub(crate) static RW_LOCK_FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rw_lock_force_release.lua")));

/// `lua/rw_lock_state.lua`: KEYS lock; ARGV field. {mode, hold count, PTTL}.
pub(crate) static RW_LOCK_STATE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rw_lock_state.lua")));

/// Every script, for tests that check their hashes.
#[cfg(test)]
pub(crate) fn all() -> [(&'static str, &'static Script); 16] {
    [
        ("lock_acquire", &LOCK_ACQUIRE),
        ("lock_renew", &LOCK_RENEW),
        ("lock_release", &LOCK_RELEASE),
        ("lock_force_release", &LOCK_FORCE_RELEASE),
        ("lock_state", &LOCK_STATE),
        ("fair_lock_acquire", &FAIR_LOCK_ACQUIRE),
        ("fair_lock_release", &FAIR_LOCK_RELEASE),
        ("fair_lock_cancel", &FAIR_LOCK_CANCEL),
        ("fair_lock_force_release", &FAIR_LOCK_FORCE_RELEASE),
        ("read_lock_acquire", &READ_LOCK_ACQUIRE),
        ("write_lock_acquire", &WRITE_LOCK_ACQUIRE),
        ("read_lock_release", &READ_LOCK_RELEASE),
        ("write_lock_release", &WRITE_LOCK_RELEASE),
        ("read_lock_renew", &READ_LOCK_RENEW),
        ("rw_lock_force_release", &RW_LOCK_FORCE_RELEASE),
        ("rw_lock_state", &RW_LOCK_STATE),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_hashes_are_sha1_hex_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        for (name, script) in all() {
            let hash = script.get_hash();
            assert_eq!(hash.len(), 40, "{name}");
            assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
            assert!(
                seen.insert(hash.to_owned()),
                "{name} duplicates another script"
            );
        }
    }
}
