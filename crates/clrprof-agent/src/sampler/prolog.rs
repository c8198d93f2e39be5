//! Decoding the x86-64 prologs of JIT code, off the signal path: whether a code version is an OSR
//! version (it copies the tier-0 frame's saved RBP), how long its RBP-frame prolog is, and the
//! fixed frame of code without an RBP frame. The sampler publishes what it finds to the signal
//! handler's code tables (`super::codes`).

use super::codes::FramelessFrame;

/// True when the code at `entry` starts with the x64 OSR prolog: `mov reg, [rbp]` then
/// `push reg` (what .NET 10's JIT emits, seen with `DOTNET_JitDisasm`). An OSR version is entered with the tier-0 frame's RBP and, when it builds an RBP
/// frame, first copies the tier-0 frame's saved RBP (the caller's frame pointer) onto its own frame
/// to keep the frame chain. Ordinary code never reads `[rbp]` at its entry, where RBP is still the
/// caller's. (An OSR version without an RBP frame keeps the tier-0 RBP, and ordinary walks
/// already pass it.)
///
/// # Safety
/// `ranges` (start, size) must be the live code of the code version that starts at `entry`.
pub(super) unsafe fn is_osr_code(entry: u64, ranges: &[(u64, u64)]) -> bool {
    // Only bytes inside the code itself are read.
    if !ranges.iter().any(|&(a, n)| a == entry && n >= 6) {
        return false;
    }
    let mut b = [0u8; 6];
    std::ptr::copy_nonoverlapping(entry as *const u8, b.as_mut_ptr(), b.len());
    is_osr_prolog(&b)
}

fn is_osr_prolog(b: &[u8; 6]) -> bool {
    // push qword ptr [rbp+0] (FF /6, ModRM mod=01 rm=101, disp8 0): the same copy in one
    // instruction, accepted in case another JIT version emits it.
    if b[..3] == [0xFF, 0x75, 0x00] {
        return true;
    }
    // mov r64, qword ptr [rbp+0]: REX.W (+R) 8B, ModRM mod=01 rm=101 (rbp + disp8), disp8 0.
    if !matches!(b[0], 0x48 | 0x4C) || b[1] != 0x8B || b[2] & 0xC7 != 0x45 || b[3] != 0 {
        return false;
    }
    let reg = ((b[0] & 0x04) << 1) | ((b[2] >> 3) & 7);
    if reg == 4 || reg == 5 {
        return false; // rsp, rbp
    }
    // push r64: 50+r, or 41 50+r for r8–r15.
    if reg < 8 {
        b[4] == 0x50 + reg
    } else {
        b[4] == 0x41 && b[5] == 0x50 + (reg - 8)
    }
}

/// Most prolog bytes read from a code version's entry.
pub(super) const PROLOG_BYTES: usize = 32;

/// The fixed frame of the code version at `entry` when it does not set up RBP (see
/// [`frameless_frame`]).
///
/// # Safety
/// `ranges` (start, size) must be the live code of the code version that starts at `entry`.
pub(super) unsafe fn frameless_frame_of(entry: u64, ranges: &[(u64, u64)]) -> Option<FramelessFrame> {
    // Only bytes inside the code itself are read.
    let &(_, size) = ranges.iter().find(|&&(a, _)| a == entry)?;
    let mut b = [0u8; PROLOG_BYTES];
    let len = (size as usize).min(PROLOG_BYTES);
    std::ptr::copy_nonoverlapping(entry as *const u8, b.as_mut_ptr(), len);
    frameless_frame(&b[..len])
}

/// The length of the x64 prolog of JIT code with an RBP frame (`rbp based frame` in
/// `DOTNET_JitDisasm`): `push rbp`, pushes of callee-saved registers, an optional `sub rsp`, then
/// `lea rbp, [rsp+N]` or `mov rbp, rsp` (a `vzeroupper` may come before or after the `sub rsp`),
/// after which RBP is the code's own frame pointer. None for anything else (frameless code, OSR
/// versions, prologs that probe the stack).
pub(super) fn rbp_prolog(b: &[u8]) -> Option<u32> {
    if b.first() != Some(&0x55) {
        return None;
    }
    let mut i = 1usize;
    loop {
        match b.get(i..) {
            Some([0x50..=0x57, ..]) => i += 1,
            Some([0x41, 0x50..=0x57, ..]) => i += 2,
            _ => break,
        }
    }
    // `vzeroupper` (code using 256-bit vectors) before or after the local area.
    let vzeroupper = |i: &mut usize| {
        if let Some([0xC5, 0xF8, 0x77, ..]) = b.get(*i..) {
            *i += 3;
        }
    };
    vzeroupper(&mut i);
    match b.get(i..) {
        Some([0x48, 0x83, 0xEC, _, ..]) => i += 4,
        Some([0x48, 0x81, 0xEC, _, _, _, _, ..]) => i += 7,
        _ => {}
    }
    vzeroupper(&mut i);
    match b.get(i..) {
        Some([0x48, 0x8D, 0x6C, 0x24, _, ..]) => Some(i as u32 + 5),
        Some([0x48, 0x8D, 0xAC, 0x24, _, _, _, _, ..]) => Some(i as u32 + 8),
        Some([0x48, 0x89, 0xE5, ..] | [0x48, 0x8B, 0xEC, ..]) => Some(i as u32 + 3),
        _ => None,
    }
}

