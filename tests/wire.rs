//! The Redisson 3.x wire layout of the reentrant lock, the fair lock and the
//! read-write lock, checked with raw Redis commands on a real `redis-server`
//! (the schema table of `redisync::internal`): the lock hash and its fields, the TTLs, the fair
//! lock's queue and slot set, the read holds' timeout keys, the channels and
//! messages, the unlock latch, and a simulated Redisson (Java) client
//! excluding and waking ours and back.
//!
//! Every expected key and channel name is spelled out here literally rather
//! than built with the library's helpers, so a mistake there shows up here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::keys;
use common::{TestServer, hgetall, numsub, pttl, unique_name, wait_until};
use redisync::Client;

/// A lock name and the names Redisson derives from it.
struct Case {
    name: String,
    channel: String,
    latch_prefix: String,
    /// Fair lock: the waiter queue (list).
    queue: String,
    /// Fair lock: the waiters' slot deadlines (zset).
    timeouts: String,
    /// Read-write lock: the channel of both halves.
    rw_channel: String,
}

impl Case {
    /// The keys and channels of `name` (tests/common/keys.rs: WIRE.md's
    /// rules).
    fn of(name: String) -> Case {
        Case {
            channel: keys::lock_channel(&name),
            latch_prefix: keys::unlock_latch(&name, ""),
            queue: keys::fair_queue(&name),
            timeouts: keys::fair_timeouts(&name),
            rw_channel: keys::rw_channel(&name),
            name,
        }
    }

    /// A fair-lock waiter's own channel.
    fn waiter_channel(&self, waiter: &str) -> String {
        format!("{}:{waiter}", self.channel)
    }

    /// Read hold `n` of `holder`: `{name}:<holder>:rwlock_timeout:<n>`.
    fn read_hold_key(&self, holder: &str, n: u32) -> String {
        keys::suffixed(&self.name, &format!("{holder}:rwlock_timeout:{n}"))
    }
}

/// One name without a hash tag (braces added around it) and one with its
/// own hash tag (no braces added, none doubled).
fn cases() -> [Case; 2] {
    let plain = unique_name("wire:plain");
    let tag = unique_name("orders");
    let tagged = Case::of(format!("{{{tag}}}:42"));
    // The rule spelled out once for the tagged name: nothing added.
    assert_eq!(
        tagged.channel,
        format!("redisson_lock__channel:{{{tag}}}:42")
    );
    assert_eq!(
        tagged.latch_prefix,
        format!("redisson_unlock_latch:{{{tag}}}:42:")
    );
    assert_eq!(
        tagged.read_hold_key("c:1", 2),
        format!("{{{tag}}}:42:c:1:rwlock_timeout:2")
    );
    [Case::of(plain), tagged]
}

fn query<T: redis::FromRedisValue>(conn: &mut redis::Connection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(conn)
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")))
}

fn exists(conn: &mut redis::Connection, key: &str) -> bool {
    query::<i64>(conn, &["EXISTS", key]) == 1
}

fn one_field(field: &str, count: &str) -> HashMap<String, String> {
    HashMap::from([(field.to_owned(), count.to_owned())])
}

/// Asserts `ttl_ms` is a live TTL no larger than `lease` and no more than
/// `slack` below it.
fn assert_ttl_near(what: &str, ttl_ms: i64, lease: Duration, slack: Duration) {
    let lease = i64::try_from(lease.as_millis()).unwrap();
    let slack = i64::try_from(slack.as_millis()).unwrap();
    assert!(
        ttl_ms <= lease && ttl_ms > lease - slack,
        "{what}: PTTL {ttl_ms} ms, expected within {slack} ms below {lease} ms"
    );
}

/// Splits a holder id `<uuid>:<thread number>` and checks both halves.
fn assert_holder_id(holder: &str, client: &Client) {
    let (uuid, thread) = holder
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("holder id {holder:?} has no ':'"));
    assert_eq!(
        uuid,
        client.id(),
        "holder id {holder:?}: not the client's uuid"
    );
    assert_eq!(
        uuid.len(),
        36,
        "client id {uuid:?}: not a 36-character uuid"
    );
    let parsed = uuid::Uuid::parse_str(uuid).unwrap();
    assert_eq!(
        parsed.get_version_num(),
        4,
        "client id {uuid:?}: not a v4 uuid"
    );
    assert_eq!(
        parsed.hyphenated().to_string(),
        uuid,
        "client id {uuid:?}: not in Java's lowercase hyphenated form"
    );
    assert!(
        !thread.is_empty() && thread.bytes().all(|b| b.is_ascii_digit()),
        "holder id {holder:?}: thread part is not a decimal number"
    );
}

/// Every key on the server except unlock latches and redisync's own
/// acquire-attempt records (`{name}:redisync_attempt:<id>`, issue 21) and
/// counting-call records (`{name}:redisync_op:<id>`).
fn keys_besides_latches(conn: &mut redis::Connection) -> Vec<String> {
    let mut keys: Vec<String> = query(conn, &["KEYS", "*"]);
    keys.retain(|k| {
        !k.starts_with("redisson_unlock_latch:")
            && !k.contains(":redisync_attempt:")
            && !k.contains(":redisync_op:")
            // A fair waiter's direct mark outlives its wait by up to two
            // leases (see `ops::fair_lock`).
            && !k.contains(":redisync_fair_direct:")
    });
    keys.sort();
    keys
}

/// The acquire-attempt records of lock `name` whose holds are not released
/// yet: each a string `taken` whose TTL is at most the lease (a released
/// hold's record holds its release's outcome, as that release's unlock
/// latch).
fn attempt_records(conn: &mut redis::Connection, name: &str, lease: Duration) -> usize {
    let escaped = name
        .replace('[', "\\[")
        .replace('*', "\\*")
        .replace('?', "\\?");
    let pattern = keys::suffixed(&escaped, "redisync_attempt:*");
    let keys: Vec<String> = query(conn, &["KEYS", &pattern]);
    for key in &keys {
        assert_eq!(query::<String>(conn, &["GET", key]), "taken", "{key}");
        let ttl = pttl(conn, key);
        assert!(
            ttl > 0 && ttl <= i64::try_from(lease.as_millis()).unwrap(),
            "{key}: {ttl}"
        );
    }
    keys.len()
}

#[test]
fn lock_is_a_hash_with_one_uuid_thread_field_and_the_lease_as_ttl() {
    const WATCHDOG: Duration = Duration::from_secs(20);
    const SLACK: Duration = Duration::from_secs(3);
    let server = TestServer::start();
    let mut raw = server.connection();
    let client = Client::builder()
        .redis_url(server.url())
        .watchdog_timeout(WATCHDOG)
        .build()
        .unwrap();
    for case in cases() {
        let name = case.name.as_str();
        let lock = client.lock(name);
        let holder = client.current_holder_id();
        assert_holder_id(&holder, &client);

        let outer = lock.lock().unwrap();
        assert_eq!(query::<String>(&mut raw, &["TYPE", name]), "hash");
        assert_eq!(hgetall(&mut raw, name), one_field(&holder, "1"), "{name}");
        assert_ttl_near(name, pttl(&mut raw, name), WATCHDOG, SLACK);
        assert_eq!(
            keys_besides_latches(&mut raw),
            [name.to_owned()],
            "the lock must be stored at its name exactly, and be the only key"
        );
        assert_eq!(attempt_records(&mut raw, name, WATCHDOG), 1, "{name}");

        // Reentry counts up in the same field; release counts down.
        let inner = lock.lock().unwrap();
        assert_eq!(hgetall(&mut raw, name), one_field(&holder, "2"), "{name}");
        let third = lock.try_lock().unwrap().expect("reentrant try_lock");
        assert_eq!(hgetall(&mut raw, name), one_field(&holder, "3"), "{name}");
        third.unlock().unwrap();
        inner.unlock().unwrap();
        assert_eq!(hgetall(&mut raw, name), one_field(&holder, "1"), "{name}");
        assert_ttl_near(name, pttl(&mut raw, name), WATCHDOG, SLACK);

        // Another thread of the same client: same uuid, another number; it
        // cannot take the lock while this thread holds it.
        let (other_holder, blocked) = {
            let lock = lock.clone();
            let client = client.clone();
            thread::spawn(move || {
                (
                    client.current_holder_id(),
                    lock.try_lock().unwrap().is_none(),
                )
            })
            .join()
            .unwrap()
        };
        assert_holder_id(&other_holder, &client);
        assert_ne!(other_holder, holder, "two threads share a holder id");
        assert!(blocked, "another thread took a held lock");

        outer.unlock().unwrap();
        assert!(
            !exists(&mut raw, name),
            "{name}: key left after the last unlock"
        );

        // Another thread's hold is its own field.
        let seen = {
            let lock = lock.clone();
            let name = name.to_owned();
            let mut raw = server.connection();
            thread::spawn(move || {
                let guard = lock.lock().unwrap();
                let seen = (lock.client().current_holder_id(), hgetall(&mut raw, &name));
                guard.unlock().unwrap();
                seen
            })
            .join()
            .unwrap()
        };
        assert_holder_id(&seen.0, &client);
        assert_ne!(seen.0, holder);
        assert_eq!(seen.1, one_field(&seen.0, "1"), "{name}");

        // A fixed lease is the TTL.
        let lease = Duration::from_secs(7);
        let guard = lock.lock_with_lease(lease).unwrap();
        assert_eq!(hgetall(&mut raw, name), one_field(&holder, "1"), "{name}");
        assert_ttl_near(name, pttl(&mut raw, name), lease, SLACK);
        guard.unlock().unwrap();
        assert!(!exists(&mut raw, name));
    }
}

