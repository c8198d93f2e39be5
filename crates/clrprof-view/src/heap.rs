//! The viewer's heap API: a trace's heap snapshots, each analysed once on first use, and their views as
//! JSON — `/api/heap` (the snapshots), `/api/heap-types?snap=K&sort=`, `/api/heap-paths?snap=K&type=`
//! (the shortest paths to the type's instances and, in the same answer, their dominator chains: what
//! holds them exclusively), `/api/heap-dominators?snap=K&depth=&min=`. Snapshots are numbered from 1.

use std::sync::OnceLock;

use clrprof_heap::render::{self, Which};
use clrprof_heap::views::{self, DomOptions, PathsOptions, TypeSort};
use clrprof_heap::{Analysis, Snapshot};
use serde_json::{json, Value};

use crate::request::{ApiError, ApiResult, Params};

/// The heap snapshots of the viewed trace. They live as long as the viewer process (leaked once, so the
/// analyses, which borrow them, can be cached beside them).
pub struct HeapSnapshots {
    source: String,
    snaps: &'static [Snapshot],
    analyses: Vec<OnceLock<Analysis<'static>>>,
}

fn bad(message: String) -> ApiError {
    ApiError { status: 400, message }
}

impl HeapSnapshots {
    /// The snapshots of `source` (in trace order).
    pub fn new(source: String, snaps: Vec<Snapshot>) -> HeapSnapshots {
        let snaps: &'static [Snapshot] = Box::leak(snaps.into_boxed_slice());
        let analyses = snaps.iter().map(|_| OnceLock::new()).collect();
        HeapSnapshots { source, snaps, analyses }
    }

    /// How many snapshots.
    pub fn len(&self) -> usize {
        self.snaps.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.snaps.is_empty()
    }

    fn pick(&self, q: &Params) -> Result<(&Analysis<'static>, Which), ApiError> {
        if self.snaps.is_empty() {
            return Err(ApiError { status: 404, message: format!("{} holds no heap snapshot", self.source) });
        }
        let k = match q.get("snap") {
            Some(v) if !v.is_empty() => {
                v.parse::<usize>().map_err(|_| bad(format!("snap: '{v}' is no snapshot number")))?
            }
            _ => self.snaps.len(),
        };
        if k == 0 || k > self.snaps.len() {
            return Err(bad(format!(
                "snap {k}: the trace holds {} heap snapshot(s), numbered from 1",
                self.snaps.len()
            )));
        }
        let a = self.analyses[k - 1].get_or_init(|| Analysis::new(&self.snaps[k - 1]));
        Ok((a, Which { source: self.source.clone(), index: k, of: self.snaps.len() }))
    }

    /// Answers `/api/heap*`.
    pub fn handle(&self, what: &str, q: &Params) -> ApiResult {
        match what {
            "heap" => Ok(json!({
                "snapshots": self.snaps.iter().enumerate().map(|(i, s)| {
                    render::header_json(s, None, &Which { source: self.source.clone(), index: i + 1, of: self.snaps.len() })
                }).collect::<Vec<Value>>(),
            })),
            "heap-types" => {
                let (a, w) = self.pick(q)?;
                let sort =
                    TypeSort::parse(q.get("sort").filter(|s| !s.is_empty()).unwrap_or("retained")).map_err(bad)?;
                let rows = views::types(a, sort);
                let top = q.get("limit").and_then(|v| v.parse().ok()).or(Some(500));
                let mut v = render::types_json(a, &rows, top, &w);
                v["total_types"] = json!(rows.len());
                Ok(v)
            }
            "heap-paths" => {
                let (a, w) = self.pick(q)?;
                let name =
                    q.get("type").filter(|s| !s.is_empty()).ok_or_else(|| bad("heap-paths needs type=NAME".into()))?;
                let opts = PathsOptions { max_paths: 50 };
                let p = views::paths(a, name, &opts).map_err(bad)?;
                let d = views::dominator_paths(a, name, &opts).map_err(bad)?;
                let mut v = render::paths_json(a, &p, &w);
                v["dominator_chains"] = render::paths_json(a, &d, &w)["paths"].take();
                Ok(v)
            }
            "heap-dominators" => {
                let (a, w) = self.pick(q)?;
                let mut d = DomOptions::default();
                if let Some(depth) = q.get("depth").and_then(|v| v.parse().ok()) {
                    d.depth = depth;
                }
                if let Some(min) = q.get("min").and_then(|v| v.parse().ok()) {
                    d.min_percent = min;
                }
                let tree = views::dominator_tree(a, &d);
                Ok(render::dominators_json(a, &tree, &w))
            }
            _ => Err(ApiError { status: 404, message: "no such heap API".into() }),
        }
    }
}
