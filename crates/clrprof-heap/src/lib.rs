//! Heap snapshots: a [`SnapshotBuilder`] takes one snapshot's objects, references, roots and type names
//! (as the capture's heap-dump events give them) and builds the compact [`Snapshot`] graph; an
//! [`Analysis`] computes its dominator tree and retained sizes; the [`views`] (types, dominators, paths
//! to roots, diff of two snapshots) are derived from those and rendered as text or JSON by [`render`].
//! No unsafe, no I/O: the loader (`clrprof-load`) feeds the builder from a trace.
#![forbid(unsafe_code)]

mod analysis;
mod builder;
mod fxhash;
mod graph;

pub use analysis::{Analysis, UNREACHED, VIRTUAL_ROOT};
pub use builder::{BuildStats, RootKind, SnapshotBuilder, SnapshotInfo};
pub use graph::{ObjId, Root, Snapshot, NO_FIELD};
pub mod render;
pub mod views;

#[cfg(test)]
mod tests;
