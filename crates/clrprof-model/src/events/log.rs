//! The event log (`record --events`): one line per runtime event, indented by per-thread nesting.

use std::collections::HashMap;

use clrprof_trace::exception_phase as ph;

use crate::TimeRange;

/// One line of the event log.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct LogEvent {
    pub ts: u64,
    /// OS thread id (0 when the record does not say).
    pub os_tid: u32,
    pub what: String,
    /// +1 opens a nesting level, -1 closes one, 0 neither.
    pub nest: i8,
    /// Indentation depth on its thread (after opening, before closing).
    pub depth: u32,
}

/// The log's lines as they arrive (kept only when the trace was recorded with the log on).
#[derive(Clone, Debug, Default)]
pub(super) struct EventLog {
    pub enabled: bool,
    lines: Vec<LogEvent>,
}

impl EventLog {
    pub fn push(&mut self, ts: u64, os_tid: u32, what: String, nest: i8) {
        if self.enabled {
            self.lines.push(LogEvent { ts, os_tid, what, nest, depth: 0 });
        }
    }

    /// Drops the lines before `ts`. A later range's lines keep their text and times; their depth
    /// and the count of unpaired finishes no longer see the starts before `ts`.
    pub fn forget_before(&mut self, ts: u64) {
        self.lines.retain(|l| l.ts >= ts);
    }

    pub fn retained(&self) -> usize {
        self.lines.len()
    }

    /// The lines inside `range` in time order (stable), indented by their nesting over the whole
    /// log (a line keeps its depth whatever the range), and the finishes among them that matched
    /// no start.
    pub fn finish(&self, range: TimeRange) -> (Vec<LogEvent>, u64) {
        let mut order: Vec<&LogEvent> = self.lines.iter().collect();
        order.sort_by_key(|e| e.ts);
        nest_log(order, range)
    }
}

/// Log text and nesting of an exception phase.
pub(super) fn exception_log(phase: u8) -> (&'static str, i8) {
    match phase {
        ph::SEARCH_ENTER => ("exception search", 1),
        ph::SEARCH_LEAVE => ("exception search", -1),
        ph::FILTER_ENTER => ("exception filter", 1),
        ph::FILTER_LEAVE => ("exception filter", -1),
        ph::CATCHER_FOUND => ("exception catcher found", 0),
        ph::UNWIND_ENTER => ("exception unwind", 1),
        ph::UNWIND_LEAVE => ("exception unwind", -1),
        ph::FINALLY_ENTER => ("exception finally", 1),
        ph::FINALLY_LEAVE => ("exception finally", -1),
        ph::CATCHER_ENTER => ("exception catch", 1),
        ph::CATCHER_LEAVE => ("exception catch", -1),
        _ => ("exception step", 0),
    }
}

/// Name of a `COR_PRF_SUSPEND_REASON`.
pub(super) fn suspend_reason(r: u32) -> &'static str {
    match r {
        1 => "gc",
        2 => "appdomain shutdown",
        3 => "code pitching",
        4 => "shutdown",
        6 => "gc prep",
        7 => "debugger",
        8 => "other",
        9 => "profiler",
        _ => "other",
    }
}

/// Indents the log (sorted by time) by per-thread nesting and keeps the lines inside `range`.
/// A finish closes the innermost open start of the same name (closing any left open inside it).
/// The runtime reports no `ExceptionUnwindFunctionLeave` for the frame whose `catch` runs, so the
/// unwind of that frame is closed, marked as implied, after its catch. Returns the lines kept and
/// the finishes among them that matched no start.
fn nest_log(log: Vec<&LogEvent>, range: TimeRange) -> (Vec<LogEvent>, u64) {
    let mut open: HashMap<u32, Vec<&str>> = HashMap::new();
    let mut out = Vec::new();
    let mut unpaired = 0;
    for e in log {
        let keep = range.contains(e.ts);
        let st = open.entry(e.os_tid).or_default();
        let line = |what: String, nest: i8, depth: usize| LogEvent {
            ts: e.ts,
            os_tid: e.os_tid,
            what,
            nest,
            depth: depth as u32,
        };
        match e.nest {
            1 => {
                if keep {
                    out.push(line(e.what.clone(), 1, st.len()));
                }
                st.push(&e.what);
            }
            -1 => {
                // A finish names its start's event (the start may add details: `gc gen2 induced`).
                let Some(pos) = st.iter().rposition(|w| w.starts_with(e.what.as_str())) else {
                    if keep {
                        out.push(line(format!("{} (no matching start)", e.what), 0, st.len()));
                        unpaired += 1;
                    }
                    continue;
                };
                st.truncate(pos);
                if keep {
                    out.push(line(e.what.clone(), -1, st.len()));
                }
                if e.what == "exception catch" && st.last().is_some_and(|w| *w == "exception unwind") {
                    st.pop();
                    if keep {
                        out.push(line("exception unwind".into(), -1, st.len()));
                    }
                }
            }
            _ => {
                if keep {
                    out.push(line(e.what.clone(), e.nest, st.len()));
                }
            }
        }
    }
    (out, unpaired)
}
