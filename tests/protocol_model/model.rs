//! The modelled system: the protocol's variants, a scenario's bounds, the
//! explicit state (server, network, clients, ghosts) and its transitions.
//! Each server-side script is one atomic transition with the script's guard
//! and effect; see `ties.rs` for the tokens each one is tied to.

use std::fmt;

/// Seconds per tick: the model's time unit. 25 ms margins round up to a
/// whole tick, so a window is `ceil((response_timeout + 25 ms) / tick)`.
pub(crate) const TICK_S: i16 = 5;

/// The most ids (attempt ids and op ids share one counter, from 1).
pub(crate) const IDS: usize = 16;

/// Threads (each its own client, holder id = thread number).
pub(crate) const THREADS: usize = 2;

/// No window on the request (undo and settle: sent until they land).
const NO_WINDOW: i16 = i16::MAX;

/// How long record TTLs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ttl {
    /// Fixed, as at c89745d: an acquire's record lives its lease (the
    /// watchdog's 30 s), the unlock latch 10 s, a counting op's record 60 s.
    Fixed,
    /// Derived from the response timeout: at least two tries' windows plus
    /// a tick, `2 * window + 1` ticks (never below the fixed ones).
    Derived,
}

/// The protocol under check: a set of flags, so the same checker runs the
/// old protocol (`Protocol::OLD`, main at c89745d), the new one
/// (`Protocol::NEW`), each old gap on its own, and mutations of the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Protocol {
    /// Its name in traces.
    pub(crate) name: &'static str,
    /// Force release and drain carry an op record (a copy after the first
    /// returns the first outcome). Old: none (gaps 1 and 7).
    pub(crate) op_records: bool,
    /// Record and latch TTLs (gaps 2 and 6: fixed 10 s latch).
    pub(crate) ttl: Ttl,
    /// The lock kind's release deletes the acquire's record and writes a
    /// fresh latch (old fair, read and write locks: gap 5) instead of
    /// keeping the record as its latch.
    pub(crate) release_deletes_record: bool,
    /// A renewal names the attempt of the hold it renews and renews only
    /// while that attempt's record says 'taken' (gap 8).
    pub(crate) renew_checks_attempt: bool,
    /// Windows from the client's monotonic clock (server ms at a reading +
    /// elapsed) rather than its wall clock + an offset (gaps 3 and 4).
    pub(crate) monotonic_window: bool,
    /// A counting/forcing call that fails while its request may be in
    /// flight is settled: its op record set 'undone' if absent, else the
    /// caller gets the recorded outcome (gap 7).
    pub(crate) settle: bool,
    /// Mutation switch: the window prelude's check.
    pub(crate) window_check: bool,
    /// Mutation switch: the scripts' record check (a copy finding its
    /// call's record acts no more).
    pub(crate) record_check: bool,
    /// Mutation switch: undo and settle mark the id 'undone'.
    pub(crate) undo_marks: bool,
    /// An acquire attempt told busy is spent: the acquire script, finding
    /// the lock busy, sets the attempt's record to 'busy' (NX), and a copy
    /// finding 'busy' answers busy and takes nothing. Without it, a try
    /// whose resend was told busy may still have its first copy take the
    /// lock for nobody (the model's finding, `busy_resend_*`).
    pub(crate) busy_spends_attempt: bool,
}

impl Protocol {
    /// Main at c89745d.
    pub(crate) const OLD: Protocol = Protocol {
        name: "old (c89745d)",
        op_records: false,
        ttl: Ttl::Fixed,
        release_deletes_record: false,
        renew_checks_attempt: false,
        monotonic_window: false,
        settle: false,
        window_check: true,
        record_check: true,
        undo_marks: true,
        busy_spends_attempt: false,
    };

    /// The old protocol for a lock kind whose release deletes the record
    /// (fair, read, write at c89745d).
    pub(crate) const OLD_DELETING_KIND: Protocol = Protocol {
        name: "old (c89745d), fair/read/write release",
        release_deletes_record: true,
        ..Protocol::OLD
    };

    /// The new protocol: issue 32's fixes and the busy attempt spent, as
    /// the scripts and the client do them now.
    pub(crate) const NEW: Protocol = Protocol {
        name: "new",
        op_records: true,
        ttl: Ttl::Derived,
        release_deletes_record: false,
        renew_checks_attempt: true,
        monotonic_window: true,
        settle: true,
        window_check: true,
        record_check: true,
        undo_marks: true,
        busy_spends_attempt: true,
    };
}

/// A scheduled clock step (at most one per scenario, at any moment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClockStep {
    /// The client's wall clock jumps forward by this many ticks.
    WallForward(i16),
    /// The server's clock jumps back by this many ticks.
    ServerBack(i16),
}

/// What a thread's program does, one call after another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    /// One acquire attempt (`try_lock`): a busy lock ends the op with no
    /// guard. `watchdog`: the hold is renewed by the watchdog (`lock()`),
    /// else it has a fixed lease (`lock_with_lease`).
    Lock { watchdog: bool },
    /// Release the guard's hold (skipped without a guard).
    Unlock,
    /// `force_unlock`.
    ForceUnlock,
    /// `drain_permits`.
    Drain,
    /// `add_permits(delta)` / a release of permits.
    Add(i8),
}

