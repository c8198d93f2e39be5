//! Method bodies in ECMA-335 II.25.4 form, read and written without the runtime: the header (tiny
//! or fat), the code, and the extra data sections after it (exception clause tables, small or fat).
//! [`prepend`] puts a probe before a method's code — the count probes of `--count` — with the
//! header and the clauses adjusted; nothing else in the code changes (relative branches keep their
//! targets; a branch back to the old offset 0 lands after the probe, so a loop does not count as a
//! call).
//!
//! Everything is checked: a body this module does not fully understand (an unknown header size,
//! section kind or flag, a section past the end) is an [`IlError`], and the caller leaves that
//! method alone — never a guess.

/// Why a method body was not read or not rewritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IlError {
    /// Shorter than its header, code or sections say.
    Truncated,
    /// A header whose format bits or size are neither tiny nor a 12-byte fat header.
    BadHeader,
    /// A data section other than an exception table (or with unknown kind bits).
    UnknownSection,
    /// A section's size is not a whole number of clauses.
    BadSection,
    /// The rewritten body would not fit the format (code past 4 GB, a section past 16 MB).
    TooLarge,
}

impl std::fmt::Display for IlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IlError::Truncated => "method body truncated",
            IlError::BadHeader => "unknown method header",
            IlError::UnknownSection => "unknown method data section",
            IlError::BadSection => "malformed exception clause section",
            IlError::TooLarge => "rewritten method body too large",
        })
    }
}

const TINY: u8 = 0x2;
const FAT: u16 = 0x3;
const FORMAT_MASK: u16 = 0x3;
/// Fat header flag: data sections follow the code.
const MORE_SECTS: u16 = 0x8;
/// Section kind bits (CorILMethodSect).
const SECT_EH: u8 = 0x1;
const SECT_FAT: u8 = 0x40;
const SECT_MORE: u8 = 0x80;
/// Clause flag: a filter clause, whose last word is the filter's offset (else a class token).
const CLAUSE_FILTER: u32 = 0x1;

/// One exception handling clause (ECMA-335 II.25.4.6), in fat units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Clause {
    pub flags: u32,
    pub try_offset: u32,
    pub try_length: u32,
    pub handler_offset: u32,
    pub handler_length: u32,
    /// The catch type token, or the filter's code offset for a filter clause.
    pub class_or_filter: u32,
}

impl Clause {
    fn fits_small(&self) -> bool {
        self.flags <= 0xffff
            && self.try_offset <= 0xffff
            && self.try_length <= 0xff
            && self.handler_offset <= 0xffff
            && self.handler_length <= 0xff
    }
}

/// An exception clause table as it was stored: small or fat, and the reserved bytes of a small
/// section's header (kept so a body re-emits byte for byte).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Section {
    pub fat: bool,
    pub reserved: u16,
    pub clauses: Vec<Clause>,
}

/// A parsed method body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Body<'a> {
    /// Tiny header: max stack 8, no locals, no sections.
    pub tiny: bool,
    /// Fat header flags (12 bits, format and MoreSects included), 0 for tiny.
    pub flags: u16,
    pub max_stack: u16,
    pub local_var_sig: u32,
    pub code: &'a [u8],
    pub sections: Vec<Section>,
    /// Bytes the body occupies from its header to the end of its last section.
    pub len: usize,
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, IlError> {
    b.get(at..at + 2).map(|s| u16::from_le_bytes([s[0], s[1]])).ok_or(IlError::Truncated)
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, IlError> {
    b.get(at..at + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]])).ok_or(IlError::Truncated)
}

