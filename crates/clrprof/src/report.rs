//! `clrprof report`: loads a trace and prints a view of it (rendering is `clrprof-report`'s).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clrprof_report::ReportOptions;

/// Options of `clrprof report`.
#[derive(Clone, Debug)]
pub struct ReportCommand {
    pub trace: PathBuf,
    /// `None` = standard output.
    pub output: Option<PathBuf>,
    pub read: crate::load::ReadOptions,
    /// Build the profile with source lines (`--by-line`, `--view lines|source`).
    pub lines: bool,
    pub report: ReportOptions,
}

pub fn report(c: &ReportCommand) -> Result<()> {
    let read = crate::load::ReadOptions { lines: c.lines, ..c.read.clone() };
    let profile = crate::load::load(&c.trace, &read)?;
    let text = clrprof_report::render(&profile, &c.report)?;
    match &c.output {
        Some(p) => std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            // A closed pipe (`| head`) is not an error worth reporting.
            let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
        }
    }
    Ok(())
}

/// Writes a command's text to `output`, or to standard output when `None` (a closed pipe is no error).
pub fn write_output(output: Option<&std::path::Path>, text: &str) -> Result<()> {
    match output {
        Some(p) => std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
        }
    }
    Ok(())
}
