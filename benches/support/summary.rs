//! The summary: this file's own interleaved timings, with the ratios to
//! the floor measured in the same run.

#[allow(unused_imports)]
use crate::*;

pub(crate) fn report_slow_locks(label: &str) {
    let (slow, longest) = take_waits();
    if slow > 0 {
        eprintln!(
            "{label}: WARNING: {slow} lock() calls waited > {STALL:?} (longest {longest:?}): \
             missed wake-ups (the waiter slept until the holder's TTL)"
        );
    }
}

// ---------------------------------------------------------------- pinning --

#[derive(Clone, Copy)]
pub(crate) struct Stats {
    pub(crate) median: Duration,
    p10: Duration,
    p90: Duration,
    pub(crate) max: Duration,
    /// Calls slower than STALL.
    pub(crate) stalls: usize,
}

pub(crate) fn stats(times: &[Duration]) -> Stats {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let at = |q: f64| {
        let i = ((sorted.len() - 1) as f64 * q).round() as usize;
        sorted[i]
    };
    Stats {
        median: at(0.5),
        p10: at(0.1),
        p90: at(0.9),
        max: at(1.0),
        stalls: sorted.iter().filter(|t| **t > STALL).count(),
    }
}

pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// Criterion's median for `id` ("group/function") from this run's
/// `estimates.json` (median of the per-sample means), if it wrote one.
pub(crate) fn criterion_median(id: &str) -> Option<Duration> {
    let root = std::env::var_os("CRITERION_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map(|d| std::path::PathBuf::from(d).join("criterion"))
        })
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/criterion")
        });
    let (group, function) = id.split_once('/')?;
    let path = root
        .join(group)
        .join(function.replace('/', "_"))
        .join("new/estimates.json");
    // Only this run's: a filtered run leaves older files behind.
    if std::fs::metadata(&path).ok()?.modified().ok()? < *RUN_START.get()? {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    // {"mean":{...},"median":{"confidence_interval":{...},"point_estimate":N,...
    let rest = &text[text.find("\"median\"")?..];
    let rest = &rest[rest.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
    let end = rest.find([',', '}'])?;
    let nanos: f64 = rest[..end].trim().parse().ok()?;
    Some(Duration::from_secs_f64(nanos / 1e9))
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn own_measurements(
    server: &TestServer,
    clients: [&Client; 3],
    masters: &[&Client],
    replicated: [&Client; 2],
    mut extra_cases: Vec<ExtraCase>,
    test_mode: bool,
    pinned: bool,
    ran_criterion: bool,
) {
    let [redis_a, redis_b, memory] = clients;
    let (blocks, per_block, handoffs, contended_time) = if test_mode {
        (2, 5, 10, Duration::from_millis(200))
    } else {
        (20, 100, 1500, CONTENDED_FOR)
    };
    eprintln!(
        "\nbench: own timing ({blocks} blocks of {per_block} calls per case, interleaved; \
         {handoffs} handoffs per variant; contended runs of {contended_time:?})..."
    );

    // Floor and uncontended pairs, interleaved.
    let floor = std::cell::RefCell::new(Floor::new(server));
    let redis_lock = redis_a.lock(unique_name("bench:own:uncontended"));
    let memory_lock = memory.lock(unique_name("bench:own:uncontended"));
    let mut ping = || floor.borrow_mut().ping();
    let mut pair = || floor.borrow_mut().pair();
    let mut redis_wd = || lock_unlock(&redis_lock);
    let mut redis_lease = || lock_with_lease_unlock(&redis_lock);
    let mut mem_wd = || lock_unlock(&memory_lock);
    let mut mem_lease = || lock_with_lease_unlock(&memory_lock);
    // The fair and read-write pairs (`lock()` + `unlock()`, watchdog).
    let redis_fair = redis_a.fair_lock(unique_name("bench:own:uncontended:fair"));
    let redis_rw = redis_a.read_write_lock(unique_name("bench:own:uncontended:rw"));
    let (redis_read, redis_write) = (redis_rw.read_lock(), redis_rw.write_lock());
    let memory_fair = memory.fair_lock(unique_name("bench:own:uncontended:fair"));
    let memory_rw = memory.read_write_lock(unique_name("bench:own:uncontended:rw"));
    let (memory_read, memory_write) = (memory_rw.read_lock(), memory_rw.write_lock());
    let mut redis_fair_pair = || lock_unlock(&redis_fair);
    let mut redis_read_pair = || lock_unlock(&redis_read);
    let mut redis_write_pair = || lock_unlock(&redis_write);
    let mut mem_fair_pair = || lock_unlock(&memory_fair);
    let mut mem_read_pair = || lock_unlock(&memory_read);
    let mut mem_write_pair = || lock_unlock(&memory_write);
    // The semaphore pairs: `acquire(1)` + the guard's `release()`, and a
    // permit-expirable semaphore's `acquire(LEASE)` + `release(&id)`.
    let redis_sem = permits(redis_a, "bench:own:uncontended:semaphore");
    let redis_exp = expirable_permits(redis_a, "bench:own:uncontended:expirable");
    let memory_sem = permits(memory, "bench:own:uncontended:semaphore");
    let memory_exp = expirable_permits(memory, "bench:own:uncontended:expirable");
    let mut redis_sem_pair = || semaphore_acquire_release(&redis_sem);
    let mut redis_exp_pair = || expirable_acquire_release(&redis_exp);
    let mut mem_sem_pair = || semaphore_acquire_release(&memory_sem);
    let mut mem_exp_pair = || expirable_acquire_release(&memory_exp);
    // RedLock over 3 and 5 masters, MultiLock over 3 locks on one server and
    // on three (indices 16..).
    let redlock3 = redlock(&masters[..3], "bench:own:multi:redlock");
    let redlock5 = redlock(&masters[..MASTERS], "bench:own:multi:redlock");
    let multi_one = multilock_one_server(redis_a, "bench:own:multi:multilock");
    let multi_spread = multilock_spread(&masters[..MULTI_PARTS], "bench:own:multi:multilock");
    let mut redlock3_wd = || redlock_unlock(&redlock3);
    let mut redlock3_lease = || redlock_with_lease_unlock(&redlock3);
    let mut redlock5_wd = || redlock_unlock(&redlock5);
    let mut redlock5_lease = || redlock_with_lease_unlock(&redlock5);
    let mut multi_one_pair = || multilock_unlock(&multi_one);
    let mut multi_spread_pair = || multilock_unlock(&multi_spread);
    // The pair on the replicated master, without and with replica
    // acknowledgement (indices 22, 23).
    let [ack_without, ack_with] = replicated;
    let ack_without_lock = ack_without.lock(unique_name("bench:own:replica_ack"));
    let ack_with_lock = ack_with.lock(unique_name("bench:own:replica_ack"));
    let mut ack_without_pair = || lock_unlock(&ack_without_lock);
    let mut ack_with_pair = || lock_unlock(&ack_with_lock);
    let mut cases: Vec<(&'static str, &mut dyn FnMut())> = vec![
        ("floor/ping", &mut ping),
        ("floor/evalsha_pair", &mut pair),
        ("uncontended/redis/lock_unlock", &mut redis_wd),
        ("uncontended/redis/lock_with_lease_unlock", &mut redis_lease),
        ("uncontended/memory/lock_unlock", &mut mem_wd),
        ("uncontended/memory/lock_with_lease_unlock", &mut mem_lease),
        ("uncontended/redis/fair_lock_unlock", &mut redis_fair_pair),
        ("uncontended/redis/read_lock_unlock", &mut redis_read_pair),
        ("uncontended/redis/write_lock_unlock", &mut redis_write_pair),
        ("uncontended/memory/fair_lock_unlock", &mut mem_fair_pair),
        ("uncontended/memory/read_lock_unlock", &mut mem_read_pair),
        ("uncontended/memory/write_lock_unlock", &mut mem_write_pair),
        (
            "uncontended/redis/semaphore_acquire_release",
            &mut redis_sem_pair,
        ),
        (
            "uncontended/redis/expirable_acquire_release",
            &mut redis_exp_pair,
        ),
        (
            "uncontended/memory/semaphore_acquire_release",
            &mut mem_sem_pair,
        ),
        (
            "uncontended/memory/expirable_acquire_release",
            &mut mem_exp_pair,
        ),
        ("multi/redlock3/lock_unlock", &mut redlock3_wd),
        ("multi/redlock3/lock_with_lease_unlock", &mut redlock3_lease),
        ("multi/redlock5/lock_unlock", &mut redlock5_wd),
        ("multi/redlock5/lock_with_lease_unlock", &mut redlock5_lease),
        (
            "multi/multilock3_one_server/lock_unlock",
            &mut multi_one_pair,
        ),
        (
            "multi/multilock3_three_servers/lock_unlock",
            &mut multi_spread_pair,
        ),
        ("replica_ack/without/lock_unlock", &mut ack_without_pair),
        ("replica_ack/with/lock_unlock", &mut ack_with_pair),
    ];
    // Feature-dependent cases (indices 24..), found by name below.
    for (name, case) in &mut extra_cases {
        cases.push((*name, &mut **case));
    }
    let names: Vec<&'static str> = cases.iter().map(|(n, _)| *n).collect();
    let times = interleaved(&mut cases, per_block, blocks, per_block);
    let s: Vec<Stats> = times.iter().map(|t| stats(t)).collect();
    let (ping, pair) = (s[0], s[1]);
    let (redis_wd, redis_lease, mem_wd, mem_lease) = (s[2], s[3], s[4], s[5]);
    let redisson_i = names.iter().position(|n| *n == "floor/redisson_pair");
    let guarded_i = names
        .iter()
        .position(|n| *n == "floor/redisson_guarded_pair");

    // Handoff.
    #[derive(Clone, Copy)]
    enum Kind {
        Lock,
        Lease,
        Fair,
        Semaphore,
        Latch,
    }
    let mut handoff_stats = Vec::new();
    for (label, two_clients, kind) in [
        ("handoff/redis/same_client", false, Kind::Lock),
        ("handoff/redis/two_clients", true, Kind::Lock),
        (
            "handoff/redis/same_client_lease (own only)",
            false,
            Kind::Lease,
        ),
        ("handoff/redis/fair_same_client", false, Kind::Fair),
        ("handoff/redis/fair_two_clients", true, Kind::Fair),
        (
            "handoff/redis/semaphore_same_client",
            false,
            Kind::Semaphore,
        ),
        ("handoff/redis/semaphore_two_clients", true, Kind::Semaphore),
        (
            "handoff/redis/latch_open_same_client (own only)",
            false,
            Kind::Latch,
        ),
        ("handoff/redis/latch_open_two_clients", true, Kind::Latch),
    ] {
        let name = unique_name("bench:own:handoff");
        let b = if two_clients { redis_b } else { redis_a };
        let times = match kind {
            Kind::Lock => handoff(&redis_a.lock(&name), &b.lock(&name), handoffs),
            Kind::Lease => handoff(
                &Leased(&redis_a.lock(&name), LEASE),
                &Leased(&b.lock(&name), LEASE),
                handoffs,
            ),
            Kind::Fair => handoff(&redis_a.fair_lock(&name), &b.fair_lock(&name), handoffs),
            Kind::Semaphore => handoff(&one_permit(redis_a, &name), &b.semaphore(&name), handoffs),
            Kind::Latch => latch_open(
                &redis_a.count_down_latch(&name),
                &b.count_down_latch(&name),
                handoffs,
            ),
        };
        handoff_stats.push((label, stats(&times)));
    }

    // Contended.
    let name = unique_name("bench:own:contended:one");
    let one_client: Vec<Lock> = (0..8).map(|_| redis_a.lock(&name)).collect();
    let name = unique_name("bench:own:contended:two");
    let two_clients: Vec<Lock> = (0..8)
        .map(|i| {
            if i % 2 == 0 {
                redis_a.lock(&name)
            } else {
                redis_b.lock(&name)
            }
        })
        .collect();
    let name = unique_name("bench:own:contended:memory");
    let memory_locks: Vec<Lock> = (0..8).map(|_| memory.lock(&name)).collect();
    let mut contended = Vec::new();
    let one: Vec<usize> = vec![0; 8];
    let alternate: Vec<usize> = (0..8).map(|i| i % 2).collect();
    for (label, locks, client_of) in [
        ("contended/redis/8threads", &one_client, &one),
        (
            "contended/redis/2clients_x_4threads",
            &two_clients,
            &alternate,
        ),
        ("contended/memory/8threads", &memory_locks, &one),
    ] {
        let r = contended_for(locks, client_of, contended_time);
        eprintln!(
            "{label}: {:.0} acq/s, per-thread min/max = {:.2} (counts {:?}); \
             same thread re-took it {:.0}% of the time; {:.2} acquisitions per floor-pair time",
            r.per_sec,
            r.min_max,
            r.counts,
            r.same_thread_share * 100.0,
            r.per_sec * pair.median.as_secs_f64()
        );
        if r.slow > 0 {
            eprintln!(
                "{label}: WARNING: {} lock() calls waited > {STALL:?} (longest {:?}): missed wake-ups",
                r.slow, r.longest
            );
        }
        if r.drain > DRAIN_WARN {
            eprintln!(
                "{label}: WARNING: threads took {:?} to finish after the deadline \
                 (a waiter slept out a TTL instead of being woken)",
                r.drain
            );
        }
        contended.push((label, r));
    }
    // The barging baseline (see `barging`), same length, same server.
    let barging = crate::support::barging::barging_for(server, 8, contended_time);
    eprintln!(
        "contended/redis/barging_8threads: {:.0} acq/s, per-thread min/max = {:.2} (counts {:?}); \
         same thread re-took it {:.0}% of the time",
        barging.per_sec,
        barging.min_max,
        barging.counts,
        barging.same_thread_share * 100.0,
    );

    let crit = |id: &str| {
        if !ran_criterion {
            return String::new();
        }
        match criterion_median(id) {
            Some(m) => format!("  [criterion median {:.1} µs]", us(m)),
            None => String::new(),
        }
    };
    let line = |label: &str, s: Stats, extra: String| {
        eprintln!(
            "  {label:<48} median {:>7.1} µs  (p10 {:>6.1}, p90 {:>7.1}){extra}{}",
            us(s.median),
            us(s.p10),
            us(s.p90),
            crit(label)
        );
    };
    eprintln!(
        "\n==== redisync bench summary: own timing, medians; redis-server and bench pinned to CPU 0: {} ====",
        if pinned { "yes" } else { "NO" }
    );
    line(names[0], ping, String::new());
    line(
        names[1],
        pair,
        format!("  = {:.2} × ping", ratio(pair.median, ping.median)),
    );
    let redisson = redisson_i.map(|i| s[i]);
    if let (Some(i), Some(redisson)) = (redisson_i, redisson) {
        line(
            names[i],
            redisson,
            format!(
                "  = {:.2} × ping (Redisson 4.7's own two scripts, raw EVALSHA)",
                ratio(redisson.median, ping.median)
            ),
        );
    }
    let guarded = guarded_i.map(|i| s[i]);
    if let (Some(i), Some(guarded), Some(redisson)) = (guarded_i, guarded, redisson) {
        line(
            names[i],
            guarded,
            format!(
                "  = {:.2} × Redisson's scripts (the same with only exactly-once's window and record)",
                ratio(guarded.median, redisson.median)
            ),
        );
    }
    for (i, st) in [(2, redis_wd), (3, redis_lease)] {
        let vs_redisson = redisson.map_or(String::new(), |r| {
            format!(
                ", {:.2} × Redisson's scripts (target ≤ 1.10, issue 33)",
                ratio(st.median, r.median)
            )
        });
        let vs_guarded = guarded.map_or(String::new(), |g| {
            format!(", {:.2} × their guarded pair", ratio(st.median, g.median))
        });
        line(
            names[i],
            st,
            format!(
                "  = {:.2} × floor pair{vs_redisson}{vs_guarded}",
                ratio(st.median, pair.median)
            ),
        );
    }
    for (i, st) in [(4, mem_wd), (5, mem_lease)] {
        line(
            names[i],
            st,
            format!("  = {:.3} × floor pair", ratio(st.median, pair.median)),
        );
    }
    // The fair and read-write pairs, against the same floor and against the
    // reentrant lock's pair on the same backend.
    for (i, reentrant) in [
        (6, redis_wd),
        (7, redis_wd),
        (8, redis_wd),
        (12, redis_wd),
        (13, redis_wd),
    ] {
        line(
            names[i],
            s[i],
            format!(
                "  = {:.2} × floor pair, {:.2} × lock_unlock",
                ratio(s[i].median, pair.median),
                ratio(s[i].median, reentrant.median)
            ),
        );
    }
    for (i, reentrant) in [
        (9, mem_wd),
        (10, mem_wd),
        (11, mem_wd),
        (14, mem_wd),
        (15, mem_wd),
    ] {
        line(
            names[i],
            s[i],
            format!(
                "  = {:.3} × floor pair, {:.2} × lock_unlock",
                ratio(s[i].median, pair.median),
                ratio(s[i].median, reentrant.median)
            ),
        );
    }
    eprintln!(
        "  watchdog pair vs lease pair: redis {:+.1} µs ({:.2}×), memory {:+.1} µs ({:.2}×; p90 {:.1} vs {:.1} µs)",
        us(redis_wd.median) - us(redis_lease.median),
        ratio(redis_wd.median, redis_lease.median),
        us(mem_wd.median) - us(mem_lease.median),
        ratio(mem_wd.median, mem_lease.median),
        us(mem_wd.p90),
        us(mem_lease.p90)
    );
    // RedLock and MultiLock: against the floors and the single lock's pair
    // of the same kind (watchdog or lease), whole and per part.
    eprintln!(
        "  RedLock / MultiLock (parts taken one after another; \"single\" = the \
         uncontended/redis pair of the same kind above):"
    );
    for (i, parts, single) in [
        (16, 3, redis_wd),
        (17, 3, redis_lease),
        (18, MASTERS, redis_wd),
        (19, MASTERS, redis_lease),
        (20, MULTI_PARTS, redis_wd),
        (21, MULTI_PARTS, redis_wd),
    ] {
        let vs_single = ratio(s[i].median, single.median);
        line(
            names[i],
            s[i],
            format!(
                "  = {:.2} × floor pair, {:.1} × ping, {vs_single:.2} × single = {:.2} × single per part (N = {parts})",
                ratio(s[i].median, pair.median),
                ratio(s[i].median, ping.median),
                vs_single / parts as f64
            ),
        );
    }
    eprintln!(
        "  RedLock3 / MultiLock3 on three servers (same parts; the RedLock's drift check): {:.2}×; \
         MultiLock3 three servers / one server: {:.2}×; watchdog / lease pair: RedLock3 {:.2}×, RedLock5 {:.2}×",
        ratio(s[16].median, s[21].median),
        ratio(s[21].median, s[20].median),
        ratio(s[16].median, s[17].median),
        ratio(s[18].median, s[19].median)
    );
    // Replica acknowledgement: the same pair on a master with one replica,
    // without and with a WAIT after each script.
    eprintln!(
        "  Replica acknowledgement (a master with one replica; \"with\" = \
         ReplicaAcknowledgement::new(1, {ACK_TIMEOUT:?}): WAIT after each script):"
    );
    for i in [22, 23] {
        line(
            names[i],
            s[i],
            format!(
                "  = {:.2} × floor pair, {:.1} × ping, {:.2} × uncontended/redis/lock_unlock",
                ratio(s[i].median, pair.median),
                ratio(s[i].median, ping.median),
                ratio(s[i].median, redis_wd.median)
            ),
        );
    }
    eprintln!(
        "  WAIT overhead: with / without = {:.2}× ({:+.1} µs per pair, {:+.1} µs per WAIT); \
         with / floor pair = {:.2}×",
        ratio(s[23].median, s[22].median),
        us(s[23].median) - us(s[22].median),
        (us(s[23].median) - us(s[22].median)) / 2.0,
        ratio(s[23].median, pair.median)
    );
    // Redis Cluster: the same pair on a 3-master cluster with one replica
    // per master (the slot's master), against the cluster's floor and the
    // standalone pairs (the bench server's, which has no replica, and
    // `replica_ack/without`, a master with one replica as each cluster
    // master has); and with replica acknowledgement, against the cluster
    // pair (the WAIT overhead) and `replica_ack/with`.
    #[cfg(feature = "cluster")]
    {
        let at = |n: &str| names.iter().position(|x| *x == n).unwrap();
        let (floor_i, pair_i, ack_i) = (
            at("cluster/evalsha_pair"),
            at("cluster/lock_unlock"),
            at("cluster/lock_unlock_ack"),
        );
        let (cl_floor, cl_pair, cl_ack) = (s[floor_i], s[pair_i], s[ack_i]);
        eprintln!(
            "  Redis Cluster (3 masters + 3 replicas, pinned; all on one lock name, so on its \
             slot's master; \"_ack\" = ReplicaAcknowledgement::new(1, {ACK_TIMEOUT:?})):"
        );
        line(
            names[floor_i],
            cl_floor,
            format!(
                "  = {:.2} × standalone floor pair",
                ratio(cl_floor.median, pair.median)
            ),
        );
        line(
            names[pair_i],
            cl_pair,
            format!(
                "  = {:.2} × cluster floor pair, {:.2} × standalone lock_unlock, {:.2} × standalone floor pair, \
                 {:.2} × replica_ack/without",
                ratio(cl_pair.median, cl_floor.median),
                ratio(cl_pair.median, redis_wd.median),
                ratio(cl_pair.median, pair.median),
                ratio(cl_pair.median, s[22].median)
            ),
        );
        line(
            names[ack_i],
            cl_ack,
            format!(
                "  = {:.2} × cluster lock_unlock, {:.2} × cluster floor pair, {:.2} × standalone replica_ack/with",
                ratio(cl_ack.median, cl_pair.median),
                ratio(cl_ack.median, cl_floor.median),
                ratio(cl_ack.median, s[23].median)
            ),
        );
        eprintln!(
            "  cluster WAIT overhead: lock_unlock_ack / lock_unlock = {:.2}× ({:+.1} µs per pair, \
             {:+.1} µs per WAIT); standalone: {:.2}× ({:+.1} µs per pair)",
            ratio(cl_ack.median, cl_pair.median),
            us(cl_ack.median) - us(cl_pair.median),
            (us(cl_ack.median) - us(cl_pair.median)) / 2.0,
            ratio(s[23].median, s[22].median),
            us(s[23].median) - us(s[22].median)
        );
    }
    for (label, st) in &handoff_stats {
        let stalls = if st.stalls > 0 {
            format!(
                "; {} STALLS > {STALL:?} of {handoffs} (max {:?}): lost wake-ups",
                st.stalls, st.max
            )
        } else {
            String::new()
        };
        // The ≤ 4 × PING target is the reentrant lock's; a fair, semaphore
        // or latch handoff is also shown against the reentrant one with the
        // same clients.
        let rest = label.strip_prefix("handoff/redis/").unwrap_or(label);
        let rest = rest.split(' ').next().unwrap_or(rest);
        let other = ["fair_", "semaphore_", "latch_open_"]
            .iter()
            .find_map(|p| rest.strip_prefix(p));
        let extra = match other {
            Some(clients) => {
                let reentrant = handoff_stats
                    .iter()
                    .find(|(l, _)| l.strip_prefix("handoff/redis/") == Some(clients))
                    .map_or(String::new(), |(_, r)| {
                        format!(", {:.2} × reentrant {clients}", ratio(st.median, r.median))
                    });
                format!(
                    "  = {:.2} × ping, {:.2} × floor pair{reentrant}{stalls}",
                    ratio(st.median, ping.median),
                    ratio(st.median, pair.median)
                )
            }
            None => format!(
                "  = {:.2} × ping (target ≤ 4){stalls}",
                ratio(st.median, ping.median)
            ),
        };
        line(label, *st, extra);
    }
    for (label, r) in contended
        .iter()
        .map(|(label, r)| (*label, r))
        .chain([("contended/redis/barging_8threads", &barging)])
    {
        eprintln!(
            "  {label:<48} {:>7.0} acq/s, per-thread min/max = {:.2} (target ≥ 0.5), same-thread re-take {:.0}%, longest lock() {:.1} ms{}",
            r.per_sec,
            r.min_max,
            r.same_thread_share * 100.0,
            r.longest.as_secs_f64() * 1e3,
            if r.slow > 0 {
                format!("; {} STALLS > {STALL:?}", r.slow)
            } else {
                String::new()
            }
        );
        if label.contains("/redis/") {
            if !label.contains("barging") {
                eprintln!(
                    "  {:<48} = {:.2} × the barging baseline's acq/s (target ≥ 1)",
                    "",
                    r.per_sec / barging.per_sec.max(f64::MIN_POSITIVE)
                );
            }
            for (what, times) in [
                ("to another thread", &r.handoffs),
                ("to another client", &r.cross_client),
            ] {
                if times.is_empty() {
                    continue;
                }
                let st = stats(times);
                eprintln!(
                    "  {:<48} handoff {what}: median {:.1} µs = {:.2} × ping (target ≤ 4), p90 {:.1} µs, {} handoffs",
                    "",
                    us(st.median),
                    ratio(st.median, ping.median),
                    us(st.p90),
                    times.len()
                );
            }
        }
    }
}
