//! Heap snapshots of a trace (the `Heap*` records the agent writes for `clrprof heap` and
//! `record --heap-snapshot-at`) fed to `clrprof-heap`'s
//! [`SnapshotBuilder`], one [`Snapshot`] each, in trace order.
//!
//! The references of a snapshot come as one list in the order of its objects' reference counts
//! (the runtime's `GCBulkNode` / `GCBulkEdge` events): the loader puts both lists in event order
//! (`seq`) and hands each object its share. A snapshot is marked incomplete — never silently
//! partial — when its end record is missing (the trace was cut or the process died during the
//! dump), when the agent says it lost or could not parse events, when an event of the sequence is
//! missing here, or when the reference counts and the references do not match. After a missing
//! node or reference event the references cannot be attributed any more: the objects are kept,
//! the references from there on are not (and counted in the reason).

use std::collections::BTreeMap;

use clrprof_heap::{RootKind, Snapshot, SnapshotBuilder, SnapshotInfo};
use clrprof_trace::heap::{self as packed, root_flags, root_kind};
use clrprof_trace::{Record, TraceReader, TraceSource};

use crate::LoadError;

/// One snapshot's records as they were read.
#[derive(Default)]
struct Parts {
    start_ts: u64,
    trigger: u8,
    started: bool,
    types: Vec<clrprof_trace::HeapTypes>,
    nodes: BTreeMap<u32, (u32, Vec<u8>)>,
    edges: BTreeMap<u32, (u32, Vec<u8>)>,
    roots: Vec<clrprof_trace::HeapRoots>,
    statics: Vec<clrprof_trace::HeapStaticRoots>,
    dependents: Vec<clrprof_trace::HeapDependentEdges>,
    end: Option<clrprof_trace::HeapSnapshotEnd>,
    /// Records of this snapshot whose `seq` came twice (kept once).
    duplicates: u64,
}

/// Every heap snapshot of a trace, in trace order. A trace cut short gives the snapshots it
/// holds, the last one marked incomplete if its end is missing; a file that is no trace is an
/// error.
pub fn heap_snapshots(source: TraceSource) -> Result<Vec<Snapshot>, LoadError> {
    let mut reader = TraceReader::open(source).map_err(LoadError::Open)?;
    let mut parts: BTreeMap<u32, Parts> = BTreeMap::new();
    let mut records = 0u64;
    let mut cut: Option<String> = None;
    loop {
        let r = reader.poll_each(|r| {
            records += 1;
            take(&mut parts, r)
        });
        match r {
            Ok(0) if reader.at_end() => break,
            Ok(_) => {}
            Err(e) => {
                if records == 0 {
                    return Err(LoadError::Decode { error: e, records });
                }
                cut = Some(e.to_string());
                break;
            }
        }
    }
    match reader.finish() {
        Ok(Some(t)) => cut = cut.or(Some(t.to_string())),
        Ok(None) => {}
        Err(e) if records == 0 => return Err(LoadError::Decode { error: e, records }),
        Err(e) => cut = cut.or(Some(e.to_string())),
    }
    Ok(parts.into_values().map(|p| build(p, cut.as_deref())).collect())
}

fn take(parts: &mut BTreeMap<u32, Parts>, r: Record) {
    let dup = |p: &mut Parts, fresh: bool| {
        if !fresh {
            p.duplicates += 1;
        }
    };
    match r {
        Record::HeapSnapshotStart(s) => {
            let p = parts.entry(s.snapshot).or_default();
            p.start_ts = s.ts;
            p.trigger = s.trigger;
            p.started = true;
        }
        Record::HeapTypes(t) => parts.entry(t.snapshot).or_default().types.push(t),
        Record::HeapNodes(n) => {
            let p = parts.entry(n.snapshot).or_default();
            let fresh = p.nodes.insert(n.seq, (n.count, n.packed)).is_none();
            dup(p, fresh);
        }
        Record::HeapEdges(e) => {
            let p = parts.entry(e.snapshot).or_default();
            let fresh = p.edges.insert(e.seq, (e.count, e.packed)).is_none();
            dup(p, fresh);
        }
        Record::HeapRoots(r) => parts.entry(r.snapshot).or_default().roots.push(r),
        Record::HeapStaticRoots(s) => parts.entry(s.snapshot).or_default().statics.push(s),
        Record::HeapDependentEdges(d) => parts.entry(d.snapshot).or_default().dependents.push(d),
        Record::HeapSnapshotEnd(e) => {
            let k = e.snapshot;
            parts.entry(k).or_default().end = Some(e)
        }
        _ => {}
    }
}

