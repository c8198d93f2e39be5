//! Hook bodies driven directly, for `benches/hooks.rs` and calibration checks.

use super::clock;

/// The calling thread's CPU time in ns: unlike wall time, it leaves out the time the thread
/// waited for a CPU, which dominates on a loaded machine.
pub fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: a valid clock id and a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
use super::thread::{FuncInfo, ThreadState, FLOW_LEAVE};

/// Average ns of one enter+leave pair on a private thread state (three functions in a loop).
pub fn pair_cost_ns(n: u64, timing: bool) -> f64 {
    clock::init();
    let funcs: Vec<&'static FuncInfo> =
        (0..3).map(|i| &*Box::leak(Box::new(FuncInfo { id: i + 1, index: i as u32 }))).collect();
    let mut ts = ThreadState::new(0, timing, 0, false);
    let root = funcs[0] as *const FuncInfo;
    // Safety (all calls below): the FuncInfo records are leaked above.
    unsafe { ts.enter(root, 0x7000_0000, 0x1234) };
    let t0 = thread_cpu_ns();
    for i in 0..n {
        let f = funcs[1 + (i as usize & 1)] as *const FuncInfo;
        unsafe {
            ts.enter(f, 0x6fff_ff00, 0x5678);
            ts.leave(f, 0x6fff_ff00, FLOW_LEAVE);
        }
    }
    (thread_cpu_ns() - t0) as f64 / n as f64
}

/// Average ns of one enter+leave pair through the stubs the runtime gets for this mode (the
/// fast stubs when they apply), called as JIT-compiled code calls them, on a private thread
/// state: the same callee every time, the case the fast paths handle.
#[cfg(target_arch = "x86_64")]
pub fn stub_pair_cost_ns(n: u64, timing: bool) -> f64 {
    clock::init();
    let funcs: Vec<&'static FuncInfo> =
        (0..2).map(|i| &*Box::leak(Box::new(FuncInfo { id: i + 1, index: i as u32 }))).collect();
    let ts = Box::into_raw(Box::new(ThreadState::new(0, timing, 0, false)));
    let prev = super::tls::current();
    super::tls::set_current(ts);
    let [enter, leave, _] = super::hook_stubs(timing, false);
    let (root, f) = (funcs[0] as *const FuncInfo, funcs[1] as *const FuncInfo);
    // A stack with return addresses where the stubs read the call sites (below each SP).
    let mut frames = [0usize; 64];
    frames[47] = 0x1234;
    frames[31] = 0x5678;
    let (outer, inner) = (frames.as_ptr() as usize + 48 * 8, frames.as_ptr() as usize + 32 * 8);
    // Safety (all calls below): the FuncInfo records and `ts` are leaked above; the TLS slot
    // points to `ts` until restored; the SPs point into `frames`.
    unsafe { super::stubs::call_enter(enter, root, outer) };
    let t0 = thread_cpu_ns();
    for _ in 0..n {
        unsafe {
            super::stubs::call_enter(enter, f, inner);
            super::stubs::call_leave(leave, f, inner);
        }
    }
    let ns = (thread_cpu_ns() - t0) as f64 / n as f64;
    super::tls::set_current(prev);
    std::hint::black_box(&mut frames);
    ns
}

/// Average ns of one `rdtsc` (or clock read when the TSC is not usable).
pub fn rdtsc_cost_ns(n: u64) -> f64 {
    clock::init();
    let t0 = thread_cpu_ns();
    let mut x = 0u64;
    for _ in 0..n {
        x = x.wrapping_add(clock::ticks());
    }
    std::hint::black_box(x);
    (thread_cpu_ns() - t0) as f64 / n as f64
}
