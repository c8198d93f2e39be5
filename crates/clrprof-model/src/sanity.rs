//! Plausibility checks at ingestion: a record claiming an impossible time or weight is damage (a
//! corrupted trace, a bit flipped in storage). It is clamped to the largest plausible value or
//! dropped, and counted; the profile's messages say how many and what. The bounds (docs/trace-format.md,
//! "Impossible values"):
//!
//! - a timestamp is at most [`MAX_TRACE_NS`] (2^55 ns, about 417 days after the agent started);
//!   samples, events and call-tree costs beyond it are dropped, table records (threads, modules,
//!   classes, functions, ...) kept with the latest plausible time;
//! - a thread's CPU time and its wall time, summed over its samples, are at most the time since the
//!   agent started (the sample's `ts`) plus [`SLACK_NS`]: one thread cannot run longer than the run;
//! - a call-tree cost (calls, time, suspended, profiler time), a JIT or load time is at most its
//!   record's `ts` plus [`SLACK_NS`]; an aggregated contention's longest wait at most its
//!   interval's end plus [`SLACK_NS`]; a single wait (which may have begun before an attach) at most
//!   [`MAX_TRACE_NS`];
//! - a byte or object count (heap sizes, allocations, exceptions, dropped events) is at most
//!   [`MAX_AMOUNT`] (2^50) per record.
//!
//! So every cost a view adds up is bounded by the run's length times its threads, and per-record
//! amounts by 2^50: sums stay far from `u64::MAX` for any plausible trace (and the views' sums
//! saturate besides).

use std::borrow::Cow;
use std::collections::BTreeMap;

use clrprof_trace::{CallTreeDelta, GcFinished, GcStarted, Record};

use crate::fasthash::FxHashMap;

/// The latest timestamp taken as possible: 2^55 ns, about 417 days after the agent started.
pub const MAX_TRACE_NS: u64 = 1 << 55;
/// Clock granularity and flush order allowed beyond a bound measured in elapsed time: 1 s.
pub const SLACK_NS: u64 = 1_000_000_000;
/// The largest byte or object count one record may carry: 2^50 (1 PiB).
pub const MAX_AMOUNT: u64 = 1 << 50;

/// The checks' state: per-thread CPU and wall time claimed so far, the latest plausible time, and
/// what was found.
#[derive(Default)]
pub(crate) struct Sanity {
    /// CPU and wall ns claimed so far per thread (`os_tid`), for threads not in `recent`.
    claimed: FxHashMap<u32, (u64, u64)>,
    /// A direct-mapped cache in front of `claimed` (by `os_tid` modulo its size): sample records
    /// come from few threads, and a map lookup per record was a fifth of a large trace's reading.
    recent: Vec<Option<(u32, (u64, u64))>>,
    latest: u64,
    start_unix_ns: Option<u64>,
    /// Damaged values found, by what they were.
    found: BTreeMap<&'static str, u64>,
}

impl Sanity {
    fn note(&mut self, what: &'static str) {
        *self.found.entry(what).or_default() += 1;
    }

    /// The CPU and wall ns claimed so far by thread `tid`.
    fn claimed(&mut self, tid: u32) -> &mut (u64, u64) {
        const RECENT: usize = 256;
        if self.recent.is_empty() {
            self.recent = vec![None; RECENT];
        }
        let i = tid as usize % RECENT;
        match self.recent[i] {
            Some((t, _)) if t == tid => {}
            old => {
                if let Some((t, c)) = old {
                    self.claimed.insert(t, c);
                }
                let c = self.claimed.remove(&tid).unwrap_or_default();
                self.recent[i] = Some((tid, c));
            }
        }
        match &mut self.recent[i] {
            Some((_, c)) => c,
            None => unreachable!("filled above"),
        }
    }

