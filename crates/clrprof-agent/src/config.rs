//! Configuration from `CLRPROF_*` environment variables, read once at `Initialize`. An invalid
//! value is reported (log file and a `Message` record) and replaced by its default: the app runs.

use std::collections::BTreeMap;

/// The agent's settings. Each field documents its variable and default.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub(crate) struct Config {
    /// `CLRPROF_OUTPUT`: trace path; `{pid}` is replaced by the process id, `{name}` by the
    /// program's name (the main assembly's for `dotnet app.dll`), `{time}` by the start time
    /// (UTC, `YYYYMMDD-HHMMSS`). Default `clrprof-{pid}.clrprof` in the working directory.
    pub(crate) output: String,
    /// `CLRPROF_LOG`: diagnostics file. Default: none.
    pub(crate) log: Option<String>,
    /// `CLRPROF_FLUSH_MS`: writer flush interval, 1..=1000 ms. Default 50.
    pub(crate) flush_ms: u64,
    /// Bytes each thread's trace buffer holds before the writer drains it (`CLRPROF_BUFFER_KB`).
    pub(crate) buffer_bytes: usize,
    /// `CLRPROF_CLASSES`: record class loads (`1`/`0`). Default on.
    pub(crate) classes: bool,
    /// Enter/leave instrumentation: `CLRPROF_INSTRUMENT` (default 0), `CLRPROF_TIMING` (default 1;
    /// 0 = call counts only), `CLRPROF_FLOW` (default 0), `CLRPROF_INLINING` (default 0: inlining
    /// disabled so every call is seen), `CLRPROF_INCLUDE` / `CLRPROF_EXCLUDE` (`;`-separated).
    pub(crate) instrument: EltConfig,
    /// `CLRPROF_COUNT` (default 0): exact call counts by IL probes (`record --count`), scoped by
    /// `CLRPROF_INCLUDE`/`CLRPROF_EXCLUDE` (kept in `instrument`) and `CLRPROF_COUNT_SCOPE`
    /// (`app`, the default: modules outside the shared framework; `all`: every module).
    pub(crate) count: bool,
    pub(crate) count_all: bool,
    /// `CLRPROF_COUNT_TOP` (attach only; default 0: none): with `CLRPROF_COUNT`, count the N
    /// methods with the most CPU samples (self) after `CLRPROF_COUNT_AFTER_MS` of sampling
    /// (default 3000) instead of methods named by patterns.
    pub(crate) count_top: u32,
    pub(crate) count_after_ms: u64,
    /// `CLRPROF_SAMPLING`: run the sampler (`1`/`0`). Default on.
    pub(crate) sampling: bool,
    /// `CLRPROF_SAMPLE_RATE`: samples per second per thread, 1..=10000. Default 100. CPU-time
    /// timers deliver at most one signal per kernel tick (250/s at CONFIG_HZ=250), and wall-clock
    /// ticks are capped at 1000/s; the trace records what was delivered.
    pub(crate) sample_rate: u32,
    /// `CLRPROF_TYPE_LOADS`: with sampling, name the runtime's type loads in samples
    /// (`[type load] T`) from its TypeLoadStart/Stop events (`1`/`0`). Default off: the events
    /// cost type-heavy start-ups about 6%, and that time is still named after the method being
    /// prepared or compiled.
    pub(crate) type_loads: bool,
    /// `CLRPROF_EXCEPTIONS`: record exceptions (`1`/`0`/`exact`). Default on.
    pub(crate) exceptions: bool,
    /// `CLRPROF_EXCEPTIONS=exact`: observe every exception however many are thrown (no storm rate
    /// limit). The event log implies it.
    pub(crate) exceptions_exact: bool,
    /// `CLRPROF_GC`: record garbage collections and runtime suspensions (`1`/`0`). Default on.
    pub(crate) gc: bool,
    /// `CLRPROF_ALLOC`: `sampled`, `exact` or `off`. Default `sampled`.
    pub(crate) alloc: AllocMode,
    /// `CLRPROF_ALLOC_RATE`: allocation samples per second the writer keeps once a process has
    /// written its first [`ALLOC_ALLOWANCE`] (the rest thinned, the kept ones weighted), 1..=1000000,
    /// or 0 to keep every sample. Default 100.
    pub(crate) alloc_rate: u32,
    /// `CLRPROF_EVENTS`: keep every runtime event for the event log (`1`/`0`). Default off.
    pub(crate) events: bool,
    /// `CLRPROF_LOCKS`: record Monitor lock contention with the waiting stack (`1`/`0`). Default on.
    pub(crate) locks: bool,
    /// `CLRPROF_ASYNC`: record the task library's events (awaits, continuations, `Task.Run`) so
    /// that reports show logical async stacks and awaiting time (`1`/`0`). Default off: the events
    /// cost the app per await (see docs/async.md).
    pub(crate) asynchrony: bool,
    /// `CLRPROF_SERVICE`: the service this process belongs to (continuous profiling names its
    /// profiles after it). Default: none (the process name is used).
    pub(crate) service: String,
    /// `CLRPROF_LABELS`: the user's own labels, `key=value,key=value`. Default: none.
    pub(crate) labels: Vec<(String, String)>,
    /// `CLRPROF_SERVER`: `ADDR:PORT` of a `clrprof collect` to stream the trace to; the trace file
    /// (`CLRPROF_OUTPUT`) is written only if the collector cannot be reached or goes. Default: none.
    pub(crate) server: Option<String>,
    /// `CLRPROF_TOKEN`: the collector's token. Never written to the trace.
    pub(crate) token: Option<String>,
    /// `CLRPROF_TLS_CA`, `CLRPROF_TLS_CERT`, `CLRPROF_TLS_KEY`: with `CLRPROF_SERVER=tls://…`, the
    /// CA to trust (default: the system's bundle) and a client certificate and key (mutual TLS).
    pub(crate) tls: crate::writer::TlsFiles,
    /// `CLRPROF_PROCESS`: only profile processes matching one of these globs (`;`-separated; `*`
    /// and `?`), tried on the executable's name, the main assembly's file name and the command
    /// line. Default: every process.
    pub(crate) process: Vec<String>,
    /// `CLRPROF_CACHE_DIR`: a directory where the agent keeps what it derives from files and can
    /// reuse in later processes (the unwind rules of native libraries, by build id). Default:
    /// none, no cache (`clrprof record` and `attach` set it to the user's cache directory).
    pub(crate) cache_dir: Option<String>,
    /// `CLRPROF_METADATA`: where names come from: `image` (default), the metadata tables read in
    /// place in each module's loaded image, or `importer`, the runtime's `IMetaDataImport` for
    /// every module (it switches the runtime's own metadata access for those modules to a slower,
    /// locked form; see `metadata.rs`). Modules without an image use the importer either way.
    pub(crate) metadata_importer: bool,
    /// Heap snapshots: `CLRPROF_HEAP_SNAPSHOT`, `CLRPROF_HEAP_SNAPSHOT_AT`,
    /// `CLRPROF_HEAP_BUFFER_MB` (see `events::heap`).
    pub(crate) heap: crate::events::heap::HeapConfig,
    /// Collection triggers: `CLRPROF_TRIGGER` (`;`-separated rules) and `CLRPROF_TRIGGER_ACTION`,
    /// `_WINDOW`, `_RATE`, `_COOLDOWN`, `_MAX` (see `crate::triggers`). Default: no rule.
    pub(crate) triggers: TriggerConfig,
}

