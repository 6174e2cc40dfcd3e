//! An exhaustive interleaving checker for the restart of a fixed lease
//! passed between threads (`restart.rs`, `lock::cohort`): no guard ever
//! believes its hold lasts longer than the store keeps it.
//!
//! A small explicit-state model of one hold passed from guard 0 to 1 to 2
//! (leases of 2, 3 and 5 ticks), on a discrete clock of 8 ticks. Each step
//! is one of:
//! - a tick (the store expires the hold once its TTL has run out);
//! - the current guard's pass to the next: the new guard holds on the rest
//!   of the old lease, and a restart to its own lease is registered if
//!   that ends later (`Restarts::add`), replacing and cancelling the old
//!   guard's (`Restarts::cancel`: an answer in flight is then ignored);
//! - the current guard's release (cancels its restart);
//! - the current guard's own `extend` to 1 tick (cancels its restart,
//!   then one call that sets the TTL, and its answer);
//! - the watchdog sending the pending restart, one at a time, maybe as two
//!   copies (a resend after a dropped connection);
//! - a call landing in the store (a copy landing late too), and its answer
//!   reaching the client (after its first copy landed).
//!
//! The invariant, in every state: while the current guard believes it
//! holds (its lease's end is after now), the store holds the lock at least
//! until that end (but while its own thread is inside `extend`, which may
//! shorten the lease as asked and acts on nothing until it returns). Breadth-first search with a visited set enumerates every
//! reachable state. Two broken rules fail it: a restart that may shorten
//! the TTL (a bare `PEXPIRE`: a late copy of an earlier guard's restart
//! cuts a later guard's lease), and a guard that applies a restart's answer
//! whatever happened meanwhile (neither cancelled by its own `extend` nor
//! checked against the lease's end when the restart was registered:
//! `Lease::raised_from`).

use std::collections::{HashSet, VecDeque};

/// Each guard's fixed lease, in ticks.
const LEASES: [u8; 3] = [2, 3, 5];
/// The last tick.
const HORIZON: u8 = 8;
/// A guard's own `extend` sets this lease.
const EXTEND: u8 = 1;
/// Restart calls the watchdog sends at most (bounds the search).
const SENDS: u8 = 3;

/// How a restart changes the store's TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RaiseRule {
    /// `lua/lock_renew.lua` with `raise`: never shorter.
    Raise,
    /// A bare `PEXPIRE` (broken).
    Plain,
}

/// How a guard takes a restart's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AnswerRule {
    /// Its own `extend` cancels the restart, and the answer applies only
    /// while the lease still ends where it did at registration.
    Checked,
    /// Always (broken).
    Unchecked,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    /// A restart registered while the guard's lease ended at `expected`.
    Restart {
        expected: u8,
    },
    Extend,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Call {
    kind: Kind,
    guard: u8,
    sent: u8,
    lease: u8,
    /// `Some(held)` once its first copy landed: whether it found the hold.
    landed: Option<bool>,
    /// A second copy still on its way.
    late_copy: bool,
    /// Its answer no longer speaks for the guard (`Restarts::answered`).
    cancelled: bool,
    answered: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    now: u8,
    /// The store's TTL end; `None` once released or expired.
    end: Option<u8>,
    /// The guard holding (passed to last); `None` once released.
    current: Option<u8>,
    /// Each guard's lease end as it believes it (0: lost).
    ends: [u8; 3],
    /// The registered restart: (guard, its lease's end then, target).
    pending: Option<(u8, u8, u8)>,
    calls: Vec<Call>,
    sends: u8,
    extended: bool,
}

impl State {
    fn start() -> State {
        State {
            now: 0,
            end: Some(LEASES[0]),
            current: Some(0),
            ends: [LEASES[0], 0, 0],
            pending: None,
            calls: Vec::new(),
            sends: 0,
            extended: false,
        }
    }

    /// A restart or an answer no longer speaks for the hold's holder.
    fn cancel_restarts(&mut self) {
        self.pending = None;
        for call in &mut self.calls {
            if matches!(call.kind, Kind::Restart { .. }) {
                call.cancelled = true;
            }
        }
    }

    /// The guard's thread is inside `extend` (it can do nothing else).
    fn busy(&self, guard: u8) -> bool {
        self.calls
            .iter()
            .any(|c| c.kind == Kind::Extend && c.guard == guard && !c.answered)
    }

    fn land(&mut self, at: usize, raise: RaiseRule) -> bool {
        let call = self.calls[at];
        let Some(end) = self.end else {
            return false;
        };
        let to = self.now + call.lease;
        self.end = Some(match (call.kind, raise) {
            (Kind::Restart { .. }, RaiseRule::Raise) => end.max(to),
            _ => to,
        });
        true
    }

    fn tidy(&mut self) {
        self.calls.retain(|c| !c.answered || c.late_copy);
        self.calls.sort();
    }

    fn violation(&self) -> Option<String> {
        let guard = self.current?;
        let believed = self.ends[usize::from(guard)];
        // Inside its own `extend` (which may shorten the lease, as the
        // user asked) the guard's thread acts on nothing until it returns.
        if believed <= self.now || self.busy(guard) {
            return None;
        }
        match self.end {
            Some(end) if end >= believed => None,
            end => Some(format!(
                "at tick {} guard {guard} believes it holds until {believed}, the store until {end:?}",
                self.now
            )),
        }
    }

