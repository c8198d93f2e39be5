//! Allocations: exact counts per type (`--alloc exact`) or estimates from sampled allocations, by
//! type and by allocating site; sampled costs go into the profile's cost tree.

use std::collections::HashMap;

use clrprof_trace::{AllocationCounts, AllocationSample};

use super::Interner;
use crate::stacks::{Cost, CostTree, FrameKey};
use crate::TimeRange;

/// Mean bytes between two samples of .NET 10's randomized allocation sampling (`AllocationSampled`).
pub const ALLOCATION_SAMPLING_MEAN_BYTES: f64 = 102_400.0;

/// Allocations of one type.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct AllocType {
    pub type_name: String,
    /// Exact count, or an estimate when `exact` is false.
    pub count: u64,
    pub bytes: u64,
    pub exact: bool,
    /// Samples behind an estimate (0 when exact).
    pub samples: u64,
}

/// Sampled allocations of one type made by one function (the innermost managed frame).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct AllocSite {
    pub type_name: String,
    pub function: String,
    pub count: u64,
    pub bytes: u64,
    pub samples: u64,
}

/// Upscaled (count, bytes) of one `AllocationSampled` sample of `size` bytes: each object is
/// sampled with probability 1 - exp(-size / mean) (RandomizedAllocationSampling.md).
pub fn upscale(size: u64) -> (f64, f64) {
    let s = size.max(1) as f64;
    let p = 1.0 - (-s / ALLOCATION_SAMPLING_MEAN_BYTES).exp();
    if p <= 0.0 {
        return (1.0, s);
    }
    (1.0 / p, s / p)
}

/// An `AllocationCounts` record: exact counts of one type since the type's previous record.
#[derive(Clone, Debug)]
struct Counted {
    ts: u64,
    type_name: u32,
    count: u64,
    bytes: u64,
}

/// One allocation sample with what it stands for.
#[derive(Clone, Debug)]
struct Sampled {
    ts: u64,
    os_tid: u32,
    type_name: u32,
    /// Innermost first (interned; empty when not walked).
    stack: u32,
    count: f64,
    bytes: f64,
}

/// Allocation facts as they arrive.
#[derive(Clone, Debug, Default)]
pub(super) struct AllocFacts {
    types: Interner<String>,
    stacks: Interner<Vec<u64>>,
    /// Type names of allocation samples by class id (written with a class's first sample).
    names: HashMap<u64, u32>,
    counted: Vec<Counted>,
    sampled: Vec<Sampled>,
}

/// What `AllocFacts::finish` computes for a range.
pub(super) struct AllocResult {
    pub allocations: Vec<AllocType>,
    pub sites: Vec<AllocSite>,
    pub exact: bool,
    pub samples: u64,
    /// (ts, os_tid (0 for exact counts), bytes) by time.
    pub times: Vec<(u64, u32, u64)>,
}

impl AllocFacts {
    pub fn counts(&mut self, a: &AllocationCounts) {
        let type_name = self.types.id(a.type_name.as_str());
        self.counted.push(Counted { ts: a.ts, type_name, count: a.count, bytes: a.bytes });
    }

    /// Drops the counts and samples before `ts` (type names and stacks stay interned).
    pub fn forget_before(&mut self, ts: u64) {
        self.counted.retain(|c| c.ts >= ts);
        self.sampled.retain(|s| s.ts >= ts);
    }

    pub fn retained(&self) -> usize {
        self.counted.len() + self.sampled.len()
    }

    /// Keeps a sample; returns its type name (for the log).
    pub fn sample(&mut self, a: &AllocationSample) -> &str {
        // The agent writes a type's name with its first sample only (again after the class
        // unloads): later samples of the class carry an empty name.
        let type_name = if a.type_name.is_empty() {
            match self.names.get(&a.class) {
                Some(&t) => t,
                None => self.types.id(format!("<class 0x{:x}>", a.class).as_str()),
            }
        } else {
            let t = self.types.id(a.type_name.as_str());
            self.names.insert(a.class, t);
            t
        };
        let (count, bytes) = match a.source {
            0 => upscale(a.size),
            _ => {
                let c = if a.size > 0 { a.amount as f64 / a.size as f64 } else { 0.0 };
                (c, a.amount as f64)
            }
        };
        let stack = self.stacks.id(a.stack.as_slice());
        self.sampled.push(Sampled { ts: a.ts, os_tid: a.os_tid, type_name, stack, count, bytes });
        self.types.get(type_name)
    }

