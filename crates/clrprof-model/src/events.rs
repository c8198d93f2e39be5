//! Runtime events (issue 5): exceptions grouped by type and throw site, garbage collections with
//! their pauses, allocations by type and site, the event log and runtime counters, all folded from
//! the trace records.

use std::collections::{BTreeMap, HashMap};

use clrprof_trace::{exception_monitoring as mon, exception_phase as ph, Record};

use crate::stacks::{Cost, FrameKey, StackId};
use crate::Profile;

/// Mean bytes between two samples of .NET 10's randomized allocation sampling (`AllocationSampled`).
pub const ALLOCATION_SAMPLING_MEAN_BYTES: f64 = 102_400.0;

/// Exceptions of one type thrown from one function.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExceptionGroup {
    pub type_name: String,
    /// The throwing function (innermost managed frame at the throw), empty when unknown.
    pub throw_site: String,
    pub thrown: u64,
    /// Caught by a managed `catch` (`ExceptionCatcherEnter`).
    pub caught: u64,
    /// Never reached a catch before its thread or the trace ended.
    pub uncaught: u64,
    /// Functions whose `catch` ran, with counts, most frequent first.
    pub catch_sites: Vec<(String, u64)>,
    /// Frames visited in the first pass (`ExceptionSearchFunctionEnter`), summed.
    pub search_frames: u64,
    /// Filters run (`ExceptionSearchFilterEnter`).
    pub filters: u64,
    /// Frames unwound in the second pass (`ExceptionUnwindFunctionEnter`).
    pub unwind_frames: u64,
    /// `finally`/fault blocks run (`ExceptionUnwindFinallyEnter`).
    pub finallies: u64,
    /// `catch` blocks entered (`ExceptionCatcherEnter`).
    pub catches: u64,
    /// Distinct throw stacks with their counts, most frequent first. The agent walks the first
    /// throws of each type and then a sample, so these counts may sum to less than `thrown`.
    pub stacks: Vec<(StackId, u64)>,
    /// OS thread ids with an uncaught exception of this group.
    pub uncaught_threads: Vec<u32>,
    /// Throws actually observed; less than `thrown` when `estimated`.
    pub observed: u64,
    /// Part of the counts are estimates: exceptions thrown while the agent's rate limit had the
    /// runtime's exception callbacks paused (see `ExceptionSampling`).
    pub estimated: bool,
}

/// How exceptions were observed: all of them, or (in an exception storm, unless recorded with
/// `--exceptions exact`) every one up to a budget and then samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExceptionSampling {
    /// The rate limit paused the callbacks at least once: some counts are estimates.
    pub sampled: bool,
    /// Time the callbacks were paused, and time in sampling windows (callbacks on again).
    pub paused_ns: u64,
    pub window_ns: u64,
    /// When the first pause began (ns since process start).
    pub first_pause_ns: u64,
    /// Exceptions observed, and the estimate of all thrown.
    pub observed: u64,
    pub estimated_total: u64,
    /// Observed exceptions whose catch was not followed (a pause began while they were in flight):
    /// counted here only, in no group.
    pub unfollowed: u64,
}

/// One garbage collection.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gc {
    /// The runtime's GC index when known (EventPipe `GCStart`), else the order in the trace.
    pub index: u64,
    pub generation: u8,
    /// `induced`, or the runtime's reason (`small-alloc`, `large-alloc`, `low-memory`, ...), or `other`.
    pub reason: String,
    pub induced: bool,
    /// `Some(true)` for background GCs (runtime's GC type, or seen overlapping another GC).
    pub background: Option<bool>,
    pub start_ns: u64,
    pub duration_ns: u64,
    /// Time the runtime was suspended for this GC.
    pub pause_ns: u64,
    /// Used bytes of gen0, gen1, gen2, LOH, POH before and after.
    pub before: Vec<u64>,
    pub after: Vec<u64>,
    pub os_tid: u32,
    /// Finished (a crash can leave the last GC open).
    pub finished: bool,
}

/// Allocations of one type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocType {
    pub type_name: String,
    /// Exact count, or an estimate when `exact` is false.
    pub count: u64,
    pub bytes: u64,
    pub exact: bool,
    /// Samples behind an estimate (0 when exact).
    pub samples: u64,
}

/// Sampled allocations of one type made by one function (the innermost managed frame).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocSite {
    pub type_name: String,
    pub function: String,
    pub count: u64,
    pub bytes: u64,
    pub samples: u64,
}

/// Monitor lock contention at one waiting site (the innermost frame outside `System.Threading`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContentionSite {
    pub site: String,
    pub count: u64,
    /// Total and longest wait (the runtime's duration when it gives one, else end minus start).
    pub wait_ns: u64,
    pub max_wait_ns: u64,
    /// Distinct waiting stacks with counts, most frequent first.
    pub stacks: Vec<(StackId, u64)>,
}

/// One line of the event log.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogEvent {
    pub ts: u64,
    /// OS thread id (0 when the record does not say).
    pub os_tid: u32,
    pub what: String,
    /// +1 opens a nesting level, -1 closes one, 0 neither.
    pub nest: i8,
    /// Indentation depth on its thread (after opening, before closing).
    pub depth: u32,
}

/// One interval of the runtime counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CounterRow {
    pub start_ns: u64,
    pub end_ns: u64,
    /// Collections started in the interval, by generation 0, 1, 2.
    pub gc_count: [u64; 3],
    /// Heap size per generation (gen0, gen1, gen2, LOH, POH) after the last GC so far.
    pub heap_bytes: Vec<u64>,
    /// Share of the interval spent inside GCs (start to finish), 0..=100.
    pub time_in_gc_pct: f64,
    /// Bytes allocated per second (exact or estimated, see `Profile::alloc_exact`).
    pub alloc_rate: f64,
    pub exceptions_per_sec: f64,
    /// Methods compiled in the interval (JIT and dynamic; precompiled code not counted).
    pub methods_jitted: u64,
    /// Assemblies loaded so far.
    pub assemblies_loaded: u64,
    /// Managed threads alive at the end of the interval.
    pub threads: u64,
    /// Monitor lock contentions that started in the interval.
    pub lock_contentions: u64,
}

/// Runtime-event results attached to [`Profile`].
#[derive(Clone, Debug, Default)]
pub struct RuntimeEvents {
    pub exceptions: Vec<ExceptionGroup>,
    pub gcs: Vec<Gc>,
    pub allocations: Vec<AllocType>,
    pub alloc_sites: Vec<AllocSite>,
    /// Allocation figures are exact (`--alloc exact`) rather than sampled.
    pub alloc_exact: bool,
    pub alloc_samples: u64,
    pub contentions: Vec<ContentionSite>,
    /// Present when the trace was recorded with `--events`.
    pub log: Vec<LogEvent>,
    pub log_enabled: bool,
    /// Finishes in the log that matched no start (shown, not indented).
    pub log_unpaired: u64,
    pub counters: Vec<CounterRow>,
    pub counter_interval_ns: u64,
    pub exception_sampling: ExceptionSampling,
    /// IL code size per FunctionID (from `FunctionCompiled.il_size`; absent when 0 / unknown).
    pub il_sizes: HashMap<u64, u32>,
    /// When things happened, for timelines.
    pub times: EventTimes,
}

