//! The GNU build-id of an ELF file (`NT_GNU_BUILD_ID` note, name "GNU", in a `PT_NOTE` segment),
//! written with each native mapping so that readers name native frames from the exact file that
//! was mapped, even on another machine or after an upgrade.
//!
//! Runs on the sampler thread, once per file. It reads only the ELF header, the program headers
//! and the note segments (a few hundred bytes), never the whole file. Every offset and length
//! comes from the file, so every one is checked: a malformed or truncated file gives `None`,
//! never a panic.

use std::fs::File;
use std::os::unix::fs::FileExt;

const PT_NOTE: u32 = 4;
const NT_GNU_BUILD_ID: u32 = 3;
/// Program headers read at most (real files have about 10–15).
const MAX_PHDRS: u64 = 256;
/// Largest note segment read (build-id notes are 36 bytes; others a few hundred).
const MAX_NOTES: u64 = 64 << 10;
/// Longest build-id accepted (SHA-1 ids are 20 bytes, some linkers use 16 or 32).
const MAX_ID: usize = 64;

/// Bytes at an offset of an ELF image: a file, or a buffer in tests.
trait Source {
    /// Exactly `len` bytes at `offset`, or `None` when the image is shorter.
    fn bytes(&self, offset: u64, len: u64) -> Option<Vec<u8>>;
}

impl Source for [u8] {
    fn bytes(&self, offset: u64, len: u64) -> Option<Vec<u8>> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        self.get(start..end).map(<[u8]>::to_vec)
    }
}

impl Source for File {
    fn bytes(&self, offset: u64, len: u64) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; usize::try_from(len).ok()?];
        self.read_exact_at(&mut buf, offset).ok()?;
        Some(buf)
    }
}

/// The build-id of the file at `path`; empty when it has none or cannot be read.
pub(crate) fn of_file(path: &str) -> Vec<u8> {
    File::open(path).ok().and_then(|f| read(&f)).unwrap_or_default()
}

/// The build-id of an ELF image held in memory (for tests).
#[cfg(test)]
pub(crate) fn of_bytes(image: &[u8]) -> Option<Vec<u8>> {
    read(image)
}

/// Reads integers of the image's byte order out of a buffer, bounds-checked.
#[derive(Clone, Copy)]
struct Endian {
    big: bool,
}

impl Endian {
    fn u16(self, b: &[u8], at: usize) -> Option<u16> {
        let a: [u8; 2] = b.get(at..at.checked_add(2)?)?.try_into().ok()?;
        Some(if self.big { u16::from_be_bytes(a) } else { u16::from_le_bytes(a) })
    }
    fn u32(self, b: &[u8], at: usize) -> Option<u32> {
        let a: [u8; 4] = b.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if self.big { u32::from_be_bytes(a) } else { u32::from_le_bytes(a) })
    }
    fn u64(self, b: &[u8], at: usize) -> Option<u64> {
        let a: [u8; 8] = b.get(at..at.checked_add(8)?)?.try_into().ok()?;
        Some(if self.big { u64::from_be_bytes(a) } else { u64::from_le_bytes(a) })
    }
    /// A word of the image's class: `u32` in ELF32, `u64` in ELF64.
    fn word(self, wide: bool, b: &[u8], at: usize) -> Option<u64> {
        if wide {
            self.u64(b, at)
        } else {
            self.u32(b, at).map(u64::from)
        }
    }
}

fn read<S: Source + ?Sized>(image: &S) -> Option<Vec<u8>> {
    let ehdr = image.bytes(0, 64).or_else(|| image.bytes(0, 52))?;
    if ehdr.get(..4)? != b"\x7fELF" {
        return None;
    }
    let wide = match ehdr[4] {
        1 => false,
        2 => true,
        _ => return None,
    };
    let e = match ehdr[5] {
        1 => Endian { big: false },
        2 => Endian { big: true },
        _ => return None,
    };
    // e_phoff, e_phentsize, e_phnum.
    let (phoff, phentsize, phnum) = if wide {
        (e.u64(&ehdr, 32)?, e.u16(&ehdr, 54)?, e.u16(&ehdr, 56)?)
    } else {
        (u64::from(e.u32(&ehdr, 28)?), e.u16(&ehdr, 42)?, e.u16(&ehdr, 44)?)
    };
    let min_entsize = if wide { 56 } else { 32 };
    let (phnum, phentsize) = (u64::from(phnum), u64::from(phentsize));
    if phnum == 0 || phnum > MAX_PHDRS || phentsize < min_entsize || phentsize > 2 * min_entsize {
        return None;
    }
    let phdrs = image.bytes(phoff, phnum.checked_mul(phentsize)?)?;
    for i in 0..phnum as usize {
        let at = i.checked_mul(phentsize as usize)?;
        if e.u32(&phdrs, at)? != PT_NOTE {
            continue;
        }
        // p_offset, p_filesz, p_align.
        let (offset, size, align) = if wide {
            (e.u64(&phdrs, at + 8)?, e.u64(&phdrs, at + 32)?, e.u64(&phdrs, at + 48)?)
        } else {
            (e.word(false, &phdrs, at + 4)?, e.word(false, &phdrs, at + 16)?, e.word(false, &phdrs, at + 28)?)
        };
        if size == 0 || size > MAX_NOTES {
            continue;
        }
        let Some(notes) = image.bytes(offset, size) else { continue };
        if let Some(id) = gnu_build_id(&notes, e, if align == 8 { 8 } else { 4 }) {
            return Some(id);
        }
    }
    None
}

