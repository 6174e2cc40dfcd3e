//! A history of critical sections, and the one checker every fault test
//! runs on it (tests/fault_suite.rs).
//!
//! Each time a thread holds the lock it records a [`Section`]: who (client
//! or process id, thread), the fencing token, when it entered and left
//! (monotonic nanoseconds, comparable across the processes of this machine:
//! see [`mono_ns`]), whether its guard said it was lost when it left, and
//! what the fenced store answered to its write. [`History::check`] then
//! finds:
//!
//! - two sections that overlap in time, unless a fault explains it: the
//!   earlier one held the lock across a fault window ([`Excuse`]: a pause or
//!   an outage longer than the lease) or knew it was lost;
//! - tokens going backwards: a section that entered after another one left
//!   must have a greater token;
//! - a stale write accepted: a section's write (made just before it left)
//!   was accepted although a section with a greater token had its write
//!   accepted and left before.

use std::fmt;
use std::sync::Mutex;
use std::time::Instant;

/// Monotonic nanoseconds (`CLOCK_MONOTONIC`, which every process of the
/// machine shares, network namespaces included) of `at`.
///
/// The crate forbids `unsafe`, so there is no `clock_gettime` call here:
/// `Instant` on Linux is a `CLOCK_MONOTONIC` timespec, and its `Debug`
/// output (`Instant { tv_sec: .., tv_nsec: .. }`) shows it.
pub fn ns_of(at: Instant) -> u64 {
    let text = format!("{at:?}");
    let field = |name: &str| -> u64 {
        let start = text
            .find(name)
            .unwrap_or_else(|| panic!("mono_ns: no {name} in {text:?}"))
            + name.len();
        let digits: String = text[start..]
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(char::is_ascii_digit)
            .collect();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("mono_ns: bad {name} in {text:?}"))
    };
    field("tv_sec") * 1_000_000_000 + field("tv_nsec")
}

/// Monotonic nanoseconds now (see [`ns_of`]).
pub fn mono_ns() -> u64 {
    ns_of(Instant::now())
}

/// Milliseconds between two [`mono_ns`] readings (negative if `to` is
/// before `from`), for messages.
pub fn ms_between(from: u64, to: u64) -> f64 {
    (to as f64 - from as f64) / 1e6
}

/// One critical section: a thread held the lock from `enter_ns` to
/// `exit_ns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The client (or process) id.
    pub client: String,
    /// The thread within it.
    pub thread: usize,
    /// The fencing token (`None` for a plain lock).
    pub token: Option<u64>,
    pub enter_ns: u64,
    pub exit_ns: u64,
    /// `guard.is_lost()` when it left.
    pub lost: bool,
    /// What the fenced store answered to its write (`None`: no write).
    pub write_accepted: Option<bool>,
}

impl Section {
    /// One line, for a child process to report it (`from_line` reads it).
    pub fn to_line(&self) -> String {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
        format!(
            "{} {} {} {} {} {} {}",
            self.client,
            self.thread,
            opt(self.token.map(|t| t.to_string())),
            self.enter_ns,
            self.exit_ns,
            self.lost,
            opt(self.write_accepted.map(|a| a.to_string())),
        )
    }

    /// Reads a [`to_line`](Self::to_line) line.
    pub fn from_line(line: &str) -> Section {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.len(), 7, "bad section line {line:?}");
        let num = |w: &str| -> u64 {
            w.parse()
                .unwrap_or_else(|_| panic!("bad number {w:?} in {line:?}"))
        };
        let flag = |w: &str| -> bool {
            w.parse()
                .unwrap_or_else(|_| panic!("bad flag {w:?} in {line:?}"))
        };
        Section {
            client: words[0].to_owned(),
            thread: num(words[1]) as usize,
            token: (words[2] != "-").then(|| num(words[2])),
            enter_ns: num(words[3]),
            exit_ns: num(words[4]),
            lost: flag(words[5]),
            write_accepted: (words[6] != "-").then(|| flag(words[6])),
        }
    }
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} token {:?} [{} .. {}] ({:.1} ms) lost={} write={:?}",
            self.client,
            self.thread,
            self.token,
            self.enter_ns,
            self.exit_ns,
            ms_between(self.enter_ns, self.exit_ns),
            self.lost,
            self.write_accepted
        )
    }
}

/// A fault window that explains an overlap: a section that held the lock
/// during `[from_ns, to_ns]` may have been overtaken.
#[derive(Debug, Clone)]
pub struct Excuse {
    pub from_ns: u64,
    pub to_ns: u64,
    pub why: String,
}

/// What [`History::check`] found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Overlaps a fault explains (for the test's output).
    pub excused: Vec<String>,
    /// Everything else that is wrong; a good run has none.
    pub violations: Vec<String>,
}

