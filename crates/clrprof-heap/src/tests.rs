//! Unit tests on hand-built graphs with known dominators, retained sizes and paths, and a check of the
//! Lengauer–Tarjan dominators against the definition (remove a node, see what becomes unreachable) on
//! random graphs.

use crate::views::{diff, dominator_paths, paths, types, PathsOptions, TypeSort};
use crate::{Analysis, RootKind, Snapshot, SnapshotBuilder, SnapshotInfo, UNREACHED, VIRTUAL_ROOT};

/// A graph from objects `(addr, type name, size)`, edges `(from, to)` and static roots `(addr, name)`.
fn graph(objs: &[(u64, &str, u64)], edges: &[(u64, u64)], roots: &[(u64, &str)]) -> Snapshot {
    let mut b = SnapshotBuilder::new();
    let mut names: Vec<&str> = Vec::new();
    for &(addr, ty, size) in objs {
        let id = match names.iter().position(|n| *n == ty) {
            Some(i) => i,
            None => {
                names.push(ty);
                names.len() - 1
            }
        } as u64
            + 100;
        b.object(addr, id, size);
    }
    for (i, n) in names.iter().enumerate() {
        b.type_name(i as u64 + 100, n);
    }
    for &(f, t) in edges {
        b.edge(f, t, None);
    }
    for &(a, name) in roots {
        b.root(a, RootKind::StaticField, name);
    }
    b.finish(SnapshotInfo { complete: true, ..SnapshotInfo::default() })
}

/// Object number of an address (objects are numbered in address order).
fn id(s: &Snapshot, addr: u64, all: &[u64]) -> u32 {
    let mut sorted = all.to_vec();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), s.object_count());
    sorted.iter().position(|a| *a == addr).unwrap() as u32
}

#[test]
fn diamond_shared_child_is_dominated_by_the_top() {
    // root → A → {B, C} → D → E
    let objs = [(10, "A", 1), (20, "B", 2), (30, "C", 4), (40, "D", 8), (50, "E", 16)];
    let s = graph(&objs, &[(10, 20), (10, 30), (20, 40), (30, 40), (40, 50)], &[(10, "S.a")]);
    let a = Analysis::new(&s);
    let all: Vec<u64> = objs.iter().map(|o| o.0).collect();
    let i = |x| id(&s, x, &all);
    assert_eq!(a.idom(i(10)), VIRTUAL_ROOT);
    assert_eq!(a.idom(i(20)), i(10));
    assert_eq!(a.idom(i(30)), i(10));
    assert_eq!(a.idom(i(40)), i(10));
    assert_eq!(a.idom(i(50)), i(40));
    assert_eq!(a.retained(i(10)), 31);
    assert_eq!(a.retained(i(20)), 2);
    assert_eq!(a.retained(i(30)), 4);
    assert_eq!(a.retained(i(40)), 24);
    assert_eq!(a.reachable, 5);
    assert_eq!(a.unreachable, 0);
}

#[test]
fn cycles_self_loops_and_unreachable_objects() {
    // root → A → B → C → A (cycle), C → C (self-loop), X → A unreachable (no root), Y alone.
    let objs = [(1, "A", 10), (2, "B", 20), (3, "C", 30), (4, "X", 40), (5, "Y", 50)];
    let s = graph(&objs, &[(1, 2), (2, 3), (3, 1), (3, 3), (4, 1)], &[(1, "S.a")]);
    let a = Analysis::new(&s);
    assert_eq!(a.idom(0), VIRTUAL_ROOT);
    assert_eq!(a.idom(1), 0);
    assert_eq!(a.idom(2), 1);
    assert_eq!(a.idom(3), UNREACHED);
    assert_eq!(a.idom(4), UNREACHED);
    assert_eq!(a.retained(0), 60);
    assert_eq!(a.retained(2), 30);
    assert_eq!((a.reachable, a.reachable_bytes), (3, 60));
    assert_eq!((a.unreachable, a.unreachable_bytes), (2, 90));
}

