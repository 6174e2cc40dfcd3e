//! Holder identity: `<client uuid>:<thread number>`, Redisson's format.
//!
//! Redisson uses the Java thread id; we give each thread a process-wide
//! number on first use, so two threads of one process never share an id and a
//! reused OS thread id cannot make a new thread look like an old holder.

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_THREAD_NUMBER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    // Relaxed: only uniqueness matters; fetch_add is atomic in any order.
    static THREAD_NUMBER: u64 = NEXT_THREAD_NUMBER.fetch_add(1, Ordering::Relaxed);
}

/// The calling thread's number, assigned on first use and never reused.
pub(crate) fn current_thread_number() -> u64 {
    THREAD_NUMBER.with(|n| *n)
}

/// A lock holder that is not a thread (Redisson's `lock(threadId)` with an
/// id of your choosing): take a lock on its behalf with
/// [`Lock::owned_by`](crate::Lock::owned_by), and the guard,
/// an [`OwnedLockGuard`](crate::OwnedLockGuard), is `Send`: hand it to
/// another thread, which may unlock it, extend it, or take the lock again
/// for the same owner.
///
/// Each `LockOwner::new()` is a holder of its own, numbered from the same
/// process-wide sequence as threads, so it never shares a hash field with a
/// thread or another owner; clones are the same owner. Reentrancy is per
/// owner: any thread that takes the lock for an owner that holds it
/// re-enters (the hold count grows, and each hold needs its own release),
/// and the owner's holds and a thread's own holds of one lock exclude each
/// other like any two holders.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let job = redisync::LockOwner::new();
/// let guard = client.lock("reports").owned_by(&job).lock()?;
/// std::thread::spawn(move || guard.unlock()).join().unwrap()?; // released elsewhere
/// assert!(!client.lock("reports").is_locked()?);
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockOwner {
    number: u64,
}

