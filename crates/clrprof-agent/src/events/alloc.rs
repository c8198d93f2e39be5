//! Exact allocation counts (`ObjectAllocated`, `--alloc exact`): counted per type in sharded maps
//! on the allocating thread, turned into records by the writer thread before each flush.

use std::collections::HashMap;
use std::sync::Mutex;

use clrprof_sys::{CallbackResult, ClassID, ObjectID};
use clrprof_trace::AllocationCounts;

use crate::config::ALLOC_ALLOWANCE;
use crate::context::Context;
use crate::names::Names;
use crate::os::os_tid;
use crate::writer::Writer;

const SHARDS: usize = 16;

/// (count, bytes) per class, sharded by thread to keep lock contention away.
#[derive(Default)]
pub(crate) struct ExactCounts {
    shards: [Mutex<HashMap<ClassID, (u64, u64)>>; SHARDS],
}

impl ExactCounts {
    /// Emits the counts gathered since the last drain (on the writer thread).
    pub(crate) fn drain(&self, names: &Names, writer: &Writer, ts: u64) {
        let mut all: HashMap<ClassID, (u64, u64)> = HashMap::new();
        for sh in &self.shards {
            let taken = match sh.lock() {
                Ok(mut m) => std::mem::take(&mut *m),
                Err(_) => continue,
            };
            for (c, (n, b)) in taken {
                let e = all.entry(c).or_default();
                e.0 += n;
                e.1 += b;
            }
        }
        for (class, (count, bytes)) in all {
            let type_name = names.class_name(class).to_string();
            writer.emit(&AllocationCounts { ts, class: class as u64, type_name, count, bytes }.into());
        }
    }
}

/// What [`allocated`] fills (borrowed from `super::Events`).
pub(crate) struct Recorder<'a> {
    pub(crate) alloc: &'a ExactCounts,
    pub(crate) alloc_samples: &'a PendingSamples,
}

impl ExactCounts {
    /// A class is about to unload (`ClassUnloadStarted`, the id still valid): its counts not yet
    /// drained are written now, named through the one class-name cache while the runtime can still
    /// name it (the caller then forgets the name). Later allocations of a reused id start afresh.
    pub(crate) fn unloading(&self, class: ClassID, names: &Names, writer: &Writer, ts: u64) {
        let (mut count, mut bytes) = (0u64, 0u64);
        for sh in &self.shards {
            if let Ok(mut m) = sh.lock() {
                if let Some((n, b)) = m.remove(&class) {
                    count += n;
                    bytes += b;
                }
            }
        }
        if count > 0 {
            let type_name = names.class_name(class).to_string();
            writer.emit(&AllocationCounts { ts, class: class as u64, type_name, count, bytes }.into());
        }
    }
}

pub(crate) fn allocated(s: &Context, ev: &Recorder, object: ObjectID, class: ClassID) -> CallbackResult {
    let size = s.info.get_object_size2(object).unwrap_or(0) as u64;
    let tid = os_tid();
    let shard = &ev.alloc.shards[tid as usize % SHARDS];
    if let Ok(mut m) = shard.lock() {
        let e = m.entry(class).or_default();
        e.0 += 1;
        e.1 += size;
    }
    if site_sampled(size) && !s.is_stopped() {
        // Allocation sites: the stacks of the sampled objects. Their type is named by the
        // `AllocationCounts` of the class (the reader resolves it by class id).
        ev.alloc_samples.push(clrprof_trace::AllocationSample {
            ts: s.now(),
            os_tid: tid,
            class: class as u64,
            size,
            amount: SITE_SAMPLING_MEAN_BYTES,
            source: 2,
            stack: super::stack::current_stack(s),
            walk_weight: 1,
            ..Default::default()
        });
    }
    Ok(())
}

