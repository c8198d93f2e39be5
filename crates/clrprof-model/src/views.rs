//! Views derived from the [`CostTree`]: per-function rows (hot spots, the flat summary, module
//! tables), the top-down call tree, and caller/callee butterflies. All are pure functions of the
//! aggregate and a thread filter, so every report agrees with every other.

use std::collections::HashMap;

use crate::stacks::{Cost, CostTree, FrameId, StackId};

/// Selects threads by OS tid; `None` means all threads.
pub type ThreadFilter<'a> = Option<&'a dyn Fn(u32) -> bool>;

/// One function's costs. `self_cost` is spent in the function itself; `inclusive` with the
/// function anywhere on the stack (recursion counted once).
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionRow {
    pub frame: FrameId,
    pub self_cost: Cost,
    pub inclusive: Cost,
}

/// Per-function rows with any cost, unordered.
pub fn function_rows(tree: &CostTree, filter: ThreadFilter<'_>) -> Vec<FunctionRow> {
    let merged = tree.merged(filter);
    let nframes = tree.stacks.frames.len();
    let mut self_c = vec![Cost::default(); nframes];
    let mut inc = vec![Cost::default(); nframes];
    let mut seen_stamp = vec![u32::MAX; nframes];
    for (i, c) in merged.iter().enumerate() {
        if c.is_zero() {
            continue;
        }
        let s = StackId(i as u32);
        self_c[tree.stacks.node(s).frame.0 as usize].add(c);
        let mut cur = Some(s);
        while let Some(n) = cur {
            let node = tree.stacks.node(n);
            let f = node.frame.0 as usize;
            if seen_stamp[f] != i as u32 {
                seen_stamp[f] = i as u32;
                inc[f].add(c);
            }
            cur = node.parent;
        }
    }
    (0..nframes)
        .filter(|&f| !inc[f].is_zero())
        .map(|f| FunctionRow { frame: FrameId(f as u32), self_cost: self_c[f], inclusive: inc[f] })
        .collect()
}

/// A node of the top-down call tree.
#[derive(Clone, Debug)]
pub struct TreeNode {
    pub stack: StackId,
    pub frame: FrameId,
    pub self_cost: Cost,
    pub inclusive: Cost,
    /// Indexes into the returned node list.
    pub children: Vec<usize>,
}

/// The top-down call tree merged over the selected threads; returns all nodes and the roots.
/// Children are in stack-table order (callers sort them for display).
pub fn call_tree(tree: &CostTree, filter: ThreadFilter<'_>) -> (Vec<TreeNode>, Vec<usize>) {
    let merged = tree.merged(filter);
    let inc = tree.inclusive(&merged);
    let mut index: HashMap<StackId, usize> = HashMap::new();
    let mut nodes: Vec<TreeNode> = Vec::new();
    let mut roots = Vec::new();
    for (i, n) in tree.stacks.nodes.iter().enumerate() {
        if inc[i].is_zero() {
            continue;
        }
        let s = StackId(i as u32);
        let k = nodes.len();
        nodes.push(TreeNode {
            stack: s,
            frame: n.frame,
            self_cost: merged[i],
            inclusive: inc[i],
            children: Vec::new(),
        });
        index.insert(s, k);
        match n.parent.and_then(|p| index.get(&p).copied()) {
            Some(pk) => nodes[pk].children.push(k),
            None => roots.push(k),
        }
    }
    (nodes, roots)
}

/// One edge of a butterfly: `frame` is the caller (in `callers`) or callee (in `callees`);
/// `None` stands for "no managed caller" (an entry point).
#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    pub frame: Option<FrameId>,
    /// Exact calls along this edge (instrumented data).
    pub calls: u64,
    /// Cost that flowed through this edge (each unit counted once per stack).
    pub cost: Cost,
}

/// Callers and callees of a set of frames (all instantiations/overloads the user named).
#[derive(Clone, Debug, Default)]
pub struct Butterfly {
    pub frames: Vec<FrameId>,
    pub self_cost: Cost,
    pub inclusive: Cost,
    pub callers: Vec<Edge>,
    pub callees: Vec<Edge>,
}

