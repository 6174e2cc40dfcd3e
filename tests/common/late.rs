//! The setups the tests of late requests and exact undos (issue 21) share:
//! `late_commands.rs` for the reentrant lock, `exact_undo.rs` for the
//! other lock kinds.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redisync::{Client, OwnedLock, OwnedLockGuard};

use super::TestServer;

/// A client of `url` with a pool of four connections and `response_timeout`.
pub fn client_for(url: &str, response_timeout: Duration) -> Client {
    Client::builder()
        .redis_url(url)
        .pool_size(4)
        .response_timeout(response_timeout)
        .build()
        .unwrap()
}

/// Warms a client before a fault: its scripts loaded and a few pooled
/// connections open, by three threads that each take and release
/// `<name>:warm:<i>` with `take_and_release`.
pub fn warm(name: &str, take_and_release: impl Fn(&str) + Sync) {
    std::thread::scope(|s| {
        for i in 0..3 {
            let name = format!("{name}:warm:{i}");
            let take_and_release = &take_and_release;
            s.spawn(move || take_and_release(&name));
        }
    });
}

/// Fault 1 of issue 21: with `server` (a standalone server, or the master
/// of the lock's slot) frozen for `freeze`, one thread's
/// `try_lock_for(100 ms)` on `lock` fails (within the freeze: its request
/// waits in the frozen server) while another thread's `lock()`, sent 20 ms
/// later, waits; then the server resumes (before anything is asserted, so
/// a shared cluster is never left frozen). Returns that other thread, whose
/// `lock()` is still under way. `what` names the case in a failure.
pub fn two_threads_on_a_frozen_server(
    server: &TestServer,
    lock: &OwnedLock,
    freeze: Duration,
    what: &str,
) -> JoinHandle<redisync::Result<OwnedLockGuard>> {
    server.pause();
    let resumed_at = Instant::now() + freeze;
    let first_thread = {
        let lock = lock.clone();
        std::thread::spawn(move || lock.try_lock_for(Duration::from_millis(100)))
    };
    std::thread::sleep(Duration::from_millis(20));
    let other_thread = {
        let lock = lock.clone();
        std::thread::spawn(move || lock.lock())
    };
    let timed_out = first_thread.join().unwrap();
    let on_time = Instant::now() < resumed_at;
    std::thread::sleep(resumed_at.saturating_duration_since(Instant::now()));
    server.resume();
    assert!(
        timed_out.is_err(),
        "{what}from a frozen server: {timed_out:?}"
    );
    assert!(on_time, "{what}the 100 ms attempt outlived the freeze");
    other_thread
}
