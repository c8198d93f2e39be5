//! `clrprof diff`: loads two profiles and prints the delta table (computed by
//! `clrprof_query::diff`, laid out by `clrprof_report::diff`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clrprof_model::Metric;
use clrprof_query::diff::DiffQuery;
use clrprof_query::Threads;
use clrprof_report::Format;

/// Options of `clrprof diff`.
#[derive(Clone, Debug)]
pub struct DiffCommand {
    pub old: PathBuf,
    pub new: PathBuf,
    pub read: crate::load::ReadOptions,
    pub weight: Option<Metric>,
    pub normalize: bool,
    pub top: Option<usize>,
    pub format: Format,
    /// `None` = standard output.
    pub output: Option<PathBuf>,
    /// Resolved in each profile on its own (thread ids differ between runs; names need not).
    pub thread: Option<String>,
}

pub fn diff(c: &DiffCommand) -> Result<()> {
    if let (Some(m), Some(_)) = (c.weight, &c.thread) {
        if m.is_event() {
            anyhow::bail!("--thread does not apply to --weight {}: it is recorded per stack, not per thread", m.name());
        }
    }
    let base = crate::load::load(&c.old, &c.read)?;
    let new = crate::load::load(&c.new, &c.read)?;
    let base_threads =
        Threads::resolve(&base, c.thread.as_deref()).with_context(|| format!("in {}", c.old.display()))?;
    let new_threads = Threads::resolve(&new, c.thread.as_deref()).with_context(|| format!("in {}", c.new.display()))?;
    let q = DiffQuery {
        metric: c.weight,
        base_threads,
        new_threads,
        normalize: c.normalize,
        top: c.top,
        transforms: Vec::new(),
    };
    let view = clrprof_query::diff::diff(&base, &new, &q);
    let text =
        clrprof_report::diff::render(&view, &c.old.display().to_string(), &c.new.display().to_string(), c.format);
    match &c.output {
        Some(p) => std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
        }
    }
    Ok(())
}
