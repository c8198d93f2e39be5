//! `--view hotspots`: the Hot Spots Tracker's table — per function, times called and
//! exclusive/inclusive/callee/suspended/profiler time (instrumented), or self/total samples and
//! time (sampled) — hottest first; merged over threads or `--by-thread`.

use anyhow::Result;
use clrprof_model::views::{function_rows, FunctionRow};
use clrprof_model::{Cost, Metric, Profile};

use super::select::{self, fmt_value, percent, thread_label};
use super::table::{Align::*, TextTable};
use super::{ms, title, ReportOptions};

/// Rows per thread (or one merged group with `None`), sorted by the metric's self value.
fn groups(p: &Profile, opts: &ReportOptions, m: Metric) -> Result<Vec<(Option<u32>, Vec<FunctionRow>)>> {
    let sel = select::threads(p, opts.thread.as_deref())?;
    let mut out = Vec::new();
    let tids = select::thread_groups(p, opts.by_thread, &sel);
    for tid in tids {
        let rows = match (tid, &sel) {
            (Some(t), _) => function_rows(&p.costs, Some(&|x| x == t)),
            (None, Some(s)) => function_rows(&p.costs, Some(&|x| s.contains(&x))),
            (None, None) => function_rows(&p.costs, None),
        };
        out.push((tid, sort_rows(p, rows, m)));
    }
    Ok(out)
}

fn sort_rows(p: &Profile, mut rows: Vec<FunctionRow>, m: Metric) -> Vec<FunctionRow> {
    let frames = &p.costs.stacks.frames;
    rows.retain(|r| m.of(&r.inclusive) > 0 || m.of(&r.self_cost) > 0);
    rows.sort_by(|a, b| {
        m.of(&b.self_cost)
            .cmp(&m.of(&a.self_cost))
            .then(m.of(&b.inclusive).cmp(&m.of(&a.inclusive)))
            .then(frames[a.frame.0 as usize].name.cmp(&frames[b.frame.0 as usize].name))
            .then(a.frame.cmp(&b.frame))
    });
    rows
}

fn total(rows: &[FunctionRow], m: Metric) -> u64 {
    rows.iter().map(|r| m.of(&r.self_cost)).sum()
}

pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let m = select::metric(p, opts.weight);
    let names = select::display_names(p);
    let mut out = title(p, "hotspots");
    out += &select::weight_note(p, m);
    out += "\n";
    for (tid, rows) in groups(p, opts, m)? {
        let label = match tid {
            Some(t) => format!("thread {}", thread_label(p, t)),
            None => match &opts.thread {
                Some(t) => format!("thread {t}"),
                None => "all threads (merged)".into(),
            },
        };
        let tot = total(&rows, m);
        out += &format!("\n{label}: {} functions, total {}\n", rows.len(), fmt_value(m, tot));
        let rows = &rows[..opts.top.unwrap_or(rows.len()).min(rows.len())];
        let t = match m {
            Metric::Time | Metric::Calls => instrumented(p, rows, &names, tot),
            _ => sampled(p, rows, &names, m, tot),
        };
        out += &t.render();
    }
    Ok(out)
}

fn instrumented(p: &Profile, rows: &[FunctionRow], names: &[String], tot_excl: u64) -> TextTable {
    let mut t = TextTable::new(&[
        ("CALLS", Right),
        ("EXCL ms", Right),
        ("EXCL %", Right),
        ("INCL ms", Right),
        ("CALLEE ms", Right),
        ("SUSP ms", Right),
        ("PROF ms", Right),
        ("FUNCTION", Left),
    ]);
    let _ = p;
    for r in rows {
        let (s, i) = (&r.self_cost, &r.inclusive);
        t.row(vec![
            s.calls.to_string(),
            ms(s.time_ns),
            percent(s.time_ns, tot_excl),
            ms(i.time_ns),
            ms(i.time_ns.saturating_sub(s.time_ns)),
            ms(i.suspended_ns),
            ms(i.profiler_ns),
            names[r.frame.0 as usize].clone(),
        ]);
    }
    t
}

fn sampled(p: &Profile, rows: &[FunctionRow], names: &[String], m: Metric, tot: u64) -> TextTable {
    let samples = |c: &Cost| match m {
        Metric::Cpu => c.cpu_samples,
        Metric::Wall => c.wall_samples,
        Metric::AllocBytes | Metric::AllocCount => c.alloc_count,
        _ => c.calls,
    };
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
        let f = &p.costs.stacks.frames[r.frame.0 as usize];
        t.row(vec![
            fmt_value(m, m.of(&r.self_cost)),
            percent(m.of(&r.self_cost), tot),
            samples(&r.self_cost).to_string(),
            fmt_value(m, m.of(&r.inclusive)),
            percent(m.of(&r.inclusive), tot),
            samples(&r.inclusive).to_string(),
            f.module.clone(),
            names[r.frame.0 as usize].clone(),
        ]);
    }
    t
}

/// The Hot Spots Tracker's spreadsheet layout: `;`-separated, times in milliseconds with `.` as
/// the decimal separator whatever the locale. `Thread ID` is the OS tid, or `all` when merged.
pub fn csv(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let m = select::metric(p, opts.weight);
    let names = select::display_names(p);
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
    for (tid, rows) in groups(p, opts, m)? {
        let tid = tid.map(|t| t.to_string()).unwrap_or_else(|| "all".into());
        let rows = &rows[..opts.top.unwrap_or(rows.len()).min(rows.len())];
        for r in rows {
            let (s, i) = (&r.self_cost, &r.inclusive);
            let (excl, incl) = match m {
                Metric::Cpu | Metric::Wall => (m.of(s), m.of(i)),
                _ => (s.time_ns, i.time_ns),
            };
            out += &format!(
                "{tid};{};{};{};{};{};{};{}\n",
                field(&names[r.frame.0 as usize]),
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
