//! Folds the record stream into profiles. Records can be added at any time and a [`Profile`] taken
//! between additions (a live profile that grows while the trace is still being written); every
//! profile equals a one-shot load of the records added so far. Costs and events keep their times,
//! so a profile can cover any window of the run ([`ProfileBuilder::profile`]).

use std::collections::{BTreeMap, HashMap};

use clrprof_trace::Record;

use crate::process::*;
use crate::profile::*;
use crate::samples::{NativeSymbols, NoSymbols};
use crate::stacks::StackTable;
use crate::time::TimeRange;

/// Folds records into a [`Profile`].
#[derive(Default)]
pub struct ProfileBuilder {
    p: Profile,
    threads: HashMap<u64, Thread>,
    appdomains: HashMap<u64, AppDomain>,
    assemblies: HashMap<u64, Assembly>,
    modules: HashMap<u64, Module>,
    classes: HashMap<u64, Class>,
    functions: HashMap<u64, Function>,
    last_ts: u64,
    end_unix_ns: Option<u64>,
    started: bool,
    /// Stacks interned while records arrive (instrumentation's call-tree nodes); a profile starts
    /// from a copy and adds sampled and event stacks.
    stacks: StackTable,
    samples: crate::samples::SampleData,
    /// The task library's events (`--async`), and whether stacks stay as sampled.
    tasks: crate::asynchrony::TaskData,
    physical_stacks: bool,
    hide_idle: bool,
    cct: crate::instrumented::CctIngest,
    /// `record --count`'s slots and deltas.
    counts: crate::counts::CountIngest,
    events: crate::events::EventsBuilder,
    /// Requests, waits and the thread pool (`record --async`).
    requests: crate::requests::RequestFacts,
    /// Records of tags this version does not know, by tag (written by a newer agent).
    unknown: BTreeMap<u16, u64>,
    records: u64,
    /// Impossible values found at ingestion (clamped or dropped), for the profile's messages.
    sanity: crate::sanity::Sanity,
}

