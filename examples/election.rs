//! A singleton job on three candidates (standing for three processes):
//! exactly one leads at a time, each leadership has its own term (passed
//! to the job as a fencing token), a resigning leader hands over at once,
//! and an observer sees every change. (A redisync-only primitive: Redisson
//! has no leader election.)
//!
//! Runs on the in-memory backend by default; set `REDIS_URL` to run on Redis:
//!
//! ```text
//! cargo run --example election
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example election
//! ```
#![allow(clippy::print_stdout)]

use std::time::Duration;

use redisync::{Client, LeaderEvent, MemoryBackend};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").ok();
    let shared = MemoryBackend::new(); // clients on it: like processes
    let client = || match &url {
        Some(url) => Client::open(url),
        None => Client::builder().backend(shared.clone()).build(),
    };
    let on = url.as_deref().unwrap_or("the in-memory backend");
    println!("redisync leader election on {on}");
    let name = format!("redisync:example:election:{}", std::process::id());
    let watcher = client()?;
    let observer = watcher.leader_election(name.as_str()).observe()?;
    std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error>> {
        let candidates: Vec<_> = ["host-a", "host-b", "host-c"]
            .into_iter()
            .map(|identity| {
                let client = client();
                let name = name.clone();
                s.spawn(move || -> redisync::Result<u64> {
                    let election = client?.leader_election(name);
                    // Leads once: runs the job, then resigns (the next
                    // candidate in line leads at once).
                    election.run(identity, |leadership| {
                        for step in 0..3 {
                            if leadership.is_lost() {
                                break; // never act as leader once lost
                            }
                            println!("  {identity} (term {}) runs step {step}", leadership.term());
                            std::thread::sleep(Duration::from_millis(30));
                        }
                        leadership.term()
                    })
                })
            })
            .collect();
        let mut terms = Vec::new();
        for candidate in candidates {
            let term = candidate.join().map_err(|_| "a candidate panicked")??;
            terms.push(term);
        }
        terms.sort_unstable();
        assert!(terms.windows(2).all(|w| w[0] < w[1]), "terms must grow");
        Ok(())
    })?;
    let mut elected = 0;
    while let Some(event) = observer.recv_timeout(Duration::from_secs(2)) {
        match event {
            LeaderEvent::Elected(leader) => {
                elected += 1;
                println!("observer: {} leads, term {}", leader.identity, leader.term);
            }
            LeaderEvent::Resigned { term } => println!("observer: term {term} resigned"),
            _ => {}
        }
        if elected == 3 {
            break;
        }
    }
    assert_eq!(elected, 3, "the observer saw every term");
    println!("three terms, one leader at a time");
    Ok(())
}
