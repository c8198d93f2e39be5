//! The signal-time walk: [`record`] copies the interrupted IP and a bounded walk of the
//! interrupted thread's stack into its ring, from the frame-pointer chain, the unwind rules of
//! native code without frame pointers, and the code tables ([`super::codes`]). Every read is
//! validated against the thread's stack bounds; nothing here allocates, locks or logs.
//!
//!
//! On-stack replacement (OSR) frames need one extra step. An OSR method is entered mid-loop from
//! its tier-0 version, whose frame stays on the stack: the runtime's patchpoint helper
//! (`JIT_Patchpoint`, `vm/jithelpers.cpp`) sets SP 8 bytes below the tier-0 frame — a fake
//! return-address slot it does not fill (it still holds the return address of the helper call,
//! in tier-0 code) — and keeps the tier-0 RBP. The OSR prolog pushes a copy of the tier-0 frame's
//! saved RBP and points RBP at that copy (`mov rax, [rbp]; push rax; ...; lea rbp, [rsp+N]` in
//! .NET 10's disassembly; the tier-0 frame is always an RBP frame that saves RBP first, see
//! `genOSRRecordTier0CalleeSavedRegistersAndFrame` in `jit/codegenxarch.cpp`). Walked the usual
//! way, the fake slot reads as the return address and the tier-0 frame's real one is skipped: the
//! OSR method's caller is lost. The agent publishes the code ranges of OSR versions
//! ([`super::codes::add_osr_code`]); when a frame's code is OSR code, the walk moves up to the tier-0 frame —
//! the slot above the fake one that holds the same saved RBP — and reads the return address there,
//! as the runtime's own unwinder does from the OSR method's unwind info (which describes the
//! tier-0 frame too).
//!
//! Optimized code without an RBP frame (an RSP-based frame of fixed size) needs another. Such code
//! leaves RBP as its caller's (RBP is never a scratch register in x64 JIT code), so the walk from
//! its callee's frame goes straight to its caller's frame and loses its caller. The agent reads
//! the prolog of each code version and publishes the frameless ones with their frame size
//! ([`super::codes::add_frameless_code`]); when a return address read from the stack points into such code past
//! its prolog, that code's SP at the call was just above the return slot, and its own return
//! address lies its frame size higher: the walk records it (and goes on when it is frameless code
//! too), reading only between the two frame records. The runtime's unwinder gets the same size
//! from the method's unwind info, which the profiling API does not expose. Code the runtime can
//! free (DynamicMethods, collectible modules) is published when it is compiled and removed at its
//! unload callback, before the runtime frees it ([`super::codes::remove_frameless_code`]).
//!
//! A sample in a signal handler (the runtime's activation handler, on the thread's stack) reaches
//! the signal trampoline: the walk goes on from the registers the kernel saved in the signal frame
//! ([`super::sigframe`]), the interrupted code walked as a leaf of its own.

use std::sync::atomic::Ordering;

use super::codes::{code_known, FramelessFrame, NativeRules, EXEC, FRAMELESS, NATIVE, OSR};
use super::sigframe;
use super::slot::{
    ring_place, Slot, ACTIVE, FLOW_FROM_EVENTS, FLOW_OFFSET, MAX_FRAMES, RECORD_HEADER, RING_WORDS, SKIP,
};

/// The interrupted thread's current EventSource activity id, as two words (0, 0 while the offset
/// of the id in the runtime's `Thread` object is unknown): on .NET 8 and 9 the id the thread's
/// last `SetActivityId` event gave ([`Slot::flow_id`], never torn), else a 16-byte copy from the thread's own
/// `Thread` object, which lives as long as the thread's slot is active (the runtime destroys it
/// after `ThreadDestroyed`, which stops the slot first). Only this thread writes its activity id,
/// so the copy is torn only when the signal lands between the two stores of a change: such an id
/// names no request.
#[inline(always)]
unsafe fn flow_id(slot: &Slot) -> (u64, u64) {
    let off = FLOW_OFFSET.load(Ordering::Relaxed);
    if off == FLOW_FROM_EVENTS {
        return slot.flow_id();
    }
    let thread = slot.thread_id.load(Ordering::Relaxed);
    if off == 0 || thread == 0 {
        return (0, 0);
    }
    let p = (thread + off) as *const u64;
    (std::ptr::read_volatile(p), std::ptr::read_volatile(p.add(1)))
}

