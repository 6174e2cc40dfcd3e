//! Conformance suite for the read-write lock ([`Client::read_write_lock`],
//! Redisson's `RReadWriteLock`): every behaviour is written once, as a
//! function of an [`Env`], and run on both backends by `backend_tests!`.
//!
//! Two `Client`s on one store stand for two processes. Timings use generous
//! upper bounds (the CI VM has two vCPUs and heavy steal). The Redis layout
//! (hash fields, per-hold timeout keys, messages) is checked in
//! `tests/wire.rs`; a killed reader process is in `tests/processes.rs`.
//!
//! Read → write upgrade: redisync refuses it at once with
//! `Error::InvalidArgument`, where Redisson's `writeLock().lock()` would wait
//! for the thread's own read hold forever.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::timing::{LONG_LEASE, PROMPT, SETTLE, STUCK};
use common::{CountingBackend, Env, backend_tests, unique_name};
use redisync::{Error, Lock, ReadWriteLock};

backend_tests!(
    readers_overlap,
    writer_excludes_readers_and_writers,
    downgrade_write_then_read,
    read_to_write_upgrade_is_an_error,
    write_unlock_wakes_all_readers,
    read_unlock_wakes_a_waiting_writer,
    foreign_unlock_is_not_held,
    leases_expire_on_both_halves,
    watchdog_renews_read_and_write_holds,
    waiters_park_instead_of_polling,
    bad_input_is_a_clear_error,
);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Runs `f` on a fresh thread (a different holder of the same client) and
/// returns its result.
fn on_other_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    thread::spawn(f).join().expect("helper thread panicked")
}

/// Whether a fresh thread of `lock`'s client can take `lock` at once (it
/// releases it again).
fn other_thread_can_take(lock: &Lock) -> bool {
    let lock = lock.clone();
    on_other_thread(move || lock.try_lock().unwrap().is_some())
}

/// A thread blocked in `lock()` that reports when it got the lock and then
/// holds it until released.
struct Holder {
    acquired: mpsc::Receiver<Instant>,
    release: Option<mpsc::Sender<()>>,
    handle: Option<thread::JoinHandle<redisync::Result<()>>>,
}

impl Holder {
    fn spawn(lock: Lock) -> Holder {
        let (started_tx, started_rx) = mpsc::channel();
        let (acquired_tx, acquired) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let handle = thread::spawn(move || {
            started_tx.send(()).unwrap();
            let guard = lock.lock().expect("holder: lock()");
            let _ = acquired_tx.send(Instant::now());
            let _ = release_rx.recv_timeout(Duration::from_secs(60));
            guard.unlock()
        });
        started_rx
            .recv_timeout(STUCK)
            .expect("holder thread started");
        Holder {
            acquired,
            release: Some(release),
            handle: Some(handle),
        }
    }

    fn acquired_at(&self, what: &str) -> Instant {
        self.acquired
            .recv_timeout(STUCK)
            .unwrap_or_else(|e| panic!("{what}: no lock within {STUCK:?} ({e})"))
    }

    fn has_acquired(&self) -> bool {
        !matches!(self.acquired.try_recv(), Err(mpsc::TryRecvError::Empty))
    }

    fn join(mut self) -> redisync::Result<()> {
        self.release.take();
        self.handle
            .take()
            .unwrap()
            .join()
            .expect("holder thread panicked")
    }
}

// ---------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------

/// Four readers over two clients are inside at the same time: each stays
/// until it has seen all four inside (bounded), so any exclusion among
/// readers shows as a lower maximum.
fn readers_overlap(env: &Env) {
    const READERS: usize = 4;
    let name = unique_name("rw:overlap");
    let clients = [env.client(), env.client()];
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(READERS));
    let threads: Vec<_> = (0..READERS)
        .map(|i| {
            let read = clients[i % 2].read_write_lock(name.as_str()).read_lock();
            let (inside, most, start) = (inside.clone(), most.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let guard = read.lock().expect("read lock");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let deadline = Instant::now() + Duration::from_secs(5);
                while most.load(Ordering::SeqCst) < READERS && Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(5));
                }
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().expect("read unlock");
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("reader panicked");
    }
    let most = most.load(Ordering::SeqCst);
    eprintln!("readers_overlap: at most {most} of {READERS} readers inside at once");
    assert_eq!(
        most, READERS,
        "only {most} of {READERS} readers were inside the read lock at once"
    );
    let rw = clients[0].read_write_lock(name.as_str());
    assert!(!rw.read_lock().is_locked().unwrap());
    assert!(rw.write_lock().try_lock().unwrap().is_some());
}

