//! Formats ECMA-335 method signature blobs (II.23.2) as readable C#-like text, e.g.
//! `double (int, string, System.Collections.Generic.List<int>&)`. Pure logic; names of type
//! tokens and generic parameters come from a [`TypeNames`] implementation.

/// Resolves what a signature refers to.
pub(crate) trait TypeNames {
    /// Name of a TypeDef/TypeRef token (`0x02..`/`0x01..`), or of a TypeSpec (`0x1b..`).
    fn token_name(&self, token: u32) -> String;
    /// Name of the declaring type's generic parameter `index` (`!index`).
    fn type_param(&self, index: u32) -> String;
    /// Name of the method's generic parameter `index` (`!!index`).
    fn method_param(&self, index: u32) -> String;
}

/// C# keyword for a well-known `System` type name, else the name itself.
pub(crate) fn alias(full_name: &str) -> &str {
    match full_name {
        "System.Void" => "void",
        "System.Boolean" => "bool",
        "System.Char" => "char",
        "System.SByte" => "sbyte",
        "System.Byte" => "byte",
        "System.Int16" => "short",
        "System.UInt16" => "ushort",
        "System.Int32" => "int",
        "System.UInt32" => "uint",
        "System.Int64" => "long",
        "System.UInt64" => "ulong",
        "System.Single" => "float",
        "System.Double" => "double",
        "System.String" => "string",
        "System.Object" => "object",
        "System.IntPtr" => "nint",
        "System.UIntPtr" => "nuint",
        "System.Decimal" => "decimal",
        other => other,
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.pos)?;
        self.pos += 1;
        Some(v)
    }

    /// Compressed unsigned integer (II.23.2).
    fn uint(&mut self) -> Option<u32> {
        let b0 = self.byte()? as u32;
        if b0 & 0x80 == 0 {
            Some(b0)
        } else if b0 & 0xC0 == 0x80 {
            Some(((b0 & 0x3F) << 8) | self.byte()? as u32)
        } else if b0 & 0xE0 == 0xC0 {
            let b1 = self.byte()? as u32;
            let b2 = self.byte()? as u32;
            let b3 = self.byte()? as u32;
            Some(((b0 & 0x1F) << 24) | (b1 << 16) | (b2 << 8) | b3)
        } else {
            None
        }
    }

    /// TypeDefOrRefOrSpec coded index → token.
    fn type_token(&mut self) -> Option<u32> {
        let v = self.uint()?;
        let table = match v & 3 {
            0 => 0x0200_0000,
            1 => 0x0100_0000,
            2 => 0x1b00_0000,
            _ => return None,
        };
        Some(table | (v >> 2))
    }
}

const MAX_DEPTH: u32 = 64;

fn ty(c: &mut Cursor<'_>, names: &dyn TypeNames, depth: u32) -> Option<String> {
    if depth > MAX_DEPTH {
        return None;
    }
    let et = c.byte()?;
    Some(match et {
        0x01 => "void".into(),
        0x02 => "bool".into(),
        0x03 => "char".into(),
        0x04 => "sbyte".into(),
        0x05 => "byte".into(),
        0x06 => "short".into(),
        0x07 => "ushort".into(),
        0x08 => "int".into(),
        0x09 => "uint".into(),
        0x0a => "long".into(),
        0x0b => "ulong".into(),
        0x0c => "float".into(),
        0x0d => "double".into(),
        0x0e => "string".into(),
        0x0f => format!("{}*", ty(c, names, depth + 1)?),
        0x10 => format!("{}&", ty(c, names, depth + 1)?),
        0x11 | 0x12 => strip_arity(alias(&names.token_name(c.type_token()?))),
        0x13 => names.type_param(c.uint()?),
        0x1e => names.method_param(c.uint()?),
        0x14 => {
            // ARRAY: type rank numSizes size* numLoBounds loBound*
            let elem = ty(c, names, depth + 1)?;
            let rank = c.uint()?;
            let nsizes = c.uint()?;
            for _ in 0..nsizes {
                c.uint()?;
            }
            let nlo = c.uint()?;
            for _ in 0..nlo {
                c.uint()?;
            }
            format!("{elem}[{}]", ",".repeat(rank.saturating_sub(1).min(31) as usize))
        }
        0x15 => {
            // GENERICINST (CLASS|VALUETYPE) type argCount arg*
            let _kind = c.byte()?;
            let base = names.token_name(c.type_token()?);
            let n = c.uint()?;
            if n > 64 {
                return None;
            }
            let mut args = Vec::with_capacity(n as usize);
            for _ in 0..n {
                args.push(ty(c, names, depth + 1)?);
            }
            apply_type_args(&base, &args)
        }
        0x16 => "System.TypedReference".into(),
        0x18 => "nint".into(),
        0x19 => "nuint".into(),
        0x1b => {
            let inner = method_sig(c, names, depth + 1)?;
            format!("fnptr<{inner}>")
        }
        0x1c => "object".into(),
        0x1d => format!("{}[]", ty(c, names, depth + 1)?),
        0x1f | 0x20 => {
            // custom modifier: skip it, format what it modifies
            c.type_token()?;
            ty(c, names, depth + 1)?
        }
        0x41 => "...".into(),
        0x45 => ty(c, names, depth + 1)?,
        _ => return None,
    })
}

fn method_sig(c: &mut Cursor<'_>, names: &dyn TypeNames, depth: u32) -> Option<String> {
    let conv = c.byte()?;
    if conv & 0x10 != 0 {
        c.uint()?; // generic parameter count
    }
    let count = c.uint()?;
    if count > 1024 {
        return None;
    }
    let ret = ty(c, names, depth)?;
    let mut params = Vec::with_capacity(count as usize);
    for _ in 0..count {
        params.push(ty(c, names, depth)?);
    }
    Some(format!("{ret} ({})", params.join(", ")))
}