/// Most bytes of a tier-0 frame searched for its saved RBP.
pub(super) const MAX_TIER0_FRAME: u64 = 64 * 1024;

/// Whether `fp` looks like a frame record: on the stack between `floor` and the top, aligned, its
/// saved RBP either 0 (the outermost frame) or a higher address on the stack, and its return
/// address not on the stack. Native code without frame pointers leaves whatever it keeps in RBP
/// (a string, a heap or stack pointer) where a frame pointer would be; this tells most such values
/// from frame records without knowing where code lies.
///
/// # Safety
/// `[floor, hi)` must be mapped stack of the current thread.
#[inline(always)]
pub(super) unsafe fn frame_record_sound(fp: u64, floor: u64, hi: u64) -> bool {
    if fp < floor || fp > hi.saturating_sub(16) || !fp.is_multiple_of(8) {
        return false;
    }
    let next = *(fp as *const u64);
    let ret = *((fp + 8) as *const u64);
    (next == 0 || (next > fp && next <= hi - 16)) && ret >= 4096 && !(ret >= floor && ret < hi)
}

/// Most RSP-based native frames stepped through with unwind rules in one sample.
pub(super) const MAX_NATIVE_STEPS: usize = 32;

/// Steps through the RSP-based frames of native code without frame pointers from the interrupted
/// state (`pc`, `sp`, `fp`), by the unwind rules of the mapped files: each frame's return address
/// lies at its CFA − 8 and the caller's RBP is either the same or saved in the frame. Records the
/// return addresses from `ips[n]` on and stops at code without such a rule (managed code, an RBP
/// frame, code without rules), where the frame-pointer walk takes over. Returns the new `n`, the
/// caller's RBP and SP, and the last return address; when no step was taken, whether the rules say
/// the code at `pc` has its RBP frame set up (its caller is then found through RBP, and the word at
/// SP is a local of it, no return address). A return
/// address outside the known executable mappings is not taken when `strict`, nor when RBP holds what looks like a frame record. Every slot read lies between the
/// frame's SP and the stack's top (`hi`) — or, for the caller's RBP in the first frame, from
/// `rbp_floor` up: at the interrupted IP that is the red zone below SP, where an epilog's `ret`
/// after `pop rbp` has its rule place RBP (see [`super::cfi::RED_ZONE`]); each CFA is above the
/// SP it came from.
///
/// # Safety
/// `[min(sp, rbp_floor), hi)` must be mapped stack of the current thread.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn native_steps(
    ips: &mut [u64],
    mut n: usize,
    pc: u64,
    sp: u64,
    rbp_floor: u64,
    fp: u64,
    hi: u64,
    strict: bool,
) -> Result<(usize, u64, u64, u64), bool> {
    let tables = NATIVE.visible();
    let exec = EXEC.visible();
    if tables == 0 || !NATIVE.may_hold(pc) {
        return Err(false);
    }
    let (mut pc, mut sp, mut fp) = (pc, sp, fp);
    let mut last = None;
    for step in 0..MAX_NATIVE_STEPS {
        if n >= ips.len() || !sp.is_multiple_of(8) {
            break;
        }
        let Some((_, info)) = NATIVE.find(tables, pc) else { break };
        let rules = &*(info as *const NativeRules);
        let Some(row) = super::cfi::lookup(rules.rows, pc.wrapping_sub(rules.bias)) else { break };
        if row.kind != super::cfi::KIND_RSP {
            if step == 0 && row.kind == super::cfi::KIND_RBP {
                return Err(true);
            }
            break;
        }
        let cfa = sp + row.cfa_offset as u64;
        // The return address slot (CFA − 8) must be on the stack.
        if cfa < sp + 8 || cfa > hi {
            break;
        }
        let ret = *((cfa - 8) as *const u64);
        // A return address is never on the stack.
        if ret < 4096 || (ret >= sp && ret < hi) {
            break;
        }
        // Hand-written assembly (the runtime's call stubs, which push arguments) may move SP
        // without saying so in its rules; it keeps an RBP frame. A rule that does not lead to
        // known executable memory is not followed when `strict`, nor when RBP holds a frame
        // record. (A library mapped less than a second ago is not known yet: a return address
        // into it still follows the rules when RBP holds no frame record, as in code without
        // frame pointers — at any step: libc's `__open` keeps the path in RBP, and a leaf it
        // calls returns to it first.)
        if exec != 0 && !code_known(exec, ret - 1) && (strict || frame_record_sound(fp, sp, hi)) {
            break;
        }
        if row.rbp_slot != 0 {
            let slot = cfa.wrapping_sub(8 * row.rbp_slot as u64);
            let floor = if step == 0 { rbp_floor.min(sp) } else { sp };
            if slot < floor || slot > hi - 8 || slot > cfa {
                break;
            }
            fp = *(slot as *const u64);
        }
        ips[n] = ret;
        n += 1;
        last = Some(ret);
        sp = cfa;
        if super::sigframe::is_trampoline(ret) {
            // A signal handler's return: the caller reads the interrupted state at `sp`.
            break;
        }
        // Return addresses are looked up at the call, one byte earlier.
        pc = ret - 1;
    }
    last.map(|ret| (n, fp, sp, ret)).ok_or(false)
}

