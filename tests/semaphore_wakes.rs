//! Two threads of one client pass a one-permit semaphore back and forth,
//! 20 rounds of 1,500 acquisitions each on fresh names: no `acquire(1)` may
//! wait out the 30 s fallback. Before the fix, about one run in two did:
//! a release whose message arrived while a woken waiter's retry was in
//! flight was counted as passed on with that retry's wake, so the waiter
//! parked with the permit free once the other thread stopped (see
//! `ChannelState::pass_on`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;
use std::time::{Duration, Instant};
#[test]
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
