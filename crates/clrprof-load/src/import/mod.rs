//! Importers: profiles written by other tools, read into the same canonical [`Profile`] as a
//! clrprof trace, so every report, export, diff and view works on them unchanged.
//!
//! - folded/collapsed stacks (`a;b;c 123`): our `export -f collapsed`, inferno, py-spy,
//!   perf + stackcollapse, with optional `module!` prefixes ([`collapsed`]);
//! - the CSV summaries of Visual Studio's `vsperfreport /summary:all`: CallTree and CallerCallee
//!   reports, sampling and instrumentation columns, VS2010 and VS2012 layouts, `.` or `,` decimal
//!   separators ([`vsperf`]).
//!
//! [`sniff`] tells the formats apart by content. Readers never panic, never loop without
//! consuming input, and allocate in proportion to their input only.

pub mod collapsed;
pub mod vsperf;

use std::collections::HashMap;

use clrprof_model::{Cost, FrameId, FrameKey, FrameKind, Function, Module, Profile, StackId, Thread};

/// What a file holds, judged by its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A clrprof trace (the `CLRPROF` magic).
    Trace,
    /// Folded stacks.
    Collapsed,
    /// A vsperfreport CSV summary.
    VsPerfCsv,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Trace => "clrprof trace",
            Format::Collapsed => "collapsed stacks",
            Format::VsPerfCsv => "vsperfreport CSV",
        }
    }
}

/// How imported numbers become costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImportOptions {
    /// CPU time one sample stands for: folded stacks and vsperfreport sampling reports give
    /// sample counts without a time ([`DEFAULT_SAMPLE_PERIOD_NS`]: 10 ms, 100 Hz).
    pub sample_period_ns: u64,
}

/// 10 ms: clrprof's default sampling rate (100 Hz), and py-spy's.
pub const DEFAULT_SAMPLE_PERIOD_NS: u64 = 10_000_000;

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions { sample_period_ns: DEFAULT_SAMPLE_PERIOD_NS }
    }
}

/// Why an imported file cannot be read: one line for the user.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ImportError(pub String);

