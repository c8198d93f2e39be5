//! Exact call counts and timings: enter/leave/tailcall hooks (fast path, naked stubs), a
//! function-id mapper that filters what is instrumented, per-thread calling-context trees
//! aggregated in the agent, and periodic deltas streamed by the writer thread.

pub mod clock;
pub mod filter;
#[cfg(target_arch = "x86_64")]
mod stubs;
pub mod thread;

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use clrprof_sys::{monitor, FunctionID, HrResult, ModuleID, ProfilerInfo, BOOL, FALSE, TRUE};
use clrprof_trace::{CallTreeDelta, CallTreeNodes, FlowEvents, FunctionHooked, InstrumentationInfo};

use crate::profiler::{os_tid, State};
use crate::writer::Writer;
use filter::Filter;
use thread::{FuncInfo, ThreadState};

/// Instrumentation settings (from `CLRPROF_INSTRUMENT*`, `CLRPROF_FLOW`, `CLRPROF_INCLUDE`, …).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EltConfig {
    pub enabled: bool,
    /// Measure time (rdtsc per hook); false = call counts only.
    pub timing: bool,
    pub flow: bool,
    pub keep_inlining: bool,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

const MAX_THREADS: usize = 1 << 14;

static THREADS: [AtomicPtr<ThreadState>; MAX_THREADS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_THREADS];
static THREAD_COUNT: AtomicUsize = AtomicUsize::new(0);
static THREADS_DROPPED: AtomicU64 = AtomicU64::new(0);
/// Settings the hooks read (set once in `Initialize`, before any hook can run).
static TIMING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
static FLOW: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static OVERHEAD_TICKS: AtomicU64 = AtomicU64::new(0);
static SUSPEND_START: AtomicU64 = AtomicU64::new(0);

/// The calling thread's state given what the stub read from the TLS slot; created on the
/// thread's first hook (the one allocation per thread).
#[inline(always)]
fn current(ts: *mut ThreadState) -> *mut ThreadState {
    if !ts.is_null() {
        return ts;
    }
    register_thread()
}

#[cold]
fn register_thread() -> *mut ThreadState {
    let slot = THREAD_COUNT.fetch_add(1, Ordering::AcqRel);
    if slot >= MAX_THREADS {
        THREADS_DROPPED.fetch_add(1, Ordering::Relaxed);
        return std::ptr::null_mut();
    }
    let ts = Box::into_raw(Box::new(ThreadState::new(
        os_tid(),
        TIMING.load(Ordering::Relaxed),
        OVERHEAD_TICKS.load(Ordering::Relaxed),
        FLOW.load(Ordering::Relaxed),
    )));
    THREADS[slot].store(ts, Ordering::Release);
    #[cfg(target_arch = "x86_64")]
    stubs::set_current(ts);
    ts
}

pub(crate) extern "C" fn hook_enter(ts: *mut ThreadState, func: *const FuncInfo, sp: usize) {
    let ts = current(ts);
    if !ts.is_null() && !func.is_null() {
        // Safety: `ts` is this thread's own state (only this thread takes `&mut`).
        unsafe { (*ts).enter(func, sp) };
    }
}

pub(crate) extern "C" fn hook_leave(ts: *mut ThreadState, func: *const FuncInfo, sp: usize) {
    let ts = current(ts);
    if !ts.is_null() && !func.is_null() {
        // Safety: as in `hook_enter`.
        unsafe { (*ts).leave(func, sp, thread::FLOW_LEAVE) };
    }
}

pub(crate) extern "C" fn hook_tailcall(ts: *mut ThreadState, func: *const FuncInfo, sp: usize) {
    let ts = current(ts);
    if !ts.is_null() && !func.is_null() {
        // Safety: as in `hook_enter`.
        unsafe { (*ts).leave(func, sp, thread::FLOW_TAILCALL) };
    }
}

