//! `clrprof attach` and `clrprof heap` into a process in another container, made here with real
//! namespaces (`unshare --mount --pid --fork --mount-proc`, as root): the app runs as pid 1 of its
//! own PID namespace, with a private /tmp (a tmpfs of its own) and without the agent's directory
//! (a tmpfs over it), so the agent must be copied in; the heap test's app runs in a rootless
//! container besides (a user namespace of its own, its root being uid 100000 here). The same exact figures as the `attach` and
//! `heap_capture` tests; the app runs on, and its /tmp holds exactly what it held before, after
//! each session: ended by its duration, by Ctrl-C, or failed (an agent the runtime cannot load,
//! root without capabilities).
//!
//! Without root or `unshare` (a CI runner that is not root), each test prints why it is skipped.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;

use crate::attach::{child_pids, get, primes_called_by_the_handler, Load};
use crate::common::*;
use crate::heap_capture::{check_snapshot, heap, LeakApp};

/// Why this machine cannot make the namespaces, if it cannot.
fn cannot_unshare() -> Option<String> {
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: unshare --mount --pid needs root".into());
    }
    if !Path::new("/usr/bin/setpriv").exists() {
        return Some("no setpriv (util-linux) to start a rootless container".into());
    }
    match Command::new("unshare").args(["-m", "-p", "-f", "--mount-proc", "true"]).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("unshare --mount --pid fails here: {}", text(&o.stderr).trim())),
        Err(e) => Some(format!("no unshare command: {e}")),
    }
}

macro_rules! skip_without_namespaces {
    ($test:literal) => {
        if let Some(why) = cannot_unshare() {
            println!("SKIPPED {}: {why}", $test);
            eprintln!("SKIPPED {}: {why}", $test);
            return;
        }
    };
}

