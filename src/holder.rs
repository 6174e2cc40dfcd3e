//! Holder identity: `<client uuid>:<thread number>`, Redisson's format.
//!
//! Redisson uses the Java thread id; we give each thread a process-wide
//! number on first use, so two threads of one process never share an id and a
//! reused OS thread id cannot make a new thread look like an old holder.

use std::fmt;
use std::marker::PhantomData;
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

/// The marker that makes a lock guard `!Send`, named so that the compiler
/// says why when a guard is moved to another thread: the holder of a lock
/// is the thread that took it (its id is `<client uuid>:<thread number>`),
/// so only that thread can release it, renew it or take it again.
///
/// [`LockGuard`](crate::LockGuard), and through it
/// [`MultiLockGuard`](crate::MultiLockGuard) and
/// [`RedLockGuard`](crate::RedLockGuard), contain one. Sending a guard to
/// another thread fails to compile:
///
/// ```compile_fail,E0277
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let guard = client.lock("jobs").lock()?;
/// std::thread::spawn(move || drop(guard)); // error[E0277]
/// # Ok::<(), redisync::Error>(())
/// ```
///
/// with an error whose notes name this type (rustc 1.95):
///
/// ```text
/// error[E0277]: `*const ()` cannot be sent between threads safely
///     |     std::thread::spawn(move || drop(guard));
///     |                        `*const ()` cannot be sent between threads safely
/// note: required because it appears within the type `PhantomData<*const ()>`
/// note: required because it appears within the type `HolderIsTheThread`
///     | pub struct HolderIsTheThread {
/// note: required because it appears within the type `LockGuard`
/// note: required because it's used within this closure
/// note: required by a bound in `spawn`
/// ```
///
/// To hand work to another thread, release the lock first and take it
/// there, or use a [`Semaphore`](crate::Semaphore), whose permits have no
/// owner ([`SemaphorePermit`](crate::SemaphorePermit) is `Send`).
pub struct HolderIsTheThread {
    /// Not `Send`: a lock's holder is the thread that took it.
    _not_send: PhantomData<*const ()>,
}

impl HolderIsTheThread {
    pub(crate) fn new() -> Self {
        HolderIsTheThread {
            _not_send: PhantomData,
        }
    }
}

impl fmt::Debug for HolderIsTheThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HolderIsTheThread")
    }
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
