//! `clrprof report`: views of a trace, as text or JSON.

mod allocations;
mod callers;
mod calltree;
mod counters;
mod events;
mod events_json;
mod exceptions;
mod flow;
mod gc;
mod hotspots;
mod jit;
mod json;
mod locks;
mod modules;
mod sampling_json;
pub mod select;
mod summary;
mod table;
mod tables;

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clrprof_model::{Metric, Profile};

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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Csv,
}

/// Options of `clrprof report`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReportOptions {
    pub trace: PathBuf,
    pub view: View,
    pub format: Format,
    /// `None` = standard output.
    pub output: Option<PathBuf>,
    /// `None` = the profile's natural weight (see `select::metric`).
    pub weight: Option<Metric>,
    /// `--thread`: OS tid, ThreadID or name.
    pub thread: Option<String>,
    pub by_thread: bool,
    pub top: Option<usize>,
    pub depth: Option<usize>,
    pub min_percent: f64,
    pub function: Option<String>,
    /// Name native frames from the ELF files on this machine.
    pub native_symbols: bool,
}

pub fn report(opts: &ReportOptions) -> Result<()> {
    let profile = crate::load::load(&opts.trace, opts.native_symbols)?;
    let text = render(&profile, opts)?;
    match &opts.output {
        Some(p) => std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            // A closed pipe (`| head`) is not an error worth reporting.
            let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
        }
    }
    Ok(())
}

pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let view = match opts.view {
        // Allocation samples alone (runtime events) do not make a hot-spot profile.
        View::Auto if !has_time_or_call_costs(p) => View::Tables,
        View::Auto => View::Hotspots,
        v => v,
    };
    if opts.format == Format::Json {
        let mut s = serde_json::to_string_pretty(&json::document(p, opts)?)?;
        s.push('\n');
        return Ok(s);
    }
    if opts.format == Format::Csv && view != View::Hotspots {
        bail!("--format csv is available for --view hotspots only");
    }
    Ok(match view {
        View::Auto | View::Tables => tables::render(p),
        View::Hotspots if opts.format == Format::Csv => hotspots::csv(p, opts)?,
        View::Hotspots => hotspots::render(p, opts)?,
        View::Calltree => calltree::render(p, opts)?,
        View::Callers => callers::render(p, opts)?,
        View::Summary => summary::render(p, opts)?,
        View::Flow => flow::render(p, opts)?,
        View::Exceptions => exceptions::render(p),
        View::Gc => gc::render(p),
        View::Allocations => allocations::render(p),
        View::Jit => jit::render(p),
        View::Events => events::render(p),
        View::Counters => counters::render(p),
        View::Locks => locks::render(p),
        View::Modules => modules::render(p, opts)?,
    })
}

/// True when the trace has instrumented or sampled costs (not only allocation samples).
fn has_time_or_call_costs(p: &Profile) -> bool {
    p.costs
        .threads
        .iter()
        .any(|t| t.costs.values().any(|c| c.calls > 0 || c.time_ns > 0 || c.cpu_samples > 0 || c.wall_samples > 0))
}

/// Nanoseconds as milliseconds with three decimals (`.` whatever the locale).
pub fn ms(ns: u64) -> String {
    format!("{}.{:03}", ns / 1_000_000, (ns / 1_000) % 1_000)
}

/// The header every text report starts with.
pub fn title(p: &Profile, what: &str) -> String {
    let pr = &p.process;
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
    s += &format!("command: {}\n", pr.command_line);
    if !pr.clean_shutdown {
        s += "note: the agent did not shut down cleanly (crash, kill or FailFast); data ends at the last flush\n";
    }
    for m in &p.messages {
        s += &format!("note: {m}\n");
    }
    s
}
