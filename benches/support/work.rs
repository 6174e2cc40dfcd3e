//! What the benches time: uncontended pairs, handoffs between threads,
//! contended runs.

#[allow(unused_imports)]
use crate::*;

pub(crate) fn lock_unlock(lock: &Lock) {
    lock.lock().unwrap().unlock().unwrap();
}

pub(crate) fn lock_with_lease_unlock(lock: &Lock) {
    lock.lock_with_lease(LEASE).unwrap().unlock().unwrap();
}

/// A semaphore with [`SEMAPHORE_PERMITS`] permits, under a fresh name.
pub(crate) fn permits(client: &Client, prefix: &str) -> Semaphore {
    let semaphore = client.semaphore(unique_name(prefix));
    assert!(semaphore.try_set_permits(SEMAPHORE_PERMITS).unwrap());
    semaphore
}

/// A permit-expirable semaphore with [`SEMAPHORE_PERMITS`] permits.
pub(crate) fn expirable_permits(client: &Client, prefix: &str) -> PermitExpirableSemaphore {
    let semaphore = client.permit_expirable_semaphore(unique_name(prefix));
    assert!(semaphore.try_set_permits(SEMAPHORE_PERMITS).unwrap());
    semaphore
}

pub(crate) fn semaphore_acquire_release(semaphore: &Semaphore) {
    semaphore.acquire(1).unwrap().release().unwrap();
}

pub(crate) fn expirable_acquire_release(semaphore: &PermitExpirableSemaphore) {
    semaphore.acquire(LEASE).unwrap().release().unwrap();
}

// ------------------------------------------------------- multi (uncontended) --

/// A RedLock over one lock (same name) on each of `masters`, checked to take
/// every part when uncontended.
pub(crate) fn redlock(masters: &[&Client], prefix: &str) -> RedLock {
    let name = unique_name(prefix);
    let redlock = RedLock::new(masters.iter().map(|c| c.lock(&name))).unwrap();
    let guard = redlock.lock().unwrap();
    assert_eq!(guard.guards().len(), masters.len(), "a part was not taken");
    guard.unlock().unwrap();
    redlock
}

/// A MultiLock over [`MULTI_PARTS`] locks on one server, through one client.
pub(crate) fn multilock_one_server(client: &Client, prefix: &str) -> MultiLock {
    MultiLock::new((0..MULTI_PARTS).map(|_| client.lock(unique_name(prefix)))).unwrap()
}

/// A MultiLock over one lock on each of `masters` (one client each).
pub(crate) fn multilock_spread(masters: &[&Client], prefix: &str) -> MultiLock {
    let name = unique_name(prefix);
    MultiLock::new(masters.iter().map(|c| c.lock(&name))).unwrap()
}

pub(crate) fn redlock_unlock(redlock: &RedLock) {
    redlock.lock().unwrap().unlock().unwrap();
}

pub(crate) fn redlock_with_lease_unlock(redlock: &RedLock) {
    redlock.lock_with_lease(LEASE).unwrap().unlock().unwrap();
}

pub(crate) fn multilock_unlock(multilock: &MultiLock) {
    multilock.lock().unwrap().unlock().unwrap();
}

// ---------------------------------------------------------------- handoff --

/// What [`handoff`] passes between two threads: a lock (taken with `lock()`
/// or, through [`Leased`], `lock_with_lease()`) or a one-permit semaphore.
pub(crate) trait Handoff: Sync {
    type Guard;
    /// Blocks until this side holds it.
    fn take(&self) -> Self::Guard;
    /// Gives it back (`unlock()`, or the permit guard's `release()`).
    fn give(&self, guard: Self::Guard);
}

impl Handoff for Lock {
    type Guard = redisync::LockGuard;
    fn take(&self) -> redisync::LockGuard {
        self.lock().unwrap()
    }
    fn give(&self, guard: redisync::LockGuard) {
        guard.unlock().unwrap();
    }
}

/// A lock taken with `lock_with_lease(lease)`.
pub(crate) struct Leased<'a>(pub(crate) &'a Lock, pub(crate) Duration);

