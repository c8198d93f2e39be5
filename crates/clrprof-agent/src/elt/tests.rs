//! Tests of the hooks: the stubs against the Rust bodies with a scripted clock, the thread table
//! and the publication of call trees.

use std::cell::Cell;

thread_local! {
    /// Calls of the Rust hooks on this thread (the stubs' slow path, or tests calling them).
    pub(crate) static SLOW_HOOKS: Cell<u64> = const { Cell::new(0) };
}

#[cfg(target_arch = "x86_64")]
mod x86_64 {
    use super::SLOW_HOOKS;
    use crate::elt::hooks::{hook_enter, hook_leave, hook_tailcall};
    use crate::elt::thread::{
        FuncInfo, Snapshot, ThreadState, FAST_COUNTS, FAST_SEARCH, FAST_TIMING, MAX_DEPTH, SUSPENDED_TICKS,
    };
    use crate::elt::{clock, stubs, tls};
    use core::arch::x86_64::__m128i;
    use std::sync::atomic::Ordering;
    use std::sync::Mutex;

    /// The tests below share `SUSPENDED_TICKS` (one of them moves it): one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Ev {
        Enter(*const FuncInfo, usize),
        Leave(*const FuncInfo, usize),
        Tail(*const FuncInfo, usize),
    }

    /// One scripted step: the event, how far the clock moves before it (wrapping: sometimes
    /// backwards) and how many suspended ticks the runtime reports before it.
    struct Step {
        ev: Ev,
        advance: u64,
        suspended: u64,
    }

    /// Makes the made-up stack pointers of these tests (64 MB below `0x7000_0000`, and a page
    /// above) readable and writable: the enter stubs read the call site below the SP.
    pub(super) fn fake_stack() {
        static MAPPED: std::sync::Once = std::sync::Once::new();
        MAPPED.call_once(|| {
            let (lo, hi) = (0x6c00_0000usize, 0x7000_1000usize);
            // Safety: a fixed mapping that must not replace anything (fails if taken).
            let p = unsafe {
                libc::mmap(
                    lo as *mut libc::c_void,
                    hi - lo,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            assert_eq!(p as usize, lo, "the tests' fake stack is mapped");
        });
    }

    /// The call site the stubs read for a call with this SP (the word below it).
    fn site_at(sp: usize) -> usize {
        fake_stack();
        // Safety: `fake_stack` maps the tests' SPs.
        unsafe { ((sp - 8) as *const usize).read() }
    }

    /// Sets the call site of a call with this SP.
    fn set_site(sp: usize, site: usize) {
        fake_stack();
        // Safety: as in `site_at`.
        unsafe { ((sp - 8) as *mut usize).write(site) }
    }

    fn funcs(n: usize) -> Vec<*const FuncInfo> {
        (0..n).map(|i| Box::leak(Box::new(FuncInfo { id: 0x1000 + i, index: i as u32 })) as *const FuncInfo).collect()
    }

    /// Call sequences as the JIT produces them — mostly the same callees again (the fast path),
    /// loops calling several callees in turn (fan-out up to 13, beyond the stubs' search
    /// window, sometimes with a nested call), new callees, tail calls, frames unwound by
    /// exceptions without leave hooks,
    /// mismatched and null ids, suspensions, deep recursion across the shadow stack's growth,
    /// and clock steps below, around and far above the per-event overhead.
    fn script(seed: u64, n: usize, f: &[*const FuncInfo]) -> Vec<Step> {
        let mut r = Rng(seed);
        let mut stack: Vec<(*const FuncInfo, usize)> = Vec::new();
        let mut last_callee = vec![f[0]; 4096];
        let mut out = Vec::new();
        let base = 0x7000_0000usize;
        while out.len() < n {
            let top_sp = stack.last().map(|e| e.1).unwrap_or(base);
            let depth = stack.len();
            let callee = |r: &mut Rng, last: &mut Vec<*const FuncInfo>| {
                let c = if r.below(10) < 8 { last[depth] } else { f[r.below(f.len() as u64) as usize] };
                last[depth] = c;
                c
            };
            let mut evs = Vec::new();
            match r.below(100) {
                0..=4 => {
                    // A loop calling k callees in turn (a serializer calling its getters).
                    let k = 1 + r.below(13) as usize;
                    let off = r.below(f.len() as u64) as usize;
                    let sp = top_sp - 64;
                    for _ in 0..1 + r.below(6) {
                        for j in 0..k {
                            let c = f[(off + j) % f.len()];
                            evs.push(Ev::Enter(c, sp));
                            if r.below(4) == 0 {
                                let d = f[r.below(f.len() as u64) as usize];
                                evs.push(Ev::Enter(d, sp - 64));
                                evs.push(Ev::Leave(d, sp - 64));
                            }
                            evs.push(Ev::Leave(c, sp));
                        }
                    }
                }
                5..=44 => {
                    let c = callee(&mut r, &mut last_callee);
                    let sp = top_sp - 64;
                    stack.push((c, sp));
                    evs.push(Ev::Enter(c, sp));
                }
                45..=84 => {
                    if let Some((c, sp)) = stack.pop() {
                        evs.push(Ev::Leave(c, sp));
                    }
                }
                85..=88 => {
                    if let Some((c, sp)) = stack.pop() {
                        evs.push(Ev::Tail(c, sp));
                        let d = callee(&mut r, &mut last_callee);
                        stack.push((d, sp));
                        evs.push(Ev::Enter(d, sp));
                    }
                }
                89..=91 => {
                    // An exception unwinds frames: no leave hooks for them.
                    for _ in 0..=r.below(3) {
                        stack.pop();
                    }
                }
                92..=93 => {
                    if let Some(&(c, sp)) = stack.last() {
                        let other = f[r.below(f.len() as u64) as usize];
                        let sp = if r.below(2) == 0 { sp } else { sp + 64 * (1 + r.below(3) as usize) };
                        evs.push(if other == c { Ev::Leave(std::ptr::null(), sp) } else { Ev::Leave(other, sp) });
                    }
                }
                94 => evs.push(Ev::Enter(std::ptr::null(), top_sp - 64)),
                95 => {
                    // Deep recursion: past the stack's initial capacity and its growth.
                    let c = f[0];
                    let k = 200 + r.below(700) as usize;
                    for _ in 0..k {
                        let sp = stack.last().map(|e| e.1).unwrap_or(base) - 64;
                        stack.push((c, sp));
                        evs.push(Ev::Enter(c, sp));
                    }
                    for _ in 0..k {
                        if let Some((c, sp)) = stack.pop() {
                            evs.push(Ev::Leave(c, sp));
                        }
                    }
                }
                _ => {
                    let c = callee(&mut r, &mut last_callee);
                    evs.push(Ev::Enter(c, top_sp - 64));
                    stack.push((c, top_sp - 64));
                }
            }
            for ev in evs {
                let advance = match r.below(100) {
                    0..=9 => 0,
                    10..=79 => r.below(200),
                    80..=97 => r.below(100_000),
                    98 => 1 << 40,
                    _ => 100u64.wrapping_neg(),
                };
                let suspended = if r.below(100) < 3 { 1 + r.below(500) } else { 0 };
                out.push(Step { ev, advance, suspended });
            }
        }
        out
    }

    /// Runs the script through the Rust hooks on one state and through `stubs` (called as
    /// the JIT calls them, falling back to the same Rust hooks) on another, with the same
    /// scripted clock; both must account every event identically. Returns how many events
    /// the stubs handled without the Rust hooks.
    fn lockstep(timing: bool, fast: u8, stubs_: [unsafe extern "C" fn(); 3], seed: u64) -> u64 {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        fake_stack();
        let f = funcs(14);
        let steps = script(seed, 40_000, &f);
        let mut now = 1_000_000_000u64;
        clock::set_fake_ticks(now);
        let a = Box::into_raw(Box::new(ThreadState::new(1, timing, 50, false)));
        let b = Box::into_raw(Box::new(ThreadState::new(1, timing, 50, false)));
        // Safety (this function): `a` and `b` are leaked states only this thread uses; the
        // TLS slot points to `b` until restored; every FuncInfo is leaked.
        unsafe { (*b).set_fast(fast) };
        let prev = tls::current();
        tls::set_current(b);
        let [enter, leave, tailcall] = stubs_;
        let mut fast_events = 0;
        for (i, s) in steps.iter().enumerate() {
            now = now.wrapping_add(s.advance).max(1);
            clock::set_fake_ticks(now);
            if s.suspended > 0 {
                SUSPENDED_TICKS.fetch_add(s.suspended, Ordering::Relaxed);
            }
            let slow = SLOW_HOOKS.with(|c| c.get());
            unsafe {
                match s.ev {
                    Ev::Enter(func, sp) => {
                        // Two call sites, in phases: each callee gets a child per site.
                        set_site(sp, 0x4000 + (i / 1000) % 2);
                        stubs::call_enter(enter, func, sp);
                        hook_enter(a, func, sp, site_at(sp));
                    }
                    Ev::Leave(func, sp) => {
                        stubs::call_leave(leave, func, sp);
                        hook_leave(a, func, sp);
                    }
                    Ev::Tail(func, sp) => {
                        stubs::call_leave(tailcall, func, sp);
                        hook_tailcall(a, func, sp);
                    }
                }
            }
            // One Rust call for the reference; a second one when the stub fell back.
            if SLOW_HOOKS.with(|c| c.get()) == slow + 1 {
                fast_events += 1;
            }
            if i % 7 == 0 || i + 1 == steps.len() {
                let (sa, sb): (Snapshot, Snapshot) = unsafe { ((*a).snapshot(), (*b).snapshot()) };
                assert_eq!(sa, sb, "after step {i}: {:?}", s.ev);
            }
        }
        tls::set_current(prev);
        clock::set_fake_ticks(0);
        let sb = unsafe { (*b).snapshot() };
        assert!(sb.nodes.len() > 20, "the script builds a real tree: {} nodes", sb.nodes.len());
        assert!(sb.stack.len() < MAX_DEPTH);
        fast_events
    }

    #[test]
    fn timing_fast_stubs_account_exactly_like_the_rust_hooks() {
        let stubs_ = [stubs::enter_scripted_stub, stubs::leave_scripted_stub, stubs::tailcall_scripted_stub];
        for seed in [1, 0x9e37_79b9_7f4a_7c15, 42] {
            let fast = lockstep(true, FAST_TIMING, stubs_, seed);
            assert!(fast > 15_000, "the fast path handled {fast} of 40,000+ events");
        }
        // With the fast path switched off on the thread, the stubs only fall back.
        assert_eq!(lockstep(true, 0, stubs_, 7), 0);
    }

    /// A tree capped at a few dozen nodes counts every call and every tick a full tree counts:
    /// calls that needed a node past the cap go to their caller's `[call tree capped]` node
    /// (those under it too), and the stubs (fast path and fallback) account exactly like the
    /// Rust hooks on the capped tree.
    #[test]
    fn a_capped_tree_folds_calls_into_capped_nodes_without_losing_counts_or_time() {
        use crate::elt::thread::CAPPED;
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        fake_stack();
        let f = funcs(14);
        let steps = script(11, 40_000, &f);
        let t0 = 1_000_000_000u64;
        clock::set_fake_ticks(t0);
        let full = Box::into_raw(Box::new(ThreadState::new(1, true, 50, false)));
        let a = Box::into_raw(Box::new(ThreadState::new(1, true, 50, false)));
        let b = Box::into_raw(Box::new(ThreadState::new(1, true, 50, false)));
        let limit = 40;
        // Safety (this test): leaked states only this thread uses; the TLS slot points to `b`
        // until restored; every FuncInfo is leaked.
        unsafe {
            (*a).set_node_limit(limit);
            (*b).set_node_limit(limit);
            (*b).set_fast(FAST_TIMING);
        }
        run_script(full, &steps, t0);
        run_script(a, &steps, t0);
        let prev = tls::current();
        tls::set_current(b);
        let mut now = t0;
        for s in &steps {
            now = now.wrapping_add(s.advance).max(1);
            clock::set_fake_ticks(now);
            unsafe {
                match s.ev {
                    Ev::Enter(func, sp) => stubs::call_enter(stubs::enter_scripted_stub, func, sp),
                    Ev::Leave(func, sp) => stubs::call_leave(stubs::leave_scripted_stub, func, sp),
                    Ev::Tail(func, sp) => stubs::call_leave(stubs::tailcall_scripted_stub, func, sp),
                }
            }
        }
        tls::set_current(prev);
        clock::set_fake_ticks(0);
        let (sf, sa, sb) = unsafe { ((*full).snapshot(), (*a).snapshot(), (*b).snapshot()) };
        assert_eq!(sa, sb, "stubs and Rust hooks on the capped tree");
        let calls = |s: &Snapshot| s.nodes.iter().map(|n| n.2).sum::<u64>();
        assert!(calls(&sf) > 10_000);
        assert_eq!(calls(&sa), calls(&sf), "every call counted");
        assert_eq!(unsafe { (*a).charged() }, unsafe { (*full).charged() }, "every tick");
        assert_eq!(sa.stack.len(), sf.stack.len());
        assert_eq!(sa.overflowed, 0);
        let capped: Vec<_> = sa.nodes.iter().filter(|n| n.1 == &CAPPED as *const FuncInfo as usize).collect();
        assert!(!capped.is_empty() && capped.iter().map(|n| n.2).sum::<u64>() > 1_000, "{capped:?}");
        assert!(sf.nodes.len() > 4 * limit, "the full tree has {} nodes", sf.nodes.len());
        // The root and the regular nodes up to the cap, then capped nodes up to an eighth more
        // and the root's one.
        assert!(sa.nodes.len() <= 1 + limit + limit / 8 + 1, "{} nodes", sa.nodes.len());
    }

    /// Runs a script through the Rust hooks on `ts` with a scripted clock starting at `t0`.
    fn run_script(ts: *mut ThreadState, steps: &[Step], t0: u64) {
        let mut now = t0;
        for s in steps {
            now = now.wrapping_add(s.advance).max(1);
            clock::set_fake_ticks(now);
            // Safety: `ts` is a live state only this thread uses; every FuncInfo is leaked.
            match s.ev {
                Ev::Enter(func, sp) => hook_enter(ts, func, sp, site_at(sp)),
                Ev::Leave(func, sp) => hook_leave(ts, func, sp),
                Ev::Tail(func, sp) => hook_tailcall(ts, func, sp),
            }
        }
    }

    /// A state recycled after a big tree (several chunks, a deep shadow stack, overflowed
    /// and far-find counters) accounts a script exactly as a new state does.
    #[test]
    fn a_recycled_state_starts_clean() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        fake_stack();
        let f = funcs(14);
        let big = script(5, 60_000, &f);
        let steps = script(1, 20_000, &f);
        let t0 = 1_000_000_000u64;
        for timing in [true, false] {
            clock::set_fake_ticks(t0);
            let fresh = Box::into_raw(Box::new(ThreadState::new(9, timing, 50, false)));
            let used = Box::into_raw(Box::new(ThreadState::new(3, timing, 50, false)));
            // Safety (this loop): both states are leaked and only this thread uses them.
            unsafe { (*used).start(3, 1) };
            run_script(used, &big, t0);
            let before = unsafe { (*used).snapshot() };
            assert!(before.nodes.len() > 600, "the big script fills several chunks: {}", before.nodes.len());
            unsafe {
                (*used).finish();
                assert!((*used).is_finished());
                (*used).recycle();
                clock::set_fake_ticks(t0);
                (*used).start(9, 2);
                (*fresh).start(9, 2);
                assert!(!(*used).is_finished());
                assert_eq!((*used).snapshot(), (*fresh).snapshot());
            }
            run_script(fresh, &steps, t0);
            run_script(used, &steps, t0);
            let (a, b) = unsafe { ((*fresh).snapshot(), (*used).snapshot()) };
            assert_eq!(a, b, "timing = {timing}");
            assert!(a.nodes.len() > 20);
            // Freed (chunks and stack) without touching freed memory.
            unsafe { drop(Box::from_raw(used)) };
        }
        clock::set_fake_ticks(0);
    }

    /// Threads that start and end in rounds, publishing as they run: every call is published
    /// exactly once (each thread's tree under its own number), slots and states are reused,
    /// and no more slots are used than threads alive at once.
    #[test]
    fn ended_threads_are_published_once_and_their_states_reused() {
        use crate::config::EltConfig;
        use crate::elt::hooks::{RECYCLED, THREADS, THREAD_COUNT};
        use crate::elt::Instrumentation;
        use crate::writer::{Sink, Writer};
        use clrprof_trace::Record;
        use std::collections::{HashMap, HashSet};

        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        fake_stack();
        let path = std::env::temp_dir().join(format!("clrprof-elt-threads-{}.clrprof", std::process::id()));
        let w =
            Writer::new(Sink::File(std::fs::File::create(&path).unwrap()), std::time::Duration::from_secs(60)).unwrap();
        let config = EltConfig { enabled: true, timing: false, ..Default::default() };
        let (instr, _) = Instrumentation::new(config, 0);
        let f: Vec<usize> = funcs(2).into_iter().map(|p| p as usize).collect();
        let (rounds, per_round, k) = (6, 40, 25u64);
        for _ in 0..rounds {
            let handles: Vec<_> = (0..per_round)
                .map(|i| {
                    let f = f.clone();
                    std::thread::spawn(move || {
                        let (root, g) = (f[0] as *const FuncInfo, f[1] as *const FuncInfo);
                        let base = 0x7000_0000usize;
                        // Safety: the FuncInfo records are leaked; the stubs find (or make)
                        // this thread's state through its TLS slot.
                        unsafe {
                            stubs::call_enter(stubs::enter_counts_stub, root, base);
                            for _ in 0..k {
                                stubs::call_enter(stubs::enter_counts_stub, g, base - 64);
                                stubs::call_leave(stubs::leave_counts_stub, g, base - 64);
                            }
                            if i % 3 == 0 {
                                std::thread::yield_now();
                            }
                            stubs::call_leave(stubs::leave_counts_stub, root, base);
                        }
                    })
                })
                .collect();
            // Publications while the threads run and end.
            for _ in 0..3 {
                instr.publish(&w, 1);
                std::thread::yield_now();
            }
            for h in handles {
                h.join().unwrap();
            }
            // Joined threads have run their exit guards: one more publication retires them.
            instr.publish(&w, 2);
            assert!(THREADS[..THREAD_COUNT.load(Ordering::Acquire)]
                .iter()
                .all(|t| t.load(Ordering::Acquire).is_null()));
        }
        w.flush();
        assert!(THREAD_COUNT.load(Ordering::Acquire) <= per_round, "{} slots", THREAD_COUNT.load(Ordering::Acquire));
        let spares = RECYCLED.lock().unwrap().spares.len();
        assert!(spares > 0 && spares <= per_round, "{spares} spare states");

        let (records, _) = clrprof_trace::read_all(std::fs::File::open(&path).unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        let mut trees: HashMap<(u32, u32), Vec<u64>> = HashMap::new();
        let mut calls: HashMap<u64, u64> = HashMap::new();
        for r in &records {
            match r {
                Record::CallTreeNodes(n) => {
                    assert_ne!(n.tree, 0);
                    let t = trees.entry((n.os_tid, n.tree)).or_default();
                    assert_eq!(n.first as usize, t.len(), "node ids are consecutive per tree");
                    t.extend(&n.functions);
                }
                Record::CallTreeDelta(_) => panic!("deltas are written packed"),
                Record::CallTreeCosts(c) => {
                    let d = c.unpack().unwrap();
                    let t = &trees[&(d.os_tid, d.tree)];
                    for (node, c) in d.nodes.iter().zip(&d.calls) {
                        *calls.entry(t[*node as usize]).or_default() += c;
                    }
                }
                _ => {}
            }
        }
        let threads = (rounds * per_round) as u64;
        let numbers: HashSet<u32> = trees.keys().map(|k| k.1).collect();
        assert_eq!(numbers.len() as u64, threads, "one tree per thread");
        // Safety: the FuncInfo records are leaked.
        let (root_id, g_id) =
            unsafe { ((*(f[0] as *const FuncInfo)).id as u64, (*(f[1] as *const FuncInfo)).id as u64) };
        assert_eq!(calls.get(&root_id), Some(&threads));
        assert_eq!(calls.get(&g_id), Some(&(threads * k)));
    }

    /// A caller with more callees than the stubs' search window: a callee far down the sibling
    /// list is found by the fast stubs through the caller's callee cache once the Rust path
    /// has cached it, and a callee in the window that the cache does not hold is cached by
    /// the stubs' own walk.
    #[test]
    fn callees_beyond_the_search_window_are_found_through_the_callee_cache() {
        use crate::elt::thread::callee_slot;
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        fake_stack();
        // Twelve callees in creation order: c[0] and c[8] share a cache slot, the others have
        // other slots. Each new child goes to the front of the list: c[0] ends 12th (beyond
        // the window of 8), c[8] 4th, and c[8] holds their slot.
        let pool = funcs(256);
        let s = callee_slot(pool[0]);
        let (same, other): (Vec<_>, Vec<_>) = pool[1..].iter().partition(|&&f| callee_slot(f) == s);
        assert!(!same.is_empty() && other.len() >= 11, "FuncInfo addresses spread over the slots");
        let mut c: Vec<*const FuncInfo> = vec![pool[0]];
        c.extend(&other[..7]);
        c.push(same[0]);
        c.extend(&other[7..10]);
        let (caller, far, near) = (other[10], c[0], c[8]);
        for (timing, fast, [enter, leave]) in [
            (false, FAST_COUNTS, [stubs::enter_counts_stub as unsafe extern "C" fn(), stubs::leave_counts_stub]),
            (true, FAST_TIMING, [stubs::enter_scripted_stub, stubs::leave_scripted_stub]),
        ] {
            clock::set_fake_ticks(1_000_000_000);
            let ts = Box::into_raw(Box::new(ThreadState::new(1, timing, 50, false)));
            // Safety (this loop): `ts` is leaked and only this thread uses it; the TLS slot
            // points to it until restored; every FuncInfo is leaked.
            unsafe { (*ts).set_fast(fast) };
            let prev = tls::current();
            tls::set_current(ts);
            let sp = 0x7000_0000;
            let slow = || SLOW_HOOKS.with(|c| c.get());
            unsafe {
                hook_enter(ts, caller, sp, site_at(sp));
                for &g in &c {
                    hook_enter(ts, g, sp - 0x100, site_at(sp - 0x100));
                    hook_leave(ts, g, sp - 0x100);
                }
                let call = |g: *const FuncInfo| {
                    let before = slow();
                    stubs::call_enter(enter, g, sp - 0x100);
                    stubs::call_leave(leave, g, sp - 0x100);
                    slow() - before
                };
                // Not cached and beyond the window: the full path, which caches it.
                assert_eq!(call(far), 1, "timing = {timing}");
                // Cached: fast, though 12th in the list.
                assert_eq!(call(far), 0, "timing = {timing}");
                assert_eq!(call(far), 0, "timing = {timing}");
                // `near` lost the slot; 4th in the list, it is found by the stub's walk, which
                // caches it back (`far` goes to the full path again).
                assert_eq!(call(near), 0, "timing = {timing}");
                assert_eq!(call(far), 1, "timing = {timing}");
                // Every call counted once, on the caller's children.
                let snap = (*ts).snapshot();
                let calls_of =
                    |g: *const FuncInfo| -> u64 { snap.nodes.iter().filter(|n| n.1 == g as usize).map(|n| n.2).sum() };
                assert_eq!(calls_of(far), 5, "timing = {timing}");
                assert_eq!(calls_of(near), 2, "timing = {timing}");
                hook_leave(ts, caller, sp);
            }
            tls::set_current(prev);
            clock::set_fake_ticks(0);
        }
    }

    #[test]
    fn calls_from_two_sites_of_one_caller_are_two_children_with_exact_counts() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        fake_stack();
        let f = funcs(2);
        let (caller, g) = (f[0], f[1]);
        for (timing, fast, [enter, leave]) in [
            (false, FAST_COUNTS, [stubs::enter_counts_stub as unsafe extern "C" fn(), stubs::leave_counts_stub]),
            (true, FAST_TIMING, [stubs::enter_scripted_stub, stubs::leave_scripted_stub]),
        ] {
            clock::set_fake_ticks(1_000_000_000);
            let ts = Box::into_raw(Box::new(ThreadState::new(1, timing, 5, false)));
            // Safety (this loop): `ts` is leaked and only this thread uses it; the TLS slot
            // points to it until restored; every FuncInfo is leaked; the SPs are mapped.
            unsafe { (*ts).set_fast(fast) };
            let prev = tls::current();
            tls::set_current(ts);
            let (sp, inner) = (0x7000_0000, 0x7000_0000 - 0x100);
            let slow0 = SLOW_HOOKS.with(|c| c.get());
            unsafe {
                set_site(sp, 0x1111);
                stubs::call_enter(enter, caller, sp);
                // 6 calls from one line, 5 from another, interleaved as a loop body would.
                for i in 0..11 {
                    set_site(inner, if i % 3 == 2 || i >= 9 { 0xb0b0 } else { 0xa0a0 });
                    stubs::call_enter(enter, g, inner);
                    stubs::call_leave(leave, g, inner);
                }
                stubs::call_leave(leave, caller, sp);
            }
            tls::set_current(prev);
            clock::set_fake_ticks(0);
            let snap = unsafe { (*ts).snapshot() };
            let mut children: Vec<(usize, u64)> =
                snap.nodes.iter().filter(|n| n.1 == g as usize).map(|n| (n.6, n.2)).collect();
            children.sort();
            assert_eq!(children, [(0xa0a0, 6), (0xb0b0, 5)], "timing = {timing}");
            let callers: Vec<(usize, u64)> =
                snap.nodes.iter().filter(|n| n.1 == caller as usize).map(|n| (n.6, n.2)).collect();
            assert_eq!(callers, [(0x1111, 1)], "timing = {timing}");
            // The full path ran for the caller's enter and for the first call from each site;
            // every other event took the fast stubs.
            assert_eq!(SLOW_HOOKS.with(|c| c.get()) - slow0, 3, "timing = {timing}");
        }
    }

    #[test]
    fn counts_fast_stubs_account_exactly_like_the_rust_hooks() {
        let stubs_ = [stubs::enter_counts_stub, stubs::leave_counts_stub, stubs::tailcall_counts_stub];
        for seed in [3, 0xdead_beef] {
            let fast = lockstep(false, FAST_COUNTS, stubs_, seed);
            assert!(fast > 15_000, "the fast path handled {fast} of 40,000+ events");
        }
    }

    fn xmm(v: [u64; 2]) -> __m128i {
        // Safety: plain data of the same size.
        unsafe { std::mem::transmute(v) }
    }

    fn bits(v: __m128i) -> [u64; 2] {
        // Safety: plain data of the same size.
        unsafe { std::mem::transmute(v) }
    }

    /// Calls an enter stub with a distinct value in every register it must preserve.
    unsafe fn enter_checked(stub: unsafe extern "C" fn(), func: *const FuncInfo, sp: usize) {
        let g0 = [0x0101_0101_0101_0101u64, 0x0202, 0x0303_0303_0303_0303, 0x0404, 0x0505, 0x0606_0000_0000_0006];
        let x0: [[u64; 2]; 8] = std::array::from_fn(|i| [0x1111_1111_1111_1111 * (i as u64 + 1), !(i as u64)]);
        let mut g = g0;
        let mut x = x0.map(xmm);
        let (mut r14, mut r15) = (func as usize, sp);
        // Safety: the caller passes an enter stub and valid arguments.
        unsafe {
            core::arch::asm!(
                "call {stub}",
                stub = in(reg) stub,
                inout("r14") r14, inout("r15") r15,
                inout("rdi") g[0], inout("rsi") g[1], inout("rdx") g[2],
                inout("rcx") g[3], inout("r8") g[4], inout("r9") g[5],
                inout("xmm0") x[0], inout("xmm1") x[1], inout("xmm2") x[2], inout("xmm3") x[3],
                inout("xmm4") x[4], inout("xmm5") x[5], inout("xmm6") x[6], inout("xmm7") x[7],
                clobber_abi("C"),
            );
        }
        assert_eq!((g, r14, r15), (g0, func as usize, sp));
        assert_eq!(x.map(bits), x0);
    }

    /// Calls a leave or tailcall stub with distinct return values in rax, rdx, xmm0, xmm1.
    unsafe fn leave_checked(stub: unsafe extern "C" fn(), func: *const FuncInfo, sp: usize) {
        let (rax0, rdx0) = (0x0a0a_0a0a_0a0a_0a0au64, 0xd0d0_d0d0_d0d0_d0d0u64);
        let x0 = [[0x3333_3333_3333_3333u64, 0x4444], [0x5555, 0x6666_6666_6666_6666]];
        let (mut rax, mut rdx) = (rax0, rdx0);
        let (mut a, mut b) = (xmm(x0[0]), xmm(x0[1]));
        // Safety: the caller passes a leave or tailcall stub and valid arguments.
        unsafe {
            core::arch::asm!(
                "call {stub}",
                stub = in(reg) stub,
                inout("rdi") func => _, inout("rsi") sp => _,
                inout("rax") rax, inout("rdx") rdx, inout("xmm0") a, inout("xmm1") b,
                clobber_abi("C"),
            );
        }
        assert_eq!((rax, rdx), (rax0, rdx0));
        assert_eq!([bits(a), bits(b)], x0);
    }

    #[test]
    fn timing_fast_stubs_with_rdtsc_preserve_registers_and_charge_every_tick() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        fake_stack();
        clock::init();
        if !clock::is_tsc() {
            return;
        }
        let f = funcs(3);
        let ts = Box::into_raw(Box::new(ThreadState::new(2, true, 30, false)));
        // Safety (this test): `ts` is leaked and only this thread uses it; the TLS slot points
        // to it until restored; every FuncInfo is leaked.
        unsafe { (*ts).set_fast(FAST_TIMING) };
        let start = unsafe { (*ts).snapshot().last };
        let prev = tls::current();
        tls::set_current(ts);
        let slow = SLOW_HOOKS.with(|c| c.get());
        let base = 0x7000_0000usize;
        unsafe {
            enter_checked(stubs::enter_timing_stub, f[0], base);
            for i in 0..1000 {
                let g = f[1 + i / 500];
                enter_checked(stubs::enter_timing_stub, g, base - 64);
                if i % 3 == 0 {
                    leave_checked(stubs::tailcall_timing_stub, g, base - 64);
                } else {
                    leave_checked(stubs::leave_timing_stub, g, base - 64);
                }
            }
            leave_checked(stubs::leave_timing_stub, f[0], base);
        }
        tls::set_current(prev);
        let slow = SLOW_HOOKS.with(|c| c.get()) - slow;
        assert!(slow < 100, "{slow} of 2002 events took the slow path");
        let s = unsafe { (*ts).snapshot() };
        let calls: Vec<u64> = s.nodes.iter().map(|n| n.2).collect();
        assert_eq!(calls, [0, 1, 500, 500]);
        assert_eq!(s.stack.len(), 1);
        // Every tick from the state's creation to its last event is charged exactly once.
        assert_eq!(unsafe { (*ts).charged() }, s.last.wrapping_sub(start));
        let prof: u64 = s.nodes.iter().map(|n| n.5).sum();
        assert!(prof <= 30 * 2002);
    }

    /// A caller cycling through k callees: the fast enter stubs find each among the first
    /// `FAST_SEARCH` children (only the first call of each takes the Rust path) with every
    /// register preserved, and beyond the window still handle most calls.
    #[test]
    fn fast_enter_stubs_find_callees_among_the_first_siblings() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        fake_stack();
        let modes = [
            (false, FAST_COUNTS, [stubs::enter_counts_stub, stubs::leave_counts_stub, stubs::tailcall_counts_stub]),
            (
                true,
                FAST_TIMING,
                [stubs::enter_scripted_stub, stubs::leave_scripted_stub, stubs::tailcall_scripted_stub],
            ),
        ];
        let rounds = 50;
        for (timing, fast, [enter, leave, tailcall]) in modes {
            for k in [1, 2, 3, 5, FAST_SEARCH, FAST_SEARCH + 1, 12, 20] {
                let f = funcs(k + 1);
                let mut now = 1_000_000u64;
                clock::set_fake_ticks(now);
                let ts = Box::into_raw(Box::new(ThreadState::new(3, timing, 7, false)));
                // Safety (this loop): `ts` is leaked and only this thread uses it; the TLS slot
                // points to it until restored; every FuncInfo is leaked.
                unsafe { (*ts).set_fast(fast) };
                let prev = tls::current();
                tls::set_current(ts);
                let slow0 = SLOW_HOOKS.with(|c| c.get());
                let base = 0x7000_0000usize;
                unsafe {
                    enter_checked(enter, f[0], base);
                    for i in 0..rounds * k {
                        let g = f[1 + i % k];
                        now += 97;
                        clock::set_fake_ticks(now);
                        enter_checked(enter, g, base - 64);
                        now += 13;
                        clock::set_fake_ticks(now);
                        leave_checked(if i % 5 == 0 { tailcall } else { leave }, g, base - 64);
                    }
                    leave_checked(leave, f[0], base);
                }
                tls::set_current(prev);
                clock::set_fake_ticks(0);
                let slow = SLOW_HOOKS.with(|c| c.get()) - slow0;
                let s = unsafe { (*ts).snapshot() };
                let calls: Vec<u64> = s.nodes.iter().map(|n| n.2).collect();
                let mut want = vec![0, 1];
                want.extend(std::iter::repeat_n(rounds as u64, k));
                assert_eq!(calls, want, "k = {k}, timing = {timing}");
                assert_eq!(s.stack.len(), 1);
                if timing {
                    assert_eq!(unsafe { (*ts).charged() }, s.last - 1_000_000, "k = {k}");
                    // Each callee's node gets its 13 ticks per call, less the overhead of 7.
                    assert!(s.nodes[2..].iter().all(|n| n.3 == 6 * rounds as u64), "k = {k}");
                }
                // Leaves never miss; enters miss on each callee's first call only, or, beyond
                // the window, on fewer than k - FAST_SEARCH / 2 calls of each cycle (moving
                // every found callee to the front would make them all miss).
                let slow_enters = slow as usize;
                if k <= FAST_SEARCH {
                    assert_eq!(slow_enters, 1 + k, "k = {k}, timing = {timing}");
                } else {
                    let fast_enters = rounds * k - (slow_enters - 1);
                    assert!(fast_enters >= rounds * FAST_SEARCH / 2, "k = {k}: {fast_enters} fast");
                }
            }
        }
    }
}

