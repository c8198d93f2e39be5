//! The one aggregation engine. Every figure of a profile's stacks — function totals (hot spots,
//! the flat summary, the per-thread tables, the Monte Carlo hit tables, the diff's rows), top-down
//! and inverted call trees (the report's, the viewer's, the differential one, the flame-graph
//! export's), callers and callees, entry points — is computed here, the same way for the report,
//! the viewer, the diff and the exports, in two steps:
//!
//! 1. a selection of the profile's stacks (the threads, the weight; the time window is chosen when
//!    the profile is built) becomes [`Paths`]: call paths of function ids, root first, each with a
//!    [`Weight`]. The report's weight is the full [`Cost`] (every column at once), the viewer's a
//!    [`Measure`] (one weight's value and count), the diff's a side's value and calls. On their way
//!    in, paths pass through the [`transform`]s.
//! 2. the figures ([`figures`]) are pure functions of the paths, generic over the weight.
//!
//! What a function id stands for is the caller's choice: a frame (`FrameId`, the report), a display
//! name (the viewer), a function matched across two profiles (the diff). A new dimension of the
//! stacks (a logical async stack, a source line) is added once, where stacks become paths, and
//! every figure of every consumer has it.

pub mod figures;
pub mod search;
pub mod transform;
pub mod wait;

use clrprof_model::fasthash::FxHashMap;
use clrprof_model::{Cost, CostTree, FrameId, StackId, StackTable};

pub use figures::{
    butterfly, entry_points, function_totals, function_totals_with, prefix_tree, stack_tree, stack_tree_weighed,
    Butterfly, Edge, Entry, FunctionTotal, TotalsScratch, Tree, TreeNode,
};
pub use search::Matcher;
pub use transform::{apply_transforms, FuncTable, Transform};
pub use wait::{is_wait, WAIT_FUNCTIONS, WAIT_SYMBOLS};

/// A function of a path: an index into the caller's own table of functions.
pub type FuncId = u32;

/// Selects threads by OS tid; `None` means all threads.
pub type ThreadFilter<'a> = Option<&'a dyn Fn(u32) -> bool>;

/// What a path weighs: summed along the figures (saturating), zero when it weighs nothing.
pub trait Weight: Copy + Default {
    fn add(&mut self, o: &Self);
    fn is_zero(&self) -> bool;
}

impl Weight for Cost {
    fn add(&mut self, o: &Self) {
        Cost::add(self, o)
    }
    fn is_zero(&self) -> bool {
        Cost::is_zero(self)
    }
}

/// One weight's amount (`value`: ns, bytes, calls, ...) and the samples, calls or objects behind
/// it (`count`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Measure {
    pub value: u64,
    pub count: u64,
}

impl Weight for Measure {
    fn add(&mut self, o: &Self) {
        self.value = self.value.saturating_add(o.value);
        self.count = self.count.saturating_add(o.count);
    }
    fn is_zero(&self) -> bool {
        self.value == 0 && self.count == 0
    }
}

/// Weighted call paths, root first, in the order they were first added. The functions of all
/// paths lie in one array (a vector per path cost an allocation each: a large profile has
/// millions of stacks).
#[derive(Clone, Debug)]
pub struct Paths<W> {
    funcs: Vec<FuncId>,
    /// End of each path in `funcs`.
    ends: Vec<usize>,
    weights: Vec<W>,
    /// Path → index, when paths added twice are merged into one.
    index: Option<FxHashMap<Vec<FuncId>, usize>>,
}

impl<W: Weight> Paths<W> {
    /// Paths where the same path added again adds to the first.
    pub fn merging() -> Self {
        Paths { funcs: Vec::new(), ends: Vec::new(), weights: Vec::new(), index: Some(FxHashMap::default()) }
    }

    /// Paths the caller adds once each (stacks of one table, merged over threads first).
    pub fn distinct() -> Self {
        Paths { funcs: Vec::new(), ends: Vec::new(), weights: Vec::new(), index: None }
    }