impl ProfileBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    fn thread(&mut self, id: u64) -> &mut Thread {
        self.threads.entry(id).or_insert_with(|| Thread { id, ..Default::default() })
    }

    /// Keeps threads' stacks as sampled in a trace with async data (no logical stacks).
    pub fn set_physical_stacks(&mut self, physical: bool) {
        self.physical_stacks = physical;
    }

    /// Leaves idle threads' wall samples (`[idle]`) out of a trace with async data.
    pub fn set_hide_idle(&mut self, hide: bool) {
        self.hide_idle = hide;
    }

    /// For a reader that asks for one profile, of `range`, once every record is added
    /// ([`into_profile`](Self::into_profile)): call-tree deltas are summed per node as they arrive
    /// instead of kept, and the call-site table is kept only with `call_sites` (a profile with
    /// call-site lines). Other ranges then see the same call-tree costs. Call before adding records.
    ///
    /// With `merge_threads`, the sums of every thread are one table (kept under the first thread
    /// with call trees): for a profile only read with threads merged.
    pub fn fold_call_trees(&mut self, range: TimeRange, call_sites: bool, merge_threads: bool) {
        // Call-site lines restack each node by its call site when the profile is built: the
        // deltas are then kept per node.
        if !call_sites {
            self.cct.fold_within(range, merge_threads);
        }
    }

    /// Records added so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Adds one record. A record claiming an impossible time or weight is clamped or dropped first
    /// (and counted in the profile's messages): see [`crate::sanity`].
    pub fn add(&mut self, r: &Record) {
        self.records += 1;
        match self.sanity.check(r) {
            Some(std::borrow::Cow::Borrowed(r)) => self.add_checked(r),
            Some(std::borrow::Cow::Owned(r)) => self.add_checked(&r),
            None => {}
        }
    }

    fn add_checked(&mut self, r: &Record) {
        use Record as R;
        self.events.log(r);
        match r {
            R::TaskEvents(_) => self.tasks.add(r),
            R::ProcessStart(s) => {
                if self.started {
                    self.p.messages.push("the trace holds a second ProcessStart record; kept the first".into());
                    return;
                }
                self.started = true;
                let p = &mut self.p.process;
                p.pid = s.pid;
                p.command_line = s.command_line.clone();
                p.runtime_version = s.runtime_version.clone();
                p.runtime_major = s.runtime_major;
                p.info_version = s.info_version;
                p.agent_version = s.agent_version.clone();
                p.config = s.config.clone();
                p.event_mask_low = s.event_mask_low;
                p.event_mask_high = s.event_mask_high;
                p.start_unix_ns = s.start_unix_ns;
                p.host = s.host.clone();
                p.service = s.service.clone();
                p.labels =
                    s.labels.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect();
                self.events.set_log_enabled(s.config.lines().any(|l| l == "events=true"));
            }
            R::AgentStop(s) => {
                self.p.process.clean_shutdown = true;
                self.p.process.records_dropped = s.records_dropped;
                self.last_ts = self.last_ts.max(s.ts);
                if s.records_dropped > 0 {
                    self.p.messages.push(format!(
                        "the agent dropped {} records ({} bytes): the trace sink failed or fell behind",
                        s.records_dropped, s.bytes_dropped
                    ));
                }
            }
            R::ProcessExit(e) => {
                self.p.process.exit_code = e.exit_code;
                self.p.process.signal = e.signal;
                self.end_unix_ns = Some(e.end_unix_ns);
            }
            R::Message(m) => {
                let level = match m.level {
                    0 => "info",
                    1 => "warning",
                    _ => "error",
                };
                self.p.messages.push(format!("agent {level}: {}", m.text));
            }
            R::AppDomainCreated(a) => {
                self.last_ts = self.last_ts.max(a.ts);
                let e = self.appdomains.entry(a.id).or_default();
                e.id = a.id;
                e.name = a.name.clone();
                e.created_ns = a.ts;
            }
            R::AppDomainUnloaded(a) => {
                if let Some(e) = self.appdomains.get_mut(&a.id) {
                    e.unloaded_ns = Some(a.ts);
                }
            }
            R::AssemblyLoaded(a) => {
                self.last_ts = self.last_ts.max(a.ts);
                self.assemblies.insert(
                    a.id,
                    Assembly {
                        id: a.id,
                        name: a.name.clone(),
                        appdomain: a.appdomain,
                        module: a.module,
                        loaded_ns: a.ts,
                        load_ns: a.load_ns,
                        unloaded_ns: None,
                    },
                );
            }
            R::AssemblyUnloaded(a) => {
                if let Some(e) = self.assemblies.get_mut(&a.id) {
                    e.unloaded_ns = Some(a.ts);
                }
            }
            R::ModuleLoaded(m) => {
                self.last_ts = self.last_ts.max(m.ts);
                let e = self.modules.entry(m.id).or_insert_with(|| Module {
                    id: m.id,
                    loaded_ns: m.ts,
                    ..Default::default()
                });
                e.path = m.path.clone();
                e.base_address = m.base_address;
                if m.assembly != 0 {
                    e.assembly = m.assembly;
                }
                if m.load_ns != 0 {
                    e.load_ns = m.load_ns;
                }
            }
            R::ModuleUnloaded(m) => {
                if let Some(e) = self.modules.get_mut(&m.id) {
                    e.unloaded_ns = Some(m.ts);
                }
            }
            R::ClassLoaded(c) => {
                self.last_ts = self.last_ts.max(c.ts);
                self.classes.insert(
                    c.id,
                    Class {
                        id: c.id,
                        name: c.name.clone(),
                        token: c.token,
                        module: c.module,
                        loaded_ns: c.ts,
                        unloaded_ns: None,
                    },
                );
            }
            R::ClassUnloaded(c) => {
                if let Some(e) = self.classes.get_mut(&c.id) {
                    e.unloaded_ns = Some(c.ts);
                }
            }
            R::FunctionCompiled(f) => {
                self.last_ts = self.last_ts.max(f.ts);
                let e = self.functions.entry(f.id).or_insert_with(|| Function {
                    id: f.id,
                    name: f.name.clone(),
                    class_name: f.class_name.clone(),
                    signature: f.signature.clone(),
                    token: f.token,
                    class: f.class,
                    module: f.module,
                    kind: f.kind,
                    first_compiled_ns: f.ts,
                    ..Default::default()
                });
                if e.unloaded_ns.is_some_and(|u| u <= f.ts) {
                    // The id of a freed method (a collected DynamicMethod) reused by new code: the
                    // entry is the new method's from now on.
                    e.name = f.name.clone();
                    e.class_name = f.class_name.clone();
                    e.signature = f.signature.clone();
                    (e.token, e.class, e.module, e.kind) = (f.token, f.class, f.module, f.kind);
                    e.unloaded_ns = None;
                }
                e.code_start = f.code_start;
                e.code_size = f.code_size;
                e.jit_ns += f.jit_ns;
                e.compilations += 1;
                e.code.push((f.code_start, f.code_size));
            }
            R::FunctionUnloaded(f) => {
                if let Some(e) = self.functions.get_mut(&f.id) {
                    e.unloaded_ns = Some(f.ts);
                }
            }
            R::ThreadCreated(t) => {
                self.last_ts = self.last_ts.max(t.ts);
                self.thread(t.id).created_ns = Some(t.ts);
            }
            R::ThreadDestroyed(t) => {
                self.last_ts = self.last_ts.max(t.ts);
                self.thread(t.id).destroyed_ns = Some(t.ts);
            }
            R::ThreadOsId(t) => {
                self.thread(t.id).os_tid = Some(t.os_tid);
            }
            R::ThreadNamed(t) => {
                let th = self.thread(t.id);
                th.name = t.name.clone();
                th.names.push((t.ts, t.name.clone()));
            }
            R::ExceptionThrown(_)
            | R::ExceptionPhase(_)
            | R::ExceptionCaught(_)
            | R::ExceptionMonitoring(_)
            | R::ExceptionCount(_)
            | R::ExceptionType(_)
            | R::ExceptionStack(_)
            | R::ExceptionCounts(_)
            | R::GcStarted(_)
            | R::GcFinished(_)
            | R::RuntimeSuspended(_)
            | R::RuntimeResumed(_)
            | R::GcInfo(_)
            | R::GcEnd(_)
            | R::AllocationCounts(_)
            | R::AllocationSample(_)
            | R::AllocationSamples(_)
            | R::AllocationStack(_)
            | R::ContentionStarted(_)
            | R::ContentionEnded(_)
            | R::ContentionStack(_)
            | R::ContentionCounts(_) => {
                if let Some(ts) = event_ts(r) {
                    self.last_ts = self.last_ts.max(ts);
                }
                self.events.add(r)
            }
            R::InstrumentationInfo(i) => {
                self.p.instrumentation = Some(crate::instrumented::Instrumentation::from_record(i));
            }
            R::CallTreeNodes(n) => self.cct.nodes(&mut self.stacks, n),
            R::CallTreeDelta(d) => {
                self.last_ts = self.last_ts.max(d.ts);
                self.cct.delta(d);
            }
            R::CallTreeCosts(c) if self.cct.is_folding() => {
                self.last_ts = self.last_ts.max(c.ts);
                if self.cct.fold_packed(c, crate::sanity::Sanity::delta_max(c.ts)) {
                    self.sanity.delta_clamped();
                }
            }
            R::CallTreeCosts(c) => {
                self.last_ts = self.last_ts.max(c.ts);
                match c.unpack() {
                    Ok(d) => self.cct.delta(&self.sanity.delta(&d).unwrap_or(d)),
                    Err(_) => self.cct.problems += 1,
                }
            }
            R::FlowEvents(f) => crate::instrumented::flow(&mut self.p.flow, f),
            R::CountInfo(c) => self.p.instrumentation = Some(crate::counts::CountIngest::info(c)),
            R::CountMethod(m) => self.counts.method(self.p.instrumentation.as_mut(), m),
            R::CountDeltas(d) => {
                self.last_ts = self.last_ts.max(d.ts);
                self.counts.deltas(d);
            }
            R::FunctionHooked(h) => {
                if let Some(i) = self.p.instrumentation.as_mut() {
                    if h.hooked {
                        i.hooked_functions += 1;
                        i.hooked.insert(h.id);
                    } else {
                        i.filtered_functions += 1;
                    }
                }
            }
            R::SamplingStart(_)
            | R::CodeRange(_)
            | R::IlMap(_)
            | R::TypeLoad(_)
            | R::NativeMapping(_)
            | R::SampleStack(_)
            | R::CpuSample(_)
            | R::WallSample(_)
            | R::SamplerStats(_)
            | R::SampleActivity(_)
            | R::ActivityOffset(_) => {
                if let R::CpuSample(c) = r {
                    self.last_ts = self.last_ts.max(c.ts);
                }
                self.samples.add(r)
            }
            R::TriggerFired(f) => {
                self.last_ts = self.last_ts.max(f.ts);
                self.p.triggers.push(crate::triggers::TriggerFire::from_record(f));
            }
            R::TriggerEnded(e) => {
                if let Some(t) = self.p.triggers.iter_mut().rev().find(|t| t.seq == e.seq) {
                    t.ended(e);
                }
            }
            // Heap snapshots are an object graph, not part of the profile: `clrprof_load::heap`.
            R::HeapSnapshotStart(_)
            | R::HeapTypes(_)
            | R::HeapNodes(_)
            | R::HeapEdges(_)
            | R::HeapRoots(_)
            | R::HeapStaticRoots(_)
            | R::HeapDependentEdges(_)
            | R::HeapSnapshotEnd(_) => {}
            R::RequestStarted(_)
            | R::RequestStopped(_)
            | R::RequestEndpoint(_)
            | R::WaitStarted(_)
            | R::WaitEnded(_)
            | R::ThreadPoolWorkers(_) => {
                self.last_ts = self.last_ts.max(crate::requests::record_ts(r));
                self.requests.add(r);
            }
            R::Unknown { tag, .. } => *self.unknown.entry(*tag).or_default() += 1,
        }
    }

    /// Forgets the per-sample and per-event records dated before `ts` (trace time): samples,
    /// call-tree deltas, flow events, allocations, contentions, finished GCs and suspensions,
    /// caught exceptions, log lines. What later records refer to stays: functions, classes,
    /// modules, threads, stack definitions, code ranges, call-tree nodes, and open state
    /// (exceptions in flight, a GC or suspension under way, a contention not ended). A profile of a
    /// range that starts at `ts` or later is then what it would have been, except: under the
    /// exception rate limit (`ExceptionMonitoring` records) caught exceptions are kept whole (a
    /// storm's estimate draws on the whole run), and if the rate limit engages only after a
    /// forget, its estimates see the exceptions kept; the event log's depths and unpaired count no
    /// longer see lines before `ts`. For a live run pushed window by window (constant memory);
    /// other users never call it.
    /// Prepares the sample records for many profiles of ranges of time (`SampleData::prepare_ranges`):
    /// for a reader that keeps the builder and profiles ranges again and again (the viewer).
    pub fn prepare_ranges(&self) {
        self.samples.prepare_ranges();
    }

    /// Makes the time index of the sample records (`SampleData::prepare_index`): for a reader that
    /// keeps the builder and asks for timelines and ranges (the viewer).
    pub fn prepare_index(&self) {
        self.samples.prepare_index();
    }

    pub fn forget_before(&mut self, ts: u64) {
        self.samples.forget_before(ts);
        self.cct.forget_before(ts);
        self.events.forget_before(ts);
        self.requests.forget_before(ts);
        for t in &mut self.p.flow {
            t.forget_before(ts);
        }
    }

    /// Per-sample and per-event records kept (what [`ProfileBuilder::forget_before`] drops): a
    /// size measure of a live builder.
    pub fn retained(&self) -> u64 {
        let flow: usize = self.p.flow.iter().map(|t| t.len()).sum();
        (self.samples.retained() + self.cct.retained() + self.events.retained() + self.requests.retained() + flow)
            as u64
    }

    /// A reader warning to keep with the profile (e.g. truncation).
    pub fn warn(&mut self, message: String) {
        self.p.messages.push(message);
    }

    /// The profile of the whole run, native frames unnamed.
    pub fn finish(self) -> Profile {
        self.into_profile(TimeRange::ALL, &mut NoSymbols)
    }

    /// The profile of the whole run, naming native frames through `symbols`.
    pub fn finish_with(self, symbols: &mut dyn NativeSymbols) -> Profile {
        self.into_profile(TimeRange::ALL, symbols)
    }

    /// The profile of the records added so far, limited to `range` (costs, samples, calls and
    /// runtime events in the window; the tables of threads, modules, classes and functions whole),
    /// naming native frames through `symbols`. The builder is left as it was: add more records and
    /// ask again.
    pub fn profile(&self, range: TimeRange, symbols: &mut dyn NativeSymbols) -> Profile {
        self.build(range, symbols, None, true, None)
    }

    /// [`profile`](Self::profile) without the per-sample records (`samples` left empty; costs,
    /// sampling totals and everything else the same): for a caller that keeps the builder and
    /// reads them with [`each_sample`](Self::each_sample) rather than hold them twice.
    pub fn profile_untimed(&self, range: TimeRange, symbols: &mut dyn NativeSymbols) -> Profile {
        self.build(range, symbols, None, false, None)
    }

    /// Calls `f` with each sample record added so far inside `range`, in trace order: the records
    /// [`profile`](Self::profile) puts in `samples` (there sorted by time and thread), less their
    /// stacks. Records dropped by [`forget_before`](Self::forget_before) are not seen.
    /// With `same_group`, records of one thread and weight may come summed (see
    /// [`SampleData::each_sample`](crate::samples::SampleData::each_sample)).
    pub fn each_sample(
        &self,
        range: TimeRange,
        same_group: Option<crate::samples::SameGroup<'_>>,
        f: impl FnMut(crate::samples::SampleTime),
    ) {
        self.samples.each_sample(range, same_group, f)
    }

    /// The profile of all records added, limited to `range`, consuming the builder: the same
    /// profile as [`profile`](Self::profile), built without keeping a second copy of the sample
    /// records (for one-shot readers of large traces).
    pub fn into_profile(mut self, range: TimeRange, symbols: &mut dyn NativeSymbols) -> Profile {
        let events = self.samples.take_events();
        let owned = Owned { stacks: std::mem::take(&mut self.stacks), cct: std::mem::take(&mut self.cct) };
        self.build(range, symbols, Some(events), true, Some(owned))
    }

    fn build(
        &self,
        range: TimeRange,
        symbols: &mut dyn NativeSymbols,
        sample_events: Option<Vec<crate::samples::SampleEvent>>,
        timed: bool,
        owned: Option<Owned>,
    ) -> Profile {
        let cct = owned.as_ref().map_or(&self.cct, |o| &o.cct);
        let mut p = Profile::default();
        p.process = self.p.process.clone();
        p.messages = self.p.messages.clone();
        p.instrumentation = self.p.instrumentation.clone();
        p.triggers = self.p.triggers.iter().filter(|t| range.contains(t.ts_ns)).cloned().collect();
        p.range = range;
        if cct.problems > 0 {
            p.messages.push(format!(
                "{} call-tree records could not be placed (records were lost); call counts may be low",
                cct.problems
            ));
        }
        if !self.unknown.is_empty() {
            let n: u64 = self.unknown.values().sum();
            let tags: Vec<String> = self.unknown.iter().map(|(tag, k)| format!("{tag} ({k})")).collect();
            p.messages.push(format!(
                "{n} records of unknown types skipped (written by a newer clrprof): tags {}",
                tags.join(", ")
            ));
        }
        p.messages.extend(self.sanity.messages());
        p.flow = self.p.flow.iter().map(|t| t.within(range)).collect();
        p.flow.sort_by_key(|t| t.os_tid);
        p.process.duration_ns = match self.end_unix_ns {
            Some(end) if end >= p.process.start_unix_ns && p.process.start_unix_ns != 0 => {
                end - p.process.start_unix_ns
            }
            _ => self.last_ts,
        };
        p.threads = sorted(&self.threads, |t| (t.created_ns.unwrap_or(u64::MAX), t.id));
        p.appdomains = sorted(&self.appdomains, |a| (a.created_ns, a.id));
        p.assemblies = self.assemblies.values().cloned().collect();
        p.assemblies.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
        p.modules = self.modules.values().cloned().collect();
        p.modules.sort_by(|a, b| a.path.cmp(&b.path).then(a.id.cmp(&b.id)));
        p.classes = self.classes.values().cloned().collect();
        p.classes.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
        p.functions = self.functions.values().cloned().collect();
        p.functions.extend(self.counts.definitions(&self.functions));
        p.functions.sort_by(|a, b| a.name.cmp(&b.name).then(a.signature.cmp(&b.signature)).then(a.id.cmp(&b.id)));
        p.index();
        // The builder's stacks and call trees moved out when it is consumed, else copied.
        let (stacks, owned_cct) = match owned {
            Some(o) => (o.stacks, Some(o.cct)),
            None => (self.stacks.clone(), None),
        };
        p.costs.stacks = stacks;
        let cct = owned_cct.as_ref().unwrap_or(&self.cct);
        // Instrumented calls at their call sites' lines, in a profile built with lines.
        let site_stacks = (symbols.call_site_lines() && !cct.sites().is_empty()).then(|| {
            let lines = crate::lines::LineContext::new(&self.samples.il_maps, &p.functions, &p.modules);
            crate::callsites::site_stacks(cct.sites(), &mut p.costs.stacks, &lines, symbols)
        });
        match owned_cct {
            Some(c) => c.into_costs(&mut p.costs, range, site_stacks.as_deref()),
            None => self.cct.add_to(&mut p.costs, range, site_stacks.as_deref()),
        }
        let lost = self.counts.add_to(&mut p.costs, range) + self.counts.problems;
        if lost > 0 {
            p.messages.push(format!("{lost} call-count slots or records could not be placed (records were lost)"));
        }
        let with_tasks = !self.tasks.is_empty();
        self.samples.resolve_with(&mut p, symbols, range, sample_events, timed || with_tasks);
        p.set_events(&self.events, range);
        p.set_requests(&self.requests, range);
        name_frames(&mut p);
        if with_tasks {
            // Logical async stacks and awaiting time (`crate::asynchrony`).
            self.tasks.apply(&mut p, !self.physical_stacks, self.hide_idle);
            if !timed {
                p.samples = Vec::new();
            }
        }
        p.costs.shrink_to_fit();
        p
    }
}

