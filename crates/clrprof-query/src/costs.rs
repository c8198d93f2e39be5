//! Cost views of the canonical aggregate: hot spots, the call tree, callers/callees with entry
//! points, the flat summary and the Monte Carlo hit tables — sorted, cut and totalled here.

use crate::SaturatingSum;
use clrprof_model::hits::{hits, ModuleHits, RoutineHits};
use clrprof_model::views::{self, FunctionRow, TreeNode};
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
    /// Call tree: leave out nodes (and their subtrees) below this share of the group's total.
    pub min_percent: f64,
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

/// Rows of every function with a cost, unordered, for a thread selection.
pub fn function_rows(p: &Profile, threads: &Threads) -> Vec<FunctionRow> {
    threads.with_filter(|f| views::function_rows(&p.costs, f))
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
    CostView { metric: m, groups: vec![Group { thread: None, label: String::new(), total, count, rows }] }
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

/// The call tree per group, nodes in display order, cut by `depth` and `min_percent`.
pub fn call_tree(p: &Profile, q: &CostQuery, spec: Option<&str>) -> CostView<CallNode> {
    let m = select::metric(p, q.metric);
    let names = select::display_names(p);
    let mut groups = Vec::new();
    for g in thread_groups(p, q.by_thread, &q.threads) {
        let (nodes, roots) = group_threads(g, &q.threads).with_filter(|f| views::call_tree(&p.costs, f));
        let total: u64 = roots.iter().map(|&r| m.of(&nodes[r].inclusive)).saturating_sum();
        let mut rows = Vec::new();
        let mut order = roots.clone();
        sort_children(p, &nodes, &mut order, m);
        let mut stack: Vec<(usize, usize, Option<usize>)> = order.into_iter().rev().map(|n| (n, 0, None)).collect();
        while let Some((n, depth, parent)) = stack.pop() {
            let node = &nodes[n];
            let v = m.of(&node.inclusive);
            if total > 0 && (v as f64) * 100.0 / (total as f64) < q.min_percent {
                continue;
            }
            let me = rows.len();
            rows.push(CallNode {
                stack: node.stack,
                frame: node.frame,
                name: names[node.frame.0 as usize].clone(),
                depth,
                parent,
                self_cost: node.self_cost,
                inclusive: node.inclusive,
            });
            if q.depth.is_none_or(|d| depth + 1 < d) {
                let mut kids = node.children.clone();
                sort_children(p, &nodes, &mut kids, m);
                for k in kids.into_iter().rev() {
                    stack.push((k, depth + 1, Some(me)));
                }
            }
        }
        let count = rows.len();
        groups.push(Group { thread: g, label: group_label(p, g, spec), total, count, rows });
    }
    CostView { metric: m, groups }
}

fn sort_children(p: &Profile, nodes: &[TreeNode], v: &mut [usize], m: Metric) {
    let frames = &p.costs.stacks.frames;
    v.sort_by(|&a, &b| {
        m.of(&nodes[b].inclusive)
            .cmp(&m.of(&nodes[a].inclusive))
            .then(frames[nodes[a].frame.0 as usize].name.cmp(&frames[nodes[b].frame.0 as usize].name))
            .then(nodes[a].stack.cmp(&nodes[b].stack))
    });
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
    let names = select::display_names(p);
    let name_of = |f: FrameId| names[f.0 as usize].clone();
    let function = match function {
        Some(wanted) => {
            let frames = select::find_functions(p, &names, wanted)?;
            let b = q.threads.with_filter(|f| views::butterfly(&p.costs, &frames, f));
            let edges = |v: &[views::Edge]| {
                let mut v: Vec<EdgeStats> = v
                    .iter()
                    .map(|e| EdgeStats { frame: e.frame, name: e.frame.map(name_of), calls: e.calls, cost: e.cost })
                    .collect();
                v.sort_by(|a, b| {
                    m.of(&b.cost).cmp(&m.of(&a.cost)).then(b.calls.cmp(&a.calls)).then(a.frame.cmp(&b.frame))
                });
                v
            };
            Some(Callers {
                names: frames.iter().map(|&f| name_of(f)).collect(),
                frames,
                calls: b.callers.iter().map(|e| e.calls).saturating_sum(),
                self_cost: b.self_cost,
                inclusive: b.inclusive,
                callers: edges(&b.callers),
                callees: edges(&b.callees),
            })
        }
        None if p.costs.is_empty() => {
            return Err(QueryError::NoData(
                "this trace has no call data: record with --instrument (or with sampling) first".into(),
            ))
        }
        None => None,
    };
    let mut roots: Vec<views::EntryPoint> = q
        .threads
        .with_filter(|f| views::entry_points(&p.costs, f))
        .into_iter()
        .filter(|e| m.of(&e.inclusive) > 0)
        .collect();
    roots.sort_by(|a, b| m.of(&b.inclusive).cmp(&m.of(&a.inclusive)).then(a.frame.cmp(&b.frame)));
    let entry_total = roots.iter().map(|e| m.of(&e.inclusive)).saturating_sum();
    let entry_points = roots
        .iter()
        .map(|e| EntryPoint { frame: e.frame, name: name_of(e.frame), calls: e.calls, inclusive: e.inclusive })
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
    let (modules, routines) = threads.with_filter(|f| hits(p, metric, f));
    let total = modules.iter().map(|m| m.samples).saturating_sum();
    Ok(Hits { metric, total, modules, routines })
}