/// A raw `PSUBSCRIBE *` listener: sees every message on the server.
struct Listener<'a> {
    pubsub: redis::PubSub<'a>,
}

impl<'a> Listener<'a> {
    fn new(conn: &'a mut redis::Connection) -> Self {
        let mut pubsub = conn.as_pubsub();
        pubsub.psubscribe("*").unwrap();
        Listener { pubsub }
    }

    /// The next message within `timeout`, as (channel, payload), skipping
    /// redisync's private per-client control channel.
    fn next(&mut self, timeout: Duration) -> Option<(String, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.pubsub.set_read_timeout(Some(left)).unwrap();
            match self.pubsub.get_message() {
                Ok(msg) => {
                    let channel = msg.get_channel_name().to_owned();
                    if channel.starts_with("redisync__control:") {
                        continue;
                    }
                    let payload = String::from_utf8_lossy(msg.get_payload_bytes()).into_owned();
                    return Some((channel, payload));
                }
                Err(err) if err.is_timeout() => return None,
                Err(err) => panic!("listener: {err}"),
            }
        }
    }

    /// A fair lock's release handing the lock outright to a redisync
    /// waiter (`ops::fair_lock`): `h:<server ms>:<claim ms>:<wait id>:<its
    /// id>` on the waiter's own channel, instead of Redisson's "0".
    fn expect_handed(&mut self, what: &str, channel: &str, holder: &str) {
        let got = self.next(Duration::from_secs(5));
        let Some((on, payload)) = got else {
            panic!("{what}: expected a handoff on {channel:?}, got nothing");
        };
        assert_eq!(on, channel, "{what}: the handoff's channel");
        let rest = payload
            .strip_prefix("h:")
            .and_then(|rest| rest.strip_suffix(&format!(":{holder}")))
            .unwrap_or_else(|| panic!("{what}: expected h:...:{holder}, got {payload:?}"));
        let numbers: Vec<&str> = rest.split(':').collect();
        assert!(
            numbers.len() == 3 && numbers.iter().all(|n| n.parse::<u64>().is_ok()),
            "{what}: expected h:<server ms>:<claim ms>:<wait id>:{holder}, got {payload:?}"
        );
    }

    fn expect(&mut self, what: &str, channel: &str, payload: &str) {
        let got = self.next(Duration::from_secs(5));
        assert_eq!(
            got,
            Some((channel.to_owned(), payload.to_owned())),
            "{what}: expected {payload:?} on {channel:?}"
        );
    }

    fn expect_none(&mut self, what: &str) {
        let got = self.next(Duration::from_millis(300));
        assert_eq!(got, None, "{what}: expected no message");
    }
}

#[test]
fn unlock_and_force_unlock_publish_zero_on_redissons_channel() {
    let server = TestServer::start();
    let mut raw = server.connection();
    let mut listen_conn = server.connection();
    let mut listener = Listener::new(&mut listen_conn);
    let client = Client::open(&server.url()).unwrap();
    let other = Client::open(&server.url()).unwrap();
    for case in cases() {
        let name = case.name.as_str();
        let channel = case.channel.as_str();
        assert!(!channel.contains("{{"), "braces doubled in {channel}");
        let lock = client.lock(name);

        let outer = lock.lock().unwrap();
        let inner = lock.lock().unwrap();
        assert!(other.lock(name).try_lock().unwrap().is_none());
        inner.unlock().unwrap();
        listener.expect_none("a failed try_lock and a reentrant release");
        outer.unlock().unwrap();
        listener.expect("the last unlock", channel, "0");
        listener.expect_none("after the unlock message");

        // RAII drop publishes the same.
        drop(lock.lock().unwrap());
        listener.expect("a guard drop", channel, "0");

        let guard = lock.lock().unwrap();
        assert!(other.lock(name).force_unlock().unwrap());
        listener.expect("force_unlock", channel, "0");
        assert!(guard.unlock().unwrap_err().is_not_held());
        assert!(!other.lock(name).force_unlock().unwrap());
        listener.expect_none("a NotHeld unlock and a force_unlock of a free lock");
        assert!(!exists(&mut raw, name));
    }
}

/// Takes `name` as a Redisson client would: HINCRBY of its field, PEXPIRE.
fn java_lock(conn: &mut redis::Connection, name: &str, field: &str, lease_ms: u64) {
    let (count, expired): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("HINCRBY")
        .arg(name)
        .arg(field)
        .arg(1)
        .cmd("PEXPIRE")
        .arg(name)
        .arg(lease_ms)
        .query(conn)
        .unwrap();
    assert_eq!(
        (count, expired),
        (1, 1),
        "simulated Redisson lock of {name}"
    );
}

/// Releases `name` as Redisson's last unlock does: DEL, PUBLISH 0.
fn java_unlock(conn: &mut redis::Connection, name: &str, channel: &str) {
    let (deleted, _receivers): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("DEL")
        .arg(name)
        .cmd("PUBLISH")
        .arg(channel)
        .arg("0")
        .query(conn)
        .unwrap();
    assert_eq!(deleted, 1, "simulated Redisson unlock of {name}");
}

