//! Redisson's key and channel names (see the schema table in
//! [`crate::ops`]).
//!
//! Every auxiliary key and channel of a primitive wraps the object name in a
//! `{...}` hash tag, so all of them sit in the object's Redis Cluster slot. If
//! the name already contains `{`, no braces are added and the user's own hash
//! tag decides the slot.

/// `p:{name}` (or `p:name` when `name` already has a hash tag).
pub(crate) fn prefix(p: &str, name: &str) -> String {
    let mut key = String::with_capacity(p.len() + name.len() + 3);
    push_prefixed(&mut key, p, name);
    key
}

/// Appends [`prefix`]`(p, name)` to `key` (no string of its own, no
/// formatting: for keys built on every call).
pub(crate) fn push_prefixed(key: &mut String, p: &str, name: &str) {
    key.push_str(p);
    key.push(':');
    push_tagged(key, name);
}

/// Appends `name` as its keys spell it: as it is when it names its own
/// hash tag (`{`), else wrapped in one (`{name}`), as Redisson does.
fn push_tagged(key: &mut String, name: &str) {
    if name.contains('{') {
        key.push_str(name);
    } else {
        key.push('{');
        key.push_str(name);
        key.push('}');
    }
}

/// The pub/sub channel of a reentrant lock: `redisson_lock__channel:{name}`.
pub(crate) fn lock_channel(name: &str) -> String {
    prefix("redisson_lock__channel", name)
}

/// The key prefix of a lock's unlock latches; the release script appends
/// `:<request id>`: `redisson_unlock_latch:{name}`.
pub(crate) fn unlock_latch_prefix(name: &str) -> String {
    prefix(UNLOCK_LATCH, name)
}

/// The unlock latches' key prefix before the lock's name.
pub(crate) const UNLOCK_LATCH: &str = "redisson_unlock_latch";

/// A fenced lock's token counter: `redisson_lock_token:{name}` (no expiry).
pub(crate) fn fence_token(name: &str) -> String {
    prefix("redisson_lock_token", name)
}

/// The unlock message value Redisson publishes on a lock's channel.
pub(crate) const UNLOCK_MESSAGE: &str = "0";

/// The read-unlock message: a write lock's final release (wakes every waiter).
pub(crate) const READ_UNLOCK_MESSAGE: &str = "1";

/// A fair lock's waiter queue: `redisson_lock_queue:{name}`.
pub(crate) fn fair_queue(name: &str) -> String {
    prefix("redisson_lock_queue", name)
}

/// A fair lock's slot deadlines: `redisson_lock_timeout:{name}`.
pub(crate) fn fair_timeouts(name: &str) -> String {
    prefix("redisson_lock_timeout", name)
}

/// A semaphore's channel (both kinds): `redisson_sc:{name}`.
pub(crate) fn semaphore_channel(name: &str) -> String {
    prefix("redisson_sc", name)
}

/// A permit-expirable semaphore's leases: `{name}:timeout`.
pub(crate) fn expirable_leases(name: &str) -> String {
    if name.contains('{') {
        format!("{name}:timeout")
    } else {
        format!("{{{name}}}:timeout")
    }
}

/// A fresh record key for one counting call on `name` (redisync only, in
/// the object's slot, under the `{name}:` keys an ACL already grants):
/// `{name}:redisync_op:<op id>`, the id this process's random prefix and a
/// counter (no random draw per call), unique across clients and runs. See
/// `ops::semaphore::add_recorded`.
pub(crate) fn new_op_record(name: &str) -> String {
    static PREFIX: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| uuid::Uuid::new_v4().simple().to_string());
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // Relaxed: only uniqueness matters; fetch_add is atomic in any order.
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{}:redisync_op:{}{n:x}",
        rw_key_prefix(name),
        PREFIX.as_str()
    )
}

/// A count-down latch's channel: `redisson_countdownlatch__channel__{name}`
/// (braces always added, plain concatenation, as Redisson does).
pub(crate) fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// The latch's "opened" message: the count reached zero (wakes every waiter).
pub(crate) const LATCH_ZERO_MESSAGE: &str = "0";

/// The latch's "new count" message: set or deleted.
pub(crate) const LATCH_NEW_COUNT_MESSAGE: &str = "1";