    fn next(&self, raise: RaiseRule, answer: AnswerRule) -> Vec<State> {
        let mut out = Vec::new();
        if self.now < HORIZON {
            let mut s = self.clone();
            s.now += 1;
            if s.end.is_some_and(|end| end <= s.now) {
                s.end = None;
            }
            out.push(s);
        }
        if let Some(guard) = self.current
            && !self.busy(guard)
        {
            let g = usize::from(guard);
            if g + 1 < LEASES.len() && self.now < self.ends[g] {
                let mut s = self.clone();
                s.cancel_restarts();
                let next = guard + 1;
                s.ends[g + 1] = self.ends[g];
                let target = self.now + LEASES[g + 1];
                if target > self.ends[g] {
                    s.pending = Some((next, self.ends[g], target));
                }
                s.current = Some(next);
                out.push(s);
            }
            let mut s = self.clone();
            s.cancel_restarts();
            s.end = None;
            s.current = None;
            out.push(s);
            if !self.extended && self.now < self.ends[g] {
                let mut s = self.clone();
                if answer == AnswerRule::Checked {
                    s.cancel_restarts();
                }
                s.extended = true;
                s.calls.push(Call {
                    kind: Kind::Extend,
                    guard,
                    sent: self.now,
                    lease: EXTEND,
                    landed: None,
                    late_copy: false,
                    cancelled: false,
                    answered: false,
                });
                out.push(s);
            }
        }
        let restart_in_flight = self
            .calls
            .iter()
            .any(|c| matches!(c.kind, Kind::Restart { .. }) && !c.answered);
        if let Some((guard, expected, target)) = self.pending
            && self.sends < SENDS
            && !restart_in_flight
            && target > self.now
        {
            for late_copy in [false, true] {
                let mut s = self.clone();
                s.pending = None;
                s.sends += 1;
                s.calls.push(Call {
                    kind: Kind::Restart { expected },
                    guard,
                    sent: self.now,
                    lease: target - self.now,
                    landed: None,
                    late_copy,
                    cancelled: false,
                    answered: false,
                });
                out.push(s);
            }
        }
        for at in 0..self.calls.len() {
            let call = self.calls[at];
            match call.landed {
                None => {
                    let mut s = self.clone();
                    let held = s.land(at, raise);
                    s.calls[at].landed = Some(held);
                    out.push(s);
                }
                Some(held) => {
                    if call.late_copy {
                        let mut s = self.clone();
                        s.land(at, raise);
                        s.calls[at].late_copy = false;
                        out.push(s);
                    }
                    if !call.answered {
                        let mut s = self.clone();
                        s.calls[at].answered = true;
                        s.answer(call, held, answer);
                        out.push(s);
                    }
                }
            }
        }
        for s in &mut out {
            s.tidy();
        }
        out
    }

    fn answer(&mut self, call: Call, held: bool, rule: AnswerRule) {
        let g = usize::from(call.guard);
        let ends = &mut self.ends[g];
        match call.kind {
            Kind::Extend if held => *ends = call.sent + call.lease,
            Kind::Extend => *ends = 0,
            Kind::Restart { .. } if call.cancelled && rule == AnswerRule::Checked => {}
            Kind::Restart { .. } if !held => *ends = 0,
            Kind::Restart { expected } => {
                let raised = call.sent + call.lease;
                if rule == AnswerRule::Unchecked {
                    *ends = (*ends).max(raised);
                } else if *ends == expected {
                    *ends = expected.max(raised);
                }
            }
        }
    }
}

/// Every reachable state under the rules; the first violation, or the
/// number of states.
fn explore(raise: RaiseRule, answer: AnswerRule) -> Result<usize, String> {
    let start = State::start();
    let mut seen = HashSet::new();
    let mut queue = VecDeque::new();
    seen.insert(start.clone());
    queue.push_back(start);
    while let Some(state) = queue.pop_front() {
        if let Some(violation) = state.violation() {
            return Err(violation);
        }
        for next in state.next(raise, answer) {
            if seen.insert(next.clone()) {
                queue.push_back(next);
            }
        }
    }
    Ok(seen.len())
}

#[test]
fn no_guard_believes_its_hold_outlasts_the_store_in_any_interleaving() {
    let states = explore(RaiseRule::Raise, AnswerRule::Checked).unwrap();
    // Not a trivial search: every step kind is reached.
    assert!(states > 1_000, "only {states} states");
}

#[test]
fn a_restart_that_may_shorten_the_ttl_fails_the_model() {
    let violation = explore(RaiseRule::Plain, AnswerRule::Checked).unwrap_err();
    assert!(violation.contains("believes it holds"), "{violation}");
}

#[test]
fn a_restart_answer_applied_whatever_happened_meanwhile_fails_the_model() {
    let violation = explore(RaiseRule::Raise, AnswerRule::Unchecked).unwrap_err();
    assert!(violation.contains("believes it holds"), "{violation}");
}

/// The model's rules are the code's: the lines it stands for are there.
#[test]
fn the_model_is_tied_to_the_code() {
    let ties: [(&str, &str); 5] = [
        (
            include_str!("../../lua/lock_renew.lua"),
            "if ARGV[4] and redis.call('pttl', KEYS[1]) >= tonumber(ARGV[1]) then",
        ),
        (include_str!("lease.rs"), "if *ends != expected {"),
        (
            include_str!("restart.rs"),
            "if until <= expected || expected <= now {",
        ),
        (
            include_str!("../lock/guard.rs"),
            "// Passed to this thread: the new lease replaces its restart.",
        ),
        (include_str!("restart.rs"), "self.in_flight = None;"),
    ];
    for (source, line) in ties {
        assert!(source.contains(line), "the code no longer says {line:?}");
    }
}
