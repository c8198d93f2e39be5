//! Retention analysis of one snapshot: the dominator tree from a virtual root over every retaining root
//! (semidominators by Lengauer–Tarjan with path compression, then Semi-NCA; iterative throughout so a
//! ten-million-long list neither recurses nor overflows), retained sizes, and the dominator tree's
//! children lists the views walk.
//!
//! An object `d` dominates `v` when every path from a root to `v` passes through `d`; the retained size
//! of `v` is the total shallow size of the objects it dominates (itself included): the bytes the GC would
//! free if `v` went. Objects no retaining root reaches (weak-handle-only objects, or roots the capture
//! did not report) have no dominator: they are counted apart as unreachable.

use crate::graph::{ObjId, Snapshot};

/// The dominator of objects held directly by roots (and of objects two roots share): the virtual root.
pub const VIRTUAL_ROOT: u32 = u32::MAX - 1;
/// The "dominator" of an object no root reaches.
pub const UNREACHED: u32 = u32::MAX;

/// The dominator tree and retained sizes of a snapshot.
pub struct Analysis<'a> {
    /// The snapshot analysed.
    pub snapshot: &'a Snapshot,
    /// Per object its immediate dominator ([`VIRTUAL_ROOT`], or [`UNREACHED`]).
    idom: Vec<u32>,
    /// Per object its retained size (0 for unreachable objects).
    retained: Vec<u64>,
    /// Dominator-tree children: `child_start[v]..child_start[v+1]` into `children`; index `n` is the
    /// virtual root. Children in object order.
    child_start: Vec<u32>,
    children: Vec<u32>,
    /// Objects reached from the retaining roots.
    pub reachable: u64,
    /// Shallow bytes of the reachable objects (the virtual root's retained size).
    pub reachable_bytes: u64,
    /// Objects no retaining root reaches, and their shallow bytes.
    pub unreachable: u64,
    /// Shallow bytes of the unreachable objects.
    pub unreachable_bytes: u64,
}

impl<'a> Analysis<'a> {
    /// Computes the dominator tree and the retained sizes.
    pub fn new(snapshot: &'a Snapshot) -> Self {
        let n = snapshot.object_count();
        let (idom, preorder) = dominators(snapshot);
        let (child_start, children) = children_lists(&idom, n);
        // Retained sizes: in reverse depth-first preorder every object comes after its immediate
        // dominator (a dominator is an ancestor in the depth-first tree), so one backward pass adds
        // each object's total into its dominator's.
        let mut retained = vec![0u64; n];
        let mut reachable = 0u64;
        let mut reachable_bytes = 0u64;
        let mut unreachable = 0u64;
        let mut unreachable_bytes = 0u64;
        for &v in preorder.iter().rev() {
            let own = snapshot.size_of(v) + retained[v as usize];
            retained[v as usize] = own;
            reachable += 1;
            reachable_bytes += snapshot.size_of(v);
            let d = idom[v as usize];
            if d != VIRTUAL_ROOT {
                retained[d as usize] += own;
            }
        }
        drop(preorder);
        for (v, d) in idom.iter().enumerate() {
            if *d == UNREACHED {
                unreachable += 1;
                unreachable_bytes += snapshot.size_of(v as u32);
            }
        }
        Analysis {
            snapshot,
            idom,
            retained,
            child_start,
            children,
            reachable,
            reachable_bytes,
            unreachable,
            unreachable_bytes,
        }
    }

    /// The immediate dominator of an object ([`VIRTUAL_ROOT`] or [`UNREACHED`] included).
    pub fn idom(&self, obj: ObjId) -> u32 {
        self.idom[obj as usize]
    }

    /// The retained size of an object (0 when unreachable).
    pub fn retained(&self, obj: ObjId) -> u64 {
        self.retained[obj as usize]
    }

    /// The objects an object immediately dominates; [`VIRTUAL_ROOT`] gives the top of the tree.
    pub fn dominated(&self, obj: u32) -> &[ObjId] {
        let v = if obj == VIRTUAL_ROOT { self.snapshot.object_count() } else { obj as usize };
        &self.children[self.child_start[v] as usize..self.child_start[v + 1] as usize]
    }

