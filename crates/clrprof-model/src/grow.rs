//! Growth of the large columns a trace fills (call-tree sums, node maps, stacks, cost tables).
//!
//! A `Vec` doubles when full: a column of 100 MB that needs one more entry takes 200 MB, half of it
//! never used, and a reader's peak is the sum of such columns. Past [`GENTLE_FROM`] entries these
//! columns grow by a quarter instead (at most a fifth of a column unused). Large blocks are
//! mapped pages, which the allocator moves on `realloc` without copying, so the more frequent
//! growth costs little.

/// Entries below which a column doubles as a `Vec` does.
const GENTLE_FROM: usize = 1 << 14;

/// Makes room in `v` for `more` entries, growing a large column by a quarter (or by `more`, when
/// that is larger) rather than doubling it.
pub(crate) fn reserve<T>(v: &mut Vec<T>, more: usize) {
    let need = v.len() + more;
    if need <= v.capacity() {
        return;
    }
    if v.len() < GENTLE_FROM {
        v.reserve(more);
    } else {
        v.reserve_exact(more.max(v.len() / 4));
    }
}

/// `v.push(x)`, growing as [`reserve`] does.
pub(crate) fn push<T>(v: &mut Vec<T>, x: T) {
    reserve(v, 1);
    v.push(x);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_columns_grow_by_a_quarter_small_ones_double() {
        let mut small: Vec<u32> = vec![0; 100];
        push(&mut small, 1);
        assert!(small.capacity() >= 200, "a small column doubles: {}", small.capacity());

        let mut large: Vec<u32> = vec![0; 1 << 20];
        push(&mut large, 1);
        assert_eq!(large.len(), (1 << 20) + 1);
        assert!(large.capacity() >= (1 << 20) + (1 << 18), "grown by a quarter: {}", large.capacity());
        assert!(large.capacity() < (1 << 20) * 3 / 2, "not doubled: {}", large.capacity());
        let cap = large.capacity();
        for _ in 0..(cap - large.len()) {
            push(&mut large, 2);
        }
        assert_eq!(large.capacity(), cap, "no growth while there is room");
    }
}
