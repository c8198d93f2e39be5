//! The baseline comparison the page shows: the delta table and the differential flame graph,
//! both from the query layer's diff ([`clrprof_query::diff`]); this module only cuts the tree
//! into cells a pixel or wider and shapes the JSON.

use clrprof_model::{Metric, Profile};
use clrprof_query::diff::{diff, diff_tree, DiffQuery, DiffTree, Side};
use clrprof_query::engine::{is_wait, Matcher, Transform};
use serde_json::{json, Value};

use crate::request::ApiError;

/// What the page asks of a diff.
pub struct DiffAsk<'a> {
    pub metric: Option<Metric>,
    pub normalize: bool,
    pub limit: usize,
    pub search: Option<&'a str>,
    pub regex: bool,
    pub width_px: u32,
    /// Zoom root of the differential flame graph (0: all).
    pub node: u32,
    /// Applied to both profiles alike.
    pub transforms: Vec<Transform>,
}

fn side(s: Option<Side>) -> Value {
    match s {
        Some(Side::Base) => json!("base"),
        Some(Side::New) => json!("new"),
        None => Value::Null,
    }
}

/// Cells of the differential flame graph under `node` (0: the whole graph, else a tree node's
/// index + 1, the cells' `id`): the new profile's shape (width = new inclusive value), each cell
/// with its inclusive change; children under a pixel merged into one `more` cell (its `id` is the
/// parent's: zoom there to see them). `path` is the breadcrumb from the top to `node`.
fn flame(t: &DiffTree, node: u32, width_px: u32, matcher: &Matcher) -> Result<Value, ApiError> {
    let whole: i64 = t.roots.iter().map(|&r| t.nodes[r as usize].new_total).sum();
    let (kids0, total, path) = if node == 0 {
        (t.roots.clone(), whole, Vec::new())
    } else {
        let n = t
            .nodes
            .get(node as usize - 1)
            .ok_or_else(|| ApiError { status: 404, message: format!("no diff node {node}") })?;
        let mut path = Vec::new();
        let mut cur = Some(node - 1);
        while let Some(c) = cur {
            let d = &t.nodes[c as usize];
            path.push(json!({"id": c + 1, "name": t.functions[d.function as usize].name}));
            cur = d.parent;
        }
        path.reverse();
        (vec![node - 1], n.new_total, path)
    };
    let scale = if total <= 0 { 0.0 } else { width_px.clamp(1, 20_000) as f64 / total as f64 };
    let mut cells = Vec::new();
    let mut matched = 0i64;
    // (children, parent id, x, depth, inside a match)
    let mut stack: Vec<(Vec<u32>, u32, i64, u32, bool)> = vec![(kids0, node, 0, 0, false)];
    while let Some((kids, parent, x0, depth, in_match)) = stack.pop() {
        let (mut x, mut hidden, mut hidden_w, mut hidden_x) = (x0, 0usize, 0i64, None);
        for k in kids {
            let n = &t.nodes[k as usize];
            if n.new_total <= 0 {
                continue;
            }
            if n.new_total as f64 * scale >= 1.0 {
                let f = &t.functions[n.function as usize];
                let is_match = matcher.active() && matcher.matches(&f.name);
                if is_match && !in_match {
                    matched += n.new_total;
                }
                cells.push(json!({"id": k + 1, "depth": depth, "x": x, "width": n.new_total, "name": f.name,
                    "module": f.module, "wait": is_wait(&f.name), "matched": is_match,
                    "more": 0, "base": n.base_total, "delta": n.new_total - n.base_total, "only": side(n.only_in)}));
                stack.push((n.children.clone(), k + 1, x, depth + 1, in_match || is_match));
                if cells.len() > 100_000 {
                    break;
                }
            } else {
                hidden += 1;
                hidden_w += n.new_total;
                hidden_x.get_or_insert(x);
            }
            x += n.new_total;
        }
        if hidden > 0 {
            cells.push(json!({"id": parent, "depth": depth, "x": hidden_x.unwrap_or(x), "width": hidden_w,
                "name": format!("{hidden} more"), "module": "", "wait": false, "matched": false, "more": hidden,
                "base": 0, "delta": 0, "only": null}));
        }
    }
    let pct = if whole > 0 { matched as f64 * 100.0 / whole as f64 } else { 0.0 };
    Ok(json!({"node": node, "path": path, "total": total, "view_total": whole, "matched": matched,
              "matched_percent": pct, "cells": cells}))
}

/// The delta table (sorted by |Δ|, rows matching the search) and the differential flame graph.
pub fn diff_json(base: &Profile, new: &Profile, ask: &DiffAsk) -> Result<Value, ApiError> {
    let q = DiffQuery {
        metric: ask.metric,
        normalize: ask.normalize,
        transforms: ask.transforms.clone(),
        ..Default::default()
    };
    let d = diff(base, new, &q);
    let matcher = Matcher::new(ask.search, ask.regex)?;
    let rows: Vec<Value> = d
        .functions
        .iter()
        .filter(|r| matcher.matches(&r.name))
        .take(ask.limit)
        .map(|r| {
            json!({"name": r.name, "module": r.module, "base": r.base, "new": r.new, "delta": r.delta,
                   "base_total": r.base_total, "new_total": r.new_total, "delta_total": r.delta_total,
                   "only": side(r.only_in), "calls": r.calls,
                   "calls_delta": r.calls.map(|c| c.delta),
                   "noise": r.noise})
        })
        .collect();
    let t = diff_tree(base, new, &q);
    Ok(json!({
        "weight": d.metric.name(), "unit": d.unit, "normalized": d.normalized, "scale": d.scale,
        "base_total": d.base_sum, "new_total": d.new_sum, "base_total_raw": d.base_sum_raw,
        "instrumented": d.calls, "count": d.count, "estimated": d.estimated, "functions": rows,
        "sum_noise": d.sum_noise, "min_samples": d.min_samples,
        "flame": flame(&t, ask.node, ask.width_px, &matcher)?,
    }))
}
