//! `--view summary`: the flat function summary — every called function with its call count
//! (instrumented), or its samples (sampled), most first.

use clrprof_model::Profile;
use clrprof_query::costs::summary;
use clrprof_query::select;

use super::text_table::{Align::*, TextTable};
use super::{fmt_value, title, ReportOptions, Result};

pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let view = summary(p, &opts.cost_query(p)?);
    let m = view.metric;
    let g = &view.groups[0];
    let instrumented = select::is_instrumented(m);
    let key =
        |r: &clrprof_query::costs::FunctionStats| if instrumented { r.self_cost.calls } else { m.of(&r.self_cost) };
    let mut out = title(p, "function summary");
    let probes = p.instrumentation.as_ref().filter(|i| i.il_probes);
    if probes.is_some() && instrumented {
        out += &select::weight_note(p, m);
        out += "\n";
    }
    out += &format!(
        "\n{} functions, {} {}\n",
        g.count,
        if instrumented { g.total.to_string() } else { fmt_value(m, g.total) },
        if instrumented { "calls (exact)" } else { m.name() }
    );
    let mut t =
        TextTable::new(&[(if instrumented { "CALLS" } else { m.name() }, Right), ("MODULE", Left), ("FUNCTION", Left)]);
    for r in &g.rows {
        t.row(vec![
            if instrumented { key(r).to_string() } else { fmt_value(m, key(r)) },
            r.module.clone(),
            r.name.clone(),
        ]);
    }
    out += &t.render();
    if let Some(i) = probes {
        out += &uncounted(p, i);
    }
    Ok(out)
}

/// `record --count`: the methods in scope the probes could not count, by name, with the reason —
/// listed apart, never as 0 calls.
pub(crate) fn uncounted(p: &Profile, i: &clrprof_model::Instrumentation) -> String {
    if i.uncounted.is_empty() {
        return String::new();
    }
    let names: std::collections::HashMap<u64, &str> = p.functions.iter().map(|f| (f.id, f.name.as_str())).collect();
    let mut rows: Vec<(String, &str)> =
        i.uncounted.iter().map(|u| (u.name_in(&names), clrprof_model::counts::uncounted_reason(u.reason))).collect();
    rows.sort();
    rows.dedup();
    let mut out = format!("\n{} methods uncounted (no call count, not zero):\n", rows.len());
    let mut t = TextTable::new(&[("FUNCTION", Left), ("WHY", Left)]);
    for (n, why) in rows {
        t.row(vec![n, why.to_string()]);
    }
    out += &t.render();
    out
}
