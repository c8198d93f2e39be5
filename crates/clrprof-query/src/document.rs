//! The report document (`clrprof report --format json`, schema in docs/report-json.md) as typed
//! data. Cost figures honour the thread selection; the sampler's own counters describe the
//! recording and do not; the figures themselves come from the engine ([`crate::engine`]).
//!
//! This module is the one owner of the report's JSON schema: its `*Doc` structs are the schema,
//! versioned by [`SCHEMA_VERSION`] and documented field by field, so that the model's and the
//! engine's types stay free to change (a field renamed there must not rename a field that readers
//! of schema 3 rely on). The viewer's API answers are the page types of [`crate::explore`], which
//! are that API's schema (docs/viewer-api.md).

use std::collections::HashMap;

use clrprof_model::hits::ModuleHits;
use clrprof_model::instrumented::FlowThread;
use clrprof_model::{Cost, FrameKey, Metric, Profile};
use serde::Serialize;

use crate::costs::{function_rows, module_hits, FunctionRow};
use crate::engine::{self, TotalsScratch};
use crate::select::{self, Threads};
use crate::timeline::{timeline, Timeline};
use crate::weighted_stacks::stack_names;
use crate::SaturatingSum;

/// Version of the JSON report schema; additions keep it, incompatible changes bump it.
/// 2: `calltree` is a flat list of nodes with parent ids (was nested), so deep stacks keep the
/// document linear in size and shallow for standard JSON readers.
/// 3: `thread_hotspots` only with `--per-thread`, and `timeline.threads` only the busy threads
/// (the rest summed in `timeline.other_threads`), so the document no longer grows with threads ×
/// functions or threads × buckets; a reader that summed `timeline.threads` must add the new row.
pub const SCHEMA_VERSION: u32 = 3;

#[derive(Serialize)]
pub struct ReportDocument {
    pub schema_version: u32,
    pub process: ProcessDoc,
    /// The window of the run the figures cover (absent for the whole run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<RangeDoc>,
    pub threads: Vec<ThreadDoc>,
    pub appdomains: Vec<AppDomainDoc>,
    pub assemblies: Vec<AssemblyDoc>,
    pub modules: Vec<ModuleDoc>,
    pub classes: Vec<ClassDoc>,
    pub functions: Vec<FunctionDoc>,
    pub messages: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instrumentation: Option<InstrumentationDoc>,
    /// The exact call tree: only nodes the enter/leave hooks measured (a sampled stack's nodes
    /// with no exact cost are left out), every one of them unless `--min-percent` was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calltree: Option<Vec<CallTreeDoc>>,
    /// The nodes an explicit `--min-percent` left out of `calltree` (absent without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calltree_hidden: Option<CallTreeHiddenDoc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_hotspots: Option<Vec<ThreadHotspotsDoc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<Vec<FlowDoc>>,
    pub sampling: SamplingDoc,
    pub timeline: Timeline,
    pub exceptions: Vec<ExceptionDoc>,
    pub exception_sampling: ExceptionSamplingDoc,
    pub gc_totals: crate::events::GcTotals,
    pub gcs: Vec<GcDoc>,
    pub allocations: Vec<AllocationDoc>,
    pub allocation_sites: Vec<AllocationSiteDoc>,
    /// How the allocation figures were obtained: "exact", "allocation-sampled", "allocation-tick"
    /// or "none".
    pub allocation_estimator: clrprof_model::events::AllocEstimator,
    /// Allocation samples the agent thinned to its rate (`CLRPROF_ALLOC_RATE`; the kept ones
    /// weigh for them); absent when none were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation_samples_thinned: Option<u64>,
    pub jit: JitDoc,
    pub contentions: Vec<ContentionDoc>,
    pub counters: CountersDoc,
    /// `null` unless the trace was recorded with `--events`.
    pub events: Option<Vec<LogDoc>>,
    /// Requests, waits and the thread pool (`record --async`; keys absent otherwise):
    /// `crate::requests::RequestsSection`.
    #[serde(flatten)]
    pub asynchrony: Option<crate::requests::RequestsSection>,
    /// Collection triggers that fired (`record --trigger`; absent when none did).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<clrprof_model::triggers::TriggerFire>,
}

#[derive(Serialize)]
pub struct ProcessDoc {
    pub pid: u32,
    pub command_line: String,
    pub runtime_version: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub start_time: String,
    pub start_unix_ns: u64,
    pub duration_ns: u64,
    pub clean_shutdown: bool,
    pub agent_version: String,
    pub profiler_info_version: u32,
}

#[derive(Serialize)]
pub struct RangeDoc {
    pub from_ns: u64,
    pub to_ns: u64,
}

#[derive(Serialize)]
pub struct NameDoc {
    pub ts_ns: u64,
    pub name: String,
}

#[derive(Serialize)]
pub struct ThreadDoc {
    pub id: u64,
    pub os_tid: Option<u32>,
    pub name: String,
    pub names: Vec<NameDoc>,
    pub created_ns: Option<u64>,
    pub destroyed_ns: Option<u64>,
}

#[derive(Serialize)]
pub struct AppDomainDoc {
    pub id: u64,
    pub name: String,
    pub created_ns: u64,
    pub unloaded_ns: Option<u64>,
}

#[derive(Serialize)]
pub struct AssemblyDoc {
    pub id: u64,
    pub name: String,
    pub appdomain: Option<String>,
    pub appdomain_id: u64,
    pub module: Option<String>,
    pub module_id: u64,
    pub loaded_ns: u64,
    pub load_ns: u64,
    pub unloaded_ns: Option<u64>,
}

