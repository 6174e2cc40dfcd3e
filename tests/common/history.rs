//! Histories of holds and writes, and the checker every lock-like test of
//! tests/fault_suite.rs runs on them (the counting primitives' checks are in
//! tests/common/primitive_history.rs).
//!
//! Each time a thread holds a lock (or one half of a read-write lock) it
//! records a [`Section`]: who, the fencing token, when it entered, the last
//! time `is_lost()` said "still held" (`last_ok_ns`: the workload asks
//! immediately before every write and once more before it unlocks), when it
//! first said "lost" if ever, and when it left. The downstream store logs
//! every write it is sent, in the order it applies them ([`Write`]).
//! [`check`] then finds:
//!
//! - **overlap**: a section entered while another (exclusive, or either one
//!   exclusive for a read-write lock) still had `is_lost()` say "held"
//!   later; excused only when the earlier section held across a fault
//!   window ([`Excuse`], exactly the fault's own interval: nothing wider);
//! - **token went backwards**: a section that entered after another one
//!   left has a token no greater than it;
//! - **stale write**: a write the store accepted although its token is below
//!   one it accepted before (a store without production semantics), or that
//!   was sent after a section with a greater token had entered (the lock had
//!   moved on; fencing cannot refuse it while the new holder has not written
//!   yet); excused only across a fault window;
//! - **lost update**: an accepted write that did not start from the value of
//!   the accepted write before it (the counter is incremented non-atomically:
//!   read, pause, write). This check never turns off: a lost update is
//!   excused only when the overwritten write's section held across a fault
//!   window, and each such excuse is reported.

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

/// How a section holds: alone, or beside other shared holders (the read
/// half of a read-write lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Exclusive,
    Shared,
}

/// One critical section: a thread held the lock from `enter_ns` to
/// `exit_ns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The client (or process) id.
    pub client: String,
    /// The thread within it.
    pub thread: usize,
    pub mode: Mode,
    /// The fencing token (`None` for a lock without one).
    pub token: Option<u64>,
    /// When the acquire returned the guard.
    pub enter_ns: u64,
    /// The last time `is_lost()` returned false (the section's claim that it
    /// still held the lock then).
    pub last_ok_ns: u64,
    /// The first time `is_lost()` returned true, if it did.
    pub lost_ns: Option<u64>,
    /// When it called unlock (or dropped the guard).
    pub exit_ns: u64,
}

impl Section {
    /// One line, for a child process to report it (`from_line` reads it).
    pub fn to_line(&self) -> String {
        format!(
            "{} {} {} {} {} {} {} {}",
            self.client,
            self.thread,
            match self.mode {
                Mode::Exclusive => "x",
                Mode::Shared => "s",
            },
            opt(self.token),
            self.enter_ns,
            self.last_ok_ns,
            opt(self.lost_ns),
            self.exit_ns,
        )
    }

    /// Reads a [`to_line`](Self::to_line) line.
    pub fn from_line(line: &str) -> Section {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.len(), 8, "bad section line {line:?}");
        Section {
            client: words[0].to_owned(),
            thread: num(words[1], line) as usize,
            mode: if words[2] == "s" {
                Mode::Shared
            } else {
                Mode::Exclusive
            },
            token: opt_num(words[3], line),
            enter_ns: num(words[4], line),
            last_ok_ns: num(words[5], line),
            lost_ns: opt_num(words[6], line),
            exit_ns: num(words[7], line),
        }
    }

    fn held_across(&self, excuse: &Excuse) -> bool {
        self.enter_ns <= excuse.to_ns && self.last_ok_ns >= excuse.from_ns
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn num(word: &str, line: &str) -> u64 {
    word.parse()
        .unwrap_or_else(|_| panic!("bad number {word:?} in {line:?}"))
}

fn opt_num(word: &str, line: &str) -> Option<u64> {
    (word != "-").then(|| num(word, line))
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} {:?} token {:?} [{} .. last ok {} .. {}] ({:.1} ms) lost at {:?}",
            self.client,
            self.thread,
            self.mode,
            self.token,
            self.enter_ns,
            self.last_ok_ns,
            self.exit_ns,
            ms_between(self.enter_ns, self.exit_ns),
            self.lost_ns
        )
    }
}