#[test]
fn a_simulated_redisson_client_and_redisync_exclude_and_wake_each_other() {
    const JAVA_LEASE_MS: u64 = 30_000;
    let server = TestServer::start();
    let mut raw = server.connection();
    let client = Client::open(&server.url()).unwrap();
    for case in cases() {
        let name = case.name.as_str();
        let channel = case.channel.as_str();
        let java_field = format!("{}:1", uuid::Uuid::new_v4());
        let lock = client.lock(name);

        // Redisson holds it: we are excluded and change nothing.
        java_lock(&mut raw, name, &java_field, JAVA_LEASE_MS);
        assert!(
            lock.try_lock().unwrap().is_none(),
            "{name}: took a Redisson-held lock"
        );
        let start = Instant::now();
        assert!(
            lock.try_lock_for(Duration::from_millis(200))
                .unwrap()
                .is_none()
        );
        assert!(start.elapsed() >= Duration::from_millis(200));
        assert!(lock.is_locked().unwrap());
        assert_eq!(lock.hold_count().unwrap(), 0);
        let ttl = lock.remaining_ttl().unwrap().expect("Redisson's TTL");
        assert!(
            ttl <= Duration::from_millis(JAVA_LEASE_MS) && ttl > Duration::from_secs(25),
            "{name}: remaining_ttl {ttl:?}"
        );
        assert_eq!(hgetall(&mut raw, name), one_field(&java_field, "1"));

        // A waiter of ours in lock(), woken by Redisson's unlock message.
        let (acquired_tx, acquired_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let waiter = {
            let lock = lock.clone();
            thread::spawn(move || {
                let guard = lock.lock().unwrap();
                acquired_tx
                    .send((Instant::now(), lock.client().current_holder_id()))
                    .unwrap();
                // Hold until the main thread says so (bounded).
                let _ = release_rx.recv_timeout(Duration::from_secs(30));
                guard.unlock().unwrap();
            })
        };
        wait_until("our waiter subscribed", Duration::from_secs(10), || {
            numsub(&mut raw, channel) >= 1
        });
        thread::sleep(Duration::from_millis(100));
        assert!(
            acquired_rx.try_recv().is_err(),
            "{name}: our waiter got a Redisson-held lock"
        );
        assert_eq!(hgetall(&mut raw, name), one_field(&java_field, "1"));

        let released = Instant::now();
        java_unlock(&mut raw, name, channel);
        let (acquired_at, our_holder) = acquired_rx
            .recv_timeout(Duration::from_secs(25))
            .unwrap_or_else(|_| panic!("{name}: our waiter missed Redisson's unlock"));
        let latency = acquired_at.duration_since(released);
        assert!(
            latency < Duration::from_secs(2),
            "{name}: our waiter took {latency:?} after Redisson's unlock (lease 30 s)"
        );
        assert_holder_id(&our_holder, &client);
        assert_eq!(hgetall(&mut raw, name), one_field(&our_holder, "1"));

        // Conversely: we hold it, a Redisson waiter (raw subscriber) is
        // excluded by Redisson's acquire condition and woken by our unlock.
        let mut sub_conn = server.connection();
        let mut java_waiter = sub_conn.as_pubsub();
        java_waiter.subscribe(channel).unwrap();
        let can_take =
            !exists(&mut raw, name) || query::<i64>(&mut raw, &["HEXISTS", name, &java_field]) == 1;
        assert!(!can_take, "{name}: Redisson's acquire condition would pass");
        release_tx.send(()).unwrap();
        java_waiter
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let msg = java_waiter
            .get_message()
            .unwrap_or_else(|e| panic!("{name}: Redisson's waiter got no unlock message: {e}"));
        assert_eq!(msg.get_channel_name(), channel);
        assert_eq!(msg.get_payload_bytes(), b"0");
        waiter.join().unwrap();
        drop(java_waiter);

        // Redisson now takes it, and we are excluded again.
        assert!(!exists(&mut raw, name), "{name}: our unlock left the key");
        java_lock(&mut raw, name, &java_field, JAVA_LEASE_MS);
        assert!(lock.try_lock().unwrap().is_none());
        java_unlock(&mut raw, name, channel);
        lock.try_lock()
            .unwrap()
            .expect("free again")
            .unlock()
            .unwrap();
    }
}

/// Each unlock leaves an unlock latch (its outcome, for about 11 s with the
/// default 3 s response timeout: past every copy's window, so a retry whose
/// first reply was lost does not release twice). Every kind's hold is
/// released behind the record of the attempt that took it
/// (`{name}:redisync_attempt:<id>`: `taken` until then, the outcome after;
/// a fenced lock's `taken:<token>`), so a late copy of that acquire is
/// refused; a fresh key in Redisson's latch format only for a hold without
/// a record. Redisson reads only latches under its own request ids, so it
/// never sees either.
#[test]
fn unlock_leaves_a_latch_key_with_a_short_ttl() {
    let server = TestServer::start();
    let mut raw = server.connection();
    let client = Client::open(&server.url()).unwrap();
    for case in cases() {
        let name = case.name.as_str();
        let lock = client.lock(name);
        let keys_like = |raw: &mut redis::Connection, pattern: &str| -> Vec<String> {
            let pattern = pattern
                .replace('[', "\\[")
                .replace('*', "\\*")
                .replace('?', "\\?");
            let mut keys: Vec<String> = query(raw, &["KEYS", &format!("{pattern}*")]);
            keys.sort();
            keys
        };
        let records_prefix = keys::suffixed(&case.name, "redisync_attempt:");
        let latches = |raw: &mut redis::Connection| keys_like(raw, &case.latch_prefix);
        let records = |raw: &mut redis::Connection| keys_like(raw, &records_prefix);
        let value = |raw: &mut redis::Connection, key: &str| -> String {
            assert_eq!(query::<String>(raw, &["TYPE", key]), "string", "{key}");
            query(raw, &["GET", key])
        };
        let assert_latch_ttl = |raw: &mut redis::Connection, key: &str| {
            let ttl = pttl(raw, key);
            assert!(
                ttl > 0 && ttl <= 11_050,
                "{key}: PTTL {ttl}, expected (0, 11050]"
            );
        };
        assert!(latches(&mut raw).is_empty());
        assert!(records(&mut raw).is_empty());

        let outer = lock.lock().unwrap();
        let inner = lock.lock().unwrap();
        let taken = records(&mut raw);
        assert_eq!(taken.len(), 2, "{name}: records {taken:?}");
        for key in &taken {
            assert_eq!(value(&mut raw, key), "taken", "{key}");
        }

        // A reentrant release stores "0" (still held) in its hold's record...
        inner.unlock().unwrap();
        let outcomes: Vec<String> = taken.iter().map(|key| value(&mut raw, key)).collect();
        let inner_record = match outcomes.iter().position(|v| v == "0") {
            Some(at) => &taken[at],
            None => panic!("{name}: no record holds the release's outcome: {outcomes:?}"),
        };
        assert_latch_ttl(&mut raw, inner_record);
        let outer_record = taken.iter().find(|key| *key != inner_record).unwrap();
        assert_eq!(value(&mut raw, outer_record), "taken", "{outer_record}");
        // ...and the last one "1" (released) in its own.
        outer.unlock().unwrap();
        assert_eq!(value(&mut raw, inner_record), "0", "{inner_record}");
        assert_eq!(value(&mut raw, outer_record), "1", "{outer_record}");
        assert_latch_ttl(&mut raw, outer_record);
        assert!(latches(&mut raw).is_empty(), "a latch besides the records");
        assert!(!exists(&mut raw, name));

        // A fenced hold's record says "taken:<token>", then the outcome.
        let fenced = client.fenced_lock(name).lock().unwrap();
        let token = fenced.token().unwrap();
        let now: Vec<String> = records(&mut raw)
            .into_iter()
            .filter(|key| !taken.contains(key))
            .collect();
        assert_eq!(now.len(), 1, "{name}: fenced records {now:?}");
        assert_eq!(value(&mut raw, &now[0]), format!("taken:{token}"));
        fenced.unlock().unwrap();
        assert_eq!(value(&mut raw, &now[0]), "1", "{}", now[0]);
        assert_latch_ttl(&mut raw, &now[0]);
        assert!(latches(&mut raw).is_empty(), "a latch besides the records");

        // So is a fair hold (its record says "taken" until then).
        client.fair_lock(name).lock().unwrap().unlock().unwrap();
        let fair: Vec<String> = records(&mut raw)
            .into_iter()
            .filter(|key| !taken.contains(key) && !now.contains(key))
            .collect();
        assert_eq!(fair.len(), 1, "{name}: fair records {fair:?}");
        assert_eq!(value(&mut raw, &fair[0]), "1", "{}", fair[0]);
        assert_latch_ttl(&mut raw, &fair[0]);
        assert!(latches(&mut raw).is_empty(), "a latch besides the records");
        assert!(!exists(&mut raw, name));
    }
}

// ---------------------------------------------------------------------------
// Fair lock
// ---------------------------------------------------------------------------

/// The caller's wall clock in ms (the fair lock's queue arithmetic uses it).
fn wall_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(now.as_millis()).unwrap()
}

fn lrange(conn: &mut redis::Connection, key: &str) -> Vec<String> {
    query(conn, &["LRANGE", key, "0", "-1"])
}

/// `ZSCORE`, as whole milliseconds.
fn zscore(conn: &mut redis::Connection, key: &str, member: &str) -> Option<i64> {
    let score: Option<f64> = query(conn, &["ZSCORE", key, member]);
    score.map(|s| s as i64)
}

