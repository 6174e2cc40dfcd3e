//! Which thread of this client holds each reentrant lock, as far as its own
//! guards tell.
//!
//! A thread that asks for a lock another thread of the same client holds
//! knows its attempt would fail: the store grants a reentrant lock to one
//! holder at a time. So it parks at once instead of spending a round trip
//! (and the server's time) on an attempt that can only return the TTL; the
//! holder's release hands the lock to it directly or publishes its unlock,
//! which wakes it as any failed attempt's park would be woken. Under
//! contention inside one client this halves the scripts per acquisition.
//!
//! The record is a hint, never a grant: it only ever makes a thread wait,
//! and only while the holder's lease is not known lost, so a hold the store
//! lost (a restart without persistence) costs a park bounded by the lease,
//! never a hang.

use crate::fast_map::FastMap;
use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::flavor::Renewal;
use crate::watchdog::Lease;

/// Per client: lock name → the holding thread's hold and its lease. Only
/// `Arc`s of what the guard already has, so a record costs a map slot and
/// no allocation of its own (a client may hold 100,000 locks).
#[derive(Debug, Default)]
pub(crate) struct LocalOwners {
    owners: Mutex<FastMap<ByName, Arc<Lease>>>,
}

/// A hold, found in the map by its lock's name.
#[derive(Debug)]
struct ByName(Arc<Renewal>);

impl ByName {
    fn name(&self) -> &str {
        &self.0.keys.name
    }

    fn field(&self) -> &str {
        self.0.holder.field()
    }
}

impl Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        self.name()
    }
}

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for ByName {}

impl Hash for ByName {
    // As `str` hashes, so that lookups by `&str` find it (`Borrow`).
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

/// What a thread asking for a lock may skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sibling {
    /// No other thread of this client is known to hold it: attempt.
    Unknown,
    /// Another thread holds it: park at most this long before attempting
    /// (the time its lease has left; `None` when too far to represent).
    Holds(Option<Duration>),
}

impl LocalOwners {
    /// `hold`'s outermost hold of its lock began, under `lease`.
    pub(crate) fn taken(&self, hold: &Arc<Renewal>, lease: &Arc<Lease>) {
        let mut owners = self.owners.lock();
        // `insert` keeps an equal key: replace the entry whole.
        owners.remove(&*hold.keys.name);
        owners.insert(ByName(Arc::clone(hold)), Arc::clone(lease));
    }

    /// `field` released its outermost hold of `name` (whatever the
    /// outcome). A record of another holder, made since (a handoff lands
    /// before its releaser returns), stays.
    pub(crate) fn released(&self, name: &str, field: &str) {
        let mut owners = self.owners.lock();
        let mine = owners
            .get_key_value(name)
            .is_some_and(|(hold, _)| hold.field() == field);
        if mine {
            owners.remove(name);
        }
    }

    /// Whether a holder other than `field` holds `name` with a lease not
    /// known lost at `now`.
    pub(crate) fn sibling_of(&self, name: &str, field: &str, now: Instant) -> Sibling {
        let owners = self.owners.lock();
        match owners.get_key_value(name) {
            Some((hold, lease))
                if hold.field() != field && lease.holds_beyond(now, Duration::ZERO) =>
            {
                Sibling::Holds(lease.ends().map(|end| end.saturating_duration_since(now)))
            }
            _ => Sibling::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flavor::{Flavor, LockKeys};

    fn hold(name: &str, field: &str) -> Arc<Renewal> {
        let keys = Arc::new(LockKeys::new(Flavor::Reentrant, name.to_owned()));
        let holder = keys.holder(field.to_owned());
        Arc::new(Renewal { keys, holder })
    }

    #[test]
    fn a_sibling_with_a_live_lease_is_reported_until_it_releases() {
        let owners = LocalOwners::default();
        let now = Instant::now();
        let lease = Lease::new(now, Duration::from_secs(30));
        owners.taken(&hold("jobs", "a:1"), &lease);
        let Sibling::Holds(Some(left)) = owners.sibling_of("jobs", "a:2", now) else {
            panic!("a sibling holds jobs");
        };
        assert!(left <= Duration::from_secs(30) && left > Duration::from_secs(29));
        // The holder itself re-enters: nothing to skip.
        assert_eq!(owners.sibling_of("jobs", "a:1", now), Sibling::Unknown);
        assert_eq!(owners.sibling_of("other", "a:2", now), Sibling::Unknown);
        owners.released("jobs", "a:1");
        assert_eq!(owners.sibling_of("jobs", "a:2", now), Sibling::Unknown);
    }

    #[test]
    fn a_handoff_recorded_before_its_releaser_returns_stays() {
        let owners = LocalOwners::default();
        let now = Instant::now();
        owners.taken(
            &hold("jobs", "a:1"),
            &Lease::new(now, Duration::from_secs(30)),
        );
        // The waiter a:2 was handed the lock and recorded itself first.
        owners.taken(
            &hold("jobs", "a:2"),
            &Lease::new(now, Duration::from_secs(30)),
        );
        owners.released("jobs", "a:1");
        assert!(matches!(
            owners.sibling_of("jobs", "a:3", now),
            Sibling::Holds(_)
        ));
        assert_eq!(owners.sibling_of("jobs", "a:2", now), Sibling::Unknown);
    }

    #[test]
    fn a_lease_run_out_or_lost_is_no_reason_to_wait() {
        let owners = LocalOwners::default();
        let now = Instant::now();
        owners.taken(
            &hold("short", "a:1"),
            &Lease::new(now, Duration::from_millis(10)),
        );
        let later = now + Duration::from_millis(11);
        assert_eq!(owners.sibling_of("short", "a:2", later), Sibling::Unknown);
    }
}
