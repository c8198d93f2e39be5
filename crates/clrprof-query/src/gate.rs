//! The regression gate of `clrprof diff --fail-if`: rules such as `total:cpu>+5%`,
//! `function:Shop.*:cpu>+10%`, `calls:Shop.Orders.Load>+0` or `type:Shop.*:count>+0`, parsed
//! ([`parse_rules`]) and checked against a diff's rows ([`check`]).
//!
//! A rule is `SCOPE:[PATTERN:]FIELD OP THRESHOLD`:
//! - scopes: `total` (the sums; no pattern), `function` (self values), `inclusive` (inclusive
//!   values), `calls` (a function's entered calls: `calls:P` is `function:P:calls`, no field),
//!   `type` (heap snapshots: `count` or `bytes` of the types matching);
//! - a pattern matches display names with `*` (any run of characters) and `?` (one); an
//!   overload's parameter list may be left out;
//! - `OP` is `>` (grew beyond) or `<` (shrank beyond); the threshold is a percentage of the
//!   baseline (`+10%`), or an amount (`+0`, `+20ms` for times: a time needs its unit).
//!
//! A change on a sampled weight breaches only when it is significant ([`crate::noise`]): enough
//! samples, and |z| at least the larger of 3 and the z whose one-sided tail is 0.135% / m, m the
//! rows the rule tests with enough samples (Bonferroni: a rule over many functions is no likelier to breach on noise
//! than a rule over one). Exact weights (calls, instrumented time, heap counts) need no test.

use serde::Serialize;

use crate::noise::{z_of_tail, Noise, Z_SIGNIFICANT};

/// Where a rule looks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The sums of both profiles.
    Total,
    /// Functions' self values.
    Function(String),
    /// Functions' inclusive values.
    Inclusive(String),
    /// Heap snapshot types.
    Type(String),
}

/// `>` or `<`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Grew,
    Shrank,
}

/// A rule's limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Threshold {
    /// A change relative to the baseline, in percent.
    Percent(f64),
    /// A change in the weight's unit (ns for times).
    Amount(f64),
}

/// One `--fail-if` rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// As written (trimmed).
    pub text: String,
    pub scope: Scope,
    /// The weight's name (`cpu`, `calls`, `alloc-bytes`, …) or, for `type`, `count` or `bytes`.
    pub field: String,
    pub op: Op,
    pub threshold: Threshold,
}

const SCOPES: [&str; 5] = ["total", "function", "inclusive", "calls", "type"];

/// Parses `--fail-if` values: each may hold several rules separated by commas (a comma starts a
/// new rule only before a scope name, so a pattern may contain commas).
pub fn parse_rules(values: &[String]) -> Result<Vec<Rule>, String> {
    let mut rules = Vec::new();
    for v in values {
        let mut start = 0;
        let mut parts = Vec::new();
        for (i, _) in v.match_indices(',') {
            let rest = v[i + 1..].trim_start();
            if SCOPES.iter().any(|s| rest.starts_with(&format!("{s}:"))) {
                parts.push(&v[start..i]);
                start = i + 1;
            }
        }
        parts.push(&v[start..]);
        for p in parts {
            rules.push(parse_rule(p)?);
        }
    }
    Ok(rules)
}

