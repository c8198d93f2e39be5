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
    pub(crate) fn get(&self, source: &dyn ProfileSource, range: TimeRange) -> Result<Arc<Profile>, ApiError> {
        self.try_get(source, range).ok_or_else(|| {
            bad("no source lines here: this source cannot build a profile with lines (a store's run, or an imported file)")
        })
    }

    /// The profile of `range` with lines, `None` when the source cannot build one.
    pub(crate) fn try_get(&self, source: &dyn ProfileSource, range: TimeRange) -> Option<Arc<Profile>> {
        if let Some((_, p)) = self.items.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(r, _)| *r == range) {
            return Some(p.clone());
        }
        let p = Arc::new(source.profile_lines(range)?);
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        items.retain(|(r, _)| *r != range);
        items.insert(0, (range, p.clone()));
        items.truncate(KEPT);
        Some(p)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Session;
    use crate::request::Params;
    use clrprof_model::{Cost, FrameKey, FrameKind, Function, Module, SourceLine};
    use clrprof_query::lines::{FunctionLines, SourceText};

    /// App.Work: line 10 with 3 samples, line 12 with 1; Main calls it from line 5.
    struct Lined {
        with_lines: bool,
    }

    fn lined() -> Profile {
        let mut p = Profile::default();
        p.modules.push(Module { id: 1, path: "/app/App.dll".into(), ..Default::default() });
        p.functions.push(Function {
            id: 200,
            name: "App.Work".into(),
            token: 0x0600_0002,
            module: 1,
            ..Default::default()
        });
        let st = &mut p.costs.stacks;
        let mut frame = |id: u64, name: &str, line: u32| {
            let f = st.intern_frame(FrameKey::Label(format!("{name}:{line}")));
            let fr = &mut st.frames[f.0 as usize];
            (fr.key, fr.kind, fr.name, fr.module) =
                (FrameKey::Function(id), FrameKind::Managed, name.into(), "App.dll".into());
            fr.line = Some(SourceLine { file: "/src/Work.cs".into(), line });
            f
        };
        let main = frame(100, "App.Main", 5);
        let (w10, w12) = (frame(200, "App.Work", 10), frame(200, "App.Work", 12));
        for (path, n) in [(vec![main, w10], 3u64), (vec![main, w12], 1)] {
            let s = p.costs.stacks.intern_stack(&path).unwrap();
            p.costs.add(7, s, &Cost { cpu_samples: n, cpu_ns: n * 1_000_000, ..Default::default() });
        }
        p
    }

    impl ProfileSource for Lined {
        fn profile(&self, _range: TimeRange) -> Profile {
            let mut p = lined();
            p.costs.stacks.frames.iter_mut().for_each(|f| f.line = None);
            p
        }
        fn profile_lines(&self, _range: TimeRange) -> Option<Profile> {
            self.with_lines.then(lined)
        }
        fn source_text(&self, f: &FunctionLines) -> Result<Option<SourceText>, String> {
            let text = (1..=14).map(|i| format!("text of line {i}\n")).collect();
            Ok(Some(SourceText {
                path: f.file.clone(),
                text: Some(text),
                origin: "embedded".into(),
                ..Default::default()
            }))
        }
    }

    fn ask(s: &Session, kv: &[(&str, &str)]) -> ApiResult {
        s.handle("source", &Params(kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()))
    }

    #[test]
    fn the_source_panel_gives_each_line_its_costs_and_text() {
        let s = Session::new("t".into(), Box::new(Lined { with_lines: true }), None);
        let r = ask(&s, &[("fn", "App.Work"), ("w", "cpu")]).unwrap();
        assert_eq!(
            (r["function"].as_str(), r["file"].as_str(), r["origin"].as_str()),
            (Some("App.Work"), Some("/src/Work.cs"), Some("embedded"))
        );
        assert_eq!((r["self"].as_u64(), r["total"].as_u64()), (Some(4_000_000), Some(4_000_000)));
        let lines = r["lines"].as_array().unwrap();
        // Lines 8..13: two of context above the first costed line, one below the last.
        assert_eq!(lines.iter().map(|l| l["line"].as_u64().unwrap()).collect::<Vec<_>>(), (8..=13).collect::<Vec<_>>());
        let l10 = &lines[2];
        assert_eq!(
            (l10["text"].as_str(), l10["self"].as_u64(), l10["self_percent"].as_f64()),
            (Some("text of line 10"), Some(3_000_000), Some(75.0))
        );
        assert_eq!(lines[4]["total_percent"].as_f64(), Some(25.0));
        assert_eq!(lines[3]["total"].as_u64(), Some(0));
        // Errors: no function, unknown function, a source without lines.
        assert_eq!(ask(&s, &[]).unwrap_err().status, 400);
        assert!(ask(&s, &[("fn", "Nope")]).unwrap_err().message.contains("no function named"));
        let none = Session::new("t".into(), Box::new(Lined { with_lines: false }), None);
        assert!(ask(&none, &[("fn", "App.Work")]).unwrap_err().message.contains("no source lines"));
    }
}
