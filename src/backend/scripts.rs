//! The Lua scripts, one per atomic operation, loaded once from `lua/`.
//!
//! Each is run with EVALSHA; `redis::Script::invoke` reloads it on NOSCRIPT,
//! so a `SCRIPT FLUSH` or a server restart mid-run costs one extra round trip.
//! The KEYS/ARGV/return contract of each is in its file's header comment.

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

/// Every script, for tests that check their hashes.
#[cfg(test)]
pub(crate) fn all() -> [(&'static str, &'static Script); 5] {
    [
        ("lock_acquire", &LOCK_ACQUIRE),
        ("lock_renew", &LOCK_RENEW),
        ("lock_release", &LOCK_RELEASE),
        ("lock_force_release", &LOCK_FORCE_RELEASE),
        ("lock_state", &LOCK_STATE),
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