/// One scenario: the protocol, the programs and the bounds.
#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    /// What it shows.
    pub(crate) name: &'static str,
    pub(crate) protocol: Protocol,
    /// Each thread's program.
    pub(crate) programs: [&'static [Op]; THREADS],
    /// Whose requests the network may duplicate and whose calls may fail.
    pub(crate) faulty: [bool; THREADS],
    /// The client's response timeout, in seconds.
    pub(crate) response_timeout_s: i16,
    /// Time runs from 0 to this tick.
    pub(crate) max_time: i16,
    /// Duplications (a resend after a dropped connection) in all.
    pub(crate) dups: u8,
    /// Calls that return an error (reply lost, second try's connection
    /// dropped) in all.
    pub(crate) fails: u8,
    /// Watchdog renewals in all.
    pub(crate) renewals: u8,
    /// A clock step, if any.
    pub(crate) step: Option<ClockStep>,
    /// The semaphore's permits at the start.
    pub(crate) permits: i8,
}

impl Scenario {
    /// Ticks a client waits for a reply: `ceil(response_timeout / tick)`.
    pub(crate) fn rt_ticks(&self) -> i16 {
        (self.response_timeout_s + TICK_S - 1) / TICK_S
    }

    /// A try's window: `ceil((response_timeout + 25 ms) / tick)`.
    pub(crate) fn window(&self) -> i16 {
        self.response_timeout_s / TICK_S + 1
    }

    /// The longest window any copy can carry after its call's first send:
    /// the derived TTL, `2 * window + 1`.
    fn derived(&self) -> i16 {
        2 * self.window() + 1
    }

    /// TTL of an acquire's record ('taken') and of its 'undone' mark.
    pub(crate) fn record_ttl(&self) -> i16 {
        let lease = 30 / TICK_S;
        match self.protocol.ttl {
            Ttl::Fixed => lease,
            Ttl::Derived => lease.max(self.derived()),
        }
    }

    /// TTL of an unlock latch (the record overwritten with the outcome).
    pub(crate) fn latch_ttl(&self) -> i16 {
        let latch = 10 / TICK_S;
        match self.protocol.ttl {
            Ttl::Fixed => latch,
            Ttl::Derived => latch.max(self.derived()),
        }
    }

    /// TTL of a counting or forcing call's op record.
    pub(crate) fn op_ttl(&self) -> i16 {
        let op = 60 / TICK_S;
        match self.protocol.ttl {
            Ttl::Fixed => op,
            Ttl::Derived => op.max(self.derived()),
        }
    }

    /// The bounds in one line, for the test's output.
    pub(crate) fn bounds(&self) -> String {
        format!(
            "{} threads, programs {:?}, faulty {:?}, response timeout {} s \
             ({} ticks of {} s, window {} ticks), time 0..={} ticks, \
             ≤ {} duplication(s), ≤ {} failed call(s), ≤ {} renewal(s), \
             clock step {:?}, TTLs record/latch/op {}/{}/{} ticks",
            THREADS,
            self.programs,
            self.faulty,
            self.response_timeout_s,
            self.rt_ticks(),
            TICK_S,
            self.window(),
            self.max_time,
            self.dups,
            self.fails,
            self.renewals,
            self.step,
            self.record_ttl(),
            self.latch_ttl(),
            self.op_ttl(),
        )
    }
}

/// A record's value (absent: `Val::None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Val {
    None,
    /// An acquire attempt's record: it took a hold.
    Taken,
    /// Undone (undo) or settled: a late copy is refused.
    Undone,
    /// An acquire attempt told busy (spent): a later copy answers busy.
    Busy,
    /// A call's outcome (a release's latch, a drain's count, ...).
    Out(i8),
}

/// A key with a value and an expiry (server clock: gone once the server's
/// clock reaches `exp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Rec {
    pub(crate) val: Val,
    pub(crate) exp: i16,
}

/// A request, as the script sees its keys and arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Req {
    /// `lock_acquire.lua` (and the other kinds' acquires).
    Acquire { attempt: u8 },
    /// `lock_release.lua`: the hold's attempt `attempt`; `latch`: a fresh
    /// latch id (the deleting kinds') or the attempt's record.
    Release { attempt: u8 },
    /// `lock_force_release.lua`.
    Force,
    /// `semaphore_drain.lua`.
    Drain,
    /// `semaphore_add.lua`.
    Add(i8),
    /// `lock_renew.lua`, for the hold of `attempt`.
    Renew { attempt: u8 },
    /// `lock_undo_acquire.lua` (after `undo_prelude.lua`).
    Undo { attempt: u8 },
    /// `lua/op_settle.lua`: the op record set `u` (undone) if absent.
    Settle,
}

/// A script's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Reply {
    /// "ERR late request": the window check refused it.
    Late,
    /// "ERR late request": its record says undone or released.
    Refused,
    Acquired,
    Busy,
    /// A release's outcome (nil = not held: `None`).
    Released(Option<i8>),
    /// A count (drain: how many taken; add: the new count; force: 1 when
    /// the lock existed).
    Count(i8),
    /// A renewal: whether it renewed.
    Renewed(bool),
    /// An undo: whether it removed a hold.
    Undid(bool),
    /// A settle: the call's recorded outcome, or `None` = marked undone.
    Settled(Option<i8>),
}

