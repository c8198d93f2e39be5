//! `--view gc`: every collection, then totals.

use clrprof_model::Profile;

use super::table::{Align::*, TextTable};
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

/// Union of GC windows (ns) over the run.
pub fn time_in_gc(p: &Profile) -> u64 {
    let mut w: Vec<(u64, u64)> = p.events.gcs.iter().map(|g| (g.start_ns, g.start_ns + g.duration_ns)).collect();
    w.sort_unstable();
    let (mut total, mut cur) = (0u64, None::<(u64, u64)>);
    for (a, b) in w {
        cur = match cur {
            Some((ca, cb)) if a <= cb => Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    if let Some((a, b)) = cur {
        total += b - a;
    }
    total
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
    let per_gen = |n: u8| gcs.iter().filter(|g| g.generation == n).count();
    let in_gc = time_in_gc(p);
    let pause: u64 = gcs.iter().map(|g| g.pause_ns).sum();
    let largest = gcs.iter().map(|g| g.pause_ns).max().unwrap_or(0);
    let induced = gcs.iter().filter(|g| g.induced).count();
    let background = gcs.iter().filter(|g| g.background == Some(true)).count();
    let dur = p.process.duration_ns.max(1) as f64;
    out += &format!(
        "\ntotals: gen0 {}, gen1 {}, gen2 {} ({} induced, {} background)\n",
        per_gen(0),
        per_gen(1),
        per_gen(2),
        induced,
        background
    );
    out += &format!(
        "time in GC {} ms = {:.2}% of wall time; paused {} ms = {:.2}%; largest pause {} ms\n",
        ms(in_gc),
        in_gc as f64 * 100.0 / dur,
        ms(pause),
        pause as f64 * 100.0 / dur,
        ms(largest)
    );
    out += "BACKGROUND: from the runtime's GCStart event (EventPipe), or `yes` when another GC ran inside it; `?` when unknown.\n";
    out
}
