//! Issue 32, "every write acts once": a write that is not an acquire, a
//! release or a renewal (a force release, a delete, a drain, a set of
//! permits or of a count) acts once, whatever the network does with its
//! copies, and an error means it did not and will not act.
//!
//! The fault: a middlebox holds a request, the client's side of that
//! connection drops, the client sends it again at once on another
//! connection, and the held original is delivered later, still inside its
//! window (`DelayProxy::hold_next_and_cut`). Each scene confirms the fault:
//! the held bytes are the call's `EVALSHA` naming the object (not a
//! `SUBSCRIBE`), and the server answered the delivered original.
//!
//! Then the same at the level of `redisync::internal` on a `MemoryBackend`: the
//! same recorded call twice acts once; a call settled first is refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::delay_proxy::DelayProxy;
use common::late::client_for;
use common::{TestServer, unique_name};
use redisync::{Client, Lock};

/// The response timeout of the client whose request is held: long, so the
/// original delivered a moment later is well inside its window.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Long enough that no lease runs out during a scene (and no watchdog runs).
const LEASE: Duration = Duration::from_secs(60);
/// How long to wait for the held request.
const HOLD_WAIT: Duration = Duration::from_secs(10);

/// A client straight to `server` (no proxy).
fn direct(server: &TestServer) -> Client {
    client_for(&server.url(), RESPONSE_TIMEOUT)
}

/// Checks that the held bytes are the script call naming `name`.
fn assert_held_call(proxy: &DelayProxy, name: &str) {
    proxy.wait_held(HOLD_WAIT);
    let held = String::from_utf8_lossy(&proxy.held_request()).into_owned();
    assert!(
        held.contains("EVALSHA") && held.contains(name) && !held.contains("SUBSCRIBE"),
        "the held request is not the call on {name:?}: {held:?}"
    );
}

/// Delivers the held original and returns the server's reply to it.
fn deliver(proxy: &DelayProxy, name: &str) -> String {
    proxy.deliver();
    let (sent, reply) = proxy.last_delivery();
    assert!(
        sent.contains("EVALSHA") && sent.contains(name),
        "delivered something else: {sent:?}"
    );
    assert!(!reply.is_empty(), "no reply to the delivered original");
    reply
}

/// A lock of each kind whose force release the scenes resend.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Reentrant,
    Fair,
    Write,
}

fn lock_of(client: &Client, kind: Kind, name: &str) -> Lock {
    match kind {
        Kind::Reentrant => client.lock(name),
        Kind::Fair => client.fair_lock(name),
        Kind::Write => client.read_write_lock(name).write_lock(),
    }
}

/// A force unlock resent: the resend frees the lock; client B locks; the
/// held original lands and must not delete B's hold.
fn force_unlock_resent(kind: Kind) {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let name = unique_name(&format!("resent-force-{kind:?}"));
    let forcer = client_for(&proxy.url(), RESPONSE_TIMEOUT);
    // Its script loaded, its connections open.
    let warm = format!("{name}-warm");
    drop(
        lock_of(&forcer, kind, &warm)
            .lock_with_lease(LEASE)
            .unwrap(),
    );
    lock_of(&forcer, kind, &warm).force_unlock().unwrap();

    let a = direct(&server);
    let a_guard = lock_of(&a, kind, &name).lock_with_lease(LEASE).unwrap();

    proxy.hold_next_and_cut(name.as_bytes());
    let forced = lock_of(&forcer, kind, &name).force_unlock();
    assert_held_call(&proxy, &name);
    assert!(
        forced.unwrap(),
        "{kind:?}: the resent force unlock frees the lock"
    );
    drop(a_guard);

    let b = direct(&server);
    let b_lock = lock_of(&b, kind, &name);
    let b_guard = b_lock.lock_with_lease(LEASE).unwrap();

    let reply = deliver(&proxy, &name);
    let mut conn = server.connection();
    let fields = common::hgetall(&mut conn, &name);
    assert!(
        !fields.is_empty(),
        "{kind:?}: the late original (reply {reply:?}) deleted B's hold"
    );
    assert_eq!(b_lock.hold_count().unwrap(), 1, "{kind:?}: B's hold");
    let c = direct(&server);
    assert!(
        lock_of(&c, kind, &name).try_lock().unwrap().is_none(),
        "{kind:?}: a third client entered while B holds the lock (reply {reply:?})"
    );
    assert!(!b_guard.is_lost(), "{kind:?}");
    b_guard.unlock().unwrap();
}

