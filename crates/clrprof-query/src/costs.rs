//! The report's cost views: hot spots, the call tree, callers/callees with entry points, the flat
//! summary and the Monte Carlo hit tables. The figures come from the engine ([`crate::engine`])
//! on the profile's frame paths (one path per stack, every cost column at once); they are sorted,
//! cut and totalled here.

use std::collections::HashMap;

use crate::engine;
use crate::SaturatingSum;
use clrprof_model::hits::{frame_module, ModuleHits, RoutineHits};
use clrprof_model::{Cost, FrameId, FrameKind, Metric, Profile, StackId};
use serde::Serialize;

use crate::select::{self, group_threads, thread_groups, thread_label, Threads};
use crate::{QueryError, Result};

/// What a cost view is asked: the weight, the threads, one group per thread or merged, and how
/// much to show.
#[derive(Clone, Debug, Default)]
pub struct CostQuery {
    /// `None`: the profile's natural weight ([`select::metric`]).
    pub metric: Option<Metric>,
    pub threads: Threads,
    pub by_thread: bool,
    /// At most this many rows per group (hot spots, summary).
    pub top: Option<usize>,
    /// Call tree: levels to keep.
    pub depth: Option<usize>,
    /// Call tree: hide nodes (and their subtrees) below this share of the group's total; `None`:
    /// the weight's default ([`CostQuery::min_percent_for`]).
    pub min_percent: Option<f64>,
}

/// The call tree's default cut under an exact weight: a row that would read 0.0% is hidden (the
/// tree of a real program has thousands of them, most of its rows).
pub const EXACT_TREE_MIN_PERCENT: f64 = 0.05;

impl CostQuery {
    /// The call tree's cut for weight `m`: the one asked, else [`EXACT_TREE_MIN_PERCENT`] for an
    /// exact (instrumented) weight and none for a sampled one.
    pub fn min_percent_for(&self, m: Metric) -> f64 {
        self.min_percent.unwrap_or(if m.is_instrumented() { EXACT_TREE_MIN_PERCENT } else { 0.0 })
    }
}

/// One function's costs in a group. `self_cost` is spent in it; `inclusive` with it anywhere on
/// the stack (recursion counted once).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionStats {
    pub frame: FrameId,
    /// Display name (overloads get their parameter list).
    pub name: String,
    /// Module file name, empty when unknown.
    pub module: String,
    pub kind: FrameKind,
    pub self_cost: Cost,
    pub inclusive: Cost,
}

/// A group of rows: one thread (`thread` set) or the selection merged.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Group<T> {
    pub thread: Option<u32>,
    /// `all threads (merged)`, `thread 123 (name)`, or the `--thread` spec.
    pub label: String,
    /// The metric summed over the whole group (self costs), before any cut.
    pub total: u64,
    /// Rows before `top` cut them.
    pub count: usize,
    pub rows: Vec<T>,
    /// Call tree: the rows `min_percent` hid (zero for the other views).
    pub hidden: Hidden,
}

/// The call tree's rows below the cut: how many (within the depth shown) and the metric they hold,
/// which the inclusive figures of the rows above them still count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Hidden {
    /// The cut: percent of the group's total.
    pub min_percent: f64,
    pub rows: usize,
    /// The metric summed over the topmost hidden rows (each hidden subtree once).
    pub value: u64,
}

/// Result of a cost view: the resolved weight and one group per thread (or one merged group).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CostView<T> {
    pub metric: Metric,
    pub groups: Vec<Group<T>>,
}

fn group_label(p: &Profile, group: Option<u32>, spec: Option<&str>) -> String {
    match group {
        Some(t) => format!("thread {}", thread_label(p, t)),
        None => spec.map(|t| format!("thread {t}")).unwrap_or_else(|| "all threads (merged)".into()),
    }
}

/// One frame's costs. `self_cost` is spent in the frame itself; `inclusive` with the frame
/// anywhere on the stack (recursion counted once).
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionRow {
    pub frame: FrameId,
    pub self_cost: Cost,
    pub inclusive: Cost,
}

