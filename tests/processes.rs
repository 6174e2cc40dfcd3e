//! Locks held by real child processes on a real `redis-server`.
//!
//! The children are this very test binary, re-executed with
//! `--exact child_role_entrypoint` and a role in the environment
//! ([`ROLE_ENV`]); see [`child_role_entrypoint`] and tests/common/child.rs
//! (the child processes' plumbing, shared with tests/fault_suite.rs).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::child::{
    CHILD_MAX_LIFETIME, ChildProcess, LOCK_ENV, READY, READY_TIMEOUT, ROLE_ENV, URL_ENV,
    WATCHDOG_MS_ENV, WRITE, WRITE_RESULT, announce, child_builder, child_client_with_watchdog,
    child_fenced_holder, env, env_ms, get, ms, parent_lines, raw_connection,
    ready_until_parent_done, spawn_fenced_holder, spawn_ready, store_data_key, store_highest_key,
    store_write, take_once_freed, until_parent_done,
};
use common::keys;
use common::{TestServer, hgetall, pttl, unique_name};
use redisync::{Client, MultiLock};

/// The incrementer child's counter key.
const COUNTER_ENV: &str = "REDISYNC_COUNTER";
/// The incrementer child's "someone is inside the critical section" key.
const INSIDE_ENV: &str = "REDISYNC_INSIDE";
/// How many increments an incrementer child makes.
const ITERATIONS_ENV: &str = "REDISYNC_ITERATIONS";
/// The fair-waiter child's fair-lock wait timeout, in milliseconds.
const FAIR_WAIT_MS_ENV: &str = "REDISYNC_FAIR_WAIT_MS";
/// The permit-holder child's lease, in milliseconds.
const LEASE_MS_ENV: &str = "REDISYNC_LEASE_MS";
/// How many threads a multi-threaded child runs.
const THREADS_ENV: &str = "REDISYNC_THREADS";
/// The key where children count what went wrong (a fencing or exclusion
/// violation), for the parent to check.
const VIOLATIONS_ENV: &str = "REDISYNC_VIOLATIONS";
/// The multi-incrementer child's Redis URLs, comma-separated (one server
/// per part of its multi-lock).
const URLS_ENV: &str = "REDISYNC_URLS";
/// `1` when the multi-incrementer child lists its parts in reverse order.
const REVERSE_ENV: &str = "REDISYNC_REVERSE";

/// Printed by an incrementer child after its last increment.
const DONE: &str = "REDISYNC-CHILD-DONE";
/// Printed by a fair-waiter child if it ever gets the lock.
const ACQUIRED: &str = "REDISYNC-CHILD-ACQUIRED";
/// Sent by the parent on a child's stdin to start the incrementers together.
const GO: &str = "go";

// ---------------------------------------------------------------------------
// Child side
// ---------------------------------------------------------------------------

/// NOT A TEST OF ITS OWN: the entry point of the child processes spawned by
/// the other tests in this file (they re-execute this binary with
/// `--exact child_role_entrypoint` and `REDISYNC_CHILD_ROLE` set). In a
/// normal test run the variable is absent and this returns at once, doing
/// nothing.
#[test]
fn child_role_entrypoint() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    match role.as_str() {
        "holder" => child_holder(),
        "incrementer" => child_incrementer(),
        "fair_waiter" => child_fair_waiter(),
        "reader" => child_reader(),
        "permit_holder" => child_permit_holder(),
        "fenced_incrementer" => child_fenced_incrementer(),
        "fenced_holder" => child_fenced_holder(),
        "multi_incrementer" => child_multi_incrementer(),
        other => panic!("unknown {ROLE_ENV}={other:?}"),
    }
}

/// Says it is ready, then waits for the parent's "go".
fn ready_then_await_go() {
    let from_parent = parent_lines();
    announce(READY);
    await_go(&from_parent);
}

/// Takes the lock with the watchdog (short timeout), says so with its holder
/// id, then holds it until the parent kills it (or closes stdin).
fn child_holder() {
    let client = child_client_with_watchdog();
    let lock = client.lock(env(LOCK_ENV));
    let guard = lock.lock().expect("child: lock");
    // Hold (the watchdog renews) until killed; a closed stdin or the lifetime
    // cap ends the child cleanly instead.
    ready_until_parent_done(&client.current_holder_id());
    drop(guard);
}

/// Connects and says the holder id of its waiting thread; on "go" that
/// thread queues for the fair lock (`lock()`, with the given fair-lock wait
/// timeout, and the given watchdog timeout if any) and waits there until the parent kills the child. Should it ever
/// get the lock, it says so and holds it.
fn child_fair_waiter() {
    let mut builder = child_builder().fair_lock_wait_timeout(env_ms(FAIR_WAIT_MS_ENV));
    if std::env::var_os(WATCHDOG_MS_ENV).is_some() {
        builder = builder.watchdog_timeout(env_ms(WATCHDOG_MS_ENV));
    }
    let client = builder.build().expect("child: connect");
    let lock = client.fair_lock(env(LOCK_ENV));
    let from_parent = parent_lines();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    // The holder id is per thread: the waiting thread announces its own.
    let waiting = thread::spawn(move || {
        announce(&format!("{READY} {}", lock.client().current_holder_id()));
        if go_rx.recv().is_err() {
            return;
        }
        let guard = lock.lock().expect("child: fair lock");
        announce(ACQUIRED);
        // Hold until the process ends.
        thread::sleep(CHILD_MAX_LIFETIME);
        drop(guard);
    });
    await_go(&from_parent);
    go_tx.send(()).expect("child: go");
    until_parent_done(&from_parent);
    // The waiting thread, blocked in lock(), ends with the process.
    drop(waiting);
}

/// Takes the read half of a read-write lock with the watchdog (short
/// timeout), says so with its holder id, and holds it until killed.
fn child_reader() {
    let client = child_client_with_watchdog();
    let guard = client
        .read_write_lock(env(LOCK_ENV))
        .read_lock()
        .lock()
        .expect("child: read lock");
    ready_until_parent_done(&client.current_holder_id());
    drop(guard);
}

/// Takes a permit of a permit-expirable semaphore with the given lease, says
/// so with the permit id, and keeps it (never releasing) until killed.
fn child_permit_holder() {
    let client = child_builder().build().expect("child: connect");
    let semaphore = client.permit_expirable_semaphore(env(LOCK_ENV));
    let id = semaphore
        .acquire_id(env_ms(LEASE_MS_ENV))
        .expect("child: acquire");
    ready_until_parent_done(&id.to_string());
}

