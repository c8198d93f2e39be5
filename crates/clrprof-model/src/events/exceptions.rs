//! Exceptions: each one followed from its throw to its catch (or the end of its thread), grouped
//! by type and throw site; in an exception storm (the agent's rate limit paused the runtime's
//! callbacks), the throws seen in sampling windows are folded into estimates.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use clrprof_trace::{
    exception_monitoring as mon, exception_phase as ph, ExceptionCaught, ExceptionCounts, ExceptionMonitoring,
    ExceptionPhase, ExceptionRow, ExceptionStack, ExceptionThrown, ExceptionType,
};

use super::Interner;
use crate::stacks::{CostTree, FrameKey, StackId};
use crate::TimeRange;

/// Exceptions of one type thrown from one function.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ExceptionGroup {
    pub type_name: String,
    /// The throwing function (innermost managed frame at the throw), empty when unknown.
    pub throw_site: String,
    /// Every throw, rethrows included (each one a first-chance exception).
    pub thrown: u64,
    /// Of `thrown`, the rethrows: the same exception object thrown again (`throw;`).
    pub rethrown: u64,
    /// Caught by a managed `catch` (`ExceptionCatcherEnter`).
    pub caught: u64,
    /// Never reached a catch before its thread or the trace ended.
    pub uncaught: u64,
    /// Functions whose `catch` ran, with counts, most frequent first.
    pub catch_sites: Vec<(String, u64)>,
    /// Frames visited in the first pass (`ExceptionSearchFunctionEnter`), summed.
    pub search_frames: u64,
    /// Filters run (`ExceptionSearchFilterEnter`).
    pub filters: u64,
    /// Frames unwound in the second pass (`ExceptionUnwindFunctionEnter`).
    pub unwind_frames: u64,
    /// `finally`/fault blocks run (`ExceptionUnwindFinallyEnter`).
    pub finallies: u64,
    /// `catch` blocks entered (`ExceptionCatcherEnter`).
    pub catches: u64,
    /// Distinct throw stacks with their counts, most frequent first. The agent walks the first
    /// throws of each type and then a sample, so these counts may sum to less than `thrown`.
    pub stacks: Vec<(StackId, u64)>,
    /// OS thread ids with an uncaught exception of this group.
    pub uncaught_threads: Vec<u32>,
    /// Throws actually observed; less than `thrown` when `estimated`.
    pub observed: u64,
    /// Part of the counts are estimates: exceptions thrown while the agent's rate limit had the
    /// runtime's exception callbacks paused (see `ExceptionSampling`).
    pub estimated: bool,
}

/// How exceptions were observed: all of them, or (in an exception storm, unless recorded with
/// `--exceptions exact`) every one up to a budget and then samples. Times are within the
/// profile's range.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ExceptionSampling {
    /// The rate limit paused the callbacks at least once: some counts are estimates.
    pub sampled: bool,
    /// Time the callbacks were paused, and time in sampling windows (callbacks on again).
    pub paused_ns: u64,
    pub window_ns: u64,
    /// When the first pause began (ns since process start; the range's start when the range
    /// begins inside a storm).
    pub first_pause_ns: u64,
    /// Exceptions observed, and the estimate of all thrown (the runtime's own count when known).
    pub observed: u64,
    pub estimated_total: u64,
    /// Exceptions thrown by the runtime's own count (`ExceptionCount` records; exact for the whole
    /// run, to the agent's flush interval at the edges of a time window); None when the trace
    /// has none. In a storm the estimated groups are scaled so that all groups add up to it.
    /// Observed exceptions whose catch was not followed (a pause began while they were in flight):
    /// counted here only, in no group.
    pub unfollowed: u64,
    /// New exceptions (rethrows aside) by the runtime's own count.
    pub runtime_total: Option<u64>,
    /// Of the throws (`estimated_total`), the rethrows (estimated where sampled).
    pub rethrown: u64,
}

/// An exception between its throw and its catch.
#[derive(Clone, Debug, Default)]
struct Pending {
    /// When it was thrown.
    ts: u64,
    type_name: u32,
    /// The throwing function: first frame searched by the first pass, or the stack's innermost.
    site: u64,
    /// Throw stack, innermost first (interned; empty when not walked).
    stack: u32,
    /// Rethrows among the exceptions this stands for (0 or 1 for one exception).
    rethrown: u64,
    search: u64,
    filters: u64,
    unwind: u64,
    finallies: u64,
}