impl From<engine::FunctionTotal<Cost>> for FunctionRow {
    fn from(t: engine::FunctionTotal<Cost>) -> Self {
        FunctionRow { frame: FrameId(t.func), self_cost: t.self_w, inclusive: t.total }
    }
}

/// The report's paths of a profile for a thread selection ([`engine::frame_paths`]).
pub fn frame_paths<'a>(p: &'a Profile, threads: &Threads) -> engine::StackPaths<'a, Cost> {
    threads.with_filter(|f| engine::frame_paths(&p.costs, f))
}

/// Rows of every frame with a cost, in frame order, for a thread selection.
pub fn function_rows(p: &Profile, threads: &Threads) -> Vec<FunctionRow> {
    // Sums per function: a stack's costs need not be merged over threads first.
    let paths = threads.with_filter(|f| engine::thread_stack_paths(&p.costs, f));
    engine::function_totals(&paths).into_iter().map(FunctionRow::from).collect()
}

fn stats(p: &Profile, names: &[String], r: &FunctionRow) -> FunctionStats {
    let f = &p.costs.stacks.frames[r.frame.0 as usize];
    FunctionStats {
        frame: r.frame,
        name: names[r.frame.0 as usize].clone(),
        module: f.module.clone(),
        kind: f.kind,
        self_cost: r.self_cost,
        inclusive: r.inclusive,
    }
}

/// Hot spots: per function, sorted by the metric's self value (then inclusive, then name).
/// `spec` is the user's `--thread` text, for the merged group's label.
pub fn hotspots(p: &Profile, q: &CostQuery, spec: Option<&str>) -> CostView<FunctionStats> {
    let m = select::metric(p, q.metric);
    let names = select::display_names(p);
    let frames = &p.costs.stacks.frames;
    let mut groups = Vec::new();
    for g in thread_groups(p, q.by_thread, &q.threads) {
        let mut rows = function_rows(p, &group_threads(g, &q.threads));
        rows.retain(|r| m.of(&r.inclusive) > 0 || m.of(&r.self_cost) > 0);
        rows.sort_by(|a, b| {
            m.of(&b.self_cost)
                .cmp(&m.of(&a.self_cost))
                .then(m.of(&b.inclusive).cmp(&m.of(&a.inclusive)))
                .then(frames[a.frame.0 as usize].name.cmp(&frames[b.frame.0 as usize].name))
                .then(a.frame.cmp(&b.frame))
        });
        let total = rows.iter().map(|r| m.of(&r.self_cost)).saturating_sum();
        let count = rows.len();
        rows.truncate(q.top.unwrap_or(count));
        groups.push(Group {
            thread: g,
            label: group_label(p, g, spec),
            total,
            count,
            rows: rows.iter().map(|r| stats(p, &names, r)).collect(),
            hidden: Hidden::default(),
        });
    }
    CostView { metric: m, groups }
}

/// The flat function summary: every function with a self cost (calls when instrumented), most
/// first, ties by name.
pub fn summary(p: &Profile, q: &CostQuery) -> CostView<FunctionStats> {
    let m = select::metric(p, q.metric);
    let names = select::display_names(p);
    let instrumented = select::is_instrumented(m);
    let key = |r: &FunctionRow| if instrumented { r.self_cost.calls } else { m.of(&r.self_cost) };
    let mut rows: Vec<FunctionRow> = function_rows(p, &q.threads).into_iter().filter(|r| key(r) > 0).collect();
    rows.sort_by(|a, b| key(b).cmp(&key(a)).then(names[a.frame.0 as usize].cmp(&names[b.frame.0 as usize])));
    let total = rows.iter().map(key).saturating_sum();
    let count = rows.len();
    rows.truncate(q.top.unwrap_or(count));
    let rows = rows.iter().map(|r| stats(p, &names, r)).collect();
    let group = Group { thread: None, label: String::new(), total, count, rows, hidden: Hidden::default() };
    CostView { metric: m, groups: vec![group] }
}

/// One node of the top-down call tree, in display order (depth first, children by inclusive
/// value); `parent` indexes the same list.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallNode {
    pub stack: StackId,
    pub frame: FrameId,
    pub name: String,
    pub depth: usize,
    pub parent: Option<usize>,
    pub self_cost: Cost,
    pub inclusive: Cost,
}

