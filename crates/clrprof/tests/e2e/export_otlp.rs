//! OTLP profile exports read by an independent decoder: Debian's `protoc --decode` on the schema
//! written from the pinned specification (testdata/otlp). Every sample type's total, sample count
//! and hottest functions must equal `clrprof report`'s figures for the same checked-in trace.

use crate::common::otlp::{decode, summarize, Summary};
use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

fn trace(name: &str) -> PathBuf {
    repo_root().join(format!("testdata/traces/v1/{name}.clrprof"))
}

fn export_otlp(trace: &Path, dir: &Path, extra: &[&str]) -> Summary {
    let out = dir.join(format!("{}.otlp.pb", trace.file_stem().unwrap().to_string_lossy()));
    let r = Command::new(clrprof_exe())
        .arg("export")
        .arg(trace)
        .args(["-f", "otlp", "--no-native-symbols", "-o"])
        .arg(&out)
        .args(extra)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", text(&r.stderr));
    summarize(&decode(&std::fs::read(&out).unwrap()))
}

fn report_json(trace: &Path) -> serde_json::Value {
    let out = report(trace, &["--format", "json", "--no-native-symbols"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn protoc_decodes_the_export_and_its_totals_equal_the_report() {
    let dir = scratch("otlp-export");
    let s = export_otlp(&trace("sampled"), &dir, &[]);
    let r = report_json(&trace("sampled"));
    let sampling = &r["sampling"];
    // One profile per sample type, each summing to the report's figure.
    assert_eq!(
        s.types.keys().collect::<Vec<_>>(),
        ["alloc_objects", "alloc_space", "cpu", "samples", "wall"],
        "{:?}",
        s.types
    );
    assert_eq!(s.types["samples"].0, "count");
    assert_eq!(s.types["samples"].2, sampling["total_samples"].as_i64().unwrap());
    assert_eq!(s.types["cpu"].0, "nanoseconds");
    assert_eq!(s.types["cpu"].2, sampling["cpu_ns"].as_i64().unwrap());
    assert_eq!(s.types["wall"].2, sampling["wall_ns"].as_i64().unwrap());
    // Allocations: the report's per-type estimates add up to the same count and bytes.
    let allocs = r["allocations"].as_array().unwrap();
    assert_eq!(s.types["alloc_objects"].2, allocs.iter().map(|a| a["count"].as_i64().unwrap()).sum::<i64>());
    assert_eq!(s.types["alloc_space"].0, "bytes");
    assert_eq!(s.types["alloc_space"].2, allocs.iter().map(|a| a["bytes"].as_i64().unwrap()).sum::<i64>());
    // One sample per (thread, stack): the sampled and CPU profiles have the same samples.
    assert_eq!(s.types["samples"].1, s.types["cpu"].1);
    // Self weight per leaf function equals the report's routines (CPU time and samples).
    for routine in sampling["routines"].as_array().unwrap() {
        let name = routine["name"].as_str().unwrap();
        assert_eq!(s.self_by_function["cpu"].get(name).copied(), routine["cpu_ns"].as_i64(), "{name}");
        assert_eq!(s.self_by_function["samples"].get(name).copied(), routine["samples"].as_i64(), "{name}");
    }
    // Per-thread CPU time through the thread attributes.
    let threads: Vec<&str> =
        s.sample_attributes.iter().filter(|a| a.0 == "thread.name").map(|a| a.1.as_str()).collect();
    assert_eq!(threads, ["many-0", "many-1", "many-2"]);
    assert!(s.sample_attributes.iter().any(|a| a == &("thread.id".to_string(), "7973".to_string())));
    // The process as the resource; no trace/span links (traces carry none).
    assert!(s.resource.contains(&("service.name".into(), "Sampling".into())), "{:?}", s.resource);
    assert!(s.resource.contains(&("process.pid".into(), "7962".into())), "{:?}", s.resource);
    assert_eq!(s.link_table_len, 1, "only the zero link");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn otlp_carries_exact_calls_exceptions_and_contention() {
    let dir = scratch("otlp-events");
    // Exact calls and time of an instrumented trace: the report's inclusive figures per function.
    let s = export_otlp(&trace("instrumented"), &dir, &[]);
    let r = report_json(&trace("instrumented"));
    assert!(s.types.contains_key("calls") && s.types.contains_key("time"), "{:?}", s.types);
    let funcs = r["functions"].as_array().unwrap();
    let mut checked = 0;
    for f in funcs.iter().filter(|f| f["calls"].as_u64().unwrap_or(0) > 0).take(5) {
        let name = f["name"].as_str().unwrap();
        assert_eq!(
            s.self_by_function["calls"].get(name).copied().unwrap_or(0) as u64,
            f["calls"].as_u64().unwrap(),
            "{name}"
        );
        checked += 1;
    }
    assert!(checked > 0, "the instrumented trace has calls");
    // 40 exceptions of one type, thrown by one site.
    let s = export_otlp(&trace("exceptions"), &dir, &[]);
    assert_eq!(s.types["exceptions"], ("count".to_string(), s.types["exceptions"].1, 40));
    assert_eq!(s.self_by_function["exceptions"].get("EventsApp.Program.Thrower"), Some(&40));
    assert!(s.sample_attributes.contains(&("exception.type".into(), "EventsApp.BoomException".into())));
    // 20 Monitor contentions, 602.797 ms waited (the locks view's figures).
    let s = export_otlp(&trace("contention"), &dir, &[]);
    assert_eq!(s.types["contentions"].2, 20);
    let waited = s.total_by_function["delay"]["EventsApp.Program.WaitForGate"];
    assert_eq!((waited + 500) / 1000, 602_797, "{waited}");
    let _ = std::fs::remove_dir_all(dir);
}