#[derive(Serialize)]
pub struct ModuleDoc {
    pub id: u64,
    pub path: String,
    pub name: String,
    pub base_address: u64,
    pub assembly: Option<String>,
    pub assembly_id: u64,
    pub loaded_ns: u64,
    pub load_ns: u64,
    pub unloaded_ns: Option<u64>,
    /// CPU samples whose leaf frame was in this module (of the thread selection).
    pub samples: u64,
}

#[derive(Serialize)]
pub struct ClassDoc {
    pub id: u64,
    pub name: String,
    pub token: u32,
    pub module: Option<String>,
    pub module_id: u64,
    pub loaded_ns: u64,
    pub unloaded_ns: Option<u64>,
}

/// Exact costs of one function (instrumented traces).
#[derive(Serialize)]
pub struct InstrumentedCostDoc {
    pub calls: u64,
    pub exclusive_ns: u64,
    pub inclusive_ns: u64,
    pub callee_ns: u64,
    pub suspended_ns: u64,
    pub profiler_ns: u64,
}

impl InstrumentedCostDoc {
    fn of(self_cost: &Cost, inclusive: &Cost) -> InstrumentedCostDoc {
        InstrumentedCostDoc {
            calls: self_cost.calls,
            exclusive_ns: self_cost.time_ns,
            inclusive_ns: inclusive.time_ns,
            callee_ns: inclusive.time_ns.saturating_sub(self_cost.time_ns),
            suspended_ns: inclusive.suspended_ns,
            profiler_ns: inclusive.profiler_ns,
        }
    }
}

#[derive(Serialize)]
pub struct FunctionDoc {
    pub id: u64,
    pub name: String,
    pub signature: String,
    pub token: u32,
    pub class: String,
    pub class_id: u64,
    pub module: Option<String>,
    pub module_id: u64,
    pub code_start: u64,
    pub code_size: u64,
    pub jit_ns: u64,
    pub kind: &'static str,
    pub compilations: u32,
    /// When its code was freed (a collected DynamicMethod, an unloaded assembly context); absent
    /// while it lives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unloaded_ns: Option<u64>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub instrumented: Option<InstrumentedCostDoc>,
    /// Instrumented traces: whether the function got enter/leave hooks. `false`: its `calls` are
    /// not counted (filtered out, or a method the runtime never hooks, such as a DynamicMethod).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hooked: Option<bool>,
    pub samples_self: u64,
    pub samples_total: u64,
    pub cpu_self_ns: u64,
    pub cpu_total_ns: u64,
    pub wall_samples_self: u64,
    pub wall_samples_total: u64,
    pub wall_self_ns: u64,
    pub wall_total_ns: u64,
}

#[derive(Serialize)]
pub struct InstrumentationDoc {
    pub inlining_disabled: bool,
    pub tiering_disabled: bool,
    pub ready_to_run_ignored: bool,
    pub profiler_time_subtracted: bool,
    pub counts_only: bool,
    pub flow: bool,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub hook_cost_ns: f64,
    pub hooked_functions: u64,
    pub filtered_functions: u64,
    /// `record --count`: the counts come from IL probes (absent for enter/leave hooks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub il_probes: Option<IlProbesDoc>,
}

/// How `record --count` counted: per method definition, inlining on, and what it could not count.
#[derive(Serialize)]
pub struct IlProbesDoc {
    /// `app` or `all` (without patterns).
    pub scope: String,
    /// Methods in scope without a count (never reported as 0 calls), by name, with the reason.
    pub uncounted: Vec<UncountedDoc>,
}

#[derive(Serialize)]
pub struct UncountedDoc {
    pub name: String,
    pub reason: &'static str,
}

/// A node of the call tree; nodes are listed depth first, children by inclusive time, and `id` is
/// the node's index in the list.
#[derive(Serialize)]
pub struct CallTreeDoc {
    pub id: usize,
    /// The caller's node, `null` for a root.
    pub parent: Option<usize>,
    pub depth: usize,
    /// Shared by the nodes of one function (a large tree has millions of nodes, and a name per
    /// node took more memory than the trace).
    pub name: std::sync::Arc<str>,
    pub calls: u64,
    pub inclusive_ns: u64,
    pub exclusive_ns: u64,
    pub suspended_ns: u64,
    pub profiler_ns: u64,
}

/// The call tree's nodes below a cut: `rows` nodes, whose topmost hold `inclusive_ns` (still in
/// their callers' `inclusive_ns`).
#[derive(Serialize)]
pub struct CallTreeHiddenDoc {
    pub min_percent: f64,
    pub rows: usize,
    pub inclusive_ns: u64,
}

#[derive(Serialize)]
pub struct ThreadFunctionDoc {
    pub name: String,
    #[serde(flatten)]
    pub cost: InstrumentedCostDoc,
}

#[derive(Serialize)]
pub struct ThreadHotspotsDoc {
    pub os_tid: u32,
    pub name: String,
    pub functions: Vec<ThreadFunctionDoc>,
}

#[derive(Serialize)]
pub struct FlowEventDoc {
    pub kind: &'static str,
    pub function: String,
    pub ts_ns: u64,
}

#[derive(Serialize)]
pub struct FlowDoc {
    pub os_tid: u32,
    pub dropped: u64,
    pub events: Vec<FlowEventDoc>,
}

#[derive(Serialize)]
pub struct SamplingThreadDoc {
    pub os_tid: u32,
    pub name: String,
    pub cpu_samples: u64,
    pub cpu_ns: u64,
    pub wall_samples: u64,
    pub wall_ns: u64,
}

