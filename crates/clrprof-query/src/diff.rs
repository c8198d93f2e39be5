//! Differences between two profiles (a baseline and a new run) for one weight: a per-function
//! delta table sorted by |Δ| ([`diff`]) and a per-call-path differential tree for a differential
//! flame graph ([`diff_tree`]).
//!
//! Functions are matched across the two profiles by name, module and signature (a function's ids
//! differ between runs); frames of one profile with the same key (the same method in two
//! collectible contexts, say) are one function here. A function without a module (folded stacks
//! name none for managed frames) matches the one function of its name that has a module, if
//! there is exactly one. Each profile is taken as given: its time
//! window was chosen when it was built (`clrprof_load::Loader::profile`), and each side has its
//! own thread selection (thread ids differ between runs too).
//!
//! With `normalize`, the baseline's values are scaled so that its total equals the new total
//! (pprof's `-normalize`): a function whose share did not change gets Δ 0. Scaled values are
//! rounded to whole units. Call counts (instrumented traces) are never scaled.
//!
//! For the sampled weights (cpu, wall) every row and the sums carry their sample counts and
//! sampling noise ([`crate::noise`]): a change seen in a handful of samples is marked as such.

use std::collections::HashMap;

use clrprof_model::{FrameKind, Metric, Profile, StackId};
use serde::Serialize;

use crate::engine::{self, apply_transforms, push_stack, FuncTable, Paths, Transform, Weight};
use crate::noise::{noise, Noise, PerSample, MIN_SAMPLES};
use crate::select::{self, Threads};

/// Which of the two profiles compared something is in, or is about: the baseline or the new one
/// (the viewer's trace, beside its `--baseline`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Base,
    New,
}

/// What a diff is asked.
#[derive(Clone, Debug, Default)]
pub struct DiffQuery {
    /// `None`: the new profile's natural weight ([`select::metric`]), or the baseline's when the
    /// new profile has no data.
    pub metric: Option<Metric>,
    /// Threads of the baseline and of the new profile (resolve each with [`Threads::resolve`]).
    pub base_threads: Threads,
    pub new_threads: Threads,
    /// Scale the baseline to the new total.
    pub normalize: bool,
    /// At most this many function rows ([`DiffView::count`] keeps the number before the cut).
    pub top: Option<usize>,
    /// Applied to the stacks of both profiles alike before comparing (as in the viewer's views).
    pub transforms: Vec<Transform>,
    /// Rows of a sampled weight with fewer samples on both sides are marked and never
    /// significant (`None`: [`MIN_SAMPLES`]).
    pub min_samples: Option<u64>,
}

/// Call counts of a function on both sides, when both profiles are instrumented (exact).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CallsDelta {
    pub base: u64,
    pub new: u64,
    pub delta: i64,
}

/// One function in both profiles. `base`/`new` are self values in the weight's unit, `*_total`
/// inclusive (recursion counted once); a function missing on one side has 0 there.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffRow {
    /// Display name (managed overloads get their parameter list when one profile has several).
    pub name: String,
    /// Module file name, empty when unknown.
    pub module: String,
    pub kind: FrameKind,
    pub base: i64,
    pub new: i64,
    pub delta: i64,
    pub base_total: i64,
    pub new_total: i64,
    pub delta_total: i64,
    /// Set when the function has a cost in only one profile.
    pub only_in: Option<Side>,
    /// Entered calls on both sides, when both profiles are instrumented.
    pub calls: Option<CallsDelta>,
    /// Sampled weights: the samples and sampling noise of the self change and of the inclusive one.
    pub noise: Option<Noise>,
    pub noise_total: Option<Noise>,
}

/// The delta table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffView {
    pub metric: Metric,
    /// `ns`, `calls`, `bytes` or `objects`.
    pub unit: &'static str,
    pub normalized: bool,
    /// Factor applied to the baseline's values (1 unless normalized).
    pub scale: f64,
    /// Sum of the weight over the selection of each profile (self values), the baseline's as
    /// scaled.
    pub base_sum: i64,
    pub new_sum: i64,
    /// The baseline's sum before scaling.
    pub base_sum_raw: u64,
    /// True when both profiles are instrumented: rows carry [`DiffRow::calls`].
    pub calls: bool,
    /// Rows before `top` cut them.
    pub count: usize,
    /// Part of either side's values are estimates (the exceptions weight after an exception
    /// storm or with throw stacks walked in part, see [`select::EventWeight`]).
    pub estimated: bool,
    /// Sampled weights: the samples and sampling noise of the sums' change.
    pub sum_noise: Option<Noise>,
    /// The minimum of samples a row needs (sampled weights).
    pub min_samples: u64,
    /// Sorted by |delta| (self), then |delta_total|, then name and module.
    pub functions: Vec<DiffRow>,
}

/// Unit of a metric's values in diffs.
pub fn unit(m: Metric) -> &'static str {
    m.diff_unit()
}

/// The identity of a function across profiles.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Key {
    name: String,
    module: String,
    signature: String,
}

