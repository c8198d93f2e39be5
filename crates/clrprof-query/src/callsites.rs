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

#[cfg(test)]
mod tests {
    use crate::costs::{callers, CostQuery};
    use clrprof_model::{Cost, FrameKey, Metric, Profile, SourceLine};

    /// Main calls Work from lines 10 (3 calls) and 11 (1 call); Work recurses into itself from its
    /// line 20 once per call from line 10 — a profile built with lines, as the model makes it.
    #[test]
    fn callers_are_one_row_per_function_with_their_lines() {
        let mut p = Profile::default();
        let t = &mut p.costs;
        let at = |line: u32| Some(SourceLine { file: "/src/App.cs".into(), line });
        let main = t.stacks.intern_frame(FrameKey::Function(1));
        let main10 = t.stacks.intern_frame_at(FrameKey::Function(1), at(10));
        let main11 = t.stacks.intern_frame_at(FrameKey::Function(1), at(11));
        let work = t.stacks.intern_frame(FrameKey::Function(2));
        let work20 = t.stacks.intern_frame_at(FrameKey::Function(2), at(20));
        for f in [main, main10, main11] {
            t.stacks.frames[f.0 as usize].name = "Main".into();
        }
        for f in [work, work20] {
            t.stacks.frames[f.0 as usize].name = "Work".into();
        }
        let c = |calls, time_ns| Cost { calls, time_ns, ..Default::default() };
        for (frames, cost) in [
            (vec![main], c(1, 5)),
            (vec![main10, work], c(3, 30)),
            (vec![main10, work20, work], c(3, 60)),
            (vec![main11, work], c(1, 7)),
        ] {
            let s = t.stacks.intern_stack(&frames).unwrap();
            t.add(1, s, &cost);
        }
        let q = CostQuery { metric: Some(Metric::Time), ..Default::default() };
        let b = callers(&p, &q, Some("Work")).unwrap().function.unwrap();
        assert_eq!(b.names, ["Work"]);
        assert_eq!((b.calls, b.inclusive.time_ns), (7, 97));
        let rows: Vec<(Option<String>, u64, u64)> =
            b.callers.iter().map(|e| (e.name.clone(), e.calls, e.cost.time_ns)).collect();
        // Main's calls carry all of Work (recursion once); Work calls itself 3 times.
        assert_eq!(rows, [(Some("Main".into()), 4, 97), (Some("Work".into()), 3, 60)]);
        let sites: Vec<(u32, u64, u64)> =
            b.callers[0].sites.iter().map(|s| (s.line, s.calls, s.cost.time_ns)).collect();
        assert_eq!(sites, [(10, 3, 90), (11, 1, 7)]);
        let sites: Vec<(u32, u64)> = b.callers[1].sites.iter().map(|s| (s.line, s.calls)).collect();
        assert_eq!(sites, [(20, 3)]);
        assert!(b.callees.iter().all(|e| e.sites.is_empty()));
        let entry: Vec<(String, u64)> =
            callers(&p, &q, None).unwrap().entry_points.iter().map(|e| (e.name.clone(), e.inclusive.time_ns)).collect();
        assert_eq!(entry, [("Main".to_string(), 102)], "one entry point per function");
    }
}
