//! Monitor lock contention, by waiting site.

use std::collections::HashMap;

use clrprof_trace::{ContentionEnded, ContentionStarted};

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

/// Contention facts as they arrive.
#[derive(Clone, Debug, Default)]
pub(super) struct ContentionFacts {
    stacks: Interner<Vec<u64>>,
    all: Vec<Contention>,
    /// The open contention of each thread (index in `all`).
    open: HashMap<u32, usize>,
}

/// Contentions of one stack: (count, total wait, longest wait).
type Waits = (u64, u64, u64);

/// What `ContentionFacts::finish` computes for a range.
pub(super) struct ContentionResult {
    pub sites: Vec<ContentionSite>,
    /// Ended contentions (start, os_tid, wait) by start.
    pub times: Vec<(u64, u32, u64)>,
    /// Starts of every contention (ended or not), for the counters.
    pub starts: Vec<u64>,
}

impl ContentionFacts {
    pub fn started(&mut self, c: &ContentionStarted) {
        let stack = self.stacks.id(c.stack.as_slice());
        self.open.insert(c.os_tid, self.all.len());
        self.all.push(Contention { ts: c.ts, os_tid: c.os_tid, stack, wait_ns: None });
    }

    pub fn ended(&mut self, c: &ContentionEnded) {
        if let Some(i) = self.open.remove(&c.os_tid) {
            let x = &mut self.all[i];
            x.wait_ns = Some(if c.duration_ns > 0 { c.duration_ns } else { c.ts.saturating_sub(x.ts) });
        }
    }

    /// Contention that started inside `range`, by waiting site.
    pub fn finish(&self, costs: &mut CostTree, name: &dyn Fn(u64) -> String, range: TimeRange) -> ContentionResult {
        let mut starts = Vec::new();
        let mut times = Vec::new();
        let mut by_stack: HashMap<u32, Waits> = HashMap::new();
        for c in self.all.iter().filter(|c| range.contains(c.ts)) {
            starts.push(c.ts);
            let Some(wait) = c.wait_ns else { continue };
            times.push((c.ts, c.os_tid, wait));
            let e = by_stack.entry(c.stack).or_default();
            e.0 += 1;
            e.1 += wait;
            e.2 = e.2.max(wait);
        }
        times.sort_unstable();
        let mut stacks: Vec<(&Vec<u64>, Waits)> = by_stack.into_iter().map(|(s, v)| (self.stacks.get(s), v)).collect();
        stacks.sort();
        let mut by_site: HashMap<String, ContentionSite> = HashMap::new();
        for (stack, (n, wait, max)) in stacks {
            let site = stack
                .iter()
                .map(|&f| name(f))
                .find(|n| !n.starts_with("System.Threading."))
                .unwrap_or_else(|| stack.first().map(|&f| name(f)).unwrap_or_else(|| "[no managed frame]".into()));
            let e = by_site.entry(site.clone()).or_insert_with(|| ContentionSite { site, ..Default::default() });
            e.count += n;
            e.wait_ns += wait;
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
