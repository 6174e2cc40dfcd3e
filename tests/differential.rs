//! Differential test: `MemoryBackend` and a real redis-server, given the same
//! seeded random sequence of operations of every primitive, give the same
//! results and end up with the same keyspace.
//!
//! Both backends run the very same `lua/` scripts (one on Redis, one in an
//! embedded Lua 5.1 over an in-memory keyspace); this test checks that the
//! keyspace, the command semantics (replies, errors, types, expiry) and the
//! conversions between Lua and Redis agree, on operations that share key
//! names across primitives (so `WRONGTYPE` clashes happen too), with short
//! and long leases, reused unlock latches, reused and undone counting-call
//! records (`{name}:redisync_op:<id>`) and out-of-range arguments.
//!
//! - Each operation runs on memory, then at once on Redis, with the same
//!   arguments (clock readings are taken once and passed to both). Results
//!   must be equal, TTLs inside them within [`TTL_TOLERANCE_MS`]; fencing
//!   tokens (raised to each store's own clock) must be issued alike and
//!   grow on each side.
//! - Every [`BURST`] operations the whole keyspace is compared: keys, types,
//!   values and TTLs (memory: `MemoryBackend::dump`; Redis: `SCAN`, then
//!   `TYPE`, `PTTL` and the value). Short leases end only during the pause
//!   after a burst, so no expiry races the two calls of one operation.
//!
//! Rerun one seed: `REDISYNC_DIFF_SEED=7 REDISYNC_DIFF_OPS=2000 cargo test
//! --test differential` (the default runs the fixed seeds below).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::TestServer;
use common::keys;
use redisync::RwMode;
use redisync::internal as ops;
use redisync::internal::expirable::ExpirableKeys;
use redisync::internal::fair_lock::FairLockKeys;
use redisync::internal::lock::{Acquire, FencedAcquire, Release};
use redisync::internal::rw_lock::RwLockKeys;
use redisync::{DumpedValue, LockBackend};
use redisync::{MemoryBackend, RedisBackend};

/// The seeds every run checks.
const SEEDS: [u64; 4] = [1, 2, 3, 0x5eed];
/// Operations per seed.
const OPS: usize = 400;
/// Operations between keyspace comparisons (and expiry pauses).
const BURST: usize = 20;
/// How far two TTLs read a moment apart may differ.
const TTL_TOLERANCE_MS: i64 = 150;
/// A short lease: ends during the pause after its burst.
const SHORT_MS: i64 = 100;
/// The pause after a burst that set a short lease.
const PAUSE: Duration = Duration::from_millis(250);

const NAMES: [&str; 3] = ["d:a", "d:b", "d:c"];
const HOLDERS: [&str; 3] = ["c1:1", "c1:2", "c2:1"];
const PERMITS: [&str; 3] = ["01", "02", "0a0b"];

/// Counting-call record ids (`{name}:redisync_op:<id>`), few so that
/// repeats and undone calls come up; `None`: an unrecorded call.
const RECORDS: [Option<&str>; 3] = [None, Some("r1"), Some("r2")];

/// Op-record ids of the writes that act once (`ops::once`), apart from
/// the counting calls' so that a repeat finds its own kind of record.
const ONCE_RECORDS: [Option<&str>; 3] = [None, Some("o1"), Some("o2")];

/// splitmix64: small, seedable, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// One operation with every argument fixed.
#[derive(Debug, Clone)]
enum Op {
    LockAcquire {
        name: &'static str,
        holder: &'static str,
        lease: i64,
    },
    FencedAcquire {
        name: &'static str,
        holder: &'static str,
        lease: i64,
    },
    LockRenew {
        name: &'static str,
        holder: &'static str,
        lease: i64,
    },
    LockRelease {
        name: &'static str,
        holder: &'static str,
        lease: i64,
        latch: String,
        latch_ms: i64,
    },
    LockForceRelease {
        name: &'static str,
        record: Option<&'static str>,
    },
    LockState {
        name: &'static str,
        holder: &'static str,
    },
    FairAcquire {
        name: &'static str,
        holder: &'static str,
        lease: i64,
        wait: i64,
        now: i64,
        enqueue: bool,
    },
    FairRelease {
        name: &'static str,
        holder: &'static str,
        lease: i64,
        now: i64,
        latch: String,
    },
    FairCancel {
        name: &'static str,
        holder: &'static str,
        wait: i64,
    },
    FairForceRelease {
        name: &'static str,
        now: i64,
    },
    ReadAcquire {
        name: &'static str,
        holder: &'static str,
        lease: i64,
    },
    WriteAcquire {
        name: &'static str,
        holder: &'static str,
        lease: i64,
    },
    ReadRelease {
        name: &'static str,
        holder: &'static str,
        latch: String,
    },
    WriteRelease {
        name: &'static str,
        holder: &'static str,
        lease: i64,
        latch: String,
    },
    ReadRenew {
        name: &'static str,
        holder: &'static str,
        lease: i64,
    },
    RwForceRelease {
        name: &'static str,
        mode: RwMode,
    },
    RwState {
        name: &'static str,
        holder: &'static str,
        write: bool,
    },
    CounterSet {
        name: &'static str,
        value: i64,
        record: Option<&'static str>,
    },
    /// Settles a write's op record (`ops::once::settle`).
    Settle {
        name: &'static str,
        record: &'static str,
    },
    CounterGet {
        name: &'static str,
    },
    SemaphoreAdd {
        name: &'static str,
        delta: i64,
        record: Option<&'static str>,
    },
    SemaphoreTake {
        name: &'static str,
        permits: i64,
        record: Option<&'static str>,
    },
    SemaphoreUndo {
        name: &'static str,
        permits: i64,
        record: &'static str,
    },
    SemaphoreDrain {
        name: &'static str,
        record: Option<&'static str>,
    },
    ExpirableAcquire {
        name: &'static str,
        permit: &'static str,
        lease_end: i64,
        now: i64,
        record: Option<&'static str>,
    },
    ExpirableUndo {
        name: &'static str,
        permit: &'static str,
        now: i64,
        record: &'static str,
    },
    ExpirableRelease {
        name: &'static str,
        permit: &'static str,
        now: i64,
    },
    ExpirableAvailable {
        name: &'static str,
        now: i64,
    },
    LatchCountDown {
        name: &'static str,
        record: Option<&'static str>,
    },
    LatchDelete {
        name: &'static str,
        record: Option<&'static str>,
    },
}

