//! The per-thread sampling slots: each managed thread's ring of samples (written by its signal
//! handler, drained by the sampler thread), its stack bounds and its runtime activities, in a
//! table of slots that are allocated once and reused after a thread dies. The functions that
//! record the calling thread's runtime work ([`activity_begin`] …) find its slot here.
//!
//! The ring holds records of variable length (a header and the sample's IPs), so a thread's memory
//! is bounded by the ring, not by the number of samples times the deepest stack: [`RING_WORDS`]
//! words (128 KiB of address space, mapped lazily) hold 7 stacks of [`MAX_FRAMES`] frames or
//! hundreds of ordinary ones. A record never wraps around the end of the ring: the producer skips
//! to the start instead, and it starts at the beginning whenever the ring is empty, so a thread
//! with ordinary stacks touches the ring's first pages only. A walk that the ring's free space cuts
//! short (a deep stack while the sampler thread is late) is not recorded but counted as dropped: a
//! stack is recorded whole, or cut at `MAX_FRAMES` only.

use std::sync::atomic::{AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::activity::Activities;
use crate::os::{os_tid, stack_mapping, syscall_sp, thread_cpu_ns};

/// Deepest stack the handler records (async-profiler's default depth).
pub(crate) const MAX_FRAMES: usize = 2048;
/// Words of a thread's ring of samples: the samples a thread can hold between two drains of the
/// sampler thread, [`RECORD_HEADER`] words each plus one per IP.
pub(crate) const RING_WORDS: usize = 16 * 1024;
/// Words before a record's IPs: the number of IPs (or [`SKIP`]), the word at SP, the activity,
/// the activity's sequence number, and the thread's EventSource activity id (two words, 0 when
/// unknown: see [`FLOW_OFFSET`]).
pub(super) const RECORD_HEADER: usize = 6;
/// Where the runtime keeps a thread's current EventSource activity id (a GUID) in its native
/// `Thread` object, whose address is the profiler's `ThreadID`: the offset found at run time by
/// `crate::events::flow`, 0 while unknown (the handler then copies nothing), [`FLOW_FROM_EVENTS`]
/// when the handler copies the id its thread's last `SetActivityId` event gave ([`Slot::flow`]:
/// .NET 8 and 9, which keep the id out of `Thread`).
pub(crate) static FLOW_OFFSET: AtomicUsize = AtomicUsize::new(0);
/// [`FLOW_OFFSET`]'s value when the ids come from TplEventSource's `SetActivityId` events.
pub(crate) const FLOW_FROM_EVENTS: usize = usize::MAX;
/// A record's first word when the rest of the ring up to its end is unused: the next record is
/// at the ring's start.
pub(super) const SKIP: u64 = u64::MAX;
/// Most threads the sampler tracks at once (slots are reused after a thread dies).
pub(crate) const MAX_SLOTS: usize = 8192;
pub(super) const MAGIC: u64 = 0x636c_7270_726f_6631;

/// Slot states.
pub(crate) const FREE: u32 = 0;
pub(crate) const ACTIVE: u32 = 1;
/// The thread is gone; the sampler drains what is left, then frees the slot.
pub(crate) const DEAD: u32 = 2;

/// Per-thread sampling state shared between the thread's signal handler (producer) and the
/// sampler thread (consumer). Slots are allocated once and never freed.
pub(crate) struct Slot {
    pub(super) magic: u64,
    pub(crate) state: AtomicU32,
    pub(crate) os_tid: AtomicU32,
    /// The runtime's ThreadID.
    pub(crate) thread_id: AtomicUsize,
    pub(super) stack_lo: AtomicU64,
    pub(super) stack_hi: AtomicU64,
    /// The interrupted SP of the latest sample taken while the stack bounds were unknown (a
    /// thread registered from another thread at attach): the sampler finds the stack from it.
    pub(super) seen_sp: AtomicU64,
    /// A thread registered from another thread (at attach): it records no sample until the
    /// sampler has found its stack (its signals note the stack pointer meanwhile; a sample without
    /// the stack would hold only the leaf) and has published the code that existed before the
    /// attach to the handler's tables (OSR and frameless code, without which callers are lost).
    /// 0: recording; 1: registered, not seen by the sampler yet; 2: seen once (the code queued
    /// before the registration is published by the next pass).
    pub(super) probe: AtomicU32,
    /// Kernel timer id, -1 when none.
    pub(super) timer: AtomicI64,
    pub(super) period_ns: AtomicU64,
    pub(super) rng: AtomicU64,
    /// Words written to the ring and words consumed (counters; a word's place is the counter
    /// modulo [`RING_WORDS`]).
    pub(super) head: AtomicU64,
    pub(super) tail: AtomicU64,
    /// Samples recorded (wrapping).
    pub(super) taken: AtomicU32,
    pub(crate) dropped: AtomicU64,
    /// CPU time (ns) read when the thread died, for the last drain.
    pub(crate) final_cpu_ns: AtomicU64,
    /// Its run-queue wait (ns, `schedstat`) read when the thread died, `u64::MAX` when unknown.
    pub(crate) final_runq_ns: AtomicU64,
    /// CPU time (ns) the thread had used when it was registered.
    pub(crate) start_cpu_ns: AtomicU64,
    /// When the thread was registered and when it died (ns since the agent started; 0 until
    /// known), set by the sampler: its wall time runs from one to the other.
    pub(crate) registered_ns: AtomicU64,
    pub(crate) died_ns: AtomicU64,
    /// The runtime work in progress on the thread, written by its own callbacks and read by its
    /// signal handler.
    pub(crate) activities: Activities,
    /// The thread's current EventSource activity id as its last `SetActivityId` event gave it
    /// (.NET 8 and 9, [`FLOW_FROM_EVENTS`]): two buffers of two words, `flow_at` the one that is
    /// whole. Only the thread writes them (in its own event callback: the other buffer, then
    /// `flow_at`) and only its signal handler reads them, so the handler, which interrupts the
    /// writer and cannot wait for it, always reads a whole id.
    flow: [AtomicU64; 4],
    flow_at: AtomicU32,
    /// The ring of samples: [`RING_WORDS`] words of an anonymous mapping (pages the thread never
    /// reaches stay untouched), null when it could not be mapped (the thread records nothing).
    /// Each record: the number of IPs `len`, the word at the interrupted SP (the return address
    /// when the leaf has no frame yet, or none at all; checked off the signal path), what the
    /// thread was doing in the runtime ([`Slot::activity`], 0 for nothing known), then `len` IPs,
    /// leaf first.
    pub(super) ring: *mut u64,
}

// Safety: `ring` is a single-producer (the slot's thread, in its signal handler, which cannot
// nest because SIGPROF is blocked while it runs) single-consumer (the sampler thread) ring whose
// words are handed over through `head`/`tail` with release/acquire ordering; the mapping is never
// unmapped (slots live as long as the process).
unsafe impl Sync for Slot {}
unsafe impl Send for Slot {}

pub(super) static SLOTS: [AtomicPtr<Slot>; MAX_SLOTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_SLOTS];
pub(super) static SLOT_COUNT: AtomicUsize = AtomicUsize::new(0);

impl Slot {
    pub(super) fn new() -> Box<Slot> {
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
            activities: Activities::new(),
            flow: [const { AtomicU64::new(0) }; 4],
            flow_at: AtomicU32::new(0),
            ring: map_ring(),
        })
    }

    /// Hands the samples recorded since the last call to `f` (IPs leaf first, the word at SP, the
    /// activity and its sequence number, the thread's EventSource activity id or 0), oldest first
    /// (sampler thread only). Returns how many.
    pub(crate) fn drain(&self, mut f: impl FnMut(&[u64], u64, u64, u32, u128)) -> usize {
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
            let flow = w(pos + 4) as u128 | (w(pos + 5) as u128) << 64;
            f(ips, w(pos + 1), w(pos + 2), w(pos + 3) as u32, flow);
            t += (RECORD_HEADER + len) as u64;
            n += 1;
        }
        self.tail.store(t, Ordering::Release);
        n
    }

    /// True when the ring holds no sample the sampler thread has not drained.
    pub(crate) fn is_drained(&self) -> bool {
        self.tail.load(Ordering::Relaxed) >= self.head.load(Ordering::Acquire)
    }

    /// The thread's CPU time so far, ns (None once the thread is gone).
    pub(crate) fn cpu_ns(&self) -> Option<u64> {
        thread_cpu_ns(self.os_tid.load(Ordering::Relaxed))
    }

    /// Sets the thread's current activity id (the thread itself, from its `SetActivityId` event).
    pub(crate) fn set_flow_id(&self, id: u128) {
        let next = 1 - self.flow_at.load(Ordering::Relaxed) as usize;
        self.flow[2 * next].store(id as u64, Ordering::Relaxed);
        self.flow[2 * next + 1].store((id >> 64) as u64, Ordering::Relaxed);
        // Release: the words are in place before the handler may take this buffer.
        self.flow_at.store(next as u32, Ordering::Release);
    }

    /// The thread's current activity id as [`Slot::set_flow_id`] left it, as two words (the
    /// GUID's bytes as in memory). Async-signal-safe; whole when called on the slot's thread.
    #[inline(always)]
    pub(crate) fn flow_id(&self) -> (u64, u64) {
        let at = self.flow_at.load(Ordering::Acquire) as usize & 1;
        (self.flow[2 * at].load(Ordering::Relaxed), self.flow[2 * at + 1].load(Ordering::Relaxed))
    }

    /// The runtime work the thread is doing now ([`Activities::now`]). Async-signal-safe.
    pub(crate) fn activity(&self) -> u64 {
        self.activities.now()
    }

    /// [`Slot::activity`] and the sequence number of its begin ([`Activities::now_and_seq`]).
    #[inline(always)]
    pub(crate) fn activity_and_seq(&self) -> (u64, u32) {
        self.activities.now_and_seq()
    }

    /// The sampler saw this thread run managed code with work that never runs managed code
    /// innermost: see [`Activities::discard`]. Any thread may call this.
    pub(crate) fn discard_activities(&self, seq: u32) {
        self.activities.discard(seq);
    }
}