/// The sections of one run, from any number of threads.
#[derive(Debug, Default)]
pub struct History {
    sections: Mutex<Vec<Section>>,
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    pub fn record(&self, section: Section) {
        self.lock().push(section);
    }

    /// A copy of the sections, in the order they were recorded.
    pub fn sections(&self) -> Vec<Section> {
        self.lock().clone()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many sections entered at or after `ns`.
    pub fn entered_since(&self, ns: u64) -> usize {
        self.lock().iter().filter(|s| s.enter_ns >= ns).count()
    }

    /// The first section that entered at or after `ns`.
    pub fn first_entered_since(&self, ns: u64) -> Option<Section> {
        self.lock()
            .iter()
            .filter(|s| s.enter_ns >= ns)
            .min_by_key(|s| s.enter_ns)
            .cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Section>> {
        self.sections.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Checks the history (see the module documentation).
    pub fn check(&self, excuses: &[Excuse]) -> Verdict {
        check(&self.sections(), excuses)
    }
}

/// [`History::check`] on a plain list of sections.
pub fn check(sections: &[Section], excuses: &[Excuse]) -> Verdict {
    let mut verdict = Verdict::default();
    let mut by_enter: Vec<&Section> = sections.iter().collect();
    by_enter.sort_by_key(|s| (s.enter_ns, s.exit_ns));

    // Overlaps: the later one entered before the earlier one left.
    for (i, a) in by_enter.iter().enumerate() {
        for b in by_enter[i + 1..]
            .iter()
            .take_while(|b| b.enter_ns < a.exit_ns)
        {
            let excuse = excuses
                .iter()
                .find(|e| e.from_ns < a.exit_ns && a.enter_ns < e.to_ns);
            let text = format!(
                "overlap of {:.1} ms: {a}\n    and {b}",
                ms_between(b.enter_ns, a.exit_ns.min(b.exit_ns))
            );
            match excuse {
                Some(excuse) => verdict
                    .excused
                    .push(format!("{text} (during {})", excuse.why)),
                None if a.lost => verdict
                    .excused
                    .push(format!("{text} (the first knew it was lost)")),
                None => verdict.violations.push(text),
            }
        }
    }

    // Tokens: sweep the sections in order of leaving; when `b` enters,
    // every section that left before has been seen.
    let mut by_exit: Vec<&Section> = sections.iter().collect();
    by_exit.sort_by_key(|s| s.exit_ns);
    let mut left = by_exit.iter().peekable();
    let mut highest: Option<&Section> = None;
    for b in &by_enter {
        while let Some(a) = left.next_if(|a| a.exit_ns <= b.enter_ns) {
            if a.token > highest.and_then(|h| h.token) {
                highest = Some(a);
            }
        }
        let Some(token) = b.token else { continue };
        if let Some(h) = highest.filter(|h| h.token.is_some_and(|t| t >= token)) {
            verdict.violations.push(format!(
                "token went backwards: {b}\n    entered after {h} left"
            ));
        }
    }

    // Stale writes: a section writes just before it leaves, so in order of
    // leaving, an accepted write's token is at least every token accepted
    // before it.
    let mut highest_accepted: Option<&Section> = None;
    for b in &by_exit {
        if b.write_accepted != Some(true) {
            continue;
        }
        match highest_accepted {
            Some(h) if h.token > b.token => verdict.violations.push(format!(
                "stale write accepted: {b}\n    after the write of {h}"
            )),
            _ => highest_accepted = Some(b),
        }
    }
    verdict
}

/// A downstream store in this process that protects itself with fencing
/// tokens: a write is accepted only with a token at least the highest it
/// accepted before. Holds one counter, which the workload increments
/// non-atomically (read, pause, write).
#[derive(Debug, Default)]
pub struct FencedStore {
    state: Mutex<StoreState>,
}

#[derive(Debug, Default)]
struct StoreState {
    highest: u64,
    value: u64,
    accepted: u64,
    refused: u64,
}

impl FencedStore {
    pub fn new() -> FencedStore {
        FencedStore::default()
    }

    /// The counter's value.
    pub fn read(&self) -> u64 {
        self.lock().value
    }

    /// Writes `value` stamped with `token` (`None`: a plain lock, always
    /// accepted); true when accepted.
    pub fn write(&self, token: Option<u64>, value: u64) -> bool {
        let mut state = self.lock();
        if let Some(token) = token {
            if token < state.highest {
                state.refused += 1;
                return false;
            }
            state.highest = token;
        }
        state.value = value;
        state.accepted += 1;
        true
    }

    /// (writes accepted, writes refused).
    pub fn counts(&self) -> (u64, u64) {
        let state = self.lock();
        (state.accepted, state.refused)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StoreState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