impl Op {
    /// Whether it may set a short TTL (so the burst ends with a pause).
    fn is_short(&self) -> bool {
        match self {
            Op::LockAcquire { lease, .. }
            | Op::FencedAcquire { lease, .. }
            | Op::LockRenew { lease, .. }
            | Op::FairAcquire { lease, .. }
            | Op::FairRelease { lease, .. }
            | Op::ReadAcquire { lease, .. }
            | Op::WriteAcquire { lease, .. }
            | Op::WriteRelease { lease, .. }
            | Op::ReadRenew { lease, .. } => *lease <= SHORT_MS,
            Op::LockRelease {
                lease, latch_ms, ..
            } => *lease <= SHORT_MS || *latch_ms <= SHORT_MS,
            _ => false,
        }
    }
}

fn wall_clock_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// A lease: mostly long, sometimes short, rarely out of range.
fn lease(rng: &mut Rng) -> i64 {
    match rng.below(20) {
        0 => rng.pick(&[0, -5]),
        1..=5 => SHORT_MS,
        _ => 60_000,
    }
}

/// An unlock latch key: often one of two reused ones (a retry returns the
/// first outcome), else a fresh one.
fn latch(rng: &mut Rng, name: &str, serial: usize) -> String {
    let id = if rng.chance(40) {
        format!("r{}", rng.below(2))
    } else {
        format!("u{serial}")
    };
    format!("redisson_unlock_latch:{{{name}}}:{id}")
}

