//! A portable PDB's metadata (ECMA-335 II.24 with the Portable PDB v1.0 tables): the stream
//! headers (`#Pdb`, `#~`, `#Strings`, `#Blob`, `#GUID`), the Document, MethodDebugInformation and
//! CustomDebugInformation tables, and the sequence-point blobs. Every read is bounds-checked:
//! a damaged file gives an error naming what is wrong, never a panic.

use std::collections::HashMap;

/// Why a PDB cannot be read.
pub type Error = String;
type Result<T> = std::result::Result<T, Error>;

/// The line of a hidden sequence point (`#line hidden`, compiler-generated code).
pub const HIDDEN_LINE: u32 = 0xFE_EFEE;

/// Embedded source (`EmbeddedSource` custom debug information kind).
const EMBEDDED_SOURCE: [u8; 16] = guid("0e8a571b-6926-466e-b4ad-8ab04611f5fe");
/// Source Link JSON (`SourceLink` kind).
const SOURCE_LINK: [u8; 16] = guid("cc110556-a091-4d38-9fec-25ab9a351a6a");

/// A GUID's bytes as stored (first three groups little-endian).
const fn guid(s: &str) -> [u8; 16] {
    let b = s.as_bytes();
    let mut hex = [0u8; 16];
    let mut n = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'-' {
            let v = match b[i] {
                b'0'..=b'9' => b[i] - b'0',
                b'a'..=b'f' => b[i] - b'a' + 10,
                _ => b[i] - b'A' + 10,
            };
            if n % 2 == 0 {
                hex[n / 2] = v << 4;
            } else {
                hex[n / 2] |= v;
            }
            n += 1;
        }
        i += 1;
    }
    [
        hex[3], hex[2], hex[1], hex[0], hex[5], hex[4], hex[7], hex[6], hex[8], hex[9], hex[10], hex[11], hex[12],
        hex[13], hex[14], hex[15],
    ]
}

/// One sequence point: IL offset, document (1-based row), start and end line (`HIDDEN_LINE` for
/// hidden points).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequencePoint {
    pub il_offset: u32,
    pub document: u32,
    pub line: u32,
    pub end_line: u32,
}

impl SequencePoint {
    pub fn hidden(&self) -> bool {
        self.line == HIDDEN_LINE
    }
}

/// A parsed portable PDB: documents, each method's sequence points, embedded sources and the
/// Source Link map.
#[derive(Debug, Default)]
pub struct Pdb {
    /// The PDB id's GUID (the first 16 bytes of `#Pdb`'s id), as the assembly's CodeView entry
    /// names it.
    pub guid: [u8; 16],
    /// Document names by row (index 0 is row 1).
    pub documents: Vec<String>,
    /// Sequence points by MethodDef row (index 0 is row 1), in IL order.
    pub methods: Vec<Vec<SequencePoint>>,
    /// Embedded source text by document row.
    pub embedded: HashMap<u32, Vec<u8>>,
    /// Source Link JSON (`{"documents": {"/src/*": "https://…/*"}}`), when present.
    pub source_link: Option<String>,
}

struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    fn new(data: &'a [u8]) -> Self {
        Bytes { data, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len()).ok_or("truncated")?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(self.u32()? as u64 | (self.u32()? as u64) << 32)
    }
    fn index(&mut self, wide: bool) -> Result<u32> {
        if wide {
            self.u32()
        } else {
            Ok(self.u16()? as u32)
        }
    }
    fn at_end(&self) -> bool {
        self.pos >= self.data.len()
    }
    /// An ECMA-335 compressed unsigned integer (1, 2 or 4 bytes), with its length.
    fn compressed(&mut self) -> Result<(u32, usize)> {
        let b = self.u8()?;
        if b & 0x80 == 0 {
            Ok((b as u32, 1))
        } else if b & 0xC0 == 0x80 {
            Ok(((b as u32 & 0x3F) << 8 | self.u8()? as u32, 2))
        } else if b & 0xE0 == 0xC0 {
            let r = self.take(3)?;
            Ok(((b as u32 & 0x1F) << 24 | (r[0] as u32) << 16 | (r[1] as u32) << 8 | r[2] as u32, 4))
        } else {
            Err("bad compressed integer".into())
        }
    }
    fn cu32(&mut self) -> Result<u32> {
        Ok(self.compressed()?.0)
    }
    /// A compressed signed integer (the sign in the lowest bit, rotated).
    fn ci32(&mut self) -> Result<i32> {
        let (v, n) = self.compressed()?;
        let mut r = (v >> 1) as i32;
        if v & 1 != 0 {
            r |= match n {
                1 => 0xffff_ffc0u32 as i32,
                2 => 0xffff_e000u32 as i32,
                _ => 0xf000_0000u32 as i32,
            };
        }
        Ok(r)
    }
}