#[derive(Serialize)]
pub struct SamplingModuleDoc {
    pub name: String,
    pub samples: u64,
    pub cpu_ns: u64,
    pub wall_samples: u64,
    pub wall_ns: u64,
}

#[derive(Serialize)]
pub struct RoutineDoc {
    pub name: String,
    pub module: String,
    pub address: Option<u64>,
    pub samples: u64,
    pub cpu_ns: u64,
}

#[derive(Serialize)]
pub struct SamplingDoc {
    pub enabled: bool,
    pub rate_hz: u32,
    pub wall_rate_hz: u32,
    pub effective_cpu_rate_hz: f64,
    pub total_samples: u64,
    pub cpu_ns: u64,
    pub wall_samples: u64,
    pub wall_ns: u64,
    pub cpu_samples_dropped: u64,
    pub stack_walks: u64,
    pub suspend_failures: u64,
    pub walk_failures: u64,
    pub timer_failures: u64,
    pub suspended_ns: u64,
    pub sampler_cpu_ns: u64,
    pub threads: Vec<SamplingThreadDoc>,
    pub modules: Vec<SamplingModuleDoc>,
    pub routines: Vec<RoutineDoc>,
}

#[derive(Serialize)]
pub struct CatchSiteDoc {
    pub function: String,
    pub count: u64,
}

#[derive(Serialize)]
pub struct PassesDoc {
    pub search_frames: u64,
    pub filters: u64,
    pub unwind_frames: u64,
    pub finallies: u64,
    pub catches: u64,
}

#[derive(Serialize)]
pub struct StackCountDoc {
    pub count: u64,
    pub stack: Vec<String>,
}

#[derive(Serialize)]
pub struct ExceptionDoc {
    #[serde(rename = "type")]
    pub type_name: String,
    pub throw_site: String,
    /// Every throw, rethrows included.
    pub thrown: u64,
    /// Of `thrown`, the rethrows (the same exception object thrown again).
    pub rethrown: u64,
    pub observed: u64,
    pub estimated: bool,
    pub caught: u64,
    pub uncaught: u64,
    pub uncaught_threads: Vec<u32>,
    pub catch_sites: Vec<CatchSiteDoc>,
    pub passes: PassesDoc,
    pub sites: Vec<StackCountDoc>,
}

#[derive(Serialize)]
pub struct ExceptionSamplingDoc {
    pub sampled: bool,
    pub observed: u64,
    pub estimated_total: u64,
    /// New exceptions (rethrows aside) by the runtime's own count (null when the trace has none).
    pub runtime_total: Option<u64>,
    /// Of `estimated_total` (the sum of the groups' `thrown`), the rethrows.
    pub rethrown: u64,
    pub first_pause_ns: u64,
    pub paused_ns: u64,
    pub window_ns: u64,
    pub unfollowed: u64,
}

#[derive(Serialize)]
pub struct GcDoc {
    pub index: u64,
    pub generation: u8,
    pub reason: String,
    pub induced: bool,
    pub background: Option<bool>,
    pub start_ns: u64,
    pub duration_ns: u64,
    pub pause_ns: u64,
    pub finished: bool,
    pub heap_before: Vec<u64>,
    pub heap_after: Vec<u64>,
    pub os_tid: u32,
}

#[derive(Serialize)]
pub struct AllocationDoc {
    #[serde(rename = "type")]
    pub type_name: String,
    pub count: u64,
    pub bytes: u64,
    pub exact: bool,
    pub samples: u64,
}

#[derive(Serialize)]
pub struct AllocationSiteDoc {
    #[serde(rename = "type")]
    pub type_name: String,
    /// The first frame of the user's code on the allocating stack.
    pub function: String,
    /// The library function it called to allocate (empty when it allocated itself).
    pub via: String,
    /// The site's heaviest allocating stack, innermost first.
    pub stack: Vec<String>,
    pub count: u64,
    pub bytes: u64,
    pub samples: u64,
    pub exact: bool,
}

#[derive(Serialize)]
pub struct IlSizeDoc {
    pub function: String,
    pub id: u64,
    pub il_size: u32,
}

#[derive(Serialize)]
pub struct JitDoc {
    pub methods: usize,
    pub code_versions: u64,
    pub jit_ns: u64,
    pub native_bytes: u64,
    pub il_bytes: u64,
    pub il_sizes: Vec<IlSizeDoc>,
    pub precompiled_methods: usize,
    pub assembly_load_ns: u64,
    pub module_load_ns: u64,
}

#[derive(Serialize)]
pub struct ContentionDoc {
    pub site: String,
    pub count: u64,
    pub wait_ns: u64,
    pub max_wait_ns: u64,
    pub stacks: Vec<StackCountDoc>,
}

#[derive(Serialize)]
pub struct CounterRowDoc {
    pub start_ns: u64,
    pub end_ns: u64,
    pub gc_count: [u64; 3],
    pub heap_bytes: Vec<u64>,
    pub time_in_gc_pct: f64,
    pub alloc_bytes_per_sec: f64,
    pub exceptions_per_sec: f64,
    pub methods_jitted: u64,
    pub assemblies_loaded: u64,
    pub threads: u64,
    pub lock_contentions: u64,
}

#[derive(Serialize)]
pub struct CountersDoc {
    pub interval_ns: u64,
    pub alloc_exact: bool,
    pub rows: Vec<CounterRowDoc>,
}

