//! `--view callers --function NAME`: a butterfly — who calls NAME and whom NAME calls, with exact
//! call counts and the cost each edge carries — and the entry points (functions with no
//! managed caller).

use clrprof_model::Profile;
use clrprof_query::costs::{callers, EdgeStats};
use clrprof_query::select;
use serde_json::json;

use super::text_table::{Align::*, TextTable};
use super::{fmt_value, percent, title, ReportOptions, Result};

/// `--view callers --function NAME --format json`: `{"weight", "unit", "function": {"names",
/// "calls", "self", "total", "callers": [{"function", "calls", "cost", "sites": [{"file", "line",
/// "calls", "cost"}]}], "callees": [...]}}` (a caller `null`: an entry point; `sites` only on callers).
pub fn json(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let view = callers(p, &opts.cost_query(p)?, opts.function.as_deref())?;
    let m = view.metric;
    let edges = |v: &[EdgeStats], with_sites: bool| -> Vec<serde_json::Value> {
        v.iter()
            .map(|e| {
                let mut o = json!({"function": e.name, "calls": e.calls, "cost": m.of(&e.cost)});
                if with_sites {
                    o["sites"] = e
                        .sites
                        .iter()
                        .map(|s| json!({"file": s.file, "line": s.line, "calls": s.calls, "cost": m.of(&s.cost)}))
                        .collect();
                }
                o
            })
            .collect()
    };
    let function = view.function.as_ref().map(|b| {
        json!({
            "names": b.names, "calls": b.calls, "self": m.of(&b.self_cost), "total": m.of(&b.inclusive),
            "callers": edges(&b.callers, true), "callees": edges(&b.callees, false),
        })
    });
    let doc = json!({"weight": m.name(), "unit": m.unit(), "function": function});
    let mut s = serde_json::to_string_pretty(&doc)?;
    s.push('\n');
    Ok(s)
}

pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let view = callers(p, &opts.cost_query(p)?, opts.function.as_deref())?;
    let m = view.metric;
    let mut out = title(p, "callers");
    out += &select::weight_note(p, m);
    out += "\n";
    let unit = if select::is_time(m) { "ms".to_string() } else { m.name().to_string() };

    if let Some(b) = &view.function {
        out += &format!("\nfunction: {}\n", b.names.join(", "));
        out += &format!(
            "  calls {}, inclusive {} {unit}, exclusive {} {unit}\n",
            b.calls,
            fmt_value(m, m.of(&b.inclusive)),
            fmt_value(m, m.of(&b.self_cost))
        );
        let tot = m.of(&b.inclusive);
        let edges = |title: &str, edges: &[EdgeStats], none_label: &str| {
            let mut t = TextTable::new(&[("CALLS", Right), (unit.as_str(), Right), ("%", Right), (title, Left)]);
            for e in edges {
                t.row(vec![
                    e.calls.to_string(),
                    fmt_value(m, m.of(&e.cost)),
                    percent(m.of(&e.cost), tot),
                    e.name.clone().unwrap_or_else(|| none_label.to_string()),
                ]);
                // The lines the caller calls from (profiles built with lines).
                for site in &e.sites {
                    t.row(vec![
                        site.calls.to_string(),
                        fmt_value(m, m.of(&site.cost)),
                        percent(m.of(&site.cost), tot),
                        format!("  at {}:{}", select::file_name(&site.file), site.line),
                    ]);
                }
            }
            t.render()
        };
        out += &format!("\nCALLERS ({})\n", b.callers.len());
        out += &edges("CALLER", &b.callers, "<entry point: no managed caller>");
        out += &format!("\nCALLEES ({})\n", b.callees.len());
        out += &edges("CALLEE", &b.callees, "");
    }

    let h_incl = format!("INCL {unit}");
    let mut t = TextTable::new(&[("CALLS", Right), (h_incl.as_str(), Right), ("%", Right), ("ENTRY POINT", Left)]);
    for e in &view.entry_points {
        let c = &e.inclusive;
        t.row(vec![e.calls.to_string(), fmt_value(m, m.of(c)), percent(m.of(c), view.entry_total), e.name.clone()]);
    }
    out += &format!("\nENTRY POINTS ({}): functions with no managed caller\n", view.entry_points.len());
    out += &t.render();
    if view.function.is_none() {
        out += "\n(use --function NAME for the callers and callees of one function)\n";
    }
    Ok(out)
}
