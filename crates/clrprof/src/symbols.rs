//! Native symbol names for sampled IPs, from the ELF symbol tables (`.symtab` when present, else
//! `.dynsym`) of the files the profiled process had mapped. Read once per file, at report time.

use std::collections::HashMap;

use clrprof_model::NativeSymbols;
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

struct FileSymbols {
    /// Loadable segments: (file offset, file size, virtual address).
    segments: Vec<(u64, u64, u64)>,
    /// Function symbols: (address, size, name), sorted by address.
    symbols: Vec<(u64, u64, String)>,
}

impl FileSymbols {
    fn read(path: &str) -> Option<FileSymbols> {
        let data = std::fs::read(path).ok()?;
        let file = object::File::parse(&*data).ok()?;
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
        Some(FileSymbols { segments, symbols })
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

/// ELF symbol tables by file path, each read once.
#[derive(Default)]
pub struct ElfSymbols {
    files: HashMap<String, Option<FileSymbols>>,
}

impl NativeSymbols for ElfSymbols {
    fn symbol(&mut self, path: &str, file_offset: u64) -> Option<(String, u64)> {
        self.files.entry(path.to_string()).or_insert_with(|| FileSymbols::read(path)).as_ref()?.lookup(file_offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_an_exported_function_of_a_system_library() {
        // zlib is on every machine that has .NET; `adler32_z` is exported and not an IFUNC.
        let Some(path) = ["/usr/lib/x86_64-linux-gnu/libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
        else {
            return;
        };
        let f = FileSymbols::read(path).expect("libz parses");
        let &(addr, size, _) = f.symbols.iter().find(|s| s.2 == "adler32_z").expect("adler32_z");
        let &(off, _, vaddr) = f.segments.iter().find(|&&(_, _, v)| v <= addr).unwrap();
        let file_off = addr - vaddr + off + size / 2;
        let mut e = ElfSymbols::default();
        assert_eq!(e.symbol(path, file_off).map(|s| s.0), Some("adler32_z".to_string()));
        assert_eq!(e.symbol("/nonexistent/lib.so", 0x1000), None);
        assert_eq!(demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"), "core::ptr::drop_in_place");
        assert_eq!(demangle("_ZN10MethodDesc7GetNameEv"), "MethodDesc::GetName()");
        assert_eq!(demangle("memcpy"), "memcpy");
    }
}