/// An exception whose catch was seen.
#[derive(Clone, Debug)]
struct Caught {
    x: Pending,
    os_tid: u32,
    catcher: u64,
}

/// Exception facts as they arrive.
#[derive(Clone, Debug, Default)]
pub(super) struct ExceptionFacts {
    types: Interner<String>,
    stacks: Interner<Vec<u64>>,
    /// Exceptions in flight per OS thread, innermost last.
    active: HashMap<u32, Vec<Pending>>,
    /// Caught exceptions in the order their catch was seen.
    caught: Vec<Caught>,
    /// Every throw (ts, os_tid) in trace order.
    throws: Vec<(u64, u32)>,
    /// `ExceptionMonitoring` changes (ts, mode), sorted; empty when every exception was observed.
    monitor: Vec<(u64, u8)>,
    /// The runtime's cumulative count of new exceptions (ts, thrown - rethrown), sorted
    /// (`ExceptionCount`).
    counts: Vec<(u64, u64)>,
    /// Caught exceptions counted by the agent (`ExceptionCounts` rows), in trace order.
    rows: Vec<ExceptionRow>,
    /// The agent's type and stack numbers (`ExceptionType`, `ExceptionStack`), interned.
    agent_types: HashMap<u32, u32>,
    agent_stacks: HashMap<u32, u32>,
    /// `ExceptionCounts` records that could not be unpacked.
    pub damaged: u64,
}

/// The throw times a row of `n` exceptions thrown from `first` to `last` stands for: spread
/// evenly (the agent keeps the first and the last only).
fn spread(r: &ExceptionRow) -> impl Iterator<Item = u64> + '_ {
    let (n, span) = (r.count, r.last_ns - r.first_ns);
    (0..n)
        .map(move |i| if n < 2 { r.first_ns } else { r.first_ns + (span as u128 * i as u128 / (n - 1) as u128) as u64 })
}

/// How many of a row's throw times fall in `range`.
fn in_range(r: &ExceptionRow, range: TimeRange) -> u64 {
    if r.count == 0 || r.last_ns < range.from || r.first_ns >= range.to {
        0
    } else if range.contains(r.first_ns) && range.contains(r.last_ns) {
        r.count
    } else {
        spread(r).filter(|&t| range.contains(t)).count() as u64
    }
}

/// Counts of one group (or of the part of a group seen in one storm's windows).
#[derive(Clone, Debug, Default)]
struct GroupAcc {
    thrown: u64,
    rethrown: u64,
    caught: u64,
    uncaught: u64,
    catch_sites: HashMap<u64, u64>,
    search: u64,
    filters: u64,
    unwind: u64,
    finallies: u64,
    catches: u64,
    /// Interned stack -> count.
    stacks: HashMap<u32, u64>,
    uncaught_threads: BTreeSet<u32>,
}

impl GroupAcc {
    fn add(&mut self, x: &Pending, os_tid: u32, catcher: Option<u64>, no_stack: u32) {
        self.add_part(x, 1, 1, os_tid, catcher, no_stack);
    }

    /// Adds `k` of the `n` exceptions `x` stands for (its step counts are the sums over all `n`;
    /// `k` of them get their share).
    fn add_part(&mut self, x: &Pending, n: u64, k: u64, os_tid: u32, catcher: Option<u64>, no_stack: u32) {
        let part = |v: u64| if k == n { v } else { (v as u128 * k as u128 / n.max(1) as u128) as u64 };
        self.thrown += k;
        self.rethrown += part(x.rethrown);
        self.search += part(x.search);
        self.filters += part(x.filters);
        self.unwind += part(x.unwind);
        self.finallies += part(x.finallies);
        if x.stack != no_stack {
            *self.stacks.entry(x.stack).or_default() += k;
        }
        match catcher {
            Some(f) => {
                self.caught += k;
                self.catches += k;
                *self.catch_sites.entry(f).or_default() += k;
            }
            None => {
                self.uncaught += k;
                self.uncaught_threads.insert(os_tid);
            }
        }
    }