#[derive(Serialize)]
pub struct LogDoc {
    pub ts_ns: u64,
    pub os_tid: u32,
    pub event: String,
    pub nest: i8,
    pub depth: u32,
}

const FLOW_KINDS: [&str; 4] = ["enter", "leave", "tailcall", "unwind"];

/// A flow event's `kind` in the document.
pub fn flow_kind(kind: u8) -> &'static str {
    FLOW_KINDS.get(kind as usize).copied().unwrap_or("other")
}

/// UTC ISO-8601 with milliseconds.
pub fn iso8601(unix_ns: u64) -> String {
    // Civil-from-days (Howard Hinnant), UTC.
    let secs = (unix_ns / 1_000_000_000) as i64;
    let ms = (unix_ns / 1_000_000) % 1000;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", rem / 3600, (rem / 60) % 60, rem % 60)
}

/// What the document holds beyond its fixed sections.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DocumentOptions {
    /// Per-thread detail: every thread's own hot spots (`thread_hotspots`) and timeline row. Off,
    /// `thread_hotspots` is absent and the timeline's quiet threads are folded into one row
    /// ([`crate::timeline::Timeline::fold_quiet`]): the document's size then no longer grows with
    /// threads × functions or threads × buckets.
    pub per_thread: bool,
    /// `calltree`: leave out nodes below this share of the total inclusive time (an explicit
    /// `--min-percent`); `None` keeps every node: the document is for programs.
    pub calltree_min_percent: Option<f64>,
    /// `flow` is left empty (its key still there when the trace has flow events): for a writer
    /// that lays the events out from the profile itself ([`flow_kind`]), one at a time.
    pub flow_left_out: bool,
}

/// The report document for a thread selection, with a timeline in buckets of `bucket_ns`
/// (`None`: chosen from the profile's span), without per-thread detail.
pub fn document(p: &Profile, threads: &Threads, bucket_ns: Option<u64>) -> ReportDocument {
    document_with(p, threads, bucket_ns, DocumentOptions::default())
}

