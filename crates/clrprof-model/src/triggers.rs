//! Collection triggers that fired in the run (`record --trigger`, `TriggerFired` and
//! `TriggerEnded` records): the rule, when, what was measured, and what the fire did.

use serde::Serialize;

/// One fire of a trigger rule.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TriggerFire {
    /// Numbers the run's fires from 1.
    pub seq: u32,
    /// When the rule was met, nanoseconds since the agent started.
    pub ts_ns: u64,
    /// The rule's canonical text (`gc-pause>50ms`).
    pub rule: String,
    /// What was measured, in `unit`.
    pub value: u64,
    pub unit: String,
    /// The measure in words.
    pub detail: String,
    /// `window` (CPU sampled at `rate_hz` for `window_ns`) or `heap` (a heap snapshot).
    pub action: String,
    pub rate_hz: u32,
    pub window_ns: u64,
    /// When the window ended or the snapshot was written; `None` when the trace ended first.
    pub ended_ns: Option<u64>,
    /// The heap snapshot's number in the trace (`heap` action), `None` when none was taken.
    pub snapshot: Option<u32>,
}

impl TriggerFire {
    pub(crate) fn from_record(f: &clrprof_trace::TriggerFired) -> TriggerFire {
        let unit = clrprof_trace::trigger::Rule::parse(&f.rule).map(|r| r.unit()).unwrap_or("");
        TriggerFire {
            seq: f.seq,
            ts_ns: f.ts,
            rule: f.rule.clone(),
            value: f.value,
            unit: unit.to_string(),
            detail: f.detail.clone(),
            action: if f.action == 1 { "heap" } else { "window" }.to_string(),
            rate_hz: f.rate_hz,
            window_ns: f.window_ns,
            ended_ns: None,
            snapshot: None,
        }
    }

    pub(crate) fn ended(&mut self, e: &clrprof_trace::TriggerEnded) {
        self.ended_ns = Some(e.ts);
        if e.snapshot != 0 {
            self.snapshot = Some(e.snapshot);
        }
    }
}
