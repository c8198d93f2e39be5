//! What the interactive viewer asks: the profile's stacks for a weight and thread mode, passed
//! through a list of transforms (focus, merge, drop, collapse, just-my-code), aggregated into a
//! call tree from which hot spots, the top-down and inverted trees, the butterfly (callers and
//! callees with exact per-edge values from real stacks) and flame-graph cells are answered in
//! small pages. The page draws; every figure comes from here.
//!
//! Functions are identified by display name (see [`select::display_names`]): all frames with one
//! name are one function, so a transform or a selection survives a change of time range.

use crate::SaturatingSum;
use std::collections::HashMap;

use clrprof_model::fasthash::FxHashMap;
use clrprof_model::{FrameKind, Metric, Profile};
use serde::{Deserialize, Serialize};

use crate::select;
use crate::{QueryError, Result};

/// Frames that wait rather than work (blocked, sleeping, polling), greyed in the viewer. Matched
/// on the function's display name: a managed prefix, or the symbol after `module!` for native
/// frames.
pub const WAIT_FUNCTIONS: &[&str] = &[
    "System.Threading.Thread.Sleep",
    "System.Threading.Thread.SleepInternal",
    "System.Threading.Thread.Join",
    "System.Threading.Monitor.Wait",
    "System.Threading.Monitor.Enter",
    "System.Threading.Monitor.ReliableEnter",
    "System.Threading.Monitor.TryEnter",
    "System.Threading.WaitHandle.Wait",
    "System.Threading.WaitHandle.WaitOne",
    "System.Threading.WaitHandle.WaitAny",
    "System.Threading.WaitHandle.WaitAll",
    "System.Threading.WaitHandle.WaitMultiple",
    "System.Threading.WaitHandle.WaitOneNoCheck",
    "System.Threading.WaitHandle.WaitOneCore",
    "System.Threading.ManualResetEventSlim.Wait",
    "System.Threading.SemaphoreSlim.Wait",
    "System.Threading.SemaphoreSlim.WaitUntilCountOrTimeout",
    "System.Threading.SpinWait.SpinOnce",
    "System.Threading.LowLevelLifoSemaphore.Wait",
    "System.Threading.LowLevelLifoSemaphore.WaitForSignal",
    "System.Threading.LowLevelMonitor.Wait",
    "System.Threading.LowLevelSpinWaiter.Wait",
    "System.Threading.PortableThreadPool.GateThread.GateThreadStart",
    "System.Threading.Tasks.Task.Wait",
    "System.Threading.Tasks.Task.InternalWait",
    "System.Threading.Tasks.Task.SpinThenBlockingWait",
    "System.Threading.Tasks.Task.WaitAll",
    "System.Threading.Tasks.Task.WaitAny",
    "System.Runtime.CompilerServices.TaskAwaiter.GetResult",
    "System.Net.Sockets.Socket.Receive",
    "System.Net.Sockets.Socket.Accept",
    "System.Net.Sockets.Socket.Poll",
    "System.Net.Sockets.Socket.Select",
    "System.Net.Sockets.SocketAsyncEngine.EventLoop",
    "System.Console.ReadLine",
    "Interop+Sys.WaitForSocketEvents",
    "Interop+Sys.Read",
    "Interop+Sys.Poll",
    "Interop+Sys.LowLevelMonitor_Wait",
    "Interop+Sys.LowLevelMonitor_TimedWait",
];

/// Native symbols that block (libc and the kernel entry points).
pub const WAIT_SYMBOLS: &[&str] = &[
    "futex",
    "__futex_abstimed_wait_common",
    "__futex_abstimed_wait_common64",
    "futex_wait",
    "syscall",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "pthread_cond_clockwait",
    "__pthread_cond_wait",
    "__pthread_cond_timedwait",
    "pthread_join",
    "pthread_mutex_lock",
    "__lll_lock_wait",
    "sem_wait",
    "sem_timedwait",
    "epoll_wait",
    "epoll_pwait",
    "poll",
    "ppoll",
    "__poll",
    "select",
    "pselect",
    "nanosleep",
    "clock_nanosleep",
    "__clock_nanosleep",
    "usleep",
    "sleep",
    "read",
    "recv",
    "recvfrom",
    "recvmsg",
    "accept",
    "accept4",
    "waitpid",
    "wait4",
    "sigtimedwait",
];

/// True when a function (display name) waits rather than works.
pub fn is_wait(name: &str) -> bool {
    if let Some((_, sym)) = name.split_once('!') {
        let sym = sym.split('(').next().unwrap_or(sym).trim();
        return WAIT_SYMBOLS.contains(&sym);
    }
    // Managed names: `Type.Method`, overloads `Type.Method(params)`, generics `Method<T>`.
    let base = name.split(['(', '<']).next().unwrap_or(name);
    WAIT_FUNCTIONS.iter().any(|w| base == *w || base.strip_prefix(w).is_some_and(|r| r.starts_with('.')))
}

/// One transform of the stacks. Functions are display names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Transform {
    /// Keep only stacks through `function`, starting at its outermost call (all call sites merged).
    FocusFunction { function: String },
    /// Keep only stacks that start with `path` (root first), starting at its last frame.
    FocusSubtree { path: Vec<String> },
    /// Remove `function`'s frames: its cost goes to its caller.
    Merge { function: String },
    /// Remove every stack that contains `function`.
    Drop { function: String },
    /// Consecutive frames of `module` become one frame `[module]`.
    CollapseModule { module: String },
    /// Consecutive frames in `namespace` (a name prefix) become one frame `namespace.*`.
    CollapseNamespace { namespace: String },
    /// `function` … `function` (direct or indirect recursion) becomes one `function` frame.
    CollapseRecursion { function: String },
    /// Fold `System.*` and `Microsoft.*` frames into their callers.
    JustMyCode,
}

impl Transform {
    /// The transform list from its JSON text (the page keeps it in the URL).
    pub fn parse_list(json: &str) -> Result<Vec<Transform>> {
        if json.trim().is_empty() {
            return Ok(Vec::new());
        }
        serde_json::from_str(json).map_err(|e| QueryError::Unsupported(format!("bad transform list: {e}")))
    }
}

