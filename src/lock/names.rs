//! What a reentrant lock's acquire and release spell from its name on
//! every call (its channel, its waiter queue's keys, this client's handoff
//! channel), kept per thread for the lock it used last: an uncontended
//! `lock()` + `unlock()` built them twice each (about 40 allocations a pair,
//! most of them `format!`'s regrowths). Not stored in the lock's keys: a
//! client may hold 100,000 locks, and a held lock keeps only its name.

use std::cell::{OnceCell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use crate::flavor::{Flavor, Holder, LockKeys};
use crate::ops::handoff::Queue;

/// One lock's spelled names (one claim window, one handoff streak).
pub(super) struct Names {
    name: Arc<str>,
    claim_ms: i64,
    /// `redisson_lock__channel:{name}`: where its waiters listen.
    channel: String,
    queue: OnceCell<Queue>,
    /// The client id and its handoff channel (see `Queue::channel`).
    direct: OnceCell<(String, String)>,
}

impl Names {
    /// The lock's channel (its waiters', whoever holds it).
    pub(super) fn channel(&self) -> &str {
        &self.channel
    }

    /// The lock's waiter queue.
    pub(super) fn queue(&self) -> &Queue {
        self.queue.get_or_init(|| {
            Queue::new(&self.name, self.claim_ms, crate::pubsub::MAX_HANDOFF_STREAK)
        })
    }

    /// The channel on which `client_id` hears that the queue handed one of
    /// its waiters the lock.
    pub(super) fn direct(&self, client_id: &str) -> String {
        let (id, channel) = self
            .direct
            .get_or_init(|| (client_id.to_owned(), self.queue().channel(client_id)));
        if id == client_id {
            channel.clone()
        } else {
            self.queue().channel(client_id)
        }
    }
}

thread_local! {
    static LAST: RefCell<Option<Rc<Names>>> = const { RefCell::new(None) };
}

/// The names of the reentrant lock `keys` with claim window `claim_ms`:
/// this thread's last ones if they are the same lock's, else new ones
/// (which replace them). `None` for the other flavors (a fair lock's
/// waiters each have their own channel).
pub(super) fn of(keys: &LockKeys, claim_ms: i64) -> Option<Rc<Names>> {
    if keys.flavor != Flavor::Reentrant {
        return None;
    }
    LAST.try_with(|last| {
        let mut last = last.try_borrow_mut().ok()?;
        if let Some(names) = last.as_ref().filter(|names| {
            names.claim_ms == claim_ms
                && (Arc::ptr_eq(&names.name, &keys.name) || names.name == keys.name)
        }) {
            return Some(Rc::clone(names));
        }
        let names = Rc::new(Names {
            name: Arc::clone(&keys.name),
            claim_ms,
            channel: crate::keys::lock_channel(&keys.name),
            queue: OnceCell::new(),
            direct: OnceCell::new(),
        });
        *last = Some(Rc::clone(&names));
        Some(names)
    })
    .ok()
    .flatten()
}

/// `holder`'s wait channel on `keys`: from `names` when given.
pub(super) fn wait_channel<'a>(
    names: Option<&'a Names>,
    keys: &LockKeys,
    holder: &Holder,
) -> std::borrow::Cow<'a, str> {
    match names {
        Some(names) => std::borrow::Cow::Borrowed(names.channel()),
        None => std::borrow::Cow::Owned(keys.wait_channel(holder)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_lock_s_own_and_follow_the_last_lock() {
        let a = LockKeys::new(Flavor::Reentrant, "names:a".to_owned());
        let b = LockKeys::new(Flavor::Reentrant, "names:b".to_owned());
        let first = of(&a, 6_000).unwrap();
        assert_eq!(first.channel(), crate::keys::lock_channel("names:a"));
        assert_eq!(first.queue().key(), "{names:a}:redisync_waiters");
        assert_eq!(
            first.direct("c1"),
            Queue::new("names:a", 6_000, crate::pubsub::MAX_HANDOFF_STREAK).channel("c1")
        );
        assert_eq!(
            first.direct("c2"),
            Queue::new("names:a", 6_000, crate::pubsub::MAX_HANDOFF_STREAK).channel("c2")
        );
        assert!(Rc::ptr_eq(&first, &of(&a, 6_000).unwrap()));
        // Another claim window or another lock: other names.
        assert_eq!(
            of(&a, 7_000).unwrap().queue().claim_window().as_millis(),
            7_000
        );
        let other = of(&b, 6_000).unwrap();
        assert_eq!(other.channel(), crate::keys::lock_channel("names:b"));
        assert_eq!(other.queue().key(), "{names:b}:redisync_waiters");
        // Same name, another handle: the same names.
        let a2 = LockKeys::new(Flavor::Reentrant, "names:b".to_owned());
        assert!(Rc::ptr_eq(&other, &of(&a2, 6_000).unwrap()));
        let fair = LockKeys::new(Flavor::Fair, "names:f".to_owned());
        assert!(of(&fair, 6_000).is_none());
    }
}
