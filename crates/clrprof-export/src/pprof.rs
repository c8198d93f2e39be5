//! pprof: a gzip-compressed `profile.proto` (github.com/google/pprof, proto/profile.proto), read by
//! `go tool pprof` and every continuous-profiling backend. One sample per (thread, stack) with a
//! value for every sample type the trace holds — CPU and wall time, allocations, exact calls and
//! time — plus exception and lock-contention samples from their stacks; threads as labels.
//! The protobuf is written by hand: a few field types, no code generation.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use clrprof_model::{Cost, FrameId, Metric, Profile, StackId};
use clrprof_query::select::{self, Threads};

use super::{ExportInput, Exporter, Result};

pub struct Pprof;

/// Protobuf wire encoding of the fields profile.proto uses.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.varint((field as u64) << 3);
            self.varint(v);
        }
    }
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.varint(((field as u64) << 3) | 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn message(&mut self, field: u32, m: Pb) {
        self.bytes(field, &m.0);
    }
    fn packed(&mut self, field: u32, vals: impl IntoIterator<Item = u64>) {
        let mut p = Pb::default();
        for v in vals {
            p.varint(v);
        }
        if !p.0.is_empty() {
            self.bytes(field, &p.0);
        }
    }
}

/// The string table (index 0 is the empty string, as profile.proto requires).
struct Strings {
    index: HashMap<String, u64>,
    list: Vec<String>,
}

impl Strings {
    fn new() -> Strings {
        Strings { index: HashMap::from([(String::new(), 0)]), list: vec![String::new()] }
    }
    fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u64;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// A sample type: its name, unit, and how it is read from a cost.
struct SampleType {
    name: &'static str,
    unit: &'static str,
    of: fn(&Cost) -> u64,
}

const COST_TYPES: [SampleType; 7] = [
    SampleType { name: "samples", unit: "count", of: |c| c.cpu_samples },
    SampleType { name: Metric::Cpu.pprof_name(), unit: "nanoseconds", of: |c| c.cpu_ns },
    SampleType { name: Metric::Wall.pprof_name(), unit: "nanoseconds", of: |c| c.wall_ns },
    SampleType { name: Metric::AllocCount.pprof_name(), unit: "count", of: |c| c.alloc_count },
    SampleType { name: Metric::AllocBytes.pprof_name(), unit: "bytes", of: |c| c.alloc_bytes },
    SampleType { name: Metric::Calls.pprof_name(), unit: "count", of: |c| c.calls },
    SampleType { name: Metric::Time.pprof_name(), unit: "nanoseconds", of: |c| c.time_ns },
];

/// One pprof sample before encoding: its stack, values and labels.
pub(crate) struct Row {
    pub stack: StackId,
    pub values: Vec<i64>,
    /// Shared by the rows of one thread (or exception type): millions of rows, a few label sets.
    pub labels: Arc<[(String, Label)]>,
}

pub(crate) enum Label {
    Str(String),
    Num(u64),
}

/// `total` spread over weights `w` in proportion, as whole numbers that add up to `total`
/// (largest remainders first).
fn apportion(total: u64, w: &[u64]) -> Vec<u64> {
    // In u128: weights of a damaged trace may add up past u64.
    let sum: u128 = w.iter().map(|&x| x as u128).sum();
    if sum == 0 {
        return vec![0; w.len()];
    }
    let mut out: Vec<u64> = w.iter().map(|&x| (total as u128 * x as u128 / sum) as u64).collect();
    let mut rem: Vec<(u128, usize)> =
        w.iter().enumerate().map(|(i, &x)| ((total as u128 * x as u128) % sum, i)).collect();
    rem.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let left = total - out.iter().sum::<u64>();
    for &(_, i) in rem.iter().take(left as usize) {
        out[i] += 1;
    }
    out
}

/// The pprof sample type name of a cost metric.
pub fn sample_type_name(m: Metric) -> &'static str {
    m.pprof_name()
}

/// The encoded (not yet compressed) profile of `p` for a thread selection, with `default` as the
/// default sample type.
pub fn encode(p: &Profile, threads: &Threads, default: Metric) -> Vec<u8> {
    encode_types(p, threads, None, sample_type_name(default)).0
}

