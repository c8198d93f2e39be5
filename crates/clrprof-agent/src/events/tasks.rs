//! The task library's events (`System.Threading.Tasks.TplEventSource`) for logical async stacks
//! and awaiting time (`CLRPROF_ASYNC=1`, `record --async`).
//!
//! Keywords (measured needs, fewer is cheaper): `Tasks` (0x2: TaskScheduled, TaskStarted,
//! TaskWaitBegin, and at level Verbose TaskWaitEnd and TaskWaitContinuationStarted), `TaskStops`
//! (0x40: TaskCompleted, TaskWaitContinuationComplete: where a continuation's work ends),
//! `AsyncCausalityOperation` (0x8: TraceOperationBegin/End, which name the awaited operation:
//! `Task.Delay`, `Async: <LoadAsync>d__4`) and `TasksFlowActivityIds` (0x80: EventSource activity
//! ids flow into the tasks a request creates, so ASP.NET Core's request activity follows its
//! continuations). Payloads (TplEventSource.cs): every id is an `int`; TaskScheduled {scheduler,
//! originating task, TaskID, CreatingTaskID, options, appDomain}; TaskStarted and TaskWaitEnd
//! {scheduler, originating task, TaskID}; TaskCompleted {.., TaskID, IsExceptional}; TaskWaitBegin
//! {scheduler, originating task, TaskID, Behavior, ContinueWithTaskID}; AwaitTaskContinuationScheduled
//! {scheduler, originating task, ContinueWithTaskId}; TaskWaitContinuationStarted/Complete {TaskID};
//! TraceOperationBegin {TaskID, UTF-16z OperationName, i64 RelatedContext}; TraceOperationEnd
//! {TaskID, Status}.
//!
//! Every event is delivered synchronously on the thread that wrote it. It is packed at once
//! (varints, [`clrprof_trace::tasks`]) into one of a few sharded byte buffers, which the writer
//! thread takes once per flush as `TaskEvents` records; nothing is named here. Only the events
//! whose stack the join needs (an `await`'s TaskWaitBegin, TaskScheduled, a scheduled
//! continuation) carry one: the runtime's (`frames` of the delivery) when it passed one, else a
//! walk of the current thread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use clrprof_sys::CallbackResult;
use clrprof_trace::tasks::{kind, pack_into, TaskEvent};

use super::providers::{Delivered, ProviderRequest, TASKS};
use crate::config::Config;
use crate::context::Context;
use crate::os::os_tid;
use crate::writer::Writer;

/// `Tasks`: TaskScheduled, TaskStarted, TaskWaitBegin, TaskWaitEnd (verbose).
pub(crate) const KEYWORD_TASKS: u64 = 0x2;
/// `AsyncCausalityOperation`: TraceOperationBegin names a task.
pub(crate) const KEYWORD_CAUSALITY_OPERATION: u64 = 0x8;
/// `TaskStops`: TaskCompleted, TaskWaitContinuationComplete.
pub(crate) const KEYWORD_TASK_STOPS: u64 = 0x40;
/// `TasksFlowActivityIds`: EventSource activity ids flow from a task to those it creates.
pub(crate) const KEYWORD_FLOW_ACTIVITY_IDS: u64 = 0x80;
const LEVEL_VERBOSE: u32 = 5;
/// `TaskWaitBegin`'s Behavior of an `await`.
const BEHAVIOR_ASYNC: u32 = 2;

const SHARDS: usize = 8;
/// Bytes a shard holds between two flushes; beyond, events are dropped and counted.
const MAX_SHARD_BYTES: usize = 32 << 20;

#[derive(Default)]
struct Shard {
    base: u64,
    count: u32,
    packed: Vec<u8>,
}

/// Task events waiting for the writer thread, packed.
#[derive(Default)]
pub(crate) struct TaskEvents {
    shards: [Mutex<Shard>; SHARDS],
    dropped: AtomicU64,
    seen: AtomicU64,
    told: std::sync::atomic::AtomicBool,
}

