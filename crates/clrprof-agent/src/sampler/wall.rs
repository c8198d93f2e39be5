//! Wall-clock stacks with exact managed frames: `SuspendRuntime`, `DoStackSnapshot` of the threads
//! that need a fresh stack, `ResumeRuntime` — always paired. Runs on the sampler thread only.

use std::ffi::c_void;

use clrprof_sys::{FunctionID, ProfilerInfo, ThreadID, HRESULT, S_OK};

/// Deepest managed stack kept.
pub(crate) const MAX_WALK_FRAMES: usize = 2048;

/// One walked stack, leaf first: (FunctionID or 0 for native code, IP).
pub(crate) type Walked = Vec<(u64, u64)>;

unsafe extern "system" fn on_frame(
    function: FunctionID,
    ip: usize,
    _frame_info: usize,
    _ctx_len: u32,
    _ctx: *const u8,
    data: *mut c_void,
) -> HRESULT {
    // Safety: `data` is the `&mut Walked` passed to DoStackSnapshot below, alive for the call.
    let frames = unsafe { &mut *(data as *mut Walked) };
    if frames.len() >= MAX_WALK_FRAMES {
        return clrprof_sys::E_FAIL; // abort: deep enough
    }
    // Consecutive native frames (function 0) collapse into one.
    if function == 0 && frames.last().is_some_and(|&(f, _)| f == 0) {
        return S_OK;
    }
    frames.push((function as u64, ip as u64));
    S_OK
}

/// Outcome of one suspended walk.
pub(crate) struct WalkResult {
    /// Per requested thread: the stack, or None when the walk failed.
    pub(crate) stacks: Vec<Option<Walked>>,
    pub(crate) suspended_ns: u64,
    /// The first failed walk's error.
    pub(crate) first_error: Option<clrprof_sys::HrError>,
}

/// Resumes the runtime when dropped, unless resumed already: whatever goes wrong between
/// `SuspendRuntime` and `ResumeRuntime` (an early return, a panic unwinding the sampler thread),
/// the app's threads run again.
struct ResumeGuard<'a> {
    info: &'a ProfilerInfo,
    resumed: bool,
}

impl ResumeGuard<'_> {
    fn resume(mut self) -> Result<(), clrprof_sys::HrError> {
        self.resumed = true;
        self.info.resume_runtime()
    }
}

impl Drop for ResumeGuard<'_> {
    fn drop(&mut self) {
        if !self.resumed {
            self.resumed = true;
            if let Err(e) = self.info.resume_runtime() {
                crate::log_error!("ResumeRuntime (after a failed walk) failed: {e}");
            }
        }
    }
}

/// Suspends the runtime, walks `threads` and resumes. `Err` when the runtime could not be
/// suspended (the tick is skipped). Walks that fail leave `None`.
pub(crate) fn walk_suspended(info: &ProfilerInfo, threads: &[ThreadID]) -> Result<WalkResult, clrprof_sys::HrError> {
    let mut stacks: Vec<Option<Walked>> = (0..threads.len()).map(|_| None).collect();
    let mut bufs: Vec<Walked> = (0..threads.len()).map(|_| Vec::with_capacity(64)).collect();
    let mut first_error = None;
    let t0 = std::time::Instant::now();
    info.suspend_runtime()?;
    let guard = ResumeGuard { info, resumed: false };
    for (i, &t) in threads.iter().enumerate() {
        let buf = &mut bufs[i];
        // Safety: `on_frame` treats the data pointer as `&mut Walked`, which `buf` is.
        let r = unsafe { info.do_stack_snapshot(t, on_frame, 0, buf as *mut Walked as *mut c_void) };
        match r {
            Ok(()) => stacks[i] = Some(std::mem::take(buf)),
            Err(e) if e.hr == clrprof_sys::CORPROF_E_STACKSNAPSHOT_ABORTED && !buf.is_empty() => {
                stacks[i] = Some(std::mem::take(buf))
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    // Always resume, whatever happened above (the guard resumes on a panic).
    let resumed = guard.resume();
    let suspended_ns = t0.elapsed().as_nanos() as u64;
    if let Err(e) = resumed {
        crate::log_error!("ResumeRuntime failed: {e}");
    }
    Ok(WalkResult { stacks, suspended_ns, first_error })
}