/// A function's key, display name and kind, indexed by key id.
#[derive(Default)]
struct Keys {
    ids: HashMap<Key, u32>,
    display: Vec<String>,
    module: Vec<String>,
    kind: Vec<FrameKind>,
    /// Keys by display name (the transforms name functions by it).
    by_display: HashMap<String, Vec<u32>>,
}

impl Keys {
    /// Key id of every frame of `p` (new keys added).
    fn frames_of(&mut self, p: &Profile) -> Vec<u32> {
        let names = select::display_names(p);
        p.costs
            .stacks
            .frames
            .iter()
            .zip(names)
            .map(|(f, display)| {
                let k = Key { name: f.name.clone(), module: f.module.clone(), signature: f.signature.clone() };
                match self.ids.get(&k) {
                    Some(&id) => id,
                    None => self.push(k, display, f.kind),
                }
            })
            .collect()
    }

    fn push(&mut self, k: Key, display: String, kind: FrameKind) -> u32 {
        let id = self.display.len() as u32;
        self.module.push(k.module.clone());
        self.kind.push(kind);
        self.by_display.entry(display.clone()).or_default().push(id);
        self.display.push(display);
        self.ids.insert(k, id);
        id
    }
}

impl FuncTable for Keys {
    fn named(&self, name: &str) -> &[u32] {
        self.by_display.get(name).map(Vec::as_slice).unwrap_or(&[])
    }
    fn name(&self, f: u32) -> &str {
        &self.display[f as usize]
    }
    fn module(&self, f: u32) -> &str {
        &self.module[f as usize]
    }
    fn kind(&self, f: u32) -> FrameKind {
        self.kind[f as usize]
    }
    fn synthetic(&mut self, name: &str, module: &str) -> u32 {
        if let Some(&id) = self.by_display.get(name).and_then(|v| v.first()) {
            return id;
        }
        let k = Key { name: name.to_string(), module: module.to_string(), signature: String::new() };
        self.push(k, name.to_string(), FrameKind::Synthetic)
    }
}

impl Keys {
    /// The key of a frame named `name` that no stack holds (an event weight's leaf, see
    /// [`select::EventStack`]): the function of that display name when there is one, else a new
    /// key without a module.
    fn leaf(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.by_display.get(name).and_then(|v| v.first()) {
            return id;
        }
        let k = Key { name: name.to_string(), module: String::new(), signature: String::new() };
        self.push(k, name.to_string(), FrameKind::Synthetic)
    }

    /// Key ids of both profiles' frames. A function without a module (folded stacks name no
    /// module for managed frames, nor signatures) is the function of the same name (and
    /// signature, when it has one) that has a module, when exactly one exists, so a trace and
    /// its folded export match.
    fn both(base: &Profile, new: &Profile) -> (Keys, Vec<u32>, Vec<u32>) {
        let mut keys = Keys::default();
        let mut bk = keys.frames_of(base);
        let mut nk = keys.frames_of(new);
        let mut with_module: HashMap<&str, Vec<(u32, &str)>> = HashMap::new();
        for (k, &id) in &keys.ids {
            if !k.module.is_empty() {
                with_module.entry(k.name.as_str()).or_default().push((id, k.signature.as_str()));
            }
        }
        let mut alias: Vec<u32> = (0..keys.display.len() as u32).collect();
        for (k, &id) in &keys.ids {
            if !k.module.is_empty() {
                continue;
            }
            // Folded stacks carry no signature either: any signature matches an empty one.
            let same: Vec<u32> = with_module
                .get(k.name.as_str())
                .map(|v| {
                    v.iter().filter(|(_, sig)| k.signature.is_empty() || *sig == k.signature).map(|&(i, _)| i).collect()
                })
                .unwrap_or_default();
            if let [one] = same[..] {
                alias[id as usize] = one;
            }
        }
        for k in bk.iter_mut().chain(nk.iter_mut()) {
            *k = alias[*k as usize];
        }
        (keys, bk, nk)
    }
}

/// One side's figures for the weight, per stack of its profile (merged over the selected
/// threads): the weight's value, the calls (instrumented), whether the stack has any cost at all;
/// and the values of stacks the runtime gave none (event weights), by leaf name.
struct SideCosts {
    value: Vec<u64>,
    calls: Vec<u64>,
    /// Samples behind the value (sampled weights; 0 otherwise).
    samples: Vec<u64>,
    any: Vec<bool>,
    leaves: Vec<(String, u64)>,
}

