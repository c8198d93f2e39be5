//! Heap snapshots: the object graph after one induced full blocking collection, from the
//! runtime's GC heap-dump events on an in-process EventPipe session of its own (what
//! dotnet-gcdump and Datadog's profiler use). `COR_PRF_MONITOR_GC` is never set, so background
//! GC stays on between snapshots.
//!
//! **How a snapshot is taken.** A thread of the agent (never a runtime callback: the runtime
//! cannot start a collection inside one) starts a session on `Microsoft-Windows-DotNETRuntime`,
//! level verbose, keywords `Type | GCHeapDump | GCHeapCollect | GCHeapAndTypeNames`
//! (0x1980000). Enabling `GCHeapCollect` makes the runtime force a blocking gen2 collection on the
//! thread that enabled it (`ETW::GCLog::ForceGC` from the provider's enable callback), and the
//! collection walks the live objects and the roots and fires the bulk events, which an in-process
//! session delivers synchronously on the GC's thread: when `EventPipeStartSession` returns, the
//! whole dump has been delivered. The session is then stopped at once. The keyword `GC` is left
//! out on purpose: the agent's main session may have it, and an event both sessions want would
//! reach the one delivery callback twice (allocation ticks, GC starts).
//!
//! **Events** (ClrEtwAll.man, layouts in the runtime's `eventtracepriv.h`), each `u32 Index,
//! u32 Count, u16 ClrInstanceID` then `Count` values: `GCBulkRootEdge` 16 {ptr object, u8 kind,
//! u32 flags, ptr root id}, `GCBulkRootConditionalWeakTableElementEdge` 17 {ptr key, ptr value,
//! ptr root id}, `GCBulkNode` 18 {ptr address, u64 size, u64 type id, u64 edge count},
//! `GCBulkEdge` 19 {ptr value, u32 field id (always 0 in CoreCLR)}; `GCBulkType` 15 {u32 Count,
//! u16 ClrInstanceID, then per type u64 type id, u64 module, u32 type name token, u32 flags,
//! u8 element type, UTF-16z name, u32 parameter count, u64 parameters[]};
//! `GCBulkRootStaticVar` 38 {u32 Count, u64 AppDomainID, u16 ClrInstanceID, then per static u64
//! slot address, u64 object, u64 type id, u32 flags, UTF-16z field name}. COM wrappers
//! (`GCBulkRootCCW` 36, `GCBulkRCW` 37) do not exist on Linux; any seen are counted as not kept.
//!
//! **Never a silent hole.** The delivery callback only parses and packs each event into a
//! record (`clrprof_trace::heap`) kept in memory, up to `CLRPROF_HEAP_BUFFER_MB`; beyond it,
//! events are dropped and counted. Gaps in an event kind's `Index`, payloads that do not parse,
//! and a reference count that does not match the references sent are counted too. The records are
//! written after the session, off the GC's thread, and `HeapSnapshotEnd` says whether the
//! snapshot is complete and what was lost.
//!
//! **Triggers**: the attach session of `clrprof heap` (`CLRPROF_HEAP_SNAPSHOT=1`) and times after
//! start (`CLRPROF_HEAP_SNAPSHOT_AT`). Not at exit: by the time the runtime runs the exit path
//! (`AppContext.OnProcessExit`, on the finalizer thread) and calls the profiler's `Shutdown`, it
//! refuses new EventPipe sessions (E_FAIL on .NET 8, 9 and 10, tried from both places), so no
//! heap dump can be asked for then.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use clrprof_trace::heap::{DependentPacker, EdgePacker, HeapNode, HeapRoot, NodePacker, RootPacker};
use clrprof_trace::trigger::parse_duration;
use clrprof_trace::{
    HeapDependentEdges, HeapEdges, HeapNodes, HeapRoots, HeapSnapshotEnd, HeapSnapshotStart, HeapStaticRoots,
    HeapTypes, Record,
};

use super::payload::Payload;
use crate::config::ConfigProblem;
use crate::context::Context;
use crate::{log_info, log_warn};

