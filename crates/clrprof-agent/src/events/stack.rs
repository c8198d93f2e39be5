//! The managed stack of the thread a runtime event happens on (`DoStackSnapshot` of the current
//! thread), for the recorders of exceptions, allocations and contention.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use clrprof_sys::{FunctionID, HRESULT, S_OK};

use crate::context::Context;

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
pub(crate) fn current_stack(s: &Context) -> Vec<u64> {
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
