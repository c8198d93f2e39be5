//! Tests of the signal-time walk (OSR, frameless and native frames), of the slots' rings and
//! runtime activities, and the cost of the walk (an ignored test).

use std::sync::atomic::Ordering;

use super::codes::*;
use super::cpu::*;
use super::sigframe;
use super::slot::*;
use super::unwind::*;
use crate::activity::*;
use crate::os::*;

mod walks {
    use super::*;

    // Fake code addresses (only compared, never executed or read).
    const OSR_CODE: u64 = 0x5100_0000_0000;
    const TIER0_AFTER_PATCHPOINT: u64 = 0x5000_0000_2050;
    const RET_INTO_MAIN: u64 = 0x5000_0000_0100;
    const RET_INTO_HOST: u64 = 0x7000_0000_1000;
    const CALLEE: u64 = 0x5200_0000_0000;

    /// A registered thread whose stack is `words` (word `i` at `base + 8 i`), and the registers of
    /// a signal taken at `ip` with `sp`/`fp` as word indexes.
    pub(super) fn fake_thread(words: &[u64], ip: u64, sp: usize, fp: usize) -> (Box<Slot>, libc::ucontext_t) {
        let base = words.as_ptr() as u64;
        let slot = Slot::new();
        slot.state.store(ACTIVE, Ordering::Relaxed);
        slot.stack_lo.store(base, Ordering::Relaxed);
        slot.stack_hi.store(base + 8 * words.len() as u64, Ordering::Relaxed);
        // Safety: a zeroed ucontext is a valid value; only three registers are read.
        let mut uc: libc::ucontext_t = unsafe { std::mem::zeroed() };
        uc.uc_mcontext.gregs[libc::REG_RIP as usize] = ip as i64;
        uc.uc_mcontext.gregs[libc::REG_RSP as usize] = (base + 8 * sp as u64) as i64;
        uc.uc_mcontext.gregs[libc::REG_RBP as usize] = (base + 8 * fp as u64) as i64;
        (slot, uc)
    }

    /// Walks a fake thread stack (word `i` at `base + 8 i`) from the given registers, the way the
    /// signal handler does; `sp`/`fp` are word indexes.
    fn walk(words: &[u64], ip: u64, sp: usize, fp: usize) -> Vec<u64> {
        let (slot, uc) = fake_thread(words, ip, sp, fp);
        // Safety: the registers point into `words`, which are the slot's stack bounds.
        unsafe { record(&slot, &uc) };
        let mut out = Vec::new();
        slot.drain(|ips, _, _, _, _| out = ips.to_vec());
        out
    }

    /// Main's frame at word 60 (outermost), a tier-0 frame at 40 (its SP at 30), the runtime's
    /// fake return slot at 29 (holding the stale return address of the patchpoint call) and the
    /// OSR frame at 28 holding a copy of the tier-0 frame's saved RBP.
    fn osr_stack() -> Vec<u64> {
        let mut w: Vec<u64> = (0..64).map(|i| 0x1111_0000 + i).collect();
        let base = w.as_ptr() as u64;
        let at = |i: usize| base + 8 * i as u64;
        w[60] = 0;
        w[61] = RET_INTO_HOST;
        w[40] = at(60);
        w[41] = RET_INTO_MAIN;
        w[29] = TIER0_AFTER_PATCHPOINT;
        w[28] = at(60);
        w
    }

    /// The tables are shared by the tests, and a walk ignores a table while it is being changed.
    fn serial() -> std::sync::MutexGuard<'static, ()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        LOCK.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    fn osr_frames_are_walked_through_their_tier0_frame() {
        let _s = serial();
        assert!(add_osr_code(OSR_CODE, OSR_CODE + 0x100));
        let mut w = osr_stack();
        let at = |w: &Vec<u64>, i: usize| w.as_ptr() as u64 + 8 * i as u64;

        // The leaf is the OSR code itself.
        assert_eq!(walk(&w, OSR_CODE + 0x10, 20, 28), [OSR_CODE + 0x10, RET_INTO_MAIN, RET_INTO_HOST]);

        // A callee with its own frame (word 15) called from the OSR code.
        w[15] = at(&w, 28);
        w[16] = OSR_CODE + 0x40;
        assert_eq!(walk(&w, CALLEE, 10, 15), [CALLEE, OSR_CODE + 0x40, RET_INTO_MAIN, RET_INTO_HOST]);

        // A frameless callee: RBP is still the OSR frame's, the return address is at SP (the
        // sampler thread inserts it as the caller later).
        w[19] = OSR_CODE + 0x40;
        assert_eq!(walk(&w, CALLEE, 19, 28), [CALLEE, RET_INTO_MAIN, RET_INTO_HOST]);

