//! Unwind rules of native code without frame pointers, from the `.eh_frame` call-frame
//! information (CFI) of the mapped ELF files, compacted for the signal handler.
//!
//! Native code built without frame pointers (glibc, most system libraries) keeps RBP as a
//! general-purpose register: a sample whose leaf is in such code (a system call wrapper such as
//! `__open`, which keeps the path in RBP while the kernel works) cannot be walked through RBP —
//! the frame-pointer walk reads whatever RBP holds (a string on the stack, a heap pointer) and the
//! sample loses its callers. The CFI says, for every instruction, where the frame's return address
//! and the caller's saved RBP are: at fixed offsets from SP in RSP-based frames. The handler steps
//! through such frames with these rules (`cpu::native_steps`) until it reaches code with an RBP
//! frame (managed code, or native code built with frame pointers), where the ordinary walk goes on
//! from the caller's RBP the rules recovered.
//!
//! Each file's rules are read once, on the sampler thread, into a sorted array of [`Row`] words
//! (about 8 bytes per row: libc has ~28,000 rows, libcoreclr ~110,000) that is never freed, since
//! the handler may read it at any time.
//!
//! Reading them costs about 125 ns a row (50 ms of CPU for the twenty libraries the C# compiler
//! maps), in every profiled process. With a cache directory (`CLRPROF_CACHE_DIR`, which the CLI
//! sets) the rows of a file with a GNU build id are kept there after the first read, under that
//! id, and later processes read them back (checked: size, digest, order) instead.

use gimli::{BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, RegisterRule, UnwindContext, UnwindSection};
use object::{Object, ObjectSection, ObjectSegment};
use std::path::Path;

/// How a row's frame is found.
pub(crate) const KIND_NONE: u32 = 0;
/// CFA = RSP + offset (an RSP-based frame): return address at CFA − 8.
pub(crate) const KIND_RSP: u32 = 1;
/// CFA = RBP + offset (a frame-pointer frame): the ordinary walk handles it.
pub(crate) const KIND_RBP: u32 = 2;

/// Largest `.eh_frame` section read (libcoreclr's is about 1 MB).
const MAX_EH_FRAME: u64 = 64 << 20;

/// One unwind rule, valid from its address up to the next row's: packed as `address` (bits 0–31,
/// the file's virtual address) and `info` (bits 32–63): CFA offset (bits 0–15 of info), the
/// caller's RBP saved at CFA − 8·k (k in bits 16–23, 0 when RBP is not saved), kind (bits 24–25).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) address: u32,
    pub(crate) kind: u32,
    pub(crate) cfa_offset: u16,
    pub(crate) rbp_slot: u8,
}

impl Row {
    pub(crate) fn pack(self) -> u64 {
        let info = self.cfa_offset as u32 | (self.rbp_slot as u32) << 16 | (self.kind & 3) << 24;
        self.address as u64 | (info as u64) << 32
    }
    #[inline(always)]
    pub(crate) fn unpack(v: u64) -> Row {
        let info = (v >> 32) as u32;
        Row { address: v as u32, kind: (info >> 24) & 3, cfa_offset: info as u16, rbp_slot: (info >> 16) as u8 }
    }
}

/// The rules of one ELF file: rows sorted by address, and its loadable segments (file offset,
/// virtual address, size) to translate mapped addresses.
pub(crate) struct FileRules {
    pub(crate) rows: Box<[u64]>,
    pub(crate) segments: Vec<(u64, u64, u64)>,
}

impl FileRules {
    /// The virtual address the file gives to the first byte of a mapping of `len` bytes from
    /// `file_offset`, by the loadable segment that fills most of the mapping (None when none
    /// does). A mapping starts at a page boundary, so it may begin with the end of the segment
    /// before: linkers that do not keep virtual addresses and file offsets equal (lld) shift
    /// the code's segment by a page from the one before.
    pub(crate) fn vaddr_of(&self, file_offset: u64, len: u64) -> Option<u64> {
        let end = file_offset.checked_add(len)?;
        let (off, vaddr, _) = self
            .segments
            .iter()
            .map(|&(off, vaddr, size)| {
                let overlap = end.min(off.saturating_add(size)).saturating_sub(file_offset.max(off));
                (off, vaddr, overlap)
            })
            .filter(|s| s.2 > 0)
            .max_by_key(|s| s.2)?;
        vaddr.checked_add(file_offset)?.checked_sub(off)
    }
}

