//! speedscope JSON (https://www.speedscope.app/file-format-schema.json): shared frames, one
//! sampled profile merged over the selected threads, then one profile per thread. A frame's `file`
//! is its module, or its source file with `line` in a profile built with lines.
//!
//! Written as it is laid out, keys in sorted order (the document's form when it was one
//! `serde_json::Value`): a frame index per stack frame as a JSON value took 32 bytes or more, 15 GB
//! for a 194 MiB instrumented trace of the C# compiler.

use std::collections::HashMap;
use std::io::Write;

use clrprof_model::FrameId;

use super::{ExportInput, Exporter, Result};
use clrprof_query::weighted_stacks::{thread_stacks, Needed, StackSample};

pub struct Speedscope;

/// `s` as a JSON string.
fn text(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

impl Exporter for Speedscope {
    fn extension(&self) -> &'static str {
        "speedscope.json"
    }

    fn stacks_needed(&self) -> Needed {
        Needed::MergedThenEachThread
    }

    fn write(&self, inp: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        // Frames are numbered as the profiles first use them, and listed after them.
        let mut index: HashMap<FrameId, usize> = HashMap::new();
        let mut frames: Vec<FrameId> = Vec::new();
        write!(
            out,
            "{{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\"activeProfileIndex\":0,\"exporter\":{},\"name\":{},\"profiles\":[",
            text(&format!("clrprof {}", env!("CARGO_PKG_VERSION"))),
            text(&inp.title())
        )?;
        let mut profile = |out: &mut dyn Write, first: bool, name: String, samples: &[StackSample]| -> Result<()> {
            let total: u64 = samples.iter().fold(0, |a, s| a.saturating_add(s.value));
            let sep = if first { "" } else { "," };
            write!(out, "{sep}{{\"endValue\":{total},\"name\":{},\"samples\":[", text(&name))?;
            for (i, s) in samples.iter().enumerate() {
                out.write_all(if i == 0 { b"[" } else { b",[" })?;
                for (j, &f) in s.frames.iter().enumerate() {
                    let k = *index.entry(f).or_insert_with(|| {
                        frames.push(f);
                        frames.len() - 1
                    });
                    if j > 0 {
                        out.write_all(b",")?;
                    }
                    write!(out, "{k}")?;
                }
                out.write_all(b"]")?;
            }
            write!(
                out,
                "],\"startValue\":0,\"type\":\"sampled\",\"unit\":{},\"weights\":[",
                text(inp.stacks.value_unit)
            )?;
            for (i, s) in samples.iter().enumerate() {
                write!(out, "{}{}", if i == 0 { "" } else { "," }, s.value)?;
            }
            out.write_all(b"]}")?;
            Ok(())
        };
        profile(out, true, format!("all threads — {}", inp.stacks.weight_name), &inp.stacks.merged)?;
        // One thread's stacks built at a time (held together with the merged ones they were
        // 6.5× the size of an instrumented trace).
        for t in thread_stacks(inp.profile, inp.stacks.metric, &inp.threads) {
            let (tid, name, samples) = (t.os_tid, &t.name, &t.stacks);
            let label = if name.is_empty() { format!("thread {tid}") } else { format!("thread {tid} ({name})") };
            profile(out, false, format!("{label} — {}", inp.stacks.weight_name), samples)?;
        }
        out.write_all(b"],\"shared\":{\"frames\":[")?;
        for (i, &f) in frames.iter().enumerate() {
            let fr = &inp.profile.costs.stacks.frames[f.0 as usize];
            out.write_all(if i == 0 { b"{" } else { b",{" })?;
            if let Some(l) = &fr.line {
                // A frame at a source line: its file and line (1-based).
                write!(out, "\"file\":{},\"line\":{},", text(&l.file), l.line)?;
            } else if !fr.module.is_empty() {
                write!(out, "\"file\":{},", text(&fr.module))?;
            }
            write!(out, "\"name\":{}}}", text(&inp.frame_name(f)))?;
        }
        out.write_all(b"]}}\n")?;
        Ok(())
    }
}
