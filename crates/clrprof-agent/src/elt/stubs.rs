//! Fast-path enter/leave/tailcall hooks for x86_64 System V (`SetEnterLeaveFunctionHooks3`).
//!
//! The JIT calls these directly from prologs and epilogs with its own register contract:
//! Enter gets the client id in r14 and the caller's SP in r15 and must
//! preserve every argument register (rdi, rsi, rdx, rcx, r8, r9, xmm0–7, at full 128-bit
//! width); Leave/Tailcall get the id in rdi and the SP in rsi and must preserve the return
//! registers rax, rdx, xmm0, xmm1. The full stubs save those, realign the stack, call a plain
//! Rust function, restore and return. The fast stubs (counts only; timing with the TSC) handle
//! the common enter and leave in a few instructions without saving anything, and jump to the
//! full stubs, registers untouched, for everything else.
//!
//! The call site is the return address into the caller, the word just below the caller's SP
//! (`[r15 − 8]`: the JIT passes the SP the caller had before its `call`, `lvaToCallerSPRelativeOffset`),
//! read by both enter stubs: a call-tree node is a (function, call site) child of its caller.
//! Whoever calls an enter stub must pass a readable SP.
//!
//! The calling thread's state pointer lives in one initial-exec TLS slot (`super::tls`); the stubs
//! pass it to the Rust hook (`super::hooks`), which creates the state on the thread's first call.

#[unsafe(naked)]
pub(crate) unsafe extern "C" fn enter_stub() {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "push rbp",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_rel_offset rbp, 0",
        "mov rbp, rsp",
        ".cfi_def_cfa_register rbp",
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
        "mov rcx, qword ptr [r15 - 8]",
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
        ".cfi_def_cfa rsp, 8",
        ".cfi_restore rbp",
        "ret",
        ".cfi_endproc",
        enter = sym super::hooks::hook_enter,
    );
}

/// Leave and tailcall stubs share one shape: save the return registers, pass (state, id, SP) to
/// the Rust hook, restore.
macro_rules! leave_like_stub {
    ($name:ident, $hook:path) => {
        #[unsafe(naked)]
        pub(crate) unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "push rbp",
                ".cfi_adjust_cfa_offset 8",
                ".cfi_rel_offset rbp, 0",
                "mov rbp, rsp",
                ".cfi_def_cfa_register rbp",
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
                ".cfi_def_cfa rsp, 8",
                ".cfi_restore rbp",
                "ret",
                ".cfi_endproc",
                hook = sym $hook,
            );
        }
    };
}

leave_like_stub!(leave_stub, super::hooks::hook_leave);
leave_like_stub!(tailcall_stub, super::hooks::hook_tailcall);

/// The callee's child of the caller's node for this call site (enter stubs, after their checks;
/// rax = the thread's state, r10 = one past the top entry, r14 = the callee's `FuncInfo`, the call
/// site at `[r15 - 8]`): first the caller's callee cache (the child in the callee's slot, from bits
/// of r14, when it is the callee's from this site), then the caller's first `FAST_SEARCH` children
/// (r11 walks the sibling list), a find then cached. rcx holds the slot, then the call site, and is
/// saved on the stack meanwhile. Found: r11 = the child, at label 3 (backwards), rax still the
/// state. Not found (or no callee: the full stub ignores a null id): every register as on entry, at
/// the full stub.
macro_rules! callee_lookup {
    () => {
        concat!(
            "test r14, r14\n",
            "jz 2f\n",
            "push rcx\n",
            ".cfi_adjust_cfa_offset 8\n",
            "mov ecx, r14d\n",
            "shr ecx, {shift}\n",
            "and ecx, {mask}\n",
            "mov r11, qword ptr [r10 - 16]\n",
            "mov r11, qword ptr [r11 + rcx*8 + {cache}]\n",
            "mov rcx, qword ptr [r15 - 8]\n",
            "test r11, r11\n",
            "jz 4f\n",
            "cmp r14, qword ptr [r11 + {func}]\n",
            "jne 4f\n",
            "cmp rcx, qword ptr [r11 + {site}]\n",
            "jne 4f\n",
            "pop rcx\n",
            ".cfi_adjust_cfa_offset -8\n",
        )
    };
}