/// Time-stamped runtime events of the profile's window, sorted by time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventTimes {
    /// Observed throws: (ts, OS tid).
    pub throws: Vec<(u64, u32)>,
    /// Runtime suspensions: (start, end).
    pub pauses: Vec<(u64, u64)>,
}

#[derive(Clone, Default)]
struct Pending {
    /// When it was thrown.
    ts: u64,
    type_name: String,
    /// The throwing function: first frame searched by the first pass, or the stack's innermost.
    site: u64,
    stack: Vec<u64>,
    search: u64,
    filters: u64,
    unwind: u64,
    finallies: u64,
}

#[derive(Clone, Default)]
struct GroupAcc {
    thrown: u64,
    caught: u64,
    uncaught: u64,
    catch_sites: HashMap<u64, u64>,
    search: u64,
    filters: u64,
    unwind: u64,
    finallies: u64,
    catches: u64,
    stacks: HashMap<Vec<u64>, u64>,
    uncaught_threads: Vec<u32>,
    /// Timestamps of the latest throws observed at full detail (to estimate a storm that ends
    /// the trace while the callbacks are paused).
    recent: std::collections::VecDeque<u64>,
}

/// Recent throws kept per group.
const RECENT_THROWS: usize = 256;

/// What `fold_storms` derives from the exception storms.
#[derive(Default)]
struct FoldedStorms {
    sampling: ExceptionSampling,
    /// Throws actually observed per (type, site).
    observed: HashMap<(String, u64), u64>,
    /// Estimated throws spread over each storm: (start, end, count).
    spans: Vec<(u64, u64, f64)>,
}

impl GroupAcc {
    /// Multiplies the counts by `k` (not the stacks, which are samples, nor the uncaught ones).
    fn scale(&mut self, k: f64) {
        let sc = |n: &mut u64| *n = (*n as f64 * k).round() as u64;
        for n in [
            &mut self.thrown,
            &mut self.caught,
            &mut self.search,
            &mut self.filters,
            &mut self.unwind,
            &mut self.finallies,
            &mut self.catches,
        ] {
            sc(n);
        }
        self.catch_sites.values_mut().for_each(sc);
    }

    /// Adds `k` × `o`'s counts (stacks keep their observed counts: they are samples anyway).
    fn add_scaled(&mut self, o: &GroupAcc, k: f64) {
        let sc = |n: u64| (n as f64 * k).round() as u64;
        self.thrown += sc(o.thrown);
        self.caught += sc(o.caught);
        self.uncaught += o.uncaught;
        self.search += sc(o.search);
        self.filters += sc(o.filters);
        self.unwind += sc(o.unwind);
        self.finallies += sc(o.finallies);
        self.catches += sc(o.catches);
        for (f, n) in &o.catch_sites {
            *self.catch_sites.entry(*f).or_default() += sc(*n);
        }
        for (st, n) in &o.stacks {
            *self.stacks.entry(st.clone()).or_default() += n;
        }
        for t in &o.uncaught_threads {
            if !self.uncaught_threads.contains(t) {
                self.uncaught_threads.push(*t);
            }
        }
    }
}

#[derive(Clone)]
struct GcInfoRec {
    ts: u64,
    index: u32,
    generation: u32,
    reason: u32,
    kind: u32,
}

/// (type, OS tid, stack innermost first) of allocation samples.
type SampleKey = (String, u32, Vec<u64>);

/// Collects runtime-event records while the trace is read.
#[derive(Clone, Default)]
pub struct EventsBuilder {
    active: HashMap<u32, Vec<Pending>>,
    groups: HashMap<(String, u64), GroupAcc>,
    /// `ExceptionMonitoring` changes (ts, mode) in order; empty when every exception was observed.
    monitor: Vec<(u64, u8)>,
    /// For each `monitor` entry, the index of the pause that began its storm (set for every entry,
    /// meaningful when the mode is not `FULL`).
    storm_of: Vec<usize>,
    /// Exceptions observed in sampling windows, per storm (index of its first pause in `monitor`).
    sampled: HashMap<(usize, String, u64), GroupAcc>,
    observed: u64,
    unfollowed: u64,
    throw_ts: Vec<u64>,
    throw_tids: Vec<(u64, u32)>,
    gcs: Vec<Gc>,
    open_gcs: Vec<usize>,
    gc_infos: Vec<GcInfoRec>,
    suspensions: Vec<(u64, u64)>,
    open_suspension: Option<u64>,
    exact: BTreeMap<String, (u64, u64)>,
    alloc_ts: Vec<(u64, u64)>,
    samples: BTreeMap<String, (f64, f64, u64)>,
    /// (type, function, os_tid, stack innermost first) -> (count estimate, bytes estimate, samples)
    sample_stacks: HashMap<SampleKey, (f64, f64, u64)>,
    log: Vec<LogEvent>,
    log_enabled: bool,
    open_contention: HashMap<u32, (u64, Vec<u64>)>,
    /// stack -> (count, total wait, longest wait)
    contention: HashMap<Vec<u64>, (u64, u64, u64)>,
    contention_ts: Vec<u64>,
    il_sizes: HashMap<u64, u32>,
    /// Type names of allocation samples by class id (written with a class's first sample).
    alloc_names: HashMap<u64, String>,
}

fn exception_log(phase: u8) -> (&'static str, i8) {
    match phase {
        ph::SEARCH_ENTER => ("exception search", 1),
        ph::SEARCH_LEAVE => ("exception search", -1),
        ph::FILTER_ENTER => ("exception filter", 1),
        ph::FILTER_LEAVE => ("exception filter", -1),
        ph::CATCHER_FOUND => ("exception catcher found", 0),
        ph::UNWIND_ENTER => ("exception unwind", 1),
        ph::UNWIND_LEAVE => ("exception unwind", -1),
        ph::FINALLY_ENTER => ("exception finally", 1),
        ph::FINALLY_LEAVE => ("exception finally", -1),
        ph::CATCHER_ENTER => ("exception catch", 1),
        ph::CATCHER_LEAVE => ("exception catch", -1),
        _ => ("exception step", 0),
    }
}

/// Upscaled (count, bytes) of one `AllocationSampled` sample of `size` bytes: each object is
/// sampled with probability 1 - exp(-size / mean) (RandomizedAllocationSampling.md).
pub fn upscale(size: u64) -> (f64, f64) {
    let s = size.max(1) as f64;
    let p = 1.0 - (-s / ALLOCATION_SAMPLING_MEAN_BYTES).exp();
    if p <= 0.0 {
        return (1.0, s);
    }
    (1.0 / p, s / p)
}