/// Formats a MethodDefSig/MethodRefSig blob; `None` when the blob is malformed.
pub(crate) fn format_method_sig(blob: &[u8], names: &dyn TypeNames) -> Option<String> {
    method_sig(&mut Cursor { b: blob, pos: 0 }, names, 0)
}

/// Formats a TypeSpec blob (a single type); `None` when malformed.
pub(crate) fn format_type_spec(blob: &[u8], names: &dyn TypeNames) -> Option<String> {
    ty(&mut Cursor { b: blob, pos: 0 }, names, 0)
}

/// Places generic arguments on the nesting segments that declare them:
/// ``("Ns.Pair`2+Node", [int, string])`` → `Ns.Pair<int, string>+Node`. Arguments left over (when
/// arities are unknown) go on the last segment.
pub(crate) fn apply_type_args(name_with_arity: &str, args: &[String]) -> String {
    let mut rest = args;
    let segs: Vec<&str> = name_with_arity.split('+').collect();
    let mut out = Vec::with_capacity(segs.len());
    for (i, seg) in segs.iter().enumerate() {
        let (base, arity) = match seg.rfind('`') {
            Some(p) => match seg[p + 1..].parse::<usize>() {
                Ok(n) => (&seg[..p], n),
                Err(_) => (*seg, 0),
            },
            None => (*seg, 0),
        };
        let take = if i + 1 == segs.len() { rest.len() } else { arity.min(rest.len()) };
        if take == 0 {
            out.push(base.to_string());
        } else {
            out.push(format!("{base}<{}>", rest[..take].join(", ")));
            rest = &rest[take..];
        }
    }
    out.join("+")
}

/// Removes the generic arity suffix: ``List`1`` → `List` (in every nesting segment).
pub(crate) fn strip_arity(name: &str) -> String {
    name.split('+')
        .map(|seg| match seg.rfind('`') {
            Some(i) if seg[i + 1..].bytes().all(|b| b.is_ascii_digit()) && i + 1 < seg.len() => &seg[..i],
            _ => seg,
        })
        .collect::<Vec<_>>()
        .join("+")
}

#[cfg(test)]
mod tests {
    use super::*;

    struct N;
    impl TypeNames for N {
        fn token_name(&self, token: u32) -> String {
            match token {
                0x0200_0002 => "Demo.Point".into(),
                0x0100_0005 => "System.Collections.Generic.List`1".into(),
                0x0100_0006 => "System.Int32".into(),
                t => format!("tok{t:x}"),
            }
        }
        fn type_param(&self, i: u32) -> String {
            ["T", "U"].get(i as usize).map(|s| s.to_string()).unwrap_or_else(|| format!("!{i}"))
        }
        fn method_param(&self, i: u32) -> String {
            format!("M{i}")
        }
    }

    #[test]
    fn formats_primitives_classes_generics_and_arrays() {
        // instance double (int, string, Demo.Point (valuetype, typedef row 2), List<int>&, int[], object[,])
        let blob = [
            0x20,
            6,
            0x0d,
            0x08,
            0x0e,
            0x11,
            (2 << 2),
            0x10,
            0x15,
            0x12,
            (5 << 2) | 1,
            1,
            0x08,
            0x1d,
            0x08,
            0x14,
            0x1c,
            2,
            0,
            0,
        ];
        assert_eq!(
            format_method_sig(&blob, &N).unwrap(),
            "double (int, string, Demo.Point, System.Collections.Generic.List<int>&, int[], object[,])"
        );
        // generic method: void <M0> (T, !!0, System.Int32 via typeref)
        let blob = [0x30, 1, 3, 0x01, 0x13, 0, 0x1e, 0, 0x11, (6 << 2) | 1];
        assert_eq!(format_method_sig(&blob, &N).unwrap(), "void (T, M0, int)");
    }

    #[test]
    fn malformed_blobs_give_none() {
        assert_eq!(format_method_sig(&[], &N), None);
        assert_eq!(format_method_sig(&[0x20, 2, 0x08], &N), None);
        assert_eq!(format_method_sig(&[0x20, 1, 0x08, 0xff], &N), None);
        let deep: Vec<u8> = [0x20, 0, 0x08].iter().copied().chain(std::iter::repeat_n(0x1d, 500)).collect();
        let _ = format_method_sig(&deep, &N);
        let mut x = 7u32;
        for _ in 0..5000 {
            let blob: Vec<u8> = (0..12)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (x >> 16) as u8
                })
                .collect();
            let _ = format_method_sig(&blob, &N);
        }
    }

    #[test]
    fn applies_type_args_per_segment() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(apply_type_args("Ns.Pair`2+Node", &a(&["int", "string"])), "Ns.Pair<int, string>+Node");
        assert_eq!(apply_type_args("Ns.Outer`1+Inner`1", &a(&["int", "bool"])), "Ns.Outer<int>+Inner<bool>");
        assert_eq!(apply_type_args("Ns.List`1", &a(&["int"])), "Ns.List<int>");
        assert_eq!(apply_type_args("Ns.Plain", &[]), "Ns.Plain");
        assert_eq!(apply_type_args("Ns.Odd", &a(&["int"])), "Ns.Odd<int>");
    }

    #[test]
    fn strips_arity() {
        assert_eq!(strip_arity("System.Collections.Generic.List`1"), "System.Collections.Generic.List");
        assert_eq!(strip_arity("Ns.Outer`1+Inner`2"), "Ns.Outer+Inner");
        assert_eq!(strip_arity("Ns.Plain"), "Ns.Plain");
        assert_eq!(strip_arity("Weird`"), "Weird`");
    }
}