/// The lease end of permit `id_hex` in `leases`, as whole milliseconds:
/// the member is the 16 bytes the id's hex spells, as Redisson stores it.
fn permit_score(conn: &mut redis::Connection, leases: &str, id_hex: &str) -> Option<i64> {
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(leases)
        .arg(common::permit_id_bytes(id_hex))
        .query(conn)
        .unwrap();
    score.map(|s| s as i64)
}

/// A thread blocked in `lock()`: it reports its holder id before calling it
/// and the instant it got the lock, then holds until released.
struct Waiter {
    id: String,
    acquired: mpsc::Receiver<Instant>,
    release: Option<mpsc::Sender<()>>,
    handle: Option<thread::JoinHandle<redisync::Result<()>>>,
}

impl Waiter {
    fn spawn(lock: redisync::Lock) -> Waiter {
        let (id_tx, id_rx) = mpsc::channel();
        let (acquired_tx, acquired) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let handle = thread::spawn(move || {
            id_tx.send(lock.client().current_holder_id()).unwrap();
            let guard = lock.lock().expect("waiter: lock()");
            let _ = acquired_tx.send(Instant::now());
            let _ = release_rx.recv_timeout(Duration::from_secs(60));
            guard.unlock()
        });
        let id = id_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        Waiter {
            id,
            acquired,
            release: Some(release),
            handle: Some(handle),
        }
    }

    fn acquired_at(&self, what: &str) -> Instant {
        self.acquired
            .recv_timeout(Duration::from_secs(15))
            .unwrap_or_else(|e| panic!("{what}: waiter {} got no lock ({e})", self.id))
    }

    /// Releases and joins; returns the waiter's unlock result.
    fn join(mut self) -> redisync::Result<()> {
        self.release.take();
        self.handle.take().unwrap().join().expect("waiter panicked")
    }
}

#[test]
fn fair_lock_queues_waiter_ids_in_a_list_and_a_zset_and_tells_only_the_head() {
    const LEASE: Duration = Duration::from_secs(30);
    const WAIT: Duration = Duration::from_secs(60);
    const SLACK_MS: i64 = 3_000;
    let wait_ms = i64::try_from(WAIT.as_millis()).unwrap();
    let lease_ms = i64::try_from(LEASE.as_millis()).unwrap();
    let server = TestServer::start();
    let mut raw = server.connection();
    let mut listen_conn = server.connection();
    let mut listener = Listener::new(&mut listen_conn);
    let builder = || {
        Client::builder()
            .redis_url(server.url())
            .fair_lock_wait_timeout(WAIT)
    };
    let a = builder().build().unwrap();
    let b = builder().build().unwrap();
    let c = builder().build().unwrap();
    for case in cases() {
        let name = case.name.as_str();
        let (queue, timeouts) = (case.queue.as_str(), case.timeouts.as_str());

        // The lock itself is the reentrant lock's hash.
        let held = a.fair_lock(name).lock_with_lease(LEASE).unwrap();
        assert_eq!(query::<String>(&mut raw, &["TYPE", name]), "hash");
        assert_eq!(
            hgetall(&mut raw, name),
            one_field(&a.current_holder_id(), "1")
        );
        assert_ttl_near(name, pttl(&mut raw, name), LEASE, Duration::from_secs(3));
        // try_lock does not queue.
        assert!(b.fair_lock(name).try_lock().unwrap().is_none());
        assert!(!exists(&mut raw, queue) && !exists(&mut raw, timeouts));

        // First waiter: the list holds its id, the zset its slot deadline:
        // the lock's TTL plus the wait timeout from now, in wall-clock ms.
        let first = Waiter::spawn(b.fair_lock(name));
        assert_holder_id(&first.id, &b);
        wait_until("the first waiter queued", Duration::from_secs(10), || {
            lrange(&mut raw, queue) == [first.id.clone()]
        });
        assert_eq!(query::<String>(&mut raw, &["TYPE", queue]), "list");
        assert_eq!(query::<String>(&mut raw, &["TYPE", timeouts]), "zset");
        let slot1 = zscore(&mut raw, timeouts, &first.id).expect("the first waiter's slot");
        let ahead = slot1 - wait_ms - wall_ms();
        assert!(
            ahead <= lease_ms && ahead > lease_ms - SLACK_MS,
            "{name}: slot deadline {slot1} is {ahead} ms + the wait timeout from now; \
             expected the lock's TTL (~{lease_ms} ms)"
        );

        // Second waiter (another client): behind it, one wait timeout later.
        let second = Waiter::spawn(c.fair_lock(name));
        wait_until("the second waiter queued", Duration::from_secs(10), || {
            lrange(&mut raw, queue).len() == 2
        });
        assert_eq!(
            lrange(&mut raw, queue),
            [first.id.clone(), second.id.clone()]
        );
        let slot2 = zscore(&mut raw, timeouts, &second.id).expect("the second waiter's slot");
        assert_eq!(slot2, slot1 + wait_ms, "{name}: the second slot");
        assert_eq!(query::<i64>(&mut raw, &["ZCARD", timeouts]), 2);
        listener.expect_none("queued waiters");

        // Unlock: on the head waiter's own channel only, the lock handed to
        // it outright (a redisync waiter with a watchdog; a Redisson one is
        // told "0", see tests/redisson.rs).
        held.unlock().unwrap();
        listener.expect_handed(
            "the unlock with waiters queued",
            &case.waiter_channel(&first.id),
            &first.id,
        );
        listener.expect_none("only the head waiter is told");
        first.acquired_at("the head waiter");
        assert_eq!(hgetall(&mut raw, name), one_field(&first.id, "1"));
        // The head left the queue; everyone behind moved up one wait timeout.
        assert_eq!(lrange(&mut raw, queue), std::slice::from_ref(&second.id));
        assert_eq!(zscore(&mut raw, timeouts, &first.id), None);
        assert_eq!(
            zscore(&mut raw, timeouts, &second.id),
            Some(slot2 - wait_ms)
        );

        first.join().unwrap();
        listener.expect_handed(
            "the first waiter's unlock",
            &case.waiter_channel(&second.id),
            &second.id,
        );
        listener.expect_none("only the next waiter is told");
        second.acquired_at("the second waiter");
        assert_eq!(hgetall(&mut raw, name), one_field(&second.id, "1"));
        assert!(
            !exists(&mut raw, queue) && !exists(&mut raw, timeouts),
            "{name}: queue keys left with nobody queued"
        );
        second.join().unwrap();
        listener.expect_none("an unlock with nobody queued");
        assert!(
            keys_besides_latches(&mut raw).is_empty(),
            "{name}: keys left"
        );

        // A try_lock_for that times out takes its id out of both at once.
        let held = a.fair_lock(name).lock_with_lease(LEASE).unwrap();
        let (id_tx, id_rx) = mpsc::channel();
        let giving_up = {
            let lock = b.fair_lock(name);
            thread::spawn(move || {
                id_tx.send(lock.client().current_holder_id()).unwrap();
                lock.try_lock_for(Duration::from_millis(1500))
                    .unwrap()
                    .is_none()
            })
        };
        let id = id_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        wait_until(
            "the try_lock_for waiter queued",
            Duration::from_secs(10),
            || lrange(&mut raw, queue) == [id.clone()],
        );
        let slot = zscore(&mut raw, timeouts, &id).expect("its slot");
        let ahead = slot - 1500 - wall_ms();
        assert!(
            ahead <= lease_ms && ahead > lease_ms - SLACK_MS,
            "{name}: a try_lock_for slot is the lock's TTL + its own wait, got {ahead} ms + 1500"
        );
        assert!(giving_up.join().unwrap(), "try_lock_for took a held lock");
        assert!(
            !exists(&mut raw, queue) && !exists(&mut raw, timeouts),
            "{name}: a timed-out try_lock_for left {:?} / {:?}",
            lrange(&mut raw, queue),
            query::<Vec<String>>(&mut raw, &["ZRANGE", timeouts, "0", "-1"])
        );

        // force_unlock tells the head waiter too.
        let waiter = Waiter::spawn(b.fair_lock(name));
        wait_until("a waiter queued", Duration::from_secs(10), || {
            lrange(&mut raw, queue).len() == 1
        });
        assert!(c.fair_lock(name).force_unlock().unwrap());
        listener.expect("force_unlock", &case.waiter_channel(&waiter.id), "0");
        waiter.acquired_at("after force_unlock");
        let err = held.unlock().unwrap_err();
        assert!(err.is_not_held(), "expected NotHeld, got {err:?}");
        waiter.join().unwrap();
        listener.expect_none("the last unlock and the NotHeld one");
        assert!(
            keys_besides_latches(&mut raw).is_empty(),
            "{name}: keys left"
        );
    }
}

