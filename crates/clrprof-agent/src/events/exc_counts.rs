//! Exceptions aggregated in the agent (the default, under the storm rate limit): a busy server
//! throws thousands of times a second, and a throw record with its stack plus a catch record for
//! each one made most of its trace. Caught exceptions are counted per thread, type, throw site,
//! throw stack (when walked), catching function and `INTERVAL_NS` of throw time — exact counts and
//! sums of their handling steps, first and last throw — and the writer thread publishes them
//! before each flush (`ExceptionType` and `ExceptionStack` once each, then `ExceptionCounts`).
//!
//! An exception that is not caught soon is written as before: one still in flight
//! `LONG_IN_FLIGHT_NS` after its throw (an unhandled one, which ends the process; a long filter or
//! `finally`), at the end of the run, or whose catch cannot be reported (thrown before the rate
//! limit paused the callbacks) gets its own `ExceptionThrown` record, and its catch, if it comes,
//! an `ExceptionCaught`. Readers treat both forms alike. With `--exact-exceptions` or the event log
//! every exception is written on its own (`exceptions.rs`).
//!
//! The state is behind one mutex, held for a few map operations per callback: exception handling
//! costs microseconds per exception anyway (the runtime's callbacks, the stack walks).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use clrprof_trace::{
    exception_phase, ExceptionCaught, ExceptionCounts, ExceptionRow, ExceptionStack, ExceptionThrown, ExceptionType,
    Record,
};

/// Length of the intervals exceptions are counted in (by throw time).
pub(crate) const INTERVAL_NS: u64 = 100_000_000;
/// An exception in flight this long at a writer tick is written on its own.
pub(crate) const LONG_IN_FLIGHT_NS: u64 = 100_000_000;
/// Deepest nesting of exceptions in flight tracked per thread.
const MAX_IN_FLIGHT: usize = 64;

/// An exception between its throw and its catch.
#[derive(Clone, Copy, Default, Debug)]
struct Flight {
    /// `Limiter::epoch` at the throw: a catch in another epoch is not reported.
    epoch: u32,
    /// The rate limit's mode generation at the throw: rows never span a mode change.
    generation: u32,
    ts: u64,
    /// The runtime's ThreadID.
    thread: u64,
    type_id: u32,
    /// 0 when the stack was not walked.
    stack: u32,
    /// The first function searched (the throwing one).
    site: u64,
    search: u64,
    filters: u64,
    unwind: u64,
    finallies: u64,
    /// Its `ExceptionThrown` was written: its catch gets an `ExceptionCaught`.
    written: bool,
    rethrow: bool,
}

/// Key of a row: (interval, mode generation, os_tid, type, site, stack, catcher, rethrow).
type RowKey = (u64, u32, u32, u32, u64, u32, u64, bool);

#[derive(Clone, Copy, Default, Debug)]
struct RowAcc {
    first: u64,
    last: u64,
    count: u64,
    search: u64,
    filters: u64,
    unwind: u64,
    finallies: u64,
}

#[derive(Default)]
struct Inner {
    /// Types by (class, name), numbered from 1, and the other way round.
    type_ids: HashMap<(u64, Arc<str>), u32>,
    types: Vec<(u64, Arc<str>)>,
    /// Walked throw stacks, numbered from 1, and the other way round.
    stack_ids: HashMap<Vec<u64>, u32>,
    stacks: Vec<Vec<u64>>,
    /// Types and stacks numbered since the last publication, to write before the counts.
    new_defs: Vec<Record>,
    /// Exceptions in flight per OS thread, innermost last.
    in_flight: HashMap<u32, Vec<Flight>>,
    /// Counts not published yet.
    rows: BTreeMap<RowKey, RowAcc>,
}

