//! The Rust side of the enter/leave/tailcall hooks: the slow paths the stubs call
//! ([`hook_enter`], [`hook_leave`], [`hook_tailcall`]), and the table of instrumented threads'
//! states — made on a thread's first hook, finished when the thread exits, published and recycled
//! by the writer thread (`super::Instrumentation::publish`). Nothing here allocates or locks on the
//! hook path except a thread's first hook.

use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::thread::{self, FuncInfo, ThreadState};
#[cfg(target_arch = "x86_64")]
use super::tls;
use crate::os::os_tid;

/// Threads instrumented at once, at most (a slot is reused once its thread ended and the writer
/// published it).
pub(super) const MAX_THREADS: usize = 1 << 14;
/// Finished states kept for reuse, at most (the rest are freed).
pub(super) const MAX_SPARES: usize = 64;

/// The states of instrumented threads, by slot: live, or finished and not yet published for the
/// last time (null: free). Only `register_thread` fills a slot and only the writer empties it.
pub(super) static THREADS: [AtomicPtr<ThreadState>; MAX_THREADS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_THREADS];
/// Slots ever used (the writer looks at these).
pub(super) static THREAD_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Threads not instrumented because `MAX_THREADS` were at once (since the last publication).
pub(super) static THREADS_DROPPED: AtomicU64 = AtomicU64::new(0);
/// Hooks that ran on a thread after its exit guard (not recorded; since the last publication).
pub(super) static LATE_HOOKS: AtomicU64 = AtomicU64::new(0);
/// The next calling-context tree number (`ThreadState::tree`).
pub(super) static NEXT_TREE: AtomicU32 = AtomicU32::new(1);
/// Free slots below `THREAD_COUNT` and finished states kept for reuse, handed back by the writer.
pub(super) static RECYCLED: Mutex<Recycled> = Mutex::new(Recycled { slots: Vec::new(), spares: Vec::new() });

pub(super) struct Recycled {
    pub(super) slots: Vec<u32>,
    /// `*mut ThreadState`, recycled (clean) and used by no thread.
    pub(super) spares: Vec<usize>,
}

/// `ExitGuard` value of a thread that gets no state (too many threads at once).
pub(super) const NOT_INSTRUMENTED: usize = 1;

/// Ends a thread's instrumentation when its OS thread exits: a thread-local destructor, which
/// runs on the thread itself after the runtime has torn the thread down (no managed code runs
/// after it). Holds the thread's state pointer (0: none yet; `NOT_INSTRUMENTED`).
pub(super) struct ExitGuard(Cell<usize>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let p = self.0.replace(0);
        // Hooks that would still run find no state and do not make one (`register_thread`).
        #[cfg(target_arch = "x86_64")]
        tls::set_current(std::ptr::null_mut());
        if p > NOT_INSTRUMENTED {
            // Safety: `p` is this thread's live state; `finish` is the thread's last access.
            unsafe { (*(p as *const ThreadState)).finish() };
        }
    }
}

thread_local! {
    static EXIT: ExitGuard = const { ExitGuard(Cell::new(0)) };
}
/// Settings the hooks read (set once in `Initialize`, before any hook can run).
pub(super) static TIMING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
pub(super) static FLOW: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
pub(super) static OVERHEAD_TICKS: AtomicU64 = AtomicU64::new(0);
pub(super) static SUSPEND_START: AtomicU64 = AtomicU64::new(0);

/// The calling thread's state given what the stub read from the TLS slot; created (or a recycled
/// one taken) on the thread's first hook.
#[inline(always)]
pub(super) fn current(ts: *mut ThreadState) -> *mut ThreadState {
    if !ts.is_null() {
        return ts;
    }
    register_thread()
}