    /// Multiplies the counts by `k` (not the stacks, which are samples, nor the uncaught ones).
    fn scale(&mut self, k: f64) {
        let sc = |n: &mut u64| *n = (*n as f64 * k).round() as u64;
        for n in [
            &mut self.thrown,
            &mut self.rethrown,
            &mut self.caught,
            &mut self.search,
            &mut self.filters,
            &mut self.unwind,
            &mut self.finallies,
            &mut self.catches,
        ] {
            sc(n);
        }
        self.catch_sites.values_mut().for_each(sc);
    }

    /// Adds `k` × `counts`' counts, and `samples`' stacks and uncaught exceptions as they are
    /// (they are samples anyway).
    fn add_scaled(&mut self, counts: &GroupAcc, samples: Option<&GroupAcc>, k: f64) {
        let sc = |n: u64| (n as f64 * k).round() as u64;
        self.thrown += sc(counts.thrown);
        self.rethrown += sc(counts.rethrown);
        self.caught += sc(counts.caught);
        self.search += sc(counts.search);
        self.filters += sc(counts.filters);
        self.unwind += sc(counts.unwind);
        self.finallies += sc(counts.finallies);
        self.catches += sc(counts.catches);
        for (f, n) in &counts.catch_sites {
            *self.catch_sites.entry(*f).or_default() += sc(*n);
        }
        if let Some(o) = samples {
            self.uncaught += o.uncaught;
            for (st, n) in &o.stacks {
                *self.stacks.entry(*st).or_default() += n;
            }
            self.uncaught_threads.extend(&o.uncaught_threads);
        }
    }
}

/// Recent throws kept per group to carry its rate through a storm that ends the trace paused.
const RECENT_THROWS: usize = 256;

/// (type, throw site)
type GroupKey = (u32, u64);

/// The type of agent-counted exceptions whose `ExceptionType` was not read.
const UNKNOWN_TYPE: u32 = u32::MAX;

/// What `ExceptionFacts::finish` computes for a range.
pub(super) struct ExceptionResult {
    pub groups: Vec<ExceptionGroup>,
    pub sampling: ExceptionSampling,
    /// Throws observed at full detail (ts, os_tid), by time.
    pub throws: Vec<(u64, u32)>,
    /// Throws observed in a storm (sampling windows), by time: samples of `storms`.
    pub sampled_throws: Vec<(u64, u32)>,
    /// Storms clipped to the range: (from, to, estimated throws in that part).
    pub storms: Vec<(u64, u64, f64)>,
}

/// One storm: from a pause that follows full mode to the next return to full mode (or the end).
struct Storm {
    /// Index in the monitoring entries of its first entry.
    first: usize,
    start: u64,
    stop: u64,
    /// Time in sampling windows.
    window: u64,
}

/// The rate limit's modes over the run.
struct Monitor<'a> {
    /// `ExceptionMonitoring` changes (ts, mode), sorted.
    entries: &'a [(u64, u8)],
    /// For each entry, the index of the entry that began its storm (meaningful when the mode is
    /// not `FULL`).
    storm_of: Vec<usize>,
}

/// Key of the exceptions of one group seen in one storm: (storm's first entry, type, site).
type StormKey = (usize, u32, u64);

impl<'a> Monitor<'a> {
    fn new(entries: &'a [(u64, u8)]) -> Self {
        let mut storm_of = Vec::with_capacity(entries.len());
        let mut start = 0;
        for (i, &(_, mode)) in entries.iter().enumerate() {
            if mode == mon::FULL {
                start = i + 1;
            }
            storm_of.push(start);
        }
        Monitor { entries, storm_of }
    }

    /// The mode at `ts`, and the storm it belongs to (when not `FULL`).
    fn mode_at(&self, ts: u64) -> (u8, usize) {
        match self.entries.partition_point(|&(t, _)| t <= ts) {
            0 => (mon::FULL, 0),
            i => (self.entries[i - 1].1, self.storm_of[i - 1]),
        }
    }

