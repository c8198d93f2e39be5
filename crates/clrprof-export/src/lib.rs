//! The profile's stacks in the formats other tools read (folded stacks, flame graphs, speedscope,
//! pprof, Chrome/Perfetto timelines, the Firefox Profiler, OpenTelemetry profiles). Every format is an [`Exporter`] over the
//! same [`ExportInput`]: the query layer's stacks for one weight, merged over the selected threads
//! and per thread.
#![forbid(unsafe_code)]

mod chrome;
mod collapsed;
mod firefox;
mod flamegraph;
pub mod otlp;
pub mod pprof;
mod speedscope;

use std::io::Write;

use clrprof_model::{FrameId, Profile};
use clrprof_query::weighted_stacks::Stacks;
use clrprof_query::Threads;

pub use chrome::Chrome;
pub use collapsed::Collapsed;
pub use firefox::Firefox;
pub use flamegraph::{FlameHtml, FlameSvg};
pub use otlp::Otlp;
pub use pprof::Pprof;
pub use speedscope::Speedscope;

/// Output formats, described in [`FORMATS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    Collapsed,
    Svg,
    Html,
    Speedscope,
    Pprof,
    Chrome,
    Firefox,
    Otlp,
}

/// One output format: its `--format` name and what it holds.
#[derive(Clone, Copy, Debug)]
pub struct FormatInfo {
    pub format: ExportFormat,
    pub name: &'static str,
    pub help: &'static str,
}

/// Every output format, in the order `--help` lists them.
pub const FORMATS: [FormatInfo; 8] = [
    FormatInfo {
        format: ExportFormat::Collapsed,
        name: "collapsed",
        help: "Folded stacks (`a;b;c count`), the input of flame-graph tools",
    },
    FormatInfo { format: ExportFormat::Svg, name: "svg", help: "A self-contained SVG flame graph" },
    FormatInfo {
        format: ExportFormat::Html,
        name: "html",
        help: "A self-contained HTML flame graph (click to zoom, search)",
    },
    FormatInfo {
        format: ExportFormat::Speedscope,
        name: "speedscope",
        help: "speedscope JSON: all threads merged, then one profile per thread",
    },
    FormatInfo {
        format: ExportFormat::Pprof,
        name: "pprof",
        help: "pprof (gzip-compressed profile.proto) with every sample type the trace holds, for `go tool pprof`",
    },
    FormatInfo {
        format: ExportFormat::Chrome,
        name: "chrome",
        help: "Chrome Trace Event Format JSON (Perfetto, chrome://tracing): calls of --flow traces, else sampled stacks as slices, GCs and exceptions",
    },
    FormatInfo {
        format: ExportFormat::Firefox,
        name: "firefox",
        help: "The Firefox Profiler's format (profiler.firefox.com): threads, samples with stacks, GC and exception markers",
    },
    FormatInfo {
        format: ExportFormat::Otlp,
        name: "otlp",
        help: "OpenTelemetry profiles (OTLP v1development ExportProfilesServiceRequest, binary protobuf): one profile per sample type",
    },
];

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("cannot write JSON: {0}")]
    Json(serde_json::Error),
}

impl From<serde_json::Error> for ExportError {
    /// A failed write stays an I/O error (a closed pipe is then recognised as one).
    fn from(e: serde_json::Error) -> Self {
        if e.is_io() {
            ExportError::Io(e.into())
        } else {
            ExportError::Json(e)
        }
    }
}

pub type Result<T, E = ExportError> = std::result::Result<T, E>;

/// What every exporter reads.
pub struct ExportInput<'a> {
    pub profile: &'a Profile,
    /// The stacks of the chosen weight over the selected threads.
    pub stacks: Stacks,
    /// The selected threads (formats with several weights read the profile through them).
    pub threads: Threads,
}

impl ExportInput<'_> {
    /// The frame's name; a frame at a source line (a profile built with lines) is
    /// `Name (File.cs:12)`, so that the lines of a function stay apart in name-keyed formats.
    pub fn frame_name(&self, f: FrameId) -> std::borrow::Cow<'_, str> {
        let fr = &self.profile.costs.stacks.frames[f.0 as usize];
        match &fr.line {
            None => std::borrow::Cow::Borrowed(&fr.name),
            Some(l) => format!("{} ({}:{})", fr.name, clrprof_query::select::file_name(&l.file), l.line).into(),
        }
    }

    pub fn title(&self) -> String {
        let pr = &self.profile.process;
        let cmd = if pr.command_line.is_empty() {
            format!("pid {}", pr.pid)
        } else {
            clrprof_query::select::short_command(&pr.command_line)
        };
        format!("{cmd} — {}", self.stacks.weight_name)
    }
}

/// Writes one format.
pub trait Exporter {
    /// File extension of the format (without dot).
    fn extension(&self) -> &'static str;
    /// Which of `ExportInput::stacks` the format reads (formats that walk the profile themselves
    /// need none: a frame vector per stack is the most memory an export takes).
    fn stacks_needed(&self) -> clrprof_query::weighted_stacks::Needed {
        clrprof_query::weighted_stacks::Needed::All
    }
    fn write(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()>;
}

/// The exporter of a format.
pub fn exporter(f: ExportFormat) -> Box<dyn Exporter> {
    match f {
        ExportFormat::Collapsed => Box::new(Collapsed),
        ExportFormat::Svg => Box::new(FlameSvg),
        ExportFormat::Html => Box::new(FlameHtml),
        ExportFormat::Speedscope => Box::new(Speedscope),
        ExportFormat::Pprof => Box::new(Pprof),
        ExportFormat::Chrome => Box::new(Chrome),
        ExportFormat::Firefox => Box::new(Firefox),
        ExportFormat::Otlp => Box::new(Otlp),
    }
}

#[cfg(test)]
mod lines_tests;
