//! Where the runtime keeps a thread's current EventSource activity id, found at run time, so
//! that the CPU sampler's signal handler can copy it beside each sample (`record --async`).
//!
//! CoreCLR keeps the id in the native `Thread` object (`Thread::m_activityId`): EventPipe reads
//! it there for an event written without an explicit id (`ep_rt_thread_get_activity_id_handle`
//! is `GetThread()`, `ep_rt_thread_get_activity_id_cref` is `Thread::GetActivityId()`), and on
//! Linux `EventSource.CurrentThreadActivityId` is that same field (EventSource's activity control
//! goes through EventPipe). With TplEventSource's `TasksFlowActivityIds` on, the runtime's
//! activity tracker sets it whenever a thread runs code of another request (the execution
//! context's activity is restored). A profiler `ThreadID` is the `Thread*`.
//!
//! The field's offset differs between runtime versions and builds, so it is not hard-coded: it is
//! found from the task events (`TplEventSource`), which EventPipe delivers synchronously on the
//! thread that wrote them, with the thread's activity id (the in-process session passes no event
//! thread: the calling thread's `ThreadID` is asked for). For an event with a non-zero id, the
//! first [`SCAN_BYTES`] of that thread's
//! `Thread` object are read (through the kernel, so an unmapped page fails the read instead of
//! the process) and every 8-aligned place holding the id is a candidate. Later events confirm or
//! contradict each candidate; one is taken once it held [`NEED_IDS`] distinct ids on
//! [`NEED_THREADS`] threads and never differed from an event's id, and the search gives up after
//! [`MAX_EVENTS`] events without such a candidate, or after [`MAX_NOWHERE`] events when no id was
//! ever found in the object. .NET 10 keeps the id in `Thread` (found at offset 704 in 10.0.12);
//! .NET 8 and 9 keep it in EventPipe's own per-thread state (`EventPipeThread`, reached through a
//! thread-local of the runtime's), which no profiler handle leads to.
//!
//! There (runtime major version below 10) the search does not run: TplEventSource's
//! `DebugActivityId` keyword (0x40000) is asked too, and `EventSource.SetCurrentThreadActivityId`
//! (which the activity tracker calls whenever a thread's id changes) writes `SetActivityId` (event
//! 25, payload: the new id as a GUID) just before it sets the id. The event is delivered on that
//! thread, which keeps the id in its sampling slot ([`crate::sampler::slot::set_flow_id`]) for its
//! signal handler. An `ActivityOffset` record says what was used (offset `u32::MAX`: the events;
//! 0: nothing found, the samples carry no activity id — nothing is guessed).
//!
//! Cost: until the search ends, each task event takes a lock and a 4 KiB read; after it, one
//! atomic load. From events: each `SetActivityId` costs the agent a slot lookup (thread-local)
//! and four stores; the agent measures its callback's time for those events and logs the mean at
//! the end (`--log`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use clrprof_trace::ActivityOffset;

use super::providers::Delivered;
use crate::context::Context;
use crate::log_info;
use crate::os::{os_tid, read_own_memory};
use crate::sampler::slot::{set_flow_id, slot_of_thread, FLOW_FROM_EVENTS, FLOW_OFFSET};

/// Bytes of a `Thread` object searched for the activity id.
pub(crate) const SCAN_BYTES: usize = 4096;
/// Distinct activity ids a candidate must have held.
pub(crate) const NEED_IDS: u32 = 8;
/// Distinct threads it must have held them on.
pub(crate) const NEED_THREADS: u32 = 2;
/// Events looked at before the search gives up.
pub(crate) const MAX_EVENTS: u32 = 5000;
/// Events whose id is nowhere in the object before the search gives up, when no event's id ever
/// was (a runtime that keeps the id elsewhere: .NET 8 and 9 keep it in EventPipe's own per-thread
/// state, which the profiling API does not reach).
pub(crate) const MAX_NOWHERE: u32 = 200;

/// One place of the `Thread` object that may hold the activity id.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Candidate {
    pub(crate) offset: usize,
    pub(crate) matches: u32,
    pub(crate) mismatches: u32,
    ids: Vec<u128>,
    threads: Vec<usize>,
}

impl Candidate {
    fn proven(&self) -> bool {
        self.mismatches == 0 && self.ids.len() as u32 >= NEED_IDS && self.threads.len() as u32 >= NEED_THREADS
    }
}

/// The search's state: pure, so that it is tested without a runtime.
#[derive(Debug, Default)]
pub(crate) struct Search {
    pub(crate) candidates: Vec<Candidate>,
    pub(crate) events: u32,
    /// Events whose id was nowhere in the object, and whether any event's id was somewhere.
    nowhere: u32,
    seen: bool,
}

/// What an event told the search.
#[derive(Debug, PartialEq)]
pub(crate) enum Outcome {
    Searching,
    Found(Candidate),
    GaveUp,
}

