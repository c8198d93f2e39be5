//! Interned frames and the stack prefix tree, and the cost columns attached to stacks. This is
//! the canonical aggregate: instrumentation (exact calls and times), sampling (CPU and wall
//! samples) and allocations all add [`Cost`] to `(thread, stack)`; every view derives from it.

use crate::fasthash::FxHashMap;

use serde::Serialize;

/// Index of a frame in [`StackTable::frames`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct FrameId(pub u32);

/// Index of a node of the stack prefix tree ([`StackTable::nodes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct StackId(pub u32);

/// What a frame is, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKey {
    /// A managed function, by the runtime's FunctionID.
    Function(u64),
    /// Native code: module file name and symbol (empty when unknown).
    Native { module: String, symbol: String },
    /// A synthetic frame (`UNKNOWN`, `[native]`, a thread root).
    Label(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameKind {
    Managed,
    Native,
    Synthetic,
}

/// A frame's display data, filled in when the profile is finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub key: FrameKey,
    pub kind: FrameKind,
    /// `Namespace.Type.Method`, `libc.so.6!memcpy`, or the label.
    pub name: String,
    /// Module file name (`Demo.dll`, `libcoreclr.so`), empty when unknown.
    pub module: String,
    pub signature: String,
    /// The source line of a managed frame, in a profile built with lines (`crate::lines`); the
    /// frame is then one line of its function, and `name` stays the function's.
    pub line: Option<crate::lines::SourceLine>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackNode {
    pub parent: Option<StackId>,
    pub frame: FrameId,
    pub depth: u32,
}

/// Frames and stacks, each interned once. A stack is a node of the prefix tree: its frame plus
/// its parent stack (the caller), root first.
#[derive(Clone, Debug, Default)]
pub struct StackTable {
    pub frames: Vec<Frame>,
    frame_index: FxHashMap<FrameKey, FrameId>,
    /// The whole-function frames again, by function id alone: an instrumented trace interns one
    /// per call-tree node, millions, and hashing and comparing the enum key was 5% of reading it.
    function_index: FxHashMap<u64, FrameId>,
    /// Frames of one source line of a function (profiles built with lines).
    line_index: FxHashMap<(FrameKey, crate::lines::SourceLine), FrameId>,
    pub nodes: Vec<StackNode>,
    node_index: NodeIndex,
}

/// The stacks by `(parent, frame)`: an open-addressing table of stack ids, each key read from its
/// node, 4 bytes a slot where a map holding the keys took 17. A trace of 20 M call-tree nodes
/// interns as many stacks.
#[derive(Clone, Debug, Default)]
struct NodeIndex {
    /// A power of two of slots (none before the first stack), `EMPTY` or a stack; at most 3/4 full.
    slots: Vec<u32>,
}

impl NodeIndex {
    const EMPTY: u32 = u32::MAX;

    fn start(&self, parent: Option<StackId>, frame: FrameId) -> usize {
        let key = (parent.map_or(0, |p| p.0 as u64 + 1) << 32) | frame.0 as u64;
        // Fibonacci hashing: the high bits of the product, as many as the table has.
        let bits = self.slots.len().trailing_zeros();
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
    }

    /// The stack `(parent, frame)` of `nodes`, or the empty slot where it goes.
    fn find(&self, nodes: &[StackNode], parent: Option<StackId>, frame: FrameId) -> Result<StackId, usize> {
        if self.slots.is_empty() {
            return Err(0);
        }
        let mask = self.slots.len() - 1;
        let mut i = self.start(parent, frame);
        loop {
            let s = self.slots[i];
            if s == Self::EMPTY {
                return Err(i);
            }
            let n = &nodes[s as usize];
            if n.frame == frame && n.parent == parent {
                return Ok(StackId(s));
            }
            i = (i + 1) & mask;
        }
    }

    /// Indexes the last of `nodes`, not indexed yet, at `slot` (from [`find`](Self::find)).
    fn insert(&mut self, nodes: &[StackNode], slot: usize) {
        let n = nodes.len();
        if n * 4 > self.slots.len() * 3 {
            // Regrown to twice the size, every stack placed again.
            self.rebuild(nodes, self.slots.len() * 2);
            return;
        }
        self.slots[slot] = (n - 1) as u32;
    }

    /// Every stack of `nodes` placed in a table of at least `len` slots.
    fn rebuild(&mut self, nodes: &[StackNode], len: usize) {
        let mut len = len.max(1024);
        while nodes.len() * 4 > len * 3 {
            len *= 2;
        }
        self.slots = vec![Self::EMPTY; len];
        for (id, node) in nodes.iter().enumerate() {
            if let Err(i) = self.find(nodes, node.parent, node.frame) {
                self.slots[i] = id as u32;
            }
        }
    }
}

impl StackTable {
    pub fn intern_frame(&mut self, key: FrameKey) -> FrameId {
        self.intern_frame_at(key, None)
    }

    /// The frame of `key` at a source line (`None`: the whole function, as [`intern_frame`](Self::intern_frame)).
    pub fn intern_frame_at(&mut self, key: FrameKey, line: Option<crate::lines::SourceLine>) -> FrameId {
        let Some(line) = line else { return self.intern_key(key, None) };
        let index_key = (key, line);
        if let Some(&f) = self.line_index.get(&index_key) {
            return f;
        }
        let (key, line) = index_key;
        let id = self.intern_key(key.clone(), Some(line.clone()));
        self.line_index.insert((key, line), id);
        id
    }

    fn intern_key(&mut self, key: FrameKey, line: Option<crate::lines::SourceLine>) -> FrameId {
        if let (None, FrameKey::Function(id)) = (&line, &key) {
            if let Some(&f) = self.function_index.get(id) {
                return f;
            }
        }
        if line.is_none() {
            if let Some(&f) = self.frame_index.get(&key) {
                return f;
            }
        }
        let id = FrameId(self.frames.len() as u32);
        let kind = match &key {
            FrameKey::Function(_) => FrameKind::Managed,
            FrameKey::Native { .. } => FrameKind::Native,
            FrameKey::Label(_) => FrameKind::Synthetic,
        };
        let name = match &key {
            FrameKey::Function(id) => format!("<function 0x{id:x}>"),
            FrameKey::Native { module, symbol } if symbol.is_empty() => format!("{module}!<unknown>"),
            FrameKey::Native { module, symbol } => format!("{module}!{symbol}"),
            FrameKey::Label(l) => l.clone(),
        };
        let module = match &key {
            FrameKey::Native { module, .. } => module.clone(),
            _ => String::new(),
        };
        let whole = line.is_none();
        self.frames.push(Frame { key: key.clone(), kind, name, module, signature: String::new(), line });
        if whole {
            if let FrameKey::Function(f) = key {
                self.function_index.insert(f, id);
            }
            self.frame_index.insert(key, id);
        }
        id
    }

    /// The stack `parent` → `frame` (a call from the top of `parent` into `frame`).
    pub fn intern_call(&mut self, parent: Option<StackId>, frame: FrameId) -> StackId {
        if self.node_index.slots.is_empty() && !self.nodes.is_empty() {
            self.node_index.rebuild(&self.nodes, 0);
        }
        let slot = match self.node_index.find(&self.nodes, parent, frame) {
            Ok(s) => return s,
            Err(slot) => slot,
        };
        let depth = parent.map(|p| self.nodes[p.0 as usize].depth + 1).unwrap_or(0);
        let id = StackId(self.nodes.len() as u32);
        crate::grow::push(&mut self.nodes, StackNode { parent, frame, depth });
        self.node_index.insert(&self.nodes, slot);
        id
    }

    /// [`intern_call`](Self::intern_call) that first tries the stack `hint`. A thread's new call-tree
    /// nodes come parents first, depth first, as did those of the thread that made the stacks, so
    /// the stack after the one a reader last found is mostly the one it looks for next: one read
    /// in a run of the table where a hash probe was a cache miss, most of reading an
    /// instrumented trace.
    pub fn intern_call_near(&mut self, parent: Option<StackId>, frame: FrameId, hint: StackId) -> StackId {
        if let Some(n) = self.nodes.get(hint.0 as usize) {
            if n.frame == frame && n.parent == parent {
                return hint;
            }
        }
        self.intern_call(parent, frame)
    }

    /// The stack `parent` → `frame` when it exists.
    pub fn call(&self, parent: Option<StackId>, frame: FrameId) -> Option<StackId> {
        if self.node_index.slots.is_empty() {
            // Released (or no stack yet): the nodes read one by one.
            let at = self.nodes.iter().position(|n| n.parent == parent && n.frame == frame)?;
            return Some(StackId(at as u32));
        }
        self.node_index.find(&self.nodes, parent, frame).ok()
    }

    /// Drops the index of stacks by `(parent, frame)` (4 bytes a slot, over 5 bytes a stack) for a
    /// table that is read, not added to: a finished profile. The next [`intern_call`](Self::intern_call)
    /// builds it again.
    pub fn release_index(&mut self) {
        self.node_index.slots = Vec::new();
    }

    /// Interns a whole stack given root first.
    pub fn intern_stack(&mut self, frames_root_first: &[FrameId]) -> Option<StackId> {
        let mut s = None;
        for &f in frames_root_first {
            s = Some(self.intern_call(s, f));
        }
        s
    }

    pub fn node(&self, s: StackId) -> &StackNode {
        &self.nodes[s.0 as usize]
    }

    pub fn frame_of(&self, s: StackId) -> &Frame {
        &self.frames[self.node(s).frame.0 as usize]
    }

    /// Frames of a stack, root first.
    pub fn frames_of(&self, s: StackId) -> Vec<FrameId> {
        let mut v = Vec::with_capacity(self.node(s).depth as usize + 1);
        let mut cur = Some(s);
        while let Some(c) = cur {
            let n = self.node(c);
            v.push(n.frame);
            cur = n.parent;
        }
        v.reverse();
        v
    }

    pub fn find_frame(&self, key: &FrameKey) -> Option<FrameId> {
        self.frame_index.get(key).copied()
    }
}

/// Cost columns of one `(thread, stack)`. Every column is *self* cost (spent with this stack on
/// top); inclusive figures are sums over subtrees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Cost {
    /// Instrumented: times the top frame was entered with this stack (exact).
    pub calls: u64,
    /// Instrumented: exclusive wall time, the profiler's own time taken out.
    pub time_ns: u64,
    /// Instrumented: time the runtime was suspended (GC, debugger) while this stack was on top.
    pub suspended_ns: u64,
    /// Instrumented: the agent's own time inside its hooks, attributed here.
    pub profiler_ns: u64,
    /// Sampled: CPU-time samples and the CPU time they stand for.
    pub cpu_samples: u64,
    pub cpu_ns: u64,
    /// Sampled: wall-time samples (blocked or running) and the time they stand for.
    pub wall_samples: u64,
    pub wall_ns: u64,
    /// Allocations (sampled estimates or exact counts) made with this stack.
    pub alloc_count: u64,
    pub alloc_bytes: u64,
}

