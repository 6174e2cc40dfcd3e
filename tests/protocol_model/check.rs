//! The search: depth-first over every reachable state of a scenario, with a
//! visited set (FNV-hashed), checking the invariants in every state and the
//! transition properties on every transition. A violation does not stop the
//! search: the first trace of each broken invariant is kept, and the states
//! past it are explored too (a lost hold may lead on to two holders).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};

use super::model::{Invariant, Label, Model, Reply, Scenario, State};

/// FNV-1a: the visited set hashes many small states, and SipHash in an
/// unoptimized test build is several times slower.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &byte in bytes {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = hash;
    }
}

/// What a search found.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Distinct states reached.
    pub(crate) states: usize,
    /// Transitions taken (including into states seen already).
    pub(crate) transitions: usize,
    /// States with no successor (everyone done, time at its bound).
    pub(crate) terminals: usize,
    /// The first readable counterexample of each invariant broken.
    pub(crate) violations: BTreeMap<Invariant, String>,
    /// The furthest past its caller's window (true time, ticks) a copy
    /// ran: 0 or less when every copy kept to its window.
    pub(crate) max_lateness: i16,
    /// Copies the window check refused.
    pub(crate) late_refused: usize,
}

impl Report {
    /// The trace of `invariant`'s counterexample, or a panic saying it was
    /// not found.
    pub(crate) fn trace(&self, invariant: Invariant) -> &str {
        match self.violations.get(&invariant) {
            Some(trace) => trace,
            None => panic!(
                "expected a counterexample to \"{invariant}\", found only {:?} in {} states",
                self.violations.keys().collect::<Vec<_>>(),
                self.states
            ),
        }
    }
}

struct Search {
    model: Model,
    visited: HashSet<State, BuildHasherDefault<Fnv>>,
    path: Vec<Label>,
    report: Report,
}

impl Search {
    fn record(&mut self, state: &State, broken: Vec<(Invariant, String)>) {
        for (invariant, detail) in broken {
            if self.report.violations.contains_key(&invariant) {
                continue;
            }
            let mut text = String::new();
            let s = &self.model.s;
            let _ = writeln!(text, "VIOLATED: {invariant}: {detail}");
            let _ = writeln!(
                text,
                "scenario: {} under the {} protocol",
                s.name, s.protocol.name
            );
            let _ = writeln!(text, "bounds: {}", s.bounds());
            let _ = writeln!(text, "trace (threads A, B; times in ticks of 5 s):");
            for (i, label) in self.path.iter().enumerate() {
                let _ = writeln!(text, "  {:>2}. {label}", i + 1);
            }
            let _ = writeln!(
                text,
                "state: t={} server clock={} wall clock={} holds={:?} permits={} \
                 (expected {}) in flight={}",
                state.t,
                state.t + state.server_skew,
                state.t + state.wall_skew,
                state.holds,
                state.sem,
                state.expected,
                state.net.len()
            );
            self.report.violations.insert(invariant, text);
        }
    }

    fn dfs(&mut self, state: &State) {
        let steps = self.model.successors(state);
        if steps.is_empty() {
            self.report.terminals += 1;
        }
        for (label, next, broken) in steps {
            self.report.transitions += 1;
            if let Label::Deliver { msg, reply, .. } = label {
                if reply == Reply::Late {
                    self.report.late_refused += 1;
                } else if msg.copy > 0 {
                    self.report.max_lateness = self.report.max_lateness.max(state.t - msg.deadline);
                }
            }
            self.path.push(label);
            if !broken.is_empty() {
                self.record(&next, broken);
            }
            if !self.visited.contains(&next) {
                let broken = self.model.check(&next);
                if !broken.is_empty() {
                    self.record(&next, broken);
                }
                self.visited.insert(next.clone());
                self.report.states += 1;
                self.dfs(&next);
            }
            self.path.pop();
        }
    }
}

/// Explores every reachable state of `scenario`.
pub(crate) fn explore(scenario: Scenario) -> Report {
    let model = Model { s: scenario };
    let start = model.initial();
    let mut search = Search {
        model,
        visited: HashSet::default(),
        path: Vec::new(),
        report: Report {
            max_lateness: i16::MIN,
            ..Report::default()
        },
    };
    let broken = search.model.check(&start);
    search.record(&start, broken);
    search.visited.insert(start.clone());
    search.report.states = 1;
    search.dfs(&start);
    search.report
}