/// Reads a method body starting at `b[0]` (bytes past its end are ignored).
pub(crate) fn parse(b: &[u8]) -> Result<Body<'_>, IlError> {
    let first = *b.first().ok_or(IlError::Truncated)?;
    if first & 0x3 == TINY {
        let size = (first >> 2) as usize;
        let code = b.get(1..1 + size).ok_or(IlError::Truncated)?;
        return Ok(Body {
            tiny: true,
            flags: 0,
            max_stack: 8,
            local_var_sig: 0,
            code,
            sections: Vec::new(),
            len: 1 + size,
        });
    }
    let word = u16_at(b, 0)?;
    let (flags, header_dwords) = (word & 0x0fff, word >> 12);
    if flags & FORMAT_MASK != FAT || header_dwords != 3 {
        return Err(IlError::BadHeader);
    }
    let max_stack = u16_at(b, 2)?;
    let code_size = u32_at(b, 4)? as usize;
    let local_var_sig = u32_at(b, 8)?;
    let code = b.get(12..12usize.checked_add(code_size).ok_or(IlError::Truncated)?).ok_or(IlError::Truncated)?;
    let mut at = 12 + code_size;
    let mut sections = Vec::new();
    let mut more = flags & MORE_SECTS != 0;
    while more {
        at = at.next_multiple_of(4);
        let kind = *b.get(at).ok_or(IlError::Truncated)?;
        if kind & !(SECT_EH | SECT_FAT | SECT_MORE) != 0 || kind & SECT_EH == 0 {
            return Err(IlError::UnknownSection);
        }
        let fat = kind & SECT_FAT != 0;
        let (size, reserved, clause_size) = if fat {
            (u32_at(b, at)? as usize >> 8, 0, 24)
        } else {
            (*b.get(at + 1).ok_or(IlError::Truncated)? as usize, u16_at(b, at + 2)?, 12)
        };
        if size < 4 || (size - 4) % clause_size != 0 {
            return Err(IlError::BadSection);
        }
        let data = b.get(at + 4..at + size).ok_or(IlError::Truncated)?;
        let clauses = data
            .chunks_exact(clause_size)
            .map(|c| {
                if fat {
                    let w = |i: usize| u32::from_le_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
                    Clause {
                        flags: w(0),
                        try_offset: w(4),
                        try_length: w(8),
                        handler_offset: w(12),
                        handler_length: w(16),
                        class_or_filter: w(20),
                    }
                } else {
                    let h = |i: usize| u16::from_le_bytes([c[i], c[i + 1]]) as u32;
                    Clause {
                        flags: h(0),
                        try_offset: h(2),
                        try_length: c[4] as u32,
                        handler_offset: h(5),
                        handler_length: c[7] as u32,
                        class_or_filter: u32::from_le_bytes([c[8], c[9], c[10], c[11]]),
                    }
                }
            })
            .collect();
        sections.push(Section { fat, reserved, clauses });
        at += size;
        more = kind & SECT_MORE != 0;
    }
    Ok(Body { tiny: false, flags, max_stack, local_var_sig, code, sections, len: at })
}

/// Writes a body back: tiny when it was tiny (and still fits), else a fat header.
#[cfg(test)]
pub(crate) fn emit(body: &Body<'_>) -> Result<Vec<u8>, IlError> {
    emit_parts(body, &[], body.code)
}

fn emit_parts(body: &Body<'_>, probe: &[u8], code: &[u8]) -> Result<Vec<u8>, IlError> {
    let code_size = probe.len() + code.len();
    if body.tiny && probe.is_empty() && code_size < 64 {
        let mut out = Vec::with_capacity(1 + code_size);
        out.push(TINY | (code_size as u8) << 2);
        out.extend_from_slice(code);
        return Ok(out);
    }
    let code_size32 = u32::try_from(code_size).map_err(|_| IlError::TooLarge)?;
    let mut flags = if body.tiny { FAT } else { body.flags };
    if body.sections.is_empty() {
        flags &= !MORE_SECTS;
    } else {
        flags |= MORE_SECTS;
    }
    let mut out =
        Vec::with_capacity(12 + code_size + 4 + body.sections.iter().map(|s| 4 + 24 * s.clauses.len()).sum::<usize>());
    out.extend_from_slice(&(flags | 3 << 12).to_le_bytes());
    out.extend_from_slice(&body.max_stack.to_le_bytes());
    out.extend_from_slice(&code_size32.to_le_bytes());
    out.extend_from_slice(&body.local_var_sig.to_le_bytes());
    out.extend_from_slice(probe);
    out.extend_from_slice(code);
    for (i, s) in body.sections.iter().enumerate() {
        out.resize(out.len().next_multiple_of(4), 0);
        let more = if i + 1 < body.sections.len() { SECT_MORE } else { 0 };
        if s.fat {
            let size = 4 + 24 * s.clauses.len();
            if size >= 1 << 24 {
                return Err(IlError::TooLarge);
            }
            out.extend_from_slice(&((size as u32) << 8 | (SECT_EH | SECT_FAT | more) as u32).to_le_bytes());
            for c in &s.clauses {
                for w in [c.flags, c.try_offset, c.try_length, c.handler_offset, c.handler_length, c.class_or_filter] {
                    out.extend_from_slice(&w.to_le_bytes());
                }
            }
        } else {
            let size = 4 + 12 * s.clauses.len();
            if size > 0xff || !s.clauses.iter().all(Clause::fits_small) {
                return Err(IlError::TooLarge);
            }
            out.push(SECT_EH | more);
            out.push(size as u8);
            out.extend_from_slice(&s.reserved.to_le_bytes());
            for c in &s.clauses {
                out.extend_from_slice(&(c.flags as u16).to_le_bytes());
                out.extend_from_slice(&(c.try_offset as u16).to_le_bytes());
                out.push(c.try_length as u8);
                out.extend_from_slice(&(c.handler_offset as u16).to_le_bytes());
                out.push(c.handler_length as u8);
                out.extend_from_slice(&c.class_or_filter.to_le_bytes());
            }
        }
    }
    Ok(out)
}

