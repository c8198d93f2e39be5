//! Summaries of the runtime events: one definition of each total, used by the text views and the
//! JSON report alike.

use crate::SaturatingSum;
use clrprof_model::{Function, Profile};
use serde::Serialize;

/// Garbage collections in total.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GcTotals {
    pub count: usize,
    /// Collections of generation 0, 1 and 2.
    pub per_generation: [usize; 3],
    pub induced: usize,
    pub background: usize,
    /// Time inside at least one GC.
    pub time_in_gc_ns: u64,
    /// ... as a share of the profile's time span.
    pub time_in_gc_pct: f64,
    /// Time the runtime was suspended for GCs.
    pub pause_ns: u64,
    /// ... as a share of the span (the JSON report leaves it out: schema 1 has no such key).
    #[serde(skip)]
    pub pause_pct: f64,
    pub largest_pause_ns: u64,
}

pub fn gc_totals(p: &Profile) -> GcTotals {
    let gcs = &p.events.gcs;
    let (from, to) = p.span();
    let span = to.saturating_sub(from).max(1) as f64;
    // The union of GC windows within the span (a GC that began before a window counts for its part).
    let in_gc = p.events.time_in_gc_ns;
    let pause: u64 = gcs.iter().map(|g| g.pause_ns).saturating_sum();
    GcTotals {
        count: gcs.len(),
        per_generation: [0u8, 1, 2].map(|n| gcs.iter().filter(|g| g.generation == n).count()),
        induced: gcs.iter().filter(|g| g.induced).count(),
        background: gcs.iter().filter(|g| g.background == Some(true)).count(),
        time_in_gc_ns: in_gc,
        time_in_gc_pct: in_gc as f64 * 100.0 / span,
        pause_ns: pause,
        pause_pct: pause as f64 * 100.0 / span,
        largest_pause_ns: gcs.iter().map(|g| g.pause_ns).max().unwrap_or(0),
    }
}

/// Exceptions in total (estimates when the rate limit sampled a storm).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ExceptionTotals {
    /// Every throw, rethrows included.
    pub thrown: u64,
    pub rethrown: u64,
    pub caught: u64,
    pub uncaught: u64,
}

pub fn exception_totals(p: &Profile) -> ExceptionTotals {
    let ex = &p.events.exceptions;
    ExceptionTotals {
        thrown: ex.iter().map(|e| e.thrown).saturating_sum(),
        rethrown: ex.iter().map(|e| e.rethrown).saturating_sum(),
        caught: ex.iter().map(|e| e.caught).saturating_sum(),
        uncaught: ex.iter().map(|e| e.uncaught).saturating_sum(),
    }
}

/// JIT compilation in total; `methods` are the JIT-compiled (and dynamic) functions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JitTotals<'a> {
    #[serde(skip)]
    pub methods: Vec<&'a Function>,
    pub code_versions: u64,
    pub jit_ns: u64,
    pub native_bytes: u64,
    pub il_bytes: u64,
    /// Precompiled (ReadyToRun) methods used.
    pub precompiled: usize,
    pub assembly_load_ns: u64,
    pub module_load_ns: u64,
}

pub fn jit_totals(p: &Profile) -> JitTotals<'_> {
    let methods: Vec<&Function> = p
        .functions
        .iter()
        .filter(|f| !matches!(f.kind, clrprof_trace::code_kind::PRECOMPILED | clrprof_trace::code_kind::EXISTING))
        .collect();
    JitTotals {
        code_versions: methods.iter().map(|f| f.compilations as u64).saturating_sum(),
        jit_ns: methods.iter().map(|f| f.jit_ns).saturating_sum(),
        native_bytes: methods.iter().map(|f| f.code_size).saturating_sum(),
        il_bytes: methods.iter().map(|f| p.events.il_sizes.get(&f.id).copied().unwrap_or(0) as u64).saturating_sum(),
        precompiled: p.functions.len() - methods.len(),
        assembly_load_ns: p.assemblies.iter().map(|a| a.load_ns).saturating_sum(),
        module_load_ns: p.modules.iter().map(|m| m.load_ns).saturating_sum(),
        methods,
    }
}
