//! Call-site lines of instrumented calls: `apps/Lines sites N M` calls `Sites.Callee` from two
//! lines of `Sites.Caller` (found from its `// LINE:SITE_N` and `// LINE:SITE_M` markers), N and
//! M times; recorded with `--instrument`, the callers view of `Callee` lists `Caller` once with
//! exactly N + M calls and, under it, each line with exactly N and M calls — on .NET 10 and .NET 8.
//! A caller in a module without a PDB (the framework's) stays one row with no lines, and the
//! report says once which modules have no PDB.

use crate::common::*;

use std::path::Path;

const N: u64 = 600;
const M: u64 = 200;

/// The line of a `// LINE:NAME` marker of apps/Lines/Program.cs (1-based).
fn marker(name: &str) -> u32 {
    let text = std::fs::read_to_string(repo_root().join("apps/Lines/Program.cs")).unwrap();
    let tag = format!("// LINE:{name}");
    let i = text.lines().position(|l| l.trim_end().ends_with(&tag)).unwrap_or_else(|| panic!("no marker {name}"));
    i as u32 + 1
}

/// The callers table of `report --view callers --function F`: rows (calls, caller column).
fn callers(trace: &Path, function: &str) -> (String, Vec<(u64, String)>) {
    let out = report(trace, &["--view", "callers", "--function", function]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let table = stdout.split("\nCALLERS (").nth(1).and_then(|t| t.split("\nCALLEES (").next()).unwrap_or("");
    let rows = table
        .lines()
        .skip(2)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let calls = cols.first()?.parse().ok()?;
            // CALLS, time, %, then the caller (a name, or `at FILE:LINE`).
            Some((calls, cols[3..].join(" ")))
        })
        .collect();
    (stdout, rows)
}

fn check(trace: &Path) {
    let (first, second) = (marker("SITE_N"), marker("SITE_M"));
    let (stdout, mut rows) = callers(trace, "Lines.Sites.Callee");
    // The lines under a caller are ranked by time, which a busy machine can turn either way.
    if rows.len() == 3 {
        rows[1..].sort_by_key(|r| std::cmp::Reverse(r.0));
    }
    assert_eq!(
        rows,
        [
            (N + M, "Lines.Sites.Caller".to_string()),
            (N, format!("at Program.cs:{first}")),
            (M, format!("at Program.cs:{second}")),
        ],
        "{stdout}"
    );
    // The same as JSON.
    let out = report(trace, &["--view", "callers", "--function", "Lines.Sites.Callee", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["function"]["callers"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!((&rows[0]["function"], &rows[0]["calls"]), (&"Lines.Sites.Caller".into(), &(N + M).into()));
    let mut sites: Vec<(String, u64, u64)> = rows[0]["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let file = s["file"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
            (file, s["line"].as_u64().unwrap(), s["calls"].as_u64().unwrap())
        })
        .collect();
    sites.sort_by_key(|s| std::cmp::Reverse(s.2));
    assert_eq!(sites, [("Program.cs".into(), first as u64, N), ("Program.cs".into(), second as u64, M)], "{v}");
    // A framework caller (no PDB): one row, no lines; the modules without PDB named once.
    let (stdout, rows) = callers(trace, "System.Console.get_Out");
    let k = rows.iter().position(|r| r.1 == "System.Console.WriteLine").unwrap_or_else(|| panic!("{stdout}"));
    assert!(rows.get(k + 1).is_none_or(|r| !r.1.starts_with("at ")), "{stdout}");
    assert_eq!(stdout.matches("no PDB for").count(), 1, "{stdout}");
    assert!(stdout.contains("System.Console.dll"), "{stdout}");
}

fn args() -> [String; 3] {
    ["sites".to_string(), N.to_string(), M.to_string()]
}

#[test]
fn the_callers_view_splits_a_caller_by_the_lines_it_calls_from() {
    let _machine = machine::shared();
    let trace = scratch("call-sites").join("sites.clrprof");
    let a = args();
    let out = record("Lines", &[&a[0], &a[1], &a[2]], &trace, &["--instrument"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("from the first site: {N}, from the second: {M}")));
    check(&trace);
}

#[test]
fn call_site_lines_on_net8() {
    let _machine = machine::shared();
    let trace = scratch("call-sites-net8").join("sites.clrprof");
    let a = args();
    let out = record_on("net8.0", "Lines", &[&a[0], &a[1], &a[2]], &trace, &["--instrument"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    check(&trace);
}

/// The viewer's callers panel in a browser (crates/clrprof-view/e2e/callsites.mjs): under
/// `Sites.Caller`, the rows `at Program.cs:LINE` with exactly N and M calls; with a transform,
/// a note instead. Set CLRPROF_SCREENSHOTS=DIR to keep its screenshot.
#[test]
fn the_viewer_lists_each_callers_lines() {
    let _machine = machine::shared();
    let trace = scratch("call-sites-view").join("sites.clrprof");
    let a = args();
    let out = record("Lines", &[&a[0], &a[1], &a[2]], &trace, &["--instrument"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (line_n, line_m) = (marker("SITE_N").to_string(), marker("SITE_M").to_string());
    let (n, m) = (N.to_string(), M.to_string());
    run_browser_script(
        "callsites.mjs",
        "callsites: all checks passed",
        &[
            ("TRACE", trace.as_os_str()),
            ("LINE_N", line_n.as_ref()),
            ("LINE_M", line_m.as_ref()),
            ("N", n.as_ref()),
            ("M", m.as_ref()),
        ],
    );
}