/// Most stack words above SP searched for the copy of RBP a prolog pushed (`push rbp`, then
/// callee-saved registers and a small `sub rsp`).
pub(super) const MAX_PROLOG_WORDS: u64 = 16;

/// The return address of code stopped in its prolog after `push rbp` and before RBP is set up:
/// the first of the `MAX_PROLOG_WORDS` words from `sp` up (below the caller's frame at `fp`)
/// that holds `fp` is the pushed copy, and the word above it is the return address — a guess
/// like the word at SP, which the sampler thread only takes when it lies in managed code it
/// knows (the handler's executable mappings are read once a second: JIT code compiled since,
/// the usual caller at start-up, is not in them yet). None when no such copy is found: the
/// leaf's frame is set up (or has none), and its own words never hold RBP's value.
///
/// # Safety
/// `[sp, hi)` must be mapped stack of the current thread, `sp` 8-aligned.
pub(super) unsafe fn prolog_return_address(sp: u64, fp: u64, hi: u64) -> Option<u64> {
    let mut a = sp;
    while a < sp + 8 * MAX_PROLOG_WORDS && a < fp && a + 16 <= hi {
        if *(a as *const u64) == fp {
            let ret = *((a + 8) as *const u64);
            return (ret >= 4096 && !(ret >= sp && ret < hi)).then_some(ret);
        }
        a += 8;
    }
    None
}

/// The frame pointer of the tier-0 frame under the OSR frame at `fp`: the OSR prolog copied the
/// tier-0 frame's saved RBP to `[fp]`, `[fp + 8]` is the fake return slot and the tier-0 frame
/// starts at `fp + 16`; its saved RBP — the same value — is its highest word below the return
/// address, under the caller's frame. Reads stay below `hi - 8`; None when not found.
///
/// # Safety
/// `[fp, hi)` must be mapped stack of the current thread, `fp` 8-aligned.
pub(super) unsafe fn tier0_frame(fp: u64, hi: u64) -> Option<u64> {
    let saved = *(fp as *const u64);
    // A frame pointer lies above this frame; anything else (0 at the outermost frame, a native
    // caller's scratch value) cannot be matched safely.
    if saved <= fp + 16 || !saved.is_multiple_of(8) {
        return None;
    }
    // The tier-0 frame's saved-RBP slot, its return address, then the caller's frame at `saved`.
    let last = (saved - 16).min(hi.saturating_sub(16)).min(fp + 16 + MAX_TIER0_FRAME);
    let mut a = fp + 16;
    while a <= last {
        if *(a as *const u64) == saved {
            return Some(a);
        }
        a += 8;
    }
    None
}

