//! Shared helpers for the end-to-end overhead benchmarks: build the apps, run commands
//! side by side, take medians. Benchmarks run the release build of clrprof and its agent.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// `target/release/clrprof`, built on demand.
pub fn clrprof() -> PathBuf {
    let st =
        Command::new("cargo").args(["build", "--release", "--workspace", "-q"]).current_dir(root()).status().unwrap();
    assert!(st.success(), "cargo build --release failed");
    root().join("target/release/clrprof")
}

pub fn app(name: &str) -> PathBuf {
    let dir = root().join("apps").join(name);
    let st = Command::new("dotnet").args(["build", "-nologo", "-v", "q", "-c", "Release"]).arg(&dir).status().unwrap();
    assert!(st.success(), "dotnet build {name} failed");
    dir.join(format!("bin/Release/net10.0/{name}.dll"))
}

/// Runs a command, returning (wall seconds, stdout).
pub fn run(cmd: &mut Command) -> (f64, String) {
    let t = Instant::now();
    let out = cmd.output().unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert!(out.status.success(), "{:?} failed: {}", cmd, String::from_utf8_lossy(&out.stderr));
    (secs, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The number after `key=` in `text`.
pub fn field(text: &str, key: &str) -> f64 {
    let i = text.find(key).unwrap_or_else(|| panic!("no {key} in {text}")) + key.len();
    text[i..].split(|c: char| !(c.is_ascii_digit() || c == '.')).next().unwrap().parse().unwrap()
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let clock =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource").unwrap_or_default();
    let dotnet = Command::new("dotnet")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, clocksource {}, .NET SDK {dotnet}", clock.trim())
}
