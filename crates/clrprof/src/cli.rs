//! Command-line parsing (clap stays here) and conversion to the engine's plain option structs.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::builder::PossibleValue;
use clap::{Args, Parser, Subcommand, ValueEnum};

use clrprof_export::ExportFormat;
use clrprof_model::{parse_time, Metric, TimeRange, METRICS};
use clrprof_report::{Format, ReportOptions, View};

use crate::record::RecordOptions;

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
        after_help = "Examples:\n  clrprof record -- dotnet app.dll\n  clrprof record -o app.clrprof --log agent.log -- dotnet app.dll --port 8080\n  clrprof record --count -- dotnet app.dll      (exact call counts, inlining on)"
    )]
    Record(RecordArgs),
    /// Profile a running .NET process (8 or newer) without restarting it, for a while.
    #[command(
        after_help = "Examples:\n  clrprof attach 4242 --duration 10\n  clrprof attach 4242 -o web.clrprof      (Ctrl-C to stop)\n  clrprof attach 4242 -d 30 --rate 500 --no-exceptions\n  clrprof attach 4242 -d 30 --count-top 5      (exact call counts of the 5 hottest methods)\n\nThe process keeps running; the agent detaches when the session ends, and the\nprocess can be attached again (with --count or --count-top the runtime keeps the\nagent loaded, idle, and a later attach is refused). Enter/leave instrumentation (--instrument) needs\n`clrprof record`: the runtime only allows it at start-up."
    )]
    Attach(AttachArgs),
    /// Print a report from a trace.
    #[command(
        after_help = "Examples:\n  clrprof report app.clrprof\n  clrprof report app.clrprof --view calltree --depth 6 --min-percent 1\n  clrprof report app.clrprof --view callers --function Demo.Primes.Count\n  clrprof report app.clrprof --view hotspots --format csv -o hotspots.csv\n  clrprof report app.clrprof --view tables --format json\n  clrprof report app.clrprof --view exceptions\n  clrprof report app.clrprof --view gc"
    )]
    Report(ReportArgs),
    /// Write the profile's stacks for other tools: folded stacks, flame graphs, speedscope.
    #[command(
        after_help = "Examples:\n  clrprof export app.clrprof -f svg\n  clrprof export app.clrprof -f collapsed -o - | inferno-flamegraph > cpu.svg\n  clrprof export app.clrprof -f speedscope --weight wall -o app.speedscope.json\n  clrprof export app.clrprof -f html --thread worker-1"
    )]
    Export(ExportArgs),
    /// Browse a trace interactively in a web browser (local, token-protected).
    #[command(
        after_help = "Examples:\n  clrprof view app.clrprof\n  clrprof view new.clrprof --baseline old.clrprof\n  clrprof view app.clrprof --port 8080 --no-browser\n  clrprof view --store runs.db      (the runs list; a running run is followed as it grows)\n  clrprof view run:latest --store runs.db"
    )]
    View(ViewArgs),
    /// Take a heap snapshot of a running .NET process (8 or newer): every live object with its
    /// type, size and references, and the roots, after one full blocking GC; the process runs on.
    #[command(
        after_help = "Examples:\n  clrprof heap 4242\n  clrprof heap 4242 -o before.clrprof\n  clrprof report before.clrprof --view types\n  clrprof diff before.clrprof after.clrprof\n\nThe runtime pauses the process for one full blocking garbage collection while it\nwalks the heap (about 0.1-0.2 s per million objects on a small machine)."
    )]
    Heap(HeapArgs),
    /// Compare two profiles (traces or imported files): per function, self and inclusive values
    /// of the baseline and the new one, sorted by the largest change.
    #[command(
        after_help = "Examples:\n  clrprof diff old.clrprof new.clrprof\n  clrprof diff old.clrprof new.clrprof --normalize --top 20\n  clrprof diff old.clrprof new.clrprof --weight calls --format json\n  clrprof diff before.folded after.folded --format csv -o delta.csv\n  clrprof diff base.clrprof head.clrprof --fail-if 'total:cpu>+5%,function:Shop.*:cpu>+10%' --format markdown -o summary.md\n  clrprof diff before.clrprof after.clrprof --fail-if 'type:Shop.*:count>+0'\n\nWith --fail-if the exit code is 3 when a rule breaches (2 for errors), with one line per breach on\nstandard error. Changes of sampled weights (cpu, wall) breach only when significant: |z| >= 3 in a\nPoisson test of the sample counts (higher for a rule over many functions), with at least\n--min-samples samples. See docs/ci.md."
    )]
    Diff(DiffArgs),
    /// Receive the traces of agents started with `record --server` (or CLRPROF_SERVER) and keep them as runs.
    #[command(
        after_help = "Examples:\n  clrprof collect\n  clrprof collect --listen 0.0.0.0:7878 --token \"$TOKEN\" --store /var/lib/clrprof/runs.db\n  clrprof collect --store postgresql://clrprof@db:5432/clrprof --max-run-bytes 2G\n  clrprof record --server 127.0.0.1:7878 -- dotnet app.dll\n  CLRPROF_SERVER=10.0.0.5:7878 CLRPROF_TOKEN=… (with the CORECLR_* variables) dotnet app.dll"
    )]
    Collect(CollectArgs),
    /// List the runs of a store (what `clrprof collect` received).
    #[command(
        after_help = "Examples:\n  clrprof runs\n  clrprof runs --store postgresql://clrprof@db:5432/clrprof --format json\n  clrprof report run:latest\n  clrprof export run:3 -f svg"
    )]
    Runs(RunsArgs),
}