impl Handoff for Leased<'_> {
    type Guard = redisync::LockGuard;
    fn take(&self) -> redisync::LockGuard {
        self.0.lock_with_lease(self.1).unwrap()
    }
    fn give(&self, guard: redisync::LockGuard) {
        guard.unlock().unwrap();
    }
}

/// One permit of a semaphore set to one permit: `acquire(1)`, and the
/// guard's `release()`.
impl Handoff for Semaphore {
    type Guard = SemaphorePermit;
    fn take(&self) -> SemaphorePermit {
        self.acquire(1).unwrap()
    }
    fn give(&self, permit: SemaphorePermit) {
        permit.release().unwrap();
    }
}

/// A semaphore named `name` holding exactly one permit, through `client`.
pub(crate) fn one_permit(client: &Client, name: &str) -> Semaphore {
    let semaphore = client.semaphore(name);
    assert!(
        semaphore.try_set_permits(1).unwrap(),
        "{name} was set already"
    );
    semaphore
}

/// `rounds` handoffs between two threads, one taking through `a`, the other
/// through `b` (same lock or semaphore name). Returns each handoff's
/// latency: from just before the holder's `unlock()` (or permit release) to
/// the waiter's return from `lock()` (or `acquire(1)`).
///
/// Ping-pong: the holder waits for its peer's "about to lock", waits until
/// the peer is parked in `lock()` (its wait channel), stamps t0 and unlocks; the peer stamps
/// t1 when `lock()` returns and becomes the holder; then the roles swap. The
/// ex-holder only calls `lock()` after the peer has the lock, so it never
/// races the handoff it measures.
pub(crate) fn handoff<H: Handoff>(a: &H, b: &H, rounds: u64) -> Vec<Duration> {
    let base = Instant::now();
    let t0 = AtomicU64::new(0);
    let tids = [AtomicU64::new(0), AtomicU64::new(0)];
    let (a_tx, b_rx) = mpsc::channel::<()>();
    let (b_tx, a_rx) = mpsc::channel::<()>();
    let (out_tx, out_rx) = mpsc::channel::<Duration>();
    thread::scope(|s| {
        let t0 = &t0;
        let [tid_a, tid_b] = &tids;
        let side_a = Side {
            me: tid_a,
            peer: tid_b,
        };
        let side_b = Side {
            me: tid_b,
            peer: tid_a,
        };
        let out_b = out_tx.clone();
        s.spawn(move || handoff_player(a, true, rounds, base, t0, side_a, a_tx, a_rx, out_tx));
        s.spawn(move || handoff_player(b, false, rounds, base, t0, side_b, b_tx, b_rx, out_b));
    });
    out_rx.try_iter().collect()
}

/// One side of [`handoff`]; `first` starts as the holder.
#[allow(clippy::too_many_arguments)]
pub(crate) fn handoff_player<H: Handoff>(
    it: &H,
    first: bool,
    rounds: u64,
    base: Instant,
    t0: &AtomicU64,
    side: Side<'_>,
    tx: mpsc::Sender<()>,
    rx: mpsc::Receiver<()>,
    out: mpsc::Sender<Duration>,
) {
    side.me.store(own_tid().unwrap_or(0), Ordering::Release);
    let mut guard = None;
    if first {
        guard = Some(it.take());
        tx.send(()).unwrap(); // "I hold it"
    } else {
        rx.recv().unwrap();
    }
    for round in 0..rounds {
        let holder = (round % 2 == 0) == first;
        if holder {
            rx.recv().unwrap(); // peer: "about to lock"
            wait_until_parked(side.peer.load(Ordering::Acquire));
            let g = guard.take().expect("the holder holds it");
            t0.store(nanos_since(base), Ordering::Release);
            it.give(g);
            rx.recv().unwrap(); // peer: "I hold it"
        } else {
            tx.send(()).unwrap(); // "about to lock"
            let g = it.take();
            let t1 = nanos_since(base);
            let start = t0.load(Ordering::Acquire);
            out.send(Duration::from_nanos(t1.saturating_sub(start)))
                .unwrap();
            guard = Some(g);
            tx.send(()).unwrap(); // "I hold it"
        }
    }
    if let Some(g) = guard {
        it.give(g);
    }
}