/// How threads are shown: merged, one root per thread, or one thread.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ThreadMode {
    Merged,
    PerThread,
    Only(u32),
}

/// Everything that shapes a [`StackView`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewSpec {
    pub metric: Metric,
    pub threads: ThreadMode,
    pub transforms: Vec<Transform>,
}

/// A function of the view (after transforms).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Func {
    pub name: String,
    pub module: String,
    pub kind: FrameKind,
    pub wait: bool,
}

/// Index in [`StackView::funcs`].
pub type FuncId = u32;

/// A call-tree node: the root (0) is the empty stack.
#[derive(Clone, Debug)]
struct Node {
    parent: u32,
    func: FuncId,
    depth: u32,
    self_value: u64,
    total: u64,
    self_count: u64,
    count: u64,
    /// Its children: `Tree::kids[first..first + len]`, by total, then name.
    first: u32,
    len: u32,
}

/// A call tree: its nodes, and every node's children in one array (a vector per node cost a
/// memory allocation each: a per-thread tree of a large profile has millions of nodes).
#[derive(Clone, Debug, Default)]
struct Tree {
    nodes: Vec<Node>,
    kids: Vec<u32>,
}

impl Tree {
    fn children(&self, id: u32) -> &[u32] {
        let n = &self.nodes[id as usize];
        &self.kids[n.first as usize..(n.first + n.len) as usize]
    }
}

/// Paths above which the top-down and inverted trees are built on two threads.
const PARALLEL_TREES: usize = 4096;

/// A unique transformed stack and its cost.
#[derive(Clone, Debug)]
struct Path {
    funcs: Vec<FuncId>,
    value: u64,
    count: u64,
}

/// The stacks of one weight and thread mode after the transforms, aggregated.
pub struct StackView {
    pub metric: Metric,
    pub funcs: Vec<Func>,
    func_index: FxHashMap<String, FuncId>,
    paths: Vec<Path>,
    top_down: Tree,
    inverted: Tree,
    /// The metric summed over every stack kept.
    pub total: u64,
    /// Samples (calls, objects, exceptions, contentions) behind `total`.
    pub count: u64,
    /// Part of the values are estimates (the event weights, see [`select::EventWeight`]).
    pub estimated: bool,
    /// What the event weights' numbers are ([`select::EventWeight::note`]); `None` otherwise.
    pub note: Option<String>,
}

fn starts_framework(name: &str) -> bool {
    name.starts_with("System.")
        || name.starts_with("Microsoft.")
        || name.starts_with("Interop+")
        || name.starts_with("Interop.")
}

impl StackView {
    /// Builds the view. Fails only on a transform naming nothing (so the page can say so).
    pub fn build(p: &Profile, spec: &ViewSpec) -> StackView {
        let names = select::display_names(p);
        let frames = &p.costs.stacks.frames;
        let mut v = StackView {
            metric: spec.metric,
            funcs: Vec::new(),
            func_index: FxHashMap::default(),
            paths: Vec::new(),
            top_down: Tree::default(),
            inverted: Tree::default(),
            total: 0,
            count: 0,
            estimated: false,
            note: None,
        };
        // Frame → function.
        let frame_func: Vec<FuncId> =
            frames.iter().enumerate().map(|(i, f)| v.intern(&names[i], &f.module, f.kind)).collect();
        // Event weights (exceptions, lock wait): stacks over all threads, from the runtime events.
        if let Some(w) = select::event_stacks(p, spec.metric) {
            v.estimated = w.estimated;
            v.note = Some(w.note);
            if spec.threads != ThreadMode::Merged {
                v.note = v.note.map(|n| n + " (not recorded per thread: the thread choice does not apply)");
            }
            let mut unique: FxHashMap<Vec<FuncId>, usize> = FxHashMap::default();
            let mut buf = Vec::new();
            for e in w.stacks {
                buf.clear();
                match e.stack {
                    Some(sid) => {
                        let mut cur = Some(sid);
                        while let Some(c) = cur {
                            let n = p.costs.stacks.node(c);
                            buf.push(frame_func[n.frame.0 as usize]);
                            cur = n.parent;
                        }
                        buf.reverse();
                    }
                    None => buf.push(v.intern(&e.leaf, "", FrameKind::Synthetic)),
                }
                v.add_path(&spec.transforms, &mut buf, 0, e.value, e.count, &mut unique);
            }
            v.build_trees();
            return v;
        }
        // Raw stacks: (thread root, frames) with cost, in stack order for determinism.
        let mut raw: Vec<(Option<u32>, usize, u64, u64)> = Vec::new();
        for t in &p.costs.threads {
            let keep = match spec.threads {
                ThreadMode::Merged | ThreadMode::PerThread => true,
                ThreadMode::Only(tid) => tid == t.os_tid,
            };
            if !keep {
                continue;
            }
            let root = (spec.threads == ThreadMode::PerThread).then_some(t.os_tid);
            for (s, c) in &t.costs {
                let (count, value) = select::measure(spec.metric, c);
                if value > 0 || count > 0 {
                    raw.push((root, s.0 as usize, value, count));
                }
            }
        }
        raw.sort_by_key(|r| (r.0, r.1));
        let mut unique: FxHashMap<Vec<FuncId>, usize> = FxHashMap::default();
        let mut buf = Vec::new();
        let mut roots: FxHashMap<u32, FuncId> = FxHashMap::default();
        for (root, s, value, count) in raw {
            buf.clear();
            if let Some(tid) = root {
                let f = match roots.get(&tid) {
                    Some(&f) => f,
                    None => {
                        let f = v.intern(&format!("thread {}", select::thread_label(p, tid)), "", FrameKind::Synthetic);
                        roots.insert(tid, f);
                        f
                    }
                };
                buf.push(f);
            }
            let base = buf.len();
            let mut cur = Some(clrprof_model::StackId(s as u32));
            while let Some(c) = cur {
                let n = p.costs.stacks.node(c);
                buf.push(frame_func[n.frame.0 as usize]);
                cur = n.parent;
            }
            buf[base..].reverse();
            v.add_path(&spec.transforms, &mut buf, base, value, count, &mut unique);
        }
        v.build_trees();
        v
    }