#[derive(Args, Debug)]
struct ViewArgs {
    /// The trace file, or a run of a store: run:ID or run:latest; without it, --store's runs are listed
    #[arg(value_name = "FILE")]
    trace: Option<PathBuf>,
    /// The run store (run:ID, or the runs list): an SQLite file or a postgresql:// URL [default: clrprof-runs.db]
    #[arg(long, value_name = "PATH|URL")]
    store: Option<String>,
    /// A trace to compare with (the diff view)
    #[arg(long, value_name = "OLD")]
    baseline: Option<PathBuf>,
    /// Port to listen on [default: a free one]
    #[arg(long, value_name = "N", default_value_t = 0)]
    port: u16,
    /// Address to listen on [default: 127.0.0.1]; any other needs --token
    #[arg(long, value_name = "ADDR")]
    bind: Option<std::net::IpAddr>,
    /// Session token [default: a random one]
    #[arg(long, value_name = "T")]
    token: Option<String>,
    /// Do not open a browser
    #[arg(long)]
    no_browser: bool,
    /// Leave native frames as `module!<unknown>`
    #[arg(long)]
    no_native_symbols: bool,
    /// Also look for separate debug files in DIR (repeatable)
    #[arg(long, value_name = "DIR")]
    symbols: Vec<PathBuf>,
    /// Show threads' stacks as sampled in a trace recorded with --async (by default its stacks are
    /// logical async stacks)
    #[arg(long)]
    physical_stacks: bool,
}

#[derive(Args, Debug)]
struct DiffArgs {
    /// The baseline: a trace, folded stacks or a vsperfreport CSV
    #[arg(value_name = "OLD")]
    old: PathBuf,
    /// The new profile (heap snapshots: may be left out when OLD holds two)
    #[arg(value_name = "NEW")]
    new: Option<PathBuf>,
    /// Cost to compare [default: the new profile's natural weight: time for instrumented traces, else cpu]
    #[arg(short, long, value_enum)]
    weight: Option<DiffWeightArg>,
    /// Scale the baseline so that its total equals the new total (compare shares, not amounts)
    #[arg(long)]
    normalize: bool,
    /// Show the first N functions
    #[arg(long, value_name = "N")]
    top: Option<usize>,
    /// Output format (markdown: the regression gate's summary for a CI job to post)
    #[arg(short, long, value_enum, default_value_t = DiffFormatArg::Text)]
    format: DiffFormatArg,
    /// Write to FILE instead of standard output
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Only this thread, in both profiles: OS thread id, runtime ThreadID (0x…) or thread name
    #[arg(long, value_name = "ID|NAME")]
    thread: Option<String>,
    /// Exit with code 3 when RULE breaches (repeatable, or comma-separated): total:WEIGHT>+5%,
    /// function:PATTERN:WEIGHT>+10%, inclusive:PATTERN:WEIGHT>+10%, calls:PATTERN>+0,
    /// type:PATTERN:count|bytes>+0 (heap snapshots); < for decreases; amounts as +0, +20ms
    #[arg(long = "fail-if", value_name = "RULE")]
    fail_if: Vec<String>,
    /// A sampled change needs this many samples on one side to be significant (rows below are marked)
    #[arg(long, value_name = "N", default_value_t = clrprof_query::noise::MIN_SAMPLES)]
    min_samples: u64,
    /// Heap snapshots: which two to compare, I in OLD and J in NEW (or both in OLD when NEW is not
    /// given) [default: the last of each; with one file its last two]
    #[arg(long, value_name = "I,J", value_parser = crate::heap_views::parse_pair)]
    snapshots: Option<(usize, usize)>,
    #[command(flatten)]
    read: ReadArgs,
}

/// `diff --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DiffFormatArg {
    Text,
    Json,
    Csv,
    Markdown,
}

impl DiffFormatArg {
    fn format(self) -> crate::diff::DiffFormat {
        use crate::diff::DiffFormat;
        match self {
            DiffFormatArg::Text => DiffFormat::Report(Format::Text),
            DiffFormatArg::Json => DiffFormat::Report(Format::Json),
            DiffFormatArg::Csv => DiffFormat::Report(Format::Csv),
            DiffFormatArg::Markdown => DiffFormat::Markdown,
        }
    }
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("push").args(["pyroscope", "otlp"]).multiple(true)))]
struct CollectArgs {
    /// Address to listen on; an address other than loopback requires --token
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7878")]
    listen: String,
    /// Where runs are kept: an SQLite file, or a postgresql:// URL shared by several collectors
    /// [default: clrprof-runs.db in the current directory]
    #[arg(long, value_name = "PATH|URL")]
    store: Option<String>,
    /// The token agents must present (CLRPROF_TOKEN on their side) [default: $CLRPROF_TOKEN]
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// Largest trace kept per run (bytes, or with K/M/G); a longer stream is cut off at the limit
    #[arg(long, value_name = "N", default_value = "1G", value_parser = crate::collect::parse_size)]
    max_run_bytes: u64,
    /// Collection triggers sent to every agent that streams here and has none of its own
    /// (docs/triggers.md); the agents evaluate them
    #[command(flatten)]
    trigger: TriggerArgs,
    /// Also push every run's profiles (CPU, wall, allocations, lock contention, exceptions) to the
    /// Grafana Pyroscope at this URL (http:// or https://) every --interval
    #[arg(long, value_name = "URL")]
    pyroscope: Option<String>,
    /// Pyroscope credentials: USER:PASSWORD (Basic, e.g. Grafana Cloud's user id and API token) or a
    /// bearer token [default: $CLRPROF_PYROSCOPE_TOKEN]
    #[arg(long, value_name = "TOKEN", requires = "pyroscope")]
    pyroscope_token: Option<String>,
    /// Also push every run's profiles as OpenTelemetry profiles (OTLP/HTTP, binary protobuf, the
    /// pinned v1development version) every --interval: to URL/v1development/profiles, or to URL
    /// itself when its path ends in /profiles
    #[arg(long, value_name = "URL")]
    otlp: Option<String>,
    /// A header of every OTLP request, e.g. `Authorization: Bearer T` (repeatable)
    #[arg(long, value_name = "NAME:VALUE", requires = "otlp", value_parser = header_arg)]
    otlp_header: Vec<(String, String)>,
    /// Length of each profile pushed to Pyroscope or OTLP (1s..1h)
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = interval_arg, requires = "push")]
    interval: u64,
    /// Trust only the CA certificates of this PEM file for https:// pushes (a private CA)
    /// [default: the system's CA certificates]
    #[arg(long, value_name = "FILE", requires = "push")]
    tls_ca: Option<PathBuf>,
    /// Serve TLS: the listener's certificate chain (PEM); agents then stream to tls://ADDR:PORT
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, RSA or EC)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Mutual TLS: accept only agents presenting a certificate signed by this CA (PEM)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
}

