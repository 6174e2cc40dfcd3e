//! Four workers on two clients meet at a barrier after each of three
//! phases: none starts phase n+1 before all four have finished phase n.
//! (A redisync-only primitive: Redisson has no distributed barrier.)
//!
//! Runs on the in-memory backend by default; set `REDIS_URL` to run on Redis:
//!
//! ```text
//! cargo run --example barrier
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example barrier
//! ```
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use redisync::{Client, MemoryBackend};

const WORKERS: u32 = 4;
const PHASES: u32 = 3;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").ok();
    let shared = MemoryBackend::new(); // two clients on it: like two processes
    let client = || match &url {
        Some(url) => Client::open(url),
        None => Client::builder().backend(shared.clone()).build(),
    };
    let (a, b) = (client()?, client()?);
    let on = url.as_deref().unwrap_or("the in-memory backend");
    println!("redisync barrier on {on}");
    let name = format!("redisync:example:barrier:{}", std::process::id());
    let started = Instant::now();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|i| {
                let barrier = [&a, &b][i as usize % 2].barrier(name.clone(), WORKERS);
                s.spawn(move || -> redisync::Result<()> {
                    for phase in 0..PHASES {
                        // Uneven work: worker i takes (i + 1) × 50 ms.
                        std::thread::sleep(Duration::from_millis(50) * (i + 1));
                        let generation = barrier.wait()?;
                        println!(
                            "worker {i} passed phase {phase} (generation {generation}) at {:?}",
                            started.elapsed()
                        );
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
    let barrier = a.barrier(name, WORKERS);
    println!(
        "generations completed: {}, arrivals waiting: {}",
        barrier.generation()?,
        barrier.arrived()?
    );
    barrier.delete()?;
    Ok(())
}