impl EventsBuilder {
    /// Marks the trace as recorded with the event log on (`events=true` in the agent's config).
    pub fn set_log_enabled(&mut self, on: bool) {
        self.log_enabled = on;
    }

    fn push_log(&mut self, ts: u64, os_tid: u32, what: String, nest: i8) {
        if self.log_enabled {
            self.log.push(LogEvent { ts, os_tid, what, nest, depth: 0 });
        }
    }

    /// Every record passes here for the event log (only kept with `--events`).
    pub fn log(&mut self, r: &Record) {
        if let Record::FunctionCompiled(f) = r {
            if f.il_size > 0 {
                self.il_sizes.insert(f.id, f.il_size);
            }
        }
        if !self.log_enabled {
            return;
        }
        use Record as R;
        match r {
            R::AssemblyLoaded(a) => {
                self.push_log(a.ts, 0, format!("assembly loaded {} ({} µs)", a.name, a.load_ns / 1000), 0)
            }
            R::ModuleLoaded(m) if m.load_ns != 0 => {
                self.push_log(m.ts, 0, format!("module loaded {} ({} µs)", m.path, m.load_ns / 1000), 0)
            }
            R::FunctionCompiled(f) if f.kind == clrprof_trace::code_kind::JIT && f.jit_ns > 0 => {
                // JIT compilation as a start/finish pair on the compiling thread.
                let what = format!("jit {}", f.name);
                self.push_log(f.ts.saturating_sub(f.jit_ns), f.os_tid, what.clone(), 1);
                self.push_log(f.ts, f.os_tid, what, -1);
            }
            R::FunctionCompiled(f) => self.push_log(
                f.ts,
                f.os_tid,
                format!(
                    "{} {} ({} bytes)",
                    if f.kind == clrprof_trace::code_kind::PRECOMPILED { "precompiled" } else { "compiled" },
                    f.name,
                    f.code_size
                ),
                0,
            ),
            R::ThreadCreated(t) => self.push_log(t.ts, 0, format!("thread created 0x{:x}", t.id), 0),
            R::ThreadDestroyed(t) => self.push_log(t.ts, 0, format!("thread destroyed 0x{:x}", t.id), 0),
            R::ThreadOsId(t) => self.push_log(t.ts, t.os_tid, format!("thread 0x{:x} is tid {}", t.id, t.os_tid), 0),
            R::ThreadNamed(t) => self.push_log(t.ts, 0, format!("thread 0x{:x} named {:?}", t.id, t.name), 0),
            _ => {}
        }
    }

    pub fn add(&mut self, r: &Record) {
        use Record as R;
        match r {
            R::ExceptionThrown(e) => {
                self.throw_ts.push(e.ts);
                self.throw_tids.push((e.ts, e.os_tid));
                self.observed += 1;
                self.active.entry(e.os_tid).or_default().push(Pending {
                    ts: e.ts,
                    type_name: e.type_name.clone(),
                    site: e.stack.first().copied().unwrap_or(0),
                    stack: e.stack.clone(),
                    ..Default::default()
                });
                self.push_log(e.ts, e.os_tid, format!("exception thrown {}", e.type_name), 0);
            }
            R::ExceptionPhase(x) => {
                let (what, nest) = exception_log(x.phase);
                self.push_log(x.ts, x.os_tid, what.to_string(), nest);
                let Some(stack) = self.active.get_mut(&x.os_tid) else { return };
                let Some(top) = stack.last_mut() else { return };
                match x.phase {
                    ph::SEARCH_ENTER => {
                        if top.search == 0 && top.site == 0 {
                            top.site = x.function;
                        }
                        top.search += 1
                    }
                    ph::FILTER_ENTER => top.filters += 1,
                    ph::UNWIND_ENTER => top.unwind += 1,
                    ph::FINALLY_ENTER => top.finallies += 1,
                    ph::CATCHER_ENTER => {
                        if let Some(p) = stack.pop() {
                            self.close(p, Some(x.function), x.os_tid);
                        }
                    }
                    _ => {}
                }
            }
            R::ExceptionCaught(x) => {
                let Some(stack) = self.active.get_mut(&x.os_tid) else { return };
                if let Some(mut top) = stack.pop() {
                    if top.site == 0 {
                        top.site = x.site;
                    }
                    top.search += x.search_frames as u64;
                    top.filters += x.filters as u64;
                    top.unwind += x.unwind_frames as u64;
                    top.finallies += x.finallies as u64;
                    self.close(top, Some(x.function), x.os_tid);
                }
            }
            R::ExceptionMonitoring(m) => {
                // Written by one thread in order; keep them sorted whatever happens.
                let at = self.monitor.partition_point(|&(t, _)| t <= m.ts);
                self.monitor.insert(at, (m.ts, m.mode));
                // A few records a second at most: recompute each entry's storm.
                let mut start = 0;
                self.storm_of.clear();
                for (i, &(_, mode)) in self.monitor.iter().enumerate() {
                    if mode == mon::FULL {
                        start = i + 1;
                    }
                    self.storm_of.push(start);
                }
            }
            R::GcStarted(g) => {
                // A GC that starts while another runs: the running one is a background GC.
                for &i in &self.open_gcs {
                    self.gcs[i].background = Some(true);
                }
                self.open_gcs.push(self.gcs.len());
                self.gcs.push(Gc {
                    index: 0,
                    generation: g.generation,
                    reason: String::new(),
                    induced: g.reason == 1,
                    background: None,
                    start_ns: g.ts,
                    duration_ns: 0,
                    pause_ns: 0,
                    before: g.sizes.clone(),
                    after: Vec::new(),
                    os_tid: g.os_tid,
                    finished: false,
                });
                self.push_log(
                    g.ts,
                    g.os_tid,
                    format!("gc gen{} {}", g.generation, if g.reason == 1 { "induced" } else { "" })
                        .trim_end()
                        .to_string(),
                    1,
                );
            }
            R::GcFinished(g) => {
                if let Some(i) = self.open_gcs.pop() {
                    let gc = &mut self.gcs[i];
                    gc.duration_ns = g.ts.saturating_sub(gc.start_ns);
                    gc.after = g.sizes.clone();
                    gc.finished = true;
                }
                self.push_log(g.ts, g.os_tid, "gc".into(), -1);
            }
            R::GcInfo(g) => self.gc_infos.push(GcInfoRec {
                ts: g.ts,
                index: g.index,
                generation: g.generation,
                reason: g.reason,
                kind: g.kind,
            }),
            R::RuntimeSuspended(s) => {
                self.open_suspension = Some(s.ts);
                self.push_log(s.ts, s.os_tid, format!("runtime suspended ({})", suspend_reason(s.reason)), 1);
            }
            R::RuntimeResumed(s) => {
                if let Some(a) = self.open_suspension.take() {
                    self.suspensions.push((a, s.ts));
                }
                self.push_log(s.ts, s.os_tid, "runtime suspended".into(), -1);
            }
            R::ContentionStarted(c) => {
                self.contention_ts.push(c.ts);
                self.open_contention.insert(c.os_tid, (c.ts, c.stack.clone()));
                self.push_log(c.ts, c.os_tid, "lock contention".into(), 1);
            }
            R::ContentionEnded(c) => {
                if let Some((start, stack)) = self.open_contention.remove(&c.os_tid) {
                    let wait = if c.duration_ns > 0 { c.duration_ns } else { c.ts.saturating_sub(start) };
                    let e = self.contention.entry(stack).or_default();
                    e.0 += 1;
                    e.1 += wait;
                    e.2 = e.2.max(wait);
                }
                self.push_log(c.ts, c.os_tid, "lock contention".into(), -1);
            }
            R::AllocationCounts(a) => {
                let e = self.exact.entry(a.type_name.clone()).or_default();
                e.0 += a.count;
                e.1 += a.bytes;
                self.alloc_ts.push((a.ts, a.bytes));
            }
            R::AllocationSample(a) => {
                // The agent writes a type's name with its first sample only (again after the class
                // unloads): later samples of the class carry an empty name.
                let type_name = if a.type_name.is_empty() {
                    self.alloc_names.get(&a.class).cloned().unwrap_or_else(|| format!("<class 0x{:x}>", a.class))
                } else {
                    self.alloc_names.insert(a.class, a.type_name.clone());
                    a.type_name.clone()
                };
                let (count, bytes) = match a.source {
                    0 => upscale(a.size),
                    _ => {
                        let c = if a.size > 0 { a.amount as f64 / a.size as f64 } else { 0.0 };
                        (c, a.amount as f64)
                    }
                };
                let e = self.samples.entry(type_name.clone()).or_default();
                e.0 += count;
                e.1 += bytes;
                e.2 += 1;
                self.alloc_ts.push((a.ts, bytes as u64));
                self.push_log(a.ts, a.os_tid, format!("allocation sampled {} ({} bytes)", type_name, a.size), 0);
                let s = self.sample_stacks.entry((type_name, a.os_tid, a.stack.clone())).or_default();
                s.0 += count;
                s.1 += bytes;
                s.2 += 1;
            }
            _ => {}
        }
    }