thread_local! {
    /// The calling thread's slot (set when the thread registers itself, or found once it was
    /// registered from another thread), for its callbacks.
    pub(super) static CURRENT: std::cell::Cell<Option<&'static Slot>> = const { std::cell::Cell::new(None) };
    /// [`REGISTERED_ELSEWHERE`] when the thread last looked for a slot of its own.
    static LOOKED_UP: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
}

/// Threads registered from another thread so far (at attach, the threads that existed before).
pub(super) static REGISTERED_ELSEWHERE: AtomicU32 = AtomicU32::new(0);

/// The calling thread's active slot, if it was registered and still owns it. A thread registered
/// from another thread (at attach) finds its slot at its first callback after that (one scan of
/// the slot table per such registration at most), so its runtime work is recorded too: without
/// it, the tiered-compilation thread that existed before an attach showed a bare `[JIT]`.
pub(super) fn current() -> Option<&'static Slot> {
    let me = os_tid();
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

/// The calling thread starts runtime work `word` ([`Activities::begin`]).
pub(crate) fn activity_begin(word: u64) {
    if let Some(s) = current() {
        s.activities.begin(word);
    }
}

/// The calling thread finished runtime work `word` ([`Activities::end`]).
pub(crate) fn activity_end(word: u64) {
    if let Some(s) = current() {
        s.activities.end(word);
    }
}