/// The rest of [`callee_lookup`], after the stub's commit code (labels 4–6; 2 = the full stub).
macro_rules! callee_lookup_tail {
    () => {
        concat!(
            // Reached with rcx pushed (the rules follow addresses, not jumps).
            "4:\n",
            ".cfi_adjust_cfa_offset 8\n",
            "mov r11, qword ptr [r10 - 16]\n",
            "mov r11, qword ptr [r11 + {first_child}]\n",
            ".rept {search}\n",
            "test r11, r11\n",
            "jz 5f\n",
            "cmp r14, qword ptr [r11 + {func}]\n",
            "jne 7f\n",
            "cmp rcx, qword ptr [r11 + {site}]\n",
            "je 6f\n",
            "7:\n",
            "mov r11, qword ptr [r11 + {next_sibling}]\n",
            ".endr\n",
            "5:\n",
            "pop rcx\n",
            ".cfi_adjust_cfa_offset -8\n",
            "2:\n",
            "jmp {slow}\n",
            // Found down the list: cached in the callee's slot (computed again: rcx holds the
            // site) of the caller; rax reloaded with the state.
            "6:\n",
            ".cfi_adjust_cfa_offset 8\n",
            "mov rax, qword ptr [r10 - 16]\n",
            "mov ecx, r14d\n",
            "shr ecx, {shift}\n",
            "and ecx, {mask}\n",
            "mov qword ptr [rax + rcx*8 + {cache}], r11\n",
            "pop rcx\n",
            ".cfi_adjust_cfa_offset -8\n",
            "mov rax, qword ptr [rip + clrprof_elt_current@GOTTPOFF]\n",
            "mov rax, qword ptr fs:[rax]\n",
            "jmp 3b\n",
        )
    };
}

// Counts-only fast paths (no timing, no flow): the common enter (the callee is among the first
// `FAST_SEARCH` children of the caller's node and no frame was unwound) and the common leave (the
// top entry is this frame) are done here with only the registers the contract lets the hook
// clobber — enter: rax, r10, r11; leave/tailcall: rcx, r8, r9 — and no call. The enter stubs only
// read the sibling list (the Rust path alone links and reorders nodes), walking it with r11.
// Anything else jumps to the full stubs above with every register untouched.

#[unsafe(naked)]
pub(crate) unsafe extern "C" fn enter_counts_stub() {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "mov rax, qword ptr [rip + clrprof_elt_current@GOTTPOFF]",
        "mov rax, qword ptr fs:[rax]",
        "test rax, rax",
        "jz 2f",
        // r10 = one past the top entry; below the bound: counts mode, room, not too deep.
        "mov r10, qword ptr [rax + {end}]",
        "cmp r10, qword ptr [rax + {hi}]",
        "jae 2f",
        // An entry at or below this frame's SP was unwound: the full path cleans up.
        "cmp r15, qword ptr [r10 - 8]",
        "jae 2f",
        callee_lookup!(),
        "3:",
        "inc qword ptr [r11 + {calls}]",
        "mov qword ptr [r10], r11",
        "mov qword ptr [r10 + 8], r15",
        "add r10, 16",
        "mov qword ptr [rax + {end}], r10",
        "ret",
        callee_lookup_tail!(),
        ".cfi_endproc",
        end = const super::thread::layout::STACK_END,
        hi = const super::thread::layout::COUNTS_HI,
        first_child = const super::thread::layout::NODE_FIRST_CHILD,
        next_sibling = const super::thread::layout::NODE_NEXT_SIBLING,
        search = const super::thread::FAST_SEARCH,
        func = const super::thread::layout::NODE_FUNC,
        calls = const super::thread::layout::NODE_CALLS,
        cache = const super::thread::layout::NODE_CACHE,
        site = const super::thread::layout::NODE_SITE,
        shift = const super::thread::CALLEE_SLOT_SHIFT,
        mask = const super::thread::CALLEE_CACHE - 1,
        slow = sym enter_stub,
    );
}

macro_rules! leave_counts_stub {
    ($name:ident, $slow:ident) => {
        #[unsafe(naked)]
        pub(crate) unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "mov rcx, qword ptr [rip + clrprof_elt_current@GOTTPOFF]",
                "mov rcx, qword ptr fs:[rcx]",
                "test rcx, rcx",
                "jz 2f",
                // r8 = one past the top entry; at or above the bound: counts mode, two entries.
                "mov r8, qword ptr [rcx + {end}]",
                "cmp r8, qword ptr [rcx + {lo}]",
                "jb 2f",
                "cmp rsi, qword ptr [r8 - 8]",
                "jne 2f",
                "mov r9, qword ptr [r8 - 16]",
                "cmp rdi, qword ptr [r9 + {func}]",
                "jne 2f",
                "sub r8, 16",
                "mov qword ptr [rcx + {end}], r8",
                "ret",
                "2:",
                "jmp {slow}",
                ".cfi_endproc",
                end = const super::thread::layout::STACK_END,
                lo = const super::thread::layout::COUNTS_LO,
                func = const super::thread::layout::NODE_FUNC,
                slow = sym $slow,
            );
        }
    };
}

leave_counts_stub!(leave_counts_stub, leave_stub);
leave_counts_stub!(tailcall_counts_stub, tailcall_stub);

