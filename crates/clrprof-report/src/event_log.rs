//! `--view events`: the runtime event log kept by `record --events`, one line per event, indented by
//! its thread's nesting. (The per-concern event views are `exceptions.rs`, `gc.rs`, `locks.rs`, …)

use clrprof_model::Profile;

use super::{ms, title};

pub fn render(p: &Profile) -> String {
    let mut out = title(p, "events");
    if !p.events.log_enabled {
        out += "\nthe event log was not recorded: record with `clrprof record --events`\n";
        return out;
    }
    out += &format!(
        "\n{} events; TIME ms, OS TID (0 = not reported), then the event indented by its thread's nesting\n",
        p.events.log.len()
    );
    for e in &p.events.log {
        let mark = match e.nest {
            1 => "> ",
            -1 => "< ",
            _ => "",
        };
        out += &format!("{:>12} {:>7} {}{}{}\n", ms(e.ts), e.os_tid, "  ".repeat(e.depth as usize), mark, e.what);
    }
    out
}