// ---------------------------------------------------------------------------
// Read-write lock
// ---------------------------------------------------------------------------

fn sorted(mut keys: Vec<String>) -> Vec<String> {
    keys.sort();
    keys
}

fn fields(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn read_write_lock_is_a_hash_with_mode_and_holder_fields_and_a_key_per_read_hold() {
    const WATCHDOG: Duration = Duration::from_secs(20);
    const SLACK: Duration = Duration::from_secs(3);
    let server = TestServer::start();
    let mut raw = server.connection();
    let mut listen_conn = server.connection();
    let mut listener = Listener::new(&mut listen_conn);
    let client = Client::builder()
        .redis_url(server.url())
        .watchdog_timeout(WATCHDOG)
        .build()
        .unwrap();
    let other = Client::builder()
        .redis_url(server.url())
        .watchdog_timeout(WATCHDOG)
        .build()
        .unwrap();
    for case in cases() {
        let name = case.name.as_str();
        let channel = case.rw_channel.as_str();
        assert!(!channel.contains("{{"), "braces doubled in {channel}");
        let rw = client.read_write_lock(name);
        let me = client.current_holder_id();
        let my_write = format!("{me}:write");
        let them = other.current_holder_id();

        // Read: mode=read, <holder>=count, one timeout key per hold.
        let r1 = rw.read_lock().lock().unwrap();
        assert_eq!(query::<String>(&mut raw, &["TYPE", name]), "hash");
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "read"), (&me, "1")])
        );
        let hold1 = case.read_hold_key(&me, 1);
        assert_eq!(query::<String>(&mut raw, &["TYPE", &hold1]), "string");
        assert_eq!(query::<String>(&mut raw, &["GET", &hold1]), "1");
        assert_ttl_near(&hold1, pttl(&mut raw, &hold1), WATCHDOG, SLACK);
        assert_ttl_near(name, pttl(&mut raw, name), WATCHDOG, SLACK);
        let r2 = rw.read_lock().lock().unwrap();
        let hold2 = case.read_hold_key(&me, 2);
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "read"), (&me, "2")])
        );
        assert_eq!(query::<String>(&mut raw, &["GET", &hold2]), "1");
        assert_ttl_near(&hold2, pttl(&mut raw, &hold2), WATCHDOG, SLACK);
        // Another client's reader: its own field and key.
        let r3 = other.read_write_lock(name).read_lock().lock().unwrap();
        let their_hold = case.read_hold_key(&them, 1);
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "read"), (&me, "2"), (&them, "1")])
        );
        assert_eq!(
            keys_besides_latches(&mut raw),
            sorted(vec![
                name.to_owned(),
                hold1.clone(),
                hold2.clone(),
                their_hold.clone(),
            ]),
            "{name}: the hash and one key per read hold"
        );
        // Releases that leave readers publish nothing and drop their key.
        r2.unlock().unwrap();
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "read"), (&me, "1"), (&them, "1")])
        );
        assert!(!exists(&mut raw, &hold2) && exists(&mut raw, &hold1));
        r3.unlock().unwrap();
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "read"), (&me, "1")])
        );
        assert!(!exists(&mut raw, &their_hold));
        listener.expect_none("read releases while the lock stays read-held");
        // The last read release: "0" on redisson_rwlock:{name}.
        r1.unlock().unwrap();
        listener.expect("the last read unlock", channel, "0");
        listener.expect_none("after the read unlock message");
        assert!(
            keys_besides_latches(&mut raw).is_empty(),
            "{name}: keys left"
        );

        // Write: mode=write, <holder>:write=count, no timeout key.
        let w1 = rw.write_lock().lock().unwrap();
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "write"), (&my_write, "1")])
        );
        assert_ttl_near(name, pttl(&mut raw, name), WATCHDOG, SLACK);
        assert_eq!(keys_besides_latches(&mut raw), [name.to_owned()]);
        // Re-entry adds the lease to the remaining TTL (as Redisson does).
        let w2 = rw.write_lock().lock().unwrap();
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "write"), (&my_write, "2")])
        );
        let ttl = pttl(&mut raw, name);
        let lease_ms = i64::try_from(WATCHDOG.as_millis()).unwrap();
        assert!(
            ttl > lease_ms && ttl <= 2 * lease_ms,
            "{name}: PTTL {ttl} after write re-entry, expected the lease added"
        );
        // Downgrade: the writer reads too.
        let r = rw.read_lock().lock().unwrap();
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "write"), (&my_write, "2"), (&me, "1")])
        );
        assert_eq!(query::<String>(&mut raw, &["GET", &hold1]), "1");
        w2.unlock().unwrap();
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "write"), (&my_write, "1"), (&me, "1")])
        );
        listener.expect_none("a reentrant write release");
        // The last write hold goes: mode=read stays for the read hold, and
        // "1" wakes waiting readers (Redisson publishes nothing here; the
        // extra message only wakes waiters early).
        w1.unlock().unwrap();
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "read"), (&me, "1")])
        );
        listener.expect("the write unlock of a downgrade", channel, "1");
        r.unlock().unwrap();
        listener.expect("the read unlock after a downgrade", channel, "0");
        assert!(
            keys_besides_latches(&mut raw).is_empty(),
            "{name}: keys left"
        );
        // A plain final write release: "1" (read-unlock: wakes everyone).
        rw.write_lock().lock().unwrap().unlock().unwrap();
        listener.expect("the last write unlock", channel, "1");
        listener.expect_none("after the write unlock message");
        assert!(!exists(&mut raw, name));

        // force_unlock: each half only in its own mode, with its message.
        let w = rw.write_lock().lock().unwrap();
        assert!(
            !other
                .read_write_lock(name)
                .read_lock()
                .force_unlock()
                .unwrap()
        );
        listener.expect_none("a read force_unlock of a write-held lock");
        assert!(
            other
                .read_write_lock(name)
                .write_lock()
                .force_unlock()
                .unwrap()
        );
        listener.expect("write force_unlock", channel, "1");
        assert!(w.unlock().unwrap_err().is_not_held());
        let r = rw.read_lock().lock().unwrap();
        assert!(
            !other
                .read_write_lock(name)
                .write_lock()
                .force_unlock()
                .unwrap()
        );
        listener.expect_none("a write force_unlock of a read-held lock");
        assert!(
            other
                .read_write_lock(name)
                .read_lock()
                .force_unlock()
                .unwrap()
        );
        listener.expect("read force_unlock", channel, "0");
        assert!(r.unlock().unwrap_err().is_not_held());
        listener.expect_none("NotHeld unlocks");
        assert!(!exists(&mut raw, name));
        // A forced read release leaves the holds' timeout keys to expire (as
        // Redisson does); clear them for the next case's key checks.
        query::<i64>(&mut raw, &["DEL", &hold1]);
        assert!(
            keys_besides_latches(&mut raw).is_empty(),
            "{name}: keys left"
        );
    }
}

