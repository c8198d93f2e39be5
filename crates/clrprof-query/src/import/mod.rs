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
    if head.starts_with(&magic[..magic.len().min(head.len())]) && head.len() >= 4 {
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
}

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
        Builder { p, frames: HashMap::new(), modules: HashMap::new() }
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
        let (class_name, short) = match name.rfind('.') {
            Some(i) if frame.kind == FrameKind::Managed && i > 0 => (&name[..i], &name[i + 1..]),
            _ => ("", name),
        };
        self.p.functions.push(Function {
            id,
            name: short.to_string(),
            class_name: class_name.to_string(),
            module: module_id,
            ..Default::default()
        });
        self.frames.insert((module.to_string(), name.to_string()), f);
        f
    }

    /// The stack of `frames` (root first); `None` for an empty path.
    pub(crate) fn stack(&mut self, frames: &[FrameId]) -> Option<StackId> {
        self.p.costs.stacks.intern_stack(frames)
    }

    pub(crate) fn add(&mut self, stack: StackId, cost: &Cost) {
        if !cost.is_zero() {
            self.p.costs.add(IMPORTED_TID, stack, cost);
        }
    }

    /// The profile, with sampling totals and a note on where it came from.
    pub(crate) fn finish(mut self, note: String, sample_period_ns: u64) -> Profile {
        let total = crate::select::totals(&self.p);
        let s = &mut self.p.sampling;
        s.cpu_samples = total.cpu_samples;
        s.cpu_ns = total.cpu_ns;
        if total.cpu_samples > 0 && sample_period_ns > 0 {
            s.cpu_rate_hz = (1_000_000_000 / sample_period_ns).min(u32::MAX as u64) as u32;
        }
        if total.calls > 0 || total.time_ns > 0 {
            self.p.instrumentation = Some(Default::default());
        }
        self.p.messages.push(note);
        self.p
    }
}

/// A sampled cost: `n` samples of `period` ns each.
pub(crate) fn samples(n: u64, period: u64) -> Cost {
    Cost { cpu_samples: n, cpu_ns: n.saturating_mul(period), ..Default::default() }
}
