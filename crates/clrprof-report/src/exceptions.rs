//! `--view exceptions`: exceptions by type and throw site, with catch sites and handling passes.

use clrprof_model::Profile;

use super::text_table::{Align::*, TextTable};
use super::title;
use clrprof_query::weighted_stacks::stack_names;

pub fn render(p: &Profile) -> String {
    let mut out = title(p, "exceptions");
    let ex = &p.events.exceptions;
    let clrprof_query::events::ExceptionTotals { thrown, rethrown, caught, uncaught } =
        clrprof_query::events::exception_totals(p);
    let sm = &p.events.exception_sampling;
    if sm.sampled {
        let thrown = match sm.runtime_total {
            Some(_) if rethrown == 0 => format!("{thrown} exceptions thrown (the runtime's own count),"),
            Some(n) => format!(
                "about {thrown} exceptions thrown ({n} new by the runtime's own count, about {rethrown} of them \
                 rethrows),"
            ),
            None if rethrown == 0 => format!("about {thrown} exceptions thrown,"),
            None => format!("about {thrown} exceptions thrown (about {rethrown} of them rethrows),"),
        };
        let scaled = if sm.runtime_total.is_some() {
            "the rows' counts (marked ~) share\nthe runtime's count of new exceptions in the proportions the windows \
             saw, rethrows scaled with them (types, sites and catches are estimates)."
        } else {
            "the windows' counts were scaled to the paused time (rows marked ~; callbacks slow\nthrowing down in the \
             windows, so in code that does little but throw the estimates are low)."
        };
        out += &format!(
            "\n{thrown} about {caught} caught, {uncaught} uncaught — ESTIMATES: an exception \
             storm\nfrom {:.3} s on: every exception was observed up to a budget (a burst of {}, then {}/s), \
             then the\nruntime's exception callbacks were paused for {:.3} s and sampled in windows totalling {:.3} s; \
             {} exceptions\nwere observed and {scaled} \
             {} observed\nexceptions were in flight when a pause began (catch not followed; in no row). \
             `record --exact-exceptions` observes\nevery exception (it slows a throw-heavy app by 35–45%).\n",
            sm.first_pause_ns as f64 / 1e9,
            clrprof_trace::exception_monitoring::BURST,
            clrprof_trace::exception_monitoring::RATE_PER_SEC,
            sm.paused_ns as f64 / 1e9,
            sm.window_ns as f64 / 1e9,
            sm.observed,
            sm.unfollowed,
        );
    } else {
        let rethrows = if rethrown > 0 { format!(" ({rethrown} of them rethrows)") } else { String::new() };
        out +=
            &format!("\n{thrown} exceptions thrown{rethrows}, {caught} caught, {uncaught} uncaught (exact counts)\n");
    }
    if ex.is_empty() {
        out += "(none recorded; exceptions are recorded unless `record --no-exceptions`)\n";
        return out;
    }
    let any_rethrows = ex.iter().any(|e| e.rethrown > 0);
    let mut columns = vec![("THROWN", Right)];
    if any_rethrows {
        columns.push(("RETHROWN", Right));
    }
    columns.extend([
        ("CAUGHT", Right),
        ("UNCAUGHT", Right),
        ("FILTERS", Right),
        ("FINALLY", Right),
        ("SEARCHED", Right),
        ("UNWOUND", Right),
        ("TYPE", Left),
        ("THROWN BY", Left),
    ]);
    let mut t = TextTable::new(&columns);
    let est =
        |e: &clrprof_model::events::ExceptionGroup, n: u64| if e.estimated { format!("~{n}") } else { n.to_string() };
    for e in ex {
        let mut row = vec![est(e, e.thrown)];
        if any_rethrows {
            row.push(est(e, e.rethrown));
        }
        row.extend([
            est(e, e.caught),
            e.uncaught.to_string(),
            est(e, e.filters),
            est(e, e.finallies),
            est(e, e.search_frames),
            est(e, e.unwind_frames),
            e.type_name.clone(),
            e.throw_site.clone(),
        ]);
        t.row(row);
    }
    out += "\n";
    out += &t.render();
    out += "\nSEARCHED/UNWOUND: frames visited by the first (search) and second (unwind) pass.\n";
    if any_rethrows {
        out += "THROWN counts every throw, as first-chance exceptions do; RETHROWN: those of an exception object thrown \
                again (`throw;`) on the same thread since the last GC (a rethrow with a GC in between counts as new).\n";
    }
    if sm.sampled {
        out += "Rows marked ~ include estimates. Stacks are walked for the first 32 throws of each type, then every 100th.\n";
    } else {
        out += "Counts are exact. Stacks are walked for the first 32 throws of each type, then every 100th.\n";
    }
    for e in ex {
        out += &format!("\n{} thrown by {}\n", e.type_name, if e.throw_site.is_empty() { "?" } else { &e.throw_site });
        if e.uncaught > 0 {
            let tids: Vec<String> = e.uncaught_threads.iter().map(|t| t.to_string()).collect();
            out += &format!("  UNCAUGHT: {} (thread tid {})\n", e.uncaught, tids.join(", "));
        }
        if e.estimated {
            out += &format!("  observed {} of about {} thrown\n", e.observed, e.thrown);
        }
        for (site, n) in &e.catch_sites {
            out += &format!("  caught {}{n} × in {site}\n", if e.estimated { "~" } else { "" });
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
