//! Exact allocation counts (`ObjectAllocated`, `--alloc exact`): counted per type in sharded maps
//! on the allocating thread, turned into records by the writer thread before each flush.

use std::collections::HashMap;
use std::sync::Mutex;

use clrprof_sys::{CallbackResult, ClassID, ObjectID};
use clrprof_trace::AllocationCounts;

use crate::names::Names;
use crate::profiler::{os_tid, State};
use crate::writer::Writer;

const SHARDS: usize = 16;

/// (count, bytes) per class, sharded by thread to keep lock contention away.
#[derive(Default)]
pub struct ExactCounts {
    shards: [Mutex<HashMap<ClassID, (u64, u64)>>; SHARDS],
}

impl ExactCounts {
    /// Emits the counts gathered since the last drain (on the writer thread).
    pub fn drain(&self, names: &Names, writer: &Writer, ts: u64) {
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

impl ExactCounts {
    /// A class is about to unload (`ClassUnloadStarted`, the id still valid): its counts not yet
    /// drained are written now, named through the one class-name cache while the runtime can still
    /// name it (the caller then forgets the name). Later allocations of a reused id start afresh.
    pub fn unloading(&self, class: ClassID, names: &Names, writer: &Writer, ts: u64) {
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

pub fn allocated(s: &State, object: ObjectID, class: ClassID) -> CallbackResult {
    let size = s.info.get_object_size2(object).unwrap_or(0) as u64;
    let shard = &s.events.alloc.shards[os_tid() as usize % SHARDS];
    if let Ok(mut m) = shard.lock() {
        let e = m.entry(class).or_default();
        e.0 += 1;
        e.1 += size;
    }
    Ok(())
}

/// Allocation samples waiting for the writer thread, which packs them into one
/// `AllocationSamples` record per flush (about a third of a record per sample).
#[derive(Default)]
pub struct PendingSamples {
    samples: Mutex<Vec<clrprof_trace::AllocationSample>>,
    dropped: std::sync::atomic::AtomicU64,
}

/// Samples held at most between two flushes; beyond, they are dropped and counted.
const MAX_PENDING: usize = 1 << 20;

impl PendingSamples {
    pub fn push(&self, a: clrprof_trace::AllocationSample) {
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
    pub fn take(&self) -> Option<clrprof_trace::AllocationSamples> {
        let taken = std::mem::take(&mut *self.samples.lock().ok()?);
        if taken.is_empty() {
            return None;
        }
        clrprof_trace::AllocationSamples::pack(&taken)
    }

    /// Writer tick.
    pub fn publish(&self, w: &Writer) {
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
