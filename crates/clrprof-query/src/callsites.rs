//! Call sites in the callers view: in a profile built with lines, a caller's frames are one per
//! line it calls from (instrumented calls at their call sites' lines, sampled caller frames at
//! their return addresses' lines). The callers view keeps one row per calling function, computed
//! on paths whose frames are mapped to their functions (so recursion through two lines counts
//! once), and lists under each row the lines it calls from, each with its exact calls and the
//! cost that flowed through it.

use clrprof_model::{Cost, FrameKey, Profile};
use serde::Serialize;

use crate::engine::{FuncId, PathSource};

/// One line a caller calls the selected function from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallSite {
    /// The source file's path (as the PDB gives it).
    pub file: String,
    pub line: u32,
    /// Exact calls from this line (instrumented data; 0 for sampled data).
    pub calls: u64,
    /// Cost that flowed through calls from this line.
    pub cost: Cost,
}

/// Per frame, the frame that stands for its whole function (the function's frame without a line,
/// else its first line frame); `None` when no frame has a line (a profile built without lines).
pub fn function_frames(p: &Profile) -> Option<Vec<FuncId>> {
    let frames = &p.costs.stacks.frames;
    if !frames.iter().any(|f| f.line.is_some()) {
        return None;
    }
    let mut first: std::collections::HashMap<&FrameKey, FuncId> = Default::default();
    for (i, f) in frames.iter().enumerate() {
        let e = first.entry(&f.key).or_insert(i as FuncId);
        if f.line.is_none() && frames[*e as usize].line.is_some() {
            *e = i as FuncId;
        }
    }
    Some(frames.iter().map(|f| first[&f.key]).collect())
}

/// Paths with every frame replaced by its function's frame ([`function_frames`]).
pub struct FunctionPaths<'a, P: ?Sized> {
    pub paths: &'a P,
    pub map: &'a [FuncId],
}

impl<W, P: PathSource<W> + ?Sized> PathSource<W> for FunctionPaths<'_, P> {
    fn each_path(&self, f: &mut dyn FnMut(&[FuncId], &W)) {
        let mut buf: Vec<FuncId> = Vec::new();
        self.paths.each_path(&mut |path, w| {
            buf.clear();
            buf.extend(path.iter().map(|&x| self.map.get(x as usize).copied().unwrap_or(x)));
            f(&buf, w);
        });
    }
}
