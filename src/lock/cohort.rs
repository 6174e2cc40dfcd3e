//! Passing a hold between threads of one client with no call to the store:
//! a thread that releases its last hold of a reentrant lock while another
//! thread of its client is parked for it hands that thread the hold as it
//! is (its hash field, attempt record, lease and watchdog registration).
//! The store sees nothing until the hold leaves the client; the release
//! that sends it then counts the passes in the streak of redisync holders
//! in a row (`ops::handoff::release`), so a waiter outside the
//! queue (Redisson's) still has its turn after the same number of holders.
//!
//! A hold may be passed only as many times as the store's count allows:
//! a hold handed by a release script learns the count with it, and may be
//! passed until the streak's end; any other hold (taken with an attempt,
//! or handed by another client) is passed the usual way first, through the
//! store. A thread's hold goes to a waiter that would take a hold of the
//! same kind (the watchdog's, or a fixed lease) and sent no attempt in its
//! wait (so has no entry in the store's queue to leave). A fixed lease
//! restarts for its new holder: it holds on the rest of the old lease, and
//! if it outlives most of that, the watchdog raises the store's TTL to the
//! new holder's lease with a call that never shortens it (a watchdog hold
//! needs none: its watch goes with it).
//!
//! The hold keeps its hash field, which names the thread that took it from
//! the store; the two threads swap fields for this lock: the waiter holds
//! under the releaser's, and the releaser asks with the waiter's from now
//! on (each thread's field for a lock is looked up in this thread's
//! [`FIELDS`]), so no two threads of the client ever share one, and the
//! releaser's next attempt cannot re-enter the hold it passed.
//! `cohort_model.rs` checks that rule in every interleaving of up to three
//! threads (and shows that a releaser keeping its field breaks it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::acquire::AttemptId;
use super::{Lock, LockGuard, holds};
use crate::fast_map::FastMap;
use crate::flavor::Renewal;
use crate::holder::GuardHolder;
use crate::pubsub::Baton;
use crate::watchdog::Lease;
use crate::{Error, Result};

/// How much a fixed lease must have left to be passed to another thread:
/// its new holder holds on the rest of it until the watchdog's restart,
/// sent a third of the rest before its end, lands (one round trip).
const RESTART_MARGIN: Duration = Duration::from_millis(300);

/// Per lock name: (a thread's own holder id in one client, the field it
/// uses for that lock instead).
type Swapped = FastMap<Arc<str>, Vec<(Arc<str>, Arc<str>)>>;

thread_local! {
    /// This thread's hash field per lock where it is not the thread's own.
    /// Empty unless a hold was passed on this thread.
    static FIELDS: std::cell::RefCell<Swapped> = std::cell::RefCell::new(Swapped::default());
}

/// The field the thread whose own holder id is `own` uses for lock `name`:
/// its own, unless a pass swapped it.
pub(super) fn field_of(own: Arc<str>, name: &str) -> Arc<str> {
    FIELDS
        .try_with(|fields| {
            let fields = fields.borrow();
            if fields.is_empty() {
                return None;
            }
            fields
                .get(name)?
                .iter()
                .find(|(id, _)| *id == own)
                .map(|(_, field)| Arc::clone(field))
        })
        .ok()
        .flatten()
        .unwrap_or(own)
}

/// From now on the thread whose own holder id is `own` uses `field` for
/// lock `name`.
fn use_field(own: Arc<str>, name: &Arc<str>, field: Arc<str>) {
    let _ = FIELDS.try_with(|fields| {
        let mut fields = fields.borrow_mut();
        let list = fields.entry(Arc::clone(name)).or_default();
        list.retain(|(id, _)| *id != own);
        if field != own {
            list.push((own, field));
        }
        if list.is_empty() {
            fields.remove(&**name);
        }
    });
}

/// A hold on its way from one thread to another (inside a [`Baton`]).
/// Dropped untaken (its waiter's registration went first: the client shut
/// down), it releases the hold.
pub(super) struct PassedHold {
    lock: Lock,
    renewal: Arc<Renewal>,
    lease: Arc<Lease>,
    lease_ms: i64,
    /// Whether the watchdog renews it (else its lease is fixed).
    watchdog: bool,
    attempt: Option<AttemptId>,
    /// How many more passes the streak allows after this one.
    passes_left: u32,
    /// Passes since the store last counted this hold, this one included.
    passes: u32,
    taken: bool,
}

impl Drop for PassedHold {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        let lock = &self.lock;
        let waited = if self.watchdog {
            lock.client.watchdog().stop(&self.renewal, self.attempt)
        } else {
            lock.client.watchdog().cancel_restart(&self.renewal);
            None
        };
        let _bound = waited.map(|since| crate::deadline::enter(lock.unlock_deadline(since)));
        let holder = &self.renewal.holder;
        lock.client
            .local_owners()
            .released(&lock.keys.name, holder.field());
        let record = self.attempt.map(|id| id.key(&lock.keys.name));
        if let Err(error) = lock.release(holder, self.lease_ms, true, record, self.passes) {
            lock.client
                .events()
                .on_unlock_failed(&crate::event::UnlockFailedEvent {
                    name: lock.keys.name.to_string(),
                    error,
                });
        }
    }
}

