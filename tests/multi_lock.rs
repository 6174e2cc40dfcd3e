//! Conformance suite for [`MultiLock`] and [`RedLock`].
//!
//! A `MultiLock` behaviour is written once, as a function of a [`Setup`],
//! and run by `multi_tests!` four ways: every part on one store (one client
//! per "process"), or each part on its own independent store (one client per
//! store per process), each on `MemoryBackend` and on real Redis. A RedLock
//! behaviour, and a MultiLock behaviour that needs a store to fail, is a
//! function of a [`StoreKind`] and builds the [`Independent`] stores it needs
//! (3 or 5), run on both kinds by `independent_tests!`.
//!
//! A set of clients stands for a process. Mutual exclusion is checked with
//! a counter per part incremented non-atomically inside the lock and an
//! "inside" flag per part that a second holder would find set. Timings use
//! short leases and generous upper bounds; lower bounds are tight where they
//! prove something.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::timing::{LONG_LEASE, PROMPT, STUCK};
use common::{Env, Independent, StoreKind, independent_tests, unique_name, wait_until};
use redisync::{Client, Error, Lock, MultiLock, RedLock};

/// How many parts a MultiLock has in most cases (and how many independent
/// stores the `stores_*` setups run).
const PARTS: usize = 3;
/// Upper bound for a call that must fail because a store is down: it may
/// wait out a connection timeout (300 ms) per unreachable part and retry a
/// release for up to ~2 s; it must not hang.
const FAILS_WITHIN: Duration = Duration::from_secs(8);
/// A short fixed lease.
const LEASE: Duration = Duration::from_millis(300);
/// Watchdog timeout of the clients of the watchdog cases: renewed every
/// 500 ms, so only a stall over ~1 s could lose a hold (a loaded two-vCPU
/// machine stalls a renewal for 400 ms now and then).
const WATCHDOG: Duration = Duration::from_millis(1500);
/// How long the contention cases may take in all before they are declared
/// deadlocked.
const CONTENTION_BUDGET: Duration = Duration::from_secs(45);

// ---------------------------------------------------------------------------
// Setups
// ---------------------------------------------------------------------------

/// Where a MultiLock's parts live.
enum Setup {
    /// Every part on one store; a process is one client.
    OneStore(Env),
    /// Part `i` on independent store `i`; a process is one client per store.
    Stores(Independent),
}

/// One "process": the client that holds each part.
struct Process {
    /// `clients[i]` holds part `i` (on one store, clones of one client).
    clients: Vec<Client>,
}

impl Setup {
    fn one_store_memory() -> Setup {
        Setup::OneStore(Env::memory())
    }

    fn one_store_redis() -> Setup {
        Setup::OneStore(Env::redis())
    }

    fn stores_memory() -> Setup {
        Setup::Stores(Independent::memory(PARTS))
    }

    fn stores_redis() -> Setup {
        Setup::Stores(Independent::redis(PARTS))
    }

    /// A new process (new clients) with the default watchdog timeout.
    fn process(&self) -> Process {
        match self {
            Setup::OneStore(env) => Process {
                clients: vec![env.client(); PARTS],
            },
            Setup::Stores(stores) => Process {
                clients: stores.clients(),
            },
        }
    }

    /// Stores a plain string at `key` on part `part`'s store.
    fn set_string(&self, part: usize, key: &str) {
        match self {
            Setup::OneStore(env) => env.set_string(key, "not a lock"),
            Setup::Stores(stores) => stores.set_string(part, key, "not a lock"),
        }
    }
}

impl Process {
    /// Part `part`'s lock named `name`, on this process's client for it.
    fn lock(&self, part: usize, name: &str) -> Lock {
        self.clients[part].lock(name)
    }

    /// A MultiLock over `names`, part `i` named `names[i]`.
    fn multi(&self, names: &[String]) -> MultiLock {
        let order: Vec<usize> = (0..names.len()).collect();
        self.multi_in_order(names, &order)
    }

    /// A MultiLock over the same parts as [`multi`](Self::multi), listed in
    /// `order` (part `i` stays on its own store).
    fn multi_in_order(&self, names: &[String], order: &[usize]) -> MultiLock {
        MultiLock::new(order.iter().map(|&part| self.lock(part, &names[part])))
            .expect("MultiLock::new")
    }

    /// Whether each of `names` is locked (by anyone).
    fn locked(&self, names: &[String]) -> Vec<bool> {
        self.ask_each(names, Lock::is_locked)
    }

    /// Whether each of `names` is held by the calling thread of this process.
    fn held_here(&self, names: &[String]) -> Vec<bool> {
        self.ask_each(names, Lock::is_held_by_current_thread)
    }

    /// `ask` of each part `i`'s lock named `names[i]`.
    fn ask_each(
        &self,
        names: &[String],
        ask: impl Fn(&Lock) -> redisync::Result<bool>,
    ) -> Vec<bool> {
        names
            .iter()
            .enumerate()
            .map(|(part, name)| ask(&self.lock(part, name)).unwrap())
            .collect()
    }
}

/// `n` unique lock names.
fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| unique_name(&format!("{prefix}:{i}")))
        .collect()
}