// Timing fast paths (timing with the TSC, no flow): the same common enter and leave as above, plus
// what `ThreadState::charge` does when no suspension is pending — read the clock, charge the ticks
// since the thread's last event to the node on top of the stack (exclusive minus the calibrated
// per-event overhead, which goes to profiler time: `min(overhead, delta)`), store the new last
// timestamp. Every condition is checked before anything is written: a pending suspension
// (`SUSPENDED_TICKS` moved since the thread's last event), a full or too deep stack, an unwound
// frame, a callee not among the first `FAST_SEARCH` children or a leave that is not the top entry
// jumps to the full stub with every register untouched. `rdtsc` writes edx:eax: enter saves rdx on
// the stack (its only scratch registers are rax, r10, r11), leave/tailcall keep the return
// registers rax and rdx in r10 and r11. The clock read is a parameter so that unit tests can run
// the very same code against a scripted clock.

macro_rules! enter_timing_stub {
    ($name:ident, [$($clock:literal),+]) => {
        #[unsafe(naked)]
        pub(crate) unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "mov rax, qword ptr [rip + clrprof_elt_current@GOTTPOFF]",
                "mov rax, qword ptr fs:[rax]",
                "test rax, rax",
                "jz 2f",
                "mov r11, qword ptr [rip + {susp}@GOTPCREL]",
                "mov r11, qword ptr [r11]",
                "cmp r11, qword ptr [rax + {last_susp}]",
                "jne 2f",
                // r10 = one past the top entry; below the bound: timing mode, room, not too deep.
                "mov r10, qword ptr [rax + {end}]",
                "cmp r10, qword ptr [rax + {hi}]",
                "jae 2f",
                // An entry at or below this frame's SP was unwound: the full path cleans up.
                "cmp r15, qword ptr [r10 - 8]",
                "jae 2f",
                callee_lookup!(),
                "3:",
                // Committed: count the call and push (child, SP).
                "inc qword ptr [r11 + {calls}]",
                "mov qword ptr [r10], r11",
                "mov qword ptr [r10 + 8], r15",
                "lea r11, [r10 + 16]",
                "mov qword ptr [rax + {end}], r11",
                // Charge the caller's node (the previous top): r11 = state, r10 = node.
                "mov r11, rax",
                "mov r10, qword ptr [r10 - 16]",
                "push rdx",
                ".cfi_adjust_cfa_offset 8",
                $($clock,)+
                "shl rdx, 32",
                "or rax, rdx",
                "mov rdx, rax",
                "sub rdx, qword ptr [r11 + {last}]",
                "mov qword ptr [r11 + {last}], rax",
                "mov rax, qword ptr [r11 + {overhead}]",
                "cmp rax, rdx",
                "cmova rax, rdx",
                "sub rdx, rax",
                "add qword ptr [r10 + {excl}], rdx",
                "add qword ptr [r10 + {prof}], rax",
                "pop rdx",
                ".cfi_adjust_cfa_offset -8",
                "ret",
                callee_lookup_tail!(),
                ".cfi_endproc",
                susp = sym $crate::elt::thread::SUSPENDED_TICKS,
                last_susp = const $crate::elt::thread::layout::LAST_SUSP,
                end = const $crate::elt::thread::layout::STACK_END,
                hi = const $crate::elt::thread::layout::TIMING_HI,
                first_child = const $crate::elt::thread::layout::NODE_FIRST_CHILD,
                next_sibling = const $crate::elt::thread::layout::NODE_NEXT_SIBLING,
                search = const $crate::elt::thread::FAST_SEARCH,
                func = const $crate::elt::thread::layout::NODE_FUNC,
                calls = const $crate::elt::thread::layout::NODE_CALLS,
                last = const $crate::elt::thread::layout::LAST,
                overhead = const $crate::elt::thread::layout::OVERHEAD,
                excl = const $crate::elt::thread::layout::NODE_EXCL,
                prof = const $crate::elt::thread::layout::NODE_PROF,
                cache = const $crate::elt::thread::layout::NODE_CACHE,
                site = const $crate::elt::thread::layout::NODE_SITE,
                shift = const $crate::elt::thread::CALLEE_SLOT_SHIFT,
                mask = const $crate::elt::thread::CALLEE_CACHE - 1,
                slow = sym $crate::elt::stubs::enter_stub,
            );
        }
    };
}

