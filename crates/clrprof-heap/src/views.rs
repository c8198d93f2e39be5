//! The heap views, as data (rendered by [`crate::render`]):
//! - [`types`]: per type its instance count, shallow size and the retained size of all its instances;
//! - [`dominator_tree`]: the dominator tree with retained sizes, siblings of one type merged into one node;
//! - [`paths`]: the shortest paths from roots to a type's instances, merged by the types and fields along
//!   them, each with its root and the number of instances it leads to;
//! - [`diff`]: per type the change in count and size between two snapshots.

use std::collections::BTreeMap;

use crate::analysis::{Analysis, UNREACHED, VIRTUAL_ROOT};
use crate::fxhash::FxHashMap;
use crate::graph::{ObjId, Snapshot, NO_FIELD};
use crate::RootKind;

/// How the types view is sorted (largest first; names ascending break ties).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypeSort {
    Retained,
    Size,
    Count,
    Name,
}

impl TypeSort {
    /// Parses `retained`, `size`, `count` or `name`.
    pub fn parse(s: &str) -> Result<TypeSort, String> {
        match s {
            "retained" => Ok(TypeSort::Retained),
            "size" => Ok(TypeSort::Size),
            "count" => Ok(TypeSort::Count),
            "name" => Ok(TypeSort::Name),
            _ => Err(format!("unknown sort '{s}' (expected retained, size, count or name)")),
        }
    }
}

/// One row of the types view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeRow {
    pub name: String,
    /// Live instances.
    pub count: u64,
    /// Their shallow bytes.
    pub size: u64,
    /// Bytes freed if all of them went: the retained sizes of the instances no other instance of the
    /// type dominates (each object counted once).
    pub retained: u64,
}

/// Per type count, shallow size and retained size, sorted.
pub fn types(a: &Analysis, sort: TypeSort) -> Vec<TypeRow> {
    let s = a.snapshot;
    let retained = a.type_retained();
    let mut rows: Vec<TypeRow> = (0..s.type_count())
        .map(|t| TypeRow { name: s.type_name(t as u32).to_string(), count: 0, size: 0, retained: retained[t] })
        .collect();
    for v in 0..s.object_count() as u32 {
        let r = &mut rows[s.type_of(v) as usize];
        r.count += 1;
        r.size += s.size_of(v);
    }
    sort_types(&mut rows, sort);
    rows
}

fn sort_types(rows: &mut [TypeRow], sort: TypeSort) {
    rows.sort_by(|a, b| {
        let key = |r: &TypeRow| match sort {
            TypeSort::Retained => (r.retained, r.size),
            TypeSort::Size => (r.size, r.retained),
            TypeSort::Count => (r.count, r.size),
            TypeSort::Name => (0, 0),
        };
        key(b).cmp(&key(a)).then_with(|| a.name.cmp(&b.name))
    });
}

/// The preferred root of each directly rooted object: the most telling kind first (a static field names
/// its class and field), then the first given.
pub(crate) fn preferred_roots(s: &Snapshot) -> FxHashMap<ObjId, usize> {
    let rank = |k: RootKind| match k {
        RootKind::StaticField => 0,
        RootKind::Stack => 1,
        RootKind::StrongHandle => 2,
        RootKind::PinnedHandle => 3,
        RootKind::FinalizerQueue => 4,
        RootKind::ConditionalWeakTable => 5,
        RootKind::DependentHandle => 6,
        RootKind::RefCountedHandle => 7,
        RootKind::Other => 8,
        RootKind::WeakHandle => 9,
    };
    let mut best: FxHashMap<ObjId, usize> = FxHashMap::default();
    for (i, r) in s.roots().iter().enumerate() {
        if !r.kind.retains() {
            continue;
        }
        match best.get(&r.obj) {
            Some(&j) if rank(s.roots()[j].kind) <= rank(r.kind) => {}
            _ => {
                best.insert(r.obj, i);
            }
        }
    }
    best
}

/// Options of the dominator tree view.
#[derive(Clone, Debug)]
pub struct DomOptions {
    /// Levels shown below the virtual root.
    pub depth: usize,
    /// Nodes retaining less than this percentage of the reachable bytes are folded into "more".
    pub min_percent: f64,
    /// At most this many children per node (the largest); 0 = all.
    pub max_children: usize,
}

impl Default for DomOptions {
    fn default() -> Self {
        DomOptions { depth: 6, min_percent: 1.0, max_children: 10 }
    }
}