/// A request in flight: one copy of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Msg {
    pub(crate) thread: u8,
    /// The call's id (attempt id or op id).
    pub(crate) call: u8,
    /// 1 = the first send, 2 = the resend; 0 = undo/settle.
    pub(crate) copy: u8,
    pub(crate) req: Req,
    /// Window end, server clock (`NO_WINDOW`: none).
    pub(crate) window: i16,
    /// Ghost: the true time the caller's window ends (send + window).
    pub(crate) deadline: i16,
}

/// What a call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Acquire { watchdog: bool },
    Release { attempt: u8 },
    Force,
    Drain,
    Add(i8),
    Renew { attempt: u8 },
}

/// Where a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Phase {
    /// Waiting for the awaited copy's reply.
    Await,
    /// The acquire failed; its undo is on its way.
    Undo,
    /// The call failed; its settle is on its way.
    Settle,
}

/// A call in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Call {
    pub(crate) kind: Kind,
    pub(crate) id: u8,
    pub(crate) tries: u8,
    /// True time the awaited copy was sent.
    pub(crate) sent: i16,
    pub(crate) phase: Phase,
    /// The awaited copy's (or undo's, settle's) reply, once it came.
    pub(crate) reply: Option<Reply>,
}

/// A client thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Thread {
    /// The next op of its program.
    pub(crate) pc: u8,
    /// Its guard: the attempt id of the hold it believes it has.
    pub(crate) guard: Option<u8>,
    /// The guard's hold is renewed by the watchdog.
    pub(crate) watchdog: bool,
    /// A force release broke its hold while that call was in progress (a
    /// force_unlock's documented effect): its guard is void.
    pub(crate) forced: bool,
    /// The program's call in progress.
    pub(crate) call: Option<Call>,
    /// The watchdog's renewal in progress.
    pub(crate) renew: Option<Call>,
}

/// A call's status, for the ghosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Status {
    Unused,
    InProgress,
    Ok,
    Err,
}

/// The whole state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct State {
    /// True time (= the client's monotonic clock), in ticks.
    pub(crate) t: i16,
    /// Server clock = `t + server_skew`.
    pub(crate) server_skew: i16,
    /// Client wall clock = `t + wall_skew`.
    pub(crate) wall_skew: i16,
    /// The lock hash: holder (thread) -> hold count.
    pub(crate) holds: [u8; THREADS],
    /// The semaphore's count.
    pub(crate) sem: i8,
    /// Records by id: attempt records, op records, fresh latches.
    pub(crate) records: [Rec; IDS],
    pub(crate) threads: [Thread; THREADS],
    /// Requests in flight (any may be delivered next: any delay).
    pub(crate) net: Vec<Msg>,
    pub(crate) next_id: u8,
    pub(crate) dups_left: u8,
    pub(crate) fails_left: u8,
    pub(crate) renewals_left: u8,
    pub(crate) step_left: bool,
    /// Ghost: attempts whose hold is counted in `holds` (bit per id).
    pub(crate) live: u32,
    /// Ghost: times each call acted on the server.
    pub(crate) effects: [u8; IDS],
    /// Ghost: each call's status.
    pub(crate) status: [Status; IDS],
    /// Ghost: the semaphore's count as the successful calls say.
    pub(crate) expected: i8,
    /// Ghost: the thread that made each call.
    pub(crate) owners: [u8; IDS],
}

/// The invariants (and transition properties) the checker reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Invariant {
    /// Two threads hold the lock (live guards, neither voided by a force
    /// release in progress).
    TwoHolders,
    /// A live guard's hold is gone from the server (freed by a request it
    /// did not send for it).
    LostHold,
    /// A hold on the server no guard or call accounts for (its thread is
    /// between calls or done).
    OrphanHold,
    /// A call that returned an error acted afterwards.
    ErrorThenEffect,
    /// One call acted twice on the server.
    ActedTwice,
    /// With every call returned, the semaphore's count differs from what
    /// the successful calls say.
    SemaphoreCount,
    /// A renewal renewed a hold other than the one it was sent for.
    RenewedOtherHold,
    /// A copy acted after its caller's window ended (true time), beyond the
    /// stated exception (the server clock's step back, new protocol only).
    WindowStretched,
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Invariant::TwoHolders => "at most one holder: two threads hold the lock",
            Invariant::LostHold => "a live guard's hold was freed by a request not sent for it",
            Invariant::OrphanHold => "no orphan hold: a hold nobody accounts for",
            Invariant::ErrorThenEffect => "a call that returned an error acted afterwards",
            Invariant::ActedTwice => "one call acted twice",
            Invariant::SemaphoreCount => {
                "the semaphore's count differs from what the successful calls say"
            }
            Invariant::RenewedOtherHold => "a renewal renewed a hold it was not sent for",
            Invariant::WindowStretched => "a copy acted after its caller's window ended",
        };
        f.write_str(text)
    }
}