    /// The tables for the allocations inside `range`; the sampled costs (scaled to each type's
    /// estimate) are added to `costs`, whose allocation costs this replaces.
    pub fn finish(&self, costs: &mut CostTree, name: &dyn Fn(u64) -> String, range: TimeRange) -> AllocResult {
        // Exact counts when recorded, estimates from samples otherwise.
        let mut exact: HashMap<u32, (u64, u64)> = HashMap::new();
        let mut times: Vec<(u64, u32, u64)> = Vec::new();
        for c in self.counted.iter().filter(|c| range.contains(c.ts)) {
            let e = exact.entry(c.type_name).or_default();
            e.0 = e.0.saturating_add(c.count);
            e.1 = e.1.saturating_add(c.bytes);
            times.push((c.ts, 0, c.bytes));
        }
        // Per type and per (type, thread, stack): (count estimate, bytes estimate, samples).
        let mut per_type: HashMap<u32, (f64, f64, u64)> = HashMap::new();
        let mut per_stack: HashMap<(u32, u32, u32), (f64, f64, u64)> = HashMap::new();
        for s in self.sampled.iter().filter(|s| range.contains(s.ts)) {
            let e = per_type.entry(s.type_name).or_default();
            e.0 += s.count;
            e.1 += s.bytes;
            e.2 += 1;
            let e = per_stack.entry((s.type_name, s.os_tid, s.stack)).or_default();
            e.0 += s.count;
            e.1 += s.bytes;
            e.2 += 1;
            times.push((s.ts, s.os_tid, s.bytes as u64));
        }
        times.sort_unstable();

        let mut allocs: Vec<AllocType> = Vec::new();
        for (&t, &(n, b)) in &exact {
            let type_name = self.types.get(t).clone();
            allocs.push(AllocType { type_name, count: n, bytes: b, exact: true, samples: 0 });
        }
        let mut samples = 0;
        for (&t, &(n, b, s)) in &per_type {
            samples += s;
            if exact.contains_key(&t) {
                continue;
            }
            allocs.push(AllocType {
                type_name: self.types.get(t).clone(),
                count: n.round() as u64,
                bytes: b.round() as u64,
                exact: false,
                samples: s,
            });
        }
        allocs.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.type_name.cmp(&b.type_name)));

        // Stacks are walked for part of the samples: scale each type's sites to its total.
        let mut keys: Vec<(u32, u32, u32)> =
            per_stack.keys().filter(|k| !self.stacks.get(k.2).is_empty()).copied().collect();
        keys.sort_by(|a, b| {
            let (ta, tb) = (self.types.get(a.0), self.types.get(b.0));
            ta.cmp(tb).then(a.1.cmp(&b.1)).then_with(|| self.stacks.get(a.2).cmp(self.stacks.get(b.2)))
        });
        let mut walked: HashMap<u32, (f64, f64)> = HashMap::new();
        for k in &keys {
            let (c, b, _) = per_stack[k];
            let w = walked.entry(k.0).or_default();
            w.0 += c;
            w.1 += b;
        }
        clear_alloc_costs(costs);
        let mut sites: HashMap<(String, String), (f64, f64, u64)> = HashMap::new();
        for key in keys {
            let (mut count, mut bytes, samples) = per_stack[&key];
            if let (Some(w), Some(total)) = (walked.get(&key.0), per_type.get(&key.0)) {
                if w.0 > 0.0 && w.1 > 0.0 {
                    count *= total.0 / w.0;
                    bytes *= total.1 / w.1;
                }
            }
            let (type_name, os_tid, stack) = (self.types.get(key.0), key.1, self.stacks.get(key.2));
            let mut frames: Vec<_> =
                stack.iter().rev().map(|&f| costs.stacks.intern_frame(FrameKey::Function(f))).collect();
            frames.push(costs.stacks.intern_frame(FrameKey::Label(format!("new {type_name}"))));
            if let Some(s) = costs.stacks.intern_stack(&frames) {
                let cost =
                    Cost { alloc_count: count.round() as u64, alloc_bytes: bytes.round() as u64, ..Default::default() };
                costs.add(os_tid, s, &cost);
            }
            let site = stack.first().map(|&f| name(f)).unwrap_or_else(|| "[no managed frame]".into());
            let e = sites.entry((type_name.clone(), site)).or_default();
            e.0 += count;
            e.1 += bytes;
            e.2 += samples;
        }
        let mut sites: Vec<AllocSite> = sites
            .into_iter()
            .map(|((type_name, function), (c, b, s))| AllocSite {
                type_name,
                function,
                count: c.round() as u64,
                bytes: b.round() as u64,
                samples: s,
            })
            .collect();
        sites.sort_by(|a, b| {
            b.bytes.cmp(&a.bytes).then(a.type_name.cmp(&b.type_name)).then(a.function.cmp(&b.function))
        });
        AllocResult { allocations: allocs, sites, exact: !self.counted.is_empty(), samples, times }
    }
}

/// Removes the allocation costs `finish` added before (nothing else adds them), so that finishing
/// the same profile again replaces them instead of adding them twice.
fn clear_alloc_costs(costs: &mut CostTree) {
    costs.threads.retain_mut(|t| {
        let before = t.costs.len();
        t.costs.retain(|_, c| {
            let had = c.alloc_count != 0 || c.alloc_bytes != 0;
            c.alloc_count = 0;
            c.alloc_bytes = 0;
            !(had && c.is_zero())
        });
        before == 0 || !t.costs.is_empty()
    });
}
