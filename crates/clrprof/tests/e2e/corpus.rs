//! End to end on real code nobody here wrote: apps/Markdown renders a generated document with
//! Markdig (NuGet) in a loop. The runtime's own time is named by what the runtime was doing
//! (`[JIT] M`, `[ReadyToRun] M`, `[GC]`): each label must cover only the runtime's own interval,
//! bounded by the durations the runtime reports, and the profiler's own time is `[profiler]`, apart
//! from the application's functions. Then the per-function self CPU is checked against `perf`
//! with .NET perf maps, an independent sampler.

use crate::common::*;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// Renders per run: about 3 s of CPU on this class of machine, 7,800 ms of wall time on a loaded one.
const RENDERS: &str = "400";

/// The all-threads hot spots of one weight: function → (self ms, inclusive ms).
fn hotspots(trace: &Path, weight: &str) -> HashMap<String, (f64, f64)> {
    let mut rows = HashMap::new();
    for (function, excl, incl) in hotspot_rows(trace, weight) {
        let e = rows.entry(function).or_insert((0.0, 0.0));
        e.0 += excl;
        e.1 += incl;
    }
    rows
}

fn num(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no number {key} in {v}"))
}

#[test]
fn markdown_runtime_labels_cover_only_the_runtimes_own_work() {
    let _machine = machine::shared();
    let dir = scratch("corpus-labels");
    let trace = dir.join("md.clrprof");
    let out = record("Markdown", &[RENDERS], &trace, &[]);
    assert!(out.status.success(), "record failed: {}{}", text(&out.stdout), text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains(&format!("renders={RENDERS} checksum=98dc4d0a94395815")), "{stdout}");

    // The runtime's own durations: JIT time per method name (every code version of every
    // instantiation of that name, precompiled methods promoted to tier 1 included), GC pauses.
    let v = report_json(&trace);
    let mut jit_ms: HashMap<String, f64> = HashMap::new();
    let mut compilations: HashMap<String, f64> = HashMap::new();
    for f in v["functions"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap().to_string();
        *jit_ms.entry(name.clone()).or_default() += num(f, "jit_ns") / 1e6;
        *compilations.entry(name).or_default() += num(f, "compilations");
    }
    let gc_ms: f64 =
        v["gcs"].as_array().unwrap().iter().map(|g| num(g, "pause_ns").max(num(g, "duration_ns"))).sum::<f64>() / 1e6;
    // What one sample stands for, on average, in this run: the tolerance of sampled figures.
    let s = &v["sampling"];
    let cpu_sample = num(s, "cpu_ns") / num(s, "total_samples") / 1e6;
    let wall_sample = num(s, "wall_ns") / num(s, "wall_samples") / 1e6;
    assert!(num(s, "total_samples") >= 150.0, "too few samples to judge: {s}");

    let cpu = hotspots(&trace, "cpu");
    let wall = hotspots(&trace, "wall");
    let mut checked = 0;
    for (weight, rows, per_sample) in [("cpu", &cpu, cpu_sample), ("wall", &wall, wall_sample)] {
        for (name, &(self_ms, _)) in rows.iter() {
            if let Some(m) = name.strip_prefix("[JIT] ") {
                // A compilation can be caught at most by the samples (or wall ticks) that overlap its
                // interval: its JIT time plus one sample's length at each end of each compilation.
                let jit = jit_ms.get(m).copied().unwrap_or(0.0);
                let n = compilations.get(m).copied().unwrap_or(1.0).max(1.0);
                let bound = jit + 2.0 * n * per_sample + if weight == "wall" { 2.0 * cpu_sample } else { 0.0 };
                assert!(
                    self_ms <= bound,
                    "{weight}: {name} holds {self_ms:.1} ms, its JIT time is {jit:.1} ms ({n} code versions, \
                     {per_sample:.1} ms per sample): the label outlives the compilation"
                );
                checked += 1;
            }
            if name.starts_with("[ReadyToRun] ") {
                // Preparing precompiled code (the image lookup and its fixups) takes microseconds:
                // a few samples at most, never a hot spot.
                assert!(
                    self_ms <= 3.0 * per_sample,
                    "{weight}: {name} holds {self_ms:.1} ms ({per_sample:.1} ms per sample): the label \
                     outlives the lookup"
                );
            }
        }
    }
    assert!(checked >= 20, "only {checked} [JIT] rows: the compilations are not named");
    let gc_cpu = cpu.get("[GC]").map_or(0.0, |r| r.0);
    assert!(gc_cpu <= gc_ms + 3.0 * cpu_sample, "[GC] {gc_cpu:.1} ms of CPU, GCs lasted {gc_ms:.1} ms");

    // The profiler's own code is never part of the application's stacks: every stack with a frame
    // of the agent's library starts at `[profiler]`, in every weight, and no function of the
    // agent holds more time than `[profiler]` as a whole.
    for (weight, rows) in [("cpu", &cpu), ("wall", &wall)] {
        for (frames, _) in folded(&trace, weight) {
            if frames.iter().any(|f| f.contains("libclrprof_agent")) {
                assert_eq!(frames[0], "[profiler]", "{weight}: the agent's frames under the app: {frames:?}");
            }
        }
        let profiler = rows.get("[profiler]").map_or(0.0, |r| r.1);
        for (name, (_, incl)) in rows.iter().filter(|(n, _)| n.contains("libclrprof_agent")) {
            assert!(*incl <= profiler + 0.001, "{weight}: {name} ({incl} ms) outside [profiler] ({profiler} ms)");
        }
    }
}

