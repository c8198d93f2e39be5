//! The figures of weighted call paths ([`Paths`]), generic over the weight: per-function totals,
//! callers and callees, entry points, and the top-down or inverted prefix tree. Pure functions:
//! the report, the viewer and the diff call them on their own paths, and sort and cut the results
//! for display themselves.

use std::cmp::Ordering;
use std::collections::HashMap;

use clrprof_model::{Cost, CostTree, StackId};

use super::{FuncId, PathSource, Paths, ThreadFilter, Weight};

/// A function's figures: `self_w` on the paths that end in it, `total` on the paths through it
/// (a path counted once however often the function recurs on it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FunctionTotal<W> {
    pub func: FuncId,
    pub self_w: W,
    pub total: W,
}

/// Per-function state of [`function_totals_with`], kept between calls (all clear between calls)
/// so that many small path sets (one per thread) cost their size, not the number of functions.
#[derive(Clone, Debug, Default)]
pub struct TotalsScratch<W> {
    self_w: Vec<W>,
    total: Vec<W>,
    /// How often a function is on the open path; 0: not on it.
    on_path: Vec<u32>,
    /// Whether a function had a path through it (it is then in `touched`).
    seen: Vec<bool>,
    touched: Vec<FuncId>,
    /// The open path: each level's function, and the weight of the paths below it so far.
    open: Vec<FuncId>,
    below: Vec<W>,
}

/// Per function with a weight, in function order: self and total.
pub fn function_totals<W: Weight>(paths: &(impl PathSource<W> + ?Sized)) -> Vec<FunctionTotal<W>> {
    function_totals_with(paths, &mut TotalsScratch::default())
}

/// [`function_totals`] with scratch state reused from call to call.
///
/// The paths are walked as a depth-first walk of their prefix tree would: a path keeps the levels
/// it shares with the one before open, and a level's weight goes up to its caller when it closes,
/// and to its function's total when no outer level is the same function. A function's total is
/// then added once per run of paths through it, not once per path: paths come in stack order,
/// neighbours share most of their frames, and summing each path into every frame on it was a
/// fifth of reading an instrumented trace. Any order gives the same sums (paths sharing a prefix
/// that are not neighbours only close and reopen its levels).
pub fn function_totals_with<W: Weight>(
    paths: &(impl PathSource<W> + ?Sized),
    scratch: &mut TotalsScratch<W>,
) -> Vec<FunctionTotal<W>> {
    let TotalsScratch { self_w, total, on_path, seen, touched, open, below } = scratch;
    // Closes the levels of `open` from `keep` up, each adding to its caller's weight.
    fn close<W: Weight>(open: &mut Vec<FuncId>, below: &mut Vec<W>, keep: usize, on_path: &mut [u32], total: &mut [W]) {
        while open.len() > keep {
            let (f, w) = (open.pop().expect("more than keep levels") as usize, below.pop().expect("one a level"));
            on_path[f] -= 1;
            if on_path[f] == 0 {
                total[f].add(&w);
            }
            if let Some(up) = below.last_mut() {
                up.add(&w);
            }
        }
    }
    paths.each_path(&mut |path, w| {
        let shared = open.iter().zip(path).take_while(|(o, p)| o == p).count();
        close(open, below, shared, on_path, total);
        for &f in &path[shared..] {
            let i = f as usize;
            if i >= seen.len() {
                self_w.resize(i + 1, W::default());
                total.resize(i + 1, W::default());
                on_path.resize(i + 1, 0);
                seen.resize(i + 1, false);
            }
            if !seen[i] {
                seen[i] = true;
                touched.push(f);
            }
            on_path[i] += 1;
            open.push(f);
            below.push(W::default());
        }
        if let (Some(&leaf), Some(acc)) = (open.last(), below.last_mut()) {
            acc.add(w);
            self_w[leaf as usize].add(w);
        }
    });
    close(open, below, 0, on_path, total);
    touched.sort_unstable();
    let mut out = Vec::with_capacity(touched.len());
    for f in touched.drain(..) {
        let i = f as usize;
        if !total[i].is_zero() {
            out.push(FunctionTotal { func: f, self_w: self_w[i], total: total[i] });
        }
        (self_w[i], total[i], seen[i]) = (W::default(), W::default(), false);
    }
    out
}

