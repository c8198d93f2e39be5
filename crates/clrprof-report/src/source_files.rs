//! Finding a method's source for `--view source`: through the portable PDB of its module
//! (`clrprof_symbols::method_source`: the document's path, its embedded source, its Source Link
//! URL), the file read from disk when it is there.

use std::path::PathBuf;

use clrprof_query::lines::{FunctionLines, SourceText};

/// The source of the method `fl` names; `Err` says why none could be looked for.
pub fn find(fl: &FunctionLines, _symbol_dirs: &[PathBuf]) -> Result<Option<SourceText>, String> {
    if fl.module_path.is_empty() || fl.token == 0 {
        return Err(format!("{}: its module or metadata token is not in the trace", fl.function));
    }
    // Until the PDB reader answers: the document path of the frames, read from disk when present.
    let text = std::fs::read_to_string(&fl.file).ok();
    Ok(Some(SourceText {
        path: fl.file.clone(),
        origin: if text.is_some() { "disk".into() } else { String::new() },
        text,
        source_link: None,
        method_lines: Vec::new(),
    }))
}