/// Gives the calling thread a state in a free slot and arranges for it to be handed back when the
/// thread exits. The process's main thread keeps its state to the end: its thread-local
/// destructors run inside `exit`, before handlers that may still run managed code.
#[cold]
pub(super) fn register_thread() -> *mut ThreadState {
    let tid = os_tid();
    let main = tid == std::process::id();
    if !main {
        match EXIT.try_with(|g| g.0.get()) {
            Ok(0) => {}
            // Too many threads at once when this one started: not instrumented.
            Ok(_) => return std::ptr::null_mut(),
            // The thread is exiting and its guard already ran.
            Err(_) => {
                LATE_HOOKS.fetch_add(1, Ordering::Relaxed);
                return std::ptr::null_mut();
            }
        }
    }
    let (slot, spare) = match RECYCLED.lock() {
        Ok(mut r) => (r.slots.pop().map(|s| s as usize), r.spares.pop()),
        Err(_) => (None, None),
    };
    let slot = slot.or_else(|| {
        THREAD_COUNT.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_THREADS).then_some(n + 1)).ok()
    });
    let Some(slot) = slot else {
        if let Some(p) = spare {
            if let Ok(mut r) = RECYCLED.lock() {
                r.spares.push(p);
            }
        }
        THREADS_DROPPED.fetch_add(1, Ordering::Relaxed);
        let _ = EXIT.try_with(|g| g.0.set(NOT_INSTRUMENTED));
        return std::ptr::null_mut();
    };
    let ts = match spare {
        Some(p) => p as *mut ThreadState,
        None => Box::into_raw(Box::new(ThreadState::new(
            0,
            TIMING.load(Ordering::Relaxed),
            OVERHEAD_TICKS.load(Ordering::Relaxed),
            FLOW.load(Ordering::Relaxed),
        ))),
    };
    // Safety: `ts` is new or a recycled spare: no other thread uses it.
    unsafe { (*ts).start(tid, NEXT_TREE.fetch_add(1, Ordering::Relaxed)) };
    if !main {
        let _ = EXIT.try_with(|g| g.0.set(ts as usize));
    }
    // Release: the writer sees the started state.
    if let Some(t) = THREADS.get(slot) {
        t.store(ts, Ordering::Release);
    }
    #[cfg(target_arch = "x86_64")]
    tls::set_current(ts);
    ts
}

/// Hands a finished state's slot back and keeps the state for reuse (or frees it). Writer thread,
/// after the state's last publication, once its slot no longer points to it.
pub(super) fn retire(slot: usize, ts: *mut ThreadState) {
    // Safety: the owner thread finished (its last access) and the slot was emptied: only the
    // caller holds `ts`.
    unsafe { (*ts).recycle() };
    let mut ts = Some(ts);
    if let Ok(mut r) = RECYCLED.lock() {
        r.slots.push(slot as u32);
        if r.spares.len() < MAX_SPARES {
            r.spares.extend(ts.take().map(|p| p as usize));
        }
    }
    if let Some(p) = ts {
        // Safety: as above; states are made by `Box::into_raw` in `register_thread`.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// `site`: the return address into the caller, which the enter stub read below the caller's SP.
pub(super) extern "C" fn hook_enter(ts: *mut ThreadState, func: *const FuncInfo, sp: usize, site: usize) {
    #[cfg(test)]
    super::tests::SLOW_HOOKS.with(|c| c.set(c.get() + 1));
    let ts = current(ts);
    if !ts.is_null() && !func.is_null() {
        // Safety: `ts` is this thread's own state (only this thread takes `&mut`).
        unsafe { (*ts).enter(func, sp, site) };
    }
}

pub(super) extern "C" fn hook_leave(ts: *mut ThreadState, func: *const FuncInfo, sp: usize) {
    #[cfg(test)]
    super::tests::SLOW_HOOKS.with(|c| c.set(c.get() + 1));
    let ts = current(ts);
    if !ts.is_null() && !func.is_null() {
        // Safety: as in `hook_enter`.
        unsafe { (*ts).leave(func, sp, thread::FLOW_LEAVE) };
    }
}

pub(super) extern "C" fn hook_tailcall(ts: *mut ThreadState, func: *const FuncInfo, sp: usize) {
    #[cfg(test)]
    super::tests::SLOW_HOOKS.with(|c| c.set(c.get() + 1));
    let ts = current(ts);
    if !ts.is_null() && !func.is_null() {
        // Safety: as in `hook_enter`.
        unsafe { (*ts).leave(func, sp, thread::FLOW_TAILCALL) };
    }
}