const PROVIDER: &str = "Microsoft-Windows-DotNETRuntime";
/// `Type` 0x80000 | `GCHeapDump` 0x100000 | `GCHeapCollect` 0x800000 | `GCHeapAndTypeNames`
/// 0x1000000.
const KEYWORDS: u64 = 0x0198_0000;
const LEVEL_VERBOSE: u32 = 5;

const EVENT_BULK_TYPE: u32 = 15;
const EVENT_ROOT_EDGE: u32 = 16;
const EVENT_CWT_EDGE: u32 = 17;
const EVENT_NODE: u32 = 18;
const EVENT_EDGE: u32 = 19;
const EVENT_ROOT_CCW: u32 = 36;
const EVENT_RCW: u32 = 37;
const EVENT_STATIC_VAR: u32 = 38;

/// What started a snapshot (`HeapSnapshotStart.trigger`).
pub(crate) mod trigger {
    pub(crate) const ATTACH: u8 = 0;
    pub(crate) const TIME: u8 = 1;
    /// A collection trigger (`CLRPROF_TRIGGER_ACTION=heap`).
    pub(crate) const TRIGGER: u8 = 2;
}

/// Largest block of snapshot records written at once.
const WRITE_CHUNK: usize = 4 << 20;

/// The heap snapshot settings (`CLRPROF_HEAP_*`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HeapConfig {
    /// `CLRPROF_HEAP_SNAPSHOT`: take one snapshot as soon as an attach session starts (`1`/`0`).
    /// Default off.
    pub(crate) on_attach: bool,
    /// `CLRPROF_HEAP_SNAPSHOT_AT`: times after the agent started, `,`-separated, each a number
    /// with `ms`, `s` or `m` (no unit: seconds). Default: none.
    pub(crate) at_ns: Vec<u64>,
    /// `CLRPROF_HEAP_BUFFER_MB`: memory the agent may hold for one snapshot's records before it
    /// drops events (and marks the snapshot incomplete), 16..=65536. Default 4096.
    pub(crate) buffer_mb: u64,
}

impl Default for HeapConfig {
    fn default() -> Self {
        HeapConfig { on_attach: false, at_ns: Vec::new(), buffer_mb: 4096 }
    }
}

impl HeapConfig {
    /// Reads the `CLRPROF_HEAP_*` variables; a bad value is reported and left at its default.
    pub(crate) fn from_lookup(get: &dyn Fn(&str) -> Option<String>, problems: &mut Vec<ConfigProblem>) -> HeapConfig {
        let mut c = HeapConfig::default();
        let mut bad = |variable: &'static str, value: &str, reason: &str| {
            problems.push(ConfigProblem { variable, value: value.to_string(), reason: reason.to_string() })
        };
        if let Some(v) = get("CLRPROF_HEAP_SNAPSHOT") {
            match v.trim() {
                "1" | "true" | "on" | "yes" => c.on_attach = true,
                "0" | "false" | "off" | "no" | "" => c.on_attach = false,
                _ => bad("CLRPROF_HEAP_SNAPSHOT", &v, "expected 1 or 0; using 0"),
            }
        }
        if let Some(v) = get("CLRPROF_HEAP_SNAPSHOT_AT") {
            let times: Option<Vec<u64>> =
                v.split(',').map(str::trim).filter(|t| !t.is_empty()).map(parse_duration).collect();
            match times {
                Some(mut t) => {
                    t.sort_unstable();
                    t.dedup();
                    c.at_ns = t;
                }
                None => bad(
                    "CLRPROF_HEAP_SNAPSHOT_AT",
                    &v,
                    "expected times after start such as 500ms,2s,1m; no timed snapshots",
                ),
            }
        }
        if let Some(v) = get("CLRPROF_HEAP_BUFFER_MB") {
            match v.trim().parse::<u64>() {
                Ok(n) if (16..=65536).contains(&n) => c.buffer_mb = n,
                _ => bad("CLRPROF_HEAP_BUFFER_MB", &v, "expected MiB in 16..=65536; using 4096"),
            }
        }
        c
    }

    /// `key=value` pairs for the trace's configuration (only what is set).
    pub(crate) fn describe(&self, m: &mut std::collections::BTreeMap<&'static str, String>) {
        if self.on_attach {
            m.insert("heap_snapshot", "true".into());
        }
        if !self.at_ns.is_empty() {
            let t: Vec<String> = self.at_ns.iter().map(|n| format!("{}ms", n / 1_000_000)).collect();
            m.insert("heap_snapshot_at", t.join(","));
        }
        if self.on_attach || !self.at_ns.is_empty() {
            m.insert("heap_buffer_mb", self.buffer_mb.to_string());
        }
    }
}

