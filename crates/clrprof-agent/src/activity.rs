//! Runtime activity words: the runtime work a thread is doing (JIT compilations, type, assembly
//! and module loads, ReadyToRun lookups, nested; a GC; an exception dispatch), kept per thread as a
//! small stack of `clrprof_trace::runtime_activity` words. The thread's own callbacks write it
//! (through `crate::sampler`, which finds the calling thread's slot) and its signal handler reads
//! it, so every method here is atomics only: no allocation, no lock.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Nested runtime activities a slot keeps (deeper ones are counted only).
pub(crate) const ACT_DEPTH: usize = 8;
/// [`Activities::set_gc`] bits.
pub(crate) const IN_GC: u32 = 1;
pub(crate) const IN_GC_SUSPENSION: u32 = 2;

/// The runtime work in progress on one thread (nested: innermost last). `depth` may exceed the
/// array: deeper entries are counted, not kept.
pub(crate) struct Activities {
    words: [AtomicU64; ACT_DEPTH],
    /// The sequence number of each entry's begin (counted per thread by `begins`, from 1).
    seqs: [AtomicU32; ACT_DEPTH],
    begins: AtomicU32,
    /// Entries of work that never runs managed code (JIT compilations, type loads, ReadyToRun
    /// lookups) begun at or before this sequence number are over: the sampler saw the thread run
    /// managed code with such an entry innermost (their end callback never came).
    discarded: AtomicU32,
    depth: AtomicU32,
    /// Bits [`IN_GC`] and [`IN_GC_SUSPENSION`]: the thread is collecting or suspending for a GC.
    gc: AtomicU32,
    /// The thread is dispatching an exception (thrown, no catch entered yet).
    exception: AtomicBool,
}

impl Default for Activities {
    fn default() -> Self {
        Self::new()
    }
}

impl Activities {
    pub(crate) const fn new() -> Activities {
        Activities {
            words: [const { AtomicU64::new(0) }; ACT_DEPTH],
            seqs: [const { AtomicU32::new(0) }; ACT_DEPTH],
            begins: AtomicU32::new(0),
            discarded: AtomicU32::new(0),
            depth: AtomicU32::new(0),
            gc: AtomicU32::new(0),
            exception: AtomicBool::new(false),
        }
    }

    /// The runtime work the thread is doing now (a `runtime_activity` word, 0 for none): the
    /// innermost GC, else the innermost nested load or compilation not known to be over, else
    /// exception dispatch. Async-signal-safe (atomic loads only).
    pub(crate) fn now(&self) -> u64 {
        self.now_and_seq().0
    }

