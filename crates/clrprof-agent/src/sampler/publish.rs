//! What the sampler publishes to the signal handler's code tables (`super::codes`): the code of
//! OSR versions and of frameless code versions as the runtime compiles (and unloads) them, the
//! executable mappings and the unwind rules of native code, and the mappings it writes to the
//! trace. Methods of [`Sampler`], on the sampler thread unless said otherwise.

use std::sync::atomic::Ordering;
use std::time::Instant;

use clrprof_sys::FunctionID;
use clrprof_trace::{CodeRange, NativeMapping};

use super::{cfi, code_ranges, codes, native, prolog, DynamicCode, LoopState, Sampler, MAX_DYNAMIC_RANGES};
use crate::log_warn;

impl Sampler {
    /// A function got native code (`JITCompilationFinished`, `JITCachedFunctionSearchFinished`):
    /// its code versions are looked up later, on the sampler thread.
    /// Code that can be freed (`unloads_with`: the DynamicMethod's or the collectible module's id, 0
    /// when the runtime could not say) is looked up at once, on the compiling thread: its ids die at
    /// unload and must never be handed to the runtime later. Its frame size is published to the
    /// signal handler when it has no RBP frame (so the walk keeps the callers of a small
    /// DynamicMethod) and taken back by [`Sampler::code_unloading`]. A JIT compilation that gave
    /// the function a second code version may be an OSR version, which the running tier-0 frame
    /// enters as soon as this callback returns: it is made known to the signal handler at once.
    pub(crate) fn code_compiled(&self, id: FunctionID, unloads_with: Option<u64>, jitted: bool) {
        let Some(key) = unloads_with else {
            if jitted {
                self.add_osr_versions(id);
            }
            if let Ok(mut v) = self.new_code.lock() {
                if v.len() < 1 << 20 {
                    v.push(id);
                }
            }
            return;
        };
        for start in self.info.get_native_code_start_addresses(id).unwrap_or_default() {
            if start == 0 {
                continue;
            }
            let ranges = code_ranges(&self.info, start);
            for &(a, n) in &ranges {
                self.emit(CodeRange { id: id as u64, start: a, size: n });
            }
            self.emit_il_map(id, start);
            if let Ok(mut d) = self.dynamic_code.lock() {
                if d.ranges.len() + ranges.len() > MAX_DYNAMIC_RANGES {
                    *d = DynamicCode::default();
                }
                for &(a, n) in &ranges {
                    d.ranges.insert(a, a + n);
                    d.by_key.entry(key).or_default().push(a);
                }
            }
            if key != 0 {
                // Safety: `ranges` are the live code of the version just compiled (it cannot be
                // freed before this callback returns).
                if let Some(f) = unsafe { prolog::frameless_frame_of(start as u64, &ranges) } {
                    self.add_unloadable_frameless(key, start as u64, &ranges, f);
                }
            }
        }
    }

    /// Publishes the entry range of a frameless code version that can be freed, remembered under
    /// `key` for [`Sampler::code_unloading`]. An older entry at the same address (code freed
    /// without its unload being seen) is replaced.
    pub(super) fn add_unloadable_frameless(
        &self,
        key: u64,
        start: u64,
        ranges: &[(u64, u64)],
        f: codes::FramelessFrame,
    ) {
        let Some(&(a, n)) = ranges.iter().find(|&&(a, _)| a == start) else { return };
        let Ok(mut m) = self.unloadable.lock() else { return };
        codes::remove_frameless_code(a);
        if codes::add_frameless_code(a, a + n, f) {
            m.entry(key).or_default().push(a);
            self.unloadable_published.fetch_add(1, Ordering::Relaxed);
        } else {
            self.frameless_table_full();
        }
    }

    /// Says once that frameless code no longer fits the signal handler's table.
    pub(super) fn frameless_table_full(&self) {
        if !self.frameless_full.swap(true, Ordering::Relaxed) {
            let max = codes::MAX_FRAMELESS_RANGES;
            log_warn!("sampler: over {max} frameless code ranges; later ones lose their callers");
        }
    }

