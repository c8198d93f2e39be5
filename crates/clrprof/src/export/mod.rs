//! `clrprof export`: the profile's stacks in the formats other tools read. Every format is an
//! [`Exporter`] over the same [`ExportInput`] (stacks merged over the selected threads, and per
//! thread), derived from the canonical cost tree like every report.

mod collapsed;
mod flamegraph;
mod speedscope;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clrprof_model::{Cost, FrameId, Metric, Profile, StackId};

pub use collapsed::Collapsed;
pub use flamegraph::{FlameHtml, FlameSvg};
pub use speedscope::Speedscope;

/// Output formats of `clrprof export`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// Folded stacks, one `frame;frame;frame count` line per stack (flame-graph input).
    Collapsed,
    /// A self-contained SVG flame graph.
    Svg,
    /// A self-contained HTML page with the flame graph (click to zoom, search).
    Html,
    /// speedscope JSON: one profile merged over threads, then one per thread.
    Speedscope,
}

/// Options of `clrprof export`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ExportOptions {
    pub trace: PathBuf,
    pub format: ExportFormat,
    /// `None` = next to the trace, `-` = standard output.
    pub output: Option<PathBuf>,
    /// `None` = the profile's natural weight (CPU time for sampled traces).
    pub weight: Option<Metric>,
    pub thread: Option<String>,
    /// Name native frames from the ELF files on this machine.
    pub native_symbols: bool,
}

/// One stack and its cost: `samples` (how many samples or calls) and `value` (the metric's
/// amount: ns of CPU or wall time, bytes, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Root first.
    pub frames: Vec<FrameId>,
    pub samples: u64,
    pub value: u64,
}

/// What every exporter reads.
pub struct ExportInput<'a> {
    pub profile: &'a Profile,
    /// Describes the weight for titles (`CPU time`, `wall time`).
    pub weight_name: &'static str,
    /// Unit of `Sample::value` as speedscope names it.
    pub value_unit: &'static str,
    pub merged: Vec<Sample>,
    /// (OS tid, thread name, samples).
    pub threads: Vec<(u32, String, Vec<Sample>)>,
}

impl ExportInput<'_> {
    pub fn frame_name(&self, f: FrameId) -> &str {
        &self.profile.costs.stacks.frames[f.0 as usize].name
    }

    pub fn title(&self) -> String {
        let pr = &self.profile.process;
        let cmd = if pr.command_line.is_empty() { format!("pid {}", pr.pid) } else { pr.command_line.clone() };
        format!("{cmd} — {}", self.weight_name)
    }
}

/// Writes one format.
pub trait Exporter {
    /// File extension of the format (without dot).
    fn extension(&self) -> &'static str;
    fn write(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()>;
}

/// (samples, value) of a cost for a metric.
pub fn measure(metric: Metric, c: &Cost) -> (u64, u64) {
    match metric {
        Metric::Cpu => (c.cpu_samples, c.cpu_ns),
        Metric::Wall => (c.wall_samples, c.wall_ns),
        Metric::Time => (c.calls, c.time_ns),
        Metric::Calls => (c.calls, c.calls),
        Metric::AllocBytes => (c.alloc_count, c.alloc_bytes),
        Metric::AllocCount => (c.alloc_count, c.alloc_count),
    }
}

fn samples_of(p: &Profile, metric: Metric, costs: &[Cost]) -> Vec<Sample> {
    let mut out: Vec<Sample> = costs
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let (samples, value) = measure(metric, c);
            (samples > 0 || value > 0).then(|| Sample {
                frames: p.costs.stacks.frames_of(StackId(i as u32)),
                samples,
                value,
            })
        })
        .collect();
    // Deterministic: by the frames' names, root first.
    let name = |f: &FrameId| p.costs.stacks.frames[f.0 as usize].name.as_str();
    out.sort_by(|a, b| a.frames.iter().map(name).cmp(b.frames.iter().map(name)));
    out
}

/// Builds the exporters' input for a metric and an optional thread selection.
pub fn input<'a>(p: &'a Profile, metric: Metric, tids: Option<&[u32]>) -> ExportInput<'a> {
    let keep = |t: u32| tids.is_none_or(|v| v.contains(&t));
    let merged = samples_of(p, metric, &p.costs.merged(Some(&keep)));
    let threads = p
        .costs
        .threads
        .iter()
        .filter(|t| keep(t.os_tid))
        .map(|t| {
            let only = |x: u32| x == t.os_tid;
            let name = p.thread_by_os_tid(t.os_tid).map(|x| x.name.clone()).unwrap_or_default();
            (t.os_tid, name, samples_of(p, metric, &p.costs.merged(Some(&only))))
        })
        .filter(|(_, _, s)| !s.is_empty())
        .collect();
    let (weight_name, value_unit) = match metric {
        Metric::Cpu => ("CPU time (sampled)", "nanoseconds"),
        Metric::Wall => ("wall time (sampled)", "nanoseconds"),
        Metric::Time => ("exclusive time (instrumented)", "nanoseconds"),
        Metric::Calls => ("calls", "none"),
        Metric::AllocBytes => ("allocated bytes", "bytes"),
        Metric::AllocCount => ("allocations", "none"),
    };
    ExportInput { profile: p, weight_name, value_unit, merged, threads }
}

fn exporter(f: ExportFormat) -> Box<dyn Exporter> {
    match f {
        ExportFormat::Collapsed => Box::new(Collapsed),
        ExportFormat::Svg => Box::new(FlameSvg),
        ExportFormat::Html => Box::new(FlameHtml),
        ExportFormat::Speedscope => Box::new(Speedscope),
    }
}

/// Default output: the trace's path with the weight and the format's extension
/// (`app.clrprof` → `app.cpu.svg`).
fn default_output(trace: &Path, metric: Metric, ext: &str) -> PathBuf {
    let stem = trace.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "profile".into());
    trace.with_file_name(format!("{stem}.{}.{ext}", metric.name()))
}

pub fn export(opts: &ExportOptions) -> Result<()> {
    let p = crate::load::load(&opts.trace, opts.native_symbols)?;
    let metric = crate::report::select::metric(&p, opts.weight);
    let tids = crate::report::select::threads(&p, opts.thread.as_deref())?;
    let inp = input(&p, metric, tids.as_deref());
    if inp.merged.is_empty() {
        bail!("{} has no {} to export (was it recorded with --no-sample?)", opts.trace.display(), inp.weight_name);
    }
    let ex = exporter(opts.format);
    let mut buf = Vec::new();
    ex.write(&inp, &mut buf)?;
    match &opts.output {
        Some(p) if p.as_os_str() == "-" => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&buf).and_then(|_| out.flush());
        }
        o => {
            let path = o.clone().unwrap_or_else(|| default_output(&opts.trace, metric, ex.extension()));
            std::fs::write(&path, &buf).with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!(
                "clrprof: {} ({}, {} stacks) written to {}",
                ex.extension(),
                inp.weight_name,
                inp.merged.len(),
                path.display()
            );
        }
    }
    Ok(())
}
