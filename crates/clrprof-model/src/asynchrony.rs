//! Logical async stacks and awaiting time, from the task library's events (`TaskEvents` records,
//! `record --async`): the join of the samples with the causality, after PerfView's
//! `ActivityComputer`.
//!
//! **The index** ([`AsyncIndex`]). Per thread, the task events cut time into nested *segments*
//! of work done for someone else: a continuation after an `await` (from `TaskWaitEnd(A)` to
//! `TaskWaitContinuationComplete(A)`, its origin the `TaskWaitBegin(A)` of the `await`, with the
//! awaiting stack), a task's delegate (`TaskStarted(T)` to `TaskCompleted(T)`, its origin the
//! `TaskScheduled(T)` of `Task.Run`/`StartNew`, with the creating stack), a scheduled continuation
//! (`TaskWaitContinuationStarted`/`Complete`, origin `AwaitTaskContinuationScheduled`). A
//! continuation run inline by the callee that completed (the resumed caller inside the callee's
//! `SetResult`) is a segment nested in the callee's. An `await` that ended is an [`AwaitSpan`]
//! from its `TaskWaitBegin` to its `TaskWaitEnd`.
//!
//! **Logical stacks** ([`TaskData::apply`]). A sample inside a segment continues its origin's
//! stack, itself made logical the same way (the origin's thread and time): for a continuation,
//! the awaiting stack down to the awaiting method's frame, then a marker frame
//! [`RESUMED`], then the sample's frames above the resumed method's frame (found after the cut of
//! the enclosing segment, so a caller resumed inside its callee is cut out of the callee); for a
//! task, the creating stack, the marker [`TASK`], then the sample's frames from its delegate on
//! (the thread pool's frames before it left out). State-machine frames `<LoadAsync>d__4.MoveNext`
//! are named as the async method (`Shop.Orders.LoadAsync`).
//!
//! **Awaiting time.** An `await` on an operation that is not itself an async method with frames of
//! its own (`Task.Delay`, I/O, a `TaskCompletionSource`) is time the logical call spends on no
//! thread: it is added as wall time (samples at the sampler's wall rate) under the awaiting
//! logical stack and a leaf frame `[await] <operation>`. An `await` of another async method adds
//! nothing itself: the callee's own frames (its CPU, its own awaits) account for that time, so
//! under the wall weight a logical call's frames add up to its CPU, blocked and awaiting time.
//!
//! **Idle.** Wall samples of threads parked waiting for work (the thread pool's workers and its
//! gate thread, the timer thread, the socket engine's event loop) go under a root frame
//! [`IDLE`] so that views can leave them out; so do those of the runtime's own threads that wait
//! in native code with no managed frame to walk (the finalizer, the tiered compilation worker:
//! named `.NET …` in the trace), as `[idle];[runtime wait] .NET Finalizer`.
//!
//! **Measured wall time of segments** ([`segment_wall`]): the wall samples joined to a segment get
//! the segment's time as its events measured it, split among their frames as sampled.
//!
//! **For the requests view** ([`AsyncIndex::flow_at`], [`AsyncIndex::awaits`]): the EventSource
//! activity id (`TasksFlowActivityIds`) a thread works for at a time, and each await with the
//! activity of its awaiting thread, so a request's activity (and the ids it flows into) names its
//! work and its awaiting time.

use std::collections::HashMap;

use clrprof_trace::tasks::{kind, TaskEvent};
use clrprof_trace::Record;

use crate::fasthash::FxHashMap;
use crate::profile::Profile;
use crate::samples::{SampleWeight, TimedSample, NOT_WALKABLE};
use crate::segment_wall;
use crate::stacks::{Cost, FrameId, FrameKey, StackId};

/// The marker frame where a stack crosses an `await` into the code it resumed.
pub const RESUMED: &str = "[resumed]";
/// The marker frame where a stack crosses into a task started by `Task.Run`/`StartNew`.
pub const TASK: &str = "[task]";
/// The leaf frame of awaiting time starts with this (`[await] Task.Delay`).
pub const AWAIT_PREFIX: &str = "[await] ";
/// The root frame of idle threads' wall samples.
pub const IDLE: &str = "[idle]";
/// Under [`IDLE`], the frame of a runtime thread that waits in native code, no managed frame to
/// walk (`[runtime wait] .NET Finalizer`).
pub const RUNTIME_WAIT: &str = "[runtime wait] ";
/// Deepest chain of origins followed (a guard against damaged traces).
const MAX_CHAIN: usize = 64;
/// The window of a thread's first sample record (its samples since the sampler started).
const WINDOW_NS: u64 = 1_000_000_000;
/// How far before its window a wall sample's stack may have been taken (the wall sampler charges
/// a running thread's time to its last CPU sample's stack).
const WALL_SLACK_NS: u64 = 250_000_000;
/// Most segments of a thread a sample's time window is matched against.
const MAX_CANDIDATES: usize = 512;

