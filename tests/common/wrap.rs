//! One forwarding [`LockBackend`] for the tests and benches that count,
//! delay or fail a store's calls: [`Wrapped`] holds the real store and a
//! [`Hook`]. The hook sees the round trips it may intercept (scripts,
//! publishes, pub/sub sessions, plain server commands; each forwarded as
//! is unless the hook says otherwise), and `Wrapped` forwards every other
//! method of the trait itself, the defaulted ones too (`slot_of`,
//! `response_timeout`, `server_now_ms`). A wrapper that left one
//! out would fall back to the trait's default, and a client on it would
//! behave unlike one on the real store: the wrong claim window, handoffs
//! never dated by the server's clock, waiters queued on a cluster.
//!
//! When `LockBackend` gains a method, forward it in `Wrapped` (or give
//! `Hook` a forwarding default for it) and check it in
//! [`assert_forwards_every_method`], which every test file with a hook
//! calls for it.
//!
//! ```ignore
//! struct Counting(AtomicU64);
//! impl Hook for Counting {
//!     fn run_script(&self, inner: &Store, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
//!         self.0.fetch_add(1, Ordering::SeqCst);
//!         inner.run_script(call)
//!     }
//! }
//! let counted = Arc::new(Wrapped::around(store, Counting(AtomicU64::new(0))));
//! let client = Client::builder().shared_backend(counted.clone()).build()?;
//! counted.0.load(Ordering::SeqCst); // the hook's fields, through `Deref`
//! ```

use std::ops::Deref;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redisync::{
    Effect, LockBackend, Message, PubSubConnection, Reply, Resend, Script, ScriptCall, ServerReply,
};

/// The real store, as a [`Hook`] is given it.
pub type Store = dyn LockBackend;

/// A pub/sub session, as [`LockBackend::with_pubsub`] lends it.
pub type Session<'a> = &'a mut dyn FnMut(&mut dyn PubSubConnection) -> redisync::Result<()>;

/// What a test does to the calls a [`Wrapped`] store passes it. Each
/// method is given the real store; the defaults forward the call to it
/// unchanged, so a hook overrides only what it intercepts.
pub trait Hook: Send + Sync + 'static {
    /// A script call (the default runs it on `inner`).
    fn run_script(&self, inner: &Store, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        inner.run_script(call)
    }

    /// A plain `PUBLISH` (the default sends it on `inner`).
    fn publish(&self, inner: &Store, channel: &str, payload: &str) -> redisync::Result<()> {
        inner.publish(channel, payload)
    }

    /// A pub/sub session (the default opens it on `inner`).
    fn with_pubsub(&self, inner: &Store, session: Session<'_>) -> redisync::Result<()> {
        inner.with_pubsub(session)
    }

    /// A plain server command (the default sends it on `inner`).
    fn server_command(&self, inner: &Store, args: &[&str]) -> redisync::Result<Vec<ServerReply>> {
        inner.server_command(args)
    }
}

/// The real store behind a [`Hook`]: every [`LockBackend`] method goes to
/// the hook (the round trips it may intercept) or straight to the store
/// (all the others). Dereferences to the hook, so a test reads and sets
/// its hook's fields on the wrapped store itself. Clones share the store,
/// and the hook's state as far as its `Clone` shares it.
#[derive(Clone)]
pub struct Wrapped<H> {
    inner: Arc<dyn LockBackend>,
    hook: H,
}

impl<H: Hook> Wrapped<H> {
    /// `inner` (e.g. `Arc::clone(other_client.backend())`: the same store)
    /// behind `hook`.
    pub fn around(inner: Arc<dyn LockBackend>, hook: H) -> Self {
        Wrapped { inner, hook }
    }

    /// The real store.
    pub fn inner(&self) -> &Arc<dyn LockBackend> {
        &self.inner
    }
}

impl<H> Deref for Wrapped<H> {
    type Target = H;

    fn deref(&self) -> &H {
        &self.hook
    }
}

impl<H: Hook> LockBackend for Wrapped<H> {
    fn run_script(&self, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        self.hook.run_script(&*self.inner, call)
    }

    fn publish(&self, channel: &str, payload: &str) -> redisync::Result<()> {
        self.hook.publish(&*self.inner, channel, payload)
    }

    fn with_pubsub(&self, session: Session<'_>) -> redisync::Result<()> {
        self.hook.with_pubsub(&*self.inner, session)
    }

    fn server_command(&self, args: &[&str]) -> redisync::Result<Vec<ServerReply>> {
        self.hook.server_command(&*self.inner, args)
    }

    // The methods below have a default in the trait: forwarded all the
    // same, or the wrapped store would answer the default, not the store's.

    fn slot_of(&self, key: &str) -> Option<u16> {
        self.inner.slot_of(key)
    }

    fn response_timeout(&self) -> Option<Duration> {
        self.inner.response_timeout()
    }

    fn server_now_ms(&self) -> Option<i64> {
        self.inner.server_now_ms()
    }
}