/// [`document`] with options.
pub fn document_with(p: &Profile, threads: &Threads, bucket_ns: Option<u64>, opts: DocumentOptions) -> ReportDocument {
    let rows = function_rows(p, threads);
    let by_function: HashMap<u64, &FunctionRow> = rows
        .iter()
        .filter_map(|r| match p.costs.stacks.frames[r.frame.0 as usize].key {
            FrameKey::Function(id) => Some((id, r)),
            _ => None,
        })
        .collect();
    // Exact calls and times: clrprof's enter/leave hooks, or an imported instrumentation report
    // (vsperfreport's call counts and elapsed times), which has no `instrumentation` settings.
    let instrumented = p.instrumentation.is_some() || {
        let t = select::totals(p);
        t.calls > 0 || t.time_ns > 0
    };
    let pr = &p.process;
    let module_file = |id: u64| p.module(id).map(|m| m.file_name().to_string());
    let cpu_hits = module_hits(p, Metric::Cpu, threads).expect("cpu is a sampled weight");
    let wall_hits = module_hits(p, Metric::Wall, threads).expect("wall is a sampled weight");
    let cpu_by_module: HashMap<&str, &ModuleHits> = cpu_hits.modules.iter().map(|m| (m.module.as_str(), m)).collect();
    let wall_by_module: HashMap<&str, &ModuleHits> = wall_hits.modules.iter().map(|m| (m.module.as_str(), m)).collect();
    let (from, to) = p.span();
    let (calltree, calltree_hidden) = match instrumented {
        true => {
            let (tree, hidden) = calltree(p, threads, opts.calltree_min_percent);
            (Some(tree), hidden)
        }
        false => (None, None),
    };
    ReportDocument {
        schema_version: SCHEMA_VERSION,
        process: ProcessDoc {
            pid: pr.pid,
            command_line: pr.command_line.clone(),
            runtime_version: pr.runtime_version.clone(),
            exit_code: pr.exit_code,
            signal: pr.signal,
            start_time: iso8601(pr.start_unix_ns),
            start_unix_ns: pr.start_unix_ns,
            duration_ns: pr.duration_ns,
            clean_shutdown: pr.clean_shutdown,
            agent_version: pr.agent_version.clone(),
            profiler_info_version: pr.info_version,
        },
        range: (!p.range.is_all()).then_some(RangeDoc { from_ns: from, to_ns: to }),
        threads: p
            .threads
            .iter()
            .map(|t| ThreadDoc {
                id: t.id,
                os_tid: t.os_tid,
                name: t.name.clone(),
                names: t.names.iter().map(|(ts, n)| NameDoc { ts_ns: *ts, name: n.clone() }).collect(),
                created_ns: t.created_ns,
                destroyed_ns: t.destroyed_ns,
            })
            .collect(),
        appdomains: p
            .appdomains
            .iter()
            .map(|a| AppDomainDoc {
                id: a.id,
                name: a.name.clone(),
                created_ns: a.created_ns,
                unloaded_ns: a.unloaded_ns,
            })
            .collect(),
        assemblies: p
            .assemblies
            .iter()
            .map(|a| AssemblyDoc {
                id: a.id,
                name: a.name.clone(),
                appdomain: p.appdomain(a.appdomain).map(|d| d.name.clone()),
                appdomain_id: a.appdomain,
                module: p.module(a.module).map(|m| m.path.clone()),
                module_id: a.module,
                loaded_ns: a.loaded_ns,
                load_ns: a.load_ns,
                unloaded_ns: a.unloaded_ns,
            })
            .collect(),
        modules: p
            .modules
            .iter()
            .map(|m| ModuleDoc {
                id: m.id,
                path: m.path.clone(),
                name: m.file_name().to_string(),
                base_address: m.base_address,
                assembly: p.assembly(m.assembly).map(|a| a.name.clone()),
                assembly_id: m.assembly,
                loaded_ns: m.loaded_ns,
                load_ns: m.load_ns,
                unloaded_ns: m.unloaded_ns,
                samples: cpu_by_module.get(m.file_name()).map_or(0, |h| h.samples),
            })
            .collect(),
        classes: p
            .classes
            .iter()
            .map(|c| ClassDoc {
                id: c.id,
                name: c.name.clone(),
                token: c.token,
                module: module_file(c.module),
                module_id: c.module,
                loaded_ns: c.loaded_ns,
                unloaded_ns: c.unloaded_ns,
            })
            .collect(),
        functions: p
            .functions
            .iter()
            .map(|f| {
                let (sc, ic) = by_function.get(&f.id).map(|r| (r.self_cost, r.inclusive)).unwrap_or_default();
                FunctionDoc {
                    id: f.id,
                    name: f.name.clone(),
                    signature: f.signature.clone(),
                    token: f.token,
                    class: f.class_name.clone(),
                    class_id: f.class,
                    module: module_file(f.module),
                    module_id: f.module,
                    code_start: f.code_start,
                    code_size: f.code_size,
                    jit_ns: f.jit_ns,
                    kind: f.kind_name(),
                    compilations: f.compilations,
                    unloaded_ns: f.unloaded_ns,
                    instrumented: instrumented.then(|| InstrumentedCostDoc::of(&sc, &ic)),
                    hooked: p.instrumentation.as_ref().map(|i| i.hooked.contains(&f.id)),
                    samples_self: sc.cpu_samples,
                    samples_total: ic.cpu_samples,
                    cpu_self_ns: sc.cpu_ns,
                    cpu_total_ns: ic.cpu_ns,
                    wall_samples_self: sc.wall_samples,
                    wall_samples_total: ic.wall_samples,
                    wall_self_ns: sc.wall_ns,
                    wall_total_ns: ic.wall_ns,
                }
            })
            .collect(),
        messages: p.messages.clone(),
        instrumentation: p.instrumentation.as_ref().map(|i| InstrumentationDoc {
            inlining_disabled: i.inlining_disabled,
            tiering_disabled: i.tiering_disabled,
            ready_to_run_ignored: i.ready_to_run_ignored,
            profiler_time_subtracted: i.profiler_time_subtracted,
            counts_only: i.counts_only,
            flow: i.flow,
            include: i.include.clone(),
            exclude: i.exclude.clone(),
            hook_cost_ns: i.hook_cost_ns,
            hooked_functions: i.hooked_functions,
            filtered_functions: i.filtered_functions,
            il_probes: i.il_probes.then(|| {
                let names: std::collections::HashMap<u64, &str> =
                    p.functions.iter().map(|f| (f.id, f.name.as_str())).collect();
                let mut uncounted: Vec<UncountedDoc> = i
                    .uncounted
                    .iter()
                    .map(|u| UncountedDoc {
                        name: u.name_in(&names),
                        reason: clrprof_model::counts::uncounted_reason(u.reason),
                    })
                    .collect();
                uncounted.sort_by(|a, b| (&a.name, a.reason).cmp(&(&b.name, b.reason)));
                uncounted.dedup_by(|a, b| a.name == b.name && a.reason == b.reason);
                IlProbesDoc { scope: i.count_scope.clone(), uncounted }
            }),
        }),
        calltree,
        calltree_hidden,
        thread_hotspots: (instrumented && opts.per_thread).then(|| thread_hotspots(p, threads)),
        flow: (!p.flow.is_empty()).then(|| if opts.flow_left_out { Vec::new() } else { flow(p, threads) }),
        sampling: sampling(p, threads, &cpu_hits, &cpu_by_module, &wall_by_module),
        timeline: {
            let mut t = timeline(p, threads, bucket_ns);
            if !opts.per_thread {
                t.fold_quiet(crate::timeline::BUSY_SHARE);
            }
            t
        },
        exceptions: exceptions(p),
        exception_sampling: {
            let sm = &p.events.exception_sampling;
            ExceptionSamplingDoc {
                sampled: sm.sampled,
                observed: sm.observed,
                estimated_total: sm.estimated_total,
                runtime_total: sm.runtime_total,
                rethrown: sm.rethrown,
                first_pause_ns: sm.first_pause_ns,
                paused_ns: sm.paused_ns,
                window_ns: sm.window_ns,
                unfollowed: sm.unfollowed,
            }
        },
        gc_totals: crate::events::gc_totals(p),
        gcs: p
            .events
            .gcs
            .iter()
            .map(|g| GcDoc {
                index: g.index,
                generation: g.generation,
                reason: g.reason.clone(),
                induced: g.induced,
                background: g.background,
                start_ns: g.start_ns,
                duration_ns: g.duration_ns,
                pause_ns: g.pause_ns,
                finished: g.finished,
                heap_before: g.before.clone(),
                heap_after: g.after.clone(),
                os_tid: g.os_tid,
            })
            .collect(),
        allocations: p
            .events
            .allocations
            .iter()
            .map(|a| AllocationDoc {
                type_name: a.type_name.clone(),
                count: a.count,
                bytes: a.bytes,
                exact: a.exact,
                samples: a.samples,
            })
            .collect(),
        allocation_sites: p
            .events
            .alloc_sites
            .iter()
            .map(|s| AllocationSiteDoc {
                type_name: s.type_name.clone(),
                function: s.function.clone(),
                via: s.via.clone(),
                stack: s.stack.clone(),
                count: s.count,
                bytes: s.bytes,
                samples: s.samples,
                exact: false,
            })
            .collect(),
        allocation_estimator: p.events.alloc_estimator,
        allocation_samples_thinned: Some(p.events.alloc_thinned).filter(|&n| n > 0),
        jit: jit(p),
        contentions: p
            .events
            .contentions
            .iter()
            .map(|c| ContentionDoc {
                site: c.site.clone(),
                count: c.count,
                wait_ns: c.wait_ns,
                max_wait_ns: c.max_wait_ns,
                stacks: c.stacks.iter().map(|(s, n)| StackCountDoc { count: *n, stack: stack_names(p, *s) }).collect(),
            })
            .collect(),
        counters: CountersDoc {
            interval_ns: p.events.counter_interval_ns,
            alloc_exact: p.events.alloc_exact,
            rows: p
                .events
                .counters
                .iter()
                .map(|r| CounterRowDoc {
                    start_ns: r.start_ns,
                    end_ns: r.end_ns,
                    gc_count: r.gc_count,
                    heap_bytes: r.heap_bytes.clone(),
                    time_in_gc_pct: r.time_in_gc_pct,
                    alloc_bytes_per_sec: r.alloc_rate,
                    exceptions_per_sec: r.exceptions_per_sec,
                    methods_jitted: r.methods_jitted,
                    assemblies_loaded: r.assemblies_loaded,
                    threads: r.threads,
                    lock_contentions: r.lock_contentions,
                })
                .collect(),
        },
        events: p.events.log_enabled.then(|| {
            p.events
                .log
                .iter()
                .map(|e| LogDoc { ts_ns: e.ts, os_tid: e.os_tid, event: e.what.clone(), nest: e.nest, depth: e.depth })
                .collect()
        }),
        asynchrony: crate::requests::section(p),
        triggers: p.triggers.clone(),
    }
}

