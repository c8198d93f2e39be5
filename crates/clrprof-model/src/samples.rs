//! Sampled stacks (CPU and wall time) as read from a trace: the sample records and their stack
//! definitions ([`SampleData`]), their time index and the cost sums of time ranges, and what a
//! profile keeps of them ([`Sampling`], [`TimedSample`]). Turning the stacks into frames of the
//! canonical `CostTree` is `resolve.rs`; the Monte Carlo hit tables are `hits.rs`.

use std::collections::HashMap;

use clrprof_trace::Record;

use crate::fasthash::FxHashMap;
use crate::stacks::{Cost, FrameId, StackId};
use crate::time::TimeRange;

/// The label of frames nothing could name.
pub const UNKNOWN: &str = "UNKNOWN";
/// The label of wall samples of threads whose stack could not be walked.
pub const NOT_WALKABLE: &str = "[thread not walkable]";
/// The root frame of a sampled stack the sampler cut at its depth limit (`SamplingStart`'s
/// `max_frames`): the outermost frames are missing. `[stack cut at 128 frames]`.
pub fn cut_label(max_frames: u32) -> String {
    format!("[stack cut at {max_frames} frames]")
}

/// Names native code: `path` is a mapped file, `build_id` its GNU build-id as recorded (empty in
/// traces written before build-ids were recorded), `file_offset` an offset into it. Returns the
/// symbol and the file offset where it starts.
pub trait NativeSymbols {
    fn symbol(&mut self, path: &str, build_id: &[u8], file_offset: u64) -> Option<(String, u64)>;

    /// Why some files' frames stay unnamed (one line per file), collected after resolving; the
    /// profile keeps them in its `messages`.
    fn diagnostics(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// Whether managed frames are resolved to source lines (a profile then keys them by
    /// function, file and line; see `crate::lines`). False by default: frames per function.
    fn lines(&self) -> bool {
        false
    }

    /// Whether instrumented calls are keyed by the lines of their call sites (`crate::callsites`;
    /// [`source_line`](Self::source_line) is then asked for them even when [`lines`](Self::lines)
    /// is false, and sampled frames stay per function).
    fn call_site_lines(&self) -> bool {
        self.lines()
    }

    /// The source line of IL position `at` of method `token` of the module at `module_path`
    /// (asked only when [`lines`](Self::lines) is true); `IlAt::Unmapped`, `Prolog` and
    /// `Epilog` ask for a line the provider picks (the method's first or last one).
    fn source_line(
        &mut self,
        _module_path: &str,
        _token: u32,
        _at: crate::lines::IlAt,
    ) -> Option<crate::lines::SourceLine> {
        None
    }
}

/// A provider that knows no symbols (frames become `module!<unknown>`).
pub struct NoSymbols;

impl NativeSymbols for NoSymbols {
    fn symbol(&mut self, _path: &str, _build_id: &[u8], _file_offset: u64) -> Option<(String, u64)> {
        None
    }
}

/// What the sampler recorded, in summary. Sampled figures are estimates: counts say how many.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sampling {
    /// Requested CPU sampling rate (0 = no sampling in this trace).
    pub cpu_rate_hz: u32,
    pub wall_rate_hz: u32,
    pub cpu_samples: u64,
    pub cpu_ns: u64,
    pub wall_samples: u64,
    pub wall_ns: u64,
    /// Sampler counters (last `SamplerStats`).
    pub cpu_dropped: u64,
    pub walks: u64,
    pub suspend_failures: u64,
    pub walk_failures: u64,
    pub timer_failures: u64,
    pub suspended_ns: u64,
    /// CPU time the sampler thread used.
    pub sampler_cpu_ns: u64,
    /// Start address of native and managed routines that samples hit (for the modules view).
    pub addresses: HashMap<FrameId, u64>,
    /// The process's executable file mappings, by start address.
    pub mappings: Vec<Mapping>,
}

impl Sampling {
    pub fn enabled(&self) -> bool {
        self.cpu_rate_hz > 0 || self.cpu_samples > 0 || self.wall_samples > 0
    }

    /// CPU samples per CPU-second actually delivered (timers fire at most once per kernel tick).
    pub fn effective_cpu_rate(&self) -> f64 {
        if self.cpu_ns == 0 {
            0.0
        } else {
            self.cpu_samples as f64 * 1e9 / self.cpu_ns as f64
        }
    }
}

/// An executable file mapping of the process (`NativeMapping`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
    pub path: String,
    /// GNU build-id; empty when unknown.
    pub build_id: Vec<u8>,
}

/// Which clock a sample is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SampleWeight {
    /// On-CPU time.
    Cpu,
    /// Wall time (running or blocked).
    Wall,
}

/// Stack ids below this index a table rather than a map.
pub(crate) const DENSE_IDS: usize = 1 << 20;

/// A sample record as read, its stack not resolved yet.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SampleEvent {
    pub(crate) ts: u64,
    pub(crate) os_tid: u32,
    pub(crate) def: u32,
    pub(crate) weight: SampleWeight,
    pub(crate) count: u32,
    pub(crate) ns: u64,
    /// The EventSource activity the samples carry: an index into [`SampleData::flows`], 0 none.
    pub(crate) flow: u32,
}

