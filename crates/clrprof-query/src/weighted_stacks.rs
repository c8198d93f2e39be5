//! Whole stacks, each with its weight for one metric, as every exporter (folded stacks, flame
//! graphs, speedscope, ...) reads them: merged over the selected threads, and per thread; and the
//! names of a stack's frames. The stacks are the engine's frame paths ([`engine::frame_paths`]).
//! (The stack table itself is `clrprof_model::stacks`.)

use clrprof_model::{Cost, FrameId, Metric, Profile, StackId};
use serde::Serialize;

use crate::engine::{self, PathSource};
use crate::select::{self, measure, Threads};

/// One stack and its cost: `samples` (samples, calls or objects behind it) and `value` (the
/// metric's amount: ns of CPU or wall time, bytes, ...).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StackSample {
    /// Root first.
    pub frames: Vec<FrameId>,
    pub samples: u64,
    pub value: u64,
}

/// One thread's stacks.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadStacks {
    pub os_tid: u32,
    /// Empty when never named.
    pub name: String,
    pub stacks: Vec<StackSample>,
}

/// Stacks for a weight: merged over the selection, then per thread (threads without any cost for
/// the weight left out).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stacks {
    pub metric: Metric,
    /// Describes the weight for titles (`CPU time (sampled)`, ...).
    pub weight_name: &'static str,
    /// Unit of `StackSample::value` (`nanoseconds`, `bytes`, `none`).
    pub value_unit: &'static str,
    /// Stacks with a value or samples for the weight over the selection (`merged.len()` when the
    /// merged stacks are built).
    pub count: usize,
    pub merged: Vec<StackSample>,
    pub threads: Vec<ThreadStacks>,
}

/// The stacks of `paths` with a value or samples for the metric, sorted by their frames' names.
fn samples_of(p: &Profile, metric: Metric, paths: &engine::StackPaths<'_, Cost>) -> Vec<StackSample> {
    let mut out: Vec<StackSample> = Vec::new();
    paths.each_path(&mut |path, c| {
        let (samples, value) = measure(metric, c);
        if samples > 0 || value > 0 {
            out.push(StackSample { frames: path.iter().map(|&f| FrameId(f)).collect(), samples, value });
        }
    });
    // Deterministic: by the frames' names, root first (stacks of the same names in stack order).
    let name = |f: &FrameId| p.costs.stacks.frames[f.0 as usize].name.as_str();
    out.sort_by(|a, b| a.frames.iter().map(name).cmp(b.frames.iter().map(name)));
    out
}

/// What a weight is called in titles, and the unit of its values.
pub fn weight_name_and_unit(metric: Metric) -> (&'static str, &'static str) {
    (metric.label(), metric.unit())
}

/// The stacks of a weight (`None`: the profile's natural one) for a thread selection.
pub fn stacks(p: &Profile, metric: Option<Metric>, threads: &Threads) -> Stacks {
    stacks_of(p, metric, threads, Needed::All)
}

/// Which of the stacks a reader uses (a frame vector per stack, merged and again per thread, is
/// the most memory an export takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needed {
    /// None: the reader walks the profile itself ([`Stacks::count`] is still set).
    None,
    /// The merged stacks only.
    Merged,
    /// The merged stacks; the reader builds each thread's as it writes it ([`thread_stacks`]),
    /// holding one thread's frame vectors at a time instead of every thread's.
    MergedThenEachThread,
    /// Merged and per thread.
    All,
}

/// [`stacks`] with only what `needed` says built; the rest left empty.
pub fn stacks_of(p: &Profile, metric: Option<Metric>, threads: &Threads, needed: Needed) -> Stacks {
    let metric = select::metric(p, metric);
    let (weight_name, value_unit) = weight_name_and_unit(metric);
    if needed == Needed::None {
        let count = weighed_stacks(p, metric, threads);
        return Stacks { metric, weight_name, value_unit, count, merged: Vec::new(), threads: Vec::new() };
    }
    let merged = threads.with_filter(|f| samples_of(p, metric, &engine::frame_paths(&p.costs, f)));
    let per_thread = match needed {
        Needed::All => thread_stacks(p, metric, threads).collect(),
        _ => Vec::new(),
    };
    Stacks { metric, weight_name, value_unit, count: merged.len(), merged, threads: per_thread }
}

