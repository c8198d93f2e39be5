//! The compact heap graph of one snapshot. Objects are numbered `0..n` in address order (addresses are
//! dropped once the graph is built); per object a type number (4 bytes), a size (4 bytes; sizes of 4 GiB
//! and more sit in a side table) and the start of its references (4 bytes), and per reference its target
//! (4 bytes) — about 18 bytes per object on a typical heap of 1.5 references per object. Field names per
//! reference are kept only when the capture gave any.

use crate::builder::{BuildStats, RootKind, SnapshotInfo};

/// The field index of a reference whose field name is unknown.
pub const NO_FIELD: u32 = u32::MAX;

/// An object number within one snapshot.
pub type ObjId = u32;

/// A root: the object it holds, its kind and its name (an index into the snapshot's root names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Root {
    /// The object the root holds.
    pub obj: ObjId,
    /// What holds it.
    pub kind: RootKind,
    /// Index of its name in [`Snapshot::root_name`].
    pub name: u32,
}

/// One heap snapshot: the compact object graph, its roots and type names. Built by
/// [`crate::SnapshotBuilder`]; analysed by [`crate::Analysis`].
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// What the capture knows about the snapshot.
    pub info: SnapshotInfo,
    /// What the builder could not place.
    pub stats: BuildStats,
    pub(crate) types: Vec<String>,
    pub(crate) obj_type: Vec<u32>,
    pub(crate) sizes: Vec<u32>,
    /// (object, size) of objects of 4 GiB or more, sorted by object.
    pub(crate) big_sizes: Vec<(u32, u64)>,
    pub(crate) edge_start: Vec<u32>,
    pub(crate) edge_to: Vec<u32>,
    /// Per reference, its field name index or [`NO_FIELD`]; empty when no field name is known at all.
    pub(crate) edge_field: Vec<u32>,
    pub(crate) fields: Vec<String>,
    pub(crate) roots: Vec<Root>,
    pub(crate) root_names: Vec<String>,
}

impl Snapshot {
    /// Number of objects.
    pub fn object_count(&self) -> usize {
        self.obj_type.len()
    }

    /// Number of references kept in the graph.
    pub fn edge_count(&self) -> usize {
        self.edge_to.len()
    }

    /// Number of distinct types.
    pub fn type_count(&self) -> usize {
        self.types.len()
    }

    /// The name of type number `t`.
    pub fn type_name(&self, t: u32) -> &str {
        &self.types[t as usize]
    }

    /// Type number of an object.
    pub fn type_of(&self, obj: ObjId) -> u32 {
        self.obj_type[obj as usize]
    }

    /// Shallow size of an object in bytes.
    pub fn size_of(&self, obj: ObjId) -> u64 {
        let s = self.sizes[obj as usize];
        if s == u32::MAX {
            if let Ok(i) = self.big_sizes.binary_search_by_key(&obj, |b| b.0) {
                return self.big_sizes[i].1;
            }
        }
        s as u64
    }

    /// Total shallow size of all objects.
    pub fn total_size(&self) -> u64 {
        let mut total: u64 = self.sizes.iter().map(|s| *s as u64).sum();
        for &(_, size) in &self.big_sizes {
            total = total - u32::MAX as u64 + size;
        }
        total
    }

    /// The objects an object references (targets, in the order given).
    pub fn refs(&self, obj: ObjId) -> &[ObjId] {
        let s = self.edge_start[obj as usize] as usize;
        let e = self.edge_start[obj as usize + 1] as usize;
        &self.edge_to[s..e]
    }

    /// The range of reference numbers of an object (for [`Snapshot::edge_field_name`]).
    pub fn ref_range(&self, obj: ObjId) -> std::ops::Range<usize> {
        self.edge_start[obj as usize] as usize..self.edge_start[obj as usize + 1] as usize
    }

    /// The target of reference number `e`.
    pub fn edge_target(&self, e: usize) -> ObjId {
        self.edge_to[e]
    }

    /// The field name of reference number `e`, when known.
    pub fn edge_field_name(&self, e: usize) -> Option<&str> {
        match self.edge_field.get(e) {
            Some(&f) if f != NO_FIELD => Some(&self.fields[f as usize]),
            _ => None,
        }
    }

    /// The roots (only those whose object is in the snapshot).
    pub fn roots(&self) -> &[Root] {
        &self.roots
    }

    /// The name of a root (`""` when it has none).
    pub fn root_name(&self, root: &Root) -> &str {
        &self.root_names[root.name as usize]
    }

    /// Bytes the graph itself occupies (its arrays, not the names), for the scale figures.
    pub fn graph_bytes(&self) -> usize {
        self.obj_type.capacity() * 4
            + self.sizes.capacity() * 4
            + self.big_sizes.capacity() * 16
            + self.edge_start.capacity() * 4
            + self.edge_to.capacity() * 4
            + self.edge_field.capacity() * 4
            + self.roots.capacity() * std::mem::size_of::<Root>()
    }
}
