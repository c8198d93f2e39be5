//! CPU-time sampling: one POSIX timer per managed thread on that thread's CPU-time clock, whose
//! `SIGPROF` is delivered to the thread itself (`SIGEV_THREAD_ID`). A thread that does not run
//! does not advance its clock, so it is never sampled: blocked time costs no CPU weight.
//!
//! The signal handler only copies the interrupted IP and a bounded frame-pointer walk (validated
//! against the thread's stack bounds) into the thread's preallocated ring ([`Slot`]). It does not
//! allocate, lock, log or call the runtime; it finds its slot through the timer's `sigval`, so it
//! needs no thread-local storage. Signals that are not ours go to the previous handler.
//!
//! The ring holds records of variable length (a header and the sample's IPs), so a thread's memory
//! is bounded by the ring, not by the number of samples times the deepest stack: [`RING_WORDS`]
//! words (128 KiB of address space, mapped lazily) hold 7 stacks of [`MAX_FRAMES`] frames or
//! hundreds of ordinary ones. A record never wraps around the end of the ring: the producer skips
//! to the start instead, and it starts at the beginning whenever the ring is empty, so a thread
//! with ordinary stacks touches the ring's first pages only. A walk that the ring's free space cuts
//! short (a deep stack while the sampler thread is late) is not recorded but counted as dropped: a
//! stack is recorded whole, or cut at `MAX_FRAMES` only.
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
//! ([`add_osr_code`]); when a frame's code is OSR code, the walk moves up to the tier-0 frame —
//! the slot above the fake one that holds the same saved RBP — and reads the return address there,
//! as the runtime's own unwinder does from the OSR method's unwind info (which describes the
//! tier-0 frame too).
//!
//! Optimized code without an RBP frame (an RSP-based frame of fixed size) needs another. Such code
//! leaves RBP as its caller's (RBP is never a scratch register in x64 JIT code), so the walk from
//! its callee's frame goes straight to its caller's frame and loses its caller. The agent reads
//! the prolog of each code version and publishes the frameless ones with their frame size
//! ([`add_frameless_code`]); when a return address read from the stack points into such code past
//! its prolog, that code's SP at the call was just above the return slot, and its own return
//! address lies its frame size higher: the walk records it (and goes on when it is frameless code
//! too), reading only between the two frame records. The runtime's unwinder gets the same size
//! from the method's unwind info, which the profiling API does not expose. Code the runtime can
//! free (DynamicMethods, collectible modules) is published when it is compiled and removed at its
//! unload callback, before the runtime frees it ([`remove_frameless_code`]).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Deepest stack the handler records (async-profiler's default depth).
pub const MAX_FRAMES: usize = 2048;
/// Words of a thread's ring of samples: the samples a thread can hold between two drains of the
/// sampler thread, [`RECORD_HEADER`] words each plus one per IP.
pub const RING_WORDS: usize = 16 * 1024;
/// Words before a record's IPs: the number of IPs (or [`SKIP`]), the word at SP, the activity,
/// the activity's sequence number.
const RECORD_HEADER: usize = 4;
/// A record's first word when the rest of the ring up to its end is unused: the next record is
/// at the ring's start.
const SKIP: u64 = u64::MAX;
/// Most threads the sampler tracks at once (slots are reused after a thread dies).
pub const MAX_SLOTS: usize = 8192;
const MAGIC: u64 = 0x636c_7270_726f_6631;
/// `si_code` of a POSIX timer signal.
const SI_TIMER: i32 = -2;

/// Slot states.
pub const FREE: u32 = 0;
pub const ACTIVE: u32 = 1;
/// The thread is gone; the sampler drains what is left, then frees the slot.
pub const DEAD: u32 = 2;

/// Per-thread sampling state shared between the thread's signal handler (producer) and the
/// sampler thread (consumer). Slots are allocated once and never freed.
pub struct Slot {
    magic: u64,
    pub state: AtomicU32,
    pub os_tid: AtomicU32,
    /// The runtime's ThreadID.
    pub thread_id: AtomicUsize,
    stack_lo: AtomicU64,
    stack_hi: AtomicU64,
    /// The interrupted SP of the latest sample taken while the stack bounds were unknown (a
    /// thread registered from another thread at attach): the sampler finds the stack from it.
    seen_sp: AtomicU64,
    /// A thread registered from another thread (at attach): it records no sample until the
    /// sampler has found its stack (its signals note the stack pointer meanwhile; a sample without
    /// the stack would hold only the leaf) and has published the code that existed before the
    /// attach to the handler's tables (OSR and frameless code, without which callers are lost).
    /// 0: recording; 1: registered, not seen by the sampler yet; 2: seen once (the code queued
    /// before the registration is published by the next pass).
    probe: AtomicU32,
    /// Kernel timer id, -1 when none.
    timer: AtomicI64,
    period_ns: AtomicU64,
    rng: AtomicU64,
    /// Words written to the ring and words consumed (counters; a word's place is the counter
    /// modulo [`RING_WORDS`]).
    head: AtomicU64,
    tail: AtomicU64,
    /// Samples recorded (wrapping).
    taken: AtomicU32,
    pub dropped: AtomicU64,
    /// CPU time (ns) read when the thread died, for the last drain.
    pub final_cpu_ns: AtomicU64,
    /// Its run-queue wait (ns, `schedstat`) read when the thread died, `u64::MAX` when unknown.
    pub final_runq_ns: AtomicU64,
    /// CPU time (ns) the thread had used when it was registered.
    pub start_cpu_ns: AtomicU64,
    /// When the thread was registered and when it died (ns since the agent started; 0 until
    /// known), set by the sampler: its wall time runs from one to the other.
    pub registered_ns: AtomicU64,
    pub died_ns: AtomicU64,
    /// The runtime work in progress on the thread (JIT compilations, type, assembly and module
    /// loads, nested: innermost last), written by the thread's own callbacks and read by its
    /// signal handler (`clrprof_trace::runtime_activity` words). `act_depth` may exceed the
    /// array: deeper entries are counted, not kept.
    act: [AtomicU64; ACT_DEPTH],
    /// The sequence number of each entry's begin (counted per thread by `act_begins`, from 1).
    act_seq: [AtomicU32; ACT_DEPTH],
    act_begins: AtomicU32,
    /// Entries of work that never runs managed code (JIT compilations, type loads, ReadyToRun
    /// lookups) begun at or before this sequence number are over: the sampler saw the thread run
    /// managed code with such an entry innermost (their end callback never came).
    act_discard: AtomicU32,
    act_depth: AtomicU32,
    /// Bits [`IN_GC`] and [`IN_GC_SUSPENSION`]: the thread is collecting or suspending for a GC.
    act_gc: AtomicU32,
    /// The thread is dispatching an exception (thrown, no catch entered yet).
    act_exception: AtomicBool,
    /// The ring of samples: [`RING_WORDS`] words of an anonymous mapping (pages the thread never
    /// reaches stay untouched), null when it could not be mapped (the thread records nothing).
    /// Each record: the number of IPs `len`, the word at the interrupted SP (the return address
    /// when the leaf has no frame yet, or none at all; checked off the signal path), what the
    /// thread was doing in the runtime ([`Slot::activity`], 0 for nothing known), then `len` IPs,
    /// leaf first.
    ring: *mut u64,
}