    /// The rate limit's mode at `ts`, and the index in `monitor` of the pause that began the
    /// storm it belongs to (meaningful when the mode is not `FULL`).
    fn mode_at(&self, ts: u64) -> (u8, usize) {
        let i = self.monitor.partition_point(|&(t, _)| t <= ts);
        if i == 0 {
            return (mon::FULL, 0);
        }
        (self.monitor[i - 1].1, self.storm_of[i - 1])
    }

    /// The accumulator an exception thrown at `ts` counts in.
    fn group_for(&mut self, ts: u64, type_name: String, site: u64) -> &mut GroupAcc {
        let (mode, storm) = self.mode_at(ts);
        if mode == mon::FULL {
            let g = self.groups.entry((type_name, site)).or_default();
            if g.recent.len() == RECENT_THROWS {
                g.recent.pop_front();
            }
            g.recent.push_back(ts);
            g
        } else {
            self.sampled.entry((storm, type_name, site)).or_default()
        }
    }

    /// Folds the exceptions observed in sampling windows into the groups, scaled to stand for the
    /// paused time of their storm. `end`: the trace's end.
    fn fold_storms(&mut self, end: u64) -> FoldedStorms {
        let mut out = FoldedStorms::default();
        for (k, g) in &self.groups {
            *out.observed.entry(k.clone()).or_default() += g.thrown;
        }
        for ((_, t, site), g) in &self.sampled {
            *out.observed.entry((t.clone(), *site)).or_default() += g.thrown;
        }
        let sm = &mut out.sampling;
        sm.observed = self.observed;
        sm.unfollowed = self.unfollowed;
        if !self.monitor.iter().any(|&(_, m)| m == mon::PAUSED) {
            sm.estimated_total = self.observed;
            return out;
        }
        sm.sampled = true;
        sm.first_pause_ns = self.monitor.iter().find(|&&(_, m)| m == mon::PAUSED).map_or(0, |m| m.0);
        // Storms: from a pause that follows full mode to the next return to full mode (or the end).
        let mut storms: Vec<(usize, u64, u64, u64)> = Vec::new(); // (first index, start, end, window time)
        for (i, &(t, m)) in self.monitor.iter().enumerate() {
            let next = self.monitor.get(i + 1).map_or(end, |n| n.0).max(t);
            let len = next - t;
            match m {
                mon::PAUSED => sm.paused_ns += len,
                mon::WINDOW => sm.window_ns += len,
                _ => {}
            }
            if m == mon::FULL {
                continue;
            }
            let storm = self.storm_of[i];
            match storms.last_mut() {
                Some(s) if s.0 == storm => {
                    s.2 = next;
                    if m == mon::WINDOW {
                        s.3 += len;
                    }
                }
                _ => storms.push((storm, t, next, if m == mon::WINDOW { len } else { 0 })),
            }
        }
        let mut sampled = std::mem::take(&mut self.sampled);
        for &(storm, start, stop, window) in &storms {
            let duration = stop.saturating_sub(start);
            if window > 0 {
                // Throws seen in the windows stand for the whole storm.
                let k = duration as f64 / window as f64;
                let mut count = 0.0;
                for ((s, t, site), g) in sampled.iter_mut() {
                    if *s == storm {
                        count += g.thrown as f64 * k;
                        self.groups.entry((t.clone(), *site)).or_default().add_scaled(g, k);
                    }
                }
                out.spans.push((start, stop, count));
            } else {
                // The trace ended before a window: carry each group's rate over the second before
                // the pause through the paused time.
                for g in self.groups.values_mut() {
                    let recent: Vec<u64> =
                        g.recent.iter().copied().filter(|&t| t <= start && t + 1_000_000_000 >= start).collect();
                    let Some(&first) = recent.first() else { continue };
                    let span = if recent.len() == RECENT_THROWS { start - first } else { 1_000_000_000 };
                    let rate = recent.len() as f64 / span.max(1) as f64;
                    g.scale(1.0 + rate * duration as f64 / g.thrown.max(1) as f64);
                    out.spans.push((start, stop, rate * duration as f64));
                }
            }
        }
        // Throws observed in a storm with no window and no full-mode throws before it still count.
        for ((s, t, site), g) in sampled.drain() {
            if !storms.iter().any(|st| st.0 == s && st.3 > 0) {
                self.groups.entry((t, site)).or_default().add_scaled(&g, 1.0);
            }
        }
        out.sampling.estimated_total = self.groups.values().map(|g| g.thrown).sum();
        out
    }