impl Inner {
    /// The `ExceptionThrown` record of a flight (its type and stack looked up).
    fn thrown_record(&self, f: &Flight, os_tid: u32) -> ExceptionThrown {
        let (class, name) = self.types.get(f.type_id as usize - 1).cloned().unwrap_or((0, Arc::from("")));
        let stack = if f.stack == 0 { Vec::new() } else { self.stacks[f.stack as usize - 1].clone() };
        ExceptionThrown {
            ts: f.ts,
            os_tid,
            thread: f.thread,
            class,
            type_name: name.to_string(),
            stack,
            rethrow: f.rethrow,
        }
    }
}

/// The aggregator (one per process).
#[derive(Default)]
pub(crate) struct ExceptionCountsState {
    inner: Mutex<Inner>,
    /// Bumped at each change of the rate limit's mode.
    generation: AtomicU32,
}

/// A throw, as the callback saw it.
pub(crate) struct Throw {
    pub(crate) ts: u64,
    pub(crate) os_tid: u32,
    pub(crate) thread: u64,
    pub(crate) class: u64,
    pub(crate) type_name: Arc<str>,
    /// Innermost first; empty when not walked.
    pub(crate) stack: Vec<u64>,
    pub(crate) epoch: u32,
    /// The same exception object thrown again (see `exceptions::is_rethrow`).
    pub(crate) rethrow: bool,
}

