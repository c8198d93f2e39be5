//! The Monte Carlo tables: sampled hits (self samples) per module and per routine, from the
//! profile's costs.

use std::collections::HashMap;

use crate::profile::Profile;
use crate::samples::{NOT_WALKABLE, UNKNOWN};
use crate::stacks::{Cost, FrameId};

/// Sampled hits of one module (the Monte Carlo module table): samples whose leaf frame was in it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ModuleHits {
    pub module: String,
    pub samples: u64,
    pub ns: u64,
}

/// Sampled hits of one routine (leaf frame).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RoutineHits {
    pub frame: FrameId,
    pub module: String,
    pub samples: u64,
    pub ns: u64,
    /// Start address of the routine, when known.
    pub address: Option<u64>,
}

/// Module of a frame for hit tables: the file name, or `UNKNOWN`.
pub fn frame_module(p: &Profile, f: FrameId) -> String {
    let fr = &p.costs.stacks.frames[f.0 as usize];
    if fr.name == NOT_WALKABLE {
        NOT_WALKABLE.to_string()
    } else if fr.module.is_empty() {
        UNKNOWN.to_string()
    } else {
        fr.module.clone()
    }
}

/// The Monte Carlo tables: hits (self samples) per module and per routine for the CPU or wall
/// metric, most hits first (ties by name, so output is deterministic).
pub fn hits(
    p: &Profile,
    metric: crate::metric::Metric,
    filter: crate::views::ThreadFilter<'_>,
) -> (Vec<ModuleHits>, Vec<RoutineHits>) {
    use crate::metric::Metric;
    let pick = |c: &Cost| match metric {
        Metric::Wall => (c.wall_samples, c.wall_ns),
        _ => (c.cpu_samples, c.cpu_ns),
    };
    let mut routines = Vec::new();
    let mut modules: HashMap<String, ModuleHits> = HashMap::new();
    for r in crate::views::function_rows(&p.costs, filter) {
        let (samples, ns) = pick(&r.self_cost);
        if samples == 0 {
            continue;
        }
        let module = frame_module(p, r.frame);
        let m =
            modules.entry(module.clone()).or_insert_with(|| ModuleHits { module: module.clone(), samples: 0, ns: 0 });
        m.samples += samples;
        m.ns += ns;
        routines.push(RoutineHits {
            frame: r.frame,
            module,
            samples,
            ns,
            address: p.sampling.addresses.get(&r.frame).copied(),
        });
    }
    let name = |f: FrameId| p.costs.stacks.frames[f.0 as usize].name.as_str();
    routines.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| name(a.frame).cmp(name(b.frame))));
    let mut modules: Vec<ModuleHits> = modules.into_values().collect();
    modules.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.module.cmp(&b.module)));
    (modules, routines)
}
