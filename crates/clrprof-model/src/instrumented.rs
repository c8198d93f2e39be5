//! Ingestion of enter/leave instrumentation: the agent's per-thread calling-context trees
//! (nodes, then cost deltas) become stacks and costs of the canonical [`CostTree`], and flow
//! events are kept in order per thread.

use std::collections::HashMap;
use std::sync::Arc;

use clrprof_trace::{CallTreeDelta, CallTreeNodes, FlowEvents, InstrumentationInfo};

use crate::stacks::{Cost, CostTree, FrameKey, StackId, StackTable};
use crate::time::TimeRange;

/// How the instrumentation that produced a profile was set up.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Instrumentation {
    pub inlining_disabled: bool,
    pub tiering_disabled: bool,
    pub ready_to_run_ignored: bool,
    pub profiler_time_subtracted: bool,
    pub counts_only: bool,
    pub flow: bool,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub hook_cost_ns: f64,
    /// Functions that got hooks / that the filters left out.
    pub hooked_functions: u64,
    pub filtered_functions: u64,
    /// The FunctionIDs that got hooks. A function missing here has no call count (filtered out,
    /// or never offered to the mapper: methods without metadata such as DynamicMethods).
    #[serde(skip)]
    pub hooked: std::collections::HashSet<u64>,
}

impl Instrumentation {
    pub fn from_record(r: &InstrumentationInfo) -> Instrumentation {
        let split = |s: &str| s.split(';').filter(|p| !p.is_empty()).map(String::from).collect();
        Instrumentation {
            inlining_disabled: r.inlining_disabled,
            tiering_disabled: r.tiering_disabled,
            ready_to_run_ignored: r.ready_to_run_ignored,
            profiler_time_subtracted: r.profiler_time_subtracted,
            counts_only: r.counts_only,
            flow: r.flow,
            include: split(&r.include),
            exclude: split(&r.exclude),
            hook_cost_ns: r.hook_cost_ns,
            hooked_functions: 0,
            filtered_functions: 0,
            hooked: Default::default(),
        }
    }
}

/// One flow event: `kind` 0 enter, 1 leave, 2 tailcall, 3 unwind (frame left by an exception).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FlowEvent {
    pub kind: u8,
    pub function: u64,
    pub ts: u64,
}

/// One thread's flow events. The events are shared between the builder and every profile taken
/// from it (a flow trace can hold tens of millions): a profile sees the part of them in its time
/// window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowThread {
    pub os_tid: u32,
    all: Arc<Vec<FlowEvent>>,
    window: std::ops::Range<usize>,
    /// Events the agent could not keep (its buffer was full); not timed, so never windowed.
    pub dropped: u64,
    /// Whether `all` is in time order (it is, as the agent writes it).
    sorted: bool,
}

/// Cost added to one call-tree node by one delta record, with the record's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallDelta {
    pub ts: u64,
    pub os_tid: u32,
    pub stack: StackId,
    /// The node in [`CctIngest`]'s call-site table (`NO_SITE` when its tree has no call sites).
    pub node: u32,
    pub calls: u64,
    pub time_ns: u64,
    pub suspended_ns: u64,
    pub profiler_ns: u64,
}

/// Maps each thread's agent-side node ids to interned stacks, and keeps every delta with its time
/// (the agent publishes deltas every second — every flush before — so instrumented costs are known
/// to that interval).
///
/// Node ids are per tree: one tree per thread lifetime, keyed by `(os_tid, tree)`. The kernel
/// reuses thread ids, so threads one after the other can share an `os_tid`; their trees do not
/// share node ids. Records without a tree number (`tree` 0, older agents) have one tree per
/// `os_tid` at a time: nodes from id 0 start a new one (an older agent numbered each thread's
/// nodes from 0).
#[derive(Clone, Default)]
pub struct CctIngest {
    /// Per tree, per node: its stack (per function) and its entry in `sites` (`NO_SITE`: none).
    nodes: HashMap<(u32, u32), Vec<(StackId, u32)>>,
    /// Every node of trees recorded with call sites, parents before children.
    sites: Vec<SiteNode>,
    deltas: Vec<CallDelta>,
    pub problems: u64,
}

/// No entry in the call-site table.
pub const NO_SITE: u32 = u32::MAX;

/// A call-tree node with its call site: the return address into its parent's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteNode {
    /// The parent's entry in the call-site table (`NO_SITE`: the thread's root).
    pub parent: u32,
    pub function: u64,
    pub site: u64,
}

