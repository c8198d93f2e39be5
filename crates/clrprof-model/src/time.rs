//! Time in the model: every cost and event keeps the time it happened (`ts`, ns since the agent
//! started), and a profile can be computed for any window of the run.
//!
//! Windows are asked for in two spellings, both parsed here: on the command line as times with a
//! unit (`--from 1.5s --to 2s`: [`parse_time`]), in the viewer's URLs as ns (`from=1500000000`:
//! [`TimeRange::parse_ns`]); either bound may be left out ([`TimeRange::between`]).

/// A window of the run in ns since the agent started: `from` inclusive, `to` exclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimeRange {
    pub from: u64,
    pub to: u64,
}

impl Default for TimeRange {
    fn default() -> Self {
        TimeRange::ALL
    }
}

impl TimeRange {
    /// The whole run.
    pub const ALL: TimeRange = TimeRange { from: 0, to: u64::MAX };

    pub fn new(from: u64, to: u64) -> TimeRange {
        TimeRange { from, to: to.max(from) }
    }

    pub fn is_all(&self) -> bool {
        *self == TimeRange::ALL
    }

    /// The window between optional bounds: neither is the whole run; a missing `from` is the
    /// run's start, a missing `to` its end (a `to` before `from` makes an empty window).
    pub fn between(from: Option<u64>, to: Option<u64>) -> TimeRange {
        match (from, to) {
            (None, None) => TimeRange::ALL,
            (f, t) => TimeRange::new(f.unwrap_or(0), t.unwrap_or(u64::MAX)),
        }
    }

    /// The window of a viewer URL's `from` and `to` (ns since the agent started, either optional;
    /// see [`between`](Self::between)).
    pub fn parse_ns(from: Option<&str>, to: Option<&str>) -> Result<TimeRange, String> {
        let bound = |name: &str, s: Option<&str>| {
            s.map(|s| s.parse::<u64>().map_err(|_| format!("'{name}' is not a time in ns"))).transpose()
        };
        Ok(TimeRange::between(bound("from", from)?, bound("to", to)?))
    }

    /// True when no time falls inside the window.
    pub fn is_empty(&self) -> bool {
        self.from >= self.to
    }

    /// True when an event at `ts` belongs to the window.
    pub fn contains(&self, ts: u64) -> bool {
        ts >= self.from && ts < self.to
    }

    /// The part of the interval `[a, b)` inside the window, if any.
    pub fn clip(&self, a: u64, b: u64) -> Option<(u64, u64)> {
        let (s, e) = (a.max(self.from), b.min(self.to));
        (s < e).then_some((s, e))
    }

    /// Length of the part of `[a, b)` inside the window.
    pub fn overlap(&self, a: u64, b: u64) -> u64 {
        self.clip(a, b).map_or(0, |(s, e)| e - s)
    }
}

/// Parses a time since the process started: a number with a unit (`1.5s`, `200ms`, `350us`,
/// `350µs`, `10ns`, `2m`); a bare `0` is allowed.
pub fn parse_time(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("'{s}' is not a time (examples: 1.5s, 200ms, 350us)"))?;
    let scale = match unit.trim() {
        "" if value == 0.0 => 1.0,
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "" => return Err(format!("'{s}' needs a unit: ns, us, ms, s or m (for example 1.5s or 200ms)")),
        u => return Err(format!("unknown time unit '{u}' in '{s}': use ns, us, ms, s or m")),
    };
    let ns = value * scale;
    if !ns.is_finite() || ns > u64::MAX as f64 {
        return Err(format!("'{s}' is out of range"));
    }
    Ok(ns.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_with_units() {
        assert_eq!(parse_time("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_time("200ms"), Ok(200_000_000));
        assert_eq!(parse_time("350us"), Ok(350_000));
        assert_eq!(parse_time("350µs"), Ok(350_000));
        assert_eq!(parse_time("10ns"), Ok(10));
        assert_eq!(parse_time("2m"), Ok(120_000_000_000));
        assert_eq!(parse_time("0"), Ok(0));
        assert!(parse_time("12").unwrap_err().contains("needs a unit"));
        assert!(parse_time("1h").unwrap_err().contains("unknown time unit"));
        assert!(parse_time("abc").is_err());
    }

    #[test]
    fn ranges_clip_intervals() {
        let r = TimeRange::new(100, 200);
        assert!(r.contains(100) && !r.contains(200) && !r.contains(99));
        assert_eq!(r.overlap(50, 150), 50);
        assert_eq!(r.overlap(150, 500), 50);
        assert_eq!(r.overlap(0, 100), 0);
        assert_eq!(r.clip(120, 130), Some((120, 130)));
        assert!(TimeRange::ALL.is_all() && TimeRange::ALL.contains(u64::MAX - 1));
    }

    #[test]
    fn ranges_from_optional_bounds() {
        assert_eq!(TimeRange::between(None, None), TimeRange::ALL);
        assert_eq!(TimeRange::between(Some(5), None), TimeRange { from: 5, to: u64::MAX });
        assert_eq!(TimeRange::between(None, Some(9)), TimeRange { from: 0, to: 9 });
        assert!(TimeRange::between(Some(9), Some(5)).is_empty() && !TimeRange::ALL.is_empty());
        assert_eq!(TimeRange::parse_ns(Some("10"), Some("20")), Ok(TimeRange::new(10, 20)));
        assert_eq!(TimeRange::parse_ns(None, None), Ok(TimeRange::ALL));
        assert_eq!(TimeRange::parse_ns(Some("1.5s"), None), Err("'from' is not a time in ns".to_string()));
        assert_eq!(TimeRange::parse_ns(None, Some("-1")), Err("'to' is not a time in ns".to_string()));
    }
}
