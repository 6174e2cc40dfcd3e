//! What differs between the lock primitives that share [`Lock`](crate::Lock)'s
//! acquire loop, guard, watchdog and subscriber: which scripts they run,
//! which hash field names a holder, where their waiters listen, and how a
//! hold is renewed and inspected.
//!
//! | flavor | Redisson | holder field | waiters listen on | renewal |
//! |---|---|---|---|---|
//! | reentrant | `RLock` | `<uuid>:<thread>` | `redisson_lock__channel:{name}` | hash TTL |
//! | fenced | `RFencedLock` | as reentrant; each acquisition also takes a token from `redisson_lock_token:{name}` (at least the server clock in µs) | as reentrant | hash TTL |
//! | fair | `RFairLock` | `<uuid>:<thread>` | `redisson_lock__channel:{name}:<uuid>:<thread>` (own channel) | hash TTL |
//! | read | `RReadWriteLock.readLock()` | `<uuid>:<thread>` | `redisson_rwlock:{name}` | own read-hold keys + hash |
//! | write | `RReadWriteLock.writeLock()` | `<uuid>:<thread>:write` | `redisson_rwlock:{name}` | hash TTL |

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::RwMode;
use crate::backend::LockBackend;
use crate::ops;
use crate::ops::fair_lock::FairLockKeys;
use crate::ops::lock::{Acquire, FencedAcquire, LockState, RecordKind, Release};
use crate::ops::rw_lock::RwLockKeys;
use crate::{Result, keys};

/// How long the unlock latch of a fair waiter's give-back (see
/// [`LockKeys::give_up`]) remembers its outcome, at least (longer when the
/// store's response timeout makes a window longer: `ops::record_keep_ms`).
const GIVE_BACK_LATCH_MS: i64 = 10_000;

/// The least time a fair waiter's mark counts it as alive without a
/// refresh, in ms: longer than a server freeze or a request held up in the
/// network that the waiter lives through (its retries cannot refresh the
/// mark meanwhile), so that a release does not take a live waiter whose
/// subscription is being remade for a gone one and pass it over.
const MARK_LIVE_FLOOR_MS: i64 = 5_000;

/// Which primitive a lock handle drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    Reentrant,
    /// A reentrant lock whose acquisitions take fencing tokens.
    Fenced,
    Fair,
    Read,
    Write,
}

/// A lock's keys, computed once per handle.
///
/// A plain reentrant lock stores only its name (its channel is built when a
/// release or undo sends it): one client may hold 100,000 of them, each
/// hold keeping its keys alive.
pub(crate) struct LockKeys {
    pub(crate) flavor: Flavor,
    /// Shared with the hold counts of this process (`lock::holds`).
    pub(crate) name: Arc<str>,
    /// The other flavors' keys; `None` for a plain reentrant lock.
    derived: Option<Box<DerivedKeys>>,
}

/// The keys a flavor other than the plain reentrant lock derives from its
/// name.
struct DerivedKeys {
    /// Fenced: the lock's channel; fair: the prefix of waiter channels;
    /// read/write: the read-write lock's channel.
    channel: String,
    /// Fenced: the token counter. Fair: the queue and slot keys.
    /// Read/write: the read-hold key prefix.
    extra: [String; 2],
    /// Fair, with direct handoffs (see `ops::fair_lock`): the prefix of
    /// its waiters' marks and the claim window in ms.
    fair_direct: Option<(String, i64)>,
}

/// What a plain reentrant lock derives: nothing (its channel is built on use).
static NO_DERIVED_KEYS: DerivedKeys = DerivedKeys {
    channel: String::new(),
    extra: [String::new(), String::new()],
    fair_direct: None,
};

impl fmt::Debug for LockKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockKeys")
            .field("flavor", &self.flavor)
            .field("name", &self.name)
            .finish()
    }
}

