//! A read-only ECMA-335 metadata reader over a module's metadata bytes as loaded in its image (the
//! `BSJB` root and its streams), for the few lookups naming needs: type, type reference, method,
//! nested class, type specification and generic parameter rows. (`clrprof_sys::metadata` wraps the
//! runtime's `IMetaDataImport` instead.)
//!
//! Why not the runtime's `IMetaDataImport`: the first public importer asked for a module converts
//! the runtime's own internal importer of that module from its read-only to its read-write form
//! (`PEAssembly::ConvertMDInternalToReadWrite`), and from then on every metadata access the runtime
//! makes for that module — type loads, JIT token resolution — takes a reader lock and the slower
//! read-write tables. Naming the functions of the C# compiler through importers cost its own
//! threads ~60 ms of CPU in a 0.5 s run (BENCHMARKS.md, "Metadata read from the image"). Reading
//! the tables here touches nothing of the runtime's.
//!
//! Every read is bounds-checked: a malformed or unexpected layout gives `None` (the caller falls
//! back to the importer), never a panic.

/// Table numbers (ECMA-335 II.22).
mod table {
    pub(crate) const TYPE_REF: usize = 0x01;
    pub(crate) const TYPE_DEF: usize = 0x02;
    pub(crate) const FIELD_PTR: usize = 0x03;
    pub(crate) const FIELD: usize = 0x04;
    pub(crate) const METHOD_PTR: usize = 0x05;
    pub(crate) const METHOD_DEF: usize = 0x06;
    pub(crate) const PARAM_PTR: usize = 0x07;
    pub(crate) const PARAM: usize = 0x08;
    pub(crate) const INTERFACE_IMPL: usize = 0x09;
    pub(crate) const MEMBER_REF: usize = 0x0a;
    pub(crate) const CUSTOM_ATTRIBUTE: usize = 0x0c;
    pub(crate) const DECL_SECURITY: usize = 0x0e;
    pub(crate) const STAND_ALONE_SIG: usize = 0x11;
    pub(crate) const EVENT_PTR: usize = 0x13;
    pub(crate) const EVENT: usize = 0x14;
    pub(crate) const PROPERTY_PTR: usize = 0x16;
    pub(crate) const PROPERTY: usize = 0x17;
    pub(crate) const MODULE: usize = 0x00;
    pub(crate) const MODULE_REF: usize = 0x1a;
    pub(crate) const TYPE_SPEC: usize = 0x1b;
    pub(crate) const ASSEMBLY: usize = 0x20;
    pub(crate) const ASSEMBLY_REF: usize = 0x23;
    pub(crate) const FILE: usize = 0x26;
    pub(crate) const EXPORTED_TYPE: usize = 0x27;
    pub(crate) const MANIFEST_RESOURCE: usize = 0x28;
    pub(crate) const NESTED_CLASS: usize = 0x29;
    pub(crate) const GENERIC_PARAM: usize = 0x2a;
    pub(crate) const METHOD_SPEC: usize = 0x2b;
    pub(crate) const GENERIC_PARAM_CONSTRAINT: usize = 0x2c;
    /// Tables past this one belong to portable PDBs, never to a loaded module.
    pub(crate) const LAST: usize = 0x2c;
}

/// Coded index kinds (ECMA-335 II.24.2.6): the tables each can refer to, in tag order.
mod coded {
    use super::table::*;
    const NONE: usize = usize::MAX;
    pub(crate) const TYPE_DEF_OR_REF: &[usize] = &[TYPE_DEF, TYPE_REF, TYPE_SPEC];
    pub(crate) const HAS_CONSTANT: &[usize] = &[FIELD, PARAM, PROPERTY];
    pub(crate) const HAS_CUSTOM_ATTRIBUTE: &[usize] = &[
        METHOD_DEF,
        FIELD,
        TYPE_REF,
        TYPE_DEF,
        PARAM,
        INTERFACE_IMPL,
        MEMBER_REF,
        MODULE,
        DECL_SECURITY,
        PROPERTY,
        EVENT,
        STAND_ALONE_SIG,
        MODULE_REF,
        TYPE_SPEC,
        ASSEMBLY,
        ASSEMBLY_REF,
        FILE,
        EXPORTED_TYPE,
        MANIFEST_RESOURCE,
        GENERIC_PARAM,
        GENERIC_PARAM_CONSTRAINT,
        METHOD_SPEC,
    ];
    pub(crate) const HAS_FIELD_MARSHAL: &[usize] = &[FIELD, PARAM];
    pub(crate) const HAS_DECL_SECURITY: &[usize] = &[TYPE_DEF, METHOD_DEF, ASSEMBLY];
    pub(crate) const MEMBER_REF_PARENT: &[usize] = &[TYPE_DEF, TYPE_REF, MODULE_REF, METHOD_DEF, TYPE_SPEC];
    pub(crate) const HAS_SEMANTICS: &[usize] = &[EVENT, PROPERTY];
    pub(crate) const METHOD_DEF_OR_REF: &[usize] = &[METHOD_DEF, MEMBER_REF];
    pub(crate) const MEMBER_FORWARDED: &[usize] = &[FIELD, METHOD_DEF];
    pub(crate) const IMPLEMENTATION: &[usize] = &[FILE, ASSEMBLY_REF, EXPORTED_TYPE];
    pub(crate) const CUSTOM_ATTRIBUTE_TYPE: &[usize] = &[NONE, NONE, METHOD_DEF, MEMBER_REF, NONE];
    pub(crate) const RESOLUTION_SCOPE: &[usize] = &[MODULE, MODULE_REF, ASSEMBLY_REF, TYPE_REF];
    pub(crate) const TYPE_OR_METHOD_DEF: &[usize] = &[TYPE_DEF, METHOD_DEF];
}

