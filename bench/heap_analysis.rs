//! Heap analysis at scale, measured: build the compact graph from a synthetic snapshot of N objects fed
//! as the capture feeds it (objects in address order, each followed by its references, type names, roots),
//! then the dominator tree and retained sizes, the types view, the merged dominator tree and the paths
//! to the most common type. Prints the time of each step and the peak resident memory of the build and
//! of the analysis (each peak measured on its own: the peak is reset between them).
//!
//! `cargo bench -p clrprof-heap --bench heap_analysis -- N [N…]` (default 1000000 10000000); each N runs
//! in a child process of its own so that one size's memory does not count in the next's.
//!
//! The synthetic heap's shape follows what .NET heaps look like: mostly tree-like ownership with
//! locality (an object's owner was allocated shortly before it), about 30% of objects referenced a
//! second time from elsewhere, 2% back references (cycles), arrays holding up to a few hundred items,
//! one long linked list (0.5% of the objects), a Zipf-like spread over 2,000 types, and roots of every
//! kind (statics, stack slots, handles) — about 1.4 references per object.

use std::time::Instant;

use clrprof_heap::views::{self, DomOptions, PathsOptions, TypeSort};
use clrprof_heap::{Analysis, RootKind, SnapshotBuilder, SnapshotInfo};

/// xorshift64*: deterministic, fast.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Peak resident set (VmHWM) in bytes.
fn peak_rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// CPU seconds (user + system) of this process so far.
fn cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Resets the peak resident set to the current one (Linux: clear_refs 5).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The synthetic snapshot: (address, type, size) per object and the references (from, to) as indexes.
/// (address, type, size) per object, references (from, to) as object indexes, roots (object, kind).
type Synthetic = (Vec<(u64, u64, u64)>, Vec<(u32, u32)>, Vec<(u32, RootKind)>);

fn generate(n: u64) -> Synthetic {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ n);
    let types = 2000u64;
    let mut objs = Vec::with_capacity(n as usize);
    let mut addr = 0x7f00_0000_0000u64;
    for i in 0..n {
        // Zipf-like: type t with weight ~ 1/(t+1).
        let u = (rng.below(1 << 20) as f64 + 1.0) / (1u64 << 20) as f64;
        let t = ((types as f64).powf(u) - 1.0) as u64 % types;
        let size = match rng.below(100) {
            0..=59 => 24 + 8 * rng.below(4),
            60..=89 => 32 + 2 * rng.below(64),
            90..=98 => 64 + 8 * rng.below(128),
            _ => 1024 + rng.below(64 * 1024),
        };
        objs.push((addr, t, size));
        addr += (size + 7) & !7;
        if i % 100_000 == 99_999 {
            addr += 1 << 20; // the next segment
        }
    }
    let mut edges: Vec<(u32, u32)> = Vec::with_capacity((n as f64 * 1.45) as usize);
    let mut roots: Vec<(u32, RootKind)> = Vec::new();
    let list_start = n / 2;
    let list_len = n / 200;
    for i in 1..n {
        if i > list_start && i < list_start + list_len {
            edges.push(((i - 1) as u32, i as u32)); // the long list
            continue;
        }
        // The owner: an object allocated shortly before (arrays own runs of items).
        let span = if rng.chance(10) { 300 } else { 8 };
        let back = 1 + rng.below(span);
        if i >= back && !rng.chance(1) {
            edges.push(((i - back) as u32, i as u32));
        } else {
            let kind = match rng.below(10) {
                0..=3 => RootKind::StaticField,
                4..=7 => RootKind::Stack,
                8 => RootKind::StrongHandle,
                _ => RootKind::PinnedHandle,
            };
            roots.push((i as u32, kind));
        }
        if rng.chance(30) {
            edges.push((rng.below(n) as u32, i as u32)); // shared
        }
        if rng.chance(2) && i > 10 {
            edges.push((i as u32, rng.below(i) as u32)); // back reference
        }
    }
    roots.push((0, RootKind::StaticField));
    edges.sort_unstable_by_key(|e| e.0);
    (objs, edges, roots)
}