/// `perf` with .NET perf maps names JIT-compiled code from `/tmp/perf-PID.map`, but only in
/// anonymous mappings: the runtime's W^X double mapping puts code in a `memfd:doublemapper` file
/// perf does not look up, so the run turns it off (`DOTNET_EnableWriteXorExecute=0`); precompiled
/// (ReadyToRun) code lies in the assemblies' file mappings, which perf cannot name, so the run
/// JIT-compiles everything (`DOTNET_ReadyToRun=0`: hot CoreLib methods such as
/// `CastHelpers.IsInstanceOfClass` ran precompiled for a load-dependent while before tier 1, and
/// perf's share of them fell 3.5 points short).
const PERF_ENV: [(&str, &str); 3] =
    [("DOTNET_PerfMapEnabled", "1"), ("DOTNET_EnableWriteXorExecute", "0"), ("DOTNET_ReadyToRun", "0")];

/// A function name as both tools can agree on it: `Ns.Type.Method`, without the module, the
/// parameter list, generic arguments and arity markers (`List`1<class X>::Add(…)[OptimizedTier1]`
/// and `List<X>.Add` are both `List.Add`), nor a native symbol's `module!` prefix.
fn common_name(name: &str) -> String {
    let mut n = name.trim();
    // perf's managed symbols: `<return type> [Module] Ns.Type::Method(params)[tier]`.
    if n.contains("::") {
        if let Some(i) = n.find("] ") {
            n = &n[i + 2..];
        }
    } else if let Some((module, rest)) = n.split_once('!') {
        if !module.contains([' ', '(']) {
            n = rest;
        }
    }
    let n = n.replace("::", ".");
    // glibc's memcpy and memmove variants are one function under two names (one address): perf
    // and clrprof may each pick either.
    let n = match n.strip_prefix("__memcpy_") {
        Some(rest) => format!("__memmove_{rest}"),
        None => n,
    };
    let mut out = String::new();
    let mut depth = 0;
    let mut chars = n.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '(' if depth == 0 => break,
            '`' if chars.peek().is_some_and(|d| d.is_ascii_digit()) => {
                while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                    chars.next();
                }
                // perf writes a shared instantiation's arguments in brackets: `List`1[System.__Canon]`.
                if chars.peek() == Some(&'[') {
                    for d in chars.by_ref() {
                        if d == ']' {
                            break;
                        }
                    }
                }
            }
            // perf separates nested types with `/`, the profile with `+`.
            '/' if depth == 0 => out.push('+'),
            '<' if depth > 0 || out.chars().last().is_some_and(|p| p.is_alphanumeric() || p == '_') => depth += 1,
            '>' if depth > 0 => depth -= 1,
            _ if depth > 0 => {}
            c => out.push(c),
        }
    }
    out
}

#[test]
fn common_names_of_perf_and_clrprof_match() {
    for (a, b) in [
        (
            "instance void [Markdig] Markdig.Parsers.InlineProcessor::ProcessInlineLeaf(class Markdig.Syntax.LeafBlock)[OptimizedTier1]",
            "Markdig.Parsers.InlineProcessor.ProcessInlineLeaf",
        ),
        ("void [Markdown] Program::<Main>$(string[])[OptimizedTier1OSR]", "Program.<Main>$"),
        ("Markdig.Renderers.RendererBase.WriteChildren(Markdig.Syntax.Inlines.ContainerInline)", "Markdig.Renderers.RendererBase.WriteChildren"),
        ("instance void [System.Private.CoreLib] System.Collections.Generic.List`1[System.__Canon]::AddWithResize(!0)[OptimizedTier1]", "System.Collections.Generic.List.AddWithResize"),
        ("System.Collections.Generic.List<__Canon>.AddWithResize", "System.Collections.Generic.List.AddWithResize"),
        ("libc.so.6!__memset_evex_unaligned_erms", "__memset_evex_unaligned_erms"),
        ("__memset_evex_unaligned_erms", "__memset_evex_unaligned_erms"),
        ("libc.so.6!__memcpy_avx512_unaligned_erms", "__memmove_avx512_unaligned_erms"),
        ("instance void [Markdig] Markdig.Helpers.StringLineGroup/Iterator::Next()[OptimizedTier1]", "Markdig.Helpers.StringLineGroup+Iterator.Next"),
    ] {
        assert_eq!(common_name(a), b, "{a}");
    }
}

