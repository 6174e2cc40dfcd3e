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

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{
    Acquire, FairLockKeys, FencedAcquire, LockBackend, LockState, Release, RwLockKeys, RwMode,
};
use crate::ops;
use crate::{Result, keys};

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
pub(crate) struct LockKeys {
    pub(crate) flavor: Flavor,
    pub(crate) name: String,
    /// Reentrant: the lock's channel; fair: the prefix of waiter channels;
    /// read/write: the read-write lock's channel.
    channel: String,
    /// Fenced: the token counter. Fair: the queue and slot keys.
    /// Read/write: the read-hold key prefix.
    extra: [String; 2],
}

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
    /// `<client uuid>:<thread>`.
    pub(crate) id: String,
    /// The hash field of this hold: the id, or `<id>:write` for the write half.
    pub(crate) field: String,
    /// `<id>:write`: a read attempt checks it (a writer may also read).
    write_field: String,
    /// Read/write halves: `{name}:<id>:rwlock_timeout`.
    timeout_prefix: String,
}

impl LockKeys {
    pub(crate) fn new(flavor: Flavor, name: String) -> LockKeys {
        let (channel, extra) = match flavor {
            Flavor::Reentrant => (keys::lock_channel(&name), [String::new(), String::new()]),
            Flavor::Fenced => (
                keys::lock_channel(&name),
                [keys::fence_token(&name), String::new()],
            ),
            Flavor::Fair => (
                keys::lock_channel(&name),
                [keys::fair_queue(&name), keys::fair_timeouts(&name)],
            ),
            Flavor::Read | Flavor::Write => (
                keys::rw_channel(&name),
                [keys::rw_key_prefix(&name), String::new()],
            ),
        };
        LockKeys {
            flavor,
            name,
            channel,
            extra,
        }
    }

    pub(crate) fn holder(&self, id: String) -> Holder {
        let (write_field, timeout_prefix) = match self.flavor {
            Flavor::Reentrant | Flavor::Fenced | Flavor::Fair => (String::new(), String::new()),
            Flavor::Read | Flavor::Write => (
                format!("{id}:write"),
                keys::rw_timeout_prefix(&self.name, &id),
            ),
        };
        let field = if self.flavor == Flavor::Write {
            write_field.clone()
        } else {
            id.clone()
        };
        Holder {
            id,
            field,
            write_field,
            timeout_prefix,
        }
    }