/// Mean bytes between two stack walks of `--alloc exact`. The counts are exact; the walks give
/// each type's sites their shares. A walk costs about as much as 30 to 50 `ObjectAllocated`
/// callbacks of small objects, so one per 16 KiB (some 500 small objects) keeps the walks a
/// small part of what the mode costs anyway.
pub(crate) const SITE_SAMPLING_MEAN_BYTES: u64 = 16 * 1024;

/// The allocating thread's byte countdown to its next sampled object, and its random state.
#[derive(Clone, Copy)]
struct SiteSampler {
    left: u64,
    rng: u64,
}

thread_local! {
    static SITE_SAMPLER: std::cell::Cell<SiteSampler> = const { std::cell::Cell::new(SiteSampler { left: 0, rng: 0 }) };
}

/// splitmix64: the next state and a uniform 64-bit value.
fn splitmix(state: u64) -> (u64, u64) {
    let s = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (s, z ^ (z >> 31))
}

/// Bytes up to and including the next sampled byte: exponential with mean `mean` (the gap of a
/// Bernoulli trial per byte with success probability 1/mean), at least 1.
fn next_gap(rng: &mut u64, mean: u64) -> u64 {
    let (next, v) = splitmix(*rng);
    *rng = next;
    // Uniform in (0, 1]: never ln(0).
    let u = ((v >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    ((-u.ln() * mean as f64).ceil() as u64).max(1)
}

/// Whether this thread's object of `size` bytes is sampled: the model of .NET 10's randomized
/// allocation sampling (RandomizedAllocationSampling.md) — a trial per byte, the object sampled at
/// its first success (then the trials skip to its end) — so an object is sampled with probability
/// 1 - (1 - 1/mean)^size, which the reader inverts.
fn site_sampled(size: u64) -> bool {
    SITE_SAMPLER
        .try_with(|c| {
            let mut st = c.get();
            if st.rng == 0 {
                // Seeded per thread: the thread id and the time of its first allocation.
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0);
                st.rng = ((os_tid() as u64) << 32 ^ t) | 1;
                st.left = next_gap(&mut st.rng, SITE_SAMPLING_MEAN_BYTES);
            }
            let hit = size >= st.left;
            if hit {
                st.left = next_gap(&mut st.rng, SITE_SAMPLING_MEAN_BYTES);
            } else {
                st.left -= size;
            }
            c.set(st);
            hit
        })
        .unwrap_or(false)
}

/// Allocation samples waiting for the writer thread, which thins them to the process's
/// allowance ([`Thinner`]) and packs them into one `AllocationSamples` record per flush (about a
/// third of a record per sample), each distinct stack written once as an `AllocationStack`
/// (issue 28: a busy server's kept samples repeat a few hundred stacks).
#[derive(Default)]
pub(crate) struct PendingSamples {
    samples: Mutex<Vec<clrprof_trace::AllocationSample>>,
    dropped: std::sync::atomic::AtomicU64,
    /// Used by the writer thread only (the lock is never contended).
    thinner: Mutex<Thinner>,
    /// The stacks written so far (writer thread only, like `thinner`).
    stacks: Mutex<clrprof_trace::AllocationStackInterner>,
}

/// Samples held at most between two flushes; beyond, they are dropped and counted.
const MAX_PENDING: usize = 1 << 20;

impl PendingSamples {
    /// Sets the rate the writer thins samples to (`CLRPROF_ALLOC_RATE`; 0 keeps every one).
    pub(crate) fn set_rate(&self, rate: u32) {
        if let Ok(mut t) = self.thinner.lock() {
            let t0 = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
            *t = Thinner::new(rate, t0 as u64 ^ (std::process::id() as u64) << 40);
        }
    }

    pub(crate) fn push(&self, a: clrprof_trace::AllocationSample) {
        if let Ok(mut v) = self.samples.lock() {
            if v.len() < MAX_PENDING {
                v.push(a);
                return;
            }
        }
        if self.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
            crate::log_warn!("allocation samples arrive faster than they are written; dropping some");
        }
    }

    /// The samples since the last call, thinned at `now_ns` and packed (in their order), with
    /// the definitions of the stacks they are the first to use (written first).
    pub(crate) fn take(
        &self,
        now_ns: u64,
    ) -> Option<(Vec<clrprof_trace::AllocationStack>, clrprof_trace::AllocationSamples)> {
        let mut taken = std::mem::take(&mut *self.samples.lock().ok()?);
        let mut thinner = self.thinner.lock().ok()?;
        thinner.thin(&mut taken, now_ns);
        if taken.is_empty() && thinner.thinned == 0 {
            return None;
        }
        let empty = taken.is_empty();
        let (defs, mut r) = self.stacks.lock().ok()?.pack(taken)?;
        r.thinned = std::mem::take(&mut thinner.thinned);
        if empty {
            r.ts = now_ns;
        }
        Some((defs, r))
    }

    /// Writer tick, at trace time `now`.
    pub(crate) fn publish(&self, w: &Writer, now: u64) {
        if let Some((defs, r)) = self.take(now) {
            for d in defs {
                w.emit(&d.into());
            }
            w.emit(&r.into());
        }
    }
}

