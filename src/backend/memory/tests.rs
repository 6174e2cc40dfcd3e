//! The store's behaviour through the real scripts (the tests of the Rust
//! port the scripts replaced, run against the scripts themselves), the
//! conversions between Lua and Redis values, and the test hooks.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::thread;

use super::*;
use crate::RwMode;
use crate::backend::{Effect, Message, Resend, Script};
use crate::error::MAX_LEASE_MS;
use crate::keys::LATCH_NEW_COUNT_MESSAGE;
use crate::ops;
use crate::ops::expirable::ExpirableKeys;
use crate::ops::fair_lock::FairLockKeys;
use crate::ops::lock::{Acquire, FencedAcquire, LockState, Release};
use crate::ops::rw_lock::{RwLockKeys, RwLockState};

/// The operations under the names the Rust port had, so its tests read as
/// they did.
trait Ops {
    fn lock_acquire(&self, name: &str, holder: &str, lease_ms: i64) -> Result<Acquire>;
    fn fenced_lock_acquire(
        &self,
        name: &str,
        token_key: &str,
        holder: &str,
        lease_ms: i64,
    ) -> Result<FencedAcquire>;
    fn lock_renew(&self, name: &str, holder: &str, lease_ms: i64) -> Result<bool>;
    fn lock_release(
        &self,
        name: &str,
        channel: &str,
        holder: &str,
        lease_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release>;
    fn lock_force_release(&self, name: &str, channel: &str) -> Result<bool>;
    fn lock_state(&self, name: &str, holder: &str) -> Result<LockState>;
    fn fair_lock_acquire(
        &self,
        keys: &FairLockKeys<'_>,
        holder: &str,
        lease_ms: i64,
        wait_ms: i64,
        now_ms: i64,
        enqueue: bool,
    ) -> Result<Acquire>;
    fn fair_lock_release(
        &self,
        keys: &FairLockKeys<'_>,
        holder: &str,
        lease_ms: i64,
        now_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release>;
    fn fair_lock_cancel(&self, keys: &FairLockKeys<'_>, holder: &str, wait_ms: i64) -> Result<()>;
    fn fair_lock_force_release(&self, keys: &FairLockKeys<'_>, now_ms: i64) -> Result<bool>;
    fn read_lock_acquire(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<Acquire>;
    fn write_lock_acquire(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<Acquire>;
    fn read_lock_release(
        &self,
        keys: &RwLockKeys<'_>,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release>;
    fn write_lock_release(
        &self,
        keys: &RwLockKeys<'_>,
        lease_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release>;
    fn read_lock_renew(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<bool>;
    fn rw_lock_force_release(&self, keys: &RwLockKeys<'_>, mode: RwMode) -> Result<bool>;
    fn rw_lock_state(&self, name: &str, field: &str) -> Result<RwLockState>;
    fn counter_set_if_absent(
        &self,
        name: &str,
        channel: &str,
        value: i64,
        message: &str,
    ) -> Result<bool>;
    fn counter_get(&self, name: &str) -> Result<i64>;
    fn semaphore_add(&self, name: &str, channel: &str, delta: i64) -> Result<i64>;
    fn semaphore_try_acquire(&self, name: &str, permits: i64) -> Result<bool>;
    fn semaphore_drain(&self, name: &str) -> Result<i64>;
    fn expirable_acquire(
        &self,
        keys: &ExpirableKeys<'_>,
        permit_id: &str,
        lease_end_ms: i64,
        now_ms: i64,
    ) -> Result<Acquire>;
    fn expirable_release(
        &self,
        keys: &ExpirableKeys<'_>,
        permit_id: &str,
        now_ms: i64,
    ) -> Result<bool>;
    fn expirable_available(&self, keys: &ExpirableKeys<'_>, now_ms: i64) -> Result<i64>;
    fn latch_count_down(&self, name: &str, channel: &str) -> Result<i64>;
    fn latch_delete(&self, name: &str, channel: &str) -> Result<bool>;
}

impl Ops for MemoryBackend {
    fn lock_acquire(&self, name: &str, holder: &str, lease_ms: i64) -> Result<Acquire> {
        ops::lock::acquire(self, name, holder, lease_ms)
    }
    fn fenced_lock_acquire(
        &self,
        name: &str,
        token_key: &str,
        holder: &str,
        lease_ms: i64,
    ) -> Result<FencedAcquire> {
        ops::lock::fenced_acquire(self, name, token_key, holder, lease_ms)
    }
    fn lock_renew(&self, name: &str, holder: &str, lease_ms: i64) -> Result<bool> {
        ops::lock::renew(self, name, holder, lease_ms)
    }
    fn lock_release(
        &self,
        name: &str,
        channel: &str,
        holder: &str,
        lease_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release> {
        ops::lock::release(self, name, channel, holder, lease_ms, latch_key, latch_ms)
    }
    fn lock_force_release(&self, name: &str, channel: &str) -> Result<bool> {
        ops::lock::force_release(self, name, channel)
    }
    fn lock_state(&self, name: &str, holder: &str) -> Result<LockState> {
        ops::lock::state(self, name, holder)
    }
    fn fair_lock_acquire(
        &self,
        keys: &FairLockKeys<'_>,
        holder: &str,
        lease_ms: i64,
        wait_ms: i64,
        now_ms: i64,
        enqueue: bool,
    ) -> Result<Acquire> {
        ops::fair_lock::acquire(self, keys, holder, lease_ms, wait_ms, now_ms, enqueue)
    }
    fn fair_lock_release(
        &self,
        keys: &FairLockKeys<'_>,
        holder: &str,
        lease_ms: i64,
        now_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release> {
        ops::fair_lock::release(self, keys, holder, lease_ms, now_ms, latch_key, latch_ms)
    }
    fn fair_lock_cancel(&self, keys: &FairLockKeys<'_>, holder: &str, wait_ms: i64) -> Result<()> {
        ops::fair_lock::cancel(self, keys, holder, wait_ms)
    }
    fn fair_lock_force_release(&self, keys: &FairLockKeys<'_>, now_ms: i64) -> Result<bool> {
        ops::fair_lock::force_release(self, keys, now_ms)
    }
    fn read_lock_acquire(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<Acquire> {
        ops::rw_lock::read_acquire(self, keys, lease_ms)
    }
    fn write_lock_acquire(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<Acquire> {
        ops::rw_lock::write_acquire(self, keys, lease_ms)
    }
    fn read_lock_release(
        &self,
        keys: &RwLockKeys<'_>,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release> {
        ops::rw_lock::read_release(self, keys, latch_key, latch_ms)
    }
    fn write_lock_release(
        &self,
        keys: &RwLockKeys<'_>,
        lease_ms: i64,
        latch_key: &str,
        latch_ms: i64,
    ) -> Result<Release> {
        ops::rw_lock::write_release(self, keys, lease_ms, latch_key, latch_ms)
    }
    fn read_lock_renew(&self, keys: &RwLockKeys<'_>, lease_ms: i64) -> Result<bool> {
        ops::rw_lock::read_renew(self, keys, lease_ms)
    }
    fn rw_lock_force_release(&self, keys: &RwLockKeys<'_>, mode: RwMode) -> Result<bool> {
        ops::rw_lock::force_release(self, keys, mode)
    }
    fn rw_lock_state(&self, name: &str, field: &str) -> Result<RwLockState> {
        ops::rw_lock::state(self, name, field)
    }
    fn counter_set_if_absent(
        &self,
        name: &str,
        channel: &str,
        value: i64,
        message: &str,
    ) -> Result<bool> {
        ops::counter::set_if_absent(self, name, channel, value, message)
    }
    fn counter_get(&self, name: &str) -> Result<i64> {
        ops::counter::get(self, name)
    }
    fn semaphore_add(&self, name: &str, channel: &str, delta: i64) -> Result<i64> {
        ops::semaphore::add(self, name, channel, delta)
    }
    fn semaphore_try_acquire(&self, name: &str, permits: i64) -> Result<bool> {
        ops::semaphore::try_acquire(self, name, permits)
    }
    fn semaphore_drain(&self, name: &str) -> Result<i64> {
        ops::semaphore::drain(self, name)
    }
    fn expirable_acquire(
        &self,
        keys: &ExpirableKeys<'_>,
        permit_id: &str,
        lease_end_ms: i64,
        now_ms: i64,
    ) -> Result<Acquire> {
        ops::expirable::acquire(self, keys, permit_id, lease_end_ms, now_ms)
    }
    fn expirable_release(
        &self,
        keys: &ExpirableKeys<'_>,
        permit_id: &str,
        now_ms: i64,
    ) -> Result<bool> {
        ops::expirable::release(self, keys, permit_id, now_ms)
    }
    fn expirable_available(&self, keys: &ExpirableKeys<'_>, now_ms: i64) -> Result<i64> {
        ops::expirable::available(self, keys, now_ms)
    }
    fn latch_count_down(&self, name: &str, channel: &str) -> Result<i64> {
        ops::latch::count_down(self, name, channel)
    }
    fn latch_delete(&self, name: &str, channel: &str) -> Result<bool> {
        ops::latch::delete(self, name, channel)
    }
}

impl MemoryBackend {
    /// Runs one command, as a script's `redis.call` would.
    fn command(&self, args: &[&str]) -> Reply {
        let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
        self.inner
            .with_store(|store| {
                store.start_run();
                commands::execute(store, &args)
            })
            .unwrap()
    }

    /// Runs `f` over the commands under the Rust port's method names.
    fn run<T>(&self, f: impl FnOnce(&mut Db<'_>) -> Result<T>) -> Result<T> {
        f(&mut Db(self))
    }

    /// Keys stored, expired or not (what the process holds in memory).
    fn stored(&self) -> usize {
        self.inner.with_store(|store| store.keys.stored()).unwrap()
    }

    /// Keys in the expiry index.
    fn indexed(&self) -> usize {
        self.inner.with_store(|store| store.keys.indexed()).unwrap()
    }

    /// Open pub/sub connections.
    fn connections(&self) -> usize {
        self.inner.subscribers.lock().len()
    }
}

/// The commands under the Rust port's `Db` method names.
struct Db<'a>(&'a MemoryBackend);

/// A command's reply, its error reply as a protocol error.
fn checked(reply: Reply) -> Result<Reply> {
    match reply {
        Reply::Error(text) => Err(Error::protocol(text)),
        reply => Ok(reply),
    }
}

fn text(reply: Reply) -> Option<String> {
    reply.as_text().map(str::to_owned)
}

fn texts(reply: Reply) -> Vec<String> {
    reply
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item.as_text().unwrap().to_owned())
        .collect()
}

impl Db<'_> {
    fn int(&self, args: &[&str]) -> Result<i64> {
        Ok(checked(self.0.command(args))?.as_int().unwrap())
    }
    fn exists(&mut self, key: &str) -> bool {
        self.int(&["exists", key]).unwrap() == 1
    }
    fn pttl(&mut self, key: &str) -> i64 {
        self.int(&["pttl", key]).unwrap()
    }
    fn pexpire(&mut self, key: &str, ms: i64) {
        self.int(&["pexpire", key, &ms.to_string()]).unwrap();
    }
    fn get(&mut self, key: &str) -> Result<Option<String>> {
        checked(self.0.command(&["get", key])).map(text)
    }
    fn set(&mut self, key: &str, value: &str) {
        checked(self.0.command(&["set", key, value])).unwrap();
    }
    fn set_px(&mut self, key: &str, value: &str, ms: i64) {
        checked(self.0.command(&["set", key, value, "px", &ms.to_string()])).unwrap();
    }
    fn hset(&mut self, key: &str, field: &str, value: &str) -> Result<()> {
        self.int(&["hset", key, field, value]).map(drop)
    }
    fn hincrby(&mut self, key: &str, field: &str, by: i64) -> Result<i64> {
        self.int(&["hincrby", key, field, &by.to_string()])
    }
    fn hdel(&mut self, key: &str, field: &str) -> Result<bool> {
        self.int(&["hdel", key, field]).map(|n| n == 1)
    }
    fn hlen(&mut self, key: &str) -> Result<usize> {
        self.int(&["hlen", key])
            .map(|n| usize::try_from(n).unwrap())
    }
    fn lindex(&mut self, key: &str, index: i64) -> Result<Option<String>> {
        checked(self.0.command(&["lindex", key, &index.to_string()])).map(text)
    }
    fn lpop(&mut self, key: &str) -> Result<Option<String>> {
        checked(self.0.command(&["lpop", key])).map(text)
    }
    fn rpush(&mut self, key: &str, value: &str) -> Result<usize> {
        self.int(&["rpush", key, value])
            .map(|n| usize::try_from(n).unwrap())
    }
    fn lrange_all(&mut self, key: &str) -> Result<Vec<String>> {
        checked(self.0.command(&["lrange", key, "0", "-1"])).map(texts)
    }
    fn lrem_all(&mut self, key: &str, value: &str) -> Result<usize> {
        self.int(&["lrem", key, "0", value])
            .map(|n| usize::try_from(n).unwrap())
    }
    fn zscore(&mut self, key: &str, member: &str) -> Result<Option<i64>> {
        checked(self.0.command(&["zscore", key, member]))
            .map(|reply| text(reply).map(|score| score.parse().unwrap()))
    }
    fn zadd(&mut self, key: &str, score: i64, member: &str) -> Result<bool> {
        self.int(&["zadd", key, &score.to_string(), member])
            .map(|n| n == 1)
    }
    fn zrem(&mut self, key: &str, member: &str) -> Result<bool> {
        self.int(&["zrem", key, member]).map(|n| n == 1)
    }
    fn zincrby(&mut self, key: &str, by: i64, member: &str) -> Result<i64> {
        checked(self.0.command(&["zincrby", key, &by.to_string(), member]))
            .map(|reply| text(reply).unwrap().parse().unwrap())
    }
    fn zrange_all(&mut self, key: &str) -> Result<Vec<String>> {
        checked(self.0.command(&["zrange", key, "0", "-1"])).map(texts)
    }
    fn zrange_with_scores(
        &mut self,
        key: &str,
        start: i64,
        stop: i64,
    ) -> Result<Vec<(String, i64)>> {
        let items = texts(checked(self.0.command(&[
            "zrange",
            key,
            &start.to_string(),
            &stop.to_string(),
            "WITHSCORES",
        ]))?);
        Ok(items
            .chunks(2)
            .map(|pair| (pair[0].clone(), pair[1].parse().unwrap()))
            .collect())
    }
    fn zrangebyscore(&mut self, key: &str, max: i64) -> Result<Vec<String>> {
        checked(
            self.0
                .command(&["zrangebyscore", key, "-inf", &max.to_string()]),
        )
        .map(texts)
    }
    fn incrby(&mut self, key: &str, by: i64) -> Result<i64> {
        self.int(&["incrby", key, &by.to_string()])
    }
    fn incr(&mut self, key: &str) -> Result<i64> {
        self.int(&["incr", key])
    }
    fn decrby(&mut self, key: &str, by: i64) -> Result<i64> {
        self.int(&["decrby", key, &by.to_string()])
    }
    fn decr(&mut self, key: &str) -> Result<i64> {
        self.int(&["decr", key])
    }
}

const LEASE: i64 = 30_000;
const CHANNEL: &str = "redisson_lock__channel:{t}";

fn release(backend: &MemoryBackend, name: &str, holder: &str, latch: &str) -> Release {
    backend
        .lock_release(name, CHANNEL, holder, LEASE, latch, 5_000)
        .unwrap()
}

fn subscribed_to(channel: &str) -> Vec<String> {
    vec![channel.to_owned()]
}

#[test]
fn acquire_reenter_and_held_by_other_with_ttl() {
    let backend = MemoryBackend::new();
    assert_eq!(
        backend.lock_acquire("l", "a:1", LEASE).unwrap(),
        Acquire::Acquired
    );
    assert_eq!(
        backend.lock_acquire("l", "a:1", LEASE).unwrap(),
        Acquire::Acquired
    );
    assert_eq!(backend.lock_state("l", "a:1").unwrap().hold_count, 2);
    match backend.lock_acquire("l", "b:1", LEASE).unwrap() {
        Acquire::Held { ttl: Some(ttl) } => {
            assert!(ttl <= Duration::from_millis(30_000));
            assert!(ttl > Duration::from_millis(29_000));
        }
        other => panic!("expected Held with a ttl, got {other:?}"),
    }
    assert_eq!(backend.lock_state("l", "b:1").unwrap().hold_count, 0);
}

#[test]
fn lease_expiry_frees_the_key() {
    let backend = MemoryBackend::new();
    assert!(backend.lock_acquire("l", "a:1", 40).unwrap().is_acquired());
    assert!(
        !backend
            .lock_acquire("l", "b:1", LEASE)
            .unwrap()
            .is_acquired()
    );
    thread::sleep(Duration::from_millis(60));
    assert!(!backend.lock_state("l", "a:1").unwrap().locked);
    assert!(backend.is_empty());
    assert!(
        backend
            .lock_acquire("l", "b:1", LEASE)
            .unwrap()
            .is_acquired()
    );
    // The expired holder's count did not survive.
    assert_eq!(backend.lock_state("l", "a:1").unwrap().hold_count, 0);
    assert_eq!(backend.lock_state("l", "b:1").unwrap().hold_count, 1);
}

#[test]
fn renew_extends_only_the_holders_lease() {
    let backend = MemoryBackend::new();
    assert!(!backend.lock_renew("l", "a:1", LEASE).unwrap());
    backend.lock_acquire("l", "a:1", 40).unwrap();
    assert!(!backend.lock_renew("l", "b:1", LEASE).unwrap());
    assert!(backend.lock_renew("l", "a:1", LEASE).unwrap());
    thread::sleep(Duration::from_millis(60));
    let state = backend.lock_state("l", "a:1").unwrap();
    assert!(state.locked);
    assert!(state.ttl.unwrap() > Duration::from_millis(29_000));
    // After expiry, renewal is refused.
    backend.lock_renew("l", "a:1", 30).unwrap();
    thread::sleep(Duration::from_millis(50));
    assert!(!backend.lock_renew("l", "a:1", LEASE).unwrap());
}

#[test]
fn release_not_held_still_held_released_and_publishes() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to(CHANNEL))?;
            assert_eq!(release(&other, "l", "a:1", "latch:0"), Release::NotHeld);
            other.lock_acquire("l", "a:1", LEASE)?;
            other.lock_acquire("l", "a:1", LEASE)?;
            assert_eq!(release(&other, "l", "b:1", "latch:1"), Release::NotHeld);
            assert_eq!(release(&other, "l", "a:1", "latch:2"), Release::StillHeld);
            assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
            assert_eq!(release(&other, "l", "a:1", "latch:3"), Release::Released);
            assert!(!other.lock_state("l", "a:1")?.locked);
            let msg = conn.next_message(Duration::from_secs(5))?.unwrap();
            assert_eq!(msg, Message::new(CHANNEL, "0"));
            Ok(())
        })
        .unwrap();
}

#[test]
fn still_held_resets_the_ttl_to_the_lease() {
    let backend = MemoryBackend::new();
    backend.lock_acquire("l", "a:1", 40).unwrap();
    backend.lock_acquire("l", "a:1", 40).unwrap();
    assert_eq!(release(&backend, "l", "a:1", "latch"), Release::StillHeld);
    let ttl = backend.lock_state("l", "a:1").unwrap().ttl.unwrap();
    assert!(ttl > Duration::from_millis(29_000));
}

#[test]
fn latch_replays_the_outcome_without_decrementing_again() {
    let backend = MemoryBackend::new();
    for _ in 0..3 {
        backend.lock_acquire("l", "a:1", LEASE).unwrap();
    }
    assert_eq!(release(&backend, "l", "a:1", "latch:x"), Release::StillHeld);
    assert_eq!(release(&backend, "l", "a:1", "latch:x"), Release::StillHeld);
    assert_eq!(backend.lock_state("l", "a:1").unwrap().hold_count, 2);
    assert_eq!(release(&backend, "l", "a:1", "latch:y"), Release::StillHeld);
    assert_eq!(release(&backend, "l", "a:1", "latch:z"), Release::Released);
    assert_eq!(release(&backend, "l", "a:1", "latch:z"), Release::Released);
    // A fresh request id sees the truth.
    assert_eq!(release(&backend, "l", "a:1", "latch:w"), Release::NotHeld);
}

#[test]
fn latch_expires() {
    let backend = MemoryBackend::new();
    backend.lock_acquire("l", "a:1", LEASE).unwrap();
    let r = backend
        .lock_release("l", CHANNEL, "a:1", LEASE, "latch", 30)
        .unwrap();
    assert_eq!(r, Release::Released);
    assert_eq!(backend.len(), 1); // the latch
    thread::sleep(Duration::from_millis(50));
    assert!(backend.is_empty());
    assert_eq!(release(&backend, "l", "a:1", "latch"), Release::NotHeld);
}

#[test]
fn force_release_deletes_and_publishes() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to(CHANNEL))?;
            assert!(!other.lock_force_release("l", CHANNEL)?);
            assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
            other.lock_acquire("l", "a:1", LEASE)?;
            assert!(other.lock_force_release("l", CHANNEL)?);
            assert!(!other.lock_state("l", "a:1")?.locked);
            let msg = conn.next_message(Duration::from_secs(5))?.unwrap();
            assert_eq!(msg.payload, "0");
            // A string key is deleted too, as `DEL` would.
            other.set_string("s", "x");
            assert!(other.lock_force_release("s", CHANNEL)?);
            assert!(other.is_empty());
            Ok(())
        })
        .unwrap();
}

#[test]
fn wrongtype_after_set_string() {
    let backend = MemoryBackend::new();
    backend.set_string("s", "hello");
    let errors = [
        backend.lock_acquire("s", "a:1", LEASE).unwrap_err(),
        backend.lock_renew("s", "a:1", LEASE).unwrap_err(),
        backend
            .lock_release("s", CHANNEL, "a:1", LEASE, "latch", 5_000)
            .unwrap_err(),
        backend.lock_state("s", "a:1").unwrap_err(),
    ];
    for err in errors {
        assert!(err.is_protocol_error(), "{err}");
        assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    }
    // A latch key holding a hash is a WRONGTYPE as well.
    backend.lock_acquire("h", "a:1", LEASE).unwrap();
    let err = backend
        .lock_release("x", CHANNEL, "a:1", LEASE, "h", 5_000)
        .unwrap_err();
    assert!(err.is_protocol_error());
    // set_string replaces a lock.
    backend.set_string("h", "x");
    assert!(backend.lock_acquire("h", "a:1", LEASE).is_err());
}

#[test]
fn kill_fails_next_message_and_stops_delivery() {
    let backend = MemoryBackend::new();
    let admin = backend.clone();
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to("c"))?;
            admin.publish("c", "before")?;
            admin.kill_pubsub_connections();
            admin.publish("c", "after")?;
            let err = conn.next_message(Duration::from_secs(5)).unwrap_err();
            assert!(err.is_connection_error());
            assert!(conn.next_message(Duration::from_secs(5)).is_err());
            assert!(conn.subscribe(&subscribed_to("d")).is_err());
            Ok(())
        })
        .unwrap();
    // A new connection works.
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to("c"))?;
            admin.publish("c", "1")?;
            assert_eq!(
                conn.next_message(Duration::from_secs(5))?.unwrap().payload,
                "1"
            );
            Ok(())
        })
        .unwrap();
}