/// One holder's names on one lock.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    /// `<client uuid>:<thread>` (shared by the guards of one attempt's
    /// holder and the hold counts: no copy per hold).
    pub(crate) id: Arc<str>,
    /// `<id>:write`: a read attempt checks it (a writer may also read).
    write_field: String,
    /// Read/write halves: `{name}:<id>:rwlock_timeout`.
    timeout_prefix: String,
    /// Whether this hold's field is `write_field` (the write half).
    writes: bool,
}

impl Holder {
    /// The hash field of this hold: the id, or `<id>:write` for the write
    /// half (not stored twice: a watchdog may keep 100,000 holders).
    pub(crate) fn field(&self) -> &str {
        if self.writes {
            &self.write_field
        } else {
            &self.id
        }
    }

    /// Whether this is the write half of a read-write lock's holder.
    pub(crate) fn writes(&self) -> bool {
        self.writes
    }
}

impl LockKeys {
    pub(crate) fn new(flavor: Flavor, name: String) -> LockKeys {
        let derived = match flavor {
            Flavor::Reentrant => None,
            Flavor::Fenced => Some((
                keys::lock_channel(&name),
                [keys::fence_token(&name), String::new()],
            )),
            Flavor::Fair => Some((
                keys::lock_channel(&name),
                [keys::fair_queue(&name), keys::fair_timeouts(&name)],
            )),
            Flavor::Read | Flavor::Write => Some((
                keys::rw_channel(&name),
                [keys::rw_key_prefix(&name), String::new()],
            )),
        };
        LockKeys {
            flavor,
            name: Arc::from(name),
            derived: derived.map(|(channel, extra)| {
                Box::new(DerivedKeys {
                    channel,
                    extra,
                    fair_direct: None,
                })
            }),
        }
    }

    /// The keys derived from the name (none for a plain reentrant lock).
    fn derived(&self) -> &DerivedKeys {
        self.derived.as_deref().unwrap_or(&NO_DERIVED_KEYS)
    }