    /// The storms of the run (`end`: when a storm still going on at the end stops), and the time
    /// paused and in windows within `range` into `sm` (with `sampled` and `first_pause_ns`).
    fn storms(&self, end: u64, range: TimeRange, sm: &mut ExceptionSampling) -> Vec<Storm> {
        let mut storms: Vec<Storm> = Vec::new();
        for (i, &(t, m)) in self.entries.iter().enumerate() {
            let next = self.entries.get(i + 1).map_or(end, |n| n.0).max(t);
            let len = next - t;
            match m {
                mon::PAUSED => sm.paused_ns += range.overlap(t, next),
                mon::WINDOW => sm.window_ns += range.overlap(t, next),
                _ => continue,
            }
            if !sm.sampled && touches(range, t, next) {
                sm.sampled = true;
                sm.first_pause_ns = t.max(range.from);
            }
            let window = if m == mon::WINDOW { len } else { 0 };
            match storms.last_mut() {
                Some(s) if s.first == self.storm_of[i] => {
                    s.stop = next;
                    s.window += window;
                }
                _ => storms.push(Storm { first: self.storm_of[i], start: t, stop: next, window }),
            }
        }
        storms
    }
}

/// The stretch `[a, b)` of the run touches `range` (an instant counts when inside it).
fn touches(range: TimeRange, a: u64, b: u64) -> bool {
    range.overlap(a, b) > 0 || (a == b && range.contains(a))
}

/// Exceptions counted for a range before and while the storms are folded in.
#[derive(Default)]
struct Tally {
    /// Full-mode exceptions thrown in the range.
    groups: HashMap<GroupKey, GroupAcc>,
    /// Full-mode exceptions of the whole run, and the latest of their throws (for the rate of a
    /// group before a storm that ends the trace).
    whole: HashMap<GroupKey, GroupAcc>,
    recent: HashMap<GroupKey, VecDeque<u64>>,
    /// Exceptions seen in a storm's windows: all, and those thrown in the range.
    in_storm: HashMap<StormKey, GroupAcc>,
    in_storm_range: HashMap<StormKey, GroupAcc>,
}

impl Tally {
    fn add(&mut self, x: &Pending, tid: u32, catcher: Option<u64>, mode: (u8, usize), inside: bool, no_stack: u32) {
        let key = (x.type_name, x.site);
        if mode.0 == mon::FULL {
            self.whole.entry(key).or_default().add(x, tid, catcher, no_stack);
            let r = self.recent.entry(key).or_default();
            if r.len() == RECENT_THROWS {
                r.pop_front();
            }
            r.push_back(x.ts);
            if inside {
                self.groups.entry(key).or_default().add(x, tid, catcher, no_stack);
            }
        } else {
            let k = (mode.1, x.type_name, x.site);
            self.in_storm.entry(k).or_default().add(x, tid, catcher, no_stack);
            if inside {
                self.in_storm_range.entry(k).or_default().add(x, tid, catcher, no_stack);
            }
        }
    }

    /// A row of `n` caught exceptions counted by the agent, `k` of them thrown in the range
    /// (`x.ts`: the first throw; `times`: all their throw times, ascending).
    #[allow(clippy::too_many_arguments)]
    fn add_row(
        &mut self,
        x: &Pending,
        (n, k): (u64, u64),
        tid: u32,
        catcher: u64,
        mode: (u8, usize),
        times: impl Iterator<Item = u64>,
        no_stack: u32,
    ) {
        let key = (x.type_name, x.site);
        if mode.0 == mon::FULL {
            self.whole.entry(key).or_default().add_part(x, n, n, tid, Some(catcher), no_stack);
            let r = self.recent.entry(key).or_default();
            for t in times.skip(n.saturating_sub(RECENT_THROWS as u64) as usize) {
                if r.len() == RECENT_THROWS {
                    r.pop_front();
                }
                r.push_back(t);
            }
            if k > 0 {
                self.groups.entry(key).or_default().add_part(x, n, k, tid, Some(catcher), no_stack);
            }
        } else {
            let key = (mode.1, x.type_name, x.site);
            self.in_storm.entry(key).or_default().add_part(x, n, n, tid, Some(catcher), no_stack);
            if k > 0 {
                self.in_storm_range.entry(key).or_default().add_part(x, n, k, tid, Some(catcher), no_stack);
            }
        }
    }

    /// Throws observed in the range per group.
    fn observed(&self) -> HashMap<GroupKey, u64> {
        let mut observed: HashMap<GroupKey, u64> = HashMap::new();
        for (k, g) in &self.groups {
            *observed.entry(*k).or_default() += g.thrown;
        }
        for ((_, t, site), g) in &self.in_storm_range {
            *observed.entry((*t, *site)).or_default() += g.thrown;
        }
        observed
    }