/// One edge of a butterfly: the caller (`None`: no caller, an entry point) or the callee.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Edge<W> {
    pub func: Option<FuncId>,
    /// The weight of the paths on which this call happens (each path counted once per edge).
    pub through: W,
    /// The weight of the paths that end with this call: for instrumented data, the exact calls
    /// along the edge.
    pub last: W,
}

/// Callers and callees of a set of functions (every overload or instantiation the user named).
#[derive(Clone, Debug, PartialEq)]
pub struct Butterfly<W> {
    /// On paths that end in a target.
    pub self_w: W,
    /// On paths through a target.
    pub total: W,
    /// In function order (`None` first).
    pub callers: Vec<Edge<W>>,
    pub callees: Vec<Edge<W>>,
}

pub fn butterfly<W: Weight>(paths: &(impl PathSource<W> + ?Sized), is_target: impl Fn(FuncId) -> bool) -> Butterfly<W> {
    let mut callers: HashMap<Option<FuncId>, Edge<W>> = HashMap::new();
    let mut callees: HashMap<Option<FuncId>, Edge<W>> = HashMap::new();
    let (mut self_w, mut total) = (W::default(), W::default());
    let edge = |func| Edge { func, through: W::default(), last: W::default() };
    let mut seen_callers: Vec<Option<FuncId>> = Vec::new();
    let mut seen_callees: Vec<FuncId> = Vec::new();
    paths.each_path(&mut |path, w| {
        if !path.iter().any(|&f| is_target(f)) {
            return;
        }
        total.add(w);
        let n = path.len();
        if is_target(path[n - 1]) {
            self_w.add(w);
            let caller = if n == 1 { None } else { Some(path[n - 2]) };
            callers.entry(caller).or_insert_with(|| edge(caller)).last.add(w);
        }
        if n >= 2 && is_target(path[n - 2]) {
            let callee = Some(path[n - 1]);
            callees.entry(callee).or_insert_with(|| edge(callee)).last.add(w);
        }
        seen_callers.clear();
        seen_callees.clear();
        for (k, &f) in path.iter().enumerate() {
            if !is_target(f) {
                continue;
            }
            let caller = if k == 0 { None } else { Some(path[k - 1]) };
            if !seen_callers.contains(&caller) {
                seen_callers.push(caller);
                callers.entry(caller).or_insert_with(|| edge(caller)).through.add(w);
            }
            if let Some(&callee) = path.get(k + 1) {
                if !seen_callees.contains(&callee) {
                    seen_callees.push(callee);
                    callees.entry(Some(callee)).or_insert_with(|| edge(Some(callee))).through.add(w);
                }
            }
        }
    });
    let sorted = |m: HashMap<Option<FuncId>, Edge<W>>| {
        let mut v: Vec<Edge<W>> = m.into_values().collect();
        v.sort_by_key(|e| e.func);
        v
    };
    Butterfly { self_w, total, callers: sorted(callers), callees: sorted(callees) }
}

/// A function at the root of some path (after the leading functions `skip` passes over, such as
/// the viewer's thread roots).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry<W> {
    pub func: FuncId,
    /// The paths that start with it.
    pub total: W,
    /// The paths that start and end with it (for instrumented data, the exact calls of the entry
    /// point as a root).
    pub alone: W,
}

/// The entry points, in function order.
pub fn entry_points<W: Weight>(paths: &(impl PathSource<W> + ?Sized), skip: impl Fn(FuncId) -> bool) -> Vec<Entry<W>> {
    let mut roots: HashMap<FuncId, Entry<W>> = HashMap::new();
    paths.each_path(&mut |path, w| {
        let Some(k) = path.iter().position(|&f| !skip(f)) else { return };
        let f = path[k];
        let e = roots.entry(f).or_insert(Entry { func: f, total: W::default(), alone: W::default() });
        e.total.add(w);
        if k + 1 == path.len() {
            e.alone.add(w);
        }
    });
    let mut v: Vec<Entry<W>> = roots.into_values().collect();
    v.sort_by_key(|e| e.func);
    v
}

