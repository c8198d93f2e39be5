//! Wall-time accounting on the sampler thread: every nanosecond of a thread's life goes to one
//! stack — the stack it ran on for the part it ran or waited for a CPU, the stack it blocked in
//! for the rest — and blocked time whose stack is not known yet waits for a walk
//! ([`super::wall`]). Methods of [`Sampler`]; see the module documentation of `super` for the
//! rules.

use std::sync::atomic::Ordering;
use std::time::Instant;

use clrprof_sys::ThreadID;
use clrprof_trace::{ThreadNamed, WallSample};

use super::{
    slot, wall, LoopState, Sampler, SlotKey, ThreadState, MAX_THREADS_PER_TICK, MAX_WAIT_SITES, MAX_WALKS_PER_SUSPEND,
    MIN_SUSPEND_INTERVAL,
};
use crate::{log_warn, os};

impl Sampler {
    /// Blocked time of a thread that needs a walk but is not walked at this tick (suspensions are
    /// rate-limited): it waits for the walk. A thread needs one when it ran since its last tick, so
    /// the stack it had before is not known to hold it any more (a thread that woke up and blocked
    /// again elsewhere would have its new blocked time charged to the old place until the walk).
    pub(super) fn defer_walk(&self, st: &mut LoopState, key: SlotKey, blocked: u64) {
        let Some(t) = st.threads.get_mut(&key) else { return };
        t.unwalked_ns += blocked;
        t.unwalked_ticks += 1;
    }

    /// Charges time the thread spent running to its running stack: its latest CPU sample, when
    /// one was taken since the thread was last seen blocked; otherwise the time waits for the next
    /// stack known (the sample from before the block is not where it runs now).
    pub(super) fn charge_running(&self, st: &mut LoopState, key: SlotKey, ns: u64, ticks: u32) {
        let Some(t) = st.threads.get_mut(&key) else { return };
        let fresh = t.cpu_batches != t.cpu_batches_when_blocked;
        let stack = if fresh { self.cpu_stack_now(st, key) } else { None };
        let Some(t) = st.threads.get_mut(&key) else { return };
        match stack {
            Some(s) => self.add_wall(st, key, s, ns, ticks),
            None => {
                t.carry_ns += ns;
                t.carry_ticks += ticks;
            }
        }
    }

    /// A thread is gone (or the sampler stops): charges the time from its last tick to `until`
    /// without a walk, then everything still waiting for a stack to its last known stack (an empty
    /// one when none is known), so its wall time adds up to its lifetime.
    pub(super) fn settle(&self, st: &mut LoopState, key: SlotKey, until: u64, cpu_now: u64, runq_now: Option<u64>) {
        let Some(t) = st.threads.get_mut(&key) else { return };
        if let Some(last_ts) = t.wall_ts.take() {
            let elapsed = until.saturating_sub(last_ts);
            let dcpu = cpu_now.saturating_sub(t.wall_cpu).min(elapsed);
            match t.wall_stack {
                Some(b) => {
                    // What it ran and waited for a CPU after it woke up is not the wait's.
                    let waited = match (t.block_runq, runq_now) {
                        (Some(q0), Some(q)) => q.saturating_sub(q0),
                        _ => 0,
                    };
                    let blocked = (elapsed - dcpu).saturating_sub(waited);
                    self.add_wall(st, key, b, blocked, 0);
                    self.charge_running(st, key, elapsed - blocked, 0);
                }
                None => self.charge_running(st, key, elapsed, 0),
            }
        }
        let Some(t) = st.threads.get_mut(&key) else { return };
        let (ns, ticks) = (std::mem::take(&mut t.unwalked_ns), std::mem::take(&mut t.unwalked_ticks));
        if ns + t.carry_ns == 0 && ticks + t.carry_ticks == 0 {
            return;
        }
        // The thread is gone: whatever runtime work its last sample showed is over.
        t.activity_now = 0;
        let walked = t.wall_stack;
        let s = match walked.or_else(|| self.cpu_stack_now(st, key)) {
            Some(s) => s,
            None => self.intern(st, &[], &[]),
        };
        self.add_wall(st, key, s, ns, ticks);
    }