impl TaskEvents {
    fn push(&self, e: &TaskEvent) {
        self.seen.fetch_add(1, Ordering::Relaxed);
        let Ok(mut sh) = self.shards[e.os_tid as usize % SHARDS].lock() else { return };
        if sh.packed.len() >= MAX_SHARD_BYTES || sh.count == u32::MAX {
            drop(sh);
            if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                crate::log_warn!("task events arrive faster than they are written; dropping some");
            }
            return;
        }
        if sh.count == 0 {
            sh.base = e.ts;
            if sh.packed.capacity() == 0 {
                sh.packed.reserve(64 << 10);
            }
        }
        let base = sh.base;
        pack_into(&mut sh.packed, base, e);
        sh.count += 1;
    }

    /// Writes the events since the last call (writer thread), and a message the first time
    /// events were dropped.
    pub(crate) fn publish(&self, w: &Writer, now: u64) {
        let (_, dropped) = self.counts();
        if dropped > 0 && !self.told.swap(true, Ordering::Relaxed) {
            let text = "task events arrived faster than they were written: some were dropped, logical stacks may be incomplete".to_string();
            w.emit(&clrprof_trace::Message { ts: now, level: 1, text }.into());
        }
        for sh in &self.shards {
            let taken = {
                let Ok(mut sh) = sh.lock() else { continue };
                if sh.count == 0 {
                    continue;
                }
                let cap = sh.packed.capacity();
                let packed = std::mem::replace(&mut sh.packed, Vec::with_capacity(cap.min(4 << 20)));
                let r = clrprof_trace::TaskEvents { ts: sh.base, count: sh.count, packed };
                sh.count = 0;
                r
            };
            w.emit(&taken.into());
        }
    }

    /// (events seen, events dropped).
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.seen.load(Ordering::Relaxed), self.dropped.load(Ordering::Relaxed))
    }
}

/// The providers this module needs for `config`.
pub(crate) fn providers(config: &Config, runtime_major: u16) -> Vec<ProviderRequest> {
    if !config.asynchrony {
        return Vec::new();
    }
    let mut keywords = KEYWORD_TASKS | KEYWORD_CAUSALITY_OPERATION | KEYWORD_TASK_STOPS | KEYWORD_FLOW_ACTIVITY_IDS;
    if config.sampling && super::flow::from_events(runtime_major) {
        // `SetActivityId` events: the CPU samples' activity ids (`super::flow`).
        keywords |= super::flow::KEYWORD_DEBUG_ACTIVITY_ID;
    }
    vec![ProviderRequest { name: TASKS, keywords, level: LEVEL_VERBOSE }]
}

