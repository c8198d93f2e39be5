//! Signal frames in the middle of a stack: a sample that interrupts a signal handler (the
//! runtime's activation handler, which the GC's thread suspension sends to every thread and which
//! runs on the thread's own stack: `handle_signal` in CoreCLR's `pal/src/exception/signal.cpp`
//! asks for the alternate stack for `SIGSEGV` only) reaches, above the handler's frames, the
//! return address the kernel gave the handler: the signal trampoline (`sa_restorer`, glibc's
//! `__restore_rt`: `mov $15, %rax; syscall`, the `rt_sigreturn` system call). The trampoline's
//! unwind rules are DWARF expressions into the frame the kernel pushed, which the compact rules
//! ([`super::cfi`]) do not hold, so the walk stopped there and the interrupted code lost its
//! callers.
//!
//! When the handler returns, SP points to the `ucontext_t` of the kernel's `struct rt_sigframe`
//! (its first word, `pretcode`, was the return address just popped: `arch/x86/include/asm/
//! sigframe.h`), whose `uc_mcontext.gregs` hold the interrupted registers. The walk goes on from
//! them: the interrupted RIP is a leaf (the instruction that was interrupted, not a return
//! address), then its callers as from any leaf.
//!
//! The trampolines are learned off the signal path, from the `sa_restorer` of the installed
//! handlers (glibc fills it in, and returns it from `sigaction`), each checked by its code bytes;
//! the handler compares return addresses with them and reads no code.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The code of x86-64 glibc's `__restore_rt` (and musl's): `mov $0xf, %rax` (`rt_sigreturn`),
/// `syscall`. libunwind (`x86_64/Gos-linux.c`) and GDB (`amd64-linux-tdep.c`) recognise signal
/// frames by these bytes.
pub(crate) const RESTORE_RT: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// Offsets of the interrupted registers from the `ucontext_t` at SP after the handler's return:
/// `uc_mcontext.gregs[REG_*]` (`/usr/include/x86_64-linux-gnu/sys/ucontext.h`: `uc_flags`,
/// `uc_link`, `uc_stack` (24 bytes), then `uc_mcontext`, whose first member is `gregs`; the
/// kernel's `struct ucontext` in `include/uapi/asm-generic/ucontext.h` and `struct sigcontext`
/// lay them out the same). glibc's own unwind rules for `__restore_rt` read RBP at SP + 120, RSP
/// at SP + 160 and RIP at SP + 168 (`sysdeps/unix/sysv/linux/x86_64/libc_sigaction.c`).
const GREGS: u64 =
    (std::mem::offset_of!(libc::ucontext_t, uc_mcontext) + std::mem::offset_of!(libc::mcontext_t, gregs)) as u64;
pub(crate) const UC_RBP: u64 = GREGS + 8 * libc::REG_RBP as u64;
pub(crate) const UC_RSP: u64 = GREGS + 8 * libc::REG_RSP as u64;
pub(crate) const UC_RIP: u64 = GREGS + 8 * libc::REG_RIP as u64;

/// The bytes of the kernel's `struct rt_sigframe` from its `ucontext` on: `struct ucontext` (8 +
/// 8 + 24 + the 256-byte `struct sigcontext` + an 8-byte signal mask) and `struct siginfo` (128).
/// The interrupted SP lies above them (and above the 128-byte red zone the kernel skips).
pub(crate) const SIGFRAME_BYTES: u64 = 8 + 8 + 24 + 256 + 8 + 128;

/// Most signal trampolines known (one per C library in the process; glibc's alone in practice).
const MAX_TRAMPOLINES: usize = 4;
static TRAMPOLINES: [AtomicU64; MAX_TRAMPOLINES] = [const { AtomicU64::new(0) }; MAX_TRAMPOLINES];
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Whether `ret` is a known signal trampoline (async-signal-safe: compares with published words).
#[inline(always)]
pub(crate) fn is_trampoline(ret: u64) -> bool {
    let n = COUNT.load(Ordering::Acquire).min(MAX_TRAMPOLINES);
    TRAMPOLINES[..n].iter().any(|t| t.load(Ordering::Relaxed) == ret)
}

/// Makes `addr` known as a signal trampoline when the code there is [`RESTORE_RT`] (read through
/// `/proc/self/mem`, so an unmapped address is an error, not a fault). Not on the signal path;
/// true when it is known (now or before).
pub(crate) fn learn(addr: u64) -> bool {
    use std::os::unix::fs::FileExt;
    if addr < 4096 {
        return false;
    }
    if is_trampoline(addr) {
        return true;
    }
    let mut code = [0u8; RESTORE_RT.len()];
    let read = std::fs::File::open("/proc/self/mem").and_then(|f| f.read_exact_at(&mut code, addr));
    if read.is_err() || code != RESTORE_RT {
        return false;
    }
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let n = COUNT.load(Ordering::Relaxed);
    if n >= MAX_TRAMPOLINES {
        return false;
    }
    TRAMPOLINES[n].store(addr, Ordering::Relaxed);
    COUNT.store(n + 1, Ordering::Release);
    true
}

/// Learns the trampolines of every installed signal handler (the sampler's own `SIGPROF`
/// handler, the runtime's). Returns how many are known.
pub(crate) fn learn_from_handlers() -> usize {
    for sig in 1..=libc::SIGRTMAX() {
        // Safety: a query only (no new action), into a zeroed structure.
        let restorer = unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            old.sa_restorer
        };
        if let Some(f) = restorer {
            learn(f as usize as u64);
        }
    }
    COUNT.load(Ordering::Acquire).min(MAX_TRAMPOLINES)
}

/// The interrupted registers (RIP, RSP, RBP) saved in the signal frame whose `ucontext_t` is at
/// `uc` (SP once the handler returned to the trampoline), when the frame lies on the stack
/// between `floor` and `hi` and the interrupted SP lies above it, on the stack.
///
/// # Safety
/// `[floor, hi)` must be mapped stack of the current thread.
#[inline(always)]
pub(crate) unsafe fn interrupted(uc: u64, floor: u64, hi: u64) -> Option<(u64, u64, u64)> {
    if uc < floor || !uc.is_multiple_of(8) || uc.checked_add(UC_RIP + 8)? > hi {
        return None;
    }
    let rip = *((uc + UC_RIP) as *const u64);
    let rsp = *((uc + UC_RSP) as *const u64);
    let rbp = *((uc + UC_RBP) as *const u64);
    if rip < 4096 || rsp < uc + SIGFRAME_BYTES || rsp > hi.saturating_sub(8) {
        return None;
    }
    Some((rip, rsp, rbp))
}