/// The body with `probe` (which needs `probe_stack` evaluation stack slots) before its code: a fat
/// header (a tiny one is widened: max stack 8, no locals), max stack at least `probe_stack`, every
/// clause's try, handler and filter offsets moved by the probe's length (a small clause table that
/// no longer fits becomes a fat one). Other header flags (InitLocals) are kept.
pub(crate) fn prepend(body: &[u8], probe: &[u8], probe_stack: u16) -> Result<Vec<u8>, IlError> {
    let mut b = parse(body)?;
    let shift = u32::try_from(probe.len()).map_err(|_| IlError::TooLarge)?;
    let moved = |v: u32| v.checked_add(shift).ok_or(IlError::TooLarge);
    for s in &mut b.sections {
        for c in &mut s.clauses {
            c.try_offset = moved(c.try_offset)?;
            c.handler_offset = moved(c.handler_offset)?;
            if c.flags & CLAUSE_FILTER != 0 {
                c.class_or_filter = moved(c.class_or_filter)?;
            }
        }
        if !s.fat && (!s.clauses.iter().all(Clause::fits_small) || 4 + 12 * s.clauses.len() > 0xff) {
            s.fat = true;
            s.reserved = 0;
        }
    }
    b.max_stack = b.max_stack.max(probe_stack);
    let code = b.code;
    let tiny = b.tiny;
    b.tiny = false;
    if tiny {
        b.flags = FAT;
    }
    emit_parts(&b, probe, code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fat_body(code: &[u8], flags: u16, sections: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(flags | 3 << 12).to_le_bytes());
        b.extend_from_slice(&5u16.to_le_bytes());
        b.extend_from_slice(&(code.len() as u32).to_le_bytes());
        b.extend_from_slice(&0x1100_0007u32.to_le_bytes());
        b.extend_from_slice(code);
        if !sections.is_empty() {
            b.resize(b.len().next_multiple_of(4), 0);
            b.extend_from_slice(sections);
        }
        b
    }

    #[test]
    fn tiny_body_round_trips_and_widens_under_a_probe() {
        let body = [TINY | 3 << 2, 0x02, 0x17, 0x2a, 0xff];
        let p = parse(&body).unwrap();
        assert!(p.tiny);
        assert_eq!((p.code, p.len, p.max_stack), (&[0x02, 0x17, 0x2a][..], 4, 8));
        assert_eq!(emit(&p).unwrap(), &body[..4]);
        let out = prepend(&body, &[0x00, 0x00], 1).unwrap();
        let q = parse(&out).unwrap();
        assert!(!q.tiny);
        assert_eq!(q.flags, FAT);
        assert_eq!((q.max_stack, q.local_var_sig), (8, 0));
        assert_eq!(q.code, &[0x00, 0x00, 0x02, 0x17, 0x2a]);
        assert!(q.sections.is_empty());
    }

    #[test]
    fn fat_body_keeps_flags_and_takes_the_larger_max_stack() {
        let body = fat_body(&[0x2a], FAT | 0x10, &[]);
        let p = parse(&body).unwrap();
        assert_eq!((p.flags, p.max_stack, p.local_var_sig), (FAT | 0x10, 5, 0x1100_0007));
        assert_eq!(emit(&p).unwrap(), body);
        let q = prepend(&body, &[0; 15], 9).unwrap();
        let q = parse(&q).unwrap();
        assert_eq!((q.flags, q.max_stack, q.code.len()), (FAT | 0x10, 9, 16));
        let q = prepend(&body, &[0; 15], 1).unwrap();
        assert_eq!(parse(&q).unwrap().max_stack, 5);
    }

    fn small_section(clauses: &[[u32; 6]], more: bool) -> Vec<u8> {
        let mut s = vec![SECT_EH | if more { SECT_MORE } else { 0 }, (4 + 12 * clauses.len()) as u8, 0, 0];
        for c in clauses {
            s.extend_from_slice(&(c[0] as u16).to_le_bytes());
            s.extend_from_slice(&(c[1] as u16).to_le_bytes());
            s.push(c[2] as u8);
            s.extend_from_slice(&(c[3] as u16).to_le_bytes());
            s.push(c[4] as u8);
            s.extend_from_slice(&c[5].to_le_bytes());
        }
        s
    }

    fn clause(c: [u32; 6]) -> Clause {
        Clause {
            flags: c[0],
            try_offset: c[1],
            try_length: c[2],
            handler_offset: c[3],
            handler_length: c[4],
            class_or_filter: c[5],
        }
    }

    #[test]
    fn clauses_shift_by_the_probe_length_filters_included() {
        // catch, filter (its filter code at 20), finally.
        let cs = [[0, 0, 10, 10, 4, 0x0100_0002], [1, 0, 10, 24, 4, 20], [2, 0, 30, 30, 2, 0]];
        let body = fat_body(&[0u8; 33], FAT | MORE_SECTS, &small_section(&cs, false));
        let p = parse(&body).unwrap();
        assert_eq!(p.sections.len(), 1);
        assert!(!p.sections[0].fat);
        assert_eq!(p.sections[0].clauses, cs.map(clause));
        assert_eq!(p.len, body.len());
        assert_eq!(emit(&p).unwrap(), body);
        let q = prepend(&body, &[0xaa; 15], 1).unwrap();
        let q = parse(&q).unwrap();
        assert!(!q.sections[0].fat, "still fits small");
        let want = [[0, 15, 10, 25, 4, 0x0100_0002], [1, 15, 10, 39, 4, 35], [2, 15, 30, 45, 2, 0]];
        assert_eq!(q.sections[0].clauses, want.map(clause));
        assert_eq!(&q.code[..15], &[0xaa; 15]);
    }

    #[test]
    fn a_small_clause_past_64k_becomes_fat() {
        let code = vec![0u8; 0x1_0000];
        let cs = [[0, 0xfff8, 4, 0xfffc, 4, 0x0100_0002]];
        let body = fat_body(&code, FAT | MORE_SECTS, &small_section(&cs, false));
        let q = prepend(&body, &[0; 15], 1).unwrap();
        let q = parse(&q).unwrap();
        assert!(q.sections[0].fat);
        assert_eq!(q.sections[0].clauses, [clause([0, 0xfff8 + 15, 4, 0xfffc + 15, 4, 0x0100_0002])]);
    }

    #[test]
    fn several_sections_and_fat_sections_round_trip() {
        let mut sections = small_section(&[[0, 0, 2, 2, 1, 0x0100_0001]], true);
        let fat = [4u32, 1, 1, 2, 1, 0];
        sections.extend_from_slice(&((4 + 24) << 8 | (SECT_EH | SECT_FAT) as u32).to_le_bytes());
        for w in fat {
            sections.extend_from_slice(&w.to_le_bytes());
        }
        let body = fat_body(&[0u8; 5], FAT | MORE_SECTS | 0x10, &sections);
        let p = parse(&body).unwrap();
        assert_eq!(p.sections.len(), 2);
        assert!(p.sections[1].fat);
        assert_eq!(emit(&p).unwrap(), body);
        let q = parse(&prepend(&body, &[1, 2, 3], 1).unwrap()).unwrap().sections;
        assert_eq!(q[0].clauses, [clause([0, 3, 2, 5, 1, 0x0100_0001])]);
        assert_eq!(q[1].clauses, [clause([4, 4, 1, 5, 1, 0])]);
    }

    #[test]
    fn what_is_not_understood_is_refused() {
        assert_eq!(parse(&[]), Err(IlError::Truncated));
        assert_eq!(parse(&[TINY | 5 << 2, 0]), Err(IlError::Truncated));
        // A fat header of another size, and a format that is neither.
        let mut body = fat_body(&[0x2a], FAT, &[]);
        body[1] = 0x40;
        assert_eq!(parse(&body), Err(IlError::BadHeader));
        assert_eq!(parse(&[0x01, 0, 0, 0]), Err(IlError::BadHeader));
        // An OptIL section, a clause table of a partial clause, a section past the end.
        let body = fat_body(&[0x2a], FAT | MORE_SECTS, &[0x02, 4, 0, 0]);
        assert_eq!(parse(&body), Err(IlError::UnknownSection));
        let body = fat_body(&[0x2a], FAT | MORE_SECTS, &[SECT_EH, 10, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(parse(&body), Err(IlError::BadSection));
        let body = fat_body(&[0x2a], FAT | MORE_SECTS, &[SECT_EH, 16, 0, 0]);
        assert_eq!(parse(&body), Err(IlError::Truncated));
        let body = fat_body(&[0x2a], FAT | MORE_SECTS, &[]);
        assert_eq!(parse(&body), Err(IlError::Truncated));
        assert!(prepend(&body, &[0], 1).is_err());
    }

    /// The file offset of an RVA in a PE file's bytes (section table walk).
    fn file_offset(file: &[u8], rva: u32) -> Option<usize> {
        let r32 = |at: usize| file.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let r16 = |at: usize| file.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let pe = r32(0x3c)? as usize;
        let (sections, opt_size) = (r16(pe + 6)? as usize, r16(pe + 20)? as usize);
        (0..sections).find_map(|i| {
            let s = pe + 24 + opt_size + i * 40;
            let (vsize, va, raw) = (r32(s + 8)?, r32(s + 12)?, r32(s + 20)?);
            (rva >= va && rva - va < vsize).then(|| (rva - va + raw) as usize)
        })
    }

    /// Parses and re-emits every method body of a PE file: (bodies, tiny bodies, with clauses).
    fn round_trip_file(path: &std::path::Path) -> Option<(u32, u32, u32)> {
        let bytes = std::fs::read(path).ok()?;
        let md = crate::image_metadata::tests::file_metadata(&bytes)?;
        let md = crate::image_metadata::Metadata::parse(md).expect("tables");
        let (mut bodies, mut tiny, mut eh) = (0, 0, 0);
        for rid in 1..=md.method_count() {
            let rva = md.method_rva(0x0600_0000 | rid).expect("a MethodDef row");
            if rva == 0 {
                continue;
            }
            let at = file_offset(&bytes, rva).unwrap_or_else(|| panic!("{} rid {rid}: rva {rva:x}", path.display()));
            let body = parse(&bytes[at..]).unwrap_or_else(|e| panic!("{} rid {rid}: {e}", path.display()));
            let out = emit(&body).unwrap();
            assert_eq!(out, &bytes[at..at + body.len], "{} rid {rid}", path.display());
            bodies += 1;
            tiny += body.tiny as u32;
            eh += !body.sections.is_empty() as u32;
            // A probe moves every clause by its length and keeps everything else.
            let probed = parse_owned(&prepend(&bytes[at..], &[0x00; 15], 1).unwrap());
            assert_eq!(probed.0.len(), body.code.len() + 15);
            assert_eq!(&probed.0[15..], body.code);
            let want: Vec<Clause> = body
                .sections
                .iter()
                .flat_map(|s| &s.clauses)
                .map(|c| Clause {
                    try_offset: c.try_offset + 15,
                    handler_offset: c.handler_offset + 15,
                    class_or_filter: c.class_or_filter + if c.flags & CLAUSE_FILTER != 0 { 15 } else { 0 },
                    ..*c
                })
                .collect();
            assert_eq!(probed.1, want, "{} rid {rid}", path.display());
            assert_eq!(probed.2, body.max_stack.max(1));
        }
        Some((bodies, tiny, eh))
    }

    fn parse_owned(b: &[u8]) -> (Vec<u8>, Vec<Clause>, u16) {
        let p = parse(b).unwrap();
        assert_eq!(p.len, b.len(), "nothing past the last section");
        (p.code.to_vec(), p.sections.iter().flat_map(|s| s.clauses.clone()).collect(), p.max_stack)
    }

    /// Every method body of System.Private.CoreLib reads and writes back byte for byte (tiny stays
    /// tiny), and takes a probe with its clauses shifted.
    #[test]
    fn every_corelib_body_round_trips_byte_for_byte() {
        let dir = crate::image_metadata::tests::runtime_dir().expect("a shared framework");
        let (bodies, tiny, eh) =
            round_trip_file(&std::path::Path::new(&dir).join("System.Private.CoreLib.dll")).expect("CoreLib");
        assert!(bodies > 20_000 && tiny > 1_000 && eh > 500, "{bodies} bodies, {tiny} tiny, {eh} with clauses");
    }

    /// The same for the test apps that are built (apps/*/bin/**.dll) and a few framework assemblies.
    #[test]
    fn every_app_and_framework_body_round_trips() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps");
        let mut files = Vec::new();
        let mut stack = vec![root];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "dll") && p.to_string_lossy().contains("/bin/") {
                    files.push(p);
                }
            }
        }
        let dir = crate::image_metadata::tests::runtime_dir().expect("a shared framework");
        for name in ["System.Text.Json.dll", "System.Linq.dll", "System.Private.Xml.dll", "System.Collections.dll"] {
            files.push(std::path::Path::new(&dir).join(name));
        }
        let mut total = 0;
        for f in &files {
            if let Some((bodies, _, _)) = round_trip_file(f) {
                total += bodies;
            }
        }
        assert!(total > 10_000, "{total} bodies in {} files", files.len());
    }
}
