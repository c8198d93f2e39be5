//! The agent's configuration as its `CLRPROF_*` variables: what it records ([`Recording`],
//! [`InstrumentOptions`]) and one builder of the variables ([`AgentEnv`]) that `record` puts in the
//! child's environment and `attach` sends as the attach request's client data.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// What the agent records, the same for `record` and `attach`: sampling and runtime events.
#[derive(Clone, Debug)]
pub struct Recording {
    /// Record class loads (`CLRPROF_CLASSES`).
    pub classes: bool,
    /// Run the sampler (`CLRPROF_SAMPLING`).
    pub sampling: bool,
    /// Samples per second per thread (`CLRPROF_SAMPLE_RATE`).
    pub sample_rate: u32,
    /// Name the runtime's type loads in samples (`CLRPROF_TYPE_LOADS`).
    pub type_loads: bool,
    /// Runtime events: exceptions, GC, allocations, locks, the event log.
    pub events: EventOptions,
    /// Heap snapshots (`CLRPROF_HEAP_*`).
    pub heap: HeapOptions,
    /// The task library's events for logical async stacks and awaiting time (`CLRPROF_ASYNC`).
    pub asynchrony: bool,
    /// Collection triggers (`CLRPROF_TRIGGER*`).
    pub triggers: TriggerOptions,
}

/// Collection triggers: the rules, and what a fire does (`None`: the agent's default).
#[derive(Clone, Debug, Default)]
pub struct TriggerOptions {
    pub rules: Vec<clrprof_trace::trigger::Rule>,
    pub action: Option<clrprof_trace::trigger::Action>,
    pub window_ns: Option<u64>,
    pub rate_hz: Option<u32>,
    pub cooldown_ns: Option<u64>,
    pub max: Option<u32>,
}

/// When the agent takes heap snapshots.
#[derive(Clone, Debug, Default)]
pub struct HeapOptions {
    /// One as soon as an attach session starts (`clrprof heap`).
    pub on_attach: bool,
    /// At these times after the process started, in nanoseconds (`--heap-snapshot-at`).
    pub at_ns: Vec<u64>,
    /// Memory the agent may hold for one snapshot, in MiB (`CLRPROF_HEAP_BUFFER_MB`); `None`: its default.
    pub buffer_mb: Option<u64>,
}

impl HeapOptions {
    /// Only what `clrprof heap` needs: no sampling, no runtime events, one snapshot at attach.
    pub fn snapshot_only() -> Recording {
        Recording {
            classes: false,
            sampling: false,
            sample_rate: 100,
            type_loads: false,
            events: EventOptions {
                exceptions: false,
                exact_exceptions: false,
                gc: false,
                alloc: "off",
                log: false,
                locks: false,
            },
            heap: HeapOptions { on_attach: true, ..HeapOptions::default() },
            asynchrony: false,
            triggers: TriggerOptions::default(),
        }
    }
}

impl Default for Recording {
    fn default() -> Self {
        Recording {
            classes: true,
            sampling: true,
            sample_rate: 100,
            type_loads: false,
            events: EventOptions::default(),
            heap: HeapOptions::default(),
            asynchrony: false,
            triggers: TriggerOptions::default(),
        }
    }
}

/// Enter/leave instrumentation settings of `clrprof record`.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct InstrumentOptions {
    pub enabled: bool,
    /// No timing, call counts only.
    pub counts_only: bool,
    /// Keep ordered enter/leave events.
    pub flow: bool,
    /// Leave JIT inlining on.
    pub keep_inlining: bool,
    /// `CLRPROF_CALLTREE_MAX_MB` (None: the agent's default).
    pub calltree_max_mb: Option<u64>,
    /// `record --count`: call counts by IL probes instead of hooks (`enabled` stays false).
    pub count: bool,
    /// `--count-scope all`.
    pub count_all: bool,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

/// Which runtime events the agent records (the event recorders: exceptions, GC, allocations,
/// locks, the event log).
#[derive(Clone, Debug)]
pub struct EventOptions {
    pub exceptions: bool,
    /// Every exception observed, no storm sampling (`--exact-exceptions`).
    pub exact_exceptions: bool,
    pub gc: bool,
    /// `sampled`, `exact` or `off`.
    pub alloc: &'static str,
    /// The full event log (`--events`).
    pub log: bool,
    /// Monitor lock contention.
    pub locks: bool,
}

impl Default for EventOptions {
    fn default() -> Self {
        EventOptions { exceptions: true, exact_exceptions: false, gc: true, alloc: "sampled", log: false, locks: true }
    }
}

/// The agent's cache directory (`CLRPROF_CACHE_DIR`): the variable's own value when it is set
/// (empty: no cache), else `$XDG_CACHE_HOME/clrprof`, else `$HOME/.cache/clrprof`, else none.
pub fn cache_dir(get: impl Fn(&str) -> Option<std::ffi::OsString>) -> String {
    let set = |k: &str| get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(v) = get("CLRPROF_CACHE_DIR") {
        return v.to_string_lossy().into_owned();
    }
    let dir = set("XDG_CACHE_HOME").filter(|d| d.is_absolute()).or_else(|| set("HOME").map(|h| h.join(".cache")));
    dir.map(|d| d.join("clrprof").to_string_lossy().into_owned()).unwrap_or_default()
}