    /// Per type the retained size of the set of its instances, without double counting: the sum of the
    /// retained sizes of its instances that no other instance of the same type dominates.
    pub fn type_retained(&self) -> Vec<u64> {
        let s = self.snapshot;
        let n = s.object_count();
        let mut out = vec![0u64; s.type_count()];
        let mut active = vec![0u32; s.type_count()];
        // Pre/post-order walk of the dominator tree, counting the instances of each type on the path.
        let mut stack: Vec<(u32, u32)> = vec![(n as u32, self.child_start[n])];
        while let Some(top) = stack.last_mut() {
            let (v, next) = *top;
            if next < self.child_start[v as usize + 1] {
                top.1 += 1;
                let c = self.children[next as usize];
                let t = s.type_of(c) as usize;
                if active[t] == 0 {
                    out[t] += self.retained[c as usize];
                }
                active[t] += 1;
                stack.push((c, self.child_start[c as usize]));
            } else {
                stack.pop();
                if (v as usize) < n {
                    active[s.type_of(v) as usize] -= 1;
                }
            }
        }
        out
    }
}

impl Analysis<'_> {
    /// The bytes the GC would free if every instance of type `t` went, exactly: the reachable bytes
    /// less what the retaining roots still reach without passing through an instance. One traversal of
    /// the graph. At least [`Analysis::type_retained`]'s figure for `t`, more when objects are shared
    /// between instances (reachable through either, freed only when both go).
    pub fn freed_without(&self, t: u32) -> u64 {
        let s = self.snapshot;
        let mut seen = vec![false; s.object_count()];
        let mut stack: Vec<ObjId> = Vec::new();
        let mut kept = 0u64;
        for r in s.roots() {
            let o = r.obj;
            if r.kind.retains() && !seen[o as usize] && s.type_of(o) != t {
                seen[o as usize] = true;
                kept += s.size_of(o);
                stack.push(o);
            }
        }
        while let Some(v) = stack.pop() {
            for &w in s.refs(v) {
                if !seen[w as usize] && s.type_of(w) != t {
                    seen[w as usize] = true;
                    kept += s.size_of(w);
                    stack.push(w);
                }
            }
        }
        self.reachable_bytes - kept
    }
}

