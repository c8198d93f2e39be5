//! Heap snapshots taken from real processes: `clrprof heap PID` twice on apps/HeapLeak between
//! its phases (on .NET 8, 9 and 10), `record --heap-snapshot-at`, the bad input `heap` and
//! `record` refuse, and a cut trace whose snapshot is reported incomplete. The app prints its own
//! counts after each phase; the snapshots must show exactly those, hold the sessions through the
//! static field `HeapLeak.Cache.Sessions` (named with its declaring class), show none of the short-lived garbage, and the app must run on to its
//! normal end.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::common::*;

/// apps/HeapLeak running on `runtime` (no profiler settings), its stdin and stdout.
pub(crate) struct LeakApp {
    pub(crate) child: KillOnDrop,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
}

/// The counts the app printed after a phase (`phase K sessions=N tags=N payload_bytes=B …`).
#[derive(Debug)]
pub(crate) struct Phase {
    pub(crate) sessions: u64,
    tags: u64,
    payload_bytes: u64,
}

fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

impl LeakApp {
    fn start(runtime: &str) -> LeakApp {
        let c = if runtime == "net10.0" {
            let mut c = Command::new("dotnet");
            c.arg(app_dll("HeapLeak"));
            c
        } else {
            Command::new(app_for(runtime, "HeapLeak"))
        };
        LeakApp::spawn(c)
    }

    /// The app started by `c` (a command that runs it, such as `dotnet HeapLeak.dll`).
    pub(crate) fn spawn(mut c: Command) -> LeakApp {
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        for k in ["CORECLR_ENABLE_PROFILING", "CORECLR_PROFILER", "CORECLR_PROFILER_PATH"] {
            c.env_remove(k);
        }
        let mut child = c.spawn().expect("start apps/HeapLeak");
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap());
        LeakApp { child: KillOnDrop(child), stdin, out }
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        l.trim().to_string()
    }

    pub(crate) fn phase(&mut self, k: u32) -> Phase {
        let l = self.line();
        assert!(l.starts_with(&format!("phase {k} ")), "{l:?}");
        Phase { sessions: field(&l, "sessions"), tags: field(&l, "tags"), payload_bytes: field(&l, "payload_bytes") }
    }

    pub(crate) fn next(&mut self) {
        writeln!(self.stdin.as_mut().unwrap()).unwrap();
    }

    /// Lets the app finish; returns its last line, its stderr and its exit status.
    pub(crate) fn finish(mut self) -> (String, String, std::process::ExitStatus) {
        self.next();
        let last = self.line();
        drop(self.stdin.take());
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "", "the app printed more than its own lines");
        let child: &mut Child = &mut self.child.0;
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        (last, err, child.wait().unwrap())
    }
}

/// `clrprof heap PID -o trace`; returns the CLI's stderr.
pub(crate) fn heap(pid: u32, trace: &Path) -> String {
    let out = Command::new(clrprof_exe())
        .arg("heap")
        .arg(pid.to_string())
        .arg("--agent")
        .arg(agent_path())
        .arg("-o")
        .arg(trace)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "clrprof heap failed: {err}");
    err
}