/// Recognizes the x64 prolog of JIT code without an RBP frame (`rsp based frame` in
/// `DOTNET_JitDisasm`): pushes of callee-saved registers other than RBP (`push rbx`, `push r12`–
/// `push r15`; RBP is never a scratch register on x64, as `ETW_EBP_FRAMED` is set), then the
/// local area: `push rax` (8 bytes), `sub rsp, imm8` or `sub rsp, imm32` below a page (larger
/// frames are probed first and are not recognized). The frame must keep the SysV stack alignment
/// at calls (return address + frame a multiple of 16), which code that calls anything does, so a
/// return address can only point into code whose frame passes this check. An RBP frame starts
/// with `push rbp`, an OSR version with `mov reg, [rbp]`: neither matches. Returns the frame's
/// size (bytes between SP after the prolog and the return address) and the prolog's length.
fn frameless_frame(b: &[u8]) -> Option<FramelessFrame> {
    let (mut i, mut size) = (0usize, 0u32);
    loop {
        match b.get(i..) {
            // push rbx
            Some([0x53, ..]) => i += 1,
            // push r12–r15
            Some([0x41, 0x54..=0x57, ..]) => i += 2,
            _ => break,
        }
        size += 8;
    }
    match b.get(i..) {
        // push rax: an 8-byte local area
        Some([0x50, ..]) => {
            size += 8;
            i += 1;
        }
        // sub rsp, imm8 (sign-extended: positive only)
        Some([0x48, 0x83, 0xEC, n, ..]) if *n < 0x80 => {
            size += *n as u32;
            i += 4;
        }
        // sub rsp, imm32
        Some([0x48, 0x81, 0xEC, a, b2, c, d, ..]) => {
            let n = u32::from_le_bytes([*a, *b2, *c, *d]);
            if n >= 4096 {
                return None;
            }
            size += n;
            i += 7;
        }
        _ => {}
    }
    // Anything that could still be building a frame after that (another push, RBP set up) is
    // not a prolog this recognizes.
    if matches!(
        b.get(i..),
        Some(
            [0x50..=0x57, ..]
                | [0x41, 0x50..=0x57, ..]
                | [0x48, 0x8D, 0x6C | 0xAC, 0x24, ..]
                | [0x48, 0x89, 0xE5, ..]
                | [0x48, 0x8B, 0xEC, ..]
        )
    ) {
        return None;
    }
    (size % 16 == 8).then_some(FramelessFrame { size, prolog: i as u32 })
}

#[cfg(test)]
mod tests {
    use super::{frameless_frame, is_osr_prolog, rbp_prolog};
    use crate::sampler::codes::FramelessFrame;

    #[test]
    fn rbp_frame_prologs_are_measured() {
        // push rbp; push r15; push r14; sub rsp, 16; lea rbp, [rsp+0x20] (tier 0 under the hooks)
        assert_eq!(
            rbp_prolog(&[0x55, 0x41, 0x57, 0x41, 0x56, 0x48, 0x83, 0xEC, 0x10, 0x48, 0x8D, 0x6C, 0x24, 0x20]),
            Some(14)
        );
        // push rbp; sub rsp, 16; lea rbp, [rsp+0x10] (apps/Sampling's Prolog.Leaf)
        assert_eq!(rbp_prolog(&[0x55, 0x48, 0x83, 0xEC, 0x10, 0x48, 0x8D, 0x6C, 0x24, 0x10, 0x89]), Some(10));
        // push rbp; mov rbp, rsp (libSystem.Native's style)
        assert_eq!(rbp_prolog(&[0x55, 0x48, 0x89, 0xE5, 0x48]), Some(4));
        // push rbp; push rbx; sub rsp, 0x118 (imm32); lea rbp, [rsp+0x120] (disp32)
        assert_eq!(
            rbp_prolog(&[0x55, 0x53, 0x48, 0x81, 0xEC, 0x18, 1, 0, 0, 0x48, 0x8D, 0xAC, 0x24, 0x20, 1, 0, 0, 0x90]),
            Some(17)
        );
        // With `vzeroupper` (AVX code on .NET 8): push rbp; push r15; push r14; sub rsp, 176;
        // vzeroupper; lea rbp, [rsp+0xC0] (disp32), and at tier 1 without the `sub`.
        assert_eq!(
            rbp_prolog(&[
                0x55, 0x41, 0x57, 0x41, 0x56, 0x48, 0x81, 0xEC, 0xB0, 0, 0, 0, 0xC5, 0xF8, 0x77, 0x48, 0x8D, 0xAC,
                0x24, 0xC0, 0, 0, 0
            ]),
            Some(23)
        );
        assert_eq!(
            rbp_prolog(&[0x55, 0x41, 0x57, 0x41, 0x56, 0xC5, 0xF8, 0x77, 0x48, 0x8D, 0x6C, 0x24, 0x10]),
            Some(13)
        );
        // Frameless, OSR, cut short, or something else before RBP is set up: not measured.
        assert_eq!(rbp_prolog(&[0x53, 0x48, 0x83, 0xEC, 0x20]), None);
        assert_eq!(rbp_prolog(&[0x48, 0x8B, 0x45, 0x00, 0x50, 0x48]), None);
        assert_eq!(rbp_prolog(&[0x55, 0x48, 0x8D, 0x6C]), None);
        assert_eq!(rbp_prolog(&[0x55, 0xC5, 0xF8, 0x77, 0x90, 0x48, 0x89, 0xE5]), None);
        assert_eq!(rbp_prolog(&[]), None);
    }

