//! CPU-time sampling: one POSIX timer per managed thread on that thread's CPU-time clock, whose
//! `SIGPROF` is delivered to the thread itself (`SIGEV_THREAD_ID`). A thread that does not run
//! does not advance its clock, so it is never sampled: blocked time costs no CPU weight.
//!
//! The signal handler only copies the interrupted IP and a bounded frame-pointer walk (validated
//! against the thread's stack bounds) into the thread's preallocated ring ([`Slot`]). It does not
//! allocate, lock, log or call the runtime; it finds its slot through the timer's `sigval`, so it
//! needs no thread-local storage. Signals that are not ours go to the previous handler.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Deepest stack the handler records.
pub const MAX_FRAMES: usize = 128;
/// Samples a thread can hold between two drains of the sampler thread.
const RING: usize = 16;
/// Most threads the sampler tracks at once (slots are reused after a thread dies).
pub const MAX_SLOTS: usize = 8192;
const MAGIC: u64 = 0x636c_7270_726f_6631;
/// `si_code` of a POSIX timer signal.
const SI_TIMER: i32 = -2;

/// One sample: IPs, leaf first.
#[repr(C)]
pub struct Entry {
    pub len: u32,
    /// The word at the interrupted SP: the return address when the leaf has no frame yet (or
    /// none at all); checked off the signal path.
    pub sp_top: u64,
    pub ips: [u64; MAX_FRAMES],
}

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
    /// Kernel timer id, -1 when none.
    timer: AtomicI64,
    period_ns: AtomicU64,
    rng: AtomicU64,
    head: AtomicU32,
    tail: AtomicU32,
    pub dropped: AtomicU64,
    /// CPU time (ns) read when the thread died, for the last drain.
    pub final_cpu_ns: AtomicU64,
    /// CPU time (ns) the thread had used when it was registered.
    pub start_cpu_ns: AtomicU64,
    /// When the thread was registered and when it died (ns since the agent started; 0 until
    /// known), set by the sampler: its wall time runs from one to the other.
    pub registered_ns: AtomicU64,
    pub died_ns: AtomicU64,
    entries: UnsafeCell<[Entry; RING]>,
}

// Safety: `entries` is a single-producer (the slot's thread, in its signal handler, which cannot
// nest because SIGPROF is blocked while it runs) single-consumer (the sampler thread) ring whose
// ownership is handed over through `head`/`tail` with release/acquire ordering.
unsafe impl Sync for Slot {}

static SLOTS: [AtomicPtr<Slot>; MAX_SLOTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_SLOTS];
static SLOT_COUNT: AtomicUsize = AtomicUsize::new(0);

/// The previous `SIGPROF` disposition, for chaining.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);

impl Slot {
    fn new() -> Box<Slot> {
        // Safety: Entry is plain integers; all-zero is a valid value.
        let entries: [Entry; RING] = unsafe { std::mem::zeroed() };
        Box::new(Slot {
            magic: MAGIC,
            state: AtomicU32::new(FREE),
            os_tid: AtomicU32::new(0),
            thread_id: AtomicUsize::new(0),
            stack_lo: AtomicU64::new(0),
            stack_hi: AtomicU64::new(0),
            timer: AtomicI64::new(-1),
            period_ns: AtomicU64::new(10_000_000),
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
            dropped: AtomicU64::new(0),
            final_cpu_ns: AtomicU64::new(0),
            start_cpu_ns: AtomicU64::new(0),
            registered_ns: AtomicU64::new(0),
            died_ns: AtomicU64::new(0),
            entries: UnsafeCell::new(entries),
        })
    }

