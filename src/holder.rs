//! Holder identity: `<client uuid>:<thread number>`, Redisson's format.
//!
//! Redisson uses the Java thread id; we give each thread a process-wide
//! number on first use, so two threads of one process never share an id and a
//! reused OS thread id cannot make a new thread look like an old holder.

use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_THREAD_NUMBER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_NUMBER: u64 = NEXT_THREAD_NUMBER.fetch_add(1, Ordering::Relaxed);
}

/// The calling thread's number, assigned on first use and never reused.
pub(crate) fn current_thread_number() -> u64 {
    THREAD_NUMBER.with(|n| *n)
}

/// The hash field naming a holder: `<client uuid>:<thread number>`.
pub(crate) fn holder_id(client_id: &str, thread: u64) -> String {
    format!("{client_id}:{thread}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_get_distinct_stable_numbers() {
        let here = current_thread_number();
        assert_eq!(here, current_thread_number());
        let there = std::thread::spawn(current_thread_number).join().unwrap();
        assert_ne!(here, there);
        assert_eq!(holder_id("u", 7), "u:7");
    }
}
