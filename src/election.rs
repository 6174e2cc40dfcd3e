//! [`LeaderElection`]: one leader in the fleet (redisync only: Redisson
//! has none), with terms, a leader that knows it lost before anyone else
//! can win, and observers fed by pub/sub. Its operations (and its keys)
//! are `ops::election`'s.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::backend::{LockBackend, PubSubConnection};
use crate::ops::election::{self, ElectionKeys, LeaderRecord};
use crate::{Client, Lock, LockGuard, Result};

/// A handle on one leader election; created by
/// [`Client::leader_election`]. Cheap to clone, `Send + Sync`.
///
/// Candidates [`campaign`](Self::campaign) with an identity of their
/// choosing (a host, a pod, an address); they queue in arrival order on a
/// fair lock of the election's own, and the one that gets it is proclaimed
/// leader with a new **term**: a fencing token greater than every earlier
/// term (also after the store lost its data, as a fenced lock's tokens).
/// Its [`Leadership`] keeps the lease alive with the watchdog and says it
/// is lost a margin *before* the lease can run out in the store
/// ([`Leadership::is_lost`]); resigning (or dropping it) hands leadership
/// to the next candidate at once, and a leader that dies is replaced
/// within its lease. Anyone can read the [`current`](Self::current)
/// leader, or [`observe`](Self::observe) every change as it happens
/// (pub/sub, no polling).
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let election = client.leader_election("nightly-compaction");
/// let leadership = election.campaign("host-a")?;
/// assert_eq!(election.current()?.map(|leader| leader.term), Some(leadership.term()));
/// if !leadership.is_lost() {
///     // ... the singleton job, passing leadership.term() to whatever it writes ...
/// }
/// leadership.resign()?;
/// assert_eq!(election.current()?, None);
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "an election handle does nothing by itself: campaign, run or observe with it"]
pub struct LeaderElection {
    client: Client,
    name: String,
    keys: Arc<ElectionKeys>,
    lock: Lock,
    margin: Option<Duration>,
}

impl fmt::Debug for LeaderElection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElection")
            .field("name", &self.name)
            .field("margin", &self.margin)
            .finish_non_exhaustive()
    }
}

/// A leader, as the store records it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The identity it campaigned with.
    pub identity: String,
    /// Its term: greater than every earlier leader's.
    pub term: u64,
    /// When it was proclaimed, in ms since the Unix epoch by the store's
    /// clock.
    pub since_ms: i64,
}

// Not `From`: a public impl would name the hidden `LeaderRecord` in
// `Leader`'s docs (one path per public item, see `redisync::internal`).
impl Leader {
    pub(crate) fn from_record(record: LeaderRecord) -> Leader {
        Leader {
            identity: record.identity,
            term: record.term,
            since_ms: record.since_ms,
        }
    }
}

/// A change of leader, as an [`Observer`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderEvent {
    /// A new term began (also the leader in office when the observer
    /// started).
    Elected(Leader),
    /// The leader of `term` resigned (one that died is followed by the
    /// next `Elected` alone).
    Resigned {
        /// The term that ended.
        term: u64,
    },
}

impl LeaderElection {
    pub(crate) fn new(client: Client, name: String) -> LeaderElection {
        let keys = ElectionKeys::new(&name);
        let lock = Lock::new(
            client.clone(),
            crate::flavor::Flavor::Fair,
            keys.lock.clone(),
        );
        LeaderElection {
            client,
            name,
            keys: Arc::new(keys),
            lock,
            margin: None,
        }
    }