#[test]
fn a_resent_force_unlock_does_not_free_the_next_hold() {
    force_unlock_resent(Kind::Reentrant);
}

#[test]
fn a_resent_fair_force_unlock_does_not_free_the_next_hold() {
    force_unlock_resent(Kind::Fair);
}

#[test]
fn a_resent_write_force_unlock_does_not_free_the_next_hold() {
    force_unlock_resent(Kind::Write);
}

/// `drain_permits` resent: whatever it returns, the count afterwards is
/// what the successful calls say, also after the held original lands.
#[test]
fn a_resent_drain_acts_once() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let name = unique_name("resent-drain");
    let drainer = client_for(&proxy.url(), RESPONSE_TIMEOUT);
    let warm = drainer.semaphore(format!("{name}-warm"));
    warm.try_set_permits(1).unwrap();
    warm.drain_permits().unwrap();

    let other = direct(&server);
    let sem = other.semaphore(name.as_str());
    assert!(sem.try_set_permits(5).unwrap());

    proxy.hold_next_and_cut(name.as_bytes());
    let drained = drainer.semaphore(name.as_str()).drain_permits();
    assert_held_call(&proxy, &name);
    sem.release(2).unwrap();
    let reply = deliver(&proxy, &name);
    let expected = match &drained {
        Ok(n) => 5 - n + 2,
        Err(_) => 5 + 2, // it did not drain, and will not
    };
    assert_eq!(
        sem.available_permits().unwrap(),
        expected,
        "drain returned {drained:?}; the late original answered {reply:?}"
    );
}

/// `try_set_permits` resent: it set the permits, someone deleted the
/// semaphore; the held original must not set them again.
#[test]
fn a_resent_try_set_permits_acts_once() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let name = unique_name("resent-set-permits");
    let setter = client_for(&proxy.url(), RESPONSE_TIMEOUT);
    let warm = setter.semaphore(format!("{name}-warm"));
    warm.try_set_permits(1).unwrap();

    proxy.hold_next_and_cut(name.as_bytes());
    let set = setter.semaphore(name.as_str()).try_set_permits(5);
    assert_held_call(&proxy, &name);
    let other = direct(&server);
    let sem = other.semaphore(name.as_str());
    let deleted = sem.delete().unwrap();
    let reply = deliver(&proxy, &name);
    let expected = match (&set, deleted) {
        (Ok(true), true) | (Err(_), _) => 0,
        (Ok(true), false) => 5,
        (Ok(false), _) => panic!("nothing else set it"),
    };
    assert_eq!(
        sem.available_permits().unwrap(),
        expected,
        "try_set_permits returned {set:?}, delete {deleted}; the late original answered {reply:?}"
    );
}

/// `try_set_count` resent: as `try_set_permits`, on a latch.
#[test]
fn a_resent_try_set_count_acts_once() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let name = unique_name("resent-set-count");
    let setter = client_for(&proxy.url(), RESPONSE_TIMEOUT);
    let warm = setter.count_down_latch(format!("{name}-warm"));
    warm.try_set_count(1).unwrap();

    proxy.hold_next_and_cut(name.as_bytes());
    let set = setter.count_down_latch(name.as_str()).try_set_count(3);
    assert_held_call(&proxy, &name);
    let other = direct(&server);
    let latch = other.count_down_latch(name.as_str());
    let deleted = latch.delete().unwrap();
    let reply = deliver(&proxy, &name);
    let expected = match (&set, deleted) {
        (Ok(true), true) | (Err(_), _) => 0,
        (Ok(true), false) => 3,
        (Ok(false), _) => panic!("nothing else set it"),
    };
    assert_eq!(
        latch.count().unwrap(),
        expected,
        "try_set_count returned {set:?}, delete {deleted}; the late original answered {reply:?}"
    );
}