#[test]
fn kill_wakes_a_blocked_next_message() {
    let backend = MemoryBackend::new();
    let admin = backend.clone();
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(50));
        admin.kill_pubsub_connections();
    });
    let start = Instant::now();
    let result = backend.with_pubsub(&mut |conn| {
        conn.subscribe(&subscribed_to("c"))?;
        conn.next_message(Duration::from_secs(30))?;
        Ok(())
    });
    killer.join().unwrap();
    assert!(result.unwrap_err().is_connection_error());
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn pubsub_fan_out_unsubscribe_and_deregistration() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    backend
        .with_pubsub(&mut |a| {
            other.with_pubsub(&mut |b| {
                a.subscribe(&subscribed_to("c"))?;
                b.subscribe(&["c".to_owned(), "d".to_owned()])?;
                other.publish("c", "x")?;
                assert_eq!(
                    a.next_message(Duration::from_secs(5))?.unwrap().payload,
                    "x"
                );
                assert_eq!(
                    b.next_message(Duration::from_secs(5))?.unwrap().payload,
                    "x"
                );
                other.publish("d", "y")?;
                assert_eq!(a.next_message(Duration::from_millis(20))?, None);
                assert_eq!(
                    b.next_message(Duration::from_secs(5))?.unwrap().channel,
                    "d"
                );
                b.unsubscribe(&subscribed_to("c"))?;
                other.publish("c", "z")?;
                assert_eq!(b.next_message(Duration::from_millis(20))?, None);
                assert_eq!(
                    a.next_message(Duration::from_secs(5))?.unwrap().payload,
                    "z"
                );
                Ok(())
            })
        })
        .unwrap();
    assert_eq!(backend.connections(), 0);
    // A session's error is returned and the connection still deregistered.
    let err = backend
        .with_pubsub(&mut |_| Err(Error::backend("boom", false)))
        .unwrap_err();
    assert_eq!(err.to_string(), "boom");
    assert_eq!(backend.connections(), 0);
}