pub fn butterfly(tree: &CostTree, frames: &[FrameId], filter: ThreadFilter<'_>) -> Butterfly {
    let merged = tree.merged(filter);
    let is_target = |f: FrameId| frames.contains(&f);
    let mut callers: HashMap<Option<FrameId>, Edge> = HashMap::new();
    let mut callees: HashMap<Option<FrameId>, Edge> = HashMap::new();
    let mut b = Butterfly { frames: frames.to_vec(), ..Default::default() };
    let st = &tree.stacks;

    // Exact call counts along edges.
    for (i, n) in st.nodes.iter().enumerate() {
        let calls = merged[i].calls;
        if calls == 0 {
            continue;
        }
        let parent_frame = n.parent.map(|p| st.node(p).frame);
        if is_target(n.frame) {
            let e = callers.entry(parent_frame).or_insert_with(|| Edge {
                frame: parent_frame,
                calls: 0,
                cost: Cost::default(),
            });
            e.calls = e.calls.saturating_add(calls);
        }
        if let Some(pf) = parent_frame {
            if is_target(pf) {
                let k = Some(n.frame);
                let e = callees.entry(k).or_insert_with(|| Edge { frame: k, calls: 0, cost: Cost::default() });
                e.calls = e.calls.saturating_add(calls);
            }
        }
    }

    // Costs: walk each costed stack once, crediting each distinct edge and the target once.
    let mut edges_seen: Vec<(bool, Option<FrameId>)> = Vec::new();
    for (i, c) in merged.iter().enumerate() {
        if c.is_zero() {
            continue;
        }
        let path = st.frames_of(StackId(i as u32));
        if !path.iter().any(|&f| is_target(f)) {
            continue;
        }
        b.inclusive.add(c);
        if is_target(*path.last().unwrap_or(&FrameId(u32::MAX))) {
            b.self_cost.add(c);
        }
        edges_seen.clear();
        for (k, &f) in path.iter().enumerate() {
            if !is_target(f) {
                continue;
            }
            let caller = if k == 0 { None } else { Some(path[k - 1]) };
            if !edges_seen.contains(&(true, caller)) {
                edges_seen.push((true, caller));
                callers
                    .entry(caller)
                    .or_insert_with(|| Edge { frame: caller, calls: 0, cost: Cost::default() })
                    .cost
                    .add(c);
            }
            if let Some(&callee) = path.get(k + 1) {
                let key = Some(callee);
                if !edges_seen.contains(&(false, key)) {
                    edges_seen.push((false, key));
                    callees
                        .entry(key)
                        .or_insert_with(|| Edge { frame: key, calls: 0, cost: Cost::default() })
                        .cost
                        .add(c);
                }
            }
        }
    }
    b.callers = callers.into_values().collect();
    b.callees = callees.into_values().collect();
    b
}

/// A function called from no other recorded frame (a root of the call tree).
#[derive(Clone, Debug, PartialEq)]
pub struct EntryPoint {
    pub frame: FrameId,
    /// Times it was entered as a root.
    pub calls: u64,
    /// Cost with it as the root.
    pub inclusive: Cost,
}

