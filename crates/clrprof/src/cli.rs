//! Command-line parsing (clap stays here) and conversion to the engine's plain option structs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::record::RecordOptions;
use crate::report::{Format, ReportOptions, View};

#[derive(Parser, Debug)]
#[command(
    name = "clrprof",
    version,
    about = "A profiler for .NET applications on Linux",
    after_help = "Examples:\n  clrprof record -- dotnet app.dll arg1\n  clrprof record -o run.clrprof -- ./MyApp\n  clrprof report run.clrprof\n  clrprof report run.clrprof --format json -o run.json"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a command under the profiler and save its trace.
    #[command(
        after_help = "Examples:\n  clrprof record -- dotnet app.dll\n  clrprof record -o app.clrprof --log agent.log -- dotnet app.dll --port 8080"
    )]
    Record(RecordArgs),
    /// Print a report from a trace.
    #[command(
        after_help = "Examples:\n  clrprof report app.clrprof\n  clrprof report app.clrprof --view tables --format json"
    )]
    Report(ReportArgs),
    /// Write the profile's stacks for other tools: folded stacks, flame graphs, speedscope.
    #[command(
        after_help = "Examples:\n  clrprof export app.clrprof -f svg\n  clrprof export app.clrprof -f collapsed -o - | inferno-flamegraph > cpu.svg\n  clrprof export app.clrprof -f speedscope --weight wall -o app.speedscope.json\n  clrprof export app.clrprof -f html --thread worker-1"
    )]
    Export(ExportArgs),
}

#[derive(Args, Debug)]
struct ExportArgs {
    /// The trace file
    #[arg(value_name = "FILE")]
    trace: PathBuf,
    /// Output format
    #[arg(short, long, value_enum)]
    format: ExportFormatArg,
    /// Output file, `-` for standard output [default: FILE's name with the weight and format, e.g. app.cpu.svg]
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
    /// Sampled cost: CPU time (on-CPU only) or wall time (running or blocked)
    #[arg(short, long, value_enum, default_value_t = WeightArg::Cpu)]
    weight: WeightArg,
    /// Only this thread: OS thread id, runtime ThreadID (0x…) or thread name
    #[arg(long, value_name = "ID|NAME")]
    thread: Option<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ExportFormatArg {
    /// Folded stacks (`a;b;c count`), the input of flame-graph tools
    Collapsed,
    /// A self-contained SVG flame graph
    Svg,
    /// A self-contained HTML flame graph (click to zoom, search)
    Html,
    /// speedscope JSON: all threads merged, then one profile per thread
    Speedscope,
}

#[derive(Args, Debug)]
struct RecordArgs {
    /// Trace file to write [default: <program>-<pid>.clrprof in the current directory]
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// The agent library [default: libclrprof_agent.so next to clrprof, or $CLRPROF_AGENT_PATH]
    #[arg(long, value_name = "PATH")]
    agent: Option<PathBuf>,
    /// Write the agent's diagnostics to this file
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Do not record class loads (smaller traces for large apps)
    #[arg(long)]
    no_classes: bool,
    /// Sampling rate per thread, in samples per second (CPU time and wall time). CPU-time timers
    /// fire at most once per kernel tick (250/s at CONFIG_HZ=250); reports show the rate delivered
    #[arg(short = 'r', long, value_name = "HZ", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    rate: u32,
    /// Do not sample (no CPU or wall-time profile)
    #[arg(long)]
    no_sample: bool,
    /// The command to profile, after `--`
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// The trace file
    #[arg(value_name = "FILE")]
    trace: PathBuf,
    /// What to show
    #[arg(long, value_enum, default_value_t = ViewArg::Tables)]
    view: ViewArg,
    /// Output format
    #[arg(short, long, value_enum, default_value_t = FormatArg::Text)]
    format: FormatArg,
    /// Write the report to FILE instead of standard output
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Sampled cost to count: CPU time (on-CPU only) or wall time (running or blocked)
    #[arg(short, long, value_enum)]
    weight: Option<WeightArg>,
    /// Only this thread: OS thread id, runtime ThreadID (0x…) or thread name
    #[arg(long, value_name = "ID|NAME")]
    thread: Option<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum WeightArg {
    /// Sampled on-CPU time
    Cpu,
    /// Sampled wall time (running or blocked)
    Wall,
}

impl WeightArg {
    fn metric(self) -> clrprof_model::Metric {
        match self {
            WeightArg::Cpu => clrprof_model::Metric::Cpu,
            WeightArg::Wall => clrprof_model::Metric::Wall,
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ViewArg {
    /// The General Code Profiler's tables: threads, app domains, assemblies, modules, classes, functions
    Tables,
    /// The Monte Carlo tables: sampled hits per module (assemblies and native libraries) and per routine
    Modules,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FormatArg {
    Text,
    Json,
}

pub fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Record(a) => {
            let opts = RecordOptions {
                output: a.output,
                agent: a.agent,
                log: a.log,
                classes: !a.no_classes,
                command: a.command,
                sample_rate: a.rate,
                sampling: !a.no_sample,
            };
            crate::record::record(&opts)
        }
        Command::Report(a) => {
            let opts = ReportOptions {
                trace: a.trace,
                view: match a.view {
                    ViewArg::Tables => View::Tables,
                    ViewArg::Modules => View::Modules,
                },
                format: match a.format {
                    FormatArg::Text => Format::Text,
                    FormatArg::Json => Format::Json,
                },
                output: a.output,
                weight: a.weight.map(WeightArg::metric),
                thread: a.thread,
            };
            crate::report::report(&opts)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Export(a) => {
            use crate::export::ExportFormat as F;
            let opts = crate::export::ExportOptions {
                trace: a.trace,
                format: match a.format {
                    ExportFormatArg::Collapsed => F::Collapsed,
                    ExportFormatArg::Svg => F::Svg,
                    ExportFormatArg::Html => F::Html,
                    ExportFormatArg::Speedscope => F::Speedscope,
                },
                output: a.output,
                weight: Some(a.weight.metric()),
                thread: a.thread,
            };
            crate::export::export(&opts)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A fix for errors users commonly hit.
pub fn hint_for(e: &anyhow::Error) -> Option<&'static str> {
    for cause in e.chain() {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::NotFound {
                let text = format!("{e:#}");
                if text.contains("dotnet") {
                    return Some("install the .NET SDK or runtime (8 or newer) and make sure `dotnet` is on PATH");
                }
            }
        }
        if let Some(crate::record::AgentMissing(_)) = cause.downcast_ref() {
            return Some("build the agent with `cargo build --release -p clrprof-agent`, or pass --agent /path/to/libclrprof_agent.so");
        }
    }
    None
}
