//! `clrprof diff`: loads two profiles and prints the delta table (computed by
//! `clrprof_query::diff`, laid out by `clrprof_report::diff`), and with `--fail-if` checks the
//! gate's rules (`clrprof_query::gate`) on it: one line per outcome on standard error, exit code
//! [`BREACH_EXIT`] when a rule breaches.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clrprof_model::events::AllocEstimator;
use clrprof_model::{Metric, Profile};
use clrprof_query::diff::{DiffQuery, DiffView};
use clrprof_query::gate::{self, Item, Rule, Scope, Verdict};
use clrprof_query::{select, Threads};
use clrprof_report::gate::ViewLink;
use clrprof_report::Format;

/// Exit code of a diff whose `--fail-if` rules breached (usage and input errors exit with 2).
pub const BREACH_EXIT: u8 = 3;

/// `diff --format`: a report format, or the markdown summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffFormat {
    Report(Format),
    Markdown,
}

/// Options of `clrprof diff`.
#[derive(Clone, Debug)]
pub struct DiffCommand {
    pub old: PathBuf,
    pub new: PathBuf,
    pub read: crate::load::ReadOptions,
    pub weight: Option<Metric>,
    pub normalize: bool,
    pub top: Option<usize>,
    pub format: DiffFormat,
    /// `None` = standard output.
    pub output: Option<PathBuf>,
    /// Resolved in each profile on its own (thread ids differ between runs; names need not).
    pub thread: Option<String>,
    /// `--fail-if` rules.
    pub rules: Vec<Rule>,
    pub min_samples: Option<u64>,
}

/// Whether the gate breached.
pub fn diff(c: &DiffCommand) -> Result<bool> {
    if let (Some(m), Some(_)) = (c.weight, &c.thread) {
        if m.is_event() {
            bail!("--thread does not apply to --weight {}: it is recorded per stack, not per thread", m.name());
        }
    }
    let base = crate::load::load(&c.old, &c.read)?;
    let new = crate::load::load(&c.new, &c.read)?;
    let base_threads =
        Threads::resolve(&base, c.thread.as_deref()).with_context(|| format!("in {}", c.old.display()))?;
    let new_threads = Threads::resolve(&new, c.thread.as_deref()).with_context(|| format!("in {}", c.new.display()))?;
    // The markdown's tables show a weight the rules gate on unless asked: the first sampled one's
    // (where the noise guard has something to say), else the first rule's.
    let weights = || c.rules.iter().filter_map(|r| Metric::from_name(&r.field));
    let rule_weight = || weights().find(|&m| clrprof_query::diff::is_sampled(m)).or_else(|| weights().next());
    let weight = match c.format {
        DiffFormat::Markdown => c.weight.or_else(rule_weight),
        DiffFormat::Report(_) => c.weight,
    };
    let q = DiffQuery {
        metric: weight,
        base_threads,
        new_threads,
        normalize: c.normalize,
        top: c.top,
        transforms: Vec::new(),
        min_samples: c.min_samples,
    };
    let (old_name, new_name) = (c.old.display().to_string(), c.new.display().to_string());
    let verdicts = check_profiles(&c.rules, &base, &new, (&old_name, &new_name), &q)?;
    let view = clrprof_query::diff::diff(&base, &new, &q);
    let text = match c.format {
        DiffFormat::Report(Format::Json) if !verdicts.is_empty() => {
            // The gate's outcome beside the rows: `gate: [{rule, tested, findings: [...]}]`.
            let mut doc = clrprof_report::diff::json(&view, &old_name, &new_name);
            doc["gate"] = serde_json::to_value(&verdicts)?;
            doc["breaches"] = clrprof_report::gate::breach_count(&verdicts).into();
            serde_json::to_string_pretty(&doc)? + "\n"
        }
        DiffFormat::Report(f) => clrprof_report::diff::render(&view, &old_name, &new_name, f),
        DiffFormat::Markdown => {
            let link = view_link(&old_name, &new_name);
            let top = c.top.unwrap_or(10);
            let full = clrprof_query::diff::diff(&base, &new, &DiffQuery { top: None, ..q.clone() });
            clrprof_report::gate::markdown(Some(&full), &old_name, &new_name, &verdicts, top, &link)
        }
    };
    write(c.output.as_ref(), &text)?;
    Ok(report_gate(&verdicts))
}

fn write(output: Option<&PathBuf>, text: &str) -> Result<()> {
    match output {
        Some(p) => std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
        }
    }
    Ok(())
}

/// Prints the gate's lines on standard error; true when a rule breached.
pub fn report_gate(verdicts: &[Verdict]) -> bool {
    if verdicts.is_empty() {
        return false;
    }
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(clrprof_report::gate::lines(verdicts).as_bytes());
    let n = clrprof_report::gate::breach_count(verdicts);
    let _ = if n > 0 {
        writeln!(err, "clrprof diff: FAILED: {n} breach{}", if n == 1 { "" } else { "es" })
    } else {
        writeln!(err, "clrprof diff: passed ({} rule{})", verdicts.len(), if verdicts.len() == 1 { "" } else { "s" })
    };
    n > 0
}