/// One column of a table row.
#[derive(Clone, Copy)]
enum Col {
    U16,
    U32,
    Str,
    Guid,
    Blob,
    /// A plain index into a table.
    Idx(usize),
    Coded(&'static [usize]),
}

/// The columns of each table (ECMA-335 II.22), by table number.
fn schema(t: usize) -> &'static [Col] {
    use coded::*;
    use table::*;
    use Col::*;
    match t {
        0x00 => &[U16, Str, Guid, Guid, Guid],
        0x01 => &[Coded(RESOLUTION_SCOPE), Str, Str],
        0x02 => &[U32, Str, Str, Coded(TYPE_DEF_OR_REF), Idx(FIELD), Idx(METHOD_DEF)],
        0x03 => &[Idx(FIELD)],
        0x04 => &[U16, Str, Blob],
        0x05 => &[Idx(METHOD_DEF)],
        0x06 => &[U32, U16, U16, Str, Blob, Idx(PARAM)],
        0x07 => &[Idx(PARAM)],
        0x08 => &[U16, U16, Str],
        0x09 => &[Idx(TYPE_DEF), Coded(TYPE_DEF_OR_REF)],
        0x0a => &[Coded(MEMBER_REF_PARENT), Str, Blob],
        0x0b => &[U16, Coded(HAS_CONSTANT), Blob],
        0x0c => &[Coded(HAS_CUSTOM_ATTRIBUTE), Coded(CUSTOM_ATTRIBUTE_TYPE), Blob],
        0x0d => &[Coded(HAS_FIELD_MARSHAL), Blob],
        0x0e => &[U16, Coded(HAS_DECL_SECURITY), Blob],
        0x0f => &[U16, U32, Idx(TYPE_DEF)],
        0x10 => &[U32, Idx(FIELD)],
        0x11 => &[Blob],
        0x12 => &[Idx(TYPE_DEF), Idx(EVENT)],
        0x13 => &[Idx(EVENT)],
        0x14 => &[U16, Str, Coded(TYPE_DEF_OR_REF)],
        0x15 => &[Idx(TYPE_DEF), Idx(PROPERTY)],
        0x16 => &[Idx(PROPERTY)],
        0x17 => &[U16, Str, Blob],
        0x18 => &[U16, Idx(METHOD_DEF), Coded(HAS_SEMANTICS)],
        0x19 => &[Idx(TYPE_DEF), Coded(METHOD_DEF_OR_REF), Coded(METHOD_DEF_OR_REF)],
        0x1a => &[Str],
        0x1b => &[Blob],
        0x1c => &[U16, Coded(MEMBER_FORWARDED), Str, Idx(MODULE_REF)],
        0x1d => &[U32, Idx(FIELD)],
        0x1e => &[U32, U32],
        0x1f => &[U32],
        0x20 => &[U32, U16, U16, U16, U16, U32, Blob, Str, Str],
        0x21 => &[U32],
        0x22 => &[U32, U32, U32],
        0x23 => &[U16, U16, U16, U16, U32, Blob, Str, Str, Blob],
        0x24 => &[U32, Idx(ASSEMBLY_REF)],
        0x25 => &[U32, U32, U32, Idx(ASSEMBLY_REF)],
        0x26 => &[U32, Str, Blob],
        0x27 => &[U32, U32, Str, Str, Coded(IMPLEMENTATION)],
        0x28 => &[U32, U32, Str, Coded(IMPLEMENTATION)],
        0x29 => &[Idx(TYPE_DEF), Idx(TYPE_DEF)],
        0x2a => &[U16, U16, Coded(TYPE_OR_METHOD_DEF), Str],
        0x2b => &[Coded(METHOD_DEF_OR_REF), Blob],
        0x2c => &[Idx(GENERIC_PARAM), Coded(TYPE_DEF_OR_REF)],
        _ => &[],
    }
}

/// Where one table lives and how its rows are laid out.
#[derive(Clone, Default)]
struct Table {
    rows: u32,
    /// Offset of the first row in the tables stream.
    offset: usize,
    row_size: usize,
    /// Offset of each column within a row, and its width (2 or 4 bytes for everything read here).
    cols: Vec<(usize, usize)>,
    sorted: bool,
}

/// A module's metadata, parsed far enough to read rows. Borrows the bytes.
pub(crate) struct Metadata<'a> {
    strings: &'a [u8],
    blobs: &'a [u8],
    tables_stream: &'a [u8],
    tables: Vec<Table>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