/// The heap recorder's state: whether a snapshot is being captured, and its records so far.
#[derive(Default)]
pub(crate) struct HeapState {
    /// A capture is running: heap-dump events go to `capture`.
    active: AtomicBool,
    capture: Mutex<Option<Capture>>,
    /// Snapshots taken so far (the next is numbered one more).
    taken: AtomicU32,
    /// One snapshot at a time.
    busy: Mutex<()>,
}

/// One snapshot's records, filled on the GC's thread.
struct Capture {
    snapshot: u32,
    limit: usize,
    held: usize,
    records: Vec<Record>,
    nodes: u64,
    edges: u64,
    roots: u64,
    bytes: u64,
    /// References the nodes say they hold (must equal `edges`).
    node_edges: u64,
    /// Next expected `Index` per kind: nodes, edges, roots, dependent edges.
    next_index: [u32; 4],
    /// Events written per kind: nodes, edges, roots, statics, dependent edges, types.
    events: [u32; 6],
    dropped_events: u64,
    dropped_bytes: u64,
    bad_events: u64,
    /// Events lost before they reached the agent (gaps in an `Index`).
    gaps: u64,
    /// COM wrapper events (none expected on Linux): not kept.
    com_events: u64,
    /// Time spent in `add` (on the GC's thread).
    agent_ns: u64,
    /// The app domain of the static roots (`GCBulkRootStaticVar`'s `AppDomainID`).
    domain: u64,
}

impl Capture {
    fn new(snapshot: u32, limit: usize) -> Capture {
        Capture {
            snapshot,
            limit,
            held: 0,
            records: Vec::new(),
            nodes: 0,
            edges: 0,
            roots: 0,
            bytes: 0,
            node_edges: 0,
            next_index: [0; 4],
            events: [0; 6],
            dropped_events: 0,
            dropped_bytes: 0,
            bad_events: 0,
            gaps: 0,
            com_events: 0,
            agent_ns: 0,
            domain: 0,
        }
    }

    /// Checks an event's `Index` against the next expected one of its kind.
    fn sequence(&mut self, kind: usize, index: u32) {
        let want = self.next_index[kind];
        if index > want {
            self.gaps += (index - want) as u64;
        }
        self.next_index[kind] = index.wrapping_add(1).max(want);
    }

    fn add(&mut self, event_id: u32, data: &[u8]) {
        if matches!(event_id, EVENT_ROOT_CCW | EVENT_RCW) {
            self.com_events += 1;
            return;
        }
        if self.held >= self.limit {
            self.dropped_events += 1;
            self.dropped_bytes += data.len() as u64;
            return;
        }
        let Some((record, size)) = self.parse(event_id, data) else {
            self.bad_events += 1;
            return;
        };
        self.held += size + 64;
        self.records.push(record);
    }

