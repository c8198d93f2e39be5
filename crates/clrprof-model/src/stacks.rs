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
    /// Frames of one source line of a function (profiles built with lines).
    line_index: FxHashMap<(FrameKey, crate::lines::SourceLine), FrameId>,
    pub nodes: Vec<StackNode>,
    node_index: FxHashMap<(Option<StackId>, FrameId), StackId>,
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
            self.frame_index.insert(key, id);
        }
        id
    }

    /// The stack `parent` → `frame` (a call from the top of `parent` into `frame`).
    pub fn intern_call(&mut self, parent: Option<StackId>, frame: FrameId) -> StackId {
        if let Some(&s) = self.node_index.get(&(parent, frame)) {
            return s;
        }
        let depth = parent.map(|p| self.nodes[p.0 as usize].depth + 1).unwrap_or(0);
        let id = StackId(self.nodes.len() as u32);
        self.nodes.push(StackNode { parent, frame, depth });
        self.node_index.insert((parent, frame), id);
        id
    }

    /// The stack `parent` → `frame` when it exists.
    pub fn call(&self, parent: Option<StackId>, frame: FrameId) -> Option<StackId> {
        self.node_index.get(&(parent, frame)).copied()
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
    pub costs: FxHashMap<StackId, Cost>,
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

    /// Adds cost to `(os_tid, stack)`.
    pub fn add(&mut self, os_tid: u32, stack: StackId, cost: &Cost) {
        let i = match self.threads.binary_search_by_key(&os_tid, |t| t.os_tid) {
            Ok(i) => i,
            Err(i) => {
                self.threads.insert(i, ThreadCosts { os_tid, costs: FxHashMap::default() });
                i
            }
        };
        self.threads[i].costs.entry(stack).or_default().add(cost);
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
            for (s, c) in &t.costs {
                v[s.0 as usize].add(c);
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
