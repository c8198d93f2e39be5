//! Chrome's Trace Event Format (JSON) for Perfetto (ui.perfetto.dev) and chrome://tracing: a
//! timeline per thread. A `--flow` trace gives one begin/end pair per real call; otherwise the
//! sampled stacks become slices (consecutive samples that share frames merge into one slice per
//! frame). GCs are slices on the thread that ran them, exceptions instant events, thread and process
//! names metadata. Times are microseconds since the process started. The document is written
//! event by event as it is made: memory does not grow with the output.

use std::io::Write;

use clrprof_model::samples::SampleWeight;
use clrprof_model::{FrameId, Metric, Profile, StackId};
use clrprof_query::select;
use serde_json::{json, Value};

use super::{ExportInput, Exporter, Result};

pub struct Chrome;

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Writes the `traceEvents` array one event at a time, so that the output never has to fit in
/// memory (a sampled trace gives about one event per sample, a flow trace two per call).
struct Events<'w> {
    out: &'w mut dyn Write,
    first: bool,
}

impl Events<'_> {
    fn push(&mut self, e: Value) -> Result<()> {
        if !std::mem::replace(&mut self.first, false) {
            self.out.write_all(b",\n")?;
        }
        // An I/O error stays one (a closed pipe is recognised as such).
        serde_json::to_writer(&mut *self.out, &e).map_err(std::io::Error::from)?;
        Ok(())
    }
}

/// Slices of one thread's samples (in time order: `(ts, ns, stack)`): a frame stays open while
/// consecutive samples keep it (and everything below it) on the stack. A sample stands for the
/// `ns` before its time stamp; a gap longer than the samples themselves closes every frame.
fn sample_slices(
    p: &Profile,
    pid: u32,
    tid: u32,
    samples: impl Iterator<Item = (u64, u64, StackId)>,
    out: &mut Events<'_>,
) -> Result<()> {
    let frames = &p.costs.stacks.frames;
    let mut open: Vec<(FrameId, u64)> = Vec::new();
    let mut last_end = 0u64;
    let close = |open: &mut Vec<(FrameId, u64)>, keep: usize, end: u64, out: &mut Events<'_>| -> Result<()> {
        while open.len() > keep {
            let (f, start) = open.pop().unwrap_or((FrameId(0), end));
            let fr = &frames[f.0 as usize];
            let mut e = json!({
                "ph": "X", "name": fr.name, "cat": "sample", "pid": pid, "tid": tid,
                "ts": us(start), "dur": us(end.saturating_sub(start)),
            });
            if let Some(l) = &fr.line {
                // A frame at a source line: the name says where, the args give the file and line.
                e["name"] = json!(format!("{} ({}:{})", fr.name, select::file_name(&l.file), l.line));
                e["args"] = json!({ "url": l.file, "lineNumber": l.line });
            }
            out.push(e)?;
        }
        Ok(())
    };
    for (ts, ns, stack) in samples {
        let frames = p.costs.stacks.frames_of(stack);
        let start = ts.saturating_sub(ns);
        let common =
            if start > last_end + ns { 0 } else { open.iter().zip(&frames).take_while(|(a, b)| a.0 == **b).count() };
        close(&mut open, common, last_end, out)?;
        let from = if open.is_empty() { start } else { start.max(last_end) };
        for f in &frames[common..] {
            open.push((*f, from));
        }
        last_end = ts;
    }
    close(&mut open, 0, last_end, out)
}

/// Writes the document for a profile, a weight (CPU or wall samples) and a thread selection,
/// event by event.
pub fn write_document(p: &Profile, metric: Metric, threads: &select::Threads, out: &mut dyn Write) -> Result<()> {
    let pid = p.process.pid;
    out.write_all(b"{\"traceEvents\":[\n")?;
    let mut ev = Events { out, first: true };
    ev.push(json!({
        "ph": "M", "name": "process_name", "pid": pid,
        "args": { "name": select::short_command(&p.process.command_line) },
    }))?;
    let mut tids: Vec<u32> = p.threads.iter().filter_map(|t| t.os_tid).filter(|&t| threads.contains(t)).collect();
    tids.sort_unstable();
    tids.dedup();
    for &tid in &tids {
        let name = select::thread_name(p, tid);
        ev.push(json!({
            "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
            "args": { "name": if name.is_empty() { format!("thread {tid}") } else { name } },
        }))?;
    }
    if !p.flow.is_empty() {
        let names: std::collections::HashMap<u64, &str> = p.functions.iter().map(|f| (f.id, f.name.as_str())).collect();
        for t in p.flow.iter().filter(|t| threads.contains(t.os_tid)) {
            for e in t.events() {
                let name = names.get(&e.function).copied().unwrap_or("<unknown function>");
                let ph = if e.kind == 0 { "B" } else { "E" };
                ev.push(json!({ "ph": ph, "name": name, "cat": "call", "pid": pid, "tid": t.os_tid, "ts": us(e.ts) }))?;
            }
        }
    } else {
        let weight = if metric == Metric::Wall { SampleWeight::Wall } else { SampleWeight::Cpu };
        // Each thread's samples in time order, without copying them.
        let mut order: Vec<usize> = (0..p.samples.len()).filter(|&i| p.samples[i].weight == weight).collect();
        order.sort_by_key(|&i| (p.samples[i].os_tid, p.samples[i].ts));
        let mut at = 0;
        for &tid in &tids {
            while at < order.len() && p.samples[order[at]].os_tid < tid {
                at += 1;
            }
            let end = at + order[at..].iter().take_while(|&&i| p.samples[i].os_tid == tid).count();
            let samples = order[at..end].iter().map(|&i| (p.samples[i].ts, p.samples[i].ns, p.samples[i].stack));
            sample_slices(p, pid, tid, samples, &mut ev)?;
            at = end;
        }
    }
    for g in p.events.gcs.iter().filter(|g| threads.contains(g.os_tid)) {
        ev.push(json!({
            "ph": "X", "name": format!("GC gen{} ({})", g.generation, g.reason), "cat": "gc",
            "pid": pid, "tid": g.os_tid, "ts": us(g.start_ns), "dur": us(g.duration_ns),
            "args": { "pause_ms": g.pause_ns as f64 / 1e6, "background": g.background },
        }))?;
    }
    let times = &p.events.times;
    for &(ts, tid) in times.throws.iter().chain(&times.sampled_throws).filter(|(_, t)| threads.contains(*t)) {
        ev.push(
            json!({ "ph": "i", "s": "t", "name": "exception", "cat": "exception", "pid": pid, "tid": tid, "ts": us(ts) }),
        )?;
    }
    out.write_all(b"\n],\"displayTimeUnit\":\"ms\",\"otherData\":")?;
    serde_json::to_writer(
        &mut *out,
        &json!({
            "command_line": p.process.command_line,
            "runtime_version": p.process.runtime_version,
            "exporter": format!("clrprof {}", env!("CARGO_PKG_VERSION")),
        }),
    )
    .map_err(std::io::Error::from)?;
    out.write_all(b"}\n")?;
    Ok(())
}

impl Exporter for Chrome {
    fn extension(&self) -> &'static str {
        "trace.json"
    }

    fn stacks_needed(&self) -> clrprof_query::weighted_stacks::Needed {
        clrprof_query::weighted_stacks::Needed::None
    }

    fn write(&self, inp: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        write_document(inp.profile, inp.stacks.metric, &inp.threads, out)
    }
}