/// A node of a prefix tree: the root (0) is the empty path.
#[derive(Clone, Debug)]
pub struct TreeNode<W> {
    pub parent: u32,
    pub func: FuncId,
    pub depth: u32,
    /// On the paths that end here.
    pub self_w: W,
    /// On the paths through here.
    pub total: W,
    /// Its children: `Tree::kids[first..first + len]`.
    first: u32,
    len: u32,
}

/// A prefix tree of paths: its nodes, and every node's children in one array (a vector per node
/// cost an allocation each: a per-thread tree of a large profile has millions of nodes).
#[derive(Clone, Debug)]
pub struct Tree<W> {
    pub nodes: Vec<TreeNode<W>>,
    kids: Vec<u32>,
    /// The node each path ends at, by path ([`prefix_tree`]; empty for [`stack_tree`]).
    pub ends: Vec<u32>,
}

impl<W> Default for Tree<W> {
    fn default() -> Self {
        Tree { nodes: Vec::new(), kids: Vec::new(), ends: Vec::new() }
    }
}

impl<W: Weight> Tree<W> {
    /// The children of a node, in the order of the last [`sort_children`](Self::sort_children)
    /// (else in the order of the paths sorted by their functions).
    pub fn children(&self, id: u32) -> &[u32] {
        let n = &self.nodes[id as usize];
        &self.kids[n.first as usize..(n.first + n.len) as usize]
    }

    /// Sorts every node's children by `order` (node ids of the same parent).
    pub fn sort_children(&mut self, order: impl Fn(&[TreeNode<W>], u32, u32) -> Ordering) {
        let nodes = &self.nodes;
        for n in nodes {
            let slice = &mut self.kids[n.first as usize..(n.first + n.len) as usize];
            if slice.len() > 1 {
                slice.sort_by(|&a, &b| order(nodes, a, b));
            }
        }
    }
}

/// The top-down tree of the paths (the inverted, bottom-up one when `inverted`: paths read from
/// their leaf). Every distinct prefix is one node; a node's id is above its parent's.
pub fn prefix_tree<W: Weight>(paths: &Paths<W>, inverted: bool) -> Tree<W> {
    let node = |parent: u32, func: FuncId, depth: u32| TreeNode {
        parent,
        func,
        depth,
        self_w: W::default(),
        total: W::default(),
        first: 0,
        len: 0,
    };
    // Paths in order of their functions (from the leaf when inverted): the paths sharing a prefix
    // are then neighbours, and each prefix's node is made once, by the first of them, and found
    // again on the chain of the previous path's nodes (no lookup per frame).
    let at = |p: &[FuncId], k: usize| if inverted { p[p.len() - 1 - k] } else { p[k] };
    let mut order: Vec<u32> = (0..paths.len() as u32).collect();
    if inverted {
        order.sort_unstable_by(|&a, &b| paths.path(a as usize).iter().rev().cmp(paths.path(b as usize).iter().rev()));
    } else {
        order.sort_unstable_by(|&a, &b| paths.path(a as usize).cmp(paths.path(b as usize)));
    }
    let mut nodes = vec![node(0, u32::MAX, 0)];
    let mut ends = vec![0u32; paths.len()];
    // chain[d]: the node at depth d of the previous path (chain[0]: the root).
    let mut chain: Vec<u32> = vec![0];
    let mut prev: Option<&[FuncId]> = None;
    for &i in &order {
        let p = paths.path(i as usize);
        let w = paths.weight(i as usize);
        let n = p.len();
        let common = prev.map_or(0, |q| {
            let m = n.min(q.len());
            (0..m).find(|&k| at(q, k) != at(p, k)).unwrap_or(m)
        });
        chain.truncate(common + 1);
        for k in common..n {
            let parent = chain[k];
            nodes.push(node(parent, at(p, k), k as u32 + 1));
            chain.push((nodes.len() - 1) as u32);
        }
        for &c in &chain {
            nodes[c as usize].total.add(w);
        }
        let leaf = chain[chain.len() - 1];
        nodes[leaf as usize].self_w.add(w);
        ends[i as usize] = leaf;
        prev = Some(p);
    }
    Tree { ends, ..lay_out(nodes) }
}

