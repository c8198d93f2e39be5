//! Loading: everything that turns what a reader is given into a [`Profile`] — a clrprof trace (a
//! file, bytes in memory, a file still being written), or a profile written by another tool
//! (folded stacks, Visual Studio's vsperfreport CSV). Every reader (`report`, `export`, `diff`,
//! the viewer, the Pyroscope pusher) loads through here; computing views over a profile is
//! `clrprof-query`'s, which knows nothing of files.
//!
//! - [`source`]: [`Loader`], a source read into a profile builder, incrementally or in one go;
//! - [`import`]: the readers of other tools' formats, and [`import::sniff`], which tells them apart.
#![forbid(unsafe_code)]

pub mod import;
pub mod source;

pub use clrprof_model::Profile;
pub use source::{Diagnostics, LoadError, Loader};