    /// Folds the storms into the groups: throws seen in a storm's windows stand for the whole
    /// storm, spread evenly over it, so the range gets its share of the storm's estimate. Returns
    /// the storms' estimates within the range: (from, to, throws).
    fn fold_storms(&mut self, storms: &[Storm], range: TimeRange) -> Vec<(u64, u64, f64)> {
        let mut spans: Vec<(u64, u64, f64)> = Vec::new();
        let mut storm_keys: Vec<&StormKey> = self.in_storm.keys().collect();
        storm_keys.sort_unstable();
        for s in storms.iter().filter(|s| touches(range, s.start, s.stop)) {
            let from = s.start.max(range.from);
            let to = s.stop.min(range.to).max(from);
            let part = to - from;
            if s.window > 0 {
                let k = part as f64 / s.window as f64;
                let mut count = 0.0;
                let at = storm_keys.partition_point(|k| k.0 < s.first);
                for key in storm_keys[at..].iter().take_while(|k| k.0 == s.first) {
                    let g = &self.in_storm[*key];
                    count += g.thrown as f64 * k;
                    let samples = self.in_storm_range.get(*key);
                    self.groups.entry((key.1, key.2)).or_default().add_scaled(g, samples, k);
                }
                spans.push((from, to, count));
            } else {
                // The trace ended before a window: carry each group's rate over the second before
                // the pause through the paused time.
                let mut keys: Vec<&GroupKey> = self.recent.keys().collect();
                keys.sort_unstable();
                for key in keys {
                    let latest: Vec<u64> = self.recent[key]
                        .iter()
                        .copied()
                        .filter(|&t| t <= s.start && t + 1_000_000_000 >= s.start)
                        .collect();
                    let Some(&first) = latest.first() else { continue };
                    let span = if latest.len() == RECENT_THROWS { s.start - first } else { 1_000_000_000 };
                    let rate = latest.len() as f64 / span.max(1) as f64;
                    let extra = rate * part as f64;
                    match self.groups.get_mut(key) {
                        Some(g) if g.thrown > 0 => g.scale(1.0 + extra / g.thrown as f64),
                        _ => {
                            // None of its throws in the range: the group's profile over the run.
                            let w = &self.whole[key];
                            let k = extra / w.thrown.max(1) as f64;
                            self.groups.entry(*key).or_default().add_scaled(w, None, k);
                        }
                    }
                    spans.push((from, to, extra));
                }
            }
        }
        // Throws observed in a storm with no window still count, as they are.
        let windowed: HashSet<usize> = storms.iter().filter(|s| s.window > 0).map(|s| s.first).collect();
        let mut rest: Vec<(&StormKey, &GroupAcc)> =
            self.in_storm_range.iter().filter(|(k, _)| !windowed.contains(&k.0)).collect();
        rest.sort_unstable_by_key(|(k, _)| **k);
        for (k, g) in rest {
            self.groups.entry((k.1, k.2)).or_default().add_scaled(g, Some(g), 1.0);
        }
        spans
    }
}

impl ExceptionFacts {
    pub fn thrown(&mut self, e: &ExceptionThrown) {
        self.throws.push((e.ts, e.os_tid));
        let type_name = self.types.id(e.type_name.as_str());
        let stack = self.stacks.id(e.stack.as_slice());
        self.active.entry(e.os_tid).or_default().push(Pending {
            ts: e.ts,
            type_name,
            site: e.stack.first().copied().unwrap_or(0),
            stack,
            rethrown: e.rethrow as u64,
            ..Default::default()
        });
    }

    pub fn phase(&mut self, x: &ExceptionPhase) {
        let Some(stack) = self.active.get_mut(&x.os_tid) else { return };
        let Some(top) = stack.last_mut() else { return };
        match x.phase {
            ph::SEARCH_ENTER => {
                if top.search == 0 && top.site == 0 {
                    top.site = x.function;
                }
                top.search += 1
            }
            ph::FILTER_ENTER => top.filters += 1,
            ph::UNWIND_ENTER => top.unwind += 1,
            ph::FINALLY_ENTER => top.finallies += 1,
            ph::CATCHER_ENTER => {
                if let Some(p) = stack.pop() {
                    self.caught.push(Caught { x: p, os_tid: x.os_tid, catcher: x.function });
                }
            }
            _ => {}
        }
    }