impl CctIngest {
    pub fn nodes(&mut self, stacks: &mut StackTable, r: &CallTreeNodes) {
        let map = self.nodes.entry((r.os_tid, r.tree)).or_default();
        if r.tree == 0 && r.first == 0 {
            map.clear();
        }
        if r.first as usize != map.len() {
            // A gap means records were lost (dropped by the agent); later nodes cannot be placed.
            self.problems += 1;
            return;
        }
        // Call sites only when every node has one (a damaged record keeps its nodes per function).
        let sited = !r.sites.is_empty() && r.sites.len() == r.parents.len();
        for (k, (parent, func)) in r.parents.iter().zip(&r.functions).enumerate() {
            let (parent_stack, parent_site) = if *parent == u32::MAX {
                (None, NO_SITE)
            } else {
                match map.get(*parent as usize) {
                    Some(&(s, n)) => (Some(s), n),
                    None => {
                        self.problems += 1;
                        return;
                    }
                }
            };
            let frame = stacks.intern_frame(FrameKey::Function(*func));
            let site = if sited && (*parent == u32::MAX || parent_site != NO_SITE) {
                self.sites.push(SiteNode { parent: parent_site, function: *func, site: r.sites[k] });
                (self.sites.len() - 1) as u32
            } else {
                NO_SITE
            };
            map.push((stacks.intern_call(parent_stack, frame), site));
        }
    }

    /// The call-site table: every node of trees recorded with call sites, parents first.
    pub fn sites(&self) -> &[SiteNode] {
        &self.sites
    }

    pub fn delta(&mut self, r: &CallTreeDelta) {
        let Some(map) = self.nodes.get(&(r.os_tid, r.tree)) else {
            self.problems += 1;
            return;
        };
        let n = r.nodes.len();
        if r.calls.len() != n || r.time_ns.len() != n || r.suspended_ns.len() != n || r.profiler_ns.len() != n {
            self.problems += 1;
            return;
        }
        for k in 0..n {
            let Some(&(stack, node)) = map.get(r.nodes[k] as usize) else {
                self.problems += 1;
                continue;
            };
            self.deltas.push(CallDelta {
                ts: r.ts,
                os_tid: r.os_tid,
                stack,
                node,
                calls: r.calls[k],
                time_ns: r.time_ns[k],
                suspended_ns: r.suspended_ns[k],
                profiler_ns: r.profiler_ns[k],
            });
        }
    }

    /// Drops the deltas published before `ts` (the node maps stay: later deltas refer to them).
    pub fn forget_before(&mut self, ts: u64) {
        self.deltas.retain(|d| d.ts >= ts);
    }

    /// Deltas kept.
    pub fn retained(&self) -> usize {
        self.deltas.len()
    }

    /// Adds the deltas published inside `range` to `tree`; `site_stacks` (per entry of the
    /// call-site table, [`crate::callsites`]) replaces the stacks of nodes recorded with call sites.
    pub fn add_to(&self, tree: &mut CostTree, range: TimeRange, site_stacks: Option<&[StackId]>) {
        for d in self.deltas.iter().filter(|d| range.contains(d.ts)) {
            let stack = match site_stacks {
                Some(s) if d.node != NO_SITE => s.get(d.node as usize).copied().unwrap_or(d.stack),
                _ => d.stack,
            };
            let c = Cost {
                calls: d.calls,
                time_ns: d.time_ns,
                suspended_ns: d.suspended_ns,
                profiler_ns: d.profiler_ns,
                ..Default::default()
            };
            tree.add(d.os_tid, stack, &c);
        }
    }
}

impl FlowThread {
    pub fn new(os_tid: u32) -> FlowThread {
        FlowThread { os_tid, sorted: true, ..Default::default() }
    }

    /// The events, in order.
    pub fn events(&self) -> &[FlowEvent] {
        &self.all[self.window.clone()]
    }

    /// The thread's events inside `range`, sharing them with `self` (the drop count stays whole:
    /// it is not timed).
    pub fn within(&self, range: TimeRange) -> FlowThread {
        let mut t = self.clone();
        if range.is_all() {
            return t;
        }
        if self.sorted {
            let ev = &self.all[self.window.clone()];
            let a = ev.partition_point(|e| e.ts < range.from);
            let b = ev.partition_point(|e| e.ts < range.to);
            t.window = self.window.start + a..self.window.start + b;
        } else {
            let kept: Vec<FlowEvent> = self.events().iter().filter(|e| range.contains(e.ts)).copied().collect();
            t.window = 0..kept.len();
            t.all = Arc::new(kept);
        }
        t
    }

    /// Drops the events before `ts` (a profile of a range from `ts` on sees the same events).
    pub fn forget_before(&mut self, ts: u64) {
        let kept: Vec<FlowEvent> = if self.sorted {
            let ev = self.events();
            ev[ev.partition_point(|e| e.ts < ts)..].to_vec()
        } else {
            self.events().iter().filter(|e| e.ts >= ts).copied().collect()
        };
        self.window = 0..kept.len();
        self.all = Arc::new(kept);
    }

