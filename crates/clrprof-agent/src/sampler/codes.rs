//! The code tables the `SIGPROF` handler reads: every executable mapping, the code of OSR method
//! versions, managed code without an RBP frame (with its frame size) and native code with unwind
//! rules. The sampler thread publishes into them (not on the signal path: an insertion takes a
//! lock); the handler only loads atomics. The small helpers the handler calls are `#[inline]`,
//! so that the walk in `super::unwind` can inline them as it could when they shared a file.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Most OSR code ranges the handler knows (later ones are walked the ordinary way).
pub(crate) const MAX_OSR_RANGES: usize = 4096;
/// Most frameless code ranges the handler knows (later ones lose their callers, as before).
pub(crate) const MAX_FRAMELESS_RANGES: usize = 16384;

/// Code ranges shared with the signal handler, sorted by start, each with a word of information.
/// One writer at a time (serialized by `writer`, not on the signal path) inserts; the handler only
/// loads atomics. `seq` is odd while an insertion moves entries, and the handler then ignores the
/// table for that sample. A stale or torn read can only make the walk try (or skip) a step, and
/// every step checks the stack itself. Code that can be freed (collectible modules, DynamicMethods)
/// is removed before the runtime frees it ([`CodeTable::remove`], from the unload callbacks); the
/// page filter keeps its bits (a stale bit only costs a search).
pub(super) struct CodeTable<const N: usize> {
    pub(super) seq: AtomicU64,
    pub(super) len: AtomicUsize,
    pub(super) start: [AtomicU64; N],
    pub(super) end: [AtomicU64; N],
    pub(super) info: [AtomicU64; N],
    /// A filter in front of the table: bit `(page % 4096)` is set for every 4 KiB page that holds
    /// code of the table (bits are only ever set, before their range is published), so most
    /// lookups cost one load.
    pub(super) pages: [AtomicU64; 64],
    pub(super) writer: std::sync::Mutex<()>,
}

