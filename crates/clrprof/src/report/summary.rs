//! `--view summary`: the flat function summary — every called function with its call count
//! (instrumented), or its samples (sampled), most first.

use anyhow::Result;
use clrprof_model::views::function_rows;
use clrprof_model::{Metric, Profile};

use super::select::{self, fmt_value};
use super::table::{Align::*, TextTable};
use super::{title, ReportOptions};

pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let m = select::metric(p, opts.weight);
    let names = select::display_names(p);
    let sel = select::threads(p, opts.thread.as_deref())?;
    let rows = match &sel {
        Some(s) => function_rows(&p.costs, Some(&|x| s.contains(&x))),
        None => function_rows(&p.costs, None),
    };
    let instrumented = matches!(m, Metric::Time | Metric::Calls);
    let key = |r: &clrprof_model::views::FunctionRow| if instrumented { r.self_cost.calls } else { m.of(&r.self_cost) };
    let mut rows: Vec<_> = rows.into_iter().filter(|r| key(r) > 0).collect();
    rows.sort_by(|a, b| key(b).cmp(&key(a)).then(names[a.frame.0 as usize].cmp(&names[b.frame.0 as usize])));
    let mut out = title(p, "function summary");
    let total: u64 = rows.iter().map(key).sum();
    out += &format!(
        "\n{} functions, {} {}\n",
        rows.len(),
        if instrumented { total.to_string() } else { fmt_value(m, total) },
        if instrumented { "calls (exact)" } else { m.name() }
    );
    let mut t =
        TextTable::new(&[(if instrumented { "CALLS" } else { m.name() }, Right), ("MODULE", Left), ("FUNCTION", Left)]);
    let n = opts.top.unwrap_or(rows.len()).min(rows.len());
    for r in &rows[..n] {
        let f = &p.costs.stacks.frames[r.frame.0 as usize];
        t.row(vec![
            if instrumented { key(r).to_string() } else { fmt_value(m, key(r)) },
            f.module.clone(),
            names[r.frame.0 as usize].clone(),
        ]);
    }
    out += &t.render();
    Ok(out)
}