    pub fn caught(&mut self, x: &ExceptionCaught) {
        let Some(stack) = self.active.get_mut(&x.os_tid) else { return };
        if let Some(mut top) = stack.pop() {
            if top.site == 0 {
                top.site = x.site;
            }
            top.search += x.search_frames as u64;
            top.filters += x.filters as u64;
            top.unwind += x.unwind_frames as u64;
            top.finallies += x.finallies as u64;
            self.caught.push(Caught { x: top, os_tid: x.os_tid, catcher: x.function });
        }
    }

    pub fn type_def(&mut self, t: &ExceptionType) {
        let id = self.types.id(t.type_name.as_str());
        self.agent_types.insert(t.id, id);
    }

    pub fn stack_def(&mut self, s: &ExceptionStack) {
        let id = self.stacks.id(s.stack.as_slice());
        self.agent_stacks.insert(s.id, id);
    }

    /// Caught exceptions counted by the agent; a damaged packing is counted and skipped.
    pub fn counts(&mut self, c: &ExceptionCounts) {
        match c.unpack() {
            Ok(rows) => self.rows.extend(rows),
            Err(_) => self.damaged += 1,
        }
    }

    pub fn count(&mut self, c: &clrprof_trace::ExceptionCount) {
        let at = self.counts.partition_point(|&(t, _)| t <= c.ts);
        self.counts.insert(at, (c.ts, c.thrown.saturating_sub(c.rethrown)));
    }

    /// Throws in `range` by the runtime's count: the count at its end minus the count before it.
    fn runtime_total(&self, range: TimeRange) -> Option<u64> {
        if self.counts.is_empty() {
            return None;
        }
        let at = |t: u64| {
            let i = self.counts.partition_point(|&(ts, _)| ts <= t);
            i.checked_sub(1).map_or(0, |i| self.counts[i].1)
        };
        let before = range.from.checked_sub(1).map_or(0, at);
        Some(at(range.to).saturating_sub(before))
    }

    /// Drops the throws before `ts`, and the caught exceptions thrown before it when every
    /// exception was observed (no `ExceptionMonitoring` record): then a range's groups come from
    /// its own throws only. Under the rate limit a storm's estimate draws on the caught exceptions
    /// of the whole run, so those stay. The runtime's counts keep the last one before `ts` (a later
    /// range's total starts from it).
    pub fn forget_before(&mut self, ts: u64) {
        let first = self.counts.partition_point(|&(t, _)| t < ts);
        self.counts.drain(..first.saturating_sub(1));
        self.throws.retain(|t| t.0 >= ts);
        if self.monitor.is_empty() {
            self.caught.retain(|c| c.x.ts >= ts);
            self.rows.retain(|r| r.last_ns >= ts);
        }
    }

    pub fn retained(&self) -> usize {
        self.caught.len()
            + self.throws.len()
            + self.counts.len()
            + self.rows.len()
            + self.active.values().map(Vec::len).sum::<usize>()
    }

    pub fn monitoring(&mut self, m: &ExceptionMonitoring) {
        // Written by one thread in order; keep them sorted whatever happens.
        let at = self.monitor.partition_point(|&(t, _)| t <= m.ts);
        self.monitor.insert(at, (m.ts, m.mode));
    }

