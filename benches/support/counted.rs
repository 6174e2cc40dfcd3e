//! A [`RedisBackend`] that counts what the library asks of it: each
//! script by id (`lock_acquire`, ...) and how it answered, and the plain
//! `PUBLISH`es. The multi-process bench builds its children's clients on
//! it to count failed acquire attempts, which no public counter reports.
//!
//! Every [`LockBackend`] method is forwarded as is, the defaulted ones
//! too, so a client on it behaves as one built with `redis_url` (only the
//! connections' `CLIENT SETNAME` differs: the backend's own name). When
//! `LockBackend` gains a method, forward it here as well; the bench checks
//! that the scripts counted here match the server's `EVALSHA` calls.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redisync::RedisBackend;
use redisync::backend::{LockBackend, PubSubConnection, Reply, ScriptCall, ServerReply};

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

/// A [`RedisBackend`] that counts; clones share the counts.
#[derive(Clone)]
pub(crate) struct Counted {
    inner: Arc<RedisBackend>,
    counts: Arc<Mutex<Counts>>,
}

impl Counted {
    pub(crate) fn new(inner: RedisBackend) -> Self {
        Counted {
            inner: Arc::new(inner),
            counts: Arc::default(),
        }
    }

    /// What was counted so far.
    pub(crate) fn counts(&self) -> Counts {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl LockBackend for Counted {
    fn run_script(&self, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        let reply = self.inner.run_script(call);
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

    fn publish(&self, channel: &str, payload: &str) -> redisync::Result<()> {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .publishes += 1;
        self.inner.publish(channel, payload)
    }

    fn with_pubsub(
        &self,
        session: &mut dyn FnMut(&mut dyn PubSubConnection) -> redisync::Result<()>,
    ) -> redisync::Result<()> {
        self.inner.with_pubsub(session)
    }

    fn slot_of(&self, key: &str) -> Option<u16> {
        self.inner.slot_of(key)
    }

    fn response_timeout(&self) -> Option<Duration> {
        self.inner.response_timeout()
    }

    fn server_clock_offset_ms(&self) -> Option<i64> {
        self.inner.server_clock_offset_ms()
    }

    fn server_command(&self, args: &[&str]) -> redisync::Result<Vec<ServerReply>> {
        self.inner.server_command(args)
    }
}
