//! Finding a method's source for `--view source` and the viewer's source panel: through the
//! portable PDB of its module ([`clrprof_symbols::method_source`]: the document's path and text —
//! from disk or embedded in the PDB — and its Source Link URL).

use std::path::{Path, PathBuf};

use clrprof_query::lines::{FunctionLines, SourceText};

/// The source of the method `fl` names (`Ok(None)`: the PDB has no sequence points for it);
/// `Err` says why it could not be looked for (no module or token in the trace, no usable PDB).
pub fn find_source(fl: &FunctionLines, symbol_dirs: &[PathBuf]) -> Result<Option<SourceText>, String> {
    if fl.module_path.is_empty() || fl.token == 0 {
        return Err(format!("{}: its module or metadata token is not in the trace", fl.function));
    }
    let Some(m) = clrprof_symbols::method_source(Path::new(&fl.module_path), fl.token, symbol_dirs)? else {
        return Ok(None);
    };
    let origin = match (&m.text, &m.text_origin) {
        (None, _) => String::new(),
        (Some(_), Some(o)) if o.starts_with("embedded") => "embedded".into(),
        (Some(_), _) => "disk".into(),
    };
    Ok(Some(SourceText {
        path: m.file,
        text: m.text,
        origin,
        source_link: m.source_link,
        method_lines: m.lines.iter().flat_map(|l| [l.line, l.end_line.max(l.line)]).collect(),
    }))
}