/// The collection triggers' settings (`CLRPROF_TRIGGER*`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TriggerConfig {
    pub(crate) rules: Vec<clrprof_trace::trigger::Rule>,
    pub(crate) action: clrprof_trace::trigger::Action,
    /// How long a high-rate window lasts.
    pub(crate) window_ns: u64,
    /// CPU samples per second per thread inside a window.
    pub(crate) rate_hz: u32,
    /// Shortest time between two fires of one rule.
    pub(crate) cooldown_ns: u64,
    /// Most fires of one rule.
    pub(crate) max: u32,
}

impl Default for TriggerConfig {
    fn default() -> Self {
        use clrprof_trace::trigger as t;
        TriggerConfig {
            rules: Vec::new(),
            action: t::Action::Window,
            window_ns: t::DEFAULT_WINDOW_NS,
            rate_hz: t::DEFAULT_RATE_HZ,
            cooldown_ns: t::DEFAULT_COOLDOWN_NS,
            max: t::DEFAULT_MAX,
        }
    }
}

impl TriggerConfig {
    fn from_lookup(get: &dyn Fn(&str) -> Option<String>, problems: &mut Vec<ConfigProblem>) -> TriggerConfig {
        use clrprof_trace::trigger::{parse_duration, Action, Rule};
        let mut c = TriggerConfig::default();
        let mut bad = |variable: &'static str, value: &str, reason: String| {
            problems.push(ConfigProblem { variable, value: value.to_string(), reason })
        };
        if let Some(v) = get("CLRPROF_TRIGGER") {
            for text in v.split(';').map(str::trim).filter(|r| !r.is_empty()) {
                match Rule::parse(text) {
                    Ok(r) => c.rules.push(r),
                    Err(e) => bad("CLRPROF_TRIGGER", text, format!("{e}; rule skipped")),
                }
            }
        }
        if let Some(v) = get("CLRPROF_TRIGGER_ACTION") {
            match Action::parse(&v) {
                Ok(a) => c.action = a,
                Err(e) => bad("CLRPROF_TRIGGER_ACTION", &v, format!("{e}; using window")),
            }
        }
        let duration = |name: &'static str, v: &str, min_ns: u64, bad: &mut dyn FnMut(&'static str, &str, String)| {
            match parse_duration(v) {
                Some(n) if n >= min_ns => Some(n),
                _ => {
                    bad(
                        name,
                        v,
                        format!(
                            "expected a duration of at least {} ms (500ms, 10s, 1m); using the default",
                            min_ns / 1_000_000
                        ),
                    );
                    None
                }
            }
        };
        if let Some(v) = get("CLRPROF_TRIGGER_WINDOW") {
            if let Some(n) = duration("CLRPROF_TRIGGER_WINDOW", &v, 100_000_000, &mut bad) {
                c.window_ns = n;
            }
        }
        if let Some(v) = get("CLRPROF_TRIGGER_COOLDOWN") {
            if let Some(n) = duration("CLRPROF_TRIGGER_COOLDOWN", &v, 0, &mut bad) {
                c.cooldown_ns = n;
            }
        }
        if let Some(v) = get("CLRPROF_TRIGGER_RATE") {
            match v.trim().parse::<u32>() {
                Ok(n) if (1..=10_000).contains(&n) => c.rate_hz = n,
                _ => bad("CLRPROF_TRIGGER_RATE", &v, "expected samples per second in 1..=10000; using 1000".into()),
            }
        }
        if let Some(v) = get("CLRPROF_TRIGGER_MAX") {
            match v.trim().parse::<u32>() {
                Ok(n) if n >= 1 => c.max = n,
                _ => bad("CLRPROF_TRIGGER_MAX", &v, "expected a count of at least 1; using 5".into()),
            }
        }
        c
    }
}