macro_rules! leave_timing_stub {
    ($name:ident, $slow:ident, [$($clock:literal),+]) => {
        #[unsafe(naked)]
        pub(crate) unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "mov rcx, qword ptr [rip + clrprof_elt_current@GOTTPOFF]",
                "mov rcx, qword ptr fs:[rcx]",
                "test rcx, rcx",
                "jz 2f",
                "mov r9, qword ptr [rip + {susp}@GOTPCREL]",
                "mov r9, qword ptr [r9]",
                "cmp r9, qword ptr [rcx + {last_susp}]",
                "jne 2f",
                // r8 = one past the top entry; at or above the bound: timing mode, two entries.
                "mov r8, qword ptr [rcx + {end}]",
                "cmp r8, qword ptr [rcx + {lo}]",
                "jb 2f",
                "cmp rsi, qword ptr [r8 - 8]",
                "jne 2f",
                "mov r9, qword ptr [r8 - 16]",
                "cmp rdi, qword ptr [r9 + {func}]",
                "jne 2f",
                // Committed: pop, then charge the leaving function's node (r9).
                "sub r8, 16",
                "mov qword ptr [rcx + {end}], r8",
                "mov r10, rax",
                "mov r11, rdx",
                $($clock,)+
                "shl rdx, 32",
                "or rax, rdx",
                "mov r8, rax",
                "sub r8, qword ptr [rcx + {last}]",
                "mov qword ptr [rcx + {last}], rax",
                "mov rax, qword ptr [rcx + {overhead}]",
                "cmp rax, r8",
                "cmova rax, r8",
                "sub r8, rax",
                "add qword ptr [r9 + {excl}], r8",
                "add qword ptr [r9 + {prof}], rax",
                "mov rax, r10",
                "mov rdx, r11",
                "ret",
                "2:",
                "jmp {slow}",
                ".cfi_endproc",
                susp = sym $crate::elt::thread::SUSPENDED_TICKS,
                last_susp = const $crate::elt::thread::layout::LAST_SUSP,
                end = const $crate::elt::thread::layout::STACK_END,
                lo = const $crate::elt::thread::layout::TIMING_LO,
                func = const $crate::elt::thread::layout::NODE_FUNC,
                last = const $crate::elt::thread::layout::LAST,
                overhead = const $crate::elt::thread::layout::OVERHEAD,
                excl = const $crate::elt::thread::layout::NODE_EXCL,
                prof = const $crate::elt::thread::layout::NODE_PROF,
                slow = sym $crate::elt::stubs::$slow,
            );
        }
    };
}

enter_timing_stub!(enter_timing_stub, ["rdtsc"]);
leave_timing_stub!(leave_timing_stub, leave_stub, ["rdtsc"]);
leave_timing_stub!(tailcall_timing_stub, tailcall_stub, ["rdtsc"]);

/// Calls an enter stub the way JIT-compiled prologs do: client id in r14, caller's SP in r15.
///
/// # Safety
/// `stub` must be one of this module's enter stubs and `func` a leaked `FuncInfo` (or null); the
/// calling thread's TLS slot must be null or point to a live `ThreadState`; the word below `sp`
/// must be readable (the stubs read the call site there).
#[inline(always)]
pub(crate) unsafe fn call_enter(stub: unsafe extern "C" fn(), func: *const super::thread::FuncInfo, sp: usize) {
    // Safety: the stubs follow the enter contract, which clobbers only caller-saved registers.
    unsafe {
        core::arch::asm!(
            "call {stub}",
            stub = in(reg) stub,
            in("r14") func,
            in("r15") sp,
            clobber_abi("C"),
        );
    }
}

/// Calls a leave or tailcall stub the way epilogs do: client id in rdi, caller's SP in rsi.
///
/// # Safety
/// As for [`call_enter`], with a leave or tailcall stub.
#[inline(always)]
pub(crate) unsafe fn call_leave(stub: unsafe extern "C" fn(), func: *const super::thread::FuncInfo, sp: usize) {
    // Safety: as in `call_enter`.
    unsafe {
        core::arch::asm!(
            "call {stub}",
            stub = in(reg) stub,
            inout("rdi") func => _,
            inout("rsi") sp => _,
            clobber_abi("C"),
        );
    }
}

/// Invokes a timing-stub macro with `rdtsc` replaced by the scripted clock (same outputs, edx:eax,
/// and the same clobbers).
#[cfg(test)]
macro_rules! with_scripted_clock {
    ($m:ident!($($args:tt)*)) => {
        $m!(
            $($args)*,
            [
                "mov rax, qword ptr [rip + clrprof_elt_fake_clock@GOTTPOFF]",
                "mov rax, qword ptr fs:[rax]",
                "mov rdx, rax",
                "shr rdx, 32",
                "mov eax, eax"
            ]
        );
    };
}

#[cfg(test)]
with_scripted_clock!(enter_timing_stub!(enter_scripted_stub));
#[cfg(test)]
with_scripted_clock!(leave_timing_stub!(leave_scripted_stub, leave_stub));
#[cfg(test)]
with_scripted_clock!(leave_timing_stub!(tailcall_scripted_stub, tailcall_stub));