/// The merged call tree, flat: depth first, children by inclusive time, then stack; the hooks'
/// nodes only, and of those only the ones at `min_percent` of the total or more when given.
fn calltree(p: &Profile, threads: &Threads, min_percent: Option<f64>) -> (Vec<CallTreeDoc>, Option<CallTreeHiddenDoc>) {
    let names: Vec<std::sync::Arc<str>> = select::display_names(p).into_iter().map(Into::into).collect();
    // The hooks' columns alone (a node of the whole tree in 104 bytes, not 184).
    let (mut tree, stacks) = threads.with_filter(|f| engine::stack_tree_weighed(&p.costs, f, None, ExactCost::of));
    tree.sort_children(|nodes, a, b| {
        nodes[b as usize]
            .total
            .time_ns
            .cmp(&nodes[a as usize].total.time_ns)
            .then(stacks[a as usize].cmp(&stacks[b as usize]))
    });
    let total: u64 = tree.children(0).iter().map(|&r| tree.nodes[r as usize].total.time_ns).saturating_sum();
    let mut hidden = min_percent.map(|min_percent| CallTreeHiddenDoc { min_percent, rows: 0, inclusive_ns: 0 });
    let mut out = Vec::with_capacity(tree.nodes.len());
    // (node, parent id, depth), popped in display order.
    let mut stack: Vec<(u32, Option<usize>, usize)> = tree.children(0).iter().rev().map(|&r| (r, None, 0)).collect();
    while let Some((n, parent, depth)) = stack.pop() {
        let me = &tree.nodes[n as usize];
        if !me.total.has_exact() {
            // A sampled stack's node: no calls, no time.
            continue;
        }
        if let Some(h) = &mut hidden {
            let v = me.total.time_ns;
            if total > 0 && (v as f64) * 100.0 / (total as f64) < h.min_percent {
                // Its subtree is below the cut too: counted, not listed.
                h.rows += exact_nodes(&tree, n);
                h.inclusive_ns = h.inclusive_ns.saturating_add(v);
                continue;
            }
        }
        let id = out.len();
        out.push(CallTreeDoc {
            id,
            parent,
            depth,
            name: names[me.func as usize].clone(),
            calls: me.self_w.calls,
            inclusive_ns: me.total.time_ns,
            exclusive_ns: me.self_w.time_ns,
            suspended_ns: me.total.suspended_ns,
            profiler_ns: me.total.profiler_ns,
        });
        stack.extend(tree.children(n).iter().rev().map(|&k| (k, Some(id), depth + 1)));
    }
    (out, hidden)
}

/// A cost's exact columns (the hooks'), and whether any of its columns is not zero.
#[derive(Clone, Copy, Debug, Default)]
struct ExactCost {
    calls: u64,
    time_ns: u64,
    suspended_ns: u64,
    profiler_ns: u64,
    any: bool,
}

impl ExactCost {
    fn of(c: &Cost) -> ExactCost {
        ExactCost {
            calls: c.calls,
            time_ns: c.time_ns,
            suspended_ns: c.suspended_ns,
            profiler_ns: c.profiler_ns,
            any: !c.is_zero(),
        }
    }

    fn has_exact(&self) -> bool {
        self.calls > 0 || self.time_ns > 0 || self.suspended_ns > 0 || self.profiler_ns > 0
    }
}

