//! `clrprof collect`, `clrprof runs` and `run:ID`, end to end: real .NET processes stream to a real
//! collector process; the collector is killed, restarted, given wrong tokens and small limits; a
//! throwaway PostgreSQL 15 server holds a shared store.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;

fn runs(store: &str) -> Vec<serde_json::Value> {
    let out = Command::new(clrprof_exe()).args(["runs", "--store", store, "--format", "json"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap().as_array().unwrap().clone()
}

fn report_run(run: &str, store: &str, extra: &[&str]) -> std::process::Output {
    Command::new(clrprof_exe()).args(["report", run, "--store", store]).args(extra).output().unwrap()
}

fn report_run_json(run: &str, store: &str) -> serde_json::Value {
    let out = report_run(run, store, &["--format", "json", "--no-native-symbols"]);
    assert!(out.status.success(), "report {run}: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `GET path` on the Web app; the body.
fn get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.1 200"), "{path}: {r}");
    r
}

/// The Web app recorded with `--server`, its port once listening.
struct Web {
    child: KillOnDrop,
    port: u16,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Drop for Web {
    /// A failed test still stops the app: SIGTERM reaches it through `clrprof record` (the SIGKILL of
    /// `KillOnDrop` would leave it running).
    fn drop(&mut self) {
        if let Ok(None) = self.child.0.try_wait() {
            // Safety: signalling our own child.
            unsafe { libc::kill(self.child.0.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(self.child.0.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Web {
    /// SIGTERM to `clrprof record` (forwarded to the app); waits for both; (app stdout, record stderr).
    fn stop(mut self) -> (String, String) {
        // Safety: signalling our own child.
        unsafe { libc::kill(self.child.0.id() as i32, libc::SIGTERM) };
        let status = self.child.0.wait().unwrap();
        assert!(status.success(), "clrprof record exited with {status}");
        std::thread::sleep(Duration::from_millis(200));
        let out = self.stdout.lock().unwrap().clone();
        let err = self.stderr.lock().unwrap().clone();
        (out, err)
    }
}

fn start_web(server: &str, trace: &Path, log: &Path, extra: &[&str]) -> Web {
    let dll = app_dll("Web");
    let mut child = Command::new(clrprof_exe())
        .args(["record", "--server", server, "--agent"])
        .arg(agent_path())
        .arg("-o")
        .arg(trace)
        .arg("--log")
        .arg(log)
        .args(extra)
        .args(["--", "dotnet"])
        .arg(&dll)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let port: u16 = line
        .trim()
        .strip_prefix("listening on http://127.0.0.1:")
        .unwrap_or_else(|| panic!("Web printed {line:?}"))
        .parse()
        .unwrap();
    let stdout = Arc::new(Mutex::new(String::new()));
    let s = Arc::clone(&stdout);
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = out.read_to_string(&mut rest);
        s.lock().unwrap().push_str(&rest);
    });
    let stderr = Arc::new(Mutex::new(String::new()));
    let e = Arc::clone(&stderr);
    let mut err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        e.lock().unwrap().push_str(&rest);
    });
    Web { child: KillOnDrop(child), port, stdout, stderr }
}

/// `n` requests of `/cpu?n=…` from `threads` clients at once.
fn load(port: u16, threads: usize, n: usize) {
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..n / threads {
                    let body = get(port, "/cpu?n=200000");
                    // Primes below 200,000.
                    assert!(body.ends_with("17984"), "{body}");
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

/// The exact call counts of `apps/Calls` under `--instrument` (the counts only: the timing checks of
/// `check_calls_app` do not hold with many processes sharing the machine at once).
fn exact_counts(v: &serde_json::Value) {
    for (f, n) in [
        ("Calls.Counted.Tick", 1000),
        ("Calls.Counted.Run", 1),
        ("Calls.Recursion.Fib", 21891),
        ("Calls.Exceptions.Level3", 50),
        ("Calls.ProbeException.get_Depth", 50),
        ("Calls.Shape.Describe", 200),
        ("Calls.Generic.Identity<__Canon>", 100),
        ("Calls.Shared.Work", 10_000),
        ("Calls.AsyncWork.Step", 10),
        ("Calls.Spin.For", 1),
    ] {
        assert_eq!(calls(v, f), n, "{f}");
    }
}

fn store_path(dir: &Path) -> String {
    dir.join("runs.db").to_string_lossy().into_owned()
}

fn has_function(v: &serde_json::Value, name: &str) -> bool {
    v["functions"].as_array().unwrap().iter().any(|f| f["name"] == name)
}

#[test]
fn a_web_app_under_load_streams_to_the_collector() {
    let _machine = machine::shared();
    let dir = scratch("collect-web");
    let store = store_path(&dir);
    let c = Collector::start(&store, "127.0.0.1:0", &[]);
    let trace = dir.join("web.clrprof");
    let web = start_web(&c.addr, &trace, &dir.join("agent.log"), &[]);
    c.wait_for("started");
    // While it runs, the run is listed and readable as it grows.
    load(web.port, 4, 40);
    let live = runs(&store);
    assert_eq!(live.len(), 1);
    assert_eq!(live[0]["complete"], false);
    assert_eq!(live[0]["state"], "running");
    let (out, err) = web.stop();
    assert!(out.contains("requests=40"), "the app served every request: {out}");
    assert!(err.contains("clrprof: run 1 streamed to the collector"), "{err}");
    assert!(!trace.exists(), "no local file when the collector took the whole run");
    c.wait_for("run 1: complete");
    let r = &runs(&store)[0];
    assert_eq!(r["id"], 1);
    assert_eq!(r["complete"], true);
    assert_eq!(r["exit_status"], 0);
    assert!(r["command"].as_str().unwrap().ends_with("Web.dll"), "{r}");
    assert!(r["runtime"].as_str().unwrap().starts_with("10."), "{r}");
    assert!(r["end"].as_i64().unwrap() >= r["start"].as_i64().unwrap());
    assert!(r["pid"].as_u64().unwrap() > 0);
    // The endpoint's code is in the run's profile, named.
    let v = report_run_json("run:latest", &store);
    assert!(has_function(&v, "Work.Primes"), "Work.Primes sampled");
    assert_eq!(v["process"]["exit_code"], 0, "{}", v["process"]);
    let text_report = report_run("run:1", &store, &["--no-native-symbols"]);
    assert!(text(&text_report.stdout).contains("Work.Primes"));
    // export takes runs too.
    let out = Command::new(clrprof_exe())
        .args(["export", "run:1", "--store", &store, "-f", "collapsed", "-o", "-", "--no-native-symbols"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Work.Primes"));
    // Bad run names are one-line errors.
    let missing = dir.join("typo.db").to_string_lossy().into_owned();
    for (run, store, msg) in
        [("run:99", &store, "no run 99"), ("run:x", &store, "expected run:ID"), ("run:1", &missing, "no run store at")]
    {
        let o = report_run(run, store, &[]);
        assert_eq!(o.status.code(), Some(2));
        assert!(text(&o.stderr).contains(msg), "{}", text(&o.stderr));
    }
}

#[test]
fn the_collector_killed_mid_run_harms_nothing_and_loses_nothing() {
    let _machine = machine::shared();
    let dir = scratch("collect-killed");
    let store = store_path(&dir);
    let mut c = Collector::start(&store, "127.0.0.1:0", &[]);
    let port = c.port();
    let trace = dir.join("web.clrprof");
    let log = dir.join("agent.log");
    let web = start_web(&c.addr, &trace, &log, &[]);
    load(web.port, 2, 20);
    // Let a flush reach the collector, then kill it.
    std::thread::sleep(Duration::from_millis(300));
    c.kill9();
    load(web.port, 2, 30);
    let (out, err) = web.stop();
    assert!(out.contains("requests=50"), "the app served every request: {out}");
    assert!(err.contains("went away during the run"), "{err}");
    // The agent said so once in its log, and the local file holds the rest of the run on its own.
    let agent_log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(agent_log.matches("is gone").count(), 1, "{agent_log}");
    let v = report_json(&trace);
    assert!(has_function(&v, "Work.Primes"), "names sent before the cut are in the local file");
    assert_eq!(v["process"]["exit_code"], 0);
    assert!(v["process"]["command_line"].as_str().unwrap().contains("Web.dll"));
    // A restarted collector (same port) keeps the run, marked cut off, readable up to the cut.
    let c2 = Collector::start(&store, &format!("127.0.0.1:{port}"), &[]);
    assert!(c2.log().contains("1 run(s) left streaming"), "{}", c2.log());
    let r = &runs(&store)[0];
    assert_eq!((r["complete"].as_bool(), r["state"].as_str()), (Some(false), Some("cut_off")), "{r}");
    let o = report_run("run:1", &store, &["--format", "json", "--no-native-symbols"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("was cut off"), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(has_function(&v, "Work.Primes"), "the first part of the run is in the store");
    // The viewer shows it cut off, every stored byte read, with the report's figures.
    let view = StoreViewer::start(&["--store", &store]);
    assert_eq!(view.api("runs", "")["runs"][0]["state"], "cut_off");
    let s = view.api("status", "run=1");
    assert_eq!((s["state"].as_str(), &s["bytes"]), (Some("cut_off"), &r["bytes"]), "{s}");
    hotspots_equal_report(&view, "run=1", &v, 3);
}

#[test]
fn wrong_tokens_size_limits_and_open_addresses() {
    let _machine = machine::shared();
    let dir = scratch("collect-limits");
    let store = store_path(&dir);
    // Another address than loopback needs a token.
    let o = Command::new(clrprof_exe()).args(["collect", "--store", &store, "--listen", "0.0.0.0:0"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("needs a token"), "{}", text(&o.stderr));

    let c = Collector::start(&store, "127.0.0.1:0", &["--token", "s3cret", "--max-run-bytes", "64K"]);
    // Wrong token: refused before anything is stored; the agent writes its file from the start.
    let bad = dir.join("bad.clrprof");
    let out = record("Calls", &[], &bad, &["--instrument", "--server", &c.addr, "--token", "guess"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait_for("wrong or missing token");
    exact_counts(&report_json(&bad));
    assert!(runs(&store).is_empty(), "nothing stored for a wrong token");

    // Right token, a run bigger than the limit: cut at the limit, readable; the agent falls back.
    let big = dir.join("big.clrprof");
    let out = record("Calls", &[], &big, &["--instrument", "--server", &c.addr, "--token", "s3cret"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait_for("size limit");
    let r = &runs(&store)[0];
    assert_eq!(r["state"], "cut_off");
    assert!(r["reason"].as_str().unwrap().contains("size limit of 65536 bytes"), "{r}");
    let bytes = r["bytes"].as_u64().unwrap();
    assert!(bytes <= 65536 && bytes > 0, "{r}");
    let v = report_run_json("run:latest", &store);
    assert!(v["process"]["command_line"].as_str().unwrap().contains("Calls.dll"));
    // The rest of the run is in the local file, which reads on its own with the names sent before.
    let v = report_json(&big);
    assert_eq!(calls(&v, "Calls.Counted.Run"), 1);
}

/// Replays a recorded trace as an agent would: hello, then the bytes in pieces.
fn replay(addr: &str, pid: u32, trace: &[u8]) -> u64 {
    use clrprof_trace::wire::{self, Hello};
    let mut s = TcpStream::connect(addr).unwrap();
    let h = Hello {
        kind: wire::kind::RUN,
        host: "replay".into(),
        pid,
        command: format!("replay {pid}"),
        ..Default::default()
    };
    s.write_all(&h.encode()).unwrap();
    let mut a = [0u8; 9];
    s.read_exact(&mut a).unwrap();
    let (st, run) = wire::decode_answer(&a);
    assert_eq!(st, wire::status::ACCEPTED);
    for piece in trace.chunks(8 << 10) {
        s.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    run
}

#[test]
fn fifty_runs_at_once() {
    let _machine = machine::shared();
    let dir = scratch("collect-fifty");
    let store = store_path(&dir);
    let c = Collector::start(&store, "127.0.0.1:0", &[]);
    // A real recorded trace to replay (the instrumented Calls app, exact counts known).
    let model = dir.join("model.clrprof");
    let out = record("Calls", &[], &model, &["--instrument"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let model_bytes = std::fs::read(&model).unwrap();
    // 5 real processes and 45 replayed streams, all at once.
    let real: Vec<_> = (0..5)
        .map(|i| {
            let (addr, dir) = (c.addr.clone(), dir.clone());
            std::thread::spawn(move || {
                let t = dir.join(format!("real{i}.clrprof"));
                let out = record("Calls", &[], &t, &["--instrument", "--server", &addr]);
                assert!(out.status.success(), "{}", text(&out.stderr));
                assert!(!t.exists(), "streamed whole");
            })
        })
        .collect();
    let replays: Vec<_> = (0..45)
        .map(|i| {
            let (addr, bytes) = (c.addr.clone(), model_bytes.clone());
            std::thread::spawn(move || replay(&addr, 100_000 + i, &bytes))
        })
        .collect();
    let ids: Vec<u64> = replays.into_iter().map(|h| h.join().unwrap()).collect();
    for h in real {
        h.join().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let all = loop {
        let all = runs(&store);
        if all.len() == 50 && all.iter().all(|r| r["state"] != "running") {
            break all;
        }
        assert!(Instant::now() < deadline, "{all:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(all.iter().all(|r| r["complete"] == true), "{all:?}");
    let mut distinct: Vec<u64> = all.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    distinct.dedup();
    assert_eq!(distinct.len(), 50);
    // Every replayed run is the model byte for byte.
    for r in all.iter().filter(|r| r["host"] == "replay") {
        assert_eq!(r["bytes"].as_u64().unwrap(), model_bytes.len() as u64, "{r}");
    }
    assert!(ids.iter().all(|id| all.iter().any(|r| r["id"].as_u64() == Some(*id))));
    // Real runs and a replayed one give the exact counts.
    for r in all.iter().filter(|r| r["host"] != "replay").chain(all.iter().find(|r| r["host"] == "replay")) {
        exact_counts(&report_run_json(&format!("run:{}", r["id"]), &store));
    }
}

/// A throwaway PostgreSQL 15 server in a temporary directory (stopped on drop).
struct Postgres {
    dir: PathBuf,
    port: u16,
    bin: PathBuf,
}

fn as_postgres_user(cmd: &Path) -> Command {
    // PostgreSQL refuses to run as root: run its tools as the `postgres` user then.
    // Safety: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(cmd);
        c
    } else {
        Command::new(cmd)
    }
}

impl Postgres {
    fn start(name: &str) -> Postgres {
        let bin = PathBuf::from("/usr/lib/postgresql/15/bin");
        assert!(
            bin.join("initdb").is_file(),
            "PostgreSQL 15 is missing: run scripts/bootstrap (installs postgresql-15)"
        );
        let dir = std::env::temp_dir().join(format!("clrprof-pg-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Safety: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let st = Command::new("chown").args(["-R", "postgres:postgres"]).arg(&dir).status().unwrap();
            assert!(st.success());
        }
        let data = dir.join("data");
        let o = as_postgres_user(&bin.join("initdb"))
            .args(["-A", "trust", "-U", "clrprof", "-D"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(o.status.success(), "initdb: {}", text(&o.stderr));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let o = as_postgres_user(&bin.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("server.log"))
            .arg("-o")
            .arg(format!("-p {port} -k {} -c listen_addresses=127.0.0.1", dir.display()))
            .args(["-w", "start"])
            .output()
            .unwrap();
        assert!(o.status.success(), "pg_ctl start: {}{}", text(&o.stdout), text(&o.stderr));
        Postgres { dir, port, bin }
    }

    fn url(&self) -> String {
        format!("postgresql://clrprof@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = as_postgres_user(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_postgresql_store_shared_by_two_collectors_survives_restarts() {
    let _machine = machine::shared();
    let pg = Postgres::start("shared");
    let url = pg.url();
    let dir = scratch("collect-pg");
    let a = Collector::start(&url, "127.0.0.1:0", &[]);
    let b = Collector::start(&url, "127.0.0.1:0", &[]);
    let ta = dir.join("a.clrprof");
    let tb = dir.join("b.clrprof");
    let (addr_a, addr_b) = (a.addr.clone(), b.addr.clone());
    let (ta2, tb2) = (ta.clone(), tb.clone());
    let h = std::thread::spawn(move || record("Calls", &[], &ta2, &["--instrument", "--server", &addr_a]));
    let out = record("Calls", &[], &tb2, &["--instrument", "--server", &addr_b]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(h.join().unwrap().status.success());
    assert!(!ta.exists() && !tb.exists(), "both streamed whole");
    drop(a);
    drop(b);
    // Another collector later, on the same database: both runs are there, complete, exact.
    let _c = Collector::start(&url, "127.0.0.1:0", &[]);
    let all = runs(&url);
    assert_eq!(all.len(), 2, "{all:?}");
    for r in &all {
        assert_eq!(r["complete"], true, "{r}");
        assert_eq!(r["exit_status"], 0, "{r}");
        exact_counts(&report_run_json(&format!("run:{}", r["id"]), &url));
    }
    exact_counts(&report_run_json("run:latest", &url));
    // The viewer reads the shared store too: both runs listed, each opened with its exact calls.
    let v = StoreViewer::start(&["--store", &url]);
    let listed = v.api("runs", "");
    assert_eq!(listed["runs"].as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(listed["store"], url.as_str(), "no password to hide");
    for r in &all {
        let q = format!("run={}", r["id"]);
        assert_eq!(v.api("status", &q)["state"], "complete");
        let h = v.api("hotspots", &format!("{q}&w=calls&limit=100000"));
        let rows = h["page"]["rows"].as_array().unwrap();
        let calls = |name: &str| rows.iter().find(|x| x["name"] == name).map(|x| x["self"].as_u64().unwrap());
        assert_eq!(calls("Calls.Counted.Tick"), Some(1000), "{q}");
        assert_eq!(calls("Calls.Recursion.Fib"), Some(21891), "{q}");
    }
}

#[test]
fn a_collector_whose_stderr_is_gone_keeps_working_and_stops_on_sigterm() {
    use clrprof_trace::{encode_records, header, AgentStop, ProcessStart};
    let dir = scratch("collect-stderr");
    let store = store_path(&dir);
    let mut child = Command::new(clrprof_exe())
        .args(["collect", "--store", &store, "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut child = KillOnDrop(child);
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line.strip_prefix("clrprof collect: listening on ").unwrap().split(',').next().unwrap().to_string();
    // The terminal or pipe that started it goes away: its log lines now fail to print.
    drop(err);
    let mut t = header().to_vec();
    t.extend(encode_records(&[
        ProcessStart { pid: 7, command_line: "app".into(), ..Default::default() }.into(),
        AgentStop { ts: 1, ..Default::default() }.into(),
    ]));
    for pid in [7, 8] {
        replay(&addr, pid, &t);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while runs(&store).iter().filter(|r| r["complete"] == true).count() < 2 {
        assert!(Instant::now() < deadline, "{:?}", runs(&store));
        std::thread::sleep(Duration::from_millis(50));
    }
    // Safety: signalling our own child.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// A running `clrprof view --store S --no-browser` (or `view run:ID --store S`); killed when dropped.
struct StoreViewer {
    _child: KillOnDrop,
    host: String,
    token: String,
}

impl StoreViewer {
    fn start(args: &[&str]) -> StoreViewer {
        let mut child = Command::new(clrprof_exe())
            .arg("view")
            .args(args)
            .args(["--no-browser", "--no-native-symbols"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start clrprof view");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let rest = line.trim().strip_prefix("http://").unwrap_or_else(|| panic!("a URL line, got {line:?}"));
        let (host, token) = rest.split_once("/?token=").unwrap();
        StoreViewer { _child: KillOnDrop(child), host: host.to_string(), token: token.to_string() }
    }

    /// `GET /api/<what>?query&token=…`: (status, JSON body).
    fn get(&self, what: &str, query: &str) -> (u16, serde_json::Value) {
        let mut s = TcpStream::connect(&self.host).unwrap();
        write!(s, "GET /api/{what}?{query}&token={} HTTP/1.0\r\nHost: {}\r\n\r\n", self.token, self.host).unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: {e}: {body}")))
    }

    /// An API answer that must be 200 (a 503 while a trace loads is waited out).
    fn api(&self, what: &str, query: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (status, v) = self.get(what, query);
            if status == 503 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            assert_eq!(status, 200, "/api/{what}?{query}: {v}");
            return v;
        }
    }
}

/// The CPU weight's sample count in `/api/meta`.
fn cpu_samples(meta: &serde_json::Value) -> u64 {
    meta["weights"].as_array().unwrap().iter().find(|w| w["name"] == "cpu").map_or(0, |w| w["count"].as_u64().unwrap())
}

/// The viewer's CPU hot spots equal the report's functions (self, total, samples), for every
/// function with CPU time and a unique name; Work.Primes among them.
fn hotspots_equal_report(v: &StoreViewer, query: &str, doc: &serde_json::Value, min_compared: usize) {
    let h = v.api("hotspots", &format!("{query}&w=cpu&limit=100000"));
    let rows = h["page"]["rows"].as_array().unwrap();
    assert_eq!(rows.len() as u64, h["page"]["count"].as_u64().unwrap());
    let functions = doc["functions"].as_array().unwrap();
    let mut compared = 0;
    for f in functions.iter().filter(|f| f["cpu_total_ns"].as_u64().unwrap_or(0) > 0) {
        let name = f["name"].as_str().unwrap();
        if functions.iter().filter(|g| g["name"] == name).count() > 1 {
            continue;
        }
        let r = rows.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("no hot spot {name}"));
        assert_eq!(r["self"], f["cpu_self_ns"], "{name} self");
        assert_eq!(r["total"], f["cpu_total_ns"], "{name} total");
        assert_eq!(r["self_count"], f["samples_self"], "{name} samples");
        compared += 1;
    }
    assert!(compared >= min_compared, "{compared} functions compared");
    assert!(rows.iter().any(|r| r["name"] == "Work.Primes"), "Work.Primes sampled");
}

#[test]
fn view_store_follows_a_running_run_and_ends_equal_to_the_report() {
    let _machine = machine::shared();
    let dir = scratch("collect-view");
    let store = store_path(&dir);
    let c = Collector::start(&store, "127.0.0.1:0", &[]);
    let web = start_web(&c.addr, &dir.join("web.clrprof"), &dir.join("agent.log"), &[]);
    c.wait_for("started");
    load(web.port, 2, 10);
    let v = StoreViewer::start(&["--store", &store]);
    // The runs list: the one run, still streaming.
    let list = v.api("runs", "");
    let listed = list["runs"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{list}");
    assert_eq!(listed[0]["id"], 1);
    assert_eq!(listed[0]["state"], "running");
    assert!(listed[0]["command"].as_str().unwrap().ends_with("Web.dll"), "{list}");
    assert!(listed[0]["pid"].as_u64().unwrap() > 0 && listed[0]["bytes"].as_u64().unwrap() > 0, "{list}");
    // Opened: what arrived so far.
    let first = v.api("meta", "run=1");
    assert_eq!(first["run"]["state"], "running", "{}", first["run"]);
    let before = cpu_samples(&first);
    let generation = first["run"]["generation"].as_u64().unwrap();
    // More load: the status's generation moves and the views show more samples.
    load(web.port, 2, 20);
    let deadline = Instant::now() + Duration::from_secs(60);
    let later = loop {
        let s = v.api("status", "run=1");
        if s["generation"].as_u64().unwrap() > generation {
            let m = v.api("meta", "run=1");
            if cpu_samples(&m) > before {
                break m;
            }
        }
        assert!(Instant::now() < deadline, "no new samples after {s}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(later["run"]["bytes"].as_u64().unwrap() > first["run"]["bytes"].as_u64().unwrap());
    // The app exits: the run completes, and the viewer's figures are the report's.
    let (out, _) = web.stop();
    assert!(out.contains("requests=30"), "{out}");
    c.wait_for("run 1: complete");
    let s = v.api("status", "run=1");
    assert_eq!(s["state"], "complete", "{s}");
    let stored = &runs(&store)[0];
    assert_eq!(s["bytes"], stored["bytes"], "every stored byte read");
    let meta = v.api("meta", "run=1");
    assert_eq!(meta["run"]["state"], "complete");
    assert_eq!(meta["generation"], s["generation"]);
    assert_eq!(meta["pid"], stored["pid"]);
    let doc = report_run_json("run:1", &store);
    hotspots_equal_report(&v, "run=1", &doc, 10);
    assert_eq!(v.api("runs", "")["runs"][0]["state"], "complete");
    // Bad runs are one-line errors.
    for (q, msg) in [("run=9", "no run 9"), ("run=x", "not a run id"), ("", "'run' is required")] {
        let (status, e) = v.get("meta", q);
        assert!((400..500).contains(&status), "{q}: {status} {e}");
        assert!(e["error"].as_str().unwrap().contains(msg), "{q}: {e}");
    }

    // `view run:ID --store S` reads the run through the same run source as `report`.
    let one = StoreViewer::start(&["run:latest", "--store", &store]);
    assert_eq!(one.api("meta", "")["trace"], "run:1");
    hotspots_equal_report(&one, "", &doc, 10);
    // So does `diff`: a run against itself changes nothing.
    let out = Command::new(clrprof_exe())
        .args(["diff", "run:1", "run:latest", "--store", &store, "--format", "json", "--no-native-symbols"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let functions = d["functions"].as_array().unwrap();
    assert!(functions.iter().any(|f| f["name"] == "Work.Primes"), "{d}");
    assert!(functions.iter().all(|f| f["delta"] == 0 && f["delta_total"] == 0 && f["base"] == f["new"]), "{d}");
    let primes = functions.iter().find(|f| f["name"] == "Work.Primes").unwrap();
    assert!(primes["new_total"].as_i64().unwrap() > 0, "{primes}");
}
