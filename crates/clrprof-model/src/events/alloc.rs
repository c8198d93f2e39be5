//! Allocations: exact counts per type (`--alloc exact`) or estimates from sampled allocations, by
//! type and by allocating site; sampled costs go into the profile's cost tree.

use std::collections::HashMap;

use clrprof_trace::{AllocationCounts, AllocationSample};

use super::Interner;
use crate::stacks::{Cost, CostTree, FrameKey};
use crate::TimeRange;

/// Mean bytes between two samples of .NET 10's randomized allocation sampling (`AllocationSampled`).
pub const ALLOCATION_SAMPLING_MEAN_BYTES: f64 = 102_400.0;

/// Bytes between two `AllocationTick` events of one heap and kind (the GC's `etw_allocation_tick`).
pub const ALLOCATION_TICK_BYTES: u64 = 102_400;

/// How the allocation figures of a profile were obtained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllocEstimator {
    /// No allocations recorded.
    #[default]
    None,
    /// Every object counted (`ObjectAllocated`); sites from the agent's sampled stacks.
    Exact,
    /// .NET 10's `AllocationSampled`: each sample weighted by the inverse of its probability.
    AllocationSampled,
    /// `GCAllocationTick` (before .NET 10): each tick stands for the bytes since the previous
    /// tick of its heap and kind, an object of at least a tick's bytes for itself alone.
    AllocationTick,
}

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

/// Frames kept of a site's heaviest stack (the allocation's context; the cost tree keeps whole
/// stacks).
const SITE_STACK_FRAMES: usize = 64;

/// Allocations of one type made at one site: the first frame of the user's code on the
/// allocating stack (not `System.*`, `Microsoft.*`), through the library frame it called.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct AllocSite {
    pub type_name: String,
    /// The first frame of the user's code (the innermost frame when every frame is a library's).
    pub function: String,
    /// The library function `function` called to allocate (empty when `function` allocated
    /// itself).
    pub via: String,
    pub count: u64,
    pub bytes: u64,
    /// Walked samples behind the site.
    pub samples: u64,
    /// The site's heaviest allocating stack, innermost first (its first 64 frames).
    pub stack: Vec<String>,
}

impl AllocSite {
    /// "function (via library function)", or the function alone.
    pub fn display(&self) -> String {
        if self.via.is_empty() {
            self.function.clone()
        } else {
            format!("{} (via {})", self.function, self.via)
        }
    }
}

/// True for functions of the .NET libraries (`System.*`, `Microsoft.*` and the runtime's own
/// `Internal.*` and `Interop.*`), which are not where a user looks for an allocation's cause.
pub fn is_library_function(name: &str) -> bool {
    ["System.", "Microsoft.", "Internal.", "Interop."].iter().any(|p| name.starts_with(p))
}

/// Upscaled (count, bytes) of one `AllocationSampled` sample of `size` bytes.
pub fn upscale(size: u64) -> (f64, f64) {
    upscale_with_mean(size, ALLOCATION_SAMPLING_MEAN_BYTES)
}

/// Upscaled (count, bytes) of an object of `size` bytes sampled by a Bernoulli trial per byte of
/// probability 1/`mean` (stopping at the object's first success): it was sampled with probability
/// 1 - (1 - 1/mean)^size, and stands for the inverse of that (RandomizedAllocationSampling.md,
/// "weighted samples", unbiased).
pub fn upscale_with_mean(size: u64, mean: f64) -> (f64, f64) {
    let s = size.max(1) as f64;
    let p = -(s * (-1.0 / mean.max(1.0)).ln_1p()).exp_m1();
    if p <= 0.0 || !p.is_finite() {
        return (1.0, s);
    }
    (1.0 / p, s / p)
}

/// (count, bytes) one `AllocationTick` of an object of `size` bytes stands for, `amount` bytes
/// allocated on its heap and kind since the previous tick. The tick falls on the allocation that
/// crossed the threshold, so an object's chance to carry it grows with its size (about size /
/// threshold): weighted by `amount`, each type gets its share of the bytes. An object of at least
/// the threshold carries a tick whatever came before: it stands for itself alone, never for the
/// bytes of the objects before it.
pub fn tick_estimate(size: u64, amount: u64) -> (f64, f64) {
    if size >= ALLOCATION_TICK_BYTES {
        return (1.0, size as f64);
    }
    let bytes = amount.max(size) as f64;
    let count = if size > 0 { bytes / size as f64 } else { 0.0 };
    (count, bytes)
}

/// An `AllocationCounts` record: exact counts of one type since the type's previous record.
#[derive(Clone, Debug)]
struct Counted {
    ts: u64,
    type_name: u32,
    count: u64,
    bytes: u64,
}

