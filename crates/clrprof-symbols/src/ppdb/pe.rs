//! What an assembly's PE debug directory says of its PDB: the CodeView entry (type 2, `RSDS`:
//! the PDB's GUID and path as the compiler wrote it) and the embedded portable PDB (type 17,
//! `MPDB`: the PDB deflated inside the assembly).

use super::metadata::{inflate, Error};

/// The PDB facts of one assembly.
#[derive(Debug, Default, PartialEq)]
pub struct DebugDirectory {
    /// CodeView: the PDB's GUID (as stored) and path.
    pub codeview: Option<([u8; 16], String)>,
    /// The embedded portable PDB, inflated.
    pub embedded: Option<Vec<u8>>,
}

fn u16_at(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(d.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(at..at + 4)?.try_into().ok()?))
}

/// Reads the debug directory of a PE file; an error when it is no PE, an empty directory when
/// it has none.
pub fn debug_directory(pe: &[u8]) -> Result<DebugDirectory, Error> {
    let bad = || -> Error { "not a PE file (a .NET assembly)".into() };
    if pe.get(..2) != Some(b"MZ") {
        return Err(bad());
    }
    let nt = u32_at(pe, 0x3C).ok_or_else(bad)? as usize;
    if pe.get(nt..nt + 4) != Some(b"PE\0\0") {
        return Err(bad());
    }
    let coff = nt + 4;
    let sections = u16_at(pe, coff + 2).ok_or_else(bad)? as usize;
    let opt_size = u16_at(pe, coff + 16).ok_or_else(bad)? as usize;
    let opt = coff + 20;
    let dirs = match u16_at(pe, opt).ok_or_else(bad)? {
        0x10b => opt + 96,
        0x20b => opt + 112,
        _ => return Err(bad()),
    };
    let mut out = DebugDirectory::default();
    // Data directory 6: the debug directory (RVA, size).
    let (Some(rva), Some(size)) = (u32_at(pe, dirs + 6 * 8), u32_at(pe, dirs + 6 * 8 + 4)) else {
        return Ok(out);
    };
    if rva == 0 || size == 0 {
        return Ok(out);
    }
    let table = opt + opt_size;
    let to_offset = |rva: u32| -> Option<usize> {
        (0..sections).find_map(|i| {
            let s = table + i * 40;
            let (vsize, va, raw_size, raw) =
                (u32_at(pe, s + 8)?, u32_at(pe, s + 12)?, u32_at(pe, s + 16)?, u32_at(pe, s + 20)?);
            let (rva, va) = (rva as u64, va as u64);
            (rva >= va && rva < va + vsize.max(raw_size) as u64).then(|| (rva - va + raw as u64) as usize)
        })
    };
    let dir = to_offset(rva).ok_or("debug directory outside every section")?;
    for i in 0..(size as usize / 28).min(64) {
        let e = dir + i * 28;
        let (Some(kind), Some(len), Some(ptr)) = (u32_at(pe, e + 12), u32_at(pe, e + 16), u32_at(pe, e + 24)) else {
            break;
        };
        let Some(data) = pe.get(ptr as usize..(ptr as usize).saturating_add(len as usize)) else { continue };
        match kind {
            2 if data.get(..4) == Some(b"RSDS") && data.len() >= 24 => {
                let guid: [u8; 16] = data[4..20].try_into().unwrap_or([0; 16]);
                let path = &data[24..];
                let path = &path[..path.iter().position(|&c| c == 0).unwrap_or(path.len())];
                // The first CodeView entry is the PDB's (a second one may name a Windows PDB).
                if out.codeview.is_none() {
                    out.codeview = Some((guid, String::from_utf8_lossy(path).into_owned()));
                }
            }
            17 if data.get(..4) == Some(b"MPDB") && data.len() >= 8 => {
                let n = u32_at(data, 4).unwrap_or(0) as usize;
                out.embedded = Some(inflate(&data[8..], n).map_err(|e| format!("embedded PDB: {e}"))?);
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_is_not_a_pe() {
        assert!(debug_directory(b"").is_err());
        assert!(debug_directory(b"MZ").is_err());
        assert!(debug_directory(b"\x7fELF").is_err());
    }
}
