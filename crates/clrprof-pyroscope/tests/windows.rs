//! A run's profiles interval by interval, on the real traces checked into testdata/traces/v1:
//! the bytes arrive in uneven pieces, the clock is the test's, and every pushed body is read by an
//! independent decoder (`go tool pprof`, installed by scripts/bootstrap). The windows follow each
//! other without gap or overlap and add up exactly to the whole run.

use std::path::{Path, PathBuf};
use std::process::Command;

use clrprof_load::source::Loader;
use clrprof_model::{NoSymbols, TimeRange};
use clrprof_pyroscope::{Push, RunPusher};
use clrprof_trace::TraceSource;

fn trace(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../testdata/traces/v1/{name}.clrprof"))
}

/// `go tool pprof -top` of a body: the total of a sample type and the rows (flat, name).
fn go_top(dir: &Path, push: &Push, index: &str) -> (String, Vec<(String, String)>) {
    let f = dir.join("p.pb.gz");
    std::fs::write(&f, &push.body).unwrap();
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-nodecount=100", &format!("-sample_index={index}")])
        .arg(if ["wall", "cpu", "delay"].contains(&index) { "-unit=ns" } else { "-unit=minimum" })
        .arg(&f)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("`go` is needed to check pprof bodies: run scripts/bootstrap (it installs golang-go)");
    let t = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "go tool pprof failed on {}: {}", push.name, String::from_utf8_lossy(&out.stderr));
    let total = t
        .lines()
        .find_map(|l| l.strip_prefix("Showing nodes accounting for "))
        .map(|l| l.rsplit_once(" of ").unwrap().1.trim_end_matches(" total").to_string())
        .unwrap_or_default();
    let rows = t
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0].to_string(), w[5..].join(" "))
        })
        .collect();
    (total, rows)
}

/// Feeds a trace in uneven pieces, then pushes windows of `step` ns of trace time with the test's
/// clock, then the rest at the run's end.
fn windows(name: &str, step: u64) -> (Vec<Push>, clrprof_model::Profile) {
    let bytes = std::fs::read(trace(name)).unwrap();
    let mut r = RunPusher::new();
    let (mut at, mut n) = (0, 333);
    while at < bytes.len() {
        let end = (at + n).min(bytes.len());
        assert_eq!(r.feed(&bytes[at..end]), None);
        at = end;
        n = n * 2 + 7;
    }
    let whole = Loader::load(TraceSource::File(trace(name))).unwrap().0.profile(TimeRange::ALL, &mut NoSymbols);
    let start = whole.process.start_unix_ns;
    let mut pushes = Vec::new();
    let mut t = 0;
    while t < whole.process.duration_ns {
        t += step;
        // The clock is 1 s ahead of the window's end; the lag is 1 s.
        pushes.extend(r.due(start + t + 1_000_000_000, 1_000_000_000));
        assert_eq!(r.pushed_until(), t);
    }
    pushes.extend(r.finish());
    assert!(r.finish().is_empty(), "the end is pushed once");
    (pushes, whole)
}

fn of_kind<'a>(pushes: &'a [Push], kind: &str) -> Vec<&'a Push> {
    pushes.iter().filter(|p| p.name.split('{').next().unwrap().ends_with(&format!(".{kind}"))).collect()
}

#[test]
fn cpu_and_wall_windows_add_up_to_the_run() {
    let dir = std::env::temp_dir().join(format!("clrprof-pyro-windows-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pushes, whole) = windows("sampled", 100_000_000);
    let totals = clrprof_query::select::totals(&whole);
    let cpu = of_kind(&pushes, "cpu");
    assert!(cpu.len() >= 4, "a 637 ms run in 100 ms windows: {} cpu pushes", cpu.len());
    // Windows follow each other, labelled with the process.
    for w in cpu.windows(2) {
        assert!(
            w[0].until_unix_ns <= w[1].from_unix_ns,
            "{} .. {} then {}",
            w[0].from_unix_ns,
            w[0].until_unix_ns,
            w[1].from_unix_ns
        );
        assert_eq!((w[1].from_unix_ns - whole.process.start_unix_ns) % 100_000_000, 0);
    }
    let labels = format!(
        "{{service_name=Sampling,pid={},runtime_version={}}}",
        whole.process.pid, whole.process.runtime_version
    );
    assert_eq!(cpu[0].name, format!("Sampling.cpu{labels}"));
    // go tool pprof reads every body; the samples of the windows add up to the run's.
    let mut samples = 0u64;
    let mut spin = 0u64;
    for p in &cpu {
        let (total, rows) = go_top(&dir, p, "samples");
        samples += total.parse::<u64>().unwrap_or_else(|_| panic!("{total}"));
        spin += rows.iter().filter(|r| r.1 == "Sampling.Many.Spin").map(|r| r.0.parse::<u64>().unwrap()).sum::<u64>();
        assert!(p.samples > 0);
    }
    assert_eq!(samples, totals.cpu_samples, "cpu samples of the windows against the whole run");
    assert_eq!(spin, 56, "Sampling.Many.Spin's self samples, as the golden report says");
    let wall = of_kind(&pushes, "wall");
    assert!(!wall.is_empty());
    let mut wall_ns = 0;
    for p in &wall {
        let (total, _) = go_top(&dir, p, "wall");
        wall_ns += ns(&total);
    }
    assert_eq!(wall_ns, totals.wall_ns, "wall time of the windows against the whole run");
    let _ = std::fs::remove_dir_all(dir);
}

/// `602797000ns` as a number.
fn ns(s: &str) -> u64 {
    s.strip_suffix("ns").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("not ns: {s}"))
}

#[test]
fn exceptions_locks_and_allocations_are_pushed_under_their_own_names() {
    let dir = std::env::temp_dir().join(format!("clrprof-pyro-events-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // 40 exceptions thrown by EventsApp.Program.Thrower.
    let (pushes, _) = windows("exceptions", 50_000_000);
    let exc = of_kind(&pushes, "exceptions");
    assert!(!exc.is_empty());
    let mut n = 0;
    for p in &exc {
        let (total, rows) = go_top(&dir, p, "exceptions");
        n += total.parse::<u64>().unwrap();
        assert_eq!(rows[0].1, "EventsApp.Program.Thrower");
    }
    assert_eq!(n, 40);
    // 20 Monitor contentions, 602.797 ms waited.
    let (pushes, _) = windows("contention", 50_000_000);
    let lock = of_kind(&pushes, "lock");
    let (mut count, mut delay) = (0, 0);
    for p in &lock {
        count += go_top(&dir, p, "contentions").0.parse::<u64>().unwrap();
        delay += ns(&go_top(&dir, p, "delay").0);
    }
    assert_eq!(count, 20);
    assert_eq!(delay / 1000, 602_797, "{delay} ns waited");
    // Allocations: the windows add up to the run's sampled allocations (estimates scaled from
    // the sampled events and rounded per stack: each window's rows round on their own).
    let (pushes, whole) = windows("events", 50_000_000);
    let totals = clrprof_query::select::totals(&whole);
    let alloc = of_kind(&pushes, "alloc");
    assert!(!alloc.is_empty());
    let mut objects = 0;
    for p in &alloc {
        objects += go_top(&dir, p, "alloc_objects").0.parse::<u64>().unwrap();
    }
    let rows: usize = alloc.iter().map(|p| p.samples).sum();
    assert!(objects.abs_diff(totals.alloc_count) * 2 <= rows as u64, "{objects} against {}", totals.alloc_count);
    assert!(objects > 1_000_000, "{objects}");
    let _ = std::fs::remove_dir_all(dir);
}