/// The samples of a profile as every sample-type exporter sees them: the sample types the trace
/// holds (name, unit) and one row per (thread, stack), exception site stack and contention stack.
pub(crate) struct Rows {
    pub types: Vec<(&'static str, &'static str)>,
    pub rows: Vec<Row>,
}

/// The rows of `p` for a thread selection with only the sample types named in `only` (all the
/// trace holds when `None`). Rows whose kept values are all zero are left out.
pub(crate) fn rows(p: &Profile, threads: &Threads, only: Option<&[&str]>) -> Rows {
    let plan = Plan::new(p, threads, only);
    let mut rows = Vec::new();
    plan.each_row(p, threads, &mut |r| rows.push(r));
    Rows { types: plan.kept_types(), rows }
}

/// The sample types of a thread selection's rows: what the trace holds, and which are kept.
pub(crate) struct Plan {
    present: Vec<usize>,
    types: Vec<(&'static str, &'static str)>,
    exceptions: bool,
    contention: bool,
    exc_at: usize,
    cont_at: usize,
    /// The columns kept, in order.
    keep: Vec<usize>,
}

impl Plan {
    pub(crate) fn new(p: &Profile, threads: &Threads, only: Option<&[&str]>) -> Plan {
        let totals = select::totals_for(p, threads);
        // Which cost sample types the trace holds.
        let present: Vec<usize> = (0..COST_TYPES.len()).filter(|&i| (COST_TYPES[i].of)(&totals) > 0).collect();
        let with_events = threads.is_all();
        let exceptions = with_events && p.events.exceptions.iter().any(|e| !e.stacks.is_empty() && e.thrown > 0);
        let contention = with_events && p.events.contentions.iter().any(|c| !c.stacks.is_empty());
        let mut types: Vec<(&'static str, &'static str)> =
            present.iter().map(|&i| (COST_TYPES[i].name, COST_TYPES[i].unit)).collect();
        let exc_at = types.len();
        if exceptions {
            types.push((Metric::Exceptions.pprof_name(), "count"));
        }
        let cont_at = types.len();
        if contention {
            types.push(("contentions", "count"));
            types.push(("delay", "nanoseconds"));
        }
        let keep: Vec<usize> = (0..types.len()).filter(|&i| only.is_none_or(|o| o.contains(&types[i].0))).collect();
        Plan { present, types, exceptions, contention, exc_at, cont_at, keep }
    }

    /// The kept sample types (name, unit), in order.
    pub(crate) fn kept_types(&self) -> Vec<(&'static str, &'static str)> {
        self.keep.iter().map(|&i| self.types[i]).collect()
    }