/// A managed `catch` runs on the calling thread ([`Activities::unwound`]).
pub(crate) fn activity_unwound() {
    if let Some(s) = current() {
        s.activities.unwound();
    }
}

/// The calling thread's EventSource activity id is now `id` (its `SetActivityId` event): false
/// when the thread is not sampled.
pub(crate) fn set_flow_id(id: u128) -> bool {
    current().map(|s| s.set_flow_id(id)).is_some()
}

/// Samples the calling thread's handler has taken so far (wrapping), None when the thread is
/// not sampled.
pub(crate) fn samples_taken() -> Option<u32> {
    current().map(|s| s.taken.load(Ordering::Relaxed).wrapping_add(s.dropped.load(Ordering::Relaxed) as u32))
}

/// Sets or clears a GC bit ([`crate::activity::IN_GC`], [`crate::activity::IN_GC_SUSPENSION`])
/// of the calling thread.
pub(crate) fn activity_gc(bit: u32, on: bool) {
    if let Some(s) = current() {
        s.activities.set_gc(bit, on);
    }
}

/// The calling thread starts (`ExceptionThrown`) or ends (`ExceptionCatcherEnter`) an exception
/// dispatch.
pub(crate) fn activity_exception(on: bool) {
    if let Some(s) = current() {
        s.activities.set_exception(on);
    }
}

/// Clears every thread's exception-dispatch mark: when the exception callbacks are paused, the
/// catches that would clear them are not seen.
pub(crate) fn clear_exception_activity() {
    for s in slots() {
        s.activities.set_exception(false);
    }
}

/// Every slot ever allocated (some may be free).
pub(crate) fn slots() -> impl Iterator<Item = &'static Slot> {
    let n = SLOT_COUNT.load(Ordering::Acquire).min(MAX_SLOTS);
    (0..n).filter_map(|i| {
        let p = SLOTS[i].load(Ordering::Acquire);
        // Safety: slots are leaked boxes, never freed.
        (!p.is_null()).then(|| unsafe { &*p })
    })
}

