//! `attach --count PATTERN`: exact call counts after attach, by ReJIT.
//!
//! An attached profiler cannot set a method's IL before its first compilation (it was not there),
//! so the methods the patterns select get new code instead (research: il-rewriting.md §2, §8.1):
//!
//! 1. **Select** on the control thread, before the session says it started: every MethodDef of
//!    every loaded module whose name (`Ns.Type.Method`), type or assembly a pattern matches (the
//!    `--include` grammar), at most [`MAX_METHODS`]; methods without IL are left out, and the
//!    intrinsics of [`crate::count::Intrinsics`] (the same predicate as `record --count`) are
//!    listed uncounted.
//! 2. **Probe**: the same 16 bytes as `record --count` ([`crate::count::probe`]) before the
//!    original body, a counter slot each in the same mapping; the reference to
//!    `Interlocked.Increment` made after attach is published with `ApplyMetaData`.
//! 3. **Request**: `RequestReJITWithInliners(COR_PRF_REJIT_BLOCK_INLINING)`, so that every
//!    method that had inlined a selected one is recompiled (from its own IL, which now calls the
//!    selected method instead of inlining it); `RequestReJIT` (inliners keep their inlined copies)
//!    if that call fails. The runtime asks for the IL in `GetReJITParameters`, given through
//!    `ICorProfilerFunctionControl::SetILFunctionBody`. Rejitted methods are never inlined.
//! 4. **Revert** at the end of the session: the same request again, the original bodies given
//!    this time (re-ReJIT with the original IL, which the runtime's docs prefer to `RequestRevert`:
//!    that would reactivate old native code that may hold stale inlined copies).
//!
//! `attach --count-top N` chooses the methods instead ([`AttachCounts::start_top`]): the sampler
//! thread tallies CPU samples by their innermost managed frame's function
//! ([`crate::sampler::Tally`]); at the end of the window the control thread ranks them per method
//! definition and takes the N hottest that can be counted, then steps 2–4 as above.
//!
//! The trace says when: a message with the time the request returned (from then on every new
//! call runs the new IL version), and one per method when its new code is compiled
//! (`ReJITCompilationFinished`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use clrprof_sys::info::{rejit_flags, FunctionControl, RuntimeInfo};
use clrprof_sys::{FunctionID, ModuleID};
use clrprof_trace::{count_uncounted as why, CountMethod, Message};

use crate::context::Context;
use crate::count::{Counts, Intrinsics};
use crate::elt::filter::Filter;
use crate::writer::Writer;
use crate::{log_info, log_warn};

/// At most this many method definitions are rejitted (the selection is meant to be small).
pub(crate) const MAX_METHODS: usize = 10_000;

/// Whether ReJIT after attach is safe on this runtime, and if not why (research §2):
/// - .NET 8: yes (runtime #100024/#112636, the crash in `GetInitialOptimizationTier(NULL)`, comes
///   from runtime PR #90412, first shipped in .NET 9);
/// - .NET 9: no: the fix (runtime PR #117765, merged 2025-07-17 into main) is in no 9.0 servicing
///   build we know of;
/// - .NET 10 and later: yes from 10.0.0-preview.7 on (the first preview cut after the merge);
///   earlier previews are refused.
pub(crate) fn runtime_allows_rejit(rt: &RuntimeInfo) -> Result<(), String> {
    match rt.major {
        8 => Ok(()),
        9 => Err(format!(
            "attach --count is refused on .NET {}.{}.{}: ReJIT after attach can crash .NET 9 (runtime issues #100024, #112636; fixed in .NET 10 by runtime PR #117765, not known in any 9.0 build); use `record --count` (start-up) or a .NET 8 or 10 runtime",
            rt.major, rt.minor, rt.build
        )),
        m if m >= 10 => {
            let preview = rt
                .version_string
                .split("preview.")
                .nth(1)
                .and_then(|p| p.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse::<u32>().ok());
            match preview {
                Some(p) if m == 10 && p < 7 => Err(format!(
                    "attach --count is refused on .NET {}: ReJIT after attach can crash it (runtime issue #112636, fixed from 10.0 preview 7 by runtime PR #117765)",
                    rt.version_string
                )),
                _ => Ok(()),
            }
        }
        _ => Err(format!("attach --count needs .NET 8 or 10 and later (this runtime is {}.{})", rt.major, rt.minor)),
    }
}

