//! What a cost view looks at: the weight (metric), the threads, display names of frames.

use std::collections::HashMap;

use anyhow::{bail, Result};
use clrprof_model::{Cost, FrameId, FrameKind, Metric, Profile};

/// The metric a view ranks by: the one asked for, else the first the profile has data for
/// (instrumented time, then sampled CPU, wall, allocations).
pub fn metric(p: &Profile, asked: Option<Metric>) -> Metric {
    if let Some(m) = asked {
        return m;
    }
    let mut total = Cost::default();
    for t in &p.costs.threads {
        for c in t.costs.values() {
            total.add(c);
        }
    }
    if total.time_ns > 0 {
        Metric::Time
    } else if total.calls > 0 {
        // Instrumented with --counts-only: no times, exact counts.
        Metric::Calls
    } else if total.cpu_samples > 0 {
        Metric::Cpu
    } else if total.wall_samples > 0 {
        Metric::Wall
    } else if total.alloc_bytes > 0 {
        Metric::AllocBytes
    } else {
        Metric::Time
    }
}

/// True for metrics whose unit is nanoseconds.
pub fn is_time(m: Metric) -> bool {
    matches!(m, Metric::Time | Metric::Cpu | Metric::Wall)
}

/// One line saying what the numbers are and what shaped them.
pub fn weight_note(p: &Profile, m: Metric) -> String {
    let mut total = Cost::default();
    for t in &p.costs.threads {
        for c in t.costs.values() {
            total.add(c);
        }
    }
    match m {
        Metric::Time | Metric::Calls => {
            let mut s = format!("weight: {} — exact, from enter/leave hooks", m.name());
            if let Some(i) = &p.instrumentation {
                s += &format!(
                    "; inlining {}; ReadyToRun code {}; tiered compilation {}; profiler time {}",
                    if i.inlining_disabled {
                        "disabled (every call counted)"
                    } else {
                        "enabled (inlined calls are not seen)"
                    },
                    if i.ready_to_run_ignored {
                        "ignored (framework code is JIT-compiled under the hooks)"
                    } else {
                        "used"
                    },
                    if i.tiering_disabled { "disabled" } else { "enabled" },
                    if i.profiler_time_subtracted { "subtracted from exclusive time" } else { "included" },
                );
            }
            s
        }
        Metric::Cpu => format!(
            "weight: cpu — sampled on-CPU time, {} samples ({} Hz requested per thread, {:.1} Hz delivered)",
            total.cpu_samples,
            p.sampling.cpu_rate_hz,
            p.sampling.effective_cpu_rate()
        ),
        Metric::Wall => {
            format!("weight: wall — sampled thread time (running or blocked), {} samples", total.wall_samples)
        }
        Metric::AllocBytes => "weight: alloc-bytes — allocated bytes".to_string(),
        Metric::AllocCount => "weight: alloc-count — allocated objects".to_string(),
    }
}

/// Resolves `--thread`: an OS tid, a runtime ThreadID (`0x…`) or a thread name.
pub fn threads(p: &Profile, spec: Option<&str>) -> Result<Option<Vec<u32>>> {
    let Some(spec) = spec else { return Ok(None) };
    let spec = spec.trim();
    let mut tids: Vec<u32> = Vec::new();
    if let Ok(n) = spec.parse::<u32>() {
        tids.push(n);
    } else if let Some(hex) = spec.strip_prefix("0x") {
        if let Ok(id) = u64::from_str_radix(hex, 16) {
            tids.extend(p.threads.iter().filter(|t| t.id == id).filter_map(|t| t.os_tid));
        }
    } else {
        tids.extend(p.threads.iter().filter(|t| t.names.iter().any(|(_, n)| n == spec)).filter_map(|t| t.os_tid));
    }
    let known: Vec<u32> = p.costs.threads.iter().map(|t| t.os_tid).collect();
    tids.retain(|t| known.contains(t));
    if tids.is_empty() {
        let list: Vec<String> = p
            .costs
            .threads
            .iter()
            .map(|t| {
                let name = p.thread_by_os_tid(t.os_tid).map(|th| th.name.as_str()).unwrap_or("");
                if name.is_empty() {
                    t.os_tid.to_string()
                } else {
                    format!("{} ({name})", t.os_tid)
                }
            })
            .collect();
        bail!("no thread with data matches '{spec}'; threads: {}", list.join(", "));
    }
    Ok(Some(tids))
}