/// perf's samples of one process of a recording: (dso, symbol, percent of that process's samples),
/// each sample placed at its innermost user-space frame as a signal handler sees it (clrprof's
/// SIGPROF lands on the instruction the kernel returns to: a page fault taken by `memmove` is
/// `memmove`'s time for it, where `perf report` would give it to the kernel's fault handler). The
/// profiler's own threads (`clrprof-*`) are left out, as clrprof leaves out its own time.
fn perf_rows(data: &Path, pid: u32) -> (Vec<(String, String, f64)>, u64) {
    let out = Command::new("perf")
        .args(["script", "-F", "comm,tid,ip,sym,dso"])
        .arg(format!("--pid={pid}"))
        .arg("-i")
        .arg(data)
        .output()
        .expect("run perf script");
    assert!(out.status.success(), "perf script: {}", text(&out.stderr));
    let script = text(&out.stdout);
    let mut counts: HashMap<(String, String), u64> = HashMap::new();
    let mut total = 0u64;
    for sample in script.split("\n\n") {
        let mut lines = sample.lines().filter(|l| !l.trim().is_empty());
        let Some(header) = lines.next() else { continue };
        let comm = header.trim().rsplit_once(' ').map_or(header.trim(), |(c, _)| c.trim());
        if comm.starts_with("clrprof-") {
            continue;
        }
        let frames: Vec<(String, String)> = lines
            .filter_map(|l| {
                let (_, rest) = l.trim().split_once(' ')?;
                let (sym, dso) = rest.rsplit_once(" (")?;
                Some((sym.trim().to_string(), dso.trim_end_matches(')').to_string()))
            })
            .collect();
        let Some((sym, dso)) = frames.iter().find(|(_, d)| d != "[kernel.kallsyms]").or(frames.first()) else {
            continue;
        };
        let dso = if dso == "[kernel.kallsyms]" {
            "[kernel]".to_string()
        } else {
            let base = dso.rsplit('/').next().unwrap_or(dso);
            if base.starts_with("perf-") && base.ends_with(".map") {
                format!("[JIT] tid {pid}")
            } else {
                base.to_string()
            }
        };
        *counts.entry((dso, sym.clone())).or_default() += 1;
        total += 1;
    }
    assert!(total > 0, "no samples of process {pid} in perf script's output:\n{}", text(&out.stderr));
    (counts.into_iter().map(|((d, s), n)| (d, s, 100.0 * n as f64 / total as f64)).collect(), total)
}

