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

// Counts-only fast paths (no timing, no flow): the common enter (the callee is the most recently
// used child of the caller's node and no frame was unwound) and the common leave (the top entry is
// this frame) are done here with only the registers the contract lets the hook clobber — enter:
// rax, r10, r11; leave/tailcall: rcx, r8, r9 — and no call. Anything else jumps to the full stubs
// above with every register untouched.

#[unsafe(naked)]
pub unsafe extern "C" fn enter_counts_stub() {
    core::arch::naked_asm!(
        "mov rax, qword ptr [rip + clrprof_elt_current@GOTTPOFF]",
        "mov rax, qword ptr fs:[rax]",
        "test rax, rax",
        "jz 2f",
        "cmp byte ptr [rax + {fast}], 0",
        "je 2f",
        "mov r10, qword ptr [rax + {len}]",
        "cmp r10, qword ptr [rax + {cap}]",
        "jae 2f",
        "shl r10, 4",
        "add r10, qword ptr [rax + {ptr}]",
        // An entry at or below this frame's SP was unwound: the full path cleans up.
        "cmp r15, qword ptr [r10 - 8]",
        "jae 2f",
        "mov r11, qword ptr [r10 - 16]",
        "mov r11, qword ptr [r11 + {first_child}]",
        "test r11, r11",
        "jz 2f",
        "cmp r14, qword ptr [r11 + {func}]",
        "jne 2f",
        "inc qword ptr [r11 + {calls}]",
        "mov qword ptr [r10], r11",
        "mov qword ptr [r10 + 8], r15",
        "inc qword ptr [rax + {len}]",
        "ret",
        "2:",
        "jmp {slow}",
        fast = const super::thread::layout::FAST,
        len = const super::thread::layout::STACK_LEN,
        cap = const super::thread::layout::STACK_CAP,
        ptr = const super::thread::layout::STACK_PTR,
        first_child = const super::thread::layout::NODE_FIRST_CHILD,
        func = const super::thread::layout::NODE_FUNC,
        calls = const super::thread::layout::NODE_CALLS,
        slow = sym enter_stub,
    );
}

macro_rules! leave_counts_stub {
    ($name:ident, $slow:ident) => {
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                "mov rcx, qword ptr [rip + clrprof_elt_current@GOTTPOFF]",
                "mov rcx, qword ptr fs:[rcx]",
                "test rcx, rcx",
                "jz 2f",
                "cmp byte ptr [rcx + {fast}], 0",
                "je 2f",
                "mov r8, qword ptr [rcx + {len}]",
                "cmp r8, 1",
                "jbe 2f",
                "shl r8, 4",
                "add r8, qword ptr [rcx + {ptr}]",
                "cmp rsi, qword ptr [r8 - 8]",
                "jne 2f",
                "mov r9, qword ptr [r8 - 16]",
                "cmp rdi, qword ptr [r9 + {func}]",
                "jne 2f",
                "dec qword ptr [rcx + {len}]",
                "ret",
                "2:",
                "jmp {slow}",
                fast = const super::thread::layout::FAST,
                len = const super::thread::layout::STACK_LEN,
                ptr = const super::thread::layout::STACK_PTR,
                func = const super::thread::layout::NODE_FUNC,
                slow = sym $slow,
            );
        }
    };
}

leave_counts_stub!(leave_counts_stub, leave_stub);
leave_counts_stub!(tailcall_counts_stub, tailcall_stub);
