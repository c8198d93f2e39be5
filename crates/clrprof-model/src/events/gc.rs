//! Garbage collections: each GC as the profiling API reports it, matched to the runtime's own
//! description (`GcInfo`), with the runtime suspensions that served it as its pause.

use clrprof_trace::{GcEnd, GcFinished, GcInfo, GcStarted};

use crate::TimeRange;

/// One garbage collection.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Gc {
    /// The runtime's GC index when known (EventPipe `GCStart`), else the order in the trace.
    pub index: u64,
    pub generation: u8,
    /// `induced`, or the runtime's reason (`small-alloc`, `large-alloc`, `low-memory`, ...), or `other`.
    pub reason: String,
    pub induced: bool,
    /// `Some(true)` for background GCs (runtime's GC type, or seen overlapping another GC).
    pub background: Option<bool>,
    pub start_ns: u64,
    pub duration_ns: u64,
    /// Time the runtime was suspended for this GC (within the profile's time range).
    pub pause_ns: u64,
    /// Used bytes of gen0, gen1, gen2, LOH, POH before and after (empty when the profiling API
    /// did not report the collection: the ephemeral GC a background GC starts with).
    pub before: Vec<u64>,
    pub after: Vec<u64>,
    pub os_tid: u32,
    /// Finished (a crash can leave the last GC open).
    pub finished: bool,
}

impl Gc {
    /// When it finished; `u64::MAX` while it runs.
    fn end_ns(&self) -> u64 {
        if self.finished {
            self.start_ns + self.duration_ns
        } else {
            u64::MAX
        }
    }
}

/// How far apart (ns) a GC's start and its description by the runtime are looked for (a
/// description is matched to the nearest start of its generation).
const MATCH_NS: u64 = 50_000_000;

/// How far apart the profiling API's callback and the runtime's event of the same GC start or end
/// may be dated (written one after the other on the same thread; a description read in a test
/// may come just before its start).
const SKEW_NS: u64 = 2_000_000;

/// Where a GC's facts came from.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Sources {
    /// `GcStarted` (profiling API) seen.
    started: bool,
    /// `GcInfo` (the runtime's `GCStart`) seen.
    described: bool,
    /// `GcEnd` (the runtime's `GCEnd`) seen: its end is the runtime's, by index.
    ended: bool,
}

/// A `GcFinished` not yet matched to a `GcEnd` (ends mode): (ts, os_tid, sizes).
type Finish = (u64, u32, Vec<u64>);

/// GC facts as they arrive.
///
/// Two ways of pairing a collection's start and end. With the runtime's `GCStart`/`GCEnd` events
/// (`GcInfo`/`GcEnd`, written by the agent's EventPipe session) every collection has an index and
/// its end is found by index: a background GC ends on its own thread while foreground GCs start
/// and finish inside it, and the ephemeral GC a background GC begins with has no
/// `GarbageCollectionStarted` callback at all (only the runtime's events and a
/// `GarbageCollectionFinished`). Without them (older traces, no session), `GcFinished` finishes
/// the innermost GC in progress.
#[derive(Clone, Debug, Default)]
pub(super) struct GcFacts {
    /// Every GC in the order they started (index, reason and pause are set by `resolve`).
    gcs: Vec<Gc>,
    sources: Vec<Sources>,
    /// GCs in progress, innermost last.
    open: Vec<usize>,
    /// Position in `gcs` of each runtime GC index.
    by_index: std::collections::HashMap<u64, usize>,
    /// `GcEnd` seen before the `GcInfo` of its GC (records of two threads out of order): index ->
    /// (ts, os_tid).
    early_ends: std::collections::HashMap<u64, (u64, u32)>,
    /// A `GcEnd` has been seen: the runtime's ends pair the GCs, not the profiling API's finishes.
    has_ends: bool,
    /// Finishes waiting for their `GcEnd` (same thread, just after), and GCs ended by the runtime
    /// waiting for their finish's sizes (index, ts, os_tid) — a few each.
    finishes: Vec<Finish>,
    unsized_ends: Vec<(usize, u64, u32)>,
    /// Runtime suspensions `[suspended, resumed)` in the order they ended.
    suspensions: Vec<(u64, u64)>,
    open_suspension: Option<u64>,
    /// GCs dropped by `forget_before` (the numbering of those without a description goes on).
    forgotten: u64,
}