#[test]
fn lock_state_values() {
    let backend = MemoryBackend::new();
    assert_eq!(
        backend.lock_state("l", "a:1").unwrap(),
        LockState::default()
    );
    backend.lock_acquire("l", "a:1", LEASE).unwrap();
    backend.lock_acquire("l", "a:1", LEASE).unwrap();
    let mine = backend.lock_state("l", "a:1").unwrap();
    assert!(mine.locked);
    assert_eq!(mine.hold_count, 2);
    assert!(mine.ttl.unwrap() > Duration::from_millis(29_000));
    let theirs = backend.lock_state("l", "b:1").unwrap();
    assert!(theirs.locked);
    assert_eq!(theirs.hold_count, 0);
    assert!(theirs.ttl.is_some());
}

/// Keys stored, expired or not (what the process holds in memory).
fn stored(backend: &MemoryBackend) -> usize {
    backend.stored()
}

/// The expiry index lists exactly the keys that have an expiry.
fn assert_index_exact(backend: &MemoryBackend) {
    assert!(
        backend
            .inner
            .with_store(|store| store.keys.index_is_exact())
            .unwrap()
    );
}

#[test]
fn expired_keys_are_dropped_without_being_touched_again() {
    const CYCLES: usize = 10_000;
    const LATCH_MS: i64 = 3_000;
    let backend = MemoryBackend::new();
    // When each latch was written: on a loaded machine the loop may outlast
    // a latch's 3 s, so what must still be stored is counted from these.
    let mut written = Vec::with_capacity(CYCLES);
    for i in 0..CYCLES {
        let name = format!("l{}", i % 10);
        assert!(
            backend
                .lock_acquire(&name, "a:1", LEASE)
                .unwrap()
                .is_acquired()
        );
        let latch = format!("redisson_unlock_latch:{{{name}}}:{i}");
        let released = backend
            .lock_release(&name, CHANNEL, "a:1", LEASE, &latch, LATCH_MS)
            .unwrap();
        assert_eq!(released, Release::Released);
        written.push(std::time::Instant::now());
    }
    // Every latch written less than its 3 s ago is still there, so the
    // test below measures something (on a quiet machine, all 10,000).
    let live_from = std::time::Instant::now() - Duration::from_millis(LATCH_MS as u64 - 100);
    let recent = written.iter().filter(|at| **at >= live_from).count();
    let before = stored(&backend);
    assert!(
        recent > 0 && before >= recent,
        "only {before} latches stored, {recent} written in the last 2.9 s"
    );
    assert_index_exact(&backend);
    thread::sleep(Duration::from_millis(3_100));
    // No latch is touched again; any script runs the active expiry.
    backend.lock_state("elsewhere", "a:1").unwrap();
    let after = stored(&backend);
    assert!(after < 100, "{after} keys stored after the latches expired");
    assert_eq!(after, 0);
    assert_index_exact(&backend);
}

#[test]
fn an_idle_store_shrinks_too() {
    let backend = MemoryBackend::new();
    for i in 0..100 {
        let latch = format!("redisson_unlock_latch:{{l}}:{i}");
        backend.lock_acquire("l", "a:1", LEASE).unwrap();
        backend
            .lock_release("l", CHANNEL, "a:1", LEASE, &latch, 100)
            .unwrap();
    }
    backend.lock_acquire("kept", "a:1", LEASE).unwrap();
    assert!(stored(&backend) > 50);
    // No call from here on: only the sweeper thread can drop them.
    let deadline = Instant::now() + Duration::from_secs(10);
    while stored(&backend) > 1 {
        assert!(Instant::now() < deadline, "{} keys", stored(&backend));
        thread::sleep(Duration::from_millis(50));
    }
    assert_index_exact(&backend);
    assert!(backend.lock_state("kept", "a:1").unwrap().locked);
}

#[test]
fn expiry_index_follows_every_change_of_expiry() {
    let backend = MemoryBackend::new();
    backend.lock_acquire("l", "a:1", LEASE).unwrap();
    // Renewals replace the deadline: the index keeps one entry per key.
    for _ in 0..1_000 {
        assert!(backend.lock_renew("l", "a:1", LEASE).unwrap());
    }
    assert_eq!(backend.indexed(), 1);
    // SET without PX clears it; a deleted key leaves the index.
    backend.set_string("l", "x");
    assert_index_exact(&backend);
    assert_eq!(backend.indexed(), 0);
    backend.lock_acquire("m", "a:1", 30).unwrap();
    assert!(backend.lock_force_release("m", CHANNEL).unwrap());
    assert_index_exact(&backend);
    backend.lock_acquire("n", "a:1", 30).unwrap();
    assert_eq!(backend.indexed(), 1);
    thread::sleep(Duration::from_millis(60));
    // len() expires too (and counts only live keys).
    assert_eq!(backend.len(), 1);
    assert_index_exact(&backend);
}

#[test]
fn debug_shows_counts_not_contents() {
    let backend = MemoryBackend::new();
    backend.lock_acquire("secret-name", "a:1", LEASE).unwrap();
    let debug = format!("{backend:?}");
    assert_eq!(debug, "MemoryBackend { keys: 1, pubsub_connections: 0 }");
}

#[test]
fn hold_count_overflow_is_a_protocol_error() {
    let backend = MemoryBackend::new();
    backend.lock_acquire("l", "a:1", LEASE).unwrap();
    backend
        .run(|db| db.hset("l", "a:1", &i64::MAX.to_string()))
        .unwrap();
    assert!(
        backend
            .lock_acquire("l", "a:1", LEASE)
            .unwrap_err()
            .is_protocol_error()
    );
}

#[test]
fn leases_past_the_longest_are_refused_before_any_write() {
    let backend = MemoryBackend::new();
    for lease in [i64::MAX, MAX_LEASE_MS + 1, 0, -1] {
        let err = backend.lock_acquire("l", "a:1", lease).unwrap_err();
        assert!(err.is_invalid_argument(), "{lease}: {err}");
        assert!(backend.is_empty(), "{lease}");
    }
    assert!(
        backend
            .lock_acquire("l", "a:1", MAX_LEASE_MS)
            .unwrap()
            .is_acquired()
    );
    let state = backend.lock_state("l", "a:1").unwrap();
    assert!(state.locked && state.ttl.is_some_and(|ttl| ttl > Duration::ZERO));
}

// ---- Redis command semantics (`Db`) ----

#[test]
fn db_follows_redis_command_semantics() {
    let backend = MemoryBackend::new();
    backend
        .run(|db| {
            assert_eq!(db.pttl("k"), -2);
            db.pexpire("k", 1_000); // a missing key: nothing
            assert!(!db.exists("k"));
            db.set_px("k", "v", 30_000);
            assert!(db.pttl("k") > 29_000);
            db.set("k", "w"); // SET clears the expiry
            assert_eq!(db.pttl("k"), -1);
            assert_eq!(db.get("k")?.as_deref(), Some("w"));

            assert_eq!(db.rpush("q", "a")?, 1);
            assert_eq!(db.rpush("q", "b")?, 2);
            db.rpush("q", "a")?;
            assert_eq!(db.lindex("q", -1)?.as_deref(), Some("a"));
            assert_eq!(db.lindex("q", -3)?.as_deref(), Some("a"));
            assert_eq!(db.lindex("q", -4)?, None);
            assert_eq!(db.lindex("q", 3)?, None);
            assert_eq!(db.lindex("q", i64::MIN)?, None);
            assert_eq!(db.lrem_all("q", "a")?, 2);
            assert_eq!(db.lpop("q")?.as_deref(), Some("b"));
            assert!(!db.exists("q"), "an emptied list ceases to exist");
            assert_eq!(db.lpop("q")?, None);

            assert_eq!(db.zincrby("z", -5, "m")?, -5); // created if absent
            assert!(db.zadd("z", 7, "n")?);
            assert!(!db.zadd("z", 3, "n")?);
            assert_eq!(db.zrange_all("z")?, ["m", "n"]);
            assert!(db.zrem("z", "m")? && db.zrem("z", "n")?);
            assert!(!db.exists("z"), "an emptied sorted set ceases to exist");

            assert_eq!(db.hincrby("h", "f", 1)?, 1);
            db.hset("h", "mode", "read")?;
            assert!(db.hincrby("h", "mode", 1).unwrap_err().is_protocol_error());
            assert_eq!(db.hlen("h")?, 2);
            assert!(db.hdel("h", "f")? && db.hdel("h", "mode")?);
            assert!(!db.exists("h"), "an emptied hash ceases to exist");
            assert_eq!(db.hlen("h")?, 0);

            // A fresh container left empty by a failed command is not kept.
            db.set("s", "x");
            assert!(db.hset("s", "f", "1").is_err());
            assert_eq!(db.get("s")?.as_deref(), Some("x"));
            Ok(())
        })
        .unwrap();
    assert_eq!(backend.len(), 2); // "k" and "s"
}

// ---- Fair lock ----

const FAIR: FairLockKeys<'static> = FairLockKeys {
    name: "f",
    queue: "redisson_lock_queue:{f}",
    timeouts: "redisson_lock_timeout:{f}",
    channel_prefix: "redisson_lock__channel:{f}",
};
/// The callers' wall clock (any value: slots are relative to it).
const NOW: i64 = 1_000_000;
const WAIT: i64 = 5_000;

fn fair_acquire(backend: &MemoryBackend, holder: &str, now_ms: i64) -> Acquire {
    backend
        .fair_lock_acquire(&FAIR, holder, LEASE, WAIT, now_ms, true)
        .unwrap()
}

fn fair_release(backend: &MemoryBackend, holder: &str, latch: &str) -> Release {
    backend
        .fair_lock_release(&FAIR, holder, LEASE, NOW, latch, 5_000)
        .unwrap()
}

fn queue(backend: &MemoryBackend) -> Vec<String> {
    backend.run(|db| db.lrange_all(FAIR.queue)).unwrap()
}

fn slot(backend: &MemoryBackend, waiter: &str) -> Option<i64> {
    backend.run(|db| db.zscore(FAIR.timeouts, waiter)).unwrap()
}

fn live(backend: &MemoryBackend, key: &str) -> bool {
    backend.run(|db| Ok(db.exists(key))).unwrap()
}

fn millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap())
}

