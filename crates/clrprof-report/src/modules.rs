//! `--view modules`: the Monte Carlo process profiler's tables. "Total samples recorded", then the
//! module hit table (Module / Hits / Percent), then the routine hit table (Hits / Percent /
//! Address / Module / Routine). A hit is a sample whose running (leaf) frame was in the module or
//! routine; managed assemblies and native libraries appear side by side, and what could not be
//! named is counted under UNKNOWN.

use clrprof_model::{Metric, Profile};
use clrprof_query::costs::module_hits;
use clrprof_query::Threads;

use super::text_table::{Align, TextTable};
use super::{ReportOptions, Result};

/// The weight's name and what a sample of it stands for.
pub fn weight_line(p: &Profile, metric: Metric) -> String {
    let s = &p.sampling;
    match metric {
        Metric::Wall => format!(
            "weight: wall time (running or blocked), sampled — {} samples, {} Hz wall-clock ticks, {} s of thread time",
            s.wall_samples,
            s.wall_rate_hz,
            super::ms(s.wall_ns / 1000).trim_end_matches('0').trim_end_matches('.'),
        ),
        _ => format!(
            "weight: CPU time (on-CPU only), sampled — {} samples at {} Hz requested per thread, {:.1} Hz delivered, {} s of CPU",
            s.cpu_samples,
            s.cpu_rate_hz,
            s.effective_cpu_rate(),
            super::ms(s.cpu_ns / 1000).trim_end_matches('0').trim_end_matches('.'),
        ),
    }
}

fn pct(n: u64, total: u64) -> String {
    if total == 0 {
        "0.00%".into()
    } else {
        format!("{:.2}%", n as f64 * 100.0 / total as f64)
    }
}

pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let metric = opts.weight.unwrap_or(Metric::Cpu);
    let threads = Threads::resolve(p, opts.thread.as_deref())?;
    let hits = module_hits(p, metric, &threads)?;
    let (modules, routines, total) = (&hits.modules, &hits.routines, hits.total);

    let mut s = super::title(p, "modules");
    if !p.sampling.enabled() {
        s += "\nThis trace has no samples (recorded with --no-sample, or the sampler did not start).\n";
        return Ok(s);
    }
    s += &weight_line(p, metric);
    s += "\n";
    if let Some(t) = &opts.thread {
        s += &format!("thread: {t}\n");
    }
    s += &format!("\nTotal samples recorded: {total}\n\n");
    let mut t = TextTable::new(&[("Module", Align::Left), ("Hits", Align::Right), ("Percent", Align::Right)]);
    for m in modules {
        t.row(vec![m.module.clone(), m.samples.to_string(), pct(m.samples, total)]);
    }
    s += &t.render();
    s += "\n";
    let mut t = TextTable::new(&[
        ("Hits", Align::Right),
        ("Percent", Align::Right),
        ("Address", Align::Left),
        ("Module", Align::Left),
        ("Routine", Align::Left),
    ]);
    for r in routines {
        let frame = &p.costs.stacks.frames[r.frame.0 as usize];
        let routine = match frame.name.split_once('!') {
            Some((m, sym)) if m == frame.module => {
                if sym.is_empty() {
                    "<unknown>".to_string()
                } else {
                    sym.to_string()
                }
            }
            _ => frame.name.clone(),
        };
        t.row(vec![
            r.samples.to_string(),
            pct(r.samples, total),
            r.address.map(|a| format!("0x{a:x}")).unwrap_or_else(|| "-".into()),
            r.module.clone(),
            routine,
        ]);
    }
    s += &t.render();
    Ok(s)
}