impl SideCosts {
    fn of(p: &Profile, threads: &Threads, m: Metric) -> SideCosts {
        let n = p.costs.stacks.nodes.len();
        if let Some(w) = select::event_stacks(p, m) {
            // Exceptions and contentions are not recorded per thread: the selection does not apply.
            let mut s = SideCosts {
                value: vec![0; n],
                calls: vec![0; n],
                samples: vec![0; n],
                any: vec![false; n],
                leaves: Vec::new(),
            };
            for e in w.stacks {
                match e.stack {
                    Some(sid) if (sid.0 as usize) < n => {
                        let i = sid.0 as usize;
                        s.value[i] = s.value[i].saturating_add(e.value);
                        s.any[i] |= e.value > 0 || e.count > 0;
                    }
                    _ if e.leaf.is_empty() => s.leaves.push(("[no stack]".to_string(), e.value)),
                    _ => s.leaves.push((e.leaf, e.value)),
                }
            }
            return s;
        }
        let merged = threads.with_filter(|f| p.costs.merged(f));
        SideCosts {
            value: merged.iter().map(|c| m.of(c)).collect(),
            calls: merged.iter().map(|c| c.calls).collect(),
            samples: merged.iter().map(|c| samples_of(m, c)).collect(),
            any: merged.iter().map(|c| !c.is_zero()).collect(),
            leaves: Vec::new(),
        }
    }
}

/// The samples behind a cost's value of a sampled weight (0 for the others).
fn samples_of(m: Metric, c: &clrprof_model::Cost) -> u64 {
    match m {
        Metric::Cpu => c.cpu_samples,
        Metric::Wall => c.wall_samples,
        _ => 0,
    }
}

/// True for the weights whose values come from the sampler (and so carry sample counts).
pub fn is_sampled(m: Metric) -> bool {
    matches!(m, Metric::Cpu | Metric::Wall)
}

/// What a call path of one side weighs: the weight's value, the calls (instrumented), and that it
/// is there at all (a path the weight rounds to 0 still makes its functions present on that side).
#[derive(Clone, Copy, Debug, Default)]
struct Agg {
    value: u64,
    calls: u64,
    samples: u64,
    any: bool,
}

impl Weight for Agg {
    fn add(&mut self, o: &Self) {
        self.value = self.value.saturating_add(o.value);
        self.calls = self.calls.saturating_add(o.calls);
        self.samples = self.samples.saturating_add(o.samples);
        self.any |= o.any;
    }
    fn is_zero(&self) -> bool {
        !self.any && self.value == 0 && self.calls == 0 && self.samples == 0
    }
}

/// The paths of one side: every stack with a cost as its keys, transformed, same paths merged
/// (in stack order, so the result is deterministic).
fn side_paths(p: &Profile, sc: &SideCosts, key_of: &[u32], keys: &mut Keys, ts: &[Transform]) -> Paths<Agg> {
    let mut out: Paths<Agg> = Paths::merging();
    let mut buf: Vec<u32> = Vec::new();
    let mut add = |buf: &mut Vec<u32>, value: u64, calls: u64, samples: u64, keys: &mut Keys| {
        if apply_transforms(keys, ts, buf, 0) {
            out.add(buf, &Agg { value, calls, samples, any: true });
        }
    };
    for i in 0..sc.value.len() {
        if !sc.any[i] {
            continue;
        }
        buf.clear();
        push_stack(&p.costs.stacks, StackId(i as u32), |f| key_of[f.0 as usize], &mut buf);
        add(&mut buf, sc.value[i], sc.calls[i], sc.samples[i], keys);
    }
    for (name, v) in &sc.leaves {
        buf.clear();
        buf.push(keys.leaf(name));
        add(&mut buf, *v, 0, 0, keys);
    }
    out
}

/// Per key, self and inclusive figures of one side (recursion counted once), by key id.
fn per_key(paths: &Paths<Agg>, nkeys: usize) -> (Vec<Agg>, Vec<Agg>) {
    let mut selfc = vec![Agg::default(); nkeys];
    let mut inc = vec![Agg::default(); nkeys];
    for t in engine::function_totals(paths) {
        selfc[t.func as usize] = t.self_w;
        inc[t.func as usize] = t.total;
    }
    (selfc, inc)
}

/// Both sides' paths and the keys they refer to.
fn sides(base: &Profile, new: &Profile, q: &DiffQuery, m: Metric) -> (Keys, Paths<Agg>, Paths<Agg>) {
    let (mut keys, bk, nk) = Keys::both(base, new);
    let b = SideCosts::of(base, &q.base_threads, m);
    let n = SideCosts::of(new, &q.new_threads, m);
    let bp = side_paths(base, &b, &bk, &mut keys, &q.transforms);
    let np = side_paths(new, &n, &nk, &mut keys, &q.transforms);
    (keys, bp, np)
}

fn both_instrumented(base: &Profile, new: &Profile) -> bool {
    let calls = |p: &Profile| p.instrumentation.is_some() || select::totals(p).calls > 0;
    calls(base) && calls(new)
}

/// The metric a diff compares.
pub fn diff_metric(base: &Profile, new: &Profile, asked: Option<Metric>) -> Metric {
    match asked {
        Some(m) => m,
        None if select::totals(new).is_zero() => select::metric(base, None),
        None => select::metric(new, None),
    }
}

/// Sums (after the transforms) and the baseline's scale factor.
fn sums(base: &Paths<Agg>, new: &Paths<Agg>, q: &DiffQuery) -> (u64, u64, f64) {
    let (b, n) = (base.total().value, new.total().value);
    let scale = if q.normalize && b > 0 { n as f64 / b as f64 } else { 1.0 };
    (b, n, scale)
}