/// The rule that holds at virtual address `vaddr`, from rows packed by [`Row::pack`] (binary
/// search; async-signal-safe: reads only `rows`).
#[inline(always)]
pub(crate) fn lookup(rows: &[u64], vaddr: u64) -> Option<Row> {
    if vaddr > u32::MAX as u64 {
        return None;
    }
    let a = vaddr as u32;
    let i = rows.partition_point(|&r| (r as u32) <= a);
    (i > 0).then(|| Row::unpack(rows[i - 1]))
}

/// Reads the rules of the ELF file at `path` (None when it cannot be read or has no `.eh_frame`).
/// The agent reads through [`of_file_cached`]; tests and tools read directly.
#[cfg(test)]
pub(crate) fn of_file(path: &str) -> Option<FileRules> {
    of_file_cached(path, None).map(|(r, _)| r)
}

/// `of_file` through the cache directory `cache`: the rows come from there when it holds
/// them for this file's build id (the flag says so), and are stored there when read afresh.
pub(crate) fn of_file_cached(path: &str, cache: Option<&Path>) -> Option<(FileRules, bool)> {
    // Only the headers and the sections used are read (not the debug information).
    let data = object::ReadCache::new(std::fs::File::open(path).ok()?);
    of_image_cached(&data, cache)
}

/// Reads the rules of an ELF image (tests).
#[cfg(test)]
pub(crate) fn of_image<'d, R: object::ReadRef<'d>>(data: R) -> Option<FileRules> {
    of_image_cached(data, None).map(|(r, _)| r)
}

fn of_image_cached<'d, R: object::ReadRef<'d>>(data: R, cache: Option<&Path>) -> Option<(FileRules, bool)> {
    let file = object::File::parse(data).ok()?;
    if file.architecture() != object::Architecture::X86_64 {
        return None;
    }
    let segments: Vec<(u64, u64, u64)> = file
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (off, s.address(), size)
        })
        .collect();
    let cached = cache.zip(file.build_id().ok().flatten().filter(|id| (8..=64).contains(&id.len())));
    let cache_file = cached.map(|(dir, id)| {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        dir.join(CACHE_SUBDIR).join(format!("{hex}.rows"))
    });
    if let Some(rows) = cache_file.as_deref().and_then(load_rows) {
        return Some((FileRules { rows, segments }, true));
    }
    let eh = file.section_by_name(".eh_frame")?;
    if eh.size() > MAX_EH_FRAME {
        return None;
    }
    let eh_data = eh.data().ok()?;
    let mut bases = BaseAddresses::default().set_eh_frame(eh.address());
    if let Some(t) = file.section_by_name(".text") {
        bases = bases.set_text(t.address());
    }
    if let Some(g) = file.section_by_name(".got") {
        bases = bases.set_got(g.address());
    }
    let rows = rows_of(eh_data, &bases);
    if let Some(f) = &cache_file {
        store_rows(f, &rows);
    }
    Some((FileRules { rows: rows.into_boxed_slice(), segments }, false))
}

/// The cache's subdirectory for rows in this layout and meaning (a new layout, or rows read
/// otherwise, get a new name: "unwind-1" held no rows for RBP saved below SP, "unwind-2" none
/// for `.plt` entries).
const CACHE_SUBDIR: &str = "unwind-3";
/// A cache file: this magic, the row count and the rows' digest (u64 little-endian each), then
/// the rows.
const CACHE_MAGIC: &[u8; 8] = b"clrpuw01";
/// Most rows a cache file is trusted to hold (a 64 MB `.eh_frame` has fewer).
const MAX_CACHED_ROWS: u64 = 1 << 24;

/// FNV-1a over words: the digest of the rows a cache file holds.
fn digest(rows: &[u64]) -> u64 {
    rows.iter().fold(0xcbf2_9ce4_8422_2325, |h, &w| (h ^ w).wrapping_mul(0x100_0000_01b3))
}

