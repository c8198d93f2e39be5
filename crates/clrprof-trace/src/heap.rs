//! The packed lists of the heap snapshot records (`HeapNodes`, `HeapEdges`, `HeapRoots`,
//! `HeapDependentEdges`): LEB128 varints, addresses as zigzag differences from the previous one
//! in the same record (the runtime walks the heap in address order, so most differences are
//! small), each record decodable on its own.
//!
//! - node: address, size, type id, number of references (the next that many of the snapshot's
//!   `HeapEdges` references, in order, are its own);
//! - edge: the referenced object's address;
//! - root: the rooted object's address, kind (one byte: [`root_kind`]), flags ([`root_flags`]),
//!   root id (a handle's address; 0 for stack and finalizer roots);
//! - dependent edge: the key's address, then the value's as a difference from the key.

use crate::records::{get_varint, put_varint};

/// One object of a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapNode {
    pub addr: u64,
    pub size: u64,
    pub type_id: u64,
    /// How many references it holds (its share of the snapshot's edges, in order).
    pub edges: u64,
}

/// One root of a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapRoot {
    pub object: u64,
    pub kind: u8,
    pub flags: u32,
    pub id: u64,
}

/// The runtime's root kinds (`GCRootKind` of `GCBulkRootEdge`).
pub mod root_kind {
    pub const STACK: u8 = 0;
    pub const FINALIZER: u8 = 1;
    pub const HANDLE: u8 = 2;
    pub const OTHER: u8 = 3;
}

/// The runtime's root flags (`GCRootFlags` of `GCBulkRootEdge`).
pub mod root_flags {
    pub const PINNING: u32 = 1;
    pub const WEAK: u32 = 2;
    pub const INTERIOR: u32 = 4;
    pub const REF_COUNTED: u32 = 8;
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends `v` as the difference from `*prev`, and makes it the new `*prev`.
fn put_delta(out: &mut Vec<u8>, prev: &mut u64, v: u64) {
    put_varint(out, zigzag(v.wrapping_sub(*prev) as i64));
    *prev = v;
}

fn get_delta(b: &[u8], at: &mut usize, prev: &mut u64) -> Option<u64> {
    let v = prev.wrapping_add(unzigzag(get_varint(b, at)?) as u64);
    *prev = v;
    Some(v)
}

/// Packs nodes incrementally (the agent adds them as a payload is parsed).
#[derive(Default)]
pub struct NodePacker {
    pub packed: Vec<u8>,
    pub count: u32,
    addr: u64,
    type_id: u64,
}

impl NodePacker {
    /// A packer with room for about `n` nodes (no reallocation while packing one event).
    pub fn with_capacity(n: usize) -> NodePacker {
        NodePacker { packed: Vec::with_capacity(n * 12), ..NodePacker::default() }
    }

    pub fn push(&mut self, n: &HeapNode) {
        put_delta(&mut self.packed, &mut self.addr, n.addr);
        put_varint(&mut self.packed, n.size);
        put_delta(&mut self.packed, &mut self.type_id, n.type_id);
        put_varint(&mut self.packed, n.edges);
        self.count += 1;
    }
}

/// Packs references (edges' target addresses) incrementally.
#[derive(Default)]
pub struct EdgePacker {
    pub packed: Vec<u8>,
    pub count: u32,
    prev: u64,
}

impl EdgePacker {
    /// A packer with room for about `n` references.
    pub fn with_capacity(n: usize) -> EdgePacker {
        EdgePacker { packed: Vec::with_capacity(n * 5), ..EdgePacker::default() }
    }

