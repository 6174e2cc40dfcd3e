//! A reentrant-lock waiter whose acquire ended with a connection error
//! leaves the lock's waiter queue (`{name}:redisync_waiters`, see
//! `ops::handoff`) with the undo of its attempt, which the cleanup worker
//! runs until the server answers. Its entry used to stay: at the queue's
//! head, while its client still listened on its channel (another of its
//! threads waiting), a release handed the lock to that gone waiter, and the
//! next real waiter sat out the claim window.
//!
//! A real `redis-server`; the waiter's store is a wrapper that runs the
//! waiter's acquire attempt and then loses its reply (a connection error),
//! so the attempt provably queued the waiter and the acquire failed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::wrap::{Hook, Store, Wrapped};
use common::{TestServer, hgetall, unique_name, wait_until};
use redisync::{Client, NopEventHandler};
use redisync::{LockBackend, Reply, ScriptCall};

/// How long the cleanup worker gets to undo the attempt and leave the
/// queue (it runs the task at once; this only bounds a stuck test).
const CLEANUP: Duration = Duration::from_secs(10);
/// The claim window of the clients here: two response timeouts (the
/// default 3 s), at most half the watchdog timeout (30 s).
const CLAIM_WINDOW: Duration = Duration::from_secs(6);
/// How long a waiter may take to get the lock once it is released: well
/// under the claim window a gone waiter's handoff would make it sit out.
const HANDED_WITHIN: Duration = Duration::from_secs(3);

/// A store that, once armed, runs the next acquire attempt
/// (`lock_acquire`) in the real store, notes the waiter queue as the
/// attempt left it, and answers a connection error instead of the reply.
struct LostAcquireReply {
    conn: Mutex<redis::Connection>,
    armed: AtomicBool,
    /// The waiter queue right after the lost attempt ran.
    queue_after: Mutex<Option<Vec<String>>>,
}

impl LostAcquireReply {
    fn new(inner: Arc<dyn LockBackend>, server: &TestServer) -> Arc<Wrapped<LostAcquireReply>> {
        Arc::new(Wrapped::around(
            inner,
            LostAcquireReply {
                conn: Mutex::new(server.connection()),
                armed: AtomicBool::new(false),
                queue_after: Mutex::new(None),
            },
        ))
    }
}

impl Hook for LostAcquireReply {
    fn run_script(&self, inner: &Store, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        let lose = call.script().id() == "lock_acquire" && self.armed.swap(false, Ordering::SeqCst);
        let reply = inner.run_script(call)?;
        if !lose {
            return Ok(reply);
        }
        // KEYS[3]: the waiter queue (lua/lock_acquire.lua).
        let queue = call.keys().get(2).expect("a queued attempt").to_string();
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(&queue)
            .arg(0)
            .arg(-1)
            .query(&mut *self.conn.lock().unwrap())
            .unwrap();
        *self.queue_after.lock().unwrap() = Some(members);
        Err(redisync::Error::backend(
            "connection reset before the reply (test)",
            true,
        ))
    }
}

fn client(server: &TestServer) -> Client {
    Client::builder()
        .redis_url(server.url())
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .unwrap()
}

fn queue_members(conn: &mut redis::Connection, queue: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(queue)
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap()
}

/// The holder id of a queue entry: the entry itself, or the last part of
/// `d|<wait id>|<holder id>` (or `d|<wait id>+<lease ms>|<holder id>`).
fn holder_of(entry: &str) -> &str {
    match entry.strip_prefix("d|") {
        Some(rest) => rest.split_once('|').map_or(rest, |(_, holder)| holder),
        None => entry,
    }
}

