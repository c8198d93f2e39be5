//! Profiles from trace sources — a file, bytes in memory, or a file still being written — built
//! incrementally: [`Loader::update`] adds what has arrived, and [`Loader::profile`] can be asked
//! between updates, answering exactly as a one-shot load of the same records would. Nothing is
//! printed: problems come back as errors or [`Diagnostics`].
//!
//! A source need not be a clrprof trace: [`Loader::open`] sniffs the content and reads folded
//! stacks and vsperfreport CSV summaries through [`crate::import`] into the same [`Profile`].
//! Imported files have no timestamps: their profile is the same for every time range.

use std::io::Read;

use clrprof_model::{NativeSymbols, Profile, ProfileBuilder, TimeRange};
use clrprof_trace::{DecodeError, TraceReader, TraceSource, Truncation};

use crate::import::{self, Format, ImportError, ImportOptions};

/// Why a trace cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// (Its message is the I/O error's; `source()` is not set, so an error chain prints it once.)
    #[error("{0}")]
    Open(std::io::Error),
    /// The trace is damaged (or not a trace); `records` were read before.
    #[error("{error}")]
    Decode { error: DecodeError, records: u64 },
    #[error("the trace holds no records: the profiled process ended before the agent wrote anything")]
    NoRecords,
    /// Not a trace, and not a format that can be imported (the message names what was seen), or
    /// an imported file that cannot be read.
    #[error("{0}")]
    Import(ImportError),
}

impl From<ImportError> for LoadError {
    fn from(e: ImportError) -> Self {
        LoadError::Import(e)
    }
}

/// What a complete read found besides the records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnostics {
    /// The trace ends inside a block (a crash or kill while writing): read up to there.
    pub truncation: Option<Truncation>,
    pub records: u64,
}

/// A trace source and the profile built from what it delivered so far.
pub struct Loader {
    reader: TraceReader,
    builder: ProfileBuilder,
    /// Set for an imported file: its whole profile.
    imported: Option<(Format, Profile)>,
}

/// Bytes read to tell a format.
const SNIFF_LEN: usize = 64 * 1024;

fn read_head(path: &std::path::Path) -> Result<Vec<u8>, LoadError> {
    let f = std::fs::File::open(path).map_err(LoadError::Open)?;
    let mut head = Vec::new();
    f.take(SNIFF_LEN as u64).read_to_end(&mut head).map_err(LoadError::Open)?;
    Ok(head)
}

impl Loader {
    /// Opens a source with the default import options (see [`Loader::open_with`]).
    pub fn open(source: TraceSource) -> Result<Loader, LoadError> {
        Loader::open_with(source, &ImportOptions::default())
    }

    /// Opens a source: a clrprof trace is decoded as it arrives; folded stacks and vsperfreport
    /// CSV are read whole now (a growing file is read as it is now). Anything else is an error
    /// naming what was seen. An empty file or a trace still being written counts as a trace.
    pub fn open_with(source: TraceSource, opts: &ImportOptions) -> Result<Loader, LoadError> {
        let head = match &source {
            TraceSource::File(p) | TraceSource::Growing(p) => read_head(p)?,
            TraceSource::Bytes(b) => b[..b.len().min(SNIFF_LEN)].to_vec(),
        };
        let format = if head.is_empty() { Format::Trace } else { import::sniff(&head)? };
        let imported = match format {
            Format::Trace => None,
            f => {
                let bytes = match &source {
                    TraceSource::File(p) | TraceSource::Growing(p) => std::fs::read(p).map_err(LoadError::Open)?,
                    TraceSource::Bytes(b) => b.clone(),
                };
                Some((f, import::import(&bytes, f, opts)?))
            }
        };
        let reader = match imported {
            Some(_) => TraceReader::open(TraceSource::Bytes(Vec::new())).map_err(LoadError::Open)?,
            None => TraceReader::open(source).map_err(LoadError::Open)?,
        };
        Ok(Loader { reader, builder: ProfileBuilder::new(), imported })
    }

    /// For a reader that wants one profile, of `range` ([`Loader::into_profile`]): call-tree
    /// costs are summed as they are read, not kept per delta (`ProfileBuilder::fold_call_trees`).
    /// With `merge_threads`, one table for every thread's call-tree costs (for views that merge
    /// threads). Call before reading.
    pub fn fold_call_trees(&mut self, range: TimeRange, call_sites: bool, merge_threads: bool) {
        self.builder.fold_call_trees(range, call_sites, merge_threads);
    }

    /// What the source holds.
    pub fn format(&self) -> Format {
        self.imported.as_ref().map_or(Format::Trace, |(f, _)| *f)
    }

    /// Adds every record the source has now; returns how many were added (0: nothing new).
    pub fn update(&mut self) -> Result<u64, LoadError> {
        self.update_with(&mut |_| {})
    }

