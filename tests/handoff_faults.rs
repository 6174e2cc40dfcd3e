//! Nothing stranded (issue 22, item 3): a reentrant-lock waiter in another
//! process that was handed the lock (`ops::handoff`: the release gives the
//! queue head one hold with the claim window as TTL) but has gone, frozen,
//! killed, or given up, keeps it no longer than the claim window, and a
//! late handoff message never makes a waiter believe it holds the lock
//! while another does.
//!
//! Real processes on a real `redis-server`: the waiters are this binary
//! re-executed in the `waiter` role (tests/common/child.rs), each with its
//! own client, so each is a client of its own in the lock's queue. Every
//! hold (the parent's too) is recorded in Redis as a history section with a
//! non-atomic increment of a shared counter inside it (read, pause, write),
//! and `common::history::check` finds overlaps and lost updates across the
//! processes. Bounds come from the claim window (two response timeouts),
//! never from measured speed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::child::{
    CHILD_MAX_LIFETIME, ChildProcess, READY_TIMEOUT, ROLE_ENV, URL_ENV, announce, child_builder,
    env, env_ms, ms, parent_lines, raw_connection, spawn_ready,
};
use common::history::{self, Mode, Section, Write, mono_ns};
use common::keys;
use common::wrap::{Hook, Store, Wrapped, assert_forwards_every_method};
use common::{TestServer, hgetall, numsub, pttl, send_signal, unique_name, wait_until};
use redisync::internal::handoff::{self, Queue};
use redisync::internal::lock::{Acquire, Release};
use redisync::{Client, LockGuard, NopEventHandler};
use redisync::{LockBackend, Reply, ScriptCall};

/// The waiter child's response timeout (its claim window is twice it).
const RESPONSE_MS_ENV: &str = "REDISYNC_RESPONSE_MS";
/// How long the waiter child holds the lock once it has it.
const HOLD_MS_ENV: &str = "REDISYNC_HOLD_MS";
/// The prefix of the history keys (sections, writes, counter).
const HIST_ENV: &str = "REDISYNC_HIST";
/// How late the racer child sends each leave of the queue, in ms.
const LEAVE_DELAY_MS_ENV: &str = "REDISYNC_LEAVE_DELAY_MS";

/// What a bound here adds to the claim window README promises ("a hold
/// handed to it runs out after the claim window ... and the queue, which
/// retries at least once per claim window, moves on"): the retry that
/// finds the handed hold gone is due when the window ends (a queued waiter
/// parks at most until the hold's TTL runs out, `lock::acquire`), and it is
/// one round trip, which README's bounds of the blocking calls put at "at
/// most 100 ms, plus scheduling delays"; the scheduling delays are allowed
/// what tests/fault_suite.rs allows a call beyond its own bound on a loaded
/// 2-core machine (its `SLACK`, 1 s). Nothing else: no measured speed.
const BEYOND_CLAIM: Duration = Duration::from_millis(100 + 1000);

/// Printed by a waiter child when it holds the lock, with the monotonic
/// instant it returned (`history::mono_ns`, shared by every process).
const ACQUIRED: &str = "REDISYNC-CHILD-ACQUIRED";
/// Printed by a waiter child when its bounded wait ended without the lock.
const TIMED_OUT: &str = "REDISYNC-CHILD-TIMED-OUT";
/// Printed by a waiter child once it left its critical section.
const RELEASED: &str = "REDISYNC-CHILD-RELEASED";

/// The redisync-only waiter queue's key and per-client channels of `name`
/// (the claim window here does not matter: only the names are used).
fn names_of(name: &str) -> Queue {
    Queue::new(name, 1, 1)
}

/// The client id in a holder id (`<client id>:<thread>`).
fn client_of(holder: &str) -> &str {
    holder.rsplit_once(':').expect("holder id").0
}

// ---------------------------------------------------------------------------
// The history each process records in Redis
// ---------------------------------------------------------------------------

/// Where the processes record their holds and writes.
#[derive(Clone)]
struct Hist {
    sections: String,
    writes: String,
    counter: String,
}

impl Hist {
    fn new(prefix: &str) -> Hist {
        Hist {
            sections: format!("{prefix}:sections"),
            writes: format!("{prefix}:writes"),
            counter: format!("{prefix}:counter"),
        }
    }

