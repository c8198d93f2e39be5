//! `--view callers --function NAME`: a butterfly — who calls NAME and whom NAME calls, with exact
//! call counts and the cost each edge carries — and the entry points (functions with no
//! managed caller).

use anyhow::{bail, Result};
use clrprof_model::views::{butterfly, entry_points, Edge};
use clrprof_model::Profile;

use super::select::{self, fmt_value, percent};
use super::table::{Align::*, TextTable};
use super::{title, ReportOptions};

pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let m = select::metric(p, opts.weight);
    let names = select::display_names(p);
    let sel = select::threads(p, opts.thread.as_deref())?;
    let keep = |x: u32| sel.as_ref().map(|s| s.contains(&x)).unwrap_or(true);
    let filter: Option<&dyn Fn(u32) -> bool> = if sel.is_some() { Some(&keep) } else { None };
    let mut out = title(p, "callers");
    out += &select::weight_note(p, m);
    out += "\n";
    let unit = if select::is_time(m) { "ms".to_string() } else { m.name().to_string() };
    let h_cost = unit.clone();

    if let Some(f) = &opts.function {
        let frames = select::frames_named(p, &names, f)?;
        let b = butterfly(&p.costs, &frames, filter);
        let shown: Vec<String> = frames.iter().map(|f| names[f.0 as usize].clone()).collect();
        out += &format!("\nfunction: {}\n", shown.join(", "));
        out += &format!(
            "  calls {}, inclusive {} {unit}, exclusive {} {unit}\n",
            b.callers.iter().map(|e| e.calls).sum::<u64>(),
            fmt_value(m, m.of(&b.inclusive)),
            fmt_value(m, m.of(&b.self_cost))
        );
        let tot = m.of(&b.inclusive);
        let edges = |title: &str, edges: &[Edge], none_label: &str| {
            let mut v: Vec<&Edge> = edges.iter().collect();
            v.sort_by(|a, b| m.of(&b.cost).cmp(&m.of(&a.cost)).then(b.calls.cmp(&a.calls)).then(a.frame.cmp(&b.frame)));
            let mut t = TextTable::new(&[("CALLS", Right), (h_cost.as_str(), Right), ("%", Right), (title, Left)]);
            for e in v {
                t.row(vec![
                    e.calls.to_string(),
                    fmt_value(m, m.of(&e.cost)),
                    percent(m.of(&e.cost), tot),
                    e.frame.map(|f| names[f.0 as usize].clone()).unwrap_or_else(|| none_label.to_string()),
                ]);
            }
            t.render()
        };
        out += &format!("\nCALLERS ({})\n", b.callers.len());
        out += &edges("CALLER", &b.callers, "<entry point: no managed caller>");
        out += &format!("\nCALLEES ({})\n", b.callees.len());
        out += &edges("CALLEE", &b.callees, "");
    } else if p.costs.is_empty() {
        bail!("this trace has no call data: record with --instrument (or with sampling) first");
    }

    let roots = entry_points(&p.costs, filter);
    let mut roots: Vec<_> = roots.into_iter().filter(|e| m.of(&e.inclusive) > 0).collect();
    roots.sort_by(|a, b| m.of(&b.inclusive).cmp(&m.of(&a.inclusive)).then(a.frame.cmp(&b.frame)));
    let total: u64 = roots.iter().map(|e| m.of(&e.inclusive)).sum();
    let h_incl = format!("INCL {unit}");
    let mut t = TextTable::new(&[("CALLS", Right), (h_incl.as_str(), Right), ("%", Right), ("ENTRY POINT", Left)]);
    for e in &roots {
        let c = &e.inclusive;
        t.row(vec![
            e.calls.to_string(),
            fmt_value(m, m.of(c)),
            percent(m.of(c), total),
            names[e.frame.0 as usize].clone(),
        ]);
    }
    out += &format!("\nENTRY POINTS ({}): functions with no managed caller\n", roots.len());
    out += &t.render();
    if opts.function.is_none() {
        out += "\n(use --function NAME for the callers and callees of one function)\n";
    }
    Ok(out)
}