    /// [`Loader::update`], calling `progress` with the records read so far after each batch (a
    /// command shows progress while a big trace loads).
    pub fn update_with(&mut self, progress: &mut dyn FnMut(u64)) -> Result<u64, LoadError> {
        if self.imported.is_some() {
            return Ok(0);
        }
        let before = self.builder.records();
        loop {
            // Each record goes into the builder as it is decoded (no list of records in between).
            let builder = &mut self.builder;
            let n = self
                .reader
                .poll_each(|r| builder.add(&r))
                .map_err(|error| LoadError::Decode { error, records: self.builder.records() })?;
            progress(self.builder.records());
            if n == 0 {
                return Ok(self.builder.records() - before);
            }
        }
    }

    /// Reads a finished source to its end. A truncated trace is read up to the damage, and the
    /// truncation is kept with the profile's messages too.
    pub fn read_to_end(&mut self) -> Result<Diagnostics, LoadError> {
        if self.imported.is_some() {
            return Ok(Diagnostics::default());
        }
        self.update()?;
        let records = self.builder.records();
        let truncation = self.reader.finish().map_err(|error| LoadError::Decode { error, records })?;
        if records == 0 {
            return Err(LoadError::NoRecords);
        }
        if let Some(t) = &truncation {
            self.builder.warn(t.to_string());
        }
        Ok(Diagnostics { truncation, records })
    }

    /// One-shot: the whole of a clrprof trace read into a builder (an imported file is an
    /// error here: use [`Loader::read`]).
    pub fn load(source: TraceSource) -> Result<(ProfileBuilder, Diagnostics), LoadError> {
        let mut l = Loader::open(source)?;
        if let Some((f, _)) = &l.imported {
            return Err(ImportError(format!("a {} file has no trace records", f.name())).into());
        }
        let d = l.read_to_end()?;
        Ok((l.builder, d))
    }

    /// One-shot: the whole source — a trace or an imported file — read.
    pub fn read(source: TraceSource, opts: &ImportOptions) -> Result<(Loader, Diagnostics), LoadError> {
        let mut l = Loader::open_with(source, opts)?;
        let d = l.read_to_end()?;
        Ok((l, d))
    }

    /// Keeps threads' stacks as sampled in a trace with async data (see
    /// `ProfileBuilder::set_physical_stacks`).
    pub fn set_physical_stacks(&mut self, physical: bool) {
        self.builder.set_physical_stacks(physical);
    }

    /// Leaves idle threads' wall time out (see `ProfileBuilder::set_hide_idle`).
    pub fn set_hide_idle(&mut self, hide: bool) {
        self.builder.set_hide_idle(hide);
    }

    /// The record builder of a trace (`None` for an imported file).
    pub fn builder(&self) -> Option<&ProfileBuilder> {
        self.imported.is_none().then_some(&self.builder)
    }

    /// The profile of what arrived so far, for a time range (an imported file has no times: its
    /// whole profile, whatever the range).
    pub fn profile(&self, range: TimeRange, symbols: &mut dyn NativeSymbols) -> Profile {
        match &self.imported {
            Some((_, p)) => p.clone(),
            None => self.builder.profile(range, symbols),
        }
    }

    /// [`profile`](Self::profile) without the sample records in `samples` when they can be read with
    /// [`each_sample`](Self::each_sample) (`ProfileBuilder::profile_untimed`); an imported file's
    /// profile whole.
    pub fn profile_untimed(&self, range: TimeRange, symbols: &mut dyn NativeSymbols) -> Profile {
        match &self.imported {
            Some((_, p)) => p.clone(),
            None => self.builder.profile_untimed(range, symbols),
        }
    }

    /// Calls `f` with each sample record read inside `range` (`ProfileBuilder::each_sample`) and
    /// returns true; false for an imported file (its profile's `samples` hold them).
    /// With `same_group`, records of one thread and weight may come summed.
    pub fn each_sample(
        &self,
        range: TimeRange,
        same_group: Option<clrprof_model::samples::SameGroup<'_>>,
        f: impl FnMut(clrprof_model::samples::SampleTime),
    ) -> bool {
        match &self.imported {
            Some(_) => false,
            None => {
                self.builder.each_sample(range, same_group, f);
                true
            }
        }
    }

    /// Prepares many profiles of ranges of time (`ProfileBuilder::prepare_ranges`); nothing for an
    /// imported file.
    pub fn prepare_ranges(&self) {
        if self.imported.is_none() {
            self.builder.prepare_ranges();
        }
    }

    /// Makes the time index of the sample records (`ProfileBuilder::prepare_index`); nothing for an
    /// imported file.
    pub fn prepare_index(&self) {
        if self.imported.is_none() {
            self.builder.prepare_index();
        }
    }

    /// [`profile`](Self::profile), consuming the loader: the profile reuses the memory of the
    /// records read instead of copying them (for one-shot readers such as `report`).
    pub fn into_profile(self, range: TimeRange, symbols: &mut dyn NativeSymbols) -> Profile {
        match self.imported {
            Some((_, p)) => p,
            None => self.builder.into_profile(range, symbols),
        }
    }
}
