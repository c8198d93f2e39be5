//! The page's JSON API (documented in docs/viewer-api.md): each request's parameters become one
//! query-layer call, and its typed answer becomes JSON. Profiles per time range, stack views per
//! (range, weight, threads, transforms) and report documents per range are kept in small caches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use clrprof_model::samples::{SameGroup, SampleTime};
use clrprof_model::{Metric, Profile, TimeRange};
use clrprof_query::diff::Side;
use clrprof_query::engine::Transform;
use clrprof_query::explore::{HotspotQuery, HotspotSort, StackView, ThreadMode, ViewSpec};
use clrprof_query::select::{self, Threads};
use serde_json::{json, Value};

use crate::request::{bad, clip, ApiError, ApiResult, Params};

/// Where profiles come from: the trace (and a baseline) computed for a time range.
pub trait ProfileSource: Send + Sync {
    fn profile(&self, range: TimeRange) -> Profile;

    /// The profile of `range`, its `samples` left empty if [`each_sample`](Self::each_sample)
    /// yields them (the viewer reads them for the timeline only; a source that keeps its records
    /// then holds them once, not twice). By default [`profile`](Self::profile).
    fn profile_untimed(&self, range: TimeRange) -> Profile {
        self.profile(range)
    }

    /// Calls `f` with each sample record inside `range` and returns true, or returns false having
    /// called nothing (the default): the profiles carry their samples. With `same_group`, records
    /// of one thread and weight whose times lie in one group may come summed into one
    /// (`SampleData::each_sample`).
    fn each_sample(
        &self,
        _range: TimeRange,
        _same_group: Option<SameGroup<'_>>,
        _f: &mut dyn FnMut(SampleTime),
    ) -> bool {
        false
    }

    /// The profile of `range` with every frame at its source line, for the source panel (`None`,
    /// the default: this source has no lines).
    fn profile_lines(&self, _range: TimeRange) -> Option<Profile> {
        None
    }

    /// The source of a method (its file's text, the PDB's embedded source or Source Link URL);
    /// `Ok(None)` by default: no source is looked for.
    fn source_text(
        &self,
        _f: &clrprof_query::lines::FunctionLines,
    ) -> Result<Option<clrprof_query::lines::SourceText>, String> {
        Ok(None)
    }
}

/// A small most-recently-used cache.
struct Lru<K, V> {
    items: Vec<(K, Arc<V>)>,
    cap: usize,
}

impl<K: PartialEq + Clone, V> Lru<K, V> {
    fn new(cap: usize) -> Self {
        Lru { items: Vec::new(), cap }
    }

    fn get(&mut self, k: &K) -> Option<Arc<V>> {
        let i = self.items.iter().position(|(x, _)| x == k)?;
        let item = self.items.remove(i);
        let v = item.1.clone();
        self.items.insert(0, item);
        Some(v)
    }

    fn put(&mut self, k: K, v: Arc<V>) {
        self.items.retain(|(x, _)| x != &k);
        self.items.insert(0, (k, v));
        self.items.truncate(self.cap);
    }
}

#[derive(Clone, PartialEq, Debug)]
struct ViewKey {
    side: Side,
    range: TimeRange,
    metric: Metric,
    threads: ThreadMode,
    transforms: Vec<Transform>,
}

/// A loaded session: the trace, an optional baseline and the caches.
struct Loaded {
    trace_name: String,
    source: Box<dyn ProfileSource>,
    baseline: Option<(String, Box<dyn ProfileSource>)>,
    whole: Arc<Profile>,
    whole_baseline: Option<Arc<Profile>>,
    profiles: Mutex<Lru<(Side, TimeRange), Profile>>,
    views: Mutex<Lru<ViewKey, StackView>>,
    docs: Mutex<Lru<TimeRange, Value>>,
    lines: crate::source_panel::LinesCache,
}

/// True for thread-pool threads (grouped in the timeline).
fn is_pool_thread(name: &str) -> bool {
    name.contains(".NET TP Worker") || name.contains("ThreadPool") || name.contains(".NET Long Running Task")
}

impl Loaded {
    fn new(
        trace_name: String,
        source: Box<dyn ProfileSource>,
        baseline: Option<(String, Box<dyn ProfileSource>)>,
    ) -> Loaded {
        // Without their timed samples where the source yields them: the timeline reads them from
        // the source, nothing else here needs them.
        let whole = Arc::new(source.profile_untimed(TimeRange::ALL));
        let whole_baseline = baseline.as_ref().map(|(_, b)| Arc::new(b.profile_untimed(TimeRange::ALL)));
        Loaded {
            trace_name,
            source,
            baseline,
            whole,
            whole_baseline,
            profiles: Mutex::new(Lru::new(4)),
            views: Mutex::new(Lru::new(12)),
            docs: Mutex::new(Lru::new(2)),
            lines: Default::default(),
        }
    }

