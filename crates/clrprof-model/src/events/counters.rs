//! The runtime counters: a time series of GC, heap, allocation, exception, JIT, loading, thread
//! and contention figures, one row per interval.

use super::gc::gc_union;
use super::Gc;
use super::ProfileTables;
use crate::TimeRange;

/// One interval of the runtime counters.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct CounterRow {
    pub start_ns: u64,
    pub end_ns: u64,
    /// Collections started in the interval, by generation 0, 1, 2.
    pub gc_count: [u64; 3],
    /// Heap size per generation (gen0, gen1, gen2, LOH, POH) after the last GC so far.
    pub heap_bytes: Vec<u64>,
    /// Share of the interval spent inside at least one GC (start to finish; see
    /// [`time_in_gc`](super::time_in_gc)), 0..=100.
    pub time_in_gc_pct: f64,
    /// Bytes allocated per second (exact or estimated, see `RuntimeEvents::alloc_exact`).
    pub alloc_rate: f64,
    pub exceptions_per_sec: f64,
    /// Methods compiled in the interval (JIT and dynamic; precompiled code not counted).
    pub methods_jitted: u64,
    /// Assemblies loaded so far.
    pub assemblies_loaded: u64,
    /// Managed threads alive at the end of the interval.
    pub threads: u64,
    /// Monitor lock contentions that started in the interval.
    pub lock_contentions: u64,
}

/// The time-stamped facts the counters count (those of `gcs` are of the whole run, the others
/// already limited to the range).
pub(super) struct CounterFacts<'a> {
    pub gcs: &'a [Gc],
    /// Throws observed at full detail (ts, os_tid).
    pub throws: &'a [(u64, u32)],
    /// Storms' estimated throws spread over (from, to).
    pub storms: &'a [(u64, u64, f64)],
    /// (ts, os_tid, bytes)
    pub allocs: &'a [(u64, u32, u64)],
    /// Contention starts: (time, how many started then).
    pub contentions: &'a [(u64, u64)],
}

/// Rows of the counter series at most.
const MAX_ROWS: u64 = 100_000;

/// The counter time series over the profile's span within `range`, one row per interval (1 s,
/// or a tenth of a second for spans shorter than 10 s; whole seconds giving at most `MAX_ROWS`
/// rows for spans over about 28 hours), and the interval.
pub(super) fn counters(p: &ProfileTables<'_>, range: TimeRange, f: &CounterFacts) -> (Vec<CounterRow>, u64) {
    let (from, end) = p.span;
    let end = end.min(range.to);
    let from = from.max(range.from).min(end);
    let dur = (end - from).max(1);
    let interval = if dur >= 10_000_000_000 {
        // Whole seconds, and never more than MAX_ROWS rows (a span of days, or a damaged time).
        dur.div_ceil(MAX_ROWS).div_ceil(1_000_000_000).max(1) * 1_000_000_000
    } else {
        100_000_000
    };
    let n = dur.div_ceil(interval) as usize;
    let last = n - 1;
    let mut rows: Vec<CounterRow> = (0..n)
        .map(|i| CounterRow {
            // Saturating: a damaged trace's span may reach the end of u64.
            start_ns: from.saturating_add((i as u64).saturating_mul(interval)),
            end_ns: from.saturating_add((i as u64 + 1).saturating_mul(interval).min(dur)),
            heap_bytes: vec![0; 5],
            ..Default::default()
        })
        .collect();
    // The row of a time: events after the span's end (but inside the range) count in the last.
    let row = |ts: u64| ((ts.saturating_sub(from) / interval) as usize).min(last);
    let bucket = |ts: u64| (ts >= from && range.contains(ts)).then(|| row(ts));

    for g in f.gcs {
        if let Some(i) = bucket(g.start_ns) {
            rows[i].gc_count[(g.generation as usize).min(2)] += 1;
        }
    }
    // Time in GC: the union of the GCs' intervals (see `time_in_gc`), spread over the rows it
    // covers (the intervals are disjoint, so each row gets the union within it).
    for (a, b) in gc_union(f.gcs) {
        for r in &mut rows[row(a)..=row(b)] {
            r.time_in_gc_pct += TimeRange::new(r.start_ns, r.end_ns).overlap(a, b) as f64;
        }
    }

    // Heap after the last GC finished before each row's end; assemblies loaded and threads
    // alive by then: sorted times swept once.
    let mut finished: Vec<&Gc> = f.gcs.iter().filter(|g| g.finished).collect();
    finished.sort_by_key(|g| g.start_ns + g.duration_ns);
    let mut asm: Vec<u64> = p.assemblies.iter().map(|a| a.loaded_ns).collect();
    asm.sort_unstable();
    // A thread is alive at `e` when created before it and not destroyed before it.
    let mut created: Vec<u64> = p.threads.iter().filter_map(|t| t.created_ns).collect();
    created.sort_unstable();
    let mut gone: Vec<u64> = p.threads.iter().filter_map(|t| Some(t.created_ns?.max(t.destroyed_ns?))).collect();
    gone.sort_unstable();
    let (mut gi, mut ai, mut ci, mut di) = (0, 0, 0, 0);
    let mut heap = vec![0u64; 5];
    for r in rows.iter_mut() {
        while gi < finished.len() && finished[gi].start_ns + finished[gi].duration_ns < r.end_ns {
            heap = finished[gi].after.clone();
            gi += 1;
        }
        r.heap_bytes = heap.clone();
        r.heap_bytes.resize(5, 0);
        let len = (r.end_ns - r.start_ns).max(1) as f64;
        r.time_in_gc_pct = (r.time_in_gc_pct / len * 100.0).min(100.0);
        while ai < asm.len() && asm[ai] < r.end_ns {
            ai += 1;
        }
        r.assemblies_loaded = ai as u64;
        while ci < created.len() && created[ci] < r.end_ns {
            ci += 1;
        }
        while di < gone.len() && gone[di] < r.end_ns {
            di += 1;
        }
        r.threads = (ci - di) as u64;
    }

    for &(t, _) in f.throws {
        if let Some(i) = bucket(t) {
            rows[i].exceptions_per_sec += 1.0;
        }
    }
    for &(a, b, count) in f.storms {
        let len = b.saturating_sub(a).max(1) as f64;
        for r in &mut rows[row(a)..=row(b)] {
            let ov = b.min(r.end_ns).saturating_sub(a.max(r.start_ns));
            r.exceptions_per_sec += count * ov as f64 / len;
        }
    }
    for &(t, n) in f.contentions {
        if let Some(i) = bucket(t) {
            rows[i].lock_contentions += n;
        }
    }
    for &(t, _, b) in f.allocs {
        if let Some(i) = bucket(t) {
            rows[i].alloc_rate += b as f64;
        }
    }
    for func in p.functions {
        if func.kind != clrprof_trace::code_kind::PRECOMPILED
            && func.kind != clrprof_trace::code_kind::EXISTING
            && func.first_compiled_ns > 0
        {
            if let Some(i) = bucket(func.first_compiled_ns) {
                rows[i].methods_jitted += 1;
            }
        }
    }
    for r in rows.iter_mut() {
        let secs = (r.end_ns - r.start_ns).max(1) as f64 / 1e9;
        r.exceptions_per_sec /= secs;
        r.alloc_rate /= secs;
    }
    (rows, interval)
}