/// One transition, for traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Label {
    /// A thread starts a call (its first copy sent).
    Send { thread: u8, call: Call, window: i16 },
    /// The network delivers a copy; the script runs at this server time.
    Deliver { msg: Msg, server: i16, reply: Reply },
    /// The connection drops (the copy is held by a middlebox or its reply
    /// is lost); the client resends on another connection at once.
    Resend { thread: u8, call: Call, window: i16 },
    /// The call fails (a lost reply, the second try's connection dropped);
    /// an undo or settle is sent if the protocol has one.
    Fail { thread: u8, call: Call },
    /// The thread reads the reply and the call returns.
    Return {
        thread: u8,
        call: Call,
        reply: Reply,
    },
    /// An unlock without a guard does nothing.
    Skip { thread: u8 },
    /// Time passes one tick.
    Tick { t: i16 },
    /// A clock step.
    Step(ClockStep),
}

fn thread_name(thread: u8) -> char {
    (b'A' + thread) as char
}

fn call_name(call: &Call) -> String {
    match call.kind {
        Kind::Acquire { watchdog: true } => format!("lock (attempt #{})", call.id),
        Kind::Acquire { watchdog: false } => {
            format!("lock_with_lease (attempt #{})", call.id)
        }
        Kind::Release { attempt } => {
            format!("unlock #{} (the hold of attempt #{attempt})", call.id)
        }
        Kind::Force => format!("force_unlock #{}", call.id),
        Kind::Drain => format!("drain_permits #{}", call.id),
        Kind::Add(delta) => format!("add_permits({delta}) #{}", call.id),
        Kind::Renew { attempt } => {
            format!("watchdog renewal #{} (of attempt #{attempt})", call.id)
        }
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Label::Send {
                thread,
                call,
                window,
            } => write!(
                f,
                "{} sends {} (copy 1, window ends at server {})",
                thread_name(*thread),
                call_name(call),
                window
            ),
            Label::Deliver { msg, server, reply } => write!(
                f,
                "network delivers {}'s {:?} of call #{} (copy {}, window {}) at server \
                 time {server}: {reply:?}",
                thread_name(msg.thread),
                msg.req,
                msg.call,
                msg.copy,
                if msg.window == NO_WINDOW {
                    "none".to_owned()
                } else {
                    msg.window.to_string()
                }
            ),
            Label::Resend {
                thread,
                call,
                window,
            } => write!(
                f,
                "{}'s connection drops (copy 1 held by a middlebox / its reply lost); \
                 {} resends {} (copy 2, window ends at server {window})",
                thread_name(*thread),
                thread_name(*thread),
                call_name(call)
            ),
            Label::Fail { thread, call } => write!(
                f,
                "{}'s {} fails (reply lost / connection dropped){}",
                thread_name(*thread),
                call_name(call),
                match call.phase {
                    Phase::Undo => "; the client sends its undo (no window)",
                    Phase::Settle => "; the client sends its settle (no window)",
                    Phase::Await => "; the error is returned",
                }
            ),
            Label::Return {
                thread,
                call,
                reply,
            } => write!(
                f,
                "{}'s {} returns ({reply:?})",
                thread_name(*thread),
                call_name(call)
            ),
            Label::Skip { thread } => {
                write!(
                    f,
                    "{} has no guard: its unlock does nothing",
                    thread_name(*thread)
                )
            }
            Label::Tick { t } => write!(f, "tick: true time {t}"),
            Label::Step(ClockStep::WallForward(k)) => {
                write!(f, "the client's wall clock steps forward {} s", k * TICK_S)
            }
            Label::Step(ClockStep::ServerBack(k)) => {
                write!(f, "the server's clock steps back {} s", k * TICK_S)
            }
        }
    }
}

/// A transition's outcome: the label, the next state, and the transition
/// properties it broke.
pub(crate) type Step = (Label, State, Vec<(Invariant, String)>);

/// The model: a scenario's transition relation and invariants.
#[derive(Debug)]
pub(crate) struct Model {
    pub(crate) s: Scenario,
}

impl Model {
    pub(crate) fn initial(&self) -> State {
        let thread = Thread {
            pc: 0,
            guard: None,
            watchdog: false,
            forced: false,
            call: None,
            renew: None,
        };
        State {
            t: 0,
            server_skew: 0,
            wall_skew: 0,
            holds: [0; THREADS],
            sem: self.s.permits,
            records: [Rec {
                val: Val::None,
                exp: 0,
            }; IDS],
            threads: [thread; THREADS],
            net: Vec::new(),
            next_id: 1,
            dups_left: self.s.dups,
            fails_left: self.s.fails,
            renewals_left: self.s.renewals,
            step_left: self.s.step.is_some(),
            live: 0,
            effects: [0; IDS],
            status: [Status::Unused; IDS],
            expected: self.s.permits,
            owners: [0; IDS],
        }
    }