    /// Answers `GET /api/<what>?params`.
    pub fn handle(&self, what: &str, q: &Params) -> ApiResult {
        match what {
            "meta" => self.meta(),
            "hotspots" => self.hotspots(q),
            "tree" => self.tree(q),
            "butterfly" => self.butterfly(q),
            "entries" => self.entries(q),
            "flame" => self.flame(q),
            "timeline" => self.timeline(q),
            "table" => self.table(q),
            "diff" => self.diff(q),
            "source" => self.source(q),
            "sites" => self.sites(q),
            "requests" => self.requests(q),
            _ => Err(ApiError { status: 404, message: format!("no API '{}'", clip(what)) }),
        }
    }

    fn range(&self, q: &Params) -> Result<TimeRange, ApiError> {
        TimeRange::parse_ns(q.get("from"), q.get("to")).map_err(bad)
    }

    fn profile(&self, side: Side, range: TimeRange) -> Result<Arc<Profile>, ApiError> {
        if range.is_all() {
            return match side {
                Side::New => Ok(self.whole.clone()),
                Side::Base => self.whole_baseline.clone().ok_or_else(|| bad("no baseline: start with --baseline OLD")),
            };
        }
        if let Some(p) = self.profiles.lock().unwrap_or_else(|e| e.into_inner()).get(&(side, range)) {
            return Ok(p);
        }
        let p = Arc::new(match side {
            Side::New => self.source.profile_untimed(range),
            Side::Base => self
                .baseline
                .as_ref()
                .ok_or_else(|| bad("no baseline: start with --baseline OLD"))?
                .1
                .profile_untimed(range),
        });
        self.profiles.lock().unwrap_or_else(|e| e.into_inner()).put((side, range), p.clone());
        Ok(p)
    }

    fn metric(&self, q: &Params) -> Result<Metric, ApiError> {
        match q.get("w") {
            None => Ok(select::metric(&self.whole, None)),
            Some(w) => Metric::from_name(w).ok_or_else(|| {
                let names: Vec<&str> = Metric::sampled_first().map(Metric::name).collect();
                let (last, first) = names.split_last().expect("metrics");
                bad(format!("unknown weight '{}': {} or {last}", clip(w), first.join(", ")))
            }),
        }
    }

    fn spec(&self, q: &Params) -> Result<ViewSpec, ApiError> {
        let threads =
            match q.get("threads") {
                None | Some("merged") => ThreadMode::Merged,
                Some("each") => ThreadMode::PerThread,
                Some(t) => ThreadMode::Only(t.parse().map_err(|_| {
                    bad(format!("'threads' must be merged, each or an OS thread id, not '{}'", clip(t)))
                })?),
            };
        Ok(ViewSpec { metric: self.metric(q)?, threads, transforms: Transform::parse_list(q.get("t").unwrap_or(""))? })
    }

