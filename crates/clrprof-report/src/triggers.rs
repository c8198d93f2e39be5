//! `--view triggers`: the collection triggers that fired (`record --trigger`), each with its
//! rule, when, what was measured and what it did (a high-rate window or a heap snapshot).

use clrprof_model::Profile;

use super::text_table::{Align::*, TextTable};
use super::{ms, title};

pub fn render(p: &Profile) -> String {
    let mut out = title(p, "triggers");
    let config = |k: &str| {
        p.process.config.lines().find_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix('=')).map(str::to_string))
    };
    match config("trigger") {
        Some(rules) => {
            out += &format!("\nrules: {}\n", rules.replace(';', "; "));
            let v = |k: &str| config(k).unwrap_or_else(|| "-".into());
            out += &format!(
                "action: {}, window {} ms at {} Hz, cooldown {} ms, at most {} fires per rule\n",
                v("trigger_action"),
                v("trigger_window_ms"),
                v("trigger_rate"),
                v("trigger_cooldown_ms"),
                v("trigger_max")
            );
        }
        None if p.triggers.is_empty() => {
            out += "\nno collection triggers in this trace (record with --trigger RULE; docs/triggers.md)\n";
            return out;
        }
        None => {}
    }
    let mut t = TextTable::new(&[
        ("#", Right),
        ("AT ms", Right),
        ("RULE", Left),
        ("MEASURED", Left),
        ("ACTION", Left),
        ("ENDED ms", Right),
    ]);
    for f in &p.triggers {
        let action = match (f.action.as_str(), f.snapshot) {
            ("heap", Some(n)) => format!("heap snapshot {n}"),
            ("heap", None) => "heap snapshot (not taken)".into(),
            _ => format!("window {} ms at {} Hz", ms(f.window_ns), f.rate_hz),
        };
        t.row(vec![
            f.seq.to_string(),
            ms(f.ts_ns),
            f.rule.clone(),
            f.detail.clone(),
            action,
            f.ended_ns.map(ms).unwrap_or_else(|| "(trace ended)".into()),
        ]);
    }
    out += &format!("\n{} fired\n", p.triggers.len());
    if !p.triggers.is_empty() {
        out += &t.render();
    }
    out
}