impl Cost {
    /// Adds `o`, saturating: a damaged trace may carry any value, and a sum pinned at the
    /// maximum is visibly wrong where a wrapped one would look plausible.
    pub fn add(&mut self, o: &Cost) {
        self.calls = self.calls.saturating_add(o.calls);
        self.time_ns = self.time_ns.saturating_add(o.time_ns);
        self.suspended_ns = self.suspended_ns.saturating_add(o.suspended_ns);
        self.profiler_ns = self.profiler_ns.saturating_add(o.profiler_ns);
        self.cpu_samples = self.cpu_samples.saturating_add(o.cpu_samples);
        self.cpu_ns = self.cpu_ns.saturating_add(o.cpu_ns);
        self.wall_samples = self.wall_samples.saturating_add(o.wall_samples);
        self.wall_ns = self.wall_ns.saturating_add(o.wall_ns);
        self.alloc_count = self.alloc_count.saturating_add(o.alloc_count);
        self.alloc_bytes = self.alloc_bytes.saturating_add(o.alloc_bytes);
    }

    pub fn is_zero(&self) -> bool {
        *self == Cost::default()
    }

    /// True when the enter/leave hooks measured anything here (calls or times): false for a cost
    /// made of samples or allocations alone, such as a sampled stack's in an instrumented trace.
    pub fn has_exact(&self) -> bool {
        self.calls > 0 || self.time_ns > 0 || self.suspended_ns > 0 || self.profiler_ns > 0
    }
}

