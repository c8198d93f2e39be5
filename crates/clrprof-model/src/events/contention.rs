//! Monitor lock contention, by waiting site.

use std::collections::HashMap;

use clrprof_trace::{ContentionCounts, ContentionEnded, ContentionStack, ContentionStarted};

use super::Interner;
use crate::stacks::{CostTree, FrameKey, StackId};
use crate::TimeRange;

/// Monitor lock contention at one waiting site (the innermost frame outside `System.Threading`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ContentionSite {
    pub site: String,
    pub count: u64,
    /// Total and longest wait (the runtime's duration when it gives one, else end minus start).
    pub wait_ns: u64,
    pub max_wait_ns: u64,
    /// Distinct waiting stacks with counts, most frequent first.
    pub stacks: Vec<(StackId, u64)>,
    /// The total wait of each of `stacks`, in the same order.
    pub stack_wait_ns: Vec<u64>,
}

/// One contention: when it started, on which thread, and its wait once it ended.
#[derive(Clone, Debug)]
struct Contention {
    ts: u64,
    os_tid: u32,
    /// The waiting thread's stack, innermost first (interned).
    stack: u32,
    /// `None` while open, or when the thread's next contention began before it ended.
    wait_ns: Option<u64>,
}

/// Contentions aggregated by the agent (`ContentionCounts`): one interval, one waiting stack.
#[derive(Clone, Debug)]
struct Aggregate {
    /// Start of the interval the contentions started in.
    ts: u64,
    /// The waiting stack (interned), `None` while its `ContentionStack` has not been read.
    stack: Option<u32>,
    /// The agent's stack id, to resolve `stack` later.
    agent_stack: u32,
    count: u64,
    wait_ns: u64,
    max_wait_ns: u64,
    unended: u64,
}

/// Contention facts as they arrive.
#[derive(Clone, Debug, Default)]
pub(super) struct ContentionFacts {
    stacks: Interner<Vec<u64>>,
    all: Vec<Contention>,
    /// The open contention of each thread (index in `all`).
    open: HashMap<u32, usize>,
    /// The agent's contention stack ids (`ContentionStack`), interned.
    agent_stacks: HashMap<u32, u32>,
    aggregates: Vec<Aggregate>,
}

/// Contentions of one stack: (count, total wait, longest wait).
type Waits = (u64, u64, u64);

/// What `ContentionFacts::finish` computes for a range.
pub(super) struct ContentionResult {
    pub sites: Vec<ContentionSite>,
    /// Ended contentions (start, os_tid, wait) by start.
    pub times: Vec<(u64, u32, u64)>,
    /// Starts of every contention (ended or not), for the counters: (time, how many).
    pub starts: Vec<(u64, u64)>,
}

impl ContentionFacts {
    pub fn started(&mut self, c: &ContentionStarted) {
        let stack = self.stacks.id(c.stack.as_slice());
        self.open.insert(c.os_tid, self.all.len());
        self.all.push(Contention { ts: c.ts, os_tid: c.os_tid, stack, wait_ns: None });
    }

    /// Drops the contentions and aggregates that started before `ts`. A contention is counted in
    /// the range of its start: one still open is forgotten too (its end then changes nothing).
    pub fn forget_before(&mut self, ts: u64) {
        let mut index = Vec::with_capacity(self.all.len());
        let mut kept = 0;
        for c in &self.all {
            index.push((c.ts >= ts).then_some(kept));
            kept += (c.ts >= ts) as usize;
        }
        self.all.retain(|c| c.ts >= ts);
        self.open = self.open.iter().filter_map(|(&t, &i)| index[i].map(|j| (t, j))).collect();
        self.aggregates.retain(|a| a.ts >= ts);
    }

    pub fn retained(&self) -> usize {
        self.all.len() + self.aggregates.len()
    }

    pub fn ended(&mut self, c: &ContentionEnded) {
        if let Some(i) = self.open.remove(&c.os_tid) {
            let x = &mut self.all[i];
            x.wait_ns = Some(if c.duration_ns > 0 { c.duration_ns } else { c.ts.saturating_sub(x.ts) });
        }
    }

