//! End to end: `clrprof diff` of two real runs of apps/Diff that differ in one function's work
//! (Changing.Unit called twice as often; Steady.Unit the same), sampled and instrumented, and the
//! command's formats and errors.

use crate::common::*;

use std::path::{Path, PathBuf};

use serde_json::Value;

fn record_ok(dir: &Path, name: &str, args: &[&str], extra: &[&str]) -> PathBuf {
    let trace = dir.join(format!("{name}.clrprof"));
    let out = record("Diff", args, &trace, extra);
    assert!(out.status.success(), "record failed: {}{}", text(&out.stdout), text(&out.stderr));
    trace
}

fn diff(old: &Path, new: &Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(clrprof_exe())
        .arg("diff")
        .arg(old)
        .arg(new)
        .args(extra)
        .output()
        .expect("run clrprof diff")
}

fn diff_json(old: &Path, new: &Path, extra: &[&str]) -> Value {
    let out = diff(old, new, &[&["--format", "json"], extra].concat());
    assert!(out.status.success(), "diff failed: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("diff JSON parses")
}

fn function<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in the diff: {v}"))
}

fn i(v: &Value, key: &str) -> i64 {
    v[key].as_i64().unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[test]
fn sampled_diff_shows_the_doubled_function_and_the_unchanged_one() {
    let _machine = machine::shared();
    let dir = scratch("diff-sampled");
    // 300 calls of each unit against 300 and 600: Changing.Unit's CPU time doubles.
    let old = record_ok(&dir, "old", &["300", "300"], &["-r", "250"]);
    let new = record_ok(&dir, "new", &["300", "600"], &["-r", "250"]);
    let v = diff_json(&old, &new, &["--weight", "cpu"]);
    assert_eq!(
        (v["weight"].as_str(), v["unit"].as_str(), v["normalized"].as_bool()),
        (Some("cpu"), Some("ns"), Some(false))
    );
    let changing = function(&v, "Diff.Changing.Unit");
    let steady = function(&v, "Diff.Steady.Unit");
    assert_eq!(changing["module"], "Diff.dll");
    for f in [changing, steady] {
        assert_eq!(i(f, "delta"), i(f, "new") - i(f, "base"), "{f}");
        assert_eq!(i(f, "delta_total"), i(f, "new_total") - i(f, "base_total"), "{f}");
        // A leaf: its inclusive value is its self value (the odd sample in the runtime aside).
        assert!(i(f, "base") >= i(f, "base_total") * 9 / 10, "{f}");
    }
    // Sampled, so bounded: +100% ± 35 points for the doubled function, 0 ± 25% for the other.
    let grew = i(changing, "delta") as f64 / i(changing, "base") as f64;
    assert!((0.65..=1.35).contains(&grew), "Changing.Unit grew by {:.0}%: {changing}", grew * 100.0);
    let moved = i(steady, "delta") as f64 / i(steady, "base") as f64;
    assert!(moved.abs() <= 0.25, "Steady.Unit moved by {:.0}%: {steady}", moved * 100.0);
    // At least 200 ms of CPU behind each figure: a real measurement, not a handful of samples.
    assert!(i(steady, "base") >= 200_000_000 && i(changing, "base") >= 200_000_000, "{steady} {changing}");
    // Rows sorted by |Δ self|: the doubled function first.
    assert_eq!(v["functions"][0]["name"], "Diff.Changing.Unit", "{v}");
    // The caller's inclusive value follows its callee.
    let run = function(&v, "Diff.Changing.Run");
    assert!(i(run, "delta_total") >= i(changing, "delta") * 9 / 10, "{run}");

    // Normalized: the baseline scaled to the new total, so the doubled function still grows
    // (its share went from about 1/2 to about 2/3) and the steady one shrinks (1/2 to 1/3).
    let n = diff_json(&old, &new, &["--weight", "cpu", "--normalize"]);
    assert_eq!(n["normalized"], true);
    let (c, s) = (function(&n, "Diff.Changing.Unit"), function(&n, "Diff.Steady.Unit"));
    assert!(i(c, "delta") > 0 && i(s, "delta") < 0, "{c} {s}");
    let total = |v: &Value, key: &str| v["functions"].as_array().unwrap().iter().map(|f| i(f, key)).sum::<i64>();
    let (bt, nt) = (total(&n, "base") as f64, total(&n, "new") as f64);
    assert!((bt - nt).abs() <= nt * 1e-6 + 100.0, "normalized totals {bt} vs {nt}");

    // Text and CSV carry the same rows.
    let out = diff(&old, &new, &["--weight", "cpu", "--top", "3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(t.starts_with("clrprof diff — weight: cpu (ms)\n"), "{t}");
    let first = t.lines().skip_while(|l| !l.trim_start().starts_with("Δ self")).nth(1).unwrap();
    assert!(
        first.contains("Diff.Changing.Unit") && first.contains("Diff.dll") && first.trim_start().starts_with('+'),
        "{t}"
    );
    assert!(t.contains("more functions; --top N shows more"), "{t}");
    let out = diff(&old, &new, &["--weight", "cpu", "--format", "csv"]);
    let csv = text(&out.stdout);
    assert!(
        csv.starts_with("name,module,base,new,delta,base_total,new_total,delta_total,base_samples,new_samples,pm95,z,significant,few_samples,only_in\n"),
        "{csv}"
    );
    let line = csv.lines().find(|l| l.starts_with("Diff.Changing.Unit,")).unwrap();
    let cols: Vec<&str> = line.split(',').collect();
    assert_eq!(cols[2].parse::<i64>().unwrap(), i(changing, "base"));
    assert_eq!(cols[3].parse::<i64>().unwrap(), i(changing, "new"));
}

#[test]
fn instrumented_diff_has_exact_call_count_deltas() {
    let _machine = machine::shared();
    let dir = scratch("diff-instrumented");
    let old = record_ok(&dir, "old", &["20", "20"], &["--instrument", "--no-sample"]);
    let new = record_ok(&dir, "new", &["20", "40"], &["--instrument", "--no-sample"]);
    let v = diff_json(&old, &new, &["--weight", "calls"]);
    assert_eq!((v["weight"].as_str(), v["unit"].as_str()), (Some("calls"), Some("calls")));
    let changing = function(&v, "Diff.Changing.Unit");
    assert_eq!((i(changing, "base"), i(changing, "new"), i(changing, "delta")), (20, 40, 20), "{changing}");
    assert_eq!((i(changing, "base_calls"), i(changing, "new_calls"), i(changing, "delta_calls")), (20, 40, 20));
    let steady = function(&v, "Diff.Steady.Unit");
    assert_eq!((i(steady, "base"), i(steady, "new"), i(steady, "delta")), (20, 20, 0), "{steady}");
    let run = function(&v, "Diff.Changing.Run");
    assert_eq!((i(run, "base"), i(run, "new"), i(run, "delta")), (1, 1, 0), "{run}");
    assert_eq!((i(run, "base_total"), i(run, "new_total")), (21, 41), "{run}");
    // The only change in the app's calls is Changing.Unit's 20: no other row of the app moves
    // (the runtime's own start-up work may vary between runs).
    for f in v["functions"].as_array().unwrap() {
        if f["module"] == "Diff.dll" && f["name"] != "Diff.Changing.Unit" {
            assert_eq!(i(f, "delta"), 0, "{f}");
        }
    }
    // Exact time: the doubled function has a measured time in both runs, with the call counts
    // alongside. Whether the time grew is not asserted: the two runs are apart, and a load burst
    // during the first made its 20 calls slower than the second's 40 once (87 against 74 ms).
    let t = diff_json(&old, &new, &["--weight", "time"]);
    let c = function(&t, "Diff.Changing.Unit");
    assert!(i(c, "base") > 0 && i(c, "new") > 0, "{c}");
    assert_eq!(i(c, "delta"), i(c, "new") - i(c, "base"), "{c}");
    assert_eq!((i(c, "base_calls"), i(c, "new_calls"), i(c, "delta_calls")), (20, 40, 20), "{c}");
}

#[test]
fn diff_reads_imports_and_refuses_unknown_files() {
    let dir = scratch("diff-errors");
    let folded = repo_root().join("testdata/import/program.folded");
    let csv = repo_root().join("testdata/import/vs2012_sampling_CallTreeSummary_de.csv");
    let v = diff_json(&folded, &csv, &[]);
    assert_eq!(v["functions"].as_array().unwrap().len(), 4, "{v}");
    assert!(v["functions"].as_array().unwrap().iter().all(|f| f["delta"] == 0 && f["delta_total"] == 0), "{v}");
    let junk = dir.join("notes.txt");
    std::fs::write(&junk, "hello world\nsecond line\n").unwrap();
    let out = diff(&folded, &junk, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(
        err.lines().next().unwrap(),
        format!(
            "clrprof: error: cannot read {}: not a clrprof trace, collapsed stacks or vsperfreport CSV: first line starts with \"hello world\"",
            junk.display()
        )
    );
    let out = diff(&folded, &csv, &["--from", "1s"]);
    assert!(text(&out.stderr).contains("has no timestamps"), "{}", text(&out.stderr));
}
