//! The barging baseline of the contended runs: the lock a polling peer
//! library builds on Redis, with no library around it. `SET name token NX
//! PX 30000` takes it, a compare-and-delete script releases it, and a
//! failed `SET` sleeps a random 0-200 ms before the next (the default retry
//! delay of rslock and redlock-rs); each thread has its own connection.
//! A thread that releases and at once asks again wins against the sleepers
//! almost every time: that re-take is where a barging lock's throughput
//! comes from, and why its per-thread spread is wide.

use crate::common::TestServer;
use crate::*;

/// The compare-and-delete release every polling peer uses.
const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('del', KEYS[1]) else return 0 end";
/// The peers' default retry delay: a failed take sleeps a random time below this.
const RETRY_DELAY_MS: u64 = 200;

/// Like [`contended_for`], with `threads` threads on the barging lock.
pub(crate) fn barging_for(server: &TestServer, threads: usize, duration: Duration) -> Contended {
    let name = unique_name("bench:own:contended:barging");
    let release = redis::Script::new(RELEASE);
    let barrier = Barrier::new(threads + 1);
    let deadline_nanos = AtomicU64::new(u64::MAX);
    let base = Instant::now();
    let last = LastHolder::new();
    let repeats = AtomicU64::new(0);
    let longest_ns = AtomicU64::new(0);
    let mut counts = Vec::new();
    let mut handoffs = Vec::new();
    let mut drain = Duration::ZERO;
    thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|me| {
                let (barrier, deadline_nanos, last, repeats, longest_ns, name, release) = (
                    &barrier,
                    &deadline_nanos,
                    &last,
                    &repeats,
                    &longest_ns,
                    &name,
                    &release,
                );
                let mut conn = server.connection();
                s.spawn(move || {
                    let token = format!("{me}:{}", std::process::id());
                    let mut rng = 0x9E37_79B9_7F4A_7C15_u64
                        ^ (me as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    barrier.wait();
                    let mut count = 0u64;
                    let mut own = Vec::new();
                    loop {
                        let asked = Instant::now();
                        loop {
                            let taken: Option<String> = redis::cmd("SET")
                                .arg(name)
                                .arg(&token)
                                .arg("NX")
                                .arg("PX")
                                .arg(30_000)
                                .query(&mut conn)
                                .unwrap();
                            if taken.is_some() {
                                break;
                            }
                            // xorshift64: the random part of the retry delay.
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            thread::sleep(Duration::from_millis(rng % RETRY_DELAY_MS));
                        }
                        let waited = u64::try_from(asked.elapsed().as_nanos()).unwrap_or(u64::MAX);
                        longest_ns.fetch_max(waited, Ordering::Relaxed);
                        let at = nanos_since(base);
                        let done = at >= deadline_nanos.load(Ordering::Acquire);
                        if !done {
                            match last.acquired(me, at) {
                                Taken::First => {}
                                Taken::Again => {
                                    repeats.fetch_add(1, Ordering::Relaxed);
                                }
                                Taken::From(_, took) => own.push(took),
                            }
                            count += 1;
                            last.unlocking(nanos_since(base));
                        }
                        let released: i64 =
                            release.key(name).arg(&token).invoke(&mut conn).unwrap();
                        assert_eq!(released, 1, "the barging lock was ours");
                        if done {
                            return (count, own);
                        }
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
            let (count, mut own) = handle.join().unwrap();
            counts.push(count);
            handoffs.append(&mut own);
        }
        drain = drain_start.elapsed();
    });
    let (per_sec, min_max, same_thread_share) =
        rates(&counts, repeats.load(Ordering::Relaxed), duration);
    Contended {
        per_sec,
        min_max,
        same_thread_share,
        counts,
        drain,
        // Waiting out a retry delay is how it works, not a missed wake-up.
        slow: 0,
        longest: Duration::from_nanos(longest_ns.load(Ordering::Relaxed)),
        handoffs,
        cross_client: Vec::new(),
    }
}