    /// Hands `f` every row with a kept value that is not zero, in order (each thread's stacks,
    /// then exception sites', then contention stacks'), its values the kept ones.
    pub(crate) fn each_row(&self, p: &Profile, threads: &Threads, f: &mut dyn FnMut(Row)) {
        let Plan { present, types, exceptions, contention, exc_at, cont_at, keep } = self;
        let (exceptions, contention, exc_at, cont_at) = (*exceptions, *contention, *exc_at, *cont_at);
        let width = types.len();
        let mut push = |mut r: Row| {
            r.values = keep.iter().map(|&i| r.values[i]).collect();
            if r.values.iter().any(|&v| v != 0) {
                f(r);
            }
        };
        for t in p.costs.threads.iter().filter(|t| threads.contains(t.os_tid)) {
            let name = select::thread_name(p, t.os_tid);
            let mut labels = vec![("thread id".to_string(), Label::Num(t.os_tid as u64))];
            if !name.is_empty() {
                labels.push(("thread name".to_string(), Label::Str(name)));
            }
            let labels: Arc<[(String, Label)]> = labels.into();
            let mut stacks: Vec<(StackId, Cost)> = t.costs.iter().collect();
            stacks.sort_by_key(|&(s, _)| s);
            for (stack, c) in stacks {
                let values: Vec<i64> = present.iter().map(|&i| (COST_TYPES[i].of)(&c) as i64).collect();
                if values.iter().all(|&v| v == 0) {
                    continue;
                }
                let mut values = values;
                values.resize(width, 0);
                push(Row { stack, values, labels: Arc::clone(&labels) });
            }
        }
        if exceptions {
            // The agent walks a sample of the throws: each group's thrown count is spread over its
            // walked stacks in proportion, so the exceptions add up to the report's counts.
            for g in p.events.exceptions.iter().filter(|g| !g.stacks.is_empty()) {
                let w: Vec<u64> = g.stacks.iter().map(|(_, n)| *n).collect();
                let labels: Arc<[(String, Label)]> =
                    vec![("exception".to_string(), Label::Str(g.type_name.clone()))].into();
                for ((stack, _), n) in g.stacks.iter().zip(apportion(g.thrown, &w)) {
                    let mut values = vec![0; width];
                    values[exc_at] = n as i64;
                    push(Row { stack: *stack, values, labels: Arc::clone(&labels) });
                }
            }
        }
        if contention {
            for site in &p.events.contentions {
                for ((stack, n), wait) in site.stacks.iter().zip(&site.stack_wait_ns) {
                    let mut values = vec![0; width];
                    values[cont_at] = *n as i64;
                    values[cont_at + 1] = *wait as i64;
                    push(Row { stack: *stack, values, labels: Arc::from([]) });
                }
            }
        }
    }
}

/// The encoded (not yet compressed) profile of `p` for a thread selection with only the sample
/// types named in `only` (all the trace holds when `None`; names as in [`sample_type_name`], plus
/// `samples`, `exceptions`, `contentions` and `delay`), `default` as the default sample type and
/// period type. Samples whose kept values are all zero are left out. Returns the bytes and the
/// number of samples.
pub fn encode_types(p: &Profile, threads: &Threads, only: Option<&[&str]>, default: &str) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let n = encode_types_to(p, threads, only, default, &mut out).expect("a vector takes every write");
    (out, n)
}