/// Display name per frame; overloads that share a name get their parameter list appended.
pub fn display_names(p: &Profile) -> Vec<String> {
    let frames = &p.costs.stacks.frames;
    let mut count: HashMap<&str, usize> = HashMap::new();
    for f in frames {
        *count.entry(f.name.as_str()).or_default() += 1;
    }
    frames
        .iter()
        .map(|f| {
            if f.kind == FrameKind::Managed
                && count.get(f.name.as_str()).copied().unwrap_or(0) > 1
                && !f.signature.is_empty()
            {
                let params = f.signature.find(" (").map(|i| &f.signature[i + 1..]).unwrap_or(&f.signature);
                format!("{}{params}", f.name)
            } else {
                f.name.clone()
            }
        })
        .collect()
}

/// Frames the user named with `--function`: exact display or base name, else a unique substring.
pub fn frames_named(p: &Profile, names: &[String], wanted: &str) -> Result<Vec<FrameId>> {
    let frames = &p.costs.stacks.frames;
    let exact: Vec<FrameId> = (0..frames.len())
        .filter(|&i| names[i] == wanted || frames[i].name == wanted)
        .map(|i| FrameId(i as u32))
        .collect();
    if !exact.is_empty() {
        return Ok(exact);
    }
    let lower = wanted.to_lowercase();
    let partial: Vec<usize> = (0..frames.len()).filter(|&i| names[i].to_lowercase().contains(&lower)).collect();
    let mut distinct: Vec<&str> = partial.iter().map(|&i| frames[i].name.as_str()).collect();
    distinct.sort();
    distinct.dedup();
    match distinct.len() {
        0 => bail!("no function named '{wanted}' has data in this profile"),
        1 => Ok(partial.into_iter().map(|i| FrameId(i as u32)).collect()),
        n => {
            let shown: Vec<&str> = distinct.iter().take(10).copied().collect();
            bail!(
                "'{wanted}' matches {n} functions; be more specific: {}{}",
                shown.join(", "),
                if n > 10 { ", ..." } else { "" }
            )
        }
    }
}

/// Formats a metric value: ms for times, plain counts otherwise.
pub fn fmt_value(m: Metric, v: u64) -> String {
    if is_time(m) {
        super::ms(v)
    } else {
        v.to_string()
    }
}

pub fn percent(part: u64, total: u64) -> String {
    if total == 0 {
        "0.0".into()
    } else {
        format!("{:.1}", part as f64 * 100.0 / total as f64)
    }
}

/// Thread label for per-thread output: `tid (name)`.
pub fn thread_label(p: &Profile, tid: u32) -> String {
    match p.thread_by_os_tid(tid).map(|t| t.name.as_str()).filter(|n| !n.is_empty()) {
        Some(n) => format!("{tid} ({n})"),
        None => tid.to_string(),
    }
}

/// The thread groups a view prints: one per selected thread with `--by-thread`, else one merged
/// group (`None`).
pub fn thread_groups(p: &Profile, by_thread: bool, selected: &Option<Vec<u32>>) -> Vec<Option<u32>> {
    if by_thread {
        p.costs
            .threads
            .iter()
            .map(|t| t.os_tid)
            .filter(|t| selected.as_ref().map(|s| s.contains(t)).unwrap_or(true))
            .map(Some)
            .collect()
    } else {
        vec![None]
    }
}
