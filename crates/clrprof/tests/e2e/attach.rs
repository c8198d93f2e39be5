//! `clrprof attach` on real processes: apps/Web started with no profiler settings, profiled under
//! load three times in a row, each error case that can be produced here, and the process filter
//! (`CLRPROF_PROCESS`, `record --process`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;

/// apps/Web started plainly (no CORECLR_* variables), with its URL.
fn start_web(env: &[(&str, &str)]) -> (KillOnDrop, String, BufReader<std::process::ChildStdout>) {
    let mut c = Command::new("dotnet");
    c.arg(app_dll("Web")).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    for k in ["CORECLR_ENABLE_PROFILING", "CORECLR_PROFILER", "CORECLR_PROFILER_PATH"] {
        c.env_remove(k);
    }
    let mut child = c.spawn().expect("start apps/Web");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let url = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    (KillOnDrop(child), url.trim_start_matches("http://").to_string(), out)
}

/// One HTTP/1.1 GET; returns the status line's code.
pub(crate) fn get(addr: &str, path: &str) -> u32 {
    let mut s = TcpStream::connect(addr).expect("connect to apps/Web");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    r.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Load: threads requesting `/cpu?n=200000` until stopped, counting the answers.
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    pub(crate) done: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    pub(crate) fn start(addr: &str, n: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let threads = (0..n)
            .map(|_| {
                let (stop, done, addr) = (Arc::clone(&stop), Arc::clone(&done), addr.to_string());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        assert_eq!(get(&addr, "/cpu?n=200000"), 200);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Load { stop, done, threads }
    }

    pub(crate) fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        self.done.load(Ordering::Relaxed)
    }
}

fn attach_cmd(pid: u32, args: &[&str]) -> Command {
    let mut c = Command::new(clrprof_exe());
    c.arg("attach").arg(pid.to_string()).arg("--agent").arg(agent_path()).args(args);
    c.stdin(Stdio::null());
    c
}

/// One attach session of `secs` seconds; while it records, `during` runs (after the CLI said
/// it attached). Returns the CLI's stderr.
fn attach_session(pid: u32, trace: &Path, secs: &str, during: impl FnOnce()) -> String {
    let mut c = attach_cmd(pid, &["-d", secs, "-o"]);
    c.arg(trace).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("run clrprof attach");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.contains(&format!("attached to process {pid}")), "{first}");
    during();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "attach failed: {first}{rest}");
    format!("{first}{rest}")
}