impl LockOwner {
    /// A new owner, distinct from every thread and every other owner.
    ///
    /// ```
    /// let (a, b) = (redisync::LockOwner::new(), redisync::LockOwner::new());
    /// assert_ne!(a, b);
    /// assert_eq!(a.clone(), a);
    /// ```
    pub fn new() -> Self {
        LockOwner {
            // Relaxed: only uniqueness matters (as for thread numbers).
            number: NEXT_THREAD_NUMBER.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Its number: the second half of its holder id
    /// (`<client uuid>:<number>`, in the place of Redisson's thread id).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let owner = redisync::LockOwner::new();
    /// let _guard = client.lock("jobs").owned_by(&owner).lock()?;
    /// let holders = client.inspect("jobs")?.holders;
    /// assert_eq!(holders[0].id, format!("{}:{}", client.id(), owner.number()));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[doc(alias = "threadId")]
    pub fn number(&self) -> u64 {
        self.number
    }
}

impl Default for LockOwner {
    fn default() -> Self {
        Self::new()
    }
}

pub(crate) mod sealed {
    /// What the crate needs of a guard's holder kind.
    pub trait Sealed {
        /// Whether the holder is an explicit owner (its hold counts are
        /// process-wide) rather than the calling thread (thread-local).
        const EXPLICIT: bool;
        /// Its number, read on the acquiring thread.
        fn number(&self) -> u64;
        /// What a [`Lock`](crate::Lock) handle of this kind keeps to
        /// name its holder: nothing for the calling thread (so the handle
        /// stays `Send + Sync`), the owner for an explicit one.
        type Who: Clone + Send + Sync;
        /// The holder a handle keeping `who` acquires for (on the
        /// acquiring thread).
        fn of(who: &Self::Who) -> Self;
        /// The explicit owner `who` names, if any.
        fn owner(who: &Self::Who) -> Option<&super::LockOwner>;
    }
}

/// Who holds a [`LockGuard`](crate::LockGuard): the thread that took it
/// ([`HolderIsTheThread`], the default; the guard is `!Send`) or an explicit
/// [`LockOwner`] (the guard is `Send`). Sealed: these two are all there is.
///
/// ```
/// fn holds<H: redisync::GuardHolder>(guard: &redisync::LockGuard<H>) -> bool {
///     !guard.is_lost()
/// }
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// assert!(holds(&client.lock("a").lock()?));
/// assert!(holds(&client.lock("b").owned_by(&redisync::LockOwner::new()).lock()?));
/// # Ok::<(), redisync::Error>(())
/// ```
pub trait GuardHolder: sealed::Sealed {}

impl sealed::Sealed for HolderIsTheThread {
    const EXPLICIT: bool = false;
    fn number(&self) -> u64 {
        current_thread_number()
    }
    type Who = ();
    fn of(_: &()) -> Self {
        HolderIsTheThread::new()
    }
    fn owner(_: &()) -> Option<&LockOwner> {
        None
    }
}
impl GuardHolder for HolderIsTheThread {}

impl sealed::Sealed for LockOwner {
    const EXPLICIT: bool = true;
    fn number(&self) -> u64 {
        self.number
    }
    type Who = LockOwner;
    fn of(who: &LockOwner) -> Self {
        who.clone()
    }
    fn owner(who: &LockOwner) -> Option<&LockOwner> {
        Some(who)
    }
}
impl GuardHolder for LockOwner {}

/// The hash field naming a holder: `<client uuid>:<thread number>`.
pub(crate) fn holder_id(client_id: &str, thread: u64) -> String {
    format!("{client_id}:{thread}")
}

thread_local! {
    /// The holder id this thread built last. Every hold keeps its holder's
    /// id, and a thread takes its locks for one holder as a rule, so its
    /// 100,000 holds share one string instead of keeping a copy each.
    static LAST_HOLDER_ID: RefCell<Option<(u64, Arc<str>)>> = const { RefCell::new(None) };
}

/// [`holder_id`], shared with this thread's earlier holds of the same
/// holder.
pub(crate) fn shared_holder_id(client_id: &str, thread: u64) -> Arc<str> {
    let fresh = || Arc::<str>::from(holder_id(client_id, thread));
    LAST_HOLDER_ID
        .try_with(|last| {
            let mut last = last.borrow_mut();
            match &*last {
                // Built from (some client, `thread`): it is this client's
                // when it starts with its id and has the same length.
                Some((number, id))
                    if *number == thread
                        && id.starts_with(client_id)
                        && id.len() == client_id.len() + 1 + decimal_digits(thread) =>
                {
                    Arc::clone(id)
                }
                _ => {
                    let id = fresh();
                    *last = Some((thread, Arc::clone(&id)));
                    id
                }
            }
        })
        // During thread teardown: a copy of its own.
        .unwrap_or_else(|_| fresh())
}

/// How many decimal digits `n` is written with.
fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
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
/// To hand a held lock to another thread, take it for an explicit
/// [`LockOwner`] instead ([`Lock::owned_by`](crate::Lock::owned_by)): its
/// guard, an [`OwnedLockGuard`](crate::OwnedLockGuard), is `Send`. Or use a
/// [`Semaphore`](crate::Semaphore), whose permits have no owner
/// ([`SemaphorePermit`](crate::SemaphorePermit) is `Send`).
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

    #[test]
    fn a_shared_holder_id_is_the_holder_id_of_its_own_client_and_thread() {
        for (client, thread) in [
            ("ab", 7),
            ("ab", 7),
            ("abc", 7),
            ("ab", 17),
            ("a", 7),
            ("ab", 0),
        ] {
            assert_eq!(
                &*shared_holder_id(client, thread),
                holder_id(client, thread)
            );
        }
        let (first, again) = (shared_holder_id("u", 12), shared_holder_id("u", 12));
        assert!(Arc::ptr_eq(&first, &again), "one string for one holder");
        for n in [0, 9, 10, 99, 100, u64::MAX] {
            assert_eq!(decimal_digits(n), n.to_string().len());
        }
    }
}
