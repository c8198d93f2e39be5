//! `--view hotspots`: the Hot Spots Tracker's table — per function, times called and
//! exclusive/inclusive/callee/suspended/profiler time (instrumented), or self/total samples and
//! time (sampled) — hottest first; merged over threads or `--by-thread`.

use clrprof_model::{Cost, Metric, Profile};
use clrprof_query::costs::{hotspots, FunctionStats};
use clrprof_query::select;

use super::text_table::{Align::*, TextTable};
use super::{fmt_value, ms, percent, title, ReportOptions, Result};

pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let view = hotspots(p, &opts.cost_query(p)?, opts.thread.as_deref());
    let m = view.metric;
    let mut out = title(p, "hotspots");
    out += &select::weight_note(p, m);
    out += "\n";
    for g in &view.groups {
        out += &format!("\n{}: {} functions, total {}\n", g.label, g.count, fmt_value(m, g.total));
        let probes = p.instrumentation.as_ref().is_some_and(|i| i.il_probes);
        let t = match m {
            // IL probes count calls and measure no time: no time columns (they would read 0).
            Metric::Time | Metric::Calls if probes => counted(&g.rows, g.total),
            Metric::Time | Metric::Calls => instrumented(&g.rows, m, g.total),
            _ => sampled(&g.rows, m, g.total),
        };
        out += &t.render();
    }
    Ok(out)
}

/// `tot` is the group's total of the weight `m`; the percentage column is each row's share of it
/// (exclusive time, or calls with `--weight calls`: a time over a call count is no percentage).
fn instrumented(rows: &[FunctionStats], m: Metric, tot: u64) -> TextTable {
    let share = if m == Metric::Calls { "CALLS %" } else { "EXCL %" };
    let mut t = TextTable::new(&[
        ("CALLS", Right),
        ("EXCL ms", Right),
        (share, Right),
        ("INCL ms", Right),
        ("CALLEE ms", Right),
        ("SUSP ms", Right),
        ("PROF ms", Right),
        ("FUNCTION", Left),
    ]);
    for r in rows {
        let (s, i) = (&r.self_cost, &r.inclusive);
        t.row(vec![
            s.calls.to_string(),
            ms(s.time_ns),
            percent(m.of(s), tot),
            ms(i.time_ns),
            ms(i.time_ns.saturating_sub(s.time_ns)),
            ms(i.suspended_ns),
            ms(i.profiler_ns),
            r.name.clone(),
        ]);
    }
    t
}

/// `record --count`: calls and their share, per method definition.
fn counted(rows: &[FunctionStats], tot: u64) -> TextTable {
    let mut t = TextTable::new(&[("CALLS", Right), ("CALLS %", Right), ("FUNCTION", Left)]);
    for r in rows {
        t.row(vec![r.self_cost.calls.to_string(), percent(r.self_cost.calls, tot), r.name.clone()]);
    }
    t
}

fn sampled(rows: &[FunctionStats], m: Metric, tot: u64) -> TextTable {
    let samples = |c: &Cost| select::measure(m, c).0;
    let unit = if select::is_time(m) { "ms" } else { m.name() };
    let h_self = format!("SELF {unit}");
    let h_total = format!("TOTAL {unit}");
    let mut t = TextTable::new(&[
        (h_self.as_str(), Right),
        ("SELF %", Right),
        ("SAMPLES", Right),
        (h_total.as_str(), Right),
        ("TOTAL %", Right),
        ("SAMPLES", Right),
        ("MODULE", Left),
        ("FUNCTION", Left),
    ]);
    for r in rows {
        t.row(vec![
            fmt_value(m, m.of(&r.self_cost)),
            percent(m.of(&r.self_cost), tot),
            samples(&r.self_cost).to_string(),
            fmt_value(m, m.of(&r.inclusive)),
            percent(m.of(&r.inclusive), tot),
            samples(&r.inclusive).to_string(),
            r.module.clone(),
            r.name.clone(),
        ]);
    }
    t
}

/// The Hot Spots Tracker's spreadsheet layout: `;`-separated, times in milliseconds with `.` as
/// the decimal separator whatever the locale. `Thread ID` is the OS tid, or `all` when merged.
pub fn csv(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let view = hotspots(p, &opts.cost_query(p)?, opts.thread.as_deref());
    let m = view.metric;
    let mut out = String::from(
        "Thread ID;Function;Times Called;Exclusive Time;Inclusive Time;Callee Time;Suspended Time;Profiler Time\n",
    );
    let field = |s: &str| {
        if s.contains(';') || s.contains('"') {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.to_string()
        }
    };
    for g in &view.groups {
        let tid = g.thread.map(|t| t.to_string()).unwrap_or_else(|| "all".into());
        for r in &g.rows {
            let (s, i) = (&r.self_cost, &r.inclusive);
            let (excl, incl) = match m {
                Metric::Cpu | Metric::Wall => (m.of(s), m.of(i)),
                _ => (s.time_ns, i.time_ns),
            };
            out += &format!(
                "{tid};{};{};{};{};{};{};{}\n",
                field(&r.name),
                s.calls,
                ms(excl),
                ms(incl),
                ms(incl.saturating_sub(excl)),
                ms(i.suspended_ns),
                ms(i.profiler_ns)
            );
        }
    }
    Ok(out)
}
