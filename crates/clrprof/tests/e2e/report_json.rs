//! `report --format json` at scale: a program with 20,000 short-lived threads (`apps/Stress churn`),
//! recorded end to end with sampling and instrumentation, gives a JSON report within a small
//! multiple of its trace's size; the timeline's quiet threads are folded into one row with their
//! sums kept exact, and `--per-thread` still lists every thread (docs/report-json.md).

use crate::common::*;

use std::process::Command;

use serde_json::Value;

/// The bound on the JSON report's size, as a multiple of the trace's. The default document holds
/// per-thread entries only in `threads` and `sampling.threads` (about 200 bytes a thread, pretty
/// printed, against at least as many in the trace's thread records), and its function, class and
/// call-tree tables grow with the trace's own records of them; 20,000 threads measured 1.3×.
/// Before, per-thread hot spots and one timeline row per thread (101 buckets × 5 columns, one
/// number a line) made it 27× (197 MB for a 7.1 MB trace).
const MAX_JSON_PER_TRACE_BYTE: u64 = 4;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Per bucket, the sum over the timeline's rows (and its folded row) of one column.
fn column_sums(t: &Value, col: &str) -> Vec<u64> {
    let n = u(&t["buckets"]) as usize;
    let mut sums = vec![0u64; n];
    let rows = t["threads"].as_array().unwrap().iter().chain(t.get("other_threads").filter(|o| !o.is_null()));
    for r in rows {
        for (s, v) in sums.iter_mut().zip(r[col].as_array().unwrap()) {
            *s += u(v);
        }
    }
    sums
}

#[test]
fn twenty_thousand_threads_give_a_json_report_of_bounded_size_with_exact_totals() {
    let _machine = machine::shared();
    let dir = scratch("report-json-threads");
    let trace = dir.join("churn.clrprof");
    let out = record("Stress", &["churn", "20000", "8"], &trace, &["--instrument"]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("stress churn ok n=20000"), "{}", text(&out.stdout));
    let trace_bytes = std::fs::metadata(&trace).unwrap().len();

    let json = dir.join("report.json");
    let o = report(&trace, &["--format", "json", "-o", json.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let json_bytes = std::fs::metadata(&json).unwrap().len();
    assert!(
        json_bytes <= MAX_JSON_PER_TRACE_BYTE * trace_bytes,
        "JSON report {json_bytes} bytes for a {trace_bytes}-byte trace: more than {MAX_JSON_PER_TRACE_BYTE}×"
    );
    // Python's own reader takes it.
    let py = Command::new("python3")
        .arg("-c")
        .arg("import json,sys; v=json.load(open(sys.argv[1])); print(len(v['timeline']['threads']))")
        .arg(&json)
        .output()
        .expect("python3 is needed");
    assert!(py.status.success(), "python's json cannot read the report: {}", text(&py.stderr));
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(v.get("thread_hotspots").is_none(), "per-thread hot spots only on request");

    let full = dir.join("full.json");
    let o = report(&trace, &["--format", "json", "--per-thread", "-o", full.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let f: Value = serde_json::from_slice(&std::fs::read(&full).unwrap()).unwrap();

    // The folded timeline: few rows, the rest in one, and every bucket's sums the same as the
    // per-thread timeline's, which add up to the process's sampling totals.
    let (t, ft) = (&v["timeline"], &f["timeline"]);
    let rows = t["threads"].as_array().unwrap().len();
    let other = u(&t["other_threads"]["threads"]) as usize;
    assert!(rows <= 300, "{rows} timeline rows");
    assert!(ft.get("other_threads").is_none());
    assert_eq!(rows + other, ft["threads"].as_array().unwrap().len());
    // The timeline keys threads by OS thread id, which the kernel reuses once its ids wrap (at
    // `kernel.pid_max`): 20,000 threads are fewer ids (18,803 in one run), so only "most" is
    // asserted; the exact count per thread is checked below.
    assert!(rows + other >= 10_000, "{other} threads folded of {}", rows + other);
    for col in ["cpu_samples", "cpu_ns", "wall_samples", "wall_ns", "exceptions"] {
        assert_eq!(column_sums(t, col), column_sums(ft, col), "{col}");
    }
    let sum = |t: &Value, col: &str| column_sums(t, col).iter().sum::<u64>();
    assert_eq!(sum(t, "cpu_samples"), u(&v["sampling"]["total_samples"]));
    assert_eq!(sum(t, "wall_samples"), u(&v["sampling"]["wall_samples"]));
    assert!(sum(t, "wall_samples") > 0);
    // Everything but the per-thread parts is the same document.
    for key in ["functions", "calltree", "threads", "sampling", "gcs", "exceptions"] {
        assert_eq!(v[key], f[key], "{key}");
    }

    // `--per-thread`: every thread's own table, exact (`Leaf` three times per `Body`; an OS tid
    // the kernel reused holds several threads' calls).
    let per = f["thread_hotspots"].as_array().expect("thread_hotspots with --per-thread");
    let mut body = 0;
    for t in per {
        let of =
            |n: &str| t["functions"].as_array().unwrap().iter().find(|f| f["name"] == n).map_or(0, |f| u(&f["calls"]));
        assert_eq!(of("StressApp.Churn.Leaf"), 3 * of("StressApp.Churn.Body"), "thread {}", t["os_tid"]);
        body += of("StressApp.Churn.Body");
    }
    assert_eq!(body, 20_000);
    let merged = |n: &str| u(&find(&v, "functions", n)["calls"]);
    assert_eq!((merged("StressApp.Churn.Body"), merged("StressApp.Churn.Leaf")), (20_000, 60_000));

    // The flag is for JSON: elsewhere it says so.
    let o = report(&trace, &["--per-thread"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("--per-thread is for --format json"), "{}", text(&o.stderr));
}