/// A script no hook intercepts (no store runs it: [`Distinct`] only
/// answers what it was called with).
static FORWARD_CHECK: Script = Script::new(
    "test_forward_check",
    "check that a wrapper forwards a script (test)",
    "return KEYS[1]",
);

/// The response timeout [`Distinct`] reports (no default is this).
pub const DISTINCT_RESPONSE_TIMEOUT: Duration = Duration::from_millis(1_234);
/// The server clock offset [`Distinct`] reports.
pub const DISTINCT_SERVER_NOW_MS: i64 = -4_321;

/// A store whose every method answers something no trait default does,
/// and that records what it was asked: what a wrapper forwards shows
/// through it, and what it drops shows as the default.
#[derive(Default)]
pub struct Distinct {
    publishes: Mutex<Vec<(String, String)>>,
}

impl Distinct {
    /// Its hash slot of `key` (the trait's default is `None`).
    pub fn slot(key: &str) -> Option<u16> {
        Some(1_000 + u16::try_from(key.len()).unwrap_or(0))
    }
}

impl LockBackend for Distinct {
    fn run_script(&self, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        Ok(Reply::Status(format!(
            "ran {} on {}",
            call.script().id(),
            call.keys().join(",")
        )))
    }

    fn publish(&self, channel: &str, payload: &str) -> redisync::Result<()> {
        let mut publishes = self.publishes.lock().unwrap();
        publishes.push((channel.to_owned(), payload.to_owned()));
        Ok(())
    }

    fn with_pubsub(&self, session: Session<'_>) -> redisync::Result<()> {
        session(&mut DistinctConnection)
    }

    fn slot_of(&self, key: &str) -> Option<u16> {
        Distinct::slot(key)
    }

    fn response_timeout(&self) -> Option<Duration> {
        Some(DISTINCT_RESPONSE_TIMEOUT)
    }

    fn server_now_ms(&self) -> Option<i64> {
        Some(DISTINCT_SERVER_NOW_MS)
    }

    fn server_command(&self, args: &[&str]) -> redisync::Result<Vec<ServerReply>> {
        let reply = Reply::Status(format!("ran {}", args.join(" ")));
        Ok(vec![ServerReply::new(
            "distinct",
            reply,
            Duration::from_micros(7),
        )])
    }
}

/// [`Distinct`]'s pub/sub connection: one message is always waiting.
struct DistinctConnection;

impl PubSubConnection for DistinctConnection {
    fn subscribe(&mut self, _channels: &[String]) -> redisync::Result<()> {
        Ok(())
    }

    fn unsubscribe(&mut self, _channels: &[String]) -> redisync::Result<()> {
        Ok(())
    }

    fn next_message(&mut self, _timeout: Duration) -> redisync::Result<Option<Message>> {
        Ok(Some(Message::new("distinct:channel", "distinct payload")))
    }
}

/// Wraps a [`Distinct`] store behind `hook` and checks that the wrapped
/// store answers every [`LockBackend`] method as the store does: the round
/// trips a hook may intercept (given a script, a channel, a session and a
/// command the test's hooks leave alone) and every other one. Panics naming the
/// first method that differs.
pub fn assert_forwards_every_method<H: Hook>(hook: H) {
    let store = Arc::new(Distinct::default());
    let wrapped = Wrapped::around(Arc::clone(&store) as Arc<dyn LockBackend>, hook);

    let call = ScriptCall::new(&FORWARD_CHECK, Resend::Harmless, Effect::Change(|_| true))
        .key("forward:key");
    assert_eq!(
        wrapped.run_script(&call).unwrap(),
        store.run_script(&call).unwrap(),
        "run_script is not forwarded"
    );

    wrapped
        .publish("forward:channel", "forward payload")
        .unwrap();
    assert_eq!(
        *store.publishes.lock().unwrap(),
        [("forward:channel".to_owned(), "forward payload".to_owned())],
        "publish is not forwarded"
    );

    let mut received = None;
    wrapped
        .with_pubsub(&mut |conn| {
            conn.subscribe(&["distinct:channel".to_owned()])?;
            received = conn.next_message(Duration::ZERO)?;
            Ok(())
        })
        .unwrap();
    assert_eq!(
        received,
        Some(Message::new("distinct:channel", "distinct payload")),
        "with_pubsub does not lend the store's connection"
    );

    for key in ["a", "forward:key", "{tag}:longer key"] {
        assert_eq!(
            wrapped.slot_of(key),
            Distinct::slot(key),
            "slot_of is not forwarded"
        );
    }
    assert_eq!(
        wrapped.response_timeout(),
        Some(DISTINCT_RESPONSE_TIMEOUT),
        "response_timeout is not forwarded (the claim window would be the default)"
    );
    assert_eq!(
        wrapped.server_now_ms(),
        Some(DISTINCT_SERVER_NOW_MS),
        "server_now_ms is not forwarded (handoffs could not be dated)"
    );
    assert_eq!(
        wrapped.server_command(&["PING"]).unwrap(),
        store.server_command(&["PING"]).unwrap(),
        "server_command is not forwarded"
    );
}
