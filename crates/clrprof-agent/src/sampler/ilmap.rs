//! The IL-to-native map of each managed code version the sampler learns of (`IlMap` records):
//! what resolves a sampled IP to an IL offset and, through the module's PDB, to a source line at
//! report time. Looked up once per code version, beside its `CodeRange`s, on the sampler thread
//! (or the compiling thread for code that can be freed), never on the signal path.

use clrprof_sys::FunctionID;
use clrprof_trace::IlMap;

use super::Sampler;

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
}