    /// The election's name, as given to the client.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.leader_election("jobs").name(), "jobs");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.client.unmap(&self.name)
    }

    /// This handle, with its leaderships lost `margin` before their lease
    /// can run out (by default a quarter of the lease: 7.5 s of the
    /// default 30 s watchdog timeout). See [`Leadership::is_lost`].
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let election = client.leader_election("jobs").with_margin(std::time::Duration::from_secs(10));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn with_margin(mut self, margin: Duration) -> LeaderElection {
        self.margin = Some(margin);
        self
    }

    /// This handle, with its campaigns ended by `token`: a blocked
    /// [`campaign`](Self::campaign) leaves the queue and returns
    /// [`Error::Cancelled`](crate::Error::Cancelled) promptly.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let token = redisync::CancellationToken::new();
    /// let election = client.leader_election("jobs").cancellable(&token);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn cancellable(&self, token: &crate::CancellationToken) -> LeaderElection {
        LeaderElection {
            lock: self.lock.cancellable(token),
            ..self.clone()
        }
    }

    /// Campaigns as `identity` and blocks until this thread leads.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty identity, one with a line break or
    /// over 256 bytes; a store failure; `Cancelled`.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let leadership = client.leader_election("jobs").campaign("host-a")?;
    /// assert_eq!(leadership.identity(), "host-a");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn campaign(&self, identity: &str) -> Result<Leadership> {
        election::check_identity(identity)?;
        loop {
            let guard = self.lock.lock()?;
            if let Some(leadership) = self.proclaim(guard, identity)? {
                return Ok(leadership);
            }
        }
    }

    /// Campaigns as `identity` for at most `wait`; `Ok(None)` when another
    /// candidate still leads then (this one has left the queue).
    ///
    /// # Errors
    /// As [`campaign`](Self::campaign).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let election = client.leader_election("jobs");
    /// let leader = election.campaign("host-a")?;
    /// let other = std::thread::spawn(move || {
    ///     election.try_campaign_for("host-b", std::time::Duration::from_millis(50)).map(|l| l.is_none())
    /// });
    /// assert!(other.join().unwrap()?);
    /// # drop(leader);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn try_campaign_for(&self, identity: &str, wait: Duration) -> Result<Option<Leadership>> {
        election::check_identity(identity)?;
        let deadline = Instant::now().checked_add(wait);
        loop {
            let left = deadline.map_or(wait, |d| d.saturating_duration_since(Instant::now()));
            let Some(guard) = self.lock.try_lock_for(left)? else {
                return Ok(None);
            };
            if let Some(leadership) = self.proclaim(guard, identity)? {
                return Ok(Some(leadership));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
        }
    }

    /// Campaigns as `identity`, runs `job` while this thread leads, and
    /// resigns when it returns (Curator's `LeaderSelector`). `job` should
    /// check [`Leadership::is_lost`] before each step that must run on the
    /// leader alone, and return once it is true.
    ///
    /// # Errors
    /// As [`campaign`](Self::campaign); a failed resignation (the next
    /// candidate then takes over when the lease runs out).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let term = client.leader_election("jobs").run("host-a", |leadership| leadership.term())?;
    /// assert!(term > 0);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn run<T>(&self, identity: &str, job: impl FnOnce(&Leadership) -> T) -> Result<T> {
        let leadership = self.campaign(identity)?;
        let out = job(&leadership);
        leadership.resign()?;
        Ok(out)
    }

    /// The leader now (`None`: nobody leads), without campaigning.
    ///
    /// # Errors
    /// A store failure.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.leader_election("jobs").current()?, None);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn current(&self) -> Result<Option<Leader>> {
        let state = election::current(self.client.store(), &self.keys, false)?;
        Ok(state.leader.map(|(record, _)| Leader::from_record(record)))
    }

    /// Every change of leader from now on, as it happens: the leader in
    /// office first (if any), then each new term once and in order, and
    /// each resignation. Fed by the election's pub/sub channel on a thread
    /// of its own (after a dropped subscription it catches up from the
    /// store's last 64 terms), never by polling; dropping the observer
    /// stops it.
    ///
    /// # Errors
    /// None so far (the subscription is made on the observer's thread);
    /// reserved for stores that cannot subscribe.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let election = client.leader_election("jobs");
    /// let observer = election.observe()?;
    /// let leadership = election.campaign("host-a")?;
    /// match observer.recv_timeout(std::time::Duration::from_secs(5)) {
    ///     Some(redisync::LeaderEvent::Elected(leader)) => assert_eq!(leader.term, leadership.term()),
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn observe(&self) -> Result<Observer> {
        let (events, receiver) = mpsc::channel();
        let (ready_tx, ready) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let backend = Arc::clone(self.client.backend());
        let keys = Arc::clone(&self.keys);
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("redisync-election-observer".to_owned())
            .spawn(move || observe_loop(backend.as_ref(), &keys, &events, &thread_stop, ready_tx))
            .map_err(|e| crate::Error::backend(format!("cannot start the observer: {e}"), false))?;
        // Subscribed (or failed once) before returning, so that a change
        // made after `observe` returns is seen.
        let _ = ready.recv_timeout(OBSERVER_READY);
        Ok(Observer {
            events: receiver,
            stop,
            thread: Some(thread),
        })
    }

    /// The lock is held by `guard`: proclaim it leader. `None` when its
    /// hold ran out before (the caller tries again).
    fn proclaim(&self, guard: LockGuard, identity: &str) -> Result<Option<Leadership>> {
        let record = crate::keys::new_op_record(&self.name);
        let holder = guard.holder_id().to_owned();
        let lease_ms = guard.lease_ms();
        let sent = Instant::now();
        let Some(term) = election::proclaim(
            self.client.store(),
            &self.keys,
            &holder,
            identity,
            lease_ms,
            &record,
        )?
        else {
            return Ok(None);
        };
        // The proclamation set the lock's TTL to the lease (a hold handed
        // over starts with the claim window): it runs from the send.
        let lease = Duration::from_millis(u64::try_from(lease_ms).unwrap_or(0));
        guard.lease_set(sent, lease);
        let margin = self.margin.unwrap_or(lease / 4);
        crate::telemetry::election_term_won();
        Ok(Some(Leadership {
            guard: Some(guard),
            holder,
            term,
            identity: identity.to_owned(),
            keys: Arc::clone(&self.keys),
            client: self.client.clone(),
            name: self.name.clone(),
            margin,
            lost: Cell::new(false),
        }))
    }
}

