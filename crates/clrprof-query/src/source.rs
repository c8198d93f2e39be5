//! Profiles from trace sources — a file, bytes in memory, or a file still being written — built
//! incrementally: [`Loader::update`] adds what has arrived, and [`Loader::profile`] can be asked
//! between updates, answering exactly as a one-shot load of the same records would. Nothing is
//! printed: problems come back as errors or [`Diagnostics`].

use clrprof_model::{NativeSymbols, Profile, ProfileBuilder, TimeRange};
use clrprof_trace::{DecodeError, Record, TraceReader, TraceSource, Truncation};

/// Why a trace cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Open(#[source] std::io::Error),
    /// The trace is damaged (or not a trace); `records` were read before.
    #[error("{source}")]
    Decode {
        #[source]
        source: DecodeError,
        records: u64,
    },
    #[error("the trace holds no records: the profiled process ended before the agent wrote anything")]
    NoRecords,
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
    batch: Vec<Record>,
}

impl Loader {
    pub fn open(source: TraceSource) -> Result<Loader, LoadError> {
        Ok(Loader {
            reader: TraceReader::open(source).map_err(LoadError::Open)?,
            builder: ProfileBuilder::new(),
            batch: Vec::new(),
        })
    }

    /// Adds every record the source has now; returns how many were added (0: nothing new).
    pub fn update(&mut self) -> Result<u64, LoadError> {
        self.update_with(&mut |_| {})
    }

    /// [`Loader::update`], calling `progress` with the records read so far after each batch (a
    /// command shows progress while a big trace loads).
    pub fn update_with(&mut self, progress: &mut dyn FnMut(u64)) -> Result<u64, LoadError> {
        let before = self.builder.records();
        loop {
            let n = self
                .reader
                .poll(&mut self.batch)
                .map_err(|source| LoadError::Decode { source, records: self.builder.records() })?;
            for r in self.batch.drain(..) {
                self.builder.add(&r);
            }
            progress(self.builder.records());
            if n == 0 {
                return Ok(self.builder.records() - before);
            }
        }
    }

    /// Reads a finished source to its end. A truncated trace is read up to the damage, and the
    /// truncation is kept with the profile's messages too.
    pub fn read_to_end(&mut self) -> Result<Diagnostics, LoadError> {
        self.update()?;
        let records = self.builder.records();
        let truncation = self.reader.finish().map_err(|source| LoadError::Decode { source, records })?;
        if records == 0 {
            return Err(LoadError::NoRecords);
        }
        if let Some(t) = &truncation {
            self.builder.warn(t.to_string());
        }
        Ok(Diagnostics { truncation, records })
    }

    /// One-shot: the whole source read into a builder.
    pub fn load(source: TraceSource) -> Result<(ProfileBuilder, Diagnostics), LoadError> {
        let mut l = Loader::open(source)?;
        let d = l.read_to_end()?;
        Ok((l.builder, d))
    }

    pub fn builder(&self) -> &ProfileBuilder {
        &self.builder
    }

    /// The builder, for a source read to its end.
    pub fn into_builder(self) -> ProfileBuilder {
        self.builder
    }

    /// The profile of what arrived so far, for a time range.
    pub fn profile(&self, range: TimeRange, symbols: &mut dyn NativeSymbols) -> Profile {
        self.builder.profile(range, symbols)
    }
}
