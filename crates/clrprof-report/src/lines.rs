//! `--view lines [--function NAME]`: the hottest source lines — per function and line, the self
//! and total figures of the weight (a caller's line is its call site, so its total holds what it
//! calls) — as text or as the JSON `{"lines": [...]}`. The figures are the query layer's
//! ([`clrprof_query::lines::lines`]).

use clrprof_model::{Cost, Profile};
use clrprof_query::lines::{lines, LinesView};
use clrprof_query::select;
use serde_json::json;

use super::text_table::{Align::*, TextTable};
use super::{fmt_value, percent, title, with_unit, ReportOptions, Result};

fn view(p: &Profile, opts: &ReportOptions) -> Result<LinesView> {
    Ok(lines(p, &opts.cost_query(p)?, opts.function.as_deref())?)
}

pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let v = view(p, opts)?;
    let m = v.metric;
    let mut out = title(p, "lines");
    out += &select::weight_note(p, m);
    out += "\n";
    let what = opts.function.as_deref().map(|f| format!(" of {f}")).unwrap_or_default();
    out += &format!("\nhot lines{what}: {} lines, total {}", v.count, with_unit(m, v.total));
    if v.without_line > 0 {
        out += &format!(
            "; {}% in frames without a line (native code, runtime work, methods without PDB)",
            percent(v.without_line, v.total)
        );
    }
    out += "\n";
    let samples = |c: &Cost| select::measure(m, c).0;
    let unit = if select::is_time(m) { "ms" } else { m.name() };
    let (h_self, h_total) = (format!("SELF {unit}"), format!("TOTAL {unit}"));
    let mut t = TextTable::new(&[
        (h_self.as_str(), Right),
        ("SELF %", Right),
        ("SAMPLES", Right),
        (h_total.as_str(), Right),
        ("TOTAL %", Right),
        ("SAMPLES", Right),
        ("FILE", Left),
        ("LINE", Right),
        ("FUNCTION", Left),
    ]);
    let sampled = !select::is_instrumented(m);
    for r in &v.rows {
        t.row(vec![
            fmt_value(m, m.of(&r.self_cost)),
            percent(m.of(&r.self_cost), v.total),
            if sampled { samples(&r.self_cost).to_string() } else { r.self_cost.calls.to_string() },
            fmt_value(m, m.of(&r.total)),
            percent(m.of(&r.total), v.total),
            if sampled { samples(&r.total).to_string() } else { r.total.calls.to_string() },
            select::file_name(&r.file).to_string(),
            r.line.to_string(),
            r.function.clone(),
        ]);
    }
    out += &t.render();
    Ok(out)
}

/// `{"weight", "unit", "total", "lines": [{"function", "module", "file", "line", "self", "total"}]}`:
/// `self` and `total` in the weight's unit (nanoseconds, bytes, counts), `file` the PDB's path.
pub fn json(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let v = view(p, opts)?;
    let m = v.metric;
    let rows: Vec<_> = v
        .rows
        .iter()
        .map(|r| {
            json!({
                "function": r.function, "module": r.module, "file": r.file, "line": r.line,
                "self": m.of(&r.self_cost), "total": m.of(&r.total),
            })
        })
        .collect();
    let doc = json!({
        "weight": m.name(), "unit": m.unit(), "total": v.total, "without_line": v.without_line, "lines": rows,
    });
    let mut s = serde_json::to_string_pretty(&doc)?;
    s.push('\n');
    Ok(s)
}
