//! What the interactive viewer asks: the profile's stacks for a weight and thread mode, passed
//! through a list of transforms (focus, merge, drop, collapse, just-my-code), aggregated by the
//! engine ([`crate::engine`]) into paths and their top-down and inverted trees, from which hot spots,
//! tree pages, the butterfly (callers and callees with exact per-edge values from real stacks) and
//! flame-graph cells are answered in small pages. The page draws; every figure comes from here.
//!
//! Functions are identified by display name (see [`select::display_names`]): all frames with one
//! name are one function, so a transform or a selection survives a change of time range.

use crate::SaturatingSum;

use clrprof_model::fasthash::FxHashMap;
use clrprof_model::{FrameKind, Metric, Profile};
use serde::Serialize;

use crate::engine::{self, is_wait, push_stack, FuncTable, Matcher, Measure, Paths, Transform, Tree};
use crate::select;
use crate::{QueryError, Result};

/// Index in [`StackView::funcs`].
pub use crate::engine::FuncId;

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

/// Paths above which the top-down and inverted trees are built on two threads.
const PARALLEL_TREES: usize = 4096;

/// The stacks of one weight and thread mode after the transforms, aggregated.
pub struct StackView {
    pub metric: Metric,
    pub funcs: Vec<Func>,
    func_index: FxHashMap<String, FuncId>,
    paths: Paths<Measure>,
    top_down: Tree<Measure>,
    inverted: Tree<Measure>,
    /// The metric summed over every stack kept.
    pub total: u64,
    /// Samples (calls, objects, exceptions, contentions) behind `total`.
    pub count: u64,
    /// Part of the values are estimates (the event weights, see [`select::EventWeight`]).
    pub estimated: bool,
    /// What the event weights' numbers are ([`select::EventWeight::note`]); `None` otherwise.
    pub note: Option<String>,
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
            paths: Paths::merging(),
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
            let mut buf = Vec::new();
            for e in w.stacks {
                buf.clear();
                match e.stack {
                    Some(sid) => push_stack(&p.costs.stacks, sid, |f| frame_func[f.0 as usize], &mut buf),
                    None => buf.push(v.intern(&e.leaf, "", FrameKind::Synthetic)),
                }
                v.add_path(&spec.transforms, &mut buf, 0, Measure { value: e.value, count: e.count });
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
            for (s, c) in t.costs.iter() {
                let (count, value) = select::measure(spec.metric, &c);
                if value > 0 || count > 0 {
                    raw.push((root, s.0 as usize, value, count));
                }
            }
        }
        raw.sort_by_key(|r| (r.0, r.1));
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
            let sid = clrprof_model::StackId(s as u32);
            push_stack(&p.costs.stacks, sid, |f| frame_func[f.0 as usize], &mut buf);
            v.add_path(&spec.transforms, &mut buf, base, Measure { value, count });
        }
        v.build_trees();
        v
    }

    /// The top-down and inverted trees of the paths (on two threads for many paths), children by
    /// total, then name.
    fn build_trees(&mut self) {
        // The view is kept in the viewer's cache: without its copy of every path.
        self.paths.stop_merging();
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

    fn tree(&self, inverted: bool) -> Tree<Measure> {
        let mut t = engine::prefix_tree(&self.paths, inverted);
        t.sort_children(|nodes, a, b| {
            let (x, y) = (&nodes[a as usize], &nodes[b as usize]);
            y.total
                .value
                .cmp(&x.total.value)
                .then_with(|| self.funcs[x.func as usize].name.cmp(&self.funcs[y.func as usize].name))
        });
        t
    }

    /// Transforms one stack (root first, `fixed` thread roots) and adds its cost.
    fn add_path(&mut self, ts: &[Transform], buf: &mut Vec<FuncId>, fixed: usize, w: Measure) {
        if !engine::apply_transforms(self, ts, buf, fixed) {
            return;
        }
        self.paths.add(buf, &w);
        self.total = self.total.saturating_add(w.value);
        self.count = self.count.saturating_add(w.count);
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

    fn tree_of(&self, inverted: bool) -> &Tree<Measure> {
        if inverted {
            &self.inverted
        } else {
            &self.top_down
        }
    }

    fn row(&self, tree: &Tree<Measure>, id: u32) -> TreeRow {
        let n = &tree.nodes[id as usize];
        let parent_total = tree.nodes[n.parent as usize].total.value;
        let f = &self.funcs[n.func as usize];
        TreeRow {
            id,
            name: f.name.clone(),
            module: f.module.clone(),
            wait: f.wait,
            depth: n.depth,
            total: n.total.value,
            self_value: n.self_w.value,
            count: n.total.count,
            self_count: n.self_w.count,
            percent: pct(n.total.value, self.total),
            percent_of_parent: pct(n.total.value, parent_total),
            children: tree.children(id).len(),
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
        let rows: Vec<TreeRow> = children.iter().skip(offset).take(limit).map(|&c| self.row(tree, c)).collect();
        let shown = offset.min(children.len()) + rows.len();
        let rest = &children[shown.min(children.len())..];
        Ok(TreePage {
            node,
            path: self.path(tree, node),
            total: self.total,
            rows,
            more: More {
                count: rest.len(),
                value: rest.iter().map(|&c| nodes[c as usize].total.value).saturating_sum(),
            },
        })
    }

    fn path(&self, tree: &Tree<Measure>, mut id: u32) -> Vec<PathStep> {
        let mut out = Vec::new();
        while id != 0 {
            let n = &tree.nodes[id as usize];
            out.push(PathStep { id, name: self.funcs[n.func as usize].name.clone() });
            id = n.parent;
        }
        out.reverse();
        out
    }

    /// Per function: self (on top of the stack) and total (anywhere on it, recursion counted once).
    pub fn function_totals(&self) -> Vec<engine::FunctionTotal<Measure>> {
        engine::function_totals(&self.paths)
    }

    /// Hot spots: one page of functions matching `search`, sorted.
    pub fn hotspots(&self, q: &HotspotQuery) -> Result<HotspotPage> {
        let matcher = Matcher::new(q.search.as_deref(), q.regex)?;
        let mut rows = self.function_totals();
        rows.retain(|r| matcher.matches(&self.funcs[r.func as usize].name));
        let name = |r: &engine::FunctionTotal<Measure>| &self.funcs[r.func as usize].name;
        rows.sort_by(|a, b| {
            let (sa, sb) = (a.self_w.value, b.self_w.value);
            let (ta, tb) = (a.total.value, b.total.value);
            let key = match q.sort {
                HotspotSort::SelfValue => sb.cmp(&sa).then(tb.cmp(&ta)),
                HotspotSort::Total => tb.cmp(&ta).then(sb.cmp(&sa)),
                HotspotSort::Count => b.total.count.cmp(&a.total.count).then(tb.cmp(&ta)),
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
                    self_value: r.self_w.value,
                    total: r.total.value,
                    self_count: r.self_w.count,
                    count: r.total.count,
                    self_percent: pct(r.self_w.value, self.total),
                    total_percent: pct(r.total.value, self.total),
                }
            })
            .collect();
        Ok(HotspotPage { total: self.total, count, offset: q.offset, rows: page })
    }

    /// Callers and callees of a function with exact per-edge values: the cost of the stacks in
    /// which that call happens (each stack counted once per edge).
    pub fn butterfly(&self, function: &str, limit: usize) -> Result<Butterfly> {
        let f = self.func(function).ok_or_else(|| QueryError::NoSuchFunction(function.to_string()))?;
        let b = engine::butterfly(&self.paths, |x| x == f);
        let total = b.total.value;
        let edge = |e: &engine::Edge<Measure>| {
            let (name, module, wait) = match e.func {
                Some(g) => {
                    let x = &self.funcs[g as usize];
                    (x.name.clone(), x.module.clone(), x.wait)
                }
                None => ("[entry point]".to_string(), String::new(), false),
            };
            let (value, count) = (e.through.value, e.through.count);
            Edge { name, module, wait, entry: e.func.is_none(), value, count, percent: pct(value, total) }
        };
        let mut caller_rows: Vec<Edge> = b.callers.iter().map(edge).collect();
        let mut callee_rows: Vec<Edge> = b.callees.iter().map(edge).collect();
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
            count: b.total.count,
            self_value: b.self_w.value,
            self_count: b.self_w.count,
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
        let roots = engine::entry_points(&self.paths, |f| self.funcs[f as usize].name.starts_with("thread "));
        let mut v: Vec<Edge> = roots
            .iter()
            .map(|e| {
                let x = &self.funcs[e.func as usize];
                Edge {
                    name: x.name.clone(),
                    module: x.module.clone(),
                    wait: x.wait,
                    entry: true,
                    value: e.total.value,
                    count: e.total.count,
                    percent: pct(e.total.value, self.total),
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
        let scale = if root.total.value == 0 { 0.0 } else { width / root.total.value as f64 };
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
                    matched = matched.saturating_add(n.total.value);
                }
                cells.push(FlameCell {
                    id,
                    depth: n.depth - base,
                    x,
                    width: n.total.value,
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
                if cn.total.value as f64 * scale >= 1.0 {
                    stack.push((c, cx, in_match || is_match));
                } else {
                    hidden += 1;
                    hidden_value += cn.total.value;
                    hidden_x.get_or_insert(cx);
                }
                cx = cx.saturating_add(cn.total.value);
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
            path: self.path(tree, node),
            total: root.total.value,
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
        assert_eq!((a.self_w.value, a.total.value), (0, 90));
        let b = t.iter().find(|r| v.funcs[r.func as usize].name == "App.B").unwrap();
        assert_eq!((b.self_w.value, b.total.value), (70, 70));
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
        assert!(a
            .iter()
            .all(|r| v.funcs[r.func as usize].name != "System.Threading.Thread.Sleep" || r.total.value == 0));
        assert_eq!(v.total, 100);
        let v = view(vec![Transform::CollapseNamespace { namespace: "App".into() }]);
        let b = v.butterfly("App.*", 10).unwrap();
        assert_eq!(b.total, 90 + 10);
    }

    #[test]
    fn tree_children_go_by_total_then_name() {
        let v = view(vec![]);
        for t in [&v.top_down, &v.inverted] {
            for id in 0..t.nodes.len() as u32 {
                assert!(t.children(id).windows(2).all(|w| {
                    let (a, b) = (&t.nodes[w[0] as usize], &t.nodes[w[1] as usize]);
                    a.total.value > b.total.value
                        || (a.total.value == b.total.value
                            && v.funcs[a.func as usize].name <= v.funcs[b.func as usize].name)
                }));
            }
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
}