/// How long [`LeaderElection::observe`] waits for its subscription.
const OBSERVER_READY: Duration = Duration::from_secs(5);
/// How often an observer's thread looks at its stop flag.
const OBSERVER_TICK: Duration = Duration::from_millis(100);

/// The observer's thread: subscribe, catch up, forward every change.
fn observe_loop(
    backend: &dyn LockBackend,
    keys: &ElectionKeys,
    events: &mpsc::Sender<LeaderEvent>,
    stop: &AtomicBool,
    ready: mpsc::Sender<()>,
) {
    let mut last_term: Option<u64> = None;
    let mut first = true;
    // Relaxed: a flag on its own; the thread sees it within a tick.
    while !stop.load(Ordering::Relaxed) {
        let mut session = |conn: &mut dyn PubSubConnection| -> Result<()> {
            conn.subscribe(std::slice::from_ref(&keys.channel))?;
            let state = election::current(backend, keys, !first)?;
            let _ = ready.send(());
            if first {
                if let Some((record, _)) = state.leader {
                    forward(events, &mut last_term, record);
                }
                first = false;
            } else {
                for record in state.recent {
                    forward(events, &mut last_term, record);
                }
            }
            // Relaxed: as the outer loop's.
            while !stop.load(Ordering::Relaxed) {
                let Some(message) = conn.next_message(OBSERVER_TICK)? else {
                    continue;
                };
                if let Some(body) = message.payload.strip_prefix("e:") {
                    if let Some(record) = LeaderRecord::parse(body) {
                        forward(events, &mut last_term, record);
                    }
                } else if let Some(Ok(term)) = message.payload.strip_prefix("r:").map(str::parse)
                    && last_term == Some(term)
                {
                    let _ = events.send(LeaderEvent::Resigned { term });
                }
            }
            Ok(())
        };
        // Relaxed: as the outer loop's.
        if backend.with_pubsub(&mut session).is_err() && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(OBSERVER_TICK);
        }
    }
}

/// Sends `record` as `Elected` unless its term is not newer than the last.
fn forward(events: &mpsc::Sender<LeaderEvent>, last_term: &mut Option<u64>, record: LeaderRecord) {
    if last_term.is_some_and(|last| record.term <= last) {
        return;
    }
    *last_term = Some(record.term);
    let _ = events.send(LeaderEvent::Elected(Leader::from_record(record)));
}

/// The leader changes of one election, from [`LeaderElection::observe`]:
/// an iterator that blocks for the next change, or
/// [`recv_timeout`](Self::recv_timeout). Dropping it stops its thread.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let observer = client.leader_election("jobs").observe()?;
/// assert_eq!(observer.recv_timeout(std::time::Duration::from_millis(10)), None);
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug)]
pub struct Observer {
    events: mpsc::Receiver<LeaderEvent>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Observer {
    /// The next change, waiting at most `timeout`.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let observer = client.leader_election("jobs").observe()?;
    /// assert!(observer.recv_timeout(std::time::Duration::ZERO).is_none());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn recv_timeout(&self, timeout: Duration) -> Option<LeaderEvent> {
        self.events.recv_timeout(timeout).ok()
    }
}

