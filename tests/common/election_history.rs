//! The history of an election's leaderships and its checker
//! (tests/fault_suite.rs, tests/election_processes.rs).
//!
//! A leadership is recorded as a [`Section`] of tests/common/history.rs
//! (the suite's history format, one line per leadership from a child
//! process), its term as the fencing token: `enter_ns` when the campaign
//! returned, `last_ok_ns` the last time `is_lost()` said "still leads"
//! (the candidate asks at once on winning and then every few ms),
//! `lost_ns` the first time it said "lost" (the lost signal fired: from
//! then on the leadership counts as ended), `exit_ns` when it resigned. A
//! leadership whose first look already said "lost" never led
//! ([`led`]: `last_ok_ns == enter_ns` with `lost_ns` set).
//!
//! [`check_election`] finds:
//!
//! - **leadership overlap**: a leadership won (its campaign returned, so
//!   the store had proclaimed it) while another one's `is_lost()` still
//!   said "leads" later: two leaders at once, or (the later one never
//!   led, but with a greater term: proclaimed after the other) the old
//!   leader did not know first. No excuse: the lost signal is counted on
//!   the leader's own clock, so no fault of the store or the network can
//!   make it lie;
//! - **term reused** / **term not increased**: two leaderships with one
//!   term, or a leadership that led with a term no greater than one that
//!   led before it (in order of winning);
//! - **no progress**: after a fault's window ended, nobody led within the
//!   bound (the election's promise: a leader lost to a fault is replaced
//!   within its lease).

use std::time::Duration;

use super::history::{Excuse, Section, Verdict, ms_between};

/// Whether `s` led at all: its first look (asked at once on winning) did
/// not already say "lost".
pub fn led(s: &Section) -> bool {
    !(s.lost_ns.is_some() && s.last_ok_ns == s.enter_ns)
}

/// A leadership being recorded: [`won`](Self::won) when the campaign
/// returns, [`look`](Self::look) at every `is_lost()`, [`end`](Self::end)
/// when it resigns.
#[derive(Debug, Clone)]
pub struct Tenure {
    pub section: Section,
}

impl Tenure {
    /// A leadership of `term` won now by `client`/`thread`.
    pub fn won(client: &str, thread: usize, term: u64) -> Tenure {
        let now = super::history::mono_ns();
        Tenure {
            section: Section {
                client: client.to_owned(),
                thread,
                mode: super::history::Mode::Exclusive,
                token: Some(term),
                enter_ns: now,
                last_ok_ns: now,
                lost_ns: None,
                exit_ns: now,
            },
        }
    }

    /// Records one answer of `is_lost()` (taken just before); returns
    /// whether it still leads. Once lost it stays lost.
    pub fn look(&mut self, lost: bool) -> bool {
        let now = super::history::mono_ns();
        if self.section.lost_ns.is_some() {
            return false;
        }
        if lost {
            self.section.lost_ns = Some(now);
        } else {
            self.section.last_ok_ns = now;
        }
        !lost
    }

    /// Whether a look said "lost".
    pub fn is_lost(&self) -> bool {
        self.section.lost_ns.is_some()
    }

    /// The section, ended now.
    pub fn end(mut self) -> Section {
        self.section.exit_ns = super::history::mono_ns();
        self.section
    }
}

/// Checks an election's leaderships (see the module documentation);
/// `faults` are the faults' exact windows, after each of which someone
/// must lead within `within`.
pub fn check_election(sections: &[Section], faults: &[Excuse], within: Duration) -> Verdict {
    let mut verdict = Verdict::default();
    let mut by_enter: Vec<&Section> = sections.iter().collect();
    by_enter.sort_by_key(|s| (s.enter_ns, s.exit_ns));

    // Overlaps: `b` won while `a` still said it led. A `b` that never led
    // with a lower term was proclaimed before `a` (its reply came late):
    // no second leader, and no sign that `a` did not know first.
    for (i, a) in by_enter.iter().enumerate() {
        for b in by_enter[i + 1..]
            .iter()
            .take_while(|b| b.enter_ns < a.last_ok_ns)
        {
            if !led(b) && b.token < a.token {
                continue;
            }
            verdict.violations.push(format!(
                "leadership overlap of {:.1} ms: {b}\n    won while {a} still said it led",
                ms_between(b.enter_ns, a.last_ok_ns)
            ));
        }
    }

    // Terms: one leadership each, increasing in order of winning.
    let mut terms: Vec<(u64, &Section)> = sections
        .iter()
        .filter_map(|s| s.token.map(|t| (t, s)))
        .collect();
    terms.sort_by_key(|(t, _)| *t);
    for pair in terms.windows(2) {
        if pair[0].0 == pair[1].0 {
            verdict
                .violations
                .push(format!("term reused: {}\n    and {}", pair[0].1, pair[1].1));
        }
    }
    let mut highest: Option<&Section> = None;
    for s in by_enter.iter().filter(|s| led(s)) {
        if let Some(h) = highest.filter(|h| h.token >= s.token) {
            verdict
                .violations
                .push(format!("term not increased: {s}\n    led after {h}"));
        }
        if highest.is_none_or(|h| s.token > h.token) {
            highest = Some(s);
        }
    }

    // Progress: after each fault, a leadership that led at some moment in
    // [end, end + within] (it said "leads" at or after the end, and won
    // no later than the bound).
    let within_ns = u64::try_from(within.as_nanos()).unwrap_or(u64::MAX);
    for fault in faults {
        let until = fault.to_ns.saturating_add(within_ns);
        let led_then = sections
            .iter()
            .any(|s| led(s) && s.enter_ns <= until && s.last_ok_ns >= fault.to_ns);
        if !led_then {
            verdict.violations.push(format!(
                "no progress: nobody led within {within:?} after {} ended at {} (window {:.0} ms)",
                fault.why,
                fault.to_ns,
                ms_between(fault.from_ns, fault.to_ns)
            ));
        }
    }
    verdict
}