    /// The top-down and inverted trees of the paths (on two threads for many paths).
    fn build_trees(&mut self) {
        let (top_down, inverted) = if self.paths.len() > PARALLEL_TREES {
            let this = &*self;
            std::thread::scope(|scope| {
                let inv = scope.spawn(move || this.tree(true));
                let top = this.tree(false);
                (top, inv.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            })
        } else {
            (self.tree(false), self.tree(true))
        };
        self.top_down = top_down;
        self.inverted = inverted;
    }

    /// Transforms one stack (root first, `fixed` thread roots) and adds its cost.
    fn add_path(
        &mut self,
        ts: &[Transform],
        buf: &mut Vec<FuncId>,
        fixed: usize,
        value: u64,
        count: u64,
        unique: &mut FxHashMap<Vec<FuncId>, usize>,
    ) {
        if !self.apply(ts, buf, fixed) {
            return;
        }
        match unique.get(buf) {
            Some(&i) => {
                self.paths[i].value = self.paths[i].value.saturating_add(value);
                self.paths[i].count = self.paths[i].count.saturating_add(count);
            }
            None => {
                unique.insert(buf.clone(), self.paths.len());
                self.paths.push(Path { funcs: buf.clone(), value, count });
            }
        }
        self.total = self.total.saturating_add(value);
        self.count = self.count.saturating_add(count);
    }

    fn intern(&mut self, name: &str, module: &str, kind: FrameKind) -> FuncId {
        if let Some(&f) = self.func_index.get(name) {
            return f;
        }
        let id = self.funcs.len() as FuncId;
        self.funcs.push(Func { name: name.to_string(), module: module.to_string(), kind, wait: is_wait(name) });
        self.func_index.insert(name.to_string(), id);
        id
    }

    /// A function by display name.
    pub fn func(&self, name: &str) -> Option<FuncId> {
        self.func_index.get(name).copied()
    }

    /// Applies the transforms to one stack (root first; `fixed` leading frames are thread roots and
    /// stay). False: the stack is dropped.
    fn apply(&mut self, ts: &[Transform], st: &mut Vec<FuncId>, fixed: usize) -> bool {
        apply_transforms(self, ts, st, fixed)
    }

    fn tree(&self, inverted: bool) -> Tree {
        let node = |parent: u32, func: FuncId, depth: u32| Node {
            parent,
            func,
            depth,
            self_value: 0,
            total: 0,
            self_count: 0,
            count: 0,
            first: 0,
            len: 0,
        };
        // Paths in order of their frames (from the leaf when inverted): the paths sharing a prefix
        // are then neighbours, and each prefix's node is made once, by the first of them, and
        // found again on the chain of the previous path's nodes (no lookup per frame).
        let paths = &self.paths;
        let at = |p: &Path, k: usize| if inverted { p.funcs[p.funcs.len() - 1 - k] } else { p.funcs[k] };
        let mut order: Vec<u32> = (0..paths.len() as u32).collect();
        if inverted {
            order.sort_unstable_by(|&a, &b| {
                paths[a as usize].funcs.iter().rev().cmp(paths[b as usize].funcs.iter().rev())
            });
        } else {
            order.sort_unstable_by(|&a, &b| paths[a as usize].funcs.cmp(&paths[b as usize].funcs));
        }
        let mut nodes = vec![node(0, u32::MAX, 0)];
        // chain[d]: the node at depth d of the previous path (chain[0]: the root).
        let mut chain: Vec<u32> = vec![0];
        let mut prev: Option<&Path> = None;
        for &i in &order {
            let p = &paths[i as usize];
            let n = p.funcs.len();
            let common = prev.map_or(0, |q| {
                let m = n.min(q.funcs.len());
                (0..m).find(|&k| at(q, k) != at(p, k)).unwrap_or(m)
            });
            chain.truncate(common + 1);
            for k in common..n {
                let parent = chain[k];
                nodes.push(node(parent, at(p, k), k as u32 + 1));
                chain.push((nodes.len() - 1) as u32);
            }
            for &c in &chain {
                let n = &mut nodes[c as usize];
                n.total = n.total.saturating_add(p.value);
                n.count = n.count.saturating_add(p.count);
            }
            let leaf = &mut nodes[chain[chain.len() - 1] as usize];
            leaf.self_value = leaf.self_value.saturating_add(p.value);
            leaf.self_count = leaf.self_count.saturating_add(p.count);
            prev = Some(p);
        }
        // Children laid out per parent (a node's id is above its parent's), then each parent's
        // sorted by total, then name: deterministic.
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
        drop(fill);
        for n in &nodes {
            let slice = &mut kids[n.first as usize..(n.first + n.len) as usize];
            if slice.len() > 1 {
                slice.sort_by(|&a, &b| {
                    let (x, y) = (&nodes[a as usize], &nodes[b as usize]);
                    y.total
                        .cmp(&x.total)
                        .then_with(|| self.funcs[x.func as usize].name.cmp(&self.funcs[y.func as usize].name))
                });
            }
        }
        Tree { nodes, kids }
    }

    fn tree_of(&self, inverted: bool) -> &Tree {
        if inverted {
            &self.inverted
        } else {
            &self.top_down
        }
    }

    fn row(&self, nodes: &[Node], id: u32) -> TreeRow {
        let n = &nodes[id as usize];
        let parent_total = nodes[n.parent as usize].total;
        let f = &self.funcs[n.func as usize];
        TreeRow {
            id,
            name: f.name.clone(),
            module: f.module.clone(),
            wait: f.wait,
            depth: n.depth,
            total: n.total,
            self_value: n.self_value,
            count: n.count,
            self_count: n.self_count,
            percent: pct(n.total, self.total),
            percent_of_parent: pct(n.total, parent_total),
            children: n.len as usize,
        }
    }

    /// The children of a tree node (0: the roots), one page: `offset`, `limit`; what is left is
    /// counted in `more`.
    pub fn children(&self, inverted: bool, node: u32, offset: usize, limit: usize) -> Result<TreePage> {
        let tree = self.tree_of(inverted);
        let nodes = &tree.nodes[..];
        if nodes.get(node as usize).is_none() {
            return Err(QueryError::NoData(format!("no tree node {node}")));
        }
        let children = tree.children(node);
        let rows: Vec<TreeRow> = children.iter().skip(offset).take(limit).map(|&c| self.row(nodes, c)).collect();
        let shown = offset.min(children.len()) + rows.len();
        let rest = &children[shown.min(children.len())..];
        Ok(TreePage {
            node,
            path: self.path(nodes, node),
            total: self.total,
            rows,
            more: More { count: rest.len(), value: rest.iter().map(|&c| nodes[c as usize].total).saturating_sum() },
        })
    }

    fn path(&self, nodes: &[Node], mut id: u32) -> Vec<PathStep> {
        let mut out = Vec::new();
        while id != 0 {
            let n = &nodes[id as usize];
            out.push(PathStep { id, name: self.funcs[n.func as usize].name.clone() });
            id = n.parent;
        }
        out.reverse();
        out
    }

    /// Per function: self (on top of the stack) and total (anywhere on it, recursion counted once).
    pub fn function_totals(&self) -> Vec<FunctionTotal> {
        let mut out: Vec<FunctionTotal> = self
            .funcs
            .iter()
            .enumerate()
            .map(|(i, _)| FunctionTotal { func: i as FuncId, self_value: 0, total: 0, self_count: 0, count: 0 })
            .collect();
        let mut seen: Vec<u32> = vec![u32::MAX; self.funcs.len()];
        for (k, p) in self.paths.iter().enumerate() {
            for &f in &p.funcs {
                if seen[f as usize] != k as u32 {
                    seen[f as usize] = k as u32;
                    out[f as usize].total = out[f as usize].total.saturating_add(p.value);
                    out[f as usize].count = out[f as usize].count.saturating_add(p.count);
                }
            }
            if let Some(&last) = p.funcs.last() {
                out[last as usize].self_value = out[last as usize].self_value.saturating_add(p.value);
                out[last as usize].self_count = out[last as usize].self_count.saturating_add(p.count);
            }
        }
        out.retain(|r| r.total > 0 || r.count > 0);
        out
    }

    /// Hot spots: one page of functions matching `search`, sorted.
    pub fn hotspots(&self, q: &HotspotQuery) -> Result<HotspotPage> {
        let matcher = Matcher::new(q.search.as_deref(), q.regex)?;
        let mut rows: Vec<FunctionTotal> = self.function_totals();
        rows.retain(|r| matcher.matches(&self.funcs[r.func as usize].name));
        let name = |r: &FunctionTotal| &self.funcs[r.func as usize].name;
        rows.sort_by(|a, b| {
            let key = match q.sort {
                HotspotSort::SelfValue => b.self_value.cmp(&a.self_value).then(b.total.cmp(&a.total)),
                HotspotSort::Total => b.total.cmp(&a.total).then(b.self_value.cmp(&a.self_value)),
                HotspotSort::Count => b.count.cmp(&a.count).then(b.total.cmp(&a.total)),
                HotspotSort::Name => std::cmp::Ordering::Equal,
            };
            key.then_with(|| name(a).cmp(name(b)))
        });
        let count = rows.len();
        let page: Vec<HotspotRow> = rows
            .iter()
            .skip(q.offset)
            .take(q.limit)
            .map(|r| {
                let f = &self.funcs[r.func as usize];
                HotspotRow {
                    name: f.name.clone(),
                    module: f.module.clone(),
                    kind: f.kind,
                    wait: f.wait,
                    self_value: r.self_value,
                    total: r.total,
                    self_count: r.self_count,
                    count: r.count,
                    self_percent: pct(r.self_value, self.total),
                    total_percent: pct(r.total, self.total),
                }
            })
            .collect();
        Ok(HotspotPage { total: self.total, count, offset: q.offset, rows: page })
    }

    /// Callers and callees of a function with exact per-edge values: the cost of the stacks in
    /// which that call happens (each stack counted once per edge). Entry points (functions at the
    /// root of some stack) are listed too.
    pub fn butterfly(&self, function: &str, limit: usize) -> Result<Butterfly> {
        let f = self.func(function).ok_or_else(|| QueryError::NoSuchFunction(function.to_string()))?;
        let mut callers: HashMap<Option<FuncId>, (u64, u64)> = HashMap::new();
        let mut callees: HashMap<FuncId, (u64, u64)> = HashMap::new();
        let (mut total, mut count, mut self_value, mut self_count) = (0u64, 0u64, 0u64, 0u64);
        let mut seen_callers: Vec<Option<FuncId>> = Vec::new();
        let mut seen_callees: Vec<FuncId> = Vec::new();
        for p in &self.paths {
            if !p.funcs.contains(&f) {
                continue;
            }
            total = total.saturating_add(p.value);
            count = count.saturating_add(p.count);
            if p.funcs.last() == Some(&f) {
                self_value = self_value.saturating_add(p.value);
                self_count = self_count.saturating_add(p.count);
            }
            seen_callers.clear();
            seen_callees.clear();
            for (i, &x) in p.funcs.iter().enumerate() {
                if x != f {
                    continue;
                }
                let caller = if i == 0 { None } else { Some(p.funcs[i - 1]) };
                if !seen_callers.contains(&caller) {
                    seen_callers.push(caller);
                    let e = callers.entry(caller).or_default();
                    e.0 = e.0.saturating_add(p.value);
                    e.1 = e.1.saturating_add(p.count);
                }
                if let Some(&callee) = p.funcs.get(i + 1) {
                    if !seen_callees.contains(&callee) {
                        seen_callees.push(callee);
                        let e = callees.entry(callee).or_default();
                        e.0 = e.0.saturating_add(p.value);
                        e.1 = e.1.saturating_add(p.count);
                    }
                }
            }
        }
        let edge = |g: Option<FuncId>, (value, count): (u64, u64)| {
            let (name, module, wait) = match g {
                Some(g) => {
                    let x = &self.funcs[g as usize];
                    (x.name.clone(), x.module.clone(), x.wait)
                }
                None => ("[entry point]".to_string(), String::new(), false),
            };
            Edge { name, module, wait, entry: g.is_none(), value, count, percent: pct(value, total) }
        };
        let mut caller_rows: Vec<Edge> = callers.into_iter().map(|(g, c)| edge(g, c)).collect();
        let mut callee_rows: Vec<Edge> = callees.into_iter().map(|(g, c)| edge(Some(g), c)).collect();
        for rows in [&mut caller_rows, &mut callee_rows] {
            rows.sort_by(|a, b| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name)));
        }
        let fx = &self.funcs[f as usize];
        let cut = |mut v: Vec<Edge>| {
            let rest: Vec<Edge> = v.split_off(limit.min(v.len()));
            (v, More { count: rest.len(), value: rest.iter().map(|e| e.value).saturating_sum() })
        };
        let (caller_rows, more_callers) = cut(caller_rows);
        let (callee_rows, more_callees) = cut(callee_rows);
        Ok(Butterfly {
            name: fx.name.clone(),
            module: fx.module.clone(),
            wait: fx.wait,
            total,
            count,
            self_value,
            self_count,
            percent: pct(total, self.total),
            view_total: self.total,
            callers: caller_rows,
            more_callers,
            callees: callee_rows,
            more_callees,
        })
    }

    /// Entry points: functions at the root of a stack (after the thread roots in per-thread mode),
    /// by value.
    pub fn entry_points(&self) -> Vec<Edge> {
        let mut roots: HashMap<FuncId, (u64, u64)> = HashMap::new();
        for p in &self.paths {
            let first = p.funcs.iter().find(|&&f| !self.funcs[f as usize].name.starts_with("thread "));
            if let Some(&f) = first {
                let e = roots.entry(f).or_default();
                e.0 = e.0.saturating_add(p.value);
                e.1 = e.1.saturating_add(p.count);
            }
        }
        let mut v: Vec<Edge> = roots
            .into_iter()
            .map(|(f, (value, count))| {
                let x = &self.funcs[f as usize];
                Edge {
                    name: x.name.clone(),
                    module: x.module.clone(),
                    wait: x.wait,
                    entry: true,
                    value,
                    count,
                    percent: pct(value, self.total),
                }
            })
            .collect();
        v.sort_by(|a, b| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name)));
        v
    }

    /// Flame-graph (icicle) cells under `node` for a drawing `width_px` wide: only cells at least a
    /// pixel wide; each parent's narrower children become one `more` cell. `search` marks matching
    /// cells and gives their share (outermost matches only, so nothing is counted twice).
    pub fn flame(&self, inverted: bool, node: u32, width_px: u32, search: Option<&str>, regex: bool) -> Result<Flame> {
        let tree = self.tree_of(inverted);
        let nodes = &tree.nodes[..];
        let root = nodes.get(node as usize).ok_or_else(|| QueryError::NoData(format!("no tree node {node}")))?;
        let matcher = Matcher::new(search, regex)?;
        let width = width_px.clamp(1, 20_000) as f64;
        let scale = if root.total == 0 { 0.0 } else { width / root.total as f64 };
        let mut cells = Vec::new();
        let mut matched = 0u64;
        // The whole view's root (the empty stack) is not drawn: its children are the top row.
        let base = root.depth + u32::from(node == 0);
        // Explicit stack: (node, x in value units from the zoom root, inside a match).
        let mut stack: Vec<(u32, u64, bool)> = vec![(node, 0, false)];
        while let Some((id, x, in_match)) = stack.pop() {
            let n = &nodes[id as usize];
            let mut is_match = false;
            if id != node || node != 0 {
                let f = &self.funcs[n.func as usize];
                is_match = matcher.active() && matcher.matches(&f.name);
                if is_match && !in_match {
                    matched = matched.saturating_add(n.total);
                }
                cells.push(FlameCell {
                    id,
                    depth: n.depth - base,
                    x,
                    width: n.total,
                    name: f.name.clone(),
                    module: f.module.clone(),
                    wait: f.wait,
                    matched: is_match,
                    more: 0,
                });
            }
            if cells.len() > 100_000 {
                break;
            }
            let mut cx = x;
            let (mut hidden, mut hidden_value) = (0usize, 0u64);
            let mut hidden_x = None;
            for &c in tree.children(id) {
                let cn = &nodes[c as usize];
                if cn.total as f64 * scale >= 1.0 {
                    stack.push((c, cx, in_match || is_match));
                } else {
                    hidden += 1;
                    hidden_value += cn.total;
                    hidden_x.get_or_insert(cx);
                }
                cx = cx.saturating_add(cn.total);
            }
            if hidden > 0 {
                cells.push(FlameCell {
                    id,
                    depth: n.depth + 1 - base,
                    x: hidden_x.unwrap_or(cx),
                    width: hidden_value,
                    name: format!("{hidden} more"),
                    module: String::new(),
                    wait: false,
                    matched: false,
                    more: hidden,
                });
            }
        }
        cells.sort_by_key(|c| (c.depth, c.x));
        Ok(Flame {
            node,
            path: self.path(nodes, node),
            total: root.total,
            view_total: self.total,
            matched,
            matched_percent: pct(matched, self.total),
            cells,
        })
    }
}

