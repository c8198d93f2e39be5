//! Micro-benchmark of the enter/leave hooks in isolation (no runtime): the cost of one
//! enter+leave pair with timing and counts-only, next to a bare `rdtsc` — the Rust hook bodies
//! alone, and the stubs the runtime gets (the fast paths) called as JIT-compiled code calls
//! them. Run with `cargo bench -p clrprof-agent --bench hooks`.

use std::time::Instant;

use clrprof_agent::elt::bench_support::{pair_cost_ns, rdtsc_cost_ns, stub_pair_cost_ns};

fn main() {
    let n = 5_000_000;
    for round in 0..3 {
        let t = Instant::now();
        let rdtsc = rdtsc_cost_ns(n);
        let timing = pair_cost_ns(n, true);
        let counts = pair_cost_ns(n, false);
        let stub_timing = stub_pair_cost_ns(n, true);
        let stub_counts = stub_pair_cost_ns(n, false);
        println!(
            "round {round}: rdtsc {rdtsc:.1} ns; enter+leave pair: Rust bodies: timing {timing:.1} ns, counts-only \
             {counts:.1} ns; stubs: timing {stub_timing:.1} ns, counts-only {stub_counts:.1} ns ({:.1} s)",
            t.elapsed().as_secs_f64()
        );
    }
}
