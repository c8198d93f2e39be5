//! End to end: the profiled process is never harmed — stdin/stdout/stderr and exit codes pass
//! through, Ctrl-C reaches it, and a crash, FailFast or SIGKILL still leaves a readable trace.

use crate::common::*;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn stdin_stdout_stderr_and_exit_code_pass_through() {
    let _machine = machine::shared();
    let dir = scratch("echo");
    let trace = dir.join("echo.clrprof");
    let input = "hello profiler\nsecond line ünïcödé\n";
    let run = |profiled: bool| {
        let mut c = if profiled {
            let mut c = Command::new(clrprof_exe());
            c.arg("record").arg("-o").arg(&trace).arg("--agent").arg(agent_path()).arg("--");
            c.arg("dotnet");
            c
        } else {
            Command::new("dotnet")
        };
        c.arg(app_dll("Lifecycle")).arg("echo");
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let plain = run(false);
    let prof = run(true);
    assert_eq!(prof.stdout, plain.stdout);
    assert_eq!(text(&prof.stdout), input.to_uppercase());
    assert_eq!(prof.status.code(), plain.status.code());
    assert_eq!(prof.status.code(), Some((input.chars().count() % 100) as i32));
    // The app's own stderr comes first and unchanged; clrprof's note follows on its own line.
    let err = text(&prof.stderr);
    assert!(err.starts_with(&text(&plain.stderr)), "{err}");
    assert!(err.contains("clrprof: trace written to"), "{err}");
    let v = report_json(&trace);
    assert_eq!(v["process"]["exit_code"], prof.status.code().unwrap());
    let _ = std::fs::remove_dir_all(dir);
}

fn wait_for_line(child: &mut std::process::Child, prefix: &str) -> String {
    let stdout = child.stdout.as_mut().unwrap();
    let mut r = BufReader::new(stdout);
    let mut line = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        line.clear();
        if r.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if line.starts_with(prefix) {
            return line.trim().to_string();
        }
    }
    panic!("no line starting with {prefix:?}");
}