/// Costs of one thread, by stack. `thread` is the OS thread id.
#[derive(Clone, Debug, Default)]
pub struct ThreadCosts {
    pub os_tid: u32,
    pub costs: StackCosts,
}

/// One thread's cost per stack, in columns: the four instrumented counters of every entry, and the
/// six sampled and allocation counters only for the entries that have any. An instrumented trace
/// of millions of call-tree nodes holds 36 bytes an entry this way, where a map of [`Cost`] took 88
/// a slot at 44–87 % load.
///
/// Entries are a sorted part (a table built whole, [`from_sorted`](Self::from_sorted): found by
/// binary search, no index) followed by entries added one by one (found through a hash index).
/// Iteration visits the sorted part in stack order, then the others in the order they were added
/// (removals may reorder those).
#[derive(Clone, Debug, Default)]
pub struct StackCosts {
    stacks: Vec<StackId>,
    /// Calls, time, suspended and profiler time per entry.
    exact: Vec<[u64; 4]>,
    /// Per entry its slot in `other` (`NO_OTHER`: none); empty while no entry has one.
    other_of: Vec<u32>,
    /// CPU samples and time, wall samples and time, allocation count and bytes.
    other: Vec<[u64; 6]>,
    /// Entries `..sorted` are sorted by stack.
    sorted: usize,
    /// Entry of each stack past `sorted`.
    index: FxHashMap<StackId, u32>,
}

