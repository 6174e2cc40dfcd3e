//! The acquire loop of every lock handle: one recorded attempt; while
//! another holder has the lock, park on its channel (or, for a spin lock,
//! sleep with backoff) and try again; on success, the guard (watchdog or
//! fixed lease, local hold count); on a connection error, the undo of the
//! attempt whose outcome is unknown. Also the attempt ids whose records are
//! the holds' unlock latches.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Lock, LockGuard, holds};
use crate::flavor::{Holder, Renewal};
use crate::holder::GuardHolder;
use crate::local_owner::Sibling;
use crate::ops::fair_lock::WaitAttempt;
use crate::ops::lock::Acquire;
use crate::pubsub::Wake;
use crate::wait::{Attempt, First, Wait};
use crate::watchdog::Lease;
use crate::{Error, Result, keys};

/// How long an acquire waits for an earlier release of the same holder
/// that the cleanup worker is sending right now (capped by its deadline).
const SETTLE_WAIT: Duration = Duration::from_secs(3);

/// An acquire attempt's id: this process's random prefix and a counter
/// (cheap: no random draw per attempt), unique across clients and runs.
/// A guard keeps only the counter (8 bytes, no allocation: a client may hold
/// 100,000 locks; never zero, so an `Option` of it is 8 bytes too) and
/// spells the record's key when it releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AttemptId(std::num::NonZeroU64);

impl AttemptId {
    pub(crate) fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        // Relaxed: only uniqueness matters; fetch_add is atomic in any order.
        let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        AttemptId(std::num::NonZeroU64::new(next).unwrap_or(std::num::NonZeroU64::MIN))
    }

    /// The record's key for an attempt on the lock whose key is `name`
    /// (`{name}:redisync_attempt:<id>`).
    pub(crate) fn key(self, name: &str) -> String {
        static PREFIX: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| uuid::Uuid::new_v4().simple().to_string());
        keys::acquire_attempt(name, PREFIX.as_str(), self.0.get())
    }
}

/// How much longer than twice the lease a waiter's queue entry may last
/// (`lua/lock_acquire.lua` sets the queue's TTL to `2 × lease + 60 s`).
const QUEUE_TTL_EXTRA_MS: i64 = 60_000;

/// What a wait that ended with a connection error leaves behind in the
/// lock's waiter queue, for the undo to remove (see
/// [`Lock::undo_attempt`]).
struct QueueLeave {
    queue: crate::ops::handoff::Queue,
    /// The lock's channel (a given-up hold's unlock message goes there).
    channel: String,
    /// The wait's entry when it was queued to be handed the lock outright
    /// (`d|<wait id>|<holder id>`); else its entry is the holder id.
    entry: Option<String>,
}