#[test]
fn attach_to_a_web_server_under_load_three_times() {
    let _machine = machine::shared();
    let dir = scratch("attach-web");
    let (mut web, addr, mut out) = start_web(&[]);
    let pid = web.0.id();
    let load = Load::start(&addr, 2);
    let mut requests = 0u64;
    for round in 1..=3 {
        let trace = dir.join(format!("web-{round}.clrprof"));
        let before = load.done.load(Ordering::Relaxed);
        // Exactly 20 exceptions, thrown while the session records.
        let stderr = attach_session(pid, &trace, "4", || {
            for _ in 0..20 {
                assert_eq!(get(&addr, "/throw"), 200);
            }
        });
        requests += 20;
        assert!(stderr.contains("trace written to"), "{stderr}");
        assert!(load.done.load(Ordering::Relaxed) > before, "requests went on during round {round}");

        let v = report_json(&trace);
        assert_eq!(v["process"]["pid"], pid, "round {round}");
        // The endpoint's CPU work, with its one managed caller (the /cpu handler lambda).
        primes_called_by_the_handler(&trace);
        // The request pipeline above it is named, though much of it is ReadyToRun code loaded
        // before the agent (named from the sampled addresses).
        let collapsed = export(&trace, &["-f", "collapsed", "-o", "-"]);
        let stacks = text(&collapsed.stdout);
        let primes: Vec<&str> = stacks.lines().filter(|l| l.contains(";Work.Primes ")).collect();
        assert!(!primes.is_empty(), "no stack reaches Work.Primes:\n{stacks}");
        for frame in [
            "System.Threading.PortableThreadPool+WorkerThread.WorkerThreadStart",
            "Program+<>c__DisplayClass0_0+<<<Main>$>b__0>d.MoveNext",
            ";Microsoft.AspNetCore.",
        ] {
            let named = primes.iter().filter(|l| l.contains(frame)).count();
            assert!(
                named * 10 >= primes.len() * 9,
                "round {round}: {named} of {} stacks show {frame}:\n{}",
                primes.len(),
                primes.join("\n")
            );
        }
        // Every frame is named: code that ran before the attach and never since (the host's
        // ReadyToRun code, blocked in a wait) shows up only in walked (wall) stacks.
        for weight in ["cpu", "wall"] {
            let stacks = folded(&trace, weight);
            let total: f64 = stacks.iter().map(|(_, w)| w).sum();
            let unnamed: Vec<&(Vec<String>, f64)> =
                stacks.iter().filter(|(f, _)| f.iter().any(|n| n.starts_with("<function 0x"))).collect();
            let unnamed_w: f64 = unnamed.iter().map(|(_, w)| w).sum();
            assert!(
                unnamed_w <= total * 0.001,
                "round {round}: {weight}: {unnamed_w} of {total} in stacks with unnamed functions: {:?}",
                unnamed.iter().take(3).collect::<Vec<_>>()
            );
        }
        // Exceptions after attach are seen, each one.
        let g = exception_group(&v, "System.InvalidOperationException");
        assert_eq!(g["thrown"], 20, "round {round}");
        assert_eq!(g["caught"], 20, "round {round}");
        assert_eq!(g["throw_site"], "Work.Fail");
        // The trace ended cleanly with the process still running.
        assert_eq!(v["process"]["clean_shutdown"], true, "{}", v["process"]);
        assert!(v["process"]["exit_code"].is_null());
        assert!(web.0.try_wait().unwrap().is_none(), "the server died in round {round}");
    }
    // A fourth session, stopped with Ctrl-C (SIGINT to the CLI): the trace is complete too.
    let trace = dir.join("web-ctrl-c.clrprof");
    let mut c = attach_cmd(pid, &["-o"]);
    c.arg(&trace).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.contains("Ctrl-C to stop"), "{first}");
    std::thread::sleep(Duration::from_secs(3));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{first}{rest}");
    assert!(rest.contains("trace written to"), "{rest}");
    let v = report_json(&trace);
    assert_eq!(v["process"]["clean_shutdown"], true);
    assert!(find(&v, "functions", "Work.Primes")["cpu_total_ns"].as_u64().unwrap() > 0);
    assert!(web.0.try_wait().unwrap().is_none(), "the server died after Ctrl-C");

    requests += load.finish();
    // The server ran on, answering every request, and printed nothing extra.
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

/// Work.Primes has CPU time, and the /cpu handler lambda is its caller in at least 90% of it.
/// Threads that existed before the attach record samples only once their stack is known, so
/// their first samples do not lack their callers (a thread walked without its stack would lose
/// the callers of every sample until it is known). A rare single sample can: one did in a
/// loaded CI run (12 ms of 4 s; the cause was not found, a sample inside the runtime's move to
/// the OSR version is a candidate), so samples without callers may hold at most the 2% that
/// `only_caller` allows such samples under `record`, and the stacks are printed when they hold
/// more. A few samples can show a stale return address instead of the handler
/// (`System.Number.TryParseBinaryIntegerStyle`, called just before it): `record` shows the same
/// on this app, it is not specific to attach.
pub(crate) fn primes_called_by_the_handler(trace: &Path) {
    let (inclusive, found) = callers(trace, "Work.Primes", "cpu");
    assert!(inclusive >= 200.0, "Work.Primes has {inclusive} ms");
    let handler: f64 = found.iter().filter(|(n, _)| n == "Program+<>c.<<Main>$>b__0_2").map(|x| x.1).sum();
    assert!(handler >= inclusive * 0.9, "callers of Work.Primes: {found:?}");
    let uncalled: f64 = found.iter().filter(|(n, _)| n.starts_with("<entry point")).map(|x| x.1).sum();
    if uncalled > inclusive * 0.02 {
        // The stacks themselves, to tell a cut walk from an unknown thread.
        let collapsed = text(&export(trace, &["-f", "collapsed", "--weight", "cpu", "-o", "-"]).stdout);
        // The innermost 400 characters of each: the frames near Work.Primes.
        let odd: Vec<&str> = collapsed
            .lines()
            .filter(|l| l.contains("Work.Primes") && !l.contains("b__0_2;Work.Primes"))
            .map(|l| l.char_indices().rev().nth(399).map_or(l, |(i, _)| &l[i..]))
            .collect();
        panic!("{uncalled} of {inclusive} ms without callers: {found:?}\nstacks:\n{}", odd.join("\n"));
    }
}