    /// Parses and packs one event; `None` when the payload does not parse.
    fn parse(&mut self, event_id: u32, data: &[u8]) -> Option<(Record, usize)> {
        let snapshot = self.snapshot;
        let mut p = Payload::new(data);
        match event_id {
            EVENT_NODE | EVENT_EDGE | EVENT_ROOT_EDGE | EVENT_CWT_EDGE => {
                let index = p.u32()?;
                let count = p.u32()?;
                let _clr = p.u16()?;
                let item = match event_id {
                    EVENT_NODE => 32,
                    EVENT_EDGE => 12,
                    EVENT_ROOT_EDGE => 21,
                    _ => 24,
                };
                if p.rest() != count as usize * item {
                    return None;
                }
                let r: Record = match event_id {
                    EVENT_NODE => {
                        let mut k = NodePacker::with_capacity(count as usize);
                        for _ in 0..count {
                            let n = HeapNode { addr: p.u64()?, size: p.u64()?, type_id: p.u64()?, edges: p.u64()? };
                            self.bytes += n.size;
                            self.node_edges += n.edges;
                            k.push(&n);
                        }
                        self.nodes += count as u64;
                        self.sequence(0, index);
                        self.events[0] += 1;
                        HeapNodes { snapshot, seq: index, count, packed: k.packed }.into()
                    }
                    EVENT_EDGE => {
                        let mut k = EdgePacker::with_capacity(count as usize);
                        for _ in 0..count {
                            k.push(p.u64()?);
                            let _field = p.u32()?;
                        }
                        self.edges += count as u64;
                        self.sequence(1, index);
                        self.events[1] += 1;
                        HeapEdges { snapshot, seq: index, count, packed: k.packed }.into()
                    }
                    EVENT_ROOT_EDGE => {
                        let mut k = RootPacker::default();
                        for _ in 0..count {
                            let object = p.u64()?;
                            let kind = p.u8()?;
                            let flags = p.u32()?;
                            let id = p.u64()?;
                            k.push(&HeapRoot { object, kind, flags, id });
                        }
                        self.roots += count as u64;
                        self.sequence(2, index);
                        self.events[2] += 1;
                        HeapRoots { snapshot, seq: index, count, packed: k.packed }.into()
                    }
                    _ => {
                        let mut k = DependentPacker::default();
                        for _ in 0..count {
                            let key = p.u64()?;
                            let value = p.u64()?;
                            let _root = p.u64()?;
                            k.push(key, value);
                        }
                        self.sequence(3, index);
                        self.events[4] += 1;
                        HeapDependentEdges { snapshot, seq: index, count, packed: k.packed }.into()
                    }
                };
                Some((r, data.len() / 3))
            }
            EVENT_STATIC_VAR => {
                let count = p.u32()?;
                let domain = p.u64()?;
                let _clr = p.u16()?;
                if domain != 0 {
                    self.domain = domain;
                }
                let mut r = HeapStaticRoots { snapshot, seq: self.events[3], ..Default::default() };
                for _ in 0..count {
                    r.slots.push(p.u64()?);
                    r.objects.push(p.u64()?);
                    r.types.push(p.u64()?);
                    r.flags.push(p.u32()?);
                    r.names.push(p.utf16z()?);
                }
                if p.rest() != 0 {
                    return None;
                }
                self.roots += count as u64;
                self.events[3] += 1;
                Some((r.into(), data.len()))
            }
            EVENT_BULK_TYPE => {
                let count = p.u32()?;
                let _clr = p.u16()?;
                let mut r = HeapTypes { snapshot, ..Default::default() };
                for _ in 0..count {
                    r.ids.push(p.u64()?);
                    let _module = p.u64()?;
                    let _token = p.u32()?;
                    let _flags = p.u32()?;
                    let _element = p.u8()?;
                    r.names.push(p.utf16z()?);
                    let n = p.u32()?;
                    if n as usize > p.rest() / 8 {
                        return None;
                    }
                    r.param_counts.push(n);
                    for _ in 0..n {
                        r.params.push(p.u64()?);
                    }
                }
                if p.rest() != 0 {
                    return None;
                }
                self.events[5] += 1;
                Some((r.into(), data.len()))
            }
            _ => None,
        }
    }
}

/// The EventPipe delivery hook: takes the event when a capture runs and it is a heap-dump event
/// (then the caller does nothing more with it). Runs on the GC's thread during the collection:
/// it only parses and packs into memory.
pub(crate) fn delivered(st: &HeapState, event_id: u32, data: &[u8]) -> bool {
    if !st.active.load(Ordering::Acquire)
        || !matches!(
            event_id,
            EVENT_BULK_TYPE
                | EVENT_ROOT_EDGE
                | EVENT_CWT_EDGE
                | EVENT_NODE
                | EVENT_EDGE
                | EVENT_ROOT_CCW
                | EVENT_RCW
                | EVENT_STATIC_VAR
        )
    {
        return false;
    }
    if let Ok(mut g) = st.capture.lock() {
        if let Some(c) = g.as_mut() {
            let t0 = std::time::Instant::now();
            c.add(event_id, data);
            c.agent_ns += t0.elapsed().as_nanos() as u64;
        }
    }
    true
}

