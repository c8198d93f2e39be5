//! End to end: the sampler on real .NET programs (apps/Sampling) — CPU shares, blocked time,
//! native frames, per-thread CPU time against the kernel's, and bad input.

use crate::common::*;

use serde_json::Value;

fn function<'a>(v: &'a Value, name: &str) -> &'a Value {
    find(v, "functions", name)
}

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

fn record_ok(dir: &std::path::Path, name: &str, args: &[&str], extra: &[&str]) -> (std::path::PathBuf, String) {
    let trace = dir.join(format!("{name}.clrprof"));
    let out = record("Sampling", args, &trace, extra);
    assert!(out.status.success(), "record failed: {}{}", text(&out.stdout), text(&out.stderr));
    (trace, text(&out.stdout))
}

#[test]
fn cpu_shares_follow_a_known_ratio_and_match_the_kernel() {
    let _machine = machine::alone();
    let dir = scratch("sampling-ratio");
    let (trace, stdout) = record_ok(&dir, "ratio", &["ratio", "3000"], &[]);
    let v = report_json(&trace);
    let heavy = function(&v, "Sampling.Ratio.Heavy");
    let light = function(&v, "Sampling.Ratio.Light");
    let (h, l) = (u(heavy, "cpu_total_ns") as f64, u(light, "cpu_total_ns") as f64);
    let samples = u(heavy, "samples_total") + u(light, "samples_total");
    assert!(samples >= 150, "enough samples for a share: {samples}");
    let share = h / (h + l);
    assert!((0.65..=0.85).contains(&share), "Heavy has {share:.3} of Heavy+Light CPU, expected 0.75 ± 0.10");
    // Unit does all the work, as self time.
    let unit = function(&v, "Sampling.Ratio.Unit");
    assert!(u(unit, "samples_self") * 10 >= samples * 9, "Unit is the leaf of the work: {unit}");

    // Sample count ≈ rate × CPU seconds (CPU weight), and the CPU time the profiler measured
    // for the main thread matches the kernel's (`/proc/self/task/<tid>/stat`, printed by the app).
    let s = &v["sampling"];
    assert_eq!(u(s, "rate_hz"), 100);
    let expected = u(s, "cpu_ns") as f64 / 1e9 * 100.0;
    let got = u(s, "total_samples") as f64;
    assert!((got - expected).abs() <= expected * 0.15, "{got} samples for {expected:.0} expected at 100 Hz");
    let tid = printed(&stdout, "main_tid");
    let kernel_ms = printed(&stdout, "main_cpu_ms") as f64;
    let main = s["threads"].as_array().unwrap().iter().find(|t| t["os_tid"] == tid).expect("main thread sampled");
    let measured_ms = u(main, "cpu_ns") as f64 / 1e6;
    assert!(
        (measured_ms - kernel_ms).abs() <= kernel_ms * 0.10,
        "main thread CPU: profiler {measured_ms:.0} ms, kernel {kernel_ms:.0} ms"
    );
}