fn scaled(v: u64, scale: f64) -> i64 {
    if scale == 1.0 {
        v.min(i64::MAX as u64) as i64
    } else {
        (v as f64 * scale).round().min(i64::MAX as f64) as i64
    }
}

fn clamp(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

/// The delta table of `new` against `base`.
pub fn diff(base: &Profile, new: &Profile, q: &DiffQuery) -> DiffView {
    let m = diff_metric(base, new, q.metric);
    let (keys, bp, np) = sides(base, new, q, m);
    let nkeys = keys.display.len();
    let (bs, bi) = per_key(&bp, nkeys);
    let (ns, ni) = per_key(&np, nkeys);
    let (base_raw, new_sum, scale) = sums(&bp, &np, q);
    let with_calls = both_instrumented(base, new);
    let min_samples = q.min_samples.unwrap_or(MIN_SAMPLES);
    let (bsum, nsum) = (bp.total(), np.total());
    let per_sample = if is_sampled(m) {
        PerSample::of(base_raw as f64 * scale, bsum.samples, new_sum as f64, nsum.samples)
    } else {
        None
    };
    let noise_of = |b: &Agg, n: &Agg| {
        per_sample.map(|r| {
            let r = r.for_row(b.value as f64 * scale, b.samples, n.value as f64, n.samples);
            noise(b.samples, n.samples, r, min_samples)
        })
    };
    let mut rows: Vec<DiffRow> = (0..nkeys)
        .filter_map(|k| {
            let (b, n) = (scaled(bs[k].value, scale), clamp(ns[k].value));
            let (bt, nt) = (scaled(bi[k].value, scale), clamp(ni[k].value));
            if b == 0 && n == 0 && bt == 0 && nt == 0 {
                return None;
            }
            // "Only in" goes by any cost at all, so a function the weight rounds to 0 on one side
            // is not called missing.
            let in_base = bi[k].any;
            let in_new = ni[k].any;
            let only_in = match (in_base, in_new) {
                (true, false) => Some(Side::Base),
                (false, true) => Some(Side::New),
                _ => None,
            };
            let calls = with_calls.then(|| CallsDelta {
                base: bs[k].calls,
                new: ns[k].calls,
                delta: clamp(ns[k].calls) - clamp(bs[k].calls),
            });
            Some(DiffRow {
                name: keys.display[k].clone(),
                module: keys.module[k].clone(),
                kind: keys.kind[k],
                base: b,
                new: n,
                delta: n.saturating_sub(b),
                base_total: bt,
                new_total: nt,
                delta_total: nt.saturating_sub(bt),
                only_in,
                calls,
                noise: noise_of(&bs[k], &ns[k]),
                noise_total: noise_of(&bi[k], &ni[k]),
            })
        })
        .collect();
    rows.sort_by(|a, b| {
        b.delta
            .unsigned_abs()
            .cmp(&a.delta.unsigned_abs())
            .then(b.delta_total.unsigned_abs().cmp(&a.delta_total.unsigned_abs()))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.module.cmp(&b.module))
    });
    let count = rows.len();
    rows.truncate(q.top.unwrap_or(count));
    DiffView {
        metric: m,
        unit: unit(m),
        normalized: q.normalize,
        scale,
        base_sum: scaled(base_raw, scale),
        new_sum: clamp(new_sum),
        base_sum_raw: base_raw,
        calls: with_calls,
        count,
        estimated: [base, new].iter().any(|p| select::event_stacks(p, m).is_some_and(|w| w.estimated)),
        sum_noise: noise_of(&bsum, &nsum),
        min_samples,
        functions: rows,
    }
}

/// One call path of the differential tree: the path of its parent plus one function.
/// Values as in [`DiffRow`]: `*_self` spent with this exact path on top, `*_total` in the subtree.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffNode {
    /// Index in [`DiffTree::nodes`]; `None` for a root.
    pub parent: Option<u32>,
    /// Index in [`DiffTree::functions`].
    pub function: u32,
    pub depth: u32,
    pub base_self: i64,
    pub new_self: i64,
    pub base_total: i64,
    pub new_total: i64,
    /// Set when the path has a cost in only one profile.
    pub only_in: Option<Side>,
    /// Children by the larger of `base_total` and `new_total`, most first, then by name.
    pub children: Vec<u32>,
}

/// A function of the differential tree.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffFunction {
    pub name: String,
    pub module: String,
    pub kind: FrameKind,
}

/// The per-call-path differential of two profiles (the selected threads merged), for a
/// differential flame graph. Nodes come parents before children; `roots` and every node's
/// `children` are sorted for display. Only paths with a cost on either side are present.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffTree {
    pub metric: Metric,
    pub unit: &'static str,
    pub normalized: bool,
    pub scale: f64,
    pub base_sum: i64,
    pub new_sum: i64,
    pub functions: Vec<DiffFunction>,
    pub nodes: Vec<DiffNode>,
    pub roots: Vec<u32>,
}