/// Keeps a busy process's allocation samples to a steady rate (issue 28: a server at 18,000
/// requests a second wrote 64 KB of them a second): the first [`ALLOC_ALLOWANCE`] samples are
/// kept, then `rate` a second. A flush with more samples than its share keeps one in `k` on average,
/// each sample on its own random draw, so each sample is kept with probability 1/k and the kept ones weigh `k`
/// (`AllocationSample::weight`): every total stays unbiased. A sample that names its type (a
/// type's first) is always kept, for itself alone. Runs on the writer thread only.
#[derive(Default)]
pub(crate) struct Thinner {
    /// Samples a second kept after the allowance; 0 keeps every sample.
    rate: u32,
    /// Samples that may still be kept: the allowance, then `rate` a second earned (at most a
    /// second's worth saved up beyond what is left of the allowance).
    budget: f64,
    last_ns: Option<u64>,
    rng: u64,
    /// Samples dropped since the last record.
    thinned: u64,
    /// Samples held back while less than a sample's share is left (a flush right after an
    /// overdraft, or flushes more often than the rate earns one): thinned with the next flush, so
    /// no kept sample weighs for more than a flush's worth.
    carry: Vec<clrprof_trace::AllocationSample>,
}

/// Samples held back at most before they are thinned whatever is left.
const MAX_CARRY: usize = 1 << 18;

impl Thinner {
    fn new(rate: u32, seed: u64) -> Thinner {
        Thinner { rate, budget: ALLOC_ALLOWANCE as f64, last_ns: None, rng: seed | 1, thinned: 0, carry: Vec::new() }
    }