/// `NAME:VALUE` of `--otlp-header`.
fn header_arg(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((n, v)) if !n.trim().is_empty() && !n.contains(char::is_whitespace) => {
            Ok((n.trim().to_string(), v.trim().to_string()))
        }
        _ => Err(format!("{s:?}: expected NAME:VALUE (e.g. \"Authorization: Bearer T\")")),
    }
}

#[derive(Args, Debug)]
struct RunsArgs {
    /// The run store: an SQLite file or a postgresql:// URL [default: clrprof-runs.db]
    #[arg(long, value_name = "PATH|URL")]
    store: Option<String>,
    /// Output format
    #[arg(short, long, value_enum, default_value_t = RunsFormatArg::Text)]
    format: RunsFormatArg,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum RunsFormatArg {
    Text,
    Json,
}

#[derive(Args, Debug)]
struct ExportArgs {
    /// The trace file, or a run of a store: run:ID or run:latest (see `clrprof runs`, --store)
    #[arg(value_name = "FILE")]
    trace: PathBuf,
    /// Output format
    #[arg(short, long, value_enum)]
    format: ExportFormatArg,
    /// Output file, `-` for standard output [default: FILE's name with the weight and format, e.g. app.cpu.svg]
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
    /// Cost to draw: sampled CPU time (on-CPU only) or wall time (running or blocked), or another
    /// cost the trace holds [default: cpu for sampled traces, else time]
    #[arg(short, long, value_enum)]
    weight: Option<WeightArg>,
    /// Only this thread: OS thread id, runtime ThreadID (0x…) or thread name
    #[arg(long, value_name = "ID|NAME")]
    thread: Option<String>,
    /// Frames at their source lines (from portable PDBs): pprof locations with line numbers
    /// (`go tool pprof -lines`), speedscope/Chrome file and line, Firefox frame lines; folded
    /// stacks and flame graphs name frames `Name (File.cs:12)`
    #[arg(long)]
    by_line: bool,
    #[command(flatten)]
    read: ReadArgs,
}

/// How a trace is read: the time window, and where native names come from.
#[derive(Args, Debug)]
struct ReadArgs {
    /// Only what happened from this time on (since the process started: 1.5s, 200ms, 350us)
    #[arg(long, value_name = "TIME", value_parser = time_arg)]
    from: Option<u64>,
    /// Only what happened before this time (since the process started: 2s, 1500ms)
    #[arg(long, value_name = "TIME", value_parser = time_arg)]
    to: Option<u64>,
    /// Leave native frames as `module!<unknown>` instead of naming them from the ELF files on this
    /// machine (reproducible output wherever the report runs)
    #[arg(long)]
    no_native_symbols: bool,
    /// Also look for separate debug files (`DIR/.build-id/xx/yyyy.debug`) in DIR (repeatable;
    /// /usr/lib/debug is always searched)
    #[arg(long, value_name = "DIR")]
    symbols: Vec<PathBuf>,
    /// Imported folded stacks and vsperfreport sampling reports: the CPU time one sample stands for
    #[arg(long, value_name = "TIME", value_parser = time_arg, default_value = "10ms")]
    sample_period: u64,
    /// The run store `run:ID` is read from: an SQLite file or a postgresql:// URL [default: clrprof-runs.db]
    #[arg(long, value_name = "PATH|URL")]
    store: Option<String>,
    /// Show threads' stacks as sampled in a trace recorded with --async (by default its stacks are
    /// logical: continuations under the code that awaited them, awaiting time as `[await]` frames)
    #[arg(long)]
    physical_stacks: bool,
    /// Keep idle threads' wall time in a trace recorded with --async: thread-pool, timer and
    /// socket threads parked waiting for work, under an `[idle]` root (left out by default)
    #[arg(long)]
    show_idle: bool,
}

impl ReadArgs {
    fn options(self) -> Result<crate::load::ReadOptions> {
        let range = TimeRange::between(self.from, self.to);
        if range.is_empty() {
            anyhow::bail!("--from must be before --to");
        }
        Ok(crate::load::ReadOptions {
            range,
            native_symbols: !self.no_native_symbols,
            debug_dirs: self.symbols,
            lines: false,
            call_site_lines: false,
            import: clrprof_load::import::ImportOptions { sample_period_ns: self.sample_period.max(1) },
            store: self.store,
            physical_stacks: self.physical_stacks,
            show_idle: self.show_idle,
            merge_threads: false,
        })
    }
}

#[derive(Args, Debug)]
struct RecordArgs {
    /// Trace file to write [default: <program>-<pid>.clrprof in the current directory]
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    agent: AgentArgs,
    #[command(flatten)]
    recording: RecordingArgs,
    /// Exact call counts and times from enter/leave hooks (every JIT-compiled method; ReadyToRun
    /// images are ignored, so framework code is JIT-compiled too)
    #[arg(long)]
    instrument: bool,
    /// With --instrument: count calls only, no timing (cheapest)
    #[arg(long, requires = "instrument")]
    counts_only: bool,
    /// Exact call counts per method from IL probes written into each method's IL at its first
    /// compilation: inlining stays on (inlined calls are counted) and ReadyToRun code is kept outside
    /// the scope. No times, no callers. Scope: --include/--exclude, else the app's own assemblies
    /// (--count-scope all: every module). Counts are per method definition (generic
    /// instantiations summed). docs/count.md
    #[arg(long, conflicts_with = "instrument")]
    count: bool,
    /// With --count and no --include: `app` (assemblies outside the shared framework, default) or
    /// `all` (every module, the framework's ReadyToRun code of counted methods recompiled)
    #[arg(long, value_name = "SCOPE", requires = "count", value_parser = ["app", "all"])]
    count_scope: Option<String>,
    /// With --instrument: also keep every enter/leave event in order (for short runs or filtered functions)
    #[arg(long, requires = "instrument")]
    flow: bool,
    /// With --instrument: leave JIT inlining on (faster; inlined calls are not seen)
    #[arg(long, requires = "instrument")]
    keep_inlining: bool,
    /// With --instrument: the most memory the call trees may take in the process, MiB (default
    /// 1024; 0 = no cap). Calls past it are counted, with their time, under their caller's
    /// `[call tree capped]` node
    #[arg(long, value_name = "MIB", requires = "instrument")]
    calltree_max_mb: Option<u64>,
    /// With --instrument or --count: hook (count) only functions matching PATTERN (namespace, type, method or assembly; `*` wildcards; repeatable)
    #[arg(long, value_name = "PATTERN")]
    include: Vec<String>,
    /// With --instrument or --count: never hook (count) functions matching PATTERN (repeatable)
    #[arg(long, value_name = "PATTERN")]
    exclude: Vec<String>,
    #[command(flatten)]
    server: ServerArgs,
    /// Only profile the .NET processes matching one of these globs (`;`-separated, `*` and `?`),
    /// tried on the executable's name, the main assembly's file name (`app.dll` or `app` for
    /// `dotnet app.dll`) and the command line; the others run unprofiled (`CLRPROF_PROCESS`)
    #[arg(long, value_name = "GLOB[;GLOB…]")]
    process: Option<String>,
    /// Take a heap snapshot at these times after start (`500ms`, `2s`, `1m`; comma-separated):
    /// every live object, its references and the roots, after one full blocking GC
    #[arg(long, value_name = "TIME[,TIME…]", value_parser = snapshot_times_arg)]
    heap_snapshot_at: Option<SnapshotTimes>,
    /// The command to profile, after `--`
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Args, Debug)]
struct HeapArgs {
    /// The process id of a running .NET 8+ process
    #[arg(value_name = "PID")]
    pid: u32,
    /// Trace file to write [default: <name>-<pid>-<unix time>.clrprof in the current directory]
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    agent: AgentArgs,
    /// How long the runtime may take to load the agent, in seconds
    #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = seconds_arg)]
    timeout: Duration,
    /// Memory the agent may use in the process for the snapshot, in MiB (about 6 bytes per object;
    /// beyond it the snapshot is cut and marked incomplete) [default: 4096]
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(16..=65536))]
    max_memory: Option<u64>,
}

