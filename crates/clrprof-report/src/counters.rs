//! `--view counters`: the runtime counters as a time series.

use clrprof_model::Profile;

use super::text_table::{Align::*, TextTable};
use super::{ms, title};

pub fn render(p: &Profile) -> String {
    let mut out = title(p, "counters");
    let ev = &p.events;
    out += &format!(
        "\none row per {} ms, computed from the recorded events; allocation rate is {}\n",
        ms(ev.counter_interval_ns),
        if ev.alloc_exact { "exact" } else { "estimated from samples" }
    );
    let mut t = TextTable::new(&[
        ("END ms", Right),
        ("GC0", Right),
        ("GC1", Right),
        ("GC2", Right),
        ("HEAP MB gen0/1/2/LOH/POH", Left),
        ("% GC", Right),
        ("ALLOC MB/s", Right),
        ("EXC/s", Right),
        ("JIT", Right),
        ("ASSEMBLIES", Right),
        ("THREADS", Right),
        ("CONTENTIONS", Right),
    ]);
    for r in &ev.counters {
        t.row(vec![
            ms(r.end_ns),
            r.gc_count[0].to_string(),
            r.gc_count[1].to_string(),
            r.gc_count[2].to_string(),
            r.heap_bytes.iter().map(|b| format!("{:.2}", *b as f64 / 1048576.0)).collect::<Vec<_>>().join("/"),
            format!("{:.2}", r.time_in_gc_pct),
            format!("{:.2}", r.alloc_rate / 1048576.0),
            format!("{:.1}", r.exceptions_per_sec),
            r.methods_jitted.to_string(),
            r.assemblies_loaded.to_string(),
            r.threads.to_string(),
            r.lock_contentions.to_string(),
        ]);
    }
    out += &t.render();
    out
}
