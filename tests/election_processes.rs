//! Leader election across real processes on a real `redis-server` (issue
//! 35): three candidate processes; the leader killed (the next leads within
//! the lease), frozen (it never acts as leader again once resumed: its
//! lost signal is true from its first look, the downstream store, fenced
//! by the term, sees terms only grow, and every leadership's record passes
//! the fault suite's election checker), cut off from Redis by a partition
//! that drops packets (its lost signal fires the documented margin before
//! another candidate wins, on one clock), and resigning (the next leads
//! within a handoff).
//!
//! The children are this test binary re-executed in the `candidate` role
//! (see tests/common/child.rs). A candidate campaigns, says `LEADER
//! <term> <ns>` (`CLOCK_MONOTONIC`, which every process of the machine
//! shares, network namespaces included), then every 10 ms checks
//! `is_lost()` and, while it leads, writes its term to a downstream store
//! fenced by the term (it refuses a term below the highest it accepted,
//! and logs accepted and refused writes apart; none without `LOG`); once
//! lost it says `LOST <term> <ns>` and campaigns again. Each leadership
//! that ends is reported as a `SECTION` line in the history format of
//! tests/common/history.rs (the term as the token, see
//! tests/common/election_history.rs). A `resign` line from the parent
//! makes a leader resign; `report` makes it report its leadership so far.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use std::time::{Duration, Instant};

use common::child::{
    ChildProcess, LOCK_ENV, READY, READY_TIMEOUT, ROLE_ENV, URL_ENV, WATCHDOG_MS_ENV, announce,
    child_client_with_watchdog, env, ms, parent_lines, raw_connection,
};
use common::election_history::{Tenure, check_election};
use common::history::{Excuse, Section, mono_ns, ms_between};
use common::netns::{NetnsServer, Partition};
use common::timing::{PROMPT, STUCK};
use common::{TestServer, send_signal, unique_name};

/// The candidate's identity.
const IDENTITY_ENV: &str = "REDISYNC_IDENTITY";
/// The downstream store's log (a list of `<term>:<identity>`).
const LOG_ENV: &str = "REDISYNC_LOG";
/// Said by a candidate that leads, with its term.
const LEADER: &str = "REDISYNC-LEADER";
/// Said by a leader that found its leadership lost, with its term.
const LOST: &str = "REDISYNC-LOST";
/// Said by a leader that resigned, with its term.
const RESIGNED: &str = "REDISYNC-RESIGNED";
/// A leadership's record (history::Section's line).
const SECTION: &str = "REDISYNC-SECTION";
/// Said by a leader once it reported its leadership so far.
const REPORTED: &str = "REDISYNC-REPORTED";
/// The downstream store's write: accepted (logged in KEYS[2]) with a term
/// at least the highest accepted (KEYS[1]), else refused (logged in
/// KEYS[3]). ARGV: the term, `<term>:<identity>`.
const FENCED_LOG_WRITE: &str = r"
local highest = tonumber(redis.call('get', KEYS[1]) or '0')
if tonumber(ARGV[1]) < highest then
    redis.call('rpush', KEYS[3], ARGV[2])
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('rpush', KEYS[2], ARGV[2])
return 1
";
/// The candidates' lease (watchdog timeout).
const LEASE: Duration = Duration::from_millis(2_000);
/// The default margin by which a leader's lost signal comes before its
/// lease can run out in the store: a quarter of the lease
/// (docs/election.md, `LeaderElection::with_margin`).
const MARGIN: Duration = Duration::from_millis(500);
/// How late a candidate's look (every 10 ms) may see its lost signal on a
/// loaded 2-core machine.
const LOOK_SLACK: Duration = Duration::from_millis(200);

/// NOT A TEST OF ITS OWN: the entry point of the candidate children.
#[test]
fn child_role_entrypoint() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    assert_eq!(role, "candidate", "unknown role {role}");
    candidate();
}