mod memory {
    //! The same guarantees through `redisync::internal` on a `MemoryBackend`.

    use redisync::MemoryBackend;
    use redisync::internal::{counter, lock, once, semaphore};
    use redisync::{LockBackend, PubSubConnection, Reply, ScriptCall};

    fn op(name: &str, id: &str) -> String {
        crate::common::keys::op_record(name, id)
    }

    #[test]
    fn the_same_force_release_twice_frees_once() {
        let store = MemoryBackend::new();
        let (name, channel) = ("m:force", "redisson_lock__channel:{m:force}");
        let record = op(name, "f1");
        lock::acquire(&store, name, "a:1", 30_000).unwrap();
        assert!(lock::force_release_recorded(&store, name, channel, &record).unwrap());
        lock::acquire(&store, name, "b:1", 30_000).unwrap();
        // The same call again: its first outcome, and B keeps its hold.
        assert!(lock::force_release_recorded(&store, name, channel, &record).unwrap());
        assert_eq!(lock::state(&store, name, "b:1").unwrap().hold_count, 1);
        // Settled after it acted: the outcome it had.
        assert_eq!(once::settle(&store, &record).unwrap(), Some(Reply::Int(1)));
    }

    #[test]
    fn a_settled_force_release_is_refused() {
        let store = MemoryBackend::new();
        let (name, channel) = ("m:settled", "redisson_lock__channel:{m:settled}");
        let record = op(name, "f1");
        lock::acquire(&store, name, "a:1", 30_000).unwrap();
        assert_eq!(once::settle(&store, &record).unwrap(), None);
        assert_eq!(once::settle(&store, &record).unwrap(), None); // idempotent
        let err = lock::force_release_recorded(&store, name, channel, &record).unwrap_err();
        assert!(err.is_connection_error(), "{err}");
        assert!(err.to_string().contains("late request"), "{err}");
        assert!(lock::state(&store, name, "a:1").unwrap().locked);
    }

    #[test]
    fn the_same_drain_twice_drains_once() {
        let store = MemoryBackend::new();
        let (name, channel) = ("m:drain", "redisson_sc:{m:drain}");
        let record = op(name, "d1");
        semaphore::add(&store, name, channel, 5).unwrap();
        assert_eq!(semaphore::drain_recorded(&store, name, &record).unwrap(), 5);
        semaphore::add(&store, name, channel, 2).unwrap();
        assert_eq!(semaphore::drain_recorded(&store, name, &record).unwrap(), 5);
        assert_eq!(counter::get(&store, name).unwrap(), 2);
        // Settled first: the drain never acts.
        let settled = op(name, "d2");
        assert_eq!(once::settle(&store, &settled).unwrap(), None);
        assert!(semaphore::drain_recorded(&store, name, &settled).is_err());
        assert_eq!(counter::get(&store, name).unwrap(), 2);
        // An absent semaphore drains nil (0), and a repeat says the same.
        let (empty, record) = ("m:drain-empty", op("m:drain-empty", "d1"));
        assert_eq!(
            semaphore::drain_recorded(&store, empty, &record).unwrap(),
            0
        );
        semaphore::add(&store, empty, "redisson_sc:{m:drain-empty}", 3).unwrap();
        assert_eq!(
            semaphore::drain_recorded(&store, empty, &record).unwrap(),
            0
        );
        assert_eq!(counter::get(&store, empty).unwrap(), 3);
    }

