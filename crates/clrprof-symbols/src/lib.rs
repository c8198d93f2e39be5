//! Native symbol names for sampled IPs, from the ELF symbol tables (`.symtab` when present, else
//! `.dynsym`) of the files the profiled process had mapped. Read once per file, at report time.
//!
//! A trace records each mapped file's GNU build-id. The file now at the recorded path is used only
//! when its build-id is the recorded one (a library upgraded since, or a trace from another
//! machine, would otherwise name frames after the wrong code); else the separate debug file
//! `<dir>/.build-id/<first 2 hex digits>/<rest>.debug` is looked for in the caller's directories
//! and `/usr/lib/debug`. When nothing matches, the file's frames stay unnamed and
//! [`NativeSymbols::diagnostics`] says why. Traces written before build-ids were recorded (empty
//! build-id) use the file at the path, as before.
//!
//! A reader that computes many profiles of one trace (the viewer: one per range of time asked)
//! shares one [`SymbolTables`] between them through a [`Symbolizer`], so that each file is read
//! once per process rather than once per profile.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use clrprof_model::{IlAt, NativeSymbols, NoSymbols, SourceLine};
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

pub mod ppdb;

pub use ppdb::{method_source, LinePoint, MethodSource};

/// Where distributions install separate debug files by build-id.
pub const SYSTEM_DEBUG_DIR: &str = "/usr/lib/debug";

struct FileSymbols {
    /// Loadable segments: (file offset, file size, virtual address).
    segments: Vec<(u64, u64, u64)>,
    /// Function symbols: (address, size, name), sorted by address.
    symbols: Vec<(u64, u64, String)>,
}

/// A file's contents parsed as ELF, with its build-id.
struct Parsed {
    symbols: FileSymbols,
    /// Empty when the file has no build-id note.
    build_id: Vec<u8>,
    /// The file name in its `.gnu_debuglink` section (the separate debug file), if any.
    debuglink: Option<String>,
}

/// Why a file could not be used.
enum Unusable {
    /// Missing, unreadable or not ELF: why, naming the file.
    Unreadable(String),
    /// Readable, with this build-id (empty: none).
    OtherBuild(Vec<u8>),
}

impl FileSymbols {
    fn parse(data: &[u8]) -> Result<Parsed, String> {
        let file = object::File::parse(data).map_err(|e| e.to_string())?;
        let build_id = file.build_id().ok().flatten().unwrap_or_default().to_vec();
        let debuglink = file
            .gnu_debuglink()
            .ok()
            .flatten()
            .and_then(|(name, _crc)| std::str::from_utf8(name).ok())
            .filter(|n| !n.is_empty() && !n.contains('/'))
            .map(String::from);
        let segments = file
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (off, size, s.address())
            })
            .collect();
        let mut symbols: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), demangle(s.name().ok()?))))
            .filter(|s| !s.2.is_empty())
            .collect();
        symbols.sort();
        symbols.dedup_by_key(|s| s.0);
        Ok(Parsed { symbols: FileSymbols { segments, symbols }, build_id, debuglink })
    }

    /// The file at `path` parsed, when its build-id is `build_id` (any build-id when `build_id` is
    /// empty).
    fn read_matching(path: &Path, build_id: &[u8]) -> Result<Parsed, Unusable> {
        let data =
            std::fs::read(path).map_err(|e| Unusable::Unreadable(format!("cannot read {} ({e})", path.display())))?;
        let parsed = FileSymbols::parse(&data)
            .map_err(|e| Unusable::Unreadable(format!("{} is not an ELF file ({e})", path.display())))?;
        if build_id.is_empty() || parsed.build_id == build_id {
            Ok(parsed)
        } else {
            Err(Unusable::OtherBuild(parsed.build_id))
        }
    }

    /// Adds the function symbols of a separate debug file of the same build (a stripped library
    /// keeps only its exported symbols; its debug file has them all). The library's own segments
    /// stay: a debug file's segments have no file contents.
    fn merge(&mut self, debug: FileSymbols) {
        self.symbols.extend(debug.symbols);
        self.symbols.sort();
        self.symbols.dedup_by_key(|s| s.0);
    }

    fn lookup(&self, file_offset: u64) -> Option<(String, u64)> {
        let &(off, _, vaddr) = self.segments.iter().find(|&&(o, n, _)| file_offset >= o && file_offset < o + n)?;
        let at = file_offset - off + vaddr;
        let i = self.symbols.partition_point(|s| s.0 <= at);
        let (addr, size, name) = self.symbols.get(i.checked_sub(1)?)?;
        // A symbol names only the bytes it covers: IPs in stripped (local) code stay unnamed.
        if at >= addr + (*size).max(1) {
            return None;
        }
        Some((name.clone(), addr - vaddr + off))
    }
}

