//! The in-process EventPipe session (`ICorProfilerInfo12::EventPipeStartSession`) on provider
//! `Microsoft-Windows-DotNETRuntime`: allocation samples and the runtime's GC descriptions.
//!
//! Event ids and payloads (ClrEtwAll.man): `GCStart_V2` id 1 {u32 Count, u32 Depth, u32 Reason,
//! u32 Type, u16 ClrInstanceID, u64 ClientSequenceNumber}; `GCEnd_V1` id 2 {u32 Count, u32 Depth,
//! u16 ClrInstanceID}; `GCAllocationTick_V2..V4` id 10 {u32
//! AllocationAmount, u32 AllocationKind, u16 ClrInstanceID, u64 AllocationAmount64, ptr TypeID,
//! UTF-16z TypeName, u32 HeapIndex, ptr Address, (V4) u64 ObjectSize}; `AllocationSampled` id 303
//! (.NET 10, keyword 0x80000000000) {u32 AllocationKind, u16 ClrInstanceID, ptr TypeID, UTF-16z
//! TypeName, ptr Address, u64 ObjectSize, u64 SampledByteOffset}; `ContentionStart` id 81 and
//! `ContentionStop_V1` id 91 {u8 ContentionFlags, u16 ClrInstanceID, f64 DurationNs} (keyword 0x4000).
//!
//! Delivery is synchronous on the thread that wrote the event: the payload is parsed and copied
//! into a record right away.
//!
//! The session also takes `FailFast` (id 191, level Critical, keyword `Startup` 0x80000000 of
//! `Microsoft-Windows-DotNETRuntimePrivate`) {UTF-16z FailFastUserMessage, ptr FailedEIP, u32
//! OSExitCode, u32 ClrExitCode, u16 ClrInstanceID}, which the runtime fires from
//! `EEPolicy::LogFatalError` on the failing thread for `Environment.FailFast` and a stack overflow,
//! before it aborts the process without `Shutdown` (and after resetting the signal handlers, so no
//! handler of ours would run). Delivered there, it is the agent's last chance to write what it
//! holds: see [`process_dying`].

use std::sync::atomic::{AtomicU64, Ordering};

use clrprof_sys::CallbackResult;
use clrprof_trace::{AllocationSample, ContentionEnded, ContentionStarted, GcEnd, GcInfo, Record};

use super::alloc::PendingSamples;
use super::contention::Contention;
use super::exceptions::Limiter;
use super::payload::Payload;
use crate::config::AllocMode;
use crate::context::Context;
use crate::os::os_tid;
use crate::sampler::Sampler;
use crate::{log_info, log_warn};

const PROVIDER: &str = "Microsoft-Windows-DotNETRuntime";
const PRIVATE_PROVIDER: &str = "Microsoft-Windows-DotNETRuntimePrivate";
/// `Startup` of the private provider, which holds `FailFast` (the only event of it at level
/// Critical).
const KEYWORD_PRIVATE_STARTUP: u64 = 0x8000_0000;
const LEVEL_CRITICAL: u32 = 1;
const EVENT_FAILFAST: u32 = 191;
/// How long the dying thread waits for the sampler's and the writer's last rounds, at most: the
/// process is going down anyway, this only delays its end.
const LAST_SAMPLES_WAIT: std::time::Duration = std::time::Duration::from_millis(500);
const LAST_FLUSH_WAIT: std::time::Duration = std::time::Duration::from_millis(1500);
const KEYWORD_GC: u64 = 0x1;
const KEYWORD_CONTENTION: u64 = 0x4000;
const KEYWORD_ALLOCATION_SAMPLING: u64 = 0x0800_0000_0000;
/// `Exception`: ExceptionThrown_V1, the runtime's count of throws while the callbacks are paused.
const KEYWORD_EXCEPTION: u64 = 0x8000;
/// `TypeDiagnostic`: TypeLoadStart/Stop, which bracket type loads for the sampler.
const KEYWORD_TYPE_DIAGNOSTIC: u64 = 0x80_0000_0000;
const LEVEL_INFORMATIONAL: u32 = 4;
const LEVEL_VERBOSE: u32 = 5;