/// Waits for "go", then increments a plain Redis string non-atomically (GET,
/// pause, SET) inside the lock, `ITERATIONS` times.
fn child_incrementer() {
    let url = env(URL_ENV);
    let counter = env(COUNTER_ENV);
    let inside = env(INSIDE_ENV);
    let iterations: u64 = env(ITERATIONS_ENV).parse().expect("iterations");
    let client = child_builder().build().expect("child: connect");
    let lock = client.lock(env(LOCK_ENV));
    let mut raw = raw_connection(&url);
    let me = format!("pid {}", std::process::id());

    ready_then_await_go();

    for i in 0..iterations {
        let guard = lock.lock().expect("child: lock");
        // Nobody else may be inside: SET NX of the marker must succeed.
        let entered: Option<String> = redis::cmd("SET")
            .arg(&inside)
            .arg(&me)
            .arg("NX")
            .query(&mut raw)
            .expect("child: SET NX");
        if entered.is_none() {
            let other: Option<String> = redis::cmd("GET").arg(&inside).query(&mut raw).ok();
            panic!("child {me}: iteration {i}: {other:?} is inside the critical section too");
        }
        let value: Option<u64> = redis::cmd("GET")
            .arg(&counter)
            .query(&mut raw)
            .expect("child: GET");
        // Widen the window a lost update would need.
        thread::sleep(Duration::from_millis(1));
        redis::cmd("SET")
            .arg(&counter)
            .arg(value.unwrap_or(0) + 1)
            .query::<()>(&mut raw)
            .expect("child: SET");
        redis::cmd("DEL")
            .arg(&inside)
            .query::<()>(&mut raw)
            .expect("child: DEL");
        assert!(!guard.is_lost(), "child {me}: lock lost in iteration {i}");
        guard.unlock().expect("child: unlock");
    }
    announce(DONE);
}

/// Counts one violation on `key` (the parent asserts there are none) and
/// says what it was on stderr, which the parent's failure message shows.
fn report_violation(raw: &mut redis::Connection, key: &str, what: &str) {
    eprintln!("VIOLATION: {what}");
    redis::cmd("INCR")
        .arg(key)
        .query::<()>(raw)
        .expect("child: INCR violations");
}

/// Waits for the parent's "go".
fn await_go(from_parent: &Receiver<String>) {
    match from_parent.recv_timeout(READY_TIMEOUT) {
        Ok(line) if line.trim() == GO => {}
        other => panic!("child: expected {GO:?} from the parent, got {other:?}"),
    }
}

/// Waits for "go", then runs `THREADS` threads, each taking the fenced lock
/// `ITERATIONS` times and, inside it, doing a non-atomic check-and-set of the
/// last token seen at `COUNTER` (GET, compare, pause, SET): a token not
/// above the last one (or above the thread's own previous one) is counted
/// at `VIOLATIONS`.
fn child_fenced_incrementer() {
    let url = env(URL_ENV);
    let last_key = env(COUNTER_ENV);
    let violations = env(VIOLATIONS_ENV);
    let iterations: u64 = env(ITERATIONS_ENV).parse().expect("iterations");
    let threads: usize = env(THREADS_ENV).parse().expect("threads");
    let client = child_builder().build().expect("child: connect");
    let lock = client.fenced_lock(env(LOCK_ENV));
    let connections: Vec<redis::Connection> = (0..threads).map(|_| raw_connection(&url)).collect();
    let pid = std::process::id();

    ready_then_await_go();
    run_threads_then_done(connections, move |thread_no, mut raw| {
        let mut previous = 0;
        for i in 0..iterations {
            let guard = lock.lock().expect("child: fenced lock");
            let token = guard
                .token()
                .expect("child: a fenced guard without a token");
            let last: Option<u64> = redis::cmd("GET")
                .arg(&last_key)
                .query(&mut raw)
                .expect("child: GET last token");
            if token <= previous || last.is_some_and(|last| token <= last) {
                report_violation(
                    &mut raw,
                    &violations,
                    &format!(
                        "pid {pid} thread {thread_no} iteration {i}: token {token}, \
                         last token seen {last:?}, own previous {previous}"
                    ),
                );
            }
            // Widen the window an overlapping holder would need.
            thread::sleep(Duration::from_millis(1));
            redis::cmd("SET")
                .arg(&last_key)
                .arg(token)
                .query::<()>(&mut raw)
                .expect("child: SET last token");
            if guard.is_lost() {
                report_violation(
                    &mut raw,
                    &violations,
                    &format!("pid {pid} thread {thread_no}: lock lost in iteration {i}"),
                );
            }
            previous = token;
            guard.unlock().expect("child: unlock");
        }
    });
}