    #[test]
    fn frameless_prologs_are_recognized() {
        let f = |size, prolog| Some(FramelessFrame { size, prolog });
        // push rax; call [...]: Ratio.Light at tier 1 on .NET 10
        assert_eq!(frameless_frame(&[0x50, 0xFF, 0x15, 0, 0, 0, 0]), f(8, 1));
        // push r15; push rbx; push rax
        assert_eq!(frameless_frame(&[0x41, 0x57, 0x53, 0x50, 0x48, 0x8B]), f(24, 4));
        // push rbx; sub rsp, 0x20
        assert_eq!(frameless_frame(&[0x53, 0x48, 0x83, 0xEC, 0x20, 0x48]), f(40, 5));
        // sub rsp, 0x18
        assert_eq!(frameless_frame(&[0x48, 0x83, 0xEC, 0x18, 0xE8]), f(24, 4));
        // push r14; push rbx; sub rsp, 0x128 (imm32)
        assert_eq!(frameless_frame(&[0x41, 0x56, 0x53, 0x48, 0x81, 0xEC, 0x28, 0x01, 0, 0, 0x90]), f(312, 10));
        // push rbx: 8 bytes, aligned
        assert_eq!(frameless_frame(&[0x53, 0xE8, 0, 0, 0, 0]), f(8, 1));
        // push rbp; mov rbp, rsp: an RBP frame
        assert_eq!(frameless_frame(&[0x55, 0x48, 0x89, 0xE5]), None);
        // push rbx; push rbp: RBP pushed
        assert_eq!(frameless_frame(&[0x53, 0x55, 0x48, 0x8D, 0x6C, 0x24]), None);
        // push rbx; sub rsp, 0x10; lea rbp, [rsp+0x10]: RBP set up after the pushes
        assert_eq!(frameless_frame(&[0x53, 0x48, 0x83, 0xEC, 0x10, 0x48, 0x8D, 0x6C, 0x24, 0x10]), None);
        // mov rax, [rbp]; push rax: an OSR prolog
        assert_eq!(frameless_frame(&[0x48, 0x8B, 0x45, 0x00, 0x50, 0x48]), None);
        // No frame at all (a leaf): nothing to step over, and never a caller.
        assert_eq!(frameless_frame(&[0x48, 0x8B, 0x07, 0xC3]), None);
        // Misaligned frames (not code that calls): sub rsp, 0x10 after no push
        assert_eq!(frameless_frame(&[0x48, 0x83, 0xEC, 0x10, 0x90]), None);
        // A page or more: probed, not recognized.
        assert_eq!(frameless_frame(&[0x48, 0x81, 0xEC, 0x08, 0x10, 0, 0, 0x90]), None);
        // Cut short.
        assert_eq!(frameless_frame(&[0x41]), None);
        assert_eq!(frameless_frame(&[]), None);
    }

    #[test]
    fn the_osr_prolog_is_recognized() {
        // mov rax, [rbp]; push rax (what .NET 10's JIT emits)
        assert!(is_osr_prolog(&[0x48, 0x8B, 0x45, 0x00, 0x50, 0x48]));
        // mov r11, [rbp]; push r11
        assert!(is_osr_prolog(&[0x4C, 0x8B, 0x5D, 0x00, 0x41, 0x53]));
        // push rbp; mov rbp, rsp: an ordinary prolog
        assert!(!is_osr_prolog(&[0x55, 0x48, 0x89, 0xE5, 0x48, 0x83]));
        // push rbp; sub rsp, 112
        assert!(!is_osr_prolog(&[0x55, 0x48, 0x83, 0xEC, 0x70, 0x48]));
        // mov rax, [rbp]; push rcx: another register pushed
        assert!(!is_osr_prolog(&[0x48, 0x8B, 0x45, 0x00, 0x51, 0x00]));
        // mov rax, [rbp+8]; push rax
        assert!(!is_osr_prolog(&[0x48, 0x8B, 0x45, 0x08, 0x50, 0x00]));
        // push qword ptr [rbp]
        assert!(is_osr_prolog(&[0xFF, 0x75, 0x00, 0x48, 0x83, 0xEC]));
        // push qword ptr [rbp+8]
        assert!(!is_osr_prolog(&[0xFF, 0x75, 0x08, 0x48, 0x83, 0xEC]));
        // mov r11, [rbp]; push rbx (no REX.B)
        assert!(!is_osr_prolog(&[0x4C, 0x8B, 0x5D, 0x00, 0x53, 0x00]));
    }
}
