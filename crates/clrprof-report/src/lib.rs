//! `clrprof report`: views of a profile as text, CSV or JSON. Every figure comes from the query
//! layer (`clrprof-query`); this crate only lays it out.
#![forbid(unsafe_code)]

mod allocations;
mod callers;
mod calltree;
mod counters;
pub mod diff;
mod event_log;
mod exceptions;
mod flow;
pub mod gate;
mod gc;
mod gcp_tables;
mod hotspots;
mod jit;
mod json_doc;
mod lines;
mod locks;
mod modules;
mod source;
mod source_files;
mod triggers;
pub use source_files::find_source;
mod requests;
mod summary;
mod text_table;

use clrprof_model::{Metric, Profile};
use clrprof_query::costs::CostQuery;
use clrprof_query::{select, QueryError, Threads};

/// The report's views, described in [`VIEWS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// Hot spots when the trace has costs, else the tables.
    Auto,
    Tables,
    Hotspots,
    Calltree,
    Callers,
    Summary,
    Flow,
    Exceptions,
    Gc,
    Allocations,
    Jit,
    Events,
    Counters,
    Locks,
    Modules,
    Lines,
    Source,
    /// Heap snapshot: per type count, shallow and retained size (rendered by the CLI from `clrprof-heap`).
    Types,
    /// Heap snapshot: the dominator tree with retained sizes.
    Dominators,
    /// Heap snapshot: shortest paths from roots to a type's instances.
    Paths,
    Requests,
    Triggers,
}

/// A view a user can ask for: its `--view` name and what it shows.
#[derive(Clone, Copy, Debug)]
pub struct ViewInfo {
    pub view: View,
    pub name: &'static str,
    pub help: &'static str,
}

/// Every view but [`View::Auto`], in the order `--help` lists them.
pub const VIEWS: [ViewInfo; 21] = [
    ViewInfo {
        view: View::Tables,
        name: "tables",
        help: "The General Code Profiler's tables: threads, app domains, assemblies, modules, classes, functions",
    },
    ViewInfo {
        view: View::Hotspots,
        name: "hotspots",
        help: "Per function: calls, exclusive/inclusive/callee/suspended/profiler time (or samples), hottest first",
    },
    ViewInfo {
        view: View::Calltree,
        name: "calltree",
        help: "The top-down call tree with counts, times and percentages",
    },
    ViewInfo {
        view: View::Callers,
        name: "callers",
        help: "Who calls a function and whom it calls (--function NAME), with entry points",
    },
    ViewInfo { view: View::Summary, name: "summary", help: "Every called function with its call count" },
    ViewInfo {
        view: View::Flow,
        name: "flow",
        help: "Ordered enter/leave events per thread, indented by nesting (record --flow)",
    },
    ViewInfo {
        view: View::Modules,
        name: "modules",
        help: "The Monte Carlo tables: sampled hits per module (assemblies and native libraries) and per routine",
    },
    ViewInfo {
        view: View::Exceptions,
        name: "exceptions",
        help: "Exceptions by type and throw site: thrown, caught, uncaught, catch sites, passes, stacks",
    },
    ViewInfo {
        view: View::Gc,
        name: "gc",
        help: "Every garbage collection (generation, reason, background, duration, pause, heap sizes) and totals",
    },
    ViewInfo {
        view: View::Allocations,
        name: "allocations",
        help: "Allocations by type and by allocation site (sampled estimates or exact counts)",
    },
    ViewInfo {
        view: View::Jit,
        name: "jit",
        help: "JIT time and native size per method; assembly and module load times",
    },
    ViewInfo {
        view: View::Events,
        name: "events",
        help: "The runtime event log indented by per-thread nesting (record with --events)",
    },
    ViewInfo {
        view: View::Counters,
        name: "counters",
        help: "Runtime counters over time: GCs, heap, % time in GC, allocation rate, exceptions/s, JIT, loads, threads",
    },
    ViewInfo {
        view: View::Locks,
        name: "locks",
        help: "Thread lifetimes and names; Monitor lock contention with wait times and waiting stacks",
    },
    ViewInfo {
        view: View::Lines,
        name: "lines",
        help: "Hot source lines (from portable PDBs): per function and line, self and total, hottest first (--function NAME: its lines)",
    },
    ViewInfo {
        view: View::Source,
        name: "source",
        help: "One method's source (--function NAME) with each line's self and total beside it, like perf annotate",
    },
    ViewInfo {
        view: View::Types,
        name: "types",
        help: "Heap snapshot: per type the live instances, their shallow size and the bytes they retain (--sort)",
    },
    ViewInfo {
        view: View::Dominators,
        name: "dominators",
        help: "Heap snapshot: the dominator tree with retained sizes, instances of one type merged (--depth, --min-percent)",
    },
    ViewInfo {
        view: View::Paths,
        name: "paths",
        help: "Heap snapshot: shortest paths from roots to the instances of --type NAME, with roots and fields",
    },
    ViewInfo {
        view: View::Requests,
        name: "requests",
        help: "ASP.NET Core requests per route (count, p50/p95/p99), slowest requests, blocking waits, thread-pool starvation (record --async)",
    },
    ViewInfo {
        view: View::Triggers,
        name: "triggers",
        help: "Collection triggers that fired (record --trigger): rule, when, what was measured, the window or heap snapshot",
    },
];