impl<'a> Metadata<'a> {
    /// Parses the metadata root (`BSJB`) and the tables header. `None` for anything this reader
    /// does not handle: a missing stream, edit-and-continue pointer tables (the `#-` layout's
    /// indirections), tables it does not know.
    pub(crate) fn parse(md: &'a [u8]) -> Option<Metadata<'a>> {
        if u32_at(md, 0)? != 0x424a_5342 {
            return None;
        }
        let version_len = u32_at(md, 12)? as usize;
        let mut at = 16usize.checked_add(version_len)?;
        let _flags = u16_at(md, at)?;
        let streams = u16_at(md, at + 2)? as usize;
        at += 4;
        let (mut strings, mut blobs, mut tables) = (None, None, None);
        for _ in 0..streams {
            let offset = u32_at(md, at)? as usize;
            let size = u32_at(md, at + 4)? as usize;
            let name_start = at + 8;
            let name_len = md.get(name_start..)?.iter().take(32).position(|&c| c == 0)?;
            let name = &md[name_start..name_start + name_len];
            let data = md.get(offset..offset.checked_add(size)?)?;
            match name {
                b"#Strings" => strings = Some(data),
                b"#Blob" => blobs = Some(data),
                b"#~" | b"#-" => tables = Some(data),
                _ => {}
            }
            // The name is padded with zeros to a multiple of 4 bytes.
            at = name_start + (name_len + 4) / 4 * 4;
        }
        let (strings, blobs, ts) = (strings?, blobs.unwrap_or(&[]), tables?);
        let heap_sizes = *ts.get(6)?;
        let valid = u32_at(ts, 8)? as u64 | (u32_at(ts, 12)? as u64) << 32;
        let sorted = u32_at(ts, 16)? as u64 | (u32_at(ts, 20)? as u64) << 32;
        if valid >> (table::LAST + 1) != 0 {
            return None;
        }
        let mut rows = [0u32; table::LAST + 1];
        let mut at = 24usize;
        for (t, r) in rows.iter_mut().enumerate() {
            if valid & (1 << t) != 0 {
                *r = u32_at(ts, at)?;
                at += 4;
            }
        }
        // Pointer tables remap member lists (unoptimized, edit-and-continue metadata): not read here.
        for t in [table::FIELD_PTR, table::METHOD_PTR, table::PARAM_PTR, table::EVENT_PTR, table::PROPERTY_PTR] {
            if rows[t] != 0 {
                return None;
            }
        }
        // `#-` streams may carry 4 bytes of extra data after the row counts.
        if heap_sizes & 0x40 != 0 {
            at += 4;
        }
        let str_size = if heap_sizes & 0x01 != 0 { 4 } else { 2 };
        let guid_size = if heap_sizes & 0x02 != 0 { 4 } else { 2 };
        let blob_size = if heap_sizes & 0x04 != 0 { 4 } else { 2 };
        let index_size = |t: usize| if rows[t] < 0x1_0000 { 2 } else { 4 };
        let coded_size = |targets: &[usize]| {
            let tag_bits = usize::BITS - (targets.len() - 1).leading_zeros();
            let max = targets.iter().map(|&t| rows.get(t).copied().unwrap_or(0)).max().unwrap_or(0);
            if (max as u64) < (1u64 << (16 - tag_bits)) {
                2
            } else {
                4
            }
        };
        let mut parsed = vec![Table::default(); table::LAST + 1];
        for (t, p) in parsed.iter_mut().enumerate() {
            let mut cols = Vec::new();
            let mut size = 0usize;
            for c in schema(t) {
                let w = match *c {
                    Col::U16 => 2,
                    Col::U32 => 4,
                    Col::Str => str_size,
                    Col::Guid => guid_size,
                    Col::Blob => blob_size,
                    Col::Idx(t) => index_size(t),
                    Col::Coded(k) => coded_size(k),
                };
                cols.push((size, w));
                size += w;
            }
            *p = Table { rows: rows[t], offset: at, row_size: size, cols, sorted: sorted & (1 << t) != 0 };
            at = at.checked_add(size.checked_mul(rows[t] as usize)?)?;
        }
        if at > ts.len() {
            return None;
        }
        Some(Metadata { strings, blobs, tables_stream: ts, tables: parsed })
    }

    /// Column `col` of row `rid` (1-based) of table `t`.
    fn cell(&self, t: usize, rid: u32, col: usize) -> Option<u32> {
        let tab = self.tables.get(t)?;
        if rid == 0 || rid > tab.rows {
            return None;
        }
        let (off, w) = *tab.cols.get(col)?;
        let at = tab.offset + (rid as usize - 1) * tab.row_size + off;
        match w {
            2 => u16_at(self.tables_stream, at).map(u32::from),
            _ => u32_at(self.tables_stream, at),
        }
    }

    fn string(&self, index: u32) -> Option<String> {
        let s = self.strings.get(index as usize..)?;
        let end = s.iter().position(|&c| c == 0)?;
        Some(String::from_utf8_lossy(&s[..end]).into_owned())
    }

    fn blob(&self, index: u32) -> Option<&'a [u8]> {
        let b = self.blobs.get(index as usize..)?;
        let (len, skip): (usize, usize) = match *b.first()? {
            x if x & 0x80 == 0 => (x as usize, 1),
            x if x & 0xc0 == 0x80 => (((x as usize & 0x3f) << 8) | *b.get(1)? as usize, 2),
            x if x & 0xe0 == 0xc0 => (
                ((x as usize & 0x1f) << 24)
                    | (*b.get(1)? as usize) << 16
                    | (*b.get(2)? as usize) << 8
                    | *b.get(3)? as usize,
                4,
            ),
            _ => return None,
        };
        b.get(skip..skip.checked_add(len)?)
    }