    pub fn push(&mut self, target: u64) {
        put_delta(&mut self.packed, &mut self.prev, target);
        self.count += 1;
    }
}

/// Packs roots incrementally.
#[derive(Default)]
pub struct RootPacker {
    pub packed: Vec<u8>,
    pub count: u32,
    object: u64,
    id: u64,
}

impl RootPacker {
    pub fn push(&mut self, r: &HeapRoot) {
        put_delta(&mut self.packed, &mut self.object, r.object);
        self.packed.push(r.kind);
        put_varint(&mut self.packed, r.flags as u64);
        put_delta(&mut self.packed, &mut self.id, r.id);
        self.count += 1;
    }
}

/// Packs dependent-handle pairs (key, value) incrementally.
#[derive(Default)]
pub struct DependentPacker {
    pub packed: Vec<u8>,
    pub count: u32,
    key: u64,
}

impl DependentPacker {
    pub fn push(&mut self, key: u64, value: u64) {
        put_delta(&mut self.packed, &mut self.key, key);
        let mut k = key;
        put_delta(&mut self.packed, &mut k, value);
        self.count += 1;
    }
}

/// Why a packed list does not decode: cut short, or a different number of items than its count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackError(pub String);

impl std::fmt::Display for PackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn check_end(b: &[u8], at: usize, count: u32, got: u32, what: &str) -> Result<(), PackError> {
    if got != count || at != b.len() {
        return Err(PackError(format!("{what}: {got} of {count} items decode from {at} of {} bytes", b.len())));
    }
    Ok(())
}

/// Decodes `count` nodes, calling `f` on each.
pub fn unpack_nodes(b: &[u8], count: u32, mut f: impl FnMut(HeapNode)) -> Result<(), PackError> {
    let (mut at, mut addr, mut type_id, mut got) = (0usize, 0u64, 0u64, 0u32);
    while got < count && at < b.len() {
        let one = (|| {
            let a = get_delta(b, &mut at, &mut addr)?;
            let size = get_varint(b, &mut at)?;
            let t = get_delta(b, &mut at, &mut type_id)?;
            let edges = get_varint(b, &mut at)?;
            Some(HeapNode { addr: a, size, type_id: t, edges })
        })();
        let Some(n) = one else { break };
        f(n);
        got += 1;
    }
    check_end(b, at, count, got, "heap nodes")
}

/// Decodes `count` edge targets, calling `f` on each.
pub fn unpack_edges(b: &[u8], count: u32, mut f: impl FnMut(u64)) -> Result<(), PackError> {
    let (mut at, mut prev, mut got) = (0usize, 0u64, 0u32);
    while got < count && at < b.len() {
        let Some(t) = get_delta(b, &mut at, &mut prev) else { break };
        f(t);
        got += 1;
    }
    check_end(b, at, count, got, "heap edges")
}

/// Decodes `count` roots, calling `f` on each.
pub fn unpack_roots(b: &[u8], count: u32, mut f: impl FnMut(HeapRoot)) -> Result<(), PackError> {
    let (mut at, mut object, mut id, mut got) = (0usize, 0u64, 0u64, 0u32);
    while got < count && at < b.len() {
        let one = (|| {
            let o = get_delta(b, &mut at, &mut object)?;
            let kind = *b.get(at)?;
            at += 1;
            let flags = u32::try_from(get_varint(b, &mut at)?).ok()?;
            let i = get_delta(b, &mut at, &mut id)?;
            Some(HeapRoot { object: o, kind, flags, id: i })
        })();
        let Some(r) = one else { break };
        f(r);
        got += 1;
    }
    check_end(b, at, count, got, "heap roots")
}

/// Decodes `count` dependent-handle pairs (key, value), calling `f` on each.
pub fn unpack_dependents(b: &[u8], count: u32, mut f: impl FnMut(u64, u64)) -> Result<(), PackError> {
    let (mut at, mut key, mut got) = (0usize, 0u64, 0u32);
    while got < count && at < b.len() {
        let one = (|| {
            let k = get_delta(b, &mut at, &mut key)?;
            let mut kk = k;
            let v = get_delta(b, &mut at, &mut kk)?;
            Some((k, v))
        })();
        let Some((k, v)) = one else { break };
        f(k, v);
        got += 1;
    }
    check_end(b, at, count, got, "heap dependent edges")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_edges_roots_and_pairs_round_trip() {
        let nodes = [
            HeapNode { addr: 0x7f00_0000_1000, size: 24, type_id: 0x7f10_0000_0040, edges: 2 },
            HeapNode { addr: 0x7f00_0000_1018, size: 1048, type_id: 0x7f10_0000_0080, edges: 0 },
            HeapNode { addr: 0x7f00_0000_0800, size: u64::MAX, type_id: 0, edges: u64::MAX },
        ];
        let mut p = NodePacker::default();
        nodes.iter().for_each(|n| p.push(n));
        let mut back = Vec::new();
        unpack_nodes(&p.packed, p.count, |n| back.push(n)).unwrap();
        assert_eq!(back, nodes);
        assert!(p.packed.len() < 3 * 32, "{} bytes", p.packed.len());

        let targets = [0x7f00_0000_1018u64, 0x7f00_0000_1000, 0, u64::MAX];
        let mut e = EdgePacker::default();
        targets.iter().for_each(|&t| e.push(t));
        let mut back = Vec::new();
        unpack_edges(&e.packed, e.count, |t| back.push(t)).unwrap();
        assert_eq!(back, targets);

        let roots = [
            HeapRoot { object: 0x7f00_0000_1000, kind: root_kind::HANDLE, flags: root_flags::PINNING, id: 0x55_0000 },
            HeapRoot { object: 0x10, kind: root_kind::STACK, flags: 0, id: 0 },
        ];
        let mut r = RootPacker::default();
        roots.iter().for_each(|x| r.push(x));
        let mut back = Vec::new();
        unpack_roots(&r.packed, r.count, |x| back.push(x)).unwrap();
        assert_eq!(back, roots);

        let mut d = DependentPacker::default();
        d.push(0x7f00_0000_2000, 0x7f00_0000_1000);
        d.push(5, u64::MAX);
        let mut back = Vec::new();
        unpack_dependents(&d.packed, d.count, |k, v| back.push((k, v))).unwrap();
        assert_eq!(back, [(0x7f00_0000_2000, 0x7f00_0000_1000), (5, u64::MAX)]);
    }

    #[test]
    fn a_cut_or_miscounted_list_is_an_error() {
        let mut p = NodePacker::default();
        p.push(&HeapNode { addr: 0x1000, size: 24, type_id: 0x2000, edges: 1 });
        p.push(&HeapNode { addr: 0x1018, size: 24, type_id: 0x2000, edges: 1 });
        let mut n = 0;
        assert!(unpack_nodes(&p.packed[..p.packed.len() - 1], 2, |_| n += 1).is_err());
        assert!(unpack_nodes(&p.packed, 3, |_| {}).is_err());
        assert!(unpack_nodes(&p.packed, 1, |_| {}).is_err());
        assert!(unpack_edges(&[0x80], 1, |_| {}).is_err());
        assert!(unpack_roots(&[2], 1, |_| {}).is_err());
    }
}
