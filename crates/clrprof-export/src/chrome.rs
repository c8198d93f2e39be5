//! Chrome's Trace Event Format (JSON) for Perfetto (ui.perfetto.dev) and chrome://tracing: a
//! timeline per thread. A `--flow` trace gives one begin/end pair per real call; otherwise the
//! sampled stacks become slices (consecutive samples that share frames merge into one slice per
//! frame). GCs are slices on the thread that ran them, exceptions instant events, thread and process
//! names metadata. Times are microseconds since the process started.

use std::io::Write;

use clrprof_model::samples::SampleWeight;
use clrprof_model::{FrameId, Metric, Profile};
use clrprof_query::select;
use serde_json::{json, Value};

use super::{ExportInput, Exporter, Result};

pub struct Chrome;

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Slices of one thread's samples: a frame stays open while consecutive samples keep it (and
/// everything below it) on the stack. A sample stands for the `ns` before its time stamp; a gap
/// longer than the samples themselves closes every frame.
fn sample_slices(p: &Profile, pid: u32, tid: u32, samples: &[(u64, u64, Vec<FrameId>)], out: &mut Vec<Value>) {
    let name = |f: FrameId| p.costs.stacks.frames[f.0 as usize].name.as_str();
    let mut open: Vec<(FrameId, u64)> = Vec::new();
    let mut last_end = 0u64;
    let close = |open: &mut Vec<(FrameId, u64)>, keep: usize, end: u64, out: &mut Vec<Value>| {
        while open.len() > keep {
            let (f, start) = open.pop().unwrap_or((FrameId(0), end));
            out.push(json!({
                "ph": "X", "name": name(f), "cat": "sample", "pid": pid, "tid": tid,
                "ts": us(start), "dur": us(end.saturating_sub(start)),
            }));
        }
    };
    for (ts, ns, frames) in samples {
        let start = ts.saturating_sub(*ns);
        let common =
            if start > last_end + ns { 0 } else { open.iter().zip(frames).take_while(|(a, b)| a.0 == **b).count() };
        close(&mut open, common, last_end, out);
        let from = if open.is_empty() { start } else { start.max(last_end) };
        for f in &frames[common..] {
            open.push((*f, from));
        }
        last_end = *ts;
    }
    close(&mut open, 0, last_end, out);
}

/// The document for a profile, a weight (CPU or wall samples) and a thread selection.
pub fn document(p: &Profile, metric: Metric, threads: &select::Threads) -> Value {
    let pid = p.process.pid;
    let mut ev: Vec<Value> = vec![json!({
        "ph": "M", "name": "process_name", "pid": pid,
        "args": { "name": select::short_command(&p.process.command_line) },
    })];
    let mut tids: Vec<u32> = p.threads.iter().filter_map(|t| t.os_tid).filter(|&t| threads.contains(t)).collect();
    tids.sort_unstable();
    tids.dedup();
    for &tid in &tids {
        let name = select::thread_name(p, tid);
        ev.push(json!({
            "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
            "args": { "name": if name.is_empty() { format!("thread {tid}") } else { name } },
        }));
    }
    if !p.flow.is_empty() {
        let names: std::collections::HashMap<u64, &str> = p.functions.iter().map(|f| (f.id, f.name.as_str())).collect();
        for t in p.flow.iter().filter(|t| threads.contains(t.os_tid)) {
            for e in t.events() {
                let name = names.get(&e.function).copied().unwrap_or("<unknown function>");
                let ph = if e.kind == 0 { "B" } else { "E" };
                ev.push(json!({ "ph": ph, "name": name, "cat": "call", "pid": pid, "tid": t.os_tid, "ts": us(e.ts) }));
            }
        }
    } else {
        let weight = if metric == Metric::Wall { SampleWeight::Wall } else { SampleWeight::Cpu };
        for &tid in &tids {
            let samples: Vec<(u64, u64, Vec<FrameId>)> = p
                .samples
                .iter()
                .filter(|s| s.os_tid == tid && s.weight == weight)
                .map(|s| (s.ts, s.ns, p.costs.stacks.frames_of(s.stack)))
                .collect();
            sample_slices(p, pid, tid, &samples, &mut ev);
        }
    }
    for g in p.events.gcs.iter().filter(|g| threads.contains(g.os_tid)) {
        ev.push(json!({
            "ph": "X", "name": format!("GC gen{} ({})", g.generation, g.reason), "cat": "gc",
            "pid": pid, "tid": g.os_tid, "ts": us(g.start_ns), "dur": us(g.duration_ns),
            "args": { "pause_ms": g.pause_ns as f64 / 1e6, "background": g.background },
        }));
    }
    let times = &p.events.times;
    for &(ts, tid) in times.throws.iter().chain(&times.sampled_throws).filter(|(_, t)| threads.contains(*t)) {
        ev.push(json!({ "ph": "i", "s": "t", "name": "exception", "cat": "exception", "pid": pid, "tid": tid, "ts": us(ts) }));
    }
    json!({
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "otherData": {
            "command_line": p.process.command_line,
            "runtime_version": p.process.runtime_version,
            "exporter": format!("clrprof {}", env!("CARGO_PKG_VERSION")),
        },
    })
}

impl Exporter for Chrome {
    fn extension(&self) -> &'static str {
        "trace.json"
    }

    fn write(&self, inp: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        serde_json::to_writer(&mut *out, &document(inp.profile, inp.stacks.metric, &inp.threads))?;
        writeln!(out)?;
        Ok(())
    }
}
