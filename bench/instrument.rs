//! Instrumentation overhead (`cargo bench -p clrprof --bench instrument`): per-call cost of the
//! enter/leave hooks on a call-heavy loop (timing and counts-only), and the slowdown on a
//! realistic workload (System.Text.Json), each configuration run side by side in rounds.
//! `KEEP_INLINING=1` adds both instrumented configurations with `--keep-inlining`.

#[path = "common.rs"]
mod common;

use std::process::Command;

use common::*;

fn main() {
    let reps: usize = std::env::var("REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let calls: u64 = std::env::var("CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000_000);
    let clr = clrprof();
    let calls_dll = app("Calls");
    let json_dll = app("JsonBench");
    let trace = std::env::temp_dir().join("clrprof-bench-instrument.clrprof");
    println!("machine: {}", machine());

    let mut configs: Vec<(&str, &[&str])> = vec![
        ("no profiler", &[]),
        ("instrument (timing)", &["--instrument"]),
        ("instrument --counts-only", &["--instrument", "--counts-only"]),
    ];
    if std::env::var("KEEP_INLINING").is_ok_and(|v| v == "1") {
        configs.push(("instrument --keep-inlining (timing)", &["--instrument", "--keep-inlining"]));
        configs
            .push(("instrument --keep-inlining --counts-only", &["--instrument", "--keep-inlining", "--counts-only"]));
    }
    let mut loop_ms = vec![Vec::new(); configs.len()];
    let mut json_wall = vec![Vec::new(); configs.len()];
    let mut json_work = vec![Vec::new(); configs.len()];
    let mut counted = 0u64;
    for round in 0..reps {
        for (i, (_, flags)) in configs.iter().enumerate() {
            let mut c = if flags.is_empty() {
                Command::new("dotnet")
            } else {
                let mut c = Command::new(&clr);
                c.arg("record").arg("-o").arg(&trace).args(*flags).args(["--", "dotnet"]);
                c
            };
            c.arg(&calls_dll).args(["many", &calls.to_string()]);
            let (_, out) = run(&mut c);
            loop_ms[i].push(field(&out, "loop_ms="));
            if i == 1 && round == 0 {
                let rep = Command::new(&clr).arg("report").arg(&trace).args(["--format", "json"]).output().unwrap();
                let v: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap();
                counted =
                    v["functions"].as_array().unwrap().iter().find(|f| f["name"] == "Calls.Counted.Tiny").unwrap()
                        ["calls"]
                        .as_u64()
                        .unwrap();
                assert_eq!(counted, calls, "the profiler counts every call");
            }
            let mut c = if flags.is_empty() {
                Command::new("dotnet")
            } else {
                let mut c = Command::new(&clr);
                c.arg("record").arg("-o").arg(&trace).args(*flags).args(["--", "dotnet"]);
                c
            };
            c.arg(&json_dll).arg("30");
            let (wall, out) = run(&mut c);
            json_wall[i].push(wall * 1000.0);
            json_work[i].push(field(&out, "work_ms="));
        }
    }
    let m: Vec<f64> = loop_ms.iter_mut().map(|v| median(v)).collect();
    let jw: Vec<f64> = json_wall.iter_mut().map(|v| median(v)).collect();
    let jk: Vec<f64> = json_work.iter_mut().map(|v| median(v)).collect();
    println!("\ncall-heavy loop: {calls} calls of a tiny method (counted by the profiler: {counted}), median of {reps} rounds");
    println!("| configuration | loop ms | ns per call added |");
    println!("|---|---:|---:|");
    for (i, (name, _)) in configs.iter().enumerate() {
        let per = if i == 0 { 0.0 } else { (m[i] - m[0]) * 1e6 / calls as f64 };
        println!("| {name} | {:.1} | {} |", m[i], if i == 0 { "—".to_string() } else { format!("{per:.1}") });
    }
    println!(
        "\nrealistic workload: System.Text.Json serialize + deserialize of 1,500 orders × 30 rounds, median of {reps}"
    );
    println!("| configuration | process wall ms | slowdown | work ms (after start-up) | slowdown |");
    println!("|---|---:|---:|---:|---:|");
    for (i, (name, _)) in configs.iter().enumerate() {
        println!("| {name} | {:.0} | {:.2}× | {:.0} | {:.2}× |", jw[i], jw[i] / jw[0], jk[i], jk[i] / jk[0]);
    }
}
