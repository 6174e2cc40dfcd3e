//! A request takes a lock on one thread, and a worker thread finishes the
//! request and releases it (an explicit `LockOwner`, whose guard is `Send`);
//! meanwhile a waiter that is told to stop gives up its wait at once (a
//! `CancellationToken`).
//!
//! Runs on the in-memory backend by default; set `REDIS_URL` to run on Redis:
//!
//! ```text
//! cargo run --example handover
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example handover
//! ```
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use redisync::{CancellationToken, Client, LockOwner, MemoryBackend};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").ok();
    let client = match &url {
        Some(url) => Client::open(url)?,
        None => Client::builder().backend(MemoryBackend::new()).build()?,
    };
    let on = url.as_deref().unwrap_or("the in-memory backend");
    println!("redisync handover on {on}");
    let name = format!("redisync:example:handover:{}", std::process::id());

    // The request's own identity holds the lock, not the accepting thread.
    let request = LockOwner::new();
    let guard = client.lock(name.clone()).owned_by(&request).lock()?;
    println!("request {} took {name}", request.number());

    // A waiter on another thread, stopped by a token before the lock frees.
    let token = CancellationToken::new();
    let waiting = client.lock(name.clone()).cancellable(&token);
    let waiter = std::thread::spawn(move || waiting.lock().map(drop));
    std::thread::sleep(Duration::from_millis(100));
    let stopped = Instant::now();
    token.cancel();
    let outcome = waiter.join().map_err(|_| "the waiter panicked")?;
    match outcome {
        Err(err) if err.is_cancelled() => {
            println!("waiter stopped after {:?}: {err}", stopped.elapsed());
        }
        other => return Err(format!("the waiter was not cancelled: {other:?}").into()),
    }

    // A worker finishes the request and releases the lock there.
    let worker = std::thread::spawn(move || -> redisync::Result<()> {
        std::thread::sleep(Duration::from_millis(50)); // the work
        guard.unlock()
    });
    worker.join().map_err(|_| "the worker panicked")??;
    let free = !client.lock(name).is_locked()?;
    println!("released by the worker thread: free again = {free}");
    if !free {
        return Err("the lock is still held".into());
    }
    Ok(())
}