        // Code that is not OSR code is walked the ordinary way.
        assert_eq!(walk(&w, CALLEE + 8, 20, 28), [CALLEE + 8, TIER0_AFTER_PATCHPOINT, RET_INTO_HOST]);
    }

    #[test]
    fn an_osr_step_that_finds_no_tier0_frame_falls_back_and_stays_on_the_stack() {
        let _s = serial();
        const CODE: u64 = 0x5300_0000_0000;
        assert!(add_osr_code(CODE, CODE + 0x100));
        let mut w = osr_stack();
        // The tier-0 frame's saved RBP does not match the copy: the ordinary walk goes on.
        w[40] = 0x1234_5678;
        assert_eq!(walk(&w, CODE + 1, 20, 28), [CODE + 1, TIER0_AFTER_PATCHPOINT, RET_INTO_HOST]);
        // A copy pointing past the stack's top: nothing is read beyond it.
        let len = w.len();
        w[28] = w.as_ptr() as u64 + 8 * len as u64 + 4096;
        assert_eq!(walk(&w, CODE + 1, 20, 28), [CODE + 1, TIER0_AFTER_PATCHPOINT]);
        // Not a frame pointer at all (the outermost frame's 0).
        w[28] = 0;
        assert_eq!(walk(&w, CODE + 1, 20, 28), [CODE + 1, TIER0_AFTER_PATCHPOINT]);
    }

    /// Walks like [`walk`] and returns the word the sampler thread takes as a frameless leaf's
    /// caller too.
    fn walk_with_top(words: &[u64], ip: u64, sp: usize, fp: usize) -> (Vec<u64>, u64) {
        let (slot, uc) = fake_thread(words, ip, sp, fp);
        // Safety: the registers point into `words`, which are the slot's stack bounds.
        unsafe { record(&slot, &uc) };
        let mut out = (Vec::new(), 0);
        slot.drain(|ips, top, _, _, _| out = (ips.to_vec(), top));
        out
    }

    #[test]
    fn a_leaf_stopped_in_its_prolog_has_the_return_address_above_its_pushed_rbp_as_caller() {
        let _s = serial();
        // Real bytes (the handler reads the instruction at the IP): push rbp; push r15; push r14;
        // sub rsp, 16; lea rbp, [rsp+0x20]; nop.
        let code: &'static [u8] = Box::leak(
            vec![0x55, 0x41, 0x57, 0x41, 0x56, 0x48, 0x83, 0xEC, 0x10, 0x48, 0x8D, 0x6C, 0x24, 0x20, 0x90]
                .into_boxed_slice(),
        );
        let entry = code.as_ptr() as u64;
        let leaf = entry + 1;
        const RET_INTO_CALLER: u64 = 0x5000_0000_3000;
        assert!(add_exec_range(0x5000_0000_0000, 0x5f00_0000_0000));
        // The caller's frame at word 40, main's at 60.
        let mut w: Vec<u64> = (0..64).map(|i| 0x1111_0000 + i).collect();
        let at = |w: &Vec<u64>, i: usize| w.as_ptr() as u64 + 8 * i as u64;
        w[60] = 0;
        w[61] = RET_INTO_HOST;
        w[40] = at(&w, 60);
        w[41] = RET_INTO_MAIN;
        let walked = |ip: u64| vec![ip, RET_INTO_MAIN, RET_INTO_HOST];
        // Right after `push rbp`: the copy at SP, the return address above it.
        w[20] = at(&w, 40);
        w[21] = RET_INTO_CALLER;
        assert_eq!(walk_with_top(&w, leaf, 20, 40), (walked(leaf), RET_INTO_CALLER));
        // After two more pushes (callee-saved registers).
        assert_eq!(walk_with_top(&w, entry + 5, 18, 40), (walked(entry + 5), RET_INTO_CALLER));
        // At `push rbp`: the word at SP is the return address, even with a copy of RBP above it
        // (the caller's own words: the word over it is no caller of the leaf).
        w[24] = at(&w, 40);
        w[25] = RET_INTO_MAIN + 0x80;
        assert_eq!(walk_with_top(&w, entry, 21, 40), (walked(entry), RET_INTO_CALLER));
        w[24] = 0x1111_0018;
        // A copy of RBP under a word that is no code: it is still the guess, like the word at SP
        // (the sampler thread takes a guess only when it lies in managed code it knows: JIT code
        // compiled since the last read of the mappings is the usual caller at start-up).
        w[21] = 0x2222_0000;
        assert_eq!(walk_with_top(&w, leaf, 19, 40), (walked(leaf), 0x2222_0000));
        // A copy under a stack address: no return address, the word at SP stays.
        w[21] = at(&w, 50);
        assert_eq!(walk_with_top(&w, leaf, 19, 40), (walked(leaf), w[19]));
        // No copy within reach (a frame set up, or none): the word at SP stays.
        w[20] = 0x3333_0000;
        w[21] = RET_INTO_CALLER;
        assert_eq!(walk_with_top(&w, leaf, 19, 40), (walked(leaf), w[19]));
    }

    #[test]
    fn runtime_activities_nest_and_failed_loads_are_cut_at_a_catch() {
        use clrprof_trace::runtime_activity as ra;
        let _g = serial();
        // The test thread registers itself, as `ThreadAssignedToOSThread` does (no timer).
        let me = crate::os::os_tid();
        let (slot, _) = register_current(me, 0x7e57, None);
        let slot = slot.expect("a slot");
        let jit = ra::pack(ra::JIT, 0x10);
        let load = ra::pack(ra::TYPE_LOAD, 7);
        let asm = ra::pack(ra::ASSEMBLY_LOAD, 0x20);
        assert_eq!(slot.activity(), 0);
        activity_begin(asm);
        activity_begin(jit);
        activity_begin(load);
        assert_eq!(slot.activity(), load, "the innermost wins");
        activity_end(load);
        assert_eq!(slot.activity(), jit);
        activity_exception(true);
        activity_gc(IN_GC, true);
        assert_eq!(slot.activity(), ra::pack(ra::GC, 0), "a GC wins over everything");
        activity_gc(IN_GC, false);
        assert_eq!(slot.activity(), jit);
        // A type load that failed (no stop) under the assembly load: cut at the catch.
        activity_end(jit);
        activity_begin(load);
        assert_eq!(slot.activity(), load);
        activity_exception(false);
        activity_unwound();
        assert_eq!(slot.activity(), asm, "the assembly load (which runs managed code) stays");
        activity_end(ra::pack(ra::JIT, 0x99)); // unknown: ignored
        assert_eq!(slot.activity(), asm);
        activity_end(asm);
        assert_eq!(slot.activity(), 0);
        activity_exception(true);
        assert_eq!(slot.activity(), ra::pack(ra::EXCEPTION, 0));
        clear_exception_activity();
        assert_eq!(slot.activity(), 0);
        // Deeper than kept: counted, and unwound in order.
        for i in 0..(ACT_DEPTH as u64 + 3) {
            activity_begin(ra::pack(ra::JIT, i + 1));
        }
        assert_eq!(slot.activity(), ra::pack(ra::JIT, ACT_DEPTH as u64));
        for _ in 0..3 {
            activity_end(0);
        }
        activity_end(ra::pack(ra::JIT, ACT_DEPTH as u64));
        assert_eq!(slot.activity(), ra::pack(ra::JIT, ACT_DEPTH as u64 - 1));
        unregister(slot);
        release(slot);
        activity_begin(jit);
        assert_eq!(slot.activity(), ra::pack(ra::JIT, ACT_DEPTH as u64 - 1), "a released slot is not written");
    }

    /// A chain of `depth` ordinary frames of two words each from word 8 up (frame `k` returns to
    /// `code + k`; the outermost holds 0 as its caller's frame).
    pub(super) fn deep_chain(depth: usize, code: u64) -> Vec<u64> {
        let mut w = vec![0u64; 8 + 2 * depth + 8];
        let base = w.as_ptr() as u64;
        for k in 0..depth {
            let fp = 8 + 2 * k;
            w[fp] = if k + 1 == depth { 0 } else { base + 8 * (fp as u64 + 2) };
            w[fp + 1] = code + k as u64;
        }
        w
    }

    /// The IPs the handler records for a signal at `ip` whose RBP is frame `from` of a chain of
    /// `depth` frames returning to `code + k`.
    fn chain_ips(ip: u64, code: u64, from: usize, depth: usize) -> Vec<u64> {
        let mut v = vec![ip];
        v.extend((from..depth).map(|k| code + k as u64));
        v.truncate(MAX_FRAMES);
        v
    }

    #[test]
    fn deep_stacks_are_recorded_whole_up_to_max_frames_and_cut_there() {
        let _s = serial();
        const CODE: u64 = 0x5e00_0000_0000;
        // 1,000 frames (deeper than the 128 the handler used to keep): every one of them.
        let w = deep_chain(1000, CODE);
        let got = walk(&w, unit() + 5, 4, 8);
        assert_eq!(got.len(), 1001);
        assert_eq!(got, chain_ips(unit() + 5, CODE, 0, 1000));
        // 3,000 frames: the innermost MAX_FRAMES.
        let w = deep_chain(3000, CODE);
        let got = walk(&w, unit() + 5, 4, 8);
        assert_eq!(got.len(), MAX_FRAMES);
        assert_eq!(got, chain_ips(unit() + 5, CODE, 0, 3000));
    }

    #[test]
    fn the_ring_holds_records_of_any_length_and_drops_the_walks_it_has_no_room_for() {
        let _s = serial();
        const CODE: u64 = 0x5e80_0000_0000;
        const DEPTH: usize = 3000;
        let w = deep_chain(DEPTH, CODE);
        let (slot, mut uc) = fake_thread(&w, unit() + 5, 4, 8);
        let base = w.as_ptr() as u64;
        // A signal whose RBP is frame `from`: a stack of DEPTH - from frames.
        let mut take = |from: usize| {
            uc.uc_mcontext.gregs[libc::REG_RBP as usize] = (base + 8 * (8 + 2 * from as u64)) as i64;
            // Safety: the registers point into `w`, the slot's stack bounds.
            unsafe { record(&slot, &uc) };
        };
        let drain = |slot: &Slot| {
            let mut out = Vec::new();
            slot.drain(|ips, _, _, _, _| out.push(ips.to_vec()));
            out
        };
        // Stacks of 2,000 frames (2,004 words each) while the sampler thread is late: 8 fit in the
        // ring, the 9th walk would be cut by the ring's end and is dropped, not recorded cut.
        for _ in 0..9 {
            take(DEPTH - 2000);
        }
        assert_eq!(slot.dropped.load(Ordering::Relaxed), 1);
        let got = drain(&slot);
        assert_eq!(got.len(), 8);
        assert!(got.iter().all(|ips| *ips == chain_ips(unit() + 5, CODE, DEPTH - 2000, DEPTH)));
        assert!(drain(&slot).is_empty(), "drained once");
        // Any mix of depths and drains: every recorded stack comes back whole and in order, every
        // walk is either recorded or counted as dropped, and only when the ring has less than room
        // for two whole records left (a record never wraps: the free space may lie at both ends).
        let mut rng = 0x1234_5678_9abc_def1_u64;
        let mut expected = Vec::new();
        let (mut recorded, mut dropped0) = (0, slot.dropped.load(Ordering::Relaxed));
        for i in 0..3000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let from =
                if rng.is_multiple_of(4) { (rng >> 8) as usize % DEPTH } else { DEPTH - 1 - (rng >> 8) as usize % 40 };
            let before = slot.dropped.load(Ordering::Relaxed);
            let used = slot.head.load(Ordering::Relaxed) - slot.tail.load(Ordering::Relaxed);
            take(from);
            if slot.dropped.load(Ordering::Relaxed) == before {
                expected.push(chain_ips(unit() + 5, CODE, from, DEPTH));
            } else {
                let free = RING_WORDS - used as usize;
                assert!(free < 2 * (RECORD_HEADER + MAX_FRAMES), "dropped with {free} words free");
            }
            if (rng >> 40).is_multiple_of(7) || i == 2999 {
                let got = drain(&slot);
                recorded += got.len();
                assert_eq!(got, std::mem::take(&mut expected));
            }
        }
        dropped0 = slot.dropped.load(Ordering::Relaxed) - dropped0;
        assert_eq!(recorded as u64 + dropped0, 3000);
        // Ordinary stacks drained as they come stay in the ring's first pages (a record starts at
        // the ring's start again once a deep one would fit before it).
        let start = slot.head.load(Ordering::Relaxed);
        let mut furthest = 0;
        for _ in 0..5000 {
            take(DEPTH - 30);
            furthest = furthest.max((slot.head.load(Ordering::Relaxed) - 1) % RING_WORDS as u64);
            assert_eq!(drain(&slot).len(), 1);
        }
        assert!(slot.head.load(Ordering::Relaxed) - start > RING_WORDS as u64, "went round the ring");
        assert!(furthest < (2 * (RECORD_HEADER + MAX_FRAMES)) as u64, "touched up to word {furthest}");
    }

    #[test]
    fn runtime_work_whose_end_never_comes_ends_when_it_cannot_be_in_progress() {
        use clrprof_trace::runtime_activity as ra;
        let _g = serial();
        let me = crate::os::os_tid();
        let (slot, _) = register_current(me, 0x7e58, None);
        let slot = slot.expect("a slot");
        let asm = ra::pack(ra::ASSEMBLY_LOAD, 0x20);
        let search = |id| ra::pack(ra::READY_TO_RUN, id);
        let jit = |id| ra::pack(ra::JIT, id);
        activity_begin(asm);
        // The runtime rejects a method's precompiled code (its fixups fail): the search raised no
        // `…Finished`, and the method's JIT compilation ends it.
        activity_begin(search(5));
        activity_begin(ra::pack(ra::TYPE_LOAD, 9)); // a fixup's type load, failed too
        activity_begin(jit(5));
        assert_eq!(slot.activity(), jit(5));
        activity_end(jit(5));
        assert_eq!(slot.activity(), asm, "the search and what it began are over");
        // A search that another search of the same method follows (another image) ends there.
        activity_begin(search(6));
        activity_begin(search(6));
        activity_end(search(6));
        assert_eq!(slot.activity(), asm);
        // Searches of other methods nest as before.
        activity_begin(search(7));
        activity_begin(jit(8));
        assert_eq!(slot.activity(), jit(8));
        activity_end(jit(8));
        assert_eq!(slot.activity(), search(7));
        // The sampler saw managed code run with the search innermost: it is over, and so is every
        // such entry begun before it; the assembly load (which runs managed code) stays.
        let (w, seq) = slot.activity_and_seq();
        assert_eq!(w, search(7));
        slot.discard_activities(seq);
        assert_eq!(slot.activity(), asm);
        // Work begun later is not discarded, and the next begin drops the discarded entries.
        activity_begin(jit(9));
        assert_eq!(slot.activity(), jit(9));
        activity_end(jit(9));
        assert_eq!(slot.activity(), asm);
        assert_eq!(slot.activities.depth(), 1, "the discarded search was dropped");
        // Eight searches that never finish no longer fill the stack: the next compilation is seen.
        for id in 100..110 {
            activity_begin(search(id));
            let (_, seq) = slot.activity_and_seq();
            slot.discard_activities(seq);
        }
        activity_begin(jit(11));
        assert_eq!(slot.activity(), jit(11));
        activity_end(jit(11));
        // A GC's marks end with the runtime's resumption on the thread (both bits at once).
        activity_gc(IN_GC, true);
        activity_gc(IN_GC_SUSPENSION, true);
        assert_eq!(slot.activity(), ra::pack(ra::GC, 0));
        activity_gc(IN_GC | IN_GC_SUSPENSION, false);
        assert_eq!(slot.activity(), asm);
        activity_end(asm);
        assert_eq!(slot.activity(), 0);
        unregister(slot);
        release(slot);
    }

    #[test]
    fn a_thread_registered_by_another_records_its_runtime_work() {
        use clrprof_trace::runtime_activity as ra;
        let _g = serial();
        let jit = ra::pack(ra::JIT, 0x77);
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // A callback before the registration: nothing to record.
            activity_begin(jit);
            tid_tx.send(crate::os::os_tid()).unwrap();
            go_rx.recv().unwrap();
            activity_begin(jit);
            done_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            activity_end(jit);
            done_tx.send(()).unwrap();
        });
        let tid = tid_rx.recv().unwrap();
        // Registered from this thread, as attach registers the threads that existed before it.
        let (slot, _) = register_current(tid, 0x7e59, None);
        let slot = slot.expect("a slot");
        assert_eq!(slot.activity(), 0);
        go_tx.send(()).unwrap();
        done_rx.recv().unwrap();
        assert_eq!(slot.activity(), jit, "the thread found its slot");
        go_tx.send(()).unwrap();
        done_rx.recv().unwrap();
        assert_eq!(slot.activity(), 0);
        t.join().unwrap();
        unregister(slot);
        release(slot);
    }

    #[test]
    fn osr_ranges_are_kept_sorted_and_searched() {
        let _s = serial();
        let b = 0x5400_0000_0000;
        assert!(add_osr_code(b + 0x300, b + 0x380));
        assert!(add_osr_code(b + 0x100, b + 0x180));
        assert!(add_osr_code(b + 0x200, b + 0x280));
        assert!(add_osr_code(b + 0x200, b + 0x280), "adding twice is harmless");
        assert!(!add_osr_code(b + 0x500, b + 0x500), "empty range");
        for ip in [b + 0x100, b + 0x17f, b + 0x200, b + 0x37f] {
            assert!(osr_code_known(ip), "{ip:#x}");
        }
        for ip in [b + 0xff, b + 0x180, b + 0x1ff, b + 0x380, b + 0x500] {
            assert!(!osr_code_known(ip), "{ip:#x}");
        }
        let n = OSR.len.load(Ordering::Relaxed);
        let starts: Vec<u64> = (0..n).map(|i| OSR.start[i].load(Ordering::Relaxed)).collect();
        assert!(starts.windows(2).all(|p| p[0] < p[1]), "{starts:x?}");
    }

    #[test]
    fn an_executable_mapping_that_grows_in_place_is_known_to_its_new_end() {
        let _s = serial();
        let g = 0x6700_0000_0000;
        let known = |ip: u64| EXEC.find(EXEC.visible(), ip).is_some();
        assert!(add_exec_range(g, g + 0x1000));
        assert!(known(g + 0xfff) && !known(g + 0x1000));
        // The runtime mapped more code right after it: /proc/self/maps shows one longer mapping.
        assert!(add_exec_range(g, g + 0x3000));
        assert!(known(g + 0x1000) && known(g + 0x2fff) && !known(g + 0x3000));
        // Read again shorter (a part unmapped): what was known stays (a stale range only weakens
        // the check, a missing one cuts stacks).
        assert!(add_exec_range(g, g + 0x2000));
        assert!(known(g + 0x2fff));
    }

    /// Native code without frame pointers (fake addresses: the "file" maps its virtual address
    /// 0x1000 at NATIVE_CODE): entry at 0x1000 (return address at SP), then an RSP-based frame of
    /// 0x78 bytes with the caller's RBP saved at CFA − 16 (as glibc's `__open`), no rule from 0x1100;
    /// an RBP frame from 0x1400, and at 0x1800 an epilog's `ret` after `pop rbp` (CFA = RSP + 8,
    /// RBP's rule still "saved at CFA − 16": in the red zone below SP).
    const NATIVE_CODE: u64 = 0x5c00_0000_0000;
    const RET_INTO_RUN2: u64 = 0x5000_0000_0500;

    fn add_native() {
        use crate::sampler::cfi::{Row, KIND_NONE, KIND_RBP, KIND_RSP};
        static ROWS: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
        let rows = ROWS.get_or_init(|| {
            vec![
                Row { address: 0x1000, kind: KIND_RSP, cfa_offset: 8, rbp_slot: 0 }.pack(),
                Row { address: 0x1001, kind: KIND_RSP, cfa_offset: 0x78, rbp_slot: 2 }.pack(),
                Row { address: 0x1100, kind: KIND_NONE, cfa_offset: 0, rbp_slot: 0 }.pack(),
                Row { address: 0x1400, kind: KIND_RBP, cfa_offset: 16, rbp_slot: 2 }.pack(),
                Row { address: 0x1800, kind: KIND_RSP, cfa_offset: 8, rbp_slot: 2 }.pack(),
                Row { address: 0x1801, kind: KIND_NONE, cfa_offset: 0, rbp_slot: 0 }.pack(),
                // An assembly stub that leaves RBP alone (`push rax; push rdx; sub rsp, 0x28`,
                // then a call: the runtime's `JIT_RareDisableHelper`).
                Row { address: 0x1900, kind: KIND_RSP, cfa_offset: 0x40, rbp_slot: 0 }.pack(),
                Row { address: 0x1a00, kind: KIND_NONE, cfa_offset: 0, rbp_slot: 0 }.pack(),
            ]
        });
        // The fake code is executable memory; the stacks' filler words are not.
        assert!(add_exec_range(0x5000_0000_0000, 0x5f00_0000_0000));
        assert!(add_exec_range(RET_INTO_HOST & !0xfff, (RET_INTO_HOST & !0xfff) + 0x1000));
        let r: &'static NativeRules = Box::leak(Box::new(NativeRules { bias: NATIVE_CODE - 0x1000, rows }));
        assert!(add_native_code(NATIVE_CODE, NATIVE_CODE + 0x1000, r));
    }

    #[test]
    fn native_leaves_without_frame_pointers_are_stepped_through_by_their_unwind_rules() {
        let _s = serial();
        add_native();
        // Main's frame at 60, Run's at 40; the leaf's frame from SP (word 5) to its CFA (word 20):
        // return address into Run at 19, Run's RBP saved at 18; RBP holds a pointer to a string in
        // Run's frame (word 30), which an ordinary walk would read as a frame.
        let mut w: Vec<u64> = (0..64).map(|i| 0x3333_0000 + i).collect();
        let at = |w: &Vec<u64>, i: usize| w.as_ptr() as u64 + 8 * i as u64;
        w[60] = 0;
        w[61] = RET_INTO_HOST;
        w[40] = at(&w, 60);
        w[41] = RET_INTO_MAIN;
        w[19] = RET_INTO_RUN2;
        w[18] = at(&w, 40);
        w[30] = 0x7461_7473_2f33_3933; // "393/stat"
        w[31] = 0x7461_7473_2f33_3933;
        let leaf = NATIVE_CODE + 0x50;
        assert_eq!(walk(&w, leaf, 5, 30), [leaf, RET_INTO_RUN2, RET_INTO_MAIN, RET_INTO_HOST]);

        // At the leaf's entry: the return address at SP, RBP still the caller's.
        assert_eq!(walk(&w, NATIVE_CODE, 19, 40), [NATIVE_CODE, RET_INTO_RUN2, RET_INTO_MAIN, RET_INTO_HOST]);

        // A rule that leads outside executable memory (assembly that moved SP unannounced) gives
        // way to the frame record at RBP, which leads into executable memory.
        w[19] = 0x3333_0013;
        assert_eq!(walk(&w, NATIVE_CODE, 19, 40), [NATIVE_CODE, RET_INTO_MAIN, RET_INTO_HOST]);
        w[19] = RET_INTO_RUN2;

        // Native code that calls native code: the leaf's return address is into the same kind of
        // frame one level up (entry rule of the caller's pc − 1 = 0x1000: CFA = SP + 8).
        w[19] = NATIVE_CODE + 1;
        w[20] = RET_INTO_RUN2;
        assert_eq!(walk(&w, leaf, 5, 30), [leaf, NATIVE_CODE + 1, RET_INTO_RUN2, RET_INTO_MAIN, RET_INTO_HOST]);
        w[19] = RET_INTO_RUN2;

        // The same native code in the middle of the stack: a leaf with an RBP frame (word 8)
        // called by it; the leaf's frame record holds the native code's RBP (a scratch value),
        // the native frame spans words 10–23 (return address into Run at 24, Run's RBP at 23).
        let mut m: Vec<u64> = (0..64).map(|i| 0x4444_0000 + i).collect();
        m[60] = 0;
        m[61] = RET_INTO_HOST;
        m[40] = at(&m, 60);
        m[41] = RET_INTO_MAIN;
        m[8] = 0x1234;
        m[9] = NATIVE_CODE + 0x50;
        m[24] = RET_INTO_RUN2;
        m[23] = at(&m, 40);
        assert_eq!(
            walk(&m, unit() + 5, 6, 8),
            [unit() + 5, NATIVE_CODE + 0x50, RET_INTO_RUN2, RET_INTO_MAIN, RET_INTO_HOST]
        );

        // No rule (past 0x1100): the ordinary walk from RBP.
        let other = NATIVE_CODE + 0x200;
        assert_eq!(walk(&w, other, 5, 40), [other, RET_INTO_MAIN, RET_INTO_HOST]);

        // A frame that would end above the stack's top: nothing is read past it.
        let len = w.len();
        assert_eq!(walk(&w, leaf, len - 2, len - 1), [leaf]);
    }

    /// Optimized code that called an assembly stub of the runtime without an RBP frame of its own
    /// (`JIT_RareDisableHelper`, after an inlined P/Invoke returned while a GC was pending),
    /// sampled in the stub's callee (an RBP frame): the frame record above the callee's holds RBP
    /// as the stub found it, the frame pointer of the stub's caller. The stub is stepped through
    /// by its rules, so its caller is kept; when that caller is OSR code, the walk reaching it
    /// through RBP read the OSR frame's fake return slot (the tier-0 patchpoint call) as the
    /// caller and lost the tier-0 frame's caller (`Main` under `ReadProc`, `Run` missing: once in
    /// a .NET 10 run of `Sampling syscalls`).
    #[test]
    fn a_stub_without_frame_pointer_in_the_middle_of_the_stack_keeps_its_caller() {
        let _s = serial();
        add_native();
        assert!(add_osr_code(OSR_CODE, OSR_CODE + 0x100));
        let mut w = osr_stack();
        let at = |w: &Vec<u64>, i: usize| w.as_ptr() as u64 + 8 * i as u64;
        // The stub's frame: its CFA at word 20, the return address into the OSR code at 19, its
        // SP at its call at word 12; the callee's frame record at 10 holds the OSR frame's RBP.
        let into_stub = NATIVE_CODE + 0x913;
        w[19] = OSR_CODE + 0x40;
        w[10] = at(&w, 28);
        w[11] = into_stub;
        let leaf = NATIVE_CODE + 0x450;
        assert_eq!(walk(&w, leaf, 4, 10), [leaf, into_stub, OSR_CODE + 0x40, RET_INTO_MAIN, RET_INTO_HOST]);

        // The same stub called by code with an ordinary RBP frame (the tier-0 frame at 40).
        w[19] = TIER0_AFTER_PATCHPOINT;
        w[10] = at(&w, 40);
        assert_eq!(walk(&w, leaf, 4, 10), [leaf, into_stub, TIER0_AFTER_PATCHPOINT, RET_INTO_MAIN, RET_INTO_HOST]);

        // Rules that would end above the frame record RBP holds are not followed: the frame
        // record is the caller's, and the stub's frame lies below it.
        w[10] = at(&w, 16);
        w[16] = at(&w, 40);
        w[17] = TIER0_AFTER_PATCHPOINT;
        assert_eq!(walk(&w, leaf, 4, 10), [leaf, into_stub, TIER0_AFTER_PATCHPOINT, RET_INTO_MAIN, RET_INTO_HOST]);
    }

    /// A sample at the `ret` of glibc's `__futex_abstimed_wait_common` (after `pop rbx; pop
    /// rbp`) was cut at the leaf: its rule places RBP below SP, and the walk took it for no rule
    /// and went on from RBP, the caller's scratch value. The caller's RBP is read from the red
    /// zone, which the kernel keeps when it delivers the signal.
    #[test]
    fn a_native_leaf_at_its_ret_after_pop_rbp_keeps_its_callers() {
        let _s = serial();
        add_native();
        // Main's frame at 60, Run's at 40; the leaf's SP at word 4 holds its return address
        // into native code without frame pointers (frame from word 5 to its CFA at 20: return
        // address into Run at 19, Run's RBP saved at 18); the word below SP is the RBP the
        // leaf's `pop rbp` just read, the caller's scratch value (a string), still in RBP.
        let mut w: Vec<u64> = (0..64).map(|i| 0x6666_0000 + i).collect();
        let at = |w: &Vec<u64>, i: usize| w.as_ptr() as u64 + 8 * i as u64;
        let string = 0x7461_7473_2f33_3933; // "393/stat"
        w[60] = 0;
        w[61] = RET_INTO_HOST;
        w[40] = at(&w, 60);
        w[41] = RET_INTO_MAIN;
        w[19] = RET_INTO_RUN2;
        w[18] = at(&w, 40);
        w[4] = NATIVE_CODE + 0x51;
        w[3] = string;
        let ret = NATIVE_CODE + 0x800;
        let (slot, mut uc) = fake_thread(&w, ret, 4, 0);
        uc.uc_mcontext.gregs[libc::REG_RBP as usize] = string as i64;
        // Safety: the registers point into `w`, which are the slot's stack bounds.
        unsafe { record(&slot, &uc) };
        let mut got = Vec::new();
        slot.drain(|ips, _, _, _, _| got = ips.to_vec());
        assert_eq!(got, [ret, NATIVE_CODE + 0x51, RET_INTO_RUN2, RET_INTO_MAIN, RET_INTO_HOST]);

        // Code that saved RBP in the red zone and uses RBP as a scratch register: RBP is the
        // word the rule names, not RBP's value. Called by Run, whose frame is at 40.
        w[4] = RET_INTO_RUN2;
        w[3] = at(&w, 40);
        assert_eq!(walk(&w, ret, 4, 30), [ret, RET_INTO_RUN2, RET_INTO_MAIN, RET_INTO_HOST]);

        // A red zone below the stack's bounds is not read: the ordinary walk from RBP.
        w[0] = RET_INTO_RUN2;
        assert_eq!(walk(&w, ret, 0, 40), [ret, RET_INTO_MAIN, RET_INTO_HOST]);
    }

    /// A libc leaf under `__open` called from libSystem.Native before the sampler had read the
    /// mappings again since the library was loaded (a .NET 10 run of `Sampling osr` recorded the
    /// leaf, `__libc_open`, then UNKNOWN): the second step's return address, into the library
    /// not known yet, was refused, and the walk went on from RBP, the path `__open` keeps there.
    #[test]
    fn a_native_caller_s_return_into_a_library_not_known_yet_is_followed_when_rbp_is_no_frame() {
        let _s = serial();
        add_native();
        const NEW_LIB: u64 = 0x6b00_0000_0040;
        // Main's frame at 60, the new library's RBP frame at 40; the leaf at its entry (SP at
        // word 4: its return address into the native caller), the caller's frame from word 5 to
        // its CFA at 20 (the return address into the new library at 19, its RBP saved at 18); RBP
        // holds a pointer to a string in the library's caller's frame (word 30).
        let mut w: Vec<u64> = (0..64).map(|i| 0x7777_0000 + i).collect();
        let at = |w: &Vec<u64>, i: usize| w.as_ptr() as u64 + 8 * i as u64;
        w[60] = 0;
        w[61] = RET_INTO_HOST;
        w[40] = at(&w, 60);
        w[41] = RET_INTO_MAIN;
        w[19] = NEW_LIB;
        w[18] = at(&w, 40);
        w[4] = NATIVE_CODE + 0x51;
        w[30] = 0x6c65_732f_636f_7270; // "proc/sel"
        w[31] = 0x6174_732f_6b73_6174; // "task/sta"
        let leaf = NATIVE_CODE;
        assert_eq!(walk(&w, leaf, 4, 30), [leaf, NATIVE_CODE + 0x51, NEW_LIB, RET_INTO_MAIN, RET_INTO_HOST]);
        // While RBP holds a frame record, the unknown address is not taken: the walk goes on
        // from that record.
        assert_eq!(walk(&w, leaf, 4, 40), [leaf, NATIVE_CODE + 0x51, RET_INTO_MAIN, RET_INTO_HOST]);
    }

    /// A page of fake code (on the heap, never executed) holding `code` at 0x100, known as
    /// executable memory; returns the code's address.
    fn code_page(code: &[u8]) -> u64 {
        let page: &'static mut [u8] = Box::leak(vec![0xccu8; 0x2000].into_boxed_slice());
        let base = (page.as_ptr() as u64 + 0xfff) & !0xfff;
        let at = base + 0x100;
        let off = (at - page.as_ptr() as u64) as usize;
        page[off..off + code.len()].copy_from_slice(code);
        assert!(add_exec_range(base, base + 0x1000));
        at
    }

    /// glibc's `__restore_rt` (the signal trampoline's bytes), learned as the real one is.
    fn trampoline() -> u64 {
        static T: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        *T.get_or_init(|| {
            let t = code_page(&sigframe::RESTORE_RT);
            assert!(sigframe::learn(t));
            t
        })
    }

    /// A stack where a signal interrupted native code without frame pointers (glibc's
    /// `__open`-like frame at NATIVE_CODE + 0x50: SP at word 70, return address into Run at 84,
    /// Run's RBP saved at 83, RBP a string) and the handler's frames lie below: the kernel's
    /// signal frame from word 10 (its `ucontext_t`, the interrupted RIP, RSP and RBP in its
    /// `gregs`), the trampoline's address at word 9 (the handler's return address). Run's frame
    /// at 100, Main's at 120. (The stack holds addresses of its own words: a copy is no such
    /// stack.)
    fn signal_stack(t: u64) -> Vec<u64> {
        let mut w: Vec<u64> = (0..128).map(|i| 0x7777_0000 + i).collect();
        let at = |w: &Vec<u64>, i: usize| w.as_ptr() as u64 + 8 * i as u64;
        let string = 0x7461_7473_2f33_3933; // "393/stat"
        w[120] = 0;
        w[121] = RET_INTO_HOST;
        w[100] = at(&w, 120);
        w[101] = RET_INTO_MAIN;
        w[84] = RET_INTO_RUN2;
        w[83] = at(&w, 100);
        w[9] = t;
        let uc = 10;
        w[uc + sigframe::UC_RIP as usize / 8] = NATIVE_CODE + 0x50;
        w[uc + sigframe::UC_RSP as usize / 8] = at(&w, 70);
        w[uc + sigframe::UC_RBP as usize / 8] = string;
        w
    }

    /// A CPU sample of a .NET 10 app's main thread was cut at [libcoreclr.so+0x616470,
    /// libc.so.6+0x3c050]: the runtime's activation-signal handler at its entry (`push rbp`),
    /// whose return address is glibc's `__restore_rt`; the trampoline's unwind rules (DWARF
    /// expressions into the signal frame) have no compact rule, and the walk stopped. It goes on
    /// from the registers the kernel saved: the interrupted code as a leaf (one byte past its RIP),
    /// then its callers.
    #[test]
    fn a_sample_in_a_signal_handler_keeps_the_interrupted_code_and_its_callers() {
        let _s = serial();
        add_native();
        let t = trampoline();
        let w = signal_stack(t);
        let string = 0x7461_7473_2f33_3933;
        let interrupted = [NATIVE_CODE + 0x51, RET_INTO_RUN2, RET_INTO_MAIN, RET_INTO_HOST];
        let with = |leaf: u64| [&[leaf][..], &interrupted[..]].concat();

        // The handler at its entry (rule: CFA = SP + 8), RBP still the interrupted code's.
        let (slot, mut uc) = fake_thread(&w, NATIVE_CODE, 9, 0);
        uc.uc_mcontext.gregs[libc::REG_RBP as usize] = string as i64;
        // Safety: the registers point into `w`, which are the slot's stack bounds.
        unsafe { record(&slot, &uc) };
        let mut got = Vec::new();
        slot.drain(|ips, _, _, _, _| got = ips.to_vec());
        assert_eq!(got, with(NATIVE_CODE));

        // A handler with an RBP frame (word 8: the interrupted RBP, then the trampoline).
        let mut b = signal_stack(t);
        b[8] = string;
        assert_eq!(walk(&b, NATIVE_CODE + 0x400, 2, 8), with(NATIVE_CODE + 0x400));

        // The sample in the trampoline itself (at its `syscall`): SP is at the signal frame.
        assert_eq!(walk(&w, t + 7, 10, 0), with(t + 7));
        assert_eq!(walk(&w, t, 10, 0), with(t));

        // An interrupted SP below the signal frame's end, or past the stack's top, is no such
        // frame: the trampoline stays the last frame (a cut stack, not a whole one).
        let mut c = signal_stack(t);
        c[10 + sigframe::UC_RSP as usize / 8] = c.as_ptr() as u64 + 8 * 40;
        assert_eq!(walk(&c, NATIVE_CODE, 9, 0), [NATIVE_CODE, t]);
        c[10 + sigframe::UC_RSP as usize / 8] = c.as_ptr() as u64 + 8 * 128;
        assert_eq!(walk(&c, NATIVE_CODE, 9, 0), [NATIVE_CODE, t]);
        // A frame that would end past the stack's top is not read.
        let top = w.len() - 2;
        let mut d = signal_stack(t);
        d[top] = t;
        assert_eq!(walk(&d, NATIVE_CODE, top, 0), [NATIVE_CODE, t]);
    }

    /// A return address whose code is not the trampoline's (one byte differs) is not learned, and
    /// the walk does not read a signal frame above it.
    #[test]
    fn a_fake_trampoline_is_not_followed() {
        let _s = serial();
        add_native();
        let _ = trampoline();
        let mut bytes = sigframe::RESTORE_RT;
        bytes[3] = 0x3c; // `mov $60, %rax`: exit
        let fake = code_page(&bytes);
        assert!(!sigframe::learn(fake));
        assert!(!sigframe::is_trampoline(fake));
        assert!(!sigframe::learn(0x10), "unmapped");
        let w = signal_stack(fake);
        assert_eq!(walk(&w, NATIVE_CODE, 9, 0), [NATIVE_CODE, fake]);
    }

    /// The trampoline of the handlers installed in this process (glibc's `__restore_rt`) is
    /// learned from `sigaction`, and the registers are where glibc's own unwind rules for it
    /// read them (`DW_OP_breg7 (rsp): 120/160/168`).
    #[test]
    fn the_c_library_s_trampoline_is_learned_from_the_installed_handlers() {
        assert_eq!((sigframe::UC_RBP, sigframe::UC_RSP, sigframe::UC_RIP), (120, 160, 168));
        extern "C" fn nothing(_: libc::c_int) {}
        // Safety: a handler that does nothing, for a signal nobody sends in the tests.
        let restorer = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = nothing as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGURG, &sa, std::ptr::null_mut()), 0);
            let mut now: libc::sigaction = std::mem::zeroed();
            assert_eq!(libc::sigaction(libc::SIGURG, std::ptr::null(), &mut now), 0);
            now.sa_restorer.expect("glibc sets sa_restorer") as usize as u64
        };
        assert!(sigframe::learn_from_handlers() >= 1);
        assert!(sigframe::is_trampoline(restorer), "{restorer:#x}");
    }

    #[test]
    fn a_native_leaf_called_from_osr_code_the_mappings_do_not_show_yet_keeps_its_callers() {
        let _s = serial();
        add_native();
        // OSR code in memory the JIT's code heap gained after the last read of the mappings (it
        // is entered as soon as it is compiled; the mappings are read again later).
        const NEW_OSR: u64 = 0x6a00_0000_0000;
        // The OSR frame at 28 over its tier-0 frame at 40 (osr_stack); a native leaf without a
        // frame pointer called from the OSR code: its frame from SP (word 5) to its CFA (word
        // 20), the return address into the OSR code at 19, the OSR frame's RBP saved at 18 and
        // still in RBP (as right after `push rbp`).
        let mut w = osr_stack();
        let at = |w: &Vec<u64>, i: usize| w.as_ptr() as u64 + 8 * i as u64;
        w[19] = NEW_OSR + 0x40;
        w[18] = at(&w, 28);
        let leaf = NATIVE_CODE + 0x50;
        // Return addresses into unknown memory are not followed while RBP holds a frame record:
        // the walk reads the OSR frame's fake return slot and loses two frames (what a .NET 8 run
        // recorded once: the leaf, tier-0 code after its patchpoint call, then the outermost).
        assert_eq!(walk(&w, leaf, 5, 28), [leaf, TIER0_AFTER_PATCHPOINT, RET_INTO_HOST]);
        // Published OSR code is known code: the step is taken, and the OSR step follows.
        assert!(add_osr_code(NEW_OSR, NEW_OSR + 0x100));
        assert_eq!(walk(&w, leaf, 5, 28), [leaf, NEW_OSR + 0x40, RET_INTO_MAIN, RET_INTO_HOST]);
        assert!(OSR.remove(NEW_OSR));
    }

    #[test]
    fn the_word_at_sp_of_a_native_leaf_with_an_rbp_frame_is_no_caller() {
        let _s = serial();
        add_native();
        // The JIT (an RBP frame at word 12, called by Run) keeps the address of the managed code
        // it is writing at SP (word 5): that word must not become the leaf's caller later.
        let mut w: Vec<u64> = (0..64).map(|i| 0x5555_0000 + i).collect();
        let at = |w: &Vec<u64>, i: usize| w.as_ptr() as u64 + 8 * i as u64;
        w[60] = 0;
        w[61] = RET_INTO_HOST;
        w[40] = at(&w, 60);
        w[41] = RET_INTO_MAIN;
        w[12] = at(&w, 40);
        w[13] = RET_INTO_RUN2;
        w[5] = RET_INTO_RUN + 0x40;
        let leaf = NATIVE_CODE + 0x450;
        let (slot, uc) = fake_thread(&w, leaf, 5, 12);
        // Safety: the registers point into `w`, which are the slot's stack bounds.
        unsafe { record(&slot, &uc) };
        let mut got = (Vec::new(), u64::MAX);
        slot.drain(|ips, sp_top, _, _, _| got = (ips.to_vec(), sp_top));
        assert_eq!(got, (vec![leaf, RET_INTO_RUN2, RET_INTO_MAIN, RET_INTO_HOST], 0));

        // Without rules for the leaf (past the mapping's rules), the word at SP is kept for the
        // sampler thread to judge.
        let (slot, uc) = fake_thread(&w, NATIVE_CODE + 0x200, 5, 12);
        // Safety: as above.
        unsafe { record(&slot, &uc) };
        slot.drain(|ips, sp_top, _, _, _| got = (ips.to_vec(), sp_top));
        assert_eq!(got.1, RET_INTO_RUN + 0x40);
    }

    // Frameless code (fake addresses): LIGHT has an 8-byte frame (`push rax`) and a 1-byte
    // prolog, OUTER a 24-byte frame (two pushes, `push rax`), both called after their prologs.
    const LIGHT: u64 = 0x5800_0000_0000;
    const OUTER: u64 = 0x5800_0000_1000;
    /// The leaf of the frameless tests: real bytes (`nop`s), as the handler reads the instruction
    /// at the IP when it finds a copy of RBP above SP.
    static UNIT_CODE: [u8; 16] = [0x90; 16];
    fn unit() -> u64 {
        UNIT_CODE.as_ptr() as u64
    }
    const RET_INTO_RUN: u64 = 0x5000_0000_0400;

    fn add_frameless() {
        assert!(add_frameless_code(LIGHT, LIGHT + 0x20, FramelessFrame { size: 8, prolog: 1 }));
        assert!(add_frameless_code(OUTER, OUTER + 0x40, FramelessFrame { size: 24, prolog: 4 }));
    }

    /// Main's frame at word 60, Run's frame at 40; a frameless method called by Run has its frame
    /// just under Run's; the leaf (`unit()`, an RBP frame) at word 10 was called by the frameless code.
    fn frameless_stack() -> Vec<u64> {
        let mut w: Vec<u64> = (0..64).map(|i| 0x2222_0000 + i).collect();
        let base = w.as_ptr() as u64;
        let at = |i: usize| base + 8 * i as u64;
        w[60] = 0;
        w[61] = RET_INTO_HOST;
        w[40] = at(60);
        w[41] = RET_INTO_MAIN;
        w[10] = at(40);
        w
    }

    #[test]
    fn a_frameless_caller_in_the_middle_of_the_stack_is_recovered() {
        let _s = serial();
        add_frameless();
        let mut w = frameless_stack();
        // The leaf's frame record at 10: return into LIGHT at 11; LIGHT's SP at the call was word 12,
        // its 8-byte frame is word 12 and its return address (into Run) word 13.
        w[11] = LIGHT + 0x10;
        w[13] = RET_INTO_RUN;
        assert_eq!(walk(&w, unit() + 5, 8, 10), [unit() + 5, LIGHT + 0x10, RET_INTO_RUN, RET_INTO_MAIN, RET_INTO_HOST]);

        // Frameless code called by frameless code: LIGHT called from OUTER (24-byte frame at words
        // 14–16, its return address at 17).
        w[13] = OUTER + 0x20;
        w[17] = RET_INTO_RUN;
        assert_eq!(
            walk(&w, unit() + 5, 8, 10),
            [unit() + 5, LIGHT + 0x10, OUTER + 0x20, RET_INTO_RUN, RET_INTO_MAIN, RET_INTO_HOST]
        );

        // Code that is not known to be frameless is walked the ordinary way.
        w[11] = CALLEE + 0x10;
        assert_eq!(walk(&w, unit() + 5, 8, 10), [unit() + 5, CALLEE + 0x10, RET_INTO_MAIN, RET_INTO_HOST]);
    }

    #[test]
    fn a_leaf_at_its_entry_called_by_frameless_code_keeps_that_code_s_caller() {
        let _s = serial();
        add_frameless();
        // Real bytes: `push rbp` at the entry, `ret` after it, a `nop`.
        static ENTRY: [u8; 3] = [0x55, 0xC3, 0x90];
        let leaf = ENTRY.as_ptr() as u64;
        // RBP is still Run's frame (word 40); the leaf's return address into LIGHT at SP (word
        // 11), LIGHT's 8-byte frame at 12 and its return address into Run at 13.
        let mut w = frameless_stack();
        w[11] = LIGHT + 0x10;
        w[13] = RET_INTO_RUN;
        let whole = |ip: u64| vec![ip, LIGHT + 0x10, RET_INTO_RUN, RET_INTO_MAIN, RET_INTO_HOST];
        assert_eq!(walk_with_top(&w, leaf, 11, 40), (whole(leaf), 0));
        // At a `ret`: the same.
        assert_eq!(walk_with_top(&w, leaf + 1, 11, 40), (whole(leaf + 1), 0));
        // In the middle of code (the word at SP may be anything): left to the sampler thread.
        assert_eq!(walk_with_top(&w, leaf + 2, 11, 40), (vec![leaf + 2, RET_INTO_MAIN, RET_INTO_HOST], LIGHT + 0x10));
        // Into code not known to be frameless: left to the sampler thread too.
        w[11] = CALLEE + 0x10;
        assert_eq!(walk_with_top(&w, leaf, 11, 40), (vec![leaf, RET_INTO_MAIN, RET_INTO_HOST], CALLEE + 0x10));
    }

    #[test]
    fn a_frameless_leaf_has_its_caller_at_its_frame_size_or_above_what_its_epilog_pops() {
        let _s = serial();
        // Real bytes (the handler reads the instruction at the IP): push rbx; sub rsp, 0x20 (a
        // 40-byte frame, 5-byte prolog), body: nop; nop; jmp; then add rsp, 0x20; pop rbx; ret.
        let code: &'static [u8] = Box::leak(
            vec![0x53, 0x48, 0x83, 0xEC, 0x20, 0x90, 0x90, 0xE9, 0, 0, 0, 0, 0x48, 0x83, 0xC4, 0x20, 0x5B, 0xC3]
                .into_boxed_slice(),
        );
        let start = code.as_ptr() as u64;
        assert!(add_frameless_code(start, start + code.len() as u64, FramelessFrame { size: 40, prolog: 5 }));
        const RET_INTO_CALLER: u64 = 0x5000_0000_3300;
        // The caller's RBP frame at word 40, main's at 60; the leaf's SP at word 20 after its
        // prolog, its return address at 20 + 40 / 8 = 25, stale return addresses below it.
        let mut w: Vec<u64> = (0..64).map(|i| 0x6666_0000 + i).collect();
        let at = |w: &Vec<u64>, i: usize| w.as_ptr() as u64 + 8 * i as u64;
        w[60] = 0;
        w[61] = RET_INTO_HOST;
        w[40] = at(&w, 60);
        w[41] = RET_INTO_MAIN;
        w[25] = RET_INTO_CALLER;
        w[20] = RET_INTO_MAIN + 0x40;
        let walked = |ip: u64| vec![ip, RET_INTO_CALLER, RET_INTO_MAIN, RET_INTO_HOST];
        // In the body, and at `add rsp` (not run yet): the frame size above SP.
        assert_eq!(walk_with_top(&w, start + 5, 20, 40), (walked(start + 5), 0));
        assert_eq!(walk_with_top(&w, start + 12, 20, 40), (walked(start + 12), 0));
        // At `pop rbx` (SP moved up by 0x20): above the one register still to pop; at `ret`: at SP.
        assert_eq!(walk_with_top(&w, start + 16, 24, 40), (walked(start + 16), 0));
        assert_eq!(walk_with_top(&w, start + 17, 25, 40), (walked(start + 17), 0));
        // At a jump (a loop's, or a tail call's after the epilog) and inside the prolog, where the
        // frame cannot be told: the ordinary walk, and the word at SP stays the guess.
        assert_eq!(walk_with_top(&w, start + 7, 20, 40), (vec![start + 7, RET_INTO_MAIN, RET_INTO_HOST], w[20]));
        assert_eq!(walk_with_top(&w, start + 1, 24, 40), (vec![start + 1, RET_INTO_MAIN, RET_INTO_HOST], w[24]));
        // RBP below the slot (no frame record of a caller above the frame): the slot is not
        // taken, the ordinary walk goes on from RBP (here into a word that is no frame record).
        assert_eq!(walk_with_top(&w, start + 5, 20, 24), (vec![start + 5, w[25]], w[20]));
        assert!(remove_frameless_code(start));
    }

    #[test]
    fn a_code_table_keeps_its_ranges_sorted_through_adds_and_removes() {
        let t: Box<CodeTable<64>> = Box::new(CodeTable::new());
        let base = 0x7100_0000_0000u64;
        // Added out of order, with a repeat (kept as it was) and an empty range (refused).
        for k in [5u64, 1, 9, 3, 7, 5, 0, 8] {
            assert!(t.add(base + k * 0x100, base + k * 0x100 + 0x40, k));
        }
        assert!(!t.add(base + 0x2000, base + 0x2000, 1));
        let starts: Vec<u64> = (0..t.len.load(Ordering::Relaxed)).map(|i| t.start[i].load(Ordering::Relaxed)).collect();
        assert_eq!(starts, [0, 1, 3, 5, 7, 8, 9].map(|k| base + k * 0x100));
        let n = t.visible();
        assert_eq!(t.find(n, base + 0x510), Some((base + 0x500, 5)));
        assert_eq!(t.find(n, base + 0x540), None, "past the range's end");
        assert!(t.remove(base + 0x500));
        assert!(!t.remove(base + 0x500));
        assert!(!t.remove(base + 0x510), "only by the range's start");
        let n = t.visible();
        assert_eq!(n, 6);
        assert_eq!(t.find(n, base + 0x510), None);
        for k in [0u64, 1, 3, 7, 8, 9] {
            assert_eq!(t.find(n, base + k * 0x100 + 0x3f), Some((base + k * 0x100, k)), "{k}");
        }
        // The table fills up and refuses more.
        for k in 0..58u64 {
            assert!(t.add(base + 0x10_0000 + k * 0x100, base + 0x10_0000 + k * 0x100 + 1, 0));
        }
        assert!(!t.add(base + 0x20_0000, base + 0x20_0001, 0));
    }

    #[test]
    fn frameless_code_that_unloads_is_forgotten() {
        let _s = serial();
        // Three ranges around GONE; the middle one is removed as when its DynamicMethod unloads.
        const GONE: u64 = 0x5800_0000_3000;
        for (a, size) in [(GONE - 0x100, 24), (GONE, 8), (GONE + 0x100, 40)] {
            assert!(add_frameless_code(a, a + 0x20, FramelessFrame { size, prolog: 1 }));
        }
        let mut w = frameless_stack();
        w[11] = GONE + 0x10;
        w[13] = RET_INTO_RUN;
        assert_eq!(walk(&w, unit() + 5, 8, 10), [unit() + 5, GONE + 0x10, RET_INTO_RUN, RET_INTO_MAIN, RET_INTO_HOST]);
        assert!(remove_frameless_code(GONE));
        assert!(!remove_frameless_code(GONE), "removed once");
        assert!(!frameless_code_known(GONE + 0x10));
        // New code at the same address is not taken for the old frameless code.
        assert_eq!(walk(&w, unit() + 5, 8, 10), [unit() + 5, GONE + 0x10, RET_INTO_MAIN, RET_INTO_HOST]);
        // Its neighbours keep their frames.
        assert!(frameless_code_known(GONE - 0x100 + 4) && frameless_code_known(GONE + 0x100 + 4));
        assert!(!frameless_code_known(GONE - 0x100 + 0x20));
        for a in [GONE - 0x100, GONE + 0x100] {
            assert!(remove_frameless_code(a));
        }
    }

    #[test]
    fn frameless_steps_only_read_between_the_frames_and_on_the_stack() {
        let _s = serial();
        add_frameless();
        let mut w = frameless_stack();
        let at = |w: &Vec<u64>, i: usize| w.as_ptr() as u64 + 8 * i as u64;
        // A return address inside the prolog (never a call site): nothing inserted.
        w[11] = LIGHT + 1;
        assert_eq!(walk(&w, unit() + 5, 8, 10), [unit() + 5, LIGHT + 1, RET_INTO_MAIN, RET_INTO_HOST]);

        // The frame would reach the next frame record (Run's at word 14): nothing inserted.
        w[11] = OUTER + 0x20;
        w[10] = at(&w, 14);
        w[14] = at(&w, 60);
        w[15] = RET_INTO_MAIN;
        assert_eq!(walk(&w, unit() + 5, 8, 10), [unit() + 5, OUTER + 0x20, RET_INTO_MAIN, RET_INTO_HOST]);

        // The outermost frame (no next frame record): the frame must fit on the stack.
        let len = w.len();
        w[len - 4] = 0;
        w[len - 3] = LIGHT + 0x10;
        w[len - 1] = RET_INTO_RUN;
        assert_eq!(walk(&w, unit() + 5, 8, len - 4), [unit() + 5, LIGHT + 0x10, RET_INTO_RUN]);
        w[len - 3] = OUTER + 0x20;
        assert_eq!(walk(&w, unit() + 5, 8, len - 4), [unit() + 5, OUTER + 0x20]);

        // A zero where the return address should be ends the insertion.
        let mut w = frameless_stack();
        w[11] = LIGHT + 0x10;
        w[13] = 0;
        assert_eq!(walk(&w, unit() + 5, 8, 10), [unit() + 5, LIGHT + 0x10, RET_INTO_MAIN, RET_INTO_HOST]);
    }
}