/// One sample record of a profile: `count` samples of one thread with one stack at `ts`, standing
/// for `ns` of CPU or wall time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TimedSample {
    pub ts: u64,
    pub os_tid: u32,
    pub stack: StackId,
    pub weight: SampleWeight,
    pub count: u32,
    pub ns: u64,
    /// The EventSource activity the samples carry (`record --async`, CPU samples): an index into
    /// [`Profile::sample_activities`](crate::Profile::sample_activities), 0 for none.
    #[serde(skip)]
    pub flow: u32,
}

/// Whether sample records at two times may be summed into one (see [`SampleData::each_sample`]).
pub type SameGroup<'a> = &'a dyn Fn(u64, u64) -> bool;

/// A sample record without its stack (what the timeline needs): see
/// [`ProfileBuilder::each_sample`](crate::ProfileBuilder::each_sample).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleTime {
    pub ts: u64,
    pub os_tid: u32,
    pub weight: SampleWeight,
    pub count: u32,
    pub ns: u64,
}

impl From<&SampleEvent> for SampleTime {
    fn from(e: &SampleEvent) -> SampleTime {
        SampleTime { ts: e.ts, os_tid: e.os_tid, weight: e.weight, count: e.count, ns: e.ns }
    }
}

impl From<&TimedSample> for SampleTime {
    fn from(s: &TimedSample) -> SampleTime {
        SampleTime { ts: s.ts, os_tid: s.os_tid, weight: s.weight, count: s.count, ns: s.ns }
    }
}

/// Sample records per entry of the time index.
const BLOCK: usize = 4096;
/// Most (thread, weight) sums one index entry keeps.
const BLOCK_SUMS: usize = 16;

/// One entry of the time index of the sample records: the times of [`BLOCK`] consecutive records
/// (in trace order, which is time order in most traces but need not be), and their counts and
/// times per thread and weight when they are of few threads. A range of time skips the records of
/// entries outside it; a timeline takes an entry's sums at once when all its records fall in one
/// bucket.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    min_ts: u64,
    max_ts: u64,
    /// (OS tid, weight, count, ns); `None`: more than [`BLOCK_SUMS`] of them.
    sums: Option<Vec<(u32, SampleWeight, u64, u64)>>,
}

impl Block {
    /// Whether some of its records may lie inside `range`.
    fn overlaps(&self, range: TimeRange) -> bool {
        self.max_ts >= range.from && self.min_ts < range.to
    }

    fn add(&mut self, e: &SampleEvent) {
        self.min_ts = self.min_ts.min(e.ts);
        self.max_ts = self.max_ts.max(e.ts);
        let Some(sums) = &mut self.sums else { return };
        match sums.iter().position(|s| s.0 == e.os_tid && s.1 == e.weight) {
            Some(i) => {
                let s = &mut sums[i];
                s.2 = s.2.saturating_add(e.count as u64);
                s.3 = s.3.saturating_add(e.ns);
            }
            None if sums.len() < BLOCK_SUMS => sums.push((e.os_tid, e.weight, e.count as u64, e.ns)),
            None => self.sums = None,
        }
    }
}

/// The time index of the sample records: an entry per [`BLOCK`] records, and whether they are in
/// time order (then a range of time is a range of records).
#[derive(Clone, Debug)]
struct Index {
    blocks: Vec<Block>,
    sorted: bool,
}

/// The time index of `events` (see [`Block`]).
fn index_of(events: &[SampleEvent]) -> Index {
    let mut blocks = Vec::with_capacity(events.len().div_ceil(BLOCK));
    for chunk in events.chunks(BLOCK) {
        let mut b = Block { min_ts: u64::MAX, max_ts: 0, sums: Some(Vec::new()) };
        chunk.iter().for_each(|e| b.add(e));
        blocks.push(b);
    }
    Index { blocks, sorted: events.is_sorted_by_key(|e| e.ts) }
}

/// The parts of `events` that may hold records inside `range`, by their time index `blocks` (the
/// whole of them when the index does not match).
fn in_range<'e>(events: &'e [SampleEvent], blocks: &[Block], range: TimeRange) -> Vec<&'e [SampleEvent]> {
    if range.is_all() || blocks.len() != events.len().div_ceil(BLOCK) {
        return vec![events];
    }
    let mut out: Vec<&[SampleEvent]> = Vec::new();
    // Consecutive entries kept make one part: [from, to) in records.
    let mut run: Option<(usize, usize)> = None;
    for (k, b) in blocks.iter().enumerate() {
        let keep = b.overlaps(range);
        let (a, z) = (k * BLOCK, ((k + 1) * BLOCK).min(events.len()));
        run = match (keep, run) {
            (true, Some((from, to))) if to == a => Some((from, z)),
            (true, r) => {
                out.extend(r.map(|(from, to)| &events[from..to]));
                Some((a, z))
            }
            (false, r) => {
                out.extend(r.map(|(from, to)| &events[from..to]));
                None
            }
        };
    }
    out.extend(run.map(|(from, to)| &events[from..to]));
    out
}

/// Parts of the records the checkpoints cut them into.
const CHECKPOINTS: usize = 16;
/// Records below which ranges are summed from the records alone (fast enough).
const CHECKPOINTED: usize = 4 << 20;
/// Most memory the checkpoints' sums may take.
const CHECKPOINT_BYTES: usize = 512 << 20;

/// Sums per (OS tid, definition) sorted so, and their totals.
type Snapshot = (Vec<(u32, u32, [u64; 4])>, [u64; 4]);

/// Costs summed per (OS tid, definition) from the first record to every `every` records: the
/// sums sorted so, and their totals (CPU samples, CPU ns, wall samples, wall ns).
#[derive(Clone, Debug)]
struct Checkpoints {
    every: usize,
    snaps: Vec<Snapshot>,
}