/// The top-down tree of the stacks of a thread selection with their costs, taken straight from
/// the stack table (which is the prefix tree of its stacks' frames): [`prefix_tree`] of the
/// report's frame paths ([`super::frame_paths`]) in time linear in the table. Also the stack of
/// each node (none for the root).
pub fn stack_tree(tree: &CostTree, filter: ThreadFilter<'_>) -> (Tree<Cost>, Vec<StackId>) {
    stack_tree_weighed(tree, filter, None, |c| *c)
}

/// [`stack_tree`] down to `max_depth` frames (`None`: all; at least 1), each cost weighed by
/// `weigh` (an additive part of it): a node at that depth holds the inclusive weights of the stacks
/// below it, which have no nodes (a call tree shown to a depth needs no more), and a node takes the
/// weight's size twice rather than two full costs' (184 bytes).
pub fn stack_tree_weighed<W: Weight>(
    tree: &CostTree,
    filter: ThreadFilter<'_>,
    max_depth: Option<usize>,
    weigh: impl Fn(&Cost) -> W,
) -> (Tree<W>, Vec<StackId>) {
    let table = &tree.stacks.nodes;
    let empty =
        |func| TreeNode { parent: 0, func, depth: 0, self_w: W::default(), total: W::default(), first: 0, len: 0 };
    // Stacks of table depth below `limit` have a node; with no limit stack `i` is node `i + 1`.
    let limit = max_depth.map(|d| d.clamp(1, u32::MAX as usize) as u32);
    let shallow = |depth: u32| limit.is_none_or(|l| depth < l);
    // With a limit: per stack its node, or its ancestor's at the limit; per node its stack.
    let (mut node_of, mut stack_of) = (Vec::new(), Vec::new());
    // Built in place, the nodes being the only per-stack table (a merged and an inclusive cost per
    // stack besides them took 160 bytes a stack more): first the nodes with the self costs merged
    // over the threads, then the inclusive ones (children after parents in the table).
    let mut nodes = Vec::with_capacity(match limit {
        None => table.len() + 1,
        Some(_) => table.iter().filter(|n| shallow(n.depth)).count() + 1,
    });
    nodes.push(empty(u32::MAX));
    match limit {
        None => {
            nodes.extend(table.iter().map(|n| TreeNode { parent: n.parent.map_or(0, |p| p.0 + 1), ..empty(n.frame.0) }))
        }
        Some(_) => {
            node_of.reserve_exact(table.len());
            stack_of.reserve_exact(nodes.capacity() - 1);
            for (i, n) in table.iter().enumerate() {
                let parent = n.parent.map_or(0, |p| node_of[p.0 as usize]);
                if shallow(n.depth) {
                    node_of.push(nodes.len() as u32);
                    nodes.push(TreeNode { parent, ..empty(n.frame.0) });
                    stack_of.push(i as u32);
                } else {
                    node_of.push(parent);
                }
            }
        }
    }
    for t in &tree.threads {
        if filter.is_some_and(|f| !f(t.os_tid)) {
            continue;
        }
        for (s, c) in t.costs.iter() {
            let i = s.0 as usize;
            let w = weigh(&c);
            if limit.is_none() {
                nodes[i + 1].self_w.add(&w);
            } else if shallow(table[i].depth) {
                nodes[node_of[i] as usize].self_w.add(&w);
            } else {
                // Below the limit: in its ancestor's inclusive cost only.
                nodes[node_of[i] as usize].total.add(&w);
            }
        }
    }
    drop(node_of);
    for i in (1..nodes.len()).rev() {
        let self_w = nodes[i].self_w;
        nodes[i].total.add(&self_w);
        let (parent, total) = (nodes[i].parent as usize, nodes[i].total);
        if parent != 0 {
            nodes[parent].total.add(&total);
        }
    }
    // Then only the stacks with a cost, moved down in table order: a parent's inclusive cost
    // holds its children's, so it has its place already.
    let mut index = vec![0u32; nodes.len()];
    let mut stacks = vec![StackId(u32::MAX)];
    let mut to = 1;
    for i in 1..nodes.len() {
        if nodes[i].total.is_zero() {
            continue;
        }
        let parent = index[nodes[i].parent as usize];
        let depth = nodes[parent as usize].depth + 1;
        index[i] = to as u32;
        nodes[to] = TreeNode { parent, depth, ..nodes[i].clone() };
        stacks.push(StackId(if limit.is_none() { i as u32 - 1 } else { stack_of[i - 1] }));
        to += 1;
    }
    drop(index);
    nodes.truncate(to);
    let mut root = W::default();
    for n in nodes.iter().filter(|n| n.depth == 1) {
        root.add(&n.total);
    }
    nodes[0].total = root;
    (lay_out(nodes), stacks)
}