/// Reads little-endian `i32`s.
fn ints<const N: usize>(data: &[u8]) -> Option<[u32; N]> {
    let mut out = [0u32; N];
    for (i, o) in out.iter_mut().enumerate() {
        let b = data.get(4 * i..4 * i + 4)?;
        *o = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    Some(out)
}

/// The event as a [`TaskEvent`] without its stack; `None` for events not used or payloads that do
/// not parse. The second value says whether the join needs the event's stack.
fn parse(event_id: u32, data: &[u8], ts: u64, os_tid: u32, activity: u128) -> Option<(TaskEvent, bool)> {
    let ev = |kind: u8, task: u32, other: u32, detail: u32| TaskEvent {
        kind,
        ts,
        os_tid,
        task,
        other,
        detail,
        activity,
        ..Default::default()
    };
    let k = u8::try_from(event_id).ok()?;
    Some(match k {
        kind::SCHEDULED => {
            let [_, originating, task, creating] = ints::<4>(data)?;
            (ev(k, task, if creating != 0 { creating } else { originating }, 0), true)
        }
        kind::STARTED | kind::WAIT_END => {
            let [_, _, task] = ints::<3>(data)?;
            (ev(k, task, 0, 0), false)
        }
        kind::COMPLETED => {
            let [_, _, task, exceptional] = ints::<4>(data)?;
            (ev(k, task, 0, exceptional), false)
        }
        kind::WAIT_BEGIN => {
            let [_, _, task, behavior, continue_with] = ints::<5>(data)?;
            (ev(k, task, continue_with, behavior), behavior == BEHAVIOR_ASYNC)
        }
        kind::CONTINUATION_SCHEDULED => {
            let [_, originating, continuation] = ints::<3>(data)?;
            (ev(k, continuation, originating, 0), true)
        }
        kind::CONTINUATION_COMPLETE | kind::CONTINUATION_STARTED => {
            let [task] = ints::<1>(data)?;
            (ev(k, task, 0, 0), false)
        }
        kind::OPERATION_BEGIN => {
            let [task] = ints::<1>(data)?;
            let units: Vec<u16> = data.get(4..)?.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
            let end = units.iter().position(|&u| u == 0)?;
            let mut e = ev(k, task, 0, 0);
            e.name = String::from_utf16_lossy(&units[..end]);
            (e, false)
        }
        kind::OPERATION_END => {
            let [task, status] = ints::<2>(data)?;
            (ev(k, task, 0, status), false)
        }
        _ => return None,
    })
}

/// A task event, delivered on the thread that wrote it.
pub(crate) fn delivered(s: &Context, t: &TaskEvents, e: &Delivered) -> CallbackResult {
    if s.is_stopped() {
        return Ok(());
    }
    let Some((mut ev, with_stack)) = parse(e.event_id, e.data, s.now(), os_tid(), e.activity) else { return Ok(()) };
    if with_stack {
        ev.stack = if e.ips.is_empty() {
            super::stack::current_stack(s)
        } else {
            e.ips.iter().filter_map(|&ip| s.info.get_function_from_ip(ip).ok()).map(|f| f as u64).collect()
        };
    }
    t.push(&ev);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn parses_the_events_the_join_uses() {
        let (e, stack) = parse(10, &le(&[1, 5, 42, 2, 41]), 100, 7, 9).unwrap();
        assert_eq!((e.kind, e.task, e.other, e.detail, e.activity, stack), (kind::WAIT_BEGIN, 42, 41, 2, 9, true));
        let (_, stack) = parse(10, &le(&[1, 5, 42, 1, 0]), 100, 7, 0).unwrap();
        assert!(!stack, "a synchronous wait needs no stack");
        let (e, stack) = parse(7, &le(&[1, 3, 50, 0, 8, 1]), 1, 2, 0).unwrap();
        assert_eq!((e.kind, e.task, e.other, stack), (kind::SCHEDULED, 50, 3, true));
        let (e, _) = parse(11, &le(&[1, 0, 42]), 1, 2, 0).unwrap();
        assert_eq!((e.kind, e.task), (kind::WAIT_END, 42));
        let mut d = le(&[77]);
        d.extend("Task.Delay".encode_utf16().chain([0]).flat_map(|u| u.to_le_bytes()));
        d.extend_from_slice(&0i64.to_le_bytes());
        let (e, _) = parse(14, &d, 1, 2, 0).unwrap();
        assert_eq!((e.kind, e.task, e.name.as_str()), (kind::OPERATION_BEGIN, 77, "Task.Delay"));
        assert!(parse(10, &le(&[1, 5, 42]), 1, 2, 0).is_none(), "cut short");
        let mut unended = le(&[77]);
        unended.extend_from_slice(&[0x41, 0, 0x42, 0]);
        assert!(parse(14, &unended, 1, 2, 0).is_none(), "name without its end");
        assert!(parse(20, &le(&[1, 2]), 1, 2, 0).is_none(), "not used");
    }

    #[test]
    fn events_are_packed_per_shard_and_taken_once() {
        let t = TaskEvents::default();
        for i in 0..10u32 {
            t.push(&TaskEvent {
                kind: kind::WAIT_END,
                ts: 1000 + i as u64,
                os_tid: i % 3,
                task: i,
                ..Default::default()
            });
        }
        let mut got = Vec::new();
        for sh in &t.shards {
            let sh = sh.lock().unwrap();
            if sh.count > 0 {
                let r = clrprof_trace::TaskEvents { ts: sh.base, count: sh.count, packed: sh.packed.clone() };
                got.extend(r.unpack().unwrap());
            }
        }
        got.sort_by_key(|e| e.task);
        assert_eq!(got.iter().map(|e| e.task).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
        assert_eq!(t.counts(), (10, 0));
    }
}