/// Inserts the callers of frameless code above a frame. `ret` is a return address read from the
/// stack at `at`; when it returns into frameless code past its prolog, that code's SP at the call
/// was `at + 8` and its own return address is `size` bytes above: it is recorded, and checked in
/// turn (frameless code called by frameless code). Every slot read lies at or above `at + 8`, on
/// the stack (below `hi - 8`) and below the next frame record `next` when there is one (`next >
/// at`): a frameless frame lies between its callee's frame and its caller's. Returns the new
/// number of IPs and the last return address recorded (`ret` when none).
///
/// # Safety
/// `[at, hi)` must be mapped stack of the current thread, `at` 8-aligned. Not inlined: the
/// ordinary walk's loop stays as small as it was.
#[inline(never)]
pub(super) unsafe fn frameless_callers(
    ips: &mut [u64],
    mut n: usize,
    tables: usize,
    mut at: u64,
    mut ret: u64,
    next: u64,
    hi: u64,
) -> (usize, u64) {
    let limit = if next > at { next.min(hi) } else { hi };
    while n < ips.len() {
        let Some((start, info)) = FRAMELESS.find(tables, ret - 1) else { break };
        let f = FramelessFrame::unpack(info);
        if ret - 1 < start + f.prolog as u64 {
            break;
        }
        let slot = at + 8 + f.size as u64;
        if slot < at || slot.saturating_add(8) > limit || !slot.is_multiple_of(8) {
            break;
        }
        let r = *(slot as *const u64);
        if r < 4096 {
            break;
        }
        ips[n] = r;
        n += 1;
        at = slot;
        ret = r;
    }
    (n, ret)
}

/// Most `pop` instructions an epilog runs before its `ret`.
pub(super) const MAX_EPILOG_POPS: u64 = 8;

/// Where the return address of frameless code stopped at `ip` (SP `sp`) lies, given its frame
/// size: `size` bytes above SP in its body, or — in its epilog, once `add rsp` has run and only
/// `pop`s and `ret` remain — 8 bytes above SP for each register still to pop. None in an epilog
/// that does not end in `ret`, and at a jump (a tail call's `jmp` follows the epilog, a loop's
/// lies in the body: where the frame stands cannot be told).
/// Reads the instruction bytes from `ip` on, only through the `pop`s up to the `ret`.
///
/// # Safety
/// `ip` must be the interrupted IP (code being executed, so mapped).
pub(super) unsafe fn frameless_return_slot(ip: u64, sp: u64, size: u32) -> Option<u64> {
    let mut p = ip;
    let mut pops = 0;
    while pops <= MAX_EPILOG_POPS {
        let b = *(p as *const u8);
        if b == 0xC3 {
            return Some(sp + 8 * pops);
        }
        // (`rex.w jmp` through a register or memory: a REX prefix starts an instruction of 2
        // bytes or more.)
        if pops == 0 && (matches!(b, 0xE9 | 0xEB | 0xFF) || (b & 0xF0 == 0x40 && *((p + 1) as *const u8) == 0xFF)) {
            // A jump: in the body, or a tail call once the epilog has popped the frame.
            return None;
        }
        if (0x58..=0x5F).contains(&b) {
            p += 1;
        } else if b == 0x41 && (0x58..=0x5F).contains(&*((p + 1) as *const u8)) {
            // REX.B pop r8–r15 (an instruction starting with a REX prefix is at least 2 bytes).
            p += 2;
        } else {
            break;
        }
        pops += 1;
    }
    (pops == 0).then(|| sp + size as u64)
}

/// The callers of a frameless managed leaf stopped at `ip` past its prolog: records its return
/// address (when that lies in known code, on the stack below the next frame record `fp`), then
/// its frameless callers as [`frameless_callers`] does. Returns the new number of IPs and the
/// last return address recorded; None when `ip` is no frameless code past its prolog or the
/// slot does not hold a return address (the word at SP then stays the guess).
///
/// # Safety
/// `[sp, hi)` must be mapped stack of the current thread, `sp` 8-aligned, `ip` the interrupted IP.
#[inline(never)]
pub(super) unsafe fn frameless_leaf(
    ips: &mut [u64],
    n: usize,
    tables: usize,
    ip: u64,
    sp: u64,
    fp: u64,
    hi: u64,
) -> Option<(usize, u64)> {
    let (start, info) = FRAMELESS.find(tables, ip)?;
    let f = FramelessFrame::unpack(info);
    if ip < start + f.prolog as u64 || n >= ips.len() {
        return None;
    }
    let slot = frameless_return_slot(ip, sp, f.size)?;
    let limit = if fp > sp { fp.min(hi) } else { hi };
    if slot < sp || slot.saturating_add(8) > limit {
        return None;
    }
    // The table's frame size is the code's own, so the slot holds its return address (not
    // checked against the executable mappings, which do not hold code compiled in the last
    // second); a word that cannot be one is not taken.
    let ret = *(slot as *const u64);
    if ret < 4096 || (ret >= sp && ret < hi) {
        return None;
    }
    ips[n] = ret;
    Some(frameless_callers(ips, n + 1, tables, slot, ret, fp, hi))
}

