//! Analysis of clrprof traces. A [`ProfileBuilder`] folds the record stream into one canonical
//! [`Profile`]; every report, export and view is derived from it. No unsafe, no I/O.
#![forbid(unsafe_code)]

mod tables;

pub use tables::*;