fn generate(rng: &mut Rng, serial: usize) -> Op {
    let name = rng.pick(&NAMES);
    let holder = rng.pick(&HOLDERS);
    let now = wall_clock_ms();
    match rng.below(27) {
        0 | 1 => Op::LockAcquire {
            name,
            holder,
            lease: lease(rng),
        },
        2 => Op::FencedAcquire {
            name,
            holder,
            lease: lease(rng),
        },
        3 => Op::LockRenew {
            name,
            holder,
            lease: lease(rng),
        },
        4 | 5 => Op::LockRelease {
            name,
            holder,
            lease: lease(rng),
            latch: latch(rng, name, serial),
            latch_ms: if rng.chance(20) { SHORT_MS } else { 5_000 },
        },
        6 => {
            if rng.chance(80) {
                Op::LockForceRelease {
                    name,
                    record: rng.pick(&ONCE_RECORDS),
                }
            } else {
                Op::Settle {
                    name,
                    record: rng.pick(&["o1", "o2"]),
                }
            }
        }
        7 => Op::LockState { name, holder },
        8 | 9 => Op::FairAcquire {
            name,
            holder,
            lease: lease(rng),
            wait: rng.pick(&[1, 5_000, 60_000]),
            // Sometimes later, so queued waiters' slots run out.
            now: now + rng.pick(&[0, 0, 0, 10_000, 120_000]),
            enqueue: rng.chance(70),
        },
        10 => Op::FairRelease {
            name,
            holder,
            lease: lease(rng),
            now,
            latch: latch(rng, name, serial),
        },
        11 => Op::FairCancel {
            name,
            holder,
            wait: rng.pick(&[5_000, 60_000]),
        },
        12 => Op::FairForceRelease { name, now },
        13 | 14 => Op::ReadAcquire {
            name,
            holder,
            lease: lease(rng),
        },
        15 => Op::WriteAcquire {
            name,
            holder,
            lease: lease(rng),
        },
        16 => Op::ReadRelease {
            name,
            holder,
            latch: latch(rng, name, serial),
        },
        17 => Op::WriteRelease {
            name,
            holder,
            lease: lease(rng),
            latch: latch(rng, name, serial),
        },
        18 => Op::ReadRenew {
            name,
            holder,
            lease: lease(rng),
        },
        19 => Op::RwForceRelease {
            name,
            mode: if rng.chance(50) {
                RwMode::Read
            } else {
                RwMode::Write
            },
        },
        20 => Op::RwState {
            name,
            holder,
            write: rng.chance(50),
        },
        21 => Op::CounterSet {
            name,
            value: rng.pick(&[0, 1, 3, -1]),
            record: rng.pick(&ONCE_RECORDS),
        },
        22 => {
            if rng.chance(50) {
                Op::CounterGet { name }
            } else {
                Op::SemaphoreAdd {
                    name,
                    delta: rng.pick(&[1, 2, -1, 0]),
                    record: rng.pick(&RECORDS),
                }
            }
        }
        23 => {
            if rng.chance(60) {
                Op::SemaphoreTake {
                    name,
                    permits: rng.pick(&[1, 2, 0]),
                    record: rng.pick(&RECORDS),
                }
            } else if rng.chance(30) {
                Op::SemaphoreUndo {
                    name,
                    permits: rng.pick(&[1, 2, 0]),
                    record: rng.pick(&["r1", "r2"]),
                }
            } else {
                Op::SemaphoreDrain {
                    name,
                    record: rng.pick(&ONCE_RECORDS),
                }
            }
        }
        24 => {
            if rng.chance(80) {
                Op::ExpirableAcquire {
                    name,
                    permit: rng.pick(&PERMITS),
                    lease_end: now + rng.pick(&[-1, 50, 60_000]),
                    now,
                    record: rng.pick(&RECORDS),
                }
            } else {
                Op::ExpirableUndo {
                    name,
                    permit: rng.pick(&PERMITS),
                    now,
                    record: rng.pick(&["r1", "r2"]),
                }
            }
        }
        25 => {
            if rng.chance(60) {
                Op::ExpirableRelease {
                    name,
                    permit: rng.pick(&PERMITS),
                    now,
                }
            } else {
                Op::ExpirableAvailable { name, now }
            }
        }
        _ => {
            if rng.chance(75) {
                Op::LatchCountDown {
                    name,
                    record: rng.pick(&RECORDS),
                }
            } else {
                Op::LatchDelete {
                    name,
                    record: rng.pick(&ONCE_RECORDS),
                }
            }
        }
    }
}

/// An operation's result, comparable across stores.
#[derive(Debug, Clone, PartialEq)]
enum Out {
    /// `None`: acquired; else the TTL reported (`None`: no expiry).
    Acquire(Option<Option<i64>>),
    /// Whether a token was issued (its value is compared per side), or the
    /// TTL of the holder.
    Fenced(Option<u64>, Option<i64>),
    Release(Release),
    Flag(bool),
    Int(i64),
    Unit,
    State(bool, u64, Option<i64>),
    RwState(Option<RwMode>, u64, Option<i64>),
    Failed(Failure),
}

#[derive(Debug, Clone, PartialEq)]
enum Failure {
    InvalidArgument,
    WrongType,
    Protocol,
    Other(String),
}

fn ms(ttl: Option<Duration>) -> Option<i64> {
    ttl.map(|ttl| i64::try_from(ttl.as_millis()).unwrap())
}

fn acquire_out(acquire: Acquire) -> Out {
    match acquire {
        Acquire::Acquired => Out::Acquire(None),
        Acquire::Held { ttl } => Out::Acquire(Some(ms(ttl))),
        other => panic!("unknown outcome {other:?}"),
    }
}

fn failure(err: &redisync::Error) -> Failure {
    if err.is_invalid_argument() {
        Failure::InvalidArgument
    } else if err.is_protocol_error() && err.to_string().contains("WRONGTYPE") {
        Failure::WrongType
    } else if err.is_protocol_error() {
        Failure::Protocol
    } else {
        Failure::Other(err.to_string())
    }
}

fn fair_keys(name: &str) -> (String, String, String) {
    (
        keys::fair_queue(name),
        keys::fair_timeouts(name),
        keys::lock_channel(name),
    )
}