/// The rows a cache file holds, when it is whole: its size, digest and order are checked, so a
/// truncated, damaged or foreign file is read as no file.
fn load_rows(path: &Path) -> Option<Box<[u64]>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut head = [0u8; 24];
    f.read_exact(&mut head).ok()?;
    let word = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().unwrap());
    let n = word(8);
    if &head[..8] != CACHE_MAGIC || n > MAX_CACHED_ROWS || f.metadata().ok()?.len() != 24 + n * 8 {
        return None;
    }
    let mut rows = vec![0u64; n as usize].into_boxed_slice();
    // Safety: the bytes of the u64 slice, which every bit pattern is valid for; the words are
    // little-endian in the file and in memory (x86-64 only).
    let bytes = unsafe { std::slice::from_raw_parts_mut(rows.as_mut_ptr() as *mut u8, rows.len() * 8) };
    f.read_exact(bytes).ok()?;
    let sorted = rows.windows(2).all(|w| (w[0] as u32) < (w[1] as u32));
    (sorted && digest(&rows) == word(16) && f.read(&mut [0u8; 1]).ok()? == 0).then_some(rows)
}

/// Writes `rows` to the cache file `path` (through a temporary file renamed into place, so a
/// reader never sees half a file); failures only cost the next process a read.
fn store_rows(path: &Path, rows: &[u64]) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let mut bytes = Vec::with_capacity(24 + rows.len() * 8);
    bytes.extend_from_slice(CACHE_MAGIC);
    bytes.extend_from_slice(&(rows.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&digest(rows).to_le_bytes());
    for r in rows {
        bytes.extend_from_slice(&r.to_le_bytes());
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, &bytes).is_err() || std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The packed rows of an `.eh_frame` section: every FDE's rows, with a [`KIND_NONE`] row at the
/// end of each FDE that the next one does not start at. Malformed entries are skipped.
fn rows_of(eh_data: &[u8], bases: &BaseAddresses) -> Vec<u64> {
    let eh = EhFrame::new(eh_data, LittleEndian);
    let mut ctx = UnwindContext::new();
    let mut found: Vec<(u64, u64, Row)> = Vec::new();
    let mut entries = eh.entries(bases);
    // Bounded by the section's size: every entry consumes at least 4 bytes.
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else { continue };
        let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else { continue };
        let Ok(mut table) = fde.rows(&eh, bases, &mut ctx) else { continue };
        while let Ok(Some(row)) = table.next_row() {
            let (start, end) = (row.start_address(), row.end_address());
            if start >= end || end > u32::MAX as u64 {
                continue;
            }
            if let Some(k) = plt_split(row).filter(|_| start.is_multiple_of(16)) {
                // A `.plt` section: one rule per half of each 16-byte entry.
                let rsp = |cfa_offset| Row { address: 0, kind: KIND_RSP, cfa_offset, rbp_slot: 0 };
                for entry in (start..end).step_by(16) {
                    found.push((entry, (entry + k).min(end), rsp(8)));
                    if entry + k < end {
                        found.push((entry + k, (entry + 16).min(end), rsp(16)));
                    }
                }
                continue;
            }
            found.push((start, end, rule_of(row)));
        }
    }
    found.sort_by_key(|r| r.0);
    let mut out: Vec<u64> = Vec::with_capacity(found.len() + found.len() / 4);
    for (i, &(start, end, row)) in found.iter().enumerate() {
        // Overlapping FDEs (should not happen): the later start wins from there on.
        out.push(Row { address: start as u32, ..row }.pack());
        let next = found.get(i + 1).map(|r| r.0);
        if next.is_none_or(|n| n > end) {
            out.push(Row { address: end as u32, kind: KIND_NONE, cfa_offset: 0, rbp_slot: 0 }.pack());
        }
    }
    // Rows at the same address: keep the last one.
    out.dedup_by(|later, earlier| {
        if (*later as u32) == (*earlier as u32) {
            *earlier = *later;
            true
        } else {
            false
        }
    });
    out
}

/// The bytes below SP that the x86-64 System V ABI keeps for the running function (the red
/// zone): the kernel delivers a signal below them, so they hold at the signal what the
/// interrupted code left there.
pub(crate) const RED_ZONE: u64 = 128;