const NO_OTHER: u32 = u32::MAX;

impl StackCosts {
    /// A table of instrumented costs (calls, time, suspended and profiler time) sorted by stack,
    /// each stack once.
    pub fn from_sorted(stacks: Vec<StackId>, exact: Vec<[u64; 4]>) -> StackCosts {
        debug_assert!(stacks.len() == exact.len() && stacks.windows(2).all(|w| w[0] < w[1]));
        let sorted = stacks.len();
        StackCosts { stacks, exact, sorted, ..Default::default() }
    }

    pub fn len(&self) -> usize {
        self.stacks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    fn find(&self, s: StackId) -> Option<usize> {
        if let Ok(i) = self.stacks[..self.sorted].binary_search(&s) {
            return Some(i);
        }
        self.index.get(&s).map(|&i| i as usize)
    }

    fn cost_at(&self, i: usize) -> Cost {
        let [calls, time_ns, suspended_ns, profiler_ns] = self.exact[i];
        let o = match self.other_of.get(i) {
            Some(&k) if k != NO_OTHER => self.other[k as usize],
            _ => [0; 6],
        };
        let [cpu_samples, cpu_ns, wall_samples, wall_ns, alloc_count, alloc_bytes] = o;
        Cost {
            calls,
            time_ns,
            suspended_ns,
            profiler_ns,
            cpu_samples,
            cpu_ns,
            wall_samples,
            wall_ns,
            alloc_count,
            alloc_bytes,
        }
    }

    fn set_at(&mut self, i: usize, c: &Cost) {
        self.exact[i] = [c.calls, c.time_ns, c.suspended_ns, c.profiler_ns];
        let o = [c.cpu_samples, c.cpu_ns, c.wall_samples, c.wall_ns, c.alloc_count, c.alloc_bytes];
        let k = self.other_of.get(i).copied().unwrap_or(NO_OTHER);
        if k != NO_OTHER {
            self.other[k as usize] = o;
        } else if o != [0; 6] {
            if self.other_of.is_empty() {
                self.other_of = Vec::with_capacity(self.stacks.capacity());
                self.other_of.resize(self.stacks.len(), NO_OTHER);
            }
            self.other_of[i] = self.other.len() as u32;
            self.other.push(o);
        }
    }

    /// The cost of stack `s`, if it has an entry.
    pub fn get(&self, s: StackId) -> Option<Cost> {
        self.find(s).map(|i| self.cost_at(i))
    }

    /// Adds `c` to the cost of `s` (an entry made if needed).
    pub fn add(&mut self, s: StackId, c: &Cost) {
        let i = match self.find(s) {
            Some(i) => i,
            None => self.push(s),
        };
        let mut sum = self.cost_at(i);
        sum.add(c);
        self.set_at(i, &sum);
    }

    /// Sets the cost of `s` (an entry made if needed).
    pub fn insert(&mut self, s: StackId, c: Cost) {
        let i = match self.find(s) {
            Some(i) => i,
            None => self.push(s),
        };
        self.set_at(i, &c);
    }

    fn push(&mut self, s: StackId) -> usize {
        let i = self.stacks.len();
        // A table built whole and then given a few more entries (an instrumented trace's samples)
        // grows by a quarter, not twice its size.
        crate::grow::push(&mut self.stacks, s);
        crate::grow::push(&mut self.exact, [0; 4]);
        if !self.other_of.is_empty() {
            crate::grow::push(&mut self.other_of, NO_OTHER);
        }
        self.index.insert(s, i as u32);
        i
    }

    /// Removes the entry of `s`.
    pub fn remove(&mut self, s: StackId) {
        let Some(i) = self.find(s) else { return };
        if i < self.sorted {
            // Keeps the sorted part sorted; the entries after it move down one.
            self.stacks.remove(i);
            self.exact.remove(i);
            if !self.other_of.is_empty() {
                self.other_of.remove(i);
            }
            self.sorted -= 1;
            self.reindex();
            return;
        }
        self.index.remove(&s);
        let last = self.stacks.len() - 1;
        self.stacks.swap_remove(i);
        self.exact.swap_remove(i);
        if !self.other_of.is_empty() {
            self.other_of.swap_remove(i);
        }
        if i != last {
            self.index.insert(self.stacks[i], i as u32);
        }
    }

    /// Keeps the entries for which `keep` is true; `keep` may change the cost it is given.
    pub fn retain(&mut self, mut keep: impl FnMut(StackId, &mut Cost) -> bool) {
        let mut to = 0;
        let mut sorted = 0;
        let mut other_of = Vec::new();
        let mut other = Vec::new();
        for from in 0..self.stacks.len() {
            let mut c = self.cost_at(from);
            if !keep(self.stacks[from], &mut c) {
                continue;
            }
            if from < self.sorted {
                sorted += 1;
            }
            self.stacks[to] = self.stacks[from];
            self.exact[to] = [c.calls, c.time_ns, c.suspended_ns, c.profiler_ns];
            let o = [c.cpu_samples, c.cpu_ns, c.wall_samples, c.wall_ns, c.alloc_count, c.alloc_bytes];
            if o != [0; 6] {
                if other_of.capacity() == 0 {
                    // One slot per kept entry at most: no growth past it.
                    other_of.reserve_exact(self.stacks.len());
                }
                other_of.resize(to, NO_OTHER);
                other_of.push(other.len() as u32);
                other.push(o);
            }
            to += 1;
        }
        self.stacks.truncate(to);
        self.exact.truncate(to);
        if !other_of.is_empty() {
            other_of.resize(to, NO_OTHER);
        }
        (self.other_of, self.other, self.sorted) = (other_of, other, sorted);
        self.reindex();
    }

    fn reindex(&mut self) {
        self.index.clear();
        for (i, &s) in self.stacks.iter().enumerate().skip(self.sorted) {
            self.index.insert(s, i as u32);
        }
    }

    /// Gives back the room its columns have beyond their entries.
    pub fn shrink_to_fit(&mut self) {
        self.stacks.shrink_to_fit();
        self.exact.shrink_to_fit();
        self.other_of.shrink_to_fit();
        self.other.shrink_to_fit();
        self.index.shrink_to_fit();
    }

    /// Every entry's stack and cost.
    pub fn iter(&self) -> impl Iterator<Item = (StackId, Cost)> + '_ {
        (0..self.stacks.len()).map(|i| (self.stacks[i], self.cost_at(i)))
    }