/// A root's kind and name.
pub type RootLabel = (RootKind, String);
/// A root's kind and name index.
type RootRef = (RootKind, u32);
/// Objects merged into one node, with the root label of a top node.
type Group = (Option<RootLabel>, Vec<ObjId>);

/// A node of the merged dominator tree: the objects of one type immediately dominated by one parent node.
#[derive(Clone, Debug)]
pub struct DomNode {
    pub type_name: String,
    /// For a top node held directly by a root: that root's kind and name (its preferred root).
    pub root: Option<(RootKind, String)>,
    /// Objects merged in this node.
    pub count: u64,
    /// Their shallow bytes.
    pub size: u64,
    /// Their retained bytes (dominator subtrees are disjoint: no double counting).
    pub retained: u64,
    pub children: Vec<DomNode>,
    /// Children below the threshold, not shown: how many nodes, and their retained bytes.
    pub more: (u64, u64),
}

/// The merged dominator tree below the virtual root.
#[derive(Clone, Debug)]
pub struct DomTree {
    /// Retained bytes of the whole tree (all reachable objects).
    pub total: u64,
    pub children: Vec<DomNode>,
    pub more: (u64, u64),
}

/// The dominator tree, merged by type at each level, to `depth` levels, nodes below `min_percent` folded.
pub fn dominator_tree(a: &Analysis, opts: &DomOptions) -> DomTree {
    let s = a.snapshot;
    let roots = preferred_roots(s);
    let total = a.reachable_bytes;
    let min = (opts.min_percent / 100.0 * total as f64).ceil() as u64;
    // Top level: group by (type, preferred root label) so a static's objects show their field.
    let mut top: BTreeMap<(u32, Option<RootRef>), Vec<ObjId>> = BTreeMap::new();
    for &v in a.dominated(VIRTUAL_ROOT) {
        let root = roots.get(&v).map(|&i| {
            let r = &s.roots()[i];
            (r.kind, r.name)
        });
        top.entry((s.type_of(v), root)).or_default().push(v);
    }
    let groups: Vec<Group> = top
        .into_iter()
        .map(|((_, root), members)| {
            let label = root.map(|(k, n)| (k, s.root_names[n as usize].clone()));
            (label, members)
        })
        .collect();
    let (children, more) = build_level(a, groups, opts.depth, min, opts.max_children);
    DomTree { total, children, more }
}

fn build_level(
    a: &Analysis,
    groups: Vec<Group>,
    depth: usize,
    min: u64,
    max_children: usize,
) -> (Vec<DomNode>, (u64, u64)) {
    let s = a.snapshot;
    let mut nodes = Vec::new();
    let mut more = (0u64, 0u64);
    if depth == 0 {
        for (_, members) in &groups {
            more.0 += 1;
            more.1 += members.iter().map(|&v| a.retained(v)).sum::<u64>();
        }
        return (nodes, more);
    }
    for (root, members) in groups {
        let retained: u64 = members.iter().map(|&v| a.retained(v)).sum();
        if min > 0 && retained < min {
            more.0 += 1;
            more.1 += retained;
            continue;
        }
        let size: u64 = members.iter().map(|&v| s.size_of(v)).sum();
        let mut by_type: BTreeMap<u32, Vec<ObjId>> = BTreeMap::new();
        for &v in &members {
            for &c in a.dominated(v) {
                by_type.entry(s.type_of(c)).or_default().push(c);
            }
        }
        let sub: Vec<Group> = by_type.into_values().map(|m| (None, m)).collect();
        let (children, child_more) = build_level(a, sub, depth - 1, min, max_children);
        nodes.push(DomNode {
            type_name: s.type_name(s.type_of(members[0])).to_string(),
            root,
            count: members.len() as u64,
            size,
            retained,
            children,
            more: child_more,
        });
    }
    nodes.sort_by(|x, y| {
        y.retained.cmp(&x.retained).then_with(|| x.type_name.cmp(&y.type_name)).then_with(|| x.root.cmp(&y.root))
    });
    if max_children > 0 && nodes.len() > max_children {
        for n in nodes.drain(max_children..) {
            more.0 += 1;
            more.1 += n.retained;
        }
    }
    (nodes, more)
}

/// Options of the paths view.
#[derive(Clone, Debug, Default)]
pub struct PathsOptions {
    /// At most this many paths (the ones leading to most instances); 0 = all.
    pub max_paths: usize,
}

