//! The hooks' clock: the TSC when the CPU says it is constant and non-stop (read with plain
//! `rdtsc`, ~10 ns here), else CLOCK_MONOTONIC. Converted to nanoseconds off the hot path from
//! two (tsc, monotonic) readings.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static USE_TSC: AtomicBool = AtomicBool::new(false);
static BASE_TICKS: AtomicU64 = AtomicU64::new(0);
static BASE_NS: AtomicU64 = AtomicU64::new(0);

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: clock_gettime writes into a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Current time in ticks (TSC cycles, or ns).
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    // Unit tests drive the hooks (Rust and assembly alike) with a scripted clock.
    #[cfg(all(test, target_arch = "x86_64"))]
    if let Some(t) = fake_ticks() {
        return t;
    }
    #[cfg(target_arch = "x86_64")]
    if USE_TSC.load(Ordering::Relaxed) {
        // Safety: rdtsc is available on every x86_64 CPU.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    monotonic_ns()
}

/// Whether `ticks()` reads the TSC (plain `rdtsc`, as the timing fast stubs do).
pub(crate) fn is_tsc() -> bool {
    USE_TSC.load(Ordering::Relaxed)
}

/// Chooses the source (`/proc/cpuinfo` flags) and takes the base reading.
pub(crate) fn init() -> &'static str {
    let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let tsc =
        flags.split_whitespace().any(|f| f == "constant_tsc") && flags.split_whitespace().any(|f| f == "nonstop_tsc");
    USE_TSC.store(tsc, Ordering::Relaxed);
    BASE_NS.store(monotonic_ns(), Ordering::Relaxed);
    BASE_TICKS.store(ticks(), Ordering::Relaxed);
    if tsc {
        "tsc"
    } else {
        "clock_gettime"
    }
}

/// Nanoseconds per tick, measured from the base reading to now (exact 1.0 without the TSC).
pub(crate) fn ns_per_tick() -> f64 {
    if !USE_TSC.load(Ordering::Relaxed) {
        return 1.0;
    }
    let (t0, n0) = (BASE_TICKS.load(Ordering::Relaxed), BASE_NS.load(Ordering::Relaxed));
    let (mut t1, mut n1) = (ticks(), monotonic_ns());
    if n1.saturating_sub(n0) < 1_000_000 {
        std::thread::sleep(std::time::Duration::from_millis(2));
        t1 = ticks();
        n1 = monotonic_ns();
    }
    let dt = t1.saturating_sub(t0);
    if dt == 0 {
        return 1.0;
    }
    n1.saturating_sub(n0) as f64 / dt as f64
}

// Unit tests: a second TLS slot holding a scripted clock (0 = not scripted), read by
// `clock::ticks()` and, in place of `rdtsc`, by copies of the timing stubs.
#[cfg(test)]
core::arch::global_asm!(
    ".section .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl clrprof_elt_fake_clock",
    ".hidden clrprof_elt_fake_clock",
    ".type clrprof_elt_fake_clock, @object",
    ".size clrprof_elt_fake_clock, 8",
    "clrprof_elt_fake_clock:",
    ".zero 8",
    ".text",
);

/// The calling thread's scripted clock, if set.
#[cfg(test)]
#[inline(never)]
pub(crate) fn fake_ticks() -> Option<u64> {
    let t: u64;
    // Safety: reads our own TLS slot of the calling thread.
    unsafe {
        core::arch::asm!(
            "mov {t}, qword ptr [rip + clrprof_elt_fake_clock@GOTTPOFF]",
            "mov {t}, qword ptr fs:[{t}]",
            t = out(reg) t,
            options(nostack, readonly),
        );
    }
    (t != 0).then_some(t)
}

/// Sets the calling thread's scripted clock (0 = back to the real one).
#[cfg(test)]
#[inline(never)]
pub(crate) fn set_fake_ticks(t: u64) {
    // Safety: writes our own TLS slot of the calling thread.
    unsafe {
        core::arch::asm!(
            "mov {tmp}, qword ptr [rip + clrprof_elt_fake_clock@GOTTPOFF]",
            "mov qword ptr fs:[{tmp}], {val}",
            tmp = out(reg) _,
            val = in(reg) t,
            options(nostack),
        );
    }
}