/// `rounds` openings of a latch: each round one thread sets the count to 1
/// through `setter`, another calls `wait()` through `waiter`; once that one
/// is parked, the first stamps t0 and counts down. Returns each opening's
/// latency: from just before `count_down()` to the waiter's return from
/// `wait()`. (At zero the latch deletes its key, so it can be set again.)
pub(crate) fn latch_open(
    setter: &CountDownLatch,
    waiter: &CountDownLatch,
    rounds: u64,
) -> Vec<Duration> {
    let base = Instant::now();
    let t0 = AtomicU64::new(0);
    let waiter_tid = AtomicU64::new(0);
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (back_tx, back_rx) = mpsc::channel::<Option<Duration>>();
    let mut times = Vec::new();
    thread::scope(|s| {
        let (t0, waiter_tid) = (&t0, &waiter_tid);
        s.spawn(move || {
            waiter_tid.store(own_tid().unwrap_or(0), Ordering::Release);
            while go_rx.recv().is_ok() {
                back_tx.send(None).unwrap(); // "about to wait"
                waiter.wait().unwrap();
                let t1 = nanos_since(base);
                let start = t0.load(Ordering::Acquire);
                back_tx
                    .send(Some(Duration::from_nanos(t1.saturating_sub(start))))
                    .unwrap();
            }
        });
        for _ in 0..rounds {
            assert!(setter.try_set_count(1).unwrap(), "the latch was not open");
            go_tx.send(()).unwrap();
            assert_eq!(back_rx.recv().unwrap(), None);
            wait_until_parked(waiter_tid.load(Ordering::Acquire));
            t0.store(nanos_since(base), Ordering::Release);
            setter.count_down().unwrap();
            times.push(back_rx.recv().unwrap().expect("the waiter's latency"));
        }
        drop(go_tx);
    });
    times
}

/// The two threads' kernel thread ids, for [`wait_until_parked`].
#[derive(Clone, Copy)]
pub(crate) struct Side<'a> {
    pub(crate) me: &'a AtomicU64,
    pub(crate) peer: &'a AtomicU64,
}

/// The calling thread's kernel thread id (Linux), from `/proc/thread-self`.
pub(crate) fn own_tid() -> Option<u64> {
    std::fs::read_link("/proc/thread-self")
        .ok()?
        .file_name()?
        .to_str()?
        .parse()
        .ok()
}

/// Returns once thread `tid` of this process is blocked on a futex (parked
/// in `lock()`: its only futex wait there; its acquire attempt waits on a
/// socket instead), seen twice in a row, yielding the CPU in between so the
/// vCPU never idles. Falls back to sleeping PARK_DELAY without procfs.
pub(crate) fn wait_until_parked(tid: u64) {
    let path = format!("/proc/self/task/{tid}/wchan");
    let start = Instant::now();
    let mut seen = 0;
    while seen < 2 {
        let Ok(wchan) = std::fs::read_to_string(&path) else {
            thread::sleep(PARK_DELAY);
            return;
        };
        if wchan.contains("futex") {
            seen += 1;
        } else {
            seen = 0;
        }
        if start.elapsed() > PARK_POLL_LIMIT {
            return;
        }
        thread::yield_now();
    }
}