/// [`encode_types`] written to `sink` as it is made (the samples of a large profile encode to
/// hundreds of MB before compression): the same bytes.
pub fn encode_types_to(
    p: &Profile,
    threads: &Threads,
    only: Option<&[&str]>,
    default: &str,
    sink: &mut dyn Write,
) -> std::io::Result<usize> {
    let plan = Plan::new(p, threads, only);
    let types = plan.kept_types();

    let mut strings = Strings::new();
    let mut out = Pb::default();
    for (name, unit) in &types {
        let mut vt = Pb::default();
        vt.uint(1, strings.id(name));
        vt.uint(2, strings.id(unit));
        out.message(1, vt);
    }
    // Frames become functions and locations (ids = frame index + 1), modules become mappings.
    let st = &p.costs.stacks;
    let mut used: Vec<FrameId> = Vec::new();
    let mut seen = vec![false; st.frames.len()];
    // Each row encoded as it is made (a row per thread and stack: millions of them).
    let mut samples = 0;
    let mut failed: Option<std::io::Error> = None;
    plan.each_row(p, threads, &mut |r| {
        if failed.is_some() {
            return;
        }
        samples += 1;
        let frames = st.frames_of(r.stack);
        for f in frames.iter().rev() {
            if !std::mem::replace(&mut seen[f.0 as usize], true) {
                used.push(*f);
            }
        }
        let mut s = Pb::default();
        s.packed(1, frames.iter().rev().map(|f| f.0 as u64 + 1));
        s.packed(2, r.values.iter().map(|&v| v as u64));
        for (k, v) in r.labels.iter() {
            let mut l = Pb::default();
            l.uint(1, strings.id(k));
            match v {
                Label::Str(x) => l.uint(2, strings.id(x)),
                Label::Num(n) => l.uint(3, *n),
            }
            s.message(3, l);
        }
        out.message(2, s);
        // A message's fields are its bytes in order: written out as they come.
        if out.0.len() >= 1 << 20 {
            failed = sink.write_all(&out.0).err();
            out.0.clear();
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    used.sort();
    // Managed modules by file name (path and base address); native libraries by file name (the
    // first executable mapping of the file: address range, offset, build id).
    let managed: HashMap<&str, &clrprof_model::Module> = p.modules.iter().map(|m| (m.file_name(), m)).collect();
    let mut native: HashMap<&str, &clrprof_model::samples::Mapping> = HashMap::new();
    for m in &p.sampling.mappings {
        native.entry(m.path.rsplit('/').next().unwrap_or(&m.path)).or_insert(m);
    }
    let mut mappings: Vec<&str> = used.iter().map(|f| st.frames[f.0 as usize].module.as_str()).collect();
    mappings.retain(|m| !m.is_empty());
    mappings.sort();
    mappings.dedup();
    for (i, m) in mappings.iter().enumerate() {
        let mut mp = Pb::default();
        mp.uint(1, i as u64 + 1);
        let file = if let Some(n) = native.get(m) {
            mp.uint(2, n.start);
            mp.uint(3, n.end);
            mp.uint(4, n.file_offset);
            n.path.as_str()
        } else if let Some(md) = managed.get(m) {
            mp.uint(2, md.base_address);
            md.path.as_str()
        } else {
            m
        };
        mp.uint(5, strings.id(file));
        if let Some(n) = native.get(m).filter(|n| !n.build_id.is_empty()) {
            let hex: String = n.build_id.iter().map(|b| format!("{b:02x}")).collect();
            mp.uint(6, strings.id(&hex));
        }
        mp.uint(7, 1); // has_functions
        out.message(3, mp);
    }
    // A function per frame; in a profile built with lines, the frames of one method (one per line)
    // share one function — the first frame's id — whose file is the source file, so that pprof
    // shows functions by default and lines with `-lines`.
    let mut func_of: HashMap<FrameId, u64> = HashMap::new();
    let mut lined: HashMap<(&str, &str, &str, &str), u64> = HashMap::new();
    for f in &used {
        let fr = &st.frames[f.0 as usize];
        let id = match &fr.line {
            None => f.0 as u64 + 1,
            Some(l) => *lined.entry((&fr.name, &fr.signature, &fr.module, &l.file)).or_insert(f.0 as u64 + 1),
        };
        func_of.insert(*f, id);
    }
    for f in &used {
        let fr = &st.frames[f.0 as usize];
        let mut loc = Pb::default();
        loc.uint(1, f.0 as u64 + 1);
        if let Ok(i) = mappings.binary_search(&fr.module.as_str()) {
            loc.uint(2, i as u64 + 1);
        }
        loc.uint(3, p.sampling.addresses.get(f).copied().unwrap_or(0));
        let mut line = Pb::default();
        line.uint(1, func_of[f]);
        if let Some(l) = &fr.line {
            line.uint(2, l.line as u64);
        }
        loc.message(4, line);
        out.message(4, loc);
    }
    for f in used.iter().filter(|f| func_of[f] == f.0 as u64 + 1) {
        let fr = &st.frames[f.0 as usize];
        let mut func = Pb::default();
        func.uint(1, f.0 as u64 + 1);
        // pprof shortens `name<...>` (C++ templates) for display, which would leave `libc.so.6!`.
        let name = fr.name.replace("!<unknown>", "![unknown]");
        func.uint(2, strings.id(&name));
        let system = if fr.signature.is_empty() { fr.name.clone() } else { format!("{} {}", fr.name, fr.signature) };
        func.uint(3, strings.id(&system));
        func.uint(4, strings.id(fr.line.as_ref().map_or(&fr.module, |l| &l.file)));
        out.message(5, func);
    }
    let (from, to) = p.span();
    let default = types.iter().find(|t| t.0 == default).or(types.first()).copied().unwrap_or(("samples", "count"));
    let default_id = strings.id(default.0);
    let period = match default.0 {
        "cpu" if p.sampling.cpu_rate_hz > 0 => 1_000_000_000 / p.sampling.cpu_rate_hz as u64,
        "wall" if p.sampling.wall_rate_hz > 0 => 1_000_000_000 / p.sampling.wall_rate_hz as u64,
        _ => 1,
    };
    let period_unit = strings.id(default.1);
    for s in &strings.list {
        out.bytes(6, s.as_bytes());
    }
    out.uint(9, p.process.start_unix_ns + from);
    out.uint(10, to.saturating_sub(from));
    let mut pt = Pb::default();
    pt.uint(1, default_id);
    pt.uint(2, period_unit);
    out.message(11, pt);
    out.uint(12, period);
    out.uint(14, default_id);
    sink.write_all(&out.0)?;
    Ok(samples)
}

impl Exporter for Pprof {
    fn extension(&self) -> &'static str {
        "pb.gz"
    }

    fn stacks_needed(&self) -> clrprof_query::weighted_stacks::Needed {
        clrprof_query::weighted_stacks::Needed::None
    }

    fn write(&self, inp: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        encode_types_to(inp.profile, &inp.threads, None, sample_type_name(inp.stacks.metric), &mut gz)?;
        gz.finish()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile whose samples encode to several MB (written out in pieces as they come): the
    /// top-level fields still parse in order, one sample per row and its thread's labels, and a
    /// failing sink's error comes back.
    #[test]
    fn a_large_profile_is_encoded_in_pieces_that_parse_whole() {
        use clrprof_model::FrameKey;
        let mut p = Profile::default();
        let frames: Vec<FrameId> =
            (0..50).map(|i| p.costs.stacks.intern_frame(FrameKey::Label(format!("Frame{i}")))).collect();
        let (mut stacks, mut x) = (0, 0x2545_f491_4f6c_dd1du64);
        for tid in [5u32, 6] {
            for i in 0..40_000usize {
                let path: Vec<FrameId> = (0..1 + i % 30)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        frames[(x % 50) as usize]
                    })
                    .collect();
                let s = p.costs.stacks.intern_stack(&path).unwrap();
                p.costs.add(tid, s, &Cost { calls: 1 + i as u64 % 3, time_ns: 10 + i as u64, ..Default::default() });
                stacks += 1;
            }
        }
        let (raw, samples) = encode_types(&p, &Threads::all(), None, "time");
        assert!(raw.len() > 2 << 20, "{} bytes", raw.len());
        // Top-level fields: (field, wire type 2 length-delimited or 0 varint).
        let varint = |b: &[u8], at: &mut usize| {
            let (mut v, mut shift) = (0u64, 0);
            loop {
                let x = b[*at];
                *at += 1;
                v |= ((x & 0x7f) as u64) << shift;
                if x & 0x80 == 0 {
                    return v;
                }
                shift += 7;
            }
        };
        let (mut at, mut count, mut last) = (0, 0, 0);
        while at < raw.len() {
            let key = varint(&raw, &mut at);
            let (field, wire) = (key >> 3, key & 7);
            assert!(field >= last || field == 1 || field == 2, "field {field} after {last}");
            last = last.max(field);
            match wire {
                0 => {
                    varint(&raw, &mut at);
                }
                2 => {
                    let len = varint(&raw, &mut at) as usize;
                    if field == 2 {
                        count += 1;
                    }
                    at += len;
                }
                w => panic!("wire type {w}"),
            }
        }
        assert_eq!(at, raw.len());
        assert!(samples <= stacks && samples > stacks / 2, "{samples} of {stacks}");
        assert_eq!(count, samples);

        struct Full(usize);
        impl Write for Full {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                if self.0 > 0 {
                    return Err(std::io::Error::other("disk full"));
                }
                self.0 += 1;
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let e = encode_types_to(&p, &Threads::all(), None, "time", &mut Full(0)).unwrap_err();
        assert_eq!(e.to_string(), "disk full");
    }

    #[test]
    fn varints_and_apportioning() {
        let mut p = Pb::default();
        p.varint(300);
        assert_eq!(p.0, vec![0xac, 0x02]);
        assert_eq!(apportion(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(apportion(7, &[5, 0, 2]), vec![5, 0, 2]);
        assert_eq!(apportion(100, &[3, 1]).iter().sum::<u64>(), 100);
        assert_eq!(apportion(5, &[0, 0]), vec![0, 0]);
    }
}