    /// The window end a copy sent now carries, in the server's clock.
    /// Both read the server's clock once, at true time 0 (a pooled
    /// connection's offset; the model's clocks all read 0 then).
    fn window_end(&self, state: &State) -> i16 {
        let base = if self.s.protocol.monotonic_window {
            // Server ms at the reading (0) + monotonic time since (t).
            state.t
        } else {
            // Wall clock now + offset measured against the wall clock (0).
            state.t + state.wall_skew
        };
        base + self.s.window()
    }

    fn request(kind: Kind, id: u8) -> Req {
        match kind {
            Kind::Acquire { .. } => Req::Acquire { attempt: id },
            Kind::Release { attempt } => Req::Release { attempt },
            Kind::Force => Req::Force,
            Kind::Drain => Req::Drain,
            Kind::Add(delta) => Req::Add(delta),
            Kind::Renew { attempt } => Req::Renew { attempt },
        }
    }

    /// Sends a (new) copy of `call` from `thread`; returns the window.
    fn send(&self, state: &mut State, thread: u8, call: &Call) -> i16 {
        let window = self.window_end(state);
        state.net.push(Msg {
            thread,
            call: call.id,
            copy: call.tries,
            req: Self::request(call.kind, call.id),
            window,
            deadline: state.t + self.s.window(),
        });
        window
    }

    /// Starts a call of `kind`: a fresh id, the first copy sent.
    fn start(&self, state: &mut State, thread: u8, kind: Kind) -> Option<(Call, i16)> {
        if usize::from(state.next_id) >= IDS {
            return None;
        }
        let id = state.next_id;
        state.next_id += 1;
        state.status[usize::from(id)] = Status::InProgress;
        state.owners[usize::from(id)] = thread;
        let call = Call {
            kind,
            id,
            tries: 1,
            sent: state.t,
            phase: Phase::Await,
            reply: None,
        };
        let window = self.send(state, thread, &call);
        Some((call, window))
    }

    fn server_now(state: &State) -> i16 {
        state.t + state.server_skew
    }

    fn set(&self, state: &mut State, id: u8, val: Val, ttl: i16) {
        state.records[usize::from(id)] = Rec {
            val,
            exp: Self::server_now(state) + ttl,
        };
    }

    fn get(state: &State, id: u8) -> Val {
        state.records[usize::from(id)].val
    }

    /// Ghost: `call` acted on the server now.
    fn acted(state: &mut State, call: u8, what: &str, broken: &mut Vec<(Invariant, String)>) {
        let i = usize::from(call);
        state.effects[i] += 1;
        if state.effects[i] > 1 {
            broken.push((
                Invariant::ActedTwice,
                format!("call #{call} acted a second time ({what})"),
            ));
        }
        if state.status[i] == Status::Err {
            broken.push((
                Invariant::ErrorThenEffect,
                format!("call #{call} returned an error, then acted ({what})"),
            ));
        }
    }

    /// Removes the holds of thread `h` (count 0): its live attempts go.
    fn clear_live(state: &mut State, h: usize) {
        for id in 0..IDS {
            if state.live & (1 << id) != 0 && usize::from(state.owners[id]) == h {
                state.live &= !(1 << id);
            }
        }
    }