pub(crate) fn nanos_since(base: Instant) -> u64 {
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

// -------------------------------------------------------------- contended --

/// Criterion's view: the locks' threads share `iters` acquisitions; returns
/// the wall time from the start barrier until the last thread is done.
pub(crate) fn contended_fixed(locks: &[Lock], iters: u64) -> Duration {
    let threads = u64::try_from(locks.len()).unwrap();
    let per_thread = iters.div_ceil(threads);
    let barrier = Barrier::new(locks.len() + 1);
    let start = thread::scope(|s| {
        for lock in locks {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for _ in 0..per_thread {
                    lock_waited(lock).unlock().unwrap();
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    // Scale to exactly `iters` acquisitions.
    start
        .elapsed()
        .mul_f64(iters as f64 / (per_thread * threads) as f64)
}

/// Contended `lock()` calls slower than STALL, and the slowest, since the
/// last [`take_waits`].
pub(crate) static SLOW_LOCKS: AtomicU64 = AtomicU64::new(0);
pub(crate) static LONGEST_LOCK_NS: AtomicU64 = AtomicU64::new(0);

/// `lock()`, noting waits long enough to be a missed wake-up (with 8
/// threads a turn normally comes within a few milliseconds).
pub(crate) fn lock_waited(lock: &Lock) -> redisync::LockGuard {
    let start = Instant::now();
    let guard = lock.lock().unwrap();
    let waited = start.elapsed();
    if waited > STALL {
        SLOW_LOCKS.fetch_add(1, Ordering::Relaxed);
    }
    let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
    LONGEST_LOCK_NS.fetch_max(nanos, Ordering::Relaxed);
    guard
}

/// Notes each handoff like [`lock_waited`] does; returns their sum.
pub(crate) fn note_waits(times: &[Duration]) -> Duration {
    for t in times {
        if *t > STALL {
            SLOW_LOCKS.fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
        LONGEST_LOCK_NS.fetch_max(nanos, Ordering::Relaxed);
    }
    times.iter().sum()
}

/// (slow `lock()` calls, longest wait) since the last call; resets both.
pub(crate) fn take_waits() -> (u64, Duration) {
    (
        SLOW_LOCKS.swap(0, Ordering::Relaxed),
        Duration::from_nanos(LONGEST_LOCK_NS.swap(0, Ordering::Relaxed)),
    )
}

pub(crate) struct Contended {
    pub(crate) per_sec: f64,
    pub(crate) min_max: f64,
    pub(crate) counts: Vec<u64>,
    /// Share of acquisitions by the thread that made the previous one.
    pub(crate) same_thread_share: f64,
    pub(crate) drain: Duration,
    /// `lock()` calls slower than STALL, and the longest.
    pub(crate) slow: u64,
    pub(crate) longest: Duration,
    /// Each acquisition by a thread other than the previous holder: from
    /// the previous holder's `unlock()` call to this `lock()`'s return.
    pub(crate) handoffs: Vec<Duration>,
    /// The same, for the acquisitions by a thread of another client.
    pub(crate) cross_client: Vec<Duration>,
}

/// How an acquisition in a contended run came about.
pub(crate) enum Taken {
    /// The run's first.
    First,
    /// By the thread that made the previous one.
    Again,
    /// From another thread (its index), this long after it began `unlock()`.
    From(usize, Duration),
}

/// A contended run's acquisitions per second, per-thread min/max, and the
/// share of acquisitions by the thread that made the previous one.
pub(crate) fn rates(counts: &[u64], repeats: u64, duration: Duration) -> (f64, f64, f64) {
    let total: u64 = counts.iter().sum();
    let min = counts.iter().copied().min().unwrap_or(0);
    let max = counts.iter().copied().max().unwrap_or(0);
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    (
        total as f64 / duration.as_secs_f64(),
        ratio(min, max),
        ratio(repeats, total),
    )
}

/// Shared by a contended run's threads: who took the lock last, and when
/// that holder began its `unlock()` (ns since the run's base).
pub(crate) struct LastHolder {
    owner: AtomicUsize,
    unlock_at: AtomicU64,
}

impl LastHolder {
    pub(crate) fn new() -> Self {
        LastHolder {
            owner: AtomicUsize::new(usize::MAX),
            unlock_at: AtomicU64::new(0),
        }
    }

    /// Thread `me` acquired at `at`: from whom.
    pub(crate) fn acquired(&self, me: usize, at: u64) -> Taken {
        let previous = self.owner.swap(me, Ordering::SeqCst);
        if previous == usize::MAX {
            Taken::First
        } else if previous == me {
            Taken::Again
        } else {
            let from = self.unlock_at.load(Ordering::SeqCst);
            Taken::From(previous, Duration::from_nanos(at.saturating_sub(from)))
        }
    }

    /// The holder is about to call `unlock()`.
    pub(crate) fn unlocking(&self, at: u64) {
        self.unlock_at.store(at, Ordering::SeqCst);
    }
}

/// Each thread loops `lock()` + `unlock()` until `duration` has passed;
/// counts acquisitions that began before the deadline. `client_of[i]` says
/// which client `locks[i]` belongs to.
pub(crate) fn contended_for(locks: &[Lock], client_of: &[usize], duration: Duration) -> Contended {
    let barrier = Barrier::new(locks.len() + 1);
    let deadline_nanos = AtomicU64::new(u64::MAX);
    let base = Instant::now();
    let last = LastHolder::new();
    let repeats = AtomicU64::new(0);
    let mut counts = Vec::new();
    let mut handoffs = Vec::new();
    let mut cross_client = Vec::new();
    let mut drain = Duration::ZERO;
    take_waits();
    thread::scope(|s| {
        let handles: Vec<_> = locks
            .iter()
            .enumerate()
            .map(|(me, lock)| {
                let (barrier, deadline_nanos, last, repeats) =
                    (&barrier, &deadline_nanos, &last, &repeats);
                s.spawn(move || {
                    barrier.wait();
                    let mut count = 0u64;
                    let mut handoffs = Vec::new();
                    let mut cross = Vec::new();
                    loop {
                        let guard = lock_waited(lock);
                        let at = nanos_since(base);
                        if at >= deadline_nanos.load(Ordering::Acquire) {
                            guard.unlock().unwrap();
                            return (count, handoffs, cross);
                        }
                        match last.acquired(me, at) {
                            Taken::First => {}
                            Taken::Again => {
                                repeats.fetch_add(1, Ordering::Relaxed);
                            }
                            Taken::From(previous, took) => {
                                handoffs.push(took);
                                if client_of[previous] != client_of[me] {
                                    cross.push(took);
                                }
                            }
                        }
                        count += 1;
                        last.unlocking(nanos_since(base));
                        guard.unlock().unwrap();
                    }
                })
            })
            .collect();
        barrier.wait();
        let start = nanos_since(base);
        deadline_nanos.store(
            start + u64::try_from(duration.as_nanos()).unwrap(),
            Ordering::Release,
        );
        thread::sleep(duration);
        let drain_start = Instant::now();
        for handle in handles {
            let (count, mut own, mut cross) = handle.join().unwrap();
            counts.push(count);
            handoffs.append(&mut own);
            cross_client.append(&mut cross);
        }
        drain = drain_start.elapsed();
    });
    let (slow, longest) = take_waits();
    let (per_sec, min_max, same_thread_share) =
        rates(&counts, repeats.load(Ordering::Relaxed), duration);
    Contended {
        per_sec,
        min_max,
        same_thread_share,
        counts,
        drain,
        slow,
        longest,
        handoffs,
        cross_client,
    }
}

// ------------------------------------------------------ own measurements --

/// Runs `cases` in interleaved blocks (so slow drift hits all of them alike)
/// and returns each call's duration per case.
pub(crate) fn interleaved(
    cases: &mut [(&'static str, &mut dyn FnMut())],
    warmup: usize,
    blocks: usize,
    per_block: usize,
) -> Vec<Vec<Duration>> {
    for (_, f) in cases.iter_mut() {
        for _ in 0..warmup {
            f();
        }
    }
    let mut times = vec![Vec::with_capacity(blocks * per_block); cases.len()];
    for _ in 0..blocks {
        for (i, (_, f)) in cases.iter_mut().enumerate() {
            for _ in 0..per_block {
                let t = Instant::now();
                f();
                times[i].push(t.elapsed());
            }
        }
    }
    times
}