    #[test]
    fn the_same_set_and_delete_twice_act_once() {
        let store = MemoryBackend::new();
        let (name, channel) = ("m:set", "redisson_sc:{m:set}");
        let (set, delete) = (op(name, "s1"), op(name, "x1"));
        assert!(counter::set_if_absent_recorded(&store, name, channel, 5, "5", &set).unwrap());
        assert!(semaphore::delete_keys_recorded(&store, name, None, &delete).unwrap());
        assert!(counter::set_if_absent_recorded(&store, name, channel, 5, "5", &set).unwrap());
        assert_eq!(counter::get(&store, name).unwrap(), 0);
        semaphore::add(&store, name, channel, 4).unwrap();
        // The delete again: its first outcome, the new permits stay.
        assert!(semaphore::delete_keys_recorded(&store, name, None, &delete).unwrap());
        assert_eq!(counter::get(&store, name).unwrap(), 4);
        // Settled first: never sets.
        let (other, settled) = ("m:set-settled", op("m:set-settled", "s1"));
        assert_eq!(once::settle(&store, &settled).unwrap(), None);
        let err = counter::set_if_absent_recorded(
            &store,
            other,
            "redisson_sc:{m:set-settled}",
            5,
            "5",
            &settled,
        )
        .unwrap_err();
        assert!(err.is_connection_error(), "{err}");
        assert_eq!(counter::get(&store, other).unwrap(), 0);
    }

    /// A store whose first run of `script` fails as a dropped connection
    /// does: after running it (`ran`: the reply was lost) or before (the
    /// request never arrived). Everything else runs on `inner`.
    struct Flaky {
        inner: MemoryBackend,
        script: &'static str,
        ran: bool,
        failed: std::sync::atomic::AtomicBool,
    }

    impl LockBackend for Flaky {
        fn run_script(&self, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
            use std::sync::atomic::Ordering;
            if call.script().id() == self.script && !self.failed.swap(true, Ordering::SeqCst) {
                if self.ran {
                    self.inner.run_script(call)?;
                }
                return Err(redisync::Error::backend("connection reset", true));
            }
            self.inner.run_script(call)
        }
        fn publish(&self, channel: &str, payload: &str) -> redisync::Result<()> {
            self.inner.publish(channel, payload)
        }
        fn with_pubsub(
            &self,
            session: &mut dyn FnMut(&mut dyn PubSubConnection) -> redisync::Result<()>,
        ) -> redisync::Result<()> {
            self.inner.with_pubsub(session)
        }
    }

    fn flaky(script: &'static str, ran: bool) -> Flaky {
        Flaky {
            inner: MemoryBackend::new(),
            script,
            ran,
            failed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    #[test]
    fn a_failed_call_that_acted_returns_its_outcome() {
        let store = flaky("semaphore_drain", true);
        let (name, channel) = ("m:lost-reply", "redisson_sc:{m:lost-reply}");
        semaphore::add(&store, name, channel, 5).unwrap();
        // The drain ran, its reply was lost: the settle finds its outcome.
        let record = op(name, "d1");
        assert_eq!(semaphore::drain_recorded(&store, name, &record).unwrap(), 5);
        assert_eq!(counter::get(&store, name).unwrap(), 0);
    }

    #[test]
    fn a_failed_call_that_did_not_act_never_will() {
        let store = flaky("lock_force_release", false);
        let (name, channel) = ("m:never", "redisson_lock__channel:{m:never}");
        lock::acquire(&store, name, "a:1", 30_000).unwrap();
        let record = op(name, "f1");
        let err = lock::force_release_recorded(&store, name, channel, &record).unwrap_err();
        assert!(err.is_connection_error(), "{err}");
        assert!(err.to_string().contains("did not act"), "{err}");
        // Its copy arriving later (same record): refused, the hold stays.
        let late = lock::force_release_recorded(&store, name, channel, &record).unwrap_err();
        assert!(late.to_string().contains("late request"), "{late}");
        assert!(lock::state(&store, name, "a:1").unwrap().locked);
    }

    #[test]
    fn unrecorded_calls_leave_no_record() {
        let store = MemoryBackend::new();
        let (name, channel) = ("m:plain", "redisson_lock__channel:{m:plain}");
        lock::acquire(&store, name, "a:1", 30_000).unwrap();
        assert!(lock::force_release(&store, name, channel).unwrap());
        assert!(store.is_empty());
    }
}
