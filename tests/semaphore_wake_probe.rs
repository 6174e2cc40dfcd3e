//! A probe for a known defect (open): two threads of one client passing a
//! one-permit semaphore back and forth on fresh names sometimes wait out
//! the 30 s fallback (about one run of 20 rounds in two, on a 2-core
//! machine), i.e. a semaphore wake is lost when a round starts. Found this
//! session; the cause is not pinned down (see the session note). Run it with
//! `cargo test --test semaphore_wake_probe -- --ignored --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;
use std::time::{Duration, Instant};
#[test]
#[ignore = "known open defect: a semaphore wake is sometimes lost at a round start (30 s stall)"]
fn two_threads_pass_a_one_permit_semaphore_without_stalling() {
    let server = common::TestServer::start();
    let client = redisync::Client::builder()
        .redis_url(server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    for round in 0..20 {
        let name = common::unique_name("stall");
        let s = client.semaphore(&name);
        assert!(s.try_set_permits(1).unwrap());
        let max = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    let s = client.semaphore(&name);
                    sc.spawn(move || {
                        let mut max = Duration::ZERO;
                        for _ in 0..1500 {
                            let t = Instant::now();
                            let p = s.acquire(1).unwrap();
                            max = max.max(t.elapsed());
                            std::hint::spin_loop();
                            p.release().unwrap();
                        }
                        max
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).max().unwrap()
        });
        eprintln!("round {round}: max acquire {max:?}");
        assert!(max < Duration::from_secs(2), "stall {max:?}");
    }
}