#[test]
fn the_watchdog_renews_every_read_holds_timeout_key() {
    const WATCHDOG: Duration = Duration::from_secs(1);
    let server = TestServer::start();
    let mut raw = server.connection();
    let client = Client::builder()
        .redis_url(server.url())
        .watchdog_timeout(WATCHDOG)
        .build()
        .unwrap();
    let case = &cases()[0];
    let name = case.name.as_str();
    let rw = client.read_write_lock(name);
    let me = client.current_holder_id();
    let r1 = rw.read_lock().lock().unwrap();
    let r2 = rw.read_lock().lock().unwrap();
    let keys = [case.read_hold_key(&me, 1), case.read_hold_key(&me, 2)];
    let started = Instant::now();
    while started.elapsed() < WATCHDOG * 5 / 2 {
        thread::sleep(Duration::from_millis(100));
        for key in keys.iter().map(String::as_str).chain([name]) {
            let ttl = pttl(&mut raw, key);
            assert!(
                ttl > 0 && ttl <= 1_000,
                "{key}: PTTL {ttl} {:?} into a watchdog hold (timeout {WATCHDOG:?})",
                started.elapsed()
            );
        }
    }
    r2.unlock().unwrap();
    assert!(!exists(&mut raw, &keys[1]));
    r1.unlock().unwrap();
    assert!(keys_besides_latches(&mut raw).is_empty());
}

#[test]
fn a_simulated_redisson_read_write_lock_and_redisync_exclude_and_wake_each_other() {
    const JAVA_LEASE_MS: u64 = 30_000;
    let server = TestServer::start();
    let mut raw = server.connection();
    let client = Client::open(&server.url()).unwrap();
    for case in cases() {
        let name = case.name.as_str();
        let channel = case.rw_channel.as_str();
        let java = format!("{}:1", uuid::Uuid::new_v4());
        let java_write = format!("{java}:write");
        let rw = client.read_write_lock(name);

        // A Redisson writer: HSET mode write, <id>:write 1, PEXPIRE.
        let _: () = redis::pipe()
            .atomic()
            .cmd("HSET")
            .arg(name)
            .arg("mode")
            .arg("write")
            .arg(&java_write)
            .arg(1)
            .ignore()
            .cmd("PEXPIRE")
            .arg(name)
            .arg(JAVA_LEASE_MS)
            .ignore()
            .query(&mut raw)
            .unwrap();
        assert!(
            rw.read_lock().try_lock().unwrap().is_none(),
            "{name}: read beside a Redisson writer"
        );
        assert!(
            rw.write_lock().try_lock().unwrap().is_none(),
            "{name}: write beside a Redisson writer"
        );
        assert!(rw.write_lock().is_locked().unwrap());
        assert!(!rw.read_lock().is_locked().unwrap());
        let ttl = rw
            .write_lock()
            .remaining_ttl()
            .unwrap()
            .expect("Redisson's TTL");
        assert!(
            ttl > Duration::from_secs(25),
            "{name}: remaining_ttl {ttl:?}"
        );

        // Our reader waits and is woken by Redisson's write unlock.
        let reader = Waiter::spawn(rw.read_lock());
        wait_until("our reader subscribed", Duration::from_secs(10), || {
            numsub(&mut raw, channel) >= 1
        });
        thread::sleep(Duration::from_millis(100));
        assert!(
            reader.acquired.try_recv().is_err(),
            "{name}: our reader got in"
        );
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "write"), (&java_write, "1")])
        );
        let released = Instant::now();
        let _: () = redis::pipe()
            .atomic()
            .cmd("DEL")
            .arg(name)
            .ignore()
            .cmd("PUBLISH")
            .arg(channel)
            .arg("1")
            .ignore()
            .query(&mut raw)
            .unwrap();
        let woke = reader
            .acquired_at("after Redisson's write unlock")
            .duration_since(released);
        assert!(
            woke < Duration::from_secs(1),
            "{name}: our reader got in {woke:?} after Redisson's write unlock (lease 30 s)"
        );
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "read"), (&reader.id, "1")])
        );

        // Conversely: we read; Redisson's write condition (no mode, or write
        // mode with its field) fails, and our last read unlock wakes its
        // writer with "0".
        let mut sub_conn = server.connection();
        let mut java_waiter = sub_conn.as_pubsub();
        java_waiter.subscribe(channel).unwrap();
        let mode: Option<String> = query(&mut raw, &["HGET", name, "mode"]);
        assert_eq!(mode.as_deref(), Some("read"));
        reader.join().unwrap();
        java_waiter
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let msg = java_waiter.get_message().unwrap();
        assert_eq!(msg.get_channel_name(), channel);
        assert_eq!(msg.get_payload_bytes(), b"0");
        drop(java_waiter);
        assert!(!exists(&mut raw, name));

        // A Redisson reader (its field and its own timeout key): our reader
        // joins, our writer cannot; our read release keeps Redisson's hold
        // (its timeout key is still live) and publishes nothing.
        let java_hold = case.read_hold_key(&java, 1);
        let _: () = redis::pipe()
            .atomic()
            .cmd("HSET")
            .arg(name)
            .arg("mode")
            .arg("read")
            .arg(&java)
            .arg(1)
            .ignore()
            .cmd("SET")
            .arg(&java_hold)
            .arg(1)
            .arg("PX")
            .arg(JAVA_LEASE_MS)
            .ignore()
            .cmd("PEXPIRE")
            .arg(name)
            .arg(JAVA_LEASE_MS)
            .ignore()
            .query(&mut raw)
            .unwrap();
        assert!(
            rw.write_lock().try_lock().unwrap().is_none(),
            "{name}: write beside Redisson's reader"
        );
        let ours = rw
            .read_lock()
            .try_lock()
            .unwrap()
            .expect("a reader beside Redisson's reader");
        let writer = Waiter::spawn(rw.write_lock());
        thread::sleep(Duration::from_millis(200));
        ours.unlock().unwrap();
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "read"), (&java, "1")]),
            "{name}: our read release must leave Redisson's read hold"
        );
        assert!(
            pttl(&mut raw, name) > 20_000,
            "{name}: the hash lost Redisson's TTL"
        );
        thread::sleep(Duration::from_millis(200));
        assert!(
            writer.acquired.try_recv().is_err(),
            "{name}: our writer got in beside Redisson's reader"
        );
        // Redisson's last read unlock: DEL its key and the hash, PUBLISH 0.
        let released = Instant::now();
        let _: () = redis::pipe()
            .atomic()
            .cmd("DEL")
            .arg(&java_hold)
            .arg(name)
            .ignore()
            .cmd("PUBLISH")
            .arg(channel)
            .arg("0")
            .ignore()
            .query(&mut raw)
            .unwrap();
        let woke = writer
            .acquired_at("after Redisson's read unlock")
            .duration_since(released);
        assert!(
            woke < Duration::from_secs(1),
            "{name}: our writer got in {woke:?} after Redisson's read unlock"
        );
        assert_eq!(
            hgetall(&mut raw, name),
            fields(&[("mode", "write"), (&format!("{}:write", writer.id), "1")])
        );
        writer.join().unwrap();
        assert!(
            keys_besides_latches(&mut raw).is_empty(),
            "{name}: keys left"
        );
    }
}

// ---------------------------------------------------------------------------
// Semaphore, permit-expirable semaphore, count-down latch
// ---------------------------------------------------------------------------

/// A semaphore or latch name and the names Redisson derives from it.
struct CounterCase {
    name: String,
    /// Both semaphores' channel.
    sc_channel: String,
    /// The permit-expirable semaphore's leases (zset).
    leases: String,
    /// The latch's channel: braces always added, even around a hash tag.
    latch_channel: String,
}

/// One name without a hash tag and one with its own (`{tag}:7`).
fn counter_cases() -> [CounterCase; 2] {
    let plain = unique_name("wire:counter");
    let tag = unique_name("slots");
    let braced = format!("{{{tag}}}:7");
    [
        CounterCase {
            sc_channel: keys::semaphore_channel(&plain),
            leases: keys::permit_timeouts(&plain),
            latch_channel: format!("redisson_countdownlatch__channel__{{{plain}}}"),
            name: plain,
        },
        CounterCase {
            sc_channel: format!("redisson_sc:{{{tag}}}:7"),
            leases: format!("{{{tag}}}:7:timeout"),
            latch_channel: format!("redisson_countdownlatch__channel__{{{{{tag}}}:7}}"),
            name: braced,
        },
    ]
}