/// The `NT_GNU_BUILD_ID` descriptor among the notes of one segment (`align`: 4, or 8 for
/// segments aligned to 8).
fn gnu_build_id(notes: &[u8], e: Endian, align: usize) -> Option<Vec<u8>> {
    let pad = |n: usize| n.checked_add(align - 1).map(|n| n & !(align - 1));
    let mut at = 0usize;
    while notes.len().saturating_sub(at) >= 12 {
        let namesz = e.u32(notes, at)? as usize;
        let descsz = e.u32(notes, at + 4)? as usize;
        let kind = e.u32(notes, at + 8)?;
        let name_at = at + 12;
        // The name and the descriptor each start aligned (offsets within the segment).
        let desc_at = pad(name_at.checked_add(namesz)?)?;
        let end = pad(desc_at.checked_add(descsz)?)?;
        let name = notes.get(name_at..name_at.checked_add(namesz)?)?;
        let desc = notes.get(desc_at..desc_at.checked_add(descsz)?)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return (!desc.is_empty() && desc.len() <= MAX_ID).then(|| desc.to_vec());
        }
        at = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIBZ: &str = "/usr/lib/x86_64-linux-gnu/libz.so.1";

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// The build-id `readelf -n` shows, when binutils is installed.
    fn readelf_build_id(path: &str) -> Option<String> {
        let out = std::process::Command::new("readelf").args(["-n", path]).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ").map(|s| s.trim().to_string()))
    }

    #[test]
    fn reads_the_build_id_of_a_system_library() {
        if !std::path::Path::new(LIBZ).exists() {
            return;
        }
        let id = of_file(LIBZ);
        assert_eq!(id.len(), 20, "a SHA-1 build-id: {}", hex(&id));
        if let Some(want) = readelf_build_id(LIBZ) {
            assert_eq!(hex(&id), want);
        }
        let bytes = std::fs::read(LIBZ).unwrap();
        assert_eq!(of_bytes(&bytes), Some(id));
    }

    #[test]
    fn files_without_a_build_id_give_none() {
        assert_eq!(of_file("/nonexistent/libx.so"), Vec::<u8>::new());
        assert_eq!(of_file("/proc/self/status"), Vec::<u8>::new());
        assert_eq!(of_bytes(b""), None);
        assert_eq!(of_bytes(b"\x7fELF"), None);
        assert_eq!(of_bytes(&[0u8; 4096]), None);
    }

    #[test]
    fn garbage_and_truncated_images_never_panic() {
        let Ok(bytes) = std::fs::read(LIBZ) else { return };
        // Every truncation of the part that holds the headers and the note.
        for cut in 0..2048.min(bytes.len()) {
            let got = of_bytes(&bytes[..cut]);
            assert!(got.is_none() || got == of_bytes(&bytes), "cut at {cut}");
        }
        // Random corruption of the headers and notes (deterministic pseudo-random bytes).
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let mut b = bytes[..1024].to_vec();
            for _ in 0..1 + next() % 4 {
                let at = (next() % 1024) as usize;
                b[at] = next() as u8;
            }
            let _ = of_bytes(&b);
        }
        for _ in 0..2_000 {
            let mut b: Vec<u8> = (0..(next() % 512)).map(|_| next() as u8).collect();
            if b.len() >= 6 {
                b[..4].copy_from_slice(b"\x7fELF");
                b[4] = 1 + (next() % 2) as u8;
                b[5] = 1 + (next() % 2) as u8;
            }
            let _ = of_bytes(&b);
        }
    }

    #[test]
    fn notes_of_both_alignments_and_byte_orders() {
        let le = Endian { big: false };
        let be = Endian { big: true };
        let note = |e: Endian, kind: u32, name: &[u8], desc: &[u8], align: usize| {
            let mut v = Vec::new();
            let put = |v: &mut Vec<u8>, x: u32| v.extend(if e.big { x.to_be_bytes() } else { x.to_le_bytes() });
            put(&mut v, name.len() as u32);
            put(&mut v, desc.len() as u32);
            put(&mut v, kind);
            for part in [name, desc] {
                v.extend_from_slice(part);
                while v.len() % align != 0 {
                    v.push(0);
                }
            }
            v
        };
        for (e, align) in [(le, 4), (le, 8), (be, 4)] {
            let mut notes = note(e, 5, b"GNU\0", &[1; 12], align);
            notes.extend(note(e, 3, b"Xen\0", &[2; 8], align));
            notes.extend(note(e, 3, b"GNU\0", &[0xab; 20], align));
            assert_eq!(gnu_build_id(&notes, e, align), Some(vec![0xab; 20]));
            // Cut inside the descriptor (past any padding).
            assert_eq!(gnu_build_id(&notes[..notes.len() - 9], e, align), None);
        }
    }
}