/// Runs `work(thread_no, state)` on one thread per element of `per_thread`
/// (its own state, such as its connections), all started together, then
/// says DONE once every thread has finished.
fn run_threads_then_done<S: Send + 'static>(
    per_thread: Vec<S>,
    work: impl Fn(usize, S) + Send + Sync + 'static,
) {
    let start = Arc::new(Barrier::new(per_thread.len()));
    let work = Arc::new(work);
    let workers: Vec<_> = per_thread
        .into_iter()
        .enumerate()
        .map(|(thread_no, state)| {
            let (start, work) = (Arc::clone(&start), Arc::clone(&work));
            thread::spawn(move || {
                start.wait();
                work(thread_no, state);
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("child: worker panicked");
    }
    announce(DONE);
}

/// Waits for "go", then runs `THREADS` threads, each taking a `MultiLock`
/// over the lock `LOCK` on every server of `URLS` (in reverse order when
/// `REVERSE` is 1) `ITERATIONS` times and, inside it, incrementing the plain
/// string `COUNTER` on every server non-atomically (GET all, pause, SET
/// all). A marker at `INSIDE` (SET NX) on each server catches two holders
/// inside at once; violations are counted at `VIOLATIONS` on that server.
fn child_multi_incrementer() {
    let urls: Vec<String> = env(URLS_ENV).split(',').map(str::to_owned).collect();
    let name = env(LOCK_ENV);
    let counter = env(COUNTER_ENV);
    let inside = env(INSIDE_ENV);
    let violations = env(VIOLATIONS_ENV);
    let iterations: u64 = env(ITERATIONS_ENV).parse().expect("iterations");
    let threads: usize = env(THREADS_ENV).parse().expect("threads");
    let reverse = env(REVERSE_ENV) == "1";
    // One client per server: one "process" per Redis, as in production.
    let clients: Vec<Client> = urls
        .iter()
        .map(|url| {
            Client::builder()
                .redis_url(url.as_str())
                .build()
                .expect("child: connect")
        })
        .collect();
    let mut parts: Vec<redisync::Lock> = clients.iter().map(|c| c.lock(name.as_str())).collect();
    if reverse {
        parts.reverse();
    }
    let multi = MultiLock::new(parts).expect("child: MultiLock::new");
    // Per thread, one raw connection per server, in server order.
    let connections: Vec<Vec<redis::Connection>> = (0..threads)
        .map(|_| urls.iter().map(|url| raw_connection(url)).collect())
        .collect();
    let pid = std::process::id();

    ready_then_await_go();
    run_threads_then_done(connections, move |thread_no, mut raws| {
        let me = format!("pid {pid} thread {thread_no}");
        for i in 0..iterations {
            let guard = multi.lock().expect("child: multi lock");
            for (server, raw) in raws.iter_mut().enumerate() {
                let entered: Option<String> = redis::cmd("SET")
                    .arg(&inside)
                    .arg(&me)
                    .arg("NX")
                    .query(raw)
                    .expect("child: SET NX");
                if entered.is_none() {
                    let other: Option<String> =
                        redis::cmd("GET").arg(&inside).query(raw).ok().flatten();
                    report_violation(
                        raw,
                        &violations,
                        &format!("{me} iteration {i}: {other:?} is inside on server {server} too"),
                    );
                }
            }
            let values: Vec<Option<u64>> = raws
                .iter_mut()
                .map(|raw| {
                    redis::cmd("GET")
                        .arg(&counter)
                        .query(raw)
                        .expect("child: GET")
                })
                .collect();
            // Widen the window a lost update would need.
            thread::sleep(Duration::from_millis(1));
            for (raw, value) in raws.iter_mut().zip(values) {
                redis::cmd("SET")
                    .arg(&counter)
                    .arg(value.unwrap_or(0) + 1)
                    .query::<()>(raw)
                    .expect("child: SET");
                redis::cmd("DEL")
                    .arg(&inside)
                    .query::<()>(raw)
                    .expect("child: DEL");
            }
            if guard.is_lost() {
                report_violation(
                    &mut raws[0],
                    &violations,
                    &format!("{me}: multi lock lost in iteration {i}"),
                );
            }
            guard.unlock().expect("child: multi unlock");
        }
    });
}

// ---------------------------------------------------------------------------
// Parent side
// ---------------------------------------------------------------------------

/// A plain client on `server`, for the parent.
fn parent_client(server: &TestServer) -> Client {
    Client::builder()
        .redis_url(server.url())
        .build()
        .expect("parent client")
}

#[test]
fn holder_killed_with_sigkill_frees_the_lock_within_the_watchdog_timeout() {
    const WATCHDOG: Duration = Duration::from_millis(1500);
    let server = TestServer::start();
    let name = unique_name("processes:sigkill");
    let mut raw = server.connection();
    let parent = parent_client(&server);
    let lock = parent.lock(name.as_str());

    let (mut child, holder) =
        spawn_ready("holder", &server, &name, &[(WATCHDOG_MS_ENV, ms(WATCHDOG))]);

    // The child holds it: its field, count 1, and we cannot take it.
    assert!(
        !holder.starts_with(parent.id()),
        "child holder id {holder:?} must not be the parent's"
    );
    assert_eq!(
        hgetall(&mut raw, &name),
        HashMap::from([(holder.clone(), "1".to_owned())]),
        "the lock hash must hold exactly the child's field"
    );
    assert!(lock.try_lock().unwrap().is_none(), "the child holds it");

    // It stays held well past 2x the watchdog timeout: the child renews.
    let watch_until = Instant::now() + WATCHDOG * 5 / 2;
    let mut renewals = 0;
    let mut last = pttl(&mut raw, &name);
    while Instant::now() < watch_until {
        thread::sleep(Duration::from_millis(50));
        let field: Option<String> = redis::cmd("HGET")
            .arg(&name)
            .arg(&holder)
            .query(&mut raw)
            .unwrap();
        let now = pttl(&mut raw, &name);
        assert_eq!(
            field.as_deref(),
            Some("1"),
            "the child's hold vanished while it was alive (PTTL {now}); child output:\n{}",
            child.transcript()
        );
        assert!(now > 0, "lock without a TTL or gone: PTTL {now}");
        if now > last {
            renewals += 1;
        }
        last = now;
    }
    assert!(
        renewals >= 2,
        "expected the child's watchdog to renew at least twice in {:?}, saw {renewals}",
        WATCHDOG * 5 / 2
    );
    assert!(child.is_running(), "the holder child exited early");

    // SIGKILL: no unlock runs, the lock must expire by its TTL.
    let before_kill = Instant::now();
    let ttl_at_kill = pttl(&mut raw, &name);
    child.kill();
    assert!(
        ttl_at_kill > 0,
        "lock must still be held when the child is killed (PTTL {ttl_at_kill})"
    );

    let guard = take_once_freed("the SIGKILLed child's", WATCHDOG, |wait| {
        lock.try_lock_for(wait)
    });
    let freed_after = before_kill.elapsed();
    let ttl_at_kill = Duration::from_millis(u64::try_from(ttl_at_kill).unwrap());
    eprintln!(
        "sigkill: {renewals} renewals observed; TTL at kill {ttl_at_kill:?}; freed {freed_after:?} after the kill"
    );
    // Upper bound: the child's last lease (at most the watchdog timeout) plus
    // slack for a loaded VM.
    assert!(
        freed_after < WATCHDOG + Duration::from_secs(2),
        "lock freed only {freed_after:?} after SIGKILL (watchdog timeout {WATCHDOG:?})"
    );
    // Lower bound: the TTL left when the child died can only have been
    // extended (by a last renewal), never shortened, so the lock cannot be
    // free before it ran out: it was freed by expiry, not by anything the
    // dying process did.
    assert!(
        freed_after + Duration::from_millis(50) >= ttl_at_kill,
        "lock taken {freed_after:?} after SIGKILL, before the {ttl_at_kill:?} TTL it had ran out"
    );
    assert_eq!(
        hgetall(&mut raw, &name),
        HashMap::from([(parent.current_holder_id(), "1".to_owned())]),
        "only the parent's field after it took the lock"
    );
    guard.unlock().unwrap();
}

#[test]
fn mutual_exclusion_across_processes() {
    const CHILDREN: u64 = 3;
    const ITERATIONS: u64 = 100;
    let server = TestServer::start();
    let name = unique_name("processes:mutex");
    let counter = format!("{name}:counter");
    let inside = format!("{name}:inside");
    let mut raw = server.connection();

    let envs = vec![
        (URL_ENV, server.url()),
        (LOCK_ENV, name.clone()),
        (COUNTER_ENV, counter.clone()),
        (INSIDE_ENV, inside.clone()),
        (ITERATIONS_ENV, ITERATIONS.to_string()),
    ];
    let (_children, elapsed) = run_together("incrementer", vec![envs; CHILDREN as usize]);
    eprintln!("mutex: {CHILDREN} processes x {ITERATIONS} increments in {elapsed:?}");

    let total: u64 = redis::cmd("GET").arg(&counter).query(&mut raw).unwrap();
    assert_eq!(
        total,
        CHILDREN * ITERATIONS,
        "lost updates: {CHILDREN} processes x {ITERATIONS} increments in {elapsed:?}"
    );
    assert_eq!(
        exists(&mut raw, &[&name, &inside]),
        0,
        "lock or marker left behind"
    );
}

/// The caller's wall clock in ms (the fair lock's slot deadlines use it).
fn wall_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(now.as_millis()).unwrap()
}

fn lrange(conn: &mut redis::Connection, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap()
}

/// A parent thread blocked in a fair `lock()`: it reports its holder id
/// before the call, then when it got the lock (instant and wall-clock ms),
/// and holds until released.
struct ParentWaiter {
    id: String,
    acquired: Receiver<(Instant, i64)>,
    release: Option<mpsc::Sender<()>>,
    handle: Option<thread::JoinHandle<()>>,
}

impl ParentWaiter {
    fn spawn(lock: redisync::Lock) -> ParentWaiter {
        let (id_tx, id_rx) = mpsc::channel();
        let (acquired_tx, acquired) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let handle = thread::spawn(move || {
            id_tx.send(lock.client().current_holder_id()).unwrap();
            let guard = lock.lock().expect("parent waiter: lock()");
            let _ = acquired_tx.send((Instant::now(), wall_ms()));
            let _ = release_rx.recv_timeout(Duration::from_secs(60));
            guard.unlock().expect("parent waiter: unlock()");
        });
        ParentWaiter {
            id: id_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            acquired,
            release: Some(release),
            handle: Some(handle),
        }
    }

    fn acquired(&self, what: &str, timeout: Duration) -> (Instant, i64) {
        self.acquired
            .recv_timeout(timeout)
            .unwrap_or_else(|e| panic!("{what}: no lock within {timeout:?} ({e})"))
    }

    fn join(mut self) {
        self.release.take();
        self.handle
            .take()
            .unwrap()
            .join()
            .expect("parent waiter panicked");
    }
}

/// The parent's client for the fair-lock process tests.
fn fair_parent(server: &TestServer, watchdog: Duration, wait: Duration) -> Client {
    Client::builder()
        .redis_url(server.url())
        .watchdog_timeout(watchdog)
        .fair_lock_wait_timeout(wait)
        .build()
        .expect("parent client")
}

/// A fair-lock waiter process SIGKILLed in the middle of the queue holds up
/// the waiters behind it only until its queue slot runs out (slots are short
/// here: a 1 s fair-lock wait timeout, and a 1 s watchdog for the holder so
/// the lock's TTL, from which the first slot counts, stays under 1 s).
///
/// Mechanism: the first waiter's unlock finds the dead waiter at the head,
/// marked for an outright handoff (`ops::fair_lock`), but nobody listening
/// on its channel: it keeps its place (a live waiter between two
/// subscriptions must not lose its turn); the last waiter parks at most
/// until the slot ahead of it runs out, retries, evicts the stale entry and
/// is at the head. When the first waiter took the lock every slot moved up
/// one wait timeout; a fair waiter re-reads its slot at least once per wait
/// timeout, so it gets the lock as the dead slot ends, not one wait timeout
/// later.
#[test]
fn dead_fair_waiter_delays_the_queue_at_most_its_slot() {
    const WAIT: Duration = Duration::from_millis(1000);
    const WATCHDOG: Duration = Duration::from_millis(1000);
    const SLACK: Duration = Duration::from_secs(2);
    let server = TestServer::start();
    let name = unique_name("processes:fair-dead-waiter");
    let queue = keys::fair_queue(&name);
    let timeouts = keys::fair_timeouts(&name);
    let mut raw = server.connection();
    let parent = fair_parent(&server, WATCHDOG, WAIT);
    let lock = parent.fair_lock(name.as_str());

    // The child connects first and queues only on "go", so the whole queue
    // forms within milliseconds, well inside the first slot.
    let (mut child, child_id) = spawn_ready(
        "fair_waiter",
        &server,
        &name,
        &[(FAIR_WAIT_MS_ENV, ms(WAIT))],
    );
    assert!(!child_id.starts_with(parent.id()));

    let holder = lock.lock().unwrap();
    let first = ParentWaiter::spawn(lock.clone());
    common::wait_until("the first waiter queued", READY_TIMEOUT, || {
        lrange(&mut raw, &queue) == [first.id.clone()]
    });
    child.send(GO);
    common::wait_until("the child queued", READY_TIMEOUT, || {
        lrange(&mut raw, &queue).len() >= 2
    });
    let last = ParentWaiter::spawn(lock.clone());
    common::wait_until("the last waiter queued", READY_TIMEOUT, || {
        lrange(&mut raw, &queue).len() >= 3
    });
    assert_eq!(
        lrange(&mut raw, &queue),
        [first.id.clone(), child_id.clone(), last.id.clone()],
        "queue order (a very slow setup lets the first slot run out); child output:\n{}",
        child.transcript()
    );
    child.kill();
    assert!(
        !child.transcript().contains(ACQUIRED),
        "the child got the lock"
    );

    // The holder's unlock tells the first waiter, which takes the lock.
    let unlocked = Instant::now();
    holder.unlock().unwrap();
    let (first_at, _) = first.acquired("the first waiter", Duration::from_secs(10));
    assert!(
        first_at.duration_since(unlocked) < SLACK,
        "the first waiter got the lock {:?} after the unlock",
        first_at.duration_since(unlocked)
    );
    // The dead child is the head now, with its slot's final deadline.
    assert_eq!(
        lrange(&mut raw, &queue),
        [child_id.clone(), last.id.clone()]
    );
    let deadline: f64 = redis::cmd("ZSCORE")
        .arg(&timeouts)
        .arg(&child_id)
        .query(&mut raw)
        .unwrap();
    #[allow(clippy::cast_possible_truncation)]
    let deadline = deadline as i64;

    // The first waiter's unlock goes to the dead child; the last waiter gets
    // the lock once the child's slot has run out, not before, not much later.
    let released = Instant::now();
    first.join();
    let bound = WAIT + WATCHDOG + SLACK;
    let (last_at, last_wall) = last.acquired("the last waiter", bound + Duration::from_secs(10));
    let delay = last_at.duration_since(released);
    eprintln!(
        "fair dead waiter: the last waiter got the lock {delay:?} after the first's unlock, \
         {} ms after the dead waiter's slot deadline",
        last_wall - deadline
    );
    assert!(
        last_wall >= deadline,
        "the last waiter got the lock {} ms before the dead waiter's slot ran out: \
         the queue order was not kept",
        deadline - last_wall
    );
    assert!(
        delay < bound,
        "a dead waiter held up the queue {delay:?} (wait timeout {WAIT:?}, bound {bound:?})"
    );
    let late = last_wall - deadline;
    assert!(
        late < 500,
        "the last waiter got the lock {late} ms after the dead waiter's slot ran out \
         (it should re-read its slot within one wait timeout, {WAIT:?})"
    );
    assert_eq!(
        hgetall(&mut raw, &name),
        HashMap::from([(last.id.clone(), "1".to_owned())])
    );
    assert_eq!(
        exists(&mut raw, &[&queue, &timeouts]),
        0,
        "the dead waiter is still queued"
    );
    last.join();
    assert!(!lock.is_locked().unwrap());
}

/// A redisync fair waiter process SIGKILLed at the head of the queue, with
/// a long slot (60 s here, 300 s by default), holds up the waiter behind it
/// only until its direct mark says it is gone: the mark's live-until is
/// three of its claim windows (at least 5 s) past its last attempt, and a
/// live waiter attempts at least once per claim window. The holder's unlock
/// keeps the dead head (its mark still lives: it could be a live waiter
/// remaking its subscription, which must not lose its turn); the waiter
/// behind, retrying once per claim window, takes it off the queue and the
/// lock once the mark has run out, not when the slot does.
#[test]
fn killed_fair_waiter_holds_the_queue_up_until_its_mark_runs_out_not_its_slot() {
    const WAIT: Duration = Duration::from_secs(60);
    const WATCHDOG: Duration = Duration::from_millis(1000);
    const CHILD_WATCHDOG: Duration = Duration::from_millis(2000);
    const SLACK: Duration = Duration::from_secs(2);
    let server = TestServer::start();
    let name = unique_name("processes:fair-killed-waiter");
    let queue = keys::fair_queue(&name);
    let mut raw = server.connection();
    let parent = fair_parent(&server, WATCHDOG, WAIT);
    let lock = parent.fair_lock(name.as_str());
    // The parent's claim window: two response timeouts, at most half its
    // watchdog timeout; its queued waiter attempts at least once per window.
    let claim = WATCHDOG / 2;

    let (mut child, child_id) = spawn_ready(
        "fair_waiter",
        &server,
        &name,
        &[
            (FAIR_WAIT_MS_ENV, ms(WAIT)),
            (WATCHDOG_MS_ENV, ms(CHILD_WATCHDOG)),
        ],
    );
    let holder = lock.lock().unwrap();
    child.send(GO);
    common::wait_until("the child queued", READY_TIMEOUT, || {
        lrange(&mut raw, &queue) == [child_id.clone()]
    });
    let last = ParentWaiter::spawn(lock.clone());
    common::wait_until("the last waiter queued", READY_TIMEOUT, || {
        lrange(&mut raw, &queue).len() >= 2
    });
    child.kill();
    assert!(
        !child.transcript().contains(ACQUIRED),
        "the child got the lock"
    );
    // Read after the kill: the child's last attempt wrote it.
    let mark: String = redis::cmd("GET")
        .arg(keys::fair_direct(&name, &child_id))
        .query(&mut raw)
        .expect("the child's direct mark");
    let live_until: i64 = mark
        .rsplit(':')
        .next()
        .and_then(|until| until.parse().ok())
        .unwrap_or_else(|| panic!("the mark {mark:?} has no live-until"));
    let left = live_until - wall_ms();
    assert!(
        left > 0 && left <= 3 * i64::try_from(CHILD_WATCHDOG.as_millis()).unwrap() + 5_000,
        "the mark lives on {left} ms"
    );

    let unlocked = Instant::now();
    holder.unlock().unwrap();
    assert_eq!(
        lrange(&mut raw, &queue),
        [child_id, last.id.clone()],
        "the unlock kept the head whose mark still lives"
    );
    let (last_at, last_wall) = last.acquired("the last waiter", WAIT);
    let delay = last_at.duration_since(unlocked);
    eprintln!(
        "fair killed waiter: the last waiter got the lock {delay:?} after the unlock, {} ms \
         after the dead waiter's mark ran out (its slot: {WAIT:?})",
        last_wall - live_until
    );
    assert!(
        last_wall >= live_until,
        "the last waiter got the lock {} ms before the dead waiter's mark ran out: \
         the queue order was not kept",
        live_until - last_wall
    );
    let late = Duration::from_millis(u64::try_from(last_wall - live_until).unwrap());
    assert!(
        late <= claim + SLACK,
        "the last waiter got the lock {late:?} after the dead waiter's mark ran out (it \
         attempts at least once per claim window, {claim:?})"
    );
    assert_eq!(
        hgetall(&mut raw, &name),
        HashMap::from([(last.id.clone(), "1".to_owned())])
    );
    assert!(
        lrange(&mut raw, &queue).is_empty(),
        "the dead waiter is still queued"
    );
    last.join();
    assert!(!lock.is_locked().unwrap());
}

/// A reader process SIGKILLed while a reader of the parent holds the same
/// read-write lock: the dead reader's hold key expires within the watchdog
/// timeout (nobody renews it) while the parent's stays renewed, and when the
/// parent releases, the lock is free at once although the hash still names
/// the dead reader.
#[test]
fn dead_reader_frees_its_share_while_a_live_reader_keeps_the_lock() {
    const WATCHDOG: Duration = Duration::from_millis(1000);
    const SLACK: Duration = Duration::from_secs(2);
    let server = TestServer::start();
    let name = unique_name("processes:dead-reader");
    let mut raw = server.connection();
    let parent = Client::builder()
        .redis_url(server.url())
        .watchdog_timeout(WATCHDOG)
        .build()
        .expect("parent client");
    let other = Client::builder()
        .redis_url(server.url())
        .build()
        .expect("writer client");
    let rw = parent.read_write_lock(name.as_str());
    let writer = other.read_write_lock(name.as_str()).write_lock();

    let (mut child, child_id) =
        spawn_ready("reader", &server, &name, &[(WATCHDOG_MS_ENV, ms(WATCHDOG))]);
    let child_key = keys::read_hold(&name, &child_id, 1);
    let reading = rw.read_lock().lock().unwrap();
    let me = parent.current_holder_id();
    let my_key = keys::read_hold(&name, &me, 1);
    assert_eq!(
        hgetall(&mut raw, &name),
        HashMap::from([
            ("mode".to_owned(), "read".to_owned()),
            (child_id.clone(), "1".to_owned()),
            (me, "1".to_owned()),
        ])
    );

    // Both readers' watchdogs renew their own keys.
    let watch_until = Instant::now() + WATCHDOG * 5 / 2;
    let mut renewals = 0;
    let mut last = pttl(&mut raw, &child_key);
    while Instant::now() < watch_until {
        thread::sleep(Duration::from_millis(50));
        let now = pttl(&mut raw, &child_key);
        assert!(
            now > 0,
            "the child's read hold key lapsed while it was alive (PTTL {now}); child output:\n{}",
            child.transcript()
        );
        assert!(
            pttl(&mut raw, &my_key) > 0,
            "the parent's read hold key lapsed"
        );
        if now > last {
            renewals += 1;
        }
        last = now;
    }
    assert!(
        renewals >= 2,
        "the child's watchdog renewed its read hold {renewals} times"
    );
    assert!(writer.try_lock().unwrap().is_none());

    // SIGKILL: the child's key is not renewed any more and expires.
    let ttl_at_kill = pttl(&mut raw, &child_key);
    let killed = Instant::now();
    child.kill();
    common::wait_until(
        "the dead reader's hold key expired",
        WATCHDOG + SLACK + Duration::from_secs(5),
        || pttl(&mut raw, &child_key) == -2,
    );
    let gone_after = killed.elapsed();
    let ttl_at_kill = Duration::from_millis(u64::try_from(ttl_at_kill).unwrap());
    eprintln!(
        "dead reader: hold key gone {gone_after:?} after the kill (TTL at kill {ttl_at_kill:?})"
    );
    assert!(
        gone_after < WATCHDOG + SLACK,
        "the dead reader's hold key lived {gone_after:?} after the kill (watchdog {WATCHDOG:?})"
    );
    assert!(
        gone_after + Duration::from_millis(50) >= ttl_at_kill,
        "the dead reader's key went after {gone_after:?}, before its {ttl_at_kill:?} TTL ran out"
    );

    // The parent still reads, past another watchdog timeout; writers wait.
    thread::sleep(WATCHDOG + WATCHDOG / 2);
    assert_eq!(rw.read_lock().hold_count().unwrap(), 1);
    assert!(!reading.is_lost(), "the live reader's hold was lost");
    assert!(pttl(&mut raw, &my_key) > 0);
    assert!(
        writer.try_lock().unwrap().is_none(),
        "a writer got in beside a live reader"
    );
    // The hash still names the dead reader...
    assert_eq!(
        hgetall(&mut raw, &name).get(&child_id).map(String::as_str),
        Some("1")
    );
    // ...yet the parent's release frees the lock at once (its key is gone).
    reading.unlock().unwrap();
    assert_eq!(
        exists(&mut raw, &[&name]),
        0,
        "the lock outlived its last live reader"
    );
    let started = Instant::now();
    let guard = writer
        .try_lock()
        .unwrap()
        .expect("a writer right after the last live reader left");
    assert!(started.elapsed() < SLACK);
    guard.unlock().unwrap();
}

#[test]
fn permit_of_a_sigkilled_holder_returns_when_its_lease_ends() {
    const LEASE: Duration = Duration::from_millis(1000);
    const SLACK: Duration = Duration::from_millis(1500);
    let server = TestServer::start();
    let name = unique_name("processes:permit");
    let leases = keys::permit_timeouts(&name);
    let mut raw = server.connection();
    let parent = parent_client(&server);
    let semaphore = parent.permit_expirable_semaphore(name.as_str());
    assert!(semaphore.try_set_permits(1).unwrap());

    let (mut child, child_id) = spawn_ready(
        "permit_holder",
        &server,
        &name,
        &[(LEASE_MS_ENV, ms(LEASE))],
    );
    let lease_end: Option<f64> = redis::cmd("ZSCORE")
        .arg(&leases)
        .arg(common::permit_id_bytes(&child_id))
        .query(&mut raw)
        .unwrap();
    let lease_end = lease_end.unwrap_or_else(|| {
        panic!(
            "the child's permit {child_id:?} is not in {leases}; child output:\n{}",
            child.transcript()
        )
    }) as i64;

    // The child holds the only permit.
    if let Some(early) = semaphore.try_acquire_id(Duration::from_secs(30)).unwrap() {
        let late = wall_ms() - lease_end;
        assert!(
            late >= 0,
            "the parent took the live child's permit {}ms before its lease ended",
            -late
        );
        // The VM stalled past the whole lease before this check: nothing
        // left to observe.
        eprintln!("permit: the child's lease ran out {late} ms before the parent's check");
        semaphore.release(&early).unwrap();
        return;
    }

    // SIGKILL: nothing releases the permit; its lease must run out.
    child.kill();
    let killed = Instant::now();
    let left_at_kill = lease_end - wall_ms();
    let id = semaphore
        .try_acquire_id_for(LEASE + Duration::from_secs(10), Duration::from_secs(30))
        .unwrap()
        .unwrap_or_else(|| {
            panic!(
                "the permit did not return within {:?}",
                LEASE + Duration::from_secs(10)
            )
        });
    let after = killed.elapsed();
    eprintln!("permit: {left_at_kill} ms of lease left at the kill; back {after:?} after it");
    assert!(
        after < LEASE + SLACK,
        "the dead child's permit came back only {after:?} after the kill (lease {LEASE:?})"
    );
    // Not before the lease ended: it came back by expiry.
    let left = Duration::from_millis(u64::try_from(left_at_kill).unwrap_or(0));
    assert!(
        after + Duration::from_millis(50) >= left,
        "the permit came back {after:?} after the kill, before the {left:?} left of its lease"
    );
    let members: Vec<Vec<u8>> = redis::cmd("ZRANGE")
        .arg(&leases)
        .arg(0)
        .arg(-1)
        .query(&mut raw)
        .unwrap();
    assert_eq!(
        members,
        [common::permit_id_bytes(id.as_str())],
        "only the parent's lease is left"
    );
    semaphore.release(&id).unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 1);
}

// ---------------------------------------------------------------------------
// Fenced locks and multi-locks across processes
// ---------------------------------------------------------------------------

/// Spawns one `role` child per entry of `envs`; once every one is ready
/// (connected), starts them together (GO) for maximum contention, then
/// waits for each to say DONE and exit successfully. Returns the children
/// (for their transcripts) and how long they ran.
fn run_together(role: &str, envs: Vec<Vec<(&str, String)>>) -> (Vec<ChildProcess>, Duration) {
    let mut children: Vec<ChildProcess> = envs
        .iter()
        .map(|envs| ChildProcess::spawn(role, envs))
        .collect();
    for child in &children {
        child.expect_line(READY, READY_TIMEOUT);
    }
    for child in &mut children {
        child.send(GO);
    }
    let started = Instant::now();
    for child in &mut children {
        child.expect_line(DONE, Duration::from_secs(90));
        let status = child.wait_exit(Duration::from_secs(30));
        assert!(
            status.success(),
            "{} child (pid {}) failed: {status}; output:\n{}",
            child.role,
            child.pid(),
            child.transcript()
        );
    }
    (children, started.elapsed())
}

/// Checks that no child counted a violation at `key`; `what` says what a
/// violation there would be.
fn assert_no_violations(
    raw: &mut redis::Connection,
    key: &str,
    what: &str,
    children: &[ChildProcess],
) {
    let violated: Option<u64> = redis::cmd("GET").arg(key).query(raw).unwrap();
    assert_eq!(violated, None, "{what}; output:\n{}", transcripts(children));
}

/// How many of `keys` exist (`EXISTS`).
fn exists(raw: &mut redis::Connection, keys: &[&str]) -> i64 {
    redis::cmd("EXISTS").arg(keys).query(raw).unwrap()
}

fn transcripts(children: &[ChildProcess]) -> String {
    children
        .iter()
        .map(|c| {
            format!(
                "--- {} child (pid {}) ---\n{}",
                c.role,
                c.pid(),
                c.transcript()
            )
        })
        .collect()
}

/// A token counter value far above the clock floor (the server's clock in
/// µs, about 1.8e15 today; 4e15 µs is the year 2096): set before a test's
/// acquisitions, every token is exactly one more than the last again, so
/// the tests can count them.
const TOKEN_BASE: u64 = 4_000_000_000_000_000;

/// Sets the token counter of the fenced lock `name` to [`TOKEN_BASE`].
fn start_token_counter(raw: &mut redis::Connection, name: &str) -> u64 {
    let () = redis::cmd("SET")
        .arg(keys::fence_counter(name))
        .arg(TOKEN_BASE)
        .query(raw)
        .unwrap();
    TOKEN_BASE
}

/// Two processes × four threads take one fenced lock many times and, inside
/// it, do a non-atomic check-and-set of the last token seen (GET, compare,
/// SET): every holder's token is above the last one stored, so the tokens
/// order the holders across processes; the counter ends at the number of
/// acquisitions past where it started, without a TTL.
#[test]
fn fencing_tokens_order_holders_across_processes() {
    const CHILDREN: u64 = 2;
    const THREADS: u64 = 4;
    const ITERATIONS: u64 = 50;
    let server = TestServer::start();
    let name = unique_name("processes:fenced");
    let last = format!("{name}:last-token");
    let violations = format!("{name}:violations");
    let token_key = keys::fence_counter(&name);
    let mut raw = server.connection();
    let base = start_token_counter(&mut raw, &name);

    let envs = vec![
        (URL_ENV, server.url()),
        (LOCK_ENV, name.clone()),
        (COUNTER_ENV, last.clone()),
        (VIOLATIONS_ENV, violations.clone()),
        (ITERATIONS_ENV, ITERATIONS.to_string()),
        (THREADS_ENV, THREADS.to_string()),
    ];
    let (children, elapsed) = run_together("fenced_incrementer", vec![envs; CHILDREN as usize]);
    let total = CHILDREN * THREADS * ITERATIONS;
    eprintln!("fenced: {CHILDREN} processes x {THREADS} threads x {ITERATIONS} in {elapsed:?}");

    assert_no_violations(&mut raw, &violations, "fencing violations", &children);
    let last: u64 = redis::cmd("GET").arg(&last).query(&mut raw).unwrap();
    assert_eq!(last, base + total, "the last holder's token");
    let counter: u64 = redis::cmd("GET").arg(&token_key).query(&mut raw).unwrap();
    assert_eq!(
        counter,
        base + total,
        "one token per acquisition, no more, no less"
    );
    assert_eq!(
        pttl(&mut raw, &token_key),
        -1,
        "the token counter has a TTL"
    );
    assert_eq!(exists(&mut raw, &[&name]), 0, "the lock was left behind");
}

/// A fenced-lock holder process is SIGKILLed while holding the lock. Its
/// lock expires (nothing renews it); the next holder gets a greater token,
/// and a downstream store that keeps the highest token it accepted refuses a
/// write stamped with the dead holder's token (say, one still in flight when
/// it died) after the new holder's write.
#[test]
fn token_of_a_sigkilled_fenced_holder_is_refused_downstream() {
    const WATCHDOG: Duration = Duration::from_millis(1000);
    let server = TestServer::start();
    let name = unique_name("processes:fenced-sigkill");
    let store = format!("{name}:store");
    let mut raw = server.connection();
    let parent = parent_client(&server);
    let lock = parent.fenced_lock(name.as_str());

    let base = start_token_counter(&mut raw, &name);
    let (mut child, dead_token, holder) = spawn_fenced_holder(&server, &name, &store, WATCHDOG);
    assert_eq!(dead_token, base + 1, "the first token after the base");
    assert_eq!(
        hgetall(&mut raw, &name),
        HashMap::from([(holder, "1".to_owned())])
    );
    assert_eq!(
        get(&mut raw, &store_highest_key(&store)),
        Some(dead_token.to_string())
    );
    assert!(lock.try_lock().unwrap().is_none(), "the child holds it");

    let killed = Instant::now();
    child.kill();

    let guard = take_once_freed("the dead holder's", WATCHDOG, |wait| {
        lock.try_lock_for(wait)
    });
    let freed_after = killed.elapsed();
    eprintln!("fenced sigkill: lock free {freed_after:?} after the kill");
    assert!(
        freed_after < WATCHDOG + Duration::from_secs(2),
        "the dead holder's lock lived {freed_after:?} (watchdog {WATCHDOG:?})"
    );
    let token = guard.token().unwrap();
    assert!(
        token > dead_token,
        "token {token} after the dead {dead_token}"
    );
    assert_eq!(token, dead_token + 1, "the refused try_lock took a token");

    // The new holder writes; the dead holder's late write is refused.
    assert!(store_write(&mut raw, &store, token, "new holder"));
    assert!(
        !store_write(
            &mut raw,
            &store,
            dead_token,
            "stale write of the dead holder"
        ),
        "the store accepted a write stamped with the dead holder's token"
    );
    assert_eq!(
        get(&mut raw, &store_data_key(&store)).as_deref(),
        Some("new holder")
    );
    assert_eq!(
        get(&mut raw, &store_highest_key(&store)),
        Some(token.to_string())
    );
    guard.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

/// The case fencing exists for: a holder process is frozen (SIGSTOP, like a
/// long GC pause) past its lease, the lock expires and another process takes
/// it and writes. When the frozen holder resumes and writes with its token,
/// the downstream store refuses it, its guard reports the hold lost, and its
/// waking watchdog does not disturb the new holder.
#[test]
fn paused_fenced_holder_is_refused_downstream_after_its_lock_expires() {
    const WATCHDOG: Duration = Duration::from_millis(1000);
    let server = TestServer::start();
    let name = unique_name("processes:fenced-pause");
    let store = format!("{name}:store");
    let mut raw = server.connection();
    let parent = parent_client(&server);
    let lock = parent.fenced_lock(name.as_str());

    let base = start_token_counter(&mut raw, &name);
    let (mut child, old_token, _) = spawn_fenced_holder(&server, &name, &store, WATCHDOG);
    assert_eq!(old_token, base + 1);
    common::send_signal(child.pid(), "STOP");
    let stopped = Instant::now();
    let guard = take_once_freed("the frozen holder's", WATCHDOG, |wait| {
        lock.try_lock_for(wait)
    });
    eprintln!(
        "fenced pause: lock free {:?} after the SIGSTOP",
        stopped.elapsed()
    );
    let token = guard.token().unwrap();
    assert_eq!(token, old_token + 1);
    assert!(store_write(&mut raw, &store, token, "new holder"));

    // The frozen holder resumes and, unaware, writes with its old token.
    child.send(&format!("{WRITE} zombie"));
    common::send_signal(child.pid(), "CONT");
    let result = child.expect_line(WRITE_RESULT, READY_TIMEOUT);
    assert_eq!(
        result,
        "refused lost=true",
        "the resumed holder's write; child output:\n{}",
        child.transcript()
    );
    assert_eq!(
        get(&mut raw, &store_data_key(&store)).as_deref(),
        Some("new holder")
    );
    // Its watchdog woke up too, and left the new holder's hold alone.
    thread::sleep(WATCHDOG / 2);
    assert_eq!(
        hgetall(&mut raw, &name),
        HashMap::from([(parent.current_holder_id(), "1".to_owned())])
    );
    assert!(!guard.is_lost());
    guard.unlock().unwrap();

    // Closing its stdin ends the child; its drop finds nothing to release.
    drop(child.stdin.take());
    let status = child.wait_exit(Duration::from_secs(30));
    assert!(
        status.success(),
        "fenced holder failed: {status}; output:\n{}",
        child.transcript()
    );
    assert!(!lock.is_locked().unwrap());
}

/// Two processes × three threads take a `MultiLock` over one lock on each of
/// three independent servers (one client per server per process; one
/// process lists the parts in reverse order) and increment a plain counter
/// on every server non-atomically inside it. No update is lost on any
/// server, nobody is ever inside twice, and the opposite orders do not
/// deadlock (the run is bounded).
#[test]
fn multi_lock_over_three_servers_across_processes() {
    const THREADS: u64 = 3;
    const ITERATIONS: u64 = 50;
    let servers = [
        TestServer::start(),
        TestServer::start(),
        TestServer::start(),
    ];
    let name = unique_name("processes:multi");
    let counter = format!("{name}:counter");
    let inside = format!("{name}:inside");
    let violations = format!("{name}:violations");
    let urls = servers
        .iter()
        .map(TestServer::url)
        .collect::<Vec<_>>()
        .join(",");

    let envs = |reverse: &str| {
        vec![
            (URLS_ENV, urls.clone()),
            (LOCK_ENV, name.clone()),
            (COUNTER_ENV, counter.clone()),
            (INSIDE_ENV, inside.clone()),
            (VIOLATIONS_ENV, violations.clone()),
            (ITERATIONS_ENV, ITERATIONS.to_string()),
            (THREADS_ENV, THREADS.to_string()),
            (REVERSE_ENV, reverse.to_owned()),
        ]
    };
    let (children, elapsed) = run_together("multi_incrementer", vec![envs("0"), envs("1")]);
    let total = children.len() as u64 * THREADS * ITERATIONS;
    eprintln!("multi: {total} multi-lock acquisitions over 3 servers in {elapsed:?}");

    for (index, server) in servers.iter().enumerate() {
        let mut raw = server.connection();
        let what = format!("server {index}: two holders inside");
        assert_no_violations(&mut raw, &violations, &what, &children);
        let value: u64 = redis::cmd("GET").arg(&counter).query(&mut raw).unwrap();
        assert_eq!(
            value, total,
            "server {index}: lost updates ({total} multi-lock acquisitions in {elapsed:?})"
        );
        assert_eq!(
            exists(&mut raw, &[&name, &inside]),
            0,
            "server {index}: lock or marker left behind"
        );
    }
}
