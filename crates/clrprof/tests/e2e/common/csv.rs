//! The checks of `apps/CsvRead`'s allocations (the `allocations` tests, and on .NET 8 and 9 in
//! the `runtimes` tests): the app prints the figures it knows exactly (its own counts, string sizes
//! checked against `GC.GetAllocatedBytesForCurrentThread`, the process's `GC.GetTotalAllocatedBytes`).

use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

use super::*;

/// Rows of the CSV file: 1.6 M constructor strings (100 MB), some 2,400 allocation samples in all.
pub const CSV_ROWS: &str = "400000";

/// The app's `name value` lines.
pub fn figures(stdout: &str) -> HashMap<String, u64> {
    stdout
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

pub fn sites<'a>(v: &'a Value, type_name: &str) -> Vec<&'a Value> {
    v["allocation_sites"].as_array().unwrap().iter().filter(|s| s["type"] == type_name).collect()
}

fn u(v: &Value, field: &str) -> u64 {
    v[field].as_u64().unwrap_or_else(|| panic!("no {field} in {v}"))
}

fn within(what: &str, estimate: u64, truth: u64, bound: f64) {
    let ratio = estimate as f64 / truth as f64;
    assert!((1.0 - bound..=1.0 + bound).contains(&ratio), "{what}: estimated {estimate}, truly {truth} ({ratio:.3})");
}

