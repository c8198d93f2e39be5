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
    let metric = select::metric(p, metric);
    let merged = threads.with_filter(|f| samples_of(p, metric, &engine::frame_paths(&p.costs, f)));
    let per_thread = p
        .costs
        .threads
        .iter()
        .filter(|t| threads.contains(t.os_tid))
        .map(|t| {
            let mut paths = engine::thread_frame_paths(&p.costs, t);
            paths.weights.sort_by_key(|&(s, _)| s);
            ThreadStacks {
                os_tid: t.os_tid,
                name: select::thread_name(p, t.os_tid),
                stacks: samples_of(p, metric, &paths),
            }
        })
        .filter(|t| !t.stacks.is_empty())
        .collect();
    let (weight_name, value_unit) = weight_name_and_unit(metric);
    Stacks { metric, weight_name, value_unit, merged, threads: per_thread }
}

/// Frame names of a stack, innermost first.
pub fn stack_names(p: &Profile, s: StackId) -> Vec<String> {
    let st = &p.costs.stacks;
    st.frames_of(s).iter().rev().map(|f| st.frames[f.0 as usize].name.clone()).collect()
}
