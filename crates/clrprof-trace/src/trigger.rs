//! Collection triggers (`record --trigger`, `CLRPROF_TRIGGER*`): the rules' syntax, shared by the
//! CLI (which refuses a bad rule before it starts anything) and the agent (which evaluates them).
//!
//! ```text
//! exception:System.TimeoutException   a throw of that exception type (full name)
//! gc-pause>50ms                        a GC suspension that held the process longer than 50 ms
//! cpu>80%:5s                           the process's CPU above 80% of one core, averaged over 5 s
//! request-p95>200ms                    the 95th percentile of ASP.NET Core requests that ended in
//!                                      the last 10 s above 200 ms (needs --async)
//! ```

/// Default of `CLRPROF_TRIGGER_WINDOW`: how long the high-rate window lasts.
pub const DEFAULT_WINDOW_NS: u64 = 10_000_000_000;
/// Default of `CLRPROF_TRIGGER_RATE`: the CPU sampling rate inside a window, per second per thread.
pub const DEFAULT_RATE_HZ: u32 = 1000;
/// Default of `CLRPROF_TRIGGER_COOLDOWN`: the shortest time between two fires of one rule.
pub const DEFAULT_COOLDOWN_NS: u64 = 60_000_000_000;
/// Default of `CLRPROF_TRIGGER_MAX`: the most fires of one rule in a run.
pub const DEFAULT_MAX: u32 = 5;
/// The sliding window of `request-p95`: requests that ended in the last 10 s.
pub const P95_WINDOW_NS: u64 = 10_000_000_000;
/// `request-p95` is not judged on fewer requests than this in its window.
pub const P95_MIN_REQUESTS: usize = 20;

/// One rule.
#[derive(Clone, Debug, PartialEq)]
pub enum Rule {
    /// A throw of this exception type (its full name, e.g. `System.TimeoutException`).
    Exception(String),
    /// A GC suspension longer than this many nanoseconds.
    GcPause(u64),
    /// The process's CPU time above `percent` of one core, averaged over `for_ns`.
    Cpu { percent: u32, for_ns: u64 },
    /// The 95th percentile of request durations over the last [`P95_WINDOW_NS`] above this many
    /// nanoseconds.
    RequestP95(u64),
}

/// What a fire does (`CLRPROF_TRIGGER_ACTION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Sample CPU at the trigger rate for the window, then go back to the run's rate.
    Window,
    /// Take a heap snapshot.
    Heap,
}

impl Action {
    pub fn parse(v: &str) -> Result<Action, String> {
        match v.trim() {
            "window" => Ok(Action::Window),
            "heap" => Ok(Action::Heap),
            other => Err(format!("unknown trigger action {other:?}: expected window or heap")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Action::Window => "window",
            Action::Heap => "heap",
        }
    }

    /// `TriggerFired.action`.
    pub fn code(self) -> u8 {
        match self {
            Action::Window => 0,
            Action::Heap => 1,
        }
    }
}

/// A duration such as `500ms`, `2.5s`, `1m` (no unit: seconds), in nanoseconds.
pub fn parse_duration(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, scale) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = v.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e9)
    } else if let Some(n) = v.strip_suffix('m') {
        (n, 60e9)
    } else {
        (v, 1e9)
    };
    let num = num.trim();
    if num.is_empty() || num.starts_with('+') {
        return None;
    }
    let x: f64 = num.parse().ok()?;
    (x.is_finite() && x >= 0.0 && x * scale < 1e18).then_some((x * scale) as u64)
}

const SYNTAX: &str =
    "expected exception:TYPE, gc-pause>DURATION, cpu>PERCENT%:DURATION or request-p95>DURATION (e.g. gc-pause>50ms)";