/// The cost of summed samples: [CPU samples, CPU ns, wall samples, wall ns].
fn cost_of([cs, cn, ws, wn]: [u64; 4]) -> Cost {
    Cost { cpu_samples: cs, cpu_ns: cn, wall_samples: ws, wall_ns: wn, ..Default::default() }
}

/// Adds `b` to `a`, saturating.
fn add_totals(a: &mut [u64; 4], b: &[u64; 4]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_add(*y);
    }
}

/// `hi − lo` of two cumulative sums sorted by (tid, definition) (every key of `lo` is in `hi`,
/// with no larger sums: no saturation), as costs; keys whose difference is zero are left out.
fn subtract_sorted(hi: &[(u32, u32, [u64; 4])], lo: &[(u32, u32, [u64; 4])]) -> Vec<(u32, u32, Cost)> {
    let mut out = Vec::with_capacity(hi.len());
    let mut lo = lo.iter().peekable();
    for &(tid, def, h) in hi {
        let mut d = h;
        if let Some(&&(lt, ld, l)) = lo.peek() {
            if (lt, ld) == (tid, def) {
                for i in 0..4 {
                    d[i] = h[i].saturating_sub(l[i]);
                }
                lo.next();
            }
        }
        if d != [0; 4] {
            out.push((tid, def, cost_of(d)));
        }
    }
    out
}

/// Sampling records collected while reading a trace (resolved when a profile is taken).
#[derive(Clone, Debug, Default)]
pub struct SampleData {
    pub(crate) summary: Sampling,
    /// The stack depth limits of the CPU sampler's walk and of the runtime's walks (0: unknown).
    pub(crate) max_frames: u32,
    pub(crate) max_walk_frames: u32,
    pub(crate) mappings: Vec<Mapping>,
    /// Stack definitions: IPs, FunctionIDs, runtime activity.
    pub(crate) defs: Vec<(Vec<u64>, Vec<u64>, u64)>,
    ids: FxHashMap<u32, usize>,
    /// The definitions of ids below [`DENSE_IDS`] (`u32::MAX`: none yet).
    dense: Vec<u32>,
    /// Every CPU and wall sample record, in trace order, with the stack definition it refers to.
    pub(crate) events: Vec<SampleEvent>,
    /// The time index of `events`, made for a reader that asks for ranges and timelines
    /// ([`prepare_index`](Self::prepare_index)); dropped when records are added or forgotten.
    index: std::sync::OnceLock<Index>,
    /// Costs summed from the first record up to regular points, for ranges of time
    /// ([`prepare_ranges`](Self::prepare_ranges)); `None` inside: none for these records.
    checkpoints: std::sync::OnceLock<Option<Checkpoints>>,
    /// Code ranges of managed code versions (`CodeRange`): (start, size, FunctionID).
    pub(crate) code: Vec<(u64, u64, u64)>,
    /// IL-to-native maps of managed code versions (`IlMap`).
    pub(crate) il_maps: crate::lines::IlMaps,
    /// Type names of sampled type loads, by the runtime's `TypeLoadStartID` (`TypeLoad`).
    pub(crate) type_loads: HashMap<u32, String>,
    /// Stack definitions a CPU sample referred to, ever (kept when old samples are forgotten),
    /// indexed by definition.
    pub(crate) cpu_defs: Vec<bool>,
    /// The EventSource activity ids CPU samples carry, by the index their `SampleEvent::flow`
    /// holds (index 0: none); and the trace's index of each (`SampleActivity`, redefinable) to
    /// this one.
    pub(crate) flows: Vec<u128>,
    flow_index: FxHashMap<u32, u32>,
}

impl SampleData {
    pub fn add(&mut self, r: &Record) {
        match r {
            Record::SamplingStart(s) => {
                self.summary.cpu_rate_hz = s.cpu_rate_hz;
                self.summary.wall_rate_hz = s.wall_rate_hz;
                self.max_frames = s.max_frames;
                self.max_walk_frames = s.max_walk_frames;
            }
            Record::NativeMapping(m) => self.mappings.push(Mapping {
                start: m.start,
                end: m.end,
                file_offset: m.file_offset,
                path: m.path.clone(),
                build_id: m.build_id.clone(),
            }),
            Record::CodeRange(c) => self.code.push((c.start, c.size, c.id)),
            Record::IlMap(m) => self.il_maps.add(m.id, m.code_start, &m.entries),
            Record::TypeLoad(t) => {
                self.type_loads.insert(t.load_id, t.type_name.clone());
            }
            Record::SampleStack(s) => {
                self.define(s.id);
                self.defs.push((s.ips.clone(), s.functions.clone(), s.activity));
            }
            Record::SampleActivity(a) => {
                if self.flows.is_empty() {
                    self.flows.push(0);
                }
                self.flow_index.insert(a.index, self.flows.len() as u32);
                self.flows.push(clrprof_trace::activity_id(&a.id));
            }
            Record::CpuSample(s) => {
                let def = self.def(s.stack);
                let flow = if s.activity == 0 { 0 } else { self.flow_index.get(&s.activity).copied().unwrap_or(0) };
                if self.cpu_defs.len() <= def {
                    self.cpu_defs.resize(self.defs.len().max(def + 1), false);
                }
                self.cpu_defs[def] = true;
                self.push(SampleEvent {
                    ts: s.ts,
                    os_tid: s.os_tid,
                    def: def as u32,
                    weight: SampleWeight::Cpu,
                    count: s.count,
                    ns: s.cpu_ns,
                    flow,
                });
            }
            Record::WallSample(s) => {
                let def = self.def(s.stack);
                self.push(SampleEvent {
                    ts: s.ts,
                    os_tid: s.os_tid,
                    def: def as u32,
                    weight: SampleWeight::Wall,
                    count: s.count,
                    ns: s.wall_ns,
                    flow: 0,
                });
            }
            Record::SamplerStats(s) => {
                let m = &mut self.summary;
                m.cpu_dropped = s.cpu_dropped;
                m.walks = s.walks;
                m.suspend_failures = s.suspend_failures;
                m.walk_failures = s.walk_failures;
                m.timer_failures = s.timer_failures;
                m.suspended_ns = s.suspended_ns;
                m.sampler_cpu_ns = s.sampler_cpu_ns;
            }
            _ => {}
        }
    }

