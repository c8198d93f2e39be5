//! `clrprof export`: loads a trace and writes its stacks in another tool's format.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clrprof_export::{exporter, ExportFormat, ExportInput};
use clrprof_model::Metric;
use clrprof_query::Threads;

/// Options of `clrprof export`.
#[derive(Clone, Debug)]
pub struct ExportCommand {
    pub trace: PathBuf,
    pub format: ExportFormat,
    /// `None` = next to the trace, `-` = standard output.
    pub output: Option<PathBuf>,
    /// `None` = the profile's natural weight (CPU time for sampled traces).
    pub weight: Option<Metric>,
    pub thread: Option<String>,
    pub read: crate::load::ReadOptions,
}

/// Default output: the trace's path with the weight and the format's extension
/// (`app.clrprof` → `app.cpu.svg`).
fn default_output(trace: &Path, metric: Metric, ext: &str) -> PathBuf {
    if let Some(spec) = crate::collect::run_spec(trace) {
        // `run:7` → `run-7.cpu.svg` in the working directory.
        return PathBuf::from(format!("run-{spec}.{}.{ext}", metric.name()));
    }
    let stem = trace.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "profile".into());
    trace.with_file_name(format!("{stem}.{}.{ext}", metric.name()))
}

pub fn export(c: &ExportCommand) -> Result<()> {
    let p = crate::load::load(&c.trace, &c.read)?;
    let threads = Threads::resolve(&p, c.thread.as_deref())?;
    let stacks = clrprof_query::stacks::stacks(&p, c.weight, &threads);
    if stacks.merged.is_empty() {
        bail!("{} has no {} to export (was it recorded with --no-sample?)", c.trace.display(), stacks.weight_name);
    }
    let inp = ExportInput { profile: &p, stacks, threads };
    let ex = exporter(c.format);
    let mut buf = Vec::new();
    ex.write(&inp, &mut buf)?;
    match &c.output {
        Some(o) if o.as_os_str() == "-" => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&buf).and_then(|_| out.flush());
        }
        o => {
            let path = o.clone().unwrap_or_else(|| default_output(&c.trace, inp.stacks.metric, ex.extension()));
            std::fs::write(&path, &buf).with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!(
                "clrprof: {} ({}, {} stacks) written to {}",
                ex.extension(),
                inp.stacks.weight_name,
                inp.stacks.merged.len(),
                path.display()
            );
        }
    }
    Ok(())
}
