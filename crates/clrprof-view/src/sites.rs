//! The callers panel's call sites (`GET /api/sites?fn=NAME`): each caller of the selected function
//! with the lines it calls from, their exact calls and cost for the weight, threads and range
//! asked — the query layer's [`callers`] on the profile built with lines (the same rows as
//! `report --view callers`). The transforms do not apply: the sites are the untransformed trace's.

use clrprof_model::Metric;
use clrprof_query::costs::{callers, CostQuery};
use clrprof_query::select::{self, Threads};
use serde_json::{json, Value};

use crate::api::ProfileSource;
use crate::request::ApiResult;
use crate::source_panel::{LinesCache, SourceQuery};

/// The answer of `/api/sites`.
pub(crate) fn sites(source: &dyn ProfileSource, cache: &LinesCache, q: &SourceQuery<'_>) -> ApiResult {
    // No sites to give (not an error: the panel asks for every function it shows): the event
    // weights are per throw or wait stack, not in the call costs the sites are cut from; a source
    // without lines (a store's run) has none.
    let none = |note: String| Ok(json!({"weight": q.metric.name(), "with_sites": false, "note": note, "callers": []}));
    if matches!(q.metric, Metric::Exceptions | Metric::LockWait) {
        return none(format!("call sites have no {} figures", q.metric.name()));
    }
    let Some(p) = cache.try_get(source, q.range) else {
        return none("no source lines here: this source cannot build a profile with lines".into());
    };
    let threads = q.thread.map_or_else(Threads::all, Threads::one);
    let cq = CostQuery { metric: Some(q.metric), threads, ..Default::default() };
    let view = callers(&p, &cq, Some(q.function))?;
    let m = view.metric;
    let f = view.function.expect("callers answers the function it is asked");
    let rows: Vec<Value> = f
        .callers
        .iter()
        .map(|e| {
            let sites: Vec<Value> = e
                .sites
                .iter()
                .map(|s| {
                    json!({"file": s.file, "line": s.line, "calls": s.calls, "value": m.of(&s.cost),
                           "count": select::measure(m, &s.cost).0})
                })
                .collect();
            json!({"name": e.name, "entry": e.frame.is_none(), "calls": e.calls, "value": m.of(&e.cost),
                   "count": select::measure(m, &e.cost).0, "sites": sites})
        })
        .collect();
    let with_sites = f.callers.iter().any(|e| !e.sites.is_empty());
    Ok(json!({
        "weight": m.name(),
        "function": f.names.join(", "),
        "calls": f.calls,
        "total": m.of(&f.inclusive),
        "with_sites": with_sites,
        "callers": rows,
    }))
}

#[cfg(test)]
mod tests {
    use crate::api::{ProfileSource, Session};
    use crate::request::{ApiResult, Params};
    use clrprof_model::{Cost, FrameKey, FrameKind, Profile, SourceLine, TimeRange};

    /// Instrumented: App.Main calls App.Work 600 times from line 5 (6 ms) and 200 times from
    /// line 7 (2 ms); App.Other calls it 50 times from line 30 (1 ms).
    fn lined(with_lines: bool) -> Profile {
        let mut p = Profile::default();
        let st = &mut p.costs.stacks;
        let mut frame = |id: u64, name: &str, line: Option<u32>| {
            let at = line.filter(|_| with_lines).map(|line| SourceLine { file: "/src/App.cs".into(), line });
            let f = st.intern_frame_at(FrameKey::Function(id), at);
            let fr = &mut st.frames[f.0 as usize];
            (fr.kind, fr.name, fr.module) = (FrameKind::Managed, name.into(), "App.dll".into());
            f
        };
        let (main5, main7) = (frame(100, "App.Main", Some(5)), frame(100, "App.Main", Some(7)));
        let other = frame(300, "App.Other", Some(30));
        let work = frame(200, "App.Work", None);
        let mut add = |path: &[clrprof_model::FrameId], calls: u64, ms: u64| {
            let s = p.costs.stacks.intern_stack(path).unwrap();
            p.costs.add(7, s, &Cost { calls, time_ns: ms * 1_000_000, ..Default::default() });
        };
        add(&[main5, work], 600, 6);
        add(&[main7, work], 200, 2);
        add(&[main5, other, work], 50, 1);
        p
    }

    /// A caller: name, calls, value, its sites (line, calls, value).
    type CallerRow = (String, u64, u64, Vec<(u64, u64, u64)>);

    struct Lined {
        with_lines: bool,
    }

    impl ProfileSource for Lined {
        fn profile(&self, _range: TimeRange) -> Profile {
            lined(false)
        }
        fn profile_lines(&self, _range: TimeRange) -> Option<Profile> {
            self.with_lines.then(|| lined(true))
        }
    }

    fn ask(s: &Session, kv: &[(&str, &str)]) -> ApiResult {
        s.handle("sites", &Params(kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()))
    }

    #[test]
    fn each_caller_has_its_lines_with_their_exact_calls() {
        let s = Session::new("t".into(), Box::new(Lined { with_lines: true }), None);
        let r = ask(&s, &[("fn", "App.Work"), ("w", "time")]).unwrap();
        assert_eq!((r["weight"].as_str(), r["with_sites"].as_bool()), (Some("time"), Some(true)));
        assert_eq!((r["calls"].as_u64(), r["total"].as_u64()), (Some(850), Some(9_000_000)));
        let rows: Vec<CallerRow> = r["callers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let sites = c["sites"].as_array().unwrap().iter();
                (
                    c["name"].as_str().unwrap().to_string(),
                    c["calls"].as_u64().unwrap(),
                    c["value"].as_u64().unwrap(),
                    sites
                        .map(|s| {
                            (s["line"].as_u64().unwrap(), s["calls"].as_u64().unwrap(), s["value"].as_u64().unwrap())
                        })
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("App.Main".to_string(), 800, 8_000_000, vec![(5, 600, 6_000_000), (7, 200, 2_000_000)]),
                ("App.Other".to_string(), 50, 1_000_000, vec![(30, 50, 1_000_000)]),
            ]
        );
        assert_eq!(r["callers"][0]["sites"][0]["file"].as_str(), Some("/src/App.cs"));
        // The calls weight counts the same calls.
        let r = ask(&s, &[("fn", "App.Work"), ("w", "calls")]).unwrap();
        assert_eq!(r["callers"][0]["sites"][1]["value"].as_u64(), Some(200));
        // Errors: no function, an unknown one; no sites for an event weight or without lines.
        let r = ask(&s, &[("fn", "App.Work"), ("w", "exceptions")]).unwrap();
        assert_eq!(
            (r["with_sites"].as_bool(), r["note"].as_str()),
            (Some(false), Some("call sites have no exceptions figures"))
        );
        assert_eq!(ask(&s, &[]).unwrap_err().status, 400);
        assert!(ask(&s, &[("fn", "Nope")]).unwrap_err().message.contains("no function named"));
        let none = Session::new("t".into(), Box::new(Lined { with_lines: false }), None);
        let r = ask(&none, &[("fn", "App.Work")]).unwrap();
        assert_eq!(r["with_sites"].as_bool(), Some(false));
        assert!(r["note"].as_str().unwrap().contains("no source lines"), "{r}");
    }
}