fn attach_error(pid: u32, extra: &[&str]) -> String {
    let o = attach_cmd(pid, extra).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let e = text(&o.stderr);
    assert_eq!(e.lines().count(), 1, "one line: {e}");
    e
}

#[test]
fn attach_errors_are_clear() {
    let _machine = machine::shared();
    // No such process: a pid that just exited.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let e = attach_error(gone_pid, &["-d", "1"]);
    assert!(e.contains(&format!("no process with id {gone_pid}")), "{e}");

    // Not a .NET process.
    let sleeper = KillOnDrop(Command::new("sleep").arg("60").spawn().unwrap());
    let e = attach_error(sleeper.0.id(), &["-d", "1"]);
    assert!(e.contains("is not a .NET process"), "{e}");

    // Another user's process: run as root, the test attaches as `nobody` (setpriv, util-linux).
    if unsafe { libc::geteuid() } == 0 && Path::new("/usr/bin/setpriv").exists() {
        let o = Command::new("/usr/bin/setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(clrprof_exe())
            .args(["attach", &sleeper.0.id().to_string(), "-d", "1"])
            .output()
            .unwrap();
        let e = text(&o.stderr);
        // Unless `nobody` cannot even run the binary (a checkout under a private home).
        if !e.starts_with("setpriv:") {
            assert_eq!(o.status.code(), Some(2), "{e}");
            assert!(e.contains("belongs to user id 0, not to you (user id 65534)"), "{e}");
        }
    }

    // What only start-up allows.
    let e = attach_error(sleeper.0.id(), &["--instrument"]);
    assert!(e.contains("--instrument needs `record`"), "{e}");
    let e = attach_error(sleeper.0.id(), &["--alloc", "exact"]);
    assert!(e.contains("--alloc exact needs `record`"), "{e}");

    // Diagnostics disabled.
    let (web, _, _) = start_web(&[("DOTNET_EnableDiagnostics", "0")]);
    let e = attach_error(web.0.id(), &["-d", "1"]);
    assert!(e.contains("diagnostics are disabled") && e.contains("DOTNET_EnableDiagnostics=0"), "{e}");
    drop(web);

    // Another profiler already loaded: a process started under `clrprof record`.
    let dir = scratch("attach-errors");
    let mut rec = Command::new(clrprof_exe())
        .arg("record")
        .arg("-o")
        .arg(dir.join("rec.clrprof"))
        .arg("--agent")
        .arg(agent_path())
        .args(["--", "dotnet"])
        .arg(app_dll("Web"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(rec.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("listening on"), "{line}");
    let rec = KillOnDrop(rec);
    let server = child_pids(rec.0.id())[0];
    let e = attach_error(server, &["-d", "1"]);
    // The server first: killing `clrprof record` alone would leave it running.
    unsafe { libc::kill(server as i32, libc::SIGKILL) };
    assert!(e.contains("a profiler is already loaded"), "{e}");
    drop(rec);

    // The runtime does not answer (the process is stopped): the attach times out; once the
    // process resumes, a new attach works.
    let (web, addr, _) = start_web(&[]);
    let pid = web.0.id();
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let late = dir.join("late.clrprof");
    let e = attach_error(pid, &["-d", "1", "--timeout", "2", "-o", late.to_str().unwrap()]);
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    assert!(e.contains("timed out after 2 s"), "{e}");
    assert_eq!(get(&addr, "/"), 200);
    // The late request loads the agent when the process resumes; it finds nobody listening,
    // ends its session at once and detaches. Then the process can be attached again.
    let trace = dir.join("after.clrprof");
    let mut ok = false;
    for _ in 0..50 {
        let o =
            attach_cmd(pid, &["-d", "1", "--log"]).arg(dir.join("agent.log")).arg("-o").arg(&trace).output().unwrap();
        if o.status.success() {
            ok = true;
            break;
        }
        let log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
        assert!(text(&o.stderr).contains("a profiler is already loaded"), "{}\nagent log:\n{log}", text(&o.stderr));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(ok, "attach after the timed-out one never worked");
    assert_eq!(get(&addr, "/"), 200);
    drop(web);
}

/// Direct children of `pid` (from /proc/*/stat).
pub(crate) fn child_pids(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
        if after.split_whitespace().nth(1).and_then(|v| v.parse::<u32>().ok()) == Some(pid) {
            out.push(p);
        }
    }
    out
}

/// Files in `dir`, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn process_filter_profiles_only_the_matching_child() {
    let _machine = machine::shared();
    let dir = scratch("process-filter");
    let (calls, demo) = (app_dll("Calls"), app_dll("Demo"));
    let script = format!("dotnet {} counted; dotnet {} 20000", calls.display(), demo.display());
    let plain = Command::new("sh").args(["-c", &script]).stdin(Stdio::null()).output().unwrap();
    assert!(plain.status.success());

    // The agent's variables exported "machine-wide" for a parent shell that starts both apps.
    let traces = dir.join("env");
    std::fs::create_dir_all(&traces).unwrap();
    let o = Command::new("sh")
        .args(["-c", &script])
        .env("CORECLR_ENABLE_PROFILING", "1")
        .env("CORECLR_PROFILER", clrprof_trace::AGENT_CLSID)
        .env("CORECLR_PROFILER_PATH", agent_path())
        .env("CLRPROF_OUTPUT", traces.join("{name}-{pid}.clrprof"))
        .env("CLRPROF_PROCESS", "Demo.dll")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success());
    // Both apps ran as they do unprofiled; nothing extra on stdout or stderr.
    assert_eq!(text(&o.stdout), text(&plain.stdout));
    assert_eq!(text(&o.stderr), "");
    let written = files(&traces);
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(written[0].starts_with("Demo-") && written[0].ends_with(".clrprof"), "{written:?}");
    let v = report_json(&traces.join(&written[0]));
    assert!(v["process"]["command_line"].as_str().unwrap().contains("Demo.dll"), "{}", v["process"]);

    // The same through `record --process` (a glob on the assembly's name), the other app.
    let o = Command::new(clrprof_exe())
        .arg("record")
        .arg("-o")
        .arg(dir.join("rec-{pid}.clrprof"))
        .arg("--agent")
        .arg(agent_path())
        .args(["--process", "Nothing;Cal?s", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), text(&plain.stdout));
    let recs: Vec<String> = files(&dir).into_iter().filter(|f| f.starts_with("rec-")).collect();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert!(
        text(&o.stderr).contains(&format!("trace written to {}", dir.join(&recs[0]).display())),
        "{}",
        text(&o.stderr)
    );
    let v = report_json(&dir.join(&recs[0]));
    assert!(v["process"]["command_line"].as_str().unwrap().contains("Calls.dll"), "{}", v["process"]);
}

/// Attach on every runtime of the matrix (.NET 8, 9 and 10, self-contained apphosts): twice to one
/// process running apps/Sampling's 3:1 workload; each trace names the runtime, and Heavy and
/// Light share the CPU about 3:1 (as `record` measures it in the `sampling` tests).
#[test]
fn attach_works_on_every_runtime() {
    let _machine = machine::alone();
    let dir = scratch("attach-runtimes");
    for (runtime, _) in RUNTIMES {
        let exe = app_for(runtime, "Sampling");
        let mut app = KillOnDrop(
            Command::new(&exe).args(["ratio", "60000"]).stdin(Stdio::null()).stdout(Stdio::null()).spawn().unwrap(),
        );
        let pid = app.0.id();
        // Attach once its runtime is up (its diagnostics socket exists).
        std::thread::sleep(Duration::from_secs(2));
        for round in 1..=2 {
            let trace = dir.join(format!("{runtime}-{round}.clrprof"));
            let o = attach_cmd(pid, &["-d", "3", "-o"]).arg(&trace).output().unwrap();
            assert!(o.status.success(), "{runtime} round {round}: {}", text(&o.stderr));
            let v = report_json(&trace);
            let major = runtime.trim_start_matches("net").split('.').next().unwrap();
            assert!(
                v["process"]["runtime_version"].as_str().unwrap().starts_with(&format!("{major}.")),
                "{runtime}: {}",
                v["process"]
            );
            let cpu = |f: &str| find(&v, "functions", f)["cpu_total_ns"].as_u64().unwrap() as f64;
            let (heavy, light) = (cpu("Sampling.Ratio.Heavy"), cpu("Sampling.Ratio.Light"));
            let share = heavy / (heavy + light);
            assert!(
                (0.6..=0.9).contains(&share),
                "{runtime} round {round}: Heavy has {share:.3} of Heavy+Light CPU ({heavy} / {light} ns), expected about 0.75"
            );
            assert!(app.0.try_wait().unwrap().is_none(), "{runtime}: the app died");
        }
    }
}

#[test]
fn attach_streams_to_a_collector() {
    let _machine = machine::shared();
    let dir = scratch("attach-server");
    let store = dir.join("runs.db");
    let collector = Collector::start(store.to_str().unwrap(), "127.0.0.1:0", &[]);
    let server = collector.addr.clone();
    let (mut web, addr, mut out) = start_web(&[]);
    let pid = web.0.id();
    let load = Load::start(&addr, 2);
    let trace = dir.join("fallback.clrprof");
    let mut c = attach_cmd(pid, &["-d", "4", "--server", &server, "-o"]);
    c.arg(&trace).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("run clrprof attach");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.contains(&format!("attached to process {pid}")), "{first}");
    // Exactly 20 exceptions while the session streams.
    for _ in 0..20 {
        assert_eq!(get(&addr, "/throw"), 200);
    }
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{first}{rest}");
    assert!(rest.contains(&format!("trace streamed to the collector at {server}")), "{rest}");
    assert!(!trace.exists(), "no local file when the collector took the whole session");
    let requests = load.finish() + 20;

    // The run is stored complete, the process still running.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !collector.log().contains("run 1: complete") {
        assert!(std::time::Instant::now() < deadline, "collector log: {}", collector.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let runs = Command::new(clrprof_exe()).arg("runs").arg("--store").arg(&store).args(["--format", "json"]).output();
    let runs: serde_json::Value = serde_json::from_slice(&runs.unwrap().stdout).unwrap();
    let r = &runs.as_array().unwrap()[0];
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(r["state"], "complete", "{r}");
    assert_eq!(r["pid"], pid, "{r}");
    assert!(r["command"].as_str().unwrap().contains("Web.dll"), "{r}");
    // `report run:latest` names the endpoint's code and counts the exceptions exactly.
    let report = Command::new(clrprof_exe())
        .args(["report", "run:latest", "--format", "json", "--no-native-symbols", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", text(&report.stderr));
    let v: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(v["process"]["pid"], pid);
    assert_eq!(v["process"]["clean_shutdown"], true, "{}", v["process"]);
    assert!(find(&v, "functions", "Work.Primes")["cpu_total_ns"].as_u64().unwrap() > 0);
    let g = exception_group(&v, "System.InvalidOperationException");
    assert_eq!(g["thrown"], 20);
    assert_eq!(g["caught"], 20);
    assert_eq!(g["throw_site"], "Work.Fail");

    // The server ran on, answered everything and printed nothing extra.
    assert!(web.0.try_wait().unwrap().is_none(), "the server died");
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    assert!(web.0.wait().unwrap().success());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest.trim(), format!("requests={requests}"));
}
