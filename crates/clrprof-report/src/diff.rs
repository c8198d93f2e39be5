//! `clrprof diff`: the delta table of `clrprof_query::diff` as text, CSV or JSON. For the sampled
//! weights every row has its sample counts, the 95% uncertainty of its change and whether the
//! change is significant ([`clrprof_query::noise`]).

use clrprof_query::diff::{DiffRow, DiffView, Side};
use clrprof_query::noise::{Noise, Z_SIGNIFICANT};
use serde_json::{json, Map, Value};

use crate::text_table::{Align, TextTable};
use crate::{ms, Format};

/// A value in the unit, for text: ms for times, plain otherwise; signed.
fn value(v: &DiffView, x: i64) -> String {
    let s = if v.unit == "ns" { ms(x.unsigned_abs()) } else { x.unsigned_abs().to_string() };
    if x < 0 {
        format!("-{s}")
    } else {
        s
    }
}

fn signed(v: &DiffView, x: i64) -> String {
    if x > 0 {
        format!("+{}", value(v, x))
    } else {
        value(v, x)
    }
}

/// Change relative to the baseline's self value: `+100.0%`, `new`, `gone`.
fn change(r: &DiffRow, base: i64, delta: i64) -> String {
    match r.only_in {
        Some(Side::New) => "new".into(),
        Some(Side::Base) => "gone".into(),
        None if delta == 0 => "0.0%".into(),
        None if base == 0 => "n/a".into(),
        None => format!("{:+.1}%", delta as f64 * 100.0 / base as f64),
    }
}

/// The 95% uncertainty of a change: in percent of the baseline, or as an amount when the
/// baseline is 0.
pub fn uncertainty(v: &DiffView, n: &Noise, base: i64) -> String {
    if base > 0 {
        format!("±{:.1}%", n.pm95 * 100.0 / base as f64)
    } else {
        let unit = if v.unit == "ns" { "ms" } else { v.unit };
        format!("±{} {unit}", value(v, n.pm95.round() as i64))
    }
}

/// `yes`, `no` or `few samples`: is a sampled change significant.
pub fn significance(n: &Noise) -> &'static str {
    if n.few_samples {
        "few samples"
    } else if n.significant {
        "yes"
    } else {
        "no"
    }
}

/// A side's total for the header: `1.234 ms (56 samples)`.
fn sum_line(v: &DiffView, sum: i64, samples: Option<u64>, shown: &str) -> String {
    match samples {
        Some(k) => format!("{} {shown} ({k} samples)", value(v, sum)),
        None => format!("{} {shown}", value(v, sum)),
    }
}

/// Renders a diff. `base` and `new` name the two sources (the text header, JSON).
pub fn render(v: &DiffView, base: &str, new: &str, format: Format) -> String {
    match format {
        Format::Json => json_text(v, base, new),
        Format::Csv => csv(v),
        Format::Text => text(v, base, new),
    }
}