/// Readable names for Rust and C++ symbols; others unchanged.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return d;
            }
        }
    }
    name.to_string()
}

/// Lower-case hex of a build-id, as in `.build-id` paths and `readelf -n`.
pub fn hex(build_id: &[u8]) -> String {
    build_id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The path of the separate debug file of `build_id` under a debug directory
/// (`<dir>/.build-id/ab/cdef….debug`); `None` for ids too short to name one.
pub fn debug_file_path(dir: &Path, build_id: &[u8]) -> Option<PathBuf> {
    if build_id.len() < 2 {
        return None;
    }
    let h = hex(build_id);
    Some(dir.join(".build-id").join(&h[..2]).join(format!("{}.debug", &h[2..])))
}

/// What opening a recorded file gave: its symbols, or why its frames stay unnamed.
struct Opened {
    symbols: Option<FileSymbols>,
    /// Said once per profile that asks for the file (`None`: nothing to say).
    diagnostic: Option<String>,
}

/// A recorded file: its path and build-id.
type FileKey = (String, Vec<u8>);

/// ELF symbol tables by file path and build-id, each read once and kept for every resolver made
/// from them (thread-safe: the viewer computes profiles on several threads). A file is keyed by its
/// recorded build-id, so a kept table stays right for it; only a file of an old trace (no
/// build-id) is trusted as it was when first read.
pub struct SymbolTables {
    /// Searched for separate debug files, in order (the caller's, then `/usr/lib/debug`).
    debug_dirs: Vec<PathBuf>,
    /// Each file's cell is filled once; threads asking for one being read wait for it, others not.
    files: Mutex<HashMap<FileKey, Arc<OnceLock<Arc<Opened>>>>>,
}

impl SymbolTables {
    /// Also looks for separate debug files (`<dir>/.build-id/xx/yyyy.debug`) under `dirs`, before
    /// `/usr/lib/debug`.
    pub fn with_debug_dirs(dirs: Vec<PathBuf>) -> Self {
        let mut debug_dirs = dirs;
        debug_dirs.push(PathBuf::from(SYSTEM_DEBUG_DIR));
        SymbolTables { debug_dirs, files: Mutex::new(HashMap::new()) }
    }

    /// A resolver for one profile, reading through these tables.
    pub fn resolver(self: &Arc<Self>) -> ElfSymbols {
        ElfSymbols { tables: Arc::clone(self), seen: HashMap::new(), diagnostics: BTreeMap::new() }
    }

    /// The file's symbols, read on first use.
    fn get(&self, key: &FileKey) -> Arc<Opened> {
        let cell = {
            let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(files.entry(key.clone()).or_default())
        };
        Arc::clone(cell.get_or_init(|| Arc::new(self.open(&key.0, &key.1))))
    }

    /// Separate debug files that may belong to the file at `path`, in the order GDB looks: by
    /// build-id under the debug directories, then by its `.gnu_debuglink` name beside it, in
    /// `.debug/` beside it, and under each debug directory followed by the file's directory.
    fn debug_candidates(&self, path: &Path, build_id: &[u8], debuglink: Option<&str>) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self.debug_dirs.iter().filter_map(|d| debug_file_path(d, build_id)).collect();
        if let (Some(link), Some(dir)) = (debuglink, path.parent()) {
            out.push(dir.join(link));
            out.push(dir.join(".debug").join(link));
            for d in &self.debug_dirs {
                out.push(d.join(dir.strip_prefix("/").unwrap_or(dir)).join(link));
            }
        }
        out.retain(|p| p != path);
        out
    }

    /// The symbols of the first debug file among `candidates` whose build-id is `build_id`.
    fn debug_symbols(candidates: &[PathBuf], build_id: &[u8]) -> Option<FileSymbols> {
        if build_id.is_empty() {
            return None; // nothing to prove the debug file is of this build
        }
        candidates.iter().find_map(|c| FileSymbols::read_matching(c, build_id).ok()).map(|p| p.symbols)
    }

    /// The symbols for a recorded file: the file at `path` when it is the recorded build (with the
    /// symbols of its separate debug file when one is installed), else a debug file of that build;
    /// none (with a diagnostic) when there is neither.
    fn open(&self, path: &str, build_id: &[u8]) -> Opened {
        let found = |symbols| Opened { symbols: Some(symbols), diagnostic: None };
        let why = match FileSymbols::read_matching(Path::new(path), build_id) {
            Ok(parsed) => {
                let mut f = parsed.symbols;
                let candidates = self.debug_candidates(Path::new(path), &parsed.build_id, parsed.debuglink.as_deref());
                if let Some(debug) = Self::debug_symbols(&candidates, &parsed.build_id) {
                    f.merge(debug);
                }
                return found(f);
            }
            // An old trace (no recorded build-id) and a file that is gone: nothing to say, as before.
            Err(_) if build_id.is_empty() => return Opened { symbols: None, diagnostic: None },
            Err(Unusable::Unreadable(why)) => why,
            Err(Unusable::OtherBuild(id)) if id.is_empty() => {
                format!("{path} has no build-id but the trace recorded one (another file, or another machine)")
            }
            Err(Unusable::OtherBuild(_)) => {
                format!("{path} has another build-id than the recorded one (upgraded, or another machine)")
            }
        };
        for dir in &self.debug_dirs {
            let Some(debug) = debug_file_path(dir, build_id) else { continue };
            if let Ok(f) = FileSymbols::read_matching(&debug, build_id) {
                return found(f.symbols);
            }
        }
        let module = path.rsplit('/').next().unwrap_or(path);
        let diagnostic = format!(
            "{module}: {why} and no debug file matches build-id {}; its frames show as {module}!<unknown>",
            hex(build_id)
        );
        Opened { symbols: None, diagnostic: Some(diagnostic) }
    }
}