#[test]
fn two_roots_into_the_middle_share_what_they_reach() {
    // root1 → A → C, root2 → B → C; a root pointing straight at C's child D too.
    let objs = [(1, "A", 1), (2, "B", 1), (3, "C", 5), (4, "D", 7)];
    let s = graph(&objs, &[(1, 3), (2, 3), (3, 4)], &[(1, "S.a"), (2, "S.b"), (4, "S.d")]);
    let a = Analysis::new(&s);
    assert_eq!(a.idom(2), VIRTUAL_ROOT); // C: reached through A and through B
    assert_eq!(a.idom(3), VIRTUAL_ROOT); // D: rooted itself
    assert_eq!(a.retained(0), 1);
    assert_eq!(a.retained(2), 5);
    assert_eq!(a.retained(3), 7);
    // A and B share C (and so D, rooted itself too): the type "A or B"'s instances retain only
    // themselves, but with both gone C goes as well (D stays: a root holds it).
    let s2 = graph(
        &[(1, "S", 1), (2, "S", 2), (3, "C", 5), (4, "D", 7)],
        &[(1, 3), (2, 3), (3, 4)],
        &[(1, "S.a"), (2, "S.b"), (4, "S.d")],
    );
    let a2 = Analysis::new(&s2);
    let p = paths(&a2, "S", &PathsOptions::default()).unwrap();
    assert_eq!((p.retained, p.freed_if_all_gone), (3, 8));
    let d = dominator_paths(&a, "C", &PathsOptions::default()).unwrap();
    assert_eq!(d.paths.len(), 1);
    assert_eq!(d.paths[0].root_name, crate::views::SEVERAL_ROOTS);
    assert_eq!(d.paths[0].nodes.len(), 1);
}

#[test]
fn type_retained_counts_nested_instances_once() {
    // root → N1 → N2 → N3 (a linked list of Node), each Node → byte[] payload.
    let objs = [
        (1, "Node", 24),
        (2, "Node", 24),
        (3, "Node", 24),
        (11, "byte[]", 100),
        (12, "byte[]", 100),
        (13, "byte[]", 100),
    ];
    let s = graph(&objs, &[(1, 2), (2, 3), (1, 11), (2, 12), (3, 13)], &[(1, "S.head")]);
    let a = Analysis::new(&s);
    let rows = types(&a, TypeSort::Retained);
    let node = rows.iter().find(|r| r.name == "Node").unwrap();
    assert_eq!((node.count, node.size, node.retained), (3, 72, 372));
    let bytes = rows.iter().find(|r| r.name == "byte[]").unwrap();
    assert_eq!((bytes.count, bytes.size, bytes.retained), (3, 300, 300));
    assert_eq!(rows[0].name, "Node");
}

#[test]
fn edges_and_roots_to_unknown_objects_are_counted_not_kept() {
    let mut b = SnapshotBuilder::new();
    b.type_name(7, "T");
    b.object(0x1000, 7, 8);
    b.object(0x1000, 7, 8);
    b.object(0x2000, 9, 8);
    b.edge(0x1000, 0x3000, None);
    b.edge(0x5000, 0x1000, None);
    b.edge(0x1000, 0, None);
    b.edge(0x1000, 0x2000, Some("next"));
    b.root(0x1000, RootKind::Stack, "M");
    b.root(0x4000, RootKind::Stack, "M");
    let s = b.finish(SnapshotInfo::default());
    assert_eq!(s.object_count(), 2);
    assert_eq!(s.edge_count(), 1);
    assert_eq!(s.stats.dangling_edges, 2);
    assert_eq!(s.stats.dangling_roots, 1);
    assert_eq!(s.stats.duplicate_objects, 1);
    assert_eq!(s.stats.null_edges, 1);
    assert_eq!(s.stats.unnamed_types, 1);
    assert_eq!(s.type_name(s.type_of(1)), "[type 0x9]");
    assert_eq!(s.edge_field_name(0), Some("next"));
}

#[test]
fn weak_roots_do_not_retain() {
    let mut b = SnapshotBuilder::new();
    b.type_name(1, "T");
    b.object(0x10, 1, 8);
    b.object(0x20, 1, 8);
    b.root(0x10, RootKind::StrongHandle, "");
    b.root(0x20, RootKind::WeakHandle, "");
    let s = b.finish(SnapshotInfo::default());
    let a = Analysis::new(&s);
    assert_eq!(a.idom(0), VIRTUAL_ROOT);
    assert_eq!(a.idom(1), UNREACHED);
}

#[test]
fn big_objects_keep_their_size() {
    let mut b = SnapshotBuilder::new();
    b.type_name(1, "byte[]");
    b.object(0x10, 1, 5 << 32);
    b.object(0x20, 1, 3);
    b.edge(0x20, 0x10, None);
    b.root(0x20, RootKind::StaticField, "S.big");
    let s = b.finish(SnapshotInfo::default());
    assert_eq!(s.size_of(0), 5 << 32);
    assert_eq!(s.total_size(), (5 << 32) + 3);
    assert_eq!(Analysis::new(&s).retained(1), (5 << 32) + 3);
}