impl Rule {
    /// Parses one rule; the error says what is wrong and what is expected.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let t = text.trim();
        let bad = |why: &str| Err(format!("bad trigger {t:?}: {why}"));
        if let Some(name) = t.strip_prefix("exception:") {
            let name = name.trim();
            let ok = !name.is_empty()
                && !name.starts_with('.')
                && !name.ends_with('.')
                && name.chars().all(|c| c.is_alphanumeric() || "._+`".contains(c));
            if !ok {
                return bad("expected an exception type's full name after exception: (e.g. System.TimeoutException)");
            }
            return Ok(Rule::Exception(name.to_string()));
        }
        let positive = |v: &str, what: &str| -> Result<u64, String> {
            match parse_duration(v) {
                Some(n) if n > 0 => Ok(n),
                _ => Err(format!("bad trigger {t:?}: {what} {v:?} is not a positive duration (500ms, 2s, 1m)")),
            }
        };
        if let Some(v) = t.strip_prefix("gc-pause>") {
            return positive(v, "limit").map(Rule::GcPause);
        }
        if let Some(v) = t.strip_prefix("request-p95>") {
            return positive(v, "limit").map(Rule::RequestP95);
        }
        if let Some(v) = t.strip_prefix("cpu>") {
            let Some((pct, dur)) = v.split_once(':') else {
                return bad("expected cpu>PERCENT%:DURATION (e.g. cpu>80%:5s)");
            };
            let Some(p) = pct.trim().strip_suffix('%') else {
                return bad("the CPU share needs a % (e.g. cpu>80%:5s)");
            };
            let percent = match p.trim().parse::<u32>() {
                Ok(n) if (1..=100_000).contains(&n) => n,
                _ => return bad("the CPU share must be a whole percentage of one core, 1..=100000"),
            };
            let for_ns = positive(dur, "duration")?;
            if for_ns < 100_000_000 {
                return bad("the CPU duration must be at least 100ms (the agent measures every 100 ms)");
            }
            return Ok(Rule::Cpu { percent, for_ns });
        }
        bad(SYNTAX)
    }

    /// Parses `;`-separated rules (`CLRPROF_TRIGGER`).
    pub fn parse_list(text: &str) -> Result<Vec<Rule>, String> {
        text.split(';').map(str::trim).filter(|r| !r.is_empty()).map(Rule::parse).collect()
    }

    /// Whether the rule needs the request events (`--async`).
    pub fn needs_requests(&self) -> bool {
        matches!(self, Rule::RequestP95(_))
    }

    /// The unit of `TriggerFired.value` for this rule.
    pub fn unit(&self) -> &'static str {
        match self {
            Rule::Exception(_) => "throws",
            Rule::GcPause(_) | Rule::RequestP95(_) => "ns",
            Rule::Cpu { .. } => "% of one core",
        }
    }
}

fn fmt_ns(ns: u64) -> String {
    if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else {
        format!("{}us", ns / 1_000)
    }
}

impl std::fmt::Display for Rule {
    /// The canonical text, which [`Rule::parse`] reads back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rule::Exception(t) => write!(f, "exception:{t}"),
            Rule::GcPause(n) => write!(f, "gc-pause>{}", fmt_ns(*n)),
            Rule::Cpu { percent, for_ns } => write!(f, "cpu>{percent}%:{}", fmt_ns(*for_ns)),
            Rule::RequestP95(n) => write!(f, "request-p95>{}", fmt_ns(*n)),
        }
    }
}

/// The 95th percentile (nearest rank) of `values`, sorted in place; `None` when empty.
pub fn p95(values: &mut [u64]) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let rank = (values.len() * 95).div_ceil(100).max(1);
    Some(values[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_print_back() {
        for (text, rule) in [
            ("exception:System.TimeoutException", Rule::Exception("System.TimeoutException".into())),
            ("gc-pause>50ms", Rule::GcPause(50_000_000)),
            ("cpu>80%:5s", Rule::Cpu { percent: 80, for_ns: 5_000_000_000 }),
            ("request-p95>200ms", Rule::RequestP95(200_000_000)),
            ("gc-pause>1.5s", Rule::GcPause(1_500_000_000)),
        ] {
            assert_eq!(Rule::parse(text), Ok(rule.clone()), "{text}");
            assert_eq!(Rule::parse(&rule.to_string()), Ok(rule));
        }
        assert_eq!(Rule::parse_list(" gc-pause>1s ; exception:A.B ;").unwrap().len(), 2);
    }

    #[test]
    fn bad_rules_say_what_is_expected() {
        for (text, says) in [
            ("cpu>80", "cpu>PERCENT%:DURATION"),
            ("cpu>80:5s", "needs a %"),
            ("cpu>0%:5s", "whole percentage"),
            ("cpu>50%:10ms", "at least 100ms"),
            ("gc-pause>fast", "not a positive duration"),
            ("gc-pause>0ms", "not a positive duration"),
            ("exception:", "full name"),
            ("exception:Foo Bar", "full name"),
            ("latency>5ms", "expected exception:TYPE"),
            ("request-p95>-1s", "not a positive duration"),
        ] {
            let e = Rule::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
            assert!(e.contains(text), "{text}: {e}");
        }
        assert!(Action::parse("dump").unwrap_err().contains("window or heap"));
    }

    #[test]
    fn p95_is_the_nearest_rank() {
        let mut v: Vec<u64> = (1..=100).collect();
        assert_eq!(p95(&mut v), Some(95));
        let mut v: Vec<u64> = (1..=20).rev().collect();
        assert_eq!(p95(&mut v), Some(19));
        assert_eq!(p95(&mut []), None);
        assert_eq!(p95(&mut [7]), Some(7));
    }
}