/// Measures the hooks' own cost per event (enter or leave) on a private thread state, in ticks.
fn calibrate() -> u64 {
    let info = Box::leak(Box::new(FuncInfo { id: 1, index: 0 }));
    let mut ts = ThreadState::new(0, true, 0, false);
    let n = 50_000u64;
    let mut best = u64::MAX;
    for _ in 0..3 {
        let t0 = clock::ticks();
        for i in 0..n {
            let sp = 0x7000_0000usize - (i as usize & 1) * 64;
            // Safety: `info` is leaked above.
            unsafe {
                ts.enter(info, sp);
                ts.leave(info, sp, thread::FLOW_LEAVE);
            }
        }
        let t1 = clock::ticks();
        best = best.min(t1.saturating_sub(t0) / n / 2);
    }
    best
}

/// Instrumentation state shared with the mapper and the writer.
pub struct Instrumentation {
    pub config: EltConfig,
    filter: Filter,
    clients: Mutex<HashMap<FunctionID, usize>>,
    assemblies: Mutex<HashMap<ModuleID, String>>,
    published: Mutex<Vec<Published>>,
    base_offset_ns: u64,
    base_ticks: u64,
}

#[derive(Default)]
struct Published {
    nodes_sent: u32,
    last: Vec<[u64; 4]>,
    ns_per_tick: f64,
}

impl Instrumentation {
    /// Event-mask bits for instrumentation.
    pub fn mask(config: &EltConfig) -> (u32, u32) {
        if !config.enabled {
            return (0, 0);
        }
        let mut low = monitor::ENTERLEAVE | monitor::SUSPENDS;
        if !config.keep_inlining {
            low |= monitor::DISABLE_INLINING;
        }
        // Tiered compilation stays on: tier-0 code compiles several times faster, which matters
        // because enter/leave hooks make the runtime JIT-compile everything (ReadyToRun images
        // are ignored). Recompiled tiers go through the mapper again (it is idempotent).
        (low, 0)
    }

    pub fn new(config: EltConfig, now_ns: u64) -> (Instrumentation, InstrumentationInfo) {
        let source = clock::init();
        TIMING.store(config.timing, Ordering::Relaxed);
        FLOW.store(config.flow, Ordering::Relaxed);
        let overhead = if config.timing { calibrate() } else { 0 };
        OVERHEAD_TICKS.store(overhead, Ordering::Relaxed);
        let hook_cost_ns = overhead as f64 * clock::ns_per_tick();
        crate::log_info!("instrumentation: clock {source}, calibrated hook cost {hook_cost_ns:.1} ns per event");
        let info = InstrumentationInfo {
            inlining_disabled: !config.keep_inlining,
            tiering_disabled: false,
            ready_to_run_ignored: true,
            profiler_time_subtracted: config.timing,
            counts_only: !config.timing,
            flow: config.flow,
            include: config.include.join(";"),
            exclude: config.exclude.join(";"),
            hook_cost_ns,
        };
        let filter = Filter::new(&config.include, &config.exclude);
        let i = Instrumentation {
            config,
            filter,
            clients: Mutex::new(HashMap::new()),
            assemblies: Mutex::new(HashMap::new()),
            published: Mutex::new(Vec::new()),
            base_offset_ns: now_ns,
            base_ticks: clock::ticks(),
        };
        (i, info)
    }

    /// Registers the mapper and the hooks (Initialize only). `state` must outlive the process.
    pub fn install(info: &ProfilerInfo, state: &'static State) -> HrResult<()> {
        // Safety: the mapper treats its client data as `&'static State`, which `state` is.
        unsafe { info.set_function_id_mapper2(mapper, state as *const State as *mut c_void)? };
        #[cfg(target_arch = "x86_64")]
        {
            let counts_only =
                state.instrumentation.as_ref().map(|i| !i.config.timing && !i.config.flow).unwrap_or(false);
            let (enter, leave, tailcall) = if counts_only {
                (
                    stubs::enter_counts_stub as *const () as usize,
                    stubs::leave_counts_stub as *const () as usize,
                    stubs::tailcall_counts_stub as *const () as usize,
                )
            } else {
                (
                    stubs::enter_stub as *const () as usize,
                    stubs::leave_stub as *const () as usize,
                    stubs::tailcall_stub as *const () as usize,
                )
            };
            info.set_enter_leave_function_hooks3(enter, leave, tailcall)
        }
        // The hook stubs exist for x86_64 System V only.
        #[cfg(not(target_arch = "x86_64"))]
        Err(clrprof_sys::HrError { method: "enter/leave hooks (x86_64 only)", hr: clrprof_sys::E_NOTIMPL })
    }