/// Native names for one profile, read through [`SymbolTables`] (its own, or shared with other
/// profiles'). Its diagnostics are those of the files this profile asked for.
pub struct ElfSymbols {
    tables: Arc<SymbolTables>,
    /// The files this resolver asked for.
    seen: HashMap<FileKey, Arc<Opened>>,
    /// Why a file's frames stay unnamed, by path (sorted, so output is deterministic).
    diagnostics: BTreeMap<String, String>,
}

impl Default for ElfSymbols {
    fn default() -> Self {
        ElfSymbols::with_debug_dirs(Vec::new())
    }
}

impl ElfSymbols {
    /// A resolver with tables of its own (see [`SymbolTables::with_debug_dirs`]).
    pub fn with_debug_dirs(dirs: Vec<PathBuf>) -> Self {
        Arc::new(SymbolTables::with_debug_dirs(dirs)).resolver()
    }
}

impl NativeSymbols for ElfSymbols {
    fn symbol(&mut self, path: &str, build_id: &[u8], file_offset: u64) -> Option<(String, u64)> {
        let key = (path.to_string(), build_id.to_vec());
        if !self.seen.contains_key(&key) {
            let opened = self.tables.get(&key);
            if let Some(d) = &opened.diagnostic {
                self.diagnostics.insert(path.to_string(), d.clone());
            }
            self.seen.insert(key.clone(), opened);
        }
        self.seen.get(&key)?.symbols.as_ref()?.lookup(file_offset)
    }

    fn diagnostics(&mut self) -> Vec<String> {
        std::mem::take(&mut self.diagnostics).into_values().collect()
    }
}

/// How a reader names native frames, chosen once: from the ELF files on this machine (tables read
/// once and shared by every profile it makes), or not at all (`module!<unknown>`). Cloning shares
/// the tables.
/// With [`Symbolizer::with_lines`], managed frames are resolved to source lines from the
/// modules' portable PDBs as well (`ppdb`), each PDB read once for every profile.
#[derive(Clone)]
pub struct Symbolizer(Option<Arc<SymbolTables>>, Option<Arc<ppdb::Pdbs>>, bool);

impl Symbolizer {
    /// `native_symbols`: name native frames, looking for separate debug files under `debug_dirs`
    /// too; else leave them unnamed.
    pub fn new(native_symbols: bool, debug_dirs: Vec<PathBuf>) -> Self {
        Symbolizer(native_symbols.then(|| Arc::new(SymbolTables::with_debug_dirs(debug_dirs))), None, false)
    }

