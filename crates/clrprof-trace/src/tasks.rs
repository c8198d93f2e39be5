//! The task library's events as packed in [`crate::TaskEvents`]: what the agent keeps of
//! `System.Threading.Tasks.TplEventSource` for logical async stacks and awaiting time.
//!
//! Each event is, as LEB128 varints: `kind`, `ts` minus the record's `ts`, `os_tid`, `task`,
//! `other`, `detail`, the activity id's low and high 64 bits, the name's byte length and its
//! UTF-8 bytes, the number of stack frames and each frame's IP (leaf first). What `task`,
//! `other` and `detail` hold depends on the kind (see [`kind`]).

use crate::records::{get_varint, put_varint};
use crate::{DecodeError, TaskEvents};

/// Kinds of task events: the `TplEventSource` event ids.
pub mod kind {
    /// `TaskScheduled` (7): `task` queued by the thread; `other` = the creating task (0: none).
    /// Carries the creator's stack.
    pub const SCHEDULED: u8 = 7;
    /// `TaskStarted` (8): the thread starts running `task`'s delegate.
    pub const STARTED: u8 = 8;
    /// `TaskCompleted` (9): `task`'s delegate returned; `detail` 1 when it failed.
    pub const COMPLETED: u8 = 9;
    /// `TaskWaitBegin` (10): the thread waits for `task`; `detail` 1 = synchronous wait,
    /// 2 = `await`; `other` = the awaiting async method's own task (0: unknown). An `await`
    /// carries the awaiting stack.
    pub const WAIT_BEGIN: u8 = 10;
    /// `TaskWaitEnd` (11): the wait for `task` ended: for an `await`, the continuation starts on
    /// this thread.
    pub const WAIT_END: u8 = 11;
    /// `AwaitTaskContinuationScheduled` (12): a continuation (`Task.Yield`, custom awaiters)
    /// numbered `task` is queued by the thread. Carries the awaiting stack.
    pub const CONTINUATION_SCHEDULED: u8 = 12;
    /// `TaskWaitContinuationComplete` (13): the continuation after the wait for `task` returned.
    pub const CONTINUATION_COMPLETE: u8 = 13;
    /// `TraceOperationBegin` (14): `task` is an operation named `name` (`Task.Delay`,
    /// `Async: <LoadAsync>d__4`).
    pub const OPERATION_BEGIN: u8 = 14;
    /// `TraceOperationEnd` (15): operation `task` completed; `detail` its status (1 completed,
    /// 2 canceled, 3 error).
    pub const OPERATION_END: u8 = 15;
    /// `TaskWaitContinuationStarted` (19): the continuation numbered `task` starts on this thread.
    pub const CONTINUATION_STARTED: u8 = 19;
}

/// One task event.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct TaskEvent {
    pub kind: u8,
    pub ts: u64,
    pub os_tid: u32,
    pub task: u32,
    pub other: u32,
    pub detail: u32,
    /// The thread's EventSource activity id when the event was written (the GUID's 16 bytes as
    /// in memory, read as a little-endian integer); 0 when none.
    pub activity: u128,
    pub name: String,
    /// Frames (IPs), leaf first; empty for kinds without a stack.
    pub stack: Vec<u64>,
}

/// Appends `e` to `out` with its time relative to `base`.
pub fn pack_into(out: &mut Vec<u8>, base: u64, e: &TaskEvent) {
    for v in [
        e.kind as u64,
        e.ts.saturating_sub(base),
        e.os_tid as u64,
        e.task as u64,
        e.other as u64,
        e.detail as u64,
        e.activity as u64,
        (e.activity >> 64) as u64,
        e.name.len() as u64,
    ] {
        put_varint(out, v);
    }
    out.extend_from_slice(e.name.as_bytes());
    put_varint(out, e.stack.len() as u64);
    for &ip in &e.stack {
        put_varint(out, ip);
    }
}

impl TaskEvents {
    /// Packs `events` against `base` (at most the earliest of their times).
    pub fn pack(base: u64, events: &[TaskEvent]) -> Option<TaskEvents> {
        let mut packed = Vec::with_capacity(events.len() * 16);
        for e in events {
            pack_into(&mut packed, base, e);
        }
        Some(TaskEvents { ts: base, count: u32::try_from(events.len()).ok()?, packed })
    }

    /// The events, or why they cannot be read.
    pub fn unpack(&self) -> Result<Vec<TaskEvent>, DecodeError> {
        let bad = || DecodeError::Corrupt(format!("TaskEvents at {} does not hold {} events", self.ts, self.count));
        let (b, mut at) = (&self.packed[..], 0usize);
        let mut out = Vec::with_capacity((self.count as usize).min(b.len() / 10));
        for _ in 0..self.count {
            let mut v = [0u64; 9];
            for x in v.iter_mut() {
                *x = get_varint(b, &mut at).ok_or_else(bad)?;
            }
            let len = usize::try_from(v[8]).map_err(|_| bad())?;
            let end = at.checked_add(len).filter(|&e| e <= b.len()).ok_or_else(bad)?;
            let name = std::str::from_utf8(&b[at..end]).map_err(|_| bad())?.to_string();
            at = end;
            let n = get_varint(b, &mut at).ok_or_else(bad)?;
            if n > (b.len() - at) as u64 {
                return Err(bad());
            }
            let mut stack = Vec::with_capacity(n as usize);
            for _ in 0..n {
                stack.push(get_varint(b, &mut at).ok_or_else(bad)?);
            }
            let small = |x: u64| u32::try_from(x).map_err(|_| bad());
            out.push(TaskEvent {
                kind: u8::try_from(v[0]).map_err(|_| bad())?,
                ts: self.ts.checked_add(v[1]).ok_or_else(bad)?,
                os_tid: small(v[2])?,
                task: small(v[3])?,
                other: small(v[4])?,
                detail: small(v[5])?,
                activity: v[6] as u128 | (v[7] as u128) << 64,
                name,
                stack,
            });
        }
        if at != b.len() {
            return Err(bad());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_events_round_trip_and_damage_is_an_error() {
        let events = vec![
            TaskEvent {
                kind: kind::WAIT_BEGIN,
                ts: 1_000,
                os_tid: 7,
                task: 12,
                other: 11,
                detail: 2,
                stack: vec![0x7f00_1234, 5],
                ..Default::default()
            },
            TaskEvent {
                kind: kind::OPERATION_BEGIN,
                ts: 1_500,
                os_tid: 7,
                task: 13,
                name: "Task.Delay".into(),
                ..Default::default()
            },
            TaskEvent {
                kind: kind::WAIT_END,
                ts: 9_000,
                os_tid: 8,
                task: 12,
                activity: u128::MAX - 3,
                ..Default::default()
            },
        ];
        let r = TaskEvents::pack(900, &events).unwrap();
        assert_eq!(r.unpack().unwrap(), events);
        let mut cut = r.clone();
        cut.packed.truncate(cut.packed.len() - 1);
        assert!(cut.unpack().is_err());
        let mut more = r.clone();
        more.count += 1;
        assert!(more.unpack().is_err());
        let mut trailing = r;
        trailing.packed.push(0);
        assert!(trailing.unpack().is_err());
    }
}