/// Output formats of a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Csv,
}

/// Every report format and its `--format` name.
pub const FORMATS: [(Format, &str); 3] = [(Format::Text, "text"), (Format::Json, "json"), (Format::Csv, "csv")];

/// What to show and how.
#[derive(Clone, Debug)]
pub struct ReportOptions {
    pub view: View,
    pub format: Format,
    /// `None` = the profile's natural weight (see `clrprof_query::select::metric`).
    pub weight: Option<Metric>,
    /// `--thread`: OS tid, ThreadID or name.
    pub thread: Option<String>,
    pub by_thread: bool,
    pub top: Option<usize>,
    pub depth: Option<usize>,
    /// `--min-percent`: `None` is the view's default (the call tree under an exact weight hides
    /// rows below [`clrprof_query::costs::EXACT_TREE_MIN_PERCENT`]; JSON keeps every row).
    pub min_percent: Option<f64>,
    pub function: Option<String>,
    /// JSON: the timeline's bucket size (`None`: chosen from the span).
    pub bucket_ns: Option<u64>,
    /// JSON: every thread's hot spots and timeline row (`--per-thread`).
    pub per_thread: bool,
    /// `--view source`: directories searched for PDBs and source files (`--symbols`).
    pub symbol_dirs: Vec<std::path::PathBuf>,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            view: View::Auto,
            format: Format::Text,
            weight: None,
            thread: None,
            by_thread: false,
            top: None,
            depth: None,
            min_percent: None,
            function: None,
            bucket_ns: None,
            per_thread: false,
            symbol_dirs: Vec::new(),
        }
    }
}

impl ReportOptions {
    /// The cost query these options ask, with the thread selection resolved against `p`.
    pub fn cost_query(&self, p: &Profile) -> Result<CostQuery, QueryError> {
        Ok(CostQuery {
            metric: self.weight,
            threads: Threads::resolve(p, self.thread.as_deref())?,
            by_thread: self.by_thread,
            top: self.top,
            depth: self.depth,
            min_percent: self.min_percent,
        })
    }
}

/// Why a report cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error("{0}")]
    Unsupported(String),
    #[error("cannot write JSON: {0}")]
    Json(serde_json::Error),
    #[error("cannot write the report")]
    Io(#[source] std::io::Error),
}

// The message includes its cause, so `source()` stays unset (printed once in an error chain).
impl From<serde_json::Error> for ReportError {
    fn from(e: serde_json::Error) -> Self {
        ReportError::Json(e)
    }
}

pub type Result<T, E = ReportError> = std::result::Result<T, E>;

/// The report for `opts`, written to `out`: the JSON document is written as it is laid out, its
/// large arrays (the call tree, the flow events) node by node, rather than built whole as one
/// string and one JSON value first (1.9 GB for a 338 MB document of a 198 MiB compiler trace);
/// the bytes are [`render`]'s.
pub fn render_to(p: &Profile, opts: &ReportOptions, out: &mut dyn std::io::Write) -> Result<()> {
    if opts.format == Format::Json && is_document(opts) {
        let threads = Threads::resolve(p, opts.thread.as_deref())?;
        return json_doc::write(document_for(p, opts, &threads)?, p, &threads, out);
    }
    out.write_all(render(p, opts)?.as_bytes()).map_err(ReportError::Io)
}

/// Whether the JSON of `opts` is the report document (not a view's own JSON).
fn is_document(opts: &ReportOptions) -> bool {
    let own =
        matches!(opts.view, View::Lines | View::Source) || (opts.view == View::Callers && opts.function.is_some());
    !own
}

/// The report document of `opts` (JSON without a view of its own), its flow events left for
/// [`json_doc::write`] to lay out from the profile.
fn document_for(
    p: &Profile,
    opts: &ReportOptions,
    threads: &Threads,
) -> Result<clrprof_query::document::ReportDocument> {
    Ok(clrprof_query::document::document_with(
        p,
        threads,
        opts.bucket_ns,
        clrprof_query::document::DocumentOptions {
            per_thread: opts.per_thread,
            calltree_min_percent: opts.min_percent,
            flow_left_out: true,
        },
    ))
}

