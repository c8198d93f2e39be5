//! The regression gate's output (`clrprof diff --fail-if`): one line per rule outcome for the job's
//! log, and `--format markdown`, the summary a CI job posts (verdict, breaches, top regressions and
//! improvements with their samples and significance, how to open the diff in `clrprof view`).

use clrprof_query::diff::DiffView;
use clrprof_query::gate::{Finding, Verdict};
use clrprof_query::noise::Noise;

use crate::diff::{significance, uncertainty};
use crate::ms;

/// An amount in a unit, for people: ms for ns, plain otherwise.
fn amount(unit: &str, x: f64) -> String {
    let neg = x < 0.0;
    let a = x.abs().round() as u64;
    let s = if unit == "ns" { format!("{} ms", ms(a)) } else { format!("{a} {unit}") };
    if neg {
        format!("-{s}")
    } else {
        s
    }
}

fn signed_amount(unit: &str, x: f64) -> String {
    if x > 0.0 {
        format!("+{}", amount(unit, x))
    } else {
        amount(unit, x)
    }
}

fn percent(p: Option<f64>) -> String {
    match p {
        Some(p) => format!("{p:+.1}%"),
        None => "new".into(),
    }
}

/// The sampling evidence of a finding: `exact`, or samples, z and the z needed.
fn evidence(f: &Finding) -> String {
    match (f.noise, f.z_needed) {
        (Some(n), Some(_)) if n.few_samples => {
            format!("{} → {} samples: too few to tell", n.base_samples, n.new_samples)
        }
        (Some(n), Some(need)) => format!(
            "{} → {} samples, z = {:.1} {} {need:.1}",
            n.base_samples,
            n.new_samples,
            n.z,
            if n.z.abs() >= need { "≥" } else { "<" }
        ),
        _ => "exact".into(),
    }
}

fn subject(f: &Finding) -> String {
    if f.module.is_empty() {
        f.name.clone()
    } else {
        format!("{} ({})", f.name, f.module)
    }
}

/// One line per breach (`BREACH`), per change beyond a threshold that the noise guard set aside
/// (`noise`), and per rule that passed (`pass`).
pub fn lines(verdicts: &[Verdict]) -> String {
    let mut s = String::new();
    for v in verdicts {
        for f in &v.findings {
            s += &format!(
                "{} {}: {}: {} → {}, {} ({}); {}\n",
                if f.breach { "BREACH" } else { "noise " },
                f.rule,
                subject(f),
                amount(&f.unit, f.base),
                amount(&f.unit, f.new),
                signed_amount(&f.unit, f.delta),
                percent(f.change_percent),
                evidence(f)
            );
        }
        if v.passed() {
            s += &format!("pass   {}: {} tested\n", v.rule, v.tested);
        }
    }
    s
}

/// The verdict in a word and the number of breaches.
pub fn breach_count(verdicts: &[Verdict]) -> usize {
    verdicts.iter().map(|v| v.breaches().count()).sum()
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|").replace('<', "&lt;").replace('>', "&gt;")
}

/// Percent-encodes a URL fragment value.
fn url_encode(s: &str) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            o.push(b as char);
        } else {
            o += &format!("%{b:02X}");
        }
    }
    o
}

/// How to open the diff in the viewer, for the markdown.
#[derive(Clone, Debug, Default)]
pub struct ViewLink {
    /// The command (`clrprof view new --baseline old …`).
    pub command: String,
    /// The viewer's address with its token (`http://127.0.0.1:8080/?token=ci`), when the command
    /// fixes both; rows link into the diff view there.
    pub url: Option<String>,
}

fn findings_table(fs: &[&Finding]) -> String {
    let mut s = String::from(
        "| rule | function / type | base | new | Δ | change | evidence |\n|---|---|---:|---:|---:|---:|---|\n",
    );
    for f in fs {
        s += &format!(
            "| `{}` | {} | {} | {} | {} | {} | {} |\n",
            md_escape(&f.rule),
            md_escape(&subject(f)),
            amount(&f.unit, f.base),
            amount(&f.unit, f.new),
            signed_amount(&f.unit, f.delta),
            percent(f.change_percent),
            evidence(f)
        );
    }
    s
}

fn noise_cells(v: &DiffView, n: Option<Noise>, base: i64) -> (String, String, String) {
    match n {
        Some(n) => {
            (format!("{} → {}", n.base_samples, n.new_samples), uncertainty(v, &n, base), significance(&n).to_string())
        }
        None => ("exact".into(), "".into(), "".into()),
    }
}