/// The words of an uncounted reason, for the log and the trace's messages.
fn why_text(reason: u8) -> &'static str {
    match reason {
        why::INTRINSIC => "intrinsic",
        why::UNPARSEABLE => "body not understood",
        why::NO_PROBE_TOKEN => "no metadata image",
        _ => "no IL body",
    }
}

/// A selected method definition.
struct Target {
    name: String,
    slot: u32,
    original: Vec<u8>,
    probed: Vec<u8>,
    /// `ReJITCompilationFinished` seen for the probed (0) and the reverted (1) version.
    compiled: [bool; 2],
}

/// `--count-top N`: at most this many methods.
pub(crate) const MAX_TOP: u32 = 1000;

/// `--count-top`: how many methods, chosen after how long a sampling window.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Top {
    pub(crate) n: u32,
    pub(crate) after: std::time::Duration,
}

pub(crate) struct AttachCounts {
    counts: Counts,
    filter: Filter,
    /// `--count-top`: the methods are chosen from the sampler's tally after a window, not by
    /// patterns at the start.
    top: Option<Top>,
    targets: Mutex<HashMap<(ModuleID, u32), Target>>,
    reverting: AtomicBool,
    /// The request that worked (`RequestReJITWithInliners` or `RequestReJIT`), for the revert.
    api: Mutex<Option<&'static str>>,
}

impl AttachCounts {
    pub(crate) fn new(
        include: &[String],
        exclude: &[String],
        top: Option<Top>,
    ) -> Option<(AttachCounts, clrprof_trace::CountInfo)> {
        let (counts, mut info) = Counts::new(include, exclude, true)?;
        info.scope = "attach".into();
        let me = AttachCounts {
            counts,
            filter: Filter::new(include, exclude),
            top,
            targets: Mutex::new(HashMap::new()),
            reverting: AtomicBool::new(false),
            api: Mutex::new(None),
        };
        Some((me, info))
    }

    /// Writes the calls counted since the last round (writer thread).
    pub(crate) fn publish(&self, w: &Writer, now_ns: u64) {
        self.counts.publish(w, now_ns);
    }

    /// `--count-top`, when given.
    pub(crate) fn top(&self) -> Option<Top> {
        self.top
    }

    /// Patterns: selects, probes and rejits (the control thread, before the session says it
    /// started). `--count-top`: nothing yet ([`AttachCounts::start_top`] after the window).
    pub(crate) fn start(&self, s: &Context) {
        let t0 = std::time::Instant::now();
        if let Err(e) = s.info.initialize_current_thread() {
            log_warn!("count: {e}");
        }
        if let Some(top) = self.top {
            let text = format!(
                "attach --count-top {}: the methods are chosen from the CPU samples of the first {} ms of the session",
                top.n,
                top.after.as_millis()
            );
            log_info!("{text}");
            s.emit(Message { ts: s.now(), level: 0, text });
            return;
        }
        let selected = self.select(s);
        self.rejit(s, selected, t0, "matched the patterns");
    }

