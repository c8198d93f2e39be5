//! Text and JSON of the heap views. Every output starts with the snapshot's header: which snapshot, its
//! size, and — never silently — whether it is incomplete (then every figure is a lower bound) and what
//! the builder could not place.

use serde_json::{json, Value};

use crate::analysis::Analysis;
use crate::graph::Snapshot;
use crate::views::{DiffRow, DomNode, DomTree, PathRow, PathsView, TypeRow};

/// Which snapshot of a trace a view shows, for its header.
#[derive(Clone, Debug)]
pub struct Which {
    /// The trace (or file) it came from.
    pub source: String,
    /// 1-based position among the trace's snapshots.
    pub index: usize,
    /// How many snapshots the trace holds.
    pub of: usize,
}

/// Thousands-separated integer.
pub fn grouped(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn signed(v: i64) -> String {
    if v > 0 {
        format!("+{}", grouped(v as u64))
    } else if v < 0 {
        format!("-{}", grouped(v.unsigned_abs()))
    } else {
        "0".to_string()
    }
}

fn pct(part: u64, total: u64) -> String {
    if total == 0 {
        "-".to_string()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / total as f64)
    }
}

/// The header lines of a snapshot (ending in a blank line).
pub fn header_text(s: &Snapshot, a: Option<&Analysis>, w: &Which) -> String {
    let i = &s.info;
    let mut out = format!("Heap snapshot {} of {} of {}: ", w.index, w.of, w.source);
    if i.gc_index > 0 {
        out.push_str(&format!("gc {}, ", i.gc_index));
    }
    out.push_str(&format!("at {:.3} s", i.ts_ns as f64 / 1e9));
    if !i.reason.is_empty() {
        out.push_str(&format!(", {}", i.reason));
    }
    if let Some(p) = i.pause_ns {
        out.push_str(&format!(", paused {:.1} ms", p as f64 / 1e6));
    }
    out.push_str(&format!(
        "\n{} objects, {} bytes, {} references, {} roots\n",
        grouped(s.object_count() as u64),
        grouped(s.total_size()),
        grouped(s.edge_count() as u64),
        grouped(s.roots().len() as u64)
    ));
    if !i.complete {
        out.push_str("INCOMPLETE snapshot: part of the heap graph is missing");
        if i.dropped_events > 0 {
            out.push_str(&format!(" ({} heap-dump events lost)", grouped(i.dropped_events)));
        }
        out.push_str("; every count and size below is a lower bound.\n");
    }
    if let Some(a) = a {
        if a.unreachable > 0 {
            out.push_str(&format!(
                "{} objects ({} bytes) are reached from no reported root: counted in their types, retained by none.\n",
                grouped(a.unreachable),
                grouped(a.unreachable_bytes)
            ));
        }
    }
    let st = &s.stats;
    let mut notes = Vec::new();
    if st.dangling_edges > 0 {
        notes.push(format!("{} references to objects outside the snapshot", grouped(st.dangling_edges)));
    }
    if st.dangling_roots > 0 {
        notes.push(format!("{} roots to objects outside the snapshot", grouped(st.dangling_roots)));
    }
    if st.duplicate_objects > 0 {
        notes.push(format!("{} objects given twice", grouped(st.duplicate_objects)));
    }
    if !notes.is_empty() {
        out.push_str(&format!("Not in the graph: {}.\n", notes.join(", ")));
    }
    if st.unnamed_types > 0 {
        out.push_str(&format!("{} objects of types without a name, shown as [type 0x…].\n", grouped(st.unnamed_types)));
    }
    out.push('\n');
    out
}

/// The header as JSON.
pub fn header_json(s: &Snapshot, a: Option<&Analysis>, w: &Which) -> Value {
    let i = &s.info;
    let st = &s.stats;
    let mut v = json!({
        "source": w.source,
        "index": w.index,
        "of": w.of,
        "ts_ns": i.ts_ns,
        "gc_index": i.gc_index,
        "reason": i.reason,
        "complete": i.complete,
        "lower_bound": !i.complete,
        "dropped_events": i.dropped_events,
        "pause_ns": i.pause_ns,
        "objects": s.object_count(),
        "bytes": s.total_size(),
        "references": s.edge_count(),
        "roots": s.roots().len(),
        "dangling_edges": st.dangling_edges,
        "dangling_roots": st.dangling_roots,
        "duplicate_objects": st.duplicate_objects,
        "unnamed_types": st.unnamed_types,
    });
    if let Some(a) = a {
        v["reachable"] = json!(a.reachable);
        v["reachable_bytes"] = json!(a.reachable_bytes);
        v["unreachable"] = json!(a.unreachable);
        v["unreachable_bytes"] = json!(a.unreachable_bytes);
    }
    v
}