#[derive(Args, Debug)]
struct AttachArgs {
    /// The process id of a running .NET 8+ process
    #[arg(value_name = "PID")]
    pid: u32,
    /// Stop after this many seconds [default: at Ctrl-C]
    #[arg(short, long, value_name = "SECONDS", value_parser = seconds_arg)]
    duration: Option<Duration>,
    /// Trace file to write [default: <name>-<pid>-<unix time>.clrprof in the current directory]
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    agent: AgentArgs,
    /// How long the runtime may take to load the agent, in seconds
    #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = seconds_arg)]
    timeout: Duration,
    #[command(flatten)]
    recording: RecordingArgs,
    /// Refused: enter/leave hooks can only be set at start-up (use `clrprof record --instrument`)
    #[arg(long, hide = true)]
    instrument: bool,
    /// Count every call of the methods matching PATTERN exactly, from the moment the session
    /// starts to its end (namespace, type, method or assembly; `*` wildcards; repeatable): their
    /// code is recompiled with an IL probe (ReJIT), they are not inlined while counted, and their
    /// original IL is put back at the end. .NET 8 and 10+ (refused on .NET 9). docs/count.md
    #[arg(long, value_name = "PATTERN")]
    count: Vec<String>,
    /// Count every call of the N methods with the most CPU samples (self time) in the first
    /// --count-after of the session, exactly, from then to its end: chosen by the agent from its
    /// own samples, among the methods that can be counted (1-1000; not with --count PATTERN or
    /// --no-sample). The same ReJIT, runtimes and revert as --count. docs/count.md
    #[arg(long, value_name = "N", value_parser = count_top_arg, conflicts_with_all = ["count", "no_sample"])]
    count_top: Option<u32>,
    /// With --count-top: how long the session samples before choosing (`500ms`, `5s`, `1m`)
    /// [default: 3s]
    #[arg(long, value_name = "TIME", requires = "count_top", value_parser = count_after_arg)]
    count_after: Option<Duration>,
    #[command(flatten)]
    server: ServerArgs,
}

/// `--count-top N`: a number of methods, 1 to 1000.
fn count_top_arg(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=1000).contains(&n) => Ok(n),
        Ok(n) => Err(format!("expected a number of methods from 1 to 1000, got {n}")),
        Err(_) => Err(format!("expected a number of methods from 1 to 1000, got {s:?}")),
    }
}

/// `--count-after TIME`: `500ms`, `5s`, `1m` or plain seconds, at least 100 ms.
fn count_after_arg(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t.strip_suffix('s').unwrap_or(t), 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v * scale >= 0.1 && v * scale <= 86_400.0 => Ok(Duration::from_secs_f64(v * scale)),
        _ => Err(format!("expected a time from 100ms to 24h (`500ms`, `5s`, `1m`), got {s:?}")),
    }
}

/// What the agent records, the same for `record` and `attach`.
#[derive(Args, Debug)]
struct RecordingArgs {
    /// Sampling rate per thread, in samples per second (CPU time and wall time). CPU-time timers
    /// fire at most once per kernel tick (250/s at CONFIG_HZ=250); reports show the rate delivered
    #[arg(short = 'r', long, value_name = "HZ", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    rate: u32,
    /// Do not sample (no CPU or wall-time profile)
    #[arg(long)]
    no_sample: bool,
    /// Name the runtime's type loads in samples (`[type load] T`), from the runtime's TypeLoad
    /// events. They cost type-heavy start-ups about 6% (the C# compiler); without them that time
    /// is named after the method being prepared or compiled (`[ReadyToRun] M`, `[JIT] M`) or
    /// `[runtime]`, under the same managed caller
    #[arg(long, conflicts_with = "no_sample")]
    type_loads: bool,
    /// Do not record class loads (smaller traces for large apps)
    #[arg(long)]
    no_classes: bool,
    /// Do not record exceptions
    #[arg(long, conflicts_with = "exact_exceptions")]
    no_exceptions: bool,
    /// Observe every exception however many are thrown. By default an exception storm (more than
    /// 5,000 in a burst, then over 1,000/s) is sampled to keep the app fast, and counts become estimates
    #[arg(long)]
    exact_exceptions: bool,
    /// Do not record garbage collections and GC suspensions
    #[arg(long)]
    no_gc: bool,
    /// Allocations: sampled (the runtime's allocation sampling, cheap), exact (every object; slows
    /// the app; `record` only: the runtime allows it at start-up only) or off
    #[arg(long, value_enum, default_value_t = AllocArg::Sampled)]
    alloc: AllocArg,
    /// Do not record Monitor lock contention
    #[arg(long)]
    no_locks: bool,
    /// Keep the full runtime event log (loads, JIT, threads, suspensions, GC, exception passes) for `--view events`
    #[arg(long)]
    events: bool,
    /// Record the task library's events (awaits, continuations, Task.Run) so that stacks are
    /// logical async stacks with awaiting time (`[await] …` frames). Costs the app per await:
    /// see docs/async.md
    #[arg(long = "async")]
    asynchrony: bool,
    #[command(flatten)]
    trigger: TriggerArgs,
}