/// Cost of the handler's walk (not a test: `cargo test --release -p clrprof-agent --lib
/// walk_cost -- --ignored --nocapture`, alone, so that the OSR table starts empty).
#[cfg(test)]
mod bench {
    use super::*;

    /// ns per `record` of a 32-frame chain of ordinary frames, leaf first.
    fn time_walks(words: &[u64], ip: u64, sp: usize, fp: usize) -> f64 {
        let (slot, uc) = super::walks::fake_thread(words, ip, sp, fp);
        let n = 2_000_000;
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            for _ in 0..n {
                // Safety: the registers point into `words`, the slot's stack bounds.
                unsafe { record(&slot, std::hint::black_box(&uc)) };
                slot.tail.store(slot.head.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
        }
        best
    }

    /// 32 frames of 8 words each from word 8 up; frame `k`'s return address is `code + k`.
    fn chain(code: u64) -> Vec<u64> {
        let mut w = vec![0u64; 8 + 32 * 8 + 8];
        let base = w.as_ptr() as u64;
        for k in 0..32 {
            let fp = 8 + 8 * k;
            w[fp] = if k == 31 { 0 } else { base + 8 * (fp as u64 + 8) };
            w[fp + 1] = code + k as u64;
        }
        w
    }

    /// ns per call of `f`, best of 5 rounds of `n`.
    fn time_calls(n: u32, mut f: impl FnMut()) -> f64 {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            for _ in 0..n {
                f();
            }
            best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
        }
        best
    }

