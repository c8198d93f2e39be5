//! speedscope JSON (https://www.speedscope.app/file-format-schema.json): shared frames, one
//! sampled profile merged over the selected threads, then one profile per thread. A frame's `file`
//! is its module, or its source file with `line` in a profile built with lines.

use std::collections::HashMap;
use std::io::Write;

use clrprof_model::FrameId;
use serde_json::{json, Value};

use super::{ExportInput, Exporter, Result};
use clrprof_query::weighted_stacks::StackSample;

pub struct Speedscope;

impl Exporter for Speedscope {
    fn extension(&self) -> &'static str {
        "speedscope.json"
    }

    fn write(&self, inp: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        let mut index: HashMap<FrameId, usize> = HashMap::new();
        let mut frames: Vec<Value> = Vec::new();
        let mut profile = |name: String, samples: &[StackSample]| -> Value {
            let mut stacks = Vec::with_capacity(samples.len());
            let mut weights = Vec::with_capacity(samples.len());
            for s in samples {
                let stack: Vec<usize> = s
                    .frames
                    .iter()
                    .map(|&f| {
                        *index.entry(f).or_insert_with(|| {
                            let fr = &inp.profile.costs.stacks.frames[f.0 as usize];
                            let mut v = json!({ "name": inp.frame_name(f) });
                            if let Some(l) = &fr.line {
                                // A frame at a source line: its file and line (1-based).
                                v["file"] = json!(l.file);
                                v["line"] = json!(l.line);
                            } else if !fr.module.is_empty() {
                                v["file"] = json!(fr.module);
                            }
                            frames.push(v);
                            frames.len() - 1
                        })
                    })
                    .collect();
                stacks.push(stack);
                weights.push(s.value);
            }
            let total: u64 = weights.iter().fold(0, |a, &w| a.saturating_add(w));
            json!({
                "type": "sampled",
                "name": name,
                "unit": inp.stacks.value_unit,
                "startValue": 0,
                "endValue": total,
                "samples": stacks,
                "weights": weights,
            })
        };
        let mut profiles = vec![profile(format!("all threads — {}", inp.stacks.weight_name), &inp.stacks.merged)];
        for t in &inp.stacks.threads {
            let (tid, name, samples) = (t.os_tid, &t.name, &t.stacks);
            let label = if name.is_empty() { format!("thread {tid}") } else { format!("thread {tid} ({name})") };
            profiles.push(profile(format!("{label} — {}", inp.stacks.weight_name), samples));
        }
        let doc = json!({
            "$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": { "frames": frames },
            "profiles": profiles,
            "name": inp.title(),
            "activeProfileIndex": 0,
            "exporter": format!("clrprof {}", env!("CARGO_PKG_VERSION")),
        });
        serde_json::to_writer(&mut *out, &doc)?;
        writeln!(out)?;
        Ok(())
    }
}