    /// Thins `samples` (in place, keeping their order) at `now_ns`.
    fn thin(&mut self, samples: &mut Vec<clrprof_trace::AllocationSample>, now_ns: u64) {
        if self.rate == 0 {
            return;
        }
        if let Some(last) = self.last_ns {
            let earned = self.rate as f64 * now_ns.saturating_sub(last) as f64 / 1e9;
            self.budget = (self.budget + earned).min(self.budget.max(self.rate as f64));
        }
        self.last_ns = Some(now_ns);
        if !self.carry.is_empty() {
            let mut all = std::mem::take(&mut self.carry);
            all.append(samples);
            *samples = all;
        }
        if self.budget < 1.0 && samples.len() < MAX_CARRY && samples.iter().all(|a| a.type_name.is_empty()) {
            self.carry = std::mem::take(samples);
            return;
        }
        let named = samples.iter().filter(|a| !a.type_name.is_empty()).count();
        let m = samples.len() - named;
        self.budget -= named as f64;
        if m as f64 <= self.budget {
            self.budget -= m as f64;
            return;
        }
        // One in k: about `budget` of the m kept (at least one when the carry is full).
        let k = (m as f64 / self.budget.max(1.0)).ceil().clamp(2.0, u32::MAX as f64) as u64;
        // Each on its own draw (not every k-th: an app's allocations repeat in patterns that a
        // fixed stride would keep in step with).
        let before = samples.len();
        let mut rng = self.rng;
        samples.retain_mut(|a| {
            if !a.type_name.is_empty() {
                return true;
            }
            let (next, v) = splitmix(rng);
            rng = next;
            let keep = v % k == 0;
            if keep {
                a.weight = (a.weight.max(1) as u64).saturating_mul(k).min(u32::MAX as u64) as u32;
            }
            keep
        });
        self.rng = rng;
        let kept = samples.len() - named;
        self.budget -= kept as f64;
        self.thinned += (before - samples.len()) as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_trace::AllocationSample;

    #[test]
    fn site_sampling_takes_each_object_with_the_documented_probability() {
        // 24-byte objects: p = 1 - (1 - 1/16384)^24, about 1 in 683; 64 KiB objects: p = 0.982.
        for (size, n) in [(24u64, 2_000_000u64), (65_536, 20_000)] {
            let hits = (0..n).filter(|_| site_sampled(size)).count() as f64;
            let p = 1.0 - (1.0 - 1.0 / SITE_SAMPLING_MEAN_BYTES as f64).powf(size as f64);
            let expected = n as f64 * p;
            // Within 5 standard deviations of a binomial count.
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            assert!((hits - expected).abs() <= 5.0 * sd + 1.0, "{size}: {hits} hits, expected {expected:.0}");
        }
    }

    #[test]
    fn pending_samples_are_packed_once_in_their_order() {
        let p = PendingSamples::default();
        assert!(p.take(0).is_none());
        let s = |ts: u64, name: &str| AllocationSample {
            ts,
            os_tid: 3,
            class: 9,
            type_name: name.into(),
            size: 24,
            ..Default::default()
        };
        let all = vec![s(30, "T"), s(10, ""), s(20, "")];
        for a in &all {
            p.push(a.clone());
        }
        let (defs, packed) = p.take(0).unwrap();
        assert!(defs.is_empty(), "no stack, no definition");
        assert_eq!(packed.ts, 10);
        assert_eq!(packed.unpack().unwrap(), all);
        assert_eq!(packed.thinned, 0);
        assert!(p.take(0).is_none());
        // Stacks: each defined once, before the first record that uses it, and read back whole.
        let walked = |ts: u64, stack: Vec<u64>| AllocationSample { stack, walk_weight: 1, ..s(ts, "") };
        let mut stacks = clrprof_trace::AllocationStacks::default();
        let mut back = Vec::new();
        let mut defined = Vec::new();
        for batch in
            [vec![walked(1, vec![5, 6]), walked(2, vec![5, 6]), walked(3, vec![7])], vec![walked(4, vec![5, 6])]]
        {
            batch.iter().for_each(|a| p.push(a.clone()));
            let (defs, packed) = p.take(0).unwrap();
            defs.iter().for_each(|d| stacks.define(d));
            defined.extend(defs.into_iter().map(|d| d.id));
            back.extend(packed.unpack_with(&stacks).unwrap());
        }
        assert_eq!(defined, [1, 2]);
        assert_eq!(
            back.iter().map(|a| a.stack.clone()).collect::<Vec<_>>(),
            [vec![5, 6], vec![5, 6], vec![7], vec![5, 6]]
        );
    }

    fn unnamed(ts: u64, class: u64) -> AllocationSample {
        AllocationSample { ts, class, size: 24, ..Default::default() }
    }

    #[test]
    fn the_allowance_is_kept_whole_then_the_rate() {
        let p = PendingSamples::default();
        p.set_rate(100);
        // 4,000 then 1,000 samples within the allowance: all kept, none weighted.
        for n in [4_000u64, 1_000] {
            (0..n).for_each(|i| p.push(unnamed(i, 1)));
            let (_, r) = p.take(1_000_000).unwrap();
            assert_eq!((r.count as u64, r.thinned), (n, 0));
            assert!(r.weights.is_empty());
        }
        // A second later: 100 earned; 10,000 samples (and one naming its type, always kept).
        (0..10_000).for_each(|i| p.push(unnamed(i, 1 + i % 3)));
        p.push(AllocationSample { type_name: "T".into(), ..unnamed(5, 9) });
        let (_, r) = p.take(1_001_000_000).unwrap();
        let kept = r.unpack().unwrap();
        assert_eq!(kept.len() as u64 + r.thinned, 10_001);
        // 99 left of the 100 after the named one: each kept with chance 1 / ceil(10,000 / 99) =
        // 1/102, about 98 (± 9.9; within 5 standard deviations), and the named one.
        assert!((48 + 1..=148 + 1).contains(&kept.len()), "one in 102 of 10,000, and the named one: {}", kept.len());
        let named = kept.iter().find(|a| a.type_name == "T").unwrap();
        assert_eq!(named.weight, 0, "itself alone");
        assert!(kept.iter().filter(|a| a.type_name.is_empty()).all(|a| a.weight == 102));
        // Nothing pending, nothing thinned since: no record.
        assert!(p.take(1_002_000_000).is_none());
    }

    #[test]
    fn thinning_keeps_the_totals_of_each_type_unbiased() {
        // 20 flushes a second for 100 s of 2,000 samples each, three types 1:2:5; rate 100.
        let mut t = Thinner::new(100, 42);
        t.budget = 0.0;
        t.last_ns = Some(0);
        let mut totals = [0u64; 3];
        let mut kept = 0u64;
        let mut rng = 7u64;
        for f in 1..=2_000u64 {
            let mut batch: Vec<AllocationSample> = (0..2_000u64)
                .map(|i| {
                    let (next, v) = splitmix(rng);
                    rng = next;
                    unnamed(i, [0, 1, 1, 2, 2, 2, 2, 2][(v % 8) as usize])
                })
                .collect();
            t.thin(&mut batch, f * 50_000_000);
            kept += batch.len() as u64;
            for a in &batch {
                totals[a.class as usize] += a.weight as u64;
            }
        }
        // 100 s at 100 a second.
        assert!((9_900..=10_100).contains(&kept), "{kept} kept");
        assert_eq!(t.thinned + kept, 4_000_000);
        for (class, share) in [(0, 1u64), (1, 2), (2, 5)] {
            let want = 4_000_000 * share / 8;
            let got = totals[class];
            // Within 10%: over 3 standard deviations of the rarest type's 1,250 kept samples.
            assert!(got.abs_diff(want) * 10 <= want, "type {class}: {got} against {want}");
        }
    }

    #[test]
    fn samples_wait_for_a_whole_share_of_the_rate() {
        let p = PendingSamples::default();
        p.set_rate(10);
        if let Ok(mut t) = p.thinner.lock() {
            t.budget = -0.5;
            t.last_ns = Some(0);
        }
        // 50 ms earn half a sample: held back, nothing written.
        (0..30).for_each(|i| p.push(unnamed(i, 1)));
        assert!(p.take(50_000_000).is_none());
        // 200 ms more earn two: the 60 samples of both flushes thinned, each kept with chance 1/30.
        (30..60).for_each(|i| p.push(unnamed(i, 1)));
        let (_, r) = p.take(250_000_000).unwrap();
        let kept = r.unpack().unwrap();
        assert_eq!(kept.len() as u64 + r.thinned, 60);
        assert!(kept.iter().all(|a| a.weight == 30), "{kept:?}");
    }

    #[test]
    fn rate_zero_keeps_every_sample() {
        let p = PendingSamples::default();
        p.set_rate(0);
        (0..20_000).for_each(|i| p.push(unnamed(i, 1)));
        let (_, r) = p.take(0).unwrap();
        assert_eq!((r.count, r.thinned), (20_000, 0));
    }
}