impl ExceptionCountsState {
    /// The rate limit changed mode: exceptions thrown from now on go to other rows.
    pub(crate) fn next_generation(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// An exception was thrown. Returns a record to write when the thread's nesting overflowed
    /// (its oldest exception in flight, not written yet, is written now and forgotten).
    pub(crate) fn thrown(&self, t: Throw) -> Option<Record> {
        let generation = self.generation.load(Ordering::Acquire);
        let Ok(mut g) = self.inner.lock() else { return None };
        let g = &mut *g;
        let key = (t.class, t.type_name);
        let type_id = match g.type_ids.get(&key) {
            Some(&id) => id,
            None => {
                let id = g.types.len() as u32 + 1;
                g.new_defs.push(ExceptionType { id, class: key.0, type_name: key.1.to_string() }.into());
                g.types.push(key.clone());
                g.type_ids.insert(key, id);
                id
            }
        };
        let stack = if t.stack.is_empty() {
            0
        } else if let Some(&id) = g.stack_ids.get(&t.stack) {
            id
        } else {
            let id = g.stacks.len() as u32 + 1;
            g.new_defs.push(ExceptionStack { id, stack: t.stack.clone() }.into());
            g.stacks.push(t.stack.clone());
            g.stack_ids.insert(t.stack, id);
            id
        };
        let f = Flight {
            epoch: t.epoch,
            generation,
            ts: t.ts,
            thread: t.thread,
            type_id,
            stack,
            rethrow: t.rethrow,
            ..Flight::default()
        };
        let list = g.in_flight.entry(t.os_tid).or_default();
        let evicted = if list.len() >= MAX_IN_FLIGHT { Some(list.remove(0)) } else { None };
        list.push(f);
        evicted.filter(|e| !e.written).map(|e| g.thrown_record(&e, t.os_tid).into())
    }

    /// A step of the handling of the innermost exception in flight on thread `os_tid`. Returns a
    /// record to write: at a catch, the `ExceptionCaught` of an exception written on its own, or
    /// the `ExceptionThrown` of one whose catch cannot be reported (thrown in another `epoch`).
    pub(crate) fn phase(&self, ts: u64, os_tid: u32, phase: u8, function: u64, epoch: u32) -> Option<Record> {
        let Ok(mut g) = self.inner.lock() else { return None };
        let g = &mut *g;
        let list = g.in_flight.get_mut(&os_tid)?;
        if phase != exception_phase::CATCHER_ENTER {
            let top = list.last_mut()?;
            match phase {
                exception_phase::SEARCH_ENTER => {
                    if top.search == 0 {
                        top.site = function;
                    }
                    top.search += 1
                }
                exception_phase::FILTER_ENTER => top.filters += 1,
                exception_phase::UNWIND_ENTER => top.unwind += 1,
                exception_phase::FINALLY_ENTER => top.finallies += 1,
                _ => {}
            }
            return None;
        }
        let f = list.pop()?;
        if list.is_empty() {
            g.in_flight.remove(&os_tid);
        }
        if f.epoch != epoch {
            // Thrown before the callbacks were last paused: its steps are incomplete, its catch is
            // not reported (readers count it as not followed).
            return (!f.written).then(|| g.thrown_record(&f, os_tid).into());
        }
        let sat = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        if f.written {
            return Some(
                ExceptionCaught {
                    ts,
                    os_tid,
                    function,
                    site: f.site,
                    search_frames: sat(f.search),
                    filters: sat(f.filters),
                    unwind_frames: sat(f.unwind),
                    finallies: sat(f.finallies),
                }
                .into(),
            );
        }
        // The throw site as readers of single records find it: the walked stack's innermost
        // frame, else the first frame searched.
        let site = match f.stack {
            0 => f.site,
            s => g.stacks[s as usize - 1].first().copied().unwrap_or(f.site),
        };
        let key = (f.ts / INTERVAL_NS, f.generation, os_tid, f.type_id, site, f.stack, function, f.rethrow);
        let r = g.rows.entry(key).or_insert(RowAcc { first: f.ts, last: f.ts, ..RowAcc::default() });
        r.first = r.first.min(f.ts);
        r.last = r.last.max(f.ts);
        r.count += 1;
        r.search += f.search;
        r.filters += f.filters;
        r.unwind += f.unwind;
        r.finallies += f.finallies;
        None
    }

    /// What to publish at `now` (all of it when `last`): first the exceptions in flight for
    /// `LONG_IN_FLIGHT_NS` or more (every one when `last`), written on their own — to be written
    /// at once, ahead of any catch record the threads may write next; then new types and
    /// stacks and the counts of intervals that are over.
    pub(crate) fn take(&self, now: u64, last: bool) -> (Vec<Record>, Vec<Record>) {
        let Ok(mut g) = self.inner.lock() else { return (Vec::new(), Vec::new()) };
        let g = &mut *g;
        let mut long = Vec::new();
        let mut tids: Vec<u32> = g.in_flight.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            let Some(list) = g.in_flight.get_mut(&tid) else { continue };
            let due: Vec<usize> = (0..list.len())
                .filter(|&i| !list[i].written && (last || list[i].ts.saturating_add(LONG_IN_FLIGHT_NS) <= now))
                .collect();
            let flights: Vec<Flight> = due.iter().map(|&i| list[i]).collect();
            for &i in &due {
                list[i].written = true;
            }
            for f in flights {
                long.push(g.thrown_record(&f, tid).into());
            }
        }
        let mut out: Vec<Record> = std::mem::take(&mut g.new_defs);
        let keep_from = if last { u64::MAX } else { now / INTERVAL_NS };
        let later = g.rows.split_off(&(keep_from, 0, 0, 0, 0, 0, 0, false));
        let ready = std::mem::replace(&mut g.rows, later);
        let mut interval: Option<u64> = None;
        let mut rows: Vec<ExceptionRow> = Vec::new();
        let flush = |interval: u64, rows: &mut Vec<ExceptionRow>, out: &mut Vec<Record>| {
            let ts = interval * INTERVAL_NS;
            if let Some(c) = ExceptionCounts::pack(ts, INTERVAL_NS, rows) {
                out.push(c.into());
            }
            rows.clear();
        };
        for ((iv, _, tid, type_id, site, stack, catcher, rethrow), a) in ready {
            if interval.is_some_and(|i| i != iv) {
                flush(interval.unwrap_or(0), &mut rows, &mut out);
            }
            interval = Some(iv);
            rows.push(ExceptionRow {
                os_tid: tid,
                type_id,
                site,
                stack,
                catcher,
                first_ns: a.first,
                last_ns: a.last,
                count: a.count,
                search_frames: a.search,
                filters: a.filters,
                unwind_frames: a.unwind,
                finallies: a.finallies,
                rethrown: if rethrow { a.count } else { 0 },
            });
        }
        if let Some(iv) = interval {
            flush(iv, &mut rows, &mut out);
        }
        (long, out)
    }

