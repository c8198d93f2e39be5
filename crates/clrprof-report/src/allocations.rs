//! `--view allocations`: allocations by type and by allocation site.

use clrprof_model::Profile;

use super::table::{Align::*, TextTable};
use super::title;

pub fn render(p: &Profile) -> String {
    let mut out = title(p, "allocations");
    let ev = &p.events;
    if ev.allocations.is_empty() {
        out += "\nno allocations recorded (record with `--alloc sampled` or `--alloc exact`)\n";
        return out;
    }
    if ev.alloc_exact {
        out += "\nexact counts: every object was counted (`--alloc exact`, which slows every allocation)\n";
    } else {
        out += &format!(
            "\nESTIMATES from {} allocation samples (the runtime samples about one object per 100 KiB allocated); \
             COUNT and BYTES are upscaled, SAMPLES is what was seen\n",
            ev.alloc_samples
        );
    }
    let mut t =
        TextTable::new(&[("COUNT", Right), ("BYTES", Right), ("SAMPLES", Right), ("KIND", Left), ("TYPE", Left)]);
    for a in &ev.allocations {
        t.row(vec![
            a.count.to_string(),
            a.bytes.to_string(),
            if a.exact { "-".into() } else { a.samples.to_string() },
            if a.exact { "exact".into() } else { "estimate".into() },
            a.type_name.clone(),
        ]);
    }
    out += &format!("\nby type ({})\n", t.len());
    out += &t.render();
    if !ev.alloc_sites.is_empty() {
        let mut t = TextTable::new(&[
            ("EST COUNT", Right),
            ("EST BYTES", Right),
            ("SAMPLES", Right),
            ("TYPE", Left),
            ("ALLOCATED IN", Left),
        ]);
        for s in &ev.alloc_sites {
            t.row(vec![
                s.count.to_string(),
                s.bytes.to_string(),
                s.samples.to_string(),
                s.type_name.clone(),
                s.function.clone(),
            ]);
        }
        out += &format!(
            "\nby allocation site ({}): the agent walks the stack of the first 64 samples of each type, then one in 32; \
             estimates are scaled to the type's total, SAMPLES counts walked samples\n",
            t.len()
        );
        out += &t.render();
    } else if ev.alloc_exact {
        out += "\n(exact mode counts types only; allocation sites come from `--alloc sampled`)\n";
    }
    out
}