impl engine::Weight for ExactCost {
    fn add(&mut self, o: &Self) {
        self.calls = self.calls.saturating_add(o.calls);
        self.time_ns = self.time_ns.saturating_add(o.time_ns);
        self.suspended_ns = self.suspended_ns.saturating_add(o.suspended_ns);
        self.profiler_ns = self.profiler_ns.saturating_add(o.profiler_ns);
        self.any |= o.any;
    }

    fn is_zero(&self) -> bool {
        !self.any
    }
}

/// The nodes with an exact cost in the subtree of `n`, `n` included.
fn exact_nodes(tree: &engine::Tree<ExactCost>, n: u32) -> usize {
    let mut count = 0;
    let mut todo = vec![n];
    while let Some(k) = todo.pop() {
        if tree.nodes[k as usize].total.has_exact() {
            count += 1;
            todo.extend_from_slice(tree.children(k));
        }
    }
    count
}

/// One thread's function rows — what `function_rows` gives for that thread alone — from the
/// thread's own costs: per-thread tables of many threads cost their data, not threads × the whole
/// stack table. `scratch` is per-frame state kept between threads.
fn thread_function_rows(
    tree: &clrprof_model::CostTree,
    t: &clrprof_model::stacks::ThreadCosts,
    scratch: &mut TotalsScratch<Cost>,
) -> Vec<FunctionRow> {
    let paths = engine::thread_frame_paths(tree, t);
    engine::function_totals_with(&paths, scratch).into_iter().map(FunctionRow::from).collect()
}

fn thread_hotspots(p: &Profile, threads: &Threads) -> Vec<ThreadHotspotsDoc> {
    let names = select::display_names(p);
    let mut scratch = TotalsScratch::default();
    p.costs
        .threads
        .iter()
        .filter(|t| threads.contains(t.os_tid))
        .map(|t| {
            let mut rows = thread_function_rows(&p.costs, t, &mut scratch);
            rows.sort_by(|a, b| b.self_cost.time_ns.cmp(&a.self_cost.time_ns).then(a.frame.cmp(&b.frame)));
            ThreadHotspotsDoc {
                os_tid: t.os_tid,
                name: select::thread_name(p, t.os_tid),
                functions: rows
                    .iter()
                    .map(|r| ThreadFunctionDoc {
                        name: names[r.frame.0 as usize].clone(),
                        cost: InstrumentedCostDoc::of(&r.self_cost, &r.inclusive),
                    })
                    .collect(),
            }
        })
        .collect()
}

fn flow(p: &Profile, threads: &Threads) -> Vec<FlowDoc> {
    let fnames: HashMap<u64, &str> = p.functions.iter().map(|f| (f.id, f.name.as_str())).collect();
    p.flow
        .iter()
        .filter(|t: &&FlowThread| threads.contains(t.os_tid))
        .map(|t| FlowDoc {
            os_tid: t.os_tid,
            dropped: t.dropped,
            events: t
                .events()
                .map(|e| FlowEventDoc {
                    kind: flow_kind(e.kind),
                    function: fnames.get(&e.function).copied().unwrap_or("").to_string(),
                    ts_ns: e.ts,
                })
                .collect(),
        })
        .collect()
}

fn sampling(
    p: &Profile,
    threads: &Threads,
    cpu_hits: &crate::costs::Hits,
    cpu_by_module: &HashMap<&str, &ModuleHits>,
    wall_by_module: &HashMap<&str, &ModuleHits>,
) -> SamplingDoc {
    let s = &p.sampling;
    let mut all_modules: Vec<&str> = cpu_by_module.keys().chain(wall_by_module.keys()).copied().collect();
    all_modules.sort();
    all_modules.dedup();
    let frame_name = |f: clrprof_model::FrameId| p.costs.stacks.frames[f.0 as usize].name.clone();
    SamplingDoc {
        enabled: s.enabled(),
        rate_hz: s.cpu_rate_hz,
        wall_rate_hz: s.wall_rate_hz,
        effective_cpu_rate_hz: (s.effective_cpu_rate() * 10.0).round() / 10.0,
        total_samples: s.cpu_samples,
        cpu_ns: s.cpu_ns,
        wall_samples: s.wall_samples,
        wall_ns: s.wall_ns,
        cpu_samples_dropped: s.cpu_dropped,
        stack_walks: s.walks,
        suspend_failures: s.suspend_failures,
        walk_failures: s.walk_failures,
        timer_failures: s.timer_failures,
        suspended_ns: s.suspended_ns,
        sampler_cpu_ns: s.sampler_cpu_ns,
        threads: p
            .costs
            .threads
            .iter()
            .filter(|t| threads.contains(t.os_tid))
            .filter_map(|t| {
                let mut c = Cost::default();
                for v in t.costs.values() {
                    c.add(&v);
                }
                (c.cpu_samples != 0 || c.wall_samples != 0).then(|| SamplingThreadDoc {
                    os_tid: t.os_tid,
                    name: select::thread_name(p, t.os_tid),
                    cpu_samples: c.cpu_samples,
                    cpu_ns: c.cpu_ns,
                    wall_samples: c.wall_samples,
                    wall_ns: c.wall_ns,
                })
            })
            .collect(),
        modules: all_modules
            .iter()
            .map(|m| {
                let c = cpu_by_module.get(m);
                let w = wall_by_module.get(m);
                SamplingModuleDoc {
                    name: m.to_string(),
                    samples: c.map_or(0, |h| h.samples),
                    cpu_ns: c.map_or(0, |h| h.ns),
                    wall_samples: w.map_or(0, |h| h.samples),
                    wall_ns: w.map_or(0, |h| h.ns),
                }
            })
            .collect(),
        routines: cpu_hits
            .routines
            .iter()
            .map(|r| RoutineDoc {
                name: frame_name(r.frame),
                module: r.module.clone(),
                address: r.address,
                samples: r.samples,
                cpu_ns: r.ns,
            })
            .collect(),
    }
}