    /// Runs `msg`'s script atomically at the current server time.
    fn deliver(&self, state: &mut State, msg: Msg, broken: &mut Vec<(Invariant, String)>) -> Reply {
        let p = self.s.protocol;
        let now = Self::server_now(state);
        let h = usize::from(msg.thread);
        if p.window_check && msg.window != NO_WINDOW && now > msg.window {
            return Reply::Late;
        }
        // The copy runs: how far past its caller's window (true time)?
        let allowed = if p.monotonic_window {
            -state.server_skew
        } else {
            0
        };
        if msg.window != NO_WINDOW && state.t - msg.deadline > allowed {
            broken.push((
                Invariant::WindowStretched,
                format!(
                    "copy {} of call #{} ran {} tick(s) after its caller's window ended",
                    msg.copy,
                    msg.call,
                    state.t - msg.deadline
                ),
            ));
        }
        let record_found =
            |state: &State, id: u8| p.record_check && Self::get(state, id) != Val::None;
        match msg.req {
            Req::Acquire { attempt } => {
                let free = state.holds.iter().all(|&c| c == 0);
                let mine = state.holds[h] > 0;
                if !(free || mine) {
                    // The attempt is spent: its record set 'busy' (NX).
                    if p.busy_spends_attempt && Self::get(state, attempt) == Val::None {
                        self.set(state, attempt, Val::Busy, self.s.record_ttl());
                    }
                    return Reply::Busy;
                }
                if record_found(state, attempt) {
                    return match Self::get(state, attempt) {
                        Val::Taken if mine => Reply::Acquired,
                        Val::Busy => Reply::Busy,
                        _ => Reply::Refused,
                    };
                }
                self.set(state, attempt, Val::Taken, self.s.record_ttl());
                state.holds[h] += 1;
                state.live |= 1 << attempt;
                Self::acted(state, msg.call, "took a hold", broken);
                Reply::Acquired
            }
            Req::Release { attempt } => {
                // The latch: the attempt's record, or (deleting kinds) a
                // fresh key, which the call's own id stands for.
                let latch = if p.release_deletes_record {
                    msg.call
                } else {
                    attempt
                };
                let done = Self::get(state, latch);
                if p.record_check && done != Val::None && done != Val::Taken {
                    return Reply::Released(match done {
                        Val::Out(v) => Some(v),
                        _ => None,
                    });
                }
                let count = state.holds[h];
                if count == 0 {
                    return Reply::Released(None);
                }
                if p.release_deletes_record {
                    state.records[usize::from(attempt)].val = Val::None;
                }
                let outcome = if count > 1 {
                    state.holds[h] -= 1;
                    state.live &= !(1 << attempt);
                    0
                } else {
                    state.holds[h] = 0;
                    Self::clear_live(state, h);
                    1
                };
                self.set(state, latch, Val::Out(outcome), self.s.latch_ttl());
                Self::acted(state, msg.call, "released a hold", broken);
                Reply::Released(Some(outcome))
            }
            Req::Force => {
                // op_replay: the first outcome, or a settled call refused.
                if p.op_records && record_found(state, msg.call) {
                    return match Self::get(state, msg.call) {
                        Val::Out(v) => Reply::Count(v),
                        _ => Reply::Refused,
                    };
                }
                let existed = state.holds.iter().any(|&c| c > 0);
                if existed {
                    // During its call a force release breaks holds by
                    // design: their guards are void.
                    if state.status[usize::from(msg.call)] == Status::InProgress {
                        for (thread, &count) in state.threads.iter_mut().zip(&state.holds) {
                            if count > 0 {
                                thread.forced = true;
                            }
                        }
                    }
                    state.holds = [0; THREADS];
                    state.live = 0;
                    Self::acted(state, msg.call, "deleted the lock", broken);
                }
                let outcome = i8::from(existed);
                if p.op_records {
                    self.set(state, msg.call, Val::Out(outcome), self.s.op_ttl());
                }
                Reply::Count(outcome)
            }
            Req::Drain => {
                // op_replay: the first outcome, or a settled call refused.
                if p.op_records && record_found(state, msg.call) {
                    return match Self::get(state, msg.call) {
                        Val::Out(v) => Reply::Count(v),
                        _ => Reply::Refused,
                    };
                }
                let value = state.sem;
                if value != 0 {
                    state.sem = 0;
                    Self::acted(state, msg.call, "drained the permits", broken);
                }
                if p.op_records {
                    self.set(state, msg.call, Val::Out(value), self.s.op_ttl());
                }
                Reply::Count(value)
            }
            Req::Add(delta) => {
                // semaphore_add.lua has its op record in both protocols.
                if record_found(state, msg.call) {
                    return Reply::Count(state.sem);
                }
                self.set(state, msg.call, Val::Out(1), self.s.op_ttl());
                state.sem += delta;
                Self::acted(state, msg.call, "added permits", broken);
                Reply::Count(state.sem)
            }
            Req::Renew { attempt } => {
                if p.renew_checks_attempt && Self::get(state, attempt) != Val::Taken {
                    return Reply::Renewed(false);
                }
                if state.holds[h] == 0 {
                    return Reply::Renewed(false);
                }
                if state.live & (1 << attempt) == 0 {
                    broken.push((
                        Invariant::RenewedOtherHold,
                        format!(
                            "renewal #{} for attempt #{attempt} renewed {}'s hold of another attempt",
                            msg.call,
                            thread_name(msg.thread)
                        ),
                    ));
                }
                Reply::Renewed(true)
            }
            Req::Undo { attempt } => {
                let record = Self::get(state, attempt);
                if p.undo_marks {
                    self.set(state, attempt, Val::Undone, self.s.record_ttl());
                }
                if record != Val::Taken || state.holds[h] == 0 {
                    return Reply::Undid(false);
                }
                state.holds[h] -= 1;
                state.live &= !(1 << attempt);
                if state.holds[h] == 0 {
                    Self::clear_live(state, h);
                }
                Reply::Undid(true)
            }
            Req::Settle => match Self::get(state, msg.call) {
                Val::Out(v) => Reply::Settled(Some(v)),
                Val::None => {
                    if p.undo_marks {
                        self.set(state, msg.call, Val::Undone, self.s.op_ttl());
                    }
                    Reply::Settled(None)
                }
                _ => Reply::Settled(None),
            },
        }
    }

    /// Routes a reply to the call waiting for exactly this copy; any other
    /// copy's reply is lost with its connection.
    fn route(state: &mut State, msg: &Msg, reply: Reply) {
        let thread = &mut state.threads[usize::from(msg.thread)];
        for slot in [&mut thread.call, &mut thread.renew] {
            if let Some(call) = slot
                && call.id == msg.call
            {
                let awaited = match call.phase {
                    Phase::Await => msg.copy == call.tries,
                    Phase::Undo | Phase::Settle => msg.copy == 0,
                };
                if awaited {
                    call.reply = Some(reply);
                }
            }
        }
    }