fn three_waiters_behind_an_owner(backend: &MemoryBackend) -> [i64; 3] {
    assert_eq!(fair_acquire(backend, "o:1", NOW), Acquire::Acquired);
    for waiter in ["a:1", "b:1", "c:1"] {
        match fair_acquire(backend, waiter, NOW) {
            Acquire::Held { ttl: Some(ttl) } => assert!(ttl > Duration::from_millis(29_000)),
            other => panic!("{waiter}: expected Held with a wait, got {other:?}"),
        }
    }
    assert_eq!(queue(backend), ["a:1", "b:1", "c:1"]);
    ["a:1", "b:1", "c:1"].map(|waiter| slot(backend, waiter).unwrap())
}

#[test]
fn fair_lock_grants_three_waiters_in_fifo_order() {
    let backend = MemoryBackend::new();
    let [a, b, c] = three_waiters_behind_an_owner(&backend);
    // Each slot lasts the allowance past the slot ahead.
    assert!(a > NOW + 29_000 && a <= NOW + LEASE + WAIT);
    assert_eq!((b - a, c - b), (WAIT, WAIT));
    // Polling again waits for the slot ahead, without joining twice.
    assert_eq!(
        fair_acquire(&backend, "b:1", NOW),
        Acquire::Held {
            ttl: Some(millis(b - WAIT - NOW))
        }
    );
    assert_eq!(queue(&backend).len(), 3);
    // The owner re-enters.
    assert_eq!(fair_acquire(&backend, "o:1", NOW), Acquire::Acquired);
    assert_eq!(fair_release(&backend, "o:1", "l1"), Release::StillHeld);
    assert_eq!(fair_release(&backend, "o:1", "l2"), Release::Released);

    // Free, but only the head may take it.
    assert!(!fair_acquire(&backend, "c:1", NOW).is_acquired());
    assert!(!fair_acquire(&backend, "b:1", NOW).is_acquired());
    assert_eq!(fair_acquire(&backend, "a:1", NOW), Acquire::Acquired);
    assert_eq!(queue(&backend), ["b:1", "c:1"]);
    // Everyone behind moved up one slot.
    assert_eq!(slot(&backend, "a:1"), None);
    assert_eq!(slot(&backend, "b:1"), Some(b - WAIT));
    assert_eq!(slot(&backend, "c:1"), Some(c - WAIT));
    assert_eq!(backend.lock_state("f", "a:1").unwrap().hold_count, 1);

    assert_eq!(fair_release(&backend, "a:1", "l3"), Release::Released);
    assert!(!fair_acquire(&backend, "c:1", NOW).is_acquired());
    assert_eq!(fair_acquire(&backend, "b:1", NOW), Acquire::Acquired);
    assert_eq!(fair_release(&backend, "b:1", "l4"), Release::Released);
    assert_eq!(fair_acquire(&backend, "c:1", NOW), Acquire::Acquired);
    // The queue and the slots are gone with their last member.
    assert!(!live(&backend, FAIR.queue));
    assert!(!live(&backend, FAIR.timeouts));
}

#[test]
fn fair_lock_evicts_waiters_whose_slot_passed() {
    let backend = MemoryBackend::new();
    assert_eq!(fair_acquire(&backend, "o:1", NOW), Acquire::Acquired);
    assert!(!fair_acquire(&backend, "a:1", NOW).is_acquired());
    assert!(
        !backend
            .fair_lock_acquire(&FAIR, "b:1", LEASE, 60_000, NOW, true)
            .unwrap()
            .is_acquired()
    );
    let a = slot(&backend, "a:1").unwrap();
    assert_eq!(slot(&backend, "b:1"), Some(a + 60_000));
    assert_eq!(fair_release(&backend, "o:1", "l1"), Release::Released);
    // Just before a's deadline, a is still the head.
    assert!(!fair_acquire(&backend, "b:1", a - 1).is_acquired());
    assert_eq!(queue(&backend), ["a:1", "b:1"]);
    // At its deadline a is evicted (it never came back), and b is first.
    assert_eq!(fair_acquire(&backend, "b:1", a), Acquire::Acquired);
    assert_eq!(slot(&backend, "a:1"), None);
    assert!(!live(&backend, FAIR.queue));
    // The evicted waiter queues again at the tail when it returns.
    assert!(!fair_acquire(&backend, "a:1", a).is_acquired());
    assert_eq!(queue(&backend), ["a:1"]);
    // Force release evicts too: a's new slot has passed far later.
    assert!(
        backend
            .fair_lock_force_release(&FAIR, crate::error::MAX_TIME_MS)
            .unwrap()
    );
    assert!(!live(&backend, FAIR.queue));
    assert_eq!(backend.len(), 1); // the latch
}

#[test]
fn fair_lock_cancel_moves_later_slots_up() {
    let backend = MemoryBackend::new();
    let [a, _, c] = three_waiters_behind_an_owner(&backend);
    backend.fair_lock_cancel(&FAIR, "b:1", WAIT).unwrap();
    assert_eq!(queue(&backend), ["a:1", "c:1"]);
    assert_eq!(slot(&backend, "a:1"), Some(a));
    assert_eq!(slot(&backend, "b:1"), None);
    assert_eq!(slot(&backend, "c:1"), Some(c - WAIT));
    // Someone not queued: nothing moves.
    backend.fair_lock_cancel(&FAIR, "x:1", WAIT).unwrap();
    assert_eq!(slot(&backend, "c:1"), Some(c - WAIT));
    backend.fair_lock_cancel(&FAIR, "a:1", WAIT).unwrap();
    backend.fair_lock_cancel(&FAIR, "c:1", WAIT).unwrap();
    assert!(!live(&backend, FAIR.queue));
    assert!(!live(&backend, FAIR.timeouts));
    assert_eq!(backend.len(), 1); // the lock
}

#[test]
fn fair_try_lock_does_not_join_the_queue() {
    let backend = MemoryBackend::new();
    assert_eq!(fair_acquire(&backend, "o:1", NOW), Acquire::Acquired);
    let tried = backend
        .fair_lock_acquire(&FAIR, "x:1", LEASE, WAIT, NOW, false)
        .unwrap();
    match tried {
        Acquire::Held { ttl: Some(ttl) } => assert!(ttl > Duration::from_millis(29_000)),
        other => panic!("expected Held with the lock's TTL, got {other:?}"),
    }
    assert!(!live(&backend, FAIR.queue));
    assert!(!live(&backend, FAIR.timeouts));
    // Free, but someone else is first: refused, try again in 1 ms.
    assert!(!fair_acquire(&backend, "a:1", NOW).is_acquired());
    assert_eq!(fair_release(&backend, "o:1", "l1"), Release::Released);
    let tried = backend
        .fair_lock_acquire(&FAIR, "x:1", LEASE, WAIT, NOW, false)
        .unwrap();
    assert_eq!(
        tried,
        Acquire::Held {
            ttl: Some(Duration::from_millis(1))
        }
    );
    assert_eq!(queue(&backend), ["a:1"]);
}

#[test]
fn fair_release_tells_the_head_waiter() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    let channel = |waiter: &str| format!("{}:{waiter}", FAIR.channel_prefix);
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&[channel("a:1"), channel("b:1")])?;
            three_waiters_behind_an_owner(&other);
            assert_eq!(fair_acquire(&other, "o:1", NOW), Acquire::Acquired);
            assert_eq!(fair_release(&other, "o:1", "l1"), Release::StillHeld);
            assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
            assert_eq!(fair_release(&other, "o:1", "l2"), Release::Released);
            assert_eq!(
                conn.next_message(Duration::from_secs(5))?,
                Some(Message::new(channel("a:1"), "0"))
            );
            // A replay is answered by the latch, without a second message.
            assert_eq!(fair_release(&other, "o:1", "l2"), Release::Released);
            assert_eq!(fair_release(&other, "x:1", "l3"), Release::Released);
            assert_eq!(
                conn.next_message(Duration::from_secs(5))?,
                Some(Message::new(channel("a:1"), "0"))
            );
            assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
            // Force release tells the new head.
            assert_eq!(fair_acquire(&other, "a:1", NOW), Acquire::Acquired);
            assert!(other.fair_lock_force_release(&FAIR, NOW)?);
            assert_eq!(
                conn.next_message(Duration::from_secs(5))?,
                Some(Message::new(channel("b:1"), "0"))
            );
            assert!(!other.fair_lock_force_release(&FAIR, NOW)?);
            assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
            Ok(())
        })
        .unwrap();
}

#[test]
fn fair_release_of_an_absent_lock_is_released() {
    let backend = MemoryBackend::new();
    assert_eq!(fair_release(&backend, "x:1", "l1"), Release::Released);
    assert_eq!(backend.len(), 1); // the latch
    assert_eq!(fair_acquire(&backend, "o:1", NOW), Acquire::Acquired);
    assert_eq!(fair_release(&backend, "x:1", "l2"), Release::NotHeld);
    assert_eq!(fair_release(&backend, "o:1", "l3"), Release::Released);
}

// ---- Read-write lock ----

const RW_CHANNEL: &str = "redisson_rwlock:{rw}";

/// One holder's keys on the read-write lock `rw`.
struct Rw {
    holder: String,
    write_field: String,
    timeout_prefix: String,
}

impl Rw {
    fn new(holder: &str) -> Self {
        Rw {
            holder: holder.to_owned(),
            write_field: format!("{holder}:write"),
            timeout_prefix: format!("{{rw}}:{holder}:rwlock_timeout"),
        }
    }

    fn keys(&self) -> RwLockKeys<'_> {
        RwLockKeys {
            name: "rw",
            channel: RW_CHANNEL,
            holder: &self.holder,
            write_field: &self.write_field,
            timeout_prefix: &self.timeout_prefix,
            key_prefix: "{rw}",
        }
    }

    fn hold_key(&self, n: i64) -> String {
        format!("{}:{n}", self.timeout_prefix)
    }

    fn read(&self, backend: &MemoryBackend, lease_ms: i64) -> Acquire {
        backend.read_lock_acquire(&self.keys(), lease_ms).unwrap()
    }

    fn write(&self, backend: &MemoryBackend, lease_ms: i64) -> Acquire {
        backend.write_lock_acquire(&self.keys(), lease_ms).unwrap()
    }

    fn unread(&self, backend: &MemoryBackend, latch: &str) -> Release {
        backend
            .read_lock_release(&self.keys(), latch, 5_000)
            .unwrap()
    }

    fn unwrite(&self, backend: &MemoryBackend, latch: &str) -> Release {
        backend
            .write_lock_release(&self.keys(), LEASE, latch, 5_000)
            .unwrap()
    }

    fn state(&self, backend: &MemoryBackend, field: &str) -> RwLockState {
        backend.rw_lock_state("rw", field).unwrap()
    }
}

#[test]
fn read_holds_are_shared() {
    let backend = MemoryBackend::new();
    let (a, b) = (Rw::new("a:1"), Rw::new("b:1"));
    assert_eq!(a.read(&backend, LEASE), Acquire::Acquired);
    assert_eq!(b.read(&backend, LEASE), Acquire::Acquired);
    assert_eq!(a.read(&backend, LEASE), Acquire::Acquired);
    let state = a.state(&backend, &a.holder);
    assert_eq!((state.mode, state.hold_count), (Some(RwMode::Read), 2));
    assert!(state.ttl.unwrap() > Duration::from_millis(29_000));
    assert_eq!(b.state(&backend, &b.holder).hold_count, 1);
    // Each hold is its own key.
    for key in [a.hold_key(1), a.hold_key(2), b.hold_key(1)] {
        assert!(live(&backend, &key), "{key}");
    }
    assert_eq!(a.hold_key(2), "{rw}:a:1:rwlock_timeout:2");
    assert_eq!(backend.len(), 4);
    assert_eq!(
        backend.rw_lock_state("free", "a:1").unwrap(),
        RwLockState::default()
    );
}

