//! Sampled stacks resolved into the profile: the frames of each stack definition named off the
//! profiled process (managed IPs through the code ranges of `FunctionCompiled` records
//! ([`CodeMap`]), native IPs through the process's executable mappings and the ELF symbols a
//! [`NativeSymbols`] provider reads, the rest into an `UNKNOWN` bucket), the runtime's and the
//! profiler's own time labelled, and the stacks interned in the canonical `CostTree`.

use std::collections::HashMap;

use crate::codemap::CodeMap;
use crate::fasthash::FxHashMap;
use crate::lines::LineContext;
use crate::profile::Profile;
use crate::runtime::FrameClass;
use crate::samples::{cut_label, sum_costs, Mapping, NativeSymbols, SampleData, SampleEvent, TimedSample};
use crate::samples::{NOT_WALKABLE, UNKNOWN};
use crate::stacks::{FrameId, FrameKey};
use crate::time::TimeRange;

impl SampleData {
    /// Adds the samples inside `range` to `p.costs` and `p.samples`, and fills `p.sampling`
    /// (sample counts and times of the window; the sampler's counters of the whole run).
    pub fn resolve(&self, p: &mut Profile, symbols: &mut dyn NativeSymbols, range: TimeRange) {
        self.resolve_with(p, symbols, range, None, true)
    }

