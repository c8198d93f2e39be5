//! `--view allocations`: allocations by type and by allocation site.

use clrprof_model::Profile;

use super::table::{Align::*, TextTable};
use super::title;

/// `top`: at most this many rows in each table (`--top`).
pub fn render(p: &Profile, top: Option<usize>) -> String {
    let shown = |n: usize| match top {
        Some(k) if k < n => format!("top {k} of {n}"),
        _ => n.to_string(),
    };
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
    for a in ev.allocations.iter().take(top.unwrap_or(usize::MAX)) {
        t.row(vec![
            a.count.to_string(),
            a.bytes.to_string(),
            if a.exact { "-".into() } else { a.samples.to_string() },
            if a.exact { "exact".into() } else { "estimate".into() },
            a.type_name.clone(),
        ]);
    }
    out += &format!("\nby type ({})\n", shown(ev.allocations.len()));
    out += &t.render();
    if !ev.alloc_sites.is_empty() {
        let mut t = TextTable::new(&[
            ("EST COUNT", Right),
            ("EST BYTES", Right),
            ("SAMPLES", Right),
            ("TYPE", Left),
            ("ALLOCATED IN", Left),
        ]);
        for s in ev.alloc_sites.iter().take(top.unwrap_or(usize::MAX)) {
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
            shown(ev.alloc_sites.len())
        );
        out += &t.render();
    } else if ev.alloc_exact {
        out += "\n(exact mode counts types only; allocation sites come from `--alloc sampled`)\n";
    }
    out
}