    /// [`Activities::now`] and the sequence number of its begin (0 for a GC or an exception).
    #[inline(always)]
    pub(crate) fn now_and_seq(&self) -> (u64, u32) {
        use clrprof_trace::runtime_activity as ra;
        if self.gc.load(Ordering::Relaxed) != 0 {
            return (ra::pack(ra::GC, 0), 0);
        }
        let d = (self.depth.load(Ordering::Acquire) as usize).min(ACT_DEPTH);
        let discard = self.discarded.load(Ordering::Relaxed);
        for i in (0..d).rev() {
            let w = self.words[i].load(Ordering::Relaxed);
            let seq = self.seqs[i].load(Ordering::Relaxed);
            if !(native_only(w) && seq <= discard) {
                return (w, seq);
            }
        }
        if self.exception.load(Ordering::Relaxed) {
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
    pub(crate) fn discard(&self, seq: u32) {
        self.discarded.fetch_max(seq, Ordering::Relaxed);
    }

    /// Forgets everything (the slot is handed to a new thread).
    pub(crate) fn reset(&self) {
        self.depth.store(0, Ordering::Relaxed);
        self.begins.store(0, Ordering::Relaxed);
        self.discarded.store(0, Ordering::Relaxed);
        self.gc.store(0, Ordering::Relaxed);
        self.exception.store(false, Ordering::Relaxed);
    }

    /// Entries kept or counted (for tests).
    #[cfg(test)]
    pub(crate) fn depth(&self) -> u32 {
        self.depth.load(Ordering::Relaxed)
    }

    /// The thread starts runtime work `word` (a `runtime_activity` word): samples taken until
    /// the matching [`Activities::end`] carry it.
    ///
    /// Entries known to be over are dropped first: those the sampler discarded
    /// ([`Activities::discard`]), and a lookup of the same function's precompiled code when this
    /// is its JIT compilation or another lookup of it. The runtime's `ReadyToRunInfo::GetEntryPoint`
    /// (`vm/readytoruninfo.cpp`) raises `JITCachedFunctionSearchStarted` and returns without
    /// `…Finished` when the method's fixups fail or the profiler rejects the code; the method is then
    /// JIT-compiled (or looked up in another image), so its search ended there.
    pub(crate) fn begin(&self, word: u64) {
        use clrprof_trace::runtime_activity as ra;
        let s = self;
        let mut d = s.depth.load(Ordering::Relaxed) as usize;
        if d <= ACT_DEPTH {
            let discard = s.discarded.load(Ordering::Relaxed);
            while d > 0
                && native_only(s.words[d - 1].load(Ordering::Relaxed))
                && s.seqs[d - 1].load(Ordering::Relaxed) <= discard
            {
                d -= 1;
            }
            let (kind, id) = ra::unpack(word);
            if matches!(kind, ra::JIT | ra::READY_TO_RUN) {
                let search = ra::pack(ra::READY_TO_RUN, id);
                if let Some(i) = (0..d).rev().find(|&i| s.words[i].load(Ordering::Relaxed) == search) {
                    d = i;
                }
            }
        }
        let seq = s.begins.load(Ordering::Relaxed).wrapping_add(1).max(1);
        s.begins.store(seq, Ordering::Relaxed);
        if d < ACT_DEPTH {
            s.words[d].store(word, Ordering::Relaxed);
            s.seqs[d].store(seq, Ordering::Relaxed);
        }
        // Release: the handler that sees the new depth sees the entry.
        s.depth.store((d + 1) as u32, Ordering::Release);
    }

    /// The thread finished runtime work `word`: it and anything begun inside it and not
    /// finished (a failed load whose finish never came) end. Unknown words are ignored.
    pub(crate) fn end(&self, word: u64) {
        let s = self;
        let d = s.depth.load(Ordering::Relaxed) as usize;
        if d > ACT_DEPTH {
            s.depth.store((d - 1) as u32, Ordering::Release);
            return;
        }
        if let Some(i) = (0..d).rev().find(|&i| s.words[i].load(Ordering::Relaxed) == word) {
            s.depth.store(i as u32, Ordering::Release);
        }
    }

    /// A managed `catch` runs on the thread (`ExceptionCatcherEnter`): work that never runs
    /// managed code (JIT compilations, type loads, ReadyToRun lookups) cannot be in progress under it,
    /// so such entries were left by a load that failed with an exception (whose stop event never
    /// came). The stack is cut at the oldest of them.
    pub(crate) fn unwound(&self) {
        let s = self;
        let d = (s.depth.load(Ordering::Relaxed) as usize).min(ACT_DEPTH);
        if let Some(i) = (0..d).find(|&i| native_only(s.words[i].load(Ordering::Relaxed))) {
            s.depth.store(i as u32, Ordering::Release);
        }
    }

    /// Sets or clears a GC bit ([`IN_GC`], [`IN_GC_SUSPENSION`]).
    pub(crate) fn set_gc(&self, bit: u32, on: bool) {
        if on {
            self.gc.fetch_or(bit, Ordering::Relaxed);
        } else {
            self.gc.fetch_and(!bit, Ordering::Relaxed);
        }
    }

    /// The thread starts (`ExceptionThrown`) or ends (`ExceptionCatcherEnter`) an exception
    /// dispatch.
    pub(crate) fn set_exception(&self, on: bool) {
        self.exception.store(on, Ordering::Relaxed);
    }
}

/// True for runtime work that never runs managed code while it is in progress: JIT compilations,
/// type loads and ReadyToRun lookups (assembly loads may call managed resolvers).
#[inline]
pub(crate) fn native_only(word: u64) -> bool {
    use clrprof_trace::runtime_activity as ra;
    matches!(ra::unpack(word).0, ra::JIT | ra::TYPE_LOAD | ra::READY_TO_RUN)
}