/// The selected threads' stacks for a weight (as resolved in [`Stacks::metric`]), as
/// [`Stacks::threads`] holds them (threads without any cost for it left out), each built when the
/// iterator reaches it: a reader that takes [`Needed::MergedThenEachThread`] holds one thread's at
/// a time.
pub fn thread_stacks<'a>(
    p: &'a Profile,
    metric: Metric,
    threads: &'a Threads,
) -> impl Iterator<Item = ThreadStacks> + 'a {
    p.costs.threads.iter().filter(|t| threads.contains(t.os_tid)).filter_map(move |t| {
        let mut paths = engine::thread_frame_paths(&p.costs, t);
        paths.weights.sort_by_key(|&(s, _)| s);
        let stacks = samples_of(p, metric, &paths);
        (!stacks.is_empty()).then(|| ThreadStacks { os_tid: t.os_tid, name: select::thread_name(p, t.os_tid), stacks })
    })
}

/// How many stacks have a value or samples for `metric` over the selected threads, as
/// [`samples_of`] keeps them (a stack's costs summed over the threads), one bit a stack.
fn weighed_stacks(p: &Profile, metric: Metric, threads: &Threads) -> usize {
    let n = p.costs.stacks.nodes.len();
    let mut weighed = vec![0u64; n.div_ceil(64)];
    for t in p.costs.threads.iter().filter(|t| threads.contains(t.os_tid)) {
        for (s, c) in t.costs.iter() {
            let (samples, value) = measure(metric, &c);
            if samples > 0 || value > 0 {
                weighed[s.0 as usize / 64] |= 1 << (s.0 % 64);
            }
        }
    }
    weighed.iter().map(|w| w.count_ones() as usize).sum()
}

/// Frame names of a stack, innermost first.
pub fn stack_names(p: &Profile, s: StackId) -> Vec<String> {
    let st = &p.costs.stacks;
    st.frames_of(s).iter().rev().map(|f| st.frames[f.0 as usize].name.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_model::FrameKey;

    /// What an export that walks the profile itself is told: as many stacks as the merged ones
    /// built, for every weight and thread selection, none of them built.
    #[test]
    fn the_count_of_stacks_is_the_merged_stacks_built() {
        let mut p = Profile::default();
        let frames: Vec<_> = (0..4).map(|i| p.costs.stacks.intern_frame(FrameKey::Function(i))).collect();
        let mut x: u64 = 7;
        for _ in 0..300 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let path: Vec<_> = (0..1 + (x >> 62) as usize).map(|k| frames[((x >> (3 * k + 8)) % 4) as usize]).collect();
            let s = p.costs.stacks.intern_stack(&path).unwrap();
            // Some stacks have CPU samples only, some calls only, some nothing.
            let c = Cost {
                cpu_samples: (x >> 40) % 3,
                cpu_ns: (x >> 40) % 3 * 10,
                calls: (x >> 50) % 2,
                ..Default::default()
            };
            p.costs.add(1 + (x >> 20) as u32 % 3, s, &c);
        }
        for metric in [Metric::Cpu, Metric::Calls, Metric::Wall] {
            for threads in [Threads::all(), Threads::only(vec![2, 3])] {
                let all = stacks(&p, Some(metric), &threads);
                let none = stacks_of(&p, Some(metric), &threads, Needed::None);
                let merged = stacks_of(&p, Some(metric), &threads, Needed::Merged);
                assert_eq!(all.count, all.merged.len());
                assert_eq!((none.count, none.merged.len(), none.threads.len()), (all.merged.len(), 0, 0), "{metric:?}");
                assert_eq!((merged.count, &merged.merged), (all.count, &all.merged));
                assert!(merged.threads.is_empty());
                // Each thread's built alone is what `Needed::All` holds for it.
                let apart = stacks_of(&p, Some(metric), &threads, Needed::MergedThenEachThread);
                assert_eq!((apart.count, &apart.merged, apart.threads.len()), (all.count, &all.merged, 0));
                let each: Vec<ThreadStacks> = thread_stacks(&p, apart.metric, &threads).collect();
                assert_eq!(each, all.threads, "{metric:?}");
                if metric == Metric::Wall {
                    assert_eq!(none.count, 0);
                } else {
                    assert!(none.count > 0);
                }
            }
        }
    }
}