    /// The token a coded index stands for.
    fn decode(targets: &[usize], value: u32) -> Option<u32> {
        let tag_bits = usize::BITS - (targets.len() - 1).leading_zeros();
        let t = *targets.get((value & ((1 << tag_bits) - 1)) as usize)?;
        (t != usize::MAX).then(|| (t as u32) << 24 | value >> tag_bits)
    }

    fn rid(token: u32, t: usize) -> Option<u32> {
        (token >> 24 == t as u32).then_some(token & 0x00ff_ffff)
    }

    /// `Namespace.Name` of a TypeDef, as `GetTypeDefProps` gives it.
    pub(crate) fn type_def_name(&self, token: u32) -> Option<String> {
        let rid = Self::rid(token, table::TYPE_DEF)?;
        let name = self.string(self.cell(table::TYPE_DEF, rid, 1)?)?;
        let ns = self.string(self.cell(table::TYPE_DEF, rid, 2)?)?;
        Some(qualified(&ns, name))
    }

    /// (`Namespace.Name`, resolution scope token) of a TypeRef, as `GetTypeRefProps` gives them.
    pub(crate) fn type_ref(&self, token: u32) -> Option<(String, u32)> {
        let rid = Self::rid(token, table::TYPE_REF)?;
        let scope = Self::decode(coded::RESOLUTION_SCOPE, self.cell(table::TYPE_REF, rid, 0)?)?;
        let name = self.string(self.cell(table::TYPE_REF, rid, 1)?)?;
        let ns = self.string(self.cell(table::TYPE_REF, rid, 2)?)?;
        // A null scope decodes to a Module token with rid 0, as the importer reports it.
        Some((qualified(&ns, name), scope))
    }

    /// (declaring TypeDef token, name, attributes, signature) of a MethodDef.
    pub(crate) fn method(&self, token: u32) -> Option<(u32, String, u32, &'a [u8])> {
        let rid = Self::rid(token, table::METHOD_DEF)?;
        let flags = self.cell(table::METHOD_DEF, rid, 2)?;
        let name = self.string(self.cell(table::METHOD_DEF, rid, 3)?)?;
        let sig = self.blob(self.cell(table::METHOD_DEF, rid, 4)?)?;
        Some((self.method_owner(rid)?, name, flags, sig))
    }

    /// The number of MethodDef rows.
    pub(crate) fn method_count(&self) -> u32 {
        self.tables[table::METHOD_DEF].rows
    }

    /// The RVA of a MethodDef's body (0 for a method without one: abstract, runtime, P/Invoke).
    #[cfg(test)]
    pub(crate) fn method_rva(&self, token: u32) -> Option<u32> {
        self.cell(table::METHOD_DEF, Self::rid(token, table::METHOD_DEF)?, 0)
    }

    /// The AssemblyRefs of the module: (token, name).
    pub(crate) fn assembly_refs(&self) -> Vec<(u32, String)> {
        (1..=self.tables[table::ASSEMBLY_REF].rows)
            .filter_map(|r| {
                let name = self.string(self.cell(table::ASSEMBLY_REF, r, 6)?)?;
                Some(((table::ASSEMBLY_REF as u32) << 24 | r, name))
            })
            .collect()
    }

    /// The TypeDef of a top-level type by its `Namespace.Name`.
    pub(crate) fn find_type_def(&self, name: &str) -> Option<u32> {
        (1..=self.tables[table::TYPE_DEF].rows)
            .map(|r| (table::TYPE_DEF as u32) << 24 | r)
            .find(|&t| self.enclosing_type(t) == Some(None) && self.type_def_name(t).as_deref() == Some(name))
    }

    /// The MethodDef of `owner`'s method `name` with signature blob `sig`.
    pub(crate) fn find_method(&self, owner: u32, name: &str, sig: &[u8]) -> Option<u32> {
        let rid = Self::rid(owner, table::TYPE_DEF)?;
        let first = self.cell(table::TYPE_DEF, rid, 5)?;
        let end = if rid < self.tables[table::TYPE_DEF].rows {
            self.cell(table::TYPE_DEF, rid + 1, 5)?
        } else {
            self.tables[table::METHOD_DEF].rows + 1
        };
        (first..end).map(|r| (table::METHOD_DEF as u32) << 24 | r).find(|&m| {
            self.cell(table::METHOD_DEF, m & 0xff_ffff, 3).and_then(|i| self.string(i)).as_deref() == Some(name)
                && self.cell(table::METHOD_DEF, m & 0xff_ffff, 4).and_then(|i| self.blob(i)) == Some(sig)
        })
    }

    /// The constructors of a top-level type of this module (its `.ctor` MethodDefs).
    pub(crate) fn constructors(&self, type_name: &str) -> Vec<u32> {
        let Some(rid) = self.find_type_def(type_name).and_then(|t| Self::rid(t, table::TYPE_DEF)) else {
            return Vec::new();
        };
        let (Some(first), end) = (
            self.cell(table::TYPE_DEF, rid, 5),
            if rid < self.tables[table::TYPE_DEF].rows {
                self.cell(table::TYPE_DEF, rid + 1, 5)
            } else {
                Some(self.tables[table::METHOD_DEF].rows + 1)
            },
        ) else {
            return Vec::new();
        };
        (first..end.unwrap_or(first))
            .filter(|&r| self.cell(table::METHOD_DEF, r, 3).and_then(|i| self.string(i)).as_deref() == Some(".ctor"))
            .map(|r| (table::METHOD_DEF as u32) << 24 | r)
            .collect()
    }

