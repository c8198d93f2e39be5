//! Reads a trace file into the canonical profile, reporting truncation as a warning.

use std::path::Path;

use anyhow::Result;
use clrprof_load::import::{Format, ImportOptions};
use clrprof_load::{LoadError, Loader};
use clrprof_model::{Profile, TimeRange};

/// How to read a trace.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// The window of the run to profile.
    pub range: TimeRange,
    /// Name native frames from the ELF files on this machine (else `module!<unknown>`).
    pub native_symbols: bool,
    /// Directories searched for separate debug files by build-id (besides /usr/lib/debug).
    pub debug_dirs: Vec<std::path::PathBuf>,
    /// Imported files: the CPU time one sample stands for.
    pub import: ImportOptions,
    /// The run store `run:ID` is read from (`None`: the default store).
    pub store: Option<String>,
}

/// Loads a trace — or an imported file: folded stacks, a vsperfreport CSV summary — for a time
/// range. Corrupt, foreign, empty or newer-version files are errors; a truncated trace is read up
/// to the damage with a warning on stderr (also kept in `Profile::messages`).
///
/// `path` may name a run of a store instead (`run:ID`, `run:latest`; see `clrprof runs`).
pub fn load(path: &Path, read: &ReadOptions) -> Result<Profile> {
    let (source, label, _) = crate::collect::trace_source(path, read.store.as_deref())?;
    let (loader, diagnostics) = Loader::read(source, &read.import).map_err(|e| {
        let what = match &e {
            LoadError::Open(_) => format!("cannot open trace {label}"),
            LoadError::Decode { records, .. } if *records > 0 => {
                format!("cannot read {label} (after {records} records)")
            }
            _ => format!("cannot read {label}"),
        };
        anyhow::Error::new(e).context(what)
    })?;
    if let Some(t) = diagnostics.truncation {
        eprintln!("clrprof: warning: {label}: {t}");
    }
    if loader.format() != Format::Trace && !read.range.is_all() {
        anyhow::bail!(
            "{} is {}: it has no timestamps, so --from/--to cannot select a window",
            path.display(),
            loader.format().name()
        );
    }
    let symbols = clrprof_symbols::Symbolizer::new(read.native_symbols, read.debug_dirs.clone());
    Ok(loader.into_profile(read.range, &mut *symbols.resolver()))
}