/// A sample's type name still to resolve by its class (`Sampled::class`) when the tables are made.
const UNNAMED: u32 = u32::MAX;

/// One allocation sample with what it stands for.
#[derive(Clone, Debug)]
struct Sampled {
    ts: u64,
    os_tid: u32,
    class: u64,
    type_name: u32,
    /// Innermost first (interned; empty when not walked).
    stack: u32,
    count: f64,
    bytes: f64,
    walk_weight: u32,
    source: u8,
}

/// Sums of (count, bytes) estimates.
#[derive(Clone, Copy, Debug, Default)]
struct Est {
    count: f64,
    bytes: f64,
}

impl Est {
    fn add(&mut self, count: f64, bytes: f64) {
        self.count += count;
        self.bytes += bytes;
    }
}

/// Walked estimates of one type (or of one stack of it), by how their stacks were chosen.
#[derive(Clone, Copy, Debug, Default)]
struct Walked {
    /// Walked with certainty (`walk_weight` 1).
    certain: Est,
    /// Walked one in N, each weighted by N.
    strided: Est,
    /// Walked by an agent that did not say how (`walk_weight` 0).
    legacy: Est,
    samples: u64,
}

impl Walked {
    fn add(&mut self, s: &Sampled) {
        match s.walk_weight {
            0 => self.legacy.add(s.count, s.bytes),
            1 => self.certain.add(s.count, s.bytes),
            w => self.strided.add(s.count * w as f64, s.bytes * w as f64),
        }
        self.samples += 1;
    }
}

/// Scale factors of one type's walked estimates, per part (count, bytes).
#[derive(Clone, Copy, Debug)]
struct Factors {
    certain: (f64, f64),
    strided: (f64, f64),
    legacy: (f64, f64),
}

fn ratio(target: f64, walked: f64) -> f64 {
    if walked > 0.0 {
        (target / walked).max(0.0)
    } else {
        0.0
    }
}

impl Factors {
    /// Exact counts of the type known: the walked stacks give the sites their shares of them.
    fn exact(w: &Walked, count: u64, bytes: u64) -> Factors {
        let c = w.certain.count + w.strided.count + w.legacy.count;
        let b = w.certain.bytes + w.strided.bytes + w.legacy.bytes;
        let f = (ratio(count as f64, c), ratio(bytes as f64, b));
        Factors { certain: f, strided: f, legacy: f }
    }

    /// Estimates of the type from all its samples (`all`): the stacks walked with certainty stand
    /// for themselves, the strided ones (already weighted) for the rest; an older agent's walked
    /// stacks are scaled to the whole.
    fn sampled(w: &Walked, all: &Est) -> Factors {
        let rest = Est { count: all.count - w.certain.count, bytes: all.bytes - w.certain.bytes };
        Factors {
            certain: (1.0, 1.0),
            strided: (ratio(rest.count, w.strided.count), ratio(rest.bytes, w.strided.bytes)),
            legacy: (ratio(all.count, w.legacy.count), ratio(all.bytes, w.legacy.bytes)),
        }
    }

    fn apply(&self, w: &Walked) -> Est {
        Est {
            count: w.certain.count * self.certain.0 + w.strided.count * self.strided.0 + w.legacy.count * self.legacy.0,
            bytes: w.certain.bytes * self.certain.1 + w.strided.bytes * self.strided.1 + w.legacy.bytes * self.legacy.1,
        }
    }
}

/// One allocation site being summed up: its estimate, walked samples, and its heaviest stack.
#[derive(Default)]
struct SiteAcc {
    est: Est,
    samples: u64,
    heaviest_bytes: f64,
    heaviest: Option<u32>,
}

/// Allocation facts as they arrive.
#[derive(Clone, Debug, Default)]
pub(super) struct AllocFacts {
    types: Interner<String>,
    stacks: Interner<Vec<u64>>,
    /// Type names by class id (written with a class's first sample, and with exact counts).
    names: HashMap<u64, u32>,
    counted: Vec<Counted>,
    sampled: Vec<Sampled>,
    /// (ts, samples) the agent's writer dropped before the record at ts (`AllocationSamples::thinned`).
    thinned: Vec<(u64, u64)>,
}

/// What `AllocFacts::finish` computes for a range.
pub(super) struct AllocResult {
    pub allocations: Vec<AllocType>,
    pub sites: Vec<AllocSite>,
    pub exact: bool,
    pub estimator: AllocEstimator,
    /// Samples the estimates come from (exact counts: the sampled stacks behind the sites).
    pub samples: u64,
    /// Walked samples without a walk weight (an older agent): their sites are scaled to their
    /// type's total.
    pub unweighted_walks: bool,
    /// Samples the agent's writer dropped in the range (the kept ones weigh for them).
    pub thinned: u64,
    /// (ts, os_tid (0 for exact counts), bytes) by time.
    pub times: Vec<(u64, u32, u64)>,
}

