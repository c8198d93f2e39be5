//! Ingestion of enter/leave instrumentation: the agent's per-thread calling-context trees
//! (nodes, then cost deltas) become stacks and costs of the canonical [`CostTree`], and flow
//! events are kept in order per thread (packed, in `flow`).

use std::collections::HashMap;

use clrprof_trace::{CallTreeCosts, CallTreeDelta, CallTreeNodes, InstrumentationInfo};

pub use crate::flow::{flow, FlowEvent, FlowIter, FlowThread};
use crate::flow::{get_varint, put_varint};

use crate::fasthash::FxHashMap;
use crate::stacks::{Cost, CostTree, FrameKey, StackCosts, StackId, StackTable, ThreadCosts};
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
    /// `record --count`: the counts come from IL probes (per method definition, inlined calls
    /// counted), not from enter/leave hooks; no times.
    pub il_probes: bool,
    /// `record --count`'s scope without patterns (`all`, `app`), empty otherwise.
    pub count_scope: String,
    /// `record --count`: methods in scope the probes could not count (never shown as 0 calls).
    pub uncounted: Vec<crate::counts::Uncounted>,
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
            il_probes: false,
            count_scope: String::new(),
            uncounted: Vec::new(),
        }
    }
}

/// The frame of the agent's `[call tree capped]` nodes: calls past its call-tree cap
/// (`CLRPROF_CALLTREE_MAX_MB`), counted with their time under their caller, functions unknown.
pub const CALL_TREE_CAPPED: &str = "[call tree capped]";

/// Maps each thread's agent-side node ids to interned stacks, and keeps every delta with its time
/// (the agent publishes deltas every second — every flush before — so instrumented costs are known
/// to that interval).
///
/// Node ids are per tree: one tree per thread lifetime, keyed by `(os_tid, tree)`. The kernel
/// reuses thread ids, so threads one after the other can share an `os_tid`; their trees do not
/// share node ids. Records without a tree number (`tree` 0, older agents) have one tree per
/// `os_tid` at a time: nodes from id 0 start a new one (an older agent numbered each thread's
/// nodes from 0).
///
/// The deltas are kept as the trace packs them (`CallTreeCosts`): per record its time, thread and
/// tree, then per node the gap after the previous node and the four costs as LEB128 varints, all
/// records in one byte vector. A delta record's node costs take 5–10 bytes that way where a
/// decoded one took 48, so an instrumented trace is held in less memory than its size.
#[derive(Clone, Default)]
pub struct CctIngest {
    /// Node id → its stack (per function) and its entry in `sites` (`NO_SITE`: none), per tree
    /// (a tree restarted by an older agent gets a new entry).
    maps: Vec<NodeMap>,
    /// Every node of trees recorded with call sites, parents before children.
    sites: Vec<SiteNode>,
    /// The current entry of `maps` of each `(os_tid, tree)`.
    current: HashMap<(u32, u32), u32>,
    batches: Vec<DeltaBatch>,
    packed: Vec<u8>,
    /// Node costs in `batches`.
    entries: usize,
    pub problems: u64,
    /// Set by [`fold_within`](Self::fold_within): deltas summed as they arrive instead of kept
    /// in `batches`.
    fold: Option<Folded>,
    /// A packed delta's nodes as [`fold_packed`](Self::fold_packed) decodes them.
    stage: Vec<(u32, [u64; 4])>,
}

/// Deltas summed per `(thread, stack)` as they arrive. Each node finds its thread's entry for its
/// stack once (a node is a function at one call site: a thread's nodes are several to a stack),
/// then each delta adds to the entry directly.
#[derive(Clone, Default)]
struct Folded {
    range: TimeRange,
    /// Every thread's deltas summed into one table (the first thread's), for a profile whose
    /// views merge threads anyway: one cost per stack instead of one per `(thread, stack)`.
    merged: bool,
    /// Per entry of `maps`: its thread in `threads`. A node's entry in that thread's sums takes
    /// the place of its stack in the map once a delta names it (tagged [`ENTRY`]): 4 bytes a node
    /// for both.
    trees: Vec<u32>,
    threads: Vec<FoldedThread>,
    thread_of: FxHashMap<u32, u32>,
}

