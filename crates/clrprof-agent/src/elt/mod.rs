//! Exact call counts and timings: enter/leave/tailcall hooks (fast path, naked stubs), a
//! function-id mapper that filters what is instrumented, per-thread calling-context trees
//! aggregated in the agent, and periodic deltas streamed by the writer thread.

pub(crate) mod bench_support;
pub(crate) mod clock;
pub(crate) mod filter;
mod hooks;
mod sites;
#[cfg(target_arch = "x86_64")]
pub(crate) mod stubs;
pub(crate) mod thread;
#[cfg(target_arch = "x86_64")]
mod tls;

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use clrprof_sys::{monitor, FunctionID, HrResult, ModuleID, ProfilerInfo, BOOL, FALSE, TRUE};
use clrprof_trace::{CallTreeCosts, CallTreeDelta, CallTreeNodes, FlowEvents, FunctionHooked, InstrumentationInfo};

use crate::config::EltConfig;
use crate::context::Context;
use crate::writer::Writer;
use filter::Filter;
use hooks::{
    retire, FLOW, LATE_HOOKS, MAX_THREADS, OVERHEAD_TICKS, SUSPEND_START, THREADS, THREADS_DROPPED, THREAD_COUNT,
    TIMING,
};
use thread::{FuncInfo, ThreadState};

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
        let prev = tls::current();
        tls::set_current(&mut ts);
        (prev, hook_stubs(true, flow))
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = flow;
    let n = 50_000u64;
    let mut best = u64::MAX;
    // The stubs read the call site below the SP they are given: a stack of our own, not a made-up
    // address.
    let frames = [0usize; 32];
    let top = frames.as_ptr() as usize + 24 * std::mem::size_of::<usize>();
    for _ in 0..3 {
        let t0 = clock::ticks();
        for i in 0..n {
            let sp = top - (i as usize & 1) * 64;
            // Safety: `info` is leaked above; the TLS slot points to `ts`, alive until restored.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                stubs::call_enter(enter, info, sp);
                stubs::call_leave(leave, info, sp);
            }
            // Safety: `info` is leaked above.
            #[cfg(not(target_arch = "x86_64"))]
            unsafe {
                ts.enter(info, sp, 0);
                ts.leave(info, sp, thread::FLOW_LEAVE);
            }
        }
        let t1 = clock::ticks();
        best = best.min(t1.saturating_sub(t0) / n / 2);
    }
    #[cfg(target_arch = "x86_64")]
    tls::set_current(prev);
    std::hint::black_box(&frames);
    best
}

/// Instrumentation state shared with the mapper and the writer.
pub(crate) struct Instrumentation {
    pub(crate) config: EltConfig,
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
    /// The code versions of the call sites published so far (their IL-to-native maps).
    sites: Mutex<sites::CallSites>,
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
pub(crate) const DELTA_INTERVAL_NS: u64 = 1_000_000_000;

impl Instrumentation {
    /// Event-mask bits for instrumentation.
    pub(crate) fn mask(config: &EltConfig) -> (u32, u32) {
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

    pub(crate) fn new(config: EltConfig, now_ns: u64) -> (Instrumentation, InstrumentationInfo) {
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
        thread::MAX_NODES.store(max_nodes(config.calltree_max_mb), Ordering::Relaxed);
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
            sites: Mutex::new(sites::CallSites::default()),
        };
        (i, info)
    }