    pub fn stack(&mut self, c: &ContentionStack) {
        let stack = self.stacks.id(c.stack.as_slice());
        // A later definition of the same id replaces the earlier one.
        self.agent_stacks.insert(c.id, stack);
    }

    pub fn counts(&mut self, c: &ContentionCounts) {
        for (i, &agent_stack) in c.stacks.iter().enumerate() {
            let at = |v: &Vec<u64>| v.get(i).copied().unwrap_or(0);
            self.aggregates.push(Aggregate {
                ts: c.ts,
                stack: self.agent_stacks.get(&agent_stack).copied(),
                agent_stack,
                count: at(&c.counts),
                wait_ns: at(&c.wait_ns),
                max_wait_ns: at(&c.max_wait_ns),
                unended: at(&c.unended),
            });
        }
    }

    /// Contention that started inside `range`, by waiting site. Aggregated contention counts at
    /// the start of its interval.
    pub fn finish(&self, costs: &mut CostTree, name: &dyn Fn(u64) -> String, range: TimeRange) -> ContentionResult {
        let mut starts = Vec::new();
        let mut times = Vec::new();
        let mut by_stack: HashMap<u32, Waits> = HashMap::new();
        // Counts of a stack never defined (a damaged trace) still count, with an empty stack.
        let mut unknown: Waits = (0, 0, 0);
        for a in self.aggregates.iter().filter(|a| range.contains(a.ts)) {
            starts.push((a.ts, a.count + a.unended));
            if a.count == 0 {
                continue;
            }
            let e = match a.stack.or_else(|| self.agent_stacks.get(&a.agent_stack).copied()) {
                Some(s) => by_stack.entry(s).or_default(),
                None => &mut unknown,
            };
            // Saturating: a damaged trace may carry any value.
            e.0 = e.0.saturating_add(a.count);
            e.1 = e.1.saturating_add(a.wait_ns);
            e.2 = e.2.max(a.max_wait_ns);
        }
        for c in self.all.iter().filter(|c| range.contains(c.ts)) {
            starts.push((c.ts, 1));
            let Some(wait) = c.wait_ns else { continue };
            times.push((c.ts, c.os_tid, wait));
            let e = by_stack.entry(c.stack).or_default();
            e.0 = e.0.saturating_add(1);
            e.1 = e.1.saturating_add(wait);
            e.2 = e.2.max(wait);
        }
        times.sort_unstable();
        starts.sort_unstable();
        let empty = Vec::new();
        let mut stacks: Vec<(&Vec<u64>, Waits)> = by_stack.into_iter().map(|(s, v)| (self.stacks.get(s), v)).collect();
        if unknown.0 > 0 {
            stacks.push((&empty, unknown));
        }
        stacks.sort();
        let mut by_site: HashMap<String, ContentionSite> = HashMap::new();
        for (stack, (n, wait, max)) in stacks {
            let site = stack
                .iter()
                .map(|&f| name(f))
                .find(|n| !n.starts_with("System.Threading."))
                .unwrap_or_else(|| stack.first().map(|&f| name(f)).unwrap_or_else(|| "[no managed frame]".into()));
            let e = by_site.entry(site.clone()).or_insert_with(|| ContentionSite { site, ..Default::default() });
            e.count = e.count.saturating_add(n);
            e.wait_ns = e.wait_ns.saturating_add(wait);
            e.max_wait_ns = e.max_wait_ns.max(max);
            let ids: Vec<_> = stack.iter().rev().map(|&f| costs.stacks.intern_frame(FrameKey::Function(f))).collect();
            if let Some(sid) = costs.stacks.intern_stack(&ids) {
                e.stacks.push((sid, n));
                e.stack_wait_ns.push(wait);
            }
        }
        let mut sites: Vec<ContentionSite> = by_site.into_values().collect();
        for s in &mut sites {
            let mut both: Vec<((StackId, u64), u64)> = s.stacks.drain(..).zip(s.stack_wait_ns.drain(..)).collect();
            both.sort_by(|(a, _), (b, _)| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            (s.stacks, s.stack_wait_ns) = both.into_iter().unzip();
        }
        sites.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.site.cmp(&b.site)));
        ContentionResult { sites, times, starts }
    }
}