    /// Adds `ns` (and `ticks` wall ticks) to the thread's pending wall sample of `stack`, with the
    /// time carried from earlier ticks whose stack was not known.
    pub(super) fn add_wall(&self, st: &mut LoopState, key: SlotKey, stack: u32, ns: u64, ticks: u32) {
        // Carried time passed before this stack's runtime work began (or at least is not known
        // to lie in it): it goes to the stack's managed frames.
        if let Some(&managed) = st.activity_stacks.get(&stack) {
            if st.threads.get(&key).is_some_and(|t| t.carry_ns + t.carry_ticks as u64 > 0) {
                self.add_wall(st, key, managed, 0, 0);
            }
        }
        let Some(t) = st.threads.get_mut(&key) else { return };
        let ns = ns + std::mem::take(&mut t.carry_ns);
        let ticks = ticks + std::mem::take(&mut t.carry_ticks);
        if ns == 0 && ticks == 0 {
            return;
        }
        match &mut t.pending {
            Some(p) if p.0 == stack => {
                p.1 += ticks;
                p.2 += ns;
                return;
            }
            _ => {}
        }
        let old = t.pending.replace((stack, ticks, ns));
        if let Some((s, c, w)) = old {
            self.emit(WallSample { ts: self.now(), os_tid: key.os_tid, stack: s, count: c, wall_ns: w });
        }
    }

    pub(super) fn flush_thread(&self, st: &mut LoopState, key: SlotKey) {
        if let Some((s, c, w)) = st.threads.get_mut(&key).and_then(|t| t.pending.take()) {
            self.emit(WallSample { ts: self.now(), os_tid: key.os_tid, stack: s, count: c, wall_ns: w });
        }
    }

    pub(super) fn flush_wall(&self, st: &mut LoopState) {
        let keys: Vec<SlotKey> = st.threads.keys().copied().collect();
        for k in keys {
            self.flush_thread(st, k);
        }
    }

