//! Exact allocation counts (`ObjectAllocated`, `--alloc exact`): counted per type in sharded maps
//! on the allocating thread, turned into records by the writer thread before each flush.

use std::collections::HashMap;
use std::sync::Mutex;

use clrprof_sys::{CallbackResult, ClassID, ObjectID};
use clrprof_trace::AllocationCounts;

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

/// Allocation samples waiting for the writer thread, which packs them into one
/// `AllocationSamples` record per flush (about a third of a record per sample).
#[derive(Default)]
pub(crate) struct PendingSamples {
    samples: Mutex<Vec<clrprof_trace::AllocationSample>>,
    dropped: std::sync::atomic::AtomicU64,
}

/// Samples held at most between two flushes; beyond, they are dropped and counted.
const MAX_PENDING: usize = 1 << 20;

impl PendingSamples {
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

    /// The samples since the last call, packed (in their order).
    pub(crate) fn take(&self) -> Option<clrprof_trace::AllocationSamples> {
        let taken = std::mem::take(&mut *self.samples.lock().ok()?);
        if taken.is_empty() {
            return None;
        }
        clrprof_trace::AllocationSamples::pack(&taken)
    }

    /// Writer tick.
    pub(crate) fn publish(&self, w: &Writer) {
        if let Some(r) = self.take() {
            w.emit(&r.into());
        }
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
        assert!(p.take().is_none());
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
        let packed = p.take().unwrap();
        assert_eq!(packed.ts, 10);
        assert_eq!(packed.unpack().unwrap(), all);
        assert!(p.take().is_none());
    }
}