/// The main thread's profile of a `sleep` run: its functions only (`--thread`).
fn main_thread_json(trace: &std::path::Path, stdout: &str) -> Value {
    let tid = printed(stdout, "main_tid").to_string();
    let out = report(trace, &["--format", "json", "--weight", "wall", "--thread", &tid]);
    assert!(out.status.success(), "report failed: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("report JSON parses")
}

/// Checks the `sleep` mode's profile: Spinner has the CPU time and its own wall time, the 500 ms
/// sleep is 500 ms ± 5 % of wall time on `Thread.Sleep` and `Sleeper`, not on the spinning code.
fn check_sleep_and_spin(trace: &std::path::Path, stdout: &str) {
    let v = main_thread_json(trace, stdout);
    let sleeper = function(&v, "Sampling.Sleepy.Sleeper");
    let spinner = function(&v, "Sampling.Sleepy.Spinner");
    let (sleep_cpu, spin_cpu) = (u(sleeper, "cpu_total_ns"), u(spinner, "cpu_total_ns"));
    assert!(u(spinner, "samples_total") >= 40, "spinner sampled: {spinner}");
    assert!(sleep_cpu * 10 < spin_cpu, "sleeper CPU {sleep_cpu} ns vs spinner {spin_cpu} ns");
    assert!(u(sleeper, "wall_samples_total") >= 10, "sleeper has wall samples: {sleeper}");
    let measured_sleep = printed(stdout, "sleep_wall_us") * 1000;
    for f in ["Sampling.Sleepy.Sleeper", "System.Threading.Thread.Sleep"] {
        let wall = u(function(&v, f), "wall_total_ns");
        assert!(
            (475_000_000..=525_000_000).contains(&wall),
            "{f}: {:.1} ms of wall time for a 500 ms sleep (measured {:.1} ms)",
            wall as f64 / 1e6,
            measured_sleep as f64 / 1e6
        );
    }
    // 800 ms of CPU: at least that long in wall time (longer when the machine is busy), and no
    // more than the spinning took (the sleep after it is not the spinner's).
    let spin_wall = u(spinner, "wall_total_ns");
    let measured_spin = printed(stdout, "spin_wall_us") * 1000;
    assert!(spin_wall >= 700_000_000, "spinner wall time {spin_wall} ns for 800 ms of CPU");
    assert!(
        spin_wall as f64 <= measured_spin as f64 * 1.05,
        "spinner wall time {:.1} ms, measured {:.1} ms",
        spin_wall as f64 / 1e6,
        measured_spin as f64 / 1e6
    );
    assert!(spin_cpu >= 650_000_000, "spinner CPU time {spin_cpu} ns for 800 ms");
}

#[test]
fn a_sleeping_function_has_no_cpu_time_but_wall_time() {
    let _machine = machine::alone();
    let dir = scratch("sampling-sleep");
    let (trace, stdout) = record_ok(&dir, "sleep", &["sleep"], &[]);
    check_sleep_and_spin(&trace, &stdout);

    // The reports say which weight they show.
    let out = report(&trace, &["--view", "modules", "--weight", "wall"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("weight: wall time"), "{}", text(&out.stdout));
    let out = report(&trace, &["--view", "modules"]);
    assert!(text(&out.stdout).contains("weight: CPU time"), "{}", text(&out.stdout));
}

/// A thread that wakes every 15 ms makes the sampler suspend the runtime for a walk about every
/// 100 ms (the limit), so the sleeping thread's walk usually waits: its blocked time must still go
/// to the sleep, not to the code it ran before.
#[test]
fn a_sleep_keeps_its_wall_time_while_other_threads_wake_often() {
    let _machine = machine::alone();
    let dir = scratch("sampling-sleep-heartbeat");
    let (trace, stdout) = record_ok(&dir, "sleep", &["sleep", "heartbeat"], &[]);
    check_sleep_and_spin(&trace, &stdout);
}

/// Wall time adds up: each thread's total is its lifetime (created → destroyed in the thread
/// table), and the blocked part is on the blocking call, for four ways of blocking.
#[test]
fn each_thread_s_wall_time_is_its_lifetime_and_blocking_calls_get_their_time() {
    let _machine = machine::alone();
    let dir = scratch("sampling-blocking");
    let (trace, stdout) = record_ok(&dir, "blocking", &["blocking"], &[]);
    let out = report(&trace, &["--format", "json", "--weight", "wall"]);
    assert!(out.status.success(), "report failed: {}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sampled = v["sampling"]["threads"].as_array().unwrap();
    for name in ["heartbeat", "block-sleep", "block-monitor", "block-event", "block-task"] {
        let t = find(&v, "threads", name);
        let life = u(t, "destroyed_ns") - u(t, "created_ns");
        let s = sampled.iter().find(|s| s["os_tid"] == t["os_tid"]).unwrap_or_else(|| panic!("{name} sampled"));
        let wall = u(s, "wall_ns");
        assert!(
            (wall as f64 - life as f64).abs() <= life as f64 * 0.05,
            "{name}: {:.1} ms of wall time for a lifetime of {:.1} ms",
            wall as f64 / 1e6,
            life as f64 / 1e6
        );
    }
    for (way, function_name) in [
        ("sleep", "Sampling.Blocking.OnSleep"),
        ("monitor", "Sampling.Blocking.OnMonitor"),
        ("event", "Sampling.Blocking.OnEvent"),
        ("task", "Sampling.Blocking.OnTask"),
    ] {
        let measured = printed(&stdout, &format!("blocked_{way}_us")) as f64 * 1000.0;
        let out = report(&trace, &["--format", "json", "--weight", "wall", "--thread", &format!("block-{way}")]);
        assert!(out.status.success(), "report failed: {}", text(&out.stderr));
        let t: Value = serde_json::from_slice(&out.stdout).unwrap();
        let wall = u(function(&t, function_name), "wall_total_ns") as f64;
        assert!(
            (wall - measured).abs() <= measured * 0.05,
            "{function_name}: {:.1} ms of wall time for {:.1} ms blocked",
            wall / 1e6,
            measured / 1e6
        );
    }
}

#[test]
fn native_time_is_attributed_to_library_and_symbol() {
    let _machine = machine::alone();
    let dir = scratch("sampling-pinvoke");
    let (trace, stdout) = record_ok(&dir, "pinvoke", &["pinvoke", "1500"], &[]);
    let out = report(&trace, &["--view", "modules"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(t.contains("Total samples recorded: "), "{t}");
    assert!(t.contains("Module") && t.contains("Hits") && t.contains("Percent") && t.contains("Routine"), "{t}");
    let zline = t.lines().find(|l| l.trim_start().starts_with("libz.so.1")).unwrap_or_else(|| panic!("{t}"));
    let pct: f64 = zline.split_whitespace().nth(2).unwrap().trim_end_matches('%').parse().unwrap();
    assert!(pct >= 50.0, "libz has most of the CPU: {zline}");
    assert!(t.lines().any(|l| l.contains("libz.so.1") && l.trim_end().ends_with("adler32_z")), "{t}");

    let v = report_json(&trace);
    let top = &v["sampling"]["routines"][0];
    let name = top["name"].as_str().unwrap();
    assert!(name.starts_with("libz.so.1") && name.ends_with("!adler32_z"), "hottest routine: {top}");
    assert!(top["address"].as_u64().is_some(), "named routines have an address: {top}");
    let module =
        v["sampling"]["modules"].as_array().unwrap().iter().find(|m| m["name"].as_str().unwrap().starts_with("libz"));
    assert!(u(module.unwrap(), "samples") > 0);
    // Optimized zlib keeps no frame pointer (RBP is a scratch register in adler32): its samples
    // are walked by its unwind rules, so its time is charged to the managed method that calls it
    // (all but the samples taken before its library's mapping is read, a tick after its load).
    let libz_ns = u(module.unwrap(), "cpu_ns");
    let checksum = u(find(&v, "functions", "Sampling.NativeWork.Checksum"), "cpu_total_ns");
    assert!(
        checksum as f64 >= libz_ns as f64 * 0.9,
        "NativeWork.Checksum has {checksum} ns of CPU, libz {libz_ns} ns under it and elsewhere"
    );

    // One thread: the main thread holds the native work; an unknown thread is an error.
    let tid = printed(&stdout, "main_tid").to_string();
    let out = report(&trace, &["--view", "modules", "--thread", &tid]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("adler32_z"));
    let out = report(&trace, &["--view", "modules", "--thread", "no-such-thread"]);
    assert_eq!(out.status.code(), Some(2));

    // The agent records each mapped file's GNU build-id; libz's is the file's own.
    let (records, _) = clrprof_trace::read_all(std::fs::File::open(&trace).unwrap()).unwrap();
    let mappings: Vec<clrprof_trace::NativeMapping> = records
        .iter()
        .filter_map(|r| match r {
            clrprof_trace::Record::NativeMapping(m) => Some(m.clone()),
            _ => None,
        })
        .collect();
    for lib in ["/libc.so.6", "/libcoreclr.so", "/libz.so.1"] {
        // The mapped file is the link's target (`libz.so.1.2.13`).
        let m = mappings.iter().find(|m| m.path.contains(lib)).unwrap_or_else(|| panic!("no mapping of {lib}"));
        assert!(!m.build_id.is_empty(), "{lib} has a build-id: {m:?}");
        assert!(mappings.iter().filter(|n| n.path == m.path).all(|n| n.build_id == m.build_id), "{lib}");
    }
    let z = mappings.iter().find(|m| m.path.contains("/libz.so.1")).unwrap();
    let zname = z.path.rsplit('/').next().unwrap();
    let readelf = std::process::Command::new("readelf").args(["-n", &z.path]).output();
    if let Ok(out) = readelf {
        let notes = text(&out.stdout);
        if let Some(want) = notes.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")) {
            let got: String = z.build_id.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(got, want.trim());
        }
    }
    let out = report(&trace, &[]);
    assert!(!text(&out.stdout).contains("build-id"), "{}", text(&out.stdout));

    // The same trace with another build of libz recorded (a trace from another machine): libz's
    // frames stay unnamed, and the report says why.
    let other: Vec<clrprof_trace::Record> = records
        .into_iter()
        .map(|r| match r {
            clrprof_trace::Record::NativeMapping(mut m) if m.path == z.path => {
                m.build_id[0] ^= 0xff;
                m.into()
            }
            r => r,
        })
        .collect();
    let mut bytes = clrprof_trace::header().to_vec();
    bytes.extend(clrprof_trace::encode_records(other.iter()));
    let moved = dir.join("other-machine.clrprof");
    std::fs::write(&moved, bytes).unwrap();
    let out = report(&moved, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    let note = format!(
        "note: {zname}: {} has another build-id than the recorded one (upgraded, or another machine) and no debug \
         file matches build-id ",
        z.path
    );
    assert!(t.contains(&note) && t.contains(&format!("; its frames show as {zname}!<unknown>")), "{t}");
    assert!(t.contains(&format!("{zname}!<unknown>")) && !t.contains("adler32_z"), "{t}");
}

/// The unwind rules of native libraries are read from their files once and kept in the cache
/// directory (`CLRPROF_CACHE_DIR`, by build id): the next process reads every one of them from
/// there, and walks native code with them as well (libz's time still reaches its managed caller).
#[test]
fn unwind_rules_are_read_once_and_then_from_the_cache() {
    let _machine = machine::alone();
    let dir = scratch("sampling-cfi-cache");
    let cache = dir.join("cache");
    let run = |n: u32| -> (u64, u64, u64, u64) {
        let trace = dir.join(format!("cached-{n}.clrprof"));
        let log = dir.join(format!("agent-{n}.log"));
        let out = std::process::Command::new(clrprof_exe())
            .args(["record", "--agent"])
            .arg(agent_path())
            .arg("-o")
            .arg(&trace)
            .arg("--log")
            .arg(&log)
            .args(["--", "dotnet"])
            .arg(app_dll("Sampling"))
            .args(["pinvoke", "1000"])
            .env("CLRPROF_CACHE_DIR", &cache)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
        let log = std::fs::read_to_string(&log).unwrap();
        let line = log
            .lines()
            .find(|l| l.contains("unwind rules of") && l.contains("from the cache"))
            .unwrap_or_else(|| panic!("no summary of the unwind rules read in the log:\n{log}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |w: &str| -> u64 {
            let i = words.iter().position(|x| *x == w).unwrap_or_else(|| panic!("{line}"));
            words[i + 1].parse().unwrap_or_else(|_| panic!("{line}"))
        };
        let v = report_json(&trace);
        let libz = v["sampling"]["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"].as_str().unwrap().starts_with("libz"));
        let libz_ns = u(libz.expect("libz sampled"), "cpu_ns");
        let checksum = u(find(&v, "functions", "Sampling.NativeWork.Checksum"), "cpu_total_ns");
        // Words: "... rules of P files read from their .eh_frame and C from the cache ...".
        (after("of"), after("and"), libz_ns, checksum)
    };
    let (parsed, cached, libz_ns, checksum) = run(1);
    assert_eq!(cached, 0, "a new cache directory holds nothing");
    assert!(parsed >= 3, "{parsed} files read: libc, the runtime, libz at least");
    let files = std::fs::read_dir(cache.join("unwind-3")).unwrap().count() as u64;
    assert!(files >= 3 && files <= parsed, "{files} files cached of {parsed} read");
    assert!(checksum as f64 >= libz_ns as f64 * 0.9, "run 1: Checksum {checksum} ns, libz {libz_ns} ns");

    let (parsed2, cached2, libz_ns, checksum) = run(2);
    assert_eq!(cached2, files, "every cached file is read from the cache");
    assert_eq!(parsed2 + cached2, parsed, "the same files, the rest read again (no build id)");
    assert!(checksum as f64 >= libz_ns as f64 * 0.9, "run 2: Checksum {checksum} ns, libz {libz_ns} ns");
}

#[test]
fn one_kilohertz_reports_the_rate_delivered() {
    let _machine = machine::alone();
    let dir = scratch("sampling-1khz");
    let (trace, _) = record_ok(&dir, "fast", &["ratio", "1000"], &["--rate", "1000"]);
    let v = report_json(&trace);
    let s = &v["sampling"];
    assert_eq!(u(s, "rate_hz"), 1000);
    let eff = s["effective_cpu_rate_hz"].as_f64().unwrap();
    // Per-thread CPU timers fire at most once per kernel tick (CONFIG_HZ, 100–1000).
    assert!((90.0..=1050.0).contains(&eff), "effective rate {eff}");
    let out = report(&trace, &["--view", "modules"]);
    assert!(text(&out.stdout).contains("1000 Hz requested"), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("Hz delivered"));
}

#[test]
fn hundreds_of_threads_are_sampled_without_harm() {
    let _machine = machine::alone();
    let dir = scratch("sampling-threads");
    let (trace, stdout) = record_ok(&dir, "threads", &["threads", "300", "30"], &[]);
    assert!(stdout.contains("threads=300"), "{stdout}");
    let v = report_json(&trace);
    let s = &v["sampling"];
    let with_wall = s["threads"].as_array().unwrap().iter().filter(|t| u(t, "wall_samples") > 0).count();
    // A wall tick looks at up to 64 threads (round robin), so a short-lived thread can end before
    // its second look; nearly all of them are sampled.
    assert!(with_wall >= 270, "{with_wall} threads with wall samples");
    assert_eq!(u(s, "timer_failures"), 0);
    let spin = function(&v, "Sampling.Many.Spin");
    assert!(u(spin, "wall_samples_total") > 0);
}

#[test]
fn sampling_can_be_turned_off_and_short_runs_are_fine() {
    let _machine = machine::shared();
    let dir = scratch("sampling-off");
    let (trace, _) = record_ok(&dir, "off", &["ratio", "300"], &["--no-sample"]);
    let v = report_json(&trace);
    assert_eq!(v["sampling"]["enabled"], false);
    assert_eq!(u(&v["sampling"], "total_samples"), 0);
    let out = report(&trace, &["--view", "modules"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("no samples"), "{}", text(&out.stdout));

    // A target that exits at once, at a high rate: a readable trace and report.
    let (trace, stdout) = record_ok(&dir, "quick", &["quick"], &["--rate", "1000"]);
    assert!(stdout.contains("done quick"));
    let v = report_json(&trace);
    assert_eq!(u(&v["sampling"], "rate_hz"), 1000);
    let out = report(&trace, &["--view", "modules"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn absurd_rates_are_refused_with_a_clear_message() {
    let _machine = machine::shared();
    let dir = scratch("sampling-bad");
    for rate in ["0", "20000", "-5", "fast"] {
        let out = record("Sampling", &["quick"], &dir.join("bad.clrprof"), &["--rate", rate]);
        assert_eq!(out.status.code(), Some(2), "--rate {rate}");
        let err = text(&out.stderr);
        assert!(err.contains("--rate"), "--rate {rate}: {err}");
        assert!(!dir.join("bad.clrprof").exists(), "nothing ran for --rate {rate}");
    }
}

/// Checks a speedscope document against the rules of speedscope's file-format schema
/// (`FileFormat.File` with sampled profiles), plus the consistency the schema cannot express.
fn check_speedscope(v: &Value) {
    assert_eq!(v["$schema"], "https://www.speedscope.app/file-format-schema.json");
    let frames = v["shared"]["frames"].as_array().expect("shared.frames is an array");
    for f in frames {
        assert!(f["name"].is_string(), "frame needs a name: {f}");
        assert!(f.get("file").is_none_or(|x| x.is_string()), "file is a string: {f}");
        for k in ["line", "col"] {
            assert!(f.get(k).is_none_or(|x| x.is_number()), "{k} is a number: {f}");
        }
    }
    assert!(v.get("name").is_none_or(|x| x.is_string()));
    assert!(v.get("activeProfileIndex").is_none_or(|x| x.is_number()));
    assert!(v.get("exporter").is_none_or(|x| x.is_string()));
    let profiles = v["profiles"].as_array().expect("profiles is an array");
    assert!(!profiles.is_empty());
    for p in profiles {
        assert_eq!(p["type"], "sampled");
        assert!(p["name"].is_string());
        let unit = p["unit"].as_str().unwrap();
        assert!(["bytes", "microseconds", "milliseconds", "nanoseconds", "none", "seconds"].contains(&unit));
        assert!(p["startValue"].is_number() && p["endValue"].is_number());
        let samples = p["samples"].as_array().unwrap();
        let weights = p["weights"].as_array().unwrap();
        assert_eq!(samples.len(), weights.len());
        for s in samples {
            for i in s.as_array().unwrap() {
                assert!((i.as_u64().unwrap() as usize) < frames.len(), "frame index in range");
            }
        }
        let total: u64 = weights.iter().map(|w| w.as_u64().unwrap()).sum();
        assert_eq!(p["endValue"].as_u64().unwrap() - p["startValue"].as_u64().unwrap(), total);
    }
}

#[test]
fn exports_parse_and_agree_with_the_report() {
    let _machine = machine::shared();
    let dir = scratch("sampling-export");
    let (trace, _) = record_ok(&dir, "ratio", &["ratio", "800"], &[]);
    let v = report_json(&trace);
    let total = u(&v["sampling"], "total_samples");
    let heavy = u(function(&v, "Sampling.Ratio.Heavy"), "samples_total");
    assert!(heavy > 0);

    // Folded stacks: every sample once; a function's lines add up to its inclusive samples; the
    // text round-trips through a parse.
    let folded = dir.join("cpu.folded");
    let out = export(&trace, &["-f", "collapsed", "-o", folded.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = std::fs::read_to_string(&folded).unwrap();
    let mut parsed: Vec<(Vec<String>, u64)> = Vec::new();
    for line in t.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad line {line:?}"));
        parsed.push((stack.split(';').map(String::from).collect(), n.parse().unwrap()));
    }
    assert_eq!(parsed.iter().map(|p| p.1).sum::<u64>(), total);
    let with_heavy: u64 = parsed.iter().filter(|p| p.0.iter().any(|f| f == "Sampling.Ratio.Heavy")).map(|p| p.1).sum();
    assert_eq!(with_heavy, heavy);
    let again: String = parsed.iter().map(|(s, n)| format!("{} {n}\n", s.join(";"))).collect();
    assert_eq!(again, t);
    // Standard output works too.
    let out = export(&trace, &["-f", "collapsed", "-o", "-"]);
    assert_eq!(text(&out.stdout), t);

    // speedscope: schema rules; the merged profile holds all CPU time; one profile per thread.
    let ss = dir.join("cpu.speedscope.json");
    let out = export(&trace, &["-f", "speedscope", "-o", ss.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&std::fs::read(&ss).unwrap()).unwrap();
    check_speedscope(&doc);
    assert_eq!(doc["profiles"][0]["endValue"].as_u64().unwrap(), u(&v["sampling"], "cpu_ns"));
    let sampled_threads =
        v["sampling"]["threads"].as_array().unwrap().iter().filter(|t| u(t, "cpu_samples") > 0).count();
    assert_eq!(doc["profiles"].as_array().unwrap().len(), 1 + sampled_threads);
    let out = export(&trace, &["-f", "speedscope", "--weight", "wall", "-o", "-"]);
    let wall: Value = serde_json::from_slice(&out.stdout).unwrap();
    check_speedscope(&wall);
    assert!(wall["name"].as_str().unwrap().contains("wall time"));

    // Flame graphs: well-formed enough to open, with the app's frames.
    for (fmt, head) in [("svg", "<?xml"), ("html", "<!DOCTYPE html>")] {
        let f = dir.join(format!("cpu.{fmt}"));
        let out = export(&trace, &["-f", fmt, "-o", f.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let s = std::fs::read_to_string(&f).unwrap();
        assert!(s.starts_with(head), "{fmt}");
        assert!(s.contains("Sampling.Ratio.Heavy"), "{fmt}");
        assert_eq!(s.matches("<g ").count(), s.matches("</g>").count(), "{fmt}");
        assert_eq!(s.matches("<svg").count(), 1);
        assert!(s.contains("</svg>"));
    }

    // Nothing to export is an error, not an empty file.
    let (off, _) = record_ok(&dir, "off", &["quick"], &["--no-sample"]);
    let out = export(&off, &["-f", "svg", "--weight", "cpu", "-o", dir.join("none.svg").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("to export"), "{}", text(&out.stderr));
}

#[test]
fn a_leaf_stopped_in_its_prolog_keeps_its_caller() {
    let _machine = machine::alone();
    // Caller calls the tiny Leaf in a loop; Leaf sets up an RBP frame (`push rbp; sub rsp, 16;
    // lea rbp, [rsp+0x10]`), so about one sample in five stops after `push rbp` with RBP still
    // Caller's frame: a frame-pointer walk from there goes from Leaf straight to Run.
    let dir = scratch("sampling-prolog");
    let (trace, stdout) = record_ok(&dir, "prolog", &["prolog", "1500"], &["--rate", "1000"]);
    assert!(stdout.contains("prolog sum="), "{stdout}");
    for weight in ["cpu", "wall"] {
        // Leaf's time lies under Caller. One sample of about 270 (4 ms of 1,071) went to Run
        // once, in a full suite run on a loaded 2-CPU machine (2026-11-29; the cause is not
        // found, and 5 runs alone then had none): other callers may hold one sample's worth,
        // at most 0.5% of Leaf's time. Without the prolog's handling it is about a fifth.
        let (inclusive, found) = callers(&trace, "Sampling.Prolog.Leaf", weight);
        assert!(inclusive >= 150.0, "{weight}: Leaf has {inclusive} ms inclusive: {found:?}");
        let under_caller: f64 = found.iter().filter(|(n, _)| n == "Sampling.Prolog.Caller").map(|(_, ms)| ms).sum();
        assert!(under_caller >= inclusive * 0.995, "{weight}: callers of Sampling.Prolog.Leaf: {found:?}");
        only_caller(&trace, "Sampling.Prolog.Caller", "Sampling.Prolog.Run", weight, 600.0);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn stacks_through_on_stack_replacement_reach_the_real_callers() {
    let _machine = machine::alone();
    // Methods called once from Main whose loops move to OSR code mid-run (the tier-0 frame stays
    // under the OSR frame); one of them runs its callee from a catch funclet of its OSR code.
    let dir = scratch("sampling-osr");
    let (trace, _) = record_ok(&dir, "osr", &["osr"], &[]);
    let v = report_json(&trace);
    for f in ["Sampling.Osr.Spin", "Sampling.Osr.SpinThenSleep", "Sampling.Osr.Catch", "Sampling.Osr.SpinInCatch"] {
        // Tier 0, then the OSR version (called once: never rejitted at tier 1).
        assert!(u(function(&v, f), "compilations") >= 2, "{f} got an OSR version: {}", function(&v, f));
    }

    // CPU stacks (frame-pointer walks in the signal handler) and wall stacks (running threads take
    // their CPU stacks, blocked ones — the sleeps inside the OSR code and inside the catch funclet —
    // are walked by the runtime).
    osr_callers_are_exact(&trace);
    let (sleep_wall, _) = callers(&trace, "System.Threading.Thread.Sleep", "wall");
    assert!(sleep_wall >= 700.0, "the sleeps in OSR code and in the funclet: {sleep_wall} ms");

    // The OSR version is named as its method: most of Spin's CPU samples have their leaf in it.
    let (records, _) = clrprof_trace::read_all(std::fs::File::open(&trace).unwrap()).unwrap();
    let spin = u(function(&v, "Sampling.Osr.Spin"), "id");
    let tier0 = u(function(&v, "Sampling.Osr.Spin"), "code_start");
    let osr: Vec<(u64, u64)> = records
        .iter()
        .filter_map(|r| match r {
            clrprof_trace::Record::CodeRange(c) if c.id == spin && c.start != tier0 => {
                Some((c.start, c.start + c.size))
            }
            _ => None,
        })
        .collect();
    assert!(!osr.is_empty(), "a code range for Spin's OSR version");
    let mut stacks = std::collections::HashMap::new();
    let mut in_osr = 0;
    for r in &records {
        match r {
            clrprof_trace::Record::SampleStack(s) => {
                stacks.insert(s.id, s.clone());
            }
            clrprof_trace::Record::CpuSample(c) => {
                let s = &stacks[&c.stack];
                if s.ips.first().is_some_and(|ip| osr.iter().any(|&(a, b)| (a..b).contains(ip))) {
                    assert_eq!(s.functions.first(), Some(&spin), "the OSR code is Spin's: {s:?}");
                    in_osr += c.count;
                }
            }
            _ => {}
        }
    }
    assert!(in_osr as u64 * 2 >= u(function(&v, "Sampling.Osr.Spin"), "samples_self"), "{in_osr} samples in OSR code");
}

#[test]
fn frameless_methods_in_the_middle_of_a_stack_keep_their_callers() {
    let _machine = machine::alone();
    // At tier 1, Ratio.Light has no RBP frame (`push rax; call Unit`): a frame-pointer walk from
    // Unit's frame skips it to Run's frame, and Run went missing from Light's stacks.
    let dir = scratch("sampling-frameless");
    let (trace, _) = record_ok(&dir, "ratio", &["ratio", "3000"], &[]);
    let v = report_json(&trace);
    only_caller(&trace, "Sampling.Ratio.Light", "Sampling.Ratio.Run", "cpu", 300.0);
    only_caller(&trace, "Sampling.Ratio.Heavy", "Sampling.Ratio.Run", "cpu", 1000.0);
    let total = |f: &str| u(function(&v, f), "cpu_total_ns") as f64;
    let (run, heavy, light) =
        (total("Sampling.Ratio.Run"), total("Sampling.Ratio.Heavy"), total("Sampling.Ratio.Light"));
    assert!(run >= 0.95 * (heavy + light), "Run {run} ns of Heavy+Light {} ns", heavy + light);
}