    /// Every entry's cost.
    pub fn values(&self) -> impl Iterator<Item = Cost> + '_ {
        (0..self.stacks.len()).map(|i| self.cost_at(i))
    }
}

/// The canonical aggregate: stacks and per-thread costs.
#[derive(Clone, Debug, Default)]
pub struct CostTree {
    pub stacks: StackTable,
    /// Sorted by OS tid.
    pub threads: Vec<ThreadCosts>,
}

impl CostTree {
    pub fn is_empty(&self) -> bool {
        self.threads.iter().all(|t| t.costs.values().all(|c| c.is_zero()))
    }

    /// Gives back what reading needed and views do not, once a profile is built: the room the stack
    /// table and the cost tables have beyond their entries, and the stack table's index (built
    /// again by the next stack interned).
    pub fn shrink_to_fit(&mut self) {
        self.stacks.release_index();
        self.stacks.nodes.shrink_to_fit();
        self.stacks.frames.shrink_to_fit();
        for t in &mut self.threads {
            t.costs.shrink_to_fit();
        }
    }

    /// Adds cost to `(os_tid, stack)`.
    pub fn add(&mut self, os_tid: u32, stack: StackId, cost: &Cost) {
        let i = match self.threads.binary_search_by_key(&os_tid, |t| t.os_tid) {
            Ok(i) => i,
            Err(i) => {
                self.threads.insert(i, ThreadCosts { os_tid, costs: StackCosts::default() });
                i
            }
        };
        self.threads[i].costs.add(stack, cost);
    }