/// Writers and readers in two clients: a writer is alone (no reader, no
/// other writer), a reader never sees a writer or a changing value, and a
/// non-atomic counter updated under the write lock loses no update.
fn writer_excludes_readers_and_writers(env: &Env) {
    const WRITERS_PER_CLIENT: usize = 2;
    const READERS_PER_CLIENT: usize = 2;
    const ITERATIONS: u64 = 25;
    let name = unique_name("rw:exclusion");
    let clients = [env.client(), env.client()];
    let counter = Arc::new(AtomicU64::new(0));
    let writer_inside = Arc::new(AtomicBool::new(false));
    let readers_inside = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let threads_total = clients.len() * (WRITERS_PER_CLIENT + READERS_PER_CLIENT);
    let start = Arc::new(Barrier::new(threads_total));
    let started = Instant::now();
    let mut threads = Vec::new();
    for client in &clients {
        let rw = client.read_write_lock(name.as_str());
        for _ in 0..WRITERS_PER_CLIENT {
            let write = rw.write_lock();
            let (counter, writer_inside, readers_inside, start) = (
                counter.clone(),
                writer_inside.clone(),
                readers_inside.clone(),
                start.clone(),
            );
            threads.push(thread::spawn(move || {
                start.wait();
                for _ in 0..ITERATIONS {
                    let guard = write.lock().expect("write lock");
                    assert!(
                        !writer_inside.swap(true, Ordering::SeqCst),
                        "two writers inside"
                    );
                    assert_eq!(
                        readers_inside.load(Ordering::SeqCst),
                        0,
                        "a writer inside with readers"
                    );
                    // A non-atomic increment: a lost update shows a second
                    // writer inside.
                    let value = counter.load(Ordering::SeqCst);
                    thread::yield_now();
                    counter.store(value + 1, Ordering::SeqCst);
                    writer_inside.store(false, Ordering::SeqCst);
                    guard.unlock().expect("write unlock");
                }
            }));
        }
        for _ in 0..READERS_PER_CLIENT {
            let read = rw.read_lock();
            let (counter, writer_inside, readers_inside, most_readers, start) = (
                counter.clone(),
                writer_inside.clone(),
                readers_inside.clone(),
                most_readers.clone(),
                start.clone(),
            );
            threads.push(thread::spawn(move || {
                start.wait();
                for _ in 0..ITERATIONS {
                    let guard = read.lock().expect("read lock");
                    let now = readers_inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most_readers.fetch_max(now, Ordering::SeqCst);
                    assert!(
                        !writer_inside.load(Ordering::SeqCst),
                        "a reader inside with a writer"
                    );
                    let before = counter.load(Ordering::SeqCst);
                    thread::yield_now();
                    let after = counter.load(Ordering::SeqCst);
                    assert_eq!(before, after, "the value changed under a reader");
                    assert!(!writer_inside.load(Ordering::SeqCst));
                    readers_inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().expect("read unlock");
                }
            }));
        }
    }
    for thread in threads {
        thread.join().expect("worker panicked");
    }
    let elapsed = started.elapsed();
    let expected = (clients.len() * WRITERS_PER_CLIENT) as u64 * ITERATIONS;
    assert_eq!(counter.load(Ordering::SeqCst), expected, "lost updates");
    eprintln!(
        "writer_excludes_readers_and_writers: {threads_total} threads x {ITERATIONS} in \
         {elapsed:?}; at most {} readers inside at once",
        most_readers.load(Ordering::SeqCst)
    );
    // A missed wake-up parks a waiter until the 30 s lease runs out.
    assert!(
        elapsed < Duration::from_secs(25),
        "took {elapsed:?}: some waiter slept until a lease ran out instead of being woken"
    );
    let rw = clients[0].read_write_lock(name.as_str());
    assert!(!rw.read_lock().is_locked().unwrap());
    assert!(!rw.write_lock().is_locked().unwrap());
}