    /// Whether MethodDef `method` carries a custom attribute built by one of `ctors` (MethodDefs of
    /// this module).
    pub(crate) fn method_has_attribute(&self, method: u32, ctors: &[u32]) -> bool {
        let Some(rid) = Self::rid(method, table::METHOD_DEF) else { return false };
        // HasCustomAttribute: MethodDef is tag 0 of 5 bits; CustomAttributeType: MethodDef is tag 2 of 3.
        let Some(rows) = self.find_rows(table::CUSTOM_ATTRIBUTE, 0, rid << 5) else { return false };
        let wanted: Vec<u32> = ctors.iter().map(|c| (c & 0x00ff_ffff) << 3 | 2).collect();
        rows.into_iter().any(|r| self.cell(table::CUSTOM_ATTRIBUTE, r, 1).is_some_and(|t| wanted.contains(&t)))
    }

    /// The TypeDef whose method list holds MethodDef `rid`: the last type whose list starts at or
    /// before it (method lists are contiguous and in order).
    fn method_owner(&self, rid: u32) -> Option<u32> {
        let types = self.tables[table::TYPE_DEF].rows;
        let (mut lo, mut hi) = (1u32, types);
        let mut found = None;
        while lo <= hi {
            let mid = lo + (hi - lo) / 2;
            if self.cell(table::TYPE_DEF, mid, 5)? <= rid {
                found = Some(mid);
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        // Types with empty lists share their successor's start: the owner is the last of them.
        found.map(|r| (table::TYPE_DEF as u32) << 24 | r)
    }

    /// The enclosing TypeDef of a TypeDef (`Some(None)`: not nested); `None` when the token is
    /// not one of these tables' types.
    pub(crate) fn enclosing_type(&self, token: u32) -> Option<Option<u32>> {
        let rid = Self::rid(token, table::TYPE_DEF)?;
        if rid == 0 || rid > self.tables[table::TYPE_DEF].rows {
            return None;
        }
        let Some(row) = self.find_rows(table::NESTED_CLASS, 0, rid)?.next() else { return Some(None) };
        let enclosing = self.cell(table::NESTED_CLASS, row, 1)?;
        Some((enclosing != 0).then_some((table::TYPE_DEF as u32) << 24 | enclosing))
    }

    /// The signature blob of a TypeSpec.
    pub(crate) fn type_spec(&self, token: u32) -> Option<&'a [u8]> {
        let rid = Self::rid(token, table::TYPE_SPEC)?;
        self.blob(self.cell(table::TYPE_SPEC, rid, 0)?)
    }

    /// Names of the generic parameters of a TypeDef or MethodDef, in table order (by number).
    pub(crate) fn generic_param_names(&self, owner: u32) -> Option<Vec<String>> {
        let (tag, t) = match owner >> 24 {
            t if t == table::TYPE_DEF as u32 => (0, table::TYPE_DEF),
            t if t == table::METHOD_DEF as u32 => (1, table::METHOD_DEF),
            _ => return None,
        };
        if owner & 0x00ff_ffff == 0 || owner & 0x00ff_ffff > self.tables[t].rows {
            return None;
        }
        let key = (owner & 0x00ff_ffff) << 1 | tag;
        let mut names = Vec::new();
        for row in self.find_rows(table::GENERIC_PARAM, 2, key)? {
            names.push(self.string(self.cell(table::GENERIC_PARAM, row, 3)?)?);
        }
        Some(names)
    }

    /// The static, non-literal fields of the non-generic TypeDefs whose name `wanted` accepts, as
    /// (TypeDef token, FieldDef token, name). Field lists are contiguous and in TypeDef order.
    pub(crate) fn static_fields(&self, wanted: impl Fn(&str) -> bool) -> Option<Vec<(u32, u32, String)>> {
        const STATIC: u32 = 0x10;
        const LITERAL: u32 = 0x40;
        let types = self.tables.get(table::TYPE_DEF)?.rows;
        let fields = self.tables.get(table::FIELD)?.rows;
        let mut out = Vec::new();
        for td in 1..=types {
            let first = self.cell(table::TYPE_DEF, td, 4)?;
            let end = if td < types { self.cell(table::TYPE_DEF, td + 1, 4)? } else { fields + 1 };
            for f in first..end.min(fields + 1) {
                let flags = self.cell(table::FIELD, f, 0)?;
                if flags & (STATIC | LITERAL) != STATIC {
                    continue;
                }
                let at = self.cell(table::FIELD, f, 1)? as usize;
                let raw = self.strings.get(at..)?;
                let raw = &raw[..raw.iter().position(|&c| c == 0)?];
                let Ok(name) = std::str::from_utf8(raw) else { continue };
                if !wanted(name) {
                    continue;
                }
                let token = (table::TYPE_DEF as u32) << 24 | td;
                if !self.generic_param_names(token)?.is_empty() {
                    continue;
                }
                out.push((token, (table::FIELD as u32) << 24 | f, name.to_string()));
            }
        }
        Some(out)
    }

    /// The rows of table `t` whose column `col` equals `key`: by binary search when the table is
    /// sorted on it (as ECMA-335 requires of these tables), else by a scan.
    fn find_rows(&self, t: usize, col: usize, key: u32) -> Option<impl Iterator<Item = u32> + '_> {
        let rows = self.tables.get(t)?.rows;
        let (first, last) = if self.tables[t].sorted {
            // The first row whose key is not below `key`.
            let (mut lo, mut hi) = (1u32, rows + 1);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if self.cell(t, mid, col)? < key {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            (lo, rows)
        } else {
            (1, rows)
        };
        let sorted = self.tables[t].sorted;
        Some(
            (first..=last)
                .map(move |r| (r, self.cell(t, r, col)))
                .take_while(move |&(_, k)| !sorted || k == Some(key))
                .filter(move |&(_, k)| k == Some(key))
                .map(|(r, _)| r),
        )
    }
}

fn qualified(ns: &str, name: String) -> String {
    if ns.is_empty() {
        name
    } else {
        format!("{ns}.{name}")
    }
}

/// The metadata bytes (`BSJB` root) of a PE image, read through `read(offset, len)`: from its
/// bytes as a file (`flat`) or as the loader mapped it (sections at their RVAs). Only the headers,
/// the CLI header and the metadata are read.
pub(crate) fn metadata_of_image<'a>(read: impl Fn(usize, usize) -> Option<&'a [u8]>, flat: bool) -> Option<&'a [u8]> {
    let dos = read(0, 64)?;
    if u16_at(dos, 0)? != 0x5a4d {
        return None;
    }
    let pe = u32_at(dos, 0x3c)? as usize;
    if pe > 0x1000 {
        return None;
    }
    let nt = read(pe, 24)?;
    if u32_at(nt, 0)? != 0x0000_4550 {
        return None;
    }
    let sections = u16_at(nt, 6)? as usize;
    let opt_size = u16_at(nt, 20)? as usize;
    let opt = read(pe + 24, opt_size)?;
    let dirs = match u16_at(opt, 0)? {
        0x10b => 96,
        0x20b => 112,
        _ => return None,
    };
    // Data directory 14: the CLI header.
    let cli_rva = u32_at(opt, dirs + 14 * 8)?;
    let table = read(pe + 24 + opt_size, sections.checked_mul(40)?)?;
    let at = |rva: u32| -> Option<usize> {
        if !flat {
            return Some(rva as usize);
        }
        (0..sections).find_map(|i| {
            let s = i * 40;
            let (vsize, va, raw_size, raw) =
                (u32_at(table, s + 8)?, u32_at(table, s + 12)?, u32_at(table, s + 16)?, u32_at(table, s + 20)?);
            (rva >= va && rva - va < vsize.max(raw_size)).then(|| (rva - va) as usize + raw as usize)
        })
    };
    let cli = read(at(cli_rva)?, 16)?;
    let (md_rva, md_size) = (u32_at(cli, 8)?, u32_at(cli, 12)? as usize);
    read(at(md_rva)?, md_size)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The directory of the newest shared framework `dotnet` (on PATH) lists.
    pub(crate) fn runtime_dir() -> Option<String> {
        let dotnet = std::process::Command::new("dotnet").arg("--list-runtimes").output().ok()?;
        let text = String::from_utf8_lossy(&dotnet.stdout);
        let line = text.lines().rfind(|l| l.starts_with("Microsoft.NETCore.App "))?;
        let mut parts = line.split_whitespace();
        let version = parts.nth(1)?;
        Some(format!("{}/{version}", parts.next()?.trim_start_matches('[').trim_end_matches(']')))
    }

    /// System.Private.CoreLib.dll of the runtime the tests run on.
    pub(crate) fn corelib() -> Option<Vec<u8>> {
        std::fs::read(format!("{}/System.Private.CoreLib.dll", runtime_dir()?)).ok()
    }

    pub(crate) fn file_metadata(bytes: &[u8]) -> Option<&[u8]> {
        metadata_of_image(|at, len| bytes.get(at..at.checked_add(len)?), true)
    }

    fn find_type(md: &Metadata, name: &str) -> Option<u32> {
        (1..=md.tables[table::TYPE_DEF].rows)
            .map(|r| 0x0200_0000 | r)
            .find(|&t| md.type_def_name(t).as_deref() == Some(name))
    }

    #[test]
    fn static_fields_by_name_skip_literals_instance_fields_and_generic_types() {
        let bytes = corelib().expect("System.Private.CoreLib.dll of the installed runtime");
        let md = Metadata::parse(file_metadata(&bytes).expect("a CLI image")).expect("its tables");
        let string = find_type(&md, "System.String").expect("System.String");
        // `String.Empty` is a static readonly field; `Int32.MaxValue` a literal (const), never
        // stored; `_stringLength` an instance field.
        let found = md.static_fields(|n| matches!(n, "Empty" | "MaxValue" | "_stringLength")).unwrap();
        assert!(found.iter().any(|(td, _, n)| *td == string && n == "Empty"), "{found:?}");
        let int32 = find_type(&md, "System.Int32").expect("System.Int32");
        assert!(!found.iter().any(|(td, _, n)| *td == int32 || n == "_stringLength"), "{found:?}");
        // `DateTime.MaxValue` is a static readonly field, found.
        let datetime = find_type(&md, "System.DateTime").expect("System.DateTime");
        assert!(found.iter().any(|(td, _, n)| *td == datetime && n == "MaxValue"), "{found:?}");
        // `EqualityComparer<T>.Default` is on a generic type: its statics are per instantiation.
        let comparer = find_type(&md, "System.Collections.Generic.EqualityComparer`1").unwrap();
        assert!(!md
            .static_fields(|n| n == "<Default>k__BackingField" || n == "Default")
            .unwrap()
            .iter()
            .any(|f| f.0 == comparer));
        for (td, field, _) in &found {
            assert!(md.type_def_name(*td).is_some());
            assert_eq!(field >> 24, 0x04);
        }
    }

    #[test]
    fn interlocked_increment_of_long_found_by_name_and_signature() {
        let bytes = corelib().expect("System.Private.CoreLib.dll of the installed runtime");
        let md = Metadata::parse(file_metadata(&bytes).expect("a CLI image")).expect("its tables");
        let t = md.find_type_def("System.Threading.Interlocked").expect("Interlocked");
        // DEFAULT, 1 parameter, returns I8, takes BYREF I8.
        let m = md.find_method(t, "Increment", &[0x00, 0x01, 0x0a, 0x10, 0x0a]).expect("Increment(ref long)");
        assert_eq!(md.method(m).map(|x| (x.0, x.1)), Some((t, "Increment".to_string())));
        assert!(md.find_method(t, "Increment", &[0x00, 0x01, 0x08, 0x10, 0x08]).is_some(), "Increment(ref int)");
        assert!(md.find_method(t, "Increment", &[0x00, 0x01, 0x0a, 0x10, 0x0b]).is_none());
        assert!(md.assembly_refs().is_empty(), "CoreLib refers to no assembly");
        // [Intrinsic] methods: String.get_Length has it, String.Concat(string, string) does not.
        let intrinsic = md.constructors("System.Runtime.CompilerServices.IntrinsicAttribute");
        assert_eq!(intrinsic.len(), 1);
        let string = md.find_type_def("System.String").unwrap();
        let get_length = md.find_method(string, "get_Length", &[0x20, 0x00, 0x08]).expect("String.get_Length");
        assert!(md.method_has_attribute(get_length, &intrinsic));
        let concat = md.find_method(string, "Concat", &[0x00, 0x02, 0x0e, 0x0e, 0x0e]).expect("Concat(string, string)");
        assert!(!md.method_has_attribute(concat, &intrinsic));
        // An app-facing assembly refers to System.Runtime or CoreLib.
        let dir = runtime_dir().unwrap();
        let linq = std::fs::read(format!("{dir}/System.Linq.dll")).unwrap();
        let md = Metadata::parse(file_metadata(&linq).unwrap()).unwrap();
        let refs = md.assembly_refs();
        assert!(
            refs.iter().any(|(t, n)| t >> 24 == 0x23 && (n == "System.Runtime" || n == "System.Private.CoreLib")),
            "{refs:?}"
        );
    }

    #[test]
    fn names_read_from_corelib_s_tables() {
        let bytes = corelib().expect("System.Private.CoreLib.dll of the installed runtime");
        let md = Metadata::parse(file_metadata(&bytes).expect("a CLI image")).expect("its tables");
        // Row 1 is the global <Module> type, which owns methods before any other type's.
        assert_eq!(md.type_def_name(0x0200_0001).as_deref(), Some("<Module>"));
        let string = find_type(&md, "System.String").expect("System.String");
        let dict = find_type(&md, "System.Collections.Generic.Dictionary`2").expect("Dictionary`2");
        assert_eq!(md.generic_param_names(dict), Some(vec!["TKey".to_string(), "TValue".to_string()]));
        assert_eq!(md.generic_param_names(string), Some(vec![]));
        // Nested: Dictionary`2+Enumerator, whose enclosing type is Dictionary`2.
        let nested = (1..=md.tables[table::TYPE_DEF].rows)
            .map(|r| 0x0200_0000 | r)
            .find(|&t| md.type_def_name(t).as_deref() == Some("Enumerator") && md.enclosing_type(t) == Some(Some(dict)))
            .expect("Dictionary`2+Enumerator");
        assert_eq!(md.generic_param_names(nested).map(|v| v.len()), Some(2));
        assert_eq!(md.enclosing_type(string), Some(None));
        assert_eq!(md.enclosing_type(0x0200_0000 | 0x00ff_ffff), None, "a type past the table");
        // Every method's owner lists it: String's own methods include Concat and get_Length.
        let methods: Vec<(u32, String)> = (1..=md.tables[table::METHOD_DEF].rows)
            .filter_map(|r| md.method(0x0600_0000 | r).map(|(owner, name, _, _)| (owner, name)))
            .collect();
        assert_eq!(methods.len(), md.tables[table::METHOD_DEF].rows as usize, "every method read");
        assert!(methods.iter().any(|(o, n)| *o == string && n == "Concat"));
        assert!(methods.iter().any(|(o, n)| *o == string && n == "get_Length"));
        // A generic method's own parameters: Array.Empty<T>.
        let array = find_type(&md, "System.Array").expect("System.Array");
        let empty = (1..=md.tables[table::METHOD_DEF].rows)
            .map(|r| 0x0600_0000 | r)
            .find(|&t| md.method(t).is_some_and(|(o, n, _, _)| o == array && n == "Empty"))
            .expect("Array.Empty");
        assert_eq!(md.generic_param_names(empty), Some(vec!["T".to_string()]));
        // Its signature: generic (0x10), one type parameter, no parameters, returns !!0[].
        assert_eq!(md.method(empty).map(|m| m.3.to_vec()), Some(vec![0x10, 1, 0, 0x1d, 0x1e, 0]));
        // A TypeRef in another module's scope: CoreLib refers to no assembly, so its refs (if any)
        // resolve to a module or a type; a TypeSpec's blob starts with an element type.
        for r in 1..=md.tables[table::TYPE_SPEC].rows {
            let b = md.type_spec(0x1b00_0000 | r).expect("a TypeSpec blob");
            assert!(!b.is_empty());
        }
    }

    /// Every assembly of the installed shared framework parses, and every row that naming reads is
    /// read back: type and type-reference names, every method with its owner, nesting, type
    /// specifications and generic parameters (some tables there pass 65,535 rows: 4-byte indexes).
    #[test]
    fn every_framework_assembly_reads_whole() {
        let dir = runtime_dir().expect("a shared framework listed by dotnet --list-runtimes");
        let (mut assemblies, mut methods, mut wide) = (0, 0u64, 0);
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("dll") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            // Native libraries of the runtime end in .dll too on some platforms; only CLI images count.
            let Some(raw) = file_metadata(&bytes) else { continue };
            let md = Metadata::parse(raw).unwrap_or_else(|| panic!("{}: tables", path.display()));
            assemblies += 1;
            let rows = |t: usize| md.tables[t].rows;
            wide += (0..=table::LAST).filter(|&t| rows(t) >= 0x1_0000).count();
            for r in 1..=rows(table::TYPE_DEF) {
                let t = 0x0200_0000 | r;
                assert!(md.type_def_name(t).is_some_and(|n| !n.is_empty()), "{} {t:08x}", path.display());
                assert!(md.enclosing_type(t).is_some() && md.generic_param_names(t).is_some(), "{t:08x}");
            }
            for r in 1..=rows(table::TYPE_REF) {
                assert!(md.type_ref(0x0100_0000 | r).is_some(), "{} typeref {r}", path.display());
            }
            for r in 1..=rows(table::TYPE_SPEC) {
                assert!(
                    md.type_spec(0x1b00_0000 | r).is_some_and(|b| !b.is_empty()),
                    "{} typespec {r}",
                    path.display()
                );
            }
            for r in 1..=rows(table::METHOD_DEF) {
                let m = 0x0600_0000 | r;
                let (owner, name, _, sig) = md.method(m).unwrap_or_else(|| panic!("{} method {r}", path.display()));
                assert!(owner >> 24 == 0x02 && owner & 0xff_ffff <= rows(table::TYPE_DEF), "{m:08x}");
                assert!(!name.is_empty() && !sig.is_empty(), "{} {m:08x}", path.display());
                // A generic method's signature says so, and its parameters are found.
                let generic = md.generic_param_names(m).unwrap();
                assert_eq!(sig[0] & 0x10 != 0, !generic.is_empty(), "{} {name} {m:08x}", path.display());
                methods += 1;
            }
        }
        assert!(assemblies >= 100, "{assemblies} assemblies in {dir}");
        assert!(methods >= 100_000 && wide > 0, "{methods} methods, {wide} tables of 65,536 rows or more");
    }

    /// The loader's layout: every section copied to its RVA, as the runtime maps an image.
    fn mapped(file: &[u8]) -> Vec<u8> {
        let pe = u32_at(file, 0x3c).unwrap() as usize;
        let (sections, opt_size) = (u16_at(file, pe + 6).unwrap() as usize, u16_at(file, pe + 20).unwrap() as usize);
        let size_of_image = u32_at(file, pe + 24 + 56).unwrap() as usize;
        let size_of_headers = u32_at(file, pe + 24 + 60).unwrap() as usize;
        let mut image = vec![0u8; size_of_image];
        image[..size_of_headers].copy_from_slice(&file[..size_of_headers]);
        for i in 0..sections {
            let s = pe + 24 + opt_size + i * 40;
            let (va, raw_size, raw) = (
                u32_at(file, s + 12).unwrap() as usize,
                u32_at(file, s + 16).unwrap() as usize,
                u32_at(file, s + 20).unwrap() as usize,
            );
            image[va..va + raw_size].copy_from_slice(&file[raw..raw + raw_size]);
        }
        image
    }

    #[test]
    fn the_loader_s_layout_gives_the_file_s_metadata() {
        let file = corelib().expect("System.Private.CoreLib.dll of the installed runtime");
        let image = mapped(&file);
        let from_image = metadata_of_image(|at, len| image.get(at..at.checked_add(len)?), false).expect("mapped");
        assert_eq!(Some(from_image), file_metadata(&file), "the same bytes at the RVA as at the file offset");
        let md = Metadata::parse(from_image).expect("its tables");
        assert!(find_type(&md, "System.String").is_some());
    }

    #[test]
    fn damaged_metadata_is_refused_not_read() {
        let bytes = corelib().expect("System.Private.CoreLib.dll of the installed runtime");
        let md = file_metadata(&bytes).expect("a CLI image");
        // Every truncation of the root and the tables header parses to None or to tables whose
        // reads stay in bounds.
        for cut in (0..4096.min(md.len())).step_by(7) {
            if let Some(m) = Metadata::parse(&md[..cut]) {
                let _ = m.type_def_name(0x0200_0002);
            }
        }
        let mut bad = md.to_vec();
        bad[0] = b'X';
        assert!(Metadata::parse(&bad).is_none());
        assert!(file_metadata(&bytes[..64]).is_none());
        assert!(file_metadata(b"not a PE image at all, not even 64 bytes of one.....................").is_none());
    }
}