fn run<B: LockBackend + ?Sized>(store: &B, op: &Op) -> Out {
    let channel = |name: &str| keys::lock_channel(name);
    let rw_channel = |name: &str| keys::rw_channel(name);
    let sc = |name: &str| keys::semaphore_channel(name);
    let latch_channel = |name: &str| format!("redisson_countdownlatch__channel__{{{name}}}");
    let result: redisync::Result<Out> = (|| {
        Ok(match op {
            Op::LockAcquire {
                name,
                holder,
                lease,
            } => acquire_out(ops::lock::acquire(store, name, holder, *lease)?),
            Op::FencedAcquire {
                name,
                holder,
                lease,
            } => {
                let token_key = keys::fence_counter(name);
                match ops::lock::fenced_acquire(store, name, &token_key, holder, *lease)? {
                    FencedAcquire::Acquired { token } => Out::Fenced(Some(token), None),
                    FencedAcquire::Held { ttl } => Out::Fenced(None, ms(ttl)),
                    other => panic!("unknown outcome {other:?}"),
                }
            }
            Op::LockRenew {
                name,
                holder,
                lease,
            } => Out::Flag(ops::lock::renew(store, name, holder, *lease)?),
            Op::LockRelease {
                name,
                holder,
                lease,
                latch,
                latch_ms,
            } => Out::Release(ops::lock::release(
                store,
                name,
                &channel(name),
                holder,
                *lease,
                latch,
                *latch_ms,
            )?),
            Op::LockForceRelease { name, record } => Out::Flag(match record {
                Some(id) => ops::lock::force_release_recorded(
                    store,
                    name,
                    &channel(name),
                    &op_key(name, id),
                )?,
                None => ops::lock::force_release(store, name, &channel(name))?,
            }),
            Op::Settle { name, record } => match ops::once::settle(store, &op_key(name, record))? {
                None => Out::Flag(false),
                Some(reply) => Out::Int(reply.as_int().unwrap_or(-1)),
            },
            Op::LockState { name, holder } => {
                let state = ops::lock::state(store, name, holder)?;
                Out::State(state.locked, state.hold_count, ms(state.ttl))
            }
            Op::FairAcquire {
                name,
                holder,
                lease,
                wait,
                now,
                enqueue,
            } => {
                let (queue, timeouts, prefix) = fair_keys(name);
                let keys = FairLockKeys {
                    name,
                    queue: &queue,
                    timeouts: &timeouts,
                    channel_prefix: &prefix,
                };
                acquire_out(ops::fair_lock::acquire(
                    store, &keys, holder, *lease, *wait, *now, *enqueue,
                )?)
            }
            Op::FairRelease {
                name,
                holder,
                lease,
                now,
                latch,
            } => {
                let (queue, timeouts, prefix) = fair_keys(name);
                let keys = FairLockKeys {
                    name,
                    queue: &queue,
                    timeouts: &timeouts,
                    channel_prefix: &prefix,
                };
                Out::Release(ops::fair_lock::release(
                    store, &keys, holder, *lease, *now, latch, 5_000,
                )?)
            }
            Op::FairCancel { name, holder, wait } => {
                let (queue, timeouts, prefix) = fair_keys(name);
                let keys = FairLockKeys {
                    name,
                    queue: &queue,
                    timeouts: &timeouts,
                    channel_prefix: &prefix,
                };
                ops::fair_lock::cancel(store, &keys, holder, *wait)?;
                Out::Unit
            }
            Op::FairForceRelease { name, now } => {
                let (queue, timeouts, prefix) = fair_keys(name);
                let keys = FairLockKeys {
                    name,
                    queue: &queue,
                    timeouts: &timeouts,
                    channel_prefix: &prefix,
                };
                Out::Flag(ops::fair_lock::force_release(store, &keys, *now)?)
            }
            Op::ReadAcquire { name, holder, .. }
            | Op::WriteAcquire { name, holder, .. }
            | Op::ReadRelease { name, holder, .. }
            | Op::WriteRelease { name, holder, .. }
            | Op::ReadRenew { name, holder, .. } => {
                let channel = rw_channel(name);
                let write_field = format!("{holder}:write");
                let timeout_prefix = format!("{{{name}}}:{holder}:rwlock_timeout");
                let key_prefix = format!("{{{name}}}");
                let keys = RwLockKeys {
                    name,
                    channel: &channel,
                    holder,
                    write_field: &write_field,
                    timeout_prefix: &timeout_prefix,
                    key_prefix: &key_prefix,
                };
                match op {
                    Op::ReadAcquire { lease, .. } => {
                        acquire_out(ops::rw_lock::read_acquire(store, &keys, *lease)?)
                    }
                    Op::WriteAcquire { lease, .. } => {
                        acquire_out(ops::rw_lock::write_acquire(store, &keys, *lease)?)
                    }
                    Op::ReadRelease { latch, .. } => {
                        Out::Release(ops::rw_lock::read_release(store, &keys, latch, 5_000)?)
                    }
                    Op::WriteRelease { lease, latch, .. } => Out::Release(
                        ops::rw_lock::write_release(store, &keys, *lease, latch, 5_000)?,
                    ),
                    Op::ReadRenew { lease, .. } => {
                        Out::Flag(ops::rw_lock::read_renew(store, &keys, *lease)?)
                    }
                    _ => unreachable!(),
                }
            }
            Op::RwForceRelease { name, mode } => {
                let channel = rw_channel(name);
                let key_prefix = format!("{{{name}}}");
                let keys = RwLockKeys {
                    name,
                    channel: &channel,
                    holder: "",
                    write_field: ":write",
                    timeout_prefix: "",
                    key_prefix: &key_prefix,
                };
                Out::Flag(ops::rw_lock::force_release(store, &keys, *mode)?)
            }
            Op::RwState {
                name,
                holder,
                write,
            } => {
                let field = if *write {
                    format!("{holder}:write")
                } else {
                    (*holder).to_owned()
                };
                let state = ops::rw_lock::state(store, name, &field)?;
                Out::RwState(state.mode, state.hold_count, ms(state.ttl))
            }
            Op::CounterSet {
                name,
                value,
                record,
            } => Out::Flag(match record {
                Some(id) => ops::counter::set_if_absent_recorded(
                    store,
                    name,
                    &sc(name),
                    *value,
                    &value.to_string(),
                    &op_key(name, id),
                )?,
                None => {
                    ops::counter::set_if_absent(store, name, &sc(name), *value, &value.to_string())?
                }
            }),
            Op::CounterGet { name } => Out::Int(ops::counter::get(store, name)?),
            Op::SemaphoreAdd {
                name,
                delta,
                record,
            } => Out::Int(match record {
                Some(id) => {
                    ops::semaphore::add_recorded(store, name, &sc(name), *delta, &op_key(name, id))?
                }
                None => ops::semaphore::add(store, name, &sc(name), *delta)?,
            }),
            Op::SemaphoreTake {
                name,
                permits,
                record,
            } => Out::Flag(match record {
                Some(id) => {
                    ops::semaphore::try_acquire_recorded(store, name, *permits, &op_key(name, id))?
                }
                None => ops::semaphore::try_acquire(store, name, *permits)?,
            }),
            Op::SemaphoreUndo {
                name,
                permits,
                record,
            } => Out::Flag(ops::semaphore::undo_acquire(
                store,
                name,
                &sc(name),
                *permits,
                &op_key(name, record),
            )?),
            Op::SemaphoreDrain { name, record } => Out::Int(match record {
                Some(id) => ops::semaphore::drain_recorded(store, name, &op_key(name, id))?,
                None => ops::semaphore::drain(store, name)?,
            }),
            Op::ExpirableUndo {
                name,
                permit,
                now,
                record,
            } => {
                let (leases, channel) = (keys::permit_timeouts(name), sc(name));
                let keys = ExpirableKeys {
                    name,
                    leases: &leases,
                    channel: &channel,
                };
                Out::Int(ops::expirable::undo_acquire(
                    store,
                    &keys,
                    &[permit],
                    *now,
                    &op_key(name, record),
                )? as i64)
            }
            Op::ExpirableAcquire {
                name,
                permit,
                lease_end,
                now,
                record,
            } => {
                let (leases, channel) = (keys::permit_timeouts(name), sc(name));
                let keys = ExpirableKeys {
                    name,
                    leases: &leases,
                    channel: &channel,
                };
                let record = record.map(|id| op_key(name, id));
                acquire_out(ops::expirable::acquire_many_recorded(
                    store,
                    &keys,
                    &[permit],
                    *lease_end,
                    *now,
                    record.as_deref(),
                )?)
            }
            Op::ExpirableRelease { name, permit, now } => {
                let (leases, channel) = (keys::permit_timeouts(name), sc(name));
                let keys = ExpirableKeys {
                    name,
                    leases: &leases,
                    channel: &channel,
                };
                Out::Flag(ops::expirable::release(store, &keys, permit, *now)?)
            }
            Op::ExpirableAvailable { name, now } => {
                let (leases, channel) = (keys::permit_timeouts(name), sc(name));
                let keys = ExpirableKeys {
                    name,
                    leases: &leases,
                    channel: &channel,
                };
                Out::Int(ops::expirable::available(store, &keys, *now)?)
            }
            Op::LatchCountDown { name, record } => Out::Int(match record {
                Some(id) => ops::latch::count_down_recorded(
                    store,
                    name,
                    &latch_channel(name),
                    &op_key(name, id),
                )?,
                None => ops::latch::count_down(store, name, &latch_channel(name))?,
            }),
            Op::LatchDelete { name, record } => Out::Flag(match record {
                Some(id) => ops::latch::delete_recorded(
                    store,
                    name,
                    &latch_channel(name),
                    &op_key(name, id),
                )?,
                None => ops::latch::delete(store, name, &latch_channel(name))?,
            }),
        })
    })();
    result.unwrap_or_else(|err| Out::Failed(failure(&err)))
}