/// `a` as a percentage of `b` (0 when `b` is 0).
fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 * 100.0 / b as f64
    }
}

/// Replaces runs of frames for which `inside` holds by one frame `label`.
/// The functions a stack's frames refer to, as the transforms see them: by display name, with
/// module and kind; synthetic functions (`[merged]`, `[module]`, `namespace.*`) are added on demand.
/// The viewer's [`StackView`] and the diff's function keys both implement it, so the transforms
/// mean the same in both.
pub trait FuncTable {
    /// Every function of that display name.
    fn named(&self, name: &str) -> &[FuncId];
    fn name(&self, f: FuncId) -> &str;
    fn module(&self, f: FuncId) -> &str;
    fn kind(&self, f: FuncId) -> FrameKind;
    /// The synthetic function of that name, added when new.
    fn synthetic(&mut self, name: &str, module: &str) -> FuncId;
}

impl FuncTable for StackView {
    fn named(&self, name: &str) -> &[FuncId] {
        self.func_index.get(name).map(std::slice::from_ref).unwrap_or(&[])
    }
    fn name(&self, f: FuncId) -> &str {
        &self.funcs[f as usize].name
    }
    fn module(&self, f: FuncId) -> &str {
        &self.funcs[f as usize].module
    }
    fn kind(&self, f: FuncId) -> FrameKind {
        self.funcs[f as usize].kind
    }
    fn synthetic(&mut self, name: &str, module: &str) -> FuncId {
        self.intern(name, module, FrameKind::Synthetic)
    }
}