/// Instrumentation settings (from `CLRPROF_INSTRUMENT*`, `CLRPROF_FLOW`, `CLRPROF_INCLUDE`, …).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct EltConfig {
    pub(crate) enabled: bool,
    /// Measure time (rdtsc per hook); false = call counts only.
    pub(crate) timing: bool,
    pub(crate) flow: bool,
    pub(crate) keep_inlining: bool,
    pub(crate) include: Vec<String>,
    pub(crate) exclude: Vec<String>,
    /// `CLRPROF_CALLTREE_MAX_MB`: the most memory the call trees of all threads may take, MiB
    /// (0: no cap). Calls past it that need a new node are counted in their caller's
    /// `[call tree capped]` node, with their time. Default 1024.
    pub(crate) calltree_max_mb: u64,
}

/// Default of `CLRPROF_ALLOC_RATE`.
pub(crate) const DEFAULT_ALLOC_RATE: u32 = 100;

/// Allocation samples a process writes before `CLRPROF_ALLOC_RATE` applies.
pub(crate) const ALLOC_ALLOWANCE: u64 = 5_000;

/// Default of `CLRPROF_CALLTREE_MAX_MB`.
pub(crate) const DEFAULT_CALLTREE_MAX_MB: u64 = 1024;

/// How allocations are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AllocMode {
    Off,
    /// The runtime's allocation sampling events through an in-process EventPipe session.
    Sampled,
    /// Every object (`ObjectAllocated`); slows every allocation.
    Exact,
}

impl AllocMode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            AllocMode::Off => "off",
            AllocMode::Sampled => "sampled",
            AllocMode::Exact => "exact",
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            output: "clrprof-{pid}.clrprof".into(),
            log: None,
            flush_ms: 50,
            buffer_bytes: 32 << 20,
            classes: true,
            instrument: EltConfig { timing: true, calltree_max_mb: DEFAULT_CALLTREE_MAX_MB, ..Default::default() },
            count: false,
            count_all: false,
            count_top: 0,
            count_after_ms: 3000,
            sampling: true,
            sample_rate: 100,
            type_loads: false,
            exceptions: true,
            exceptions_exact: false,
            gc: true,
            alloc: AllocMode::Sampled,
            alloc_rate: DEFAULT_ALLOC_RATE,
            events: false,
            locks: true,
            asynchrony: false,
            service: String::new(),
            labels: Vec::new(),
            server: None,
            token: None,
            tls: Default::default(),
            process: Vec::new(),
            cache_dir: None,
            metadata_importer: false,
            heap: Default::default(),
            triggers: Default::default(),
        }
    }
}

/// A value that was rejected, with the reason.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ConfigProblem {
    pub(crate) variable: &'static str,
    pub(crate) value: String,
    pub(crate) reason: String,
}

impl std::fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={:?} ignored: {}", self.variable, self.value, self.reason)
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

impl Config {
    /// Drops the trigger rules the other settings leave without data, and says so.
    fn check_triggers(&mut self, more: &mut Vec<ConfigProblem>) {
        if self.triggers.rules.iter().any(|r| r.needs_requests()) && !self.asynchrony {
            more.push(ConfigProblem {
                variable: "CLRPROF_TRIGGER",
                value: self
                    .triggers
                    .rules
                    .iter()
                    .filter(|r| r.needs_requests())
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(";"),
                reason: "request-p95 needs the request events of CLRPROF_ASYNC=1 (--async); rule skipped".into(),
            });
            self.triggers.rules.retain(|r| !r.needs_requests());
        }
        if !self.triggers.rules.is_empty()
            && !self.sampling
            && self.triggers.action == clrprof_trace::trigger::Action::Window
        {
            more.push(ConfigProblem {
                variable: "CLRPROF_TRIGGER_ACTION",
                value: "window".into(),
                reason: "the sampler is off (CLRPROF_SAMPLING=0): fires are recorded, no window is sampled".into(),
            });
        }
    }

