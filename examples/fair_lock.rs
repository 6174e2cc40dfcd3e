//! Queues threads of two clients on a fair lock and shows they are served in
//! arrival order.
//!
//! Runs on the in-memory backend by default; set `REDIS_URL` to run on Redis:
//!
//! ```text
//! cargo run --example fair_lock
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example fair_lock
//! ```
#![allow(clippy::print_stdout)]

use std::sync::mpsc;
use std::time::Duration;

use redisync::{Client, MemoryBackend};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Two clients stand for two processes: they share one queue.
    let url = std::env::var("REDIS_URL").ok();
    let shared = MemoryBackend::new(); // two clients on it: like two processes
    let client = || match &url {
        Some(url) => Client::open(url),
        None => Client::builder().backend(shared.clone()).build(),
    };
    let (a, b) = (client()?, client()?);
    let on = url.as_deref().unwrap_or("the in-memory backend");
    println!("redisync fair lock on {on}");

    let name = format!("redisync:example:fair:{}", std::process::id());
    let lock = a.fair_lock(name.clone());
    let guard = lock.lock()?;

    // While the lock is held, threads arrive one by one (50 ms apart, so
    // each has queued in the store before the next one comes).
    let (served_tx, served_rx) = mpsc::channel();
    let mut threads = Vec::new();
    let mut arrival = Vec::new();
    for i in 0..6 {
        let (client, label) = if i % 2 == 0 { (&a, "a") } else { (&b, "b") };
        let waiter = client.fair_lock(name.clone());
        let served = served_tx.clone();
        let who = format!("{label}{i}");
        arrival.push(who.clone());
        threads.push(std::thread::spawn(move || -> redisync::Result<()> {
            let guard = waiter.lock()?;
            // Sent while holding the lock: the channel's order is the
            // order in which the threads got it.
            let _ = served.send(who);
            std::thread::sleep(Duration::from_millis(5));
            guard.unlock()
        }));
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(served_tx);
    println!("arrived:   {}", arrival.join(" "));
    // One unlock wakes only the head of the queue; each holder's unlock
    // then wakes the next one.
    guard.unlock()?;
    for thread in threads {
        thread.join().map_err(|_| "a waiter thread panicked")??;
    }
    let served: Vec<String> = served_rx.iter().collect();
    println!("served:    {}", served.join(" "));
    println!("first come, first served: {}", served == arrival);

    // A waiter that gives up leaves the queue at once.
    let guard = lock.lock()?;
    let other = b.fair_lock(name);
    let gave_up = std::thread::spawn(move || {
        Ok::<_, redisync::Error>(other.try_lock_for(Duration::from_millis(100))?.is_none())
    })
    .join()
    .map_err(|_| "a waiter thread panicked")??;
    println!("a try_lock_for(100 ms) on a held fair lock timed out: {gave_up}");
    guard.unlock()?;
    println!("unlocked: is_locked={}", lock.is_locked()?);
    Ok(())
}