/// The heaps a table row refers into.
struct Heaps<'a> {
    blob: &'a [u8],
    guid: &'a [u8],
}

impl<'a> Heaps<'a> {
    fn blob(&self, i: u32) -> Result<&'a [u8]> {
        if i == 0 {
            return Ok(&[]);
        }
        let mut b = Bytes::new(self.blob.get(i as usize..).ok_or("blob index out of range")?);
        let n = b.cu32()? as usize;
        b.take(n).map_err(|_| "blob out of range".into())
    }
    fn guid(&self, i: u32) -> Result<[u8; 16]> {
        if i == 0 {
            return Ok([0; 16]);
        }
        let at = (i as usize - 1) * 16;
        let g = self.guid.get(at..at + 16).ok_or("GUID index out of range")?;
        Ok(g.try_into().unwrap_or([0; 16]))
    }
}

const DOCUMENT: usize = 0x30;
const METHOD_DEBUG: usize = 0x31;
const LOCAL_SCOPE: usize = 0x32;
const LOCAL_VARIABLE: usize = 0x33;
const LOCAL_CONSTANT: usize = 0x34;
const IMPORT_SCOPE: usize = 0x35;
const STATE_MACHINE: usize = 0x36;
const CUSTOM_DEBUG: usize = 0x37;
const METHOD_DEF: usize = 0x06;
const MODULE: usize = 0x00;

/// Tables a HasCustomDebugInformation coded index can name, in tag order.
const HAS_CDI: [usize; 27] = [
    0x06, 0x04, 0x01, 0x02, 0x08, 0x09, 0x0A, 0x00, 0x0E, 0x17, 0x14, 0x11, 0x1A, 0x1B, 0x20, 0x23, 0x26, 0x27, 0x28,
    0x2A, 0x2C, 0x2B, 0x30, 0x32, 0x33, 0x34, 0x35,
];

