//! The hash maps of the client's hot paths: std's `HashMap` with
//! foldhash's fast hasher. Every lock call looks a lock's name, channel or
//! holder up in several of them (the subscriber's channels and waiters,
//! the hold counts, the watchdog's schedule, the local owners), and std's
//! SipHash cost more than a tenth of the client's instructions per
//! acquisition (callgrind). The hasher is still seeded at random per
//! process, so names chosen to collide cannot be computed in advance.

/// A `HashMap` with foldhash's randomly seeded fast hasher; build one with
/// `FastMap::default()`.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
