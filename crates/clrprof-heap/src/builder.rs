//! The snapshot builder: takes the heap-dump events' objects, references, roots and type names in
//! whatever order the capture delivers them (addresses and runtime type ids, as the events give them) and
//! turns them into the compact [`Snapshot`] graph, where objects are numbered and addresses are gone.
//!
//! Nothing given to the builder is dropped silently: a reference or root to an object the snapshot does
//! not hold, a second object at the same address, or an object whose type id never got a name is counted
//! in [`BuildStats`], which every view prints beside its figures.

use crate::fxhash::FxHashMap;
use crate::graph::{Root, Snapshot, NO_FIELD};

/// What holds a root. Stable numeric codes ([`RootKind::code`]) so a trace can store the kind in a byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RootKind {
    /// A local variable or argument on a thread's stack (the name is the method, when known).
    Stack,
    /// A static field (the name is `Namespace.Class.Field`).
    StaticField,
    /// A strong GC handle.
    StrongHandle,
    /// A pinned GC handle (or an async-pinned one).
    PinnedHandle,
    /// A weak GC handle: recorded, but it does not keep its object alive, so retention ignores it.
    WeakHandle,
    /// A ref-counted handle (COM interop).
    RefCountedHandle,
    /// A dependent handle's primary (the secondary is best given as an edge from the primary).
    DependentHandle,
    /// An object waiting for its finalizer.
    FinalizerQueue,
    /// A ConditionalWeakTable value kept alive by its key.
    ConditionalWeakTable,
    /// Any other kind the runtime reports.
    Other,
}

impl RootKind {
    /// Every kind, in code order.
    pub const ALL: [RootKind; 10] = [
        RootKind::Stack,
        RootKind::StaticField,
        RootKind::StrongHandle,
        RootKind::PinnedHandle,
        RootKind::WeakHandle,
        RootKind::RefCountedHandle,
        RootKind::DependentHandle,
        RootKind::FinalizerQueue,
        RootKind::ConditionalWeakTable,
        RootKind::Other,
    ];

    /// The stable code of this kind (its position in [`RootKind::ALL`]).
    pub fn code(self) -> u8 {
        RootKind::ALL.iter().position(|k| *k == self).unwrap_or(9) as u8
    }

    /// The kind of a code; unknown codes (from a newer trace) are [`RootKind::Other`].
    pub fn from_code(code: u8) -> RootKind {
        RootKind::ALL.get(code as usize).copied().unwrap_or(RootKind::Other)
    }

    /// The name reports and JSON use (`"static"`, `"stack"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            RootKind::Stack => "stack",
            RootKind::StaticField => "static",
            RootKind::StrongHandle => "handle",
            RootKind::PinnedHandle => "pinned-handle",
            RootKind::WeakHandle => "weak-handle",
            RootKind::RefCountedHandle => "refcounted-handle",
            RootKind::DependentHandle => "dependent-handle",
            RootKind::FinalizerQueue => "finalizer-queue",
            RootKind::ConditionalWeakTable => "conditional-weak-table",
            RootKind::Other => "other",
        }
    }

    /// Whether a root of this kind keeps its object alive (all but weak handles).
    pub fn retains(self) -> bool {
        self != RootKind::WeakHandle
    }
}

/// What the capture knows about the snapshot as a whole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// When the snapshot's GC started, in the trace's clock (nanoseconds).
    pub ts_ns: u64,
    /// The runtime's index of the GC that walked the heap.
    pub gc_index: u64,
    /// Why it was taken (`"clrprof heap"`, `"at 5s"`, `"on exit"` …), free text.
    pub reason: String,
    /// False when any part of the graph is known to be missing (dropped events, a cut trace …).
    pub complete: bool,
    /// Heap-dump events the capture knows it lost (sequence gaps, full buffers).
    pub dropped_events: u64,
    /// How long the process was paused for the snapshot, when measured.
    pub pause_ns: Option<u64>,
}

/// What the builder could not place, counted (never dropped silently).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuildStats {
    /// References whose source or target is no object of the snapshot (not kept in the graph).
    pub dangling_edges: u64,
    /// Roots pointing at no object of the snapshot (not kept).
    pub dangling_roots: u64,
    /// Objects given twice at one address (the first is kept).
    pub duplicate_objects: u64,
    /// Objects whose type id never got a name (shown as `[type 0x…]`).
    pub unnamed_types: u64,
    /// References given with a null target (ignored: null is no reference).
    pub null_edges: u64,
}