/// The report for `opts` as one string.
pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let view = match opts.view {
        // Allocation samples alone (runtime events) do not make a hot-spot profile.
        View::Auto if !select::has_time_or_call_costs(p) => View::Tables,
        View::Auto => View::Hotspots,
        v => v,
    };
    if opts.per_thread && opts.format != Format::Json {
        return Err(ReportError::Unsupported(
            "--per-thread is for --format json (text and CSV hot spots per thread: --by-thread)".into(),
        ));
    }
    match (view, opts.format) {
        (View::Lines, Format::Json) => return lines::json(p, opts),
        (View::Source, Format::Json) => return source::json(p, opts),
        (View::Callers, Format::Json) if opts.function.is_some() => return callers::json(p, opts),
        _ => {}
    }
    if opts.format == Format::Json {
        let threads = Threads::resolve(p, opts.thread.as_deref())?;
        let mut out = Vec::new();
        json_doc::write(document_for(p, opts, &threads)?, p, &threads, &mut out)?;
        return Ok(String::from_utf8(out).expect("serde_json writes UTF-8"));
    }
    if opts.format == Format::Csv && view != View::Hotspots {
        return Err(ReportError::Unsupported("--format csv is available for --view hotspots only".into()));
    }
    Ok(match view {
        View::Auto | View::Tables => gcp_tables::render(p),
        View::Hotspots if opts.format == Format::Csv => hotspots::csv(p, opts)?,
        View::Hotspots => hotspots::render(p, opts)?,
        View::Calltree => calltree::render(p, opts)?,
        View::Callers => callers::render(p, opts)?,
        View::Summary => summary::render(p, opts)?,
        View::Flow => flow::render(p, opts)?,
        View::Exceptions => exceptions::render(p),
        View::Gc => gc::render(p),
        View::Allocations => allocations::render(p, opts.top),
        View::Jit => jit::render(p),
        View::Events => event_log::render(p),
        View::Counters => counters::render(p),
        View::Locks => locks::render(p),
        View::Modules => modules::render(p, opts)?,
        View::Lines => lines::render(p, opts)?,
        View::Source => source::render(p, opts)?,
        View::Types | View::Dominators | View::Paths => {
            return Err(ReportError::Unsupported(
                "the heap views are made from a trace's heap snapshots, not from its profile".into(),
            ))
        }
        View::Requests => requests::render(p, opts.top),
        View::Triggers => triggers::render(p),
    })
}

/// Nanoseconds as milliseconds with three decimals (`.` whatever the locale).
pub fn ms(ns: u64) -> String {
    format!("{}.{:03}", ns / 1_000_000, (ns / 1_000) % 1_000)
}

/// Formats a metric value: ms for times, plain counts otherwise.
pub fn fmt_value(m: Metric, v: u64) -> String {
    if select::is_time(m) {
        ms(v)
    } else {
        v.to_string()
    }
}

/// A metric value with its unit: `12.500 ms`, `4096 alloc-bytes`.
pub fn with_unit(m: Metric, v: u64) -> String {
    if select::is_time(m) {
        format!("{} ms", ms(v))
    } else {
        format!("{v} {}", m.name())
    }
}

pub fn percent(part: u64, total: u64) -> String {
    if total == 0 {
        "0.0".into()
    } else {
        format!("{:.1}", part as f64 * 100.0 / total as f64)
    }
}

/// The header every text report starts with.
pub fn title(p: &Profile, what: &str) -> String {
    let pr = &p.process;
    if pr.pid == 0 && pr.start_unix_ns == 0 && pr.duration_ns == 0 && pr.runtime_version.is_empty() {
        // An imported profile (folded stacks, vsperfreport CSV): no process, no run time.
        let mut s = format!("clrprof {what} — {}\n", pr.command_line.trim_matches(|c| c == '(' || c == ')'));
        for m in &p.messages {
            s += &format!("note: {m}\n");
        }
        return s;
    }
    let mut s = format!("clrprof {what} — pid {}", pr.pid);
    if !pr.runtime_version.is_empty() {
        s += &format!(", .NET {}", pr.runtime_version);
    }
    s += &format!(", {} ms", ms(pr.duration_ns));
    match (pr.exit_code, pr.signal) {
        (Some(c), _) => s += &format!(", exit code {c}"),
        (None, Some(sig)) => s += &format!(", killed by signal {sig}"),
        _ => {}
    }
    s += "\n";
    s += &format!("command: {}\n", select::short_command(&pr.command_line));
    if !p.range.is_all() {
        let (from, to) = p.span();
        s += &format!(
            "time range: {} ms to {} ms of the run ({} ms); figures cover this window only\n",
            ms(from),
            ms(to),
            ms(to.saturating_sub(from))
        );
    }
    if !pr.clean_shutdown {
        s += "note: the agent did not shut down cleanly (crash, kill or FailFast); data ends at the last flush\n";
    }
    for m in &p.messages {
        s += &format!("note: {m}\n");
    }
    s
}