#[test]
fn writer_waits_for_readers_and_readers_for_a_writer() {
    let backend = MemoryBackend::new();
    let (a, b, w) = (Rw::new("a:1"), Rw::new("b:1"), Rw::new("w:1"));
    assert_eq!(a.read(&backend, LEASE), Acquire::Acquired);
    match w.write(&backend, LEASE) {
        Acquire::Held { ttl: Some(ttl) } => assert!(ttl > Duration::from_millis(29_000)),
        other => panic!("expected Held with the TTL, got {other:?}"),
    }
    assert_eq!(a.unread(&backend, "l1"), Release::Released);
    assert_eq!(w.write(&backend, LEASE), Acquire::Acquired);
    assert!(!b.read(&backend, LEASE).is_acquired());
    assert!(!a.write(&backend, LEASE).is_acquired());
    assert_eq!(b.unwrite(&backend, "l2"), Release::NotHeld);
    assert_eq!(b.unread(&backend, "l3"), Release::NotHeld);
}

#[test]
fn write_reentry_adds_the_lease() {
    let backend = MemoryBackend::new();
    let w = Rw::new("w:1");
    assert_eq!(w.write(&backend, 10_000), Acquire::Acquired);
    let first = w.state(&backend, &w.write_field).ttl.unwrap();
    assert!(first <= Duration::from_millis(10_000) && first > Duration::from_millis(9_000));
    assert_eq!(w.write(&backend, 10_000), Acquire::Acquired);
    let state = w.state(&backend, &w.write_field);
    assert_eq!((state.mode, state.hold_count), (Some(RwMode::Write), 2));
    assert!(state.ttl.unwrap() > Duration::from_millis(19_000));
    assert!(state.ttl.unwrap() <= Duration::from_millis(20_000));
    // One release resets the TTL to the lease.
    assert_eq!(w.unwrite(&backend, "l1"), Release::StillHeld);
    assert!(w.state(&backend, &w.write_field).ttl.unwrap() > Duration::from_millis(29_000));
}

#[test]
fn writer_may_read_and_write_release_downgrades() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    let (w, b) = (Rw::new("w:1"), Rw::new("b:1"));
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to(RW_CHANNEL))?;
            assert_eq!(w.write(&other, LEASE), Acquire::Acquired);
            assert_eq!(w.read(&other, LEASE), Acquire::Acquired);
            assert_eq!(w.read(&other, LEASE), Acquire::Acquired);
            assert_eq!(w.state(&other, &w.write_field).mode, Some(RwMode::Write));
            assert_eq!(w.state(&other, &w.holder).hold_count, 2);
            assert!(!b.read(&other, LEASE).is_acquired());
            // A read release while the holder writes: still held.
            assert_eq!(w.unread(&other, "l1"), Release::StillHeld);
            assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
            assert_eq!(w.unwrite(&other, "l2"), Release::Released);
            assert_eq!(
                conn.next_message(Duration::from_secs(5))?,
                Some(Message::new(RW_CHANNEL, "1"))
            );
            let state = w.state(&other, &w.holder);
            assert_eq!((state.mode, state.hold_count), (Some(RwMode::Read), 1));
            assert_eq!(w.state(&other, &w.write_field).hold_count, 0);
            assert_eq!(b.read(&other, LEASE), Acquire::Acquired);
            assert_eq!(w.unwrite(&other, "l3"), Release::NotHeld);
            Ok(())
        })
        .unwrap();
}

#[test]
fn read_to_write_upgrade_is_an_invalid_argument() {
    let backend = MemoryBackend::new();
    let a = Rw::new("a:1");
    assert_eq!(a.read(&backend, LEASE), Acquire::Acquired);
    let err = backend.write_lock_acquire(&a.keys(), LEASE).unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let state = a.state(&backend, &a.holder);
    assert_eq!((state.mode, state.hold_count), (Some(RwMode::Read), 1));
}

#[test]
fn last_read_release_publishes_and_deletes_the_hold_keys() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    let a = Rw::new("a:1");
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to(RW_CHANNEL))?;
            assert_eq!(a.read(&other, LEASE), Acquire::Acquired);
            assert_eq!(a.read(&other, LEASE), Acquire::Acquired);
            assert_eq!(a.unread(&other, "l1"), Release::StillHeld);
            assert!(live(&other, &a.hold_key(1)) && !live(&other, &a.hold_key(2)));
            assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
            assert_eq!(a.unread(&other, "l2"), Release::Released);
            assert_eq!(
                conn.next_message(Duration::from_secs(5))?,
                Some(Message::new(RW_CHANNEL, "0"))
            );
            assert!(!live(&other, &a.hold_key(1)) && !live(&other, "rw"));
            assert_eq!(other.len(), 2); // the two latches
            assert_eq!(a.unread(&other, "l2"), Release::Released);
            assert_eq!(a.unread(&other, "l3"), Release::NotHeld);
            assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_dead_readers_hold_expires_while_another_renews() {
    let backend = MemoryBackend::new();
    let (dead, alive) = (Rw::new("dead:1"), Rw::new("alive:1"));
    assert_eq!(dead.read(&backend, 40), Acquire::Acquired);
    assert_eq!(alive.read(&backend, 40), Acquire::Acquired);
    assert!(backend.read_lock_renew(&alive.keys(), LEASE).unwrap());
    assert!(
        !backend
            .read_lock_renew(&Rw::new("x:1").keys(), LEASE)
            .unwrap()
    );
    thread::sleep(Duration::from_millis(80));
    assert!(!live(&backend, &dead.hold_key(1)));
    assert!(live(&backend, &alive.hold_key(1)));
    let state = alive.state(&backend, &alive.holder);
    assert_eq!(state.mode, Some(RwMode::Read));
    assert!(state.ttl.unwrap() > Duration::from_millis(29_000));
    // The dead reader's field remains, but its expired hold does not keep
    // the lock: the live reader's release frees it.
    assert_eq!(dead.state(&backend, &dead.holder).hold_count, 1);
    assert_eq!(alive.unread(&backend, "l1"), Release::Released);
    assert!(!live(&backend, "rw"));
}

#[test]
fn rw_force_release_only_in_the_held_mode() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    let (a, w) = (Rw::new("a:1"), Rw::new("w:1"));
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to(RW_CHANNEL))?;
            assert!(!other.rw_lock_force_release(&a.keys(), RwMode::Read)?);
            assert_eq!(a.read(&other, LEASE), Acquire::Acquired);
            assert!(!other.rw_lock_force_release(&a.keys(), RwMode::Write)?);
            assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
            assert!(other.rw_lock_force_release(&a.keys(), RwMode::Read)?);
            assert_eq!(
                conn.next_message(Duration::from_secs(5))?,
                Some(Message::new(RW_CHANNEL, "0"))
            );
            assert_eq!(a.state(&other, &a.holder).mode, None);
            assert_eq!(w.write(&other, LEASE), Acquire::Acquired);
            assert!(!other.rw_lock_force_release(&a.keys(), RwMode::Read)?);
            assert!(other.rw_lock_force_release(&a.keys(), RwMode::Write)?);
            assert_eq!(
                conn.next_message(Duration::from_secs(5))?,
                Some(Message::new(RW_CHANNEL, "1"))
            );
            assert_eq!(conn.next_message(Duration::from_millis(20))?, None);
            Ok(())
        })
        .unwrap();
}

#[test]
fn wrongtype_on_every_type_mismatch() {
    let backend = MemoryBackend::new();
    three_waiters_behind_an_owner(&backend);
    let reader = Rw::new("a:1");
    assert_eq!(reader.read(&backend, LEASE), Acquire::Acquired);
    let before = backend.len();
    let queue_is_a_hash = FairLockKeys {
        queue: FAIR.name,
        ..FAIR
    };
    let slots_are_a_list = FairLockKeys {
        timeouts: FAIR.queue,
        ..FAIR
    };
    let hold_key = reader.hold_key(1);
    let queue_is_a_string = FairLockKeys {
        queue: &hold_key,
        ..FAIR
    };
    let name_is_a_zset = RwLockKeys {
        name: FAIR.timeouts,
        ..reader.keys()
    };
    let errors = [
        (
            FAIR.queue,
            backend.lock_acquire(FAIR.queue, "o:1", LEASE).unwrap_err(),
        ),
        (
            FAIR.timeouts,
            backend.lock_state(FAIR.timeouts, "o:1").unwrap_err(),
        ),
        (
            FAIR.queue,
            backend.rw_lock_state(FAIR.queue, "o:1").unwrap_err(),
        ),
        (
            FAIR.timeouts,
            backend
                .read_lock_acquire(&name_is_a_zset, LEASE)
                .unwrap_err(),
        ),
        (
            FAIR.timeouts,
            backend
                .write_lock_acquire(&name_is_a_zset, LEASE)
                .unwrap_err(),
        ),
        (
            FAIR.name,
            backend
                .fair_lock_acquire(&queue_is_a_hash, "x:1", LEASE, WAIT, NOW, true)
                .unwrap_err(),
        ),
        (
            FAIR.queue,
            backend
                .fair_lock_acquire(&slots_are_a_list, "x:1", LEASE, WAIT, NOW, true)
                .unwrap_err(),
        ),
        (
            hold_key.as_str(),
            backend
                .fair_lock_cancel(&queue_is_a_string, "a:1", WAIT)
                .unwrap_err(),
        ),
        (
            hold_key.as_str(),
            backend
                .fair_lock_release(
                    &FairLockKeys {
                        name: &hold_key,
                        ..FAIR
                    },
                    "o:1",
                    LEASE,
                    NOW,
                    "l",
                    5_000,
                )
                .unwrap_err(),
        ),
        (
            FAIR.queue,
            backend
                .lock_release("x", CHANNEL, "a:1", LEASE, FAIR.queue, 5_000)
                .unwrap_err(),
        ),
    ];
    // Redis' WRONGTYPE names no key; the error names the key (looked up
    // after the fact) and the type it holds.
    for (key, err) in errors {
        assert!(err.is_protocol_error(), "{err}");
        let text = err.to_string();
        assert!(text.contains("WRONGTYPE"), "{text}");
        assert!(
            text.contains(&format!("{key:?} holds a Redis ")),
            "{key}: {text}"
        );
    }
    // Nothing was changed on the way.
    assert_eq!(backend.len(), before);
    assert_eq!(queue(&backend), ["a:1", "b:1", "c:1"]);
}

// ---- Counters: semaphore and count-down latch ----

const SEMAPHORE_CHANNEL: &str = "redisson_sc:{s}";
const LATCH_CHANNEL: &str = "redisson_countdownlatch__channel__{l}";

/// The next message, or `None` after a short wait.
fn next(conn: &mut dyn PubSubConnection) -> Option<Message> {
    conn.next_message(Duration::from_millis(20)).unwrap()
}

fn pttl(backend: &MemoryBackend, key: &str) -> i64 {
    backend.run(|db| Ok(db.pttl(key))).unwrap()
}

#[test]
fn counter_set_if_absent_sets_once_and_publishes() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to(SEMAPHORE_CHANNEL))?;
            assert_eq!(other.counter_get("s")?, 0);
            assert!(!live(&other, "s"), "reading creates nothing");
            assert!(other.counter_set_if_absent("s", SEMAPHORE_CHANNEL, 3, "3")?);
            assert_eq!(next(conn), Some(Message::new(SEMAPHORE_CHANNEL, "3")));
            assert!(!other.counter_set_if_absent("s", SEMAPHORE_CHANNEL, 5, "5")?);
            assert_eq!(next(conn), None);
            assert_eq!(other.counter_get("s")?, 3);
            assert_eq!(pttl(&other, "s"), -1);
            Ok(())
        })
        .unwrap();
}