/// Dominator-tree children lists from the immediate dominators (index `n` = the virtual root).
fn children_lists(idom: &[u32], n: usize) -> (Vec<u32>, Vec<u32>) {
    let slot = |d: u32| if d == VIRTUAL_ROOT { n } else { d as usize };
    let mut start = vec![0u32; n + 2];
    for &d in idom {
        if d != UNREACHED {
            start[slot(d) + 1] += 1;
        }
    }
    for i in 0..=n {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut children = vec![0u32; start[n + 1] as usize];
    for (v, &d) in idom.iter().enumerate() {
        if d != UNREACHED {
            let s = slot(d);
            children[fill[s] as usize] = v as u32;
            fill[s] += 1;
        }
    }
    start.truncate(n + 2);
    (start, children)
}

/// Immediate dominators of every object (Lengauer–Tarjan over DFS numbers; 0 means none, 1 is the
/// virtual root), and the reachable objects in depth-first preorder.
fn dominators(s: &Snapshot) -> (Vec<u32>, Vec<u32>) {
    let n = s.object_count();
    let vroot = n as u32;
    // The virtual root's successors: each object held by a retaining root, once, in root order.
    let mut rooted = vec![false; n];
    let mut root_succ: Vec<u32> = Vec::new();
    for r in s.roots() {
        if r.kind.retains() && !rooted[r.obj as usize] {
            rooted[r.obj as usize] = true;
            root_succ.push(r.obj);
        }
    }

    // Depth-first numbering, iterative.
    let mut dfnum = vec![0u32; n + 1];
    let mut vertex: Vec<u32> = Vec::with_capacity(n + 2);
    vertex.push(0); // dfs number 0 is "none"
    let mut parent: Vec<u32> = Vec::with_capacity(n + 2);
    parent.push(0);
    {
        let succ = |v: u32, i: usize| -> Option<u32> {
            if v == vroot {
                root_succ.get(i).copied()
            } else {
                s.refs(v).get(i).copied()
            }
        };
        let mut stack: Vec<(u32, usize)> = Vec::new();
        dfnum[n] = 1;
        vertex.push(vroot);
        parent.push(0);
        stack.push((vroot, 0));
        while let Some(top) = stack.last_mut() {
            let (v, i) = *top;
            match succ(v, i) {
                Some(w) => {
                    top.1 += 1;
                    if dfnum[w as usize] == 0 {
                        let num = vertex.len() as u32;
                        dfnum[w as usize] = num;
                        vertex.push(w);
                        parent.push(dfnum[v as usize]);
                        stack.push((w, 0));
                    }
                }
                None => {
                    stack.pop();
                }
            }
        }
    }
    let count = vertex.len() - 1; // reachable vertices, the virtual root included

    // Predecessors of reachable vertices, by DFS number (CSR).
    let mut pred_start = vec![0u32; count + 2];
    for v in 0..n {
        if dfnum[v] == 0 {
            continue;
        }
        for &w in s.refs(v as u32) {
            pred_start[dfnum[w as usize] as usize + 1] += 1;
        }
    }
    for &w in &root_succ {
        pred_start[dfnum[w as usize] as usize + 1] += 1;
    }
    for i in 0..=count {
        pred_start[i + 1] += pred_start[i];
    }
    let mut fill = pred_start.clone();
    let mut preds = vec![0u32; pred_start[count + 1] as usize];
    for v in 0..n {
        let dv = dfnum[v];
        if dv == 0 {
            continue;
        }
        for &w in s.refs(v as u32) {
            let dw = dfnum[w as usize] as usize;
            preds[fill[dw] as usize] = dv;
            fill[dw] += 1;
        }
    }
    for &w in &root_succ {
        let dw = dfnum[w as usize] as usize;
        preds[fill[dw] as usize] = 1;
        fill[dw] += 1;
    }
    drop(fill);

    // Semidominators (Lengauer–Tarjan's EVAL/LINK with path compression), then immediate dominators by
    // Semi-NCA: idom(w) is the nearest common ancestor of parent(w) and sdom(w) in the dominator tree
    // built so far (Georgiadis, Tarjan and Werneck, "Finding dominators in practice"). The forest's fields
    // sit side by side so one cache line serves an EVAL step.
    let mut forest: Vec<Forest> = (0..=count as u32).map(|i| Forest { semi: i, label: i, ancestor: 0 }).collect();
    let mut path: Vec<u32> = Vec::new();
    for i in (2..=count).rev() {
        let mut sd = forest[i].semi;
        for &v in &preds[pred_start[i] as usize..pred_start[i + 1] as usize] {
            let u = eval(v, &mut forest, &mut path);
            sd = sd.min(forest[u as usize].semi);
        }
        forest[i].semi = sd;
        forest[i].ancestor = parent[i];
    }
    drop(preds);
    drop(pred_start);
    let mut idom = vec![0u32; count + 1];
    for i in 2..=count {
        let sd = forest[i].semi;
        let mut x = parent[i];
        while x > sd {
            x = idom[x as usize];
        }
        idom[i] = x;
    }
    drop(forest);

    let mut out = vec![UNREACHED; n];
    for i in 2..=count {
        let v = vertex[i] as usize;
        let d = vertex[idom[i] as usize];
        out[v] = if d == vroot { VIRTUAL_ROOT } else { d };
    }
    vertex.drain(..2);
    (out, vertex)
}

/// One vertex of Lengauer–Tarjan's forest, by DFS number.
#[derive(Clone, Copy)]
struct Forest {
    semi: u32,
    label: u32,
    ancestor: u32,
}

/// Lengauer–Tarjan's EVAL with path compression, iterative.
#[inline]
fn eval(v: u32, f: &mut [Forest], path: &mut Vec<u32>) -> u32 {
    if f[v as usize].ancestor == 0 {
        return v;
    }
    // COMPRESS(v): walk up while the ancestor has an ancestor, then fold labels top-down.
    let mut u = v;
    while f[f[u as usize].ancestor as usize].ancestor != 0 {
        path.push(u);
        u = f[u as usize].ancestor;
    }
    while let Some(x) = path.pop() {
        let a = f[x as usize].ancestor as usize;
        let (la, lx) = (f[a].label, f[x as usize].label);
        if f[la as usize].semi < f[lx as usize].semi {
            f[x as usize].label = la;
        }
        f[x as usize].ancestor = f[a].ancestor;
    }
    f[v as usize].label
}
