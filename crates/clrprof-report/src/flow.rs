//! `--view flow`: the flow-trace profiler's log — every enter/leave/tailcall/unwind per thread in
//! order, indented by nesting (`record --instrument --flow`).

use std::collections::HashMap;

use clrprof_model::Profile;
use clrprof_query::select::thread_label;
use clrprof_query::{QueryError, Threads};

use super::{ms, title, ReportOptions, Result};

pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    if p.flow.is_empty() {
        return Err(QueryError::NoData("this trace has no flow events: record with --instrument --flow".into()).into());
    }
    let names: HashMap<u64, &str> = p.functions.iter().map(|f| (f.id, f.name.as_str())).collect();
    let wanted = Threads::resolve(p, opts.thread.as_deref())?;
    let mut out = title(p, "flow trace");
    for t in &p.flow {
        if !wanted.contains(t.os_tid) {
            continue;
        }
        out += &format!("\nthread {}: {} events", thread_label(p, t.os_tid), t.len());
        if t.dropped > 0 {
            out += &format!(" ({} dropped: the agent's flow buffer was full)", t.dropped);
        }
        out += "\n";
        let mut depth: usize = 0;
        let n = opts.top.unwrap_or(t.len()).min(t.len());
        for e in t.events().take(n) {
            let name = names.get(&e.function).copied().unwrap_or("<unknown function>");
            let (mark, before, after) = match e.kind {
                0 => (">", depth, depth + 1),
                1 => ("<", depth.saturating_sub(1), depth.saturating_sub(1)),
                2 => ("<tail", depth.saturating_sub(1), depth.saturating_sub(1)),
                _ => ("<unwind", depth.saturating_sub(1), depth.saturating_sub(1)),
            };
            out += &format!("{:>12} ms  {}{mark} {name}\n", ms(e.ts), "  ".repeat(before));
            depth = after;
        }
    }
    Ok(out)
}
