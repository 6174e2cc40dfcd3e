//! Workers count a latch down; waiters on two clients are all released
//! together when it reaches zero.
//!
//! Runs on the in-memory backend by default; set `REDIS_URL` to run on Redis:
//!
//! ```text
//! cargo run --example latch
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example latch
//! ```
#![allow(clippy::print_stdout)]

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
    println!("redisync count-down latch on {on}");
    let name = format!("redisync:example:latch:{}", std::process::id());
    let ready = a.count_down_latch(name.clone());
    ready.try_set_count(4)?;
    println!("count set to {}", ready.count()?);

    let started = Instant::now();
    let (last_count_down, released) = std::thread::scope(|s| {
        // Six waiters, three per client, block in wait().
        let waiters: Vec<_> = (0..6)
            .map(|i| {
                let latch = [&a, &b][i % 2].count_down_latch(name.clone());
                s.spawn(move || latch.wait().map(|()| Instant::now()))
            })
            .collect();
        // Four workers, two per client, finish their setup 100 ms apart.
        let workers: Vec<_> = (0..4u32)
            .map(|i| {
                let latch = [&a, &b][i as usize % 2].count_down_latch(name.clone());
                s.spawn(move || -> redisync::Result<Instant> {
                    std::thread::sleep(Duration::from_millis(100) * (i + 1));
                    let at = Instant::now();
                    latch.count_down()?;
                    println!("worker {i} counted down at {:?}", at - started);
                    Ok(at)
                })
            })
            .collect();
        let mut last = started;
        for worker in workers {
            last = last.max(worker.join().map_err(|_| "a worker thread panicked")??);
        }
        let mut released = Vec::new();
        for waiter in waiters {
            released.push(waiter.join().map_err(|_| "a waiter thread panicked")??);
        }
        Ok::<_, Box<dyn std::error::Error>>((last, released))
    })?;
    let first = released.iter().min().ok_or("no waiter")?;
    let last = released.iter().max().ok_or("no waiter")?;
    println!(
        "all {} waiters returned from wait() {:?} to {:?} after the last count_down \
         (none before it: {})",
        released.len(),
        first.saturating_duration_since(last_count_down),
        last.saturating_duration_since(last_count_down),
        *first >= last_count_down
    );
    // At zero the latch is open (its key is gone): waiting returns at once,
    // and the count can be set again for another round.
    println!(
        "count now {}; wait_for(1 ms) on the open latch: {}; set again: {}",
        ready.count()?,
        ready.wait_for(Duration::from_millis(1))?,
        ready.try_set_count(1)?
    );
    ready.delete()?;
    Ok(())
}