/// One step of a path: the type of the object reached and the field that references it (when known).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathNode {
    pub type_name: String,
    pub field: Option<String>,
}

/// One merged path from a root to instances of the type.
#[derive(Clone, Debug)]
pub struct PathRow {
    /// Instances whose shortest path this is.
    pub count: u64,
    /// The root's kind and name.
    pub root_kind: RootKind,
    pub root_name: String,
    /// From the rooted object to the instance (the last node), in order.
    pub nodes: Vec<PathNode>,
}

/// The paths view of one type.
#[derive(Clone, Debug)]
pub struct PathsView {
    /// The type's full name.
    pub type_name: String,
    /// Its instances.
    pub instances: u64,
    /// Instances no retaining root reaches.
    pub unreachable: u64,
    /// Paths, most instances first.
    pub paths: Vec<PathRow>,
    /// Paths left out by `max_paths`: how many, and how many instances they lead to.
    pub more: (u64, u64),
    /// The bytes the instances retain (the types view's figure) and, exactly, the bytes freed if all
    /// of them went (more when objects are shared between instances); filled by [`paths`].
    pub retained: u64,
    pub freed_if_all_gone: u64,
}

/// Finds a type by its full name, or else by a unique name ending in `.NAME` / `+NAME`, or `NAME<…`.
pub fn find_type(s: &Snapshot, name: &str) -> Result<u32, String> {
    if let Some(t) = (0..s.type_count() as u32).find(|&t| s.type_name(t) == name) {
        return Ok(t);
    }
    let matches: Vec<u32> = (0..s.type_count() as u32)
        .filter(|&t| {
            let full = s.type_name(t);
            full.ends_with(&format!(".{name}")) || full.ends_with(&format!("+{name}"))
        })
        .collect();
    match matches.len() {
        1 => Ok(matches[0]),
        0 => {
            let lower = name.to_lowercase();
            let mut similar: Vec<&str> = (0..s.type_count() as u32)
                .map(|t| s.type_name(t))
                .filter(|n| n.to_lowercase().contains(&lower))
                .collect();
            similar.sort();
            similar.truncate(8);
            if similar.is_empty() {
                Err(format!("no type named '{name}' in the snapshot"))
            } else {
                Err(format!("no type named '{name}' in the snapshot; types containing it: {}", similar.join(", ")))
            }
        }
        _ => {
            let mut names: Vec<&str> = matches.iter().map(|&t| s.type_name(t)).collect();
            names.sort();
            Err(format!("'{name}' names several types; give the full name: {}", names.join(", ")))
        }
    }
}

/// How an object was reached by the breadth-first search: held by a root, through a reference, or not.
const VIA_ROOT: u32 = u32::MAX - 1;
const VIA_NONE: u32 = u32::MAX;

/// Shortest paths from the roots to every instance of a type, merged by root, types and fields.
pub fn paths(a: &Analysis, type_name: &str, opts: &PathsOptions) -> Result<PathsView, String> {
    let s = a.snapshot;
    let t = find_type(s, type_name)?;
    let n = s.object_count();
    let roots = preferred_roots(s);

    // Breadth-first from every retaining root, the preferred roots' objects first in root order.
    // Per object the object it was reached from (or VIA_ROOT / VIA_NONE), and the field of that reference.
    let mut via = vec![VIA_NONE; n];
    let has_fields = !s.edge_field.is_empty();
    let mut via_field = if has_fields { vec![NO_FIELD; n] } else { Vec::new() };
    let mut queue: Vec<ObjId> = Vec::new();
    let mut rooted: Vec<(usize, ObjId)> = roots.iter().map(|(&o, &i)| (i, o)).collect();
    rooted.sort_unstable();
    let rank_order = {
        let mut r = rooted.clone();
        r.sort_by_key(|&(i, o)| (kind_rank(s.roots()[i].kind), i, o));
        r
    };
    for &(_, o) in &rank_order {
        via[o as usize] = VIA_ROOT;
        queue.push(o);
    }
    let mut head = 0;
    while head < queue.len() {
        let v = queue[head];
        head += 1;
        for e in s.ref_range(v) {
            let w = s.edge_target(e);
            if via[w as usize] == VIA_NONE {
                via[w as usize] = v;
                if has_fields {
                    via_field[w as usize] = s.edge_field[e];
                }
                queue.push(w);
            }
        }
    }
    drop(queue);

    let step = |u: ObjId| -> Step {
        let from = via[u as usize];
        if from == VIA_NONE {
            Step::None
        } else if from == VIA_ROOT {
            let r = &s.roots()[roots[&u]];
            Step::Root(Some((r.kind, r.name)))
        } else {
            Step::From(from, if has_fields { via_field[u as usize] } else { NO_FIELD })
        }
    };
    let mut v = merge_paths(a, t, step, opts);
    v.retained = a.type_retained()[t as usize];
    v.freed_if_all_gone = a.freed_without(t);
    Ok(v)
}