    pub fn add(&mut self, path: &[FuncId], w: &W) {
        if let Some(index) = &mut self.index {
            if let Some(&i) = index.get(path) {
                self.weights[i].add(w);
                return;
            }
            index.insert(path.to_vec(), self.weights.len());
        }
        self.funcs.extend_from_slice(path);
        self.ends.push(self.funcs.len());
        self.weights.push(*w);
    }

    /// Drops the index that merges paths (its copy of every path): paths added later are added
    /// as they come. For path sets kept after they are built.
    pub fn stop_merging(&mut self) {
        self.index = None;
    }

    pub fn len(&self) -> usize {
        self.weights.len()
    }

    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }

    /// The functions of path `i`, root first.
    pub fn path(&self, i: usize) -> &[FuncId] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.funcs[start..self.ends[i]]
    }

    pub fn weight(&self, i: usize) -> &W {
        &self.weights[i]
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[FuncId], &W)> + '_ {
        (0..self.len()).map(move |i| (self.path(i), &self.weights[i]))
    }

    /// The weights of every path summed.
    pub fn total(&self) -> W {
        let mut t = W::default();
        for w in &self.weights {
            t.add(w);
        }
        t
    }
}

/// Anything that yields weighted call paths, root first, one at a time: stored [`Paths`], or
/// the stacks of a stack table with their weights ([`StackPaths`]), walked into one buffer and
/// never stored.
pub trait PathSource<W> {
    fn each_path(&self, f: &mut dyn FnMut(&[FuncId], &W));
}

impl<W: Weight> PathSource<W> for Paths<W> {
    fn each_path(&self, f: &mut dyn FnMut(&[FuncId], &W)) {
        for (path, w) in self.iter() {
            f(path, w);
        }
    }
}

/// Stacks of a stack table with a weight each, as paths of their frames (`FrameId.0`).
pub struct StackPaths<'a, W> {
    pub stacks: &'a StackTable,
    pub weights: Vec<(StackId, W)>,
}

impl<W: Weight> PathSource<W> for StackPaths<'_, W> {
    fn each_path(&self, f: &mut dyn FnMut(&[FuncId], &W)) {
        let mut cursor = StackCursor::default();
        for (s, w) in &self.weights {
            f(cursor.move_to(self.stacks, *s), w);
        }
    }
}

/// The frames of one stack after another (as `FrameId.0`, root first), each stack's walk up the
/// table stopping where it meets the stack before: stacks in table order are neighbours in its
/// prefix tree, so most of a path is the last one's. Walking every stack to its root was most of
/// a summary's time on an instrumented trace (a million stacks, tens of frames deep).
#[derive(Default)]
pub struct StackCursor {
    /// The current stack's stacks and frames, root first (index = depth).
    ids: Vec<StackId>,
    frames: Vec<FuncId>,
    /// The new part of a walk, leaf first.
    walked: Vec<(StackId, FuncId)>,
}

impl StackCursor {
    /// The frames of `stack`, root first.
    pub fn move_to(&mut self, st: &StackTable, stack: StackId) -> &[FuncId] {
        self.walked.clear();
        let mut cur = Some(stack);
        let mut keep = 0;
        while let Some(c) = cur {
            let n = st.node(c);
            let d = n.depth as usize;
            if self.ids.get(d) == Some(&c) {
                keep = d + 1;
                break;
            }
            self.walked.push((c, n.frame.0));
            cur = n.parent;
        }
        self.ids.truncate(keep);
        self.frames.truncate(keep);
        for &(c, f) in self.walked.iter().rev() {
            self.ids.push(c);
            self.frames.push(f);
        }
        &self.frames
    }
}

/// Appends the functions of `stack` (root first) to `buf`, each frame mapped by `func_of`.
pub fn push_stack(st: &StackTable, stack: StackId, func_of: impl Fn(FrameId) -> FuncId, buf: &mut Vec<FuncId>) {
    let base = buf.len();
    let mut cur = Some(stack);
    while let Some(c) = cur {
        let n = st.node(c);
        buf.push(func_of(n.frame));
        cur = n.parent;
    }
    buf[base..].reverse();
}

