//! What a reader names as its input — a trace file, an imported file, or a run of a store — as a
//! source to load, and the one-shot load of it into a profile (`report`, `export`, `diff`).
//! Nothing is printed: warnings come back for the caller to show.

use std::path::{Path, PathBuf};

use clrprof_model::{Profile, TimeRange};
use clrprof_symbols::Symbolizer;
use clrprof_trace::{TraceSource, Truncation};

use crate::import::{Format, ImportOptions};
use crate::store::RunError;
use crate::{LoadError, Loader};

/// Why a reader's input cannot be loaded. Messages are complete sentences for the user; the
/// cause, if any, is the error's source.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(transparent)]
    Run(#[from] RunError),
    /// What could not be read (naming the input), and why.
    #[error("{what}")]
    Read {
        what: String,
        #[source]
        error: LoadError,
    },
    #[error("{path} is {format}: it has no timestamps, so --from/--to cannot select a window")]
    NoTimestamps { path: String, format: &'static str },
}

/// A reader's input, resolved.
pub struct Input {
    pub source: TraceSource,
    /// How messages name it: the path as given, or `run:ID`.
    pub label: String,
    /// Its size in bytes (0 when unknown).
    pub size: u64,
    /// To show before reading (a run still streaming, or cut off).
    pub warnings: Vec<String>,
}

impl Input {
    /// `path` — a trace file (or an imported file), or `run:ID`/`run:latest` of `store` — as a
    /// source. An unknown run or store is an error here; a missing file is one when it is read.
    pub fn resolve(path: &Path, store: Option<&str>) -> Result<Input, RunError> {
        Ok(match crate::store::run_spec(path) {
            Some(spec) => {
                let (source, run, warnings) = crate::store::run_source(spec, store)?;
                let size = match &source {
                    TraceSource::Bytes(b) => b.len() as u64,
                    _ => run.bytes,
                };
                Input { source, label: format!("run:{}", run.id), size, warnings }
            }
            None => Input {
                source: TraceSource::File(path.to_path_buf()),
                label: path.display().to_string(),
                size: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
                warnings: Vec::new(),
            },
        })
    }
}

/// A load error as the user reads it: what could not be read (`label` names the input), then why.
pub fn describe(label: &str, error: LoadError) -> InputError {
    let what = match &error {
        LoadError::Decode { records, .. } if *records > 0 => format!("cannot read {label} (after {records} records)"),
        LoadError::Open(_) => format!("cannot open trace {label}"),
        _ => format!("cannot read {label}"),
    };
    InputError::Read { what, error }
}

/// How to read a trace.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// The window of the run to profile.
    pub range: TimeRange,
    /// Name native frames from the ELF files on this machine (else `module!<unknown>`).
    pub native_symbols: bool,
    /// Directories searched for separate debug files by build-id (besides /usr/lib/debug), and
    /// for PDBs (`DIR/X.pdb`) when `lines` is set.
    pub debug_dirs: Vec<PathBuf>,
    /// Resolve managed frames to source lines from the modules' PDBs (frames per function, file
    /// and line; see `clrprof_model::lines`).
    pub lines: bool,
    /// Resolve the call sites of instrumented calls to source lines (the callers view), even
    /// without `lines`.
    pub call_site_lines: bool,
    /// Imported files: the CPU time one sample stands for.
    pub import: ImportOptions,
    /// The run store `run:ID` is read from (`None`: the default store).
    pub store: Option<String>,
    /// Keep threads' stacks as sampled in a trace with async data (no logical async stacks).
    pub physical_stacks: bool,
    /// Keep idle threads' wall time (`[idle]`) in a trace with async data (left out otherwise).
    pub show_idle: bool,
    /// Only views that merge threads will read the profile: instrumented call-tree costs are
    /// summed over threads as they are read (one cost per stack, not per thread and stack).
    pub merge_threads: bool,
}

/// Loads an input whole — a trace, or an imported file: folded stacks, a vsperfreport CSV summary
/// — for the time range of `read`. Corrupt, foreign, empty or newer-version files are errors; a
/// truncated trace is read up to the damage, and the truncation comes back with the profile (it is
/// in `Profile::messages` too) for the caller to warn of. `path` is the input as given.
pub fn read(path: &Path, input: Input, read: &ReadOptions) -> Result<(Profile, Option<Truncation>), InputError> {
    let label = input.label;
    let mut loader = Loader::open_with(input.source, &read.import).map_err(|e| describe(&label, e))?;
    // One profile of `read.range` is asked for: call-tree costs are summed as they are read.
    loader.fold_call_trees(read.range, read.lines || read.call_site_lines, read.merge_threads);
    let diagnostics = loader.read_to_end().map_err(|e| describe(&label, e))?;
    loader.set_physical_stacks(read.physical_stacks);
    loader.set_hide_idle(!read.show_idle);
    if loader.format() != Format::Trace && !read.range.is_all() {
        return Err(InputError::NoTimestamps { path: path.display().to_string(), format: loader.format().name() });
    }
    let symbols = Symbolizer::new(read.native_symbols, read.debug_dirs.clone())
        .with_lines(read.lines, read.debug_dirs.clone())
        .with_call_site_lines(read.call_site_lines, read.debug_dirs.clone());
    Ok((loader.into_profile(read.range, &mut *symbols.resolver()), diagnostics.truncation))
}
