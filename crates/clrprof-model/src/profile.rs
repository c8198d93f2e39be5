//! The profile: the General Code Profiler's tables (process, threads, app domains, assemblies,
//! modules, classes, functions), the canonical cost aggregate and the runtime events, as built by
//! [`crate::ProfileBuilder`].

use std::collections::HashMap;

use clrprof_trace::code_kind;

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Process {
    pub pid: u32,
    pub command_line: String,
    pub runtime_version: String,
    pub runtime_major: u16,
    pub info_version: u32,
    pub agent_version: String,
    pub config: String,
    pub event_mask_low: u32,
    pub event_mask_high: u32,
    /// Wall-clock start, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// Exit code from `clrprof record`, when it saw the exit.
    pub exit_code: Option<i32>,
    /// Terminating signal, when the process was killed.
    pub signal: Option<i32>,
    /// From the agent's start to the exit (or to the last record when the exit was not seen).
    pub duration_ns: u64,
    /// True when the agent's `Shutdown` ran (no crash, no kill).
    pub clean_shutdown: bool,
    pub records_dropped: u64,
    /// The machine's host name, when the agent recorded it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// `CLRPROF_SERVICE`, when set.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service: String,
    /// `CLRPROF_LABELS`, in order: the user's own labels.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<(String, String)>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Thread {
    /// The runtime's ThreadID.
    pub id: u64,
    pub os_tid: Option<u32>,
    /// Last name given (empty when never named).
    pub name: String,
    /// Every name the thread had, with the time it was given.
    pub names: Vec<(u64, String)>,
    pub created_ns: Option<u64>,
    pub destroyed_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct AppDomain {
    pub id: u64,
    pub name: String,
    pub created_ns: u64,
    pub unloaded_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Assembly {
    pub id: u64,
    pub name: String,
    pub appdomain: u64,
    pub module: u64,
    pub loaded_ns: u64,
    pub load_ns: u64,
    pub unloaded_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Module {
    pub id: u64,
    pub path: String,
    pub assembly: u64,
    pub base_address: u64,
    pub loaded_ns: u64,
    pub load_ns: u64,
    pub unloaded_ns: Option<u64>,
}

impl Module {
    /// File name of the module (`System.Private.CoreLib.dll`).
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Class {
    pub id: u64,
    pub name: String,
    pub token: u32,
    pub module: u64,
    pub loaded_ns: u64,
    pub unloaded_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Function {
    pub id: u64,
    pub name: String,
    pub class_name: String,
    pub signature: String,
    pub token: u32,
    pub class: u64,
    pub module: u64,
    /// Latest code version's start and size.
    pub code_start: u64,
    pub code_size: u64,
    /// Sum of JIT time over all compilations of this function.
    pub jit_ns: u64,
    /// How the first code version came to be (see `clrprof_trace::code_kind`).
    pub kind: u8,
    /// Number of code versions (tiered compilation recompiles hot methods).
    pub compilations: u32,
    pub first_compiled_ns: u64,
    /// Every code version's (start, size).
    pub code: Vec<(u64, u64)>,
    pub unloaded_ns: Option<u64>,
}

impl Function {
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            code_kind::JIT => "jit",
            code_kind::PRECOMPILED => "precompiled",
            code_kind::DYNAMIC => "dynamic",
            code_kind::EXISTING => "existing",
            _ => "other",
        }
    }
}

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
    /// The window of the run this profile covers (`TimeRange::ALL`: the whole run).
    pub range: crate::time::TimeRange,
    /// Every CPU and wall sample in the window with its time and stack, sorted by time (the
    /// timeline; their costs are in `costs`).
    pub samples: Vec<crate::samples::TimedSample>,
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