#[test]
fn semaphore_add_publishes_the_new_count_only_when_positive() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to(SEMAPHORE_CHANNEL))?;
            assert_eq!(other.semaphore_add("s", SEMAPHORE_CHANNEL, 2)?, 2);
            assert_eq!(next(conn), Some(Message::new(SEMAPHORE_CHANNEL, "2")));
            assert_eq!(other.semaphore_add("s", SEMAPHORE_CHANNEL, -5)?, -3);
            assert_eq!(next(conn), None);
            assert_eq!(other.counter_get("s")?, -3);
            assert_eq!(other.semaphore_add("s", SEMAPHORE_CHANNEL, 14)?, 11);
            assert_eq!(next(conn), Some(Message::new(SEMAPHORE_CHANNEL, "11")));
            assert_eq!(other.semaphore_add("s", SEMAPHORE_CHANNEL, 0)?, 11);
            assert_eq!(next(conn), None);
            assert_eq!(pttl(&other, "s"), -1);
            Ok(())
        })
        .unwrap();
}

#[test]
fn semaphore_add_fails_like_incrby_on_overflow_and_non_integers() {
    let backend = MemoryBackend::new();
    backend.set_string("s", &i64::MAX.to_string());
    let err = backend
        .semaphore_add("s", SEMAPHORE_CHANNEL, 1)
        .unwrap_err();
    assert!(err.is_protocol_error(), "{err}");
    assert!(err.to_string().contains("overflow"), "{err}");
    assert_eq!(backend.counter_get("s").unwrap(), i64::MAX);
    backend.set_string("s", &i64::MIN.to_string());
    assert!(backend.semaphore_add("s", SEMAPHORE_CHANNEL, -1).is_err());
    for bad in ["x", "1.5", "+1", "01", " 1", "-0", ""] {
        backend.set_string("s", bad);
        let err = backend
            .semaphore_add("s", SEMAPHORE_CHANNEL, 1)
            .unwrap_err();
        assert!(err.is_protocol_error(), "{bad:?}: {err}");
        assert!(err.to_string().contains("not an integer"), "{bad:?}: {err}");
    }
    // Lua's `tonumber` of a non-number is a script error, not a panic.
    backend.set_string("s", "x");
    assert!(backend.counter_get("s").unwrap_err().is_protocol_error());
    assert!(
        backend
            .semaphore_try_acquire("s", 1)
            .unwrap_err()
            .is_protocol_error()
    );
}

#[test]
fn semaphore_try_acquire_takes_only_when_enough() {
    let backend = MemoryBackend::new();
    assert!(!backend.semaphore_try_acquire("s", 1).unwrap());
    assert!(!live(&backend, "s"));
    backend.semaphore_add("s", SEMAPHORE_CHANNEL, 3).unwrap();
    assert!(backend.semaphore_try_acquire("s", 2).unwrap());
    assert_eq!(backend.counter_get("s").unwrap(), 1);
    assert!(!backend.semaphore_try_acquire("s", 2).unwrap());
    assert_eq!(backend.counter_get("s").unwrap(), 1);
    assert!(backend.semaphore_try_acquire("s", 1).unwrap());
    assert!(!backend.semaphore_try_acquire("s", 1).unwrap());
    assert_eq!(backend.counter_get("s").unwrap(), 0);
    backend.semaphore_add("s", SEMAPHORE_CHANNEL, -2).unwrap();
    assert!(!backend.semaphore_try_acquire("s", 1).unwrap());
    assert_eq!(backend.counter_get("s").unwrap(), -2);
}

#[test]
fn semaphore_drain_returns_and_zeroes() {
    let backend = MemoryBackend::new();
    assert_eq!(backend.semaphore_drain("s").unwrap(), 0);
    assert!(!live(&backend, "s"), "draining nothing creates nothing");
    backend.semaphore_add("s", SEMAPHORE_CHANNEL, 5).unwrap();
    assert_eq!(backend.semaphore_drain("s").unwrap(), 5);
    assert_eq!(backend.counter_get("s").unwrap(), 0);
    assert!(live(&backend, "s"), "the count stays, at 0");
    assert_eq!(backend.semaphore_drain("s").unwrap(), 0);
    backend.semaphore_add("s", SEMAPHORE_CHANNEL, -2).unwrap();
    assert_eq!(backend.semaphore_drain("s").unwrap(), -2);
    assert_eq!(backend.counter_get("s").unwrap(), 0);
}

// ---- Permit-expirable semaphore ----

const EXPIRABLE: ExpirableKeys<'static> = ExpirableKeys {
    name: "e",
    leases: "{e}:timeout",
    channel: "redisson_sc:{e}",
};

/// The lease end of the permit stored as `permit` (the bytes of its id:
/// the tests' ids are the hex of printable names, `7031` = `p1`).
fn lease_end(backend: &MemoryBackend, permit: &str) -> Option<i64> {
    backend
        .run(|db| db.zscore(EXPIRABLE.leases, permit))
        .unwrap()
}

#[test]
fn expirable_acquire_records_the_lease_and_waits_for_the_earliest() {
    let backend = MemoryBackend::new();
    assert_eq!(
        backend
            .expirable_acquire(&EXPIRABLE, "7030", NOW + 100, NOW)
            .unwrap(),
        Acquire::Held { ttl: None },
        "no permits and no leases: no known wait"
    );
    assert!(
        backend
            .counter_set_if_absent(EXPIRABLE.name, EXPIRABLE.channel, 2, "2")
            .unwrap()
    );
    assert_eq!(
        backend
            .expirable_acquire(&EXPIRABLE, "7031", NOW + 1_000, NOW)
            .unwrap(),
        Acquire::Acquired
    );
    assert_eq!(
        backend
            .expirable_acquire(&EXPIRABLE, "7032", NOW + 500, NOW)
            .unwrap(),
        Acquire::Acquired
    );
    assert_eq!(lease_end(&backend, "p1"), Some(NOW + 1_000));
    assert_eq!(lease_end(&backend, "p2"), Some(NOW + 500));
    assert_eq!(backend.expirable_available(&EXPIRABLE, NOW).unwrap(), 0);
    assert_eq!(
        backend
            .expirable_acquire(&EXPIRABLE, "7033", NOW + 1_000, NOW)
            .unwrap(),
        Acquire::Held {
            ttl: Some(millis(500))
        }
    );
    assert_eq!(lease_end(&backend, "p3"), None);
    // Just before the earliest lease ends: at least 1 ms.
    assert_eq!(
        backend
            .expirable_acquire(&EXPIRABLE, "7033", NOW + 1_000, NOW + 499)
            .unwrap(),
        Acquire::Held {
            ttl: Some(millis(1))
        }
    );
    assert_eq!(pttl(&backend, EXPIRABLE.leases), -1);
}

#[test]
fn expired_leases_are_reclaimed_and_announced() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to(EXPIRABLE.channel))?;
            other.semaphore_add(EXPIRABLE.name, EXPIRABLE.channel, 2)?;
            assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "2")));
            assert!(
                other
                    .expirable_acquire(&EXPIRABLE, "7031", NOW + 1_000, NOW)?
                    .is_acquired()
            );
            assert!(
                other
                    .expirable_acquire(&EXPIRABLE, "7032", NOW + 500, NOW)?
                    .is_acquired()
            );
            // Nothing expired yet: nothing published.
            assert_eq!(other.expirable_available(&EXPIRABLE, NOW + 499)?, 0);
            assert_eq!(next(conn), None);
            // A lease ending exactly now is over.
            assert_eq!(other.expirable_available(&EXPIRABLE, NOW + 500)?, 1);
            assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "1")));
            assert_eq!(lease_end(&other, "p2"), None);
            // The next acquire reclaims p1 (count 2, announced), then
            // takes one.
            assert!(
                other
                    .expirable_acquire(&EXPIRABLE, "7033", NOW + 5_000, NOW + 1_000)?
                    .is_acquired()
            );
            assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "2")));
            assert_eq!(next(conn), None);
            assert_eq!(lease_end(&other, "p1"), None);
            assert_eq!(other.counter_get(EXPIRABLE.name)?, 1);
            // Every lease reclaimed: the lease set ceases to exist.
            assert_eq!(other.expirable_available(&EXPIRABLE, NOW + 5_000)?, 2);
            assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "2")));
            assert!(!live(&other, EXPIRABLE.leases));
            Ok(())
        })
        .unwrap();
}

#[test]
fn reclaiming_into_a_negative_count_publishes_nothing() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to(EXPIRABLE.channel))?;
            other.run(|db| db.zadd(EXPIRABLE.leases, NOW, "p1"))?;
            other.semaphore_add(EXPIRABLE.name, EXPIRABLE.channel, -3)?;
            assert_eq!(other.expirable_available(&EXPIRABLE, NOW)?, -2);
            assert_eq!(next(conn), None);
            Ok(())
        })
        .unwrap();
}

#[test]
fn expirable_release_returns_only_a_live_permit() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to(EXPIRABLE.channel))?;
            other.semaphore_add(EXPIRABLE.name, EXPIRABLE.channel, 2)?;
            assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "2")));
            other.expirable_acquire(&EXPIRABLE, "7031", NOW + 1_000, NOW)?;
            other.expirable_acquire(&EXPIRABLE, "7032", NOW + 2_000, NOW)?;
            // A live permit: returned and announced.
            assert!(other.expirable_release(&EXPIRABLE, "7031", NOW + 999)?);
            assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "1")));
            assert_eq!(lease_end(&other, "p1"), None);
            // Unknown (or released already): false, nothing published.
            assert!(!other.expirable_release(&EXPIRABLE, "7031", NOW + 999)?);
            assert!(!other.expirable_release(&EXPIRABLE, "6e6f626f6479", NOW + 999)?);
            assert_eq!(next(conn), None);
            assert_eq!(other.counter_get(EXPIRABLE.name)?, 1);
            // Expired: false, but reclaimed (and announced) all the same.
            assert!(!other.expirable_release(&EXPIRABLE, "7032", NOW + 2_000)?);
            assert_eq!(next(conn), Some(Message::new(EXPIRABLE.channel, "2")));
            assert_eq!(next(conn), None);
            assert_eq!(other.counter_get(EXPIRABLE.name)?, 2);
            assert!(!live(&other, EXPIRABLE.leases));
            Ok(())
        })
        .unwrap();
}

// ---- Count-down latch ----

#[test]
fn latch_count_down_opens_at_zero_and_deletes() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to(LATCH_CHANNEL))?;
            assert!(other.counter_set_if_absent("l", LATCH_CHANNEL, 2, LATCH_NEW_COUNT_MESSAGE)?);
            assert_eq!(next(conn), Some(Message::new(LATCH_CHANNEL, "1")));
            assert_eq!(other.latch_count_down("l", LATCH_CHANNEL)?, 1);
            assert_eq!(next(conn), None);
            assert_eq!(other.counter_get("l")?, 1);
            assert_eq!(other.latch_count_down("l", LATCH_CHANNEL)?, 0);
            assert_eq!(next(conn), Some(Message::new(LATCH_CHANNEL, "0")));
            assert!(!live(&other, "l"));
            // An absent latch: -1, nothing kept, nothing published.
            assert_eq!(other.latch_count_down("l", LATCH_CHANNEL)?, -1);
            assert!(!live(&other, "l"));
            assert_eq!(next(conn), None);
            assert!(other.is_empty());
            Ok(())
        })
        .unwrap();
}

#[test]
fn latch_delete_announces_a_new_count() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&subscribed_to(LATCH_CHANNEL))?;
            assert!(!other.latch_delete("l", LATCH_CHANNEL)?);
            assert_eq!(next(conn), None);
            other.counter_set_if_absent("l", LATCH_CHANNEL, 3, LATCH_NEW_COUNT_MESSAGE)?;
            assert_eq!(next(conn), Some(Message::new(LATCH_CHANNEL, "1")));
            assert!(other.latch_delete("l", LATCH_CHANNEL)?);
            assert_eq!(next(conn), Some(Message::new(LATCH_CHANNEL, "1")));
            assert!(!live(&other, "l"));
            assert!(!other.latch_delete("l", LATCH_CHANNEL)?);
            assert_eq!(next(conn), None);
            Ok(())
        })
        .unwrap();
}

