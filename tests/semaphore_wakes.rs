//! Semaphore wakes that must not stall a waiter for its 30 s fallback.
//!
//! - Two threads of one client pass a one-permit semaphore back and forth,
//!   20 rounds of 1,500 acquisitions each on fresh names: no `acquire(1)`
//!   may wait out the fallback. Before the fix, about one run in two did: a
//!   release whose message arrived while a woken waiter's retry was in
//!   flight was counted as passed on with that retry's wake, so the waiter
//!   parked with the permit free once the other thread stopped (see
//!   `ChannelState::pass_on`).
//! - Three parked waiters and a pub/sub reconnect (issue 21's seventh
//!   fault): every waiter that can proceed with the permits freed while the
//!   subscriber was disconnected gets them within seconds, and each parked
//!   waiter retries exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::keys;
use common::wrap::{Hook, Session, Store, Wrapped, assert_forwards_every_method};
use redisync::{Reply, ScriptCall};
#[test]
fn two_threads_pass_a_one_permit_semaphore_without_stalling() {
    let server = common::TestServer::start();
    let client = redisync::Client::builder()
        .redis_url(server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    for round in 0..20 {
        let name = common::unique_name("stall");
        let s = client.semaphore(&name);
        assert!(s.try_set_permits(1).unwrap());
        let max = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    let s = client.semaphore(&name);
                    sc.spawn(move || {
                        let mut max = Duration::ZERO;
                        for _ in 0..1500 {
                            let t = Instant::now();
                            let p = s.acquire(1).unwrap();
                            max = max.max(t.elapsed());
                            std::hint::spin_loop();
                            p.release().unwrap();
                        }
                        max
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).max().unwrap()
        });
        eprintln!("round {round}: max acquire {max:?}");
        assert!(max < Duration::from_secs(2), "stall {max:?}");
    }
}

/// How long a staged waiter's attempt takes to answer once `slow` is on
/// (a slow link for that thread: the attempt runs in Redis at once, its reply
/// comes this much later).
const SLOW_REPLY: Duration = Duration::from_secs(2);
/// The waiter whose replies are slow.
const SLOW_THREAD: &str = "waiter-b";
/// A parked waiter's fallback: what a lost wake costs.
const FALLBACK: Duration = Duration::from_secs(30);
/// How soon a waiter that can proceed must: well inside the fallback, with
/// room for the slow reply and a loaded machine.
const PROCEEDS_WITHIN: Duration = Duration::from_secs(10);

/// Three things staged around the real backend (which [`Wrapped`] forwards
/// everything else to): each thread's
/// semaphore attempts are counted (by thread name), [`SLOW_THREAD`]'s get
/// slow replies while `slow` is on, and every pub/sub connection after the
/// first waits at a gate the test opens (so it can free permits while the
/// subscriber is known to be disconnected).
#[derive(Clone, Default)]
struct Staged {
    attempts: Arc<Mutex<HashMap<String, u64>>>,
    slow: Arc<AtomicBool>,
    sessions: Arc<AtomicU64>,
    gate: Arc<(Mutex<Gate>, Condvar)>,
}

#[derive(Debug, Default)]
struct Gate {
    /// A reconnect is waiting at the gate.
    reconnecting: bool,
    open: bool,
}

impl Staged {
    fn attempts(&self, thread: &str) -> u64 {
        self.attempts
            .lock()
            .unwrap()
            .get(thread)
            .copied()
            .unwrap_or(0)
    }

    /// Waits (bounded) until a reconnect waits at the gate.
    fn await_reconnect(&self) {
        let (gate, cond) = &*self.gate;
        let (gate, timeout) = cond
            .wait_timeout_while(gate.lock().unwrap(), Duration::from_secs(10), |g| {
                !g.reconnecting
            })
            .unwrap();
        assert!(
            !timeout.timed_out() && gate.reconnecting,
            "the subscriber did not reconnect within 10 s"
        );
    }

