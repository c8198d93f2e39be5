//! `--view exceptions`: exceptions by type and throw site, with catch sites and handling passes.

use clrprof_model::Profile;

use super::table::{Align::*, TextTable};
use super::title;

/// Frames of a stack as `name` lines, innermost first.
pub fn stack_names(p: &Profile, s: clrprof_model::StackId) -> Vec<String> {
    let st = &p.costs.stacks;
    st.frames_of(s).iter().rev().map(|f| st.frames[f.0 as usize].name.clone()).collect()
}

pub fn render(p: &Profile) -> String {
    let mut out = title(p, "exceptions");
    let ex = &p.events.exceptions;
    let thrown: u64 = ex.iter().map(|e| e.thrown).sum();
    let caught: u64 = ex.iter().map(|e| e.caught).sum();
    let uncaught: u64 = ex.iter().map(|e| e.uncaught).sum();
    out += &format!("\n{thrown} exceptions thrown, {caught} caught, {uncaught} uncaught (exact counts)\n");
    if ex.is_empty() {
        out += "(none recorded; exceptions are recorded unless `record --no-exceptions`)\n";
        return out;
    }
    let mut t = TextTable::new(&[
        ("THROWN", Right),
        ("CAUGHT", Right),
        ("UNCAUGHT", Right),
        ("FILTERS", Right),
        ("FINALLY", Right),
        ("SEARCHED", Right),
        ("UNWOUND", Right),
        ("TYPE", Left),
        ("THROWN BY", Left),
    ]);
    for e in ex {
        t.row(vec![
            e.thrown.to_string(),
            e.caught.to_string(),
            e.uncaught.to_string(),
            e.filters.to_string(),
            e.finallies.to_string(),
            e.search_frames.to_string(),
            e.unwind_frames.to_string(),
            e.type_name.clone(),
            e.throw_site.clone(),
        ]);
    }
    out += "\n";
    out += &t.render();
    out += "\nSEARCHED/UNWOUND: frames visited by the first (search) and second (unwind) pass.\n";
    out += "Counts are exact. Stacks are walked for the first 32 throws of each type, then every 100th.\n";
    for e in ex {
        out += &format!("\n{} thrown by {}\n", e.type_name, if e.throw_site.is_empty() { "?" } else { &e.throw_site });
        if e.uncaught > 0 {
            let tids: Vec<String> = e.uncaught_threads.iter().map(|t| t.to_string()).collect();
            out += &format!("  UNCAUGHT: {} (thread tid {})\n", e.uncaught, tids.join(", "));
        }
        for (site, n) in &e.catch_sites {
            out += &format!("  caught {n} × in {site}\n");
        }
        if let Some((s, n)) = e.stacks.first() {
            let walked: u64 = e.stacks.iter().map(|(_, n)| n).sum();
            out += &format!("  stack at the throw (seen {n} times in {walked} walked stacks, {} throws):\n", e.thrown);
            for f in stack_names(p, *s) {
                out += &format!("    {f}\n");
            }
        }
    }
    out
}
