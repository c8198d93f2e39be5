//! IP → managed function, from the native code ranges `FunctionCompiled` records carry (every
//! code version: JIT tiers, ReadyToRun code).

use crate::process::Function;

/// Sorted, non-empty code ranges `[start, end)` with their FunctionID.
#[derive(Clone, Debug, Default)]
pub struct CodeMap {
    ranges: Vec<(u64, u64, u64)>,
}

impl CodeMap {
    pub fn from_functions(functions: &[Function]) -> CodeMap {
        Self::from_functions_and(functions, &[])
    }

    /// The functions' code plus more ranges `(start, size, FunctionID)` (`CodeRange` records).
    pub fn from_functions_and(functions: &[Function], more: &[(u64, u64, u64)]) -> CodeMap {
        let mut ranges: Vec<(u64, u64, u64)> = functions
            .iter()
            .flat_map(|f| {
                f.code.iter().filter(|c| c.0 != 0 && c.1 != 0).map(move |&(s, n)| (s, s.saturating_add(n), f.id))
            })
            .chain(more.iter().filter(|r| r.0 != 0 && r.1 != 0).map(|&(s, n, id)| (s, s.saturating_add(n), id)))
            .collect();
        ranges.sort_unstable();
        ranges.dedup();
        CodeMap { ranges }
    }

    /// The function whose code contains `ip` (the latest-starting range that contains it).
    pub fn lookup(&self, ip: u64) -> Option<u64> {
        let i = self.ranges.partition_point(|r| r.0 <= ip);
        // Ranges can overlap only when code was freed and reused (collectible code); prefer the
        // closest start, and look back a little for a containing range.
        self.ranges[..i].iter().rev().take(4).find(|r| ip < r.1).map(|r| r.2)
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_up_every_code_version() {
        let f = |id, code: Vec<(u64, u64)>| Function { id, code, ..Default::default() };
        let m = CodeMap::from_functions(&[
            f(1, vec![(0x1000, 0x10), (0x5000, 0x20)]),
            f(2, vec![(0x2000, 0x8)]),
            f(3, vec![(0, 0)]),
        ]);
        assert_eq!(m.len(), 3);
        assert_eq!(m.lookup(0x1000), Some(1));
        assert_eq!(m.lookup(0x100f), Some(1));
        assert_eq!(m.lookup(0x1010), None);
        assert_eq!(m.lookup(0x5010), Some(1));
        assert_eq!(m.lookup(0x2007), Some(2));
        assert_eq!(m.lookup(0x10), None);
    }
}
