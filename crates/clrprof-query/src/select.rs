//! What a query looks at: the weight (metric), the threads, display names of frames, functions
//! by name. One definition of each, used by every report, export and the viewer.

use std::collections::HashMap;

use crate::engine::ThreadFilter;
use clrprof_model::{Cost, FrameId, FrameKind, Metric, Profile, StackId};
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
            total.add(&c);
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

/// True for metrics whose unit is nanoseconds ([`Metric::is_time`]).
pub fn is_time(m: Metric) -> bool {
    m.is_time()
}

/// True for the exact metrics of enter/leave instrumentation ([`Metric::is_instrumented`]).
pub fn is_instrumented(m: Metric) -> bool {
    m.is_instrumented()
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
        // Not in costs: see [`event_stacks`].
        Metric::Exceptions | Metric::LockWait => (0, 0),
    }
}

/// One line saying what the numbers are and what shaped them.
pub fn weight_note(p: &Profile, m: Metric) -> String {
    let total = totals(p);
    match m {
        Metric::Time | Metric::Calls => {
            let mut s = match &p.instrumentation {
                Some(i) if i.il_probes && i.count_scope == "attach" => {
                    return format!(
                        "weight: {} — exact call counts per method definition, from IL probes set by ReJIT after \
                         attach (attach --count): calls from the ReJIT request to the revert (see the agent's \
                         messages for the times), the counted methods not inlined meanwhile, no times; \
                         {} methods counted, {} uncounted",
                        m.name(),
                        i.hooked_functions,
                        i.uncounted.len()
                    )
                }
                Some(i) if i.il_probes => {
                    return format!(
                        "weight: {} — exact call counts per method definition, from IL probes (record --count): \
                         inlining enabled (inlined calls counted), ReadyToRun code used outside the scope, no times; \
                         {} methods counted, {} uncounted",
                        m.name(),
                        i.hooked_functions,
                        i.uncounted.len()
                    )
                }
                Some(_) => format!("weight: {} — exact, from enter/leave hooks", m.name()),
                // An imported instrumentation report: its profiler's counts and times, as the
                // profile's note tells how they were read.
                None => format!("weight: {} — as the imported report gives them", m.name()),
            };
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
        Metric::AllocBytes | Metric::AllocCount => alloc_note(p, m, total.alloc_count, total.alloc_bytes),
        Metric::Exceptions | Metric::LockWait => match event_stacks(p, m) {
            Some(w) => w.note,
            None => format!("weight: {} — none recorded", m.name()),
        },
    }
}

/// The note of the allocation weights: what the figures are, or why there are none.
fn alloc_note(p: &Profile, m: Metric, count: u64, bytes: u64) -> String {
    use clrprof_model::events::AllocEstimator as E;
    let what = if m == Metric::AllocCount { "allocated objects" } else { "allocated bytes" };
    let ev = &p.events;
    if count > 0 || bytes > 0 {
        let how = match ev.alloc_estimator {
            E::Exact => "exact counts by type, shared out over the stacks of sampled objects".to_string(),
            E::AllocationSampled => format!("estimated from {} AllocationSampled samples", ev.alloc_samples),
            E::AllocationTick => format!("estimated from {} AllocationTick events", ev.alloc_samples),
            E::None => "estimated".to_string(),
        };
        return format!("weight: {} — {what}, {how}, on the allocating stacks", m.name());
    }
    let why = if ev.allocations.is_empty() {
        "the trace has no allocation records (record with `--alloc sampled`, the default, or `--alloc exact`)"
    } else if ev.alloc_exact {
        "the trace counts allocations by type only (`--alloc exact` by a clrprof that kept no allocation stacks;          `--view allocations` has the counts): record again for the allocating stacks"
    } else {
        "no allocation sample of the trace has a stack (`--view allocations` has the counts by type)"
    };
    format!("weight: {} — none: {why}", m.name())
}

/// One stack of an event weight: `stack` (a stack of the profile's cost tree), or, when the
/// runtime gave none, a single frame named `leaf` (the throw site or the waiting site).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventStack {
    pub stack: Option<StackId>,
    pub leaf: String,
    /// Exceptions or contentions behind `value`.
    pub count: u64,
    /// Exceptions (count) or lock wait (ns).
    pub value: u64,
}

/// The stacks of an event weight over all threads (exceptions and contentions are aggregated per
/// stack, not per thread). Their values add up to the Events tables' totals exactly: the sum of
/// the exception groups' `thrown`, the sum of the contention sites' `count` and `wait_ns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventWeight {
    pub stacks: Vec<EventStack>,
    pub total: u64,
    pub count: u64,
    /// Part of the values are estimates: an exception storm sampled (the group's counts), or the
    /// agent walked only some throw stacks of a group (the group's exact count is spread over
    /// the stacks walked, in their proportions).
    pub estimated: bool,
    /// One line saying what the numbers are.
    pub note: String,
}