fn heap_json(trace: &Path, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["--format", "json"];
    a.extend_from_slice(args);
    let out = report(trace, &a);
    assert!(out.status.success(), "report {args:?}: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A type's row of the types view (`None`: no instance in the snapshot).
fn type_row<'a>(v: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    v["types"].as_array().unwrap().iter().find(|t| t["name"] == name)
}

/// What a snapshot must show of the app's phase: exact counts, the payload, no garbage, and the
/// sessions held through the static field.
pub(crate) fn check_snapshot(trace: &Path, p: &Phase) {
    let v = heap_json(trace, &["--view", "types"]);
    assert_eq!(v["snapshot"]["complete"], true, "{}", v["snapshot"]);
    let count = |name: &str| type_row(&v, name).map(|t| t["count"].as_u64().unwrap()).unwrap_or(0);
    assert_eq!(count("HeapLeak.Session"), p.sessions, "{trace:?}");
    assert_eq!(count("HeapLeak.Tag"), p.tags);
    assert_eq!(count("HeapLeak.Garbage"), 0, "short-lived garbage in the snapshot");
    assert_eq!(count("System.Collections.Generic.List<HeapLeak.Session>"), 1);
    // Each session's payload is a byte[] of its own: at least that many arrays, that many bytes.
    let bytes = type_row(&v, "System.Byte[]").expect("byte arrays");
    assert!(bytes["count"].as_u64().unwrap() >= p.sessions);
    assert!(bytes["size"].as_u64().unwrap() >= p.payload_bytes);
    // Session objects: 8-byte header, method table, Id, Payload, Tag (24 + 8 + 8 = 40 bytes on x64).
    assert_eq!(type_row(&v, "HeapLeak.Session").unwrap()["size"].as_u64().unwrap(), p.sessions * 40);
    // Every session is held through the static field, by the list and its array.
    let paths = heap_json(trace, &["--view", "paths", "--type", "HeapLeak.Session"]);
    let all = paths["paths"].as_array().unwrap();
    let through_static: Vec<&serde_json::Value> = all
        .iter()
        .filter(|p| p["root"]["kind"] == "static" && p["root"]["name"] == "HeapLeak.Cache.Sessions")
        .collect();
    assert_eq!(through_static.len(), 1, "{all:?}");
    assert_eq!(through_static[0]["count"].as_u64().unwrap(), p.sessions, "{all:?}");
    let types: Vec<&str> =
        through_static[0]["nodes"].as_array().unwrap().iter().map(|n| n["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["System.Collections.Generic.List<HeapLeak.Session>", "HeapLeak.Session[]", "HeapLeak.Session"]);
}

/// Two snapshots between the app's phases: exact counts in each and their exact difference.
fn two_snapshots(runtime: &str) {
    let _machine = machine::shared();
    let dir = scratch(&format!("heap-two-{runtime}"));
    let mut app = LeakApp::start(runtime);
    let pid = app.pid();
    let p1 = app.phase(1);
    let (a, b) = (dir.join("a.clrprof"), dir.join("b.clrprof"));
    let err = heap(pid, &a);
    assert!(err.contains(&format!("attached to process {pid}")) && err.contains("heap snapshot:"), "{err}");
    assert!(!err.contains("INCOMPLETE"), "{err}");
    app.next();
    let p2 = app.phase(2);
    heap(pid, &b);
    check_snapshot(&a, &p1);
    check_snapshot(&b, &p2);
    let out = Command::new(clrprof_exe()).args(["diff", "--format", "json"]).arg(&a).arg(&b).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s =
        d["types"].as_array().unwrap().iter().find(|t| t["name"] == "HeapLeak.Session").expect("Session in the diff");
    assert_eq!(s["base_count"].as_u64().unwrap(), p1.sessions);
    assert_eq!(s["new_count"].as_u64().unwrap(), p2.sessions);
    assert_eq!(s["delta_count"].as_i64().unwrap(), p2.sessions as i64 - p1.sessions as i64);
    // The app ran on to its normal end, its output its own.
    let (last, err, status) = app.finish();
    assert_eq!(last, format!("done sessions={}", p2.sessions));
    assert!(status.success(), "{status:?}: {err}");
    assert_eq!(err, "");
}

#[test]
fn two_snapshots_of_a_leak_on_net8() {
    two_snapshots("net8.0");
}

#[test]
fn two_snapshots_of_a_leak_on_net9() {
    two_snapshots("net9.0");
}

#[test]
fn two_snapshots_of_a_leak_on_net10() {
    two_snapshots("net10.0");
}

#[test]
fn record_takes_snapshots_at_the_times_given() {
    let _machine = machine::shared();
    let dir = scratch("heap-record-at");
    let trace = dir.join("at.clrprof");
    let mut c = Command::new(clrprof_exe());
    c.arg("record").arg("-o").arg(&trace).arg("--agent").arg(agent_path());
    c.args(["--heap-snapshot-at", "3s", "--"]).arg("dotnet").arg(app_dll("HeapLeak"));
    c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let t0 = std::time::Instant::now();
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    assert!(
        t0.elapsed().as_secs_f64() < 2.5,
        "phase 1 reached only after {:?}: too late for the 3 s snapshot",
        t0.elapsed()
    );
    let p1 = field(&l, "sessions");
    std::thread::sleep(std::time::Duration::from_secs(5).saturating_sub(t0.elapsed()));
    writeln!(stdin).unwrap();
    writeln!(stdin).unwrap();
    drop(stdin);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "{err}");
    assert!(rest.contains("done sessions="), "{rest}");
    let v = heap_json(&trace, &["--view", "types"]);
    assert_eq!(v["snapshot"]["of"], 1, "one snapshot: {}", v["snapshot"]);
    assert_eq!(v["snapshot"]["complete"], true);
    assert_eq!(type_row(&v, "HeapLeak.Session").unwrap()["count"].as_u64().unwrap(), p1);
    assert!(type_row(&v, "HeapLeak.Garbage").is_none());
    // The snapshot is taken at 3 s of the agent's clock.
    let ts = v["snapshot"]["ts_ns"].as_u64().unwrap();
    assert!((3_000_000_000..3_500_000_000).contains(&ts), "taken at {ts} ns");
    // The rest of the profile is there as usual.
    assert!(report_json(&trace)["process"]["exit_code"] == 0);
}

#[test]
fn bad_input_is_refused_clearly() {
    let run = |args: &[&str]| {
        let out = Command::new(clrprof_exe()).args(args).arg("--agent").arg(agent_path()).output().unwrap();
        (out.status.success(), text(&out.stderr))
    };
    // A process that does not exist.
    let (ok, err) = run(&["heap", "4194303"]);
    assert!(!ok && err.contains("no process with id 4194303"), "{err}");
    // A process that is not .NET.
    let mut sleeper = KillOnDrop(Command::new("sleep").arg("30").spawn().unwrap());
    std::thread::sleep(std::time::Duration::from_millis(100));
    let (ok, err) = run(&["heap", &sleeper.0.id().to_string()]);
    assert!(!ok && err.contains("not a .NET process"), "{err}");
    let _ = sleeper.0.kill();
    // Bad times.
    for bad in ["soon", "2s,,3s", "-1s"] {
        let out =
            Command::new(clrprof_exe()).args(["record", "--heap-snapshot-at", bad, "--", "true"]).output().unwrap();
        let err = text(&out.stderr);
        assert!(!out.status.success() && err.contains("--heap-snapshot-at"), "{bad}: {err}");
    }
}

#[test]
fn a_cut_trace_reports_its_snapshot_incomplete() {
    let _machine = machine::shared();
    let dir = scratch("heap-cut");
    let mut app = LeakApp::start("net10.0");
    let pid = app.pid();
    let p1 = app.phase(1);
    let whole = dir.join("whole.clrprof");
    heap(pid, &whole);
    app.next();
    app.phase(2);
    let (_, _, status) = app.finish();
    assert!(status.success());
    check_snapshot(&whole, &p1);
    // The blocks of the file (16-byte header, then `len crc payload`): the snapshot's records are
    // the largest block. Cut inside it, or just before it: the snapshot's end is missing, and it
    // must say so (never a complete-looking graph). Cut after it: the snapshot is whole.
    let bytes = std::fs::read(&whole).unwrap();
    let mut blocks = Vec::new();
    let mut at = 16;
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        blocks.push((at, 8 + len));
        at += 8 + len;
    }
    let &(start, len) = blocks.iter().max_by_key(|b| b.1).unwrap();
    for (keep, complete) in [(start + len / 2, false), (start + 9, false), (start, false), (start + len, true)] {
        let cut: PathBuf = dir.join(format!("cut-{keep}.clrprof"));
        std::fs::write(&cut, &bytes[..keep]).unwrap();
        let out = report(&cut, &["--view", "types"]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v = heap_json(&cut, &["--view", "types"]);
        assert_eq!(v["snapshot"]["complete"], complete, "cut at {keep} of {}:\n{stdout}", bytes.len());
        if complete {
            check_snapshot(&cut, &p1);
        } else {
            assert!(stdout.contains("INCOMPLETE") && stdout.contains("its end is missing"), "cut at {keep}:\n{stdout}");
            assert_eq!(v["snapshot"]["lower_bound"], true);
        }
    }
}

#[test]
fn a_snapshot_cut_at_the_memory_limit_says_so_and_the_app_runs_on() {
    let _machine = machine::shared();
    let dir = scratch("heap-limit");
    let mut c = Command::new("dotnet");
    c.arg(app_dll("HeapLeak")).args(["scale", "3000000"]);
    c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut app = KillOnDrop(child);
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    assert!(l.starts_with("ready objects=3000001"), "{l}");
    // 16 MiB hold about 2.7 M objects' records: the rest is dropped, counted, and said.
    let trace = dir.join("cut.clrprof");
    let o = Command::new(clrprof_exe())
        .arg("heap")
        .arg(app.0.id().to_string())
        .args(["--max-memory", "16", "--agent"])
        .arg(agent_path())
        .arg("-o")
        .arg(&trace)
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("the snapshot is INCOMPLETE") && err.contains("dropped beyond CLRPROF_HEAP_BUFFER_MB=16"),
        "{err}"
    );
    let v = heap_json(&trace, &["--view", "types"]);
    assert_eq!(v["snapshot"]["complete"], false);
    assert_eq!(v["snapshot"]["lower_bound"], true);
    assert!(v["snapshot"]["dropped_events"].as_u64().unwrap() > 0, "{}", v["snapshot"]);
    let objects = v["snapshot"]["objects"].as_u64().unwrap();
    assert!(objects > 0 && objects < 3_000_000, "{objects} objects kept");
    // The app runs on: it answers, and ends normally.
    writeln!(stdin).unwrap();
    l.clear();
    out.read_line(&mut l).unwrap();
    assert!(l.starts_with("pause max_ms="), "{l}");
    drop(stdin);
    l.clear();
    out.read_line(&mut l).unwrap();
    assert_eq!(l.trim(), "done");
    assert!(app.0.wait().unwrap().success());
}