    /// `--count-top N`, at the end of the sampling window (the control thread): the N method
    /// definitions with the most self samples in `tally` (the innermost managed frame's; a generic
    /// definition's instantiations summed) that can be counted, probed and rejitted as
    /// [`AttachCounts::start`] does with patterns. Hot methods that cannot be counted (no metadata,
    /// intrinsics, no IL body or one not understood) are passed over and listed uncounted.
    pub(crate) fn start_top(&self, s: &Context, tally: Option<crate::sampler::Tally>) {
        let t0 = std::time::Instant::now();
        let Some(top) = self.top else { return };
        let Some(tally) = tally else {
            let text = "attach --count-top: no sampler, no samples to choose from; nothing is counted".to_string();
            log_warn!("{text}");
            s.emit(Message { ts: s.now(), level: 2, text });
            return;
        };
        // By method definition: (module, token) → samples, one of its FunctionIDs.
        let mut defs: HashMap<(ModuleID, u32), (u64, FunctionID)> = HashMap::new();
        for (&f, &n) in &tally.samples {
            let Ok((_, module, token)) = s.info.get_function_info(f as FunctionID) else { continue };
            // No MethodDef (IL stubs, dynamic methods): nothing to rejit.
            if token >> 24 != 0x06 || module == 0 {
                continue;
            }
            let e = defs.entry((module, token)).or_insert((0, f as FunctionID));
            e.0 += n;
        }
        let mut ranked: Vec<((ModuleID, u32), (u64, FunctionID))> = defs.into_iter().collect();
        ranked.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
        let (mut selected, mut chosen, mut passed) = (Vec::new(), Vec::new(), Vec::new());
        // The hottest first; a hundred more than asked for at most when some cannot be counted.
        for ((module, token), (n, f)) in ranked.into_iter().take(top.n as usize + 100) {
            if chosen.len() >= top.n as usize {
                break;
            }
            let name = s.names.method_def_name(module, token).unwrap_or_else(|| s.function_names(f).name.clone());
            let reason = self.countable(s, module, token, &name);
            if reason == why::COUNTED {
                chosen.push(format!("{name} ({n})"));
            } else {
                passed.push(format!("{name} ({n}, {})", why_text(reason)));
            }
            selected.push((module, token, name, reason));
        }
        let text = format!(
            "attach --count-top {}: after {} ms, the methods with the most CPU samples (self, innermost managed frame; {} samples in managed code): {}{}",
            top.n,
            top.after.as_millis(),
            tally.managed,
            if chosen.is_empty() { "none".to_string() } else { chosen.join(", ") },
            if passed.is_empty() { String::new() } else { format!("; passed over, not countable: {}", passed.join(", ")) }
        );
        log_info!("{text}");
        s.emit(Message { ts: s.now(), level: 0, text });
        self.rejit(s, selected, t0, "had the most samples");
    }

    /// Whether a method definition can be counted ([`why::COUNTED`]), and if not why: it has
    /// metadata, is not one of CoreLib's intrinsics, and has an IL body [`crate::il`] understands.
    fn countable(&self, s: &Context, module: ModuleID, token: u32, name: &str) -> u8 {
        let Some(md) = s.names.module_metadata(module) else { return why::NO_PROBE_TOKEN };
        // Dynamic and collectible modules have no image: no probe reference can be made there.
        let Some(image) = md.image() else { return why::NO_PROBE_TOKEN };
        let assembly = s.info.module_assembly_name(module).unwrap_or_default();
        let method = image.method(token).map(|m| m.1).unwrap_or_default();
        let class = name.rfind(&format!(".{method}")).map(|p| &name[..p]).unwrap_or("");
        if Intrinsics::of(&assembly, Some(image)).contains(class, token, Some(image)) {
            return why::INTRINSIC;
        }
        match s.info.get_il_function_body(module, token) {
            Ok(Some(body)) if crate::il::prepend(body, &crate::count::probe(0, 0), 1).is_ok() => why::COUNTED,
            Ok(Some(_)) => why::UNPARSEABLE,
            _ => why::REFUSED,
        }
    }