/// Parses one rule; the error names the part that is wrong.
pub fn parse_rule(text: &str) -> Result<Rule, String> {
    let text = text.trim();
    let bad = |why: String| format!("--fail-if '{text}': {why}");
    let op_at = text
        .rfind(['>', '<'])
        .ok_or_else(|| bad("no comparison: expected > or < and a threshold, e.g. total:cpu>+5%".into()))?;
    let op = if text.as_bytes()[op_at] == b'>' { Op::Grew } else { Op::Shrank };
    let (lhs, rhs) = (&text[..op_at], text[op_at + 1..].trim());
    let (scope_name, rest) = lhs
        .split_once(':')
        .ok_or_else(|| bad(format!("'{lhs}' has no scope: start with one of {}", SCOPES.join(", "))))?;
    let pattern_and_field = |rest: &str, fields: &str| -> Result<(String, String), String> {
        let (p, f) = rest.rsplit_once(':').ok_or_else(|| {
            bad(format!("'{scope_name}:{rest}' needs a pattern and a field: {scope_name}:PATTERN:{fields}"))
        })?;
        if p.trim().is_empty() {
            return Err(bad(format!("the pattern of '{scope_name}:{rest}' is empty")));
        }
        Ok((p.trim().to_string(), f.trim().to_string()))
    };
    let (scope, field) = match scope_name.trim() {
        "total" => (Scope::Total, rest.trim().to_string()),
        "function" => {
            let (p, f) = pattern_and_field(rest, "WEIGHT")?;
            (Scope::Function(p), f)
        }
        "inclusive" => {
            let (p, f) = pattern_and_field(rest, "WEIGHT")?;
            (Scope::Inclusive(p), f)
        }
        "calls" => {
            if rest.trim().is_empty() {
                return Err(bad("calls: needs a function pattern, e.g. calls:Shop.Orders.Load>+0".into()));
            }
            (Scope::Function(rest.trim().to_string()), "calls".to_string())
        }
        "type" => {
            let (p, f) = pattern_and_field(rest, "count|bytes")?;
            if f != "count" && f != "bytes" {
                return Err(bad(format!("'{f}' is no heap type field: count or bytes")));
            }
            (Scope::Type(p), f)
        }
        s => return Err(bad(format!("unknown scope '{s}': one of {}", SCOPES.join(", ")))),
    };
    if !matches!(scope, Scope::Type(_)) && clrprof_model::Metric::from_name(&field).is_none() {
        let names: Vec<&str> = clrprof_model::METRICS.iter().map(|m| m.name).collect();
        return Err(bad(format!("unknown weight '{field}': one of {}", names.join(", "))));
    }
    let threshold = parse_threshold(rhs, &field).map_err(bad)?;
    Ok(Rule { text: text.to_string(), scope, field, op, threshold })
}

fn parse_threshold(s: &str, field: &str) -> Result<Threshold, String> {
    if s.is_empty() {
        return Err("no threshold after the comparison: e.g. +5% or +0".into());
    }
    if let Some(p) = s.strip_suffix('%') {
        return p
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .map(Threshold::Percent)
            .ok_or_else(|| format!("'{s}' is no percentage (e.g. +5%)"));
    }
    let (sign, body) = match s.as_bytes()[0] {
        b'+' => (1.0, &s[1..]),
        b'-' => (-1.0, &s[1..]),
        _ => (1.0, s),
    };
    let is_time = clrprof_model::Metric::from_name(field).is_some_and(|m| m.is_time());
    if is_time {
        let ns = clrprof_model::parse_time(body).map_err(|e| format!("threshold: {e}"))?;
        return Ok(Threshold::Amount(sign * ns as f64));
    }
    body.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .map(|x| Threshold::Amount(sign * x))
        .ok_or_else(|| format!("'{s}' is no threshold: a percentage (+5%) or an amount (+0)"))
}

/// True when `name` matches the glob `pat` (`*`, `?`), or does once its parameter list is cut.
pub fn matches(pat: &str, name: &str) -> bool {
    glob(pat.as_bytes(), name.as_bytes())
        || name.find('(').is_some_and(|i| i > 0 && glob(pat.as_bytes(), &name.as_bytes()[..i]))
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// One thing a rule tests: a function, a type or the sums.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub name: String,
    pub module: String,
    pub base: f64,
    pub new: f64,
    /// Sampled weights: the noise of the change (`None`: exact).
    pub noise: Option<Noise>,
}

/// A rule's outcome on one item that went beyond the threshold.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    pub rule: String,
    pub name: String,
    pub module: String,
    pub base: f64,
    pub new: f64,
    pub delta: f64,
    /// Change in percent of the baseline; `None` when the baseline is 0.
    pub change_percent: Option<f64>,
    /// The weight's unit (`ns`, `calls`, `bytes`, …).
    pub unit: String,
    pub noise: Option<Noise>,
    /// |z| the change needed to breach (sampled weights).
    pub z_needed: Option<f64>,
    /// A breach (else beyond the threshold, but noise).
    pub breach: bool,
}

/// A rule's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub rule: String,
    /// Items the rule tested.
    pub tested: usize,
    /// Beyond the threshold: breaches first, then the changes the noise guard set aside; each by
    /// |delta|, largest first.
    pub findings: Vec<Finding>,
}