/// A writer may take the read lock; releasing the write hold leaves the lock
/// read-held: other readers may join, writers may not, until the last read
/// hold goes.
fn downgrade_write_then_read(env: &Env) {
    let name = unique_name("rw:downgrade");
    let a = env.client();
    let b = env.client();
    let rw = a.read_write_lock(name.as_str());
    let rw_b = b.read_write_lock(name.as_str());
    assert_eq!(rw.name(), name);

    let write = rw.write_lock().lock().unwrap();
    assert!(rw.write_lock().is_locked().unwrap());
    assert!(!rw.read_lock().is_locked().unwrap());
    assert!(
        rw_b.read_lock().try_lock().unwrap().is_none(),
        "a reader got in beside a writer"
    );
    let read = rw
        .read_lock()
        .lock()
        .expect("a writer may take the read lock");
    assert_eq!(rw.write_lock().hold_count().unwrap(), 1);
    assert_eq!(rw.read_lock().hold_count().unwrap(), 1);
    // Write re-entry while also reading is still re-entry, not an upgrade.
    let write_again = rw
        .write_lock()
        .lock()
        .expect("write re-entry while also reading");
    assert_eq!(rw.write_lock().hold_count().unwrap(), 2);
    write_again.unlock().unwrap();
    // Still exclusive while the write hold lives.
    assert!(rw_b.read_lock().try_lock().unwrap().is_none());
    assert!(!other_thread_can_take(&rw.read_lock()));

    write.unlock().unwrap();
    assert!(
        rw.read_lock().is_locked().unwrap(),
        "the downgraded lock is not read-held"
    );
    assert!(!rw.write_lock().is_locked().unwrap());
    assert_eq!(rw.read_lock().hold_count().unwrap(), 1);
    assert_eq!(rw.write_lock().hold_count().unwrap(), 0);
    // Other readers join, from another client and another thread...
    let joined = rw_b
        .read_lock()
        .try_lock()
        .unwrap()
        .expect("another client's reader after the downgrade");
    assert!(other_thread_can_take(&rw.read_lock()));
    // ...writers cannot (a third client, and another thread of the first).
    let c = env.client();
    assert!(
        c.read_write_lock(name.as_str())
            .write_lock()
            .try_lock()
            .unwrap()
            .is_none()
    );
    assert!(!other_thread_can_take(&rw.write_lock()));

    joined.unlock().unwrap();
    assert!(rw.read_lock().is_locked().unwrap());
    read.unlock().unwrap();
    assert!(!rw.read_lock().is_locked().unwrap());
    assert!(rw.read_lock().remaining_ttl().unwrap().is_none());
    let writer = rw_b
        .write_lock()
        .try_lock()
        .unwrap()
        .expect("free after the last read hold");
    writer.unlock().unwrap();
}

/// Holding the read lock, asking for the write lock fails at once with
/// `InvalidArgument` (Redisson would wait for itself forever), and the read
/// hold is left as it was.
fn read_to_write_upgrade_is_an_error(env: &Env) {
    let name = unique_name("rw:upgrade");
    let a = env.client();
    let b = env.client();
    let rw = a.read_write_lock(name.as_str());
    let read = rw.read_lock().lock().unwrap();
    // Another client's reader too: the error is about this thread's hold.
    let other = b.read_write_lock(name.as_str()).read_lock().lock().unwrap();

    let write = rw.write_lock();
    let started = Instant::now();
    let errors = [
        write.lock().map(drop).unwrap_err(),
        write.try_lock().map(drop).unwrap_err(),
        write
            .try_lock_for(Duration::from_secs(10))
            .map(drop)
            .unwrap_err(),
        write.lock_with_lease(LONG_LEASE).map(drop).unwrap_err(),
    ];
    let elapsed = started.elapsed();
    assert!(elapsed < PROMPT, "the upgrade attempts took {elapsed:?}");
    for err in &errors {
        assert!(
            err.is_invalid_argument(),
            "expected InvalidArgument, got {err:?}"
        );
        assert!(
            err.to_string().contains(&name),
            "the error does not name the lock: {err}"
        );
    }
    assert_eq!(
        rw.read_lock().hold_count().unwrap(),
        1,
        "the read hold changed"
    );
    assert!(rw.read_lock().is_locked().unwrap());
    assert!(!rw.write_lock().is_locked().unwrap());

    // Another thread of the same client does not hold the read lock: it
    // simply waits (here: times out).
    let other_write = rw.write_lock();
    let timed_out = on_other_thread(move || {
        other_write
            .try_lock_for(Duration::from_millis(100))
            .unwrap()
            .is_none()
    });
    assert!(timed_out);

    other.unlock().unwrap();
    read.unlock().unwrap();
    let guard = write
        .try_lock()
        .unwrap()
        .expect("write after releasing the read lock");
    guard.unlock().unwrap();
}