#[test]
fn counter_cases_spell_redissons_names() {
    let [plain, braced] = counter_cases();
    assert!(plain.sc_channel.starts_with("redisson_sc:{wire:counter:"));
    assert!(!braced.sc_channel.contains("{{"));
    assert!(braced.leases.starts_with("{slots:") && braced.leases.ends_with("}:7:timeout"));
    assert!(
        braced
            .latch_channel
            .starts_with("redisson_countdownlatch__channel__{{slots:")
    );
    assert!(braced.latch_channel.ends_with("}:7}"));
}

fn get(conn: &mut redis::Connection, key: &str) -> Option<String> {
    query(conn, &["GET", key])
}

#[test]
fn semaphore_is_a_string_count_and_releases_publish_the_new_count() {
    let server = TestServer::start();
    let mut raw = server.connection();
    let mut listen_conn = server.connection();
    let mut listener = Listener::new(&mut listen_conn);
    let client = Client::open(&server.url()).unwrap();
    for case in counter_cases() {
        let name = case.name.as_str();
        let channel = case.sc_channel.as_str();
        let semaphore = client.semaphore(name);

        assert!(semaphore.try_set_permits(3).unwrap());
        assert_eq!(query::<String>(&mut raw, &["TYPE", name]), "string");
        assert_eq!(get(&mut raw, name).as_deref(), Some("3"));
        assert_eq!(pttl(&mut raw, name), -1, "{name}: a semaphore has no TTL");
        assert_eq!(
            keys_besides_latches(&mut raw),
            [name.to_owned()],
            "the count must be stored at the name exactly, and be the only key"
        );
        listener.expect("try_set_permits", channel, "3");
        assert!(!semaphore.try_set_permits(5).unwrap());
        listener.expect_none("a try_set_permits that did not set");

        // Acquiring takes from the count and announces nothing.
        let two = semaphore.acquire(2).unwrap();
        assert_eq!(get(&mut raw, name).as_deref(), Some("1"));
        assert!(semaphore.try_acquire(2).unwrap().is_none());
        assert_eq!(get(&mut raw, name).as_deref(), Some("1"));
        listener.expect_none("acquires");
        // Releases announce the new count.
        two.release().unwrap();
        assert_eq!(get(&mut raw, name).as_deref(), Some("3"));
        listener.expect("a guard's release", channel, "3");
        drop(semaphore.try_acquire(1).unwrap().expect("a permit"));
        listener.expect("a guard's drop", channel, "3");
        semaphore.add_permits(-4).unwrap();
        assert_eq!(get(&mut raw, name).as_deref(), Some("-1"));
        listener.expect_none("removing permits");
        semaphore.add_permits(2).unwrap();
        listener.expect("add_permits", channel, "1");
        semaphore.release(1).unwrap();
        listener.expect("release(1)", channel, "2");
        assert_eq!(get(&mut raw, name).as_deref(), Some("2"));

        // Draining leaves 0 and announces nothing.
        assert_eq!(semaphore.drain_permits().unwrap(), 2);
        assert_eq!(get(&mut raw, name).as_deref(), Some("0"));
        listener.expect_none("drain_permits");
        assert_eq!(keys_besides_latches(&mut raw), [name.to_owned()]);
        // redisync's own records of the counting calls: one per acquire
        // (`1` took, `0` found too few) and per release or add (`1`), each
        // in the object's slot with a TTL of at most RECORD_MS.
        let escaped = name
            .replace('[', "\\[")
            .replace('*', "\\*")
            .replace('?', "\\?");
        let pattern = keys::suffixed(&escaped, "redisync_op:*");
        let records: Vec<String> = query(&mut raw, &["KEYS", &pattern]);
        assert_eq!(
            records.len(),
            11,
            "{name}: 3 acquires (2 took), 5 releases and adds, 2 sets and a drain: {records:?}"
        );
        for record in &records {
            let ttl = pttl(&mut raw, record);
            assert!(
                ttl > 0 && ttl <= redisync::internal::semaphore::RECORD_MS,
                "{record}: {ttl}"
            );
        }
        let values: Vec<String> = records.iter().map(|r| get(&mut raw, r).unwrap()).collect();
        // `0`: the acquire that found too few (a late copy of it takes nothing).
        assert_eq!(values.iter().filter(|v| *v == "0").count(), 1, "{values:?}");
        assert_eq!(values.iter().filter(|v| *v == "1").count(), 7, "{values:?}");
        // The writes that act once (`ops::once`) keep their outcome: the
        // set that set (`i1`), the one that did not (`i0`), the drain (`s2`).
        for outcome in ["i1", "i0", "s2"] {
            assert!(values.iter().any(|v| v == outcome), "{outcome}: {values:?}");
        }
        for record in records {
            query::<i64>(&mut raw, &["DEL", &record]);
        }
        query::<i64>(&mut raw, &["DEL", name]);
    }
}

/// Whether `id` looks like Redisson's permit id: 32 lowercase hex digits.
fn is_permit_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

#[test]
fn permit_expirable_leases_are_a_zset_of_id_bytes_scored_by_lease_end() {
    const LEASE_MS: i64 = 10_000;
    let server = TestServer::start();
    let mut raw = server.connection();
    let mut listen_conn = server.connection();
    let mut listener = Listener::new(&mut listen_conn);
    let client = Client::open(&server.url()).unwrap();
    for case in counter_cases() {
        let name = case.name.as_str();
        let leases = case.leases.as_str();
        let channel = case.sc_channel.as_str();
        let semaphore = client.permit_expirable_semaphore(name);

        assert!(semaphore.try_set_permits(2).unwrap());
        listener.expect("try_set_permits", channel, "2");
        let before = wall_ms();
        let id = semaphore
            .acquire_id(Duration::from_millis(LEASE_MS as u64))
            .unwrap();
        let after = wall_ms();
        assert!(is_permit_id(id.as_str()), "permit id {id}");
        assert_eq!(query::<String>(&mut raw, &["TYPE", leases]), "zset");
        let members: Vec<(Vec<u8>, f64)> =
            query(&mut raw, &["ZRANGE", leases, "0", "-1", "WITHSCORES"]);
        assert_eq!(members.len(), 1, "{leases}: {members:?}");
        // Stored as the 16 bytes the id's hex spells, as Redisson does.
        assert_eq!(members[0].0, common::permit_id_bytes(id.as_str()));
        let score = members[0].1 as i64;
        assert!(
            score >= before + LEASE_MS && score <= after + LEASE_MS,
            "{leases}: score {score}, expected now + {LEASE_MS} ms in [{}, {}]",
            before + LEASE_MS,
            after + LEASE_MS
        );
        assert_eq!(get(&mut raw, name).as_deref(), Some("1"));
        assert_eq!(pttl(&mut raw, leases), -1, "{leases}: the zset has no TTL");
        assert_eq!(
            keys_besides_latches(&mut raw),
            sorted(vec![leases.to_owned(), name.to_owned()])
        );
        listener.expect_none("an acquire");

        // A release removes the id and announces the new count.
        semaphore.release(&id).unwrap();
        assert!(
            !exists(&mut raw, leases),
            "{leases}: left after the release"
        );
        assert_eq!(get(&mut raw, name).as_deref(), Some("2"));
        listener.expect("release", channel, "2");
        assert!(!semaphore.try_release(&id).unwrap());
        listener.expect_none("a release of an unknown id");

        // An expired lease is reclaimed by the next script, which announces
        // the new count.
        let short = semaphore.acquire_id(Duration::from_millis(100)).unwrap();
        assert!(permit_score(&mut raw, leases, short.as_str()).is_some());
        thread::sleep(Duration::from_millis(300));
        assert_eq!(semaphore.available_permits().unwrap(), 2);
        listener.expect("reclaiming an expired lease", channel, "2");
        assert!(!exists(&mut raw, leases));

        // A permit leased by Redisson (its own id, an expired score) is
        // reclaimed by our acquire, and its live permit is left alone.
        let java_expired = uuid::Uuid::new_v4().simple().to_string();
        let java_live = uuid::Uuid::new_v4().simple().to_string();
        let now = wall_ms();
        let _: () = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(name)
            .arg(0)
            .ignore()
            .cmd("ZADD")
            .arg(leases)
            .arg(now - 1_000)
            .arg(common::permit_id_bytes(&java_expired))
            .arg(now + 60_000)
            .arg(common::permit_id_bytes(&java_live))
            .ignore()
            .query(&mut raw)
            .unwrap();
        let ours = semaphore
            .try_acquire_id(Duration::from_secs(30))
            .unwrap()
            .expect("the permit of Redisson's expired lease");
        listener.expect("reclaiming Redisson's expired lease", channel, "1");
        assert_eq!(get(&mut raw, name).as_deref(), Some("0"));
        assert_eq!(permit_score(&mut raw, leases, &java_expired), None);
        assert!(permit_score(&mut raw, leases, &java_live).is_some());
        assert!(permit_score(&mut raw, leases, ours.as_str()).is_some());
        assert!(
            semaphore
                .try_acquire_id(Duration::from_secs(30))
                .unwrap()
                .is_none()
        );
        semaphore.release(&ours).unwrap();
        listener.expect("release", channel, "1");
        query::<i64>(&mut raw, &["DEL", name, leases]);
    }
}