/// Collection triggers, for `record`, `attach` and `collect`.
#[derive(Args, Debug)]
struct TriggerArgs {
    /// Collection trigger (repeatable; docs/triggers.md): `exception:TYPE` (a throw of that
    /// type), `gc-pause>50ms`, `cpu>80%:5s` (the process's CPU above 80% of one core over 5 s),
    /// `request-p95>200ms` (with --async: the 95th percentile of the requests that ended in the
    /// last 10 s). A fire keeps a high-rate sampling window or takes a heap snapshot
    #[arg(long = "trigger", value_name = "RULE", value_parser = trigger_arg)]
    triggers: Vec<clrprof_trace::trigger::Rule>,
    /// With --trigger: what a fire does: `window` (sample CPU at --trigger-rate for
    /// --trigger-window) or `heap` (take a heap snapshot) [default: window]
    #[arg(long, value_name = "ACTION", requires = "triggers", value_parser = trigger_action_arg)]
    trigger_action: Option<clrprof_trace::trigger::Action>,
    /// With --trigger: how long a high-rate window lasts (`500ms`, `10s`, `1m`) [default: 10s]
    #[arg(long, value_name = "TIME", requires = "triggers", value_parser = trigger_window_arg)]
    trigger_window: Option<u64>,
    /// With --trigger: CPU samples per second per thread inside a window (the kernel delivers at
    /// most one per tick, 250/s at CONFIG_HZ=250) [default: 1000]
    #[arg(long, value_name = "HZ", requires = "triggers", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    trigger_rate: Option<u32>,
    /// With --trigger: the shortest time between two fires of one rule [default: 60s]
    #[arg(long, value_name = "TIME", requires = "triggers", value_parser = trigger_cooldown_arg)]
    trigger_cooldown: Option<u64>,
    /// With --trigger: the most fires of one rule in the run [default: 5]
    #[arg(long, value_name = "N", requires = "triggers", value_parser = clap::value_parser!(u32).range(1..))]
    trigger_max: Option<u32>,
}

impl TriggerArgs {
    fn options(&self) -> crate::agent_env::TriggerOptions {
        crate::agent_env::TriggerOptions {
            rules: self.triggers.clone(),
            action: self.trigger_action,
            window_ns: self.trigger_window,
            rate_hz: self.trigger_rate,
            cooldown_ns: self.trigger_cooldown,
            max: self.trigger_max,
        }
    }
}

fn trigger_arg(s: &str) -> Result<clrprof_trace::trigger::Rule, String> {
    clrprof_trace::trigger::Rule::parse(s)
}

fn trigger_action_arg(s: &str) -> Result<clrprof_trace::trigger::Action, String> {
    clrprof_trace::trigger::Action::parse(s)
}

fn trigger_window_arg(s: &str) -> Result<u64, String> {
    match clrprof_trace::trigger::parse_duration(s) {
        Some(n) if n >= 100_000_000 => Ok(n),
        _ => Err(format!("expected a duration of at least 100ms (500ms, 10s, 1m), got {s:?}")),
    }
}

fn trigger_cooldown_arg(s: &str) -> Result<u64, String> {
    clrprof_trace::trigger::parse_duration(s)
        .ok_or_else(|| format!("expected a duration (0s, 500ms, 10s, 1m), got {s:?}"))
}

impl RecordingArgs {
    fn options(&self) -> crate::agent_env::Recording {
        crate::agent_env::Recording {
            classes: !self.no_classes,
            sampling: !self.no_sample,
            sample_rate: self.rate,
            type_loads: self.type_loads,
            events: crate::agent_env::EventOptions {
                exceptions: !self.no_exceptions,
                exact_exceptions: self.exact_exceptions,
                gc: !self.no_gc,
                alloc: match self.alloc {
                    AllocArg::Sampled => "sampled",
                    AllocArg::Exact => "exact",
                    AllocArg::Off => "off",
                },
                log: self.events,
                locks: !self.no_locks,
            },
            heap: Default::default(),
            asynchrony: self.asynchrony,
            triggers: self.trigger.options(),
        }
    }

    /// Refuses triggers the other options leave without data.
    fn check_triggers(&self) -> Result<()> {
        use clrprof_trace::trigger::{Action, Rule};
        let t = &self.trigger;
        if let Some(r) = t.triggers.iter().find(|r| r.needs_requests()) {
            if !self.asynchrony {
                anyhow::bail!("--trigger {r} needs --async (the request events come with it)");
            }
        }
        if !t.triggers.is_empty() && self.no_sample && t.trigger_action.unwrap_or(Action::Window) == Action::Window {
            anyhow::bail!(
                "--trigger with --no-sample: a high-rate window needs the sampler (or use --trigger-action heap)"
            );
        }
        if self.no_exceptions {
            if let Some(r) = t.triggers.iter().find(|r| matches!(r, Rule::Exception(_))) {
                anyhow::bail!("--trigger {r} with --no-exceptions: exceptions are not observed");
            }
        }
        Ok(())
    }
}

