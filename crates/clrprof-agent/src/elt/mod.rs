//! Exact call counts and timings: enter/leave/tailcall hooks (fast path, naked stubs), a
//! function-id mapper that filters what is instrumented, per-thread calling-context trees
//! aggregated in the agent, and periodic deltas streamed by the writer thread.

pub mod clock;
pub mod filter;
#[cfg(target_arch = "x86_64")]
pub(crate) mod stubs;
pub mod thread;

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use clrprof_sys::{monitor, FunctionID, HrResult, ModuleID, ProfilerInfo, BOOL, FALSE, TRUE};
use clrprof_trace::{CallTreeCosts, CallTreeDelta, CallTreeNodes, FlowEvents, FunctionHooked, InstrumentationInfo};

use crate::config::EltConfig;
use crate::context::Context;
use crate::os::os_tid;
use crate::writer::Writer;
use filter::Filter;
use thread::{FuncInfo, ThreadState};

/// Threads instrumented at once, at most (a slot is reused once its thread ended and the writer
/// published it).
const MAX_THREADS: usize = 1 << 14;
/// Finished states kept for reuse, at most (the rest are freed).
const MAX_SPARES: usize = 64;

/// The states of instrumented threads, by slot: live, or finished and not yet published for the
/// last time (null: free). Only `register_thread` fills a slot and only the writer empties it.
static THREADS: [AtomicPtr<ThreadState>; MAX_THREADS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_THREADS];
/// Slots ever used (the writer looks at these).
static THREAD_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Threads not instrumented because `MAX_THREADS` were at once (since the last publication).
static THREADS_DROPPED: AtomicU64 = AtomicU64::new(0);
/// Hooks that ran on a thread after its exit guard (not recorded; since the last publication).
static LATE_HOOKS: AtomicU64 = AtomicU64::new(0);
/// The next calling-context tree number (`ThreadState::tree`).
static NEXT_TREE: AtomicU32 = AtomicU32::new(1);
/// Free slots below `THREAD_COUNT` and finished states kept for reuse, handed back by the writer.
static RECYCLED: Mutex<Recycled> = Mutex::new(Recycled { slots: Vec::new(), spares: Vec::new() });

struct Recycled {
    slots: Vec<u32>,
    /// `*mut ThreadState`, recycled (clean) and used by no thread.
    spares: Vec<usize>,
}

/// `ExitGuard` value of a thread that gets no state (too many threads at once).
const NOT_INSTRUMENTED: usize = 1;