/// What the agent recorded of the task library, as read.
#[derive(Clone, Debug, Default)]
pub struct TaskData {
    events: Vec<TaskEvent>,
    /// `TaskEvents` records that could not be unpacked.
    damaged: u64,
}

impl TaskData {
    pub fn add(&mut self, r: &Record) {
        if let Record::TaskEvents(t) = r {
            match t.unpack() {
                Ok(v) => self.events.extend(v),
                Err(_) => self.damaged += 1,
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The index over the events.
    pub fn index(&self) -> AsyncIndex {
        AsyncIndex::build(self.events.clone())
    }

    /// Gives the samples of `p` their logical stacks, adds awaiting time and puts idle threads
    /// apart under [`IDLE`] — or leaves their wall samples out with `hide_idle` (see the module's
    /// header); with `logical` false only the index is kept on the profile (the stacks stay as
    /// sampled). Call once the frames are named.
    pub fn apply(&self, p: &mut Profile, logical: bool, hide_idle: bool) {
        if self.events.is_empty() {
            return;
        }
        if self.damaged > 0 {
            p.messages.push(format!(
                "{} TaskEvents records could not be read: logical stacks may be incomplete",
                self.damaged
            ));
        }
        let index = std::sync::Arc::new(self.index());
        p.asynchrony = Some(index.clone());
        if !logical {
            return;
        }
        let mut j = Join::new(&index, p);
        let samples = std::mem::take(&mut p.samples);
        let mut moved: Vec<(u32, StackId, StackId, Cost)> = Vec::new();
        let mut out = Vec::with_capacity(samples.len());
        // Per (thread, weight): the last time of its sample records before the current one.
        let mut rounds: FxHashMap<(u32, bool), (u64, u64)> = FxHashMap::default();
        let mut dropped: Vec<(u32, StackId, Cost)> = Vec::new();
        let mut joins: Vec<segment_wall::WallJoin> = Vec::new();
        // The runtime's own threads (named `.NET …` by it), whose walks find no managed frame
        // while they wait for work in native code: the finalizer, the tiered compilation worker.
        let runtime_waiters: FxHashMap<u32, String> = p
            .threads
            .iter()
            .filter(|t| t.name.starts_with(".NET "))
            .filter_map(|t| Some((t.os_tid?, t.name.clone())))
            .collect();
        let mut hidden: FxHashMap<u32, u64> = FxHashMap::default();
        for mut s in samples {
            let r = rounds.entry((s.os_tid, s.weight == SampleWeight::Cpu)).or_insert((0, s.ts));
            if r.1 != s.ts {
                *r = (r.1, s.ts);
            }
            let mut after = if r.1 == s.ts && r.0 == 0 { s.ts.saturating_sub(WINDOW_NS) } else { r.0 };
            if s.weight == SampleWeight::Wall {
                // A wall sample may carry the stack of the thread's last CPU sample, taken before.
                after = after.saturating_sub(WALL_SLACK_NS);
            }
            let frames = p.costs.stacks.frames_of(s.stack);
            let joined = j.logical_in(p, s.os_tid, after, s.ts, &frames);
            let class = joined.as_ref().and_then(|x| j.class_of(p, s.os_tid, x.1));
            let logical = joined.map(|x| x.0);
            let runtime_wait = runtime_waiters.get(&s.os_tid).filter(|_| is_not_walkable(p, &frames));
            let idle =
                logical.is_none() && s.weight == SampleWeight::Wall && (is_idle(p, &frames) || runtime_wait.is_some());
            if idle && hide_idle {
                *hidden.entry(s.os_tid).or_default() += s.ns;
                dropped.push((s.os_tid, s.stack, cost_of(&s)));
                continue;
            }
            if s.weight == SampleWeight::Wall {
                joins.push(segment_wall::WallJoin { sample: out.len(), os_tid: s.os_tid, class });
            }
            let logical = logical.or_else(|| {
                idle.then(|| {
                    let idle = p.costs.stacks.intern_frame(FrameKey::Label(IDLE.into()));
                    match runtime_wait {
                        Some(name) => {
                            let wait = p.costs.stacks.intern_frame(FrameKey::Label(format!("{RUNTIME_WAIT}{name}")));
                            vec![idle, wait]
                        }
                        None => std::iter::once(idle).chain(frames.iter().copied()).collect(),
                    }
                })
            });
            if let Some(l) = logical {
                if let Some(ls) = p.costs.stacks.intern_stack(&l) {
                    if ls != s.stack {
                        moved.push((s.os_tid, s.stack, ls, cost_of(&s)));
                        s.stack = ls;
                    }
                }
            }
            out.push(s);
        }
        for (tid, stack, c) in dropped {
            take_cost(p, tid, stack, &c);
        }
        for (tid, from, to, c) in moved {
            take_cost(p, tid, from, &c);
            p.costs.add(tid, to, &c);
        }
        // Each segment's wall time as its events measured it, within the profile's window.
        let range = p.range;
        let mut measured: FxHashMap<u32, u64> = FxHashMap::default();
        let tids: Vec<u32> = index.segments.keys().copied().collect();
        for tid in tids {
            for (seg, d) in index.exclusive_ns(tid, range.from, range.to).into_iter().enumerate() {
                if let (Some(d), Some(c)) = (d, j.class_of(p, tid, seg)) {
                    *measured.entry(c).or_default() += d;
                }
            }
        }
        let rate = p.sampling.wall_rate_hz.max(p.sampling.cpu_rate_hz) as u64;
        segment_wall::rescale(p, &mut out, &joins, &measured, &hidden, rate);
        // Awaiting time: wall samples at the sampler's wall rate under `[await] <operation>`.
        let mut carries: FxHashMap<StackId, u128> = FxHashMap::default();
        for a in index.awaits.iter().filter(|a| a.leaf) {
            let (start, end) = (a.start.max(range.from), a.end.min(range.to));
            if end <= start {
                continue;
            }
            let Some(prefix) = j.origin(p, a.begin, 0) else { continue };
            let leaf = p.costs.stacks.intern_frame(FrameKey::Label(format!("{AWAIT_PREFIX}{}", a.what)));
            let mut frames = prefix;
            frames.push(leaf);
            let Some(stack) = p.costs.stacks.intern_stack(&frames) else { continue };
            let ns = end - start;
            // Samples at the wall rate, the fractions carried from one await of the stack to the
            // next so that counts add up like the times.
            let carry = carries.entry(stack).or_insert(0u128);
            let due = *carry + ns as u128 * rate.max(1) as u128;
            *carry = due % 1_000_000_000;
            let count = (due / 1_000_000_000) as u32;
            if count == 0 && ns == 0 {
                continue;
            }
            let s = TimedSample { ts: start, os_tid: a.os_tid, stack, weight: SampleWeight::Wall, count, ns, flow: 0 };
            p.costs.add(a.os_tid, stack, &cost_of(&s));
            out.push(s);
        }
        out.sort_by_key(|s| (s.ts, s.os_tid));
        p.samples = out;
        rename_state_machines(p);
    }
}

pub(crate) fn cost_of(s: &TimedSample) -> Cost {
    match s.weight {
        SampleWeight::Cpu => Cost { cpu_samples: s.count as u64, cpu_ns: s.ns, ..Default::default() },
        SampleWeight::Wall => Cost { wall_samples: s.count as u64, wall_ns: s.ns, ..Default::default() },
    }
}

pub(crate) fn take_cost(p: &mut Profile, tid: u32, stack: StackId, c: &Cost) {
    let Some(t) = p.costs.threads.iter_mut().find(|t| t.os_tid == tid) else { return };
    if let Some(mut x) = t.costs.get(stack) {
        x.cpu_samples = x.cpu_samples.saturating_sub(c.cpu_samples);
        x.cpu_ns = x.cpu_ns.saturating_sub(c.cpu_ns);
        x.wall_samples = x.wall_samples.saturating_sub(c.wall_samples);
        x.wall_ns = x.wall_ns.saturating_sub(c.wall_ns);
        if x.is_zero() {
            t.costs.remove(stack);
        } else {
            t.costs.insert(stack, x);
        }
    }
}

/// Frames of the task library and the thread pool, which a logical stack leaves out where it
/// crosses from one thread's work to another's.
fn is_machinery(name: &str) -> bool {
    name.starts_with("System.Threading.")
        || name.starts_with("System.Runtime.CompilerServices.")
        || name.starts_with("System.Diagnostics.Tracing.")
}

/// Entry points of threads that wait for work between items: the thread pool's workers and gate
/// thread, the timer thread, the socket engine's event loop.
const IDLE_LOOPS: &[&str] = &[
    "System.Threading.PortableThreadPool+WorkerThread.WorkerThreadStart",
    "System.Threading.PortableThreadPool+GateThread.GateThreadStart",
    "System.Threading.TimerQueue.TimerThread",
    "System.Net.Sockets.SocketAsyncEngine.EventLoop",
    "System.Threading.PortableThreadPool+IOCompletionPoller.Poll",
];

/// Whether a sample's stack is only the [`NOT_WALKABLE`] label (no frame was walked).
fn is_not_walkable(p: &Profile, frames_root_first: &[FrameId]) -> bool {
    match frames_root_first {
        [] => true,
        [f] => p.costs.stacks.frames[f.0 as usize].name == NOT_WALKABLE,
        _ => false,
    }
}

/// Whether a wall sample's stack is a thread parked waiting for work: one of [`IDLE_LOOPS`],
/// not running a work item (no `ThreadPoolWorkQueue.Dispatch` frame), its innermost managed frame
/// a wait.
fn is_idle(p: &Profile, frames_root_first: &[FrameId]) -> bool {
    let frames = &p.costs.stacks.frames;
    let managed =
        || frames_root_first.iter().map(|f| &frames[f.0 as usize]).filter(|f| matches!(f.key, FrameKey::Function(_)));
    let in_loop = managed().any(|f| IDLE_LOOPS.iter().any(|l| f.name.starts_with(l)));
    let working = managed().any(|f| f.name.starts_with("System.Threading.ThreadPoolWorkQueue.Dispatch"));
    let waiting = managed().next_back().is_some_and(|f| f.name.contains("Wait") || f.name.contains("Poll"));
    in_loop && !working && waiting
}

/// `Shop.Orders+<LoadAsync>d__4.MoveNext` → `Shop.Orders.LoadAsync`; an async lambda's
/// `Shop.Program+<>c+<<Main>b__1_0>d.MoveNext` → `Shop.Program+<>c.<Main>b__1_0` (its stub's name).
pub fn async_method_name(frame: &str) -> Option<String> {
    let body = frame.strip_suffix(".MoveNext")?;
    if let Some(lambda) = body.strip_suffix(">d") {
        let at = lambda.rfind("+<<").or_else(|| lambda.rfind(".<<"))?;
        let (owner, method) = (&lambda[..at], &lambda[at + 2..]);
        return (!owner.is_empty() && !method.is_empty()).then(|| format!("{owner}.{method}"));
    }
    let open = body.rfind('<')?;
    let close = open + body[open..].find(">d__")?;
    let method = &body[open + 1..close];
    if method.is_empty() {
        return None;
    }
    let owner = body[..open].trim_end_matches(['.', '+']);
    Some(if owner.is_empty() { method.to_string() } else { format!("{owner}.{method}") })
}

fn rename_state_machines(p: &mut Profile) {
    for f in &mut p.costs.stacks.frames {
        if matches!(f.key, FrameKey::Function(_)) {
            if let Some(n) = async_method_name(&f.name) {
                f.name = n;
            }
        }
    }
}

/// One `await` that ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwaitSpan {
    /// The awaiting thread's EventSource activity id at the `await` (0: none).
    pub flow: u128,
    pub start: u64,
    pub end: u64,
    /// The thread that awaited.
    pub os_tid: u32,
    /// The awaited task and the awaiting async method's own task (0: unknown).
    pub awaited: u32,
    pub awaiter: u32,
    /// The awaited operation (`Task.Delay`, an async method's name, `Task`).
    pub what: String,
    /// Whether the awaited operation is not an async method with frames of its own: its time is
    /// awaiting time (see the module's header).
    pub leaf: bool,
    /// The `TaskWaitBegin` event (index into the index's events).
    begin: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// An `await`'s continuation: the `TaskWaitBegin` (or `AwaitTaskContinuationScheduled`).
    Await(Option<usize>),
    /// A task's delegate: its `TaskScheduled`.
    Task(Option<usize>),
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    start: u64,
    end: u64,
    origin: Origin,
    /// The thread's activity id when the segment started.
    activity: u128,
    parent: Option<usize>,
    /// The task (awaited task or started task) that opened it.
    task: u32,
    /// Its end event was seen (else it runs to the last event).
    closed: bool,
}

/// The task events indexed by thread and time (see the module's header).
#[derive(Clone, Debug, Default)]
pub struct AsyncIndex {
    events: Vec<TaskEvent>,
    segments: FxHashMap<u32, Vec<Segment>>,
    awaits: Vec<AwaitSpan>,
}

impl AsyncIndex {
    fn build(mut events: Vec<TaskEvent>) -> AsyncIndex {
        events.sort_by_key(|e| e.ts);
        let last = events.last().map_or(0, |e| e.ts);
        // Names of operations, async methods' own tasks.
        let mut names: HashMap<u32, &str> = HashMap::new();
        let mut async_tasks: std::collections::HashSet<u32> = Default::default();
        for e in &events {
            match e.kind {
                kind::OPERATION_BEGIN => {
                    if e.name.starts_with("Async:") {
                        async_tasks.insert(e.task);
                    }
                    names.insert(e.task, &e.name);
                }
                kind::WAIT_BEGIN if e.detail == 2 && e.other != 0 => {
                    async_tasks.insert(e.other);
                }
                _ => {}
            }
        }
        let mut segments: FxHashMap<u32, Vec<Segment>> = FxHashMap::default();
        let mut open: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
        // Unmatched `await`s per awaited task (event indexes, oldest first); sync waits per thread.
        let mut pending: HashMap<u32, std::collections::VecDeque<usize>> = HashMap::new();
        let mut sync_waits: HashMap<(u32, u32), u32> = HashMap::new();
        let mut scheduled: HashMap<u32, usize> = HashMap::new();
        let mut cont_scheduled: HashMap<u32, usize> = HashMap::new();
        let mut awaits = Vec::new();
        for (i, e) in events.iter().enumerate() {
            let segs = segments.entry(e.os_tid).or_default();
            let stack = open.entry(e.os_tid).or_default();
            let push = |origin: Origin, task: u32, segs: &mut Vec<Segment>, stack: &mut Vec<usize>| {
                segs.push(Segment {
                    start: e.ts,
                    end: last,
                    origin,
                    activity: e.activity,
                    parent: stack.last().copied(),
                    task,
                    closed: false,
                });
                stack.push(segs.len() - 1);
            };
            let close = |matches: &dyn Fn(&Segment) -> bool, segs: &mut Vec<Segment>, stack: &mut Vec<usize>| {
                if let Some(at) = stack.iter().rposition(|&s| matches(&segs[s])) {
                    for &s in &stack[at..] {
                        segs[s].end = e.ts;
                        segs[s].closed = true;
                    }
                    stack.truncate(at);
                }
            };
            match e.kind {
                kind::SCHEDULED => {
                    scheduled.insert(e.task, i);
                }
                kind::CONTINUATION_SCHEDULED => {
                    cont_scheduled.insert(e.task, i);
                }
                kind::WAIT_BEGIN if e.detail == 2 => pending.entry(e.task).or_default().push_back(i),
                kind::WAIT_BEGIN => *sync_waits.entry((e.os_tid, e.task)).or_default() += 1,
                kind::STARTED => push(Origin::Task(scheduled.get(&e.task).copied()), e.task, segs, stack),
                kind::COMPLETED => close(&|s| matches!(s.origin, Origin::Task(_)) && s.task == e.task, segs, stack),
                kind::WAIT_END => {
                    if let Some(n) = sync_waits.get_mut(&(e.os_tid, e.task)).filter(|n| **n > 0) {
                        *n -= 1;
                        continue;
                    }
                    let begin = pending.get_mut(&e.task).and_then(|q| q.pop_front());
                    if let Some(b) = begin {
                        let w = &events[b];
                        let leaf = !async_tasks.contains(&e.task);
                        let what = match names.get(&e.task) {
                            Some(n) if !n.starts_with("Async:") => n.to_string(),
                            Some(n) => n.trim_start_matches("Async:").trim().to_string(),
                            None => "Task".to_string(),
                        };
                        awaits.push(AwaitSpan {
                            flow: w.activity,
                            start: w.ts,
                            end: e.ts,
                            os_tid: w.os_tid,
                            awaited: e.task,
                            awaiter: w.other,
                            what,
                            leaf,
                            begin: b,
                        });
                    }
                    push(Origin::Await(begin), e.task, segs, stack);
                }
                kind::CONTINUATION_STARTED => {
                    push(Origin::Await(cont_scheduled.get(&e.task).copied()), e.task, segs, stack)
                }
                kind::CONTINUATION_COMPLETE => {
                    close(&|s| matches!(s.origin, Origin::Await(_)) && s.task == e.task, segs, stack)
                }
                _ => {}
            }
        }
        segments.retain(|_, v| !v.is_empty());
        AsyncIndex { events, segments, awaits }
    }

    /// The innermost segment of `os_tid` at `ts`.
    fn segment_at(&self, os_tid: u32, ts: u64) -> Option<(&[Segment], usize)> {
        let segs = self.segments.get(&os_tid)?;
        let n = segs.partition_point(|s| s.start <= ts);
        let mut at = n.checked_sub(1)?;
        loop {
            let s = &segs[at];
            if s.start <= ts && ts < s.end {
                return Some((segs, at));
            }
            at = s.parent?;
        }
    }

    /// The EventSource activity id `os_tid` worked for at `ts`: that of the innermost task or
    /// continuation it was running (activity ids flow into them with `TasksFlowActivityIds`).
    pub fn flow_at(&self, os_tid: u32, ts: u64) -> Option<u128> {
        let (segs, mut at) = self.segment_at(os_tid, ts)?;
        loop {
            if segs[at].activity != 0 {
                return Some(segs[at].activity);
            }
            at = segs[at].parent?;
        }
    }

    /// Each segment's time on `os_tid` within `[from, to)` less that of the segments nested in it,
    /// by segment; None for a segment never closed.
    fn exclusive_ns(&self, os_tid: u32, from: u64, to: u64) -> Vec<Option<u64>> {
        let Some(segs) = self.segments.get(&os_tid) else { return Vec::new() };
        let within = |s: &Segment| s.end.min(to).saturating_sub(s.start.max(from));
        let mut out: Vec<Option<u64>> = segs.iter().map(|s| s.closed.then(|| within(s))).collect();
        for s in segs {
            if let Some(parent) = s.parent {
                if let Some(x) = out[parent].as_mut() {
                    *x = x.saturating_sub(within(s));
                }
            }
        }
        out
    }

    /// Every `await` that ended, in order of its end.
    pub fn awaits(&self) -> &[AwaitSpan] {
        &self.awaits
    }
}

/// The logical-stack join over one profile, memoizing each origin's logical stack.
struct Join<'a> {
    index: &'a AsyncIndex,
    origins: FxHashMap<usize, Option<Vec<FrameId>>>,
    /// The awaiting method's frame of each `await` event asked for.
    leaves: FxHashMap<usize, Option<FrameId>>,
    functions: HashMap<u64, String>,
    resumed: FrameId,
    task: FrameId,
    /// The awaited operation of each `await` that ended, by its `TaskWaitBegin` event.
    awaited: FxHashMap<usize, &'a str>,
    /// Segment classes: (origin leaf frame, awaited operation) → number.
    classes: FxHashMap<(FrameId, &'a str), u32>,
}

impl<'a> Join<'a> {
    fn new(index: &'a AsyncIndex, p: &mut Profile) -> Join<'a> {
        let functions = p.functions.iter().map(|f| (f.id, f.name.clone())).collect();
        let resumed = p.costs.stacks.intern_frame(FrameKey::Label(RESUMED.into()));
        let task = p.costs.stacks.intern_frame(FrameKey::Label(TASK.into()));
        let awaited = index.awaits.iter().map(|a| (a.begin, a.what.as_str())).collect();
        Join {
            index,
            origins: FxHashMap::default(),
            leaves: FxHashMap::default(),
            functions,
            resumed,
            task,
            awaited,
            classes: FxHashMap::default(),
        }
    }

    fn name(p: &Profile, f: FrameId) -> &str {
        &p.costs.stacks.frames[f.0 as usize].name
    }

    /// The logical stack (root first) of an origin event: its recorded stack, the task library's
    /// frames at its leaf left out, itself made logical.
    fn origin(&mut self, p: &mut Profile, event: usize, depth: usize) -> Option<Vec<FrameId>> {
        if let Some(v) = self.origins.get(&event) {
            return v.clone();
        }
        let e = &self.index.events[event];
        let mut frames: Vec<FrameId> = Vec::with_capacity(e.stack.len());
        for &fid in e.stack.iter().rev() {
            let f = p.costs.stacks.intern_frame(FrameKey::Function(fid));
            let fr = &mut p.costs.stacks.frames[f.0 as usize];
            if fr.name.starts_with("<function") {
                if let Some(n) = self.functions.get(&fid) {
                    fr.name = n.clone();
                }
            }
            frames.push(f);
        }
        while frames.last().is_some_and(|&f| is_machinery(Self::name(p, f))) {
            frames.pop();
        }
        let v = if frames.is_empty() {
            None
        } else {
            let (tid, ts) = (e.os_tid, e.ts);
            Some(self.logical(p, tid, ts, &frames, depth + 1).unwrap_or(frames))
        };
        self.origins.insert(event, v.clone());
        v
    }

    /// The logical stack of an event's frames (root first) on `os_tid` at `ts` (an exact time):
    /// `None` when the thread was not working for another's task then.
    fn logical(
        &mut self,
        p: &mut Profile,
        os_tid: u32,
        ts: u64,
        frames: &[FrameId],
        depth: usize,
    ) -> Option<Vec<FrameId>> {
        if depth > MAX_CHAIN {
            return None;
        }
        let (segs, inner) = self.index.segment_at(os_tid, ts)?;
        let (_, pos, c) = self.cut(p, segs, inner, frames, depth, false)?;
        self.stitch(p, segs, c, frames, pos, depth)
    }

    /// The logical stack of a sample of `os_tid` whose time is known only to lie in
    /// `(after, upto]` (the sampler writes the samples of a thread it took since its last round
    /// with that round's time): of the segments of the thread in that window, the one whose
    /// chain of resumed methods the sample's frames hold best (see `cut`).
    fn logical_in(
        &mut self,
        p: &mut Profile,
        os_tid: u32,
        after: u64,
        upto: u64,
        frames: &[FrameId],
    ) -> Option<(Vec<FrameId>, usize)> {
        let index = self.index;
        let segs = index.segments.get(&os_tid)?;
        let n = segs.partition_point(|s| s.start <= upto);
        // Continuations the frames show (the awaiter's wrapper calls each resumed method): a
        // chain holding fewer means the window missed the segment (a stale stack), and the
        // thread's earlier segments are tried as well.
        let shown = frames.iter().filter(|&&f| Self::name(p, f).contains("OutputWaitEtwEvents")).count() as u32;
        // A segment can hold the sample only if the frames show its resumed method (or run a
        // task): checked before the whole chain is.
        let present: std::collections::HashSet<FrameId> = frames.iter().copied().collect();
        let executes = frames.iter().any(|&f| Self::name(p, f).starts_with("System.Threading.Tasks.Task.Execute"));
        let mut found: Vec<(u32, usize, usize)> = Vec::new();
        for widened in [false, true] {
            found.clear();
            for i in (0..n).rev().take(MAX_CANDIDATES) {
                if segs[i].end <= after && !widened {
                    continue;
                }
                let possible = match segs[i].origin {
                    Origin::Await(Some(b)) => self.origin_leaf(p, b, 0).is_some_and(|f| present.contains(&f)),
                    Origin::Task(Some(_)) => executes,
                    _ => false,
                };
                if !possible {
                    continue;
                }
                if let Some(cut) = self.cut(p, segs, i, frames, 0, true) {
                    found.push(cut);
                }
            }
            // The best-held chain first; among equals the latest segment (found first).
            found.sort_by_key(|c| std::cmp::Reverse(c.0));
            if found.first().is_some_and(|c| c.0 / 2 >= shown) {
                break;
            }
        }
        found.into_iter().find_map(|(_, pos, c)| self.stitch(p, segs, c, frames, pos, 0).map(|l| (l, c)))
    }

    /// Where the body of each segment of `inner`'s chain starts in `frames`, outermost first:
    /// (score, position after the innermost cut, the segment cut there). A continuation's body
    /// starts after its resumed method's frame (the awaiting stack's leaf), sought after the
    /// enclosing cut and, when `strict`, called by the continuation machinery (not by a builder's
    /// `Start`, which is the method's first, synchronous part) — a continuation whose frame is
    /// not found then disqualifies the chain; a task's body starts at its first frame that is not
    /// the thread pool's (strictly: under a `Task.Execute…` frame). Continuations score 2, tasks 1.
    fn cut(
        &mut self,
        p: &mut Profile,
        segs: &[Segment],
        inner: usize,
        frames: &[FrameId],
        depth: usize,
        strict: bool,
    ) -> Option<(u32, usize, usize)> {
        let mut chain = vec![inner];
        while let Some(parent) = segs[*chain.last()?].parent {
            chain.push(parent);
            if chain.len() > MAX_CHAIN {
                return None;
            }
        }
        chain.reverse();
        let mut pos = 0usize;
        let mut score = 0u32;
        let mut cut_seg = None;
        for &c in &chain {
            match segs[c].origin {
                Origin::Await(Some(b)) => {
                    let target = self.origin_leaf(p, b, depth);
                    let found = target.and_then(|t| {
                        frames[pos..].iter().enumerate().position(|(i, &f)| {
                            f == t
                                && (!strict || pos + i == 0 || !Self::name(p, frames[pos + i - 1]).contains(".Start<"))
                        })
                    });
                    match found {
                        Some(i) => {
                            pos += i + 1;
                            score += 2;
                            cut_seg = Some(c);
                        }
                        None if strict => return None,
                        None => {}
                    }
                }
                // Work whose origin was not recorded (before the session, events lost): no cut.
                Origin::Task(None) | Origin::Await(None) => {}
                Origin::Task(Some(_)) => {
                    let executes = !strict
                        || frames[pos..]
                            .iter()
                            .any(|&f| Self::name(p, f).starts_with("System.Threading.Tasks.Task.Execute"));
                    let body = frames[pos..].iter().position(|&f| {
                        let fr = &p.costs.stacks.frames[f.0 as usize];
                        matches!(fr.key, FrameKey::Function(_)) && !is_machinery(&fr.name)
                    });
                    match body {
                        Some(i) if executes => {
                            pos += i;
                            score += 1;
                            cut_seg = Some(c);
                        }
                        _ if strict => return None,
                        _ => {}
                    }
                }
            }
        }
        Some((score, pos, cut_seg?))
    }

    /// The frames of a logical stack without the async builders' `Start` frames, and without the
    /// stub of an async method right above its state machine (both named as the method).
    fn tidy(p: &Profile, frames: Vec<FrameId>) -> Vec<FrameId> {
        let name = |f: FrameId| p.costs.stacks.frames[f.0 as usize].name.as_str();
        let kept: Vec<FrameId> = frames
            .into_iter()
            .filter(|&f| {
                let n = name(f);
                !(n.starts_with("System.Runtime.CompilerServices.Async") && n.contains(".Start<"))
            })
            .collect();
        let mut out = Vec::with_capacity(kept.len());
        for (i, &f) in kept.iter().enumerate() {
            let stub_of_next = kept.get(i + 1).is_some_and(|&g| {
                async_method_name(name(g)).is_some_and(|m| name(f) == m || name(f).starts_with(&format!("{m}(")))
            });
            if !stub_of_next {
                out.push(f);
            }
        }
        out
    }

    /// The origin's logical stack, the marker, then `frames[pos..]`; just the origin's stack when
    /// nothing follows the cut (an event on the resumed method's own frame: its next `await`
    /// continues the same logical call, not a new one).
    fn stitch(
        &mut self,
        p: &mut Profile,
        segs: &[Segment],
        c: usize,
        frames: &[FrameId],
        pos: usize,
        depth: usize,
    ) -> Option<Vec<FrameId>> {
        let (prefix, marker) = match segs[c].origin {
            Origin::Await(Some(b)) => (self.origin(p, b, depth)?, self.resumed),
            Origin::Task(Some(t)) => (self.origin(p, t, depth)?, self.task),
            _ => return None,
        };
        let mut out = prefix;
        if pos < frames.len() {
            out.push(marker);
            out.extend_from_slice(&frames[pos..]);
        }
        Some(Self::tidy(p, out))
    }

    /// The class of segment `seg` of `os_tid` (see [`segment_wall`]): the frame its work resumes
    /// or starts from — the awaiting method of its `await` with the operation it awaited, the
    /// creator of its task.
    fn class_of(&mut self, p: &mut Profile, os_tid: u32, seg: usize) -> Option<u32> {
        let s = self.index.segments.get(&os_tid)?.get(seg)?;
        let (Origin::Await(Some(e)) | Origin::Task(Some(e))) = s.origin else { return None };
        let what = match s.origin {
            Origin::Await(_) => self.awaited.get(&e).copied().unwrap_or(""),
            Origin::Task(_) => TASK,
        };
        let key = (self.origin_leaf(p, e, 0)?, what);
        let n = self.classes.len() as u32;
        Some(*self.classes.entry(key).or_insert(n))
    }

    /// The awaiting method's frame of an `await`'s stack (its leaf once the task library's frames
    /// are left out), as recorded (not made logical).
    fn origin_leaf(&mut self, p: &mut Profile, event: usize, _depth: usize) -> Option<FrameId> {
        if let Some(&f) = self.leaves.get(&event) {
            return f;
        }
        let f = self.find_origin_leaf(p, event);
        self.leaves.insert(event, f);
        f
    }

    fn find_origin_leaf(&mut self, p: &mut Profile, event: usize) -> Option<FrameId> {
        let e = &self.index.events[event];
        for &fid in &e.stack {
            let f = p.costs.stacks.intern_frame(FrameKey::Function(fid));
            let fr = &mut p.costs.stacks.frames[f.0 as usize];
            if fr.name.starts_with("<function") {
                if let Some(n) = self.functions.get(&fid) {
                    fr.name = n.clone();
                }
            }
            if !is_machinery(&fr.name) {
                return Some(f);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_machine_frames_are_named_as_their_method() {
        assert_eq!(async_method_name("Shop.Orders+<LoadAsync>d__4.MoveNext").as_deref(), Some("Shop.Orders.LoadAsync"));
        assert_eq!(async_method_name("Shop.Orders.<LoadAsync>d__4.MoveNext").as_deref(), Some("Shop.Orders.LoadAsync"));
        assert_eq!(async_method_name("Shop.Orders.Load"), None);
        assert_eq!(async_method_name("Shop.Orders+<>c.<Main>b__0_0"), None);
        assert_eq!(
            async_method_name("Shop.Program+<>c__DisplayClass1_1+<<Main>b__1>d.MoveNext").as_deref(),
            Some("Shop.Program+<>c__DisplayClass1_1.<Main>b__1")
        );
    }

    fn ev(kind: u8, ts: u64, os_tid: u32, task: u32, other: u32, detail: u32) -> TaskEvent {
        TaskEvent { kind, ts, os_tid, task, other, detail, ..Default::default() }
    }

    #[test]
    fn a_resumed_caller_nests_in_its_callee_and_awaits_pair_up() {
        // Thread 1 awaits task 5 (an operation named Task.Delay) from async method 9; thread 2
        // resumes it at 100, and inside, method 8 (which awaited 9) resumes at 150.
        let mut named = ev(kind::OPERATION_BEGIN, 0, 1, 5, 0, 0);
        named.name = "Task.Delay".into();
        let mut flowing = ev(kind::WAIT_END, 100, 2, 5, 0, 0);
        flowing.activity = 77;
        let events = vec![
            named,
            ev(kind::WAIT_BEGIN, 10, 1, 5, 9, 2),
            ev(kind::WAIT_BEGIN, 20, 1, 9, 8, 2),
            flowing,
            ev(kind::WAIT_END, 150, 2, 9, 0, 0),
            ev(kind::CONTINUATION_COMPLETE, 180, 2, 9, 0, 0),
            ev(kind::CONTINUATION_COMPLETE, 200, 2, 5, 0, 0),
            ev(kind::WAIT_BEGIN, 300, 3, 40, 0, 1),
            ev(kind::WAIT_END, 310, 3, 40, 0, 0),
            ev(kind::CONTINUATION_COMPLETE, 310, 3, 40, 0, 0),
        ];
        let ix = AsyncIndex::build(events);
        let a = ix.awaits();
        assert_eq!(a.len(), 2);
        assert_eq!((a[0].start, a[0].end, a[0].what.as_str(), a[0].leaf), (10, 100, "Task.Delay", true));
        assert_eq!((a[1].start, a[1].end, a[1].awaited, a[1].leaf), (20, 150, 9, false), "9 is an async method");
        let (segs, at) = ix.segment_at(2, 160).unwrap();
        assert_eq!(segs[at].task, 9);
        assert_eq!(segs[segs[at].parent.unwrap()].task, 5);
        assert_eq!(ix.segment_at(2, 190).map(|(s, i)| s[i].task), Some(5));
        assert!(ix.segment_at(2, 200).is_none());
        assert_eq!(ix.flow_at(2, 160), Some(77), "the inner continuation has no id of its own: the outer's");
        assert_eq!(ix.flow_at(1, 50), None);
        assert!(ix.segment_at(3, 305).is_none(), "a synchronous wait is no continuation");
    }
}