/// The agent's `CLRPROF_*` variables, in the order they were set.
#[derive(Clone, Debug, Default)]
pub struct AgentEnv {
    vars: Vec<(&'static str, OsString)>,
}

impl AgentEnv {
    fn set(&mut self, key: &'static str, value: impl Into<OsString>) -> &mut Self {
        self.vars.push((key, value.into()));
        self
    }

    /// The trace to write (`CLRPROF_OUTPUT`; `record`'s may hold `{pid}`).
    pub fn output(&mut self, path: impl Into<OsString>) -> &mut Self {
        self.set("CLRPROF_OUTPUT", path)
    }

    /// The control socket of an `attach` session (`CLRPROF_CONTROL`).
    pub fn control(&mut self, socket: &Path) -> &mut Self {
        self.set("CLRPROF_CONTROL", socket)
    }

    /// No cache directory (`CLRPROF_CACHE_DIR` empty), replacing the one [`recording`](Self::recording)
    /// set: for a process in another container, where ours is not in its filesystem and its own
    /// would keep files behind.
    pub fn no_cache(&mut self) -> &mut Self {
        self.vars.retain(|(k, _)| *k != "CLRPROF_CACHE_DIR");
        self.set("CLRPROF_CACHE_DIR", "")
    }

    /// The agent's diagnostics file (`CLRPROF_LOG`), made absolute: the agent's working directory
    /// is not ours.
    pub fn log(&mut self, log: Option<&Path>) -> &mut Self {
        match log {
            Some(l) => self.set("CLRPROF_LOG", std::path::absolute(l).unwrap_or_else(|_| l.to_path_buf())),
            None => self,
        }
    }

    /// What the agent records: sampling, class loads, runtime events, and its cache directory.
    pub fn recording(&mut self, r: &Recording) -> &mut Self {
        let b = |v: bool| if v { "1" } else { "0" };
        let e = &r.events;
        let exceptions = match (e.exceptions, e.exact_exceptions) {
            (false, _) => "0",
            (true, false) => "1",
            (true, true) => "exact",
        };
        self.set("CLRPROF_CLASSES", b(r.classes))
            .set("CLRPROF_SAMPLING", b(r.sampling))
            .set("CLRPROF_SAMPLE_RATE", r.sample_rate.to_string())
            .set("CLRPROF_TYPE_LOADS", b(r.type_loads))
            .set("CLRPROF_EXCEPTIONS", exceptions)
            .set("CLRPROF_GC", b(e.gc))
            .set("CLRPROF_ALLOC", e.alloc)
            .set("CLRPROF_LOCKS", b(e.locks))
            .set("CLRPROF_EVENTS", b(e.log))
            .set("CLRPROF_CACHE_DIR", cache_dir(|k| std::env::var_os(k)));
        if r.asynchrony {
            self.set("CLRPROF_ASYNC", "1");
        }
        self.triggers(&r.triggers);
        self.heap(&r.heap)
    }

    /// Collection triggers: set only when there are rules.
    pub fn triggers(&mut self, t: &TriggerOptions) -> &mut Self {
        if t.rules.is_empty() {
            return self;
        }
        let rules: Vec<String> = t.rules.iter().map(|r| r.to_string()).collect();
        self.set("CLRPROF_TRIGGER", rules.join(";"));
        if let Some(a) = t.action {
            self.set("CLRPROF_TRIGGER_ACTION", a.name());
        }
        if let Some(n) = t.window_ns {
            self.set("CLRPROF_TRIGGER_WINDOW", format!("{}ms", n / 1_000_000));
        }
        if let Some(n) = t.rate_hz {
            self.set("CLRPROF_TRIGGER_RATE", n.to_string());
        }
        if let Some(n) = t.cooldown_ns {
            self.set("CLRPROF_TRIGGER_COOLDOWN", format!("{}ms", n / 1_000_000));
        }
        if let Some(n) = t.max {
            self.set("CLRPROF_TRIGGER_MAX", n.to_string());
        }
        self
    }

    /// Heap snapshots: set only when asked for.
    fn heap(&mut self, h: &HeapOptions) -> &mut Self {
        if h.on_attach {
            self.set("CLRPROF_HEAP_SNAPSHOT", "1");
        }
        if !h.at_ns.is_empty() {
            let at: Vec<String> = h.at_ns.iter().map(|n| format!("{}ms", n / 1_000_000)).collect();
            self.set("CLRPROF_HEAP_SNAPSHOT_AT", at.join(","));
        }
        if let Some(mb) = h.buffer_mb {
            self.set("CLRPROF_HEAP_BUFFER_MB", mb.to_string());
        }
        self
    }

    /// `attach --count-top N`: the N methods with the most CPU samples after `after`.
    pub fn count_top(&mut self, n: u32, after: std::time::Duration) -> &mut Self {
        self.set("CLRPROF_COUNT_TOP", n.to_string()).set("CLRPROF_COUNT_AFTER_MS", after.as_millis().max(1).to_string())
    }

