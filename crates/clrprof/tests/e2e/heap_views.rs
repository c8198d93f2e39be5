//! The heap views on real snapshots: apps/HeapLeak (a static `Cache.Sessions` list holding sessions, each
//! with a byte[] payload and a Tag; short-lived `Garbage` dropped at once) is snapshotted with
//! `clrprof heap PID` after each of its two phases, on .NET 8, 9 and 10. Asserted exactly against the
//! app's own counts: instances per type in each snapshot and their difference (`clrprof diff`), the
//! retention path through the static field and the objects along it, the retained size of the sessions
//! (their objects plus the payload bytes the app reports), the garbage absent, the app running on to its
//! normal end. And the clear errors: a trace without snapshots, a missing or unknown type, a snapshot
//! number out of range.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::*;

/// Sessions per phase and payload bytes per session the app is started with.
const PER_PHASE: u64 = 1000;
const PAYLOAD: u64 = 1024;
/// Bytes of an array's header on x64 (object header, method table, length with its padding): a
/// `byte[1024]` takes 24 + 1024 bytes.
const ARRAY_HEADER: u64 = 24;

/// `phase 1 sessions=1000 tags=1000 …` → {"sessions": 1000, …}.
fn fields(line: &str) -> HashMap<String, u64> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap_or_else(|_| panic!("bad value in {line:?}"))))
        .collect()
}

fn heap_snapshot(pid: u32, out: &Path) {
    let o = Command::new(clrprof_exe())
        .args(["heap", &pid.to_string(), "-o"])
        .arg(out)
        .arg("--agent")
        .arg(agent_path())
        .output()
        .expect("run clrprof heap");
    assert!(o.status.success(), "clrprof heap failed: {}", text(&o.stderr));
}

fn json(trace: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["--format", "json"]);
    let o = report(trace, &a);
    assert!(o.status.success(), "report {a:?} failed: {}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("report JSON")
}

fn type_row<'a>(types: &'a Value, name: &str) -> Option<&'a Value> {
    types["types"].as_array().unwrap().iter().find(|t| t["name"] == name)
}

