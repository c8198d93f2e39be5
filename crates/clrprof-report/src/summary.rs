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
    Ok(out)
}
