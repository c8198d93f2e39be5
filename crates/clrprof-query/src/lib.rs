//! The query layer: everything a report, an export or the viewer asks of a [`Profile`] — the weight
//! (metric), the threads, the time range, top/depth/min-percent, sorting, totals, display names and
//! function lookup — answered once, here, as typed outputs that serialize with serde. Renderers
//! (text, CSV, JSON, exporters, the viewer's API) only format what these functions return.
//!
//! Every stack figure (function totals, call trees, callers/callees, entry points, hit tables) is
//! computed by one engine, [`engine`]; [`costs`] shapes it for the report, [`explore`] for the
//! viewer, [`diff`] for two profiles, [`document`] for the JSON report.
#![forbid(unsafe_code)]

pub mod callsites;
pub mod costs;
pub mod diff;
pub mod document;
pub mod engine;
pub mod events;
pub mod explore;
pub mod gate;
pub mod lines;
pub mod noise;
pub mod request_cpu;
pub mod requests;
pub mod select;
pub mod timeline;
pub mod weighted_stacks;

pub use clrprof_model::{Metric, Profile, TimeRange};
pub use select::Threads;

/// Sums of figures that saturate instead of overflowing. The model bounds every ingested value
/// (`clrprof_model::sanity`), so a plausible trace's sums stay far from `u64::MAX`; a view's sum of
/// many bounded values is saturated anyway rather than trusted to fit.
pub(crate) trait SaturatingSum {
    fn saturating_sum(self) -> u64;
}

impl<I: Iterator<Item = u64>> SaturatingSum for I {
    fn saturating_sum(self) -> u64 {
        self.fold(0, u64::saturating_add)
    }
}

/// Why a query cannot be answered. Messages are complete sentences for the user.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QueryError {
    #[error("no thread with data matches '{spec}'; threads: {known}")]
    NoSuchThread { spec: String, known: String },
    #[error("no function named '{0}' has data in this profile")]
    NoSuchFunction(String),
    #[error("'{wanted}' matches {count} functions; be more specific: {shown}")]
    AmbiguousFunction { wanted: String, count: usize, shown: String },
    #[error("{0}")]
    NoData(String),
    #[error("{0}")]
    Unsupported(String),
}

pub type Result<T, E = QueryError> = std::result::Result<T, E>;