impl AllocFacts {
    pub fn counts(&mut self, a: &AllocationCounts) {
        let type_name = self.types.id(a.type_name.as_str());
        if a.class != 0 {
            self.names.insert(a.class, type_name);
        }
        self.counted.push(Counted { ts: a.ts, type_name, count: a.count, bytes: a.bytes });
    }

    /// Notes `n` samples the agent's writer dropped before its record at `ts`.
    pub fn thinned(&mut self, ts: u64, n: u64) {
        if n > 0 {
            self.thinned.push((ts, n));
        }
    }

    /// Drops the counts and samples before `ts` (type names and stacks stay interned).
    pub fn forget_before(&mut self, ts: u64) {
        self.counted.retain(|c| c.ts >= ts);
        self.sampled.retain(|s| s.ts >= ts);
        self.thinned.retain(|t| t.0 >= ts);
    }

    pub fn retained(&self) -> usize {
        self.counted.len() + self.sampled.len()
    }

    /// Keeps a sample; returns its type name (for the log).
    pub fn sample(&mut self, a: &AllocationSample) -> &str {
        // The agent writes a type's name with its first sample only (again after the class
        // unloads): later samples of the class carry an empty name. The samples of `--alloc
        // exact` carry none: their class is named by its exact counts, which may come later.
        let type_name = if a.type_name.is_empty() {
            self.names.get(&a.class).copied().unwrap_or(UNNAMED)
        } else {
            let t = self.types.id(a.type_name.as_str());
            self.names.insert(a.class, t);
            t
        };
        let (count, bytes) = match a.source {
            0 => upscale(a.size),
            2 => upscale_with_mean(a.size, a.amount as f64),
            _ => tick_estimate(a.size, a.amount),
        };
        // A sample kept one in N by the agent's thinning stands for N (weight 0: an older agent).
        let weight = a.weight.max(1) as f64;
        let (count, bytes) = (count * weight, bytes * weight);
        let stack = self.stacks.id(a.stack.as_slice());
        let walk_weight = if a.stack.is_empty() { 0 } else { a.walk_weight };
        self.sampled.push(Sampled {
            ts: a.ts,
            os_tid: a.os_tid,
            class: a.class,
            type_name,
            stack,
            count,
            bytes,
            walk_weight,
            source: a.source,
        });
        if type_name == UNNAMED {
            "<unnamed class>"
        } else {
            self.types.get(type_name)
        }
    }

    /// The type name id of a sample, naming classes seen since (`counts`) if needed; classes never
    /// named get ids past the interned names, their names in `unnamed`.
    fn type_of(&self, s: &Sampled, unnamed: &mut Vec<u64>) -> u32 {
        if s.type_name != UNNAMED {
            return s.type_name;
        }
        if let Some(&t) = self.names.get(&s.class) {
            return t;
        }
        let i = unnamed.iter().position(|&c| c == s.class).unwrap_or_else(|| {
            unnamed.push(s.class);
            unnamed.len() - 1
        });
        (self.types.items.len() + i) as u32
    }

    fn type_name(&self, t: u32, unnamed: &[u64]) -> String {
        match (t as usize).checked_sub(self.types.items.len()) {
            Some(i) => format!("<class 0x{:x}>", unnamed.get(i).copied().unwrap_or(0)),
            None => self.types.get(t).clone(),
        }
    }

    /// The tables for the allocations inside `range`; the sampled costs (each type's sites scaled
    /// to its total) are added to `costs`, whose allocation costs this replaces.
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
        // Per type: every sample's estimate (with the number of samples) and the walked ones;
        // per (type, thread, stack): the walked ones.
        let mut per_type: HashMap<u32, (Est, u64)> = HashMap::new();
        let mut walked_type: HashMap<u32, Walked> = HashMap::new();
        let mut per_stack: HashMap<(u32, u32, u32), Walked> = HashMap::new();
        let (mut sources, mut samples) = ([false; 3], 0u64);
        let mut unnamed: Vec<u64> = Vec::new();
        for s in self.sampled.iter().filter(|s| range.contains(s.ts)) {
            let t = self.type_of(s, &mut unnamed);
            samples += 1;
            sources[(s.source as usize).min(2)] = true;
            if s.source != 2 {
                // The samples of `--alloc exact` only place the exact counts.
                let e = per_type.entry(t).or_default();
                e.0.add(s.count, s.bytes);
                e.1 += 1;
                times.push((s.ts, s.os_tid, s.bytes as u64));
            }
            if !self.stacks.get(s.stack).is_empty() {
                walked_type.entry(t).or_default().add(s);
                per_stack.entry((t, s.os_tid, s.stack)).or_default().add(s);
            }
        }
        times.sort_unstable();