    fn close(&mut self, p: Pending, catcher: Option<u64>, os_tid: u32) {
        let g = self.group_for(p.ts, p.type_name, p.site);
        g.thrown += 1;
        g.search += p.search;
        g.filters += p.filters;
        g.unwind += p.unwind;
        g.finallies += p.finallies;
        if !p.stack.is_empty() {
            *g.stacks.entry(p.stack).or_default() += 1;
        }
        match catcher {
            Some(f) => {
                g.caught += 1;
                g.catches += 1;
                *g.catch_sites.entry(f).or_default() += 1;
            }
            None => {
                g.uncaught += 1;
                if !g.uncaught_threads.contains(&os_tid) {
                    g.uncaught_threads.push(os_tid);
                }
            }
        }
    }

    /// Completes the runtime-event tables of `p` (functions, threads and duration already set).
    pub fn finish(mut self, p: &mut Profile) {
        let names: HashMap<u64, String> = p.functions.iter().map(|f| (f.id, f.name.clone())).collect();
        let name = |id: u64| -> String {
            if id == 0 {
                String::new()
            } else {
                names.get(&id).cloned().unwrap_or_else(|| format!("<function 0x{id:x}>"))
            }
        };

        // Exceptions still in flight when the trace ended were never caught, unless the rate limit
        // paused the callbacks after they were thrown: then their catch was not followed.
        let mut left: Vec<(u32, Vec<Pending>)> = std::mem::take(&mut self.active).into_iter().collect();
        left.sort_by_key(|(t, _)| *t);
        for (tid, stack) in left {
            for pnd in stack {
                if self.monitor.iter().any(|&(t, m)| m == mon::PAUSED && t >= pnd.ts) {
                    // Its throw site and catch are unknown: counted apart, in no group.
                    self.unfollowed += 1;
                } else {
                    self.close(pnd, None, tid);
                }
            }
        }
        let end = p.process.duration_ns.max(self.monitor.last().map_or(0, |m| m.0));
        let folded = self.fold_storms(end);
        let mut groups: Vec<ExceptionGroup> = Vec::new();
        for ((type_name, site), g) in std::mem::take(&mut self.groups) {
            let mut catch_sites: Vec<(String, u64)> = g.catch_sites.iter().map(|(f, n)| (name(*f), *n)).collect();
            catch_sites.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let mut stacks: Vec<(StackId, u64)> = Vec::new();
            for (frames, n) in &g.stacks {
                let ids: Vec<_> = frames.iter().rev().map(|&f| p.costs.stacks.frame(FrameKey::Function(f))).collect();
                if let Some(s) = p.costs.stacks.stack(&ids) {
                    stacks.push((s, *n));
                }
            }
            stacks.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let mut uncaught_threads = g.uncaught_threads.clone();
            uncaught_threads.sort_unstable();
            let observed = folded.observed.get(&(type_name.clone(), site)).copied().unwrap_or(0);
            groups.push(ExceptionGroup {
                observed,
                estimated: observed != g.thrown,
                type_name,
                throw_site: name(site),
                thrown: g.thrown,
                caught: g.caught,
                uncaught: g.uncaught,
                catch_sites,
                search_frames: g.search,
                filters: g.filters,
                unwind_frames: g.unwind,
                finallies: g.finallies,
                catches: g.catches,
                stacks,
                uncaught_threads,
            });
        }
        groups.sort_by(|a, b| {
            b.thrown.cmp(&a.thrown).then(a.type_name.cmp(&b.type_name)).then(a.throw_site.cmp(&b.throw_site))
        });
        p.events.exception_sampling = folded.sampling;

        // GCs: match the runtime's own descriptions (same order, same generation, close in time).
        let mut gcs = std::mem::take(&mut self.gcs);
        self.gc_infos.sort_by_key(|g| g.ts);
        let mut j = 0;
        for (i, gc) in gcs.iter_mut().enumerate() {
            gc.index = i as u64 + 1;
            while j < self.gc_infos.len() && self.gc_infos[j].ts + 50_000_000 < gc.start_ns {
                j += 1;
            }
            if let Some(info) = self.gc_infos.get(j) {
                if info.generation == gc.generation as u32 && info.ts <= gc.start_ns + 50_000_000 {
                    gc.index = info.index as u64;
                    if info.kind == 1 {
                        gc.background = Some(true);
                    } else if gc.background.is_none() {
                        gc.background = Some(false);
                    }
                    if !gc.induced {
                        gc.reason = gc_reason(info.reason).to_string();
                        gc.induced = matches!(info.reason, 1 | 7 | 10);
                    }
                    j += 1;
                }
            }
            if gc.induced {
                gc.reason = "induced".into();
            } else if gc.reason.is_empty() {
                gc.reason = "other".into();
            }
        }
        // Each suspension goes to the GC it serves: the latest one started before it ended and
        // not finished before it began.
        for &(a, b) in &self.suspensions {
            let target = gcs
                .iter()
                .enumerate()
                .filter(|(_, g)| g.start_ns <= b && (!g.finished || g.start_ns + g.duration_ns >= a))
                .max_by_key(|(_, g)| g.start_ns)
                .map(|(i, _)| i);
            if let Some(i) = target {
                gcs[i].pause_ns += b.saturating_sub(a);
            }
        }
        p.events.gcs = gcs;

        // Allocations: exact counts when recorded, estimates from samples otherwise.
        let mut allocs: Vec<AllocType> = Vec::new();
        p.events.alloc_exact = !self.exact.is_empty();
        for (t, (n, b)) in &self.exact {
            allocs.push(AllocType { type_name: t.clone(), count: *n, bytes: *b, exact: true, samples: 0 });
        }
        for (t, (n, b, s)) in &self.samples {
            p.events.alloc_samples += s;
            if self.exact.contains_key(t) {
                continue;
            }
            allocs.push(AllocType {
                type_name: t.clone(),
                count: n.round() as u64,
                bytes: b.round() as u64,
                exact: false,
                samples: *s,
            });
        }
        allocs.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.type_name.cmp(&b.type_name)));
        p.events.allocations = allocs;
        // Stacks are walked for part of the samples: scale each type's sites to its total.
        let mut walked: HashMap<String, (f64, f64)> = HashMap::new();
        for ((t, _, stack), (c, b, _)) in &self.sample_stacks {
            if !stack.is_empty() {
                let w = walked.entry(t.clone()).or_default();
                w.0 += c;
                w.1 += b;
            }
        }
        let mut sites: HashMap<(String, String), (f64, f64, u64)> = HashMap::new();
        let mut keys: Vec<_> = self.sample_stacks.keys().filter(|k| !k.2.is_empty()).cloned().collect();
        keys.sort();
        for key in keys {
            let (mut count, mut bytes, samples) = self.sample_stacks[&key];
            if let (Some(w), Some(total)) = (walked.get(&key.0), self.samples.get(&key.0)) {
                if w.0 > 0.0 && w.1 > 0.0 {
                    count *= total.0 / w.0;
                    bytes *= total.1 / w.1;
                }
            }
            let (type_name, os_tid, stack) = key;
            let mut frames: Vec<_> = stack.iter().rev().map(|&f| p.costs.stacks.frame(FrameKey::Function(f))).collect();
            frames.push(p.costs.stacks.frame(FrameKey::Label(format!("new {type_name}"))));
            if let Some(s) = p.costs.stacks.stack(&frames) {
                let cost =
                    Cost { alloc_count: count.round() as u64, alloc_bytes: bytes.round() as u64, ..Default::default() };
                p.costs.add(os_tid, s, &cost);
            }
            let site = stack.first().map(|&f| name(f)).unwrap_or_else(|| "[no managed frame]".into());
            let e = sites.entry((type_name, site)).or_default();
            e.0 += count;
            e.1 += bytes;
            e.2 += samples;
        }
        let mut sites: Vec<AllocSite> = sites
            .into_iter()
            .map(|((type_name, function), (c, b, s))| AllocSite {
                type_name,
                function,
                count: c.round() as u64,
                bytes: b.round() as u64,
                samples: s,
            })
            .collect();
        sites.sort_by(|a, b| {
            b.bytes.cmp(&a.bytes).then(a.type_name.cmp(&b.type_name)).then(a.function.cmp(&b.function))
        });
        p.events.alloc_sites = sites;
        p.events.exceptions = groups;

        // Event log: stable order by time, indentation per thread.
        self.log.sort_by_key(|e| e.ts);
        p.events.log_unpaired = nest_log(&mut self.log);
        p.events.log = std::mem::take(&mut self.log);
        p.events.log_enabled = self.log_enabled;

        // Contention by waiting site.
        let mut by_site: HashMap<String, ContentionSite> = HashMap::new();
        let mut stacks: Vec<_> = self.contention.iter().collect();
        stacks.sort();
        for (stack, (n, wait, max)) in stacks {
            let site = stack
                .iter()
                .map(|&f| name(f))
                .find(|n| !n.starts_with("System.Threading."))
                .unwrap_or_else(|| stack.first().map(|&f| name(f)).unwrap_or_else(|| "[no managed frame]".into()));
            let e = by_site.entry(site.clone()).or_insert_with(|| ContentionSite { site, ..Default::default() });
            e.count += n;
            e.wait_ns += wait;
            e.max_wait_ns = e.max_wait_ns.max(*max);
            let ids: Vec<_> = stack.iter().rev().map(|&f| p.costs.stacks.frame(FrameKey::Function(f))).collect();
            if let Some(sid) = p.costs.stacks.stack(&ids) {
                e.stacks.push((sid, *n));
            }
        }
        let mut sites: Vec<ContentionSite> = by_site.into_values().collect();
        for s in &mut sites {
            s.stacks.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        }
        sites.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.site.cmp(&b.site)));
        p.events.contentions = sites;
        p.events.il_sizes = std::mem::take(&mut self.il_sizes);
        p.events.times.throws = std::mem::take(&mut self.throw_tids);
        p.events.times.throws.sort_unstable();
        p.events.times.pauses = self.suspensions.clone();
        p.events.times.pauses.sort_unstable();

        // Throws seen in sampling windows are counted through their storm's estimate instead.
        let throws: Vec<u64> = self.throw_ts.iter().copied().filter(|&t| self.mode_at(t).0 == mon::FULL).collect();
        counters(p, &throws, &folded.spans, &self.alloc_ts, &self.contention_ts);
    }
}