    /// Self costs merged over the selected threads (`None` = all), indexed by stack.
    pub fn merged(&self, filter: Option<&dyn Fn(u32) -> bool>) -> Vec<Cost> {
        let mut v = vec![Cost::default(); self.stacks.nodes.len()];
        for t in &self.threads {
            if let Some(f) = filter {
                if !f(t.os_tid) {
                    continue;
                }
            }
            for (s, c) in t.costs.iter() {
                v[s.0 as usize].add(&c);
            }
        }
        v
    }

    /// Inclusive costs per stack node from self costs (children after parents in the table).
    pub fn inclusive(&self, self_costs: &[Cost]) -> Vec<Cost> {
        let mut inc = self_costs.to_vec();
        for i in (0..self.stacks.nodes.len()).rev() {
            if let Some(p) = self.stacks.nodes[i].parent {
                let c = inc[i];
                inc[p.0 as usize].add(&c);
            }
        }
        inc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_interned_as_a_prefix_tree() {
        let mut t = StackTable::default();
        let a = t.intern_frame(FrameKey::Function(1));
        let b = t.intern_frame(FrameKey::Function(2));
        assert_eq!(t.intern_frame(FrameKey::Function(1)), a);
        let s1 = t.intern_stack(&[a, b]).unwrap();
        let s2 = t.intern_stack(&[a, b]).unwrap();
        assert_eq!(s1, s2);
        let s3 = t.intern_stack(&[a]).unwrap();
        assert_eq!(t.node(s1).parent, Some(s3));
        assert_eq!(t.frames_of(s1), vec![a, b]);
        assert_eq!(t.node(s1).depth, 1);
        let n = t.intern_frame(FrameKey::Native { module: "libc.so.6".into(), symbol: "write".into() });
        assert_eq!(t.frames[n.0 as usize].name, "libc.so.6!write");
    }

    /// Enough stacks to regrow the index several times: each is found again, and none twice.
    #[test]
    fn many_stacks_are_each_interned_once() {
        let mut t = StackTable::default();
        let frames: Vec<FrameId> = (0..50).map(|i| t.intern_frame(FrameKey::Function(i))).collect();
        let mut made = Vec::new();
        for i in 0..20_000usize {
            let parent = (i > 0).then(|| made[(i * 7919) % i]);
            made.push(t.intern_call(parent, frames[i % 50]));
        }
        assert_eq!(t.nodes.len(), made.iter().collect::<std::collections::HashSet<_>>().len());
        for (i, &s) in made.iter().enumerate() {
            let parent = (i > 0).then(|| made[(i * 7919) % i]);
            assert_eq!(t.call(parent, frames[i % 50]), Some(s));
            assert_eq!(t.intern_call(parent, frames[i % 50]), s);
            assert_eq!((t.node(s).parent, t.node(s).frame), (parent, frames[i % 50]));
        }
        assert_eq!(t.call(Some(made[5]), FrameId(999)), None);

        // Released, the table is read one node at a time, and built again by the next intern.
        t.release_index();
        assert_eq!(
            t.call(Some(made[7]), frames[0]),
            t.nodes.iter().position(|n| n.parent == Some(made[7]) && n.frame == frames[0]).map(|i| StackId(i as u32))
        );
        for (i, &s) in made.iter().enumerate().step_by(97) {
            let parent = (i > 0).then(|| made[(i * 7919) % i]);
            assert_eq!(t.call(parent, frames[i % 50]), Some(s));
        }
        let len = t.nodes.len();
        for (i, &s) in made.iter().enumerate() {
            let parent = (i > 0).then(|| made[(i * 7919) % i]);
            assert_eq!(t.intern_call(parent, frames[i % 50]), s);
        }
        assert_eq!(t.nodes.len(), len, "no stack made twice after the index was built again");
        let new = t.intern_call(Some(made[3]), FrameId(999));
        assert_eq!((new.0 as usize, t.call(Some(made[3]), FrameId(999))), (len, Some(new)));
    }

    /// A hint is taken only when it is the stack asked for: right, wrong, past the table's end.
    #[test]
    fn a_hinted_intern_is_the_plain_one() {
        let mut t = StackTable::default();
        let frames: Vec<FrameId> = (0..5).map(|i| t.intern_frame(FrameKey::Function(i))).collect();
        let a = t.intern_call(None, frames[0]);
        let b = t.intern_call(Some(a), frames[1]);
        let c = t.intern_call(Some(b), frames[2]);
        assert_eq!(t.intern_call_near(Some(a), frames[1], b), b, "the hint itself");
        assert_eq!(t.intern_call_near(Some(a), frames[1], c), b, "a wrong hint: found by the index");
        assert_eq!(t.intern_call_near(Some(b), frames[1], a), t.intern_call(Some(b), frames[1]));
        assert_eq!(t.intern_call_near(Some(c), frames[3], StackId(u32::MAX)), StackId(4), "past the end: made");
        assert_eq!(t.nodes.len(), 5);
    }

    #[test]
    fn exact_costs_are_the_hooks_own() {
        assert!(!Cost::default().has_exact());
        let sampled =
            Cost { cpu_samples: 3, cpu_ns: 12_000_000, wall_samples: 1, alloc_bytes: 24, ..Default::default() };
        assert!(!sampled.has_exact());
        assert!(Cost { calls: 1, ..Default::default() }.has_exact(), "a call of no measurable time");
        assert!(Cost { time_ns: 1, ..sampled }.has_exact());
        assert!(Cost { suspended_ns: 1, ..Default::default() }.has_exact());
        assert!(Cost { profiler_ns: 1, ..Default::default() }.has_exact());
    }

    /// The columns give back every cost as added, whichever part holds the entry, through
    /// removals and a retain that changes costs.
    #[test]
    fn stack_costs_keep_every_column() {
        let st = |i| StackId(i);
        let mut c =
            StackCosts::from_sorted(vec![st(2), st(5), st(9)], vec![[1, 10, 0, 0], [2, 20, 3, 4], [3, 30, 0, 0]]);
        assert_eq!(
            c.get(st(5)),
            Some(Cost { calls: 2, time_ns: 20, suspended_ns: 3, profiler_ns: 4, ..Default::default() })
        );
        assert_eq!(c.get(st(4)), None);
        let sampled = Cost {
            cpu_samples: 1,
            cpu_ns: 7,
            wall_samples: 2,
            wall_ns: 9,
            alloc_count: 3,
            alloc_bytes: 24,
            ..Default::default()
        };
        c.add(st(9), &sampled);
        c.add(st(1), &sampled);
        c.add(st(1), &Cost { calls: 1, ..Default::default() });
        c.add(st(7), &Cost { time_ns: 5, ..Default::default() });
        assert_eq!(c.len(), 5);
        assert_eq!(c.get(st(9)), Some(Cost { calls: 3, time_ns: 30, ..sampled }));
        assert_eq!(c.get(st(1)), Some(Cost { calls: 1, ..sampled }));
        let order: Vec<StackId> = c.iter().map(|(s, _)| s).collect();
        assert_eq!(order, vec![st(2), st(5), st(9), st(1), st(7)], "the sorted part, then as added");
        c.remove(st(5));
        c.remove(st(1));
        c.remove(st(3));
        assert_eq!(c.iter().map(|(s, _)| s).collect::<Vec<_>>(), vec![st(2), st(9), st(7)]);
        assert_eq!(c.get(st(7)), Some(Cost { time_ns: 5, ..Default::default() }));
        c.insert(st(8), sampled);
        c.retain(|s, x| {
            x.alloc_count = 0;
            s != st(2)
        });
        let all: Vec<(StackId, Cost)> = c.iter().collect();
        assert_eq!(
            all,
            vec![
                (st(9), Cost { calls: 3, time_ns: 30, alloc_count: 0, ..sampled }),
                (st(7), Cost { time_ns: 5, ..Default::default() }),
                (st(8), Cost { alloc_count: 0, ..sampled }),
            ]
        );
        assert_eq!(c.get(st(9)).map(|x| x.calls), Some(3), "still found by binary search");
        c.add(st(2), &Cost { calls: 1, ..Default::default() });
        assert_eq!(c.get(st(2)).map(|x| x.calls), Some(1));
        assert_eq!(c.values().map(|x| x.calls).sum::<u64>(), 4);
    }

    #[test]
    fn inclusive_sums_subtrees() {
        let mut ct = CostTree::default();
        let a = ct.stacks.intern_frame(FrameKey::Function(1));
        let b = ct.stacks.intern_frame(FrameKey::Function(2));
        let sa = ct.stacks.intern_stack(&[a]).unwrap();
        let sab = ct.stacks.intern_stack(&[a, b]).unwrap();
        ct.add(7, sa, &Cost { calls: 1, time_ns: 10, ..Default::default() });
        ct.add(7, sab, &Cost { calls: 3, time_ns: 5, ..Default::default() });
        ct.add(8, sab, &Cost { calls: 2, time_ns: 5, ..Default::default() });
        let m = ct.merged(None);
        let inc = ct.inclusive(&m);
        assert_eq!(inc[sa.0 as usize].time_ns, 20);
        assert_eq!(inc[sab.0 as usize].calls, 5);
        let only7 = ct.merged(Some(&|t| t == 7));
        assert_eq!(ct.inclusive(&only7)[sa.0 as usize].time_ns, 15);
    }
}
