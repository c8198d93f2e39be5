//! The heap views of `clrprof report` (`--view types|dominators|paths`) and the snapshot form of
//! `clrprof diff`: loads a trace's heap snapshots (`clrprof-load`), picks one, and renders what
//! `clrprof-heap` computes. A trace without snapshots asking for them is a clear error.

use std::path::Path;

use anyhow::{bail, Context, Result};
use clrprof_heap::render::{self, Which};
use clrprof_heap::views::{self, DomOptions, PathsOptions, TypeSort};
use clrprof_heap::{Analysis, Snapshot};
use clrprof_report::{Format, View};

/// Which heap view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapView {
    Types,
    Dominators,
    Paths,
}

impl HeapView {
    /// The heap view a report view names, if it is one.
    pub fn of(v: View) -> Option<HeapView> {
        match v {
            View::Types => Some(HeapView::Types),
            View::Dominators => Some(HeapView::Dominators),
            View::Paths => Some(HeapView::Paths),
            _ => None,
        }
    }
}

/// The options of the heap views (from `clrprof report`'s flags).
#[derive(Clone, Debug)]
pub struct HeapOptions {
    /// `--snapshot K`: 1-based; `None` = the last.
    pub snapshot: Option<usize>,
    /// `--sort` of the types view.
    pub sort: TypeSort,
    /// `--type NAME` of the paths view.
    pub type_name: Option<String>,
    /// `--top N`: rows of the types view and diff, paths of the paths view, children per node of the
    /// dominator tree.
    pub top: Option<usize>,
    /// `--depth N` of the dominator tree.
    pub depth: Option<usize>,
    /// `--min-percent P` of the dominator tree.
    pub min_percent: f64,
    pub format: Format,
}

/// Loads every heap snapshot of a trace (in trace order), with its name for headers.
pub fn load_snapshots(path: &Path, read: &crate::load::ReadOptions) -> Result<Vec<Snapshot>> {
    let input = crate::load::trace_source(path, read.store.as_deref())?;
    clrprof_load::heap::heap_snapshots(input.source)
        .with_context(|| format!("cannot read the heap snapshots of {}", input.label))
}

/// Picks snapshot `k` (1-based) or the last, with a clear error when there is none.
fn pick<'a>(snaps: &'a [Snapshot], k: Option<usize>, source: &str) -> Result<(&'a Snapshot, Which)> {
    if snaps.is_empty() {
        bail!("{source} holds no heap snapshot: take one with `clrprof heap PID` or `record --heap-snapshot-at TIME`");
    }
    let index = k.unwrap_or(snaps.len());
    if index == 0 || index > snaps.len() {
        bail!("--snapshot {index}: {source} holds {} heap snapshot(s), numbered from 1", snaps.len());
    }
    Ok((&snaps[index - 1], Which { source: source.to_string(), index, of: snaps.len() }))
}

fn json_text(v: &serde_json::Value) -> Result<String> {
    let mut s = serde_json::to_string_pretty(v)?;
    s.push('\n');
    Ok(s)
}

/// `clrprof report FILE --view types|dominators|paths`.
pub fn report(trace: &Path, read: &crate::load::ReadOptions, view: HeapView, o: &HeapOptions) -> Result<String> {
    if o.format == Format::Csv {
        bail!("--format csv is not available for the heap views (text or json)");
    }
    if view == HeapView::Paths && o.type_name.is_none() {
        bail!("--view paths needs --type NAME (a type of the types view: full name, or a unique last part)");
    }
    let source = trace.display().to_string();
    let snaps = load_snapshots(trace, read)?;
    let (snap, which) = pick(&snaps, o.snapshot, &source)?;
    let a = Analysis::new(snap);
    let json = o.format == Format::Json;
    Ok(match view {
        HeapView::Types => {
            let rows = views::types(&a, o.sort);
            if json {
                json_text(&render::types_json(&a, &rows, o.top, &which))?
            } else {
                render::types_text(&a, &rows, o.top, &which)
            }
        }
        HeapView::Dominators => {
            let mut d = DomOptions::default();
            if let Some(depth) = o.depth {
                d.depth = depth;
            }
            d.min_percent = o.min_percent;
            if let Some(top) = o.top {
                d.max_children = top;
            }
            let tree = views::dominator_tree(&a, &d);
            if json {
                json_text(&render::dominators_json(&a, &tree, &which))?
            } else {
                render::dominators_text(&a, &tree, &which)
            }
        }
        HeapView::Paths => {
            let name = o.type_name.as_deref().unwrap_or_default();
            let p = PathsOptions { max_paths: o.top.unwrap_or(if json { 0 } else { 20 }) };
            let v = views::paths(&a, name, &p).map_err(anyhow::Error::msg)?;
            if json {
                json_text(&render::paths_json(&a, &v, &which))?
            } else {
                render::paths_text(&a, &v, &which)
            }
        }
    })
}