    /// Drops the sample records before `ts` (stack definitions, code ranges and mappings stay).
    pub fn forget_before(&mut self, ts: u64) {
        self.events.retain(|e| e.ts >= ts);
        self.index = std::sync::OnceLock::new();
        self.checkpoints = std::sync::OnceLock::new();
    }

    /// Makes the time index of the sample records read so far (one pass over them), for a reader
    /// that keeps them and asks for timelines and ranges of time (the viewer); without it they are
    /// read whole each time.
    pub fn prepare_index(&self) {
        self.index.get_or_init(|| index_of(&self.events));
    }

    /// The time index's entries (empty when there is none).
    pub(crate) fn blocks(&self) -> &[Block] {
        self.index.get().map_or(&[], |i| &i.blocks[..])
    }

    /// Prepares ranges of time for a reader that will ask for many (the viewer's brushing): the
    /// costs summed from the first record to every 1/[`CHECKPOINTS`] of the records, so that a
    /// range's costs are the difference of two of them plus the records between the range's ends
    /// and the nearest ones. Only for many records in time order whose sums do not saturate; one
    /// pass over the records, once (another thread may ask for ranges meanwhile: they are summed
    /// from the records until it is done). Records added later are read as before.
    pub fn prepare_ranges(&self) {
        self.prepare_ranges_from(CHECKPOINTED)
    }

    /// [`prepare_ranges`](Self::prepare_ranges) for at least `min_records` records.
    fn prepare_ranges_from(&self, min_records: usize) {
        self.prepare_index();
        self.checkpoints.get_or_init(|| self.checkpoints_of(min_records));
    }

    fn checkpoints_of(&self, min_records: usize) -> Option<Checkpoints> {
        if !self.index.get().is_some_and(|i| i.sorted) || self.events.len() < min_records.max(1) {
            return None;
        }
        let every = self.events.len().div_ceil(CHECKPOINTS).next_multiple_of(BLOCK);
        let defs = self.defs.len();
        let mut c = SampleCosts::default();
        let mut snaps = Vec::new();
        let mut entries = 0usize;
        for part in self.events.chunks(every) {
            if part.len() < every {
                break;
            }
            part.iter().for_each(|e| c.add(e, defs));
            let snap = c.sorted_sums();
            entries += snap.len();
            if entries.saturating_mul(std::mem::size_of::<(u32, u32, [u64; 4])>()) > CHECKPOINT_BYTES {
                return None;
            }
            snaps.push((snap, c.totals));
        }
        // Saturated sums cannot be subtracted.
        (!c.totals.contains(&u64::MAX)).then_some(Checkpoints { every, snaps })
    }

    /// The costs of `range` from the checkpoints, when they cover part of it.
    pub(crate) fn checkpointed_costs(&self, range: TimeRange) -> Option<SummedCosts> {
        // Checkpoints exist only for records in time order (and go when records change).
        let cp = self.checkpoints.get()?.as_ref()?;
        if range.is_all() {
            return None;
        }
        let a = self.events.partition_point(|e| e.ts < range.from);
        let b = self.events.partition_point(|e| e.ts < range.to);
        // Checkpoint k (from 1) holds the sums of the records before k × every.
        let (ka, kb) = (a.div_ceil(cp.every), (b / cp.every).min(cp.snaps.len()));
        if kb <= ka {
            return None;
        }
        let empty = (Vec::new(), [0u64; 4]);
        let lo = if ka == 0 { &empty } else { &cp.snaps[ka - 1] };
        let hi = &cp.snaps[kb - 1];
        let mut totals: [u64; 4] = std::array::from_fn(|i| hi.1[i] - lo.1[i]);
        let between = subtract_sorted(&hi.0, &lo.0);
        let ends = [&self.events[a..ka * cp.every], &self.events[kb * cp.every..b]];
        let (edge, edge_totals) = sum_pieces(&ends, range, self.defs.len());
        add_totals(&mut totals, &edge_totals);
        Some((merge_sorted(between, edge), totals))
    }

    /// Keeps a sample record (an index made before no longer holds).
    fn push(&mut self, e: SampleEvent) {
        if self.index.get().is_some() || self.checkpoints.get().is_some() {
            self.index = std::sync::OnceLock::new();
            self.checkpoints = std::sync::OnceLock::new();
        }
        self.events.push(e);
    }

    /// Sample records kept.
    pub fn retained(&self) -> usize {
        self.events.len()
    }