    /// Registers the mapper and the hooks (Initialize only). `self` and `cx` must outlive the
    /// process.
    pub(crate) fn install(&'static self, info: &ProfilerInfo, cx: &'static Context) -> HrResult<()> {
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
        let name = s.info.module_assembly_name(module).unwrap_or_default();
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
    pub(crate) fn publish(&self, w: &Writer, now_ns: u64) {
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
            // New nodes, in records of at most NODES_PER_RECORD (a reader holds a record whole).
            while count > p.nodes_sent {
                let end = count.min(p.nodes_sent.saturating_add(NODES_PER_RECORD));
                let mut parents = Vec::with_capacity((end - p.nodes_sent) as usize);
                let mut functions = Vec::with_capacity(parents.capacity());
                let mut sites = Vec::with_capacity(parents.capacity());
                for i in p.nodes_sent..end {
                    let Some(node) = ts.node(i) else { break };
                    parents.push(node.parent);
                    // Safety: `func` is a leaked FuncInfo (never null for published nodes).
                    functions.push(unsafe { node.func.as_ref() }.map(|f| f.id as u64).unwrap_or(0));
                    sites.push(node.site as u64);
                }
                let first = p.nodes_sent;
                let whole = parents.len() as u32 == end - first;
                p.nodes_sent += parents.len() as u32;
                if let (Some(cx), Ok(mut known)) = (self.cx.get(), self.sites.lock()) {
                    known.map(&cx.info, w, &sites);
                }
                if !parents.is_empty() {
                    w.emit(
                        &CallTreeNodes { os_tid: ts.os_tid, first, parents, functions, tree: ts.tree, sites }.into(),
                    );
                }
                if !whole {
                    break;
                }
            }
            let sent = p.nodes_sent;
            if p.last.len() < sent as usize {
                p.last.resize(sent as usize, [0; 4]);
            }
            if !(all_deltas || finished) {
                self.publish_flow(w, ts, &mut flow, k);
                continue;
            }
            // In records of at most NODES_PER_RECORD nodes, all at `now_ns`, each sent when full.
            let emit = |part: CallTreeDelta| {
                // Nodes ascend, so the delta always packs.
                match CallTreeCosts::pack(&part) {
                    Some(c) => w.emit(&c.into()),
                    None => w.emit(&part.into()),
                }
            };
            let mut d = DeltaParts::new(ts.os_tid, now_ns, ts.tree);
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
                    let costs = [
                        cur[0].saturating_sub(last[0]),
                        (cur[1].saturating_sub(last[1]) as f64 * k) as u64,
                        (cur[2].saturating_sub(last[2]) as f64 * k) as u64,
                        (cur[3].saturating_sub(last[3]) as f64 * k) as u64,
                    ];
                    *last = cur;
                    if let Some(full) = d.push(i, costs) {
                        emit(full);
                    }
                }
            }
            if let Some(rest) = d.finish() {
                emit(rest);
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
        let capped = thread::CAPPED_NODES.swap(0, Ordering::Relaxed);
        // Once in the trace (the first time), in the log every time.
        if capped > 0 && CAPPED_NOTED.swap(true, Ordering::Relaxed) {
            crate::log_warn!("call trees capped: {capped} more [call tree capped] nodes");
        } else if capped > 0 {
            // In the trace too: those calls' functions are not known, the reader must say so.
            let text = format!(
                "call trees capped at {} MiB (CLRPROF_CALLTREE_MAX_MB): calls that needed a new node are counted, \
                 with their time, in their caller's [call tree capped] node",
                self.config.calltree_max_mb
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

    pub(crate) fn suspend_started() {
        SUSPEND_START.store(clock::ticks(), Ordering::Relaxed);
    }

    pub(crate) fn resume_finished() {
        let start = SUSPEND_START.swap(0, Ordering::Relaxed);
        if start != 0 {
            let d = clock::ticks().saturating_sub(start);
            thread::SUSPENDED_TICKS.fetch_add(d, Ordering::Relaxed);
        }
    }
}

/// Nodes in one call-tree record (new nodes, or a delta): about 1.3 MB of new nodes, a few
/// hundred KB of packed costs. A reader holds a record whole, and a block of records under the
/// trace's 64 MiB a block; a thread's first publication can hold millions of nodes.
const NODES_PER_RECORD: u32 = 1 << 16;

/// A thread's delta built node by node and handed out in parts of at most [`NODES_PER_RECORD`]
/// nodes, all at one time (a delta of every node of a large tree held whole took tens of bytes a
/// node in the writer thread).
struct DeltaParts {
    d: CallTreeDelta,
}

impl DeltaParts {
    fn new(os_tid: u32, ts: u64, tree: u32) -> DeltaParts {
        DeltaParts { d: CallTreeDelta { os_tid, ts, tree, ..Default::default() } }
    }

    /// Adds a node's calls, time, suspended and profiler time; the part this node filled, if it did.
    fn push(&mut self, node: u32, costs: [u64; 4]) -> Option<CallTreeDelta> {
        let d = &mut self.d;
        d.nodes.push(node);
        d.calls.push(costs[0]);
        d.time_ns.push(costs[1]);
        d.suspended_ns.push(costs[2]);
        d.profiler_ns.push(costs[3]);
        (d.nodes.len() >= NODES_PER_RECORD as usize).then(|| self.take())
    }

    /// The last part, if it has a node.
    fn finish(mut self) -> Option<CallTreeDelta> {
        (!self.d.nodes.is_empty()).then(|| self.take())
    }

    fn take(&mut self) -> CallTreeDelta {
        let (os_tid, ts, tree) = (self.d.os_tid, self.d.ts, self.d.tree);
        std::mem::replace(&mut self.d, CallTreeDelta { os_tid, ts, tree, ..Default::default() })
    }
}

/// Whether the trace has its note that the call trees reached their cap.
static CAPPED_NOTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Bytes a call-tree node takes: its slot in the thread's chunk and what the writer keeps of it
/// (the counts last published).
pub(crate) const NODE_BYTES: usize = std::mem::size_of::<thread::Node>() + std::mem::size_of::<[u64; 4]>();

/// The node cap of `CLRPROF_CALLTREE_MAX_MB` (0: none).
fn max_nodes(mb: u64) -> usize {
    if mb == 0 {
        usize::MAX
    } else {
        (mb as usize).saturating_mul(1 << 20) / NODE_BYTES
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

#[cfg(test)]
mod tests;