/// Nested runtime activities a slot keeps (deeper ones are counted only).
const ACT_DEPTH: usize = 8;
/// `Slot::act_gc` bits.
pub const IN_GC: u32 = 1;
pub const IN_GC_SUSPENSION: u32 = 2;

// Safety: `ring` is a single-producer (the slot's thread, in its signal handler, which cannot
// nest because SIGPROF is blocked while it runs) single-consumer (the sampler thread) ring whose
// words are handed over through `head`/`tail` with release/acquire ordering; the mapping is never
// unmapped (slots live as long as the process).
unsafe impl Sync for Slot {}
unsafe impl Send for Slot {}

static SLOTS: [AtomicPtr<Slot>; MAX_SLOTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_SLOTS];
static SLOT_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Most OSR code ranges the handler knows (later ones are walked the ordinary way).
pub const MAX_OSR_RANGES: usize = 4096;
/// Most frameless code ranges the handler knows (later ones lose their callers, as before).
pub const MAX_FRAMELESS_RANGES: usize = 16384;
/// Most bytes of a tier-0 frame searched for its saved RBP.
const MAX_TIER0_FRAME: u64 = 64 * 1024;

/// Code ranges shared with the signal handler, sorted by start, each with a word of information.
/// One writer at a time (serialized by `writer`, not on the signal path) inserts; the handler only
/// loads atomics. `seq` is odd while an insertion moves entries, and the handler then ignores the
/// table for that sample. A stale or torn read can only make the walk try (or skip) a step, and
/// every step checks the stack itself. Code that can be freed (collectible modules, DynamicMethods)
/// is removed before the runtime frees it ([`CodeTable::remove`], from the unload callbacks); the
/// page filter keeps its bits (a stale bit only costs a search).
struct CodeTable<const N: usize> {
    seq: AtomicU64,
    len: AtomicUsize,
    start: [AtomicU64; N],
    end: [AtomicU64; N],
    info: [AtomicU64; N],
    /// A filter in front of the table: bit `(page % 4096)` is set for every 4 KiB page that holds
    /// code of the table (bits are only ever set, before their range is published), so most
    /// lookups cost one load.
    pages: [AtomicU64; 64],
    writer: std::sync::Mutex<()>,
}

impl<const N: usize> CodeTable<N> {
    const fn new() -> Self {
        CodeTable {
            seq: AtomicU64::new(0),
            len: AtomicUsize::new(0),
            start: [const { AtomicU64::new(0) }; N],
            end: [const { AtomicU64::new(0) }; N],
            info: [const { AtomicU64::new(0) }; N],
            pages: [const { AtomicU64::new(0) }; 64],
            writer: std::sync::Mutex::new(()),
        }
    }

    /// Inserts `[start, end)` with `info`; false when the table is full or the range empty. A
    /// range already known (same start) is left as it is.
    fn add(&self, start: u64, end: u64, info: u64) -> bool {
        self.insert(start, end, info, false)
    }

    /// As [`CodeTable::add`], but a range already known by its start grows to `end` when that
    /// lies further: a mapping that grew in place (the kernel merges a new mapping with the one
    /// before it when they are adjacent parts of one file, as the runtime's executable memory is).
    fn add_or_grow(&self, start: u64, end: u64, info: u64) -> bool {
        self.insert(start, end, info, true)
    }

