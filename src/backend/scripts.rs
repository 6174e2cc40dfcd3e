//! The Lua scripts, one per atomic operation, loaded once from `lua/`.
//!
//! Each is run with EVALSHA; `redis::Script::invoke` reloads it on NOSCRIPT,
//! so a `SCRIPT FLUSH` or a server restart mid-run costs one extra round trip.
//! The KEYS/ARGV/return contract of each is in its file's header comment.
//! The fair-lock scripts share `lua/fair_lock_prelude.lua`, and the
//! permit-expirable semaphore's share `lua/expirable_prelude.lua`, and every
//! script that takes a number in ARGV starts with `lua/args_prelude.lua` (the
//! argument checks it runs before its first write), prepended at compile
//! time: each operation is still one self-contained script.

use std::sync::LazyLock;

use redis::Script;

/// One script in its two forms: as written (`PUBLISH`), and for a Redis
/// Cluster, where messages go through sharded pub/sub (`SPUBLISH`, which
/// Redisson uses on Redis 7+ clusters; the two namespaces do not see each
/// other). The sharded form is derived at load time, so `lua/` keeps one
/// file per operation and every command stays a literal name.
#[derive(Debug)]
pub(crate) struct Lua {
    #[cfg(test)]
    code: String,
    plain: Script,
    sharded: Script,
}

impl Lua {
    fn new(code: &str) -> Self {
        Lua {
            #[cfg(test)]
            code: code.to_owned(),
            plain: Script::new(code),
            sharded: Script::new(&sharded(code)),
        }
    }

    /// The form for a cluster (`sharded`) or a single server.
    pub(crate) fn get(&self, sharded: bool) -> &Script {
        if sharded { &self.sharded } else { &self.plain }
    }
}

/// `code` with every `redis.call('publish', ...)` made `spublish`.
fn sharded(code: &str) -> String {
    code.replace("redis.call('publish',", "redis.call('spublish',")
}

/// `lua/lock_acquire.lua`: KEYS lock; ARGV lease ms, holder. nil = acquired, else PTTL.
pub(crate) static LOCK_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/lock_acquire.lua")
    ))
});

/// `lua/fenced_lock_acquire.lua`: KEYS lock, token counter; ARGV lease ms,
/// holder. {-1, token} = acquired , else {PTTL, -1}.
pub(crate) static FENCED_LOCK_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/fenced_lock_acquire.lua")
    ))
});

/// `lua/lock_renew.lua`: KEYS lock; ARGV lease ms, holder. 1 = renewed, 0 = not ours.
pub(crate) static LOCK_RENEW: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/lock_renew.lua")
    ))
});

/// `lua/lock_release.lua`: KEYS lock, channel, latch; ARGV message, lease ms,
/// holder, latch ms. nil = not held, 0 = still held, 1 = released.
pub(crate) static LOCK_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/lock_release.lua")
    ))
});

/// `lua/lock_force_release.lua`: KEYS lock, channel; ARGV message. 1 = existed.
pub(crate) static LOCK_FORCE_RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/lock_force_release.lua")));

/// `lua/lock_state.lua`: KEYS lock; ARGV holder. {exists, hold count, PTTL}.
pub(crate) static LOCK_STATE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/lock_state.lua")));

/// `lua/fair_lock_acquire.lua`: KEYS lock, queue, slots; ARGV lease ms, holder, allowance ms, now ms, enqueue. nil = acquired, else ms to wait.
pub(crate) static FAIR_LOCK_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/fair_lock_prelude.lua"),
        include_str!("../../lua/fair_lock_acquire.lua")
    ))
});

/// `lua/fair_lock_release.lua`: KEYS lock, queue, slots, channel prefix, latch; ARGV message, lease ms, holder, now ms, latch ms. nil/0/1.
pub(crate) static FAIR_LOCK_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/fair_lock_prelude.lua"),
        include_str!("../../lua/fair_lock_release.lua")
    ))
});

/// `lua/fair_lock_cancel.lua`: KEYS queue, slots; ARGV waiter, allowance ms. 1 = was queued.
pub(crate) static FAIR_LOCK_CANCEL: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/fair_lock_cancel.lua")
    ))
});

/// `lua/fair_lock_force_release.lua`: KEYS lock, queue, slots, channel prefix; ARGV message, now ms. 1 = existed.
pub(crate) static FAIR_LOCK_FORCE_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/fair_lock_prelude.lua"),
        include_str!("../../lua/fair_lock_force_release.lua")
    ))
});

/// `lua/read_lock_acquire.lua`: KEYS lock, timeout prefix; ARGV lease ms, holder, write field. nil = acquired, else PTTL.
pub(crate) static READ_LOCK_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/read_lock_acquire.lua")
    ))
});

/// `lua/write_lock_acquire.lua`: KEYS lock; ARGV lease ms, write field, read field. nil = acquired, -3 = caller reads, else PTTL.
pub(crate) static WRITE_LOCK_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/write_lock_acquire.lua")
    ))
});

/// `lua/read_lock_release.lua`: KEYS lock, channel, timeout prefix, key prefix, latch; ARGV message, holder, latch ms. nil/0/1.
pub(crate) static READ_LOCK_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/read_lock_release.lua")
    ))
});