impl Search {
    /// Takes one event: `id` is the event's activity id, `thread` the writer's `Thread*`, `bytes`
    /// the start of that `Thread` object as read now.
    pub(crate) fn observe(&mut self, id: u128, thread: usize, bytes: &[u8]) -> Outcome {
        self.events += 1;
        let at = |o: usize| bytes.get(o..o + 16).map(|b| u128::from_le_bytes(b.try_into().unwrap()));
        if self.candidates.iter().all(|c| c.mismatches > 0) {
            // Nothing alive: start again from the places holding this id (the vtable at 0 is never
            // one).
            self.candidates = (8..bytes.len().saturating_sub(15))
                .step_by(8)
                .filter(|&o| at(o) == Some(id))
                .map(|offset| Candidate { offset, ..Default::default() })
                .collect();
            if self.candidates.is_empty() {
                self.nowhere += 1;
                if !self.seen && self.nowhere >= MAX_NOWHERE {
                    return Outcome::GaveUp;
                }
                return Outcome::Searching;
            }
            self.seen = true;
        }
        for c in &mut self.candidates {
            if at(c.offset) == Some(id) {
                c.matches += 1;
                if !c.ids.contains(&id) && c.ids.len() < NEED_IDS as usize {
                    c.ids.push(id);
                }
                if !c.threads.contains(&thread) && c.threads.len() < NEED_THREADS as usize {
                    c.threads.push(thread);
                }
            } else {
                c.mismatches += 1;
            }
        }
        // The earliest place proven (a second copy of the id, if any, came later in the object).
        if let Some(c) = self.candidates.iter().find(|c| c.proven()) {
            return Outcome::Found(c.clone());
        }
        if self.events >= MAX_EVENTS {
            return Outcome::GaveUp;
        }
        Outcome::Searching
    }

    /// The candidate with the most matches (for the record when the search gives up).
    fn best(&self) -> Option<&Candidate> {
        self.candidates.iter().max_by_key(|c| (c.mismatches == 0, c.matches))
    }
}

/// TplEventSource's `DebugActivityId` keyword: `SetActivityId` events.
pub(crate) const KEYWORD_DEBUG_ACTIVITY_ID: u64 = 0x40000;
/// `SetActivityId`'s event id (TplEventSource.cs): payload {Guid NewId}.
pub(crate) const EVENT_SET_ACTIVITY_ID: u32 = 25;
/// `ActivityOffset::offset` when the ids come from `SetActivityId` events.
pub(crate) const OFFSET_FROM_EVENTS: u32 = u32::MAX;

/// Whether a runtime of this major version keeps the activity id out of `Thread`, so that the
/// samples take it from `SetActivityId` events.
pub(crate) fn from_events(runtime_major: u16) -> bool {
    runtime_major < 10
}

/// Makes the signal handlers copy the ids of `SetActivityId` events (before the session starts).
pub(crate) fn use_events() {
    DONE.store(true, Ordering::Relaxed);
    FLOW_OFFSET.store(FLOW_FROM_EVENTS, Ordering::Release);
}

/// Says in the trace that the samples' ids come from `SetActivityId` events (the session started).
pub(crate) fn record_events(s: &Context) {
    log_info!("activity id of CPU samples: from TplEventSource's SetActivityId events");
    s.emit(ActivityOffset { ts: s.now(), offset: OFFSET_FROM_EVENTS, matches: 0, threads: 0, mismatches: 0 });
}

/// `SetActivityId` events handled, and the nanoseconds the agent's callback spent on them.
static SET_EVENTS: AtomicU64 = AtomicU64::new(0);
static SET_NS: AtomicU64 = AtomicU64::new(0);

/// The id of a `SetActivityId` payload.
fn new_id(data: &[u8]) -> Option<u128> {
    Some(u128::from_le_bytes(data.get(..16)?.try_into().ok()?))
}