#[test]
fn sigkill_leaves_a_readable_trace() {
    let _machine = machine::shared();
    let dir = scratch("sigkill");
    let trace = dir.join("killed.clrprof");
    let mut c = Command::new(clrprof_exe());
    c.arg("record").arg("-o").arg(&trace).arg("--agent").arg(agent_path());
    c.args(["--", "dotnet"]).arg(app_dll("Lifecycle")).arg("wait");
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = KillOnDrop(c.spawn().unwrap());
    let line = wait_for_line(&mut child.0, "pid=");
    let pid: i32 = line["pid=".len()..].parse().unwrap();
    // Let the writer flush at least once after Main started (flush interval 50 ms).
    std::thread::sleep(Duration::from_millis(400));
    // Safety: sending a signal to the child we started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let status = child.0.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 9), "clrprof exits like the child");
    let v = report_json(&trace);
    assert_eq!(v["process"]["signal"], 9);
    assert_eq!(v["process"]["clean_shutdown"], false);
    find(&v, "functions", "Program.Main");
    find(&v, "functions", "Work.Chunk");
    let t = text(&report(&trace, &[]).stdout);
    assert!(t.contains("killed by signal 9"));
    assert!(t.contains("did not shut down cleanly"));

    // Without the exit record (clrprof itself killed) and cut mid-block, the trace still reads.
    let bytes = std::fs::read(&trace).unwrap();
    let cut = dir.join("cut.clrprof");
    std::fs::write(&cut, &bytes[..bytes.len() - 7]).unwrap();
    let out = report(&cut, &["--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("truncated"), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    find(&v, "functions", "Program.Main");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn ctrl_c_reaches_the_child_and_the_trace_is_saved() {
    let _machine = machine::shared();
    let dir = scratch("ctrlc");
    let trace = dir.join("int.clrprof");
    let mut c = Command::new(clrprof_exe());
    c.arg("record").arg("-o").arg(&trace).arg("--agent").arg(agent_path());
    c.args(["--", "dotnet"]).arg(app_dll("Lifecycle")).arg("wait");
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    // Its own process group, as a shell job: Ctrl-C = SIGINT to the whole group.
    use std::os::unix::process::CommandExt;
    c.process_group(0);
    // And with Ctrl-C's default action, as an interactive shell gives its jobs: when the tests run
    // in the background of a script or under nohup, SIGINT is ignored and that is inherited, and
    // .NET leaves an ignored SIGINT ignored (the app would run its whole minute).
    // Safety: signal() is async-signal-safe, called between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        })
    };
    let mut child = KillOnDrop(c.spawn().unwrap());
    let pgid = child.0.id() as i32;
    wait_for_line(&mut child.0, "pid=");
    std::thread::sleep(Duration::from_millis(200));
    // Safety: signalling the process group we created.
    unsafe { libc::kill(-pgid, libc::SIGINT) };
    let out = std::mem::replace(&mut child.0, Command::new("true").spawn().unwrap()).wait_with_output().unwrap();
    // .NET ends on SIGINT after running its handler; clrprof survives and reports the trace.
    assert!(text(&out.stdout).contains("interrupted"), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("trace written to"), "{}", text(&out.stderr));
    let v = report_json(&trace);
    find(&v, "functions", "Work.Chunk");
    let code = out.status.code().unwrap();
    assert_eq!(code, 130, "status of a process ended by SIGINT");
    assert!(v["process"]["signal"] == 2 || v["process"]["exit_code"] == 130, "{}", v["process"]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn crash_and_failfast_pass_their_status_through_and_keep_the_trace() {
    let _machine = machine::shared();
    for mode in ["crash", "failfast"] {
        let dir = scratch(mode);
        let trace = dir.join("t.clrprof");
        let plain = run_plain("Lifecycle", &[mode]);
        let out = record("Lifecycle", &[mode], &trace, &[]);
        assert_eq!(out.status.code(), plain.status.code().or(Some(128 + 6)), "{mode}: {}", text(&out.stderr));
        let v = report_json(&trace);
        find(&v, "functions", "Work.Chunk");
        assert_eq!(v["process"]["signal"], 6, "{mode} aborts");
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A process that dies 20 ms into `Main` (FailFast, an unhandled exception or a stack overflow: the
/// runtime aborts without `Shutdown`, after resetting signal handlers) still leaves its assemblies
/// and the names of the functions it ran: the agent flushes every few ms during start-up.
#[test]
fn a_process_that_dies_within_50_ms_leaves_its_assemblies_and_functions() {
    let _machine = machine::shared();
    for mode in ["failfast-early", "throw-early", "overflow-early"] {
        for round in 0..3 {
            let dir = scratch(&format!("{mode}-{round}"));
            let trace = dir.join("t.clrprof");
            let out = record("Lifecycle", &[mode, "20"], &trace, &[]);
            assert!(!out.status.success(), "{mode} ends the process: {}", text(&out.stderr));
            let v = report_json(&trace);
            assert_eq!(v["process"]["signal"], 6, "{mode} aborts: {}", v["process"]);
            find(&v, "assemblies", "Lifecycle");
            find(&v, "assemblies", "System.Private.CoreLib");
            find(&v, "functions", "Program.Main");
            find(&v, "functions", "Work.Chunk");
            if mode == "overflow-early" {
                find(&v, "functions", "Overflow.Down");
            }
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[test]
fn a_target_that_exits_at_once_gives_a_trace() {
    let _machine = machine::shared();
    let dir = scratch("quick");
    let trace = dir.join("q.clrprof");
    let out = record("Lifecycle", &["quick"], &trace, &[]);
    assert_eq!(out.status.code(), Some(3));
    let v = report_json(&trace);
    assert_eq!(v["process"]["exit_code"], 3);
    find(&v, "functions", "Program.Main");
    let _ = std::fs::remove_dir_all(dir);
}

/// A program killed before the agent could load (here the shell that would exec the app kills
/// itself first) leaves no trace, and `record` names that cause rather than asking whether the
/// program is a .NET one; a program that fails, or ends without loading the agent, is told apart.
#[test]
fn a_program_killed_before_the_profiler_loads_is_named_as_such() {
    let _machine = machine::shared();
    let dir = scratch("killed-early");
    let trace = dir.join("x.clrprof");
    let run = |cmd: &[&str]| {
        let mut c = Command::new(clrprof_exe());
        c.arg("record").arg("-o").arg(&trace).arg("--agent").arg(agent_path()).arg("--").args(cmd);
        c.output().unwrap()
    };
    let app = app_dll("Lifecycle");
    let out = run(&["sh", "-c", &format!("kill -9 $$; exec dotnet {} quick", app.display())]);
    assert_eq!(out.status.code(), Some(128 + 9));
    let err = text(&out.stderr);
    assert_eq!(
        err.trim_end(),
        format!(
            "clrprof: warning: no trace was written to {}: `sh` was killed by signal 9 (SIGKILL) before the profiler loaded",
            trace.display()
        )
    );
    assert!(!trace.exists());
    let out = run(&["sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(err.contains(": `sh` exited with code 3 before the profiler loaded (is `sh` a .NET program? "), "{err}");
    let out = run(&["true"]);
    assert_eq!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(err.contains(": the profiler did not load (is `true` a .NET program? re-run with --log FILE"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn default_trace_name_comes_from_the_program_and_pid() {
    let _machine = machine::shared();
    let dir = scratch("default-name");
    let out = Command::new(clrprof_exe())
        .current_dir(&dir)
        .arg("record")
        .arg("--agent")
        .arg(agent_path())
        .args(["--", "dotnet"])
        .arg(app_dll("Lifecycle"))
        .arg("quick")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let files: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let f = &files[0];
    assert!(f.starts_with("Lifecycle-") && f.ends_with(".clrprof"), "{f}");
    let pid: u64 = f["Lifecycle-".len()..f.len() - ".clrprof".len()].parse().unwrap();
    let v = report_json(&dir.join(f));
    assert_eq!(v["process"]["pid"], pid);
    assert!(text(&out.stderr).contains(f.as_str()));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn code_in_an_unloaded_assembly_context_is_named_and_the_app_is_unharmed() {
    let _machine = machine::shared();
    let dir = scratch("unload");
    let trace = dir.join("u.clrprof");
    let plain = run_plain("Lifecycle", &["unload"]);
    assert_eq!(text(&plain.stdout), "unloaded=True\n");
    let out = record("Lifecycle", &["unload"], &trace, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(out.stdout, plain.stdout);
    let v = report_json(&trace);
    // Work.Chunk ran only in the collectible copy: it is named, and its module is the one that
    // unloaded.
    let chunk = find(&v, "functions", "Work.Chunk");
    let module = chunk["module_id"].as_u64().unwrap();
    let m = v["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"].as_u64() == Some(module))
        .expect("module of Work.Chunk");
    assert_eq!(m["name"], "Lifecycle.dll");
    assert!(!m["unloaded_ns"].is_null(), "the collectible copy's module unloaded: {m}");
    assert_eq!(chunk["signature"], "long (long)");
    // The event log and the enter/leave hooks also touch ids that die at unload.
    for flags in [&["--events"][..], &["--instrument"][..], &["--alloc", "exact"][..]] {
        let t = dir.join("f.clrprof");
        let out = record("Lifecycle", &["unload"], &t, flags);
        assert_eq!(out.status.code(), Some(0), "{flags:?}: {}", text(&out.stderr));
        assert_eq!(out.stdout, plain.stdout, "{flags:?}");
        find(&report_json(&t), "functions", "Work.Chunk");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A process that fails fast right after some 50 ms of CPU in known functions keeps its last
/// moments: the runtime's FailFast event makes the agent drain the samples, publish the hooks' call
/// counts and write every buffer before the abort. The functions carry their exact call counts
/// under `--instrument` and `--counts-only`, their CPU time (at least 3/4 of what the thread
/// measured of its own loop) and wall samples when sampling, in every one of 5 runs per mode.
#[test]
fn a_failfast_keeps_the_calls_and_samples_of_its_last_moments() {
    let _machine = machine::shared();
    let dir = scratch("failfast-work");
    for flags in [&[][..], &["--instrument"][..], &["--instrument", "--counts-only"][..]] {
        for round in 0..5 {
            let trace = dir.join(format!("t{round}.clrprof"));
            let out = record("Lifecycle", &["failfast-work"], &trace, flags);
            let what = format!("{flags:?}, run {round}");
            assert_eq!(out.status.code(), Some(128 + 6), "{what}: {}", text(&out.stderr));
            let line = text(&out.stdout);
            let field = |k: &str| -> u64 {
                let at = line.find(&format!("{k}=")).unwrap_or_else(|| panic!("{what}: {k} in {line:?}"));
                line[at + k.len() + 1..].split_whitespace().next().unwrap().parse().unwrap()
            };
            let (chunks, cpu_ns) = (field("chunks"), field("cpu_ns"));
            let v = report_json(&trace);
            assert_eq!(v["process"]["signal"], 6, "{what}");
            let main = find(&v, "functions", "Program.Main");
            let chunk = find(&v, "functions", "Work.Chunk");
            let num = |f: &serde_json::Value, k: &str| f[k].as_u64().unwrap_or(0);
            if flags.contains(&"--instrument") {
                assert_eq!(num(main, "calls"), 1, "{what}: {main}");
                assert_eq!(num(chunk, "calls"), chunks, "{what}: {chunk}");
            }
            // Sampling is on in every mode: the loop's CPU time and wall samples.
            assert!(num(chunk, "samples_total") >= 1, "{what}: {chunk}");
            assert!(
                num(main, "cpu_total_ns") * 4 >= cpu_ns * 3,
                "{what}: Main's sampled CPU {} ns of the loop's {cpu_ns} ns",
                num(main, "cpu_total_ns")
            );
            assert!(num(main, "wall_samples_total") >= 1, "{what}: {main}");
            let messages = v["messages"].to_string();
            assert!(messages.contains("failed fast"), "{what}: {messages}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}