/// Text of a file: UTF-16 (with a byte-order mark, as `vsperfreport /U` writes) or UTF-8 (a BOM
/// dropped); invalid sequences become U+FFFD.
pub fn text(bytes: &[u8]) -> String {
    if let Some(rest) = bytes.strip_prefix(&[0xff, 0xfe]) {
        let units: Vec<u16> = rest.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
        return String::from_utf16_lossy(&units);
    }
    if let Some(rest) = bytes.strip_prefix(&[0xfe, 0xff]) {
        let units: Vec<u16> = rest.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
        return String::from_utf16_lossy(&units);
    }
    let bytes = bytes.strip_prefix(&[0xef, 0xbb, 0xbf]).unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

/// The first non-empty line of `head`, shortened for a message.
fn first_line(head: &str) -> String {
    let line = head.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let mut s: String = line.chars().take(40).collect();
    if line.chars().count() > 40 {
        s.push('…');
    }
    s.escape_debug().to_string()
}

/// Tells the format from the start of a file (a few kB are enough). An unknown format is an
/// error naming what was seen.
pub fn sniff(head: &[u8]) -> Result<Format, ImportError> {
    if head.is_empty() {
        return Err(ImportError("the file is empty".into()));
    }
    let magic = &clrprof_trace::MAGIC;
    // A trace still being written may hold only the first bytes of its magic yet.
    if head.starts_with(&magic[..magic.len().min(head.len())]) {
        return Ok(Format::Trace);
    }
    let t = text(head);
    if vsperf::looks_like(&t) {
        return Ok(Format::VsPerfCsv);
    }
    if collapsed::looks_like(&t) {
        return Ok(Format::Collapsed);
    }
    let seen = if head.iter().take(512).any(|&b| b == 0 || (b < 0x20 && !b"\t\r\n".contains(&b))) {
        let hex: Vec<String> = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
        format!("binary data starting with bytes {}", hex.join(" "))
    } else {
        format!("first line starts with \"{}\"", first_line(&t))
    };
    Err(ImportError(format!("not a clrprof trace, collapsed stacks or vsperfreport CSV: {seen}")))
}

/// Reads an imported file (`format` not [`Format::Trace`]).
pub fn import(bytes: &[u8], format: Format, opts: &ImportOptions) -> Result<Profile, ImportError> {
    match format {
        Format::Collapsed => collapsed::read(bytes, opts),
        Format::VsPerfCsv => vsperf::read(bytes, opts),
        Format::Trace => Err(ImportError("a clrprof trace is read by the trace decoder, not imported".into())),
    }
}

/// The thread every imported cost is put on (the formats merge threads).
pub const IMPORTED_TID: u32 = 1;

/// Builds a profile from named frames and stacks: frames are interned by (module, name) and get
/// synthetic function ids, so the GCP tables list them too.
pub(crate) struct Builder {
    p: Profile,
    frames: HashMap<(String, String), FrameId>,
    modules: HashMap<String, u64>,
    /// Sums of every column so far; a file whose sums pass [`MAX_TOTAL`] is refused, so no
    /// view's sum can overflow.
    total: Cost,
    too_large: bool,
}

/// The largest sum of one cost column an imported file may have.
pub const MAX_TOTAL: u64 = u64::MAX / 4;

/// A frame's kind from its name and module: labels (`[GC]`, `UNKNOWN`) are synthetic, frames of a
/// `.so` (or a module without a managed extension) native, the rest managed.
fn kind_of(module: &str, name: &str) -> FrameKind {
    if name.starts_with('[') || name == clrprof_model::samples::UNKNOWN {
        FrameKind::Synthetic
    } else if module.is_empty() || is_managed_module(module) {
        FrameKind::Managed
    } else {
        FrameKind::Native
    }
}

pub(crate) fn is_managed_module(module: &str) -> bool {
    let m = module.to_ascii_lowercase();
    m.ends_with(".dll") || m.ends_with(".exe")
}

impl Builder {
    pub(crate) fn new(what: &str) -> Builder {
        let mut p = Profile::default();
        p.process.command_line = what.to_string();
        // Nothing was cut short: the file was read whole.
        p.process.clean_shutdown = true;
        p.threads.push(Thread {
            id: 0,
            os_tid: Some(IMPORTED_TID),
            name: "imported".into(),
            names: vec![(0, "imported".into())],
            ..Default::default()
        });
        Builder { p, frames: HashMap::new(), modules: HashMap::new(), total: Cost::default(), too_large: false }
    }

    /// The frame of a function; `name` as it is displayed (`Ns.Type.Method`, `libc.so.6!write`).
    pub(crate) fn frame(&mut self, module: &str, name: &str) -> FrameId {
        if let Some(&f) = self.frames.get(&(module.to_string(), name.to_string())) {
            return f;
        }
        let id = self.p.functions.len() as u64 + 1;
        let st = &mut self.p.costs.stacks;
        let f = st.intern_frame(FrameKey::Function(id));
        let frame = &mut st.frames[f.0 as usize];
        frame.kind = kind_of(module, name);
        frame.name = name.to_string();
        frame.module = module.to_string();
        let module_id = if module.is_empty() {
            0
        } else {
            let next = self.modules.len() as u64 + 1;
            let m = *self.modules.entry(module.to_string()).or_insert(next);
            if m == next {
                self.p.modules.push(Module { id: m, path: module.to_string(), ..Default::default() });
            }
            m
        };
        let (mut class_name, short, signature) =
            if frame.kind == FrameKind::Synthetic { ("", name, "") } else { split_name(name) };
        // Folded stacks name managed frames without parameters (`Demo.Pricing.LineTotal`): their
        // class is before the last dot, unless the name is a file (a process row) or a token.
        if class_name.is_empty() && signature.is_empty() && frame.kind == FrameKind::Managed {
            let file_or_token = is_managed_module(name) || name.starts_with("0x");
            if let Some(i) = separators(name).last().map(|&(i, _)| i).filter(|_| !file_or_token) {
                class_name = &name[..i];
            }
        }
        self.p.functions.push(Function {
            id,
            name: short.to_string(),
            class_name: class_name.to_string(),
            signature: signature.to_string(),
            module: module_id,
            // Neither JIT-compiled nor precompiled as far as we know: "other".
            kind: u8::MAX,
            ..Default::default()
        });
        self.frames.insert((module.to_string(), name.to_string()), f);
        f
    }

    /// The stack of `frames` (root first); `None` for an empty path.
    pub(crate) fn stack(&mut self, frames: &[FrameId]) -> Option<StackId> {
        self.p.costs.stacks.intern_stack(frames)
    }

    /// The stack `parent` → `frame`.
    pub(crate) fn call(&mut self, parent: StackId, frame: FrameId) -> StackId {
        self.p.costs.stacks.intern_call(Some(parent), frame)
    }

    pub(crate) fn add(&mut self, stack: StackId, cost: &Cost) {
        if cost.is_zero() || self.too_large {
            return;
        }
        let t = &mut self.total;
        for (sum, v) in [
            (&mut t.calls, cost.calls),
            (&mut t.time_ns, cost.time_ns),
            (&mut t.cpu_samples, cost.cpu_samples),
            (&mut t.cpu_ns, cost.cpu_ns),
        ] {
            match sum.checked_add(v).filter(|&s| s <= MAX_TOTAL) {
                Some(s) => *sum = s,
                None => self.too_large = true,
            }
        }
        if !self.too_large {
            self.p.costs.add(IMPORTED_TID, stack, cost);
        }
    }

    /// The profile, with sampling totals and a note on where it came from.
    pub(crate) fn finish(mut self, note: String, sample_period_ns: u64) -> Result<Profile, ImportError> {
        if self.too_large {
            return Err(ImportError(format!(
                "{}: the values add up to more than {MAX_TOTAL} (samples, calls or ns): not a real profile",
                self.p.process.command_line.trim_matches(|c| c == '(' || c == ')')
            )));
        }
        let mut total = Cost::default();
        for c in self.p.costs.threads.iter().flat_map(|t| t.costs.values()) {
            total.add(&c);
        }
        let s = &mut self.p.sampling;
        s.cpu_samples = total.cpu_samples;
        s.cpu_ns = total.cpu_ns;
        if total.cpu_samples > 0 && sample_period_ns > 0 {
            s.cpu_rate_hz = (1_000_000_000 / sample_period_ns).min(u32::MAX as u64) as u32;
        }
        // `instrumentation` stays `None`: it describes clrprof's hooks (inlining, tiering, ...),
        // which an imported file says nothing about; its calls and times are in `costs`.
        self.p.messages.push(note);
        Ok(self.p)
    }
}

/// Byte offsets of `.` or `::` separators at angle-bracket depth 0 in `head`, each with the
/// separator's length.
fn separators(head: &str) -> Vec<(usize, usize)> {
    let b = head.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'<' | b'[' => depth += 1,
            b'>' | b']' => depth = depth.saturating_sub(1),
            b':' if depth == 0 && b.get(i + 1) == Some(&b':') => {
                out.push((i, 2));
                i += 2;
                continue;
            }
            // `Type..ctor`: the separator is the first dot, the method `.ctor`.
            b'.' if depth == 0 && i > 0 && b[i - 1] != b'.' => out.push((i, 1)),
            _ => {}
        }
        i += 1;
    }
    out
}

