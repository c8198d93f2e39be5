//! `--view calltree`: the indented top-down call tree with counts, inclusive/exclusive cost and
//! share of the total; merged over threads or one tree per thread (`--by-thread`).

use clrprof_model::Profile;
use clrprof_query::costs::call_tree;
use clrprof_query::select;

use super::text_table::{Align::*, TextTable};
use super::{fmt_value, percent, title, with_unit, ReportOptions, Result};

pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let view = call_tree(p, &opts.cost_query(p)?, opts.thread.as_deref());
    let m = view.metric;
    let mut out = title(p, "call tree");
    out += &select::weight_note(p, m);
    out += "\n";
    let instrumented = select::is_instrumented(m);
    let unit = if select::is_time(m) { "ms".to_string() } else { m.name().to_string() };
    let (h_incl, h_excl) = (format!("INCL {unit}"), format!("EXCL {unit}"));
    for g in &view.groups {
        out += &format!("\n{}: total {}\n", g.label, fmt_value(m, g.total));
        let mut t = TextTable::new(&[
            ("INCL %", Right),
            (h_incl.as_str(), Right),
            (h_excl.as_str(), Right),
            (if instrumented { "CALLS" } else { "SAMPLES" }, Right),
            ("FUNCTION", Left),
        ]);
        for node in &g.rows {
            let v = m.of(&node.inclusive);
            // Calls into this very node; samples (or objects) anywhere below it.
            let count = if instrumented { node.self_cost.calls } else { select::measure(m, &node.inclusive).0 };
            t.row(vec![
                percent(v, g.total),
                fmt_value(m, v),
                fmt_value(m, m.of(&node.self_cost)),
                count.to_string(),
                format!("{}{}", "  ".repeat(node.depth), node.name),
            ]);
        }
        out += &t.render();
        let h = &g.hidden;
        if h.rows > 0 {
            out += &format!(
                "{} {} below {}% hidden: {}, {}% of the total, included in their callers' INCL; \
                 --min-percent 0 shows them\n",
                h.rows,
                if h.rows == 1 { "row" } else { "rows" },
                h.min_percent,
                with_unit(m, h.value),
                percent(h.value, g.total),
            );
        }
    }
    Ok(out)
}