    /// [`resolve`](Self::resolve) over `owned` (records taken with [`take_events`](Self::take_events))
    /// or, when `None`, over the records kept here; `with_samples` false leaves `p.samples` empty (the
    /// costs and totals are the same).
    pub(crate) fn resolve_with(
        &self,
        p: &mut Profile,
        symbols: &mut dyn NativeSymbols,
        range: TimeRange,
        owned: Option<Vec<SampleEvent>>,
        with_samples: bool,
    ) {
        let events: &[SampleEvent] = owned.as_deref().unwrap_or(&self.events);
        let code = CodeMap::from_functions_and(&p.functions, &self.code);
        let mut mappings = self.mappings.clone();
        mappings.sort_by_key(|m| (m.start, m.end));
        // Source lines of managed frames, when the provider asks for them (`crate::lines`).
        let lines = symbols.lines().then(|| LineContext::new(&self.il_maps, &p.functions, &p.modules));
        if lines.is_some() && self.il_maps.is_empty() && !events.is_empty() {
            // Every line figure would then sit on methods' first lines: the reader must know.
            p.messages.push(
                "this trace has no IL-to-native maps (written before clrprof recorded them): each method's \
                 samples are on its first line"
                    .into(),
            );
        }
        let mut resolver = Resolver { code: &code, mappings: &mappings, symbols, cache: FxHashMap::default(), lines };
        let activity_names =
            crate::runtime::ActivityNames::of(&p.functions, &p.assemblies, &p.modules, &self.type_loads);
        // Costs per (thread, stack definition), in that order: stacks are interned in the same
        // order whatever order the records came in.
        let checkpointed = if owned.is_none() { self.checkpointed_costs(range) } else { None };
        let (costs, totals) = checkpointed.unwrap_or_else(|| sum_costs(events, self.blocks(), range, self.defs.len()));
        let mut summary = self.summary.clone();
        let [cpu_samples, cpu_ns, wall_samples, wall_ns] = totals;
        summary.cpu_samples = cpu_samples;
        summary.cpu_ns = cpu_ns;
        summary.wall_samples = wall_samples;
        summary.wall_ns = wall_ns;
        // Stacks of the CPU sampler's frame-pointer walk (the ones `max_frames` limits): those CPU
        // samples refer to. Wall samples refer to the runtime's walks (`max_walk_frames`) or reuse
        // a CPU stack, which a CPU sample then refers to as well.
        // (Every definition CPU samples ever used, also those of forgotten samples.)
        let cpu_defs = &self.cpu_defs;
        let cpu_def = |d: usize| cpu_defs.get(d).copied().unwrap_or(false);
        // The interned stack of each definition a sample in the window refers to (outer `None`:
        // not resolved yet).
        let mut stack_of: Vec<Option<Option<crate::stacks::StackId>>> = vec![None; self.defs.len()];
        // (IP, a return address, FunctionID) → (frame, class, unnamed, in the JIT's library).
        type Resolved = (FrameId, FrameClass, bool, bool, bool);
        let mut frame_memo: FxHashMap<(u64, bool, u64), Resolved> = FxHashMap::default();
        let mut addresses = HashMap::new();
        for (tid, def, cost) in costs {
            // Records that carry nothing add nothing (a range summed from checkpoints leaves
            // them out as well).
            if cost.is_zero() {
                continue;
            }
            let def = def as usize;
            let s = *stack_of[def].get_or_insert_with(|| {
                let (ips, fns, activity) = &self.defs[def];
                let mut frames: Vec<FrameId> = Vec::with_capacity(ips.len().max(1));
                let mut classes: Vec<FrameClass> = Vec::with_capacity(ips.len());
                // Whether the leaf's non-managed run has frames in the JIT's library.
                let mut jit = false;
                // The outermost frame in the profiler's own library (position in `frames`).
                let mut agent_at = None;
                for (i, &ip) in ips.iter().enumerate() {
                    let function = fns.get(i).copied().unwrap_or(0);
                    // Stacks share most of their frames: each (IP, position, function) is
                    // resolved and interned once per profile.
                    let (f, class, unnamed, jit_library, agent) =
                        *frame_memo.entry((ip, i > 0, function)).or_insert_with(|| {
                            let (key, addr) = resolver.frame(ip, i > 0, function);
                            // Runs of unnamed code of one module (stripped libraries) collapse into
                            // one frame: they cannot be told apart anyway.
                            let unnamed = matches!(&key, FrameKey::Native { symbol, .. } if symbol.is_empty());
                            let mut jit_library = false;
                            let mut agent = false;
                            let class = match &key {
                                FrameKey::Function(_) => FrameClass::Managed,
                                FrameKey::Native { module, symbol } => {
                                    let runtime = crate::runtime::is_runtime_library(module);
                                    jit_library = module == crate::runtime::JIT_LIBRARY;
                                    agent = crate::runtime::is_profiler_library(module);
                                    if symbol.is_empty() {
                                        FrameClass::Unnamed { runtime }
                                    } else {
                                        FrameClass::Named { runtime }
                                    }
                                }
                                FrameKey::Label(_) if ip == 0 => FrameClass::NoIp,
                                FrameKey::Label(_) => FrameClass::Unmapped,
                            };
                            let line = resolver.line(&key, ip, i > 0);
                            let f = p.costs.stacks.intern_frame_at(key, line);
                            if agent {
                                // The profiler's own code counts as `[profiler]` in the module
                                // tables too.
                                p.costs.stacks.frames[f.0 as usize].module = crate::runtime::PROFILER.to_string();
                            }
                            if let Some(a) = addr {
                                addresses.entry(f).or_insert(a);
                            }
                            (f, class, unnamed, jit_library, agent)
                        });
                    jit |= jit_library && classes.iter().all(|c| *c != FrameClass::Managed);
                    if unnamed && frames.last() == Some(&f) {
                        continue;
                    }
                    if agent {
                        agent_at = Some(frames.len());
                    }
                    frames.push(f);
                    classes.push(class);
                }
                // The profiler's own time (its callbacks, its sampler thread) is put apart: the
                // frames from its outermost one down to the leaf go under one root frame
                // `[profiler]`, so that no function of the application includes it.
                if let Some(at) = agent_at {
                    frames.truncate(at + 1);
                    let pf = p.costs.stacks.intern_frame(FrameKey::Label(crate::runtime::PROFILER.to_string()));
                    p.costs.stacks.frames[pf.0 as usize].module = crate::runtime::PROFILER.to_string();
                    frames.push(pf);
                    frames.reverse();
                    return p.costs.stacks.intern_stack(&frames);
                }
                // The runtime's own code named by what the thread was doing (`crate::runtime`).
                let label = activity_names.label(*activity);
                if let Some(keep) = crate::runtime::attribute(&classes, label.is_some()) {
                    let label = label.unwrap_or_else(|| crate::runtime::fallback_label(&classes, jit).to_string());
                    let lf = p.costs.stacks.intern_frame(FrameKey::Label(label));
                    p.costs.stacks.frames[lf.0 as usize].module = crate::runtime::RUNTIME_MODULE.to_string();
                    frames = keep.into_iter().map(|k| k.map_or(lf, |i| frames[i])).collect();
                }
                // Cut at its walk's limit: say so at the root rather than pass the innermost
                // frames off as the whole stack.
                let limit = if cpu_def(def) { self.max_frames } else { self.max_walk_frames };
                if limit > 0 && ips.len() >= limit as usize {
                    frames.push(p.costs.stacks.intern_frame(FrameKey::Label(cut_label(limit))));
                }
                if frames.is_empty() {
                    // A wall sample of a thread the runtime could not walk (no managed frames yet,
                    // or a failed walk).
                    frames.push(p.costs.stacks.intern_frame(FrameKey::Label(NOT_WALKABLE.into())));
                }
                frames.reverse();
                p.costs.stacks.intern_stack(&frames)
            });
            if let Some(s) = s {
                p.costs.add(tid, s, &cost);
            }
        }
        let timed = |e: &SampleEvent| -> Option<TimedSample> {
            let stack = stack_of[e.def as usize].flatten()?;
            Some(TimedSample {
                ts: e.ts,
                os_tid: e.os_tid,
                stack,
                weight: e.weight,
                count: e.count,
                ns: e.ns,
                flow: e.flow,
            })
        };
        p.sample_activities = self.flows.clone();
        p.samples = match owned {
            _ if !with_samples => Vec::new(),
            // Same size as a `SampleEvent`: collected in place, in the records' memory.
            Some(v) => v.into_iter().filter(|e| range.contains(e.ts)).filter_map(|e| timed(&e)).collect(),
            None => self.events.iter().filter(|e| range.contains(e.ts)).filter_map(timed).collect(),
        };
        // Samples arrive in time order in most traces: a stable sort would still take a scratch
        // buffer of half their size.
        if !p.samples.is_sorted_by_key(|s| (s.ts, s.os_tid)) {
            p.samples.sort_by_key(|s| (s.ts, s.os_tid));
        }
        for f in p.functions.iter() {
            if let Some(id) = p.costs.stacks.find_frame(&FrameKey::Function(f.id)) {
                addresses.insert(id, f.code_start);
            }
        }
        if resolver.lines.is_some() {
            let starts: FxHashMap<u64, u64> = p.functions.iter().map(|f| (f.id, f.code_start)).collect();
            for (i, fr) in p.costs.stacks.frames.iter().enumerate() {
                if let (FrameKey::Function(id), Some(_)) = (&fr.key, &fr.line) {
                    if let Some(&a) = starts.get(id) {
                        addresses.insert(FrameId(i as u32), a);
                    }
                }
            }
        }
        summary.addresses = addresses;
        summary.mappings = mappings;
        p.sampling = summary;
        p.messages.extend(symbols.diagnostics());
    }
}

