//! Continuous-profiling push cost: a recorded trace fed to the Pyroscope pusher's per-run state
//! (`RunPusher`) in 64 KB pieces (the intake cost: decoding the bytes as they arrive), then every
//! interval's profiles built, encoded and compressed as the collector pushes them (the HTTP post
//! itself is not timed). The whole run is in the builder when each interval is built: the cost of
//! an interval at the end of a run this long (a live run's earlier intervals cost less).
//!
//!   cargo bench -p clrprof-pyroscope --bench push -- TRACE [INTERVAL_S=10]
//!
//! `--long MINUTES [keep]`: a run of MINUTES minutes made of the trace's samples and events
//! repeated every 10 s (one repetition per 10 s interval, the trace's names and definitions once),
//! pushed window by window as the collector does: the build cost of the window at 1, 10, 30 and 60
//! minutes (…) into the run, the records the run's builder retains when the window is built, and
//! the process's RSS. `keep`: a pusher that keeps
//! the whole run (what the collector did before it forgot pushed windows).
//!
//!   cargo bench -p clrprof-pyroscope --bench push -- --long 60 TRACE [keep]

use std::time::Instant;

use clrprof_pyroscope::RunPusher;
use clrprof_trace::Record;

#[path = "../crates/clrprof-pyroscope/tests/support/mod.rs"]
mod support;
use support::{replay_skips, shift};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    if args.first().map(String::as_str) == Some("--long") {
        let minutes: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(60);
        let Some(path) = args.get(2) else {
            eprintln!("usage: push --long MINUTES TRACE [keep]");
            std::process::exit(2);
        };
        long(path, minutes, args.get(3).map(String::as_str) == Some("keep"));
        return;
    }
    let Some(path) = args.first() else {
        eprintln!("usage: push TRACE [INTERVAL_S=10]");
        std::process::exit(2);
    };
    let interval_s: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10);
    let bytes = std::fs::read(path).unwrap_or_else(|e| {
        eprintln!("cannot read {path}: {e}");
        std::process::exit(1)
    });
    // The run's length, from a one-shot read.
    let mut whole = RunPusher::new();
    whole.feed(&bytes);
    let end_ns = whole.window(0, u64::MAX).iter().map(|p| p.until_unix_ns - p.from_unix_ns).max().unwrap_or(0);
    drop(whole);
    let step = interval_s * 1_000_000_000;
    let windows = end_ns.div_ceil(step).max(1);
    println!(
        "trace {path}: {:.1} MB, {:.1} s, {windows} intervals of {interval_s} s",
        bytes.len() as f64 / 1e6,
        end_ns as f64 / 1e9
    );
    println!("{:>8} {:>12} {:>8} {:>12}", "interval", "build ms", "pushes", "gzip KB");
    let mut r = RunPusher::new();
    let t = Instant::now();
    for piece in bytes.chunks(64 * 1024) {
        r.feed(piece);
    }
    let intake_total = t.elapsed().as_secs_f64() * 1e3;
    let (mut build_total, mut build_max, mut size_total) = (0f64, 0f64, 0usize);
    for k in 0..windows {
        let t = Instant::now();
        let until = if k + 1 == windows { u64::MAX } else { (k + 1) * step };
        let pushes = r.window(k * step, until);
        let build = t.elapsed().as_secs_f64() * 1e3;
        let size: usize = pushes.iter().map(|p| p.body.len()).sum();
        println!("{k:>8} {build:>12.1} {:>8} {:>12.1}", pushes.len(), size as f64 / 1024.0);
        build_total += build;
        build_max = build_max.max(build);
        size_total += size;
    }
    println!(
        "total: intake {intake_total:.0} ms, build {build_total:.0} ms (mean {:.1} ms, max {build_max:.1} ms per interval), {:.1} KB pushed",
        build_total / windows as f64,
        size_total as f64 / 1024.0
    );
}

fn rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = s.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok());
    kb.unwrap_or(0u64) as f64 / 1024.0
}

fn long(path: &str, minutes: u64, keep: bool) {
    const PERIOD: u64 = 10_000_000_000;
    let file = std::fs::File::open(path).unwrap_or_else(|e| {
        eprintln!("cannot read {path}: {e}");
        std::process::exit(1)
    });
    let (records, _) = clrprof_trace::read_all(std::io::BufReader::new(file)).expect("a readable trace");
    let (mut head, mut events, mut start) = (Vec::new(), Vec::new(), 0);
    for mut r in records {
        if let Record::ProcessStart(s) = &r {
            start = s.start_unix_ns;
        }
        if replay_skips(&r) {
            continue;
        }
        if shift(&mut r, 0) {
            events.push(r);
        } else {
            head.push(r);
        }
    }
    let span = events.iter().filter_map(record_ts).max().unwrap_or(0) + 1;
    let mut r = if keep { RunPusher::keeping_everything() } else { RunPusher::new() };
    r.feed(&clrprof_trace::header());
    r.feed(&clrprof_trace::encode_records(head.iter()));
    let windows = minutes * 6;
    println!(
        "trace {path}: {} events repeated every 10 s ({} s of them squeezed into each), {minutes} min, {}",
        events.len(),
        span as f64 / 1e9,
        if keep { "keeping the whole run (before)" } else { "forgetting pushed windows (after)" }
    );
    println!("{:>8} {:>10} {:>10} {:>8}", "minute", "build ms", "retained", "RSS MB");
    let marks = [1, 10, 30, 60, 120, 240, 480, 720, 1440];
    let mut total = 0f64;
    for k in 0..windows {
        let base = k * PERIOD;
        let rep: Vec<Record> = events
            .iter()
            .cloned()
            .map(|mut x| {
                // Spread over the interval whatever the trace's length.
                if let Some(ts) = record_ts(&x) {
                    let at = base + ((ts as u128 * (PERIOD - 1) as u128) / span as u128) as u64;
                    shift(&mut x, at - ts);
                }
                x
            })
            .collect();
        for chunk in rep.chunks(4096) {
            r.feed(&clrprof_trace::encode_records(chunk.iter()));
        }
        let retained = r.retained();
        let t = Instant::now();
        let pushes = r.due(start + base + PERIOD + 1, 1);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        total += ms;
        std::hint::black_box(pushes);
        let minute = (k + 1) / 6;
        if (k + 1) % 6 == 0 && marks.contains(&minute) {
            println!("{minute:>8} {ms:>10.2} {retained:>10} {:>8.1}", rss_mb());
        }
    }
    println!("mean build {:.2} ms per window over {windows} windows", total / windows as f64);
}

fn record_ts(r: &Record) -> Option<u64> {
    use Record as R;
    Some(match r {
        R::CpuSample(x) => x.ts,
        R::WallSample(x) => x.ts,
        R::ExceptionThrown(x) => x.ts,
        R::ExceptionPhase(x) => x.ts,
        R::ExceptionCaught(x) => x.ts,
        R::GcStarted(x) => x.ts,
        R::GcFinished(x) => x.ts,
        R::GcInfo(x) => x.ts,
        R::RuntimeSuspended(x) => x.ts,
        R::RuntimeResumed(x) => x.ts,
        R::AllocationCounts(x) => x.ts,
        R::AllocationSample(x) => x.ts,
        R::ContentionStarted(x) => x.ts,
        R::ContentionEnded(x) => x.ts,
        R::ContentionCounts(x) => x.ts,
        R::CallTreeDelta(x) => x.ts,
        R::CallTreeCosts(x) => x.ts,
        _ => return None,
    })
}