    /// Ends thread `h`'s call `call` with `ok` (the ghosts see it return).
    fn finish(state: &mut State, h: usize, call: &Call, ok: bool, count: Option<i8>) {
        state.status[usize::from(call.id)] = if ok { Status::Ok } else { Status::Err };
        if ok {
            match call.kind {
                Kind::Add(delta) => state.expected += delta,
                Kind::Drain => state.expected -= count.unwrap_or(0),
                _ => {}
            }
        }
        let thread = &mut state.threads[h];
        if matches!(call.kind, Kind::Renew { .. }) {
            thread.renew = None;
        } else {
            thread.call = None;
            thread.pc += 1;
        }
    }

    /// The call's error path: undo (acquire), settle (new protocol), or
    /// the error returned as it is.
    fn fail(&self, state: &mut State, h: usize, call: &Call) -> Option<Call> {
        match call.kind {
            Kind::Acquire { .. } => Some(Call {
                phase: Phase::Undo,
                reply: None,
                ..*call
            }),
            Kind::Force | Kind::Drain | Kind::Add(_) if self.s.protocol.settle => Some(Call {
                phase: Phase::Settle,
                reply: None,
                ..*call
            }),
            _ => {
                Self::finish(state, h, call, false, None);
                None
            }
        }
    }

    fn cleanup_msg(state: &mut State, thread: u8, call: &Call) {
        let req = match call.phase {
            Phase::Undo => Req::Undo { attempt: call.id },
            _ => Req::Settle,
        };
        state.net.push(Msg {
            thread,
            call: call.id,
            copy: 0,
            req,
            window: NO_WINDOW,
            deadline: NO_WINDOW,
        });
    }

    /// Handles the reply of the awaited copy (or undo, settle).
    fn handle(&self, state: &mut State, h: usize, call: &Call, reply: Reply) {
        match (call.phase, call.kind) {
            (Phase::Undo, _) => Self::finish(state, h, call, false, None),
            (Phase::Settle, _) => match reply {
                Reply::Settled(Some(v)) => Self::finish(state, h, call, true, Some(v)),
                _ => Self::finish(state, h, call, false, None),
            },
            (Phase::Await, Kind::Acquire { watchdog }) => match reply {
                Reply::Acquired => {
                    let thread = &mut state.threads[h];
                    thread.guard = Some(call.id);
                    thread.watchdog = watchdog;
                    Self::finish(state, h, call, true, None);
                }
                Reply::Busy => Self::finish(state, h, call, true, None),
                _ => {
                    if let Some(undo) = self.fail(state, h, call) {
                        state.threads[h].call = Some(undo);
                        Self::cleanup_msg(state, h as u8, &undo);
                    }
                }
            },
            (Phase::Await, Kind::Release { .. }) => Self::finish(state, h, call, true, None),
            (Phase::Await, Kind::Renew { .. }) => {
                Self::finish(state, h, call, matches!(reply, Reply::Renewed(_)), None)
            }
            (Phase::Await, _) => match reply {
                Reply::Count(v) => Self::finish(state, h, call, true, Some(v)),
                _ => {
                    if let Some(settle) = self.fail(state, h, call) {
                        state.threads[h].call = Some(settle);
                        Self::cleanup_msg(state, h as u8, &settle);
                    }
                }
            },
        }
    }