    /// Native frames stay `module!<unknown>`.
    pub fn none() -> Self {
        Symbolizer(None, None, false)
    }

    /// `lines`: resolve managed frames to source lines too, from PDBs found beside the assemblies,
    /// embedded in them, at their CodeView paths or under `symbol_dirs`.
    pub fn with_lines(self, lines: bool, symbol_dirs: Vec<PathBuf>) -> Self {
        Symbolizer(self.0, lines.then(|| Arc::new(ppdb::Pdbs::new(symbol_dirs))), lines)
    }

    /// `call_sites`: resolve the call sites of instrumented calls to source lines (the callers
    /// view's lines), even when sampled frames stay per function (without [`with_lines`](Self::with_lines)).
    pub fn with_call_site_lines(self, call_sites: bool, symbol_dirs: Vec<PathBuf>) -> Self {
        match self.1 {
            None if call_sites => Symbolizer(self.0, Some(Arc::new(ppdb::Pdbs::new(symbol_dirs))), false),
            _ => self,
        }
    }

    /// A resolver for one profile.
    pub fn resolver(&self) -> Box<dyn NativeSymbols + Send> {
        let native: Box<dyn NativeSymbols + Send> = match &self.0 {
            Some(tables) => Box::new(tables.resolver()),
            None => Box::new(NoSymbols),
        };
        match &self.1 {
            Some(pdbs) => {
                Box::new(LineSymbols { native, pdbs: pdbs.clone(), missing: BTreeMap::new(), sampled: self.2 })
            }
            None => native,
        }
    }
}

/// A resolver that names native frames as `native` does and managed frames' lines from PDBs.
struct LineSymbols {
    native: Box<dyn NativeSymbols + Send>,
    pdbs: Arc<ppdb::Pdbs>,
    /// Modules without usable PDB that frames asked for (said once each, after resolving).
    missing: BTreeMap<String, ppdb::Missing>,
    /// Sampled frames get lines too (else only instrumented call sites).
    sampled: bool,
}

impl NativeSymbols for LineSymbols {
    fn symbol(&mut self, path: &str, build_id: &[u8], file_offset: u64) -> Option<(String, u64)> {
        self.native.symbol(path, build_id, file_offset)
    }

    fn diagnostics(&mut self) -> Vec<String> {
        let mut out = self.native.diagnostics();
        let missing = std::mem::take(&mut self.missing);
        let not_found: Vec<&str> = missing
            .iter()
            .filter(|(_, m)| **m == ppdb::Missing::NotFound)
            .map(|(p, _)| p.rsplit('/').next().unwrap_or(p))
            .collect();
        if !not_found.is_empty() {
            out.push(format!(
                "no PDB for {} (looked beside each, at its CodeView path, embedded and under --symbols): their frames are per function",
                not_found.join(", ")
            ));
        }
        for (p, m) in &missing {
            if let ppdb::Missing::Unusable(_) = m {
                out.push(ppdb::describe_missing(p, m));
            }
        }
        out
    }

    fn lines(&self) -> bool {
        self.sampled
    }

    fn call_site_lines(&self) -> bool {
        true
    }

