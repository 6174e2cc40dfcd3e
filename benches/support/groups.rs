//! The criterion groups, one function each (see the group list in
//! `benches/lock.rs`).

use super::env::Env;
#[allow(unused_imports)]
use crate::*;

/// floor
pub(crate) fn floor_group(c: &mut Criterion, env: &Env) {
    let mut floor = Floor::new(&env.server);
    let mut group = c.benchmark_group("floor");
    group.bench_function("ping", |b| b.iter(|| floor.ping()));
    group.bench_function("evalsha_pair", |b| b.iter(|| floor.pair()));
    let mut redisson = RedissonFloor::new(&env.server);
    group.bench_function("redisson_pair", |b| b.iter(|| redisson.pair()));
    let mut guarded = RedissonFloor::guarded(&env.server);
    group.bench_function("redisson_guarded_pair", |b| b.iter(|| guarded.pair()));
    group.finish();
}

/// uncontended
pub(crate) fn uncontended_group(c: &mut Criterion, env: &Env) {
    let mut group = c.benchmark_group("uncontended");
    for (backend, client) in [("redis", &env.redis_client), ("memory", &env.memory_client)] {
        let lock = client.lock(unique_name("bench:uncontended"));
        group.bench_function(format!("{backend}/lock_unlock"), |b| {
            b.iter(|| lock_unlock(&lock));
        });
        group.bench_function(format!("{backend}/lock_with_lease_unlock"), |b| {
            b.iter(|| lock_with_lease_unlock(&lock));
        });
    }
    // The fair, read-write and semaphore pairs: shorter runs (the
    // settings apply to the benches added after them), to keep the
    // whole bench near 100 s.
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (backend, client) in [("redis", &env.redis_client), ("memory", &env.memory_client)] {
        let fair = client.fair_lock(unique_name("bench:uncontended:fair"));
        let rw = client.read_write_lock(unique_name("bench:uncontended:rw"));
        let (read, write) = (rw.read_lock(), rw.write_lock());
        group.bench_function(format!("{backend}/fair_lock_unlock"), |b| {
            b.iter(|| lock_unlock(&fair));
        });
        group.bench_function(format!("{backend}/read_lock_unlock"), |b| {
            b.iter(|| lock_unlock(&read));
        });
        group.bench_function(format!("{backend}/write_lock_unlock"), |b| {
            b.iter(|| lock_unlock(&write));
        });
    }
    for (backend, client) in [("redis", &env.redis_client), ("memory", &env.memory_client)] {
        let semaphore = permits(client, "bench:uncontended:semaphore");
        let expirable = expirable_permits(client, "bench:uncontended:expirable");
        group.bench_function(format!("{backend}/semaphore_acquire_release"), |b| {
            b.iter(|| semaphore_acquire_release(&semaphore));
        });
        group.bench_function(format!("{backend}/expirable_acquire_release"), |b| {
            b.iter(|| expirable_acquire_release(&expirable));
        });
    }
    group.finish();
}

/// multi: RedLock and MultiLock, uncontended
pub(crate) fn multi_group(c: &mut Criterion, env: &Env) {
    let mut group = c.benchmark_group("multi");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for n in [3, MASTERS] {
        let redlock = redlock(&env.masters()[..n], "bench:multi:redlock");
        group.bench_function(format!("redlock{n}/lock_unlock"), |b| {
            b.iter(|| redlock_unlock(&redlock));
        });
        group.bench_function(format!("redlock{n}/lock_with_lease_unlock"), |b| {
            b.iter(|| redlock_with_lease_unlock(&redlock));
        });
    }
    let one_server = multilock_one_server(&env.redis_client, "bench:multi:multilock");
    let spread = multilock_spread(&env.masters()[..MULTI_PARTS], "bench:multi:multilock");
    group.bench_function("multilock3_one_server/lock_unlock", |b| {
        b.iter(|| multilock_unlock(&one_server));
    });
    group.bench_function("multilock3_three_servers/lock_unlock", |b| {
        b.iter(|| multilock_unlock(&spread));
    });
    group.finish();
}

/// replica_ack: the WAIT overhead
pub(crate) fn replica_ack_group(c: &mut Criterion, env: &Env) {
    let mut group = c.benchmark_group("replica_ack");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (mode, client) in [("without", &env.ack_without), ("with", &env.ack_with)] {
        let lock = client.lock(unique_name("bench:replica_ack"));
        group.bench_function(format!("{mode}/lock_unlock"), |b| {
            b.iter(|| lock_unlock(&lock));
        });
    }
    group.finish();
}

