//! The client's key namespace (`ClientBuilder::name_prefix`, Redisson's
//! prefixing `NameMapper`): the prefix goes before the object name before
//! any key or channel is derived, so a prefixed lock lives where Redisson
//! with the same mapping puts it, on the wire. Every case runs on both
//! backends (and a cluster under the `cluster` feature).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::keys;
use common::timing::STUCK;
use common::{Env, backend_tests, unique_name};
use redisync::{Client, ObjectKind};
use redisync::{LockBackend, Message};

backend_tests!(
    a_prefixed_lock_lives_at_the_prefixed_key_and_channel,
    different_prefixes_do_not_exclude_each_other,
    the_same_prefix_excludes,
    every_primitive_lives_under_the_prefix,
    names_read_back_without_the_prefix,
    empty_names_are_refused_with_a_prefix_too,
);

fn prefixed(env: &Env, prefix: &str) -> Client {
    env.builder().name_prefix(prefix).build().unwrap()
}

fn a_prefixed_lock_lives_at_the_prefixed_key_and_channel(env: &Env) {
    let prefix = format!("{}:", unique_name("app1"));
    let app1 = prefixed(env, &prefix);
    let plain = env.client();
    let key = format!("{prefix}orders");
    let channel = keys::lock_channel(&key);
    // A raw subscriber on the channel Redisson derives from the mapped name.
    let backend = std::sync::Arc::clone(plain.backend());
    let (ready_tx, ready_rx) = mpsc::channel();
    let wanted = channel.clone();
    let listener = thread::spawn(move || {
        let mut got = None;
        backend
            .with_pubsub(&mut |conn| {
                conn.subscribe(std::slice::from_ref(&wanted))?;
                ready_tx.send(()).unwrap();
                got = conn.next_message(STUCK)?;
                Ok(())
            })
            .unwrap();
        got
    });
    ready_rx.recv_timeout(STUCK).unwrap();
    let lock = app1.lock("orders");
    let guard = lock.lock().unwrap();
    // The hash is at the mapped key, held by app1's holder id.
    let found = plain.inspect(&key).unwrap();
    assert_eq!(found.kind, ObjectKind::Lock, "{found}");
    assert_eq!(found.holders[0].id, {
        // The holder id of this thread in app1.
        app1.current_holder_id()
    });
    assert!(!plain.inspect("orders").unwrap().is_held());
    guard.unlock().unwrap();
    let message = listener.join().unwrap();
    assert_eq!(
        message,
        Some(Message::new(channel, "0")),
        "the unlock message"
    );
}

fn different_prefixes_do_not_exclude_each_other(env: &Env) {
    let base = unique_name("ns");
    let (a, b) = (
        prefixed(env, &format!("{base}:a:")),
        prefixed(env, &format!("{base}:b:")),
    );
    let held = a.lock("orders").lock().unwrap();
    let other = b.lock("orders");
    let got = thread::spawn(move || other.try_lock().unwrap().map(|g| g.unlock().unwrap()))
        .join()
        .unwrap();
    assert!(got.is_some(), "another namespace: another lock");
    held.unlock().unwrap();
}

fn the_same_prefix_excludes(env: &Env) {
    let prefix = format!("{}:", unique_name("ns"));
    let (a, b) = (prefixed(env, &prefix), prefixed(env, &prefix));
    let held = a.lock("orders").lock().unwrap();
    let other = b.lock("orders");
    let refused = thread::spawn(move || other.try_lock().unwrap().is_none())
        .join()
        .unwrap();
    assert!(refused, "same namespace, same lock");
    // And an unprefixed client naming the full key is the same lock too.
    let plain = env.client().lock(format!("{prefix}orders"));
    let refused = thread::spawn(move || plain.try_lock().unwrap().is_none())
        .join()
        .unwrap();
    assert!(refused);
    // A spin lock of the prefixed client is the same lock.
    let spin = b.spin_lock("orders");
    let refused = thread::spawn(move || spin.try_lock().unwrap().is_none())
        .join()
        .unwrap();
    assert!(refused, "the spin lock lives under the prefix too");
    held.unlock().unwrap();
}