    fn open_gate(&self) {
        let (gate, cond) = &*self.gate;
        gate.lock().unwrap().open = true;
        cond.notify_all();
    }
}

impl Hook for Staged {
    fn run_script(&self, inner: &Store, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        let reply = inner.run_script(call)?;
        if call.script().id() == "semaphore_try_acquire" {
            *self
                .attempts
                .lock()
                .unwrap()
                .entry(thread.clone())
                .or_insert(0) += 1;
            if thread == SLOW_THREAD && self.slow.load(Ordering::SeqCst) {
                std::thread::sleep(SLOW_REPLY);
            }
        }
        Ok(reply)
    }

    fn with_pubsub(&self, inner: &Store, session: Session<'_>) -> redisync::Result<()> {
        if self.sessions.fetch_add(1, Ordering::SeqCst) > 0 {
            let (gate, cond) = &*self.gate;
            let mut state = gate.lock().unwrap();
            state.reconnecting = true;
            cond.notify_all();
            // Bounded, so a failed test cannot leave the thread here.
            let _ = cond
                .wait_timeout_while(state, Duration::from_secs(20), |g| !g.open)
                .unwrap();
        }
        inner.with_pubsub(session)
    }
}

#[test]
fn the_staged_store_forwards_every_method() {
    // Its first pub/sub session passes the gate, as the subscriber's does.
    assert_forwards_every_method(Staged::default());
}

/// Counts the subscriber's reported connection failures.
#[derive(Debug, Default)]
struct Reconnects(AtomicU64);

impl redisync::EventHandler for Reconnects {
    fn on_subscriber_error(&self, _event: &redisync::SubscriberEvent) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The ids of the server's pub/sub connections (`CLIENT LIST TYPE pubsub`).
fn pubsub_ids(conn: &mut redis::Connection) -> Vec<u64> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query(conn)
        .unwrap();
    list.lines()
        .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(|id| id.parse().unwrap())
        .collect()
}