    /// The lock's channel (fair: the prefix of its waiters' channels).
    fn channel(&self) -> Cow<'_, str> {
        match &self.derived {
            Some(derived) => Cow::Borrowed(&derived.channel),
            None => Cow::Owned(keys::lock_channel(&self.name)),
        }
    }

    /// A fair lock whose releases hand the lock outright to a queued
    /// redisync waiter that listens, the hold waiting `claim_ms` for its
    /// watchdog (see `ops::fair_lock`); no-op for the other flavors.
    pub(crate) fn with_direct_handoffs(mut self, claim_ms: i64) -> LockKeys {
        if let (Flavor::Fair, Some(derived)) = (self.flavor, self.derived.as_mut()) {
            derived.fair_direct = Some((keys::fair_direct_prefix(&self.name), claim_ms));
        }
        self
    }

    /// Whether a fair lock's releases hand it outright to marked waiters.
    pub(crate) fn hands_off_directly(&self) -> bool {
        self.derived().fair_direct.is_some()
    }

    fn direct(&self) -> Option<ops::fair_lock::Direct<'_>> {
        self.derived()
            .fair_direct
            .as_ref()
            .map(|(prefix, claim_ms)| ops::fair_lock::Direct {
                mark_prefix: prefix,
                claim_ms: *claim_ms,
            })
    }

    /// A fair waiter's direct mark, with direct handoffs.
    fn mark(&self, holder: &Holder) -> Option<String> {
        self.derived()
            .fair_direct
            .as_ref()
            .map(|(prefix, _)| format!("{prefix}{}", holder.id))
    }

    /// How long a fair waiter's mark counts it as alive without a refresh
    /// (see `ops::fair_lock`): three claim windows (it retries at least
    /// once per window, so two may be lost or late), and at least
    /// [`MARK_LIVE_FLOOR_MS`].
    fn mark_live_ms(&self) -> i64 {
        self.derived()
            .fair_direct
            .as_ref()
            .map_or(MARK_LIVE_FLOOR_MS, |(_, claim_ms)| {
                claim_ms.saturating_mul(3).max(MARK_LIVE_FLOOR_MS)
            })
    }

    pub(crate) fn holder(&self, id: impl Into<Arc<str>>) -> Holder {
        let id: Arc<str> = id.into();
        let (write_field, timeout_prefix) = match self.flavor {
            Flavor::Reentrant | Flavor::Fenced | Flavor::Fair => (String::new(), String::new()),
            Flavor::Read | Flavor::Write => (
                format!("{id}:write"),
                keys::rw_timeout_prefix(&self.name, &id),
            ),
        };
        Holder {
            id,
            write_field,
            timeout_prefix,
            writes: self.flavor == Flavor::Write,
        }
    }

    fn fair(&self) -> FairLockKeys<'_> {
        FairLockKeys {
            name: &self.name,
            queue: &self.derived().extra[0],
            timeouts: &self.derived().extra[1],
            channel_prefix: &self.derived().channel,
        }
    }

    pub(crate) fn rw<'a>(&'a self, holder: &'a Holder) -> RwLockKeys<'a> {
        RwLockKeys {
            name: &self.name,
            channel: &self.derived().channel,
            holder: &holder.id,
            write_field: &holder.write_field,
            timeout_prefix: &holder.timeout_prefix,
            key_prefix: &self.derived().extra[0],
        }
    }

    /// The channel this holder's waiters listen on.
    pub(crate) fn wait_channel(&self, holder: &Holder) -> String {
        match self.flavor {
            Flavor::Fair => format!("{}:{}", self.channel(), holder.id),
            _ => self.channel().into_owned(),
        }
    }

    /// The metrics' label of this flavor.
    pub(crate) fn primitive(&self) -> crate::telemetry::Primitive {
        use crate::telemetry::Primitive;
        match self.flavor {
            Flavor::Reentrant => Primitive::Lock,
            Flavor::Fenced => Primitive::FencedLock,
            Flavor::Fair => Primitive::FairLock,
            Flavor::Read => Primitive::ReadLock,
            Flavor::Write => Primitive::WriteLock,
        }
    }

    /// Whether a new local attempt should let a just-woken local waiter go
    /// first: only for exclusive holds. The fair lock's queue already orders
    /// everyone, and readers share.
    /// Whether a release may hand the lock straight to a waiter of the same
    /// client (`ops::lock::release_to`): the reentrant lock (a fenced lock's
    /// waiter needs a token, a fair lock has its queue, a read-write lock
    /// its modes).
    pub(crate) fn hands_over(&self) -> bool {
        self.flavor == Flavor::Reentrant
    }

    /// One acquire attempt, with the fencing token of a fenced lock's
    /// success (`allowance_ms` is a fair waiter's queue slot, `enqueue`
    /// whether a fair attempt may join the queue, `wait` the id of a fair
    /// wait a release may hand the lock outright, `attempt` which attempt
    /// of that wait: see `ops::fair_lock::WaitAttempt`), recording the attempt
    /// under `attempt_key` when it takes a hold, so that the undo of an
    /// attempt whose outcome is unknown removes exactly its hold.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attempt_recorded(
        &self,
        backend: &dyn LockBackend,
        holder: &Holder,
        lease_ms: i64,
        allowance_ms: i64,
        enqueue: bool,
        attempt_key: &str,
        wait: Option<u64>,
        attempt: ops::fair_lock::WaitAttempt,
    ) -> Result<(Acquire, Option<u64>)> {
        let acquire = match self.flavor {
            Flavor::Reentrant => ops::lock::acquire_recorded(
                backend,
                &self.name,
                &holder.id,
                lease_ms,
                Some(attempt_key),
            ),
            Flavor::Fenced => {
                return Ok(
                    match ops::lock::fenced_acquire_recorded(
                        backend,
                        &self.name,
                        &self.derived().extra[0],
                        &holder.id,
                        lease_ms,
                        Some(attempt_key),
                    )? {
                        FencedAcquire::Acquired { token } => (Acquire::Acquired, Some(token)),
                        FencedAcquire::Held { ttl } => (Acquire::Held { ttl }, None),
                    },
                );
            }
            Flavor::Fair => ops::fair_lock::acquire_marked(
                backend,
                &self.fair(),
                &holder.id,
                lease_ms,
                allowance_ms,
                crate::clock::wall_clock_ms(),
                enqueue,
                attempt_key,
                self.mark(holder)
                    .as_deref()
                    .map(|key| ops::fair_lock::Marked {
                        key,
                        wait,
                        attempt,
                        live_ms: self.mark_live_ms(),
                    }),
            ),
            Flavor::Read => ops::rw_lock::read_acquire_recorded(
                backend,
                &self.rw(holder),
                lease_ms,
                Some(attempt_key),
            ),
            Flavor::Write => ops::rw_lock::write_acquire_recorded(
                backend,
                &self.rw(holder),
                lease_ms,
                Some(attempt_key),
            ),
        };
        Ok((acquire?, None))
    }

    /// Undoes exactly the recorded attempt `attempt_key` (see
    /// [`attempt_recorded`](Self::attempt_recorded)): its hold, if it took
    /// one, leaving the lock as a release of that hold would; and marks it
    /// undone, so that it is refused if it arrives later still.
    pub(crate) fn undo_attempt(
        &self,
        backend: &dyn LockBackend,
        holder: &Holder,
        lease_ms: i64,
        attempt_key: &str,
    ) -> Result<ops::lock::Undo> {
        match self.flavor {
            Flavor::Reentrant | Flavor::Fenced => ops::lock::undo_acquire(
                backend,
                &self.name,
                &self.channel(),
                &holder.id,
                lease_ms,
                attempt_key,
            ),
            Flavor::Fair => ops::fair_lock::undo_acquire(
                backend,
                &self.fair(),
                &holder.id,
                lease_ms,
                crate::clock::wall_clock_ms(),
                attempt_key,
            ),
            Flavor::Read => {
                ops::rw_lock::read_undo_acquire(backend, &self.rw(holder), lease_ms, attempt_key)
            }
            Flavor::Write => {
                ops::rw_lock::write_undo_acquire(backend, &self.rw(holder), lease_ms, attempt_key)
            }
        }
    }

    pub(crate) fn defers_to_woken_waiter(&self) -> bool {
        matches!(
            self.flavor,
            Flavor::Reentrant | Flavor::Fenced | Flavor::Write
        )
    }

    /// How long a waiter may park after a failed attempt that reported
    /// `ttl`. A fair waiter also wakes once per allowance: when the head
    /// takes the lock every slot moves up, and a waiter parked on the old
    /// slot ahead would otherwise sleep one allowance past a dead waiter's
    /// new deadline (one extra script call per allowance, 300 s by default).
    /// With direct handoffs, at least once per claim window: a hold handed
    /// to a waiter that froze runs out after one, and nobody tells the next.
    pub(crate) fn park_for(&self, ttl: Option<Duration>, allowance_ms: i64) -> Option<Duration> {
        match self.flavor {
            Flavor::Fair => {
                let claim = self
                    .derived()
                    .fair_direct
                    .as_ref()
                    .map_or(allowance_ms, |(_, claim)| *claim);
                let bound = Duration::from_millis(
                    u64::try_from(allowance_ms.min(claim)).unwrap_or(u64::MAX),
                );
                Some(ttl.map_or(bound, |ttl| ttl.min(bound)))
            }
            _ => ttl,
        }
    }

    /// A waiter gives up: leave the fair queue at once (no-op otherwise).
    /// `wait`: the id of a fair wait a release may have handed the lock
    /// outright (a thread's watchdog wait, which holds nothing of its own
    /// while it waits): if it is no longer queued and holds the lock, a
    /// release handed it the lock just as it gave up, and it gives the
    /// lock back (to the next waiter) at once instead of leaving it
    /// stranded for the claim window, where its holder's next wait would
    /// re-enter it past the queue. `record`: the leave's op record (see
    /// `ops::once`): when this returns a connection error, the leave may
    /// still land until its window ends, and the caller settles `record`
    /// before the holder waits again.
    pub(crate) fn give_up(
        &self,
        backend: &dyn LockBackend,
        holder: &Holder,
        allowance_ms: i64,
        wait: Option<u64>,
        record: &str,
    ) -> Result<()> {
        if self.flavor != Flavor::Fair {
            return Ok(());
        }
        let mark = self.mark(holder);
        let queued = ops::fair_lock::cancel_marked(
            backend,
            &self.fair(),
            &holder.id,
            allowance_ms,
            mark.as_deref(),
            Some(record),
        )?;
        if let (false, Some(_), Some((_, claim_ms))) = (queued, wait, &self.derived().fair_direct)
            && ops::lock::state(backend, &self.name, &holder.id)?.hold_count == 1
        {
            let latch = format!(
                "{}:{}",
                keys::unlock_latch_prefix(&self.name),
                uuid::Uuid::new_v4().simple()
            );
            // Best effort: a hold left behind runs out after the claim
            // window, and the holder's next wait gives it back first. The
            // latch outlives every copy's window.
            let latch_ms = ops::record_keep_ms(backend, GIVE_BACK_LATCH_MS);
            let _ = self.release(backend, holder, *claim_ms, &latch, latch_ms);
        }
        Ok(())
    }

    /// Releases one hold behind the unlock latch `latch_key`: a fresh key,
    /// or the record of the attempt that took the hold (see
    /// [`attempt_recorded`](Self::attempt_recorded)), which every kind's
    /// release script then overwrites with the outcome (one key written
    /// instead of a record deleted and a latch created), so that a late
    /// copy of that acquire finds it released and is refused.
    pub(crate) fn release(
        &self,
        backend: &dyn LockBackend,
        holder: &Holder,
        lease_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release> {
        match self.flavor {
            Flavor::Reentrant | Flavor::Fenced => ops::lock::release(
                backend,
                &self.name,
                &self.channel(),
                &holder.id,
                lease_ms,
                latch_key,
                latch_ms,
            ),
            Flavor::Fair => ops::fair_lock::release_direct(
                backend,
                &self.fair(),
                &holder.id,
                lease_ms,
                crate::clock::wall_clock_ms(),
                latch_key,
                latch_ms,
                self.direct(),
            ),
            Flavor::Read => {
                ops::rw_lock::read_release(backend, &self.rw(holder), latch_key, latch_ms)
            }
            Flavor::Write => ops::rw_lock::write_release(
                backend,
                &self.rw(holder),
                lease_ms,
                latch_key,
                latch_ms,
            ),
        }
    }

    /// Sets the lease of `holder`'s hold to `lease_ms` from now if it still
    /// holds it (`LockGuard::extend`); `false` when it does not. Every
    /// flavor can: the hash's TTL is the lease, and a reader's lease is its
    /// read-hold keys (the hash keeps the longest of all readers' leases).
    ///
    /// `record`: the record of the acquire attempt that took the hold (its
    /// key): renewed only while it says taken, so that a copy of this call
    /// landing after the hold's release renews nothing (see
    /// `lua/lock_renew.lua`); `None` (a hold handed over by another
    /// client's release has none): the holder check alone.
    pub(crate) fn extend(
        &self,
        backend: &dyn LockBackend,
        holder: &Holder,
        lease_ms: i64,
        record: Option<&str>,
    ) -> Result<bool> {
        self.renew(backend, holder, lease_ms, record, false)
    }

    /// As [`extend`](Self::extend), but never shortening the lease the
    /// store has (see [`ops::lock::raise_recorded`]): how the watchdog
    /// restarts a fixed lease passed to another thread of the client (see
    /// `watchdog::restart`). Only the kinds whose lease is the hash's TTL
    /// pass holds; a read hold's lease is its own keys, and it is extended
    /// as usual.
    pub(crate) fn raise(
        &self,
        backend: &dyn LockBackend,
        holder: &Holder,
        lease_ms: i64,
        record: Option<&str>,
    ) -> Result<bool> {
        self.renew(backend, holder, lease_ms, record, true)
    }

    /// [`extend`](Self::extend), or with `raise` [`raise`](Self::raise).
    fn renew(
        &self,
        backend: &dyn LockBackend,
        holder: &Holder,
        lease_ms: i64,
        record: Option<&str>,
        raise: bool,
    ) -> Result<bool> {
        match self.flavor {
            Flavor::Reentrant | Flavor::Fenced | Flavor::Fair | Flavor::Write => {
                let record = record.map(|record| (record, self.record_kind()));
                let field = holder.field();
                if raise {
                    ops::lock::raise_recorded(backend, &self.name, field, lease_ms, record)
                } else {
                    ops::lock::renew_recorded(backend, &self.name, field, lease_ms, record)
                }
            }
            Flavor::Read => {
                ops::rw_lock::read_renew_recorded(backend, &self.rw(holder), lease_ms, record)
            }
        }
    }

    /// How this kind's acquire records say a hold is taken.
    fn record_kind(&self) -> RecordKind {
        // Every kind's record begins with `taken` while its hold lives.
        RecordKind::Taken
    }

    pub(crate) fn force_release(&self, backend: &dyn LockBackend) -> Result<bool> {
        // Once (`ops::once`): a resent or late copy never deletes a later hold.
        let record = keys::new_op_record(&self.name);
        match self.flavor {
            Flavor::Reentrant | Flavor::Fenced => {
                ops::lock::force_release_recorded(backend, &self.name, &self.channel(), &record)
            }
            Flavor::Fair => ops::fair_lock::force_release_recorded(
                backend,
                &self.fair(),
                crate::clock::wall_clock_ms(),
                &record,
            ),
            Flavor::Read | Flavor::Write => {
                let mode = if self.flavor == Flavor::Read {
                    RwMode::Read
                } else {
                    RwMode::Write
                };
                let nobody = self.holder(String::new());
                ops::rw_lock::force_release_recorded(backend, &self.rw(&nobody), mode, &record)
            }
        }
    }

    /// Deletes the lock (Redisson's `RObject.delete` on each kind): a
    /// reentrant or fenced lock and each read-write half as
    /// [`force_release`](Self::force_release) (Redisson's `RLock.delete` is
    /// its `forceUnlock`; a fenced lock's token counter is kept, so tokens
    /// never restart); a fair lock with its queue and slots, waking every
    /// queued waiter.
    pub(crate) fn delete(&self, backend: &dyn LockBackend) -> Result<bool> {
        match self.flavor {
            Flavor::Fair => ops::fair_lock::delete_recorded(
                backend,
                &self.fair(),
                &keys::new_op_record(&self.name),
            ),
            Flavor::Reentrant | Flavor::Fenced | Flavor::Read | Flavor::Write => {
                self.force_release(backend)
            }
        }
    }

    /// Deletes a read-write lock whatever its mode, with its holders'
    /// read-hold keys, waking every waiter (the read/write flavors only).
    pub(crate) fn delete_rw(&self, backend: &dyn LockBackend) -> Result<bool> {
        let nobody = self.holder(String::new());
        ops::rw_lock::delete_recorded(backend, &self.rw(&nobody), &keys::new_op_record(&self.name))
    }

    /// The lock's state as this flavor sees it: a read or write half counts
    /// as locked only when the lock is held in its own mode (Redisson's
    /// `isLocked` on each half).
    pub(crate) fn state(&self, backend: &dyn LockBackend, holder: &Holder) -> Result<LockState> {
        match self.flavor {
            Flavor::Reentrant | Flavor::Fenced | Flavor::Fair => {
                ops::lock::state(backend, &self.name, &holder.id)
            }
            Flavor::Read | Flavor::Write => {
                let own = if self.flavor == Flavor::Read {
                    RwMode::Read
                } else {
                    RwMode::Write
                };
                let state = ops::rw_lock::state(backend, &self.name, holder.field())?;
                Ok(LockState::new(
                    state.mode == Some(own),
                    state.hold_count,
                    state.ttl,
                ))
            }
        }
    }
}