/// What one snapshot gave, for the log and the attach control line.
#[derive(Clone, Debug, Default)]
pub(crate) struct Summary {
    pub(crate) snapshot: u32,
    pub(crate) complete: bool,
    pub(crate) nodes: u64,
    pub(crate) edges: u64,
    pub(crate) roots: u64,
    pub(crate) bytes: u64,
    pub(crate) pause_ns: u64,
    pub(crate) agent_ns: u64,
    pub(crate) problem: String,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "snapshot {} {} objects={} references={} roots={} bytes={} pause_ms={:.1} agent_ms={:.1}",
            self.snapshot,
            if self.complete { "complete" } else { "incomplete" },
            self.nodes,
            self.edges,
            self.roots,
            self.bytes,
            self.pause_ns as f64 / 1e6,
            self.agent_ns as f64 / 1e6
        )?;
        if !self.problem.is_empty() {
            write!(f, " problem={}", self.problem.replace(['\n', ' '], "_"))?;
        }
        Ok(())
    }
}

/// Takes one snapshot on the calling thread (which must not be inside a runtime callback: the
/// runtime runs the collection on it) and writes it to the trace.
pub(crate) fn take(s: &Context, st: &HeapState, why: u8) -> Summary {
    let Ok(_one) = st.busy.lock() else { return Summary::default() };
    let snapshot = st.taken.fetch_add(1, Ordering::AcqRel) + 1;
    let limit = (s.config.heap.buffer_mb as usize).saturating_mul(1 << 20);
    s.writer.write_now(&[HeapSnapshotStart { ts: s.now(), snapshot, trigger: why }.into()]);
    if let Ok(mut g) = st.capture.lock() {
        *g = Some(Capture::new(snapshot, limit));
    }
    st.active.store(true, Ordering::Release);
    let t0 = s.now();
    let started = s.info.event_pipe_start_session(&[(PROVIDER, KEYWORDS, LEVEL_VERBOSE)], false);
    let pause_ns = s.now().saturating_sub(t0);
    let stopped = match &started {
        Ok(id) => s.info.event_pipe_stop_session(*id).err().map(|e| e.to_string()),
        Err(_) => None,
    };
    st.active.store(false, Ordering::Release);
    let cap = st.capture.lock().ok().and_then(|mut g| g.take());
    let Some(cap) = cap else { return Summary::default() };
    let mut problems = Vec::new();
    if let Err(e) = &started {
        problems.push(format!("the runtime did not start the heap-dump session ({e})"));
    } else if cap.nodes == 0 {
        problems.push("the runtime sent no heap dump (no objects)".to_string());
    }
    if let Some(e) = stopped {
        log_warn!("heap snapshot {snapshot}: stopping the session: {e}");
    }
    if cap.dropped_events > 0 {
        problems.push(format!(
            "{} events ({} bytes) dropped beyond CLRPROF_HEAP_BUFFER_MB={}",
            cap.dropped_events, cap.dropped_bytes, s.config.heap.buffer_mb
        ));
    }
    if cap.bad_events > 0 {
        problems.push(format!("{} events did not parse", cap.bad_events));
    }
    if cap.gaps > 0 {
        problems.push(format!("{} events missing from the runtime's sequence", cap.gaps));
    }
    if cap.node_edges != cap.edges && cap.dropped_events == 0 {
        problems.push(format!("objects hold {} references but {} were sent", cap.node_edges, cap.edges));
    }
    if cap.com_events > 0 {
        log_info!("heap snapshot {snapshot}: {} COM wrapper events not kept", cap.com_events);
    }
    let complete = problems.is_empty();
    let problem = problems.join("; ");
    let mut records = cap.records;
    let t_classes = std::time::Instant::now();
    // On a fresh thread: the runtime made this one a thread of its own when it ran the
    // collection here, and refuses synchronous Profiling API calls from a runtime thread outside
    // a callback (CORPROF_E_UNSUPPORTED_CALL_SEQUENCE).
    let (named, statics) = std::thread::scope(|sc| {
        let job = std::thread::Builder::new()
            .name("clrprof-heap-statics".into())
            .spawn_scoped(sc, || name_static_classes(s, cap.domain as usize, &mut records));
        match job.map(|j| j.join()) {
            Ok(Ok(r)) => r,
            _ => (0, 0),
        }
    });
    log_info!(
        "heap snapshot {snapshot}: declaring class found for {named} of {statics} static roots in {:.1} ms",
        t_classes.elapsed().as_secs_f64() * 1e3
    );
    // Written here, off the GC's thread, in blocks of a few MiB.
    let mut chunk: Vec<Record> = Vec::new();
    let mut size = 0;
    for r in records {
        size += match &r {
            Record::HeapNodes(x) => x.packed.len(),
            Record::HeapEdges(x) => x.packed.len(),
            Record::HeapRoots(x) => x.packed.len(),
            Record::HeapDependentEdges(x) => x.packed.len(),
            _ => 4096,
        };
        chunk.push(r);
        if size >= WRITE_CHUNK {
            s.writer.write_now(&chunk);
            chunk.clear();
            size = 0;
        }
    }
    let end = HeapSnapshotEnd {
        ts: s.now(),
        snapshot,
        complete,
        nodes: cap.nodes,
        edges: cap.edges,
        roots: cap.roots,
        bytes: cap.bytes,
        dropped_events: cap.dropped_events + cap.gaps,
        dropped_bytes: cap.dropped_bytes,
        bad_events: cap.bad_events,
        pause_ns,
        problem: problem.clone(),
        events: cap.events.to_vec(),
        agent_ns: cap.agent_ns,
    };
    chunk.push(end.into());
    s.writer.write_now(&chunk);
    let summary = Summary {
        snapshot,
        complete,
        nodes: cap.nodes,
        edges: cap.edges,
        roots: cap.roots,
        bytes: cap.bytes,
        pause_ns,
        agent_ns: cap.agent_ns,
        problem,
    };
    log_info!("heap {summary}; events {:?}", cap.events);
    summary
}