impl GcFacts {
    fn push(&mut self, gc: Gc, src: Sources) -> usize {
        // A GC that starts while another runs: the running one is a background GC.
        for &i in &self.open {
            self.gcs[i].background = Some(true);
        }
        let i = self.gcs.len();
        self.open.push(i);
        self.gcs.push(gc);
        self.sources.push(src);
        i
    }

    /// The GC among the last ones that `pred` accepts, nearest to `ts` and within `MATCH_NS`.
    fn nearest(&self, ts: u64, pred: impl Fn(&Gc, &Sources) -> bool) -> Option<usize> {
        let from = self.gcs.len().saturating_sub(64);
        (from..self.gcs.len())
            .filter(|&i| pred(&self.gcs[i], &self.sources[i]))
            .map(|i| (self.gcs[i].start_ns.abs_diff(ts), i))
            .filter(|&(d, _)| d <= MATCH_NS)
            .min()
            .map(|(_, i)| i)
    }

    pub fn started(&mut self, g: &GcStarted) {
        let gen = g.generation;
        // Its runtime description, written just after it on this thread, may have been read first
        // (records of two threads out of time order). Not one that ended already: the ephemeral
        // GC a background GC begins with has a description and an end but no start.
        let later = |x: &Gc, s: &Sources| {
            s.described && !s.started && !s.ended && x.generation == gen && x.start_ns + SKEW_NS >= g.ts
        };
        if let Some(i) = self.nearest(g.ts, later) {
            let gc = &mut self.gcs[i];
            gc.start_ns = g.ts;
            gc.before = g.sizes.clone();
            gc.os_tid = g.os_tid;
            gc.induced |= g.reason == 1;
            self.sources[i].started = true;
            return;
        }
        self.push(
            Gc {
                generation: g.generation,
                induced: g.reason == 1,
                start_ns: g.ts,
                before: g.sizes.clone(),
                os_tid: g.os_tid,
                ..Default::default()
            },
            Sources { started: true, ..Sources::default() },
        );
    }

    pub fn finished(&mut self, g: &GcFinished) {
        if self.has_ends {
            // The runtime's end of the same GC follows on this thread: it takes these sizes.
            if let Some(k) = self.unsized_ends.iter().position(|e| e.2 == g.os_tid && e.1.abs_diff(g.ts) <= SKEW_NS) {
                let (i, _, _) = self.unsized_ends.remove(k);
                self.gcs[i].after = g.sizes.clone();
                return;
            }
            if self.finishes.len() >= 16 {
                self.finishes.remove(0);
            }
            self.finishes.push((g.ts, g.os_tid, g.sizes.clone()));
            return;
        }
        if let Some(i) = self.open.pop() {
            let gc = &mut self.gcs[i];
            gc.duration_ns = g.ts.saturating_sub(gc.start_ns);
            gc.after = g.sizes.clone();
            gc.finished = true;
        }
    }

    pub fn info(&mut self, g: &GcInfo) {
        let gen = g.generation;
        let earlier = |x: &Gc, s: &Sources| {
            s.started && !s.described && x.generation as u32 == gen && x.start_ns <= g.ts + SKEW_NS
        };
        let i = match self.nearest(g.ts, earlier) {
            Some(i) => i,
            // No `GarbageCollectionStarted` for it (yet): known from the runtime's event.
            None => {
                self.push(Gc { generation: gen.min(2) as u8, start_ns: g.ts, ..Default::default() }, Sources::default())
            }
        };
        self.sources[i].described = true;
        let gc = &mut self.gcs[i];
        gc.index = g.index as u64;
        if g.kind == 1 {
            gc.background = Some(true);
        } else if gc.background.is_none() {
            gc.background = Some(false);
        }
        if !gc.induced {
            gc.reason = gc_reason(g.reason).to_string();
            gc.induced = matches!(g.reason, 1 | 7 | 10);
        }
        self.by_index.insert(g.index as u64, i);
        if let Some((ts, tid)) = self.early_ends.remove(&(g.index as u64)) {
            self.end_at(i, ts, tid);
        }
    }

