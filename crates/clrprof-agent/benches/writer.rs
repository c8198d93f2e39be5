//! Trace write throughput: threads emitting sample records as fast as they can through the agent's
//! writer to a file, in sampled mode (a full buffer drops) and in exact mode (a full buffer waits
//! for the writer), with the default 32 MiB buffers and with 256 KiB ones (where the writer cannot
//! keep up: sampled mode drops, exact mode waits). Prints records/s, MB/s written, records dropped
//! and the threads' waits. Run with `cargo bench -p clrprof-agent --bench writer`
//! (`THREADS`, `RECORDS` per thread, `ROUNDS`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clrprof_agent::bench::{Sink, Writer};
use clrprof_trace::CpuSample;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One run: (records/s, MB/s, dropped, waits, ms waited).
fn run(threads: u64, per_thread: u64, exact: bool, cap: usize) -> (f64, f64, u64, u64, u64) {
    let path = std::env::temp_dir().join(format!("clrprof-bench-writer-{}", std::process::id()));
    let w =
        Arc::new(Writer::new(Sink::File(std::fs::File::create(&path).unwrap()), Duration::from_millis(50)).unwrap());
    w.set_exact(exact);
    w.set_buffer_cap(cap);
    w.start().unwrap();
    let t0 = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let w = Arc::clone(&w);
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    let r = CpuSample {
                        ts: i,
                        os_tid: t as u32,
                        stack: (i % 1000) as u32,
                        count: 1,
                        cpu_ns: 10_000_000,
                        activity: 0,
                    };
                    w.emit(&r.into());
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    w.stop(|_| vec![]);
    let secs = t0.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    let n = (threads * per_thread) as f64;
    (
        n / secs,
        w.written_bytes.load(Ordering::Relaxed) as f64 / secs / 1e6,
        w.dropped_records.load(Ordering::Relaxed),
        w.waits.load(Ordering::Relaxed),
        w.waited_ns.load(Ordering::Relaxed) / 1_000_000,
    )
}

fn main() {
    let threads = env("THREADS", 4);
    let per_thread = env("RECORDS", 2_000_000);
    let rounds = env("ROUNDS", 5);
    let configs = [
        ("sampled, 32 MiB buffers", false, 32usize << 20),
        ("exact,   32 MiB buffers", true, 32 << 20),
        ("sampled, 256 KiB buffers", false, 256 << 10),
        ("exact,   256 KiB buffers", true, 256 << 10),
    ];
    let mut best = vec![(0f64, 0f64); configs.len()];
    for round in 0..rounds {
        for (k, (name, exact, cap)) in configs.iter().enumerate() {
            let (rps, mbps, dropped, waits, waited) = run(threads, per_thread, *exact, *cap);
            println!(
                "round {round}: {name}: {:.2} M records/s, {mbps:.0} MB/s written, {dropped} dropped, {waits} waits ({waited} ms)",
                rps / 1e6
            );
            best[k].0 = best[k].0.max(rps);
            best[k].1 = best[k].1.max(mbps);
        }
    }
    for ((name, _, _), (rps, mbps)) in configs.iter().zip(best) {
        println!("best of {rounds}: {name}: {:.2} M records/s, {mbps:.0} MB/s", rps / 1e6);
    }
}
