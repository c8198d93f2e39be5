//! Bad input gets a clear error and the profiled app always runs: broken traces, bad flags,
//! a missing or invalid agent, bad `CLRPROF_*` values, an unwritable output.

use crate::common::*;

use std::process::Command;

fn one_line_error(out: &std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(2), "stderr: {}", text(&out.stderr));
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("clrprof: hint:")).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].starts_with("clrprof: error: "), "{err}");
    lines[0].to_string()
}

#[test]
fn broken_traces_give_one_line_errors() {
    let _machine = machine::shared();
    let dir = scratch("broken");
    let good = dir.join("good.clrprof");
    assert!(record("Lifecycle", &["quick"], &good, &[]).status.code() == Some(3));
    let bytes = std::fs::read(&good).unwrap();

    let empty = dir.join("empty.clrprof");
    std::fs::write(&empty, b"").unwrap();
    assert!(one_line_error(&report(&empty, &[])).contains("empty file"));

    let foreign = dir.join("foreign.clrprof");
    std::fs::write(&foreign, b"PK\x03\x04 this is a zip, not a trace").unwrap();
    assert!(one_line_error(&report(&foreign, &[])).contains("not a clrprof trace"));

    let mut newer = bytes.clone();
    newer[8] = 99;
    let p = dir.join("newer.clrprof");
    std::fs::write(&p, &newer).unwrap();
    let e = one_line_error(&report(&p, &[]));
    assert!(e.contains("version 99") && e.contains("upgrade"), "{e}");

    let mut corrupt = bytes.clone();
    let mid = bytes.len() / 2;
    corrupt[mid] ^= 0xff;
    let p = dir.join("corrupt.clrprof");
    std::fs::write(&p, &corrupt).unwrap();
    assert!(one_line_error(&report(&p, &[])).contains("corrupt trace"));

    let header_only = dir.join("header.clrprof");
    std::fs::write(&header_only, &bytes[..16]).unwrap();
    assert!(one_line_error(&report(&header_only, &[])).contains("no records"));

    let missing = dir.join("missing.clrprof");
    assert!(one_line_error(&report(&missing, &[])).contains("cannot open trace"));

    // Truncated anywhere after the first block: a warning, and the report still works.
    for cut in [bytes.len() - 1, bytes.len() - 20, bytes.len() * 2 / 3] {
        let p = dir.join("cut.clrprof");
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let out = report(&p, &["--view", "tables"]);
        assert!(out.status.success(), "cut at {cut}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("warning: ") && text(&out.stderr).contains("truncated"));
        assert!(text(&out.stdout).contains("FUNCTIONS ("));
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_flags_are_refused_clearly() {
    let out = Command::new(clrprof_exe()).args(["report", "x.clrprof", "--view", "bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = text(&out.stderr);
    assert!(e.contains("'bogus'") && e.contains("--view") && e.contains("tables"), "{e}");
    let out = Command::new(clrprof_exe()).args(["record"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("COMMAND"), "{}", text(&out.stderr));
    let out = Command::new(clrprof_exe()).args(["frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_trace_path_in_a_missing_directory_is_refused_before_the_program_starts() {
    let dir = scratch("missing-output-dir");
    let marker = dir.join("ran");
    // If the program ran, it would create the marker file.
    let out = Command::new(clrprof_exe())
        .args(["record", "-o", "no/such/dir/x.clrprof", "--", "touch"])
        .arg(&marker)
        .current_dir(&dir)
        .output()
        .unwrap();
    let e = one_line_error(&out);
    assert!(e.contains("no/such/dir/x.clrprof") && e.contains("directory no/such/dir does not exist"), "{e}");
    assert!(!marker.exists(), "the program must not start");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_time_ranges_are_refused_clearly() {
    let trace = repo_root().join("testdata/traces/v1/sampled.clrprof");
    let run = |args: &[&str]| Command::new(clrprof_exe()).arg("report").arg(&trace).args(args).output().unwrap();
    let out = run(&["--from", "5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("needs a unit"), "{}", text(&out.stderr));
    let out = run(&["--to", "3h"]);
    assert!(text(&out.stderr).contains("unknown time unit 'h'"), "{}", text(&out.stderr));
    let e = one_line_error(&run(&["--from", "2s", "--to", "1s"]));
    assert!(e.contains("--from must be before --to"), "{e}");
    // A window with nothing in it is a valid, empty report.
    let out = run(&["--from", "100s", "--view", "modules"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Total samples recorded: 0"), "{}", text(&out.stdout));
}

#[test]
fn missing_agent_is_refused_before_the_app_starts() {
    let _machine = machine::shared();
    let dir = scratch("missing-agent");
    let marker = dir.join("t.clrprof");
    let out = Command::new(clrprof_exe())
        .arg("record")
        .arg("-o")
        .arg(&marker)
        .args(["--agent", "/nonexistent/libclrprof_agent.so", "--", "dotnet"])
        .arg(app_dll("Lifecycle"))
        .arg("quick")
        .output()
        .unwrap();
    let e = one_line_error(&out);
    assert!(e.contains("agent library not found") && e.contains("/nonexistent/libclrprof_agent.so"), "{e}");
    assert!(text(&out.stderr).contains("hint: build the agent"), "{}", text(&out.stderr));
    assert!(!marker.exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_invalid_agent_or_profiler_path_never_stops_the_app() {
    let _machine = machine::shared();
    let dir = scratch("invalid-agent");
    let plain = run_plain("Threads", &["2"]);
    // A file that is not a shared library: the runtime refuses it and the app runs unprofiled.
    let bogus = dir.join("libbogus.so");
    std::fs::write(&bogus, b"not an ELF file").unwrap();
    let trace = dir.join("t.clrprof");
    let out = record("Threads", &["2"], &trace, &["--agent", bogus.to_str().unwrap()]);
    assert_eq!(out.stdout, plain.stdout);
    assert_eq!(out.status.code(), plain.status.code());
    assert!(text(&out.stderr).contains("no trace was written"), "{}", text(&out.stderr));
    assert!(!trace.exists());

    // Raw environment pointing at a missing library: same.
    let out = Command::new("dotnet")
        .arg(app_dll("Threads"))
        .arg("2")
        .env("CORECLR_ENABLE_PROFILING", "1")
        .env("CORECLR_PROFILER", clrprof_trace::AGENT_CLSID)
        .env("CORECLR_PROFILER_PATH", "/nonexistent/libclrprof_agent.so")
        .output()
        .unwrap();
    assert_eq!(out.stdout, plain.stdout);
    assert_eq!(out.status.code(), plain.status.code());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_clrprof_values_are_reported_and_the_app_runs() {
    let _machine = machine::shared();
    let dir = scratch("bad-env");
    let plain = run_plain("Threads", &["2"]);
    let trace = dir.join("t.clrprof");
    let log = dir.join("agent.log");
    let out = Command::new(clrprof_exe())
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--agent")
        .arg(agent_path())
        .arg("--log")
        .arg(&log)
        .args(["--", "dotnet"])
        .arg(app_dll("Threads"))
        .arg("2")
        .env("CLRPROF_FLUSH_MS", "fast")
        .output()
        .unwrap();
    assert_eq!(out.stdout, plain.stdout);
    assert_eq!(out.status.code(), plain.status.code());
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.contains(r#"CLRPROF_FLUSH_MS="fast" ignored"#), "{log_text}");
    let v = report_json(&trace);
    let msgs: Vec<String> = v["messages"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().to_string()).collect();
    assert!(msgs.iter().any(|m| m.contains("CLRPROF_FLUSH_MS")), "{msgs:?}");
    let t = text(&report(&trace, &[]).stdout);
    assert!(t.contains("note: agent warning: CLRPROF_FLUSH_MS"), "{t}");

    // An output the agent cannot create: the profiler declines to load, the app runs.
    let log2 = dir.join("agent2.log");
    let out = Command::new("dotnet")
        .arg(app_dll("Threads"))
        .arg("2")
        .env("CORECLR_ENABLE_PROFILING", "1")
        .env("CORECLR_PROFILER", clrprof_trace::AGENT_CLSID)
        .env("CORECLR_PROFILER_PATH", agent_path())
        .env("CLRPROF_OUTPUT", "/nonexistent-dir/x.clrprof")
        .env("CLRPROF_LOG", &log2)
        .output()
        .unwrap();
    assert_eq!(out.stdout, plain.stdout);
    assert_eq!(out.status.code(), plain.status.code());
    assert!(out.stderr.is_empty(), "the agent writes nothing to the app's stderr: {}", text(&out.stderr));
    let l = std::fs::read_to_string(&log2).unwrap();
    assert!(l.contains("cannot create trace file /nonexistent-dir/x.clrprof"), "{l}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_pyroscope_options_are_refused_before_the_collector_starts() {
    let dir = scratch("bad-pyroscope");
    let store = dir.join("runs.db");
    let collect = |extra: &[&str]| {
        Command::new(clrprof_exe())
            .args(["collect", "--listen", "127.0.0.1:0", "--store"])
            .arg(&store)
            .args(extra)
            .output()
            .unwrap()
    };
    let e = one_line_error(&collect(&["--pyroscope", "ftp://profiles.example.com"]));
    assert!(e.contains("expected http[s]://HOST[:PORT][/PATH]"), "{e}");
    let e = one_line_error(&collect(&["--pyroscope", "http://host:port"]));
    assert!(e.contains("expected http[s]://HOST[:PORT][/PATH]"), "{e}");
    let e = one_line_error(&collect(&["--otlp", "https://otlp.example.com", "--tls-ca", "/nonexistent/ca.pem"]));
    assert!(e.contains("--tls-ca /nonexistent/ca.pem: No such file"), "{e}");
    let out = collect(&["--otlp", "http://localhost:4318", "--otlp-header", "no colon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("expected NAME:VALUE"), "{}", text(&out.stderr));
    let out = collect(&["--pyroscope", "http://localhost:4040", "--interval", "100ms"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("expected an interval from 1s to 1h"), "{}", text(&out.stderr));
    let out = collect(&["--pyroscope-token", "t"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--pyroscope <URL>"), "{}", text(&out.stderr));
    assert!(!store.exists(), "nothing was started");
    let _ = std::fs::remove_dir_all(dir);
}

/// An error's cause is said once: the message of an I/O or decoding error is not repeated by the
/// error chain (`cannot open trace X: Is a directory (os error 21)`, not twice).
#[test]
fn errors_say_their_cause_once() {
    let dir = scratch("cause-once");
    let empty = dir.join("empty.clrprof");
    std::fs::write(&empty, b"").unwrap();
    let missing = dir.join("missing.clrprof");
    let cases = [
        (dir.clone(), format!("cannot open trace {}: Is a directory (os error 21)", dir.display())),
        (missing.clone(), format!("cannot open trace {}: No such file or directory (os error 2)", missing.display())),
        (
            empty.clone(),
            format!(
                "cannot read {}: empty file: the profiler never wrote a header (did the agent load?)",
                empty.display()
            ),
        ),
    ];
    for (path, want) in cases {
        for cmd in [&["report"][..], &["export", "--format", "collapsed"][..]] {
            let out = Command::new(clrprof_exe()).args(cmd).arg(&path).output().unwrap();
            assert_eq!(one_line_error(&out), format!("clrprof: error: {want}"), "{cmd:?}");
        }
    }
    // The collector's listen error too.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let store = dir.join("runs.db");
    let out = Command::new(clrprof_exe()).args(["collect", "--listen", &addr, "--store"]).arg(&store).output().unwrap();
    let e = one_line_error(&out);
    assert_eq!(e, format!("clrprof: error: cannot listen on {addr}: Address already in use (os error 98)"));
}