#[test]
fn a_two_million_long_list_neither_recurses_nor_overflows() {
    let n = 2_000_000u64;
    let mut b = SnapshotBuilder::new();
    b.type_name(1, "Node");
    for i in 0..n {
        b.object(16 * (i + 1), 1, 16);
        if i + 1 < n {
            b.edge(16 * (i + 1), 16 * (i + 2), Some("next"));
        }
    }
    b.root(16, RootKind::StaticField, "S.head");
    let s = b.finish(SnapshotInfo::default());
    let a = Analysis::new(&s);
    assert_eq!(a.retained(0), 16 * n);
    assert_eq!(a.retained((n - 1) as u32), 16);
    let p = paths(&a, "Node", &PathsOptions { max_paths: 3 }).unwrap();
    assert_eq!(p.instances, n);
    assert_eq!(p.paths.iter().map(|p| p.count).sum::<u64>() + p.more.1, n);
    assert_eq!(p.paths[2].nodes.len(), 3);
    assert_eq!(p.paths[2].nodes[2].field.as_deref(), Some("next"));
}

#[test]
fn paths_merge_by_types_and_name_their_root_and_fields() {
    // static Cache.Sessions → List → Session[] → 3 × Session; one more Session held by a stack root.
    let mut b = SnapshotBuilder::new();
    for (t, name) in [(1, "List<Session>"), (2, "Session[]"), (3, "Session"), (4, "Holder")] {
        b.type_name(t, name);
    }
    b.object(0x100, 1, 32);
    b.object(0x200, 2, 56);
    for i in 0..3 {
        b.object(0x300 + i * 0x10, 3, 24);
        b.edge(0x200, 0x300 + i * 0x10, None);
    }
    b.edge(0x100, 0x200, Some("_items"));
    b.object(0x400, 4, 24);
    b.object(0x500, 3, 24);
    b.edge(0x400, 0x500, Some("session"));
    b.root(0x100, RootKind::StaticField, "HeapLeak.Cache.Sessions");
    b.root(0x400, RootKind::Stack, "Program.Main");
    let s = b.finish(SnapshotInfo::default());
    let a = Analysis::new(&s);
    let p = paths(&a, "Session", &PathsOptions::default()).unwrap();
    assert_eq!(p.instances, 4);
    assert_eq!(p.paths.len(), 2);
    let first = &p.paths[0];
    assert_eq!(first.count, 3);
    assert_eq!(first.root_kind, RootKind::StaticField);
    assert_eq!(first.root_name, "HeapLeak.Cache.Sessions");
    let nodes: Vec<(&str, Option<&str>)> =
        first.nodes.iter().map(|n| (n.type_name.as_str(), n.field.as_deref())).collect();
    assert_eq!(nodes, vec![("List<Session>", None), ("Session[]", Some("_items")), ("Session", None)]);
    assert_eq!(p.paths[1].count, 1);
    assert_eq!(p.paths[1].root_name, "Program.Main");
    // What holds them exclusively: the same chains in the dominator tree (no fields there).
    let d = dominator_paths(&a, "Session", &PathsOptions::default()).unwrap();
    assert_eq!(d.paths.len(), 2);
    assert_eq!(d.paths[0].count, 3);
    assert_eq!(d.paths[0].root_name, "HeapLeak.Cache.Sessions");
    let types: Vec<&str> = d.paths[0].nodes.iter().map(|n| n.type_name.as_str()).collect();
    assert_eq!(types, vec!["List<Session>", "Session[]", "Session"]);
    // A short name finds the type when it is unique; an unknown one is a clear error.
    assert!(paths(&a, "Nope", &PathsOptions::default()).is_err());
}

#[test]
fn diff_counts_new_freed_and_grown_types() {
    let a = graph(&[(1, "A", 10), (2, "B", 5), (3, "B", 5)], &[], &[]);
    let b = graph(&[(1, "B", 5), (2, "C", 7), (3, "C", 7), (4, "B", 5), (5, "B", 5)], &[], &[]);
    let d = diff(&a, &b);
    let row = |n: &str| d.iter().find(|r| r.name == n).unwrap().clone();
    let (ra, rb, rc) = (row("A"), row("B"), row("C"));
    assert_eq!((ra.base_count, ra.new_count, ra.delta_size), (1, 0, -10));
    assert_eq!((rb.base_count, rb.new_count, rb.delta_count), (2, 3, 1));
    assert_eq!((rc.base_size, rc.new_size, rc.delta_size), (0, 14, 14));
    assert_eq!(d[0].name, "C"); // largest change in bytes first
}

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// Reachable set from the retaining roots, with object `skip` removed.
fn reach(s: &Snapshot, skip: Option<u32>) -> Vec<bool> {
    let mut seen = vec![false; s.object_count()];
    let mut stack: Vec<u32> = Vec::new();
    for r in s.roots() {
        if Some(r.obj) != skip && !seen[r.obj as usize] {
            seen[r.obj as usize] = true;
            stack.push(r.obj);
        }
    }
    while let Some(v) = stack.pop() {
        for &w in s.refs(v) {
            if Some(w) != skip && !seen[w as usize] {
                seen[w as usize] = true;
                stack.push(w);
            }
        }
    }
    seen
}