    /// Writer tick: writes what `take` gives.
    pub(crate) fn publish(&self, w: &crate::writer::Writer, now: u64) {
        let (long, rest) = self.take(now, w.is_stopping());
        if !long.is_empty() {
            w.write_now(&long);
        }
        for r in rest {
            w.emit(&r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use exception_phase as ph;

    const MS: u64 = 1_000_000;

    fn throw(c: &ExceptionCountsState, ts: u64, tid: u32, stack: Vec<u64>, epoch: u32) -> Option<Record> {
        c.thrown(Throw {
            ts,
            os_tid: tid,
            thread: 0x100 + tid as u64,
            class: 7,
            type_name: "E".into(),
            stack,
            epoch,
            rethrow: false,
        })
    }

    fn rows(records: &[Record]) -> Vec<(u64, ExceptionRow)> {
        records
            .iter()
            .filter_map(|r| match r {
                Record::ExceptionCounts(c) => {
                    Some(c.unpack().unwrap().into_iter().map(|x| (c.ts, x)).collect::<Vec<_>>())
                }
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Throw on `tid`, search two frames, run a filter and a finally, catch in `catcher`.
    fn throw_and_catch(c: &ExceptionCountsState, ts: u64, tid: u32, stack: Vec<u64>, catcher: u64) -> Option<Record> {
        assert!(throw(c, ts, tid, stack, 0).is_none());
        for (p, f) in [(ph::SEARCH_ENTER, 50), (ph::SEARCH_ENTER, 51), (ph::FILTER_ENTER, 51), (ph::FINALLY_ENTER, 50)]
        {
            assert!(c.phase(ts, tid, p, f, 0).is_none());
        }
        c.phase(ts + 1, tid, ph::CATCHER_ENTER, catcher, 0)
    }

    #[test]
    fn caught_exceptions_are_counted_per_interval_thread_site_stack_and_catcher() {
        let c = ExceptionCountsState::default();
        assert!(throw_and_catch(&c, 10 * MS, 1, vec![50, 51], 51).is_none());
        assert!(throw_and_catch(&c, 20 * MS, 1, vec![], 51).is_none());
        assert!(throw_and_catch(&c, 30 * MS, 1, vec![], 51).is_none());
        assert!(throw_and_catch(&c, 40 * MS, 2, vec![], 51).is_none());
        assert!(throw_and_catch(&c, 150 * MS, 2, vec![], 51).is_none());
        // Interval 0 is not over at 50 ms: the definitions only.
        let (long, first) = c.take(50 * MS, false);
        assert!(long.is_empty());
        assert_eq!(
            first,
            vec![
                ExceptionType { id: 1, class: 7, type_name: "E".into() }.into(),
                ExceptionStack { id: 1, stack: vec![50, 51] }.into(),
            ]
        );
        let (_, second) = c.take(120 * MS, false);
        let row = |tid, stack, first_ns, last_ns, count| ExceptionRow {
            os_tid: tid,
            type_id: 1,
            site: 50,
            stack,
            catcher: 51,
            first_ns,
            last_ns,
            count,
            search_frames: 2 * count,
            filters: count,
            unwind_frames: 0,
            finallies: count,
            rethrown: 0,
        };
        assert_eq!(
            rows(&second),
            vec![
                (0, row(1, 0, 20 * MS, 30 * MS, 2)),
                (0, row(1, 1, 10 * MS, 10 * MS, 1)),
                (0, row(2, 0, 40 * MS, 40 * MS, 1)),
            ]
        );
        let (_, last) = c.take(130 * MS, true);
        assert_eq!(rows(&last), vec![(100 * MS, row(2, 0, 150 * MS, 150 * MS, 1))]);
        assert!(c.take(400 * MS, true).1.is_empty());
    }

    #[test]
    fn exceptions_in_flight_long_are_written_on_their_own_and_so_is_their_catch() {
        let c = ExceptionCountsState::default();
        assert!(throw(&c, 10 * MS, 3, vec![60], 0).is_none());
        assert!(c.phase(11 * MS, 3, ph::SEARCH_ENTER, 60, 0).is_none());
        // Not yet long.
        assert!(c.take(50 * MS, false).0.is_empty());
        let (long, _) = c.take(10 * MS + LONG_IN_FLIGHT_NS, false);
        let thrown = ExceptionThrown {
            ts: 10 * MS,
            os_tid: 3,
            thread: 0x103,
            class: 7,
            type_name: "E".into(),
            stack: vec![60],
            rethrow: false,
        };
        assert_eq!(long, vec![thrown.clone().into()]);
        // Written once.
        assert!(c.take(500 * MS, false).0.is_empty());
        let caught = c.phase(600 * MS, 3, ph::CATCHER_ENTER, 61, 0);
        assert_eq!(
            caught,
            Some(
                ExceptionCaught {
                    ts: 600 * MS,
                    os_tid: 3,
                    function: 61,
                    site: 60,
                    search_frames: 1,
                    filters: 0,
                    unwind_frames: 0,
                    finallies: 0
                }
                .into()
            )
        );
        assert!(rows(&c.take(700 * MS, true).1).is_empty());
        // In flight at the end: written, whatever its age.
        assert!(throw(&c, 800 * MS, 4, vec![], 0).is_none());
        let (long, _) = c.take(801 * MS, true);
        assert!(matches!(long.as_slice(), [Record::ExceptionThrown(t)] if t.ts == 800 * MS && t.os_tid == 4));
    }

    #[test]
    fn a_catch_in_another_epoch_or_generation() {
        let c = ExceptionCountsState::default();
        // Thrown in epoch 0, caught in epoch 1: not followed, its throw written on its own.
        assert!(throw(&c, 10 * MS, 5, vec![], 0).is_none());
        let r = c.phase(20 * MS, 5, ph::CATCHER_ENTER, 9, 1);
        assert!(matches!(r, Some(Record::ExceptionThrown(t)) if t.ts == 10 * MS));
        // Throws on both sides of a mode change go to separate rows.
        assert!(throw_and_catch(&c, 30 * MS, 5, vec![], 9).is_none());
        c.next_generation();
        assert!(throw_and_catch(&c, 40 * MS, 5, vec![], 9).is_none());
        let got = rows(&c.take(200 * MS, false).1);
        assert_eq!(
            got.iter().map(|(_, r)| (r.first_ns, r.count)).collect::<Vec<_>>(),
            vec![(30 * MS, 1), (40 * MS, 1)]
        );
        // A catch with no throw seen is ignored.
        assert!(c.phase(50 * MS, 6, ph::CATCHER_ENTER, 9, 1).is_none());
    }

    #[test]
    fn rethrows_get_rows_of_their_own() {
        let c = ExceptionCountsState::default();
        // A throw caught in 51, thrown again (the same object) and caught in 52, twice over.
        for ts in [10 * MS, 20 * MS] {
            for (rethrow, catcher) in [(false, 51), (true, 52)] {
                let t = Throw {
                    ts,
                    os_tid: 1,
                    thread: 0x101,
                    class: 7,
                    type_name: "E".into(),
                    stack: vec![],
                    epoch: 0,
                    rethrow,
                };
                assert!(c.thrown(t).is_none());
                assert!(c.phase(ts, 1, ph::SEARCH_ENTER, 50, 0).is_none());
                assert!(c.phase(ts + 1, 1, ph::CATCHER_ENTER, catcher, 0).is_none());
            }
        }
        let got: Vec<(u64, u64, u64)> =
            rows(&c.take(200 * MS, false).1).iter().map(|(_, r)| (r.catcher, r.count, r.rethrown)).collect();
        assert_eq!(got, vec![(51, 2, 0), (52, 2, 2)]);
    }
}
