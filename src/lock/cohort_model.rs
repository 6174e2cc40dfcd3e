//! An exhaustive interleaving checker for passing a hold between threads
//! of one client (`cohort.rs`): the hash field swap keeps the lock
//! exclusive and reentrant whatever the order of the threads' steps.
//!
//! A small explicit-state model of one client on one reentrant lock, with
//! 2-3 threads and the store. Each step is one of:
//! - a thread's acquire (`acquire.rs`): its field is its current one
//!   ([`field_of`](super::cohort::field_of)); a sibling recorded as the
//!   local owner under another field makes it park at once (unqueued);
//!   else the store decides: free, or held under that very field (a
//!   re-entry), takes it; held under another field queues it (parked,
//!   queued);
//! - a holding thread's reentrant acquire and its release (a hold count);
//! - a holder's outermost release: the pass's offer to the longest-parked
//!   waiter if it is unqueued (`Subscriber::offer_to_adopt`), then, as a
//!   separate step, its resolution (`resolve_pass`: adopted, the two
//!   threads swap fields; or, withdrawn meanwhile, the baton back); or the
//!   release to the store, which wakes every parked waiter to retry;
//! - a parked waiter's wait ending (a timeout): offered, it withdraws;
//! - a woken waiter's retry.
//!
//! Invariants in every state: at most one thread holds; the store's field
//! is the holder's; the holder asks with the field it holds under (so its
//! re-entries hit its hold); no two threads use one field. Depth-first
//! search with a visited set enumerates every reachable state, bounded by
//! each thread's number of acquisitions. The broken rule (the releasing
//! thread keeps its field after a pass) is shown to fail it.

use std::collections::HashSet;

/// What one thread is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Thread {
    /// Not holding, not waiting.
    Idle,
    /// Holds under `field`: `count` 1, then 2 (re-entered), then 3 (the
    /// inner hold released).
    Holding { field: u8, count: u8 },
    /// Parked in a wait (`since`: its park's number); `queued`: its
    /// attempt joined the store's queue.
    Parked { queued: bool, since: u8 },
    /// Chosen by a releasing thread for a pass.
    Offered,
    /// Its wait ended while offered.
    Withdrawn,
    /// Woken by a release to the store: it retries.
    Woken,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    threads: Vec<Thread>,
    /// Acquisitions each thread still makes.
    left: Vec<u8>,
    /// Each thread's current field (`cohort::FIELDS`; its own is its index).
    field: Vec<u8>,
    /// The store's lock: the field holding it and its count.
    store: Option<(u8, u8)>,
    /// The client's local owner record (`local_owner`): a field.
    owner: Option<u8>,
    /// A releasing thread's pass in flight: (releaser, waiter).
    passing: Option<(usize, usize)>,
    /// Orders parks (the longest-parked is offered).
    next_park: u8,
}

/// Whether the releasing thread takes the waiter's field (the rule), or
/// keeps its own (broken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Swap {
    Both,
    WaiterOnly,
}

struct Checker {
    swap: Swap,
    /// Whether to check that no two threads use one field (off: to see
    /// what a broken rule leads to).
    distinct_fields: bool,
    visited: HashSet<State>,
}

impl Checker {
    fn check(&self, state: &State) -> Result<(), String> {
        let holders: Vec<(usize, u8)> = state
            .threads
            .iter()
            .enumerate()
            .filter_map(|(i, t)| match t {
                Thread::Holding { field, .. } => Some((i, *field)),
                _ => None,
            })
            .collect();
        if holders.len() > 1 {
            return Err(format!("two threads hold the lock: {state:?}"));
        }
        if let Some(&(i, field)) = holders.first() {
            if state.store.map(|(f, _)| f) != Some(field) {
                return Err(format!("the store's field is not the holder's: {state:?}"));
            }
            // A pass in flight has not swapped yet: the releaser still asks
            // with the field it passes (it sends nothing meanwhile).
            if state.field[i] != field && state.passing.is_none() {
                return Err(format!("the holder asks with another field: {state:?}"));
            }
        }
        if !self.distinct_fields {
            return Ok(());
        }
        let mut fields = state.field.clone();
        fields.sort_unstable();
        fields.dedup();
        if fields.len() != state.field.len() {
            return Err(format!("two threads use one field: {state:?}"));
        }
        Ok(())
    }