    /// The runtime's end of a GC, by index.
    pub fn end(&mut self, g: &GcEnd) {
        if !self.has_ends {
            self.has_ends = true;
        }
        match self.by_index.get(&(g.index as u64)) {
            Some(&i) => self.end_at(i, g.ts, g.os_tid),
            None => {
                self.early_ends.insert(g.index as u64, (g.ts, g.os_tid));
            }
        }
    }

    fn end_at(&mut self, i: usize, ts: u64, tid: u32) {
        self.sources[i].ended = true;
        self.open.retain(|&o| o != i);
        let gc = &mut self.gcs[i];
        gc.duration_ns = ts.saturating_sub(gc.start_ns);
        gc.finished = true;
        // The profiling API's finish of the same GC, just before on the same thread.
        if let Some(k) = self.finishes.iter().rposition(|f| f.1 == tid && f.0.abs_diff(ts) <= SKEW_NS) {
            let (_, _, sizes) = self.finishes.remove(k);
            gc.after = sizes;
        } else if gc.after.is_empty() {
            if self.unsized_ends.len() >= 16 {
                self.unsized_ends.remove(0);
            }
            self.unsized_ends.push((i, ts, tid));
        }
    }

    /// Drops the GCs finished before `ts` (a prefix of them in start order) and the suspensions
    /// that ended before `ts`: no range from `ts` on sees them, and no suspension kept can be
    /// assigned to them.
    pub fn forget_before(&mut self, ts: u64) {
        self.suspensions.retain(|&(_, b)| b >= ts);
        let keep_from = self.suspensions.iter().map(|s| s.0).chain(self.open_suspension).fold(ts, u64::min);
        let lowest_open = self.open.iter().copied().min().unwrap_or(usize::MAX);
        // Keep the recent ones the runtime's events may still complete.
        let settled = keep_from.saturating_sub(MATCH_NS);
        let k = self
            .gcs
            .iter()
            .enumerate()
            .take_while(|&(i, g)| i < lowest_open && g.finished && g.end_ns() < settled)
            .count();
        if k == 0 {
            return;
        }
        self.gcs.drain(..k);
        self.sources.drain(..k);
        for i in &mut self.open {
            *i -= k;
        }
        self.by_index.retain(|_, i| *i >= k);
        for i in self.by_index.values_mut() {
            *i -= k;
        }
        self.unsized_ends.retain(|e| e.0 >= k);
        for e in &mut self.unsized_ends {
            e.0 -= k;
        }
        self.forgotten += k as u64;
    }

    pub fn retained(&self) -> usize {
        self.gcs.len() + self.suspensions.len()
    }

    pub fn suspended(&mut self, ts: u64) {
        self.open_suspension = Some(ts);
    }

    pub fn resumed(&mut self, ts: u64) {
        if let Some(a) = self.open_suspension.take() {
            self.suspensions.push((a, ts));
        }
    }

    /// Every GC of the trace (whatever the range), with index, reason and background flag, and
    /// as pause the part of its suspensions inside `range`.
    pub fn resolve(&self, range: TimeRange) -> Vec<Gc> {
        let mut gcs = self.gcs.clone();
        for (i, (gc, src)) in gcs.iter_mut().zip(&self.sources).enumerate() {
            if !src.described {
                gc.index = self.forgotten + i as u64 + 1;
            }
            if gc.induced {
                gc.reason = "induced".into();
            } else if gc.reason.is_empty() {
                gc.reason = "other".into();
            }
        }
        // In start order (a description that came before its start keeps its place otherwise).
        gcs.sort_by_key(|g| (g.start_ns, g.index));
        for (&(a, b), target) in self.suspensions.iter().zip(assign_suspensions(&gcs, &self.suspensions)) {
            if let Some(i) = target {
                gcs[i].pause_ns += range.overlap(a, b);
            }
        }
        gcs
    }

    /// The runtime's suspensions clipped to `range`, by start (an open one is not included).
    pub fn pauses(&self, range: TimeRange) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.suspensions.iter().filter_map(|&(a, b)| range.clip(a, b)).collect();
        v.sort_unstable();
        v
    }
}

