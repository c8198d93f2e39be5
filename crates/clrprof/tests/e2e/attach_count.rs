//! End to end: `clrprof attach --count PATTERN` (docs/count.md, "After attach"). apps/AttachCount
//! runs without any profiler settings, warms a loop up until the JIT has inlined the tiny
//! `Counted.Tick` into it, then makes exactly N calls per line it reads. The session counts the
//! calls made while attached, exactly (the inlining caller is recompiled: RequestReJITWithInliners),
//! and after the revert the app goes on with the same output.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

use crate::common::*;

struct App {
    child: KillOnDrop,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl App {
    fn start(mut c: Command) -> App {
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
        for k in ["CORECLR_ENABLE_PROFILING", "CORECLR_PROFILER", "CORECLR_PROFILER_PATH"] {
            c.env_remove(k);
        }
        let mut child = c.spawn().expect("start apps/AttachCount");
        let stdin = child.stdin.take().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(line.starts_with("ready "), "unexpected first line {line:?}");
        App { child: KillOnDrop(child), stdin, out }
    }

    /// Makes exactly `n` calls of `Counted.Tick`; returns the app's answer.
    fn calls(&mut self, n: u64) -> String {
        self.say(&n.to_string())
    }

    /// Sends one line (`burn MS`, `hot N`); returns the app's answer.
    fn say(&mut self, line: &str) -> String {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }
}

/// `clrprof attach PID ARGS` until SIGINT; `during` runs once the CLI said it attached.
/// Returns (success, the CLI's stderr).
fn count_session(pid: u32, trace: &Path, log: &Path, args: &[&str], during: impl FnOnce()) -> (bool, String) {
    let mut c = Command::new(clrprof_exe());
    c.arg("attach")
        .arg(pid.to_string())
        .arg("--agent")
        .arg(agent_path())
        .args(args)
        .arg("-o")
        .arg(trace)
        .arg("--log")
        .arg(log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("run clrprof attach");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    if first.contains(&format!("attached to process {pid}")) {
        during();
        let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    }
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    (status.success(), format!("{first}{rest}"))
}

/// Runs the scenario on an app started by `app`, `more` patterns beside `AttachCount.Counted.Tick`;
/// returns the trace's JSON report and the agent's log.
fn counts_exactly_while_attached(app: Command, name: &str, more: &[&str]) -> (serde_json::Value, String) {
    let dir = scratch(name);
    let (trace, log) = (dir.join("count.clrprof"), dir.join("agent.log"));
    let mut app = App::start(app);
    assert_eq!(app.calls(1000), "done 1000 1000");
    let pid = app.pid();
    let mut args = vec!["--no-sample", "--count", "AttachCount.Counted.Tick"];
    for p in more {
        args.extend(["--count", p]);
    }
    let (ok, stderr) = count_session(pid, &trace, &log, &args, || {
        assert_eq!(app.calls(12_345), "done 12345 12345");
        assert_eq!(app.calls(3_000_000), "done 3000000 3000000");
    });
    let agent_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(ok, "attach --count failed: {stderr}\nagent log:\n{agent_log}");
    // After the revert the app goes on, its output unchanged.
    assert_eq!(app.calls(777), "done 777 777");
    assert_eq!(app.calls(3_000_000), "done 3000000 3000000");
    let v = report_json(&trace);
    assert_eq!(calls(&v, "AttachCount.Counted.Tick"), 3_012_345, "agent log:\n{agent_log}");
    (v, agent_log)
}

#[test]
fn attach_count_is_exact_on_net10() {
    let _machine = machine::shared();
    let mut c = Command::new("dotnet");
    c.arg(app_dll("AttachCount"));
    // String.get_Length is marked [Intrinsic] in CoreLib: selected by its pattern, never rejitted,
    // listed uncounted with the reason (the predicate `record --count` uses).
    let (v, log) = counts_exactly_while_attached(c, "attach-count-net10", &["System.String.get_Length"]);
    assert!(log.contains("ReJIT of 1 methods requested through RequestReJITWithInliners"), "{log}");
    let uncounted = v["instrumentation"]["il_probes"]["uncounted"].as_array().unwrap();
    assert!(
        uncounted.iter().any(|u| u["name"].as_str() == Some("System.String.get_Length")
            && u["reason"].as_str().unwrap().contains("intrinsic")),
        "{uncounted:?}"
    );
}

#[test]
fn attach_count_is_exact_on_net8() {
    let _machine = machine::shared();
    let (_, log) =
        counts_exactly_while_attached(Command::new(app_for("net8.0", "AttachCount")), "attach-count-net8", &[]);
    assert!(log.contains("ReJIT of 1 methods requested through"), "{log}");
}

#[test]
fn attach_count_is_refused_on_net9() {
    let _machine = machine::shared();
    let dir = scratch("attach-count-net9");
    let mut app = App::start(Command::new(app_for("net9.0", "AttachCount")));
    let pid = app.pid();
    let args = ["--no-sample", "--count", "AttachCount.Counted.Tick"];
    let (ok, stderr) = count_session(pid, &dir.join("count.clrprof"), &dir.join("agent.log"), &args, || {});
    assert!(!ok, "attach --count was not refused on .NET 9: {stderr}");
    assert!(stderr.contains("refuses .NET 9"), "{stderr}");
    let log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
    assert!(log.contains("refused on .NET 9"), "{stderr}\n{log}");
    // The app is untouched.
    assert_eq!(app.calls(500), "done 500 500");
}

/// `attach --count-top 1`: the agent samples for `--count-after`, takes the method with the most
/// self samples — `Hot.Step`, which a 1.5 s burn made hot — and counts its calls from the moment
/// its ReJIT request returned (the agent's log says so) exactly: 12,345 + 3,000,000 calls made
/// after that line, none between the burn and it (the app waits on stdin).
fn count_top_counts_the_hot_method_exactly(app: Command, name: &str) -> String {
    let dir = scratch(name);
    let (trace, log) = (dir.join("top.clrprof"), dir.join("agent.log"));
    let mut app = App::start(app);
    // Step and its loop tier up before the attach.
    assert!(app.say("burn 300").starts_with("burnt "));
    let pid = app.pid();
    let requested = "ReJIT of 1 methods requested through";
    let args = ["--count-top", "1", "--count-after", "4s"];
    let (ok, stderr) = count_session(pid, &trace, &log, &args, || {
        let burnt = app.say("burn 1500");
        assert!(burnt.starts_with("burnt "), "{burnt}");
        let agent_log = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !agent_log.contains(requested),
            "the 4 s window ended before the 1.5 s burn did (machine too slow for this test):\n{agent_log}"
        );
        let t = std::time::Instant::now();
        while !std::fs::read_to_string(&log).unwrap_or_default().contains(requested) {
            assert!(t.elapsed().as_secs() < 60, "no ReJIT request in the agent's log after 60 s");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(app.say("hot 12345"), "hot 12345 12345");
        assert_eq!(app.say("hot 3000000"), "hot 3000000 3000000");
    });
    let agent_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(ok, "attach --count-top failed: {stderr}\nagent log:\n{agent_log}");
    assert!(stderr.contains("the 1 methods with the most CPU samples are counted from 4 s"), "{stderr}");
    // The choice, with its samples, in the log and the trace's messages.
    let chosen = agent_log
        .lines()
        .find(|l| l.contains("attach --count-top 1: after 4000 ms"))
        .unwrap_or_else(|| panic!("no choice in the agent's log:\n{agent_log}"));
    assert!(chosen.contains("in managed code): AttachCount.Hot.Step ("), "{chosen}");
    // After the revert the app goes on, its output unchanged.
    assert_eq!(app.say("hot 777"), "hot 777 777");
    let v = report_json(&trace);
    assert_eq!(calls(&v, "AttachCount.Hot.Step"), 3_012_345, "agent log:\n{agent_log}");
    assert_eq!(names_with_calls(&v), ["AttachCount.Hot.Step"]);
    let out = report(&trace, &["--view", "summary"]);
    let summary = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(summary.contains("note: agent info: attach --count-top 1: after 4000 ms"), "{summary}");
    agent_log
}

#[test]
fn attach_count_top_is_exact_on_net10() {
    let _machine = machine::shared();
    let mut c = Command::new("dotnet");
    c.arg(app_dll("AttachCount"));
    let log = count_top_counts_the_hot_method_exactly(c, "attach-count-top-net10");
    assert!(log.contains("through RequestReJITWithInliners"), "{log}");
}

#[test]
fn attach_count_top_is_exact_on_net8() {
    let _machine = machine::shared();
    count_top_counts_the_hot_method_exactly(Command::new(app_for("net8.0", "AttachCount")), "attach-count-top-net8");
}

/// Bad values are refused by the CLI before anything is sent to a process.
#[test]
fn attach_count_top_refuses_bad_values() {
    let run = |args: &[&str]| {
        let out = Command::new(clrprof_exe()).arg("attach").arg("1").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        text(&out.stderr)
    };
    assert!(run(&["--count-top", "0"]).contains("expected a number of methods from 1 to 1000, got 0"));
    assert!(run(&["--count-top", "ten"]).contains("expected a number of methods from 1 to 1000, got \"ten\""));
    assert!(run(&["--count-top", "1001"]).contains("from 1 to 1000"));
    assert!(run(&["--count-top", "2", "--count", "A.B"]).contains("cannot be used with"));
    assert!(run(&["--count-top", "2", "--no-sample"]).contains("cannot be used with"));
    assert!(run(&["--count-after", "2s"]).contains("--count-top"));
    assert!(run(&["--count-top", "2", "--count-after", "0.01"]).contains("expected a time from 100ms"));
    assert!(run(&["--count-top", "2", "--count-after", "5s", "-d", "3"]).contains("must be shorter than --duration"));
}