#[test]
fn counters_fail_with_wrongtype_on_a_hash() {
    let backend = MemoryBackend::new();
    backend.lock_acquire("h", "a:1", LEASE).unwrap();
    backend.run(|db| db.zadd("z", NOW, "p")).unwrap();
    backend.set_string("str", "1");
    let hash_named = ExpirableKeys {
        name: "h",
        leases: "{h}:timeout",
        channel: "redisson_sc:{h}",
    };
    let leases_a_string = ExpirableKeys {
        name: "e",
        leases: "str",
        channel: "redisson_sc:{e}",
    };
    let errors = [
        ("h", backend.counter_get("h").unwrap_err()),
        (
            "h",
            backend
                .counter_set_if_absent("h", SEMAPHORE_CHANNEL, 1, "1")
                .unwrap_err(),
        ),
        (
            "h",
            backend
                .semaphore_add("h", SEMAPHORE_CHANNEL, 1)
                .unwrap_err(),
        ),
        ("h", backend.semaphore_try_acquire("h", 1).unwrap_err()),
        ("h", backend.semaphore_drain("h").unwrap_err()),
        (
            "h",
            backend
                .expirable_acquire(&hash_named, "70", NOW + 1, NOW)
                .unwrap_err(),
        ),
        (
            "h",
            backend.expirable_available(&hash_named, NOW).unwrap_err(),
        ),
        (
            "str",
            backend
                .expirable_acquire(&leases_a_string, "70", NOW + 1, NOW)
                .unwrap_err(),
        ),
        (
            "str",
            backend
                .expirable_release(&leases_a_string, "70", NOW)
                .unwrap_err(),
        ),
        (
            "str",
            backend
                .expirable_available(&leases_a_string, NOW)
                .unwrap_err(),
        ),
        (
            "h",
            backend.latch_count_down("h", LATCH_CHANNEL).unwrap_err(),
        ),
        (
            "z",
            backend.latch_count_down("z", LATCH_CHANNEL).unwrap_err(),
        ),
    ];
    // Redis' WRONGTYPE names no key; the error names the key (looked up
    // after the fact) and the type it holds.
    for (key, err) in errors {
        assert!(err.is_protocol_error(), "{err}");
        let text = err.to_string();
        assert!(text.contains("WRONGTYPE"), "{text}");
        assert!(
            text.contains(&format!("{key:?} holds a Redis ")),
            "{key}: {text}"
        );
    }
    // Nothing was changed on the way.
    assert_eq!(backend.len(), 3);
    assert_eq!(backend.lock_state("h", "a:1").unwrap().hold_count, 1);
    // `DEL` takes any type.
    assert!(backend.latch_delete("h", LATCH_CHANNEL).unwrap());
}

#[test]
fn db_counter_and_sorted_set_commands() {
    let backend = MemoryBackend::new();
    backend
        .run(|db| {
            // INCRBY on a missing key starts from 0, without expiry.
            assert_eq!(db.incrby("n", 5)?, 5);
            assert_eq!(db.pttl("n"), -1);
            // On an existing key it keeps the expiry.
            db.set_px("n", "-7", 30_000);
            assert_eq!(db.incr("n")?, -6);
            assert!(db.pttl("n") > 29_000);
            assert_eq!(db.decrby("n", 4)?, -10);
            assert_eq!(db.decr("n")?, -11);
            assert_eq!(db.get("n")?.as_deref(), Some("-11"));
            assert!(db.decrby("n", i64::MIN).unwrap_err().is_protocol_error());
            db.set("n", &i64::MIN.to_string());
            assert!(db.decr("n").is_err());
            assert_eq!(db.get("n")?.as_deref(), Some(i64::MIN.to_string().as_str()));
            assert_eq!(db.incrby("n", i64::MAX)?, -1);
            db.rpush("q", "a")?;
            assert!(
                db.incrby("q", 1)
                    .unwrap_err()
                    .to_string()
                    .contains("WRONGTYPE")
            );

            for (score, member) in [(30, "c"), (10, "b"), (10, "a"), (20, "d")] {
                db.zadd("z", score, member)?;
            }
            let pairs = |pairs: &[(&str, i64)]| -> Vec<(String, i64)> {
                pairs.iter().map(|(m, s)| ((*m).to_owned(), *s)).collect()
            };
            assert_eq!(db.zrange_with_scores("z", 0, 0)?, pairs(&[("a", 10)]));
            assert_eq!(
                db.zrange_with_scores("z", -2, -1)?,
                pairs(&[("d", 20), ("c", 30)])
            );
            assert_eq!(db.zrange_with_scores("z", 1, 100)?.len(), 3);
            assert_eq!(db.zrange_with_scores("z", -100, 0)?.len(), 1);
            assert!(db.zrange_with_scores("z", 2, 1)?.is_empty());
            assert!(db.zrange_with_scores("z", 4, 10)?.is_empty());
            assert!(db.zrange_with_scores("z", i64::MIN, i64::MIN)?.is_empty());
            assert_eq!(db.zrange_with_scores("z", 0, i64::MAX)?.len(), 4);
            assert!(db.zrange_with_scores("none", 0, 0)?.is_empty());
            assert_eq!(db.zrangebyscore("z", 20)?, ["a", "b", "d"]);
            assert_eq!(db.zrangebyscore("z", 9)?, Vec::<String>::new());
            assert_eq!(db.zrangebyscore("none", 9)?, Vec::<String>::new());
            assert!(db.zrangebyscore("q", 9).is_err());
            Ok(())
        })
        .unwrap();
}

// ---- The interpreter: Redis' conversions and library ----

/// Runs `code` as a script with `keys` and `args`.
fn eval(backend: &MemoryBackend, code: &str, keys: &[&str], args: &[&str]) -> Reply {
    let code: &'static str = Box::leak(code.to_owned().into_boxed_str());
    let script: &'static Script = Box::leak(Box::new(Script::new("test", "test", code)));
    let mut call = ScriptCall::new(script, Resend::Harmless, Effect::Read);
    for key in keys {
        call = call.key(*key);
    }
    for arg in args {
        call = call.arg(*arg);
    }
    backend.run_script(&call).unwrap()
}

fn bulk(text: &str) -> Reply {
    Reply::Bulk(text.as_bytes().to_vec())
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn lua_values_convert_to_replies_as_redis_converts_them() {
    let backend = MemoryBackend::new();
    let cases = [
        ("return nil", Reply::Nil),
        ("return false", Reply::Nil),
        ("return true", Reply::Int(1)),
        ("return 3.99", Reply::Int(3)),
        ("return -3.99", Reply::Int(-3)),
        ("return 1e30", Reply::Int(i64::MIN)),
        ("return 0/0", Reply::Int(i64::MIN)),
        ("return 'x'", bulk("x")),
        ("return ''", bulk("")),
        ("return {}", Reply::Array(vec![])),
        (
            "return {1, 'a', nil, 3}",
            Reply::Array(vec![Reply::Int(1), bulk("a")]),
        ),
        (
            "return {1, {2, false, 3}, true}",
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Array(vec![Reply::Int(2), Reply::Nil, Reply::Int(3)]),
                Reply::Int(1),
            ]),
        ),
        (
            "return {err='MY thing'}",
            Reply::Error("MY thing".to_owned()),
        ),
        ("return {ok='FINE'}", Reply::Status("FINE".to_owned())),
        ("return {err=5}", Reply::Array(vec![])),
        (
            "return redis.error_reply('ERR invalid x')",
            Reply::Error("ERR invalid x".to_owned()),
        ),
        (
            "return redis.status_reply('FINE')",
            Reply::Status("FINE".to_owned()),
        ),
        (
            "return {redis.error_reply('E x')}",
            Reply::Array(vec![Reply::Error("E x".to_owned())]),
        ),
        ("return print", Reply::Nil),
        ("return 1, 2", Reply::Int(1)),
        ("return redis.replicate_commands()", Reply::Int(1)),
    ];
    for (code, expected) in cases {
        assert_eq!(eval(&backend, code, &[], &[]), expected, "{code}");
    }
}

#[test]
fn type_reaches_lua_as_a_status_table_as_on_redis() {
    let backend = MemoryBackend::new();
    backend.set_string("t:s", "1");
    let code = "local t = redis.call('type', KEYS[1]) \
        return {type(t), t['ok'], redis.call('type', KEYS[2])['ok'], redis.call('type', KEYS[1])}";
    assert_eq!(
        eval(&backend, code, &["t:s", "t:missing"], &[]),
        Reply::Array(vec![
            bulk("table"),
            bulk("string"),
            bulk("none"),
            Reply::Status("string".to_owned()),
        ])
    );
}

#[test]
fn keys_and_argv_are_one_based_string_tables_reset_on_every_call() {
    let backend = MemoryBackend::new();
    let code = "return {#KEYS, #ARGV, KEYS[1], ARGV[2], type(ARGV[1])}";
    assert_eq!(
        eval(&backend, code, &["k1", "k2"], &["5", "x", "y"]),
        Reply::Array(vec![
            Reply::Int(2),
            Reply::Int(3),
            bulk("k1"),
            bulk("x"),
            bulk("string")
        ])
    );
    // Fewer this time: nothing is left over from the call before.
    assert_eq!(
        eval(
            &backend,
            "return {#KEYS, #ARGV, KEYS[2] == nil, ARGV[3] == nil}",
            &["a"],
            &[]
        ),
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(0),
            Reply::Int(1),
            Reply::Int(1)
        ])
    );
}

#[test]
fn command_replies_convert_to_lua_as_redis_converts_them() {
    let backend = MemoryBackend::new();
    let code = r"
        redis.call('hset', 'h', 'f', '7')
        local set = redis.call('set', 's', 'v')
        local missing = redis.call('get', 'nothing')
        local failed = redis.pcall('hget', 's', 'f')
        return {
            type(redis.call('hincrby', 'h', 'f', 1)),
            type(redis.call('get', 's')),
            tostring(missing),
            type(set), set.ok,
            type(failed), failed.err,
            type(redis.call('lrange', 'nothing', 0, -1)),
        }";
    assert_eq!(
        eval(&backend, code, &[], &[]),
        Reply::Array(vec![
            bulk("number"),
            bulk("string"),
            bulk("false"),
            bulk("table"),
            bulk("OK"),
            bulk("table"),
            bulk(WRONGTYPE),
            bulk("table"),
        ])
    );
}

#[test]
fn numbers_reach_commands_as_redis_formats_them() {
    let backend = MemoryBackend::new();
    let code = r"
        redis.call('set', 'a', 5.0)
        redis.call('set', 'b', 5.5)
        redis.call('set', 'c', 0.1)
        redis.call('set', 'd', 1e20)
        redis.call('set', 'e', 123456789012)
        redis.call('set', 'f', -7)
        return {redis.call('get', 'a'), redis.call('get', 'b'), redis.call('get', 'c'),
            redis.call('get', 'd'), redis.call('get', 'e'), redis.call('get', 'f')}";
    assert_eq!(
        eval(&backend, code, &[], &[]),
        Reply::Array(
            [
                "5",
                "5.5",
                "0.10000000000000001",
                "1e+20",
                "123456789012",
                "-7"
            ]
            .into_iter()
            .map(bulk)
            .collect()
        )
    );
    assert_eq!(
        eval(&backend, "return redis.pcall('set', 'k', true)", &[], &[]),
        Reply::Error("ERR Lua redis lib command arguments must be strings or integers".to_owned())
    );
    assert_eq!(
        eval(&backend, "return redis.pcall()", &[], &[]),
        Reply::Error("ERR Please specify at least one argument for this redis lib call".to_owned())
    );
}

