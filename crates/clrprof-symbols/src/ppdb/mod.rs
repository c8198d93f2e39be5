//! Source lines from portable PDBs: an IL offset of a method → its sequence point → file and line
//! ([`Pdbs::line`], what the model asks while resolving frames), and a method's lines with its
//! source text for `--view source` ([`method_source`]).
//!
//! A module's PDB is looked for, in order: under each `--symbols DIR` (`DIR/X.pdb`, or a symbol
//! store's `DIR/X.pdb/<GUID>FFFFFFFF/X.pdb`), beside the assembly (`X.pdb`), at the path the
//! assembly's CodeView entry names (where the compiler wrote it), and embedded in the assembly
//! (debug directory entry 17). When the assembly is readable, a PDB whose id is not the one its
//! CodeView entry names is skipped (it describes another build: its lines would be wrong). Each
//! module's PDB is read once and kept for every profile of the reader.

pub mod metadata;
mod pe;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use clrprof_model::{IlAt, SourceLine};
use metadata::{Pdb, SequencePoint};

/// A found and parsed PDB, with where it came from.
pub struct Found {
    pub pdb: Pdb,
    /// `"/path/X.pdb"` or `"embedded in /path/X.dll"`.
    pub origin: String,
}

/// Why a module has no usable PDB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Missing {
    /// No PDB anywhere it was looked for.
    NotFound,
    /// A PDB was found but could not be used: why (damaged, another build).
    Unusable(String),
}

/// Looks for the PDB of the assembly at `module_path` (see the module's doc for the order).
pub fn find_pdb(module_path: &Path, symbol_dirs: &[PathBuf]) -> Result<Found, Missing> {
    let name = module_path.file_name().map(|n| Path::new(n).with_extension("pdb")).unwrap_or_default();
    let assembly = std::fs::read(module_path).ok();
    let dir = match &assembly {
        Some(a) => pe::debug_directory(a).map_err(|e| Missing::Unusable(format!("{}: {e}", module_path.display())))?,
        None => pe::DebugDirectory::default(),
    };
    let guid = dir.codeview.as_ref().map(|c| c.0);
    let mut candidates: Vec<PathBuf> = Vec::new();
    for d in symbol_dirs {
        candidates.push(d.join(&name));
        if let Some(g) = guid {
            candidates.push(d.join(&name).join(format!("{}FFFFFFFF", guid_hex(&g))).join(&name));
        }
    }
    candidates.push(module_path.with_extension("pdb"));
    if let Some((_, p)) = &dir.codeview {
        if !p.is_empty() {
            candidates.push(PathBuf::from(p));
        }
    }
    let mut unusable = None;
    for c in candidates {
        let Ok(data) = std::fs::read(&c) else { continue };
        match Pdb::parse(&data) {
            Ok(pdb) if guid.is_none_or(|g| g == pdb.guid) => {
                return Ok(Found { pdb, origin: c.display().to_string() });
            }
            Ok(_) => {
                unusable.get_or_insert_with(|| format!("{} is the PDB of another build of the assembly", c.display()));
            }
            Err(e) => {
                unusable.get_or_insert_with(|| format!("{}: {e}", c.display()));
            }
        }
    }
    if let Some(data) = dir.embedded {
        return match Pdb::parse(&data) {
            Ok(pdb) => Ok(Found { pdb, origin: format!("embedded in {}", module_path.display()) }),
            Err(e) => Err(Missing::Unusable(format!("the PDB embedded in {}: {e}", module_path.display()))),
        };
    }
    Err(unusable.map_or(Missing::NotFound, Missing::Unusable))
}

/// A GUID as a symbol store names it (32 upper-case hex digits, first three groups as numbers).
fn guid_hex(g: &[u8; 16]) -> String {
    let order = [3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15];
    order.iter().map(|&i| format!("{:02X}", g[i])).collect()
}

/// The sequence points of method `token` (a MethodDef token) in `pdb`.
fn points(pdb: &Pdb, token: u32) -> Option<&[SequencePoint]> {
    if token >> 24 != 0x06 {
        return None;
    }
    let row = (token & 0x00FF_FFFF) as usize;
    pdb.methods.get(row.checked_sub(1)?).map(|v| v.as_slice()).filter(|v| !v.is_empty())
}