/// The active slot of a runtime thread.
pub(crate) fn slot_of_thread(thread_id: usize) -> Option<&'static Slot> {
    slots().find(|s| s.state.load(Ordering::Acquire) == ACTIVE && s.thread_id.load(Ordering::Relaxed) == thread_id)
}

/// Takes a free slot (or allocates one) for a thread; None when the table is full.
pub(super) fn claim(os_tid: u32, thread_id: usize) -> Option<&'static Slot> {
    let fill = |s: &'static Slot| {
        s.os_tid.store(os_tid, Ordering::Relaxed);
        s.thread_id.store(thread_id, Ordering::Relaxed);
        s.stack_lo.store(0, Ordering::Relaxed);
        s.stack_hi.store(0, Ordering::Relaxed);
        s.seen_sp.store(0, Ordering::Relaxed);
        s.probe.store(0, Ordering::Relaxed);
        s.rng.store(0x9e37_79b9_7f4a_7c15 ^ ((os_tid as u64) << 17 | 1), Ordering::Relaxed);
        s.activities.reset();
        s.set_flow_id(0);
        s.set_flow_id(0);
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

/// Marks a drained dead slot reusable (sampler thread only).
pub(crate) fn release(slot: &Slot) {
    slot.thread_id.store(0, Ordering::Relaxed);
    slot.state.store(FREE, Ordering::Release);
}

/// Lets threads registered from another thread (threads that existed before `clrprof attach`)
/// record samples once their stack is known: the stack pointer of a thread blocked in a system
/// call or preempted (`/proc/self/task/TID/syscall`), or the one its signal handler noted, lies
/// in its stack's mapping. Called on the sampler thread after it published the code known so
/// far; returns the slots that start recording now (their CPU time counts from now). Cheap when
/// no thread waits.
pub(crate) fn learn_stack_bounds() -> Vec<&'static Slot> {
    let mut known = Vec::new();
    // Only threads registered from another thread (at attach) wait: without any, no pass over
    // every slot at every tick (it grows with the thread count).
    if REGISTERED_ELSEWHERE.load(Ordering::Acquire) == 0 {
        return known;
    }
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

/// True when `p` is one of our slots (a bounded scan of the slot table; no locks).
pub(super) fn is_slot(p: *const Slot) -> bool {
    let n = SLOT_COUNT.load(Ordering::Acquire).min(MAX_SLOTS);
    SLOTS[..n].iter().any(|s| std::ptr::eq(s.load(Ordering::Relaxed), p))
}

/// Where the next record goes in a ring holding `head - tail` words: (the counter of its first
/// word, room for its IPs — at most [`MAX_FRAMES`]), None when the ring is too full for a record
/// of one IP. A record is written where the last one ended, unless the rest of the ring up to its
/// end is too short for a stack of `MAX_FRAMES` and the free space at the ring's start is longer;
/// or the ring is empty and a stack of `MAX_FRAMES` fits before the place of the last record: the
/// record then starts at the ring's start (a [`SKIP`] word marks the unused rest), so a thread
/// whose stacks are ordinary only ever touches the ring's first pages.
#[inline]
pub(super) fn ring_place(head: u64, tail: u64) -> Option<(u64, usize)> {
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

/// Maps a ring of [`RING_WORDS`] words (not on the signal path); null when it cannot be mapped.
pub(super) fn map_ring() -> *mut u64 {
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

    #[test]
    fn the_flow_id_is_read_whole_from_the_buffer_last_written() {
        let s = Slot::new();
        assert_eq!(s.flow_id(), (0, 0));
        let a = 0x1111_2222_3333_4444_5555_6666_7777_8888u128;
        let b = 0x9999_aaaa_bbbb_cccc_dddd_eeee_ffff_0000u128;
        s.set_flow_id(a);
        assert_eq!(s.flow_id(), (0x5555_6666_7777_8888, 0x1111_2222_3333_4444));
        s.set_flow_id(b);
        assert_eq!(s.flow_id(), (0xdddd_eeee_ffff_0000, 0x9999_aaaa_bbbb_cccc));
        // The next change writes the other buffer: until its index flips, the reader keeps `b`.
        let next = 1 - s.flow_at.load(Ordering::Relaxed) as usize;
        s.flow[2 * next].store(1, Ordering::Relaxed);
        assert_eq!(s.flow_id(), (0xdddd_eeee_ffff_0000, 0x9999_aaaa_bbbb_cccc));
        s.set_flow_id(a);
        assert_eq!(s.flow_id(), (0x5555_6666_7777_8888, 0x1111_2222_3333_4444));
    }
}
