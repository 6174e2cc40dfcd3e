//! Readers of two clients share a read-write lock, a writer excludes them,
//! and a writer downgrades to a reader.
//!
//! Runs on the in-memory backend by default; set `REDIS_URL` to run on Redis:
//!
//! ```text
//! cargo run --example rw_lock
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example rw_lock
//! ```
#![allow(clippy::print_stdout)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redisync::{Client, Lock, MemoryBackend};

/// Whether another thread (another holder) could take `lock` right now.
fn free_for_others(lock: &Lock) -> Result<bool, Box<dyn std::error::Error>> {
    let lock = lock.clone();
    let took = std::thread::spawn(move || Ok::<_, redisync::Error>(lock.try_lock()?.is_some()));
    Ok(took.join().map_err(|_| "a thread panicked")??)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").ok();
    let shared = MemoryBackend::new(); // two clients on it: like two processes
    let client = || match &url {
        Some(url) => Client::open(url),
        None => Client::builder().backend(shared.clone()).build(),
    };
    let (a, b) = (client()?, client()?);
    let on = url.as_deref().unwrap_or("the in-memory backend");
    println!("redisync read-write lock on {on}");
    let name = format!("redisync:example:rw:{}", std::process::id());
    let rw = a.read_write_lock(name.clone());

    // Six readers on two clients, each reading for 100 ms: they overlap.
    let (now, max) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let started = Instant::now();
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..6)
            .map(|i| {
                let read = [&a, &b][i % 2].read_write_lock(name.clone()).read_lock();
                let (now, max) = (&now, &max);
                s.spawn(move || -> redisync::Result<()> {
                    let guard = read.lock()?;
                    max.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(100));
                    now.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock()
                })
            })
            .collect();
        for reader in readers {
            reader.join().map_err(|_| "a reader thread panicked")??;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    println!(
        "6 readers of 100 ms each took {:?}; max concurrent readers: {}",
        started.elapsed(),
        max.load(Ordering::SeqCst)
    );

    // A writer excludes readers and other writers.
    let write = rw.write_lock().lock()?;
    println!(
        "writer holds it: another reader may enter: {}, another writer: {}",
        free_for_others(&rw.read_lock())?,
        free_for_others(&rw.write_lock())?
    );

    // Downgrade: the writer takes the read lock, then releases the write lock.
    let read = rw.read_lock().lock()?;
    write.unlock()?;
    println!(
        "downgraded to a reader: another reader may enter: {}, a writer: {}",
        free_for_others(&rw.read_lock())?,
        free_for_others(&rw.write_lock())?
    );
    // The reverse, read -> write, is refused at once (it would wait for itself).
    match rw.write_lock().try_lock() {
        Err(e) if e.is_invalid_argument() => println!("upgrade refused: {e}"),
        other => println!("upgrade: unexpected {:?}", other.map(|g| g.is_some())),
    }
    read.unlock()?;
    Ok(())
}