/// Applies the transforms to one stack of `t`'s functions (root first; `fixed` leading frames
/// are thread roots and stay). False: the stack is dropped.
pub fn apply_transforms<T: FuncTable>(t: &mut T, ts: &[Transform], st: &mut Vec<FuncId>, fixed: usize) -> bool {
    for tr in ts {
        match tr {
            Transform::FocusFunction { function } => {
                let f = t.named(function);
                match st[fixed..].iter().position(|x| f.contains(x)) {
                    Some(i) => {
                        st.drain(fixed..fixed + i);
                    }
                    None => return false,
                }
            }
            Transform::FocusSubtree { path } => {
                let tail = &st[fixed..];
                if tail.len() < path.len() || path.is_empty() {
                    return false;
                }
                if !path.iter().zip(tail).all(|(n, &f)| t.name(f) == n) {
                    return false;
                }
                st.drain(fixed..fixed + path.len() - 1);
            }
            Transform::Merge { function } => {
                let f = t.named(function);
                if f.is_empty() {
                    continue;
                }
                // The thread roots stay whatever they are called.
                let had = st.len();
                let mut i = 0;
                st.retain(|x| {
                    i += 1;
                    i <= fixed || !f.contains(x)
                });
                if st.len() == fixed && had > fixed {
                    let m = t.synthetic("[merged]", "");
                    st.push(m);
                }
            }
            Transform::Drop { function } => {
                let f = t.named(function);
                if st[fixed..].iter().any(|x| f.contains(x)) {
                    return false;
                }
            }
            Transform::CollapseModule { module } => {
                let m = t.synthetic(&format!("[{module}]"), module);
                *st = collapse(st, fixed, |f| t.module(f) == module, m);
            }
            Transform::CollapseNamespace { namespace } => {
                let prefix = format!("{namespace}.");
                let m = t.synthetic(&format!("{namespace}.*"), "");
                *st = collapse(st, fixed, |f| t.name(f).starts_with(&prefix), m);
            }
            Transform::CollapseRecursion { function } => {
                let f = t.named(function);
                if f.is_empty() {
                    continue;
                }
                let mut out: Vec<FuncId> = Vec::with_capacity(st.len());
                let mut first: Option<usize> = None;
                for (i, &x) in st.iter().enumerate() {
                    if i >= fixed && f.contains(&x) {
                        match first {
                            Some(j) => {
                                out.truncate(j + 1);
                                continue;
                            }
                            None => first = Some(out.len()),
                        }
                    }
                    out.push(x);
                }
                *st = out;
            }
            Transform::JustMyCode => {
                let had = st.len();
                let mut i = 0;
                st.retain(|&x| {
                    i += 1;
                    i <= fixed || !(t.kind(x) != FrameKind::Native && starts_framework(t.name(x)))
                });
                if st.len() == fixed && had > fixed {
                    let m = t.synthetic("[framework]", "");
                    st.push(m);
                }
            }
        }
    }
    true
}