    fn view_of(&self, side: Side, q: &Params) -> Result<Arc<StackView>, ApiError> {
        let spec = self.spec(q)?;
        let range = self.range(q)?;
        let key = ViewKey {
            side,
            range,
            metric: spec.metric,
            threads: spec.threads.clone(),
            transforms: spec.transforms.clone(),
        };
        if let Some(v) = self.views.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(v);
        }
        let p = self.profile(side, range)?;
        let v = Arc::new(StackView::build(&p, &spec));
        self.views.lock().unwrap_or_else(|e| e.into_inner()).put(key, v.clone());
        Ok(v)
    }

    fn view(&self, q: &Params) -> Result<Arc<StackView>, ApiError> {
        self.view_of(Side::New, q)
    }

    fn weights(p: &Profile) -> Vec<Value> {
        let total = select::totals(p);
        Metric::sampled_first()
            .filter_map(|m| {
                let (count, value, estimated, note) = match select::event_stacks(p, m) {
                    Some(w) => (w.count, w.total, w.estimated, Some(w.note)),
                    None => {
                        let (count, value) = select::measure(m, &total);
                        (count, value, false, None)
                    }
                };
                let (label, unit) = clrprof_query::weighted_stacks::weight_name_and_unit(m);
                (value > 0 || count > 0).then(|| {
                    json!({"name": m.name(), "label": label, "unit": unit, "total": value, "count": count,
                           "estimated": estimated, "note": note})
                })
            })
            .collect()
    }

    fn meta(&self) -> ApiResult {
        let p = &self.whole;
        let (start, end) = p.span();
        let mut threads: Vec<Value> = p
            .costs
            .threads
            .iter()
            .map(|t| {
                let mut c = clrprof_model::Cost::default();
                for x in t.costs.values() {
                    c.add(&x);
                }
                let name = select::thread_name(p, t.os_tid);
                json!({"os_tid": t.os_tid, "name": name, "label": select::thread_label(p, t.os_tid),
                       "pool": is_pool_thread(&name), "cpu_ns": c.cpu_ns, "wall_ns": c.wall_ns,
                       "time_ns": c.time_ns, "calls": c.calls})
            })
            .collect();
        threads
            .sort_by_key(|t| std::cmp::Reverse(t["cpu_ns"].as_u64().unwrap_or(0) + t["time_ns"].as_u64().unwrap_or(0)));
        Ok(json!({
            "trace": self.trace_name,
            "command": p.process.command_line,
            "pid": p.process.pid,
            "runtime": p.process.runtime_version,
            "start_ns": start,
            "end_ns": end,
            "weights": Self::weights(p),
            "default_weight": select::metric(p, None).name(),
            "threads": threads,
            "messages": p.messages,
            "baseline": self.baseline.as_ref().map(|(n, _)| n.clone()),
            "wait_functions": clrprof_query::engine::WAIT_FUNCTIONS,
            "wait_symbols": clrprof_query::engine::WAIT_SYMBOLS,
            // Logical async stacks (`record --async`): wall views leave `[idle]` out by default.
            "async": p.asynchrony.is_some(),
            "idle_frame": clrprof_model::asynchrony::IDLE,
        }))
    }

    fn hotspots(&self, q: &Params) -> ApiResult {
        let v = self.view(q)?;
        let sort = match q.get("sort") {
            None | Some("self") => HotspotSort::SelfValue,
            Some("total") => HotspotSort::Total,
            Some("count") => HotspotSort::Count,
            Some("name") => HotspotSort::Name,
            Some(s) => return Err(bad(format!("unknown sort '{}': self, total, count or name", clip(s)))),
        };
        let page = v.hotspots(&HotspotQuery {
            sort,
            search: q.get("q").map(str::to_string),
            regex: q.flag("re"),
            offset: q.num("offset", 0)?,
            limit: q.num::<usize>("limit", 100)?.min(1000),
        })?;
        Ok(json!({"weight": v.metric.name(), "estimated": v.estimated, "note": v.note, "page": page}))
    }

    fn tree(&self, q: &Params) -> ApiResult {
        let v = self.view(q)?;
        let page =
            v.children(q.flag("inv"), q.num("node", 0)?, q.num("offset", 0)?, q.num::<usize>("limit", 50)?.min(1000))?;
        Ok(json!({"weight": v.metric.name(), "estimated": v.estimated, "note": v.note, "inverted": q.flag("inv"),
                   "page": page}))
    }

    fn butterfly(&self, q: &Params) -> ApiResult {
        let v = self.view(q)?;
        let f = q.get("fn").ok_or_else(|| bad("'fn' (a function name) is required"))?;
        let b = v.butterfly(f, q.num::<usize>("limit", 50)?.min(1000))?;
        Ok(json!({"weight": v.metric.name(), "estimated": v.estimated, "note": v.note, "function": b}))
    }

    fn entries(&self, q: &Params) -> ApiResult {
        let v = self.view(q)?;
        let mut e = v.entry_points();
        let count = e.len();
        e.truncate(q.num::<usize>("limit", 100)?.min(1000));
        Ok(json!({"weight": v.metric.name(), "estimated": v.estimated, "note": v.note, "total": v.total,
                   "count": count, "entries": e}))
    }

    fn flame(&self, q: &Params) -> ApiResult {
        let v = self.view(q)?;
        let f = v.flame(q.flag("inv"), q.num("node", 0)?, q.num("width", 1000)?, q.get("q"), q.flag("re"))?;
        Ok(json!({"weight": v.metric.name(), "estimated": v.estimated, "note": v.note, "flame": f}))
    }

    fn source(&self, q: &Params) -> ApiResult {
        let function = q.get("fn").ok_or_else(|| bad("'fn' (a function name) is required"))?;
        let thread = match self.spec(q)?.threads {
            ThreadMode::Only(t) => Some(t),
            _ => None,
        };
        let sq = crate::source_panel::SourceQuery { function, metric: self.metric(q)?, thread, range: self.range(q)? };
        crate::source_panel::source(&*self.source, &self.lines, &sq)
    }

    fn sites(&self, q: &Params) -> ApiResult {
        let function = q.get("fn").ok_or_else(|| bad("'fn' (a function name) is required"))?;
        let thread = match self.spec(q)?.threads {
            ThreadMode::Only(t) => Some(t),
            _ => None,
        };
        let sq = crate::source_panel::SourceQuery { function, metric: self.metric(q)?, thread, range: self.range(q)? };
        crate::sites::sites(&*self.source, &self.lines, &sq)
    }

    fn timeline(&self, q: &Params) -> ApiResult {
        let p = &self.whole;
        let (start, end) = p.span();
        let buckets = q.num::<u64>("buckets", 200)?.clamp(1, 2000);
        let bucket = (end.saturating_sub(start)).div_ceil(buckets).max(1);
        // Records whose times fall in one bucket may come summed (the time index's sums).
        let same = |a: u64, b: u64| a >= start && b >= start && (a - start) / bucket == (b - start) / bucket;
        let t = clrprof_query::timeline::timeline_with(p, &Threads::all(), Some(bucket), |f| {
            if !self.source.each_sample(TimeRange::ALL, Some(&same), f) {
                p.samples.iter().for_each(|s| f(SampleTime::from(s)));
            }
        });
        let n = t.buckets;
        let at = |ts: u64| (ts.saturating_sub(t.start_ns) / t.bucket_ns).min(n as u64 - 1) as usize;
        let mut exceptions = vec![0u64; n];
        let mut rows: Vec<Value> = Vec::new();
        let mut order: Vec<(u64, usize)> = Vec::new();
        for (i, th) in t.threads.iter().enumerate() {
            for (k, e) in th.exceptions.iter().enumerate() {
                exceptions[k] += e;
            }
            let activity: u64 = th.cpu_ns.iter().sum::<u64>() * 4 + th.wall_ns.iter().sum::<u64>();
            order.push((activity, i));
        }
        // Busy first; the thread pool grouped after the named threads of equal rank.
        order.sort_by_key(|&(a, i)| (is_pool_thread(&t.threads[i].name), std::cmp::Reverse(a), t.threads[i].os_tid));
        for (_, i) in order {
            let th = &t.threads[i];
            rows.push(json!({"os_tid": th.os_tid, "name": th.name, "label": select::thread_label(p, th.os_tid),
                             "pool": is_pool_thread(&th.name), "cpu_ns": th.cpu_ns, "wall_ns": th.wall_ns,
                             "exceptions": th.exceptions}));
        }
        let mut contention_ns = vec![0u64; n];
        for &(ts, _, ns) in &p.events.times.contentions {
            contention_ns[at(ts)] += ns;
        }
        let mut alloc_bytes = vec![0u64; n];
        for &(ts, _, b) in &p.events.times.allocations {
            alloc_bytes[at(ts)] += b;
        }
        let mut jit = vec![0u64; n];
        for f in &p.functions {
            if f.compilations > 0 && f.first_compiled_ns >= start && f.first_compiled_ns < end.max(start + 1) {
                jit[at(f.first_compiled_ns)] += 1;
            }
        }
        let mut markers = json!({"gc_pause_ns": t.gc_pause_ns, "gcs": t.gcs, "exceptions": exceptions,
                                 "jit": jit, "contention_ns": contention_ns, "alloc_bytes": alloc_bytes});
        // An --async trace: requests started and time blocked in waits, per bucket.
        if p.requests.recorded {
            let mut requests = vec![0u64; n];
            for r in p.requests.requests.iter().filter(|r| r.start_ns >= start) {
                requests[at(r.start_ns)] += 1;
            }
            let mut wait_ns = vec![0u64; n];
            for w in p.requests.waits.iter().filter(|w| w.start_ns >= start) {
                wait_ns[at(w.start_ns)] += w.end_ns - w.start_ns;
            }
            markers["requests"] = json!(requests);
            markers["wait_ns"] = json!(wait_ns);
        }
        Ok(json!({
            "start_ns": t.start_ns, "end_ns": t.end_ns, "bucket_ns": t.bucket_ns, "buckets": n,
            "threads": rows,
            "markers": markers,
        }))
    }

    fn document(&self, range: TimeRange) -> Result<Arc<Value>, ApiError> {
        if let Some(d) = self.docs.lock().unwrap_or_else(|e| e.into_inner()).get(&range) {
            return Ok(d);
        }
        // (Only the document's tables are served: its timeline, without the samples of an untimed
        // profile, is not.)
        let p = self.profile(Side::New, range)?;
        let doc = clrprof_query::document::document(&p, &Threads::all(), None);
        let v = Arc::new(serde_json::to_value(&doc).map_err(|e| ApiError { status: 500, message: e.to_string() })?);
        self.docs.lock().unwrap_or_else(|e| e.into_inner()).put(range, v.clone());
        Ok(v)
    }

    /// The requests view (`clrprof_query::requests`): endpoints, the `top` slowest requests
    /// (default 20), waits by site, the thread pool and its starvation note.
    fn requests(&self, q: &Params) -> ApiResult {
        let p = self.profile(Side::New, self.range(q)?)?;
        let top = q.num::<usize>("top", 20)?.min(1000);
        serde_json::to_value(clrprof_query::requests::requests(&p, top))
            .map_err(|e| ApiError { status: 500, message: e.to_string() })
    }

    /// One page of an event or GCP table, rows whose JSON text contains the search.
    fn table(&self, q: &Params) -> ApiResult {
        const TABLES: &[&str] = &[
            "exceptions",
            "gcs",
            "allocations",
            "allocation_sites",
            "contentions",
            "counters",
            "jit",
            "threads",
            "modules",
            "assemblies",
            "classes",
            "functions",
        ];
        let name = q.get("name").ok_or_else(|| bad(format!("'name' is required: {}", TABLES.join(", "))))?;
        if !TABLES.contains(&name) {
            return Err(bad(format!("unknown table '{}': {}", clip(name), TABLES.join(", "))));
        }
        let doc = self.document(self.range(q)?)?;
        let rows: &[Value] = match name {
            "counters" => doc["counters"]["rows"].as_array(),
            "jit" => doc["jit"]["il_sizes"].as_array(),
            n => doc[n].as_array(),
        }
        .map(Vec::as_slice)
        .unwrap_or(&[]);
        let matcher = clrprof_query::engine::Matcher::new(q.get("q"), q.flag("re"))?;
        let matching: Vec<&Value> = if matcher.active() {
            rows.iter().filter(|r| matcher.matches(&r.to_string())).collect()
        } else {
            rows.iter().collect()
        };
        let offset = q.num::<usize>("offset", 0)?;
        let limit = q.num::<usize>("limit", 100)?.min(1000);
        let mut columns: Vec<String> = Vec::new();
        if let Some(Value::Object(first)) = rows.first() {
            columns = first.keys().cloned().collect();
        }
        let summary = match name {
            "jit" => {
                let mut j = doc["jit"].clone();
                if let Some(o) = j.as_object_mut() {
                    o.remove("il_sizes");
                }
                j
            }
            "gcs" => doc["gc_totals"].clone(),
            "exceptions" => doc["exception_sampling"].clone(),
            _ => Value::Null,
        };
        Ok(json!({"name": name, "count": matching.len(), "offset": offset, "columns": columns,
                  "summary": summary,
                  "rows": matching.iter().skip(offset).take(limit).collect::<Vec<_>>()}))
    }

    fn diff(&self, q: &Params) -> ApiResult {
        if self.baseline.is_none() {
            return Err(bad("no baseline: start with --baseline OLD"));
        }
        let range = self.range(q)?;
        let new = self.profile(Side::New, range)?;
        let base = self.profile(Side::Base, range)?;
        let metric = q.get("w").map(|_| self.metric(q)).transpose()?;
        crate::diff::diff_json(
            &base,
            &new,
            &crate::diff::DiffAsk {
                metric,
                normalize: q.flag("normalize"),
                limit: q.num::<usize>("limit", 200)?.min(5000),
                search: q.get("q"),
                regex: q.flag("re"),
                width_px: q.num("width", 1000)?,
                node: q.num("node", 0)?,
                transforms: Transform::parse_list(q.get("t").unwrap_or(""))?,
            },
        )
    }
}

