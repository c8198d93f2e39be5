//! Monitor lock contention, aggregated in the agent: a busy server contends thousands of times a
//! second, and a record with a stack for each one made most of its trace. Contentions are counted
//! per waiting stack and per `INTERVAL_NS` of start time (count, total and longest wait, exact),
//! and the writer thread publishes them before each flush (`ContentionStack` once per stack, then
//! `ContentionCounts`). With the event log on (`CLRPROF_EVENTS`) every contention is recorded as
//! before (`ContentionStarted`/`ContentionEnded`), for the per-thread log.
//!
//! The start and the stop of a contention are delivered on the waiting thread; the state is behind
//! one mutex held for a few map operations (the thread is about to block on the lock anyway).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use clrprof_trace::{ContentionCounts, ContentionStack, Record};

use crate::writer::Writer;

/// Length of the intervals contention is counted in (the counters view's finest rows).
pub(crate) const INTERVAL_NS: u64 = 100_000_000;

/// Contentions of one interval and stack: ended, total wait, longest wait, never seen to end.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
struct Counts {
    count: u64,
    wait_ns: u64,
    max_wait_ns: u64,
    unended: u64,
}

#[derive(Default)]
struct Inner {
    /// Waiting stacks by content, numbered from 1.
    ids: HashMap<Vec<u64>, u32>,
    /// Stacks numbered since the last publication, to write before the counts.
    new_stacks: Vec<(u32, Vec<u64>)>,
    /// The open contention of each thread: (start, stack id).
    open: HashMap<u32, (u64, u32)>,
    /// Counts not published yet, by (interval, stack id).
    counts: BTreeMap<(u64, u32), Counts>,
}

/// The aggregator (one per process).
#[derive(Default)]
pub(crate) struct Contention {
    inner: Mutex<Inner>,
}

impl Inner {
    fn at(&mut self, start: u64, stack: u32) -> &mut Counts {
        self.counts.entry((start / INTERVAL_NS, stack)).or_default()
    }
}

impl Contention {
    /// A contention started at `ts` on thread `tid`, waiting at `stack` (innermost first).
    pub(crate) fn started(&self, ts: u64, tid: u32, stack: Vec<u64>) {
        let Ok(mut g) = self.inner.lock() else { return };
        let g = &mut *g;
        let next = g.ids.len() as u32 + 1;
        let id = match g.ids.get(&stack) {
            Some(&id) => id,
            None => {
                g.new_stacks.push((next, stack.clone()));
                g.ids.insert(stack, next);
                next
            }
        };
        if let Some((start, prev)) = g.open.insert(tid, (ts, id)) {
            // The thread's previous contention was never seen to end.
            g.at(start, prev).unended += 1;
        }
    }

    /// The thread's open contention ended at `ts`; `duration_ns` is the runtime's wait (0: none).
    pub(crate) fn ended(&self, ts: u64, tid: u32, duration_ns: u64) {
        let Ok(mut g) = self.inner.lock() else { return };
        let Some((start, id)) = g.open.remove(&tid) else { return };
        let wait = if duration_ns > 0 { duration_ns } else { ts.saturating_sub(start) };
        let c = g.at(start, id);
        c.count += 1;
        c.wait_ns += wait;
        c.max_wait_ns = c.max_wait_ns.max(wait);
    }

