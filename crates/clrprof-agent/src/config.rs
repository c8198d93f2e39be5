//! Configuration from `CLRPROF_*` environment variables, read once at `Initialize`. An invalid
//! value is reported (log file and a `Message` record) and replaced by its default: the app runs.

use std::collections::BTreeMap;

/// The agent's settings. Each field documents its variable and default.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// `CLRPROF_OUTPUT`: trace path; `{pid}` is replaced by the process id. Default
    /// `clrprof-{pid}.clrprof` in the working directory.
    pub output: String,
    /// `CLRPROF_LOG`: diagnostics file. Default: none.
    pub log: Option<String>,
    /// `CLRPROF_FLUSH_MS`: writer flush interval, 1..=1000 ms. Default 50.
    pub flush_ms: u64,
    /// `CLRPROF_CLASSES`: record class loads (`1`/`0`). Default on.
    pub classes: bool,
    /// `CLRPROF_EXCEPTIONS`: record exceptions (`1`/`0`). Default on.
    pub exceptions: bool,
    /// `CLRPROF_GC`: record garbage collections and runtime suspensions (`1`/`0`). Default on.
    pub gc: bool,
    /// `CLRPROF_ALLOC`: `sampled`, `exact` or `off`. Default `sampled`.
    pub alloc: AllocMode,
    /// `CLRPROF_EVENTS`: keep every runtime event for the event log (`1`/`0`). Default off.
    pub events: bool,
    /// `CLRPROF_LOCKS`: record Monitor lock contention with the waiting stack (`1`/`0`). Default on.
    pub locks: bool,
}

/// How allocations are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocMode {
    Off,
    /// The runtime's allocation sampling events through an in-process EventPipe session.
    Sampled,
    /// Every object (`ObjectAllocated`); slows every allocation.
    Exact,
}

impl AllocMode {
    pub fn name(self) -> &'static str {
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
            classes: true,
            exceptions: true,
            gc: true,
            alloc: AllocMode::Sampled,
            events: false,
            locks: true,
        }
    }
}

/// A value that was rejected, with the reason.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigProblem {
    pub variable: &'static str,
    pub value: String,
    pub reason: String,
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
    /// Reads the configuration through `get` (the process environment in the agent).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> (Config, Vec<ConfigProblem>) {
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
        if let Some(v) = get("CLRPROF_CLASSES") {
            match parse_bool(&v) {
                Some(b) => c.classes = b,
                None => bad("CLRPROF_CLASSES", &v, "expected 1 or 0; using 1"),
            }
        }
        for (var, field) in
            [("CLRPROF_EXCEPTIONS", &mut c.exceptions), ("CLRPROF_GC", &mut c.gc), ("CLRPROF_EVENTS", &mut c.events)]
        {
            if let Some(v) = get(var) {
                match parse_bool(&v) {
                    Some(b) => *field = b,
                    None => bad(var, &v, if *field { "expected 1 or 0; using 1" } else { "expected 1 or 0; using 0" }),
                }
            }
        }
        if let Some(v) = get("CLRPROF_ALLOC") {
            match v.trim().to_ascii_lowercase().as_str() {
                "sampled" => c.alloc = AllocMode::Sampled,
                "exact" => c.alloc = AllocMode::Exact,
                "off" | "0" | "none" => c.alloc = AllocMode::Off,
                _ => bad("CLRPROF_ALLOC", &v, "expected sampled, exact or off; using sampled"),
            }
        }
        (c, problems)
    }

    /// The output path with `{pid}` expanded.
    pub fn output_path(&self, pid: u32) -> String {
        self.output.replace("{pid}", &pid.to_string())
    }

    /// `key=value` lines for the trace's `ProcessStart.config`.
    pub fn describe(&self) -> String {
        let mut m = BTreeMap::new();
        m.insert("output", self.output.clone());
        m.insert("flush_ms", self.flush_ms.to_string());
        m.insert("classes", self.classes.to_string());
        m.insert("exceptions", self.exceptions.to_string());
        m.insert("gc", self.gc.to_string());
        m.insert("alloc", self.alloc.name().to_string());
        m.insert("events", self.events.to_string());
        m.insert("locks", self.locks.to_string());
        m.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }
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
        assert!(p[1].to_string().contains("sampled, exact or off"), "{}", p[1]);
    }
}