    pub(super) fn wall_tick(&self, st: &mut LoopState) {
        self.stats.wall_ticks.fetch_add(1, Ordering::Relaxed);
        let now = self.now();
        let mut to_walk: Vec<(SlotKey, ThreadID, u64)> = Vec::new();
        // At most MAX_THREADS_PER_TICK threads per tick, round robin: with many threads each is
        // looked at every few ticks, and its sample stands for the time since it was last seen.
        let all: Vec<&slot::Slot> = slot::slots().filter(|s| s.state.load(Ordering::Acquire) == slot::ACTIVE).collect();
        let n = all.len();
        let take = n.min(MAX_THREADS_PER_TICK);
        let first = if n == 0 { 0 } else { st.wall_cursor % n };
        st.wall_cursor = first + take;
        for slot in (0..take).map(|i| all[(first + i) % n]) {
            let key = SlotKey::of(slot);
            if slot.died_ns.load(Ordering::Acquire) != 0 {
                continue; // dying: settled up to its death when its slot is drained
            }
            let Some(cpu) = slot.cpu_ns() else { continue };
            let t = st.threads.entry(key).or_insert_with(|| ThreadState::new(slot));
            t.activity_now = slot.activity();
            let Some(last_ts) = t.wall_ts.replace(now) else {
                t.wall_cpu = cpu;
                continue;
            };
            let elapsed = now.saturating_sub(last_ts);
            // It cannot have run longer than the interval (the clocks are read a little apart).
            let dcpu = cpu.saturating_sub(t.wall_cpu).min(elapsed);
            t.wall_cpu = cpu;
            if dcpu == 0 {
                if let Some(s) = t.wall_stack {
                    self.add_wall(st, key, s, elapsed, 1);
                    continue;
                }
                if t.unwalked_ticks > 0 {
                    // Seen blocked before and still waiting for its walk (suspensions are
                    // rate-limited), and it has not run since: it waits where it waited, so its
                    // state, run-queue wait and wait site read then still hold and are not read
                    // again. Those reads were most of a tick while many threads waited for their
                    // first walk (a thousand threads at start take twelve seconds to walk).
                    t.cpu_batches_when_blocked = t.cpu_batches;
                    to_walk.push((key, slot.thread_id.load(Ordering::Relaxed), elapsed));
                    continue;
                }
            }
            // Running (or waiting for a CPU), or blocked again? The thread's scheduler state
            // tells (a file read, so only for threads that ran for 2 % of the interval or more,
            // or whose blocked stack is not known: a runnable thread may not have run at all
            // this interval). A thread that ran the whole interval (its clock and the tick's are
            // read a little apart: within 1/64 of it) is taken as running without the read, the
            // most costly part of a tick for busy threads.
            if (dcpu * 50 >= elapsed || t.wall_stack.is_none())
                && (ran_throughout(dcpu, elapsed) || st.stat_files.runnable(key.os_tid).unwrap_or(dcpu * 2 >= elapsed))
            {
                // Waiting for a CPU is not blocking. At the second tick of a running stretch the
                // thread's CPU time and run-queue wait are noted (one file read per stretch;
                // threads that wake up for a moment never get there): when it blocks, the time
                // since then that it neither ran nor waited for a CPU is its blocked time.
                let was_running = t.wall_stack.is_none() && t.unwalked_ticks == 0;
                let q_now = st.stat_files.runq_wait_ns(key.os_tid);
                let Some(t) = st.threads.get_mut(&key) else { continue };
                if !was_running {
                    t.stretch = None;
                } else if t.stretch.is_none() {
                    t.stretch = q_now.map(|q| (now, cpu, q));
                }
                t.tick_runq = q_now;
                // It runs. If it was blocked, it woke up in this interval: the part it neither ran
                // nor waited for a CPU (its run-queue wait since it blocked, from `schedstat`)
                // stays where it was blocked; from its wake-up on, the time is its running stack's.
                let running = match t.wall_stack.take() {
                    Some(b) => {
                        let q0 = t.block_runq.take();
                        let waited = match (q0, q_now) {
                            (Some(q0), Some(q)) => q.saturating_sub(q0),
                            _ => 0,
                        };
                        let blocked = (elapsed - dcpu).saturating_sub(waited);
                        self.add_wall(st, key, b, blocked, 0);
                        elapsed - blocked
                    }
                    None => elapsed,
                };
                // Blocked time never walked (it blocked and woke up between two suspensions)
                // goes with the stack it ran before it blocked, as nothing better is known.
                let unwalked = st
                    .threads
                    .get_mut(&key)
                    .filter(|t| t.unwalked_ticks > 0)
                    .map(|t| (std::mem::take(&mut t.unwalked_ns), std::mem::take(&mut t.unwalked_ticks)));
                if let Some((ns, ticks)) = unwalked {
                    match self.cpu_stack_now(st, key) {
                        Some(s) => self.add_wall(st, key, s, ns, ticks),
                        None => {
                            if let Some(t) = st.threads.get_mut(&key) {
                                t.carry_ns += ns;
                                t.carry_ticks += ticks;
                            }
                        }
                    }
                }
                self.charge_running(st, key, running, 1);
                continue;
            }
            // Blocked. A thread that was running at its last tick ran `dcpu` of the interval on
            // its running stack (and may have waited for a CPU) and has been blocked since: only
            // the rest is blocked time. Over its running stretch, the time it neither ran nor
            // waited for a CPU was blocked time (at most the interval's, as short waits in the
            // stretch would count too).
            // Its run-queue wait now: the time it waits for a CPU after it wakes is not blocked
            // time (a blocked thread's wait does not grow).
            let q = st.stat_files.runq_wait_ns(key.os_tid);
            let Some(t) = st.threads.get_mut(&key) else { continue };
            let blocked = if t.wall_stack.is_none() {
                // Nor is the time it waited for a CPU since the last tick before it blocked.
                let waited = match (t.tick_runq, q) {
                    (Some(q0), Some(q)) => q.saturating_sub(q0),
                    _ => 0,
                };
                let mut blocked = (elapsed - dcpu).saturating_sub(waited);
                if let (Some((since, cpu0, q0)), Some(q)) = (t.stretch.take(), q) {
                    let not_blocked = cpu.saturating_sub(cpu0) + q.saturating_sub(q0);
                    blocked = blocked.min(now.saturating_sub(since).saturating_sub(not_blocked));
                }
                self.charge_running(st, key, elapsed - blocked, 0);
                blocked
            } else {
                // Blocked at its last tick, and it ran since (a thread that did not run keeps its
                // stack above): it woke up and blocked again, maybe elsewhere. Its old stack is
                // no longer known to hold it, so it gets none of this time; what it neither ran
                // nor waited for a CPU waits for the walk that tells where it blocks now.
                t.wall_stack = None;
                let waited = match (t.block_runq, q) {
                    (Some(q0), Some(q)) => q.saturating_sub(q0),
                    _ => 0,
                };
                let ran = (dcpu + waited).min(elapsed);
                self.charge_running(st, key, ran, 0);
                elapsed - ran
            };
            // Where it waits: at a site walked before, it is blocked at that stack again (a pool
            // worker parked between work items, a loop's sleep) and needs no walk, so its blocked
            // time never waits for a suspension and is never given to the stack it ran.
            let site = st.stat_files.wait_site(key.os_tid);
            let Some(t) = st.threads.get_mut(&key) else { continue };
            t.block_runq = q;
            t.tick_runq = q;
            t.cpu_batches_when_blocked = t.cpu_batches;
            t.block_site = site;
            if let Some(stack) = site.and_then(|s| Self::known_site(t, s)) {
                self.stats.sites_known.fetch_add(1, Ordering::Relaxed);
                t.block_site = None;
                self.walked(st, key, stack, blocked);
                continue;
            }
            let tid = slot.thread_id.load(Ordering::Relaxed);
            to_walk.push((key, tid, blocked));
        }
        if to_walk.is_empty() {
            return;
        }
        // Suspensions stop every thread: at most one per MIN_SUSPEND_INTERVAL. Until the next
        // one, threads keep their last known stack.
        if st.last_suspend.is_some_and(|t| t.elapsed() < MIN_SUSPEND_INTERVAL) {
            for (key, _, blocked) in to_walk {
                self.defer_walk(st, key, blocked);
            }
            return;
        }
        st.last_suspend = Some(Instant::now());
        // Walk at most MAX_WALKS_PER_SUSPEND threads, those whose stack is oldest (never walked
        // first); the others keep their last known stack until their turn.
        if to_walk.len() > MAX_WALKS_PER_SUSPEND {
            to_walk.sort_by_key(|(k, _, _)| st.threads.get(k).map(|t| t.walked_at.unwrap_or(0)).unwrap_or(0));
            for (key, _, blocked) in to_walk.split_off(MAX_WALKS_PER_SUSPEND) {
                self.defer_walk(st, key, blocked);
            }
        }
        for (key, _, _) in &to_walk {
            if let Some(t) = st.threads.get_mut(key) {
                t.walked_at = Some(now);
            }
        }
        let result = {
            let _g = self.walk_lock.lock();
            // Only threads still alive (ThreadDestroyed retires slots under the same lock).
            let alive: Vec<bool> = to_walk
                .iter()
                .map(|(k, tid, _)| {
                    slot::slots().any(|s| {
                        SlotKey::of(s) == *k
                            && s.state.load(Ordering::Acquire) == slot::ACTIVE
                            && s.thread_id.load(Ordering::Relaxed) == *tid
                    })
                })
                .collect();
            let ids: Vec<ThreadID> = to_walk.iter().zip(&alive).filter(|(_, a)| **a).map(|((_, t, _), _)| *t).collect();
            let r = wall::walk_suspended(&self.info, &ids);
            r.map(|r| (r, alive))
        };
        match result {
            Ok((r, alive)) => {
                self.stats.suspended_ns.fetch_add(r.suspended_ns, Ordering::Relaxed);
                if let Some(e) = r.first_error {
                    if self.stats.walk_failures.load(Ordering::Relaxed) == 0 {
                        log_warn!("sampler: {e} (walk failures are counted in SamplerStats)");
                    }
                }
                let mut stacks = r.stacks.into_iter();
                for ((key, tid, blocked), a) in to_walk.into_iter().zip(alive) {
                    if !a {
                        // Gone: its time is settled when its slot is drained.
                        self.defer_walk(st, key, blocked);
                        continue;
                    }
                    self.stats.walks.fetch_add(1, Ordering::Relaxed);
                    let frames = stacks.next().flatten();
                    if frames.as_ref().is_none_or(|f| f.iter().all(|&(function, _)| function == 0)) {
                        self.name_runtime_thread(st, key, tid);
                    }
                    match frames {
                        Some(frames) => {
                            self.name_walked(st, &frames);
                            let ips: Vec<u64> = frames.iter().map(|f| f.1).collect();
                            let fns: Vec<u64> = frames.iter().map(|f| f.0).collect();
                            let id = self.intern(st, &ips, &fns);
                            self.remember_site(st, key, id);
                            self.walked(st, key, id, blocked);
                        }
                        None => {
                            self.stats.walk_failures.fetch_add(1, Ordering::Relaxed);
                            self.wall_fallback(st, key, blocked);
                        }
                    }
                }
            }
            Err(e) => {
                let n = self.stats.suspend_failures.fetch_add(1, Ordering::Relaxed);
                if n == 0 {
                    log_warn!("sampler: {e}; tick skipped (counted in SamplerStats)");
                }
                for (key, _, blocked) in to_walk {
                    self.wall_fallback(st, key, blocked);
                }
            }
        }
    }