    /// What a sample costs the signal handler at 100 and 2,000 frames (ordinary RBP frames, the
    /// ring drained after each), beside the clocks read in the same run: the thread's CPU clock
    /// (which the sampler thread reads per thread and tick) and the monotonic clock.
    #[test]
    #[ignore]
    fn deep_walk_cost() {
        let code = 0x5f00_0000_0000;
        let per_depth: Vec<(usize, f64)> = [100usize, 2000]
            .iter()
            .map(|&depth| {
                let w = super::walks::deep_chain(depth, code);
                let (slot, uc) = super::walks::fake_thread(&w, code - 1, 4, 8);
                let ns = time_calls(if depth > 1000 { 100_000 } else { 1_000_000 }, || {
                    // Safety: the registers point into `w`, the slot's stack bounds.
                    unsafe { record(&slot, std::hint::black_box(&uc)) };
                    slot.tail.store(slot.head.load(Ordering::Relaxed), Ordering::Relaxed);
                });
                let mut len = 0;
                // Safety: as above.
                unsafe { record(&slot, &uc) };
                slot.drain(|ips, _, _, _, _| len = ips.len());
                assert_eq!(len, depth + 1);
                (depth, ns)
            })
            .collect();
        let me = crate::os::os_tid();
        let cpu_clock = time_calls(1_000_000, || {
            std::hint::black_box(thread_cpu_ns(me));
        });
        let monotonic = time_calls(1_000_000, || {
            std::hint::black_box(std::time::Instant::now());
        });
        for (depth, ns) in per_depth {
            println!("{depth}-frame walk: {ns:.1} ns per sample ({:.2} ns per frame)", ns / (depth + 1) as f64);
        }
        println!("same run: thread CPU clock read {cpu_clock:.1} ns, monotonic clock read {monotonic:.1} ns");
    }