    fn assembly_of(&self, s: &State, module: ModuleID) -> String {
        if let Some(a) = self.assemblies.lock().ok().and_then(|m| m.get(&module).cloned()) {
            return a;
        }
        let name = s
            .info
            .get_module_info(module)
            .ok()
            .and_then(|(_, _, asm)| s.info.get_assembly_info(asm).ok())
            .map(|(n, _, _)| n)
            .unwrap_or_default();
        if let Ok(mut m) = self.assemblies.lock() {
            m.insert(module, name.clone());
        }
        name
    }

    /// Decides whether `id` gets hooks; returns the client id for the JIT.
    fn map(&self, s: &State, id: FunctionID) -> (usize, bool) {
        if let Some(c) = self.clients.lock().ok().and_then(|m| m.get(&id).copied()) {
            return (c, c != id);
        }
        let names = s.function_names(id);
        let assembly = self.assembly_of(s, names.module);
        let hook = self.filter.matches(&names.name, &names.class_name, &assembly);
        let client = if hook {
            let index = self.clients.lock().map(|m| m.len() as u32).unwrap_or(0);
            Box::into_raw(Box::new(FuncInfo { id, index })) as usize
        } else {
            id
        };
        let mut first = false;
        let client = match self.clients.lock() {
            Ok(mut m) => *m.entry(id).or_insert_with(|| {
                first = true;
                client
            }),
            Err(_) => client,
        };
        if first {
            s.emit(FunctionHooked { id: id as u64, hooked: hook });
        }
        (client, hook)
    }

    /// Publishes new tree nodes, cost deltas and flow events of every thread (writer thread).
    pub fn publish(&self, w: &Writer, now_ns: u64) {
        let k = clock::ns_per_tick();
        let n = THREAD_COUNT.load(Ordering::Acquire).min(MAX_THREADS);
        let Ok(mut published) = self.published.lock() else { return };
        while published.len() < n {
            published.push(Published::default());
        }
        let mut flow = Vec::new();
        for (slot, p) in published.iter_mut().enumerate().take(n) {
            let ts = THREADS[slot].load(Ordering::Acquire);
            if ts.is_null() {
                continue;
            }
            // Safety: thread states are leaked and never freed; the writer only reads atomics
            // and published nodes.
            let ts = unsafe { &*ts };
            p.ns_per_tick = k;
            let count = ts.node_count.load(Ordering::Acquire);
            if count > p.nodes_sent {
                let mut parents = Vec::with_capacity((count - p.nodes_sent) as usize);
                let mut functions = Vec::with_capacity(parents.capacity());
                for i in p.nodes_sent..count {
                    let Some(node) = ts.node(i) else { break };
                    parents.push(node.parent);
                    // Safety: `func` is a leaked FuncInfo (never null for published nodes).
                    functions.push(unsafe { node.func.as_ref() }.map(|f| f.id as u64).unwrap_or(0));
                }
                let first = p.nodes_sent;
                p.nodes_sent += parents.len() as u32;
                w.emit(&CallTreeNodes { os_tid: ts.os_tid, first, parents, functions }.into());
            }
            let sent = p.nodes_sent;
            if p.last.len() < sent as usize {
                p.last.resize(sent as usize, [0; 4]);
            }
            let mut d = CallTreeDelta { os_tid: ts.os_tid, ts: now_ns, ..Default::default() };
            for i in 0..sent {
                let Some(node) = ts.node(i) else { break };
                let cur = [
                    node.calls.load(Ordering::Relaxed),
                    node.excl.load(Ordering::Relaxed),
                    node.susp.load(Ordering::Relaxed),
                    node.prof.load(Ordering::Relaxed),
                ];
                let last = &mut p.last[i as usize];
                if cur != *last {
                    d.nodes.push(i);
                    d.calls.push(cur[0].saturating_sub(last[0]));
                    d.time_ns.push((cur[1].saturating_sub(last[1]) as f64 * k) as u64);
                    d.suspended_ns.push((cur[2].saturating_sub(last[2]) as f64 * k) as u64);
                    d.profiler_ns.push((cur[3].saturating_sub(last[3]) as f64 * k) as u64);
                    *last = cur;
                }
            }
            if !d.nodes.is_empty() {
                w.emit(&d.into());
            }
            if let Some(ring) = &ts.flow {
                flow.clear();
                ring.drain(&mut flow);
                let dropped = ring.dropped.swap(0, Ordering::Relaxed);
                if !flow.is_empty() || dropped > 0 {
                    let mut fe = FlowEvents { os_tid: ts.os_tid, dropped, ..Default::default() };
                    for &(kind, func, t) in &flow {
                        fe.kinds.push(kind);
                        fe.functions.push(func);
                        fe.ts.push(self.base_offset_ns + (t.saturating_sub(self.base_ticks) as f64 * k) as u64);
                    }
                    w.emit(&fe.into());
                }
            }
            let over = ts.overflowed.swap(0, Ordering::Relaxed);
            if over > 0 {
                crate::log_warn!("thread {}: {over} calls not recorded (call tree full or stack too deep)", ts.os_tid);
            }
        }
        let lost = THREADS_DROPPED.swap(0, Ordering::Relaxed);
        if lost > 0 {
            crate::log_warn!("{lost} threads not instrumented (more than {MAX_THREADS} threads)");
        }
    }

