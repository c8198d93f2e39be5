//! Continuous-profiling push cost: a recorded trace fed to the Pyroscope pusher's per-run state
//! (`RunPusher`) in 64 KB pieces (the intake cost: decoding the bytes as they arrive), then every
//! interval's profiles built, encoded and compressed as the collector pushes them (the HTTP post
//! itself is not timed). The whole run is in the builder when each interval is built: the cost of
//! an interval at the end of a run this long (a live run's earlier intervals cost less).
//!
//!   cargo bench -p clrprof-pyroscope --bench push -- TRACE [INTERVAL_S=10]

use std::time::Instant;

use clrprof_pyroscope::RunPusher;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
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
