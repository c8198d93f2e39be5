//! Analysis of clrprof traces. A [`ProfileBuilder`] folds the record stream into one canonical
//! [`Profile`]; every report, export and view is derived from it. No unsafe, no I/O.
#![forbid(unsafe_code)]

pub mod codemap;
pub mod events;
pub mod instrumented;
pub mod samples;
pub mod stacks;
mod tables;
pub mod time;
pub mod views;

pub use instrumented::{FlowEvent, FlowThread, Instrumentation};
pub use samples::{NativeSymbols, NoSymbols, Sampling};
pub use stacks::{Cost, CostTree, Frame, FrameId, FrameKey, FrameKind, Metric, StackId, StackTable};
pub use tables::*;
pub use time::{parse_time, TimeRange};