/// One client holds the lock (on a helper thread, until told); a thread of
/// client W waits for it, and its first attempt runs (it joins the queue)
/// but its reply is lost: the acquire fails with a connection error. Then
/// the entry must leave the queue once the cleanup ran, and, with another
/// thread of W waiting (so W listens on its channel), the release must
/// hand the lock to that real waiter at once, not to the gone one.
/// `outright`: the gone waiter waited without a lease (its entry is
/// `d|<wait id>|<holder id>`), else with one (its entry is
/// `d|<wait id>+<lease ms>|<holder id>`: handed outright too, with its lease).
fn the_gone_waiter_leaves_the_queue(outright: bool) {
    let server = TestServer::start();
    let name = unique_name(if outright {
        "queue-undo:outright"
    } else {
        "queue-undo:plain"
    });
    let queue_key = redisync::internal::handoff::Queue::new(&name, 1, 1)
        .key()
        .to_owned();
    let mut conn = server.connection();

    // The holder, on its own thread (a guard stays on its thread).
    let (release, release_rx) = mpsc::channel::<()>();
    let (held_tx, held) = mpsc::channel::<()>();
    let (released_tx, released) = mpsc::channel::<Instant>();
    let holder_client = client(&server);
    let holder_lock = holder_client.lock(name.as_str());
    let holder = thread::spawn(move || {
        let guard = holder_lock.lock().unwrap();
        held_tx.send(()).unwrap();
        release_rx.recv_timeout(Duration::from_secs(60)).unwrap();
        let at = Instant::now();
        guard.unlock().unwrap();
        released_tx.send(at).unwrap();
    });
    held.recv_timeout(Duration::from_secs(10)).unwrap();

    // Client W: its store loses the reply of the next acquire attempt.
    let inner = client(&server);
    let lossy = LostAcquireReply::new(Arc::clone(inner.backend()), &server);
    let w = Client::builder()
        .backend(Arc::clone(&lossy))
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .unwrap();
    let w_lock = w.lock(name.as_str());
    lossy.armed.store(true, Ordering::SeqCst);
    let err = if outright {
        w_lock.lock().map(drop).unwrap_err()
    } else {
        w_lock
            .lock_with_lease(Duration::from_secs(30))
            .map(drop)
            .unwrap_err()
    };
    assert!(err.is_connection_error(), "{err:?}");
    let after = lossy
        .queue_after
        .lock()
        .unwrap()
        .take()
        .expect("the lost attempt ran");
    assert_eq!(
        after.len(),
        1,
        "the lost attempt queued its waiter: {after:?}"
    );
    let gone = after[0].clone();
    assert!(gone.starts_with("d|"), "{gone}");
    assert_eq!(gone.contains("+30000|"), !outright, "{gone}");
    let gone_holder = holder_of(&gone).to_owned();

    // The undo, with the leave, runs on W's cleanup worker.
    wait_until(
        &format!("the gone waiter's entry {gone:?} left the queue {queue_key}"),
        CLEANUP,
        || !queue_members(&mut conn, &queue_key).contains(&gone),
    );
    let holders = hgetall(&mut conn, &name);
    assert!(
        !holders.contains_key(&gone_holder),
        "the undo left the gone waiter a hold: {holders:?}"
    );

    // Another thread of W waits (W listens on its channel): it is the
    // queue's only entry, and the release hands the lock to it.
    let (acquired_tx, acquired) = mpsc::channel::<Instant>();
    let next_lock = w_lock.clone();
    let next = thread::spawn(move || {
        let guard = next_lock
            .try_lock_for(Duration::from_secs(60))
            .unwrap()
            .expect("the next waiter got the lock");
        acquired_tx.send(Instant::now()).unwrap();
        // Held until the test has looked at the lock's holders.
        thread::sleep(Duration::from_millis(300));
        guard.unlock().unwrap();
    });
    wait_until("the next waiter joined the queue", CLEANUP, || {
        let members = queue_members(&mut conn, &queue_key);
        members.len() == 1 && holder_of(&members[0]) != gone_holder
    });
    release.send(()).unwrap();
    let released_at = released.recv_timeout(Duration::from_secs(10)).unwrap();
    let acquired_at = acquired
        .recv_timeout(CLAIM_WINDOW * 2)
        .expect("the next waiter never got the lock");
    let took = acquired_at.saturating_duration_since(released_at);
    assert!(
        took < HANDED_WITHIN,
        "the next waiter got the lock {took:?} after the release (a handoff to the gone \
         waiter sits out a {CLAIM_WINDOW:?} claim window)"
    );
    let holders = hgetall(&mut conn, &name);
    assert!(
        !holders.contains_key(&gone_holder),
        "the gone waiter {gone_holder} holds the lock: {holders:?}"
    );
    next.join().unwrap();
    holder.join().unwrap();
    // Nobody waits any more: the last release frees the lock.
    wait_until("the lock is free", CLEANUP, || !w_lock.is_locked().unwrap());
    assert!(queue_members(&mut conn, &queue_key).is_empty());
}

#[test]
fn a_waiter_queued_outright_whose_acquire_lost_its_reply_leaves_the_queue() {
    the_gone_waiter_leaves_the_queue(true);
}

#[test]
fn a_waiter_queued_with_a_lease_whose_acquire_lost_its_reply_leaves_the_queue() {
    the_gone_waiter_leaves_the_queue(false);
}

/// A store that, while `down`, fails every fair-lock cancel and every op
/// settle as a frozen server does (a connection error, nothing run), and
/// keeps the first cancel it failed, to be delivered late. It counts the
/// fair acquire attempts run since it came back up.
struct FrozenGiveUp {
    down: AtomicBool,
    held: Mutex<Option<ScriptCall<'static>>>,
    attempts_since_up: std::sync::atomic::AtomicUsize,
}

