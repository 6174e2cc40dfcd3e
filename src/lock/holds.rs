//! The hold counts kept in this process: how many live guards each holder
//! has per lock (per thread for thread holders, process-wide for explicit
//! owners), so that a release knows whether it is the holder's outermost
//! one (the one that may hand the lock over and drain phantom holds).

use std::sync::Arc;

use crate::fast_map::FastMap;
use crate::flavor::Holder;

/// A hold count's key: a holder (its id, and which half of a read-write
/// lock) on the lock whose key is `name`. Both strings are shared with the
/// lock's keys and the holder: a count costs no string of its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct HoldKey {
    holder: Arc<str>,
    name: Arc<str>,
    field_is_write: bool,
}

thread_local! {
    /// How many live guards this thread has per holder and lock (the holder
    /// id starts with the client's uuid, so it names the client too):
    /// the hold count the store *should* have for it. Guards are `!Send`,
    /// so a thread-local count is exact.
    static LOCAL_HOLDS: std::cell::RefCell<FastMap<HoldKey, u32>> =
        std::cell::RefCell::new(FastMap::default());
}

/// Live guards per holder and lock of explicit owners ([`LockOwner`]): their
/// guards move between threads, so their counts are process-wide.
static OWNED_HOLDS: std::sync::LazyLock<parking_lot::Mutex<FastMap<HoldKey, u32>>> =
    std::sync::LazyLock::new(Default::default);

/// Runs `f` on the hold counts of a holder kind: the explicit owners'
/// (`explicit`), else the calling thread's. `None` during thread teardown,
/// when the thread's map may be gone; then no count is kept and no release
/// drains phantoms (the safe side).
fn with_holds<R>(explicit: bool, f: impl FnOnce(&mut FastMap<HoldKey, u32>) -> R) -> Option<R> {
    if explicit {
        return Some(f(&mut OWNED_HOLDS.lock()));
    }
    LOCAL_HOLDS
        .try_with(|holds| f(&mut holds.borrow_mut()))
        .ok()
}

/// Counts a new guard under `key`; true when it is the
/// holder's outermost one.
pub(super) fn hold_taken(key: HoldKey, explicit: bool) -> bool {
    with_holds(explicit, |holds| {
        let count = holds.entry(key).or_insert(0);
        *count += 1;
        *count == 1
    })
    .unwrap_or(false)
}

/// Uncounts a guard; true when it was the holder's last one.
pub(super) fn hold_released(key: &HoldKey, explicit: bool) -> bool {
    with_holds(explicit, |holds| match holds.get_mut(key) {
        Some(count) if *count > 1 => {
            *count -= 1;
            false
        }
        Some(_) => {
            holds.remove(key);
            true
        }
        None => false,
    })
    .unwrap_or(false)
}

/// Whether the holder has a live guard under `key`; true
/// when that cannot be told (thread teardown: the safe side).
pub(super) fn held(key: &HoldKey, explicit: bool) -> bool {
    with_holds(explicit, |holds| holds.contains_key(key)).unwrap_or(true)
}

/// The key of a hold count: `holder` on the lock whose key is `name`.
pub(super) fn key(holder: &Holder, name: &Arc<str>) -> HoldKey {
    HoldKey {
        holder: Arc::clone(&holder.id),
        name: Arc::clone(name),
        field_is_write: holder.writes(),
    }
}