    /// Probes and rejits the `selected` methods (`why::COUNTED`; the others are listed
    /// uncounted), `what` saying how they were chosen.
    fn rejit(&self, s: &Context, selected: Vec<(ModuleID, u32, String, u8)>, t0: std::time::Instant, what: &str) {
        let matched = selected.len();
        let (mut modules, mut tokens) = (Vec::new(), Vec::new());
        let mut touched = std::collections::BTreeSet::new();
        {
            let Ok(mut targets) = self.targets.lock() else { return };
            for (module, token, name, reason) in selected {
                if reason != why::COUNTED {
                    s.emit(CountMethod { function: 0, module: module as u64, token, slot: u32::MAX, reason, name });
                    continue;
                }
                let Ok(Some(body)) = s.info.get_il_function_body(module, token) else { continue };
                let (slot, reason, target) = match self.counts.attach_probe(s, module, token) {
                    Err(reason) => (u32::MAX, reason, None),
                    Ok((slot, probe)) => match crate::il::prepend(body, &probe, 1) {
                        Ok(probed) => (
                            slot,
                            why::COUNTED,
                            Some(Target {
                                name: name.clone(),
                                slot,
                                original: body.to_vec(),
                                probed,
                                compiled: [false; 2],
                            }),
                        ),
                        Err(e) => {
                            log_info!("count: {name} left alone: {e}");
                            (u32::MAX, why::UNPARSEABLE, None)
                        }
                    },
                };
                s.emit(CountMethod { function: 0, module: module as u64, token, slot, reason, name });
                if let Some(t) = target {
                    targets.insert((module, token), t);
                    modules.push(module);
                    tokens.push(token);
                    touched.insert(module);
                }
            }
        }
        // The MemberRef to Interlocked.Increment was made after attach: publish it.
        for &m in &touched {
            if let Err(e) = s.info.apply_metadata(m) {
                log_warn!("count: module 0x{m:x}: {e}");
            }
        }
        if modules.is_empty() {
            let text = match matched {
                0 if self.top.is_some() => "attach --count: no method had samples; nothing is counted".to_string(),
                0 => "attach --count: no method matched the patterns; nothing is counted".to_string(),
                n => format!("attach --count: none of the {n} methods that {what} can be counted (listed uncounted, with the reason); nothing is counted"),
            };
            log_warn!("{text}");
            s.emit(Message { ts: s.now(), level: 1, text });
            return;
        }
        let api = self.request(s, &modules, &tokens);
        let text = match api {
            Some(api) => format!(
                "attach --count: ReJIT of {} methods requested through {api} at {} ns (returned after {} µs); every call that starts after that runs the probed IL and is counted",
                modules.len(),
                s.now(),
                t0.elapsed().as_micros()
            ),
            None => "attach --count: the runtime refused the ReJIT request; nothing is counted".to_string(),
        };
        log_info!("{text}");
        s.emit(Message { ts: s.now(), level: if api.is_some() { 0 } else { 2 }, text });
        if let Ok(mut a) = self.api.lock() {
            *a = api;
        }
    }

    /// Every method definition the patterns select, with its name (`Ns.Type.Method`) and
    /// [`why::COUNTED`], or [`why::INTRINSIC`] for one that must stay uncounted ([`Intrinsics`]).
    fn select(&self, s: &Context) -> Vec<(ModuleID, u32, String, u8)> {
        let mut out = Vec::new();
        let modules = s.info.enum_modules().unwrap_or_default();
        for m in modules {
            let Ok((_, _, asm)) = s.info.get_module_info(m) else { continue };
            let assembly = s.info.get_assembly_info(asm).map(|a| a.0).unwrap_or_default();
            let Some(md) = s.names.module_metadata(m) else { continue };
            let Some(image) = md.image() else { continue };
            let intrinsics = Intrinsics::of(&assembly, Some(image));
            for rid in 1..=image.method_count() {
                let token = 0x0600_0000 | rid;
                let Some((_, method, ..)) = image.method(token) else { continue };
                let Some(full) = s.names.method_def_name(m, token) else { continue };
                let class = full.rfind(&format!(".{method}")).map(|p| &full[..p]).unwrap_or("");
                if !self.filter.matches(&full, class, &assembly) {
                    continue;
                }
                if out.len() >= MAX_METHODS {
                    log_warn!("count: more than {MAX_METHODS} methods match; the rest are not counted");
                    return out;
                }
                let reason = if intrinsics.contains(class, token, Some(image)) { why::INTRINSIC } else { why::COUNTED };
                out.push((m, token, full, reason));
            }
        }
        out
    }

