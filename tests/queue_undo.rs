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