/// A read-write lock's channel: `redisson_rwlock:{name}`.
pub(crate) fn rw_channel(name: &str) -> String {
    prefix("redisson_rwlock", name)
}

/// The prefix of every holder's read-hold keys: `{name}` (or `name` when it
/// has a hash tag).
pub(crate) fn rw_key_prefix(name: &str) -> String {
    if name.contains('{') {
        name.to_owned()
    } else {
        format!("{{{name}}}")
    }
}

/// One holder's read-hold key prefix: `{name}:<holder>:rwlock_timeout`.
pub(crate) fn rw_timeout_prefix(name: &str, holder: &str) -> String {
    format!("{}:{holder}:rwlock_timeout", rw_key_prefix(name))
}

/// A reentrant lock's waiter queue (redisync only, under the `{name}:` keys
/// an ACL already grants): `{name}:redisync_waiters`, see `ops::handoff`.
pub(crate) fn waiter_queue(name: &str) -> String {
    tagged(name, "redisync_waiters")
}

/// The clients that waited on a reentrant lock lately (redisync only):
/// `{name}:redisync_clients`, see `ops::handoff`.
pub(crate) fn waiting_clients(name: &str) -> String {
    tagged(name, "redisync_clients")
}

/// A reentrant lock's count of handoffs in a row (redisync only):
/// `{name}:redisync_handoffs`.
pub(crate) fn handoff_streak(name: &str) -> String {
    tagged(name, "redisync_handoffs")
}

/// The prefix of the channels on which a reentrant lock's releases tell a
/// client that one of its waiters was handed the lock (redisync only):
/// `redisson_lock__channel:{name}:redisync:`, the client id follows. Under
/// the lock's own channel name, so that an ACL granting `&redisson_*`
/// grants it too; no Redisson channel has this form (a fair lock's waiter
/// channels end in `<uuid>:<thread id>`).
pub(crate) fn client_channel_prefix(name: &str) -> String {
    format!("{}:redisync:", lock_channel(name))
}

/// The prefix of a fair lock's direct marks (redisync only):
/// `{name}:redisync_fair_direct:`, the waiter's holder id follows; see
/// `ops::fair_lock`.
pub(crate) fn fair_direct_prefix(name: &str) -> String {
    tagged(name, "redisync_fair_direct:")
}

/// `{name}:<suffix>` (the name's own hash tag if it has one).
fn tagged(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// One acquire attempt's record (redisync only, in the lock's slot, and
/// under the `{name}:` keys an ACL already grants for the per-holder read
/// holds): `{name}:redisync_attempt:<id prefix><n in hex>`, see
/// `ops::lock::acquire_recorded`.
///
/// Built in one allocation and without formatting: every acquire and every
/// release of a reentrant lock spells one.
pub(crate) fn acquire_attempt(name: &str, id_prefix: &str, n: u64) -> String {
    let mut key = String::with_capacity(name.len() + id_prefix.len() + 36);
    push_tagged(&mut key, name);
    key.push_str(":redisync_attempt:");
    key.push_str(id_prefix);
    crate::spell::push_hex(&mut key, n);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_records_are_in_the_lock_slot() {
        assert_eq!(acquire_attempt("a", "x", 31), "{a}:redisync_attempt:x1f");
        assert_eq!(
            acquire_attempt("{a}:b", "p", 0),
            "{a}:b:redisync_attempt:p0"
        );
    }

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
        assert_eq!(fair_queue("a"), "redisson_lock_queue:{a}");
        assert_eq!(fair_timeouts("a"), "redisson_lock_timeout:{a}");
        assert_eq!(rw_channel("a"), "redisson_rwlock:{a}");
        assert_eq!(semaphore_channel("s"), "redisson_sc:{s}");
        assert_eq!(expirable_leases("s"), "{s}:timeout");
        assert_eq!(expirable_leases("{s}x"), "{s}x:timeout");
        assert_eq!(latch_channel("l"), "redisson_countdownlatch__channel__{l}");
        assert_eq!(
            latch_channel("{l}"),
            "redisson_countdownlatch__channel__{{l}}"
        );
        assert_eq!(rw_timeout_prefix("a", "u:1"), "{a}:u:1:rwlock_timeout");
        assert_eq!(rw_timeout_prefix("{a}b", "u:1"), "{a}b:u:1:rwlock_timeout");
    }
}