    /// The records to publish at `now`: new stacks, then the counts of intervals that have ended
    /// (all of them when `last`, with the contentions still open counted as never ended).
    pub(crate) fn take(&self, now: u64, last: bool) -> Vec<Record> {
        let Ok(mut g) = self.inner.lock() else { return Vec::new() };
        let g = &mut *g;
        if last {
            for (_, (start, id)) in std::mem::take(&mut g.open) {
                g.counts.entry((start / INTERVAL_NS, id)).or_default().unended += 1;
            }
        }
        let mut out: Vec<Record> =
            g.new_stacks.drain(..).map(|(id, stack)| ContentionStack { id, stack }.into()).collect();
        // Intervals from the current one on stay (all are published at the end).
        let keep_from = if last { u64::MAX } else { now / INTERVAL_NS };
        let later = g.counts.split_off(&(keep_from, 0));
        let ready = std::mem::replace(&mut g.counts, later);
        let mut rec: Option<ContentionCounts> = None;
        for ((interval, stack), c) in ready {
            let ts = interval * INTERVAL_NS;
            if rec.as_ref().is_some_and(|r| r.ts != ts) {
                out.extend(rec.take().map(Record::from));
            }
            let r = rec.get_or_insert_with(|| ContentionCounts { ts, interval_ns: INTERVAL_NS, ..Default::default() });
            r.stacks.push(stack);
            r.counts.push(c.count);
            r.wait_ns.push(c.wait_ns);
            r.max_wait_ns.push(c.max_wait_ns);
            r.unended.push(c.unended);
        }
        out.extend(rec.map(Record::from));
        out
    }

    /// Writer tick: publishes what `take` gives.
    pub(crate) fn publish(&self, w: &Writer, now: u64) {
        for r in self.take(now, w.is_stopping()) {
            w.emit(&r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// (interval start, stacks, counts, waits, longest waits, unended) of each `ContentionCounts`.
    type Row = (u64, Vec<u32>, Vec<u64>, Vec<u64>, Vec<u64>, Vec<u64>);

    fn counts(records: &[Record]) -> Vec<Row> {
        records
            .iter()
            .filter_map(|r| match r {
                Record::ContentionCounts(c) => Some((
                    c.ts,
                    c.stacks.clone(),
                    c.counts.clone(),
                    c.wait_ns.clone(),
                    c.max_wait_ns.clone(),
                    c.unended.clone(),
                )),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn counts_per_interval_and_stack_with_exact_waits() {
        let c = Contention::default();
        c.started(10 * MS, 1, vec![3, 2, 1]);
        c.started(20 * MS, 2, vec![3, 2, 1]);
        c.ended(25 * MS, 1, 7 * MS);
        c.ended(30 * MS, 2, 0); // no runtime duration: end minus start
        c.started(40 * MS, 1, vec![9]);
        c.ended(41 * MS, 1, MS);
        // Ended in interval 0, which is not over yet at 50 ms: nothing but the stacks.
        let first = c.take(50 * MS, false);
        assert_eq!(
            first,
            vec![
                ContentionStack { id: 1, stack: vec![3, 2, 1] }.into(),
                ContentionStack { id: 2, stack: vec![9] }.into(),
            ]
        );
        // A contention started in interval 0 ends in interval 1; another starts in interval 1.
        c.started(90 * MS, 3, vec![3, 2, 1]);
        c.ended(150 * MS, 3, 60 * MS);
        c.started(160 * MS, 3, vec![9]);
        c.ended(170 * MS, 3, 10 * MS);
        let second = c.take(120 * MS, false);
        assert_eq!(
            counts(&second),
            vec![(0, vec![1, 2], vec![3, 1], vec![77 * MS, MS], vec![60 * MS, MS], vec![0, 0])]
        );
        // A thread still waiting at the end and one whose next contention began first.
        c.started(250 * MS, 4, vec![9]);
        c.started(260 * MS, 5, vec![3, 2, 1]);
        c.started(270 * MS, 5, vec![3, 2, 1]);
        c.ended(280 * MS, 5, 5 * MS);
        let last = c.take(300 * MS, true);
        assert_eq!(
            counts(&last),
            vec![
                (100 * MS, vec![2], vec![1], vec![10 * MS], vec![10 * MS], vec![0]),
                (200 * MS, vec![1, 2], vec![1, 0], vec![5 * MS, 0], vec![5 * MS, 0], vec![1, 1]),
            ]
        );
        assert!(c.take(400 * MS, true).is_empty());
    }
}