/// The line of IL position `at` in method `token`: the last visible sequence point at or before
/// the offset (code after a hidden point belongs to the statement before it); prologs and
/// unmapped code take the method's first line, epilogs its last.
pub fn line_in(pdb: &Pdb, token: u32, at: IlAt) -> Option<SourceLine> {
    let pts = points(pdb, token)?;
    let first = || pts.iter().find(|p| !p.hidden());
    let p = match at {
        IlAt::Offset(il) => {
            let i = pts.partition_point(|p| p.il_offset <= il);
            pts[..i].iter().rev().find(|p| !p.hidden()).or_else(first)
        }
        IlAt::Prolog | IlAt::Unmapped => first(),
        IlAt::Epilog => pts.iter().rev().find(|p| !p.hidden()),
    }?;
    let file = pdb.documents.get((p.document as usize).checked_sub(1)?)?.clone();
    Some(SourceLine { file, line: p.line })
}

/// Every module's PDB, each looked for and read once (thread-safe; shared by the profiles of one
/// reader).
#[derive(Default)]
pub struct Pdbs {
    dirs: Vec<PathBuf>,
    cache: Mutex<HashMap<String, Arc<Result<Found, Missing>>>>,
}

impl Pdbs {
    pub fn new(symbol_dirs: Vec<PathBuf>) -> Self {
        Pdbs { dirs: symbol_dirs, cache: Mutex::new(HashMap::new()) }
    }

    /// The PDB of the module at `module_path`, looked for once.
    pub fn get(&self, module_path: &str) -> Arc<Result<Found, Missing>> {
        if let Some(f) = self.cache.lock().ok().and_then(|c| c.get(module_path).cloned()) {
            return f;
        }
        let found = Arc::new(find_pdb(Path::new(module_path), &self.dirs));
        if let Ok(mut c) = self.cache.lock() {
            c.insert(module_path.to_string(), found.clone());
        }
        found
    }
}

/// What `--view source` shows of one method.
#[derive(Clone, Debug, PartialEq)]
pub struct MethodSource {
    /// The method's document as the PDB names it (where it was compiled).
    pub file: String,
    /// The method's visible sequence points in that document, in IL order.
    pub lines: Vec<LinePoint>,
    /// The method's first and last lines (of its visible sequence points).
    pub first_line: u32,
    pub last_line: u32,
    /// The document's text: the file at `file` (or of that name under a symbol directory), else
    /// the source embedded in the PDB; `None` when neither is there.
    pub text: Option<String>,
    /// Where the text came from: the file read, or `"embedded in …"`.
    pub text_origin: Option<String>,
    /// The document's Source Link URL, when the PDB maps it.
    pub source_link: Option<String>,
    /// Where the PDB came from.
    pub pdb: String,
}

/// One visible sequence point of a method: its IL offset and lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinePoint {
    pub il_offset: u32,
    pub line: u32,
    pub end_line: u32,
}

/// What `--view source` needs of method `token` of the module at `module_path`. `Ok(None)`: the
/// PDB has no lines for the method (compiler-generated, or not a MethodDef); an error: the module
/// has no usable PDB (the message says why).
pub fn method_source(module_path: &Path, token: u32, symbol_dirs: &[PathBuf]) -> Result<Option<MethodSource>, String> {
    let found =
        find_pdb(module_path, symbol_dirs).map_err(|m| describe_missing(&module_path.display().to_string(), &m))?;
    Ok(source_of(&found, token, symbol_dirs))
}

/// [`method_source`] from a PDB already found.
pub fn source_of(found: &Found, token: u32, symbol_dirs: &[PathBuf]) -> Option<MethodSource> {
    let pdb = &found.pdb;
    let pts = points(pdb, token)?;
    let doc = pts.iter().find(|p| !p.hidden())?.document;
    let lines: Vec<LinePoint> = pts
        .iter()
        .filter(|p| !p.hidden() && p.document == doc)
        .map(|p| LinePoint { il_offset: p.il_offset, line: p.line, end_line: p.end_line })
        .collect();
    let file = pdb.documents.get((doc as usize).checked_sub(1)?)?.clone();
    let first_line = lines.iter().map(|l| l.line).min()?;
    let last_line = lines.iter().map(|l| l.end_line.max(l.line)).max()?;
    let mut text = None;
    let mut text_origin = None;
    let base = file.rsplit(['/', '\\']).next().unwrap_or(&file);
    let on_disk = std::iter::once(PathBuf::from(&file)).chain(symbol_dirs.iter().map(|d| d.join(base)));
    for p in on_disk {
        if let Ok(t) = std::fs::read(&p) {
            text = Some(String::from_utf8_lossy(&t).into_owned());
            text_origin = Some(p.display().to_string());
            break;
        }
    }
    if text.is_none() {
        if let Some(t) = pdb.embedded.get(&doc) {
            text = Some(String::from_utf8_lossy(t).into_owned());
            text_origin = Some(format!("embedded in {}", found.origin));
        }
    }
    let source_link = pdb.source_link.as_deref().and_then(|j| source_link_url(j, &file));
    Some(MethodSource { file, lines, first_line, last_line, text, text_origin, source_link, pdb: found.origin.clone() })
}

