//! End to end on every supported runtime: the representative checks of the other end-to-end tests
//! (exact instrumented call counts, sampled CPU and wall attribution, exact exception counts, GCs,
//! allocations and the runtime version in the trace) on apps published self-contained for .NET 8,
//! 9 and 10 (`common::app_for`) and run through their apphost. The rest of the suite runs on .NET 10.
//!
//! One module per runtime (`cargo test -p clrprof --test e2e runtimes::net8::`); every module runs the same checks.

use crate::common::*;

use serde_json::Value;
use std::path::{Path, PathBuf};

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// `key=value` from the app's stdout.
fn printed(stdout: &str, key: &str) -> u64 {
    stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{key}= not printed in {stdout:?}"))
}

/// Records `app args` on `runtime` into a fresh scratch directory; the run must succeed.
fn record_ok(runtime: &str, test: &str, app: &str, args: &[&str], extra: &[&str]) -> (PathBuf, String, String) {
    let dir = scratch(&format!("rt-{runtime}-{test}"));
    let trace = dir.join(format!("{test}.clrprof"));
    let out = record_on(runtime, app, args, &trace, extra);
    assert!(
        out.status.success(),
        "{runtime}: record {app} {args:?} failed: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    (trace, text(&out.stdout), text(&out.stderr))
}

/// The trace's header names the runtime the app ran on.
fn check_runtime(v: &Value, major: &str) {
    let version =
        v["process"]["runtime_version"].as_str().unwrap_or_else(|| panic!("no runtime_version: {}", v["process"]));
    assert!(version.starts_with(&format!("{major}.")), "runtime_version {version:?}, expected .NET {major}");
}

/// As `instrument.rs`: enter/leave hooks count every call exactly and preserve every register.
fn instrumented_calls(runtime: &str, major: &str) {
    let _machine = machine::shared();
    let (trace, stdout, _) = record_ok(runtime, "calls", "Calls", &[], &["--instrument"]);
    assert!(stdout.contains("args: 1340 4.5,3.75 15,1.5 7,8,9,3.5 42,1.5"), "{stdout}");
    let v = report_json_per_thread(&trace);
    check_runtime(&v, major);
    check_calls_app(&v);
}

/// As `count.rs`: IL probes count every call exactly with inlining on, in the app's own assembly
/// only (a self-contained app: its framework beside it is left out by name), and count the copies
/// of a tiny method the JIT inlines into a hot loop.
fn counted_calls(runtime: &str, major: &str) {
    let _machine = machine::shared();
    let (trace, stdout, _) = record_ok(runtime, "count", "Calls", &[], &["--count"]);
    assert!(stdout.contains("args: 1340 4.5,3.75 15,1.5 7,8,9,3.5 42,1.5"), "{stdout}");
    let v = report_json(&trace);
    check_runtime(&v, major);
    for (name, n) in [
        ("Calls.Recursion.Fib", 21891),
        ("Calls.Counted.Tick", 1000),
        ("Calls.Shared.Work", 10_000),
        ("Calls.Exceptions.Level1", 50),
        ("Calls.Exceptions.Level2", 50),
        ("Calls.Exceptions.Level3", 50),
        ("Calls.ProbeException.get_Depth", 50),
        ("Calls.Square.Area", 100),
        ("Calls.Shape.Describe", 200),
        ("Calls.Generic.Identity<T>", 200),
        ("Calls.AsyncWork.Step", 10),
        ("Calls.AsyncWork+<Step>d__1.MoveNext", 20),
    ] {
        assert_eq!(calls(&v, name), n, "{runtime}: {name}");
    }
    let counted: Vec<&Value> =
        v["functions"].as_array().unwrap().iter().filter(|f| f["calls"].as_u64().unwrap_or(0) > 0).collect();
    assert!(counted.iter().all(|f| f["module"].as_str().unwrap_or("").ends_with("Calls.dll")), "{runtime}: app scope");
    let (trace, stdout, log) = {
        let dir = scratch(&format!("rt-{runtime}-count-inline"));
        let (trace, log) = (dir.join("inline.clrprof"), dir.join("agent.log"));
        let out =
            record_on(runtime, "Calls", &["inline", "3000000"], &trace, &["--count", "--log", log.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        (trace, text(&out.stdout), std::fs::read_to_string(log).unwrap())
    };
    assert!(stdout.contains("inline: 4500000"));
    assert_eq!(calls(&report_json(&trace), "Calls.Inlined.Add"), 3_000_000, "{runtime}");
    assert!(log.contains("count: the JIT may inline counted method Calls.Inlined.Add"), "{runtime}: {log}");
}

/// The call tree of `weight` (of one thread, or of all) as printed by `report --view calltree`:
/// (depth, inclusive ms, exclusive ms, name) per node, in print order.
fn calltree(trace: &Path, weight: &str, thread: Option<&str>) -> (String, Vec<(usize, f64, f64, String)>) {
    let mut args = vec!["--view", "calltree", "--weight", weight, "--depth", "200", "--min-percent", "0"];
    if let Some(t) = thread {
        args.extend(["--thread", t]);
    }
    let out = report(trace, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    let col = t.lines().find_map(|l| l.find("FUNCTION")).unwrap_or_else(|| panic!("no call tree header:\n{t}"));
    let mut nodes = Vec::new();
    for l in t.lines().skip_while(|l| !l.contains("FUNCTION")).skip(1) {
        let Some(name) = l.get(col..) else { continue };
        let nums: Vec<f64> = l[..col].split_whitespace().filter_map(|w| w.parse().ok()).collect();
        if nums.len() != 4 {
            continue;
        }
        let depth = (name.len() - name.trim_start().len()) / 2;
        nodes.push((depth, nums[1], nums[2], name.trim().to_string()));
    }
    (t, nodes)
}

/// Samples of `weight` on thread `tid` whose stack does not reach the thread's entry (the root
/// above `Sampling.Program.Main`): stacks cut short, shown as other roots. Returns the
/// milliseconds of those cut at a libc leaf (a lone libc frame, or one under `UNKNOWN`), of all
/// of them, and the printed tree. Before the walk stepped through native code without frame pointers by its unwind
/// rules, samples in libc's system call wrappers (`__open`, which keeps its path in RBP) were cut
/// at the leaf, and on .NET 8, whose marshalled path lies on the stack, read that string as a
/// frame (`UNKNOWN → libc.so.6!__open`).
fn cut_short_ms(trace: &Path, weight: &str, tid: &str) -> (f64, f64, String) {
    let (t, nodes) = calltree(trace, weight, Some(tid));
    let mut root = None;
    let mut main_root = None;
    for (depth, _, _, name) in &nodes {
        if *depth == 0 {
            root = Some(name.clone());
        }
        if name == "Sampling.Program.Main" && main_root.is_none() {
            main_root = root.clone();
        }
    }
    let main_root = main_root.unwrap_or_else(|| panic!("no Sampling.Program.Main in the {weight} tree:\n{t}"));
    let (mut libc, mut all) = (0.0, 0.0);
    let mut root = "";
    for (depth, incl, excl, name) in &nodes {
        if *depth == 0 {
            root = name;
            if name != &main_root {
                all += incl;
            }
        }
        // The two shapes a libc leaf cut short had: alone, or under the frame read from RBP.
        let alone = *depth == 0 && name.starts_with("libc.so.6!");
        if alone || (root == "UNKNOWN" && name.starts_with("libc.so.6!")) {
            libc += excl;
        }
    }
    (libc, all, t)
}

/// No CPU sample of the main thread `tid` is cut at a libc leaf (see [`cut_short_ms`]). Samples
/// cut short elsewhere (inside the runtime: its transition stubs, see docs/stress.md) are only
/// reported.
fn assert_walked(trace: &Path, tid: &str) {
    let (libc, all, t) = cut_short_ms(trace, "cpu", tid);
    assert!(libc == 0.0, "cpu: {libc} ms of the main thread in stacks cut short at a libc leaf:\n{t}");
    if all > 0.0 {
        eprintln!("note: {all} ms of the main thread's CPU samples in stacks cut short elsewhere");
    }
}

/// Samples inside libc's system call wrappers (no frame pointers; `__open` keeps its path in
/// RBP) reach their managed callers through libSystem.Native: the /proc reading loop has its CPU
/// time, most of it in libc leaves under it, and no sample of the thread is cut short.
fn sampled_syscall_callers(runtime: &str, major: &str) {
    let _machine = machine::alone();
    let (trace, stdout, _) = record_ok(runtime, "syscalls", "Sampling", &["syscalls", "600"], &[]);
    check_runtime(&report_json(&trace), major);
    let tid = printed(&stdout, "main_tid").to_string();
    let used = printed(&stdout, "syscalls_cpu_ms") as f64;
    assert!(used >= 600.0, "{stdout}");
    assert_walked(&trace, &tid);
    let (t, nodes) = calltree(&trace, "cpu", Some(&tid));
    let mut path: Vec<String> = Vec::new();
    let (mut in_libc, mut loop_ms) = (0.0, 0.0);
    for (depth, incl, excl, name) in &nodes {
        path.truncate(*depth);
        if name == "Sampling.Syscalls.ReadProc" {
            assert_eq!(path.last().map(String::as_str), Some("Sampling.Syscalls.Run"), "{t}");
            loop_ms += incl;
        } else if name.starts_with("libc.so.6!") && path.iter().any(|p| p == "Sampling.Syscalls.ReadProc") {
            in_libc += excl;
        }
        path.push(name.clone());
    }
    // CPU weights are the thread's measured CPU time, shared among its samples.
    assert!(loop_ms >= used * 0.85, "ReadProc: {loop_ms} ms of CPU for {used} ms used:\n{t}");
    assert!(in_libc >= used * 0.3, "{in_libc} ms in libc leaves under ReadProc of {used} ms:\n{t}");
    only_caller(&trace, "Sampling.Syscalls.ReadProc", "Sampling.Syscalls.Run", "cpu", used * 0.85);
}

/// As `sampling.rs`: CPU and wall stacks through on-stack replacement reach the real callers.
fn sampled_osr_callers(runtime: &str, major: &str) {
    let _machine = machine::alone();
    let (trace, stdout, _) = record_ok(runtime, "osr", "Sampling", &["osr"], &[]);
    let v = report_json(&trace);
    check_runtime(&v, major);
    let tid = printed(&stdout, "main_tid").to_string();
    assert_walked(&trace, &tid);
    for f in ["Sampling.Osr.Spin", "Sampling.Osr.SpinThenSleep", "Sampling.Osr.Catch", "Sampling.Osr.SpinInCatch"] {
        let func = find(&v, "functions", f);
        assert!(u(func, "compilations") >= 2, "{f} got an OSR version: {func}");
    }
    osr_callers_are_exact(&trace);
}

/// As `sampling.rs`: a 500 ms sleep is 500 ms ± 5 % of wall time and no CPU time; the spinning
/// before it has the CPU time.
fn sampled_sleep_wall_time(runtime: &str, major: &str) {
    let _machine = machine::alone();
    let (trace, stdout, _) = record_ok(runtime, "sleep", "Sampling", &["sleep"], &[]);
    check_runtime(&report_json(&trace), major);
    let tid = printed(&stdout, "main_tid").to_string();
    let out = report(&trace, &["--format", "json", "--weight", "wall", "--thread", &tid]);
    assert!(out.status.success(), "report failed: {}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sleeper = find(&v, "functions", "Sampling.Sleepy.Sleeper");
    let spinner = find(&v, "functions", "Sampling.Sleepy.Spinner");
    let (sleep_cpu, spin_cpu) = (u(sleeper, "cpu_total_ns"), u(spinner, "cpu_total_ns"));
    assert!(u(spinner, "samples_total") >= 40, "spinner sampled: {spinner}");
    assert!(sleep_cpu * 10 < spin_cpu, "sleeper CPU {sleep_cpu} ns vs spinner {spin_cpu} ns");
    assert_walked(&trace, &tid);
    assert!(spin_cpu >= 650_000_000, "spinner CPU time {spin_cpu} ns for 800 ms");
    for f in ["Sampling.Sleepy.Sleeper", "System.Threading.Thread.Sleep"] {
        let wall = u(find(&v, "functions", f), "wall_total_ns");
        assert!(
            (475_000_000..=525_000_000).contains(&wall),
            "{f}: {:.1} ms of wall time for a 500 ms sleep (measured {:.1} ms)",
            wall as f64 / 1e6,
            printed(&stdout, "sleep_wall_us") as f64 / 1e3
        );
    }
}

/// As `events.rs`: every exception counted exactly, with its filter, finally, catch and frames.
fn exact_exceptions(runtime: &str, major: &str) {
    let _machine = machine::shared();
    const N: u64 = 40;
    let (trace, stdout, _) = record_ok(runtime, "exceptions", "Events", &["exceptions", &N.to_string()], &[]);
    assert_eq!(stdout, format!("thrown {N} caught {N} finally {N} filter {N}\n"));
    let v = report_json(&trace);
    check_runtime(&v, major);
    let g = check_boom_exceptions(&v, N);
    assert_eq!(g["sites"][0]["count"], 32, "stacks of the first 32 throws");
}

/// As `events.rs`: Newtonsoft.Json's exceptions, a third rethrown. .NET 8 raises the runtime's
/// `ExceptionThrown_V1` for rethrows too (flagged), .NET 9 and later only for new exceptions: either
/// way the runtime's count of new exceptions is 6,000 and the rows' new exceptions add up to it.
fn rethrows(runtime: &str, major: &str) {
    let _machine = machine::shared();
    let sum = |v: &Value, f: &str| v["exceptions"].as_array().unwrap().iter().map(|g| u(g, f)).sum::<u64>();
    let args = ["6000", "3"];
    let (trace, stdout, _) = record_ok(runtime, "rethrows-exact", "JsonErrors", &args, &["--exact-exceptions"]);
    let first_chance = stdout.split_whitespace().skip_while(|w| *w != "first-chance").nth(1);
    assert_eq!(first_chance, Some("8000"), "{stdout}");
    let v = report_json(&trace);
    check_runtime(&v, major);
    assert_eq!((sum(&v, "thrown"), sum(&v, "rethrown")), (8000, 2000));
    let (trace, _, _) = record_ok(runtime, "rethrows", "JsonErrors", &args, &[]);
    let v = report_json(&trace);
    let s = &v["exception_sampling"];
    assert_eq!((s["sampled"].as_bool(), s["runtime_total"].as_u64()), (Some(true), Some(6000)), "{s}");
    assert_eq!(sum(&v, "thrown") - sum(&v, "rethrown"), 6000);
    assert!(sum(&v, "rethrown").abs_diff(2000) <= 200, "{} rethrows", sum(&v, "rethrown"));
}

/// As `events.rs`: a leak's collections, background ones and those inside them included, each
/// listed once by the runtime's index and counted by generation as the runtime counts them.
fn leak_gcs(runtime: &str, major: &str) {
    let _machine = machine::shared();
    let (trace, stdout, _) = record_ok(runtime, "leak", "Leak", &["50000"], &[]);
    let w: Vec<&str> = stdout.split_whitespace().collect();
    let count = |k: &str| -> u64 { w[w.iter().position(|x| *x == k).unwrap() + 1].parse().unwrap() };
    let (c0, c1, c2) = (count("gc0"), count("gc1"), count("gc2"));
    let v = report_json(&trace);
    check_runtime(&v, major);
    let gcs = v["gcs"].as_array().unwrap();
    let by_gen = |g: u64| gcs.iter().filter(|x| x["generation"] == g).count() as u64;
    assert_eq!((by_gen(0), by_gen(1), by_gen(2)), (c0 - c1, c1 - c2, c2), "the runtime counted {stdout}");
    let mut idx: Vec<u64> = gcs.iter().map(|g| u(g, "index")).collect();
    idx.sort_unstable();
    assert_eq!(idx, (1..=c0).collect::<Vec<u64>>());
    assert!(gcs.iter().any(|g| g["background"] == true), "no background GC");
}

/// As `events.rs`: induced collections all seen; allocations counted exactly (`--alloc exact`) and
/// sampled by default (`AllocationSampled` on .NET 10, `GCAllocationTick` before: both estimate).
fn gc_and_allocations(runtime: &str, major: &str) {
    let _machine = machine::shared();
    const K: usize = 3;
    let (trace, _, _) = record_ok(runtime, "gc", "Events", &["gc", &K.to_string()], &[]);
    let v = report_json(&trace);
    check_runtime(&v, major);
    let gcs = v["gcs"].as_array().unwrap();
    let induced: Vec<&Value> = gcs.iter().filter(|g| g["reason"] == "induced").collect();
    assert!(induced.len() >= K, "{} induced of {} GCs", induced.len(), gcs.len());
    for g in &induced {
        assert_eq!(g["generation"], 2, "GC.Collect() collects everything");
        assert_eq!(g["finished"], true);
        assert!(u(g, "pause_ns") > 0, "a blocking GC suspends the runtime");
    }

    const M: u64 = 54_321;
    let (trace, _, stderr) =
        record_ok(runtime, "alloc-exact", "Events", &["alloc", &M.to_string()], &["--alloc", "exact"]);
    assert!(stderr.contains("slows every allocation"), "{stderr}");
    let v = report_json(&trace);
    let w = v["allocations"].as_array().unwrap().iter().find(|a| a["type"] == "EventsApp.Widget").expect("Widget");
    assert_eq!(w["count"], M);
    assert_eq!(w["bytes"], M * 24, "24 bytes per Widget on x64");
    assert_eq!(w["exact"], true);

    let (trace, _, _) = record_ok(runtime, "alloc-sampled", "Events", &["mix", "100"], &[]);
    let v = report_json(&trace);
    let allocs = v["allocations"].as_array().unwrap();
    let heavy = allocs.iter().find(|a| a["type"] == "EventsApp.HeavyNode").expect("HeavyNode sampled");
    let light = allocs.iter().find(|a| a["type"] == "EventsApp.LightNode").expect("LightNode sampled");
    assert_eq!(heavy["exact"], false);
    assert!(u(heavy, "samples") > 100, "{heavy}");
    assert_eq!(allocs[0]["type"], "EventsApp.HeavyNode", "the type with 90% of the bytes has the biggest estimate");
    assert!(u(heavy, "bytes") > 4 * u(light, "bytes"));
    let site = v["allocation_sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["type"] == "EventsApp.HeavyNode")
        .expect("a site for HeavyNode");
    assert_eq!(site["function"], "EventsApp.Program.AllocHeavy");
    // The samples' source: .NET 10's randomized `AllocationSampled` (0), or before .NET 10 (no such
    // event) `GCAllocationTick` (1), which also says how many bytes were allocated since the last tick.
    let (records, _) = clrprof_trace::read_all(std::fs::File::open(&trace).unwrap()).unwrap();
    // The agent writes them packed, one `AllocationSamples` per flush.
    let mut packed = 0;
    let mut all = Vec::new();
    let mut stacks = clrprof_trace::AllocationStacks::default();
    for r in &records {
        match r {
            clrprof_trace::Record::AllocationSample(a) => all.push(a.clone()),
            clrprof_trace::Record::AllocationStack(s) => stacks.define(s),
            clrprof_trace::Record::AllocationSamples(p) => {
                packed += 1;
                all.extend(p.unpack_with(&stacks).unwrap());
            }
            _ => {}
        }
    }
    let samples = all.len();
    for a in &all {
        if major == "10" {
            assert_eq!((a.source, a.amount), (0, 0), "{a:?}");
        } else {
            assert_eq!(a.source, 1, "{a:?}");
            assert!(a.amount > 0, "{a:?}");
        }
    }
    assert!(samples > 100, "{samples} allocation samples");
    assert!(packed > 0 && packed < samples, "{samples} samples in {packed} records");
}

/// As `allocations.rs`: CsvRead's strings placed at the user's code and estimated without bias
/// (from `GCAllocationTick` before .NET 10, `AllocationSampled` on it), and `--alloc exact`'s sites
/// with the exact count of a loop.
fn csv_allocations(runtime: &str, major: &str) {
    let _machine = machine::shared();
    let (trace, stdout, _) = record_ok(runtime, "csv", "CsvRead", &[csv::CSV_ROWS], &[]);
    check_runtime(&report_json(&trace), major);
    let estimator = if major == "10" { "allocation-sampled" } else { "allocation-tick" };
    csv::check_sampled_csv(&trace, &csv::figures(&stdout), estimator);
    let (trace, stdout, _) = record_ok(runtime, "csv-exact", "CsvRead", &[csv::CSV_ROWS], &["--alloc", "exact"]);
    csv::check_exact_csv(&trace, &csv::figures(&stdout));
}

/// As `sampling.rs`: JsonBench sampled and hooked at once; its sampled stacks follow the hooks'
/// call graph (frame layouts differ between the runtimes' JITs).
fn sampled_stacks_follow_calls(runtime: &str, major: &str) {
    let _machine = machine::alone();
    let (trace, _, _) = record_ok(runtime, "truth", "JsonBench", &["12"], &["--instrument", "--rate", "1000"]);
    check_runtime(&report_json(&trace), major);
    samples_follow_the_exact_call_graph(&trace);
}

macro_rules! runtime_matrix {
    ($module:ident, $tfm:literal, $major:literal) => {
        mod $module {
            #[test]
            fn instrumented_calls() {
                super::instrumented_calls($tfm, $major);
            }
            #[test]
            fn counted_calls() {
                super::counted_calls($tfm, $major);
            }
            #[test]
            fn sampled_osr_callers() {
                super::sampled_osr_callers($tfm, $major);
            }
            #[test]
            fn sampled_syscall_callers() {
                super::sampled_syscall_callers($tfm, $major);
            }
            #[test]
            fn sampled_sleep_wall_time() {
                super::sampled_sleep_wall_time($tfm, $major);
            }
            #[test]
            fn sampled_stacks_follow_calls() {
                super::sampled_stacks_follow_calls($tfm, $major);
            }
            #[test]
            fn exact_exceptions() {
                super::exact_exceptions($tfm, $major);
            }
            #[test]
            fn gc_and_allocations() {
                super::gc_and_allocations($tfm, $major);
            }
            #[test]
            fn csv_allocations() {
                super::csv_allocations($tfm, $major);
            }
            #[test]
            fn leak_gcs() {
                super::leak_gcs($tfm, $major);
            }
            #[test]
            fn rethrows() {
                super::rethrows($tfm, $major);
            }
        }
    };
}

runtime_matrix!(net8, "net8.0", "8");
runtime_matrix!(net9, "net9.0", "9");
runtime_matrix!(net10, "net10.0", "10");
