//! Interned stacks of allocation samples (`AllocationStack`, tag 94): the writer numbers each
//! distinct stack once and its samples refer to it (`AllocationSamples::stacks`); the reader keeps
//! the definitions and gives every sample its full stack back.

use std::collections::HashMap;

use crate::{AllocationSample, AllocationSamples, AllocationStack};

/// Stacks an [`AllocationStackInterner`] remembers by default before it forgets them all.
pub const MAX_ALLOCATION_STACKS: usize = 16_384;

/// The writer's side: the ids of the stacks written so far. Before a record that could take it
/// past `cap` stacks, every id is forgotten and numbering starts again from 1 (the new
/// definitions replacing the old ones for readers).
#[derive(Debug)]
pub struct AllocationStackInterner {
    ids: HashMap<(Vec<u64>, Vec<u64>), u32>,
    next: u32,
    cap: usize,
}

impl Default for AllocationStackInterner {
    fn default() -> Self {
        AllocationStackInterner::new(MAX_ALLOCATION_STACKS)
    }
}

impl AllocationStackInterner {
    pub fn new(cap: usize) -> AllocationStackInterner {
        AllocationStackInterner { ids: HashMap::new(), next: 1, cap: cap.max(1) }
    }

    /// Packs `samples` (in order) with their stacks interned: the `AllocationStack` definitions
    /// of the stacks not written before (to be written first, in order), then the record. A
    /// sample without a stack refers to none. `None` when there are more than `u32::MAX` samples.
    /// The samples' stacks are moved out (no copy but one per new stack).
    pub fn pack(&mut self, mut samples: Vec<AllocationSample>) -> Option<(Vec<AllocationStack>, AllocationSamples)> {
        let n = u32::try_from(samples.len()).ok()?;
        // Forgotten before the record, never inside it: an id the record refers to must mean one
        // stack for all of its samples.
        if self.ids.len() + samples.len() > self.cap || self.next > u32::MAX - n {
            self.ids.clear();
            self.next = 1;
        }
        let mut defs = Vec::new();
        let mut refs = Vec::with_capacity(samples.len());
        for a in samples.iter_mut() {
            if a.ips.is_empty() && a.stack.is_empty() {
                refs.push(0);
                continue;
            }
            let key = (std::mem::take(&mut a.ips), std::mem::take(&mut a.stack));
            if let Some(&id) = self.ids.get(&key) {
                refs.push(id);
                continue;
            }
            let id = self.next;
            self.next += 1;
            defs.push(AllocationStack { id, ips: key.0.clone(), stack: key.1.clone() });
            self.ids.insert(key, id);
            refs.push(id);
        }
        let record = AllocationSamples::pack_refs(&samples, &refs)?;
        Some((defs, record))
    }
}

/// The reader's side: the `AllocationStack` definitions read so far, by id.
#[derive(Clone, Debug, Default)]
pub struct AllocationStacks {
    stacks: HashMap<u32, (Vec<u64>, Vec<u64>)>,
}

impl AllocationStacks {
    /// Keeps a definition (replacing an earlier one of the same id).
    pub fn define(&mut self, s: &AllocationStack) {
        self.stacks.insert(s.id, (s.ips.clone(), s.stack.clone()));
    }

    /// The `ips` and `stack` of stack `id`, if it was defined.
    pub fn get(&self, id: u32) -> Option<(&[u64], &[u64])> {
        self.stacks.get(&id).map(|(i, s)| (&i[..], &s[..]))
    }
}