    /// The groups of the exceptions thrown inside `range`, with stacks interned into `costs`.
    /// `end`: the end of the run (a storm still going on at the end lasts until then).
    pub fn finish(
        &self,
        costs: &mut CostTree,
        name: &dyn Fn(u64) -> String,
        range: TimeRange,
        end: u64,
    ) -> ExceptionResult {
        let monitor = Monitor::new(&self.monitor);
        let no_stack = self.stacks.find(&[][..]).unwrap_or(u32::MAX);
        let (uncaught, unfollowed) = self.uncaught(range);
        let mut tally = Tally::default();
        let caught = self.caught.iter().map(|c| (&c.x, c.os_tid, Some(c.catcher)));
        for (x, tid, catcher) in caught.chain(uncaught.into_iter().map(|(x, tid)| (x, tid, None))) {
            tally.add(x, tid, catcher, monitor.mode_at(x.ts), range.contains(x.ts), no_stack);
        }
        let (mut throws, mut sampled_throws): (Vec<_>, Vec<_>) =
            self.throws.iter().filter(|t| range.contains(t.0)).partition(|t| monitor.mode_at(t.0).0 == mon::FULL);
        // Rows counted by the agent: each stands for its exceptions thrown evenly over its span.
        for r in &self.rows {
            let x = Pending {
                ts: r.first_ns,
                type_name: self.agent_types.get(&r.type_id).copied().unwrap_or(UNKNOWN_TYPE),
                site: r.site,
                stack: if r.stack == 0 {
                    no_stack
                } else {
                    self.agent_stacks.get(&r.stack).copied().unwrap_or(no_stack)
                },
                rethrown: r.rethrown,
                search: r.search_frames,
                filters: r.filters,
                unwind: r.unwind_frames,
                finallies: r.finallies,
            };
            let mode = monitor.mode_at(r.first_ns);
            let k = in_range(r, range);
            tally.add_row(&x, (r.count, k), r.os_tid, r.catcher, mode, spread(r), no_stack);
            if k > 0 {
                let to = if mode.0 == mon::FULL { &mut throws } else { &mut sampled_throws };
                to.extend(spread(r).filter(|&t| range.contains(t)).map(|t| (t, r.os_tid)));
            }
        }
        let observed = tally.observed();

        throws.sort_unstable();
        sampled_throws.sort_unstable();
        let mut sm = ExceptionSampling {
            observed: (throws.len() + sampled_throws.len()) as u64,
            unfollowed,
            ..Default::default()
        };
        let end = end.max(self.monitor.last().map_or(0, |m| m.0));
        let storms = monitor.storms(end, range, &mut sm);
        let spans = tally.fold_storms(&storms, range);
        let mut groups = tally.groups;
        groups.retain(|k, g| g.thrown > 0 || g.uncaught > 0 || observed.contains_key(k));
        sm.runtime_total = self.runtime_total(range);
        if let (true, Some(total)) = (sm.sampled, sm.runtime_total) {
            // The runtime counted every new exception (rethrows aside): the estimated groups share
            // what the exactly observed ones leave, in the proportions the windows gave them, and
            // their rethrows scale with them.
            let is_estimated = |k: &GroupKey, g: &GroupAcc| observed.get(k).copied().unwrap_or(0) != g.thrown;
            let new = |g: &GroupAcc| g.thrown - g.rethrown.min(g.thrown);
            let (mut exact, mut estimated) = (0u64, 0u64);
            for (k, g) in &groups {
                if is_estimated(k, g) {
                    estimated += new(g);
                } else {
                    exact += new(g);
                }
            }
            if estimated > 0 && total > exact {
                let k = (total - exact) as f64 / estimated as f64;
                // Each group's new exceptions, rounded so that they add up to the runtime's count.
                let mut keys: Vec<GroupKey> =
                    groups.iter().filter(|(key, g)| is_estimated(key, g)).map(|(key, _)| *key).collect();
                keys.sort_unstable();
                let want: Vec<f64> = keys.iter().map(|key| new(&groups[key]) as f64 * k).collect();
                let mut got: Vec<u64> = want.iter().map(|w| w.floor() as u64).collect();
                let mut order: Vec<usize> = (0..keys.len()).collect();
                order.sort_by(|&a, &b| {
                    (want[b] - want[b].floor()).total_cmp(&(want[a] - want[a].floor())).then(a.cmp(&b))
                });
                let short = (total - exact).saturating_sub(got.iter().sum());
                for &i in order.iter().cycle().take(short as usize) {
                    got[i] += 1;
                }
                for (key, target) in keys.iter().zip(got) {
                    let g = groups.get_mut(key).expect("key of groups");
                    let n = new(g);
                    let kg = if n > 0 { target as f64 / n as f64 } else { k };
                    let rethrown = (g.rethrown as f64 * kg).round() as u64;
                    g.scale(kg);
                    g.rethrown = rethrown;
                    g.thrown = target + rethrown;
                }
            }
        }
        sm.estimated_total = if sm.sampled { groups.values().map(|g| g.thrown).sum() } else { sm.observed };
        sm.rethrown = groups.values().map(|g| g.rethrown).sum();
        // Rows scaled to the runtime's count: the counters' storm estimates are scaled alike, so
        // that the throws observed at full detail plus the storms' share make the rows' total (and
        // the unfollowed ones, in no row). Without that count both come from the same windows.
        let mut spans = spans;
        let storm_sum: f64 = spans.iter().map(|s| s.2).sum();
        let target = (sm.estimated_total + sm.unfollowed) as f64 - throws.len() as f64;
        if sm.sampled && sm.runtime_total.is_some() && storm_sum > 0.0 && target > 0.0 {
            let f = target / storm_sum;
            for s in &mut spans {
                s.2 *= f;
            }
        }

        let mut keys: Vec<GroupKey> = groups.keys().copied().collect();
        keys.sort_unstable();
        let mut out: Vec<ExceptionGroup> = keys
            .into_iter()
            .map(|key| self.group(key, &groups[&key], observed.get(&key).copied().unwrap_or(0), costs, name))
            .collect();
        out.sort_by(|a, b| {
            b.thrown.cmp(&a.thrown).then(a.type_name.cmp(&b.type_name)).then(a.throw_site.cmp(&b.throw_site))
        });
        ExceptionResult { groups: out, sampling: sm, throws, sampled_throws, storms: spans }
    }