/// The compact rule of one CFI row: [`KIND_RSP`] only when the return address is at CFA − 8
/// and RBP is either unchanged or saved at a small multiple of 8 below the CFA — in the frame, or
/// in the red zone below SP: GCC's epilogs leave the rule of a popped register as it was, so at
/// the `ret` after `pop rbp` (CFA = RSP + 8) RBP reads as saved at CFA − 16, the word the `pop`
/// just read (glibc's `__futex_abstimed_wait_common` ends so); code that saves RBP in the red
/// zone without moving SP has the same rule.
fn rule_of<R: gimli::Reader, S: gimli::UnwindContextStorage<R>>(row: &gimli::UnwindTableRow<R, S>) -> Row {
    let none = Row { address: 0, kind: KIND_NONE, cfa_offset: 0, rbp_slot: 0 };
    let (register, offset) = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => (*register, *offset),
        _ => return none,
    };
    let kind = if register == gimli::X86_64::RSP {
        KIND_RSP
    } else if register == gimli::X86_64::RBP {
        KIND_RBP
    } else {
        return none;
    };
    if !(8..=0xFFFF).contains(&offset) || offset % 8 != 0 {
        return none;
    }
    if !matches!(row.register(gimli::X86_64::RA), RegisterRule::Offset(-8)) {
        return none;
    }
    let rbp_slot = match row.register(gimli::X86_64::RBP) {
        RegisterRule::Undefined | RegisterRule::SameValue => 0,
        RegisterRule::Offset(o) if o < 0 && o % 8 == 0 && -o / 8 <= 255 && -o <= offset + RED_ZONE as i64 => {
            (-o / 8) as u8
        }
        _ => return none,
    };
    Row { address: 0, kind, cfa_offset: offset as u16, rbp_slot }
}

