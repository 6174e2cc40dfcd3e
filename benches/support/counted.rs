//! A [`RedisBackend`] that counts what the library asks of it: each
//! script by id (`lock_acquire`, ...) and how it answered, and the plain
//! `PUBLISH`es. The multi-process bench builds its children's clients on
//! it to count failed acquire attempts, which no public counter reports.
//!
//! Every other [`LockBackend`](redisync::LockBackend) method is forwarded as is, the defaulted
//! ones too (by `tests/common/wrap.rs`, which the tests' wrappers share),
//! so a client on it behaves as one built with `redis_url` (only the
//! connections' `CLIENT SETNAME` differs: the backend's own name). The
//! bench checks that the scripts counted here match the server's
//! `EVALSHA` calls.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use redisync::RedisBackend;
use redisync::{Reply, ScriptCall};

use crate::common::wrap::{Hook, Store, Wrapped};

/// One script's calls, by how they answered.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ScriptCount {
    pub(crate) calls: u64,
    /// Answered nil: for an acquire script, acquired.
    pub(crate) nil: u64,
    /// Answered an error reply, or did not answer (`Err`).
    pub(crate) errors: u64,
}

/// What a [`Counted`] backend was asked so far.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counts {
    pub(crate) scripts: BTreeMap<&'static str, ScriptCount>,
    pub(crate) publishes: u64,
}

impl Counts {
    /// Calls of the acquire scripts ([`is_acquire`]) that did not acquire:
    /// their reply was not nil (the lock's TTL or a wait hint, Redisson's
    /// convention), or an error.
    pub(crate) fn failed_acquires(&self) -> u64 {
        self.scripts
            .iter()
            .filter(|(id, _)| is_acquire(id))
            .map(|(_, c)| c.calls - c.nil)
            .sum()
    }

    /// `id:calls:nil:errors` per script, `;`-separated, for the child's
    /// report line.
    pub(crate) fn encode(&self) -> String {
        self.scripts
            .iter()
            .map(|(id, c)| format!("{id}:{}:{}:{}", c.calls, c.nil, c.errors))
            .collect::<Vec<_>>()
            .join(";")
    }
}

/// An acquire script's id (`lock_acquire`, `fair_lock_acquire`, any
/// other that takes a hold), not an undo and not a query of what was
/// acquired (`expirable_acquired`).
pub(crate) fn is_acquire(id: &str) -> bool {
    id.contains("acquire") && !id.contains("undo") && !id.contains("acquired")
}

/// A [`RedisBackend`] that counts; clones share the counts. The shared
/// forwarding wrapper of the tests (`tests/common/wrap.rs`, through
/// `common`), so every other method reaches the store as is.
pub(crate) type Counted = Wrapped<Counter>;

impl Counted {
    pub(crate) fn new(inner: RedisBackend) -> Self {
        Wrapped::around(Arc::new(inner), Counter::default())
    }
}

/// What a [`Counted`] backend does to the calls it counts: scripts by id
/// and how they answered, and the plain `PUBLISH`es.
#[derive(Clone, Default)]
pub(crate) struct Counter {
    counts: Arc<Mutex<Counts>>,
}

impl Counter {
    /// What was counted so far.
    pub(crate) fn counts(&self) -> Counts {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Hook for Counter {
    fn run_script(&self, inner: &Store, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        let reply = inner.run_script(call);
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let count = counts.scripts.entry(call.script().id()).or_default();
        count.calls += 1;
        match &reply {
            Ok(Reply::Nil) => count.nil += 1,
            Ok(Reply::Error(_)) | Err(_) => count.errors += 1,
            Ok(_) => {}
        }
        reply
    }

    fn publish(&self, inner: &Store, channel: &str, payload: &str) -> redisync::Result<()> {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .publishes += 1;
        inner.publish(channel, payload)
    }
}