/// The agent library and its diagnostics, for `record` and `attach`.
#[derive(Args, Debug)]
struct AgentArgs {
    /// The agent library [default: libclrprof_agent.so next to clrprof, or $CLRPROF_AGENT_PATH]
    #[arg(long, value_name = "PATH")]
    agent: Option<PathBuf>,
    /// Write the agent's diagnostics to this file
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
}

/// Streaming to a collector, for `record` and `attach`.
#[derive(Args, Debug)]
struct ServerArgs {
    /// Stream the trace to a `clrprof collect` at ADDR:PORT (tls://ADDR:PORT: over TLS) instead of
    /// a file (the file is written only if the collector cannot be reached or goes away)
    #[arg(long, value_name = "[tls://]ADDR:PORT")]
    server: Option<String>,
    /// The collector's token [default: $CLRPROF_TOKEN]
    #[arg(long, value_name = "TOKEN", requires = "server")]
    token: Option<String>,
    /// With tls://: trust only the CA certificates of this PEM file [default: the system's CA bundle]
    #[arg(long, value_name = "FILE", requires = "server")]
    tls_ca: Option<PathBuf>,
    /// With tls://: the client certificate (PEM) a collector with --tls-client-ca asks for
    #[arg(long, value_name = "FILE", requires_all = ["server", "tls_key"])]
    tls_cert: Option<PathBuf>,
    /// With tls://: the client certificate's private key (PEM)
    #[arg(long, value_name = "FILE", requires_all = ["server", "tls_cert"])]
    tls_key: Option<PathBuf>,
}

impl ServerArgs {
    fn tls(&self) -> crate::agent_env::TlsFiles {
        crate::agent_env::TlsFiles { ca: self.tls_ca.clone(), cert: self.tls_cert.clone(), key: self.tls_key.clone() }
    }
}

fn seconds_arg(s: &str) -> Result<Duration, String> {
    match s.trim().trim_end_matches('s').parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v < 1e9 => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("expected a positive number of seconds, got {s:?}")),
    }
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// The trace file, or a run of a store: run:ID or run:latest (see `clrprof runs`, --store)
    #[arg(value_name = "FILE")]
    trace: PathBuf,
    /// What to show [default: hotspots when the trace has costs, else tables]
    #[arg(long, value_enum)]
    view: Option<ViewArg>,
    /// Output format (csv: the hot spots in the Hot Spots Tracker's `;`-separated layout)
    #[arg(short, long, value_enum, default_value_t = FormatArg(Format::Text))]
    format: FormatArg,
    /// Write the report to FILE instead of standard output
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Cost to rank and sum by [default: time for instrumented traces, else cpu]
    #[arg(short, long, value_enum)]
    weight: Option<WeightArg>,
    /// Only this thread: OS thread id, runtime ThreadID (0x…) or thread name
    #[arg(long, value_name = "ID|NAME")]
    thread: Option<String>,
    /// Hot spots per thread instead of merged over threads
    #[arg(long)]
    by_thread: bool,
    /// Show the first N rows (hot spots, summary, flow, allocations)
    #[arg(long, value_name = "N")]
    top: Option<usize>,
    /// Call tree: levels to show
    #[arg(long, value_name = "N")]
    depth: Option<usize>,
    /// Call tree: hide nodes below this share of the total [default: 0.05 under an exact weight
    /// (rows that would read 0.0%), else 0; JSON keeps every row unless given]; heap dominator
    /// tree: the same [default: 0]
    #[arg(long, value_name = "PERCENT")]
    min_percent: Option<f64>,
    /// Callers, lines and source views: the function (full name, or a unique part of it)
    #[arg(long, value_name = "NAME")]
    function: Option<String>,
    /// Every frame at its source line (from portable PDBs): hot spots, call trees and callers
    /// per line (`Name (File.cs:12)`); --view lines and --view source imply it
    #[arg(long)]
    by_line: bool,
    /// JSON: the timeline's bucket size (e.g. 10ms) [default: a round size giving at most 200 buckets]
    #[arg(long, value_name = "TIME", value_parser = time_arg)]
    bucket: Option<u64>,
    /// JSON: every thread's hot spots (`thread_hotspots`) and timeline row; without it the
    /// timeline folds threads with under 1% of the samples and exceptions into one row
    #[arg(long)]
    per_thread: bool,
    /// Heap views: the snapshot to show, numbered from 1 in the trace [default: the last]
    #[arg(long, value_name = "K")]
    snapshot: Option<usize>,
    /// Types view: sort by retained, size, count or name
    #[arg(long, value_name = "KEY", default_value = "retained", value_parser = crate::heap_views::parse_sort)]
    sort: clrprof_heap::views::TypeSort,
    /// Paths view: the type whose instances to explain (full name, or a unique last part)
    #[arg(long = "type", value_name = "NAME")]
    type_name: Option<String>,
    #[command(flatten)]
    read: ReadArgs,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum AllocArg {
    Sampled,
    Exact,
    Off,
}

