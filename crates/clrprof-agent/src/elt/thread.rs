//! Per-thread state of the enter/leave hooks: a shadow stack and a calling-context tree (CCT)
//! whose nodes accumulate calls and exclusive/suspended/profiler time. Only the owning thread
//! writes a node; the writer thread reads counters with relaxed atomic loads (plain moves on
//! x86_64) and publishes deltas. Nodes live in chunks that never move while the thread runs (each
//! twice the size of the one before), so readers never see a reallocation. When the thread ends,
//! it marks its state finished; the writer publishes the last delta and recycles the state for a
//! later thread ([`ThreadState::finish`], [`ThreadState::recycle`]). Nothing here may panic: it
//! runs inside JIT-compiled prologs.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::clock;

/// Nodes of every thread's tree now (published or not), for the cap.
pub(crate) static LIVE_NODES: AtomicUsize = AtomicUsize::new(0);
/// The most nodes the trees may hold together (`CLRPROF_CALLTREE_MAX_MB` over the bytes of a
/// node; set once at start-up). A call past it that needs a new node is counted in its caller's
/// `[call tree capped]` child instead ([`CAPPED`]), with its time.
pub(crate) static MAX_NODES: AtomicUsize = AtomicUsize::new(usize::MAX);
/// How many times the cap made a caller's `[call tree capped]` node (for the trace's note).
pub(crate) static CAPPED_NODES: AtomicU64 = AtomicU64::new(0);

/// The function of the `[call tree capped]` nodes: every call under such a node is counted in it,
/// whatever the callee (its FunctionID is `clrprof_trace::CALL_TREE_CAPPED`, never a real one).
pub(crate) static CAPPED: FuncInfo = FuncInfo { id: clrprof_trace::CALL_TREE_CAPPED as usize, index: u32::MAX };

#[inline(always)]
fn capped() -> *const FuncInfo {
    &CAPPED
}

/// Bytes of a chunk of `len` nodes.
fn chunk_bytes(len: usize) -> usize {
    len * std::mem::size_of::<Node>()
}

/// A chunk of `len` zeroed nodes (all zero is a blank node but for `parent` and `id`, which
/// `new_node` sets), mapped from the kernel so that only the pages nodes are written to take
/// memory: the chunks double in size, and most of a tree's last chunk is never used. Null when
/// the kernel has no memory.
fn alloc_chunk(len: usize) -> *mut Node {
    // Safety: an anonymous private mapping, no address hint; checked for failure.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            chunk_bytes(len),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p as *mut Node
    }
}

/// Unmaps a chunk from [`alloc_chunk`].
///
/// # Safety
/// `c` came from `alloc_chunk(len)` and no thread uses it any more.
unsafe fn free_chunk(c: *mut Node, len: usize) {
    // Safety: as the caller promises.
    unsafe { libc::munmap(c as *mut libc::c_void, chunk_bytes(len)) };
}

/// Per-function data handed to the runtime as the hooks' client id.
#[repr(C)]
pub(crate) struct FuncInfo {
    pub(crate) id: usize,
    pub(crate) index: u32,
}

pub(crate) const NO_NODE: u32 = u32::MAX;
/// Nodes in a tree's first chunk (`log2`); chunk `k` holds `FIRST_CHUNK << k` nodes.
const FIRST_CHUNK_LOG2: u32 = 8;
const FIRST_CHUNK: usize = 1 << FIRST_CHUNK_LOG2;
/// 16 chunks: 256 · (2¹⁶ − 1) ≈ 16.8 M nodes per thread.
const MAX_CHUNKS: usize = 16;
/// A recycled state keeps a shadow stack up to this many entries (a deeper one is reallocated).
const KEEP_STACK: usize = 4096;
pub(crate) const MAX_DEPTH: usize = 1 << 16;
/// How many children of the caller's node the fast enter stubs compare with the callee.
pub(crate) const FAST_SEARCH: usize = 8;
/// Slots of each node's callee cache (a power of two, in the node's first cache line): the slot of
/// a callee ([`callee_slot`]) holds the child last found for a callee of that slot, so a caller
/// with many callees finds most of them with one load instead of a walk down its sibling list (the
/// fast stubs probe it first).
pub(crate) const CALLEE_CACHE: usize = 4;
/// A child found farther down its sibling list moves to the front on every this many such finds
/// (see `ThreadState::child`).
const PROMOTE_EVERY: u32 = 8;

