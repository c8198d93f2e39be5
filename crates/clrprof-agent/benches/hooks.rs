//! Micro-benchmark of the enter/leave hooks in isolation (no runtime): the cost of one
//! enter+leave pair with timing and counts-only, next to a bare `rdtsc` — the Rust hook bodies
//! alone, and the stubs the runtime gets (the fast paths) called as JIT-compiled code calls
//! them. Run with `cargo bench -p clrprof-agent --bench hooks`.

use std::time::Instant;

use clrprof_agent::bench::{pair_cost_ns, rdtsc_cost_ns, stub_pair_cost_ns, thread_cpu_ns};

fn main() {
    let n = 5_000_000;
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    // Per round: rdtsc, Rust timing, Rust counts, stub timing, stub counts, rdtsc-only stubs,
    // empty stubs, stubs that only count.
    let mut cols: [Vec<f64>; 8] = Default::default();
    for round in 0..rounds {
        let t = Instant::now();
        let rdtsc = rdtsc_cost_ns(n);
        let timing = pair_cost_ns(n, true);
        let counts = pair_cost_ns(n, false);
        let stub_timing = stub_pair_cost_ns(n, true);
        let stub_counts = stub_pair_cost_ns(n, false);
        let floor = rdtsc_stub_pair_ns(n);
        let empty = floor_pair_ns(n, false);
        let count = floor_pair_ns(n, true);
        for (c, v) in cols.iter_mut().zip([rdtsc, timing, counts, stub_timing, stub_counts, floor, empty, count]) {
            c.push(v);
        }
        println!(
            "round {round}: rdtsc {rdtsc:.1} ns; enter+leave pair: Rust bodies: timing {timing:.1} ns, counts-only \
             {counts:.1} ns; stubs: timing {stub_timing:.1} ns, counts-only {stub_counts:.1} ns, rdtsc-only {floor:.1} ns, \
             empty {empty:.1} ns, one count {count:.1} ns ({:.1} s)",
            t.elapsed().as_secs_f64()
        );
    }
    let m: Vec<f64> = cols.iter_mut().map(|c| median(c)).collect();
    println!(
        "median of {rounds} (thread CPU time): rdtsc {:.1} ns; Rust bodies: timing {:.1} ns, counts-only {:.1} ns; \
         stubs: timing {:.1} ns, counts-only {:.1} ns, rdtsc-only {:.1} ns; floors of counts-only: empty stubs {:.1} ns, \
         stubs that only count {:.1} ns",
        m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]
    );
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let k = v.len();
    if k == 0 {
        0.0
    } else if k % 2 == 1 {
        v[k / 2]
    } else {
        (v[k / 2 - 1] + v[k / 2]) / 2.0
    }
}

/// The floor for a timing hook pair: stubs that only read the TSC, keeping the registers the
/// contract needs (enter: rdx; leave: rax, rdx), called as the real stubs are.
#[unsafe(naked)]
unsafe extern "C" fn enter_rdtsc_only() {
    core::arch::naked_asm!("push rdx", "rdtsc", "pop rdx", "ret");
}

#[unsafe(naked)]
unsafe extern "C" fn leave_rdtsc_only() {
    core::arch::naked_asm!("mov r10, rax", "mov r11, rdx", "rdtsc", "mov rax, r10", "mov rdx, r11", "ret");
}

fn rdtsc_stub_pair_ns(n: u64) -> f64 {
    let t0 = thread_cpu_ns();
    for _ in 0..n {
        // Safety: the two stubs above clobber only rax, r10, r11 (enter) and r10, r11 (leave).
        unsafe {
            core::arch::asm!(
                "call {e}",
                "call {l}",
                e = sym enter_rdtsc_only,
                l = sym leave_rdtsc_only,
                clobber_abi("C"),
            );
        }
    }
    (thread_cpu_ns() - t0) as f64 / n as f64
}

/// The floors of a counts-only pair: stubs that return at once, and stubs of which the enter
/// only adds one to a counter in memory (no thread state, no call tree).
#[unsafe(naked)]
unsafe extern "C" fn stub_empty() {
    core::arch::naked_asm!("ret");
}

static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[unsafe(naked)]
unsafe extern "C" fn enter_count_only() {
    core::arch::naked_asm!("add qword ptr [rip + {c}], 1", "ret", c = sym COUNT);
}

fn floor_pair_ns(n: u64, count: bool) -> f64 {
    let t0 = thread_cpu_ns();
    for _ in 0..n {
        // Safety: the stubs above touch no register (the count only its static).
        unsafe {
            if count {
                core::arch::asm!("call {e}", "call {l}", e = sym enter_count_only, l = sym stub_empty, clobber_abi("C"));
            } else {
                core::arch::asm!("call {e}", "call {l}", e = sym stub_empty, l = sym stub_empty, clobber_abi("C"));
            }
        }
    }
    let ns = (thread_cpu_ns() - t0) as f64 / n as f64;
    assert!(!count || COUNT.load(std::sync::atomic::Ordering::Relaxed) >= n);
    ns
}