/// Splits `total` over `parts` in proportion (largest remainder: the results add up to `total`,
/// ties to the earlier part).
fn apportion(parts: &[u64], total: u64) -> Vec<u64> {
    let sum: u128 = parts.iter().map(|&n| n as u128).sum();
    if sum == 0 {
        return vec![0; parts.len()];
    }
    let mut out: Vec<u64> = Vec::with_capacity(parts.len());
    let mut rem: Vec<(u128, usize)> = Vec::with_capacity(parts.len());
    for (i, &n) in parts.iter().enumerate() {
        let x = n as u128 * total as u128;
        out.push((x / sum) as u64);
        rem.push((x % sum, i));
    }
    let mut left = total - out.iter().sum::<u64>();
    rem.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in rem {
        if left == 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    out
}

/// The stacks of [`Metric::Exceptions`] or [`Metric::LockWait`]; `None` for the other metrics.
pub fn event_stacks(p: &Profile, m: Metric) -> Option<EventWeight> {
    let mut stacks = Vec::new();
    let mut estimated = false;
    match m {
        Metric::Exceptions => {
            for g in &p.events.exceptions {
                let walked: Vec<u64> = g.stacks.iter().map(|s| s.1).collect();
                let leaf =
                    if g.throw_site.is_empty() { "[unknown throw site]".to_string() } else { g.throw_site.clone() };
                if walked.iter().sum::<u64>() == 0 {
                    // No stack walked (a damaged trace, or throws seen only as counts).
                    if g.thrown > 0 {
                        stacks.push(EventStack { stack: None, leaf, count: g.thrown, value: g.thrown });
                    }
                    estimated |= g.estimated;
                    continue;
                }
                estimated |= g.estimated || walked.iter().sum::<u64>() != g.thrown;
                for (&(sid, _), n) in g.stacks.iter().zip(apportion(&walked, g.thrown)) {
                    if n > 0 {
                        stacks.push(EventStack { stack: Some(sid), leaf: String::new(), count: n, value: n });
                    }
                }
            }
        }
        Metric::LockWait => {
            for s in &p.events.contentions {
                let (mut count, mut wait) = (0u64, 0u64);
                for (&(sid, n), &w) in s.stacks.iter().zip(&s.stack_wait_ns) {
                    count = count.saturating_add(n);
                    wait = wait.saturating_add(w);
                    stacks.push(EventStack { stack: Some(sid), leaf: String::new(), count: n, value: w });
                }
                // Contentions without a managed stack count at their site.
                let (rest_n, rest_w) = (s.count.saturating_sub(count), s.wait_ns.saturating_sub(wait));
                if rest_n > 0 || rest_w > 0 {
                    stacks.push(EventStack { stack: None, leaf: s.site.clone(), count: rest_n, value: rest_w });
                }
            }
        }
        _ => return None,
    }
    let total = stacks.iter().fold(0u64, |a, s| a.saturating_add(s.value));
    let count = stacks.iter().fold(0u64, |a, s| a.saturating_add(s.count));
    let note = match m {
        Metric::Exceptions if estimated => format!(
            "weight: exceptions — {total} thrown (the Exceptions table's total); ESTIMATED per stack: the agent \
             walks the first 32 throw stacks of each type and then one in 100{}, each group's count is spread \
             over its walked stacks; all threads",
            if p.events.exception_sampling.sampled { ", and an exception storm was sampled" } else { "" }
        ),
        Metric::Exceptions => {
            format!("weight: exceptions — {total} thrown, exact per throw stack (every stack walked); all threads")
        }
        _ => {
            format!("weight: lock-wait — Monitor lock wait, {count} contentions, exact per waiting stack; all threads")
        }
    };
    Some(EventWeight { stacks, total, count, estimated, note })
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
    let mut names = function_names(p);
    for (name, f) in names.iter_mut().zip(&p.costs.stacks.frames) {
        if let Some(l) = &f.line {
            *name = format!("{name} ({}:{})", file_name(&l.file), l.line);
        }
    }
    names
}

/// Display names of frames without their source line: in a profile built with lines, every line
/// of a function has this same name (overloads get their parameter list).
pub fn function_names(p: &Profile) -> Vec<String> {
    let frames = &p.costs.stacks.frames;
    let mut count: HashMap<&str, usize> = HashMap::new();
    // Distinct functions per name: a managed function counts once however many frames it has (in
    // a profile built with lines, one per line and one for the whole function); other frames
    // count each.
    let mut seen: std::collections::HashSet<u64> = Default::default();
    for f in frames {
        let new = match f.key {
            clrprof_model::FrameKey::Function(id) => seen.insert(id),
            _ => true,
        };
        if new {
            *count.entry(f.name.as_str()).or_default() += 1;
        }
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

/// The last component of a source file's path (`/src/app/Program.cs` → `Program.cs`; Windows
/// paths of PDBs built there too).
pub fn file_name(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
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
    fn apportion_keeps_the_total_and_the_proportions() {
        assert_eq!(apportion(&[32, 1, 1], 250), vec![235, 8, 7]);
        assert_eq!(apportion(&[1, 1, 1], 10), vec![4, 3, 3]);
        assert_eq!(apportion(&[5, 0], 5), vec![5, 0]);
        assert_eq!(apportion(&[0, 0], 7), vec![0, 0]);
        assert_eq!(
            apportion(&[u64::MAX, u64::MAX], u64::MAX).iter().map(|&x| x as u128).sum::<u128>(),
            u64::MAX as u128
        );
    }

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
