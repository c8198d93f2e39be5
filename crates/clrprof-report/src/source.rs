//! `--view source --function NAME`: one method's source with each line's cost beside it, like
//! `perf annotate`. The per-line figures are the query layer's
//! ([`clrprof_query::lines::function_lines`], [`clrprof_query::lines::annotate`]); the text is
//! read from the file the PDB names, or from the source embedded in the PDB; when neither is on
//! this machine, the file's Source Link URL is shown with the per-line costs alone.

use clrprof_model::Profile;
use clrprof_query::lines::{annotate, function_lines, AnnotatedLine, FunctionLines, SourceText};
use clrprof_query::{select, Threads};
use serde_json::json;

use super::text_table::{Align::*, TextTable};
use super::{fmt_value, percent, title, with_unit, ReportError, ReportOptions, Result};

/// The method the options name, its per-line costs and its source (when found), with what the
/// search for the source said.
struct Annotated {
    lines: FunctionLines,
    source: Option<SourceText>,
    rows: Vec<AnnotatedLine>,
    note: Option<String>,
}

fn annotated(p: &Profile, opts: &ReportOptions) -> Result<Annotated> {
    let Some(name) = opts.function.as_deref() else {
        return Err(ReportError::Unsupported("--view source needs --function NAME".into()));
    };
    let threads = Threads::resolve(p, opts.thread.as_deref())?;
    let lines = function_lines(p, opts.weight, &threads, name)?;
    let (source, note) = match crate::source_files::find_source(&lines, &opts.symbol_dirs) {
        Ok(s) => (s, None),
        Err(e) => (None, Some(e)),
    };
    let rows = annotate(&lines, source.as_ref());
    Ok(Annotated { lines, source, rows, note })
}

/// Where the text shown comes from, in words.
fn origin(a: &Annotated) -> String {
    let file = &a.lines.file;
    match &a.source {
        Some(s) if s.text.is_some() && s.origin == "embedded" => format!("{file} (source embedded in the PDB)"),
        Some(s) if s.text.is_some() => file.clone(),
        Some(s) => match &s.source_link {
            Some(url) => format!("{file} (not on this machine; Source Link: {url})"),
            None => format!("{file} (not on this machine, no embedded source or Source Link)"),
        },
        None => format!("{file} (no source found)"),
    }
}

pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let a = annotated(p, opts)?;
    let fl = &a.lines;
    let m = fl.metric;
    let mut out = title(p, "source");
    out += &select::weight_note(p, m);
    out += "\n";
    if let Some(n) = &a.note {
        out += &format!("note: {n}\n");
    }
    out += &format!("\nfunction: {}", fl.function);
    if !fl.module_path.is_empty() {
        out += &format!(" ({})", select::file_name(&fl.module_path));
    }
    out += &format!("\nfile: {}\n", origin(&a));
    let tot = m.of(&fl.total);
    out += &format!(
        "method: self {} ({}%), total {} ({}% of {}); line percentages are of the method's total\n\n",
        with_unit(m, m.of(&fl.self_cost)),
        percent(m.of(&fl.self_cost), tot),
        with_unit(m, tot),
        percent(tot, fl.grand_total),
        with_unit(m, fl.grand_total),
    );
    let unit = if select::is_time(m) { "ms" } else { m.name() };
    let (h_self, h_total) = (format!("SELF {unit}"), format!("TOTAL {unit}"));
    let mut t = TextTable::new(&[
        (h_self.as_str(), Right),
        ("SELF %", Right),
        (h_total.as_str(), Right),
        ("TOTAL %", Right),
        ("LINE", Right),
        ("SOURCE", Left),
    ]);
    let blank = |v: u64, s: String| if v == 0 { String::new() } else { s };
    for r in &a.rows {
        let (s, i) = (m.of(&r.self_cost), m.of(&r.total));
        t.row(vec![
            blank(s, fmt_value(m, s)),
            blank(s, percent(s, tot)),
            blank(i, fmt_value(m, i)),
            blank(i, percent(i, tot)),
            r.line.to_string(),
            r.text.clone().unwrap_or_default(),
        ]);
    }
    out += &t.render();
    Ok(out)
}

/// `{"source": {"function", "module", "file", "origin", "source_link", "self", "total", "lines":
/// [{"line", "text", "self", "total"}]}}`, values in the weight's unit.
pub fn json(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let a = annotated(p, opts)?;
    let fl = &a.lines;
    let m = fl.metric;
    let rows: Vec<_> = a
        .rows
        .iter()
        .map(|r| json!({ "line": r.line, "text": r.text, "self": m.of(&r.self_cost), "total": m.of(&r.total) }))
        .collect();
    let src = a.source.as_ref();
    let doc = json!({
        "weight": m.name(), "unit": m.unit(),
        "source": {
            "function": fl.function, "module": fl.module_path, "file": fl.file,
            "origin": src.filter(|s| s.text.is_some()).map(|s| s.origin.clone()),
            "source_link": src.and_then(|s| s.source_link.clone()),
            "note": a.note,
            "self": m.of(&fl.self_cost), "total": m.of(&fl.total), "lines": rows,
        },
    });
    let mut s = serde_json::to_string_pretty(&doc)?;
    s.push('\n');
    Ok(s)
}