impl Verdict {
    pub fn breaches(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.breach)
    }
    pub fn passed(&self) -> bool {
        !self.findings.iter().any(|f| f.breach)
    }
}

/// |z| a sampled change must reach in a rule over `m` sampled items.
pub fn z_needed(m: usize) -> f64 {
    let one_sided = crate::noise::normal_tail(Z_SIGNIFICANT);
    Z_SIGNIFICANT.max(z_of_tail(one_sided / m.max(1) as f64))
}

/// Checks `rule` on `items` (the rows its scope and pattern selected), values in `unit`.
pub fn check(rule: &Rule, items: &[Item], unit: &str) -> Verdict {
    // Rows with too few samples never breach: they are no tests.
    let sampled = items.iter().filter(|i| i.noise.is_some_and(|n| !n.few_samples)).count();
    let need = z_needed(sampled);
    let mut findings: Vec<Finding> = items
        .iter()
        .filter_map(|it| {
            let delta = it.new - it.base;
            let change_percent = (it.base != 0.0).then(|| delta * 100.0 / it.base);
            let beyond = match (rule.threshold, rule.op) {
                (Threshold::Amount(t), Op::Grew) => delta > t,
                (Threshold::Amount(t), Op::Shrank) => delta < t,
                // A function absent from the baseline grew by more than any percentage.
                (Threshold::Percent(t), Op::Grew) => change_percent.map_or(delta > 0.0, |c| c > t),
                (Threshold::Percent(t), Op::Shrank) => change_percent.is_some_and(|c| c < t),
            };
            if !beyond {
                return None;
            }
            let breach = match it.noise {
                None => true,
                Some(n) => !n.few_samples && n.z.abs() >= need,
            };
            Some(Finding {
                rule: rule.text.clone(),
                name: it.name.clone(),
                module: it.module.clone(),
                base: it.base,
                new: it.new,
                delta,
                change_percent,
                unit: unit.to_string(),
                noise: it.noise,
                z_needed: it.noise.map(|_| need),
                breach,
            })
        })
        .collect();
    findings.sort_by(|a, b| {
        b.breach.cmp(&a.breach).then(b.delta.abs().total_cmp(&a.delta.abs())).then_with(|| a.name.cmp(&b.name))
    });
    Verdict { rule: rule.text.clone(), tested: items.len(), findings }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::noise::{noise, PerSample, MIN_SAMPLES};

    fn rule(s: &str) -> Rule {
        parse_rule(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn rules_parse() {
        let r = rule("total:cpu>+5%");
        assert_eq!(
            (r.scope, r.field.as_str(), r.op, r.threshold),
            (Scope::Total, "cpu", Op::Grew, Threshold::Percent(5.0))
        );
        let r = rule(" function:Shop.*:cpu>+10% ");
        assert_eq!((r.text.as_str(), r.scope), ("function:Shop.*:cpu>+10%", Scope::Function("Shop.*".into())));
        let r = rule("calls:Shop.Orders.Load>+0");
        assert_eq!(
            (r.scope, r.field.as_str(), r.threshold),
            (Scope::Function("Shop.Orders.Load".into()), "calls", Threshold::Amount(0.0))
        );
        let r = rule("inclusive:Shop.Api.*:wall<-20ms");
        assert_eq!(
            (r.scope, r.op, r.threshold),
            (Scope::Inclusive("Shop.Api.*".into()), Op::Shrank, Threshold::Amount(-20e6))
        );
        let r = rule("type:Shop.*:count>+0");
        assert_eq!((r.scope, r.field.as_str()), (Scope::Type("Shop.*".into()), "count"));
        // Commas split rules only before a scope; a pattern keeps its own.
        let rs = parse_rules(&["total:cpu>+5%, calls:F(int, string)>+0".into(), "type:A:bytes>1000".into()]).unwrap();
        let texts: Vec<&str> = rs.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(texts, ["total:cpu>+5%", "calls:F(int, string)>+0", "type:A:bytes>1000"]);
    }

    #[test]
    fn bad_rules_name_the_bad_part() {
        let err = |s: &str| parse_rule(s).unwrap_err();
        assert_eq!(
            err("total:cpu"),
            "--fail-if 'total:cpu': no comparison: expected > or < and a threshold, e.g. total:cpu>+5%"
        );
        assert_eq!(
            err("totl:cpu>+5%"),
            "--fail-if 'totl:cpu>+5%': unknown scope 'totl': one of total, function, inclusive, calls, type"
        );
        assert!(
            err("total:cpux>+5%").contains("unknown weight 'cpux': one of time, calls, cpu, wall"),
            "{}",
            err("total:cpux>1")
        );
        assert_eq!(
            err("total:cpu>+5"),
            "--fail-if 'total:cpu>+5': threshold: '5' needs a unit: ns, us, ms, s or m (for example 1.5s or 200ms)"
        );
        assert_eq!(err("total:cpu>abc%"), "--fail-if 'total:cpu>abc%': 'abc%' is no percentage (e.g. +5%)");
        assert_eq!(
            err("function:cpu>+5%"),
            "--fail-if 'function:cpu>+5%': 'function:cpu' needs a pattern and a field: function:PATTERN:WEIGHT"
        );
        assert_eq!(err("type:A:size>+0"), "--fail-if 'type:A:size>+0': 'size' is no heap type field: count or bytes");
        assert_eq!(
            err("calls:>+0"),
            "--fail-if 'calls:>+0': calls: needs a function pattern, e.g. calls:Shop.Orders.Load>+0"
        );
        assert_eq!(err("total:calls>"), "--fail-if 'total:calls>': no threshold after the comparison: e.g. +5% or +0");
    }

    #[test]
    fn patterns() {
        assert!(matches("Shop.*", "Shop.Orders.Load"));
        assert!(matches("*.Load", "Shop.Orders.Load"));
        assert!(matches("Shop.Orders.Load", "Shop.Orders.Load(int)"));
        assert!(matches("Shop.?rders.*", "Shop.Orders.Load"));
        assert!(!matches("Shop.*", "Shopping.Cart"));
        assert!(!matches("Shop.Orders", "Shop.Orders.Load"));
    }

    fn item(name: &str, base: f64, new: f64, noise: Option<Noise>) -> Item {
        Item { name: name.into(), module: "a.dll".into(), base, new, noise }
    }

    #[test]
    fn exact_changes_breach_and_sampled_ones_need_significance() {
        let r = PerSample { base: 4e6, new: 4e6 };
        let sampled =
            |k1: u64, k2: u64| item("S", k1 as f64 * 4e6, k2 as f64 * 4e6, Some(noise(k1, k2, r, MIN_SAMPLES)));
        let v = check(&rule("calls:*>+0"), &[item("A", 300.0, 600.0, None), item("B", 5.0, 5.0, None)], "calls");
        assert_eq!((v.tested, v.breaches().count()), (2, 1));
        let f = &v.findings[0];
        assert_eq!((f.name.as_str(), f.delta, f.change_percent, f.breach), ("A", 300.0, Some(100.0), true));
        // +400% on 1 against 5 samples: beyond the threshold, but noise.
        let v = check(&rule("function:*:cpu>+10%"), &[sampled(1, 5)], "ns");
        assert!(v.passed() && v.findings.len() == 1 && !v.findings[0].breach, "{v:?}");
        // Doubled over hundreds of samples: a breach.
        let v = check(&rule("function:*:cpu>+10%"), &[sampled(300, 600), sampled(300, 310)], "ns");
        assert_eq!(v.breaches().count(), 1);
        assert_eq!(v.findings[0].z_needed, Some(z_needed(2)));
        // Bonferroni: 10 functions need |z| ≥ 3.64, 100 need 4.20.
        assert!((z_needed(1) - 3.0).abs() < 1e-3 && (z_needed(10) - 3.64).abs() < 0.01, "{}", z_needed(10));
        assert!((z_needed(100) - 4.20).abs() < 0.01, "{}", z_needed(100));
        // A new function (baseline 0) grew by more than any percentage; shrinking needs a baseline.
        let v = check(&rule("calls:*>+50%"), &[item("N", 0.0, 3.0, None)], "calls");
        assert_eq!((v.findings[0].change_percent, v.findings[0].breach), (None, true));
        let v = check(&rule("calls:*<-50%"), &[item("G", 10.0, 0.0, None), item("N", 0.0, 3.0, None)], "calls");
        assert_eq!(v.breaches().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["G"]);
    }
}