impl DiffTree {
    /// The functions of a node's path, root first.
    pub fn path(&self, node: u32) -> Vec<u32> {
        let mut v = Vec::new();
        let mut cur = Some(node);
        while let Some(n) = cur {
            let d = &self.nodes[n as usize];
            v.push(d.function);
            cur = d.parent;
        }
        v.reverse();
        v
    }
}

/// What a call path weighs in the differential tree: each side's value, and whether it is on
/// that side at all.
#[derive(Clone, Copy, Debug, Default)]
struct Sides {
    raw: [u64; 2],
    any: [bool; 2],
}

impl Weight for Sides {
    fn add(&mut self, o: &Self) {
        for k in 0..2 {
            self.raw[k] = self.raw[k].saturating_add(o.raw[k]);
            self.any[k] |= o.any[k];
        }
    }
    fn is_zero(&self) -> bool {
        self.raw == [0, 0] && self.any == [false, false]
    }
}

/// The differential tree of `new` against `base` (`q.top` is not used).
pub fn diff_tree(base: &Profile, new: &Profile, q: &DiffQuery) -> DiffTree {
    let m = diff_metric(base, new, q.metric);
    let (keys, bp, np) = sides(base, new, q, m);
    let (base_raw, new_sum, scale) = sums(&bp, &np, q);
    // Both sides' paths in one set (a path of both sides is one path with both values), and
    // their prefix tree.
    let mut both: Paths<Sides> = Paths::merging();
    for (side, paths) in [(0, &bp), (1, &np)] {
        for (path, w) in paths.iter() {
            let mut s = Sides::default();
            (s.raw[side], s.any[side]) = (w.value, true);
            both.add(path, &s);
        }
    }
    let tree = engine::prefix_tree(&both, false);
    // Nodes numbered in order of first appearance (the baseline's paths, then the new ones', each
    // root first): by the first path through each node, then depth.
    let mut first = vec![u32::MAX; tree.nodes.len()];
    for (i, &leaf) in tree.ends.iter().enumerate() {
        first[leaf as usize] = first[leaf as usize].min(i as u32);
    }
    for id in (1..tree.nodes.len()).rev() {
        let parent = tree.nodes[id].parent as usize;
        first[parent] = first[parent].min(first[id]);
    }
    let mut order: Vec<u32> = (1..tree.nodes.len() as u32).collect();
    order.sort_by_key(|&id| (first[id as usize], tree.nodes[id as usize].depth));
    let mut id_of = vec![0u32; tree.nodes.len()];
    for (k, &id) in order.iter().enumerate() {
        id_of[id as usize] = k as u32;
    }
    let mut nodes: Vec<DiffNode> = order
        .iter()
        .map(|&id| {
            let n = &tree.nodes[id as usize];
            DiffNode {
                parent: (n.parent != 0).then(|| id_of[n.parent as usize]),
                function: n.func,
                depth: n.depth - 1,
                base_self: scaled(n.self_w.raw[0], scale),
                new_self: clamp(n.self_w.raw[1]),
                base_total: scaled(n.total.raw[0], scale),
                new_total: clamp(n.total.raw[1]),
                only_in: match n.total.any {
                    [true, false] => Some(Side::Base),
                    [false, true] => Some(Side::New),
                    _ => None,
                },
                children: Vec::new(),
            }
        })
        .collect();
    let mut roots = Vec::new();
    for i in 0..nodes.len() {
        match nodes[i].parent {
            Some(p) => nodes[p as usize].children.push(i as u32),
            None => roots.push(i as u32),
        }
    }
    let order = |nodes: &[DiffNode], v: &mut Vec<u32>| {
        v.sort_by(|&a, &b| {
            let (x, y) = (&nodes[a as usize], &nodes[b as usize]);
            y.base_total
                .max(y.new_total)
                .cmp(&x.base_total.max(x.new_total))
                .then_with(|| keys.display[x.function as usize].cmp(&keys.display[y.function as usize]))
                .then(a.cmp(&b))
        })
    };
    order(&nodes, &mut roots);
    for i in 0..nodes.len() {
        let mut kids = std::mem::take(&mut nodes[i].children);
        order(&nodes, &mut kids);
        nodes[i].children = kids;
    }
    let functions = (0..keys.display.len())
        .map(|k| DiffFunction { name: keys.display[k].clone(), module: keys.module[k].clone(), kind: keys.kind[k] })
        .collect();
    DiffTree {
        metric: m,
        unit: unit(m),
        normalized: q.normalize,
        scale,
        base_sum: scaled(base_raw, scale),
        new_sum: clamp(new_sum),
        functions,
        nodes,
        roots,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_model::{Cost, FrameKey};

    /// A profile of CPU samples: each entry is a stack (root first, `name@module` frames), a
    /// thread and its CPU ns. Function ids start at `first_id` so they differ between profiles.
    fn profile(first_id: u64, stacks: &[(&[&str], u32, u64)]) -> Profile {
        let mut p = Profile::default();
        let mut ids: HashMap<String, u64> = HashMap::new();
        for (frames, tid, ns) in stacks {
            let mut path = Vec::new();
            for f in *frames {
                let next = first_id + ids.len() as u64;
                let id = *ids.entry(f.to_string()).or_insert(next);
                let fr = p.costs.stacks.intern_frame(FrameKey::Function(id));
                let (name, module) = f.split_once('@').unwrap();
                let frame = &mut p.costs.stacks.frames[fr.0 as usize];
                frame.name = name.into();
                frame.module = module.into();
                path.push(fr);
            }
            let s = p.costs.stacks.intern_stack(&path).unwrap();
            p.costs.add(*tid, s, &Cost { cpu_samples: ns / 10, cpu_ns: *ns, ..Default::default() });
        }
        p
    }

    fn row<'a>(v: &'a DiffView, name: &str) -> &'a DiffRow {
        v.functions.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("no row {name}: {v:?}"))
    }

    fn base() -> Profile {
        profile(
            1,
            &[
                (&["Main@a.dll", "Work@a.dll"], 1, 100),
                (&["Main@a.dll", "Work@a.dll", "Hash@b.dll"], 1, 50),
                (&["Main@a.dll", "Same@a.dll"], 2, 30),
                (&["Main@a.dll", "Gone@a.dll"], 2, 20),
            ],
        )
    }

    fn new() -> Profile {
        profile(
            100,
            &[
                (&["Main@a.dll", "Same@a.dll"], 7, 30),
                (&["Main@a.dll", "Work@a.dll"], 7, 200),
                (&["Main@a.dll", "Work@a.dll", "Hash@b.dll"], 8, 50),
                (&["Main@a.dll", "Fresh@a.dll"], 8, 5),
                // The same name in another module is another function.
                (&["Main@a.dll", "Work@c.dll"], 8, 1),
            ],
        )
    }

    #[test]
    fn functions_match_by_name_and_module_and_sort_by_absolute_delta() {
        let v = diff(&base(), &new(), &DiffQuery::default());
        assert_eq!(v.metric, Metric::Cpu);
        assert_eq!((v.unit, v.normalized, v.scale), ("ns", false, 1.0));
        assert_eq!((v.base_sum, v.new_sum, v.base_sum_raw), (200, 286, 200));
        assert!(!v.calls);
        let names: Vec<(&str, &str)> = v.functions.iter().map(|r| (r.name.as_str(), r.module.as_str())).collect();
        assert_eq!(
            names,
            [
                ("Work", "a.dll"),
                ("Gone", "a.dll"),
                ("Fresh", "a.dll"),
                ("Work", "c.dll"),
                ("Main", "a.dll"),
                ("Hash", "b.dll"),
                ("Same", "a.dll"),
            ]
        );
        let w = &v.functions[0];
        assert_eq!((w.base, w.new, w.delta), (100, 200, 100));
        assert_eq!((w.base_total, w.new_total, w.delta_total), (150, 250, 100));
        assert_eq!(w.only_in, None);
        let g = row(&v, "Gone");
        assert_eq!(
            (g.base, g.new, g.delta, g.base_total, g.new_total, g.only_in),
            (20, 0, -20, 20, 0, Some(Side::Base))
        );
        let f = row(&v, "Fresh");
        assert_eq!((f.base, f.new, f.delta, f.delta_total, f.only_in), (0, 5, 5, 5, Some(Side::New)));
        let m = row(&v, "Main");
        assert_eq!((m.base, m.new, m.base_total, m.new_total, m.delta_total), (0, 0, 200, 286, 86));
        let s = row(&v, "Same");
        assert_eq!((s.delta, s.delta_total), (0, 0));
        assert_eq!(v.count, 7);
        let top = diff(&base(), &new(), &DiffQuery { top: Some(2), ..Default::default() });
        assert_eq!((top.count, top.functions.len()), (7, 2));
    }

    #[test]
    fn sampled_rows_carry_their_samples_and_noise() {
        // The helper gives one sample per 10 ns: Work 10 → 20 samples self, 15 → 25 inclusive.
        let v = diff(&base(), &new(), &DiffQuery::default());
        let w = row(&v, "Work");
        let n = w.noise.unwrap();
        assert_eq!((n.base_samples, n.new_samples, n.few_samples), (10, 20, false));
        // Work's own value per sample: 100 ns / 10 and 200 ns / 20 samples.
        let r = PerSample { base: 10.0, new: 10.0 };
        assert_eq!(n, noise(10, 20, r, MIN_SAMPLES));
        assert!((n.z - 10.0 / 30f64.sqrt()).abs() < 1e-9 && !n.significant, "{n:?}");
        // A function without samples on one side takes that side's mean: Fresh is new, 5 ns in
        // 0 samples (the helper rounds down), against the baseline's 200 ns / 20.
        let f = row(&v, "Fresh").noise.unwrap();
        assert_eq!((f.base_samples, f.new_samples, f.z), (0, 0, 0.0));
        let t = w.noise_total.unwrap();
        assert_eq!((t.base_samples, t.new_samples), (15, 25));
        let s = v.sum_noise.unwrap();
        assert_eq!((s.base_samples, s.new_samples, v.min_samples), (20, 28, crate::noise::MIN_SAMPLES));
        // Rows with fewer samples than asked on both sides are marked.
        assert!(row(&v, "Fresh").noise.unwrap().few_samples);
        let v = diff(&base(), &new(), &DiffQuery { min_samples: Some(10), ..Default::default() });
        assert!(!row(&v, "Work").noise.unwrap().few_samples && v.min_samples == 10);
        // Exact weights have none.
        let c = diff(&base(), &new(), &DiffQuery { metric: Some(Metric::Calls), ..Default::default() });
        assert!(c.sum_noise.is_none() && c.functions.iter().all(|r| r.noise.is_none()));
    }

    #[test]
    fn a_function_without_a_module_matches_the_one_with_a_module() {
        let b = profile(1, &[(&["Main@a.dll", "A@a.dll"], 1, 30), (&["Main@a.dll", "B@a.dll"], 1, 10)]);
        // Folded stacks: no modules; B exists in two modules on the other side, so it stays apart.
        let n = profile(9, &[(&["Main@", "A@"], 1, 60), (&["Main@", "B@"], 1, 10), (&["Main@", "B@c.dll"], 1, 1)]);
        let v = diff(&b, &n, &DiffQuery::default());
        let a = row(&v, "A");
        assert_eq!((a.module.as_str(), a.base, a.new, a.only_in), ("a.dll", 30, 60, None));
        assert_eq!(row(&v, "Main").new_total, 71);
        let bs: Vec<(&str, i64, i64)> =
            v.functions.iter().filter(|r| r.name == "B").map(|r| (r.module.as_str(), r.base, r.new)).collect();
        assert_eq!(bs.len(), 3, "{bs:?}");
    }

    #[test]
    fn normalize_scales_the_baseline_to_the_new_total() {
        // Everything doubled: normalized, nothing changed.
        let b = profile(1, &[(&["Main@a.dll", "A@a.dll"], 1, 30), (&["Main@a.dll", "B@a.dll"], 1, 70)]);
        let n = profile(9, &[(&["Main@a.dll", "A@a.dll"], 2, 60), (&["Main@a.dll", "B@a.dll"], 2, 140)]);
        let v = diff(&b, &n, &DiffQuery { normalize: true, ..Default::default() });
        assert_eq!((v.scale, v.base_sum, v.new_sum, v.base_sum_raw), (2.0, 200, 200, 100));
        assert!(v.functions.iter().all(|r| r.delta == 0 && r.delta_total == 0), "{v:?}");
        assert_eq!(row(&v, "B").base, 140);
        let raw = diff(&b, &n, &DiffQuery::default());
        assert_eq!((row(&raw, "B").delta, row(&raw, "A").delta, row(&raw, "Main").delta_total), (70, 30, 100));
    }

    #[test]
    fn transforms_apply_to_both_sides_alike() {
        let merge = |f: &str| Transform::Merge { function: f.into() };
        // Merging Work: its self value (and Hash's, one level down, stays) goes to Main on both sides.
        let q = DiffQuery { transforms: vec![merge("Work")], ..Default::default() };
        let v = diff(&base(), &new(), &q);
        assert!(v.functions.iter().all(|r| r.name != "Work"), "{v:?}");
        let main = row(&v, "Main");
        assert_eq!((main.base, main.new), (100, 201));
        assert_eq!((v.base_sum, v.new_sum), (200, 286));
        // Dropping Hash removes its stacks on both sides; the tree has no Hash node either.
        let q = DiffQuery { transforms: vec![Transform::Drop { function: "Hash".into() }], ..Default::default() };
        let v = diff(&base(), &new(), &q);
        assert_eq!((v.base_sum, v.new_sum), (150, 236));
        let t = diff_tree(&base(), &new(), &q);
        assert!(t.nodes.iter().all(|n| t.functions[n.function as usize].name != "Hash"));
        let top: i64 = t.roots.iter().map(|&r| t.nodes[r as usize].new_total).sum();
        assert_eq!(top, 236);
        // Collapsing the module b.dll on both sides: one [b.dll] function.
        let q =
            DiffQuery { transforms: vec![Transform::CollapseModule { module: "b.dll".into() }], ..Default::default() };
        let v = diff(&base(), &new(), &q);
        let b = row(&v, "[b.dll]");
        assert_eq!((b.base, b.new, b.only_in), (50, 50, None));
    }

    #[test]
    fn threads_are_selected_per_side() {
        let q = DiffQuery { base_threads: Threads::one(2), new_threads: Threads::one(7), ..Default::default() };
        let v = diff(&base(), &new(), &q);
        assert_eq!((v.base_sum, v.new_sum), (50, 230));
        let w = row(&v, "Work");
        assert_eq!((w.base, w.new, w.only_in), (0, 200, Some(Side::New)));
        assert!(v.functions.iter().all(|r| r.name != "Hash"));
    }

    #[test]
    fn recursion_counts_once_in_totals() {
        let b = profile(1, &[(&["R@a.dll", "R@a.dll", "R@a.dll"], 1, 10)]);
        let n = profile(5, &[(&["R@a.dll", "R@a.dll"], 1, 10), (&["R@a.dll"], 1, 4)]);
        let v = diff(&b, &n, &DiffQuery::default());
        let r = row(&v, "R");
        assert_eq!((r.base, r.new, r.base_total, r.new_total), (10, 14, 10, 14));
    }

    #[test]
    fn call_counts_when_both_are_instrumented() {
        let mut b = profile(1, &[(&["Main@a.dll", "F@a.dll"], 1, 0)]);
        let mut n = profile(3, &[(&["Main@a.dll", "F@a.dll"], 1, 0), (&["Main@a.dll", "G@a.dll"], 1, 0)]);
        let add = |p: &mut Profile, path: &[u32], calls: u64, time_ns: u64| {
            let path: Vec<_> = path.iter().map(|&f| clrprof_model::FrameId(f)).collect();
            let s = p.costs.stacks.intern_stack(&path).unwrap();
            p.costs.add(1, s, &Cost { calls, time_ns, ..Default::default() });
        };
        add(&mut b, &[0], 1, 5);
        add(&mut b, &[0, 1], 10, 100);
        add(&mut n, &[0], 1, 5);
        add(&mut n, &[0, 1], 25, 250);
        add(&mut n, &[0, 2], 3, 9);
        let v = diff(&b, &n, &DiffQuery { metric: Some(Metric::Time), ..Default::default() });
        assert!(v.calls);
        assert_eq!(row(&v, "F").calls, Some(CallsDelta { base: 10, new: 25, delta: 15 }));
        assert_eq!(row(&v, "G").calls, Some(CallsDelta { base: 0, new: 3, delta: 3 }));
        assert_eq!(row(&v, "Main").calls, Some(CallsDelta { base: 1, new: 1, delta: 0 }));
        assert_eq!((row(&v, "F").delta, row(&v, "Main").delta_total), (150, 159));
        // Not when one side is sampled only.
        let s = profile(7, &[(&["Main@a.dll", "F@a.dll"], 1, 10)]);
        assert!(!diff(&s, &n, &DiffQuery { metric: Some(Metric::Time), ..Default::default() }).calls);
    }

    #[test]
    fn the_tree_pairs_call_paths() {
        let t = diff_tree(&base(), &new(), &DiffQuery::default());
        assert_eq!((t.base_sum, t.new_sum, t.unit), (200, 286, "ns"));
        let name = |n: u32| t.functions[t.nodes[n as usize].function as usize].name.as_str();
        assert_eq!(t.roots.len(), 1);
        let main = &t.nodes[t.roots[0] as usize];
        assert_eq!((name(t.roots[0]), main.base_total, main.new_total, main.depth), ("Main", 200, 286, 0));
        let kids: Vec<(&str, i64, i64, Option<Side>)> = main
            .children
            .iter()
            .map(|&c| {
                let n = &t.nodes[c as usize];
                (name(c), n.base_total, n.new_total, n.only_in)
            })
            .collect();
        assert_eq!(
            kids,
            [
                ("Work", 150, 250, None),
                ("Same", 30, 30, None),
                ("Gone", 20, 0, Some(Side::Base)),
                ("Fresh", 0, 5, Some(Side::New)),
                ("Work", 0, 1, Some(Side::New)),
            ]
        );
        let work = &t.nodes[main.children[0] as usize];
        assert_eq!((work.base_self, work.new_self), (100, 200));
        let hash = work.children[0];
        assert_eq!((t.nodes[hash as usize].base_self, t.nodes[hash as usize].new_total), (50, 50));
        let path: Vec<&str> = t.path(hash).iter().map(|&f| t.functions[f as usize].name.as_str()).collect();
        assert_eq!(path, ["Main", "Work", "Hash"]);
        assert_eq!(t.functions[t.nodes[main.children[4] as usize].function as usize].module, "c.dll");
        // Normalized: the baseline scaled by 286/200.
        let t = diff_tree(&base(), &new(), &DiffQuery { normalize: true, ..Default::default() });
        assert_eq!((t.base_sum, t.nodes[t.roots[0] as usize].base_total), (286, 286));
        assert_eq!(t.nodes[t.nodes[t.roots[0] as usize].children[0] as usize].base_self, 143);
    }

    #[test]
    fn tree_nodes_are_numbered_in_order_of_first_appearance() {
        // The viewer's diff flame graph names cells by node id: the baseline's paths, then the
        // new ones', each root first, number the nodes as they first appear.
        let q = DiffQuery::default();
        let t = diff_tree(&base(), &new(), &q);
        let (_, bp, np) = sides(&base(), &new(), &q, Metric::Cpu);
        let mut seen: HashMap<Vec<u32>, u32> = HashMap::new();
        for (path, _) in bp.iter().chain(np.iter()) {
            for k in 1..=path.len() {
                let next = seen.len() as u32;
                seen.entry(path[..k].to_vec()).or_insert(next);
            }
        }
        assert_eq!(seen.len(), t.nodes.len());
        for (prefix, id) in seen {
            assert_eq!(t.path(id), prefix);
        }
    }
}