/// One write the downstream store was sent, in the order it applied them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub client: String,
    pub thread: usize,
    pub token: Option<u64>,
    /// When the writer sent it (after `is_lost()` said "held").
    pub sent_ns: u64,
    /// The counter value the writer read before this write (read, pause,
    /// `is_lost()`, write).
    pub read: u64,
    /// The value it wrote (`read + 1`).
    pub value: u64,
    pub accepted: bool,
}

impl Write {
    pub fn to_line(&self) -> String {
        format!(
            "{} {} {} {} {} {} {}",
            self.client,
            self.thread,
            opt(self.token),
            self.sent_ns,
            self.read,
            self.value,
            self.accepted
        )
    }

    pub fn from_line(line: &str) -> Write {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.len(), 7, "bad write line {line:?}");
        Write {
            client: words[0].to_owned(),
            thread: num(words[1], line) as usize,
            token: opt_num(words[2], line),
            sent_ns: num(words[3], line),
            read: num(words[4], line),
            value: num(words[5], line),
            accepted: words[6] == "true",
        }
    }

    /// The section this write belongs to (same writer, sent while it held).
    fn section<'a>(&self, sections: &'a [Section]) -> Option<&'a Section> {
        sections.iter().find(|s| {
            s.client == self.client
                && s.thread == self.thread
                && s.enter_ns <= self.sent_ns
                && self.sent_ns <= s.exit_ns
        })
    }
}

impl fmt::Display for Write {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "write {} -> {} by {}/{} token {:?} sent at {} ({})",
            self.read,
            self.value,
            self.client,
            self.thread,
            self.token,
            self.sent_ns,
            if self.accepted { "accepted" } else { "refused" }
        )
    }
}

/// A fault window: a section that held the lock during `[from_ns, to_ns]`
/// may have been overtaken. Exactly the fault's interval (the pause, the
/// outage past the lease, the moment data was lost), never widened.
#[derive(Debug, Clone)]
pub struct Excuse {
    pub from_ns: u64,
    pub to_ns: u64,
    pub why: String,
    /// Whom the fault hit, where a check asks (the FIFO check: only the
    /// waiter that lost its turn excuses it, by its own fault): `None`, a
    /// fault of the server or of every connection (a freeze, a
    /// `CLIENT KILL TYPE normal`), which hits every waiter whose call spans
    /// it; `Some(ids)`, a fault of one request (held by a proxy), which hits
    /// only the waiters (holder ids) it was for.
    pub faulted: Option<Vec<String>>,
}

impl Excuse {
    /// Whether this fault hit the waiter `who` (see [`Excuse::faulted`]).
    pub fn hit(&self, who: &str) -> bool {
        self.faulted
            .as_ref()
            .is_none_or(|ids| ids.iter().any(|id| id == who))
    }
}

/// What a check found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Violations a fault explains (for the test's output).
    pub excused: Vec<String>,
    /// Everything else that is wrong; a good run has none.
    pub violations: Vec<String>,
}

impl Verdict {
    /// The violations whose text starts with `kind` (the property's name:
    /// "overlap", "lost update", ...).
    pub fn of(&self, kind: &str) -> Vec<&String> {
        self.violations
            .iter()
            .filter(|v| v.starts_with(kind))
            .collect()
    }

    fn flag(&mut self, text: String, excuse: Option<&Excuse>) {
        match excuse {
            Some(e) => self.excused.push(format!("{text}\n    (during {})", e.why)),
            None => self.violations.push(text),
        }
    }
}