/// Ends a thread's instrumentation when its OS thread exits: a thread-local destructor, which
/// runs on the thread itself after the runtime has torn the thread down (no managed code runs
/// after it). Holds the thread's state pointer (0: none yet; `NOT_INSTRUMENTED`).
struct ExitGuard(Cell<usize>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let p = self.0.replace(0);
        // Hooks that would still run find no state and do not make one (`register_thread`).
        #[cfg(target_arch = "x86_64")]
        stubs::set_current(std::ptr::null_mut());
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
static TIMING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
static FLOW: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static OVERHEAD_TICKS: AtomicU64 = AtomicU64::new(0);
static SUSPEND_START: AtomicU64 = AtomicU64::new(0);

/// The calling thread's state given what the stub read from the TLS slot; created (or a recycled
/// one taken) on the thread's first hook.
#[inline(always)]
fn current(ts: *mut ThreadState) -> *mut ThreadState {
    if !ts.is_null() {
        return ts;
    }
    register_thread()
}

/// Gives the calling thread a state in a free slot and arranges for it to be handed back when the
/// thread exits. The process's main thread keeps its state to the end: its thread-local
/// destructors run inside `exit`, before handlers that may still run managed code.
#[cold]
fn register_thread() -> *mut ThreadState {
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
    stubs::set_current(ts);
    ts
}

/// Hands a finished state's slot back and keeps the state for reuse (or frees it). Writer thread,
/// after the state's last publication, once its slot no longer points to it.
fn retire(slot: usize, ts: *mut ThreadState) {
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

pub(crate) extern "C" fn hook_enter(ts: *mut ThreadState, func: *const FuncInfo, sp: usize) {
    #[cfg(test)]
    tests::SLOW_HOOKS.with(|c| c.set(c.get() + 1));
    let ts = current(ts);
    if !ts.is_null() && !func.is_null() {
        // Safety: `ts` is this thread's own state (only this thread takes `&mut`).
        unsafe { (*ts).enter(func, sp) };
    }
}

pub(crate) extern "C" fn hook_leave(ts: *mut ThreadState, func: *const FuncInfo, sp: usize) {
    #[cfg(test)]
    tests::SLOW_HOOKS.with(|c| c.set(c.get() + 1));
    let ts = current(ts);
    if !ts.is_null() && !func.is_null() {
        // Safety: as in `hook_enter`.
        unsafe { (*ts).leave(func, sp, thread::FLOW_LEAVE) };
    }
}

pub(crate) extern "C" fn hook_tailcall(ts: *mut ThreadState, func: *const FuncInfo, sp: usize) {
    #[cfg(test)]
    tests::SLOW_HOOKS.with(|c| c.set(c.get() + 1));
    let ts = current(ts);
    if !ts.is_null() && !func.is_null() {
        // Safety: as in `hook_enter`.
        unsafe { (*ts).leave(func, sp, thread::FLOW_TAILCALL) };
    }
}

/// The enter, leave and tailcall stubs for a configuration: the fast stubs where they apply
/// (counts only; timing with the TSC as the clock), else the full ones. Flow always takes the
/// full path.
#[cfg(target_arch = "x86_64")]
fn hook_stubs(timing: bool, flow: bool) -> [unsafe extern "C" fn(); 3] {
    match (timing, flow) {
        (false, false) => [stubs::enter_counts_stub, stubs::leave_counts_stub, stubs::tailcall_counts_stub],
        (true, false) if clock::is_tsc() => {
            [stubs::enter_timing_stub, stubs::leave_timing_stub, stubs::tailcall_timing_stub]
        }
        _ => [stubs::enter_stub, stubs::leave_stub, stubs::tailcall_stub],
    }
}

/// Measures the hooks' own cost per event (enter or leave), in ticks: the stubs the runtime will
/// call (fast or full, as `hook_stubs` picks them), called as JIT-compiled code calls them, on a
/// private thread state. Each event's cost lands in the time between two clock reads, so this is
/// what `charge` moves from exclusive to profiler time.
fn calibrate(flow: bool) -> u64 {
    let info = Box::leak(Box::new(FuncInfo { id: 1, index: 0 }));
    // Flow's ring is left out: the calibration would only fill it.
    let mut ts = ThreadState::new(0, true, 0, false);
    #[cfg(target_arch = "x86_64")]
    let (prev, [enter, leave, _]) = {
        let prev = stubs::current();
        stubs::set_current(&mut ts);
        (prev, hook_stubs(true, flow))
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = flow;
    let n = 50_000u64;
    let mut best = u64::MAX;
    for _ in 0..3 {
        let t0 = clock::ticks();
        for i in 0..n {
            let sp = 0x7000_0000usize - (i as usize & 1) * 64;
            // Safety: `info` is leaked above; the TLS slot points to `ts`, alive until restored.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                stubs::call_enter(enter, info, sp);
                stubs::call_leave(leave, info, sp);
            }
            // Safety: `info` is leaked above.
            #[cfg(not(target_arch = "x86_64"))]
            unsafe {
                ts.enter(info, sp);
                ts.leave(info, sp, thread::FLOW_LEAVE);
            }
        }
        let t1 = clock::ticks();
        best = best.min(t1.saturating_sub(t0) / n / 2);
    }
    #[cfg(target_arch = "x86_64")]
    stubs::set_current(prev);
    best
}

/// Instrumentation state shared with the mapper and the writer.
pub struct Instrumentation {
    pub config: EltConfig,
    filter: Filter,
    clients: Mutex<HashMap<FunctionID, usize>>,
    assemblies: Mutex<HashMap<ModuleID, String>>,
    published: Mutex<Vec<Published>>,
    /// When cost deltas were last published (`DELTA_INTERVAL_NS`).
    last_deltas_ns: AtomicU64,
    base_offset_ns: u64,
    base_ticks: u64,
    /// The recorders' context, for the mapper (set by [`Instrumentation::install`]).
    cx: std::sync::OnceLock<&'static Context>,
}

#[derive(Default)]
struct Published {
    nodes_sent: u32,
    last: Vec<[u64; 4]>,
    ns_per_tick: f64,
}

/// Cost deltas are published at most this often (and when a thread ends, and at the end): a busy
/// server changes thousands of nodes every flush, and deltas every flush made megabytes a second.
/// New nodes are still published every flush. A crash loses at most this long of counts.
pub const DELTA_INTERVAL_NS: u64 = 1_000_000_000;

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
        let overhead = if config.timing { calibrate(config.flow) } else { 0 };
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
            last_deltas_ns: AtomicU64::new(now_ns),
            base_offset_ns: now_ns,
            base_ticks: clock::ticks(),
            cx: std::sync::OnceLock::new(),
        };
        (i, info)
    }

    /// Registers the mapper and the hooks (Initialize only). `self` and `cx` must outlive the
    /// process.
    pub fn install(&'static self, info: &ProfilerInfo, cx: &'static Context) -> HrResult<()> {
        let _ = self.cx.set(cx);
        // Safety: the mapper treats its client data as `&'static Instrumentation`, which `self` is.
        unsafe { info.set_function_id_mapper2(mapper, self as *const Instrumentation as *mut c_void)? };
        #[cfg(target_arch = "x86_64")]
        {
            let [enter, leave, tailcall] = hook_stubs(self.config.timing, self.config.flow).map(|f| f as usize);
            info.set_enter_leave_function_hooks3(enter, leave, tailcall)
        }
        // The hook stubs exist for x86_64 System V only.
        #[cfg(not(target_arch = "x86_64"))]
        Err(clrprof_sys::HrError { method: "enter/leave hooks (x86_64 only)", hr: clrprof_sys::E_NOTIMPL })
    }

    fn assembly_of(&self, s: &Context, module: ModuleID) -> String {
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
    fn map(&self, s: &Context, id: FunctionID) -> (usize, bool) {
        if let Some(c) = self.clients.lock().ok().and_then(|m| m.get(&id).copied()) {
            return (c, c != id);
        }
        // The mapper runs on the compiling thread: names are resolved here only when a filter needs
        // them (the writer names every compiled function anyway, off the program's threads).
        let hook = self.filter.takes_all() || {
            let names = s.function_names(id);
            let assembly = self.assembly_of(s, names.module);
            self.filter.matches(&names.name, &names.class_name, &assembly)
        };
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
    /// A thread that has ended is published once more, with its final counts, and its slot and
    /// state are recycled: the writer is the only reader of states, so none is reused while read.
    pub fn publish(&self, w: &Writer, now_ns: u64) {
        let k = clock::ns_per_tick();
        let n = THREAD_COUNT.load(Ordering::Acquire).min(MAX_THREADS);
        let Ok(mut published) = self.published.lock() else { return };
        while published.len() < n {
            published.push(Published::default());
        }
        let mut flow = Vec::new();
        let all_deltas = w.wants_everything()
            || now_ns.saturating_sub(self.last_deltas_ns.load(Ordering::Relaxed)) >= DELTA_INTERVAL_NS;
        if all_deltas {
            self.last_deltas_ns.store(now_ns, Ordering::Relaxed);
        }
        for (slot, p) in published.iter_mut().enumerate().take(n) {
            let ptr = THREADS[slot].load(Ordering::Acquire);
            if ptr.is_null() {
                continue;
            }
            // Safety: a state in a slot is freed or reused only below, by this thread; the writer
            // only reads atomics, published nodes and fields set before the slot was filled.
            let ts = unsafe { &*ptr };
            // Before the counters: a state seen finished has its final counts.
            let finished = ts.is_finished();
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
                w.emit(&CallTreeNodes { os_tid: ts.os_tid, first, parents, functions, tree: ts.tree }.into());
            }
            let sent = p.nodes_sent;
            if p.last.len() < sent as usize {
                p.last.resize(sent as usize, [0; 4]);
            }
            if !(all_deltas || finished) {
                self.publish_flow(w, ts, &mut flow, k);
                continue;
            }
            let mut d = CallTreeDelta { os_tid: ts.os_tid, ts: now_ns, tree: ts.tree, ..Default::default() };
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
                // Nodes ascend, so the delta always packs.
                match CallTreeCosts::pack(&d) {
                    Some(c) => w.emit(&c.into()),
                    None => w.emit(&d.into()),
                }
            }
            self.publish_flow(w, ts, &mut flow, k);
            let over = ts.overflowed.swap(0, Ordering::Relaxed);
            if over > 0 {
                // In the trace too: the counts of that thread are low, and the reader must say so.
                let text = format!(
                    "thread {}: {over} calls not recorded (call tree full, or stack deeper than {} calls)",
                    ts.os_tid,
                    thread::MAX_DEPTH
                );
                crate::log_warn!("{text}");
                w.emit(&clrprof_trace::Message { ts: now_ns, level: 1, text }.into());
            }
            if finished {
                THREADS[slot].store(std::ptr::null_mut(), Ordering::Release);
                *p = Published::default();
                retire(slot, ptr);
            }
        }
        let lost = THREADS_DROPPED.swap(0, Ordering::Relaxed);
        if lost > 0 {
            let text = format!(
                "{lost} threads not instrumented, their calls not recorded (more than {MAX_THREADS} threads at once)"
            );
            crate::log_warn!("{text}");
            w.emit(&clrprof_trace::Message { ts: now_ns, level: 1, text }.into());
        }
        let late = LATE_HOOKS.swap(0, Ordering::Relaxed);
        if late > 0 {
            crate::log_warn!("{late} calls not recorded (made by threads after their end was seen)");
        }
    }

    /// Publishes the thread's flow events (`--flow`), every flush.
    fn publish_flow(&self, w: &Writer, ts: &ThreadState, flow: &mut Vec<(u8, u64, u64)>, k: f64) {
        let Some(ring) = &ts.flow else { return };
        flow.clear();
        ring.drain(flow);
        let dropped = ring.dropped.swap(0, Ordering::Relaxed);
        if !flow.is_empty() || dropped > 0 {
            let mut fe = FlowEvents { os_tid: ts.os_tid, dropped, ..Default::default() };
            for &(kind, func, t) in flow.iter() {
                fe.kinds.push(kind);
                fe.functions.push(func);
                fe.ts.push(self.base_offset_ns + (t.saturating_sub(self.base_ticks) as f64 * k) as u64);
            }
            w.emit(&fe.into());
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
        // Safety: `data` is the `&'static Instrumentation` registered in `install`.
        let i = unsafe { &*(data as *const Instrumentation) };
        match i.cx.get() {
            Some(cx) => i.map(cx, id),
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
        unsafe { ts.enter(root, 0x7000_0000) };
        let t0 = thread_cpu_ns();
        for i in 0..n {
            let f = funcs[1 + (i as usize & 1)] as *const FuncInfo;
            unsafe {
                ts.enter(f, 0x6fff_ff00);
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
        let prev = super::stubs::current();
        super::stubs::set_current(ts);
        let [enter, leave, _] = super::hook_stubs(timing, false);
        let (root, f) = (funcs[0] as *const FuncInfo, funcs[1] as *const FuncInfo);
        // Safety (all calls below): the FuncInfo records and `ts` are leaked above; the TLS slot
        // points to `ts` until restored.
        unsafe { super::stubs::call_enter(enter, root, 0x7000_0000) };
        let t0 = thread_cpu_ns();
        for _ in 0..n {
            unsafe {
                super::stubs::call_enter(enter, f, 0x6fff_ff00);
                super::stubs::call_leave(leave, f, 0x6fff_ff00);
            }
        }
        let ns = (thread_cpu_ns() - t0) as f64 / n as f64;
        super::stubs::set_current(prev);
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
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    thread_local! {
        /// Calls of the Rust hooks on this thread (the stubs' slow path, or tests calling them).
        pub static SLOW_HOOKS: Cell<u64> = const { Cell::new(0) };
    }

    #[cfg(target_arch = "x86_64")]
    mod x86_64 {
        use super::super::thread::{
            FuncInfo, Snapshot, ThreadState, FAST_COUNTS, FAST_SEARCH, FAST_TIMING, MAX_DEPTH, SUSPENDED_TICKS,
        };
        use super::super::{clock, hook_enter, hook_leave, hook_tailcall, stubs};
        use super::SLOW_HOOKS;
        use core::arch::x86_64::__m128i;
        use std::sync::atomic::Ordering;
        use std::sync::Mutex;

        /// The tests below share `SUSPENDED_TICKS` (one of them moves it): one at a time.
        static SERIAL: Mutex<()> = Mutex::new(());

        /// A small deterministic generator (xorshift64*).
        struct Rng(u64);

        impl Rng {
            fn next(&mut self) -> u64 {
                self.0 ^= self.0 >> 12;
                self.0 ^= self.0 << 25;
                self.0 ^= self.0 >> 27;
                self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
            }

            fn below(&mut self, n: u64) -> u64 {
                self.next() % n
            }
        }

        #[derive(Clone, Copy, Debug)]
        enum Ev {
            Enter(*const FuncInfo, usize),
            Leave(*const FuncInfo, usize),
            Tail(*const FuncInfo, usize),
        }

        /// One scripted step: the event, how far the clock moves before it (wrapping: sometimes
        /// backwards) and how many suspended ticks the runtime reports before it.
        struct Step {
            ev: Ev,
            advance: u64,
            suspended: u64,
        }

        fn funcs(n: usize) -> Vec<*const FuncInfo> {
            (0..n)
                .map(|i| Box::leak(Box::new(FuncInfo { id: 0x1000 + i, index: i as u32 })) as *const FuncInfo)
                .collect()
        }

        /// Call sequences as the JIT produces them — mostly the same callees again (the fast path),
        /// loops calling several callees in turn (fan-out up to 13, beyond the stubs' search
        /// window, sometimes with a nested call), new callees, tail calls, frames unwound by
        /// exceptions without leave hooks,
        /// mismatched and null ids, suspensions, deep recursion across the shadow stack's growth,
        /// and clock steps below, around and far above the per-event overhead.
        fn script(seed: u64, n: usize, f: &[*const FuncInfo]) -> Vec<Step> {
            let mut r = Rng(seed);
            let mut stack: Vec<(*const FuncInfo, usize)> = Vec::new();
            let mut last_callee = vec![f[0]; 4096];
            let mut out = Vec::new();
            let base = 0x7000_0000usize;
            while out.len() < n {
                let top_sp = stack.last().map(|e| e.1).unwrap_or(base);
                let depth = stack.len();
                let callee = |r: &mut Rng, last: &mut Vec<*const FuncInfo>| {
                    let c = if r.below(10) < 8 { last[depth] } else { f[r.below(f.len() as u64) as usize] };
                    last[depth] = c;
                    c
                };
                let mut evs = Vec::new();
                match r.below(100) {
                    0..=4 => {
                        // A loop calling k callees in turn (a serializer calling its getters).
                        let k = 1 + r.below(13) as usize;
                        let off = r.below(f.len() as u64) as usize;
                        let sp = top_sp - 64;
                        for _ in 0..1 + r.below(6) {
                            for j in 0..k {
                                let c = f[(off + j) % f.len()];
                                evs.push(Ev::Enter(c, sp));
                                if r.below(4) == 0 {
                                    let d = f[r.below(f.len() as u64) as usize];
                                    evs.push(Ev::Enter(d, sp - 64));
                                    evs.push(Ev::Leave(d, sp - 64));
                                }
                                evs.push(Ev::Leave(c, sp));
                            }
                        }
                    }
                    5..=44 => {
                        let c = callee(&mut r, &mut last_callee);
                        let sp = top_sp - 64;
                        stack.push((c, sp));
                        evs.push(Ev::Enter(c, sp));
                    }
                    45..=84 => {
                        if let Some((c, sp)) = stack.pop() {
                            evs.push(Ev::Leave(c, sp));
                        }
                    }
                    85..=88 => {
                        if let Some((c, sp)) = stack.pop() {
                            evs.push(Ev::Tail(c, sp));
                            let d = callee(&mut r, &mut last_callee);
                            stack.push((d, sp));
                            evs.push(Ev::Enter(d, sp));
                        }
                    }
                    89..=91 => {
                        // An exception unwinds frames: no leave hooks for them.
                        for _ in 0..=r.below(3) {
                            stack.pop();
                        }
                    }
                    92..=93 => {
                        if let Some(&(c, sp)) = stack.last() {
                            let other = f[r.below(f.len() as u64) as usize];
                            let sp = if r.below(2) == 0 { sp } else { sp + 64 * (1 + r.below(3) as usize) };
                            evs.push(if other == c { Ev::Leave(std::ptr::null(), sp) } else { Ev::Leave(other, sp) });
                        }
                    }
                    94 => evs.push(Ev::Enter(std::ptr::null(), top_sp - 64)),
                    95 => {
                        // Deep recursion: past the stack's initial capacity and its growth.
                        let c = f[0];
                        let k = 200 + r.below(700) as usize;
                        for _ in 0..k {
                            let sp = stack.last().map(|e| e.1).unwrap_or(base) - 64;
                            stack.push((c, sp));
                            evs.push(Ev::Enter(c, sp));
                        }
                        for _ in 0..k {
                            if let Some((c, sp)) = stack.pop() {
                                evs.push(Ev::Leave(c, sp));
                            }
                        }
                    }
                    _ => {
                        let c = callee(&mut r, &mut last_callee);
                        evs.push(Ev::Enter(c, top_sp - 64));
                        stack.push((c, top_sp - 64));
                    }
                }
                for ev in evs {
                    let advance = match r.below(100) {
                        0..=9 => 0,
                        10..=79 => r.below(200),
                        80..=97 => r.below(100_000),
                        98 => 1 << 40,
                        _ => 100u64.wrapping_neg(),
                    };
                    let suspended = if r.below(100) < 3 { 1 + r.below(500) } else { 0 };
                    out.push(Step { ev, advance, suspended });
                }
            }
            out
        }

        /// Runs the script through the Rust hooks on one state and through `stubs` (called as
        /// the JIT calls them, falling back to the same Rust hooks) on another, with the same
        /// scripted clock; both must account every event identically. Returns how many events
        /// the stubs handled without the Rust hooks.
        fn lockstep(timing: bool, fast: u8, stubs_: [unsafe extern "C" fn(); 3], seed: u64) -> u64 {
            let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
            let f = funcs(14);
            let steps = script(seed, 40_000, &f);
            let mut now = 1_000_000_000u64;
            stubs::set_fake_ticks(now);
            let a = Box::into_raw(Box::new(ThreadState::new(1, timing, 50, false)));
            let b = Box::into_raw(Box::new(ThreadState::new(1, timing, 50, false)));
            // Safety (this function): `a` and `b` are leaked states only this thread uses; the
            // TLS slot points to `b` until restored; every FuncInfo is leaked.
            unsafe { (*b).set_fast(fast) };
            let prev = stubs::current();
            stubs::set_current(b);
            let [enter, leave, tailcall] = stubs_;
            let mut fast_events = 0;
            for (i, s) in steps.iter().enumerate() {
                now = now.wrapping_add(s.advance).max(1);
                stubs::set_fake_ticks(now);
                if s.suspended > 0 {
                    SUSPENDED_TICKS.fetch_add(s.suspended, Ordering::Relaxed);
                }
                let slow = SLOW_HOOKS.with(|c| c.get());
                unsafe {
                    match s.ev {
                        Ev::Enter(func, sp) => {
                            stubs::call_enter(enter, func, sp);
                            hook_enter(a, func, sp);
                        }
                        Ev::Leave(func, sp) => {
                            stubs::call_leave(leave, func, sp);
                            hook_leave(a, func, sp);
                        }
                        Ev::Tail(func, sp) => {
                            stubs::call_leave(tailcall, func, sp);
                            hook_tailcall(a, func, sp);
                        }
                    }
                }
                // One Rust call for the reference; a second one when the stub fell back.
                if SLOW_HOOKS.with(|c| c.get()) == slow + 1 {
                    fast_events += 1;
                }
                if i % 7 == 0 || i + 1 == steps.len() {
                    let (sa, sb): (Snapshot, Snapshot) = unsafe { ((*a).snapshot(), (*b).snapshot()) };
                    assert_eq!(sa, sb, "after step {i}: {:?}", s.ev);
                }
            }
            stubs::set_current(prev);
            stubs::set_fake_ticks(0);
            let sb = unsafe { (*b).snapshot() };
            assert!(sb.nodes.len() > 20, "the script builds a real tree: {} nodes", sb.nodes.len());
            assert!(sb.stack.len() < MAX_DEPTH);
            fast_events
        }

        #[test]
        fn timing_fast_stubs_account_exactly_like_the_rust_hooks() {
            let stubs_ = [stubs::enter_scripted_stub, stubs::leave_scripted_stub, stubs::tailcall_scripted_stub];
            for seed in [1, 0x9e37_79b9_7f4a_7c15, 42] {
                let fast = lockstep(true, FAST_TIMING, stubs_, seed);
                assert!(fast > 15_000, "the fast path handled {fast} of 40,000+ events");
            }
            // With the fast path switched off on the thread, the stubs only fall back.
            assert_eq!(lockstep(true, 0, stubs_, 7), 0);
        }

        /// Runs a script through the Rust hooks on `ts` with a scripted clock starting at `t0`.
        fn run_script(ts: *mut ThreadState, steps: &[Step], t0: u64) {
            let mut now = t0;
            for s in steps {
                now = now.wrapping_add(s.advance).max(1);
                stubs::set_fake_ticks(now);
                // Safety: `ts` is a live state only this thread uses; every FuncInfo is leaked.
                match s.ev {
                    Ev::Enter(func, sp) => hook_enter(ts, func, sp),
                    Ev::Leave(func, sp) => hook_leave(ts, func, sp),
                    Ev::Tail(func, sp) => hook_tailcall(ts, func, sp),
                }
            }
        }

        /// A state recycled after a big tree (several chunks, a deep shadow stack, overflowed
        /// and far-find counters) accounts a script exactly as a new state does.
        #[test]
        fn a_recycled_state_starts_clean() {
            let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
            let f = funcs(14);
            let big = script(5, 60_000, &f);
            let steps = script(1, 20_000, &f);
            let t0 = 1_000_000_000u64;
            for timing in [true, false] {
                stubs::set_fake_ticks(t0);
                let fresh = Box::into_raw(Box::new(ThreadState::new(9, timing, 50, false)));
                let used = Box::into_raw(Box::new(ThreadState::new(3, timing, 50, false)));
                // Safety (this loop): both states are leaked and only this thread uses them.
                unsafe { (*used).start(3, 1) };
                run_script(used, &big, t0);
                let before = unsafe { (*used).snapshot() };
                assert!(before.nodes.len() > 600, "the big script fills several chunks: {}", before.nodes.len());
                unsafe {
                    (*used).finish();
                    assert!((*used).is_finished());
                    (*used).recycle();
                    stubs::set_fake_ticks(t0);
                    (*used).start(9, 2);
                    (*fresh).start(9, 2);
                    assert!(!(*used).is_finished());
                    assert_eq!((*used).snapshot(), (*fresh).snapshot());
                }
                run_script(fresh, &steps, t0);
                run_script(used, &steps, t0);
                let (a, b) = unsafe { ((*fresh).snapshot(), (*used).snapshot()) };
                assert_eq!(a, b, "timing = {timing}");
                assert!(a.nodes.len() > 20);
                // Freed (chunks and stack) without touching freed memory.
                unsafe { drop(Box::from_raw(used)) };
            }
            stubs::set_fake_ticks(0);
        }

        /// Threads that start and end in rounds, publishing as they run: every call is published
        /// exactly once (each thread's tree under its own number), slots and states are reused,
        /// and no more slots are used than threads alive at once.
        #[test]
        fn ended_threads_are_published_once_and_their_states_reused() {
            use super::super::{EltConfig, Instrumentation, RECYCLED, THREADS, THREAD_COUNT};
            use crate::writer::{Sink, Writer};
            use clrprof_trace::Record;
            use std::collections::{HashMap, HashSet};

            let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
            let path = std::env::temp_dir().join(format!("clrprof-elt-threads-{}.clrprof", std::process::id()));
            let w = Writer::new(Sink::File(std::fs::File::create(&path).unwrap()), std::time::Duration::from_secs(60))
                .unwrap();
            let config = EltConfig { enabled: true, timing: false, ..Default::default() };
            let (instr, _) = Instrumentation::new(config, 0);
            let f: Vec<usize> = funcs(2).into_iter().map(|p| p as usize).collect();
            let (rounds, per_round, k) = (6, 40, 25u64);
            for _ in 0..rounds {
                let handles: Vec<_> = (0..per_round)
                    .map(|i| {
                        let f = f.clone();
                        std::thread::spawn(move || {
                            let (root, g) = (f[0] as *const FuncInfo, f[1] as *const FuncInfo);
                            let base = 0x7000_0000usize;
                            // Safety: the FuncInfo records are leaked; the stubs find (or make)
                            // this thread's state through its TLS slot.
                            unsafe {
                                stubs::call_enter(stubs::enter_counts_stub, root, base);
                                for _ in 0..k {
                                    stubs::call_enter(stubs::enter_counts_stub, g, base - 64);
                                    stubs::call_leave(stubs::leave_counts_stub, g, base - 64);
                                }
                                if i % 3 == 0 {
                                    std::thread::yield_now();
                                }
                                stubs::call_leave(stubs::leave_counts_stub, root, base);
                            }
                        })
                    })
                    .collect();
                // Publications while the threads run and end.
                for _ in 0..3 {
                    instr.publish(&w, 1);
                    std::thread::yield_now();
                }
                for h in handles {
                    h.join().unwrap();
                }
                // Joined threads have run their exit guards: one more publication retires them.
                instr.publish(&w, 2);
                assert!(THREADS[..THREAD_COUNT.load(Ordering::Acquire)]
                    .iter()
                    .all(|t| t.load(Ordering::Acquire).is_null()));
            }
            w.flush();
            assert!(
                THREAD_COUNT.load(Ordering::Acquire) <= per_round,
                "{} slots",
                THREAD_COUNT.load(Ordering::Acquire)
            );
            let spares = RECYCLED.lock().unwrap().spares.len();
            assert!(spares > 0 && spares <= per_round, "{spares} spare states");

            let (records, _) = clrprof_trace::read_all(std::fs::File::open(&path).unwrap()).unwrap();
            let _ = std::fs::remove_file(&path);
            let mut trees: HashMap<(u32, u32), Vec<u64>> = HashMap::new();
            let mut calls: HashMap<u64, u64> = HashMap::new();
            for r in &records {
                match r {
                    Record::CallTreeNodes(n) => {
                        assert_ne!(n.tree, 0);
                        let t = trees.entry((n.os_tid, n.tree)).or_default();
                        assert_eq!(n.first as usize, t.len(), "node ids are consecutive per tree");
                        t.extend(&n.functions);
                    }
                    Record::CallTreeDelta(_) => panic!("deltas are written packed"),
                    Record::CallTreeCosts(c) => {
                        let d = c.unpack().unwrap();
                        let t = &trees[&(d.os_tid, d.tree)];
                        for (node, c) in d.nodes.iter().zip(&d.calls) {
                            *calls.entry(t[*node as usize]).or_default() += c;
                        }
                    }
                    _ => {}
                }
            }
            let threads = (rounds * per_round) as u64;
            let numbers: HashSet<u32> = trees.keys().map(|k| k.1).collect();
            assert_eq!(numbers.len() as u64, threads, "one tree per thread");
            // Safety: the FuncInfo records are leaked.
            let (root_id, g_id) =
                unsafe { ((*(f[0] as *const FuncInfo)).id as u64, (*(f[1] as *const FuncInfo)).id as u64) };
            assert_eq!(calls.get(&root_id), Some(&threads));
            assert_eq!(calls.get(&g_id), Some(&(threads * k)));
        }

        /// A caller with more callees than the stubs' search window: a callee far down the sibling
        /// list is found by the fast stubs through the caller's callee cache once the Rust path
        /// has cached it, and a callee in the window that the cache does not hold is cached by
        /// the stubs' own walk.
        #[test]
        fn callees_beyond_the_search_window_are_found_through_the_callee_cache() {
            use super::super::thread::callee_slot;
            let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
            // Twelve callees in creation order: c[0] and c[8] share a cache slot, the others have
            // other slots. Each new child goes to the front of the list: c[0] ends 12th (beyond
            // the window of 8), c[8] 4th, and c[8] holds their slot.
            let pool = funcs(256);
            let s = callee_slot(pool[0]);
            let (same, other): (Vec<_>, Vec<_>) = pool[1..].iter().partition(|&&f| callee_slot(f) == s);
            assert!(!same.is_empty() && other.len() >= 11, "FuncInfo addresses spread over the slots");
            let mut c: Vec<*const FuncInfo> = vec![pool[0]];
            c.extend(&other[..7]);
            c.push(same[0]);
            c.extend(&other[7..10]);
            let (caller, far, near) = (other[10], c[0], c[8]);
            for (timing, fast, [enter, leave]) in [
                (false, FAST_COUNTS, [stubs::enter_counts_stub as unsafe extern "C" fn(), stubs::leave_counts_stub]),
                (true, FAST_TIMING, [stubs::enter_scripted_stub, stubs::leave_scripted_stub]),
            ] {
                stubs::set_fake_ticks(1_000_000_000);
                let ts = Box::into_raw(Box::new(ThreadState::new(1, timing, 50, false)));
                // Safety (this loop): `ts` is leaked and only this thread uses it; the TLS slot
                // points to it until restored; every FuncInfo is leaked.
                unsafe { (*ts).set_fast(fast) };
                let prev = stubs::current();
                stubs::set_current(ts);
                let sp = 0x7000_0000;
                let slow = || SLOW_HOOKS.with(|c| c.get());
                unsafe {
                    hook_enter(ts, caller, sp);
                    for &g in &c {
                        hook_enter(ts, g, sp - 0x100);
                        hook_leave(ts, g, sp - 0x100);
                    }
                    let call = |g: *const FuncInfo| {
                        let before = slow();
                        stubs::call_enter(enter, g, sp - 0x100);
                        stubs::call_leave(leave, g, sp - 0x100);
                        slow() - before
                    };
                    // Not cached and beyond the window: the full path, which caches it.
                    assert_eq!(call(far), 1, "timing = {timing}");
                    // Cached: fast, though 12th in the list.
                    assert_eq!(call(far), 0, "timing = {timing}");
                    assert_eq!(call(far), 0, "timing = {timing}");
                    // `near` lost the slot; 4th in the list, it is found by the stub's walk, which
                    // caches it back (`far` goes to the full path again).
                    assert_eq!(call(near), 0, "timing = {timing}");
                    assert_eq!(call(far), 1, "timing = {timing}");
                    // Every call counted once, on the caller's children.
                    let snap = (*ts).snapshot();
                    let calls_of = |g: *const FuncInfo| -> u64 {
                        snap.nodes.iter().filter(|n| n.1 == g as usize).map(|n| n.2).sum()
                    };
                    assert_eq!(calls_of(far), 5, "timing = {timing}");
                    assert_eq!(calls_of(near), 2, "timing = {timing}");
                    hook_leave(ts, caller, sp);
                }
                stubs::set_current(prev);
                stubs::set_fake_ticks(0);
            }
        }

        #[test]
        fn counts_fast_stubs_account_exactly_like_the_rust_hooks() {
            let stubs_ = [stubs::enter_counts_stub, stubs::leave_counts_stub, stubs::tailcall_counts_stub];
            for seed in [3, 0xdead_beef] {
                let fast = lockstep(false, FAST_COUNTS, stubs_, seed);
                assert!(fast > 15_000, "the fast path handled {fast} of 40,000+ events");
            }
        }

        fn xmm(v: [u64; 2]) -> __m128i {
            // Safety: plain data of the same size.
            unsafe { std::mem::transmute(v) }
        }

        fn bits(v: __m128i) -> [u64; 2] {
            // Safety: plain data of the same size.
            unsafe { std::mem::transmute(v) }
        }

        /// Calls an enter stub with a distinct value in every register it must preserve.
        unsafe fn enter_checked(stub: unsafe extern "C" fn(), func: *const FuncInfo, sp: usize) {
            let g0 = [0x0101_0101_0101_0101u64, 0x0202, 0x0303_0303_0303_0303, 0x0404, 0x0505, 0x0606_0000_0000_0006];
            let x0: [[u64; 2]; 8] = std::array::from_fn(|i| [0x1111_1111_1111_1111 * (i as u64 + 1), !(i as u64)]);
            let mut g = g0;
            let mut x = x0.map(xmm);
            let (mut r14, mut r15) = (func as usize, sp);
            // Safety: the caller passes an enter stub and valid arguments.
            unsafe {
                core::arch::asm!(
                    "call {stub}",
                    stub = in(reg) stub,
                    inout("r14") r14, inout("r15") r15,
                    inout("rdi") g[0], inout("rsi") g[1], inout("rdx") g[2],
                    inout("rcx") g[3], inout("r8") g[4], inout("r9") g[5],
                    inout("xmm0") x[0], inout("xmm1") x[1], inout("xmm2") x[2], inout("xmm3") x[3],
                    inout("xmm4") x[4], inout("xmm5") x[5], inout("xmm6") x[6], inout("xmm7") x[7],
                    clobber_abi("C"),
                );
            }
            assert_eq!((g, r14, r15), (g0, func as usize, sp));
            assert_eq!(x.map(bits), x0);
        }

        /// Calls a leave or tailcall stub with distinct return values in rax, rdx, xmm0, xmm1.
        unsafe fn leave_checked(stub: unsafe extern "C" fn(), func: *const FuncInfo, sp: usize) {
            let (rax0, rdx0) = (0x0a0a_0a0a_0a0a_0a0au64, 0xd0d0_d0d0_d0d0_d0d0u64);
            let x0 = [[0x3333_3333_3333_3333u64, 0x4444], [0x5555, 0x6666_6666_6666_6666]];
            let (mut rax, mut rdx) = (rax0, rdx0);
            let (mut a, mut b) = (xmm(x0[0]), xmm(x0[1]));
            // Safety: the caller passes a leave or tailcall stub and valid arguments.
            unsafe {
                core::arch::asm!(
                    "call {stub}",
                    stub = in(reg) stub,
                    inout("rdi") func => _, inout("rsi") sp => _,
                    inout("rax") rax, inout("rdx") rdx, inout("xmm0") a, inout("xmm1") b,
                    clobber_abi("C"),
                );
            }
            assert_eq!((rax, rdx), (rax0, rdx0));
            assert_eq!([bits(a), bits(b)], x0);
        }

        #[test]
        fn timing_fast_stubs_with_rdtsc_preserve_registers_and_charge_every_tick() {
            let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
            clock::init();
            if !clock::is_tsc() {
                return;
            }
            let f = funcs(3);
            let ts = Box::into_raw(Box::new(ThreadState::new(2, true, 30, false)));
            // Safety (this test): `ts` is leaked and only this thread uses it; the TLS slot points
            // to it until restored; every FuncInfo is leaked.
            unsafe { (*ts).set_fast(FAST_TIMING) };
            let start = unsafe { (*ts).snapshot().last };
            let prev = stubs::current();
            stubs::set_current(ts);
            let slow = SLOW_HOOKS.with(|c| c.get());
            let base = 0x7000_0000usize;
            unsafe {
                enter_checked(stubs::enter_timing_stub, f[0], base);
                for i in 0..1000 {
                    let g = f[1 + i / 500];
                    enter_checked(stubs::enter_timing_stub, g, base - 64);
                    if i % 3 == 0 {
                        leave_checked(stubs::tailcall_timing_stub, g, base - 64);
                    } else {
                        leave_checked(stubs::leave_timing_stub, g, base - 64);
                    }
                }
                leave_checked(stubs::leave_timing_stub, f[0], base);
            }
            stubs::set_current(prev);
            let slow = SLOW_HOOKS.with(|c| c.get()) - slow;
            assert!(slow < 100, "{slow} of 2002 events took the slow path");
            let s = unsafe { (*ts).snapshot() };
            let calls: Vec<u64> = s.nodes.iter().map(|n| n.2).collect();
            assert_eq!(calls, [0, 1, 500, 500]);
            assert_eq!(s.stack.len(), 1);
            // Every tick from the state's creation to its last event is charged exactly once.
            assert_eq!(unsafe { (*ts).charged() }, s.last.wrapping_sub(start));
            let prof: u64 = s.nodes.iter().map(|n| n.5).sum();
            assert!(prof <= 30 * 2002);
        }

        /// A caller cycling through k callees: the fast enter stubs find each among the first
        /// `FAST_SEARCH` children (only the first call of each takes the Rust path) with every
        /// register preserved, and beyond the window still handle most calls.
        #[test]
        fn fast_enter_stubs_find_callees_among_the_first_siblings() {
            let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
            let modes = [
                (false, FAST_COUNTS, [stubs::enter_counts_stub, stubs::leave_counts_stub, stubs::tailcall_counts_stub]),
                (
                    true,
                    FAST_TIMING,
                    [stubs::enter_scripted_stub, stubs::leave_scripted_stub, stubs::tailcall_scripted_stub],
                ),
            ];
            let rounds = 50;
            for (timing, fast, [enter, leave, tailcall]) in modes {
                for k in [1, 2, 3, 5, FAST_SEARCH, FAST_SEARCH + 1, 12, 20] {
                    let f = funcs(k + 1);
                    let mut now = 1_000_000u64;
                    stubs::set_fake_ticks(now);
                    let ts = Box::into_raw(Box::new(ThreadState::new(3, timing, 7, false)));
                    // Safety (this loop): `ts` is leaked and only this thread uses it; the TLS slot
                    // points to it until restored; every FuncInfo is leaked.
                    unsafe { (*ts).set_fast(fast) };
                    let prev = stubs::current();
                    stubs::set_current(ts);
                    let slow0 = SLOW_HOOKS.with(|c| c.get());
                    let base = 0x7000_0000usize;
                    unsafe {
                        enter_checked(enter, f[0], base);
                        for i in 0..rounds * k {
                            let g = f[1 + i % k];
                            now += 97;
                            stubs::set_fake_ticks(now);
                            enter_checked(enter, g, base - 64);
                            now += 13;
                            stubs::set_fake_ticks(now);
                            leave_checked(if i % 5 == 0 { tailcall } else { leave }, g, base - 64);
                        }
                        leave_checked(leave, f[0], base);
                    }
                    stubs::set_current(prev);
                    stubs::set_fake_ticks(0);
                    let slow = SLOW_HOOKS.with(|c| c.get()) - slow0;
                    let s = unsafe { (*ts).snapshot() };
                    let calls: Vec<u64> = s.nodes.iter().map(|n| n.2).collect();
                    let mut want = vec![0, 1];
                    want.extend(std::iter::repeat_n(rounds as u64, k));
                    assert_eq!(calls, want, "k = {k}, timing = {timing}");
                    assert_eq!(s.stack.len(), 1);
                    if timing {
                        assert_eq!(unsafe { (*ts).charged() }, s.last - 1_000_000, "k = {k}");
                        // Each callee's node gets its 13 ticks per call, less the overhead of 7.
                        assert!(s.nodes[2..].iter().all(|n| n.3 == 6 * rounds as u64), "k = {k}");
                    }
                    // Leaves never miss; enters miss on each callee's first call only, or, beyond
                    // the window, on fewer than k - FAST_SEARCH / 2 calls of each cycle (moving
                    // every found callee to the front would make them all miss).
                    let slow_enters = slow as usize;
                    if k <= FAST_SEARCH {
                        assert_eq!(slow_enters, 1 + k, "k = {k}, timing = {timing}");
                    } else {
                        let fast_enters = rounds * k - (slow_enters - 1);
                        assert!(fast_enters >= rounds * FAST_SEARCH / 2, "k = {k}: {fast_enters} fast");
                    }
                }
            }
        }
    }
}