struct Resolver<'a> {
    code: &'a CodeMap,
    mappings: &'a [Mapping],
    symbols: &'a mut dyn NativeSymbols,
    cache: FxHashMap<(usize, u64), Option<(String, u64)>>,
    lines: Option<LineContext<'a>>,
}

impl Resolver<'_> {
    /// The source line of a managed frame in a profile built with lines.
    fn line(&mut self, key: &FrameKey, ip: u64, is_return: bool) -> Option<crate::lines::SourceLine> {
        match (key, &self.lines) {
            (FrameKey::Function(id), Some(l)) => l.line(self.symbols, *id, ip, is_return),
            _ => None,
        }
    }

    /// The frame of one IP (`is_return`: a return address, looked up one byte earlier so the call
    /// site's routine is named), with the routine's start address when known.
    fn frame(&mut self, ip: u64, is_return: bool, function: u64) -> (FrameKey, Option<u64>) {
        if function != 0 {
            return (FrameKey::Function(function), None);
        }
        if ip == 0 {
            return (FrameKey::Label(UNKNOWN.into()), None);
        }
        let at = if is_return { ip - 1 } else { ip };
        if let Some(id) = self.code.lookup(at) {
            return (FrameKey::Function(id), None);
        }
        let i = self.mappings.partition_point(|m| m.start <= at);
        if i > 0 {
            let mi = i - 1;
            let m = &self.mappings[mi];
            if at < m.end {
                let off = at - m.start + m.file_offset;
                let module = m.path.rsplit('/').next().unwrap_or(&m.path).to_string();
                let sym = self
                    .cache
                    .entry((mi, off))
                    .or_insert_with(|| self.symbols.symbol(&m.path, &m.build_id, off))
                    .clone();
                return match sym {
                    Some((name, sym_off)) => {
                        let addr = at - (off - sym_off.min(off));
                        (FrameKey::Native { module, symbol: name }, Some(addr))
                    }
                    None => (FrameKey::Native { module, symbol: String::new() }, None),
                };
            }
        }
        (FrameKey::Label(UNKNOWN.into()), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples::{NoSymbols, SampleTime, DENSE_IDS};
    use crate::stacks::{Cost, StackId};
    use crate::ProfileBuilder;
    use clrprof_trace::*;

    /// Per frame with a cost: (frame, self, inclusive), recursion counted once (the figures the
    /// query engine computes, here to check what the samples resolved to).
    struct FrameRow {
        frame: FrameId,
        self_cost: Cost,
        inclusive: Cost,
    }

    fn frame_rows(p: &Profile) -> Vec<FrameRow> {
        let merged = p.costs.merged(None);
        let mut rows: Vec<FrameRow> = (0..p.costs.stacks.frames.len())
            .map(|f| FrameRow { frame: FrameId(f as u32), self_cost: Cost::default(), inclusive: Cost::default() })
            .collect();
        for (i, c) in merged.iter().enumerate() {
            let frames = p.costs.stacks.frames_of(crate::StackId(i as u32));
            if let Some(leaf) = frames.last() {
                rows[leaf.0 as usize].self_cost.add(c);
            }
            let mut seen: Vec<FrameId> = Vec::new();
            for f in frames {
                if !seen.contains(&f) {
                    seen.push(f);
                    rows[f.0 as usize].inclusive.add(c);
                }
            }
        }
        rows.retain(|r| !r.inclusive.is_zero());
        rows
    }

    struct Fake;
    impl NativeSymbols for Fake {
        fn symbol(&mut self, path: &str, build_id: &[u8], off: u64) -> Option<(String, u64)> {
            assert_eq!(build_id, [0xab, 0xcd], "the recorded build-id is passed on");
            (path.ends_with("libz.so.1") && (0x3400..0x3500).contains(&off)).then(|| ("adler32_z".into(), 0x3400))
        }
        fn diagnostics(&mut self) -> Vec<String> {
            vec!["libz.so.1: a note".into()]
        }
    }

    #[test]
    fn samples_resolve_to_managed_native_and_unknown_frames() {
        let recs: Vec<Record> = vec![
            ProcessStart { pid: 1, ..Default::default() }.into(),
            SamplingStart { ts: 0, cpu_rate_hz: 100, wall_rate_hz: 100, max_frames: 128, max_walk_frames: 256 }.into(),
            FunctionCompiled {
                ts: 1,
                id: 10,
                name: "App.Main".into(),
                code_start: 0x1000,
                code_size: 0x100,
                ..Default::default()
            }
            .into(),
            FunctionCompiled {
                ts: 1,
                id: 11,
                name: "App.Work".into(),
                code_start: 0x2000,
                code_size: 0x100,
                ..Default::default()
            }
            .into(),
            NativeMapping {
                ts: 0,
                start: 0x7000_0000,
                end: 0x7001_0000,
                file_offset: 0x3000,
                path: "/lib/libz.so.1".into(),
                build_id: vec![0xab, 0xcd],
            }
            .into(),
            // leaf adler32_z ← App.Work ← App.Main (return addresses point after the calls)
            SampleStack { id: 1, ips: vec![0x7000_0410, 0x2010, 0x1020], functions: vec![], activity: 0 }.into(),
            SampleStack { id: 2, ips: vec![0x2050, 0x1020], functions: vec![], activity: 0 }.into(),
            SampleStack { id: 3, ips: vec![0xdead_0000, 0x1001], functions: vec![], activity: 0 }.into(),
            // a walked stack: FunctionIDs given
            SampleStack { id: 4, ips: vec![0, 0x1030], functions: vec![0, 10], activity: 0 }.into(),
            CpuSample { ts: 5, os_tid: 7, stack: 1, count: 3, cpu_ns: 30, activity: 0 }.into(),
            CpuSample { ts: 5, os_tid: 7, stack: 2, count: 1, cpu_ns: 10, activity: 0 }.into(),
            CpuSample { ts: 5, os_tid: 8, stack: 3, count: 2, cpu_ns: 20, activity: 0 }.into(),
            WallSample { ts: 6, os_tid: 8, stack: 4, count: 5, wall_ns: 50 }.into(),
        ];
        let mut b = ProfileBuilder::new();
        for r in &recs {
            b.add(r);
        }
        let p = b.finish_with(&mut Fake);
        assert_eq!(p.sampling.cpu_samples, 6);
        assert_eq!(p.sampling.cpu_ns, 60);
        assert_eq!(p.sampling.wall_samples, 5);
        let rows = frame_rows(&p);
        let by_name = |n: &str| {
            rows.iter().find(|r| p.costs.stacks.frames[r.frame.0 as usize].name == n).unwrap_or_else(|| panic!("{n}"))
        };
        assert_eq!(by_name("libz.so.1!adler32_z").self_cost.cpu_samples, 3);
        assert_eq!(by_name("App.Work").self_cost.cpu_samples, 1);
        assert_eq!(by_name("App.Work").inclusive.cpu_samples, 4);
        assert_eq!(by_name("App.Main").inclusive.cpu_ns, 60);
        assert_eq!(by_name("[stub]").self_cost.cpu_samples, 2, "an IP in no code range or mapping");
        assert_eq!(by_name("[stub]").inclusive.cpu_samples, 2);
        assert_eq!(by_name("UNKNOWN").self_cost.wall_samples, 5, "the native run of a walk");
        assert_eq!(by_name("App.Main").inclusive.wall_ns, 50);
        let f = rows.iter().find(|r| p.costs.stacks.frames[r.frame.0 as usize].name == "libz.so.1!adler32_z").unwrap();
        assert_eq!(p.sampling.addresses.get(&f.frame), Some(&0x7000_0400));
        assert_eq!(p.messages.iter().filter(|m| *m == "libz.so.1: a note").count(), 1, "{:?}", p.messages);
        // Without symbols the module is still named.
        let mut b = ProfileBuilder::new();
        for r in &recs {
            b.add(r);
        }
        let p = b.finish();
        assert!(p.costs.stacks.frames.iter().any(|f| f.name == "libz.so.1!<unknown>"));
    }

    #[test]
    fn a_consumed_builder_gives_the_same_profile_as_a_kept_one() {
        let big = DENSE_IDS as u32 + 7;
        let recs: Vec<Record> = vec![
            ProcessStart { pid: 1, ..Default::default() }.into(),
            SamplingStart { ts: 0, cpu_rate_hz: 100, wall_rate_hz: 100, max_frames: 64, max_walk_frames: 64 }.into(),
            FunctionCompiled { ts: 1, id: 10, name: "App.A".into(), ..Default::default() }.into(),
            FunctionCompiled { ts: 1, id: 11, name: "App.B".into(), ..Default::default() }.into(),
            SampleStack { id: 0, ips: vec![1, 2], functions: vec![10, 11], activity: 0 }.into(),
            SampleStack { id: big, ips: vec![1], functions: vec![11], activity: 0 }.into(),
            // Out of time order, two threads, an id past the table, an undefined id.
            CpuSample { ts: 30, os_tid: 8, stack: 0, count: 2, cpu_ns: 20, activity: 0 }.into(),
            CpuSample { ts: 10, os_tid: 7, stack: big, count: 1, cpu_ns: 10, activity: 0 }.into(),
            WallSample { ts: 20, os_tid: 7, stack: 0, count: 3, wall_ns: 30 }.into(),
            WallSample { ts: 20, os_tid: 5, stack: 99, count: 1, wall_ns: 10 }.into(),
            // Id 0 redefined: later samples refer to the new stack.
            SampleStack { id: 0, ips: vec![1], functions: vec![10], activity: 0 }.into(),
            CpuSample { ts: 40, os_tid: 7, stack: 0, count: 5, cpu_ns: 50, activity: 0 }.into(),
            CpuSample { ts: 25, os_tid: 8, stack: big, count: 1, cpu_ns: 10, activity: 0 }.into(),
        ];
        for range in [TimeRange::ALL, TimeRange::new(15, 35)] {
            let mut kept = ProfileBuilder::new();
            let mut consumed = ProfileBuilder::new();
            for r in &recs {
                kept.add(r);
                consumed.add(r);
            }
            let a = kept.profile(range, &mut NoSymbols);
            let b = consumed.into_profile(range, &mut NoSymbols);
            assert_eq!(a.samples, b.samples);
            // The same stacks and costs per thread (the maps compared in a fixed order).
            assert_eq!(format!("{:?}", a.costs.stacks.frames), format!("{:?}", b.costs.stacks.frames));
            assert_eq!(format!("{:?}", a.costs.stacks.nodes), format!("{:?}", b.costs.stacks.nodes));
            let per_thread = |p: &Profile| -> Vec<(u32, Vec<(StackId, Cost)>)> {
                let mut v: Vec<_> = p
                    .costs
                    .threads
                    .iter()
                    .map(|t| {
                        let mut c: Vec<_> = t.costs.iter().collect();
                        c.sort_by_key(|(s, _)| *s);
                        (t.os_tid, c)
                    })
                    .collect();
                v.sort_by_key(|(t, _)| *t);
                v
            };
            assert_eq!(format!("{:?}", per_thread(&a)), format!("{:?}", per_thread(&b)));
            assert!(!per_thread(&a).is_empty());
            assert_eq!(a.sampling, b.sampling);
            assert!(a.samples.is_sorted_by_key(|s| (s.ts, s.os_tid)));
            let n = if range.is_all() { 6 } else { 4 };
            assert_eq!(a.samples.len(), n, "every sample record of the window, {range:?}");
            // Without the timed samples: the same profile otherwise, and `each_sample` yields them
            // (in trace order: compared sorted as the profile's are).
            let u = kept.profile_untimed(range, &mut NoSymbols);
            assert!(u.samples.is_empty());
            assert_eq!(format!("{:?}", u.costs.stacks.nodes), format!("{:?}", a.costs.stacks.nodes));
            assert_eq!(format!("{:?}", per_thread(&u)), format!("{:?}", per_thread(&a)));
            assert_eq!(u.sampling, a.sampling);
            let mut each = Vec::new();
            kept.each_sample(range, None, |s| each.push(s));
            each.sort_by_key(|s| (s.ts, s.os_tid));
            let want: Vec<SampleTime> = a.samples.iter().map(SampleTime::from).collect();
            assert_eq!(each, want, "{range:?}");
        }
    }

    #[test]
    fn a_stack_cut_at_the_sampler_limit_is_marked_at_its_root() {
        let recs: Vec<Record> = vec![
            ProcessStart { pid: 1, ..Default::default() }.into(),
            SamplingStart { ts: 0, cpu_rate_hz: 100, wall_rate_hz: 100, max_frames: 3, max_walk_frames: 5 }.into(),
            FunctionCompiled { ts: 1, id: 10, name: "App.Rec".into(), ..Default::default() }.into(),
            SampleStack { id: 1, ips: vec![1, 2, 3], functions: vec![10, 10, 10], activity: 0 }.into(),
            SampleStack { id: 2, ips: vec![1, 2], functions: vec![10, 10], activity: 0 }.into(),
            CpuSample { ts: 5, os_tid: 7, stack: 1, count: 4, cpu_ns: 40, activity: 0 }.into(),
            CpuSample { ts: 5, os_tid: 7, stack: 2, count: 1, cpu_ns: 10, activity: 0 }.into(),
            // The runtime's walk (wall samples) has a deeper limit of its own: not cut at 3 frames,
            // cut at 5.
            SampleStack { id: 3, ips: vec![1, 2, 3, 4], functions: vec![10, 10, 10, 10], activity: 0 }.into(),
            WallSample { ts: 6, os_tid: 7, stack: 3, count: 2, wall_ns: 20 }.into(),
            SampleStack { id: 4, ips: vec![1, 2, 3, 4, 5], functions: vec![10; 5], activity: 0 }.into(),
            WallSample { ts: 6, os_tid: 7, stack: 4, count: 3, wall_ns: 30 }.into(),
            // A wall sample that reuses the cut CPU stack is cut too.
            WallSample { ts: 7, os_tid: 7, stack: 1, count: 1, wall_ns: 10 }.into(),
        ];
        let mut b = ProfileBuilder::new();
        for r in &recs {
            b.add(r);
        }
        let p = b.finish();
        let rows = frame_rows(&p);
        let cut = rows
            .iter()
            .find(|r| p.costs.stacks.frames[r.frame.0 as usize].name == cut_label(3))
            .expect("the cut stack has the label at its root");
        assert_eq!(cut.inclusive.cpu_samples, 4, "only the CPU stack as deep as the limit");
        assert_eq!(cut.self_cost.cpu_samples, 0);
        assert_eq!(cut.inclusive.wall_samples, 1, "the wall sample on the cut CPU stack, not the walked one");
        let walk_cut = rows
            .iter()
            .find(|r| p.costs.stacks.frames[r.frame.0 as usize].name == cut_label(5))
            .expect("the walked stack as deep as the walk's limit is marked");
        assert_eq!(walk_cut.inclusive.wall_samples, 3);
    }
}