    fn insert(&self, start: u64, end: u64, info: u64, grow: bool) -> bool {
        if start >= end {
            return false;
        }
        let _g = self.writer.lock();
        let n = self.len.load(Ordering::Relaxed);
        // The first entry starting after `start` (entries are sorted by start).
        let pos = self.start[..n].partition_point(|s| s.load(Ordering::Relaxed) <= start);
        if pos > 0 && self.start[pos - 1].load(Ordering::Relaxed) == start {
            let old = self.end[pos - 1].load(Ordering::Relaxed);
            if grow && old < end {
                self.mark_pages(old, end);
                self.seq.fetch_add(1, Ordering::Relaxed);
                std::sync::atomic::fence(Ordering::Release);
                self.end[pos - 1].store(end, Ordering::Relaxed);
                self.seq.fetch_add(1, Ordering::Release);
            }
            return true;
        }
        if n >= N {
            return false;
        }
        self.mark_pages(start, end);
        self.seq.fetch_add(1, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        for i in (pos..n).rev() {
            self.start[i + 1].store(self.start[i].load(Ordering::Relaxed), Ordering::Relaxed);
            self.end[i + 1].store(self.end[i].load(Ordering::Relaxed), Ordering::Relaxed);
            self.info[i + 1].store(self.info[i].load(Ordering::Relaxed), Ordering::Relaxed);
        }
        self.start[pos].store(start, Ordering::Relaxed);
        self.end[pos].store(end, Ordering::Relaxed);
        self.info[pos].store(info, Ordering::Relaxed);
        self.len.store(n + 1, Ordering::Relaxed);
        self.seq.fetch_add(1, Ordering::Release);
        true
    }

    /// Sets the page filter's bits for `[from, end)`, before the range is published.
    fn mark_pages(&self, from: u64, end: u64) {
        let pages = (end - 1) / 4096 - from / 4096;
        for p in 0..=pages.min(64 * 64) {
            let (w, b) = page_bit(from + p * 4096);
            self.pages[w].fetch_or(b, Ordering::Relaxed);
        }
    }

    /// Removes the range starting at `start`; false when there is none. Entries above it move down
    /// while `seq` is odd, as in [`CodeTable::add`]; a handler that read the length before sees a
    /// stale copy of the last entry at worst, which every step checks against the stack.
    fn remove(&self, start: u64) -> bool {
        let _g = self.writer.lock();
        let n = self.len.load(Ordering::Relaxed);
        let pos = self.start[..n].partition_point(|s| s.load(Ordering::Relaxed) < start);
        if pos == n || self.start[pos].load(Ordering::Relaxed) != start {
            return false;
        }
        self.seq.fetch_add(1, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        for i in pos..n - 1 {
            self.start[i].store(self.start[i + 1].load(Ordering::Relaxed), Ordering::Relaxed);
            self.end[i].store(self.end[i + 1].load(Ordering::Relaxed), Ordering::Relaxed);
            self.info[i].store(self.info[i + 1].load(Ordering::Relaxed), Ordering::Relaxed);
        }
        self.len.store(n - 1, Ordering::Relaxed);
        self.seq.fetch_add(1, Ordering::Release);
        true
    }

    /// The range holding `ip`, taking the writer's lock (not on the signal path).
    fn known(&self, ip: u64) -> Option<(u64, u64)> {
        let _g = self.writer.lock();
        self.find(self.len.load(Ordering::Relaxed).min(N), ip)
    }

    /// Number of ranges the handler may search now (0 while an insertion is under way).
    fn visible(&self) -> usize {
        if self.seq.load(Ordering::Acquire) & 1 == 1 {
            return 0;
        }
        self.len.load(Ordering::Acquire).min(N)
    }

    /// False when no range of the table lies in `ip`'s page (the filter; one load).
    #[inline(always)]
    fn may_hold(&self, ip: u64) -> bool {
        let (w, b) = page_bit(ip);
        self.pages[w].load(Ordering::Relaxed) & b != 0
    }

    /// (start, info) of the range among the first `n` that holds `ip` (binary search;
    /// async-signal-safe).
    fn find(&self, n: usize, ip: u64) -> Option<(u64, u64)> {
        let (w, b) = page_bit(ip);
        if n == 0 || self.pages[w].load(Ordering::Relaxed) & b == 0 {
            return None;
        }
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.start[mid].load(Ordering::Relaxed) <= ip {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo > 0 && ip < self.end[lo - 1].load(Ordering::Relaxed) {
            Some((self.start[lo - 1].load(Ordering::Relaxed), self.info[lo - 1].load(Ordering::Relaxed)))
        } else {
            None
        }
    }
}

/// Code ranges of OSR code versions.
static OSR: CodeTable<MAX_OSR_RANGES> = CodeTable::new();
/// Code of managed code versions without an RBP frame (RSP-based frames of fixed size), with
/// their [`FramelessFrame`] packed by [`FramelessFrame::pack`].
static FRAMELESS: CodeTable<MAX_FRAMELESS_RANGES> = CodeTable::new();

/// Most native code mappings whose unwind rules the handler knows.
pub const MAX_NATIVE_RANGES: usize = 1024;
/// Most executable mappings the handler knows.
pub const MAX_EXEC_RANGES: usize = 4096;
/// Every executable mapping (native code, managed images, JIT code heaps): a return address
/// read from a frame record must lie in one, or the record is no frame record.
static EXEC: CodeTable<MAX_EXEC_RANGES> = CodeTable::new();

/// Makes an executable mapping known to the handler (not on the signal path); one known by its
/// start grows with it. False when the table is full.
pub fn add_exec_range(start: u64, end: u64) -> bool {
    EXEC.add_or_grow(start, end, 0)
}

/// Whether `fp` looks like a frame record: on the stack between `floor` and the top, aligned, its
/// saved RBP either 0 (the outermost frame) or a higher address on the stack, and its return
/// address not on the stack. Native code without frame pointers leaves whatever it keeps in RBP
/// (a string, a heap or stack pointer) where a frame pointer would be; this tells most such values
/// from frame records without knowing where code lies.
///
/// # Safety
/// `[floor, hi)` must be mapped stack of the current thread.
#[inline(always)]
unsafe fn frame_record_sound(fp: u64, floor: u64, hi: u64) -> bool {
    if fp < floor || fp > hi.saturating_sub(16) || !fp.is_multiple_of(8) {
        return false;
    }
    let next = *(fp as *const u64);
    let ret = *((fp + 8) as *const u64);
    (next == 0 || (next > fp && next <= hi - 16)) && ret >= 4096 && !(ret >= floor && ret < hi)
}

/// Most RSP-based native frames stepped through with unwind rules in one sample.
const MAX_NATIVE_STEPS: usize = 32;

/// Mapped native code with unwind rules (`super::cfi`): the info word points to its
/// [`NativeRules`] (leaked, never freed).
static NATIVE: CodeTable<MAX_NATIVE_RANGES> = CodeTable::new();

/// The unwind rules of one mapping of native code: a mapped address `ip` is the file's virtual
/// address `ip - bias`.
pub struct NativeRules {
    pub bias: u64,
    pub rows: &'static [u64],
}

/// Makes the unwind rules of the native code mapped at `[start, end)` known to the handler (not on
/// the signal path: it takes a lock). False when the table is full.
pub fn add_native_code(start: u64, end: u64, rules: &'static NativeRules) -> bool {
    NATIVE.add(start, end, rules as *const NativeRules as u64)
}

/// Steps through the RSP-based frames of native code without frame pointers from the interrupted
/// state (`pc`, `sp`, `fp`), by the unwind rules of the mapped files: each frame's return address
/// lies at its CFA − 8 and the caller's RBP is either the same or saved in the frame. Records the
/// return addresses from `ips[n]` on and stops at code without such a rule (managed code, an RBP
/// frame, code without rules), where the frame-pointer walk takes over. Returns the new `n`, the
/// caller's RBP and SP, and the last return address; when no step was taken, whether the rules say
/// the code at `pc` has its RBP frame set up (its caller is then found through RBP, and the word at
/// SP is a local of it, no return address). A return
/// address outside the known executable mappings is not taken when `strict`, nor when RBP holds what looks like a frame record. Every slot read lies between the
/// frame's SP and the stack's top (`hi`); each CFA is above the SP it came from.
///
/// # Safety
/// `[sp, hi)` must be mapped stack of the current thread.
#[inline(never)]
unsafe fn native_steps(
    ips: &mut [u64],
    mut n: usize,
    pc: u64,
    sp: u64,
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
        // record, nor past the first step. (A library mapped less than a second ago is not known
        // yet: the leaf's return address into it still follows the rules when RBP holds no frame
        // record, as in code without frame pointers.)
        if exec != 0 && !code_known(exec, ret - 1) && (strict || step > 0 || frame_record_sound(fp, sp, hi)) {
            break;
        }
        if row.rbp_slot != 0 {
            let slot = cfa - 8 * row.rbp_slot as u64;
            if slot < sp || slot > hi - 8 {
                break;
            }
            fp = *(slot as *const u64);
        }
        ips[n] = ret;
        n += 1;
        last = Some(ret);
        sp = cfa;
        // Return addresses are looked up at the call, one byte earlier.
        pc = ret - 1;
    }
    last.map(|ret| (n, fp, sp, ret)).ok_or(false)
}

/// Whether `ip` lies in code the handler knows: an executable mapping as of the sampler's last
/// read of `/proc/self/maps` (`exec`: the visible length of that table), or managed code published
/// since (OSR code is published when it is compiled, before it runs; the mappings are read again
/// every second).
#[inline(always)]
fn code_known(exec: usize, ip: u64) -> bool {
    EXEC.find(exec, ip).is_some()
        || (OSR.may_hold(ip) && OSR.find(OSR.visible(), ip).is_some())
        || (FRAMELESS.may_hold(ip) && FRAMELESS.find(FRAMELESS.visible(), ip).is_some())
}

fn page_bit(ip: u64) -> (usize, u64) {
    let h = (ip >> 12) as usize % (64 * 64);
    (h / 64, 1 << (h % 64))
}

/// Makes `[start, end)` known to the handler as the code of an OSR method version. False when the
/// table is full or the range is empty (not on the signal path: it takes a lock).
pub fn add_osr_code(start: u64, end: u64) -> bool {
    OSR.add(start, end, 0)
}

/// True when `ip` is in a known OSR code range (not on the signal path).
pub fn osr_code_known(ip: u64) -> bool {
    OSR.known(ip).is_some()
}

/// The fixed frame of a code version that does not set up RBP (the JIT's RSP-based frames: RBP
/// is never a scratch register on x64, so such code leaves RBP as its caller's): after its prolog
/// (`prolog` bytes from the entry: pushes of callee-saved registers, then `sub rsp, N` or
/// `push rax`), its return address is `size` bytes above its SP, and SP does not move until the
/// epilog (outgoing arguments have a fixed area; `localloc` requires an RBP frame). Calls are
/// only made after the prolog, so at a return address into such code the frame is complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FramelessFrame {
    pub size: u32,
    pub prolog: u32,
}

impl FramelessFrame {
    fn pack(self) -> u64 {
        (self.prolog as u64) << 32 | self.size as u64
    }
    fn unpack(v: u64) -> Self {
        FramelessFrame { size: v as u32, prolog: (v >> 32) as u32 }
    }
}

/// Makes `[start, end)` known to the handler as code of a frameless code version whose entry is
/// `start` (not on the signal path: it takes a lock). False when the table is full or the range
/// is empty.
pub fn add_frameless_code(start: u64, end: u64, frame: FramelessFrame) -> bool {
    FRAMELESS.add(start, end, frame.pack())
}

/// Forgets the frameless code range starting at `start` (its code is about to be freed: a
/// DynamicMethod or a collectible module unloads). Not on the signal path.
pub fn remove_frameless_code(start: u64) -> bool {
    FRAMELESS.remove(start)
}

/// True when `ip` is in a known frameless code range (not on the signal path).
pub fn frameless_code_known(ip: u64) -> bool {
    FRAMELESS.known(ip).is_some()
}

/// Most stack words above SP searched for the copy of RBP a prolog pushed (`push rbp`, then
/// callee-saved registers and a small `sub rsp`).
const MAX_PROLOG_WORDS: u64 = 16;

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
unsafe fn prolog_return_address(sp: u64, fp: u64, hi: u64) -> Option<u64> {
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
unsafe fn tier0_frame(fp: u64, hi: u64) -> Option<u64> {
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
unsafe fn frameless_callers(
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
const MAX_EPILOG_POPS: u64 = 8;

/// Where the return address of frameless code stopped at `ip` (SP `sp`) lies, given its frame
/// size: `size` bytes above SP in its body, or — in its epilog, once `add rsp` has run and only
/// `pop`s and `ret` remain — 8 bytes above SP for each register still to pop. None in an epilog
/// that does not end in `ret`, and at a jump (a tail call's `jmp` follows the epilog, a loop's
/// lies in the body: where the frame stands cannot be told).
/// Reads the instruction bytes from `ip` on, only through the `pop`s up to the `ret`.
///
/// # Safety
/// `ip` must be the interrupted IP (code being executed, so mapped).
unsafe fn frameless_return_slot(ip: u64, sp: u64, size: u32) -> Option<u64> {
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
unsafe fn frameless_leaf(
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

/// The previous `SIGPROF` disposition, for chaining.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);

impl Slot {
    fn new() -> Box<Slot> {
        Box::new(Slot {
            magic: MAGIC,
            state: AtomicU32::new(FREE),
            os_tid: AtomicU32::new(0),
            thread_id: AtomicUsize::new(0),
            stack_lo: AtomicU64::new(0),
            stack_hi: AtomicU64::new(0),
            seen_sp: AtomicU64::new(0),
            probe: AtomicU32::new(0),
            timer: AtomicI64::new(-1),
            period_ns: AtomicU64::new(10_000_000),
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            taken: AtomicU32::new(0),
            dropped: AtomicU64::new(0),
            final_cpu_ns: AtomicU64::new(0),
            final_runq_ns: AtomicU64::new(u64::MAX),
            start_cpu_ns: AtomicU64::new(0),
            registered_ns: AtomicU64::new(0),
            died_ns: AtomicU64::new(0),
            act: [const { AtomicU64::new(0) }; ACT_DEPTH],
            act_seq: [const { AtomicU32::new(0) }; ACT_DEPTH],
            act_begins: AtomicU32::new(0),
            act_discard: AtomicU32::new(0),
            act_depth: AtomicU32::new(0),
            act_gc: AtomicU32::new(0),
            act_exception: AtomicBool::new(false),
            ring: map_ring(),
        })
    }

    /// Hands the samples recorded since the last call to `f` (IPs leaf first, the word at SP, the
    /// activity and its sequence number), oldest first (sampler thread only). Returns how many.
    pub fn drain(&self, mut f: impl FnMut(&[u64], u64, u64, u32)) -> usize {
        let mut t = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Acquire);
        if self.ring.is_null() {
            return 0;
        }
        let mut n = 0;
        while t < head {
            let pos = (t % RING_WORDS as u64) as usize;
            // Safety: words in tail..head were published by the producer (release on head) and are
            // not written again until `tail` moves past them; `pos` is inside the ring.
            let w = |i: usize| unsafe { *self.ring.add(i) };
            let len = w(pos);
            if len == SKIP {
                t += (RING_WORDS - pos) as u64;
                continue;
            }
            let len = len as usize;
            // The producer never writes a record past the ring's end; anything else is no record.
            if len > MAX_FRAMES || pos + RECORD_HEADER + len > RING_WORDS {
                t = head;
                break;
            }
            // Safety: as above, the record's words lie inside the ring.
            let ips = unsafe { std::slice::from_raw_parts(self.ring.add(pos + RECORD_HEADER), len) };
            f(ips, w(pos + 1), w(pos + 2), w(pos + 3) as u32);
            t += (RECORD_HEADER + len) as u64;
            n += 1;
        }
        self.tail.store(t, Ordering::Release);
        n
    }

    /// The thread's CPU time so far, ns (None once the thread is gone).
    pub fn cpu_ns(&self) -> Option<u64> {
        thread_cpu_ns(self.os_tid.load(Ordering::Relaxed))
    }

    /// The runtime work the thread is doing now (a `runtime_activity` word, 0 for none): the
    /// innermost GC, else the innermost nested load or compilation not known to be over, else
    /// exception dispatch. Async-signal-safe (atomic loads only).
    pub fn activity(&self) -> u64 {
        self.activity_and_seq().0
    }

    /// [`Slot::activity`] and the sequence number of its begin (0 for a GC or an exception).
    pub fn activity_and_seq(&self) -> (u64, u32) {
        use clrprof_trace::runtime_activity as ra;
        if self.act_gc.load(Ordering::Relaxed) != 0 {
            return (ra::pack(ra::GC, 0), 0);
        }
        let d = (self.act_depth.load(Ordering::Acquire) as usize).min(ACT_DEPTH);
        let discard = self.act_discard.load(Ordering::Relaxed);
        for i in (0..d).rev() {
            let w = self.act[i].load(Ordering::Relaxed);
            let seq = self.act_seq[i].load(Ordering::Relaxed);
            if !(native_only(w) && seq <= discard) {
                return (w, seq);
            }
        }
        if self.act_exception.load(Ordering::Relaxed) {
            return (ra::pack(ra::EXCEPTION, 0), 0);
        }
        (0, 0)
    }

    /// The sampler saw this thread run managed code while the innermost activity, begun as
    /// `seq`, was work that never runs managed code: that work is over (its end callback never
    /// came: the runtime skips `JITCachedFunctionSearchFinished` when it rejects precompiled code,
    /// and a load or compilation that fails with an exception caught in native code reports no
    /// end), so it and every such entry begun before it are ignored from now on and dropped at
    /// the thread's next begin. Any thread may call this.
    pub fn discard_activities(&self, seq: u32) {
        self.act_discard.fetch_max(seq, Ordering::Relaxed);
    }

    fn reset_activity(&self) {
        self.act_depth.store(0, Ordering::Relaxed);
        self.act_begins.store(0, Ordering::Relaxed);
        self.act_discard.store(0, Ordering::Relaxed);
        self.act_gc.store(0, Ordering::Relaxed);
        self.act_exception.store(false, Ordering::Relaxed);
    }
}

thread_local! {
    /// The calling thread's slot (set when the thread registers itself, or found once it was
    /// registered from another thread), for its callbacks.
    static CURRENT: std::cell::Cell<Option<&'static Slot>> = const { std::cell::Cell::new(None) };
    /// [`REGISTERED_ELSEWHERE`] when the thread last looked for a slot of its own.
    static LOOKED_UP: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
}

/// Threads registered from another thread so far (at attach, the threads that existed before).
static REGISTERED_ELSEWHERE: AtomicU32 = AtomicU32::new(0);

/// The calling thread's active slot, if it was registered and still owns it. A thread registered
/// from another thread (at attach) finds its slot at its first callback after that (one scan of
/// the slot table per such registration at most), so its runtime work is recorded too: without
/// it, the tiered-compilation thread that existed before an attach showed a bare `[JIT]`.
fn current() -> Option<&'static Slot> {
    let me = crate::profiler::os_tid();
    // A slot is reused after its thread died: never write into another thread's slot.
    let owns = |s: &Slot| s.state.load(Ordering::Acquire) == ACTIVE && s.os_tid.load(Ordering::Relaxed) == me;
    if let Some(s) = CURRENT.try_with(|c| c.get()).ok().flatten().filter(|s| owns(s)) {
        return Some(s);
    }
    let generation = REGISTERED_ELSEWHERE.load(Ordering::Acquire);
    if LOOKED_UP.try_with(|g| g.replace(generation)).ok()? == generation {
        return None;
    }
    let s = slots().find(|s| owns(s))?;
    let _ = CURRENT.try_with(|c| c.set(Some(s)));
    Some(s)
}

/// True for runtime work that never runs managed code while it is in progress: JIT compilations,
/// type loads and ReadyToRun lookups (assembly loads may call managed resolvers).
pub fn native_only(word: u64) -> bool {
    use clrprof_trace::runtime_activity as ra;
    matches!(ra::unpack(word).0, ra::JIT | ra::TYPE_LOAD | ra::READY_TO_RUN)
}

/// The calling thread starts runtime work `word` (a `runtime_activity` word): samples taken until
/// the matching [`activity_end`] carry it.
///
/// Entries known to be over are dropped first: those the sampler discarded
/// ([`Slot::discard_activities`]), and a lookup of the same function's precompiled code when this
/// is its JIT compilation or another lookup of it. The runtime's `ReadyToRunInfo::GetEntryPoint`
/// (`vm/readytoruninfo.cpp`) raises `JITCachedFunctionSearchStarted` and returns without
/// `…Finished` when the method's fixups fail or the profiler rejects the code; the method is then
/// JIT-compiled (or looked up in another image), so its search ended there.
pub fn activity_begin(word: u64) {
    use clrprof_trace::runtime_activity as ra;
    let Some(s) = current() else { return };
    let mut d = s.act_depth.load(Ordering::Relaxed) as usize;
    if d <= ACT_DEPTH {
        let discard = s.act_discard.load(Ordering::Relaxed);
        while d > 0
            && native_only(s.act[d - 1].load(Ordering::Relaxed))
            && s.act_seq[d - 1].load(Ordering::Relaxed) <= discard
        {
            d -= 1;
        }
        let (kind, id) = ra::unpack(word);
        if matches!(kind, ra::JIT | ra::READY_TO_RUN) {
            let search = ra::pack(ra::READY_TO_RUN, id);
            if let Some(i) = (0..d).rev().find(|&i| s.act[i].load(Ordering::Relaxed) == search) {
                d = i;
            }
        }
    }
    let seq = s.act_begins.load(Ordering::Relaxed).wrapping_add(1).max(1);
    s.act_begins.store(seq, Ordering::Relaxed);
    if d < ACT_DEPTH {
        s.act[d].store(word, Ordering::Relaxed);
        s.act_seq[d].store(seq, Ordering::Relaxed);
    }
    // Release: the handler that sees the new depth sees the entry.
    s.act_depth.store((d + 1) as u32, Ordering::Release);
}

/// The calling thread finished runtime work `word`: it and anything begun inside it and not
/// finished (a failed load whose finish never came) end. Unknown words are ignored.
pub fn activity_end(word: u64) {
    let Some(s) = current() else { return };
    let d = s.act_depth.load(Ordering::Relaxed) as usize;
    if d > ACT_DEPTH {
        s.act_depth.store((d - 1) as u32, Ordering::Release);
        return;
    }
    if let Some(i) = (0..d).rev().find(|&i| s.act[i].load(Ordering::Relaxed) == word) {
        s.act_depth.store(i as u32, Ordering::Release);
    }
}

/// A managed `catch` runs on the calling thread (`ExceptionCatcherEnter`): work that never runs
/// managed code (JIT compilations, type loads, ReadyToRun lookups) cannot be in progress under it,
/// so such entries were left by a load that failed with an exception (whose stop event never
/// came). The stack is cut at the oldest of them.
pub fn activity_unwound() {
    let Some(s) = current() else { return };
    let d = (s.act_depth.load(Ordering::Relaxed) as usize).min(ACT_DEPTH);
    if let Some(i) = (0..d).find(|&i| native_only(s.act[i].load(Ordering::Relaxed))) {
        s.act_depth.store(i as u32, Ordering::Release);
    }
}

/// Samples the calling thread's handler has taken so far (wrapping), None when the thread is
/// not sampled.
pub fn samples_taken() -> Option<u32> {
    current().map(|s| s.taken.load(Ordering::Relaxed).wrapping_add(s.dropped.load(Ordering::Relaxed) as u32))
}

/// Sets or clears a GC bit ([`IN_GC`], [`IN_GC_SUSPENSION`]) of the calling thread.
pub fn activity_gc(bit: u32, on: bool) {
    let Some(s) = current() else { return };
    if on {
        s.act_gc.fetch_or(bit, Ordering::Relaxed);
    } else {
        s.act_gc.fetch_and(!bit, Ordering::Relaxed);
    }
}

/// The calling thread starts (`ExceptionThrown`) or ends (`ExceptionCatcherEnter`) an exception
/// dispatch.
pub fn activity_exception(on: bool) {
    if let Some(s) = current() {
        s.act_exception.store(on, Ordering::Relaxed);
    }
}

/// Clears every thread's exception-dispatch mark: when the exception callbacks are paused, the
/// catches that would clear them are not seen.
pub fn clear_exception_activity() {
    for s in slots() {
        s.act_exception.store(false, Ordering::Relaxed);
    }
}

/// CPU time of a thread of this process, read from its CPU-time clock (no signal involved).
pub fn thread_cpu_ns(tid: u32) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: a per-thread CPU clock id; clock_gettime writes `ts` or fails.
    let r = unsafe { libc::clock_gettime(thread_clock(tid), &mut ts) };
    (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Time a thread of this process has waited on a run queue for a CPU, ns (the second field of
/// `/proc/self/task/<tid>/schedstat`). Not for the signal path.
pub fn thread_runq_ns(tid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// The kernel's CPU-time clock of thread `tid`: `CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED` on `~tid`.
fn thread_clock(tid: u32) -> libc::clockid_t {
    ((!(tid as libc::clockid_t)) << 3) | 6
}

/// Every slot ever allocated (some may be free).
pub fn slots() -> impl Iterator<Item = &'static Slot> {
    let n = SLOT_COUNT.load(Ordering::Acquire).min(MAX_SLOTS);
    (0..n).filter_map(|i| {
        let p = SLOTS[i].load(Ordering::Acquire);
        // Safety: slots are leaked boxes, never freed.
        (!p.is_null()).then(|| unsafe { &*p })
    })
}

/// The active slot of a runtime thread.
pub fn slot_of_thread(thread_id: usize) -> Option<&'static Slot> {
    slots().find(|s| s.state.load(Ordering::Acquire) == ACTIVE && s.thread_id.load(Ordering::Relaxed) == thread_id)
}

/// Takes a free slot (or allocates one) for a thread; None when the table is full.
fn claim(os_tid: u32, thread_id: usize) -> Option<&'static Slot> {
    let fill = |s: &'static Slot| {
        s.os_tid.store(os_tid, Ordering::Relaxed);
        s.thread_id.store(thread_id, Ordering::Relaxed);
        s.stack_lo.store(0, Ordering::Relaxed);
        s.stack_hi.store(0, Ordering::Relaxed);
        s.seen_sp.store(0, Ordering::Relaxed);
        s.probe.store(0, Ordering::Relaxed);
        s.rng.store(0x9e37_79b9_7f4a_7c15 ^ ((os_tid as u64) << 17 | 1), Ordering::Relaxed);
        s.reset_activity();
        s
    };
    for s in slots() {
        if s.state.compare_exchange(FREE, ACTIVE, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            return Some(fill(s));
        }
    }
    let i = SLOT_COUNT.fetch_add(1, Ordering::AcqRel);
    if i >= MAX_SLOTS {
        SLOT_COUNT.store(MAX_SLOTS, Ordering::Release);
        return None;
    }
    let s: &'static Slot = Box::leak(Slot::new());
    s.state.store(ACTIVE, Ordering::Release);
    SLOTS[i].store(s as *const Slot as *mut Slot, Ordering::Release);
    Some(fill(s))
}

/// Installs the `SIGPROF` handler (once), keeping the previous disposition for chaining.
pub fn install_handler() -> std::io::Result<()> {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    // Safety: plain sigaction calls with zeroed, then filled, structures.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGPROF, std::ptr::null(), &mut old) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let _ = PREVIOUS.set(old);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigprof as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Registers the calling thread (`ThreadAssignedToOSThread` runs on it): records its stack bounds
/// and, when `period_ns` is set, starts its CPU-time timer. Returns the slot (None when the table
/// is full) and the reason the timer could not be started, if any.
pub fn register_current(
    os_tid: u32,
    thread_id: usize,
    period_ns: Option<u64>,
) -> (Option<&'static Slot>, Option<String>) {
    let Some(slot) = claim(os_tid, thread_id) else {
        return (None, Some("sampler thread table is full".into()));
    };
    // Safety: gettid has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    let bounds = if me == os_tid {
        let _ = CURRENT.try_with(|c| c.set(Some(slot)));
        current_stack_bounds()
    } else {
        REGISTERED_ELSEWHERE.fetch_add(1, Ordering::Release);
        stack_bounds_of(os_tid)
    };
    if let Some((lo, hi)) = bounds {
        slot.stack_lo.store(lo, Ordering::Relaxed);
        slot.stack_hi.store(hi, Ordering::Relaxed);
    }
    slot.head.store(0, Ordering::Relaxed);
    slot.tail.store(0, Ordering::Relaxed);
    slot.final_cpu_ns.store(0, Ordering::Relaxed);
    slot.final_runq_ns.store(u64::MAX, Ordering::Relaxed);
    slot.start_cpu_ns.store(slot.cpu_ns().unwrap_or(0), Ordering::Relaxed);
    let Some(period_ns) = period_ns else { return (Some(slot), None) };
    slot.period_ns.store(period_ns.max(1000), Ordering::Relaxed);
    // A thread registered at attach records samples once the sampler lets it (see `probe`).
    slot.probe.store(if me != os_tid { 1 } else { 0 }, Ordering::Release);
    match create_timer(slot, os_tid) {
        Ok(id) => {
            slot.timer.store(id as i64, Ordering::Release);
            (Some(slot), None)
        }
        Err(e) => (Some(slot), Some(format!("timer_create for thread {os_tid}: {e}"))),
    }
}

/// Stops a thread's timer and hands its slot to the sampler for a last drain.
pub fn unregister(slot: &Slot) {
    let t = slot.timer.swap(-1, Ordering::AcqRel);
    if t >= 0 {
        // Safety: deletes a timer this module created.
        unsafe { libc::syscall(libc::SYS_timer_delete, t as libc::c_long) };
    }
    slot.final_cpu_ns.store(slot.cpu_ns().unwrap_or(0), Ordering::Relaxed);
    let runq = thread_runq_ns(slot.os_tid.load(Ordering::Relaxed)).unwrap_or(u64::MAX);
    slot.final_runq_ns.store(runq, Ordering::Relaxed);
    slot.state.store(DEAD, Ordering::Release);
}

/// Marks a drained dead slot reusable (sampler thread only).
pub fn release(slot: &Slot) {
    slot.thread_id.store(0, Ordering::Relaxed);
    slot.state.store(FREE, Ordering::Release);
}

/// Lets threads registered from another thread (threads that existed before `clrprof attach`)
/// record samples once their stack is known: the stack pointer of a thread blocked in a system
/// call or preempted (`/proc/self/task/TID/syscall`), or the one its signal handler noted, lies
/// in its stack's mapping. Called on the sampler thread after it published the code known so
/// far; returns the slots that start recording now (their CPU time counts from now). Cheap when
/// no thread waits.
pub fn learn_stack_bounds() -> Vec<&'static Slot> {
    let mut known = Vec::new();
    let pending: Vec<&'static Slot> =
        slots().filter(|s| s.state.load(Ordering::Acquire) == ACTIVE && s.probe.load(Ordering::Acquire) != 0).collect();
    if pending.is_empty() {
        return known;
    }
    let mut maps: Option<String> = None;
    for slot in pending {
        if slot.stack_hi.load(Ordering::Relaxed) == 0 {
            // The SP a signal noted (no file to read), else the SP of a thread off the CPU.
            let sp = match slot.seen_sp.load(Ordering::Relaxed) {
                0 => syscall_sp(slot.os_tid.load(Ordering::Relaxed)),
                sp => Some(sp),
            };
            let Some(sp) = sp else { continue };
            let m = maps.get_or_insert_with(|| std::fs::read_to_string("/proc/self/maps").unwrap_or_default());
            match stack_mapping(m, sp) {
                Some((lo, hi)) => {
                    slot.stack_lo.store(lo, Ordering::Relaxed);
                    slot.stack_hi.store(hi, Ordering::Release);
                }
                // Not a thread stack (an alternate signal stack): wait for another signal.
                None => {
                    slot.seen_sp.store(0, Ordering::Relaxed);
                    continue;
                }
            }
        }
        // The code queued before the thread was registered is published by the pass that ran
        // just before this call only if the sampler saw the thread once already.
        if slot.probe.load(Ordering::Acquire) == 1 {
            slot.probe.store(2, Ordering::Release);
            continue;
        }
        slot.start_cpu_ns.store(slot.cpu_ns().unwrap_or(0), Ordering::Relaxed);
        slot.probe.store(0, Ordering::Release);
        known.push(slot);
    }
    known
}

/// The user stack pointer of a thread that is not on a CPU right now: blocked in a system call
/// (`NR ARG1 … ARG6 SP PC`) or preempted (`-1 SP PC`); None while it runs (`running`).
fn syscall_sp(tid: u32) -> Option<u64> {
    let sys = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok()?;
    parse_syscall_sp(&sys)
}

fn parse_syscall_sp(text: &str) -> Option<u64> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let sp = match fields.as_slice() {
        ["-1", sp, _pc] => sp,
        [_nr, _, _, _, _, _, _, sp, _pc] => sp,
        _ => return None,
    };
    u64::from_str_radix(sp.trim_start_matches("0x"), 16).ok().filter(|&sp| sp != 0)
}

fn stack_bounds_of(tid: u32) -> Option<(u64, u64)> {
    let sp = syscall_sp(tid)?;
    stack_mapping(&std::fs::read_to_string("/proc/self/maps").ok()?, sp)
}

/// The writable mapping of `maps` (`/proc/PID/maps` text) that contains `sp`.
pub fn stack_mapping(maps: &str, sp: u64) -> Option<(u64, u64)> {
    maps.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let (range, perms) = (it.next()?, it.next()?);
        let (a, b) = range.split_once('-')?;
        let (a, b) = (u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?);
        (a <= sp && sp < b && perms.starts_with("rw") && b - a >= 128 << 10).then_some((a, b))
    })
}

