//! Call-site lines of instrumented calls: in a profile built with lines, each call-tree node's
//! caller frame is keyed by the line of the call that entered the node (its call site, a return
//! address resolved at the call instruction through the caller's IL-to-native map and PDB), so
//! the callers view, the call tree and every other view split a caller by the lines it calls
//! from, with exact call counts and times. A node's own frame stays per function (instrumentation
//! has no IP inside the callee); a site with no line keeps the caller's frame per function.

use crate::fasthash::FxHashMap;
use crate::instrumented::{SiteNode, NO_SITE};
use crate::lines::{LineContext, SourceLine};
use crate::samples::NativeSymbols;
use crate::stacks::{FrameKey, StackId, StackTable};

/// The stack of each entry of the call-site table (`sites`, parents before children): the path of
/// its ancestors, each at the line of the call into the next, then its own function.
pub(crate) fn site_stacks(
    sites: &[SiteNode],
    stacks: &mut StackTable,
    lines: &LineContext<'_>,
    symbols: &mut dyn NativeSymbols,
) -> Vec<StackId> {
    let mut cache: FxHashMap<(u64, u64), Option<SourceLine>> = FxHashMap::default();
    // Per entry: the path down to it (its stack) and the path above it (its parent's, with the
    // parent's frame at the line of this entry's call site).
    let mut stack_of: Vec<StackId> = Vec::with_capacity(sites.len());
    for n in sites {
        let above = match sites.get(n.parent as usize) {
            Some(p) if n.parent != NO_SITE => {
                let line = cache
                    .entry((p.function, n.site))
                    .or_insert_with(|| lines.call_site_line(symbols, p.function, n.site))
                    .clone();
                let frame = stacks.intern_frame_at(FrameKey::Function(p.function), line);
                let grand = stacks.nodes[stack_of[n.parent as usize].0 as usize].parent;
                Some(stacks.intern_call(grand, frame))
            }
            _ => None,
        };
        let frame = stacks.intern_frame(FrameKey::Function(n.function));
        stack_of.push(stacks.intern_call(above, frame));
    }
    stack_of
}