    /// Every transition from `state`.
    pub(crate) fn successors(&self, state: &State) -> Vec<Step> {
        let mut out: Vec<Step> = Vec::new();
        // The network: any copy in flight may be delivered next.
        for i in 0..state.net.len() {
            let mut next = state.clone();
            let msg = next.net.remove(i);
            let mut broken = Vec::new();
            let reply = self.deliver(&mut next, msg, &mut broken);
            Self::route(&mut next, &msg, reply);
            out.push((
                Label::Deliver {
                    msg,
                    server: Self::server_now(state),
                    reply,
                },
                next,
                broken,
            ));
        }
        let mut blocks_time = false;
        for h in 0..THREADS {
            let thread = state.threads[h];
            let faulty = self.s.faulty[h];
            for (slot, call) in [(0, thread.call), (1, thread.renew)] {
                let Some(call) = call else { continue };
                if call.phase != Phase::Await {
                    if let Some(reply) = call.reply {
                        let mut next = state.clone();
                        self.handle(&mut next, h, &call, reply);
                        out.push((
                            Label::Return {
                                thread: h as u8,
                                call,
                                reply,
                            },
                            next,
                            Vec::new(),
                        ));
                    }
                    continue;
                }
                // A client waits a response timeout at most.
                if state.t >= call.sent + self.s.rt_ticks() {
                    blocks_time = true;
                }
                if let Some(reply) = call.reply {
                    let mut next = state.clone();
                    self.handle(&mut next, h, &call, reply);
                    out.push((
                        Label::Return {
                            thread: h as u8,
                            call,
                            reply,
                        },
                        next,
                        Vec::new(),
                    ));
                }
                if faulty && state.dups_left > 0 && call.tries == 1 {
                    let mut next = state.clone();
                    next.dups_left -= 1;
                    let resent = Call {
                        tries: 2,
                        sent: state.t,
                        reply: None,
                        ..call
                    };
                    let window = self.send(&mut next, h as u8, &resent);
                    if slot == 0 {
                        next.threads[h].call = Some(resent);
                    } else {
                        next.threads[h].renew = Some(resent);
                    }
                    out.push((
                        Label::Resend {
                            thread: h as u8,
                            call: resent,
                            window,
                        },
                        next,
                        Vec::new(),
                    ));
                }
                // A release is retried with the same latch until it lands
                // (in line, then by the cleanup worker): it never fails.
                if faulty && state.fails_left > 0 && !matches!(call.kind, Kind::Release { .. }) {
                    let mut next = state.clone();
                    next.fails_left -= 1;
                    let mut label = Label::Fail {
                        thread: h as u8,
                        call,
                    };
                    if let Some(cleanup) = self.fail(&mut next, h, &call) {
                        next.threads[h].call = Some(cleanup);
                        Self::cleanup_msg(&mut next, h as u8, &cleanup);
                        label = Label::Fail {
                            thread: h as u8,
                            call: cleanup,
                        };
                    }
                    out.push((label, next, Vec::new()));
                }
            }
            // The watchdog renews a watchdog hold between the thread's calls.
            if thread.call.is_none()
                && thread.renew.is_none()
                && thread.watchdog
                && state.renewals_left > 0
                && let Some(attempt) = thread.guard
            {
                let mut next = state.clone();
                next.renewals_left -= 1;
                if let Some((call, window)) =
                    self.start(&mut next, h as u8, Kind::Renew { attempt })
                {
                    next.threads[h].renew = Some(call);
                    out.push((
                        Label::Send {
                            thread: h as u8,
                            call,
                            window,
                        },
                        next,
                        Vec::new(),
                    ));
                }
            }
            // The next op of its program.
            let program = self.s.programs[h];
            if thread.call.is_none()
                && let Some(&op) = program.get(usize::from(thread.pc))
            {
                let mut next = state.clone();
                let kind = match op {
                    Op::Lock { watchdog } => {
                        next.threads[h].forced = false;
                        Some(Kind::Acquire { watchdog })
                    }
                    // An unlock waits for the renewal in flight.
                    Op::Unlock if thread.renew.is_some() => continue,
                    Op::Unlock => match thread.guard {
                        Some(attempt) => {
                            next.threads[h].guard = None;
                            next.threads[h].watchdog = false;
                            next.threads[h].forced = false;
                            Some(Kind::Release { attempt })
                        }
                        None => None,
                    },
                    Op::ForceUnlock => Some(Kind::Force),
                    Op::Drain => Some(Kind::Drain),
                    Op::Add(delta) => Some(Kind::Add(delta)),
                };
                match kind {
                    None => {
                        next.threads[h].pc += 1;
                        out.push((Label::Skip { thread: h as u8 }, next, Vec::new()));
                    }
                    Some(kind) => {
                        if let Some((call, window)) = self.start(&mut next, h as u8, kind) {
                            next.threads[h].call = Some(call);
                            out.push((
                                Label::Send {
                                    thread: h as u8,
                                    call,
                                    window,
                                },
                                next,
                                Vec::new(),
                            ));
                        }
                    }
                }
            }
        }
        if let Some(step) = self.s.step
            && state.step_left
        {
            let mut next = state.clone();
            next.step_left = false;
            match step {
                ClockStep::WallForward(k) => next.wall_skew += k,
                ClockStep::ServerBack(k) => next.server_skew -= k,
            }
            out.push((Label::Step(step), next, Vec::new()));
        }
        if !blocks_time && state.t < self.s.max_time {
            let mut next = state.clone();
            next.t += 1;
            let now = Self::server_now(&next);
            for rec in &mut next.records {
                if rec.val != Val::None && rec.exp <= now {
                    *rec = Rec {
                        val: Val::None,
                        exp: 0,
                    };
                }
            }
            out.push((Label::Tick { t: next.t }, next, Vec::new()));
        }
        out
    }

    /// The state invariants.
    pub(crate) fn check(&self, state: &State) -> Vec<(Invariant, String)> {
        let mut broken = Vec::new();
        let holding: Vec<usize> = (0..THREADS)
            .filter(|&h| state.threads[h].guard.is_some() && !state.threads[h].forced)
            .collect();
        if holding.len() > 1 {
            broken.push((
                Invariant::TwoHolders,
                format!("threads {holding:?} both hold the lock"),
            ));
        }
        for &h in &holding {
            if state.holds[h] == 0 {
                broken.push((
                    Invariant::LostHold,
                    format!("{}'s guard is live, its hold is gone", thread_name(h as u8)),
                ));
            }
        }
        for h in 0..THREADS {
            let thread = &state.threads[h];
            let believed = u8::from(thread.guard.is_some());
            if thread.call.is_none() && state.holds[h] > believed {
                broken.push((
                    Invariant::OrphanHold,
                    format!(
                        "the server counts {} hold(s) of {}, which is between calls with {} guard(s)",
                        state.holds[h],
                        thread_name(h as u8),
                        believed
                    ),
                ));
            }
        }
        if state.threads.iter().all(|t| t.call.is_none()) && state.sem != state.expected {
            broken.push((
                Invariant::SemaphoreCount,
                format!(
                    "count {} on the server, {} by the successful calls",
                    state.sem, state.expected
                ),
            ));
        }
        broken
    }
}