/// The call tree per group, nodes in display order, cut by `depth` and `min_percent`. Under an
/// exact weight the tree is the hooks' alone: nodes of sampled stacks with no exact cost (`[stack
/// cut…]`, `[thread not walkable]`, a sampled path the hooks never saw) are left out, with their
/// subtrees; their weight under the metric is zero.
pub fn call_tree(p: &Profile, q: &CostQuery, spec: Option<&str>) -> CostView<CallNode> {
    let m = select::metric(p, q.metric);
    let exact = m.is_instrumented();
    let min_percent = q.min_percent_for(m);
    let names = select::display_names(p);
    let frames = &p.costs.stacks.frames;
    let mut groups = Vec::new();
    for g in thread_groups(p, q.by_thread, &q.threads) {
        let threads = group_threads(g, &q.threads);
        // No deeper than the rows shown, and laid out by the metric alone: the rows' costs are
        // summed once the rows are known (a node of the whole tree then takes 40 bytes, not 184).
        let (mut tree, stacks) =
            threads.with_filter(|f| engine::stack_tree_weighed(&p.costs, f, q.depth, |c| Shown::of(m, c)));
        // Children by inclusive value, then name, then stack.
        tree.sort_children(|nodes, a, b| {
            let (x, y) = (&nodes[a as usize], &nodes[b as usize]);
            y.total
                .value()
                .cmp(&x.total.value())
                .then(frames[x.func as usize].name.cmp(&frames[y.func as usize].name))
                .then(stacks[a as usize].cmp(&stacks[b as usize]))
        });
        let roots = tree.children(0);
        let total: u64 = roots.iter().map(|&r| tree.nodes[r as usize].total.value()).saturating_sum();
        let mut rows = Vec::new();
        let mut hidden = Hidden { min_percent, ..Default::default() };
        // (node, depth, parent row, under a hidden row); hidden subtrees are walked to count them
        // as far as `depth` would show them.
        let mut stack: Vec<(u32, usize, Option<usize>, bool)> =
            roots.iter().rev().map(|&n| (n, 0, None, false)).collect();
        while let Some((n, depth, parent, under_hidden)) = stack.pop() {
            let node = &tree.nodes[n as usize];
            if exact && !node.total.exact() {
                continue;
            }
            let v = node.total.value();
            // The same share the report prints, so a row below 0.05% is one that would read 0.0%.
            let below = under_hidden || (total > 0 && (v as f64) * 100.0 / (total as f64) < min_percent);
            let me = if below {
                hidden.rows += 1;
                if !under_hidden {
                    hidden.value = hidden.value.saturating_add(v);
                }
                None
            } else {
                rows.push(CallNode {
                    stack: stacks[n as usize],
                    frame: FrameId(node.func),
                    name: names[node.func as usize].clone(),
                    depth,
                    parent,
                    self_cost: Cost::default(),
                    inclusive: Cost::default(),
                });
                Some(rows.len() - 1)
            };
            if q.depth.is_none_or(|d| depth + 1 < d) {
                for &k in tree.children(n).iter().rev() {
                    stack.push((k, depth + 1, me, below));
                }
            }
        }
        drop((tree, stacks));
        row_costs(p, &threads, &mut rows);
        let count = rows.len();
        groups.push(Group { thread: g, label: group_label(p, g, spec), total, count, rows, hidden });
    }
    CostView { metric: m, groups }
}

/// What laying out the call tree needs of a node's cost: the metric's value, whether the hooks
/// measured any of it, and whether any of it is not zero. Packed (9 bytes): a node of the whole
/// tree then takes 40 bytes.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, packed)]
struct Shown {
    value: u64,
    /// [`Shown::EXACT`], [`Shown::ANY`].
    flags: u8,
}

impl Shown {
    const EXACT: u8 = 1;
    const ANY: u8 = 2;

    fn of(m: Metric, c: &Cost) -> Shown {
        let flags = if c.has_exact() { Self::EXACT } else { 0 } | if c.is_zero() { 0 } else { Self::ANY };
        Shown { value: m.of(c), flags }
    }