/// A new id for one wait of this process (see
/// `ops::handoff::outright_entry`).
fn next_wait_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // Relaxed: only uniqueness matters; fetch_add is atomic in any order.
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl<H: GuardHolder> Lock<H> {
    /// The acquire loop behind every public acquire method (and the
    /// multi-lock's parts), for this handle's holder.
    pub(crate) fn acquire(
        &self,
        wait: Wait,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard<H>>> {
        let by = H::of(&self.who);
        // Every round trip of this call, the fair waiter's leaving
        // included, keeps to the caller's bound.
        crate::deadline::within(wait.deadline(), || self.acquire_within(wait, lease, by))
    }

    fn acquire_within(
        &self,
        wait: Wait,
        lease: Option<Duration>,
        by: H,
    ) -> Result<Option<LockGuard<H>>> {
        self.check_name()?;
        let lease_ms = match lease {
            Some(lease) => crate::error::millis("lease", lease)?,
            None => self.client.watchdog_ms(),
        };
        let client = &self.client;
        let backend = client.store();
        let keys = &self.keys;
        let holder = self.holder(by.number());
        // A fair waiter's queue slot: the wait it asked for, or the default.
        let (allowance_ms, enqueue) = match wait {
            Wait::Forever => (client.fair_wait_ms(), true),
            Wait::Never => (client.fair_wait_ms(), false),
            Wait::Until(_, wait) => (crate::flavor::saturating_ms(wait).max(1), true),
        };
        // When the latest attempt was sent: the store's lease starts after it.
        let sent = std::cell::Cell::new(Instant::now());
        // The latest attempt's record: only the latest can have an unknown
        // outcome (each earlier one was answered).
        // On a Redis Cluster too: while the slot migrates, the recorded
        // script is refused (TRYAGAIN) and retried within the call's bound.
        let attempt_key = std::cell::Cell::new(None::<AttemptId>);
        // A reentrant lock's waiter joins the lock's queue in the store, so
        // that a release in any client hands the lock to one waiter of the
        // whole fleet (see `ops::handoff`); a spin lock's waiter, which
        // hears nothing, does not. Nor on a Redis Cluster, where PUBLISH
        // counts only the receivers on the lock's node, so a releasing
        // script cannot tell a listening client from one that is gone.
        // Spelled once per thread and lock (see `names`).
        let names = super::names::of(keys, client.claim_window_ms());
        let queue = names
            .as_deref()
            .filter(|_| {
                keys.hands_over() && enqueue && self.spin.is_none() && client.queues_waiters()
            })
            .map(super::names::Names::queue);
        let wait_channel = super::names::wait_channel(names.as_deref(), keys, &holder);
        // A thread whose watchdog will renew its hold may be handed the lock
        // outright (the claim window as TTL until the watchdog renews it):
        // it holds the lock without a round trip of its own. So may a
        // thread with a fixed lease waiting in the reentrant lock's queue
        // (its entry carries the lease, the handed hold's TTL). Others only
        // have it reserved, and take it with their next attempt.
        // Only where the handoff's age can be read (the server's clock is
        // known): a waiter given an old handoff would take a hold
        // that has run out.
        let leased = lease.is_some();
        let wait_id = ((!leased || queue.is_some())
            && !H::EXPLICIT
            && client.store().server_now_ms().is_some())
        .then(next_wait_id);
        let outright = wait_id.map(|wait| {
            if leased {
                crate::ops::handoff::leased_entry(wait, lease_ms, &holder.id)
            } else {
                crate::ops::handoff::outright_entry(wait, &holder.id)
            }
        });
        // Whether the latest attempt left this waiter in that queue.
        let queued = std::cell::Cell::new(false);
        let attempts = std::cell::Cell::new(0_u32);
        // How many attempts of this wait the store answered.
        let answered = std::cell::Cell::new(0_u32);
        // Whether this thread holds the lock already (a re-entry): looked up
        // once, as a wait cannot change it.
        let re_entry = holds::held(&holds::key(&holder, &keys.name), H::EXPLICIT);
        let attempt = || {
            sent.set(Instant::now());
            crate::deadline::take_timeout_cut();
            let id = AttemptId::new();
            let key = id.key(&keys.name);
            let retry = attempts.get() > 0;
            let outcome = match queue {
                // A retry, or a first attempt of a client that has just
                // freed the lock for a waiter outside the queue, keeps off
                // it while it is yielded (see `ops::handoff`).
                Some(queue) => crate::ops::handoff::acquire_keeping_off(
                    backend,
                    &keys.name,
                    &holder.id,
                    lease_ms,
                    &key,
                    queue,
                    retry,
                    outright.as_deref(),
                    retry || client.subscriber().yielding(&wait_channel),
                )
                .map(|acquired| {
                    queued.set(!acquired.is_acquired());
                    (acquired, None)
                }),
                None => keys.attempt_recorded(
                    backend,
                    &holder,
                    lease_ms,
                    allowance_ms,
                    enqueue,
                    &key,
                    wait_id,
                    // A fair wait's first attempt, by a thread with no guard
                    // of this lock: a hold the store gives its holder was
                    // handed to an earlier wait, and is given back rather
                    // than re-entered past the queue; its retry: one handed
                    // to this wait, taken as it is (see `ops::fair_lock`).
                    match wait_id {
                        Some(_) if retry => WaitAttempt::Retry,
                        Some(_) if !re_entry => WaitAttempt::Fresh,
                        _ => WaitAttempt::Other,
                    },
                ),
            };
            attempts.set(attempts.get().saturating_add(1));
            if outcome.is_ok() {
                answered.set(answered.get().saturating_add(1));
            }
            attempt_key.set(Some(id));
            outcome
        };
        // A waiter that stops waiting leaves the queue (and gives up a hold
        // reserved for it meanwhile). Best effort: an entry left behind is
        // passed over once its client no longer listens, and a reservation
        // nobody takes runs out after its claim window.
        let leave_queue = || {
            if let Some(queue) = queue.filter(|_| queued.get()) {
                let channel = &wait_channel;
                // Recorded: a copy cannot land after this thread takes the
                // lock again and free that hold.
                let _ = crate::ops::handoff::leave_recorded(
                    backend,
                    &keys.name,
                    channel,
                    queue,
                    &holder.id,
                    outright.as_deref(),
                    &crate::keys::new_op_record(&keys.name),
                    crate::ops::once::keep_ms(backend),
                );
            }
        };
        let direct = names
            .as_deref()
            .filter(|_| queue.is_some())
            .map(|names| names.direct(client.id()));
        // Called once, in whichever arm acquired.
        let acquired = |token, sent, attempt, handed_ttl, passes_left, by: H| {
            self.guard(
                &holder,
                lease,
                lease_ms,
                sent,
                token,
                attempt,
                handed_ttl,
                passes_left,
                by,
            )
        };
        // An earlier release of this holder's hold that has not landed yet
        // goes first, or it could land on the hold about to be taken.
        if !client.cleanup().is_empty() {
            client.cleanup().settle(
                &keys.name,
                holder.field(),
                crate::deadline::cap(SETTLE_WAIT),
            )?;
        }

        let step = || {
            Ok(match attempt()? {
                (Acquire::Acquired, token) => Attempt::Done(token),
                // A queued waiter retries at least once per claim window:
                // a hold handed to a waiter that froze or died runs out
                // after one, and nobody tells the queue.
                (Acquire::Held { ttl }, _) => Attempt::Retry(match queue {
                    Some(queue) => {
                        let claim = queue.claim_window();
                        Some(ttl.map_or(claim, |ttl| ttl.min(claim)))
                    }
                    None => keys.park_for(ttl, allowance_ms),
                }),
            })
        };
        let channel = &wait_channel;
        let waited = match self.spin.as_deref() {
            // A spin lock's waiter sleeps and retries: no subscription.
            Some(backoff) => crate::spin_lock::until_done(
                *backoff,
                wait,
                keys.primitive(),
                self.cancel.as_ref().map(|token| (token, &*keys.name)),
                step,
            ),
            None => crate::wait::until_done(
                client.subscriber(),
                crate::wait::Waiting {
                    channel,
                    wake: Wake::Lock,
                    wait,
                    fallback: client.park_fallback(),
                    // A thread re-entering its own hold defers to nobody:
                    // a woken waiter's retry cannot take it meanwhile.
                    defer_to_woken: keys.defers_to_woken_waiter() && !re_entry,
                    primitive: keys.primitive(),
                    // Another thread of this client holds it: the attempt
                    // would fail.
                    first: &|| match keys.hands_over().then(|| {
                        client
                            .local_owners()
                            .sibling_of(&keys.name, holder.field(), Instant::now())
                    }) {
                        Some(Sibling::Holds(left)) => First::Park(left),
                        _ => First::Attempt,
                    },
                    name: &keys.name,
                    cancel: self.cancel.as_ref(),
                    // A releasing thread of this client may hand it the lock
                    // (a fair lock's: a release in any client, on the
                    // waiter's own channel, see `ops::fair_lock`).
                    seat: (keys.hands_over() || keys.hands_off_directly()).then(|| {
                        crate::pubsub::Seat {
                            field: holder.field().to_owned(),
                            lease_ms,
                            wait: wait_id,
                            leased,
                            // Set by the wait as it attempts.
                            queued: false,
                            // Its thread's watchdog hold, where the store
                            // counts the passes (see `cohort`).
                            adopts: !H::EXPLICIT && queue.is_some(),
                        }
                    }),
                    direct: direct.as_deref(),
                },
                step,
            ),
        };
        match waited {
            Ok(Some(crate::wait::Done::Attempted(token))) => {
                acquired(token, sent.get(), attempt_key.take(), None, 0, by).map(Some)
            }
            // The lease runs from the handoff script's send.
            Ok(Some(crate::wait::Done::HandedOver(handed_at, ttl, passes_left))) => {
                acquired(None, handed_at, None, ttl, passes_left, by).map(Some)
            }
            Ok(Some(crate::wait::Done::Adopted(baton))) => self.adopt(baton, by).map(Some),
            Ok(None) => {
                // try_lock never queued; a fair waiter that gave up leaves now.
                if enqueue {
                    let record = crate::keys::new_op_record(&keys.name);
                    keys.give_up(backend, &holder, allowance_ms, wait_id, &record)
                        .inspect_err(|err| self.settle_leave_later(&holder, record, err))?;
                }
                leave_queue();
                Ok(None)
            }
            Err(err) => {
                // The wait ran out while the reply to its last attempt was
                // on its way from a server that answered this wait before:
                // the caller's bound ended the wait, not a failure of the
                // store. Not acquired, as when it runs out parked (that
                // attempt is undone below, as after any lost reply).
                let wait_over = answered.get() > 0
                    && crate::deadline::take_timeout_cut()
                    && crate::deadline::passed();
                // Best effort: do not leave a fair waiter queued after an error.
                if enqueue {
                    let record = crate::keys::new_op_record(&keys.name);
                    if let Err(err) = keys.give_up(backend, &holder, allowance_ms, wait_id, &record)
                    {
                        self.settle_leave_later(&holder, record, &err);
                    }
                }
                if !err.is_connection_error() {
                    leave_queue();
                }
                if let Some(id) = attempt_key.take().filter(|_| err.is_connection_error()) {
                    let key = id.key(&keys.name);
                    // The attempt may have queued this waiter (its reply
                    // was lost): it leaves the queue with the undo, as
                    // exactly, once the server answers.
                    let leave = queue.map(|queue| QueueLeave {
                        queue: queue.clone(),
                        channel: channel.clone().into_owned(),
                        entry: outright,
                    });
                    self.undo_attempt(&holder, lease_ms, sent.get(), key, leave, &err);
                }
                if wait_over { Ok(None) } else { Err(err) }
            }
        }
    }

    /// Builds the guard of a successful acquisition, registering the hold
    /// with the watchdog when no lease was given (`handed_ttl`: the hold
    /// was handed over by another client with this TTL, which the watchdog
    /// renews early; `passes_left`: how many times a watchdog hold may be
    /// passed on inside the client, see `cohort`).
    #[allow(clippy::too_many_arguments)]
    fn guard(
        &self,
        holder: &Holder,
        lease: Option<Duration>,
        lease_ms: i64,
        sent: Instant,
        token: Option<u64>,
        attempt: Option<AttemptId>,
        handed_ttl: Option<Duration>,
        passes_left: u32,
        by: H,
    ) -> Result<LockGuard<H>> {
        let renewal = Arc::new(Renewal {
            keys: Arc::clone(&self.keys),
            holder: holder.clone(),
        });
        let (lease, watchdog) = match lease {
            None => (
                self.client
                    .watchdog()
                    .start_within(&renewal, sent, handed_ttl, attempt)?,
                true,
            ),
            // Handed by another client: the store's TTL is the lease, from
            // the handoff (less the clock estimate's margin).
            Some(length) => (
                Lease::new(sent, handed_ttl.map_or(length, |ttl| ttl.min(length))),
                false,
            ),
        };
        if holds::hold_taken(holds::key(holder, &self.keys.name), H::EXPLICIT)
            && self.keys.hands_over()
        {
            self.client.local_owners().taken(&renewal, &lease);
        }
        crate::telemetry::hold_started(self.keys.primitive());
        Ok(LockGuard {
            lock: self.plain(),
            renewal,
            lease_ms: std::cell::Cell::new(lease_ms),
            lease,
            watchdog,
            token,
            attempt,
            released: false,
            acquired_at: Instant::now(),
            holder: by,
            passes_left,
            passes: 0,
        })
    }

    /// A fair waiter's leave (its give-up, under the op record `record`)
    /// failed with `err`: when its outcome is unknown, its request may
    /// still land until its window ends, and landing after the holder
    /// queued again it would take the new wait's place (a frozen server
    /// runs the requests waiting in its sockets in any order). The cleanup
    /// worker settles the record (the leave acted, or now never will); the
    /// holder's next acquire waits for that first.
    fn settle_leave_later(&self, holder: &Holder, record: String, err: &Error) {
        if !err.is_connection_error() {
            return;
        }
        let backend = Arc::clone(self.client.backend());
        let keep_ms = crate::ops::once::keep_ms(backend.as_ref());
        let task: crate::cleanup::Task =
            Box::new(move || crate::ops::once::settle(backend.as_ref(), &record).map(|_| true));
        self.release_later(holder, task, Instant::now(), keep_ms, false, err);
    }

    /// After an acquire failed with a connection error, its latest
    /// attempt (recorded under `attempt_key`) may still have run, or run
    /// later: the cleanup worker undoes exactly that attempt's hold, or
    /// marks it undone so that it is refused if it arrives later still (see
    /// `ops::lock::undo_acquire`). One landing is final: no re-sends, and
    /// the holder's next acquire, which runs it first
    /// ([`Cleanup::settle`](crate::cleanup::Cleanup::settle)), cancels
    /// nothing. Holds of the same holder taken by other threads (a shared
    /// `LockOwner`) or by a retry are not touched.
    ///
    /// With `leave`, the wait also leaves the lock's waiter queue, after the
    /// undo and in the same task: a stale entry at the queue's head would
    /// have a release hand the lock to a waiter that is gone (its client
    /// may still listen), which then sits out a claim window. Only this
    /// wait's entry goes, and any hold handed or reserved to it meanwhile
    /// is given up (see `ops::handoff::leave`); the holder's next acquire
    /// settles it first, so it cannot take that wait's new entry. Retried
    /// as long as the entry can last (the queue's TTL, `2 × lease + 60 s`).
    fn undo_attempt(
        &self,
        holder: &Holder,
        lease_ms: i64,
        sent: Instant,
        attempt_key: String,
        leave: Option<QueueLeave>,
        cause: &Error,
    ) {
        let backend = Arc::clone(self.client.backend());
        let keys = Arc::clone(&self.keys);
        let undo_holder = holder.clone();
        let horizon_ms = match &leave {
            Some(_) => lease_ms
                .saturating_mul(2)
                .saturating_add(QUEUE_TTL_EXTRA_MS),
            None => lease_ms,
        };
        let mut undone = false;
        // One record for every retry of the leave, kept past the last
        // retry's window.
        let leave_record = leave.as_ref().map(|_| {
            let keep_ms = crate::ops::once::keep_ms(backend.as_ref())
                .max(horizon_ms.saturating_add(crate::ops::record_keep_ms(backend.as_ref(), 0)));
            (crate::keys::new_op_record(&keys.name), keep_ms)
        });
        let task: crate::cleanup::Task = Box::new(move || {
            let backend = backend.as_ref();
            if !undone {
                keys.undo_attempt(backend, &undo_holder, lease_ms, &attempt_key)?;
                undone = true;
            }
            if let (Some(leave), Some((record, keep_ms))) = (&leave, &leave_record) {
                // Retried until it lands: not settled (a settle would
                // refuse the retry); the record makes all copies act once,
                // and the holder's next acquire waits for this task.
                crate::ops::handoff::leave_unsettled(
                    backend,
                    &keys.name,
                    &leave.channel,
                    &leave.queue,
                    &undo_holder.id,
                    leave.entry.as_deref(),
                    record,
                    *keep_ms,
                )?;
            }
            Ok(true)
        });
        self.release_later(holder, task, sent, horizon_ms, false, cause);
    }
}
