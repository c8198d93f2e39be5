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
    /// Build the profile with source lines (`--by-line`).
    pub lines: bool,
}

/// Default output: the trace's path with the weight and the format's extension
/// (`app.clrprof` → `app.cpu.svg`).
fn default_output(trace: &Path, metric: Metric, ext: &str) -> PathBuf {
    if let Some(spec) = clrprof_load::store::run_spec(trace) {
        // `run:7` → `run-7.cpu.svg` in the working directory.
        return PathBuf::from(format!("run-{spec}.{}.{ext}", metric.name()));
    }
    let stem = trace.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "profile".into());
    trace.with_file_name(format!("{stem}.{}.{ext}", metric.name()))
}

pub fn export(c: &ExportCommand) -> Result<()> {
    let ex = exporter(c.format);
    // Formats of stacks merged over threads read the instrumented costs merged (one per stack).
    let merged = c.thread.is_none() && ex.stacks_needed() == clrprof_query::weighted_stacks::Needed::Merged;
    let read = crate::load::ReadOptions { lines: c.lines, merge_threads: merged, ..c.read.clone() };
    let p = crate::load::load(&c.trace, &read)?;
    let threads = Threads::resolve(&p, c.thread.as_deref())?;
    let stacks = clrprof_query::weighted_stacks::stacks_of(&p, c.weight, &threads, ex.stacks_needed());
    if stacks.count == 0 {
        bail!("{} has no {} to export (was it recorded with --no-sample?)", c.trace.display(), stacks.weight_name);
    }
    let inp = ExportInput { profile: &p, stacks, threads };
    match &c.output {
        Some(o) if o.as_os_str() == "-" => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            // A closed pipe (`| head`) is not an error worth reporting.
            match ex.write(&inp, &mut out).map_err(anyhow::Error::from).and_then(|_| Ok(out.flush()?)) {
                Err(e) if is_broken_pipe(&e) => {}
                r => r?,
            }
        }
        o => {
            let path = o.clone().unwrap_or_else(|| default_output(&c.trace, inp.stacks.metric, ex.extension()));
            // Written as it is made (large exports never sit whole in memory); a failed export
            // leaves no partial file behind.
            let f = std::fs::File::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
            let mut out = std::io::BufWriter::with_capacity(1 << 16, f);
            let written = ex.write(&inp, &mut out).map_err(anyhow::Error::from).and_then(|_| Ok(out.flush()?));
            if let Err(e) = written {
                drop(out);
                let _ = std::fs::remove_file(&path);
                return Err(e.context(format!("cannot write {}", path.display())));
            }
            eprintln!(
                "clrprof: {} ({}, {} stacks) written to {}",
                ex.extension(),
                inp.stacks.weight_name,
                inp.stacks.count,
                path.display()
            );
        }
    }
    Ok(())
}

pub(crate) fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<clrprof_export::ExportError>().is_some_and(
                |x| matches!(x, clrprof_export::ExportError::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe),
            )
    })
}
