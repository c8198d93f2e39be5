//! Counts the records of a trace by type, with the bytes each type takes (record header included),
//! largest first: what a trace's size is made of. Given an earlier copy of the same trace (taken
//! while it was being written), counts only what was written since (bench/web.sh uses both).
//!
//!   cargo run --release -p clrprof-trace --example trace_stats -- TRACE [TOP] [EARLIER_COPY]

use std::collections::HashMap;
use std::io::Write;

type Stats = HashMap<&'static str, (i64, i64)>;

fn stats(path: &str) -> Stats {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("trace_stats: {path}: {e}");
            std::process::exit(1);
        }
    };
    let mut d = match clrprof_trace::Decoder::new(std::io::BufReader::new(file)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("trace_stats: {path}: {e}");
            std::process::exit(1);
        }
    };
    let mut by = Stats::new();
    let mut buf = Vec::new();
    loop {
        match d.next_record() {
            Ok(Some(r)) => {
                buf.clear();
                r.encode(&mut buf);
                let e = by.entry(r.name()).or_default();
                e.0 += 1;
                e.1 += buf.len() as i64;
            }
            Ok(None) => break,
            Err(e) => {
                eprintln!("trace_stats: {path}: {e}");
                break;
            }
        }
    }
    by
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: trace_stats TRACE [TOP] [EARLIER_COPY]");
        std::process::exit(2);
    };
    let top: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(usize::MAX);
    let mut by = stats(path);
    if let Some(earlier) = args.get(3) {
        for (name, (n, bytes)) in stats(earlier) {
            let e = by.entry(name).or_default();
            e.0 -= n;
            e.1 -= bytes;
        }
        by.retain(|_, v| v.0 != 0 || v.1 != 0);
    }
    let total: i64 = by.values().map(|v| v.1).sum();
    let mut rows: Vec<_> = by.into_iter().collect();
    rows.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0.cmp(b.0)));
    let mut out = format!("{:<24} {:>10} {:>12} {:>6}\n", "record", "count", "bytes", "share");
    for (name, (n, bytes)) in rows.into_iter().take(top) {
        let share = 100.0 * bytes as f64 / total.max(1) as f64;
        out.push_str(&format!("{name:<24} {n:>10} {bytes:>12} {share:>5.1}%\n"));
    }
    out.push_str(&format!("{:<24} {:>10} {:>12}\n", "total (records)", "", total));
    let _ = std::io::stdout().write_all(out.as_bytes());
}