/// The checks of a sampled trace of `CsvRead ROWS` (`estimator` is the JSON's
/// `allocation_estimator`), on every runtime.
pub fn check_sampled_csv(trace: &Path, f: &HashMap<String, u64>, estimator: &str) {
    let v = report_json(trace);
    assert_eq!(v["allocation_estimator"], estimator);
    let strings = sites(&v, "System.String");
    // The strings are placed at the user's code that made them, not at the library's allocating
    // frame: the constructor's strings lead, through the library function it called.
    let top = strings[0];
    assert_eq!(top["function"], "CsvRead.Person..ctor", "{strings:?}");
    assert!(top["via"].as_str().unwrap().starts_with("System."), "{top}");
    assert_eq!(top["stack"][1], "CsvRead.Person..ctor", "{top}");
    // Every stack through the app's or CsvHelper's code names that code (the runtime's start-up
    // strings, with no such frame, keep their innermost frame).
    for s in &strings {
        let stack: Vec<&str> = s["stack"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        if stack.iter().any(|f| f.starts_with("CsvRead.") || f.starts_with("CsvHelper.")) {
            assert!(!s["function"].as_str().unwrap().starts_with("System."), "{s}");
        }
    }
    // Their estimate against the truth: ~1,000 samples, a standard deviation of ~3%.
    let ctor: Vec<&&Value> = strings.iter().filter(|s| s["function"] == "CsvRead.Person..ctor").collect();
    let bytes: u64 = ctor.iter().map(|s| u(s, "bytes")).sum();
    let count: u64 = ctor.iter().map(|s| u(s, "count")).sum();
    within("the constructor's string bytes", bytes, f["ctor_string_bytes"], 0.15);
    within("the constructor's strings", count, f["ctor_strings"], 0.15);
    // The one huge string: one object of its own size at its own site, not split or scaled.
    let huge: Vec<&&Value> = strings.iter().filter(|s| s["function"] == "CsvRead.Program.BuildHuge").collect();
    assert_eq!(huge.len(), 1, "{huge:?}");
    assert_eq!(huge[0]["via"], "System.Text.StringBuilder.ToString");
    assert_eq!(u(huge[0], "count"), 1, "{}", huge[0]);
    within("the huge string", u(huge[0], "bytes"), f["huge_bytes"], 0.15);
    // Person objects, one site: 22 MB, about 210 samples, a standard deviation of ~7%.
    let persons = sites(&v, "CsvRead.Person");
    assert_eq!(persons[0]["function"], "CsvRead.Program.Load");
    within("Person objects", u(persons[0], "count"), f["persons"], 0.30);
    // All types together against the runtime's count of the process's allocations.
    let total: u64 = v["allocations"].as_array().unwrap().iter().map(|a| u(a, "bytes")).sum();
    within("all allocated bytes", total, f["total_bytes"], 0.10);
    // The view names the site with its library frame and says how it estimated.
    let t = text(&report(trace, &["--view", "allocations"]).stdout);
    assert!(t.contains("CsvRead.Program.BuildHuge (via System.Text.StringBuilder.ToString)"), "{t}");
    let how = if estimator == "allocation-sampled" { "AllocationSampled" } else { "AllocationTick" };
    assert!(t.contains("ESTIMATES from") && t.contains(how), "{t}");
    check_alloc_weights(trace, f);
}

/// The allocation weights of the other views: the allocating stacks, the constructor's strings
/// under it.
fn check_alloc_weights(trace: &Path, f: &HashMap<String, u64>) {
    // Folded stacks count objects (samples) for every sampled weight.
    let out = export(trace, &["--format", "collapsed", "--weight", "alloc-count", "-o", "-"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let folded = text(&out.stdout);
    let under_ctor: u64 = folded
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| stack.contains("CsvRead.Person..ctor;") && stack.ends_with(";new System.String"))
        .filter_map(|(_, n)| n.parse::<u64>().ok())
        .sum();
    within("alloc-count under the constructor", under_ctor, f["ctor_strings"], 0.15);
    let out = report(trace, &["--weight", "alloc-count"]);
    let t = text(&out.stdout);
    assert!(t.contains("weight: alloc-count — allocated objects"), "{t}");
}

/// `--alloc exact`: counts by type exact, and sites from sampled stacks that share them out; a type
/// allocated in one place (one `new Person` in a loop) gets its exact count at that site.
pub fn check_exact_csv(trace: &Path, f: &HashMap<String, u64>) {
    let v = report_json(trace);
    assert_eq!(v["allocation_estimator"], "exact");
    let person = v["allocations"].as_array().unwrap().iter().find(|a| a["type"] == "CsvRead.Person").unwrap();
    assert_eq!((u(person, "count"), &person["exact"]), (f["persons"], &Value::Bool(true)));
    let persons = sites(&v, "CsvRead.Person");
    assert_eq!(persons.len(), 1, "{persons:?}");
    assert_eq!(persons[0]["function"], "CsvRead.Program.Load");
    assert_eq!(u(persons[0], "count"), f["persons"], "the loop's exact count at its site");
    assert_eq!(u(persons[0], "bytes"), u(person, "bytes"));
    // The strings: the constructor's share of the exact string count.
    let ctor: u64 = sites(&v, "System.String")
        .iter()
        .filter(|s| s["function"] == "CsvRead.Person..ctor")
        .map(|s| u(s, "bytes"))
        .sum();
    within("the constructor's string bytes (exact mode)", ctor, f["ctor_string_bytes"], 0.15);
    let t = text(&report(trace, &["--view", "allocations"]).stdout);
    assert!(t.contains("exact counts") && t.contains("CsvRead.Program.Load"), "{t}");
    // The allocation weights have the stacks: the loop holds every Person.
    let out = export(trace, &["--format", "collapsed", "--weight", "alloc-count", "-o", "-"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let folded = text(&out.stdout);
    let person_stacks: Vec<(&str, u64)> = folded
        .lines()
        .filter(|l| l.contains(";new CsvRead.Person "))
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            Some((stack, n.parse().ok()?))
        })
        .collect();
    assert!(!person_stacks.is_empty(), "{folded}");
    assert!(
        person_stacks.iter().all(|(s, _)| s.ends_with("CsvRead.Program.Load;new CsvRead.Person")),
        "{person_stacks:?}"
    );
    assert_eq!(person_stacks.iter().map(|p| p.1).sum::<u64>(), f["persons"], "{person_stacks:?}");
}
