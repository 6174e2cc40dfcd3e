//! A store written outside the crate, against the public API only (the
//! items of the crate root; nothing of `redisync::internal`): the proof
//! that [`LockBackend`]'s written obligations are enough to write one.
//!
//! [`OutsideStore`] runs the scripts itself on a redis-server, through the
//! `redis` crate (`EVALSHA`, loaded on `NOSCRIPT`), with windows it makes
//! from its own estimate of the server's clock, and lends the pub/sub
//! sessions, `PUBLISH` and plain commands of a [`RedisBackend`] it wraps.
//! It injects the faults a real network brings, within the contract:
//!
//! - a short delay before some requests;
//! - a late copy of some windowed requests, sent again once their window
//!   has ended (as a frozen server or a slow network would deliver them):
//!   each must be refused with `ERR late request` ([`LateCopies`] counts);
//! - on demand, a `Resend::Harmless` call run twice, the first reply lost
//!   ([`OutsideStore::resend_harmless_every`]).
//!
//! `tests/outside_store.rs` checks the store itself; `Env::outside()` runs
//! every shared behaviour of `backend_tests!` on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redisync::{
    Error, LockBackend, PubSubConnection, RedisBackend, Reply, Resend, ScriptCall, ServerReply,
    note_round_trip_timeout, request_window_end, round_trip_timeout,
};

/// How long a try waits for its reply (the store's `response_timeout`).
pub const OUTSIDE_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long past a window's end a late copy is sent.
const LATE_BY: Duration = Duration::from_millis(100);

/// What became of the late copies (shared by clones of the counters).
#[derive(Debug, Default)]
pub struct LateCopies {
    /// Sent after their window.
    pub sent: AtomicU64,
    /// Refused by the script (`ERR late request`): as they must be.
    pub refused: AtomicU64,
    /// Answered with anything else: a write the window failed to stop.
    pub answered: AtomicU64,
    /// Not delivered (the server was gone by then).
    pub undelivered: AtomicU64,
}

impl LateCopies {
    /// `(sent, refused, answered, undelivered)`.
    pub fn counts(&self) -> (u64, u64, u64, u64) {
        (
            self.sent.load(Ordering::SeqCst),
            self.refused.load(Ordering::SeqCst),
            self.answered.load(Ordering::SeqCst),
            self.undelivered.load(Ordering::SeqCst),
        )
    }
}

/// One request to send again after its window: the script's code, its
/// keys and its arguments (the window last), and when to send it.
struct LateCopy {
    code: String,
    keys: Vec<String>,
    args: Vec<String>,
    due: Instant,
}

/// The store: see the module's documentation. Cheap to clone (clones
/// share the connections, the clock and the counters).
#[derive(Clone)]
pub struct OutsideStore {
    shared: Arc<Shared>,
}

struct Shared {
    client: redis::Client,
    /// Pub/sub, PUBLISH and plain commands.
    redis: RedisBackend,
    idle: Mutex<Vec<redis::Connection>>,
    /// The instant the monotonic clock counts from.
    start: Instant,
    /// The server's clock minus the monotonic clock, in ms (`TIME` read
    /// against the midpoint of the round trip).
    offset_ms: Mutex<i64>,
    /// Each script's SHA1, by the `Script`'s address.
    scripts: Mutex<HashMap<usize, Arc<redis::Script>>>,
    /// Every `late_every`-th windowed request gets a late copy (0: none).
    late_every: u64,
    /// Every `resend_every`-th `Resend::Harmless` call is run twice, the
    /// first reply lost (0: never).
    resend_every: AtomicU64,
    harmless_calls: AtomicU64,
    /// How many calls were run twice so.
    pub resent: AtomicU64,
    windowed_calls: AtomicU64,
    late: Arc<LateCopies>,
    late_queue: Mutex<Sender<LateCopy>>,
    calls: AtomicU64,
}

