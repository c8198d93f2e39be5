//! Garbage collections (`COR_PRF_HIGH_BASIC_GC`: every GC including background ones, without the
//! heavy heap-walk callbacks) and runtime suspensions (the pauses).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use clrprof_sys::{CallbackResult, BOOL};
use clrprof_trace::{GcFinished, GcStarted, RuntimeResumed, RuntimeSuspended};

use crate::context::Context;
use crate::os::os_tid;

/// `COR_PRF_SUSPEND_FOR_GC` and `COR_PRF_SUSPEND_FOR_GC_PREP`.
const SUSPEND_FOR_GC: u32 = 1;
const SUSPEND_FOR_GC_PREP: u32 = 6;

/// A suspension for a collection (`COR_PRF_SUSPEND_FOR_GC` or `_GC_PREP`).
pub(crate) fn is_gc_suspension(reason: u32) -> bool {
    reason == SUSPEND_FOR_GC || reason == SUSPEND_FOR_GC_PREP
}

#[derive(Default)]
pub(crate) struct GcState {
    /// The suspension in progress was recorded (suspensions never overlap).
    suspension_recorded: AtomicBool,
    /// Bumped at every GC start and finish: an object's address names the same object only
    /// between two changes (a GC moves objects and frees memory for reuse).
    pub(crate) epoch: AtomicU64,
}

/// Used bytes per generation (gen0, gen1, gen2, LOH, POH). `GetGenerationBounds` is allowed in
/// the GC callbacks (the runtime's own gcbasicprofiler test calls it from `GarbageCollectionStarted`),
/// and the `COR_PRF_GC_GENERATION_RANGE` docs say its lengths are accurate only when called from
/// `GarbageCollectionStarted` or `GarbageCollectionFinished`.
fn heap_sizes(s: &Context) -> Vec<u64> {
    let mut sizes = vec![0u64; 5];
    if let Ok(ranges) = s.info.get_generation_bounds() {
        for (g, len) in ranges {
            if let Some(x) = sizes.get_mut(g as usize) {
                *x += len;
            }
        }
    }
    sizes
}

/// `collected[g]` is non-zero when generation `g` is collected (gen0..gen2, LOH, POH).
pub(crate) fn started(s: &Context, ev: &GcState, collected: &[BOOL], reason: u32) -> CallbackResult {
    ev.epoch.fetch_add(1, Ordering::AcqRel);
    if !(s.config.gc || s.config.events) {
        return Ok(()); // on for the exceptions' rethrow detection only
    }
    let flags = &collected[..collected.len().min(3)];
    let generation = flags.iter().rposition(|&c| c != 0).unwrap_or(0) as u8;
    s.emit(GcStarted { ts: s.now(), os_tid: os_tid(), generation, reason, sizes: heap_sizes(s) });
    Ok(())
}

pub(crate) fn finished(s: &Context, ev: &GcState) -> CallbackResult {
    ev.epoch.fetch_add(1, Ordering::AcqRel);
    if !(s.config.gc || s.config.events) {
        return Ok(());
    }
    s.emit(GcFinished { ts: s.now(), os_tid: os_tid(), sizes: heap_sizes(s) });
    Ok(())
}

pub(crate) fn suspend_started(s: &Context, ev: &GcState, reason: u32) -> CallbackResult {
    let keep = s.config.events || reason == SUSPEND_FOR_GC || reason == SUSPEND_FOR_GC_PREP;
    // One time for the record and the trigger: a gc-pause trigger's value is the pause the
    // reports show.
    let ts = s.now();
    if is_gc_suspension(reason) {
        s.triggers.gc_suspended(ts);
    }
    ev.suspension_recorded.store(keep, Ordering::Relaxed);
    if keep {
        s.emit(RuntimeSuspended { ts, os_tid: os_tid(), reason });
    }
    Ok(())
}

pub(crate) fn resume_finished(s: &Context, ev: &GcState) -> CallbackResult {
    let ts = s.now();
    s.triggers.resumed(ts);
    if ev.suspension_recorded.swap(false, Ordering::Relaxed) {
        s.emit(RuntimeResumed { ts, os_tid: os_tid() });
    }
    Ok(())
}