/// A profiler's function name split into (class, name without the parameter list, parameter
/// list): `Ns.Type.Method(class Ns.Ray&,bool&)` → (`Ns.Type`, `Ns.Type.Method`,
/// `(class Ns.Ray&,bool&)`), as a trace names its functions (`name` is `Ns.Type.Method`).
/// The parameter list is the first `(` outside generic brackets; commas, parentheses and generics
/// inside it are kept whole. The class is cut at the last `.` or `::` outside generic brackets,
/// and only when the name has a parameter list or a `::` (`Render.exe`, a process row, and
/// `0x0A00005F`, an unresolved token, have no class). An explicit interface implementation, which
/// Visual Studio writes `Ns.Type.Ns.IFace.Method`, keeps `Ns.Type` as its class when the
/// namespace's first part comes back after three or more parts and the rest has three or more.
pub(crate) fn split_name(full: &str) -> (&str, &str, &str) {
    let mut depth = 0usize;
    let mut open = None;
    for (i, c) in full.char_indices() {
        match c {
            '<' | '[' => depth += 1,
            '>' | ']' => depth = depth.saturating_sub(1),
            '(' if depth == 0 && i > 0 => {
                open = Some(i);
                break;
            }
            _ => {}
        }
    }
    let (head, signature) = match open {
        Some(i) => (&full[..i], &full[i..]),
        None => (full, ""),
    };
    let seps = separators(head);
    let has_scope = seps.iter().any(|&(_, l)| l == 2);
    if seps.is_empty() || (signature.is_empty() && !has_scope) {
        return ("", head, signature);
    }
    // Explicit interface implementation: `A.B.Type.A.B.IFace.Method`.
    let first = &head[..seps[0].0];
    for (k, &(i, l)) in seps.iter().enumerate() {
        if k >= 2 && l == 1 && head[i + 1..].starts_with(first) {
            let rest = &head[i + 1..];
            let after = seps.iter().filter(|&&(j, _)| j > i).count();
            if rest.as_bytes().get(first.len()) == Some(&b'.') && after >= 2 {
                return (&head[..i], head, signature);
            }
        }
    }
    let (i, _) = *seps.last().expect("not empty");
    (&head[..i], head, signature)
}