/// A simple right-aligned table: the last column left-aligned.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let n = headers.len();
    let mut w: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n - 1) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == n {
                l.push_str(&format!(" {c}"));
            } else {
                l.push_str(&format!(" {:>width$}", c, width = w[i]));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(headers);
    for r in rows {
        let cells: Vec<&str> = r.iter().map(|c| c.as_str()).collect();
        line(&cells);
    }
    out
}

/// The types view as text (`top` rows; `None` = all).
pub fn types_text(a: &Analysis, rows: &[TypeRow], top: Option<usize>, w: &Which) -> String {
    let s = a.snapshot;
    let mut out = header_text(s, Some(a), w);
    let total = a.reachable_bytes;
    let shown = top.unwrap_or(rows.len()).min(rows.len());
    let cells: Vec<Vec<String>> = rows[..shown]
        .iter()
        .map(|r| vec![grouped(r.retained), pct(r.retained, total), grouped(r.size), grouped(r.count), r.name.clone()])
        .collect();
    out.push_str(&table(&["retained", "%", "size", "count", "type"], &cells));
    if shown < rows.len() {
        let rest = &rows[shown..];
        out.push_str(&format!(
            " … {} more types: {} objects, {} bytes\n",
            grouped(rest.len() as u64),
            grouped(rest.iter().map(|r| r.count).sum()),
            grouped(rest.iter().map(|r| r.size).sum())
        ));
    }
    out
}

/// The types view as JSON.
pub fn types_json(a: &Analysis, rows: &[TypeRow], top: Option<usize>, w: &Which) -> Value {
    let shown = top.unwrap_or(rows.len()).min(rows.len());
    json!({
        "snapshot": header_json(a.snapshot, Some(a), w),
        "types": rows[..shown].iter().map(|r| json!({
            "name": r.name, "count": r.count, "size": r.size, "retained": r.retained,
        })).collect::<Vec<_>>(),
    })
}

fn root_label(root: &Option<(crate::RootKind, String)>) -> String {
    match root {
        Some((k, n)) if n.is_empty() => format!("  ← {}", k.as_str()),
        Some((k, n)) => format!("  ← {} {}", k.as_str(), n),
        None => String::new(),
    }
}

/// The dominator tree as text.
pub fn dominators_text(a: &Analysis, tree: &DomTree, w: &Which) -> String {
    let mut out = header_text(a.snapshot, Some(a), w);
    let total = tree.total;
    let mut rows: Vec<Vec<String>> =
        vec![vec![grouped(total), pct(total, total), String::new(), String::new(), "[roots]".to_string()]];
    fn walk(nodes: &[DomNode], more: (u64, u64), depth: usize, total: u64, rows: &mut Vec<Vec<String>>) {
        for n in nodes {
            let count = if n.count > 1 { format!(" ×{}", grouped(n.count)) } else { String::new() };
            rows.push(vec![
                grouped(n.retained),
                pct(n.retained, total),
                grouped(n.size),
                grouped(n.count),
                format!("{}{}{}{}", "  ".repeat(depth), n.type_name, count, root_label(&n.root)),
            ]);
            walk(&n.children, n.more, depth + 1, total, rows);
        }
        if more.0 > 0 {
            rows.push(vec![
                grouped(more.1),
                pct(more.1, total),
                String::new(),
                String::new(),
                format!("{}… {} more", "  ".repeat(depth), grouped(more.0)),
            ]);
        }
    }
    walk(&tree.children, tree.more, 1, total, &mut rows);
    out.push_str(&table(&["retained", "%", "size", "count", "dominator tree"], &rows));
    out
}

/// The dominator tree as JSON.
pub fn dominators_json(a: &Analysis, tree: &DomTree, w: &Which) -> Value {
    fn node(n: &DomNode) -> Value {
        json!({
            "type": n.type_name,
            "root": n.root.as_ref().map(|(k, name)| json!({"kind": k.as_str(), "name": name})),
            "count": n.count,
            "size": n.size,
            "retained": n.retained,
            "children": n.children.iter().map(node).collect::<Vec<_>>(),
            "more": {"count": n.more.0, "retained": n.more.1},
        })
    }
    json!({
        "snapshot": header_json(a.snapshot, Some(a), w),
        "dominators": {
            "retained": tree.total,
            "children": tree.children.iter().map(node).collect::<Vec<_>>(),
            "more": {"count": tree.more.0, "retained": tree.more.1},
        },
    })
}