fn collapse(st: &[FuncId], fixed: usize, inside: impl Fn(FuncId) -> bool, label: FuncId) -> Vec<FuncId> {
    let mut out: Vec<FuncId> = Vec::with_capacity(st.len());
    for (i, &x) in st.iter().enumerate() {
        if i >= fixed && inside(x) {
            if out.len() > fixed && out.last() == Some(&label) {
                continue;
            }
            out.push(label);
        } else {
            out.push(x);
        }
    }
    out
}

/// Substring (case-insensitive) or regular-expression search.
pub struct Matcher {
    text: Option<String>,
    re: Option<regex::Regex>,
}

impl Matcher {
    pub fn new(search: Option<&str>, regex: bool) -> Result<Matcher> {
        let s = search.filter(|s| !s.is_empty());
        match (s, regex) {
            (None, _) => Ok(Matcher { text: None, re: None }),
            (Some(s), true) => {
                let re = regex::RegexBuilder::new(s).size_limit(1 << 20).build().map_err(|e| {
                    QueryError::Unsupported(format!("bad regular expression: {}", one_line(&e.to_string())))
                })?;
                Ok(Matcher { text: None, re: Some(re) })
            }
            (Some(s), false) => Ok(Matcher { text: Some(s.to_lowercase()), re: None }),
        }
    }

    pub fn active(&self) -> bool {
        self.text.is_some() || self.re.is_some()
    }