impl<H: GuardHolder> LockGuard<H> {
    /// Passes this (outermost, released) hold to a parked thread of the
    /// client if the streak allows and one can take it as it is; true when
    /// passed (nothing else to do: a watchdog hold's watch goes with it). A
    /// fixed lease restarts for its new holder off the pass's path, and only
    /// if the hold outlives most of the old lease (see `watchdog::restart`).
    pub(super) fn pass_on(&self) -> bool {
        if H::EXPLICIT || self.passes_left == 0 || self.lease.is_lost() {
            return false;
        }
        // A fixed lease about to end goes through the store: its new holder
        // would hold on what is left of it until the restart lands.
        if !self.watchdog && !self.lease.holds_beyond(Instant::now(), RESTART_MARGIN) {
            return false;
        }
        let lock = &self.lock;
        let names = super::names::of(&lock.keys, lock.client.claim_window_ms());
        let channel =
            super::names::wait_channel(names.as_deref(), &lock.keys, &self.renewal.holder);
        let subscriber = lock.client.subscriber();
        let Some(offer) = subscriber.offer_to_adopt(&channel, !self.watchdog) else {
            return false;
        };
        // A fixed lease restarts for its new holder without delaying the
        // pass: it holds on the rest of this lease, which the store's TTL
        // covers, and the watchdog raises the TTL if the hold outlives most
        // of it (see `watchdog::restart`). Its release covers the longer of
        // the two leases.
        let (lease, lease_ms) = if self.watchdog {
            (Arc::clone(&self.lease), self.lease_ms.get())
        } else {
            let lease = Lease::until(self.lease.ends());
            let restart = lock.client.watchdog().restart_later(
                &self.renewal,
                self.attempt,
                &lease,
                offer.seat.lease_ms,
            );
            if restart.is_err() {
                // No scheduler thread, or a lease end it cannot tell:
                // released the usual way.
                subscriber.resolve(offer, crate::pubsub::Handoff::Refused);
                return false;
            }
            (lease, self.lease_ms.get().max(offer.seat.lease_ms))
        };
        let hold = PassedHold {
            lock: lock.clone(),
            renewal: Arc::clone(&self.renewal),
            lease: Arc::clone(&lease),
            lease_ms,
            watchdog: self.watchdog,
            attempt: self.attempt,
            passes_left: self.passes_left - 1,
            passes: self.passes.saturating_add(1),
            taken: false,
        };
        if !self.watchdog {
            // Its siblings wait out the new lease, not the old. Before the
            // pass: once passed, the hold may move on (and its record with
            // it) before this thread would write. (Not passed after all:
            // the usual release drops the record.)
            lock.client.local_owners().taken(&self.renewal, &lease);
        }
        match subscriber.resolve_pass(offer, Baton(Box::new(hold))) {
            Ok(field) => {
                // This thread asks with the waiter's field from now on.
                let own = crate::holder::shared_holder_id(lock.client.id(), self.holder.number());
                use_field(own, &lock.keys.name, field.into());
                true
            }
            Err(baton) => {
                if let Ok(mut hold) = baton.0.downcast::<PassedHold>() {
                    hold.taken = true;
                }
                if !self.watchdog {
                    // Not passed: this thread releases it (no restart).
                    lock.client.watchdog().cancel_restart(&self.renewal);
                }
                false
            }
        }
    }
}

impl<H: GuardHolder> Lock<H> {
    /// The guard of a hold another thread of this client passed this one
    /// (see [`LockGuard::pass_on`]).
    pub(super) fn adopt(&self, baton: Baton, by: H) -> Result<LockGuard<H>> {
        let Ok(mut hold) = baton.0.downcast::<PassedHold>() else {
            return Err(Error::backend(
                format!(
                    "lock {:?}: the hold another thread passed to this one is not a lock's \
                     (an internal error; nothing was taken)",
                    self.keys.name
                ),
                false,
            ));
        };
        hold.taken = true;
        let name = &self.keys.name;
        // This thread holds under the releaser's field, and asks with it.
        let own = crate::holder::shared_holder_id(self.client.id(), by.number());
        use_field(own, name, Arc::clone(&hold.renewal.holder.id));
        holds::hold_taken(holds::key(&hold.renewal.holder, name), H::EXPLICIT);
        crate::telemetry::hold_started(self.keys.primitive());
        Ok(LockGuard {
            lock: self.plain(),
            renewal: Arc::clone(&hold.renewal),
            lease_ms: std::cell::Cell::new(hold.lease_ms),
            lease: Arc::clone(&hold.lease),
            watchdog: hold.watchdog,
            token: None,
            attempt: hold.attempt,
            released: false,
            acquired_at: Instant::now(),
            holder: by,
            passes_left: hold.passes_left,
            passes: hold.passes,
        })
    }
}
