//! Redisson's key and channel names (see the schema table in
//! [`crate::backend`]).
//!
//! Every auxiliary key and channel of a primitive wraps the object name in a
//! `{...}` hash tag, so all of them sit in the object's Redis Cluster slot. If
//! the name already contains `{`, no braces are added and the user's own hash
//! tag decides the slot.

/// `p:{name}` (or `p:name` when `name` already has a hash tag).
pub(crate) fn prefix(p: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{p}:{name}")
    } else {
        format!("{p}:{{{name}}}")
    }
}

/// The pub/sub channel of a reentrant lock: `redisson_lock__channel:{name}`.
pub(crate) fn lock_channel(name: &str) -> String {
    prefix("redisson_lock__channel", name)
}

/// The key prefix of a lock's unlock latches; the release script appends
/// `:<request id>`: `redisson_unlock_latch:{name}`.
pub(crate) fn unlock_latch_prefix(name: &str) -> String {
    prefix("redisson_unlock_latch", name)
}

/// The unlock message value Redisson publishes on a lock's channel.
pub(crate) const UNLOCK_MESSAGE: &str = "0";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_redissons_hash_tag_rule() {
        assert_eq!(
            lock_channel("orders:42"),
            "redisson_lock__channel:{orders:42}"
        );
        assert_eq!(
            lock_channel("{orders}:42"),
            "redisson_lock__channel:{orders}:42"
        );
        assert_eq!(unlock_latch_prefix("a"), "redisson_unlock_latch:{a}");
    }
}