    /// A DynamicMethod or a collectible module is about to be freed (`DynamicMethodUnloaded`,
    /// `ModuleUnloadStarted`): its frameless code leaves the signal handler's table first, so code
    /// compiled later at the same addresses is never walked with its frame size.
    pub(crate) fn code_unloading(&self, key: u64) {
        if let Ok(mut d) = self.dynamic_code.lock() {
            for a in d.by_key.remove(&key).unwrap_or_default() {
                d.ranges.remove(&a);
            }
        }
        let Ok(mut m) = self.unloadable.lock() else { return };
        for a in m.remove(&key).unwrap_or_default() {
            if codes::remove_frameless_code(a) {
                self.unloadable_forgotten.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Publishes the OSR code versions of `id` and the frames of its code versions without an RBP
    /// frame to the signal handler, on the compiling thread: the code runs as soon as it is
    /// published, and the sampler thread's own lookup ([`Sampler::update_code`]) comes a tick or
    /// more later — much more on a busy machine, where samples in the new code lost the callers the
    /// tables keep. (Its JIT compilations are already published when `JITCompilationFinished` is
    /// raised; a version the runtime publishes later is the sampler thread's.) Only for code that
    /// never unloads.
    pub(super) fn add_osr_versions(&self, id: FunctionID) {
        let starts = self.info.get_native_code_start_addresses(id).unwrap_or_default();
        for start in starts {
            let start = start as u64;
            if start == 0 || codes::osr_code_known(start) || codes::frameless_code_known(start) {
                continue;
            }
            let ranges: Vec<(u64, u64)> = code_ranges(&self.info, start as usize);
            // An OSR version always has its tier-0 version beside it.
            // Safety: `ranges` are the code of a live code version of a function whose module
            // never unloads (the caller checked).
            if unsafe { prolog::is_osr_code(start, &ranges) } {
                for (a, n) in ranges {
                    codes::add_osr_code(a, a + n);
                }
            // Safety: as above.
            } else if let Some(f) = unsafe { prolog::frameless_frame_of(start, &ranges) } {
                if let Some(&(a, n)) = ranges.iter().find(|&&(a, _)| a == start) {
                    if !codes::add_frameless_code(a, a + n, f) {
                        self.frameless_table_full();
                    }
                }
            }
        }
    }

    /// Looks up the code versions of recently compiled functions (again a few times until a new
    /// one appears, as a version is published a little after its compilation; a found version ends
    /// the lookups of its compilation) and adds their ranges to the map of
    /// managed code. The map, not `GetFunctionFromIP`, names managed IPs: arbitrary addresses
    /// from stack words are never handed to the runtime.
    pub(super) fn update_code(&self, st: &mut LoopState) {
        let fresh = self.new_code.lock().map(|mut v| std::mem::take(&mut *v)).unwrap_or_default();
        if self.precompiled_found.get().is_some() {
            st.known_functions.extend(fresh.iter().map(|&id| id as u64));
        }
        st.code_pending.extend(fresh.into_iter().map(|id| (id, 0u32)));
        let mut pending = std::mem::take(&mut st.code_pending);
        pending.retain_mut(|(id, tries)| {
            *tries += 1;
            // Each compilation publishes one code version: once a version not known before is
            // found, this compilation's is (a version another compilation published is found by
            // that one's entry, or was already known).
            let mut found = false;
            if matches!(*tries, 1 | 3 | 10 | 30 | 100) {
                for start in self.info.get_native_code_start_addresses(*id).unwrap_or_default() {
                    if start == 0 || st.code_starts.contains(&(start as u64)) {
                        continue;
                    }
                    let ranges = code_ranges(&self.info, start);
                    // Not published yet: looked up again at the next try.
                    if ranges.is_empty() {
                        continue;
                    }
                    st.code_starts.insert(start as u64);
                    found = true;
                    // Safety: `ranges` are the code of a live code version of a function whose
                    // module never unloads (collectible code is handled in `code_compiled`).
                    let osr = unsafe { prolog::is_osr_code(start as u64, &ranges) };
                    // Safety: as above.
                    let frameless =
                        if osr { None } else { unsafe { prolog::frameless_frame_of(start as u64, &ranges) } };
                    for (a, n) in ranges {
                        st.code.insert(a, (a + n, *id as u64));
                        st.il.add_range(a, *id as u64, start as u64);
                        self.emit(CodeRange { id: *id as u64, start: a, size: n });
                        if osr && !codes::add_osr_code(a, a + n) && !st.osr_full {
                            st.osr_full = true;
                            let max = codes::MAX_OSR_RANGES;
                            log_warn!("sampler: over {max} OSR code ranges; later ones lose their callers");
                        }
                        // Only the range holding the entry (and the prolog that was read).
                        if let Some(f) = frameless.filter(|_| a == start as u64) {
                            if !codes::add_frameless_code(a, a + n, f) {
                                self.frameless_table_full();
                            }
                        }
                    }
                }
            }
            *tries < 100 && !found
        });
        st.code_pending = pending;
    }

    /// Publishes the executable mappings to the signal handler (frame records are checked
    /// against them).
    pub(super) fn publish_exec_ranges(&self, ranges: &[(u64, u64)]) {
        let Ok(mut g) = self.native_rules.lock() else { return };
        for &(a, b) in ranges {
            if !g.full_exec && !codes::add_exec_range(a, b) {
                g.full_exec = true;
                log_warn!(
                    "sampler: over {} executable mappings; frame records into later ones are not checked",
                    codes::MAX_EXEC_RANGES
                );
            }
        }
    }

    pub(super) fn emit_mappings(&self, st: &mut LoopState) {
        let ts = self.now();
        let fresh = st.maps.new_mappings();
        self.publish_exec_ranges(st.maps.exec_ranges());
        for m in fresh {
            self.add_native_rules(&m);
            let build_id = st.maps.build_id(&m.path);
            self.emit(NativeMapping {
                ts,
                start: m.start,
                end: m.end,
                file_offset: m.file_offset,
                path: m.path,
                build_id,
            });
        }
    }

    /// Publishes the unwind rules of a native code mapping to the signal handler (its file's
    /// `.eh_frame`, read once per file; kept for the process's life).
    pub(super) fn add_native_rules(&self, m: &native::Mapping) {
        if m.path.ends_with(".dll") || m.path.ends_with(".exe") {
            return;
        }
        let Ok(mut g) = self.native_rules.lock() else { return };
        let st = &mut *g;
        if st.full || !st.published.insert((m.start, m.end)) {
            return;
        }
        let file = match st.files.entry(m.path.clone()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let t = Instant::now();
                let read = cfi::of_file_cached(&m.path, self.cache_dir.as_deref());
                st.read_ns += t.elapsed().as_nanos() as u64;
                match &read {
                    Some((_, true)) => st.from_cache += 1,
                    Some((_, false)) => st.parsed += 1,
                    None => {}
                }
                e.insert(read.map(|(f, _)| {
                    let rows: &'static [u64] = Box::leak(f.rows);
                    (rows, f.segments)
                }))
            }
        }
        .as_ref();
        let Some((rows, segments)) = file else { return };
        let rules = cfi::FileRules { rows: Box::new([]), segments: segments.clone() };
        let Some(vaddr) = rules.vaddr_of(m.file_offset, m.end - m.start) else { return };
        let Some(bias) = m.start.checked_sub(vaddr) else { return };
        let r: &'static codes::NativeRules = Box::leak(Box::new(codes::NativeRules { bias, rows }));
        if !codes::add_native_code(m.start, m.end, r) {
            st.full = true;
            let max = codes::MAX_NATIVE_RANGES;
            log_warn!("sampler: over {max} native code mappings; later ones are walked by frame pointers only");
        }
    }
}
