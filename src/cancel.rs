//! [`CancellationToken`]: a way for another thread to end a blocking wait
//! (Redisson's `lockInterruptibly`, where Java interrupts the thread).
//!
//! A handle made [`cancellable`](crate::Lock::cancellable) by a token checks
//! it before each attempt and wakes from its park the moment the token is
//! cancelled: [`cancel`](CancellationToken::cancel) runs the wakers the
//! parked waits registered, each of which notifies its waiter under the
//! subscriber's mutex (the waiter checks the token under the same mutex
//! before it parks, so no cancel is missed between the check and the park).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

/// A wake-up a parked wait registered with a token.
type Waker = Box<dyn Fn() + Send + Sync>;

/// Ends the blocking waits of the handles it was given to, from any thread.
///
/// Clone it to share it; every clone cancels the same waits. Once
/// cancelled, it stays cancelled: a wait that starts afterwards fails at
/// once. A cancelled wait returns [`Error::Cancelled`](crate::Error::Cancelled)
/// and leaves nothing behind: no hold, no fair-queue entry, no permit. A
/// cancel that races with an acquisition may lose: the call then returns
/// the guard, which you own as usual.
///
/// ```
/// use std::time::Duration;
/// use redisync::CancellationToken;
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let held = client.lock("jobs").lock()?;
///
/// let token = CancellationToken::new();
/// let lock = client.lock("jobs").cancellable(&token);
/// let waiter = std::thread::spawn(move || lock.lock().map(drop));
/// std::thread::sleep(Duration::from_millis(50));
/// token.cancel();
/// let err = waiter.join().unwrap().unwrap_err();
/// assert!(err.is_cancelled());
/// drop(held);
/// # Ok::<(), redisync::Error>(())
/// ```
#[doc(alias = "lockInterruptibly")]
#[doc(alias = "interrupt")]
#[derive(Clone, Default)]
pub struct CancellationToken {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    next_id: AtomicU64,
    wakers: Mutex<Vec<(u64, Waker)>>,
}

impl std::fmt::Debug for CancellationToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancellationToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl CancellationToken {
    /// A token not cancelled yet.
    ///
    /// ```
    /// let token = redisync::CancellationToken::new();
    /// assert!(!token.is_cancelled());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every wait of the handles this token was given to, now and
    /// from now on. Returns at once; the waits return within about one
    /// round trip (an attempt already sent is not interrupted).
    ///
    /// ```
    /// let token = redisync::CancellationToken::new();
    /// token.cancel();
    /// assert!(token.is_cancelled());
    /// ```
    pub fn cancel(&self) {
        // Release: what the canceller wrote before `cancel` is visible to
        // a thread that sees `is_cancelled` (Acquire). A waker registered
        // meanwhile is not missed either way: `on_cancel` pushes it under
        // the wakers' mutex, which this call takes after the store.
        self.inner.cancelled.store(true, Ordering::Release);
        // Take the wakers out first: a waker locks the subscriber's state,
        // and a wait deregistering itself under that lock must not meet
        // this mutex held.
        let wakers = std::mem::take(&mut *self.inner.wakers.lock());
        for (_, wake) in &wakers {
            wake();
        }
    }

    /// Whether [`cancel`](Self::cancel) was called on this token or a clone.
    ///
    /// ```
    /// let token = redisync::CancellationToken::new();
    /// let clone = token.clone();
    /// clone.cancel();
    /// assert!(token.is_cancelled());
    /// ```
    pub fn is_cancelled(&self) -> bool {
        // Acquire: pairs with `cancel`'s Release.
        self.inner.cancelled.load(Ordering::Acquire)
    }

    /// Registers `wake` to run on cancel (at once if already cancelled);
    /// dropping the returned registration removes it.
    pub(crate) fn on_cancel(&self, wake: Waker) -> Registration<'_> {
        // Relaxed: only uniqueness matters; fetch_add is atomic in any order.
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        self.inner.wakers.lock().push((id, wake));
        // A cancel between the push and here took the waker with it or
        // finds it; one that came before the push would miss it: run it.
        if self.is_cancelled() {
            let taken = {
                let mut wakers = self.inner.wakers.lock();
                wakers
                    .iter()
                    .position(|(i, _)| *i == id)
                    .map(|at| wakers.swap_remove(at))
            };
            if let Some((_, wake)) = taken {
                wake();
            }
        }
        Registration { token: self, id }
    }
}

/// Sleeps for `length`, or until `token` is cancelled if one is given.
pub(crate) fn pause(token: Option<&CancellationToken>, length: std::time::Duration) {
    let Some(token) = token else {
        std::thread::sleep(length);
        return;
    };
    let woken = Arc::new((Mutex::new(false), parking_lot::Condvar::new()));
    let waker = Arc::clone(&woken);
    let _registration = token.on_cancel(Box::new(move || {
        *waker.0.lock() = true;
        waker.1.notify_one();
    }));
    let until = std::time::Instant::now().checked_add(length);
    let mut cancelled = woken.0.lock();
    while !*cancelled {
        match until {
            Some(until) => {
                if woken.1.wait_until(&mut cancelled, until).timed_out() {
                    return;
                }
            }
            None => woken.1.wait(&mut cancelled),
        }
    }
}

/// A waker registered with a token; removed when dropped.
pub(crate) struct Registration<'a> {
    token: &'a CancellationToken,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.token
            .inner
            .wakers
            .lock()
            .retain(|(id, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn cancel_runs_each_registered_waker_once_and_later_ones_at_once() {
        let token = CancellationToken::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = || {
            let runs = Arc::clone(&runs);
            Box::new(move || {
                // SeqCst: a test counter read across threads (any order
                // would do; the strongest needs no argument).
                runs.fetch_add(1, Ordering::SeqCst);
            }) as Waker
        };
        let first = token.on_cancel(counted());
        let removed = token.on_cancel(counted());
        drop(removed);
        token.cancel();
        token.cancel();
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the live waker, once");
        drop(first);
        let _late = token.on_cancel(counted());
        assert_eq!(runs.load(Ordering::SeqCst), 2, "a late waker runs at once");
        assert!(token.inner.wakers.lock().is_empty());
    }
}