/// Indents the log by per-thread nesting. A finish closes the innermost open start of the same
/// name (closing any left open inside it). The runtime reports no `ExceptionUnwindFunctionLeave`
/// for the frame whose `catch` runs, so the unwind of that frame is closed, marked as implied,
/// after its catch. Returns the finishes that matched no start.
fn nest_log(log: &mut Vec<LogEvent>) -> u64 {
    let mut open: HashMap<u32, Vec<String>> = HashMap::new();
    let mut out = Vec::with_capacity(log.len());
    let mut unpaired = 0;
    for mut e in std::mem::take(log) {
        let st = open.entry(e.os_tid).or_default();
        match e.nest {
            1 => {
                e.depth = st.len() as u32;
                st.push(e.what.clone());
                out.push(e);
            }
            -1 => {
                // A finish names its start's event (the start may add details: `gc gen2 induced`).
                if let Some(pos) = st.iter().rposition(|w| w.starts_with(&e.what)) {
                    st.truncate(pos);
                    e.depth = st.len() as u32;
                } else {
                    e.depth = st.len() as u32;
                    e.what += " (no matching start)";
                    e.nest = 0;
                    unpaired += 1;
                }
                let implied = e.what == "exception catch" && st.last().is_some_and(|w| w == "exception unwind");
                let (ts, tid) = (e.ts, e.os_tid);
                out.push(e);
                if implied {
                    st.pop();
                    out.push(LogEvent {
                        ts,
                        os_tid: tid,
                        what: "exception unwind".into(),
                        nest: -1,
                        depth: st.len() as u32,
                    });
                }
            }
            _ => {
                e.depth = st.len() as u32;
                out.push(e);
            }
        }
    }
    *log = out;
    unpaired
}

fn suspend_reason(r: u32) -> &'static str {
    match r {
        1 => "gc",
        2 => "appdomain shutdown",
        3 => "code pitching",
        4 => "shutdown",
        6 => "gc prep",
        7 => "debugger",
        8 => "other",
        9 => "profiler",
        _ => "other",
    }
}

/// Lower-case names of the runtime's `GCReason` values.
pub fn gc_reason(r: u32) -> &'static str {
    match r {
        0 => "small-alloc",
        1 => "induced",
        2 => "low-memory",
        3 => "empty",
        4 => "large-alloc",
        5 => "out-of-space-soh",
        6 => "out-of-space-loh",
        7 => "induced-not-forced",
        8 => "internal",
        9 => "induced-low-memory",
        10 => "induced-compacting",
        11 => "low-memory-host",
        12 => "pm-full-gc",
        13 => "low-memory-host-blocking",
        _ => "other",
    }
}