fn current_stack_bounds() -> Option<(u64, u64)> {
    // Safety: pthread_getattr_np fills `attr`, which is destroyed after use; getstack only reads it.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let r = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (r == 0 && !addr.is_null()).then(|| (addr as u64, addr as u64 + size as u64))
    }
}

#[repr(C)]
struct KernelItimerspec {
    interval: libc::timespec,
    value: libc::timespec,
}

fn ts_of(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
}

fn create_timer(slot: &'static Slot, tid: u32) -> std::io::Result<i32> {
    // Safety: a zeroed sigevent filled for SIGEV_THREAD_ID; the kernel writes the timer id.
    unsafe {
        let mut sev: libc::sigevent = std::mem::zeroed();
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = libc::SIGPROF;
        sev.sigev_notify_thread_id = tid as libc::c_int;
        sev.sigev_value = libc::sigval { sival_ptr: slot as *const Slot as *mut libc::c_void };
        let mut id: libc::c_int = 0;
        let r = libc::syscall(libc::SYS_timer_create, thread_clock(tid), &mut sev as *mut libc::sigevent, &mut id);
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let period = slot.period_ns.load(Ordering::Relaxed);
        // A random first expiry spreads threads over the period.
        let first = 1 + (next_random(slot) % period);
        let spec = KernelItimerspec { interval: ts_of(period), value: ts_of(first) };
        let r = libc::syscall(
            libc::SYS_timer_settime,
            id as libc::c_long,
            0 as libc::c_long,
            &spec as *const KernelItimerspec,
            std::ptr::null_mut::<KernelItimerspec>(),
        );
        if r != 0 {
            let e = std::io::Error::last_os_error();
            libc::syscall(libc::SYS_timer_delete, id as libc::c_long);
            return Err(e);
        }
        Ok(id)
    }
}

