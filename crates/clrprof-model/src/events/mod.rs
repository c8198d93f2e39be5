//! Runtime events: exceptions grouped by type and throw site, garbage collections with
//! their pauses, allocations by type and site, lock contention, the event log and runtime
//! counters.
//!
//! [`EventsBuilder`] keeps every runtime event as a time-stamped fact while the trace is read
//! (`add` and `log`, once per record); [`EventsBuilder::finish`] computes the tables from the facts
//! inside a [`TimeRange`], as often as wanted: a live profile calls it again as records arrive,
//! and gets what a one-shot load of the same records would give. It reads the profile's tables
//! through [`ProfileTables`] (the profile, which holds the results, sits above this module).

mod alloc;
mod contention;
mod counters;
mod exceptions;
mod gc;
mod log;

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

use clrprof_trace::Record;

use crate::process::{Assembly, Function, Thread};
use crate::stacks::CostTree;
use crate::TimeRange;

pub use alloc::{
    is_library_function, tick_estimate, upscale, upscale_with_mean, AllocEstimator, AllocSite, AllocType,
    ALLOCATION_SAMPLING_MEAN_BYTES, ALLOCATION_TICK_BYTES,
};
pub use contention::ContentionSite;
pub use counters::CounterRow;
pub use exceptions::{ExceptionGroup, ExceptionSampling};
pub use gc::{gc_reason, time_in_gc, Gc};
pub use log::LogEvent;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Runtime-event results attached to the profile (`Profile::events`), for its time range.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct RuntimeEvents {
    /// Exceptions thrown in the range.
    pub exceptions: Vec<ExceptionGroup>,
    /// GCs started in the range (their pauses: the part inside the range).
    pub gcs: Vec<Gc>,
    /// Time inside at least one GC within the range, GCs that started before it included
    /// ([`time_in_gc`] of every GC of the run).
    pub time_in_gc_ns: u64,
    /// Allocations recorded (exact counts) or sampled in the range.
    pub allocations: Vec<AllocType>,
    pub alloc_sites: Vec<AllocSite>,
    /// Allocation figures are exact (`--alloc exact`) rather than sampled (a property of the trace).
    pub alloc_exact: bool,
    /// Allocation samples in the range.
    pub alloc_samples: u64,
    /// How the allocation figures were obtained.
    pub alloc_estimator: AllocEstimator,
    /// Allocation stacks walked by an older agent, which did not say how many samples each stands
    /// for: their sites are scaled to their type's total.
    pub alloc_unweighted_walks: bool,
    /// Allocation samples in the range the agent's writer dropped to keep to its rate
    /// (`CLRPROF_ALLOC_RATE`); the kept ones weigh for them (`AllocationSample::weight`).
    #[serde(skip_serializing_if = "is_zero")]
    pub alloc_thinned: u64,
    /// Contentions that started in the range.
    pub contentions: Vec<ContentionSite>,
    /// Present when the trace was recorded with `--events`: the lines in the range.
    pub log: Vec<LogEvent>,
    pub log_enabled: bool,
    /// Finishes in the log that matched no start (shown, not indented).
    pub log_unpaired: u64,
    /// Rows covering the profile's span.
    pub counters: Vec<CounterRow>,
    pub counter_interval_ns: u64,
    pub exception_sampling: ExceptionSampling,
    /// IL code size per FunctionID (from `FunctionCompiled.il_size`; absent when 0 / unknown).
    pub il_sizes: HashMap<u64, u32>,
    /// The events in the range as points and intervals in time, for a timeline.
    pub times: EventTimes,
    /// Packed records of the agent (`ExceptionCounts`, `AllocationSamples`) that could not be
    /// read (damaged) and were skipped.
    pub damaged_records: u64,
}

