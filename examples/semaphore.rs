//! Threads of two clients share a pool of permits, and a permit whose holder
//! crashed comes back when its lease runs out.
//!
//! Runs on the in-memory backend by default; set `REDIS_URL` to run on Redis:
//!
//! ```text
//! cargo run --example semaphore
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example semaphore
//! ```
#![allow(clippy::print_stdout)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redisync::{Client, MemoryBackend};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").ok();
    let shared = MemoryBackend::new(); // two clients on it: like two processes
    let client = || match &url {
        Some(url) => Client::open(url),
        None => Client::builder().backend(shared.clone()).build(),
    };
    let (a, b) = (client()?, client()?);
    let on = url.as_deref().unwrap_or("the in-memory backend");
    println!("redisync semaphores on {on}");
    let name = format!("redisync:example:semaphore:{}", std::process::id());

    // A pool of 3 permits; 8 threads on two clients each use a permit 5 times.
    const PERMITS: u64 = 3;
    a.semaphore(name.clone()).try_set_permits(PERMITS)?;
    let (now, max) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let started = Instant::now();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..8)
            .map(|i| {
                let pool = [&a, &b][i % 2].semaphore(name.clone());
                let (now, max) = (&now, &max);
                s.spawn(move || -> redisync::Result<()> {
                    for _ in 0..5 {
                        let permit = pool.acquire(1)?; // blocks while all 3 are out
                        max.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                        now.fetch_sub(1, Ordering::SeqCst);
                        permit.release()?; // or just drop it
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            worker.join().map_err(|_| "a worker thread panicked")??;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    println!(
        "8 threads × 5 uses of 20 ms took {:?}; max concurrent holders: {} (≤ {PERMITS}); \
         available again: {}",
        started.elapsed(),
        max.load(Ordering::SeqCst),
        a.semaphore(name).available_permits()?
    );

    // One slot with leased permits: a worker of client b takes it for 300 ms
    // and "crashes" (its thread ends without releasing).
    let name = format!("redisync:example:expirable:{}", std::process::id());
    let slot = a.permit_expirable_semaphore(name.clone());
    slot.try_set_permits(1)?;
    let crashed = b.permit_expirable_semaphore(name);
    // `acquire_id` (Redisson's `acquire(leaseTime)`): the bare id, which
    // nothing releases when the thread ends, as after a crash.
    let lost = std::thread::spawn(move || crashed.acquire_id(Duration::from_millis(300)))
        .join()
        .map_err(|_| "the worker thread panicked")??;
    let lease = Duration::from_secs(30);
    let free_at_once = slot.try_acquire(lease)?.is_some();
    // A waiter parks until the crashed holder's lease runs out.
    let started = Instant::now();
    let permit = slot
        .try_acquire_for(Duration::from_secs(5), lease)?
        .ok_or("the expired permit did not come back")?;
    println!(
        "after the crash: a permit free at once: {free_at_once}; permit {} taken after {:?}; \
         the crashed worker's late release refused: {}",
        permit.id(),
        started.elapsed(),
        !slot.try_release(&lost)?
    );
    drop(permit); // the guard releases it
    println!("released: available permits: {}", slot.available_permits()?);
    Ok(())
}
