//! The code versions of instrumented call sites: a call-tree node's call site (the return address
//! into its caller) resolves to a source line at report time through the IL-to-native map of the
//! caller's code version, so the writer emits that map (`IlMap`) for each version a call site is
//! in — once each, off the program's threads, when the node is first published. The sampler maps
//! the versions its samples hit the same way; a version mapped by both is written twice and read
//! once.

use std::collections::HashSet;

use clrprof_sys::ProfilerInfo;
use clrprof_trace::IlMap;

use crate::writer::Writer;

/// Most call sites and code versions remembered (later ones are not mapped: their calls stay per
/// function in the callers view).
const MAX_KNOWN: usize = 1 << 20;

/// Call sites looked up and code versions mapped so far (writer thread).
#[derive(Default)]
pub(super) struct CallSites {
    seen: HashSet<u64>,
    mapped: HashSet<usize>,
}

impl CallSites {
    /// Emits the IL-to-native map of the code version each new call site is in (a site in native
    /// code, or in code the runtime no longer knows, is skipped).
    pub(super) fn map(&mut self, info: &ProfilerInfo, w: &Writer, sites: &[u64]) {
        for &site in sites {
            if site == 0 || self.seen.len() >= MAX_KNOWN || !self.seen.insert(site) {
                continue;
            }
            // The call instruction, one byte before the return address.
            let at = site as usize - 1;
            let id = match info.get_function_from_ip(at) {
                Ok(id) if id != 0 => id,
                _ => continue,
            };
            for start in info.get_native_code_start_addresses(id).unwrap_or_default() {
                if start == 0 || self.mapped.contains(&start) {
                    continue;
                }
                let holds = info
                    .get_code_info4(start)
                    .unwrap_or_default()
                    .iter()
                    .any(|r| r.start_address <= at && at < r.start_address + r.size);
                if !holds || self.mapped.len() >= MAX_KNOWN {
                    continue;
                }
                self.mapped.insert(start);
                let Ok(map) = info.get_il_to_native_mapping3(start) else { continue };
                if !map.is_empty() {
                    let entries: Vec<u32> = map.iter().flatten().copied().collect();
                    w.emit(&IlMap { id: id as u64, code_start: start as u64, entries }.into());
                }
            }
        }
    }
}