#[test]
fn g17_matches_lua_own_printf() {
    // Lua's string.format is C's printf: the reference for "%.17g".
    let backend = MemoryBackend::new();
    let values = [
        0.1,
        1.0 / 3.0,
        2.5e-7,
        1e-5,
        1e15,
        1e16,
        1e17,
        123.456,
        -9.87654321e-12,
        4.6e18,
        1.7976931348623157e308,
        5e-324,
        1_234_567_890_123.5,
        0.0001,
        0.00001,
        99_999_999_999_999_999.0,
    ];
    for value in values {
        let code = format!("return string.format('%.17g', {value:e})");
        let expected = eval(&backend, &code, &[], &[]);
        assert_eq!(
            Reply::Bulk(keyspace::format_g17(value).into_bytes()),
            expected,
            "{value:e}"
        );
    }
}

#[test]
fn errors_come_back_as_error_replies_with_redis_codes() {
    let backend = MemoryBackend::new();
    backend.set_string("s", "x");
    // A failed redis.call ends the script with the command's error.
    assert_eq!(
        eval(
            &backend,
            "redis.call('hget', KEYS[1], 'a'); return 1",
            &["s"],
            &[]
        ),
        Reply::Error(WRONGTYPE.to_owned())
    );
    // redis.pcall returns it instead.
    assert_eq!(
        eval(
            &backend,
            "local r = redis.pcall('hget', KEYS[1], 'a'); return r.err",
            &["s"],
            &[]
        ),
        bulk(WRONGTYPE)
    );
    // Runtime errors carry the script's position, with ERR.
    assert_eq!(
        eval(&backend, "local x = nil\nreturn x + 1", &[], &[]),
        Reply::Error(
            "ERR user_script:2: attempt to perform arithmetic on local 'x' (a nil value)"
                .to_owned()
        )
    );
    assert_eq!(
        eval(&backend, "error('boom')", &[], &[]),
        Reply::Error("ERR user_script:1: boom".to_owned())
    );
    assert_eq!(
        eval(&backend, "error({err='MY thing'})", &[], &[]),
        Reply::Error("MY thing".to_owned())
    );
    let Reply::Error(text) = eval(&backend, "return (", &[], &[]) else {
        panic!("a script that does not compile is an error reply")
    };
    assert!(
        text.starts_with("ERR Error compiling script (new function): user_script:1:"),
        "{text}"
    );
    // A command the store lacks fails loudly.
    assert_eq!(
        eval(&backend, "return redis.call('OBJECT', 'h')", &[], &[]),
        Reply::Error(
            "ERR unknown command 'OBJECT' (MemoryBackend implements the basic key, string, hash, list, set and sorted-set commands, not this one)"
                .to_owned()
        )
    );
    // Writes before the error stay, as on Redis.
    eval(
        &backend,
        "redis.call('set', 'w', '1'); redis.call('incr', 's')",
        &[],
        &[],
    );
    assert_eq!(backend.run(|db| db.get("w")).unwrap().as_deref(), Some("1"));
}

#[test]
fn globals_are_read_only_as_on_redis() {
    let backend = MemoryBackend::new();
    assert_eq!(
        eval(&backend, "x = 5\nreturn 1", &[], &[]),
        Reply::Error("ERR user_script:1: Attempt to modify a readonly table".to_owned())
    );
    assert_eq!(
        eval(&backend, "return y", &[], &[]),
        Reply::Error(
            "ERR user_script:1: Script attempted to access nonexistent global variable 'y'"
                .to_owned()
        )
    );
    assert_eq!(
        eval(&backend, "local x = 5\nreturn x", &[], &[]),
        Reply::Int(5)
    );
    assert_eq!(
        eval(&backend, "return type(os) == 'table'", &[], &[]),
        Reply::Error(
            "ERR user_script:1: Script attempted to access nonexistent global variable 'os'"
                .to_owned()
        )
    );
}

#[test]
fn time_is_frozen_for_one_run() {
    let backend = MemoryBackend::new();
    let code = r"
        local first = redis.call('time')
        local spin = 0
        for i = 1, 2000000 do spin = spin + i end
        local second = redis.call('time')
        return {first[1], first[2], second[1], second[2], type(first[1])}";
    let Reply::Array(items) = eval(&backend, code, &[], &[]) else {
        panic!()
    };
    assert_eq!(items[0], items[2]);
    assert_eq!(items[1], items[3]);
    assert_eq!(items[4], bulk("string"));
    let seconds: u64 = items[0].as_text().unwrap().parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(seconds.abs_diff(now) <= 2, "{seconds} vs {now}");
    // Expiry is judged at the run's start too: a key set with PX 1 is
    // still there after the script has spun past it.
    let code = r"
        redis.call('set', 'k', 'v', 'px', 1)
        local spin = 0
        for i = 1, 2000000 do spin = spin + i end
        return redis.call('get', 'k')";
    assert_eq!(eval(&backend, code, &[], &[]), bulk("v"));
    thread::sleep(Duration::from_millis(5));
    assert_eq!(
        eval(&backend, "return redis.call('get', 'k')", &[], &[]),
        Reply::Nil
    );
}

#[test]
fn pexpire_and_pttl_through_scripts() {
    let backend = MemoryBackend::new();
    assert_eq!(
        eval(&backend, "return redis.call('pttl', 'k')", &[], &[]),
        Reply::Int(-2)
    );
    eval(&backend, "redis.call('set', 'k', 'v')", &[], &[]);
    assert_eq!(
        eval(&backend, "return redis.call('pttl', 'k')", &[], &[]),
        Reply::Int(-1)
    );
    assert_eq!(
        eval(&backend, "return redis.call('pexpire', 'k', 40)", &[], &[]),
        Reply::Int(1)
    );
    let Reply::Int(ttl) = eval(&backend, "return redis.call('pttl', 'k')", &[], &[]) else {
        panic!()
    };
    assert!((1..=40).contains(&ttl), "{ttl}");
    assert_eq!(backend.dump()[0].pttl_ms.map(|ttl| ttl <= 40), Some(true));
    thread::sleep(Duration::from_millis(60));
    assert_eq!(
        eval(&backend, "return redis.call('exists', 'k')", &[], &[]),
        Reply::Int(0)
    );
    assert!(backend.is_empty());
    // A non-positive TTL deletes.
    eval(&backend, "redis.call('set', 'k', 'v')", &[], &[]);
    assert_eq!(
        eval(&backend, "return redis.call('pexpire', 'k', -1)", &[], &[]),
        Reply::Int(1)
    );
    assert!(backend.is_empty());
}

#[test]
fn a_scripts_publish_reaches_subscribers_with_its_writes() {
    let backend = MemoryBackend::new();
    let other = backend.clone();
    backend
        .with_pubsub(&mut |conn| {
            conn.subscribe(&["c".to_owned()])?;
            let reply = eval(
                &other,
                "redis.call('set', 'k', 'v'); return redis.call('publish', 'c', 'hi')",
                &[],
                &[],
            );
            assert_eq!(reply, Reply::Int(1));
            assert_eq!(
                conn.next_message(Duration::from_secs(5))?,
                Some(Message::new("c", "hi"))
            );
            assert_eq!(
                eval(
                    &other,
                    "return redis.call('publish', 'nobody', 5)",
                    &[],
                    &[]
                ),
                Reply::Int(0)
            );
            assert_eq!(conn.next_message(Duration::from_millis(10))?, None);
            Ok(())
        })
        .unwrap();
    assert_eq!(backend.connections(), 0);
}

#[test]
fn dump_lists_every_live_key_with_its_value_and_ttl() {
    let backend = MemoryBackend::new();
    eval(
        &backend,
        r"redis.call('set', 's', 'v', 'px', 30000)
          redis.call('hset', 'h', 'b', '2', 'a', '1')
          redis.call('rpush', 'l', 'x', 'y')
          redis.call('zadd', 'z', 2, 'm', 1, 'n', 1, 'a')
          redis.call('set', 'gone', 'v', 'px', 1)",
        &[],
        &[],
    );
    thread::sleep(Duration::from_millis(5));
    let dump = backend.dump();
    let keys: Vec<&str> = dump.iter().map(|key| key.key.as_str()).collect();
    assert_eq!(keys, ["h", "l", "s", "z"]);
    assert_eq!(
        dump[0].value,
        DumpedValue::Hash(BTreeMap::from([
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), b"2".to_vec())
        ]))
    );
    assert_eq!(dump[0].pttl_ms, None);
    assert_eq!(
        dump[1].value,
        DumpedValue::List(vec![b"x".to_vec(), b"y".to_vec()])
    );
    assert_eq!(dump[2].value, DumpedValue::String(b"v".to_vec()));
    assert!(
        dump[2]
            .pttl_ms
            .is_some_and(|ttl| (29_000..=30_000).contains(&ttl))
    );
    assert_eq!(
        dump[3].value,
        DumpedValue::ZSet(vec![
            (b"a".to_vec(), 1.0),
            (b"n".to_vec(), 1.0),
            (b"m".to_vec(), 2.0)
        ])
    );
}

#[test]
fn fenced_tokens_grow_and_start_at_the_clock_in_micros() {
    let backend = MemoryBackend::new();
    let token_key = "redisson_lock_token:{fenced}";
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    let first = backend
        .fenced_lock_acquire("fenced", token_key, "a:1", LEASE)
        .unwrap()
        .token()
        .unwrap();
    assert!(u128::from(first) >= before, "{first} < {before}");
    let again = backend
        .fenced_lock_acquire("fenced", token_key, "a:1", LEASE)
        .unwrap()
        .token()
        .unwrap();
    assert!(again > first);
    assert!(matches!(
        backend
            .fenced_lock_acquire("fenced", token_key, "b:1", LEASE)
            .unwrap(),
        FencedAcquire::Held { ttl: Some(_) }
    ));
    // A counter far ahead of the clock just increments.
    backend.set_string(token_key, "99999999999999999");
    assert_eq!(
        backend
            .fenced_lock_acquire("fenced", token_key, "a:1", LEASE)
            .unwrap()
            .token(),
        Some(100_000_000_000_000_000)
    );
}

#[test]
fn backend_is_send_sync_clone_default_debug() {
    fn check<T: Send + Sync + Clone + Default + fmt::Debug + 'static>() {}
    check::<MemoryBackend>();
}

/// The uncontended lock + unlock pair, through the operations and through
/// a `Client`: the best of five rounds (run with `cargo test --release
/// --lib -- --ignored lock_unlock_pair_speed --nocapture`).
#[test]
#[ignore = "a timing, not a check"]
#[allow(clippy::print_stdout)]
fn lock_unlock_pair_speed() {
    let pairs = 50_000_u32;
    let backend = MemoryBackend::new();
    let mut best = Duration::MAX;
    for round in 0..5 {
        let start = Instant::now();
        for i in 0..pairs {
            ops::lock::acquire(&backend, "speed", "c1:1", LEASE).unwrap();
            let latch = format!("redisson_unlock_latch:{{speed}}:{round}:{i}");
            ops::lock::release(&backend, "speed", CHANNEL, "c1:1", LEASE, &latch, 5_000).unwrap();
        }
        best = best.min(start.elapsed() / pairs);
    }
    println!("ops: {best:?} per acquire + release");
    let client = crate::Client::builder().backend(backend).build().unwrap();
    let lock = client.lock("speed-client");
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..pairs {
            lock.lock().unwrap().unlock().unwrap();
        }
        best = best.min(start.elapsed() / pairs);
    }
    println!("Client: {best:?} per lock + unlock");
}

/// 300,000 lock + unlock pairs through the operations, for a profiler
/// (`perf stat -e task-clock <test binary> --ignored pair_loop`).
#[test]
#[ignore = "a timing, not a check"]
fn pair_loop() {
    let backend = MemoryBackend::new();
    for i in 0..300_000 {
        ops::lock::acquire(&backend, "speed", "c1:1", LEASE).unwrap();
        let latch = format!("redisson_unlock_latch:{{speed}}:{i}");
        ops::lock::release(&backend, "speed", CHANNEL, "c1:1", LEASE, &latch, 5_000).unwrap();
    }
}