/// Runtime events in time (ns since the agent started), each list sorted by time and limited to
/// the profile's range.
///
/// Exceptions: during an exception storm the agent observes only the throws of its sampling
/// windows. `throws` holds the throws observed at full detail, one point per exception;
/// `sampled_throws` the throws seen in a storm's windows, which are samples: a timeline should
/// not draw them as they are but draw each storm of `storms` as its estimated throws spread
/// evenly over its interval (as the counters do), or weigh each sampled throw by the storm's
/// (paused + window time) / window time.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct EventTimes {
    /// Exceptions thrown outside storms: (ts, os_tid).
    pub throws: Vec<(u64, u32)>,
    /// Exceptions observed in a storm's sampling windows: (ts, os_tid), samples of `storms`.
    pub sampled_throws: Vec<(u64, u32)>,
    /// Storms clipped to the range: (from, to, estimated throws in that part).
    pub storms: Vec<(u64, u64, f64)>,
    /// Runtime suspensions (GC or other) clipped to the range: (suspended, resumed).
    pub pauses: Vec<(u64, u64)>,
    /// Ended monitor contentions by start: (start, os_tid, wait_ns).
    pub contentions: Vec<(u64, u32, u64)>,
    /// Allocations: (ts, os_tid, bytes): each sample with the bytes it stands for, and each
    /// exact-count record (os_tid 0) with its bytes.
    pub allocations: Vec<(u64, u32, u64)>,
}

/// Values numbered in the order first seen (type names and stacks are repeated a lot).
#[derive(Clone, Debug)]
struct Interner<T> {
    ids: HashMap<T, u32>,
    items: Vec<T>,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner { ids: HashMap::new(), items: Vec::new() }
    }
}

impl<T: Eq + Hash + Clone> Interner<T> {
    fn id<Q>(&mut self, v: &Q) -> u32
    where
        T: Borrow<Q>,
        Q: Eq + Hash + ToOwned<Owned = T> + ?Sized,
    {
        if let Some(&i) = self.ids.get(v) {
            return i;
        }
        let i = self.items.len() as u32;
        self.items.push(v.to_owned());
        self.ids.insert(v.to_owned(), i);
        i
    }

    fn find<Q>(&self, v: &Q) -> Option<u32>
    where
        T: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.ids.get(v).copied()
    }

    fn get(&self, i: u32) -> &T {
        &self.items[i as usize]
    }
}

/// Collects runtime-event records while the trace is read.
#[derive(Clone, Debug, Default)]
pub struct EventsBuilder {
    exceptions: exceptions::ExceptionFacts,
    gcs: gc::GcFacts,
    allocs: alloc::AllocFacts,
    contention: contention::ContentionFacts,
    log: log::EventLog,
    il_sizes: HashMap<u64, u32>,
    /// `AllocationSamples` records that could not be unpacked.
    damaged_alloc: u64,
    /// The stacks `AllocationSamples` refer to (`AllocationStack`).
    alloc_stacks: clrprof_trace::AllocationStacks,
}

impl EventsBuilder {
    /// Marks the trace as recorded with the event log on (`events=true` in the agent's config).
    pub fn set_log_enabled(&mut self, on: bool) {
        self.log.enabled = on;
    }