/// `lua/write_lock_release.lua`: KEYS lock, channel, latch; ARGV message, lease ms, write field, latch ms. nil/0/1.
pub(crate) static WRITE_LOCK_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/write_lock_release.lua")
    ))
});

/// `lua/read_lock_renew.lua`: KEYS lock, timeout prefix; ARGV lease ms, holder. 1 = renewed.
pub(crate) static READ_LOCK_RENEW: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/read_lock_renew.lua")
    ))
});

/// `lua/rw_lock_force_release.lua`: KEYS lock, channel; ARGV mode, message. 1 = deleted.
pub(crate) static RW_LOCK_FORCE_RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/rw_lock_force_release.lua")));

/// `lua/rw_lock_state.lua`: KEYS lock; ARGV field. {mode, hold count, PTTL}.
pub(crate) static RW_LOCK_STATE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/rw_lock_state.lua")));

/// `lua/counter_set_if_absent.lua`: KEYS counter, channel; ARGV value, message. 1 = set.
pub(crate) static COUNTER_SET_IF_ABSENT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/counter_set_if_absent.lua")
    ))
});

/// `lua/counter_get.lua`: KEYS counter. Its value, 0 when absent.
pub(crate) static COUNTER_GET: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/counter_get.lua")));

/// `lua/semaphore_add.lua`: KEYS semaphore, channel; ARGV delta. The new count.
pub(crate) static SEMAPHORE_ADD: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/semaphore_add.lua")
    ))
});

/// `lua/semaphore_try_acquire.lua`: KEYS semaphore; ARGV permits. 1 = taken.
pub(crate) static SEMAPHORE_TRY_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/semaphore_try_acquire.lua")
    ))
});

/// `lua/semaphore_drain.lua`: KEYS semaphore. How many were available.
pub(crate) static SEMAPHORE_DRAIN: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/semaphore_drain.lua")));

/// `lua/expirable_acquire.lua`: KEYS available, leases, channel; ARGV id, lease end ms, now ms. nil = taken, else ms to wait.
pub(crate) static EXPIRABLE_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/expirable_prelude.lua"),
        include_str!("../../lua/expirable_acquire.lua")
    ))
});

/// `lua/expirable_release.lua`: KEYS available, leases, channel; ARGV id, now ms. 1 = released.
pub(crate) static EXPIRABLE_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/expirable_prelude.lua"),
        include_str!("../../lua/expirable_release.lua")
    ))
});

/// `lua/expirable_available.lua`: KEYS available, leases, channel; ARGV now ms. The available permits.
pub(crate) static EXPIRABLE_AVAILABLE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/args_prelude.lua"),
        include_str!("../../lua/expirable_prelude.lua"),
        include_str!("../../lua/expirable_available.lua")
    ))
});

/// `lua/latch_count_down.lua`: KEYS latch, channel; ARGV zero message. The new count.
pub(crate) static LATCH_COUNT_DOWN: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/latch_count_down.lua")));

/// `lua/latch_delete.lua`: KEYS latch, channel; ARGV new-count message. 1 = existed.
pub(crate) static LATCH_DELETE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/latch_delete.lua")));

/// Every script, for tests that check their hashes.
#[cfg(test)]
pub(crate) fn all() -> [(&'static str, &'static Lua); 26] {
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
        ("counter_set_if_absent", &COUNTER_SET_IF_ABSENT),
        ("counter_get", &COUNTER_GET),
        ("semaphore_add", &SEMAPHORE_ADD),
        ("semaphore_try_acquire", &SEMAPHORE_TRY_ACQUIRE),
        ("semaphore_drain", &SEMAPHORE_DRAIN),
        ("expirable_acquire", &EXPIRABLE_ACQUIRE),
        ("expirable_release", &EXPIRABLE_RELEASE),
        ("expirable_available", &EXPIRABLE_AVAILABLE),
        ("latch_count_down", &LATCH_COUNT_DOWN),
        ("latch_delete", &LATCH_DELETE),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_hashes_are_sha1_hex_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        for (name, lua) in all() {
            let script = lua.get(false);
            let hash = script.get_hash();
            assert_eq!(hash.len(), 40, "{name}");
            assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
            assert!(
                seen.insert(hash.to_owned()),
                "{name} duplicates another script"
            );
        }
    }

    #[test]
    fn sharded_forms_publish_with_spublish_only() {
        let mut publishing = 0;
        for (name, lua) in all() {
            let sharded = super::sharded(&lua.code);
            assert!(!sharded.contains("'publish'"), "{name}");
            if lua.code.contains("'publish'") {
                publishing += 1;
                assert!(sharded.contains("redis.call('spublish',"), "{name}");
                assert_ne!(
                    lua.get(false).get_hash(),
                    lua.get(true).get_hash(),
                    "{name}"
                );
            } else {
                assert_eq!(
                    lua.get(false).get_hash(),
                    lua.get(true).get_hash(),
                    "{name}"
                );
            }
        }
        assert!(publishing >= 12, "{publishing}");
    }
}