/// One CCT node: a call path. Counters are in ticks (converted when published). Sibling and
/// child links are pointers, written by the owner thread's Rust path only and read by it (and by
/// its fast enter stubs); the writer reads nodes by index, never the links. `repr(C)`: the
/// fast stubs read and bump fields at fixed offsets (`layout`). The first cache line holds what
/// an enter reads and bumps — the callee's `func` and `calls`, and the caller's links and callee
/// cache — so a caller entered a moment ago finds its callee cache in a line it just touched.
#[repr(C, align(64))]
pub(crate) struct Node {
    pub(crate) func: *const FuncInfo,
    pub(crate) calls: AtomicU64,
    first_child: *mut Node,
    next_sibling: *mut Node,
    /// Children by callee slot ([`callee_slot`]), written by the owner thread only (its Rust path
    /// and its fast stubs); a hint, checked against the child's `func` before use.
    cache: [*mut Node; CALLEE_CACHE],
    pub(crate) excl: AtomicU64,
    pub(crate) susp: AtomicU64,
    pub(crate) prof: AtomicU64,
    pub(crate) parent: u32,
    id: u32,
    /// The call site: the return address into the caller (`[caller SP − 8]` at the enter hook).
    /// A node is a (function, call site) child of its parent: one caller that calls a function
    /// from two lines has two children for it.
    pub(crate) site: usize,
}

/// The callee-cache slot of a callee: bits of its `FuncInfo`'s address (leaked boxes, 32 bytes
/// apart when allocated one after another), so the stubs need no load to find it.
#[inline(always)]
pub(crate) fn callee_slot(func: *const FuncInfo) -> usize {
    (func as usize >> CALLEE_SLOT_SHIFT) % CALLEE_CACHE
}

/// See [`callee_slot`].
pub(crate) const CALLEE_SLOT_SHIFT: u32 = 5;

impl Node {
    fn blank() -> Node {
        Node {
            func: std::ptr::null(),
            calls: AtomicU64::new(0),
            first_child: std::ptr::null_mut(),
            next_sibling: std::ptr::null_mut(),
            cache: [std::ptr::null_mut(); CALLEE_CACHE],
            excl: AtomicU64::new(0),
            susp: AtomicU64::new(0),
            prof: AtomicU64::new(0),
            parent: NO_NODE,
            id: NO_NODE,
            site: 0,
        }
    }

    #[inline(always)]
    fn bump(c: &AtomicU64, by: u64) {
        // Only the owning thread writes: a plain load and store (no lock prefix).
        c.store(c.load(Ordering::Relaxed).wrapping_add(by), Ordering::Relaxed);
    }
}

/// A shadow-stack entry (`repr(C)`, 16 bytes: the fast stubs index it).
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Entry {
    node: *mut Node,
    sp: usize,
}

/// The shadow stack as a raw growable buffer with a fixed layout, so the fast stubs can push and
/// pop without calling Rust. `end` points one past the top entry (the stubs read and write it
/// directly, no index to scale). The fast stubs' bounds fold the mode check, the capacity, the
/// depth limit and "never pop the root" into one comparison each: an enter stub of a mode pushes
/// only while `end < hi[mode]`, a leave stub pops only while `end >= lo[mode]`; for a mode the
/// thread does not allow, `hi` is null and `lo` the highest address, so the comparison always
/// sends it to the full stub. Owner thread only.
#[repr(C)]
pub(crate) struct ShadowStack {
    ptr: *mut Entry,
    end: *mut Entry,
    cap: usize,
    /// Per fast mode (`FAST_COUNTS`, `FAST_TIMING`; index 0 unused): the bound below which a
    /// fast enter may push.
    hi: [usize; 3],
    /// Per fast mode: the bound at or above which a fast leave may pop (two entries: the root
    /// stays).
    lo: [usize; 3],
    /// Which fast stubs may handle this thread's common enters and leaves (`FAST_*`).
    mode: u8,
}

impl ShadowStack {
    fn with_capacity(n: usize, mode: u8) -> ShadowStack {
        let n = n.max(1);
        let mut v: Vec<Entry> = Vec::with_capacity(n);
        let mut s = ShadowStack {
            ptr: v.as_mut_ptr(),
            end: v.as_mut_ptr(),
            cap: v.capacity(),
            hi: [0; 3],
            lo: [usize::MAX; 3],
            mode,
        };
        std::mem::forget(v);
        s.set_bounds();
        s
    }