    fn value(self) -> u64 {
        self.value
    }

    fn exact(self) -> bool {
        self.flags & Self::EXACT != 0
    }
}

impl engine::Weight for Shown {
    fn add(&mut self, o: &Self) {
        let (a, b) = (self.value, o.value);
        self.value = a.saturating_add(b);
        self.flags |= o.flags;
    }

    fn is_zero(&self) -> bool {
        self.flags & Self::ANY == 0
    }
}

/// The self and inclusive costs of call-tree rows (each its stack; rows depth first, a row's
/// parent before it), over `threads`: a stack's cost goes to the row of its nearest stack among
/// the rows' (itself, or the ancestor it is shown under), then each row's to its parent's.
fn row_costs(p: &Profile, threads: &Threads, rows: &mut [CallNode]) {
    const NONE: u32 = u32::MAX;
    let table = &p.costs.stacks.nodes;
    let mut near = vec![NONE; table.len()];
    for (r, row) in rows.iter().enumerate() {
        near[row.stack.0 as usize] = r as u32;
    }
    // Parents come before their children in the stack table.
    for i in 0..table.len() {
        if near[i] == NONE {
            if let Some(parent) = table[i].parent {
                near[i] = near[parent.0 as usize];
            }
        }
    }
    let mut inclusive = vec![Cost::default(); rows.len()];
    for t in p.costs.threads.iter().filter(|t| threads.contains(t.os_tid)) {
        for (s, c) in t.costs.iter() {
            let r = near[s.0 as usize];
            if r != NONE {
                inclusive[r as usize].add(&c);
                if rows[r as usize].stack == s {
                    rows[r as usize].self_cost.add(&c);
                }
            }
        }
    }
    for r in (0..rows.len()).rev() {
        let below = inclusive[r];
        rows[r].inclusive = below;
        if let Some(parent) = rows[r].parent {
            inclusive[parent].add(&below);
        }
    }
}

/// One caller or callee edge: `frame` `None` is "no managed caller" (an entry point).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EdgeStats {
    pub frame: Option<FrameId>,
    pub name: Option<String>,
    /// Exact calls along the edge (instrumented data).
    pub calls: u64,
    /// Cost that flowed through the edge.
    pub cost: Cost,
    /// Callers in a profile built with lines: the lines the caller calls from, most cost first
    /// ([`crate::callsites`]); empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<crate::callsites::CallSite>,
}

/// Callers and callees of the function(s) a name selects.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Callers {
    pub frames: Vec<FrameId>,
    pub names: Vec<String>,
    pub calls: u64,
    pub self_cost: Cost,
    pub inclusive: Cost,
    /// Sorted by the metric's cost, then calls.
    pub callers: Vec<EdgeStats>,
    pub callees: Vec<EdgeStats>,
}

/// A function with no recorded caller.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EntryPoint {
    pub frame: FrameId,
    pub name: String,
    pub calls: u64,
    pub inclusive: Cost,
}

/// The butterfly of `function` (a name, see [`select::find_functions`]), when given, and the
/// entry points, both for the metric and threads of `q`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallersView {
    pub metric: Metric,
    pub function: Option<Callers>,
    /// With a cost for the metric, most first.
    pub entry_points: Vec<EntryPoint>,
    pub entry_total: u64,
}

