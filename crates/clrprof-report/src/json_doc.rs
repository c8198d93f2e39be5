//! The report document as JSON, written as it is laid out: every object's keys sorted (as a
//! `serde_json::Value` lays them out, the document's form since it began), pretty-printed, with the
//! large arrays (`calltree`, `flow`) written element by element instead of held as one value.

use std::io::Write;

use clrprof_model::Profile;
use clrprof_query::document::{flow_kind, CallTreeDoc, ReportDocument};
use clrprof_query::select::Threads;
use serde_json::Value;

use crate::{ReportError, Result};

/// Writes the document of `p` for `threads` byte for byte as `to_string_pretty(&to_value(&doc))`
/// and a newline would, where `doc` was made with its flow events left out (`flow_left_out`): they
/// are laid out here from the profile's, as the document would have held them.
pub(crate) fn write(mut doc: ReportDocument, p: &Profile, threads: &Threads, out: &mut dyn Write) -> Result<()> {
    let calltree = doc.calltree.take();
    let flow = doc.flow.take();
    let mut v = serde_json::to_value(&doc)?;
    drop(doc);
    // Placeholders where the arrays go: top-level keys are the only ones indented by two spaces.
    let map = v.as_object_mut().expect("the document is an object");
    if calltree.is_some() {
        map.insert("calltree".into(), Value::Null);
    }
    if flow.is_some() {
        map.insert("flow".into(), Value::Null);
    }
    let text = serde_json::to_string_pretty(&v)?;
    drop(v);
    let mut cuts: Vec<(usize, &str)> = Vec::new();
    for (key, present) in [("calltree", calltree.is_some()), ("flow", flow.is_some())] {
        if present {
            let at = text.find(&format!("\n  \"{key}\": null")).expect("the placeholder is in the document");
            cuts.push((at + format!("\n  \"{key}\": ").len(), key));
        }
    }
    cuts.sort();
    let io = ReportError::Io;
    let mut from = 0;
    for (at, key) in cuts {
        out.write_all(&text.as_bytes()[from..at]).map_err(io)?;
        match key {
            "calltree" => array(calltree.as_deref().unwrap_or_default(), out)?,
            _ => flow_array(p, threads, out)?,
        }
        from = at + "null".len();
    }
    out.write_all(&text.as_bytes()[from..]).map_err(io)?;
    out.write_all(b"\n").map_err(io)
}

/// The call tree, at the document's second level, as the pretty printer lays it out there: each element
/// on its own lines, indented by four spaces (a JSON string holds no raw line break, so indenting
/// every line of an element laid out alone is the same text).
fn array(items: &[CallTreeDoc], out: &mut dyn Write) -> Result<()> {
    let io = ReportError::Io;
    if items.is_empty() {
        return out.write_all(b"[]").map_err(io);
    }
    out.write_all(b"[").map_err(io)?;
    for (i, n) in items.iter().enumerate() {
        // The keys in the order a `Value` sorts them; a million nodes laid out each through a
        // `Value` and a string of its own took most of the document's time.
        out.write_all(if i == 0 { b"\n    {\n" } else { b",\n    {\n" }).map_err(io)?;
        write!(
            out,
            "      \"calls\": {},\n      \"depth\": {},\n      \"exclusive_ns\": {},\n      \"id\": {},\n      \"inclusive_ns\": {},\n      \"name\": ",
            n.calls, n.depth, n.exclusive_ns, n.id, n.inclusive_ns
        )
        .map_err(io)?;
        serde_json::to_writer(&mut *out, &*n.name)?;
        match n.parent {
            Some(parent) => write!(out, ",\n      \"parent\": {parent}"),
            None => write!(out, ",\n      \"parent\": null"),
        }
        .map_err(io)?;
        write!(out, ",\n      \"profiler_ns\": {},\n      \"suspended_ns\": {}\n    }}", n.profiler_ns, n.suspended_ns)
            .map_err(io)?;
    }
    out.write_all(b"\n  ]").map_err(io)
}

