//! Wall time of continuations and tasks measured by their events (`record --async`).
//!
//! The wall sampler knows where a running thread is only from its CPU samples, one per CPU period
//! of the thread: a continuation shorter than that (a few milliseconds of parsing after an
//! `await`) gets the wall time of whatever ran before or after it on the thread, and, on a loaded
//! machine, the time the thread waited for a CPU goes wherever its last sample was. The task
//! events time each segment of a thread's work exactly: a continuation runs from its
//! `TaskWaitEnd` to its `TaskWaitContinuationComplete`, a task's delegate from `TaskStarted` to
//! `TaskCompleted`, less the segments nested in it (a caller resumed inline by its callee).
//!
//! So the wall samples joined to a segment ([`super::asynchrony`]) keep their split among frames,
//! but their total becomes the segment's measured exclusive time. The thread's other wall samples
//! (its pool loop, its idle waits, work outside any segment) give or take the difference in
//! proportion to their time, so that the thread's wall time still adds up to its lifetime.
//! Segments without a wall sample, or still open when the trace ended, are left as sampled.

use crate::fasthash::FxHashMap;
use crate::profile::Profile;
use crate::samples::{SampleWeight, TimedSample};

/// A wall sample (index into the samples) of a thread, joined to a segment of class `class` (or
/// to none).
pub(crate) struct WallJoin {
    pub(crate) sample: usize,
    pub(crate) os_tid: u32,
    pub(crate) class: Option<u32>,
}

/// Rescales the joined wall samples of `samples` (see the module's header). `measured[class]` is
/// the measured exclusive time of all closed segments of that class. `hidden[tid]` is the wall
/// time of the thread's samples already left out (idle threads hidden), which takes its share of
/// the difference without being shown. `rate` is the wall sampling rate (Hz).
pub(crate) fn rescale(
    p: &mut Profile,
    samples: &mut [TimedSample],
    joins: &[WallJoin],
    measured: &FxHashMap<u32, u64>,
    hidden: &FxHashMap<u32, u64>,
    rate: u64,
) {
    // Per class: the sampled total.
    let mut sampled: FxHashMap<u32, u64> = FxHashMap::default();
    for j in joins {
        if let Some(c) = j.class {
            *sampled.entry(c).or_default() += samples[j.sample].ns;
        }
    }
    let factor = |c: u32| -> Option<(u64, u64)> {
        let (&d, &s) = (measured.get(&c)?, sampled.get(&c)?);
        (s > 0 && d > 0).then_some((d, s))
    };
    let mut by_thread: FxHashMap<u32, Vec<&WallJoin>> = FxHashMap::default();
    for j in joins {
        by_thread.entry(j.os_tid).or_default().push(j);
    }
    for (tid, joins) in by_thread {
        let mut new_ns: FxHashMap<usize, u64> = FxHashMap::default();
        let mut gained: i128 = 0;
        for j in &joins {
            let Some((d, s)) = j.class.and_then(factor) else { continue };
            let old = samples[j.sample].ns;
            let ns = (old as u128 * d as u128 / s as u128) as u64;
            gained += ns as i128 - old as i128;
            new_ns.insert(j.sample, ns);
        }
        if new_ns.is_empty() {
            continue;
        }
        // The rest of the thread gives (or takes) what its segments gained, in proportion.
        let rest: Vec<usize> = joins.iter().filter(|j| j.class.is_none()).map(|j| j.sample).collect();
        let rest_ns: u128 =
            rest.iter().map(|&i| samples[i].ns as u128).sum::<u128>() + hidden.get(&tid).copied().unwrap_or(0) as u128;
        if rest_ns > 0 {
            for &i in &rest {
                let ns = samples[i].ns as i128;
                let share = gained * ns / rest_ns as i128;
                new_ns.insert(i, (ns - share).max(0) as u64);
            }
        }
        // Sample counts follow the times at the wall rate, as awaiting time's do (fractions carried
        // so that they add up like the times): a loaded machine's late ticks counted fewer.
        let mut carry = 0u128;
        let mut order: Vec<usize> = new_ns.keys().copied().collect();
        order.sort_unstable();
        for i in order {
            let s = &mut samples[i];
            let ns = new_ns[&i];
            if s.weight != SampleWeight::Wall {
                continue;
            }
            let old = crate::asynchrony::cost_of(s);
            let due = carry + ns as u128 * rate.max(1) as u128;
            carry = due % 1_000_000_000;
            s.count = (due / 1_000_000_000) as u32;
            s.ns = ns;
            crate::asynchrony::take_cost(p, tid, s.stack, &old);
            let new = crate::asynchrony::cost_of(s);
            p.costs.add(tid, s.stack, &new);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::FrameKey;

    fn wall(p: &mut Profile, tid: u32, name: &str, ns: u64, count: u32) -> TimedSample {
        let f = p.costs.stacks.intern_frame(FrameKey::Label(name.into()));
        let stack = p.costs.stacks.intern_stack(&[f]).unwrap();
        let s = TimedSample { ts: 0, os_tid: tid, stack, weight: SampleWeight::Wall, count, ns };
        p.costs.add(tid, stack, &crate::asynchrony::cost_of(&s));
        s
    }

    #[test]
    fn joined_samples_get_their_class_time_and_the_thread_keeps_its_lifetime() {
        let mut p = Profile::default();
        const MS: u64 = 1_000_000;
        // Thread 1: two samples of class 0 (20 + 10 ms sampled; the segments measured 45 ms), one
        // of class 1 (measured 5 ms, sampled 15), the pool loop 40 ms and 30 ms hidden idle.
        let mut samples = vec![
            wall(&mut p, 1, "parse", 20 * MS, 2),
            wall(&mut p, 1, "parse-inner", 10 * MS, 1),
            wall(&mut p, 1, "render", 15 * MS, 1),
            wall(&mut p, 1, "loop", 40 * MS, 4),
        ];
        let joins = [
            WallJoin { sample: 0, os_tid: 1, class: Some(0) },
            WallJoin { sample: 1, os_tid: 1, class: Some(0) },
            WallJoin { sample: 2, os_tid: 1, class: Some(1) },
            WallJoin { sample: 3, os_tid: 1, class: None },
        ];
        let measured: FxHashMap<u32, u64> = [(0, 45 * MS), (1, 5 * MS)].into_iter().collect();
        let hidden: FxHashMap<u32, u64> = [(1, 30 * MS)].into_iter().collect();
        rescale(&mut p, &mut samples, &joins, &measured, &hidden, 100);
        let ns: Vec<u64> = samples.iter().map(|s| s.ns / MS).collect();
        // Class 0: 45 ms split 2:1 (+15); class 1: 5 ms (-10); of the 5 ms the segments gained,
        // the loop gives 40/70 (the hidden idle time the rest): 40 - 2.9 ms.
        assert_eq!(ns, vec![30, 15, 5, 37]);
        let counts: Vec<u32> = samples.iter().map(|s| s.count).collect();
        assert_eq!(counts, vec![3, 1, 1, 3], "counts at 100 Hz, fractions carried (15 ms: 1, then 5 ms: 1)");
        let total: u64 = p.costs.threads.iter().flat_map(|t| t.costs.values()).map(|c| c.wall_ns).sum();
        assert_eq!(total, samples.iter().map(|s| s.ns).sum::<u64>(), "costs follow the samples");
    }
}