/// Three readers (two threads of the writer's client, one of another client)
/// blocked by a writer all get in on the write unlock, together.
fn write_unlock_wakes_all_readers(env: &Env) {
    let name = unique_name("rw:wake-readers");
    let a = env.client();
    let b = env.client();
    let rw = a.read_write_lock(name.as_str());
    let write = rw.write_lock().lock().unwrap();
    let readers = [
        Holder::spawn(rw.read_lock()),
        Holder::spawn(rw.read_lock()),
        Holder::spawn(b.read_write_lock(name.as_str()).read_lock()),
    ];
    thread::sleep(SETTLE);
    assert!(
        readers.iter().all(|r| !r.has_acquired()),
        "a reader got in beside a writer"
    );

    let unlocked = Instant::now();
    write.unlock().unwrap();
    let times: Vec<Duration> = readers
        .iter()
        .map(|r| {
            r.acquired_at("after the write unlock")
                .duration_since(unlocked)
        })
        .collect();
    let last = *times.iter().max().unwrap();
    let first = *times.iter().min().unwrap();
    assert!(
        last < PROMPT,
        "readers got in {times:?} after the write unlock (the writer's lease was 30 s)"
    );
    assert!(
        last - first < Duration::from_secs(1),
        "readers got in {times:?} after the write unlock: not woken together"
    );
    // All three hold at once.
    assert!(rw.read_lock().is_locked().unwrap());
    assert!(
        b.read_write_lock(name.as_str())
            .write_lock()
            .try_lock()
            .unwrap()
            .is_none()
    );
    for reader in readers {
        reader.join().unwrap();
    }
    assert!(!rw.read_lock().is_locked().unwrap());
}

/// A writer waiting for readers (in its own client and another) is woken by
/// the last read unlock, not by the readers' lease.
fn read_unlock_wakes_a_waiting_writer(env: &Env) {
    let name = unique_name("rw:wake-writer");
    let a = env.client();
    let b = env.client();
    let read_a = a.read_write_lock(name.as_str()).read_lock().lock().unwrap();
    let read_b = b.read_write_lock(name.as_str()).read_lock().lock().unwrap();
    let writer = Holder::spawn(a.read_write_lock(name.as_str()).write_lock());
    thread::sleep(SETTLE);
    read_a.unlock().unwrap();
    thread::sleep(SETTLE);
    assert!(!writer.has_acquired(), "a writer got in beside a reader");
    let unlocked = Instant::now();
    read_b.unlock().unwrap();
    let woke = writer
        .acquired_at("after the last read unlock")
        .duration_since(unlocked);
    assert!(
        woke < PROMPT,
        "the writer got in {woke:?} after the last read unlock"
    );
    writer.join().unwrap();
}

/// A hold released behind its guard's back (force_unlock from another
/// client) makes the guard's unlock `NotHeld`, on both halves; a half's
/// force_unlock only acts on its own mode.
fn foreign_unlock_is_not_held(env: &Env) {
    let name = unique_name("rw:foreign");
    let a = env.client();
    let b = env.client();
    let rw = a.read_write_lock(name.as_str());
    let rw_b = b.read_write_lock(name.as_str());

    // Read: two readers, forced out together.
    let read = rw.read_lock().lock().unwrap();
    let read_b = rw_b.read_lock().lock().unwrap();
    assert!(
        !rw_b.write_lock().force_unlock().unwrap(),
        "the write half forced a read-held lock"
    );
    assert!(rw.read_lock().is_locked().unwrap());
    assert!(rw_b.read_lock().force_unlock().unwrap());
    assert!(!rw.read_lock().is_locked().unwrap());
    for guard in [read, read_b] {
        let err = guard.unlock().unwrap_err();
        assert!(err.is_not_held(), "expected NotHeld, got {err:?}");
        assert!(err.to_string().contains(&name), "{err}");
    }
    assert!(
        !rw_b.read_lock().force_unlock().unwrap(),
        "force_unlock of a free lock"
    );

    // Write: forced out, then taken by another client; the old guard's
    // unlock is NotHeld and leaves the new holder alone.
    let write = rw.write_lock().lock().unwrap();
    assert!(
        !rw_b.read_lock().force_unlock().unwrap(),
        "the read half forced a write-held lock"
    );
    assert!(rw.write_lock().is_locked().unwrap());
    assert!(rw_b.write_lock().force_unlock().unwrap());
    let taken = rw_b
        .write_lock()
        .try_lock()
        .unwrap()
        .expect("free after force_unlock");
    let err = write.unlock().unwrap_err();
    assert!(err.is_not_held(), "expected NotHeld, got {err:?}");
    assert!(rw_b.write_lock().is_held_by_current_thread().unwrap());
    taken.unlock().unwrap();

    // A read guard whose lock was force-released and re-taken by a reader
    // of another client: NotHeld, and the other reader keeps its hold.
    let read = rw.read_lock().lock().unwrap();
    assert!(rw_b.read_lock().force_unlock().unwrap());
    let read_b = rw_b
        .read_lock()
        .try_lock()
        .unwrap()
        .expect("free after force_unlock");
    assert!(read.unlock().unwrap_err().is_not_held());
    assert_eq!(rw_b.read_lock().hold_count().unwrap(), 1);
    assert!(rw.read_lock().is_locked().unwrap());
    read_b.unlock().unwrap();
    assert!(!rw.read_lock().is_locked().unwrap());
}