    /// Enter/leave instrumentation (`record` only: the runtime allows the hooks at start-up only).
    pub fn instrument(&mut self, i: &InstrumentOptions) -> &mut Self {
        let b = |v: bool| if v { "1" } else { "0" };
        self.set("CLRPROF_INSTRUMENT", b(i.enabled));
        if i.enabled {
            self.set("CLRPROF_TIMING", b(!i.counts_only))
                .set("CLRPROF_FLOW", b(i.flow))
                .set("CLRPROF_INLINING", b(i.keep_inlining))
                .set("CLRPROF_INCLUDE", i.include.join(";"))
                .set("CLRPROF_EXCLUDE", i.exclude.join(";"));
            if let Some(mb) = i.calltree_max_mb {
                self.set("CLRPROF_CALLTREE_MAX_MB", mb.to_string());
            }
        }
        if i.count {
            self.set("CLRPROF_COUNT", "1")
                .set("CLRPROF_COUNT_SCOPE", if i.count_all { "all" } else { "app" })
                .set("CLRPROF_INCLUDE", i.include.join(";"))
                .set("CLRPROF_EXCLUDE", i.exclude.join(";"));
        }
        self
    }

    /// Only the processes matching these globs are profiled (`CLRPROF_PROCESS`).
    pub fn process(&mut self, globs: Option<&str>) -> &mut Self {
        match globs {
            Some(p) => self.set("CLRPROF_PROCESS", p),
            None => self,
        }
    }

    /// Stream to a collector (`CLRPROF_SERVER`) with its token (`CLRPROF_TOKEN`, only with a server).
    pub fn server(&mut self, server: Option<&str>, token: Option<&str>) -> &mut Self {
        if let Some(s) = server {
            self.set("CLRPROF_SERVER", s);
            if let Some(t) = token {
                self.set("CLRPROF_TOKEN", t);
            }
        }
        self
    }

    /// TLS to a `tls://` collector: the CA to trust (`CLRPROF_TLS_CA`) and a client certificate and
    /// key for mutual TLS (`CLRPROF_TLS_CERT`, `CLRPROF_TLS_KEY`).
    pub fn tls(&mut self, t: &TlsFiles) -> &mut Self {
        for (var, v) in [("CLRPROF_TLS_CA", &t.ca), ("CLRPROF_TLS_CERT", &t.cert), ("CLRPROF_TLS_KEY", &t.key)] {
            if let Some(v) = v {
                // Absolute: the agent may run in another working directory (attach).
                let v = std::path::absolute(v).unwrap_or_else(|_| v.clone());
                self.set(var, v.to_string_lossy().as_ref());
            }
        }
        self
    }

    /// The variables, in the order they were set.
    pub fn vars(&self) -> impl Iterator<Item = (&'static str, &std::ffi::OsStr)> {
        self.vars.iter().map(|(k, v)| (*k, v.as_os_str()))
    }

    /// The variables as `KEY=value` lines (the client data of an attach request).
    pub fn lines(&self) -> String {
        self.vars().map(|(k, v)| format!("{k}={}\n", Path::new(v).display())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_directory_follows_the_environment() {
        use std::ffi::OsString;
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| OsString::from(p.1))
        };
        assert_eq!(cache_dir(env(&[("HOME", "/home/u")])), "/home/u/.cache/clrprof");
        assert_eq!(cache_dir(env(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/c")])), "/c/clrprof");
        assert_eq!(cache_dir(env(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "rel")])), "/home/u/.cache/clrprof");
        assert_eq!(cache_dir(env(&[("HOME", "/home/u"), ("CLRPROF_CACHE_DIR", "/mine")])), "/mine");
        assert_eq!(cache_dir(env(&[("HOME", "/home/u"), ("CLRPROF_CACHE_DIR", "")])), "", "set empty: off");
        assert_eq!(cache_dir(env(&[])), "");
    }

    #[test]
    fn record_and_attach_variables() {
        let mut env = AgentEnv::default();
        env.output("/t/app-{pid}.clrprof").log(None).recording(&Recording::default());
        env.instrument(&InstrumentOptions::default()).server(None, Some("secret"));
        let keys: Vec<&str> = env.vars().map(|(k, _)| k).collect();
        assert_eq!(keys[0], "CLRPROF_OUTPUT");
        assert!(keys.contains(&"CLRPROF_ALLOC") && keys.contains(&"CLRPROF_INSTRUMENT"), "{keys:?}");
        assert!(!keys.contains(&"CLRPROF_TOKEN") && !keys.contains(&"CLRPROF_TIMING"), "{keys:?}");
        let mut env = AgentEnv::default();
        env.server(Some("127.0.0.1:7878"), Some("secret"));
        assert_eq!(env.lines(), "CLRPROF_SERVER=127.0.0.1:7878\nCLRPROF_TOKEN=secret\n");
    }
}

/// `--tls-ca`, `--tls-cert`, `--tls-key` of `record` and `attach` (streaming to a `tls://` collector).
#[derive(Clone, Debug, Default)]
pub struct TlsFiles {
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}