impl BuildStats {
    /// Whether anything given to the builder could not be placed.
    pub fn is_clean(&self) -> bool {
        self.dangling_edges == 0 && self.dangling_roots == 0 && self.duplicate_objects == 0 && self.unnamed_types == 0
    }
}

/// Collects one snapshot's events; [`SnapshotBuilder::finish`] builds the graph.
///
/// Calls may come in any order: an edge before its objects, a type name after its objects. Memory while
/// building is about 24 bytes per object and 16 per reference (addresses are kept until `finish`).
#[derive(Default)]
pub struct SnapshotBuilder {
    /// (address, type id, size), in arrival order.
    objects: Vec<(u64, u64, u64)>,
    /// (from address, to address), in arrival order.
    edges: Vec<(u64, u64)>,
    /// Field name index per edge (filled only once a first field name arrives).
    edge_fields: Vec<u32>,
    fields: Vec<String>,
    field_index: FxHashMap<String, u32>,
    /// (address, kind, root name index).
    roots: Vec<(u64, RootKind, u32)>,
    root_names: Vec<String>,
    root_name_index: FxHashMap<String, u32>,
    type_names: FxHashMap<u64, String>,
    null_edges: u64,
}

impl SnapshotBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        let mut b = SnapshotBuilder::default();
        b.intern_root_name("");
        b
    }

    /// Names a runtime type id (the last name given wins).
    pub fn type_name(&mut self, type_id: u64, name: &str) {
        self.type_names.insert(type_id, name.to_string());
    }

    /// One live object: its address, its type id and its size in bytes.
    pub fn object(&mut self, addr: u64, type_id: u64, size: u64) {
        self.objects.push((addr, type_id, size));
    }

    /// A reference from the object at `from` to the one at `to`, through the instance field `field` when
    /// its name is known. A null `to` is no reference (counted in [`BuildStats::null_edges`]).
    pub fn edge(&mut self, from: u64, to: u64, field: Option<&str>) {
        if to == 0 {
            self.null_edges += 1;
            return;
        }
        match field {
            Some(name) => {
                if self.edge_fields.len() < self.edges.len() {
                    self.edge_fields.resize(self.edges.len(), NO_FIELD);
                }
                let id = match self.field_index.get(name) {
                    Some(id) => *id,
                    None => {
                        let id = self.fields.len() as u32;
                        self.fields.push(name.to_string());
                        self.field_index.insert(name.to_string(), id);
                        id
                    }
                };
                self.edge_fields.push(id);
            }
            None => {
                if !self.edge_fields.is_empty() {
                    self.edge_fields.push(NO_FIELD);
                }
            }
        }
        self.edges.push((from, to));
    }

    /// A root holding the object at `to`: its kind and its name (`Ns.Class.Field` for a static, the
    /// method for a stack root, `""` when there is none).
    pub fn root(&mut self, to: u64, kind: RootKind, name: &str) {
        let name = self.intern_root_name(name);
        self.roots.push((to, kind, name));
    }

    /// Objects given so far.
    pub fn object_count(&self) -> usize {
        self.objects.len()
    }

    fn intern_root_name(&mut self, name: &str) -> u32 {
        if let Some(id) = self.root_name_index.get(name) {
            return *id;
        }
        let id = self.root_names.len() as u32;
        self.root_names.push(name.to_string());
        self.root_name_index.insert(name.to_string(), id);
        id
    }

    /// Builds the compact graph: objects numbered in address order, references in CSR form, roots
    /// resolved to object numbers. References and roots to objects the snapshot lacks are counted, not kept.
    pub fn finish(self, info: SnapshotInfo) -> Snapshot {
        let SnapshotBuilder {
            mut objects,
            edges,
            mut edge_fields,
            fields,
            roots,
            root_names,
            type_names,
            null_edges,
            ..
        } = self;
        let mut stats = BuildStats { null_edges, ..BuildStats::default() };

        // Objects in address order, one per address.
        objects.sort_by_key(|o| o.0);
        let before = objects.len();
        objects.dedup_by_key(|o| o.0);
        stats.duplicate_objects = (before - objects.len()) as u64;
        let n = objects.len();
        let addrs: Vec<u64> = objects.iter().map(|o| o.0).collect();
        let index = AddressIndex::new(&addrs);

        // Types: named in order of first use, so the same events give the same numbering.
        let mut types: Vec<String> = Vec::new();
        // Type id → (type number, named).
        let mut type_ids: FxHashMap<u64, (u32, bool)> = FxHashMap::default();
        let mut obj_type = Vec::with_capacity(n);
        let mut sizes = Vec::with_capacity(n);
        let mut big_sizes = Vec::new();
        for (i, &(_, type_id, size)) in objects.iter().enumerate() {
            let (t, named) = *type_ids.entry(type_id).or_insert_with(|| {
                let (name, named) = match type_names.get(&type_id) {
                    Some(name) => (name.clone(), true),
                    None => (format!("[type 0x{type_id:x}]"), false),
                };
                types.push(name);
                ((types.len() - 1) as u32, named)
            });
            if !named {
                stats.unnamed_types += 1;
            }
            obj_type.push(t);
            if size >= u32::MAX as u64 {
                sizes.push(u32::MAX);
                big_sizes.push((i as u32, size));
            } else {
                sizes.push(size as u32);
            }
        }
        drop(objects);

        // References: resolve both ends, then counting sort by source into CSR.
        if !edge_fields.is_empty() {
            edge_fields.resize(edges.len(), NO_FIELD);
        }
        let mut resolved: Vec<(u32, u32)> = Vec::with_capacity(edges.len());
        let mut kept_fields: Vec<u32> = Vec::new();
        let mut last_from = (u64::MAX, None);
        for (e, &(from, to)) in edges.iter().enumerate() {
            let f = if from == last_from.0 {
                last_from.1
            } else {
                let f = index.find(from);
                last_from = (from, f);
                f
            };
            match (f, index.find(to)) {
                (Some(f), Some(t)) => {
                    resolved.push((f, t));
                    if !edge_fields.is_empty() {
                        kept_fields.push(edge_fields[e]);
                    }
                }
                _ => stats.dangling_edges += 1,
            }
        }
        drop(edges);
        drop(edge_fields);
        let mut edge_start = vec![0u32; n + 1];
        for &(f, _) in &resolved {
            edge_start[f as usize + 1] += 1;
        }
        for i in 0..n {
            edge_start[i + 1] += edge_start[i];
        }
        let mut fill = edge_start.clone();
        let mut edge_to = vec![0u32; resolved.len()];
        let mut edge_field = if kept_fields.is_empty() { Vec::new() } else { vec![NO_FIELD; resolved.len()] };
        for (e, &(f, t)) in resolved.iter().enumerate() {
            let slot = fill[f as usize] as usize;
            fill[f as usize] += 1;
            edge_to[slot] = t;
            if !kept_fields.is_empty() {
                edge_field[slot] = kept_fields[e];
            }
        }
        drop(fill);
        drop(resolved);

        let mut kept_roots = Vec::with_capacity(roots.len());
        for (addr, kind, name) in roots {
            match index.find(addr) {
                Some(obj) => kept_roots.push(Root { obj, kind, name }),
                None => stats.dangling_roots += 1,
            }
        }

        Snapshot {
            info,
            stats,
            types,
            obj_type,
            sizes,
            big_sizes,
            edge_start,
            edge_to,
            edge_field,
            fields,
            roots: kept_roots,
            root_names,
        }
    }
}

/// Address → object number over the sorted addresses: a page table of 64 KiB pages narrows each
/// binary search to the objects of one page.
struct AddressIndex<'a> {
    addrs: &'a [u64],
    /// (page, first object index on that page), sorted by page.
    pages: FxHashMap<u64, (u32, u32)>,
}

const PAGE_SHIFT: u32 = 16;

impl<'a> AddressIndex<'a> {
    fn new(addrs: &'a [u64]) -> Self {
        let mut pages: FxHashMap<u64, (u32, u32)> = FxHashMap::default();
        let mut i = 0;
        while i < addrs.len() {
            let page = addrs[i] >> PAGE_SHIFT;
            let start = i;
            while i < addrs.len() && addrs[i] >> PAGE_SHIFT == page {
                i += 1;
            }
            pages.insert(page, (start as u32, i as u32));
        }
        AddressIndex { addrs, pages }
    }

    fn find(&self, addr: u64) -> Option<u32> {
        let &(start, end) = self.pages.get(&(addr >> PAGE_SHIFT))?;
        let slice = &self.addrs[start as usize..end as usize];
        slice.binary_search(&addr).ok().map(|i| start + i as u32)
    }
}
