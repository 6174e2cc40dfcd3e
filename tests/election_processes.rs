//! Leader election across real processes on a real `redis-server` (issue
//! 35): three candidate processes; the leader killed (the next leads within
//! the lease), frozen (it never acts as leader again once resumed: its
//! lost signal is true from its first look, and the downstream store, fenced
//! by the term, sees terms only grow), and resigning (the next leads within
//! a handoff).
//!
//! The children are this test binary re-executed in the `candidate` role
//! (see tests/common/child.rs). A candidate campaigns, says `LEADER
//! <term>`, then every 10 ms checks `is_lost()` and, while it leads,
//! writes its term to a downstream store fenced by the term (it refuses a
//! term below the highest it accepted, and logs accepted and refused
//! writes apart); once lost it says `LOST <term>` and campaigns again.
//! A `resign` line from the parent makes a leader resign.
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
    let log = env(LOG_ENV);
    let mut raw = raw_connection(&env(URL_ENV));
    let election = client.leader_election(env(LOCK_ENV));
    let from_parent = parent_lines();
    announce(&format!("{READY} {identity}"));
    let deadline = Instant::now() + Duration::from_secs(100);
    while Instant::now() < deadline {
        let leadership = election.campaign(&identity).expect("child: campaign");
        let term = leadership.term();
        announce(&format!("{LEADER} {term}"));
        loop {
            if leadership.is_lost() {
                announce(&format!("{LOST} {term}"));
                break;
            }
            let _: i64 = redis::Script::new(FENCED_LOG_WRITE)
                .key(format!("{log}:highest"))
                .key(&log)
                .key(format!("{log}:refused"))
                .arg(term)
                .arg(format!("{term}:{identity}"))
                .invoke(&mut raw)
                .expect("child: downstream write");
            match from_parent.recv_timeout(Duration::from_millis(10)) {
                Ok(line) if line.trim() == "resign" => {
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
    let mut children = Vec::new();
    for identity in ["c0", "c1", "c2"] {
        let child = ChildProcess::spawn(
            "candidate",
            &[
                (URL_ENV, server.url()),
                (LOCK_ENV, name.to_owned()),
                (WATCHDOG_MS_ENV, ms(LEASE)),
                (IDENTITY_ENV, identity.to_owned()),
                (LOG_ENV, log.to_owned()),
            ],
        );
        child.expect_line(READY, READY_TIMEOUT);
        if identity == "c0" {
            child.expect_line(LEADER, READY_TIMEOUT);
        }
        children.push(child);
    }
    children
}

/// The term a child said it leads with, after `marker`.
fn term_of(line: &str) -> u64 {
    line.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a term: {line:?}"))
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
    children[0].kill();
    let (_, _, led_at) = next_leader(&children, 0, LEASE + STUCK);
    let took = led_at.saturating_duration_since(killed);
    assert!(
        took < LEASE + PROMPT,
        "the next leader took {took:?} (lease {LEASE:?})"
    );
    std::thread::sleep(Duration::from_millis(100));
    let parsed = check_log(&server, &log);
    assert!(parsed.iter().any(|(_, who)| who == "c0"), "{parsed:?}");
}

#[test]
fn a_frozen_leader_never_acts_as_leader_after_another_won() {
    let server = TestServer::start();
    let name = unique_name("election-proc:freeze");
    let log = format!("{name}:log");
    let children = candidates(&server, &name, &log);
    std::thread::sleep(Duration::from_millis(200));
    send_signal(children[0].pid(), "STOP");
    let (next, term, _) = next_leader(&children, 0, LEASE + STUCK);
    // The new leader writes a while, then the frozen one resumes.
    std::thread::sleep(Duration::from_millis(300));
    send_signal(children[0].pid(), "CONT");
    let lost = children[0].expect_line(LOST, STUCK);
    assert!(term_of(&lost) < term);
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
}