pub fn callers(p: &Profile, q: &CostQuery, function: Option<&str>) -> Result<CallersView> {
    let m = select::metric(p, q.metric);
    // In a profile built with lines: rows per function, each caller with its lines (call sites).
    let per_function = crate::callsites::function_frames(p);
    let names = match per_function {
        Some(_) => select::function_names(p),
        None => select::display_names(p),
    };
    let name_of = |f: FrameId| names[f.0 as usize].clone();
    let function_of = |f: u32| per_function.as_ref().and_then(|c| c.get(f as usize).copied()).unwrap_or(f);
    let all_paths = frame_paths(p, &q.threads);
    let function_paths = per_function.as_ref().map(|map| crate::callsites::FunctionPaths { paths: &all_paths, map });
    let paths: &dyn engine::PathSource<Cost> = match &function_paths {
        Some(fp) => fp,
        None => &all_paths,
    };
    let function = match function {
        Some(wanted) => {
            let mut frames: Vec<FrameId> =
                select::find_functions(p, &names, wanted)?.into_iter().map(|f| FrameId(function_of(f.0))).collect();
            frames.sort();
            frames.dedup();
            let b = engine::butterfly(paths, |f| frames.contains(&FrameId(f)));
            // The callers' lines: the same butterfly on the frames as they are.
            let by_line = per_function
                .as_ref()
                .map(|_| engine::butterfly(&all_paths, |f| frames.contains(&FrameId(function_of(f)))));
            let sites_of = |caller: FrameId| -> Vec<crate::callsites::CallSite> {
                let Some(bl) = &by_line else { return Vec::new() };
                let mut v: Vec<crate::callsites::CallSite> = bl
                    .callers
                    .iter()
                    .filter_map(|e| {
                        let f = e.func?;
                        let line = p.costs.stacks.frames[f as usize].line.as_ref()?;
                        (function_of(f) == caller.0).then(|| crate::callsites::CallSite {
                            file: line.file.clone(),
                            line: line.line,
                            calls: e.last.calls,
                            cost: e.through,
                        })
                    })
                    .collect();
                v.sort_by(|a, b| {
                    m.of(&b.cost).cmp(&m.of(&a.cost)).then(b.calls.cmp(&a.calls)).then(a.line.cmp(&b.line))
                });
                v
            };
            let edges = |v: &[engine::Edge<Cost>], with_sites: bool| {
                let mut v: Vec<EdgeStats> = v
                    .iter()
                    .map(|e| {
                        let frame = e.func.map(FrameId);
                        let sites = match frame {
                            Some(f) if with_sites => sites_of(f),
                            _ => Vec::new(),
                        };
                        EdgeStats { frame, name: frame.map(name_of), calls: e.last.calls, cost: e.through, sites }
                    })
                    .collect();
                v.sort_by(|a, b| {
                    m.of(&b.cost).cmp(&m.of(&a.cost)).then(b.calls.cmp(&a.calls)).then(a.frame.cmp(&b.frame))
                });
                v
            };
            let mut shown: Vec<String> = frames.iter().map(|&f| name_of(f)).collect();
            shown.dedup();
            Some(Callers {
                names: shown,
                frames,
                calls: b.callers.iter().map(|e| e.last.calls).saturating_sum(),
                self_cost: b.self_w,
                inclusive: b.total,
                callers: edges(&b.callers, true),
                callees: edges(&b.callees, false),
            })
        }
        None if p.costs.is_empty() => {
            return Err(QueryError::NoData(
                "this trace has no call data: record with --instrument (or with sampling) first".into(),
            ))
        }
        None => None,
    };
    let mut roots: Vec<engine::Entry<Cost>> =
        engine::entry_points(paths, |_| false).into_iter().filter(|e| m.of(&e.total) > 0).collect();
    roots.sort_by(|a, b| m.of(&b.total).cmp(&m.of(&a.total)).then(a.func.cmp(&b.func)));
    let entry_total = roots.iter().map(|e| m.of(&e.total)).saturating_sum();
    let entry_points = roots
        .iter()
        .map(|e| {
            let frame = FrameId(e.func);
            EntryPoint { frame, name: name_of(frame), calls: e.alone.calls, inclusive: e.total }
        })
        .collect();
    Ok(CallersView { metric: m, function, entry_points, entry_total })
}

/// The Monte Carlo tables for a sampled weight: hits per module and per routine (leaf frames).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hits {
    pub metric: Metric,
    /// Samples of the selection (the sum over modules).
    pub total: u64,
    pub modules: Vec<ModuleHits>,
    pub routines: Vec<RoutineHits>,
}

pub fn module_hits(p: &Profile, metric: Metric, threads: &Threads) -> Result<Hits> {
    if !matches!(metric, Metric::Cpu | Metric::Wall) {
        return Err(QueryError::Unsupported("--view modules counts samples: use --weight cpu or --weight wall".into()));
    }
    let (modules, routines) = hits(p, metric, threads);
    let total = modules.iter().map(|m| m.samples).saturating_sum();
    Ok(Hits { metric, total, modules, routines })
}