    /// The definition a stack id refers to now; an undefined id (damaged trace) is an empty stack.
    fn def(&mut self, id: u32) -> usize {
        if let Some(&d) = self.dense.get(id as usize) {
            if d != u32::MAX {
                return d as usize;
            }
        } else if let Some(&d) = self.ids.get(&id) {
            return d;
        }
        self.define(id);
        self.defs.push((Vec::new(), Vec::new(), 0));
        self.defs.len() - 1
    }

    /// Points `id` at the next definition.
    fn define(&mut self, id: u32) {
        let d = self.defs.len();
        // The agent numbers stacks from 0 up: most ids index a table (a hash lookup per sample
        // record misses the cache on large traces); others, from damaged traces, go to a map.
        if (id as usize) < DENSE_IDS && d < u32::MAX as usize {
            if self.dense.len() <= id as usize {
                self.dense.resize(id as usize + 1, u32::MAX);
            }
            self.dense[id as usize] = d as u32;
        } else {
            self.ids.insert(id, d);
        }
    }

    /// Calls `f` with each sample record inside `range` kept here, in trace order: the records a
    /// profile of `range` holds in `samples` (there sorted by time and thread), less their stacks.
    ///
    /// With `same_group`, records may come summed: the records of one thread and weight whose
    /// times all lie in one group (`same_group(earliest, latest)` true, e.g. one timeline bucket)
    /// may be given as one, at the earliest of their times.
    pub fn each_sample(&self, range: TimeRange, same_group: Option<SameGroup<'_>>, mut f: impl FnMut(SampleTime)) {
        let blocks = self.blocks();
        let indexed = blocks.len() == self.events.len().div_ceil(BLOCK);
        for (k, chunk) in self.events.chunks(BLOCK).enumerate() {
            let block = blocks.get(k).filter(|_| indexed);
            if let Some(b) = block {
                if !b.overlaps(range) {
                    continue;
                }
                if range.contains(b.min_ts) && range.contains(b.max_ts) {
                    if let (Some(same), Some(sums)) = (same_group, &b.sums) {
                        if same(b.min_ts, b.max_ts) {
                            for &(os_tid, weight, count, ns) in sums {
                                let count = count.min(u32::MAX as u64) as u32;
                                f(SampleTime { ts: b.min_ts, os_tid, weight, count, ns });
                            }
                            continue;
                        }
                    }
                    chunk.iter().for_each(|e| f(SampleTime::from(e)));
                    continue;
                }
            }
            chunk.iter().filter(|e| range.contains(e.ts)).for_each(|e| f(SampleTime::from(e)));
        }
    }

    /// The sample records read so far, taken out (for a builder consumed by its last profile: the
    /// profile's samples then reuse their memory instead of a copy).
    pub(crate) fn take_events(&mut self) -> Vec<SampleEvent> {
        std::mem::take(&mut self.events)
    }
}

/// Costs per (OS tid, stack definition), sorted so, and their totals: CPU samples, CPU ns, wall
/// samples, wall ns.
pub(crate) type SummedCosts = (Vec<(u32, u32, Cost)>, [u64; 4]);

/// Sample records below which one thread sums them all.
const PARALLEL_SUM: usize = 1 << 20;

/// The costs of the sample records inside `range`, summed per (OS tid, definition) and sorted so,
/// and their totals (CPU samples, CPU ns, wall samples, wall ns). Only the parts of `events` the
/// time index `blocks` places in the range are read; many records are summed in parts on the
/// machine's cores, then merged (saturating sums: the same whatever the grouping).
pub(crate) fn sum_costs(events: &[SampleEvent], blocks: &[Block], range: TimeRange, defs: usize) -> SummedCosts {
    sum_pieces(&in_range(events, blocks, range), range, defs)
}

/// The costs of the records of `pieces` inside `range`, on the machine's cores when they are many.
fn sum_pieces(pieces: &[&[SampleEvent]], range: TimeRange, defs: usize) -> SummedCosts {
    let n: usize = pieces.iter().map(|p| p.len()).sum();
    let parts = std::thread::available_parallelism().map_or(1, |n| n.get()).min(n / PARALLEL_SUM);
    sum_costs_in(pieces, range, defs, parts)
}