/// The URL a Source Link map gives `file` (`{"documents": {"/src/*": "https://host/*"}}`: the
/// longest matching prefix; a key without `*` matches the exact path).
pub fn source_link_url(json: &str, file: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let docs = v.get("documents")?.as_object()?;
    let mut best: Option<(usize, String)> = None;
    for (k, url) in docs {
        let url = url.as_str()?;
        let m = match k.strip_suffix('*') {
            Some(prefix) if file.starts_with(prefix) => {
                let rest = file[prefix.len()..].replace('\\', "/");
                Some((prefix.len(), url.replacen('*', &rest, 1)))
            }
            None if k == file => Some((usize::MAX, url.to_string())),
            _ => None,
        };
        if let Some(m) = m {
            if best.as_ref().is_none_or(|b| m.0 > b.0) {
                best = Some(m);
            }
        }
    }
    best.map(|b| b.1)
}

/// One line on a module without usable PDB.
pub fn describe_missing(module: &str, m: &Missing) -> String {
    match m {
        Missing::NotFound => format!(
            "no PDB for {module} (looked beside it, at its CodeView path, embedded in it and under --symbols): its frames are per function"
        ),
        Missing::Unusable(why) => format!("no source lines for {module}: {why}; its frames are per function"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_link_takes_the_longest_prefix() {
        let j = r#"{"documents": {"/src/*": "https://h/a/*", "/src/lib/*": "https://h/b/*", "/x.cs": "https://h/x"}}"#;
        assert_eq!(source_link_url(j, "/src/app/P.cs").as_deref(), Some("https://h/a/app/P.cs"));
        assert_eq!(source_link_url(j, "/src/lib/L.cs").as_deref(), Some("https://h/b/L.cs"));
        assert_eq!(source_link_url(j, "/x.cs").as_deref(), Some("https://h/x"));
        assert_eq!(source_link_url(j, "/other/y.cs"), None);
        assert_eq!(source_link_url("not json", "/x.cs"), None);
    }

    #[test]
    fn lines_skip_hidden_points() {
        let sp = |il, line| SequencePoint { il_offset: il, document: 1, line, end_line: line };
        let pdb = Pdb {
            documents: vec!["/src/P.cs".into()],
            methods: vec![vec![
                sp(0, metadata::HIDDEN_LINE),
                sp(2, 10),
                sp(8, 11),
                sp(12, metadata::HIDDEN_LINE),
                sp(15, 12),
            ]],
            ..Default::default()
        };
        let at = |a| line_in(&pdb, 0x0600_0001, a).map(|l| l.line);
        assert_eq!(at(IlAt::Offset(0)), Some(10));
        assert_eq!(at(IlAt::Offset(9)), Some(11));
        assert_eq!(at(IlAt::Offset(13)), Some(11));
        assert_eq!(at(IlAt::Offset(15)), Some(12));
        assert_eq!(at(IlAt::Prolog), Some(10));
        assert_eq!(at(IlAt::Unmapped), Some(10));
        assert_eq!(at(IlAt::Epilog), Some(12));
        assert_eq!(line_in(&pdb, 0x0600_0002, IlAt::Offset(0)), None);
        assert_eq!(line_in(&pdb, 0x0200_0001, IlAt::Offset(0)), None);
    }

    #[test]
    fn missing_files_are_not_found() {
        let r = find_pdb(Path::new("/nonexistent/dir/App.dll"), &[]);
        assert_eq!(r.err(), Some(Missing::NotFound));
    }
}