    /// Every record passes here for the event log (only kept with `--events`).
    pub fn log(&mut self, r: &Record) {
        if let Record::FunctionCompiled(f) = r {
            if f.il_size > 0 {
                self.il_sizes.insert(f.id, f.il_size);
            }
        }
        if !self.log.enabled {
            return;
        }
        let log = &mut self.log;
        use Record as R;
        match r {
            R::AssemblyLoaded(a) => {
                log.push(a.ts, 0, format!("assembly loaded {} ({} µs)", a.name, a.load_ns / 1000), 0)
            }
            R::ModuleLoaded(m) if m.load_ns != 0 => {
                log.push(m.ts, 0, format!("module loaded {} ({} µs)", m.path, m.load_ns / 1000), 0)
            }
            R::FunctionCompiled(f) if f.kind == clrprof_trace::code_kind::JIT && f.jit_ns > 0 => {
                // JIT compilation as a start/finish pair on the compiling thread.
                let what = format!("jit {}", f.name);
                log.push(f.ts.saturating_sub(f.jit_ns), f.os_tid, what.clone(), 1);
                log.push(f.ts, f.os_tid, what, -1);
            }
            R::FunctionCompiled(f) => log.push(
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
            R::ThreadCreated(t) => log.push(t.ts, 0, format!("thread created 0x{:x}", t.id), 0),
            R::ThreadDestroyed(t) => log.push(t.ts, 0, format!("thread destroyed 0x{:x}", t.id), 0),
            R::ThreadOsId(t) => log.push(t.ts, t.os_tid, format!("thread 0x{:x} is tid {}", t.id, t.os_tid), 0),
            R::ThreadNamed(t) => log.push(t.ts, 0, format!("thread 0x{:x} named {:?}", t.id, t.name), 0),
            _ => {}
        }
    }

    /// Drops the per-event facts dated before `ts` (see [`crate::ProfileBuilder::forget_before`]).
    pub fn forget_before(&mut self, ts: u64) {
        self.exceptions.forget_before(ts);
        self.gcs.forget_before(ts);
        self.allocs.forget_before(ts);
        self.contention.forget_before(ts);
        self.log.forget_before(ts);
    }

    /// Per-event facts kept.
    pub fn retained(&self) -> usize {
        self.exceptions.retained()
            + self.gcs.retained()
            + self.allocs.retained()
            + self.contention.retained()
            + self.log.retained()
    }

    /// Keeps a runtime-event record (tags 70–99) as a fact.
    pub fn add(&mut self, r: &Record) {
        use Record as R;
        let log = &mut self.log;
        match r {
            R::ExceptionThrown(e) => {
                self.exceptions.thrown(e);
                log.push(e.ts, e.os_tid, format!("exception thrown {}", e.type_name), 0);
            }
            R::ExceptionPhase(x) => {
                let (what, nest) = log::exception_log(x.phase);
                log.push(x.ts, x.os_tid, what.to_string(), nest);
                self.exceptions.phase(x);
            }
            R::ExceptionCaught(x) => self.exceptions.caught(x),
            R::ExceptionMonitoring(m) => self.exceptions.monitoring(m),
            R::ExceptionCount(c) => self.exceptions.count(c),
            R::ExceptionType(t) => self.exceptions.type_def(t),
            R::ExceptionStack(st) => self.exceptions.stack_def(st),
            R::ExceptionCounts(c) => self.exceptions.counts(c),
            R::GcStarted(g) => {
                self.gcs.started(g);
                let what = format!("gc gen{} {}", g.generation, if g.reason == 1 { "induced" } else { "" });
                log.push(g.ts, g.os_tid, what.trim_end().to_string(), 1);
            }
            R::GcFinished(g) => {
                self.gcs.finished(g);
                log.push(g.ts, g.os_tid, "gc".into(), -1);
            }
            R::GcInfo(g) => self.gcs.info(g),
            R::GcEnd(g) => self.gcs.end(g),
            R::RuntimeSuspended(s) => {
                self.gcs.suspended(s.ts);
                log.push(s.ts, s.os_tid, format!("runtime suspended ({})", log::suspend_reason(s.reason)), 1);
            }
            R::RuntimeResumed(s) => {
                self.gcs.resumed(s.ts);
                log.push(s.ts, s.os_tid, "runtime suspended".into(), -1);
            }
            R::ContentionStarted(c) => {
                self.contention.started(c);
                log.push(c.ts, c.os_tid, "lock contention".into(), 1);
            }
            R::ContentionEnded(c) => {
                self.contention.ended(c);
                log.push(c.ts, c.os_tid, "lock contention".into(), -1);
            }
            R::ContentionStack(c) => self.contention.stack(c),
            R::ContentionCounts(c) => self.contention.counts(c),
            R::AllocationCounts(a) => self.allocs.counts(a),
            R::AllocationSample(a) => {
                let type_name = self.allocs.sample(a);
                if log.enabled {
                    log.push(a.ts, a.os_tid, format!("allocation sampled {} ({} bytes)", type_name, a.size), 0);
                }
            }
            R::AllocationStack(st) => self.alloc_stacks.define(st),
            R::AllocationSamples(packed) => match packed.unpack_with(&self.alloc_stacks) {
                Ok(samples) => {
                    self.allocs.thinned(packed.ts, packed.thinned);
                    for a in &samples {
                        let type_name = self.allocs.sample(a);
                        if log.enabled {
                            let what = format!("allocation sampled {} ({} bytes)", type_name, a.size);
                            log.push(a.ts, a.os_tid, what, 0);
                        }
                    }
                }
                Err(_) => self.damaged_alloc += 1,
            },
            _ => {}
        }
    }

    /// Computes the runtime-event tables of a profile (`p.events`, replaced: see
    /// `Profile::set_events`) from the facts inside `range`: exceptions by throw time, GCs by
    /// start time with their pauses clipped to the range, allocation samples by time (their costs
    /// replace the allocation costs of `p.costs`), contention by start time, log lines by time,
    /// counter rows over `p.span` within the range. `p`'s functions, threads, assemblies and
    /// duration must be set. Does not consume the facts: call it again (on the same profile or
    /// another) after more records were added.
    pub fn finish(&self, p: ProfileTables<'_>, range: TimeRange) -> RuntimeEvents {
        let names: HashMap<u64, String> = p.functions.iter().map(|f| (f.id, f.name.clone())).collect();
        let name = |id: u64| -> String {
            if id == 0 {
                String::new()
            } else {
                names.get(&id).cloned().unwrap_or_else(|| format!("<function 0x{id:x}>"))
            }
        };
        let ex = self.exceptions.finish(p.costs, &name, range, p.duration_ns);
        let all_gcs = self.gcs.resolve(range);
        let pauses = self.gcs.pauses(range);
        let al = self.allocs.finish(p.costs, &name, range);
        let ct = self.contention.finish(p.costs, &name, range);
        let (log, log_unpaired) = self.log.finish(range);
        let facts = counters::CounterFacts {
            gcs: &all_gcs,
            throws: &ex.throws,
            storms: &ex.storms,
            allocs: &al.times,
            contentions: &ct.starts,
        };
        let (counters, counter_interval_ns) = counters::counters(&p, range, &facts);
        RuntimeEvents {
            exceptions: ex.groups,
            time_in_gc_ns: time_in_gc(&all_gcs, range),
            gcs: all_gcs.into_iter().filter(|g| range.contains(g.start_ns)).collect(),
            allocations: al.allocations,
            alloc_sites: al.sites,
            alloc_exact: al.exact,
            alloc_samples: al.samples,
            alloc_estimator: al.estimator,
            alloc_unweighted_walks: al.unweighted_walks,
            alloc_thinned: al.thinned,
            contentions: ct.sites,
            log,
            log_enabled: self.log.enabled,
            log_unpaired,
            counters,
            counter_interval_ns,
            exception_sampling: ex.sampling,
            il_sizes: self.il_sizes.clone(),
            times: EventTimes {
                throws: ex.throws,
                sampled_throws: ex.sampled_throws,
                storms: ex.storms,
                pauses,
                contentions: ct.times,
                allocations: al.times,
            },
            damaged_records: self.exceptions.damaged + self.damaged_alloc,
        }
    }
}

/// What [`EventsBuilder::finish`] reads of the profile it completes, and the costs it adds the
/// allocation, exception and contention stacks to.
pub struct ProfileTables<'a> {
    pub functions: &'a [Function],
    pub threads: &'a [Thread],
    pub assemblies: &'a [Assembly],
    /// The run's length (ns since the agent started).
    pub duration_ns: u64,
    /// What the profile covers: start and end, ns since the agent started (`Profile::span`).
    pub span: (u64, u64),
    pub costs: &'a mut CostTree,
}