/// The dominator chains of a type's instances — from the top of the dominator tree down to each instance
/// — merged by the types along them: what holds the instances exclusively. A chain's root is the
/// preferred root of its top object when a root holds it directly, else "[several roots]".
pub fn dominator_paths(a: &Analysis, type_name: &str, opts: &PathsOptions) -> Result<PathsView, String> {
    let s = a.snapshot;
    let t = find_type(s, type_name)?;
    let roots = preferred_roots(s);
    let step = |u: ObjId| -> Step {
        match a.idom(u) {
            UNREACHED => Step::None,
            VIRTUAL_ROOT => Step::Root(roots.get(&u).map(|&i| {
                let r = &s.roots()[i];
                (r.kind, r.name)
            })),
            d => Step::From(d, NO_FIELD),
        }
    };
    Ok(merge_paths(a, t, step, opts))
}

/// One step up from an object: to the object it hangs from (with the field), to a root (`None`: several
/// roots), or nowhere (unreachable).
enum Step {
    From(ObjId, u32),
    Root(Option<(RootKind, u32)>),
    None,
}

/// The name a chain shows when several roots hold its top object.
pub const SEVERAL_ROOTS: &str = "[several roots]";

/// Walks up from every instance of type `t` by `step`, merging the walks by root, types and fields in a
/// trie (each object is walked once: its trie node is memoised), and counts the instances per path.
fn merge_paths(a: &Analysis, t: u32, step: impl Fn(ObjId) -> Step, opts: &PathsOptions) -> PathsView {
    let s = a.snapshot;
    let n = s.object_count();
    // Paths as a trie: node = (parent node or root label, type, field).
    #[derive(Clone, Copy, PartialEq, Eq, Hash)]
    enum Up {
        Root(Option<(RootKind, u32)>),
        Node(u32),
    }
    let mut trie: Vec<(Up, u32, u32)> = Vec::new();
    let mut depth: Vec<u32> = Vec::new();
    let mut trie_root: Vec<Option<(RootKind, u32)>> = Vec::new();
    let mut trie_index: FxHashMap<(Up, u32, u32), u32> = FxHashMap::default();
    let mut memo: Vec<u32> = vec![u32::MAX; n];
    let mut counts: FxHashMap<u32, u64> = FxHashMap::default();
    let mut instances = 0u64;
    let mut unreachable = 0u64;
    let mut chain: Vec<(ObjId, u32)> = Vec::new(); // (object, field of its incoming reference)
    for v in 0..n as u32 {
        if s.type_of(v) != t {
            continue;
        }
        instances += 1;
        if a.idom(v) == UNREACHED {
            unreachable += 1;
            continue;
        }
        // Walk up to a memoised object or the root.
        chain.clear();
        let mut u = v;
        let mut up = loop {
            if memo[u as usize] != u32::MAX {
                break Up::Node(memo[u as usize]);
            }
            match step(u) {
                Step::Root(r) => {
                    chain.push((u, NO_FIELD));
                    break Up::Root(r);
                }
                Step::From(from, field) => {
                    chain.push((u, field));
                    u = from;
                }
                // Reachable objects always lead to a root; stop safely if not.
                Step::None => {
                    chain.push((u, NO_FIELD));
                    break Up::Root(None);
                }
            }
        };
        while let Some((o, field)) = chain.pop() {
            let key = (up, s.type_of(o), field);
            let id = match trie_index.get(&key) {
                Some(&id) => id,
                None => {
                    let id = trie.len() as u32;
                    let (d, r) = match up {
                        Up::Node(p) => (depth[p as usize] + 1, trie_root[p as usize]),
                        Up::Root(r) => (1, r),
                    };
                    depth.push(d);
                    trie_root.push(r);
                    trie.push(key);
                    trie_index.insert(key, id);
                    id
                }
            };
            memo[o as usize] = id;
            up = Up::Node(id);
        }
        if let Up::Node(id) = up {
            *counts.entry(id).or_default() += 1;
        }
    }

    // Most instances first, then shorter paths; the trie's numbering (object order) breaks ties.
    let root_of = |id: u32| trie_root[id as usize];
    let mut order: Vec<(u32, u64)> = counts.into_iter().collect();
    order.sort_by(|x, y| {
        y.1.cmp(&x.1)
            .then_with(|| depth[x.0 as usize].cmp(&depth[y.0 as usize]))
            .then_with(|| root_of(x.0).cmp(&root_of(y.0)))
            .then_with(|| x.0.cmp(&y.0))
    });
    let mut more = (0u64, 0u64);
    if opts.max_paths > 0 && order.len() > opts.max_paths {
        for &(_, count) in &order[opts.max_paths..] {
            more.0 += 1;
            more.1 += count;
        }
        order.truncate(opts.max_paths);
    }
    let rows: Vec<PathRow> = order
        .into_iter()
        .map(|(id, count)| {
            let mut nodes = Vec::new();
            let mut cur = Up::Node(id);
            let root = loop {
                match cur {
                    Up::Node(i) => {
                        let (up, ty, field) = trie[i as usize];
                        nodes.push(PathNode {
                            type_name: s.type_name(ty).to_string(),
                            field: (field != NO_FIELD).then(|| s.fields[field as usize].clone()),
                        });
                        cur = up;
                    }
                    Up::Root(r) => break r,
                }
            };
            nodes.reverse();
            let (root_kind, root_name) = match root {
                Some((k, name)) => (k, s.root_names[name as usize].clone()),
                None => (RootKind::Other, SEVERAL_ROOTS.to_string()),
            };
            PathRow { count, root_kind, root_name, nodes }
        })
        .collect();
    PathsView {
        type_name: s.type_name(t).to_string(),
        instances,
        unreachable,
        paths: rows,
        more,
        retained: 0,
        freed_if_all_gone: 0,
    }
}