/// The roots of the call tree, by frame.
pub fn entry_points(tree: &CostTree, filter: ThreadFilter<'_>) -> Vec<EntryPoint> {
    let merged = tree.merged(filter);
    let inc = tree.inclusive(&merged);
    let mut m: HashMap<FrameId, EntryPoint> = HashMap::new();
    for (i, n) in tree.stacks.nodes.iter().enumerate() {
        if n.parent.is_none() && !inc[i].is_zero() {
            let e = m.entry(n.frame).or_insert(EntryPoint { frame: n.frame, calls: 0, inclusive: Cost::default() });
            e.calls = e.calls.saturating_add(merged[i].calls);
            e.inclusive.add(&inc[i]);
        }
    }
    let mut v: Vec<EntryPoint> = m.into_values().collect();
    v.sort_by_key(|e| e.frame);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::FrameKey;

    /// main → fib → fib → fib, main → work; costs in `time_ns`, calls exact.
    fn sample() -> (CostTree, FrameId, FrameId, FrameId) {
        let mut t = CostTree::default();
        let main = t.stacks.intern_frame(FrameKey::Function(1));
        let fib = t.stacks.intern_frame(FrameKey::Function(2));
        let work = t.stacks.intern_frame(FrameKey::Function(3));
        let c = |calls, time_ns| Cost { calls, time_ns, ..Default::default() };
        let s_main = t.stacks.intern_stack(&[main]).unwrap();
        let s_f1 = t.stacks.intern_stack(&[main, fib]).unwrap();
        let s_f2 = t.stacks.intern_stack(&[main, fib, fib]).unwrap();
        let s_f3 = t.stacks.intern_stack(&[main, fib, fib, fib]).unwrap();
        let s_w = t.stacks.intern_stack(&[main, work]).unwrap();
        t.add(1, s_main, &c(1, 10));
        t.add(1, s_f1, &c(1, 5));
        t.add(1, s_f2, &c(2, 6));
        t.add(1, s_f3, &c(4, 8));
        t.add(2, s_w, &c(3, 30));
        (t, main, fib, work)
    }

    #[test]
    fn function_rows_count_recursion_once() {
        let (t, main, fib, work) = sample();
        let rows = function_rows(&t, None);
        let row = |f| rows.iter().find(|r| r.frame == f).unwrap().clone();
        assert_eq!(row(fib).self_cost.calls, 7);
        assert_eq!(row(fib).self_cost.time_ns, 19);
        assert_eq!(row(fib).inclusive.time_ns, 19, "recursion not double counted");
        assert_eq!(row(main).inclusive.time_ns, 59);
        assert_eq!(row(work).inclusive.time_ns, 30);
        let only1 = function_rows(&t, Some(&|tid| tid == 1));
        assert!(only1.iter().all(|r| r.frame != work));
    }

    #[test]
    fn call_tree_nests_and_sums() {
        let (t, main, _, _) = sample();
        let (nodes, roots) = call_tree(&t, None);
        assert_eq!(roots.len(), 1);
        let root = &nodes[roots[0]];
        assert_eq!(root.frame, main);
        assert_eq!(root.inclusive.time_ns, 59);
        assert_eq!(root.children.len(), 2);
        let sum: u64 = root.children.iter().map(|&c| nodes[c].inclusive.time_ns).sum();
        assert_eq!(sum + root.self_cost.time_ns, root.inclusive.time_ns);
    }

    #[test]
    fn butterfly_has_exact_calls_and_entry_points() {
        let (t, main, fib, work) = sample();
        let b = butterfly(&t, &[fib], None);
        assert_eq!(b.inclusive.time_ns, 19);
        assert_eq!(b.self_cost.time_ns, 19);
        let caller = |f| b.callers.iter().find(|e| e.frame == f).unwrap().clone();
        assert_eq!(caller(Some(main)).calls, 1);
        assert_eq!(caller(Some(fib)).calls, 6);
        assert_eq!(caller(Some(main)).cost.time_ns, 19);
        let callee = b.callees.iter().find(|e| e.frame == Some(fib)).unwrap();
        assert_eq!(callee.calls, 6);
        let bm = butterfly(&t, &[main], None);
        assert_eq!(bm.callers.len(), 1);
        assert_eq!(bm.callers[0].frame, None, "main is an entry point");
        assert_eq!(bm.callees.iter().find(|e| e.frame == Some(work)).unwrap().calls, 3);
        assert_eq!(
            entry_points(&t, None),
            vec![EntryPoint {
                frame: main,
                calls: 1,
                inclusive: Cost { calls: 11, time_ns: 59, ..Default::default() }
            }]
        );
    }
}
