//! What a query looks at: the weight (metric), the threads, display names of frames, functions
//! by name. One definition of each, used by every report, export and the viewer.

use std::collections::HashMap;

use clrprof_model::views::ThreadFilter;
use clrprof_model::{Cost, FrameId, FrameKind, Metric, Profile};
use serde::Serialize;

use crate::{QueryError, Result};

/// Self costs summed over every thread and stack of the profile.
pub fn totals(p: &Profile) -> Cost {
    totals_for(p, &Threads::all())
}

/// Self costs summed over the selected threads.
pub fn totals_for(p: &Profile, threads: &Threads) -> Cost {
    let mut total = Cost::default();
    for t in p.costs.threads.iter().filter(|t| threads.contains(t.os_tid)) {
        for c in t.costs.values() {
            total.add(c);
        }
    }
    total
}

/// The metric a view ranks by: the one asked for, else the first the profile has data for
/// (instrumented time, then calls, sampled CPU, wall, allocations).
pub fn metric(p: &Profile, asked: Option<Metric>) -> Metric {
    if let Some(m) = asked {
        return m;
    }
    let total = totals(p);
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

/// True when the profile has instrumented or sampled costs (not only allocation samples).
pub fn has_time_or_call_costs(p: &Profile) -> bool {
    p.costs
        .threads
        .iter()
        .any(|t| t.costs.values().any(|c| c.calls > 0 || c.time_ns > 0 || c.cpu_samples > 0 || c.wall_samples > 0))
}

/// True for metrics whose unit is nanoseconds.
pub fn is_time(m: Metric) -> bool {
    matches!(m, Metric::Time | Metric::Cpu | Metric::Wall)
}

/// True for the exact metrics of enter/leave instrumentation.
pub fn is_instrumented(m: Metric) -> bool {
    matches!(m, Metric::Time | Metric::Calls)
}

/// How many samples (or calls, or objects) stand behind a cost for a metric, and the metric's
/// amount: (count, value).
pub fn measure(m: Metric, c: &Cost) -> (u64, u64) {
    match m {
        Metric::Cpu => (c.cpu_samples, c.cpu_ns),
        Metric::Wall => (c.wall_samples, c.wall_ns),
        Metric::Time => (c.calls, c.time_ns),
        Metric::Calls => (c.calls, c.calls),
        Metric::AllocBytes => (c.alloc_count, c.alloc_bytes),
        Metric::AllocCount => (c.alloc_count, c.alloc_count),
    }
}

/// One line saying what the numbers are and what shaped them.
pub fn weight_note(p: &Profile, m: Metric) -> String {
    let total = totals(p);
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

/// A selection of threads by OS tid: all of them, or a list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Threads(Option<Vec<u32>>);

impl Threads {
    pub fn all() -> Threads {
        Threads(None)
    }

    pub fn only(tids: Vec<u32>) -> Threads {
        Threads(Some(tids))
    }

    /// One thread.
    pub fn one(tid: u32) -> Threads {
        Threads(Some(vec![tid]))
    }

    pub fn is_all(&self) -> bool {
        self.0.is_none()
    }

    /// The selected OS tids, `None` for all.
    pub fn tids(&self) -> Option<&[u32]> {
        self.0.as_deref()
    }

    pub fn contains(&self, tid: u32) -> bool {
        self.0.as_ref().is_none_or(|v| v.contains(&tid))
    }

    /// Runs `f` with the model's thread filter for this selection.
    pub fn with_filter<R>(&self, f: impl FnOnce(ThreadFilter<'_>) -> R) -> R {
        match &self.0 {
            None => f(None),
            Some(v) => f(Some(&|t| v.contains(&t))),
        }
    }

    /// Resolves `--thread`: an OS tid, a runtime ThreadID (`0x…`) or a thread name (any name the
    /// thread had). Only threads with data count; `None` selects all threads.
    pub fn resolve(p: &Profile, spec: Option<&str>) -> Result<Threads> {
        let Some(spec) = spec else { return Ok(Threads::all()) };
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
            let list: Vec<String> = known.iter().map(|&t| thread_label(p, t)).collect();
            return Err(QueryError::NoSuchThread { spec: spec.to_string(), known: list.join(", ") });
        }
        Ok(Threads::only(tids))
    }
}

/// Thread label for per-thread output: `tid (name)`.
pub fn thread_label(p: &Profile, tid: u32) -> String {
    match p.thread_by_os_tid(tid).map(|t| t.name.as_str()).filter(|n| !n.is_empty()) {
        Some(n) => format!("{tid} ({n})"),
        None => tid.to_string(),
    }
}

/// A thread's last name, empty when never named.
pub fn thread_name(p: &Profile, tid: u32) -> String {
    p.thread_by_os_tid(tid).map(|t| t.name.clone()).unwrap_or_default()
}

/// The thread groups a view shows: one per selected thread with data when `by_thread`, else one
/// merged group (`None`).
pub fn thread_groups(p: &Profile, by_thread: bool, threads: &Threads) -> Vec<Option<u32>> {
    if by_thread {
        p.costs.threads.iter().map(|t| t.os_tid).filter(|&t| threads.contains(t)).map(Some).collect()
    } else {
        vec![None]
    }
}

/// The selection a group stands for: its one thread, or the whole selection when merged.
pub fn group_threads(group: Option<u32>, threads: &Threads) -> Threads {
    match group {
        Some(t) => Threads::one(t),
        None => threads.clone(),
    }
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

/// Frames the user named: exact display or base name, else a unique case-insensitive substring
/// (all frames of that one function: overloads, instantiations).
pub fn find_functions(p: &Profile, names: &[String], wanted: &str) -> Result<Vec<FrameId>> {
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
        0 => Err(QueryError::NoSuchFunction(wanted.to_string())),
        1 => Ok(partial.into_iter().map(|i| FrameId(i as u32)).collect()),
        n => {
            let shown: Vec<&str> = distinct.iter().take(10).copied().collect();
            Err(QueryError::AmbiguousFunction {
                wanted: wanted.to_string(),
                count: n,
                shown: format!("{}{}", shown.join(", "), if n > 10 { ", ..." } else { "" }),
            })
        }
    }
}

/// A command line short enough for a header: whole when it fits in [`SHORT_COMMAND`] characters,
/// else its first words (at least the program and, for `dotnet app.dll`, the assembly) and how
/// many arguments were left out: `dotnet /sdk/Roslyn/bincore/csc.dll … (170 more arguments)`.
pub fn short_command(command: &str) -> String {
    if command.chars().count() <= SHORT_COMMAND {
        return command.to_string();
    }
    let words: Vec<&str> = command.split_whitespace().collect();
    let mut kept = 0;
    let mut len = 0;
    for (i, w) in words.iter().enumerate() {
        let n = w.chars().count() + usize::from(i > 0);
        if i >= 2 && len + n > SHORT_COMMAND {
            break;
        }
        len += n;
        kept = i + 1;
    }
    let more = words.len() - kept;
    let head = words[..kept].join(" ");
    match more {
        0 => head,
        1 => format!("{head} … (1 more argument)"),
        n => format!("{head} … ({n} more arguments)"),
    }
}

/// Characters of a command line shown in headers and titles.
pub const SHORT_COMMAND: usize = 120;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_command_lines_are_shortened_with_a_count() {
        assert_eq!(short_command("dotnet app.dll --port 80"), "dotnet app.dll --port 80");
        let args: Vec<String> = (0..170).map(|i| format!("/src/file{i}.cs")).collect();
        let cmd = format!("dotnet /usr/share/dotnet/sdk/10.0.401/Roslyn/bincore/csc.dll {}", args.join(" "));
        let s = short_command(&cmd);
        assert!(s.starts_with("dotnet /usr/share/dotnet/sdk/10.0.401/Roslyn/bincore/csc.dll /src/file0.cs"), "{s}");
        assert!(s.chars().count() <= SHORT_COMMAND + 30, "{s}");
        let shown = s.split(" … ").next().unwrap().split_whitespace().count();
        assert!(s.ends_with(&format!(" … ({} more arguments)", 172 - shown)), "{s}");
        // The program and the assembly are kept however long they are.
        let long = format!("dotnet /{}/app.dll a b", "x".repeat(200));
        assert_eq!(short_command(&long), format!("dotnet /{}/app.dll … (2 more arguments)", "x".repeat(200)));
    }
}
