//! Timeline exports of the checked-in traces. Chrome Trace Event Format (Perfetto, chrome://tracing): one
//! begin/end pair per real call of a flow trace, sampled stacks as properly nested slices, GCs and
//! exceptions on their threads, thread names as metadata. The Firefox Profiler's processed format:
//! consistent tables, every sample, GC and exception markers.

use crate::common::*;

use std::collections::HashMap;
use std::process::Command;

use serde_json::Value;

fn chrome(name: &str) -> Vec<Value> {
    let trace = repo_root().join(format!("testdata/traces/v1/{name}.clrprof"));
    let out = Command::new(clrprof_exe())
        .arg("export")
        .arg(&trace)
        .args(["-f", "chrome", "-o", "-", "--no-native-symbols"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(v["displayTimeUnit"], "ms");
    v["traceEvents"].as_array().unwrap().clone()
}

fn count(ev: &[Value], ph: &str, cat: &str) -> usize {
    ev.iter().filter(|e| e["ph"] == ph && (cat.is_empty() || e["cat"] == cat)).count()
}

#[test]
fn a_flow_trace_gives_one_slice_per_real_call() {
    let ev = chrome("instrumented");
    // The flow view of this trace: 1,000 calls of Calls.Counted.Tick among 1,004 in all.
    assert_eq!(count(&ev, "B", "call"), 1004);
    assert_eq!(count(&ev, "E", "call"), 1004);
    let ticks = ev.iter().filter(|e| e["ph"] == "B" && e["name"] == "Calls.Counted.Tick").count();
    assert_eq!(ticks, 1000);
    // Begin/end pairs nest per thread, in time order.
    let mut depth: HashMap<u64, i64> = HashMap::new();
    let mut last: HashMap<u64, f64> = HashMap::new();
    for e in ev.iter().filter(|e| e["cat"] == "call") {
        let tid = e["tid"].as_u64().unwrap();
        let ts = e["ts"].as_f64().unwrap();
        assert!(ts >= *last.get(&tid).unwrap_or(&0.0), "time goes forward on a thread");
        last.insert(tid, ts);
        let d = depth.entry(tid).or_default();
        *d += if e["ph"] == "B" { 1 } else { -1 };
        assert!(*d >= 0);
    }
    assert!(depth.values().all(|&d| d == 0), "every call ends");
}

#[test]
fn sampled_stacks_become_nested_slices_with_gcs_exceptions_and_names() {
    let ev = chrome("sampled");
    assert!(count(&ev, "X", "sample") > 50);
    let names: Vec<&str> = ev
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert!(["many-0", "many-1", "many-2"].iter().all(|n| names.contains(n)), "{names:?}");
    // On every thread, slices are either disjoint or nested (what the timeline viewers need).
    let mut by_tid: HashMap<u64, Vec<(f64, f64)>> = HashMap::new();
    for e in ev.iter().filter(|e| e["ph"] == "X") {
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        assert!(dur >= 0.0);
        by_tid.entry(e["tid"].as_u64().unwrap()).or_default().push((ts, ts + dur));
    }
    for (tid, mut s) in by_tid {
        s.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(b.1.partial_cmp(&a.1).unwrap()));
        let mut stack: Vec<f64> = Vec::new();
        for (a, b) in s {
            while stack.last().is_some_and(|&end| end <= a + 1e-6) {
                stack.pop();
            }
            if let Some(&end) = stack.last() {
                assert!(b <= end + 1e-6, "thread {tid}: a slice [{a}, {b}] crosses its parent's end {end}");
            }
            stack.push(b);
        }
    }
    assert_eq!(count(&chrome("events"), "X", "gc"), 6, "the gc view's six collections");
    assert_eq!(count(&chrome("exceptions"), "i", "exception"), 40, "40 exceptions thrown");
}

fn firefox(name: &str, extra: &[&str]) -> Value {
    let trace = repo_root().join(format!("testdata/traces/v1/{name}.clrprof"));
    let out = Command::new(clrprof_exe())
        .arg("export")
        .arg(&trace)
        .args(["-f", "firefox", "-o", "-", "--no-native-symbols"])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// Checks the processed format's invariants: every column of a table as long as the table, and
/// every index pointing inside the table it refers to.
fn check_firefox_tables(v: &Value) {
    assert_eq!(v["meta"]["preprocessedProfileVersion"], 57);
    let strings = v["shared"]["stringArray"].as_array().unwrap().len() as u64;
    let idx = |x: &Value| x.as_u64().unwrap();
    for t in v["threads"].as_array().unwrap() {
        for table in ["samples", "stackTable", "frameTable", "funcTable", "resourceTable", "markers"] {
            let tb = &t[table];
            let n = tb["length"].as_u64().unwrap() as usize;
            for (col, c) in tb.as_object().unwrap() {
                if let Some(a) = c.as_array() {
                    assert_eq!(a.len(), n, "{table}.{col}");
                }
            }
        }
        let len = |table: &str| t[table]["length"].as_u64().unwrap();
        for s in t["samples"]["stack"].as_array().unwrap() {
            assert!(idx(s) < len("stackTable"));
        }
        for (i, p) in t["stackTable"]["prefix"].as_array().unwrap().iter().enumerate() {
            assert!(p.is_null() || idx(p) < i as u64, "a prefix comes before its stack");
        }
        for f in t["stackTable"]["frame"].as_array().unwrap() {
            assert!(idx(f) < len("frameTable"));
        }
        for f in t["frameTable"]["func"].as_array().unwrap() {
            assert!(idx(f) < len("funcTable"));
        }
        for r in t["funcTable"]["resource"].as_array().unwrap() {
            assert!(r.as_i64().unwrap() < len("resourceTable") as i64);
        }
        for s in t["funcTable"]["name"].as_array().unwrap().iter().chain(t["markers"]["name"].as_array().unwrap()) {
            assert!(idx(s) < strings);
        }
    }
}

#[test]
fn firefox_profiles_hold_every_sample_gc_and_exception() {
    let v = firefox("sampled", &[]);
    check_firefox_tables(&v);
    let weight: u64 = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["samples"]["weight"].as_array().unwrap().iter().map(|w| w.as_u64().unwrap()))
        .sum();
    assert_eq!(weight, 69, "the 69 CPU samples the report counts");
    let names: Vec<&str> = v["threads"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"many-1"), "{names:?}");
    let one = firefox("sampled", &["--thread", "many-1"]);
    assert_eq!(one["threads"].as_array().unwrap().len(), 1);
    for (name, marker, count) in [("events", "GC", 6), ("exceptions", "Exception", 40)] {
        let v = firefox(name, &[]);
        check_firefox_tables(&v);
        let strings = v["shared"]["stringArray"].as_array().unwrap();
        let n = v["threads"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["markers"]["name"].as_array().unwrap().iter())
            .filter(|s| strings[s.as_u64().unwrap() as usize] == marker)
            .count();
        assert_eq!(n, count, "{name}: {marker} markers");
    }
}

#[test]
fn an_export_to_a_closed_pipe_ends_quietly() {
    // Written as it is made: a reader that stops early (`| head`) closes the pipe mid-export.
    let trace = repo_root().join("testdata/traces/v1/sampled.clrprof");
    for f in ["chrome", "firefox", "pprof"] {
        let mut c = Command::new(clrprof_exe())
            .arg("export")
            .arg(&trace)
            .args(["-f", f, "-o", "-", "--no-native-symbols"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 16];
        use std::io::Read;
        c.stdout.take().unwrap().read_exact(&mut first).unwrap();
        // stdout dropped: the pipe is closed.
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{f}: {}", text(&out.stderr));
        assert_eq!(text(&out.stderr), "", "{f}");
    }
}