/// [`sum_costs`] of the records of `pieces` in `parts` parts of about equal size (one per thread).
fn sum_costs_in(pieces: &[&[SampleEvent]], range: TimeRange, defs: usize, parts: usize) -> SummedCosts {
    let sum = |group: &[&[SampleEvent]]| {
        let mut c = SampleCosts::default();
        for part in group {
            for e in part.iter().filter(|e| range.contains(e.ts)) {
                c.add(e, defs);
            }
        }
        (c.sorted(), c.totals)
    };
    let n: usize = pieces.iter().map(|p| p.len()).sum();
    if parts <= 1 || n == 0 {
        return sum(pieces);
    }
    // Consecutive groups of `per` records, pieces cut where a group ends.
    let per = n.div_ceil(parts);
    let mut groups: Vec<Vec<&[SampleEvent]>> = vec![Vec::new()];
    let mut room = per;
    for &piece in pieces {
        let mut rest = piece;
        while !rest.is_empty() {
            if room == 0 {
                groups.push(Vec::new());
                room = per;
            }
            let (head, tail) = rest.split_at(room.min(rest.len()));
            if let Some(g) = groups.last_mut() {
                g.push(head);
            }
            room -= head.len();
            rest = tail;
        }
    }
    let results: Vec<SummedCosts> = std::thread::scope(|scope| {
        let handles: Vec<_> = groups.iter().map(|g| scope.spawn(move || sum(g))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    let mut totals = [0u64; 4];
    let mut merged: Vec<(u32, u32, Cost)> = Vec::new();
    for (costs, t) in results {
        add_totals(&mut totals, &t);
        merged = merge_sorted(merged, costs);
    }
    (merged, totals)
}

/// Two lists sorted by (tid, definition) merged into one, the costs of a key in both added.
fn merge_sorted(a: Vec<(u32, u32, Cost)>, b: Vec<(u32, u32, Cost)>) -> Vec<(u32, u32, Cost)> {
    if a.is_empty() {
        return b;
    }
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => match (x.0, x.1).cmp(&(y.0, y.1)) {
                std::cmp::Ordering::Less => a.next(),
                std::cmp::Ordering::Greater => b.next(),
                std::cmp::Ordering::Equal => {
                    let (t, d, mut c) = a.next().unwrap_or_default();
                    let (_, _, o) = b.next().unwrap_or_default();
                    c.add(&o);
                    Some((t, d, c))
                }
            },
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
            (None, None) => break,
        };
        out.extend(next);
    }
    out
}

/// Sample costs summed per (thread, stack definition): CPU samples, CPU ns, wall samples, wall
/// ns, and their totals. Threads are numbered as they are first seen; each has a table indexed by
/// definition while all tables together stay within a budget (a hash lookup per sample record
/// misses the cache on large traces), a map of (thread, definition) beyond it.
#[derive(Clone, Debug, Default)]
struct SampleCosts {
    tids: Vec<u32>,
    index: FxHashMap<u32, u32>,
    last: Option<(u32, u32)>,
    /// Per thread number: the slot in `sums` of each definition (`u32::MAX`: none yet). A table
    /// only grows, and once it could not grow (`frozen`) it never does: a definition is always
    /// looked up in the same place.
    tables: Vec<Vec<u32>>,
    frozen: Vec<bool>,
    table_slots: usize,
    /// Slots of definitions past a frozen table's end.
    map: FxHashMap<(u32, u32), u32>,
    /// (thread number, definition, sums).
    sums: Vec<(u32, u32, [u64; 4])>,
    /// Sums over all: CPU samples, CPU ns, wall samples, wall ns.
    totals: [u64; 4],
    /// [`TABLE_BUDGET`] unless a test sets another.
    budget: Option<usize>,
}

/// Slots the per-thread tables may hold in all (4 bytes each).
const TABLE_BUDGET: usize = 1 << 24;

impl SampleCosts {
    /// Adds one sample record; `defs` is the number of stack definitions known now.
    fn add(&mut self, e: &SampleEvent, defs: usize) {
        let i = match e.weight {
            SampleWeight::Cpu => 0,
            SampleWeight::Wall => 2,
        };
        let c = self.entry(e.os_tid, e.def, defs);
        // Saturating: a damaged trace may carry any value (fuzz input).
        c[i] = c[i].saturating_add(e.count as u64);
        c[i + 1] = c[i + 1].saturating_add(e.ns);
        self.totals[i] = self.totals[i].saturating_add(e.count as u64);
        self.totals[i + 1] = self.totals[i + 1].saturating_add(e.ns);
    }

    fn thread(&mut self, os_tid: u32) -> u32 {
        if let Some((tid, t)) = self.last {
            if tid == os_tid {
                return t;
            }
        }
        // Few threads (the usual case, records interleaved): a short scan beats the map.
        let known = if self.tids.len() <= 16 {
            self.tids.iter().position(|&t| t == os_tid).map(|t| t as u32)
        } else {
            self.index.get(&os_tid).copied()
        };
        let t = known.unwrap_or_else(|| {
            let t = self.tids.len() as u32;
            self.tids.push(os_tid);
            self.index.insert(os_tid, t);
            self.tables.push(Vec::new());
            self.frozen.push(false);
            t
        });
        self.last = Some((os_tid, t));
        t
    }

    fn entry(&mut self, os_tid: u32, def: u32, defs: usize) -> &mut [u64; 4] {
        let t = self.thread(os_tid) as usize;
        let table = &mut self.tables[t];
        if def as usize >= table.len() && !self.frozen[t] {
            let len = defs.max(def as usize + 1).max(table.len() * 2);
            if self.table_slots + (len - table.len()) <= self.budget.unwrap_or(TABLE_BUDGET) {
                self.table_slots += len - table.len();
                table.resize(len, u32::MAX);
            } else {
                self.frozen[t] = true;
            }
        }
        let next = self.sums.len() as u32;
        let slot = match table.get_mut(def as usize) {
            Some(s) => {
                if *s == u32::MAX {
                    *s = next;
                }
                *s
            }
            None => *self.map.entry((t as u32, def)).or_insert(next),
        };
        if slot == next {
            self.sums.push((t as u32, def, [0; 4]));
        }
        &mut self.sums[slot as usize].2
    }

    /// (OS tid, definition, [CPU samples, CPU ns, wall samples, wall ns]) in that order.
    fn sorted_sums(&self) -> Vec<(u32, u32, [u64; 4])> {
        let mut v: Vec<(u32, u32, [u64; 4])> =
            self.sums.iter().map(|&(t, def, sums)| (self.tids[t as usize], def, sums)).collect();
        v.sort_unstable_by_key(|(tid, def, _)| (*tid, *def));
        v
    }

    /// (OS tid, definition, cost) in that order.
    fn sorted(&self) -> Vec<(u32, u32, Cost)> {
        self.sorted_sums().into_iter().map(|(tid, def, sums)| (tid, def, cost_of(sums))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_trace::*;

    #[test]
    fn the_time_index_skips_nothing_inside_a_range_and_sums_buckets_exactly() {
        // Records mostly in time order with some late ones, of 3 threads, then a stretch of 40
        // threads (past an index entry's sums), partial last entry.
        let mut d = SampleData::default();
        d.add(&SampleStack { id: 0, ips: vec![1], functions: vec![], activity: 0 }.into());
        let mut x: u64 = 99;
        let mut all = Vec::new();
        for i in 0..(BLOCK as u64 * 9 + 123) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let ts = if i % 101 == 0 { i * 10 - (x >> 40) % 5_000.min(i * 10 + 1) } else { i * 10 };
            let os_tid =
                if (20_000..24_000).contains(&i) { 100 + (x >> 20) as u32 % 40 } else { 1 + (x >> 30) as u32 % 3 };
            let (count, ns) = (1 + (x >> 50) as u32 % 3, (x >> 44) % 1000);
            if x & 1 == 0 {
                d.add(&CpuSample { ts, os_tid, stack: 0, count, cpu_ns: ns, activity: 0 }.into());
            } else {
                d.add(&WallSample { ts, os_tid, stack: 0, count, wall_ns: ns }.into());
            }
            all.push(SampleTime {
                ts,
                os_tid,
                weight: if x & 1 == 0 { SampleWeight::Cpu } else { SampleWeight::Wall },
                count,
                ns,
            });
        }
        d.prepare_index();
        assert_eq!(d.blocks().len(), all.len().div_ceil(BLOCK));
        assert!(d.blocks().iter().any(|b| b.sums.is_none()) && d.blocks().iter().any(|b| b.sums.is_some()));
        for range in
            [TimeRange::ALL, TimeRange::new(0, 1), TimeRange::new(41_000, 187_654), TimeRange::new(350_000, 10_000_000)]
        {
            let mut got = Vec::new();
            d.each_sample(range, None, |s| got.push(s));
            let want: Vec<SampleTime> = all.iter().copied().filter(|s| range.contains(s.ts)).collect();
            assert_eq!(got, want, "{range:?}");
            let blocks = d.blocks();
            assert_eq!(
                sum_costs(&d.events, blocks, range, 1),
                sum_costs_in(&[&d.events[..]], range, 1, 1),
                "{range:?}"
            );
            // Summed per bucket of 200 000 ns: the same sums per (bucket, thread, weight).
            let bucket = 200_000u64;
            let same = |a: u64, b: u64| a / bucket == b / bucket;
            let per_bucket = |v: &[SampleTime]| {
                let mut m = std::collections::BTreeMap::new();
                for s in v {
                    let e = m.entry((s.ts / bucket, s.os_tid, s.weight == SampleWeight::Cpu)).or_insert((0u64, 0u64));
                    e.0 += s.count as u64;
                    e.1 += s.ns;
                }
                m
            };
            let mut grouped = Vec::new();
            d.each_sample(range, Some(&same), |s| grouped.push(s));
            assert_eq!(per_bucket(&grouped), per_bucket(&want), "{range:?}");
            if range.is_all() {
                assert!(grouped.len() < want.len() / 3, "{} of {}", grouped.len(), want.len());
            }
        }
        // Forgetting old records re-indexes the rest.
        d.forget_before(200_000);
        assert!(d.blocks().is_empty());
        d.prepare_index();
        assert_eq!(d.blocks().len(), d.events.len().div_ceil(BLOCK));
        let mut got = Vec::new();
        d.each_sample(TimeRange::new(150_000, 250_000), None, |s| got.push(s));
        let want: Vec<SampleTime> = all.iter().copied().filter(|s| (200_000..250_000).contains(&s.ts)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn ranges_from_checkpoints_are_the_ranges_summed() {
        // 30 stacks on 5 threads, records in time order (some at one time), a few carrying
        // nothing; the same costs for any range from the checkpoints as from the records.
        let mut d = SampleData::default();
        for id in 0..30 {
            d.add(&SampleStack { id, ips: vec![id as u64 + 1], functions: vec![], activity: 0 }.into());
        }
        let mut x: u64 = 5;
        let mut ts = 0u64;
        for i in 0..70_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ts += (x >> 61) * 10;
            let (os_tid, stack) = (1 + (x >> 20) as u32 % 5, (x >> 30) as u32 % 30);
            let (count, ns) = if i % 97 == 0 { (0, 0) } else { (1 + (x >> 50) as u32 % 3, (x >> 44) % 1000) };
            if x & 1 == 0 {
                d.add(&CpuSample { ts, os_tid, stack, count, cpu_ns: ns, activity: 0 }.into());
            } else {
                d.add(&WallSample { ts, os_tid, stack, count, wall_ns: ns }.into());
            }
        }
        d.prepare_ranges_from(1);
        let cp = d.checkpoints.get().and_then(|c| c.as_ref()).expect("checkpoints");
        assert_eq!((cp.every, cp.snaps.len()), (BLOCK * 2, 8));
        let end = d.events.last().map(|e| e.ts).unwrap_or(0);
        let nonzero = |(v, t): SummedCosts| -> SummedCosts { (v.into_iter().filter(|c| !c.2.is_zero()).collect(), t) };
        let mut used = 0;
        for k in 0..200u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let (a, b) = ((x >> 20) % (end + 20), (x >> 40) % (end + 20));
            let range = match k {
                0 => TimeRange::new(0, end + 1),
                1 => TimeRange::new(d.events[BLOCK * 2].ts, d.events[BLOCK * 6].ts),
                _ => TimeRange::new(a.min(b), a.max(b)),
            };
            let want = nonzero(sum_costs(&d.events, d.blocks(), range, d.defs.len()));
            if let Some(got) = d.checkpointed_costs(range) {
                used += 1;
                assert_eq!(got, want, "{range:?}");
            }
        }
        assert!(used > 100, "{used} ranges from checkpoints");
        // Records out of time order, or sums that saturate: no checkpoints.
        let mut u = d.clone();
        u.add(&CpuSample { ts: 1, os_tid: 1, stack: 0, count: 1, cpu_ns: 1, activity: 0 }.into());
        u.forget_before(0);
        u.prepare_ranges_from(1);
        assert!(u.checkpoints.get().is_some_and(|c| c.is_none()));
        let mut s = d.clone();
        s.add(&CpuSample { ts: end + 1, os_tid: 1, stack: 0, count: 1, cpu_ns: u64::MAX, activity: 0 }.into());
        for i in 0..20_000 {
            s.add(&CpuSample { ts: end + 2 + i, os_tid: 1, stack: 0, count: 1, cpu_ns: 1, activity: 0 }.into());
        }
        s.forget_before(0);
        s.prepare_ranges_from(1);
        assert!(s.checkpoints.get().is_some_and(|c| c.is_none()));
        // Forgetting old records drops them.
        let mut f = d.clone();
        f.forget_before(end / 2);
        assert!(f.checkpoints.get().is_none());
    }

    /// The per-(thread, definition) sums are the same whether the tables hold every definition,
    /// some (a frozen table, the rest in the map), or none, and equal a plain sum.
    #[test]
    fn sample_sums_are_the_same_in_tables_and_map() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut events = Vec::new();
        let mut defs = 1usize;
        for i in 0..20_000u64 {
            // Definitions appear over time, as in a trace.
            if next() % 8 == 0 {
                defs += 1;
            }
            events.push((
                SampleEvent {
                    ts: i,
                    os_tid: (next() % 9) as u32 + 100,
                    def: (next() % defs as u64) as u32,
                    weight: if next() % 3 == 0 { SampleWeight::Wall } else { SampleWeight::Cpu },
                    count: (next() % 4) as u32,
                    ns: if i == 7 { u64::MAX } else { next() % 1_000_000 },
                    flow: 0,
                },
                defs,
            ));
        }
        let mut plain: std::collections::BTreeMap<(u32, u32), [u64; 4]> = Default::default();
        for (e, _) in &events {
            let c = plain.entry((e.os_tid, e.def)).or_default();
            let i = if e.weight == SampleWeight::Cpu { 0 } else { 2 };
            c[i] = c[i].saturating_add(e.count as u64);
            c[i + 1] = c[i + 1].saturating_add(e.ns);
        }
        let plain: Vec<(u32, u32, Cost)> = plain
            .into_iter()
            .map(|((t, d), [cs, cn, ws, wn])| {
                (t, d, Cost { cpu_samples: cs, cpu_ns: cn, wall_samples: ws, wall_ns: wn, ..Default::default() })
            })
            .collect();
        for budget in [0, 1, 100, 3_000, TABLE_BUDGET] {
            let mut c = SampleCosts { budget: Some(budget), ..Default::default() };
            for (e, defs) in &events {
                c.add(e, *defs);
            }
            assert_eq!(c.sorted(), plain, "budget {budget}");
            assert_eq!(
                c.totals[0],
                events.iter().filter(|(e, _)| e.weight == SampleWeight::Cpu).map(|(e, _)| e.count as u64).sum::<u64>()
            );
            if budget == 3_000 {
                assert!(!c.map.is_empty() && c.table_slots > 0, "both tables and the map in use");
            }
        }
    }

    /// Sums taken in parts (one per core) and merged are the sums taken at once, inside a window
    /// too; the part boundaries fall anywhere, also inside one thread's run of records.
    #[test]
    fn sample_sums_in_parts_are_the_sums_at_once() {
        let mut events = Vec::new();
        for i in 0..10_007u64 {
            events.push(SampleEvent {
                ts: i * 3 % 9_001,
                os_tid: (i / 50 % 7) as u32,
                def: (i * 7 % 31) as u32,
                weight: if i % 5 == 0 { SampleWeight::Wall } else { SampleWeight::Cpu },
                count: (i % 3) as u32,
                ns: if i == 4_000 { u64::MAX - 5 } else { i * 11 },
                flow: 0,
            });
        }
        let blocks = index_of(&events).blocks;
        for range in [TimeRange::ALL, TimeRange::new(100, 5_000)] {
            let once = sum_costs_in(&[&events[..]], range, 31, 1);
            assert!(once.0.len() > 100);
            for parts in [2, 3, 8] {
                assert_eq!(sum_costs_in(&[&events[..]], range, 31, parts), once, "{parts} parts, {range:?}");
                let pieces = [&events[..1000], &events[1000..1001], &events[1001..]];
                assert_eq!(sum_costs_in(&pieces, range, 31, parts), once, "{parts} parts in pieces, {range:?}");
            }
            assert_eq!(sum_costs(&events, &blocks, range, 31), once, "{range:?} through the time index");
        }
    }
}
