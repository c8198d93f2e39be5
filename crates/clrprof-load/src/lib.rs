//! Loading: everything that turns what a reader is given into a [`Profile`] — a clrprof trace (a
//! file, bytes in memory, a file still being written), a run of a collector's store (`run:ID`), or
//! a profile written by another tool (folded stacks, Visual Studio's vsperfreport CSV). Every
//! reader (`report`, `export`, `diff`, the viewer, the Pyroscope pusher) loads through here;
//! computing views over a profile is `clrprof-query`'s, which knows nothing of files or stores.
//!
//! - [`input`]: an input as named on a command line resolved to a source ([`Input`]), and the
//!   one-shot [`read`] of it for a time range, native frames named or not;
//! - [`source`]: [`Loader`], a source read into a profile builder, incrementally or in one go;
//! - [`import`]: the readers of other tools' formats, and [`import::sniff`], which tells them apart;
//! - [`store`]: runs of a collector's store as sources;
//! - [`follow`]: a run of a store read as it grows;
//! - [`heap`]: the heap snapshots of a trace, as `clrprof-heap` graphs.
//!
//! Nothing here prints: warnings and errors come back to the caller.
#![forbid(unsafe_code)]

pub mod follow;
pub mod heap;
pub mod import;
pub mod input;
pub mod source;
pub mod store;

pub use clrprof_model::Profile;
pub use clrprof_symbols::{method_source, ppdb, LinePoint, MethodSource, Symbolizer};
pub use input::{describe, read, Input, InputError, ReadOptions};
pub use source::{Diagnostics, LoadError, Loader};
pub use store::RunError;