/// Finds the declaring class of the static roots (the runtime's event names the field alone),
/// after the collection, on the snapshot's thread, and fills each `HeapStaticRoots.classes`
/// (`Namespace.Class`, or empty). Returns (roots named, non-thread static roots).
///
/// Exact or nothing: a candidate is a static, non-literal field of that name in a non-generic
/// type of a loaded module's metadata; its class's field address in the root's app domain
/// (`GetAppDomainStaticAddress`: the slot of a reference-typed field, the boxed value's data of a
/// value-typed one) must be the root's slot (or its object's data), or the root keeps its field
/// name alone. Only names that exactly one type of the modules' metadata declares are checked:
/// `GetClassFromToken` loads a type that is not loaded yet, and the type of a unique name is
/// loaded (its static holds an object); a name several types declare (`Instance`, `s_default`)
/// keeps its field name rather than load the others. Thread statics keep their field name.
fn name_static_classes(s: &Context, domain: usize, records: &mut [Record]) -> (usize, usize) {
    use std::collections::HashMap;
    let mut wanted: HashMap<String, Vec<(usize, usize)>> = HashMap::new();
    for (ri, r) in records.iter_mut().enumerate() {
        if let Record::HeapStaticRoots(x) = r {
            x.classes = vec![String::new(); x.names.len()];
            for (i, name) in x.names.iter().enumerate() {
                let thread_static = x.flags.get(i).is_some_and(|f| f & 1 != 0);
                if !thread_static && !name.is_empty() {
                    wanted.entry(name.clone()).or_default().push((ri, i));
                }
            }
        }
    }
    let statics = wanted.values().map(Vec::len).sum();
    if wanted.is_empty() || domain == 0 {
        log_info!("heap snapshot: {} static roots, app domain 0x{domain:x}: no declaring class looked for", statics);
        return (0, statics);
    }
    let modules = match s.info.enum_modules() {
        Ok(m) => m,
        Err(e) => {
            log_warn!("heap snapshot: static roots keep their field names: {e}");
            return (0, statics);
        }
    };
    // name → (module, TypeDef, FieldDef) of every type declaring a static of that name.
    let mut candidates: HashMap<String, Vec<(usize, u32, u32)>> = HashMap::new();
    for m in modules {
        let Some(md) = s.names.module_metadata(m) else { continue };
        for (td, field, name) in md.static_fields(|n| wanted.contains_key(n)).unwrap_or_default() {
            candidates.entry(name).or_default().push((m, td, field));
        }
    }
    log_info!(
        "heap snapshot: {} static field names, {} declared in the metadata of the loaded modules, {} by one type",
        wanted.len(),
        candidates.len(),
        candidates.values().filter(|c| c.len() == 1).count()
    );
    let mut named = 0;
    for (name, roots) in &wanted {
        let Some(&[(module, td, field)]) = candidates.get(name).map(Vec::as_slice) else { continue };
        let Ok(class) = s.info.get_class_from_token(module, td) else { continue };
        let Ok(address) = s.info.get_app_domain_static_address(class, field, domain) else { continue };
        for &(ri, i) in roots {
            let Record::HeapStaticRoots(x) = &mut records[ri] else { continue };
            let (slot, object) = (x.slots[i] as usize, x.objects[i] as usize);
            // A value-typed static is a box: its data follows the object's method table pointer.
            if address != 0 && (address == slot || address == object.wrapping_add(8)) {
                x.classes[i] = s.names.class_name(class).to_string();
                named += 1;
            }
        }
    }
    (named, statics)
}