/// A command-line value naming one row of a library's table: clap's `ValueEnum` over the rows'
/// names and help lines (`$keep` picks the rows offered), so that the CLI repeats no list.
macro_rules! table_value {
    ($(#[$doc:meta])* $arg:ident($ty:ty) = $rows:expr, |$r:ident| ($value:expr, $name:expr, $help:expr) $(, if $keep:expr)?) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        struct $arg($ty);

        impl ValueEnum for $arg {
            fn value_variants<'a>() -> &'a [Self] {
                static ALL: std::sync::OnceLock<Vec<$arg>> = std::sync::OnceLock::new();
                ALL.get_or_init(|| {
                    // Every row unless `$keep` says otherwise.
                    $rows.iter().filter(|$r| { let _ = $r; true $(&& $keep)? }).map(|$r| $arg($value)).collect()
                })
            }

            fn to_possible_value(&self) -> Option<PossibleValue> {
                $rows.iter().find(|$r| $value == self.0).map(|$r| {
                    let help: Option<&'static str> = $help;
                    let value = PossibleValue::new($name);
                    match help {
                        Some(h) => value.help(h),
                        None => value,
                    }
                })
            }
        }
    };
}

table_value!(
    /// `report --view`: the report's views.
    ViewArg(View) = clrprof_report::VIEWS, |r| (r.view, r.name, Some(r.help))
);
table_value!(
    /// `report --format` and `diff --format`.
    FormatArg(Format) = clrprof_report::FORMATS, |r| (r.0, r.1, None)
);
table_value!(
    /// `export --format`: the exporters' formats.
    ExportFormatArg(ExportFormat) = clrprof_export::FORMATS, |r| (r.format, r.name, Some(r.help))
);
table_value!(
    /// `report --weight` and `export --weight`: the cost columns (not the event weights).
    WeightArg(Metric) = METRICS, |r| (r.metric, r.name, Some(r.help)), if !r.metric.is_event()
);
table_value!(
    /// `diff`'s weights: the costs, and the runtime events per stack.
    DiffWeightArg(Metric) = METRICS, |r| (r.metric, r.name, Some(r.help))
);

pub fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Record(a) => {
            a.recording.check_triggers()?;
            let patterns = !a.include.is_empty() || !a.exclude.is_empty();
            if patterns && !a.instrument && !a.count {
                anyhow::bail!(
                    "--include and --exclude choose what --instrument hooks or --count counts: give one of them"
                );
            }
            let mut recording = a.recording.options();
            recording.heap.at_ns = a.heap_snapshot_at.map(|t| t.0).unwrap_or_default();
            let opts = RecordOptions {
                output: a.output,
                agent: a.agent.agent,
                log: a.agent.log,
                recording,
                instrument: crate::agent_env::InstrumentOptions {
                    enabled: a.instrument,
                    counts_only: a.counts_only,
                    flow: a.flow,
                    keep_inlining: a.keep_inlining,
                    calltree_max_mb: a.calltree_max_mb,
                    count: a.count,
                    count_all: a.count_scope.as_deref() == Some("all"),
                    include: a.include,
                    exclude: a.exclude,
                },
                command: a.command,
                tls: a.server.tls(),
                server: a.server.server,
                token: a.server.token,
                process: a.process,
            };
            crate::record::record(&opts)
        }
        Command::Attach(a) => {
            if a.instrument {
                anyhow::bail!("--instrument needs `record`: the runtime only allows enter/leave hooks at start-up; `attach` samples (CPU and wall time) and records runtime events");
            }
            if matches!(a.recording.alloc, AllocArg::Exact) {
                anyhow::bail!("--alloc exact needs `record`: the runtime only allows per-object allocation callbacks at start-up; `attach` samples allocations (--alloc sampled)");
            }
            let opts = crate::attach::AttachOptions {
                pid: a.pid,
                duration: a.duration,
                output: a.output,
                agent: a.agent.agent,
                log: a.agent.log,
                recording: {
                    a.recording.check_triggers()?;
                    a.recording.options()
                },
                timeout: a.timeout,
                tls: a.server.tls(),
                server: a.server.server,
                token: a.server.token,
                count: a.count,
                count_top: a.count_top,
                count_after: a.count_after.unwrap_or(Duration::from_secs(3)),
            };
            if let (Some(d), Some(_)) = (opts.duration, opts.count_top) {
                if d <= opts.count_after {
                    anyhow::bail!(
                        "--count-top chooses after --count-after ({:.1} s), which must be shorter than --duration ({:.1} s)",
                        opts.count_after.as_secs_f64(),
                        d.as_secs_f64()
                    );
                }
            }
            crate::attach::attach(&opts)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Heap(a) => {
            crate::heap::heap(a.pid, a.output, a.agent.agent, a.agent.log, a.timeout, a.max_memory)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Report(a) => {
            if let Some(view) = a.view.and_then(|v| crate::heap_views::HeapView::of(v.0)) {
                let opts = crate::heap_views::HeapOptions {
                    snapshot: a.snapshot,
                    sort: a.sort,
                    type_name: a.type_name,
                    top: a.top,
                    depth: a.depth,
                    min_percent: a.min_percent.unwrap_or(0.0),
                    format: a.format.0,
                };
                let text = crate::heap_views::report(&a.trace, &a.read.options()?, view, &opts)?;
                crate::report::write_output(a.output.as_deref(), &text)?;
                return Ok(ExitCode::SUCCESS);
            }
            let view = a.view.map_or(View::Auto, |v| v.0);
            if a.by_line && a.format.0 == Format::Json && !matches!(view, View::Lines | View::Source) {
                // The JSON document is per function (its tables are the runtime's functions).
                anyhow::bail!(
                    "--by-line is for the text and CSV views; for source lines as JSON: --view lines --format json"
                );
            }
            let symbol_dirs = a.read.symbols.clone();
            let cmd = crate::report::ReportCommand {
                lines: a.by_line || matches!(view, View::Lines | View::Source),
                // The callers view splits instrumented callers by the lines they call from (the JSON
                // document, without --function, stays per function: its tables are the runtime's
                // functions).
                read: crate::load::ReadOptions {
                    call_site_lines: matches!(view, View::Callers)
                        && (a.format.0 != Format::Json || a.function.is_some()),
                    // Views that show threads merged read the instrumented costs summed over threads
                    // (a cost per stack, not per thread and stack: a third of the memory on a
                    // 14-thread compiler run). So does the JSON document without --per-thread: its
                    // per-thread figures are sampled ones, kept per thread.
                    merge_threads: (matches!(view, View::Auto | View::Hotspots | View::Calltree | View::Summary)
                        || a.format.0 == Format::Json)
                        && a.thread.is_none()
                        && !a.by_thread
                        && !a.per_thread,
                    ..a.read.options()?
                },
                trace: a.trace,
                output: a.output,
                report: ReportOptions {
                    view,
                    format: a.format.0,
                    weight: a.weight.map(|w| w.0),
                    thread: a.thread,
                    by_thread: a.by_thread,
                    top: a.top,
                    depth: a.depth,
                    min_percent: a.min_percent,
                    function: a.function,
                    bucket_ns: a.bucket,
                    per_thread: a.per_thread,
                    symbol_dirs,
                },
            };
            crate::report::report(&cmd)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Export(a) => {
            let cmd = crate::export::ExportCommand {
                lines: a.by_line,
                read: a.read.options()?,
                trace: a.trace,
                format: a.format.0,
                output: a.output,
                weight: a.weight.map(|w| w.0),
                thread: a.thread,
            };
            crate::export::export(&cmd)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::View(a) => {
            crate::view::view(&crate::view::ViewCommand {
                trace: a.trace,
                store: a.store,
                baseline: a.baseline,
                port: a.port,
                bind: a.bind,
                token: a.token,
                open_browser: !a.no_browser,
                native_symbols: !a.no_native_symbols,
                debug_dirs: a.symbols,
                physical_stacks: a.physical_stacks,
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Diff(a) => {
            let read = a.read.options()?;
            // Snapshots are compared when asked (`--snapshots`, one file) or when both files hold some
            // and no option of a profile diff is given (two recorded runs with snapshots still get a
            // profile diff with `--weight`).
            let rules = clrprof_query::gate::parse_rules(&a.fail_if).map_err(anyhow::Error::msg)?;
            let profile_rules = rules.iter().any(|r| !matches!(r.scope, clrprof_query::gate::Scope::Type(_)));
            let profile_asked = a.weight.is_some() || a.normalize || a.thread.is_some() || profile_rules;
            let heap = match &a.new {
                None => true,
                Some(_) if a.snapshots.is_some() => true,
                Some(_) if profile_asked => false,
                Some(new) => {
                    crate::heap_views::has_snapshots(&a.old, &read) && crate::heap_views::has_snapshots(new, &read)
                }
            };
            let breached = |b: bool| if b { ExitCode::from(crate::diff::BREACH_EXIT) } else { ExitCode::SUCCESS };
            if heap {
                let format = match a.format.format() {
                    crate::diff::DiffFormat::Report(f) => Some(f),
                    crate::diff::DiffFormat::Markdown => None,
                };
                let d = crate::heap_views::diff(&a.old, a.new.as_deref(), &read, a.snapshots, a.top, format)?;
                let verdicts = crate::diff::check_heap(&rules, &d.rows)?;
                let text = match format {
                    Some(_) => d.text,
                    None => clrprof_report::gate::markdown(
                        None,
                        &d.base,
                        &d.new,
                        &verdicts,
                        a.top.unwrap_or(10),
                        &Default::default(),
                    ),
                };
                crate::report::write_output(a.output.as_deref(), &text)?;
                return Ok(breached(crate::diff::report_gate(&verdicts)));
            }
            let Some(new) = a.new else { unreachable!("a diff of one file is a heap diff") };
            let cmd = crate::diff::DiffCommand {
                read,
                old: a.old,
                new,
                weight: a.weight.map(|w| w.0),
                normalize: a.normalize,
                top: a.top,
                format: a.format.format(),
                output: a.output,
                thread: a.thread,
                rules,
                min_samples: Some(a.min_samples),
            };
            Ok(breached(crate::diff::diff(&cmd)?))
        }
        Command::Collect(a) => {
            let token = a.token.or_else(|| std::env::var("CLRPROF_TOKEN").ok()).filter(|t| !t.is_empty());
            let interval = std::time::Duration::from_nanos(a.interval);
            let pyroscope = a.pyroscope.map(|url| crate::collect::PushOptions {
                url,
                token: a
                    .pyroscope_token
                    .or_else(|| std::env::var("CLRPROF_PYROSCOPE_TOKEN").ok())
                    .filter(|t| !t.is_empty()),
                headers: Vec::new(),
                interval,
                format: clrprof_pyroscope::Format::Pyroscope,
                tls_ca: a.tls_ca.clone(),
            });
            let otlp = a.otlp.map(|url| crate::collect::PushOptions {
                url,
                token: None,
                headers: a.otlp_header,
                interval,
                format: clrprof_pyroscope::Format::Otlp,
                tls_ca: a.tls_ca.clone(),
            });
            crate::collect::collect(&crate::collect::CollectCommand {
                listen: a.listen,
                store: a.store,
                token,
                max_run_bytes: a.max_run_bytes,
                agent_settings: {
                    let t = a.trigger.options();
                    if t.rules.iter().any(|r| r.needs_requests()) {
                        eprintln!(
                            "clrprof: note: request-p95 rules apply only to agents recorded with --async (the others skip them and say so in their trace)"
                        );
                    }
                    crate::agent_env::AgentEnv::default().triggers(&t).lines()
                },
                pyroscope,
                otlp,
                tls: a.tls_cert.zip(a.tls_key).map(|(c, k)| (c, k, a.tls_client_ca)),
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Runs(a) => {
            crate::collect::runs(&crate::collect::RunsCommand {
                store: a.store,
                json: matches!(a.format, RunsFormatArg::Json),
            })?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `--heap-snapshot-at`'s times (ns after start, sorted, distinct).
#[derive(Clone, Debug)]
struct SnapshotTimes(Vec<u64>);

/// `--heap-snapshot-at`: times after start, comma-separated.
fn snapshot_times_arg(s: &str) -> Result<SnapshotTimes, String> {
    let mut times = Vec::new();
    for t in s.split(',').map(str::trim) {
        if t.is_empty() {
            return Err(format!("empty time in {s:?}: expected times such as 500ms,2s,1m"));
        }
        times.push(parse_time(t).map_err(|e| format!("{t:?}: {e}"))?);
    }
    times.sort_unstable();
    times.dedup();
    Ok(SnapshotTimes(times))
}

fn time_arg(s: &str) -> Result<u64, String> {
    parse_time(s)
}

fn interval_arg(s: &str) -> Result<u64, String> {
    let ns = parse_time(s)?;
    if !(1_000_000_000..=3_600_000_000_000).contains(&ns) {
        return Err("expected an interval from 1s to 1h (e.g. 10s)".into());
    }
    Ok(ns)
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
        if cause.downcast_ref::<crate::attach::AttachError>().is_some() {
            return None;
        }
        if let Some(crate::record::AgentMissing(_)) = cause.downcast_ref() {
            return Some("build the agent with `cargo build --release -p clrprof-agent`, or pass --agent /path/to/libclrprof_agent.so");
        }
    }
    None
}