/// The offset within each 16-byte `.plt` entry from which its CFA is RSP + 16 instead of RSP + 8,
/// when the row's CFA is the expression GNU ld writes for lazy-binding PLT entries:
/// `RSP + 8 + (((RIP & 15) >= k) << 3)` — an entry is `jmp *GOT[n]` (6 bytes), `push n`
/// (5 bytes, done from offset 11 on) and `jmp PLT0`. A leaf stopped at a PLT entry (a call to
/// `memcpy` through libc's PLT) has its return address at SP; without these rules it was a leaf
/// without callers.
fn plt_split<R: gimli::Reader, S: gimli::UnwindContextStorage<R>>(row: &gimli::UnwindTableRow<R, S>) -> Option<u64> {
    let CfaRule::Expression(e) = row.cfa() else { return None };
    if !matches!(row.register(gimli::X86_64::RA), RegisterRule::Offset(-8)) {
        return None;
    }
    let bytes = e.0.to_slice().ok()?;
    // DW_OP_breg7 (RSP) 8; DW_OP_breg16 (RIP) 0; DW_OP_lit15; DW_OP_and; DW_OP_lit<k>; DW_OP_ge;
    // DW_OP_lit3; DW_OP_shl; DW_OP_plus.
    match bytes.as_ref() {
        [0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, lit, 0x2a, 0x33, 0x24, 0x22] if (0x38..=0x3b).contains(lit) => {
            Some((*lit - 0x30) as u64)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_pack_and_are_looked_up_by_address() {
        let r = Row { address: 0x1234, kind: KIND_RSP, cfa_offset: 0x78, rbp_slot: 2 };
        assert_eq!(Row::unpack(r.pack()), r);
        let rows = [
            Row { address: 0x100, kind: KIND_RSP, cfa_offset: 8, rbp_slot: 0 }.pack(),
            Row { address: 0x101, kind: KIND_RSP, cfa_offset: 16, rbp_slot: 2 }.pack(),
            Row { address: 0x110, kind: KIND_NONE, cfa_offset: 0, rbp_slot: 0 }.pack(),
        ];
        assert_eq!(lookup(&rows, 0xff), None);
        assert_eq!(lookup(&rows, 0x100).map(|r| r.cfa_offset), Some(8));
        assert_eq!(lookup(&rows, 0x10f).map(|r| (r.cfa_offset, r.rbp_slot)), Some((16, 2)));
        assert_eq!(lookup(&rows, 0x200).map(|r| r.kind), Some(KIND_NONE));
        assert_eq!(lookup(&rows, 1 << 40), None);
    }

    /// glibc's `__open` keeps the path in RBP: its rows after the prolog are RSP-based with RBP
    /// saved at CFA − 16; at its entry the return address is at SP.
    #[test]
    fn the_system_libc_has_rsp_based_rows() {
        let path = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let Some(rules) = of_file(path) else {
            panic!("{path}: no CFI read");
        };
        assert!(rules.rows.len() > 1000, "{} rows", rules.rows.len());
        assert!(rules.rows.windows(2).all(|w| (w[0] as u32) < (w[1] as u32)), "sorted, one row per address");
        let rsp = rules.rows.iter().filter(|&&r| Row::unpack(r).kind == KIND_RSP).count();
        assert!(rsp * 2 > rules.rows.len(), "{rsp} RSP-based rows of {}", rules.rows.len());
        // Every function entry of an FDE reads CFA = RSP + 8 (the return address at SP): at least
        // one row per FDE start does.
        let entries = rules.rows.iter().filter(|&&r| {
            let r = Row::unpack(r);
            r.kind == KIND_RSP && r.cfa_offset == 8 && r.rbp_slot == 0
        });
        assert!(entries.count() > 500);
        assert!(!rules.segments.is_empty());
    }

    /// A leaf at a `.plt` entry of libc (its calls to `memcpy` and the like go through one) has its
    /// return address at SP until the entry's `push`, and 8 bytes higher after it: the CFA
    /// expression GNU ld writes for the section is read as those two rules per entry. (Once a
    /// sample of `Sampling syscalls` stopped there was a lone libc frame.)
    #[test]
    fn plt_entries_have_rsp_based_rules() {
        let path = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let data = std::fs::read(path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let plt = file.section_by_name(".plt").expect("libc has a .plt section");
        let (start, size) = (plt.address(), plt.size());
        assert!(size >= 48, "{size}");
        let rules = of_file(path).unwrap();
        let row = |a: u64| lookup(&rules.rows, a).map(|r| (r.kind, r.cfa_offset, r.rbp_slot));
        // Entries after PLT0 (whose own rules say RSP + 16, then + 24 after its push).
        for entry in (start + 16..start + size).step_by(16) {
            assert_eq!(row(entry), Some((KIND_RSP, 8, 0)), "{entry:#x}");
            assert_eq!(row(entry + 6), Some((KIND_RSP, 8, 0)), "{entry:#x} + 6, at the push");
            assert_eq!(row(entry + 11), Some((KIND_RSP, 16, 0)), "{entry:#x} + 11, after the push");
            assert_eq!(row(entry + 15), Some((KIND_RSP, 16, 0)), "{entry:#x} + 15");
        }
    }

    /// An `.eh_frame` of one CIE (CFA = RSP + 8, return address at CFA − 8) and one FDE for
    /// 0x1000..0x1020 with the call-frame instructions `insns`, both padded with `DW_CFA_nop`.
    fn eh_frame(insns: &[u8]) -> Vec<u8> {
        fn entry(out: &mut Vec<u8>, body: &[u8]) {
            let mut body = body.to_vec();
            while !(body.len() + 4).is_multiple_of(8) {
                body.push(0);
            }
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(&body);
        }
        let mut out = Vec::new();
        // CIE: id 0, version 1, "zR", code alignment 1, data alignment −8, return address
        // register 16, FDE addresses as absolute u32; DW_CFA_def_cfa rsp 8, DW_CFA_offset r16 1.
        entry(&mut out, &[0, 0, 0, 0, 1, b'z', b'R', 0, 1, 0x78, 16, 1, 0x03, 0x0c, 7, 8, 0x90, 1]);
        // FDE: the distance back to the CIE, start, length, no augmentation data.
        let mut fde = ((out.len() + 4) as u32).to_le_bytes().to_vec();
        fde.extend_from_slice(&0x1000u32.to_le_bytes());
        fde.extend_from_slice(&0x20u32.to_le_bytes());
        fde.push(0);
        fde.extend_from_slice(insns);
        entry(&mut out, &fde);
        out
    }

    /// glibc's `__futex_abstimed_wait_common` (`push rbp; push rbx; sub rsp, 0x28; ...; add rsp,
    /// 0x28; pop rbx; pop rbp; ret`): at its `ret` the CFA is RSP + 8 and RBP's rule still reads
    /// "saved at CFA − 16", below SP (GCC does not restore the rules of popped registers). That
    /// row had no rule, so a sample at the `ret` was cut at the leaf (1 sample of 192 in a .NET
    /// 10 run of `Sampling osr`): it is RSP-based, with RBP read from the red zone.
    #[test]
    fn an_epilog_s_ret_after_pop_rbp_has_an_rsp_based_rule() {
        let insns = [
            0x41, 0x0e, 16, 0x86, 2, // 0x1001, after `push rbp`: CFA = RSP + 16, RBP at CFA − 16
            0x41, 0x0e, 24, 0x83, 3, // 0x1002, after `push rbx`
            0x44, 0x0e, 64, // 0x1006, after `sub rsp, 0x28`
            0x4e, 0x0a, 0x0e, 24, // 0x1014, after `add rsp, 0x28` (the body's state remembered)
            0x41, 0x0e, 16, // 0x1015, after `pop rbx`
            0x41, 0x0e, 8, // 0x1016, after `pop rbp`: at the `ret`
            0x41, 0x0b, // 0x1017: the body's state again (code after the `ret`)
        ];
        let rows = rows_of(&eh_frame(&insns), &BaseAddresses::default());
        let rsp = |cfa_offset, rbp_slot| Some(Row { address: 0, kind: KIND_RSP, cfa_offset, rbp_slot });
        let at = |a| lookup(&rows, a).map(|r| Row { address: 0, ..r });
        assert_eq!(at(0x1000), rsp(8, 0));
        assert_eq!(at(0x1001), rsp(16, 2));
        assert_eq!(at(0x1010), rsp(64, 2));
        assert_eq!(at(0x1015), rsp(16, 2));
        assert_eq!(at(0x1016), rsp(8, 2), "the `ret`: {rows:x?}");
        assert_eq!(at(0x1017), rsp(64, 2));
        assert_eq!(at(0x1020).map(|r| r.kind), Some(KIND_NONE));

        // A slot below the red zone is no rule (nothing keeps it).
        let far = [0x41, 0x0e, 8, 0x86, 18]; // RBP at CFA − 144 = RSP − 136
        let rows = rows_of(&eh_frame(&far), &BaseAddresses::default());
        assert_eq!(lookup(&rows, 0x1001).map(|r| r.kind), Some(KIND_NONE));
        let edge = [0x41, 0x0e, 8, 0x86, 17]; // RBP at RSP − 128, the red zone's last word
        let rows = rows_of(&eh_frame(&edge), &BaseAddresses::default());
        assert_eq!(lookup(&rows, 0x1001).map(|r| Row { address: 0, ..r }), rsp(8, 17));
    }

    /// The rows of the code at `addr` in this process's own executable file (the test binary
    /// holds the agent's code), from `count` bytes on.
    fn own_rows(addr: u64, count: u64) -> Vec<Row> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let (start, end, offset) = maps
            .lines()
            .filter(|l| l.ends_with(exe.to_str().unwrap()))
            .find_map(|l| {
                let mut f = l.split_whitespace();
                let (a, b) = f.next()?.split_once('-')?;
                let (a, b) = (u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?);
                let offset = u64::from_str_radix(f.nth(1)?, 16).ok()?;
                (a <= addr && addr < b).then_some((a, b, offset))
            })
            .expect("the code's mapping");
        let rules = of_file(exe.to_str().unwrap()).expect("the test binary's rules");
        let base = rules.vaddr_of(offset, end - start).expect("the mapping's address") + (addr - start);
        (0..count).filter_map(|i| lookup(&rules.rows, base + i)).collect()
    }

    /// The agent's enter/leave stubs are hand-written and push registers: without rules of
    /// their own a sample in them took the pushed register for the return address (a wrong
    /// caller under `--instrument`), or found no rule at all.
    #[test]
    fn the_hook_stubs_have_unwind_rules_that_follow_their_pushes() {
        use crate::elt::stubs;
        let at = |f: unsafe extern "C" fn()| f as *const () as u64;
        let timing = own_rows(at(stubs::enter_timing_stub), 200);
        assert_eq!(timing.first().map(|r| (r.kind, r.cfa_offset)), Some((KIND_RSP, 8)), "at the entry");
        assert!(timing.iter().all(|r| r.kind == KIND_RSP), "{timing:?}");
        assert!(timing.iter().any(|r| r.cfa_offset == 16), "rcx pushed: {timing:?}");
        let full = own_rows(at(stubs::enter_stub), 16);
        assert_eq!(full.first().map(|r| (r.kind, r.cfa_offset)), Some((KIND_RSP, 8)));
        assert!(full.iter().any(|r| r.kind == KIND_RBP), "RBP frame set up: {full:?}");
        for stub in [stubs::leave_timing_stub, stubs::leave_counts_stub, stubs::enter_counts_stub] {
            let rows = own_rows(at(stub), 8);
            assert!(rows.iter().all(|r| r.kind == KIND_RSP && r.cfa_offset == 8), "{rows:?}");
        }
    }

    #[test]
    fn mapped_offsets_are_placed_by_the_segment_that_fills_the_mapping() {
        // lld's layout (the agent, libcoreclr): code at file offset 0x47c0c, address 0x48c0c.
        let f = FileRules {
            rows: Box::new([]),
            segments: vec![(0, 0, 0x47c0c), (0x47c0c, 0x48c0c, 0xf2264), (0x139e70, 0x13be70, 0x8b50)],
        };
        // The code is mapped from the page holding its start: offset 0x47000 is address 0x48000.
        assert_eq!(f.vaddr_of(0x47000, 0xf3000), Some(0x48000));
        assert_eq!(f.vaddr_of(0, 0x47000), Some(0));
        assert_eq!(f.vaddr_of(0x900000, 0x1000), None);
    }

    /// The rows stored in a cache directory are the rows read from the file, and they are read
    /// back from there; a damaged cache file is not trusted, and is replaced.
    #[test]
    fn cached_rows_are_the_rows_read() {
        let path = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let dir = std::env::temp_dir().join(format!("clrprof-cfi-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let fresh = of_file(path).expect("libc's rules");
        let (first, hit) = of_file_cached(path, Some(&dir)).unwrap();
        assert!(!hit, "nothing cached yet");
        assert_eq!(first.rows, fresh.rows);
        let files: Vec<_> = std::fs::read_dir(dir.join(CACHE_SUBDIR)).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(files.len(), 1, "{files:?}");
        assert!(files[0].extension().is_some_and(|e| e == "rows"), "{files:?}");
        let (second, hit) = of_file_cached(path, Some(&dir)).unwrap();
        assert!(hit, "read from the cache");
        assert_eq!(second.rows, fresh.rows);
        assert_eq!(second.segments, fresh.segments);

        let good = std::fs::read(&files[0]).unwrap();
        let mut flipped = good.clone();
        let last = flipped.len() - 3;
        flipped[last] ^= 0x40;
        for bad in [&good[..good.len() - 8], &good[..20], &flipped[..], b"clrpuw01 but not rows"] {
            std::fs::write(&files[0], bad).unwrap();
            assert!(load_rows(&files[0]).is_none(), "{} bytes trusted", bad.len());
            let (again, hit) = of_file_cached(path, Some(&dir)).unwrap();
            assert!(!hit);
            assert_eq!(again.rows, fresh.rows);
            assert_eq!(std::fs::read(&files[0]).unwrap(), good, "rewritten whole");
        }
        // A cache directory that cannot be made costs nothing but the cache.
        let (r, hit) = of_file_cached(path, Some(Path::new("/proc/no-such-dir"))).unwrap();
        assert!(!hit);
        assert_eq!(r.rows, fresh.rows);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn garbage_is_no_rules() {
        assert!(of_image(&b"not an ELF file"[..]).is_none());
        assert!(of_image(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0][..]).is_none());
        assert!(of_file("/nonexistent/libx.so").is_none());
    }
}

#[cfg(test)]
mod cost {
    /// Time to read the rules of the big runtime libraries (not a test: `cargo test -p
    /// clrprof-agent --lib cfi_cost -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn cfi_cost() {
        let dir = std::env::var("CLRPROF_RUNTIME_DIR").unwrap_or_default();
        let agent = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/debug/libclrprof_agent.so").to_string();
        for f in [
            "/usr/lib/x86_64-linux-gnu/libc.so.6".to_string(),
            format!("{dir}/libcoreclr.so"),
            format!("{dir}/libclrjit.so"),
            agent,
        ] {
            let t = std::time::Instant::now();
            let r = super::of_file(&f);
            let ms = t.elapsed().as_secs_f64() * 1e3;
            // A digest of the rows, to compare the output of two versions of the reader.
            let digest = r.as_ref().map(|r| super::digest(&r.rows));
            println!("{f}: {:?} rows (digest {digest:x?}) in {ms:.1} ms", r.as_ref().map(|r| r.rows.len()));
            if let (Some(r), Ok(a)) = (r, std::env::var("CLRPROF_CFI_AT")) {
                let a = u64::from_str_radix(&a, 16).unwrap();
                println!("  {a:#x}: {:?} segments {:x?}", super::lookup(&r.rows, a), r.segments);
            }
        }
    }
}