#[test]
fn latch_is_a_string_count_that_announces_zero_and_new_counts() {
    let server = TestServer::start();
    let mut raw = server.connection();
    let mut listen_conn = server.connection();
    let mut listener = Listener::new(&mut listen_conn);
    let client = Client::open(&server.url()).unwrap();
    for case in counter_cases() {
        let name = case.name.as_str();
        let channel = case.latch_channel.as_str();
        let latch = client.count_down_latch(name);

        assert!(latch.try_set_count(2).unwrap());
        assert_eq!(query::<String>(&mut raw, &["TYPE", name]), "string");
        assert_eq!(get(&mut raw, name).as_deref(), Some("2"));
        assert_eq!(pttl(&mut raw, name), -1, "{name}: a latch has no TTL");
        assert_eq!(keys_besides_latches(&mut raw), [name.to_owned()]);
        listener.expect("try_set_count (new count)", channel, "1");
        assert!(!latch.try_set_count(3).unwrap());
        listener.expect_none("a try_set_count that did not set");

        latch.count_down().unwrap();
        assert_eq!(get(&mut raw, name).as_deref(), Some("1"));
        listener.expect_none("a count_down above zero");
        latch.count_down().unwrap();
        assert!(!exists(&mut raw, name), "{name}: left at zero");
        listener.expect("count_down to zero", channel, "0");
        latch.count_down().unwrap();
        assert!(
            !exists(&mut raw, name),
            "{name}: a count_down below zero left a key"
        );
        listener.expect_none("a count_down of an open latch");

        assert!(latch.try_set_count(1).unwrap());
        listener.expect("try_set_count again", channel, "1");
        assert!(latch.delete().unwrap());
        assert!(!exists(&mut raw, name));
        listener.expect("delete (new count)", channel, "1");
        assert!(!latch.delete().unwrap());
        listener.expect_none("a delete of an absent latch");
    }
}

/// Runs `f` on a thread and reports the instant it returned.
fn spawn_timed<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> (thread::JoinHandle<T>, mpsc::Receiver<Instant>) {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let value = f();
        let _ = tx.send(Instant::now());
        value
    });
    (handle, rx)
}

/// Waits until `channel` has a subscriber and a little more, then checks
/// the waiter is still waiting.
fn settle(raw: &mut redis::Connection, channel: &str, rx: &mpsc::Receiver<Instant>, what: &str) {
    wait_until(
        &format!("{what}: our waiter subscribed"),
        Duration::from_secs(10),
        || numsub(raw, channel) >= 1,
    );
    thread::sleep(Duration::from_millis(100));
    assert!(rx.try_recv().is_err(), "{what}: our waiter did not wait");
}

/// Asserts the waiter returned within 1 s of `at`.
fn woken(rx: &mpsc::Receiver<Instant>, at: Instant, what: &str) {
    let returned = rx
        .recv_timeout(Duration::from_secs(25))
        .unwrap_or_else(|_| panic!("{what}: our waiter was never woken"));
    let latency = returned.duration_since(at);
    assert!(
        latency < Duration::from_secs(1),
        "{what}: our waiter returned {latency:?} after Redisson's message"
    );
}

#[test]
fn simulated_redisson_releasers_wake_our_semaphore_and_latch_waiters() {
    let server = TestServer::start();
    let mut raw = server.connection();
    let client = Client::open(&server.url()).unwrap();
    for case in counter_cases() {
        let name = case.name.as_str();
        let channel = case.sc_channel.as_str();

        // Semaphore: Redisson's release is INCRBY, then PUBLISH of the new
        // count.
        query::<()>(&mut raw, &["SET", name, "0"]);
        let semaphore = client.semaphore(name);
        let (waiter, rx) = spawn_timed(move || semaphore.acquire(1).unwrap().forget());
        settle(&mut raw, channel, &rx, "semaphore");
        let released = Instant::now();
        let count: i64 = query(&mut raw, &["INCRBY", name, "1"]);
        query::<i64>(&mut raw, &["PUBLISH", channel, &count.to_string()]);
        woken(&rx, released, "semaphore");
        assert_eq!(waiter.join().unwrap(), 1);
        assert_eq!(get(&mut raw, name).as_deref(), Some("0"));

        // And back: our release wakes a Redisson waiter with the count.
        let mut sub_conn = server.connection();
        let mut java_waiter = sub_conn.as_pubsub();
        java_waiter.subscribe(channel).unwrap();
        client.semaphore(name).release(1).unwrap();
        java_waiter
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let msg = java_waiter.get_message().unwrap();
        assert_eq!(msg.get_channel_name(), channel);
        assert_eq!(msg.get_payload_bytes(), b"1");
        drop(java_waiter);
        query::<i64>(&mut raw, &["DEL", name]);

        // Permit-expirable semaphore: Redisson holds the only permit with a
        // long lease; its release is ZREM, INCR, PUBLISH of the new count.
        let java_id = uuid::Uuid::new_v4().simple().to_string();
        let leases = case.leases.as_str();
        let far = (wall_ms() + 60_000).to_string();
        query::<()>(&mut raw, &["SET", name, "0"]);
        let _: i64 = redis::cmd("ZADD")
            .arg(leases)
            .arg(&far)
            .arg(common::permit_id_bytes(&java_id))
            .query(&mut raw)
            .unwrap();
        let expirable = client.permit_expirable_semaphore(name);
        let (waiter, rx) =
            spawn_timed(move || expirable.acquire_id(Duration::from_secs(30)).unwrap());
        settle(&mut raw, channel, &rx, "permit-expirable semaphore");
        let released = Instant::now();
        let _: i64 = redis::cmd("ZREM")
            .arg(leases)
            .arg(common::permit_id_bytes(&java_id))
            .query(&mut raw)
            .unwrap();
        let count: i64 = query(&mut raw, &["INCR", name]);
        query::<i64>(&mut raw, &["PUBLISH", channel, &count.to_string()]);
        woken(&rx, released, "permit-expirable semaphore");
        let ours = waiter.join().unwrap();
        assert!(permit_score(&mut raw, leases, ours.as_str()).is_some());
        query::<i64>(&mut raw, &["DEL", name, leases]);

        // Latch: Redisson's count_down is DECR; at zero DEL and PUBLISH 0.
        let latch_channel = case.latch_channel.as_str();
        query::<()>(&mut raw, &["SET", name, "2"]);
        let latch = client.count_down_latch(name);
        let (waiter, rx) = spawn_timed(move || latch.wait().unwrap());
        settle(&mut raw, latch_channel, &rx, "latch");
        query::<i64>(&mut raw, &["DECR", name]);
        thread::sleep(Duration::from_millis(200));
        assert!(rx.try_recv().is_err(), "the latch opened at 1");
        let opened = Instant::now();
        query::<i64>(&mut raw, &["DECR", name]);
        query::<i64>(&mut raw, &["DEL", name]);
        query::<i64>(&mut raw, &["PUBLISH", latch_channel, "0"]);
        woken(&rx, opened, "latch");
        waiter.join().unwrap();
    }
}
