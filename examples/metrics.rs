//! The metrics a client records (feature `metrics`), rendered in
//! Prometheus' text format: `cargo run --features metrics --example metrics`
//! (`REDIS_URL=redis://127.0.0.1:6379/` to run it on Redis).
//!
//! A service would serve `handle.render()` on its `/metrics` endpoint (or
//! let `metrics-exporter-prometheus` listen itself with its `http-listener`
//! feature); any other `metrics` exporter works the same way.

#![allow(clippy::print_stdout)]

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    let builder = redisync::Client::builder();
    let client = match std::env::var("REDIS_URL") {
        Ok(url) => builder.redis_url(url).build()?,
        Err(_) => builder.backend(redisync::MemoryBackend::new()).build()?,
    };

    let lock = client.lock("metrics:example");
    let guard = lock.lock()?;
    // Another thread waits for it, then gives up: a timeout.
    let waiter = std::thread::spawn(move || {
        lock.try_lock_for(Duration::from_millis(50))
            .map(|g| g.is_none())
    });
    assert!(waiter.join().map_err(|_| "waiter panicked")??);
    guard.unlock()?;

    let slots = client.semaphore("metrics:slots");
    slots.try_set_permits(2)?;
    drop(slots.acquire(1)?);

    for line in handle
        .render()
        .lines()
        .filter(|line| line.starts_with("redisync_"))
    {
        println!("{line}");
    }
    Ok(())
}