const EVENT_GC_START: u32 = 1;
const EVENT_GC_END: u32 = 2;
const EVENT_ALLOCATION_TICK: u32 = 10;
const EVENT_ALLOCATION_SAMPLED: u32 = 303;
const EVENT_CONTENTION_START: u32 = 81;
const EVENT_CONTENTION_STOP: u32 = 91;
const EVENT_TYPE_LOAD_START: u32 = 73;
const EVENT_EXCEPTION_THROWN: u32 = 80;
const EVENT_TYPE_LOAD_STOP: u32 = 74;

/// Starts the session when the configuration needs it, with the runtime's providers and the
/// `extra` ones other modules ask for (`super::providers::requested`); failures are logged and
/// recorded, the app runs. Returns the session's id.
pub(crate) fn start(s: &Context, runtime_major: u16, extra: &[super::providers::ProviderRequest]) -> Option<u64> {
    let (_, high) = s.info.get_event_mask2().unwrap_or((0, 0));
    if high & clrprof_sys::high::MONITOR_EVENT_PIPE == 0 {
        return None;
    }
    let mut keywords = 0;
    let mut level = LEVEL_INFORMATIONAL;
    if s.config.gc {
        keywords |= KEYWORD_GC;
    }
    if s.config.locks {
        keywords |= KEYWORD_CONTENTION;
    }
    if s.config.sampling && s.config.type_loads {
        keywords |= KEYWORD_TYPE_DIAGNOSTIC;
    }
    if (s.config.exceptions && !s.config.every_exception()) || s.triggers.wants_exceptions() {
        keywords |= KEYWORD_EXCEPTION;
    }
    if s.config.alloc == AllocMode::Sampled {
        if runtime_major >= 10 {
            keywords |= KEYWORD_ALLOCATION_SAMPLING;
        } else {
            // AllocationTick is a verbose GC event before .NET 10.
            keywords |= KEYWORD_GC;
            level = LEVEL_VERBOSE;
        }
    }
    use super::providers::{merge, ProviderRequest};
    let mut requests = vec![ProviderRequest { name: PROVIDER, keywords, level }];
    requests.push(ProviderRequest { name: PRIVATE_PROVIDER, keywords: KEYWORD_PRIVATE_STARTUP, level: LEVEL_CRITICAL });
    requests.extend_from_slice(extra);
    // No keyword would mean every event of a provider: those are left out.
    let merged: Vec<ProviderRequest> = merge(&requests).into_iter().filter(|r| r.keywords != 0).collect();
    let providers: Vec<(&str, u64, u32)> = merged.iter().map(|r| (r.name, r.keywords, r.level)).collect();
    let described: Vec<String> =
        merged.iter().map(|r| format!("{} (keywords 0x{:x}, level {})", r.name, r.keywords, r.level)).collect();
    match s.info.event_pipe_start_session(&providers, false) {
        Ok(id) => {
            log_info!("EventPipe session {id} on {}", described.join(", "));
            Some(id)
        }
        Err(e) => {
            log_warn!("cannot start the EventPipe session ({e}): no allocation samples, no GC types");
            s.emit(clrprof_trace::Message {
                ts: s.now(),
                level: 1,
                text: format!("EventPipe session not started ({e}): allocations not sampled, GC types unknown"),
            });
            None
        }
    }
}

