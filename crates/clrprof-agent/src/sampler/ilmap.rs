//! The IL-to-native map of each managed code version that sampled stacks hit (`IlMap` records):
//! what resolves a sampled IP to an IL offset and, through the module's PDB, to a source line at
//! report time. Looked up lazily on the sampler thread, once per code version, when a new stack
//! definition has a frame in it — never on the signal path, and not for every compiled version:
//! `GetILToNativeMapping3` costs some 33 µs of CPU a call, and mapping every version the C#
//! compiler's run compiles (22,441) took 0.7–2 s of the sampler thread, where the 3,823 versions
//! its samples hit took 0.12 s (BENCHMARKS.md, docs/benchmarks/il-maps.md).
//! Code that can be freed (collectible modules, DynamicMethods) is mapped at once on the
//! compiling thread instead, while its code start is sure to be valid.

use std::collections::{BTreeMap, HashSet};

use clrprof_sys::FunctionID;
use clrprof_trace::IlMap;

use super::{LoopState, Sampler};

/// Most code versions mapped per process (later ones resolve to their method's first line).
const MAX_MAPPED: usize = 1 << 20;
/// Most sampled addresses waiting for their code version to be known.
const MAX_PENDING: usize = 4096;
/// Sampler-loop rounds an address waits for its code version (a version is published within a
/// few rounds of its compilation; native code never is).
const PENDING_ROUNDS: u8 = 20;

/// What the sampler thread knows of code versions and their maps.
#[derive(Default)]
pub(super) struct IlMapState {
    /// Code range start → (FunctionID, its version's start address).
    version_of: BTreeMap<u64, (u64, u64)>,
    /// Versions (start addresses) whose map was emitted.
    mapped: HashSet<u64>,
    /// Sampled addresses in no known code range yet (a version published after its samples, or
    /// native code), with the retries left.
    pending: Vec<(u64, u8)>,
}

impl IlMapState {
    /// A code range of the version of `id` starting at `start`.
    pub(super) fn add_range(&mut self, range_start: u64, id: u64, start: u64) {
        self.version_of.insert(range_start, (id, start));
    }
}

impl Sampler {
    /// Emits the IL-to-native map of the code version of `id` starting at `start` (nothing when the
    /// runtime has none: stubs, code without debug info).
    pub(super) fn emit_il_map(&self, id: FunctionID, start: usize) {
        let Ok(map) = self.info.get_il_to_native_mapping3(start) else { return };
        if map.is_empty() {
            return;
        }
        let entries: Vec<u32> = map.iter().flatten().copied().collect();
        self.emit(IlMap { id: id as u64, code_start: start as u64, entries });
    }

    /// Maps the code versions a new stack definition's frames are in (return addresses at their
    /// call instruction), each once.
    pub(super) fn map_stack_code(&self, st: &mut LoopState, ips: &[u64]) {
        for (i, &ip) in ips.iter().enumerate() {
            if ip == 0 {
                continue;
            }
            let at = if i > 0 { ip - 1 } else { ip };
            if !self.map_code_at(st, at) && st.il.pending.len() < MAX_PENDING {
                st.il.pending.push((at, PENDING_ROUNDS));
            }
        }
    }

    /// Retries the sampled addresses whose code version was not known yet (after the sampler
    /// thread looked up newly compiled code).
    pub(super) fn map_pending_code(&self, st: &mut LoopState) {
        if st.il.pending.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut st.il.pending);
        pending.retain_mut(|(at, rounds)| {
            *rounds -= 1;
            !self.map_code_at(st, *at) && *rounds > 0
        });
        st.il.pending = pending;
    }

    /// True when `at` lies in a known code version (mapped now or before).
    fn map_code_at(&self, st: &mut LoopState, at: u64) -> bool {
        if st.function_at(at).is_none() {
            return false;
        }
        let Some((_, &(id, start))) = st.il.version_of.range(..=at).next_back() else { return true };
        if st.il.mapped.len() < MAX_MAPPED && st.il.mapped.insert(start) {
            self.emit_il_map(id as FunctionID, start as usize);
        }
        true
    }
}