    /// The part of `ns` (CPU or wall time, chosen by `which`) that thread `tid` can still claim at
    /// `ts`: all it claims stays within its run so far (`ts` + [`SLACK_NS`]). The part is claimed.
    fn claim(&mut self, tid: u32, ts: u64, ns: u64, which: fn(&mut (u64, u64)) -> &mut u64) -> u64 {
        let budget = ts.saturating_add(SLACK_NS);
        let claimed = which(self.claimed(tid));
        let ns = ns.min(budget.saturating_sub(*claimed));
        *claimed = claimed.saturating_add(ns);
        ns
    }

    /// GC heap sizes clamped to [`MAX_AMOUNT`] (noted), or `None` when all are plausible.
    fn heap_sizes(&mut self, sizes: &[u64]) -> Option<Vec<u64>> {
        if sizes.iter().all(|&s| s <= MAX_AMOUNT) {
            return None;
        }
        self.note("heap sizes beyond 2^50 bytes (clamped)");
        Some(sizes.iter().map(|&s| s.min(MAX_AMOUNT)).collect())
    }

    /// Whether a timestamp is plausible (noted as `what` if not).
    fn ts_ok(&mut self, ts: u64, what: &'static str) -> bool {
        if ts > MAX_TRACE_NS {
            self.note(what);
            return false;
        }
        self.latest = self.latest.max(ts);
        true
    }

    /// `v` clamped to `max`, noting `what` when it was beyond.
    fn clamp(&mut self, v: &mut u64, max: u64, what: &'static str) -> bool {
        if *v > max {
            *v = max;
            self.note(what);
            return true;
        }
        false
    }

