//! Threads of two clients share a counter under a spin lock (waits that
//! sleep with backoff instead of subscribing), next to a plain lock of the
//! same name: the two are one lock.
//!
//! Runs on the in-memory backend by default; set `REDIS_URL` to run on Redis:
//!
//! ```text
//! cargo run --example spin_lock
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example spin_lock
//! ```
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redisync::{Backoff, Client, MemoryBackend};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").ok();
    let shared = MemoryBackend::new(); // two clients on it: like two processes
    let client = || match &url {
        Some(url) => Client::open(url),
        None => Client::builder().backend(shared.clone()).build(),
    };
    let (a, b) = (client()?, client()?);
    let on = url.as_deref().unwrap_or("the in-memory backend");
    println!("redisync spin lock on {on}");

    let name = format!("redisync:example:spin:{}", std::process::id());
    // Short pauses: many waiters on a lock held for microseconds.
    let backoff = Backoff::exponential(Duration::from_millis(1), Duration::from_millis(16), 2)?;
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut threads = Vec::new();
    for i in 0..4 {
        let client = if i % 2 == 0 { &a } else { &b };
        // One thread in four uses the plain lock: the same lock.
        let lock = if i == 3 {
            client.lock(name.clone())
        } else {
            client.spin_lock_with_backoff(name.clone(), backoff)
        };
        let counter = Arc::clone(&counter);
        threads.push(std::thread::spawn(move || -> redisync::Result<()> {
            for _ in 0..25 {
                let guard = lock.lock()?;
                // Not atomic on purpose: the lock makes it safe.
                let value = counter.load(Ordering::SeqCst);
                counter.store(value + 1, Ordering::SeqCst);
                guard.unlock()?;
            }
            Ok(())
        }));
    }
    for thread in threads {
        thread.join().map_err(|_| "a worker thread panicked")??;
    }
    println!(
        "4 threads x 25 increments: counter = {} in {:?}",
        counter.load(Ordering::SeqCst),
        started.elapsed()
    );

    // A spin waiter gives up on time, however long its pauses.
    let spin = a.spin_lock(name.clone());
    let guard = spin.lock()?;
    let slow = b.spin_lock_with_backoff(name, Backoff::constant(Duration::from_secs(5))?);
    let (gave_up, waited) = std::thread::spawn(move || {
        let started = Instant::now();
        let got = slow.try_lock_for(Duration::from_millis(100))?;
        Ok::<_, redisync::Error>((got.is_none(), started.elapsed()))
    })
    .join()
    .map_err(|_| "a waiter thread panicked")??;
    println!("try_lock_for(100 ms) with 5 s pauses timed out: {gave_up}, after {waited:?}");
    guard.unlock()?;
    println!("unlocked: is_locked={}", spin.is_locked()?);
    Ok(())
}
