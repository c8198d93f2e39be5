//! `clrprof report`: views of a trace, as text or JSON.

mod allocations;
mod counters;
mod events;
mod events_json;
mod exceptions;
mod gc;
mod jit;
mod json;
mod locks;
mod table;
mod tables;

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clrprof_model::Profile;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Tables,
    Exceptions,
    Gc,
    Allocations,
    Jit,
    Events,
    Counters,
    Locks,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
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
}

pub fn report(opts: &ReportOptions) -> Result<()> {
    let profile = crate::load::load(&opts.trace)?;
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
    Ok(match (opts.view, opts.format) {
        (View::Tables, Format::Text) => tables::render(p),
        (View::Exceptions, Format::Text) => exceptions::render(p),
        (View::Gc, Format::Text) => gc::render(p),
        (View::Allocations, Format::Text) => allocations::render(p),
        (View::Jit, Format::Text) => jit::render(p),
        (View::Events, Format::Text) => events::render(p),
        (View::Counters, Format::Text) => counters::render(p),
        (View::Locks, Format::Text) => locks::render(p),
        // One JSON document holds every view.
        (_, Format::Json) => {
            let mut s = serde_json::to_string_pretty(&json::document(p))?;
            s.push('\n');
            s
        }
    })
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