const NO_ENTRY: u32 = u32::MAX;

/// In a folding reader's node map, a node's thread entry (this bit set) in place of its stack (the
/// stack is then the entry's): stacks and entries stay below 2^31, 32 bytes each.
const ENTRY: u32 = 1 << 31;

/// A thread's sums, in columns, in the order deltas first named their stacks.
#[derive(Clone, Default)]
struct FoldedThread {
    os_tid: u32,
    stacks: Vec<StackId>,
    /// Calls, time, suspended and profiler time, summed.
    sums: Vec<[u64; 4]>,
    /// The entry of each stack: an open-addressing table of entries (`NO_ENTRY`: empty), the key
    /// read from `stacks`, at most 3/4 full; 4 bytes a slot where a map took 9. For the merged
    /// thread, which holds most stacks of the table, indexed by the stack itself instead (`dense`):
    /// 4 bytes a stack, one read where a probe read a slot and then the entry's stack.
    slots: Vec<u32>,
    dense: bool,
}

impl FoldedThread {
    fn slot(&self, stack: StackId) -> usize {
        let bits = self.slots.len().trailing_zeros();
        ((stack.0 as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
    }

    /// The entry of `stack`, made if needed.
    fn entry(&mut self, stack: StackId) -> u32 {
        if self.dense {
            let i = stack.0 as usize;
            if i >= self.slots.len() {
                let len = (i + 1).max(self.slots.len() * 2).max(1024);
                self.slots.resize(len, NO_ENTRY);
            }
            if self.slots[i] == NO_ENTRY {
                self.slots[i] = self.new_entry(stack);
            }
            return self.slots[i];
        }
        if (self.stacks.len() + 1) * 4 > self.slots.len() * 3 {
            self.slots = vec![NO_ENTRY; (self.slots.len() * 2).max(64)];
            for e in 0..self.stacks.len() {
                let i = self.free_slot(self.stacks[e]);
                self.slots[i] = e as u32;
            }
        }
        let mask = self.slots.len() - 1;
        let mut i = self.slot(stack);
        loop {
            let e = self.slots[i];
            if e == NO_ENTRY {
                self.slots[i] = self.new_entry(stack);
                return self.slots[i];
            }
            if self.stacks[e as usize] == stack {
                return e;
            }
            i = (i + 1) & mask;
        }
    }

    /// A new entry for `stack`, its sums zero (not indexed yet).
    fn new_entry(&mut self, stack: StackId) -> u32 {
        crate::grow::push(&mut self.stacks, stack);
        crate::grow::push(&mut self.sums, [0; 4]);
        (self.stacks.len() - 1) as u32
    }

    fn free_slot(&self, stack: StackId) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.slot(stack);
        while self.slots[i] != NO_ENTRY {
            i = (i + 1) & mask;
        }
        i
    }
}

impl Folded {
    /// The thread's costs as the cost tree holds them: sorted by stack, in columns.
    fn thread_costs(t: FoldedThread) -> ThreadCosts {
        let FoldedThread { os_tid, stacks, sums, slots, .. } = t;
        drop(slots);
        let mut order: Vec<u32> = (0..stacks.len() as u32).collect();
        order.sort_unstable_by_key(|&e| stacks[e as usize]);
        let sorted_stacks = order.iter().map(|&e| stacks[e as usize]).collect();
        drop(stacks);
        let sorted_sums = order.iter().map(|&e| sums[e as usize]).collect();
        ThreadCosts { os_tid, costs: StackCosts::from_sorted(sorted_stacks, sorted_sums) }
    }
}

/// Adds one node's costs to its thread's sums (a folding reader), its entry made when a delta
/// first names it.
fn fold_node(map: &mut NodeMap, thread: &mut FoldedThread, node: usize, costs: [u64; 4]) {
    let raw = map.stacks[node].0;
    let e = if raw & ENTRY != 0 {
        raw & !ENTRY
    } else {
        let e = thread.entry(StackId(raw));
        map.stacks[node] = StackId(e | ENTRY);
        e
    };
    for (s, v) in thread.sums[e as usize].iter_mut().zip(costs) {
        *s = s.saturating_add(v);
    }
}

/// One tree's nodes: each node's stack, and its entry in the call-site table when any node of the
/// tree has one (4 bytes a node for trees without call sites, which a folding reader never keeps).
#[derive(Clone, Default)]
struct NodeMap {
    stacks: Vec<StackId>,
    /// Empty while every node is `NO_SITE`, else one per node.
    sites: Vec<u32>,
}

impl NodeMap {
    fn len(&self) -> usize {
        self.stacks.len()
    }

    fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    fn get(&self, node: usize) -> Option<(StackId, u32)> {
        let stack = *self.stacks.get(node)?;
        Some((stack, self.sites.get(node).copied().unwrap_or(NO_SITE)))
    }

    fn push(&mut self, stack: StackId, site: u32) {
        if site != NO_SITE && self.sites.is_empty() {
            self.sites = vec![NO_SITE; self.stacks.len()];
        }
        crate::grow::push(&mut self.stacks, stack);
        if !self.sites.is_empty() {
            crate::grow::push(&mut self.sites, site);
        }
    }
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

/// One delta record, its node costs at `packed[start..end]`.
#[derive(Clone, Copy, Debug)]
struct DeltaBatch {
    ts: u64,
    os_tid: u32,
    map: u32,
    count: u32,
    /// Node costs (`count` less the restart markers).
    real: u32,
    start: usize,
    end: usize,
}

impl CctIngest {
    /// Sums the deltas published inside `range` into `(thread, stack)` costs as they arrive
    /// (others are dropped), and keeps no call-site table: for a reader that asks for one profile,
    /// of that range and without call-site lines, once every record is in
    /// ([`add_to`](Self::add_to) then adds the sums whatever its range). A trace's deltas, one per
    /// changed node per thread per second, are then held as one cost per stack of each thread.
    /// Call before the first record.
    ///
    /// With `merge_threads`, every thread's sums go to one table, kept under the first thread that
    /// has call trees: for views that show threads merged (their figures are the same, the per-thread
    /// split is gone).
    pub fn fold_within(&mut self, range: TimeRange, merge_threads: bool) {
        self.fold = Some(Folded { range, merged: merge_threads, ..Default::default() });
    }

