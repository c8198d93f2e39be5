//! Streaming to a collector, measured: (1) apps/Web's throughput under a load generator with no
//! profiler, recording to a file, and streaming to `clrprof collect` (interleaved rounds, medians);
//! (2) the collector's ingest rate with 50 concurrent runs replaying a real recorded trace.
//!
//! `cargo bench -p clrprof --bench collect` (env: `ROUNDS` [5], `SECONDS` per measurement [5],
//! `CLIENTS` [4], `PATH_Q` [/json?n=50]). Uses `target/release` when `RELEASE=1`, else the debug
//! build (the agent is optimised in both).

#[path = "common.rs"]
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env_or<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

fn bin() -> PathBuf {
    if std::env::var("RELEASE").as_deref() == Ok("1") {
        common::clrprof()
    } else {
        let st = Command::new("cargo")
            .args(["build", "-q", "-p", "clrprof", "-p", "clrprof-agent"])
            .current_dir(common::root())
            .status()
            .unwrap();
        assert!(st.success());
        common::root().join("target/debug/clrprof")
    }
}

/// One keep-alive HTTP/1.1 client: requests `path` until `stop`; counts responses.
fn client(port: u16, path: String, stop: Arc<AtomicBool>, count: Arc<AtomicU64>) {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    while !stop.load(Ordering::Relaxed) {
        w.write_all(req.as_bytes()).unwrap();
        let mut len = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).unwrap();
        count.fetch_add(1, Ordering::Relaxed);
    }
}

/// Requests per second over `secs` with `clients` connections.
fn load(port: u16, clients: usize, secs: f64, path: &str) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = (0..clients)
        .map(|_| {
            let (stop, count, path) = (Arc::clone(&stop), Arc::clone(&count), path.to_string());
            std::thread::spawn(move || client(port, path, stop, count))
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let n = count.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        let _ = h.join();
    }
    n as f64 / secs
}

/// Starts Web (plainly or under `clrprof record` with `args`); returns the child and its port.
fn start_web(clrprof: &Path, dll: &Path, record: Option<&[String]>) -> (Child, u16) {
    let mut c = match record {
        None => Command::new("dotnet"),
        Some(args) => {
            let mut c = Command::new(clrprof);
            c.arg("record").args(args).args(["--", "dotnet"]);
            c
        }
    };
    let mut child = c.arg(dll).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let port = line.trim().rsplit(':').next().unwrap().parse().unwrap();
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = out.read_to_string(&mut rest);
    });
    (child, port)
}

fn stop(mut child: Child) {
    // Safety: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

fn start_collector(clrprof: &Path, store: &Path) -> (Child, String) {
    let mut child = Command::new(clrprof)
        .args(["collect", "--listen", "127.0.0.1:0", "--store"])
        .arg(store)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr =
        line.trim().strip_prefix("clrprof collect: listening on ").unwrap().split(',').next().unwrap().to_string();
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
    });
    (child, addr)
}

fn runs_done(clrprof: &Path, store: &Path) -> usize {
    let out = Command::new(clrprof).args(["runs", "--format", "json", "--store"]).arg(store).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    v.as_array().map(|a| a.iter().filter(|r| r["state"] != "running").count()).unwrap_or(0)
}

fn main() {
    let rounds: usize = env_or("ROUNDS", 5);
    let secs: f64 = env_or("SECONDS", 5.0);
    let clients: usize = env_or("CLIENTS", 4);
    let path: String = env_or("PATH_Q", "/json?n=50".to_string());
    let clrprof = bin();
    let dll = common::app("Web");
    let dir = std::env::temp_dir().join(format!("clrprof-bench-collect-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = dir.join("runs.db");
    let (collector, addr) = start_collector(&clrprof, &store);
    println!("machine: {}", common::machine());
    println!("binary: {}", clrprof.display());
    println!(
        "load: {clients} keep-alive clients on {path}, {secs} s per measurement after 2 s warm-up, {rounds} rounds"
    );
    let configs: Vec<(&str, Option<Vec<String>>)> = vec![
        ("no profiler", None),
        ("record to a file", Some(vec!["-o".into(), dir.join("web-{pid}.clrprof").to_string_lossy().into_owned()])),
        (
            "record --server (collector)",
            Some(vec![
                "--server".into(),
                addr.clone(),
                "-o".into(),
                dir.join("fallback-{pid}.clrprof").to_string_lossy().into_owned(),
            ]),
        ),
    ];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for round in 0..rounds {
        for (i, (name, args)) in configs.iter().enumerate() {
            let (child, port) = start_web(&clrprof, &dll, args.as_deref());
            load(port, clients, 2.0, &path);
            let rps = load(port, clients, secs, &path);
            stop(child);
            println!("round {round}: {name}: {rps:.0} req/s");
            results[i].push(rps);
        }
    }
    let base = common::median(&mut results[0].clone());
    println!("\n| configuration | median req/s | vs no profiler |\n|---|---:|---:|");
    for (i, (name, _)) in configs.iter().enumerate() {
        let m = common::median(&mut results[i].clone());
        println!("| {name} | {m:.0} | {:+.1}% |", (m / base - 1.0) * 100.0);
    }
    // Per-round ratios (each round's configurations ran back to back), medians: steadier than
    // ratios of medians on a machine whose load drifts between rounds.
    let ratio = |a: usize, b: usize| {
        let mut r: Vec<f64> = (0..rounds).map(|i| results[a][i] / results[b][i]).collect();
        (common::median(&mut r) - 1.0) * 100.0
    };
    println!(
        "median per-round change: file vs none {:+.1}%, collector vs none {:+.1}%, collector vs file {:+.1}%",
        ratio(1, 0),
        ratio(2, 0),
        ratio(2, 1)
    );
    let fallbacks = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("fallback"))
        .count();
    println!("fallback files written (collector unreachable): {fallbacks}");

    // Ingest: 50 concurrent replays of one real trace (the last file-recorded run).
    let model = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("web-"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .unwrap();
    let bytes = Arc::new(std::fs::read(&model).unwrap());
    let before = runs_done(&clrprof, &store);
    for attempt in 0..3 {
        let t = Instant::now();
        let hs: Vec<_> = (0..50u32)
            .map(|i| {
                let (addr, bytes) = (addr.clone(), Arc::clone(&bytes));
                std::thread::spawn(move || {
                    use clrprof_trace::wire::{self, Hello};
                    let mut s = TcpStream::connect(&addr).unwrap();
                    let h = Hello {
                        kind: wire::kind::RUN,
                        host: "bench".into(),
                        pid: 1_000_000 + i,
                        command: "replay".into(),
                        ..Default::default()
                    };
                    s.write_all(&h.encode()).unwrap();
                    let mut a = [0u8; 9];
                    s.read_exact(&mut a).unwrap();
                    for piece in bytes.chunks(64 << 10) {
                        s.write_all(piece).unwrap();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let want = before + 50 * (attempt + 1);
        while runs_done(&clrprof, &store) < want {
            std::thread::sleep(Duration::from_millis(20));
        }
        let s = t.elapsed().as_secs_f64();
        let total = bytes.len() as f64 * 50.0;
        println!(
            "ingest {attempt}: 50 runs x {:.1} MB in {s:.2} s = {:.1} MB/s, {:.0} runs/s",
            bytes.len() as f64 / 1e6,
            total / 1e6 / s,
            50.0 / s
        );
    }
    stop(collector);
    let _ = std::fs::remove_dir_all(&dir);
}