impl OutsideStore {
    /// A store on the redis-server at `url`, a late copy for every
    /// `late_every`-th windowed request (0: none).
    pub fn new(url: &str, late_every: u64) -> OutsideStore {
        let client = redis::Client::open(url).expect("a redis URL");
        let redis = RedisBackend::open(url).expect("a RedisBackend for pub/sub");
        let late = Arc::new(LateCopies::default());
        let (queue, copies) = channel::<LateCopy>();
        let worker_client = client.clone();
        let counts = Arc::clone(&late);
        // One worker sends the late copies, in order; it ends when the
        // store (the queue's sender) is dropped.
        thread::spawn(move || {
            for copy in copies {
                let now = Instant::now();
                if copy.due > now {
                    thread::sleep(copy.due - now);
                }
                counts.sent.fetch_add(1, Ordering::SeqCst);
                match send_copy(&worker_client, &copy) {
                    Some(Reply::Error(text)) if text.starts_with("ERR late request") => {
                        counts.refused.fetch_add(1, Ordering::SeqCst)
                    }
                    Some(_) => counts.answered.fetch_add(1, Ordering::SeqCst),
                    None => counts.undelivered.fetch_add(1, Ordering::SeqCst),
                };
            }
        });
        let store = OutsideStore {
            shared: Arc::new(Shared {
                client,
                redis,
                idle: Mutex::new(Vec::new()),
                start: Instant::now(),
                offset_ms: Mutex::new(0),
                scripts: Mutex::new(HashMap::new()),
                late_every,
                resend_every: AtomicU64::new(0),
                harmless_calls: AtomicU64::new(0),
                resent: AtomicU64::new(0),
                windowed_calls: AtomicU64::new(0),
                late,
                late_queue: Mutex::new(queue),
                calls: AtomicU64::new(0),
            }),
        };
        let mut conn = store.connect().expect("connecting to the test server");
        store
            .read_clock(&mut conn)
            .expect("reading the server's TIME");
        store.shared.idle.lock().unwrap().push(conn);
        store
    }

    /// Runs every `n`-th `Resend::Harmless` call twice from now on, as a
    /// store does when the connection closed after the server ran it (the
    /// reply lost, the call sent again): the caller reads the second reply.
    pub fn resend_harmless_every(&self, n: u64) {
        self.shared.resend_every.store(n, Ordering::SeqCst);
    }

    /// How many calls were run twice (see
    /// [`resend_harmless_every`](Self::resend_harmless_every)).
    pub fn resent(&self) -> u64 {
        self.shared.resent.load(Ordering::SeqCst)
    }

    /// What became of the late copies so far.
    pub fn late_copies(&self) -> Arc<LateCopies> {
        Arc::clone(&self.shared.late)
    }