/// One `#[test]` per MultiLock behaviour and setup.
macro_rules! multi_tests {
    ($($name:ident),* $(,)?) => {
        mod one_store_memory {
            $( #[test] fn $name() { super::$name(&super::Setup::one_store_memory()); } )*
        }
        mod one_store_redis {
            $( #[test] fn $name() { super::$name(&super::Setup::one_store_redis()); } )*
        }
        mod stores_memory {
            $( #[test] fn $name() { super::$name(&super::Setup::stores_memory()); } )*
        }
        mod stores_redis {
            $( #[test] fn $name() { super::$name(&super::Setup::stores_redis()); } )*
        }
    };
}

multi_tests!(
    lock_and_unlock_hold_and_release_every_part,
    try_lock_holds_nothing_when_a_part_is_held_elsewhere,
    try_lock_for_times_out_holding_nothing,
    a_waiter_is_woken_when_the_blocking_part_is_released,
    fixed_leases_expire_by_themselves,
    dropping_the_guard_releases_every_part,
    unlock_reports_a_force_unlocked_part_and_releases_the_others,
    a_thread_holding_a_part_can_take_the_multi_lock,
    all_or_nothing_under_contention_in_any_order,
    multi_lock_and_single_lock_users_exclude_each_other,
    parts_of_any_kind,
    bad_arguments_are_invalid_argument,
    a_part_with_an_empty_name_is_invalid_argument,
    a_part_holding_another_type_is_a_protocol_error,
);

independent_tests!(
    multi_lock_store_down_is_a_prompt_error_holding_nothing,
    redlock_acquires_with_every_store_up,
    redlock_acquires_with_a_minority_down,
    redlock_with_a_majority_down_is_an_error_not_a_hang,
    redlock_unlock_succeeds_with_a_server_killed_while_held,
    competing_redlock_users_exclude_each_other,
    a_majority_held_elsewhere_keeps_redlock_out,
    redlock_fixed_lease_is_lost_when_it_ends,
    redlock_counts_only_leases_that_outlive_the_drift_allowance,
    redlock_watchdog_keeps_it_until_a_majority_stops,
    redlock_rejects_bad_arguments,
    redlock_parts_with_an_empty_name_are_invalid_argument,
);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// True for [`Error::Backend`] (the crate has no predicate for it).
fn is_backend(err: &Error) -> bool {
    matches!(err, Error::Backend { .. })
}

/// A non-atomic counter and an "inside" flag per part, shared by the
/// threads of a contention case.
struct Parts {
    inside: Vec<AtomicBool>,
    counters: Vec<AtomicU64>,
}

impl Parts {
    fn new(n: usize) -> Arc<Parts> {
        Arc::new(Parts {
            inside: (0..n).map(|_| AtomicBool::new(false)).collect(),
            counters: (0..n).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// The critical section over `parts`: claims each, increments each
    /// counter non-atomically (a second holder inside makes an update get
    /// lost), then leaves.
    fn critical_section(&self, parts: &[usize], who: &str) {
        for &part in parts {
            assert!(
                !self.inside[part].swap(true, Ordering::SeqCst),
                "{who}: another holder is inside part {part}"
            );
        }
        for &part in parts {
            let value = self.counters[part].load(Ordering::SeqCst);
            thread::yield_now();
            self.counters[part].store(value + 1, Ordering::SeqCst);
        }
        for &part in parts {
            self.inside[part].store(false, Ordering::SeqCst);
        }
    }

    fn counts(&self) -> Vec<u64> {
        self.counters
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .collect()
    }
}

/// Runs each of `workers` on its own thread, all started together, each
/// calling its closure `iterations` times with the iteration number. Waits
/// for every worker to finish within [`CONTENTION_BUDGET`] (a deadlock
/// fails the test instead of hanging it), then joins them, re-raising a
/// worker's panic.
fn contend<W>(parts: &Parts, iterations: usize, workers: Vec<W>)
where
    W: FnMut(usize) + Send + 'static,
{
    let budget = CONTENTION_BUDGET;
    let start = Arc::new(Barrier::new(workers.len()));
    let (done_tx, done) = mpsc::channel();
    let workers: Vec<_> = workers
        .into_iter()
        .map(|mut work| {
            let (start, done) = (Arc::clone(&start), done_tx.clone());
            thread::spawn(move || {
                start.wait();
                for iteration in 0..iterations {
                    work(iteration);
                }
                done.send(()).unwrap();
            })
        })
        .collect();
    drop(done_tx);
    let deadline = Instant::now() + budget;
    let total = workers.len();
    for finished in 0..total {
        match done.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(()) => {}
            Err(RecvTimeoutError::Timeout) => panic!(
                "only {finished} of {total} workers finished within {budget:?} (deadlock or \
                 livelock?); counters: {:?}",
                parts.counts()
            ),
            // Every sender is gone: a worker panicked; join to show why.
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    for worker in workers {
        if let Err(panic) = worker.join() {
            std::panic::resume_unwind(panic);
        }
    }
}

/// Another process's thread that holds some locks for a while, then
/// releases them, for a waiter to be woken by the release.
struct Holder {
    released: mpsc::Receiver<Instant>,
    thread: thread::JoinHandle<()>,
}

impl Holder {
    /// Takes every one of `locks` (with [`LONG_LEASE`]) on another thread
    /// and returns once they are held; the thread releases them `hold`
    /// later.
    fn start(locks: Vec<Lock>, hold: Duration) -> Holder {
        let (held_tx, held) = mpsc::channel();
        let (released_tx, released) = mpsc::channel();
        let thread = thread::spawn(move || {
            let guards: Vec<_> = locks
                .iter()
                .map(|l| l.lock_with_lease(LONG_LEASE).unwrap())
                .collect();
            held_tx.send(()).unwrap();
            thread::sleep(hold);
            released_tx.send(Instant::now()).unwrap();
            for guard in guards {
                guard.unlock().unwrap();
            }
        });
        held.recv_timeout(STUCK).expect("the holder took its locks");
        Holder { released, thread }
    }

    /// Checks that a waiter that got in at `got` was woken by the release,
    /// promptly (not by polling), and joins the holder's thread.
    fn woke(self, got: Instant, what: &str) {
        let released = self
            .released
            .recv_timeout(STUCK)
            .expect("the holder's report");
        assert!(got >= released, "{what}: got in before the holder released");
        let after = got.duration_since(released);
        assert!(
            after < PROMPT,
            "{what}: got in {after:?} after the holder released (woken by polling, not by \
             the unlock?)"
        );
        self.thread.join().unwrap();
    }
}

/// Runs `f` on another thread and returns its result and how long it
/// took; panics once it has taken longer than `budget`, so a hang fails the
/// test instead of stalling it (the stuck thread is left behind).
fn bounded<T: Send + 'static>(
    what: &str,
    budget: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    let worker = thread::spawn(move || {
        let value = f();
        let _ = tx.send((value, started.elapsed()));
    });
    match rx.recv_timeout(budget) {
        Ok(outcome) => {
            worker.join().unwrap();
            outcome
        }
        Err(RecvTimeoutError::Timeout) => panic!("{what}: still blocked after {budget:?}"),
        Err(RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => panic!("{what}: the worker ended without a result"),
        },
    }
}

/// Runs `f` and returns its result and how long it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let value = f();
    (value, started.elapsed())
}

/// The ways to take a [`MultiLock`] or a [`RedLock`] that a case with a
/// store down calls.
const TAKES: [&str; 4] = ["lock", "try_lock", "try_lock_for", "lock_with_lease"];

/// What [`MultiLock`] and [`RedLock`] share, for the cases that call both.
trait Take: Clone + Send + 'static {
    /// Takes it the way `how` (one of [`TAKES`]) says, `try_lock_for`
    /// waiting `wait`, `lock_with_lease` with [`LONG_LEASE`]; whether it
    /// got it (the guard is dropped).
    fn take(&self, how: &str, wait: Duration) -> redisync::Result<bool>;
}

macro_rules! impl_take {
    ($($lock:ty),*) => {
        $(
            impl Take for $lock {
                fn take(&self, how: &str, wait: Duration) -> redisync::Result<bool> {
                    match how {
                        "lock" => self.lock().map(|_| true),
                        "try_lock" => self.try_lock().map(|g| g.is_some()),
                        "try_lock_for" => self.try_lock_for(wait).map(|g| g.is_some()),
                        "lock_with_lease" => self.lock_with_lease(LONG_LEASE).map(|_| true),
                        other => panic!("no way to take a lock called {other:?}"),
                    }
                }
            }
        )*
    };
}
impl_take!(MultiLock, RedLock);

/// `lock()` on `lock`, on another thread (see [`bounded`]), which must
/// fail: its error and how long it took.
fn lock_fails<L: Take>(what: &str, lock: L) -> (Error, Duration) {
    let (result, took) = bounded(what, FAILS_WITHIN, move || lock.take("lock", PROMPT));
    match result {
        Ok(got) => panic!("{what}: returned Ok (got: {got})"),
        Err(err) => (err, took),
    }
}

/// Every way of [`TAKES`] to take `lock` (which cannot reach what it
/// needs), each on another thread: each must fail within [`FAILS_WITHIN`]
/// with a connection [`Error::Backend`], which `check` then gets with what
/// was called. `label` says which case it is.
fn every_take_fails<L: Take>(
    lock: &L,
    wait: Duration,
    label: &str,
    mut check: impl FnMut(&str, &Error),
) {
    for how in TAKES {
        let lock = lock.clone();
        let (result, took) = bounded(&format!("{label}: {how}"), FAILS_WITHIN, move || {
            lock.take(how, wait)
        });
        let err = match result {
            Ok(got) => panic!("{label}: {how} returned Ok (got: {got})"),
            Err(err) => err,
        };
        assert!(took < FAILS_WITHIN, "{label}: {how} took {took:?} to fail");
        assert!(
            is_backend(&err),
            "{label}: {how}: expected Backend, got {err:?}"
        );
        assert!(err.is_connection_error(), "{label}: {how}: {err:?}");
        check(how, &err);
    }
}

// ---------------------------------------------------------------------------
// MultiLock
// ---------------------------------------------------------------------------

fn lock_and_unlock_hold_and_release_every_part(setup: &Setup) {
    let names = names("multi:basic", PARTS);
    let process = setup.process();
    let observer = setup.process();
    let multi = process.multi(&names);
    let listed: Vec<&str> = multi.locks().iter().map(Lock::name).collect();
    assert_eq!(listed, names.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(observer.locked(&names), [false; PARTS]);

    for take in ["lock", "try_lock", "try_lock_for"] {
        let guard = match take {
            "lock" => multi.lock().unwrap(),
            "try_lock" => multi.try_lock().unwrap().expect("every part is free"),
            _ => multi
                .try_lock_for(PROMPT)
                .unwrap()
                .expect("every part is free"),
        };
        assert_eq!(observer.locked(&names), [true; PARTS], "{take}");
        assert_eq!(process.held_here(&names), [true; PARTS], "{take}");
        assert!(!guard.is_lost());
        let guarded: Vec<&str> = guard.guards().iter().map(|g| g.lock().name()).collect();
        assert_eq!(guarded, listed, "{take}: guards() in the parts' order");
        // Held parts are watchdog leases: each has a TTL, none a token.
        for (part, name) in names.iter().enumerate() {
            let ttl = observer.lock(part, name).remaining_ttl().unwrap();
            assert!(ttl.is_some(), "{take}: part {part} has no TTL");
        }
        assert!(guard.guards().iter().all(|g| g.token().is_none()));
        // Another process can take none of them.
        for (part, name) in names.iter().enumerate() {
            assert!(
                observer.lock(part, name).try_lock().unwrap().is_none(),
                "{take}: another process took part {part} of a held MultiLock"
            );
        }
        assert!(observer.multi(&names).try_lock().unwrap().is_none());

        guard.unlock().unwrap();
        assert_eq!(
            observer.locked(&names),
            [false; PARTS],
            "{take}: after unlock"
        );
        assert_eq!(process.held_here(&names), [false; PARTS]);
    }
    // Free again for another process.
    let guard = observer.multi(&names).try_lock().unwrap().expect("free");
    assert_eq!(process.locked(&names), [true; PARTS]);
    guard.unlock().unwrap();
}

fn try_lock_holds_nothing_when_a_part_is_held_elsewhere(setup: &Setup) {
    let process = setup.process();
    let other = setup.process();
    let observer = setup.process();
    // The held part first, in the middle and last: a round that took parts
    // before it must give them back.
    for held in 0..PARTS {
        let names = names("multi:try", PARTS);
        let multi = process.multi(&names);
        let blocker = other
            .lock(held, &names[held])
            .lock_with_lease(LONG_LEASE)
            .unwrap();

        let (got, took) = timed(|| multi.try_lock().unwrap());
        assert!(
            got.is_none(),
            "try_lock took a MultiLock whose part {held} is held"
        );
        assert!(took < PROMPT, "try_lock waited {took:?}");
        let mut expected = [false; PARTS];
        expected[held] = true;
        assert_eq!(
            observer.locked(&names),
            expected,
            "try_lock left parts held (part {held} held elsewhere)"
        );
        assert_eq!(process.held_here(&names), [false; PARTS]);

        // With a fixed lease too.
        let got = multi
            .try_lock_for_with_lease(Duration::ZERO, LONG_LEASE)
            .unwrap();
        assert!(got.is_none());
        assert_eq!(observer.locked(&names), expected);

        blocker.unlock().unwrap();
        let guard = multi.try_lock().unwrap().expect("every part is free now");
        assert_eq!(observer.locked(&names), [true; PARTS]);
        guard.unlock().unwrap();
    }
}

fn try_lock_for_times_out_holding_nothing(setup: &Setup) {
    const WAIT: Duration = Duration::from_millis(400);
    let names = names("multi:try-for", PARTS);
    let process = setup.process();
    let other = setup.process();
    let multi = process.multi(&names);
    let blocker = other
        .lock(2, &names[2])
        .lock_with_lease(LONG_LEASE)
        .unwrap();

    let (got, took) = timed(|| multi.try_lock_for(WAIT).unwrap());
    assert!(
        got.is_none(),
        "try_lock_for took a MultiLock with a held part"
    );
    assert!(
        took >= WAIT,
        "try_lock_for({WAIT:?}) gave up after {took:?}"
    );
    assert!(
        took < WAIT + PROMPT * 2,
        "try_lock_for({WAIT:?}) returned after {took:?}"
    );
    assert_eq!(other.locked(&names), [false, false, true]);

    let (got, took) = timed(|| multi.try_lock_for_with_lease(WAIT, LONG_LEASE).unwrap());
    assert!(got.is_none());
    assert!(took >= WAIT, "gave up after {took:?}");
    assert!(took < WAIT + PROMPT * 2, "returned after {took:?}");
    assert_eq!(other.locked(&names), [false, false, true]);
    assert_eq!(process.held_here(&names), [false; PARTS]);

    // The held part is still the other process's.
    assert_eq!(other.held_here(&names), [false, false, true]);
    blocker.unlock().unwrap();
    assert_eq!(other.locked(&names), [false; PARTS]);
}

fn a_waiter_is_woken_when_the_blocking_part_is_released(setup: &Setup) {
    const HOLD: Duration = Duration::from_millis(300);
    let process = setup.process();
    let multi_names = names("multi:wake", PARTS);
    for how in ["try_lock_for", "lock", "try_lock_for_with_lease"] {
        let names: Vec<String> = multi_names.iter().map(|n| format!("{n}:{how}")).collect();
        let multi = process.multi(&names);
        // Another process holds the middle part, in a thread that releases
        // it HOLD after taking it.
        let holder = Holder::start(vec![setup.process().lock(1, &names[1])], HOLD);
        let started = Instant::now();
        let guard = match how {
            "try_lock_for" => multi.try_lock_for(STUCK).unwrap(),
            "lock" => Some(multi.lock().unwrap()),
            _ => multi.try_lock_for_with_lease(STUCK, LONG_LEASE).unwrap(),
        };
        let got = Instant::now();
        let guard = guard.unwrap_or_else(|| panic!("{how}: timed out after {STUCK:?}"));
        holder.woke(got, how);
        assert!(
            got.duration_since(started) >= HOLD - Duration::from_millis(100),
            "{how}: returned after only {:?}",
            got.duration_since(started)
        );
        assert_eq!(process.held_here(&names), [true; PARTS], "{how}");
        guard.unlock().unwrap();
        assert_eq!(process.locked(&names), [false; PARTS], "{how}");
    }
}

fn fixed_leases_expire_by_themselves(setup: &Setup) {
    let process = setup.process();
    let observer = setup.process();
    for how in ["lock_with_lease", "try_lock_for_with_lease"] {
        let names = names("multi:lease", PARTS);
        let multi = process.multi(&names);
        let started = Instant::now();
        let guard = match how {
            "lock_with_lease" => multi.lock_with_lease(LEASE).unwrap(),
            _ => multi
                .try_lock_for_with_lease(PROMPT, LEASE)
                .unwrap()
                .expect("every part is free"),
        };
        assert!(!guard.is_lost(), "{how}: a fresh hold reported lost");
        for (part, name) in names.iter().enumerate() {
            let ttl = observer
                .lock(part, name)
                .remaining_ttl()
                .unwrap()
                .unwrap_or_else(|| panic!("{how}: part {part} has no TTL"));
            assert!(
                ttl <= LEASE,
                "{how}: part {part}'s TTL {ttl:?} exceeds the lease"
            );
        }
        assert_eq!(observer.locked(&names), [true; PARTS]);

        // Nothing renews them: every part frees itself when its lease ends.
        wait_until(&format!("{how}: the parts expire"), STUCK, || {
            observer.locked(&names) == [false; PARTS]
        });
        let freed = started.elapsed();
        assert!(
            freed >= LEASE - Duration::from_millis(10),
            "{how}: a {LEASE:?} lease ended after only {freed:?}"
        );
        assert!(
            freed < LEASE + PROMPT,
            "{how}: a {LEASE:?} lease ended only after {freed:?} (renewed?)"
        );
        assert!(
            guard.is_lost(),
            "{how}: expired parts, yet is_lost() is false"
        );
        let err = guard.unlock().unwrap_err();
        assert!(err.is_not_held(), "{how}: expected NotHeld, got {err:?}");
        // Another process takes them at once.
        let other = observer.multi(&names).try_lock().unwrap();
        assert!(other.is_some(), "{how}: the expired parts are not free");
    }
}

fn dropping_the_guard_releases_every_part(setup: &Setup) {
    let names = names("multi:drop", PARTS);
    let process = setup.process();
    let observer = setup.process();
    let multi = process.multi(&names);
    {
        let _guard = multi.lock().unwrap();
        assert_eq!(observer.locked(&names), [true; PARTS]);
    }
    assert_eq!(
        observer.locked(&names),
        [false; PARTS],
        "watchdog hold, dropped"
    );
    {
        let _guard = multi.lock_with_lease(LONG_LEASE).unwrap();
        assert_eq!(observer.locked(&names), [true; PARTS]);
    }
    assert_eq!(
        observer.locked(&names),
        [false; PARTS],
        "fixed lease, dropped"
    );
    // A guard returned from a function releases where it is finally dropped.
    let make = || multi.lock().unwrap();
    let guard = make();
    assert_eq!(observer.locked(&names), [true; PARTS]);
    drop(guard);
    assert_eq!(observer.locked(&names), [false; PARTS]);
}

fn unlock_reports_a_force_unlocked_part_and_releases_the_others(setup: &Setup) {
    let names = names("multi:force", PARTS);
    let process = setup.process();
    let other = setup.process();
    let multi = process.multi(&names);

    let guard = multi.lock().unwrap();
    assert!(other.lock(1, &names[1]).force_unlock().unwrap());
    assert_eq!(other.locked(&names), [true, false, true]);
    let err = guard.unlock().unwrap_err();
    assert!(err.is_not_held(), "expected NotHeld, got {err:?}");
    assert!(err.to_string().contains(&names[1]), "{err}");
    assert_eq!(
        other.locked(&names),
        [false; PARTS],
        "the parts still held were not released"
    );

    // Force-unlocked and re-taken by another process: the unlock does not
    // release that process's hold.
    let guard = multi.lock().unwrap();
    assert!(other.lock(0, &names[0]).force_unlock().unwrap());
    let retaken = other
        .lock(0, &names[0])
        .try_lock()
        .unwrap()
        .expect("free after force");
    let err = guard.unlock().unwrap_err();
    assert!(err.is_not_held(), "expected NotHeld, got {err:?}");
    assert_eq!(other.locked(&names), [true, false, false]);
    assert_eq!(other.held_here(&names), [true, false, false]);
    retaken.unlock().unwrap();

    // Dropping such a guard also releases the others.
    {
        let _guard = multi.lock().unwrap();
        assert!(other.lock(2, &names[2]).force_unlock().unwrap());
    }
    assert_eq!(other.locked(&names), [false; PARTS]);
}

fn a_thread_holding_a_part_can_take_the_multi_lock(setup: &Setup) {
    let names = names("multi:reentrant", PARTS);
    let process = setup.process();
    let observer = setup.process();
    let single = process.lock(0, &names[0]);
    let outer = single.lock().unwrap();
    let multi = process.multi(&names);

    let guard = multi
        .try_lock()
        .unwrap()
        .expect("the thread holding part 0 could not take the MultiLock");
    assert_eq!(single.hold_count().unwrap(), 2);
    assert_eq!(process.held_here(&names), [true; PARTS]);
    // Another thread of the same process is another holder.
    let other_thread = process.multi(&names);
    let taken = thread::spawn(move || other_thread.try_lock().unwrap().is_some())
        .join()
        .unwrap();
    assert!(
        !taken,
        "another thread took the MultiLock this thread holds"
    );

    guard.unlock().unwrap();
    assert_eq!(
        single.hold_count().unwrap(),
        1,
        "the MultiLock released the outer hold"
    );
    assert_eq!(observer.locked(&names), [true, false, false]);
    // And with lock() (which waits) as well, and nested twice.
    let first = multi.lock().unwrap();
    let second = multi.lock().unwrap();
    assert_eq!(single.hold_count().unwrap(), 3);
    assert_eq!(process.lock(2, &names[2]).hold_count().unwrap(), 2);
    drop(second);
    drop(first);
    assert_eq!(observer.locked(&names), [true, false, false]);
    outer.unlock().unwrap();
    assert_eq!(observer.locked(&names), [false; PARTS]);
}

fn all_or_nothing_under_contention_in_any_order(setup: &Setup) {
    const ITERATIONS: usize = 50;
    // Threads take the same parts in different orders: a MultiLock that
    // waited while holding a part would deadlock here.
    const ORDERS: [[usize; PARTS]; 4] = [[0, 1, 2], [2, 1, 0], [1, 2, 0], [0, 2, 1]];
    let names = names("multi:contention", PARTS);
    let processes = [setup.process(), setup.process()];
    let parts = Parts::new(PARTS);
    let workers = ORDERS
        .iter()
        .enumerate()
        .map(|(worker, order)| {
            let multi = processes[worker % 2].multi_in_order(&names, order);
            let (parts, order) = (Arc::clone(&parts), *order);
            move |iteration| {
                let guard = multi.lock().expect("lock()");
                parts
                    .critical_section(&order, &format!("worker {worker} ({order:?}) #{iteration}"));
                guard.unlock().expect("unlock()");
            }
        })
        .collect();
    contend(&parts, ITERATIONS, workers);
    assert_eq!(parts.counts(), [(ORDERS.len() * ITERATIONS) as u64; PARTS]);
    assert_eq!(processes[0].locked(&names), [false; PARTS]);
}

fn multi_lock_and_single_lock_users_exclude_each_other(setup: &Setup) {
    const ITERATIONS: usize = 40;
    let names = names("multi:mixed", 2);
    let processes = [setup.process(), setup.process()];
    let parts = Parts::new(2);
    // Two MultiLock users (in both orders) and a single-lock user per part.
    let users: [(usize, Vec<usize>); 4] =
        [(0, vec![0, 1]), (1, vec![1, 0]), (1, vec![0]), (0, vec![1])];
    let workers = users
        .into_iter()
        .enumerate()
        .map(|(worker, (process, order))| {
            let process = &processes[process];
            let multi = (order.len() > 1).then(|| process.multi_in_order(&names, &order));
            let single = process.lock(order[0], &names[order[0]]);
            let parts = Arc::clone(&parts);
            move |iteration| {
                let who = format!("worker {worker} ({order:?}) #{iteration}");
                match &multi {
                    Some(multi) => {
                        let guard = multi.lock().expect("MultiLock::lock()");
                        parts.critical_section(&order, &who);
                        guard.unlock().expect("MultiLock unlock()");
                    }
                    None => {
                        let guard = single.lock().expect("Lock::lock()");
                        parts.critical_section(&order, &who);
                        guard.unlock().expect("Lock unlock()");
                    }
                }
            }
        })
        .collect();
    contend(&parts, ITERATIONS, workers);
    assert_eq!(parts.counts(), [3 * ITERATIONS as u64; 2]);
    assert_eq!(processes[0].locked(&names), [false; 2]);
}

fn parts_of_any_kind(setup: &Setup) {
    let names = names("multi:kinds", PARTS);
    let process = setup.process();
    let other = setup.process();
    let build = |p: &Process| {
        MultiLock::new([
            p.clients[0].fenced_lock(names[0].as_str()),
            p.clients[1].fair_lock(names[1].as_str()),
            p.clients[2].read_write_lock(names[2].as_str()).write_lock(),
        ])
        .unwrap()
    };
    let multi = build(&process);
    let guard = multi.lock().unwrap();
    let tokens: Vec<Option<u64>> = guard.guards().iter().map(|g| g.token()).collect();
    assert!(tokens[0].is_some(), "the fenced part has no token");
    assert_eq!(tokens[1..], [None, None]);
    // Every part excludes another process, whatever its kind.
    assert!(
        other.clients[0]
            .fenced_lock(names[0].as_str())
            .try_lock()
            .unwrap()
            .is_none()
    );
    assert!(
        other.clients[1]
            .fair_lock(names[1].as_str())
            .try_lock()
            .unwrap()
            .is_none()
    );
    let rw = other.clients[2].read_write_lock(names[2].as_str());
    assert!(rw.read_lock().try_lock().unwrap().is_none());
    assert!(build(&other).try_lock().unwrap().is_none());
    guard.unlock().unwrap();

    // Free again, and the next acquisition gets a higher token.
    let again = build(&other)
        .try_lock()
        .unwrap()
        .expect("free after unlock");
    assert!(again.guards()[0].token() > tokens[0]);
    again.unlock().unwrap();

    // Read parts are shared: two processes hold a MultiLock of read locks
    // at once, and a writer is kept out.
    let readers = |p: &Process| {
        MultiLock::new((0..2).map(|i| p.clients[i].read_write_lock(names[i].as_str()).read_lock()))
            .unwrap()
    };
    let third = setup.process();
    let first = readers(&process).try_lock().unwrap().expect("first reader");
    let second = readers(&other)
        .try_lock()
        .unwrap()
        .expect("a second reader");
    let writer = MultiLock::new([third.clients[1]
        .read_write_lock(names[1].as_str())
        .write_lock()])
    .unwrap();
    assert!(
        writer.try_lock().unwrap().is_none(),
        "a writer got in with readers"
    );
    first.unlock().unwrap();
    assert!(
        writer.try_lock().unwrap().is_none(),
        "a writer got in with a reader"
    );
    second.unlock().unwrap();
    writer
        .try_lock()
        .unwrap()
        .expect("free after the readers")
        .unlock()
        .unwrap();
}

fn bad_arguments_are_invalid_argument(setup: &Setup) {
    let err = MultiLock::new(Vec::new()).unwrap_err();
    assert!(
        err.is_invalid_argument(),
        "expected InvalidArgument, got {err:?}"
    );
    assert!(err.to_string().contains("at least one"), "{err}");

    let names = names("multi:bad", PARTS);
    let process = setup.process();
    let observer = setup.process();
    let multi = process.multi(&names);
    for lease in [Duration::ZERO, Duration::from_micros(500)] {
        let err = multi.lock_with_lease(lease).unwrap_err();
        assert!(err.is_invalid_argument(), "lease {lease:?}: got {err:?}");
        assert!(err.to_string().contains("lease"), "{err}");
        let err = multi.try_lock_for_with_lease(PROMPT, lease).unwrap_err();
        assert!(err.is_invalid_argument(), "lease {lease:?}: got {err:?}");
    }
    assert_eq!(observer.locked(&names), [false; PARTS]);
}

/// A part with an empty name is `InvalidArgument`, as `Lock::lock` returns
/// it (only store failures are wrapped as `Backend`).
fn a_part_with_an_empty_name_is_invalid_argument(setup: &Setup) {
    let names = names("multi:empty-name", PARTS);
    let process = setup.process();
    let observer = setup.process();
    // Before or after parts that were taken; none of them stays held.
    for empty in [0, PARTS - 1] {
        let multi = MultiLock::new((0..PARTS).map(|part| {
            let name = if part == empty {
                ""
            } else {
                names[part].as_str()
            };
            process.lock(part, name)
        }))
        .unwrap();
        let (err, _) = lock_fails("lock() with an empty part name", multi);
        assert!(
            err.is_invalid_argument(),
            "part {empty} has an empty name: expected InvalidArgument, got {err:?} ({err})"
        );
        assert_eq!(observer.locked(&names), [false; PARTS]);
    }
}

/// A part whose key holds another type is `Protocol`, as `Lock::lock`
/// returns it; the parts taken before it are given back.
fn a_part_holding_another_type_is_a_protocol_error(setup: &Setup) {
    let names = names("multi:wrongtype", PARTS);
    let process = setup.process();
    let observer = setup.process();
    setup.set_string(2, &names[2]);
    let multi = process.multi(&names);
    let (err, took) = lock_fails("lock() with a part of another type", multi);
    assert!(took < FAILS_WITHIN, "took {took:?}");
    // Parts 0 and 1 were taken first: they must have been given back.
    let free: Vec<bool> = (0..2)
        .map(|part| !observer.lock(part, &names[part]).is_locked().unwrap())
        .collect();
    assert_eq!(free, [true, true], "parts stayed held after the error");
    assert!(
        err.is_protocol_error(),
        "a part whose key holds a string: expected the documented Protocol error, got \
         {err:?} ({err})"
    );
}

fn multi_lock_store_down_is_a_prompt_error_holding_nothing(kind: StoreKind) {
    let stores = Independent::new(kind, PARTS);
    for down in 0..PARTS {
        let names = names("multi:store-down", PARTS);
        // Clients are built while every store is up.
        let process = Process {
            clients: stores.clients(),
        };
        let observer = Process {
            clients: stores.clients(),
        };
        let multi = process.multi(&names);
        stores.down(down);
        let label = format!("store {down} down");
        every_take_fails(&multi, PROMPT, &label, |what, err| {
            let message = err.to_string();
            assert!(
                message.contains("MultiLock") && message.contains(&names[down]),
                "{label}: {what}: the message does not name the part: {message}"
            );
            for part in (0..PARTS).filter(|&p| p != down) {
                assert!(
                    !observer.lock(part, &names[part]).is_locked().unwrap(),
                    "{label}: {what} left part {part} held"
                );
            }
        });
        stores.up(down);
        // Back up (Redis restarted empty): a new process takes every part.
        let fresh = Process {
            clients: stores.clients(),
        };
        let guard = fresh
            .multi(&names)
            .try_lock()
            .unwrap()
            .expect("every part is free once the store is back");
        guard.unlock().unwrap();
    }
}

// ---------------------------------------------------------------------------
// RedLock
// ---------------------------------------------------------------------------

/// The setting of most RedLock cases: `n` independent stores of `kind`, a
/// fresh lock name made from `prefix`, a process (one client per store), an
/// observer (another process), and the process's RedLock of that name.
/// Bind the stores to a name (`_stores` where unused): `_` would drop them,
/// servers and all, at once.
fn redlock_case(
    kind: StoreKind,
    n: usize,
    prefix: &str,
) -> (Independent, String, Vec<Client>, Vec<Client>, RedLock) {
    redlock_case_with_watchdog(kind, n, prefix, common::DEFAULT_WATCHDOG)
}

/// [`redlock_case`] with the process's clients on the watchdog timeout
/// `watchdog`.
fn redlock_case_with_watchdog(
    kind: StoreKind,
    n: usize,
    prefix: &str,
    watchdog: Duration,
) -> (Independent, String, Vec<Client>, Vec<Client>, RedLock) {
    let stores = Independent::new(kind, n);
    let name = unique_name(prefix);
    let process = stores.clients_with_watchdog(watchdog);
    let observer = stores.clients();
    let lock = redlock(&process, &name);
    (stores, name, process, observer, lock)
}

/// Calls `check` with the time elapsed every 100 ms, for three watchdog
/// timeouts (a watchdog hold is renewed several times meanwhile).
fn for_three_watchdog_timeouts(mut check: impl FnMut(Duration)) {
    let started = Instant::now();
    while started.elapsed() < WATCHDOG * 3 {
        thread::sleep(Duration::from_millis(100));
        check(started.elapsed());
    }
}

/// Takes the stores in `down` down; returns the others, in order.
fn take_down(stores: &Independent, down: &[usize]) -> Vec<usize> {
    for &i in down {
        stores.down(i);
    }
    (0..stores.len()).filter(|i| !down.contains(i)).collect()
}

/// A RedLock named `name` on every client of a process (one per store).
fn redlock(clients: &[Client], name: &str) -> RedLock {
    RedLock::new(clients.iter().map(|c| c.lock(name))).expect("RedLock::new")
}

/// Whether `name` is locked on each store in `which`.
fn locked_on(clients: &[Client], name: &str, which: impl IntoIterator<Item = usize>) -> Vec<bool> {
    which
        .into_iter()
        .map(|i| clients[i].lock(name).is_locked().unwrap())
        .collect()
}

fn redlock_acquires_with_every_store_up(kind: StoreKind) {
    for (n, quorum) in [(3, 2), (5, 3)] {
        let (_stores, name, _process, observer, lock) = redlock_case(kind, n, "redlock:up");
        assert_eq!(lock.quorum(), quorum, "{n} masters");
        assert_eq!(lock.locks().len(), n);

        for take in ["lock", "try_lock", "try_lock_for", "lock_with_lease"] {
            let (guard, took) = timed(|| match take {
                "lock" => lock.lock().unwrap(),
                "try_lock" => lock.try_lock().unwrap().expect("free"),
                "try_lock_for" => lock.try_lock_for(PROMPT).unwrap().expect("free"),
                _ => lock.lock_with_lease(LONG_LEASE).unwrap(),
            });
            assert!(took < PROMPT * 2, "{n} masters: {take} took {took:?}");
            assert_eq!(guard.guards().len(), n, "{n} masters, {take}: all granted");
            assert!(!guard.is_lost());
            assert_eq!(locked_on(&observer, &name, 0..n), vec![true; n], "{take}");
            assert!(
                redlock(&observer, &name).try_lock().unwrap().is_none(),
                "{n} masters, {take}: another process took a held RedLock"
            );
            guard.unlock().unwrap();
            assert_eq!(locked_on(&observer, &name, 0..n), vec![false; n], "{take}");
        }
    }
}

fn redlock_acquires_with_a_minority_down(kind: StoreKind) {
    for (n, down) in [(3, vec![1]), (5, vec![1, 3])] {
        let (stores, name, process, observer, lock) =
            redlock_case(kind, n, "redlock:minority-down");
        let live = take_down(&stores, &down);

        // Bounded first on another thread (a hang fails the test), then
        // for real on this one.
        let probe = lock.clone();
        let (parts, _) = bounded("lock() with a minority down", FAILS_WITHIN, move || {
            probe.lock().unwrap().guards().len()
        });
        assert_eq!(parts, live.len(), "{n} masters, {down:?} down");
        let (guard, took) = timed(|| lock.lock().unwrap());
        assert!(
            took < FAILS_WITHIN,
            "{n} masters, {down:?} down: lock() took {took:?}"
        );
        assert_eq!(
            guard.guards().len(),
            live.len(),
            "{n} masters, {down:?} down"
        );
        assert!(!guard.is_lost());
        assert_eq!(
            locked_on(&observer, &name, live.clone()),
            vec![true; live.len()]
        );
        let held: Vec<&str> = guard
            .guards()
            .iter()
            .map(|g| g.lock().client().id())
            .collect();
        let expected: Vec<&str> = live.iter().map(|&i| process[i].id()).collect();
        assert_eq!(
            held, expected,
            "the guard holds the live masters' parts, in order"
        );
        // Another process is kept out.
        let (got, took) = timed(|| redlock(&observer, &name).try_lock().unwrap());
        assert!(got.is_none(), "{n} masters: a second holder got a majority");
        assert!(took < FAILS_WITHIN);
        guard.unlock().unwrap();
        assert_eq!(
            locked_on(&observer, &name, live.clone()),
            vec![false; live.len()]
        );

        // try_lock works too.
        let guard = lock.try_lock().unwrap().expect("a majority is up and free");
        assert_eq!(guard.guards().len(), live.len());
        guard.unlock().unwrap();
    }
}

fn redlock_with_a_majority_down_is_an_error_not_a_hang(kind: StoreKind) {
    for (n, down) in [(3, vec![0, 2]), (5, vec![0, 2, 4])] {
        let (stores, name, _process, observer, lock) =
            redlock_case(kind, n, "redlock:majority-down");
        let live = take_down(&stores, &down);

        let label = format!("{n} masters, {down:?} down");
        every_take_fails(&lock, STUCK, &label, |what, err| {
            assert!(
                err.to_string().contains("majority"),
                "{what}: the message does not mention the majority: {err}"
            );
            assert_eq!(
                locked_on(&observer, &name, live.clone()),
                vec![false; live.len()],
                "{label}: {what} left a live part held"
            );
        });
    }
}

fn redlock_unlock_succeeds_with_a_server_killed_while_held(kind: StoreKind) {
    let (stores, name, _process, observer, lock) =
        redlock_case_with_watchdog(kind, 3, "redlock:killed", WATCHDOG);
    let guard = lock.lock().unwrap();
    assert_eq!(guard.guards().len(), 3);

    stores.down(1);
    // The watchdog keeps renewing the majority: not lost, well past the
    // timeout, and nobody else gets in.
    for_three_watchdog_timeouts(|elapsed| {
        assert!(
            !guard.is_lost(),
            "lost {elapsed:?} after one of three masters stopped"
        );
        assert_eq!(locked_on(&observer, &name, [0, 2]), [true, true]);
    });
    assert!(redlock(&observer, &name).try_lock().unwrap().is_none());
    // The stopped master's part is known lost by now (not renewed).
    assert!(guard.guards()[1].is_lost());

    let (result, took) = timed(|| guard.unlock());
    result.expect("unlock() with a majority released");
    assert!(took < FAILS_WITHIN, "unlock took {took:?}");
    assert_eq!(locked_on(&observer, &name, [0, 2]), [false, false]);
}

fn competing_redlock_users_exclude_each_other(kind: StoreKind) {
    const THREADS_PER_PROCESS: usize = 2;
    const ITERATIONS: usize = 25;
    let stores = Independent::new(kind, 3);
    let name = unique_name("redlock:compete");
    let processes = [stores.clients(), stores.clients()];
    let parts = Parts::new(1);
    let workers_total = processes.len() * THREADS_PER_PROCESS;
    let mut workers = Vec::new();
    for (p, process) in processes.iter().enumerate() {
        for t in 0..THREADS_PER_PROCESS {
            let lock = redlock(process, &name);
            let parts = Arc::clone(&parts);
            workers.push(move |iteration| {
                let guard = lock.lock().expect("lock()");
                assert!(!guard.is_lost());
                parts.critical_section(&[0], &format!("process {p} thread {t} #{iteration}"));
                guard.unlock().expect("unlock()");
            });
        }
    }
    contend(&parts, ITERATIONS, workers);
    assert_eq!(parts.counts(), [(workers_total * ITERATIONS) as u64]);
    assert_eq!(locked_on(&processes[0], &name, 0..3), [false; 3]);
}

fn a_majority_held_elsewhere_keeps_redlock_out(kind: StoreKind) {
    for (n, held) in [
        (3, vec![0, 1]),
        (3, vec![1, 2]),
        (3, vec![0, 2]),
        (5, vec![0, 2, 4]),
    ] {
        let (_stores, name, _process, other, lock) = redlock_case(kind, n, "redlock:majority-held");
        let blockers: Vec<_> = held
            .iter()
            .map(|&i| {
                other[i]
                    .lock(name.as_str())
                    .lock_with_lease(LONG_LEASE)
                    .unwrap()
            })
            .collect();
        let free: Vec<usize> = (0..n).filter(|i| !held.contains(i)).collect();

        let (got, took) = timed(|| lock.try_lock().unwrap());
        assert!(
            got.is_none(),
            "{n} masters, {held:?} held elsewhere: try_lock got it"
        );
        assert!(took < PROMPT, "try_lock took {took:?}");
        assert_eq!(
            locked_on(&other, &name, free.clone()),
            vec![false; free.len()],
            "{n} masters, {held:?} held elsewhere: try_lock kept the minority it took"
        );
        assert_eq!(
            locked_on(&other, &name, held.clone()),
            vec![true; held.len()]
        );

        let (got, took) = timed(|| lock.try_lock_for(LEASE).unwrap());
        assert!(got.is_none());
        assert!(took >= LEASE, "try_lock_for gave up after {took:?}");
        assert!(
            took < LEASE + PROMPT * 2,
            "try_lock_for returned after {took:?}"
        );
        assert_eq!(
            locked_on(&other, &name, free.clone()),
            vec![false; free.len()]
        );

        // Down to a minority elsewhere: the RedLock gets the rest.
        let mut blockers = blockers;
        blockers.pop().unwrap().unlock().unwrap();
        let guard = lock.try_lock().unwrap().expect("a majority is free");
        assert_eq!(guard.guards().len(), n - (held.len() - 1));
        assert!(!guard.is_lost());
        guard.unlock().unwrap();

        // A waiter is woken when the last blockers are released.
        drop(blockers);
        let holder = Holder::start(
            held.iter().map(|&i| other[i].lock(name.as_str())).collect(),
            LEASE,
        );
        let guard = lock
            .try_lock_for(STUCK)
            .unwrap()
            .expect("woken within the wait");
        holder.woke(Instant::now(), &format!("{n} masters, {held:?} held"));
        guard.unlock().unwrap();
    }
}

fn redlock_fixed_lease_is_lost_when_it_ends(kind: StoreKind) {
    let (_stores, name, _process, observer, lock) = redlock_case(kind, 3, "redlock:lease");
    let started = Instant::now();
    let guard = lock.lock_with_lease(LEASE).unwrap();
    assert!(!guard.is_lost());
    for (i, client) in observer.iter().enumerate() {
        let ttl = client.lock(name.as_str()).remaining_ttl().unwrap();
        let ttl = ttl.unwrap_or_else(|| panic!("master {i}: no TTL"));
        assert!(ttl <= LEASE, "master {i}: TTL {ttl:?} exceeds the lease");
    }
    wait_until("the RedLock reports lost", STUCK, || guard.is_lost());
    let lost = started.elapsed();
    assert!(
        lost >= LEASE / 2,
        "a {LEASE:?} RedLock reported lost after only {lost:?}"
    );
    // It reports lost no later than the masters free it.
    wait_until("the parts expire", STUCK, || {
        locked_on(&observer, &name, 0..3) == [false; 3]
    });
    assert!(
        started.elapsed() < LEASE + PROMPT,
        "not freed by its lease (renewed?)"
    );
    let err = guard.unlock().unwrap_err();
    assert!(err.is_not_held(), "expected NotHeld, got {err:?}");
    assert!(redlock(&observer, &name).try_lock().unwrap().is_some());
}

/// A granted part counts only while its lease has more than the clock-drift
/// allowance (1 % of the lease + 2 ms) left, timed from when it was
/// requested: a 2 ms lease never has, so such a RedLock is never acquired,
/// and what each round took is given back (or expires).
fn redlock_counts_only_leases_that_outlive_the_drift_allowance(kind: StoreKind) {
    const WAIT: Duration = Duration::from_millis(300);
    const TOO_SHORT: Duration = Duration::from_millis(2);
    let (_stores, name, _process, observer, lock) = redlock_case(kind, 3, "redlock:drift");

    let probe = lock.clone();
    let (got, took) = bounded("a RedLock with 2 ms leases", FAILS_WITHIN, move || {
        probe
            .try_lock_for_with_lease(WAIT, TOO_SHORT)
            .map(|g| g.is_some())
    });
    assert!(
        !got.unwrap(),
        "a RedLock counted {TOO_SHORT:?} leases as valid: none can outlive the drift allowance"
    );
    assert!(
        took >= WAIT,
        "gave up after {took:?}, before the wait ran out"
    );
    let probe = lock.clone();
    let (got, _) = bounded("try with 2 ms leases", FAILS_WITHIN, move || {
        probe
            .try_lock_for_with_lease(Duration::ZERO, TOO_SHORT)
            .map(|g| g.is_some())
    });
    assert!(!got.unwrap());
    thread::sleep(TOO_SHORT * 5);
    assert_eq!(locked_on(&observer, &name, 0..3), [false; 3]);

    // A lease well beyond the allowance is valid.
    let guard = lock
        .try_lock_for_with_lease(PROMPT, LEASE)
        .unwrap()
        .expect("a RedLock with 300 ms leases");
    assert_eq!(guard.guards().len(), 3);
    assert!(!guard.is_lost());
    guard.unlock().unwrap();
}

fn redlock_watchdog_keeps_it_until_a_majority_stops(kind: StoreKind) {
    let (stores, name, _process, observer, lock) =
        redlock_case_with_watchdog(kind, 3, "redlock:watchdog", WATCHDOG);
    let guard = lock.lock().unwrap();
    for (i, client) in observer.iter().enumerate() {
        let ttl = client
            .lock(name.as_str())
            .remaining_ttl()
            .unwrap()
            .expect("a TTL");
        assert!(
            ttl <= WATCHDOG,
            "master {i}: lease {ttl:?} > the watchdog timeout"
        );
    }
    for_three_watchdog_timeouts(|elapsed| {
        assert!(
            !guard.is_lost(),
            "lost after {elapsed:?} with every master up"
        );
        assert!(
            redlock(&observer, &name).try_lock().unwrap().is_none(),
            "another process got the RedLock {elapsed:?} after it was taken"
        );
    });
    assert_eq!(locked_on(&observer, &name, 0..3), [true; 3]);

    stores.down(0);
    stores.down(2);
    let stopped = Instant::now();
    wait_until("is_lost() after a majority stopped", STUCK, || {
        guard.is_lost()
    });
    let noticed = stopped.elapsed();
    assert!(
        noticed < WATCHDOG + PROMPT * 2,
        "is_lost() only {noticed:?} after a majority stopped"
    );
    // The live master's part is still held (and renewed) until the unlock,
    // which cannot reach a majority.
    assert!(observer[1].lock(name.as_str()).is_locked().unwrap());
    let (result, took) = timed(|| guard.unlock());
    assert!(result.is_err(), "unlock() of a lost RedLock returned Ok");
    assert!(took < FAILS_WITHIN * 2, "unlock took {took:?}");
    assert!(!observer[1].lock(name.as_str()).is_locked().unwrap());
}

fn redlock_rejects_bad_arguments(kind: StoreKind) {
    let stores = Independent::new(kind, 3);
    let name = unique_name("redlock:bad");
    let process = stores.clients();

    let err = RedLock::new(Vec::new()).unwrap_err();
    assert!(err.is_invalid_argument(), "empty: {err:?}");
    for locks in [
        vec![process[0].lock(name.as_str()), process[0].lock("other")],
        vec![
            process[0].lock(name.as_str()),
            process[1].lock(name.as_str()),
            process[0].lock(name.as_str()),
        ],
        // Clones of one client are one client.
        vec![
            process[2].lock(name.as_str()),
            process[2].clone().lock(name.as_str()),
        ],
    ] {
        let err = RedLock::new(locks).unwrap_err();
        assert!(err.is_invalid_argument(), "a shared client: {err:?}");
        assert!(err.to_string().contains("same client"), "{err}");
    }

    let lock = redlock(&process, &name);
    for lease in [Duration::ZERO, Duration::from_micros(999)] {
        let err = lock.lock_with_lease(lease).unwrap_err();
        assert!(err.is_invalid_argument(), "lease {lease:?}: {err:?}");
        let err = lock.try_lock_for_with_lease(PROMPT, lease).unwrap_err();
        assert!(err.is_invalid_argument(), "lease {lease:?}: {err:?}");
    }
    assert_eq!(locked_on(&process, &name, 0..3), [false; 3]);
}

/// Empty part names are `InvalidArgument`, not outvoted as a store failure
/// would be (no "no majority" `Backend` error).
fn redlock_parts_with_an_empty_name_are_invalid_argument(kind: StoreKind) {
    let stores = Independent::new(kind, 3);
    let process = stores.clients();
    let empty = RedLock::new(process.iter().map(|c| c.lock(""))).unwrap();
    let (err, _) = lock_fails("lock() with empty part names", empty);
    assert!(
        err.is_invalid_argument(),
        "empty part names: expected InvalidArgument, got {err:?} ({err})"
    );
}