    /// An acquire attempt of thread `i` (first, or a woken retry).
    fn attempt(state: &mut State, i: usize, first: bool) {
        let field = state.field[i];
        if first && state.owner.is_some_and(|owner| owner != field) {
            state.threads[i] = Thread::Parked {
                queued: false,
                since: state.next_park,
            };
            state.next_park += 1;
            return;
        }
        match state.store {
            None => {
                state.store = Some((field, 1));
                state.owner = Some(field);
                state.threads[i] = Thread::Holding { field, count: 1 };
            }
            Some((held, count)) if held == field => {
                // A re-entry by a thread that holds nothing of its own:
                // it now holds another thread's hold.
                state.store = Some((held, count + 1));
                state.threads[i] = Thread::Holding { field, count: 1 };
            }
            Some(_) => {
                state.threads[i] = Thread::Parked {
                    queued: true,
                    since: state.next_park,
                };
                state.next_park += 1;
            }
        }
    }

    fn successors(&self, state: &State) -> Vec<State> {
        let mut next = Vec::new();
        for i in 0..state.threads.len() {
            match state.threads[i] {
                Thread::Idle if state.left[i] > 0 => {
                    let mut s = state.clone();
                    s.left[i] -= 1;
                    Self::attempt(&mut s, i, true);
                    next.push(s);
                }
                Thread::Woken => {
                    let mut s = state.clone();
                    Self::attempt(&mut s, i, false);
                    next.push(s);
                }
                Thread::Holding { field, count } if state.passing.is_none() => {
                    // Re-enter once, then release it.
                    // (`check` holds: it asks with the field it holds
                    // under, so its re-entry is counted on its hold.)
                    if count == 1 {
                        let mut s = state.clone();
                        s.store = s.store.map(|(f, c)| (f, c + 1));
                        s.threads[i] = Thread::Holding { field, count: 2 };
                        next.push(s);
                    } else if count == 2 {
                        let mut s = state.clone();
                        s.store = s.store.map(|(f, c)| (f, c - 1));
                        s.threads[i] = Thread::Holding { field, count: 3 };
                        next.push(s);
                    }
                    if count == 3 || count == 1 {
                        // The outermost release: a pass to the longest-parked
                        // waiter when it is unqueued, else the store.
                        let longest = state
                            .threads
                            .iter()
                            .enumerate()
                            .filter_map(|(j, t)| match t {
                                Thread::Parked { queued, since } => Some((since, j, *queued)),
                                _ => None,
                            })
                            .min();
                        let mut s = state.clone();
                        match longest {
                            Some((_, j, false)) => {
                                s.threads[j] = Thread::Offered;
                                s.passing = Some((i, j));
                            }
                            _ => Self::release_to_store(&mut s, i),
                        }
                        next.push(s);
                    }
                }
                Thread::Parked { .. } => {
                    // Its wait ends: it leaves (no more acquisitions).
                    let mut s = state.clone();
                    s.threads[i] = Thread::Idle;
                    s.left[i] = 0;
                    next.push(s);
                }
                Thread::Offered => {
                    let mut s = state.clone();
                    s.threads[i] = Thread::Withdrawn;
                    s.left[i] = 0;
                    next.push(s);
                }
                _ => {}
            }
        }
        if let Some((i, j)) = state.passing {
            let mut s = state.clone();
            s.passing = None;
            let Thread::Holding { field, .. } = state.threads[i] else {
                return next;
            };
            match state.threads[j] {
                Thread::Offered => {
                    let waiter_field = s.field[j];
                    s.threads[j] = Thread::Holding { field, count: 1 };
                    s.field[j] = field;
                    if self.swap == Swap::Both {
                        s.field[i] = waiter_field;
                    }
                    s.threads[i] = Thread::Idle;
                }
                _ => {
                    // Withdrawn: it waits no more; the releaser releases.
                    if state.threads[j] == Thread::Withdrawn {
                        s.threads[j] = Thread::Idle;
                    }
                    Self::release_to_store(&mut s, i);
                }
            }
            next.push(s);
        }
        next
    }