/// The GC each suspension `[a, b)` serves: the latest one started before it ended and not finished
/// before it began (of GCs starting at the same time, the later in `gcs`), if any.
///
/// A sweep in O((n + m) log(n + m)): suspensions by end, GCs entering by start as the end passes
/// them. A GC that started no later than another and finishes no later is never chosen over it
/// again, so the candidates form a stack whose finishes decrease from bottom to top; the answer is
/// the topmost one finished at or after `a`, found by binary search.
pub(super) fn assign_suspensions(gcs: &[Gc], suspensions: &[(u64, u64)]) -> Vec<Option<usize>> {
    let mut by_start: Vec<usize> = (0..gcs.len()).collect();
    by_start.sort_by_key(|&i| (gcs[i].start_ns, i));
    let mut by_end: Vec<usize> = (0..suspensions.len()).collect();
    by_end.sort_by_key(|&j| suspensions[j].1);
    let mut out = vec![None; suspensions.len()];
    // (GC, its end): later starts on top, ends strictly decreasing upwards.
    let mut stack: Vec<(usize, u64)> = Vec::new();
    let mut next = 0;
    for j in by_end {
        let (a, b) = suspensions[j];
        while let Some(&i) = by_start.get(next).filter(|&&i| gcs[i].start_ns <= b) {
            let end = gcs[i].end_ns();
            while stack.last().is_some_and(|&(_, e)| e <= end) {
                stack.pop();
            }
            stack.push((i, end));
            next += 1;
        }
        let n = stack.partition_point(|&(_, e)| e >= a);
        out[j] = n.checked_sub(1).map(|k| stack[k].0);
    }
    out
}

/// Time inside at least one GC (start to finish), within `range`: the union of the GCs' intervals,
/// so a foreground GC inside a background one counts once. A GC still running has no duration.
pub fn time_in_gc(gcs: &[Gc], range: TimeRange) -> u64 {
    gc_union(gcs).into_iter().map(|(a, b)| range.overlap(a, b)).sum()
}

/// The disjoint intervals covered by GCs, sorted.
pub(super) fn gc_union(gcs: &[Gc]) -> Vec<(u64, u64)> {
    let mut w: Vec<(u64, u64)> = gcs.iter().map(|g| (g.start_ns, g.start_ns + g.duration_ns)).collect();
    w.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(w.len());
    for (a, b) in w {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Lower-case names of the runtime's `GCReason` values.
pub fn gc_reason(r: u32) -> &'static str {
    match r {
        0 => "small-alloc",
        1 => "induced",
        2 => "low-memory",
        3 => "empty",
        4 => "large-alloc",
        5 => "out-of-space-soh",
        6 => "out-of-space-loh",
        7 => "induced-not-forced",
        8 => "internal",
        9 => "induced-low-memory",
        10 => "induced-compacting",
        11 => "low-memory-host",
        12 => "pm-full-gc",
        13 => "low-memory-host-blocking",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    #[test]
    fn the_sweep_assigns_suspensions_as_the_pairwise_rule() {
        let brute = |gcs: &[Gc], (a, b): (u64, u64)| -> Option<usize> {
            gcs.iter()
                .enumerate()
                .filter(|(_, g)| g.start_ns <= b && (!g.finished || g.start_ns + g.duration_ns >= a))
                .max_by_key(|(_, g)| g.start_ns)
                .map(|(i, _)| i)
        };
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..200 {
            let n = rng.below(30) as usize;
            let span = 1 + rng.below(2000);
            let gcs: Vec<Gc> = (0..n)
                .map(|_| Gc {
                    start_ns: rng.below(span),
                    duration_ns: rng.below(300),
                    finished: rng.below(10) > 0,
                    ..Default::default()
                })
                .collect();
            let suspensions: Vec<(u64, u64)> = (0..rng.below(40))
                .map(|_| {
                    let a = rng.below(span + 300);
                    // Mostly ordered, sometimes empty or reversed.
                    (a, (a + rng.below(200)).saturating_sub(rng.below(20)))
                })
                .collect();
            let got = assign_suspensions(&gcs, &suspensions);
            let want: Vec<Option<usize>> = suspensions.iter().map(|&s| brute(&gcs, s)).collect();
            assert_eq!(got, want, "round {round}: {gcs:?} {suspensions:?}");
        }
    }
}
