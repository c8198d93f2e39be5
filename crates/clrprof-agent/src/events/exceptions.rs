//! Exceptions: the throw (type, thread, managed stack) and every step of the two-pass handling.
//! .NET 9+ (managed exception handling) may repeat or leave unpaired unwind callbacks, so the
//! agent records each step as it comes and the model does the bookkeeping.
//!
//! With `COR_PRF_MONITOR_EXCEPTIONS` the runtime calls the profiler for every frame each pass
//! visits; on .NET 10 that costs about 2–3 µs per exception even when the callbacks return at
//! once, +35–45% on a loop that only throws. So unless exact mode is asked for, a rate limit
//! (`Limiter`) observes every exception up to a budget and, in an exception storm, pauses the
//! callbacks and resumes them for short sampling windows (trace-format.md, `ExceptionMonitoring`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use clrprof_sys::{monitor, CallbackResult, ClassID, FunctionID, ObjectID};
use clrprof_trace::{
    exception_monitoring as mode, exception_phase, ExceptionCaught, ExceptionCount, ExceptionMonitoring,
    ExceptionPhase, ExceptionThrown,
};

use super::exc_counts::ExceptionCountsState;
use super::gc::GcState;
use crate::context::Context;
use crate::os::os_tid;
use crate::writer::Writer;

const BURST: f64 = mode::BURST as f64;
const RATE_PER_SEC: f64 = mode::RATE_PER_SEC as f64;
const WINDOW_NS: u64 = mode::WINDOW_NS;
const PAUSE_NS: u64 = mode::PAUSE_NS;

/// What the exception recorder fills (borrowed from `super::Events`).
pub(crate) struct Recorder<'a> {
    pub(crate) limiter: &'a Limiter,
    /// Throws seen per exception type (to sample throw stacks).
    pub(crate) throws: &'a Mutex<std::collections::HashMap<ClassID, u32>>,
    pub(crate) exception_counts: &'a ExceptionCountsState,
    /// Tells when an exception object's address may name another object (a GC ran).
    pub(crate) gc: &'a GcState,
}

/// The exception storm rate limit: a token bucket on observed throws, checked on the writer
/// thread's tick, which switches `COR_PRF_MONITOR_EXCEPTIONS` off and on (a mutable flag).
#[derive(Default)]
pub(crate) struct Limiter {
    /// Throws seen by the `ExceptionThrown` callback.
    observed: AtomicU64,
    /// Throws counted from the runtime's `ExceptionThrown_V1` events (every one, paused or not),
    /// and the count last written.
    pub(crate) runtime_thrown: AtomicU64,
    /// Of those, the ones flagged as rethrows.
    pub(crate) runtime_rethrown: AtomicU64,
    runtime_written: AtomicU64,
    /// Bumped each time the callbacks come back: steps of an exception thrown in an earlier epoch
    /// were partly missed, so its catch is not reported.
    epoch: AtomicU32,
    ctl: Mutex<Control>,
}

#[derive(Default)]
struct Control {
    started: bool,
    disabled: bool,
    mode: u8,
    tokens: f64,
    last_ts: u64,
    last_observed: u64,
    mode_since: u64,
    window_observed: u64,
}