    /// Recomputes the fast stubs' bounds after the buffer or the mode changed.
    fn set_bounds(&mut self) {
        self.hi = [0; 3];
        self.lo = [usize::MAX; 3];
        let m = self.mode as usize;
        if m != FAST_NONE as usize && m < 3 && !self.ptr.is_null() {
            let size = std::mem::size_of::<Entry>();
            self.hi[m] = self.ptr as usize + self.cap.min(MAX_DEPTH) * size;
            self.lo[m] = self.ptr as usize + 2 * size;
        }
    }

    #[cfg(test)]
    fn set_mode(&mut self, mode: u8) {
        self.mode = mode;
        self.set_bounds();
    }

    #[inline(always)]
    fn len(&self) -> usize {
        (self.end as usize - self.ptr as usize) / std::mem::size_of::<Entry>()
    }

    #[inline(always)]
    fn last(&self) -> Option<&Entry> {
        // Safety: entries below `end` are initialised.
        (self.end > self.ptr).then(|| unsafe { &*self.end.sub(1) })
    }

    #[inline(always)]
    fn pop(&mut self) {
        if self.end > self.ptr {
            // Safety: `end` is above `ptr`, within the buffer.
            self.end = unsafe { self.end.sub(1) };
        }
    }

    #[inline(always)]
    fn push(&mut self, e: Entry) {
        if self.len() == self.cap {
            self.grow();
        }
        // Safety: `len < cap` after `grow`, so `end` is within the buffer.
        unsafe {
            self.end.write(e);
            self.end = self.end.add(1);
        }
    }

    /// Empties the stack (the buffer is kept).
    fn clear(&mut self) {
        self.end = self.ptr;
    }

    /// Frees the buffer (the stack must not be used afterwards without a new one).
    fn free(&mut self) {
        // Safety: (ptr, cap) came from a Vec<Entry> that was forgotten, never freed; the entries
        // are plain data.
        drop(unsafe { Vec::from_raw_parts(self.ptr, 0, self.cap) });
        self.ptr = std::ptr::null_mut();
        self.end = std::ptr::null_mut();
        self.cap = 0;
        self.set_bounds();
    }

    #[cold]
    fn grow(&mut self) {
        let len = self.len();
        // Safety: (ptr, len, cap) came from a Vec<Entry> that was forgotten, never freed.
        let mut v = unsafe { Vec::from_raw_parts(self.ptr, len, self.cap) };
        v.reserve(self.cap.max(16));
        self.ptr = v.as_mut_ptr();
        // Safety: `len` is within the new buffer.
        self.end = unsafe { self.ptr.add(len) };
        self.cap = v.capacity();
        std::mem::forget(v);
        self.set_bounds();
    }
}

/// Flow events (`--flow`): a single-producer single-consumer ring the writer drains.
pub(crate) struct FlowRing {
    buf: Box<[(AtomicU64, AtomicU64)]>,
    head: AtomicUsize,
    tail: AtomicUsize,
    pub(crate) dropped: AtomicU64,
}