/// The markdown summary: the verdict (when rules were given), breaches, changes set aside as noise,
/// the `top` largest regressions and improvements of `v` (self values), and how to open the diff.
pub fn markdown(
    v: Option<&DiffView>,
    base: &str,
    new: &str,
    verdicts: &[Verdict],
    top: usize,
    link: &ViewLink,
) -> String {
    let mut s = String::new();
    let breaches = breach_count(verdicts);
    if verdicts.is_empty() {
        s += "## clrprof diff\n\n";
    } else if breaches == 0 {
        s += &format!(
            "## clrprof diff: passed ({} rule{})\n\n",
            verdicts.len(),
            if verdicts.len() == 1 { "" } else { "s" }
        );
    } else {
        s += &format!("## clrprof diff: FAILED, {breaches} breach{}\n\n", if breaches == 1 { "" } else { "es" });
    }
    s += &format!("Base `{}` → new `{}`", md_escape(base), md_escape(new));
    if let Some(v) = v {
        let unit = v.unit;
        s += &format!(
            ", weight {}: total {} → {} ({})",
            v.metric.name(),
            amount(unit, v.base_sum as f64),
            amount(unit, v.new_sum as f64),
            if v.base_sum > 0 {
                format!("{:+.1}%", (v.new_sum - v.base_sum) as f64 * 100.0 / v.base_sum as f64)
            } else {
                "n/a".into()
            }
        );
        if let Some(n) = v.sum_noise {
            s += &format!(
                ", {} → {} samples, {} at 95%, significant: {}",
                n.base_samples,
                n.new_samples,
                uncertainty(v, &n, v.base_sum),
                significance(&n)
            );
        }
    }
    s += ".\n\n";
    let (hit, noise): (Vec<&Finding>, Vec<&Finding>) =
        verdicts.iter().flat_map(|v| v.findings.iter()).partition(|f| f.breach);
    if !hit.is_empty() {
        s += "### Breaches\n\n";
        s += &findings_table(&hit);
        s += "\n";
    }
    if !noise.is_empty() {
        s += "### Beyond a threshold but within the sampling noise (not breaches)\n\n";
        s += &findings_table(&noise);
        s += "\n";
    }
    let passed: Vec<&Verdict> = verdicts.iter().filter(|v| v.passed()).collect();
    if !passed.is_empty() {
        s += "Rules passed: ";
        s += &passed
            .iter()
            .map(|v| format!("`{}` ({} tested)", md_escape(&v.rule), v.tested))
            .collect::<Vec<_>>()
            .join(", ");
        s += "\n\n";
    }
    if let Some(v) = v {
        for (title, grew) in [("Top regressions", true), ("Top improvements", false)] {
            // Sampled weights: only the significant changes; the others are counted.
            let moved = |r: &&clrprof_query::diff::DiffRow| if grew { r.delta > 0 } else { r.delta < 0 };
            let shown = |r: &&clrprof_query::diff::DiffRow| r.noise.is_none_or(|n| n.significant);
            let noise = v.functions.iter().filter(moved).filter(|r| !shown(r)).count();
            let rows: Vec<_> = v.functions.iter().filter(moved).filter(shown).take(top).collect();
            s += &format!("### {title} ({}, self)\n\n", v.metric.name());
            if rows.is_empty() {
                s += "None significant.";
                if noise > 0 {
                    s += &format!(" ({noise} within the sampling noise.)");
                }
                s += "\n\n";
                continue;
            }
            s += "| function | module | base | new | Δ | change | samples | ± 95% | significant |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n";
            for r in rows {
                let name = match &link.url {
                    Some(u) => format!(
                        "[{}]({u}#view=diff&w={}&q={})",
                        md_escape(&r.name),
                        v.metric.name(),
                        url_encode(&r.name)
                    ),
                    None => md_escape(&r.name),
                };
                let (samples, pm, sig) = noise_cells(v, r.noise, r.base);
                let change = match (r.only_in, r.base) {
                    (Some(clrprof_query::diff::Side::New), _) | (_, 0) => "new".to_string(),
                    _ => format!("{:+.1}%", r.delta as f64 * 100.0 / r.base as f64),
                };
                s += &format!(
                    "| {name} | {} | {} | {} | {} | {change} | {samples} | {pm} | {sig} |\n",
                    md_escape(&r.module),
                    amount(v.unit, r.base as f64),
                    amount(v.unit, r.new as f64),
                    signed_amount(v.unit, r.delta as f64),
                );
            }
            if noise > 0 {
                s += &format!("\n{noise} more within the sampling noise (not significant, or too few samples).\n");
            }
            s += "\n";
        }
    }
    if !link.command.is_empty() {
        s += "### Open the diff\n\n```sh\n";
        s += &link.command;
        s += "\n```\n\n";
        match &link.url {
            Some(u) => s += &format!("then [the diff view]({u}#view=diff) (the function names above link into it).\n"),
            None => s += "and open its Diff tab.\n",
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_query::gate::{check, parse_rule, Item};
    use clrprof_query::noise::{noise, PerSample};

    fn verdicts() -> Vec<Verdict> {
        let r = PerSample { base: 4e6, new: 4e6 };
        let sampled = |name: &str, k1: u64, k2: u64| Item {
            name: name.into(),
            module: "Diff.dll".into(),
            base: k1 as f64 * 4e6,
            new: k2 as f64 * 4e6,
            noise: Some(noise(k1, k2, r, 20)),
        };
        let calls =
            Item { name: "Diff.Changing.Unit".into(), module: "Diff.dll".into(), base: 300.0, new: 600.0, noise: None };
        vec![
            check(&parse_rule("calls:Diff.Changing.Unit>+0").unwrap(), &[calls], "calls"),
            check(
                &parse_rule("function:Diff.*:cpu>+25%").unwrap(),
                &[
                    sampled("Diff.Changing.Unit", 75, 150),
                    sampled("Diff.Program.Main", 1, 5),
                    sampled("Diff.Steady.Unit", 75, 76),
                ],
                "ns",
            ),
            check(&parse_rule("total:alloc-count>+0").unwrap(), &[], "objects"),
        ]
    }

    #[test]
    fn one_line_per_outcome() {
        let t = lines(&verdicts());
        assert_eq!(
            t,
            "BREACH calls:Diff.Changing.Unit>+0: Diff.Changing.Unit (Diff.dll): 300 calls → 600 calls, +300 calls (+100.0%); exact\n\
             BREACH function:Diff.*:cpu>+25%: Diff.Changing.Unit (Diff.dll): 300.000 ms → 600.000 ms, +300.000 ms (+100.0%); 75 → 150 samples, z = 5.0 ≥ 3.2\n\
             noise  function:Diff.*:cpu>+25%: Diff.Program.Main (Diff.dll): 4.000 ms → 20.000 ms, +16.000 ms (+400.0%); 1 → 5 samples: too few to tell\n\
             pass   total:alloc-count>+0: 0 tested\n"
        );
        assert_eq!(breach_count(&verdicts()), 2);
    }

    #[test]
    fn markdown_has_the_verdict_the_breaches_and_the_way_to_the_viewer() {
        let link = ViewLink {
            command: "clrprof view new.clrprof --baseline old.clrprof --port 8080 --token ci".into(),
            url: Some("http://127.0.0.1:8080/?token=ci".into()),
        };
        let m = markdown(None, "old.clrprof", "new.clrprof", &verdicts(), 5, &link);
        assert!(
            m.starts_with(
                "## clrprof diff: FAILED, 2 breaches\n\nBase `old.clrprof` → new `new.clrprof`.\n\n### Breaches\n"
            ),
            "{m}"
        );
        assert!(m.contains("| `calls:Diff.Changing.Unit&gt;+0` | Diff.Changing.Unit (Diff.dll) | 300 calls | 600 calls | +300 calls | +100.0% | exact |\n"), "{m}");
        assert!(m.contains("### Beyond a threshold but within the sampling noise (not breaches)\n"), "{m}");
        assert!(m.contains("Rules passed: `total:alloc-count&gt;+0` (0 tested)\n"), "{m}");
        assert!(
            m.contains("```sh\nclrprof view new.clrprof --baseline old.clrprof --port 8080 --token ci\n```\n"),
            "{m}"
        );
        assert!(m.contains("[the diff view](http://127.0.0.1:8080/?token=ci#view=diff)"), "{m}");
        assert_eq!(url_encode("A.B<int>(x, y)"), "A.B%3Cint%3E%28x%2C%20y%29");
    }
}
