//! The profile: the General Code Profiler's tables (their rows are in `process.rs`), the canonical
//! cost aggregate, the samples and the runtime events, as built by [`crate::ProfileBuilder`].

use std::collections::HashMap;

use crate::events::{EventsBuilder, ProfileTables};
use crate::process::{AppDomain, Assembly, Class, Function, Module, Process, Thread};

/// Everything a trace says, in deterministic order.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    pub process: Process,
    pub threads: Vec<Thread>,
    pub appdomains: Vec<AppDomain>,
    pub assemblies: Vec<Assembly>,
    pub modules: Vec<Module>,
    pub classes: Vec<Class>,
    pub functions: Vec<Function>,
    /// Agent diagnostics and reader warnings, in order.
    pub messages: Vec<String>,
    /// The canonical aggregate of stacks and their costs (instrumentation, samples, allocations).
    pub costs: crate::stacks::CostTree,
    /// The sampler's settings and totals (sampled costs are in `costs`).
    pub sampling: crate::samples::Sampling,
    /// Set when the trace has enter/leave instrumentation.
    pub instrumentation: Option<crate::instrumented::Instrumentation>,
    /// Ordered enter/leave events per thread (`record --flow`), sorted by OS tid.
    pub flow: Vec<crate::instrumented::FlowThread>,
    /// Runtime events: exceptions, GCs, allocations, event log, counters.
    pub events: crate::events::RuntimeEvents,
    /// Requests, waits on wait handles and the thread pool's workers (`record --async`).
    pub requests: crate::requests::Requests,
    /// The window of the run this profile covers (`TimeRange::ALL`: the whole run).
    pub range: crate::time::TimeRange,
    /// Every CPU and wall sample in the window with its time and stack, sorted by time (the
    /// timeline; their costs are in `costs`).
    pub samples: Vec<crate::samples::TimedSample>,
    /// The EventSource activity ids samples carry (`TimedSample::flow` indexes it; index 0 is
    /// none): CPU samples of `record --async` once the agent found where the runtime keeps them.
    pub sample_activities: Vec<u128>,
    /// The task library's events indexed (traces recorded with `--async`): see
    /// [`crate::asynchrony`].
    pub asynchrony: Option<std::sync::Arc<crate::asynchrony::AsyncIndex>>,
    /// Collection triggers that fired (`record --trigger`), in order.
    pub triggers: Vec<crate::triggers::TriggerFire>,
    index: Index,
}

/// Positions in the tables by id, for lookups in constant time.
#[derive(Clone, Debug, Default)]
struct Index {
    modules: HashMap<u64, usize>,
    appdomains: HashMap<u64, usize>,
    assemblies: HashMap<u64, usize>,
    threads_by_os_tid: HashMap<u32, usize>,
}

/// Looks `id` up through `index`, or by a scan when the index was not built (a profile put
/// together by hand).
fn lookup<'a, K: std::hash::Hash + Eq, T>(
    index: &HashMap<K, usize>,
    table: &'a [T],
    id: K,
    matches: impl Fn(&T) -> bool,
) -> Option<&'a T> {
    if index.is_empty() {
        table.iter().find(|t| matches(t))
    } else {
        index.get(&id).map(|&i| &table[i])
    }
}

impl Profile {
    /// Builds the lookup index of the tables (after they are filled and sorted).
    pub(crate) fn index(&mut self) {
        let by_id = |ids: &mut dyn Iterator<Item = u64>| ids.enumerate().map(|(i, id)| (id, i)).collect();
        self.index = Index {
            modules: by_id(&mut self.modules.iter().map(|m| m.id)),
            appdomains: by_id(&mut self.appdomains.iter().map(|a| a.id)),
            assemblies: by_id(&mut self.assemblies.iter().map(|a| a.id)),
            threads_by_os_tid: HashMap::new(),
        };
        // The first thread with an OS tid wins, as a scan in table order would find it.
        for (i, t) in self.threads.iter().enumerate() {
            if let Some(tid) = t.os_tid {
                self.index.threads_by_os_tid.entry(tid).or_insert(i);
            }
        }
    }

    pub fn module(&self, id: u64) -> Option<&Module> {
        lookup(&self.index.modules, &self.modules, id, |m| m.id == id)
    }

    pub fn appdomain(&self, id: u64) -> Option<&AppDomain> {
        lookup(&self.index.appdomains, &self.appdomains, id, |a| a.id == id)
    }

    pub fn assembly(&self, id: u64) -> Option<&Assembly> {
        lookup(&self.index.assemblies, &self.assemblies, id, |a| a.id == id)
    }

    /// Start and end (ns since the agent started) of what the profile covers: its time range
    /// within the run.
    pub fn span(&self) -> (u64, u64) {
        let end = self.process.duration_ns.min(self.range.to);
        (self.range.from.min(end), end)
    }

    /// Computes the runtime-event tables of the profile (`events`, replaced) from the facts of `b`
    /// inside `range` ([`EventsBuilder::finish`]); the allocation, exception and contention
    /// stacks go to `costs`.
    pub fn set_events(&mut self, b: &EventsBuilder, range: crate::time::TimeRange) {
        let span = self.span();
        self.events = b.finish(
            ProfileTables {
                functions: &self.functions,
                threads: &self.threads,
                assemblies: &self.assemblies,
                duration_ns: self.process.duration_ns,
                span,
                costs: &mut self.costs,
            },
            range,
        );
    }

    /// Computes the profile's requests, waits and pool changes (`requests`, replaced) inside
    /// `range`; the waiting stacks go to `costs`.
    pub fn set_requests(&mut self, f: &crate::requests::RequestFacts, range: crate::time::TimeRange) {
        let names: HashMap<u64, &str> = self.functions.iter().map(|f| (f.id, f.name.as_str())).collect();
        let name = |id: u64| names.get(&id).map(|n| n.to_string()).unwrap_or_else(|| format!("<function 0x{id:x}>"));
        self.requests = f.finish(&mut self.costs, &name, range);
    }

    pub fn thread_by_os_tid(&self, tid: u32) -> Option<&Thread> {
        if self.index.threads_by_os_tid.is_empty() {
            return self.threads.iter().find(|t| t.os_tid == Some(tid));
        }
        self.index.threads_by_os_tid.get(&tid).map(|&i| &self.threads[i])
    }
}

/// Gives managed frames the names, modules and signatures of their functions.
pub(crate) fn name_frames(p: &mut Profile) {
    use crate::stacks::FrameKey;
    let by_id: HashMap<u64, usize> = p.functions.iter().enumerate().map(|(i, f)| (f.id, i)).collect();
    let modules: HashMap<u64, String> = p.modules.iter().map(|m| (m.id, m.file_name().to_string())).collect();
    for fr in &mut p.costs.stacks.frames {
        if let FrameKey::Function(id) = fr.key {
            if let Some(&i) = by_id.get(&id) {
                let f = &p.functions[i];
                fr.name = f.name.clone();
                fr.signature = f.signature.clone();
                fr.module = modules.get(&f.module).cloned().unwrap_or_default();
            }
        }
    }
}