/// A counting call's record key (`{name}:redisync_op:<id>`).
fn op_key(name: &str, id: &str) -> String {
    keys::op_record(name, id)
}

/// Whether two TTLs read a moment apart agree.
fn ttl_close(a: Option<i64>, b: Option<i64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= TTL_TOLERANCE_MS,
        (a, b) => a == b,
    }
}

fn outs_agree(memory: &Out, redis: &Out) -> bool {
    match (memory, redis) {
        (Out::Acquire(Some(a)), Out::Acquire(Some(b))) => ttl_close(*a, *b),
        (Out::Fenced(a, ttl_a), Out::Fenced(b, ttl_b)) => {
            a.is_some() == b.is_some() && ttl_close(*ttl_a, *ttl_b)
        }
        (Out::State(l1, c1, t1), Out::State(l2, c2, t2)) => {
            l1 == l2 && c1 == c2 && ttl_close(*t1, *t2)
        }
        (Out::RwState(m1, c1, t1), Out::RwState(m2, c2, t2)) => {
            m1 == m2 && c1 == c2 && ttl_close(*t1, *t2)
        }
        (a, b) => a == b,
    }
}

/// A keyspace entry: type and value as text, and its TTL.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    value: Value,
    pttl: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    String(String),
    Hash(BTreeMap<String, String>),
    List(Vec<String>),
    ZSet(Vec<(String, f64)>),
}