/// A sampled cost: `n` samples of `period` ns each.
pub(crate) fn samples(n: u64, period: u64) -> Cost {
    Cost { cpu_samples: n, cpu_ns: n.saturating_mul(period), ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_by_content() {
        assert_eq!(sniff(b"CLRPROF\0\x01\0\0\0"), Ok(Format::Trace));
        // A trace file caught while its first bytes are being written.
        assert_eq!(sniff(b"CL"), Ok(Format::Trace));
        assert_eq!(sniff(b"\xef\xbb\xbfLevel,Function Name,Exclusive Samples\r\n"), Ok(Format::VsPerfCsv));
        assert_eq!(sniff(b"\"Root\",\"_wmain\",14,0,\"100,00\",\"0,00\"\n"), Ok(Format::VsPerfCsv));
        assert_eq!(sniff(b"main;work 12\nmain 3\n"), Ok(Format::Collapsed));
        let long = format!("{}\n", "x".repeat(100));
        assert_eq!(
            sniff(long.as_bytes()).unwrap_err().0,
            format!(
                "not a clrprof trace, collapsed stacks or vsperfreport CSV: first line starts with \"{}…\"",
                "x".repeat(40)
            )
        );
        assert_eq!(sniff(b"").unwrap_err().0, "the file is empty");
    }

    #[test]
    fn imported_functions_are_named_like_a_traces() {
        let mut b = Builder::new("test");
        for (module, name) in [
            ("Demo.dll", "Demo.Pricing.LineTotal"),
            ("App.exe", "App.Worker.Work(int32)"),
            ("", "Render.exe"),
            ("Render.exe", "0x0A00005F"),
            ("libc.so.6", "libc.so.6!write"),
            ("", "[GC]"),
        ] {
            b.frame(module, name);
        }
        let f: Vec<(&str, &str, &str)> =
            b.p.functions.iter().map(|f| (f.name.as_str(), f.class_name.as_str(), f.signature.as_str())).collect();
        assert_eq!(
            f,
            [
                ("Demo.Pricing.LineTotal", "Demo.Pricing", ""),
                ("App.Worker.Work", "App.Worker", "(int32)"),
                ("Render.exe", "", ""),
                ("0x0A00005F", "", ""),
                ("libc.so.6!write", "", ""),
                ("[GC]", "", ""),
            ]
        );
    }

    #[test]
    fn names_split_outside_their_parameter_lists() {
        let s = |n| split_name(n);
        assert_eq!(
            s("Raytracer.Primitives.IPrimitive.Intersect(class Raytracer.Ray&,bool&)"),
            (
                "Raytracer.Primitives.IPrimitive",
                "Raytracer.Primitives.IPrimitive.Intersect",
                "(class Raytracer.Ray&,bool&)"
            )
        );
        assert_eq!(
            s("Raytracer.Primitives.Sphere.Raytracer.Primitives.IPrimitive.Intersect(class Raytracer.Ray&,bool&)"),
            (
                "Raytracer.Primitives.Sphere",
                "Raytracer.Primitives.Sphere.Raytracer.Primitives.IPrimitive.Intersect",
                "(class Raytracer.Ray&,bool&)"
            )
        );
        // A namespace that repeats its first part is no interface implementation.
        assert_eq!(
            s("Raytracer.Raytracer.Tracer.<TraceImage>b__5_0(int32)"),
            ("Raytracer.Raytracer.Tracer", "Raytracer.Raytracer.Tracer.<TraceImage>b__5_0", "(int32)")
        );
        assert_eq!(
            s("OpenTK.Vector3..ctor(float32,float32)"),
            ("OpenTK.Vector3", "OpenTK.Vector3..ctor", "(float32,float32)")
        );
        assert_eq!(
            s("System.Collections.Generic.List`1.get_Item(int32)"),
            ("System.Collections.Generic.List`1", "System.Collections.Generic.List`1.get_Item", "(int32)")
        );
        assert_eq!(
            s("System.Action`1<int32>..ctor(object,native int)"),
            ("System.Action`1<int32>", "System.Action`1<int32>..ctor", "(object,native int)")
        );
        assert_eq!(s("Raytracer.exe"), ("", "Raytracer.exe", ""));
        assert_eq!(s("0x0A00005F"), ("", "0x0A00005F", ""));
        assert_eq!(
            s("boost::trim_end_iter_select<std::iterator<char>,boost::is_classifiedF>"),
            ("boost", "boost::trim_end_iter_select<std::iterator<char>,boost::is_classifiedF>", "")
        );
        assert_eq!(s("testing::UnitTest::Run"), ("testing::UnitTest", "testing::UnitTest::Run", ""));
    }
}
