//! Exceptions: the throw (type, thread, managed stack) and every step of the two-pass handling.
//! .NET 9+ (managed exception handling) may repeat or leave unpaired unwind callbacks, so the
//! agent records each step as it comes and the model does the bookkeeping.

use std::cell::RefCell;

use clrprof_sys::{CallbackResult, ClassID, FunctionID, ObjectID};
use clrprof_trace::{exception_phase, ExceptionCaught, ExceptionPhase, ExceptionThrown};

use crate::profiler::{os_tid, State};

pub fn thrown(s: &State, object: ObjectID) -> CallbackResult {
    let class = s.info.get_class_from_object(object).unwrap_or(0);
    let type_name = s.names.class_name(class).to_string();
    let thread = s.info.get_current_thread_id().unwrap_or(0);
    let stack = if walk_this_throw(s, class) { super::current_stack(s) } else { Vec::new() };
    if !s.config.events {
        push_in_flight();
    }
    s.emit(ExceptionThrown {
        ts: s.now(),
        os_tid: os_tid(),
        thread: thread as u64,
        class: class as u64,
        type_name,
        stack,
    });
    Ok(())
}

/// Throws of one type whose stacks are always walked; after that, one in `WALK_EVERY`.
const WALK_FIRST: u32 = 32;
const WALK_EVERY: u32 = 100;

/// Walking the stack is most of the cost of recording a throw (about 5 µs on .NET 10): walk the
/// first throws of each exception type, then a regular sample. Counts stay exact: the throw site
/// comes from the first pass (`ExceptionCaught.site`).
fn walk_this_throw(s: &State, class: ClassID) -> bool {
    let Ok(mut m) = s.events.throws.lock() else { return true };
    let n = m.entry(class).or_insert(0);
    *n = n.saturating_add(1);
    *n <= WALK_FIRST || *n % WALK_EVERY == 0
}

/// Handling steps of one exception in flight, counted on its thread.
#[derive(Clone, Copy, Default)]
struct Steps {
    /// The first function searched: the throwing one.
    site: u64,
    search: u32,
    filters: u32,
    unwind: u32,
    finallies: u32,
}

thread_local! {
    /// Exceptions in flight on this thread, innermost last (a `finally` or filter may throw again).
    static IN_FLIGHT: RefCell<Vec<Steps>> = const { RefCell::new(Vec::new()) };
}

/// Deepest nesting of exceptions in flight tracked per thread.
const MAX_IN_FLIGHT: usize = 64;

pub fn phase(s: &State, phase: u8, function: FunctionID) -> CallbackResult {
    if s.config.events {
        // The event log wants every step with its time.
        s.emit(ExceptionPhase { ts: s.now(), os_tid: os_tid(), phase, function: function as u64 });
        return Ok(());
    }
    // Otherwise count the steps on the thread and write one record per caught exception.
    let caught = IN_FLIGHT
        .try_with(|f| {
            let mut f = f.borrow_mut();
            match phase {
                exception_phase::CATCHER_ENTER => return f.pop().or(Some(Steps::default())),
                _ => {
                    if let Some(top) = f.last_mut() {
                        match phase {
                            exception_phase::SEARCH_ENTER => {
                                if top.search == 0 {
                                    top.site = function as u64;
                                }
                                top.search += 1
                            }
                            exception_phase::FILTER_ENTER => top.filters += 1,
                            exception_phase::UNWIND_ENTER => top.unwind += 1,
                            exception_phase::FINALLY_ENTER => top.finallies += 1,
                            _ => {}
                        }
                    }
                }
            }
            None
        })
        .ok()
        .flatten();
    if let Some(st) = caught {
        s.emit(ExceptionCaught {
            ts: s.now(),
            os_tid: os_tid(),
            function: function as u64,
            site: st.site,
            search_frames: st.search,
            filters: st.filters,
            unwind_frames: st.unwind,
            finallies: st.finallies,
        });
    }
    Ok(())
}

/// A new exception is in flight on this thread.
fn push_in_flight() {
    let _ = IN_FLIGHT.try_with(|f| {
        let mut f = f.borrow_mut();
        if f.len() >= MAX_IN_FLIGHT {
            f.remove(0);
        }
        f.push(Steps::default());
    });
}
