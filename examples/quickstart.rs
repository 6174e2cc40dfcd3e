//! Locks a counter from several threads and two clients.
//!
//! Runs on the in-memory backend by default; set `REDIS_URL` to run on Redis:
//!
//! ```text
//! cargo run --example quickstart
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example quickstart
//! ```
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redisync::{Client, MemoryBackend};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Two clients stand for two processes: they exclude each other.
    let (a, b, backend_name) = match std::env::var("REDIS_URL") {
        Ok(url) => (
            Client::open(&url)?,
            Client::open(&url)?,
            format!("Redis at {url}"),
        ),
        Err(_) => {
            let shared = MemoryBackend::new();
            let a = Client::builder().backend(shared.clone()).build()?;
            let b = Client::builder().backend(shared).build()?;
            (a, b, "the in-memory backend".to_owned())
        }
    };
    println!("redisync quickstart on {backend_name}");

    let lock_name = format!("redisync:quickstart:{}", std::process::id());
    // A counter updated non-atomically inside the lock: any overlap of two
    // critical sections would lose an update.
    let counter = Arc::new(AtomicU64::new(0));
    let per_thread = 50;
    let started = Instant::now();
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let client = if i % 2 == 0 { a.clone() } else { b.clone() };
            let lock = client.lock(lock_name.clone());
            let counter = Arc::clone(&counter);
            std::thread::spawn(move || -> redisync::Result<()> {
                for _ in 0..per_thread {
                    let guard = lock.lock()?;
                    let seen = counter.load(Ordering::Relaxed);
                    std::thread::yield_now();
                    counter.store(seen + 1, Ordering::Relaxed);
                    guard.unlock()?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().map_err(|_| "a worker thread panicked")??;
    }
    let total = counter.load(Ordering::Relaxed);
    println!(
        "4 threads on 2 clients took the lock {total} times in {:?}; no update lost: {}",
        started.elapsed(),
        total == 4 * per_thread
    );

    let lock = a.lock(lock_name);
    let guard = lock.lock_with_lease(Duration::from_secs(5))?;
    println!(
        "held with a 5 s lease: is_locked={}, hold_count={}, ttl={:?}",
        lock.is_locked()?,
        lock.hold_count()?,
        lock.remaining_ttl()?
    );
    guard.unlock()?;
    println!("unlocked: is_locked={}", lock.is_locked()?);
    Ok(())
}