/// Issue 21's seventh fault. One client, one semaphore with no permits,
/// three parked waiters: A wants 3 permits, B and C 1 each, and B's replies
/// are slow (a slow link for that thread). The subscriber's pub/sub
/// connection is killed (`CLIENT KILL ID`, confirmed by `CLIENT LIST` and the
/// reconnect event); while it is down, another client frees 2 permits (its
/// message reaches nobody). When the resubscription takes effect, B and C can
/// proceed and must, well before the 30 s fallback; and each waiter parked at
/// the reconnect retries exactly once (no herd, no polling).
///
/// Before the fix a confirmation stored one permit per waiter, a count:
/// A, failing with 2 free, took B's retry too while B's slow reply was on
/// its way, and B then parked for its 30 s fallback with a permit free.
#[test]
fn every_waiter_that_can_proceed_after_a_reconnect_does() {
    let server = common::TestServer::start();
    let mut raw = server.connection();
    let releaser = redisync::Client::open(&server.url()).unwrap();
    let staged = Wrapped::around(Arc::clone(releaser.backend()), Staged::default());
    let reconnects = Arc::new(Reconnects::default());
    let client = redisync::Client::builder()
        .shared_backend(Arc::new(staged.clone()))
        .watchdog_timeout(FALLBACK)
        .event_handler(reconnects.clone())
        .build()
        .unwrap();
    let name = common::unique_name("sem:reconnect-wakes");
    let channel = keys::semaphore_channel(&name);
    assert!(releaser.semaphore(&name).try_set_permits(0).unwrap());

    let (tx, rx) = mpsc::channel();
    let waiters: Vec<_> = [("waiter-a", 3), (SLOW_THREAD, 1), ("waiter-c", 1)]
        .into_iter()
        .map(|(who, permits)| {
            let semaphore = client.semaphore(&name);
            let tx = tx.clone();
            std::thread::Builder::new()
                .name(who.to_owned())
                .spawn(move || {
                    let permit = semaphore.acquire(permits).expect("acquire");
                    // The receiver is gone only when the test already failed.
                    let _ = tx.send((who, Instant::now()));
                    permit.forget();
                })
                .unwrap()
        })
        .collect();
    drop(tx);
    common::wait_until(
        "all three waiters attempted",
        Duration::from_secs(10),
        || {
            ["waiter-a", SLOW_THREAD, "waiter-c"]
                .iter()
                .all(|who| staged.attempts(who) >= 1)
        },
    );
    common::wait_until("the channel is subscribed", Duration::from_secs(10), || {
        common::numsub(&mut raw, &channel) == 1
    });
    // The subscription's confirmation retries run at once; let them end.
    std::thread::sleep(Duration::from_millis(500));
    assert!(rx.try_recv().is_err(), "a waiter got a permit from none");

    staged.slow.store(true, Ordering::SeqCst);
    let before: HashMap<&str, u64> = ["waiter-a", SLOW_THREAD, "waiter-c"]
        .into_iter()
        .map(|who| (who, staged.attempts(who)))
        .collect();
    let ids = pubsub_ids(&mut raw);
    assert_eq!(
        ids.len(),
        1,
        "one pub/sub connection (the waiters' client): {ids:?}"
    );
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(ids[0])
        .query(&mut raw)
        .unwrap();
    assert_eq!(killed, 1, "CLIENT KILL ID {}", ids[0]);
    staged.await_reconnect();
    assert!(
        reconnects.0.load(Ordering::SeqCst) >= 1,
        "the subscriber reported no connection failure"
    );
    // Any retry the disconnect itself started has reached Redis by now.
    std::thread::sleep(Duration::from_millis(300));
    releaser.semaphore(&name).release(2).unwrap();
    assert_eq!(
        releaser.semaphore(&name).available_permits().unwrap(),
        2,
        "staging: a retry before the resubscription took the freed permits"
    );
    let opened = Instant::now();
    staged.open_gate();

    let mut got = HashMap::new();
    while got.len() < 2 {
        let (who, at) = rx.recv_timeout(PROCEEDS_WITHIN).unwrap_or_else(|_| {
            panic!(
                "after the reconnect only {got:?} got a permit within {PROCEEDS_WITHIN:?}: a waiter \
                 that can proceed with the 2 freed permits sleeps its {FALLBACK:?} fallback \
                 (attempts since the kill: a {}, b {}, c {})",
                staged.attempts("waiter-a") - before["waiter-a"],
                staged.attempts(SLOW_THREAD) - before[SLOW_THREAD],
                staged.attempts("waiter-c") - before["waiter-c"],
            )
        });
        assert_ne!(who, "waiter-a", "A got 3 permits with 2 free");
        eprintln!("{who}: permit {:?} after the resubscription", at - opened);
        got.insert(who, at - opened);
    }
    let after_ids = pubsub_ids(&mut raw);
    assert!(
        after_ids.len() == 1 && after_ids[0] != ids[0],
        "the subscriber reconnected: {ids:?} before, {after_ids:?} after"
    );
    // Nothing else wakes anyone: A's count is final until the next release.
    std::thread::sleep(Duration::from_millis(300));
    for who in ["waiter-a", SLOW_THREAD, "waiter-c"] {
        let retries = staged.attempts(who) - before[who];
        assert_eq!(
            retries, 1,
            "{who} retried {retries} times after the reconnect, not once"
        );
    }

    // A's turn comes with an ordinary release's message.
    staged.slow.store(false, Ordering::SeqCst);
    releaser.semaphore(&name).release(3).unwrap();
    let (who, _) = rx
        .recv_timeout(PROCEEDS_WITHIN)
        .expect("A after a release of 3");
    assert_eq!(who, "waiter-a");
    for waiter in waiters {
        waiter.join().unwrap();
    }
}