/// `unshare` running `args` as pid 1 of new mount and PID namespaces, with a private /tmp and
/// the agent's directory hidden; it is killed (and the app with it) when dropped. With
/// `rootless`, also in a new user namespace, started as uid 100000 (its root is that uid here),
/// as a rootless container runs.
fn in_container(args: &[&Path], rootless: bool) -> Command {
    let agent_dir = agent_path().parent().unwrap().to_path_buf();
    let run: Vec<String> = args.iter().map(|a| format!("'{}'", a.display())).collect();
    let script = format!(
        "mount -t tmpfs tmpfs /tmp && mount -t tmpfs tmpfs '{}' && exec {}",
        agent_dir.display(),
        run.join(" ")
    );
    let mut c = match rootless {
        true => {
            let mut c = Command::new("setpriv");
            c.args([&format!("--reuid={ROOTLESS}"), &format!("--regid={ROOTLESS}"), "--clear-groups", "unshare"]);
            c.args(["--user", "--map-root-user"]).env("HOME", "/tmp");
            c
        }
        false => Command::new("unshare"),
    };
    c.args(["--mount", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", &script]);
    c
}

/// The host uid of the rootless container's root.
const ROOTLESS: u32 = 100_000;

/// The host pid of the app `unshare` started (its only child).
fn app_pid(unshare: u32) -> u32 {
    for _ in 0..100 {
        if let [pid] = child_pids(unshare)[..] {
            return pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("unshare {unshare} started no app");
}

/// The names in the app's /tmp, sorted.
fn tmp_of(pid: u32) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/root/tmp"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The process is pid 1 of its own namespaces and cannot see the agent on the host's path.
fn check_contained(pid: u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert_eq!(nspid.split_whitespace().collect::<Vec<_>>(), ["NSpid:", &pid.to_string(), "1"]);
    let ns = |p: &str, k: &str| std::fs::read_link(format!("/proc/{p}/ns/{k}")).unwrap();
    assert_ne!(ns("self", "mnt"), ns(&pid.to_string(), "mnt"));
    assert_ne!(ns("self", "pid"), ns(&pid.to_string(), "pid"));
    let inside = PathBuf::from(format!("/proc/{pid}/root")).join(agent_path().strip_prefix("/").unwrap());
    assert!(!inside.exists(), "the app sees the agent at {}", inside.display());
}

#[test]
fn attach_into_a_container_under_load_twice() {
    skip_without_namespaces!("attach_into_a_container_under_load_twice");
    let _machine = machine::shared();
    let dir = scratch("containers-attach");
    let dll = app_dll("Web");
    let mut c = in_container(&[Path::new("dotnet"), &dll], false);
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for k in ["CORECLR_ENABLE_PROFILING", "CORECLR_PROFILER", "CORECLR_PROFILER_PATH"] {
        c.env_remove(k);
    }
    let mut web = KillOnDrop(c.spawn().expect("start apps/Web in a container"));
    let mut out = BufReader::new(web.0.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("listening on http://").unwrap_or_else(|| panic!("first line {line:?}"));
    let addr = addr.to_string();
    let pid = app_pid(web.0.id());
    check_contained(pid);
    let tmp_before = tmp_of(pid);
    assert!(tmp_before.iter().any(|n| n.starts_with("dotnet-diagnostic-1-")), "{tmp_before:?}");

    let load = Load::start(&addr, 2);
    let mut requests = 0u64;
    for round in 1..=2 {
        let trace = dir.join(format!("web-{round}.clrprof"));
        let log = dir.join(format!("agent-{round}.log"));
        let before = load.done.load(Ordering::Relaxed);
        let mut c = Command::new(clrprof_exe());
        c.arg("attach").arg(pid.to_string()).arg("--agent").arg(agent_path()).args(["-d", "6", "-o"]).arg(&trace);
        c.arg("--log").arg(&log).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().expect("run clrprof attach");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        err.read_line(&mut first).unwrap();
        assert!(first.contains(&format!("attached to process {pid} (dotnet; pid 1 in its container)")), "{first}");
        // Exactly 20 exceptions, thrown while the session records. The sessions last 6 s (the
        // `attach` tests' 4 s gave Work.Primes under its 200 ms floor once, with this module's
        // heap test beside it on a machine at load 21).
        for _ in 0..20 {
            assert_eq!(get(&addr, "/throw"), 200);
        }
        requests += 20;
        let mut rest = String::new();
        err.read_to_string(&mut rest).unwrap();
        assert!(child.wait().unwrap().success(), "attach failed: {first}{rest}");
        assert!(rest.contains(&format!("trace written to {}", trace.display())), "{rest}");
        assert!(load.done.load(Ordering::Relaxed) > before, "requests went on during round {round}");
        // The agent's log came out of the container too.
        let log = std::fs::read_to_string(&log).unwrap();
        assert!(log.contains("attach: detached"), "round {round}: agent log {log:?}");

        let v = report_json(&trace);
        assert_eq!(v["process"]["pid"], 1, "the pid the process has in its container");
        primes_called_by_the_handler(&trace);
        let g = exception_group(&v, "System.InvalidOperationException");
        assert_eq!(g["thrown"], 20, "round {round}");
        assert_eq!(g["caught"], 20, "round {round}");
        assert_eq!(g["throw_site"], "Work.Fail");
        assert_eq!(v["process"]["clean_shutdown"], true, "{}", v["process"]);
        assert!(v["process"]["exit_code"].is_null());
        // Nothing is left in the container's /tmp: not the agent copy, the control socket,
        // the trace nor the log.
        assert_eq!(tmp_of(pid), tmp_before, "round {round}");
        assert!(web.0.try_wait().unwrap().is_none(), "the server died in round {round}");
    }
    // A third session, stopped with Ctrl-C (SIGINT to the CLI): the trace comes out complete and
    // nothing is left either.
    let trace = dir.join("web-ctrl-c.clrprof");
    let mut c = Command::new(clrprof_exe());
    c.arg("attach").arg(pid.to_string()).arg("--agent").arg(agent_path()).arg("-o").arg(&trace);
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.contains("Ctrl-C to stop"), "{first}");
    std::thread::sleep(std::time::Duration::from_secs(2));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{first}{rest}");
    let v = report_json(&trace);
    assert_eq!(v["process"]["clean_shutdown"], true);
    assert!(find(&v, "functions", "Work.Primes")["cpu_total_ns"].as_u64().unwrap() > 0);
    assert_eq!(tmp_of(pid), tmp_before, "after Ctrl-C");

    // A session that fails once its files are placed (an agent the runtime cannot load): a
    // clear error, and nothing is left.
    let bad = dir.join("libnot-an-agent.so");
    std::fs::write(&bad, b"not an ELF file").unwrap();
    let o = Command::new(clrprof_exe())
        .arg("attach")
        .arg(pid.to_string())
        .arg("--agent")
        .arg(&bad)
        .args(["-d", "1", "-o"])
        .arg(dir.join("bad.clrprof"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains(&format!("process {pid} could not load the agent copied into its container at /tmp/")), "{e}");
    assert_eq!(tmp_of(pid), tmp_before, "after a failed attach");
    assert!(web.0.try_wait().unwrap().is_none(), "the server died");

    // Root without capabilities (a root sidecar without SYS_PTRACE, against an app holding more
    // than it): refused by the kernel's ptrace check, the error says what is needed.
    let o = Command::new("setpriv")
        .args(["--bounding-set=-all", "--inh-caps=-all"])
        .arg(clrprof_exe())
        .args(["attach", &pid.to_string(), "-d", "1", "-o"])
        .arg(dir.join("nocap.clrprof"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains(&format!("cannot inspect the namespaces of process {pid}")) && e.contains("CAP_SYS_PTRACE"),
        "{e}"
    );
    assert_eq!(tmp_of(pid), tmp_before, "after a refused attach");

    // One copy of the agent is loaded, however many sessions (one name per agent build).
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut agents: Vec<&str> = maps.lines().filter_map(|l| l.split_whitespace().nth(5)).collect();
    agents.retain(|p| p.contains("clrprof-agent-"));
    agents.dedup();
    assert_eq!(agents.len(), 1, "{agents:?}");
    assert!(agents[0].starts_with("/tmp/clrprof-agent-"), "{agents:?}");

    // The server ran on, answered every request, printed nothing extra.
    requests += load.finish();
    assert_eq!(get(&addr, "/"), 200);
    requests += 1;
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = web.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest.trim(), format!("requests={requests}"));
    let mut err = String::new();
    web.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(err, "", "the server's stderr");
}

#[test]
fn heap_snapshots_of_a_process_in_a_rootless_container() {
    skip_without_namespaces!("heap_snapshots_of_a_process_in_a_rootless_container");
    // A rootless container also needs user namespaces, which a machine may forbid on its own.
    match Command::new("unshare").args(["--user", "--map-root-user", "true"]).output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let why = format!("unshare --user fails here: {}", text(&o.stderr).trim());
            println!("SKIPPED heap_snapshots_of_a_process_in_a_rootless_container: {why}");
            eprintln!("SKIPPED heap_snapshots_of_a_process_in_a_rootless_container: {why}");
            return;
        }
        Err(e) => panic!("unshare ran a moment ago and is gone now: {e}"),
    }
    let _machine = machine::shared();
    let dir = scratch("containers-heap");
    let dll = app_dll("HeapLeak");
    // A rootless container: its files are owned by uid 100000 here, and a file the host's root
    // creates in it is refused unless created as that user.
    let mut app = LeakApp::spawn(in_container(&[Path::new("dotnet"), &dll], true));
    let p1 = app.phase(1);
    let pid = app_pid(app.child.0.id());
    check_contained(pid);
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/user")).unwrap();
    assert_ne!(ns("self"), ns(&pid.to_string()), "a user namespace of its own");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains(&format!("\nUid:\t{ROOTLESS}\t")), "{status}");
    let tmp_before = tmp_of(pid);
    let (a, b) = (dir.join("a.clrprof"), dir.join("b.clrprof"));
    let err = heap(pid, &a);
    assert!(err.contains(&format!("attached to process {pid} (dotnet; pid 1 in its container)")), "{err}");
    assert!(err.contains("heap snapshot:") && !err.contains("INCOMPLETE"), "{err}");
    assert_eq!(tmp_of(pid), tmp_before);
    app.next();
    let p2 = app.phase(2);
    heap(pid, &b);
    assert_eq!(tmp_of(pid), tmp_before);
    check_snapshot(&a, &p1);
    check_snapshot(&b, &p2);
    let (last, err, status) = app.finish();
    assert_eq!(last, format!("done sessions={}", p2.sessions));
    assert!(status.success(), "{status:?}: {err}");
    assert_eq!(err, "");
}