/// The display name of a type: the runtime's name, with generic arguments named by their ids
/// when the name does not already carry them (`List`1` → `List<HeapLeak.Session>`).
fn type_names(types: &[clrprof_trace::HeapTypes]) -> BTreeMap<u64, String> {
    let mut raw: BTreeMap<u64, (String, Vec<u64>)> = BTreeMap::new();
    for t in types {
        let mut at = 0usize;
        for (i, id) in t.ids.iter().enumerate() {
            let n = t.param_counts.get(i).copied().unwrap_or(0) as usize;
            let params = t.params.get(at..at + n).map(|p| p.to_vec()).unwrap_or_default();
            at += n;
            raw.insert(*id, (t.names.get(i).cloned().unwrap_or_default(), params));
        }
    }
    let mut out = BTreeMap::new();
    for (id, _) in raw.iter() {
        out.insert(*id, display(&raw, *id, 0));
    }
    out
}

/// The runtime's spelling of generic instantiations in C# form: `List`1[App.Item]` →
/// `List<App.Item>`, `Entry[System.Int32,App.Item][]` → `Entry<System.Int32, App.Item>[]`;
/// array brackets (`[]`, `[,]`) stay.
pub fn csharp_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let b: Vec<char> = name.chars().collect();
    let mut i = 0;
    // Depth of generic brackets opened, and whether each open bracket is generic.
    let mut stack: Vec<bool> = Vec::new();
    while i < b.len() {
        let c = b[i];
        match c {
            '[' => {
                let next = b.get(i + 1).copied();
                let generic = !matches!(next, Some(']') | Some(',') | None);
                if generic {
                    // Drop the arity (`1) written just before.
                    if let Some(tick) = out.rfind('`') {
                        if out[tick + 1..].chars().all(|d| d.is_ascii_digit()) && tick + 1 < out.len() {
                            out.truncate(tick);
                        }
                    }
                    out.push('<');
                } else {
                    out.push('[');
                }
                stack.push(generic);
            }
            ']' => match stack.pop() {
                Some(true) => out.push('>'),
                _ => out.push(']'),
            },
            ',' if stack.last() == Some(&true) => out.push_str(", "),
            _ => out.push(c),
        }
        i += 1;
    }
    out
}

fn display(raw: &BTreeMap<u64, (String, Vec<u64>)>, id: u64, depth: u32) -> String {
    let Some((name, params)) = raw.get(&id) else { return format!("[type 0x{id:x}]") };
    let name = &csharp_name(name);
    if depth > 8 {
        return name.clone();
    }
    // A generic type whose name ends in `N (arity) without its arguments.
    match name.rsplit_once('`') {
        Some((base, arity)) if !params.is_empty() && arity.chars().all(|c| c.is_ascii_digit()) => {
            let args: Vec<String> = params.iter().map(|p| display(raw, *p, depth + 1)).collect();
            format!("{base}<{}>", args.join(", "))
        }
        _ => name.clone(),
    }
}

fn root_of(r: &packed::HeapRoot) -> RootKind {
    match r.kind {
        root_kind::STACK => RootKind::Stack,
        root_kind::FINALIZER => RootKind::FinalizerQueue,
        root_kind::HANDLE if r.flags & root_flags::WEAK != 0 => RootKind::WeakHandle,
        root_kind::HANDLE if r.flags & root_flags::PINNING != 0 => RootKind::PinnedHandle,
        root_kind::HANDLE if r.flags & root_flags::REF_COUNTED != 0 => RootKind::RefCountedHandle,
        root_kind::HANDLE => RootKind::StrongHandle,
        _ => RootKind::Other,
    }
}

