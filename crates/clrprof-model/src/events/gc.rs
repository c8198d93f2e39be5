//! Garbage collections: each GC as the profiling API reports it, matched to the runtime's own
//! description (`GcInfo`), with the runtime suspensions that served it as its pause.

use clrprof_trace::{GcFinished, GcInfo, GcStarted};

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
    /// Used bytes of gen0, gen1, gen2, LOH, POH before and after.
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

#[derive(Clone, Debug)]
struct GcInfoRec {
    ts: u64,
    index: u32,
    generation: u32,
    reason: u32,
    kind: u32,
}

/// GC facts as they arrive.
#[derive(Clone, Debug, Default)]
pub(super) struct GcFacts {
    /// Every GC in the order they started (index, reason and pause are set by `resolve`).
    gcs: Vec<Gc>,
    /// GCs in progress, innermost last.
    open: Vec<usize>,
    /// The runtime's descriptions, sorted by time.
    infos: Vec<GcInfoRec>,
    /// Runtime suspensions `[suspended, resumed)` in the order they ended.
    suspensions: Vec<(u64, u64)>,
    open_suspension: Option<u64>,
    /// GCs dropped by `forget_before` (the numbering of those without a description goes on).
    forgotten: u64,
}

impl GcFacts {
    pub fn started(&mut self, g: &GcStarted) {
        // A GC that starts while another runs: the running one is a background GC.
        for &i in &self.open {
            self.gcs[i].background = Some(true);
        }
        self.open.push(self.gcs.len());
        self.gcs.push(Gc {
            generation: g.generation,
            induced: g.reason == 1,
            start_ns: g.ts,
            before: g.sizes.clone(),
            os_tid: g.os_tid,
            ..Default::default()
        });
    }

    pub fn finished(&mut self, g: &GcFinished) {
        if let Some(i) = self.open.pop() {
            let gc = &mut self.gcs[i];
            gc.duration_ns = g.ts.saturating_sub(gc.start_ns);
            gc.after = g.sizes.clone();
            gc.finished = true;
        }
    }

    pub fn info(&mut self, g: &GcInfo) {
        let at = self.infos.partition_point(|i| i.ts <= g.ts);
        self.infos.insert(
            at,
            GcInfoRec { ts: g.ts, index: g.index, generation: g.generation, reason: g.reason, kind: g.kind },
        );
    }

    /// Drops the GCs finished before `ts` (a prefix of them in start order, with the runtime's
    /// descriptions they were matched to) and the suspensions that ended before `ts`: no range from
    /// `ts` on sees them, and no suspension kept can be assigned to them.
    pub fn forget_before(&mut self, ts: u64) {
        self.suspensions.retain(|&(_, b)| b >= ts);
        let keep_from = self.suspensions.iter().map(|s| s.0).chain(self.open_suspension).fold(ts, u64::min);
        let lowest_open = self.open.iter().copied().min().unwrap_or(usize::MAX);
        let k = self
            .gcs
            .iter()
            .enumerate()
            .take_while(|&(i, g)| i < lowest_open && g.finished && g.end_ns() < keep_from)
            .count();
        if k == 0 {
            return;
        }
        // The descriptions the first k GCs consume, as `resolve` matches them.
        let mut j = 0;
        for gc in &self.gcs[..k] {
            while j < self.infos.len() && self.infos[j].ts + 50_000_000 < gc.start_ns {
                j += 1;
            }
            if let Some(info) = self.infos.get(j) {
                if info.generation == gc.generation as u32 && info.ts <= gc.start_ns + 50_000_000 {
                    j += 1;
                }
            }
        }
        self.infos.drain(..j);
        self.gcs.drain(..k);
        for i in &mut self.open {
            *i -= k;
        }
        self.forgotten += k as u64;
    }

    pub fn retained(&self) -> usize {
        self.gcs.len() + self.infos.len() + self.suspensions.len()
    }

    pub fn suspended(&mut self, ts: u64) {
        self.open_suspension = Some(ts);
    }

    pub fn resumed(&mut self, ts: u64) {
        if let Some(a) = self.open_suspension.take() {
            self.suspensions.push((a, ts));
        }
    }

    /// Every GC of the trace (whatever the range: GCs are matched by order), with index, reason
    /// and background flag, and as pause the part of its suspensions inside `range`.
    pub fn resolve(&self, range: TimeRange) -> Vec<Gc> {
        // Match the runtime's own descriptions (same order, same generation, close in time).
        let mut gcs = self.gcs.clone();
        let mut j = 0;
        for (i, gc) in gcs.iter_mut().enumerate() {
            gc.index = self.forgotten + i as u64 + 1;
            while j < self.infos.len() && self.infos[j].ts + 50_000_000 < gc.start_ns {
                j += 1;
            }
            if let Some(info) = self.infos.get(j) {
                if info.generation == gc.generation as u32 && info.ts <= gc.start_ns + 50_000_000 {
                    gc.index = info.index as u64;
                    if info.kind == 1 {
                        gc.background = Some(true);
                    } else if gc.background.is_none() {
                        gc.background = Some(false);
                    }
                    if !gc.induced {
                        gc.reason = gc_reason(info.reason).to_string();
                        gc.induced = matches!(info.reason, 1 | 7 | 10);
                    }
                    j += 1;
                }
            }
            if gc.induced {
                gc.reason = "induced".into();
            } else if gc.reason.is_empty() {
                gc.reason = "other".into();
            }
        }
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
