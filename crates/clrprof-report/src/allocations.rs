//! `--view allocations`: allocations by type and by allocation site, with each site's allocating
//! stack.

use clrprof_model::events::AllocEstimator;
use clrprof_model::Profile;

use super::text_table::{Align::*, TextTable};
use super::title;

/// Sites whose heaviest allocating stack is printed, and the frames printed of each.
const STACKS_SHOWN: usize = 10;
const STACK_FRAMES_SHOWN: usize = 12;

/// One line on how the allocation figures were obtained.
pub fn estimator_note(estimator: AllocEstimator, samples: u64) -> String {
    match estimator {
        AllocEstimator::None => "no allocations recorded".into(),
        AllocEstimator::Exact => format!(
            "exact counts: every object was counted (`--alloc exact`, which slows every allocation); \
             sites share each type's exact counts by the stacks of {samples} objects sampled by the agent \
             (one per 16 KiB allocated on average, each weighted by the inverse of its chance)"
        ),
        AllocEstimator::AllocationSampled => format!(
            "ESTIMATES from {samples} allocation samples (.NET 10 AllocationSampled: an object is sampled with \
             probability 1 - (1 - 1/102400)^size and stands for the inverse of that, an unbiased estimate); \
             COUNT and BYTES are upscaled, SAMPLES is what was seen"
        ),
        AllocEstimator::AllocationTick => format!(
            "ESTIMATES from {samples} AllocationTick events (before .NET 10: one per ~100 KiB allocated on a heap, \
             on the object that crossed the threshold): each stands for the bytes allocated since the previous tick \
             (its AllocationAmount), an object of 100 KiB or more for itself alone; \
             COUNT and BYTES are upscaled, SAMPLES is what was seen"
        ),
    }
}

/// One line on the samples the agent thinned (`CLRPROF_ALLOC_RATE`).
pub fn thinned_note(thinned: u64) -> String {
    format!(
        "{thinned} more samples were thinned by the agent to keep the trace's growth steady (CLRPROF_ALLOC_RATE: \
         the first 5,000 samples kept, then 100 a second by default): a sample kept one in N counts N times, \
         so the estimates stay unbiased"
    )
}

/// `top`: at most this many rows in each table (`--top`).
pub fn render(p: &Profile, top: Option<usize>) -> String {
    let shown = |n: usize| match top {
        Some(k) if k < n => format!("top {k} of {n}"),
        _ => n.to_string(),
    };
    let mut out = title(p, "allocations");
    let ev = &p.events;
    if ev.allocations.is_empty() {
        out += "\nno allocations recorded (record with `--alloc sampled` or `--alloc exact`)\n";
        return out;
    }
    out += &format!("\n{}\n", estimator_note(ev.alloc_estimator, ev.alloc_samples));
    if ev.alloc_thinned > 0 {
        out += &format!("{}\n", thinned_note(ev.alloc_thinned));
    }
    let mut t =
        TextTable::new(&[("COUNT", Right), ("BYTES", Right), ("SAMPLES", Right), ("KIND", Left), ("TYPE", Left)]);
    for a in ev.allocations.iter().take(top.unwrap_or(usize::MAX)) {
        t.row(vec![
            a.count.to_string(),
            a.bytes.to_string(),
            if a.exact { "-".into() } else { a.samples.to_string() },
            if a.exact { "exact".into() } else { "estimate".into() },
            a.type_name.clone(),
        ]);
    }
    out += &format!("\nby type ({})\n", shown(ev.allocations.len()));
    out += &t.render();
    if !ev.alloc_sites.is_empty() {
        let mut t = TextTable::new(&[
            ("EST COUNT", Right),
            ("EST BYTES", Right),
            ("SAMPLES", Right),
            ("TYPE", Left),
            ("ALLOCATED IN", Left),
        ]);
        for s in ev.alloc_sites.iter().take(top.unwrap_or(usize::MAX)) {
            t.row(vec![
                s.count.to_string(),
                s.bytes.to_string(),
                s.samples.to_string(),
                s.type_name.clone(),
                s.display(),
            ]);
        }
        let how = if ev.alloc_unweighted_walks {
            "recorded by an older clrprof, which walked the first 64 samples of each type and one in 32 after that \
             without saying so in the trace: the walked samples are scaled to their type's total (a site walked among \
             a type's first samples can read high, one walked later low)"
        } else if ev.alloc_exact {
            "the stacks of the agent's sampled objects share out each type's exact counts"
        } else {
            "the agent walks the stack of every sample while its walks take under 2% of a core (2 ms in each 100 ms), and beyond that of \
             the first 64 samples of each type, of every object of 85,000 bytes or more and of one in 32 of the \
             others (weighted by 32); the walked samples share out each type's estimate"
        };
        out += &format!(
            "\nby allocation site ({}): the first frame of the user's code on the allocating stack (not System.*, \
             Microsoft.*), via the library function it called; {how}; SAMPLES counts walked samples\n",
            shown(ev.alloc_sites.len())
        );
        out += &t.render();
        out += &format!(
            "\nallocating stacks (the heaviest stack of the first {} sites, innermost first)\n",
            STACKS_SHOWN.min(ev.alloc_sites.len())
        );
        for s in ev.alloc_sites.iter().take(STACKS_SHOWN) {
            out += &format!("\n{} {} bytes in {}\n", s.type_name, s.bytes, s.display());
            for f in s.stack.iter().take(STACK_FRAMES_SHOWN) {
                out += &format!("    {f}\n");
            }
            if s.stack.len() > STACK_FRAMES_SHOWN {
                out += &format!("    … {} more frames\n", s.stack.len() - STACK_FRAMES_SHOWN);
            }
        }
    } else if ev.alloc_exact {
        out += "\n(no allocation sites: this trace has exact counts by type only, recorded by a clrprof that kept \
                no stacks in `--alloc exact`)\n";
    }
    out
}