    /// Copies out the samples recorded since the last call (sampler thread only).
    pub fn drain(&self, mut f: impl FnMut(&[u64], u64)) -> usize {
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Acquire);
        let mut n = 0;
        let mut t = tail;
        while t != head {
            // Safety: entries in tail..head were published by the producer (release on head) and
            // are not written again until `tail` moves past them.
            let e = unsafe { &(*self.entries.get())[t as usize % RING] };
            f(&e.ips[..(e.len as usize).min(MAX_FRAMES)], e.sp_top);
            t = t.wrapping_add(1);
            n += 1;
        }
        self.tail.store(t, Ordering::Release);
        n
    }

    /// The thread's CPU time so far, ns (None once the thread is gone).
    pub fn cpu_ns(&self) -> Option<u64> {
        thread_cpu_ns(self.os_tid.load(Ordering::Relaxed))
    }
}

/// CPU time of a thread of this process, read from its CPU-time clock (no signal involved).
pub fn thread_cpu_ns(tid: u32) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: a per-thread CPU clock id; clock_gettime writes `ts` or fails.
    let r = unsafe { libc::clock_gettime(thread_clock(tid), &mut ts) };
    (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
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
        s.rng.store(0x9e37_79b9_7f4a_7c15 ^ ((os_tid as u64) << 17 | 1), Ordering::Relaxed);
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
    if me == os_tid {
        if let Some((lo, hi)) = current_stack_bounds() {
            slot.stack_lo.store(lo, Ordering::Relaxed);
            slot.stack_hi.store(hi, Ordering::Relaxed);
        }
    }
    slot.head.store(0, Ordering::Relaxed);
    slot.tail.store(0, Ordering::Relaxed);
    slot.final_cpu_ns.store(0, Ordering::Relaxed);
    slot.start_cpu_ns.store(slot.cpu_ns().unwrap_or(0), Ordering::Relaxed);
    let Some(period_ns) = period_ns else { return (Some(slot), None) };
    slot.period_ns.store(period_ns.max(1000), Ordering::Relaxed);
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
    slot.state.store(DEAD, Ordering::Release);
}

/// Marks a drained dead slot reusable (sampler thread only).
pub fn release(slot: &Slot) {
    slot.thread_id.store(0, Ordering::Relaxed);
    slot.state.store(FREE, Ordering::Release);
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

unsafe fn record(slot: &Slot, uc: *const libc::ucontext_t) {
    if slot.state.load(Ordering::Acquire) != ACTIVE || uc.is_null() {
        return;
    }
    let head = slot.head.load(Ordering::Relaxed);
    let tail = slot.tail.load(Ordering::Acquire);
    if head.wrapping_sub(tail) as usize >= RING {
        slot.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let e = &mut (*slot.entries.get())[head as usize % RING];
    let g = &(*uc).uc_mcontext.gregs;
    let ip = g[libc::REG_RIP as usize] as u64;
    let mut fp = g[libc::REG_RBP as usize] as u64;
    let sp = g[libc::REG_RSP as usize] as u64;
    let lo = slot.stack_lo.load(Ordering::Relaxed);
    let hi = slot.stack_hi.load(Ordering::Relaxed);
    e.ips[0] = ip;
    // Only the part of the stack between the interrupted SP and the top is known to be mapped
    // (the main thread's stack grows on demand). When SP is elsewhere (an alternate signal
    // stack), only the IP is recorded.
    let on_stack = hi != 0 && sp >= lo && sp <= hi - 8;
    e.sp_top = if on_stack && sp.is_multiple_of(8) { *(sp as *const u64) } else { 0 };
    let mut n = 1;
    // Frame-pointer walk: [fp] = caller's fp, [fp+8] = return address. Every frame must lie on
    // this thread's stack, above the interrupted SP, 8-aligned, and strictly above the last one.
    while on_stack && n < MAX_FRAMES && fp >= sp && fp <= hi - 16 && fp.is_multiple_of(8) {
        let ret = *((fp + 8) as *const u64);
        let next = *(fp as *const u64);
        if ret < 4096 {
            break;
        }
        e.ips[n] = ret;
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    e.len = n as u32;
    slot.head.store(head.wrapping_add(1), Ordering::Release);
}