/// Lays out the children of every node (a node's id is above its parent's) in one array.
fn lay_out<W: Weight>(mut nodes: Vec<TreeNode<W>>) -> Tree<W> {
    // Children laid out per parent (a node's id is above its parent's).
    for i in 1..nodes.len() {
        let parent = nodes[i].parent as usize;
        nodes[parent].len += 1;
    }
    let mut next = 0u32;
    for n in nodes.iter_mut() {
        n.first = next;
        next += n.len;
    }
    let mut kids = vec![0u32; nodes.len().saturating_sub(1)];
    let mut fill: Vec<u32> = nodes.iter().map(|n| n.first).collect();
    for (i, n) in nodes.iter().enumerate().skip(1) {
        let parent = n.parent as usize;
        kids[fill[parent] as usize] = i as u32;
        fill[parent] += 1;
    }
    Tree { nodes, kids, ends: Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Measure;

    fn m(value: u64, count: u64) -> Measure {
        Measure { value, count }
    }

    /// main(0) → fib(1) → fib → fib, main → work(2); value = time, count = calls.
    fn sample() -> Paths<Measure> {
        let mut p = Paths::distinct();
        p.add(&[0], &m(10, 1));
        p.add(&[0, 1], &m(5, 1));
        p.add(&[0, 1, 1], &m(6, 2));
        p.add(&[0, 1, 1, 1], &m(8, 4));
        p.add(&[0, 2], &m(30, 3));
        p
    }

    #[test]
    fn function_totals_count_recursion_once() {
        let t = function_totals(&sample());
        assert_eq!(t.iter().map(|r| r.func).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!((t[1].self_w, t[1].total), (m(19, 7), m(19, 7)), "recursion not double counted");
        assert_eq!(t[0].total, m(59, 11));
        assert_eq!(t[2].total, m(30, 3));
        // Scratch state carried between calls leaks nothing.
        let mut scratch = TotalsScratch::default();
        let a = function_totals_with(&sample(), &mut scratch);
        let mut other = Paths::distinct();
        other.add(&[2], &m(1, 1));
        assert_eq!(
            function_totals_with(&other, &mut scratch),
            [FunctionTotal { func: 2, self_w: m(1, 1), total: m(1, 1) }]
        );
        assert_eq!(function_totals_with(&sample(), &mut scratch), a);
    }

    /// Random paths in random order (recursion, repeats, prefixes of others, empty paths, paths
    /// that leave a prefix and come back to it): the totals are those of summing each path into
    /// every function on it once, whatever the order.
    #[test]
    fn function_totals_are_the_per_path_sums_in_any_order() {
        let mut x: u64 = 11;
        let mut next = |n: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        for round in 0..20 {
            let mut paths: Vec<(Vec<FuncId>, Measure)> = Vec::new();
            for _ in 0..300 {
                let len = next(9) as usize;
                let path: Vec<FuncId> = (0..len).map(|_| next(6 + round) as FuncId).collect();
                paths.push((path, m(next(100), next(3))));
            }
            // Neighbours that share prefixes, as stack order gives, then the same shuffled.
            let mut sorted = paths.clone();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            let (mut self_w, mut total) = (HashMap::<FuncId, Measure>::new(), HashMap::<FuncId, Measure>::new());
            for (path, w) in &paths {
                let mut once: Vec<FuncId> = path.clone();
                once.sort_unstable();
                once.dedup();
                for f in once {
                    total.entry(f).or_default().add(w);
                }
                if let Some(leaf) = path.last() {
                    self_w.entry(*leaf).or_default().add(w);
                }
            }
            let mut want: Vec<FunctionTotal<Measure>> = total
                .iter()
                .filter(|(_, t)| !t.is_zero())
                .map(|(&f, &t)| FunctionTotal {
                    func: f,
                    self_w: self_w.get(&f).copied().unwrap_or_default(),
                    total: t,
                })
                .collect();
            want.sort_by_key(|t| t.func);
            let mut scratch = TotalsScratch::default();
            for order in [&paths, &sorted] {
                let mut p = Paths::distinct();
                for (path, w) in order {
                    p.add(path, w);
                }
                assert_eq!(function_totals_with(&p, &mut scratch), want, "round {round}");
            }
        }
    }

    #[test]
    fn butterfly_edges_and_entry_points() {
        let b = butterfly(&sample(), |f| f == 1);
        assert_eq!((b.total, b.self_w), (m(19, 7), m(19, 7)));
        let caller = |f| *b.callers.iter().find(|e| e.func == f).unwrap();
        assert_eq!(caller(Some(0)).last.count, 1);
        assert_eq!(caller(Some(1)).last.count, 6);
        assert_eq!(caller(Some(0)).through.value, 19);
        assert_eq!(b.callees.iter().find(|e| e.func == Some(1)).unwrap().last.count, 6);
        let bm = butterfly(&sample(), |f| f == 0);
        assert_eq!(bm.callers.len(), 1);
        assert_eq!(bm.callers[0].func, None, "main is an entry point");
        assert_eq!(bm.callees.iter().find(|e| e.func == Some(2)).unwrap().last.count, 3);
        assert_eq!(entry_points(&sample(), |_| false), [Entry { func: 0, total: m(59, 11), alone: m(10, 1) }]);
        assert_eq!(entry_points(&sample(), |f| f == 0)[0].func, 1);
    }

    #[test]
    fn trees_hold_every_prefix_once_with_its_sums() {
        // Random paths (some prefixes of others, recursion, repeats of one function): every node
        // of both trees is one distinct prefix (suffix when inverted) and carries the sums of the
        // paths through it and ending at it; sorted children keep their parent.
        let mut paths = Paths::distinct();
        let mut seen = std::collections::HashSet::new();
        let mut x: u64 = 7;
        while paths.len() < 300 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let funcs: Vec<FuncId> =
                (0..1 + (x >> 60) as usize % 7).map(|k| ((x >> (4 * k + 8)) % 6) as FuncId).collect();
            if seen.insert(funcs.clone()) {
                paths.add(&funcs, &m((x >> 40) % 1000, 1 + (x >> 30) % 3));
            }
        }
        for inverted in [false, true] {
            let mut t = prefix_tree(&paths, inverted);
            t.sort_children(|nodes, a, b| nodes[b as usize].total.value.cmp(&nodes[a as usize].total.value));
            let prefix = |mut id: u32| {
                let mut out = Vec::new();
                while id != 0 {
                    out.push(t.nodes[id as usize].func);
                    id = t.nodes[id as usize].parent;
                }
                out.reverse();
                out
            };
            let oriented = |p: &[FuncId]| -> Vec<FuncId> {
                if inverted {
                    p.iter().rev().copied().collect()
                } else {
                    p.to_vec()
                }
            };
            let mut prefixes = std::collections::HashSet::new();
            for id in 1..t.nodes.len() as u32 {
                let pre = prefix(id);
                assert_eq!(t.nodes[id as usize].depth as usize, pre.len());
                assert!(prefixes.insert(pre.clone()), "{pre:?} twice");
                let mut through = Measure::default();
                let mut ending = Measure::default();
                for (p, w) in paths.iter() {
                    let o = oriented(p);
                    if o.starts_with(&pre) {
                        through.add(w);
                        if o.len() == pre.len() {
                            ending.add(w);
                        }
                    }
                }
                let n = &t.nodes[id as usize];
                assert_eq!((n.total, n.self_w), (through, ending), "{pre:?}");
            }
            for (p, _) in paths.iter() {
                let o = oriented(p);
                for k in 1..=o.len() {
                    assert!(prefixes.contains(&o[..k]), "{:?}", &o[..k]);
                }
            }
            assert_eq!(t.nodes[0].total, paths.total());
            for id in 0..t.nodes.len() as u32 {
                let kids = t.children(id);
                assert!(kids.iter().all(|&c| t.nodes[c as usize].parent == id));
                assert!(kids
                    .windows(2)
                    .all(|w| t.nodes[w[0] as usize].total.value >= t.nodes[w[1] as usize].total.value));
            }
            assert_eq!(t.kids.len(), t.nodes.len() - 1);
        }
    }

    #[test]
    fn the_stack_tree_is_the_prefix_tree_of_the_frame_paths() {
        use clrprof_model::FrameKey;
        let mut ct = CostTree::default();
        let frames: Vec<_> = (0..5).map(|i| ct.stacks.intern_frame(FrameKey::Function(i))).collect();
        let mut x: u64 = 11;
        for _ in 0..200 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let path: Vec<_> = (0..1 + (x >> 61) as usize).map(|k| frames[((x >> (3 * k + 8)) % 5) as usize]).collect();
            let s = ct.stacks.intern_stack(&path).unwrap();
            let c = Cost { cpu_samples: (x >> 40) % 3, calls: (x >> 50) % 2, ..Default::default() };
            ct.add(1 + (x >> 20) as u32 % 2, s, &c);
        }
        let described = |t: &Tree<Cost>| {
            let mut v: Vec<(Vec<FuncId>, Cost, Cost)> = (1..t.nodes.len() as u32)
                .map(|mut id| {
                    let n = &t.nodes[id as usize];
                    let mut prefix = Vec::new();
                    while id != 0 {
                        prefix.push(t.nodes[id as usize].func);
                        id = t.nodes[id as usize].parent;
                    }
                    prefix.reverse();
                    (prefix, n.self_w, n.total)
                })
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        };
        for only in [None, Some(1u32)] {
            let keep = |t: u32| Some(t) == only;
            let filter: ThreadFilter<'_> = if only.is_some() { Some(&keep) } else { None };
            let (tree, stacks) = stack_tree(&ct, filter);
            let mut paths = Paths::distinct();
            super::super::frame_paths(&ct, filter).each_path(&mut |p, w| paths.add(p, w));
            assert_eq!(described(&tree), described(&prefix_tree(&paths, false)));
            assert_eq!(tree.nodes[0].total, paths.total());
            // Cut at a depth: the same nodes down to it, with the same costs.
            for d in [1, 2, 3] {
                let (cut, cut_stacks) = stack_tree_weighed(&ct, filter, Some(d), |c| *c);
                let want: Vec<_> = described(&tree).into_iter().filter(|n| n.0.len() <= d).collect();
                assert_eq!(described(&cut), want, "depth {d}");
                assert_eq!(cut.nodes[0].total, tree.nodes[0].total);
                for (node, &stack) in cut.nodes.iter().zip(&cut_stacks).skip(1) {
                    assert_eq!(ct.stacks.frames_of(stack).len() as u32, node.depth);
                    assert!(node.depth as usize <= d);
                }
            }
            for (node, &stack) in tree.nodes.iter().zip(&stacks).skip(1) {
                let frames = ct.stacks.frames_of(stack);
                assert_eq!(frames.last().map(|f| f.0), Some(node.func));
                assert_eq!(frames.len() as u32, node.depth);
            }
        }
    }
}