impl Value {
    /// A hash, list or sorted set with nothing in it: what reading a key
    /// that is gone answers (Redis deletes a collection's last element's
    /// key).
    fn is_empty_collection(&self) -> bool {
        match self {
            Value::String(_) => false,
            Value::Hash(fields) => fields.is_empty(),
            Value::List(items) => items.is_empty(),
            Value::ZSet(members) => members.is_empty(),
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn memory_keyspace(store: &MemoryBackend) -> BTreeMap<String, Entry> {
    store
        .dump()
        .into_iter()
        .map(|key| {
            let value = match &key.value {
                DumpedValue::String(bytes) => Value::String(text(bytes)),
                DumpedValue::Hash(fields) => {
                    Value::Hash(fields.iter().map(|(f, v)| (text(f), text(v))).collect())
                }
                DumpedValue::List(items) => Value::List(items.iter().map(|i| text(i)).collect()),
                DumpedValue::ZSet(members) => {
                    Value::ZSet(members.iter().map(|(m, s)| (text(m), *s)).collect())
                }
                other => panic!("unknown value {other:?}"),
            };
            (
                key.key.clone(),
                Entry {
                    value,
                    pttl: key.pttl_ms,
                },
            )
        })
        .collect()
}

fn redis_keyspace(conn: &mut redis::Connection) -> BTreeMap<String, Entry> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    for _ in 0..10_000 {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(conn)
            .unwrap();
        keys.extend(batch);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(cursor, 0, "SCAN did not finish");
    let mut space = BTreeMap::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE").arg(&key).query(conn).unwrap();
        let value = match kind.as_str() {
            "none" => continue, // expired between SCAN and TYPE
            // Gone since its TYPE (a short TTL run out): as if not seen.
            "string" => match redis::cmd("GET").arg(&key).query(conn).unwrap() {
                Some(value) => Value::String(value),
                None => continue,
            },
            "hash" => Value::Hash(redis::cmd("HGETALL").arg(&key).query(conn).unwrap()),
            "list" => Value::List(
                redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query(conn)
                    .unwrap(),
            ),
            "zset" => Value::ZSet(
                redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(conn)
                    .unwrap(),
            ),
            other => panic!("{key}: unexpected type {other}"),
        };
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query(conn).unwrap();
        // Gone since its TYPE: a read of a missing key answers an empty
        // collection (Redis keeps none), and its PTTL -2.
        if pttl == -2 || value.is_empty_collection() {
            continue;
        }
        space.insert(
            key,
            Entry {
                value,
                pttl: (pttl >= 0).then_some(pttl),
            },
        );
    }
    space
}

/// Compares the two keyspaces; `Err` says the first difference.
fn compare_keyspaces(
    memory: &BTreeMap<String, Entry>,
    redis: &BTreeMap<String, Entry>,
) -> Result<(), String> {
    let names: Vec<&String> = memory.keys().chain(redis.keys()).collect();
    for key in names {
        let (m, r) = (memory.get(key), redis.get(key));
        // A key about to expire may be gone on one side already.
        let expiring = |entry: Option<&Entry>| {
            entry.is_some_and(|e| e.pttl.is_some_and(|t| t < TTL_TOLERANCE_MS))
        };
        if expiring(m) || expiring(r) {
            continue;
        }
        let (Some(m), Some(r)) = (m, r) else {
            return Err(format!("{key}: memory {m:?}, redis {r:?}"));
        };
        if !ttl_close(m.pttl, r.pttl) {
            return Err(format!(
                "{key}: TTL memory {:?}, redis {:?}",
                m.pttl, r.pttl
            ));
        }
        let same = match (&m.value, &r.value) {
            // Fencing-token counters are raised to each store's clock.
            (Value::String(a), Value::String(b)) if key.starts_with("redisson_lock_token:") => {
                a.parse::<u64>().is_ok_and(|a| a > 0) && b.parse::<u64>().is_ok_and(|b| b > 0)
            }
            // Slot deadlines may be computed from a PTTL read a moment
            // apart on the two stores.
            (Value::ZSet(a), Value::ZSet(b)) => {
                let sorted = |set: &[(String, f64)]| {
                    let mut set = set.to_vec();
                    set.sort_by(|x, y| x.0.cmp(&y.0));
                    set
                };
                let (a, b) = (sorted(a), sorted(b));
                a.len() == b.len()
                    && a.iter().zip(&b).all(|((ma, sa), (mb, sb))| {
                        ma == mb && (sa - sb).abs() <= TTL_TOLERANCE_MS as f64
                    })
            }
            (a, b) => a == b,
        };
        if !same {
            return Err(format!("{key}: memory {:?}, redis {:?}", m.value, r.value));
        }
    }
    Ok(())
}

/// What `ops::inspect` reads of `name`, as comparable across stores: the
/// fencing token's presence (its value follows each store's clock), TTLs
/// and slot deadlines within [`TTL_TOLERANCE_MS`].
fn compare_inspections(
    memory: &MemoryBackend,
    redis: &RedisBackend,
    name: &str,
) -> Result<(), String> {
    let (m, r) = match (
        ops::inspect::inspect(memory, name),
        ops::inspect::inspect(redis, name),
    ) {
        (Ok(m), Ok(r)) => (m, r),
        (m, r) => return Err(format!("memory {m:?}, redis {r:?}")),
    };
    let differ = || Err(format!("memory {m:#?}, redis {r:#?}"));
    let close = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= TTL_TOLERANCE_MS,
        (a, b) => a == b,
    };
    let holders_agree = m.holders.len() == r.holders.len()
        && m.holders.iter().zip(&r.holders).all(|(a, b)| {
            (&a.id, &a.client_id, a.thread, a.holds, a.mode)
                == (&b.id, &b.client_id, b.thread, b.holds, b.mode)
                && ttl_close(ms(a.ttl), ms(b.ttl))
        });
    let queues_agree = m.queue.len() == r.queue.len()
        && m.queue
            .iter()
            .zip(&r.queue)
            .all(|(a, b)| a.id == b.id && close(a.deadline_ms, b.deadline_ms));
    let leases_agree = m.leases.len() == r.leases.len()
        && m.leases
            .iter()
            .zip(&r.leases)
            .all(|(a, b)| (&a.permit_id, a.lease_end_ms) == (&b.permit_id, b.lease_end_ms));
    if m.kind != r.kind
        || !ttl_close(ms(m.ttl), ms(r.ttl))
        || m.rw_mode != r.rw_mode
        || m.fencing_token.is_some() != r.fencing_token.is_some()
        || m.counter != r.counter
        || !holders_agree
        || !queues_agree
        || !leases_agree
    {
        return differ();
    }
    Ok(())
}

/// How many times a seed runs when each run's difference is one that
/// timing explains (see [`Tried::explained`]).
const TRIES: usize = 3;
/// A pair of reads (an operation on both stores, or the two keyspaces)
/// further apart than this may see TTLs differ by more than
/// [`TTL_TOLERANCE_MS`] (a preempted thread on a loaded machine).
const SLOW_PAIR: Duration = Duration::from_millis((TTL_TOLERANCE_MS / 2) as u64);
/// Slack around a short lease's end: a store's expiry is to the millisecond.
const EXPIRY_SLACK: Duration = Duration::from_millis(10);

/// Runs `ops` operations of `seed` on both stores, checking as it goes.
/// A difference that the run's timing explains (an operation whose two
/// calls straddled the end of a short lease set earlier, or reads too far
/// apart for the TTL tolerance) reruns the seed on fresh stores, at most
/// [`TRIES`] times; any other difference fails at once.
fn check_seed(seed: u64, ops: usize) {
    for attempt in 1..=TRIES {
        match try_seed(seed, ops) {
            Ok(()) => return,
            Err(Tried {
                explained: true,
                message,
            }) if attempt < TRIES => {
                eprintln!(
                    "seed {seed}, run {attempt}: a difference timing explains, rerun: {message}"
                );
            }
            Err(Tried { explained, message }) => panic!(
                "{message}{}",
                if explained {
                    format!("\n(each of {TRIES} runs differed; timing could explain each)")
                } else {
                    String::new()
                }
            ),
        }
    }
}

/// How a run of a seed failed.
struct Tried {
    /// Whether the run's timing explains the difference (see [`check_seed`]).
    explained: bool,
    message: String,
}

/// When an operation's calls ran: from before the memory call to after the
/// Redis call.
#[derive(Clone, Copy)]
struct Span {
    start: Instant,
    end: Instant,
}

impl Span {
    fn slow(&self) -> bool {
        self.end.duration_since(self.start) > SLOW_PAIR
    }