    fn source_line(&mut self, module_path: &str, token: u32, at: IlAt) -> Option<SourceLine> {
        let found = self.pdbs.get(module_path);
        match &*found {
            Ok(f) => ppdb::line_in(&f.pdb, token, at),
            Err(m) => {
                if !self.missing.contains_key(module_path) {
                    self.missing.insert(module_path.to_string(), m.clone());
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIBZ: &str = "/usr/lib/x86_64-linux-gnu/libz.so.1";

    /// libz (on every machine that has .NET; `adler32_z` is exported and not an IFUNC): its
    /// build-id and a file offset in the middle of `adler32_z`.
    fn libz() -> Option<(Vec<u8>, u64)> {
        let data = std::fs::read(LIBZ).ok()?;
        let parsed = FileSymbols::parse(&data).expect("libz parses");
        let f = &parsed.symbols;
        let &(addr, size, _) = f.symbols.iter().find(|s| s.2 == "adler32_z").expect("adler32_z");
        let &(off, _, vaddr) = f.segments.iter().find(|&&(o, n, v)| v <= addr && addr < v + n && o <= v).unwrap();
        Some((parsed.build_id, addr - vaddr + off + size / 2))
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("clrprof-symbols-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn reads_the_build_id_of_a_system_library() {
        let Some((id, _)) = libz() else { return };
        assert_eq!(id.len(), 20, "a SHA-1 build-id: {}", hex(&id));
        let out = std::process::Command::new("readelf").args(["-n", LIBZ]).output();
        if let Ok(out) = out {
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if let Some(want) = text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")) {
                assert_eq!(hex(&id), want.trim());
            }
        }
    }

    #[test]
    fn the_recorded_build_names_the_function() {
        let Some((id, off)) = libz() else { return };
        let mut e = ElfSymbols::default();
        assert_eq!(e.symbol(LIBZ, &id, off).map(|s| s.0), Some("adler32_z".to_string()));
        // An old trace (no build-id recorded) trusts the file at the path.
        assert_eq!(e.symbol(LIBZ, &[], off).map(|s| s.0), Some("adler32_z".to_string()));
        assert_eq!(e.symbol("/nonexistent/lib.so", &[], 0x1000), None);
        assert!(e.diagnostics().is_empty());
    }

    #[test]
    fn another_build_names_nothing_and_says_why() {
        let Some((mut id, off)) = libz() else { return };
        id[0] ^= 0xff;
        let mut e = ElfSymbols::with_debug_dirs(vec![scratch("empty")]);
        assert_eq!(e.symbol(LIBZ, &id, off), None);
        assert_eq!(e.symbol(LIBZ, &id, off + 1), None);
        let d = e.diagnostics();
        assert_eq!(
            d,
            vec![format!(
                "libz.so.1: {LIBZ} has another build-id than the recorded one (upgraded, or another machine) and no \
                 debug file matches build-id {}; its frames show as libz.so.1!<unknown>",
                hex(&id)
            )]
        );
        assert!(e.diagnostics().is_empty(), "said once");
        let mut e = ElfSymbols::default();
        assert_eq!(e.symbol("/nonexistent/libx.so", &[1, 2, 3], 0x1000), None);
        let d = e.diagnostics();
        assert_eq!(d.len(), 1);
        assert!(d[0].starts_with("libx.so: cannot read /nonexistent/libx.so ("), "{d:?}");
        assert!(d[0].ends_with("no debug file matches build-id 010203; its frames show as libx.so!<unknown>"), "{d:?}");
    }

    #[test]
    fn shared_tables_read_a_file_once_and_each_profile_says_why() {
        let tables = Arc::new(SymbolTables::with_debug_dirs(vec![scratch("shared")]));
        for _ in 0..2 {
            let mut e = tables.resolver();
            assert_eq!(e.symbol("/nonexistent/liby.so", &[4, 5, 6], 0x1000), None);
            assert_eq!(e.symbol("/nonexistent/liby.so", &[4, 5, 6], 0x2000), None);
            let d = e.diagnostics();
            assert_eq!(d.len(), 1, "{d:?}");
            assert!(d[0].starts_with("liby.so: cannot read /nonexistent/liby.so ("), "{d:?}");
        }
        assert_eq!(tables.files.lock().unwrap().len(), 1);
        if let Some((id, off)) = libz() {
            let s = Symbolizer::new(true, Vec::new());
            let (mut a, mut b) = (s.resolver(), s.clone().resolver());
            assert_eq!(a.symbol(LIBZ, &id, off).map(|s| s.0), Some("adler32_z".to_string()));
            assert_eq!(b.symbol(LIBZ, &id, off).map(|s| s.0), Some("adler32_z".to_string()));
        }
        assert_eq!(Symbolizer::new(false, Vec::new()).resolver().symbol(LIBZ, &[], 0x1000), None);
    }

    #[test]
    fn a_debug_file_of_the_recorded_build_is_found_by_build_id() {
        let Some((id, off)) = libz() else { return };
        let dir = scratch("debug");
        let debug = debug_file_path(&dir, &id).unwrap();
        assert!(debug.ends_with(format!(".build-id/{}/{}.debug", &hex(&id)[..2], &hex(&id)[2..])));
        std::fs::create_dir_all(debug.parent().unwrap()).unwrap();
        std::fs::copy(LIBZ, &debug).unwrap();
        // The file at the recorded path is another build: libz with one byte of its build-id changed.
        let mut data = std::fs::read(LIBZ).unwrap();
        let at = data.windows(id.len()).position(|w| w == id).unwrap();
        data[at] ^= 1;
        let other = dir.join("libz.so.1");
        std::fs::write(&other, &data).unwrap();
        let other = other.to_str().unwrap();
        if !debug_file_path(Path::new(SYSTEM_DEBUG_DIR), &id).unwrap().exists() {
            assert_eq!(ElfSymbols::default().symbol(other, &id, off), None, "the path's file is another build");
        }
        let mut e = ElfSymbols::with_debug_dirs(vec![dir.clone()]);
        assert_eq!(e.symbol(other, &id, off).map(|s| s.0), Some("adler32_z".to_string()));
        assert!(e.diagnostics().is_empty());
        // Another build's id finds no debug file.
        let mut wrong = id.clone();
        wrong[19] ^= 1;
        assert_eq!(e.symbol(other, &wrong, off), None);
        assert_eq!(e.diagnostics().len(), 1);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"), "core::ptr::drop_in_place");
        assert_eq!(demangle("_ZN10MethodDesc7GetNameEv"), "MethodDesc::GetName()");
        assert_eq!(demangle("memcpy"), "memcpy");
    }

    /// Builds a shared library with a local (non-exported) function, strips it down to its exported
    /// symbols and keeps the rest in a separate debug file named by `.gnu_debuglink`, as runtime
    /// packages ship `libcoreclr.so` with `libcoreclr.so.dbg`. None when no C toolchain is there.
    fn stripped_library(dir: &Path) -> Option<(PathBuf, PathBuf)> {
        let run = |cmd: &str, args: &[&str]| {
            std::process::Command::new(cmd)
                .args(args)
                .current_dir(dir)
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        };
        std::fs::write(
            dir.join("work.c"),
            "static int __attribute__((noinline)) hidden_work(int n) { int s = 0; for (int i = 0; i < n; i++) s += i * i; return s; }\n\
             int exported_entry(int n) { return hidden_work(n) + 1; }\n",
        )
        .ok()?;
        let ok = run("cc", &["-O1", "-g", "-shared", "-fPIC", "-Wl,--build-id", "-o", "libwork.so", "work.c"])
            && run("objcopy", &["--only-keep-debug", "libwork.so", "libwork.so.dbg"])
            && run("strip", &["--strip-unneeded", "libwork.so"])
            && run("objcopy", &["--add-gnu-debuglink=libwork.so.dbg", "libwork.so"]);
        ok.then(|| (dir.join("libwork.so"), dir.join("libwork.so.dbg")))
    }

    #[test]
    fn a_stripped_library_is_named_from_its_debuglink_debug_file() {
        let dir = scratch("debuglink");
        let Some((lib, dbg)) = stripped_library(&dir) else { return };
        let parsed = FileSymbols::parse(&std::fs::read(&lib).unwrap()).unwrap();
        assert_eq!(parsed.debuglink.as_deref(), Some("libwork.so.dbg"));
        assert!(!parsed.symbols.symbols.iter().any(|s| s.2 == "hidden_work"), "stripped");
        let full = FileSymbols::parse(&std::fs::read(&dbg).unwrap()).unwrap();
        let &(addr, size, _) = full.symbols.symbols.iter().find(|s| s.2 == "hidden_work").expect("in the debug file");
        let &(off, _, vaddr) =
            parsed.symbols.segments.iter().find(|&&(_, n, v)| v <= addr && addr < v + n).expect("a segment");
        let at = addr - vaddr + off + size / 2;
        let path = lib.to_str().unwrap();
        let mut e = ElfSymbols::with_debug_dirs(vec![dir.join("none")]);
        assert_eq!(e.symbol(path, &parsed.build_id, at).map(|s| s.0), Some("hidden_work".to_string()));
        assert!(e.diagnostics().is_empty());
        // A debug file of another build is not used.
        let mut data = std::fs::read(&dbg).unwrap();
        let i = data.windows(parsed.build_id.len()).position(|w| w == parsed.build_id).unwrap();
        data[i] ^= 1;
        std::fs::write(&dbg, data).unwrap();
        let mut e = ElfSymbols::with_debug_dirs(vec![dir.join("none")]);
        assert_eq!(e.symbol(path, &parsed.build_id, at), None);
    }
}
