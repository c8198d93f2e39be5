//! CPU-time sampling: one POSIX timer per managed thread on that thread's CPU-time clock, whose
//! `SIGPROF` is delivered to the thread itself (`SIGEV_THREAD_ID`). A thread that does not run
//! does not advance its clock, so it is never sampled: blocked time costs no CPU weight.
//!
//! The signal handler only copies the interrupted IP and a bounded frame-pointer walk (validated
//! against the thread's stack bounds) into the thread's preallocated ring ([`Slot`]). It does not
//! allocate, lock, log or call the runtime; it finds its slot through the timer's `sigval`, so it
//! needs no thread-local storage. Signals that are not ours go to the previous handler.
//!
//! The thread's slot, its ring and its runtime activities live in [`super::slot`], the walk in
//! [`super::unwind`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use super::slot::{claim, is_slot, Slot, CURRENT, DEAD, MAGIC, REGISTERED_ELSEWHERE};
use super::unwind::record;
use crate::os::{current_stack_bounds, stack_bounds_of, thread_clock, thread_runq_ns};

/// `si_code` of a POSIX timer signal.
const SI_TIMER: i32 = -2;

/// The previous `SIGPROF` disposition, for chaining.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// `CLRPROF_SAMPLER_FLOOR=1`, a benchmark switch: the handler returns at once, so a run measures
/// what the timers and their signals cost without the walk (bench/overhead.sh: the floor).
fn floor_handler() -> bool {
    match std::env::var_os("CLRPROF_SAMPLER_FLOOR") {
        None => false,
        Some(v) if v == "1" => true,
        Some(v) if v == "0" || v.is_empty() => false,
        Some(v) => {
            crate::log_warn!("CLRPROF_SAMPLER_FLOOR={v:?} is not 0 or 1; ignored");
            false
        }
    }
}

/// Installs the `SIGPROF` handler (once), keeping the previous disposition for chaining.
pub(crate) fn install_handler() -> std::io::Result<()> {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    let floor = floor_handler();
    if floor {
        crate::log_info!("sampler: CLRPROF_SAMPLER_FLOOR=1: the signal handler records nothing");
    }
    // Safety: plain sigaction calls with zeroed, then filled, structures.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGPROF, std::ptr::null(), &mut old) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let _ = PREVIOUS.set(old);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = if floor { on_sigprof_floor as *const () as usize } else { on_sigprof as *const () as usize };
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // The signal trampolines of the handlers now installed (this one's, the runtime's): a sample
    // in a signal handler is walked on into the code the signal interrupted.
    if super::sigframe::learn_from_handlers() == 0 {
        crate::log_info!("sampler: no signal trampoline found; samples in signal handlers stop at the handler");
    }
    Ok(())
}

/// Registers the calling thread (`ThreadAssignedToOSThread` runs on it): records its stack bounds
/// and, when `period_ns` is set, starts its CPU-time timer. Returns the slot (None when the table
/// is full) and the reason the timer could not be started, if any.
pub(crate) fn register_current(
    os_tid: u32,
    thread_id: usize,
    period_ns: Option<u64>,
) -> (Option<&'static Slot>, Option<String>) {
    let Some(slot) = claim(os_tid, thread_id) else {
        return (None, Some("sampler thread table is full".into()));
    };
    // Safety: gettid has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    let bounds = if me == os_tid {
        let _ = CURRENT.try_with(|c| c.set(Some(slot)));
        current_stack_bounds()
    } else {
        REGISTERED_ELSEWHERE.fetch_add(1, Ordering::Release);
        stack_bounds_of(os_tid)
    };
    if let Some((lo, hi)) = bounds {
        slot.stack_lo.store(lo, Ordering::Relaxed);
        slot.stack_hi.store(hi, Ordering::Relaxed);
    }
    slot.head.store(0, Ordering::Relaxed);
    slot.tail.store(0, Ordering::Relaxed);
    slot.final_cpu_ns.store(0, Ordering::Relaxed);
    slot.final_runq_ns.store(u64::MAX, Ordering::Relaxed);
    slot.start_cpu_ns.store(slot.cpu_ns().unwrap_or(0), Ordering::Relaxed);
    let Some(period_ns) = period_ns else { return (Some(slot), None) };
    slot.period_ns.store(period_ns.max(1000), Ordering::Relaxed);
    // A thread registered at attach records samples once the sampler lets it (see `probe`).
    slot.probe.store(if me != os_tid { 1 } else { 0 }, Ordering::Release);
    match create_timer(slot, os_tid) {
        Ok(id) => {
            slot.timer.store(id as i64, Ordering::Release);
            (Some(slot), None)
        }
        Err(e) => (Some(slot), Some(format!("timer_create for thread {os_tid}: {e}"))),
    }
}