        let mut allocs: Vec<AllocType> = Vec::new();
        for (&t, &(n, b)) in &exact {
            let type_name = self.type_name(t, &unnamed);
            allocs.push(AllocType { type_name, count: n, bytes: b, exact: true, samples: 0 });
        }
        for (&t, &(e, s)) in &per_type {
            if exact.contains_key(&t) {
                continue;
            }
            allocs.push(AllocType {
                type_name: self.type_name(t, &unnamed),
                count: e.count.round() as u64,
                bytes: e.bytes.round() as u64,
                exact: false,
                samples: s,
            });
        }
        allocs.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.type_name.cmp(&b.type_name)));

        let factors: HashMap<u32, Factors> = walked_type
            .iter()
            .map(|(t, w)| {
                let f = match exact.get(t) {
                    Some(&(n, b)) => Factors::exact(w, n, b),
                    None => Factors::sampled(w, &per_type.get(t).map(|e| e.0).unwrap_or_default()),
                };
                (*t, f)
            })
            .collect();
        let mut keys: Vec<(u32, u32, u32)> = per_stack.keys().copied().collect();
        keys.sort_by(|a, b| {
            let (ta, tb) = (self.type_name(a.0, &unnamed), self.type_name(b.0, &unnamed));
            ta.cmp(&tb).then(a.1.cmp(&b.1)).then_with(|| self.stacks.get(a.2).cmp(self.stacks.get(b.2)))
        });
        clear_alloc_costs(costs);
        let mut sites: HashMap<(u32, String, String), SiteAcc> = HashMap::new();
        for key in keys {
            let w = &per_stack[&key];
            let est = factors.get(&key.0).map(|f| f.apply(w)).unwrap_or_default();
            let (type_name, os_tid, stack) = (self.type_name(key.0, &unnamed), key.1, self.stacks.get(key.2));
            let mut frames: Vec<_> =
                stack.iter().rev().map(|&f| costs.stacks.intern_frame(FrameKey::Function(f))).collect();
            frames.push(costs.stacks.intern_frame(FrameKey::Label(format!("new {type_name}"))));
            if let Some(s) = costs.stacks.intern_stack(&frames) {
                let cost = Cost {
                    alloc_count: est.count.round() as u64,
                    alloc_bytes: est.bytes.round() as u64,
                    ..Default::default()
                };
                costs.add(os_tid, s, &cost);
            }
            let names: Vec<String> = stack.iter().map(|&f| name(f)).collect();
            let (function, via) = match names.iter().position(|n| !is_library_function(n)) {
                Some(0) => (names[0].clone(), String::new()),
                Some(i) => (names[i].clone(), names[i - 1].clone()),
                None => (names[0].clone(), String::new()),
            };
            let e = sites.entry((key.0, function, via)).or_default();
            e.est.add(est.count, est.bytes);
            e.samples += w.samples;
            if e.heaviest.is_none() || est.bytes > e.heaviest_bytes {
                e.heaviest_bytes = est.bytes;
                e.heaviest = Some(key.2);
            }
        }
        let mut sites: Vec<AllocSite> = sites
            .into_iter()
            .map(|((t, function, via), a)| AllocSite {
                type_name: self.type_name(t, &unnamed),
                function,
                via,
                count: a.est.count.round() as u64,
                bytes: a.est.bytes.round() as u64,
                samples: a.samples,
                stack: a
                    .heaviest
                    .map(|s| self.stacks.get(s).iter().take(SITE_STACK_FRAMES).map(|&f| name(f)).collect())
                    .unwrap_or_default(),
            })
            .collect();
        sites.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(a.type_name.cmp(&b.type_name))
                .then(a.function.cmp(&b.function))
                .then(a.via.cmp(&b.via))
        });
        let estimator = if !self.counted.is_empty() {
            AllocEstimator::Exact
        } else if sources[0] {
            AllocEstimator::AllocationSampled
        } else if sources[1] {
            AllocEstimator::AllocationTick
        } else {
            AllocEstimator::None
        };
        let unweighted_walks = walked_type.values().any(|w| w.legacy.count > 0.0 || w.legacy.bytes > 0.0);
        AllocResult {
            allocations: allocs,
            sites,
            exact: !self.counted.is_empty(),
            estimator,
            samples,
            unweighted_walks,
            thinned: self.thinned.iter().filter(|t| range.contains(t.0)).map(|t| t.1).sum(),
            times,
        }
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