impl Iterator for Observer {
    type Item = LeaderEvent;

    /// The next change, blocking until there is one.
    fn next(&mut self) -> Option<LeaderEvent> {
        self.events.recv().ok()
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        // Relaxed: a flag on its own, read by the observer's thread
        // within a tick; nothing is published with it.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// This thread's leadership of an election, from
/// [`LeaderElection::campaign`]. Like a [`LockGuard`] it stays on the
/// thread that won it; the watchdog keeps its lease alive. Resign with
/// [`resign`](Self::resign) or by dropping it: the next candidate leads
/// at once.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let leadership = client.leader_election("jobs").campaign("host-a")?;
/// assert!(!leadership.is_lost());
/// drop(leadership); // resigns
/// # Ok::<(), redisync::Error>(())
/// ```
#[must_use = "dropping a leadership resigns it at once"]
pub struct Leadership {
    guard: Option<LockGuard>,
    holder: String,
    term: u64,
    identity: String,
    keys: Arc<ElectionKeys>,
    client: Client,
    name: String,
    margin: Duration,
    lost: Cell<bool>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("term", &self.term)
            .field("identity", &self.identity)
            .field("margin", &self.margin)
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// This leadership's term: greater than every earlier leader's. Pass
    /// it to whatever the leader writes, as a fencing token.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let election = client.leader_election("jobs");
    /// let first = election.campaign("host-a")?.term(); // resigned at once
    /// assert!(election.campaign("host-a")?.term() > first);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The identity it campaigned with.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.leader_election("jobs").campaign("pod-7")?.identity(), "pod-7");
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this leadership is over: its hold was found gone, or its
    /// lease (by this machine's monotonic clock, from the send of the
    /// last renewal that landed) has no more than the margin left
    /// ([`LeaderElection::with_margin`]). The store's copy of the lease
    /// began no earlier than that send, so while the two clocks drift
    /// apart by less than the margin over a lease, no other candidate can
    /// win before this turns true. Once true it stays true: stop acting as
    /// leader and resign.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let leadership = client.leader_election("jobs").campaign("host-a")?;
    /// assert!(!leadership.is_lost());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    #[must_use = "is_lost() only reports: check it before acting as leader"]
    pub fn is_lost(&self) -> bool {
        if self.lost.get() {
            return true;
        }
        let lost = self.guard.as_ref().is_none_or(|guard| {
            guard.is_lost() || !guard.holds_beyond(Instant::now(), self.margin)
        });
        if lost {
            self.lost.set(true);
            crate::telemetry::election_term_lost();
        }
        lost
    }

    /// Blocks until [`is_lost`](Self::is_lost) is true, at most `timeout`;
    /// returns whether it is. It watches the lease on this machine's
    /// clock (the watchdog renews it meanwhile), without a request.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// let leadership = client.leader_election("jobs").campaign("host-a")?;
    /// assert!(!leadership.wait_lost(std::time::Duration::from_millis(20)));
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if self.is_lost() {
                return true;
            }
            let left = deadline.map_or(LOST_TICK, |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return false;
            }
            std::thread::sleep(left.min(LOST_TICK));
        }
    }

    /// Resigns: the leader record goes (observers see `Resigned`), then
    /// the election's lock is released and handed to the next candidate.
    ///
    /// # Errors
    /// A store failure: the release goes on in the background, and the
    /// next candidate leads when it lands or the lease runs out.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// client.leader_election("jobs").campaign("host-a")?.resign()?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn resign(mut self) -> Result<()> {
        self.resign_now()
    }

    fn resign_now(&mut self) -> Result<()> {
        let Some(guard) = self.guard.take() else {
            return Ok(());
        };
        let record = crate::keys::new_op_record(&self.name);
        let resigned = election::resign(
            self.client.store(),
            &self.keys,
            &self.holder,
            self.term,
            &record,
        );
        let released = guard.unlock();
        resigned.map(drop).and(released)
    }
}

/// How often [`Leadership::wait_lost`] looks at the lease.
const LOST_TICK: Duration = Duration::from_millis(20);

impl Drop for Leadership {
    fn drop(&mut self) {
        let _ = self.resign_now();
    }
}