/// The Monte Carlo tables: hits (self samples) per module and per routine for the CPU or wall
/// metric, most hits first (ties by name, so output is deterministic).
pub fn hits(p: &Profile, metric: Metric, threads: &Threads) -> (Vec<ModuleHits>, Vec<RoutineHits>) {
    let pick = |c: &Cost| match metric {
        Metric::Wall => (c.wall_samples, c.wall_ns),
        _ => (c.cpu_samples, c.cpu_ns),
    };
    let mut routines = Vec::new();
    let mut modules: HashMap<String, ModuleHits> = HashMap::new();
    for r in function_rows(p, threads) {
        let (samples, ns) = pick(&r.self_cost);
        if samples == 0 {
            continue;
        }
        let module = frame_module(p, r.frame);
        let m =
            modules.entry(module.clone()).or_insert_with(|| ModuleHits { module: module.clone(), samples: 0, ns: 0 });
        m.samples += samples;
        m.ns += ns;
        routines.push(RoutineHits {
            frame: r.frame,
            module,
            samples,
            ns,
            address: p.sampling.addresses.get(&r.frame).copied(),
        });
    }
    let name = |f: FrameId| p.costs.stacks.frames[f.0 as usize].name.as_str();
    routines.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| name(a.frame).cmp(name(b.frame))));
    let mut modules: Vec<ModuleHits> = modules.into_values().collect();
    modules.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.module.cmp(&b.module)));
    (modules, routines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_model::FrameKey;

    /// main → fib → fib → fib, main → work (thread 2); costs in `time_ns`, calls exact.
    fn sample() -> (Profile, [FrameId; 3]) {
        let mut p = Profile::default();
        let t = &mut p.costs;
        let f: Vec<FrameId> =
            ["Main", "Fib", "Work"].iter().map(|n| t.stacks.intern_frame(FrameKey::Label(n.to_string()))).collect();
        let (main, fib, work) = (f[0], f[1], f[2]);
        let c = |calls, time_ns| Cost { calls, time_ns, ..Default::default() };
        for (frames, tid, cost) in [
            (vec![main], 1, c(1, 10)),
            (vec![main, fib], 1, c(1, 5)),
            (vec![main, fib, fib], 1, c(2, 6)),
            (vec![main, fib, fib, fib], 1, c(4, 8)),
            (vec![main, work], 2, c(3, 30)),
        ] {
            let s = t.stacks.intern_stack(&frames).unwrap();
            t.add(tid, s, &cost);
        }
        (p, [main, fib, work])
    }

    #[test]
    fn report_figures_count_recursion_once_and_calls_exactly() {
        let (p, [main, fib, work]) = sample();
        let rows = function_rows(&p, &Threads::all());
        let row = |f| rows.iter().find(|r| r.frame == f).unwrap().clone();
        assert_eq!((row(fib).self_cost.calls, row(fib).self_cost.time_ns, row(fib).inclusive.time_ns), (7, 19, 19));
        assert_eq!((row(main).inclusive.time_ns, row(work).inclusive.time_ns), (59, 30));
        assert!(function_rows(&p, &Threads::one(1)).iter().all(|r| r.frame != work));

        let q = CostQuery { metric: Some(Metric::Time), ..Default::default() };
        let tree = &call_tree(&p, &q, None).groups[0];
        assert_eq!(tree.total, 59);
        let shape: Vec<(&str, usize, u64)> =
            tree.rows.iter().map(|n| (n.name.as_str(), n.depth, n.inclusive.time_ns)).collect();
        assert_eq!(shape, [("Main", 0, 59), ("Work", 1, 30), ("Fib", 1, 19), ("Fib", 2, 14), ("Fib", 3, 8)]);

        let v = callers(&p, &q, Some("Fib")).unwrap();
        let b = v.function.unwrap();
        assert_eq!((b.calls, b.self_cost.time_ns, b.inclusive.time_ns), (7, 19, 19));
        let edge = |edges: &[EdgeStats], f| edges.iter().find(|e| e.frame == Some(f)).unwrap().clone();
        assert_eq!((edge(&b.callers, main).calls, edge(&b.callers, main).cost.time_ns), (1, 19));
        assert_eq!(edge(&b.callers, fib).calls, 6);
        assert_eq!(edge(&b.callees, fib).calls, 6);
        let m = callers(&p, &q, Some("Main")).unwrap().function.unwrap();
        assert_eq!(m.callers.iter().map(|e| e.frame).collect::<Vec<_>>(), [None], "Main is an entry point");
        assert_eq!(edge(&m.callees, work).calls, 3);
        assert_eq!(
            v.entry_points,
            [EntryPoint {
                frame: main,
                name: "Main".into(),
                calls: 1,
                inclusive: Cost { calls: 11, time_ns: 59, ..Default::default() }
            }]
        );
        assert_eq!(v.entry_total, 59);
    }

    /// An instrumented thread (Main 1000 ns → Big 9000 ns → Tiny 2 ns → Tinier 1 ns) with a
    /// sampled stack the hooks never saw: `[stack cut…]` → Big, CPU samples only.
    fn exact_with_samples() -> Profile {
        let mut p = Profile::default();
        let t = &mut p.costs;
        let f: Vec<FrameId> = ["Main", "Big", "Tiny", "Tinier", "[stack cut…]"]
            .iter()
            .map(|n| t.stacks.intern_frame(FrameKey::Label(n.to_string())))
            .collect();
        let timed = |calls, time_ns| Cost { calls, time_ns, ..Default::default() };
        let sampled = Cost { cpu_samples: 5, cpu_ns: 20_000_000, ..Default::default() };
        for (frames, cost) in [
            (vec![f[0]], timed(1, 1000)),
            (vec![f[0], f[1]], timed(3, 9000)),
            (vec![f[0], f[1], f[2]], timed(2, 2)),
            (vec![f[0], f[1], f[2], f[3]], timed(1, 1)),
            (vec![f[0], f[1], f[2], f[3]], sampled),
            (vec![f[4], f[1]], sampled),
        ] {
            let s = t.stacks.intern_stack(&frames).unwrap();
            t.add(1, s, &cost);
        }
        p
    }

    /// Rows' costs summed once the rows are known are each row's stack's own cost (self) and its
    /// subtree's (inclusive), over the group's threads: random stacks on three threads, exact and
    /// sampled costs, every metric, cut by depth and share, merged and per thread.
    #[test]
    fn call_tree_rows_hold_their_stacks_own_and_subtree_costs() {
        let mut p = Profile::default();
        let t = &mut p.costs;
        let f: Vec<FrameId> = (0..6).map(|i| t.stacks.intern_frame(FrameKey::Label(format!("F{i}")))).collect();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..600 {
            let depth = 1 + (next() % 7) as usize;
            let frames: Vec<FrameId> = (0..depth).map(|_| f[(next() % 6) as usize]).collect();
            let s = t.stacks.intern_stack(&frames).unwrap();
            let r = next();
            let cost = match r % 3 {
                0 => Cost { calls: r % 5, time_ns: r % 1000, suspended_ns: r % 3, ..Default::default() },
                1 => Cost { cpu_samples: 1, cpu_ns: r % 10_000, wall_ns: r % 777, ..Default::default() },
                _ => Cost { calls: 1, time_ns: r % 50, cpu_samples: 2, cpu_ns: r % 99, ..Default::default() },
            };
            t.add(1 + (next() % 3) as u32, s, &cost);
        }
        let under = |mut s: StackId, top: StackId| loop {
            if s == top {
                return true;
            }
            match p.costs.stacks.node(s).parent {
                Some(parent) => s = parent,
                None => return false,
            }
        };
        let mut rows = 0;
        for metric in [Metric::Time, Metric::Calls, Metric::Cpu, Metric::Wall] {
            for depth in [None, Some(1), Some(3)] {
                for min_percent in [0.0, 2.0] {
                    for by_thread in [false, true] {
                        let q = CostQuery {
                            metric: Some(metric),
                            depth,
                            min_percent: Some(min_percent),
                            by_thread,
                            ..Default::default()
                        };
                        for g in call_tree(&p, &q, None).groups {
                            for row in &g.rows {
                                let (mut own, mut all) = (Cost::default(), Cost::default());
                                for t in p.costs.threads.iter().filter(|t| g.thread.is_none_or(|k| k == t.os_tid)) {
                                    for (s, c) in t.costs.iter() {
                                        if s == row.stack {
                                            own.add(&c);
                                        }
                                        if under(s, row.stack) {
                                            all.add(&c);
                                        }
                                    }
                                }
                                assert_eq!(
                                    (row.self_cost, row.inclusive),
                                    (own, all),
                                    "{metric:?} {depth:?} {min_percent}"
                                );
                                rows += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(rows > 500, "{rows} rows checked");
    }

    fn shape(v: &CostView<CallNode>) -> Vec<(&str, usize)> {
        v.groups[0].rows.iter().map(|n| (n.name.as_str(), n.depth)).collect()
    }

    #[test]
    fn the_exact_tree_leaves_out_sampled_rows_and_hides_rows_that_read_zero() {
        let p = exact_with_samples();
        let time = CostQuery { metric: Some(Metric::Time), ..Default::default() };
        let v = call_tree(&p, &time, None);
        let g = &v.groups[0];
        assert_eq!(g.total, 10_003);
        // Tiny is 0.02%, Tinier 0.01%: both would read 0.0%; the sampled `[stack cut…]` is gone.
        assert_eq!(shape(&v), [("Main", 0), ("Big", 1)]);
        assert_eq!(g.hidden, Hidden { min_percent: EXACT_TREE_MIN_PERCENT, rows: 2, value: 3 });
        assert_eq!(g.rows[1].inclusive.time_ns, 9003, "the hidden rows' time stays in their caller's");

        // --min-percent 0: every exact row, and still no sampled one.
        let all = call_tree(&p, &CostQuery { min_percent: Some(0.0), ..time.clone() }, None);
        assert_eq!(shape(&all), [("Main", 0), ("Big", 1), ("Tiny", 2), ("Tinier", 3)]);
        assert_eq!(all.groups[0].hidden, Hidden::default());
        assert_eq!(all.groups[0].rows[3].self_cost.calls, 1);
        let zero = all.groups[0].rows.iter().filter(|n| n.inclusive.time_ns * 10_000 / g.total < 5).count();
        assert_eq!(zero, g.hidden.rows, "hidden = the rows under the cut in the full tree");

        // Hidden rows are counted as deep as --depth shows rows.
        let shallow = call_tree(&p, &CostQuery { depth: Some(3), ..time.clone() }, None);
        assert_eq!(shallow.groups[0].hidden.rows, 1);

        // Counts only (--weight calls) is exact too: the same rows, cut by calls (Tinier: 1 of 7).
        let calls = call_tree(&p, &CostQuery { metric: Some(Metric::Calls), ..Default::default() }, None);
        assert_eq!(shape(&calls), [("Main", 0), ("Big", 1), ("Tiny", 2), ("Tinier", 3)]);
    }

    #[test]
    fn sampled_trees_are_unchanged() {
        let p = exact_with_samples();
        let v = call_tree(&p, &CostQuery { metric: Some(Metric::Cpu), ..Default::default() }, None);
        // Main and Big carry no samples of their own but lead to some; nothing is hidden.
        assert_eq!(shape(&v), [("Main", 0), ("Big", 1), ("Tiny", 2), ("Tinier", 3), ("[stack cut…]", 0), ("Big", 1)]);
        assert_eq!(v.groups[0].hidden.rows, 0);
        assert_eq!(v.groups[0].hidden.min_percent, 0.0);
        let cut = call_tree(
            &p,
            &CostQuery { metric: Some(Metric::Cpu), min_percent: Some(60.0), ..Default::default() },
            None,
        );
        assert_eq!(shape(&cut), Vec::<(&str, usize)>::new());
        assert_eq!((cut.groups[0].hidden.rows, cut.groups[0].hidden.value), (6, 40_000_000));
    }
}