/// Fixed leases free each half by themselves; the expired guard's unlock is
/// `NotHeld`.
fn leases_expire_on_both_halves(env: &Env) {
    const LEASE: Duration = Duration::from_millis(250);
    let name = unique_name("rw:lease");
    let a = env.client();
    let b = env.client();
    let rw = a.read_write_lock(name.as_str());
    let rw_b = b.read_write_lock(name.as_str());

    for (held_half, waiting_half) in [
        (rw.read_lock(), rw_b.write_lock()),
        (rw.write_lock(), rw_b.read_lock()),
    ] {
        let started = Instant::now();
        let guard = held_half.lock_with_lease(LEASE).unwrap();
        let ttl = held_half.remaining_ttl().unwrap().expect("a TTL");
        assert!(ttl <= LEASE, "TTL {ttl:?} exceeds the lease");
        let got = waiting_half
            .try_lock_for(Duration::from_secs(10))
            .unwrap()
            .expect("the lease did not free the lock");
        let freed = started.elapsed();
        assert!(
            freed >= LEASE - Duration::from_millis(10),
            "a {LEASE:?} lease freed the lock after {freed:?}"
        );
        assert!(
            freed < LEASE + PROMPT,
            "a {LEASE:?} lease freed it after {freed:?}"
        );
        assert!(guard.is_lost());
        assert!(guard.unlock().unwrap_err().is_not_held());
        assert!(waiting_half.is_held_by_current_thread().unwrap());
        got.unlock().unwrap();
    }
}

/// The watchdog keeps read and write holds alive past two watchdog
/// timeouts.
fn watchdog_renews_read_and_write_holds(env: &Env) {
    // Renewed every 500 ms: only a stall over ~1 s could lose it, which
    // keeps this reliable on a loaded two-vCPU machine (600 ms lost a
    // hold there: a 400 ms stall).
    const TIMEOUT: Duration = Duration::from_millis(1500);
    let name = unique_name("rw:watchdog");
    let a = env.client_with_watchdog(TIMEOUT);
    let b = env.client_with_watchdog(TIMEOUT);
    let rw = a.read_write_lock(name.as_str());
    let rw_b: ReadWriteLock = b.read_write_lock(name.as_str());

    for (half, mode) in [(rw.read_lock(), "read"), (rw.write_lock(), "write")] {
        let guard = half.lock().unwrap();
        // Reentrant holds are renewed too (each read hold has its own key).
        let again = half.lock().unwrap();
        let started = Instant::now();
        while started.elapsed() < TIMEOUT * 2 + Duration::from_millis(200) {
            thread::sleep(Duration::from_millis(100));
            assert!(
                rw_b.write_lock().try_lock().unwrap().is_none(),
                "another client took the write lock {:?} into a {mode} hold",
                started.elapsed()
            );
            if mode == "write" {
                assert!(rw_b.read_lock().try_lock().unwrap().is_none());
            }
        }
        assert_eq!(half.hold_count().unwrap(), 2, "{mode} hold lost");
        assert!(half.is_locked().unwrap());
        let ttl = half.remaining_ttl().unwrap().expect("a TTL");
        assert!(ttl <= TIMEOUT * 2, "{mode}: TTL {ttl:?}");
        assert!(
            !guard.is_lost() && !again.is_lost(),
            "{mode} hold reported lost"
        );
        again.unlock().unwrap();
        // One hold left: still renewed.
        thread::sleep(TIMEOUT * 2);
        assert_eq!(
            half.hold_count().unwrap(),
            1,
            "{mode}: the remaining hold lapsed"
        );
        assert!(rw_b.write_lock().try_lock().unwrap().is_none());
        guard.unlock().unwrap();
        assert!(!half.is_locked().unwrap());
    }
    assert!(rw_b.write_lock().try_lock().unwrap().is_some());
}

