//! The source panel's API (`GET /api/source?fn=NAME`): the selected method's source with each
//! line's self and total for the weight, threads and range asked — the query layer's
//! [`function_lines`] on the profile built with lines, annotated with the text the source finds
//! ([`ProfileSource::source_text`]: the file, the PDB's embedded source, or its Source Link URL).
//! The page colours each line by its share (the heat); it computes nothing.

use std::sync::{Arc, Mutex};

use clrprof_model::{Metric, Profile, TimeRange};
use clrprof_query::lines::{annotate, function_lines};
use clrprof_query::select::{self, Threads};
use serde_json::{json, Value};

use crate::api::ProfileSource;
use crate::request::{bad, ApiError, ApiResult};

/// Profiles built with lines, by range (the last few asked for).
#[derive(Default)]
pub(crate) struct LinesCache {
    items: Mutex<Vec<(TimeRange, Arc<Profile>)>>,
}

const KEPT: usize = 2;

impl LinesCache {
    fn get(&self, source: &dyn ProfileSource, range: TimeRange) -> Result<Arc<Profile>, ApiError> {
        if let Some((_, p)) = self.items.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(r, _)| *r == range) {
            return Ok(p.clone());
        }
        let p = source.profile_lines(range).ok_or_else(|| {
            bad("no source lines here: this source cannot build a profile with lines (a store's run, or an imported file)")
        })?;
        let p = Arc::new(p);
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        items.retain(|(r, _)| *r != range);
        items.insert(0, (range, p.clone()));
        items.truncate(KEPT);
        Ok(p)
    }
}

/// What the source panel is asked: the function, the weight, one thread or all, the range.
pub(crate) struct SourceQuery<'a> {
    pub function: &'a str,
    pub metric: Metric,
    /// `None`: every thread.
    pub thread: Option<u32>,
    pub range: TimeRange,
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// The answer of `/api/source`.
pub(crate) fn source(source: &dyn ProfileSource, cache: &LinesCache, q: &SourceQuery<'_>) -> ApiResult {
    let p = cache.get(source, q.range)?;
    let threads = q.thread.map_or_else(Threads::all, Threads::one);
    let fl = function_lines(&p, Some(q.metric), &threads, q.function)?;
    let m = fl.metric;
    let (text, note) = match source.source_text(&fl) {
        Ok(t) => (t, None),
        Err(e) => (None, Some(e)),
    };
    let tot = m.of(&fl.total);
    let rows: Vec<Value> = annotate(&fl, text.as_ref())
        .iter()
        .map(|l| {
            let (s, t) = (m.of(&l.self_cost), m.of(&l.total));
            json!({
                "line": l.line, "text": l.text, "self": s, "total": t,
                "self_percent": share(s, tot), "total_percent": share(t, tot),
                "count": select::measure(m, &l.total).0,
            })
        })
        .collect();
    Ok(json!({
        "weight": m.name(),
        "function": fl.function,
        "module": fl.module_path,
        "file": fl.file,
        "origin": text.as_ref().filter(|t| t.text.is_some()).map(|t| t.origin.clone()),
        "source_link": text.as_ref().and_then(|t| t.source_link.clone()),
        "note": note,
        "self": m.of(&fl.self_cost),
        "total": tot,
        "percent": share(tot, fl.grand_total),
        "lines": rows,
    }))
}