fn num(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

/// Runs the app through its two phases with a snapshot after each; returns the snapshots and the app's
/// own counts per phase.
fn two_snapshots(runtime: &str, dir: &Path) -> (PathBuf, PathBuf, HashMap<String, u64>, HashMap<String, u64>) {
    let mut c = if runtime == "net10.0" {
        let mut c = Command::new("dotnet");
        c.arg(app_dll("HeapLeak"));
        c
    } else {
        Command::new(app_for(runtime, "HeapLeak"))
    };
    c.args(["2", &PER_PHASE.to_string(), &PAYLOAD.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for k in ["CORECLR_ENABLE_PROFILING", "CORECLR_PROFILER", "CORECLR_PROFILER_PATH"] {
        c.env_remove(k);
    }
    let mut child = KillOnDrop(c.spawn().expect("start apps/HeapLeak"));
    let mut stdin = child.0.stdin.take().unwrap();
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let pid = child.0.id();
    let mut line = String::new();
    let mut next_line = |out: &mut BufReader<_>| {
        line.clear();
        out.read_line(&mut line).unwrap();
        line.trim().to_string()
    };
    let l1 = next_line(&mut out);
    assert!(l1.starts_with("phase 1 "), "unexpected {l1:?}");
    let s1 = dir.join("s1.clrprof");
    heap_snapshot(pid, &s1);
    writeln!(stdin).unwrap();
    let l2 = next_line(&mut out);
    assert!(l2.starts_with("phase 2 "), "unexpected {l2:?}");
    let s2 = dir.join("s2.clrprof");
    heap_snapshot(pid, &s2);
    writeln!(stdin).unwrap();
    let done = next_line(&mut out);
    let p2 = fields(&l2);
    assert_eq!(done, format!("done sessions={}", p2["sessions"]), "the app's own output after the snapshots");
    let status = child.0.wait().unwrap();
    assert!(status.success(), "the app did not end normally: {status}");
    (s1, s2, fields(&l1), p2)
}

/// The views of one snapshot against the app's counts at that phase.
fn check_snapshot(trace: &Path, app: &HashMap<String, u64>) {
    let n = app["sessions"];
    let types = json(trace, &["--view", "types"]);
    assert_eq!(types["snapshot"]["complete"], true, "{}", types["snapshot"]);
    let session = type_row(&types, "HeapLeak.Session").expect("HeapLeak.Session in the types");
    let tag = type_row(&types, "HeapLeak.Tag").expect("HeapLeak.Tag in the types");
    assert_eq!(num(session, "count"), n);
    assert_eq!(num(tag, "count"), app["tags"]);
    // Short-lived garbage is gone after the snapshot's full GC.
    assert!(type_row(&types, "HeapLeak.Garbage").is_none_or(|g| num(g, "count") == 0), "garbage in the snapshot");
    // The sessions retain themselves, their tags and their payload arrays, exactly.
    assert_eq!(
        num(session, "retained"),
        num(session, "size") + num(tag, "size") + app["payload_bytes"] + n * ARRAY_HEADER,
        "retained by the sessions: {session}"
    );
    // The list held by the static retains at least every session it alone holds.
    let dom = json(trace, &["--view", "dominators", "--depth", "3"]);
    let top = &dom["dominators"]["children"][0];
    assert_eq!(top["type"], "System.Collections.Generic.List<HeapLeak.Session>", "largest dominator: {top}");
    assert_eq!(top["root"]["kind"], "static");
    assert_eq!(top["root"]["name"], "HeapLeak.Cache.Sessions", "{top}");

    // Paths: through the static field, the list and its array, to every instance.
    let paths = json(trace, &["--view", "paths", "--type", "HeapLeak.Session"]);
    assert_eq!(num(&paths, "instances"), n);
    assert_eq!(num(&paths, "unreachable"), 0);
    // Nothing is shared between sessions: all of them gone frees exactly what they retain.
    assert_eq!(num(&paths, "retained"), num(session, "retained"));
    assert_eq!(num(&paths, "freed_if_all_gone"), num(session, "retained"));
    let rows = paths["paths"].as_array().unwrap();
    assert_eq!(rows.iter().map(|p| num(p, "count")).sum::<u64>(), n, "every instance on one path: {rows:?}");
    let via_static = rows
        .iter()
        .find(|p| p["root"]["kind"] == "static")
        .unwrap_or_else(|| panic!("no path from a static: {rows:?}"));
    let nodes: Vec<&str> =
        via_static["nodes"].as_array().unwrap().iter().map(|x| x["type"].as_str().unwrap()).collect();
    assert_eq!(
        nodes,
        ["System.Collections.Generic.List<HeapLeak.Session>", "HeapLeak.Session[]", "HeapLeak.Session"],
        "{via_static}"
    );
    assert_eq!(via_static["root"]["name"], "HeapLeak.Cache.Sessions", "{via_static}");
    // Sessions not reached through the static are held directly by a root (the app's local variable).
    for p in rows.iter().filter(|p| p["root"]["kind"] != "static") {
        assert_eq!(p["nodes"].as_array().unwrap().len(), 1, "another path to sessions: {p}");
    }
    let direct: u64 = rows.iter().filter(|p| p["root"]["kind"] != "static").map(|p| num(p, "count")).sum();
    assert!(direct <= 1, "{direct} sessions held by other roots");
    assert!(
        num(top, "retained") >= (n - direct) * (PAYLOAD + ARRAY_HEADER),
        "the list's retained size covers its sessions' payloads: {top}"
    );
    // Text: the path reads root → list → array → session.
    let o = report(trace, &["--view", "paths", "--type", "Session"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let t = text(&o.stdout);
    assert!(
        t.contains(
            "HeapLeak.Cache.Sessions → System.Collections.Generic.List<HeapLeak.Session> → HeapLeak.Session[] → HeapLeak.Session"
        ),
        "{t}"
    );
}

fn check(runtime: &str) {
    let dir = scratch(&format!("heap_views_{}", runtime.replace('.', "_")));
    let (s1, s2, p1, p2) = two_snapshots(runtime, &dir);
    check_snapshot(&s1, &p1);
    check_snapshot(&s2, &p2);
    // The diff of the two snapshots is the app's own difference.
    let o = Command::new(clrprof_exe()).arg("diff").arg(&s1).arg(&s2).args(["--format", "json"]).output().unwrap();
    assert!(o.status.success(), "diff failed: {}", text(&o.stderr));
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    for (name, key) in [("HeapLeak.Session", "sessions"), ("HeapLeak.Tag", "tags")] {
        let row = type_row(&d, name).unwrap_or_else(|| panic!("{name} not in the diff"));
        assert_eq!(num(row, "base_count"), p1[key]);
        assert_eq!(num(row, "new_count"), p2[key]);
        assert_eq!(row["delta_count"].as_i64().unwrap(), p2[key] as i64 - p1[key] as i64, "{row}");
        assert_eq!(row["status"], "grown");
    }
}

#[test]
fn heap_views_net10() {
    check("net10.0");
}

/// The viewer's heap API on a real snapshot answers the report's figures.
#[test]
fn heap_views_in_the_viewer() {
    let dir = scratch("heap_views_viewer");
    let (_, s2, _, p2) = two_snapshots("net10.0", &dir);
    let n = p2["sessions"];
    let report_types = json(&s2, &["--view", "types"]);
    let v = crate::view::Viewer::start(&s2, &[]);
    assert_eq!(v.api("meta", &[])["heap_snapshots"], 1);
    let list = v.api("heap", &[]);
    assert_eq!(list["snapshots"].as_array().unwrap().len(), 1);
    let types = v.api("heap-types", &[("sort", "count")]);
    let session = type_row(&types, "HeapLeak.Session").unwrap();
    assert_eq!(session, type_row(&report_types, "HeapLeak.Session").unwrap(), "viewer and report agree");
    assert_eq!(num(session, "count"), n);
    let counts: Vec<u64> = types["types"].as_array().unwrap().iter().map(|t| num(t, "count")).collect();
    assert!(counts.windows(2).all(|w| w[0] >= w[1]), "sorted by count");
    let paths = v.api("heap-paths", &[("type", "HeapLeak.Session")]);
    assert_eq!(num(&paths, "instances"), n);
    assert_eq!(num(&paths, "retained"), num(session, "retained"));
    for key in ["paths", "dominator_chains"] {
        let rows = paths[key].as_array().unwrap();
        assert_eq!(rows.iter().map(|p| num(p, "count")).sum::<u64>(), n, "{key}: {rows:?}");
    }
    let chain = &paths["dominator_chains"][0];
    let nodes: Vec<&str> = chain["nodes"].as_array().unwrap().iter().map(|x| x["type"].as_str().unwrap()).collect();
    assert_eq!(nodes, ["System.Collections.Generic.List<HeapLeak.Session>", "HeapLeak.Session[]", "HeapLeak.Session"]);
    let dom = v.api("heap-dominators", &[("depth", "2")]);
    assert_eq!(dom["dominators"]["children"][0]["type"], "System.Collections.Generic.List<HeapLeak.Session>");
    assert!(v.api_error("heap-paths", &[("type", "NoSuchType")]).contains("no type named 'NoSuchType'"));
    assert!(v.api_error("heap-types", &[("snap", "2")]).contains("numbered from 1"));
}

#[test]
fn heap_views_net9() {
    check("net9.0");
}

#[test]
fn heap_views_net8() {
    check("net8.0");
}

#[test]
fn heap_views_clear_errors() {
    let plain = repo_root().join("testdata/traces/v1/sampled.clrprof");
    let o = report(&plain, &["--view", "types"]);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("holds no heap snapshot") && e.contains("clrprof heap PID"), "{e}");
    let o = Command::new(clrprof_exe()).arg("diff").arg(&plain).output().unwrap();
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("holds 0 heap snapshot(s)"), "{}", text(&o.stderr));
    let o = report(&plain, &["--view", "paths"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("--view paths needs --type NAME"), "{}", text(&o.stderr));
}

#[test]
fn heap_views_bad_type_and_snapshot_number() {
    let dir = scratch("heap_views_bad_type");
    let mut c = Command::new("dotnet");
    c.arg(app_dll("HeapLeak")).args(["1", "10", "8"]).stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = KillOnDrop(c.spawn().expect("start apps/HeapLeak"));
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let s = dir.join("s.clrprof");
    heap_snapshot(child.0.id(), &s);
    drop(child.0.stdin.take());
    assert!(child.0.wait().unwrap().success());
    let o = report(&s, &["--view", "paths", "--type", "NoSuchType"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("no type named 'NoSuchType'"), "{}", text(&o.stderr));
    let o = report(&s, &["--view", "types", "--snapshot", "2"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("holds 1 heap snapshot(s), numbered from 1"), "{}", text(&o.stderr));
    // A snapshot against itself: nothing changed; with a profile option the same files are compared
    // as profiles.
    let o = Command::new(clrprof_exe())
        .arg("diff")
        .arg(&s)
        .args(["--snapshots", "1,1", "--format", "json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(d["types"].as_array().unwrap().iter().all(|t| t["delta_count"] == 0 && t["delta_size"] == 0), "{d}");
    let o = Command::new(clrprof_exe()).arg("diff").arg(&s).arg(&s).args(["--weight", "cpu"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).starts_with("clrprof diff — weight: cpu"), "{}", text(&o.stdout));
    let o = report(&s, &["--view", "types", "--sort", "bogus"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("unknown sort 'bogus'"), "{}", text(&o.stderr));
}