/// A `SetActivityId` event, delivered on the thread whose id changes: the thread's slot keeps the
/// new id. `since` is when the callback began (for its cost).
pub(crate) fn set_activity_id(e: &Delivered, since: std::time::Instant) {
    if FLOW_OFFSET.load(Ordering::Relaxed) != FLOW_FROM_EVENTS {
        return;
    }
    let Some(id) = new_id(e.data) else { return };
    if set_flow_id(id) {
        SET_NS.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
        SET_EVENTS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Logs what the `SetActivityId` events cost the agent (at the end).
pub(crate) fn log_cost() {
    let n = SET_EVENTS.load(Ordering::Relaxed);
    if n == 0 {
        return;
    }
    // The cost of the two clock reads each measurement takes, included in the figure.
    let t = std::time::Instant::now();
    for _ in 0..1000 {
        std::hint::black_box(std::time::Instant::now());
    }
    let clock = t.elapsed().as_nanos() as u64 / 1000;
    log_info!(
        "SetActivityId events: {n}, {} ns each in the agent's callback on average (two clock reads of ~{clock} ns each included)",
        SET_NS.load(Ordering::Relaxed) / n
    );
}

static DONE: AtomicBool = AtomicBool::new(false);
static SEARCH: Mutex<Option<Search>> = Mutex::new(None);

/// Looks at a task event for the search (cheap once it ended).
pub(crate) fn observe(s: &Context, e: &Delivered) {
    if DONE.load(Ordering::Relaxed) || e.activity == 0 || s.is_stopped() {
        return;
    }
    // Delivered on the thread that wrote it (the in-process session passes no event thread: the
    // calling thread is the writer).
    let thread = match e.thread {
        0 => match s.info.get_current_thread_id() {
            Ok(t) if t != 0 => t,
            _ => return,
        },
        t => t,
    };
    if slot_of_thread(thread).is_none_or(|slot| slot.os_tid.load(Ordering::Relaxed) != os_tid()) {
        return;
    }
    let mut bytes = [0u8; SCAN_BYTES];
    if !read_own_memory(thread as u64, &mut bytes) {
        return;
    }
    let Ok(mut g) = SEARCH.lock() else { return };
    if DONE.load(Ordering::Relaxed) {
        return;
    }
    let search = g.get_or_insert_with(Search::default);
    let (offset, c) = match search.observe(e.activity, thread, &bytes) {
        Outcome::Searching => return,
        Outcome::Found(c) => (c.offset, c),
        Outcome::GaveUp => (0, search.best().cloned().unwrap_or_default()),
    };
    DONE.store(true, Ordering::Relaxed);
    FLOW_OFFSET.store(offset, Ordering::Release);
    log_info!(
        "activity id in the runtime's Thread object: {} ({} events, {} matches, {} mismatches)",
        if offset == 0 { "not found".to_string() } else { format!("offset {offset}") },
        search.events,
        c.matches,
        c.mismatches
    );
    s.emit(ActivityOffset {
        ts: s.now(),
        offset: offset as u32,
        matches: c.matches,
        threads: c.threads.len() as u32,
        mismatches: c.mismatches,
    });
    *g = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(at: usize, id: u128, decoy: Option<(usize, u128)>) -> Vec<u8> {
        let mut b = vec![0u8; 256];
        b[..8].copy_from_slice(&0x7f00_dead_beefu64.to_le_bytes());
        b[at..at + 16].copy_from_slice(&id.to_le_bytes());
        if let Some((o, v)) = decoy {
            b[o..o + 16].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    #[test]
    fn set_activity_id_payload_is_the_guid_as_in_memory() {
        let mut d = (0x0011_2233_4455_6677_8899_aabb_ccdd_eeffu128).to_le_bytes().to_vec();
        assert_eq!(new_id(&d), Some(0x0011_2233_4455_6677_8899_aabb_ccdd_eeff));
        d.truncate(15);
        assert_eq!(new_id(&d), None, "cut short");
        assert!(from_events(8) && from_events(9) && !from_events(10));
    }

    #[test]
    fn the_place_that_always_holds_the_id_is_found() {
        let mut s = Search::default();
        // A decoy holds the first id too (a stale copy), then keeps it while the ids change.
        let first = 0x1111_u128 << 64 | 5;
        assert_eq!(s.observe(first, 0x1000, &object(96, first, Some((160, first)))), Outcome::Searching);
        assert_eq!(s.candidates.iter().map(|c| c.offset).collect::<Vec<_>>(), vec![96, 160]);
        let mut found = None;
        for i in 0..20u128 {
            let id = (0x2222 + i) << 64 | i;
            match s.observe(id, 0x1000 + (i as usize % 3) * 0x800, &object(96, id, Some((160, first)))) {
                Outcome::Found(c) => {
                    found = Some((c.offset, i));
                    break;
                }
                o => assert_eq!(o, Outcome::Searching),
            }
        }
        // Eight distinct ids (the first and seven more) on two threads.
        assert_eq!(found, Some((96, 6)));
    }

    #[test]
    fn a_place_that_differs_once_is_not_taken_and_the_search_gives_up() {
        let mut s = Search::default();
        let mut last = Outcome::Searching;
        for i in 0..MAX_EVENTS as u128 {
            let id = (0x3333 + i) << 64 | i;
            // Every fourth event's id is not where the others are.
            let at = if i % 4 == 3 { 200 } else { 64 };
            last = s.observe(id, 0x1000 + (i as usize % 2), &object(at, id, None));
            assert!(!matches!(last, Outcome::Found(_)), "taken at event {i}: {last:?}");
        }
        assert_eq!(last, Outcome::GaveUp);
    }

    #[test]
    fn a_runtime_that_keeps_the_id_elsewhere_is_given_up_soon() {
        let mut s = Search::default();
        for i in 1..MAX_NOWHERE {
            assert_eq!(s.observe(i as u128, 0x1000, &object(64, 0, None)), Outcome::Searching);
        }
        assert_eq!(s.observe(7, 0x1000, &object(64, 0, None)), Outcome::GaveUp);
    }
}