    /// Waits (bounded) until every late copy queued so far was sent.
    pub fn wait_for_late_copies(&self, bound: Duration) {
        let queued = self.shared.windowed_calls.load(Ordering::SeqCst);
        let expected = queued.checked_div(self.shared.late_every).unwrap_or(0);
        let until = Instant::now() + bound;
        while self.shared.late.sent.load(Ordering::SeqCst) < expected && Instant::now() < until {
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn monotonic_ms(&self) -> i64 {
        i64::try_from(self.shared.start.elapsed().as_millis()).unwrap_or(i64::MAX / 4)
    }

    /// The server's clock now, as estimated from the last `TIME`.
    fn server_now(&self) -> i64 {
        self.monotonic_ms() + *self.shared.offset_ms.lock().unwrap()
    }

    fn connect(&self) -> redis::RedisResult<redis::Connection> {
        let timeout = round_trip_timeout(OUTSIDE_RESPONSE_TIMEOUT);
        let conn = self.shared.client.get_connection_with_timeout(timeout)?;
        Ok(conn)
    }

    /// Reads the server's `TIME` against this process's monotonic clock.
    fn read_clock(&self, conn: &mut redis::Connection) -> redis::RedisResult<()> {
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query(conn)?;
        let after = self.monotonic_ms();
        let server_ms = secs * 1000 + micros / 1000;
        // `server - after`, never ahead of the server's clock: a reading
        // slowed by a loaded machine must not make a window end later
        // than this store thinks (its late copies would then land inside
        // it). Behind by at most the round trip: windows end early.
        *self.shared.offset_ms.lock().unwrap() = server_ms - after;
        Ok(())
    }

    fn script(&self, call: &ScriptCall<'_>) -> Arc<redis::Script> {
        let mut scripts = self.shared.scripts.lock().unwrap();
        // By the script's address, not its id: two scripts may share an id
        // (a test's ad-hoc ones), and every `Script` is a `'static`.
        let at = std::ptr::from_ref(call.script()) as usize;
        Arc::clone(
            scripts
                .entry(at)
                .or_insert_with(|| Arc::new(redis::Script::new(call.script().code()))),
        )
    }

    /// One try of `call`: its own window, its own wait.
    fn try_once(&self, call: &ScriptCall<'_>) -> Result<Reply, redis::RedisError> {
        let mut conn = match self.shared.idle.lock().unwrap().pop() {
            Some(conn) => conn,
            None => self.connect()?,
        };
        let timeout = round_trip_timeout(OUTSIDE_RESPONSE_TIMEOUT);
        conn.set_read_timeout(Some(timeout))?;
        conn.set_write_timeout(Some(timeout))?;
        // A short delay before some requests, as a busy network has.
        let n = self.shared.calls.fetch_add(1, Ordering::Relaxed);
        if n.is_multiple_of(4) {
            thread::sleep(Duration::from_millis(n % 3));
        }
        let window = call.window_arg(request_window_end(self.server_now(), timeout));
        let script = self.script(call);
        let mut invocation = script.prepare_invoke();
        for key in call.keys() {
            invocation.key(key.as_ref());
        }
        for arg in call.args() {
            invocation.arg(arg.as_ref());
        }
        if let Some(window) = &window {
            invocation.arg(window.as_str());
        }
        let result = invocation.invoke::<redis::Value>(&mut conn);
        let reply = match result {
            Ok(value) => reply_from_value(value),
            Err(err) => match script_error(&err) {
                Some(reply) => reply,
                None => return Err(err),
            },
        };
        if let Reply::Error(text) = &reply {
            // In time, yet refused as late: the clock estimate is off.
            if text.starts_with("ERR late request") {
                self.read_clock(&mut conn)?;
            }
        }
        self.shared.idle.lock().unwrap().push(conn);
        if let Some(window) = window {
            let nth = self.shared.windowed_calls.fetch_add(1, Ordering::SeqCst) + 1;
            if self.shared.late_every > 0 && nth.is_multiple_of(self.shared.late_every) {
                self.queue_late_copy(call, window);
            }
        }
        Ok(reply)
    }

    /// Queues a copy of `call` (with its window `window`) to be sent after
    /// the window has ended.
    fn queue_late_copy(&self, call: &ScriptCall<'_>, window: String) {
        let end: i64 = window.parse().unwrap_or(0);
        let left = u64::try_from(end - self.server_now()).unwrap_or(0);
        let mut args: Vec<String> = call.args().iter().map(|a| a.to_string()).collect();
        args.push(window);
        let copy = LateCopy {
            code: call.script().code().to_owned(),
            keys: call.keys().iter().map(|k| k.to_string()).collect(),
            args,
            due: Instant::now() + Duration::from_millis(left) + LATE_BY,
        };
        let _ = self.shared.late_queue.lock().unwrap().send(copy);
    }
}

/// Sends a late copy on a connection of its own; `None` if it could not
/// be delivered.
fn send_copy(client: &redis::Client, copy: &LateCopy) -> Option<Reply> {
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let script = redis::Script::new(&copy.code);
    let mut invocation = script.prepare_invoke();
    for key in &copy.keys {
        invocation.key(key.as_str());
    }
    for arg in &copy.args {
        invocation.arg(arg.as_str());
    }
    match invocation.invoke::<redis::Value>(&mut conn) {
        Ok(value) => Some(reply_from_value(value)),
        Err(err) => script_error(&err),
    }
}

/// A script's own error (`ERR`, `WRONGTYPE`) as its reply.
fn script_error(err: &redis::RedisError) -> Option<Reply> {
    let code = err.code()?;
    ["ERR", "WRONGTYPE"]
        .contains(&code)
        .then(|| Reply::Error(format!("{code} {}", err.detail().unwrap_or_default())))
}

/// Redis's value as a [`Reply`].
fn reply_from_value(value: redis::Value) -> Reply {
    use redis::Value;
    match value {
        Value::Nil => Reply::Nil,
        Value::Int(value) => Reply::Int(value),
        Value::BulkString(bytes) => Reply::Bulk(bytes),
        Value::Array(items) | Value::Set(items) => {
            Reply::Array(items.into_iter().map(reply_from_value).collect())
        }
        Value::SimpleString(text) => Reply::Status(text),
        Value::Okay => Reply::Status("OK".to_owned()),
        Value::ServerError(err) => Reply::Error(format!(
            "{} {}",
            err.code(),
            err.details().unwrap_or_default()
        )),
        other => Reply::Status(format!("{other:?}")),
    }
}

/// Whether a failed try may have run (the connection broke or timed out).
fn outcome_unknown(err: &redis::RedisError) -> bool {
    err.is_io_error() || err.is_timeout() || err.is_connection_dropped()
}

impl LockBackend for OutsideStore {
    fn run_script(&self, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        let every = self.shared.resend_every.load(Ordering::SeqCst);
        if every > 0 && call.resend() == Resend::Harmless {
            let nth = self.shared.harmless_calls.fetch_add(1, Ordering::SeqCst) + 1;
            // The first try ran; its reply is lost; the second is read.
            if nth.is_multiple_of(every) && self.try_once(call).is_ok() {
                self.shared.resent.fetch_add(1, Ordering::SeqCst);
                return self.try_once(call).map_err(|err| {
                    Error::backend_caused_by("a resent call on the outside store", err, true)
                });
            }
        }
        let mut tries = 0;
        loop {
            tries += 1;
            match self.try_once(call) {
                Ok(reply) => return Ok(reply),
                Err(err) => {
                    if err.is_timeout() {
                        note_round_trip_timeout();
                    }
                    // At most two tries; the second only if the call may
                    // run twice (a closed connection may have run it).
                    let again = tries < 2
                        && err.is_connection_dropped()
                        && !err.is_timeout()
                        && call.resend() == Resend::Harmless;
                    if !again {
                        return Err(Error::backend_caused_by(
                            format!("{} on the outside store", call.script().operation()),
                            err.clone(),
                            outcome_unknown(&err) || err.is_connection_refusal(),
                        ));
                    }
                }
            }
        }
    }

    fn publish(&self, channel: &str, payload: &str) -> redisync::Result<()> {
        self.shared.redis.publish(channel, payload)
    }

    fn with_pubsub(
        &self,
        session: &mut dyn FnMut(&mut dyn PubSubConnection) -> redisync::Result<()>,
    ) -> redisync::Result<()> {
        self.shared.redis.with_pubsub(session)
    }

    fn response_timeout(&self) -> Option<Duration> {
        Some(OUTSIDE_RESPONSE_TIMEOUT)
    }

    fn server_now_ms(&self) -> Option<i64> {
        Some(self.server_now())
    }

    fn server_command(&self, args: &[&str]) -> redisync::Result<Vec<ServerReply>> {
        self.shared.redis.server_command(args)
    }
}