/// The document's `flow` array (one object per thread: `dropped`, `events`, `os_tid`; an event:
/// `function`, `kind`, `ts_ns`), laid out from the profile's flow events one at a time.
fn flow_array(p: &Profile, threads: &Threads, out: &mut dyn Write) -> Result<()> {
    let names: std::collections::HashMap<u64, &str> = p.functions.iter().map(|f| (f.id, f.name.as_str())).collect();
    let mut out = std::io::BufWriter::new(out);
    let mut any = false;
    for t in p.flow.iter().filter(|t| threads.contains(t.os_tid)) {
        let sep: &[u8] = if any { b",\n    {\n" } else { b"[\n    {\n" };
        any = true;
        out.write_all(sep).map_err(ReportError::Io)?;
        write!(out, "      \"dropped\": {},\n      \"events\": ", t.dropped).map_err(ReportError::Io)?;
        let mut first = true;
        for e in t.events() {
            out.write_all(if first { b"[\n        {\n" } else { b",\n        {\n" }).map_err(ReportError::Io)?;
            first = false;
            let name = serde_json::to_string(names.get(&e.function).copied().unwrap_or(""))?;
            write!(
                out,
                "          \"function\": {name},\n          \"kind\": \"{}\",\n          \"ts_ns\": {}\n        }}",
                flow_kind(e.kind),
                e.ts
            )
            .map_err(ReportError::Io)?;
        }
        out.write_all(if first { b"[]" } else { b"\n      ]" }).map_err(ReportError::Io)?;
        write!(out, ",\n      \"os_tid\": {}\n    }}", t.os_tid).map_err(ReportError::Io)?;
    }
    out.write_all(if any { b"\n  ]" } else { b"[]" }).map_err(ReportError::Io)?;
    out.flush().map_err(ReportError::Io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_model::stacks::{Cost, FrameKey};
    use clrprof_query::document::{document_with, DocumentOptions};

    /// A profile with an exact call tree, flow events on three threads (one with none in the
    /// window it keeps, one dropping events), and function names that need escaping.
    fn profile() -> Profile {
        let mut p = Profile::default();
        let names = ["Main", "Quote\"d \\ name", "Tab\tname é", "Leaf"];
        for (i, n) in names.iter().enumerate() {
            p.functions.push(clrprof_model::Function { id: 100 + i as u64, name: n.to_string(), ..Default::default() });
        }
        let frames: Vec<_> = (0..4).map(|i| p.costs.stacks.intern_frame(FrameKey::Function(100 + i))).collect();
        for depth in 1..=4 {
            let s = p.costs.stacks.intern_stack(&frames[..depth]).unwrap();
            let cost = Cost { calls: depth as u64, time_ns: 1000 * depth as u64, ..Default::default() };
            p.costs.add(7, s, &cost);
        }
        for (tid, n, dropped) in [(7u32, 40u64, 0u64), (8, 0, 3), (9, 5, 0)] {
            let r = clrprof_trace::FlowEvents {
                os_tid: tid,
                kinds: (0..n).map(|i| (i % 5) as u8).collect(),
                functions: (0..n).map(|i| 100 + i % 5).collect(),
                ts: (0..n).map(|i| 10 + i * 7).collect(),
                dropped,
            };
            clrprof_model::instrumented::flow(&mut p.flow, &r);
        }
        p
    }

    /// The document written as it is laid out is the one `to_string_pretty` of its `Value` makes,
    /// byte for byte: with its arrays from the document, with the flow laid out from the profile,
    /// for every thread and for one.
    #[test]
    fn the_streamed_document_is_the_value_s_pretty_text() {
        let p = profile();
        for (threads, all) in [(Threads::all(), true), (Threads::only(vec![9]), false)] {
            for min_percent in [None, Some(30.0)] {
                let opts = DocumentOptions { calltree_min_percent: min_percent, ..Default::default() };
                let whole = document_with(&p, &threads, None, opts);
                assert_eq!(whole.calltree.as_ref().is_some_and(|c| c.len() > 1), all);
                assert!(whole.flow.as_ref().is_some_and(|f| !f.is_empty()));
                let mut want = serde_json::to_string_pretty(&serde_json::to_value(&whole).unwrap()).unwrap();
                want.push('\n');
                let left_out = document_with(&p, &threads, None, DocumentOptions { flow_left_out: true, ..opts });
                let mut got = Vec::new();
                write(left_out, &p, &threads, &mut got).unwrap();
                assert_eq!(String::from_utf8(got).unwrap(), want);
            }
        }
    }
}