/// Where a run of a store stands, as `GET /api/status?run=ID` reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RunStatus {
    pub id: i64,
    /// Changes whenever the profile does (more data arrived, or the run ended): the page
    /// recomputes its views when it sees a new one.
    pub generation: u64,
    /// Trace bytes read so far.
    pub bytes: u64,
    /// Records decoded so far.
    pub records: u64,
    /// `running`, `complete` or `cut_off`.
    pub state: String,
}

/// A run being followed: a profile source over what arrived so far.
pub trait LiveRun: ProfileSource {
    /// Reads what the store received since the previous call and returns where the run stands.
    fn refresh(&self) -> Result<RunStatus, String>;
}

/// A run store as the viewer sees it (`sources::StoreCatalog` over `clrprof-collect`).
pub trait RunCatalog: Send + Sync {
    /// The store's runs as JSON objects (id, host, pid, command, start, end, bytes, state, …).
    fn runs(&self) -> Result<Vec<Value>, String>;
    /// Opens a run to view (`Err` with a message for an unknown run or an unreadable store).
    fn open(&self, id: i64) -> Result<Arc<dyn LiveRun>, String>;
}

/// The `ProfileSource` of a followed run (shared with the run's entry).
struct LiveSource(Arc<dyn LiveRun>);

impl ProfileSource for LiveSource {
    fn profile(&self, range: TimeRange) -> Profile {
        self.0.profile(range)
    }
}

