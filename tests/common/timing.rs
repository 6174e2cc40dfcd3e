//! The timing bounds every test file shares: one value each, generous
//! enough for a loaded 2-core machine (the suite must pass with both CPUs
//! busy), so that no file carries its own copy. A bound a test needs for
//! a reason of its own (a JVM's start, a fault's recovery) is named for
//! that reason in its file.

use std::time::Duration;

/// A lease long enough that only an unlock (never expiry) frees a lock
/// within a test.
pub const LONG_LEASE: Duration = Duration::from_secs(30);
/// Upper bound for anything expected to take a few milliseconds.
pub const PROMPT: Duration = Duration::from_secs(2);
/// How long a test lets a freshly spawned waiter reach its park (a test
/// that relies on it also checks what it assumed, or tolerates a late one).
pub const SETTLE: Duration = Duration::from_millis(400);
/// How long a test waits for a report, or for something that should
/// happen soon, before it declares a thread stuck.
pub const STUCK: Duration = Duration::from_secs(20);