/// A delta of many nodes goes out as several records of at most `NODES_PER_RECORD` nodes, at the
/// same time, that together are the delta; a small one as one record, an empty one not at all.
#[test]
fn a_large_delta_is_cut_into_records_that_add_up_to_it() {
    use super::{DeltaParts, NODES_PER_RECORD};
    use clrprof_trace::CallTreeDelta;
    let n = 2 * NODES_PER_RECORD as u64 + 5;
    let costs = |i: u64| [i, i * 10, i % 7, i % 5];
    let mut d = DeltaParts::new(7, 99, 2);
    let mut parts: Vec<CallTreeDelta> = (0..n).filter_map(|i| d.push(i as u32 * 3, costs(i))).collect();
    parts.extend(d.finish());
    assert_eq!(parts.iter().map(|p| p.nodes.len()).collect::<Vec<_>>(), vec![1 << 16, 1 << 16, 5]);
    let mut joined = CallTreeDelta { os_tid: 7, ts: 99, tree: 2, ..Default::default() };
    for p in &parts {
        assert_eq!((p.os_tid, p.ts, p.tree), (7, 99, 2));
        assert!(clrprof_trace::CallTreeCosts::pack(p).is_some());
        joined.nodes.extend(&p.nodes);
        joined.calls.extend(&p.calls);
        joined.time_ns.extend(&p.time_ns);
        joined.suspended_ns.extend(&p.suspended_ns);
        joined.profiler_ns.extend(&p.profiler_ns);
    }
    let want = CallTreeDelta {
        os_tid: 7,
        ts: 99,
        tree: 2,
        nodes: (0..n as u32).map(|i| i * 3).collect(),
        calls: (0..n).map(|i| costs(i)[0]).collect(),
        time_ns: (0..n).map(|i| costs(i)[1]).collect(),
        suspended_ns: (0..n).map(|i| costs(i)[2]).collect(),
        profiler_ns: (0..n).map(|i| costs(i)[3]).collect(),
    };
    assert_eq!(joined, want);
    let mut small = DeltaParts::new(7, 99, 2);
    assert!(small.push(4, [1, 2, 3, 4]).is_none());
    assert_eq!(small.finish().map(|p| p.nodes), Some(vec![4]));
    assert!(DeltaParts::new(7, 99, 2).finish().is_none());
}
