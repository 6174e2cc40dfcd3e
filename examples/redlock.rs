//! A RedLock over three independent stores, a MultiLock over two accounts,
//! and a fenced lock whose tokens let a store refuse a stale writer.
//!
//! Runs on three in-memory stores by default; set `REDLOCK_URLS` to three (or
//! five) comma-separated Redis URLs of independent masters to run on Redis:
//!
//! ```text
//! cargo run --example redlock
//! REDLOCK_URLS=redis://127.0.0.1:6379/,redis://127.0.0.1:6380/,redis://127.0.0.1:6381/ \
//!     cargo run --example redlock
//! ```
#![allow(clippy::print_stdout)]

use std::time::Duration;

use redisync::{Client, MemoryBackend, MultiLock, RedLock};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let masters: Vec<Client> = match std::env::var("REDLOCK_URLS") {
        Ok(urls) => urls
            .split(',')
            .map(|url| {
                Client::builder()
                    .redis_url(url.trim())
                    // A dead master must not stall a round for long.
                    .connection_timeout(Duration::from_millis(300))
                    .response_timeout(Duration::from_millis(300))
                    .build()
            })
            .collect::<Result<_, _>>()?,
        Err(_) => (0..3)
            .map(|_| Client::builder().backend(MemoryBackend::new()).build())
            .collect::<Result<_, _>>()?,
    };
    let name = format!("redisync:example:{}", std::process::id());

    let redlock = RedLock::new(masters.iter().map(|m| m.lock(format!("{name}:leader"))))?;
    match redlock.try_lock_for(Duration::from_secs(2))? {
        Some(guard) => {
            println!(
                "RedLock held on {} of {} masters (quorum {})",
                guard.guards().len(),
                masters.len(),
                redlock.quorum()
            );
            guard.unlock()?;
        }
        None => println!("RedLock busy: another holder has a majority"),
    }

    let bank = &masters[0];
    let transfer = MultiLock::new([
        bank.lock(format!("{name}:account:1")),
        bank.lock(format!("{name}:account:2")),
    ])?;
    let both = transfer.lock()?;
    println!("MultiLock holds {} accounts", both.guards().len());
    both.unlock()?;

    // A store that remembers the highest token it accepted refuses a writer
    // whose lock was taken over while it was paused.
    let ledger = bank.fenced_lock(format!("{name}:ledger"));
    let stale = ledger.lock_with_lease(Duration::from_millis(50))?;
    let stale_token = stale.token().ok_or("a fenced lock's guard has a token")?;
    std::thread::sleep(Duration::from_millis(80)); // "paused" past the lease
    match stale.unlock() {
        Err(err) if err.is_not_held() => println!("the paused holder lost the lock: {err}"),
        other => other?,
    }
    let fresh = ledger.lock()?;
    let fresh_token = fresh.token().ok_or("a fenced lock's guard has a token")?;
    let mut highest_accepted = 0;
    // The paused holder's write arrives last, as it would after a GC pause.
    for (who, token) in [("new", fresh_token), ("paused", stale_token)] {
        if token > highest_accepted {
            highest_accepted = token;
            println!("store accepts the {who} holder's write (token {token})");
        } else {
            println!(
                "store refuses the {who} holder's write (token {token} <= {highest_accepted})"
            );
        }
    }
    fresh.unlock()?;
    Ok(())
}