/// Parses a runtime event payload into a record; `None` for events this module does not use or
/// payloads that do not parse. `named(class)` says whether an allocation sample's type name was
/// already written (then it is left empty: the reader keeps names by class id).
pub(crate) fn parse(
    event_id: u32,
    version: u32,
    data: &[u8],
    ts: u64,
    tid: u32,
    ips: &[usize],
    named: &mut dyn FnMut(u64) -> bool,
) -> Option<clrprof_trace::Record> {
    let mut p = Payload::new(data);
    let mut type_name = |p: &mut Payload, class: u64| -> Option<String> {
        if named(class) {
            p.skip_utf16z()?;
            Some(String::new())
        } else {
            p.utf16z()
        }
    };
    let ips = || ips.iter().map(|&ip| ip as u64).collect::<Vec<u64>>();
    match event_id {
        EVENT_GC_START if version >= 1 => {
            let index = p.u32()?;
            let generation = p.u32()?;
            let reason = p.u32()?;
            let kind = p.u32()?;
            Some(GcInfo { ts, index, generation, reason, kind }.into())
        }
        EVENT_GC_END if version >= 1 => {
            let index = p.u32()?;
            let generation = p.u32()?;
            Some(GcEnd { ts, os_tid: tid, index, generation }.into())
        }
        EVENT_ALLOCATION_SAMPLED => {
            let _kind = p.u32()?;
            let _clr = p.u16()?;
            let class = p.u64()?;
            let type_name = type_name(&mut p, class)?;
            let _address = p.u64()?;
            let size = p.u64()?;
            Some(
                AllocationSample {
                    ts,
                    os_tid: tid,
                    class,
                    type_name,
                    size,
                    amount: 0,
                    source: 0,
                    ips: ips(),
                    stack: Vec::new(),
                    walk_weight: 0,
                    weight: 0,
                }
                .into(),
            )
        }
        EVENT_ALLOCATION_TICK if version >= 2 => {
            let _amount32 = p.u32()?;
            let _kind = p.u32()?;
            let _clr = p.u16()?;
            let amount = p.u64()?;
            let class = p.u64()?;
            let type_name = type_name(&mut p, class)?;
            let _heap = p.u32()?;
            let _address = p.u64()?;
            let size = if version >= 4 { p.u64().unwrap_or(0) } else { 0 };
            Some(
                AllocationSample {
                    ts,
                    os_tid: tid,
                    class,
                    type_name,
                    size,
                    amount,
                    source: 1,
                    ips: ips(),
                    stack: Vec::new(),
                    walk_weight: 0,
                    weight: 0,
                }
                .into(),
            )
        }
        EVENT_CONTENTION_START => Some(ContentionStarted { ts, os_tid: tid, stack: Vec::new() }.into()),
        EVENT_CONTENTION_STOP => {
            let duration_ns = if version >= 1 {
                let _flags = p.take(1)?;
                let _clr = p.u16()?;
                let d = f64::from_bits(p.u64()?);
                if d.is_finite() && d > 0.0 {
                    d as u64
                } else {
                    0
                }
            } else {
                0
            };
            Some(ContentionEnded { ts, os_tid: tid, duration_ns }.into())
        }
        _ => None,
    }
}

/// `ExceptionThrown_V1`'s `ExceptionFlags`.
fn exception_flags(data: &[u8]) -> Option<u16> {
    let mut p = Payload::new(data);
    p.skip_utf16z()?;
    p.skip_utf16z()?;
    p.u64()?;
    p.u32()?;
    p.u16()
}

const EXCEPTION_FLAG_RETHROWN: u16 = 0x4;

/// Samples of one type whose stacks are always walked; after that every sample while the walk
/// budget lasts, and one in `WALK_EVERY` beyond it.
const WALK_FIRST: u32 = 64;
const WALK_EVERY: u32 = 32;
/// Time spent walking allocation stacks per `WALK_WINDOW_NS` beyond which samples are walked one
/// in `WALK_EVERY`: 2 ms in 100 ms, some 2% of a core at most. A budget of time, not of walks: a
/// walk costs about 10 µs on an ordinary stack but ten times that on an interpreter's recursion
/// hundreds of frames deep, where a count of walks let the walks take 4% of the thread's CPU.
const WALK_BUDGET_NS: u64 = 2_000_000;
const WALK_WINDOW_NS: u64 = 100_000_000;
/// Samples of objects this large (the runtime's large-object threshold) are always walked: each
/// stands for itself (its bytes are sampled with near certainty), so one in `WALK_EVERY` walked
/// would put 32 times its size on the site that happened to be walked.
const WALK_ALWAYS_BYTES: u64 = 85_000;

