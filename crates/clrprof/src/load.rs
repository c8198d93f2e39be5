//! The readers' inputs as the commands see them: a trace, an imported file or `run:ID`, loaded by
//! `clrprof-load`, with its warnings (a run still streaming or cut off, a truncated trace) on
//! stderr.

use std::path::Path;

use anyhow::Result;
use clrprof_load::Input;
use clrprof_model::Profile;

pub use clrprof_load::ReadOptions;

/// What a reader names as its input — a trace file (or an imported file), or `run:ID`/`run:latest`
/// of `store` — resolved, its warnings (still streaming, cut off) printed. `report`, `export`,
/// `diff` and `view` all read through this.
pub fn trace_source(path: &Path, store: Option<&str>) -> Result<Input> {
    let input = Input::resolve(path, store)?;
    for w in &input.warnings {
        eprintln!("clrprof: warning: {w}");
    }
    Ok(input)
}

/// Loads a trace — or an imported file: folded stacks, a vsperfreport CSV summary — for a time
/// range. Corrupt, foreign, empty or newer-version files are errors; a truncated trace is read up
/// to the damage with a warning on stderr (also kept in `Profile::messages`).
///
/// `path` may name a run of a store instead (`run:ID`, `run:latest`; see `clrprof runs`).
pub fn load(path: &Path, read: &ReadOptions) -> Result<Profile> {
    let input = trace_source(path, read.store.as_deref())?;
    let label = input.label.clone();
    let (profile, truncation) = clrprof_load::read(path, input, read)?;
    if let Some(t) = truncation {
        eprintln!("clrprof: warning: {label}: {t}");
    }
    Ok(profile)
}
