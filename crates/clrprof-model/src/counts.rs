//! Ingestion of `record --count`: exact per-method call counts from IL probes. Each counted method
//! definition is one counter slot, named by the FunctionID of its first compilation; the agent
//! writes count deltas per slot. In the cost tree each slot's calls sit on a one-frame stack (the
//! method as its own root, thread 0: the probes count per process, not per thread), so the summary
//! and hot spots show them as exact CALLS; no time, no callers.

use std::collections::HashMap;

use clrprof_trace::{CountDeltas, CountInfo, CountMethod};

use crate::instrumented::Instrumentation;
use crate::stacks::{Cost, CostTree, FrameKey};
use crate::time::TimeRange;

/// A method the probes did not count, and why (`clrprof_trace::count_uncounted`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Uncounted {
    pub function: u64,
    pub reason: u8,
    /// The name the agent gave (`attach --count` names what it selected before any function of it
    /// exists: `function` 0); empty: the function's own.
    pub name: String,
}

impl Uncounted {
    /// Its name: the agent's, else the function's in `names`, else `function 0x…`.
    pub fn name_in(&self, names: &HashMap<u64, &str>) -> String {
        if !self.name.is_empty() {
            return self.name.clone();
        }
        names.get(&self.function).map_or_else(|| format!("function 0x{:x}", self.function), |n| n.to_string())
    }
}

/// Readable reason of an uncounted method.
pub fn uncounted_reason(reason: u8) -> &'static str {
    use clrprof_trace::count_uncounted::*;
    match reason {
        INTRINSIC => "the runtime substitutes its IL (intrinsic)",
        UNPARSEABLE => "body not understood",
        CAPACITY => "past the counter capacity",
        NO_PROBE_TOKEN => "no probe reference in its module",
        REFUSED => "the runtime refused the new body",
        OUT_OF_SCOPE => "outside the scope",
        _ => "unknown reason",
    }
}

/// The FunctionID-like id of a generic method definition's counter (its instantiations share
/// it): this bit and the slot. Real FunctionIDs are user-space addresses, below it.
pub const DEFINITION_ID: u64 = 1 << 63;

#[derive(Clone, Default)]
pub struct CountIngest {
    /// Slot → (FunctionID of its first compilation, definition name when it differs).
    slots: HashMap<u32, (u64, String)>,
    deltas: Vec<(u64, u32, u64)>,
    pub problems: u64,
}

impl CountIngest {
    pub fn info(r: &CountInfo) -> Instrumentation {
        let split = |s: &str| s.split(';').filter(|p| !p.is_empty()).map(String::from).collect();
        Instrumentation {
            il_probes: true,
            counts_only: true,
            include: split(&r.include),
            exclude: split(&r.exclude),
            count_scope: r.scope.clone(),
            ..Default::default()
        }
    }

    pub fn method(&mut self, i: Option<&mut Instrumentation>, r: &CountMethod) {
        if r.reason == clrprof_trace::count_uncounted::COUNTED && r.slot != u32::MAX {
            // A slot said again (attach --count: once named, again with its function) counts once.
            let again = self.slots.insert(r.slot, (r.function, r.name.clone())).is_some();
            if let Some(i) = i {
                i.hooked_functions += u64::from(!again);
                i.hooked.insert(if r.name.is_empty() { r.function } else { DEFINITION_ID | r.slot as u64 });
            }
        } else if let Some(i) = i {
            if r.reason == clrprof_trace::count_uncounted::OUT_OF_SCOPE {
                i.filtered_functions += 1;
            } else {
                i.uncounted.push(Uncounted { function: r.function, reason: r.reason, name: r.name.clone() });
            }
        }
    }

    pub fn deltas(&mut self, r: &CountDeltas) {
        if r.slots.len() != r.counts.len() {
            self.problems += 1;
            return;
        }
        self.deltas.extend(r.slots.iter().zip(&r.counts).map(|(&s, &c)| (r.ts, s, c)));
    }