    pub fn nodes(&mut self, stacks: &mut StackTable, r: &CallTreeNodes) {
        let key = (r.os_tid, r.tree);
        let restart = r.tree == 0 && r.first == 0;
        let m = match self.current.get(&key) {
            Some(&m) if !restart || self.maps[m as usize].is_empty() => m as usize,
            _ => {
                self.maps.push(NodeMap::default());
                if let Some(f) = &mut self.fold {
                    let next = f.threads.len() as u32;
                    let t = if f.merged && next > 0 { 0 } else { *f.thread_of.entry(r.os_tid).or_insert(next) };
                    if t == next {
                        f.threads.push(FoldedThread { os_tid: r.os_tid, dense: f.merged, ..Default::default() });
                    }
                    f.trees.push(t);
                }
                self.current.insert(key, (self.maps.len() - 1) as u32);
                self.maps.len() - 1
            }
        };
        let map = &mut self.maps[m];
        if r.first as usize != map.len() {
            // A gap means records were lost (dropped by the agent); later nodes cannot be placed.
            self.problems += 1;
            return;
        }
        // Call sites only when every node has one (a damaged record keeps its nodes per function),
        // and not when folding (a profile without call-site lines).
        let sited = self.fold.is_none() && !r.sites.is_empty() && r.sites.len() == r.parents.len();
        // The stack after the last one found: see `intern_call_near`.
        let mut next = StackId(u32::MAX);
        for (k, (parent, func)) in r.parents.iter().zip(&r.functions).enumerate() {
            let (parent_stack, parent_site) = if *parent == u32::MAX {
                (None, NO_SITE)
            } else {
                match map.get(*parent as usize) {
                    Some((s, n)) => match &self.fold {
                        // A folding reader's node whose stack became its thread's entry.
                        Some(f) if s.0 & ENTRY != 0 => {
                            (Some(f.threads[f.trees[m] as usize].stacks[(s.0 & !ENTRY) as usize]), n)
                        }
                        _ => (Some(s), n),
                    },
                    None => {
                        self.problems += 1;
                        return;
                    }
                }
            };
            let frame = if *func == clrprof_trace::CALL_TREE_CAPPED {
                stacks.intern_frame(FrameKey::Label(CALL_TREE_CAPPED.into()))
            } else {
                stacks.intern_frame(FrameKey::Function(*func))
            };
            let site = if sited && (*parent == u32::MAX || parent_site != NO_SITE) {
                self.sites.push(SiteNode { parent: parent_site, function: *func, site: r.sites[k] });
                (self.sites.len() - 1) as u32
            } else {
                NO_SITE
            };
            let stack = stacks.intern_call_near(parent_stack, frame, next);
            next = StackId(stack.0.wrapping_add(1));
            if self.fold.is_some() && stack.0 & ENTRY != 0 {
                // Past 2^31 stacks a folding reader's node map cannot tell a stack from an entry.
                self.problems += 1;
                return;
            }
            map.push(stack, site);
        }
    }

    /// The call-site table: every node of trees recorded with call sites, parents first.
    pub fn sites(&self) -> &[SiteNode] {
        &self.sites
    }

    pub fn delta(&mut self, r: &CallTreeDelta) {
        let Some(&m) = self.current.get(&(r.os_tid, r.tree)) else {
            self.problems += 1;
            return;
        };
        let known = self.maps[m as usize].len();
        let n = r.nodes.len();
        if r.calls.len() != n || r.time_ns.len() != n || r.suspended_ns.len() != n || r.profiler_ns.len() != n {
            self.problems += 1;
            return;
        }
        if let Some(f) = &mut self.fold {
            let map = &mut self.maps[m as usize];
            let thread = &mut f.threads[f.trees[m as usize] as usize];
            let inside = f.range.contains(r.ts);
            for k in 0..n {
                let node = r.nodes[k] as usize;
                if node >= known {
                    self.problems += 1;
                } else if inside {
                    fold_node(map, thread, node, [r.calls[k], r.time_ns[k], r.suspended_ns[k], r.profiler_ns[k]]);
                }
            }
            return;
        }
        let start = self.packed.len();
        let (mut count, mut real) = (0u32, 0usize);
        // Nodes are stored as gaps from the previous one: an older agent's unordered delta is
        // stored in order of its nodes (costs of one record add up in any order).
        let mut order: Vec<usize> = (0..n).collect();
        if r.nodes.windows(2).any(|w| w[0] >= w[1]) {
            order.sort_by_key(|&k| r.nodes[k]);
        }
        let mut next = 0u64;
        for k in order {
            let node = r.nodes[k] as u64;
            if node as usize >= known {
                self.problems += 1;
                continue;
            }
            // Repeated nodes (never written by an agent) are added as their own entries: the gap
            // from the previous node is then negative, so it restarts from 0 with a marker.
            if node < next {
                put_varint(&mut self.packed, 0);
                put_varint(&mut self.packed, u64::MAX);
                next = 0;
                count += 1;
            }
            put_varint(&mut self.packed, node - next);
            next = node + 1;
            for v in [r.calls[k], r.time_ns[k], r.suspended_ns[k], r.profiler_ns[k]] {
                put_varint(&mut self.packed, v);
            }
            count += 1;
            real += 1;
        }
        if count > 0 {
            self.batches.push(DeltaBatch {
                ts: r.ts,
                os_tid: r.os_tid,
                map: m,
                count,
                real: real as u32,
                start,
                end: self.packed.len(),
            });
            self.entries += real;
        }
    }