/// Takes a snapshot on a thread of its own (the runtime makes the thread that asks for the
/// collection one of its threads; the caller's thread stays as it was) and waits for it, at most
/// `wait`.
pub(crate) fn take_on_own_thread(
    s: &'static Context,
    st: &'static HeapState,
    why: u8,
    wait: Duration,
) -> Option<Summary> {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new().name("clrprof-heap".into()).spawn(move || {
        let r = std::panic::catch_unwind(|| take(s, st, why));
        let _ = tx.send(r.ok());
    });
    if let Err(e) = spawned {
        log_warn!("heap snapshot: cannot start its thread ({e})");
        return None;
    }
    rx.recv_timeout(wait).ok().flatten()
}

/// Starts the timer of `CLRPROF_HEAP_SNAPSHOT_AT`, if any: one thread that sleeps until each time
/// (since the agent started) and takes a snapshot, until the run stops.
pub(crate) fn schedule(s: &'static Context, st: &'static HeapState) {
    let times = s.config.heap.at_ns.clone();
    if times.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new().name("clrprof-heap-timer".into()).spawn(move || {
        for t in times {
            while s.now() < t {
                if s.is_stopped() {
                    return;
                }
                std::thread::sleep(Duration::from_nanos((t - s.now()).min(20_000_000)));
            }
            if s.is_stopped() {
                return;
            }
            if std::panic::catch_unwind(|| take(s, st, trigger::TIME)).is_err() {
                log_warn!("heap snapshot at {} ms failed", t / 1_000_000);
            }
        }
    });
    if let Err(e) = spawned {
        log_warn!("heap snapshots: cannot start the timer thread ({e}); no timed snapshots");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(index: u32, count: u32) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&index.to_le_bytes());
        d.extend_from_slice(&count.to_le_bytes());
        d.extend_from_slice(&7u16.to_le_bytes());
        d
    }

    use crate::events::payload::utf16z_bytes as utf16z;

    #[test]
    fn times_parse_with_units() {
        assert_eq!(parse_duration("500ms"), Some(500_000_000));
        assert_eq!(parse_duration("2.5s"), Some(2_500_000_000));
        assert_eq!(parse_duration(" 3 "), Some(3_000_000_000));
        assert_eq!(parse_duration("1m"), Some(60_000_000_000));
        for bad in ["", "x", "-1s", "1h", "nan", "1e30"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        let env = |k: &str| match k {
            "CLRPROF_HEAP_SNAPSHOT_AT" => Some("2s, 500ms,2s".to_string()),
            "CLRPROF_HEAP_SNAPSHOT" => Some("1".to_string()),
            "CLRPROF_HEAP_BUFFER_MB" => Some("8".to_string()),
            _ => None,
        };
        let mut problems = Vec::new();
        let c = HeapConfig::from_lookup(&env, &mut problems);
        assert_eq!(c.at_ns, vec![500_000_000, 2_000_000_000]);
        assert!(c.on_attach);
        assert_eq!(c.buffer_mb, 4096);
        assert_eq!(problems.len(), 1, "{problems:?}");
        let env = |k: &str| (k == "CLRPROF_HEAP_SNAPSHOT_AT").then(|| "2s,soon".to_string());
        let mut problems = Vec::new();
        assert!(HeapConfig::from_lookup(&env, &mut problems).at_ns.is_empty());
        assert_eq!(problems[0].variable, "CLRPROF_HEAP_SNAPSHOT_AT");
    }

    #[test]
    fn events_pack_and_losses_are_counted() {
        let mut c = Capture::new(1, 1 << 20);
        let mut d = header(0, 2);
        for (a, size, t, e) in [(0x1000u64, 24u64, 0x50u64, 1u64), (0x1018, 1048, 0x60, 0)] {
            for v in [a, size, t, e] {
                d.extend_from_slice(&v.to_le_bytes());
            }
        }
        c.add(EVENT_NODE, &d);
        let mut e = header(0, 1);
        e.extend_from_slice(&0x1018u64.to_le_bytes());
        e.extend_from_slice(&0u32.to_le_bytes());
        c.add(EVENT_EDGE, &e);
        let mut r = header(0, 1);
        r.extend_from_slice(&0x1000u64.to_le_bytes());
        r.push(2);
        r.extend_from_slice(&1u32.to_le_bytes());
        r.extend_from_slice(&0x77u64.to_le_bytes());
        c.add(EVENT_ROOT_EDGE, &r);
        let mut sv = Vec::new();
        sv.extend_from_slice(&1u32.to_le_bytes());
        sv.extend_from_slice(&9u64.to_le_bytes());
        sv.extend_from_slice(&7u16.to_le_bytes());
        for v in [0x9000u64, 0x1000, 0x50] {
            sv.extend_from_slice(&v.to_le_bytes());
        }
        sv.extend_from_slice(&0u32.to_le_bytes());
        sv.extend(utf16z("Sessions"));
        c.add(EVENT_STATIC_VAR, &sv);
        let mut ty = Vec::new();
        ty.extend_from_slice(&1u32.to_le_bytes());
        ty.extend_from_slice(&7u16.to_le_bytes());
        ty.extend_from_slice(&0x50u64.to_le_bytes());
        ty.extend_from_slice(&0u64.to_le_bytes());
        ty.extend_from_slice(&0u32.to_le_bytes());
        ty.extend_from_slice(&0u32.to_le_bytes());
        ty.push(0x12);
        ty.extend(utf16z("HeapLeak.Session"));
        ty.extend_from_slice(&0u32.to_le_bytes());
        c.add(EVENT_BULK_TYPE, &ty);
        assert_eq!((c.nodes, c.edges, c.roots, c.bytes, c.node_edges), (2, 1, 2, 1072, 1));
        assert_eq!(c.events, [1, 1, 1, 1, 0, 1]);
        assert_eq!((c.bad_events, c.gaps, c.dropped_events), (0, 0, 0));
        match &c.records[3] {
            Record::HeapStaticRoots(s) => assert_eq!((s.names[0].as_str(), s.objects[0]), ("Sessions", 0x1000)),
            other => panic!("{other:?}"),
        }
        match &c.records[4] {
            Record::HeapTypes(t) => assert_eq!((t.ids[0], t.names[0].as_str()), (0x50, "HeapLeak.Session")),
            other => panic!("{other:?}"),
        }
        // A node event that skips index 1: one event lost upstream.
        let mut d2 = header(2, 0);
        c.add(EVENT_NODE, &d2);
        assert_eq!(c.gaps, 1);
        // A payload whose count does not match its length: counted, not kept.
        d2 = header(3, 5);
        c.add(EVENT_NODE, &d2);
        assert_eq!(c.bad_events, 1);
        // Beyond the buffer: dropped and counted.
        let mut small = Capture::new(2, 1);
        small.add(EVENT_NODE, &d);
        small.add(EVENT_NODE, &d);
        assert_eq!((small.records.len(), small.dropped_events), (1, 1));
    }
}