    fn release_to_store(state: &mut State, i: usize) {
        state.store = None;
        state.owner = None;
        state.threads[i] = Thread::Idle;
        for thread in &mut state.threads {
            if matches!(thread, Thread::Parked { .. }) {
                *thread = Thread::Woken;
            }
        }
    }

    fn dfs(&mut self, state: State) -> Result<(), String> {
        if !self.visited.insert(state.clone()) {
            return Ok(());
        }
        self.check(&state)?;
        for next in self.successors(&state) {
            self.dfs(next)?;
        }
        Ok(())
    }
}

/// Explores every interleaving of `threads` threads making `rounds`
/// acquisitions each; returns the number of states, or the first broken
/// invariant.
fn explore(threads: usize, rounds: u8, swap: Swap, distinct_fields: bool) -> Result<usize, String> {
    let mut checker = Checker {
        swap,
        distinct_fields,
        visited: HashSet::new(),
    };
    let initial = State {
        threads: vec![Thread::Idle; threads],
        left: vec![rounds; threads],
        field: (0..threads).map(|i| i as u8).collect(),
        store: None,
        owner: None,
        passing: None,
        next_park: 0,
    };
    checker.dfs(initial)?;
    Ok(checker.visited.len())
}

#[test]
fn passed_holds_stay_exclusive_and_reentrant_in_every_interleaving() {
    for (threads, rounds) in [(2, 3), (3, 2)] {
        let states = explore(threads, rounds, Swap::Both, true)
            .unwrap_or_else(|broken| panic!("{threads} threads: {broken}"));
        // (592 and 6,705 states when written.)
        assert!(
            states > 500,
            "{threads} threads: only {states} states explored"
        );
    }
}

#[test]
fn a_releaser_that_keeps_its_field_fails_the_checker() {
    let broken = explore(2, 3, Swap::WaiterOnly, true).expect_err("the checker must catch it");
    assert!(
        broken.contains("two threads use one field"),
        "caught as something else: {broken}"
    );
    // What that leads to: its next acquire re-enters the hold it passed.
    let broken = explore(2, 3, Swap::WaiterOnly, false).expect_err("the checker must catch it");
    assert!(
        broken.contains("two threads hold the lock"),
        "caught as something else: {broken}"
    );
}

/// The model's rules, as the code spells them: a change to one of these
/// lines must be checked against the model (and this list updated).
#[test]
fn the_model_is_tied_to_the_code() {
    let ties = [
        (
            include_str!("cohort.rs"),
            "use_field(own, &lock.keys.name, field.into());",
            "the releaser takes the waiter's field",
        ),
        (
            include_str!("cohort.rs"),
            "use_field(own, name, Arc::clone(&hold.renewal.holder.id));",
            "the waiter takes the hold's field",
        ),
        (
            include_str!("../pubsub/handoff.rs"),
            "seat.adopts && !seat.queued && seat.leased == leased",
            "only an unqueued waiter is offered a pass",
        ),
        (
            include_str!("../pubsub/handoff.rs"),
            ".min_by_key(|(_, w)| w.parked)?;",
            "the longest-parked waiter is the one offered",
        ),
        (
            include_str!("acquire.rs"),
            "Some(Sibling::Holds(left)) => First::Park(left),",
            "a sibling recorded under another field makes it park at once",
        ),
    ];
    for (text, token, rule) in ties {
        assert!(text.contains(token), "{rule}: `{token}` is gone");
    }
}