    /// What copying the thread's activity id costs the handler (`--async` on .NET 10): the same
    /// 32-frame walk without and with the offset known (a 16-byte copy from the thread's object).
    #[test]
    #[ignore]
    fn flow_copy_cost() {
        let code = 0x5c00_0000_0000;
        let w = chain(code);
        let object = vec![0x1234_5678u64; 512];
        let mut off = Vec::new();
        let mut on = Vec::new();
        for _ in 0..3 {
            super::super::slot::FLOW_OFFSET.store(0, Ordering::Relaxed);
            off.push(time_walks(&w, code + 0x1000, 4, 8));
            super::super::slot::FLOW_OFFSET.store(704, Ordering::Relaxed);
            let (slot, uc) = super::walks::fake_thread(&w, code + 0x1000, 4, 8);
            slot.thread_id.store(object.as_ptr() as usize, Ordering::Relaxed);
            let n = 2_000_000;
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = std::time::Instant::now();
                for _ in 0..n {
                    // Safety: the registers point into `w`, the slot's stack bounds; the thread's
                    // object is `object` (4 KiB, the offset inside it).
                    unsafe { record(&slot, std::hint::black_box(&uc)) };
                    slot.tail.store(slot.head.load(Ordering::Relaxed), Ordering::Relaxed);
                }
                best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
            }
            on.push(best);
        }
        super::super::slot::FLOW_OFFSET.store(0, Ordering::Relaxed);
        println!("32-frame walk: {off:.1?} ns without the activity id, {on:.1?} ns with it");
    }

    #[test]
    #[ignore]
    fn walk_cost() {
        let code = 0x5500_0000_0000;
        let w = chain(code);
        let empty = time_walks(&w, code + 0x1000, 4, 8);
        // OSR code in the same pages as the stack's code (the filter passes every frame), then
        // elsewhere.
        for i in 0..16 {
            add_osr_code(code + 0x40 + i * 0x10, code + 0x48 + i * 0x10);
        }
        let same_pages = time_walks(&w, code + 0x1000, 4, 8);
        for i in 0..240 {
            add_osr_code(0x5600_0000_0000 + i * 0x1000, 0x5600_0000_0800 + i * 0x1000);
        }
        let many = time_walks(&w, code + 0x1000, 4, 8);
        let other = 0x5700_0080_0000; // page 0x800 of the filter, none of the ranges'
        let elsewhere = time_walks(&chain(other), other + 0x1000, 4, 8);
        println!(
            "32-frame walk: {empty:.1} ns with no OSR code; {same_pages:.1} ns with 16 OSR ranges in the frames' \
             code page, {many:.1} ns with 256; {elsewhere:.1} ns with 256 OSR ranges in other pages"
        );
        // Frameless code: first in other pages than the frames' (the filter stops every lookup),
        // then a stack where every frame returns into frameless code (8-byte frames, one
        // frameless caller inserted per frame: 64 IPs).
        let other = 0x5a00_0040_0000; // page 0x400: none of the OSR ranges' pages
        let plain = chain(other);
        let fl = 0x5b00_0050_0000;
        for i in 0..256 {
            add_frameless_code(fl + i * 0x20, fl + i * 0x20 + 0x20, FramelessFrame { size: 8, prolog: 1 });
        }
        let fl_elsewhere = time_walks(&plain, other + 0x1000, 4, 8);
        let mut w = chain(other);
        for k in 0..32 {
            let fp = 8 + 8 * k;
            w[fp + 3] = w[fp + 1];
            w[fp + 1] = fl + (k as u64 % 256) * 0x20 + 0x10;
        }
        let fl_every = time_walks(&w, other + 0x1000, 4, 8);
        println!(
            "32-frame walk with 256 frameless ranges: {fl_elsewhere:.1} ns when none is on the stack; \
             {fl_every:.1} ns when every frame returns into one (64 IPs recorded)"
        );
        // Native code with unwind rules: every frame's return address in a mapped library whose
        // rows (100,000, as libcoreclr's) say RBP frame (a search per frame, then the ordinary
        // step); then a leaf in an RSP-based frame of that library (one rule step, then 31
        // frame-pointer frames).
        let lib = 0x5d00_00a0_0000; // pages 0xa00–0xbff of the filter: none of the OSR or frameless ranges
        static ROWS: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
        let rows = ROWS.get_or_init(|| {
            use crate::sampler::cfi::{Row, KIND_RBP, KIND_RSP};
            let mut v: Vec<u64> = (0..100_000u32)
                .map(|i| Row { address: 0x1000 + i * 16, kind: KIND_RBP, cfa_offset: 16, rbp_slot: 2 }.pack())
                .collect();
            v[99_999] = Row { address: 0x1000 + 99_999 * 16, kind: KIND_RSP, cfa_offset: 0x40, rbp_slot: 2 }.pack();
            v
        });
        let r: &'static NativeRules = Box::leak(Box::new(NativeRules { bias: lib, rows }));
        add_native_code(lib, lib + 0x20_0000, r);
        add_exec_range(lib, lib + 0x20_0000);
        let in_lib = chain(lib + 0x1000 + 0x4_0000);
        let native_every = time_walks(&in_lib, lib + 0x2000, 4, 8);
        // The leaf's frame: SP at word 0, CFA at word 8 (return address at 7, into the library,
        // the caller's RBP saved at 6), RBP a scratch value; the frame records from word 8 up.
        let mut leaf = chain(lib + 0x1000 + 0x4_0000);
        leaf[7] = lib + 0x1000 + 0x5_0000;
        leaf[6] = leaf.as_ptr() as u64 + 64;
        let native_leaf = time_walks(&leaf, lib + 0x1000 + 99_999 * 16 + 4, 0, 0x1234);
        println!(
            "32-frame walk through native code with 100,000 unwind rows: {native_every:.1} ns when every \
             frame returns into it (RBP frames); {native_leaf:.1} ns from an RSP-based leaf (one rule step)"
        );
    }
}

/// `attach --count-top`'s tally: samples per function, bounded; samples of functions past the
/// bound are counted as left out, never added.
#[test]
fn the_tally_counts_innermost_functions_up_to_its_bound() {
    let mut t = super::Tally::default();
    t.add(&[7, 7, 9]);
    assert_eq!((t.samples.get(&7), t.samples.get(&9), t.managed, t.left_out), (Some(&2), Some(&1), 3, 0));
    for f in 0..super::MAX_TALLIED as u64 + 10 {
        t.add(&[1000 + f]);
    }
    assert_eq!(t.samples.len(), super::MAX_TALLIED);
    // The functions already there keep counting; the 12 past the bound do not enter.
    t.add(&[7]);
    assert_eq!(t.samples.get(&7), Some(&3));
    assert_eq!(t.left_out, 12);
    assert_eq!(t.managed, 3 + super::MAX_TALLIED as u64 + 10 + 1);
}