    /// Whether deltas are summed as they arrive ([`fold_within`](Self::fold_within)).
    pub fn is_folding(&self) -> bool {
        self.fold.is_some()
    }

    /// [`delta`](Self::delta) of a packed delta, for a folding reader: summed as its packing is read,
    /// with no delta decoded in between. Costs above `max` are clamped to it; returns whether any
    /// was. A packing that does not hold its nodes adds nothing and counts as a problem.
    pub fn fold_packed(&mut self, c: &CallTreeCosts, max: u64) -> bool {
        let (Some(f), Some(&m)) = (&mut self.fold, self.current.get(&(c.os_tid, c.tree))) else {
            self.problems += 1;
            return false;
        };
        let map = &mut self.maps[m as usize];
        let known = map.len();
        let thread = &mut f.threads[f.trees[m as usize] as usize];
        let inside = f.range.contains(c.ts);
        let (mut problems, mut clamped) = (0, false);
        let read = c.each_staged(&mut self.stage, |node, costs| {
            let node = node as usize;
            clamped |= costs.iter().any(|&v| v > max);
            if node >= known {
                problems += 1;
            } else if inside {
                fold_node(map, thread, node, costs.map(|v| v.min(max)));
            }
        });
        self.problems += if read.is_err() { 1 } else { problems };
        clamped
    }

    /// Drops the deltas published before `ts` (the node maps stay: later deltas refer to them).
    pub fn forget_before(&mut self, ts: u64) {
        if !self.batches.iter().any(|b| b.ts < ts) {
            return;
        }
        let mut packed = Vec::new();
        let mut entries = 0;
        self.batches.retain_mut(|b| {
            if b.ts < ts {
                return false;
            }
            let start = packed.len();
            packed.extend_from_slice(&self.packed[b.start..b.end]);
            (b.start, b.end) = (start, packed.len());
            entries += b.real as usize;
            true
        });
        self.packed = packed;
        self.entries = entries;
    }

    /// Node costs kept.
    pub fn retained(&self) -> usize {
        self.entries
    }

    /// Bytes the deltas take (their packed costs and one header per record).
    pub fn retained_bytes(&self) -> usize {
        self.packed.capacity() + self.batches.capacity() * std::mem::size_of::<DeltaBatch>()
    }