impl<const N: usize> CodeTable<N> {
    pub(super) const fn new() -> Self {
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
    pub(super) fn add(&self, start: u64, end: u64, info: u64) -> bool {
        self.insert(start, end, info, false)
    }

    /// As [`CodeTable::add`], but a range already known by its start grows to `end` when that
    /// lies further: a mapping that grew in place (the kernel merges a new mapping with the one
    /// before it when they are adjacent parts of one file, as the runtime's executable memory is).
    pub(super) fn add_or_grow(&self, start: u64, end: u64, info: u64) -> bool {
        self.insert(start, end, info, true)
    }

    pub(super) fn insert(&self, start: u64, end: u64, info: u64, grow: bool) -> bool {
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
    pub(super) fn mark_pages(&self, from: u64, end: u64) {
        let pages = (end - 1) / 4096 - from / 4096;
        for p in 0..=pages.min(64 * 64) {
            let (w, b) = page_bit(from + p * 4096);
            self.pages[w].fetch_or(b, Ordering::Relaxed);
        }
    }

    /// Removes the range starting at `start`; false when there is none. Entries above it move down
    /// while `seq` is odd, as in [`CodeTable::add`]; a handler that read the length before sees a
    /// stale copy of the last entry at worst, which every step checks against the stack.
    pub(super) fn remove(&self, start: u64) -> bool {
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
    pub(super) fn known(&self, ip: u64) -> Option<(u64, u64)> {
        let _g = self.writer.lock();
        self.find(self.len.load(Ordering::Relaxed).min(N), ip)
    }

    /// Number of ranges the handler may search now (0 while an insertion is under way).
    pub(super) fn visible(&self) -> usize {
        if self.seq.load(Ordering::Acquire) & 1 == 1 {
            return 0;
        }
        self.len.load(Ordering::Acquire).min(N)
    }

    /// False when no range of the table lies in `ip`'s page (the filter; one load).
    #[inline(always)]
    pub(super) fn may_hold(&self, ip: u64) -> bool {
        let (w, b) = page_bit(ip);
        self.pages[w].load(Ordering::Relaxed) & b != 0
    }

    /// (start, info) of the range among the first `n` that holds `ip` (binary search;
    /// async-signal-safe).
    pub(super) fn find(&self, n: usize, ip: u64) -> Option<(u64, u64)> {
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
pub(super) static OSR: CodeTable<MAX_OSR_RANGES> = CodeTable::new();
/// Code of managed code versions without an RBP frame (RSP-based frames of fixed size), with
/// their [`FramelessFrame`] packed by [`FramelessFrame::pack`].
pub(super) static FRAMELESS: CodeTable<MAX_FRAMELESS_RANGES> = CodeTable::new();

/// Most native code mappings whose unwind rules the handler knows.
pub(crate) const MAX_NATIVE_RANGES: usize = 1024;
/// Most executable mappings the handler knows.
pub(crate) const MAX_EXEC_RANGES: usize = 4096;
/// Every executable mapping (native code, managed images, JIT code heaps): a return address
/// read from a frame record must lie in one, or the record is no frame record.
pub(super) static EXEC: CodeTable<MAX_EXEC_RANGES> = CodeTable::new();

/// Makes an executable mapping known to the handler (not on the signal path); one known by its
/// start grows with it. False when the table is full.
pub(crate) fn add_exec_range(start: u64, end: u64) -> bool {
    EXEC.add_or_grow(start, end, 0)
}

/// Mapped native code with unwind rules (`super::cfi`): the info word points to its
/// [`NativeRules`] (leaked, never freed).
pub(super) static NATIVE: CodeTable<MAX_NATIVE_RANGES> = CodeTable::new();

/// The unwind rules of one mapping of native code: a mapped address `ip` is the file's virtual
/// address `ip - bias`.
pub(crate) struct NativeRules {
    pub(crate) bias: u64,
    pub(crate) rows: &'static [u64],
}

/// Makes the unwind rules of the native code mapped at `[start, end)` known to the handler (not on
/// the signal path: it takes a lock). False when the table is full.
pub(crate) fn add_native_code(start: u64, end: u64, rules: &'static NativeRules) -> bool {
    NATIVE.add(start, end, rules as *const NativeRules as u64)
}

/// Whether `ip` lies in code the handler knows: an executable mapping as of the sampler's last
/// read of `/proc/self/maps` (`exec`: the visible length of that table), or managed code published
/// since (OSR code is published when it is compiled, before it runs; the mappings are read again
/// every second).
#[inline(always)]
pub(super) fn code_known(exec: usize, ip: u64) -> bool {
    EXEC.find(exec, ip).is_some()
        || (OSR.may_hold(ip) && OSR.find(OSR.visible(), ip).is_some())
        || (FRAMELESS.may_hold(ip) && FRAMELESS.find(FRAMELESS.visible(), ip).is_some())
}

#[inline]
pub(super) fn page_bit(ip: u64) -> (usize, u64) {
    let h = (ip >> 12) as usize % (64 * 64);
    (h / 64, 1 << (h % 64))
}

/// Makes `[start, end)` known to the handler as the code of an OSR method version. False when the
/// table is full or the range is empty (not on the signal path: it takes a lock).
pub(crate) fn add_osr_code(start: u64, end: u64) -> bool {
    OSR.add(start, end, 0)
}

/// True when `ip` is in a known OSR code range (not on the signal path).
pub(crate) fn osr_code_known(ip: u64) -> bool {
    OSR.known(ip).is_some()
}

/// The fixed frame of a code version that does not set up RBP (the JIT's RSP-based frames: RBP
/// is never a scratch register on x64, so such code leaves RBP as its caller's): after its prolog
/// (`prolog` bytes from the entry: pushes of callee-saved registers, then `sub rsp, N` or
/// `push rax`), its return address is `size` bytes above its SP, and SP does not move until the
/// epilog (outgoing arguments have a fixed area; `localloc` requires an RBP frame). Calls are
/// only made after the prolog, so at a return address into such code the frame is complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FramelessFrame {
    pub(crate) size: u32,
    pub(crate) prolog: u32,
}

impl FramelessFrame {
    #[inline]
    pub(super) fn pack(self) -> u64 {
        (self.prolog as u64) << 32 | self.size as u64
    }
    #[inline]
    pub(super) fn unpack(v: u64) -> Self {
        FramelessFrame { size: v as u32, prolog: (v >> 32) as u32 }
    }
}

/// Makes `[start, end)` known to the handler as code of a frameless code version whose entry is
/// `start` (not on the signal path: it takes a lock). False when the table is full or the range
/// is empty.
pub(crate) fn add_frameless_code(start: u64, end: u64, frame: FramelessFrame) -> bool {
    FRAMELESS.add(start, end, frame.pack())
}

/// Forgets the frameless code range starting at `start` (its code is about to be freed: a
/// DynamicMethod or a collectible module unloads). Not on the signal path.
pub(crate) fn remove_frameless_code(start: u64) -> bool {
    FRAMELESS.remove(start)
}

/// True when `ip` is in a known frameless code range (not on the signal path).
pub(crate) fn frameless_code_known(ip: u64) -> bool {
    FRAMELESS.known(ip).is_some()
}