/// Most signal frames walked through in one sample (a handler interrupted by another signal's
/// handler has two).
pub(super) const MAX_SIGNAL_FRAMES: usize = 4;

pub(super) unsafe fn record(slot: &Slot, uc: *const libc::ucontext_t) {
    if slot.state.load(Ordering::Acquire) != ACTIVE || uc.is_null() || slot.ring.is_null() {
        return;
    }
    let head = slot.head.load(Ordering::Relaxed);
    let tail = slot.tail.load(Ordering::Acquire);
    let Some((at, room)) = ring_place(head, tail) else {
        slot.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let pos = (at % RING_WORDS as u64) as usize;
    // Safety: `room` words after the header lie inside the ring and are free (the consumer reads
    // only below `head`); only this thread's handler writes them.
    let ips = std::slice::from_raw_parts_mut(slot.ring.add(pos + RECORD_HEADER), room);
    let g = &(*uc).uc_mcontext.gregs;
    let ip = g[libc::REG_RIP as usize] as u64;
    let mut fp = g[libc::REG_RBP as usize] as u64;
    let sp = g[libc::REG_RSP as usize] as u64;
    let lo = slot.stack_lo.load(Ordering::Relaxed);
    let hi = slot.stack_hi.load(Ordering::Relaxed);
    if slot.probe.load(Ordering::Acquire) != 0 {
        if hi == 0 {
            slot.seen_sp.store(sp, Ordering::Relaxed);
        }
        return;
    }
    ips[0] = ip;
    let (activity, activity_seq) = slot.activity_and_seq();
    // Only the part of the stack between the interrupted SP and the top is known to be mapped
    // (the main thread's stack grows on demand). When SP is elsewhere (an alternate signal
    // stack), only the IP is recorded.
    let on_stack = hi != 0 && sp >= lo && sp <= hi - 8;
    let mut sp_top = if on_stack && sp.is_multiple_of(8) { *(sp as *const u64) } else { 0 };
    let mut n = 1;
    let osr = OSR.visible();
    let frameless = FRAMELESS.visible();
    let (mut ip, mut sp) = (ip, sp);
    // Signal frames walked through (a sample in a signal handler: see `super::sigframe`); the
    // code each one interrupted is walked as a leaf of its own, higher on the stack.
    let mut signals = 0;
    while on_stack && signals <= MAX_SIGNAL_FRAMES {
        let leaf = signals == 0;
        // The code that owns the frame at `fp`: the interrupted code, or — when the leaf has no
        // frame of its own (frameless, prolog, native code without frame pointers) — the code it
        // returns to.
        let mut owner = ip;
        let mut owner_alt = if leaf { sp_top.wrapping_sub(1) } else { u64::MAX };
        // Frames lie above this.
        let mut floor = sp;
        // The `ucontext_t` of a signal frame reached, and whether the trampoline was recorded as
        // the last return address: the walk goes on from the registers the frame saved, without
        // the trampoline (no caller: it names no code and reads as `<unknown>`).
        let mut sigframe = None;
        if sigframe::is_trampoline(ip) || sigframe::is_trampoline(ip.wrapping_sub(7)) {
            // The leaf is the trampoline itself (at its `mov` or its `syscall`): SP is at the frame.
            sigframe = Some((sp, false));
        } else {
            // A leaf in native code with an RSP-based frame (code without frame pointers, where
            // RBP is a scratch register, or a prolog): its frames are stepped through by the
            // unwind rules, and the walk goes on from the RBP they recover. The word at SP is then
            // no guess to make later.
            //
            // The interrupted code's red zone, on this stack: the kernel put the signal's frame
            // below it (above the sampled SP for code a signal handler interrupted).
            let red_zone = sp.saturating_sub(super::cfi::RED_ZONE).max(lo);
            match native_steps(ips, n, ip, sp, red_zone, fp, hi, false) {
                Ok((added, caller_fp, caller_sp, ret)) => {
                    n = added;
                    fp = caller_fp;
                    floor = caller_sp;
                    if leaf {
                        sp_top = 0;
                    }
                    owner = ret - 1;
                    owner_alt = u64::MAX;
                    if sigframe::is_trampoline(ret) {
                        // A signal handler's frames: the signal frame is at its caller's SP.
                        sigframe = Some((caller_sp, true));
                    } else if frameless != 0 && FRAMELESS.may_hold(owner) && n < ips.len() {
                        let (added, last) = frameless_callers(ips, n, frameless, caller_sp - 8, ret, fp, hi);
                        n = added;
                        owner = last - 1;
                    }
                }
                Err(true) => {
                    // A native leaf whose rules say its RBP frame is set up: the frame-pointer
                    // walk finds its caller, and the word at SP is a local of it (the JIT keeps the
                    // address of the code it is writing there), no return address.
                    if leaf {
                        sp_top = 0;
                    }
                    owner_alt = u64::MAX;
                }
                Err(false) => {
                    // Frameless managed code past its prolog: RBP is still its caller's (or an
                    // older frame's) frame pointer, and its return address lies at its fixed frame
                    // size above SP (or above the registers its epilog still pops).
                    let found = if frameless != 0 && FRAMELESS.may_hold(ip) && sp.is_multiple_of(8) {
                        frameless_leaf(ips, n, frameless, ip, sp, fp, hi)
                    } else {
                        None
                    };
                    if let Some((added, last)) = found {
                        n = added;
                        if leaf {
                            sp_top = 0;
                        }
                        owner = last - 1;
                        owner_alt = u64::MAX;
                    } else if leaf && fp > sp && sp.is_multiple_of(8) && NATIVE.find(NATIVE.visible(), ip).is_none() {
                        // Managed code inside its prolog, past `push rbp` but before RBP is set
                        // up: RBP is still the caller's frame pointer, so the walk would go from
                        // the leaf straight to the caller's caller. The return address lies just
                        // above the pushed copy of RBP; it takes the place of the word at SP as
                        // the caller. Not at the `push rbp` itself (nothing pushed yet: the word
                        // at SP is the return address; a copy of RBP further up is the caller's).
                        // The byte is read only once a copy was found: `ip` is the instruction
                        // being run. (Only for the sample's own leaf: the word at SP is a guess
                        // the record holds for it alone.)
                        if let Some(ret) = prolog_return_address(sp, fp, hi).filter(|_| *(ip as *const u8) != 0x55) {
                            sp_top = ret;
                            owner_alt = ret - 1;
                        } else if sp_top >= 4096
                            && frameless != 0
                            && FRAMELESS.may_hold(sp_top - 1)
                            && FRAMELESS.find(frameless, sp_top - 1).is_some()
                            && n + 1 < ips.len()
                            && matches!(*(ip as *const u8), 0x55 | 0xC3)
                        {
                            // At its `push rbp` or at a `ret` the word at SP is the leaf's return
                            // address for certain. When it returns into frameless code, that
                            // code's own caller lies its frame size higher, below the frame at
                            // RBP: both are recorded here (the sampler thread would insert the
                            // first, and the walk from RBP skip the second).
                            ips[n] = sp_top;
                            let (added, last) = frameless_callers(ips, n + 1, frameless, sp, sp_top, fp, hi);
                            if added > n + 1 {
                                n = added;
                                owner = last - 1;
                                owner_alt = u64::MAX;
                                sp_top = 0;
                            }
                        }
                    }
                }
            }
        }
        // Frame-pointer walk: [fp] = caller's fp, [fp+8] = return address. Every frame must lie
        // on this thread's stack, above the interrupted SP, 8-aligned, and strictly above the last
        // one.
        while sigframe.is_none() && n < ips.len() && fp >= floor && fp <= hi - 16 && fp.is_multiple_of(8) {
            if osr != 0
                && (OSR.find(osr, owner).is_some() || (owner_alt != u64::MAX && OSR.find(osr, owner_alt).is_some()))
            {
                // An OSR frame: its caller's return address is in the tier-0 frame under it.
                if let Some(t0) = tier0_frame(fp, hi) {
                    fp = t0;
                }
            }
            let ret = *((fp + 8) as *const u64);
            let next = *(fp as *const u64);
            if ret < 4096 {
                break;
            }
            if sigframe::is_trampoline(ret) {
                // A signal handler with an RBP frame: its SP on return, just above the return
                // slot, is at the signal frame.
                sigframe = Some((fp + 16, false));
                break;
            }
            ips[n] = ret;
            n += 1;
            // Return addresses are looked up at the call, one byte earlier.
            owner = ret - 1;
            owner_alt = u64::MAX;
            // Native code without frame pointers in the middle of the stack (the agent's own
            // callbacks, a C++ library, the runtime's assembly stubs): its SP at the call was just
            // above the return slot, and its rules lead on, into known code only. The RBP saved in
            // the frame record above is either a scratch value of it (no frame record), or — code
            // that leaves RBP alone, such as the runtime's `JIT_RareDisableHelper`, which optimized
            // code calls after an inlined P/Invoke when a GC is pending — its caller's frame
            // pointer: the walk through RBP would skip its caller (and, when that caller is OSR
            // code, take the OSR frame's fake return slot for the caller's caller). A sound frame
            // record is left to the rules only when they end below it, where the caller's frame
            // lies. (Rules that say the code has an RBP frame take no step: the walk goes on.)
            let native = n < ips.len() && NATIVE.may_hold(owner);
            let scratch = native && !frame_record_sound(next, fp + 16, hi);
            if native {
                if let Some((added, caller_fp, caller_sp, last)) =
                    native_steps(ips, n, owner, fp + 16, fp + 16, next, hi, true)
                        .ok()
                        .filter(|&(_, _, caller_sp, _)| scratch || caller_sp <= next)
                {
                    n = added;
                    floor = caller_sp;
                    owner = last - 1;
                    if sigframe::is_trampoline(last) {
                        sigframe = Some((caller_sp, true));
                        break;
                    }
                    if frameless != 0 && FRAMELESS.may_hold(owner) && n < ips.len() {
                        let (added, last) = frameless_callers(ips, n, frameless, caller_sp - 8, last, caller_fp, hi);
                        n = added;
                        owner = last - 1;
                    }
                    fp = caller_fp;
                    continue;
                }
            }
            if frameless != 0 && FRAMELESS.may_hold(owner) {
                // Frameless callers between this frame and the next: their return addresses lie
                // above this frame, at their fixed frame sizes.
                let (added, last) = frameless_callers(ips, n, frameless, fp + 8, ret, next, hi);
                n = added;
                owner = last - 1;
            }
            if next <= fp {
                break;
            }
            fp = next;
        }
        // The code the signal interrupted: its RIP is recorded one byte past it, as the return
        // addresses are (they are looked up one byte earlier), so that it names the instruction
        // itself; then it is walked as a leaf, its frame above the signal frame.
        // A frame that cannot be followed leaves the trampoline as the last frame (it stays a cut
        // stack, not a whole one with the handler as its root).
        let Some((uc, recorded)) = sigframe else { break };
        if signals >= MAX_SIGNAL_FRAMES {
            break;
        }
        let Some((rip, rsp, rbp)) = sigframe::interrupted(uc, sp, hi) else { break };
        if recorded {
            n -= 1;
        }
        if n >= ips.len() {
            break;
        }
        ips[n] = rip + 1;
        n += 1;
        (ip, sp, fp) = (rip, rsp, rbp);
        signals += 1;
    }
    // A walk the ring's room cut short is not recorded: the stack would read as a whole one.
    if n == room && room < MAX_FRAMES {
        slot.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if at != head {
        *slot.ring.add((head % RING_WORDS as u64) as usize) = SKIP;
    }
    *slot.ring.add(pos) = n as u64;
    *slot.ring.add(pos + 1) = sp_top;
    *slot.ring.add(pos + 2) = activity;
    *slot.ring.add(pos + 3) = activity_seq as u64;
    let (flow_lo, flow_hi) = flow_id(slot);
    *slot.ring.add(pos + 4) = flow_lo;
    *slot.ring.add(pos + 5) = flow_hi;
    slot.taken.fetch_add(1, Ordering::Relaxed);
    slot.head.store(at + (RECORD_HEADER + n) as u64, Ordering::Release);
}
