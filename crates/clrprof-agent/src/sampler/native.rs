//! Executable file mappings of the process (`/proc/self/maps`), recorded with the mapped files'
//! build-ids so that native IPs can be named later (module and ELF symbol) by the reader, off
//! every hot path.

use std::collections::{HashMap, HashSet};

/// One executable, file-backed mapping.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Mapping {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) file_offset: u64,
    pub(crate) path: String,
}

/// Parses the executable file mappings out of `/proc/<pid>/maps` text.
pub(crate) fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.split_ascii_whitespace();
        let (Some(range), Some(perms), Some(off), Some(_dev), Some(_inode)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let path = it.collect::<Vec<_>>().join(" ");
        // JIT code is double-mapped from a memfd (`/memfd:doublemapper (deleted)`): not a file.
        if !perms.contains('x') || !path.starts_with('/') || path.starts_with("/memfd:") {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end), Ok(file_offset)) =
            (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16), u64::from_str_radix(off, 16))
        else {
            continue;
        };
        out.push(Mapping { start, end, file_offset, path });
    }
    out
}

/// Every executable mapping of `/proc/<pid>/maps` text (file-backed or not: JIT code heaps too).
pub(crate) fn exec_ranges(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.split_ascii_whitespace();
            let (range, perms) = (it.next()?, it.next()?);
            if !perms.contains('x') {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?))
        })
        .collect()
}

/// Remembers which mappings were already written.
#[derive(Default)]
pub(crate) struct MapTracker {
    seen: HashSet<Mapping>,
    /// Sorted ranges of native code.
    native: Vec<(u64, u64)>,
    /// Sorted executable ranges of managed images (`.dll`/`.exe` files: ReadyToRun code).
    managed: Vec<(u64, u64)>,
    /// Build-ids by path, each file read once.
    build_ids: HashMap<String, Vec<u8>>,
    /// Every executable mapping (JIT code heaps too), sorted, as of the last read.
    exec: Vec<(u64, u64)>,
}

impl MapTracker {
    /// Mappings not written before.
    /// Whether `ip` lies in native (ELF) code: a mapped file other than a managed `.dll`.
    pub(crate) fn is_native(&self, ip: u64) -> bool {
        let i = self.native.partition_point(|r| r.0 <= ip);
        i > 0 && ip < self.native[i - 1].1
    }

    /// Whether `ip` lies in the executable part of a mapped managed image (ReadyToRun code).
    pub(crate) fn is_managed_image(&self, ip: u64) -> bool {
        let i = self.managed.partition_point(|r| r.0 <= ip);
        i > 0 && ip < self.managed[i - 1].1
    }

    /// Whether `ip` lies in an executable mapping as of the last read.
    pub(crate) fn exec_known(&self, ip: u64) -> bool {
        let i = self.exec.partition_point(|r| r.0 <= ip);
        i > 0 && ip < self.exec[i - 1].1
    }

    /// The executable mappings as of the last read.
    pub(crate) fn exec_ranges(&self) -> &[(u64, u64)] {
        &self.exec
    }

    pub(crate) fn new_mappings(&mut self) -> Vec<Mapping> {
        let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        self.exec = exec_ranges(&text);
        self.exec.sort_unstable();
        let fresh: Vec<Mapping> = parse_maps(&text).into_iter().filter(|m| self.seen.insert(m.clone())).collect();
        if !fresh.is_empty() {
            self.native = self
                .seen
                .iter()
                .filter(|m| !m.path.ends_with(".dll") && !m.path.ends_with(".exe"))
                .map(|m| (m.start, m.end))
                .collect();
            self.native.sort_unstable();
            self.managed = self
                .seen
                .iter()
                .filter(|m| m.path.ends_with(".dll") || m.path.ends_with(".exe"))
                .map(|m| (m.start, m.end))
                .collect();
            self.managed.sort_unstable();
        }
        fresh
    }

    /// The GNU build-id of a mapped file (empty when it has none or cannot be read), read once per
    /// path.
    pub(crate) fn build_id(&mut self, path: &str) -> Vec<u8> {
        if let Some(id) = self.build_ids.get(path) {
            return id.clone();
        }
        let id = super::build_id::of_file(path);
        self.build_ids.insert(path.to_string(), id.clone());
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_executable_file_mappings_only() {
        let text = "\
7f0000000000-7f0000001000 r--p 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000001000-7f0000100000 r-xp 00001000 08:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000200000-7f0000300000 rwxp 00000000 00:00 0
7f0000400000-7f0000500000 r-xp 00002000 08:01 9 /opt/my lib/libx.so (deleted)
7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0 [vdso]
7f1000000000-7f1000100000 r-xp 00000000 00:01 5 /memfd:doublemapper (deleted)
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!((m[0].start, m[0].end, m[0].file_offset), (0x7f0000001000, 0x7f0000100000, 0x1000));
        assert_eq!(m[1].path, "/opt/my lib/libx.so (deleted)");
        assert!(parse_maps("garbage\n\n1-2 r-x").is_empty());
        assert_eq!(
            exec_ranges(text),
            [
                (0x7f0000001000, 0x7f0000100000),
                (0x7f0000200000, 0x7f0000300000),
                (0x7f0000400000, 0x7f0000500000),
                (0x7ffd00000000, 0x7ffd00001000),
                (0x7f1000000000, 0x7f1000100000)
            ]
        );
    }
}