/// The walk budget's current window and the walking time spent in it.
static WALK_WINDOW: AtomicU64 = AtomicU64::new(0);
static WALK_NS_IN_WINDOW: AtomicU64 = AtomicU64::new(0);

/// Whether the window of `now` (ns) has walking time left.
fn within_walk_budget(now: u64) -> bool {
    let window = now / WALK_WINDOW_NS + 1;
    if WALK_WINDOW.swap(window, Ordering::Relaxed) != window {
        WALK_NS_IN_WINDOW.store(0, Ordering::Relaxed);
    }
    WALK_NS_IN_WINDOW.load(Ordering::Relaxed) < WALK_BUDGET_NS
}

/// Charges a walk of `ns` to the current window's budget.
fn spent_walking(ns: u64) {
    WALK_NS_IN_WINDOW.fetch_add(ns, Ordering::Relaxed);
}

/// Whether the `n`th sample (from 1) of a type, of an object of `size` bytes, is walked, and the
/// walk weight it then gets (how many such samples its stack stands for). `budget` says whether
/// the walk budget allows one more walk (asked only when the sample is not walked anyway).
fn walk_weight(n: u32, size: u64, budget: &mut dyn FnMut() -> bool) -> Option<u32> {
    if n <= WALK_FIRST || size >= WALK_ALWAYS_BYTES || budget() {
        Some(1)
    } else if n.is_multiple_of(WALK_EVERY) {
        Some(WALK_EVERY)
    } else {
        None
    }
}

/// What the EventPipe recorder fills (borrowed from `super::Events`).
pub(crate) struct Recorder<'a> {
    /// Allocation samples seen per type (see `super::Events::alloc_types`).
    pub(crate) alloc_types: &'a std::sync::Mutex<std::collections::HashMap<u64, SampledType>>,
    pub(crate) alloc_samples: &'a PendingSamples,
    pub(crate) contention: &'a Contention,
    pub(crate) limiter: &'a Limiter,
    pub(crate) heap: &'a super::heap::HeapState,
}

/// What the agent knows of a type seen in allocation samples.
#[derive(Clone, Copy, Default)]
pub(crate) struct SampledType {
    samples: u32,
    named: bool,
}

/// Forgets an unloaded class (its id may be reused for another type).
pub(crate) fn forget_class(ev: &Recorder, class: u64) {
    if let Ok(mut m) = ev.alloc_types.lock() {
        m.remove(&class);
    }
}