fn every_primitive_lives_under_the_prefix(env: &Env) {
    let prefix = format!("{}:", unique_name("ns"));
    let app = prefixed(env, &prefix);
    let plain = env.client();
    let kind = |name: &str| plain.inspect(&format!("{prefix}{name}")).unwrap().kind;

    let _fair = app.fair_lock("fair").lock().unwrap();
    // (A fair lock with an empty queue reads as a lock: same hash.)
    assert!(
        plain
            .fair_lock(format!("{prefix}fair"))
            .is_locked()
            .unwrap()
    );
    let fenced = app.fenced_lock("fenced").lock().unwrap();
    assert_eq!(kind("fenced"), ObjectKind::FencedLock);
    assert_eq!(
        plain
            .inspect(&format!("{prefix}fenced"))
            .unwrap()
            .fencing_token,
        fenced.token()
    );
    let _read = app.read_write_lock("rw").read_lock().lock().unwrap();
    assert_eq!(kind("rw"), ObjectKind::ReadWriteLock);
    let semaphore = app.semaphore("sem");
    assert!(semaphore.try_set_permits(2).unwrap());
    assert_eq!(
        plain
            .semaphore(format!("{prefix}sem"))
            .available_permits()
            .unwrap(),
        2
    );
    let latch = app.count_down_latch("latch");
    assert!(latch.try_set_count(3).unwrap());
    assert_eq!(
        plain
            .count_down_latch(format!("{prefix}latch"))
            .count()
            .unwrap(),
        3
    );
    let expirable = app.permit_expirable_semaphore("pes");
    assert!(expirable.try_set_permits(1).unwrap());
    // A lease makes its zset (`{<prefix>pes}:timeout`), which tells it apart.
    let _permit = expirable.acquire(Duration::from_secs(30)).unwrap();
    assert_eq!(kind("pes"), ObjectKind::PermitExpirableSemaphore);
    assert_eq!(expirable.name(), "pes", "read back without the prefix");
    // Nothing under the bare names.
    for name in ["fair", "fenced", "rw", "sem", "latch", "pes"] {
        assert_eq!(
            plain.inspect(name).unwrap().kind,
            ObjectKind::Absent,
            "{name}"
        );
    }
}

fn names_read_back_without_the_prefix(env: &Env) {
    let prefix = format!("{}:", unique_name("ns"));
    let app = prefixed(env, &prefix);
    assert_eq!(app.name_prefix(), prefix);
    assert_eq!(app.lock("orders").name(), "orders");
    assert_eq!(app.read_write_lock("rw").name(), "rw");
    assert_eq!(app.read_write_lock("rw").write_lock().name(), "rw");
    assert_eq!(app.semaphore("sem").name(), "sem");
    assert_eq!(app.count_down_latch("latch").name(), "latch");
    let _guard = app.lock("orders").lock().unwrap();
    let found = app.inspect("orders").unwrap();
    assert_eq!(found.name, "orders");
    assert_eq!(found.kind, ObjectKind::Lock, "{found}");
    assert_eq!(found.holders[0].id, app.current_holder_id());
}

fn empty_names_are_refused_with_a_prefix_too(env: &Env) {
    let app = prefixed(env, "app1:");
    // Not the key "app1:": the empty name is refused before anything is sent.
    assert!(app.lock("").try_lock().unwrap_err().is_invalid_argument());
    assert!(
        app.semaphore("")
            .try_set_permits(1)
            .unwrap_err()
            .is_invalid_argument()
    );
    assert!(
        app.count_down_latch("")
            .count()
            .unwrap_err()
            .is_invalid_argument()
    );
    assert!(app.inspect("").unwrap_err().is_invalid_argument());
}

/// Validation happens in `build()`, before anything is connected.
#[test]
fn braces_in_the_prefix_are_refused_by_build() {
    for prefix in ["{app1}:", "app1}:", "a{b"] {
        let err = Client::builder()
            .backend(redisync::MemoryBackend::new())
            .name_prefix(prefix)
            .build()
            .unwrap_err();
        assert!(err.is_invalid_argument(), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("name_prefix") && text.contains("hash tag"),
            "{text}"
        );
    }
    let none = Client::builder()
        .backend(redisync::MemoryBackend::new())
        .name_prefix("")
        .build()
        .unwrap();
    assert_eq!(none.name_prefix(), "");
    assert_eq!(none.lock("x").name(), "x");
}