/// An opened run: its source, the status last read and the views over that state.
struct OpenRun {
    live: Arc<dyn LiveRun>,
    status: RunStatus,
    loaded: Arc<Loaded>,
    refreshed: std::time::Instant,
    used: std::time::Instant,
}

/// The store behind `clrprof view --store`: runs are opened on first request and followed while
/// they grow.
struct StoreSession {
    name: String,
    catalog: Box<dyn RunCatalog>,
    open: Mutex<HashMap<i64, Arc<Mutex<OpenRun>>>>,
}

/// Runs kept open at once (the least recently used one is dropped beyond this).
const OPEN_RUNS: usize = 6;
/// A running run is re-read at most this often by requests other than `status`.
const REFRESH_EVERY: std::time::Duration = std::time::Duration::from_millis(1000);

fn run_error(e: String) -> ApiError {
    ApiError { status: 404, message: e }
}

impl StoreSession {
    fn entry(&self, id: i64) -> Result<Arc<Mutex<OpenRun>>, ApiError> {
        if let Some(e) = self.open.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
            return Ok(e.clone());
        }
        // Read outside the map's lock: a big run takes a while and other runs stay answerable.
        let live = self.catalog.open(id).map_err(run_error)?;
        let status = live.refresh().map_err(|e| ApiError { status: 500, message: e })?;
        let loaded = Arc::new(Loaded::new(format!("run:{id}"), Box::new(LiveSource(live.clone())), None));
        let now = std::time::Instant::now();
        let entry = Arc::new(Mutex::new(OpenRun { live, status, loaded, refreshed: now, used: now }));
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let entry = open.entry(id).or_insert(entry).clone();
        while open.len() > OPEN_RUNS {
            let oldest = open
                .iter()
                .filter(|(k, _)| **k != id)
                .min_by_key(|(_, v)| v.try_lock().map(|r| r.used).unwrap_or(now))
                .map(|(k, _)| *k);
            match oldest {
                Some(k) => open.remove(&k),
                None => break,
            };
        }
        Ok(entry)
    }

    /// The run's views, re-read first if it may have grown (`force`: always).
    fn current(&self, id: i64, force: bool) -> Result<(RunStatus, Arc<Loaded>), ApiError> {
        let entry = self.entry(id)?;
        let mut r = entry.lock().unwrap_or_else(|e| e.into_inner());
        r.used = std::time::Instant::now();
        let stale = r.status.state == "running" && r.refreshed.elapsed() >= REFRESH_EVERY;
        if force || stale {
            let status = r.live.refresh().map_err(|e| ApiError { status: 500, message: e })?;
            r.refreshed = std::time::Instant::now();
            if status.generation != r.status.generation {
                r.loaded = Arc::new(Loaded::new(format!("run:{id}"), Box::new(LiveSource(r.live.clone())), None));
            }
            r.status = status;
        }
        Ok((r.status.clone(), r.loaded.clone()))
    }

    fn handle(&self, what: &str, q: &Params) -> ApiResult {
        if what == "runs" {
            let runs = self.catalog.runs().map_err(|e| ApiError { status: 500, message: e })?;
            return Ok(json!({ "store": self.name, "runs": runs }));
        }
        let id: i64 = match q.get("run") {
            Some(r) => r.parse().map_err(|_| bad(format!("'run' is not a run id: '{}'", clip(r))))?,
            None => return Err(bad("'run' is required: a run id from /api/runs")),
        };
        if what == "status" {
            let (status, _) = self.current(id, true)?;
            return serde_json::to_value(status).map_err(|e| ApiError { status: 500, message: e.to_string() });
        }
        let (status, loaded) = self.current(id, false)?;
        let mut v = loaded.handle(what, q)?;
        if let Value::Object(o) = &mut v {
            o.insert("generation".into(), json!(status.generation));
            if what == "meta" {
                o.insert("run".into(), json!(status));
            }
        }
        Ok(v)
    }
}