    /// Adds the calls counted inside `range` to the cost tree.
    pub fn add_to(&self, tree: &mut CostTree, range: TimeRange) -> u64 {
        let mut lost = 0;
        let mut per_slot: HashMap<u32, u64> = HashMap::new();
        for &(ts, slot, calls) in self.deltas.iter().filter(|d| range.contains(d.0)) {
            let _ = ts;
            *per_slot.entry(slot).or_default() += calls;
        }
        let mut slots: Vec<(u32, u64)> = per_slot.into_iter().collect();
        slots.sort_unstable();
        for (slot, calls) in slots {
            let Some((f, name)) = self.slots.get(&slot) else {
                lost += 1;
                continue;
            };
            let function = if name.is_empty() { *f } else { DEFINITION_ID | slot as u64 };
            let frame = tree.stacks.intern_frame(FrameKey::Function(function));
            let stack = tree.stacks.intern_call(None, frame);
            tree.add(0, stack, &Cost { calls, ..Default::default() });
        }
        lost
    }
}

impl CountIngest {
    /// Function table entries of generic method definitions (their counters' frames): the first
    /// compiled instantiation's entry, with the definition's id and name.
    pub fn definitions(&self, functions: &HashMap<u64, crate::Function>) -> Vec<crate::Function> {
        let mut out: Vec<crate::Function> = self
            .slots
            .iter()
            .filter(|(_, (_, name))| !name.is_empty())
            .map(|(&slot, (f, name))| {
                let mut def = functions.get(f).cloned().unwrap_or_default();
                def.id = DEFINITION_ID | slot as u64;
                def.class_name = name.rsplit_once('.').map(|(c, _)| c.to_string()).unwrap_or_default();
                def.name = name.clone();
                def
            })
            .collect();
        out.sort_by_key(|f| f.id);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_add_up_per_slot_on_one_frame_stacks() {
        let mut c = CountIngest::default();
        let mut i = CountIngest::info(&CountInfo {
            capacity: 8,
            include: "A.*".into(),
            exclude: String::new(),
            scope: "all".into(),
        });
        assert!(i.il_probes && i.counts_only && !i.inlining_disabled);
        c.method(
            Some(&mut i),
            &CountMethod { function: 10, module: 1, token: 0x0600_0001, slot: 0, reason: 0, name: String::new() },
        );
        c.method(
            Some(&mut i),
            &CountMethod {
                function: 11,
                module: 1,
                token: 0x0600_0002,
                slot: u32::MAX,
                reason: 1,
                name: String::new(),
            },
        );
        c.deltas(&CountDeltas { ts: 5, slots: vec![0], counts: vec![7] });
        c.deltas(&CountDeltas { ts: 9, slots: vec![0, 3], counts: vec![2, 1] });
        let mut t = CostTree::default();
        assert_eq!(c.add_to(&mut t, TimeRange::ALL), 1, "slot 3 was never named");
        let merged = t.merged(None);
        let total: u64 = merged.iter().map(|c| c.calls).sum();
        assert_eq!(total, 9);
        assert_eq!(i.uncounted, vec![Uncounted { function: 11, reason: 1, name: String::new() }]);
        // attach --count names what it left out before any function of it exists.
        c.method(
            Some(&mut i),
            &CountMethod {
                function: 0,
                module: 1,
                token: 0x0600_0009,
                slot: u32::MAX,
                reason: 1,
                name: "S.Len".into(),
            },
        );
        let names = HashMap::from([(11u64, "A.B.C")]);
        let named: Vec<String> = i.uncounted.iter().map(|u| u.name_in(&names)).collect();
        assert_eq!(named, ["A.B.C", "S.Len"]);
        // A generic definition: named as declared, under its own id, whatever instantiation came first.
        c.method(
            Some(&mut i),
            &CountMethod { function: 12, module: 1, token: 0x0600_0003, slot: 1, reason: 0, name: "A.G.Id<T>".into() },
        );
        let mut fns = HashMap::new();
        fns.insert(12, crate::Function { id: 12, name: "A.G.Id<int>".into(), module: 1, ..Default::default() });
        let defs = c.definitions(&fns);
        assert_eq!(defs.len(), 1);
        assert_eq!(
            (defs[0].id, defs[0].name.as_str(), defs[0].class_name.as_str()),
            (DEFINITION_ID | 1, "A.G.Id<T>", "A.G")
        );
        assert!(i.hooked.contains(&(DEFINITION_ID | 1)));
        assert!(i.hooked.contains(&10));
    }
}
