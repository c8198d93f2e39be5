//! Fast-path enter/leave/tailcall hooks for x86_64 System V (`SetEnterLeaveFunctionHooks3`).
//!
//! The JIT calls these directly from prologs and epilogs with its own register contract
//! (research notes §3.2): Enter gets the client id in r14 and the caller's SP in r15 and must
//! preserve every argument register (rdi, rsi, rdx, rcx, r8, r9, xmm0–7, at full 128-bit
//! width); Leave/Tailcall get the id in rdi and the SP in rsi and must preserve the return
//! registers rax, rdx, xmm0, xmm1. Each stub saves those, realigns the stack, calls a plain
//! Rust function, restores and returns.
//!
//! The calling thread's state pointer lives in one initial-exec TLS slot read with a single
//! `fs:`-relative load (no `__tls_get_addr` call on the hot path); the stubs pass it to the Rust
//! hook, which creates the state on the thread's first call.

// One 8-byte initial-exec TLS slot: the current thread's `ThreadState` (null until its first hook).
core::arch::global_asm!(
    ".section .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".local clrprof_elt_current",
    ".type clrprof_elt_current, @object",
    ".size clrprof_elt_current, 8",
    "clrprof_elt_current:",
    ".zero 8",
    ".text",
);

/// Stores the calling thread's state pointer in the TLS slot.
#[inline(never)]
pub fn set_current(p: *mut super::thread::ThreadState) {
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

#[unsafe(naked)]
pub unsafe extern "C" fn enter_stub() {
    core::arch::naked_asm!(
        "push rbp",
        "mov rbp, rsp",
        "sub rsp, 176",
        "and rsp, -16",
        "mov [rsp + 0], rdi",
        "mov [rsp + 8], rsi",
        "mov [rsp + 16], rdx",
        "mov [rsp + 24], rcx",
        "mov [rsp + 32], r8",
        "mov [rsp + 40], r9",
        "movdqu [rsp + 48], xmm0",
        "movdqu [rsp + 64], xmm1",
        "movdqu [rsp + 80], xmm2",
        "movdqu [rsp + 96], xmm3",
        "movdqu [rsp + 112], xmm4",
        "movdqu [rsp + 128], xmm5",
        "movdqu [rsp + 144], xmm6",
        "movdqu [rsp + 160], xmm7",
        "mov rax, qword ptr [rip + clrprof_elt_current@GOTTPOFF]",
        "mov rdi, qword ptr fs:[rax]",
        "mov rsi, r14",
        "mov rdx, r15",
        "call {enter}",
        "mov rdi, [rsp + 0]",
        "mov rsi, [rsp + 8]",
        "mov rdx, [rsp + 16]",
        "mov rcx, [rsp + 24]",
        "mov r8, [rsp + 32]",
        "mov r9, [rsp + 40]",
        "movdqu xmm0, [rsp + 48]",
        "movdqu xmm1, [rsp + 64]",
        "movdqu xmm2, [rsp + 80]",
        "movdqu xmm3, [rsp + 96]",
        "movdqu xmm4, [rsp + 112]",
        "movdqu xmm5, [rsp + 128]",
        "movdqu xmm6, [rsp + 144]",
        "movdqu xmm7, [rsp + 160]",
        "mov rsp, rbp",
        "pop rbp",
        "ret",
        enter = sym super::hook_enter,
    );
}

/// Leave and tailcall stubs share one shape: save the return registers, pass (state, id, SP) to
/// the Rust hook, restore.
macro_rules! leave_like_stub {
    ($name:ident, $hook:path) => {
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                "push rbp",
                "mov rbp, rsp",
                "sub rsp, 48",
                "and rsp, -16",
                "mov [rsp + 0], rax",
                "mov [rsp + 8], rdx",
                "movdqu [rsp + 16], xmm0",
                "movdqu [rsp + 32], xmm1",
                "mov rdx, rsi",
                "mov rsi, rdi",
                "mov rax, qword ptr [rip + clrprof_elt_current@GOTTPOFF]",
                "mov rdi, qword ptr fs:[rax]",
                "call {hook}",
                "mov rax, [rsp + 0]",
                "mov rdx, [rsp + 8]",
                "movdqu xmm0, [rsp + 16]",
                "movdqu xmm1, [rsp + 32]",
                "mov rsp, rbp",
                "pop rbp",
                "ret",
                hook = sym $hook,
            );
        }
    };
}

leave_like_stub!(leave_stub, super::hook_leave);
leave_like_stub!(tailcall_stub, super::hook_tailcall);
