//! pprof exports read by an independent decoder: `go tool pprof` (Debian's golang-go, installed by
//! scripts/bootstrap) must read every exported profile, and its `-top` must agree with
//! `clrprof report` on the hottest functions and on the totals. Runs on the checked-in traces.

use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

fn trace(name: &str) -> PathBuf {
    repo_root().join(format!("testdata/traces/v1/{name}.clrprof"))
}

fn export_pprof(trace: &Path, dir: &Path, extra: &[&str]) -> PathBuf {
    let out = dir.join(format!("{}.pb.gz", trace.file_stem().unwrap().to_string_lossy()));
    let r = Command::new(clrprof_exe())
        .arg("export")
        .arg(trace)
        .args(["-f", "pprof", "--no-native-symbols", "-o"])
        .arg(&out)
        .args(extra)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", text(&r.stderr));
    out
}

/// `go tool pprof -top` rows: (flat, cum, name), and the total line.
fn go_top(profile: &Path, sample_index: &str) -> (Vec<(String, String, String)>, String) {
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-nodecount=200", &format!("-sample_index={sample_index}")])
        .arg(profile)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("`go` is needed to check pprof exports: run scripts/bootstrap (it installs golang-go)");
    assert!(out.status.success(), "go tool pprof failed: {}", text(&out.stderr));
    let t = text(&out.stdout);
    let total = t.lines().find(|l| l.starts_with("Showing nodes accounting for")).unwrap_or("").to_string();
    let rows = t
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0].to_string(), w[3].to_string(), w[5..].join(" "))
        })
        .collect();
    (rows, total)
}

/// Function names of `clrprof report`'s hot spots, hottest first.
fn report_top(trace: &Path, weight: &str, n: usize) -> Vec<String> {
    let out = report(trace, &["--weight", weight, "--no-native-symbols", "--format", "csv"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).lines().skip(1).take(n).map(|l| l.split(';').nth(1).unwrap().to_string()).collect()
}

#[test]
fn go_tool_pprof_reads_every_export_and_agrees_with_the_report() {
    let dir = scratch("pprof");
    // (trace, pprof sample type, clrprof weight, rows to compare)
    for (name, index, weight, n) in [
        ("sampled", "cpu", "cpu", 2),
        ("sampled", "wall", "wall", 1),
        ("instrumented", "time", "time", 3),
        ("counted", "calls", "calls", 1),
        ("events", "alloc_space", "alloc-bytes", 2),
    ] {
        let f = export_pprof(&trace(name), &dir, &[]);
        let (rows, _) = go_top(&f, index);
        // Unnamed native code is `lib!<unknown>` in reports and `lib![unknown]` in pprof (whose
        // display would cut `<...>` off as C++ template arguments).
        let want: Vec<String> =
            report_top(&trace(name), weight, n).iter().map(|w| w.replace("!<unknown>", "![unknown]")).collect();
        let got: Vec<String> = rows.iter().take(n).map(|r| r.2.clone()).collect();
        assert_eq!(got, want, "{name} {index}: go tool pprof -top against clrprof report");
    }
}

#[test]
fn pprof_carries_exceptions_contention_threads_and_the_run_s_time() {
    let dir = scratch("pprof-events");
    // 40 exceptions thrown by one site.
    let f = export_pprof(&trace("exceptions"), &dir, &[]);
    let (rows, total) = go_top(&f, "exceptions");
    assert!(total.contains("accounting for 40, 100% of 40 total"), "{total}");
    assert_eq!(rows[0].2, "EventsApp.Program.Thrower");
    // 20 Monitor contentions, 602.797 ms waited (the locks view's figures).
    let f = export_pprof(&trace("contention"), &dir, &[]);
    let (_, total) = go_top(&f, "contentions");
    assert!(total.contains("of 20 total"), "{total}");
    let (rows, _) = go_top(&f, "delay");
    let waiting = rows.iter().find(|r| r.2 == "EventsApp.Program.WaitForGate").expect("the waiting site");
    assert_eq!(waiting.1, "602.80ms", "{waiting:?}");
    // Thread labels and the run's start and duration.
    let f = export_pprof(&trace("sampled"), &dir, &["--thread", "many-1"]);
    let raw =
        Command::new("go").args(["tool", "pprof", "-raw"]).arg(&f).env("HOME", std::env::temp_dir()).output().unwrap();
    let raw = text(&raw.stdout);
    assert!(raw.contains("thread id:[7973]") && raw.contains("thread name:[many-1]"), "{raw}");
    assert!(!raw.contains("thread id:[7972]"), "only the selected thread");
    assert!(raw.contains("Duration: 637.") && raw.contains("Period: 10000000"), "{raw}");
    // Mappings: native libraries with their executable mapping's range and offset, managed
    // modules with their path and base address; every location points into one of them.
    let mappings: Vec<&str> = raw.lines().skip_while(|l| *l != "Mappings").skip(1).collect();
    let coreclr = mappings.iter().find(|l| l.ends_with("/libcoreclr.so  [FN]")).expect("libcoreclr mapping");
    let range: Vec<u64> = coreclr
        .split_whitespace()
        .nth(1)
        .unwrap()
        .split('/')
        .map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).unwrap())
        .collect();
    assert!(range[0] > 0 && range[1] > range[0], "{coreclr}");
    assert!(
        mappings.iter().any(|l| l.contains(" /") && l.ends_with("/Sampling.dll  [FN]") && !l.contains(" 0x0/")),
        "{mappings:?}"
    );
    let locations: Vec<&str> =
        raw.lines().skip_while(|l| *l != "Locations").skip(1).take_while(|l| *l != "Mappings").collect();
    // (A frame of no module — the UNKNOWN bucket of unresolvable IPs — has no mapping.)
    assert!(!locations.is_empty(), "{raw}");
    for l in &locations {
        assert_eq!(l.contains(" M="), !l.contains(" :0 "), "{l}");
    }
    // One function per method: full name, module as file name.
    assert!(locations.iter().any(|l| l.contains(" Sampling.Many.Spin Sampling.dll:0 ")), "{locations:?}");
    let _ = std::fs::remove_dir_all(dir);
}