fn next_random(slot: &Slot) -> u64 {
    let mut x = slot.rng.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    slot.rng.store(x, Ordering::Relaxed);
    x
}

/// The `SIGPROF` handler. Async-signal-safe: atomics, plain memory reads validated against the
/// thread's stack bounds, and the raw `timer_settime` system call.
extern "C" fn on_sigprof(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // Safety: the kernel passes a valid siginfo and ucontext to an SA_SIGINFO handler.
    unsafe {
        let errno = *libc::__errno_location();
        if !info.is_null() && (*info).si_code == SI_TIMER {
            let p = (*info).si_value().sival_ptr as *const Slot;
            if !p.is_null() && is_slot(p) && (*p).magic == MAGIC {
                record(&*p, ctx as *const libc::ucontext_t);
                *libc::__errno_location() = errno;
                return;
            }
        }
        chain(sig, info, ctx);
        *libc::__errno_location() = errno;
    }
}

/// True when `p` is one of our slots (a bounded scan of the slot table; no locks).
fn is_slot(p: *const Slot) -> bool {
    let n = SLOT_COUNT.load(Ordering::Acquire).min(MAX_SLOTS);
    SLOTS[..n].iter().any(|s| std::ptr::eq(s.load(Ordering::Relaxed), p))
}

unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(old) = PREVIOUS.get() else { return };
    let h = old.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // The default action of SIGPROF ends the process: never take it for a stray signal.
        return;
    }
    if old.sa_flags & libc::SA_SIGINFO != 0 {
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = std::mem::transmute(h);
        f(sig, info, ctx);
    } else {
        let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
        f(sig);
    }
}