/// cluster: the pair on a Redis Cluster vs standalone
#[cfg(feature = "cluster")]
pub(crate) fn cluster_group(c: &mut Criterion, env: &Env) {
    let mut group = c.benchmark_group("cluster");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let name = unique_name("bench:cluster");
    let lock = env.cluster_client.lock(&name);
    // The same name (so the same master): each pair ends with it free.
    let ack_lock = env.cluster_ack_client.lock(&name);
    let mut floor = cluster::cluster_floor(&env.bench_cluster, &name);
    let standalone = env
        .redis_client
        .lock(unique_name("bench:cluster:standalone"));
    group.bench_function("evalsha_pair", |b| b.iter(|| floor.pair()));
    group.bench_function("lock_unlock", |b| b.iter(|| lock_unlock(&lock)));
    group.bench_function("lock_unlock_ack", |b| b.iter(|| lock_unlock(&ack_lock)));
    group.bench_function("standalone_lock_unlock", |b| {
        b.iter(|| lock_unlock(&standalone));
    });
    group.finish();
}

/// handoff
pub(crate) fn handoff_group(c: &mut Criterion, env: &Env) {
    let mut group = c.benchmark_group("handoff");
    // Each iteration also waits for the peer to park (outside the
    // measured time), and criterion plans iterations by wall time.
    group
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let name = unique_name("bench:handoff:same");
    let (a, b) = (env.redis_client.lock(&name), env.redis_client.lock(&name));
    take_waits();
    group.bench_function("redis/same_client", |bencher| {
        bencher.iter_custom(|iters| note_waits(&handoff(&a, &b, iters)));
    });
    report_slow_locks("handoff/redis/same_client (criterion)");
    let name = unique_name("bench:handoff:two");
    let (a, b) = (env.redis_client.lock(&name), env.redis_client_b.lock(&name));
    group.bench_function("redis/two_clients", |bencher| {
        bencher.iter_custom(|iters| note_waits(&handoff(&a, &b, iters)));
    });
    report_slow_locks("handoff/redis/two_clients (criterion)");
    let name = unique_name("bench:handoff:fair:same");
    let (a, b) = (
        env.redis_client.fair_lock(&name),
        env.redis_client.fair_lock(&name),
    );
    group.bench_function("redis/fair_same_client", |bencher| {
        bencher.iter_custom(|iters| note_waits(&handoff(&a, &b, iters)));
    });
    report_slow_locks("handoff/redis/fair_same_client (criterion)");
    let name = unique_name("bench:handoff:fair:two");
    let (a, b) = (
        env.redis_client.fair_lock(&name),
        env.redis_client_b.fair_lock(&name),
    );
    group.bench_function("redis/fair_two_clients", |bencher| {
        bencher.iter_custom(|iters| note_waits(&handoff(&a, &b, iters)));
    });
    report_slow_locks("handoff/redis/fair_two_clients (criterion)");
    // A semaphore of one permit: release → a blocked `acquire(1)` returns.
    let name = unique_name("bench:handoff:semaphore:same");
    let (a, b) = (
        one_permit(&env.redis_client, &name),
        env.redis_client.semaphore(&name),
    );
    group.bench_function("redis/semaphore_same_client", |bencher| {
        bencher.iter_custom(|iters| note_waits(&handoff(&a, &b, iters)));
    });
    report_slow_locks("handoff/redis/semaphore_same_client (criterion)");
    let name = unique_name("bench:handoff:semaphore:two");
    let (a, b) = (
        one_permit(&env.redis_client, &name),
        env.redis_client_b.semaphore(&name),
    );
    group.bench_function("redis/semaphore_two_clients", |bencher| {
        bencher.iter_custom(|iters| note_waits(&handoff(&a, &b, iters)));
    });
    report_slow_locks("handoff/redis/semaphore_two_clients (criterion)");
    // A latch at 1: `count_down()` → a `wait()` on the other client returns.
    let name = unique_name("bench:handoff:latch:two");
    let (a, b) = (
        env.redis_client.count_down_latch(&name),
        env.redis_client_b.count_down_latch(&name),
    );
    group.bench_function("redis/latch_open_two_clients", |bencher| {
        bencher.iter_custom(|iters| note_waits(&latch_open(&a, &b, iters)));
    });
    report_slow_locks("handoff/redis/latch_open_two_clients (criterion)");
    group.finish();
}

/// contended (criterion's view: wall time per acquisition)
pub(crate) fn contended_group(c: &mut Criterion, env: &Env) {
    let mut group = c.benchmark_group("contended");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let name = unique_name("bench:contended:one");
    let locks: Vec<Lock> = (0..8).map(|_| env.redis_client.lock(&name)).collect();
    take_waits();
    group.bench_function("redis/8threads", |bencher| {
        bencher.iter_custom(|iters| contended_fixed(&locks, iters));
    });
    report_slow_locks("contended/redis/8threads (criterion)");
    let name = unique_name("bench:contended:two");
    let locks: Vec<Lock> = (0..8)
        .map(|i| {
            if i % 2 == 0 {
                env.redis_client.lock(&name)
            } else {
                env.redis_client_b.lock(&name)
            }
        })
        .collect();
    group.bench_function("redis/2clients_x_4threads", |bencher| {
        bencher.iter_custom(|iters| contended_fixed(&locks, iters));
    });
    report_slow_locks("contended/redis/2clients_x_4threads (criterion)");
    group.finish();
}