    /// Settings a collector sent with its answer (`CLRPROF_TRIGGER*=value` lines, `collect
    /// --trigger`): its triggers apply when the process has none of its own; other lines are
    /// ignored. Returns what was wrong with them.
    pub(crate) fn take_collector_settings(&mut self, text: &str) -> Vec<ConfigProblem> {
        let map: BTreeMap<String, String> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(k, _)| k.starts_with("CLRPROF_TRIGGER"))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut problems = Vec::new();
        let Some(rules) = map.get("CLRPROF_TRIGGER") else { return problems };
        if !self.triggers.rules.is_empty() {
            problems.push(ConfigProblem {
                variable: "CLRPROF_TRIGGER",
                value: rules.clone(),
                reason: "sent by the collector, not used: the process has triggers of its own".into(),
            });
            return problems;
        }
        self.triggers = TriggerConfig::from_lookup(&|k| map.get(k).cloned(), &mut problems);
        self.check_triggers(&mut problems);
        problems
    }

    /// Reads the configuration through `get` (the process environment in the agent).
    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> (Config, Vec<ConfigProblem>) {
        let mut c = Config::default();
        let mut problems = Vec::new();
        let mut bad = |variable: &'static str, value: &str, reason: &str| {
            problems.push(ConfigProblem { variable, value: value.to_string(), reason: reason.to_string() })
        };
        if let Some(v) = get("CLRPROF_OUTPUT") {
            if v.trim().is_empty() {
                bad("CLRPROF_OUTPUT", &v, "empty path; using the default");
            } else {
                c.output = v;
            }
        }
        c.log = get("CLRPROF_LOG").filter(|v| !v.trim().is_empty());
        if let Some(v) = get("CLRPROF_FLUSH_MS") {
            match v.trim().parse::<u64>() {
                Ok(n) if (1..=1000).contains(&n) => c.flush_ms = n,
                _ => bad("CLRPROF_FLUSH_MS", &v, "expected milliseconds in 1..=1000; using 50"),
            }
        }
        if let Some(v) = get("CLRPROF_BUFFER_KB") {
            match v.trim().parse::<usize>() {
                Ok(n) if (4..=1 << 20).contains(&n) => c.buffer_bytes = n << 10,
                _ => bad("CLRPROF_BUFFER_KB", &v, "expected KiB in 4..=1048576; using 32768"),
            }
        }
        let flag = |name: &'static str, slot: &mut bool, problems: &mut Vec<ConfigProblem>| {
            if let Some(v) = get(name) {
                match parse_bool(&v) {
                    Some(b) => *slot = b,
                    None => problems.push(ConfigProblem {
                        variable: name,
                        value: v.clone(),
                        reason: format!("expected 1 or 0; using {}", *slot as u8),
                    }),
                }
            }
        };
        let mut more = Vec::new();
        flag("CLRPROF_CLASSES", &mut c.classes, &mut more);
        flag("CLRPROF_INSTRUMENT", &mut c.instrument.enabled, &mut more);
        flag("CLRPROF_TIMING", &mut c.instrument.timing, &mut more);
        flag("CLRPROF_FLOW", &mut c.instrument.flow, &mut more);
        flag("CLRPROF_INLINING", &mut c.instrument.keep_inlining, &mut more);
        flag("CLRPROF_COUNT", &mut c.count, &mut more);
        if let Some(v) = get("CLRPROF_COUNT_SCOPE") {
            match v.trim() {
                "all" => c.count_all = true,
                "app" => c.count_all = false,
                _ => more.push(ConfigProblem {
                    variable: "CLRPROF_COUNT_SCOPE",
                    value: v.clone(),
                    reason: "expected app or all; using app".into(),
                }),
            }
        }
        if let Some(v) = get("CLRPROF_COUNT_TOP") {
            match v.trim().parse::<u32>() {
                Ok(n) if n <= crate::rejit::MAX_TOP => c.count_top = n,
                _ => more.push(ConfigProblem {
                    variable: "CLRPROF_COUNT_TOP",
                    value: v.clone(),
                    reason: format!("expected a number of methods, 0 to {}; using 0", crate::rejit::MAX_TOP),
                }),
            }
        }
        if let Some(v) = get("CLRPROF_COUNT_AFTER_MS") {
            match v.trim().parse::<u64>() {
                Ok(n) if (1..=86_400_000).contains(&n) => c.count_after_ms = n,
                _ => more.push(ConfigProblem {
                    variable: "CLRPROF_COUNT_AFTER_MS",
                    value: v.clone(),
                    reason: "expected milliseconds in 1..=86400000; using 3000".into(),
                }),
            }
        }
        let list = |v: Option<String>| -> Vec<String> {
            v.map(|s| s.split(';').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect())
                .unwrap_or_default()
        };
        if let Some(v) = get("CLRPROF_CALLTREE_MAX_MB") {
            match v.trim().parse::<u64>() {
                Ok(n) if n == 0 || (16..=1 << 24).contains(&n) => c.instrument.calltree_max_mb = n,
                _ => more.push(ConfigProblem {
                    variable: "CLRPROF_CALLTREE_MAX_MB",
                    value: v.clone(),
                    reason: format!("expected MiB in 16..=16777216, or 0 for no cap; using {DEFAULT_CALLTREE_MAX_MB}"),
                }),
            }
        }
        c.instrument.include = list(get("CLRPROF_INCLUDE"));
        c.instrument.exclude = list(get("CLRPROF_EXCLUDE"));
        flag("CLRPROF_SAMPLING", &mut c.sampling, &mut more);
        flag("CLRPROF_TYPE_LOADS", &mut c.type_loads, &mut more);
        if let Some(v) = get("CLRPROF_SAMPLE_RATE") {
            match v.trim().parse::<u32>() {
                Ok(n) if (1..=10_000).contains(&n) => c.sample_rate = n,
                _ => more.push(ConfigProblem {
                    variable: "CLRPROF_SAMPLE_RATE",
                    value: v.clone(),
                    reason: "expected samples per second in 1..=10000; using 100".into(),
                }),
            }
        }
        if let Some(v) = get("CLRPROF_EXCEPTIONS") {
            if v.trim().eq_ignore_ascii_case("exact") {
                c.exceptions = true;
                c.exceptions_exact = true;
            } else {
                match parse_bool(&v) {
                    Some(b) => c.exceptions = b,
                    None => more.push(ConfigProblem {
                        variable: "CLRPROF_EXCEPTIONS",
                        value: v.clone(),
                        reason: "expected 1, 0 or exact; using 1".into(),
                    }),
                }
            }
        }
        flag("CLRPROF_GC", &mut c.gc, &mut more);
        flag("CLRPROF_EVENTS", &mut c.events, &mut more);
        flag("CLRPROF_LOCKS", &mut c.locks, &mut more);
        flag("CLRPROF_ASYNC", &mut c.asynchrony, &mut more);
        if let Some(v) = get("CLRPROF_ALLOC") {
            match v.trim().to_ascii_lowercase().as_str() {
                "sampled" => c.alloc = AllocMode::Sampled,
                "exact" => c.alloc = AllocMode::Exact,
                "off" | "0" | "none" => c.alloc = AllocMode::Off,
                _ => bad("CLRPROF_ALLOC", &v, "expected sampled, exact or off; using sampled"),
            }
        }
        if let Some(v) = get("CLRPROF_ALLOC_RATE") {
            match v.trim().parse::<u32>() {
                Ok(n) if n <= 1_000_000 => c.alloc_rate = n,
                _ => bad(
                    "CLRPROF_ALLOC_RATE",
                    &v,
                    &format!(
                        "expected allocation samples per second in 1..=1000000, or 0 to keep every sample; \
                         using {DEFAULT_ALLOC_RATE}"
                    ),
                ),
            }
        }
        if let Some(v) = get("CLRPROF_SERVICE") {
            c.service = v.trim().to_string();
        }
        if let Some(v) = get("CLRPROF_LABELS") {
            for item in v.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                match item.split_once('=') {
                    Some((k, val)) if !k.trim().is_empty() && !k.contains('\n') && !val.contains('\n') => {
                        c.labels.push((k.trim().to_string(), val.trim().to_string()))
                    }
                    _ => bad("CLRPROF_LABELS", item, "expected key=value; label skipped"),
                }
            }
        }
        if let Some(v) = get("CLRPROF_SERVER").filter(|v| !v.trim().is_empty()) {
            let v = v.trim();
            match v.strip_prefix("tls://").unwrap_or(v).rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().map(|p| p > 0).unwrap_or(false) => {
                    c.server = Some(v.to_string())
                }
                _ => more.push(ConfigProblem {
                    variable: "CLRPROF_SERVER",
                    value: v.to_string(),
                    reason: "expected [tls://]ADDR:PORT; writing the trace file instead".into(),
                }),
            }
        }
        c.token = get("CLRPROF_TOKEN").filter(|v| !v.is_empty());
        let file = |n: &str| get(n).filter(|v| !v.trim().is_empty()).map(|v| v.trim().to_string());
        c.tls = crate::writer::TlsFiles {
            ca: file("CLRPROF_TLS_CA"),
            cert: file("CLRPROF_TLS_CERT"),
            key: file("CLRPROF_TLS_KEY"),
        };
        c.process = list(get("CLRPROF_PROCESS"));
        c.cache_dir = get("CLRPROF_CACHE_DIR").filter(|v| !v.trim().is_empty());
        if let Some(v) = get("CLRPROF_METADATA") {
            match v.trim().to_ascii_lowercase().as_str() {
                "image" => c.metadata_importer = false,
                "importer" => c.metadata_importer = true,
                _ => more.push(ConfigProblem {
                    variable: "CLRPROF_METADATA",
                    value: v.clone(),
                    reason: "expected image or importer; using image".into(),
                }),
            }
        }
        c.heap = crate::events::heap::HeapConfig::from_lookup(&get, &mut more);
        c.triggers = TriggerConfig::from_lookup(&get, &mut more);
        c.check_triggers(&mut more);
        problems.extend(more);
        (c, problems)
    }

    /// `CLRPROF_LABELS` as `key=value` lines for the trace's `ProcessStart.labels`.
    pub(crate) fn labels_lines(&self) -> String {
        self.labels.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }

    /// The output path with `{pid}` expanded (and `{name}`, `{time}` as "app" and 0: see
    /// [`Config::output_path_for`]).
    #[cfg(test)]
    pub(crate) fn output_path(&self, pid: u32) -> String {
        self.output_path_for(pid, "app", 0)
    }

    /// The output path with `{pid}`, `{name}` (made safe for a file name) and `{time}` (UTC
    /// `YYYYMMDD-HHMMSS` of `unix_secs`) expanded.
    pub(crate) fn output_path_for(&self, pid: u32, name: &str, unix_secs: u64) -> String {
        let name: String =
            name.chars().map(|c| if c.is_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
        self.output
            .replace("{pid}", &pid.to_string())
            .replace("{name}", if name.is_empty() { "app" } else { &name })
            .replace("{time}", &utc_stamp(unix_secs))
    }

    /// Every exception is observed, with no storm rate limit: asked for, or implied by the event log.
    pub(crate) fn every_exception(&self) -> bool {
        self.exceptions_exact || self.events
    }

    /// Whether a mode that promises exact numbers is on (call counts, every exception, every
    /// allocation): the writer then makes threads wait for room rather than drop records.
    pub(crate) fn exact_mode(&self) -> bool {
        self.instrument.enabled
            || self.count
            || (self.exceptions && self.every_exception())
            || self.alloc == AllocMode::Exact
    }

    /// `key=value` lines for the trace's `ProcessStart.config`.
    pub(crate) fn describe(&self) -> String {
        let mut m = BTreeMap::new();
        m.insert("output", self.output.clone());
        m.insert("flush_ms", self.flush_ms.to_string());
        m.insert("buffer_kb", (self.buffer_bytes >> 10).to_string());
        m.insert("classes", self.classes.to_string());
        m.insert("sampling", self.sampling.to_string());
        m.insert("sample_rate", self.sample_rate.to_string());
        if self.type_loads {
            m.insert("type_loads", "true".to_string());
        }
        m.insert(
            "exceptions",
            match (self.exceptions, self.every_exception()) {
                (false, _) => "false",
                (true, false) => "true",
                (true, true) => "exact",
            }
            .to_string(),
        );
        m.insert("gc", self.gc.to_string());
        m.insert("alloc", self.alloc.name().to_string());
        if self.metadata_importer {
            m.insert("metadata", "importer".to_string());
        }
        m.insert("events", self.events.to_string());
        m.insert("locks", self.locks.to_string());
        if self.asynchrony {
            m.insert("async", "true".to_string());
        }
        if let Some(s) = &self.server {
            m.insert("server", s.clone());
        }
        if !self.process.is_empty() {
            m.insert("process", self.process.join(";"));
        }
        self.heap.describe(&mut m);
        if !self.triggers.rules.is_empty() {
            let t = &self.triggers;
            m.insert("trigger", t.rules.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(";"));
            m.insert("trigger_action", t.action.name().to_string());
            m.insert("trigger_window_ms", (t.window_ns / 1_000_000).to_string());
            m.insert("trigger_rate", t.rate_hz.to_string());
            m.insert("trigger_cooldown_ms", (t.cooldown_ns / 1_000_000).to_string());
            m.insert("trigger_max", t.max.to_string());
        }
        m.insert("instrument", self.instrument.enabled.to_string());
        if self.count {
            m.insert("count", format!("{} scope", if self.count_all { "all" } else { "app" }));
            if self.count_top > 0 {
                m.insert("count_top", format!("{} after {} ms", self.count_top, self.count_after_ms));
            }
        }
        if self.instrument.enabled {
            m.insert("timing", self.instrument.timing.to_string());
            m.insert("flow", self.instrument.flow.to_string());
            m.insert("inlining", self.instrument.keep_inlining.to_string());
            m.insert("include", self.instrument.include.join(";"));
            m.insert("exclude", self.instrument.exclude.join(";"));
        }
        m.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }
}