    /// Adds the deltas published inside `range` to `tree`; `site_stacks` (per entry of the
    /// call-site table, [`crate::callsites`]) replaces the stacks of nodes recorded with call sites.
    pub fn add_to(&self, tree: &mut CostTree, range: TimeRange, site_stacks: Option<&[StackId]>) {
        if let Some(f) = &self.fold {
            for t in &f.threads {
                for (&stack, &[calls, time_ns, suspended_ns, profiler_ns]) in t.stacks.iter().zip(&t.sums) {
                    tree.add(
                        t.os_tid,
                        stack,
                        &Cost { calls, time_ns, suspended_ns, profiler_ns, ..Default::default() },
                    );
                }
            }
            return;
        }
        for b in self.batches.iter().filter(|b| range.contains(b.ts)) {
            let map = &self.maps[b.map as usize];
            let bytes = &self.packed[b.start..b.end];
            let mut at = 0;
            let mut next = 0u64;
            let get = |at: &mut usize| get_varint(bytes, at).unwrap_or(0);
            for _ in 0..b.count {
                let gap = get(&mut at);
                let calls = get(&mut at);
                if gap == 0 && calls == u64::MAX {
                    next = 0;
                    continue;
                }
                let node = next.wrapping_add(gap);
                next = node.wrapping_add(1);
                let c = Cost {
                    calls,
                    time_ns: get(&mut at),
                    suspended_ns: get(&mut at),
                    profiler_ns: get(&mut at),
                    ..Default::default()
                };
                if let Some((stack, site)) = map.get(node as usize) {
                    let stack = match site_stacks {
                        Some(s) if site != NO_SITE => s.get(site as usize).copied().unwrap_or(stack),
                        _ => stack,
                    };
                    tree.add(b.os_tid, stack, &c);
                }
            }
        }
    }
}

impl CctIngest {
    /// [`add_to`](Self::add_to) consuming the ingest: folded costs move into an empty `tree`
    /// rather than be copied.
    pub fn into_costs(mut self, tree: &mut CostTree, range: TimeRange, site_stacks: Option<&[StackId]>) {
        if tree.threads.is_empty() {
            if let Some(mut f) = self.fold.take() {
                // Node ids are no longer needed: the sums are per stack.
                (self.maps, f.trees, f.thread_of) = Default::default();
                f.threads.sort_by_key(|t| t.os_tid);
                let threads = std::mem::take(&mut f.threads);
                tree.threads = threads.into_iter().filter(|t| !t.stacks.is_empty()).map(Folded::thread_costs).collect();
                return;
            }
        }
        self.add_to(tree, range, site_stacks)
    }
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
            for (s, cost) in t.costs.iter() {
                let path = stacks
                    .frames_of(s)
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

    /// Thousands of nodes on two threads, several to a stack (the same function called from two
    /// sites): the folded sums, moved into the cost tree, are the kept deltas' sums.
    #[test]
    fn folded_sums_of_many_nodes_are_the_kept_deltas() {
        let mut kept = (StackTable::default(), CctIngest::default());
        let mut folded = (StackTable::default(), CctIngest::default());
        folded.1.fold_within(TimeRange::ALL, false);
        for (stacks, c) in [&mut kept, &mut folded] {
            for tid in [7, 8] {
                let parents: Vec<u32> = (0..3000u32)
                    .map(|i| if i == 0 { u32::MAX } else { (i.wrapping_mul(2_654_435_761) >> 7) % i })
                    .collect();
                let functions: Vec<u64> = (0..3000u64).map(|i| i % 13 + tid as u64).collect();
                c.nodes(stacks, &nodes(tid, 1, 0, &parents, &functions));
                for round in 0..3u32 {
                    let ids: Vec<u32> = (0..3000).filter(|i| (i + round) % 3 != 0).collect();
                    let calls: Vec<u64> = ids.iter().map(|&i| (i % 5 + round) as u64).collect();
                    c.delta(&delta(tid, 1, &ids, &calls));
                }
            }
            assert_eq!(c.problems, 0);
        }
        assert_eq!(calls_by_path(&kept.1, &kept.0), calls_by_path(&folded.1, &folded.0));
        let mut tree = CostTree { stacks: folded.0.clone(), threads: Vec::new() };
        folded.1.clone().into_costs(&mut tree, TimeRange::ALL, None);
        let mut moved = CostTree { stacks: folded.0.clone(), threads: Vec::new() };
        folded.1.add_to(&mut moved, TimeRange::ALL, None);
        let sorted = |t: &CostTree| -> Vec<(u32, Vec<(StackId, Cost)>)> {
            t.threads
                .iter()
                .map(|t| {
                    let mut v: Vec<_> = t.costs.iter().collect();
                    v.sort_by_key(|&(s, _)| s);
                    (t.os_tid, v)
                })
                .collect()
        };
        assert_eq!(sorted(&tree), sorted(&moved));
        assert!(tree.threads.iter().all(|t| t.costs.iter().map(|(s, _)| s).is_sorted()));
        let n = tree.threads[0].costs.len();
        assert!(n > 100 && n < 3000, "{n} entries");
    }

    /// Folded with threads merged (`report`'s views that show threads merged): one table, under the
    /// first thread, with each stack's sums over every thread, in one entry a stack.
    #[test]
    fn merged_folding_sums_every_thread_into_one_entry_a_stack() {
        let mut per_thread = (StackTable::default(), CctIngest::default());
        let mut merged = (StackTable::default(), CctIngest::default());
        per_thread.1.fold_within(TimeRange::ALL, false);
        merged.1.fold_within(TimeRange::ALL, true);
        for (stacks, c) in [&mut per_thread, &mut merged] {
            // Three threads with the same tree shapes (their stacks shared), one of them two
            // lifetimes of one tid; deltas interleaved between threads.
            for (tid, tree) in [(9, 1), (7, 1), (8, 1), (9, 2)] {
                let parents: Vec<u32> = (0..2000u32)
                    .map(|i| if i == 0 { u32::MAX } else { (i.wrapping_mul(2_654_435_761) >> 7) % i })
                    .collect();
                let functions: Vec<u64> = (0..2000u64).map(|i| i % 11).collect();
                c.nodes(stacks, &nodes(tid, tree, 0, &parents, &functions));
            }
            for round in 0..3u32 {
                for (tid, tree) in [(8, 1), (9, 2), (7, 1), (9, 1)] {
                    let ids: Vec<u32> = (0..2000).filter(|i| (i + round + tid) % 3 != 0).collect();
                    let calls: Vec<u64> = ids.iter().map(|&i| (i % 5 + round + tree) as u64).collect();
                    c.delta(&delta(tid, tree, &ids, &calls));
                }
            }
            assert_eq!(c.problems, 0);
        }
        let costs = |(stacks, c): &(StackTable, CctIngest)| {
            let mut tree = CostTree { stacks: stacks.clone(), threads: Vec::new() };
            c.clone().into_costs(&mut tree, TimeRange::ALL, None);
            tree
        };
        let (apart, one) = (costs(&per_thread), costs(&merged));
        assert_eq!(apart.threads.iter().map(|t| t.os_tid).collect::<Vec<_>>(), vec![7, 8, 9]);
        assert_eq!(one.threads.len(), 1);
        assert_eq!(one.threads[0].os_tid, 9, "kept under the first thread with call trees");
        assert_eq!(calls_by_path(&per_thread.1, &per_thread.0), calls_by_path(&merged.1, &merged.0));
        // Every stack once, with the sum of its threads' costs.
        let mut sums: std::collections::BTreeMap<StackId, Cost> = Default::default();
        for t in &apart.threads {
            for (s, c) in t.costs.iter() {
                sums.entry(s).or_default().add(&c);
            }
        }
        let one_costs: Vec<(StackId, Cost)> = one.threads[0].costs.iter().collect();
        assert_eq!(one_costs, sums.into_iter().collect::<Vec<_>>());
        let entries: usize = apart.threads.iter().map(|t| t.costs.len()).sum();
        assert!(one_costs.len() * 3 < entries * 2, "{} merged entries for {entries}", one_costs.len());
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

    /// A delta whose nodes are out of order or repeated (no agent writes one) adds every cost,
    /// and a node never published is a problem, not a cost; forgetting early deltas keeps later ones.
    #[test]
    fn unordered_and_repeated_nodes_add_every_cost() {
        let mut stacks = StackTable::default();
        let mut c = CctIngest::default();
        c.nodes(&mut stacks, &nodes(7, 1, 0, &[u32::MAX, 0, 1], &[10, 11, 12]));
        c.delta(&delta(7, 1, &[2, 0, 2, 1, 9], &[1, 2, 3, 4, 5]));
        assert_eq!(c.problems, 1);
        assert_eq!(c.retained(), 4);
        assert_eq!(calls_by_path(&c, &stacks), vec![(vec![10], 2), (vec![10, 11], 4), (vec![10, 11, 12], 4)]);
        let mut later = delta(7, 1, &[1], &[6]);
        later.ts = 2;
        c.delta(&later);
        c.forget_before(2);
        assert_eq!(c.retained(), 1);
        assert_eq!(calls_by_path(&c, &stacks), vec![(vec![10, 11], 6)]);
    }
}