/// Where the next record goes in a ring holding `head - tail` words: (the counter of its first
/// word, room for its IPs — at most [`MAX_FRAMES`]), None when the ring is too full for a record
/// of one IP. A record is written where the last one ended, unless the rest of the ring up to its
/// end is too short for a stack of `MAX_FRAMES` and the free space at the ring's start is longer;
/// or the ring is empty and a stack of `MAX_FRAMES` fits before the place of the last record: the
/// record then starts at the ring's start (a [`SKIP`] word marks the unused rest), so a thread
/// whose stacks are ordinary only ever touches the ring's first pages.
fn ring_place(head: u64, tail: u64) -> Option<(u64, usize)> {
    let cap = RING_WORDS as u64;
    let used = head - tail;
    let pos = head % cap;
    let to_end = cap - pos;
    let free = cap - used;
    let full = (RECORD_HEADER + MAX_FRAMES) as u64;
    let skip = pos != 0 && if used == 0 { pos >= full } else { to_end < full && free - to_end > to_end };
    let (at, room) = if skip { (head + to_end, free - to_end) } else { (head, to_end.min(free)) };
    (room > RECORD_HEADER as u64).then(|| (at, (room as usize - RECORD_HEADER).min(MAX_FRAMES)))
}

unsafe fn record(slot: &Slot, uc: *const libc::ucontext_t) {
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
    // The code that owns the frame at `fp`: the interrupted code, or — when the leaf has no frame
    // of its own (frameless, prolog, native code without frame pointers) — the code it returns to.
    let mut owner = ip;
    let mut owner_alt = sp_top.wrapping_sub(1);
    // Frames lie above this.
    let mut floor = sp;
    // A leaf in native code with an RSP-based frame (code without frame pointers, where RBP is a
    // scratch register, or a prolog): its frames are stepped through by the unwind rules, and the
    // walk goes on from the RBP they recover. The word at SP is then no guess to make later.
    if on_stack {
        match native_steps(ips, n, ip, sp, fp, hi, false) {
            Ok((added, caller_fp, caller_sp, ret)) => {
                n = added;
                fp = caller_fp;
                floor = caller_sp;
                sp_top = 0;
                owner = ret - 1;
                owner_alt = u64::MAX;
                if frameless != 0 && FRAMELESS.may_hold(owner) && n < ips.len() {
                    let (added, last) = frameless_callers(ips, n, frameless, caller_sp - 8, ret, fp, hi);
                    n = added;
                    owner = last - 1;
                }
            }
            Err(true) => {
                // A native leaf whose rules say its RBP frame is set up: the frame-pointer walk
                // finds its caller, and the word at SP is a local of it (the JIT keeps the address
                // of the code it is writing there), no return address.
                sp_top = 0;
                owner_alt = u64::MAX;
            }
            Err(false) => {
                // Frameless managed code past its prolog: RBP is still its caller's (or an older
                // frame's) frame pointer, and its return address lies at its fixed frame size
                // above SP (or above the registers its epilog still pops).
                let leaf = if frameless != 0 && FRAMELESS.may_hold(ip) && sp.is_multiple_of(8) {
                    frameless_leaf(ips, n, frameless, ip, sp, fp, hi)
                } else {
                    None
                };
                if let Some((added, last)) = leaf {
                    n = added;
                    sp_top = 0;
                    owner = last - 1;
                    owner_alt = u64::MAX;
                } else if fp > sp && sp.is_multiple_of(8) && NATIVE.find(NATIVE.visible(), ip).is_none() {
                    // Managed code inside its prolog, past `push rbp` but before RBP is set up:
                    // RBP is still the caller's frame pointer, so the walk would go from the leaf
                    // straight to the caller's caller. The return address lies just above the
                    // pushed copy of RBP; it takes the place of the word at SP as the caller.
                    // Not at the `push rbp` itself (nothing pushed yet: the word at SP is the
                    // return address; a copy of RBP further up is the caller's). The byte is read
                    // only once a copy was found: `ip` is the instruction being run.
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
                        // address for certain. When it returns into frameless code, that code's
                        // own caller lies its frame size higher, below the frame at RBP: both
                        // are recorded here (the sampler thread would insert the first, and the
                        // walk from RBP skip the second).
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
    // Frame-pointer walk: [fp] = caller's fp, [fp+8] = return address. Every frame must lie on
    // this thread's stack, above the interrupted SP, 8-aligned, and strictly above the last one.
    while on_stack && n < ips.len() && fp >= floor && fp <= hi - 16 && fp.is_multiple_of(8) {
        if osr != 0 && (OSR.find(osr, owner).is_some() || (owner_alt != u64::MAX && OSR.find(osr, owner_alt).is_some()))
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
        ips[n] = ret;
        n += 1;
        // Return addresses are looked up at the call, one byte earlier.
        owner = ret - 1;
        owner_alt = u64::MAX;
        if n < ips.len() && NATIVE.may_hold(owner) && !frame_record_sound(next, fp + 16, hi) {
            // Native code without frame pointers in the middle of the stack (the agent's own
            // callbacks, a C++ library): the RBP saved in the frame record above is a scratch
            // value of it, no frame record. Its SP at the call was just above the return slot;
            // its rules lead on, into known code only.
            if let Ok((added, caller_fp, caller_sp, last)) = native_steps(ips, n, owner, fp + 16, next, hi, true) {
                n = added;
                floor = caller_sp;
                owner = last - 1;
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
    slot.taken.fetch_add(1, Ordering::Relaxed);
    slot.head.store(at + (RECORD_HEADER + n) as u64, Ordering::Release);
}

/// Maps a ring of [`RING_WORDS`] words (not on the signal path); null when it cannot be mapped.
fn map_ring() -> *mut u64 {
    // Safety: an anonymous private mapping; the kernel gives zeroed pages as they are touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            RING_WORDS * 8,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

#[cfg(test)]
mod tests {
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
        slot.drain(|ips, _, _, _| out = ips.to_vec());
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
        slot.drain(|ips, top, _, _| out = (ips.to_vec(), top));
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
        let me = crate::profiler::os_tid();
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
            slot.drain(|ips, _, _, _| out.push(ips.to_vec()));
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
        let me = crate::profiler::os_tid();
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
        assert_eq!(slot.act_depth.load(Ordering::Relaxed), 1, "the discarded search was dropped");
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
            tid_tx.send(crate::profiler::os_tid()).unwrap();
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
    /// 0x78 bytes with the caller's RBP saved at CFA − 16 (as glibc's `__open`), no rule from 0x1100.
    const NATIVE_CODE: u64 = 0x5c00_0000_0000;
    const RET_INTO_RUN2: u64 = 0x5000_0000_0500;

    fn add_native() {
        use super::super::cfi::{Row, KIND_NONE, KIND_RBP, KIND_RSP};
        static ROWS: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
        let rows = ROWS.get_or_init(|| {
            vec![
                Row { address: 0x1000, kind: KIND_RSP, cfa_offset: 8, rbp_slot: 0 }.pack(),
                Row { address: 0x1001, kind: KIND_RSP, cfa_offset: 0x78, rbp_slot: 2 }.pack(),
                Row { address: 0x1100, kind: KIND_NONE, cfa_offset: 0, rbp_slot: 0 }.pack(),
                Row { address: 0x1400, kind: KIND_RBP, cfa_offset: 16, rbp_slot: 2 }.pack(),
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
        slot.drain(|ips, sp_top, _, _| got = (ips.to_vec(), sp_top));
        assert_eq!(got, (vec![leaf, RET_INTO_RUN2, RET_INTO_MAIN, RET_INTO_HOST], 0));

        // Without rules for the leaf (past the mapping's rules), the word at SP is kept for the
        // sampler thread to judge.
        let (slot, uc) = fake_thread(&w, NATIVE_CODE + 0x200, 5, 12);
        // Safety: as above.
        unsafe { record(&slot, &uc) };
        slot.drain(|ips, sp_top, _, _| got = (ips.to_vec(), sp_top));
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
        let (slot, uc) = super::tests::fake_thread(words, ip, sp, fp);
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
                let w = super::tests::deep_chain(depth, code);
                let (slot, uc) = super::tests::fake_thread(&w, code - 1, 4, 8);
                let ns = time_calls(if depth > 1000 { 100_000 } else { 1_000_000 }, || {
                    // Safety: the registers point into `w`, the slot's stack bounds.
                    unsafe { record(&slot, std::hint::black_box(&uc)) };
                    slot.tail.store(slot.head.load(Ordering::Relaxed), Ordering::Relaxed);
                });
                let mut len = 0;
                // Safety: as above.
                unsafe { record(&slot, &uc) };
                slot.drain(|ips, _, _, _| len = ips.len());
                assert_eq!(len, depth + 1);
                (depth, ns)
            })
            .collect();
        let me = crate::profiler::os_tid();
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
            use super::super::cfi::{Row, KIND_RBP, KIND_RSP};
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

#[cfg(test)]
mod stack_mapping_tests {
    #[test]
    fn the_writable_mapping_holding_sp_is_the_stack() {
        let maps = "7f0000000000-7f0000001000 ---p 00000000 00:00 0 \n7f0000001000-7f0000081000 rw-p 00000000 00:00 0 \n7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]\n";
        assert_eq!(super::stack_mapping(maps, 0x7f0000080000), Some((0x7f0000001000, 0x7f0000081000)));
        assert_eq!(super::stack_mapping(maps, 0x7ffc00020ff8), Some((0x7ffc00000000, 0x7ffc00021000)));
        assert_eq!(super::stack_mapping(maps, 0x7f0000000800), None);
    }

    #[test]
    fn stack_pointers_of_threads_off_cpu() {
        let blocked = "202 0x7f00000010a0 0x80 0x0 0x0 0x0 0x0 0x7f0000080f00 0x7f43ca2c010\n";
        assert_eq!(super::parse_syscall_sp(blocked), Some(0x7f0000080f00));
        assert_eq!(super::parse_syscall_sp("-1 0x7ffc00020ff8 0x7f43ca2c010\n"), Some(0x7ffc00020ff8));
        assert_eq!(super::parse_syscall_sp("running\n"), None);
    }
}