/// `YYYYMMDD-HHMMSS` (UTC) of a Unix time.
pub(crate) fn utc_stamp(unix_secs: u64) -> String {
    let (y, m, d, h, min, sec) = clrprof_trace::utc_from_unix(unix_secs.min(i64::MAX as u64) as i64);
    format!("{y:04}{m:02}{d:02}-{h:02}{min:02}{sec:02}")
}

/// Who the process is, for `CLRPROF_PROCESS` and `{name}`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ProcessIdentity {
    /// The executable's file name (`dotnet`, `MyApp`).
    pub(crate) executable: String,
    /// The main assembly's file name for `dotnet [options] app.dll`.
    pub(crate) assembly: Option<String>,
    /// Arguments joined by spaces.
    pub(crate) command_line: String,
}

impl ProcessIdentity {
    /// From the executable path and the arguments (`/proc/self/exe`, `/proc/self/cmdline`).
    pub(crate) fn new(exe: &str, args: &[String]) -> ProcessIdentity {
        let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
        let executable = base(exe);
        let host = executable == "dotnet" || args.first().is_some_and(|a| base(a) == "dotnet");
        let assembly = if host {
            args.iter().skip(1).find(|a| a.ends_with(".dll") || a.ends_with(".exe")).map(|a| base(a))
        } else {
            None
        };
        ProcessIdentity { executable, assembly, command_line: args.join(" ") }
    }