    pub fn suspend_started() {
        SUSPEND_START.store(clock::ticks(), Ordering::Relaxed);
    }

    pub fn resume_finished() {
        let start = SUSPEND_START.swap(0, Ordering::Relaxed);
        if start != 0 {
            let d = clock::ticks().saturating_sub(start);
            thread::SUSPENDED_TICKS.fetch_add(d, Ordering::Relaxed);
        }
    }
}

/// `FunctionIDMapper2`: hook a function or not, and give it its client id.
unsafe extern "system" fn mapper(id: FunctionID, data: *mut c_void, hook: *mut BOOL) -> usize {
    let r = std::panic::catch_unwind(|| {
        // Safety: `data` is the `&'static State` registered in `install`.
        let s = unsafe { &*(data as *const State) };
        match s.instrumentation.as_ref() {
            Some(i) => i.map(s, id),
            None => (id, false),
        }
    });
    let (client, hooked) = r.unwrap_or((id, false));
    if !hook.is_null() {
        // Safety: the runtime passes a writable BOOL.
        unsafe { *hook = if hooked { TRUE } else { FALSE } };
    }
    client
}

/// Hook bodies driven directly, for `benches/hooks.rs` and calibration checks.
pub mod bench_support {
    use super::clock;
    use super::thread::{FuncInfo, ThreadState, FLOW_LEAVE};

    /// Average ns of one enter+leave pair on a private thread state (three functions in a loop).
    pub fn pair_cost_ns(n: u64, timing: bool) -> f64 {
        clock::init();
        let funcs: Vec<&'static FuncInfo> =
            (0..3).map(|i| &*Box::leak(Box::new(FuncInfo { id: i + 1, index: i as u32 }))).collect();
        let mut ts = ThreadState::new(0, timing, 0, false);
        let root = funcs[0] as *const FuncInfo;
        // Safety (all calls below): the FuncInfo records are leaked above.
        unsafe { ts.enter(root, 0x7000_0000) };
        let t0 = std::time::Instant::now();
        for i in 0..n {
            let f = funcs[1 + (i as usize & 1)] as *const FuncInfo;
            unsafe {
                ts.enter(f, 0x6fff_ff00);
                ts.leave(f, 0x6fff_ff00, FLOW_LEAVE);
            }
        }
        t0.elapsed().as_nanos() as f64 / n as f64
    }

    /// Average ns of one `rdtsc` (or clock read when the TSC is not usable).
    pub fn rdtsc_cost_ns(n: u64) -> f64 {
        clock::init();
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        for _ in 0..n {
            x = x.wrapping_add(clock::ticks());
        }
        std::hint::black_box(x);
        t0.elapsed().as_nanos() as f64 / n as f64
    }
}