    fn fair(&self) -> FairLockKeys<'_> {
        FairLockKeys {
            name: &self.name,
            queue: &self.extra[0],
            timeouts: &self.extra[1],
            channel_prefix: &self.channel,
        }
    }

    fn rw<'a>(&'a self, holder: &'a Holder) -> RwLockKeys<'a> {
        RwLockKeys {
            name: &self.name,
            channel: &self.channel,
            holder: &holder.id,
            write_field: &holder.write_field,
            timeout_prefix: &holder.timeout_prefix,
            key_prefix: &self.extra[0],
        }
    }

    /// The channel this holder's waiters listen on.
    pub(crate) fn wait_channel(&self, holder: &Holder) -> String {
        match self.flavor {
            Flavor::Fair => format!("{}:{}", self.channel, holder.id),
            _ => self.channel.clone(),
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
    pub(crate) fn defers_to_woken_waiter(&self) -> bool {
        matches!(
            self.flavor,
            Flavor::Reentrant | Flavor::Fenced | Flavor::Write
        )
    }

    /// One acquire attempt, with the fencing token of a fenced lock's
    /// success. `allowance_ms` is a fair waiter's queue slot; `enqueue`
    /// whether a fair attempt may join the queue.
    pub(crate) fn attempt(
        &self,
        backend: &dyn LockBackend,
        holder: &Holder,
        lease_ms: i64,
        allowance_ms: i64,
        enqueue: bool,
    ) -> Result<(Acquire, Option<u64>)> {
        let acquire = match self.flavor {
            Flavor::Reentrant => ops::lock::acquire(backend, &self.name, &holder.id, lease_ms),
            Flavor::Fenced => {
                return Ok(
                    match ops::lock::fenced_acquire(
                        backend,
                        &self.name,
                        &self.extra[0],
                        &holder.id,
                        lease_ms,
                    )? {
                        FencedAcquire::Acquired { token } => (Acquire::Acquired, Some(token)),
                        FencedAcquire::Held { ttl } => (Acquire::Held { ttl }, None),
                    },
                );
            }
            Flavor::Fair => ops::fair_lock::acquire(
                backend,
                &self.fair(),
                &holder.id,
                lease_ms,
                allowance_ms,
                crate::clock::wall_clock_ms(),
                enqueue,
            ),
            Flavor::Read => ops::rw_lock::read_acquire(backend, &self.rw(holder), lease_ms),
            Flavor::Write => ops::rw_lock::write_acquire(backend, &self.rw(holder), lease_ms),
        };
        Ok((acquire?, None))
    }

    /// How long a waiter may park after a failed attempt that reported
    /// `ttl`. A fair waiter also wakes once per allowance: when the head
    /// takes the lock every slot moves up, and a waiter parked on the old
    /// slot ahead would otherwise sleep one allowance past a dead waiter's
    /// new deadline (one extra script call per allowance, 300 s by default).
    pub(crate) fn park_for(&self, ttl: Option<Duration>, allowance_ms: i64) -> Option<Duration> {
        match self.flavor {
            Flavor::Fair => {
                let allowance =
                    Duration::from_millis(u64::try_from(allowance_ms).unwrap_or(u64::MAX));
                Some(ttl.map_or(allowance, |ttl| ttl.min(allowance)))
            }
            _ => ttl,
        }
    }

    /// A waiter gives up: leave the fair queue at once (no-op otherwise).
    pub(crate) fn give_up(
        &self,
        backend: &dyn LockBackend,
        holder: &Holder,
        allowance_ms: i64,
    ) -> Result<()> {
        match self.flavor {
            Flavor::Fair => ops::fair_lock::cancel(backend, &self.fair(), &holder.id, allowance_ms),
            _ => Ok(()),
        }
    }

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
                &self.channel,
                &holder.id,
                lease_ms,
                latch_key,
                latch_ms,
            ),
            Flavor::Fair => ops::fair_lock::release(
                backend,
                &self.fair(),
                &holder.id,
                lease_ms,
                crate::clock::wall_clock_ms(),
                latch_key,
                latch_ms,
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

    /// Renews one holder's lease (the watchdog's call): `false` when the
    /// hold is gone.
    pub(crate) fn renew(
        &self,
        backend: &dyn LockBackend,
        holder: &Holder,
        lease_ms: i64,
    ) -> Result<bool> {
        match self.flavor {
            Flavor::Reentrant | Flavor::Fenced | Flavor::Fair | Flavor::Write => {
                ops::lock::renew(backend, &self.name, &holder.field, lease_ms)
            }
            Flavor::Read => ops::rw_lock::read_renew(backend, &self.rw(holder), lease_ms),
        }
    }

    pub(crate) fn force_release(&self, backend: &dyn LockBackend) -> Result<bool> {
        match self.flavor {
            Flavor::Reentrant | Flavor::Fenced => {
                ops::lock::force_release(backend, &self.name, &self.channel)
            }
            Flavor::Fair => {
                ops::fair_lock::force_release(backend, &self.fair(), crate::clock::wall_clock_ms())
            }
            Flavor::Read | Flavor::Write => {
                let mode = if self.flavor == Flavor::Read {
                    RwMode::Read
                } else {
                    RwMode::Write
                };
                let nobody = self.holder(String::new());
                ops::rw_lock::force_release(backend, &self.rw(&nobody), mode)
            }
        }
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
                let state = ops::rw_lock::state(backend, &self.name, &holder.field)?;
                Ok(LockState::new(
                    state.mode == Some(own),
                    state.hold_count,
                    state.ttl,
                ))
            }
        }
    }
}

/// A hold's renewal, handed to the watchdog: the lock's keys and the holder.
#[derive(Debug, Clone)]
pub(crate) struct Renewal {
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) holder: Holder,
}

impl Renewal {
    pub(crate) fn renew(&self, backend: &dyn LockBackend, lease_ms: i64) -> Result<bool> {
        self.keys.renew(backend, &self.holder, lease_ms)
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
