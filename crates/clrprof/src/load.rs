//! Reads a trace file into the canonical profile, reporting truncation as a warning.

use std::path::Path;

use anyhow::Result;
use clrprof_model::{NoSymbols, Profile, TimeRange};
use clrprof_query::import::{Format, ImportOptions};
use clrprof_query::source::{LoadError, Loader};
use clrprof_trace::TraceSource;

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
}

/// Loads a trace — or an imported file: folded stacks, a vsperfreport CSV summary — for a time
/// range. Corrupt, foreign, empty or newer-version files are errors; a truncated trace is read up
/// to the damage with a warning on stderr (also kept in `Profile::messages`).
pub fn load(path: &Path, read: &ReadOptions) -> Result<Profile> {
    let (loader, diagnostics) = Loader::read(TraceSource::File(path.to_path_buf()), &read.import).map_err(|e| {
        let what = match &e {
            LoadError::Open(_) => format!("cannot open trace {}", path.display()),
            LoadError::Decode { records, .. } if *records > 0 => {
                format!("cannot read {} (after {records} records)", path.display())
            }
            _ => format!("cannot read {}", path.display()),
        };
        anyhow::Error::new(e).context(what)
    })?;
    if let Some(t) = diagnostics.truncation {
        eprintln!("clrprof: warning: {}: {t}", path.display());
    }
    if loader.format() != Format::Trace && !read.range.is_all() {
        anyhow::bail!(
            "{} is {}: it has no timestamps, so --from/--to cannot select a window",
            path.display(),
            loader.format().name()
        );
    }
    Ok(if read.native_symbols {
        loader.profile(read.range, &mut clrprof_symbols::ElfSymbols::with_debug_dirs(read.debug_dirs.clone()))
    } else {
        loader.profile(read.range, &mut NoSymbols)
    })
}