    /// The stack the thread was walked at when it last waited at `site`, if it did (made the
    /// latest one).
    pub(super) fn known_site(t: &mut ThreadState, site: os::WaitSite) -> Option<u32> {
        let i = t.wait_sites.iter().position(|(s, _)| *s == site)?;
        let found = t.wait_sites.remove(i);
        t.wait_sites.push(found);
        Some(found.1)
    }

    /// After a walk at `stack`: the site where the thread was seen blocking before the walk is
    /// that stack's, if the thread did not run since (its CPU clock did not move), so it was
    /// still waiting there when walked.
    pub(super) fn remember_site(&self, st: &mut LoopState, key: SlotKey, stack: u32) {
        let Some(t) = st.threads.get_mut(&key) else { return };
        let Some(site) = t.block_site.take() else { return };
        if os::thread_cpu_ns(key.os_tid) != Some(t.wall_cpu) {
            return;
        }
        t.wait_sites.retain(|(s, _)| *s != site);
        if t.wait_sites.len() >= MAX_WAIT_SITES {
            t.wait_sites.remove(0);
        }
        t.wait_sites.push((site, stack));
    }

    /// A thread with no managed frame to walk (the runtime's finalizer and tiered compilation
    /// threads, waiting for work in native code) that the runtime never named through the
    /// profiling API: its OS name (`.NET Finalizer`), written once as the thread's name, so that
    /// its wall time says whose it is.
    fn name_runtime_thread(&self, st: &mut LoopState, key: SlotKey, id: ThreadID) {
        let Some(t) = st.threads.get_mut(&key) else { return };
        if std::mem::replace(&mut t.os_name_checked, true) {
            return;
        }
        let Ok(name) = std::fs::read_to_string(format!("/proc/self/task/{}/comm", key.os_tid)) else { return };
        let name = name.trim_end();
        if name.starts_with(".NET ") {
            self.emit(ThreadNamed { ts: self.now(), id: id as u64, name: name.to_string() });
        }
    }