    /// Whether a short lease set during `short` may have ended on one
    /// store and not the other while this span ran.
    fn straddles_the_end_of(&self, short: &Span) -> bool {
        let lease = Duration::from_millis(SHORT_MS as u64);
        let (from, to) = (
            short.start + lease - EXPIRY_SLACK,
            short.end + lease + EXPIRY_SLACK,
        );
        self.start <= to && self.end >= from
    }
}

/// One run of `ops` operations of `seed` on fresh stores.
fn try_seed(seed: u64, ops: usize) -> Result<(), Tried> {
    let server = TestServer::start();
    let redis = RedisBackend::open(&server.url()).unwrap();
    let mut admin = server.connection();
    let memory = MemoryBackend::new();
    let mut rng = Rng(seed);
    let mut recent: VecDeque<(Op, Out)> = VecDeque::new();
    let mut tokens: [HashMap<&str, u64>; 2] = [HashMap::new(), HashMap::new()];
    let mut short_in_burst = false;
    // When each short lease of this burst and the last was set.
    let mut shorts: Vec<Span> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let fail = |index: usize, what: &str, recent: &VecDeque<(Op, Out)>, explained: bool| {
        let history: Vec<String> = recent
            .iter()
            .map(|(op, out)| format!("  {op:?} -> {out:?}"))
            .collect();
        Tried {
            explained,
            message: format!(
                "seed {seed}, operation {index}: {what}\nlast operations (memory results):\n{}\nrerun: REDISYNC_DIFF_SEED={seed} REDISYNC_DIFF_OPS={ops} cargo test --test differential",
                history.join("\n")
            ),
        }
    };
    for index in 0..ops {
        let op = generate(&mut rng, index);
        let start = Instant::now();
        let on_memory = run(&memory, &op);
        let on_redis = run(&redis, &op);
        let span = Span {
            start,
            end: Instant::now(),
        };
        if op.is_short() {
            short_in_burst = true;
            shorts.push(span);
        }
        if !outs_agree(&on_memory, &on_redis) {
            let explained = span.slow() || shorts.iter().any(|s| span.straddles_the_end_of(s));
            return Err(fail(
                index,
                &format!("{op:?}: memory {on_memory:?}, redis {on_redis:?}"),
                &recent,
                explained,
            ));
        }
        for (side, out) in [&on_memory, &on_redis].into_iter().enumerate() {
            if let (Out::Fenced(Some(token), _), Op::FencedAcquire { name, .. }) = (out, &op) {
                let last = tokens[side].insert(name, *token).unwrap_or(0);
                if *token <= last {
                    return Err(fail(
                        index,
                        &format!("{op:?}: token {token} after {last} (side {side})"),
                        &recent,
                        false,
                    ));
                }
            }
        }
        seen.insert(kind(&on_memory));
        recent.push_back((op, on_memory));
        if recent.len() > 10 {
            recent.pop_front();
        }
        if (index + 1) % BURST == 0 || index + 1 == ops {
            let start = Instant::now();
            let (on_memory, on_redis) = (memory_keyspace(&memory), redis_keyspace(&mut admin));
            let read = Span {
                start,
                end: Instant::now(),
            };
            if let Err(difference) = compare_keyspaces(&on_memory, &on_redis) {
                let explained = read.slow() || shorts.iter().any(|s| read.straddles_the_end_of(s));
                return Err(fail(
                    index,
                    &format!("keyspaces differ: {difference}"),
                    &recent,
                    explained,
                ));
            }
            if short_in_burst {
                thread::sleep(PAUSE);
                short_in_burst = false;
            }
            // Every short lease set so far has ended (the pause is longer).
            shorts.clear();
            // After the pause, so no short lease ends between the two reads.
            for name in NAMES {
                let start = Instant::now();
                let compared = compare_inspections(&memory, &redis, name);
                let read = Span {
                    start,
                    end: Instant::now(),
                };
                if let Err(difference) = compared {
                    return Err(fail(
                        index,
                        &format!("inspect {name}: {difference}"),
                        &recent,
                        read.slow(),
                    ));
                }
            }
        }
    }
    // The run met the interesting outcomes, not only refusals.
    if ops >= OPS {
        for wanted in [
            "acquired",
            "held",
            "released",
            "still held",
            "not held",
            "wrong type",
            "invalid",
            "token",
        ] {
            assert!(
                seen.contains(wanted),
                "seed {seed}: no {wanted:?} outcome in {seen:?}"
            );
        }
    }
    Ok(())
}

/// A coarse name for an outcome, to check a run covered the interesting ones.
fn kind(out: &Out) -> &'static str {
    match out {
        Out::Acquire(None) => "acquired",
        Out::Acquire(Some(_)) | Out::Fenced(None, _) => "held",
        Out::Fenced(Some(_), _) => "token",
        Out::Release(Release::Released) => "released",
        Out::Release(Release::StillHeld) => "still held",
        Out::Release(_) => "not held",
        Out::Failed(Failure::WrongType) => "wrong type",
        Out::Failed(Failure::InvalidArgument) => "invalid",
        Out::Failed(_) => "other failure",
        _ => "value",
    }
}

#[test]
fn memory_and_redis_agree_on_random_operations() {
    let ops = std::env::var("REDISYNC_DIFF_OPS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(OPS);
    match std::env::var("REDISYNC_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => check_seed(seed, ops),
        None => {
            let runs: Vec<_> = SEEDS
                .iter()
                .map(|&seed| thread::spawn(move || check_seed(seed, ops)))
                .collect();
            // Every seed's thread is joined before a failure is raised: one
            // still running when the test process exits would leave its
            // redis-server behind.
            let failures: Vec<_> = runs
                .into_iter()
                .filter_map(|run| run.join().err())
                .collect();
            if let Some(panic) = failures.into_iter().next() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}