/// The viewer command for the markdown: a fixed port and token, so that its address is known.
fn view_link(old: &str, new: &str) -> ViewLink {
    let q =
        |s: &str| if s.contains([' ', '\'', '"']) { format!("'{}'", s.replace('\'', "'\\''")) } else { s.to_string() };
    ViewLink {
        command: format!("clrprof view {} --baseline {} --port 8080 --token ci --no-browser", q(new), q(old)),
        url: Some("http://127.0.0.1:8080/?token=ci".into()),
    }
}

/// True when `p` holds the weight `m` at all (a rule on a weight a trace lacks is an error).
fn has_weight(p: &Profile, m: Metric) -> bool {
    if m.is_event() {
        // Exceptions and lock waits are recorded by default; a run without any has 0 of them.
        return true;
    }
    let t = select::totals(p);
    let (count, value) = select::measure(m, &t);
    count > 0 || value > 0
}

fn what_records(m: Metric) -> &'static str {
    match m {
        Metric::Calls | Metric::Time => "record with --instrument",
        Metric::Wall => "record with wall-time sampling",
        Metric::AllocBytes | Metric::AllocCount => "record with allocations",
        _ => "record with sampling",
    }
}

/// Checks profile rules (every scope but `type`) on two profiles.
pub fn check_profiles(
    rules: &[Rule],
    base: &Profile,
    new: &Profile,
    names: (&str, &str),
    q: &DiffQuery,
) -> Result<Vec<Verdict>> {
    let mut views: Vec<(Metric, DiffView)> = Vec::new();
    let mut out = Vec::new();
    for r in rules {
        if let Scope::Type(_) = r.scope {
            bail!("--fail-if '{}': type rules compare heap snapshots, and these are profiles", r.text);
        }
        let m = Metric::from_name(&r.field).expect("the parser checked the weight");
        for (p, name) in [(base, names.0), (new, names.1)] {
            if !has_weight(p, m) {
                bail!("--fail-if '{}': {name} has no {} data ({})", r.text, m.name(), what_records(m));
            }
        }
        if matches!(m, Metric::AllocBytes | Metric::AllocCount) {
            // Allocation sites come from sampled stacks without per-function sample counts: the
            // noise guard cannot test them; totals are exact only when every object was counted.
            if !matches!(r.scope, Scope::Total) {
                bail!(
                    "--fail-if '{}': allocations per function are estimates from sampled stacks without sample counts, which the noise guard cannot test; use total:{}",
                    r.text,
                    m.name()
                );
            }
            for (p, name) in [(base, names.0), (new, names.1)] {
                if p.events.alloc_estimator != AllocEstimator::Exact {
                    bail!(
                        "--fail-if '{}': {name}'s allocations are sampled estimates without sample counts; record with exact allocation counts to gate on them",
                        r.text
                    );
                }
            }
        }
        if !views.iter().any(|(vm, _)| *vm == m) {
            let v = clrprof_query::diff::diff(base, new, &DiffQuery { metric: Some(m), top: None, ..q.clone() });
            views.push((m, v));
        }
        let v = &views.iter().find(|(vm, _)| *vm == m).expect("just added").1;
        let items: Vec<Item> = match &r.scope {
            Scope::Total => vec![Item {
                name: "total".into(),
                module: String::new(),
                base: v.base_sum as f64,
                new: v.new_sum as f64,
                noise: v.sum_noise,
            }],
            Scope::Function(pat) | Scope::Inclusive(pat) => {
                let inclusive = matches!(r.scope, Scope::Inclusive(_));
                let items: Vec<Item> = v
                    .functions
                    .iter()
                    .filter(|f| gate::matches(pat, &f.name))
                    .map(|f| Item {
                        name: f.name.clone(),
                        module: f.module.clone(),
                        base: if inclusive { f.base_total } else { f.base } as f64,
                        new: if inclusive { f.new_total } else { f.new } as f64,
                        noise: if inclusive { f.noise_total } else { f.noise },
                    })
                    .collect();
                if items.is_empty() {
                    bail!("--fail-if '{}': '{pat}' matches no function with {} in either profile", r.text, m.name());
                }
                items
            }
            Scope::Type(_) => unreachable!("refused above"),
        };
        out.push(gate::check(r, &items, v.unit));
    }
    Ok(out)
}

/// Checks `type` rules on a heap snapshot diff's rows.
pub fn check_heap(rules: &[Rule], rows: &[clrprof_heap::views::DiffRow]) -> Result<Vec<Verdict>> {
    let mut out = Vec::new();
    for r in rules {
        let Scope::Type(pat) = &r.scope else {
            bail!("--fail-if '{}': heap snapshots are compared here, which only type: rules test", r.text);
        };
        let bytes = r.field == "bytes";
        let items: Vec<Item> = rows
            .iter()
            .filter(|t| gate::matches(pat, &t.name))
            .map(|t| Item {
                name: t.name.clone(),
                module: String::new(),
                base: if bytes { t.base_size } else { t.base_count } as f64,
                new: if bytes { t.new_size } else { t.new_count } as f64,
                noise: None,
            })
            .collect();
        if items.is_empty() {
            bail!("--fail-if '{}': '{pat}' matches no type in either snapshot", r.text);
        }
        out.push(gate::check(r, &items, if bytes { "bytes" } else { "objects" }));
    }
    Ok(out)
}