    fn extend(&mut self, r: &FlowEvents) {
        let n = r.kinds.len().min(r.functions.len()).min(r.ts.len());
        // Copies the events only while a profile taken earlier still shares them.
        let all = Arc::make_mut(&mut self.all);
        all.reserve(n);
        let mut last = all.last().map_or(0, |e| e.ts);
        for k in 0..n {
            let ts = r.ts[k];
            self.sorted &= ts >= last;
            last = ts;
            all.push(FlowEvent { kind: r.kinds[k], function: r.functions[k], ts });
        }
        self.window = 0..all.len();
    }
}

pub fn flow(threads: &mut Vec<FlowThread>, r: &FlowEvents) {
    let i = match threads.iter().position(|t| t.os_tid == r.os_tid) {
        Some(i) => i,
        None => {
            threads.push(FlowThread::new(r.os_tid));
            threads.len() - 1
        }
    };
    let t = &mut threads[i];
    t.dropped = t.dropped.saturating_add(r.dropped);
    t.extend(r);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(os_tid: u32, tree: u32, first: u32, parents: &[u32], functions: &[u64]) -> CallTreeNodes {
        CallTreeNodes { os_tid, first, parents: parents.to_vec(), functions: functions.to_vec(), tree, sites: vec![] }
    }

    fn delta(os_tid: u32, tree: u32, nodes: &[u32], calls: &[u64]) -> CallTreeDelta {
        let n = nodes.len();
        CallTreeDelta {
            os_tid,
            ts: 1,
            nodes: nodes.to_vec(),
            calls: calls.to_vec(),
            time_ns: vec![0; n],
            suspended_ns: vec![0; n],
            profiler_ns: vec![0; n],
            tree,
        }
    }

    /// Calls per root-first path of function ids.
    fn calls_by_path(c: &CctIngest, stacks: &StackTable) -> Vec<(Vec<u64>, u64)> {
        let mut tree = CostTree { stacks: stacks.clone(), threads: Vec::new() };
        c.add_to(&mut tree, TimeRange::ALL, None);
        let mut out: Vec<(Vec<u64>, u64)> = Vec::new();
        for t in &tree.threads {
            for (s, cost) in &t.costs {
                let path = stacks
                    .frames_of(*s)
                    .iter()
                    .map(|f| match stacks.frames[f.0 as usize].key {
                        FrameKey::Function(id) => id,
                        _ => 0,
                    })
                    .collect();
                match out.iter_mut().find(|(p, _)| *p == path) {
                    Some(e) => e.1 = e.1.saturating_add(cost.calls),
                    None => out.push((path, cost.calls)),
                }
            }
        }
        out.sort();
        out
    }

    /// Two threads one after the other with the same kernel tid: each tree numbers its nodes from
    /// 0, and the first thread's last delta may come after the second one's first nodes.
    #[test]
    fn trees_of_threads_sharing_a_tid_keep_their_own_node_ids() {
        let mut stacks = StackTable::default();
        let mut c = CctIngest::default();
        c.nodes(&mut stacks, &nodes(7, 1, 0, &[u32::MAX, 0], &[10, 11]));
        c.delta(&delta(7, 1, &[0, 1], &[1, 5]));
        c.nodes(&mut stacks, &nodes(7, 2, 0, &[u32::MAX, 0], &[20, 21]));
        c.delta(&delta(7, 1, &[1], &[2]));
        c.delta(&delta(7, 2, &[0, 1], &[1, 3]));
        c.nodes(&mut stacks, &nodes(7, 2, 2, &[1], &[22]));
        c.delta(&delta(7, 2, &[2], &[4]));
        assert_eq!(c.problems, 0);
        assert_eq!(
            calls_by_path(&c, &stacks),
            vec![(vec![10], 1), (vec![10, 11], 7), (vec![20], 1), (vec![20, 21], 3), (vec![20, 21, 22], 4)]
        );
    }

    /// Older agents wrote no tree number and numbered each thread's nodes from 0: nodes from 0 on
    /// a tid already seen start a new tree instead of being lost.
    #[test]
    fn records_without_a_tree_number_start_a_tree_at_node_zero() {
        let mut stacks = StackTable::default();
        let mut c = CctIngest::default();
        c.nodes(&mut stacks, &nodes(7, 0, 0, &[u32::MAX], &[10]));
        c.delta(&delta(7, 0, &[0], &[2]));
        c.nodes(&mut stacks, &nodes(7, 0, 1, &[0], &[11]));
        c.delta(&delta(7, 0, &[1], &[3]));
        c.nodes(&mut stacks, &nodes(7, 0, 0, &[u32::MAX], &[20]));
        c.delta(&delta(7, 0, &[0], &[4]));
        assert_eq!(c.problems, 0);
        assert_eq!(calls_by_path(&c, &stacks), vec![(vec![10], 2), (vec![10, 11], 3), (vec![20], 4)]);
        // A gap is still a gap.
        c.nodes(&mut stacks, &nodes(7, 0, 5, &[0], &[21]));
        assert_eq!(c.problems, 1);
    }
}