/// The candidate child (see the module doc).
fn candidate() {
    let client = child_client_with_watchdog();
    let identity = env(IDENTITY_ENV);
    let log = std::env::var(LOG_ENV).ok();
    let mut raw = raw_connection(&env(URL_ENV));
    let election = client.leader_election(env(LOCK_ENV));
    let from_parent = parent_lines();
    announce(&format!("{READY} {identity}"));
    let deadline = Instant::now() + Duration::from_secs(100);
    while Instant::now() < deadline {
        let leadership = election.campaign(&identity).expect("child: campaign");
        let term = leadership.term();
        let mut tenure = Tenure::won(&identity, 0, term);
        announce(&format!("{LEADER} {term} {}", tenure.section.enter_ns));
        loop {
            // The answer is recorded (and said) before the leader acts.
            if !tenure.look(leadership.is_lost()) {
                let lost_ns = tenure.section.lost_ns.unwrap_or_default();
                announce(&format!("{LOST} {term} {lost_ns}"));
                announce(&format!("{SECTION} {}", tenure.end().to_line()));
                break;
            }
            if let Some(log) = &log {
                let _: i64 = redis::Script::new(FENCED_LOG_WRITE)
                    .key(format!("{log}:highest"))
                    .key(log)
                    .key(format!("{log}:refused"))
                    .arg(term)
                    .arg(format!("{term}:{identity}"))
                    .invoke(&mut raw)
                    .expect("child: downstream write");
            }
            match from_parent.recv_timeout(Duration::from_millis(10)) {
                Ok(line) if line.trim() == "report" => {
                    tenure.look(leadership.is_lost());
                    announce(&format!("{SECTION} {}", tenure.clone().end().to_line()));
                    announce(REPORTED);
                }
                Ok(line) if line.trim() == "resign" => {
                    tenure.look(leadership.is_lost());
                    announce(&format!("{SECTION} {}", tenure.end().to_line()));
                    leadership.resign().expect("child: resign");
                    announce(&format!("{RESIGNED} {term}"));
                    // Out of the race until told again.
                    let _ = from_parent.recv_timeout(Duration::from_secs(100));
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                _ => {}
            }
        }
    }
}

/// Three candidates on `server` for election `name`, each ready; the first
/// one spawned leads first (it campaigns alone).
fn candidates(server: &TestServer, name: &str, log: &str) -> Vec<ChildProcess> {
    let prefixes: [&[&str]; 3] = [&[], &[], &[]];
    candidates_under(&server.url(), name, Some(log), prefixes)
}

/// Three candidates on the server at `url` for election `name`, each run
/// through its command prefix (a network namespace, or none) and ready;
/// the first one spawned leads first. `log`: the downstream store's log.
fn candidates_under(
    url: &str,
    name: &str,
    log: Option<&str>,
    prefixes: [&[&str]; 3],
) -> Vec<ChildProcess> {
    let mut children = Vec::new();
    for (identity, prefix) in ["c0", "c1", "c2"].into_iter().zip(prefixes) {
        let mut envs = vec![
            (URL_ENV, url.to_owned()),
            (LOCK_ENV, name.to_owned()),
            (WATCHDOG_MS_ENV, ms(LEASE)),
            (IDENTITY_ENV, identity.to_owned()),
        ];
        if let Some(log) = log {
            envs.push((LOG_ENV, log.to_owned()));
        }
        let child = ChildProcess::spawn_under(prefix, "candidate", &envs);
        child.expect_line(READY, READY_TIMEOUT);
        if identity == "c0" {
            child.expect_line(LEADER, READY_TIMEOUT);
        }
        children.push(child);
    }
    children
}

/// The term a child said it leads with (or lost), after `marker`.
fn term_of(line: &str) -> u64 {
    term_and_ns(line).0
}

/// The term and the monotonic ns of a `LEADER` or `LOST` line's rest.
fn term_and_ns(line: &str) -> (u64, u64) {
    let mut words = line.split_whitespace().map(str::parse::<u64>);
    match (words.next(), words.next()) {
        (Some(Ok(term)), Some(Ok(ns))) => (term, ns),
        _ => panic!("not `<term> <ns>`: {line:?}"),
    }
}

/// What follows `marker` on the last line of `child`'s output that has it.
fn last_line(child: &ChildProcess, marker: &str) -> String {
    let transcript = child.transcript();
    transcript
        .lines()
        .rev()
        .find_map(|l| l.split_once(marker).map(|(_, rest)| rest.trim().to_owned()))
        .unwrap_or_else(|| panic!("no {marker:?} line from the child:\n{transcript}"))
}

/// Every leadership the children reported (`SECTION` lines).
fn sections_of(children: &[ChildProcess]) -> Vec<Section> {
    let marker = format!("{SECTION} ");
    children
        .iter()
        .flat_map(|child| {
            child
                .transcript()
                .lines()
                .filter_map(|l| {
                    l.split_once(&marker)
                        .map(|(_, rest)| Section::from_line(rest))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Has the leader `children[leader]` report its leadership so far, then
/// checks every leadership reported with the fault suite's election
/// checker (term as the fencing token): no two overlap (a leader whose
/// lost signal fired counts as ended then), terms increase in order of
/// winning, and someone led within `within` after each of `faults`.
/// Returns the leaderships.
fn check_leaderships(
    children: &mut [ChildProcess],
    leader: usize,
    faults: &[Excuse],
    within: Duration,
) -> Vec<Section> {
    children[leader].send("report");
    children[leader].expect_line(REPORTED, STUCK);
    let sections = sections_of(children);
    let verdict = check_election(&sections, faults, within);
    for s in &sections {
        println!("leadership: {s}");
    }
    assert!(
        verdict.violations.is_empty(),
        "the election's history has {} violation(s):\n{}",
        verdict.violations.len(),
        verdict.violations.join("\n")
    );
    sections
}

/// A fault's window `[from, to]`, for the checker's progress check.
fn fault(why: &str, from_ns: u64, to_ns: u64) -> Excuse {
    Excuse {
        from_ns,
        to_ns,
        why: why.to_owned(),
        faulted: None,
    }
}

/// A downstream log (`log`, or its refused writes) as (term, writer).
fn read_log(server: &TestServer, log: &str) -> Vec<(u64, String)> {
    let mut raw = server.connection();
    let entries: Vec<String> = redis::cmd("LRANGE")
        .arg(log)
        .arg(0)
        .arg(-1)
        .query(&mut raw)
        .unwrap();
    entries
        .iter()
        .map(|e| {
            let (term, who) = e.split_once(':').unwrap();
            (term.parse().unwrap(), who.to_owned())
        })
        .collect()
}

/// The downstream log, checked: terms never go back (no old leader wrote
/// after a newer one began), and each term is one writer's.
fn check_log(server: &TestServer, log: &str) -> Vec<(u64, String)> {
    let parsed = read_log(server, log);
    for pair in parsed.windows(2) {
        assert!(
            pair[0].0 <= pair[1].0,
            "a write of term {} ({}) after one of term {} ({})",
            pair[1].0,
            pair[1].1,
            pair[0].0,
            pair[0].1
        );
        if pair[0].0 == pair[1].0 {
            assert_eq!(pair[0].1, pair[1].1, "two writers of term {}", pair[0].0);
        }
    }
    parsed
}

/// Which child leads next, and its term: the first `LEADER` line among
/// `children` (other than `except`) within `within`.
fn next_leader(
    children: &[ChildProcess],
    except: usize,
    within: Duration,
) -> (usize, u64, Instant) {
    let until = Instant::now() + within;
    while Instant::now() < until {
        for (i, child) in children.iter().enumerate() {
            if i == except {
                continue;
            }
            if let Some(line) = child.line_within(LEADER, Duration::from_millis(5)) {
                return (i, term_of(&line), Instant::now());
            }
        }
    }
    panic!("no other candidate led within {within:?}");
}

#[test]
fn a_killed_leader_is_replaced_within_its_lease() {
    let server = TestServer::start();
    let name = unique_name("election-proc:kill");
    let log = format!("{name}:log");
    let mut children = candidates(&server, &name, &log);
    std::thread::sleep(Duration::from_millis(200));
    let killed = Instant::now();
    let killed_ns = mono_ns();
    children[0].kill();
    let (next, _, led_at) = next_leader(&children, 0, LEASE + STUCK);
    let took = led_at.saturating_duration_since(killed);
    assert!(
        took < LEASE + PROMPT,
        "the next leader took {took:?} (lease {LEASE:?})"
    );
    std::thread::sleep(Duration::from_millis(100));
    let parsed = check_log(&server, &log);
    assert!(parsed.iter().any(|(_, who)| who == "c0"), "{parsed:?}");
    // The survivors' leaderships on the checker (the killed one reports
    // none): terms grow, and one led within the lease of the kill.
    let kill = fault("the leader killed (SIGKILL)", killed_ns, killed_ns);
    check_leaderships(&mut children, next, &[kill], LEASE + PROMPT);
}

#[test]
fn a_frozen_leader_never_acts_as_leader_after_another_won() {
    let server = TestServer::start();
    let name = unique_name("election-proc:freeze");
    let log = format!("{name}:log");
    let mut children = candidates(&server, &name, &log);
    std::thread::sleep(Duration::from_millis(200));
    send_signal(children[0].pid(), "STOP");
    let stopped_ns = mono_ns();
    let (next, term, _) = next_leader(&children, 0, LEASE + STUCK);
    // The new leader writes a while, then the frozen one resumes.
    std::thread::sleep(Duration::from_millis(300));
    send_signal(children[0].pid(), "CONT");
    let lost = children[0].expect_line(LOST, STUCK);
    assert!(term_of(&lost) < term);
    // On the suite's history checker, the term as the fencing token: the
    // frozen leader's last "leads" came before the new leader won, terms
    // grew, and the new leader came within the lease of the freeze.
    let frozen = fault("the leader frozen (SIGSTOP)", stopped_ns, stopped_ns);
    let sections = check_leaderships(&mut children, next, &[frozen], LEASE + PROMPT);
    let old = sections
        .iter()
        .find(|s| s.client == "c0" && s.token == Some(term_of(&lost)))
        .expect("the frozen leader's leadership was reported");
    let new = sections
        .iter()
        .find(|s| s.token == Some(term))
        .expect("the new leader's leadership was reported");
    assert!(
        old.lost_ns.is_some(),
        "resumed, it did not see it lost: {old}"
    );
    println!(
        "frozen leader: last said it leads {:.0} ms before the new leader won",
        ms_between(old.last_ok_ns, new.enter_ns)
    );
    std::thread::sleep(Duration::from_millis(300));
    let parsed = check_log(&server, &log);
    let first_new = parsed
        .iter()
        .position(|(t, _)| *t == term)
        .expect("the new leader wrote");
    assert!(
        parsed[first_new..].iter().all(|(_, who)| who != "c0"),
        "the frozen leader wrote after {} began: {parsed:?}",
        ["c0", "c1", "c2"][next]
    );
    // Resumed, it looked before acting and stopped: at most the one write
    // it had begun when it froze reached the store (refused by its term).
    let refused = read_log(&server, &format!("{log}:refused"));
    assert!(
        refused.len() <= 1 && refused.iter().all(|(t, _)| *t < term),
        "the resumed leader went on writing: {refused:?}"
    );
}

#[test]
fn a_resigning_leader_hands_over_within_milliseconds() {
    let server = TestServer::start();
    let name = unique_name("election-proc:resign");
    let log = format!("{name}:log");
    let mut children = candidates(&server, &name, &log);
    std::thread::sleep(Duration::from_millis(200));
    let mut leader = 0;
    let mut handovers = Vec::new();
    let mut last_term = 0;
    for _ in 0..2 {
        let resigned = Instant::now();
        children[leader].send("resign");
        children[leader].expect_line(RESIGNED, STUCK);
        let (next, term, led_at) = next_leader(&children, leader, STUCK);
        assert!(term > last_term);
        last_term = term;
        handovers.push(led_at.saturating_duration_since(resigned));
        leader = next;
    }
    println!("resign to the next leader (processes): {handovers:?}");
    for took in &handovers {
        assert!(*took < PROMPT, "a handover took {took:?}");
    }
    check_log(&server, &log);
    check_leaderships(&mut children, leader, &[], PROMPT);
}

#[test]
fn a_partitioned_leader_knows_it_lost_before_another_wins() {
    // Fails (never skips) where namespaces or nftables are missing.
    let partition = Partition::create();
    let server = NetnsServer::start(&partition);
    let name = unique_name("election-proc:partition");
    // c0 leads from the client namespace, across the link; c1 and c2
    // queue from the server's own, which the cut leaves alone.
    let (client_ns, server_ns) = (partition.client_prefix(), partition.server_prefix());
    let mut children = candidates_under(
        &server.url(),
        &name,
        None,
        [&client_ns, &server_ns, &server_ns],
    );
    std::thread::sleep(Duration::from_millis(300));
    let old_term = term_and_ns(&last_line(&children[0], LEADER)).0;
    // Packets dropped, not refused: c0's renewals wait and time out.
    partition.cut_link();
    let cut_ns = mono_ns();
    let (lost_term, lost_ns) = term_and_ns(&children[0].expect_line(LOST, LEASE + STUCK));
    let (next, term, _) = next_leader(&children, 0, LEASE + STUCK);
    let leader_line = last_line(&children[next], LEADER);
    let (won_term, won_ns) = term_and_ns(&leader_line);
    partition.heal();
    let gap = ms_between(lost_ns, won_ns);
    println!(
        "partition: c0 (term {old_term}) saw its lost signal {:.0} ms after the cut; {} won \
         (term {term}) {gap:.0} ms after that (margin {MARGIN:?})",
        ms_between(cut_ns, lost_ns),
        ["c0", "c1", "c2"][next]
    );
    assert_eq!(lost_term, old_term);
    assert_eq!(won_term, term);
    assert!(term > old_term, "term {term} after {old_term}");
    // It knew within its lease of the cut...
    assert!(
        lost_ns < cut_ns + (LEASE + LOOK_SLACK).as_nanos() as u64,
        "the cut-off leader saw its lost signal {:.0} ms after the cut (lease {LEASE:?})",
        ms_between(cut_ns, lost_ns)
    );
    // ...and the margin before anyone else won (less a late look).
    assert!(
        lost_ns < won_ns && gap >= (MARGIN - LOOK_SLACK).as_secs_f64() * 1e3,
        "the cut-off leader's lost signal came {gap:.0} ms before another won; the docs \
         promise the margin ({MARGIN:?}) less a look ({LOOK_SLACK:?})"
    );
    let cut = fault("the leader cut off (packets dropped)", cut_ns, cut_ns);
    check_leaderships(&mut children, next, &[cut], LEASE + PROMPT);
}
