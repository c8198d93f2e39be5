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

    /// Whether a recorded code version of `function` holds `ip`.
    pub fn holds(&self, function: u64, ip: u64) -> bool {
        self.by_function.get(&function).is_some_and(|v| v.iter().any(|v| v.start <= ip && ip < v.end))
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

    /// The source line of an instrumented call site: `site` is a return address into `caller`'s
    /// code. `None` unless a recorded code version of `caller` holds the call instruction (a site
    /// in code of a function that has no hooks, or of a version with no map, has no line rather
    /// than the method's first line).
    pub(crate) fn call_site_line(&self, symbols: &mut dyn NativeSymbols, caller: u64, site: u64) -> Option<SourceLine> {
        if site == 0 || !self.maps.holds(caller, site - 1) {
            return None;
        }
        self.line(symbols, caller, site, true)
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

    /// A provider whose "PDB" maps IL offset o of method 0x06000001 of /app/App.dll to line 100 + o.
    struct Lines;
    impl NativeSymbols for Lines {
        fn symbol(&mut self, _: &str, _: &[u8], _: u64) -> Option<(String, u64)> {
            None
        }
        fn lines(&self) -> bool {
            true
        }
        fn source_line(&mut self, path: &str, token: u32, at: IlAt) -> Option<SourceLine> {
            if path != "/app/App.dll" || token != 0x0600_0001 {
                return None;
            }
            let line = match at {
                IlAt::Offset(o) => 100 + o,
                IlAt::Prolog | IlAt::Unmapped => 99,
                IlAt::Epilog => 199,
            };
            Some(SourceLine { file: "/src/App.cs".into(), line })
        }
    }

    #[test]
    fn profiles_with_lines_key_frames_by_line() {
        use clrprof_trace::*;
        let recs: Vec<Record> = vec![
            ProcessStart { pid: 1, ..Default::default() }.into(),
            SamplingStart { ts: 0, cpu_rate_hz: 100, wall_rate_hz: 100, max_frames: 128, max_walk_frames: 256 }.into(),
            ModuleLoaded { ts: 0, id: 5, path: "/app/App.dll".into(), ..Default::default() }.into(),
            ModuleLoaded { ts: 0, id: 6, path: "/app/NoPdb.dll".into(), ..Default::default() }.into(),
            FunctionCompiled {
                ts: 1,
                id: 10,
                module: 5,
                token: 0x0600_0001,
                name: "App.Main".into(),
                code_start: 0x1000,
                code_size: 0x100,
                ..Default::default()
            }
            .into(),
            FunctionCompiled {
                ts: 1,
                id: 11,
                module: 6,
                token: 0x0600_0001,
                name: "Lib.Work".into(),
                code_start: 0x2000,
                code_size: 0x100,
                ..Default::default()
            }
            .into(),
            // IL 1 at [0x10, 0x20) (a call ends at 0x20), IL 7 at [0x20, 0x30), epilog after.
            IlMap {
                id: 10,
                code_start: 0x1000,
                entries: vec![PROLOG, 0, 0x10, 1, 0x10, 0x20, 7, 0x20, 0x30, EPILOG, 0x30, 0x40],
            }
            .into(),
            // Leaf in Main at IL 1; leaf at IL 7; Lib.Work called from Main (return address 0x1020:
            // the call at IL 1); a leaf in Main's epilog.
            SampleStack { id: 1, ips: vec![0x1012], functions: vec![], activity: 0 }.into(),
            SampleStack { id: 2, ips: vec![0x1025], functions: vec![], activity: 0 }.into(),
            SampleStack { id: 3, ips: vec![0x2010, 0x1020], functions: vec![], activity: 0 }.into(),
            SampleStack { id: 4, ips: vec![0x1031], functions: vec![], activity: 0 }.into(),
            CpuSample { ts: 5, os_tid: 7, stack: 1, count: 3, cpu_ns: 30, activity: 0 }.into(),
            CpuSample { ts: 5, os_tid: 7, stack: 2, count: 1, cpu_ns: 10, activity: 0 }.into(),
            CpuSample { ts: 5, os_tid: 7, stack: 3, count: 2, cpu_ns: 20, activity: 0 }.into(),
            CpuSample { ts: 5, os_tid: 7, stack: 4, count: 1, cpu_ns: 5, activity: 0 }.into(),
        ];
        let mut b = crate::ProfileBuilder::new();
        for r in &recs {
            b.add(r);
        }
        let p = b.profile(crate::TimeRange::default(), &mut Lines);
        let merged = p.costs.merged(None);
        let mut self_ns: Vec<(String, Option<u32>, u64)> = Vec::new();
        for (i, c) in merged.iter().enumerate() {
            let frames = p.costs.stacks.frames_of(crate::StackId(i as u32));
            let Some(leaf) = frames.last() else { continue };
            if c.cpu_ns == 0 {
                continue;
            }
            let fr = &p.costs.stacks.frames[leaf.0 as usize];
            let caller = frames.len().checked_sub(2).map(|j| &p.costs.stacks.frames[frames[j].0 as usize]);
            let line = fr.line.as_ref().map(|l| l.line);
            if let Some(c2) = caller {
                assert_eq!(c2.name, "App.Main");
                assert_eq!(c2.line.as_ref().map(|l| l.line), Some(101), "a caller at its call, not after it");
            }
            self_ns.push((fr.name.clone(), line, c.cpu_ns));
        }
        self_ns.sort();
        assert_eq!(
            self_ns,
            vec![
                ("App.Main".into(), Some(101), 30),
                ("App.Main".into(), Some(107), 10),
                ("App.Main".into(), Some(199), 5),
                ("Lib.Work".into(), None, 20),
            ]
        );
        // Without lines: one frame per function, as before.
        let p = b.profile(crate::TimeRange::default(), &mut crate::NoSymbols);
        assert!(p.costs.stacks.frames.iter().all(|f| f.line.is_none()));
        assert_eq!(p.costs.stacks.frames.iter().filter(|f| f.name == "App.Main").count(), 1);
    }
}
