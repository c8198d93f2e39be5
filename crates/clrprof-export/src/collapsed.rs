//! Folded stacks (Brendan Gregg's `stackcollapse` output, the lingua franca of flame graphs):
//! `root;caller;callee count` per line, merged over the selected threads. Counts are samples for
//! sampled weights.

use std::io::Write;

use super::{ExportInput, Exporter, Result};

pub struct Collapsed;

/// A frame name safe for the folded format (no `;`, no line breaks).
pub fn clean(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

impl Exporter for Collapsed {
    fn extension(&self) -> &'static str {
        "folded"
    }

    fn stacks_needed(&self) -> clrprof_query::weighted_stacks::Needed {
        clrprof_query::weighted_stacks::Needed::Merged
    }

    fn write(&self, inp: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        for s in &inp.stacks.merged {
            if s.samples == 0 {
                continue;
            }
            let line: Vec<String> = s.frames.iter().map(|&f| clean(&inp.frame_name(f))).collect();
            writeln!(out, "{} {}", line.join(";"), s.samples)?;
        }
        Ok(())
    }
}