    pub fn matches(&self, name: &str) -> bool {
        match (&self.text, &self.re) {
            (Some(t), _) => name.to_lowercase().contains(t.as_str()),
            (_, Some(r)) => r.is_match(name),
            _ => true,
        }
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[derive(Clone, Debug, Serialize)]
pub struct PathStep {
    pub id: u32,
    pub name: String,
}

/// Elided entries: how many, and their summed value.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct More {
    pub count: usize,
    pub value: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TreeRow {
    pub id: u32,
    pub name: String,
    pub module: String,
    pub wait: bool,
    pub depth: u32,
    pub total: u64,
    #[serde(rename = "self")]
    pub self_value: u64,
    pub count: u64,
    pub self_count: u64,
    pub percent: f64,
    pub percent_of_parent: f64,
    /// Number of children (0: a leaf).
    pub children: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct TreePage {
    pub node: u32,
    pub path: Vec<PathStep>,
    pub total: u64,
    pub rows: Vec<TreeRow>,
    pub more: More,
}

#[derive(Clone, Copy, Debug)]
pub struct FunctionTotal {
    pub func: FuncId,
    pub self_value: u64,
    pub total: u64,
    pub self_count: u64,
    pub count: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HotspotSort {
    SelfValue,
    Total,
    Count,
    Name,
}

#[derive(Clone, Debug)]
pub struct HotspotQuery {
    pub sort: HotspotSort,
    pub search: Option<String>,
    pub regex: bool,
    pub offset: usize,
    pub limit: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct HotspotRow {
    pub name: String,
    pub module: String,
    pub kind: FrameKind,
    pub wait: bool,
    #[serde(rename = "self")]
    pub self_value: u64,
    pub total: u64,
    pub self_count: u64,
    pub count: u64,
    pub self_percent: f64,
    pub total_percent: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct HotspotPage {
    pub total: u64,
    /// Functions matching the search (all pages).
    pub count: usize,
    pub offset: usize,
    pub rows: Vec<HotspotRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Edge {
    pub name: String,
    pub module: String,
    pub wait: bool,
    /// The caller side of an entry point (no caller).
    pub entry: bool,
    pub value: u64,
    pub count: u64,
    /// Of the selected function's total.
    pub percent: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Butterfly {
    pub name: String,
    pub module: String,
    pub wait: bool,
    pub total: u64,
    pub count: u64,
    #[serde(rename = "self")]
    pub self_value: u64,
    pub self_count: u64,
    pub percent: f64,
    pub view_total: u64,
    pub callers: Vec<Edge>,
    pub more_callers: More,
    pub callees: Vec<Edge>,
    pub more_callees: More,
}

#[derive(Clone, Debug, Serialize)]
pub struct FlameCell {
    /// The tree node (for a `more` cell: the parent whose narrow children it stands for).
    pub id: u32,
    pub depth: u32,
    /// Offset and width in the weight's unit, from the zoom root's start.
    pub x: u64,
    pub width: u64,
    pub name: String,
    pub module: String,
    pub wait: bool,
    pub matched: bool,
    /// Children narrower than a pixel merged into this cell (0: a real frame).
    pub more: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Flame {
    pub node: u32,
    pub path: Vec<PathStep>,
    /// The zoom root's total (the drawing's full width).
    pub total: u64,
    pub view_total: u64,
    pub matched: u64,
    pub matched_percent: f64,
    pub cells: Vec<FlameCell>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_model::{Cost, FrameKey};

    /// Main → A → Sleep (3 samples), Main → A → B (2), Main → B (1), Main → A → A → B (4).
    fn profile() -> Profile {
        let mut p = Profile::default();
        let st = &mut p.costs.stacks;
        let main = st.intern_frame(FrameKey::Label("Main".into()));
        let a = st.intern_frame(FrameKey::Label("App.A".into()));
        let b = st.intern_frame(FrameKey::Label("App.B".into()));
        let sleep = st.intern_frame(FrameKey::Label("System.Threading.Thread.Sleep".into()));
        let stacks = [(vec![main, a, sleep], 3), (vec![main, a, b], 2), (vec![main, b], 1), (vec![main, a, a, b], 4)];
        for (frames, n) in stacks {
            let s = p.costs.stacks.intern_stack(&frames).unwrap();
            p.costs.add(1, s, &Cost { cpu_samples: n, cpu_ns: n * 10, ..Default::default() });
        }
        p
    }

    fn view(ts: Vec<Transform>) -> StackView {
        StackView::build(&profile(), &ViewSpec { metric: Metric::Cpu, threads: ThreadMode::Merged, transforms: ts })
    }

    #[test]
    fn hotspots_count_recursion_once() {
        let v = view(vec![]);
        assert_eq!(v.total, 100);
        let t = v.function_totals();
        let a = t.iter().find(|r| v.funcs[r.func as usize].name == "App.A").unwrap();
        assert_eq!((a.self_value, a.total), (0, 90));
        let b = t.iter().find(|r| v.funcs[r.func as usize].name == "App.B").unwrap();
        assert_eq!((b.self_value, b.total), (70, 70));
    }

    #[test]
    fn butterfly_edges_are_exact() {
        let v = view(vec![]);
        let b = v.butterfly("App.B", 10).unwrap();
        let callers: Vec<(&str, u64)> = b.callers.iter().map(|e| (e.name.as_str(), e.value)).collect();
        assert_eq!(callers, vec![("App.A", 60), ("Main", 10)]);
        let a = v.butterfly("App.A", 10).unwrap();
        let callers: Vec<(&str, u64)> = a.callers.iter().map(|e| (e.name.as_str(), e.value)).collect();
        // Main → A in every A stack (90); A → A in the recursive one (40).
        assert_eq!(callers, vec![("Main", 90), ("App.A", 40)]);
        let callees: Vec<(&str, u64)> = a.callees.iter().map(|e| (e.name.as_str(), e.value)).collect();
        assert_eq!(callees, vec![("App.B", 60), ("App.A", 40), ("System.Threading.Thread.Sleep", 30)]);
        assert!(a.callees[2].wait);
        let m = v.butterfly("Main", 10).unwrap();
        assert!(m.callers[0].entry && m.callers[0].value == 100);
        assert_eq!(v.entry_points()[0].name, "Main");
    }

    #[test]
    fn transforms_compose() {
        let v = view(vec![Transform::Drop { function: "System.Threading.Thread.Sleep".into() }]);
        assert_eq!(v.total, 70);
        let v = view(vec![Transform::CollapseRecursion { function: "App.A".into() }]);
        let page = v.children(false, 0, 0, 10).unwrap();
        let main = page.rows[0].id;
        let a = v.children(false, main, 0, 10).unwrap().rows[0].clone();
        assert_eq!((a.name.as_str(), a.total), ("App.A", 90));
        let under_a = v.children(false, a.id, 0, 10).unwrap();
        assert_eq!(
            under_a.rows.iter().map(|r| (r.name.as_str(), r.total)).collect::<Vec<_>>(),
            vec![("App.B", 60), ("System.Threading.Thread.Sleep", 30)]
        );
        let v = view(vec![
            Transform::FocusFunction { function: "App.A".into() },
            Transform::Merge { function: "App.B".into() },
        ]);
        assert_eq!(v.total, 90);
        let roots = v.children(false, 0, 0, 10).unwrap();
        assert_eq!(roots.rows.len(), 1);
        assert_eq!((roots.rows[0].name.as_str(), roots.rows[0].self_value), ("App.A", 20));
        let v = view(vec![Transform::FocusSubtree { path: vec!["Main".into(), "App.B".into()] }]);
        assert_eq!(v.total, 10);
        let v = view(vec![Transform::JustMyCode]);
        let a = v.function_totals();
        assert!(a.iter().all(|r| v.funcs[r.func as usize].name != "System.Threading.Thread.Sleep" || r.total == 0));
        assert_eq!(v.total, 100);
        let v = view(vec![Transform::CollapseNamespace { namespace: "App".into() }]);
        let b = v.butterfly("App.*", 10).unwrap();
        assert_eq!(b.total, 90 + 10);
    }

    #[test]
    fn trees_hold_every_prefix_once_with_its_sums() {
        // Random paths (some prefixes of others, recursion, repeats of one function): every node
        // of both trees is one distinct prefix (suffix when inverted) and carries the sums of the
        // paths through it and ending at it; children are sorted by total, then name.
        let mut v = view(Vec::new());
        v.funcs = (0..6)
            .map(|i| Func { name: format!("f{i}"), module: String::new(), kind: FrameKind::Managed, wait: false })
            .collect();
        v.paths.clear();
        let mut seen = std::collections::HashSet::new();
        let mut x: u64 = 7;
        while v.paths.len() < 300 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let funcs: Vec<FuncId> =
                (0..1 + (x >> 60) as usize % 7).map(|k| ((x >> (4 * k + 8)) % 6) as FuncId).collect();
            if seen.insert(funcs.clone()) {
                v.paths.push(Path { funcs, value: (x >> 40) % 1000, count: 1 + (x >> 30) % 3 });
            }
        }
        for inverted in [false, true] {
            let t = v.tree(inverted);
            // The prefix of each node, from its parents.
            let prefix = |mut id: u32| {
                let mut out = Vec::new();
                while id != 0 {
                    out.push(t.nodes[id as usize].func);
                    id = t.nodes[id as usize].parent;
                }
                out.reverse();
                out
            };
            let mut prefixes = std::collections::HashSet::new();
            for id in 1..t.nodes.len() as u32 {
                let pre = prefix(id);
                assert_eq!(t.nodes[id as usize].depth as usize, pre.len());
                assert!(prefixes.insert(pre.clone()), "{pre:?} twice");
                let oriented = |p: &Path| -> Vec<FuncId> {
                    if inverted {
                        p.funcs.iter().rev().copied().collect()
                    } else {
                        p.funcs.clone()
                    }
                };
                let through: Vec<&Path> = v.paths.iter().filter(|p| oriented(p).starts_with(&pre)).collect();
                let ending: Vec<&Path> = through.iter().copied().filter(|p| oriented(p).len() == pre.len()).collect();
                let n = &t.nodes[id as usize];
                assert_eq!(n.total, through.iter().map(|p| p.value).sum::<u64>(), "{pre:?}");
                assert_eq!(n.count, through.iter().map(|p| p.count).sum::<u64>(), "{pre:?}");
                assert_eq!(n.self_value, ending.iter().map(|p| p.value).sum::<u64>(), "{pre:?}");
                assert_eq!(n.self_count, ending.iter().map(|p| p.count).sum::<u64>(), "{pre:?}");
            }
            // Every prefix of every path has its node.
            for p in &v.paths {
                let o: Vec<FuncId> = if inverted { p.funcs.iter().rev().copied().collect() } else { p.funcs.clone() };
                for k in 1..=o.len() {
                    assert!(prefixes.contains(&o[..k]), "{:?}", &o[..k]);
                }
            }
            assert_eq!(t.nodes[0].total, v.paths.iter().map(|p| p.value).sum::<u64>());
            for id in 0..t.nodes.len() as u32 {
                let kids = t.children(id);
                assert!(kids.iter().all(|&c| t.nodes[c as usize].parent == id));
                assert!(kids.windows(2).all(|w| {
                    let (a, b) = (&t.nodes[w[0] as usize], &t.nodes[w[1] as usize]);
                    a.total > b.total
                        || (a.total == b.total && v.funcs[a.func as usize].name <= v.funcs[b.func as usize].name)
                }));
            }
            assert_eq!(t.kids.len(), t.nodes.len() - 1);
        }
    }

    #[test]
    fn tree_pages_count_what_is_left() {
        let v = view(vec![]);
        let main = v.children(false, 0, 0, 10).unwrap().rows[0].id;
        let page = v.children(false, main, 0, 1).unwrap();
        assert_eq!(page.rows.len(), 1);
        assert_eq!(page.more, More { count: 1, value: 10 });
        let inv = v.children(true, 0, 0, 10).unwrap();
        assert_eq!(
            inv.rows.iter().map(|r| (r.name.as_str(), r.total)).collect::<Vec<_>>(),
            vec![("App.B", 70), ("System.Threading.Thread.Sleep", 30)]
        );
    }

    #[test]
    fn flame_hides_cells_under_a_pixel_and_counts_matches_once() {
        let v = view(vec![]);
        let f = v.flame(false, 0, 20, Some("app.a"), false).unwrap();
        assert_eq!(f.matched, 90);
        // Main → B (10 of 100) is 2 px at 20 px; at 5 px it is merged into a `more` cell.
        let f = v.flame(false, 0, 5, None, false).unwrap();
        assert!(f.cells.iter().any(|c| c.more == 1 && c.width == 10), "{:?}", f.cells);
        assert!(Matcher::new(Some("("), true).is_err());
    }

    #[test]
    fn wait_functions_are_known() {
        assert!(is_wait("System.Threading.Thread.Sleep"));
        assert!(is_wait("System.Threading.Monitor.Wait(object, int)"));
        assert!(is_wait("libc.so.6!__futex_abstimed_wait_common"));
        assert!(!is_wait("System.Threading.Thread.Start"));
        assert!(!is_wait("libc.so.6!memcpy"));
    }
}
