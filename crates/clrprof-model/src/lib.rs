//! Analysis of clrprof traces. A [`ProfileBuilder`] folds the record stream into one canonical
//! [`Profile`] (for the whole run or a time window, again and again while records arrive); every report, export and view is derived from it. No unsafe, no I/O.
#![forbid(unsafe_code)]

pub mod asynchrony;
mod builder;
mod callsites;
pub mod codemap;
pub mod counts;
pub mod events;
#[cfg(test)]
mod events_tests;
pub mod fasthash;
mod flow;
mod grow;
pub mod hits;
pub mod instrumented;
pub mod lines;
pub mod metric;
mod process;
mod profile;
pub mod requests;
mod resolve;
pub mod runtime;
pub mod samples;
pub mod sanity;
mod segment_wall;
pub mod stacks;
#[cfg(test)]
mod test_rng;
pub mod time;
pub mod triggers;

pub use builder::ProfileBuilder;
pub use instrumented::{FlowEvent, FlowThread, Instrumentation};
pub use lines::{IlAt, SourceLine};
pub use metric::{Metric, MetricInfo, METRICS};
pub use process::*;
pub use profile::*;
pub use samples::{NativeSymbols, NoSymbols, Sampling};
pub use stacks::{Cost, CostTree, Frame, FrameId, FrameKey, FrameKind, StackId, StackTable};
pub use time::{parse_time, TimeRange};