/// The sections and writes of one run, from any number of threads.
#[derive(Debug, Default)]
pub struct History {
    sections: Mutex<Vec<Section>>,
}

impl History {
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
}

/// Checks sections and writes (see the module documentation).
pub fn check(sections: &[Section], writes: &[Write], excuses: &[Excuse]) -> Verdict {
    let mut verdict = Verdict::default();
    let across = |s: &Section| excuses.iter().find(|e| s.held_across(e));
    let mut by_enter: Vec<&Section> = sections.iter().collect();
    by_enter.sort_by_key(|s| (s.enter_ns, s.exit_ns));

    // Overlaps: `b` entered while `a` still said it held the lock.
    for (i, a) in by_enter.iter().enumerate() {
        for b in by_enter[i + 1..]
            .iter()
            .take_while(|b| b.enter_ns < a.last_ok_ns.max(a.exit_ns))
        {
            if b.enter_ns >= a.last_ok_ns || (a.mode == Mode::Shared && b.mode == Mode::Shared) {
                continue;
            }
            let text = format!(
                "overlap of {:.1} ms: {a}\n    and {b}",
                ms_between(b.enter_ns, a.last_ok_ns.min(b.last_ok_ns.max(b.enter_ns)))
            );
            verdict.flag(text, across(a));
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

    // Stale writes and lost updates, in the store's order.
    let mut highest_accepted: Option<&Write> = None;
    let mut previous: Option<&Write> = None;
    for w in writes.iter().filter(|w| w.accepted) {
        let own = w.section(sections);
        let excuse = own.and_then(&across);
        if let Some(h) = highest_accepted.filter(|h| h.token > w.token) {
            verdict.violations.push(format!(
                "stale write: {w}\n    accepted after the store accepted {h}"
            ));
        }
        if let Some(t) = w.token
            && let Some(newer) = sections
                .iter()
                .find(|s| s.token.is_some_and(|n| n > t) && s.enter_ns < w.sent_ns)
        {
            verdict.flag(
                format!("stale write: {w}\n    sent after the newer holder {newer} entered"),
                excuse,
            );
        }
        let base = previous.map_or(0, |p| p.value);
        if w.read != base {
            // The write whose value `w` overwrote without reading it.
            let excuse = previous
                .and_then(|p| p.section(sections))
                .and_then(&across)
                .or(excuse);
            verdict.flag(
                format!(
                    "lost update: {w}\n    started from {} but the store held {base}{}",
                    w.read,
                    previous.map(|p| format!(" (from {p})")).unwrap_or_default()
                ),
                excuse,
            );
        }
        if highest_accepted.is_none_or(|h| w.token >= h.token) {
            highest_accepted = Some(w);
        }
        previous = Some(w);
    }
    verdict
}

/// A downstream store in this process with production fencing semantics:
/// a write is accepted with a token at least the highest it accepted
/// before (the same holder writes several times) and refused with a lower
/// one; without a token (a plain lock) every write is accepted. Holds one
/// counter and logs every write it is sent, in the order it applies them.
#[derive(Debug, Default)]
pub struct FencedStore {
    state: Mutex<StoreState>,
}

#[derive(Debug, Default)]
struct StoreState {
    highest: u64,
    value: u64,
    log: Vec<Write>,
}

impl FencedStore {
    /// The counter's value.
    pub fn read(&self) -> u64 {
        self.lock().value
    }

    /// Applies `write` (its `accepted` is set here); true when accepted.
    pub fn write(&self, mut write: Write) -> bool {
        let mut state = self.lock();
        write.accepted = match write.token {
            Some(token) if token < state.highest => false,
            Some(token) => {
                state.highest = token;
                true
            }
            None => true,
        };
        if write.accepted {
            state.value = write.value;
        }
        let accepted = write.accepted;
        state.log.push(write);
        accepted
    }

    /// Every write it was sent, in order.
    pub fn log(&self) -> Vec<Write> {
        self.lock().log.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StoreState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
