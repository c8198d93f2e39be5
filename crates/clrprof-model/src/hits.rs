//! The rows of the Monte Carlo tables (sampled hits per module and per routine) and the module a
//! frame counts under; the query engine computes them (`clrprof_query::costs::hits`).

use crate::profile::Profile;
use crate::samples::{NOT_WALKABLE, UNKNOWN};
use crate::stacks::FrameId;

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