    /// A thread could not be walked: its last known stack stands in, else an empty stack; it is
    /// kept as the thread's blocked stack so an idle thread is not walked again at every tick.
    pub(super) fn wall_fallback(&self, st: &mut LoopState, key: SlotKey, blocked: u64) {
        let s = st.threads.get(&key).and_then(|t| t.wall_stack).or_else(|| self.cpu_stack_now(st, key));
        let s = match s {
            Some(s) => s,
            None => self.intern(st, &[], &[]),
        };
        self.walked(st, key, s, blocked);
    }

    /// The thread is blocked at `stack` (walked, or the fallback): it gets this tick's blocked
    /// time and the blocked time that waited for the walk.
    pub(super) fn walked(&self, st: &mut LoopState, key: SlotKey, stack: u32, blocked: u64) {
        let Some(t) = st.threads.get_mut(&key) else { return };
        t.wall_stack = Some(stack);
        let (ns, ticks) = (std::mem::take(&mut t.unwalked_ns), std::mem::take(&mut t.unwalked_ticks));
        self.add_wall(st, key, stack, blocked + ns, 1 + ticks);
    }
}

/// True when a thread's CPU clock moved by the whole interval since its last tick, within 1/64
/// of it (the two clocks are read a little apart): it ran throughout and is taken as running or
/// runnable now, as its scheduler state would say unless it blocked in that last 1/64 (it is then
/// seen blocked, and walked, at the next tick).
pub(super) fn ran_throughout(dcpu: u64, elapsed: u64) -> bool {
    elapsed > 0 && dcpu + elapsed / 64 >= elapsed
}

#[cfg(test)]
mod tests {
    use super::ran_throughout;

    #[test]
    fn a_thread_ran_throughout_only_when_its_clock_moved_by_the_interval_within_a_64th() {
        let tick = 10_000_000; // 100 Hz
        assert!(ran_throughout(tick, tick));
        assert!(ran_throughout(tick - tick / 64, tick));
        assert!(!ran_throughout(tick - tick / 64 - 1, tick));
        assert!(!ran_throughout(tick / 2, tick));
        assert!(!ran_throughout(0, 0));
    }
}