/// One viewer session. It answers while the trace is still loading: every API request gets `503`
/// with the progress, which the page shows until the data is there. A store session
/// ([`Session::store`]) lists the store's runs and answers for any of them (`?run=ID`).
pub struct Session {
    trace_name: String,
    loaded: OnceLock<Loaded>,
    progress: Mutex<String>,
    store: Option<StoreSession>,
    /// The trace's heap snapshots (`/api/heap*`), once read.
    heap: OnceLock<crate::heap::HeapSnapshots>,
}

impl Session {
    /// A session whose trace is still being read ([`Session::finish`] completes it).
    pub fn loading(trace_name: String) -> Session {
        Session {
            trace_name,
            loaded: OnceLock::new(),
            progress: Mutex::new("starting".into()),
            store: None,
            heap: OnceLock::new(),
        }
    }

    /// A session over a run store: `/api/runs` lists its runs, every other API takes `run=ID`.
    pub fn store(store_name: String, catalog: Box<dyn RunCatalog>) -> Session {
        Session {
            trace_name: store_name.clone(),
            loaded: OnceLock::new(),
            progress: Mutex::new(String::new()),
            store: Some(StoreSession { name: store_name, catalog, open: Mutex::new(HashMap::new()) }),
            heap: OnceLock::new(),
        }
    }

    /// A session over loaded sources.
    pub fn new(
        trace_name: String,
        source: Box<dyn ProfileSource>,
        baseline: Option<(String, Box<dyn ProfileSource>)>,
    ) -> Session {
        let s = Session::loading(trace_name);
        s.finish(source, baseline);
        s
    }

    /// What loading has done so far, for the page.
    pub fn set_progress(&self, text: String) {
        *self.progress.lock().unwrap_or_else(|e| e.into_inner()) = text;
    }

    /// The sources are read: compute the whole-run profiles and start answering.
    pub fn finish(&self, source: Box<dyn ProfileSource>, baseline: Option<(String, Box<dyn ProfileSource>)>) {
        self.set_progress("computing the profile".into());
        let _ = self.loaded.set(Loaded::new(self.trace_name.clone(), source, baseline));
    }