impl FlowRing {
    fn new(cap: usize) -> FlowRing {
        FlowRing {
            buf: (0..cap).map(|_| (AtomicU64::new(0), AtomicU64::new(0))).collect(),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    #[inline]
    fn push(&self, kind: u8, func: usize, ticks: u64) {
        let h = self.head.load(Ordering::Relaxed);
        let t = self.tail.load(Ordering::Acquire);
        if h.wrapping_sub(t) >= self.buf.len() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if let Some(slot) = self.buf.get(h % self.buf.len()) {
            slot.0.store(((kind as u64) << 62) | (func as u64 & ((1 << 62) - 1)), Ordering::Relaxed);
            slot.1.store(ticks, Ordering::Relaxed);
        }
        self.head.store(h.wrapping_add(1), Ordering::Release);
    }

    /// Forgets undrained events (the ring's single producer has ended).
    fn clear(&self) {
        self.tail.store(self.head.load(Ordering::Acquire), Ordering::Release);
        self.dropped.store(0, Ordering::Relaxed);
    }

    /// Drains events (kind, function, ticks) — writer thread only.
    pub(crate) fn drain(&self, out: &mut Vec<(u8, u64, u64)>) {
        let h = self.head.load(Ordering::Acquire);
        let mut t = self.tail.load(Ordering::Relaxed);
        while t != h {
            if let Some(slot) = self.buf.get(t % self.buf.len()) {
                let a = slot.0.load(Ordering::Relaxed);
                out.push(((a >> 62) as u8, a & ((1 << 62) - 1), slot.1.load(Ordering::Relaxed)));
            }
            t = t.wrapping_add(1);
        }
        self.tail.store(t, Ordering::Release);
    }
}

pub(crate) const FLOW_ENTER: u8 = 0;
pub(crate) const FLOW_LEAVE: u8 = 1;
pub(crate) const FLOW_TAILCALL: u8 = 2;
pub(crate) const FLOW_UNWIND: u8 = 3;

/// `ShadowStack::mode`: which fast stubs may handle this thread's common enters and leaves.
pub(crate) const FAST_NONE: u8 = 0;
/// Counts only, no flow.
pub(crate) const FAST_COUNTS: u8 = 1;
/// Timing with the TSC as the clock, no flow.
pub(crate) const FAST_TIMING: u8 = 2;

/// Field offsets the fast stubs rely on.
pub(crate) mod layout {
    use super::{Node, ShadowStack, ThreadState};
    const STACK: usize = std::mem::offset_of!(ThreadState, stack);
    pub(crate) const STACK_END: usize = STACK + std::mem::offset_of!(ShadowStack, end);
    pub(crate) const COUNTS_HI: usize = STACK + std::mem::offset_of!(ShadowStack, hi) + 8 * super::FAST_COUNTS as usize;
    pub(crate) const COUNTS_LO: usize = STACK + std::mem::offset_of!(ShadowStack, lo) + 8 * super::FAST_COUNTS as usize;
    pub(crate) const TIMING_HI: usize = STACK + std::mem::offset_of!(ShadowStack, hi) + 8 * super::FAST_TIMING as usize;
    pub(crate) const TIMING_LO: usize = STACK + std::mem::offset_of!(ShadowStack, lo) + 8 * super::FAST_TIMING as usize;
    pub(crate) const LAST: usize = std::mem::offset_of!(ThreadState, last);
    pub(crate) const LAST_SUSP: usize = std::mem::offset_of!(ThreadState, last_susp);
    pub(crate) const OVERHEAD: usize = std::mem::offset_of!(ThreadState, overhead);
    pub(crate) const NODE_FUNC: usize = std::mem::offset_of!(Node, func);
    pub(crate) const NODE_FIRST_CHILD: usize = std::mem::offset_of!(Node, first_child);
    pub(crate) const NODE_NEXT_SIBLING: usize = std::mem::offset_of!(Node, next_sibling);
    pub(crate) const NODE_CALLS: usize = std::mem::offset_of!(Node, calls);
    pub(crate) const NODE_EXCL: usize = std::mem::offset_of!(Node, excl);
    pub(crate) const NODE_PROF: usize = std::mem::offset_of!(Node, prof);
    pub(crate) const NODE_CACHE: usize = std::mem::offset_of!(Node, cache);
    pub(crate) const NODE_SITE: usize = std::mem::offset_of!(Node, site);
    // The enter stubs read the callee's func and calls and the caller's links and cache in one line.
    const _: () = assert!(NODE_CACHE + 8 * super::CALLEE_CACHE <= 64 && NODE_CALLS < 64 && NODE_FUNC < 64);
}

#[repr(C)]
pub(crate) struct ThreadState {
    stack: ShadowStack,
    pub(crate) os_tid: u32,
    /// Which calling-context tree of the process this is (one per thread lifetime, from 1; 0 for
    /// private states): the kernel reuses thread ids, the tree number is not reused.
    pub(crate) tree: u32,
    chunks: [AtomicPtr<Node>; MAX_CHUNKS],
    /// Published node count (Release after a node is initialised).
    pub(crate) node_count: AtomicU32,
    /// The thread's root: parent of functions entered with nothing recorded above them (owned
    /// here, used through the bottom stack entry's pointer).
    _root: Box<Node>,
    last: u64,
    last_susp: u64,
    timing: bool,
    overhead: u64,
    pub(crate) flow: Option<FlowRing>,
    /// Calls not recorded (call tree full, stack too deep).
    pub(crate) overflowed: AtomicU64,
    /// Children found beyond the fast stubs' search window (`ThreadState::child`).
    far_finds: u32,
    /// Set (Release) by the owner thread as its last access, when it ends: the counters are
    /// final and the writer may publish them once more and recycle the state.
    finished: AtomicBool,
    /// A cap of this tree's own (tests; `usize::MAX`: the process's cap, [`MAX_NODES`]).
    node_limit: usize,
}

// Safety: `Node::func` points into leaked, immutable FuncInfo records and node links point into
// chunks owned by this state; the only cross-thread accesses are the atomics.
unsafe impl Send for ThreadState {}
// Safety: as above.
unsafe impl Sync for ThreadState {}

/// Total time the runtime spent suspended so far, in ticks (updated at resume).
pub(crate) static SUSPENDED_TICKS: AtomicU64 = AtomicU64::new(0);

impl ThreadState {
    pub(crate) fn new(os_tid: u32, timing: bool, overhead: u64, flow: bool) -> ThreadState {
        let mut root = Box::new(Node::blank());
        let fast = match (timing, flow) {
            (_, true) => FAST_NONE,
            (false, false) => FAST_COUNTS,
            // The timing stubs read the clock with `rdtsc`: only when that is the clock.
            (true, false) if clock::is_tsc() => FAST_TIMING,
            (true, false) => FAST_NONE,
        };
        let mut stack = ShadowStack::with_capacity(256, fast);
        stack.push(Entry { node: &mut *root as *mut Node, sp: usize::MAX });
        ThreadState {
            os_tid,
            tree: 0,
            chunks: [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_CHUNKS],
            node_count: AtomicU32::new(0),
            _root: root,
            stack,
            last: clock::ticks(),
            last_susp: SUSPENDED_TICKS.load(Ordering::Relaxed),
            timing,
            overhead,
            flow: flow.then(|| FlowRing::new(1 << 16)),
            overflowed: AtomicU64::new(0),
            far_finds: 0,
            finished: AtomicBool::new(false),
            node_limit: usize::MAX,
        }
    }

    /// Starts a new (or recycled, see [`ThreadState::recycle`]) state on the calling thread:
    /// its ids, and the clock readings the first event charges from.
    pub(crate) fn start(&mut self, os_tid: u32, tree: u32) {
        self.os_tid = os_tid;
        self.tree = tree;
        self.last = clock::ticks();
        self.last_susp = SUSPENDED_TICKS.load(Ordering::Relaxed);
        self.finished.store(false, Ordering::Relaxed);
    }

    /// The owner thread ends: its last access to the state. The writer publishes what it did
    /// since the previous flush, then recycles the state.
    pub(crate) fn finish(&self) {
        self.finished.store(true, Ordering::Release);
    }

    /// Whether the owner thread has ended (Acquire: every counter it wrote is visible). Read
    /// before the counters, so that a state seen finished is published with its final counts.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Makes a finished state as new for a later thread, keeping its first chunk and shadow
    /// stack (a deep one is replaced by a small one). Writer thread only, after the last
    /// publication, while no thread uses the state.
    pub(crate) fn recycle(&mut self) {
        let count = self.node_count.load(Ordering::Relaxed) as usize;
        for (k, slot) in self.chunks.iter().enumerate() {
            let c = slot.load(Ordering::Relaxed);
            if c.is_null() {
                continue;
            }
            let len = FIRST_CHUNK << k;
            if k == 0 {
                for i in 0..count.min(len) {
                    // Safety: chunk 0 holds `len` initialised nodes, unused by any thread now.
                    unsafe { c.add(i).write(Node::blank()) };
                }
            } else {
                slot.store(std::ptr::null_mut(), Ordering::Relaxed);
                // Safety: the chunk came from `alloc_chunk(len)` in `new_node`, and no thread
                // uses it any more.
                unsafe { free_chunk(c, len) };
            }
        }
        self.node_count.store(0, Ordering::Relaxed);
        LIVE_NODES.fetch_sub(count.min(LIVE_NODES.load(Ordering::Relaxed)), Ordering::Relaxed);
        *self._root = Node::blank();
        if self.stack.cap > KEEP_STACK {
            self.stack.free();
            self.stack = ShadowStack::with_capacity(256, self.stack.mode);
        }
        self.stack.clear();
        self.stack.push(Entry { node: &mut *self._root as *mut Node, sp: usize::MAX });
        if let Some(f) = &self.flow {
            f.clear();
        }
        self.overflowed.store(0, Ordering::Relaxed);
        self.far_finds = 0;
        self.os_tid = 0;
        self.tree = 0;
    }

    /// Chunk index and offset of node `i`.
    #[inline(always)]
    fn chunk_of(i: u32) -> (usize, usize) {
        let j = i as usize + FIRST_CHUNK;
        let k = (usize::BITS - 1 - j.leading_zeros() - FIRST_CHUNK_LOG2) as usize;
        (k, j - (FIRST_CHUNK << k))
    }

    /// The node with id `i`, if published.
    pub(crate) fn node(&self, i: u32) -> Option<&Node> {
        if i >= self.node_count.load(Ordering::Acquire) {
            return None;
        }
        let (k, off) = Self::chunk_of(i);
        let c = self.chunks.get(k)?.load(Ordering::Acquire);
        if c.is_null() {
            return None;
        }
        // Safety: chunk `k` holds `FIRST_CHUNK << k` initialised nodes (`off` is below that);
        // nodes below the published count are complete; chunks are freed only by `recycle`,
        // which runs on the writer thread, the only reader, after its last read of this tree.
        Some(unsafe { &*c.add(off) })
    }

    /// A new child of `parent`; null when the trees are at their cap ([`MAX_NODES`]; a
    /// `[call tree capped]` node may still be made) or this tree is full.
    #[cold]
    fn new_node(&mut self, parent: *mut Node, func: *const FuncInfo, site: usize) -> *mut Node {
        let i = self.node_count.load(Ordering::Relaxed);
        if i == NO_NODE {
            return std::ptr::null_mut();
        }
        let (live, max) = if self.node_limit == usize::MAX {
            (LIVE_NODES.load(Ordering::Relaxed), MAX_NODES.load(Ordering::Relaxed))
        } else {
            (i as usize, self.node_limit)
        };
        // Capped nodes may go an eighth past the cap (one per caller at most), then only the
        // root's (one per thread).
        let room = if func != capped() {
            live < max
        } else {
            live < max.saturating_add(max / 8) || parent == self.stack_root()
        };
        if !room {
            return std::ptr::null_mut();
        }
        let (k, off) = Self::chunk_of(i);
        let Some(slot) = self.chunks.get(k) else {
            return std::ptr::null_mut();
        };
        let mut c = slot.load(Ordering::Relaxed);
        if c.is_null() {
            // A new chunk: the only allocation on the hot path, 16 times at most per thread (256
            // nodes, then twice as many each time).
            c = alloc_chunk(FIRST_CHUNK << k);
            if c.is_null() {
                return c;
            }
            slot.store(c, Ordering::Release);
        }
        // Safety: chunk `k` has `FIRST_CHUNK << k` nodes (`off` is below that); node `i` is not
        // yet published, so only we touch it; `parent` is the root or a node of this state.
        unsafe {
            let n = c.add(off);
            (*n).parent = (*parent).id;
            (*n).id = i;
            (*n).func = func;
            (*n).site = site;
            (*n).next_sibling = (*parent).first_child;
            (*parent).first_child = n;
            self.node_count.store(i + 1, Ordering::Release);
            LIVE_NODES.fetch_add(1, Ordering::Relaxed);
            n
        }
    }

    /// The child of `parent` for `func` called from `site`, created on first use (at the front of
    /// the sibling list).
    ///
    /// The fast enter stubs find a child among the first `FAST_SEARCH` siblings, so the order
    /// within that window does not matter and is left alone. A child found farther down moves to
    /// the front on every `PROMOTE_EVERY`th such find, not on each: always moving it (LRU order)
    /// keeps a hot callee that newer, colder siblings pushed out of the window on the slow path
    /// for one call only, but makes a caller that cycles through more callees than the window
    /// holds (a serializer calling a dozen getters in turn) miss on every call, because each move
    /// pushes out the callee needed next. Occasional moves bring hot callees back into the
    /// window and leave most of a cycle's callees in place.
    ///
    /// The child found or made is remembered in the parent's callee cache, which is looked at first.
    #[inline(always)]
    fn child(&mut self, parent: *mut Node, func: *const FuncInfo, site: usize) -> *mut Node {
        // Safety: `parent` is the root or a node of this state.
        if unsafe { (*parent).func } == capped() {
            // Past the cap: everything called under a capped node is counted in it.
            return parent;
        }
        let slot = callee_slot(func);
        // Safety: `parent` is the root or a node of this state.
        let cached = unsafe { (*parent).cache[slot] };
        // Safety: cached children are nodes of this state.
        if !cached.is_null() && unsafe { (*cached).func == func && (*cached).site == site } {
            return cached;
        }
        let found = self.find_child(parent, func, site);
        if !found.is_null() {
            // Safety: as above.
            unsafe { (*parent).cache[slot] = found };
        }
        found
    }

    /// The sibling-list search behind [`ThreadState::child`]'s cache.
    #[inline(always)]
    fn find_child(&mut self, parent: *mut Node, func: *const FuncInfo, site: usize) -> *mut Node {
        // Safety: `parent` and its children are nodes of this state (or its root).
        unsafe {
            let mut prev: *mut Node = std::ptr::null_mut();
            let mut cur = (*parent).first_child;
            let mut i = 0;
            while !cur.is_null() {
                if (*cur).func == func && (*cur).site == site {
                    if i >= FAST_SEARCH {
                        self.far_finds = self.far_finds.wrapping_add(1);
                        if self.far_finds.is_multiple_of(PROMOTE_EVERY) {
                            (*prev).next_sibling = (*cur).next_sibling;
                            (*cur).next_sibling = (*parent).first_child;
                            (*parent).first_child = cur;
                        }
                    }
                    return cur;
                }
                prev = cur;
                cur = (*cur).next_sibling;
                i += 1;
            }
        }
        let n = self.new_node(parent, func, site);
        if n.is_null() {
            self.capped_child(parent)
        } else {
            n
        }
    }

    /// The `[call tree capped]` child of `parent`, made on first use: where calls go that found
    /// no node and could not make one (the trees at their cap, or this one full). Its calls and
    /// time stay under the caller, so inclusive times hold; which functions they were is lost.
    /// Past the capped nodes' own allowance, the thread root's one takes them. Null only when
    /// even that cannot be made.
    #[cold]
    fn capped_child(&mut self, parent: *mut Node) -> *mut Node {
        let root = self.stack_root();
        for p in [parent, root] {
            if p.is_null() {
                continue;
            }
            // Safety: `p` and its children are nodes of this state (or its root).
            unsafe {
                let mut cur = (*p).first_child;
                while !cur.is_null() {
                    if (*cur).func == capped() {
                        return cur;
                    }
                    cur = (*cur).next_sibling;
                }
            }
            let n = self.new_node(p, capped(), 0);
            if !n.is_null() {
                CAPPED_NODES.fetch_add(1, Ordering::Relaxed);
                return n;
            }
        }
        std::ptr::null_mut()
    }

    /// The thread's root node (the bottom entry of the shadow stack).
    #[inline(always)]
    fn stack_root(&mut self) -> *mut Node {
        &mut *self._root as *mut Node
    }

    /// Charges the time since the previous event to the node on top of the stack. The timing
    /// fast stubs do the same in assembly when no suspension is pending (`susp` = 0).
    #[inline(always)]
    fn charge(&mut self, now: u64, top: *mut Node) {
        let delta = now.wrapping_sub(self.last);
        self.last = now;
        let susp_total = SUSPENDED_TICKS.load(Ordering::Relaxed);
        let susp = susp_total.wrapping_sub(self.last_susp).min(delta);
        self.last_susp = susp_total;
        let overhead = self.overhead.min(delta - susp);
        // Safety: `top` is the root or a node of this state.
        let n = unsafe { &*top };
        Node::bump(&n.excl, delta - susp - overhead);
        Node::bump(&n.prof, overhead);
        if susp != 0 {
            Node::bump(&n.susp, susp);
        }
    }

    /// Reads the clock (when timing or tracing flow) and charges the elapsed time to the node on
    /// top of the stack; returns the time read (0 in counts-only mode without flow).
    #[inline(always)]
    fn event_time(&mut self) -> u64 {
        let now = if self.timing || self.flow.is_some() { clock::ticks() } else { 0 };
        if self.timing {
            let top = self.top().node;
            if !top.is_null() {
                self.charge(now, top);
            }
        }
        now
    }

    #[inline(always)]
    fn top(&self) -> Entry {
        // The bottom entry (the root) is never popped.
        match self.stack.last() {
            Some(e) => *e,
            None => Entry { node: std::ptr::null_mut(), sp: usize::MAX },
        }
    }

    #[cold]
    fn flow_unwound(&self, e: Entry, now: u64) {
        if let Some(f) = &self.flow {
            // Safety: entries hold nodes of this state; `func` is a leaked FuncInfo.
            let id = unsafe { (*e.node).func.as_ref() }.map(|f| f.id).unwrap_or(0);
            f.push(FLOW_UNWIND, id, now);
        }
    }

    /// A function was entered (`sp`: the caller's stack pointer, from the JIT; `site`: the return
    /// address into the caller, the word below `sp`).
    ///
    /// # Safety
    /// `func` must point to a `FuncInfo` that lives for the rest of the process.
    #[inline(always)]
    pub(crate) unsafe fn enter(&mut self, func: *const FuncInfo, sp: usize, site: usize) {
        let now = self.event_time();
        // Frames at or below this SP are gone: an exception unwound them without leave hooks.
        while self.stack.len() > 1 {
            let e = self.top();
            if e.sp > sp {
                break;
            }
            self.stack.pop();
            if self.flow.is_some() {
                self.flow_unwound(e, now);
            }
        }
        if self.stack.len() >= MAX_DEPTH {
            Node::bump(&self.overflowed, 1);
            return;
        }
        let parent = self.top().node;
        if parent.is_null() {
            return;
        }
        let node = self.child(parent, func, site);
        if node.is_null() {
            Node::bump(&self.overflowed, 1);
            return;
        }
        // Safety: `node` is a node of this state.
        Node::bump(unsafe { &(*node).calls }, 1);
        self.stack.push(Entry { node, sp });
        if let Some(f) = &self.flow {
            // Safety: `func` is a leaked FuncInfo handed out by the mapper.
            f.push(FLOW_ENTER, unsafe { (*func).id }, now);
        }
    }

    /// A function returned (or tail-called away, `kind` = `FLOW_TAILCALL`).
    ///
    /// # Safety
    /// As for [`ThreadState::enter`].
    #[inline(always)]
    pub(crate) unsafe fn leave(&mut self, func: *const FuncInfo, sp: usize, kind: u8) {
        let now = self.event_time();
        while self.stack.len() > 1 {
            let e = self.top();
            // Deeper frames were unwound by an exception without leave hooks.
            if e.sp < sp {
                self.stack.pop();
                if self.flow.is_some() {
                    self.flow_unwound(e, now);
                }
                continue;
            }
            // Safety: entries hold nodes of this state.
            // A capped node stands for whatever function was called under it.
            if e.sp == sp && unsafe { (*e.node).func == func || (*e.node).func == capped() } {
                self.stack.pop();
            }
            break;
        }
        if let Some(f) = &self.flow {
            // Safety: `func` is a leaked FuncInfo handed out by the mapper.
            f.push(kind, unsafe { (*func).id }, now);
        }
    }
}

impl Drop for ThreadState {
    /// Frees the chunks and the shadow stack (a state is dropped only when no thread uses it:
    /// private states, or finished ones the writer does not keep for reuse).
    fn drop(&mut self) {
        self.recycle();
        for slot in &self.chunks {
            let c = slot.swap(std::ptr::null_mut(), Ordering::Relaxed);
            if !c.is_null() {
                // Safety: chunk 0 came from `alloc_chunk(FIRST_CHUNK)` in `new_node`.
                unsafe { free_chunk(c, FIRST_CHUNK) };
            }
        }
        self.stack.free();
    }
}

/// Everything the hooks accumulate on a thread, for tests that compare two ways of driving them.
#[cfg(test)]
#[derive(Debug, PartialEq)]
pub(crate) struct Snapshot {
    /// Per node (the root first): parent, function, calls, exclusive, suspended, profiler, site.
    pub(crate) nodes: Vec<(u32, usize, u64, u64, u64, u64, usize)>,
    /// Shadow stack: (node id, SP).
    pub(crate) stack: Vec<(u32, usize)>,
    pub(crate) last: u64,
    pub(crate) last_susp: u64,
    pub(crate) overflowed: u64,
}

#[cfg(test)]
impl ThreadState {
    pub(crate) fn snapshot(&self) -> Snapshot {
        let row = |n: &Node| {
            (
                n.parent,
                n.func as usize,
                n.calls.load(Ordering::Relaxed),
                n.excl.load(Ordering::Relaxed),
                n.susp.load(Ordering::Relaxed),
                n.prof.load(Ordering::Relaxed),
                n.site,
            )
        };
        let mut nodes = vec![row(&self._root)];
        nodes.extend((0..self.node_count.load(Ordering::Relaxed)).filter_map(|i| self.node(i)).map(row));
        let stack = (0..self.stack.len())
            // Safety: entries below `len` are initialised and hold nodes of this state.
            .map(|i| unsafe { *self.stack.ptr.add(i) })
            .map(|e| (unsafe { (*e.node).id }, e.sp))
            .collect();
        Snapshot {
            nodes,
            stack,
            last: self.last,
            last_susp: self.last_susp,
            overflowed: self.overflowed.load(Ordering::Relaxed),
        }
    }

    /// Caps this tree alone at `n` nodes (the process's cap is shared by every test).
    pub(crate) fn set_node_limit(&mut self, n: usize) {
        self.node_limit = n;
    }

    /// Forces the fast-stub mode (tests run without `clock::init`, so timing would get none).
    pub(crate) fn set_fast(&mut self, mode: u8) {
        self.stack.set_mode(mode);
    }

    /// Sum of all time charged to the thread's nodes (exclusive + suspended + profiler).
    pub(crate) fn charged(&self) -> u64 {
        self.snapshot().nodes.iter().map(|n| n.3.wrapping_add(n.4).wrapping_add(n.5)).fold(0, u64::wrapping_add)
    }
}