/// The PID of the `dotnet` process of a recording (the process whose JIT code perf names from its
/// perf map: `[JIT] tid PID`).
fn perf_dotnet_pid(data: &Path) -> u32 {
    let out = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "--sort", "dso", "-q", "-i"])
        .arg(data)
        .output()
        .expect("run perf report");
    text(&out.stdout)
        .lines()
        .find_map(|l| l.split("[JIT] tid ").nth(1).and_then(|p| p.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no JIT code named from a perf map:\n{}", text(&out.stdout)))
}

/// perf and clrprof sample the same run (`perf record -- clrprof record -- dotnet …`): the
/// per-function self CPU shares of the top 10 functions perf names agree, as does the time of the
/// `[JIT] M` labels with perf's time in the JIT's library. One run for both keeps the run-to-run
/// spread (tiering, the machine's load) out of the comparison; each side leaves the profiler's own
/// time out of its total.
#[test]
fn markdown_self_cpu_agrees_with_perf() {
    let _machine = machine::alone();
    let perf_ok = Command::new("perf").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(perf_ok, "the corpus cross-check needs `perf` (Debian's linux-perf; scripts/bootstrap installs it)");
    let dir = scratch("corpus-perf");
    let dll = app_dll("Markdown");
    let data = dir.join("perf.data");
    let trace = dir.join("md.clrprof");
    // `cpu-clock` (a software event) samples in containers and virtual machines without a PMU.
    let out = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-F", "999", "-g", "-q", "-o"])
        .arg(&data)
        .arg("--")
        .arg(clrprof_exe())
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--agent")
        .arg(agent_path())
        .args(["--rate", "999", "--", "dotnet"])
        .arg(&dll)
        .arg(RENDERS)
        .envs(PERF_ENV)
        .stdin(Stdio::null())
        .output()
        .expect("run perf record");
    assert!(
        out.status.success(),
        "perf record failed (perf_event_paranoid is {}): {}",
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default().trim(),
        text(&out.stderr)
    );
    let pid = perf_dotnet_pid(&data);
    let (rows, perf_samples) = perf_rows(&data, pid);
    // perf reads the map when it reports: removed only now.
    for f in [format!("/tmp/perf-{pid}.map"), format!("/tmp/perfinfo-{pid}.map")] {
        let _ = std::fs::remove_file(f);
    }
    let agent: f64 = rows.iter().filter(|r| r.0.contains("libclrprof_agent")).map(|r| r.2).sum();
    let perf_total: f64 = rows.iter().map(|r| r.2).sum::<f64>() - agent;
    let mut perf: HashMap<String, f64> = HashMap::new();
    let (mut jit_share, mut native_share) = (0.0, 0.0);
    for (d, sym, pct) in &rows {
        let pct = 100.0 * pct / perf_total;
        if d == "libclrjit.so" {
            jit_share += pct;
        }
        if !d.starts_with("[JIT]") && !d.ends_with(".dll") && !d.contains("libclrprof_agent") {
            native_share += pct;
        }
        // The runtime's own code and its stubs are named by activity in clrprof, not by symbol:
        // compared below as a whole.
        let runtime = d == "libcoreclr.so" || d == "libclrjit.so" || d == "[kernel]" || d.contains("libclrprof_agent");
        if runtime || sym.starts_with("stub ") || sym.starts_with("0x") || sym.starts_with("[unknown]") {
            continue;
        }
        *perf.entry(common_name(sym)).or_default() += pct;
    }

    let cpu = hotspots(&trace, "cpu");
    let profiler = cpu.get("[profiler]").map_or(0.0, |r| r.1);
    let total: f64 = cpu.values().map(|r| r.0).sum::<f64>() - profiler;
    let mut ours: HashMap<String, f64> = HashMap::new();
    for (name, (self_ms, _)) in &cpu {
        if name != "[profiler]" && !name.contains("libclrprof_agent") {
            *ours.entry(common_name(name)).or_default() += 100.0 * self_ms / total;
        }
    }
    // Each side's share of a function is a sampled estimate: the two may differ by their sampling
    // errors. clrprof's CPU timers fire at the kernel's tick (250 Hz here, whatever the rate asked),
    // perf's hrtimer at 999 Hz; a 16% share of 700 samples alone has a standard error of 1.4 points.
    // A row fails when it differs by more than 3 points and by more than 3.5 standard errors of the
    // difference.
    let our_samples = num(&report_json(&trace)["sampling"], "total_samples");
    let perf_n = perf_samples as f64 * (perf_total / 100.0);
    assert!(our_samples >= 300.0 && perf_n >= 300.0, "too few samples to judge: {our_samples} and {perf_n}");
    let allowed = |a: f64, b: f64| {
        let p = (a + b) / 200.0;
        let se = (p * (1.0 - p) * (1.0 / our_samples + 1.0 / perf_n)).sqrt() * 100.0;
        3.0f64.max(3.5 * se)
    };
    let mut top: Vec<(&String, &f64)> = perf.iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
    let mut table = String::new();
    let mut worst: Option<(f64, f64)> = None;
    for (name, p) in top.iter().take(10) {
        let o = ours.get(*name).copied().unwrap_or(0.0);
        let limit = allowed(**p, o);
        table += &format!("{p:6.2} {o:6.2}  (±{limit:.2})  {name}\n");
        if (o - **p).abs() > limit {
            worst = Some(((o - **p).abs(), limit));
        }
    }
    eprintln!(
        "self CPU %, perf ({perf_n:.0} samples) vs clrprof ({our_samples:.0}), the profiler's own time left out:\n{table}"
    );
    if let Some((d, limit)) = worst {
        panic!("a top-10 function's share differs by {d:.2} points (more than {limit:.2}):\n{table}");
    }
    // The compilations' time: the JIT's library runs only inside compilations, so the `[JIT] M`
    // labels hold at least perf's time there; they name native code only (the JIT and the
    // runtime's work for it), so at most perf's time in native code.
    let labelled: f64 = ours.iter().filter(|(n, _)| n.starts_with("[JIT]")).map(|(_, s)| s).sum();
    eprintln!("[JIT] labels {labelled:.2}% of CPU; perf: libclrjit.so {jit_share:.2}%, native code {native_share:.2}%");
    assert!(
        labelled >= jit_share - 2.5 && labelled <= native_share + 2.5,
        "[JIT] labels hold {labelled:.2}% of the CPU; perf puts {jit_share:.2}% in libclrjit.so and \
         {native_share:.2}% in native code"
    );
}