impl Hook for FrozenGiveUp {
    fn run_script(&self, inner: &Store, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        let id = call.script().id();
        if self.down.load(Ordering::SeqCst) {
            if id == "fair_lock_cancel" {
                let mut held = self.held.lock().unwrap();
                if held.is_none() {
                    *held = Some(call.clone().into_owned());
                }
            }
            if id == "fair_lock_cancel" || id == "op_settle" {
                return Err(redisync::Error::backend(
                    "timed out waiting for a reply (test: a frozen server)",
                    true,
                ));
            }
        } else if id == "fair_lock_acquire" {
            self.attempts_since_up.fetch_add(1, Ordering::SeqCst);
        }
        inner.run_script(call)
    }
}

/// A fair waiter gives up while the server does not answer: its cancel
/// (leaving the queue) and the settle of the cancel's record both fail,
/// so the cancel may still land while its window lasts. The same thread
/// waits again and its attempt finds it still queued (in its old place);
/// then the held cancel lands. It must not take that new wait's place:
/// the holder's next acquire settles the give-up first, so the late copy
/// is refused and the waiter stays queued, and gets the lock at the
/// release. Before, the copy removed the new wait from the queue (a FIFO
/// break after a frozen server, seen in the fault suite).
#[test]
fn a_fair_give_up_that_lands_late_does_not_take_the_next_waits_place() {
    let server = TestServer::start();
    let name = unique_name("queue-undo:fair-give-up");
    let timeouts = common::keys::fair_timeouts(&name);
    let mut conn = server.connection();

    let (release, release_rx) = mpsc::channel::<()>();
    let (held_tx, held) = mpsc::channel::<()>();
    let holder_client = client(&server);
    let holder_lock = holder_client.fair_lock(name.as_str());
    let holder = thread::spawn(move || {
        let guard = holder_lock.lock().unwrap();
        held_tx.send(()).unwrap();
        release_rx.recv_timeout(Duration::from_secs(60)).unwrap();
        guard.unlock().unwrap();
    });
    held.recv_timeout(Duration::from_secs(10)).unwrap();

    let inner = client(&server);
    let frozen = Arc::new(Wrapped::around(
        Arc::clone(inner.backend()),
        FrozenGiveUp {
            down: AtomicBool::new(false),
            held: Mutex::new(None),
            attempts_since_up: std::sync::atomic::AtomicUsize::new(0),
        },
    ));
    let w = Client::builder()
        .shared_backend(Arc::clone(&frozen) as Arc<dyn LockBackend>)
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .unwrap();
    let w_lock = w.fair_lock(name.as_str());

    // The waiter: one wait that gives up while the server is "frozen",
    // then at once another.
    let (first_done_tx, first_done) = mpsc::channel::<String>();
    let (got_tx, got) = mpsc::channel::<bool>();
    let waiter_frozen = Arc::clone(&frozen);
    let waiter = thread::spawn(move || {
        let first = w_lock.try_lock_for(Duration::from_millis(300));
        // Only the second wait's attempts count (the first wait's queued
        // the waiter before the freeze; none is counted while down).
        waiter_frozen.attempts_since_up.store(0, Ordering::SeqCst);
        waiter_frozen.down.store(false, Ordering::SeqCst);
        first_done_tx
            .send(format!("{:?}", first.map(|guard| guard.is_some())))
            .unwrap();
        let second = w_lock
            .try_lock_for(Duration::from_secs(60))
            .unwrap()
            .is_some();
        got_tx.send(second).unwrap();
    });
    // Frozen once the waiter has queued.
    wait_until("the waiter queued", CLEANUP, || {
        redis::cmd("ZCARD")
            .arg(&timeouts)
            .query::<i64>(&mut conn)
            .unwrap()
            == 1
    });
    frozen.down.store(true, Ordering::SeqCst);
    let first = first_done.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(
        first.starts_with("Err"),
        "the give-up did not fail: {first}"
    );
    let late = frozen
        .held
        .lock()
        .unwrap()
        .take()
        .expect("the failed cancel was kept");
    // The second wait's attempt ran (it found the waiter queued).
    wait_until("the second wait's attempt", CLEANUP, || {
        frozen.attempts_since_up.load(Ordering::SeqCst) >= 1
    });
    let queued: Vec<String> = redis::cmd("ZRANGE")
        .arg(&timeouts)
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert_eq!(queued.len(), 1, "{queued:?}");

    // The held cancel lands now, inside a window of its own.
    let delivered = inner.backend().run_script(&late);
    let still: Vec<String> = redis::cmd("ZRANGE")
        .arg(&timeouts)
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        still, queued,
        "the late give-up ({delivered:?}) took the next wait's place in the queue"
    );
    release.send(()).unwrap();
    assert!(
        got.recv_timeout(Duration::from_secs(20))
            .expect("the waiter never got the lock"),
        "the second wait did not get the lock"
    );
    waiter.join().unwrap();
    holder.join().unwrap();
}
