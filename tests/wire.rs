//! The Redisson 3.x wire layout of the reentrant lock, checked with raw Redis
//! commands on a real `redis-server` (`../shared/WIRE.md`): the lock hash and
//! its field, the TTL, the unlock channel and message, the unlock latch, and
//! a simulated Redisson (Java) client excluding and waking ours and back.
//!
//! Every expected key and channel name is spelled out here literally rather
//! than built with the library's helpers, so a mistake there shows up here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{TestServer, hgetall, numsub, pttl, unique_name, wait_until};
use redisync::Client;

/// A lock name and the names Redisson derives from it.
struct Case {
    name: String,
    channel: String,
    latch_prefix: String,
}

/// One name without a hash tag (braces added around it) and one with its
/// own hash tag (no braces added, none doubled).
fn cases() -> [Case; 2] {
    let plain = unique_name("wire:plain");
    let tag = unique_name("orders");
    let braced = format!("{{{tag}}}:42");
    [
        Case {
            channel: format!("redisson_lock__channel:{{{plain}}}"),
            latch_prefix: format!("redisson_unlock_latch:{{{plain}}}:"),
            name: plain,
        },
        Case {
            channel: format!("redisson_lock__channel:{{{tag}}}:42"),
            latch_prefix: format!("redisson_unlock_latch:{{{tag}}}:42:"),
            name: braced,
        },
    ]
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

/// Every key on the server except unlock latches.
fn keys_besides_latches(conn: &mut redis::Connection) -> Vec<String> {
    let mut keys: Vec<String> = query(conn, &["KEYS", "*"]);
    keys.retain(|k| !k.starts_with("redisson_unlock_latch:"));
    keys.sort();
    keys
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

#[test]
fn unlock_leaves_a_latch_key_with_a_short_ttl() {
    let server = TestServer::start();
    let mut raw = server.connection();
    let client = Client::open(&server.url()).unwrap();
    for case in cases() {
        let name = case.name.as_str();
        let pattern = format!("{}*", case.latch_prefix);
        let lock = client.lock(name);
        let latches = |raw: &mut redis::Connection| -> Vec<String> {
            let mut keys: Vec<String> = query(raw, &["KEYS", &pattern]);
            keys.sort();
            keys
        };
        assert!(latches(&mut raw).is_empty());

        let outer = lock.lock().unwrap();
        let inner = lock.lock().unwrap();
        assert!(latches(&mut raw).is_empty(), "a latch before any unlock");

        // A reentrant release stores "0" (still held)...
        inner.unlock().unwrap();
        let first = latches(&mut raw);
        assert_eq!(first.len(), 1, "{name}: latches {first:?}");
        // ...and the last one "1" (released), each under its own request id.
        outer.unlock().unwrap();
        let both = latches(&mut raw);
        assert_eq!(both.len(), 2, "{name}: latches {both:?}");
        let second: Vec<&String> = both.iter().filter(|k| !first.contains(k)).collect();
        assert_eq!(second.len(), 1);
        for (key, value) in [(&first[0], "0"), (second[0], "1")] {
            let id = key.strip_prefix(case.latch_prefix.as_str()).unwrap();
            assert!(
                !id.is_empty() && !id.contains('{') && !id.contains('}'),
                "{key}: bad request id {id:?}"
            );
            assert_eq!(query::<String>(&mut raw, &["TYPE", key]), "string", "{key}");
            assert_eq!(query::<String>(&mut raw, &["GET", key]), value, "{key}");
            let ttl = pttl(&mut raw, key);
            assert!(
                ttl > 0 && ttl <= 10_000,
                "{key}: PTTL {ttl}, expected (0, 10000]"
            );
        }
        assert!(!exists(&mut raw, name));
    }
}
