//! `--view gc`: every collection, then totals.

use clrprof_model::Profile;

use super::text_table::{Align::*, TextTable};
use super::{ms, title};

fn mb(b: u64) -> String {
    format!("{:.2}", b as f64 / (1024.0 * 1024.0))
}

fn sizes(v: &[u64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.iter().take(5).map(|b| mb(*b)).collect::<Vec<_>>().join("/")
}

pub fn render(p: &Profile) -> String {
    let mut out = title(p, "gc");
    let gcs = &p.events.gcs;
    if gcs.is_empty() {
        out += "\nno garbage collections recorded\n";
        return out;
    }
    let mut t = TextTable::new(&[
        ("#", Right),
        ("GEN", Right),
        ("REASON", Left),
        ("BACKGROUND", Left),
        ("START ms", Right),
        ("DURATION ms", Right),
        ("PAUSE ms", Right),
        ("BEFORE MB gen0/1/2/LOH/POH", Left),
        ("AFTER MB", Left),
    ]);
    for g in gcs {
        t.row(vec![
            g.index.to_string(),
            g.generation.to_string(),
            g.reason.clone(),
            match g.background {
                Some(true) => "yes".into(),
                Some(false) => "no".into(),
                None => "?".into(),
            },
            ms(g.start_ns),
            if g.finished { ms(g.duration_ns) } else { "unfinished".into() },
            ms(g.pause_ns),
            sizes(&g.before),
            sizes(&g.after),
        ]);
    }
    out += &format!("\n{} collections\n", gcs.len());
    out += &t.render();
    let t = clrprof_query::events::gc_totals(p);
    out += &format!(
        "\ntotals: gen0 {}, gen1 {}, gen2 {} ({} induced, {} background)\n",
        t.per_generation[0], t.per_generation[1], t.per_generation[2], t.induced, t.background
    );
    out += &format!(
        "time in GC {} ms = {:.2}% of {}; paused {} ms = {:.2}%; largest pause {} ms\n",
        ms(t.time_in_gc_ns),
        t.time_in_gc_pct,
        if p.range.is_all() { "wall time" } else { "the window" },
        ms(t.pause_ns),
        t.pause_pct,
        ms(t.largest_pause_ns)
    );
    out += "BACKGROUND: from the runtime's GCStart event (EventPipe), or `yes` when another GC ran inside it; `?` when unknown.\n";
    if gcs.iter().any(|g| g.before.is_empty()) {
        out += "BEFORE `-`: a collection the profiling API reported no start for (the ephemeral GC a background GC \
                begins with), known from the runtime's own events.\n";
    }
    out
}