/// Whether a file holds heap snapshots (then `clrprof diff` compares snapshots).
pub fn has_snapshots(path: &Path, read: &crate::load::ReadOptions) -> bool {
    load_snapshots(path, read).map(|s| !s.is_empty()).unwrap_or(false)
}

/// A heap snapshot diff: its text (none for `format` `None`), its rows (for `--fail-if`), and
/// which snapshots were compared.
pub struct HeapDiff {
    pub text: String,
    pub rows: Vec<clrprof_heap::views::DiffRow>,
    pub base: String,
    pub new: String,
}

/// `clrprof diff A [B]` on heap snapshots: with one file its last two snapshots (or `--snapshots I,J`),
/// with two the last of each (or snapshot I of A and J of B); `format` `None` renders nothing.
pub fn diff(
    old: &Path,
    new: Option<&Path>,
    read: &crate::load::ReadOptions,
    pair: Option<(usize, usize)>,
    top: Option<usize>,
    format: Option<Format>,
) -> Result<HeapDiff> {
    if format == Some(Format::Csv) {
        bail!("--format csv is not available for a heap diff (text or json)");
    }
    let old_src = old.display().to_string();
    let a = load_snapshots(old, read)?;
    let b_loaded;
    let (b, new_src) = match new {
        Some(p) => {
            b_loaded = load_snapshots(p, read)?;
            (&b_loaded, p.display().to_string())
        }
        None => (&a, old_src.clone()),
    };
    let (i, j) = match (pair, new) {
        (Some(p), _) => (Some(p.0), Some(p.1)),
        (None, Some(_)) => (None, None),
        (None, None) => {
            if a.len() < 2 {
                bail!(
                    "{old_src} holds {} heap snapshot(s): a diff of one file needs two (or give a second file)",
                    a.len()
                );
            }
            (Some(a.len() - 1), Some(a.len()))
        }
    };
    let (base, wb) = pick(&a, i, &old_src)?;
    let (newer, wn) = pick(b, j, &new_src)?;
    let rows = views::diff(base, newer);
    let text = match format {
        Some(Format::Json) => json_text(&render::diff_json((base, &wb), (newer, &wn), &rows, top))?,
        Some(_) => render::diff_text((base, &wb), (newer, &wn), &rows, top),
        // The markdown summary is the caller's (the gate's).
        None => String::new(),
    };
    let name = |w: &Which| format!("{} (snapshot {} of {})", w.source, w.index, w.of);
    Ok(HeapDiff { text, rows, base: name(&wb), new: name(&wn) })
}

/// Parses `--snapshots I,J`.
pub fn parse_pair(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s.split_once(',').ok_or("expected two snapshot numbers: I,J (e.g. 1,2)")?;
    let n = |x: &str| x.trim().parse::<usize>().map_err(|_| format!("'{x}' is no snapshot number (1, 2, …)"));
    let (a, b) = (n(a)?, n(b)?);
    if a == 0 || b == 0 {
        return Err("snapshots are numbered from 1".into());
    }
    Ok((a, b))
}

/// Parses `--sort`.
pub fn parse_sort(s: &str) -> Result<TypeSort, String> {
    TypeSort::parse(s)
}
