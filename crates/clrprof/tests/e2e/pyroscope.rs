//! Continuous profiling end to end: a real .NET program (apps/Sampling, Heavy and Light burning
//! CPU 3:1) runs under the agent with `CLRPROF_SERVICE` and `CLRPROF_LABELS`; its trace bytes are
//! handed to the Pyroscope pusher while they are written (as the collector hands them over); a
//! loopback HTTP receiver stands in for Pyroscope and every body it gets is read by `go tool
//! pprof`. Checked: names and labels, sample types, windows that follow each other, nothing lost
//! (the windows add up to the finished trace's own pprof export), and Heavy's share of the CPU.

use crate::common::*;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clrprof_pyroscope::{Config, Endpoint, Pyroscope};

#[path = "../../../clrprof-pyroscope/tests/support/mod.rs"]
pub(crate) mod support;
use support::receiver;

use crate::otlp_push::Collector;

fn query_param<'a>(line: &'a str, key: &str) -> &'a str {
    let q = line.split_whitespace().nth(1).unwrap().split_once('?').unwrap().1;
    q.split('&').find_map(|kv| kv.strip_prefix(&format!("{key}="))).unwrap_or_else(|| panic!("{key} in {line}"))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

fn go_pprof(args: &[&str], file: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("`go` is needed to check pprof bodies: run scripts/bootstrap (it installs golang-go)");
    assert!(out.status.success(), "go tool pprof {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// `go tool pprof -top`'s total (plain number) and (flat, cum, name) rows.
fn top(file: &Path, index: &str, unit: &str) -> (u64, Vec<(u64, u64, String)>) {
    let t = go_pprof(&["-top", "-nodecount=500", &format!("-sample_index={index}"), &format!("-unit={unit}")], file);
    let num = |s: &str| s.trim_end_matches("ns").parse::<u64>().unwrap_or_else(|_| panic!("{s} in {t}"));
    let total = t
        .lines()
        .find_map(|l| l.strip_prefix("Showing nodes accounting for "))
        .map(|l| num(l.rsplit_once(" of ").unwrap().1.trim_end_matches(" total")))
        .unwrap_or(0);
    let rows = t
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (num(w[0]), num(w[3]), w[5..].join(" "))
        })
        .collect();
    (total, rows)
}