/// One path as text: `static Ns.C.F → List<T>._items → T[] → T`; a run of consecutive objects of one type
/// (a linked list) is written once with its length: `Node ×997`.
pub fn path_line(p: &PathRow) -> String {
    let mut out = if p.root_name.is_empty() {
        p.root_kind.as_str().to_string()
    } else {
        format!("{} {}", p.root_kind.as_str(), p.root_name)
    };
    // Each node with the field its successor is referenced through.
    let steps: Vec<(&str, Option<&str>)> = p
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.type_name.as_str(), p.nodes.get(i + 1).and_then(|next| next.field.as_deref())))
        .collect();
    let mut i = 0;
    while i < steps.len() {
        let mut run = 1;
        while i + run < steps.len() && steps[i + run] == steps[i] {
            run += 1;
        }
        out.push_str(" → ");
        out.push_str(steps[i].0);
        if let Some(f) = steps[i].1 {
            out.push('.');
            out.push_str(f);
        }
        if run > 1 {
            out.push_str(&format!(" ×{}", grouped(run as u64)));
        }
        i += run;
    }
    out
}

/// The paths view as text.
pub fn paths_text(a: &Analysis, v: &PathsView, w: &Which) -> String {
    let mut out = header_text(a.snapshot, Some(a), w);
    out.push_str(&format!("Shortest paths from roots to {}: {} instances", v.type_name, grouped(v.instances)));
    if v.unreachable > 0 {
        out.push_str(&format!(", {} reached from no root", grouped(v.unreachable)));
    }
    out.push_str(&format!(
        "; they retain {} bytes, and all of them gone would free {} bytes\n\n",
        grouped(v.retained),
        grouped(v.freed_if_all_gone)
    ));
    let mut rows: Vec<Vec<String>> = v.paths.iter().map(|p| vec![grouped(p.count), path_line(p)]).collect();
    if v.more.0 > 0 {
        rows.push(vec![grouped(v.more.1), format!("… {} more paths", grouped(v.more.0))]);
    }
    out.push_str(&table(&["instances", "path (root → … → instance)"], &rows));
    out
}

/// The paths view as JSON.
pub fn paths_json(a: &Analysis, v: &PathsView, w: &Which) -> Value {
    json!({
        "snapshot": header_json(a.snapshot, Some(a), w),
        "type": v.type_name,
        "instances": v.instances,
        "unreachable": v.unreachable,
        "retained": v.retained,
        "freed_if_all_gone": v.freed_if_all_gone,
        "paths": v.paths.iter().map(|p| json!({
            "count": p.count,
            "root": {"kind": p.root_kind.as_str(), "name": p.root_name},
            "nodes": p.nodes.iter().map(|n| json!({"type": n.type_name, "field": n.field})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "more": {"count": v.more.0, "instances": v.more.1},
    })
}

/// The diff as text (`top` rows; `None` = all; unchanged types are left out).
pub fn diff_text(base: (&Snapshot, &Which), new: (&Snapshot, &Which), rows: &[DiffRow], top: Option<usize>) -> String {
    let mut out = String::from("Base: ");
    out.push_str(&header_text(base.0, None, base.1));
    out.push_str("New: ");
    out.push_str(&header_text(new.0, None, new.1));
    let changed: Vec<&DiffRow> = rows.iter().filter(|r| r.status() != "same").collect();
    let shown = top.unwrap_or(changed.len()).min(changed.len());
    let cells: Vec<Vec<String>> = changed[..shown]
        .iter()
        .map(|r| {
            vec![
                signed(r.delta_size),
                signed(r.delta_count),
                grouped(r.base_count),
                grouped(r.new_count),
                grouped(r.base_size),
                grouped(r.new_size),
                r.status().to_string(),
                r.name.clone(),
            ]
        })
        .collect();
    out.push_str(&table(
        &["Δ size", "Δ count", "base count", "new count", "base size", "new size", "status", "type"],
        &cells,
    ));
    if shown < changed.len() {
        out.push_str(&format!(" … {} more changed types\n", grouped((changed.len() - shown) as u64)));
    }
    let same = rows.len() - changed.len();
    if same > 0 {
        out.push_str(&format!(" ({} types unchanged)\n", grouped(same as u64)));
    }
    out
}

/// The diff as JSON (every type, unchanged ones included).
pub fn diff_json(base: (&Snapshot, &Which), new: (&Snapshot, &Which), rows: &[DiffRow], top: Option<usize>) -> Value {
    let shown = top.unwrap_or(rows.len()).min(rows.len());
    json!({
        "base": header_json(base.0, None, base.1),
        "new": header_json(new.0, None, new.1),
        "types": rows[..shown].iter().map(|r| json!({
            "name": r.name,
            "base_count": r.base_count,
            "new_count": r.new_count,
            "delta_count": r.delta_count,
            "base_size": r.base_size,
            "new_size": r.new_size,
            "delta_size": r.delta_size,
            "status": r.status(),
        })).collect::<Vec<_>>(),
    })
}