    /// Exceptions still in flight were never caught, unless the rate limit paused the callbacks
    /// after they were thrown, or while their throw's callback ran (its timestamp then lies after
    /// the pause's, before the callbacks came back): then their catch was not followed. Returns
    /// the uncaught ones (by thread) and the number of unfollowed ones thrown in `range`.
    fn uncaught(&self, range: TimeRange) -> (Vec<(&Pending, u32)>, u64) {
        let last_pause = self.monitor.iter().rposition(|m| m.1 == mon::PAUSED);
        // Callbacks not followed from `from` until `until` (None: the end of the trace).
        let not_followed = last_pause.map(|i| {
            let from = self.monitor[i].0;
            let until = self.monitor[i + 1..].iter().find(|m| m.1 != mon::PAUSED).map(|m| m.0);
            (from, until)
        });
        let mut left: Vec<(&u32, &Vec<Pending>)> = self.active.iter().collect();
        left.sort_by_key(|(t, _)| **t);
        let mut unfollowed = 0;
        let mut uncaught = Vec::new();
        for (&tid, stack) in left {
            for x in stack {
                if not_followed.is_some_and(|(from, until)| x.ts <= from || until.is_none_or(|u| x.ts < u)) {
                    // Its throw site and catch are unknown: counted apart, in no group.
                    unfollowed += range.contains(x.ts) as u64;
                } else {
                    uncaught.push((x, tid));
                }
            }
        }
        (uncaught, unfollowed)
    }

    /// The group's table row, its stacks interned into `costs`.
    fn group(
        &self,
        key: GroupKey,
        g: &GroupAcc,
        observed: u64,
        costs: &mut CostTree,
        name: &dyn Fn(u64) -> String,
    ) -> ExceptionGroup {
        let mut catch_sites: Vec<(String, u64)> = g.catch_sites.iter().map(|(f, n)| (name(*f), *n)).collect();
        catch_sites.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut walked: Vec<(&u32, &u64)> = g.stacks.iter().collect();
        walked.sort_unstable();
        let mut stacks: Vec<(StackId, u64)> = Vec::new();
        for (st, n) in walked {
            let ids: Vec<_> =
                self.stacks.get(*st).iter().rev().map(|&f| costs.stacks.intern_frame(FrameKey::Function(f))).collect();
            if let Some(s) = costs.stacks.intern_stack(&ids) {
                stacks.push((s, *n));
            }
        }
        stacks.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        ExceptionGroup {
            observed,
            estimated: observed != g.thrown,
            type_name: match key.0 {
                UNKNOWN_TYPE => "<unknown exception type>".to_string(),
                t => self.types.get(t).clone(),
            },
            throw_site: name(key.1),
            thrown: g.thrown,
            rethrown: g.rethrown,
            caught: g.caught,
            uncaught: g.uncaught,
            catch_sites,
            search_frames: g.search,
            filters: g.filters,
            unwind_frames: g.unwind,
            finallies: g.finallies,
            catches: g.catches,
            stacks,
            uncaught_threads: g.uncaught_threads.iter().copied().collect(),
        }
    }
}