#[test]
fn dominators_match_the_definition_on_random_graphs() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..200 {
        let n = 2 + rng.next(40);
        let m = rng.next(3 * n);
        let mut b = SnapshotBuilder::new();
        b.type_name(0, "T");
        for i in 0..n {
            b.object(8 * (i + 1), 0, 1 + rng.next(100));
        }
        for _ in 0..m {
            b.edge(8 * (1 + rng.next(n)), 8 * (1 + rng.next(n)), None);
        }
        for _ in 0..1 + rng.next(3) {
            b.root(8 * (1 + rng.next(n)), RootKind::Stack, "");
        }
        let s = b.finish(SnapshotInfo::default());
        let a = Analysis::new(&s);
        let live = reach(&s, None);
        // dominated[d][v]: v is reachable without d's removal but not with it.
        let dominated: Vec<Vec<bool>> = (0..n as u32)
            .map(|d| {
                let r = reach(&s, Some(d));
                (0..n as usize).map(|v| live[v] && !r[v] && v != d as usize).collect()
            })
            .collect();
        for v in 0..n as usize {
            if !live[v] {
                assert_eq!(a.idom(v as u32), UNREACHED, "round {round}");
                continue;
            }
            // The immediate dominator is the strict dominator dominated by all the others.
            let doms: Vec<usize> = (0..n as usize).filter(|&d| dominated[d][v]).collect();
            let expected = doms.iter().copied().find(|&d| doms.iter().all(|&o| o == d || dominated[o][d]));
            let got = a.idom(v as u32);
            match expected {
                Some(d) => assert_eq!(got, d as u32, "round {round} object {v}"),
                None => assert_eq!(got, VIRTUAL_ROOT, "round {round} object {v}"),
            }
            // Retained: the shallow sizes of v and every object it dominates.
            let want: u64 = (0..n as usize).filter(|&w| w == v || dominated[v][w]).map(|w| s.size_of(w as u32)).sum();
            assert_eq!(a.retained(v as u32), want, "round {round} object {v}");
        }
    }
}

#[test]
fn empty_snapshots_and_snapshots_without_roots_give_empty_views() {
    for objs in [&[][..], &[(8u64, "T", 16u64), (16, "T", 16)][..]] {
        let s = graph(objs, &[(8, 16)], &[]);
        let a = Analysis::new(&s);
        assert_eq!(a.reachable, 0);
        assert_eq!(a.unreachable, objs.len() as u64);
        let rows = types(&a, TypeSort::Retained);
        assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), objs.len() as u64);
        assert!(rows.iter().all(|r| r.retained == 0));
        let tree = crate::views::dominator_tree(&a, &crate::views::DomOptions::default());
        assert!(tree.children.is_empty());
        if !objs.is_empty() {
            let p = paths(&a, "T", &PathsOptions::default()).unwrap();
            assert_eq!((p.instances, p.unreachable, p.paths.len()), (2, 2, 0));
        }
        let text =
            crate::render::types_text(&a, &rows, None, &crate::render::Which { source: "x".into(), index: 1, of: 1 });
        assert!(text.contains("reached from no reported root") || objs.is_empty(), "{text}");
    }
}

#[test]
fn incomplete_snapshots_say_their_figures_are_lower_bounds() {
    let mut b = SnapshotBuilder::new();
    b.type_name(1, "T");
    b.object(8, 1, 16);
    b.root(8, RootKind::StaticField, "S.t");
    let s = b.finish(SnapshotInfo { complete: false, dropped_events: 3, ..SnapshotInfo::default() });
    let a = Analysis::new(&s);
    let w = crate::render::Which { source: "x".into(), index: 1, of: 1 };
    let text = crate::render::types_text(&a, &types(&a, TypeSort::Retained), None, &w);
    assert!(
        text.contains("INCOMPLETE snapshot")
            && text.contains("3 heap-dump events lost")
            && text.contains("lower bound"),
        "{text}"
    );
    let json = crate::render::types_json(&a, &types(&a, TypeSort::Retained), None, &w);
    assert_eq!(json["snapshot"]["complete"], false);
    assert_eq!(json["snapshot"]["lower_bound"], true);
    assert_eq!(json["snapshot"]["dropped_events"], 3);
}

#[test]
fn a_path_through_a_list_writes_the_run_once_with_its_length() {
    let node = |t: &str, f: Option<&str>| crate::views::PathNode { type_name: t.into(), field: f.map(String::from) };
    let p = crate::views::PathRow {
        count: 1,
        root_kind: RootKind::StaticField,
        root_name: "Cells".into(),
        nodes: vec![
            node("Cell[]", None),
            node("Cell", None),
            node("Cell", Some("Next")),
            node("Cell", Some("Next")),
            node("Cell", Some("Next")),
            node("String", None),
        ],
    };
    assert_eq!(crate::render::path_line(&p), "static Cells → Cell[] → Cell.Next ×3 → Cell → String");
}
