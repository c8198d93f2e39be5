//! Source lines of sampled managed frames: a native IP → the code version that holds it → the IL
//! offset its IL-to-native map gives (`IlMap` records) → a source line, which the reader's
//! [`NativeSymbols`] provider finds in the module's PDB ([`NativeSymbols::source_line`]). A
//! profile built by a provider that asks for lines ([`NativeSymbols::lines`]) keys managed
//! frames by (function, file, line); one built without keys them by function, as before.
//!
//! An IP maps to the IL-to-native entry whose native range holds it; a return address (a caller's
//! frame) is looked up one byte earlier, at the call instruction. IPs in a prolog, an epilog or
//! code with no mapping, and functions without a recorded map (traces written before `IlMap`
//! records, code the sampler never looked up) ask the provider for the method's first line.

use serde::Serialize;

use crate::fasthash::FxHashMap;
use crate::process::{Function, Module};
use crate::samples::NativeSymbols;

/// A file and a line of it (1-based), as a PDB's sequence point names them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SourceLine {
    pub file: String,
    pub line: u32,
}

/// Where in a method's IL a native IP is, as the runtime's IL-to-native map says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IlAt {
    /// An IL offset (the map's entry whose native range holds the IP).
    Offset(u32),
    /// The method's prolog.
    Prolog,
    /// An epilog.
    Epilog,
    /// Code the map does not cover, an entry without mapping, or no map recorded: the provider
    /// falls back to the method's first line.
    Unmapped,
}

/// The runtime's special IL offsets (`CorDebugIlToNativeMappingTypes`).
pub const NO_MAPPING: u32 = 0xFFFF_FFFF;
pub const PROLOG: u32 = 0xFFFF_FFFE;
pub const EPILOG: u32 = 0xFFFF_FFFD;

/// One code version's map: entries (native start, native end, IL offset) sorted by native start.
#[derive(Clone, Debug, Default)]
struct Version {
    start: u64,
    end: u64,
    entries: Vec<(u32, u32, u32)>,
}

/// The IL-to-native maps of a trace's code versions (`IlMap` records), by FunctionID.
#[derive(Clone, Debug, Default)]
pub struct IlMaps {
    by_function: FxHashMap<u64, Vec<Version>>,
}

impl IlMaps {
    /// Adds one code version's map (`entries` as the record holds them: triples (IL offset,
    /// native start, native end)). A version seen again (same start) replaces the older map.
    pub fn add(&mut self, function: u64, code_start: u64, entries: &[u32]) {
        let mut e: Vec<(u32, u32, u32)> =
            entries.chunks_exact(3).map(|t| (t[1], t[2], t[0])).filter(|&(s, n, _)| s < n).collect();
        e.sort_unstable();
        let end = code_start + e.iter().map(|x| x.1 as u64).max().unwrap_or(0);
        let versions = self.by_function.entry(function).or_default();
        versions.retain(|v| v.start != code_start);
        versions.push(Version { start: code_start, end, entries: e });
    }

    pub fn is_empty(&self) -> bool {
        self.by_function.is_empty()
    }

    /// Where `ip` of `function` is in its IL (`is_return`: a return address, looked up at the call
    /// instruction one byte before it).
    pub fn il_at(&self, function: u64, ip: u64, is_return: bool) -> IlAt {
        let at = if is_return { ip.saturating_sub(1) } else { ip };
        let Some(versions) = self.by_function.get(&function) else { return IlAt::Unmapped };
        // The latest-starting version that holds the IP (code reused after a free starts later).
        let Some(v) = versions.iter().filter(|v| v.start <= at && at < v.end).max_by_key(|v| v.start) else {
            return IlAt::Unmapped;
        };
        let off = (at - v.start) as u32;
        let i = v.entries.partition_point(|e| e.0 <= off);
        // Entries may overlap (a call's entry inside a statement's): the closest start that holds it.
        match v.entries[..i].iter().rev().take(8).find(|e| off < e.1).map(|e| e.2) {
            Some(PROLOG) => IlAt::Prolog,
            Some(EPILOG) => IlAt::Epilog,
            Some(NO_MAPPING) | None => IlAt::Unmapped,
            Some(il) => IlAt::Offset(il),
        }
    }
}

/// What resolving a frame's line needs of the profile: each function's module path and token.
pub(crate) struct LineContext<'a> {
    maps: &'a IlMaps,
    functions: FxHashMap<u64, (&'a str, u32)>,
}

impl<'a> LineContext<'a> {
    pub(crate) fn new(maps: &'a IlMaps, functions: &'a [Function], modules: &'a [Module]) -> Self {
        let paths: FxHashMap<u64, &str> = modules.iter().map(|m| (m.id, m.path.as_str())).collect();
        let functions = functions
            .iter()
            .filter(|f| f.token != 0)
            .filter_map(|f| Some((f.id, (*paths.get(&f.module)?, f.token))))
            .collect();
        LineContext { maps, functions }
    }

    /// The source line of a managed frame, `None` when the function's module or its PDB cannot
    /// tell (the frame then stays per function).
    pub(crate) fn line(
        &self,
        symbols: &mut dyn NativeSymbols,
        function: u64,
        ip: u64,
        is_return: bool,
    ) -> Option<SourceLine> {
        let &(path, token) = self.functions.get(&function)?;
        let at = if ip == 0 { IlAt::Unmapped } else { self.maps.il_at(function, ip, is_return) };
        symbols.source_line(path, token, at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_ips_to_il_offsets() {
        let mut m = IlMaps::default();
        // Prolog [0,4), IL 0 at [4,10), IL 6 at [10,20), a call's IL 8 inside it at [12,17),
        // unmapped [20,22), epilog [22,24).
        m.add(7, 0x1000, &[PROLOG, 0, 4, 0, 4, 10, 6, 10, 20, 8, 12, 17, NO_MAPPING, 20, 22, EPILOG, 22, 24]);
        assert_eq!(m.il_at(7, 0x1000, false), IlAt::Prolog);
        assert_eq!(m.il_at(7, 0x1004, false), IlAt::Offset(0));
        assert_eq!(m.il_at(7, 0x100b, false), IlAt::Offset(6));
        assert_eq!(m.il_at(7, 0x100c, false), IlAt::Offset(8));
        assert_eq!(m.il_at(7, 0x1011, false), IlAt::Offset(6));
        // A return address just after the call is the call's.
        assert_eq!(m.il_at(7, 0x1011, true), IlAt::Offset(8));
        assert_eq!(m.il_at(7, 0x1014, false), IlAt::Unmapped);
        assert_eq!(m.il_at(7, 0x1016, false), IlAt::Epilog);
        assert_eq!(m.il_at(7, 0x1018, false), IlAt::Unmapped);
        assert_eq!(m.il_at(8, 0x1004, false), IlAt::Unmapped);
        // A second version (tier 1) of the same function.
        m.add(7, 0x5000, &[3, 0, 0x10]);
        assert_eq!(m.il_at(7, 0x5008, false), IlAt::Offset(3));
        assert_eq!(m.il_at(7, 0x1004, false), IlAt::Offset(0));
    }
}