/// `TypeLoadStart` {u32 TypeLoadStartID, u16 ClrInstanceID} and `TypeLoadStop` {u32
/// TypeLoadStartID, u16 ClrInstanceID, u16 LoadLevel, u64 TypeID, UTF-16z TypeName}: the thread's
/// type load activity for the sampler; a `TypeLoad` record names it when a sample was taken
/// during the load.
fn type_load(s: &Context, event_id: u32, data: &[u8]) {
    use crate::sampler::slot as cpu;
    use clrprof_trace::runtime_activity as ra;
    thread_local! {
        /// Type loads in progress on this thread: (TypeLoadStartID, samples taken at the start).
        static LOADS: std::cell::RefCell<Vec<(u32, u32)>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let mut p = Payload::new(data);
    let Some(id) = p.u32() else { return };
    if event_id == EVENT_TYPE_LOAD_START {
        let Some(taken) = cpu::samples_taken() else { return };
        cpu::activity_begin(ra::pack(ra::TYPE_LOAD, id as u64));
        let _ = LOADS.try_with(|l| {
            if let Ok(mut l) = l.try_borrow_mut() {
                if l.len() >= 64 {
                    l.clear(); // loads that failed and never stopped
                }
                l.push((id, taken));
            }
        });
        return;
    }
    cpu::activity_end(ra::pack(ra::TYPE_LOAD, id as u64));
    let start = LOADS
        .try_with(|l| {
            let mut l = l.try_borrow_mut().ok()?;
            let i = l.iter().rposition(|e| e.0 == id)?;
            let start = l[i].1;
            l.truncate(i);
            Some(start)
        })
        .ok()
        .flatten();
    let (Some(start), Some(now)) = (start, cpu::samples_taken()) else { return };
    if now == start {
        return; // not sampled during the load: nothing to name
    }
    let mut q = || -> Option<(u64, String)> {
        let _clr = p.u16()?;
        let _level = p.u16()?;
        let class = p.u64()?;
        Some((class, p.utf16z()?))
    };
    if let Some((class, type_name)) = q() {
        s.emit(clrprof_trace::TypeLoad { ts: s.now(), os_tid: os_tid(), load_id: id, class, type_name });
    }
}

/// The `FailFast` event's message, when `data` is its payload (UTF-16z, then 18 bytes exactly).
fn failfast_message(event_id: u32, version: u32, data: &[u8]) -> Option<String> {
    if event_id != EVENT_FAILFAST || version != 0 {
        return None;
    }
    let units: Vec<u16> = data.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    let end = units.iter().position(|&u| u == 0)?;
    (data.len() == 2 * (end + 1) + 8 + 4 + 4 + 2).then(|| String::from_utf16_lossy(&units[..end]))
}

/// The runtime is about to abort the process (`FailFast` event, on the failing thread): the
/// sampler drains its samples and writes its pending wall samples, then the writer does a full
/// round — the hooks' call counts and times as at the end, every thread's buffer — so the trace
/// keeps the process's last moments. Bounded waits: the thread waits for the sampler and the
/// writer threads, which never wait for it. Once per process.
pub(crate) fn process_dying(s: &Context, sampler: Option<&Sampler>, message: &str) {
    static ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if ONCE.swap(true, std::sync::atomic::Ordering::AcqRel) || s.is_stopped() {
        return;
    }
    let t0 = std::time::Instant::now();
    s.emit(clrprof_trace::Message {
        ts: s.now(),
        level: 1,
        text: format!("the runtime failed fast (Environment.FailFast or a fatal error): {message}"),
    });
    let sampled = sampler.map(|sm| sm.flush_urgently(LAST_SAMPLES_WAIT));
    let written = s.writer.flush_urgently(LAST_FLUSH_WAIT);
    log_info!(
        "the runtime is failing fast: last samples {sampled:?}, last flush {written} in {} µs",
        t0.elapsed().as_micros()
    );
}

pub(crate) fn delivered(
    s: &Context,
    ev: &Recorder,
    sampler: Option<&Sampler>,
    event_id: u32,
    version: u32,
    data: &[u8],
    ips: &[usize],
) -> CallbackResult {
    if super::heap::delivered(ev.heap, event_id, data) {
        return Ok(());
    }
    if let Some(message) = failfast_message(event_id, version, data) {
        process_dying(s, sampler, &message);
        return Ok(());
    }
    if event_id == EVENT_EXCEPTION_THROWN {
        // Counted only (the callbacks, when on, record the details). `ExceptionThrown_V1`
        // {UTF-16z ExceptionType, UTF-16z ExceptionMessage, ptr ExceptionEIP, u32 ExceptionHRESULT,
        // u16 ExceptionFlags, u16 ClrInstanceID}; flag 0x4 is a rethrow (.NET 8 raises the event
        // for rethrows, .NET 9 and later do not).
        let rethrow = exception_flags(data).is_some_and(|f| f & EXCEPTION_FLAG_RETHROWN != 0);
        s.triggers.exception_thrown(s.now(), data, rethrow);
        if !s.config.exceptions || s.config.every_exception() {
            return Ok(()); // on for a trigger only
        }
        ev.limiter.runtime_thrown.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if rethrow {
            ev.limiter.runtime_rethrown.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        return Ok(());
    }
    if event_id == EVENT_TYPE_LOAD_START || event_id == EVENT_TYPE_LOAD_STOP {
        type_load(s, event_id, data);
        return Ok(());
    }
    // One lookup per sample: whether the type's name was written, and whether to walk this one.
    // The stack walk is most of the cost of a sample (about 10 µs inside the allocation path): the
    // first samples of each type and those of large objects are walked, then one in `WALK_EVERY`,
    // and each walked sample says how many it stands for (`walk_weight`); type totals use every
    // sample.
    let mut nth = 0;
    let mut named = |class: u64| {
        let Ok(mut m) = ev.alloc_types.lock() else { return false };
        let t = m.entry(class).or_default();
        t.samples = t.samples.saturating_add(1);
        nth = t.samples;
        t.named
    };
    match parse(event_id, version, data, s.now(), os_tid(), ips, &mut named) {
        Some(Record::AllocationSample(mut a)) => {
            // In-process (synchronous) sessions get no stacks from the runtime (ep-session.c passes
            // the caller's stack, which runtime events leave NULL); the event is delivered on the
            // allocating thread, so walk it here.
            if a.ips.is_empty() {
                if let Some(w) = walk_weight(nth, a.size, &mut || within_walk_budget(a.ts)) {
                    let t0 = s.now();
                    a.stack = super::stack::current_stack(s);
                    a.walk_weight = w;
                    spent_walking(s.now().saturating_sub(t0));
                }
            }
            let class = a.class;
            let wrote_name = !a.type_name.is_empty();
            if !s.is_stopped() {
                // Packed with the others by the writer thread (`AllocationSamples`).
                ev.alloc_samples.push(a);
            }
            if wrote_name {
                if let Ok(mut m) = ev.alloc_types.lock() {
                    m.entry(class).or_default().named = true;
                }
            }
        }
        Some(Record::ContentionStarted(mut c)) => {
            // Contention blocks the thread anyway: walk its stack every time.
            c.stack = super::stack::current_stack(s);
            if s.config.events {
                s.emit(c);
            } else {
                ev.contention.started(c.ts, c.os_tid, c.stack);
            }
        }
        Some(Record::ContentionEnded(c)) if !s.config.events => {
            ev.contention.ended(c.ts, c.os_tid, c.duration_ns);
        }
        Some(r) => s.emit(r),
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::events::payload::utf16z_bytes as utf16z;

    #[test]
    fn the_failfast_event_is_told_by_its_payload() {
        let mut d = utf16z("deliberate");
        d.extend_from_slice(&[0u8; 8 + 4 + 4 + 2]);
        assert_eq!(failfast_message(EVENT_FAILFAST, 0, &d).as_deref(), Some("deliberate"));
        assert_eq!(failfast_message(EVENT_FAILFAST, 1, &d), None);
        assert_eq!(failfast_message(EVENT_GC_START, 0, &d), None);
        assert_eq!(failfast_message(EVENT_FAILFAST, 0, &d[..d.len() - 2]), None);
        assert_eq!(failfast_message(EVENT_FAILFAST, 0, &[0x41, 0]), None);
    }

    #[test]
    fn parses_allocation_sampled() {
        let mut d = Vec::new();
        d.extend_from_slice(&0u32.to_le_bytes());
        d.extend_from_slice(&7u16.to_le_bytes());
        d.extend_from_slice(&0x1234u64.to_le_bytes());
        d.extend(utf16z("Acme.Node"));
        d.extend_from_slice(&0xdeadu64.to_le_bytes());
        d.extend_from_slice(&48u64.to_le_bytes());
        d.extend_from_slice(&100u64.to_le_bytes());
        match parse(EVENT_ALLOCATION_SAMPLED, 0, &d, 5, 9, &[1, 2], &mut |_| false) {
            Some(Record::AllocationSample(a)) => {
                assert_eq!((a.class, a.type_name.as_str(), a.size, a.source), (0x1234, "Acme.Node", 48, 0));
                assert_eq!(a.ips, vec![1, 2]);
            }
            other => panic!("{other:?}"),
        }
        // Cut short: no record, no panic.
        assert!(parse(EVENT_ALLOCATION_SAMPLED, 0, &d[..20], 5, 9, &[], &mut |_| false).is_none());
        // A type already named: the name is skipped, the fields after it still read.
        match parse(EVENT_ALLOCATION_SAMPLED, 0, &d, 5, 9, &[], &mut |c| c == 0x1234) {
            Some(Record::AllocationSample(a)) => assert_eq!((a.type_name.as_str(), a.size), ("", 48)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn walks_the_first_samples_large_objects_and_one_in_32() {
        let spent = &mut || false;
        assert_eq!(walk_weight(1, 24, spent), Some(1));
        assert_eq!(walk_weight(64, 24, spent), Some(1));
        assert_eq!(walk_weight(65, 24, spent), None);
        assert_eq!(walk_weight(96, 24, spent), Some(32));
        assert_eq!(walk_weight(97, 84_999, spent), None);
        assert_eq!(walk_weight(97, 85_000, spent), Some(1), "a large object stands for itself");
        assert_eq!(walk_weight(97, 20_000_000, spent), Some(1));
        assert_eq!(walk_weight(65, 24, &mut || true), Some(1), "within the budget every sample is walked");
        let mut asked = false;
        assert_eq!(walk_weight(3, 24, &mut || std::mem::replace(&mut asked, true)), Some(1));
        assert!(!asked, "the first samples do not spend the budget");
        // The budget: 2 ms of walking per 100 ms window, spent by walks of 10 µs or of 100 µs.
        let walks =
            |t: u64, ns: u64| (0..1000).take_while(|_| within_walk_budget(t)).map(|_| spent_walking(ns)).count();
        let t = 50 * WALK_WINDOW_NS;
        assert_eq!(walks(t, 10_000), 200);
        assert_eq!(walks(t + WALK_WINDOW_NS, 100_000), 20, "a new window, deeper stacks");
    }

    #[test]
    fn parses_contention_stop() {
        let mut d = vec![0u8];
        d.extend_from_slice(&0u16.to_le_bytes());
        d.extend_from_slice(&1500.0f64.to_bits().to_le_bytes());
        match parse(EVENT_CONTENTION_STOP, 1, &d, 1, 2, &[], &mut |_| false) {
            Some(Record::ContentionEnded(c)) => assert_eq!((c.os_tid, c.duration_ns), (2, 1500)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_gc_start() {
        let mut d = Vec::new();
        for v in [3u32, 2, 1, 1] {
            d.extend_from_slice(&v.to_le_bytes());
        }
        d.extend_from_slice(&0u16.to_le_bytes());
        d.extend_from_slice(&0u64.to_le_bytes());
        match parse(EVENT_GC_START, 2, &d, 1, 1, &[], &mut |_| false) {
            Some(Record::GcInfo(g)) => assert_eq!((g.index, g.generation, g.reason, g.kind), (3, 2, 1, 1)),
            other => panic!("{other:?}"),
        }
        let mut d = Vec::new();
        for v in [7u32, 1] {
            d.extend_from_slice(&v.to_le_bytes());
        }
        d.extend_from_slice(&0u16.to_le_bytes());
        match parse(EVENT_GC_END, 1, &d, 5, 8, &[], &mut |_| false) {
            Some(Record::GcEnd(g)) => assert_eq!((g.ts, g.os_tid, g.index, g.generation), (5, 8, 7, 1)),
            other => panic!("{other:?}"),
        }
    }
}