fn build(p: Parts, cut: Option<&str>) -> Snapshot {
    let mut problems: Vec<String> = Vec::new();
    let mut b = SnapshotBuilder::new();
    for (id, name) in type_names(&p.types) {
        b.type_name(id, &name);
    }
    // Objects, in event order; each with its number of references.
    let mut owners: Vec<(u64, u64)> = Vec::new();
    let mut node_gap = None;
    for (want, (&seq, (count, bytes))) in p.nodes.iter().enumerate() {
        if seq != want as u32 && node_gap.is_none() {
            node_gap = Some(want as u32);
        }
        let attributable = node_gap.is_none();
        let r = packed::unpack_nodes(bytes, *count, |n| {
            b.object(n.addr, n.type_id, n.size);
            if attributable {
                owners.push((n.addr, n.edges));
            }
        });
        if let Err(e) = r {
            problems.push(format!("node event {seq}: {e}"));
            node_gap = node_gap.or(Some(seq));
        }
    }
    if let Some(g) = node_gap {
        problems.push(format!("object events missing from event {g} on"));
    }
    // References, in event order, handed to the objects in turn.
    let mut owner = owners.iter().copied();
    let (mut from, mut left) = (0u64, 0u64);
    let mut unattributed = 0u64;
    let mut edge_gap = None;
    let mut edges_seen = 0u64;
    for (want, (&seq, (count, bytes))) in p.edges.iter().enumerate() {
        if seq != want as u32 {
            edge_gap = Some(want as u32);
            break;
        }
        let r = packed::unpack_edges(bytes, *count, |to| {
            edges_seen += 1;
            while left == 0 {
                match owner.next() {
                    Some((a, n)) => (from, left) = (a, n),
                    None => break,
                }
            }
            if left == 0 {
                unattributed += 1;
                return;
            }
            left -= 1;
            b.edge(from, to, None);
        });
        if let Err(e) = r {
            problems.push(format!("reference event {seq}: {e}"));
            edge_gap = Some(seq);
            break;
        }
    }
    if let Some(g) = edge_gap {
        problems.push(format!("reference events missing from event {g} on: later references not kept"));
    }
    let owed: u64 = left + owner.map(|(_, n)| n).sum::<u64>();
    if (owed > 0 || unattributed > 0) && edge_gap.is_none() && node_gap.is_none() {
        problems.push(format!(
            "the objects hold {} references but {edges_seen} were recorded",
            edges_seen + owed - unattributed
        ));
    }
    for r in &p.roots {
        let res = packed::unpack_roots(&r.packed, r.count, |x| b.root(x.object, root_of(&x), ""));
        if let Err(e) = res {
            problems.push(format!("root event {}: {e}", r.seq));
        }
    }
    for s in &p.statics {
        for (i, obj) in s.objects.iter().enumerate() {
            let field = s.names.get(i).map(String::as_str).unwrap_or("");
            // `Namespace.Class.field` when the agent found the declaring class (newer agents),
            // else the field's name alone.
            match s.classes.get(i).filter(|c| !c.is_empty()) {
                Some(class) => b.root(*obj, RootKind::StaticField, &format!("{class}.{field}")),
                None => b.root(*obj, RootKind::StaticField, field),
            }
        }
    }
    for d in &p.dependents {
        let res = packed::unpack_dependents(&d.packed, d.count, |k, v| b.edge(k, v, Some("[dependent]")));
        if let Err(e) = res {
            problems.push(format!("dependent-handle event {}: {e}", d.seq));
        }
    }
    if p.duplicates > 0 {
        problems.push(format!("{} events recorded twice (kept once)", p.duplicates));
    }
    let reason = match p.trigger {
        0 => "clrprof heap".to_string(),
        1 => format!("at {:.1} s", p.start_ts as f64 / 1e9),
        t => format!("trigger {t}"),
    };
    let (complete, dropped, pause) = match &p.end {
        Some(e) => {
            if !e.complete {
                problems.insert(
                    0,
                    if e.problem.is_empty() { "the agent marked it incomplete".into() } else { e.problem.clone() },
                );
            }
            (e.complete, e.dropped_events, Some(e.pause_ns))
        }
        None => {
            let why = match cut {
                Some(c) => format!("its end is missing (the trace is cut: {c})"),
                None => "its end is missing (the process ended or the agent stopped during the dump)".to_string(),
            };
            problems.insert(0, why);
            (false, 0, None)
        }
    };
    if !p.started {
        problems.push("its start record is missing".into());
    }
    let complete = complete && problems.is_empty();
    let reason = if complete { reason } else { format!("{reason}; incomplete: {}", problems.join("; ")) };
    b.finish(SnapshotInfo {
        ts_ns: p.start_ts,
        gc_index: 0,
        reason,
        complete,
        dropped_events: dropped,
        pause_ns: pause,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_trace::heap::{EdgePacker, HeapNode, HeapRoot, NodePacker, RootPacker};
    use clrprof_trace::*;

    /// A snapshot of three objects: a static list holding two items, the second with no
    /// references; the edges split over two events.
    fn records(end: bool) -> Vec<Record> {
        let mut n1 = NodePacker::default();
        n1.push(&HeapNode { addr: 0x1000, size: 32, type_id: 0xa, edges: 2 });
        let mut n2 = NodePacker::default();
        n2.push(&HeapNode { addr: 0x1020, size: 24, type_id: 0xb, edges: 1 });
        n2.push(&HeapNode { addr: 0x1038, size: 24, type_id: 0xb, edges: 0 });
        let mut e1 = EdgePacker::default();
        e1.push(0x1020);
        let mut e2 = EdgePacker::default();
        e2.push(0x1038);
        e2.push(0x1038);
        let mut r = RootPacker::default();
        r.push(&HeapRoot { object: 0x1020, kind: root_kind::STACK, flags: 0, id: 0 });
        let mut v: Vec<Record> = vec![
            HeapSnapshotStart { ts: 5, snapshot: 1, trigger: 0 }.into(),
            HeapTypes {
                snapshot: 1,
                ids: vec![0xa, 0xb],
                names: vec!["System.Collections.Generic.List`1".into(), "App.Item".into()],
                param_counts: vec![1, 0],
                params: vec![0xb],
            }
            .into(),
            // Out of order: the loader sorts by seq.
            HeapEdges { snapshot: 1, seq: 1, count: e2.count, packed: e2.packed }.into(),
            HeapNodes { snapshot: 1, seq: 1, count: n2.count, packed: n2.packed }.into(),
            HeapNodes { snapshot: 1, seq: 0, count: n1.count, packed: n1.packed }.into(),
            HeapEdges { snapshot: 1, seq: 0, count: e1.count, packed: e1.packed }.into(),
            HeapRoots { snapshot: 1, seq: 0, count: r.count, packed: r.packed }.into(),
            HeapStaticRoots {
                snapshot: 1,
                seq: 0,
                slots: vec![0x9000],
                objects: vec![0x1000],
                types: vec![0xa],
                flags: vec![0],
                names: vec!["Items".into()],
                classes: vec!["App.Store".into()],
            }
            .into(),
        ];
        if end {
            v.push(
                HeapSnapshotEnd {
                    ts: 9,
                    snapshot: 1,
                    complete: true,
                    nodes: 3,
                    edges: 3,
                    roots: 2,
                    bytes: 80,
                    pause_ns: 4,
                    ..Default::default()
                }
                .into(),
            );
        }
        v
    }

    fn trace(records: &[Record]) -> Vec<u8> {
        let mut t = clrprof_trace::header().to_vec();
        t.extend(clrprof_trace::encode_records(records.iter()));
        t
    }

    #[test]
    fn a_snapshot_is_rebuilt_with_names_references_and_roots() {
        let snaps = heap_snapshots(TraceSource::Bytes(trace(&records(true)))).unwrap();
        assert_eq!(snaps.len(), 1);
        let s = &snaps[0];
        assert!(s.info.complete, "{:?}", s.info);
        assert_eq!(s.info.pause_ns, Some(4));
        assert_eq!(s.object_count(), 3);
        assert_eq!(s.edge_count(), 3);
        assert!(s.stats.is_clean(), "{:?}", s.stats);
        let names: Vec<String> = (0..3).map(|i| s.type_name(s.type_of(i)).to_string()).collect();
        assert_eq!(names, ["System.Collections.Generic.List<App.Item>", "App.Item", "App.Item"]);
        let statics: Vec<&str> =
            s.roots().iter().filter(|r| r.kind == RootKind::StaticField).map(|r| s.root_name(r)).collect();
        assert_eq!(statics, ["App.Store.Items"]);
    }

    #[test]
    fn a_static_without_its_class_is_named_by_its_field() {
        // As an older agent wrote it (no classes), or a class the agent could not find.
        let mut recs = records(true);
        for r in &mut recs {
            if let Record::HeapStaticRoots(s) = r {
                s.classes.clear();
            }
        }
        let snaps = heap_snapshots(TraceSource::Bytes(trace(&recs))).unwrap();
        let s = &snaps[0];
        let statics: Vec<&str> =
            s.roots().iter().filter(|r| r.kind == RootKind::StaticField).map(|r| s.root_name(r)).collect();
        assert_eq!(statics, ["Items"]);
    }

    #[test]
    fn a_cut_trace_or_a_lost_event_makes_the_snapshot_incomplete() {
        let snaps = heap_snapshots(TraceSource::Bytes(trace(&records(false)))).unwrap();
        assert!(!snaps[0].info.complete);
        assert!(snaps[0].info.reason.contains("its end is missing"), "{}", snaps[0].info.reason);
        // A whole trace cut inside its last block: read up to the damage, still incomplete.
        let mut t = trace(&records(true)[..4]);
        let full = trace(&records(true));
        t.extend_from_slice(&full[full.len() - 10..]);
        let snaps = heap_snapshots(TraceSource::Bytes(t)).unwrap();
        assert!(!snaps[0].info.complete);
        // The first node event lost: objects of the second kept, their references not attributed.
        let mut r = records(true);
        r.remove(4);
        let snaps = heap_snapshots(TraceSource::Bytes(trace(&r))).unwrap();
        let s = &snaps[0];
        assert!(!s.info.complete);
        assert!(s.info.reason.contains("object events missing from event 0"), "{}", s.info.reason);
        assert_eq!(s.object_count(), 2);
        assert_eq!(s.edge_count(), 0);
    }

    #[test]
    fn runtime_type_names_read_as_csharp() {
        assert_eq!(
            csharp_name("System.Collections.Generic.List`1[HeapLeak.Session]"),
            "System.Collections.Generic.List<HeapLeak.Session>"
        );
        assert_eq!(
            csharp_name("Entry[System.Int32,System.Diagnostics.Tracing.EventSource+EventMetadata][]"),
            "Entry<System.Int32, System.Diagnostics.Tracing.EventSource+EventMetadata>[]"
        );
        assert_eq!(csharp_name("System.Byte[]"), "System.Byte[]");
        assert_eq!(csharp_name("System.Int32[,]"), "System.Int32[,]");
        assert_eq!(csharp_name("D`2[System.String,L`1[System.Int32[]]]"), "D<System.String, L<System.Int32[]>>");
        assert_eq!(csharp_name("Odd`x[A]"), "Odd`x<A>");
        assert_eq!(csharp_name("Unbalanced]["), "Unbalanced][");
    }

    #[test]
    fn a_file_that_is_no_trace_is_an_error() {
        assert!(heap_snapshots(TraceSource::Bytes(b"hello, world, not a trace".to_vec())).is_err());
        assert!(heap_snapshots(TraceSource::Bytes(clrprof_trace::header().to_vec())).unwrap().is_empty());
    }
}