/// A waiting reader (behind a writer) and a waiting writer (behind a
/// reader) park until woken or until the lock's TTL runs out; they do not
/// poll. The holder keeps a watchdog hold (TTL 1 s, renewed every third of
/// it: only a stall over 667 ms could lose it on a loaded machine) for 3 s:
/// a parked waiter retries about once per TTL (~3 times).
fn waiters_park_instead_of_polling(env: &Env) {
    const WATCHDOG: Duration = Duration::from_secs(1);
    const HOLD: Duration = Duration::from_secs(3);
    const MAX_ATTEMPTS: u64 = 20;
    let name = unique_name("rw:no-poll");
    let a = env.client_with_watchdog(WATCHDOG);
    let counting = CountingBackend::new(Arc::clone(a.backend()));
    let b = env
        .builder()
        .shared_backend(Arc::new(counting.clone()))
        .build()
        .unwrap();
    let rw = a.read_write_lock(name.as_str());
    let rw_b = b.read_write_lock(name.as_str());
    for (held_half, waiting_half, method) in [
        (rw.write_lock(), rw_b.read_lock(), "read_lock_acquire"),
        (rw.read_lock(), rw_b.write_lock(), "write_lock_acquire"),
    ] {
        let held = held_half.lock().unwrap();
        let before = counting.calls(method);
        let waiter = Holder::spawn(waiting_half);
        thread::sleep(HOLD);
        let attempts = counting.calls(method) - before;
        assert!(!waiter.has_acquired(), "{method}: the waiter got in");
        let unlocked = Instant::now();
        held.unlock().unwrap();
        let woke = waiter.acquired_at(method).duration_since(unlocked);
        waiter.join().unwrap();
        assert!(
            woke < PROMPT,
            "{method}: the waiter got in {woke:?} after the unlock"
        );
        assert!(
            attempts <= MAX_ATTEMPTS,
            "{method}: a waiter behind a {HOLD:?} watchdog hold (TTL {WATCHDOG:?}) made \
             {attempts} attempts: it polls instead of parking"
        );
    }
}

fn bad_input_is_a_clear_error(env: &Env) {
    let client = env.client();
    let rw = client.read_write_lock("");
    for half in [rw.read_lock(), rw.write_lock()] {
        let errors = [
            half.lock().map(drop).unwrap_err(),
            half.try_lock().map(drop).unwrap_err(),
            half.try_lock_for(Duration::from_millis(10))
                .map(drop)
                .unwrap_err(),
            half.lock_with_lease(LONG_LEASE).map(drop).unwrap_err(),
            half.is_locked().map(drop).unwrap_err(),
            half.hold_count().map(drop).unwrap_err(),
            half.remaining_ttl().map(drop).unwrap_err(),
            half.force_unlock().map(drop).unwrap_err(),
        ];
        for err in &errors {
            assert!(
                matches!(err, Error::InvalidArgument { what: "name", .. }),
                "expected InvalidArgument(name), got {err:?}"
            );
        }
    }
    let rw = client.read_write_lock(unique_name("rw:bad-lease"));
    for half in [rw.read_lock(), rw.write_lock()] {
        let err = half.lock_with_lease(Duration::ZERO).map(drop).unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { what: "lease", .. }),
            "{err:?}"
        );
        assert!(!half.is_locked().unwrap());
    }

    // A key of another type: a protocol error, no panic.
    let name = unique_name("rw:wrongtype");
    env.set_string(&name, "x");
    let rw = client.read_write_lock(name.as_str());
    for half in [rw.read_lock(), rw.write_lock()] {
        for err in [
            half.lock().map(drop).unwrap_err(),
            half.try_lock().map(drop).unwrap_err(),
            half.is_locked().map(drop).unwrap_err(),
        ] {
            assert!(
                err.is_protocol_error(),
                "expected a protocol error, got {err:?}"
            );
        }
    }
}