#[test]
fn a_live_run_is_pushed_every_interval_with_its_labels() {
    let _machine = machine::alone();
    let dir = scratch("pyroscope-live");
    let (port, got) = receiver();
    let mut cfg = Config::new(Endpoint::parse(&format!("http://127.0.0.1:{port}"), Some("tenant:secret")).unwrap());
    cfg.interval = Duration::from_secs(1);
    cfg.lag = Duration::from_secs(1);
    let logs: Arc<Mutex<Vec<String>>> = Arc::default();
    let l = logs.clone();
    let p = Pyroscope::start(cfg, Arc::new(move |m: &str| l.lock().unwrap().push(m.to_string()))).unwrap();

    // The app runs under `clrprof record`; its trace grows on disk while the pusher is fed from it.
    let trace = dir.join("live.clrprof");
    let mut child = Command::new(clrprof_exe())
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--agent")
        .arg(agent_path())
        .args(["--", "dotnet"])
        .arg(app_dll("Sampling"))
        .args(["ratio", "3000"])
        .env("CLRPROF_SERVICE", "shop-api")
        .env("CLRPROF_LABELS", "env=test,team=perf")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    p.run_started(1);
    let mut fed = 0usize;
    let mut feed = |p: &Pyroscope| {
        if let Ok(b) = std::fs::read(&trace) {
            if b.len() > fed {
                p.run_data(1, &b[fed..]);
                fed = b.len();
            }
        }
    };
    let status = loop {
        feed(&p);
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    feed(&p);
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "record failed: {err}");
    p.run_ended(1);
    let stats = p.shutdown(Duration::from_secs(60));
    let got = got.lock().unwrap();
    assert_eq!((stats.sent as usize, stats.dropped, stats.failed), (got.len(), 0, 0), "{stats:?} {logs:?}");

    // Names and labels: one series per kind, the service and the user's labels in the name.
    let v = report_json(&trace);
    let pid = v["process"]["pid"].as_u64().unwrap();
    let runtime = v["process"]["runtime_version"].as_str().unwrap().to_string();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let labels =
        format!("{{service_name=shop-api,host={host},pid={pid},runtime_version={runtime},env=test,team=perf}}");
    let mut cpu = Vec::new();
    let mut kinds = std::collections::BTreeSet::new();
    for (line, head, body) in got.iter() {
        assert!(line.starts_with("POST /ingest?"), "{line}");
        assert!(head.contains("Authorization: Basic dGVuYW50OnNlY3JldA==\r\n"), "{head}");
        assert_eq!(query_param(line, "format"), "pprof");
        let name = percent_decode(query_param(line, "name"));
        let (app, l) = name.split_once('{').unwrap();
        assert_eq!(format!("{{{l}"), labels, "{name}");
        kinds.insert(app.to_string());
        let from: u64 = query_param(line, "from").parse().unwrap();
        let until: u64 = query_param(line, "until").parse().unwrap();
        assert!(from < until && from > 1_700_000_000_000_000_000, "ns since the epoch: {line}");
        if app == "shop-api.cpu" {
            cpu.push((from, until, body.clone()));
        }
    }
    assert!(kinds.contains("shop-api.cpu") && kinds.contains("shop-api.wall"), "{kinds:?}");
    // A 3-second CPU burn pushed in 1-second windows: several windows, each after the last.
    assert!(cpu.len() >= 3, "{} cpu windows", cpu.len());
    cpu.sort_by_key(|c| c.0);
    for w in cpu.windows(2) {
        assert!(w[0].1 <= w[1].0, "windows overlap: {}..{} then {}", w[0].0, w[0].1, w[1].0);
    }
    // go tool pprof reads every body: its sample types, and the samples of all windows add up to
    // the finished trace's own export (nothing lost on the way).
    let (mut samples, mut heavy, mut light) = (0, 0, 0);
    for (i, (_, _, body)) in cpu.iter().enumerate() {
        let f = dir.join(format!("cpu{i}.pb.gz"));
        std::fs::write(&f, body).unwrap();
        let raw = go_pprof(&["-raw"], &f);
        assert!(raw.contains("samples/count cpu/nanoseconds"), "{raw}");
        samples += top(&f, "samples", "minimum").0;
        let (_, rows) = top(&f, "cpu", "ns");
        heavy += rows.iter().filter(|r| r.2 == "Sampling.Ratio.Heavy").map(|r| r.1).sum::<u64>();
        light += rows.iter().filter(|r| r.2 == "Sampling.Ratio.Light").map(|r| r.1).sum::<u64>();
    }
    let whole = dir.join("whole.pb.gz");
    let out = Command::new(clrprof_exe())
        .arg("export")
        .arg(&trace)
        .args(["-f", "pprof", "--no-native-symbols", "-o"])
        .arg(&whole)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(samples, top(&whole, "samples", "minimum").0, "cpu samples pushed against the trace's");
    let share = heavy as f64 / (heavy + light) as f64;
    assert!((0.65..=0.85).contains(&share), "Heavy has {share:.3} of Heavy+Light CPU, expected 0.75 ± 0.10");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn clrprof_collect_pushes_the_runs_it_receives() {
    let _machine = machine::shared();
    let dir = scratch("pyroscope-collect");
    let (rport, got) = receiver();
    let rurl = format!("http://127.0.0.1:{rport}");
    let collector = Collector::start(&dir, &["--pyroscope", &rurl, "--interval", "1s"]);
    let (listen, lines) = (collector.listen.clone(), collector.lines.clone());
    assert!(lines.lock().unwrap()[0].contains("pushing to Pyroscope at http://127.0.0.1:"), "{lines:?}");

    let out = Command::new(clrprof_exe())
        .args(["record", "--server", &listen, "--agent"])
        .arg(agent_path())
        .args(["--", "dotnet"])
        .arg(app_dll("Sampling"))
        .args(["ratio", "1500"])
        .env("CLRPROF_SERVICE", "orders")
        .env("CLRPROF_LABELS", "env=ci")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "record failed: {}", text(&out.stderr));
    // The run's end is pushed as soon as the collector sees it end.
    let t = std::time::Instant::now();
    let cpu_bodies = loop {
        let g = got.lock().unwrap();
        let ended = lines.lock().unwrap().iter().any(|l| l.contains("ended") || l.contains("complete"));
        let cpu: Vec<(String, Vec<u8>)> = g
            .iter()
            .filter(|r| percent_decode(query_param(&r.0, "name")).starts_with("orders.cpu{service_name=orders,"))
            .map(|r| (r.0.clone(), r.2.clone()))
            .collect();
        if !cpu.is_empty() && (ended || t.elapsed() > Duration::from_secs(20)) {
            break cpu;
        }
        assert!(t.elapsed() < Duration::from_secs(90), "no cpu profile arrived: {lines:?}");
        drop(g);
        std::thread::sleep(Duration::from_millis(100));
    };
    // Its last lines are read to the end of its stderr (they may still be in the pipe when it exits).
    let lines = collector.stop();
    let summary = lines
        .iter()
        .find(|l| l.contains("profiles sent"))
        .unwrap_or_else(|| panic!("the collector's Pyroscope summary: {lines:?}"));
    assert!(summary.contains(" 0 dropped, 0 failed"), "{summary}");
    // Every CPU sample of the run reached Pyroscope: the windows add up to the stored run's export.
    let mut samples = 0;
    let cpu = got
        .lock()
        .unwrap()
        .iter()
        .filter(|r| percent_decode(query_param(&r.0, "name")).starts_with("orders.cpu{"))
        .map(|r| r.2.clone())
        .collect::<Vec<_>>();
    assert!(cpu.len() >= cpu_bodies.len());
    for (i, body) in cpu.iter().enumerate() {
        let f = dir.join(format!("cpu{i}.pb.gz"));
        std::fs::write(&f, body).unwrap();
        samples += top(&f, "samples", "minimum").0;
    }
    let name = percent_decode(query_param(&cpu_bodies[0].0, "name"));
    assert!(name.ends_with(",env=ci}") && name.contains(",pid=") && name.contains(",host="), "{name}");
    let whole = dir.join("whole.pb.gz");
    let out = Command::new(clrprof_exe())
        .args(["export", "run:latest", "--store"])
        .arg(dir.join("runs.db"))
        .args(["-f", "pprof", "--no-native-symbols", "-o"])
        .arg(&whole)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(samples, top(&whole, "samples", "minimum").0, "cpu samples pushed against the stored run's");
    let _ = std::fs::remove_dir_all(dir);
}