/// The counter time series, one row per interval (1 s, or a tenth of short runs).
fn counters(
    p: &mut Profile,
    throws: &[u64],
    throw_spans: &[(u64, u64, f64)],
    allocs: &[(u64, u64)],
    contentions: &[u64],
) {
    let dur = p.process.duration_ns.max(1);
    let interval = if dur >= 10_000_000_000 { 1_000_000_000 } else { 100_000_000 };
    let n = dur.div_ceil(interval) as usize;
    let mut rows: Vec<CounterRow> = (0..n)
        .map(|i| CounterRow {
            start_ns: i as u64 * interval,
            end_ns: ((i as u64 + 1) * interval).min(dur),
            heap_bytes: vec![0; 5],
            ..Default::default()
        })
        .collect();
    let bucket = |ts: u64| ((ts / interval) as usize).min(n.saturating_sub(1));
    for g in &p.events.gcs {
        rows[bucket(g.start_ns)].gc_count[(g.generation as usize).min(2)] += 1;
        // Time in GC, spread over the intervals the GC spans.
        let (a, b) = (g.start_ns, g.start_ns + g.duration_ns);
        for (i, r) in rows.iter_mut().enumerate().skip(bucket(a)).take(bucket(b) + 1 - bucket(a)) {
            let _ = i;
            let ov = b.min(r.end_ns).saturating_sub(a.max(r.start_ns));
            r.time_in_gc_pct += ov as f64;
        }
    }
    let mut heap = vec![0u64; 5];
    let mut gcs = p.events.gcs.iter().filter(|g| g.finished).collect::<Vec<_>>();
    gcs.sort_by_key(|g| g.start_ns + g.duration_ns);
    let mut gi = 0;
    let mut asm: Vec<u64> = p.assemblies.iter().map(|a| a.loaded_ns).collect();
    asm.sort_unstable();
    for r in rows.iter_mut() {
        while gi < gcs.len() && gcs[gi].start_ns + gcs[gi].duration_ns < r.end_ns {
            heap = gcs[gi].after.clone();
            gi += 1;
        }
        r.heap_bytes = heap.clone();
        r.heap_bytes.resize(5, 0);
        let len = (r.end_ns - r.start_ns).max(1) as f64;
        r.time_in_gc_pct = (r.time_in_gc_pct / len * 100.0).min(100.0);
        r.assemblies_loaded = asm.iter().filter(|&&t| t < r.end_ns).count() as u64;
        r.threads = p
            .threads
            .iter()
            .filter(|t| t.created_ns.is_some_and(|c| c < r.end_ns) && t.destroyed_ns.is_none_or(|d| d >= r.end_ns))
            .count() as u64;
    }
    for &t in throws {
        rows[bucket(t)].exceptions_per_sec += 1.0;
    }
    for &(a, b, count) in throw_spans {
        let len = b.saturating_sub(a).max(1) as f64;
        for r in rows.iter_mut() {
            let ov = b.min(r.end_ns).saturating_sub(a.max(r.start_ns));
            r.exceptions_per_sec += count * ov as f64 / len;
        }
    }
    for &t in contentions {
        rows[bucket(t)].lock_contentions += 1;
    }
    for &(t, b) in allocs {
        rows[bucket(t)].alloc_rate += b as f64;
    }
    for f in &p.functions {
        if f.kind != clrprof_trace::code_kind::PRECOMPILED && f.first_compiled_ns > 0 {
            rows[bucket(f.first_compiled_ns)].methods_jitted += 1;
        }
    }
    for r in rows.iter_mut() {
        let secs = (r.end_ns - r.start_ns).max(1) as f64 / 1e9;
        r.exceptions_per_sec /= secs;
        r.alloc_rate /= secs;
    }
    p.events.counters = rows;
    p.events.counter_interval_ns = interval;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProfileBuilder;
    use clrprof_trace::*;

    fn phase(ts: u64, phase: u8, function: u64) -> Record {
        ExceptionPhase { ts, os_tid: 1, phase, function }.into()
    }

    #[test]
    fn exceptions_are_grouped_with_catch_sites_and_uncaught_ones_flagged() {
        let mut b = ProfileBuilder::new();
        b.add(&ProcessStart::default().into());
        for f in [10u64, 20, 30] {
            b.add(&FunctionCompiled { ts: 1, id: f, name: format!("F{f}"), ..Default::default() }.into());
        }
        for i in 0..3 {
            b.add(
                &ExceptionThrown {
                    ts: 10 + i,
                    os_tid: 1,
                    type_name: "Boom".into(),
                    stack: vec![10, 20, 30],
                    ..Default::default()
                }
                .into(),
            );
            b.add(&phase(11, ph::SEARCH_ENTER, 10));
            b.add(&phase(11, ph::FILTER_ENTER, 30));
            b.add(&phase(11, ph::FILTER_LEAVE, 0));
            b.add(&phase(12, ph::UNWIND_ENTER, 20));
            b.add(&phase(12, ph::FINALLY_ENTER, 20));
            b.add(&phase(12, ph::FINALLY_LEAVE, 0));
            b.add(&phase(13, ph::CATCHER_ENTER, 30));
            b.add(&phase(13, ph::CATCHER_LEAVE, 0));
        }
        b.add(
            &ExceptionThrown { ts: 50, os_tid: 2, type_name: "Fatal".into(), stack: vec![20], ..Default::default() }
                .into(),
        );
        let p = b.finish();
        let boom = &p.events.exceptions[0];
        assert_eq!((boom.type_name.as_str(), boom.throw_site.as_str()), ("Boom", "F10"));
        assert_eq!((boom.thrown, boom.caught, boom.uncaught), (3, 3, 0));
        assert_eq!(
            (boom.filters, boom.finallies, boom.catches, boom.search_frames, boom.unwind_frames),
            (3, 3, 3, 3, 3)
        );
        assert_eq!(boom.catch_sites, vec![("F30".to_string(), 3)]);
        assert_eq!(boom.stacks.len(), 1);
        let root_first: Vec<String> = p
            .costs
            .stacks
            .frames_of(boom.stacks[0].0)
            .iter()
            .map(|f| p.costs.stacks.frames[f.0 as usize].name.clone())
            .collect();
        assert_eq!(root_first, vec!["F30", "F20", "F10"]);
        let fatal = &p.events.exceptions[1];
        assert_eq!((fatal.thrown, fatal.caught, fatal.uncaught), (1, 0, 1));
        assert_eq!(fatal.uncaught_threads, vec![2]);
    }

    fn thrown_and_caught(b: &mut ProfileBuilder, ts: u64) {
        b.add(&ExceptionThrown { ts, os_tid: 1, type_name: "Boom".into(), ..Default::default() }.into());
        b.add(
            &ExceptionCaught {
                ts: ts + 1,
                os_tid: 1,
                function: 30,
                site: 10,
                search_frames: 2,
                filters: 1,
                unwind_frames: 2,
                finallies: 1,
            }
            .into(),
        );
    }

    fn monitoring(b: &mut ProfileBuilder, ts: u64, mode: u8) {
        b.add(&ExceptionMonitoring { ts, mode, observed: 0 }.into());
    }

    #[test]
    fn an_exception_storm_is_estimated_from_its_sampling_windows() {
        use clrprof_trace::exception_monitoring as m;
        let mut b = ProfileBuilder::new();
        b.add(&ProcessStart::default().into());
        for f in [10u64, 30] {
            b.add(&FunctionCompiled { ts: 1, id: f, name: format!("F{f}"), ..Default::default() }.into());
        }
        for i in 0..10 {
            thrown_and_caught(&mut b, 100 + 10 * i);
        }
        // In flight when the callbacks pause: its catch is never seen.
        b.add(&ExceptionThrown { ts: 990, os_tid: 1, type_name: "Boom".into(), ..Default::default() }.into());
        monitoring(&mut b, 1000, m::PAUSED);
        monitoring(&mut b, 1900, m::WINDOW);
        for i in 0..5 {
            thrown_and_caught(&mut b, 1910 + 10 * i);
        }
        monitoring(&mut b, 2000, m::PAUSED);
        monitoring(&mut b, 2900, m::WINDOW);
        monitoring(&mut b, 3000, m::FULL);
        thrown_and_caught(&mut b, 3100);
        thrown_and_caught(&mut b, 3200);
        let p = b.finish();
        let g = &p.events.exceptions;
        assert_eq!(g.len(), 1, "{g:?}");
        let g = &g[0];
        // The storm lasted 2000 ns with 200 ns of windows: its 5 throws stand for 50.
        assert_eq!((g.thrown, g.caught, g.uncaught, g.observed, g.estimated), (62, 62, 0, 17, true));
        assert_eq!((g.filters, g.finallies, g.search_frames, g.unwind_frames), (62, 62, 124, 124));
        assert_eq!(g.catch_sites, vec![("F30".to_string(), 62)]);
        let s = &p.events.exception_sampling;
        assert!(s.sampled);
        assert_eq!((s.paused_ns, s.window_ns, s.first_pause_ns), (1800, 200, 1000));
        assert_eq!((s.observed, s.unfollowed, s.estimated_total), (18, 1, 62));
    }

    #[test]
    fn a_storm_cut_short_by_the_end_of_the_trace_carries_the_last_rate() {
        use clrprof_trace::exception_monitoring as m;
        let mut b = ProfileBuilder::new();
        b.add(&ProcessStart::default().into());
        // 100 throws a second for a second, then paused for the last second of the trace.
        for i in 0..100 {
            thrown_and_caught(&mut b, i * 10_000_000);
        }
        monitoring(&mut b, 1_000_000_000, m::PAUSED);
        b.add(&ThreadCreated { ts: 2_000_000_000, id: 9 }.into());
        let p = b.finish();
        let g = &p.events.exceptions[0];
        assert_eq!((g.thrown, g.observed, g.estimated), (200, 100, true));
        assert_eq!(g.caught, 200);
        let s = &p.events.exception_sampling;
        assert_eq!((s.paused_ns, s.window_ns, s.estimated_total), (1_000_000_000, 0, 200));
    }

    #[test]
    fn without_a_pause_every_count_is_exact() {
        let mut b = ProfileBuilder::new();
        b.add(&ProcessStart::default().into());
        for i in 0..3 {
            thrown_and_caught(&mut b, 10 * i);
        }
        let p = b.finish();
        let g = &p.events.exceptions[0];
        assert_eq!((g.thrown, g.observed, g.estimated), (3, 3, false));
        assert!(!p.events.exception_sampling.sampled);
        assert_eq!(p.events.exception_sampling.estimated_total, 3);
    }

    #[test]
    fn allocation_samples_without_a_name_take_their_class_name_from_an_earlier_sample() {
        let mut b = ProfileBuilder::new();
        b.add(&ProcessStart::default().into());
        let sample = |ts: u64, name: &str| -> Record {
            AllocationSample { ts, os_tid: 1, class: 7, type_name: name.into(), size: 24, ..Default::default() }.into()
        };
        b.add(&sample(1, "Acme.Node"));
        b.add(&sample(2, ""));
        b.add(&sample(3, ""));
        b.add(&AllocationSample { ts: 4, os_tid: 1, class: 9, size: 24, ..Default::default() }.into());
        let p = b.finish();
        let by: Vec<(&str, u64)> = p.events.allocations.iter().map(|a| (a.type_name.as_str(), a.samples)).collect();
        assert!(by.contains(&("Acme.Node", 3)), "{by:?}");
        assert!(by.contains(&("<class 0x9>", 1)), "{by:?}");
    }

    #[test]
    fn gcs_get_reasons_pauses_and_background_flags() {
        let mut b = ProfileBuilder::new();
        b.add(&ProcessStart::default().into());
        b.add(&RuntimeSuspended { ts: 90, os_tid: 1, reason: 1 }.into());
        b.add(&GcInfo { ts: 99, index: 7, generation: 2, reason: 1, kind: 0 }.into());
        b.add(&GcStarted { ts: 100, os_tid: 1, generation: 2, reason: 1, sizes: vec![10, 0, 0, 0, 0] }.into());
        b.add(&GcFinished { ts: 150, os_tid: 1, sizes: vec![0, 0, 5, 0, 0] }.into());
        b.add(&RuntimeResumed { ts: 160, os_tid: 1 }.into());
        // A background gen2 with an ephemeral GC inside it.
        b.add(&GcStarted { ts: 1000, os_tid: 1, generation: 2, reason: 0, sizes: vec![] }.into());
        b.add(&GcStarted { ts: 1100, os_tid: 1, generation: 0, reason: 0, sizes: vec![] }.into());
        b.add(&GcFinished { ts: 1110, os_tid: 1, sizes: vec![] }.into());
        b.add(&GcFinished { ts: 2000, os_tid: 1, sizes: vec![] }.into());
        let p = b.finish();
        let g = &p.events.gcs;
        assert_eq!(g.len(), 3);
        assert_eq!((g[0].index, g[0].reason.as_str(), g[0].pause_ns, g[0].duration_ns), (7, "induced", 70, 50));
        assert_eq!(g[0].background, Some(false));
        assert_eq!(g[0].after[2], 5);
        assert_eq!((g[1].background, g[1].duration_ns, g[1].reason.as_str()), (Some(true), 1000, "other"));
        assert_eq!(g[2].duration_ns, 10);
    }

    #[test]
    fn sampled_allocations_are_upscaled_estimates() {
        let (c, bytes) = upscale(102_400);
        assert!((c - 1.582).abs() < 0.01, "{c}");
        assert!((bytes / c - 102_400.0).abs() < 1.0);
        let mut b = ProfileBuilder::new();
        b.add(&ProcessStart::default().into());
        b.add(&FunctionCompiled { ts: 1, id: 5, name: "Alloc".into(), ..Default::default() }.into());
        for _ in 0..4 {
            b.add(
                &AllocationSample {
                    ts: 2,
                    os_tid: 3,
                    type_name: "Big".into(),
                    size: 144,
                    stack: vec![5],
                    ..Default::default()
                }
                .into(),
            );
        }
        b.add(
            &AllocationCounts { ts: 3, type_name: "Exact".into(), count: 5, bytes: 120, ..Default::default() }.into(),
        );
        let p = b.finish();
        let big = p.events.allocations.iter().find(|a| a.type_name == "Big").unwrap();
        assert!(!big.exact);
        assert_eq!(big.samples, 4);
        assert!(big.count > 2800 && big.count < 2900, "{}", big.count);
        let ex = p.events.allocations.iter().find(|a| a.type_name == "Exact").unwrap();
        assert_eq!((ex.count, ex.bytes, ex.exact), (5, 120, true));
        assert_eq!(p.events.alloc_sites[0].function, "Alloc");
        let total: u64 = p.costs.merged(None).iter().map(|c| c.alloc_bytes).sum();
        assert_eq!(total, big.bytes);
    }
}