    /// Checks every recorded hold: `expected` sections, no overlap, no lost
    /// update, and the counter counts every write.
    fn check(&self, raw: &mut redis::Connection, expected: usize, what: &str) -> Vec<Section> {
        let sections: Vec<Section> = lrange(raw, &self.sections)
            .iter()
            .map(|line| Section::from_line(line))
            .collect();
        let writes: Vec<Write> = lrange(raw, &self.writes)
            .iter()
            .map(|line| Write::from_line(line))
            .collect();
        let shown = || {
            sections
                .iter()
                .map(|s| format!("  {s}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let verdict = history::check(&sections, &writes, &[]);
        assert!(
            verdict.violations.is_empty(),
            "{what}: the history of the holds is wrong:\n{}\nsections:\n{}",
            verdict.violations.join("\n"),
            shown()
        );
        assert_eq!(
            sections.len(),
            expected,
            "{what}: holds recorded:\n{}",
            shown()
        );
        let counter: Option<u64> = redis::cmd("GET").arg(&self.counter).query(raw).unwrap();
        assert_eq!(
            counter.unwrap_or(0),
            u64::try_from(writes.len()).unwrap(),
            "{what}: the counter lost an update"
        );
        assert_eq!(writes.len(), expected, "{what}: one write per hold");
        sections
    }
}

/// Applies a write and logs it in one step, so the log is in the store's
/// order: KEYS counter, log; ARGV value, log line.
const WRITE_AND_LOG: &str = "
redis.call('set', KEYS[1], ARGV[1])
redis.call('rpush', KEYS[2], ARGV[2])
";

/// A hold being recorded: when it began, the last time its guard said it
/// still held the lock, and when it first said it had lost it.
struct Held {
    who: String,
    guard: LockGuard,
    enter_ns: u64,
    last_ok_ns: u64,
    lost_ns: Option<u64>,
}

impl Held {
    fn new(who: &str, guard: LockGuard, enter_ns: u64) -> Held {
        Held {
            who: who.to_owned(),
            guard,
            enter_ns,
            last_ok_ns: enter_ns,
            lost_ns: None,
        }
    }

    /// Asks the guard; the answer goes into the section.
    fn still_held(&mut self) -> bool {
        let now = mono_ns();
        if self.guard.is_lost() {
            self.lost_ns.get_or_insert(now);
            false
        } else {
            self.last_ok_ns = now;
            true
        }
    }

    /// Increments the shared counter non-atomically (read, pause, write),
    /// writing only while the guard says it holds the lock.
    fn increment(&mut self, raw: &mut redis::Connection, hist: &Hist) {
        let read: Option<u64> = redis::cmd("GET").arg(&hist.counter).query(raw).unwrap();
        let read = read.unwrap_or(0);
        // Widen the window a lost update needs.
        thread::sleep(Duration::from_millis(10));
        if !self.still_held() {
            return;
        }
        let write = Write {
            client: self.who.clone(),
            thread: 0,
            token: None,
            sent_ns: mono_ns(),
            read,
            value: read + 1,
            accepted: true,
        };
        redis::Script::new(WRITE_AND_LOG)
            .key(&hist.counter)
            .key(&hist.writes)
            .arg(read + 1)
            .arg(write.to_line())
            .invoke::<()>(raw)
            .unwrap();
    }

    /// Ends the section (records it) and unlocks; returns when it left.
    fn finish(mut self, raw: &mut redis::Connection, hist: &Hist) -> u64 {
        self.still_held();
        let exit_ns = mono_ns();
        let section = Section {
            client: self.who.clone(),
            thread: 0,
            mode: Mode::Exclusive,
            token: None,
            enter_ns: self.enter_ns,
            last_ok_ns: self.last_ok_ns,
            lost_ns: self.lost_ns,
            exit_ns,
        };
        redis::cmd("RPUSH")
            .arg(&hist.sections)
            .arg(section.to_line())
            .query::<()>(raw)
            .unwrap();
        // A hold that was never really this process's cannot be released;
        // the history shows it.
        let _ = self.guard.unlock();
        exit_ns
    }
}

fn lrange(raw: &mut redis::Connection, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(raw)
        .unwrap()
}

/// The lock's waiter queue, head first.
fn queue_entries(raw: &mut redis::Connection, name: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(names_of(name).key())
        .arg(0)
        .arg(-1)
        .query(raw)
        .unwrap()
}

/// The queue entry of `holder`: `d|<wait id>|<holder>` when it may be
/// handed the lock outright, else the holder id itself.
fn entry_of(entries: &[String], holder: &str) -> Option<String> {
    entries
        .iter()
        .find(|e| *e == holder || e.ends_with(&format!("|{holder}")))
        .cloned()
}

// ---------------------------------------------------------------------------
// Child side
// ---------------------------------------------------------------------------

/// NOT A TEST OF ITS OWN: the entry point of the child processes the other
/// tests spawn (this binary re-executed with `--exact child_role_entrypoint`
/// and `REDISYNC_CHILD_ROLE` set). In a normal run it returns at once.
#[test]
fn child_role_entrypoint() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    match role.as_str() {
        "waiter" => child_waiter(),
        "racer" => child_racer(),
        other => panic!("unknown {ROLE_ENV}={other:?}"),
    }
}

/// Says its holder id (its main thread's, which does the waiting); then, on
/// each line from the parent, `lock` (waits without a bound) or `try <ms>`
/// (waits that long): holding the lock, it says so with the instant, holds
/// it `HOLD_MS` with one increment of the counter recorded in the history,
/// unlocks and says so; a wait that ends without it says so. Exits when
/// the parent closes stdin.
fn child_waiter() {
    let client = child_builder()
        .response_timeout(env_ms(RESPONSE_MS_ENV))
        .build()
        .expect("child: connect");
    run_waiter(&client, None);
}

/// The waiter, with each leave of the lock's queue (`lock_leave_queue`)
/// sent `LEAVE_DELAY_MS` late (a slow round trip: the window between the
/// end of a wait and its leaving, in which a release may hand it the lock,
/// is that much wider), and a wait that ends without the lock says how its
/// leave went: `leave=1` (it gave up a hold it had been handed), `leave=0`,
/// `leave=err` (it failed: best effort), `leave=-` (none was sent).
fn child_racer() {
    let base = child_builder()
        .response_timeout(env_ms(RESPONSE_MS_ENV))
        .build()
        .expect("child: connect");
    let slow = Slow::new(Arc::clone(base.backend()), env_ms(LEAVE_DELAY_MS_ENV));
    let client = Client::builder()
        .backend(Arc::clone(&slow) as Arc<dyn LockBackend>)
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .expect("child: client on the slow store");
    run_waiter(&client, Some(&slow));
    drop(base);
}

/// A store whose queue leaves are sent late, and which remembers how the
/// latest one went (see [`child_racer`]); when armed, the replies of the
/// next acquire attempts come late too (a slow round trip). Everything
/// else is forwarded, by [`Wrapped`].
#[derive(Default)]
struct Slow {
    delay: Duration,
    last: Mutex<Option<String>>,
    /// How many of the next acquire replies come late, and how late.
    late_acquires: AtomicU64,
    acquire_delay: Mutex<Duration>,
    /// Acquire attempts sent, and how many of the late ones were sent.
    acquires: AtomicU64,
    late_sent: AtomicU64,
}

impl Slow {
    fn new(inner: Arc<dyn LockBackend>, leave_delay: Duration) -> Arc<Wrapped<Slow>> {
        let slow = Slow {
            delay: leave_delay,
            ..Slow::default()
        };
        Arc::new(Wrapped::around(inner, slow))
    }
}

impl Hook for Slow {
    fn run_script(&self, inner: &Store, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        if call.script().id() == "lock_acquire" {
            self.acquires.fetch_add(1, Ordering::SeqCst);
            let late = self
                .late_acquires
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            let reply = inner.run_script(call);
            if late {
                self.late_sent.fetch_add(1, Ordering::SeqCst);
                thread::sleep(*self.acquire_delay.lock().unwrap());
            }
            return reply;
        }
        if call.script().id() != "lock_leave_queue" {
            return inner.run_script(call);
        }
        thread::sleep(self.delay);
        let reply = inner.run_script(call);
        *self.last.lock().unwrap() = Some(match &reply {
            Ok(reply) => reply
                .as_int()
                .map_or_else(|| format!("{reply:?}"), |n| n.to_string()),
            Err(_) => "err".to_owned(),
        });
        reply
    }
}

#[test]
fn the_slow_store_forwards_every_method() {
    assert_forwards_every_method(Slow::default());
}

/// The waiter's loop (see [`child_waiter`]) on `client`.
fn run_waiter(client: &Client, slow: Option<&Slow>) {
    let lock = client.lock(env(common::child::LOCK_ENV));
    let mut raw = raw_connection(&env(URL_ENV));
    let hist = Hist::new(&env(HIST_ENV));
    let hold = env_ms(HOLD_MS_ENV);
    let me = format!("pid{}", std::process::id());
    let from_parent = parent_lines();
    announce(&format!(
        "{} {}",
        common::child::READY,
        client.current_holder_id()
    ));
    let deadline = Instant::now() + CHILD_MAX_LIFETIME;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = from_parent.recv_timeout(left) else {
            break;
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let got = match words[..] {
            ["lock"] => Some(lock.lock().expect("child: lock")),
            ["try", wait] => lock
                .try_lock_for(Duration::from_millis(
                    wait.parse().expect("child: try <ms>"),
                ))
                .expect("child: try_lock_for"),
            _ => panic!("child: unknown command {line:?}"),
        };
        let Some(guard) = got else {
            let leave = slow.and_then(|slow| slow.last.lock().unwrap().take());
            announce(&format!(
                "{TIMED_OUT} leave={}",
                leave.as_deref().unwrap_or("-")
            ));
            continue;
        };
        let enter_ns = mono_ns();
        announce(&format!("{ACQUIRED} {enter_ns}"));
        let mut held = Held::new(&me, guard, enter_ns);
        thread::sleep(hold / 2);
        held.increment(&mut raw, &hist);
        thread::sleep(hold / 2);
        held.finish(&mut raw, &hist);
        announce(RELEASED);
    }
}

// ---------------------------------------------------------------------------
// Parent side
// ---------------------------------------------------------------------------

/// What every test starts from: a private `redis-server`, a fresh lock
/// name, the history of its holds ([`hist_of`]), and a plain connection
/// that reads the store behind the clients' backs.
struct Scene {
    server: TestServer,
    name: String,
    hist: Hist,
    raw: redis::Connection,
}

impl Scene {
    fn start(case: &str) -> Scene {
        let server = TestServer::start();
        let name = unique_name(&format!("handoff-faults:{case}"));
        let hist = Hist::new(&hist_of(&name));
        let raw = server.connection();
        Scene {
            server,
            name,
            hist,
            raw,
        }
    }
}

/// The prefix of the history keys of lock `name`, for every process.
fn hist_of(name: &str) -> String {
    format!("{name}:hist")
}

/// A client of this process on `server`, with `response` as its response
/// timeout (its claim window is twice it), or the default.
fn client_on(server: &TestServer, response: Option<Duration>) -> Client {
    let builder = Client::builder().redis_url(server.url());
    match response {
        Some(response) => builder.response_timeout(response),
        None => builder,
    }
    .build()
    .unwrap()
}

/// Spawns a waiter child on `server` for lock `name` (recording its holds
/// in the lock's history); returns it with its holder id.
fn spawn_waiter(
    server: &TestServer,
    name: &str,
    response: Duration,
    hold: Duration,
) -> (ChildProcess, String) {
    spawn_ready(
        "waiter",
        server,
        name,
        &[
            (RESPONSE_MS_ENV, ms(response)),
            (HOLD_MS_ENV, ms(hold)),
            (HIST_ENV, hist_of(name)),
        ],
    )
}

/// The instant a waiter child says it got the lock, if it says so within
/// `timeout`.
fn acquired_within(child: &ChildProcess, timeout: Duration) -> Option<u64> {
    child
        .line_within(ACQUIRED, timeout)
        .map(|ns| ns.parse().expect("the child's acquired instant"))
}

/// The instant the next waiter child got the lock, which it must within
/// `bound` of the unlock at `unlocked_ns`. A stall panics with `why` (what
/// it would mean) and what the lock (`name`, read on `raw`) and its queue
/// hold now. Prints the wait for `what`.
fn next_within(
    next: &ChildProcess,
    (raw, name): (&mut redis::Connection, &str),
    unlocked_ns: u64,
    bound: Duration,
    what: &str,
    why: &str,
) -> u64 {
    let Some(next_ns) = acquired_within(next, bound) else {
        panic!(
            "stall: the next waiter did not get the lock within {bound:?} of the unlock \
             ({why}); lock now {:?} (PTTL {} ms), queue {:?}",
            hgetall(raw, name),
            pttl(raw, name),
            queue_entries(raw, name)
        )
    };
    let stall = history::ms_between(unlocked_ns, next_ns);
    eprintln!(
        "{what}: the next waiter got the lock {stall:.1} ms after the unlock (bound {bound:?})"
    );
    assert!(
        stall < bound.as_secs_f64() * 1e3,
        "stall: the next waiter waited {stall:.1} ms (bound {bound:?})"
    );
    next_ns
}

/// Waits until the child says it left its critical section, then finishes
/// it ([`finish_child`]).
fn released_then_finish(child: ChildProcess, what: &str) {
    child.expect_line(RELEASED, Duration::from_secs(10));
    finish_child(child, what);
}

/// The end of a test: `holds` holds recorded with no overlap and no lost
/// update ([`Hist::check`]), the lock free, and nobody left in its queue.
fn assert_nothing_left(
    raw: &mut redis::Connection,
    hist: &Hist,
    client: &Client,
    name: &str,
    holds: usize,
    what: &str,
) {
    hist.check(raw, holds, what);
    assert!(
        !client.lock(name).is_locked().unwrap(),
        "{what}: the lock is still held"
    );
    let queue = queue_entries(raw, name);
    assert!(queue.is_empty(), "{what}: left in the queue: {queue:?}");
}

/// Through the ops API (the tests that build a race exactly): `holder`
/// takes lock `name`, then `waiter` tries, fails, and queues as `entry`.
fn ops_hold_and_queue(
    store: &dyn LockBackend,
    name: &str,
    queue: &Queue,
    holder: &str,
    (waiter, entry): (&str, &str),
) {
    let attempt = |n: u32| keys::attempt_record(name, &format!("test-{n}"));
    let held = handoff::acquire(store, name, holder, 30_000, &attempt(1), queue, false, None);
    assert_eq!(held.unwrap(), Acquire::Acquired);
    let waited = handoff::acquire(
        store,
        name,
        waiter,
        30_000,
        &attempt(2),
        queue,
        false,
        Some(entry),
    );
    assert!(!waited.unwrap().is_acquired());
}

/// Through the ops API: `holder` releases lock `name` (its unlock latch
/// named by `latch`), handing it to the queue's head if one listens.
fn ops_release(
    store: &dyn LockBackend,
    name: &str,
    queue: &Queue,
    holder: &str,
    latch: &str,
) -> Release {
    handoff::release(
        store,
        name,
        &keys::lock_channel(name),
        holder,
        30_000,
        &keys::unlock_latch(name, latch),
        5_000,
        None,
        queue,
        0,
    )
    .unwrap()
    .outcome
}

/// Closes the child's stdin and checks it exits cleanly by itself.
fn finish_child(mut child: ChildProcess, what: &str) {
    drop(child.stdin.take());
    let status = child.wait_exit(Duration::from_secs(20));
    assert!(
        status.success(),
        "{what} failed: {status}; output:\n{}",
        child.transcript()
    );
}

/// Waits until every thread of process `pid` is stopped: SIGSTOP stops a
/// process's threads one by one as each is next scheduled, so on a loaded
/// machine one may still run for a while after `kill` returned.
fn wait_stopped(pid: u32) {
    wait_until(
        "every thread of the frozen process is stopped",
        Duration::from_secs(10),
        || {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
            tasks.into_iter().all(|task| {
                let stat =
                    std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap_or_default();
                // The state follows the command name in parentheses.
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
            })
        },
    );
}

/// Sends `lock` to the child and waits until it is queued (and, when
/// `listening`, its client is subscribed to its own handoff channel, so a
/// release counts it as there). Returns its queue entry.
fn queue_child(
    child: &mut ChildProcess,
    holder: &str,
    raw: &mut redis::Connection,
    name: &str,
) -> String {
    child.send("lock");
    let channel = names_of(name).channel(client_of(holder));
    let mut entry = None;
    wait_until(
        "the waiter child is queued and listens",
        READY_TIMEOUT,
        || {
            entry = entry_of(&queue_entries(raw, name), holder);
            entry.is_some() && numsub(raw, &channel) >= 1
        },
    );
    entry.unwrap()
}

/// 1. A waiter process is frozen (SIGSTOP) after it queued; the holder in
///    this process unlocks and the release hands the frozen waiter the
///    lock outright (its connection still counts as listening). The third
///    process, next in line, gets the lock soon after the claim window ends
///    (a queued waiter retries at least once per claim window), not after
///    the 30 s lease; the frozen waiter, resumed (SIGCONT) while the
///    third holds it, reads a handoff too old to trust, and never believes
///    it holds the lock while another does: it gets it after the third.
///    (SIGSTOP stops a loaded process's threads one by one, so the test
///    waits until all are stopped: otherwise its subscriber may read the
///    handoff in time and the waiting thread find it only after SIGCONT,
///    when it has run out, the case
///    `a_handoff_that_runs_out_before_the_waiter_returns_is_not_a_hold`
///    makes exact.)
#[test]
fn a_frozen_waiter_handed_the_lock_stalls_the_next_one_at_most_its_claim_window() {
    const RESPONSE: Duration = Duration::from_millis(500);
    // The claim window: two response timeouts (under half the watchdog's).
    const CLAIM: Duration = Duration::from_millis(1000);
    const NEXT_HOLD: Duration = Duration::from_millis(1500);
    let bound = CLAIM + BEYOND_CLAIM;
    let Scene {
        server,
        name,
        hist,
        mut raw,
    } = Scene::start("frozen");
    let parent = client_on(&server, Some(RESPONSE));
    let (mut frozen, frozen_id) =
        spawn_waiter(&server, &name, RESPONSE, Duration::from_millis(100));
    let (mut next, next_id) = spawn_waiter(&server, &name, RESPONSE, NEXT_HOLD);

    let guard = parent.lock(&name).lock().unwrap();
    let mut held = Held::new("parent", guard, mono_ns());
    held.increment(&mut raw, &hist);
    let entry = queue_child(&mut frozen, &frozen_id, &mut raw, &name);
    assert!(
        entry.starts_with("d|"),
        "the waiter queued to be handed the lock outright: {entry:?}"
    );
    queue_child(&mut next, &next_id, &mut raw, &name);
    assert_eq!(
        queue_entries(&mut raw, &name).len(),
        2,
        "both waiters queued"
    );
    assert_eq!(
        entry_of(&queue_entries(&mut raw, &name)[..1], &frozen_id),
        Some(entry),
        "the frozen waiter is the head"
    );

    send_signal(frozen.pid(), "STOP");
    wait_stopped(frozen.pid());
    let unlocked_ns = held.finish(&mut raw, &hist);
    // Handed to the frozen process: one hold, the claim window as TTL.
    assert_eq!(
        hgetall(&mut raw, &name),
        HashMap::from([(frozen_id.clone(), "1".to_owned())]),
        "the release handed the lock to the frozen waiter"
    );
    let ttl = pttl(&mut raw, &name);
    assert!(
        ttl > 0 && ttl <= i64::try_from(CLAIM.as_millis()).unwrap(),
        "the handed hold's TTL is the claim window: {ttl} ms"
    );

    let next_ns = next_within(
        &next,
        (&mut raw, &name),
        unlocked_ns,
        bound,
        "frozen waiter",
        &format!("claim window {CLAIM:?}: the frozen waiter's handed hold stranded it"),
    );

    // Resumed while the next waiter holds the lock: the frozen waiter's
    // handoff is old news; it takes the lock only after the next one.
    send_signal(frozen.pid(), "CONT");
    let Some(frozen_ns) = acquired_within(&frozen, NEXT_HOLD + Duration::from_secs(10)) else {
        panic!(
            "the resumed waiter never got the lock; lock {:?}, queue {:?}; output:\n{}",
            hgetall(&mut raw, &name),
            queue_entries(&mut raw, &name),
            frozen.transcript()
        )
    };
    eprintln!(
        "frozen waiter: resumed, it got the lock {:.1} ms after the next waiter did",
        history::ms_between(next_ns, frozen_ns)
    );
    released_then_finish(next, "the next waiter");
    released_then_finish(frozen, "the frozen waiter");
    assert_nothing_left(&mut raw, &hist, &parent, &name, 3, "frozen waiter");
}

/// 2. A waiter process killed (SIGKILL) after it queued: its connections
///    are closed, so the release's PUBLISH to its client counts no
///    receiver and the release passes it over: the next waiter gets the
///    lock at once, well within the claim window.
#[test]
fn a_killed_waiter_is_passed_over_and_the_next_one_gets_the_lock_at_once() {
    // A long claim window (4 s), to tell "at once" from "after it".
    const RESPONSE: Duration = Duration::from_millis(2000);
    const CLAIM: Duration = Duration::from_millis(4000);
    let bound = CLAIM / 2;
    let Scene {
        server,
        name,
        hist,
        mut raw,
    } = Scene::start("killed");
    let parent = client_on(&server, Some(RESPONSE));
    let (mut dead, dead_id) = spawn_waiter(&server, &name, RESPONSE, Duration::from_millis(100));
    let (mut next, next_id) = spawn_waiter(&server, &name, RESPONSE, Duration::from_millis(100));

    let guard = parent.lock(&name).lock().unwrap();
    let mut held = Held::new("parent", guard, mono_ns());
    held.increment(&mut raw, &hist);
    let dead_entry = queue_child(&mut dead, &dead_id, &mut raw, &name);
    queue_child(&mut next, &next_id, &mut raw, &name);
    assert_eq!(
        entry_of(&queue_entries(&mut raw, &name)[..1], &dead_id),
        Some(dead_entry.clone()),
        "the waiter to be killed is the head"
    );
    dead.kill();
    // Its connections are closed by the kernel; the server notices.
    let dead_channel = names_of(&name).channel(client_of(&dead_id));
    wait_until(
        "the server dropped the dead waiter's subscription",
        Duration::from_secs(10),
        || numsub(&mut raw, &dead_channel) == 0,
    );
    assert_eq!(
        entry_of(&queue_entries(&mut raw, &name), &dead_id),
        Some(dead_entry),
        "the dead waiter is still queued (nobody removed it)"
    );

    let unlocked_ns = held.finish(&mut raw, &hist);
    // Asserted after the stall check, so that check is seen to fail too.
    let after_unlock = hgetall(&mut raw, &name);
    next_within(
        &next,
        (&mut raw, &name),
        unlocked_ns,
        bound,
        "killed waiter",
        &format!(
            "claim window {CLAIM:?}: the release did not pass over the dead waiter; \
             lock after the unlock {after_unlock:?}"
        ),
    );
    assert!(
        !after_unlock.contains_key(&dead_id),
        "the release handed the lock to the dead waiter: {after_unlock:?}"
    );
    released_then_finish(next, "the next waiter");
    drop(dead);
    // The dead waiter was taken off the queue, too.
    assert_nothing_left(&mut raw, &hist, &parent, &name, 2, "killed waiter");
}

/// 3. A waiter handed the lock outright gives up (its wait ended just as
///    the release handed it the lock): `ops::handoff::leave` with its
///    entry gives the handed hold up, so the lock is free at once, not
///    after the claim window (10 s here), and the next waiter, a process,
///    gets it at once. The state is built with the ops API, so the race is
///    exact: the release lands first, the leave right after.
#[test]
fn a_waiter_that_gives_up_just_as_it_is_handed_the_lock_frees_it_at_once() {
    const CLAIM_MS: i64 = 10_000;
    let bound = Duration::from_secs(3);
    let Scene {
        server,
        name,
        hist,
        mut raw,
    } = Scene::start("gave-up");
    let parent = client_on(&server, None);
    let store = parent.backend().as_ref();
    let queue = Queue::new(&name, CLAIM_MS, 16);
    let channel = keys::lock_channel(&name);
    let (holder, gone) = ("ops-holder:1", "ops-gone:1");
    let gone_entry = handoff::outright_entry(1, gone);

    ops_hold_and_queue(store, &name, &queue, holder, (gone, &gone_entry));
    // The waiter's client listens while its wait lasts.
    let mut listener = server.connection();
    let mut listening = listener.as_pubsub();
    listening.subscribe(queue.channel(client_of(gone))).unwrap();
    let (mut next, next_id) = spawn_waiter(
        &server,
        &name,
        Duration::from_secs(3),
        Duration::from_millis(100),
    );
    queue_child(&mut next, &next_id, &mut raw, &name);
    assert_eq!(queue_entries(&mut raw, &name)[0], gone_entry);

    let released = ops_release(store, &name, &queue, holder, "test");
    assert_eq!(released, Release::Transferred);
    assert_eq!(
        hgetall(&mut raw, &name),
        HashMap::from([(gone.to_owned(), "1".to_owned())]),
        "handed outright to the waiter"
    );
    // Its wait ends: it leaves, and gives the handed hold up.
    let gave_up = handoff::leave(store, &name, &channel, &queue, gone, Some(&gone_entry)).unwrap();
    let left_ns = mono_ns();
    // Asserted after the stall check, so that check is seen to fail too.
    let (lock_now, ttl_now) = (hgetall(&mut raw, &name), pttl(&mut raw, &name));
    drop(listening);

    let Some(next_ns) = acquired_within(&next, bound) else {
        panic!(
            "stall: the next waiter did not get the lock within {bound:?} of the give-up \
             (claim window {CLAIM_MS} ms); lock right after the give-up {lock_now:?} \
             (PTTL {ttl_now} ms), now {:?}, queue {:?}",
            hgetall(&mut raw, &name),
            queue_entries(&mut raw, &name)
        )
    };
    // The next waiter may hold it already (the leave's unlock message woke
    // it): only the gone waiter's hold must be gone.
    assert!(
        !lock_now.contains_key(gone),
        "stall: the hold handed to the waiter that gave up outlived it: lock {lock_now:?} \
         (PTTL {ttl_now} ms, the claim window {CLAIM_MS} ms)"
    );
    assert!(gave_up, "leave says it gave a hold up");
    let stall = history::ms_between(left_ns, next_ns);
    eprintln!(
        "gave up: the next waiter got the lock {stall:.1} ms after the handed waiter left \
         (claim window {CLAIM_MS} ms)"
    );
    released_then_finish(next, "the next waiter");
    assert_nothing_left(&mut raw, &hist, &parent, &name, 1, "gave up");
}

/// 3, for real: a waiter process whose `try_lock_for` wait ends just as
///    this process's release hands it the lock. Rounds sweep the unlock
///    across the end of the wait (from 40 ms before to 40 ms after), and the
///    waiter's leave is sent 30 ms late, so that in some rounds the release
///    lands between the end of the wait and the leave: the handed hold is
///    given up by the leave (`leave=1`). Every round, once both calls have
///    returned, the lock is free at once (a leave that failed, best effort,
///    may leave it held for the claim window, not longer), and the history
///    of every hold has no overlap and no lost update (a late handoff of
///    one round is no hold in the next).
#[test]
fn a_waiter_whose_wait_ends_as_it_is_handed_the_lock_leaves_nothing_held() {
    const RESPONSE: Duration = Duration::from_millis(2000);
    const CLAIM: Duration = Duration::from_millis(4000);
    const WAIT: Duration = Duration::from_millis(150);
    const MIN_ROUNDS: usize = 21;
    const MAX_ROUNDS: usize = 42;
    let Scene {
        server,
        name,
        hist,
        mut raw,
    } = Scene::start("race");
    let parent = client_on(&server, Some(RESPONSE));
    let (mut racer, racer_id) = spawn_ready(
        "racer",
        &server,
        &name,
        &[
            (RESPONSE_MS_ENV, ms(RESPONSE)),
            (HOLD_MS_ENV, ms(Duration::from_millis(20))),
            (HIST_ENV, hist_of(&name)),
            (LEAVE_DELAY_MS_ENV, ms(Duration::from_millis(30))),
        ],
    );
    let (mut acquired, mut gave_up, mut left_first, mut failed_leaves) = (0, 0, 0, 0);
    let mut parent_holds = 0;
    let mut rounds = 0;
    while rounds < MAX_ROUNDS && (rounds < MIN_ROUNDS || gave_up == 0) {
        // -40 ms ..= +40 ms around the end of the wait, 4 ms apart.
        let offset_ms = -40 + 4 * i64::try_from(rounds % 21).unwrap();
        rounds += 1;
        let guard = parent.lock(&name).lock().unwrap();
        let mut held = Held::new("parent", guard, mono_ns());
        parent_holds += 1;
        held.increment(&mut raw, &hist);
        racer.send(&format!("try {}", WAIT.as_millis()));
        let sent = Instant::now();
        // Its first attempt queued it; its wait ends WAIT after it began.
        while entry_of(&queue_entries(&mut raw, &name), &racer_id).is_none() {
            assert!(
                sent.elapsed() < READY_TIMEOUT,
                "round {rounds}: the racer never queued; output:\n{}",
                racer.transcript()
            );
            thread::sleep(Duration::from_millis(1));
        }
        let wait_ends = sent + WAIT;
        let unlock_at = if offset_ms < 0 {
            wait_ends.checked_sub(Duration::from_millis(offset_ms.unsigned_abs()))
        } else {
            wait_ends.checked_add(Duration::from_millis(offset_ms.unsigned_abs()))
        }
        .unwrap();
        thread::sleep(unlock_at.saturating_duration_since(Instant::now()));
        held.finish(&mut raw, &hist);
        let Some((which, rest)) =
            racer.first_line_of(&[ACQUIRED, TIMED_OUT], Duration::from_secs(10))
        else {
            panic!(
                "round {rounds}: the racer's try_lock_for({WAIT:?}) did not return; output:\n{}",
                racer.transcript()
            )
        };
        let leave_ok = if which == 0 {
            acquired += 1;
            racer.expect_line(RELEASED, Duration::from_secs(10));
            true
        } else {
            match rest.as_str() {
                "leave=1" => gave_up += 1,
                "leave=0" => left_first += 1,
                _ => failed_leaves += 1,
            }
            rest == "leave=1" || rest == "leave=0"
        };
        // Both calls have returned.
        let lock_now = hgetall(&mut raw, &name);
        if leave_ok {
            assert!(
                lock_now.is_empty(),
                "stranded: round {rounds} (unlock {offset_ms:+} ms from the end of the \
                 wait, racer {which_text}): the lock is still held after both calls \
                 returned: {lock_now:?} (PTTL {} ms, claim window {CLAIM:?})",
                pttl(&mut raw, &name),
                which_text = if which == 0 { "got it" } else { rest.as_str() }
            );
        } else {
            // Its leave failed (best effort): a hold handed to it runs
            // out with the claim window.
            let lock = parent.lock(&name);
            // (Each poll is a round trip: BEYOND_CLAIM allows one.)
            wait_until(
                "a hold left by a failed leave ran out within the claim window",
                CLAIM + BEYOND_CLAIM,
                || !lock.is_locked().unwrap(),
            );
        }
    }
    eprintln!(
        "race: {rounds} rounds: the racer got the lock in {acquired}, gave up a hold handed \
         to it as its wait ended in {gave_up}, left before the release in {left_first}, \
         its leave failed in {failed_leaves}"
    );
    assert!(
        gave_up >= 1,
        "the race never happened in {rounds} rounds (no leave gave up a handed hold): \
         got {acquired}, left first {left_first}, failed leaves {failed_leaves}"
    );
    finish_child(racer, "the racer");
    assert_nothing_left(
        &mut raw,
        &hist,
        &parent,
        &name,
        parent_holds + acquired,
        "race",
    );
}

/// 1, inside the waiter: a handoff that reaches the waiter in time but
///    runs out before the waiting thread can return it (here its retry's
///    reply is late, 1.5 s, past the 1 s claim window: a process starved or
///    frozen between the two does the same) is no hold: the waiter tries
///    instead, finds the lock taken by the next in line (which took it when
///    the claim window ended), and waits on; it never returns a guard for
///    a hold that had run out while another holds the lock.
#[test]
fn a_handoff_that_runs_out_before_the_waiter_returns_is_not_a_hold() {
    const RESPONSE: Duration = Duration::from_millis(500);
    const CLAIM: Duration = Duration::from_millis(1000);
    const LATE: Duration = Duration::from_millis(1500);
    const NEXT_HOLD: Duration = Duration::from_millis(2000);
    let Scene {
        server,
        name,
        hist,
        mut raw,
    } = Scene::start("ran-out");
    let client = || client_on(&server, Some(RESPONSE));
    let (holder, next) = (client(), client());
    let base = client();
    let slow = Slow::new(Arc::clone(base.backend()), Duration::ZERO);
    *slow.acquire_delay.lock().unwrap() = LATE;
    let waiter = Client::builder()
        .backend(Arc::clone(&slow) as Arc<dyn LockBackend>)
        .event_handler(Arc::new(NopEventHandler))
        .build()
        .unwrap();
    // A thread that waits for the lock, holds it `hold` (recording it),
    // and says its holder id first and when it got the lock.
    let spawn = |lock: redisync::Lock, who: &'static str, hold: Duration| {
        let (tx, rx) = mpsc::channel();
        let mut conn = server.connection();
        let hist = hist.clone();
        let handle = thread::spawn(move || {
            tx.send((lock.client().current_holder_id(), 0)).unwrap();
            let guard = lock.lock().unwrap();
            let enter_ns = mono_ns();
            tx.send((String::new(), enter_ns)).unwrap();
            let mut held = Held::new(who, guard, enter_ns);
            thread::sleep(hold / 2);
            held.increment(&mut conn, &hist);
            thread::sleep(hold / 2);
            held.finish(&mut conn, &hist);
        });
        let id = rx.recv_timeout(Duration::from_secs(5)).unwrap().0;
        (id, rx, handle)
    };

    let guard = holder.lock(&name).lock().unwrap();
    let mut held = Held::new("holder", guard, mono_ns());
    held.increment(&mut raw, &hist);
    let (waiter_id, waiter_rx, waiter_thread) =
        spawn(waiter.lock(&name), "waiter", Duration::from_millis(100));
    let waiter_channel = names_of(&name).channel(client_of(&waiter_id));
    wait_until(
        "the waiter queued, listens and retried",
        READY_TIMEOUT,
        || {
            entry_of(&queue_entries(&mut raw, &name), &waiter_id).is_some()
                && numsub(&mut raw, &waiter_channel) >= 1
                && slow.acquires.load(Ordering::SeqCst) >= 2
        },
    );
    let (next_id, next_rx, next_thread) = spawn(next.lock(&name), "next", NEXT_HOLD);
    wait_until("the next waiter queued", READY_TIMEOUT, || {
        entry_of(&queue_entries(&mut raw, &name), &next_id).is_some()
    });
    // Let both park after their retries.
    thread::sleep(Duration::from_millis(200));
    assert!(
        queue_entries(&mut raw, &name)[0].ends_with(&format!("|{waiter_id}")),
        "the waiter is the head, queued to be handed the lock outright: {:?}",
        queue_entries(&mut raw, &name)
    );

    // A wake makes the waiter retry; that retry's reply comes 1.5 s late.
    slow.late_acquires.store(1, Ordering::SeqCst);
    redis::cmd("PUBLISH")
        .arg(keys::lock_channel(&name))
        .arg("0")
        .query::<()>(&mut raw)
        .unwrap();
    wait_until("the waiter's late retry was sent", READY_TIMEOUT, || {
        slow.late_sent.load(Ordering::SeqCst) == 1
    });
    // Meanwhile the release hands the waiter the lock.
    let unlocked_ns = held.finish(&mut raw, &hist);
    assert_eq!(
        hgetall(&mut raw, &name),
        HashMap::from([(waiter_id, "1".to_owned())]),
        "handed to the waiter outright"
    );
    let next_ns = next_rx
        .recv_timeout(CLAIM + BEYOND_CLAIM)
        .expect("the next waiter got the lock when the claim window ended")
        .1;
    let stall = history::ms_between(unlocked_ns, next_ns);
    eprintln!("ran out: the next waiter got the lock {stall:.1} ms after the unlock");
    assert!(
        stall < (CLAIM + BEYOND_CLAIM).as_secs_f64() * 1e3,
        "the next waiter got the lock {stall:.1} ms after the unlock: more than the claim \
         window {CLAIM:?} and {BEYOND_CLAIM:?}"
    );
    let waiter_ns = waiter_rx
        .recv_timeout(LATE + NEXT_HOLD + Duration::from_secs(5))
        .expect("the waiter got the lock in the end")
        .1;
    eprintln!(
        "ran out: the waiter got the lock {:.1} ms after the next one did",
        history::ms_between(next_ns, waiter_ns)
    );
    next_thread.join().unwrap();
    waiter_thread.join().unwrap();
    hist.check(&mut raw, 3, "ran out");
    assert!(!holder.lock(&name).is_locked().unwrap());
    drop(base);
}

/// 4. A handoff message meant for an earlier wait of the same holder,
///    delivered late (a lagging subscriber), is not a hold: the process's
///    new wait treats it as a reservation, tries, finds the lock held by
///    this process, and keeps waiting; it gets the lock only when this
///    process unlocks. The message is a real one (the release script's,
///    for the earlier wait's entry, captured), delivered again verbatim,
///    dated within its claim window, so only the wait id tells it apart.
#[test]
fn a_late_handoff_for_an_earlier_wait_is_not_taken_as_a_hold() {
    const CLAIM_MS: i64 = 20_000;
    let Scene {
        server,
        name,
        hist,
        mut raw,
    } = Scene::start("late");
    let parent = client_on(&server, None);
    let store = parent.backend().as_ref();
    let queue = Queue::new(&name, CLAIM_MS, 16);
    let (mut waiter, waiter_id) = spawn_waiter(
        &server,
        &name,
        Duration::from_secs(3),
        Duration::from_millis(100),
    );
    let waiter_channel = queue.channel(client_of(&waiter_id));

    // The earlier wait: it queues while this process holds the lock, and
    // ends without it.
    let guard = parent.lock(&name).lock().unwrap();
    let mut held = Held::new("parent", guard, mono_ns());
    held.increment(&mut raw, &hist);
    waiter.send("try 1500");
    let mut earlier = None;
    wait_until("the earlier wait is queued", READY_TIMEOUT, || {
        earlier = entry_of(&queue_entries(&mut raw, &name), &waiter_id);
        earlier.is_some()
    });
    let earlier = earlier.unwrap();
    assert!(earlier.starts_with("d|"), "{earlier:?}");
    waiter.expect_line(TIMED_OUT, Duration::from_secs(10));
    held.finish(&mut raw, &hist);

    // A release hands the lock to the earlier wait's entry (as if its
    // leave had been lost): the message is captured; the holder releases
    // the handed hold.
    ops_hold_and_queue(store, &name, &queue, "ops-holder:1", (&waiter_id, &earlier));
    let mut capture = server.connection();
    let mut captured = capture.as_pubsub();
    captured.subscribe(&waiter_channel).unwrap();
    captured
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(
        ops_release(store, &name, &queue, "ops-holder:1", "test"),
        Release::Transferred
    );
    let message: String = captured.get_message().unwrap().get_payload().unwrap();
    drop(captured);
    let wait_of_earlier = earlier.split('|').nth(1).unwrap();
    assert!(
        message.starts_with("h:") && message.ends_with(&format!(":{wait_of_earlier}:{waiter_id}")),
        "a handoff message for the earlier wait: {message:?}"
    );
    assert_eq!(
        hgetall(&mut raw, &name),
        HashMap::from([(waiter_id.clone(), "1".to_owned())])
    );
    assert_eq!(
        ops_release(store, &name, &queue, &waiter_id, "test2"),
        Release::Released
    );

    // The new wait, while this process holds the lock again.
    let guard = parent.lock(&name).lock().unwrap();
    let mut held = Held::new("parent", guard, mono_ns());
    let entry = queue_child(&mut waiter, &waiter_id, &mut raw, &name);
    assert_ne!(entry, earlier, "a new wait id");
    // The late delivery of the earlier wait's handoff.
    let receivers: i64 = redis::cmd("PUBLISH")
        .arg(&waiter_channel)
        .arg(&message)
        .query(&mut raw)
        .unwrap();
    assert!(receivers >= 1, "the waiter's client listens");
    let early = acquired_within(&waiter, Duration::from_secs(1));
    assert!(
        early.is_none(),
        "overlap: the late handoff for the earlier wait ({message:?}) made the new wait \
         ({entry}) believe it held the lock while this process held it; lock {:?}",
        hgetall(&mut raw, &name)
    );
    assert_eq!(
        hgetall(&mut raw, &name),
        HashMap::from([(parent.current_holder_id(), "1".to_owned())]),
        "this process still holds the lock"
    );
    held.increment(&mut raw, &hist);
    let unlocked_ns = held.finish(&mut raw, &hist);
    let Some(waiter_ns) = acquired_within(&waiter, Duration::from_secs(5)) else {
        panic!(
            "the waiter did not get the lock after the unlock; lock {:?}, queue {:?}; output:\n{}",
            hgetall(&mut raw, &name),
            queue_entries(&mut raw, &name),
            waiter.transcript()
        )
    };
    eprintln!(
        "late handoff: the waiter got the lock {:.1} ms after the unlock",
        history::ms_between(unlocked_ns, waiter_ns)
    );
    released_then_finish(waiter, "the waiter");
    assert_nothing_left(&mut raw, &hist, &parent, &name, 3, "late handoff");
}
