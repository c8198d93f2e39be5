//! The calling thread's instrumentation state pointer: one initial-exec TLS slot read with a
//! single `fs:`-relative load (no `__tls_get_addr` call on the hot path). The fast stubs
//! (`super::stubs`) read it by its symbol; Rust code through [`current`] and [`set_current`].

use super::thread::ThreadState;

// One 8-byte initial-exec TLS slot: the current thread's `ThreadState` (null until its first hook).
// Global but hidden: visible to every codegen unit of this crate, not exported from the library.
core::arch::global_asm!(
    ".section .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl clrprof_elt_current",
    ".hidden clrprof_elt_current",
    ".type clrprof_elt_current, @object",
    ".size clrprof_elt_current, 8",
    "clrprof_elt_current:",
    ".zero 8",
    ".text",
);

/// The calling thread's state pointer from the TLS slot (null before its first hook).
#[inline(never)]
pub(crate) fn current() -> *mut ThreadState {
    let p: *mut ThreadState;
    // Safety: reads our own TLS slot of the calling thread.
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr [rip + clrprof_elt_current@GOTTPOFF]",
            "mov {p}, qword ptr fs:[{p}]",
            p = out(reg) p,
            options(nostack, readonly),
        );
    }
    p
}

/// Stores the calling thread's state pointer in the TLS slot.
#[inline(never)]
pub(crate) fn set_current(p: *mut ThreadState) {
    // Safety: writes our own TLS slot of the calling thread.
    unsafe {
        core::arch::asm!(
            "mov {tmp}, qword ptr [rip + clrprof_elt_current@GOTTPOFF]",
            "mov qword ptr fs:[{tmp}], {val}",
            tmp = out(reg) _,
            val = in(reg) p,
            options(nostack),
        );
    }
}