impl Pdb {
    /// Parses a portable PDB (the file's bytes, or an embedded PDB once inflated).
    pub fn parse(data: &[u8]) -> Result<Pdb> {
        let mut r = Bytes::new(data);
        if r.u32().map_err(|_| "empty file")? != 0x424A_5342 {
            return Err("not a portable PDB (no BSJB metadata signature; a Windows PDB?)".into());
        }
        r.take(8)?;
        let vlen = r.u32()? as usize;
        r.take(vlen)?;
        r.u16()?;
        let nstreams = r.u16()?;
        let mut streams: HashMap<String, &[u8]> = HashMap::new();
        for _ in 0..nstreams {
            let off = r.u32()? as usize;
            let size = r.u32()? as usize;
            let mut name = Vec::new();
            loop {
                let c = r.u8()?;
                if c == 0 {
                    break;
                }
                name.push(c);
            }
            // Names are padded to 4 bytes, the terminator included.
            let pad = (4 - (name.len() + 1) % 4) % 4;
            r.take(pad)?;
            let s = data
                .get(off..off.checked_add(size).ok_or("stream out of range")?)
                .ok_or_else(|| format!("stream {} out of the file", String::from_utf8_lossy(&name)))?;
            streams.insert(String::from_utf8_lossy(&name).into_owned(), s);
        }
        let pdb = streams.get("#Pdb").ok_or("no #Pdb stream (not a portable PDB)")?;
        let tables = streams.get("#~").ok_or("no #~ stream")?;
        let heaps = Heaps {
            blob: streams.get("#Blob").copied().unwrap_or(&[]),
            guid: streams.get("#GUID").copied().unwrap_or(&[]),
        };
        // #Pdb: id (20 bytes), entry point, the type-system tables' row counts.
        let mut p = Bytes::new(pdb);
        let id = p.take(20)?;
        p.u32()?;
        let referenced = p.u64()?;
        let mut rows = [0u32; 64];
        for (t, n) in rows.iter_mut().enumerate() {
            if referenced & (1u64 << t) != 0 {
                *n = p.u32()?;
            }
        }
        // #~: the debug tables' row counts, then the rows.
        let mut t = Bytes::new(tables);
        t.u32()?;
        t.take(2)?;
        let heap_sizes = t.u8()?;
        t.u8()?;
        let valid = t.u64()?;
        t.u64()?;
        for (i, n) in rows.iter_mut().enumerate() {
            if valid & (1u64 << i) != 0 {
                *n = t.u32()?;
            }
        }
        if valid & !(0xFFu64 << DOCUMENT) != 0 {
            return Err("#~ stream holds type-system tables (an assembly, not a PDB?)".into());
        }
        let (string_w, guid_w, blob_w) = (heap_sizes & 1 != 0, heap_sizes & 2 != 0, heap_sizes & 4 != 0);
        let idx = |table: usize| rows[table] >= 1 << 16;
        let cdi_w = HAS_CDI.iter().any(|&tb| rows[tb] >= 1 << 11);
        let w = |b: bool| if b { 4 } else { 2 };
        let row_size = |table: usize| -> usize {
            match table {
                DOCUMENT => w(blob_w) + w(guid_w) + w(blob_w) + w(guid_w),
                METHOD_DEBUG => w(idx(DOCUMENT)) + w(blob_w),
                LOCAL_SCOPE => {
                    w(idx(METHOD_DEF)) + w(idx(IMPORT_SCOPE)) + w(idx(LOCAL_VARIABLE)) + w(idx(LOCAL_CONSTANT)) + 8
                }
                LOCAL_VARIABLE => 4 + w(string_w),
                LOCAL_CONSTANT => w(string_w) + w(blob_w),
                IMPORT_SCOPE => w(idx(IMPORT_SCOPE)) + w(blob_w),
                STATE_MACHINE => 2 * w(idx(METHOD_DEF)),
                _ => w(cdi_w) + w(guid_w) + w(blob_w),
            }
        };
        let mut out = Pdb { guid: id[..16].try_into().unwrap_or([0; 16]), ..Default::default() };
        for (table, &n) in rows.iter().enumerate().take(CUSTOM_DEBUG + 1).skip(DOCUMENT) {
            let n = n as usize;
            let size = row_size(table);
            let body = t.take(n.checked_mul(size).ok_or("table too large")?).map_err(|_| "tables truncated")?;
            let mut b = Bytes::new(body);
            match table {
                DOCUMENT => {
                    for _ in 0..n {
                        let name = b.index(blob_w)?;
                        b.take(w(guid_w) + w(blob_w) + w(guid_w))?;
                        out.documents.push(document_name(&heaps, name).unwrap_or_default());
                    }
                }
                METHOD_DEBUG => {
                    for row in 0..n {
                        let doc = b.index(idx(DOCUMENT))?;
                        let blob = b.index(blob_w)?;
                        let points = sequence_points(heaps.blob(blob)?, doc)
                            .map_err(|e| format!("sequence points of method row {}: {e}", row + 1))?;
                        out.methods.push(points);
                    }
                }
                CUSTOM_DEBUG => {
                    for _ in 0..n {
                        let parent = b.index(cdi_w)?;
                        let kind = heaps.guid(b.index(guid_w)?)?;
                        let value = b.index(blob_w)?;
                        let (tag, row) = ((parent & 31) as usize, parent >> 5);
                        let target = HAS_CDI.get(tag).copied();
                        if kind == EMBEDDED_SOURCE && target == Some(DOCUMENT) {
                            if let Ok(text) = embedded_source(heaps.blob(value)?) {
                                out.embedded.insert(row, text);
                            }
                        } else if kind == SOURCE_LINK && target == Some(MODULE) {
                            out.source_link = Some(String::from_utf8_lossy(heaps.blob(value)?).into_owned());
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

/// A Document's name blob: a separator, then parts (blob indices) joined with it.
fn document_name(heaps: &Heaps<'_>, blob: u32) -> Result<String> {
    let mut b = Bytes::new(heaps.blob(blob)?);
    if b.at_end() {
        return Ok(String::new());
    }
    let sep = b.u8()?;
    let mut name = Vec::new();
    let mut first = true;
    while !b.at_end() {
        if !first && sep != 0 {
            name.push(sep);
        }
        first = false;
        name.extend_from_slice(heaps.blob(b.cu32()?)?);
    }
    Ok(String::from_utf8_lossy(&name).into_owned())
}

/// Decodes a MethodDebugInformation sequence-points blob (`document`: the row's Document column).
pub fn sequence_points(blob: &[u8], document: u32) -> Result<Vec<SequencePoint>> {
    let mut out = Vec::new();
    if blob.is_empty() {
        return Ok(out);
    }
    let mut b = Bytes::new(blob);
    b.cu32()?; // local signature
    let mut doc = if document == 0 { b.cu32()? } else { document };
    let mut il: u32 = 0;
    let (mut line, mut column): (i64, i64) = (-1, -1);
    let mut first = true;
    while !b.at_end() {
        let delta_il = b.cu32()?;
        if delta_il == 0 && !first {
            doc = b.cu32()?;
            continue;
        }
        il = if first { delta_il } else { il.checked_add(delta_il).ok_or("IL offset overflow")? };
        first = false;
        let delta_lines = b.cu32()?;
        let delta_columns = if delta_lines == 0 { b.cu32()? as i64 } else { b.ci32()? as i64 };
        if delta_lines == 0 && delta_columns == 0 {
            out.push(SequencePoint { il_offset: il, document: doc, line: HIDDEN_LINE, end_line: HIDDEN_LINE });
            continue;
        }
        if line < 0 {
            line = b.cu32()? as i64;
            column = b.cu32()? as i64;
        } else {
            line += b.ci32()? as i64;
            column += b.ci32()? as i64;
        }
        let _ = column;
        if !(1..HIDDEN_LINE as i64).contains(&line) {
            return Err(format!("line {line} out of range"));
        }
        let l = line as u32;
        out.push(SequencePoint { il_offset: il, document: doc, line: l, end_line: l.saturating_add(delta_lines) });
    }
    Ok(out)
}

/// An EmbeddedSource value: `int32 format`, then the text (format 0) or its deflated bytes
/// (format = the text's size).
fn embedded_source(value: &[u8]) -> Result<Vec<u8>> {
    let mut b = Bytes::new(value);
    let format = b.u32()? as i32;
    let rest = &value[4..];
    if format == 0 {
        return Ok(rest.to_vec());
    }
    if format < 0 {
        return Err("bad embedded source format".into());
    }
    inflate(rest, format as usize)
}

/// Inflates raw deflate data of a known size.
pub fn inflate(data: &[u8], size: usize) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::with_capacity(size.min(1 << 26));
    flate2::read::DeflateDecoder::new(data)
        .take(size as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("cannot inflate ({e})"))?;
    if out.len() != size {
        return Err(format!("inflated to {} bytes, expected {size}", out.len()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_compressed_integers() {
        let mut b = Bytes::new(&[0x03, 0x80, 0x80, 0xC0, 0x00, 0x40, 0x00]);
        assert_eq!(b.cu32().unwrap(), 3);
        assert_eq!(b.cu32().unwrap(), 0x80);
        assert_eq!(b.cu32().unwrap(), 0x4000);
        // Signed: 0x7B is -3 (ECMA II.23.2 examples: 3 → 0x06, -3 → 0x7B).
        assert_eq!(Bytes::new(&[0x06]).ci32().unwrap(), 3);
        assert_eq!(Bytes::new(&[0x7B]).ci32().unwrap(), -3);
        assert_eq!(Bytes::new(&[0x80, 0x80]).ci32().unwrap(), 64);
        assert_eq!(Bytes::new(&[0x01]).ci32().unwrap(), -64);
        assert!(Bytes::new(&[0xE0]).cu32().is_err());
        assert!(Bytes::new(&[0x80]).cu32().is_err());
    }

    #[test]
    fn decodes_sequence_points() {
        // Local sig 0; IL 0 line 10 (Δlines 0, Δcols 5, line 10, col 9); IL 4 hidden; IL 6 line 12
        // (Δ +2 from 10) spanning 1 more line; document record → 2; IL 9 line 11 (Δ -1).
        let blob = [0, 0, 0, 5, 10, 9, 4, 0, 0, 2, 1, 0x04, 0x04, 0x02, 0, 2, 3, 0, 3, 0x7F, 0];
        let p = sequence_points(&blob, 1).unwrap();
        assert_eq!(
            p,
            vec![
                SequencePoint { il_offset: 0, document: 1, line: 10, end_line: 10 },
                SequencePoint { il_offset: 4, document: 1, line: HIDDEN_LINE, end_line: HIDDEN_LINE },
                SequencePoint { il_offset: 6, document: 1, line: 12, end_line: 13 },
                SequencePoint { il_offset: 9, document: 2, line: 11, end_line: 11 },
            ]
        );
        // Cut short: an error, not a panic.
        for n in 1..blob.len() {
            let _ = sequence_points(&blob[..n], 1);
        }
    }

    #[test]
    fn rejects_what_is_not_a_portable_pdb() {
        assert!(Pdb::parse(b"").is_err());
        assert!(Pdb::parse(b"Microsoft C/C++ MSF 7.00\r\n").unwrap_err().contains("not a portable PDB"));
        assert!(Pdb::parse(&[0x42, 0x53, 0x4A, 0x42, 1, 0]).is_err());
    }

    #[test]
    fn guid_bytes_are_stored_order() {
        assert_eq!(&guid("0e8a571b-6926-466e-b4ad-8ab04611f5fe")[..4], &[0x1b, 0x57, 0x8a, 0x0e]);
    }
}