fn exceptions(p: &Profile) -> Vec<ExceptionDoc> {
    p.events
        .exceptions
        .iter()
        .map(|e| ExceptionDoc {
            type_name: e.type_name.clone(),
            throw_site: e.throw_site.clone(),
            thrown: e.thrown,
            rethrown: e.rethrown,
            observed: e.observed,
            estimated: e.estimated,
            caught: e.caught,
            uncaught: e.uncaught,
            uncaught_threads: e.uncaught_threads.clone(),
            catch_sites: e.catch_sites.iter().map(|(f, n)| CatchSiteDoc { function: f.clone(), count: *n }).collect(),
            passes: PassesDoc {
                search_frames: e.search_frames,
                filters: e.filters,
                unwind_frames: e.unwind_frames,
                finallies: e.finallies,
                catches: e.catches,
            },
            sites: e.stacks.iter().map(|(s, n)| StackCountDoc { count: *n, stack: stack_names(p, *s) }).collect(),
        })
        .collect()
}

fn jit(p: &Profile) -> JitDoc {
    let t = crate::events::jit_totals(p);
    JitDoc {
        methods: t.methods.len(),
        code_versions: t.code_versions,
        jit_ns: t.jit_ns,
        native_bytes: t.native_bytes,
        il_bytes: t.il_bytes,
        il_sizes: t
            .methods
            .iter()
            .filter_map(|f| {
                p.events.il_sizes.get(&f.id).map(|n| IlSizeDoc { function: f.name.clone(), id: f.id, il_size: *n })
            })
            .collect(),
        precompiled_methods: t.precompiled,
        assembly_load_ns: t.assembly_load_ns,
        module_load_ns: t.module_load_ns,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso_dates() {
        assert_eq!(super::iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::iso8601(1_700_000_000_123_000_000), "2023-11-14T22:13:20.123Z");
    }

    /// The per-thread rows built from each thread's own costs are the rows of the thread-filtered
    /// whole-table view, thread by thread, on every real trace in testdata (the scratch state
    /// carried from thread to thread leaks nothing).
    #[test]
    fn per_thread_rows_are_the_filtered_views_rows() {
        use clrprof_model::{NoSymbols, TimeRange};
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/traces/v1");
        let mut checked = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            let (b, _) = clrprof_load::Loader::load(clrprof_trace::TraceSource::File(path.clone())).unwrap();
            let p = b.profile(TimeRange::ALL, &mut NoSymbols);
            let mut scratch = super::TotalsScratch::default();
            let key = |r: &super::FunctionRow| format!("{:?} {:?} {:?}", r.frame, r.self_cost, r.inclusive);
            for t in &p.costs.threads {
                let mut fast: Vec<String> =
                    super::thread_function_rows(&p.costs, t, &mut scratch).iter().map(key).collect();
                let mut slow: Vec<String> =
                    super::function_rows(&p, &super::Threads::one(t.os_tid)).iter().map(key).collect();
                fast.sort();
                slow.sort();
                assert_eq!(fast, slow, "{} thread {}", path.display(), t.os_tid);
                checked += slow.len();
            }
        }
        assert!(checked > 100, "{checked} rows compared");
    }

    /// The JSON call tree holds the hooks' nodes only, every one of them by default; an explicit
    /// `--min-percent` cuts it and says what it cut.
    #[test]
    fn the_json_call_tree_is_exact_and_whole_unless_cut() {
        use clrprof_model::{Cost, FrameId, FrameKey, Profile};
        let mut p = Profile::default();
        let t = &mut p.costs;
        let f: Vec<FrameId> = ["Main", "Big", "Tiny", "[thread not walkable]"]
            .iter()
            .map(|n| t.stacks.intern_frame(FrameKey::Label(n.to_string())))
            .collect();
        let timed = |calls, time_ns| Cost { calls, time_ns, ..Default::default() };
        let sampled = Cost { wall_samples: 2, wall_ns: 20_000_000, ..Default::default() };
        for (frames, cost) in [
            (vec![f[0]], timed(1, 1000)),
            (vec![f[0], f[1]], timed(3, 9000)),
            (vec![f[0], f[1], f[2]], timed(2, 2)),
            (vec![f[0], f[1], f[2]], sampled),
            (vec![f[3]], sampled),
        ] {
            let s = t.stacks.intern_stack(&frames).unwrap();
            t.add(1, s, &cost);
        }
        let names = |d: &super::ReportDocument| -> Vec<String> {
            d.calltree.as_ref().unwrap().iter().map(|n| n.name.to_string()).collect()
        };
        let all = super::document(&p, &super::Threads::all(), None);
        assert_eq!(names(&all), ["Main", "Big", "Tiny"]);
        assert!(all.calltree_hidden.is_none());
        let opts = super::DocumentOptions { calltree_min_percent: Some(0.05), ..Default::default() };
        let cut = super::document_with(&p, &super::Threads::all(), None, opts);
        assert_eq!(names(&cut), ["Main", "Big"]);
        let h = cut.calltree_hidden.as_ref().unwrap();
        assert_eq!((h.rows, h.inclusive_ns), (1, 2));
        assert_eq!(cut.calltree.as_ref().unwrap()[1].inclusive_ns, 9002);
    }
}