fn run(n: u64) {
    let t0 = Instant::now();
    let (objs, edges, roots) = generate(n);
    let gen_s = t0.elapsed().as_secs_f64();
    let base = rss();
    reset_peak();
    let cb = cpu();

    // Build: objects in address order, each followed by its references, as the capture gives them.
    let t = Instant::now();
    let mut b = SnapshotBuilder::new();
    for ty in 0..2000u64 {
        b.type_name(ty, &format!("Synthetic.Namespace.Type{ty}<System.String>"));
    }
    let mut e = 0;
    for (i, &(addr, ty, size)) in objs.iter().enumerate() {
        b.object(addr, ty, size);
        while e < edges.len() && edges[e].0 as usize == i {
            b.edge(addr, objs[edges[e].1 as usize].0, None);
            e += 1;
        }
    }
    for (k, &(i, kind)) in roots.iter().enumerate() {
        let name =
            if kind == RootKind::StaticField { format!("Synthetic.Statics.Field{}", k % 5000) } else { String::new() };
        b.root(objs[i as usize].0, kind, &name);
    }
    let snap = b.finish(SnapshotInfo { complete: true, ..SnapshotInfo::default() });
    let build_s = t.elapsed().as_secs_f64();
    let build_cpu = cpu() - cb;
    let build_peak = peak_rss().saturating_sub(base);
    let graph_bytes = snap.graph_bytes();
    drop(objs);
    drop(edges);
    drop(roots);

    reset_peak();
    let base2 = rss();
    let c0 = cpu();
    let t = Instant::now();
    let a = Analysis::new(&snap);
    let dom_s = t.elapsed().as_secs_f64();
    let dom_cpu = cpu() - c0;
    let t = Instant::now();
    let rows = views::types(&a, TypeSort::Retained);
    let types_s = t.elapsed().as_secs_f64();
    let types_cpu = cpu() - c0 - dom_cpu;
    let t = Instant::now();
    let tree = views::dominator_tree(&a, &DomOptions::default());
    let tree_s = t.elapsed().as_secs_f64();
    let common = rows.iter().max_by_key(|r| r.count).map(|r| r.name.clone()).unwrap_or_default();
    let t = Instant::now();
    let p = views::paths(&a, &common, &PathsOptions { max_paths: 20 }).expect("type");
    let paths_s = t.elapsed().as_secs_f64();
    let analysis_peak = peak_rss().saturating_sub(base2);
    let analysis_cpu = cpu() - c0;
    let total = build_s + dom_s + types_s + tree_s + paths_s;
    println!(
        "objects {} references {} roots {} | build {:.2} s (peak +{} MB, graph {} MB = {:.1} B/object) | dominators+retained {:.2} s | types {:.2} s | dominator tree {:.2} s | paths to {} ({} instances, {} paths) {:.2} s | analysis peak +{} MB | total {:.2} s wall, CPU {:.2} s build + {:.2} s analysis (dominators+retained {:.2} s, types {:.2} s) (generation {:.1} s not counted) | unreachable {} | top node {} retained {}",
        snap.object_count(),
        snap.edge_count(),
        snap.roots().len(),
        build_s,
        build_peak >> 20,
        graph_bytes >> 20,
        graph_bytes as f64 / snap.object_count() as f64,
        dom_s,
        types_s,
        tree_s,
        common,
        p.instances,
        p.paths.len(),
        paths_s,
        analysis_peak >> 20,
        total,
        build_cpu,
        analysis_cpu,
        dom_cpu,
        types_cpu,
        gen_s,
        a.unreachable,
        tree.children.first().map(|c| c.type_name.as_str()).unwrap_or("-"),
        tree.children.first().map(|c| c.retained).unwrap_or(0),
    );
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    if let Ok(n) = std::env::var("HEAP_BENCH_ONE") {
        run(n.parse().expect("HEAP_BENCH_ONE=N"));
        return;
    }
    let sizes = if args.is_empty() { vec![1_000_000, 10_000_000] } else { args };
    let exe = std::env::current_exe().expect("current exe");
    for n in sizes {
        let st = std::process::Command::new(&exe).env("HEAP_BENCH_ONE", n.to_string()).status().expect("child");
        assert!(st.success(), "the run of {n} objects failed");
    }
}