fn kind_rank(k: RootKind) -> u8 {
    match k {
        RootKind::StaticField => 0,
        RootKind::Stack => 1,
        RootKind::StrongHandle => 2,
        RootKind::PinnedHandle => 3,
        RootKind::FinalizerQueue => 4,
        _ => 5,
    }
}

/// One row of a snapshot diff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffRow {
    pub name: String,
    pub base_count: u64,
    pub new_count: u64,
    pub delta_count: i64,
    pub base_size: u64,
    pub new_size: u64,
    pub delta_size: i64,
}

impl DiffRow {
    /// `new` (absent from the base), `freed` (absent from the new one), `grown`, `shrunk` or `same`.
    pub fn status(&self) -> &'static str {
        if self.base_count == 0 {
            "new"
        } else if self.new_count == 0 {
            "freed"
        } else if self.delta_size > 0 || (self.delta_size == 0 && self.delta_count > 0) {
            "grown"
        } else if self.delta_size < 0 || self.delta_count < 0 {
            "shrunk"
        } else {
            "same"
        }
    }
}

/// Per type name the counts and sizes of two snapshots, the largest change in bytes first.
pub fn diff(base: &Snapshot, new: &Snapshot) -> Vec<DiffRow> {
    let mut by_name: BTreeMap<&str, [u64; 4]> = BTreeMap::new();
    for (k, s) in [base, new].into_iter().enumerate() {
        let mut count = vec![0u64; s.type_count()];
        let mut size = vec![0u64; s.type_count()];
        for v in 0..s.object_count() as u32 {
            count[s.type_of(v) as usize] += 1;
            size[s.type_of(v) as usize] += s.size_of(v);
        }
        for t in 0..s.type_count() {
            let e = by_name.entry(s.type_name(t as u32)).or_default();
            e[k] += count[t];
            e[2 + k] += size[t];
        }
    }
    let mut rows: Vec<DiffRow> = by_name
        .into_iter()
        .map(|(name, [bc, nc, bs, ns])| DiffRow {
            name: name.to_string(),
            base_count: bc,
            new_count: nc,
            delta_count: nc as i64 - bc as i64,
            base_size: bs,
            new_size: ns,
            delta_size: ns as i64 - bs as i64,
        })
        .collect();
    rows.sort_by(|x, y| {
        y.delta_size
            .unsigned_abs()
            .cmp(&x.delta_size.unsigned_abs())
            .then_with(|| y.delta_count.unsigned_abs().cmp(&x.delta_count.unsigned_abs()))
            .then_with(|| x.name.cmp(&y.name))
    });
    rows
}
