//! Runtime events (issue 5): exceptions, garbage collections and suspensions, allocations
//! (exact through `ObjectAllocated`, sampled through an in-process EventPipe session).
//!
//! Every callback here runs in a restricted context (cooperative mode, GC callbacks, EventPipe
//! delivery on the emitting thread): no blocking beyond short uncontended locks, no Info call
//! that can trigger a GC, payloads copied before returning.

pub mod alloc;
pub mod contention;
pub mod eventpipe;
pub mod exc_counts;
pub mod exceptions;
pub mod gc;

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use clrprof_sys::{high, monitor, FunctionID, HRESULT, S_OK};

use crate::config::{AllocMode, Config};
use crate::context::Context;

/// Per-process state of the runtime-event recorders.
#[derive(Default)]
pub struct Events {
    pub alloc: alloc::ExactCounts,
    pub gc: gc::GcState,
    /// The exception storm rate limit.
    pub limiter: exceptions::Limiter,
    /// Throws seen per exception type (to sample throw stacks).
    pub throws: std::sync::Mutex<std::collections::HashMap<clrprof_sys::ClassID, u32>>,
    /// Allocation samples seen per type: how many (to sample their stack walks) and whether the
    /// type's name was written (with its first sample only).
    pub alloc_types: std::sync::Mutex<std::collections::HashMap<u64, eventpipe::SampledType>>,
    /// Monitor contention counted per waiting stack (unless the event log keeps every one).
    pub contention: contention::Contention,
    /// Allocation samples waiting to be packed by the writer thread.
    pub alloc_samples: alloc::PendingSamples,
    /// Caught exceptions counted in the agent (under the storm rate limit, the default).
    pub exception_counts: exc_counts::ExceptionCountsState,
}

/// Event-mask bits (low, high) the configuration needs.
pub fn mask(config: &Config, info_version: u32) -> (u32, u32) {
    let mut low = 0;
    let mut high = 0;
    if config.exceptions {
        low |= monitor::EXCEPTIONS;
    }
    if config.exceptions || config.locks || config.alloc != AllocMode::Off {
        low |= monitor::ENABLE_STACK_SNAPSHOT;
    }
    if config.gc || config.events {
        // BASIC_GC, not MONITOR_GC: background GC stays on.
        high |= high::BASIC_GC;
        low |= monitor::SUSPENDS;
    }
    if config.exceptions {
        // GC starts and finishes tell when an exception object's address may name another
        // object (see `exceptions::is_rethrow`).
        high |= high::BASIC_GC;
    }
    match config.alloc {
        AllocMode::Exact => low |= monitor::ENABLE_OBJECT_ALLOCATED | monitor::OBJECT_ALLOCATED,
        AllocMode::Sampled if info_version >= 12 => high |= high::MONITOR_EVENT_PIPE,
        _ => {}
    }
    if info_version >= 12 {
        // GCStart_V2 says whether a collection is background and why it ran; Contention* events
        // report Monitor contention; TypeLoadStart/Stop bracket type loads for the sampler; the
        // private provider's FailFast says the process is about to die (`eventpipe`), always.
        high |= high::MONITOR_EVENT_PIPE;
    }
    (low, high)
}

/// Deepest stack kept.
const MAX_FRAMES: usize = 512;
const ABORT: HRESULT = 1;

unsafe extern "system" fn collect_frame(
    function: FunctionID,
    _ip: usize,
    _frame_info: usize,
    _ctx_len: u32,
    _ctx: *const u8,
    data: *mut c_void,
) -> HRESULT {
    // Safety: `data` is the `Vec<u64>` passed by `current_stack`, alive for the whole walk.
    let frames = unsafe { &mut *(data as *mut Vec<u64>) };
    if function != 0 {
        frames.push(function as u64);
    }
    if frames.len() >= MAX_FRAMES {
        ABORT
    } else {
        S_OK
    }
}

/// Failed walks, logged once each kind.
static WALK_FAILURES: AtomicU64 = AtomicU64::new(0);

/// The current thread's managed stack as FunctionIDs, innermost first (`DoStackSnapshot` of the
/// current thread, which is synchronous and allowed in any callback on that thread).
pub fn current_stack(s: &Context) -> Vec<u64> {
    let mut stack: Vec<u64> = Vec::with_capacity(32);
    // Safety: `collect_frame` treats the data pointer as the `Vec<u64>` given here; the walk of the
    // current thread is synchronous, so the vector outlives it.
    let walked = unsafe { s.info.do_stack_snapshot(0, collect_frame, 0, &mut stack as *mut Vec<u64> as *mut c_void) };
    if let Err(e) = walked {
        // An aborted walk (too deep) keeps the frames it got.
        if e.hr != clrprof_sys::CORPROF_E_STACKSNAPSHOT_ABORTED && WALK_FAILURES.fetch_add(1, Ordering::Relaxed) < 10 {
            crate::log_warn!("stack walk of the current thread: {e}");
        }
    }
    stack
}