impl Limiter {
    /// One step of the rate limit (writer thread, before each flush).
    pub(crate) fn tick(&self, s: &Context, ev: &Recorder, w: &Writer) {
        // Rethrows are counted before their throw event's total (a reader never sees more
        // rethrows than throws).
        let rethrown = self.runtime_rethrown.load(Ordering::Relaxed);
        let thrown = self.runtime_thrown.load(Ordering::Relaxed);
        if self.runtime_written.swap(thrown, Ordering::Relaxed) != thrown {
            w.write_now(&[ExceptionCount { ts: s.now(), thrown, rethrown: rethrown.min(thrown) }.into()]);
        }
        let Ok(mut c) = self.ctl.lock() else { return };
        if c.disabled {
            return;
        }
        let now = s.now();
        let observed = self.observed.load(Ordering::Relaxed);
        if !c.started {
            *c = Control { started: true, tokens: BURST, last_ts: now, mode_since: now, ..Control::default() };
        }
        let seen = observed.saturating_sub(c.last_observed) as f64;
        let dt = now.saturating_sub(c.last_ts) as f64 / 1e9;
        c.last_observed = observed;
        c.last_ts = now;
        let next = match c.mode {
            mode::FULL => {
                c.tokens = (c.tokens + RATE_PER_SEC * dt).min(BURST) - seen;
                (c.tokens < 0.0).then_some(mode::PAUSED)
            }
            mode::PAUSED => (now.saturating_sub(c.mode_since) >= PAUSE_NS).then_some(mode::WINDOW),
            _ => {
                let window = now.saturating_sub(c.mode_since);
                if window < WINDOW_NS {
                    None
                } else {
                    let rate = observed.saturating_sub(c.window_observed) as f64 / (window as f64 / 1e9);
                    if rate <= RATE_PER_SEC {
                        // The storm is over: full detail again, with a second's worth of budget.
                        c.tokens = RATE_PER_SEC;
                        Some(mode::FULL)
                    } else {
                        Some(mode::PAUSED)
                    }
                }
            }
        };
        let Some(next) = next else { return };
        let callbacks_on = next != mode::PAUSED;
        if !callbacks_on {
            // The catches that end the threads' exception dispatches will not be seen.
            crate::sampler::slot::clear_exception_activity();
        }
        if let Err(e) = set_callbacks(s, callbacks_on) {
            crate::log_warn!(
                "cannot switch exception callbacks {}: {e}; every exception stays observed",
                if callbacks_on { "on" } else { "off" }
            );
            c.disabled = true;
            if !callbacks_on {
                return;
            }
        }
        if callbacks_on {
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
        ev.exception_counts.next_generation();
        c.mode = next;
        c.mode_since = now;
        c.window_observed = observed;
        // Written at once, ahead of the records still in the threads' buffers: a reader that meets
        // it knows the mode of every exception it reads afterwards by comparing timestamps.
        w.write_now(&[ExceptionMonitoring { ts: now, mode: next, observed }.into()]);
        crate::log_info!(
            "exception callbacks {} after {observed} throws",
            match next {
                mode::PAUSED => "paused",
                mode::WINDOW => "resumed for a sampling window",
                _ => "on for every exception",
            }
        );
    }
}

fn set_callbacks(s: &Context, on: bool) -> clrprof_sys::HrResult<()> {
    let (low, high) = s.info.get_event_mask2()?;
    let low = if on { low | monitor::EXCEPTIONS } else { low & !monitor::EXCEPTIONS };
    s.info.set_event_mask2(low, high)
}

/// Exception objects thrown lately on this thread, and the GC epoch they were recorded in.
struct Recent {
    objects: [ObjectID; RECENT],
    next: usize,
    epoch: u64,
}

const RECENT: usize = 8;

thread_local! {
    static RECENT_THROWS: RefCell<Recent> = const { RefCell::new(Recent { objects: [0; RECENT], next: 0, epoch: 0 }) };
}

/// Whether `object` is thrown again: the same object was thrown or caught on this thread with no
/// garbage collection since (an address names one object between two GCs; a GC may move it or
/// reuse its memory). `throw;` rethrows the object its catch received, whose address is noted at
/// the catch (`caught_object`); a rethrow with a GC between the catch and the rethrow counts as a
/// new throw. Remembers `object` either way.
fn is_rethrow(ev: &Recorder, object: ObjectID) -> bool {
    remember(ev, object)
}

/// The object a `catch` received (`ExceptionCatcherEnter`), at its current address.
pub(crate) fn caught_object(ev: &Recorder, object: ObjectID) {
    remember(ev, object);
}

/// Notes `object` among the thread's recent exception objects; whether it was there already.
fn remember(ev: &Recorder, object: ObjectID) -> bool {
    if object == 0 {
        return false;
    }
    let epoch = ev.gc.epoch.load(Ordering::Acquire);
    RECENT_THROWS
        .try_with(|r| {
            let Ok(mut r) = r.try_borrow_mut() else { return false };
            if r.epoch != epoch {
                *r = Recent { objects: [0; RECENT], next: 0, epoch };
            }
            if r.objects.contains(&object) {
                return true;
            }
            let at = r.next;
            r.objects[at] = object;
            r.next = (at + 1) % RECENT;
            false
        })
        .unwrap_or(false)
}

pub(crate) fn thrown(s: &Context, ev: &Recorder, object: ObjectID) -> CallbackResult {
    let rethrow = is_rethrow(ev, object);
    let class = s.info.get_class_from_object(object).unwrap_or(0);
    let type_name = s.names.class_name(class);
    let thread = s.info.get_current_thread_id().unwrap_or(0);
    let stack = if walk_this_throw(ev, class) { super::stack::current_stack(s) } else { Vec::new() };
    ev.limiter.observed.fetch_add(1, Ordering::Relaxed);
    let epoch = ev.limiter.epoch.load(Ordering::Acquire);
    if !s.config.every_exception() {
        // Counted in the agent (`exc_counts`) unless it stays in flight.
        let t = super::exc_counts::Throw {
            ts: s.now(),
            os_tid: os_tid(),
            thread: thread as u64,
            class: class as u64,
            type_name,
            stack,
            epoch,
            rethrow,
        };
        if let Some(r) = ev.exception_counts.thrown(t) {
            s.emit(r);
        }
        return Ok(());
    }
    if !s.config.events {
        push_in_flight(epoch);
    }
    s.emit(ExceptionThrown {
        ts: s.now(),
        os_tid: os_tid(),
        thread: thread as u64,
        class: class as u64,
        type_name: type_name.to_string(),
        stack,
        rethrow,
    });
    Ok(())
}

/// Throws of one type whose stacks are always walked; after that, one in `WALK_EVERY`.
const WALK_FIRST: u32 = 32;
const WALK_EVERY: u32 = 100;

/// Walking the stack is most of the cost of recording a throw (about 5 µs on .NET 10): walk the
/// first throws of each exception type, then a regular sample. Counts stay exact: the throw site
/// comes from the first pass (`ExceptionCaught.site`).
fn walk_this_throw(ev: &Recorder, class: ClassID) -> bool {
    let Ok(mut m) = ev.throws.lock() else { return true };
    let n = m.entry(class).or_insert(0);
    *n = n.saturating_add(1);
    *n <= WALK_FIRST || *n % WALK_EVERY == 0
}

/// Handling steps of one exception in flight, counted on its thread.
#[derive(Clone, Copy, Default)]
struct Steps {
    /// `Limiter::epoch` at the throw.
    epoch: u32,
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

pub(crate) fn phase(s: &Context, ev: &Recorder, phase: u8, function: FunctionID) -> CallbackResult {
    if s.config.events {
        // The event log wants every step with its time.
        s.emit(ExceptionPhase { ts: s.now(), os_tid: os_tid(), phase, function: function as u64 });
        return Ok(());
    }
    let epoch = ev.limiter.epoch.load(Ordering::Acquire);
    if !s.config.every_exception() {
        if let Some(r) = ev.exception_counts.phase(s.now(), os_tid(), phase, function as u64, epoch) {
            s.emit(r);
        }
        return Ok(());
    }
    // Otherwise count the steps on the thread and write one record per caught exception.
    let caught = IN_FLIGHT
        .try_with(|f| {
            let mut f = f.borrow_mut();
            match phase {
                exception_phase::CATCHER_ENTER => {
                    return match f.pop() {
                        // Thrown before the callbacks were last paused: its steps are incomplete.
                        Some(st) if st.epoch != epoch => None,
                        Some(st) => Some(st),
                        // A catch whose throw was not seen (callbacks paused at the time) is not
                        // reported; without a rate limit it still is, with no steps.
                        None if epoch != 0 => None,
                        None => Some(Steps::default()),
                    };
                }
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
fn push_in_flight(epoch: u32) {
    let _ = IN_FLIGHT.try_with(|f| {
        let mut f = f.borrow_mut();
        if f.len() >= MAX_IN_FLIGHT {
            f.remove(0);
        }
        f.push(Steps { epoch, ..Steps::default() });
    });
}