    /// This process.
    pub(crate) fn current() -> ProcessIdentity {
        let exe = std::fs::read_link("/proc/self/exe").map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        let args: Vec<String> = std::fs::read("/proc/self/cmdline")
            .map(|b| {
                b.split(|&c| c == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        ProcessIdentity::new(&exe, &args)
    }

    /// The program's name: the main assembly's without `.dll`, else the executable's.
    pub(crate) fn name(&self) -> String {
        match &self.assembly {
            Some(a) => a.trim_end_matches(".dll").trim_end_matches(".exe").to_string(),
            None => self.executable.clone(),
        }
    }

    /// True when one of `patterns` matches the executable's name, the main assembly's file name
    /// (with or without its extension) or the whole command line; true when there is none.
    pub(crate) fn matches(&self, patterns: &[String]) -> bool {
        if patterns.is_empty() {
            return true;
        }
        let mut names = vec![self.executable.as_str(), self.command_line.as_str()];
        let stem = self.assembly.as_ref().map(|_| self.name());
        if let Some(a) = &self.assembly {
            names.push(a);
        }
        if let Some(s) = &stem {
            names.push(s);
        }
        patterns.iter().any(|p| names.iter().any(|n| glob(p, n)))
    }
}

/// Shell-style matching of the whole text: `*` any run of characters, `?` one character.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn defaults_without_variables() {
        let (c, p) = Config::from_lookup(env(&[]));
        assert_eq!(c, Config::default());
        assert!(p.is_empty());
        assert_eq!(c.output_path(12), "clrprof-12.clrprof");
    }

    #[test]
    fn trigger_settings() {
        use clrprof_trace::trigger::{Action, Rule};
        let (c, p) = Config::from_lookup(env(&[
            ("CLRPROF_TRIGGER", "exception:System.TimeoutException; gc-pause>50ms;bogus"),
            ("CLRPROF_TRIGGER_ACTION", "heap"),
            ("CLRPROF_TRIGGER_WINDOW", "2s"),
            ("CLRPROF_TRIGGER_RATE", "500"),
            ("CLRPROF_TRIGGER_COOLDOWN", "0"),
            ("CLRPROF_TRIGGER_MAX", "3"),
        ]));
        let t = &c.triggers;
        assert_eq!(t.rules, vec![Rule::Exception("System.TimeoutException".into()), Rule::GcPause(50_000_000)]);
        assert_eq!((t.action, t.window_ns, t.rate_hz, t.cooldown_ns, t.max), (Action::Heap, 2_000_000_000, 500, 0, 3));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].to_string().contains("bogus"), "{}", p[0]);
        assert!(c.describe().contains("trigger=exception:System.TimeoutException;gc-pause>50ms\n"));
        // request-p95 needs the request events.
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_TRIGGER", "request-p95>200ms")]));
        assert!(c.triggers.rules.is_empty());
        assert!(p[0].reason.contains("CLRPROF_ASYNC=1"), "{}", p[0]);
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_TRIGGER", "request-p95>200ms"), ("CLRPROF_ASYNC", "1")]));
        assert_eq!(c.triggers.rules.len(), 1);
        assert!(p.is_empty());
    }

    #[test]
    fn valid_values_are_taken() {
        let (c, p) = Config::from_lookup(env(&[
            ("CLRPROF_OUTPUT", "/tmp/x-{pid}.clrprof"),
            ("CLRPROF_FLUSH_MS", "20"),
            ("CLRPROF_CLASSES", "off"),
            ("CLRPROF_LOG", "/tmp/log"),
        ]));
        assert!(p.is_empty());
        assert_eq!(c.output_path(7), "/tmp/x-7.clrprof");
        assert_eq!(c.flush_ms, 20);
        assert!(!c.classes);
        assert_eq!(c.log.as_deref(), Some("/tmp/log"));
    }

    #[test]
    fn service_and_labels() {
        let (c, p) = Config::from_lookup(env(&[
            ("CLRPROF_SERVICE", " checkout "),
            ("CLRPROF_LABELS", "env=prod, region = eu-west-1,,broken,=x"),
        ]));
        assert_eq!(c.service, "checkout");
        assert_eq!(c.labels, vec![("env".into(), "prod".into()), ("region".into(), "eu-west-1".into())]);
        assert_eq!(c.labels_lines(), "env=prod\nregion=eu-west-1\n");
        let bad: Vec<&str> = p.iter().map(|p| p.value.as_str()).collect();
        assert_eq!(bad, ["broken", "=x"], "{p:?}");
    }

    #[test]
    fn invalid_values_fall_back_with_a_reason() {
        let (c, p) = Config::from_lookup(env(&[
            ("CLRPROF_FLUSH_MS", "fast"),
            ("CLRPROF_CLASSES", "maybe"),
            ("CLRPROF_OUTPUT", " "),
        ]));
        assert_eq!(c, Config::default());
        assert_eq!(p.len(), 3);
        assert!(p[0].to_string().contains("CLRPROF_OUTPUT"));
        assert!(p.iter().any(|x| x.variable == "CLRPROF_FLUSH_MS" && x.to_string().contains("1..=1000")));
        for bad in ["0", "100000", "fast", "-5"] {
            let (c, p) = Config::from_lookup(env(&[("CLRPROF_SAMPLE_RATE", bad)]));
            assert_eq!(c.sample_rate, 100, "{bad}");
            assert!(p[0].to_string().contains("1..=10000"), "{bad}");
        }
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_SAMPLE_RATE", "1000"), ("CLRPROF_SAMPLING", "0")]));
        assert!(p.is_empty());
        assert_eq!((c.sample_rate, c.sampling), (1000, false));
    }

    #[test]
    fn count_top_settings() {
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_COUNT_TOP", "5"), ("CLRPROF_COUNT_AFTER_MS", "2500")]));
        assert!(p.is_empty(), "{p:?}");
        assert_eq!((c.count_top, c.count_after_ms), (5, 2500));
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_COUNT_TOP", "1001"), ("CLRPROF_COUNT_AFTER_MS", "0")]));
        assert_eq!((c.count_top, c.count_after_ms), (0, 3000));
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p.iter().any(|x| x.variable == "CLRPROF_COUNT_TOP" && x.to_string().contains("0 to 1000")));
    }

    #[test]
    fn collector_settings() {
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_SERVER", "127.0.0.1:7878"), ("CLRPROF_TOKEN", "s3cret")]));
        assert!(p.is_empty());
        assert_eq!((c.server.as_deref(), c.token.as_deref()), (Some("127.0.0.1:7878"), Some("s3cret")));
        assert!(c.describe().contains("server=127.0.0.1:7878") && !c.describe().contains("s3cret"));
        let (c, p) = Config::from_lookup(env(&[
            ("CLRPROF_SERVER", "tls://collector.example:7878"),
            ("CLRPROF_TLS_CA", "/etc/ca.pem"),
            ("CLRPROF_TLS_CERT", " "),
        ]));
        assert!(p.is_empty());
        assert_eq!(c.server.as_deref(), Some("tls://collector.example:7878"));
        assert_eq!((c.tls.ca.as_deref(), c.tls.cert.as_deref()), (Some("/etc/ca.pem"), None));
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_SERVER", "tls://nohost")]));
        assert!(c.server.is_none() && p[0].to_string().contains("[tls://]ADDR:PORT"), "{p:?}");
        for bad in ["nohost", ":80", "host:0", "host:http", "host:99999"] {
            let (c, p) = Config::from_lookup(env(&[("CLRPROF_SERVER", bad)]));
            assert_eq!(c.server, None, "{bad}");
            assert!(p[0].to_string().contains("ADDR:PORT"), "{bad}");
        }
    }

    #[test]
    fn where_names_come_from() {
        assert!(!Config::default().metadata_importer);
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_METADATA", " Importer ")]));
        assert!(p.is_empty() && c.metadata_importer);
        assert!(c.describe().contains("metadata=importer"));
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_METADATA", "image")]));
        assert!(p.is_empty() && !c.metadata_importer);
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_METADATA", "disk")]));
        assert!(!c.metadata_importer);
        assert!(p[0].to_string().contains("image or importer"), "{p:?}");
    }

    #[test]
    fn allocation_sample_rate() {
        assert_eq!(Config::default().alloc_rate, DEFAULT_ALLOC_RATE);
        for (v, want) in [("0", 0), (" 250 ", 250), ("1000000", 1_000_000)] {
            let (c, p) = Config::from_lookup(env(&[("CLRPROF_ALLOC_RATE", v)]));
            assert!(p.is_empty(), "{v}: {p:?}");
            assert_eq!(c.alloc_rate, want);
        }
        for v in ["-1", "fast", "1000001", ""] {
            let (c, p) = Config::from_lookup(env(&[("CLRPROF_ALLOC_RATE", v)]));
            assert_eq!(c.alloc_rate, DEFAULT_ALLOC_RATE, "{v}");
            assert!(p[0].to_string().contains("CLRPROF_ALLOC_RATE"), "{p:?}");
            assert!(p[0].to_string().contains("1..=1000000, or 0"), "{p:?}");
        }
    }

    #[test]
    fn runtime_event_switches() {
        let (c, p) = Config::from_lookup(env(&[
            ("CLRPROF_ALLOC", "exact"),
            ("CLRPROF_EXCEPTIONS", "0"),
            ("CLRPROF_EVENTS", "1"),
        ]));
        assert!(p.is_empty());
        assert_eq!(c.alloc, AllocMode::Exact);
        assert!(!c.exceptions && c.gc && c.events);
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_ALLOC", "all"), ("CLRPROF_GC", "maybe")]));
        assert_eq!(c.alloc, AllocMode::Sampled);
        assert!(c.gc);
        assert_eq!(p.len(), 2);
        assert!(p.iter().any(|x| x.to_string().contains("sampled, exact or off")), "{p:?}");
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_EXCEPTIONS", "Exact")]));
        assert!(p.is_empty() && c.exceptions && c.exceptions_exact);
        assert!(c.describe().contains("exceptions=exact"));
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_EXCEPTIONS", "some")]));
        assert!(c.exceptions && !c.exceptions_exact);
        assert!(p[0].to_string().contains("1, 0 or exact"), "{p:?}");
    }

    #[test]
    fn process_filter() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let web = ProcessIdentity::new("/usr/share/dotnet/dotnet", &v(&["dotnet", "/srv/bin/Web.dll", "--port", "80"]));
        assert_eq!(web.assembly.as_deref(), Some("Web.dll"));
        assert_eq!(web.name(), "Web");
        assert!(web.matches(&[]));
        assert!(web.matches(&v(&["Web.dll"])));
        assert!(web.matches(&v(&["Web"])));
        assert!(web.matches(&v(&["Other", "W?b*"])));
        assert!(web.matches(&v(&["*--port 80"])));
        assert!(!web.matches(&v(&["Calls", "web"])));
        let app = ProcessIdentity::new("/opt/app/MyApp", &v(&["/opt/app/MyApp", "x.dll"]));
        assert_eq!((app.assembly.as_deref(), app.name().as_str()), (None, "MyApp"));
        assert!(app.matches(&v(&["My*"])));
        assert!(!app.matches(&v(&["x.dll"])));
        let (c, p) = Config::from_lookup(env(&[("CLRPROF_PROCESS", "Web; Calls*;")]));
        assert!(p.is_empty());
        assert_eq!(c.process, v(&["Web", "Calls*"]));
        assert!(glob("*", "") && glob("a*c", "abbc") && !glob("a*c", "abcd") && glob("*.dll", "x.dll"));
    }

    #[test]
    fn output_placeholders() {
        let (c, _) = Config::from_lookup(env(&[("CLRPROF_OUTPUT", "/t/{name}-{pid}-{time}.clrprof")]));
        assert_eq!(c.output_path_for(42, "My App", 1_795_370_928), "/t/My_App-42-20261122-180848.clrprof");
        assert_eq!(utc_stamp(0), "19700101-000000");
        assert_eq!(utc_stamp(951_782_400), "20000229-000000");
    }
}