/// Stops a thread's timer and hands its slot to the sampler for a last drain.
pub(crate) fn unregister(slot: &Slot) {
    let t = slot.timer.swap(-1, Ordering::AcqRel);
    if t >= 0 {
        // Safety: deletes a timer this module created.
        unsafe { libc::syscall(libc::SYS_timer_delete, t as libc::c_long) };
    }
    slot.final_cpu_ns.store(slot.cpu_ns().unwrap_or(0), Ordering::Relaxed);
    let runq = thread_runq_ns(slot.os_tid.load(Ordering::Relaxed)).unwrap_or(u64::MAX);
    slot.final_runq_ns.store(runq, Ordering::Relaxed);
    slot.state.store(DEAD, Ordering::Release);
}

/// Re-arms a live thread's CPU-time timer at `period_ns` (a collection trigger's window, and
/// back): the next signal comes after one new period of the thread's CPU time.
pub(crate) fn rearm(slot: &Slot, period_ns: u64) {
    let period_ns = period_ns.max(1000);
    slot.period_ns.store(period_ns, Ordering::Relaxed);
    let t = slot.timer.load(Ordering::Acquire);
    if t < 0 {
        return;
    }
    let spec = KernelItimerspec { interval: ts_of(period_ns), value: ts_of(period_ns) };
    // Safety: sets a timer this module created; a timer deleted meanwhile makes the call fail
    // with EINVAL, which is ignored.
    unsafe {
        libc::syscall(
            libc::SYS_timer_settime,
            t as libc::c_long,
            0 as libc::c_long,
            &spec as *const KernelItimerspec,
            std::ptr::null_mut::<KernelItimerspec>(),
        );
    }
}

#[repr(C)]
struct KernelItimerspec {
    interval: libc::timespec,
    value: libc::timespec,
}

fn ts_of(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
}

fn create_timer(slot: &'static Slot, tid: u32) -> std::io::Result<i32> {
    // Safety: a zeroed sigevent filled for SIGEV_THREAD_ID; the kernel writes the timer id.
    unsafe {
        let mut sev: libc::sigevent = std::mem::zeroed();
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = libc::SIGPROF;
        sev.sigev_notify_thread_id = tid as libc::c_int;
        sev.sigev_value = libc::sigval { sival_ptr: slot as *const Slot as *mut libc::c_void };
        let mut id: libc::c_int = 0;
        let r = libc::syscall(libc::SYS_timer_create, thread_clock(tid), &mut sev as *mut libc::sigevent, &mut id);
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let period = slot.period_ns.load(Ordering::Relaxed);
        // A random first expiry spreads threads over the period.
        let first = 1 + (next_random(slot) % period);
        let spec = KernelItimerspec { interval: ts_of(period), value: ts_of(first) };
        let r = libc::syscall(
            libc::SYS_timer_settime,
            id as libc::c_long,
            0 as libc::c_long,
            &spec as *const KernelItimerspec,
            std::ptr::null_mut::<KernelItimerspec>(),
        );
        if r != 0 {
            let e = std::io::Error::last_os_error();
            libc::syscall(libc::SYS_timer_delete, id as libc::c_long);
            return Err(e);
        }
        Ok(id)
    }
}

fn next_random(slot: &Slot) -> u64 {
    let mut x = slot.rng.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    slot.rng.store(x, Ordering::Relaxed);
    x
}

/// The `SIGPROF` handler. Async-signal-safe: atomics, plain memory reads validated against the
/// thread's stack bounds, and the raw `timer_settime` system call.
extern "C" fn on_sigprof(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // Safety: the kernel passes a valid siginfo and ucontext to an SA_SIGINFO handler.
    unsafe {
        let errno = *libc::__errno_location();
        if !info.is_null() && (*info).si_code == SI_TIMER {
            let p = (*info).si_value().sival_ptr as *const Slot;
            if !p.is_null() && is_slot(p) && (*p).magic == MAGIC {
                record(&*p, ctx as *const libc::ucontext_t);
                *libc::__errno_location() = errno;
                return;
            }
        }
        chain(sig, info, ctx);
        *libc::__errno_location() = errno;
    }
}

/// The floor's handler: the signal is delivered and returns (`CLRPROF_SAMPLER_FLOOR=1`).
extern "C" fn on_sigprof_floor(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {}

unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(old) = PREVIOUS.get() else { return };
    let h = old.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // The default action of SIGPROF ends the process: never take it for a stray signal.
        return;
    }
    if old.sa_flags & libc::SA_SIGINFO != 0 {
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = std::mem::transmute(h);
        f(sig, info, ctx);
    } else {
        let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
        f(sig);
    }
}
