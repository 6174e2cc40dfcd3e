//! Histories of the counting primitives and the fair lock's queue, and
//! their checks (tests/fault_suite.rs; the lock checks are in
//! tests/common/history.rs).
//!
//! Every interval here is what the client saw, which lies inside what the
//! server did: a permit is recorded from when `acquire` returned (the
//! server granted it before) to when `release` was called (the server
//! frees it after), or to its lease's end counted from when `acquire` was
//! called. So more than N recorded permits at once means more than N were
//! granted at once: the check cannot blame the machine's speed.
//!
//! - [`check_permits`]: never more than `permits` held at once;
//! - [`check_fifo`]: a fair lock's waiter that was in the queue ahead of
//!   another, and still waiting, is not overtaken by it;
//! - [`check_latch`]: no waiter is released before the count can have
//!   reached 0.

use super::history::{Excuse, Verdict, ms_between};

/// One permit (or several, `count`) held from `enter_ns` to `until_ns`.
#[derive(Debug, Clone)]
pub struct PermitHold {
    pub who: String,
    pub count: u64,
    /// When `acquire` returned.
    pub enter_ns: u64,
    /// When `release` was called, or the lease's end counted from when
    /// `acquire` was called, whichever is earlier.
    pub until_ns: u64,
}

/// Never more than `permits` held at once; an excess is excused only while a
/// fault window is open (the interval itself: a fault can make the library
/// lose track of a grant, never widen the window).
pub fn check_permits(holds: &[PermitHold], permits: u64, excuses: &[Excuse]) -> Verdict {
    let mut verdict = Verdict::default();
    // Events: releases sort before grants at the same instant.
    let mut events: Vec<(u64, i64, &PermitHold)> = Vec::new();
    for h in holds.iter().filter(|h| h.until_ns > h.enter_ns) {
        events.push((h.enter_ns, 1, h));
        events.push((h.until_ns, -1, h));
    }
    events.sort_by_key(|(at, delta, _)| (*at, *delta));
    let mut held: i64 = 0;
    let mut holders: Vec<&PermitHold> = Vec::new();
    for (at, delta, h) in events {
        if delta < 0 {
            held -= h.count as i64;
            holders.retain(|x| !std::ptr::eq(*x, h));
            continue;
        }
        held += h.count as i64;
        holders.push(h);
        if held > permits as i64 {
            let text = format!(
                "over-granted: {held} permits of {permits} held at {at}: {}",
                holders
                    .iter()
                    .map(|x| format!("{} x{} [{} .. {}]", x.who, x.count, x.enter_ns, x.until_ns))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let excuse = excuses.iter().find(|e| e.from_ns <= at && at <= e.to_ns);
            match excuse {
                Some(e) => verdict.excused.push(format!("{text} (during {})", e.why)),
                None => verdict.violations.push(text),
            }
        }
    }
    verdict
}

/// One call of a fair lock's `try_lock_for`.
#[derive(Debug, Clone)]
pub struct FairWait {
    /// The holder id (`client.current_holder_id()` of the waiting thread),
    /// as it appears in the queue.
    pub who: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// When it got the lock (`None`: the call timed out or failed).
    pub enter_ns: Option<u64>,
}

/// One poll of the fair lock's queue: when it was sent (so it ran on the
/// server after anything that returned before), when its reply came (it
/// ran before anything sent after), and the ids, head first.
#[derive(Debug, Clone)]
pub struct QueuePoll {
    pub sent_ns: u64,
    pub done_ns: u64,
    pub queue: Vec<String>,
    /// The queued ids already gone by the server's clock when polled: their
    /// slot deadline, or their direct mark's live-until, had passed. The
    /// next script that looks evicts them (lazily: a freeze of the server
    /// makes them gone while nothing runs, and the poll right after it still
    /// shows them in place), so such a one is ahead of nobody.
    pub gone: Vec<String>,
    /// Per queued id, what the poll read (slot and mark time left): for a
    /// failure's report only.
    pub detail: String,
}

/// FIFO across waiters: `b` must not get the lock while `a`, ahead of it in
/// the queue, stays queued: a poll during `a`'s call showed `a` live (not
/// [`QueuePoll::gone`]) with `b` behind it (or absent, the poll done before
/// `b` even asked), and from then through the first poll sent after `b`
/// entered every poll shows `a` live, never further back (so not evicted
/// and queued again), while `a`'s call still runs. An overtaking is excused
/// only when a fault window that hit `a` itself ([`Excuse::hit`]: a fault
/// of the server or of every connection, or of `a`'s own request) is open
/// between that first poll and `b` entering.
pub fn check_fifo(waits: &[FairWait], polls: &[QueuePoll], excuses: &[Excuse]) -> Verdict {
    let mut verdict = Verdict::default();
    let position = |poll: &QueuePoll, who: &str| poll.queue.iter().position(|id| id == who);
    for b in waits {
        let Some(b_enter) = b.enter_ns else {
            continue;
        };
        for a in waits {
            if a.who == b.who
                || a.start_ns >= b_enter
                || a.end_ns <= b_enter
                || a.enter_ns.is_some_and(|e| e <= b_enter)
            {
                continue;
            }
            // Polls during a's call, up to the first one sent after b entered.
            let during: Vec<&QueuePoll> = polls
                .iter()
                .filter(|p| a.start_ns <= p.sent_ns && p.sent_ns <= a.end_ns)
                .collect();
            let Some(after) = during.iter().position(|p| p.sent_ns >= b_enter) else {
                continue;
            };
            // The first poll (before b entered) with a ahead of b.
            let gone = |p: &QueuePoll| p.gone.contains(&a.who);
            let Some(first) = during[..after].iter().position(|p| {
                !gone(p)
                    && position(p, &a.who).is_some_and(|pa| match position(p, &b.who) {
                        Some(pb) => pa < pb,
                        None => p.done_ns < b.start_ns,
                    })
            }) else {
                continue;
            };
            let mut stayed = true;
            let mut last = usize::MAX;
            for p in &during[first..=after] {
                match position(p, &a.who) {
                    Some(pa) if pa <= last && !gone(p) => last = pa,
                    _ => {
                        stayed = false;
                        break;
                    }
                }
            }
            if !stayed {
                continue;
            }
            let ahead_ns = during[first].sent_ns;
            let text = format!(
                "FIFO broken: {} entered at {b_enter} while {} was ahead of it in the queue \
                 (seen {:.1} ms before) and still queued {:.1} ms after (its call ran on until \
                 {}, got it: {:?})",
                b.who,
                a.who,
                ms_between(ahead_ns, b_enter),
                ms_between(b_enter, during[after].sent_ns),
                a.end_ns,
                a.enter_ns
            );
            // Only a fault that hit a (its own request held, its
            // connection killed, the server frozen) can cost a its turn: a
            // fault of another waiter's request excuses nothing here.
            let excuse = excuses
                .iter()
                .find(|e| e.from_ns <= b_enter && ahead_ns <= e.to_ns && e.hit(&a.who));
            match excuse {
                Some(e) => verdict.excused.push(format!("{text} (during {})", e.why)),
                None => verdict.violations.push(text),
            }
        }
    }
    verdict
}

/// One latch call: a `count_down` (start and end), or a waiter's `wait_for`
/// that returned true (released) at `end_ns`.
#[derive(Debug, Clone)]
pub struct LatchCall {
    pub who: String,
    pub count_down: bool,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// No waiter released before the count could have reached 0: the count of
/// `count` reaches 0 no earlier than the `count`-th earliest start of a
/// `count_down` call (each acts after it starts, and a failed one may have
/// acted too).
pub fn check_latch(calls: &[LatchCall], count: usize) -> Verdict {
    let mut verdict = Verdict::default();
    let mut starts: Vec<u64> = calls
        .iter()
        .filter(|c| c.count_down)
        .map(|c| c.start_ns)
        .collect();
    starts.sort_unstable();
    let zero_ns = starts.get(count.saturating_sub(1)).copied();
    for w in calls.iter().filter(|c| !c.count_down) {
        if zero_ns.is_none_or(|z| w.end_ns < z) {
            verdict.violations.push(format!(
                "latch opened early: {} released at {} but the count of {count} could reach 0 \
                 only at {zero_ns:?} ({} count-downs started)",
                w.who,
                w.end_ns,
                starts.len()
            ));
        }
    }
    verdict
}