    /// The record to ingest: `r` itself, a clamped copy, or `None` (dropped as damage).
    pub fn check<'a>(&mut self, r: &'a Record) -> Option<Cow<'a, Record>> {
        use Record as R;
        // Table records: their time only places them; a damaged one takes the latest plausible time.
        let table_ts = match r {
            R::AgentStop(x) => Some(x.ts),
            R::Message(x) => Some(x.ts),
            R::AppDomainCreated(x) => Some(x.ts),
            R::AppDomainUnloaded(x) => Some(x.ts),
            R::AssemblyLoaded(x) => Some(x.ts),
            R::AssemblyUnloaded(x) => Some(x.ts),
            R::ModuleLoaded(x) => Some(x.ts),
            R::ModuleUnloaded(x) => Some(x.ts),
            R::ClassLoaded(x) => Some(x.ts),
            R::ClassUnloaded(x) => Some(x.ts),
            R::FunctionCompiled(x) => Some(x.ts),
            R::FunctionUnloaded(x) => Some(x.ts),
            R::ThreadCreated(x) => Some(x.ts),
            R::ThreadDestroyed(x) => Some(x.ts),
            R::ThreadOsId(x) => Some(x.ts),
            R::ThreadNamed(x) => Some(x.ts),
            R::SamplingStart(x) => Some(x.ts),
            R::TypeLoad(x) => Some(x.ts),
            R::NativeMapping(x) => Some(x.ts),
            _ => None,
        };
        if let Some(ts) = table_ts {
            let bad_ts = !self.ts_ok(ts, "times beyond 417 days (tables kept at the latest plausible time)");
            let bad_load = match r {
                R::FunctionCompiled(f) => f.jit_ns > f.ts.saturating_add(SLACK_NS),
                R::AssemblyLoaded(a) => a.load_ns > a.ts.saturating_add(SLACK_NS),
                R::ModuleLoaded(m) => m.load_ns > m.ts.saturating_add(SLACK_NS),
                _ => false,
            };
            if !bad_ts && !bad_load {
                return Some(Cow::Borrowed(r));
            }
            let latest = self.latest;
            let mut c = r.clone();
            if bad_load {
                self.note("JIT or load times longer than the run so far (clamped)");
            }
            if bad_ts {
                match &mut c {
                    R::AgentStop(x) => x.ts = latest,
                    R::Message(x) => x.ts = latest,
                    R::AppDomainCreated(x) => x.ts = latest,
                    R::AppDomainUnloaded(x) => x.ts = latest,
                    R::AssemblyLoaded(x) => x.ts = latest,
                    R::AssemblyUnloaded(x) => x.ts = latest,
                    R::ModuleLoaded(x) => x.ts = latest,
                    R::ModuleUnloaded(x) => x.ts = latest,
                    R::ClassLoaded(x) => x.ts = latest,
                    R::ClassUnloaded(x) => x.ts = latest,
                    R::FunctionCompiled(x) => x.ts = latest,
                    R::FunctionUnloaded(x) => x.ts = latest,
                    R::ThreadCreated(x) => x.ts = latest,
                    R::ThreadDestroyed(x) => x.ts = latest,
                    R::ThreadOsId(x) => x.ts = latest,
                    R::ThreadNamed(x) => x.ts = latest,
                    R::SamplingStart(x) => x.ts = latest,
                    R::TypeLoad(x) => x.ts = latest,
                    R::NativeMapping(x) => x.ts = latest,
                    _ => {}
                }
            }
            match &mut c {
                R::AssemblyLoaded(x) => x.load_ns = x.load_ns.min(x.ts.saturating_add(SLACK_NS)),
                R::ModuleLoaded(x) => x.load_ns = x.load_ns.min(x.ts.saturating_add(SLACK_NS)),
                R::FunctionCompiled(x) => x.jit_ns = x.jit_ns.min(x.ts.saturating_add(SLACK_NS)),
                _ => {}
            }
            return Some(Cow::Owned(c));
        }
        const DROPPED: &str = "samples, events or costs dated beyond 417 days (dropped)";
        match r {
            R::ProcessStart(s) => {
                self.start_unix_ns.get_or_insert(s.start_unix_ns);
                Some(Cow::Borrowed(r))
            }
            R::ProcessExit(e) => {
                let start = self.start_unix_ns.unwrap_or(0);
                if e.end_unix_ns >= start && e.end_unix_ns - start > MAX_TRACE_NS && start != 0 {
                    self.note("an exit time beyond 417 days (ignored: the run ends at its last record)");
                    let mut c = e.clone();
                    c.end_unix_ns = 0;
                    return Some(Cow::Owned(c.into()));
                }
                Some(Cow::Borrowed(r))
            }
            R::CpuSample(s) => {
                if !self.ts_ok(s.ts, DROPPED) {
                    return None;
                }
                let ns = self.claim(s.os_tid, s.ts, s.cpu_ns, |c| &mut c.0);
                if ns == s.cpu_ns {
                    return Some(Cow::Borrowed(r));
                }
                self.note("CPU samples claiming more CPU time than their thread's run so far (clamped)");
                let mut c = s.clone();
                c.cpu_ns = ns;
                Some(Cow::Owned(c.into()))
            }
            R::WallSample(s) => {
                if !self.ts_ok(s.ts, DROPPED) {
                    return None;
                }
                let ns = self.claim(s.os_tid, s.ts, s.wall_ns, |c| &mut c.1);
                if ns == s.wall_ns {
                    return Some(Cow::Borrowed(r));
                }
                self.note("wall samples claiming more time than their thread's run so far (clamped)");
                let mut c = s.clone();
                c.wall_ns = ns;
                Some(Cow::Owned(c.into()))
            }
            R::ContentionEnded(x) => {
                if !self.ts_ok(x.ts, DROPPED) {
                    return None;
                }
                // Not bounded by the run: a wait under attach may have begun before the agent came.
                if x.duration_ns <= MAX_TRACE_NS {
                    return Some(Cow::Borrowed(r));
                }
                let mut c = x.clone();
                self.clamp(&mut c.duration_ns, MAX_TRACE_NS, "waits longer than 417 days (clamped)");
                Some(Cow::Owned(c.into()))
            }
            R::ContentionCounts(x) => {
                if !self.ts_ok(x.ts, DROPPED) || x.interval_ns > MAX_TRACE_NS {
                    if x.ts <= MAX_TRACE_NS {
                        self.note(DROPPED);
                    }
                    return None;
                }
                let longest = x.ts.saturating_add(x.interval_ns).saturating_add(SLACK_NS);
                let bad = x.max_wait_ns.iter().any(|&w| w > longest)
                    || x.counts.iter().any(|&n| n > MAX_AMOUNT)
                    || x.unended.iter().any(|&n| n > MAX_AMOUNT)
                    || x.wait_ns.iter().enumerate().any(|(i, &w)| {
                        w > longest.saturating_mul(x.counts.get(i).copied().unwrap_or(0).min(MAX_AMOUNT))
                    });
                if !bad {
                    return Some(Cow::Borrowed(r));
                }
                self.note("contention counts with impossible waits or counts (clamped)");
                let mut c = x.clone();
                for n in c.counts.iter_mut().chain(c.unended.iter_mut()) {
                    *n = (*n).min(MAX_AMOUNT);
                }
                for w in &mut c.max_wait_ns {
                    *w = (*w).min(longest);
                }
                for (i, w) in c.wait_ns.iter_mut().enumerate() {
                    *w = (*w).min(longest.saturating_mul(c.counts.get(i).copied().unwrap_or(0)));
                }
                Some(Cow::Owned(c.into()))
            }
            R::ContentionStarted(x) => self.ts_ok(x.ts, DROPPED).then_some(Cow::Borrowed(r)),
            R::ExceptionThrown(x) => self.ts_ok(x.ts, DROPPED).then_some(Cow::Borrowed(r)),
            R::ExceptionPhase(x) => self.ts_ok(x.ts, DROPPED).then_some(Cow::Borrowed(r)),
            R::ExceptionCaught(x) => self.ts_ok(x.ts, DROPPED).then_some(Cow::Borrowed(r)),
            R::RuntimeSuspended(x) => self.ts_ok(x.ts, DROPPED).then_some(Cow::Borrowed(r)),
            R::RuntimeResumed(x) => self.ts_ok(x.ts, DROPPED).then_some(Cow::Borrowed(r)),
            R::GcInfo(x) => self.ts_ok(x.ts, DROPPED).then_some(Cow::Borrowed(r)),
            R::GcEnd(x) => self.ts_ok(x.ts, DROPPED).then_some(Cow::Borrowed(r)),
            R::TriggerFired(x) => self.ts_ok(x.ts, DROPPED).then_some(Cow::Borrowed(r)),
            R::TriggerEnded(x) => self.ts_ok(x.ts, DROPPED).then_some(Cow::Borrowed(r)),
            R::ExceptionMonitoring(x) => {
                if !self.ts_ok(x.ts, DROPPED) {
                    return None;
                }
                if x.observed <= MAX_AMOUNT {
                    return Some(Cow::Borrowed(r));
                }
                let mut c = x.clone();
                self.clamp(&mut c.observed, MAX_AMOUNT, "exception counts beyond 2^50 (clamped)");
                Some(Cow::Owned(c.into()))
            }
            R::ExceptionCount(x) => {
                if !self.ts_ok(x.ts, DROPPED) {
                    return None;
                }
                if x.thrown <= MAX_AMOUNT {
                    return Some(Cow::Borrowed(r));
                }
                let mut c = x.clone();
                self.clamp(&mut c.thrown, MAX_AMOUNT, "exception counts beyond 2^50 (clamped)");
                Some(Cow::Owned(c.into()))
            }
            R::GcStarted(x) => {
                if !self.ts_ok(x.ts, DROPPED) {
                    return None;
                }
                match self.heap_sizes(&x.sizes) {
                    None => Some(Cow::Borrowed(r)),
                    Some(sizes) => Some(Cow::Owned(GcStarted { sizes, ..x.clone() }.into())),
                }
            }
            R::GcFinished(x) => {
                if !self.ts_ok(x.ts, DROPPED) {
                    return None;
                }
                match self.heap_sizes(&x.sizes) {
                    None => Some(Cow::Borrowed(r)),
                    Some(sizes) => Some(Cow::Owned(GcFinished { sizes, ..x.clone() }.into())),
                }
            }
            R::AllocationCounts(x) => {
                if !self.ts_ok(x.ts, DROPPED) {
                    return None;
                }
                // An object takes at least one byte: no more objects than bytes.
                if x.bytes <= MAX_AMOUNT && x.count <= x.bytes {
                    return Some(Cow::Borrowed(r));
                }
                self.note("allocation counts beyond 2^50 bytes or with more objects than bytes (clamped)");
                let mut c = x.clone();
                c.bytes = c.bytes.min(MAX_AMOUNT);
                c.count = c.count.min(c.bytes);
                Some(Cow::Owned(c.into()))
            }
            R::AllocationSample(x) => {
                if !self.ts_ok(x.ts, DROPPED) {
                    return None;
                }
                if x.size <= MAX_AMOUNT && x.amount <= MAX_AMOUNT {
                    return Some(Cow::Borrowed(r));
                }
                self.note("allocation samples beyond 2^50 bytes (clamped)");
                let mut c = x.clone();
                c.size = c.size.min(MAX_AMOUNT);
                c.amount = c.amount.min(MAX_AMOUNT);
                Some(Cow::Owned(c.into()))
            }
            R::CallTreeDelta(d) => {
                if !self.ts_ok(d.ts, DROPPED) {
                    return None;
                }
                Some(match self.delta(d) {
                    Some(c) => Cow::Owned(c.into()),
                    None => Cow::Borrowed(r),
                })
            }
            R::CallTreeCosts(c) => self.ts_ok(c.ts, DROPPED).then_some(Cow::Borrowed(r)),
            R::FlowEvents(f) => {
                let n = f.kinds.len().min(f.functions.len()).min(f.ts.len());
                let bad_ts = f.ts.iter().take(n).any(|&t| t > MAX_TRACE_NS);
                if !bad_ts && f.dropped <= MAX_AMOUNT {
                    return Some(Cow::Borrowed(r));
                }
                let mut c = f.clone();
                if f.dropped > MAX_AMOUNT {
                    self.clamp(&mut c.dropped, MAX_AMOUNT, "flow event counts beyond 2^50 (clamped)");
                }
                if bad_ts {
                    self.note(DROPPED);
                    let keep: Vec<usize> = (0..n).filter(|&i| f.ts[i] <= MAX_TRACE_NS).collect();
                    c.kinds = keep.iter().map(|&i| f.kinds[i]).collect();
                    c.functions = keep.iter().map(|&i| f.functions[i]).collect();
                    c.ts = keep.iter().map(|&i| f.ts[i]).collect();
                }
                Some(Cow::Owned(c.into()))
            }
            _ => Some(Cow::Borrowed(r)),
        }
    }

    /// A call-tree delta's costs checked: `None` if plausible, else the clamped copy. Each node's
    /// calls and times since the previous delta are at most the time since the agent started.
    pub fn delta(&mut self, d: &CallTreeDelta) -> Option<CallTreeDelta> {
        let max = Self::delta_max(d.ts);
        let over = |v: &Vec<u64>| v.iter().any(|&x| x > max);
        if !(over(&d.calls) || over(&d.time_ns) || over(&d.suspended_ns) || over(&d.profiler_ns)) {
            return None;
        }
        self.delta_clamped();
        let mut c = d.clone();
        for v in [&mut c.calls, &mut c.time_ns, &mut c.suspended_ns, &mut c.profiler_ns] {
            v.iter_mut().for_each(|x| *x = (*x).min(max));
        }
        Some(c)
    }

    /// The most a call-tree delta published at `ts` may hold in one cost (see [`delta`](Self::delta)).
    pub fn delta_max(ts: u64) -> u64 {
        ts.saturating_add(SLACK_NS)
    }

    /// A packed call-tree delta had costs clamped to [`delta_max`](Self::delta_max) as it was summed.
    pub fn delta_clamped(&mut self) {
        self.note("call-tree costs beyond the run so far (clamped)");
    }

    /// One message per kind of damage found, for the profile's messages.
    pub fn messages(&self) -> impl Iterator<Item = String> + '_ {
        self.found.iter().map(|(what, n)| format!("damaged trace: {n} impossible values: {what}"))
    }
}