fn text(v: &DiffView, base: &str, new: &str) -> String {
    let shown = if v.unit == "ns" { "ms" } else { v.unit };
    let mut s = format!("clrprof diff — weight: {} ({shown})\n", v.metric.name());
    let n = v.sum_noise;
    s += &format!("base: {base} — total {}\n", sum_line(v, v.base_sum, n.map(|n| n.base_samples), shown));
    s += &format!("new:  {new} — total {}\n", sum_line(v, v.new_sum, n.map(|n| n.new_samples), shown));
    let change_all = if v.base_sum > 0 {
        format!("{:+.1}%", (v.new_sum - v.base_sum) as f64 * 100.0 / v.base_sum as f64)
    } else {
        "n/a".into()
    };
    s += &format!("change: {} {shown} ({change_all})", signed(v, v.new_sum - v.base_sum));
    if let Some(n) = n {
        s += &format!(
            " {} at 95%, z = {:.1}: {}",
            uncertainty(v, &n, v.base_sum),
            n.z,
            match significance(&n) {
                "yes" => "significant",
                "no" => "not significant",
                _ => "too few samples",
            }
        );
    }
    s += "\n";
    if v.normalized {
        s += &format!(
            "normalized: the baseline's values are scaled by {:.4} so its total equals the new total (raw baseline total {} {shown})\n",
            v.scale,
            value(v, v.base_sum_raw.min(i64::MAX as u64) as i64)
        );
    }
    if v.estimated {
        s += "ESTIMATED per stack: the agent walked only part of the throw stacks (or an exception storm was sampled); the totals are the Exceptions tables' counts\n";
    }
    s += "Δ = new − base; self values ranked by |Δ self|; total = inclusive (recursion counted once)\n";
    if n.is_some() {
        s += &format!(
            "samples: behind each self value; ±: 95% uncertainty of Δ self from the sampling; significant: |z| ≥ {Z_SIGNIFICANT} with at least {} samples on one side\n",
            v.min_samples
        );
    }
    s += "\n";
    let mut headers = vec![
        ("Δ self", Align::Right),
        ("change", Align::Right),
        ("base self", Align::Right),
        ("new self", Align::Right),
        ("Δ total", Align::Right),
        ("base total", Align::Right),
        ("new total", Align::Right),
    ];
    if v.calls {
        headers.extend([("base calls", Align::Right), ("new calls", Align::Right), ("Δ calls", Align::Right)]);
    }
    if n.is_some() {
        headers.extend([
            ("base samples", Align::Right),
            ("new samples", Align::Right),
            ("±", Align::Right),
            ("significant", Align::Left),
        ]);
    }
    headers.extend([("function", Align::Left), ("module", Align::Left)]);
    let mut t = TextTable::new(&headers);
    for r in &v.functions {
        let mut cells = vec![
            signed(v, r.delta),
            change(r, r.base, r.delta),
            value(v, r.base),
            value(v, r.new),
            signed(v, r.delta_total),
            value(v, r.base_total),
            value(v, r.new_total),
        ];
        if let Some(c) = r.calls {
            cells.extend([c.base.to_string(), c.new.to_string(), format!("{:+}", c.delta)]);
        } else if v.calls {
            cells.extend(["".into(), "".into(), "".into()]);
        }
        if let Some(x) = r.noise {
            cells.extend([
                x.base_samples.to_string(),
                x.new_samples.to_string(),
                uncertainty(v, &x, r.base),
                significance(&x).to_string(),
            ]);
        }
        cells.extend([r.name.clone(), r.module.clone()]);
        t.row(cells);
    }
    s += &t.render();
    if v.count > v.functions.len() {
        let more = v.count - v.functions.len();
        s += &format!("({more} more function{}; --top N shows more)\n", if more == 1 { "" } else { "s" });
    }
    if v.functions.is_empty() {
        s += "(no function has a cost for this weight in either profile)\n";
    }
    s
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv(v: &DiffView) -> String {
    let mut s = String::from("name,module,base,new,delta,base_total,new_total,delta_total");
    if v.calls {
        s += ",base_calls,new_calls,delta_calls";
    }
    if v.sum_noise.is_some() {
        s += ",base_samples,new_samples,pm95,z,significant,few_samples";
    }
    s += ",only_in\n";
    for r in &v.functions {
        s += &format!(
            "{},{},{},{},{},{},{},{}",
            csv_field(&r.name),
            csv_field(&r.module),
            r.base,
            r.new,
            r.delta,
            r.base_total,
            r.new_total,
            r.delta_total
        );
        if v.calls {
            match r.calls {
                Some(c) => s += &format!(",{},{},{}", c.base, c.new, c.delta),
                None => s += ",,,",
            }
        }
        if v.sum_noise.is_some() {
            match r.noise {
                Some(n) => {
                    s += &format!(
                        ",{},{},{:.0},{:.3},{},{}",
                        n.base_samples, n.new_samples, n.pm95, n.z, n.significant, n.few_samples
                    )
                }
                None => s += ",,,,,,",
            }
        }
        s += match r.only_in {
            Some(Side::Base) => ",base\n",
            Some(Side::New) => ",new\n",
            None => ",\n",
        };
    }
    s
}

/// A change's noise in JSON: `{"base_samples", "new_samples", "pm95", "z", "significant",
/// "few_samples"}` (`pm95` in the weight's unit).
pub fn noise_json(n: &Noise) -> Value {
    json!({"base_samples": n.base_samples, "new_samples": n.new_samples, "pm95": n.pm95.round() as i64,
           "z": (n.z * 1000.0).round() / 1000.0, "significant": n.significant, "few_samples": n.few_samples})
}

/// The JSON document: `{"weight", "unit", "normalized", "base_file", "new_file", "base_sum",
/// "new_sum", "functions": [{"name", "module", "base", "new", "delta", "base_total", "new_total",
/// "delta_total"}]}`; functions also carry `base_calls`, `new_calls` and `delta_calls` when both
/// profiles are instrumented; with a sampled weight the document has `min_samples` and
/// `sum_noise`, and each function `noise` and `noise_total` ([`noise_json`]).
pub fn json(v: &DiffView, base: &str, new: &str) -> Value {
    let functions: Vec<Value> = v
        .functions
        .iter()
        .map(|r| {
            let mut o = Map::new();
            o.insert("name".into(), json!(r.name));
            o.insert("module".into(), json!(r.module));
            o.insert("base".into(), json!(r.base));
            o.insert("new".into(), json!(r.new));
            o.insert("delta".into(), json!(r.delta));
            o.insert("base_total".into(), json!(r.base_total));
            o.insert("new_total".into(), json!(r.new_total));
            o.insert("delta_total".into(), json!(r.delta_total));
            if let Some(c) = r.calls {
                o.insert("base_calls".into(), json!(c.base));
                o.insert("new_calls".into(), json!(c.new));
                o.insert("delta_calls".into(), json!(c.delta));
            }
            if let (Some(n), Some(t)) = (r.noise, r.noise_total) {
                o.insert("noise".into(), noise_json(&n));
                o.insert("noise_total".into(), noise_json(&t));
            }
            Value::Object(o)
        })
        .collect();
    let mut doc = json!({
        "weight": v.metric.name(),
        "unit": v.unit,
        "normalized": v.normalized,
        "base_file": base,
        "new_file": new,
        "base_sum": v.base_sum,
        "new_sum": v.new_sum,
        "functions": functions,
    });
    if v.normalized {
        doc["scale"] = json!(v.scale);
        doc["base_sum_raw"] = json!(v.base_sum_raw);
    }
    if let Some(n) = v.sum_noise {
        doc["min_samples"] = json!(v.min_samples);
        doc["sum_noise"] = noise_json(&n);
    }
    if v.count > v.functions.len() {
        doc["count"] = json!(v.count);
    }
    if v.estimated {
        doc["estimated"] = json!(true);
    }
    doc
}

fn json_text(v: &DiffView, base: &str, new: &str) -> String {
    let mut s = serde_json::to_string_pretty(&json(v, base, new)).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_model::{FrameKind, Metric};
    use clrprof_query::diff::CallsDelta;

    fn view(calls: bool) -> DiffView {
        let row = |name: &str, base: i64, new: i64, only_in| DiffRow {
            name: name.into(),
            module: "a.dll".into(),
            kind: FrameKind::Managed,
            base,
            new,
            delta: new - base,
            base_total: base * 2,
            new_total: new * 2,
            delta_total: (new - base) * 2,
            only_in,
            calls: calls.then_some(CallsDelta { base: 3, new: 5, delta: 2 }),
            noise: None,
            noise_total: None,
        };
        DiffView {
            metric: Metric::Cpu,
            unit: "ns",
            normalized: false,
            scale: 1.0,
            base_sum: 3_000_000,
            new_sum: 5_500_000,
            base_sum_raw: 3_000_000,
            calls,
            count: 3,
            estimated: false,
            sum_noise: None,
            min_samples: 20,
            functions: vec![
                row("Grew", 1_000_000, 3_500_000, None),
                row("Gone, \"quoted\"", 2_000_000, 0, Some(Side::Base)),
            ],
        }
    }

    #[test]
    fn json_has_exactly_the_documented_fields() {
        let v: Value = serde_json::from_str(&render(&view(false), "a", "b", Format::Json)).unwrap();
        assert_eq!(
            v,
            json!({"weight": "cpu", "unit": "ns", "normalized": false, "base_file": "a", "new_file": "b",
                   "base_sum": 3_000_000, "new_sum": 5_500_000, "count": 3, "functions": [
                {"name": "Grew", "module": "a.dll", "base": 1_000_000, "new": 3_500_000, "delta": 2_500_000,
                 "base_total": 2_000_000, "new_total": 7_000_000, "delta_total": 5_000_000},
                {"name": "Gone, \"quoted\"", "module": "a.dll", "base": 2_000_000, "new": 0, "delta": -2_000_000,
                 "base_total": 4_000_000, "new_total": 0, "delta_total": -4_000_000}]})
        );
        let v: Value = serde_json::from_str(&render(&view(true), "a", "b", Format::Json)).unwrap();
        assert_eq!((&v["functions"][0]["base_calls"], &v["functions"][0]["delta_calls"]), (&json!(3), &json!(2)));
    }

    #[test]
    fn csv_and_text() {
        let csv = render(&view(true), "a", "b", Format::Csv);
        assert_eq!(
            csv,
            "name,module,base,new,delta,base_total,new_total,delta_total,base_calls,new_calls,delta_calls,only_in\n\
             Grew,a.dll,1000000,3500000,2500000,2000000,7000000,5000000,3,5,2,\n\
             \"Gone, \"\"quoted\"\"\",a.dll,2000000,0,-2000000,4000000,0,-4000000,3,5,2,base\n"
        );
        let t = render(&view(false), "old.clrprof", "new.clrprof", Format::Text);
        assert!(t.starts_with("clrprof diff — weight: cpu (ms)\nbase: old.clrprof — total 3.000 ms\nnew:  new.clrprof — total 5.500 ms\nchange: +2.500 ms (+83.3%)\n"), "{t}");
        assert!(t.contains("  +2.500  +250.0%      1.000     3.500   +5.000       2.000      7.000  Grew"), "{t}");
        assert!(t.contains("-2.000     gone"), "{t}");
        assert!(t.ends_with("(1 more function; --top N shows more)\n"), "{t}");
    }

    #[test]
    fn sampled_rows_show_samples_uncertainty_and_significance() {
        use clrprof_query::noise::{noise, PerSample};
        // 4 µs per sample: the counts match the values.
        let r = PerSample { base: 4e3, new: 4e3 };
        let mut v = view(false);
        v.sum_noise = Some(noise(750, 1375, r, 20));
        v.functions[0].noise = Some(noise(250, 875, r, 20));
        v.functions[0].noise_total = Some(noise(500, 1750, r, 20));
        v.functions[1].noise = Some(noise(5, 0, r, 20));
        v.functions[1].noise_total = Some(noise(10, 0, r, 20));
        let t = render(&v, "old.clrprof", "new.clrprof", Format::Text);
        assert!(t.contains("base: old.clrprof — total 3.000 ms (750 samples)\n"), "{t}");
        assert!(t.contains("change: +2.500 ms (+83.3%) ±12.0% at 95%, z = 13.6: significant\n"), "{t}");
        let grew = t.lines().find(|l| l.contains("Grew")).unwrap();
        assert!(grew.contains("  250          875  ±26.3%  yes  "), "{grew}");
        let gone = t.lines().find(|l| l.contains("Gone")).unwrap();
        assert!(gone.contains("few samples"), "{gone}");
        let j: Value = serde_json::from_str(&render(&v, "a", "b", Format::Json)).unwrap();
        assert_eq!(j["min_samples"], 20);
        assert_eq!(j["sum_noise"]["base_samples"], 750);
        let n = &j["functions"][0]["noise"];
        assert_eq!(
            (&n["base_samples"], &n["new_samples"], &n["significant"]),
            (&json!(250), &json!(875), &json!(true))
        );
        assert_eq!(j["functions"][1]["noise"]["few_samples"], true);
        let csv = render(&v, "a", "b", Format::Csv);
        assert!(csv.starts_with("name,module,base,new,delta,base_total,new_total,delta_total,base_samples,new_samples,pm95,z,significant,few_samples,only_in\n"), "{csv}");
    }
}