    /// `RequestReJITWithInliners(BLOCK_INLINING)`, else `RequestReJIT`: the one that worked.
    fn request(&self, s: &Context, modules: &[ModuleID], tokens: &[u32]) -> Option<&'static str> {
        match s.info.request_rejit_with_inliners(rejit_flags::BLOCK_INLINING, modules, tokens) {
            Ok(()) => return Some("RequestReJITWithInliners"),
            Err(e) => log_warn!("count: {e}; falling back to RequestReJIT (methods that inlined a counted one keep their uncounted copy)"),
        }
        match s.info.request_rejit(modules, tokens) {
            Ok(()) => Some("RequestReJIT"),
            Err(e) => {
                log_warn!("count: {e}");
                None
            }
        }
    }

    /// The end of the session: the original bodies back, through the request that worked.
    pub(crate) fn revert(&self, s: &Context) {
        let Some(api) = self.api.lock().ok().and_then(|a| *a) else { return };
        let (modules, tokens): (Vec<ModuleID>, Vec<u32>) = match self.targets.lock() {
            Ok(t) => t.keys().copied().unzip(),
            Err(_) => return,
        };
        self.reverting.store(true, Ordering::Release);
        let r = if api == "RequestReJITWithInliners" {
            s.info.request_rejit_with_inliners(rejit_flags::BLOCK_INLINING, &modules, &tokens)
        } else {
            s.info.request_rejit(&modules, &tokens)
        };
        let text = match r {
            Ok(()) => format!(
                "attach --count: original IL of {} methods requested back through {api} at {} ns; calls that start after it are not counted",
                modules.len(),
                s.now()
            ),
            Err(e) => format!("attach --count: the revert was refused ({e}): the probes stay, counting into memory nobody reads"),
        };
        log_info!("{text}");
        s.emit(Message { ts: s.now(), level: if r.is_ok() { 0 } else { 2 }, text });
    }

    /// `GetReJITParameters`: the probed body, or the original one when reverting.
    pub(crate) fn parameters(&self, module: ModuleID, token: u32, control: FunctionControl) {
        let reverting = self.reverting.load(Ordering::Acquire);
        let Ok(targets) = self.targets.lock() else { return };
        let Some(t) = targets.get(&(module, token)) else { return };
        let body = if reverting { &t.original } else { &t.probed };
        if let Err(e) = control.set_il_function_body(body) {
            log_warn!("count: {}: {e}", t.name);
        }
    }

    /// `ReJITCompilationFinished`: said once per method and phase, with the time.
    pub(crate) fn compiled(&self, s: &Context, id: FunctionID, hr: i32) {
        let Ok((_, module, token)) = s.info.get_function_info(id) else { return };
        let phase = self.reverting.load(Ordering::Acquire) as usize;
        let Ok(mut targets) = self.targets.lock() else { return };
        let Some(t) = targets.get_mut(&(module, token)) else { return };
        if t.compiled[phase] {
            return;
        }
        t.compiled[phase] = true;
        let what = if phase == 0 { "probed" } else { "original" };
        let text = if hr >= 0 {
            format!("attach --count: {}: code from its {what} IL compiled at {} ns", t.name, s.now())
        } else {
            format!("attach --count: {}: compiling its {what} IL failed (HRESULT 0x{:08X})", t.name, hr as u32)
        };
        // Said again with the function, whose module the trace knows (the first said none); the
        // name only when the function's own differs (a generic definition), as `record --count` does.
        let counted = (phase == 0).then(|| (t.slot, t.name.clone()));
        drop(targets);
        let counted = counted.map(|(slot, name)| {
            let own = s.function_names(id).name == name;
            CountMethod {
                function: id as u64,
                module: module as u64,
                token,
                slot,
                reason: why::COUNTED,
                name: if own { String::new() } else { name },
            }
        });
        if let Some(c) = counted {
            s.emit(c);
        }
        s.emit(Message { ts: s.now(), level: if hr >= 0 { 0 } else { 2 }, text });
    }

    /// `ReJITError`.
    pub(crate) fn error(&self, s: &Context, module: ModuleID, token: u32, hr: i32) {
        let name = self.targets.lock().ok().and_then(|t| t.get(&(module, token)).map(|t| t.name.clone()));
        let text = format!(
            "attach --count: ReJIT of {} failed (HRESULT 0x{:08X})",
            name.unwrap_or_else(|| format!("0x{token:08x}")),
            hr as u32
        );
        log_warn!("{text}");
        s.emit(Message { ts: s.now(), level: 2, text });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(major: u16, v: &str) -> RuntimeInfo {
        RuntimeInfo { major, version_string: v.into(), ..Default::default() }
    }

    #[test]
    fn rejit_after_attach_is_allowed_on_8_and_10_only() {
        assert!(runtime_allows_rejit(&rt(8, "8.0.22")).is_ok());
        assert!(runtime_allows_rejit(&rt(9, "9.0.11")).unwrap_err().contains("#117765"));
        assert!(runtime_allows_rejit(&rt(10, "10.0.12")).is_ok());
        assert!(runtime_allows_rejit(&rt(10, "10.0.0-preview.6.25358.103")).is_err());
        assert!(runtime_allows_rejit(&rt(10, "10.0.0-preview.7.25380.108")).is_ok());
        assert!(runtime_allows_rejit(&rt(11, "11.0.0")).is_ok());
        assert!(runtime_allows_rejit(&rt(7, "7.0.20")).is_err());
    }
}