/// What [`ProfileBuilder::into_profile`] moves out of the builder rather than copy.
struct Owned {
    stacks: StackTable,
    cct: crate::instrumented::CctIngest,
}

fn sorted<T: Clone, K: Ord>(m: &HashMap<u64, T>, key: impl Fn(&T) -> K) -> Vec<T> {
    let mut v: Vec<T> = m.values().cloned().collect();
    v.sort_by_key(|t| key(t));
    v
}

fn event_ts(r: &Record) -> Option<u64> {
    use Record as R;
    Some(match r {
        R::ExceptionThrown(x) => x.ts,
        R::ExceptionPhase(x) => x.ts,
        R::ExceptionCounts(x) => x.ts,
        R::GcStarted(x) => x.ts,
        R::GcFinished(x) => x.ts,
        R::GcEnd(x) => x.ts,
        R::AllocationSample(x) => x.ts,
        R::AllocationSamples(x) => x.ts,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_trace::*;

    /// Every thread's costs by stack, as sorted text: two profiles compare equal when they hold the
    /// same costs on the same frames, whatever their stack ids.
    fn thread_costs(p: &Profile) -> Vec<String> {
        let mut v: Vec<String> = p
            .costs
            .threads
            .iter()
            .flat_map(|t| {
                t.costs.iter().map(move |(s, c)| format!("{} {:?} {c:?}", t.os_tid, p.costs.stacks.frames_of(s)))
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn merges_records_into_sorted_tables() {
        let recs: Vec<Record> = vec![
            ProcessStart { pid: 5, start_unix_ns: 1_000, runtime_version: "10.0.1".into(), ..Default::default() }
                .into(),
            ThreadCreated { ts: 10, id: 2 }.into(),
            ThreadCreated { ts: 5, id: 1 }.into(),
            ThreadOsId { ts: 11, id: 2, os_tid: 77 }.into(),
            ThreadNamed { ts: 12, id: 2, name: "a".into() }.into(),
            ThreadNamed { ts: 13, id: 2, name: "b".into() }.into(),
            ModuleLoaded { ts: 1, id: 9, assembly: 0, path: "/x/App.dll".into(), base_address: 0x1000, load_ns: 50 }
                .into(),
            ModuleLoaded { ts: 2, id: 9, assembly: 8, path: "/x/App.dll".into(), base_address: 0x1000, load_ns: 0 }
                .into(),
            FunctionCompiled { ts: 20, id: 3, name: "B.M".into(), code_size: 10, jit_ns: 7, ..Default::default() }
                .into(),
            FunctionCompiled { ts: 30, id: 3, name: "B.M".into(), code_size: 12, jit_ns: 3, ..Default::default() }
                .into(),
            FunctionCompiled { ts: 25, id: 4, name: "A.M".into(), code_size: 5, ..Default::default() }.into(),
            AgentStop { ts: 40, ..Default::default() }.into(),
            ProcessExit { end_unix_ns: 2_000, exit_code: Some(3), signal: None }.into(),
        ];
        let mut b = ProfileBuilder::new();
        for r in &recs {
            b.add(r);
        }
        let p = b.finish();
        assert_eq!(p.threads.iter().map(|t| t.id).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(p.threads[1].name, "b");
        assert_eq!(p.threads[1].names.len(), 2);
        assert_eq!(p.threads[1].os_tid, Some(77));
        assert_eq!(p.modules[0].assembly, 8);
        assert_eq!(p.modules[0].load_ns, 50);
        assert_eq!(p.modules[0].file_name(), "App.dll");
        assert_eq!(p.functions.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), vec!["A.M", "B.M"]);
        assert_eq!(p.functions[1].compilations, 2);
        assert_eq!(p.functions[1].jit_ns, 10);
        assert_eq!(p.functions[1].code_size, 12);
        assert_eq!(p.process.exit_code, Some(3));
        assert_eq!(p.process.duration_ns, 1_000);
        assert!(p.process.clean_shutdown);
    }

    #[test]
    fn a_damaged_time_far_in_the_future_does_not_blow_up_the_series() {
        // Found by the fuzzer: a corrupted timestamp made the run 146 years long and the counter
        // series asked for 553 GB. Such a time is now damage: the thread is kept at the latest
        // plausible time, and the run is as long as its plausible records say.
        let mut b = ProfileBuilder::new();
        b.add(&ProcessStart { pid: 1, ..Default::default() }.into());
        b.add(&ThreadCreated { ts: 5_000, id: 2 }.into());
        b.add(&ThreadCreated { ts: 1 << 62, id: 1 }.into());
        let p = b.finish();
        assert_eq!(p.process.duration_ns, 5_000);
        assert_eq!(
            p.threads.iter().map(|t| (t.id, t.created_ns)).collect::<Vec<_>>(),
            [(1, Some(5_000)), (2, Some(5_000))]
        );
        assert!(
            p.messages.iter().any(|m| m.starts_with("damaged trace: 1 impossible values: times beyond")),
            "{:?}",
            p.messages
        );
        let rows = &p.events.counters;
        assert!(rows.len() <= 1, "{} rows", rows.len());
    }

    /// Impossible weights are clamped at ingestion and counted: a thread's CPU and wall samples
    /// cannot add up to more than the run so far (plus a second of slack), a call-tree cost cannot
    /// be longer than the run, a wait not longer than 417 days; samples dated beyond 417 days are
    /// dropped. Plausible values pass untouched.
    #[test]
    fn impossible_weights_are_clamped_and_counted() {
        const S: u64 = 1_000_000_000;
        let mut b = ProfileBuilder::new();
        b.add(&ProcessStart { pid: 1, ..Default::default() }.into());
        b.add(
            &FunctionCompiled {
                ts: 1,
                id: 10,
                name: "A.M".into(),
                code_start: 0x100,
                code_size: 16,
                ..Default::default()
            }
            .into(),
        );
        b.add(&SampleStack { id: 1, ips: vec![0x104], functions: vec![10], activity: 0 }.into());
        // Thread 7: 3 s of CPU at 2 s (one second of slack), then 0.5 s more at 10 s: plausible.
        b.add(&CpuSample { ts: 2 * S, os_tid: 7, stack: 1, count: 3, cpu_ns: 3 * S, activity: 0 }.into());
        b.add(&CpuSample { ts: 10 * S, os_tid: 7, stack: 1, count: 1, cpu_ns: S / 2, activity: 0 }.into());
        // Thread 8: u64::MAX twice (damage): clamped to the run so far, 11 s.
        b.add(&CpuSample { ts: 10 * S, os_tid: 8, stack: 1, count: 1, cpu_ns: u64::MAX, activity: 0 }.into());
        b.add(&CpuSample { ts: 10 * S, os_tid: 8, stack: 1, count: 1, cpu_ns: u64::MAX, activity: 0 }.into());
        // Dated beyond 417 days: dropped.
        b.add(&CpuSample { ts: 1 << 60, os_tid: 9, stack: 1, count: 1, cpu_ns: 5, activity: 0 }.into());
        b.add(&WallSample { ts: 10 * S, os_tid: 8, stack: 1, count: 1, wall_ns: u64::MAX - 1 }.into());
        b.add(&ContentionStarted { ts: S, os_tid: 8, stack: vec![10] }.into());
        b.add(&ContentionEnded { ts: 2 * S, os_tid: 8, duration_ns: u64::MAX }.into());
        // A call-tree node claiming u64::MAX calls and time at 2 s: clamped to 3 s (and 3e9 calls).
        b.add(
            &CallTreeNodes {
                os_tid: 7,
                first: 0,
                parents: vec![u32::MAX],
                functions: vec![10],
                tree: 1,
                sites: vec![],
            }
            .into(),
        );
        let d = CallTreeDelta {
            os_tid: 7,
            ts: 2 * S,
            nodes: vec![0],
            calls: vec![u64::MAX],
            time_ns: vec![u64::MAX],
            suspended_ns: vec![5],
            profiler_ns: vec![7],
            tree: 1,
        };
        b.add(&d.clone().into());
        b.add(&CallTreeCosts::pack(&d).unwrap().into());
        let p = b.finish();
        let inst: Vec<crate::Cost> =
            p.costs.threads.iter().flat_map(|t| t.costs.values()).filter(|c| c.calls > 0).collect();
        assert_eq!(inst.len(), 1);
        assert_eq!((inst[0].calls, inst[0].time_ns, inst[0].suspended_ns, inst[0].profiler_ns), (6 * S, 6 * S, 10, 14));
        let cpu = |tid: u32| {
            p.costs
                .threads
                .iter()
                .filter(|t| t.os_tid == tid)
                .flat_map(|t| t.costs.values())
                .map(|c| c.cpu_ns)
                .sum::<u64>()
        };
        assert_eq!(cpu(7), 3 * S + S / 2);
        assert_eq!(cpu(8), 11 * S);
        assert_eq!(cpu(9), 0);
        assert_eq!(p.sampling.cpu_samples, 3 + 1 + 2);
        let wall: u64 = p.costs.threads.iter().flat_map(|t| t.costs.values()).map(|c| c.wall_ns).sum();
        assert_eq!(wall, 11 * S);
        assert_eq!(p.events.contentions.iter().map(|c| c.wait_ns).sum::<u64>(), crate::sanity::MAX_TRACE_NS);
        let notes: Vec<&String> = p.messages.iter().filter(|m| m.starts_with("damaged trace")).collect();
        assert_eq!(notes.len(), 5, "{notes:?}");
        assert!(notes.iter().any(|m| m.contains(": 2 impossible values: call-tree costs")), "{notes:?}");
        assert!(notes.iter().any(|m| m.contains(": 2 impossible values: CPU samples")), "{notes:?}");
        assert!(
            notes.iter().any(|m| m.contains("1 impossible values: samples, events or costs dated beyond")),
            "{notes:?}"
        );
    }

    /// Call-tree costs packed (`CallTreeCosts`, what the agent writes now) read back as the same
    /// profile as the plain deltas of older traces; a damaged packing is skipped and counted.
    #[test]
    fn packed_call_tree_costs_read_back_the_same_profile() {
        let deltas = [
            CallTreeDelta {
                os_tid: 7,
                ts: 1_000,
                nodes: vec![0, 2],
                calls: vec![1, 40],
                time_ns: vec![500, 90_000],
                suspended_ns: vec![0, 10],
                profiler_ns: vec![20, 800],
                tree: 1,
            },
            CallTreeDelta {
                os_tid: 7,
                ts: 2_000,
                nodes: vec![1, 2],
                calls: vec![3, 5],
                time_ns: vec![7_000, 1_000],
                suspended_ns: vec![0, 0],
                profiler_ns: vec![60, 100],
                tree: 1,
            },
        ];
        let profile = |packed: bool| {
            let mut b = ProfileBuilder::new();
            b.add(&ProcessStart { pid: 1, ..Default::default() }.into());
            for (id, name) in [(10u64, "Main"), (20, "A"), (30, "B")] {
                b.add(&FunctionCompiled { ts: 1, id, name: name.into(), ..Default::default() }.into());
            }
            b.add(
                &CallTreeNodes {
                    os_tid: 7,
                    first: 0,
                    parents: vec![u32::MAX, 0, 1],
                    functions: vec![10, 20, 30],
                    tree: 1,
                    sites: vec![],
                }
                .into(),
            );
            for d in &deltas {
                b.add(&if packed { CallTreeCosts::pack(d).unwrap().into() } else { d.clone().into() });
            }
            b.finish()
        };
        let (plain, packed) = (profile(false), profile(true));
        assert_eq!(thread_costs(&plain), thread_costs(&packed));
        assert_eq!(thread_costs(&plain).len(), 3);
        assert_eq!(plain.process.duration_ns, packed.process.duration_ns);
        let total: u64 = packed.costs.threads.iter().flat_map(|t| t.costs.values()).map(|c| c.calls).sum();
        assert_eq!(total, 49);
        // A damaged packing: no costs from it, no panic.
        let mut b = ProfileBuilder::new();
        b.add(&ProcessStart { pid: 1, ..Default::default() }.into());
        b.add(
            &CallTreeNodes {
                os_tid: 7,
                first: 0,
                parents: vec![u32::MAX],
                functions: vec![10],
                tree: 1,
                sites: vec![],
            }
            .into(),
        );
        b.add(&CallTreeCosts { os_tid: 7, ts: 5, tree: 1, count: 2, packed: vec![0, 1, 2] }.into());
        let p = b.finish();
        assert_eq!(p.costs.threads.iter().flat_map(|t| t.costs.values()).map(|c| c.calls).sum::<u64>(), 0);
    }

    /// A builder that forgot what came before `t` gives the same profile of a range from `t` on as
    /// one that kept everything: GCs numbered on, a suspension that began before `t` still assigned
    /// to its GC, a contention open across `t` forgotten with its start, one started after `t` kept.
    #[test]
    fn forgetting_before_a_time_leaves_later_windows_as_they_were() {
        const T: u64 = 1_000;
        let gc = |ts: u64, generation: u8| -> Record {
            GcStarted { ts, os_tid: 1, generation, ..Default::default() }.into()
        };
        let end = |ts: u64| -> Record { GcFinished { ts, os_tid: 1, ..Default::default() }.into() };
        let early: Vec<Record> = vec![
            ProcessStart { pid: 1, ..Default::default() }.into(),
            FunctionCompiled {
                ts: 1,
                id: 10,
                name: "A.M".into(),
                code_start: 0x100,
                code_size: 16,
                ..Default::default()
            }
            .into(),
            SampleStack { id: 1, ips: vec![0x104], functions: vec![10], activity: 0 }.into(),
            CpuSample { ts: 100, os_tid: 7, stack: 1, count: 2, cpu_ns: 20, activity: 0 }.into(),
            gc(200, 0),
            RuntimeSuspended { ts: 200, os_tid: 1, reason: 1 }.into(),
            RuntimeResumed { ts: 250, os_tid: 1 }.into(),
            end(260),
            GcInfo { ts: 200, index: 41, generation: 0, reason: 0, kind: 0 }.into(),
            ContentionStarted { ts: 300, os_tid: 8, stack: vec![10] }.into(),
            AllocationCounts { ts: 400, class: 5, type_name: "T".into(), count: 3, bytes: 96 }.into(),
            // Under way at T: a GC and its suspension.
            gc(900, 1),
            RuntimeSuspended { ts: 950, os_tid: 1, reason: 1 }.into(),
        ];
        let late: Vec<Record> = vec![
            RuntimeResumed { ts: 1_100, os_tid: 1 }.into(),
            end(1_200),
            ContentionEnded { ts: 1_300, os_tid: 8, duration_ns: 1_000 }.into(),
            ContentionStarted { ts: 1_400, os_tid: 9, stack: vec![10] }.into(),
            ContentionEnded { ts: 1_500, os_tid: 9, duration_ns: 100 }.into(),
            CpuSample { ts: 1_600, os_tid: 7, stack: 1, count: 1, cpu_ns: 10, activity: 0 }.into(),
            gc(1_700, 0),
            end(1_750),
            AllocationCounts { ts: 1_800, class: 5, type_name: "T".into(), count: 1, bytes: 32 }.into(),
        ];
        let (mut whole, mut forgetful) = (ProfileBuilder::new(), ProfileBuilder::new());
        for r in &early {
            whole.add(r);
            forgetful.add(r);
        }
        forgetful.forget_before(T);
        for r in &late {
            whole.add(r);
            forgetful.add(r);
        }
        assert!(forgetful.retained() < whole.retained());
        let range = TimeRange::new(T, u64::MAX);
        let (a, b) = (whole.profile(range, &mut NoSymbols), forgetful.profile(range, &mut NoSymbols));
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        // The GC under way at T started before the range: in its time, not in its list.
        assert_eq!(b.events.gcs.iter().map(|g| (g.index, g.pause_ns)).collect::<Vec<_>>(), vec![(3, 0)]);
        assert_eq!(b.events.time_in_gc_ns, 200 + 50);
        assert_eq!(b.events.times.pauses, vec![(T, 1_100)]);
        assert_eq!(b.events.contentions.iter().map(|c| (c.count, c.wait_ns)).collect::<Vec<_>>(), vec![(1, 100)]);
        assert_eq!(b.sampling.cpu_samples, 1);
    }

    /// Call-tree deltas summed as they are read (`fold_call_trees`, what `report` does) give the
    /// profile that keeping them gives, for the same window: several trees on one thread and a
    /// reused tid, a capped node, call sites, deltas before and after the window, a delta of no calls,
    /// deltas naming nodes never published or whose nodes came after a gap, a node whose parent
    /// is missing, clamped costs and a damaged packing all counted as when the deltas are kept.
    #[test]
    fn folded_call_trees_give_the_kept_deltas_profile() {
        let nodes = |os_tid, tree, first, parents: &[u32], functions: &[u64]| -> Record {
            let sites = functions.iter().map(|f| f * 16 + first as u64).collect();
            CallTreeNodes { os_tid, first, parents: parents.to_vec(), functions: functions.to_vec(), tree, sites }
                .into()
        };
        let delta = |os_tid, tree, ts, nodes: &[u32], calls: &[u64]| {
            let n = nodes.len();
            let time_ns = calls.iter().map(|c| c.saturating_mul(100)).collect();
            CallTreeDelta {
                os_tid,
                ts,
                nodes: nodes.to_vec(),
                calls: calls.to_vec(),
                time_ns,
                suspended_ns: vec![1; n],
                profiler_ns: vec![2; n],
                tree,
            }
        };
        let records: Vec<Record> = vec![
            ProcessStart { pid: 1, ..Default::default() }.into(),
            nodes(7, 1, 0, &[u32::MAX, 0, 0, 1], &[10, 11, 11, CALL_TREE_CAPPED]),
            CallTreeCosts::pack(&delta(7, 1, 100, &[0, 1, 2, 3], &[1, 2, 3, 4])).unwrap().into(),
            delta(7, 1, 1_000, &[1, 2, 9], &[5, 6, 7]).into(),
            // Nodes under nodes that deltas named already (a folding reader keeps those nodes'
            // entries in place of their stacks).
            nodes(7, 1, 4, &[1, 4], &[12, 13]),
            delta(7, 1, 1_500, &[4, 5, 1], &[1, 2, 3]).into(),
            // A second tree on the same thread, then the thread's tid reused by a new one.
            nodes(7, 2, 0, &[u32::MAX, 0], &[20, 11]),
            CallTreeCosts::pack(&delta(7, 2, 2_000, &[0, 1], &[0, 0])).unwrap().into(),
            delta(7, 1, 2_500, &[3], &[8]).into(),
            nodes(8, 3, 0, &[u32::MAX, 0], &[10, 11]),
            delta(8, 3, 3_000, &[0, 1], &[u64::MAX, 9]).into(),
            // A gap (records lost), a node whose parent was never published, a tree never seen.
            nodes(8, 3, 5, &[0], &[12]),
            nodes(8, 4, 0, &[u32::MAX, 7], &[10, 12]),
            delta(8, 9, 3_500, &[0], &[1]).into(),
            delta(8, 4, 3_600, &[0, 1], &[1, 1]).into(),
            CallTreeCosts { os_tid: 7, ts: 3_700, tree: 1, count: 2, packed: vec![0, 1, 2] }.into(),
            // Packed costs beyond the run so far (clamped), and a node not published yet.
            CallTreeCosts::pack(&delta(7, 1, 4_000, &[2, 3, 40], &[u64::MAX, 1, 1])).unwrap().into(),
            delta(7, 1, 5_000, &[0], &[11]).into(),
        ];
        for range in [TimeRange::ALL, TimeRange::new(500, 4_000), TimeRange::new(6_000, 7_000)] {
            let mut kept = ProfileBuilder::new();
            let mut folded = ProfileBuilder::new();
            folded.fold_call_trees(range, false, false);
            for r in &records {
                kept.add(r);
                folded.add(r);
            }
            let want = kept.profile(range, &mut NoSymbols);
            assert_eq!(thread_costs(&folded.profile(range, &mut NoSymbols)), thread_costs(&want), "{range:?}, copied");
            let got = folded.into_profile(range, &mut NoSymbols);
            assert_eq!(thread_costs(&got), thread_costs(&want), "{range:?}");
            assert_eq!(got.messages, want.messages, "{range:?}");
            assert_eq!(got.costs.stacks.nodes.len(), want.costs.stacks.nodes.len());
            if range.is_all() {
                assert_eq!(thread_costs(&got).len(), 9, "{:?}", thread_costs(&got));
                assert!(
                    want.messages.iter().any(|m| m.starts_with("7 call-tree records could not be placed")),
                    "{:?}",
                    want.messages
                );
                assert!(
                    want.messages.iter().any(|m| m.starts_with("damaged trace: 2 impossible values: call-tree costs")),
                    "{:?}",
                    want.messages
                );
            }
        }
    }
}