    /// The trace's heap snapshots: the heap views answer from them (set before [`Session::finish`]).
    pub fn set_heap(&self, heap: crate::heap::HeapSnapshots) {
        let _ = self.heap.set(heap);
    }

    /// Answers `GET /api/<what>?params`.
    pub fn handle(&self, what: &str, q: &Params) -> ApiResult {
        if what.starts_with("heap") && self.store.is_none() {
            return match self.heap.get() {
                Some(h) => h.handle(what, q),
                None if self.loaded.get().is_some() => Ok(json!({ "snapshots": [] })),
                None => Err(ApiError { status: 503, message: format!("loading {}", self.trace_name) }),
            };
        }
        if let Some(s) = &self.store {
            return s.handle(what, q);
        }
        if what == "runs" {
            // Not a store: the page opens the trace.
            return Ok(json!({ "store": null, "runs": [] }));
        }
        if what == "status" {
            return Err(bad("not a store: `status` needs `clrprof view --store S`"));
        }
        match self.loaded.get() {
            Some(l) if what == "meta" => {
                // The page shows its Heap tab when the trace holds snapshots.
                let mut m = l.handle(what, q)?;
                m["heap_snapshots"] = json!(self.heap.get().map_or(0, |h| h.len()));
                Ok(m)
            }
            Some(l) => l.handle(what, q),
            None => Err(ApiError {
                status: 503,
                message: format!(
                    "loading {}: {}",
                    self.trace_name,
                    self.progress.lock().unwrap_or_else(|e| e.into_inner())
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_model::{NoSymbols, ProfileBuilder};
    use clrprof_trace::StreamDecoder;

    /// A run that grows by a third of a real trace per refresh, then ends.
    struct Growing {
        bytes: Vec<u8>,
        state: Mutex<(usize, u64, StreamDecoder, ProfileBuilder)>,
    }

    impl ProfileSource for Growing {
        fn profile(&self, range: TimeRange) -> Profile {
            self.state.lock().unwrap().3.profile(range, &mut NoSymbols)
        }
    }

    impl LiveRun for Growing {
        fn refresh(&self) -> Result<RunStatus, String> {
            let mut s = self.state.lock().unwrap();
            let (at, generation, decoder, builder) = &mut *s;
            if *at < self.bytes.len() {
                let end = (*at + self.bytes.len() / 3 + 1).min(self.bytes.len());
                let mut out = Vec::new();
                decoder.push(&self.bytes[*at..end], &mut out).map_err(|e| e.to_string())?;
                for r in &out {
                    builder.add(r);
                }
                *at = end;
                *generation += 1;
            }
            let state = if *at == self.bytes.len() { "complete" } else { "running" };
            Ok(RunStatus {
                id: 1,
                generation: *generation,
                bytes: *at as u64,
                records: builder.records(),
                state: state.into(),
            })
        }
    }

    struct OneRun(Vec<u8>);

    impl RunCatalog for OneRun {
        fn runs(&self) -> Result<Vec<Value>, String> {
            Ok(vec![json!({"id": 1, "state": "running"})])
        }
        fn open(&self, id: i64) -> Result<Arc<dyn LiveRun>, String> {
            if id != 1 {
                return Err(format!("no run {id} in this store"));
            }
            Ok(Arc::new(Growing {
                bytes: self.0.clone(),
                state: Mutex::new((0, 0, StreamDecoder::new(), ProfileBuilder::new())),
            }))
        }
    }

    /// A read trace whose profiles carry their samples (`untimed` false) or leave them to
    /// `each_sample` (true).
    struct Built(ProfileBuilder, bool);

    impl ProfileSource for Built {
        fn profile(&self, range: TimeRange) -> Profile {
            self.0.profile(range, &mut NoSymbols)
        }
        fn profile_untimed(&self, range: TimeRange) -> Profile {
            match self.1 {
                true => self.0.profile_untimed(range, &mut NoSymbols),
                false => self.profile(range),
            }
        }
        fn each_sample(&self, range: TimeRange, same: Option<SameGroup<'_>>, f: &mut dyn FnMut(SampleTime)) -> bool {
            self.1 && {
                self.0.each_sample(range, same, f);
                true
            }
        }
    }

    fn params(kv: &[(&str, &str)]) -> Params {
        Params(kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    fn cpu_count(meta: &Value) -> u64 {
        meta["weights"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["name"] == "cpu")
            .map_or(0, |w| w["count"].as_u64().unwrap())
    }

    #[test]
    fn a_store_session_follows_a_growing_run() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/traces/v1/sampled.clrprof");
        let bytes = std::fs::read(path).unwrap();
        let whole = {
            let mut d = StreamDecoder::new();
            let mut out = Vec::new();
            d.push(&bytes, &mut out).unwrap();
            let mut b = ProfileBuilder::new();
            out.iter().for_each(|r| b.add(r));
            b.profile(TimeRange::ALL, &mut NoSymbols)
        };
        let s = Session::store("test.db".into(), Box::new(OneRun(bytes.clone())));
        let runs = s.handle("runs", &params(&[])).unwrap();
        assert_eq!(runs["store"], "test.db");
        assert_eq!(runs["runs"][0]["id"], 1);
        // Opened: the first third.
        let run = params(&[("run", "1")]);
        let first = s.handle("meta", &run).unwrap();
        assert_eq!(first["run"]["generation"], 1);
        assert_eq!(first["run"]["state"], "running");
        assert_eq!(first["trace"], "run:1");
        // Each status reads more; the views are recomputed from it.
        let mut last = cpu_count(&first);
        for generation in [2, 3] {
            let st = s.handle("status", &run).unwrap();
            assert_eq!(st["generation"], generation);
            let meta = s.handle("meta", &run).unwrap();
            assert_eq!(meta["generation"], generation);
            assert!(cpu_count(&meta) >= last, "{generation}");
            last = cpu_count(&meta);
        }
        let end = s.handle("status", &run).unwrap();
        assert_eq!((end["state"].as_str(), end["bytes"].as_u64()), (Some("complete"), Some(bytes.len() as u64)));
        // All of it: the figures of a one-shot load.
        let hot = s.handle("hotspots", &params(&[("run", "1"), ("w", "cpu"), ("limit", "100000")])).unwrap();
        let total: u64 = hot["page"]["rows"].as_array().unwrap().iter().map(|r| r["self"].as_u64().unwrap()).sum();
        assert_eq!(total, select::totals(&whole).cpu_ns);
        assert_eq!(last, select::measure(Metric::Cpu, &select::totals(&whole)).0);
        // Errors.
        assert_eq!(s.handle("meta", &params(&[("run", "2")])).unwrap_err().status, 404);
        assert_eq!(s.handle("meta", &params(&[])).unwrap_err().status, 400);
        assert_eq!(s.handle("meta", &params(&[("run", "x")])).unwrap_err().status, 400);
        // A trace session says it is not a store.
        let t = Session::new(
            "t".into(),
            Box::new(Growing { bytes: vec![], state: Mutex::new((0, 0, StreamDecoder::new(), ProfileBuilder::new())) }),
            None,
        );
        assert!(t.handle("runs", &params(&[])).unwrap()["store"].is_null());
        assert_eq!(t.handle("status", &params(&[("run", "1")])).unwrap_err().status, 400);
    }

    #[test]
    fn untimed_profiles_answer_as_timed_ones() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/traces/v1/sampled.clrprof");
        let bytes = std::fs::read(path).unwrap();
        let built = || {
            let mut d = StreamDecoder::new();
            let mut out = Vec::new();
            d.push(&bytes, &mut out).unwrap();
            let mut b = ProfileBuilder::new();
            out.iter().for_each(|r| b.add(r));
            b
        };
        let timed = Session::new("t".into(), Box::new(Built(built(), false)), None);
        let untimed = Session::new("t".into(), Box::new(Built(built(), true)), None);
        // As `clrprof view` serves a trace: through the time index of its records.
        let indexed = {
            let b = built();
            b.prepare_index();
            b.prepare_ranges();
            Session::new("t".into(), Box::new(Built(b, true)), None)
        };
        let whole = built().profile(TimeRange::ALL, &mut NoSymbols);
        assert!(!whole.samples.is_empty());
        let (start, end) = whole.span();
        let (a, b) = ((start + (end - start) / 4).to_string(), (start + (end - start) / 2).to_string());
        let asks: Vec<(&str, Vec<(&str, &str)>)> = vec![
            ("meta", vec![]),
            ("timeline", vec![("buckets", "50")]),
            ("timeline", vec![("buckets", "2000")]),
            ("timeline", vec![]),
            ("hotspots", vec![("w", "cpu"), ("limit", "1000")]),
            ("hotspots", vec![("w", "wall"), ("from", &a), ("to", &b)]),
            ("tree", vec![("w", "cpu"), ("threads", "each")]),
            ("flame", vec![("w", "cpu"), ("width", "1400"), ("from", &a), ("to", &b)]),
            ("table", vec![("name", "threads")]),
            ("table", vec![("name", "functions"), ("from", &a), ("to", &b)]),
        ];
        for (what, kv) in &asks {
            let (x, y) = (timed.handle(what, &params(kv)).unwrap(), untimed.handle(what, &params(kv)).unwrap());
            assert_eq!(x, y, "{what} {kv:?}");
            assert_eq!(x, indexed.handle(what, &params(kv)).unwrap(), "{what} {kv:?} through the time index");
        }
        // The timeline holds every sample of the trace (not an empty answer twice).
        let tl = untimed.handle("timeline", &params(&[("buckets", "50")])).unwrap();
        let cpu: u64 = tl["threads"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["cpu_ns"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()))
            .sum();
        assert_eq!(cpu, whole.sampling.cpu_ns);
        assert!(cpu > 0);
    }
}