/// A hold's renewal, shared by its guard and the watchdog: the lock's keys
/// and the holder.
#[derive(Debug)]
pub(crate) struct Renewal {
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) holder: Holder,
}

/// Which batch script renews a hold: holds of one kind (and, on a cluster,
/// one slot) share a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum RenewKind {
    /// The lock hash's TTL, with attempt records of a kind (reentrant and
    /// fenced: `Taken`; fair and write: `Numbered`).
    Hash(RecordKind),
    /// The holder's read-hold keys and the hash (read).
    Read,
}

impl Renewal {
    /// The lock's name (the key a cluster routes by).
    pub(crate) fn name(&self) -> &str {
        &self.keys.name
    }

    /// The hash field of this hold (with the name, what identifies it).
    pub(crate) fn field(&self) -> &str {
        self.holder.field()
    }

    pub(crate) fn kind(&self) -> RenewKind {
        match self.keys.flavor {
            Flavor::Reentrant | Flavor::Fenced | Flavor::Fair | Flavor::Write => {
                RenewKind::Hash(self.keys.record_kind())
            }
            Flavor::Read => RenewKind::Read,
        }
    }
}

/// Renews `holds`, all of `kind` (and of one cluster slot), in one script:
/// one flag per hold, `false` for a hold that is gone. Each hold with the
/// key of the attempt record it is renewed for (`None`: the holder check
/// alone; see `lua/lock_renew_batch.lua`).
pub(crate) fn renew_batch(
    backend: &dyn LockBackend,
    kind: RenewKind,
    holds: &[(&Renewal, Option<String>)],
    lease_ms: i64,
) -> Result<Vec<bool>> {
    match kind {
        RenewKind::Hash(records) => {
            let holds: Vec<(&str, &str, Option<&str>)> = holds
                .iter()
                .map(|(h, record)| (h.name(), h.field(), record.as_deref()))
                .collect();
            ops::lock::renew_many_recorded(backend, &holds, records, lease_ms)
        }
        RenewKind::Read => {
            let keys: Vec<(RwLockKeys<'_>, Option<&str>)> = holds
                .iter()
                .map(|(h, record)| (h.keys.rw(&h.holder), record.as_deref()))
                .collect();
            ops::rw_lock::read_renew_many_recorded(backend, &keys, lease_ms)
        }
    }
}

/// Milliseconds of a duration, saturating at [`MAX_LEASE`](crate::MAX_LEASE)
/// (for a fair waiter's allowance, which a `try_lock_for` wait sets: a wait
/// of any length is fine, but the queue slot it becomes is a time the
/// scripts add to the clock, so it is capped where they accept it).
pub(crate) fn saturating_ms(value: Duration) -> i64 {
    i64::try_from(value.as_millis())
        .unwrap_or(i64::MAX)
        .min(crate::error::MAX_LEASE_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowances_saturate_at_the_longest_lease() {
        assert_eq!(saturating_ms(Duration::from_millis(5)), 5);
        assert_eq!(saturating_ms(Duration::MAX), crate::error::MAX_LEASE_MS);
        assert_eq!(saturating_ms(crate::MAX_LEASE), crate::error::MAX_LEASE_MS);
    }
}