/// The report's paths: every stack with a cost in the selected threads, its frames as function
/// ids (`FrameId.0`), its costs merged over those threads; in stack order.
///
/// The same sums as [`CostTree::merged`] without its cost for every stack of the table: a first
/// pass marks the stacks the threads have, then each gets its slot, in stack order.
pub fn frame_paths<'a>(tree: &'a CostTree, filter: ThreadFilter<'_>) -> StackPaths<'a, Cost> {
    const NONE: u32 = u32::MAX;
    let selected = || tree.threads.iter().filter(move |t| filter.is_none_or(|f| f(t.os_tid)));
    let mut slot = vec![NONE; tree.stacks.nodes.len()];
    for t in selected() {
        for (s, _) in t.costs.iter() {
            slot[s.0 as usize] = 0;
        }
    }
    let mut weights = Vec::with_capacity(slot.iter().filter(|&&k| k != NONE).count());
    for (i, k) in slot.iter_mut().enumerate() {
        if *k != NONE {
            *k = weights.len() as u32;
            weights.push((StackId(i as u32), Cost::default()));
        }
    }
    for t in selected() {
        for (s, c) in t.costs.iter() {
            weights[slot[s.0 as usize] as usize].1.add(&c);
        }
    }
    weights.retain(|(_, c)| !c.is_zero());
    StackPaths { stacks: &tree.stacks, weights }
}

/// The stacks with a cost of the selected threads, thread by thread and not merged: for figures
/// that add up the same however a stack's cost is split over threads ([`function_totals`]), with no
/// merged cost per stack (88 bytes a stack) built first.
pub struct ThreadStackPaths<'a> {
    tree: &'a CostTree,
    threads: Vec<usize>,
}

/// [`ThreadStackPaths`] of the threads `filter` selects.
pub fn thread_stack_paths<'a>(tree: &'a CostTree, filter: ThreadFilter<'_>) -> ThreadStackPaths<'a> {
    let threads = (0..tree.threads.len()).filter(|&i| filter.is_none_or(|f| f(tree.threads[i].os_tid))).collect();
    ThreadStackPaths { tree, threads }
}

impl PathSource<Cost> for ThreadStackPaths<'_> {
    fn each_path(&self, f: &mut dyn FnMut(&[FuncId], &Cost)) {
        let mut cursor = StackCursor::default();
        for &i in &self.threads {
            for (s, c) in self.tree.threads[i].costs.iter() {
                if c.is_zero() {
                    continue;
                }
                f(cursor.move_to(&self.tree.stacks, s), &c);
            }
        }
    }
}

/// [`frame_paths`] of one thread's own costs (a per-thread table costs that thread's stacks, not
/// the whole stack table).
pub fn thread_frame_paths<'a>(tree: &'a CostTree, t: &clrprof_model::stacks::ThreadCosts) -> StackPaths<'a, Cost> {
    let weights = t.costs.iter().filter(|(_, c)| !c.is_zero());
    StackPaths { stacks: &tree.stacks, weights: weights.collect() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_model::FrameKey;

    /// Stacks visited in table order, in reverse and at random: each walk gives the stack's
    /// frames, whatever stack came before.
    #[test]
    fn a_stack_cursor_gives_each_stack_s_frames() {
        let mut st = StackTable::default();
        let frames: Vec<FrameId> = (0..7).map(|i| st.intern_frame(FrameKey::Function(i))).collect();
        let mut made = Vec::new();
        let mut x: u64 = 3;
        for i in 0..3_000usize {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let parent = (i > 0 && (x >> 60) != 0).then(|| made[(x >> 33) as usize % i]);
            made.push(st.intern_call(parent, frames[(x >> 40) as usize % 7]));
        }
        let mut orders: Vec<Vec<StackId>> = vec![(0..st.nodes.len() as u32).map(StackId).collect()];
        orders.push(orders[0].iter().rev().copied().collect());
        orders.push((0..3_000).map(|i| made[(i * 7919) % made.len()]).collect());
        let mut cursor = StackCursor::default();
        for order in orders {
            for s in order {
                let want: Vec<FuncId> = st.frames_of(s).iter().map(|f| f.0).collect();
                assert_eq!(cursor.move_to(&st, s), &want[..]);
            }
        }
    }
}
